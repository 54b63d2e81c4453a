//! The embedded runtime: a whole cluster in one process, threads and channels.
//!
//! The default for the CLI and the benchmarks. Machines are spread over a small pool of worker
//! threads (partition `p` on worker `p mod workers`, the other machines round robin), each worker
//! owning a [`Host`]. Every message
//! between two different hosts (node ↔ node, client ↔ node) is delayed by a sampled one-way
//! **network delay** ([`DelayModel`], default uniform 100–250 µs, a datacenter LAN) so that
//! coordination costs what it costs on a real network; messages within a node are not delayed.
//!
//! ```text
//!   client thread ──(deliver_at, Envelope)──► worker mailbox ─► heap by deliver_at ─► Host::step
//!        ▲                                                                              │
//!        └──────────────── Router::route (delay sampled per message) ◄──── Host::flush ─┘
//! ```
//!
//! Clients come two ways: a blocking thread per session ([`EmbeddedTransport`], for the shell,
//! loaders and checks), or benchmark terminals hosted on the workers themselves
//! ([`EmbeddedCluster::start_terminals`], [`TerminalDriver`]): a terminal's session lives on the
//! worker of its coordinator, its responses come through that worker's inbox and delay queue
//! and go to its driver instead of the [`Host`], so a transaction costs no thread wake-up
//! (see `embedded/terminals.rs`).
//!
//! Hand-offs are what a message costs here, so they are few: a [`Mailbox`] is a
//! vector under a mutex that its one reader swaps out whole, and a sender wakes the reader only
//! when it sleeps (no spinning, no `sched_yield`). A worker routes what one flush produced with
//! one lock and at most one wake-up per destination, and keeps messages between its own
//! machines without a hand-off at all.
//!
//! With a data directory every machine keeps a WAL (group commit per worker loop iteration);
//! without one nothing touches the disk.

mod terminals;
pub use terminals::{TerminalDriver, TerminalsRun};

use crate::due::Due;
use crate::host::Host;
use crate::topology::ClusterSpec;
use crate::transport::Transport;
use litmus_core::{ClientId, Error, InvalidInput, NodeId, Time};
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::{Addr, ClientSession, Envelope, Input, Machine, Message};
use litmus_storage::wal::FsyncPolicy;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most messages a worker steps before it flushes and sends (bounds the latency a batch adds).
pub const WORKER_BATCH_MAX: usize = 256;

/// One-way network delay between hosts: uniform in `[min, max]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DelayModel {
    pub min: Duration,
    pub max: Duration,
}

impl DelayModel {
    /// A datacenter LAN: 100–250 µs one way.
    pub const LAN: DelayModel = DelayModel { min: Duration::from_micros(100), max: Duration::from_micros(250) };
    pub const NONE: DelayModel = DelayModel { min: Duration::ZERO, max: Duration::ZERO };

    /// A fixed mean delay `us` with ±40% jitter (`0` is no delay).
    pub fn around_micros(us: u64) -> DelayModel {
        DelayModel { min: Duration::from_micros(us * 6 / 10), max: Duration::from_micros(us * 14 / 10) }
    }

    pub fn sample(&self, rng: &mut impl Rng) -> Duration {
        if self.max <= self.min {
            return self.min;
        }
        Duration::from_nanos(rng.gen_range(self.min.as_nanos() as u64..=self.max.as_nanos() as u64))
    }
}

#[derive(Clone, Debug)]
pub struct EmbeddedConfig {
    pub workers: usize,
    pub delay: DelayModel,
    /// Where logs live; `None` keeps everything in memory.
    pub data_dir: Option<PathBuf>,
    pub fsync: FsyncPolicy,
    /// How long a client waits for a response.
    pub request_timeout: Duration,
    /// `litmus calibrate`: every worker measures the CPU time of its steps and adds them here
    /// when it stops ([`crate::cost`]).
    pub profile: Option<Arc<crate::cost::CostProfile>>,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            workers: 2,
            delay: DelayModel::LAN,
            data_dir: None,
            fsync: FsyncPolicy::Never,
            request_timeout: litmus_protocol::client::REQUEST_TIMEOUT_DEFAULT,
            profile: None,
        }
    }
}

/// A queue with one reader: senders append under a mutex, the reader takes everything at once.
/// A sender signals the condition variable only when the reader sleeps on it, so a busy reader
/// costs its senders no system call; an idle reader may first poll a flag for a moment
/// ([`SPIN_BEFORE_SLEEP`]), so a short gap costs neither side one.
pub(crate) struct Mailbox<T> {
    inner: Mutex<MailboxInner<T>>,
    ready: Condvar,
    /// Items or a poke are waiting: what the reader polls, without the lock, while it spins.
    nonempty: AtomicBool,
}

struct MailboxInner<T> {
    items: Vec<T>,
    sleeping: bool,
    /// Set by [`Mailbox::poke`]: the reader has something to look at besides the items.
    poked: bool,
}

impl<T> Mailbox<T> {
    fn new() -> Self {
        Mailbox {
            inner: Mutex::new(MailboxInner { items: Vec::new(), sleeping: false, poked: false }),
            ready: Condvar::new(),
            nonempty: AtomicBool::new(false),
        }
    }

    fn push(&self, item: T) {
        self.push_all(std::iter::once(item));
    }

