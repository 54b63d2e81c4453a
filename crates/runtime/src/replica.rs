//! # A replicated partition: the partition machine inside its replica group
//!
//! With `replicas > 1` every node that keeps partition `p` runs a [`ReplicatedPartition`] at
//! [`Addr::Replica`]`(p, node)`: the engine's [`Partition`] machine, unchanged, and one member
//! of `p`'s raft group ([`litmus_replication::ReplicaGroup`]). It is itself a [`Machine`], so
//! the simulator, the embedded runtime and the TCP runtime drive it as they drive any other,
//! with their one rule (persist before send) doing raft's durability for it.
//!
//! ## What the log carries: the partition's records
//!
//! The leader runs requests as an unreplicated partition does; the records a step logs
//! (`PartCtx::log`) become one raft proposal, and the messages the step sends are **held until
//! that proposal commits** (a quorum has it durably): commit before send, the replicated form
//! of persist before send. Messages of a step that logged nothing wait behind the newest
//! proposal still in flight, since they may show its effects. Followers never execute: they
//! apply committed entries' records with the engine's replay function, as recovery does.
//!
//! ## Who serves
//!
//! Only a leader that knows it leads: it holds a read lease (Raft §6.4.1, see the replication
//! crate), has applied every entry before its term, and is not pausing for a snapshot.
//! Runtimes send a node's partition requests to the leader that node's own replica knows
//! ([`LeaderCache`]), else to the partition's home. A request reaching any other replica is
//! forwarded once to the leader it knows (the original sender kept, so the answer goes
//! straight back), or parked until a leader is known; parked
//! requests expire after [`PARKED_MAX_AGE`], and the coordinator's own resends and timeouts
//! take over, as for a lost message. A forwarded request is never forwarded again, so a
//! stale hint cannot bounce it around.
//!
//! ## Losing leadership
//!
//! A deposed leader's partition may hold effects that never commit, so it is rebuilt from the
//! group's latest snapshot and the committed entries after it, exactly as after a crash, and
//! the messages it held are dropped. Every engine's recovery rule (prepared state, Salt's
//! accepted BASE transactions, Granola's votes, BASIC's formulas) thereby survives a leader
//! change with the meaning it has across a restart.
//!
//! ## Durable state
//!
//! The host's log for this machine holds raft's entries, hard state and installed snapshots
//! ([`WalRecord`]); [`Machine::snapshot`] writes the whole [`Durable`] state (the group's latest
//! partition snapshot, the hard state and the entries after the snapshot), so the host may drop
//! its log as for any machine. The group asks for a partition snapshot every
//! `snapshot_every_entries` applied entries; a leader takes it only once every proposal of
//! its own has been applied (its partition then holds exactly the applied state), serving
//! nothing new in between.

use litmus_core::{Error, NodeId, PartitionId, Time};
use litmus_protocol::machine::TICK_INTERVAL_MS;
use litmus_protocol::{Addr, Effects, Envelope, Input, Machine, Message, Partition};
use litmus_replication::{
    Apply, Durable, GroupConfig, HardState, LogEntry, LogIndex, LogPosition, ReplicaGroup, ReplicaId, Role,
    SnapshotMeta,
};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;

/// Election timeout in ticks of [`TICK_INTERVAL_MS`]: 100 ms, so a new leader is elected
/// within 100–300 ms of the old one's last heartbeat, well inside a one-second failover.
pub const ELECTION_TICKS: usize = 20;
/// Heartbeat interval in ticks: 15 ms, several heartbeats per lease.
pub const HEARTBEAT_TICKS: usize = 3;
/// The largest proposal: a step's records past it are split over several proposals. Raft
/// still sends one entry past its append limit, so this plus that limit (256 KiB) stays under
/// the 1 MiB frame limit.
pub const PROPOSAL_BYTES_MAX: usize = 512 * 1024;
/// Requests waiting for a leader (or for this leader's lease) are dropped after this long:
/// coordinators resend or time out as for a lost message.
pub const PARKED_MAX_AGE: Duration = Duration::from_millis(500);
/// Requests a replica parks at most; past it the oldest is dropped.
pub const PARKED_MAX: usize = 4096;
/// Ticks a replica catches up in one step after a pause (a stalled worker): raft needs the
/// elapsed time, not every tick of it.
const CATCH_UP_TICKS_MAX: u64 = 1000;

