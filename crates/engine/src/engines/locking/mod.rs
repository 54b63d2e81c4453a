//! The locking engine (strict 2PL + 2PC at the four ANSI levels, and Salt BASE transactions).
//! Being written; see `lock.rs` for the lock manager.

pub mod lock;
