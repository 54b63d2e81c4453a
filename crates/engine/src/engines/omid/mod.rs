//! # Omid: lock-free snapshot isolation through a status oracle (Omid ICDE'14 §II–§IV)
//!
//! **Guarantee: snapshot isolation** (lock-free; write skew is allowed — `tests/omid.rs` shows
//! it). The engine `omid` ([`crate::EngineKind::Omid`]) has three parts, all pure state machines:
//! no I/O, no clock reads (time is an argument), deterministic iteration. Clients read and write
//! the multiversion store directly, tagging versions with their start timestamp `Ts`; the status
//! oracle (SO) issues timestamps, detects write-write conflicts at commit and answers "is this
//! version in my snapshot?".
//!
//! * [`oracle::StatusOracle`] — the SO, driven by [`oracle::StatusOracle::step`] (rules 1–8);
//!   [`oracle::Standby`] — a hot standby that applies the SO's batches as they are logged.
//! * [`node::OracleMachine`] — the SO as a runtime role at [`crate::message::Addr::Oracle`]
//!   (node 0), with its WAL as the machine's log (persist before send = rule 7).
//! * [`replica::ClientReplica`] — a client's read-only copy of the SO metadata (§IV).
//! * [`engine::OmidCoordinator`] — the Omid *client*: in LitmusDB the party that runs a
//!   transaction is the node's coordinator, so each coordinator holds one oracle session and one
//!   replica, shared by every transaction it runs (interactive and stored procedures).
//! * [`engine::OmidPartition`] — the data server: versions in the partition's
//!   [`litmus_storage::mvcc::MvccStore`], tagged with `Ts`.
//! * [`messages`] — the SO's requests, replies, WAL records, checkpoints.
//!
//! ## Mapping onto LitmusDB (E1–E6)
//!
//! **E1 — begin.** `begin` asks the SO for `Ts` (`Begin`, tagged so the reply finds its
//! transaction). The reply piggybacks ΔSO; it is applied to the replica in `commitinfo` order
//! (deltas that arrive early wait — the network reorders), and the transaction starts only once
//! its own delta is applied, so the replica holds every `Tc < Ts`. Operations issued before that
//! wait in the transaction. A start timestamp nobody uses (a late or duplicated reply, a
//! transaction that finished first) is released with an empty commit.
//!
//! **E2 — reads.** A point read fetches the newest [`engine::VERSIONS_PER_READ`] (`nv` = 3)
//! versions; the coordinator walks them newest first and returns the first in the snapshot
//! (rule 5 on the replica); if none is and more exist, it reads the next `nv` below the oldest
//! seen. A version the replica cannot judge (`Tmax < Ts_f < T_init`) is asked of the SO
//! (`InSnapshot`) before deciding. Scans return every retained version of each key, in pages
//! of at most `limit` keys, and continue until `limit` visible rows or the end of the range.
//!
//! **E3 — writes and commit.** `Write` installs a version at `Ts` at once; `Insert`, `Update` and
//! `Delete` first read the row in the snapshot (duplicate key / missing key / formula errors are
//! decided there, changing nothing) and then install the new image (a tombstone for a delete).
//! Own writes are visible (rule 5, `Ts_f = Ts_r`). Commit with no writes is local (§II: the SO
//! only gets the timestamp back, asynchronously); otherwise `Commit(Ts, W)` with `W` the
//! [`RowId`]s of the written rows. A conflict aborts with the retryable `Error::Abort`
//! (`WriteConflict` or `TimestampTooOld`) and the coordinator deletes the versions (`Cleanup`)
//! and reports `CleanedUp` to the SO (rule 4). The isolation level a client asks for is ignored:
//! it is always SI. BASE procedures run as one SI transaction.
//!
//! **E4 — faults.** Requests to the SO and to partitions are resent (same tag) until answered;
//! reads and puts are idempotent. A commit whose answer is ambiguous — `NotInFlight` (a resent or
//! duplicated copy may have committed it) or a session lost while committing — is reported as
//! `Unavailable { outcome_unknown: true }` and its versions are left alone (if it aborted they
//! are invisible forever). A partition refuses a put of a cleaned-up `Ts` (a late duplicate would
//! otherwise resurrect a version after the SO forgot the abort). When the session ends (the SO
//! restarted, dropped the client as silent, or a delta was lost for [`engine::DELTA_GAP_TIMEOUT`])
//! the coordinator drops its replica, fails the transactions holding a snapshot of it with a
//! retryable abort, and reconnects. A crashed coordinator blocks nobody: its transactions' versions
//! stay invisible (uncommitted, then aborted when `Tmax` passes them; no locks anywhere).
//!
//! **E5 — garbage collection (§IV "HBase Garbage Collection").** Every
//! [`node::GC_INTERVAL`] the SO sends `Tmin` (smallest in-flight `Ts`) to the partitions. After a
//! commit the coordinator tells each written partition `(Ts, Tc, rows)`; a partition keeps these
//! notices in memory and, at a GC with mark `m`, for each noticed version with `Tc < m` deletes
//! every *older* version (smaller `Ts`) of that row: every reader with `Ts_r ≥ m` sees the noticed
//! version first (it is committed before the reader started), so it never reads past it. This is
//! exact, where the paper's "keep one non-aborted version below Tmin" is not (a version below
//! `Tmin` may have committed after a reader started). Reads and puts below the last mark are
//! refused (`TimestampTooOld`). A lost notice only keeps versions longer.
//!
//! **E6 — the replica and silent clients** are rules 6 and the oracle's idle push: a coordinator
//! answers pushes with `Ack`.
//!
//! ## Rule 1 — timestamps (§II "Transaction Status Oracle", §V "Micro-benchmarks")
//!
//! One counter issues start and commit timestamps: unique and strictly increasing, so
//! `Ts(txn)` doubles as the transaction id. The WAL never sees single timestamps: the SO logs a
//! [`messages::Record::Reserve`] of an upper bound [`TIMESTAMP_BATCH`] ahead ("reserves thousands
//! of timestamps per each write into the WAL") and, after recovery, issues from above the last
//! logged bound. No reply carrying a timestamp leaves before its reservation is durable (rule 7),
//! so a timestamp is never issued twice, crash or not.
//!
//! ## Rule 2 — commit (Algorithm 3)
//!
//! ```text
//!   commit(Ts, W):  Ts not in uncommitted           -> abort (NotInFlight)
//!                   Tmax > Ts                        -> abort (TmaxPassed)       Alg. 3 l.1
//!                   lastCommit(r) > Ts for an r ∈ W  -> abort (RowConflict)      Alg. 3 l.5
//!                   else Tc := next(); lastCommit(r) := Tc ∀ r ∈ W; Tc list[Ts] := Tc
//! ```
//!
//! `W` is deduplicated (footnote 4). Conflicts are **row level**: a [`RowId`] is a 64-bit hash of
//! `(TableId, Key)` ([`RowId::of`]); hashing a column too ([`RowId::of_cell`]) gives cell-level
//! detection. A hash collision can only add a spurious conflict (an abort), never hide one. A
//! commit with an empty write set (read-only) follows the same rules; it is not entered in the Tc
//! list (it wrote no version anyone could ask about) and, when it aborts, not in the aborted list.
//!
//! ## Rule 3 — bounded memory and `Tmax` (§III "Memory Limited Capacity")
//!
//! `lastCommit` keeps at most [`OracleConfig::last_commit_rows_max`] rows; the oldest (smallest
//! `Tc`) are evicted and `Tmax` rises to the largest evicted `Tc`. By (1), `Tmax < Ts ⇒
//! lastCommit(r) < Ts` for every evicted row, so eviction can only cause the conservative
//! `TmaxPassed` abort, and only for `Ts < Tmax`. The same happens when the Tc list exceeds
//! [`OracleConfig::commit_list_txns_max`] (a hot row keeps `lastCommit` small while the Tc list
//! grows), and when the uncommitted list exceeds [`OracleConfig::uncommitted_txns_max`]: `Tmax`
//! rises to the oldest in-flight `Ts`, aborting it. Raising `Tmax` to any issued value is always
//! safe — it only adds aborts. Invariants after every step: every `lastCommit` entry, every Tc-list
//! `Tc` and every uncommitted `Ts` is `> Tmax` (entries at or below `Tmax` are redundant and
//! dropped).
//!
//! ## Rule 4 — the aborted and uncommitted lists (§III)
//!
//! `Ts` enters *uncommitted* at begin and leaves at commit or abort. When `Tmax` passes an
//! uncommitted `Ts` ("do not commit in a timely manner"), it is aborted. *Aborted* holds aborted
//! transactions that may have written. A client that deleted its versions sends `CleanedUp`; the
//! SO forgets the entry only once every transaction started before the report has terminated
//! ("defers the removal ... until the already started transactions terminate"), then logs and
//! replicates the removal. A `CleanedUp` for a transaction not in the list is ignored. The aborted
//! list is not bounded: an entry of a client that never cleans up stays (the paper leaves it to
//! the data store's garbage collection; so do we, for later).
//!
//! ## Rule 5 — visibility (Algorithm 4)
//!
//! ```text
//!   inSnapshot(Ts_f, Ts_r):  Ts_f = Ts_r                 -> true  (own writes)
//!                            Tc(f) known                 -> Tc(f) < Ts_r               l.1–2
//!                            f aborted (list or crash)   -> false                      l.4
//!                            Tmax < Ts_f                 -> false (in progress)        l.4
//!                            else                        -> true  (old, committed)     l.7
//! ```
//!
//! Tc-list entries with `Tc ≤ Tmax` are dropped, so the last line answers for them; it is exact for
//! readers with `Ts_r > Tmax` — the only ones that can still commit (a reader with `Ts_r < Tmax`
//! aborts at commit, rule 2, and so never exposes what it read).
//!
//! ## Rule 6 — replication to clients (§III "RPC Overhead", §IV "Client Replica", "Silent Clients")
//!
//! The SO appends each *durable* metadata change — `(Ts, Tc)`, new abort, forgotten abort, crash
//! range, new `Tmax` — once to a shared append-only buffer (`commitinfo`). Each connected client
//! has a cursor into it; each reply to `Begin` carries the entries since that client's cursor
//! ([`messages::Delta`], one slice copy per reply) and moves the cursor. `Connect` returns
//! `T_init` and the current aborted list; the replica answers rule 5 locally and reports
//! [`replica::Visibility::AskOracle`] only for `Tmax < Ts_f < T_init` with no local `Tc`. A
//! client silent for [`OracleConfig::idle_push_after`] gets its delta pushed; if it does not `Ack`
//! within [`OracleConfig::push_ack_timeout`] it is disconnected. A client whose cursor lags more
//! than [`OracleConfig::commitinfo_entries_max`] entries is disconnected too; the buffer is
//! trimmed to the slowest cursor.
//!
//! ## Rule 7 — write-ahead log and group commit (§IV "SO Data Reliability")
//!
//! Records ([`messages::Record`]) accumulate in one open batch, emitted as one WAL write when it
//! reaches [`OracleConfig::batch_bytes_max`] (≈1 KB) or when a `Tick` finds it older than
//! [`OracleConfig::batch_delay`] (5 ms). **Every reply is held while a batch is open** and
//! rendered right after that batch is emitted (the runtime persists `persist` before sending
//! `send`, as for [`crate::machine::Machine`]). So replies are only ever rendered from durable
//! state: a commit is acknowledged after its record; a `Begin` reply (which must carry every
//! `Tc < Ts`, or the replica would miss a commit in the reader's snapshot) after every earlier
//! commit; commitinfo only ever holds durable entries. Commit records carry `(Ts, Tc)` but not the
//! write set: `lastCommit` is not recovered (below), so logging rows would only cost bytes.
//!
//! ## Rule 8 — recovery (§IV "SO Data Reliability", "Recovery")
//!
//! [`oracle::StatusOracle::recover`] starts from an optional [`messages::Checkpoint`] (written by
//! [`oracle::StatusOracle::checkpoint`] between batches: timestamp bound, `Tmax`, Tc list,
//! aborted list, crash ranges) and replays the batches logged after it **forwards**, through the
//! same code that applied them. The paper reads the log backwards until `Tc < Tmax` and keeps a
//! light checkpoint of long-lived aborts; replaying forwards from a full (small: no `lastCommit`)
//! checkpoint gives the same state and is simpler to get right; the runtime decides how often to
//! checkpoint. Then, as in the paper, every transaction that started before the crash and did not
//! commit is aborted: the SO does not know their ids (the uncommitted list is not logged), so it
//! logs a crash range `(Tmax, bound]` — "whatever is not committed nor aborted" — whose members,
//! except the committed ones it lists, are aborted forever. `lastCommit` starts empty: new
//! transactions start above every pre-crash `Tc`, and pre-crash transactions are aborted.
//! Lost with the crash: unflushed records (never acknowledged), pending cleanups (their entries
//! stay aborted: safe), sessions (clients reconnect and reset their replica).
//!
//! ## Not implemented
//!
//! Cleanup of crash ranges and of the versions of transactions whose coordinator crashed (they
//! stay, invisible, until a later commit of the row lets GC shadow them); the SO does not abort a
//! crashed coordinator's transactions when it reconnects (they hold `Tmin`, so GC, back until
//! `Tmax` passes them). The hot standby ([`oracle::Standby`]: tails the WAL, promotes in
//! about a millisecond) is a tested state machine that `bench omid-oracle` times, but no runtime runs one
//! on another node yet (that needs the oracle's log shipped or shared): failover in a cluster
//! today is the oracle's node restarting and recovering from its log.

