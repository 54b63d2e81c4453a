//! # litmus-bench: the closed-loop benchmark harness
//!
//! `litmus bench <workload>` loads a workload into a fresh cluster, drives it with closed-loop
//! clients for a measured window, prints throughput and per-kind latency percentiles and abort
//! counts, and then has the workload check its own invariant — a benchmark that silently
//! corrupts data fails.
//!
//! ```text
//!   BenchArgs ──► BenchConfig + Box<dyn Workload> ──► harness::run ──► BenchReport
//!   (clap flags)   (validated)    (workload())         (one engine)     (stdout table, --json)
//! ```
//!
//! The workloads themselves (schema, generator, checker, invariants, simulator driver) are
//! `litmus-workloads`' registry: `litmus bench <workload>` finds one with
//! [`litmus_workloads::by_name`] and builds it from the flags ([`workload_for`]).
//!
//! * [`figures`] — the papers' figures (titles and axes of the sweeps that reproduce them) and
//!   [`omid_oracle`], the Omid status oracle alone over TCP loopback (not a [`Workload`]: no
//!   cluster): commit rate, latency, piggyback size, recovery; its own sweeps and Table I
//!   (Omid Figs. 7–10, 12).
//! * [`sweep`] and [`plot`] — `--sweep PARAM=v1,v2,...`: a run per value (and engine), a table,
//!   a JSON array of points and an SVG figure of throughput against the parameter.
//! * [`harness`] — the runner: embedded cluster or `--connect` to `litmus server`s, warmup,
//!   retries with backoff (give up after 8, or — TPC-C — until commit), HDR histograms, the
//!   report and its printing (`mix:`, `tpmC:`, `p90:`, `cpu:` lines where they apply).
//! * [`terminal`], [`simbench`] — clients as state machines on the runtime's workers, and the
//!   same bench in the simulator's virtual time (`--runtime sim`).
//! * [`history`] — `--history`: Elle rw-register histories, written and checked.
//! * [`calibrate`] — `litmus calibrate`: the simulator's CPU cost table.
//!
//! `--compare a,b[,c...]` runs the same settings on each engine in turn, each on a fresh
//! cluster, and prints the throughput ratio of every later engine over the first, ending with
//! the second's: `ratio b/a = X.XX` is always the last line (for `a,b,c`: `ratio c/a`, then
//! `ratio b/a`).
//!
//! ```text
//!   litmus bench ycsb --duration 3 --json out.json
//!   litmus bench ycsb --compare nocc,nocc --duration 3
//!   litmus bench ycsb --read-ratio 0.95 --distribution uniform --txn-size 4 --clients 16
//!   litmus bench salt-contention --compare acid,salt,salt-local --sweep rows=10,100,1000,10000 --json fig11.json
//! ```
//!
//! For `--connect`, the servers must know the workload's tables and procedures: build their
//! catalog and registry with [`full_schema`] (`litmus server` does).

pub mod calibrate;
pub mod figures;
pub mod harness;
pub mod history;
pub mod plot;
pub mod simbench;
pub mod sweep;
pub mod terminal;

pub use figures::omid_oracle::{self, OmidOracleOptions};
pub use harness::{BenchConfig, BenchError, BenchReport, ClientTlsArgs};
pub use litmus_workloads::salt_micro::{SaltMicro, SaltMicroKind, SaltMicroOptions};
pub use litmus_workloads::ticketing::{Ticketing, TicketingOptions};
pub use litmus_workloads::tpcc::{Tpcc, TpccOptions};
pub use litmus_workloads::workload::{Outcomes, RetryPolicy, RunStats, TxnRequest, Workload};
pub use litmus_workloads::ycsb::{Ycsb, YcsbOptions};
pub use litmus_workloads::ycsb_t::{YcsbT, YcsbTOptions};
pub use litmus_workloads::{full_schema, UnknownWorkload};
use litmus_workloads::{granola_counters, tpcc_neworder};
pub use sweep::{Sweep, SweepParam, SweepPoint};

use anyhow::Context as _;
use litmus_protocol::EngineKind;
use litmus_storage::wal::FsyncPolicy;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Most engines one `--compare` runs: every registered engine in one figure, and a few repeats.
pub const COMPARE_ENGINES_MAX: usize = 16;

/// The engines to compare (`--compare a,b[,c...]`), in order; at least two (repeats allowed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineList(pub Vec<EngineKind>);

