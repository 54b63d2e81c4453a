//! The Omid engine proper: transactions over the partitioned multiversion store (§II "Status
//! Oracle in Action"). The coordinator half ([`OmidCoordinator`]) is the Omid *client*; the
//! partition half ([`OmidPartition`]) is the data server. See the module doc of [`super`] for
//! the mapping and the rules; rule numbers OM-E1–OM-E6 below refer to it.
//!
//! Every coordinator talks to the one status oracle at [`ORACLE`]. The oracle's failover is a
//! restart ([`super::node`]: its node's, or a new leader of its replica group recovering it), so
//! a coordinator that finds its session gone — refused as `NotConnected`, or the oracle silent
//! for [`ORACLE_FAILOVER_AFTER`] while requests wait — reconnects to the same address with a
//! new session (OM-E4).

use super::messages::{CrashRange, Delta, Fate, Reply as OracleBody, Request as OracleCall, FATES_PER_REQUEST_MAX};
use super::node::{OracleReply, OracleRequest, OracleWire, ORACLE};
use super::replica::{ClientReplica, Visibility};
use super::{OracleError, RowId};
use litmus_core::{AbortReason, Error, InvalidInput, Key, PartitionId, Row, TableId, Time, Timestamp, TxnId};
use litmus_protocol::engine::{
    decode_record, CoordCtx, CoordinatorEngine, PartCtx, PartitionEngine, RoleTraffic, TxnOptions,
};
use litmus_protocol::message::{Addr, Payload, SubOpId};
use litmus_protocol::op::{write_image, OpKind, PartOp, PartResult};
use litmus_storage::mvcc::MvccStore;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::time::Duration;

mod txns;

/// `nv` (§IV): versions returned per key by a read or a scan, newest first.
pub const VERSIONS_PER_READ: u32 = 3;
/// Most keys one scan request returns (the coordinator continues from the last one).
pub const SCAN_PAGE_KEYS_MAX: u32 = 1024;
/// A tagged oracle request unanswered this long is sent again (same tag).
pub const ORACLE_RESEND_AFTER: Duration = Duration::from_millis(200);
/// A partition request unanswered this long is sent again (reads and puts are idempotent).
pub const PARTITION_RESEND_AFTER: Duration = Duration::from_millis(100);
/// An oracle that answers nothing this long while requests wait is reconnected to with a new
/// session (it restarted, or its replica group elected a new leader, which recovered it).
pub const ORACLE_FAILOVER_AFTER: Duration = Duration::from_millis(300);
/// A delta gap (a lost reply that carried metadata) older than this resets the session.
pub const DELTA_GAP_TIMEOUT: Duration = Duration::from_millis(500);
/// An operation not decided in this long (a partition that does not answer, an oracle that
/// cannot be reached to judge a version) fails with a retryable `Unavailable` — before the
/// client's own deadline ([`litmus_protocol::client::REQUEST_TIMEOUT_DEFAULT`]), so the client gets a
/// typed answer rather than a timeout, and nothing waits forever.
pub const OP_DEADLINE: Duration = Duration::from_secs(3);
/// A commit the oracle has not answered in this long is reported as outcome unknown (its
/// fate is decided by the oracle alone; readers ask it, see the module doc, OM-E4).
pub const COMMIT_DEADLINE: Duration = Duration::from_secs(3);
/// Final writer fates ([`Fate`]) a coordinator remembers across transactions and sessions.
pub const FATES_CACHED_MAX: usize = 1 << 20;
/// A cleanup whose partitions did not all answer in this long is given up (its aborted entry
/// stays in the oracle's list: safe, OM-4).
pub const CLEANUP_GIVE_UP_AFTER: Duration = Duration::from_secs(5);

/// A version as a partition returns it: the writer's start timestamp and the row (`None`: a
/// tombstone).
pub type Version = litmus_storage::mvcc::OwnedVersion;

/// A key with its newest versions (newest first) and whether older ones exist.
pub type KeyVersions = (Key, Vec<Version>, bool);

/// One page of a scan: each key with its newest versions, and the key to resume after when the
/// page was full.
pub type ScanPage = (Vec<KeyVersions>, Option<Key>);

/// Start timestamp → the rows a partition holds a version of at that timestamp.
type VersionIndex = BTreeMap<Timestamp, BTreeSet<(TableId, Key)>>;

