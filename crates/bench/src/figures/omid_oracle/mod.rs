//! # `omid-oracle`: the status oracle alone, over the TCP runtime (Omid §V, Figs. 7–10, 12, Table I)
//!
//! Omid's micro-benchmarks measure the status oracle in isolation from the data store: clients
//! send nothing but timestamp requests and commit requests. This benchmark does the same against
//! the real [`OracleMachine`] running inside a `litmus server` node (`omid` engine, one node, one
//! partition) started in this process on a loopback port — so every request crosses a socket,
//! the node loop, the WAL (group commit, `--fsync`) and back.
//!
//! ```text
//!   client thread ×--clients ──TCP──► node 0: ORACLE (StatusOracle + WAL)
//!     one socket = one oracle session; keeps --outstanding transactions in flight, each:
//!     Begin ─► Began{Ts, ΔSO} ─► [think --think-ms] ─► Commit(Ts, W) ─► Committed | Aborted
//! ```
//!
//! * `W` is `--write-set` random row ids (no two commits conflict in practice: 64-bit ids).
//! * **Replication** (Figs. 7, 9): with `replication-on` each client connects with `Connect` and
//!   keeps a [`ClientReplica`], applying the ΔSO piggybacked on every `Began`; with
//!   `replication-off` it connects with `ConnectUnreplicated`: the oracle piggybacks nothing (the
//!   paper's plain SO; such a client would ask `InSnapshot` for every version it reads).
//!   `--compare replication-off,replication-on` runs both, each on a fresh server, and ends with
//!   `ratio replication-on/replication-off = X` (commit throughput).
//! * **Think time** (Figs. 7–8, Table I): `--think-ms T` makes each client "execute" every
//!   transaction for `T` ms between its start timestamp and its commit request (the paper's
//!   simulated 50 ms), fixed or exponential (`--think-dist exp`); such a client runs one
//!   transaction at a time (`--outstanding 1`, as in the paper) and starts at a random offset in
//!   `[0, T)` so the clients do not beat in step. `--slow-fraction F --slow-factor X` makes the
//!   first `F·clients` clients think `X` times longer: their ΔSO grows with the time since
//!   their previous timestamp request. While a client thinks it still answers the oracle's
//!   pushes to silent clients (§IV), which are counted.
//! * Reported: commits per second over the measured window, aborts, commit latency percentiles
//!   (commit request to reply), begin-to-commit latency, the **piggyback**: ΔSO entries and
//!   encoded bytes (postcard, as on the wire) per `Began`, mean and standard deviation (Fig. 8,
//!   Table I), pushes, and the **recovery time** (Fig. 12): after the run the oracle's log
//!   directory is copied and a fresh oracle is recovered from it (checkpoint + tail replay +
//!   crash range), timed: the oracle's failover is this recovery (a restart, or a new leader of
//!   its replica group), plus the coordinators' reconnection, which the cluster test
//!   `oracle_node_killed_during_ycsb_t` times end to end. The crash is of a copy of the log
//!   directory, so the recovery reads exactly what a restarted node would; the server itself is
//!   stopped at the end of each run (`serve_until`).
//! * The window counts what the clients received between its start and its end, nothing after:
//!   replies still in flight when it closes are not counted.
//!
//! ## The paper's figures
//!
//! `--sweep PARAM=v1,...` (the harness's parser, axes and JSON, [`crate::sweep`]; figures with
//! [`crate::plot::plot_series`]) reruns the benchmark per value and per replication setting of
//! `--compare`, each on a fresh server (`--repeat N` times, keeping the run with the median
//! commit rate), prints a table, writes the points ([`OraclePoint`]) to `--json` and draws:
//!
//! | sweep | figure (`--plot`, default the `--json` path with `.svg`) | Omid |
//! | --- | --- | --- |
//! | `clients` (with `--think-ms`) | commits/s vs clients; `-latency.svg`: commit latency vs commits/s; `-piggyback.svg`: bytes per `Began` vs clients | Figs. 7, 8 |
//! | `outstanding` | commits/s vs load; `-latency.svg` | Fig. 9 |
//! | `write-set` | saturation commits/s vs rows per write set; `-latency.svg` | Fig. 10 |
//! | `duration` | commits/s; `-recovery.svg`: recovery (ms) vs log size (MB) | Fig. 12 |
//!
//! `--table slow-clients` prints Table I: four runs with the same clients and `--think-ms T` —
//! every client `T` fixed; exponential with mean `T`; 10% of the clients 100× slower; 10% 1000×
//! slower — with the commit rate and latency of the normal clients, the piggyback bytes (mean,
//! stdev; and the slow clients' mean) and pushes per second.
//!
//! ```text
//!   litmus bench omid-oracle --write-set 8 --duration 10
//!   litmus bench omid-oracle --compare replication-off,replication-on --duration 10
//!   litmus bench omid-oracle --compare replication-off,replication-on --sweep outstanding=1,4,16,64 --json fig9.json
//!   litmus bench omid-oracle --outstanding 1 --think-ms 50 --sweep clients=1,4,16,64,256,1024 --json fig7.json
//!   litmus bench omid-oracle --outstanding 1 --think-ms 10 --clients 256 --table slow-clients --json table1.json
//! ```

