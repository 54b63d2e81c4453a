//! # The closed-loop benchmark harness
//!
//! One run ([`run`]) of a [`Workload`] against one engine:
//!
//! ```text
//!   catalog = builtin ∪ workload.catalog()      registry = builtin ∪ workload.register()
//!   EmbeddedCluster::start (or --connect: clients dial running `litmus server`s, round robin,
//!     or a client with a home, Workload::home_partition, its home's server first)
//!   workload.prepare(clients)                    initial data, not timed as part of the run
//!   C terminals (crate::terminal), each: own session + ChaCha8Rng(seed, stream = index)
//!     embedded: hosted on the worker of its coordinator (EmbeddedCluster::start_terminals);
//!     --connect, calibrate: one blocking client thread each
//!     until warmup + duration:
//!       deal a kind from the shared deck (if the workload's mix has one) ─► generate
//!         ─► call ─► retryable error? pause (backoff), retry (policy) ─► record
//!   ├── warmup ──┼────────────── measured window (duration) ──────────────┤ stragglers
//!   workload.verify(client, RunStats)            the workload's invariant
//! ```
//!
//! **Closed loop**: each client has at most one transaction outstanding, so offered load adapts
//! to the system (throughput and latency are two views of the same run, Little's law).
//!
//! **What is measured.** A transaction belongs to the measured window when it *starts* inside
//! it (its kind is drawn then), and every transaction started inside it is waited for (the
//! stragglers), so none is dropped from the window and the kinds drawn in the window are the
//! kinds counted. Its latency runs from the first attempt to the final answer, retries and
//! backoff included (what a user waits), and is recorded for committed transactions only, per
//! kind, in an HDR histogram of microseconds (one per set of terminals, merged at the end).
//! Throughput is committed transactions of the window over the window's length.
//! [`RunStats::total`] counts the whole run for the invariant. A workload with a defined mix
//! ([`Workload::mix`]) gets the completed share of each kind and a verdict in
//! [`BenchReport::mix`] ([`litmus_workloads::mix`]); `cpu` is the process's user + system CPU time over
//! the window (`/proc/self/stat`, Linux only) per committed transaction — the embedded cluster
//! and the clients together; on an embedded cluster `msgs_per_txn` (messages routed: client
//! requests and responses and every message between machines) and `log_bytes_per_txn` (bytes
//! of log records, produced with or without a data directory) over the same window.
//!
//! **Retries.** An attempt failing with a retryable error ([`Error::is_retryable`]: a
//! concurrency-control abort, or an unavailable node that certainly did not run it) is retried
//! with jittered exponential backoff ([`BACKOFF_BASE_US`] doubling up to [`BACKOFF_MAX_US`]),
//! as the workload's [`RetryPolicy`] says: at most [`RETRIES_MAX`] times, then given up (the
//! default), or until it commits (TPC-C: a transaction still failing after the bound stops the
//! run with [`BenchError::Starved`]). Each retry tells the server how long the
//! transaction has been retrying ([`Client::call_retry`]), so it keeps its first attempt's
//! wait-die age and is not starved by newer transactions. A user abort or another error ends the
//! transaction at once. A rejection as invalid input ([`Error::Invalid`]) stops the whole run:
//! the same request would be rejected forever (for example the servers lack the procedures).
//!
//! **Bounded.** Every client call has a deadline (the client library's request timeout), so a
//! client finishes its last transaction within [`STRAGGLER_GRACE`] of the window's end (it
//! stops retrying then); the verification retries for at most [`VERIFY_GRACE`] in all. What did
//! not finish is reported: transactions cut off after the window (`unfinished`), outcome-unknown
//! errors, and the check that failed. SIGINT or SIGTERM ([`install_stop_handler`]) stops a run
//! in any phase — load, window, verify — within one request deadline; a second signal exits at
//! once.
//!
//! **Where the terminals run.** On the embedded cluster they run inside its worker threads, as
//! event-driven state machines next to their coordinators (no thread, no wake-up per response;
//! see [`litmus_runtime::embedded`]'s `terminals`), and their CPU is counted in `cpu:` as the
//! cluster's is. Against `--connect` servers, and under `litmus calibrate` (whose profile times
//! the workers' steps and must not include the terminals' logic), each terminal is a blocking
//! client thread. Both run the same state machine ([`crate::terminal`]), as `--runtime sim` does.
//! The live progress bar reads one atomic commit counter; a stop signal reaches the terminals
//! through it within one progress refresh, and each ends its transaction within a request
//! deadline.
//!
//! **Not measured / caveats.** Terminals share the machine with the embedded cluster, so on
//! few cores the numbers are a relative comparison between engines, not absolute capacity.
//! In `--connect` mode the servers' engine (announced in the TCP hello) must match `--engine`.

use crate::history::HistoryWriter;
use crate::terminal::{self, new_histogram, Control, TimeWindow};
use anyhow::Context as _;
use hdrhistogram::Histogram;
use litmus_client::Client;
use litmus_core::{Error, NodeId, Time};
use litmus_protocol::{builtin, EngineKind};
use litmus_runtime::embedded::{DelayModel, EmbeddedCluster, EmbeddedConfig};
use litmus_runtime::{ClusterSpec, Topology};
use litmus_storage::wal::FsyncPolicy;
pub use litmus_workloads::mix::LatencySummary;
use litmus_workloads::mix::{self, Deck, MixReport};
use litmus_workloads::setup::set_setup_deadline;
pub use litmus_workloads::setup::{
    backoff_cap_us, call_idempotent, install_stop_handler, join_loaders, load_in_batches, progress_bar, stop_requested,
    BACKOFF_BASE_US, BACKOFF_MAX_US, BAR_COUNTED, BAR_TIMED, LOAD_CLIENTS_MAX, LOAD_PROGRESS_ROWS_MIN, RETRIES_MAX,
    SETUP_RETRIES_MAX,
};
use litmus_workloads::workload::{Outcomes, RetryPolicy, RunStats, Workload};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// After the window, a transaction still retrying stops retrying after this long (each call
/// also ends by its own deadline, so a bench ends within this plus one request timeout).
pub const STRAGGLER_GRACE: Duration = Duration::from_secs(2);
/// The verification (every check call and its retries) gives up after this long.
pub const VERIFY_GRACE: Duration = Duration::from_secs(30);

