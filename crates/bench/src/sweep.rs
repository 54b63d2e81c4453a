//! # Parameter sweeps: one workload at several values of one knob, every engine at each
//!
//! `--sweep PARAM=v1,v2,...` reruns the benchmark once per value (and, with `--compare`, once
//! per engine at each value, a fresh cluster every run), prints a compact table as the runs
//! finish, writes every run to `--json` as an array of [`SweepPoint`]s, and draws throughput
//! against the parameter, one line per engine ([`crate::plot::plot_sweep`]):
//!
//! ```text
//!   for v in values:                          every value is validated before the first run
//!     for engine in --compare (or --engine):
//!       harness::run(flags with PARAM = v)  ──►  table row, SweepPoint
//!   --json: [SweepPoint, ...]      --plot (default: the --json path with .svg): the figure
//! ```
//!
//! The Salt microbenchmarks' sweeps draw the paper's figures: `salt-contention` over `rows`
//! is Fig. 11 (x = contention ratio 5/rows, log scale), `salt-position` over `after` Fig. 12,
//! `salt-rw` over `read-fraction` Fig. 13 (x in percent). `tpcc` over `base-txns` is Fig. 9.
//! A sweep over `clients` also draws latency (p50, every kind) against throughput, one curve
//! per engine with a point per client count (`fig-latency.svg`), the shape of Figs. 7–8.
//! `omid-oracle` has no cluster or workload: its sweeps (Omid Figs. 7–10, 12) run in
//! [`crate::figures::omid_oracle`] with these parameters, axes and [`write_json`], one line per
//! replication setting instead of per engine.

use crate::figures::omid_oracle::NAME as ORACLE;
use crate::figures::{self, FigureAxis};
use crate::harness::{self, BenchReport};
use crate::{config, workload, BenchArgs};
use anyhow::Context as _;
use litmus_protocol::EngineKind;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Most values one sweep accepts.
pub const SWEEP_VALUES_MAX: usize = 64;

/// A knob `--sweep` can turn: the flag of the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SweepParam {
    Rows,
    After,
    ColdRows,
    ReadFraction,
    Clients,
    Nodes,
    Partitions,
    /// Replicas of each partition.
    Replicas,
    Records,
    ReadRatio,
    TxnSize,
    ZipfTheta,
    /// TPC-C (Salt Fig. 9) and ticketing (Fig. 10): `--base-txns`, how many transactions run as BASE.
    BaseTxns,
    /// TPC-C: warehouses.
    Warehouses,
    /// omid-oracle (Omid Fig. 10): rows per commit's write set.
    WriteSet,
    /// omid-oracle (Omid Fig. 9): transactions each client keeps in flight.
    Outstanding,
    /// omid-oracle (Omid Fig. 12): the measured window in seconds, i.e. how much log the
    /// recovery has to read.
    Duration,
    /// granola-counters (Granola Fig. 9), tpcc-neworder (Fig. 13): `--distributed`.
    Distributed,
    /// granola-counters (Granola Fig. 11): `--conflict`.
    Conflict,
    /// granola-counters (Granola Fig. 10): `--lock-cost-us`.
    LockCostUs,
}

impl SweepParam {
    pub const ALL: [SweepParam; 20] = [
        SweepParam::Rows,
        SweepParam::After,
        SweepParam::ColdRows,
        SweepParam::ReadFraction,
        SweepParam::Clients,
        SweepParam::Nodes,
        SweepParam::Partitions,
        SweepParam::Replicas,
        SweepParam::Records,
        SweepParam::ReadRatio,
        SweepParam::TxnSize,
        SweepParam::ZipfTheta,
        SweepParam::BaseTxns,
        SweepParam::Warehouses,
        SweepParam::WriteSet,
        SweepParam::Outstanding,
        SweepParam::Duration,
        SweepParam::Distributed,
        SweepParam::Conflict,
        SweepParam::LockCostUs,
    ];

