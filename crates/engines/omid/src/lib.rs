//! # Omid: lock-free snapshot isolation through a status oracle (Omid ICDE'14 §II–§IV)
//!
//! **Guarantee: snapshot isolation** (lock-free; write skew is allowed — `tests/omid.rs` shows
//! it). The engine `omid` ([`OMID`]) has three parts, all pure state machines:
//! no I/O, no clock reads (time is an argument), deterministic iteration. Clients read and write
//! the multiversion store directly, tagging versions with their start timestamp `Ts`; the status
//! oracle (SO) issues timestamps, detects write-write conflicts at commit and answers "is this
//! version in my snapshot?".
//!
//! * [`oracle::StatusOracle`] — the SO, driven by [`oracle::StatusOracle::step`] (OM-1–OM-8),
//!   rebuilt from its log by [`oracle::StatusOracle::recover`].
//! * [`node::OracleMachine`] — the SO as a runtime role at [`node::ORACLE`] (node 0), with its
//!   WAL as the machine's log (persist before send = OM-7). There is one oracle, and its
//!   failover is a restart (OM-8): with `replicas = 1` it runs alone on node 0; with
//!   `replicas > 1` the runtime keeps it in a raft replica group whose new leader recovers it
//!   from the group's log (`docs/replication.md`; see the module doc of [`node`]).
//! * [`replica::ClientReplica`] — a client's read-only copy of the SO metadata (§IV).
//! * [`engine::OmidCoordinator`] — the Omid *client*: in LitmusDB the party that runs a
//!   transaction is the node's coordinator, so each coordinator holds one oracle session and one
//!   replica, shared by every transaction it runs (interactive and stored procedures).
//! * [`engine::OmidPartition`] — the data server: versions in the partition's
//!   [`litmus_storage::mvcc::MvccStore`], tagged with `Ts`.
//! * [`messages`] — the SO's requests, replies, WAL records, checkpoints.
//!
//! ## Mapping onto LitmusDB (OM-E1–OM-E6)
//!
//! **OM-E1 — begin.** `begin` asks the SO for `Ts` (`BeginAs`, tagged so the reply finds its
//! transaction; a resent copy gets the same `Ts` while it is in flight, so a lost reply orphans
//! no timestamp). The reply piggybacks ΔSO; it is applied to the replica in `commitinfo` order
//! (deltas that arrive early wait — the network reorders), and the transaction starts only once
//! its own delta is applied, so the replica holds every `Tc < Ts`. Operations issued before that
//! wait in the transaction. A start timestamp nobody uses (a late or duplicated reply, a
//! transaction that finished first) is released with an empty commit. Releases and aborts are
//! resent until answered: a lost one would leave the `Ts` in flight, holding `Tmin`.
//!
//! **OM-E2 — reads.** A point read fetches the newest [`engine::VERSIONS_PER_READ`] (`nv` = 3)
//! versions; the coordinator walks them newest first and returns the first in the snapshot
//! (OM-5 on the replica); if none is and more exist, it reads the next `nv` below the oldest
//! seen. A version the replica cannot judge (`Tmax < Ts_f < T_init`) has its writer's fate asked
//! of the SO (`Fates`, OM-E4b) before deciding. Scans honour `nv` too: a page holds at most `limit` keys, each
//! with its newest `nv` versions; the coordinator decides each key as a point read does and, for
//! the keys none of whose returned versions is in the snapshot while older ones exist, fetches
//! the next `nv` below the oldest seen (`ReadOlder`, one request for all such keys of the page)
//! until every key is decided. Then it takes the page's visible rows in key order and continues
//! after the page's last key until `limit` visible rows or the end of the range.
//!
//! **OM-E3 — writes and commit.** `Write` installs a version at `Ts` at once; `Insert`, `Update` and
//! `Delete` first read the row in the snapshot (duplicate key / missing key / formula errors are
//! decided there, changing nothing) and then install the new image (a tombstone for a delete).
//! Own writes are visible (OM-5, `Ts_f = Ts_r`). Commit with no writes is local (§II: the SO
//! only gets the timestamp back, asynchronously); otherwise `Commit(Ts, W)` with `W` the
//! [`RowId`]s of the written rows. A conflict aborts with the retryable `Error::Abort`
//! (`WriteConflict` or `TimestampTooOld`) and the coordinator deletes the versions (`Cleanup`)
//! and reports `CleanedUp` to the SO (OM-4). The isolation level a client asks for is ignored:
//! it is always SI. BASE procedures run as one SI transaction.
//!
//! **OM-E4 — faults.** Requests to the SO and to partitions are resent (same tag) until answered;
//! reads and puts are idempotent. A commit whose answer is ambiguous — `NotInFlight` (a resent or
//! duplicated copy may have committed it) or a session lost while committing — is reported as
//! `Unavailable { outcome_unknown: true }` and its versions are left alone (if it aborted, GC
//! purges them, OM-E5). A partition refuses a put of a cleaned-up `Ts` (a late duplicate would
//! otherwise resurrect a version after the SO forgot the abort). When the session ends (the SO
//! restarted, dropped the client as silent, or a delta was lost for [`engine::DELTA_GAP_TIMEOUT`])
//! the coordinator drops its replica, fails the transactions holding a snapshot of it with a
//! retryable abort (a committing one: outcome unknown), and reconnects to [`node::ORACLE`] with
//! a new session. An oracle silent for [`engine::ORACLE_FAILOVER_AFTER`] while requests wait
//! is taken for restarted (alone, or as its replica group's new leader, [`node`]): the
//! coordinator ends its session the same way.
//!
//! **Readers never wait on a writer (OM-E4b).** A version's writer has exactly one fate,
//! and only the status oracle decides it (§II: the SO is the sole commit authority;
//! Algorithm 3 commits by writing `Tc`). A reader whose replica cannot judge a version
//! (`Tmax < Ts_f < T_init`, §IV "Client Startup": typically every version written before the
//! coordinator's last reconnect — after a failover, all of them) asks the oracle the writer's
//! [`messages::Fate`] with [`messages::Request::Fates`]: one request for every such writer of a
//! page, answered from durable state — `Committed(Tc)`, `Aborted`, `Old` (at or below `Tmax`,
//! OM-5's last line) or `NotCommitted` (in flight now: invisible to every reader that started
//! before the answer, because its `Tc`, if it ever commits, will be larger). The first three are
//! final, so the coordinator remembers them for every later reader, session and oracle
//! incarnation ([`engine::FATES_CACHED_MAX`]); the paper asks `inSnapshot` per read, which
//! after a failover (an empty replica, `Tmax` far below `T_init`) would turn a scan into one
//! oracle round trip per row, each resent every 200 ms — a storm that grows with every client
//! retry until nothing answers. And nothing waits
//! without bound: an operation undecided after [`engine::OP_DEADLINE`] (a partition or the
//! oracle unreachable) fails with a retryable `Unavailable`, and a commit unanswered after
//! [`engine::COMMIT_DEADLINE`] returns `Unavailable { outcome_unknown: true }` — both before the
//! client's own deadline.
//!
//! **The fate of a transaction committing at a crash** is decided by the oracle that recovers,
//! from its log alone — never by the writer's coordinator, and never by a reader:
//!
//! * *Its `Committed` record is in the log* (§IV "SO Data Reliability": the commit is
//!   acknowledged only after its WAL write, OM-7; with `replicas > 1`, only once the oracle's
//!   replica group committed the batch, so a new leader's log holds every *acknowledged*
//!   commit) — then it **committed** at that `Tc`, and the crash range lists it as committed.
//! * *Otherwise* it is inside the crash range `(Tmax, reserved bound]` that the recovering
//!   oracle logs first (§IV "Recovery": "abort all the uncommitted transactions that started
//!   before the failure", OM-8) — it **aborted**, for good: a late copy of its commit request
//!   finds it out of flight (`NotInFlight`).
//!
//! The writer's coordinator, if it lost the answer (oracle crash, failover, or its own
//! `COMMIT_DEADLINE`), tells its client only "outcome unknown" and leaves the versions alone; if it
//! died too, nothing changes — the decision never needed it, and its versions are invisible until
//! readers learn the fate (`Aborted` versions are purged by GC, OM-E5). A reader learns the fate in
//! one round trip to the oracle; while the oracle does not serve (its node restarting, or its
//! replica group electing a leader), its operation fails retryably at `OP_DEADLINE`.
//!
//! **Sessions own their transactions.** The SO records which session began each `Ts`. A session
//! ends when the SO drops it (silent, or lagging), or when the same client opens a newer one:
//! a coordinator connects with `ConnectAs { session: (epoch, n) }` at startup (even idle) and
//! after every lost session, an oracle failover included. Then every `Ts` the old session began and did not finish is aborted,
//! logged and replicated in deltas like any abort — nothing of it could finish: a restarted
//! coordinator forgot it, a reconnecting one doomed it. A crashed coordinator so holds `Tmin` only
//! until it restarts (or, if it never does, until the SO drops it as silent). A commit of the old
//! session still in the network (resent or duplicated) arrives after the abort and gets
//! `NotInFlight`, so it cannot commit after the abort was reported; and the coordinator never
//! says "committed" for it: it answered its client "outcome unknown" when the session was lost,
//! and a restarted coordinator has no client waiting. A late duplicate `ConnectAs` of the
//! current session is answered from the session's cursor and ends nothing; an older one is
//! refused (`StaleSession`). Tags and session ids start at `epoch << 32`, so a reply meant for an
//! earlier incarnation matches nothing. A crashed coordinator blocks nobody meanwhile: its
//! versions are invisible, and there are no locks.
//!
//! Which session owns a `Ts` is not logged (like the uncommitted list itself): a recovered SO
//! needs none, since it aborts everything that was in flight by a crash range (OM-8), whoever
//! owned it; sessions, session ids and `BeginAs` ids start empty there, and coordinators
//! reconnect with new session ids. What a session's end decides (the `Aborted` records) is
//! logged like any abort.
//!
//! **OM-E5 — garbage collection (§IV "HBase Garbage Collection").** Every
//! [`node::GC_INTERVAL`] the SO sends `Tmin` (smallest in-flight `Ts`) to the partitions. After
//! a commit the coordinator tells each written partition `(Ts, Tc, rows)`; a partition keeps these
//! notices in memory and, at a GC with mark `m`, for each noticed version with `Tc < m` deletes
//! every *older* version (smaller `Ts`) of that row: every reader with `Ts_r ≥ m` sees the noticed
//! version first (it is committed before the reader started), so it never reads past it. This is
//! exact, where the paper's "keep one non-aborted version below Tmin" is not (a version below
//! `Tmin` may have committed after a reader started). Reads and puts below the last mark are
//! refused (`TimestampTooOld`). A lost notice only keeps versions longer.
//!
//! The same message carries what no writer will clean up (OM-4): up to
//! [`node::PURGE_TXNS_MAX`] aborted `Ts`s below the mark not yet cleaned up, oldest first, and
//! the crash ranges below it. Each partition deletes its versions of those (a `Cleanup` record
//! per `Ts`, found through an index `Ts → rows` it builds from its store at first use — so again
//! after a restart — and keeps as versions come and go; a commit notice takes the committed
//! writer out of it) and reports `Purged` to the SO. A late put of a purged `Ts` is refused: it is
//! below the mark. Work whose report is lost is asked for again at the next round. Who reported
//! is volatile (not logged), so a restarted SO asks for the work again (purging twice finds
//! nothing) — only the conclusions, `Forgotten` and `CrashForgotten`, are logged.
//!
//! **OM-E6 — the replica and silent clients** are OM-6 and the oracle's idle push: a coordinator
//! answers pushes with `Ack`.
//!
//! ## OM-1 — timestamps (§II "Transaction Status Oracle", §V "Micro-benchmarks")
//!
//! One counter issues start and commit timestamps: unique and strictly increasing, so
//! `Ts(txn)` doubles as the transaction id. The WAL never sees single timestamps: the SO logs a
//! [`messages::Record::Reserve`] of an upper bound [`TIMESTAMP_BATCH`] ahead ("reserves thousands
//! of timestamps per each write into the WAL") and, after recovery, issues from above the last
//! logged bound. No reply carrying a timestamp leaves before its reservation is durable (OM-7),
//! so a timestamp is never issued twice, crash or not.
//!
//! ## OM-2 — commit (Algorithm 3)
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
//! ## OM-3 — bounded memory and `Tmax` (§III "Memory Limited Capacity")
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
//! ## OM-4 — the aborted and uncommitted lists (§III)
//!
//! `Ts` enters *uncommitted* at begin and leaves at commit or abort. When `Tmax` passes an
//! uncommitted `Ts` ("do not commit in a timely manner"), it is aborted. *Aborted* holds aborted
//! transactions that may have written. A client that deleted its versions sends `CleanedUp`; the
//! SO forgets the entry only once every transaction started before the report has terminated
//! ("defers the removal ... until the already started transactions terminate"), then logs and
//! replicates the removal. A `CleanedUp` for a transaction not in the list is ignored. An entry
//! whose client never cleans up (crashed, partitioned, gave up after
//! [`engine::CLEANUP_GIVE_UP_AFTER`], or an abort at the end of its session) is left to the data
//! store's garbage collection, as the paper says: once `Tmin` passes it, the GC message asks every
//! partition to purge it (OM-E5), and when every partition reported, it is forgotten exactly as
//! after a `CleanedUp`. Crash ranges (OM-8) go the same way: purged below `Tmin` (their committed
//! members kept), then dropped with a logged, replicated `CrashForgotten`. The uncommitted list
//! maps each `Ts` to the client that began it: when the client's session ends, its entries are
//! aborted (OM-E4).
//!
//! ## OM-5 — visibility (Algorithm 4)
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
//! aborts at commit, OM-2, and so never exposes what it read).
//!
//! ## OM-6 — replication to clients (§III "RPC Overhead", §IV "Client Replica", "Silent Clients")
//!
//! The SO appends each *durable* metadata change — `(Ts, Tc)`, new abort, forgotten abort, crash
//! range, new `Tmax` — once to a shared append-only buffer (`commitinfo`). Each connected client
//! has a cursor into it; each reply to `Begin` carries the entries since that client's cursor
//! ([`messages::Delta`], one slice copy per reply) and moves the cursor. `Connect` returns
//! `T_init` and the current aborted list; the replica answers OM-5 locally and reports
//! [`replica::Visibility::AskOracle`] only for `Tmax < Ts_f < T_init` with no local `Tc`. A
//! client silent for [`OracleConfig::idle_push_after`] gets its delta pushed; if it does not `Ack`
//! within [`OracleConfig::push_ack_timeout`] it is disconnected. A client whose cursor lags more
//! than [`OracleConfig::commitinfo_entries_max`] entries is disconnected too; the buffer is
//! trimmed to the slowest cursor.
//!
//! ## OM-7 — write-ahead log and group commit (§IV "SO Data Reliability")
//!
//! Records ([`messages::Record`]) accumulate in one open batch, emitted as one WAL write when it
//! reaches [`OracleConfig::batch_bytes_max`] (≈1 KB) or when a `Tick` finds it older than
//! [`OracleConfig::batch_delay`] (5 ms). **Every reply is held while a batch is open** and
//! rendered right after that batch is emitted (the runtime persists `persist` before sending
//! `send`, as for [`litmus_protocol::machine::Machine`]). So replies are only ever rendered from durable
//! state: a commit is acknowledged after its record; a `Begin` reply (which must carry every
//! `Tc < Ts`, or the replica would miss a commit in the reader's snapshot) after every earlier
//! commit; commitinfo only ever holds durable entries. Commit records carry `(Ts, Tc)` but not the
//! write set: `lastCommit` is not recovered (below), so logging rows would only cost bytes.
//!
//! ## OM-8 — recovery (§IV "SO Data Reliability", "Recovery")
//!
//! [`oracle::StatusOracle::recover`] starts from an optional [`messages::Checkpoint`] (written by
//! [`oracle::StatusOracle::checkpoint`] between batches: timestamp bound, `Tmax`, Tc list,
//! aborted list, crash ranges) and replays the batches logged after it **forwards**, through the
//! same code that applied them. The paper reads the log backwards until `Tc < Tmax` and keeps a
//! light checkpoint of long-lived aborts; replaying forwards from a full (small: no `lastCommit`)
//! checkpoint gives the same state and is simpler to get right; the runtime decides how often to
//! checkpoint. This half, [`oracle::StatusOracle::rebuild`], gives exactly the state of the
//! log. Then, as in the paper, every transaction that started before the crash and did not
//! commit is aborted ([`oracle::StatusOracle::fence`], by the oracle that is to serve only):
//! the SO does not know their ids (the uncommitted list is not logged), so it
//! logs a crash range `(Tmax, bound]` — "whatever is not committed nor aborted" — whose members,
//! except the committed ones it lists, are aborted for good (the range is dropped only once GC
//! purged their versions everywhere, OM-4). `lastCommit` starts empty: new
//! transactions start above every pre-crash `Tc`, and pre-crash transactions are aborted.
//! Lost with the crash: unflushed records (never acknowledged), pending cleanups (their entries
//! stay aborted until GC purges them again), sessions (clients reconnect and reset their
//! replica).
//!
//! ## Not implemented
//!
//! The SO keeps no session state across its own crash or failover (OM-8): the highest session
//! id of each client is volatile, so a `ConnectAs` delayed across an SO restart can end a newer
//! session: the transactions in flight in it abort (their
//! commits get `NotInFlight`, which the coordinator reports as outcome unknown — never a wrong
//! "committed"). A partition's `Ts → rows` index, rebuilt after a restart, holds every version
//! until commit notices, GC or cleanups remove entries: memory proportional to the store until
//! then.
//!
//! With `replicas = 1` nothing takes over from the oracle while its node is down: no
//! transaction starts or commits until node 0 restarts. Replica groups (`replicas > 1`)
//! are the oracle's high availability.