    /// Appends every item with one lock and at most one wake-up.
    fn push_all(&self, items: impl IntoIterator<Item = T>) {
        let wake = {
            let mut g = self.inner.lock().expect("mailbox lock");
            g.items.extend(items);
            self.nonempty.store(true, Ordering::Release);
            g.sleeping
        };
        if wake {
            self.ready.notify_one();
        }
    }

    /// Tells the reader to look at something besides the items (a worker's new terminals),
    /// waking it if it sleeps. Under the mailbox's lock, so a reader about to sleep sees it.
    fn poke(&self) {
        let wake = {
            let mut g = self.inner.lock().expect("mailbox lock");
            g.poked = true;
            self.nonempty.store(true, Ordering::Release);
            g.sleeping
        };
        if wake {
            self.ready.notify_one();
        }
    }

    /// Moves every queued item to `out`, first waiting up to `timeout` if there is none (and no
    /// poke). Returns whether the mailbox was poked since the last call.
    /// With a `spin` policy that says so, polls for up to [`SPIN_BEFORE_SLEEP`] (never past
    /// `timeout`) before it sleeps, and tells the policy whether the poll caught anything.
    fn take_all(&self, out: &mut Vec<T>, timeout: Duration, spin: Option<&mut SpinPolicy>) -> bool {
        if let Some(policy) = spin.filter(|_| !timeout.is_zero()) {
            if policy.should_spin() {
                policy.record(self.spin(timeout.min(SPIN_BEFORE_SLEEP)));
            }
        }
        let mut g = self.inner.lock().expect("mailbox lock");
        if g.items.is_empty() && !g.poked && !timeout.is_zero() {
            g.sleeping = true;
            g = self.ready.wait_timeout(g, timeout).expect("mailbox lock").0;
            g.sleeping = false;
        }
        if out.is_empty() {
            std::mem::swap(out, &mut g.items);
        } else {
            out.append(&mut g.items);
        }
        self.nonempty.store(false, Ordering::Relaxed);
        std::mem::take(&mut g.poked)
    }

    /// Polls for up to `limit` before the reader goes to sleep; returns whether something came.
    fn spin(&self, limit: Duration) -> bool {
        let start = Instant::now();
        loop {
            for _ in 0..64 {
                if self.nonempty.load(Ordering::Acquire) {
                    return true;
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= limit {
                return false;
            }
        }
    }
}

/// Whether an idle worker polls before it sleeps ([`SPIN_BEFORE_SLEEP`]): while polling pays.
///
/// A poll pays when the message that ends the gap comes from a thread running on another core.
/// When the sender needs the poller's core instead — blocking client threads outnumbering the
/// cores (`litmus calibrate`, an application's own threads) — every poll runs out and only
/// delays the sender: polling there once doubled YCSB's CPU per transaction. So a worker stops
/// polling after [`SpinPolicy::MISSES_MAX`] polls in a row caught nothing, and tries again once
/// every [`SpinPolicy::PROBE_EVERY`] idle gaps (the load may have changed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SpinPolicy {
    /// Polls in a row that ran out.
    misses: u32,
    /// Idle gaps slept through without polling since the last poll.
    skipped: u32,
}

impl SpinPolicy {
    pub(crate) const MISSES_MAX: u32 = 4;
    pub(crate) const PROBE_EVERY: u32 = 32;

    /// Called at each idle gap: poll this time?
    pub(crate) fn should_spin(&mut self) -> bool {
        if self.misses < Self::MISSES_MAX {
            return true;
        }
        self.skipped += 1;
        if self.skipped >= Self::PROBE_EVERY {
            self.skipped = 0;
            return true;
        }
        false
    }

    /// What the poll found.
    pub(crate) fn record(&mut self, caught: bool) {
        self.misses = if caught { 0 } else { self.misses.saturating_add(1) };
    }
}

/// How long an idle worker polls its mailbox before it sleeps on it, when it has nothing queued
/// for later and polling has been paying ([`SpinPolicy`]; see [`Mailbox::take_all`]).
///
/// At zero network delay a worker runs out of work for a few microseconds at a time: its
/// transactions wait on the other worker's partitions or on locks. Sleeping through each such
/// gap costs a futex wait, a futex wake in the sender and two context switches, a visible
/// share of a TPC-C run's CPU and a large one of YCSB's. Polling 20 µs first catches most of
/// the messages that end a gap, and a worker idle for longer then sleeps, so an idle cluster
/// burns 20 µs per wake-up at most. With a delay model, messages
/// are stamped with their delivery time and wait in the worker's queue, so a worker with
/// anything queued sleeps until the earliest is due instead: polling would only burn CPU.
pub const SPIN_BEFORE_SLEEP: Duration = Duration::from_micros(20);

type Inbox = Mailbox<(Time, Envelope)>;

/// Routes envelopes to worker mailboxes and client mailboxes, stamping the delivery time.
pub(crate) struct Router {
    start: Instant,
    spec_topology: crate::topology::Topology,
    delay: DelayModel,
    machines: BTreeMap<Addr, usize>,
    workers: Vec<Arc<Inbox>>,
    clients: RwLock<HashMap<ClientId, ClientDest>>,
    /// Terminals handed to each worker and not yet adopted by it ([`terminals`]).
    adopt: Vec<Mutex<Vec<Box<dyn terminals::Hosted>>>>,
    stopped: AtomicBool,
    counters: Arc<Counters>,
}

/// Where a client's responses go.
#[derive(Clone)]
enum ClientDest {
    /// A client thread's own mailbox ([`EmbeddedTransport`]).
    Mailbox(Arc<Inbox>),
    /// A terminal hosted on this worker ([`terminals`]): into its inbox, as a machine's.
    Worker(usize),
}

impl Router {
    pub(crate) fn now(&self) -> Time {
        Time(self.start.elapsed().as_nanos() as u64)
    }