    /// The flag name without dashes, as written in `--sweep`.
    pub fn name(self) -> &'static str {
        match self {
            SweepParam::Rows => "rows",
            SweepParam::After => "after",
            SweepParam::ColdRows => "cold-rows",
            SweepParam::ReadFraction => "read-fraction",
            SweepParam::Clients => "clients",
            SweepParam::Nodes => "nodes",
            SweepParam::Partitions => "partitions",
            SweepParam::Replicas => "replicas",
            SweepParam::Records => "records",
            SweepParam::ReadRatio => "read-ratio",
            SweepParam::TxnSize => "txn-size",
            SweepParam::ZipfTheta => "zipf-theta",
            SweepParam::BaseTxns => "base-txns",
            SweepParam::Warehouses => "warehouses",
            SweepParam::WriteSet => "write-set",
            SweepParam::Outstanding => "outstanding",
            SweepParam::Duration => "duration",
            SweepParam::Distributed => "distributed",
            SweepParam::Conflict => "conflict",
            SweepParam::LockCostUs => "lock-cost-us",
        }
    }

    /// Whether the parameter changes anything for `workload` (a sweep over a flag the workload
    /// ignores would run the same benchmark over and over).
    pub fn applies_to(self, workload: &str) -> bool {
        match self {
            SweepParam::Clients => true,
            SweepParam::Nodes | SweepParam::Partitions | SweepParam::Replicas => workload != ORACLE,
            SweepParam::WriteSet | SweepParam::Outstanding | SweepParam::Duration => workload == ORACLE,
            // A workload's own flags: the ones its registry entry says a sweep may vary.
            p => litmus_workloads::by_name(workload).is_ok_and(|w| w.sweeps(p.name())),
        }
    }

    /// Whether values are whole numbers (counts) rather than fractions.
    fn integral(self) -> bool {
        !matches!(
            self,
            SweepParam::ReadFraction
                | SweepParam::ReadRatio
                | SweepParam::ZipfTheta
                | SweepParam::Duration
                | SweepParam::Distributed
                | SweepParam::Conflict
        )
    }

    /// Sets this parameter of `args` to `value` (already checked by [`parse_sweep`]).
    pub fn apply(self, args: &mut BenchArgs, value: f64) {
        debug_assert!(!self.integral() || value.fract() == 0.0, "{} = {value}", self.name());
        match self {
            SweepParam::Rows => args.salt.rows = value as u64,
            SweepParam::After => args.salt.after = value as u32,
            SweepParam::ColdRows => args.salt.cold_rows = value as u64,
            SweepParam::ReadFraction => args.salt.read_fraction = value,
            SweepParam::Clients => args.clients = value as usize,
            SweepParam::Nodes => args.nodes = Some(value as u32),
            SweepParam::Replicas => args.replicas = value as u32,
            SweepParam::Partitions => args.partitions = Some(value as u32),
            SweepParam::Records => args.ycsb.records = value as u64,
            SweepParam::ReadRatio => args.ycsb.read_ratio = value,
            SweepParam::TxnSize => args.ycsb.txn_size = value as usize,
            SweepParam::ZipfTheta => args.ycsb.zipf_theta = value,
            SweepParam::BaseTxns => args.base_txns = Some(value as u32),
            SweepParam::Warehouses => args.tpcc.warehouses = value as u64,
            SweepParam::WriteSet => args.omid_oracle.write_set = value as usize,
            SweepParam::Outstanding => args.omid_oracle.outstanding = value as usize,
            SweepParam::Duration => args.duration = value,
            SweepParam::Distributed => args.distributed = Some(value),
            SweepParam::Conflict => args.counters.conflict = value,
            SweepParam::LockCostUs => args.counters.lock_cost_us = value as u64,
        }
    }
}

/// `--sweep PARAM=v1,v2,...`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    pub param: SweepParam,
    pub values: Vec<f64>,
}

/// Parses `PARAM=v1,v2,...`: a known parameter, 1..=[`SWEEP_VALUES_MAX`] values, whole
/// non-negative numbers for counts.
pub fn parse_sweep(s: &str) -> Result<Sweep, String> {
    let known = || SweepParam::ALL.map(SweepParam::name).join(", ");
    let (name, list) =
        s.split_once('=').ok_or_else(|| format!("expected PARAM=v1,v2,... (e.g. rows=10,100), got {s:?}"))?;
    let param = SweepParam::ALL
        .into_iter()
        .find(|p| p.name() == name.trim())
        .ok_or_else(|| format!("cannot sweep {name:?} (known: {})", known()))?;
    let mut values = Vec::new();
    for v in list.split(',').map(str::trim) {
        let value = if param.integral() {
            v.parse::<u64>().ok().filter(|n| *n < (1 << 53)).map(|n| n as f64)
        } else {
            v.parse::<f64>().ok().filter(|x| x.is_finite())
        };
        let kind = if param.integral() { "a whole number" } else { "a finite number" };
        values.push(value.ok_or_else(|| format!("--sweep {}: {v:?} is not {kind}", param.name()))?);
    }
    if values.len() > SWEEP_VALUES_MAX {
        return Err(format!("--sweep takes at most {SWEEP_VALUES_MAX} values, got {}", values.len()));
    }
    Ok(Sweep { param, values })
}

/// One run of a sweep: the value, the engine, the headline numbers, and the full report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepPoint {
    pub param: SweepParam,
    pub value: f64,
    /// Where the point sits on the figure's x axis (the value, or e.g. the contention ratio).
    pub x: f64,
    pub engine: String,
    /// Position of the engine in `--compare` (0 without it): a figure draws one line per
    /// position, so `--compare nocc,nocc` gets two.
    pub engine_index: usize,
    /// Committed transactions per second.
    pub throughput: f64,
    /// Latency over every kind of transaction, µs.
    pub p50_us: u64,
    pub p99_us: u64,
    pub report: BenchReport,
}

