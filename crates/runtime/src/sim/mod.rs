//! # The deterministic simulator
//!
//! One thread, virtual time, one seeded RNG: the same seed replays the same run bit for bit
//! (TigerBeetle's VOPR, FoundationDB's simulation). Every role is the same [`Machine`] the real
//! runtimes drive; the simulator supplies what they would get from the world:
//!
//! * **Network** ([`NetConfig`]): per-message latency drawn from a uniform range (so messages on
//!   one link reorder), loss, duplication, and partitions between groups of nodes that heal
//!   later. Messages inside one node are delivered in order after a microsecond.
//! * **Disks**: each machine's log is a list of records with a synced prefix. A sync completes
//!   `fsync_latency` after it is requested and covers every record appended before it (group
//!   commit). Messages wait for their records ([`Machine`]'s persist-before-send rule).
//! * **Crashes**: a crashed node loses its machines and every unsynced record; it restarts later
//!   and recovers from its snapshot and synced records.
//! * **CPU** (optional, [`SimConfig::cpu`]): each node has K cores and every machine
//!   step occupies one for a cost measured by `litmus calibrate` ([`cpu`], [`crate::cost`]);
//!   queueing on busy cores shows in virtual time. Off by default: the fault-injection runs
//!   keep their meaning (`tests/sim_cpu.rs` runs them with it on as well).
//! * **Clocks**: each node sees virtual time plus a fixed skew.
//! * **Clients** live on their own host, never crash, and are driven by a [`SimDriver`] that
//!   picks each client's next request and records what came back. After the workload phase the
//!   simulator heals every fault, lets outstanding requests finish (up to the liveness bound,
//!   also those whose client gave up: a coordinator may still commit them), and hands the
//!   driver a [`Simulator`] handle to check its invariants ([`SimDriver::verify`]).
//! * **Liveness**, checked for every workload: a client's own timeout ends every call, so
//!   that alone proves nothing. The simulator also tracks each request until its coordinator
//!   *answers* it (even after the client gave up): once the faults heal, every request a live
//!   coordinator received must be answered within [`SimConfig::liveness_bound`] (default
//!   [`LIVENESS_BOUND`]) of the later of its
//!   sending and the heal — or the run fails, naming the request. Exempt: requests or answers
//!   the network lost, and requests whose coordinator's node crashed after receiving them
//!   (the coordinator forgot them; the client's timeout reports "outcome unknown").
//!   It catches, for example, a locking-engine coordinator that does not resend a lost
//!   one-phase commit or prepare: its transaction waits forever and its client is never
//!   answered (`litmus sim --seed 0 --engine acid --faults`).
//! * **Scripted faults** on top of the random ones: [`Simulator::schedule_outage`] (a node
//!   down at a time) and [`Simulator::crash_on_delivery`] (a node crashes just after it
//!   receives a matching message — e.g. the oracle's node while a commit is in flight).
//!
//! Determinism rules kept here: all maps are `BTreeMap`s, every random draw comes from the one
//! `ChaCha8Rng`, events at equal times are ordered by a sequence number, and the run's trace
//! hash (FNV over every delivered message) is printed so two runs can be compared.
//!
//! Hosting async libraries (not built yet): replicating partitions with openraft, whose nodes are
//! async tasks. The plan is an adapter machine that owns a current-thread tokio runtime with a
//! paused clock, advanced to the simulator's virtual time before each poll, with openraft's
//! network and storage traits implemented over the simulator's messages and disks. Nothing in
//! the event loop assumes machines are hand-written.

pub mod chains;
pub mod cpu;
pub mod minibank;
pub mod workload;

pub use cpu::CpuModel;

use crate::due::Due;
use crate::topology::{ClusterSpec, Host};
use litmus_core::{ClientId, Error, NodeId, Time};
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::{Addr, ClientSession, Effects, Envelope, Input, Machine, Message};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::time::Duration;

mod checks;
mod faults;
#[cfg(test)]
mod tests;

/// A machine's simulated log is snapshotted (at a sync) once it holds this many records.
pub const SIM_SNAPSHOT_EVERY_RECORDS: usize = 512;
/// Bound on simulated events per run, so a livelocked protocol fails instead of hanging.
pub const SIM_EVENTS_MAX: u64 = 50_000_000;
/// Once the faults heal, every request a live coordinator received is answered within this
/// long (see the module doc, "Liveness"): the coordinator's stall timeout (10 s, after which a
/// transaction whose messages were lost is aborted and answered — `nocc` and the locking
/// engines do not resend) plus 2 s. Engines that resend everything can be held to less (the
/// ycsb-t workload holds omid to 5 s).
pub const LIVENESS_BOUND: Duration = Duration::from_secs(12);
const _: () = assert!(litmus_protocol::coordinator::TXN_STALL_TIMEOUT.as_nanos() < LIVENESS_BOUND.as_nanos());

#[derive(Clone, Debug)]
pub struct NetConfig {
    pub latency_min: Duration,
    pub latency_max: Duration,
    /// Probability a message between hosts is lost.
    pub loss: f64,
    /// Probability a message between hosts is delivered twice.
    pub duplicate: f64,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            latency_min: Duration::from_micros(100),
            latency_max: Duration::from_micros(900),
            loss: 0.0,
            duplicate: 0.0,
        }
    }
}

#[derive(Clone, Debug)]
pub struct FaultConfig {
    /// How often the fault injector rolls its dice.
    pub period: Duration,
    /// Probability, per period, of crashing a random node that is up.
    pub crash: f64,
    /// Probability, per period, of partitioning the nodes in two (if none is active).
    pub partition: f64,
    /// How long a crashed node stays down, or a partition lasts: uniform in this range.
    pub outage_min: Duration,
    pub outage_max: Duration,
    /// With three replicas or more: one node, picked at random, crashes for good while a
    /// message to one of its coordinators is delivered, at a random time in the workload phase,
    /// and is never restarted (not even by the heal before the checks). Its clients fail over
    /// to other nodes' coordinators.
    pub lose_a_node: bool,
}

impl FaultConfig {
    pub fn none() -> Self {
        FaultConfig {
            period: Duration::from_millis(100),
            crash: 0.0,
            partition: 0.0,
            outage_min: Duration::from_millis(50),
            outage_max: Duration::from_millis(300),
            lose_a_node: false,
        }
    }
}

