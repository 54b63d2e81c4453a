//! Messages between roles. Every message is plain data (serde), so the same values travel over
//! channels (embedded runtime), through the simulated network and over TCP.
//!
//! ```text
//!  client ──ClientRequest──► coordinator ──PartitionRequest──► partition
//!         ◄─ClientResponse──             ◄──PartitionReply────
//! ```
//!
//! Engine-specific payloads are the `Engine*` enums, one variant per engine. An engine adds its
//! variant here and its logic in `engines/`; the roles and runtimes do not change.

use crate::engines::{locking, nocc, omid};
use crate::op::{Op, OpResult};
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
    /// The Omid status oracle (one per cluster; see [`crate::engines::omid`]).
    Oracle,
    /// The second Omid oracle replica: the hot standby at start, the primary after a failover
    /// (see [`crate::engines::omid::node`]). Clusters with one node have none.
    OracleStandby,
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Client(c) => write!(f, "{c}"),
            Addr::Coordinator(n) => write!(f, "coord-{n}"),
            Addr::Partition(p) => write!(f, "{p}"),
            Addr::Oracle => write!(f, "oracle"),
            Addr::OracleStandby => write!(f, "oracle-standby"),
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
    /// A coordinator (or benchmark client) → the Omid status oracle.
    OracleRequest(omid::node::OracleRequest),
    /// The Omid status oracle → a coordinator (or benchmark client).
    OracleReply(omid::node::OracleReply),
    /// Between the two Omid oracle replicas: log shipping, acks, fencing, state transfer.
    OracleReplication(omid::node::Replication),
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
    Begin { isolation: Isolation },
    /// One operation of an interactive transaction.
    Op { txn: TxnId, op: Op },
    /// Commit an interactive transaction.
    Commit { txn: TxnId },
    /// Abort an interactive transaction.
    Rollback { txn: TxnId },
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartitionRequest {
    pub body: EngineRequest,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartitionReply {
    pub from: PartitionId,
    pub body: EngineReply,
}

/// Coordinator → partition payloads, per engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum EngineRequest {
    Nocc(nocc::Request),
    Locking(locking::Request),
    Omid(omid::engine::Request),
}

/// Partition → coordinator payloads, per engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum EngineReply {
    Nocc(nocc::Reply),
    Locking(locking::Reply),
    Omid(omid::engine::Reply),
}

/// A partition's log record, per engine. Applying the same records in the same order to the
/// same snapshot gives the same state (the partition is a deterministic state machine).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PartitionRecord {
    Nocc(nocc::Record),
    Locking(locking::Record),
    Omid(omid::engine::Record),
}
