//! The status oracle (SO): timestamp oracle, conflict detection (Algorithm 3), visibility
//! (Algorithm 4), replication to clients, WAL batching and recovery. The rules are in the module
//! doc of [`super`]; rule numbers below refer to it.

use super::messages::{
    Batch, Checkpoint, Connected, CrashRange, Delta, MetaChange, OracleEffects, Outbound, Record, Reply, Request,
};
use super::{CommitAbort, OracleConfig, OracleError, RowId, TIMESTAMP_BATCH};
use litmus_core::{ClientId, Time, Timestamp};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// What arrives at the oracle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Request {
        client: ClientId,
        request: Request,
    },
    /// Time passed: flush a batch past its deadline, push to silent clients, drop dead ones.
    Tick,
    /// Partition `partition` (of `partitions`) deleted every version it held of the aborted
    /// transactions `start_ts` and of the uncommitted members of the crash ranges `crashed`
    /// (`(after, upto)`), as asked by the garbage-collection message (OM-4).
    Purged {
        partition: u32,
        partitions: u32,
        start_ts: Vec<Timestamp>,
        crashed: Vec<(Timestamp, Timestamp)>,
    },
}

/// A reply decided but not rendered yet: it waits for the open batch (OM-7).
#[derive(Clone, Debug)]
enum Pending {
    Connected,
    /// A duplicate of the current session's connect: answered again from the session's cursor.
    Reconnected,
    Began {
        start_ts: Timestamp,
    },
    Commit {
        start_ts: Timestamp,
        result: Result<Timestamp, CommitAbort>,
    },
    Done {
        start_ts: Timestamp,
    },
    InSnapshot {
        version_ts: Timestamp,
        reader_ts: Timestamp,
    },
    Fates {
        start_ts: Vec<Timestamp>,
    },
    Refused(OracleError),
}

#[derive(Clone, Debug)]
struct Session {
    /// Next `commitinfo` position this client has not received.
    cursor: u64,
    last_heard: Time,
    push_sent_at: Option<Time>,
    /// False for a client without a replica ([`Request::ConnectUnreplicated`]).
    replicated: bool,
    /// The last [`BEGIN_IDS_MAX`] [`Request::BeginAs`] ids and the timestamps they got.
    begins: BTreeMap<u64, Timestamp>,
}

/// [`Request::BeginAs`] ids remembered per session (a resend older than this gets a new
/// timestamp).
pub const BEGIN_IDS_MAX: usize = 1024;

/// The status oracle. Drive it with [`StatusOracle::step`]; see the module doc of [`super`].
#[derive(Debug)]
pub struct StatusOracle {
    config: OracleConfig,
    now: Time,
    // OM-1: timestamp oracle.
    next_ts: Timestamp,
    reserved_upto: Timestamp,
    // OM-2–OM-3: conflict detection.
    tmax: Timestamp,
    last_commit: BTreeMap<RowId, Timestamp>,
    last_commit_by_tc: BTreeSet<(Timestamp, RowId)>,
    // Tc list: start -> commit, and (commit, start) in commit order.
    commits: BTreeMap<Timestamp, Timestamp>,
    commit_order: VecDeque<(Timestamp, Timestamp)>,
    // OM-4. In-flight transactions and the client that began each: when its session ends,
    // they are aborted.
    uncommitted: BTreeMap<Timestamp, ClientId>,
    aborted: BTreeSet<Timestamp>,
    crash_ranges: Vec<CrashRange>,
    /// `(fence, Ts)`: forget `Ts` once no transaction with a start below `fence` is in flight.
    cleanups: VecDeque<(Timestamp, Timestamp)>,
    cleanup_queued: BTreeSet<Timestamp>,
    /// Partitions that reported purging an aborted `Ts` (volatile: lost reports are asked again).
    purge_reports: BTreeMap<Timestamp, BTreeSet<u32>>,
    /// The same for crash ranges `(after, upto)`.
    crash_reports: BTreeMap<(Timestamp, Timestamp), BTreeSet<u32>>,
    /// `(fence, after, upto)`: forget the crash range once nothing that started below `fence`
    /// is in flight.
    crash_cleanups: VecDeque<(Timestamp, Timestamp, Timestamp)>,
    crash_cleanup_queued: BTreeSet<(Timestamp, Timestamp)>,
    // OM-7: the open batch and the replies waiting for it.
    batch: Vec<Record>,
    batch_bytes: usize,
    batch_opened_at: Option<Time>,
    held: Vec<(ClientId, Pending)>,
    // OM-6: replication.
    commitinfo: VecDeque<MetaChange>,
    commitinfo_base: u64,
    sessions: BTreeMap<ClientId, Session>,
    /// The largest session id each client used: a late `ConnectAs` below it is stale.
    session_ids: BTreeMap<ClientId, u64>,
    /// False between [`StatusOracle::rebuild`] and [`StatusOracle::fence`]: the oracle holds
    /// the log's state and must not serve (OM-8).
    fenced: bool,
}