/// Where the figure goes: `--plot`, or the `--json` path with `.svg`; `None` when neither.
pub fn figure_path(args: &BenchArgs) -> Option<PathBuf> {
    args.plot.clone().or_else(|| args.json.as_ref().map(|j| j.with_extension("svg")))
}

/// Where a `--sweep clients=...` also draws latency against throughput: `fig.svg` ->
/// `fig-latency.svg`.
pub fn latency_figure_path(figure: &Path) -> PathBuf {
    let stem = figure.file_stem().map_or("figure".into(), |s| s.to_string_lossy().into_owned());
    figure.with_file_name(format!("{stem}-latency.svg"))
}

/// Runs the sweep the flags describe, printing its table to `out`. Returns `Err` when a run
/// fails or a verification fails (after printing the table and writing the JSON and figure).
pub fn run_sweep(args: &BenchArgs, sweep: &Sweep, out: &mut dyn Write) -> anyhow::Result<()> {
    let engines = crate::engines(args);
    let axis = FigureAxis::of(&args.workload, sweep.param);
    let label = figures::label(args);
    let name = sweep.param.name();
    let peak_clients = args.peak_clients.clone().unwrap_or_default();
    let plans = plan(args, sweep, &engines, &peak_clients)?;
    print_header(out, args, sweep, &axis, &label, &engines, &peak_clients)?;

    let mut points: Vec<SweepPoint> = Vec::with_capacity(plans.len() * engines.len());
    // Points whose run stopped because a transaction could not commit (no report).
    let mut starved: Vec<String> = Vec::new();
    for (j, &(value, ref point)) in plans.iter().enumerate() {
        let first_at = points.len();
        for (i, &engine) in engines.iter().enumerate() {
            let at = PointRun { point, engine, engine_index: i, point_index: j, param: name, value };
            let report = match at.best_of(&peak_clients) {
                Ok(report) => report,
                Err(e) if matches!(e.downcast_ref::<crate::BenchError>(), Some(crate::BenchError::Starved { .. })) => {
                    // A transaction that could not commit: the point has no valid mix. It is
                    // printed, marked and left out of the peaks, and the sweep goes on.
                    writeln!(
                        out,
                        "{:>13}{:>w$}  {:<12} FAILED: {e:#}",
                        format_number(value),
                        "",
                        engine.name(),
                        w = axis.x_column.map_or(0, |_| 10)
                    )?;
                    out.flush()?;
                    starved.push(format!("{} at {name}={} ({e})", engine.name(), format_number(value)));
                    continue;
                }
                Err(e) => return Err(e.context(format!("{} on {engine} at {name}={value}", point.workload))),
            };
            let vs_first = harness::ratio(points.get(first_at).map_or(&report, |p| &p.report), &report);
            let p = SweepPoint {
                param: sweep.param,
                value,
                x: axis.x(value),
                engine: engine.name().into(),
                engine_index: i,
                throughput: report.throughput,
                p50_us: report.latency_all.p50_us,
                p99_us: report.latency_all.p99_us,
                report,
            };
            print_row(out, &p, &axis, vs_first, !peak_clients.is_empty(), points.iter().find(|q| q.engine_index == i))?;
            points.push(p);
        }
    }

    if let Some(path) = &args.json {
        write_json(path, &points)?;
    }
    if let Some(path) = figure_path(args) {
        draw_figures(out, args, sweep, &axis, &label, &points, &path)?;
    }
    let failed = print_summary(out, sweep, engines.len(), &points, &starved)?;
    out.flush()?;
    if !failed.is_empty() {
        return Err(crate::BenchError::Verify(failed.join("; ")).into());
    }
    Ok(())
}

/// Checks every point's flags before the first run (a typo in the last value should not cost
/// the whole sweep); the value and flags of each point.
fn plan(
    args: &BenchArgs,
    sweep: &Sweep,
    engines: &[EngineKind],
    peak_clients: &[usize],
) -> anyhow::Result<Vec<(f64, BenchArgs)>> {
    let name = sweep.param.name();
    if !sweep.param.applies_to(&args.workload) {
        return Err(crate::BenchError::Config(format!(
            "--sweep {name}: workload {} does not use --{name}",
            args.workload
        ))
        .into());
    }
    if sweep.param == SweepParam::Clients && !peak_clients.is_empty() {
        return Err(
            crate::BenchError::Config("--peak-clients with --sweep clients: sweep one or the other".into()).into()
        );
    }
    if peak_clients.contains(&0) {
        return Err(crate::BenchError::Config("--peak-clients: client counts must be at least 1".into()).into());
    }
    let mut plans = Vec::with_capacity(sweep.values.len());
    for &value in &sweep.values {
        let mut point = args.clone();
        sweep.param.apply(&mut point, value);
        workload(&args.workload, &point).with_context(|| format!("--sweep {name}={value}"))?;
        for &engine in engines {
            config(&point, engine).with_context(|| format!("--sweep {name}={value}"))?;
            for &clients in peak_clients {
                let at = BenchArgs { clients, ..point.clone() };
                config(&at, engine).with_context(|| format!("--sweep {name}={value} --peak-clients {clients}"))?;
            }
        }
        plans.push((value, point));
    }
    Ok(plans)
}

