//! # `litmus calibrate`: measure what each machine step costs, for the simulator
//!
//! Runs representative workloads on the embedded runtime — by default `ycsb` and `tpcc` on
//! every registered engine that can run them (an engine that refuses a workload, e.g. one
//! without isolation under a workload that needs it, is skipped and said so) — with every
//! worker measuring the thread CPU time (`CLOCK_THREAD_CPUTIME_ID`) of each machine step inside
//! the measured window, by role and message kind ([`litmus_runtime::cost::step_key`]), plus the
//! worker's own CPU per step outside the machines and per group commit. The means go to a
//! [`CostTable`] written as TOML; `litmus bench --runtime sim --costs FILE` and `litmus sim
//! --cores-per-node K --costs FILE` read it. The committed default
//! (`crates/runtime/costs/default.toml`) came from this command; its `command` and `note`
//! fields say how and on what.
//!
//! A key measured under several workloads of one engine is averaged over all its steps
//! (weighted by count). Engines added later get their costs from the same command.

use crate::harness;
use crate::BenchArgs;
use anyhow::Context as _;
use clap::Parser;
use litmus_protocol::EngineKind;
use litmus_runtime::cost::{CostEntry, CostProfile, CostTable, ProfileData, DEFAULT_STEP_NS};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

/// The flags of `litmus calibrate`.
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct CalibrateArgs {
    /// Where to write the cost table (TOML).
    #[arg(long, value_name = "TOML")]
    pub out: PathBuf,

    /// Workloads to run on every engine, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "ycsb,tpcc")]
    pub workloads: Vec<String>,

    /// Engines to measure, comma-separated (default: every registered engine).
    #[arg(long, value_delimiter = ',')]
    pub engines: Option<Vec<String>>,

    /// Measured seconds per run.
    #[arg(long, value_name = "SECS", default_value_t = 3.0)]
    pub duration: f64,

    /// Closed-loop clients per run.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,

    /// More `litmus bench` flags for every run, separated by spaces (e.g. `--bench-flags
    /// '--txn-size 4 --distribution uniform'`), so that a table can be measured on the very
    /// workload a simulated figure runs.
    #[arg(long, value_name = "FLAGS", allow_hyphen_values = true, default_value = "")]
    pub bench_flags: String,

    /// The table's name (shown in simulated reports). Default: the output file's stem.
    #[arg(long)]
    pub name: Option<String>,

    /// Free text saved with the table: the machine and how loaded it was.
    #[arg(long, default_value = "")]
    pub note: String,

    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Parser)]
struct BenchCli {
    #[command(flatten)]
    args: BenchArgs,
}

/// One run of the calibration.
struct Measured {
    engine: EngineKind,
    workload: String,
    steps: u64,
    throughput: f64,
}

/// `litmus calibrate`: runs, measures, writes the table; prints one line per run to `out`.
pub fn run(args: &CalibrateArgs, command: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    let engines: Vec<EngineKind> = match &args.engines {
        None => litmus_engines::ALL.to_vec(),
        Some(names) => names
            .iter()
            .map(|n| litmus_engines::by_name(n.trim()).map_err(|e| anyhow::anyhow!("{e}")))
            .collect::<anyhow::Result<_>>()?,
    };
    if args.workloads.is_empty() {
        anyhow::bail!("--workloads names no workload");
    }
    let mut per_engine: BTreeMap<String, ProfileData> = BTreeMap::new();
    let mut runs: Vec<Measured> = Vec::new();
    for &engine in &engines {
        for workload in &args.workloads {
            let mut argv = vec!["bench".to_string(), workload.clone()];
            // A short warmup unless `--bench-flags` sets one (e.g. past coordfree's META_KEEP,
            // so that the loader's RAMP metadata is collected before the window: steady state).
            if !args.bench_flags.split_whitespace().any(|f| f == "--warmup" || f.starts_with("--warmup=")) {
                argv.extend(["--warmup".into(), "0.5".into()]);
            }
            argv.extend(["--duration".into(), args.duration.to_string(), "--clients".into(), args.clients.to_string()]);
            argv.extend(args.bench_flags.split_whitespace().map(String::from));
            if args.quiet {
                argv.push("--quiet".into());
            }
            let bench = BenchCli::try_parse_from(&argv).with_context(|| format!("flags for {workload}"))?.args;
            let w = crate::workload_for(workload, &bench, engine)?;
            let cfg = crate::config(&bench, engine)?;
            if let Err(e) = harness::check_isolation(&cfg, w.as_ref()) {
                writeln!(out, "{workload:<10} on {:<12} skipped: {e}", engine.name())?;
                continue;
            }
            let profile = Arc::new(CostProfile::default());
            let report = match harness::run_profiled(&cfg, Arc::from(w), profile.clone()) {
                Ok(r) => r,
                Err(e) => {
                    writeln!(out, "{workload:<10} on {:<12} skipped: it did not run: {e:#}", engine.name())?;
                    continue;
                }
            };
            let data = profile.take();
            let steps: u64 = data.steps.values().map(|s| s.n).sum();
            writeln!(
                out,
                "{workload:<10} on {:<12} {:>9.1} txn/s  {steps:>9} steps measured, {} kinds",
                engine.name(),
                report.throughput,
                data.steps.len()
            )?;
            out.flush()?;
            per_engine.entry(engine.name().to_string()).or_default().merge(&data);
            runs.push(Measured { engine, workload: workload.clone(), steps, throughput: report.throughput });
        }
    }
    if runs.is_empty() {
        anyhow::bail!("no run measured anything");
    }
    let name = args
        .name
        .clone()
        .or_else(|| args.out.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "costs".into());
    let runs_note: Vec<String> = runs
        .iter()
        .map(|r| format!("{}/{} {:.0} txn/s {} steps", r.workload, r.engine.name(), r.throughput, r.steps))
        .collect();
    let engines: BTreeMap<String, BTreeMap<String, CostEntry>> =
        per_engine.into_iter().map(|(e, d)| (e, d.entries())).collect();
    let table = CostTable {
        name,
        command: command.to_string(),
        note: format!("{} | runs: {}", args.note, runs_note.join("; ")),
        default_ns: DEFAULT_STEP_NS,
        engines,
    };
    std::fs::write(&args.out, table.to_toml()).with_context(|| format!("write {}", args.out.display()))?;
    writeln!(out, "wrote {} ({} engines)", args.out.display(), table.engines.len())?;
    Ok(())
}