/// Parses `--engine` from the registry ([`litmus_engines::ALL`]), and gives `--help` the list of
/// registered engines with what each guarantees.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineParser;

impl clap::builder::TypedValueParser for EngineParser {
    type Value = EngineKind;

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<EngineKind, clap::Error> {
        let s = value.to_str().unwrap_or_default();
        parse_engine(s).map_err(|e| clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("{e}\n")))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            litmus_engines::ALL.iter().map(|e| clap::builder::PossibleValue::new(e.name()).help(e.guarantee())),
        ))
    }
}

fn parse_engine(s: &str) -> Result<EngineKind, String> {
    litmus_engines::by_name(s.trim()).map_err(|e| e.to_string())
}

fn parse_engine_list(s: &str) -> Result<EngineList, String> {
    let engines = s.split(',').map(parse_engine).collect::<Result<Vec<_>, _>>()?;
    if !(2..=COMPARE_ENGINES_MAX).contains(&engines.len()) {
        return Err(format!(
            "expected 2..={COMPARE_ENGINES_MAX} engines separated by commas (e.g. nocc,nocc), got {s:?}"
        ));
    }
    Ok(EngineList(engines))
}

/// What `--compare` names: engines, or (for `omid-oracle` only) the oracle's replication
/// settings `replication-off,replication-on` (Omid Fig. 9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompareList {
    Engines(EngineList),
    /// `true` = replication on.
    Replication(Vec<bool>),
}

