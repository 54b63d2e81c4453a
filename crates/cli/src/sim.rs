//! `litmus sim`: deterministic simulation runs of the durability check.

use anyhow::bail;
use litmus_engine::{builtin, EngineKind};
use litmus_runtime::sim::chains::SaltChains;
use litmus_runtime::sim::workload::{AckedWrites, Bank};
use litmus_runtime::sim::{SimConfig, Simulator};
use litmus_runtime::{ClusterSpec, Topology};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args)]
pub struct SimArgs {
    /// The seed to run (or replay). With --seeds K, runs seeds N..N+K.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// How many consecutive seeds to run.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Turn every fault on: 1% loss, 1% duplication, crashes, partitions (also set individually below).
    #[arg(long)]
    faults: bool,
    /// Engine under test (nocc, acid, salt, salt-local).
    #[arg(long, default_value = "nocc")]
    engine: String,
    /// What the clients run: `acked` (every acknowledged write survives), `bank` (Salt Figs.
    /// 1–2: ACID totals never see a BASE transfer in flight; money is conserved) or
    /// `salt-chains` (random BASE chains across partitions with provenance; no ACID read sees a
    /// value derived from a BASE transaction that has not ended, Salt §5.1).
    #[arg(long, default_value = "acked")]
    workload: String,
    #[arg(long, default_value_t = 3)]
    nodes: u32,
    #[arg(long, default_value_t = 6)]
    partitions: u32,
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Virtual duration of the workload phase, in milliseconds.
    #[arg(long, default_value_t = 1500)]
    duration_ms: u64,
    /// Message loss probability (overrides --faults).
    #[arg(long)]
    loss: Option<f64>,
    /// Message duplication probability (overrides --faults).
    #[arg(long)]
    duplicate: Option<f64>,
    /// Per-100ms probability of crashing a node (overrides --faults).
    #[arg(long)]
    crash: Option<f64>,
    /// Per-100ms probability of a network partition (overrides --faults).
    #[arg(long)]
    partition: Option<f64>,
    /// Print nothing but failures and the summary.
    #[arg(long)]
    quiet: bool,
}

fn check_probability(name: &str, p: Option<f64>) -> anyhow::Result<()> {
    if let Some(p) = p {
        if !(0.0..=1.0).contains(&p) {
            bail!("--{name} must be a probability in [0, 1], got {p}");
        }
    }
    Ok(())
}

pub fn run(args: SimArgs) -> anyhow::Result<()> {
    let engine: EngineKind = args.engine.parse()?;
    let topology = Topology::new(args.nodes, args.partitions)?;
    for (n, p) in
        [("loss", args.loss), ("duplicate", args.duplicate), ("crash", args.crash), ("partition", args.partition)]
    {
        check_probability(n, p)?;
    }
    if args.clients == 0 || args.clients > 10_000 {
        bail!("--clients must be in 1..=10000");
    }
    let mut failures = 0;
    for seed in args.seed..args.seed.saturating_add(args.seeds.max(1)) {
        let mut catalog = builtin::catalog();
        catalog.merge(&builtin::bank::catalog());
        catalog.merge(&builtin::chains::catalog());
        let mut registry = builtin::registry();
        registry.merge(&builtin::bank::registry());
        registry.merge(&builtin::chains::registry());
        let spec = ClusterSpec { engine, topology, catalog: Arc::new(catalog), registry: Arc::new(registry), seed };
        let mut cfg = SimConfig::new(seed);
        if args.faults {
            cfg = cfg.with_faults();
        }
        cfg.net.loss = args.loss.unwrap_or(cfg.net.loss);
        cfg.net.duplicate = args.duplicate.unwrap_or(cfg.net.duplicate);
        cfg.faults.crash = args.crash.unwrap_or(cfg.faults.crash);
        cfg.faults.partition = args.partition.unwrap_or(cfg.faults.partition);
        cfg.clients = args.clients;
        cfg.duration = Duration::from_millis(args.duration_ms);
        let mut sim = Simulator::new(spec, cfg)?;
        let mut acked = AckedWrites::new();
        let base = matches!(engine, EngineKind::Salt | EngineKind::SaltLocal);
        let mut bank = Bank::new(8, if base { "bank_transfer" } else { "bank_transfer_acid" });
        let mut chains = SaltChains::new(2 * args.partitions as i64);
        let outcome = match args.workload.as_str() {
            "acked" => sim
                .run(&mut acked)
                .map(|r| format!("{r} | acked writes {} | reads checked {}", acked.acked(), acked.reads_checked)),
            "bank" => sim.run(&mut bank).map(|r| format!("{r} | totals checked {}", bank.totals_checked)),
            "salt-chains" => sim.run(&mut chains).map(|r| {
                format!(
                    "{r} | chain steps acked {} | ACID checks {} over {} tags | final check {} tags",
                    chains.steps_acked, chains.checks, chains.tags_checked, chains.final_tags
                )
            }),
            other => bail!("unknown simulation workload {other:?} (known: acked, bank, salt-chains)"),
        };
        match outcome {
            Ok(line) => {
                if !args.quiet {
                    println!("ok   {line}");
                }
            }
            Err(e) => {
                failures += 1;
                println!("FAIL seed {seed}: {e}");
                println!("     replay: litmus sim --seed {seed}{}", replay_flags());
            }
        }
    }
    println!("{} passed, {} failed", args.seeds.max(1) - failures, failures);
    if failures > 0 {
        bail!("{failures} simulation run(s) failed");
    }
    Ok(())
}

/// The flags of this invocation minus `--seed`, `--seeds` and `--quiet`, so a failing seed's
/// replay command reproduces the same configuration.
fn replay_flags() -> String {
    let mut out = String::new();
    let mut args = std::env::args().skip_while(|a| a != "sim").skip(1);
    while let Some(a) = args.next() {
        let (flag, inline_value) = match a.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (a.clone(), None),
        };
        let takes_value = !matches!(flag.as_str(), "--faults" | "--quiet");
        let value = if takes_value && inline_value.is_none() { args.next() } else { inline_value };
        if matches!(flag.as_str(), "--seed" | "--seeds" | "--quiet") {
            continue;
        }
        out.push(' ');
        out.push_str(&flag);
        if let Some(v) = value {
            out.push(' ');
            out.push_str(&v);
        }
    }
    out
}