/// Coordinator (and oracle) → partition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// The newest `versions_max` versions of `key` below `before` (all when `None`), read by the
    /// transaction that started at `reader_ts`.
    Read {
        tag: u64,
        id: SubOpId,
        table: TableId,
        key: Key,
        reader_ts: Timestamp,
        before: Option<Timestamp>,
        versions_max: u32,
    },
    /// The newest `versions_max` versions of each of the first `keys_max` keys in the range;
    /// `after`: resume strictly after it.
    Scan {
        tag: u64,
        id: SubOpId,
        table: TableId,
        start: Key,
        after: Option<Key>,
        end: Option<Key>,
        keys_max: u32,
        versions_max: u32,
        reader_ts: Timestamp,
    },
    /// For each `(key, before)`: the newest `versions_max` versions of the key below `before` (a
    /// scan's keys whose newest versions were all outside the snapshot).
    ReadOlder {
        tag: u64,
        id: SubOpId,
        table: TableId,
        keys: Vec<(Key, Timestamp)>,
        reader_ts: Timestamp,
        versions_max: u32,
    },
    /// Install a version tagged with the writer's start timestamp (`row: None`: a tombstone).
    Put { tag: u64, id: SubOpId, ts: Timestamp, table: TableId, key: Key, row: Option<Row> },
    /// Delete the versions of an aborted writer (§II "single-row cleanup").
    Cleanup { ts: Timestamp, rows: Vec<(TableId, Key)> },
    /// The writer committed at `commit_ts`: its versions may shadow older ones at GC (OM-E5).
    Committed { ts: Timestamp, commit_ts: Timestamp, rows: Vec<(TableId, Key)> },
    /// From the oracle: `Tmin`, the garbage-collection low-water mark (OM-E5), and the aborted
    /// transactions and crash ranges below it whose versions must go (OM-4); answered with
    /// [`Reply::Purged`].
    Gc { low_water: Timestamp, purge: Vec<Timestamp>, crashed: Vec<CrashRange> },
}

/// Partition → coordinator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// `more`: older versions exist beyond the ones returned.
    Versions {
        tag: u64,
        id: SubOpId,
        result: Result<(Vec<Version>, bool), Error>,
    },
    /// `resume`: the page was full; continue after this key.
    ScanVersions {
        tag: u64,
        id: SubOpId,
        result: Result<ScanPage, Error>,
    },
    Written {
        tag: u64,
        id: SubOpId,
        result: Result<(), Error>,
    },
    /// Answer to [`Request::ReadOlder`], in the order asked.
    OlderVersions {
        tag: u64,
        id: SubOpId,
        result: Result<Vec<KeyVersions>, Error>,
    },
    CleanedUp {
        ts: Timestamp,
    },
    /// To the oracle: the versions of these aborted transactions and crash ranges `(after,
    /// upto)` are gone from this partition.
    Purged {
        start_ts: Vec<Timestamp>,
        crashed: Vec<(Timestamp, Timestamp)>,
    },
}

/// A partition's redo record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Record {
    Put {
        ts: Timestamp,
        table: TableId,
        key: Key,
        row: Option<Row>,
    },
    Cleanup {
        ts: Timestamp,
        rows: Vec<(TableId, Key)>,
    },
    /// For each `(table, key, ts)`: drop the versions of the key older than `ts`.
    Gc {
        low_water: Timestamp,
        removals: Vec<(TableId, Key, Timestamp)>,
    },
}

// ================================================================================================
// Partition half
// ================================================================================================

/// The data server. See the module doc of [`super`] (OM-E4, OM-E5).
#[derive(Debug, Default)]
pub struct OmidPartition {
    /// The last applied GC mark: reads and writes below it are refused (their versions may be
    /// gone).
    low_water: Timestamp,
    /// Start timestamps whose versions were cleaned up above `low_water`: a late (duplicated or
    /// resent) put of one is refused, or it would resurrect a version after the oracle forgot
    /// the abort.
    cleaned: BTreeSet<Timestamp>,
    /// Commit notices not yet used by GC: `(commit_ts, table, key, ts)`. Volatile: losing one
    /// only keeps old versions longer.
    marks: Vec<(Timestamp, TableId, Key, Timestamp)>,
    /// Which rows hold a version of each start timestamp, for purging the versions of aborted
    /// writers that cannot clean up. Built from the store at first use (so after a restart);
    /// committed writers leave it at their commit notice, versions leave it when removed.
    index: Option<VersionIndex>,
}

#[derive(Serialize, Deserialize)]
struct PartitionState {
    low_water: Timestamp,
    cleaned: Vec<Timestamp>,
}

impl OmidPartition {
    fn too_old(&self, ts: Timestamp) -> Result<(), Error> {
        if ts < self.low_water {
            return Err(Error::Abort(AbortReason::TimestampTooOld));
        }
        Ok(())
    }

    fn read(
        &self,
        store: &MvccStore,
        table: TableId,
        key: &Key,
        reader_ts: Timestamp,
        before: Option<Timestamp>,
        versions_max: u32,
    ) -> Result<(Vec<Version>, bool), Error> {
        self.too_old(reader_ts)?;
        let mut versions: Vec<Version> = store
            .versions(table, key)
            .filter(|(ts, _)| before.is_none_or(|b| *ts < b))
            .take(versions_max as usize + 1)
            .map(|(ts, row)| (ts, row.cloned()))
            .collect();
        let more = versions.len() > versions_max as usize;
        versions.truncate(versions_max as usize);
        Ok((versions, more))
    }

    fn index(&mut self, store: &MvccStore) -> &mut VersionIndex {
        self.index.get_or_insert_with(|| {
            let mut index = VersionIndex::new();
            for (table, key, ts) in store.all_versions() {
                index.entry(ts).or_default().insert((table, key.clone()));
            }
            index
        })
    }

    fn unindex(&mut self, ts: Timestamp, table: TableId, key: &Key) {
        let Some(index) = self.index.as_mut() else { return };
        if let Some(rows) = index.get_mut(&ts) {
            rows.remove(&(table, key.clone()));
            if rows.is_empty() {
                index.remove(&ts);
            }
        }
    }