mod client;

use crate::figures::FigureAxis;
use crate::harness::{BenchError, LatencySummary, CLIENTS_MAX};
use crate::plot::{plot_series, Chart, Series, XScale};
use crate::sweep::{figure_path, format_number, latency_figure_path, write_json, Sweep, SweepParam};
use crate::{BenchArgs, CompareList};
use anyhow::Context as _;
use client::run_one;
use hdrhistogram::Histogram;
use litmus_core::{Catalog, Timestamp};
use litmus_omid::messages::{Delta, Reply, Request};
use litmus_omid::node::{self, OracleMachine, OracleReply, OracleRequest, OracleWire, ORACLE};
use litmus_omid::replica::ClientReplica;
use litmus_omid::RowId;
use litmus_protocol::wire::{self, Frame, PROTOCOL_VERSION};
use litmus_protocol::{builtin, Addr, Envelope, Machine, Message};
use litmus_runtime::host::Host;
use litmus_runtime::tcp::{serve_until, NodeConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use serde::Serialize;
use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The benchmark's name on the command line.
pub const NAME: &str = "omid-oracle";
/// Largest `--write-set` (the oracle's own limit is higher; Fig. 10 goes to 512).
pub const WRITE_SET_ROWS_MAX: usize = 4096;
/// Largest `--outstanding`.
pub const OUTSTANDING_MAX: usize = 4096;
/// Largest `--repeat`.
pub const REPEAT_MAX: usize = 99;
/// Longest `--think-ms` (after `--slow-factor`): an hour.
pub const THINK_MS_MAX: f64 = 3_600_000.0;
/// How long to wait for the in-process server to accept connections.
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(10);
const LATENCY_US_MAX: u64 = 60_000_000;
/// Longest sleep of a thinking client between checks for pushes and the end of the run.
const THINK_SLICE: Duration = Duration::from_millis(50);
/// Stack of a client thread (1024 of them for Fig. 7).
const CLIENT_STACK_BYTES: usize = 256 * 1024;
/// Table I: the share of slow clients and how much slower they are (the paper's 10², 10³).
pub const TABLE_SLOW_FRACTION: f64 = 0.1;
pub const TABLE_SLOW_FACTOR: f64 = 100.0;
pub const TABLE_GLACIAL_FACTOR: f64 = 1000.0;

/// How a client's think time is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThinkDist {
    /// Exactly `--think-ms`.
    Fixed,
    /// Exponential with mean `--think-ms` (Table I row 2: Poisson arrivals at the oracle).
    Exp,
}

impl FromStr for ThinkDist {
    type Err = String;
    fn from_str(s: &str) -> Result<ThinkDist, String> {
        match s {
            "fixed" => Ok(ThinkDist::Fixed),
            "exp" => Ok(ThinkDist::Exp),
            _ => Err(format!("unknown think-time distribution {s:?} (known: fixed, exp)")),
        }
    }
}

impl fmt::Display for ThinkDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ThinkDist::Fixed => "fixed",
            ThinkDist::Exp => "exp",
        })
    }
}

/// Tables `--table` prints instead of a single run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OracleTable {
    /// Omid Table I.
    SlowClients,
}

impl FromStr for OracleTable {
    type Err = String;
    fn from_str(s: &str) -> Result<OracleTable, String> {
        match s {
            "slow-clients" => Ok(OracleTable::SlowClients),
            _ => Err(format!("unknown table {s:?} (known: slow-clients)")),
        }
    }
}

/// The `omid-oracle` flags.
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct OmidOracleOptions {
    /// omid-oracle: rows in each commit's write set.
    #[arg(long = "write-set", value_name = "ROWS", default_value_t = 8)]
    pub write_set: usize,
    /// omid-oracle: transactions each client keeps in flight.
    #[arg(long, default_value_t = 64)]
    pub outstanding: usize,
    /// omid-oracle: ms each transaction "executes" between its start timestamp and its commit
    /// request (Omid §V: 50); needs --outstanding 1.
    #[arg(long = "think-ms", value_name = "MS", default_value_t = 0.0)]
    pub think_ms: f64,
    /// omid-oracle: think time fixed, or exponential with mean --think-ms (exp).
    #[arg(long = "think-dist", value_name = "DIST", default_value = "fixed")]
    pub think_dist: ThinkDist,
    /// omid-oracle: share of the clients that think --slow-factor times longer (0..=1).
    #[arg(long = "slow-fraction", value_name = "F", default_value_t = 0.0)]
    pub slow_fraction: f64,
    /// omid-oracle: how many times longer slow clients think.
    #[arg(long = "slow-factor", value_name = "X", default_value_t = TABLE_SLOW_FACTOR)]
    pub slow_factor: f64,
    /// omid-oracle: print a table of runs instead: slow-clients (Omid Table I; needs --think-ms).
    #[arg(long, value_name = "TABLE")]
    pub table: Option<OracleTable>,
    /// omid-oracle --sweep: runs per point and replication setting; the point is the run with
    /// the median commit rate.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub repeat: usize,
}