/// The sweep's title line and its table's header.
fn print_header(
    out: &mut dyn Write,
    args: &BenchArgs,
    sweep: &Sweep,
    axis: &FigureAxis,
    label: &str,
    engines: &[EngineKind],
    peak_clients: &[usize],
) -> anyhow::Result<()> {
    let name = sweep.param.name();
    let engine_names: Vec<&str> = engines.iter().map(|e| e.name()).collect();
    let peak_note = match peak_clients {
        [] => String::new(),
        counts => {
            let counts: Vec<String> = counts.iter().map(|c| c.to_string()).collect();
            format!(", each engine's best of clients={} per point", counts.join(","))
        }
    };
    writeln!(
        out,
        "{}: sweep {name} over {} values on {}, {} s per run{peak_note}",
        axis.full_title(label),
        sweep.values.len(),
        engine_names.join(","),
        args.duration
    )?;
    let x_header = axis.x_column.map_or(String::new(), |c| format!(" {c:>9}"));
    writeln!(
        out,
        "{name:>13}{x_header}  {:<12} {:>11} {:>9} {:>9} {:>9}  verify",
        "engine", "txn/s", "p50_us", "p99_us", "vs first"
    )?;
    out.flush()?;
    Ok(())
}

/// One engine's run at one point of a sweep.
struct PointRun<'a> {
    point: &'a BenchArgs,
    engine: EngineKind,
    engine_index: usize,
    point_index: usize,
    param: &'static str,
    value: f64,
}

impl PointRun<'_> {
    /// The run, or with `--peak-clients` the engine's best run over those client counts: the
    /// highest throughput among runs whose mix and checks hold (else the best of any, so that it
    /// shows).
    fn best_of(&self, peak_clients: &[usize]) -> anyhow::Result<BenchReport> {
        if peak_clients.is_empty() {
            return self.run(self.point, String::new());
        }
        let mut best: Option<BenchReport> = None;
        let mut last_err = None;
        for &clients in peak_clients {
            let at = BenchArgs { clients, ..self.point.clone() };
            match self.run(&at, format!("-clients{clients}")) {
                Ok(r) => {
                    let key = |r: &BenchReport| (r.verify.ok && r.mix.as_ref().is_none_or(|m| m.holds), r.throughput);
                    if best.as_ref().is_none_or(|b| key(&r) > key(b)) {
                        best = Some(r);
                    }
                }
                Err(e) => last_err = Some(e),
            }
        }
        match (best, last_err) {
            (Some(r), _) => Ok(r),
            (None, Some(e)) => Err(e),
            (None, None) => unreachable!("at least one client count"),
        }
    }

    /// One run with `point`'s flags, its data (if kept) under a directory of its own.
    fn run(&self, point: &BenchArgs, dir: String) -> anyhow::Result<BenchReport> {
        let (engine, name, value) = (self.engine, self.param, self.value);
        let mut cfg = config(point, engine)?;
        cfg.data_dir = cfg.data_dir.map(|d| {
            d.join(format!("point{}-{name}={value}", self.point_index + 1))
                .join(format!("run{}-{engine}{dir}", self.engine_index + 1))
        });
        let w = crate::workload_for(&point.workload, point, engine)?;
        harness::run(&cfg, std::sync::Arc::from(w))
    }
}