fn parse_compare(s: &str) -> Result<CompareList, String> {
    if !s.split(',').any(|n| n.trim().starts_with("replication-")) {
        return parse_engine_list(s).map(CompareList::Engines);
    }
    let modes = s
        .split(',')
        .map(|n| match n.trim() {
            "replication-off" => Ok(false),
            "replication-on" => Ok(true),
            other => Err(format!("expected replication-off or replication-on, got {other:?}")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !(2..=COMPARE_ENGINES_MAX).contains(&modes.len()) {
        return Err(format!("expected 2..={COMPARE_ENGINES_MAX} settings separated by commas, got {s:?}"));
    }
    Ok(CompareList::Replication(modes))
}

fn parse_fsync(s: &str) -> Result<FsyncPolicy, String> {
    s.parse::<FsyncPolicy>().map_err(|e| e.to_string())
}

/// The flags of `litmus bench`.
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct BenchArgs {
    /// Workload to run (known: ycsb, salt-contention, salt-position, salt-rw, tpcc, ticketing,
    /// ycsb-t, basic-ycsb,
    /// tpcc-neworder, granola-counters), or omid-oracle (the Omid status oracle alone, over TCP loopback).
    pub workload: String,

    /// Concurrency-control engine of the embedded cluster. With --connect, the engine the
    /// servers run (checked against their hello).
    #[arg(long, default_value = "acid", value_parser = EngineParser)]
    pub engine: EngineKind,

    /// Run with identical settings on each engine in turn (a fresh cluster each), print every
    /// report and the throughput ratios over A; the last line is `ratio B/A = X.XX`.
    /// For omid-oracle: `replication-off,replication-on` (ratio of on over off).
    #[arg(long, value_name = "A,B[,C...]", value_parser = parse_compare, conflicts_with = "engine")]
    pub compare: Option<CompareList>,

    /// Nodes of the embedded cluster (each runs a coordinator and its share of partitions).
    /// Default: 2, or --replicas when that is larger.
    #[arg(long)]
    pub nodes: Option<u32>,

    /// Replicas of each partition: a raft group per partition on this many distinct nodes
    /// (1: not replicated). At most --nodes.
    #[arg(long, default_value_t = 1)]
    pub replicas: u32,

    /// Partitions of the cluster (partition p lives on node p mod nodes). Default: 4, or one
    /// per node (at least 4) with --runtime sim.
    #[arg(long)]
    pub partitions: Option<u32>,

    /// Closed-loop clients, each one thread with at most one transaction outstanding.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,

    /// Closed-loop clients per node (clients = K × --nodes; overrides --clients), so that a
    /// sweep over nodes keeps the load per node (VLDB'15 Fig. 6). Client i runs on node i mod
    /// nodes.
    #[arg(long = "clients-per-node", value_name = "K")]
    pub clients_per_node: Option<usize>,

    /// Length of the measured window in seconds (fractions allowed).
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub duration: f64,

    /// Seconds of load before the measured window, not counted.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub warmup: f64,

    /// One-way network delay between hosts in µs, ±40% jitter (0: none). Default: a datacenter
    /// LAN, uniform 100–250 µs.
    #[arg(long = "net-delay-us", value_name = "MICROS")]
    pub net_delay_us: Option<u64>,

    /// Seed of the cluster and of the clients' transaction streams (client i uses stream i).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Worker threads driving the embedded cluster's machines.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,

    /// Keep the embedded cluster's logs here (must be empty or absent; with --compare each run
    /// uses a subdirectory). Default: in memory.
    #[arg(long = "data-dir", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// When logs are fsynced, with --data-dir: always (every group commit) or never.
    #[arg(long, value_name = "POLICY", default_value = "never", value_parser = parse_fsync)]
    pub fsync: FsyncPolicy,

    /// Benchmark running `litmus server`s instead of an embedded cluster; clients connect round
    /// robin. The servers' engine must match --engine.
    #[arg(
        long,
        value_name = "HOST:PORT,...",
        value_delimiter = ',',
        conflicts_with_all = ["compare", "data_dir", "net_delay_us"]
    )]
    pub connect: Option<Vec<String>>,

    /// Also write the report as JSON to this file (with --compare: every run and the ratios;
    /// with --sweep: an array of points).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,

    /// Run once per value of a parameter (with --compare, every engine at each value), print a
    /// table and draw a figure. PARAM is one of rows, after, cold-rows, read-fraction, clients,
    /// nodes, partitions, records, read-ratio, txn-size, zipf-theta, base-txns, warehouses;
    /// omid-oracle: clients, outstanding, write-set, duration (Omid Figs. 7-10, 12).
    #[arg(long, value_name = "PARAM=V1,V2,...", value_parser = sweep::parse_sweep)]
    pub sweep: Option<Sweep>,

    /// With --sweep of another parameter: at each point, run every engine at each of these
    /// client counts and keep its best run (each engine at its own saturation, as the papers
    /// measure peaks; e.g. VLDB'15's distribution sweep). The row names the clients it kept.
    #[arg(long, value_name = "N1,N2,...", value_delimiter = ',', requires = "sweep")]
    pub peak_clients: Option<Vec<usize>>,

    /// Draw the sweep's figure (throughput against the parameter, a line per engine) to this SVG
    /// file. Default with --sweep and --json: the JSON path with .svg.
    #[arg(long, value_name = "SVG", requires = "sweep")]
    pub plot: Option<PathBuf>,

    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,

    /// Write every transaction's reads and writes to this file as an Elle rw-register history
    /// (EDN, one op per line; ycsb-t). Check it with elle-cli (see README).
    #[arg(long, value_name = "PATH")]
    pub history: Option<PathBuf>,

    /// With --connect: delete the workload's tables on the servers before loading, so a run
    /// can follow another against the same cluster.
    #[arg(long, requires = "connect")]
    pub reset: bool,

    /// With --connect: the cluster's shared token (the servers' `token`).
    #[arg(long, env = "LITMUS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    #[command(flatten)]
    pub tls: ClientTlsArgs,

    #[command(flatten)]
    pub ycsb: YcsbOptions,

    #[command(flatten)]
    pub salt: SaltMicroOptions,

    /// tpcc, ticketing: run the K most contended transactions as BASE transactions under salt
    /// (Salt Figs. 9–10). tpcc: 0..=5, default 2 (new-order, payment, delivery, stock-level,
    /// order-status); ticketing: 0..=3, default 1 (create-order, expire-reservations,
    /// cancel-order).
    #[arg(long = "base-txns", value_name = "K")]
    pub base_txns: Option<u32>,

    #[command(flatten)]
    pub tpcc: TpccOptions,

    #[command(flatten)]
    pub ticketing: TicketingOptions,

    #[command(flatten)]
    pub ycsb_t: YcsbTOptions,

    #[command(flatten)]
    pub omid_oracle: OmidOracleOptions,

    #[command(flatten)]
    pub neworder: tpcc_neworder::NewOrderOptions,

    #[command(flatten)]
    pub counters: granola_counters::CountersOptions,

    /// Fraction of distributed transactions, 0.0..=1.0 (tpcc-neworder: New-Orders with a line
    /// from another warehouse, default 0.1; granola-counters: default 0.0).
    #[arg(long, value_name = "F")]
    pub distributed: Option<f64>,

    #[command(flatten)]
    pub sim: simbench::SimOptions,
}

impl BenchArgs {
    /// `--partitions`, or its default: 4 on the embedded runtime, one per node (at least 4)
    /// on the simulator.
    pub fn nodes(&self) -> u32 {
        self.nodes.unwrap_or(self.replicas.max(2))
    }

    pub fn partitions(&self) -> u32 {
        self.partitions.unwrap_or(match self.sim.runtime {
            simbench::RuntimeKind::Embedded => 4,
            simbench::RuntimeKind::Sim => self.nodes().max(4),
        })
    }

    /// The flags a workload is built from.
    pub fn options(&self) -> litmus_workloads::Options<'_> {
        litmus_workloads::Options {
            ycsb: &self.ycsb,
            salt: &self.salt,
            base_txns: self.base_txns,
            tpcc: &self.tpcc,
            ticketing: &self.ticketing,
            ycsb_t: &self.ycsb_t,
            neworder: &self.neworder,
            counters: &self.counters,
            distributed: self.distributed,
            nodes: self.nodes(),
            partitions: self.partitions(),
            progress: !self.quiet,
        }
    }
}