#[derive(Clone, Debug)]
pub struct SimConfig {
    pub seed: u64,
    pub net: NetConfig,
    pub faults: FaultConfig,
    /// Each node's clock is off by up to this much (either way).
    pub clock_skew_max: Duration,
    pub fsync_latency: Duration,
    pub clients: usize,
    /// Length of the workload phase (virtual time).
    pub duration: Duration,
    pub request_timeout: Duration,
    /// CPU time one message costs the node that receives it: a node handles one message at a
    /// time, so a storm of requests queues up (as on a real, loaded machine). Zero: free.
    /// Ignored when [`SimConfig::cpu`] is set.
    pub step_cost: Duration,
    /// Charge every machine step CPU time from a measured cost table on `K` cores per node
    /// (see [`CpuModel`]). `None` (the default): steps are free, as the fault-injection
    /// simulations have always run.
    pub cpu: Option<CpuModel>,
    /// Bound on events per run (default [`SIM_EVENTS_MAX`]); large simulated benchmarks raise it.
    pub events_max: u64,
    /// Keep every logged record for recovery (the default). A run without crashes (a
    /// simulated benchmark) may drop them: syncs still take their latency and messages still
    /// wait for them, but nothing is stored and machines are never snapshotted.
    pub keep_logs: bool,
    /// The trace hash covers every delivered message whole (the default); `false` hashes only
    /// when and between whom (encoding every payload is most of a large benchmark's cost).
    pub hash_payloads: bool,
    /// See the module doc, "Liveness".
    pub liveness_bound: Duration,
    /// Print every delivered and dropped message and every fault to stdout (`litmus sim
    /// --trace`): the message-level trace of a seed, for replaying a failure by eye.
    pub trace: bool,
    /// Check machines' internal invariants (e.g. the lock manager's) after every
    /// `invariant_check_every`-th step (1: every step, the default; 0: never); the first
    /// violation fails the run. Workloads with large lock tables (TPC-C) check a sample: the
    /// lock manager's check is quadratic in its entries.
    pub invariant_check_every: u64,
    /// The node whose coordinator client `i` attaches to, for the first `client_nodes.len()`
    /// clients (a benchmark client routed to its home partition's node); the others, and the
    /// verifier, attach round robin ([`crate::topology::Topology::coordinator_for`]).
    pub client_nodes: Vec<NodeId>,
}

impl SimConfig {
    pub fn new(seed: u64) -> Self {
        SimConfig {
            seed,
            net: NetConfig::default(),
            faults: FaultConfig::none(),
            clock_skew_max: Duration::from_millis(5),
            fsync_latency: Duration::from_micros(500),
            clients: 4,
            duration: Duration::from_secs(2),
            request_timeout: Duration::from_millis(500),
            step_cost: Duration::ZERO,
            cpu: None,
            events_max: SIM_EVENTS_MAX,
            hash_payloads: true,
            keep_logs: true,
            liveness_bound: LIVENESS_BOUND,
            trace: false,
            invariant_check_every: 1,
            client_nodes: Vec::new(),
        }
    }

    /// Every fault on: loss, duplication, reordering, crashes, partitions.
    pub fn with_faults(mut self) -> Self {
        self.net.loss = 0.01;
        self.net.duplicate = 0.01;
        self.faults = FaultConfig { crash: 0.15, partition: 0.1, lose_a_node: true, ..FaultConfig::none() };
        self
    }
}

/// Picks requests for the simulated clients and checks the outcome.
pub trait SimDriver {
    /// The next request of an idle client, or `None` to leave it idle for the rest of the run.
    fn next(&mut self, client: usize, rng: &mut ChaCha8Rng) -> Option<RequestBody>;
    /// What came back for a request (a timeout is `Unavailable { outcome_unknown: true }`).
    fn done(&mut self, client: usize, request: &RequestBody, result: &Result<ResponseBody, Error>);
    /// After the run, with every fault healed: check invariants (may issue requests).
    fn verify(&mut self, sim: &mut Simulator) -> Result<(), String>;
    /// [`SimDriver::next`] told the virtual time (drivers that measure latency use this).
    fn next_at(&mut self, client: usize, rng: &mut ChaCha8Rng, now: Time) -> Option<RequestBody> {
        let _ = now;
        self.next(client, rng)
    }
    /// [`SimDriver::done`] told the virtual time.
    fn done_at(&mut self, client: usize, request: &RequestBody, result: &Result<ResponseBody, Error>, now: Time) {
        let _ = now;
        self.done(client, request, result)
    }
    /// How long an idle client waits before its next request (a retry's backoff); zero: none.
    fn pause(&mut self, client: usize, now: Time) -> Duration {
        let _ = (client, now);
        Duration::ZERO
    }
}

/// What a run did, printed by `litmus sim`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimReport {
    pub seed: u64,
    pub virtual_time: Time,
    pub events: u64,
    pub delivered: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub crashes: u64,
    pub partitions: u64,
    pub requests_ok: u64,
    pub requests_failed: u64,
    /// FNV-1a over every delivered message: equal for equal seeds.
    pub trace_hash: u64,
    /// Requests a live coordinator left unanswered past the liveness bound (the run fails).
    pub unanswered: u64,
    /// The node lost for good ([`FaultConfig::lose_a_node`]) and when.
    pub lost_node: Option<(NodeId, Time)>,
    /// The groups the lost node led, and how long after the loss a member elsewhere first
    /// served each (a coordinator's new leader restarts it then: its participants hear its
    /// decisions and its new epoch within a round trip).
    pub takeovers: Vec<(litmus_protocol::GroupId, Duration)>,
    /// Core time charged over all nodes, nanoseconds ([`SimConfig::cpu`]; zero without it).
    pub cpu_busy_ns: u64,
}

impl std::fmt::Display for SimReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} | virtual time {} | events {} | delivered {} dropped {} duplicated {} | crashes {} partitions {} | requests ok {} failed {} | trace {:016x}",
            self.seed,
            self.virtual_time,
            self.events,
            self.delivered,
            self.dropped,
            self.duplicated,
            self.crashes,
            self.partitions,
            self.requests_ok,
            self.requests_failed,
            self.trace_hash
        )?;
        if self.unanswered > 0 {
            write!(f, " | UNANSWERED {}", self.unanswered)?;
        }
        if let Some((node, at)) = self.lost_node {
            let slowest = self.takeovers.iter().map(|t| t.1).max().unwrap_or_default();
            write!(
                f,
                " | lost node {} at {at}: {} groups it led served elsewhere within {:.0} ms",
                node.0,
                self.takeovers.len(),
                slowest.as_secs_f64() * 1e3
            )?;
        }
        Ok(())
    }
}