/// Count, sum and sum of squares: mean and standard deviation without keeping the samples.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Moments {
    pub n: u64,
    pub sum: f64,
    pub sum_sq: f64,
}

impl Moments {
    pub fn add(&mut self, x: f64) {
        self.n += 1;
        self.sum += x;
        self.sum_sq += x * x;
    }
    pub fn merge(&mut self, other: &Moments) {
        self.n += other.n;
        self.sum += other.sum;
        self.sum_sq += other.sum_sq;
    }
    /// 0 without samples.
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum / self.n as f64
        }
    }
    /// Population standard deviation; 0 without samples.
    pub fn stdev(&self) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let mean = self.mean();
        (self.sum_sq / self.n as f64 - mean * mean).max(0.0).sqrt()
    }
}

/// What one run does: the flags, checked.
#[derive(Clone, Debug, PartialEq)]
struct RunSpec {
    write_set: usize,
    outstanding: usize,
    clients: usize,
    think: Duration,
    think_dist: ThinkDist,
    slow_clients: usize,
    slow_factor: f64,
    warmup: Duration,
    duration: Duration,
    seed: u64,
    fsync: litmus_storage::wal::FsyncPolicy,
}

fn config_error(m: String) -> anyhow::Error {
    BenchError::Config(m).into()
}

/// Checks the flags of one run; every failure is a typed [`BenchError::Config`].
fn spec_of(args: &BenchArgs) -> anyhow::Result<RunSpec> {
    let o = &args.omid_oracle;
    if !(1..=WRITE_SET_ROWS_MAX).contains(&o.write_set) {
        return Err(config_error(format!("--write-set must be in 1..={WRITE_SET_ROWS_MAX}, got {}", o.write_set)));
    }
    if !(1..=OUTSTANDING_MAX).contains(&o.outstanding) {
        return Err(config_error(format!("--outstanding must be in 1..={OUTSTANDING_MAX}, got {}", o.outstanding)));
    }
    if !(1..=CLIENTS_MAX).contains(&args.clients) {
        return Err(config_error(format!("--clients must be in 1..={CLIENTS_MAX}, got {}", args.clients)));
    }
    let duration = crate::seconds("duration", args.duration)?;
    if duration.is_zero() {
        return Err(config_error("--duration must be positive".into()));
    }
    let warmup = crate::seconds("warmup", args.warmup)?;
    if !(0.0..=1.0).contains(&o.slow_fraction) {
        return Err(config_error(format!("--slow-fraction must be in 0..=1, got {}", o.slow_fraction)));
    }
    if !(o.slow_factor.is_finite() && o.slow_factor >= 1.0) {
        return Err(config_error(format!("--slow-factor must be a number >= 1, got {}", o.slow_factor)));
    }
    let slowest = o.think_ms * if o.slow_fraction > 0.0 { o.slow_factor } else { 1.0 };
    if !(o.think_ms.is_finite() && o.think_ms >= 0.0 && slowest <= THINK_MS_MAX) {
        return Err(config_error(format!(
            "--think-ms (times --slow-factor for slow clients) must be in 0..={THINK_MS_MAX}, got {}",
            o.think_ms
        )));
    }
    if o.think_ms > 0.0 && o.outstanding != 1 {
        return Err(config_error(format!(
            "--think-ms needs --outstanding 1 (a client that thinks runs one transaction at a time, as in Omid §V), got --outstanding {}",
            o.outstanding
        )));
    }
    if o.think_ms == 0.0 && (o.slow_fraction > 0.0 || o.think_dist != ThinkDist::Fixed) {
        return Err(config_error("--slow-fraction and --think-dist need --think-ms".into()));
    }
    if args.connect.is_some() {
        return Err(config_error(format!("{NAME} runs its own server; no --connect")));
    }
    if !(1..=REPEAT_MAX).contains(&o.repeat) || (o.repeat > 1 && args.sweep.is_none()) {
        return Err(config_error(format!("--repeat must be in 1..={REPEAT_MAX} and is for --sweep, got {}", o.repeat)));
    }
    Ok(RunSpec {
        write_set: o.write_set,
        outstanding: o.outstanding,
        clients: args.clients,
        think: Duration::from_secs_f64(o.think_ms / 1e3),
        think_dist: o.think_dist,
        slow_clients: (args.clients as f64 * o.slow_fraction).round() as usize,
        slow_factor: o.slow_factor,
        warmup,
        duration,
        seed: args.seed,
        fsync: args.fsync,
    })
}

