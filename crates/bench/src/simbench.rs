//! # `litmus bench --runtime sim`: any workload on a simulated cluster, in virtual time
//!
//! The same [`Workload`] the embedded harness runs (prepare, generate, verify), on the
//! deterministic simulator ([`litmus_runtime::sim`]) with its CPU model on: every node has
//! `--cores-per-node` cores, every machine step costs what `litmus calibrate` measured
//! ([`litmus_runtime::cost`]), and the network is the embedded runtime's delay model (LAN
//! 100–250 µs by default, `--net-delay-us`). No faults, no clock skew.
//!
//! ```text
//!   Simulator (one thread) behind a mutex ◄── SimTransport (a Client's transport): prepare
//!   │                                          and verify go through ordinary clients, one
//!   │                                          request at a time (the loaders see serialises())
//!   └─ start_clients / advance(warmup) / advance(window) / drain ◄── Terminals (SimDriver):
//!        C simulated closed-loop clients, the harness's own terminal state machine
//!        ([`crate::terminal`]): a retry's backoff is a pause in virtual time, latency in virtual µs
//! ```
//!
//! What is reported is the harness's [`BenchReport`], marked [`Simulated`]: throughput and
//! latency in virtual time, the outcomes and the workload's verdict, `cpu` as simulated core
//! time per committed transaction, `msgs_per_txn` as delivered messages; and the simulator's own
//! cost (events, wall seconds, events per wall second). The same seed gives the same figures
//! (`same_seed_same_report` in `tests/simbench.rs`): clients draw from their own seeded streams
//! (client `i` uses stream `i`, as in the harness), loading runs one batch at a time, and the
//! simulator orders everything by virtual time and sequence.
//!
//! Clients are free: they live on their own host and cost no core (the embedded harness's
//! clients share the machine's CPU with the cluster; see README, "Simulated against real").
//!
//! Not implemented (yet): `--data-dir` (logs are the simulator's in-memory disks; a sync costs
//! `--sync-latency-us`), log bytes per transaction, faults during a benchmark.

use crate::harness::{self, BenchConfig, BenchError, BenchReport, Verdict};
use crate::terminal::{Control, KindTally, Terminals, TimeWindow};
use anyhow::Context as _;
use hdrhistogram::Histogram;
use litmus_client::Client;
use litmus_core::Error;
use litmus_protocol::builtin;
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_runtime::cost::CostTable;
use litmus_runtime::sim::{CpuModel, SimConfig, Simulator};
use litmus_runtime::{ClusterSpec, Transport};
use litmus_workloads::mix::Deck;
use litmus_workloads::workload::{RunStats, Workload};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most simulated clients.
pub const SIM_CLIENTS_MAX: usize = 100_000;
/// Bound on simulator events in one simulated benchmark.
pub const SIM_EVENTS_MAX: u64 = 20_000_000_000;

/// How `--runtime sim` runs.
#[derive(Clone, Debug, PartialEq)]
pub struct SimSettings {
    pub cores_per_node: u32,
    /// The cost table (`None`: the committed one).
    pub costs: Option<PathBuf>,
    /// Latency of one log sync, µs (the embedded default keeps logs in memory: 0).
    pub sync_latency_us: u64,
}

/// How a report was simulated (printed and in the JSON).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Simulated {
    pub cost_table: String,
    pub cores_per_node: u32,
    /// Simulator events over the whole run (load and verify included) and the wall time.
    pub events: u64,
    pub wall_secs: f64,
    pub events_per_wall_sec: f64,
    /// Virtual time the whole run took (load, warmup, window, drain, verify), seconds.
    pub virtual_secs: f64,
    /// Share of all nodes' cores busy over the measured window.
    pub core_utilisation: f64,
}

impl Simulated {
    /// The line `print_report` adds.
    pub fn line(&self) -> String {
        format!(
            "simulated: virtual time, cost table {}, {} cores per node, cores {:.0}% busy in the window | simulator: {} events in {:.1} s wall ({:.0} events/s), {:.1} virtual s",
            self.cost_table,
            self.cores_per_node,
            100.0 * self.core_utilisation,
            self.events,
            self.wall_secs,
            self.events_per_wall_sec,
            self.virtual_secs
        )
    }
}

/// A client of the simulated cluster: each request runs the simulator until it is answered.
struct SimTransport {
    sim: Arc<Mutex<Simulator>>,
}

impl Transport for SimTransport {
    fn request(&mut self, body: RequestBody) -> Result<ResponseBody, Error> {
        let mut sim = self.sim.lock().map_err(|_| Error::Internal("the simulator panicked".into()))?;
        sim.request(body)
    }
    fn serialises(&self) -> bool {
        true
    }
}