/// Largest latency the histograms hold (larger values are clamped to it).
pub const LATENCY_US_MAX: u64 = 60_000_000;
/// Significant decimal digits of the latency histograms.
pub const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;
/// Most client threads.
pub const CLIENTS_MAX: usize = 1024;
/// Longest measured window or warmup.
pub const DURATION_MAX: Duration = Duration::from_secs(24 * 3600);
/// How often the live progress bar is redrawn.
pub const PROGRESS_REFRESH: Duration = Duration::from_millis(200);

/// Everything one run needs besides the workload itself.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchConfig {
    pub workload: String,
    pub engine: EngineKind,
    pub nodes: u32,
    pub partitions: u32,
    /// Replicas of each partition (1: not replicated).
    pub replicas: u32,
    pub clients: usize,
    /// Length of the measured window.
    pub duration: Duration,
    /// Load before the measured window, not counted.
    pub warmup: Duration,
    /// One-way network delay: `None` is the LAN default (100–250 µs), `Some(0)` none, `Some(x)`
    /// around `x` µs ±40%.
    pub net_delay_us: Option<u64>,
    pub seed: u64,
    /// Worker threads of the embedded cluster.
    pub workers: usize,
    /// Where the embedded cluster keeps its logs (`None`: in memory). Must be empty or absent.
    pub data_dir: Option<PathBuf>,
    pub fsync: FsyncPolicy,
    /// TCP mode: addresses of running `litmus server`s (no embedded cluster is started).
    pub connect: Option<Vec<String>>,
    /// Where to write the JSON report.
    pub json: Option<PathBuf>,
    /// No progress bars.
    pub quiet: bool,
    /// Run on the deterministic simulator in virtual time instead (`--runtime sim`).
    pub sim: Option<crate::simbench::SimSettings>,
    /// Write the run's transactions here as an Elle rw-register history ([`crate::history`]).
    pub history: Option<PathBuf>,
    /// With `connect`: empty the workload's tables before loading ([`litmus_workloads::reset`]).
    pub reset: bool,
    /// With `connect`: the cluster's shared token.
    pub token: Option<String>,
    /// With `connect`: TLS to the servers.
    pub tls: ClientTlsArgs,
}

/// A client's TLS flags (`litmus bench --connect`, `litmus shell`, `litmus dump`).
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTlsArgs {
    /// Connect over TLS, verifying the servers' certificates against this CA (PEM): the
    /// servers' `tls_ca`.
    #[arg(long, value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// A client certificate chain (PEM) to present, for servers with `tls_client_auth`.
    #[arg(long, value_name = "PEM", requires_all = ["tls_ca", "tls_key"])]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Verify the servers' certificates against this name instead of the host in their
    /// address (e.g. when connecting by IP to certificates issued for DNS names).
    #[arg(long, value_name = "NAME", requires = "tls_ca")]
    pub tls_server_name: Option<String>,
}

impl ClientTlsArgs {
    /// The TLS settings these flags ask for (`None`: plaintext), or a typed `Config` error
    /// naming a missing flag or a bad PEM file.
    pub fn load(&self) -> Result<Option<litmus_client::ClientTls>, litmus_core::Error> {
        use litmus_core::InvalidInput::Config;
        let name = self.tls_server_name.as_deref();
        match (&self.tls_ca, &self.tls_cert, &self.tls_key) {
            (None, None, None) if name.is_none() => Ok(None),
            (Some(ca), None, None) => Ok(Some(litmus_client::ClientTls::load(ca, None, name)?)),
            (Some(ca), Some(cert), Some(key)) => Ok(Some(litmus_client::ClientTls::load(ca, Some((cert, key)), name)?)),
            (None, ..) => {
                Err(Config("TLS flags without --tls-ca (the CA that signed the servers' certificates)".into()).into())
            }
            _ => Err(Config("--tls-cert and --tls-key go together".into()).into()),
        }
    }

    /// The credentials to connect with: `token` and these TLS settings.
    pub fn credentials(&self, token: Option<&str>) -> Result<litmus_client::Credentials, litmus_core::Error> {
        Ok(litmus_client::Credentials { token: token.map(str::to_string), tls: self.load()? })
    }
}

impl BenchConfig {
    /// The defaults of `litmus bench` for `workload` on `engine`.
    pub fn new(workload: &str, engine: EngineKind) -> BenchConfig {
        BenchConfig {
            workload: workload.into(),
            engine,
            nodes: 2,
            partitions: 4,
            replicas: 1,
            clients: 8,
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(1),
            net_delay_us: None,
            seed: 1,
            workers: 2,
            data_dir: None,
            fsync: FsyncPolicy::Never,
            connect: None,
            json: None,
            quiet: false,
            sim: None,
            history: None,
            reset: false,
            token: None,
            tls: ClientTlsArgs::default(),
        }
    }

    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |m: String| Err(BenchError::Config(m));
        let clients_max = if self.sim.is_some() { crate::simbench::SIM_CLIENTS_MAX } else { CLIENTS_MAX };
        if self.clients == 0 || self.clients > clients_max {
            return bad(format!("clients must be in 1..={clients_max}, got {}", self.clients));
        }
        if self.sim.is_some() && self.connect.is_some() {
            return bad("--runtime sim simulates its own cluster; it cannot --connect".into());
        }
        if self.duration.is_zero() || self.duration > DURATION_MAX {
            return bad(format!("duration must be in (0, {}] s, got {:?}", DURATION_MAX.as_secs(), self.duration));
        }
        if self.warmup > DURATION_MAX {
            return bad(format!("warmup must be at most {} s, got {:?}", DURATION_MAX.as_secs(), self.warmup));
        }
        if self.sim.is_some() && self.history.is_some() {
            return bad("--history records real runs; it cannot run with --runtime sim".into());
        }
        if self.reset && self.connect.is_none() {
            return bad("--reset empties running servers' tables; it needs --connect".into());
        }
        if let Some(addrs) = &self.connect {
            if addrs.is_empty() || addrs.iter().any(|a| a.trim().is_empty()) {
                return bad("--connect needs a comma-separated list of host:port addresses".into());
            }
        } else {
            self.topology().map_err(|e| BenchError::Config(e.to_string()))?;
        }
        Ok(())
    }

    /// The cluster's layout: nodes, partitions and replicas.
    pub fn topology(&self) -> Result<Topology, litmus_core::InvalidInput> {
        Topology::new(self.nodes, self.partitions)?.with_replicas(self.replicas)
    }

    /// The embedded cluster's network delay model.
    pub fn delay(&self) -> DelayModel {
        match self.net_delay_us {
            None => DelayModel::LAN,
            Some(0) => DelayModel::NONE,
            Some(us) => DelayModel::around_micros(us),
        }
    }

    fn delay_label(&self) -> String {
        if self.connect.is_some() {
            return "real network".into();
        }
        let d = self.delay();
        if d == DelayModel::NONE {
            "none".into()
        } else {
            format!("{}-{}µs", d.min.as_micros(), d.max.as_micros())
        }
    }
}

