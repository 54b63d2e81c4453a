//! `litmus analyze <workload>`: which of a workload's transactions need coordination, and why
//! (invariant confluence; see `litmus_analyze`). Also a user's own: `--schema my.sql` with
//! declared footprints (`--procedures my.toml`) or SQL transactions (`--sql txns.sql`).

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

    /// SQL transactions to judge against --schema's invariants: `BEGIN ... COMMIT` blocks
    /// (each statement outside one is its own transaction), `-- transaction: NAME` naming the
    /// next; a pgbench script works as it is (see `litmus_analyze::sql`).
    #[arg(long, value_name = "FILE.sql", requires = "schema", conflicts_with_all = ["workload", "procedures"])]
    pub sql: Option<PathBuf>,
}

pub fn run(args: AnalyzeArgs) -> anyhow::Result<()> {
    let read = |path: &PathBuf| std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()));
    let report = match (&args.workload, &args.procedures, &args.schema) {
        (None, None, Some(schema)) if args.sql.is_some() => {
            let script = args.sql.as_ref().expect("matched");
            let name = script.file_stem().map_or("sql".into(), |s| s.to_string_lossy().into_owned());
            litmus_analyze::analyze_sql(&name, &read(schema)?, &read(script)?)?
        }
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
            "name a workload ({}) or give --schema FILE.sql with --procedures FILE.toml or --sql FILE.sql",
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