    /// Deletes the versions of the aborted transactions `purge` and of the uncommitted members
    /// of the crash ranges `crashed`, all below the GC mark — so a late put of one is refused
    /// ([`OmidPartition::too_old`]) and cannot resurrect a version. Returns what was purged.
    fn purge(
        &mut self,
        purge: &[Timestamp],
        crashed: &[CrashRange],
        ctx: &mut PartCtx,
    ) -> (Vec<Timestamp>, Vec<(Timestamp, Timestamp)>) {
        let low_water = self.low_water;
        let index = self.index(ctx.store);
        let mut work: Vec<(Timestamp, Vec<(TableId, Key)>)> = Vec::new();
        let purged: Vec<Timestamp> = purge.iter().copied().filter(|&ts| ts < low_water).collect();
        for ts in &purged {
            if let Some(rows) = index.get(ts) {
                work.push((*ts, rows.iter().cloned().collect()));
            }
        }
        let mut ranges = Vec::new();
        for range in crashed.iter().filter(|r| r.upto < low_water) {
            ranges.push((range.after, range.upto));
            for (&ts, rows) in index.range(range.after.next()..=range.upto) {
                if range.aborts(ts) {
                    work.push((ts, rows.iter().cloned().collect()));
                }
            }
        }
        for (ts, rows) in work {
            let record = Record::Cleanup { ts, rows };
            ctx.log(&record);
            self.apply(record, ctx.store).expect("a cleanup applies");
        }
        (purged, ranges)
    }

    fn gc(&mut self, low_water: Timestamp, ctx: &mut PartCtx) {
        if low_water <= self.low_water {
            return;
        }
        let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.marks).into_iter().partition(|m| m.0 < low_water);
        self.marks = keep;
        let removals = due.into_iter().map(|(_, table, key, ts)| (table, key, ts)).collect();
        let record = Record::Gc { low_water, removals };
        ctx.log(&record);
        self.apply(record, ctx.store).expect("a GC record applies");
    }
}

impl PartitionEngine for OmidPartition {
    fn on_request(&mut self, from: Addr, req: Payload, ctx: &mut PartCtx) {
        let Ok(req) = req.decode::<Request>() else { return };
        match req {
            Request::Read { tag, id, table, key, reader_ts, before, versions_max } => {
                let result = self.read(ctx.store, table, &key, reader_ts, before, versions_max.max(1));
                ctx.reply(from, Reply::Versions { tag, id, result });
            }
            Request::Scan { tag, id, table, start, after, end, keys_max, versions_max, reader_ts } => {
                let result = self.too_old(reader_ts).map(|()| {
                    let lower = after.as_ref().map_or(Bound::Included(&start), Bound::Excluded);
                    let upper = end.as_ref().map_or(Bound::Unbounded, Bound::Excluded);
                    let keys_max = keys_max.clamp(1, SCAN_PAGE_KEYS_MAX) as usize;
                    let versions_max = versions_max.max(1) as usize;
                    let page = ctx.store.scan_versions(table, lower, upper, keys_max, versions_max);
                    let resume = (page.len() == keys_max).then(|| page.last().expect("full page").0.clone());
                    (page, resume)
                });
                ctx.reply(from, Reply::ScanVersions { tag, id, result });
            }
            Request::ReadOlder { tag, id, table, keys, reader_ts, versions_max } => {
                let keys = &keys[..keys.len().min(SCAN_PAGE_KEYS_MAX as usize)];
                let result = keys
                    .iter()
                    .map(|(key, before)| {
                        let (versions, more) =
                            self.read(ctx.store, table, key, reader_ts, Some(*before), versions_max.max(1))?;
                        Ok((key.clone(), versions, more))
                    })
                    .collect();
                ctx.reply(from, Reply::OlderVersions { tag, id, result });
            }
            Request::Put { tag, id, ts, table, key, row } => {
                let result = if self.cleaned.contains(&ts) {
                    Err(Error::Abort(AbortReason::Failure))
                } else {
                    self.too_old(ts).map(|()| {
                        let record = Record::Put { ts, table, key, row };
                        ctx.log(&record);
                        self.apply(record, ctx.store).expect("a put applies");
                    })
                };
                ctx.reply(from, Reply::Written { tag, id, result });
            }
            Request::Cleanup { ts, rows } => {
                let record = Record::Cleanup { ts, rows };
                ctx.log(&record);
                self.apply(record, ctx.store).expect("a cleanup applies");
                ctx.reply(from, Reply::CleanedUp { ts });
            }
            Request::Committed { ts, commit_ts, rows } => {
                // A committed version is never purged: it leaves the index.
                for (table, key) in &rows {
                    self.unindex(ts, *table, key);
                }
                self.marks.extend(rows.into_iter().map(|(table, key)| (commit_ts, table, key, ts)));
            }
            Request::Gc { low_water, purge, crashed } => {
                self.gc(low_water, ctx);
                if purge.is_empty() && crashed.is_empty() {
                    return;
                }
                let (start_ts, crashed) = self.purge(&purge, &crashed, ctx);
                ctx.reply(from, Reply::Purged { start_ts, crashed });
            }
        }
    }

    fn on_tick(&mut self, _ctx: &mut PartCtx) {}

    fn apply_bytes(&mut self, record: &[u8], store: &mut MvccStore) -> Result<(), Error> {
        self.apply(decode_record("omid", record)?, store)
    }

