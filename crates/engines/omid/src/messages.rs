//! The oracle's wire and log types (plain serde; not yet part of the global message enums).

use super::{CommitAbort, OracleError, RowId};
use litmus_core::{ClientId, Error, Timestamp};
use serde::{Deserialize, Serialize};

/// A client's request to the status oracle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Open a session; answered with [`Reply::Connected`] (§IV "Client Startup").
    Connect,
    /// Open a session for a client that keeps no replica (replication off, the paper's plain SO
    /// of Fig. 9): `Began` replies carry empty deltas and the client asks
    /// [`Request::InSnapshot`] for every version it reads.
    ConnectUnreplicated,
    /// Open session `session` of this client (replicated, like [`Request::Connect`]). Session
    /// ids of one client increase (a coordinator uses `(epoch, n)`): a larger id ends the
    /// client's previous session and aborts the transactions it began (OM-4); the same id is a
    /// duplicate (answered again, nothing ends); a smaller one is stale and refused.
    ConnectAs { session: u64 },
    /// TsReq: a start timestamp; answered with [`Reply::Began`] carrying the client's delta.
    Begin,
    /// [`Request::Begin`] that may be resent: while the timestamp it got is in flight, a copy with
    /// the same `id` in the same session is answered with that timestamp again instead of a new
    /// one (whose reply lost, nobody would ever finish: it would hold `Tmin`).
    BeginAs { id: u64 },
    /// Commit request `(Ts, W)` (Algorithm 3).
    Commit { start_ts: Timestamp, write_set: Vec<RowId> },
    /// The client gives up the transaction (it may have written).
    Abort { start_ts: Timestamp },
    /// The client deleted the versions of an aborted transaction (§II "single-row cleanup").
    CleanedUp { start_ts: Timestamp },
    /// `inSnapshot` the client's replica cannot answer (`Tmax < Ts_f < T_init`).
    InSnapshot { version_ts: Timestamp, reader_ts: Timestamp },
    /// Acknowledges a [`Reply::Push`].
    Ack,
    /// The fate of each writer (by start timestamp) whose versions a client's replica cannot
    /// judge (`Tmax < Ts_f < T_init`: committed before the client connected, e.g. before a
    /// failover): answered with [`Reply::Fates`], in the same order. At most
    /// [`FATES_PER_REQUEST_MAX`] are answered.
    Fates { start_ts: Vec<Timestamp> },
}

/// Most writers one [`Request::Fates`] asks about.
pub const FATES_PER_REQUEST_MAX: usize = 4096;

/// A writer's fate as the oracle knows it (OM-5 without a reader).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fate {
    /// Committed at this commit timestamp: visible to readers that started after it. Final.
    Committed(Timestamp),
    /// Aborted (the aborted list or a crash range): visible to nobody. Final.
    Aborted,
    /// At or below `Tmax` and not aborted: committed long ago, visible (OM-5, last line).
    /// Final.
    Old,
    /// Not committed *now*: in flight, or never wrote. Invisible to every reader that started
    /// before the answer (its commit, if any, comes later); not final.
    NotCommitted,
}

/// The oracle's answer to one request, or an unsolicited push.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Connected(Connected),
    /// TsRes: the start timestamp and ΔSO since the client's previous reply.
    Began {
        start_ts: Timestamp,
        delta: Delta,
    },
    Committed {
        start_ts: Timestamp,
        commit_ts: Timestamp,
    },
    Aborted {
        start_ts: Timestamp,
        reason: CommitAbort,
    },
    /// Reply to [`Request::Abort`] / [`Request::CleanedUp`].
    Done {
        start_ts: Timestamp,
    },
    InSnapshot {
        version_ts: Timestamp,
        reader_ts: Timestamp,
        visible: bool,
    },
    /// Answer to [`Request::Fates`].
    Fates {
        fates: Vec<(Timestamp, Fate)>,
    },
    /// ΔSO pushed to a silent client (§IV "Silent Clients"); answer with [`Request::Ack`].
    Push {
        delta: Delta,
    },
    Refused(OracleError),
}

/// What the oracle tells a new client: everything its replica cannot learn from later deltas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connected {
    /// `T_init`: no timestamp issued before the connection is at or above it.
    pub t_init: Timestamp,
    pub tmax: Timestamp,
    /// The aborted list at connection time.
    pub aborted: Vec<Timestamp>,
    pub crash_ranges: Vec<CrashRange>,
    /// Position in `commitinfo` of the first entry the client's first delta will carry.
    pub cursor: u64,
}