/// Rules a test may break on purpose, to see the simulator's checks fail without them
/// (`tests/replica_rules.rs`). Never set outside such a test: process-wide.
#[doc(hidden)]
pub static BREAK_RULE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
/// [`BREAK_RULE`]: a leader sends a step's messages at once, before its records commit.
#[doc(hidden)]
pub const BREAK_SEND_BEFORE_COMMIT: u8 = 1;
/// [`BREAK_RULE`]: a leader serves without a lease, and goes on serving once cut off from its
/// group until it hears of a new leader (no check-quorum, no lease).
#[doc(hidden)]
pub const BREAK_SERVE_WITHOUT_LEASE: u8 = 2;

fn broken(rule: u8) -> bool {
    BREAK_RULE.load(std::sync::atomic::Ordering::Relaxed) == rule
}

/// One record of a replica's log on its host's disk.
#[derive(Serialize, Deserialize)]
enum WalRecord {
    /// Drop every entry at or after the first one's index, then append these.
    Entries(Vec<LogEntry>),
    HardState(HardState),
    /// A snapshot installed from the leader: the log restarts after it.
    Installed {
        meta: SnapshotMeta,
        data: Vec<u8>,
    },
}

/// A leader's proposal not applied yet, with the messages that wait for it.
struct Pending {
    pos: LogPosition,
    held: Vec<Envelope>,
}

/// Builds the engine's partition machine afresh (at boot, and for a rebuild).
type Fresh = Box<dyn Fn() -> Partition + Send>;

pub struct ReplicatedPartition {
    id: PartitionId,
    me: NodeId,
    cfg: GroupConfig,
    seed: u64,
    fresh: Fresh,
    inner: Partition,
    group: Option<ReplicaGroup>,
    /// What the host has durably (log records and snapshot together), kept to rebuild the
    /// partition and to write [`Machine::snapshot`].
    mirror: Durable,
    /// The group's latest snapshot of the partition: the base of a rebuild.
    base: Option<(SnapshotMeta, Vec<u8>)>,
    /// The last log index the partition holds the effect of (committed entries only).
    applied: LogIndex,
    pending: VecDeque<Pending>,
    /// `Some(term)` while this replica leads in `term`.
    leading: Option<u64>,
    /// The index of the leader's first entry of its term: it serves once applied past it.
    term_start: LogIndex,
    parked: VecDeque<(Time, Envelope)>,
    clock_origin: Option<Time>,
    ticks: u64,
    snapshot_due: bool,
    /// No host log (an embedded cluster without a data directory): the mirror keeps only what
    /// a rebuild needs.
    volatile: bool,
    /// A committed entry that did not apply: the replica stops serving (see `check_invariants`).
    fault: Option<String>,
    /// Lost its leadership and has heard of no new leader yet ([`BREAK_SERVE_WITHOUT_LEASE`]).
    deposed: bool,
    /// The term of the last input this replica served (ran on its partition), and whether
    /// the last step served one: the simulator checks that no replica serves in a term older
    /// than one another replica of the partition already served in.
    served: (u64, bool),
    /// A leadership transfer was started for a node about to stop ([`Machine::hand_over`]).
    handing_over: bool,
}

