//! Messages between roles. Every message is plain data (serde), so the same values travel over
//! channels (embedded runtime), through the simulated network and over TCP.
//!
//! ```text
//!  client ──ClientRequest──► coordinator ──PartitionRequest──► partition
//!         ◄─ClientResponse──             ◄──PartitionReply────
//! ```
//!
//! Engine-specific bodies are [`Payload`]s: typed values inside the engine, opaque to the roles
//! and runtimes (see [`crate::payload`]). Roles an engine adds (Omid's status oracle) are
//! addressed as [`Addr::Role`] and talk in [`Message::Role`] payloads. Adding an engine changes
//! nothing here.

use crate::op::{Op, OpResult};
pub use crate::payload::Payload;
use litmus_core::{ClientId, Error, Isolation, NodeId, PartitionId, RequestId, TxnId, Value};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Where a message goes. The runtime maps addresses to threads, simulated nodes or sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Addr {
    Client(ClientId),
    Coordinator(NodeId),
    Partition(PartitionId),
    /// A role an engine adds to the cluster (e.g. Omid's status oracle), placed
    /// by [`RoleId::node`]; the engine's [`crate::engine::EngineDef::roles`] builds its machines.
    Role(RoleId),
    /// One member of a replica group: the member on a given node of the group of a replicated
    /// partition, coordinator or role (see `docs/replication.md`). Machines never address it: they
    /// send to [`Addr::Partition`] or [`Addr::Coordinator`], which the runtime delivers to the
    /// group's leader it knows or to the group's home member, and that one serves or forwards
    /// to its leader. Replicas address each other (raft traffic, forwarded requests) this way.
    Replica(GroupId, NodeId),
}

/// A replica group: what one raft group keeps, a partition or a coordinator's decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum GroupId {
    Partition(PartitionId),
    Coordinator(NodeId),
    /// An engine's role ([`crate::engine::EngineDef::replicated_roles`]), e.g. Omid's status
    /// oracle.
    Role(RoleId),
}

impl GroupId {
    /// The address the group's machine answers to, whichever member leads.
    pub fn addr(self) -> Addr {
        match self {
            GroupId::Partition(p) => Addr::Partition(p),
            GroupId::Coordinator(n) => Addr::Coordinator(n),
            GroupId::Role(r) => Addr::Role(r),
        }
    }

    /// The group whose machine answers to `addr`, if any machine of a group does.
    pub fn of(addr: Addr) -> Option<GroupId> {
        match addr {
            Addr::Partition(p) => Some(GroupId::Partition(p)),
            Addr::Coordinator(n) => Some(GroupId::Coordinator(n)),
            Addr::Role(r) => Some(GroupId::Role(r)),
            Addr::Replica(g, _) => Some(g),
            Addr::Client(_) => None,
        }
    }
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupId::Partition(p) => write!(f, "{p}"),
            GroupId::Coordinator(n) => write!(f, "coord-{n}"),
            GroupId::Role(r) => write!(f, "role-{}", r.0),
        }
    }
}

/// An engine-defined role. Role `r` runs on node `r mod nodes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RoleId(pub u16);

