//! Concurrency-control engines, one module each.

pub mod nocc;
