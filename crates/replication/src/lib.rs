//! # Replica groups
//!
//! (module doc written below)

mod config;
mod error;
mod group;
mod storage;
mod types;
mod wire;

pub use config::*;
pub use error::Error;
pub use group::{ReplicaGroup, Role};
pub use types::*;
pub use wire::*;