/// The replication settings to run: `--compare`'s, or on.
fn modes_of(args: &BenchArgs) -> anyhow::Result<Vec<bool>> {
    match &args.compare {
        None => Ok(vec![true]),
        Some(CompareList::Replication(modes)) => Ok(modes.clone()),
        Some(CompareList::Engines(_)) => {
            Err(config_error(format!("{NAME} compares replication-off,replication-on, not engines")))
        }
    }
}

/// One run's results.
#[derive(Clone, Debug)]
pub struct OracleReport {
    pub replication: bool,
    pub commits_per_sec: f64,
    pub commits: u64,
    pub aborts: u64,
    pub commit_latency: Histogram<u64>,
    pub txn_latency: Histogram<u64>,
    /// Commits per second and commit latency of the clients that are not slow.
    pub normal_commits_per_sec: f64,
    pub normal_commit_latency: Histogram<u64>,
    pub delta_entries_per_begin: f64,
    /// ΔSO entries per `Began`.
    pub piggyback_entries: Moments,
    /// Encoded ΔSO bytes per `Began`, over every client and over the slow ones.
    pub piggyback_bytes: Moments,
    pub slow_piggyback_bytes: Moments,
    /// Pushes to silent clients (§IV) in the measured window.
    pub pushes: u64,
    pub measured_secs: f64,
    pub recovery: Duration,
    pub log_bytes: u64,
    /// CPU per commit in the measured window (µs, user + system): the oracle's node thread
    /// (which steps the oracle, logs and answers), and every server thread (the node thread
    /// and the I/O threads that read and write the clients' connections). `None` where
    /// `/proc/self/task` cannot be read.
    pub oracle_thread_cpu_us_per_commit: Option<f64>,
    pub server_cpu_us_per_commit: Option<f64>,
}

/// [`OracleReport`] as written to `--json`: settings and headline numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OracleSummary {
    /// `replication-on` or `replication-off`.
    pub mode: String,
    pub write_set: usize,
    pub clients: usize,
    pub outstanding: usize,
    pub think_ms: f64,
    pub think_dist: ThinkDist,
    pub slow_clients: usize,
    pub slow_factor: f64,
    pub fsync: String,
    pub measured_secs: f64,
    pub commits_per_sec: f64,
    pub commits: u64,
    pub aborts: u64,
    pub normal_commits_per_sec: f64,
    /// Commit request to reply, µs.
    pub commit_latency: LatencySummary,
    /// Begin request to commit reply, µs.
    pub txn_latency: LatencySummary,
    pub normal_commit_latency: LatencySummary,
    pub piggyback_entries_mean: f64,
    pub piggyback_entries_stdev: f64,
    pub piggyback_bytes_mean: f64,
    pub piggyback_bytes_stdev: f64,
    pub slow_piggyback_bytes_mean: f64,
    /// Timestamp replies the slow clients received in the window (0: their bytes mean is empty).
    pub slow_begins: u64,
    pub pushes: u64,
    pub pushes_per_sec: f64,
    pub recovery_ms: f64,
    pub log_bytes: u64,
    /// [`OracleReport::oracle_thread_cpu_us_per_commit`], [`OracleReport::server_cpu_us_per_commit`].
    pub oracle_thread_cpu_us_per_commit: Option<f64>,
    pub server_cpu_us_per_commit: Option<f64>,
}

impl OracleSummary {
    fn of(spec: &RunSpec, r: &OracleReport) -> OracleSummary {
        OracleSummary {
            mode: mode_name(r.replication).into(),
            write_set: spec.write_set,
            clients: spec.clients,
            outstanding: spec.outstanding,
            think_ms: spec.think.as_secs_f64() * 1e3,
            think_dist: spec.think_dist,
            slow_clients: spec.slow_clients,
            slow_factor: spec.slow_factor,
            fsync: spec.fsync.to_string(),
            measured_secs: r.measured_secs,
            commits_per_sec: r.commits_per_sec,
            commits: r.commits,
            aborts: r.aborts,
            normal_commits_per_sec: r.normal_commits_per_sec,
            commit_latency: LatencySummary::of(&r.commit_latency),
            txn_latency: LatencySummary::of(&r.txn_latency),
            normal_commit_latency: LatencySummary::of(&r.normal_commit_latency),
            piggyback_entries_mean: r.piggyback_entries.mean(),
            piggyback_entries_stdev: r.piggyback_entries.stdev(),
            piggyback_bytes_mean: r.piggyback_bytes.mean(),
            piggyback_bytes_stdev: r.piggyback_bytes.stdev(),
            slow_piggyback_bytes_mean: r.slow_piggyback_bytes.mean(),
            slow_begins: r.slow_piggyback_bytes.n,
            pushes: r.pushes,
            pushes_per_sec: r.pushes as f64 / r.measured_secs.max(f64::MIN_POSITIVE),
            recovery_ms: r.recovery.as_secs_f64() * 1e3,
            log_bytes: r.log_bytes,
            oracle_thread_cpu_us_per_commit: r.oracle_thread_cpu_us_per_commit,
            server_cpu_us_per_commit: r.server_cpu_us_per_commit,
        }
    }
}

