//! Concurrency-control engines, one module each.

pub mod locking;
pub mod nocc;
pub mod omid;