#[derive(Debug)]
enum Event {
    /// A message arriving, and the host it left from (a replica's partition sends as
    /// [`Addr::Partition`], which names its home, not necessarily the node it runs on).
    Deliver(Host, Envelope),
    Tick(NodeId),
    ClientTick,
    Sync {
        node: NodeId,
        incarnation: u64,
    },
    Crash(NodeId),
    /// A scripted crash: the node stays down until `until`.
    Outage {
        node: NodeId,
        until: Time,
    },
    Restart(NodeId),
    /// A scripted network partition: the node cut off from every other one.
    Isolate(NodeId),
    /// A scripted loss of the node's data directory: it crashes, its disks are wiped, and
    /// its replicas rejoin without a vote when it restarts.
    LoseData(NodeId),
    Heal,
    FaultCheck,
    /// A core of the node finished its step ([`SimConfig::cpu`]): run what waits.
    CoreFree {
        node: NodeId,
        incarnation: u64,
    },
    /// A message a step emitted, leaving when the step ends ([`SimConfig::cpu`]).
    Send {
        node: NodeId,
        incarnation: u64,
        env: Envelope,
    },
    /// A client's pause ([`SimDriver::pause`]) is over: it may issue its next request.
    ClientIssue(usize),
}

#[derive(Default)]
struct SimDisk {
    snapshot: Option<Vec<u8>>,
    records: Vec<Vec<u8>>,
    /// Records counted but not kept ([`SimConfig::keep_logs`] off): the log's logical length
    /// is `discarded + records.len()`, and `synced` counts in the same terms.
    discarded: usize,
    synced: usize,
    /// The log length up to which barrier records reach ([`litmus_protocol::Effects::barrier`]):
    /// `send_now` messages wait for it alone.
    barrier: usize,
}

struct SimNode {
    up: bool,
    /// A scripted outage ([`Simulator::schedule_outage`]) keeps the node down until then.
    down_until: Time,
    incarnation: u64,
    skew_ns: i64,
    machines: BTreeMap<Addr, Box<dyn Machine>>,
    disks: BTreeMap<Addr, SimDisk>,
    /// Messages waiting for their machine's log to be synced up to a length, and leaving no
    /// earlier than a time (the end of the step that emitted them).
    held: Vec<(Addr, usize, Time, Envelope)>,
    sync_pending: bool,
    /// Until when the node's CPU is busy with earlier messages ([`SimConfig::step_cost`]).
    busy_until: Time,
    /// [`SimConfig::cpu`]: when each core is free, the steps waiting for one, and the time of
    /// the `CoreFree` event already scheduled.
    cores: Vec<Time>,
    runq: VecDeque<(Addr, Input)>,
    wake_at: Option<Time>,
    /// The partition leaders this node's replicas know: where its requests go.
    leaders: crate::replica::LeaderCache,
}

/// A request not answered yet by its coordinator (the liveness check).
struct Unanswered {
    sent: Time,
    node: NodeId,
    /// The incarnation, when the request was sent, of every node that may serve it: its
    /// coordinator's node, and with replication every member of the coordinator's group.
    incarnations: Vec<(NodeId, u64)>,
    what: String,
}

impl Unanswered {
    /// No node that may serve it crashed since it was sent: it must be answered.
    fn owed(&self, nodes: &[SimNode]) -> bool {
        self.incarnations.iter().all(|&(n, i)| nodes[n.0 as usize].incarnation == i)
    }
}

/// A scripted crash armed by [`Simulator::crash_on_delivery`].
struct CrashTrigger {
    node: NodeId,
    armed_at: Time,
    jitter_max: Duration,
    down_for: Duration,
    matches: Box<dyn Fn(&Envelope) -> bool + Send>,
}

struct SimClient {
    session: ClientSession,
    busy: Option<(litmus_core::RequestId, RequestBody)>,
    idle_forever: bool,
    /// Waiting out a [`SimDriver::pause`].
    pausing: bool,
}

pub struct Simulator {
    cfg: SimConfig,
    spec: ClusterSpec,
    now: Time,
    rng: ChaCha8Rng,
    queue: BinaryHeap<Due<Event>>,
    seq: u64,
    nodes: Vec<SimNode>,
    clients: Vec<SimClient>,
    /// Node pairs that cannot talk (both directions listed).
    blocked: BTreeSet<(NodeId, NodeId)>,
    faults_on: bool,
    issuing: bool,
    report: SimReport,
    /// Responses for the verification client (index `clients.len()`).
    verify_result: Option<Result<ResponseBody, Error>>,
    /// Requests their coordinators have not answered yet, by `(client, request)`.
    unanswered: BTreeMap<(u64, litmus_core::RequestId), Unanswered>,
    /// The first machine invariant violation seen (`SimConfig::invariant_check_every`).
    violation: Option<String>,
    /// Machine steps taken (for sampling invariant checks).
    steps: u64,
    /// When the faults healed (the liveness bound runs from here).
    healed_at: Option<Time>,
    trigger: Option<CrashTrigger>,
    /// [`SimConfig::cpu`]'s costs for this cluster's engine.
    costs: Option<crate::cost::CostResolver>,
    client_tick_on: bool,
    /// Replicated partitions: the newest term in which a replica of each partition served.
    served_terms: BTreeMap<litmus_protocol::GroupId, u64>,
    /// Groups the node lost for good led, not yet served elsewhere.
    awaiting_takeover: BTreeSet<litmus_protocol::GroupId>,
    /// Nodes whose data directory was lost ([`Simulator::schedule_data_loss`]).
    rejoining: BTreeSet<NodeId>,
}

impl Simulator {
    pub fn new(spec: ClusterSpec, cfg: SimConfig) -> Result<Simulator, Error> {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let mut nodes = Vec::new();
        for node in spec.topology.node_ids() {
            let skew_max = cfg.clock_skew_max.as_nanos() as i64;
            let skew_ns = if skew_max > 0 { rng.gen_range(-skew_max..=skew_max) } else { 0 };
            let mut n = SimNode {
                up: true,
                down_until: Time::ZERO,
                incarnation: 0,
                skew_ns,
                machines: BTreeMap::new(),
                disks: BTreeMap::new(),
                held: Vec::new(),
                sync_pending: false,
                busy_until: Time::ZERO,
                cores: vec![Time::ZERO; cfg.cpu.as_ref().map_or(0, |c| c.cores_per_node as usize)],
                runq: VecDeque::new(),
                wake_at: None,
                leaders: Default::default(),
            };
            for m in spec.machines_of(node) {
                n.disks.insert(m.addr(), SimDisk::default());
            }
            nodes.push(n);
        }
        let mut clients = Vec::new();
        for i in 0..=cfg.clients {
            // The extra last client is the verifier's.
            let id = ClientId(i as u64);
            let coordinator = match cfg.client_nodes.get(i) {
                Some(n) => spec.topology.coordinator_for(u64::from(n.0)),
                None => spec.topology.coordinator_for(i as u64),
            };
            clients.push(SimClient {
                session: ClientSession::new(id, coordinator, cfg.request_timeout),
                busy: None,
                idle_forever: false,
                pausing: false,
            });
        }
        let report = SimReport { seed: cfg.seed, trace_hash: 0xcbf2_9ce4_8422_2325, ..Default::default() };
        let costs = cfg.cpu.as_ref().map(|c| c.costs.resolver(spec.engine.name()));
        let mut sim = Simulator {
            cfg,
            spec,
            now: Time::ZERO,
            rng,
            queue: BinaryHeap::new(),
            seq: 0,
            nodes,
            clients,
            blocked: BTreeSet::new(),
            faults_on: false,
            issuing: false,
            report,
            verify_result: None,
            unanswered: BTreeMap::new(),
            healed_at: None,
            violation: None,
            steps: 0,
            trigger: None,
            costs,
            client_tick_on: false,
            served_terms: BTreeMap::new(),
            awaiting_takeover: BTreeSet::new(),
            rejoining: BTreeSet::new(),
        };
        for node in sim.spec.topology.node_ids() {
            sim.start_node(node)?;
        }
        Ok(sim)
    }