pub mod engine;
pub mod messages;
pub mod node;
pub mod oracle;
pub mod replica;

#[cfg(test)]
mod tests;

use litmus_core::{Key, TableId, Timestamp};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Timestamps reserved by one [`messages::Record::Reserve`] (§V: "thousands ... per each write").
pub const TIMESTAMP_BATCH: u64 = 10_000;
/// Default bound on `lastCommit` rows (§III: 32 bytes per row, 32M rows per GB; we default lower).
pub const LAST_COMMIT_ROWS_MAX: usize = 1 << 20;
/// Default bound on Tc-list entries (committed transactions with `Tc > Tmax`).
pub const COMMIT_LIST_TXNS_MAX: usize = 1 << 18;
/// Default bound on in-flight transactions.
pub const UNCOMMITTED_TXNS_MAX: usize = 1 << 16;
/// Largest write set a commit may name.
pub const WRITE_SET_ROWS_MAX: usize = 1 << 16;
/// Default bound on the shared replication buffer, in entries.
pub const COMMITINFO_ENTRIES_MAX: usize = 1 << 20;
/// Largest number of connected clients.
pub const CLIENTS_MAX: usize = 4096;
/// WAL batch size trigger (§IV: "after 1 KB of data is accumulated").
pub const BATCH_BYTES_MAX: usize = 1024;
/// WAL batch time trigger (§IV: "after 5 ms since the last trigger").
pub const BATCH_DELAY: Duration = Duration::from_millis(5);
/// Push to a silent client after this long (§IV "Silent Clients": 30 s).
pub const IDLE_PUSH_AFTER: Duration = Duration::from_secs(30);
/// Disconnect a client that does not acknowledge a push within this long (§IV: 5 s).
pub const PUSH_ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// The oracle's limits and timers. [`Default`] gives the named constants above.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OracleConfig {
    pub last_commit_rows_max: usize,
    pub commit_list_txns_max: usize,
    pub uncommitted_txns_max: usize,
    pub write_set_rows_max: usize,
    pub commitinfo_entries_max: usize,
    pub clients_max: usize,
    pub batch_bytes_max: usize,
    pub batch_delay: Duration,
    pub idle_push_after: Duration,
    pub push_ack_timeout: Duration,
}