/// The JSON of a single run or a `--compare`.
#[derive(Serialize)]
struct OracleRuns<'a> {
    runs: &'a [OracleSummary],
    /// `"replication-on/replication-off"`: the second over the first (none for one run).
    ratio_of: Option<String>,
    ratio: Option<f64>,
}

/// One run of an `omid-oracle` sweep.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OraclePoint {
    pub param: SweepParam,
    pub value: f64,
    pub x: f64,
    /// `replication-on` or `replication-off`.
    pub mode: String,
    /// Position of the setting in `--compare` (0 without it): one line per position.
    pub mode_index: usize,
    pub summary: OracleSummary,
}

struct ClientResult {
    slow: bool,
    commits: u64,
    aborts: u64,
    pushes: u64,
    entries: Moments,
    bytes: Moments,
    commit_latency: Histogram<u64>,
    txn_latency: Histogram<u64>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("constant bounds")
}

fn mode_name(replication: bool) -> &'static str {
    if replication {
        "replication-on"
    } else {
        "replication-off"
    }
}

fn on_off(replication: bool) -> &'static str {
    if replication {
        "on"
    } else {
        "off"
    }
}

/// Where runs keep their logs: `--data-dir`, or a temporary directory removed at the end (one
/// per invocation: several may run in one process, e.g. tests).
fn data_root(args: &BenchArgs) -> PathBuf {
    static INVOCATIONS: AtomicU64 = AtomicU64::new(0);
    match &args.data_dir {
        Some(d) => d.clone(),
        None => {
            let n = INVOCATIONS.fetch_add(1, Ordering::Relaxed);
            std::env::temp_dir().join(format!("litmus-omid-oracle-{}-{n}", std::process::id()))
        }
    }
}

/// `litmus bench omid-oracle`.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let spec = spec_of(args)?;
    let modes = modes_of(args)?;
    if args.omid_oracle.table.is_some() && args.sweep.is_some() {
        return Err(config_error("--table and --sweep are separate experiments; pick one".into()));
    }
    let root = data_root(args);
    let result = match (&args.omid_oracle.table, &args.sweep) {
        (Some(OracleTable::SlowClients), _) => run_slow_clients_table(args, &spec, &root, out),
        (None, Some(sweep)) => run_sweep(args, sweep, &modes, &root, out),
        (None, None) => run_modes(args, &spec, &modes, &root, out),
    };
    if args.data_dir.is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }
    result
}

/// One run per replication setting, printed; the last line is the ratio of the second over the
/// first.
fn run_modes(args: &BenchArgs, spec: &RunSpec, modes: &[bool], root: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut reports = Vec::new();
    for (i, &replication) in modes.iter().enumerate() {
        let dir = root.join(format!("run{}-replication-{}", i + 1, on_off(replication)));
        let report = run_one(spec, replication, &dir).with_context(|| format!("{NAME} run {}", i + 1))?;
        if i > 0 {
            writeln!(out)?;
        }
        print_report(out, spec, &report)?;
        reports.push(report);
    }
    let ratio = |a: &OracleReport, b: &OracleReport| b.commits_per_sec / a.commits_per_sec.max(f64::MIN_POSITIVE);
    if let [first, second, rest @ ..] = &reports[..] {
        writeln!(out)?;
        for later in rest.iter().chain([second]) {
            writeln!(
                out,
                "ratio replication-{}/replication-{} = {:.3}",
                on_off(later.replication),
                on_off(first.replication),
                ratio(first, later)
            )?;
        }
    }
    out.flush()?;
    if let Some(path) = &args.json {
        let runs: Vec<OracleSummary> = reports.iter().map(|r| OracleSummary::of(spec, r)).collect();
        let (ratio_of, ratio) = match &reports[..] {
            [a, b, ..] => {
                (Some(format!("{}/{}", mode_name(b.replication), mode_name(a.replication))), Some(ratio(a, b)))
            }
            _ => (None, None),
        };
        write_json(path, &OracleRuns { runs: &runs, ratio_of, ratio })?;
    }
    Ok(())
}