/// Failures of the harness itself (engine and I/O errors pass through as they are).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("invalid benchmark configuration: {0}")]
    Config(String),
    #[error("the database rejected a {kind} transaction ({procedure}) as invalid input; stopping, since every retry would be rejected too: {error}")]
    Rejected { kind: &'static str, procedure: &'static str, error: Error },
    #[error("verification failed: {0}")]
    Verify(String),
    #[error("cannot record the history: {0}")]
    History(String),
    #[error("a {kind} transaction ({procedure}) could not commit in {waited_secs:.1} s ({attempts} attempts, last: {last}); the run cannot measure the workload's mix without it")]
    Starved { kind: &'static str, procedure: &'static str, waited_secs: f64, attempts: u64, last: Error },
}

/// The settings a report was produced with (flat, for JSON consumers).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReportConfig {
    pub nodes: u32,
    pub partitions: u32,
    pub replicas: u32,
    pub clients: usize,
    pub duration_secs: f64,
    pub warmup_secs: f64,
    pub net_delay: String,
    pub net_delay_us: Option<u64>,
    pub seed: u64,
    pub workers: usize,
    pub data_dir: Option<String>,
    pub fsync: String,
    pub connect: Option<Vec<String>>,
}

impl ReportConfig {
    pub(crate) fn of(cfg: &BenchConfig) -> ReportConfig {
        ReportConfig {
            nodes: cfg.nodes,
            partitions: cfg.partitions,
            replicas: cfg.replicas,
            clients: cfg.clients,
            duration_secs: cfg.duration.as_secs_f64(),
            warmup_secs: cfg.warmup.as_secs_f64(),
            net_delay: cfg.delay_label(),
            net_delay_us: cfg.net_delay_us,
            seed: cfg.seed,
            workers: cfg.workers,
            data_dir: cfg.data_dir.as_ref().map(|d| d.display().to_string()),
            // Against servers, their configs decide; the local flag means nothing there.
            fsync: match (&cfg.connect, cfg.fsync) {
                (Some(_), _) => "as the servers are configured".into(),
                (None, FsyncPolicy::Always) => "always".into(),
                (None, FsyncPolicy::Never) => "never".into(),
            },
            connect: cfg.connect.clone(),
        }
    }
}

/// The workload's verdict on its invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub ok: bool,
    pub message: String,
}

/// The result of one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchReport {
    pub workload: String,
    pub workload_settings: String,
    pub engine: String,
    pub engine_guarantee: String,
    pub config: ReportConfig,
    /// Time spent loading the initial data.
    pub load_secs: f64,
    /// Length of the measured window.
    pub measured_secs: f64,
    /// Committed transactions in the measured window.
    pub committed: u64,
    /// Committed transactions per second over the measured window.
    pub throughput: f64,
    /// Per kind of transaction.
    pub latency: BTreeMap<String, LatencySummary>,
    /// Every kind merged (what a sweep's table and figure show).
    pub latency_all: LatencySummary,
    /// Per kind of transaction, the outcomes over the measured window (abort rates per kind).
    pub outcomes: BTreeMap<String, Outcomes>,
    /// Outcome counts over the measured window (see [`Outcomes`]).
    pub aborts: u64,
    pub retries: u64,
    pub gave_up: u64,
    pub user_aborts: u64,
    pub errors: u64,
    pub outcome_unknown: u64,
    /// Transactions still retrying when the window (plus [`STRAGGLER_GRACE`]) ended or a stop
    /// signal came: given up, not counted as committed or aborted.
    pub unfinished: u64,
    /// The completed mix and its verdict, for a workload that defines one.
    pub mix: Option<MixReport>,
    /// Process CPU time (user + system) over the measured window per committed transaction,
    /// µs; `None` where `/proc/self/stat` cannot be read or nothing committed.
    pub cpu_us_per_txn: Option<f64>,
    /// Messages routed over the measured window per committed transaction (client requests
    /// and responses included); `None` against `--connect` servers or when nothing committed.
    pub msgs_per_txn: Option<f64>,
    /// Bytes of log records produced over the measured window per committed transaction;
    /// `None` against `--connect` servers or when nothing committed.
    pub log_bytes_per_txn: Option<f64>,
    /// Events the engine counted over the measured window per committed transaction, by name
    /// (e.g. `granola.conflict_retries`: CONFLICTs its client proxy retried, which no client
    /// sees); empty against `--connect` servers and for engines that count nothing.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub engine_counts_per_txn: BTreeMap<String, f64>,
    pub verify: Verdict,
    /// Set when the figures are simulated (`--runtime sim`): virtual time, and how.
    pub simulated: Option<crate::simbench::Simulated>,
}

/// Runs `workload` once as configured: a fresh embedded cluster (or the `--connect` servers),
/// load, warmup, measured window, verify. A failed verification is reported in the returned
/// report's [`BenchReport::verify`], not as an `Err`; errors are failures to run at all.
pub fn run(cfg: &BenchConfig, workload: Arc<dyn Workload>) -> anyhow::Result<BenchReport> {
    if cfg.sim.is_some() {
        return crate::simbench::run(cfg, workload);
    }
    run_embedded(cfg, workload, None)
}

