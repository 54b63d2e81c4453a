//! `litmus analyze <workload>`: which of a workload's transactions need coordination, and why
//! (invariant confluence; see `litmus_analyze`).

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    /// Built-in workload: tpcc, ticketing or ycsb.
    pub workload: String,

    /// Write the report as JSON to this file (the text report still goes to stdout).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Use this DDL (tables and declared invariants) instead of the workload's own; its
    /// tables must match the workload's catalog.
    #[arg(long, value_name = "FILE.sql")]
    pub schema: Option<PathBuf>,
}

pub fn run(args: AnalyzeArgs) -> anyhow::Result<()> {
    let mut spec = litmus_bench::analysis::spec(&args.workload)?;
    if let Some(path) = &args.schema {
        spec.ddl = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    }
    // The recorder runs procedures on synthetic data and counts a panic as a failed run; keep
    // the default hook's messages out of the report while it does.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let report = litmus_analyze::analyze(&spec);
    std::panic::set_hook(hook);
    let report = report?;
    print!("{}", report.text());
    if let Some(path) = &args.json {
        std::fs::write(path, report.to_json() + "\n").with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