    fn encode_state(&self) -> Vec<u8> {
        let state = PartitionState { low_water: self.low_water, cleaned: self.cleaned.iter().copied().collect() };
        postcard::to_stdvec(&state).expect("serialize")
    }

    fn decode_state(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let state: PartitionState =
            postcard::from_bytes(bytes).map_err(|e| Error::Storage(format!("omid partition state: {e}")))?;
        self.low_water = state.low_water;
        self.cleaned = state.cleaned.into_iter().collect();
        Ok(())
    }
}

impl OmidPartition {
    /// Applies one record (live, right after logging it, and in recovery).
    fn apply(&mut self, record: Record, store: &mut MvccStore) -> Result<(), Error> {
        match record {
            Record::Put { ts, table, key, row } => {
                if let Some(index) = self.index.as_mut() {
                    index.entry(ts).or_default().insert((table, key.clone()));
                }
                store.put(table, key, ts, row)
            }
            Record::Cleanup { ts, rows } => {
                for (table, key) in rows {
                    store.remove_version(table, &key, ts);
                    self.unindex(ts, table, &key);
                }
                if ts >= self.low_water {
                    self.cleaned.insert(ts);
                }
            }
            Record::Gc { low_water, removals } => {
                for (table, key, ts) in removals {
                    // A committed version every reader at or above the mark sees (its Tc is below
                    // the mark) shadows every version with a smaller start timestamp.
                    let older: Vec<Timestamp> =
                        store.versions(table, &key).map(|(v, _)| v).filter(|&v| v < ts).collect();
                    for v in older {
                        store.remove_version(table, &key, v);
                        self.unindex(v, table, &key);
                    }
                }
                self.low_water = self.low_water.max(low_water);
                let low_water = self.low_water;
                self.cleaned.retain(|&ts| ts >= low_water);
            }
        }
        Ok(())
    }
}

// ================================================================================================
// Coordinator half: the Omid client
// ================================================================================================

/// Why a tagged oracle request was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    Connect,
    Begin(TxnId),
    Commit(TxnId),
    /// A batch of [`OracleCall::Fates`] (who waits for which writer: `OmidCoordinator::asking`).
    Fates,
    /// An abort, or the release of an unused start timestamp: resent until answered, or the
    /// timestamp would stay in flight at the oracle and hold `Tmin` (so GC) back.
    Finish,
}

struct Call {
    request: OracleCall,
    purpose: Purpose,
    sent_at: Time,
    first_sent_at: Time,
}

struct PartCall {
    part: PartitionId,
    request: Request,
    sent_at: Time,
}

/// What a point read is for.
#[derive(Clone, Debug)]
enum Then {
    Return,
    /// Insert / Update / Delete: compute the new image from the row in the snapshot.
    Write(OpKind),
}

enum OpState {
    Read {
        table: TableId,
        key: Key,
        then: Then,
        fetched: Option<(Vec<Version>, bool)>,
    },
    /// `older`: a [`Request::ReadOlder`] for some keys of `page` is out.
    Scan {
        table: TableId,
        start: Key,
        end: Option<Key>,
        limit: u32,
        rows: Vec<(Key, Row)>,
        page: Option<ScanPage>,
        older: bool,
    },
    Put,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Running,
    Committing,
}

struct Txn {
    start_ts: Option<Timestamp>,
    queued: Vec<(SubOpId, PartOp)>,
    /// Rows written, and the partitions holding each version (replicated tables: all).
    writes: BTreeMap<(TableId, Key), BTreeSet<PartitionId>>,
    ops: BTreeMap<SubOpId, OpState>,
    /// The oracle's answers to `inSnapshot` queries the replica could not answer.
    verdicts: BTreeMap<Timestamp, bool>,
    phase: Phase,
    /// When each operation was issued (the [`OP_DEADLINE`] clock).
    issued: BTreeMap<SubOpId, Time>,
    /// When the commit request was sent (the [`COMMIT_DEADLINE`] clock).
    commit_since: Time,
    /// The oracle session this transaction's snapshot came from ended: it can only abort.
    doomed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Session {
    Disconnected,
    Connecting,
    Connected,
}

/// The Omid client inside a coordinator. See the module doc of [`super`] (OM-E1–OM-E3, OM-E6).
pub struct OmidCoordinator {
    /// When the oracle last answered.
    oracle_heard: Time,
    session: Session,
    replica: Option<ClientReplica>,
    /// Deltas that arrived ahead of the replica's cursor (the network reorders), by `from`.
    early: BTreeMap<u64, Delta>,
    gap_since: Option<Time>,
    /// Start timestamps received whose delta the replica has not applied yet: `(txn, Ts, end)`.
    staged: Vec<(TxnId, Timestamp, u64)>,
    /// Tags and session ids start at `epoch << 32`, so a reply meant for an earlier incarnation
    /// of this coordinator matches nothing of this one.
    next_tag: u64,
    sessions_opened: u64,
    calls: BTreeMap<u64, Call>,
    parts: BTreeMap<SubOpId, (u64, PartCall)>,
    txns: BTreeMap<TxnId, Txn>,
    cleanups: BTreeMap<Timestamp, (BTreeSet<PartitionId>, Time)>,
    /// Writers whose fate was asked of the oracle and not answered yet, with the transactions
    /// that were waiting when the question left (only they may read a `NotCommitted` answer
    /// as "invisible": a transaction that started later might have started after the commit).
    asking: BTreeMap<Timestamp, BTreeSet<TxnId>>,
    /// Final fates learned from the oracle: facts, valid for every reader, session and oracle
    /// incarnation (the oracle answers only from durable state, which every later incarnation
    /// recovers), so each writer is asked about at most once — not once per reader, which
    /// after a failover (an empty replica with `T_init` above every earlier commit) would make
    /// every scan ask about every row.
    fates: BTreeMap<Timestamp, Fate>,
}

impl Default for OmidCoordinator {
    fn default() -> Self {
        Self::new()
    }
}

fn write_set(writes: &BTreeMap<(TableId, Key), BTreeSet<PartitionId>>) -> Vec<RowId> {
    writes.keys().map(|(table, key)| RowId::of(*table, key)).collect()
}

fn rows_by_partition(
    writes: &BTreeMap<(TableId, Key), BTreeSet<PartitionId>>,
) -> BTreeMap<PartitionId, Vec<(TableId, Key)>> {
    let mut by_part: BTreeMap<PartitionId, Vec<(TableId, Key)>> = BTreeMap::new();
    for ((table, key), parts) in writes {
        for p in parts {
            by_part.entry(*p).or_default().push((*table, key.clone()));
        }
    }
    by_part
}

impl OmidCoordinator {
    pub fn new() -> OmidCoordinator {
        OmidCoordinator {
            oracle_heard: Time::ZERO,
            session: Session::Disconnected,
            replica: None,
            early: BTreeMap::new(),
            gap_since: None,
            staged: Vec::new(),
            next_tag: 0,
            sessions_opened: 0,
            calls: BTreeMap::new(),
            parts: BTreeMap::new(),
            txns: BTreeMap::new(),
            cleanups: BTreeMap::new(),
            asking: BTreeMap::new(),
            fates: BTreeMap::new(),
        }
    }

