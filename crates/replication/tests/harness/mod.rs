//! A deterministic cluster of replica-group members in virtual time.
//!
//! One seeded `ChaCha8Rng` drives everything: message latency (uniform, so messages reorder),
//! loss, duplication, partitions of a minority, crashes (unsynced writes are lost), restarts,
//! the loss of a member's whole data directory, and each member's clock rate (skew). Events at
//! equal times run in insertion order. A failing seed prints itself; `REPLICATION_SEED=s` replays
//! it (see `seeds()`).
//!
//! On top runs a trivial state machine: the list of applied commands. The checks:
//! * agreement (Raft §5.3 log matching, §5.4.3 state machine safety): every member applies the
//!   same command at each index;
//! * durability (§5.4 leader completeness): every acknowledged command is, at the end, at the
//!   index it was acknowledged at, on every member;
//! * linearizable reads (§6.4): a read returns a state that holds every command acknowledged
//!   before the read was asked;
//! * leases (§6.4.1): no member serves a lease read in term T once a leader of a later term
//!   has been elected;
//! * liveness: once every fault heals, a new command is acknowledged within `liveness_bound_us`.

#![allow(dead_code)]

use litmus_replication::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

pub type Time = u64; // µs of virtual time

#[derive(Clone, Debug)]
pub struct SimConfig {
    pub members: usize,
    pub read_mode: ReadMode,
    pub tick_us: u64,
    /// Each member's clock runs at `1 ± drift` of real time...
    pub clock_drift: f64,
    /// ...or at these rates.
    pub clock_rates: Option<Vec<f64>>,
    pub latency_us: (u64, u64),
    pub loss: f64,
    pub duplication: f64,
    /// Each sync takes a time drawn from this range (syncs of one member finish in order).
    pub fsync_us: (u64, u64),
    /// Length of the phase with faults; then everything heals.
    pub fault_phase_us: Time,
    /// Mean time between fault events in that phase (0: no faults).
    pub fault_every_us: Time,
    pub crash_weight: u32,
    pub partition_weight: u32,
    pub data_loss_weight: u32,
    pub crash_all_weight: u32,
    pub propose_every_us: Time,
    pub read_every_us: Time,
    pub liveness_bound_us: Time,
    pub payload_bytes: usize,
    pub snapshot_every_entries: u64,
    pub snapshot_chunk_bytes: usize,
    // Rules broken on purpose, to show the checks catch them.
    pub ack_before_commit: bool,
    pub send_before_sync: bool,
    pub lease_ticks_unchecked: Option<usize>,
    pub lease_margin_ticks: Option<usize>,
    pub rejoin_lost_data_as_voter: bool,
    /// Leave a majority down after the fault phase (liveness cannot hold).
    pub keep_majority_down: bool,
}

impl SimConfig {
    pub fn new(members: usize) -> Self {
        SimConfig {
            members,
            read_mode: ReadMode::Lease,
            tick_us: 10_000,
            clock_drift: 0.05,
            clock_rates: None,
            latency_us: (200, 5_000),
            loss: 0.02,
            duplication: 0.02,
            fsync_us: (500, 4_000),
            fault_phase_us: 20_000_000,
            fault_every_us: 700_000,
            crash_weight: 4,
            partition_weight: 4,
            data_loss_weight: 1,
            crash_all_weight: 1,
            propose_every_us: 7_000,
            read_every_us: 11_000,
            liveness_bound_us: 5_000_000,
            payload_bytes: 64,
            snapshot_every_entries: 64,
            snapshot_chunk_bytes: 1024,
            ack_before_commit: false,
            send_before_sync: false,
            lease_ticks_unchecked: None,
            lease_margin_ticks: None,
            rejoin_lost_data_as_voter: false,
            keep_majority_down: false,
        }
    }

    pub fn calm(members: usize) -> Self {
        SimConfig { loss: 0.0, duplication: 0.0, fault_every_us: 0, ..Self::new(members) }
    }
}

/// The state machine: every applied command, in order.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Commands {
    pub applied: LogIndex,
    pub cmds: Vec<(LogIndex, u64)>,
    /// Makes snapshots big enough to need several chunks.
    pub padding: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