    pub fn now(&self) -> Time {
        self.now
    }

    /// The coordinator client `client` sends its requests to ([`SimConfig::client_nodes`]).
    pub fn coordinator_of(&self, client: usize) -> Option<Addr> {
        self.clients.get(client).map(|c| c.session.coordinator())
    }

    /// Scripts an outage on top of the random faults: `node` crashes `after` from now and stays
    /// down for `down_for` (a random restart in between is ignored; healing at the end of the
    /// workload phase still restarts it).
    pub fn schedule_outage(&mut self, node: NodeId, after: Duration, down_for: Duration) {
        let until = self.now + after + down_for;
        self.schedule(after, Event::Outage { node, until });
        self.schedule(after + down_for, Event::Restart(node));
    }

    /// Scripts the loss of `node`'s data directory `after` from now: the node crashes, every
    /// record and snapshot on its disks is gone, and `down_for` later it restarts empty, its
    /// replicas rejoining their groups without a vote (`litmus server
    /// --rejoin-after-data-loss`).
    pub fn schedule_data_loss(&mut self, node: NodeId, after: Duration, down_for: Duration) {
        self.schedule(after, Event::LoseData(node));
        let until = self.now + after + down_for;
        self.schedule(after, Event::Outage { node, until });
        self.schedule(after + down_for, Event::Restart(node));
    }

    /// Scripts a network partition on top of the random faults: `node` is cut off from every
    /// other node `after` from now, for `lasts` (the network then heals whole).
    pub fn schedule_isolation(&mut self, node: NodeId, after: Duration, lasts: Duration) {
        self.schedule(after, Event::Isolate(node));
        self.schedule(after + lasts, Event::Heal);
    }

    /// Scripts a crash "while something is in flight": from `after` on, the first message
    /// delivered to `node` that `matches` crashes the node up to `jitter_max` later (so the
    /// message's records may or may not be synced, its answer sent or held); it stays down for
    /// `down_for` (healing at the end of the workload phase still restarts it).
    pub fn crash_on_delivery(
        &mut self,
        node: NodeId,
        after: Duration,
        jitter_max: Duration,
        down_for: Duration,
        matches: Box<dyn Fn(&Envelope) -> bool + Send>,
    ) {
        self.trigger = Some(CrashTrigger { node, armed_at: self.now + after, jitter_max, down_for, matches });
    }

    /// [`Simulator::crash_on_delivery`], the node never restarted: it is lost for good, and
    /// the checks run without it.
    pub fn lose_on_delivery(
        &mut self,
        node: NodeId,
        after: Duration,
        jitter_max: Duration,
        matches: Box<dyn Fn(&Envelope) -> bool + Send>,
    ) {
        self.crash_on_delivery(node, after, jitter_max, Duration::MAX, matches);
    }

    /// Whether `node` was lost for good ([`FaultConfig::lose_a_node`]).
    pub fn lost_for_good(&self, node: NodeId) -> bool {
        self.nodes[node.0 as usize].down_until == Time(u64::MAX)
    }

    /// The machine at `addr`, if its node is up (for checks that inspect state).
    /// With replicated partitions, [`Addr::Partition`] names the replica on the partition's home.
    pub fn machine(&self, addr: Addr) -> Option<&dyn Machine> {
        let addr = self.spec.topology.machine_addr(addr);
        self.nodes.iter().filter(|n| n.up).find_map(|n| n.machines.get(&addr)).map(|m| m.as_ref())
    }

    fn schedule(&mut self, after: Duration, event: Event) {
        self.seq += 1;
        self.queue.push(Due { at: self.now + after, seq: self.seq, item: event });
    }

    fn node_now(&self, node: NodeId) -> Time {
        let skew = self.nodes[node.0 as usize].skew_ns;
        Time((self.now.0 as i64 + skew).max(0) as u64)
    }

    fn start_node(&mut self, node: NodeId) -> Result<(), Error> {
        let machines = self.spec.machines_of_node(node, self.rejoining.contains(&node));
        let n = &mut self.nodes[node.0 as usize];
        n.machines.clear();
        for mut m in machines {
            let disk = n.disks.entry(m.addr()).or_default();
            m.recover(disk.snapshot.as_deref(), &disk.records)?;
            if !self.cfg.keep_logs {
                // Nothing is stored, so nothing is ever snapshotted (a crash-free benchmark).
                m.never_snapshotted();
            }
            n.machines.insert(m.addr(), m);
        }
        n.up = true;
        let tick = Duration::from_millis(litmus_protocol::machine::TICK_INTERVAL_MS);
        let jitter = Duration::from_micros(self.rng.gen_range(0..1000));
        self.schedule(tick + jitter, Event::Tick(node));
        Ok(())
    }