/// Builds the named workload from the flags (the registry's [`litmus_workloads::by_name`]).
pub fn workload(name: &str, args: &BenchArgs) -> anyhow::Result<Box<dyn Workload>> {
    litmus_workloads::by_name(name)?.build(&args.options())
}

/// Builds the named workload for a run on `engine`: the form the registry picks for it (TPC-C
/// and YCSB in their one-round forms on an engine that runs one-round transactions only, or
/// TPC-C with `--one-round`).
pub fn workload_for(name: &str, args: &BenchArgs, engine: EngineKind) -> anyhow::Result<Box<dyn Workload>> {
    litmus_workloads::by_name(name)?.build_for(&args.options(), engine)
}

pub(crate) fn seconds(flag: &str, secs: f64) -> Result<Duration, BenchError> {
    Duration::try_from_secs_f64(secs)
        .map_err(|_| BenchError::Config(format!("--{flag} must be a non-negative number of seconds, got {secs}")))
}

/// The run configuration the flags describe, for `engine`.
pub fn config(args: &BenchArgs, engine: EngineKind) -> Result<BenchConfig, BenchError> {
    let cfg = BenchConfig {
        workload: args.workload.clone(),
        engine,
        nodes: args.nodes(),
        partitions: args.partitions(),
        replicas: args.replicas,
        clients: args.clients_per_node.map_or(args.clients, |k| k.saturating_mul(args.nodes() as usize)),
        duration: seconds("duration", args.duration)?,
        warmup: seconds("warmup", args.warmup)?,
        net_delay_us: args.net_delay_us,
        seed: args.seed,
        workers: args.workers,
        data_dir: args.data_dir.clone(),
        fsync: args.fsync,
        connect: args.connect.clone(),
        json: args.json.clone(),
        quiet: args.quiet,
        sim: args.sim.settings(),
        history: args.history.clone(),
        reset: args.reset,
        token: args.token.clone(),
        tls: args.tls.clone(),
    };
    cfg.validate()?;
    Ok(cfg)
}

/// The engines the flags ask for: `--compare`'s, or `--engine`.
pub fn engines(args: &BenchArgs) -> Vec<EngineKind> {
    match &args.compare {
        Some(CompareList::Engines(EngineList(list))) => list.clone(),
        Some(CompareList::Replication(_)) | None => vec![args.engine],
    }
}

/// One ratio of a comparison.
#[derive(Serialize)]
struct RatioEntry {
    /// `"b/a"`, engine names.
    of: String,
    ratio: Option<f64>,
}

/// The JSON written for `--compare`.
#[derive(Serialize)]
struct CompareReport<'a> {
    runs: &'a [BenchReport],
    /// `"b/a"`: the second engine over the first.
    ratio_of: String,
    /// Throughput of the second run over the first; `null` when the first committed nothing.
    ratio: Option<f64>,
    /// Every later run over the first, in run order.
    ratios: Vec<RatioEntry>,
}

