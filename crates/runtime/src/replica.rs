//! # A replicated machine: a partition, a coordinator or an engine role inside its replica group
//!
//! With `replicas > 1` every node that keeps partition `p` runs a [`Replica`] at
//! [`Addr::Replica`]`(GroupId::Partition(p), node)`: the engine's [`Partition`] machine,
//! unchanged, and one member of `p`'s raft group ([`litmus_replication::ReplicaGroup`]). Every
//! coordinator is kept the same way, by the nodes that follow its own in the placement
//! ([`GroupId::Coordinator`]), so a transaction's fate (the coordinator's logged decisions and
//! Salt's accepted BASE transactions) outlives its node; so is every role an engine adds
//! ([`GroupId::Role`]: Omid's status oracle, Sinfonia's relay). A [`Replica`] is itself a [`Machine`],
//! so the simulator, the embedded runtime and the TCP runtime drive it as they drive any other,
//! with their one rule (persist before send) doing raft's durability for it.
//!
//! ## Followers: replay, or a restart when they come to lead
//!
//! A partition's followers apply each committed entry's records as they commit (the engine's
//! replay function), so a follower's partition is the committed state. A coordinator's
//! followers only keep the records: a coordinator's recovery is a restart (a new epoch, its
//! logged decisions resent, Salt's accepted BASE transactions rolled forward, everything else
//! presumed aborted), so a follower that comes to lead builds its coordinator from the group's
//! snapshot and the committed records exactly as a restart on its home node would
//! ([`Replicable::follows_by_replay`]). A coordinator's participants find it wherever it
//! leads: messages to [`Addr::Coordinator`] go to the leader the sending node knows.
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

use litmus_core::{Error, NodeId, Time};
use litmus_protocol::machine::TICK_INTERVAL_MS;
use litmus_protocol::{Addr, Coordinator, Effects, Envelope, GroupId, Input, Machine, Message, Partition};
use litmus_replication::{
    Apply, Durable, GroupConfig, HardState, LogEntry, LogIndex, LogPosition, ReplicaGroup, ReplicaId, Role,
    SnapshotMeta,
};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;

mod owed;
pub use owed::OWED_MAX_TICKS;
#[cfg(test)]
mod snapshot_tests;

/// Election timeout in ticks of [`TICK_INTERVAL_MS`]: 250 ms, drawn up to
/// [`ELECTION_SPREAD_TICKS`] longer, so a new leader is elected within 250–600 ms of the old
/// one's last heartbeat, inside a one-second failover, while a node thread descheduled for a
/// tenth of a second on a loaded machine does not lose its leaderships (100 ms did, over and
/// over, on two shared cores). Longer steps (300–700 ms: a commit of 100,000 rows on busy
/// cores) are covered by fortification and raft's running clock ([`FORTIFY_TICKS`],
/// [`RAFT_TICKS_PER_INPUT_MAX`]), not by a longer timeout, which would slow every failover.
pub const ELECTION_TICKS: usize = 50;
/// The randomized election timeout's spread: one election timeout.
pub const ELECTION_SPREAD_TICKS: usize = 50;
/// Heartbeat interval in ticks: 25 ms, ten heartbeats per election timeout.
pub const HEARTBEAT_TICKS: usize = 5;
/// The largest proposal: a step's records past it are split over several proposals. Raft
/// still sends one entry past its append limit, so this plus that limit (256 KiB) stays under
/// the 1 MiB frame limit.
pub const PROPOSAL_BYTES_MAX: usize = 512 * 1024;
/// Requests waiting for a leader (or for this leader's lease) are dropped after this long (two
/// election timeouts, so a failover does not drop them):
/// coordinators resend or time out as for a lost message.
pub const PARKED_MAX_AGE: Duration = Duration::from_millis(2 * ELECTION_TICKS as u64 * TICK_INTERVAL_MS);
/// Requests a replica parks at most; past it the oldest is dropped.
pub const PARKED_MAX: usize = 4096;
/// A leader that is not its partition's home hands leadership back to the home replica once it
/// has led this long and the home is caught up and answering: leaders return to where the
/// placement put them after a failover, which spreads them evenly over the nodes. Four
/// election timeouts (1 s), so a home that restarts serves again soon after it caught up, but
/// a node that flaps is not handed leaderships it loses at once.
pub const RETURN_HOME_AFTER_TICKS: u64 = 4 * ELECTION_TICKS as u64;
/// The return home waits while transactions hold volatile work on the partition (a hand-over
/// would abort them: `PartitionEngine::volatile_since`), at most this long (in ticks, 30 s), so
/// that a partition never idle still returns home.
pub const RETURN_HOME_DEFER_MAX_TICKS: u64 = 30_000 / TICK_INTERVAL_MS;
/// Of the ticks that passed since a replica's last input, raft's timers count at most this
/// many (20 ms): a pause longer than that (its node's thread stalled in another machine's long
/// step) counts as 20 ms for elections, and in full for leases
/// ([`litmus_replication::ReplicaGroup::advance`]).
pub const RAFT_TICKS_PER_INPUT_MAX: u64 = 4;
/// How long one [`Message::Fortify`] holds off a follower's election timer (ticks, 100 ms):
/// several of the runtime's sending intervals, so that a late one does not let the timer run,
/// and short beside the election timeout, so that a leader whose node died (and stopped
/// sending them) is replaced in little more time than without them.
pub const FORTIFY_TICKS: u64 = 20;

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