    /// Runs the workload phase, heals every fault, drains, then lets the driver verify.
    pub fn run(&mut self, driver: &mut dyn SimDriver) -> Result<SimReport, String> {
        let fail = |e: Error| format!("simulator: {e}");
        self.faults_on = true;
        self.issuing = true;
        self.schedule(self.cfg.faults.period, Event::FaultCheck);
        if self.cfg.faults.lose_a_node && self.spec.topology.replicas >= 3 && self.trigger.is_none() {
            // Mid-transaction: as a message reaches one of the victim's coordinators.
            let victim = NodeId(self.rng.gen_range(0..self.spec.topology.nodes));
            let after = self.cfg.duration.mul_f64(self.rng.gen_range(0.1..0.6));
            let to_coordinator = |env: &Envelope| {
                matches!(env.to, Addr::Coordinator(_) | Addr::Replica(litmus_protocol::GroupId::Coordinator(_), _))
            };
            self.lose_on_delivery(victim, after, Duration::from_millis(2), Box::new(to_coordinator));
        }
        self.start_client_ticks();
        for c in 0..self.cfg.clients {
            self.issue(c, driver);
        }
        let end = self.now + self.cfg.duration;
        self.run_until(end, driver).map_err(fail)?;
        // Heal: no new requests, no new faults, everyone back up and connected.
        self.issuing = false;
        self.faults_on = false;
        self.trigger = None;
        self.heal_all().map_err(fail)?;
        for c in 0..self.clients.len() {
            self.fail_over_if_down(c);
        }
        self.healed_at = Some(self.now);
        let drain_end = self.now + self.cfg.request_timeout * 2 + Duration::from_millis(100);
        self.run_until(drain_end, driver).map_err(fail)?;
        // Quiescence: the checks read in several transactions (rows, then a log), so a
        // workload transaction still inside a coordinator (its client gave up on it) would
        // commit between them. Wait for every such request, up to the liveness bound (past
        // it, the liveness check below names the request): one that no member of its
        // coordinator's group crashed since it was sent, and, crash or not, one that a live node
        // or the network still holds (a member of a replicated coordinator's group keeps a
        // request it parked through another member's crash, and forwards it to the next
        // leader, which runs it).
        let quiet_by = self.now.max(self.healed_at.unwrap_or(self.now) + self.cfg.liveness_bound);
        while self.workload_request_in_flight() && self.now < quiet_by {
            let step_end = (self.now + Duration::from_millis(10)).min(quiet_by);
            self.run_until(step_end, driver).map_err(fail)?;
        }
        self.report.virtual_time = self.now;
        if let Some(v) = self.violation.take() {
            return Err(format!("invariant violated: {v}\n     run so far: {}", self.report));
        }
        let verdict = driver.verify(self);
        self.report.virtual_time = self.now;
        verdict.map_err(|e| format!("{e}\n     run so far: {}", self.report))?;
        // Liveness: let every request still out run into its bound, then none may be left.
        self.idle(self.cfg.liveness_bound).map_err(fail)?;
        self.report.virtual_time = self.now;
        if let Err(e) = self.check_liveness() {
            return Err(format!("{e}\n     run so far: {}", self.report));
        }
        if let Some(v) = self.violation.take() {
            return Err(format!("invariant violated: {v}\n     run so far: {}", self.report));
        }
        if let Err(e) = self.check_replicas_agree() {
            return Err(format!("{e}\n     run so far: {}", self.report));
        }
        Ok(self.report.clone())
    }

    /// Whether a workload client's request (not the verification client's) may still run: the
    /// check of [`Simulator::run`] waits for none.
    fn workload_request_in_flight(&self) -> bool {
        let verifier = (self.clients.len() - 1) as u64;
        self.unanswered
            .iter()
            .any(|(&(client, id), u)| client != verifier && (u.owed(&self.nodes) || self.holds_request(client, id)))
    }

    /// Whether a copy of `client`'s request `id` is still somewhere it may run from: on the
    /// network, waiting on a live node (for a sync or a core), or in one of its machines (a
    /// replica that parked it, a coordinator that runs it, an answer a replica owes).
    fn holds_request(&self, client: u64, id: litmus_core::RequestId) -> bool {
        let from = Addr::Client(ClientId(client));
        let is_it = |env: &Envelope| env.from == from && matches!(&env.msg, Message::ClientRequest(r) if r.id == id);
        let in_network = self.queue.iter().any(|d| match &d.item {
            Event::Deliver(_, env) | Event::Send { env, .. } => is_it(env),
            _ => false,
        });
        in_network
            || self.nodes.iter().filter(|n| n.up).any(|n| {
                n.held.iter().any(|(_, _, _, env)| is_it(env))
                    || n.runq.iter().any(|(_, input)| matches!(input, Input::Message(env) if is_it(env)))
                    || n.machines.values().any(|m| machine_holds_request(m.as_ref(), from, id))
            })
    }

    /// Notes the groups a node lost for good leads, to time their takeover.
    fn note_loss(&mut self, node: NodeId) {
        let led = self.nodes[node.0 as usize]
            .machines
            .values()
            .filter_map(|m| m.as_any().and_then(|a| a.downcast_ref::<crate::replica::Replica>()))
            .filter(|r| r.is_leader())
            .map(|r| r.id())
            .collect();
        self.report.lost_node = Some((node, self.now));
        self.awaiting_takeover = led;
    }

    /// A client whose coordinator's node is down reconnects to the next node that is up, as a
    /// real client's connection breaks and it dials the next address.
    fn fail_over_if_down(&mut self, c: usize) {
        let Addr::Coordinator(home) = self.clients[c].session.coordinator() else { return };
        if self.nodes[home.0 as usize].up {
            return;
        }
        let n = self.spec.topology.nodes;
        let next = (1..n).map(|i| NodeId((home.0 + i) % n)).find(|o| self.nodes[o.0 as usize].up);
        if let Some(next) = next {
            self.trace_line(|| format!("client {c} fails over from node {} to node {}", home.0, next.0));
            self.clients[c].session.fail_over(Addr::Coordinator(next));
        }
    }

    /// Starts tracking a request for the liveness check.
    fn track(&mut self, client: usize, id: litmus_core::RequestId, env: &Envelope, body: &RequestBody) {
        let Host::Node(node) = self.spec.topology.host_of(env.to) else { return };
        let what = match body {
            RequestBody::Call { procedure, .. } => format!("call {procedure}"),
            other => format!("{other:?}").chars().take(60).collect(),
        };
        let t = self.spec.topology;
        let servers =
            if t.replicated() { t.members_of(litmus_protocol::GroupId::Coordinator(node)) } else { vec![node] };
        let incarnations = servers.into_iter().map(|n| (n, self.nodes[n.0 as usize].incarnation)).collect();
        self.unanswered.insert((client as u64, id), Unanswered { sent: self.now, node, incarnations, what });
    }

    /// A client request or response that will never arrive: its request is exempt.
    fn untrack_lost(&mut self, env: &Envelope) {
        match (&env.msg, env.from, env.to) {
            (Message::ClientRequest(r), Addr::Client(c), _) => {
                self.unanswered.remove(&(c.0, r.id));
            }
            (Message::ClientResponse(r), _, Addr::Client(c)) => {
                self.unanswered.remove(&(c.0, r.id));
            }
            _ => {}
        }
    }