/// A point's table row (with `peaks`, the `--peak-clients` count it kept), its cost line
/// (distribution and nodes sweeps, against `first`, the engine's point at the first value) and
/// its mix line.
fn print_row(
    out: &mut dyn Write,
    p: &SweepPoint,
    axis: &FigureAxis,
    vs_first: Option<f64>,
    peaks: bool,
    first: Option<&SweepPoint>,
) -> anyhow::Result<()> {
    let value = p.value;
    let x_cell = axis.x_column.map_or(String::new(), |_| format!(" {:>9}", format_number(p.x)));
    let vs = vs_first.map_or("n/a".to_string(), |r| format!("{r:.2}"));
    let verify = if p.report.verify.ok { "ok" } else { "FAILED" };
    let at = if !peaks { String::new() } else { format!("  clients={}", p.report.config.clients) };
    writeln!(
        out,
        "{:>13}{x_cell}  {:<12} {:>11.1} {:>9} {:>9} {vs:>9}  {verify}{at}",
        format_number(value),
        p.engine,
        p.throughput,
        p.p50_us,
        p.p99_us
    )?;
    let costs = matches!(p.param, SweepParam::Distributed | SweepParam::Nodes);
    if let Some(line) = cost_line(p, first).filter(|_| costs) {
        writeln!(out, "{:>13}  {line}", "")?;
    }
    if let Some(m) = &p.report.mix {
        let tpm = m.per_minute.as_ref().map_or(String::new(), |pm| format!(" {}: {:.0}", pm.name, pm.value));
        writeln!(out, "{:>13}  mix: {}  gave up: {}{tpm}", "", m.line(), p.report.gave_up)?;
    }
    out.flush()?;
    Ok(())
}

/// The sweep's figure at `path`, and with a nodes sweep throughput per node, with a clients
/// sweep latency against throughput.
fn draw_figures(
    out: &mut dyn Write,
    args: &BenchArgs,
    sweep: &Sweep,
    axis: &FigureAxis,
    label: &str,
    points: &[SweepPoint],
    path: &Path,
) -> anyhow::Result<()> {
    crate::plot::plot_sweep(points, path, &axis.full_title(label), axis.x_label)
        .with_context(|| format!("draw {}", path.display()))?;
    writeln!(out, "figure: {}", path.display())?;
    if sweep.param == SweepParam::Nodes {
        // VLDB'15 Fig. 6: throughput per node, flat when the engine scales out.
        let per_node = per_node_figure_path(path);
        let points: Vec<SweepPoint> =
            points.iter().map(|p| SweepPoint { throughput: compared(p), ..p.clone() }).collect();
        let title = format!("{} per node", axis.full_title(label));
        crate::plot::plot_sweep(&points, &per_node, &title, axis.x_label)
            .with_context(|| format!("draw {}", per_node.display()))?;
        writeln!(out, "figure: {}", per_node.display())?;
    }
    if sweep.param == SweepParam::Clients {
        // Salt Figs. 7-8: latency against throughput as the load grows.
        let latency = latency_figure_path(path);
        let title = figures::latency_title(&args.workload, label);
        crate::plot::plot_latency_throughput(points, &latency, &title)
            .with_context(|| format!("draw {}", latency.display()))?;
        writeln!(out, "figure: {}", latency.display())?;
    }
    Ok(())
}

/// The failed verifications, the loss lines of a distribution or nodes sweep and, comparing
/// engines, the ratio of peaks (the second over the first last: scripts read the last line).
/// Returns the failures.
fn print_summary(
    out: &mut dyn Write,
    sweep: &Sweep,
    engines: usize,
    points: &[SweepPoint],
    starved: &[String],
) -> anyhow::Result<Vec<String>> {
    let name = sweep.param.name();
    let failed: Vec<String> = points
        .iter()
        .filter(|p| !p.report.verify.ok)
        .map(|p| format!("{} on {} at {name}={}: {}", p.report.workload, p.engine, p.value, p.report.verify.message))
        .collect();
    for f in &failed {
        writeln!(out, "verify FAILED: {f}")?;
    }
    if matches!(sweep.param, SweepParam::Distributed | SweepParam::Nodes) {
        for i in 0..engines {
            if let Some(line) = loss_line(points, i, name) {
                writeln!(out, "{line}")?;
            }
        }
    }
    if engines >= 2 {
        // The second engine over the first is printed last: scripts read the last line.
        for f in starved {
            writeln!(out, "left out of the peaks, a transaction could not commit: {f}")?;
        }
        for i in (2..engines).chain([1]) {
            writeln!(out, "{}", peaks_line(points, 0, i, name))?;
        }
    }
    Ok(failed)
}

/// `cost: C µs CPU, M msgs per committed txn; T txn/s per node; vs first: -L%` under a row
/// whose report has a cost, against `first`, the engine's point at the sweep's first value
/// (the distribution sweep's loss relative to 0%; the scale-out's per-node throughput).
fn cost_line(p: &SweepPoint, first: Option<&SweepPoint>) -> Option<String> {
    let cpu = p.report.cpu_us_per_txn?;
    let msgs = p.report.msgs_per_txn.map_or(String::new(), |m| format!(", {m:.1} msgs"));
    let per_node =
        if p.param == SweepParam::Nodes { format!("; {:.1} txn/s per node", compared(p)) } else { String::new() };
    let loss = first
        .filter(|f| f.value != p.value && f.throughput > 0.0)
        .map_or(String::new(), |f| format!("; loss vs {}: {:.0}%", format_number(f.value), 100.0 * loss(f, p)));
    Some(format!("cost: {cpu:.0} µs CPU{msgs} per committed txn{per_node}{loss}"))
}