    // ---- talking to the oracle -----------------------------------------------------------------

    fn send_oracle(ctx: &mut CoordCtx, tag: u64, body: OracleCall) {
        ctx.send(ORACLE, OracleWire::Request(OracleRequest { tag, body }).into_message());
    }

    fn call(&mut self, request: OracleCall, purpose: Purpose, ctx: &mut CoordCtx) {
        self.call_with(|_| request, purpose, ctx);
    }

    /// Sends a tagged request built from its tag; resent with the same tag until answered.
    fn call_with(&mut self, request: impl FnOnce(u64) -> OracleCall, purpose: Purpose, ctx: &mut CoordCtx) {
        if self.next_tag == 0 {
            self.next_tag = u64::from(ctx.epoch) << 32;
        }
        self.next_tag += 1;
        let tag = self.next_tag;
        let request = request(tag);
        Self::send_oracle(ctx, tag, request.clone());
        self.calls.insert(tag, Call { request, purpose, sent_at: ctx.now, first_sent_at: ctx.now });
    }

    /// A request whose answer nobody waits for (tag 0 is never tracked).
    fn notify(ctx: &mut CoordCtx, body: OracleCall) {
        Self::send_oracle(ctx, 0, body);
    }

    /// Gives a start timestamp nobody will use back to the oracle: an empty commit takes it out
    /// of the uncommitted list without entering it anywhere (OM-2).
    fn release(&mut self, ctx: &mut CoordCtx, start_ts: Timestamp) {
        self.call(OracleCall::Commit { start_ts, write_set: Vec::new() }, Purpose::Finish, ctx);
    }

    /// Tells the oracle a transaction that may have written aborted.
    fn abort_at_oracle(&mut self, ctx: &mut CoordCtx, start_ts: Timestamp) {
        self.call(OracleCall::Abort { start_ts }, Purpose::Finish, ctx);
    }

    /// The oracle is silent while requests wait (it restarted, or its replica group is
    /// electing a new leader, which recovers it as a restart does): the session ends (OM-E4)
    /// and the coordinator reconnects to [`ORACLE`] with a new session id. Unanswered aborts
    /// and releases are dropped with the session: the new session's connect ends the old one at
    /// an oracle that knew it, and a recovered oracle aborted everything in flight.
    fn fail_over(&mut self, ctx: &mut CoordCtx) {
        self.oracle_heard = ctx.now;
        self.session_lost(ctx);
    }

    /// Opens a new oracle session. Its id grows with every session (and incarnation): the oracle
    /// aborts what the previous session began (none of it can finish: this coordinator forgot or
    /// doomed it), and refuses a late duplicate of an older connect.
    fn connect(&mut self, ctx: &mut CoordCtx) {
        if self.session == Session::Disconnected {
            self.session = Session::Connecting;
            self.sessions_opened += 1;
            let session = (u64::from(ctx.epoch) << 32) | self.sessions_opened;
            self.call(OracleCall::ConnectAs { session }, Purpose::Connect, ctx);
        }
    }