    fn heal_all(&mut self) -> Result<(), Error> {
        self.blocked.clear();
        for node in self.spec.topology.node_ids() {
            if !self.nodes[node.0 as usize].up && !self.lost_for_good(node) {
                self.start_node(node)?;
            }
        }
        Ok(())
    }

    /// Lets virtual time pass (timers fire, retransmissions happen) without new requests.
    pub fn idle(&mut self, d: Duration) -> Result<(), Error> {
        let end = self.now + d;
        self.run_until(end, &mut NoDriver)
    }

    /// Sends one request from the verification client and runs until it is answered.
    pub fn request(&mut self, body: RequestBody) -> Result<ResponseBody, Error> {
        let v = self.clients.len() - 1;
        let (id, env) = self.clients[v].session.request(self.now, body.clone());
        self.track(v, id, &env, &body);
        self.clients[v].busy = Some((id, body));
        self.verify_result = None;
        self.send(env);
        let deadline = self.now + self.cfg.request_timeout * 4;
        while self.verify_result.is_none() && self.now < deadline {
            if !self.step_one(&mut NoDriver)? {
                break;
            }
        }
        self.clients[v].busy = None;
        self.verify_result.take().unwrap_or_else(|| {
            // Given up here, so the session must forget it too: its own deadline would
            // otherwise complete it later, as if it were the client's next request.
            self.clients[v].session.forget(id);
            Err(Error::Unavailable { reason: "verification request timed out".into(), outcome_unknown: true })
        })
    }

    fn run_until(&mut self, end: Time, driver: &mut dyn SimDriver) -> Result<(), Error> {
        while self.queue.peek().is_some_and(|s| s.at <= end) {
            self.step_one(driver)?;
        }
        self.now = self.now.max(end);
        Ok(())
    }

    /// Processes one event; false when the queue is empty.
    fn step_one(&mut self, driver: &mut dyn SimDriver) -> Result<bool, Error> {
        let Some(s) = self.queue.pop() else { return Ok(false) };
        self.report.events += 1;
        if self.report.events >= self.cfg.events_max {
            // A livelock, or a request storm that keeps the nodes' queues full (a liveness
            // failure like any other: the run fails with its seed).
            return Err(Error::Internal(format!(
                "liveness: event limit {} reached at {} (livelock, or a request storm?)",
                self.cfg.events_max, self.now
            )));
        }
        debug_assert!(s.at >= self.now);
        self.now = s.at;
        match s.item {
            Event::Deliver(src, env) => self.deliver(src, env, driver)?,
            Event::Tick(node) => {
                if self.nodes[node.0 as usize].up {
                    let addrs: Vec<Addr> = self.nodes[node.0 as usize].machines.keys().copied().collect();
                    for a in addrs {
                        self.step_machine(node, a, Input::Tick);
                    }
                    self.schedule(Duration::from_millis(litmus_protocol::machine::TICK_INTERVAL_MS), Event::Tick(node));
                }
            }
            Event::ClientTick => {
                for c in 0..self.clients.len() {
                    if self.clients[c].session.outstanding() == 0 {
                        continue;
                    }
                    let timed_out = self.clients[c].session.tick(self.now);
                    if !timed_out.is_empty() {
                        self.fail_over_if_down(c);
                    }
                    for (id, e) in timed_out {
                        self.client_done(c, id, Err(e), driver);
                    }
                }
                self.schedule(Duration::from_millis(1), Event::ClientTick);
            }
            Event::Sync { node, incarnation } => self.sync(node, incarnation),
            Event::Crash(node) => self.crash(node),
            Event::Outage { node, until } => {
                if until == Time(u64::MAX) && self.nodes[node.0 as usize].up {
                    self.note_loss(node);
                }
                let n = &mut self.nodes[node.0 as usize];
                n.down_until = n.down_until.max(until);
                self.crash(node);
            }
            Event::Restart(node) => {
                let n = &self.nodes[node.0 as usize];
                if !n.up && self.now >= n.down_until {
                    self.trace_line(|| format!("RESTART node {}", node.0));
                    self.start_node(node)?;
                }
            }
            Event::LoseData(node) => {
                self.trace_line(|| format!("DATA LOSS node {}", node.0));
                self.crash(node);
                let n = &mut self.nodes[node.0 as usize];
                for disk in n.disks.values_mut() {
                    *disk = SimDisk::default();
                }
                self.rejoining.insert(node);
            }
            Event::Isolate(node) => {
                self.trace_line(|| format!("PARTITION nodes {{{}}} | the rest", node.0));
                for other in self.spec.topology.node_ids().filter(|&o| o != node) {
                    self.blocked.insert((node, other));
                    self.blocked.insert((other, node));
                }
                self.report.partitions += 1;
            }
            Event::Heal => {
                self.trace_line(|| "HEAL network".to_string());
                self.blocked.clear()
            }
            Event::FaultCheck => {
                if self.faults_on {
                    self.inject_faults();
                    self.schedule(self.cfg.faults.period, Event::FaultCheck);
                }
            }
            Event::CoreFree { node, incarnation } => {
                let n = &mut self.nodes[node.0 as usize];
                if n.up && n.incarnation == incarnation {
                    n.wake_at = None;
                    self.dispatch(node);
                }
            }
            Event::Send { node, incarnation, env } => {
                let n = &self.nodes[node.0 as usize];
                // A step whose node crashed before it ended never sent anything.
                if n.up && n.incarnation == incarnation {
                    self.send_from(Host::Node(node), env);
                }
            }
            Event::ClientIssue(c) => {
                self.clients[c].pausing = false;
                self.issue(c, driver);
            }
        }
        Ok(true)
    }

    fn step_machine(&mut self, node: NodeId, addr: Addr, input: Input) {
        if self.costs.is_some() {
            self.nodes[node.0 as usize].runq.push_back((addr, input));
            self.dispatch(node);
            return;
        }
        self.run_step(node, addr, input, None);
    }