/// How much of `first`'s throughput `p` lost (per node for a nodes sweep): 0.25 = 25% less,
/// negative when it gained.
fn loss(first: &SweepPoint, p: &SweepPoint) -> f64 {
    1.0 - compared(p) / compared(first)
}

/// The throughput a loss compares: per node for a nodes sweep, else the whole.
fn compared(q: &SweepPoint) -> f64 {
    if q.param == SweepParam::Nodes {
        q.throughput / q.value.max(1.0)
    } else {
        q.throughput
    }
}

/// `loss of ENGINE from PARAM=a to PARAM=b: L% (x -> y txn/s[ per node])`, the sweep's first
/// value against its last, for the engine at `engine_index`; `None` without two points.
pub fn loss_line(points: &[SweepPoint], engine_index: usize, param: &str) -> Option<String> {
    let mine: Vec<&SweepPoint> = points.iter().filter(|p| p.engine_index == engine_index).collect();
    let (first, last) = (*mine.first()?, *mine.last()?);
    if first.value == last.value || first.throughput <= 0.0 {
        return None;
    }
    let nodes = first.param == SweepParam::Nodes;
    Some(format!(
        "loss of {} from {param}={} to {param}={}: {:.0}% ({:.1} -> {:.1} txn/s{})",
        first.engine,
        format_number(first.value),
        format_number(last.value),
        100.0 * loss(first, last),
        compared(first),
        compared(last),
        if nodes { " per node" } else { "" }
    ))
}

/// Where a `--sweep nodes=...` also draws throughput per node: `fig.svg` -> `fig-per-node.svg`.
pub fn per_node_figure_path(figure: &Path) -> PathBuf {
    let stem = figure.file_stem().map_or("figure".into(), |s| s.to_string_lossy().into_owned());
    figure.with_file_name(format!("{stem}-per-node.svg"))
}

/// Whether a point counts toward a peak: its mix holds (a workload without a defined mix
/// always does).
pub fn mix_holds(p: &SweepPoint) -> bool {
    p.report.mix.as_ref().is_none_or(|m| m.holds)
}

/// The highest throughput of the engine at position `engine_index` over the points whose mix
/// holds, and the value it was reached at.
pub fn peak(points: &[SweepPoint], engine_index: usize) -> Option<(f64, f64)> {
    points
        .iter()
        .filter(|p| p.engine_index == engine_index && mix_holds(p))
        .map(|p| (p.throughput, p.value))
        .fold(None, |best: Option<(f64, f64)>, p| if best.is_some_and(|b| b.0 >= p.0) { best } else { Some(p) })
}

/// `ratio of peaks b/a = X.XX (b P txn/s at PARAM=V, a ...; N points below the mix minimums
/// left out)`: the peaks only over points whose mix holds.
pub fn peaks_line(points: &[SweepPoint], a: usize, b: usize, param: &str) -> String {
    let engine = |i: usize| points.iter().find(|p| p.engine_index == i).map_or("?", |p| p.engine.as_str());
    let (ea, eb) = (engine(a), engine(b));
    let left_out: Vec<String> = points
        .iter()
        .filter(|p| (p.engine_index == a || p.engine_index == b) && !mix_holds(p))
        .map(|p| format!("{} at {param}={}", p.engine, format_number(p.value)))
        .collect();
    let note = if left_out.is_empty() {
        "every point's mix holds".to_string()
    } else {
        format!("left out, mix below the minimums: {}", left_out.join(", "))
    };
    match (peak(points, a), peak(points, b)) {
        (Some((pa, va)), Some((pb, vb))) if pa > 0.0 => format!(
            "ratio of peaks {eb}/{ea} = {:.2} ({eb} {pb:.1} txn/s at {param}={}, {ea} {pa:.1} txn/s at {param}={}; {note})",
            pb / pa,
            format_number(vb),
            format_number(va)
        ),
        _ => format!("ratio of peaks {eb}/{ea} = n/a (no point of both engines with a mix that holds; {note})"),
    }
}

/// Writes `value` as pretty JSON to `path` (a sweep's points, an oracle benchmark's runs).
pub(crate) fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> anyhow::Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    serde_json::to_writer_pretty(&mut w, value).with_context(|| format!("write {}", path.display()))?;
    w.flush().with_context(|| format!("write {}", path.display()))
}