    fn delivery_time(&self, env: &Envelope, now: Time, rng: &mut impl Rng) -> Time {
        let t = &self.spec_topology;
        let delay = if t.host_of(env.from) == t.host_of(env.to) { Duration::ZERO } else { self.delay.sample(rng) };
        now + delay
    }

    fn route(&self, env: Envelope, rng: &mut impl Rng) {
        self.counters.messages.fetch_add(1, Ordering::Relaxed);
        let at = self.delivery_time(&env, self.now(), rng);
        match env.to {
            Addr::Client(c) => match self.clients.read().expect("clients lock").get(&c) {
                Some(ClientDest::Mailbox(mb)) => mb.push((at, env)),
                Some(ClientDest::Worker(w)) => self.workers[*w].push((at, env)),
                None => {}
            },
            to => {
                if let Some(&w) = self.machines.get(&self.spec_topology.machine_addr(to)) {
                    self.workers[w].push((at, env));
                }
            }
        }
    }

    /// Routes what worker `me` flushed: its own machines' messages go to `local` (no hand-off),
    /// the rest are grouped per destination mailbox, each group pushed with one lock. The
    /// delays are sampled in envelope order, as one `route` call each would.
    /// `envs` is left empty, with its capacity, for [`Host::recycle`]; the groups are gathered
    /// in `scratch`, which keeps its vectors from one flush to the next.
    fn route_batch(
        &self,
        me: usize,
        envs: &mut Vec<Envelope>,
        local: &mut Vec<(Time, Envelope)>,
        scratch: &mut RouteScratch,
        rng: &mut impl Rng,
    ) {
        let now = self.now();
        self.counters.messages.fetch_add(envs.len() as u64, Ordering::Relaxed);
        scratch.per_worker.resize_with(self.workers.len(), Vec::new);
        if scratch.per_client.len() > ROUTE_CLIENTS_KEPT_MAX {
            scratch.per_client.clear(); // sessions come and go; do not keep every one's buffer
        }
        // Taken at the first message for a client, held to the end of the batch.
        let mut clients = None;
        for env in envs.drain(..) {
            let at = self.delivery_time(&env, now, rng);
            match env.to {
                Addr::Client(c) => {
                    match clients.get_or_insert_with(|| self.clients.read().expect("clients lock")).get(&c) {
                        // A hosted terminal's response: to its worker like a machine's message.
                        Some(ClientDest::Worker(w)) if *w == me => local.push((at, env)),
                        Some(ClientDest::Worker(w)) => scratch.per_worker[*w].push((at, env)),
                        Some(ClientDest::Mailbox(_)) => {
                            let batch = scratch.per_client.entry(c).or_default();
                            if batch.is_empty() {
                                scratch.clients_touched.push(c);
                            }
                            batch.push((at, env));
                        }
                        None => {}
                    }
                }
                to => match self.machines.get(&self.spec_topology.machine_addr(to)) {
                    Some(&w) if w == me => local.push((at, env)),
                    Some(&w) => scratch.per_worker[w].push((at, env)),
                    None => {}
                },
            }
        }
        for (w, batch) in scratch.per_worker.iter_mut().enumerate() {
            if !batch.is_empty() {
                self.workers[w].push_all(batch.drain(..));
            }
        }
        if let Some(clients) = clients {
            for c in scratch.clients_touched.drain(..) {
                let batch = scratch.per_client.get_mut(&c).expect("a touched client has a batch");
                match clients.get(&c) {
                    Some(ClientDest::Mailbox(mb)) => mb.push_all(batch.drain(..)),
                    _ => unreachable!("only a client thread's messages are batched per client"),
                }
            }
        }
    }
}

/// Most client sessions whose routing buffers a worker keeps between flushes.
const ROUTE_CLIENTS_KEPT_MAX: usize = 4096;

/// A worker's buffers for [`Router::route_batch`], empty between calls, kept for their
/// capacity: a fresh vector per destination per flush, regrown by doubling, would be a visible
/// share of the copies and allocations of a TPC-C profile.
#[derive(Default)]
struct RouteScratch {
    per_worker: Vec<Vec<(Time, Envelope)>>,
    per_client: HashMap<ClientId, Vec<(Time, Envelope)>>,
    /// The clients with messages in this batch, in the order first seen.
    clients_touched: Vec<ClientId>,
}

/// A worker's messages waiting for their delivery time, earliest first, ties in arrival order.
///
/// The heap orders small entries (time, sequence number, slot) while the envelopes stay put in
/// a slab: a heap of whole envelopes would move each one log(n) times on push and pop, a
/// visible share of the `memmove` in a TPC-C profile.
#[derive(Default)]
struct DelayQueue {
    heap: BinaryHeap<Due<u32>>,
    slots: Vec<Option<Envelope>>,
    free: Vec<u32>,
    /// Sequence number of the next push (orders equal delivery times by arrival).
    seq: u64,
}

impl DelayQueue {
    fn push(&mut self, at: Time, env: Envelope) {
        let slot = match self.free.pop() {
            Some(i) => {
                debug_assert!(self.slots[i as usize].is_none());
                self.slots[i as usize] = Some(env);
                i
            }
            None => {
                self.slots.push(Some(env));
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 messages in flight per worker")
            }
        };
        self.heap.push(Due { at, seq: self.seq, item: slot });
        self.seq += 1;
    }