    /// Steps `addr` now. With the CPU model (`keys`: the step's names, [`crate::cost::step_keys`])
    /// the step costs what the table says a step of these kinds that did its work costs; its
    /// messages leave that much later (the step's end), and its records sync after that plus
    /// the flush and the sync latency. Without, it is free. Returns whether it logged records,
    /// and its cost.
    fn run_step(&mut self, node: NodeId, addr: Addr, input: Input, keys: Option<Vec<String>>) -> (bool, u64) {
        let now = self.node_now(node);
        let n = &mut self.nodes[node.0 as usize];
        let Some(m) = n.machines.get_mut(&addr) else { return (false, 0) };
        let mut out = Effects::default();
        m.step(now, input, &mut out);
        if self.spec.topology.replicated() {
            // One leader at a time: no replica serves in a term older than one that served.
            let replica = m.as_any().and_then(|a| a.downcast_ref::<crate::replica::Replica>());
            if let Some((p, term)) = replica.and_then(|r| r.served_in_last_step().map(|t| (r.id(), t))) {
                let newest = self.served_terms.entry(p).or_insert(term);
                if term < *newest && self.violation.is_none() {
                    self.violation = Some(format!(
                        "{addr} at {:.3} ms served in term {term} after a leader of term {} had served: \
                         two leaders of {p}",
                        now.0 as f64 / 1e6,
                        *newest
                    ));
                }
                *newest = (*newest).max(term);
                if self.awaiting_takeover.remove(&p) {
                    let at = self.report.lost_node.map_or(now, |l| l.1);
                    self.report.takeovers.push((p, Duration::from_nanos(self.now.0.saturating_sub(at.0))));
                }
            }
            n.leaders.observe(m.as_ref());
            for env in out.send.iter_mut().chain(out.send_now.iter_mut()) {
                n.leaders.route(env);
            }
        }
        let cost_ns = match (keys, self.costs.as_mut()) {
            (Some(keys), Some(costs)) => costs.envelope_ns(keys, out.work),
            _ => 0,
        };
        self.steps += 1;
        let every = self.cfg.invariant_check_every;
        if every > 0 && self.steps.is_multiple_of(every) && self.violation.is_none() {
            if let Err(e) = m.check_invariants() {
                self.violation = Some(format!("{addr} at {:.3} ms: {e}", now.0 as f64 / 1e6));
            }
        }
        let logged = !out.persist.is_empty();
        let disk = n.disks.get_mut(&addr).expect("every machine has a disk");
        disk.records.extend(out.persist);
        let need = disk.discarded + disk.records.len();
        if !self.cfg.keep_logs {
            disk.discarded = need;
            disk.records.clear();
        }
        if out.barrier {
            disk.barrier = need;
        }
        let (synced, barrier) = (disk.synced, disk.barrier);
        let end = self.now + Duration::from_nanos(cost_ns);
        let mut ready = Vec::new();
        for env in out.send_now {
            if barrier <= synced {
                ready.push(env);
            } else {
                n.held.push((addr, barrier, end, env));
            }
        }
        for env in out.send {
            if need <= synced {
                ready.push(env);
            } else {
                n.held.push((addr, need, end, env));
            }
        }
        let incarnation = n.incarnation;
        if need > synced && !n.sync_pending {
            n.sync_pending = true;
            let flush = if logged { self.costs.as_ref().map_or(0, |c| c.flush_ns) } else { 0 };
            let after = Duration::from_nanos(cost_ns + flush) + self.cfg.fsync_latency;
            self.schedule(after, Event::Sync { node, incarnation });
        }
        for env in ready {
            if cost_ns == 0 {
                self.send_from(Host::Node(node), env);
            } else {
                self.schedule(Duration::from_nanos(cost_ns), Event::Send { node, incarnation, env });
            }
        }
        (logged, cost_ns)
    }

    /// [`SimConfig::cpu`]: starts waiting steps on free cores, in arrival order; when every core
    /// is busy, wakes up when the first one frees.
    fn dispatch(&mut self, node: NodeId) {
        loop {
            let n = &mut self.nodes[node.0 as usize];
            if n.runq.is_empty() || !n.up {
                return;
            }
            let (core, free_at) =
                n.cores.iter().copied().enumerate().min_by_key(|&(i, t)| (t, i)).expect("a node has a core");
            if free_at > self.now {
                if n.wake_at.is_none_or(|w| w > free_at) {
                    n.wake_at = Some(free_at);
                    let incarnation = n.incarnation;
                    self.schedule(Duration::from_nanos(free_at.0 - self.now.0), Event::CoreFree { node, incarnation });
                }
                return;
            }
            let (addr, input) = n.runq.pop_front().expect("not empty");
            let keys = crate::cost::step_keys(addr, &input);
            let (logged, cost) = self.run_step(node, addr, input, Some(keys));
            let flush = self.costs.as_ref().expect("dispatch runs with a cost model").flush_ns;
            let charged = cost + if logged { flush } else { 0 };
            self.nodes[node.0 as usize].cores[core] = self.now + Duration::from_nanos(charged);
            self.report.cpu_busy_ns += charged;
        }
    }

    fn start_client_ticks(&mut self) {
        if !self.client_tick_on {
            self.client_tick_on = true;
            self.schedule(Duration::from_millis(1), Event::ClientTick);
        }
    }

    /// A measured run without faults (`litmus bench --runtime sim`), in three calls: start
    /// the workload's clients, [`Simulator::advance`] virtual time (as often as the caller
    /// wants to sample), then [`Simulator::drain`]. The driver decides when each client stops
    /// ([`SimDriver::next_at`] returning `None`). Nothing is verified here: the caller checks
    /// through [`Simulator::request`].
    pub fn start_clients(&mut self, driver: &mut dyn SimDriver) {
        self.issuing = true;
        self.start_client_ticks();
        for c in 0..self.cfg.clients {
            self.issue(c, driver);
        }
    }

    /// Runs every event up to `until` (virtual time), the workload's clients active.
    pub fn advance(&mut self, driver: &mut dyn SimDriver, until: Time) -> Result<(), Error> {
        self.run_until(until, driver)
    }

    /// Goes on until every workload client is idle (its driver said `None`) or `max` passed,
    /// then stops issuing.
    pub fn drain(&mut self, driver: &mut dyn SimDriver, max: Duration) -> Result<(), Error> {
        let stop = self.now + max;
        let workload_clients = self.cfg.clients;
        while self.now < stop && self.clients[..workload_clients].iter().any(|c| c.busy.is_some() || c.pausing) {
            let next = (self.now + Duration::from_millis(1)).min(stop);
            self.run_until(next, driver)?;
        }
        self.issuing = false;
        Ok(())
    }

    /// What the run did so far.
    pub fn report(&self) -> &SimReport {
        &self.report
    }

    /// Sends a client's message.
    fn send(&mut self, env: Envelope) {
        let from = self.spec.topology.host_of(env.from);
        self.send_from(from, env)
    }