/// `--sweep`: every value × every replication setting, a table row each, then the JSON and the
/// figures of the module doc's table.
fn run_sweep(args: &BenchArgs, sweep: &Sweep, modes: &[bool], root: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let name = sweep.param.name();
    if !sweep.param.applies_to(NAME) {
        return Err(config_error(format!("--sweep {name}: {NAME} does not use --{name}")));
    }
    // Every point's flags are checked before the first run.
    let mut plans = Vec::with_capacity(sweep.values.len());
    for &value in &sweep.values {
        let mut point = args.clone();
        sweep.param.apply(&mut point, value);
        let spec = spec_of(&point).with_context(|| format!("--sweep {name}={}", format_number(value)))?;
        plans.push((value, spec));
    }
    let axis = FigureAxis::of(NAME, sweep.param);
    let mode_names: Vec<&str> = modes.iter().map(|&m| mode_name(m)).collect();
    let mut per_run =
        if sweep.param == SweepParam::Duration { String::new() } else { format!(", {} s per run", args.duration) };
    if args.omid_oracle.repeat > 1 {
        per_run += &format!(", the median of {} runs per point", args.omid_oracle.repeat);
    }
    writeln!(
        out,
        "{}: sweep {name} over {} values, {}{per_run}",
        axis.full_title(NAME),
        sweep.values.len(),
        mode_names.join(","),
    )?;
    writeln!(
        out,
        "{name:>11}  {:<16} {:>10} {:>9} {:>9} {:>10} {:>10} {:>12} {:>10}",
        "replication", "commits/s", "p50_us", "p99_us", "pb_entries", "pb_bytes", "recovery_ms", "log_MB"
    )?;
    out.flush()?;
    let mut points: Vec<OraclePoint> = Vec::new();
    for (j, (value, spec)) in plans.iter().enumerate() {
        for (i, &replication) in modes.iter().enumerate() {
            let dir = root.join(format!("point{}-{name}={}", j + 1, format_number(*value))).join(format!(
                "run{}-replication-{}",
                i + 1,
                on_off(replication)
            ));
            let mut runs = Vec::with_capacity(args.omid_oracle.repeat);
            for k in 0..args.omid_oracle.repeat {
                let report = run_one(spec, replication, &dir.join(format!("repeat{}", k + 1))).with_context(|| {
                    format!("{NAME} {} at {name}={}", mode_name(replication), format_number(*value))
                })?;
                runs.push(OracleSummary::of(spec, &report));
            }
            // The median run by commit rate (the lower middle one for an even count).
            runs.sort_by(|a, b| a.commits_per_sec.total_cmp(&b.commits_per_sec));
            let s = runs.swap_remove((runs.len() - 1) / 2);
            writeln!(
                out,
                "{:>11}  {:<16} {:>10.0} {:>9} {:>9} {:>10.1} {:>10.1} {:>12.1} {:>10.2}",
                format_number(*value),
                s.mode,
                s.commits_per_sec,
                s.commit_latency.p50_us,
                s.commit_latency.p99_us,
                s.piggyback_entries_mean,
                s.piggyback_bytes_mean,
                s.recovery_ms,
                s.log_bytes as f64 / 1e6
            )?;
            out.flush()?;
            points.push(OraclePoint {
                param: sweep.param,
                value: *value,
                x: axis.x(*value),
                mode: s.mode.clone(),
                mode_index: i,
                summary: s,
            });
        }
    }
    if let Some(path) = &args.json {
        write_json(path, &points)?;
    }
    if let Some(path) = figure_path(args) {
        for (figure, series, chart) in figures(&points, &axis, sweep.param, &path) {
            plot_series(&series, &figure, &chart).with_context(|| format!("draw {}", figure.display()))?;
            writeln!(out, "figure: {}", figure.display())?;
        }
    }
    out.flush()?;
    Ok(())
}

/// One line per replication setting (in `--compare` order) of `y` against `x`, in sweep order.
fn series_by_mode(points: &[OraclePoint], xy: impl Fn(&OraclePoint) -> (f64, f64)) -> Vec<Series> {
    let mut lines: Vec<(usize, Series)> = Vec::new();
    for p in points {
        match lines.iter_mut().find(|(i, _)| *i == p.mode_index) {
            Some((_, s)) => s.points.push(xy(p)),
            None => lines.push((p.mode_index, Series { label: p.mode.clone(), points: vec![xy(p)] })),
        }
    }
    let names: Vec<String> = lines.iter().map(|(_, s)| s.label.clone()).collect();
    lines
        .into_iter()
        .map(|(i, mut s)| {
            if names.iter().filter(|n| **n == s.label).count() > 1 {
                s.label = format!("{} #{}", s.label, i + 1);
            }
            s
        })
        .collect()
}

