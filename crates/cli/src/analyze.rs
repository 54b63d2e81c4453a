//! `litmus analyze <workload>`: which of a workload's transactions need coordination, and why
//! (invariant confluence; see `litmus_analyze`).

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    /// Built-in workload: tpcc, ticketing or ycsb. Omit it to analyze your own files
    /// (`--schema my.sql --procedures my.toml`).
    pub workload: Option<String>,

    /// Write the report as JSON to this file (the text report still goes to stdout).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Use this DDL (tables and declared invariants) instead of the workload's own; its
    /// tables must match the workload's catalog.
    #[arg(long, value_name = "FILE.sql")]
    pub schema: Option<PathBuf>,

    /// Footprints of your own procedures, declared in TOML (see `litmus_analyze::declared`);
    /// needs --schema and no workload.
    #[arg(long, value_name = "FILE.toml", requires = "schema", conflicts_with = "workload")]
    pub procedures: Option<PathBuf>,
}

pub fn run(args: AnalyzeArgs) -> anyhow::Result<()> {
    let read = |path: &PathBuf| std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()));
    let report = match (&args.workload, &args.procedures, &args.schema) {
        (None, Some(procs), Some(schema)) => {
            let declared: litmus_analyze::declared::DeclaredProcedures =
                toml::from_str(&read(procs)?).with_context(|| format!("parsing {}", procs.display()))?;
            let name = schema.file_stem().map_or("schema".into(), |s| s.to_string_lossy().into_owned());
            litmus_analyze::analyze_declared(&name, &read(schema)?, &declared)?
        }
        (Some(workload), None, schema) => {
            let mut spec = litmus_workloads::analysis_of(workload)?;
            if let Some(path) = schema {
                spec.ddl = read(path)?;
            }
            // The recorder runs procedures on synthetic data and counts a panic as a failed
            // run; keep the default hook's messages out of the report while it does.
            let hook = std::panic::take_hook();
            std::panic::set_hook(Box::new(|_| {}));
            let report = litmus_analyze::analyze(&spec);
            std::panic::set_hook(hook);
            report?
        }
        _ => anyhow::bail!(
            "name a workload ({}) or give --schema FILE.sql --procedures FILE.toml",
            litmus_workloads::analyzable_names().join(", ")
        ),
    };
    print!("{}", report.text());
    if let Some(path) = &args.json {
        std::fs::write(path, report.to_json() + "\n").with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