impl StatusOracle {
    /// A fresh oracle with an empty log.
    pub fn new(config: OracleConfig) -> StatusOracle {
        assert!(config.last_commit_rows_max > 0 && config.commit_list_txns_max > 0, "limits must be positive");
        assert!(config.uncommitted_txns_max > 0 && config.batch_bytes_max > 0, "limits must be positive");
        StatusOracle {
            config,
            now: Time::ZERO,
            next_ts: Timestamp(1),
            reserved_upto: Timestamp::ZERO,
            tmax: Timestamp::ZERO,
            last_commit: BTreeMap::new(),
            last_commit_by_tc: BTreeSet::new(),
            commits: BTreeMap::new(),
            commit_order: VecDeque::new(),
            uncommitted: BTreeMap::new(),
            aborted: BTreeSet::new(),
            crash_ranges: Vec::new(),
            cleanups: VecDeque::new(),
            cleanup_queued: BTreeSet::new(),
            purge_reports: BTreeMap::new(),
            crash_reports: BTreeMap::new(),
            crash_cleanups: VecDeque::new(),
            crash_cleanup_queued: BTreeSet::new(),
            batch: Vec::new(),
            batch_bytes: 0,
            batch_opened_at: None,
            held: Vec::new(),
            commitinfo: VecDeque::new(),
            commitinfo_base: 0,
            sessions: BTreeMap::new(),
            session_ids: BTreeMap::new(),
            fenced: true,
        }
    }

    /// OM-8: rebuilds the durable state from a checkpoint and the batches logged after it
    /// ([`StatusOracle::rebuild`]), then fences off every transaction that was in flight at
    /// the crash ([`StatusOracle::fence`]). The returned effects hold the crash-range batch;
    /// persist it before stepping the oracle.
    pub fn recover(
        config: OracleConfig,
        checkpoint: Option<&Checkpoint>,
        batches: &[Batch],
    ) -> (StatusOracle, OracleEffects) {
        let mut o = StatusOracle::rebuild(config, checkpoint, batches);
        let mut out = OracleEffects::default();
        o.fence(&mut out);
        (o, out)
    }

    /// OM-8, first half: the durable state of a checkpoint and the batches logged after it
    /// (replayed forwards, in log order, record by record), exactly what the oracle that wrote
    /// them held: its [`StatusOracle::checkpoint`] is that oracle's at the end of the log.
    /// Nothing more: it serves nothing until [`StatusOracle::fence`]d, so a member of the
    /// oracle's replica group that does not lead may rebuild it to take the group's snapshot
    /// while the leader goes on logging.
    pub fn rebuild(config: OracleConfig, checkpoint: Option<&Checkpoint>, batches: &[Batch]) -> StatusOracle {
        let mut o = StatusOracle::new(config);
        if let Some(c) = checkpoint {
            o.reserved_upto = c.reserved_upto;
            o.tmax = c.tmax;
            for &(start_ts, commit_ts) in &c.commits {
                o.insert_commit(start_ts, commit_ts);
            }
            o.aborted = c.aborted.iter().copied().collect();
            o.crash_ranges = c.crash_ranges.clone();
        }
        for record in batches.iter().flat_map(|b| &b.records) {
            o.replay(record);
        }
        o.next_ts = o.reserved_upto.next();
        o.fenced = false;
        o
    }

    /// OM-8, second half: a rebuilt oracle becomes the one that serves. Every transaction
    /// that started before and did not commit is aborted: timestamps resume above the last
    /// reservation, and a crash range covers everything issued but not committed. Its batch
    /// is in `out`; persist it before stepping the oracle.
    pub fn fence(&mut self, out: &mut OracleEffects) {
        assert!(!self.fenced, "an oracle is fenced once, after it is rebuilt");
        assert!(self.batch.is_empty(), "a rebuilt oracle has logged nothing");
        self.fenced = true;
        let (after, upto) = (self.tmax, self.reserved_upto);
        if upto > after {
            self.add_crash_range(after, upto);
            self.log(Record::CrashAborted { after, upto });
        }
        self.flush(out);
    }