    /// The delivery time of the earliest message.
    fn next_at(&self) -> Option<Time> {
        self.heap.peek().map(|d| d.at)
    }

    /// The earliest message if it is due at `now`.
    fn pop_due(&mut self, now: Time) -> Option<Envelope> {
        if self.heap.peek()?.at > now {
            return None;
        }
        let slot = self.heap.pop().expect("peeked").item;
        self.free.push(slot);
        Some(self.slots[slot as usize].take().expect("a queued slot holds its envelope"))
    }
}

/// The worker each machine runs on.
///
/// * With at least as many nodes as workers, every machine of node `n` runs on worker
///   `n mod workers`: a worker stands for a node's cores, and a transaction whose client is
///   attached to its data's node (a TPC-C terminal, [`EmbeddedCluster::transport_on`]) keeps its
///   messages on one worker, with no hand-off between threads.
/// * With fewer nodes, partition `p` runs on worker `p mod workers` and the other machines
///   (coordinators, engine roles) round robin in the order given, so that one node's partitions
///   still spread over the cores.
///
/// Either way the partitions of consecutive numbers (TPC-C's warehouses 1 and 2 live on
/// partitions 1 and 2) land on different workers when they can: placing machines in node order
/// by count instead would put both warehouses of a 2-warehouse run on one worker, saturated
/// while the other idles.
fn worker_placement(
    addrs: impl Iterator<Item = Addr>,
    topology: &crate::topology::Topology,
    workers: usize,
) -> Vec<usize> {
    let by_node = topology.nodes as usize >= workers;
    let mut others = 0;
    addrs
        .map(|a| match (a, topology.host_of(a)) {
            (_, crate::topology::Host::Node(n)) if by_node => n.0 as usize % workers,
            (Addr::Partition(p), _) => p.0 as usize % workers,
            // A partition's replicas on consecutive workers, its home's where its partition
            // would be without replication.
            (Addr::Replica(litmus_protocol::GroupId::Partition(p), n), _) => {
                (p.0 + n.0 + topology.nodes - p.0 % topology.nodes) as usize % workers
            }
            _ => {
                others += 1;
                (others - 1) % workers
            }
        })
        .collect()
}

/// A running embedded cluster. Dropping it stops the workers.
pub struct EmbeddedCluster {
    router: Arc<Router>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<(), Error>>>,
    next_client: AtomicU64,
    request_timeout: Duration,
    seed: u64,
    records_total: Arc<AtomicU64>,
    counters: Arc<Counters>,
}

/// What the cluster did, for cost per transaction.
#[derive(Default)]
struct Counters {
    /// Messages routed: client requests, responses, and every message between machines.
    messages: AtomicU64,
    /// Bytes of log records produced (with or without a data directory).
    log_bytes: AtomicU64,
    /// Events engines counted (`CoordCtx::count`), by name.
    engine: Mutex<BTreeMap<&'static str, u64>>,
}

impl EmbeddedCluster {
    pub fn start(spec: ClusterSpec, cfg: EmbeddedConfig) -> Result<EmbeddedCluster, Error> {
        if cfg.workers == 0 || cfg.workers > 64 {
            return Err(InvalidInput::Config(format!("workers must be in 1..=64, got {}", cfg.workers)).into());
        }
        let mut all: Vec<Box<dyn Machine>> = Vec::new();
        for node in spec.topology.node_ids() {
            all.extend(spec.machines_of(node));
        }
        let workers = cfg.workers.min(all.len());
        let mut per_worker: Vec<Vec<Box<dyn Machine>>> = (0..workers).map(|_| Vec::new()).collect();
        let mut machines = BTreeMap::new();
        let placement = worker_placement(all.iter().map(|m| m.addr()), &spec.topology, workers);
        for (m, w) in all.into_iter().zip(placement) {
            machines.insert(m.addr(), w);
            per_worker[w].push(m);
        }
        let mut hosts = Vec::new();
        for ms in per_worker {
            hosts.push(Host::open(ms, cfg.data_dir.as_deref(), cfg.fsync)?.with_topology(spec.topology));
        }
        let inboxes: Vec<Arc<Inbox>> = (0..workers).map(|_| Arc::new(Mailbox::new())).collect();
        let router = Arc::new(Router {
            start: Instant::now(),
            spec_topology: spec.topology,
            delay: cfg.delay,
            machines,
            workers: inboxes.clone(),
            clients: RwLock::new(HashMap::new()),
            adopt: (0..workers).map(|_| Mutex::new(Vec::new())).collect(),
            stopped: AtomicBool::new(false),
            counters: Arc::new(Counters::default()),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let records_total = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for (i, (host, rx)) in hosts.into_iter().zip(inboxes).enumerate() {
            let (router, stop, records) = (router.clone(), stop.clone(), records_total.clone());
            let seed = spec.seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let profile = cfg.profile.clone();
            let handle = std::thread::Builder::new()
                .name(format!("litmus-worker-{i}"))
                .spawn(move || {
                    let args = WorkerArgs { me: i, inbox: rx, router, stop, seed, records };
                    let Some(profile) = profile else { return worker_loop(host, args) };
                    let mut host = host;
                    host.enable_profile();
                    let mut window = WorkerWindow::default();
                    let r = worker_loop_counted(&mut host, args, Some((&profile, &mut window)));
                    window.observe(&mut host, false, window.seen);
                    let mut data = host.take_profile();
                    (data.worker_steps, data.worker_cpu_ns) = (window.steps, window.cpu_ns);
                    profile.add(&data);
                    r
                })
                .map_err(|e| Error::Internal(format!("spawn worker: {e}")))?;
            threads.push(handle);
        }
        let counters = router.counters.clone();
        Ok(EmbeddedCluster {
            router,
            stop,
            threads,
            next_client: AtomicU64::new(0),
            request_timeout: cfg.request_timeout,
            seed: spec.seed,
            records_total,
            counters,
        })
    }

    /// A new client session, attached round-robin to a coordinator.
    pub fn transport(&self) -> EmbeddedTransport {
        self.session(None)
    }

    /// A new client session attached to the coordinator of node `client mod nodes`, as the
    /// simulator attaches its client `client` (benchmark clients that stay on their node).
    pub fn transport_for(&self, client: u64) -> EmbeddedTransport {
        self.session(Some(client))
    }

    /// A new client session attached to the coordinator of `node` (a client whose data lives
    /// there, [`crate::topology::Topology::node_of`]); a node outside the cluster wraps around.
    pub fn transport_on(&self, node: NodeId) -> EmbeddedTransport {
        self.session(Some(u64::from(node.0)))
    }

    fn session(&self, client: Option<u64>) -> EmbeddedTransport {
        let n = self.next_client.fetch_add(1, Ordering::Relaxed);
        let id = ClientId(n);
        let rx = Arc::new(Mailbox::new());
        self.router.clients.write().expect("clients lock").insert(id, ClientDest::Mailbox(rx.clone()));
        // `coordinator_for(k)` is node `k mod nodes`: a node id picks its own coordinator.
        let coordinator = self.router.spec_topology.coordinator_for(client.unwrap_or(n));
        EmbeddedTransport {
            session: ClientSession::new(id, coordinator, self.request_timeout),
            rx,
            received: std::collections::VecDeque::new(),
            batch: Vec::new(),
            router: self.router.clone(),
            rng: ChaCha8Rng::seed_from_u64(self.seed ^ n.wrapping_mul(0xA076_1D64_78BD_642F)),
        }
    }

    /// The cluster's clock: time since it started (what delivery times and client deadlines
    /// are measured in).
    pub fn now(&self) -> Time {
        self.router.now()
    }

    /// Log records produced by all machines so far (counted with or without a data directory).
    pub fn records_total(&self) -> u64 {
        self.records_total.load(Ordering::Relaxed)
    }

    /// Messages routed so far: client requests and responses and messages between machines.
    pub fn messages_total(&self) -> u64 {
        self.counters.messages.load(Ordering::Relaxed)
    }

    /// Bytes of log records produced so far (counted with or without a data directory).
    pub fn log_bytes_total(&self) -> u64 {
        self.counters.log_bytes.load(Ordering::Relaxed)
    }

    /// Events the engines counted so far (e.g. `granola.conflict_retries`), by name.
    pub fn engine_counts(&self) -> BTreeMap<&'static str, u64> {
        self.counters.engine.lock().expect("engine counts lock").clone()
    }

    /// Stops the workers and reports the first error any of them hit.
    pub fn shutdown(mut self) -> Result<(), Error> {
        self.stop_all()
    }

    fn stop_all(&mut self) -> Result<(), Error> {
        self.stop.store(true, Ordering::SeqCst);
        self.router.stopped.store(true, Ordering::SeqCst);
        let mut first = Ok(());
        for t in self.threads.drain(..) {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    if first.is_ok() {
                        first = Err(e);
                    }
                }
                Err(_) => first = Err(Error::Internal("worker panicked".into())),
            }
        }
        first
    }
}