    /// Sends a message that leaves host `from`.
    fn send_from(&mut self, from: Host, env: Envelope) {
        let t = self.spec.topology;
        let to = t.host_of(env.to);
        if from == to {
            self.schedule(Duration::from_micros(1), Event::Deliver(from, env));
            return;
        }
        if let (Host::Node(a), Host::Node(b)) = (from, to) {
            if self.blocked.contains(&(a, b)) {
                self.report.dropped += 1;
                // A client's request forwarded between members of its coordinator's group.
                self.untrack_lost(&env);
                return;
            }
        }
        let net = self.cfg.net.clone();
        if net.loss > 0.0 && self.rng.gen_bool(net.loss) {
            self.report.dropped += 1;
            self.untrack_lost(&env);
            return;
        }
        let copies = if net.duplicate > 0.0 && self.rng.gen_bool(net.duplicate) { 2 } else { 1 };
        if copies == 2 {
            self.report.duplicated += 1;
        }
        for _ in 0..copies {
            let lat = self.rng.gen_range(net.latency_min.as_nanos() as u64..=net.latency_max.as_nanos() as u64);
            self.schedule(Duration::from_nanos(lat), Event::Deliver(from, env.clone()));
        }
    }

    fn deliver(&mut self, src: Host, env: Envelope, driver: &mut dyn SimDriver) -> Result<(), Error> {
        let t = self.spec.topology;
        if let Host::Node(node) = t.host_of(env.to) {
            if !self.cfg.step_cost.is_zero() && self.costs.is_none() {
                let n = &mut self.nodes[node.0 as usize];
                if n.busy_until > self.now {
                    // The node is still busy: the message waits its turn (FIFO by sequence).
                    let wait = Duration::from_nanos(n.busy_until.0 - self.now.0);
                    self.schedule(wait, Event::Deliver(src, env));
                    return Ok(());
                }
                n.busy_until = self.now + self.cfg.step_cost;
            }
        }
        if let (Host::Node(a), Host::Node(b)) = (src, t.host_of(env.to)) {
            if self.blocked.contains(&(a, b)) {
                self.report.dropped += 1;
                self.trace_line(|| format!("drop {} -> {} (partitioned): {}", env.from, env.to, brief(&env.msg)));
                self.untrack_lost(&env);
                return Ok(());
            }
        }
        self.report.delivered += 1;
        self.trace_line(|| format!("{} -> {}: {}", env.from, env.to, brief(&env.msg)));
        let bytes = if self.cfg.hash_payloads {
            postcard::to_stdvec(&env).expect("envelopes serialize")
        } else {
            postcard::to_stdvec(&(env.from, env.to)).expect("addresses serialize")
        };
        let mut h = self.report.trace_hash ^ self.now.0;
        for b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.report.trace_hash = h;
        match t.host_of(env.to) {
            Host::Clients => {
                let Addr::Client(c) = env.to else { unreachable!() };
                let c = c.0 as usize;
                if let Message::ClientResponse(resp) = env.msg {
                    self.unanswered.remove(&(c as u64, resp.id));
                    if let Some((id, result)) = self.clients[c].session.on_response(resp) {
                        self.client_done(c, id, result, driver);
                    }
                }
            }
            Host::Node(node) => {
                if self.nodes[node.0 as usize].up {
                    if let (Host::Node(sender), true) = (src, t.replicated()) {
                        self.nodes[node.0 as usize].leaders.learn(env.from, sender);
                    }
                    let fire = self
                        .trigger
                        .as_ref()
                        .is_some_and(|t| t.node == node && self.now >= t.armed_at && (t.matches)(&env));
                    self.step_machine(node, t.machine_addr(env.to), Input::Message(env));
                    if fire {
                        let t = self.trigger.take().expect("checked");
                        let jitter = Duration::from_nanos(self.rng.gen_range(0..=t.jitter_max.as_nanos() as u64));
                        if t.down_for == Duration::MAX {
                            self.trace_line(|| format!("node {} will be lost for good", node.0));
                            self.schedule(jitter, Event::Outage { node, until: Time(u64::MAX) });
                        } else {
                            let until = self.now + jitter + t.down_for;
                            self.schedule(jitter, Event::Outage { node, until });
                            self.schedule(jitter + t.down_for, Event::Restart(node));
                        }
                    }
                } else {
                    self.report.dropped += 1;
                    self.untrack_lost(&env);
                }
            }
        }
        Ok(())
    }

    fn client_done(
        &mut self,
        c: usize,
        id: litmus_core::RequestId,
        result: Result<ResponseBody, Error>,
        driver: &mut dyn SimDriver,
    ) {
        let Some((busy_id, body)) = self.clients[c].busy.take() else { return };
        assert_eq!(busy_id, id, "a client has one request at a time");
        if result.is_ok() {
            self.report.requests_ok += 1;
        } else {
            self.report.requests_failed += 1;
        }
        if c == self.clients.len() - 1 {
            self.verify_result = Some(result);
            return;
        }
        driver.done_at(c, &body, &result, self.now);
        self.issue(c, driver);
    }

    fn issue(&mut self, c: usize, driver: &mut dyn SimDriver) {
        let cl = &self.clients[c];
        if !self.issuing || cl.idle_forever || cl.busy.is_some() || cl.pausing {
            return;
        }
        let pause = driver.pause(c, self.now);
        if !pause.is_zero() {
            self.clients[c].pausing = true;
            self.schedule(pause, Event::ClientIssue(c));
            return;
        }
        match driver.next_at(c, &mut self.rng, self.now) {
            None => self.clients[c].idle_forever = true,
            Some(body) => {
                let (id, env) = self.clients[c].session.request(self.now, body.clone());
                self.track(c, id, &env, &body);
                self.clients[c].busy = Some((id, body));
                self.send(env);
            }
        }
    }
}

/// Whether `m` (a replica, or a coordinator kept alone) holds `client`'s request `id`.
fn machine_holds_request(m: &dyn Machine, client: Addr, id: litmus_core::RequestId) -> bool {
    let Some(any) = m.as_any() else { return false };
    if let Some(r) = any.downcast_ref::<crate::replica::Replica>() {
        return r.holds_request(client, id);
    }
    any.downcast_ref::<litmus_protocol::Coordinator>().is_some_and(|c| c.holds_request(client, id))
}

/// The driver used while verification requests run: no workload clients are active.
struct NoDriver;
impl SimDriver for NoDriver {
    fn next(&mut self, _: usize, _: &mut ChaCha8Rng) -> Option<RequestBody> {
        None
    }
    fn done(&mut self, _: usize, _: &RequestBody, _: &Result<ResponseBody, Error>) {}
    fn verify(&mut self, _: &mut Simulator) -> Result<(), String> {
        Ok(())
    }
}

/// A message for the trace: its `Debug` form, cut to [`TRACE_MESSAGE_CHARS_MAX`] characters.
fn brief(msg: &litmus_protocol::Message) -> String {
    let mut s = format!("{msg:?}");
    if s.len() > TRACE_MESSAGE_CHARS_MAX {
        let cut = (0..=TRACE_MESSAGE_CHARS_MAX).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// Longest message text one trace line prints.
pub const TRACE_MESSAGE_CHARS_MAX: usize = 240;