impl Default for OracleConfig {
    fn default() -> Self {
        OracleConfig {
            last_commit_rows_max: LAST_COMMIT_ROWS_MAX,
            commit_list_txns_max: COMMIT_LIST_TXNS_MAX,
            uncommitted_txns_max: UNCOMMITTED_TXNS_MAX,
            write_set_rows_max: WRITE_SET_ROWS_MAX,
            commitinfo_entries_max: COMMITINFO_ENTRIES_MAX,
            clients_max: CLIENTS_MAX,
            batch_bytes_max: BATCH_BYTES_MAX,
            batch_delay: BATCH_DELAY,
            idle_push_after: IDLE_PUSH_AFTER,
            push_ack_timeout: PUSH_ACK_TIMEOUT,
        }
    }
}

/// A row (or cell) for write-write conflict detection: a 64-bit FNV-1a hash. Collisions only add
/// spurious conflicts (§II footnote 3: row granularity; finer granularity via [`RowId::of_cell`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RowId(pub u64);

impl RowId {
    /// The row `key` of `table`.
    pub fn of(table: TableId, key: &Key) -> RowId {
        RowId(fnv1a(fnv1a(FNV_OFFSET, &table.0.to_le_bytes()), key.as_bytes()))
    }
    /// One column of a row: cell-level conflict detection.
    pub fn of_cell(table: TableId, key: &Key, column: u32) -> RowId {
        let row = RowId::of(table, key);
        RowId(fnv1a(fnv1a(row.0, &[0xff]), &column.to_le_bytes()))
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Why the oracle aborted a commit (Algorithm 3), classified for the caller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum CommitAbort {
    /// Alg. 3 line 1: `Tmax > Ts` — conflict information the oracle no longer holds (or the
    /// transaction took too long and was aborted when `Tmax` passed it).
    #[error("Tmax {tmax} passed the start timestamp")]
    TmaxPassed { tmax: Timestamp },
    /// Alg. 3 line 5: a row of the write set committed after the transaction started.
    #[error("row {row:?} committed at {last_commit} after the start")]
    RowConflict { row: RowId, last_commit: Timestamp },
    /// The start timestamp is not in flight: already aborted (by `Tmax`, a crash or the client),
    /// already committed, or never issued.
    #[error("transaction not in flight")]
    NotInFlight,
}

impl CommitAbort {
    /// The engine-wide reason; every variant is retryable with a new start timestamp.
    pub fn abort_reason(&self) -> litmus_core::AbortReason {
        match self {
            CommitAbort::TmaxPassed { .. } | CommitAbort::NotInFlight => litmus_core::AbortReason::TimestampTooOld,
            CommitAbort::RowConflict { .. } => litmus_core::AbortReason::WriteConflict,
        }
    }
}

/// A request the oracle refuses outright (nothing changes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum OracleError {
    #[error("client is not connected")]
    NotConnected,
    #[error("too many clients (limit {limit})")]
    TooManyClients { limit: usize },
    #[error("write set of {rows} rows exceeds {limit}")]
    WriteSetTooLarge { rows: usize, limit: usize },
    /// A `ConnectAs` older than the client's current session (a late duplicate).
    #[error("session is older than the client's current one")]
    StaleSession,
}

impl OracleError {
    /// True when the same request may succeed later (after reconnecting, or when load drops).
    pub fn is_retryable(&self) -> bool {
        !matches!(self, OracleError::WriteSetTooLarge { .. } | OracleError::StaleSession)
    }
}