/// The simulator's configuration for a benchmark run.
fn sim_config(cfg: &BenchConfig, settings: &SimSettings, table: Arc<CostTable>) -> anyhow::Result<SimConfig> {
    let mut s = SimConfig::new(cfg.seed);
    let delay = cfg.delay();
    s.net.latency_min = delay.min;
    s.net.latency_max = delay.max;
    s.clock_skew_max = Duration::ZERO;
    s.fsync_latency = Duration::from_micros(settings.sync_latency_us);
    s.clients = cfg.clients;
    s.duration = cfg.warmup + cfg.duration;
    s.request_timeout = litmus_protocol::client::REQUEST_TIMEOUT_DEFAULT;
    s.cpu = Some(CpuModel::new(settings.cores_per_node, table)?);
    s.invariant_check_every = 0;
    s.events_max = SIM_EVENTS_MAX;
    s.hash_payloads = false;
    s.keep_logs = false;
    Ok(s)
}

/// The CPU cost table a simulated run charges (`--costs`, or the built-in one) and its name
/// for the report.
fn cost_table(settings: &SimSettings) -> anyhow::Result<(CostTable, String)> {
    let table = match &settings.costs {
        Some(path) => CostTable::load(path)?,
        None => CostTable::builtin(),
    };
    let table_name = match &settings.costs {
        Some(path) => format!("{} ({})", table.name, path.display()),
        None => table.name.clone(),
    };
    Ok((table, table_name))
}

/// The simulated cluster: the built-ins and the workload's tables and procedures.
fn cluster_spec(cfg: &BenchConfig, workload: &dyn Workload) -> anyhow::Result<ClusterSpec> {
    let mut catalog = builtin::catalog();
    catalog.merge(&workload.catalog());
    let mut registry = builtin::registry();
    workload.register(&mut registry);
    Ok(ClusterSpec {
        engine: cfg.engine,
        topology: cfg.topology()?,
        catalog: Arc::new(catalog),
        registry: Arc::new(registry),
        seed: cfg.seed,
    })
}

/// The terminals' tally as run statistics and per-kind latency histograms.
#[allow(clippy::type_complexity)] // the two halves of a run's record, named at the one call
fn tally_stats(
    cfg: &BenchConfig,
    tally: BTreeMap<&'static str, KindTally>,
    unfinished: u64,
) -> (RunStats, BTreeMap<&'static str, Histogram<u64>>) {
    let mut stats = RunStats { measured_secs: cfg.duration.as_secs_f64(), unfinished, ..RunStats::default() };
    let mut histograms: BTreeMap<&'static str, Histogram<u64>> = BTreeMap::new();
    for (kind, t) in tally {
        stats.measured.entry(kind).or_default().add(&t.measured);
        stats.total.entry(kind).or_default().add(&t.total);
        histograms.insert(kind, t.latency_us);
    }
    (stats, histograms)
}