/// [`BREAK_RULE`]: leaders send no [`Message::Fortify`], so a follower campaigns against a
/// leader whose node is only busy.
#[doc(hidden)]
pub const BREAK_NO_FORTIFY: u8 = 5;

/// [`BREAK_RULE`]: a deposed leader keeps its partition as it is, effects of proposals that
/// never committed included, instead of rebuilding it from the committed log.
#[doc(hidden)]
pub const BREAK_KEEP_SPECULATIVE_STATE: u8 = 3;

/// [`BREAK_RULE`]: a member that does not follow by replay (a coordinator, a role) starts its
/// machine empty when it comes to lead, instead of recovering it from the group's log.
#[doc(hidden)]
pub const BREAK_FORGET_ON_TAKEOVER: u8 = 4;

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
    /// This replica restarted without its data (`rejoining`): it never votes again.
    Abstaining,
}

/// What one raft entry carries: a step's records, or a piece of one record too large for an
/// entry ([`PROPOSAL_BYTES_MAX`]), the pieces in consecutive entries, the record applied with
/// its last piece.
#[derive(Serialize, Deserialize)]
enum EntryData {
    Records(Vec<Vec<u8>>),
    Piece { last: bool, bytes: Vec<u8> },
}

/// Decodes one entry's data: the records to apply now, if any. `assembling` holds the pieces of
/// a large record received so far.
fn entry_records(data: &[u8], assembling: &mut Vec<u8>) -> Result<Vec<Vec<u8>>, Error> {
    match postcard::from_bytes::<EntryData>(data).map_err(|e| Error::Storage(e.to_string()))? {
        EntryData::Records(records) => Ok(records),
        EntryData::Piece { last, bytes } => {
            assembling.extend_from_slice(&bytes);
            Ok(if last { vec![std::mem::take(assembling)] } else { Vec::new() })
        }
    }
}

/// The entries that carry `records`: whole records packed up to `max` bytes each, a record
/// over `max` alone cut into pieces.
fn entries_of(records: Vec<Vec<u8>>, max: usize) -> Vec<Vec<u8>> {
    let encode = |d: &EntryData| postcard::to_stdvec(d).expect("entries serialize");
    let mut out = Vec::new();
    for chunk in split(records, max) {
        match <[Vec<u8>; 1]>::try_from(chunk) {
            Ok([big]) if big.len() > max => {
                let n = big.len().div_ceil(max);
                for (i, piece) in big.chunks(max).enumerate() {
                    out.push(encode(&EntryData::Piece { last: i + 1 == n, bytes: piece.to_vec() }));
                }
            }
            Ok([one]) => out.push(encode(&EntryData::Records(vec![one]))),
            Err(chunk) => out.push(encode(&EntryData::Records(chunk))),
        }
    }
    out
}

/// A leader's proposal not applied yet, with the messages that wait for it.
struct Pending {
    pos: LogPosition,
    held: Vec<Envelope>,
    /// It carries a barrier record ([`Effects::barrier`]): the machine's `send_now` messages
    /// wait for it too.
    barrier: bool,
}

/// Builds the machine afresh (at boot, and for a rebuild).
pub type Fresh = Box<dyn Fn() -> Box<dyn Replicable> + Send>;

/// A machine a replica group can keep: its state is its snapshot plus the records it logged.
pub trait Replicable: Machine {
    /// The group that keeps it.
    fn group(&self) -> GroupId;
    /// Builds the same machine afresh, with nothing recovered.
    fn fresh(&self) -> Fresh;
    /// Whether followers apply committed records as they commit (`recover(None, records)` once
    /// per entry), so that a follower's machine is the committed state; otherwise they keep
    /// the records, and a member builds its machine from them (one `recover` call, a restart)
    /// when it comes to lead or takes a snapshot. A snapshot is taken before the machine's
    /// first step, so it holds what the records hold and nothing the restart adds to log at
    /// that step ([`Machine::snapshot`]): the leader, still serving, never logged it.
    fn follows_by_replay(&self) -> bool {
        false
    }
    /// Drops volatile state in place, as a restart would (only asked of a machine that
    /// follows by replay, when everything it holds was committed).
    fn restart_in_place(&mut self) -> Result<(), Error> {
        Err(Error::Internal("restart in place is only for machines that follow by replay".into()))
    }
    /// [`litmus_protocol::engine::PartitionEngine::volatile_since`]: a leadership hand-over
    /// waits while it is `Some` (at most [`RETURN_HOME_DEFER_MAX_TICKS`]).
    fn volatile_since(&self) -> Option<Time> {
        None
    }
    /// This replica stops leading: the machine may answer whoever waits on it (its state is
    /// dropped right after), in `out` now, or in the returned client answers, which hold only
    /// once everything it logged is durable ([`owed`]). By default nothing is sent.
    fn abandon(&mut self, _out: &mut Effects) -> Vec<Envelope> {
        Vec::new()
    }
}