pub mod engine;
pub mod messages;
pub mod node;
pub mod oracle;
pub mod replica;

#[cfg(test)]
mod node_tests;
#[cfg(test)]
mod tests;

use litmus_core::{Key, NodeId, TableId, Timestamp};
use litmus_protocol::engine::{Capabilities, CoordinatorEngine, EngineDef, Guarantee, PartitionEngine};
use litmus_protocol::machine::Machine;
use node::{OracleMachine, ORACLE_ROLE};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The registered engine `omid`: the coordinator and partition halves of [`engine`], plus the
/// status oracle (role 0, node 0; with `replicas > 1`, a replica group from node 0 on).
#[derive(Clone, Copy, Debug)]
pub struct OmidEngine;

impl EngineDef for OmidEngine {
    fn name(&self) -> &'static str {
        "omid"
    }
    fn guarantee(&self) -> &'static str {
        "snapshot isolation (lock-free, status oracle; BASE procedures run as SI)"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            guarantee: Guarantee::SnapshotIsolation,
            base_transactions: false,
            one_round: false,
            interactive: true,
            batches: false,
            reads_for_update: false,
        }
    }
    fn coordinator(&self) -> Box<dyn CoordinatorEngine> {
        Box::new(engine::OmidCoordinator::new())
    }
    fn partition(&self) -> Box<dyn PartitionEngine> {
        Box::new(engine::OmidPartition::default())
    }
    /// The oracle alone on node 0 (`replicas = 1`): its failover is its node restarting.
    fn roles(&self, node: NodeId, nodes: u32, partitions: u32) -> Vec<Box<dyn Machine>> {
        if node == ORACLE_ROLE.node(nodes) {
            vec![Box::new(OracleMachine::new(node::runtime_config(), partitions))]
        } else {
            vec![]
        }
    }
    /// With `replicas > 1` the oracle is a replica group (node 0 and the ones after it): its
    /// log is the group's, and a new leader recovers it as a restart does (OM-8: a new
    /// timestamp range, what was in flight aborted).
    fn replicated_roles(
        &self,
        partitions: u32,
    ) -> Vec<(litmus_protocol::RoleId, litmus_protocol::engine::RoleBuilder)> {
        let config = node::runtime_config();
        let build: litmus_protocol::engine::RoleBuilder =
            std::sync::Arc::new(move || Box::new(OracleMachine::new(config.clone(), partitions)));
        vec![(ORACLE_ROLE, build)]
    }
}

