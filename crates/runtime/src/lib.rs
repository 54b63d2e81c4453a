//! # litmus-runtime: three ways to drive the same state machines
//!
//! * [`sim`] — the deterministic simulator: virtual time, a seeded network model (latency,
//!   loss, duplication, reordering, partitions), crashes that lose the unsynced log tail, clock
//!   skew. A failing run prints its seed; `litmus sim --seed N` replays it bit for bit.
//! * [`embedded`] — a whole cluster in one process on a few threads, with an injected one-way
//!   network delay; the default for the CLI and benchmarks.
//! * [`tcp`] — one process per node, framed binary protocol over TCP (tokio only here).
//!
//! The runtimes do all the I/O the machines may not do, and they all keep the one ordering rule
//! of [`litmus_protocol::machine`]: persist before send ([`host::Host`]).

pub mod cost;
mod due;
pub mod embedded;
pub mod host;
pub mod latency;
pub mod ports;
pub mod replica;
pub mod sim;
pub mod tcp;
pub mod tls;
pub mod topology;
pub mod transport;

pub use topology::{ClusterSpec, Topology};
pub use transport::Transport;