/// The figures a sweep over `param` draws: `(file, lines, chart)`.
fn figures<'a>(
    points: &[OraclePoint],
    axis: &'a FigureAxis,
    param: SweepParam,
    path: &Path,
) -> Vec<(PathBuf, Vec<Series>, Chart<'a>)> {
    let with_suffix = |suffix: &str| {
        let stem = path.file_stem().map_or("figure".into(), |s| s.to_string_lossy().into_owned());
        path.with_file_name(format!("{stem}-{suffix}.svg"))
    };
    let throughput = series_by_mode(points, |p| (p.x, p.summary.commits_per_sec));
    let mut figs = vec![(
        path.to_path_buf(),
        throughput,
        Chart {
            title: axis.title,
            x_label: axis.x_label,
            y_label: "oracle throughput (commits/s)",
            x_scale: XScale::Auto,
            y_decimals: 0,
        },
    )];
    let latency = series_by_mode(points, |p| (p.summary.commits_per_sec, p.summary.commit_latency.p50_us as f64 / 1e3));
    let latency_chart = Chart {
        title: match param {
            SweepParam::Clients => "Omid Fig. 7: replication overhead (latency vs throughput as clients grow)",
            SweepParam::Outstanding => "Omid Fig. 9: latency vs throughput as the load grows",
            _ => "Omid Fig. 10: latency vs throughput per write-set size",
        },
        x_label: "oracle throughput (commits/s)",
        y_label: "median commit latency (ms)",
        x_scale: XScale::FromZero,
        y_decimals: 1,
    };
    match param {
        SweepParam::Clients | SweepParam::Outstanding | SweepParam::WriteSet => {
            figs.push((latency_figure_path(path), latency, latency_chart));
        }
        _ => {}
    }
    if param == SweepParam::Clients {
        let bytes = series_by_mode(points, |p| (p.x, p.summary.piggyback_bytes_mean));
        let chart = Chart {
            title: "Omid Fig. 8: piggyback size as clients grow",
            x_label: axis.x_label,
            y_label: "ΔSO bytes per timestamp reply",
            x_scale: XScale::Auto,
            y_decimals: 0,
        };
        figs.push((with_suffix("piggyback"), bytes, chart));
    }
    if param == SweepParam::Duration {
        let mb = |p: &OraclePoint| p.summary.log_bytes as f64 / 1e6;
        let mut lines = Vec::new();
        for mut s in series_by_mode(points, |p| (mb(p), p.summary.recovery_ms)) {
            s.label = format!("recover from the log ({})", s.label);
            lines.push(s);
        }
        for s in &mut lines {
            s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        let chart = Chart {
            title: "Omid Fig. 12: recovery time vs log size",
            x_label: "oracle log directory (MB)",
            y_label: "time to serve again (ms)",
            x_scale: XScale::FromZero,
            y_decimals: 1,
        };
        figs.push((with_suffix("recovery"), lines, chart));
    }
    figs
}

/// One row of Table I.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlowClientsRow {
    pub setup: String,
    pub summary: OracleSummary,
}

/// `--table slow-clients`: Omid Table I (see the module doc).
fn run_slow_clients_table(args: &BenchArgs, spec: &RunSpec, root: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    if spec.think.is_zero() {
        return Err(config_error("--table slow-clients needs --think-ms (the paper: 50)".into()));
    }
    let think_ms = format_number(spec.think.as_secs_f64() * 1e3);
    let slow = |factor: f64| RunSpec {
        slow_clients: (spec.clients as f64 * TABLE_SLOW_FRACTION).round() as usize,
        slow_factor: factor,
        think_dist: ThinkDist::Fixed,
        ..spec.clone()
    };
    let rows = [
        (format!("{think_ms} ms"), RunSpec { slow_clients: 0, think_dist: ThinkDist::Fixed, ..spec.clone() }),
        (format!("exp({think_ms} ms)"), RunSpec { slow_clients: 0, think_dist: ThinkDist::Exp, ..spec.clone() }),
        (format!("10% slow (x{})", format_number(TABLE_SLOW_FACTOR)), slow(TABLE_SLOW_FACTOR)),
        (format!("10% glacial (x{})", format_number(TABLE_GLACIAL_FACTOR)), slow(TABLE_GLACIAL_FACTOR)),
    ];
    for (name, row) in &rows {
        let slowest = row.think.as_secs_f64() * 1e3 * row.slow_factor;
        if slowest > THINK_MS_MAX {
            return Err(config_error(format!("{name}: think time {slowest} ms is over {THINK_MS_MAX}")));
        }
    }
    writeln!(
        out,
        "Omid Table I: slow clients ({} clients, write set {}, think {think_ms} ms, {} s per run, replication on)",
        spec.clients, spec.write_set, args.duration
    )?;
    writeln!(
        out,
        "{:<22} {:>10} {:>10} {:>10} {:>22} {:>12} {:>9}",
        "txn time", "commits/s", "lat_ms", "p50_ms", "piggyback bytes (stdv)", "slow bytes", "pushes/s"
    )?;
    out.flush()?;
    let mut table = Vec::new();
    for (i, (name, row)) in rows.iter().enumerate() {
        let dir = root.join(format!("table1-row{}", i + 1));
        let report = run_one(row, true, &dir).with_context(|| format!("{NAME} Table I row {name}"))?;
        let s = OracleSummary::of(row, &report);
        let slow_bytes =
            if s.slow_begins > 0 { format!("{:.0}", s.slow_piggyback_bytes_mean) } else { "-".to_string() };
        writeln!(
            out,
            "{name:<22} {:>10.0} {:>10.2} {:>10.2} {:>22} {:>12} {:>9.2}",
            s.normal_commits_per_sec,
            s.normal_commit_latency.mean_us / 1e3,
            s.normal_commit_latency.p50_us as f64 / 1e3,
            format!("{:.0} ({:.0})", s.piggyback_bytes_mean, s.piggyback_bytes_stdev),
            slow_bytes,
            s.pushes_per_sec
        )?;
        out.flush()?;
        table.push(SlowClientsRow { setup: name.clone(), summary: s });
    }
    writeln!(
        out,
        "commits/s and latency (commit request to reply) are of the normal clients; piggyback: ΔSO bytes per timestamp reply over every client; slow bytes: the slow clients' mean (- when none began in the window)"
    )?;
    if let Some(path) = &args.json {
        write_json(path, &table)?;
    }
    Ok(())
}