/// ΔSO: the `commitinfo` entries `[from, from + entries.len())`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    pub from: u64,
    pub entries: Vec<MetaChange>,
}

/// One durable change of the replicated metadata (Tc list, aborted list, `Tmax`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetaChange {
    Committed {
        start_ts: Timestamp,
        commit_ts: Timestamp,
    },
    Aborted {
        start_ts: Timestamp,
    },
    /// An aborted transaction was cleaned up and left the aborted list.
    Forgotten {
        start_ts: Timestamp,
    },
    CrashAborted(CrashRange),
    /// Every version in a crash range was purged: the range leaves the metadata.
    CrashForgotten {
        after: Timestamp,
        upto: Timestamp,
    },
    Tmax(Timestamp),
}

/// Transactions that were in flight when the oracle crashed: every start timestamp in
/// `(after, upto]` that is not in `committed` is aborted (§IV "the SO could simply abort all the
/// uncommitted transactions that started before the failure").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashRange {
    pub after: Timestamp,
    pub upto: Timestamp,
    /// Start timestamps in the range that committed (sorted).
    pub committed: Vec<Timestamp>,
}

impl CrashRange {
    pub fn aborts(&self, start_ts: Timestamp) -> bool {
        self.after < start_ts && start_ts <= self.upto && self.committed.binary_search(&start_ts).is_err()
    }
}

/// One WAL record. A [`Batch`] of them is one atomic log write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// Timestamps up to `upto` may be issued.
    Reserve {
        upto: Timestamp,
    },
    Committed {
        start_ts: Timestamp,
        commit_ts: Timestamp,
    },
    Aborted {
        start_ts: Timestamp,
    },
    Forgotten {
        start_ts: Timestamp,
    },
    Tmax(Timestamp),
    /// Written by recovery: the range `(after, upto]` of in-flight transactions lost in a crash.
    CrashAborted {
        after: Timestamp,
        upto: Timestamp,
    },
    /// Tags 6 and 7 name no record: a log holding one does not decode. Postcard tags a
    /// record by its position in this enum, and every record after these two keeps its tag.
    #[doc(hidden)]
    Unassigned6(NoRecord),
    #[doc(hidden)]
    Unassigned7(NoRecord),
    /// Every partition purged the versions of the crash range `(after, upto]`: it is dropped.
    CrashForgotten {
        after: Timestamp,
        upto: Timestamp,
    },
}

impl Record {
    /// Approximate encoded size, for the batch size trigger.
    pub fn size_bytes(&self) -> usize {
        match self {
            Record::Committed { .. } | Record::CrashAborted { .. } | Record::CrashForgotten { .. } => 17,
            Record::Unassigned6(never) | Record::Unassigned7(never) => match *never {},
            _ => 9,
        }
    }
}

/// The payload of a [`Record`] tag no record has: no value exists, so decoding one fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NoRecord {}

/// One WAL write (group commit).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    pub records: Vec<Record>,
}

impl Batch {
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("oracle records serialize")
    }
    pub fn decode(bytes: &[u8]) -> Result<Batch, Error> {
        postcard::from_bytes(bytes).map_err(|e| Error::Storage(format!("corrupt oracle batch: {e}")))
    }
}

/// The durable state at a batch boundary (§IV "Recovery": checkpoints).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub reserved_upto: Timestamp,
    pub tmax: Timestamp,
    /// The Tc list `(Ts, Tc)` in `Tc` order.
    pub commits: Vec<(Timestamp, Timestamp)>,
    pub aborted: Vec<Timestamp>,
    pub crash_ranges: Vec<CrashRange>,
}

impl Checkpoint {
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("oracle checkpoint serializes")
    }
    pub fn decode(bytes: &[u8]) -> Result<Checkpoint, Error> {
        postcard::from_bytes(bytes).map_err(|e| Error::Storage(format!("corrupt oracle checkpoint: {e}")))
    }
}

/// What a step produced: WAL batches to persist, then messages to send (in this order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OracleEffects {
    pub persist: Vec<Batch>,
    pub send: Vec<Outbound>,
}

/// A message to a client, or the end of its session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outbound {
    Reply { client: ClientId, reply: Reply },
    Disconnect { client: ClientId },
}