/// Runs `workload` once on a simulated cluster as `cfg` says (`cfg.sim` must be set).
pub fn run(cfg: &BenchConfig, workload: Arc<dyn Workload>) -> anyhow::Result<BenchReport> {
    let terminals_workload = workload.clone();
    let workload = workload.as_ref();
    cfg.validate()?;
    harness::check_isolation(cfg, workload)?;
    let settings = cfg.sim.clone().ok_or_else(|| BenchError::Config("not a simulated run".into()))?;
    let (table, table_name) = cost_table(&settings)?;
    let spec = cluster_spec(cfg, workload)?;
    let wall = Instant::now();
    let mut sim_cfg = sim_config(cfg, &settings, Arc::new(table))?;
    // Each client on its home partition's node, as the embedded harness attaches it.
    sim_cfg.client_nodes = (0..cfg.clients as u64)
        .map(|i| workload.home_partition(i, cfg.partitions).map(|p| spec.topology.node_of(p)))
        .collect::<Option<Vec<_>>>()
        .unwrap_or_default();
    let sim = Simulator::new(spec, sim_cfg)?;
    let sim = Arc::new(Mutex::new(sim));
    let mut clients = || Ok(Client::new(Box::new(SimTransport { sim: sim.clone() })));
    workload.prepare(&mut clients).with_context(|| format!("prepare {} (simulated)", workload.name()))?;
    let load_secs = wall.elapsed().as_secs_f64();

    let spec_mix = workload.mix();
    let mut guard = sim.lock().map_err(|_| anyhow::anyhow!("the simulator panicked"))?;
    let start = guard.now();
    let measure_from = start + cfg.warmup;
    let until = measure_from + cfg.duration;
    let control = Arc::new(Control::new(None));
    let mut driver = Terminals::new(
        terminals_workload,
        spec_mix.as_ref().filter(|m| m.deck).map(|m| Arc::new(Deck::new(m, cfg.seed))),
        TimeWindow { measure_from, until },
        control.clone(),
        cfg.seed,
        &(0..cfg.clients).collect::<Vec<_>>(),
    );
    guard.start_clients(&mut driver);
    guard.advance(&mut driver, measure_from)?;
    let (busy_from, delivered_from) = (guard.report().cpu_busy_ns, guard.report().delivered);
    guard.advance(&mut driver, until)?;
    let (busy_to, delivered_to) = (guard.report().cpu_busy_ns, guard.report().delivered);
    let drain = harness::STRAGGLER_GRACE + litmus_protocol::client::REQUEST_TIMEOUT_DEFAULT;
    guard.drain(&mut driver, drain)?;
    drop(guard);
    if let Some(failed) = control.take_failure() {
        return Err(failed.into());
    }
    let (tally, unfinished) = driver.into_tally();

    let (stats, histograms) = tally_stats(cfg, tally, unfinished);
    let verify = match clients() {
        Err(e) => Verdict { ok: false, message: format!("{e:#}") },
        Ok(mut checker) => match workload.verify(&mut checker, &stats) {
            Ok(message) => Verdict { ok: true, message },
            Err(e) => Verdict { ok: false, message: format!("{e:#}") },
        },
    };
    let (events, virtual_secs) = {
        let g = sim.lock().map_err(|_| anyhow::anyhow!("the simulator panicked"))?;
        (g.report().events, g.now().0 as f64 / 1e9)
    };
    let wall_secs = wall.elapsed().as_secs_f64();

    let m = stats.measured_all();
    let busy = busy_to - busy_from;
    let core_ns = cfg.duration.as_nanos() as f64 * f64::from(cfg.nodes) * f64::from(settings.cores_per_node);
    let per_txn = |x: u64| (m.committed > 0).then(|| x as f64 / m.committed as f64);
    Ok(BenchReport {
        cpu_us_per_txn: per_txn(busy).map(|ns| ns / 1000.0),
        msgs_per_txn: per_txn(delivered_to - delivered_from),
        log_bytes_per_txn: None,
        engine_counts_per_txn: Default::default(),
        simulated: Some(Simulated {
            cost_table: table_name,
            cores_per_node: settings.cores_per_node,
            events,
            wall_secs,
            events_per_wall_sec: events as f64 / wall_secs.max(1e-9),
            virtual_secs,
            core_utilisation: if core_ns > 0.0 { busy as f64 / core_ns } else { 0.0 },
        }),
        ..BenchReport::of_run(workload, cfg, load_secs, &stats, &histograms, spec_mix, verify)?
    })
}

/// Where `litmus bench` runs the cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeKind {
    /// Threads in this process, real time (the default).
    #[default]
    Embedded,
    /// The deterministic simulator in virtual time, CPU charged from a measured cost table.
    Sim,
}

/// The flags of `litmus bench --runtime sim`.
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct SimOptions {
    /// Where the cluster runs: embedded (threads, real time) or sim (the deterministic
    /// simulator, virtual time, CPU costs measured by `litmus calibrate`; --duration and
    /// --warmup are virtual seconds; any client count up to 100000).
    #[arg(long, value_enum, default_value_t = RuntimeKind::Embedded)]
    pub runtime: RuntimeKind,

    /// --runtime sim: cores per simulated node.
    #[arg(long = "cores-per-node", value_name = "K", default_value_t = 4)]
    pub cores_per_node: u32,

    /// --runtime sim: the cost table (TOML from `litmus calibrate --out`). Default: the one
    /// committed with LitmusDB.
    #[arg(long, value_name = "TOML")]
    pub costs: Option<PathBuf>,

    /// --runtime sim: latency of one log sync in µs (default 0: the embedded default keeps
    /// logs in memory).
    #[arg(long = "sync-latency-us", value_name = "MICROS", default_value_t = 0)]
    pub sync_latency_us: u64,
}

impl SimOptions {
    /// The settings of a simulated run, or `None` on the embedded runtime.
    pub fn settings(&self) -> Option<SimSettings> {
        (self.runtime == RuntimeKind::Sim).then(|| SimSettings {
            cores_per_node: self.cores_per_node,
            costs: self.costs.clone(),
            sync_latency_us: self.sync_latency_us,
        })
    }
}