impl ReplicatedPartition {
    /// The replica of `partition` on node `me`, in the group of `voters` (nodes).
    pub fn new(partition: Partition, me: NodeId, voters: Vec<NodeId>, seed: u64) -> Self {
        let id = partition.id();
        let mut cfg = GroupConfig::new(ReplicaId::of_node(me), voters.into_iter().map(ReplicaId::of_node).collect());
        cfg.election_ticks = ELECTION_TICKS;
        cfg.heartbeat_ticks = HEARTBEAT_TICKS;
        cfg.proposal_bytes_max = PROPOSAL_BYTES_MAX;
        let template = partition.template();
        ReplicatedPartition {
            id,
            me,
            cfg,
            seed: seed ^ (u64::from(id.0) << 32) ^ u64::from(me.0).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            fresh: Box::new(template),
            inner: partition,
            group: None,
            mirror: Durable::default(),
            base: None,
            applied: 0,
            pending: VecDeque::new(),
            leading: None,
            term_start: 0,
            parked: VecDeque::new(),
            clock_origin: None,
            ticks: 0,
            snapshot_due: false,
            volatile: false,
            fault: None,
            deposed: false,
            served: (0, false),
            handing_over: false,
        }
    }

    /// `Some(term)` if the last step ran an input on the partition, as leader of `term`.
    pub fn served_in_last_step(&self) -> Option<u64> {
        self.served.1.then_some(self.served.0)
    }

    pub fn id(&self) -> PartitionId {
        self.id
    }

    /// The partition machine (a follower's is the committed state; a leader's may be ahead).
    pub fn partition(&self) -> &Partition {
        &self.inner
    }

    /// Whether this replica leads its group now.
    pub fn is_leader(&self) -> bool {
        self.group.as_ref().is_some_and(|g| g.role() == Role::Leader)
    }

    /// The leader this replica knows of.
    pub fn leader(&self) -> Option<NodeId> {
        self.group.as_ref().and_then(|g| g.leader()).map(ReplicaId::node)
    }

    fn group(&mut self) -> &mut ReplicaGroup {
        self.group.as_mut().expect("a replica is recovered before its first step")
    }

    /// Serves requests itself: see the module doc, "Who serves".
    fn serving(&self) -> bool {
        let Some(g) = self.group.as_ref() else { return false };
        if broken(BREAK_SERVE_WITHOUT_LEASE) && self.deposed && g.leader().is_none() {
            return true;
        }
        self.leading.is_some()
            && g.role() == Role::Leader
            && self.applied >= self.term_start
            && (g.holds_lease() || broken(BREAK_SERVE_WITHOUT_LEASE))
            && (!self.snapshot_due || self.pending.is_empty())
            && self.fault.is_none()
    }

    fn advance_clock(&mut self, now: Time) {
        let origin = *self.clock_origin.get_or_insert(now);
        let due = now.0.saturating_sub(origin.0) / (TICK_INTERVAL_MS * 1_000_000);
        if due > self.ticks + CATCH_UP_TICKS_MAX {
            self.ticks = due - CATCH_UP_TICKS_MAX;
        }
        while self.ticks < due {
            self.ticks += 1;
            self.group().tick();
        }
    }

    /// Runs one input on the partition (this replica serves) and replicates what it logged.
    fn run_inner(&mut self, now: Time, input: Input, out: &mut Effects) {
        self.served = (self.group().term(), true);
        let mut step = Effects::default();
        self.inner.step(now, input, &mut step);
        out.counts.append(&mut step.counts);
        out.work += step.work;
        let records = std::mem::take(&mut step.persist);
        if !records.is_empty() {
            for chunk in split(records, PROPOSAL_BYTES_MAX - 1024) {
                let bytes = postcard::to_stdvec(&chunk).expect("records serialize");
                match self.group().propose(bytes) {
                    Ok(pos) => self.pending.push_back(Pending { pos, held: Vec::new() }),
                    Err(e) => {
                        // The partition applied records that cannot be logged: undo them by a
                        // rebuild, and drop the step's messages (their senders resend).
                        out.counts.push("replica proposal refused");
                        tracing::warn!(partition = %self.id, error = %e, "a proposal was refused; rebuilding the partition");
                        self.step_down();
                        return;
                    }
                }
            }
        }
        match self.pending.back_mut() {
            Some(last) if !broken(BREAK_SEND_BEFORE_COMMIT) => last.held.append(&mut step.send),
            _ => out.send.append(&mut step.send),
        }
    }