impl RoleId {
    /// The node this role runs on in a cluster of `nodes` nodes (the one placement rule).
    pub fn node(self, nodes: u32) -> NodeId {
        NodeId(u32::from(self.0) % nodes.max(1))
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Client(c) => write!(f, "{c}"),
            Addr::Coordinator(n) => write!(f, "coord-{n}"),
            Addr::Partition(p) => write!(f, "{p}"),
            Addr::Role(r) => write!(f, "role-{}", r.0),
            Addr::Replica(g, n) => write!(f, "{g}@node-{}", n.0),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub from: Addr,
    pub to: Addr,
    pub msg: Message,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Message {
    ClientRequest(ClientRequest),
    ClientResponse(ClientResponse),
    PartitionRequest(PartitionRequest),
    PartitionReply(PartitionReply),
    /// Engine-defined traffic to, from or between the engine's own roles ([`Addr::Role`]), e.g.
    /// Omid's oracle requests, replies and replication. Coordinators hand it to their engine.
    Role(Payload),
    /// Every partition request or reply one machine step sent to the same coordinator or
    /// partition, in the order sent ([`crate::machine::Effects::batch_sends`]): a procedure's
    /// operations issued together travel to each partition in one message, and the replies a
    /// partition step produced for one coordinator go back in one. The receiver
    /// handles the items in order, as it would the messages one by one. Its items are not
    /// messages, so a batch cannot nest.
    Batch(Vec<Batched>),
    /// Traffic between the replicas of one partition's replica group: an encoded
    /// `litmus_replication::WireMessage` (raft messages and snapshot chunks, each under the
    /// frame limit).
    Raft(Vec<u8>),
    /// From a replica group's leader to a follower, sent by its node's runtime from outside the
    /// node's protocol thread while that thread is busy in a long step (`docs/replication.md`,
    /// "Fortification"): the leader of `term` is alive and its node is making progress, so the
    /// follower holds off its election timer for a short while instead of campaigning against a
    /// leader that is only slow.
    Fortify {
        term: u64,
    },
}

/// One item of a [`Message::Batch`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Batched {
    Request(PartitionRequest),
    Reply(PartitionReply),
}

impl Message {
    /// The message as a batch item, if it is one that batches (partition requests and replies).
    /// A message that does not batch comes back whole, by value: boxing it would cost an
    /// allocation per unbatched message on the send path.
    #[allow(clippy::result_large_err)]
    pub fn into_batched(self) -> Result<Batched, Message> {
        match self {
            Message::PartitionRequest(r) => Ok(Batched::Request(r)),
            Message::PartitionReply(r) => Ok(Batched::Reply(r)),
            other => Err(other),
        }
    }
}

/// A request from a client session. `id` is unique per client and echoed in the response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientRequest {
    pub id: RequestId,
    pub body: RequestBody,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RequestBody {
    /// Run a registered stored procedure as one transaction.
    Call {
        procedure: String,
        args: Vec<Value>,
        /// How long the client has been retrying this call after retryable aborts (zero on a
        /// first attempt). The coordinator backdates the transaction's priority by it, capped at
        /// [`crate::coordinator::RETRY_PRIORITY_CREDIT_MAX`]: engines that resolve conflicts by
        /// age (wait-die) then treat the retry as the age of its first attempt, so a transaction
        /// that keeps losing eventually becomes the oldest and wins instead of starving.
        retrying_for: Duration,
    },
    /// Start an interactive transaction at an isolation level (engines without a choice ignore it).
    Begin {
        isolation: Isolation,
        /// How long the client has been retrying this transaction after retryable aborts (zero
        /// on a first attempt): the transaction's priority is backdated by it, as a
        /// [`RequestBody::Call`]'s is.
        retrying_for: Duration,
    },
    /// One operation of an interactive transaction.
    Op { txn: TxnId, op: Op },
    /// Commit an interactive transaction.
    Commit { txn: TxnId },
    /// Abort an interactive transaction.
    Rollback { txn: TxnId },
    /// A read as its own one-round read transaction, on the engines that take one-round
    /// transactions whole (the only way to read on those that run nothing else, e.g.
    /// `granola`): an [`Op::ScanPage`], answered `Op(OpResult::Page)` (see [`crate::page`]), or
    /// a point [`Op::Read`], answered `Op(OpResult::Row)`. Elsewhere refused as `Unsupported`: read in an interactive transaction.
    Read { op: Op },
    /// The client's connection closed (the runtime says so, not the client): its interactive
    /// transactions that have not begun to finish roll back, as PostgreSQL rolls back a closed
    /// session's transaction, so their locks go at once. Never answered.
    Disconnected,
    /// A minitransaction (Sinfonia §3, [`crate::minitxn`]): compare items checked and write
    /// items applied in one one-round transaction, on the engines that take one-round
    /// transactions whole; answered `Returned([])`, or a retryable abort when a compare
    /// failed. Elsewhere refused as `Unsupported`.
    Minitransaction(crate::minitxn::Minitransaction),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientResponse {
    pub id: RequestId,
    pub result: Result<ResponseBody, Error>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ResponseBody {
    /// A procedure committed and returned these values.
    Returned(Vec<Value>),
    Begun(TxnId),
    Op(OpResult),
    Committed,
    RolledBack,
}

/// Identifies one per-partition piece of one operation of one transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SubOpId {
    pub txn: TxnId,
    pub op: u32,
    pub part: PartitionId,
}

/// Coordinator → partition (or partition → partition) engine payload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartitionRequest {
    pub body: Payload,
}

/// Partition → coordinator engine payload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartitionReply {
    pub from: PartitionId,
    pub body: Payload,
}