    /// Applies one logged record to the durable state, as its first application did.
    fn replay(&mut self, record: &Record) {
        match *record {
            Record::Reserve { upto } => self.reserved_upto = self.reserved_upto.max(upto),
            Record::Committed { start_ts, commit_ts } => {
                if commit_ts > self.tmax {
                    self.insert_commit(start_ts, commit_ts);
                }
            }
            Record::Aborted { start_ts } => {
                self.aborted.insert(start_ts);
            }
            Record::Forgotten { start_ts } => {
                self.aborted.remove(&start_ts);
            }
            Record::Tmax(tmax) => {
                if tmax > self.tmax {
                    self.tmax = tmax;
                    self.prune_at_or_below_tmax();
                }
            }
            Record::CrashAborted { after, upto } => self.add_crash_range(after, upto),
            Record::Unassigned6(never) | Record::Unassigned7(never) => match never {},
            Record::CrashForgotten { after, upto } => self.crash_ranges.retain(|r| (r.after, r.upto) != (after, upto)),
        }
    }

    /// The durable state, for the runtime to write as a snapshot; `None` while a batch is open
    /// (its records are not emitted yet, so no checkpoint may include them).
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        if !self.batch.is_empty() {
            return None;
        }
        Some(Checkpoint {
            reserved_upto: self.reserved_upto,
            tmax: self.tmax,
            commits: self.commit_order.iter().map(|&(tc, ts)| (ts, tc)).collect(),
            aborted: self.aborted.iter().copied().collect(),
            crash_ranges: self.crash_ranges.clone(),
        })
    }

    /// Handles one input at time `now`.
    pub fn step(&mut self, now: Time, input: Input, out: &mut OracleEffects) {
        assert!(self.fenced, "a rebuilt oracle is fenced before it serves (OM-8)");
        assert!(now >= self.now, "time goes forward");
        self.now = now;
        match input {
            Input::Request { client, request } => {
                if let Some(pending) = self.handle(client, request) {
                    if self.batch.is_empty() {
                        self.render(client, pending, out);
                    } else {
                        self.held.push((client, pending));
                    }
                }
                if self.batch_bytes >= self.config.batch_bytes_max {
                    self.flush(out);
                }
            }
            Input::Tick => {
                if let Some(opened) = self.batch_opened_at {
                    if now >= opened + self.config.batch_delay {
                        self.flush(out);
                    }
                }
                self.tick_sessions(out);
                if self.batch_bytes >= self.config.batch_bytes_max {
                    self.flush(out);
                }
            }
            Input::Purged { partition, partitions, start_ts, crashed } => {
                self.purged(partition, partitions, &start_ts, &crashed);
                if self.batch_bytes >= self.config.batch_bytes_max {
                    self.flush(out);
                }
            }
        }
        assert!(self.batch.is_empty() || self.batch_opened_at.is_some());
        assert!(self.held.is_empty() || !self.batch.is_empty(), "replies wait only for an open batch");
    }

    fn handle(&mut self, client: ClientId, request: Request) -> Option<Pending> {
        let connect = match request {
            Request::Connect => Some((0, true)),
            Request::ConnectUnreplicated => Some((0, false)),
            Request::ConnectAs { session } => Some((session, true)),
            _ => None,
        };
        if let Some((id, replicated)) = connect {
            return Some(self.connect(client, id, replicated));
        }
        let now = self.now;
        let Some(session) = self.sessions.get_mut(&client) else {
            return Some(Pending::Refused(OracleError::NotConnected));
        };
        session.last_heard = now;
        session.push_sent_at = None;
        Some(match request {
            Request::Connect | Request::ConnectUnreplicated | Request::ConnectAs { .. } => {
                unreachable!("handled above")
            }
            Request::Ack => return None,
            Request::Begin => Pending::Began { start_ts: self.begin(client) },
            Request::BeginAs { id } => {
                let again = session.begins.get(&id).copied();
                if let Some(start_ts) = again.filter(|ts| self.uncommitted.get(ts) == Some(&client)) {
                    return Some(Pending::Began { start_ts });
                }
                let start_ts = self.begin(client);
                let begins = &mut self.sessions.get_mut(&client).expect("connected").begins;
                begins.insert(id, start_ts);
                if begins.len() > BEGIN_IDS_MAX {
                    begins.pop_first();
                }
                Pending::Began { start_ts }
            }
            Request::Commit { start_ts, write_set } => {
                if write_set.len() > self.config.write_set_rows_max {
                    let limit = self.config.write_set_rows_max;
                    return Some(Pending::Refused(OracleError::WriteSetTooLarge { rows: write_set.len(), limit }));
                }
                Pending::Commit { start_ts, result: self.commit(client, start_ts, write_set) }
            }
            Request::Abort { start_ts } => {
                self.abort(client, start_ts);
                Pending::Done { start_ts }
            }
            Request::CleanedUp { start_ts } => {
                self.cleaned_up(start_ts);
                Pending::Done { start_ts }
            }
            Request::InSnapshot { version_ts, reader_ts } => Pending::InSnapshot { version_ts, reader_ts },
            Request::Fates { mut start_ts } => {
                start_ts.truncate(super::messages::FATES_PER_REQUEST_MAX);
                Pending::Fates { start_ts }
            }
        })
    }

    /// Opens a session. A new session of a client that had one ends the old one first: the
    /// transactions it began are aborted (a restarted coordinator, or one that lost its replica,
    /// never finishes them). Ids let a late duplicate of an earlier connect be told apart.
    fn connect(&mut self, client: ClientId, id: u64, replicated: bool) -> Pending {
        let last_id = self.session_ids.get(&client).copied().unwrap_or(0);
        if id != 0 && id < last_id {
            return Pending::Refused(OracleError::StaleSession);
        }
        if id != 0 && id == last_id {
            if let Some(session) = self.sessions.get_mut(&client) {
                session.last_heard = self.now;
                session.push_sent_at = None;
                return Pending::Reconnected;
            }
        }
        if !self.sessions.contains_key(&client) && self.sessions.len() >= self.config.clients_max {
            return Pending::Refused(OracleError::TooManyClients { limit: self.config.clients_max });
        }
        self.end_session(client);
        self.session_ids.insert(client, id.max(last_id));
        let cursor = self.commitinfo_end();
        let session = Session { cursor, last_heard: self.now, push_sent_at: None, replicated, begins: BTreeMap::new() };
        self.sessions.insert(client, session);
        Pending::Connected
    }

    /// Aborts every transaction `client` began (its session ended), logged and replicated like
    /// any abort; their versions are purged by garbage collection ([`StatusOracle::purge_work`]).
    fn end_session(&mut self, client: ClientId) {
        let owned: Vec<Timestamp> = self.uncommitted.iter().filter(|(_, &c)| c == client).map(|(&ts, _)| ts).collect();
        for start_ts in owned {
            self.uncommitted.remove(&start_ts);
            self.mark_aborted(start_ts);
        }
        self.forget_cleaned_up();
    }

    // ---- OM-1: timestamps -------------------------------------------------------------------

    fn next_timestamp(&mut self) -> Timestamp {
        let ts = self.next_ts;
        self.next_ts = ts.next();
        if ts > self.reserved_upto {
            self.reserved_upto = Timestamp(ts.0.saturating_add(TIMESTAMP_BATCH - 1));
            self.log(Record::Reserve { upto: self.reserved_upto });
        }
        assert!(ts <= self.reserved_upto && ts > self.tmax);
        ts
    }

    /// Begin: a start timestamp, entered in the uncommitted list (OM-4). When the list is full
    /// the oldest in-flight transaction is aborted by raising `Tmax` to it (OM-3).
    fn begin(&mut self, client: ClientId) -> Timestamp {
        if self.uncommitted.len() >= self.config.uncommitted_txns_max {
            let oldest = *self.uncommitted.first_key_value().expect("list is full").0;
            self.raise_tmax(oldest);
        }
        let ts = self.next_timestamp();
        self.uncommitted.insert(ts, client);
        ts
    }

    // ---- OM-2: Algorithm 3 ------------------------------------------------------------------

    /// Takes `start_ts` out of the uncommitted list if `client` began it: a session owns its
    /// transactions, so no other client can commit or abort them.
    fn take_own(&mut self, client: ClientId, start_ts: Timestamp) -> bool {
        if self.uncommitted.get(&start_ts) != Some(&client) {
            return false;
        }
        self.uncommitted.remove(&start_ts);
        true
    }

    fn commit(
        &mut self,
        client: ClientId,
        start_ts: Timestamp,
        mut write_set: Vec<RowId>,
    ) -> Result<Timestamp, CommitAbort> {
        if !self.take_own(client, start_ts) {
            return Err(CommitAbort::NotInFlight);
        }
        write_set.sort_unstable();
        write_set.dedup();
        let result = self.conflict(start_ts, &write_set);
        if let Err(reason) = result {
            if !write_set.is_empty() {
                self.mark_aborted(start_ts);
            }
            self.forget_cleaned_up();
            return Err(reason);
        }
        let commit_ts = self.next_timestamp();
        if !write_set.is_empty() {
            for &row in &write_set {
                if let Some(old) = self.last_commit.insert(row, commit_ts) {
                    self.last_commit_by_tc.remove(&(old, row));
                }
                self.last_commit_by_tc.insert((commit_ts, row));
            }
            self.insert_commit(start_ts, commit_ts);
            self.log(Record::Committed { start_ts, commit_ts });
        }
        self.enforce_memory_limits();
        self.forget_cleaned_up();
        Ok(commit_ts)
    }

    /// Algorithm 3 lines 1–8 as one pure check.
    fn conflict(&self, start_ts: Timestamp, write_set: &[RowId]) -> Result<(), CommitAbort> {
        if self.tmax > start_ts {
            return Err(CommitAbort::TmaxPassed { tmax: self.tmax });
        }
        for &row in write_set {
            if let Some(&last_commit) = self.last_commit.get(&row) {
                if last_commit > start_ts {
                    return Err(CommitAbort::RowConflict { row, last_commit });
                }
            }
        }
        Ok(())
    }

    fn insert_commit(&mut self, start_ts: Timestamp, commit_ts: Timestamp) {
        assert!(start_ts < commit_ts);
        assert!(self.commit_order.back().is_none_or(|&(last, _)| last < commit_ts), "Tc list is in Tc order");
        self.commits.insert(start_ts, commit_ts);
        self.commit_order.push_back((commit_ts, start_ts));
    }

    // ---- OM-3: memory limits and Tmax -------------------------------------------------------

    fn enforce_memory_limits(&mut self) {
        let mut tmax = self.tmax;
        while self.last_commit.len() > self.config.last_commit_rows_max {
            let (commit_ts, row) = self.last_commit_by_tc.pop_first().expect("non-empty");
            self.last_commit.remove(&row);
            tmax = tmax.max(commit_ts);
        }
        let excess = self.commit_order.len().saturating_sub(self.config.commit_list_txns_max);
        if excess > 0 {
            tmax = tmax.max(self.commit_order[excess - 1].0);
        }
        self.raise_tmax(tmax);
        assert!(self.last_commit.len() <= self.config.last_commit_rows_max);
        assert!(self.commit_order.len() <= self.config.commit_list_txns_max);
    }

    /// Raises `Tmax` (never lowers it), drops what it makes redundant and aborts the in-flight
    /// transactions it passes (§III: "we check for any transaction txn_i in the uncommitted list
    /// for which Tmax > Ts(txn_i), and add it to the aborted list").
    fn raise_tmax(&mut self, tmax: Timestamp) {
        if tmax <= self.tmax {
            return;
        }
        assert!(tmax < self.next_ts, "Tmax is an issued timestamp");
        self.tmax = tmax;
        self.prune_at_or_below_tmax();
        while let Some(&(commit_ts, row)) = self.last_commit_by_tc.first() {
            if commit_ts > tmax {
                break;
            }
            self.last_commit_by_tc.pop_first();
            self.last_commit.remove(&row);
        }
        let passed: Vec<Timestamp> = self.uncommitted.range(..=tmax).map(|(&ts, _)| ts).collect();
        for start_ts in passed {
            self.uncommitted.remove(&start_ts);
            self.mark_aborted(start_ts);
        }
        self.log(Record::Tmax(tmax));
        self.forget_cleaned_up();
    }

    fn prune_at_or_below_tmax(&mut self) {
        while let Some(&(commit_ts, start_ts)) = self.commit_order.front() {
            if commit_ts > self.tmax {
                break;
            }
            self.commit_order.pop_front();
            self.commits.remove(&start_ts);
        }
    }

    // ---- OM-4: aborted and uncommitted lists ------------------------------------------------

    fn abort(&mut self, client: ClientId, start_ts: Timestamp) {
        if self.take_own(client, start_ts) {
            self.mark_aborted(start_ts);
            self.forget_cleaned_up();
        }
    }

    fn mark_aborted(&mut self, start_ts: Timestamp) {
        assert!(!self.commits.contains_key(&start_ts) && !self.uncommitted.contains_key(&start_ts));
        if self.aborted.insert(start_ts) {
            self.log(Record::Aborted { start_ts });
        }
    }

    fn cleaned_up(&mut self, start_ts: Timestamp) {
        if self.aborted.contains(&start_ts) && self.cleanup_queued.insert(start_ts) {
            self.cleanups.push_back((self.next_ts, start_ts));
            self.forget_cleaned_up();
        }
    }

    /// Forgets cleaned-up aborts (and purged crash ranges) once every transaction started
    /// before the report terminated.
    fn forget_cleaned_up(&mut self) {
        let oldest_in_flight = self.uncommitted.first_key_value().map(|(&ts, _)| ts);
        let due = |fence: Timestamp| oldest_in_flight.is_none_or(|oldest| oldest >= fence);
        while let Some(&(fence, start_ts)) = self.cleanups.front() {
            if !due(fence) {
                break;
            }
            self.cleanups.pop_front();
            self.cleanup_queued.remove(&start_ts);
            self.purge_reports.remove(&start_ts);
            if self.aborted.remove(&start_ts) {
                self.log(Record::Forgotten { start_ts });
            }
        }
        while let Some(&(fence, after, upto)) = self.crash_cleanups.front() {
            if !due(fence) {
                break;
            }
            self.crash_cleanups.pop_front();
            self.crash_cleanup_queued.remove(&(after, upto));
            let before = self.crash_ranges.len();
            self.crash_ranges.retain(|r| (r.after, r.upto) != (after, upto));
            if self.crash_ranges.len() < before {
                self.log(Record::CrashForgotten { after, upto });
            }
        }
    }

    /// The garbage-collection work for the partitions at mark `low_water` (§IV leaves aborted
    /// versions whose writer cannot clean up to the data store's GC; this is it): at most
    /// `txns_max` aborted transactions and crash ranges below the mark that are not yet being
    /// forgotten, oldest first. Below the mark a partition refuses puts, so a purged version
    /// cannot come back.
    pub fn purge_work(&mut self, low_water: Timestamp, txns_max: usize) -> (Vec<Timestamp>, Vec<CrashRange>) {
        let start_ts: Vec<Timestamp> = self
            .aborted
            .range(..low_water)
            .filter(|ts| !self.cleanup_queued.contains(ts))
            .take(txns_max)
            .copied()
            .collect();
        let crashed: Vec<CrashRange> = self
            .crash_ranges
            .iter()
            .filter(|r| r.upto < low_water && !self.crash_cleanup_queued.contains(&(r.after, r.upto)))
            .take(txns_max)
            .cloned()
            .collect();
        // Reports of work no longer asked for (cleaned up by their writer meanwhile) are dropped.
        let (aborted, queued) = (&self.aborted, &self.cleanup_queued);
        self.purge_reports.retain(|ts, _| aborted.contains(ts) && !queued.contains(ts));
        let ranges = &self.crash_ranges;
        self.crash_reports.retain(|key, _| ranges.iter().any(|r| (r.after, r.upto) == *key));
        (start_ts, crashed)
    }

    /// A partition's purge report: once every partition purged a transaction (a crash range),
    /// it is cleaned up and forgotten as after a client's `CleanedUp` (OM-4).
    fn purged(&mut self, partition: u32, partitions: u32, start_ts: &[Timestamp], crashed: &[(Timestamp, Timestamp)]) {
        for &ts in start_ts {
            if !self.aborted.contains(&ts) || self.cleanup_queued.contains(&ts) {
                continue;
            }
            let reports = self.purge_reports.entry(ts).or_default();
            reports.insert(partition);
            if reports.len() >= partitions as usize {
                self.purge_reports.remove(&ts);
                self.cleaned_up(ts);
            }
        }
        for &range in crashed {
            let known = self.crash_ranges.iter().any(|r| (r.after, r.upto) == range);
            if !known || self.crash_cleanup_queued.contains(&range) {
                continue;
            }
            let reports = self.crash_reports.entry(range).or_default();
            reports.insert(partition);
            if reports.len() >= partitions as usize {
                self.crash_reports.remove(&range);
                self.crash_cleanup_queued.insert(range);
                self.crash_cleanups.push_back((self.next_ts, range.0, range.1));
            }
        }
        self.forget_cleaned_up();
    }

    fn add_crash_range(&mut self, after: Timestamp, upto: Timestamp) {
        let committed = self.commits.range(after.next()..=upto).map(|(&ts, _)| ts).collect();
        self.crash_ranges.push(CrashRange { after, upto, committed });
    }

    // ---- OM-5: Algorithm 4 ------------------------------------------------------------------

    /// Is the version written by the transaction that started at `version_ts` in the snapshot of
    /// the reader that started at `reader_ts`? Exact for readers with `reader_ts > Tmax`.
    pub fn in_snapshot(&self, version_ts: Timestamp, reader_ts: Timestamp) -> bool {
        if version_ts == reader_ts {
            return true;
        }
        if let Some(&commit_ts) = self.commits.get(&version_ts) {
            return commit_ts < reader_ts;
        }
        if self.is_aborted(version_ts) || self.tmax < version_ts {
            return false;
        }
        true
    }

    /// The fate of the writer that started at `start_ts`, from the durable state (OM-5
    /// without a reader; see [`super::messages::Fate`]).
    pub fn fate(&self, start_ts: Timestamp) -> super::messages::Fate {
        use super::messages::Fate;
        if let Some(&commit_ts) = self.commits.get(&start_ts) {
            Fate::Committed(commit_ts)
        } else if self.is_aborted(start_ts) {
            Fate::Aborted
        } else if start_ts <= self.tmax {
            Fate::Old
        } else {
            Fate::NotCommitted
        }
    }

    /// In the aborted list or a crash range.
    pub fn is_aborted(&self, start_ts: Timestamp) -> bool {
        self.aborted.contains(&start_ts) || self.crash_ranges.iter().any(|r| r.aborts(start_ts))
    }

    pub fn tmax(&self) -> Timestamp {
        self.tmax
    }
    /// `Tmin` (§IV "HBase Garbage Collection"): the smallest start timestamp still in flight, or
    /// the next timestamp to issue when none is. No transaction that can still read started below.
    pub fn t_min(&self) -> Timestamp {
        self.uncommitted.first_key_value().map(|(&ts, _)| ts).unwrap_or(self.next_ts)
    }
    pub fn last_commit(&self, row: RowId) -> Option<Timestamp> {
        self.last_commit.get(&row).copied()
    }
    pub fn commit_ts(&self, start_ts: Timestamp) -> Option<Timestamp> {
        self.commits.get(&start_ts).copied()
    }
    pub fn is_in_flight(&self, start_ts: Timestamp) -> bool {
        self.uncommitted.contains_key(&start_ts)
    }
    /// Number of transactions in flight (the uncommitted list).
    pub fn in_flight(&self) -> usize {
        self.uncommitted.len()
    }
    /// The aborted list (OM-4).
    pub fn aborted(&self) -> impl Iterator<Item = Timestamp> + '_ {
        self.aborted.iter().copied()
    }
    pub fn crash_ranges(&self) -> &[CrashRange] {
        &self.crash_ranges
    }
    pub fn last_commit_rows(&self) -> usize {
        self.last_commit.len()
    }
    pub fn is_connected(&self, client: ClientId) -> bool {
        self.sessions.contains_key(&client)
    }

    // ---- OM-7: WAL batching -----------------------------------------------------------------

    fn log(&mut self, record: Record) {
        if self.batch.is_empty() {
            self.batch_opened_at = Some(self.now);
        }
        self.batch_bytes += record.size_bytes();
        self.batch.push(record);
    }

    /// Emits the open batch, makes its changes visible to replication, and renders the replies
    /// that waited for it.
    fn flush(&mut self, out: &mut OracleEffects) {
        if self.batch.is_empty() {
            return;
        }
        let records = std::mem::take(&mut self.batch);
        self.batch_bytes = 0;
        self.batch_opened_at = None;
        for record in &records {
            if let Some(change) = self.meta_change(record) {
                self.commitinfo.push_back(change);
            }
        }
        out.persist.push(Batch { records });
        for (client, pending) in std::mem::take(&mut self.held) {
            self.render(client, pending, out);
        }
        self.trim_commitinfo();
    }

    fn meta_change(&self, record: &Record) -> Option<MetaChange> {
        Some(match *record {
            Record::Reserve { .. } => return None,
            Record::Unassigned6(never) | Record::Unassigned7(never) => match never {},
            Record::Committed { start_ts, commit_ts } => MetaChange::Committed { start_ts, commit_ts },
            Record::Aborted { start_ts } => MetaChange::Aborted { start_ts },
            Record::Forgotten { start_ts } => MetaChange::Forgotten { start_ts },
            Record::Tmax(tmax) => MetaChange::Tmax(tmax),
            Record::CrashAborted { after, upto } => MetaChange::CrashAborted(
                self.crash_ranges.iter().find(|r| r.after == after && r.upto == upto).expect("logged range").clone(),
            ),
            Record::CrashForgotten { after, upto } => MetaChange::CrashForgotten { after, upto },
        })
    }

    // ---- OM-6: replication ------------------------------------------------------------------

    fn commitinfo_end(&self) -> u64 {
        self.commitinfo_base + self.commitinfo.len() as u64
    }

    /// ΔSO for `client`: one slice of the shared buffer; moves the client's cursor to the end.
    fn delta_for(&mut self, client: ClientId) -> Delta {
        let end = self.commitinfo_end();
        let base = self.commitinfo_base;
        let session = self.sessions.get_mut(&client).expect("connected");
        if !session.replicated {
            session.cursor = end;
            return Delta { from: end, entries: Vec::new() };
        }
        assert!(base <= session.cursor && session.cursor <= end, "cursor inside the buffer");
        let from = session.cursor;
        session.cursor = end;
        Delta { from, entries: self.commitinfo.range((from - base) as usize..).cloned().collect() }
    }

    fn trim_commitinfo(&mut self) {
        let keep_from =
            self.sessions.values().filter(|s| s.replicated).map(|s| s.cursor).min().unwrap_or(self.commitinfo_end());
        while self.commitinfo_base < keep_from {
            self.commitinfo.pop_front();
            self.commitinfo_base += 1;
        }
    }

    /// Renders a reply from the current (durable: no batch is open) state.
    fn render(&mut self, client: ClientId, pending: Pending, out: &mut OracleEffects) {
        assert!(self.batch.is_empty(), "replies are rendered from durable state only");
        if !self.sessions.contains_key(&client) && !matches!(pending, Pending::Refused(_)) {
            return; // disconnected while its reply waited
        }
        let reply = match pending {
            Pending::Connected | Pending::Reconnected => {
                // A duplicate connect resumes from the session's cursor: the deltas from there
                // re-apply changes the current lists already hold, which is harmless.
                let end = self.commitinfo_end();
                let session = self.sessions.get_mut(&client).expect("connected");
                if matches!(pending, Pending::Connected) {
                    session.cursor = end;
                }
                let cursor = session.cursor;
                Reply::Connected(Connected {
                    t_init: self.next_ts,
                    tmax: self.tmax,
                    aborted: self.aborted.iter().copied().collect(),
                    crash_ranges: self.crash_ranges.clone(),
                    cursor,
                })
            }
            Pending::Began { start_ts } => Reply::Began { start_ts, delta: self.delta_for(client) },
            Pending::Commit { start_ts, result: Ok(commit_ts) } => Reply::Committed { start_ts, commit_ts },
            Pending::Commit { start_ts, result: Err(reason) } => Reply::Aborted { start_ts, reason },
            Pending::Done { start_ts } => Reply::Done { start_ts },
            Pending::InSnapshot { version_ts, reader_ts } => {
                Reply::InSnapshot { version_ts, reader_ts, visible: self.in_snapshot(version_ts, reader_ts) }
            }
            Pending::Fates { start_ts } => {
                Reply::Fates { fates: start_ts.into_iter().map(|ts| (ts, self.fate(ts))).collect() }
            }
            Pending::Refused(error) => Reply::Refused(error),
        };
        out.send.push(Outbound::Reply { client, reply });
        self.trim_commitinfo();
    }

    /// §IV "Silent Clients": push to clients idle for `idle_push_after`, disconnect those that do
    /// not acknowledge within `push_ack_timeout`, and those lagging beyond the buffer limit.
    fn tick_sessions(&mut self, out: &mut OracleEffects) {
        let now = self.now;
        let end = self.commitinfo_end();
        let mut gone = Vec::new();
        let mut push = Vec::new();
        for (&client, session) in &self.sessions {
            match session.push_sent_at {
                Some(sent) if now >= sent + self.config.push_ack_timeout => gone.push(client),
                Some(_) => {}
                None if session.replicated
                    && session.cursor < end
                    && now >= session.last_heard + self.config.idle_push_after =>
                {
                    push.push(client)
                }
                None => {}
            }
        }
        for client in push {
            let delta = self.delta_for(client);
            self.sessions.get_mut(&client).expect("connected").push_sent_at = Some(now);
            out.send.push(Outbound::Reply { client, reply: Reply::Push { delta } });
        }
        for client in gone {
            self.disconnect(client, out);
        }
        while self.commitinfo.len() > self.config.commitinfo_entries_max {
            let laggard = self
                .sessions
                .iter()
                .filter(|(_, s)| s.replicated)
                .min_by_key(|(_, s)| s.cursor)
                .map(|(&c, _)| c)
                .expect("only replicated sessions hold the buffer");
            self.disconnect(laggard, out);
        }
        self.trim_commitinfo();
    }

    fn disconnect(&mut self, client: ClientId, out: &mut OracleEffects) {
        self.sessions.remove(&client);
        self.end_session(client);
        out.send.push(Outbound::Disconnect { client });
        self.trim_commitinfo();
    }
}