impl Drop for EmbeddedCluster {
    fn drop(&mut self) {
        let _ = self.stop_all();
    }
}

fn worker_loop(mut host: Host, args: WorkerArgs) -> Result<(), Error> {
    worker_loop_counted(&mut host, args, None)
}

/// What a worker thread is given besides its host.
struct WorkerArgs {
    /// The worker's index (its mailbox in `router.workers`).
    me: usize,
    inbox: Arc<Inbox>,
    router: Arc<Router>,
    stop: Arc<AtomicBool>,
    /// Seeds the worker's RNG (the network delays it samples).
    seed: u64,
    /// The cluster's count of records logged, which the worker adds to.
    records: Arc<AtomicU64>,
}

/// A profiled worker's CPU time and steps inside the measured window (`litmus calibrate`).
#[derive(Default)]
struct WorkerWindow {
    /// (thread CPU ns, steps) when the window opened, while it is open.
    open: Option<(u64, u64)>,
    steps: u64,
    cpu_ns: u64,
    /// Steps counted at the last observation.
    seen: u64,
}

impl WorkerWindow {
    /// Follows the window (`active`) given the steps taken so far; profiles the host inside it.
    fn observe(&mut self, host: &mut Host, active: bool, steps: u64) {
        let now = || crate::cost::thread_cpu_ns().unwrap_or(0);
        self.seen = steps;
        match (self.open, active) {
            (None, true) => self.open = Some((now(), steps)),
            (Some((cpu, s)), false) => {
                self.cpu_ns += now().saturating_sub(cpu);
                self.steps += steps.saturating_sub(s);
                self.open = None;
            }
            _ => {}
        }
        host.set_profiling(active);
    }
}

