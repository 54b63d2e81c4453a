//! The coordination-free engine's messages and log records.

use litmus_core::{Error, Key, PartitionId, Row, TableId, Time, Timestamp, TxnId};
use litmus_protocol::message::SubOpId;
use litmus_protocol::op::{OpKind, PartOp, PartResult};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};

/// RAMP metadata: a transaction's write set, carried by every version it writes.
#[derive(Clone, Serialize, Deserialize)]
pub struct WriteMeta {
    pub txn: TxnId,
    /// Sorted (readers binary-search it: `ramp::ReadIndex`).
    pub keys: Vec<(TableId, Key)>,
    /// A Bloom filter of `keys` (two probes, about 16 bits per key), built on the first
    /// question. In process the metadata is shared behind an `Arc` by every version and every
    /// reply that carries it, so it is built once per writer, not once per reader.
    #[serde(skip)]
    filter: OnceLock<Box<[u64]>>,
}

impl PartialEq for WriteMeta {
    fn eq(&self, other: &Self) -> bool {
        self.txn == other.txn && self.keys == other.keys
    }
}

impl Eq for WriteMeta {}

impl std::fmt::Debug for WriteMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteMeta").field("txn", &self.txn).field("keys", &self.keys).finish()
    }
}

/// A key's hash for [`WriteMeta::names_hashed`]: a fast 64-bit mix of its table and bytes (not
/// a security hash: a collision only costs the binary search it would have cost anyway).
#[inline]
pub fn key_hash(key: &(TableId, Key)) -> u64 {
    const MUL: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = u64::from(key.0 .0).wrapping_mul(MUL);
    for chunk in key.1.as_bytes().chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h = (h.rotate_left(23) ^ u64::from_le_bytes(w)).wrapping_mul(MUL);
    }
    // MurmurHash3's finalizer: every output bit depends on every input bit (the filter's
    // probes take low and middle bits, which a product alone leaves poorly mixed).
    h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    h = (h ^ (h >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

impl WriteMeta {
    pub fn new(txn: TxnId, keys: Vec<(TableId, Key)>) -> Self {
        WriteMeta { txn, keys, filter: OnceLock::new() }
    }

    /// Whether the transaction wrote `key`.
    pub fn names(&self, key: &(TableId, Key)) -> bool {
        self.names_hashed(key, key_hash(key))
    }

    /// [`Self::names`] given the key's [`key_hash`] (a reader hashes a key once for all the
    /// writers it asks): the filter first, which rejects most keys without a comparison; then
    /// the key range (a loader's thousands of ITEM keys are rejected for a STOCK key in two
    /// comparisons) and a binary search.
    pub fn names_hashed(&self, key: &(TableId, Key), hash: u64) -> bool {
        self.filter_passes_hashed(hash) && self.names_searched(key)
    }

    /// [`Self::names`] without the filter (for a caller that tested a copy of it): the key
    /// range, then a binary search.
    pub fn names_searched(&self, key: &(TableId, Key)) -> bool {
        match (self.keys.first(), self.keys.last()) {
            (Some(lo), Some(hi)) if lo <= key && key <= hi => self.keys.binary_search(key).is_ok(),
            _ => false,
        }
    }

    /// Whether the filter lets `key` through to the search (tests).
    pub fn filter_passes(&self, key: &(TableId, Key)) -> bool {
        self.filter_passes_hashed(key_hash(key))
    }

    fn filter_passes_hashed(&self, hash: u64) -> bool {
        passes(self.filter_words(), hash)
    }

    /// The filter's words (built on the first call).
    pub fn filter_words(&self) -> &[u64] {
        self.filter.get_or_init(|| {
            let words = (self.keys.len() * 16).next_power_of_two().max(64) / 64;
            let mut f = vec![0u64; words].into_boxed_slice();
            for k in &self.keys {
                for bit in probes(key_hash(k), words * 64) {
                    f[bit / 64] |= 1 << (bit % 64);
                }
            }
            f
        })
    }
}

/// Whether a key of hash `hash` passes a filter of [`WriteMeta::filter_words`] (or a copy).
#[inline]
pub fn passes(filter: &[u64], hash: u64) -> bool {
    probes(hash, filter.len() * 64).into_iter().all(|bit| filter[bit / 64] & (1 << (bit % 64)) != 0)
}

/// The filter's two bits for a key hash, in a filter of `bits` bits (a power of two).
#[inline]
fn probes(hash: u64, bits: usize) -> [usize; 2] {
    let mask = bits as u64 - 1;
    [(hash & mask) as usize, ((hash >> 32) & mask) as usize]
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
    /// The writer of the version read, when that was a prepared one (`have` is then
    /// `Timestamp::MAX`): the partition compares with where that writer has committed since.
    pub have_writer: Option<TxnId>,
    pub writers: Vec<TxnId>,
}

/// The buffered writes of one key, applied in order at commit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyWrites {
    pub table: TableId,
    pub key: Key,
    pub ops: Vec<OpKind>,
    /// A replicated table's row (CF-2b): the writer's stamp, the same at every copy. Its ops
    /// are whole-row (`Write`, `Insert`, `Delete`), and a copy installs them only if no write
    /// with a later stamp is installed there (last writer wins), so every copy ends alike
    /// whatever order the commits arrive in. `None` for a partitioned table's row.
    pub lww: Option<Stamp>,
}

/// A replicated row's write order (CF-2b): when the coordinator committed, then the transaction.
pub type Stamp = (Time, TxnId);

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
    /// reads). `assign` only at the counter's partition. The writes are shared: the
    /// coordinator keeps the request to resend it (CF-7), and the partition keeps what it
    /// prepared until it commits, without copying either.
    Prepare {
        txn: TxnId,
        meta: Arc<WriteMeta>,
        writes: Arc<[KeyWrites]>,
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
    /// Coordinator to participant: these transactions have committed at every participant,
    /// so their metadata may be collected [`super::META_KEEP`] from now (CF-8). Batched per
    /// partition and sent on the coordinator's tick.
    Done { txns: Vec<TxnId> },
    /// Partition to partition, for commits kept without a [`Request::Done`] (a coordinator
    /// crashed, or this partition recovered): which of these have you committed?
    AskCommitted { txns: Vec<TxnId> },
    /// The answer to [`Request::AskCommitted`]: those committed here (or decided so long ago
    /// that they are forgotten, which only a commit can be: the asker committed them, so
    /// every participant prepared them).
    CommittedHere { txns: Vec<TxnId> },
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
        /// The partition's point in its version order when it read (its last commit's local
        /// timestamp): what a range read found empty was empty there (CF-4e).
        at: Timestamp,
    },
    Fetch {
        id: SubOpId,
        /// An abort when a wanted version was pruned (CF-8).
        found: Result<Vec<Fetched>, Error>,
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
        writes: Arc<[KeyWrites]>,
        assign: Option<IdAssign>,
        participants: Vec<PartitionId>,
        id_partition: Option<PartitionId>,
        coordinator: litmus_protocol::message::Addr,
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