struct Command {
    id: u64,
    padding: Vec<u8>,
}

struct Disk {
    synced: Durable,
}

struct Member {
    group: Option<ReplicaGroup>,
    incarnation: u64,
    disk: Disk,
    pending_writes: u64,
    sm: Commands,
    /// index → (term, command id) proposed by this member.
    proposals: BTreeMap<LogIndex, (u64, u64)>,
    /// Reads asked here: id → (asked at, index that must be applied to serve).
    reads: BTreeMap<ReadId, (Time, LogIndex)>,
    reads_ready: Vec<(ReadId, LogIndex)>,
    last_sync_at: Time,
    clock_rate: f64,
    lost_data: bool,
}

#[derive(Debug)]
enum Event {
    Tick(usize, u64),
    Deliver(usize, Vec<u8>),
    Synced(usize, u64, Box<Ready>, bool),
    Fault,
    Restart(usize, bool),
    Heal(BTreeSet<usize>),
    Propose,
    Read,
    EndFaults,
}

pub struct Sim {
    pub seed: u64,
    pub cfg: SimConfig,
    rng: ChaCha8Rng,
    pub now: Time,
    seq: u64,
    queue: BinaryHeap<Reverse<(Time, u64, usize)>>,
    events: BTreeMap<usize, Event>,
    event_slot: usize,
    members: Vec<Member>,
    down: BTreeSet<usize>,
    isolated: BTreeSet<usize>,
    /// Down members and whether they come back without their data.
    restart_pending: BTreeMap<usize, bool>,
    /// Every committed index → command id, from whichever member applied it first.
    history: BTreeMap<LogIndex, u64>,
    pub acked: BTreeMap<u64, (LogIndex, Time)>,
    /// (time, highest acknowledged index by then), increasing.
    acked_frontier: Vec<(Time, LogIndex)>,
    /// (time, term) of each election won.
    elections: Vec<(Time, u64)>,
    pub violations: Vec<String>,
    next_cmd: u64,
    next_read: u64,
    faults_over_at: Option<Time>,
    pub stats: RunStats,
    pub trace: u64,
}

#[derive(Clone, Debug, Default)]
pub struct RunStats {
    pub acked: u64,
    pub reads_served: u64,
    pub lease_reads: u64,
    pub elections: u64,
    pub crashes: u64,
    pub data_losses: u64,
    pub partitions: u64,
    pub snapshots_installed: u64,
    pub chunks: u64,
    pub max_frame_bytes: usize,
}