    /// Takes everything the group asks for and does it in order: persist, send, leadership,
    /// apply, snapshot.
    fn pump(&mut self, out: &mut Effects) {
        while self.group.as_ref().is_some_and(|g| g.has_ready()) {
            let ready = self.group().take_ready();
            self.persist(&ready.persist, &ready.apply, out);
            let from = Addr::Replica(self.id, self.me);
            for m in ready.messages {
                let to = Addr::Replica(self.id, m.to.node());
                out.send.push(Envelope { from, to, msg: Message::Raft(m.encode()) });
            }
            self.follow_leadership();
            for a in ready.apply {
                self.apply(a, out);
            }
            if ready.snapshot_wanted.is_some() {
                self.snapshot_due = true;
            }
            self.take_snapshot_if_due();
        }
    }

    fn persist(&mut self, p: &litmus_replication::Persist, apply: &[Apply], out: &mut Effects) {
        if let Some(meta) = p.snapshot {
            let data = apply.iter().find_map(|a| match a {
                Apply::Snapshot { meta: m, data } if *m == meta => Some(data.clone()),
                _ => None,
            });
            let data = data.expect("an installed snapshot comes with its data");
            self.record(WalRecord::Installed { meta, data }, out);
        }
        if !p.entries.is_empty() {
            self.record(WalRecord::Entries(p.entries.clone()), out);
        }
        if let Some(hs) = p.hard_state {
            self.record(WalRecord::HardState(hs), out);
        }
    }

    fn record(&mut self, r: WalRecord, out: &mut Effects) {
        if !self.volatile {
            out.persist.push(postcard::to_stdvec(&r).expect("replica records serialize"));
        }
        apply_record(&mut self.mirror, r);
    }

    fn follow_leadership(&mut self) {
        let g = self.group.as_ref().expect("recovered");
        let now = (g.role() == Role::Leader).then(|| g.term());
        if g.leader().is_some() {
            self.deposed = false;
        }
        if now == self.leading {
            return;
        }
        if self.leading.is_some() {
            self.step_down();
            self.deposed = true;
        }
        if let Some(term) = now {
            self.term_start = self.group().last_index();
            self.leading = Some(term);
        }
    }

    fn apply(&mut self, a: Apply, out: &mut Effects) {
        match a {
            Apply::Entry(e) => {
                if e.index <= self.applied {
                    return;
                }
                if let Some(front) = self.pending.front() {
                    if front.pos.index == e.index && front.pos.term == e.term {
                        let done = self.pending.pop_front().expect("checked");
                        out.send.extend(done.held);
                        self.applied = e.index;
                        return;
                    }
                    if front.pos.index <= e.index {
                        // Another leader's entry where ours was: ours is lost.
                        self.step_down();
                    }
                }
                self.apply_entry(&e);
            }
            Apply::Snapshot { meta, data } => {
                self.pending.clear();
                let mut p = (self.fresh)();
                match p.recover(Some(&data), &[]) {
                    Ok(()) => self.inner = p,
                    Err(e) => self.fault = Some(format!("{}: installing a snapshot: {e}", self.id)),
                }
                self.applied = meta.index;
                self.base = Some((meta, data));
            }
        }
    }

    fn apply_entry(&mut self, e: &LogEntry) {
        self.applied = e.index;
        if e.data.is_empty() {
            return; // a new leader's no-op
        }
        let applied = postcard::from_bytes::<Vec<Vec<u8>>>(&e.data)
            .map_err(|err| Error::Storage(err.to_string()))
            .and_then(|records| self.inner.recover(None, &records));
        if let Err(err) = applied {
            self.fault = Some(format!("{}: entry {} does not apply: {err}", self.id, e.index));
        }
    }

