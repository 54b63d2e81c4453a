//! # litmus-protocol: the deterministic protocol core
//!
//! Every role is a [`Machine`] — `step(input, now) -> effects`, no I/O, no clocks, no threads,
//! seeded randomness (see [`machine`]). This crate holds the roles and the plug point that
//! engines implement; each engine is a crate of its own (`crates/engines/*`), listed by the
//! registry crate `litmus-engines`:
//!
//! * [`Partition`] — a shard: store + engine + log (see [`partition`]).
//! * [`Coordinator`] — runs transactions for clients: procedures, interactive transactions,
//!   validation, routing, commit (see [`coordinator`]).
//! * [`ClientSession`] — request ids and timeouts for client libraries (see [`client`]).
//! * [`procedure`] — stored procedures written once against [`Ctx`], polled by a tiny executor.
//! * [`engine`] — the two-halved [`engine::CoordinatorEngine`] / [`engine::PartitionEngine`]
//!   plug point, and [`EngineKind`], a handle on one engine.
//! * [`capability`] — what only some engines do (BASE transactions, one-round transactions,
//!   role traffic, grouped issue), each an optional trait.
//! * [`message`] and [`wire`] — the messages and their framed encoding.

pub mod bounded;
pub mod builtin;
pub mod capability;
pub mod client;
pub mod coordinator;
pub mod engine;
pub mod fragment;
pub mod machine;
pub mod message;
pub mod minitxn;
pub mod op;
pub mod page;
pub mod partition;
pub mod payload;
pub mod procedure;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod wire;

pub use client::ClientSession;
pub use coordinator::{Coordinator, CoordinatorConfig};
pub use engine::{EngineDef, EngineKind};
pub use machine::{Effects, Input, Machine};
pub use message::{Addr, Envelope, GroupId, Message, Payload, RoleId};
pub use op::{Op, OpResult};
pub use partition::Partition;
pub use procedure::{Ctx, Registry};
