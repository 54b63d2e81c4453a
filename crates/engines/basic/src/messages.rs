//! The messages and log records of the `basic` engine (TFP, BASIC §IV-B): plain serde enums,
//! carried in [`litmus_protocol::Payload`]s and written with [`litmus_protocol::engine::PartCtx::log`] /
//! [`litmus_protocol::engine::CoordCtx::persist`].

use litmus_core::formula::ColumnUpdate;
use litmus_core::{Error, Key, PartitionId, Row, TableId, Timestamp, TxnId};
use litmus_protocol::message::SubOpId;
use litmus_protocol::op::{PartOp, PartResult};
use serde::{Deserialize, Serialize};

/// One attempt of a write operation: a revoked operation is retried under a new timestamp as a
/// new attempt, so the revoked attempt's facts and a late message of it never mix with the new.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WriteId {
    pub txn: TxnId,
    pub attempt: u32,
}

/// An update formula `uf(x, op, P)` on one item (§IV-A logical formula caching): the core's
/// column formulas, or a whole-row image for writes that replace or delete the row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ItemFormula {
    /// Column formulas (`Formula::Add`, `Multiply`, `Assign`, ...) applied to the row.
    Update(Vec<ColumnUpdate>),
    /// The row is replaced (or created).
    Put(Row),
    /// The row is removed.
    Delete,
}

/// Coordinator → partition (and partition → partition) requests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// `read(x, P)` at `ts` (rule R): a point read or a range read. `own` is the reader's write
    /// attempt, whose formulas it sees (read your writes).
    Read { id: SubOpId, ts: Timestamp, own: WriteId, op: PartOp },
    /// PREPARE: place the operation's formula at `ts` (rules W1/W2). `peers`: the other
    /// partitions of `P(op)` known when it was sent, asked for the outcome after a timeout.
    Prepare { id: SubOpId, wid: WriteId, ts: Timestamp, op: PartOp, peers: Vec<PartitionId> },
    /// FORCE-WRITE (rule F): the formulas of `wid` take effect.
    Force { wid: WriteId },
    /// REVOKE (rule V): the formulas of `wid` and their facts are dropped. Unknown here: a
    /// tombstone, so a late PREPARE is refused.
    Revoke { wid: WriteId },
    /// The outcome of `wid`, from its coordinator or a peer (§IV-D).
    Outcome { wid: WriteId, forced: bool },
    /// A peer in doubt about `wid` (it timed out before FORCE-WRITE) asks this partition.
    PeerQuery { wid: WriteId, ts: Timestamp },
}

/// What a read found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ReadOutcome {
    Done(Result<PartResult, Error>),
    /// The item's formulas up to `bound` were folded into the stored value (garbage-collected):
    /// the read must run again under a newer timestamp.
    TooOld {
        bound: Timestamp,
    },
}

/// What a PREPARE found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PrepareOutcome {
    /// W2: the formula is in `list(x, P)`.
    Placed,
    /// W1: `TS(W) < lrt(x, P)` (or below what the partition already folded); retry above `bound`.
    Revoked { bound: Timestamp },
    /// The write is invalid on the item (duplicate insert, update of a missing row, a formula
    /// that does not apply): the operation fails, nothing placed.
    Failed(Error),
}

/// Partition → coordinator replies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    Read {
        id: SubOpId,
        ts: Timestamp,
        outcome: ReadOutcome,
    },
    Prepared {
        id: SubOpId,
        wid: WriteId,
        outcome: PrepareOutcome,
    },
    /// FORCE-WRITE of `wid` is durable here.
    Forced {
        wid: WriteId,
    },
    /// The partition timed out waiting for FORCE-WRITE / REVOKE and asks the coordinator.
    Query {
        wid: WriteId,
    },
}

/// The partition's log records; `BasicPartition::apply` replays them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Record {
    Prepare {
        wid: WriteId,
        ts: Timestamp,
        op: u32,
        table: TableId,
        key: Key,
        formula: ItemFormula,
        peers: Vec<PartitionId>,
        coordinator: litmus_protocol::message::Addr,
    },
    Force {
        wid: WriteId,
    },
    Revoke {
        wid: WriteId,
    },
    /// GC: the forced prefix of `list(x, P)` up to `upto` is folded into the stored value.
    Fold {
        table: TableId,
        key: Key,
        upto: Timestamp,
    },
    /// Every read answered so far has a timestamp below this: after a restart (the per-item
    /// `lrt`s are volatile) W1 revokes every write below it.
    LrtFloor(Timestamp),
    /// GC of a deleted key: its newest version is a tombstone at `at`, older than any read
    /// or write still answered there, and the key leaves the store; reads and writes at or
    /// below `at` are refused from now on (the partition's floors rise to it).
    Forget {
        table: TableId,
        key: Key,
        at: Timestamp,
    },
}

/// The coordinator's log records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CoordRecord {
    /// FORCE-WRITE decided (logged before any FORCE leaves): resent after a restart until every
    /// participant acknowledged, and the answer to a participant in doubt.
    Decided { wid: WriteId, parts: Vec<PartitionId> },
    /// Every participant acknowledged FORCE-WRITE.
    Ended { wid: WriteId },
    /// Timestamps issued stay below this logical time: a restarted coordinator starts above it.
    ClockFloor(u64),
}