/// The worker loop; with a profile, measures its window ([`WorkerWindow`]). Each round: wait
/// for messages (or the next deadline), adopt terminals handed over, step what is due, wake
/// and tick, flush and route, hand finished terminals back, publish counters.
fn worker_loop_counted(
    host: &mut Host,
    args: WorkerArgs,
    mut profile: Option<(&crate::cost::CostProfile, &mut WorkerWindow)>,
) -> Result<(), Error> {
    let router = &args.router;
    let mut w = WorkerState::new(router, args.seed);
    while !args.stop.load(Ordering::Relaxed) {
        let poked = w.wait_for_messages(&args.inbox, router);
        let now = router.now();
        if poked {
            w.adopt_terminals(&args, now);
        }
        w.steps += w.step_due(host, now)? as u64;
        if let Some((p, window)) = profile.as_mut() {
            window.observe(host, p.active(), w.steps);
        }
        for h in &mut w.hosted {
            h.wake(now, &mut w.requests);
        }
        if now >= w.next_tick {
            w.steps += host.addrs().count() as u64;
            host.tick(now)?;
            for h in &mut w.hosted {
                h.tick(now, &mut w.requests);
            }
            w.next_tick = now + w.tick;
        }
        w.flush_and_route(host, &args)?;
        w.hand_back_finished(router);
        w.publish(host, &args);
    }
    Ok(())
}

/// A worker loop's state between rounds.
struct WorkerState {
    steps: u64,
    rng: ChaCha8Rng,
    queue: DelayQueue,
    scratch: RouteScratch,
    tick: Duration,
    next_tick: Time,
    /// Records and log bytes already added to the cluster's counters.
    recorded: u64,
    logged: u64,
    /// Messages taken from the mailbox or sent to this worker's own machines, not yet queued.
    arrived: Vec<(Time, Envelope)>,
    spin_policy: SpinPolicy,
    /// Benchmark terminals this worker hosts ([`terminals`]) and the requests they just made.
    hosted: Vec<Box<dyn terminals::Hosted>>,
    requests: Vec<Envelope>,
}

impl WorkerState {
    fn new(router: &Router, seed: u64) -> WorkerState {
        let tick = Duration::from_millis(litmus_protocol::machine::TICK_INTERVAL_MS);
        WorkerState {
            steps: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            queue: DelayQueue::default(),
            scratch: RouteScratch::default(),
            tick,
            next_tick: router.now() + tick,
            recorded: 0,
            logged: 0,
            arrived: Vec::new(),
            spin_policy: SpinPolicy::default(),
            hosted: Vec::new(),
            requests: Vec::new(),
        }
    }

    /// Waits for a message or the next deadline and queues what arrived; `true` when the
    /// mailbox was poked (terminals may be waiting to be adopted).
    fn wait_for_messages(&mut self, inbox: &Inbox, router: &Router) -> bool {
        let now = router.now();
        let mut deadline = self.queue.next_at().map_or(self.next_tick, |at| at.min(self.next_tick));
        for h in &self.hosted {
            deadline = h.next_wake().map_or(deadline, |at| at.min(deadline));
        }
        // Wait for a message or the deadline (at most 50 ms so `stop` is noticed); messages
        // this worker sent itself are in `arrived` already and need no wait.
        let wait = if deadline > now && self.arrived.is_empty() {
            (deadline - now).min(Duration::from_millis(50))
        } else {
            Duration::ZERO
        };
        // Nothing queued for later: the gap ends with a message, and most come within
        // microseconds (`SPIN_BEFORE_SLEEP`).
        let spin = self.queue.next_at().is_none().then_some(&mut self.spin_policy);
        let poked = inbox.take_all(&mut self.arrived, wait, spin);
        for (at, env) in self.arrived.drain(..) {
            self.queue.push(at, env);
        }
        poked
    }

    /// Starts the terminals handed to this worker.
    fn adopt_terminals(&mut self, args: &WorkerArgs, now: Time) {
        let adopted = std::mem::take(&mut *args.router.adopt[args.me].lock().expect("adopt lock"));
        for mut h in adopted {
            h.start(now, &mut self.requests);
            self.hosted.push(h);
        }
    }

    /// Steps up to [`WORKER_BATCH_MAX`] messages due at `now`; returns how many.
    fn step_due(&mut self, host: &mut Host, now: Time) -> Result<usize, Error> {
        let mut stepped = 0;
        while stepped < WORKER_BATCH_MAX {
            let Some(env) = self.queue.pop_due(now) else { break };
            match env.to {
                Addr::Client(c) => {
                    if let Some(h) = self.hosted.iter_mut().find(|h| h.owns(c)) {
                        h.deliver(env, now, &mut self.requests);
                    }
                }
                to => host.step(now, to, Input::Message(env))?,
            }
            stepped += 1;
        }
        Ok(stepped)
    }