    /// The oracle session ended (the oracle restarted, dropped us as silent, or a delta was lost):
    /// every transaction holding a snapshot of it can only abort (OM-E6).
    fn session_lost(&mut self, ctx: &mut CoordCtx) {
        self.session = Session::Disconnected;
        self.replica = None;
        self.early.clear();
        self.gap_since = None;
        // Staged start timestamps came from the lost session: the oracle aborts them (crash
        // range) or they expire when `Tmax` passes them; their transactions ask again.
        self.staged.clear();
        self.calls.clear();
        self.asking.clear();
        let ids: Vec<TxnId> = self.txns.keys().copied().collect();
        for id in ids {
            let t = self.txns.get_mut(&id).expect("listed");
            if t.start_ts.is_none() {
                continue; // asks again once connected
            }
            t.doomed = true;
            if t.phase == Phase::Committing {
                // A copy of the commit request may have been processed (and made durable)
                // before the session ended: the outcome is unknown; the versions stay.
                self.txns.remove(&id);
                self.forget_parts(id);
                let reason = "status oracle session lost at commit".into();
                ctx.txn_done(id, Err(Error::Unavailable { reason, outcome_unknown: true }));
                continue;
            }
            let ops: Vec<SubOpId> = t.ops.keys().copied().collect();
            t.ops.clear();
            for op in ops {
                self.parts.remove(&op);
                ctx.op_done(op, Err(Error::Abort(AbortReason::Failure)));
            }
        }
        self.connect(ctx);
    }

    fn on_connected(&mut self, connected: &super::messages::Connected, ctx: &mut CoordCtx) {
        self.session = Session::Connected;
        self.replica = Some(ClientReplica::new(connected));
        self.early.clear();
        let waiting: Vec<TxnId> = self.txns.iter().filter(|(_, t)| t.start_ts.is_none()).map(|(id, _)| *id).collect();
        for txn in waiting {
            self.call_with(|id| OracleCall::BeginAs { id }, Purpose::Begin(txn), ctx);
        }
    }

    /// Buffers a delta. Deltas are slices of one stream, so of two that start at the same
    /// position the longer holds the shorter (replies rendered with nothing new in between).
    fn buffer_delta(&mut self, delta: Delta) {
        match self.early.entry(delta.from) {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(delta);
            }
            std::collections::btree_map::Entry::Occupied(mut e) => {
                if delta.entries.len() > e.get().entries.len() {
                    e.insert(delta);
                }
            }
        }
    }

    /// Applies buffered deltas in stream order (skipping what the replica already has), then
    /// hands out the start timestamps they cover.
    fn drain_deltas(&mut self, ctx: &mut CoordCtx) {
        let Some(replica) = self.replica.as_mut() else { return };
        let cursor_before = replica.cursor();
        while let Some(entry) = self.early.first_entry() {
            let cursor = replica.cursor();
            if *entry.key() > cursor {
                break; // a gap: an earlier reply is still on its way (or lost)
            }
            let delta = entry.remove();
            let skip = (cursor - delta.from) as usize;
            if skip >= delta.entries.len() {
                continue; // already applied (a duplicate, or covered by a longer delta)
            }
            let mut delta = delta;
            delta.entries.drain(..skip);
            delta.from = cursor;
            if replica.apply(&delta).is_err() {
                // Entries that contradict the replica: a late delta of an earlier session or
                // oracle incarnation. Start over with a new session and replica.
                return self.session_lost(ctx);
            }
        }
        let cursor = replica.cursor();
        // The gap clock runs only while the replica makes no progress.
        self.gap_since = match (self.early.is_empty(), cursor > cursor_before) {
            (true, _) => None,
            (false, true) => Some(ctx.now),
            (false, false) => self.gap_since.or(Some(ctx.now)),
        };
        let (ready, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.staged).into_iter().partition(|s| s.2 <= cursor);
        self.staged = later;
        for (txn, ts, _) in ready {
            self.started(txn, ts, ctx);
        }
    }

    fn started(&mut self, txn: TxnId, ts: Timestamp, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&txn).filter(|t| t.start_ts.is_none()) else {
            return self.release(ctx, ts);
        };
        t.start_ts = Some(ts);
        for (id, op) in std::mem::take(&mut t.queued) {
            self.execute(id, op, ctx);
        }
    }

    // ---- operations ----------------------------------------------------------------------------

    fn send_part(&mut self, id: SubOpId, part: PartitionId, request: Request, ctx: &mut CoordCtx) {
        let tag = match &request {
            Request::Read { tag, .. }
            | Request::Scan { tag, .. }
            | Request::ReadOlder { tag, .. }
            | Request::Put { tag, .. } => *tag,
            _ => 0,
        };
        ctx.send_to_partition(part, request.clone());
        self.parts.insert(id, (tag, PartCall { part, request, sent_at: ctx.now }));
    }

    fn fresh_tag(&mut self) -> u64 {
        self.next_tag += 1;
        self.next_tag
    }

    fn forget_parts(&mut self, txn: TxnId) {
        self.parts.retain(|id, _| id.txn != txn);
    }
}