/// [`run`] on the embedded cluster with every worker's step CPU time measured into `profile`
/// (`litmus calibrate`).
pub fn run_profiled(
    cfg: &BenchConfig,
    workload: Arc<dyn Workload>,
    profile: Arc<litmus_runtime::cost::CostProfile>,
) -> anyhow::Result<BenchReport> {
    run_embedded(cfg, workload, Some(profile))
}

/// Refuses a workload that needs isolation on an engine without it (see
/// [`Workload::needs_isolation`]).
pub(crate) fn check_isolation(cfg: &BenchConfig, workload: &dyn Workload) -> Result<(), BenchError> {
    if let Some((needed, why)) = workload.needs_isolation() {
        if !cfg.engine.capabilities().guarantee.covers(needed) {
            let safe: Vec<&str> = litmus_engines::ALL
                .iter()
                .filter(|e| e.capabilities().guarantee.covers(needed))
                .map(|e| e.name())
                .collect();
            return Err(BenchError::Config(format!(
                "engine {} provides {}, and {} needs at least {}: {why}. Choose one of: {}",
                cfg.engine.name(),
                cfg.engine.guarantee(),
                workload.name(),
                needed.label(),
                safe.join(", ")
            )));
        }
    }
    Ok(())
}

fn run_embedded(
    cfg: &BenchConfig,
    shared_workload: Arc<dyn Workload>,
    profile: Option<Arc<litmus_runtime::cost::CostProfile>>,
) -> anyhow::Result<BenchReport> {
    let workload = shared_workload.as_ref();
    cfg.validate()?;
    check_isolation(cfg, workload)?;
    if let Some(addrs) = &cfg.connect {
        let auth = cfg.tls.credentials(cfg.token.as_deref())?;
        // The client of address `first`'s coordinator, the others to fail over to.
        let dial = |first: usize| {
            let order: Vec<String> = (0..addrs.len()).map(|i| addrs[(first + i) % addrs.len()].clone()).collect();
            let client = Client::connect_any_with(&order, &auth)?;
            match client.server_engine() {
                Some(e) if e != cfg.engine.name() => {
                    Err(litmus_core::Error::Invalid(litmus_core::InvalidInput::Config(format!(
                        "server {} runs engine {e}, but the benchmark asked for {}",
                        addrs[first],
                        cfg.engine.name()
                    ))))
                }
                _ => Ok(client),
            }
        };
        let next = std::cell::Cell::new(0usize);
        let mut connect = || {
            let i = next.get();
            next.set(i + 1);
            dial(i % addrs.len())
        };
        let probe = |a: usize| Client::connect_any_with(std::slice::from_ref(&addrs[a]), &auth);
        let homes = home_addresses(workload, cfg.clients, addrs.len(), &probe);
        let session = |i: usize| dial(homes.as_ref().map_or(i, |h| h[i]) % addrs.len());
        return drive(cfg, &shared_workload, &mut connect, Hosting::Threads(Some(&session)), &|| None);
    }
    if let Some(dir) = &cfg.data_dir {
        let occupied = std::fs::read_dir(dir).map(|mut d| d.next().is_some()).unwrap_or(false);
        if occupied {
            return Err(BenchError::Config(format!(
                "data directory {} is not empty (the cluster would recover an old run's data); remove it or pick another",
                dir.display()
            ))
            .into());
        }
    }
    let mut catalog = builtin::catalog();
    catalog.merge(&workload.catalog());
    let mut registry = builtin::registry();
    workload.register(&mut registry);
    let spec = ClusterSpec {
        engine: cfg.engine,
        topology: cfg.topology()?,
        catalog: Arc::new(catalog),
        registry: Arc::new(registry),
        seed: cfg.seed,
    };
    let embedded = EmbeddedConfig {
        workers: cfg.workers,
        delay: cfg.delay(),
        data_dir: cfg.data_dir.clone(),
        fsync: cfg.fsync,
        profile: profile.clone(),
        ..EmbeddedConfig::default()
    };
    let cluster = EmbeddedCluster::start(spec, embedded).context("start the embedded cluster")?;
    let mut attach = || Ok(Client::new(Box::new(cluster.transport())));
    let counters = || {
        // Sampled when the measured window opens and when it closes: the profile's edges.
        if let Some(p) = &profile {
            p.window_edge();
        }
        Some(Cost {
            msgs: cluster.messages_total(),
            log_bytes: cluster.log_bytes_total(),
            engine: cluster.engine_counts(),
        })
    };
    // Benchmark client i on its home partition's node when the workload gives it one, else on
    // node i mod nodes, as in the simulator (`--home-routing`).
    let topology = cfg.topology()?;
    let home = |i: usize| match workload.home_partition(i as u64, cfg.partitions) {
        Some(p) => topology.node_of(p),
        None => NodeId((i % cfg.nodes as usize) as u32),
    };
    let session = |i: usize| Ok(Client::new(Box::new(cluster.transport_on(home(i)))));
    // The terminals run on the workers, next to their coordinators ([`crate::terminal`]);
    // `litmus calibrate` keeps client threads: its profile measures the workers' steps alone.
    let terminals = match profile {
        Some(_) => Hosting::Threads(Some(&session)),
        None => Hosting::Hosted(&cluster, (0..cfg.clients).map(home).collect()),
    };
    let report = drive(cfg, &shared_workload, &mut attach, terminals, &counters);
    cluster.shutdown().context("a cluster worker failed")?;
    report
}