    /// Makes what the machines logged durable, then routes what that released and what the
    /// terminals asked.
    fn flush_and_route(&mut self, host: &mut Host, args: &WorkerArgs) -> Result<(), Error> {
        let (router, me) = (&args.router, args.me);
        if host.has_pending() {
            let mut out = host.flush()?;
            out.append(&mut self.requests);
            router.route_batch(me, &mut out, &mut self.arrived, &mut self.scratch, &mut self.rng);
            host.recycle(out);
        } else if !self.requests.is_empty() {
            router.route_batch(me, &mut self.requests, &mut self.arrived, &mut self.scratch, &mut self.rng);
        }
        Ok(())
    }

    /// Hands finished terminals back to the bench, forgetting their clients.
    fn hand_back_finished(&mut self, router: &Router) {
        if self.hosted.iter().any(|h| h.finished()) {
            for h in self.hosted.extract_if(.., |h| h.finished()) {
                let mut clients = router.clients.write().expect("clients lock");
                for c in h.clients() {
                    clients.remove(&ClientId(c));
                }
                drop(clients);
                h.hand_back();
            }
        }
    }

    /// Adds this round's records, log bytes and engine counts to the cluster's counters.
    fn publish(&mut self, host: &mut Host, args: &WorkerArgs) {
        let router = &args.router;
        let total = host.records_total();
        args.records.fetch_add(total - self.recorded, Ordering::Relaxed);
        self.recorded = total;
        let bytes = host.record_bytes_total();
        if bytes != self.logged {
            router.counters.log_bytes.fetch_add(bytes - self.logged, Ordering::Relaxed);
            self.logged = bytes;
        }
        let counts = host.take_counts();
        if !counts.is_empty() {
            let mut all = router.counters.engine.lock().expect("engine counts lock");
            for (name, n) in counts {
                *all.entry(name).or_default() += n;
            }
        }
    }
}

/// A client session of an embedded cluster.
pub struct EmbeddedTransport {
    session: ClientSession,
    rx: Arc<Inbox>,
    /// Responses taken from the mailbox and not looked at yet.
    received: std::collections::VecDeque<(Time, Envelope)>,
    batch: Vec<(Time, Envelope)>,
    router: Arc<Router>,
    rng: ChaCha8Rng,
}

impl Transport for EmbeddedTransport {
    fn request(&mut self, body: RequestBody) -> Result<ResponseBody, Error> {
        let (id, env) = self.session.request(self.router.now(), body);
        self.router.route(env, &mut self.rng);
        loop {
            let now = self.router.now();
            let deadline = self.session.tick(now);
            if let Some((rid, e)) = deadline.into_iter().find(|(rid, _)| *rid == id) {
                debug_assert_eq!(rid, id);
                return Err(e);
            }
            if self.received.is_empty() {
                if self.router.stopped.load(Ordering::Relaxed) {
                    return Err(Error::unavailable("cluster stopped"));
                }
                self.rx.take_all(&mut self.batch, Duration::from_millis(10), None);
                self.received.extend(self.batch.drain(..));
            }
            if let Some((at, env)) = self.received.pop_front() {
                // The network delay: hold the response until it is due.
                let now = self.router.now();
                if at > now {
                    std::thread::sleep(at - now);
                }
                if let Message::ClientResponse(resp) = env.msg {
                    if let Some((rid, result)) = self.session.on_response(resp) {
                        if rid == id {
                            return result;
                        }
                    }
                }
            }
        }
    }
}