impl OmidCoordinator {
    /// Nothing waits forever: an operation older than [`OP_DEADLINE`] fails with a
    /// retryable `Unavailable` (it changed nothing the transaction keeps: the transaction
    /// aborts, and its versions are cleaned up or purged like any aborted writer's), and a
    /// commit unanswered for [`COMMIT_DEADLINE`] is reported as outcome unknown.
    fn enforce_deadlines(&mut self, ctx: &mut CoordCtx) {
        let now = ctx.now;
        let mut expired_ops = Vec::new();
        let mut expired_commits = Vec::new();
        for (&txn, t) in self.txns.iter_mut() {
            if t.phase == Phase::Committing {
                if now.saturating_sub(t.commit_since) >= COMMIT_DEADLINE {
                    expired_commits.push(txn);
                }
                continue;
            }
            let (ops, queued) = (&t.ops, &t.queued);
            t.issued.retain(|id, _| ops.contains_key(id) || queued.iter().any(|(q, _)| q == id));
            for (&id, &at) in &t.issued {
                if now.saturating_sub(at) >= OP_DEADLINE {
                    expired_ops.push(id);
                }
            }
        }
        for id in expired_ops {
            let t = self.txns.get_mut(&id.txn).expect("listed");
            t.issued.remove(&id);
            t.ops.remove(&id);
            t.queued.retain(|(q, _)| *q != id);
            self.parts.remove(&id);
            let reason = "operation not decided before its deadline (partition or status oracle unreachable)";
            ctx.op_done(id, Err(Error::Unavailable { reason: reason.into(), outcome_unknown: false }));
        }
        for txn in expired_commits {
            self.txns.remove(&txn);
            self.forget_parts(txn);
            let reason = "the status oracle did not answer the commit before its deadline".into();
            ctx.txn_done(txn, Err(Error::Unavailable { reason, outcome_unknown: true }));
        }
    }

    fn on_oracle_reply(&mut self, reply: OracleReply, ctx: &mut CoordCtx) {
        self.oracle_heard = ctx.now;
        let purpose = reply.tag.and_then(|tag| self.calls.remove(&tag)).map(|c| c.purpose);
        match reply.body {
            OracleBody::Connected(c) => {
                if purpose == Some(Purpose::Connect) {
                    self.on_connected(&c, ctx);
                }
            }
            OracleBody::Began { start_ts, delta } => self.on_begun(purpose, start_ts, delta, ctx),
            OracleBody::Push { delta } => {
                if self.replica.is_some() {
                    self.buffer_delta(delta);
                    self.drain_deltas(ctx);
                    Self::notify(ctx, OracleCall::Ack);
                }
            }
            OracleBody::Fates { fates } => {
                if purpose == Some(Purpose::Fates) {
                    self.on_fates(fates, ctx);
                }
            }
            // Asked only by clients without a replica (the oracle benchmark), never here.
            OracleBody::InSnapshot { .. } => {}
            body @ (OracleBody::Committed { .. } | OracleBody::Aborted { .. }) => {
                if let Some(Purpose::Commit(txn)) = purpose {
                    self.on_commit_reply(txn, body, ctx);
                }
            }
            OracleBody::Refused(e) => match purpose {
                Some(Purpose::Commit(txn)) => self.on_commit_reply(txn, OracleBody::Refused(e), ctx),
                _ if e == OracleError::NotConnected && (purpose.is_some() || reply.tag.is_none()) => {
                    self.session_lost(ctx)
                }
                Some(Purpose::Connect) => {
                    // Too many clients: try again at the next resend.
                    self.session = Session::Disconnected;
                }
                _ => {}
            },
            OracleBody::Done { .. } => {}
        }
    }
}

impl CoordinatorEngine for OmidCoordinator {
    fn begin(&mut self, txn: TxnId, _opts: &TxnOptions, ctx: &mut CoordCtx) {
        let t = Txn {
            start_ts: None,
            queued: Vec::new(),
            writes: BTreeMap::new(),
            ops: BTreeMap::new(),
            verdicts: BTreeMap::new(),
            phase: Phase::Running,
            issued: BTreeMap::new(),
            commit_since: ctx.now,
            doomed: false,
        };
        self.txns.insert(txn, t);
        match self.session {
            Session::Connected => self.call_with(|id| OracleCall::BeginAs { id }, Purpose::Begin(txn), ctx),
            _ => self.connect(ctx),
        }
    }