fn print_report(out: &mut dyn Write, spec: &RunSpec, r: &OracleReport) -> std::io::Result<()> {
    let think = if spec.think.is_zero() {
        String::new()
    } else {
        let slow = if spec.slow_clients > 0 {
            format!(" ({} slow x{})", spec.slow_clients, format_number(spec.slow_factor))
        } else {
            String::new()
        };
        format!(" think={}ms/{}{slow}", format_number(spec.think.as_secs_f64() * 1e3), spec.think_dist)
    };
    writeln!(
        out,
        "{NAME}: write-set={} clients={} outstanding={} (x{} = {} in flight){think} replication={} fsync={} transport=tcp-loopback",
        spec.write_set,
        spec.clients,
        spec.outstanding,
        spec.clients,
        spec.clients * spec.outstanding,
        on_off(r.replication),
        spec.fsync
    )?;
    writeln!(
        out,
        "commits/s: {:.0}  ({} commits, {} aborts in the measured window)",
        r.commits_per_sec, r.commits, r.aborts
    )?;
    let p = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q);
    for (name, h) in [("commit latency", &r.commit_latency), ("begin..commit latency", &r.txn_latency)] {
        writeln!(
            out,
            "{name} us: p50 {} p90 {} p99 {} p99.9 {} max {}",
            p(h, 0.5),
            p(h, 0.9),
            p(h, 0.99),
            p(h, 0.999),
            h.max()
        )?;
    }
    writeln!(out, "piggyback: {:.2} metadata entries per timestamp reply", r.delta_entries_per_begin)?;
    writeln!(
        out,
        "piggyback bytes: {:.1} per timestamp reply (stdev {:.1}); {} pushes to silent clients",
        r.piggyback_bytes.mean(),
        r.piggyback_bytes.stdev(),
        r.pushes
    )?;
    if let (Some(oracle), Some(server)) = (r.oracle_thread_cpu_us_per_commit, r.server_cpu_us_per_commit) {
        writeln!(
            out,
            "cpu: {oracle:.2} µs per commit on the oracle's node thread, {server:.2} µs on every server thread (node and I/O)"
        )?;
    }
    writeln!(out, "recovery: {:.1} ms from a {} byte log directory", r.recovery.as_secs_f64() * 1e3, r.log_bytes)
}

#[cfg(test)]
mod tests {
    use super::client::ClientSpec;
    use super::*;

    #[test]
    fn moments_give_mean_and_stdev() {
        let mut m = Moments::default();
        assert_eq!((m.mean(), m.stdev()), (0.0, 0.0));
        for x in [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0] {
            m.add(x);
        }
        assert_eq!(m.mean(), 5.0);
        assert!((m.stdev() - 2.0).abs() < 1e-12);
        let mut n = Moments::default();
        n.merge(&m);
        assert_eq!(n, m);
    }

    #[test]
    fn think_times_follow_the_distribution_and_the_slow_factor() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut c = ClientSpec {
            replication: true,
            slow: false,
            seed: 0,
            write_set: 8,
            outstanding: 1,
            think: Duration::from_millis(10),
            think_dist: ThinkDist::Fixed,
            slow_factor: 100.0,
        };
        assert_eq!(c.think(&mut rng), Duration::from_millis(10));
        c.slow = true;
        assert_eq!(c.think(&mut rng), Duration::from_secs(1));
        c.slow = false;
        c.think_dist = ThinkDist::Exp;
        let n = 20_000;
        let mean = (0..n).map(|_| c.think(&mut rng).as_secs_f64()).sum::<f64>() / n as f64;
        assert!((mean - 0.010).abs() < 0.0005, "exp mean {mean}");
    }
}