impl Replicable for Partition {
    fn group(&self) -> GroupId {
        GroupId::Partition(self.id())
    }
    fn fresh(&self) -> Fresh {
        let make = self.template();
        Box::new(move || Box::new(make()))
    }
    fn follows_by_replay(&self) -> bool {
        true
    }
    fn restart_in_place(&mut self) -> Result<(), Error> {
        Partition::restart_in_place(self)
    }
    fn volatile_since(&self) -> Option<Time> {
        Partition::volatile_since(self)
    }
}

impl Replicable for Coordinator {
    fn group(&self) -> GroupId {
        GroupId::Coordinator(self.node())
    }
    fn fresh(&self) -> Fresh {
        let make = self.template();
        Box::new(move || Box::new(make()))
    }
    fn volatile_since(&self) -> Option<Time> {
        self.busy_since()
    }
    fn abandon(&mut self, out: &mut Effects) -> Vec<Envelope> {
        Coordinator::abandon(self, out)
    }
}

/// An engine's role kept by a replica group ([`litmus_protocol::EngineDef::replicated_roles`]):
/// its machine as it runs alone, and how to build it afresh.
pub struct RoleMachine {
    role: litmus_protocol::RoleId,
    build: litmus_protocol::engine::RoleBuilder,
    inner: Box<dyn Machine>,
}

impl RoleMachine {
    pub fn new(role: litmus_protocol::RoleId, build: litmus_protocol::engine::RoleBuilder) -> Self {
        let inner = build();
        RoleMachine { role, build, inner }
    }
}

impl Machine for RoleMachine {
    fn addr(&self) -> Addr {
        self.inner.addr()
    }
    fn recover(&mut self, snapshot: Option<&[u8]>, records: &[Vec<u8>]) -> Result<(), Error> {
        self.inner.recover(snapshot, records)
    }
    fn step(&mut self, now: Time, input: Input, out: &mut Effects) {
        self.inner.step(now, input, out)
    }
    fn snapshot(&mut self) -> Option<Vec<u8>> {
        self.inner.snapshot()
    }
    fn never_snapshotted(&mut self) {
        self.inner.never_snapshotted()
    }
    fn check_invariants(&self) -> Result<(), String> {
        self.inner.check_invariants()
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        self.inner.as_any()
    }
}

impl Replicable for RoleMachine {
    fn group(&self) -> GroupId {
        GroupId::Role(self.role)
    }
    fn fresh(&self) -> Fresh {
        let (role, build) = (self.role, self.build.clone());
        Box::new(move || Box::new(RoleMachine::new(role, build.clone())))
    }
}