    fn issue(&mut self, id: SubOpId, op: PartOp, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&id.txn) else {
            return ctx.op_done(id, Err(Error::Abort(AbortReason::Failure)));
        };
        t.issued.insert(id, ctx.now);
        if t.start_ts.is_none() {
            t.queued.push((id, op));
            return;
        }
        self.execute(id, op, ctx);
    }

    fn commit(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&txn) else {
            return ctx.txn_done(txn, Err(Error::Abort(AbortReason::Failure)));
        };
        let Some(ts) = t.start_ts else {
            // Nothing read or written yet: the pending Begin reply will be released.
            self.txns.remove(&txn);
            return ctx.txn_done(txn, Ok(()));
        };
        if t.writes.is_empty() {
            // Read-only: commits locally (§II); the oracle only learns the timestamp is free.
            self.txns.remove(&txn);
            self.forget_parts(txn);
            self.release(ctx, ts);
            return ctx.txn_done(txn, Ok(()));
        }
        if t.doomed {
            let t = self.txns.remove(&txn).expect("present");
            self.forget_parts(txn);
            self.abort_at_oracle(ctx, ts);
            self.start_cleanup(ts, &t.writes, ctx);
            return ctx.txn_done(txn, Err(Error::Abort(AbortReason::Failure)));
        }
        t.phase = Phase::Committing;
        t.commit_since = ctx.now;
        let request = OracleCall::Commit { start_ts: ts, write_set: write_set(&t.writes) };
        self.forget_parts(txn);
        self.call(request, Purpose::Commit(txn), ctx);
    }

    fn abort(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        self.forget_parts(txn);
        let Some(t) = self.txns.remove(&txn) else { return ctx.txn_done(txn, Ok(())) };
        if let Some(ts) = t.start_ts {
            if t.writes.is_empty() {
                self.release(ctx, ts);
            } else {
                self.abort_at_oracle(ctx, ts);
                self.start_cleanup(ts, &t.writes, ctx);
            }
        }
        ctx.txn_done(txn, Ok(()));
    }

    fn on_reply(&mut self, from: PartitionId, reply: Payload, ctx: &mut CoordCtx) {
        let Ok(reply) = reply.decode::<Reply>() else { return };
        let (tag, id) = match &reply {
            Reply::Versions { tag, id, .. }
            | Reply::ScanVersions { tag, id, .. }
            | Reply::OlderVersions { tag, id, .. }
            | Reply::Written { tag, id, .. } => (*tag, *id),
            Reply::Purged { .. } => return, // for the oracle
            Reply::CleanedUp { ts } => {
                let Some((waiting, _)) = self.cleanups.get_mut(ts) else { return };
                waiting.remove(&from);
                if waiting.is_empty() {
                    self.cleanups.remove(ts);
                    Self::notify(ctx, OracleCall::CleanedUp { start_ts: *ts });
                }
                return;
            }
        };
        if self.parts.get(&id).is_none_or(|(t, _)| *t != tag) {
            return; // stale, duplicated, or for a finished op
        }
        self.parts.remove(&id);
        let Some(t) = self.txns.get_mut(&id.txn) else { return };
        match reply {
            Reply::Written { result, .. } => {
                t.ops.remove(&id);
                ctx.op_done(id, result.map(|()| PartResult::Done));
            }
            Reply::Versions { result: Err(e), .. }
            | Reply::ScanVersions { result: Err(e), .. }
            | Reply::OlderVersions { result: Err(e), .. } => {
                t.ops.remove(&id);
                ctx.op_done(id, Err(e));
            }
            Reply::Versions { result: Ok(got), .. } => {
                if let Some(OpState::Read { fetched, .. }) = t.ops.get_mut(&id) {
                    *fetched = Some(got);
                    self.advance(id, ctx);
                }
            }
            Reply::ScanVersions { result: Ok(got), .. } => {
                if let Some(OpState::Scan { page, .. }) = t.ops.get_mut(&id) {
                    *page = Some(got);
                    self.advance(id, ctx);
                }
            }
            Reply::OlderVersions { result: Ok(got), .. } => {
                if let Some(OpState::Scan { page: Some((keys, _)), older, .. }) = t.ops.get_mut(&id) {
                    *older = false;
                    for (key, versions, more) in got {
                        if let Ok(i) = keys.binary_search_by(|k| k.0.cmp(&key)) {
                            keys[i] = (key, versions, more);
                        }
                    }
                    self.advance(id, ctx);
                }
            }
            Reply::CleanedUp { .. } | Reply::Purged { .. } => unreachable!("handled above"),
        }
    }

    fn on_tick(&mut self, ctx: &mut CoordCtx) {
        let now = ctx.now;
        // A new incarnation connects at once, even idle: its session ends the previous
        // incarnation's, whose transactions would otherwise hold `Tmin` until the oracle drops
        // it as silent.
        if self.session == Session::Disconnected && (!self.txns.is_empty() || self.sessions_opened == 0) {
            self.connect(ctx);
        }
        if self.gap_since.is_some_and(|since| now.saturating_sub(since) > DELTA_GAP_TIMEOUT) {
            return self.session_lost(ctx);
        }
        let waiting_since = self.calls.values().map(|c| c.first_sent_at).min();
        if waiting_since.is_some_and(|since| now.saturating_sub(since.max(self.oracle_heard)) >= ORACLE_FAILOVER_AFTER)
        {
            return self.fail_over(ctx);
        }
        let due: Vec<u64> = self
            .calls
            .iter()
            .filter(|(_, c)| now.saturating_sub(c.sent_at) >= ORACLE_RESEND_AFTER)
            .map(|(t, _)| *t)
            .collect();
        for tag in due {
            let call = self.calls.get_mut(&tag).expect("listed");
            call.sent_at = now;
            let request = call.request.clone();
            Self::send_oracle(ctx, tag, request);
        }
        for (_, call) in self.parts.values_mut() {
            if now.saturating_sub(call.sent_at) >= PARTITION_RESEND_AFTER {
                call.sent_at = now;
                ctx.send_to_partition(call.part, call.request.clone());
            }
        }
        self.cleanups.retain(|_, (_, at)| now.saturating_sub(*at) < CLEANUP_GIVE_UP_AFTER);
        self.enforce_deadlines(ctx);
    }

    fn apply(&mut self, _record: &[u8]) -> Result<(), Error> {
        Ok(())
    }

    fn role_traffic(&mut self) -> Option<&mut dyn RoleTraffic> {
        Some(self)
    }
}

impl RoleTraffic for OmidCoordinator {
    fn on_role_message(&mut self, _from: Addr, msg: Payload, ctx: &mut CoordCtx) {
        let Some(OracleWire::Reply(reply)) = OracleWire::from_payload(msg) else { return };
        self.on_oracle_reply(reply, ctx)
    }
}