/// `litmus bench`: runs as the flags say and prints to stdout.
pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    run_to(args, &mut out)
}

/// [`run`], printing to `out`. Returns `Err` when a run fails or a verification fails (after
/// printing every report and writing the JSON).
pub fn run_to(args: &BenchArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    if args.workload == omid_oracle::NAME {
        return omid_oracle::run(args, out);
    }
    if let Some(CompareList::Replication(_)) = &args.compare {
        return Err(harness::BenchError::Config(format!(
            "--compare replication-off,replication-on is for {} only",
            omid_oracle::NAME
        ))
        .into());
    }
    if let Some(s) = &args.sweep {
        return sweep::run_sweep(args, s, out);
    }
    let engines = engines(args);
    let mut reports = Vec::with_capacity(engines.len());
    for (i, &engine) in engines.iter().enumerate() {
        let mut cfg = config(args, engine)?;
        if args.compare.is_some() {
            cfg.data_dir = cfg.data_dir.map(|d| d.join(format!("run{}-{engine}", i + 1)));
            cfg.history = cfg.history.map(|h| h.with_extension(format!("run{}-{engine}.edn", i + 1)));
        }
        let workload = workload_for(&args.workload, args, engine)?;
        let report = harness::run(&cfg, std::sync::Arc::from(workload))
            .with_context(|| format!("{} on {engine}", args.workload))?;
        if i > 0 {
            writeln!(out)?;
        }
        harness::print_report(out, &report)?;
        reports.push(report);
    }
    if let [first, second, rest @ ..] = &reports[..] {
        // The second over the first is printed last: scripts read the last line.
        writeln!(out)?;
        for later in rest {
            harness::print_ratio(out, first, later)?;
        }
        harness::print_ratio(out, first, second)?;
    }
    out.flush()?;

    if let Some(path) = &args.json {
        let file = std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
        let mut w = std::io::BufWriter::new(file);
        match &reports[..] {
            [one] => serde_json::to_writer_pretty(&mut w, one),
            [a, b, ..] => {
                let of = |r: &BenchReport| format!("{}/{}", r.engine, a.engine);
                let ratios =
                    reports[1..].iter().map(|r| RatioEntry { of: of(r), ratio: harness::ratio(a, r) }).collect();
                serde_json::to_writer_pretty(
                    &mut w,
                    &CompareReport { runs: &reports, ratio_of: of(b), ratio: harness::ratio(a, b), ratios },
                )
            }
            [] => unreachable!("at least one run"),
        }
        .with_context(|| format!("write {}", path.display()))?;
        w.flush().with_context(|| format!("write {}", path.display()))?;
    }

    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.verify.ok)
        .map(|r| format!("{} on {}: {}", r.workload, r.engine, r.verify.message))
        .collect();
    if !failed.is_empty() {
        return Err(BenchError::Verify(failed.join("; ")).into());
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    /// The flags `litmus bench <workload>` gets with nothing else said.
    pub(crate) fn default_args(workload: &str) -> BenchArgs {
        Cli::try_parse_from(["bench", workload]).expect("defaults parse").args
    }

    #[test]
    fn every_workload_builds_from_default_flags_and_the_server_schema_has_tpcc() {
        for w in litmus_workloads::bench_names() {
            let args = default_args(w);
            workload(w, &args).unwrap_or_else(|e| panic!("{w}: {e}"));
        }
        let args =
            Cli::try_parse_from(["bench", "tpcc", "--warehouses", "3", "--variant", "acid", "--scale-div", "10"])
                .unwrap()
                .args;
        assert_eq!((args.tpcc.warehouses, args.tpcc.variant.as_deref(), args.tpcc.scale_div), (3, Some("acid"), 10));
        let (catalog, registry) = full_schema();
        assert!(catalog.table_by_name(litmus_workloads::tpcc::schema::STOCK).is_ok());
        let per_node =
            Cli::try_parse_from(["bench", "tpcc-neworder", "--nodes", "4", "--clients-per-node", "3"]).unwrap();
        assert_eq!(config(&per_node.args, litmus_engines::COORDFREE).unwrap().clients, 12);
        assert_eq!(config(&default_args("ycsb"), litmus_engines::ACID).unwrap().clients, 8);
        assert!(registry.get(litmus_workloads::tpcc::txns::NEW_ORDER_BASE_PROC).is_ok());
    }
}