impl Sim {
    pub fn new(seed: u64, cfg: SimConfig) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let members = (0..cfg.members)
            .map(|i| Member {
                group: None,
                incarnation: 0,
                disk: Disk { synced: Durable::default() },
                pending_writes: 0,
                sm: Commands::default(),
                proposals: BTreeMap::new(),
                reads: BTreeMap::new(),
                reads_ready: Vec::new(),
                last_sync_at: 0,
                clock_rate: match &cfg.clock_rates {
                    Some(r) => r[i],
                    None => 1.0 + rng.gen_range(-cfg.clock_drift..=cfg.clock_drift),
                },
                lost_data: false,
            })
            .collect();
        let mut sim = Sim {
            seed,
            cfg,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            event_slot: 0,
            members,
            down: BTreeSet::new(),
            isolated: BTreeSet::new(),
            restart_pending: BTreeMap::new(),
            history: BTreeMap::new(),
            acked: BTreeMap::new(),
            acked_frontier: vec![(0, 0)],
            elections: Vec::new(),
            violations: Vec::new(),
            next_cmd: 1,
            next_read: 1,
            faults_over_at: None,
            stats: RunStats::default(),
            trace: 0xcbf2_9ce4_8422_2325,
        };
        for i in 0..sim.cfg.members {
            sim.boot(i, false);
        }
        sim.at(0, Event::Propose);
        sim.at(0, Event::Read);
        if sim.cfg.fault_every_us > 0 {
            let first = sim.rng.gen_range(0..sim.cfg.fault_every_us * 2);
            sim.at(first, Event::Fault);
        }
        sim.at(sim.cfg.fault_phase_us, Event::EndFaults);
        sim
    }

    fn ids(&self) -> Vec<ReplicaId> {
        (0..self.cfg.members).map(|i| ReplicaId(i as u64 + 1)).collect()
    }

    fn group_config(&self, i: usize) -> GroupConfig {
        let mut g = GroupConfig::new(ReplicaId(i as u64 + 1), self.ids());
        g.read_mode = self.cfg.read_mode;
        g.snapshot_every_entries = self.cfg.snapshot_every_entries;
        g.compact_keep_entries = self.cfg.snapshot_every_entries / 2;
        g.snapshot_log_bytes_min = 0;
        g.snapshot_chunk_bytes = self.cfg.snapshot_chunk_bytes;
        g.lease_ticks_unchecked = self.cfg.lease_ticks_unchecked;
        if let Some(m) = self.cfg.lease_margin_ticks {
            g.lease_margin_ticks = m;
        }
        g
    }

    fn at(&mut self, t: Time, e: Event) {
        self.seq += 1;
        self.event_slot += 1;
        self.events.insert(self.event_slot, e);
        self.queue.push(Reverse((t, self.seq, self.event_slot)));
    }

    fn tick_interval(&self, i: usize) -> Time {
        (self.cfg.tick_us as f64 / self.members[i].clock_rate) as Time
    }

    fn boot(&mut self, i: usize, lost_data: bool) {
        self.log(format_args!(
            "member {i} boots (lost data: {lost_data}), disk {:?} {:?} entries {:?}",
            self.members[i].disk.synced.hard_state,
            self.members[i].disk.synced.snapshot.as_ref().map(|s| s.0),
            self.members[i].disk.synced.entries.first().map(|e| e.index)
                ..=self.members[i].disk.synced.entries.last().map(|e| e.index)
        ));
        let cfg = self.group_config(i);
        let seed = self.seed ^ ((i as u64 + 1) << 48) ^ (self.members[i].incarnation << 32);
        let m = &mut self.members[i];
        m.incarnation += 1;
        m.proposals.clear();
        m.reads.clear();
        m.reads_ready.clear();
        m.pending_writes = 0;
        let group = if lost_data {
            // The owner marks the fresh data directory before the member starts.
            m.disk.synced = Durable { abstaining: !self.cfg.rejoin_lost_data_as_voter, ..Durable::default() };
            m.lost_data = true;
            if self.cfg.rejoin_lost_data_as_voter {
                ReplicaGroup::start(cfg, Durable::default(), seed)
            } else {
                ReplicaGroup::rejoin_after_data_loss(cfg, seed)
            }
        } else {
            ReplicaGroup::start(cfg, m.disk.synced.clone(), seed)
        };
        let group = group.unwrap_or_else(|e| panic!("seed {}: member {i} failed to start: {e}", self.seed));
        // The state machine restarts from the durable snapshot; raft re-applies the rest.
        m.sm = match &m.disk.synced.snapshot {
            Some((_, data)) => postcard::from_bytes(data).expect("own snapshot decodes"),
            None => Commands::default(),
        };
        m.group = Some(group);
        let inc = m.incarnation;
        let first = self.now + self.tick_interval(i);
        self.at(first, Event::Tick(i, inc));
        self.pump(i);
    }

    pub fn run_until(&mut self, end: Time) {
        while let Some(Reverse((t, _, slot))) = self.queue.peek().copied() {
            if t > end {
                break;
            }
            self.queue.pop();
            self.now = t;
            let e = self.events.remove(&slot).expect("event stored");
            self.handle(e);
        }
        self.now = end;
    }

    /// Runs the fault phase, heals, and checks liveness and the end state.
    pub fn run(mut self) -> Self {
        let end_faults = self.cfg.fault_phase_us;
        self.run_until(end_faults);
        // Liveness: a command proposed after the heal must be acknowledged within the bound.
        let healed_at = self.faults_over_at.unwrap_or(end_faults);
        let first_after_heal = self.next_cmd;
        let deadline = healed_at + self.cfg.liveness_bound_us;
        self.run_until(deadline);
        let progressed = self.acked.range(first_after_heal..).any(|(_, (_, t))| *t <= deadline);
        if !progressed {
            self.violation(format!(
                "liveness: no command acknowledged within {} ms of the heal at {} ms",
                self.cfg.liveness_bound_us / 1000,
                healed_at / 1000
            ));
        }
        // Let every member catch up, then compare end states.
        self.run_until(deadline + 3_000_000);
        self.check_end();
        self
    }

    fn log(&self, what: std::fmt::Arguments) {
        if std::env::var_os("REPLICATION_TRACE").is_some() {
            eprintln!("[{:>8.3} ms] {what}", self.now as f64 / 1000.0);
        }
    }

    fn violation(&mut self, v: String) {
        if self.violations.len() < 20 {
            self.violations.push(format!("[t={} ms] {v}", self.now / 1000));
        }
    }

    fn handle(&mut self, e: Event) {
        match e {
            Event::Tick(i, inc) => {
                if self.members[i].incarnation != inc || self.down.contains(&i) {
                    return;
                }
                self.group(i).tick();
                self.check_lease(i);
                self.pump(i);
                let next = self.now + self.tick_interval(i);
                self.at(next, Event::Tick(i, inc));
            }
            Event::Deliver(to, bytes) => {
                if self.down.contains(&to) {
                    return;
                }
                self.trace = fnv(self.trace, &bytes);
                self.group(to).step_bytes(&bytes);
                self.pump(to);
            }
            Event::Synced(i, inc, rd, already_sent) => {
                if self.members[i].incarnation != inc || self.down.contains(&i) {
                    return;
                }
                self.synced(i, *rd, already_sent);
            }
            Event::Fault => self.fault(),
            Event::Restart(i, lose) => {
                if self.down.remove(&i) {
                    self.restart_pending.remove(&i);
                    self.boot(i, lose);
                }
            }
            Event::Heal(set) => {
                for i in set {
                    self.isolated.remove(&i);
                }
            }
            Event::Propose => {
                self.propose();
                let next = self.now + self.cfg.propose_every_us;
                self.at(next, Event::Propose);
            }
            Event::Read => {
                self.read();
                let next = self.now + self.cfg.read_every_us;
                self.at(next, Event::Read);
            }
            Event::EndFaults => self.end_faults(),
        }
    }

    fn group(&mut self, i: usize) -> &mut ReplicaGroup {
        self.members[i].group.as_mut().expect("a live member has a group")
    }

    fn faulty(&self) -> usize {
        let lost = (0..self.cfg.members).filter(|i| self.members[*i].lost_data && !self.cfg.rejoin_lost_data_as_voter);
        let mut s: BTreeSet<usize> = lost.collect();
        s.extend(self.down.iter().copied());
        s.extend(self.isolated.iter().copied());
        s.len()
    }

    fn fault(&mut self) {
        if self.faults_over_at.is_some() {
            return;
        }
        let next = self.now + self.rng.gen_range(self.cfg.fault_every_us / 2..=self.cfg.fault_every_us * 3 / 2);
        self.at(next, Event::Fault);
        let f = (self.cfg.members - 1) / 2;
        let c = &self.cfg;
        let total = c.crash_weight + c.partition_weight + c.data_loss_weight + c.crash_all_weight;
        let mut pick = self.rng.gen_range(0..total);
        let up: Vec<usize> = (0..self.cfg.members).filter(|i| !self.down.contains(i)).collect();
        let outage = self.rng.gen_range(100_000..2_000_000);
        if pick < c.crash_weight {
            if self.faulty() < f {
                let i = up[self.rng.gen_range(0..up.len())];
                self.crash(i);
                self.restart_later(i, self.now + outage, false);
            }
            return;
        }
        pick -= c.crash_weight;
        if pick < c.partition_weight {
            if self.faulty() < f {
                let i = up[self.rng.gen_range(0..up.len())];
                if self.isolated.insert(i) {
                    self.log(format_args!("member {i} isolated"));
                    self.stats.partitions += 1;
                    self.at(self.now + outage, Event::Heal([i].into()));
                }
            }
            return;
        }
        pick -= c.partition_weight;
        if pick < c.data_loss_weight {
            let any_lost = self.members.iter().any(|m| m.lost_data) && !self.cfg.rejoin_lost_data_as_voter;
            if self.faulty() < f && !any_lost {
                let i = up[self.rng.gen_range(0..up.len())];
                self.crash(i);
                self.stats.data_losses += 1;
                self.restart_later(i, self.now + outage, true);
            }
            return;
        }
        // Every member crashes at once (a power cut) and restarts shortly after.
        if self.down.is_empty() {
            for i in 0..self.cfg.members {
                self.crash(i);
                let back = self.now + self.rng.gen_range(10_000..500_000);
                self.restart_later(i, back, false);
            }
        }
    }

    pub fn crash(&mut self, i: usize) {
        if self.down.insert(i) {
            self.log(format_args!("member {i} crashes"));
            self.stats.crashes += 1;
            let m = &mut self.members[i];
            m.incarnation += 1; // pending syncs and ticks of the old life are void
            m.group = None;
        }
    }

    fn restart_later(&mut self, i: usize, at: Time, lose_data: bool) {
        self.restart_pending.insert(i, lose_data);
        self.at(at, Event::Restart(i, lose_data));
    }

    fn end_faults(&mut self) {
        self.faults_over_at = Some(self.now);
        let down: Vec<usize> = self.down.iter().copied().collect();
        let keep_down = if self.cfg.keep_majority_down { self.cfg.members / 2 + 1 } else { 0 };
        for i in down {
            if i >= keep_down {
                self.down.remove(&i);
                let lose = self.restart_pending.remove(&i).unwrap_or(false);
                self.boot(i, lose);
            }
        }
        for i in 0..keep_down {
            self.crash(i);
        }
        self.isolated.clear();
    }

    fn linked(&self, a: usize, b: usize) -> bool {
        !(self.isolated.contains(&a) || self.isolated.contains(&b)) || a == b
    }

    /// Takes the member's output; its messages and applies wait for the sync of its writes.
    fn pump(&mut self, i: usize) {
        let rd = self.group(i).take_ready();
        if rd.is_empty() {
            return;
        }
        // Record elections and lease reads at the moment the member decides.
        for lc in &rd.leader_changes {
            self.log(format_args!("member {i}: term {} leader {:?}", lc.term, lc.leader));
            if lc.leader == Some(ReplicaId(i as u64 + 1)) {
                self.elections.push((self.now, lc.term));
                self.stats.elections += 1;
            }
        }
        let mut rd = rd;
        let fsync = self.rng.gen_range(self.cfg.fsync_us.0..=self.cfg.fsync_us.1);
        let sync_at = if rd.persist.is_empty() { self.now } else { self.now + fsync };
        let sync_at = sync_at.max(self.members[i].last_sync_at);
        self.members[i].last_sync_at = sync_at;
        let mut sent = false;
        if self.cfg.send_before_sync {
            let msgs = std::mem::take(&mut rd.messages);
            self.send(i, msgs);
            sent = true;
        }
        let inc = self.members[i].incarnation;
        self.members[i].pending_writes += 1;
        self.at(sync_at, Event::Synced(i, inc, Box::new(rd), sent));
    }

    fn send(&mut self, from: usize, msgs: Vec<WireMessage>) {
        for m in msgs {
            let to = (m.to.0 - 1) as usize;
            let bytes = m.encode();
            self.stats.max_frame_bytes = self.stats.max_frame_bytes.max(bytes.len());
            if matches!(m.body, WireBody::SnapshotChunk(_)) {
                self.stats.chunks += 1;
            }
            if !self.linked(from, to) || self.rng.gen_bool(self.cfg.loss) {
                continue;
            }
            let copies = if self.rng.gen_bool(self.cfg.duplication) { 2 } else { 1 };
            for _ in 0..copies {
                let delay = self.rng.gen_range(self.cfg.latency_us.0..=self.cfg.latency_us.1);
                self.at(self.now + delay, Event::Deliver(to, bytes.clone()));
            }
        }
    }

    /// The member's writes are durable: send, apply, serve reads, snapshot.
    fn synced(&mut self, i: usize, rd: Ready, already_sent: bool) {
        self.members[i].pending_writes -= 1;
        let disk = &mut self.members[i].disk.synced;
        if let Some(meta) = rd.persist.snapshot {
            let data = rd.apply.iter().find_map(|a| match a {
                Apply::Snapshot { meta: m, data } if *m == meta => Some(data.clone()),
                _ => None,
            });
            disk.snapshot = Some((meta, data.expect("an installed snapshot comes with its data")));
            disk.entries.clear();
        }
        if let Some(first) = rd.persist.entries.first() {
            let first = first.index;
            disk.entries.retain(|e| e.index < first);
            disk.entries.extend(rd.persist.entries.iter().cloned());
        }
        if let Some(hs) = rd.persist.hard_state {
            disk.hard_state = hs;
        }
        if !already_sent {
            self.send(i, rd.messages);
        }
        for a in rd.apply {
            self.apply(i, a);
        }
        for r in rd.reads {
            self.members[i].reads_ready.push((r.id, r.index));
        }
        for id in rd.reads_failed {
            self.members[i].reads.remove(&id);
        }
        self.serve_reads(i);
        if rd.snapshot_wanted.is_some() {
            let m = &mut self.members[i];
            let index = m.sm.applied;
            let data = postcard::to_stdvec(&m.sm).expect("state serializes");
            let group = m.group.as_mut().expect("live");
            if let Ok(meta) = group.snapshot_taken(index, data.clone()) {
                let disk = &mut m.disk.synced;
                disk.snapshot = Some((meta, data));
                disk.entries.retain(|e| e.index > index);
            }
        }
        self.pump(i);
    }

    fn apply(&mut self, i: usize, a: Apply) {
        match a {
            Apply::Entry(e) => {
                let m = &mut self.members[i];
                if e.index != m.sm.applied + 1 {
                    let v = format!("member {i} applied {} after {}", e.index, m.sm.applied);
                    self.violation(v);
                    return;
                }
                m.sm.applied = e.index;
                if e.data.is_empty() {
                    return;
                }
                let cmd: Command = postcard::from_bytes(&e.data).expect("own command decodes");
                m.sm.cmds.push((e.index, cmd.id));
                m.sm.padding.extend_from_slice(&cmd.padding);
                if let Some((term, id)) = m.proposals.remove(&e.index) {
                    if term == e.term && id == cmd.id && !self.cfg.ack_before_commit {
                        self.ack(id, e.index);
                    }
                }
                self.trace = fnv(self.trace, &e.index.to_le_bytes());
                match self.history.get(&e.index) {
                    None => {
                        self.history.insert(e.index, cmd.id);
                    }
                    Some(h) if *h != cmd.id => {
                        let v = format!(
                            "agreement: member {i} applied command {} at {} where another applied {h}",
                            cmd.id, e.index
                        );
                        self.violation(v);
                    }
                    Some(_) => {}
                }
            }
            Apply::Snapshot { meta, data } => {
                let sm: Commands = match postcard::from_bytes(&data) {
                    Ok(sm) => sm,
                    Err(e) => {
                        self.violation(format!("member {i} got a snapshot that does not decode: {e}"));
                        return;
                    }
                };
                self.stats.snapshots_installed += 1;
                if sm.applied != meta.index {
                    self.violation(format!("snapshot at {} holds state applied to {}", meta.index, sm.applied));
                }
                for (index, id) in &sm.cmds {
                    if let Some(h) = self.history.get(index) {
                        if h != id {
                            let v = format!(
                                "agreement: snapshot to member {i} holds {id} at {index} where another applied {h}"
                            );
                            self.violation(v);
                        }
                    }
                }
                self.members[i].sm = sm;
            }
        }
    }

    fn ack(&mut self, id: u64, index: LogIndex) {
        self.acked.insert(id, (index, self.now));
        self.stats.acked += 1;
        let top = self.acked_frontier.last().expect("starts with (0, 0)").1;
        if index > top {
            self.acked_frontier.push((self.now, index));
        }
    }

    /// The highest index acknowledged at or before `t`.
    fn acked_by(&self, t: Time) -> LogIndex {
        let k = self.acked_frontier.partition_point(|(at, _)| *at <= t);
        self.acked_frontier[k - 1].1
    }

    fn leader_guess(&mut self) -> Option<usize> {
        let live: Vec<usize> = (0..self.cfg.members).filter(|i| !self.down.contains(i)).collect();
        // The member with the highest term that believes it leads (a client's redirect would
        // get there); sometimes a random member, to exercise NotLeader.
        if live.is_empty() {
            return None;
        }
        if self.rng.gen_bool(0.1) {
            return Some(live[self.rng.gen_range(0..live.len())]);
        }
        live.into_iter()
            .filter(|i| self.members[*i].group.as_ref().is_some_and(|g| g.role() == Role::Leader))
            .max_by_key(|i| (self.members[*i].group.as_ref().map(|g| g.term()), Reverse(*i)))
    }

    fn propose(&mut self) {
        let Some(i) = self.leader_guess() else { return };
        let id = self.next_cmd;
        let padding = vec![(id % 251) as u8; self.cfg.payload_bytes];
        let data = postcard::to_stdvec(&Command { id, padding }).expect("serializes");
        match self.group(i).propose(data) {
            Ok(at) => {
                self.next_cmd += 1;
                self.members[i].proposals.insert(at.index, (at.term, id));
                if self.cfg.ack_before_commit {
                    self.ack(id, at.index);
                }
            }
            Err(e) => assert!(e.is_retryable(), "seed {}: proposal refused for good: {e}", self.seed),
        }
        self.pump(i);
    }

    fn read(&mut self) {
        let Some(i) = self.leader_guess() else { return };
        let id = self.next_read;
        self.next_read += 1;
        let lease = self.group(i).holds_lease();
        let term = self.group(i).term();
        if self.group(i).read(id).is_ok() {
            let need = self.acked_by(self.now);
            self.members[i].reads.insert(id, (self.now, need));
            if lease && self.cfg.read_mode == ReadMode::Lease {
                self.stats.lease_reads += 1;
                if let Some((t, newer)) = self.elections.iter().find(|(_, t)| *t > term) {
                    let v = format!("lease: member {i} serves a lease read in term {term} after a leader of term {newer} was elected at {} ms", t / 1000);
                    self.violation(v);
                }
            }
        }
        self.pump(i);
    }

    /// Leases (§6.4.1), whether or not a read comes: a member may hold a lease in term T only
    /// while no leader of a later term has been elected.
    fn check_lease(&mut self, i: usize) {
        if self.cfg.read_mode != ReadMode::Lease {
            return;
        }
        let g = self.members[i].group.as_ref().expect("live");
        if !g.holds_lease() {
            return;
        }
        let term = g.term();
        if let Some((t, newer)) = self.elections.iter().find(|(_, t)| *t > term).copied() {
            let v = format!(
                "lease: member {i} holds a lease in term {term} after a leader of term {newer} was elected at {} ms",
                t / 1000
            );
            self.violation(v);
        }
    }

    fn serve_reads(&mut self, i: usize) {
        let m = &mut self.members[i];
        let applied = m.sm.applied;
        let mut served = Vec::new();
        m.reads_ready.retain(|(id, index)| {
            if *index <= applied {
                served.push(*id);
                false
            } else {
                true
            }
        });
        for id in served {
            let Some((asked, need)) = self.members[i].reads.remove(&id) else { continue };
            self.stats.reads_served += 1;
            if applied < need {
                let v = format!(
                    "linearizability: member {i} served read {id} (asked at {} ms) at index {applied}, but index {need} was acknowledged before it was asked",
                    asked / 1000
                );
                self.violation(v);
            }
        }
    }

    pub fn check_end(&mut self) {
        // Durability: every acknowledged command sits where it was acknowledged.
        let acked: Vec<(u64, LogIndex)> = self.acked.iter().map(|(id, (ix, _))| (*id, *ix)).collect();
        for (id, index) in &acked {
            match self.history.get(index) {
                Some(h) if h == id => {}
                other => {
                    let v = format!(
                        "durability: command {id} acknowledged at index {index}, but the log holds {other:?} there"
                    );
                    self.violation(v);
                }
            }
        }
        // Every live member converged on the same commands.
        let up: Vec<usize> = (0..self.cfg.members).filter(|i| !self.down.contains(i)).collect();
        let top = up.iter().map(|i| self.members[*i].sm.applied).max().unwrap_or(0);
        let mut found = Vec::new();
        for i in up {
            let sm = &self.members[i].sm;
            if sm.applied + 64 < top {
                found.push(format!("member {i} applied only {} of {top} after the heal", sm.applied));
            }
            let applied = sm.applied;
            let missing =
                acked.iter().filter(|(_, ix)| *ix <= applied).filter(|(id, ix)| !sm.cmds.contains(&(*ix, *id))).count();
            if missing > 0 {
                found.push(format!("durability: member {i} lacks {missing} acknowledged commands"));
            }
        }
        for v in found {
            self.violation(v);
        }
    }

    pub fn members_stats(&self) -> Vec<Option<Stats>> {
        self.members.iter().map(|m| m.group.as_ref().map(|g| g.stats())).collect()
    }

    pub fn applied(&self, i: usize) -> LogIndex {
        self.members[i].sm.applied
    }

    pub fn leader(&self) -> Option<usize> {
        (0..self.cfg.members).find(|i| self.members[*i].group.as_ref().is_some_and(|g| g.role() == Role::Leader))
    }

    pub fn restart(&mut self, i: usize) {
        if self.down.remove(&i) {
            self.restart_pending.remove(&i);
            self.boot(i, false);
        }
    }

    pub fn heal(&mut self, i: usize) {
        self.isolated.remove(&i);
    }

    pub fn restart_with_data_loss(&mut self, i: usize) {
        if self.down.remove(&i) {
            self.restart_pending.remove(&i);
            self.stats.data_losses += 1;
            self.boot(i, true);
        }
    }

    pub fn rates(&self) -> Vec<f64> {
        self.members.iter().map(|m| (m.clock_rate * 100.0).round() / 100.0).collect()
    }

    /// Asks the leader to hand its leadership to `to`.
    pub fn transfer(&mut self, to: usize) {
        let l = self.leader().expect("a leader");
        self.group(l).transfer_leadership(ReplicaId(to as u64 + 1)).expect("transfer starts");
        self.pump(l);
    }

    pub fn isolate(&mut self, i: usize) {
        self.isolated.insert(i);
    }

    pub fn heal_all(&mut self) {
        self.isolated.clear();
    }

    pub fn member(&self, i: usize) -> Option<&ReplicaGroup> {
        self.members[i].group.as_ref()
    }

    pub fn report(&self) -> String {
        format!("{:?}; members: {:?}; violations: {:#?}", self.stats, self.members_stats(), self.violations)
    }
}

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The seeds to run: `REPLICATION_SEED=s` replays one seed; `REPLICATION_SEEDS=n` widens the
/// sweep (default `default_count`).
pub fn seeds(default_count: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("REPLICATION_SEED") {
        return vec![s.parse().expect("REPLICATION_SEED is a number")];
    }
    let n = std::env::var("REPLICATION_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default_count);
    (0..n).collect()
}

/// Runs `cfg` for each seed; panics on the first violation with the seed and the replay line.
pub fn sweep(test: &str, cfg: &SimConfig, count: u64) -> Vec<Sim> {
    let mut runs = Vec::new();
    for seed in seeds(count) {
        let sim = Sim::new(seed, cfg.clone()).run();
        if !sim.violations.is_empty() {
            panic!(
                "seed {seed} failed: {}\nreplay: REPLICATION_SEED={seed} cargo test -p litmus-replication --test sim {test}",
                sim.report()
            );
        }
        runs.push(sim);
    }
    runs
}

/// Runs `cfg` (a rule broken on purpose) until a seed shows a violation; returns it.
pub fn first_failure(cfg: &SimConfig, count: u64) -> Option<(u64, Vec<String>)> {
    (0..count).find_map(|seed| {
        let sim = Sim::new(seed, cfg.clone()).run();
        (!sim.violations.is_empty()).then_some((seed, sim.violations))
    })
}