/// With `--connect`: the address each benchmark client dials first, when the workload gives
/// its clients a home ([`Workload::home_partition`]): the server of the home partition's node,
/// learnt from each server's hello (`probe` connects to address `a` alone; a server that does
/// not answer is left out). `None` when it gives none: clients then go round robin, and no
/// server is probed (a workload that gives homes gives one on any layout, one partition too).
fn home_addresses(
    workload: &dyn Workload,
    clients: usize,
    addrs: usize,
    probe: &dyn Fn(usize) -> Result<Client, Error>,
) -> Option<Vec<usize>> {
    workload.home_partition(0, 1)?;
    let layouts: Vec<_> = (0..addrs).map(|a| probe(a).ok().and_then(|c| c.server_layout())).collect();
    let topology = layouts.iter().flatten().map(|&(_, t)| t).next()?;
    workload.home_partition(0, topology.partitions)?;
    let nodes: Vec<Option<NodeId>> = layouts.iter().map(|l| l.map(|(node, _)| node)).collect();
    Some((0..clients).map(|i| home_address(workload, &topology, &nodes, i)).collect())
}

/// The address client `i` dials first: one whose server is its home partition's node, else
/// `i` (round robin).
fn home_address(workload: &dyn Workload, topology: &Topology, nodes: &[Option<NodeId>], i: usize) -> usize {
    workload
        .home_partition(i as u64, topology.partitions)
        .map(|p| topology.node_of(p))
        .and_then(|n| nodes.iter().position(|&m| m == Some(n)))
        .unwrap_or(i)
}

/// The measured window.
#[derive(Clone, Copy)]
struct Window {
    measure_from: Instant,
    until: Instant,
}

/// USER_HZ: the unit of `/proc/<pid>/stat`'s CPU times on Linux, fixed by its ABI.
const PROC_TICKS_PER_SEC: u64 = 100;

/// The process's CPU time so far (user + system), µs; `None` where `/proc/self/stat` is absent.
fn process_cpu_us() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces, so split after its ')'): state is
    // field 3, utime 14 and stime 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) * 1_000_000 / PROC_TICKS_PER_SEC)
}

/// The cluster's running totals that a report divides by committed transactions.
#[derive(Clone, Debug, Default)]
struct Cost {
    msgs: u64,
    log_bytes: u64,
    /// Events the engines counted (`CoordCtx::count`), by name.
    engine: BTreeMap<&'static str, u64>,
}

/// What the measured window cost: process CPU time (µs) and the cluster's totals.
#[derive(Clone, Debug, Default)]
struct WindowCost {
    cpu_us: Option<u64>,
    cluster: Option<Cost>,
}