    /// Leadership lost (or a proposal refused): the partition goes back to the committed state.
    fn step_down(&mut self) {
        self.leading = None;
        self.pending.clear();
        let mut p = (self.fresh)();
        let base_index = self.base.as_ref().map_or(0, |(m, _)| m.index);
        let mut result = p.recover(self.base.as_ref().map(|(_, d)| d.as_slice()), &[]);
        for e in self.mirror.entries.iter().filter(|e| e.index > base_index && e.index <= self.applied) {
            if result.is_err() {
                break;
            }
            if !e.data.is_empty() {
                result = postcard::from_bytes::<Vec<Vec<u8>>>(&e.data)
                    .map_err(|err| Error::Storage(err.to_string()))
                    .and_then(|records| p.recover(None, &records));
            }
        }
        match result {
            Ok(()) => self.inner = p,
            Err(e) => self.fault = Some(format!("{}: rebuilding after a leader change: {e}", self.id)),
        }
    }

    fn take_snapshot_if_due(&mut self) {
        if !self.snapshot_due || !self.pending.is_empty() || self.applied == 0 {
            return;
        }
        self.snapshot_due = false;
        let Some(bytes) = self.inner.snapshot() else { return };
        let applied = self.applied;
        match self.group().snapshot_taken(applied, bytes.clone()) {
            Ok(meta) => {
                if self.volatile {
                    self.mirror.entries.retain(|e| e.index > meta.index);
                }
                self.base = Some((meta, bytes));
            }
            Err(e) => tracing::debug!(partition = %self.id, error = %e, "snapshot not taken"),
        }
    }

    /// Serves, forwards or keeps the parked requests (see "Who serves").
    fn serve_parked(&mut self, now: Time, out: &mut Effects) {
        while let Some((at, _)) = self.parked.front() {
            if now.0.saturating_sub(at.0) > PARKED_MAX_AGE.as_nanos() as u64 {
                self.parked.pop_front();
                out.counts.push("replica request expired");
                continue;
            }
            if self.serving() {
                let (_, env) = self.parked.pop_front().expect("checked");
                self.run_inner(now, Input::Message(env), out);
                continue;
            }
            let leader = self.leader().filter(|&l| l != self.me);
            let forwardable = matches!(self.parked.front(), Some((_, e)) if matches!(e.to, Addr::Partition(_)));
            match leader {
                Some(l) if forwardable => {
                    let (_, mut env) = self.parked.pop_front().expect("checked");
                    env.to = Addr::Replica(self.id, l);
                    out.send.push(env);
                    out.counts.push("replica request forwarded");
                }
                _ => return,
            }
        }
    }
}

/// Where a node sends a partition's requests: to the leader its own replica of the partition
/// knows, else to the partition's home ([`Addr::Partition`]), which forwards. Runtimes keep one
/// per node, [`LeaderCache::observe`] every replica after its step and
/// [`LeaderCache::route`] every message their machines send.
#[derive(Default)]
pub struct LeaderCache {
    leaders: std::collections::BTreeMap<PartitionId, NodeId>,
}

impl LeaderCache {
    /// Learns the leader `m` knows, if `m` is a replica.
    pub fn observe(&mut self, m: &dyn Machine) {
        let Some(r) = m.as_any().and_then(|a| a.downcast_ref::<ReplicatedPartition>()) else { return };
        match r.leader() {
            Some(l) => self.leaders.insert(r.id, l),
            None => self.leaders.remove(&r.id),
        };
    }

    /// Sends a request for a partition straight to its leader, when known.
    pub fn route(&self, env: &mut Envelope) {
        if let Addr::Partition(p) = env.to {
            if let Some(&l) = self.leaders.get(&p) {
                env.to = Addr::Replica(p, l);
            }
        }
    }

    pub fn clear(&mut self) {
        self.leaders.clear();
    }
}