/// The seed of one member: the cluster's, mixed with the group and the node.
fn member_seed(seed: u64, id: GroupId, me: NodeId) -> u64 {
    let group = match id {
        GroupId::Partition(p) => u64::from(p.0) << 32,
        GroupId::Coordinator(n) => (0xC0 << 56) | (u64::from(n.0) << 32),
        GroupId::Role(r) => (0xA0 << 56) | (u64::from(r.0) << 32),
    };
    seed ^ group ^ u64::from(me.0).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

pub struct Replica {
    id: GroupId,
    me: NodeId,
    cfg: GroupConfig,
    seed: u64,
    fresh: Fresh,
    inner: Box<dyn Replicable>,
    /// [`Replicable::follows_by_replay`].
    replays: bool,
    /// A machine that does not follow by replay is behind the committed entries: it is built
    /// from them before it serves or is snapshotted.
    stale: bool,
    group: Option<ReplicaGroup>,
    /// What the host has durably (log records and snapshot together), kept to rebuild the
    /// partition and to write [`Machine::snapshot`].
    mirror: Durable,
    /// The group's latest snapshot of the partition: the base of a rebuild.
    base: Option<(SnapshotMeta, Vec<u8>)>,
    /// The last log index the partition holds the effect of (committed entries only).
    applied: LogIndex,
    pending: VecDeque<Pending>,
    /// Client answers held for proposals this replica made as leader, still to settle ([`owed`]).
    owed: owed::Owed,
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
    /// The pieces of a large record applied so far ([`EntryData::Piece`]).
    assembling: Vec<u8>,
    /// The term of the last input this replica served (ran on its partition), and whether
    /// the last step served one: the simulator checks that no replica serves in a term older
    /// than one another replica of the partition already served in.
    served: (u64, bool),
    /// A leadership transfer was started for a node about to stop ([`Machine::hand_over`]).
    handing_over: bool,
    /// The node lost its data directory: a replica with no durable state starts as a member
    /// that catches up but never votes ([`ReplicaGroup::rejoin_after_data_loss`]).
    rejoining: bool,
    /// The abstaining mark is still to be logged (in the first step, before any send).
    mark_abstaining: bool,
    /// The partition's home node (first in its placement): the replica that should lead.
    home: NodeId,
    /// The tick at which this replica last began to lead, or last tried to hand leadership
    /// home: the return-home rule waits [`RETURN_HOME_AFTER_TICKS`] after either.
    home_wait_from: u64,
    /// The tick at which the return home first waited for a long transaction (reset when it
    /// goes ahead or leadership changes): it waits at most [`RETURN_HOME_DEFER_MAX_TICKS`].
    home_deferred_from: Option<u64>,
    /// The home campaigns on its first tick if its group is brand-new (`campaign_if_new`).
    campaign_due: bool,
    /// `(term, tick)`: this replica's leader of `term` said its node is busy but alive
    /// ([`Message::Fortify`]); raft's timers stand still until `tick`, while the term lasts.
    fortified: (u64, u64),
}

impl Replica {
    /// The member on node `me` of the group of `voters` (nodes, the home first) keeping
    /// `machine`.
    pub fn new(machine: impl Replicable + 'static, me: NodeId, voters: Vec<NodeId>, seed: u64) -> Self {
        let id = machine.group();
        let home = voters.first().copied().unwrap_or(me);
        let mut cfg = GroupConfig::new(ReplicaId::of_node(me), voters.into_iter().map(ReplicaId::of_node).collect());
        cfg.election_ticks = ELECTION_TICKS;
        cfg.election_spread_ticks = ELECTION_SPREAD_TICKS;
        cfg.heartbeat_ticks = HEARTBEAT_TICKS;
        cfg.proposal_bytes_max = PROPOSAL_BYTES_MAX;
        Replica {
            id,
            me,
            cfg,
            seed: member_seed(seed, id, me),
            fresh: machine.fresh(),
            replays: machine.follows_by_replay(),
            stale: false,
            inner: Box::new(machine),
            group: None,
            mirror: Durable::default(),
            base: None,
            applied: 0,
            pending: VecDeque::new(),
            owed: owed::Owed::default(),
            leading: None,
            term_start: 0,
            parked: VecDeque::new(),
            clock_origin: None,
            ticks: 0,
            snapshot_due: false,
            volatile: false,
            fault: None,
            deposed: false,
            assembling: Vec::new(),
            served: (0, false),
            handing_over: false,
            rejoining: false,
            mark_abstaining: false,
            home,
            home_wait_from: 0,
            home_deferred_from: None,
            campaign_due: false,
            fortified: (0, 0),
        }
    }

    /// The node restarts after losing its data directory (`litmus server
    /// --rejoin-after-data-loss`): if this replica finds no durable state, it may have voted or
    /// acknowledged entries before the loss, so it rejoins as a member that never votes
    /// again (raft's safety rests on votes and acknowledgements being durable). A replica that
    /// finds its state ignores this.
    pub fn rejoining(mut self) -> Self {
        self.rejoining = true;
        self
    }

    /// `Some(term)` if the last step ran an input on the partition, as leader of `term`.
    pub fn served_in_last_step(&self) -> Option<u64> {
        self.served.1.then_some(self.served.0)
    }

    pub fn id(&self) -> GroupId {
        self.id
    }

    /// The partition this group keeps, if it keeps one (a follower's is the committed state;
    /// a leader's may be ahead).
    pub fn partition(&self) -> Option<&Partition> {
        self.inner.as_any().and_then(|a| a.downcast_ref::<Partition>())
    }

    /// Whether this member still holds `client`'s request `id`: parked until a leader is
    /// known, run by its coordinator, or its answer owed. A member that did not crash keeps it
    /// whatever happened to the others: it forwards a parked request to the next leader it
    /// learns of, which runs it then.
    pub fn holds_request(&self, client: Addr, id: litmus_core::RequestId) -> bool {
        let is_it = |env: &Envelope| env.from == client && matches!(&env.msg, Message::ClientRequest(r) if r.id == id);
        self.parked.iter().any(|(_, env)| is_it(env))
            || self.owed.answers_request(client, id)
            || self
                .inner
                .as_any()
                .and_then(|a| a.downcast_ref::<Coordinator>())
                .is_some_and(|c| c.holds_request(client, id))
    }

    /// The last log index whose effect the partition holds.
    pub fn applied(&self) -> LogIndex {
        self.applied
    }

    /// Whether this replica leads its group now.
    pub fn is_leader(&self) -> bool {
        self.group.as_ref().is_some_and(|g| g.role() == Role::Leader)
    }

    /// [`Message::Fortify`] from the member on `from`: heeded from this follower's leader of
    /// the current term only.
    fn fortify_from(&mut self, from: Addr, term: u64) {
        let Addr::Replica(_, node) = from else { return };
        let g = self.group();
        if g.role() == Role::Follower && g.term() == term && g.leader() == Some(ReplicaId::of_node(node)) {
            self.fortified = (term, self.ticks + FORTIFY_TICKS);
        }
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
        if due > self.ticks {
            let passed = due - self.ticks;
            // Raft's timers do not run while this replica's leader is fortified.
            let (term, until) = self.fortified;
            let fortified = term == self.group().term() && self.group().role() == Role::Follower;
            let running = if fortified { due.saturating_sub(self.ticks.max(until)) } else { passed };
            self.ticks = due;
            self.group().advance(passed, running.min(RAFT_TICKS_PER_INPUT_MAX));
        }
    }

    /// Runs one input on the partition (this replica serves) and replicates what it logged.
    fn run_inner(&mut self, now: Time, input: Input, out: &mut Effects) {
        self.served = (self.group().term(), true);
        let mut step = Effects::default();
        self.inner.step(now, input, &mut step);
        // Commit before send, with the one exception a machine may claim: messages that
        // depend on no record but barriers leave at once, unless a barrier is still to commit
        // (a coordinator's epoch record); they then wait with the rest.
        if !step.send_now.is_empty() {
            let barrier_due = step.barrier || self.pending.iter().any(|p| p.barrier);
            if barrier_due || broken(BREAK_SEND_BEFORE_COMMIT) {
                let mut now_sends = std::mem::take(&mut step.send_now);
                now_sends.append(&mut step.send);
                step.send = now_sends;
            } else {
                out.send.append(&mut step.send_now);
            }
        }
        out.counts.append(&mut step.counts);
        out.work += step.work;
        let records = std::mem::take(&mut step.persist);
        if !records.is_empty() {
            for bytes in entries_of(records, PROPOSAL_BYTES_MAX - 1024) {
                match self.group().propose(bytes) {
                    Ok(pos) => self.pending.push_back(Pending { pos, held: Vec::new(), barrier: step.barrier }),
                    Err(e) => {
                        // The partition applied records that cannot be logged: undo them by a
                        // rebuild, and drop the step's messages (their senders resend).
                        out.counts.push("replica proposal refused");
                        tracing::warn!(group = %self.id, error = %e, "a proposal was refused; rebuilding the partition");
                        self.rebuild();
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
            self.follow_leadership(out);
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
            // Only the term and the vote must be durable before anything is sent (raft's
            // commit index is volatile state: a restarted member learns it from the leader).
            // A change of the commit index alone is kept for the next record or snapshot, so
            // committing costs no sync of its own.
            let was = self.mirror.hard_state;
            if (hs.term, hs.vote) != (was.term, was.vote) {
                self.record(WalRecord::HardState(hs), out);
            } else {
                self.mirror.hard_state = hs;
            }
        }
    }

    fn record(&mut self, r: WalRecord, out: &mut Effects) {
        if !self.volatile {
            out.persist.push(postcard::to_stdvec(&r).expect("replica records serialize"));
        }
        apply_record(&mut self.mirror, r);
    }

    fn follow_leadership(&mut self, out: &mut Effects) {
        let g = self.group.as_ref().expect("recovered");
        let now = (g.role() == Role::Leader).then(|| g.term());
        if g.leader().is_some() {
            self.deposed = false;
        }
        if now == self.leading {
            return;
        }
        if let Some(term) = self.leading {
            tracing::info!(group = %self.id, term, dropped = self.pending.len(), "replica stepped down");
            out.counts.push("replica stepped down");
            self.step_down(out);
            self.deposed = true;
        }
        if let Some(term) = now {
            tracing::info!(group = %self.id, term, "replica leads");
            self.term_start = self.group().last_index();
            self.leading = Some(term);
            self.home_wait_from = self.ticks;
            self.home_deferred_from = None;
        }
    }

    fn apply(&mut self, a: Apply, out: &mut Effects) {
        match a {
            Apply::Entry(e) => {
                if e.index <= self.applied {
                    return;
                }
                match self.pending.front() {
                    Some(front) if front.pos.index == e.index && front.pos.term == e.term => {
                        let done = self.pending.pop_front().expect("checked");
                        out.send.extend(done.held);
                        self.applied = e.index;
                    }
                    front => {
                        if front.is_some_and(|f| f.pos.index <= e.index) {
                            // Another leader's entry where ours was: ours is lost.
                            self.step_down(out);
                        }
                        self.apply_entry(&e);
                    }
                }
                self.owed.settle(e.index, Some(e.term), &mut out.send);
            }
            Apply::Snapshot { meta, data } => {
                self.owe_held();
                self.owed.settle(meta.index, None, &mut out.send);
                self.pending.clear();
                self.assembling.clear();
                let mut p = (self.fresh)();
                match p.recover(Some(&data), &[]) {
                    Ok(()) => {
                        self.inner = p;
                        self.stale = false;
                    }
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
        if !self.replays {
            self.stale = true; // built from the entries when it serves next
            return;
        }
        let applied =
            entry_records(&e.data, &mut self.assembling).and_then(|records| self.inner.recover(None, &records));
        if let Err(err) = applied {
            self.fault = Some(format!("{}: entry {} does not apply: {err}", self.id, e.index));
        }
    }

    /// Leadership lost: the partition goes back to the committed state, as after a restart.
    /// With no proposal in flight the partition holds nothing uncommitted, and it restarts in
    /// place (its rows kept, its volatile state dropped); otherwise it is rebuilt from the
    /// group's snapshot and the committed entries.
    fn step_down(&mut self, out: &mut Effects) {
        let last = self.pending.back().map(|p| p.pos);
        self.owe_held();
        if !self.stale {
            // Whoever waits on the machine is answered before its state is dropped.
            let after_log = self.inner.abandon(out);
            match last {
                Some(pos) => after_log.into_iter().for_each(|a| self.owed.owe(pos, self.ticks, a)),
                None => out.send.extend(after_log), // everything it logged is committed
            }
        }
        self.leading = None;
        if !self.replays {
            self.rebuild();
            return;
        }
        if broken(BREAK_KEEP_SPECULATIVE_STATE) {
            self.pending.clear();
            return;
        }
        if self.pending.is_empty() && self.assembling.is_empty() {
            if let Err(e) = self.inner.restart_in_place() {
                self.fault = Some(format!("{}: restarting after a leader change: {e}", self.id));
            }
            return;
        }
        self.rebuild();
    }

    /// The client answers held for proposals in flight wait for them to settle ([`owed`]).
    fn owe_held(&mut self) {
        for p in &mut self.pending {
            for answer in p.held.drain(..) {
                self.owed.owe(p.pos, self.ticks, answer);
            }
        }
    }

    /// The partition rebuilt from the group's snapshot and the committed entries after it:
    /// whatever it applied beyond them (effects of proposals that never committed) is gone.
    fn rebuild(&mut self) {
        self.leading = None;
        self.pending.clear();
        if !self.replays {
            // Dropped now (it may hold effects that never commit), built again from the
            // committed entries when it is wanted.
            self.inner = (self.fresh)();
            self.stale = true;
            return;
        }
        let mut p = (self.fresh)();
        let base_index = self.base.as_ref().map_or(0, |(m, _)| m.index);
        let mut result = p.recover(self.base.as_ref().map(|(_, d)| d.as_slice()), &[]);
        let mut assembling = Vec::new();
        for e in self.mirror.entries.iter().filter(|e| e.index > base_index && e.index <= self.applied) {
            if result.is_err() {
                break;
            }
            if !e.data.is_empty() {
                result = entry_records(&e.data, &mut assembling).and_then(|records| p.recover(None, &records));
            }
        }
        match result {
            Ok(()) => {
                self.inner = p;
                self.assembling = assembling;
            }
            Err(e) => self.fault = Some(format!("{}: rebuilding after a leader change: {e}", self.id)),
        }
    }

    /// A machine that does not follow by replay, built from the group's snapshot and every
    /// committed record after it in one recovery: a restart's.
    fn reload(&mut self) {
        let base_index = self.base.as_ref().map_or(0, |(m, _)| m.index);
        let mut records = Vec::new();
        let mut assembling = Vec::new();
        let mut result = Ok(());
        for e in self.mirror.entries.iter().filter(|e| e.index > base_index && e.index <= self.applied) {
            if !e.data.is_empty() {
                match entry_records(&e.data, &mut assembling) {
                    Ok(r) => records.extend(r),
                    Err(err) => {
                        result = Err(err);
                        break;
                    }
                }
            }
        }
        let mut m = (self.fresh)();
        let base = self.base.as_ref().map(|(_, d)| d.as_slice());
        let result = if broken(BREAK_FORGET_ON_TAKEOVER) {
            m.recover(None, &[])
        } else {
            result.and_then(|()| m.recover(base, &records))
        };
        match result {
            Ok(()) => {
                self.inner = m;
                self.assembling = assembling;
                self.stale = false;
            }
            Err(e) => self.fault = Some(format!("{}: rebuilding from the log: {e}", self.id)),
        }
    }

    /// Whether this replica serves now ([`Replica::serving`]), its machine brought up to the
    /// committed entries first if it fell behind them.
    fn ready_to_serve(&mut self) -> bool {
        if !self.serving() {
            return false;
        }
        if self.stale {
            tracing::info!(group = %self.id, applied = self.applied, "replica restarts its machine from the log to serve");
            self.reload();
        }
        self.fault.is_none()
    }

    fn take_snapshot_if_due(&mut self) {
        // Never between the pieces of a large record: a restart from the snapshot could not
        // assemble it.
        if !self.snapshot_due || !self.pending.is_empty() || !self.assembling.is_empty() || self.applied == 0 {
            return;
        }
        if self.stale {
            self.reload();
            if !self.assembling.is_empty() || self.fault.is_some() {
                return;
            }
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
            Err(e) => tracing::debug!(group = %self.id, error = %e, "snapshot not taken"),
        }
    }

    /// A leader away from the partition's home hands leadership back to it once it has led
    /// [`RETURN_HOME_AFTER_TICKS`] and the home replica holds the whole log and answers (see
    /// the constant). Nothing is served from the moment the transfer starts (the group revokes
    /// the lease); a transfer that fails ends in an ordinary election.
    fn return_home(&mut self, out: &mut Effects) {
        if self.leading.is_none()
            || self.me == self.home
            || self.handing_over
            || self.ticks < self.home_wait_from + RETURN_HOME_AFTER_TICKS
        {
            return;
        }
        self.home_wait_from = self.ticks;
        let home = ReplicaId::of_node(self.home);
        let answering_within = self.cfg.election_ticks as u64;
        if !self.group().is_caught_up(home, answering_within) {
            return;
        }
        // A hand-over loses what unprepared transactions hold here (a bulk load, an index
        // build, any transaction in flight): it waits for a moment with none, up to a bound.
        if self.inner.volatile_since().is_some() {
            let from = *self.home_deferred_from.get_or_insert(self.ticks);
            if self.ticks < from + RETURN_HOME_DEFER_MAX_TICKS {
                out.counts.push("replica return home waits for transactions");
                // Looks again on the next tick, not a second later: a quiet moment may be short.
                self.home_wait_from = self.ticks.saturating_sub(RETURN_HOME_AFTER_TICKS);
                return;
            }
        }
        self.home_deferred_from = None;
        match self.group().transfer_leadership(home) {
            Ok(()) => {
                out.counts.push("replica leadership returned home");
                tracing::info!(group = %self.id, home = %self.home, "replica hands leadership home");
            }
            Err(e) => tracing::debug!(group = %self.id, error = %e, "leadership not returned home"),
        }
    }

    /// Drops a parked request no leader took in time. A partition's requester resends or times
    /// out as for a lost message; a client is told at once that its request did not run (it
    /// may retry it), since nothing else would ever answer it.
    fn expire(&mut self, env: Envelope, out: &mut Effects) {
        out.counts.push("replica request expired");
        if let Message::ClientRequest(req) = env.msg {
            let reason = format!(
                "{} has no leader its member on node {} can reach; the request did not run",
                self.id, self.me.0
            );
            let msg = Message::ClientResponse(litmus_protocol::message::ClientResponse {
                id: req.id,
                result: Err(Error::unavailable(reason)),
            });
            out.send.push(Envelope { from: self.id.addr(), to: env.from, msg });
        }
    }

    /// Serves, forwards or keeps the parked requests (see "Who serves").
    fn serve_parked(&mut self, now: Time, out: &mut Effects) {
        while let Some((at, _)) = self.parked.front() {
            if now.0.saturating_sub(at.0) > PARKED_MAX_AGE.as_nanos() as u64 {
                let (_, env) = self.parked.pop_front().expect("checked");
                self.expire(env, out);
                continue;
            }
            if self.ready_to_serve() {
                let (_, env) = self.parked.pop_front().expect("checked");
                self.run_inner(now, Input::Message(env), out);
                continue;
            }
            let leader = self.leader().filter(|&l| l != self.me);
            // Addressed to the group, not yet forwarded by a member.
            let forwardable = matches!(self.parked.front(), Some((_, e)) if !matches!(e.to, Addr::Replica(..)));
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

/// Where a node sends messages to a replicated partition or coordinator: to the leader its own
/// member of the group knows, else (for a coordinator's group it keeps no member of) to the
/// node its last message from that coordinator came from, else to the group's home
/// ([`Addr::Partition`], [`Addr::Coordinator`]), which forwards. Runtimes keep one per node,
/// [`LeaderCache::observe`] every replica after its step, [`LeaderCache::learn`] from every
/// message a peer sends, and [`LeaderCache::route`] every message their machines send.
#[derive(Default)]
pub struct LeaderCache {
    leaders: std::collections::BTreeMap<GroupId, NodeId>,
    /// Groups this node keeps a member of: their leader is what the member knows.
    members: std::collections::BTreeSet<GroupId>,
}

impl LeaderCache {
    /// Learns the leader `m` knows, if `m` is a replica.
    pub fn observe(&mut self, m: &dyn Machine) {
        let Some(r) = m.as_any().and_then(|a| a.downcast_ref::<Replica>()) else { return };
        self.members.insert(r.id);
        match r.leader() {
            Some(l) => self.leaders.insert(r.id, l),
            None => self.leaders.remove(&r.id),
        };
    }

    /// Learns where a coordinator (or a replicated role) leads from a message it sent, which
    /// node `sender` delivered: it speaks only while its group's leader, so its participants answer it
    /// there even when they keep no member of its group. (Partitions are not learned this way:
    /// their requesters keep sending to a home that forwards, which a stale hint would not.)
    pub fn learn(&mut self, from: Addr, sender: NodeId) {
        if let (Addr::Coordinator(_) | Addr::Role(_), Some(g)) = (from, GroupId::of(from)) {
            if !self.members.contains(&g) {
                self.leaders.insert(g, sender);
            }
        }
    }

    /// Sends a message for a replicated partition or coordinator straight to its leader, when
    /// known.
    pub fn route(&self, env: &mut Envelope) {
        if let Some(g) = GroupId::of(env.to).filter(|_| !matches!(env.to, Addr::Replica(..))) {
            if let Some(&l) = self.leaders.get(&g) {
                env.to = Addr::Replica(g, l);
            }
        }
    }

    pub fn clear(&mut self) {
        self.leaders.clear();
        self.members.clear();
    }
}

/// Splits records into chunks of at most `max` bytes (a record over `max` alone in its chunk).
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
        WalRecord::Abstaining => d.abstaining = true,
    }
}

impl Machine for Replica {
    fn addr(&self) -> Addr {
        Addr::Replica(self.id, self.me)
    }

    fn recover(&mut self, snapshot: Option<&[u8]>, records: &[Vec<u8>]) -> Result<(), Error> {
        let id = self.id;
        let corrupt = |what: &str, e: &dyn std::fmt::Display| Error::Storage(format!("{id} replica {what}: {e}"));
        let mut durable: Durable = match snapshot {
            Some(b) => postcard::from_bytes(b).map_err(|e| corrupt("snapshot", &e))?,
            None => Durable::default(),
        };
        for r in records {
            apply_record(&mut durable, postcard::from_bytes(r).map_err(|e| corrupt("record", &e))?);
        }
        self.assembling.clear();
        let mut inner = (self.fresh)();
        inner.recover(durable.snapshot.as_ref().map(|(_, d)| d.as_slice()), &[])?;
        self.inner = inner;
        // The entries after the snapshot are applied again as raft delivers them.
        self.stale = !self.replays;
        self.applied = durable.snapshot.as_ref().map_or(0, |(m, _)| m.index);
        self.base = durable.snapshot.clone();
        self.mirror = durable.clone();
        let group = if self.rejoining && durable == Durable::default() {
            self.mark_abstaining = true;
            tracing::warn!(group = %self.id, "rejoining without data: this replica will never vote again");
            ReplicaGroup::rejoin_after_data_loss(self.cfg.clone(), self.seed)
        } else {
            ReplicaGroup::start(self.cfg.clone(), durable, self.seed)
        };
        self.group = Some(group.map_err(|e| corrupt("state", &e))?);
        // A brand-new group: the home campaigns on its first tick, so that it leads from the
        // start instead of whichever replica times out first (which would hand over a second
        // later, aborting what runs on the partition then, as a cluster's first load).
        self.campaign_due = self.me == self.home;
        Ok(())
    }

    fn step(&mut self, now: Time, input: Input, out: &mut Effects) {
        if self.group.is_none() {
            return; // never recovered: the runtime broke its contract; serve nothing
        }
        self.served.1 = false;
        if std::mem::take(&mut self.mark_abstaining) {
            self.record(WalRecord::Abstaining, out);
        }
        self.advance_clock(now);
        match input {
            Input::Tick => {
                if std::mem::take(&mut self.campaign_due) {
                    self.group().campaign_if_new();
                }
                self.pump(out);
                if self.ready_to_serve() {
                    self.run_inner(now, Input::Tick, out);
                }
                self.return_home(out);
                self.owed.expire(self.ticks, &mut out.send);
            }
            Input::Message(env) => match env.msg {
                Message::Raft(bytes) => self.group().step_bytes(&bytes),
                Message::Fortify { term } => self.fortify_from(env.from, term),
                _ => {
                    if self.parked.len() >= PARKED_MAX {
                        let (_, oldest) = self.parked.pop_front().expect("full");
                        self.expire(oldest, out);
                    }
                    self.parked.push_back((now, env));
                }
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

    fn fortify(&self) -> Vec<Envelope> {
        if broken(BREAK_NO_FORTIFY) {
            return Vec::new();
        }
        let Some(g) = self.group.as_ref().filter(|g| g.role() == Role::Leader) else { return Vec::new() };
        let from = Addr::Replica(self.id, self.me);
        let msg = Message::Fortify { term: g.term() };
        let followers = self.cfg.voters.iter().map(|r| r.node()).filter(|n| *n != self.me);
        followers.map(|n| Envelope { from, to: Addr::Replica(self.id, n), msg: msg.clone() }).collect()
    }

    fn hand_over(&mut self) -> bool {
        if !self.is_leader() {
            return false;
        }
        if !self.handing_over {
            self.handing_over = true;
            if let Err(e) = self.group().hand_over() {
                tracing::warn!(group = %self.id, error = %e, "could not hand leadership over");
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A record too large for one entry travels in pieces and applies whole with the last one;
    /// small records share entries; nothing is applied from a piece that is not the last.
    #[test]
    fn a_record_over_the_entry_limit_travels_in_pieces_and_applies_whole() {
        let big: Vec<u8> = (0..2500u32).map(|i| (i % 251) as u8).collect();
        let records = vec![vec![1; 10], vec![2; 20], big.clone(), vec![3; 5]];
        let entries = entries_of(records.clone(), 1000);
        assert!(entries.len() >= 5, "{} entries", entries.len());
        assert!(entries.iter().all(|e| e.len() <= 1100));
        let mut assembling = Vec::new();
        let mut applied = Vec::new();
        for e in &entries {
            let got = entry_records(e, &mut assembling).unwrap();
            if !got.is_empty() {
                assert!(assembling.is_empty(), "a record applied while pieces are held");
            }
            applied.extend(got);
        }
        assert_eq!(applied, records);
        assert!(entry_records(b"\xff\xff", &mut assembling).is_err(), "bad bytes are an error, not a panic");
    }
}