/// Where a run's terminals ([`crate::terminal`]) run.
enum Hosting<'a> {
    /// One blocking client thread per terminal, on the session `open(i)` gives terminal `i`
    /// (`None`: the next of `clients`).
    Threads(Option<&'a dyn Fn(usize) -> Result<Client, Error>>),
    /// On the embedded cluster's workers, terminal `i` attached to node `nodes[i]`'s coordinator.
    Hosted(&'a EmbeddedCluster, Vec<NodeId>),
}

/// `--reset` (with `--connect`), then the workload's initial data; the seconds loading took.
fn load(
    cfg: &BenchConfig,
    workload: &dyn Workload,
    clients: &mut dyn FnMut() -> Result<Client, Error>,
) -> anyhow::Result<f64> {
    if cfg.reset {
        let tables: Vec<String> = workload.catalog().tables().map(|t| t.name.clone()).collect();
        let mut client = clients().context("open the reset client")?;
        let deleted = litmus_workloads::reset::reset(&mut client, &tables).context("--reset")?;
        if !cfg.quiet {
            let list: Vec<String> = deleted.iter().map(|(t, n)| format!("{t} {n}")).collect();
            eprintln!("reset: rows deleted: {}", list.join(", "));
        }
    }
    let load_started = Instant::now();
    workload.prepare(clients).with_context(|| format!("prepare {}", workload.name()))?;
    let load_secs = load_started.elapsed().as_secs_f64();
    Ok(load_secs)
}

/// The `--history` writer and the process count after which its ids start, if asked for.
fn open_history(cfg: &BenchConfig, workload: &dyn Workload) -> anyhow::Result<Option<(HistoryWriter, u64)>> {
    Ok(match &cfg.history {
        None => None,
        Some(_) if !workload.records_history() => {
            return Err(BenchError::Config(format!("{} cannot record a --history (ycsb-t can)", workload.name())).into())
        }
        Some(path) => {
            let file = std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
            Some((HistoryWriter::new(Box::new(std::io::BufWriter::new(file))), cfg.clients as u64))
        }
    })
}

/// The terminals' tallies summed: outcomes per kind and the merged latency histograms.
#[allow(clippy::type_complexity)] // the two halves of a run's record, named at the one call
fn merge_tallies(
    cfg: &BenchConfig,
    tallies: Vec<terminal::Terminals>,
) -> anyhow::Result<(RunStats, BTreeMap<&'static str, Histogram<u64>>)> {
    let mut stats = RunStats { measured_secs: cfg.duration.as_secs_f64(), ..RunStats::default() };
    let mut histograms: BTreeMap<&'static str, Histogram<u64>> = BTreeMap::new();
    for (tally, unfinished) in tallies.into_iter().map(terminal::Terminals::into_tally) {
        stats.unfinished += unfinished;
        for (kind, t) in tally {
            stats.measured.entry(kind).or_default().add(&t.measured);
            stats.total.entry(kind).or_default().add(&t.total);
            histograms.entry(kind).or_insert_with(new_histogram).add(&t.latency_us).context("merge histograms")?;
        }
    }
    Ok((stats, histograms))
}

/// The workload's verify on a fresh client, its setup calls bounded by [`VERIFY_GRACE`].
fn verify_run(
    workload: &dyn Workload,
    clients: &mut dyn FnMut() -> Result<Client, Error>,
    stats: &RunStats,
) -> Verdict {
    let verify_started = Instant::now();
    set_setup_deadline(Some(verify_started + VERIFY_GRACE));
    let verdict = match clients().context("open the verification client") {
        Err(e) => Verdict { ok: false, message: format!("{e:#}") },
        Ok(mut checker) => match workload.verify(&mut checker, stats) {
            Ok(message) => Verdict { ok: true, message },
            Err(e) => Verdict {
                ok: false,
                message: format!("{e:#} (verification gave up after {:.1} s)", verify_started.elapsed().as_secs_f64()),
            },
        },
    };
    set_setup_deadline(None);
    verdict
}

impl BenchReport {
    /// The report with what the window cost per committed transaction (of `committed`).
    fn with_cost(mut self, cost: &WindowCost, committed: u64) -> BenchReport {
        self.cpu_us_per_txn = cost.cpu_us.filter(|_| committed > 0).map(|c| c as f64 / committed as f64);
        let cluster = cost.cluster.as_ref().filter(|_| committed > 0);
        self.msgs_per_txn = cluster.map(|c| c.msgs as f64 / committed as f64);
        self.log_bytes_per_txn = cluster.map(|c| c.log_bytes as f64 / committed as f64);
        self.engine_counts_per_txn = cluster
            .map(|c| c.engine.iter().map(|(name, n)| (name.to_string(), *n as f64 / committed as f64)).collect())
            .unwrap_or_default();
        self
    }
}

/// How long hosted terminals may take beyond their own bounds before the run is declared stuck.
const HOSTED_SLACK: Duration = Duration::from_secs(10);

/// How long hosted terminals get after the window: each ends its last transaction within the
/// grace (a retrying TPC-C terminal: within its starvation bound) plus one request deadline.
fn hosted_bound(workload: &dyn Workload) -> Duration {
    let starving = match workload.retry_policy() {
        RetryPolicy::UntilCommitted { bound } => bound,
        RetryPolicy::GiveUpAfter { .. } => Duration::ZERO,
    };
    STRAGGLER_GRACE + starving + litmus_protocol::client::REQUEST_TIMEOUT_DEFAULT + HOSTED_SLACK
}

fn drive(
    cfg: &BenchConfig,
    shared_workload: &Arc<dyn Workload>,
    clients: &mut dyn FnMut() -> Result<Client, Error>,
    mode: Hosting<'_>,
    counters: &dyn Fn() -> Option<Cost>,
) -> anyhow::Result<BenchReport> {
    let workload = shared_workload.as_ref();
    install_stop_handler();
    set_setup_deadline(None);
    let load_secs = load(cfg, workload, clients)?;

    let history = open_history(cfg, workload)?;
    let control = Arc::new(Control::new(history));
    let spec = workload.mix();
    let deck = spec.as_ref().filter(|m| m.deck).map(|m| Arc::new(Deck::new(m, cfg.seed)));
    let make = |window: TimeWindow, indices: &[usize]| {
        terminal::Terminals::new(shared_workload.clone(), deck.clone(), window, control.clone(), cfg.seed, indices)
    };
    // The window on the terminals' clock, opening `cfg.warmup` after `zero`.
    let time_window =
        |zero: Time| TimeWindow { measure_from: zero + cfg.warmup, until: zero + cfg.warmup + cfg.duration };

    let (tallies, cost) = match mode {
        Hosting::Threads(session) => {
            let mut sessions = Vec::with_capacity(cfg.clients);
            for i in 0..cfg.clients {
                let client = match session {
                    Some(open) => open(i),
                    None => clients(),
                };
                sessions.push(client.context("open a benchmark client")?);
            }
            let start = Instant::now();
            let window = Window { measure_from: start + cfg.warmup, until: start + cfg.warmup + cfg.duration };
            let clock = move || Time(start.elapsed().as_nanos() as u64);
            let tw = time_window(Time::ZERO);
            std::thread::scope(|s| -> anyhow::Result<(Vec<terminal::Terminals>, WindowCost)> {
                let mut handles = Vec::with_capacity(sessions.len());
                for (i, client) in sessions.iter_mut().enumerate() {
                    let mut one = make(tw, &[i]);
                    let handle = std::thread::Builder::new()
                        .name(format!("bench-client-{i}"))
                        .spawn_scoped(s, move || {
                            one.run_blocking(0, client, &clock);
                            one
                        })
                        .context("spawn a client thread")?;
                    handles.push(handle);
                }
                let cost = show_progress(cfg, window, &control, counters);
                if stop_requested() {
                    control.stop.store(true, Ordering::Relaxed);
                }
                let mut tallies = Vec::with_capacity(handles.len());
                for h in handles {
                    tallies.push(h.join().map_err(|_| anyhow::anyhow!("a client thread panicked"))?);
                }
                Ok((tallies, cost))
            })?
        }
        Hosting::Hosted(cluster, nodes) => {
            let (start, zero) = (Instant::now(), cluster.now());
            let window = Window { measure_from: start + cfg.warmup, until: start + cfg.warmup + cfg.duration };
            let tw = time_window(zero);
            let run = cluster.start_terminals(&nodes, |indices| make(tw, indices));
            let cost = show_progress(cfg, window, &control, counters);
            if stop_requested() {
                control.stop.store(true, Ordering::Relaxed);
            }
            (run.wait(hosted_bound(workload)).context("the benchmark terminals")?, cost)
        }
    };
    if let Some(failure) = control.take_failure() {
        return Err(failure.into());
    }
    if let (Some(history), Some(path)) = (control.history(), &cfg.history) {
        history.flush().with_context(|| format!("write {}", path.display()))?;
    }

    let (stats, histograms) = merge_tallies(cfg, tallies)?;

    if stop_requested() {
        anyhow::bail!(
            "stopped by a signal ({} committed, {} unfinished); not verified",
            stats.total_all().committed,
            stats.unfinished
        );
    }
    let verify = verify_run(workload, clients, &stats);

    let report = BenchReport::of_run(workload, cfg, load_secs, &stats, &histograms, spec, verify)?;
    Ok(report.with_cost(&cost, stats.measured_all().committed))
}

impl BenchReport {
    /// The report of a finished run, from what every runner (embedded, `--connect`, simulated)
    /// collects: per-kind outcomes and latencies over the measured window, the mix verdict, the
    /// workload's verify. The cost fields and `simulated` are the runner's to fill in.
    pub(crate) fn of_run(
        workload: &dyn Workload,
        cfg: &BenchConfig,
        load_secs: f64,
        stats: &RunStats,
        histograms: &BTreeMap<&'static str, Histogram<u64>>,
        spec: Option<litmus_workloads::mix::MixSpec>,
        verify: Verdict,
    ) -> anyhow::Result<BenchReport> {
        let mut all = new_histogram();
        for h in histograms.values() {
            all.add(h).context("merge histograms")?;
        }
        let m = stats.measured_all();
        let latency: BTreeMap<String, LatencySummary> =
            histograms.iter().map(|(k, h)| (k.to_string(), LatencySummary::of(h))).collect();
        let outcomes: BTreeMap<String, Outcomes> = stats.measured.iter().map(|(k, o)| (k.to_string(), *o)).collect();
        let mix = spec.map(|spec| mix::verdict(&spec, &outcomes, &latency, stats.measured_secs));
        Ok(BenchReport {
            workload: workload.name().into(),
            workload_settings: workload.describe(),
            engine: cfg.engine.name().into(),
            engine_guarantee: cfg.engine.guarantee().into(),
            config: ReportConfig::of(cfg),
            load_secs,
            measured_secs: stats.measured_secs,
            committed: m.committed,
            throughput: m.committed as f64 / stats.measured_secs,
            latency,
            latency_all: LatencySummary::of(&all),
            outcomes,
            aborts: m.aborts,
            retries: m.retries,
            gave_up: m.gave_up,
            user_aborts: m.user_aborts,
            errors: m.errors,
            outcome_unknown: m.outcome_unknown,
            unfinished: stats.unfinished,
            mix,
            cpu_us_per_txn: None,
            msgs_per_txn: None,
            log_bytes_per_txn: None,
            engine_counts_per_txn: BTreeMap::new(),
            verify,
            simulated: None,
        })
    }
}

/// The live progress bar: elapsed time and throughput over the last refresh interval. Returns
/// when the window ends or the run is stopped, with the process CPU time spent in the window
/// (µs; `None` when stopped early or unreadable) and what `counters` counted in it.
fn show_progress(
    cfg: &BenchConfig,
    window: Window,
    shared: &Control,
    counters: &dyn Fn() -> Option<Cost>,
) -> WindowCost {
    let sample = || (process_cpu_us(), counters());
    let started = Instant::now();
    let total_ms = (window.until - started).as_millis() as u64;
    let bar = progress_bar(total_ms.max(1), "warmup", BAR_TIMED, cfg.quiet);
    let (mut last_at, mut last_committed) = (started, 0u64);
    // CPU time when the window began (`None` until it has).
    let mut cpu_from: Option<(Option<u64>, Option<Cost>)> = (started >= window.measure_from).then(sample);
    let mut stopped = false;
    loop {
        let now = Instant::now();
        if shared.stop.load(Ordering::Relaxed) || stop_requested() {
            stopped = true;
            break;
        }
        if now >= window.until {
            break;
        }
        let next = if cpu_from.is_none() { window.measure_from } else { window.until };
        std::thread::sleep(PROGRESS_REFRESH.min(next.saturating_duration_since(now)));
        let (at, committed) = (Instant::now(), shared.committed.load(Ordering::Relaxed));
        if cpu_from.is_none() && at >= window.measure_from {
            cpu_from = Some(sample());
        }
        let rate = (committed - last_committed) as f64 / (at - last_at).as_secs_f64().max(1e-6);
        (last_at, last_committed) = (at, committed);
        bar.set_prefix(if at < window.measure_from { "warmup" } else { "run" });
        bar.set_position(((at - started).as_millis() as u64).min(total_ms));
        bar.set_message(format!("{rate:.0} txn/s"));
    }
    bar.finish_and_clear();
    let (cpu_to, cluster_to) = sample();
    let Some((cpu_from, cluster_from)) = cpu_from.filter(|_| !stopped) else { return WindowCost::default() };
    WindowCost {
        cpu_us: cpu_to.zip(cpu_from).map(|(to, from)| to.saturating_sub(from)),
        cluster: cluster_to.zip(cluster_from).map(|(to, from)| Cost {
            msgs: to.msgs.saturating_sub(from.msgs),
            log_bytes: to.log_bytes.saturating_sub(from.log_bytes),
            engine: to
                .engine
                .iter()
                .map(|(name, n)| (*name, n.saturating_sub(from.engine.get(name).copied().unwrap_or(0))))
                .collect(),
        }),
    }
}

/// Prints a report as a human table.
pub fn print_report(out: &mut dyn Write, r: &BenchReport) -> std::io::Result<()> {
    let c = &r.config;
    let place = match (&c.connect, &r.simulated) {
        (Some(addrs), _) => format!("servers {}", addrs.join(",")),
        (None, Some(s)) => format!(
            "SIMULATED {} nodes x {} cores, {} partitions, cost table {}",
            c.nodes, s.cores_per_node, c.partitions, s.cost_table
        ),
        (None, None) => {
            let replicas = if c.replicas > 1 { format!(" x {} replicas", c.replicas) } else { String::new() };
            format!("{} nodes, {} partitions{replicas}, {} workers", c.nodes, c.partitions, c.workers)
        }
    };
    writeln!(
        out,
        "{} on {}: {place}, {} clients, {:.1} s (+{:.1} s warmup), net delay {}, fsync {}, seed {}",
        r.workload, r.engine, c.clients, c.duration_secs, c.warmup_secs, c.net_delay, c.fsync, c.seed
    )?;
    writeln!(out, "  workload: {}", r.workload_settings)?;
    writeln!(out, "  engine guarantee: {}", r.engine_guarantee)?;
    writeln!(out, "  loaded in {:.2} s", r.load_secs)?;
    let marked = r.simulated.as_ref().map_or(String::new(), |s| format!(" (simulated, cost table {})", s.cost_table));
    writeln!(
        out,
        "throughput: {:.1} txn/s{marked} ({} committed in {:.2} s)",
        r.throughput, r.committed, r.measured_secs
    )?;
    if let Some(pm) = r.mix.as_ref().and_then(|m| m.per_minute.as_ref()) {
        writeln!(
            out,
            "{}: {:.0} ({} completed per minute, beside {:.1} txn/s)",
            pm.name, pm.value, pm.kind, r.throughput
        )?;
    }
    for (kind, l) in &r.latency {
        let o = r.outcomes.get(kind).copied().unwrap_or_default();
        // Aborted attempts per started attempt; user aborts (e.g. TPC-C's rolled-back
        // New-Orders) are the procedure's own decision and listed apart.
        let attempts = o.committed + o.aborts + o.user_aborts + o.errors;
        let abort_pct = if attempts > 0 { 100.0 * o.aborts as f64 / attempts as f64 } else { 0.0 };
        let why: Vec<String> = o.abort_reasons.nonzero().iter().map(|(n, c)| format!("{n} {c}")).collect();
        let why = if why.is_empty() { String::new() } else { format!(" [{}]", why.join(", ")) };
        writeln!(
            out,
            "  {kind:<8} n={:<9} p50={}µs p90={}µs p95={}µs p99={}µs max={}µs  aborts={} ({abort_pct:.1}%){why} user_aborts={} gave_up={} errors={}",
            l.count, l.p50_us, l.p90_us, l.p95_us, l.p99_us, l.max_us, o.aborts, o.user_aborts, o.gave_up, o.errors
        )?;
    }
    writeln!(
        out,
        "aborts: {}  retries: {}  gave up: {}  user aborts: {}  errors: {} (outcome unknown: {})  unfinished: {}",
        r.aborts, r.retries, r.gave_up, r.user_aborts, r.errors, r.outcome_unknown, r.unfinished
    )?;
    if r.outcome_unknown > 0 && r.outcome_unknown * 10 >= r.committed.max(1) {
        writeln!(
            out,
            "WARNING: {} transaction(s) ended with their outcome unknown (lost connections or timeouts), \
             {:.0}% of the {} committed: these numbers describe the network or the servers' availability, \
             not the engine",
            r.outcome_unknown,
            100.0 * r.outcome_unknown as f64 / r.committed.max(1) as f64,
            r.committed
        )?;
    }
    if let Some(m) = &r.mix {
        writeln!(out, "mix: {}", m.line())?;
        if let Some(p90) = m.p90_line() {
            writeln!(out, "p90: {p90}")?;
        }
    }
    if let Some(cpu) = r.cpu_us_per_txn {
        let what = if r.simulated.is_some() {
            "simulated core time over the window, every node"
        } else {
            "process user+sys over the window, cluster and clients"
        };
        writeln!(out, "cpu: {cpu:.0} µs per committed txn ({what})")?;
    }
    if let (Some(msgs), Some(bytes)) = (r.msgs_per_txn, r.log_bytes_per_txn) {
        writeln!(out, "cost: {msgs:.1} messages and {bytes:.0} log bytes per committed txn (over the window)")?;
    }
    if !r.engine_counts_per_txn.is_empty() {
        let counts: Vec<String> = r.engine_counts_per_txn.iter().map(|(name, n)| format!("{name} {n:.3}")).collect();
        writeln!(out, "engine: {} per committed txn (over the window)", counts.join(", "))?;
    }
    if let Some(s) = &r.simulated {
        writeln!(out, "{}", s.line())?;
    }
    let status = if r.verify.ok { "ok" } else { "FAILED" };
    writeln!(out, "verify: {status}: {}", r.verify.message)
}

/// Throughput of `b` over throughput of `a`; `None` when `a` committed nothing.
pub fn ratio(a: &BenchReport, b: &BenchReport) -> Option<f64> {
    (a.throughput > 0.0).then(|| b.throughput / a.throughput)
}

/// The last line of a comparison: `ratio b/a = X.XX`.
pub fn print_ratio(out: &mut dyn Write, a: &BenchReport, b: &BenchReport) -> std::io::Result<()> {
    match ratio(a, b) {
        Some(x) => writeln!(out, "ratio {}/{} = {x:.2}", b.engine, a.engine),
        None => writeln!(out, "ratio {}/{} = n/a ({} committed nothing)", b.engine, a.engine, a.engine),
    }
}

#[cfg(test)]
mod tests {
    use super::ClientTlsArgs;
    use litmus_core::{Error, InvalidInput, NodeId};

    #[test]
    fn a_connected_terminal_dials_its_home_warehouses_server_first() {
        let opts =
            litmus_workloads::tpcc::TpccOptions { scale_div: 10, ..litmus_workloads::tpcc::TpccOptions::DEFAULT };
        let tpcc = litmus_workloads::tpcc::Tpcc::new(&opts, false).unwrap();
        // 2 warehouses on 2 nodes, 4 partitions: warehouse 1 on partition 1 (node 1), warehouse
        // 2 on partition 2 (node 0). The servers were listed node 1 first.
        let topology = litmus_runtime::Topology::new(2, 4).unwrap();
        let nodes = [Some(NodeId(1)), Some(NodeId(0))];
        let first: Vec<usize> = (0..4).map(|i| super::home_address(&tpcc, &topology, &nodes, i)).collect();
        assert_eq!(first, [0, 1, 0, 1]);
        // A server that did not answer the probe: its terminals go round robin.
        let first: Vec<usize> = (0..4).map(|i| super::home_address(&tpcc, &topology, &[None, nodes[1]], i)).collect();
        assert_eq!(first, [0, 1, 2, 1]);
    }

    #[test]
    fn client_tls_flags_are_plaintext_when_absent_and_typed_errors_when_incomplete_or_bad() {
        assert!(matches!(ClientTlsArgs::default().load(), Ok(None)));
        let p = |s: &str| Some(std::path::PathBuf::from(s));
        let cases = [
            (ClientTlsArgs { tls_cert: p("c.pem"), tls_key: p("k.pem"), ..Default::default() }, "without --tls-ca"),
            (ClientTlsArgs { tls_server_name: Some("db".into()), ..Default::default() }, "without --tls-ca"),
            (ClientTlsArgs { tls_ca: p("ca.pem"), tls_cert: p("c.pem"), ..Default::default() }, "go together"),
            (ClientTlsArgs { tls_ca: p("/nonexistent/ca.pem"), ..Default::default() }, "/nonexistent/ca.pem"),
        ];
        for (args, what) in cases {
            match args.load() {
                Err(Error::Invalid(InvalidInput::Config(text))) => assert!(text.contains(what), "{text}"),
                other => panic!("{args:?}: {other:?}"),
            }
        }
    }
}