/// Timestamps reserved by one [`messages::Record::Reserve`] (§V: "thousands ... per each write").
pub const TIMESTAMP_BATCH: u64 = 10_000;
/// Default bound on `lastCommit` rows (§III: 32 bytes per row, 32M rows per GB; we default lower).
pub const LAST_COMMIT_ROWS_MAX: usize = 1 << 20;
/// Default bound on Tc-list entries (committed transactions with `Tc > Tmax`).
pub const COMMIT_LIST_TXNS_MAX: usize = 1 << 18;
/// Default bound on in-flight transactions.
pub const UNCOMMITTED_TXNS_MAX: usize = 1 << 16;
/// Largest write set a commit may name: as many rows as `lastCommit` holds
/// ([`LAST_COMMIT_ROWS_MAX`]). A larger one would evict its own rows from `lastCommit` as it
/// commits; this bound keeps that from ever being needed. A `Commit` names each row in at most
/// 10 bytes (a postcard varint of the 64-bit [`RowId`]), so the largest is about 10 MiB, under
/// the 16 MiB frame limit; a coordinator on another node than the oracle needs the servers'
/// `max_frame_bytes` above its commit's size (a 100,000-row commit is about 1 MB).
pub const WRITE_SET_ROWS_MAX: usize = LAST_COMMIT_ROWS_MAX;
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

/// Snapshot isolation through a status oracle (Omid ICDE '14).
pub const OMID: litmus_protocol::EngineKind = litmus_protocol::EngineKind(&OmidEngine);