/// A number as short as it can be without losing what matters on a table or an axis: whole
/// numbers without a fraction, others with up to 4 significant digits.
pub fn format_number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else if x != 0.0 && x.abs() < 1e-3 {
        format!("{x:.1e}")
    } else {
        let s = format!("{x:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_parse_counts_and_fractions_and_reject_nonsense() {
        let s = parse_sweep("rows=10,100, 1000").unwrap();
        assert_eq!((s.param, s.values), (SweepParam::Rows, vec![10.0, 100.0, 1000.0]));
        let s = parse_sweep("read-fraction=0,0.5,0.95").unwrap();
        assert_eq!((s.param, s.values), (SweepParam::ReadFraction, vec![0.0, 0.5, 0.95]));
        for p in SweepParam::ALL {
            assert_eq!(parse_sweep(&format!("{}=1", p.name())).unwrap().param, p);
        }
        for bad in ["rows", "rows=", "rows=1.5", "rows=-1", "after=x", "speed=1,2", "read-fraction=nan"] {
            assert!(parse_sweep(bad).is_err(), "{bad}");
        }
        let many = format!("after={}", vec!["1"; SWEEP_VALUES_MAX + 1].join(","));
        assert!(parse_sweep(&many).is_err());
    }

    #[test]
    fn salt_sweeps_are_drawn_as_the_papers_figures() {
        let a = FigureAxis::of("salt-contention", SweepParam::Rows);
        assert!(a.title.contains("Fig. 11"));
        assert_eq!(a.x(100.0), 0.05);
        assert!(FigureAxis::of("salt-position", SweepParam::After).title.contains("Fig. 12"));
        let a = FigureAxis::of("salt-rw", SweepParam::ReadFraction);
        assert!(a.title.contains("Fig. 13"));
        assert_eq!(a.x(0.95), 95.0);
        let a = FigureAxis::of("ycsb", SweepParam::Rows);
        assert_eq!(a.x(100.0), 100.0);
    }

    #[test]
    fn peak_clients_keeps_each_engines_best_run_and_refuses_a_clients_sweep() {
        let mut args = crate::tests::default_args("ycsb");
        args.ycsb.records = 200;
        args.duration = 0.3;
        args.peak_clients = Some(vec![1, 8]);
        let sweep = parse_sweep("read-ratio=0.5").unwrap();
        let mut out = Vec::new();
        run_sweep(&args, &sweep, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("each engine's best of clients=1,8 per point"), "{text}");
        // A closed loop of 8 clients commits more than one client does.
        assert!(text.lines().any(|l| l.trim_end().ends_with("ok  clients=8")), "{text}");
        let err = run_sweep(&args, &parse_sweep("clients=1,2").unwrap(), &mut Vec::new()).unwrap_err();
        assert!(format!("{err:#}").contains("--peak-clients with --sweep clients"), "{err:#}");
        args.peak_clients = Some(vec![0]);
        let err = run_sweep(&args, &sweep, &mut Vec::new()).unwrap_err();
        assert!(format!("{err:#}").contains("at least 1"), "{err:#}");
    }

    #[test]
    fn a_sweep_must_turn_a_knob_the_workload_uses() {
        assert!(SweepParam::Rows.applies_to("salt-contention") && SweepParam::Rows.applies_to("salt-rw"));
        assert!(!SweepParam::Rows.applies_to("salt-position") && !SweepParam::Rows.applies_to("ycsb"));
        assert!(SweepParam::After.applies_to("salt-position") && !SweepParam::After.applies_to("salt-contention"));
        assert!(SweepParam::ReadFraction.applies_to("salt-rw") && !SweepParam::ReadFraction.applies_to("ycsb"));
        assert!(SweepParam::Records.applies_to("ycsb") && !SweepParam::Records.applies_to("salt-rw"));
        assert!(SweepParam::BaseTxns.applies_to("ticketing") && !SweepParam::BaseTxns.applies_to("ycsb"));
        for w in litmus_workloads::bench_names() {
            assert!(SweepParam::Clients.applies_to(w));
        }
        for p in [SweepParam::BaseTxns, SweepParam::Warehouses] {
            assert!(p.applies_to("tpcc") && !p.applies_to("ycsb") && !p.applies_to("salt-rw"));
        }
    }

    #[test]
    fn tpcc_sweeps_set_their_flags_and_draw_fig_9() {
        let mut args = crate::tests::default_args("tpcc");
        SweepParam::BaseTxns.apply(&mut args, 3.0);
        SweepParam::Warehouses.apply(&mut args, 4.0);
        assert_eq!((args.base_txns, args.tpcc.warehouses), (Some(3), 4));
        assert!(FigureAxis::of("tpcc", SweepParam::BaseTxns).title.contains("Fig. 9"));
        let p = latency_figure_path(Path::new("out/tpcc-fig7.svg"));
        assert_eq!(p, Path::new("out/tpcc-fig7-latency.svg"));
    }

    #[test]
    fn granola_sweeps_set_their_flags_and_draw_figs_9_to_11_and_13() {
        let counters = litmus_workloads::granola_counters::NAME;
        for p in [SweepParam::Distributed, SweepParam::Conflict, SweepParam::LockCostUs] {
            assert!(p.applies_to(counters) && !p.applies_to("ycsb") && !p.applies_to("tpcc"), "{}", p.name());
        }
        assert!(
            SweepParam::Distributed.applies_to("tpcc-neworder") && !SweepParam::Conflict.applies_to("tpcc-neworder")
        );
        let mut args = crate::tests::default_args(counters);
        SweepParam::Distributed.apply(&mut args, 0.5);
        SweepParam::Conflict.apply(&mut args, 0.01);
        SweepParam::LockCostUs.apply(&mut args, 30.0);
        assert_eq!((args.distributed, args.counters.conflict, args.counters.lock_cost_us), (Some(0.5), 0.01, 30));
        assert!(parse_sweep("lock-cost-us=2.5").is_err() && parse_sweep("conflict=0.001,0.1").is_ok());
        for (w, p, fig) in [
            (counters, SweepParam::Distributed, "Fig. 9"),
            (counters, SweepParam::LockCostUs, "Fig. 10"),
            (counters, SweepParam::Conflict, "Fig. 11"),
            ("tpcc-neworder", SweepParam::Distributed, "Fig. 13"),
        ] {
            assert!(FigureAxis::of(w, p).title.starts_with(&format!("Granola {fig}")), "{w} {}", p.name());
        }
    }

    #[test]
    fn omid_sweeps_turn_the_oracle_knobs_and_draw_the_omid_figures() {
        let oracle = crate::figures::omid_oracle::NAME;
        for p in [SweepParam::WriteSet, SweepParam::Outstanding, SweepParam::Duration] {
            assert!(p.applies_to(oracle) && !p.applies_to("ycsb") && !p.applies_to("ycsb-t"), "{}", p.name());
        }
        assert!(SweepParam::Clients.applies_to(oracle));
        assert!(!SweepParam::Nodes.applies_to(oracle) && !SweepParam::Partitions.applies_to(oracle));
        assert!(!SweepParam::Rows.applies_to(oracle));
        let mut args = crate::tests::default_args(oracle);
        SweepParam::WriteSet.apply(&mut args, 512.0);
        SweepParam::Outstanding.apply(&mut args, 100.0);
        SweepParam::Duration.apply(&mut args, 2.5);
        assert_eq!((args.omid_oracle.write_set, args.omid_oracle.outstanding, args.duration), (512, 100, 2.5));
        assert_eq!(parse_sweep("duration=0.5,1").unwrap().values, vec![0.5, 1.0]);
        assert!(parse_sweep("write-set=2.5").is_err());
        for (param, fig) in [
            (SweepParam::Clients, "Figs. 7-8"),
            (SweepParam::Outstanding, "Fig. 9"),
            (SweepParam::WriteSet, "Fig. 10"),
            (SweepParam::Duration, "Fig. 12"),
        ] {
            assert!(FigureAxis::of(oracle, param).title.starts_with(&format!("Omid {fig}")), "{}", param.name());
        }
        assert!(FigureAxis::of("ycsb-t", SweepParam::Clients).title.starts_with("Omid Fig. 11"));
        assert!(!FigureAxis::of("ycsb", SweepParam::Clients).title.contains("Omid"));
    }

    #[test]
    fn new_order_sweeps_turn_distributed_and_draw_the_vldb_figures() {
        let s = parse_sweep("distributed=0,0.25,1").unwrap();
        assert_eq!((s.param, s.values), (SweepParam::Distributed, vec![0.0, 0.25, 1.0]));
        assert!(
            SweepParam::Distributed.applies_to("tpcc-neworder")
                && SweepParam::Distributed.applies_to("granola-counters")
        );
        assert!(!SweepParam::Distributed.applies_to("tpcc") && !SweepParam::Distributed.applies_to("ycsb"));
        let mut args = crate::tests::default_args("tpcc-neworder");
        SweepParam::Distributed.apply(&mut args, 0.75);
        assert_eq!(args.distributed, Some(0.75));
        let a = FigureAxis::of("tpcc-neworder", SweepParam::Distributed);
        assert_eq!(a.x(0.25), 25.0);
        assert!(FigureAxis::of("tpcc-neworder", SweepParam::Nodes).title.contains("Fig. 6"));
        assert!(FigureAxis::of("tpcc-neworder", SweepParam::Clients).title.contains("Fig. 5"));
        assert_eq!(per_node_figure_path(Path::new("d/f6.svg")), Path::new("d/f6-per-node.svg"));
    }

    #[test]
    fn numbers_print_short() {
        assert_eq!(format_number(100.0), "100");
        assert_eq!(format_number(0.05), "0.05");
        assert_eq!(format_number(0.0005), "5.0e-4");
        assert_eq!(format_number(0.95), "0.95");
        assert_eq!(format_number(2.0 / 3.0), "0.6667");
    }
}