/// Splits records into chunks of at most `max` bytes (a record alone may exceed it: raft
/// then refuses the proposal).
fn split(records: Vec<Vec<u8>>, max: usize) -> Vec<Vec<Vec<u8>>> {
    let mut out = vec![Vec::new()];
    let mut size = 0;
    for r in records {
        let last = out.last_mut().expect("never empty");
        if size + r.len() > max && !last.is_empty() {
            out.push(Vec::new());
            size = 0;
        }
        size += r.len() + 8;
        out.last_mut().expect("never empty").push(r);
    }
    out
}

fn apply_record(d: &mut Durable, r: WalRecord) {
    match r {
        WalRecord::Entries(es) => {
            if let Some(first) = es.first() {
                d.entries.retain(|e| e.index < first.index);
            }
            d.entries.extend(es);
        }
        WalRecord::HardState(hs) => d.hard_state = hs,
        WalRecord::Installed { meta, data } => {
            d.entries.clear();
            d.snapshot = Some((meta, data));
        }
    }
}

impl Machine for ReplicatedPartition {
    fn addr(&self) -> Addr {
        Addr::Replica(self.id, self.me)
    }

    fn recover(&mut self, snapshot: Option<&[u8]>, records: &[Vec<u8>]) -> Result<(), Error> {
        let corrupt =
            |what: &str, e: &dyn std::fmt::Display| Error::Storage(format!("{} replica {what}: {e}", self.id));
        let mut durable: Durable = match snapshot {
            Some(b) => postcard::from_bytes(b).map_err(|e| corrupt("snapshot", &e))?,
            None => Durable::default(),
        };
        for r in records {
            apply_record(&mut durable, postcard::from_bytes(r).map_err(|e| corrupt("record", &e))?);
        }
        let mut inner = (self.fresh)();
        inner.recover(durable.snapshot.as_ref().map(|(_, d)| d.as_slice()), &[])?;
        self.inner = inner;
        self.applied = durable.snapshot.as_ref().map_or(0, |(m, _)| m.index);
        self.base = durable.snapshot.clone();
        self.mirror = durable.clone();
        self.group = Some(ReplicaGroup::start(self.cfg.clone(), durable, self.seed).map_err(|e| corrupt("state", &e))?);
        Ok(())
    }

    fn step(&mut self, now: Time, input: Input, out: &mut Effects) {
        if self.group.is_none() {
            return; // never recovered: the runtime broke its contract; serve nothing
        }
        self.served.1 = false;
        self.advance_clock(now);
        match input {
            Input::Tick => {
                self.pump(out);
                if self.serving() {
                    self.run_inner(now, Input::Tick, out);
                }
            }
            Input::Message(env) => match env.msg {
                Message::Raft(bytes) => self.group().step_bytes(&bytes),
                Message::PartitionRequest(_) | Message::Batch(_) => {
                    if self.parked.len() >= PARKED_MAX {
                        self.parked.pop_front();
                        out.counts.push("replica request expired");
                    }
                    self.parked.push_back((now, env));
                }
                _ => {}
            },
        }
        self.pump(out);
        self.serve_parked(now, out);
        self.pump(out);
    }

    fn snapshot(&mut self) -> Option<Vec<u8>> {
        let base_index = self.base.as_ref().map_or(0, |(m, _)| m.index);
        self.mirror.entries.retain(|e| e.index > base_index);
        self.mirror.snapshot = self.base.clone();
        Some(postcard::to_stdvec(&self.mirror).expect("durable state serializes"))
    }

    fn never_snapshotted(&mut self) {
        self.volatile = true;
    }

    fn hand_over(&mut self) -> bool {
        if !self.is_leader() {
            return false;
        }
        if !self.handing_over {
            self.handing_over = true;
            if let Err(e) = self.group().hand_over() {
                tracing::warn!(partition = %self.id, error = %e, "could not hand leadership over");
            }
        }
        true
    }

    fn check_invariants(&self) -> Result<(), String> {
        if let Some(f) = &self.fault {
            return Err(f.clone());
        }
        if self.leading.is_none() && !self.pending.is_empty() {
            return Err(format!("{}: a follower holds proposals", self.id));
        }
        self.inner.check_invariants()
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
