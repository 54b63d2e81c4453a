//! The coordination-free engine's messages and log records.

use crate::message::SubOpId;
use crate::op::{OpKind, PartOp, PartResult};
use litmus_core::{Error, Key, PartitionId, Row, TableId, Time, Timestamp, TxnId};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// RAMP metadata: a transaction's write set, carried by every version it writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteMeta {
    pub txn: TxnId,
    /// Sorted (readers binary-search it: `ramp::ReadIndex`).
    pub keys: Vec<(TableId, Key)>,
}

impl WriteMeta {
    /// Whether the transaction wrote `key`: its key range first (a loader's thousands of ITEM
    /// keys are rejected for a STOCK key in two comparisons), then a binary search.
    pub fn names(&self, key: &(TableId, Key)) -> bool {
        match (self.keys.first(), self.keys.last()) {
            (Some(lo), Some(hi)) if lo <= key && key <= hi => self.keys.binary_search(key).is_ok(),
            _ => false,
        }
    }
}

/// What a reader knows of the version it read: its position in its partition's version order
/// (`ts`, [`Timestamp::ZERO`] when there was no row) and its writer's metadata (`None` for a
/// version whose metadata was collected, or no version at all).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Seen {
    pub ts: Timestamp,
    pub writer: Option<Arc<WriteMeta>>,
}

/// A second-round request: `writers`' version of (`table`, `key`), if newer than `have`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Want {
    pub table: TableId,
    pub key: Key,
    pub have: Timestamp,
    pub writers: Vec<TxnId>,
}

/// The buffered writes of one key, applied in order at commit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyWrites {
    pub table: TableId,
    pub key: Key,
    pub ops: Vec<OpKind>,
}

/// The deferred id assignment of a transaction (VLDB'15 §6.2): the counter row and column, and
/// the temporary id the transaction's writes use until commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdAssign {
    pub table: TableId,
    pub key: Key,
    pub column: usize,
    pub tmp: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// First-round read (or range read) of the latest committed versions, with their metadata.
    Read { id: SubOpId, op: PartOp },
    /// Second-round read (RAMP-Fast): the wanted versions.
    Fetch { id: SubOpId, wants: Vec<Want> },
    /// Phase one of a write: store the writes as a prepared version (invisible to first-round
    /// reads). `assign` only at the counter's partition.
    Prepare {
        txn: TxnId,
        meta: Arc<WriteMeta>,
        writes: Vec<KeyWrites>,
        assign: Option<IdAssign>,
        participants: Vec<PartitionId>,
        id_partition: Option<PartitionId>,
    },
    /// Phase two: make the prepared version the latest, with the ids assigned at the counter's
    /// partition (`[tmp → real]`).
    Commit { txn: TxnId, ids: Vec<(i64, i64)> },
    /// The coordinator gave up before committing (a prepare failed): drop the prepared version.
    Abort { txn: TxnId },
    /// A participant whose prepared version went stale asks another participant what it knows
    /// (cooperative termination after a coordinator crash).
    Inquire { txn: TxnId },
    /// The answer to [`Request::Inquire`] (partition to partition).
    Status { txn: TxnId, status: Status },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    Committed { ids: Vec<(i64, i64)> },
    Prepared,
    Aborted,
}

/// A fetched second-round version: the row (`None`: a delete) and what the reader now knows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fetched {
    pub table: TableId,
    pub key: Key,
    pub row: Option<Row>,
    pub seen: Seen,
}

/// A first-round answer: the result and what the reader knows of each version in it.
pub type ReadResult = Result<(PartResult, Vec<(TableId, Key, Seen)>), Error>;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    Read {
        id: SubOpId,
        result: ReadResult,
    },
    Fetch {
        id: SubOpId,
        found: Vec<Fetched>,
    },
    Prepared {
        txn: TxnId,
        result: Result<(), Error>,
    },
    Committed {
        txn: TxnId,
        ids: Vec<(i64, i64)>,
    },
    /// A commit arrived for a transaction this partition aborted (never prepared here when
    /// another participant inquired): it aborted.
    Aborted {
        txn: TxnId,
    },
}

/// The partition's log records (applied by the same function live and in recovery).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Record {
    Prepared {
        txn: TxnId,
        meta: Arc<WriteMeta>,
        writes: Vec<KeyWrites>,
        assign: Option<IdAssign>,
        participants: Vec<PartitionId>,
        id_partition: Option<PartitionId>,
        coordinator: crate::message::Addr,
    },
    /// Commit at `at`; at the counter's partition the ids are assigned while applying (from the
    /// counter's latest value: deterministic in log order), elsewhere they are given.
    Committed {
        txn: TxnId,
        ids: Vec<(i64, i64)>,
        at: Time,
    },
    Aborted {
        txn: TxnId,
    },
}