impl Drop for EmbeddedTransport {
    fn drop(&mut self) {
        if let Ok(mut clients) = self.router.clients.write() {
            clients.remove(&self.session.id());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use litmus_core::NodeId;
    use litmus_protocol::Payload;

    fn env(n: u64) -> Envelope {
        let a = Addr::Coordinator(NodeId(0));
        Envelope { from: a, to: a, msg: Message::Role(Payload::new(n)) }
    }

    /// A reader that polls before it sleeps still gets every item, whether it arrives at once,
    /// while it polls, or after it gave up polling and went to sleep.
    #[test]
    fn a_spinning_reader_loses_no_item_and_still_sleeps_when_idle() {
        let mb: Arc<Mailbox<u32>> = Arc::new(Mailbox::new());
        let mut out = Vec::new();
        for delay_us in [0u64, 5, 50, 2_000] {
            let sender = mb.clone();
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_micros(delay_us));
                sender.push(delay_us as u32);
            });
            let started = Instant::now();
            while out.is_empty() {
                assert!(started.elapsed() < Duration::from_secs(10), "item sent after {delay_us} µs never arrived");
                mb.take_all(&mut out, Duration::from_secs(5), Some(&mut SpinPolicy::default()));
            }
            assert_eq!(std::mem::take(&mut out), vec![delay_us as u32]);
            t.join().unwrap();
        }
        // Drained, the flag is down, so the next idle reader polls before it sleeps; a poke
        // raises it like an item does.
        assert!(!mb.nonempty.load(Ordering::Relaxed));
        mb.poke();
        assert!(mb.nonempty.load(Ordering::Relaxed));
        assert!(mb.take_all(&mut out, Duration::from_secs(5), None), "the poke is reported");
        assert!(out.is_empty() && !mb.nonempty.load(Ordering::Relaxed));
    }

    /// A worker polls while polls catch messages; after `MISSES_MAX` misses in a row it sleeps
    /// at once, polling again once every `PROBE_EVERY` gaps, and one catch brings polling back.
    #[test]
    fn an_idle_worker_stops_polling_when_polls_keep_missing_and_probes_again() {
        let mut p = SpinPolicy::default();
        for _ in 0..100 {
            assert!(p.should_spin(), "polls that catch keep it polling");
            p.record(true);
        }
        for _ in 0..SpinPolicy::MISSES_MAX {
            assert!(p.should_spin());
            p.record(false);
        }
        let polled: Vec<bool> = (0..3 * SpinPolicy::PROBE_EVERY).map(|_| p.should_spin()).collect();
        let probes = polled.iter().filter(|&&x| x).count();
        assert_eq!(probes, 3, "one probe per {} gaps", SpinPolicy::PROBE_EVERY);
        assert!(polled[(SpinPolicy::PROBE_EVERY - 1) as usize] && !polled[0]);
        // A probe that catches something brings polling back at every gap.
        p.record(true);
        assert!((0..10).all(|_| p.should_spin()));
        // A probe that misses does not.
        p.record(false);
        for _ in 0..SpinPolicy::MISSES_MAX {
            p.record(false);
        }
        assert!(!p.should_spin());
    }

    fn drain(q: &mut DelayQueue, now: u64) -> Vec<String> {
        std::iter::from_fn(|| q.pop_due(Time(now))).map(|e| format!("{e:?}")).collect()
    }

    #[test]
    fn delay_queue_delivers_earliest_first_ties_in_arrival_order_and_nothing_early() {
        let mut q = DelayQueue::default();
        q.push(Time(30), env(3));
        q.push(Time(10), env(1));
        q.push(Time(30), env(4)); // same time as env(3), arrived later
        q.push(Time(20), env(2));
        assert_eq!(q.next_at(), Some(Time(10)));
        assert!(q.pop_due(Time(9)).is_none(), "nothing is delivered before it is due");
        assert_eq!(drain(&mut q, 20), [env(1), env(2)].map(|e| format!("{e:?}")));
        assert_eq!(drain(&mut q, 100), [env(3), env(4)].map(|e| format!("{e:?}")));
        assert_eq!(q.next_at(), None);
        // Slots are reused: the slab does not grow past the most messages ever waiting.
        for round in 0..3 {
            for i in 0..4 {
                q.push(Time(round), env(i));
            }
            assert_eq!(drain(&mut q, round).len(), 4);
        }
        assert_eq!((q.slots.len(), q.free.len()), (4, 4));
        assert!(q.slots.iter().all(Option::is_none));
    }

    #[test]
    fn a_worker_runs_whole_nodes_or_spreads_partitions_by_number() {
        let (c, p) = (|n| Addr::Coordinator(NodeId(n)), |n| Addr::Partition(litmus_core::PartitionId(n)));
        let topo = |nodes, parts| crate::Topology::new(nodes, parts).unwrap();
        // Node-ordered machines of 2 nodes and 4 partitions, as `ClusterSpec::machines_of` lists
        // them: each node whole on its own worker, so partitions 1 and 2 (TPC-C's warehouses 1
        // and 2) are on different workers, each with its node's coordinator.
        let addrs = [c(0), p(0), p(2), c(1), p(1), p(3)];
        assert_eq!(worker_placement(addrs.into_iter(), &topo(2, 4), 2), [0, 0, 0, 1, 1, 1]);
        // 3 nodes on 2 workers: nodes 0 and 2 share worker 0.
        let addrs = [c(0), p(0), p(3), c(1), p(1), p(4), c(2), p(2), p(5)];
        assert_eq!(worker_placement(addrs.into_iter(), &topo(3, 6), 2), [0, 0, 0, 1, 1, 1, 0, 0, 0]);
        // One node on 2 workers: its partitions by number, the coordinator on the first.
        let addrs = [c(0), p(0), p(1), p(2), p(3)];
        assert_eq!(worker_placement(addrs.into_iter(), &topo(1, 4), 2), [0, 0, 1, 0, 1]);
    }

    #[test]
    fn a_session_on_a_node_talks_to_that_nodes_coordinator() {
        let spec = ClusterSpec {
            engine: litmus_engines::ACID,
            topology: crate::Topology::new(3, 6).unwrap(),
            catalog: Arc::new(litmus_protocol::builtin::catalog()),
            registry: Arc::new(litmus_protocol::builtin::registry()),
            seed: 1,
        };
        let cluster = EmbeddedCluster::start(spec, EmbeddedConfig::default()).unwrap();
        let to = |t: EmbeddedTransport| t.session.coordinator();
        for n in 0..3 {
            assert_eq!(to(cluster.transport_on(NodeId(n))), Addr::Coordinator(NodeId(n)));
        }
        // The others round robin by session number: the 4th and 5th sessions, nodes 0 and 1.
        assert_eq!(to(cluster.transport()), Addr::Coordinator(NodeId(0)));
        assert_eq!(to(cluster.transport()), Addr::Coordinator(NodeId(1)));
    }
}
