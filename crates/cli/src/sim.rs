//! `litmus sim`: deterministic simulation runs of the durability check.

use anyhow::bail;
use litmus_bench::ycsb_t_sim;
use litmus_protocol::engine::Guarantee;
use litmus_protocol::{builtin, EngineKind};
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
    /// Engine under test.
    #[arg(long, default_value = "nocc", value_parser = litmus_bench::EngineParser)]
    engine: EngineKind,
    /// What the clients run: `acked` (every acknowledged write survives), `bank` (Salt Figs.
    /// 1–2: ACID totals never see a BASE transfer in flight; money is conserved), `salt-chains`
    /// (random BASE chains across partitions with provenance; no ACID read sees a value derived
    /// from a BASE transaction that has not ended, Salt §5.1), `tpcc-neworder` (VLDB'15 §6.2:
    /// New-Orders, a warehouse per partition; TPC-C's consistency conditions after heal) or
    /// `ycsb-t`
    /// (Omid §V's transactions; node 0, the oracle's, crashes while a commit is in flight; then
    /// every row is read and snapshot isolation checked) or `basic-ycsb` (BASIC §V's operations:
    /// no read returns a mixed state, the column groups of an item never diverge). Every
    /// workload also checks liveness:
    /// after the faults heal, every request a live coordinator received is answered in bounded
    /// time.
    #[arg(long, default_value = "acked")]
    workload: String,
    /// Nodes in the cluster (default 3; under `ycsb-t`, 1 for every third seed — the oracle
    /// without its standby — and 3 otherwise).
    #[arg(long)]
    nodes: Option<u32>,
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
    /// CPU time each message costs the node that receives it, in microseconds (a node handles
    /// one message at a time, so request storms queue up). Default 0 (free); under `ycsb-t`, 20.
    #[arg(long)]
    step_cost_us: Option<u64>,
    /// Charge every step CPU time from a cost table on this many cores per node (the
    /// simulator's CPU model; replaces --step-cost-us). Default: steps are free.
    #[arg(long, value_name = "K")]
    cores_per_node: Option<u32>,
    /// The cost table for --cores-per-node (default: the committed one, measured by `litmus
    /// calibrate`).
    #[arg(long, value_name = "TOML", requires = "cores_per_node")]
    costs: Option<std::path::PathBuf>,
    /// `ycsb-t`: rows in the table (even).
    #[arg(long, default_value_t = litmus_bench::ycsb_t_sim::SIM_ROWS)]
    rows: u64,
    /// Print nothing but failures and the summary.
    #[arg(long)]
    quiet: bool,
    /// Print the message-level trace of each seed: every message delivered or dropped, every
    /// crash, restart, partition and heal, stamped with virtual time.
    #[arg(long)]
    trace: bool,
}

/// `--step-cost-us` under `ycsb-t`.
const YCSBT_STEP_COST_US: u64 = 20;

fn check_probability(name: &str, p: Option<f64>) -> anyhow::Result<()> {
    if let Some(p) = p {
        if !(0.0..=1.0).contains(&p) {
            bail!("--{name} must be a probability in [0, 1], got {p}");
        }
    }
    Ok(())
}

/// The weakest guarantee under which a simulation workload's checks hold, and why: run on an
/// engine that does not give it, its "failures" would be the workload's, not the engine's
/// (as `litmus bench` refuses such a pairing, `Workload::needs_isolation`).
fn sim_needs(workload: &str) -> Option<(Guarantee, &'static str)> {
    match workload {
        "bank" => Some((Guarantee::SnapshotIsolation, "a lost update changes the bank's total")),
        "salt-chains" => Some((Guarantee::SnapshotIsolation, "its ACID checks read no uncommitted or lost step")),
        "ycsb-t" => Some((Guarantee::SnapshotIsolation, "its check is snapshot isolation")),
        "tpcc-neworder" => Some((Guarantee::ReadAtomic, "its order ids need sequential assignment")),
        _ => None,
    }
}

fn refuse_uncovered(engine: EngineKind, workload: &str) -> anyhow::Result<()> {
    let Some((needed, why)) = sim_needs(workload) else { return Ok(()) };
    if engine.capabilities().guarantee.covers(needed) {
        return Ok(());
    }
    let fit: Vec<&str> =
        litmus_engines::ALL.iter().filter(|e| e.capabilities().guarantee.covers(needed)).map(|e| e.name()).collect();
    bail!(
        "engine {} provides {}, and the {workload} simulation needs at least {}: {why}. Choose one of: {}",
        engine.name(),
        engine.guarantee(),
        needed.label(),
        fit.join(", ")
    )
}

pub fn run(args: SimArgs) -> anyhow::Result<()> {
    let engine: EngineKind = args.engine;
    if !["acked", "bank", "salt-chains", "ycsb-t", "basic-ycsb", "tpcc-neworder"].contains(&args.workload.as_str()) {
        bail!(
            "unknown simulation workload {:?} (known: acked, bank, salt-chains, ycsb-t, basic-ycsb, tpcc-neworder)",
            args.workload
        );
    }
    refuse_uncovered(engine, &args.workload)?;
    Topology::new(args.nodes.unwrap_or(3), args.partitions)?;
    for (n, p) in
        [("loss", args.loss), ("duplicate", args.duplicate), ("crash", args.crash), ("partition", args.partition)]
    {
        check_probability(n, p)?;
    }
    if args.clients == 0 || args.clients > 10_000 {
        bail!("--clients must be in 1..=10000");
    }
    let cpu = match args.cores_per_node {
        None => None,
        Some(k) => {
            let table = match &args.costs {
                Some(path) => litmus_runtime::cost::CostTable::load(path)?,
                None => litmus_runtime::cost::CostTable::builtin(),
            };
            Some(litmus_runtime::sim::CpuModel::new(k, std::sync::Arc::new(table))?)
        }
    };
    let mut failures = 0;
    for seed in args.seed..args.seed.saturating_add(args.seeds.max(1)) {
        let ycsbt = args.workload == "ycsb-t";
        let nodes = args.nodes.unwrap_or(if ycsbt && seed % 3 == 0 { 1 } else { 3 });
        let topology = Topology::new(nodes, args.partitions)?;
        let mut cfg = SimConfig::new(seed);
        if args.faults {
            cfg = cfg.with_faults();
        }
        cfg.net.loss = args.loss.unwrap_or(cfg.net.loss);
        cfg.net.duplicate = args.duplicate.unwrap_or(cfg.net.duplicate);
        cfg.faults.crash = args.crash.unwrap_or(cfg.faults.crash);
        cfg.faults.partition = args.partition.unwrap_or(cfg.faults.partition);
        cfg.clients = args.clients;
        cfg.trace = args.trace;
        cfg.duration = Duration::from_millis(args.duration_ms);
        cfg.step_cost = Duration::from_micros(args.step_cost_us.unwrap_or(if ycsbt { YCSBT_STEP_COST_US } else { 0 }));
        cfg.cpu = cpu.clone();
        if ycsbt {
            let outcome = ycsb_t_sim::simulate(engine, nodes, args.partitions, cfg, args.rows).map(|(r, d)| {
                let written = d.tally.as_ref().map_or(0, |t| t.written);
                format!(
                    "{r} | nodes {nodes} | ycsb-t commits {} failed {} | pairs written {written}",
                    d.committed, d.failed
                )
            });
            failures += report(seed, nodes, outcome, args.quiet);
            continue;
        }
        if args.workload == "basic-ycsb" {
            let outcome = litmus_bench::basic_ycsb_sim::simulate(engine, nodes, args.partitions, cfg).map(|(r, d)| {
                let (reads, multi, bad) = d.seen;
                format!("{r} | basic-ycsb ok {} failed {} | reads {reads} ({multi} multi-partition, {bad} mixed) | columns agree", d.committed, d.failed)
            });
            failures += report(seed, nodes, outcome, args.quiet);
            continue;
        }
        if args.workload == litmus_bench::tpcc_neworder::NAME {
            let outcome = litmus_bench::tpcc_neworder::simulate(engine, topology, cfg);
            failures += report(seed, nodes, outcome, args.quiet);
            continue;
        }
        let mut catalog = builtin::catalog();
        catalog.merge(&builtin::bank::catalog());
        catalog.merge(&builtin::chains::catalog());
        let mut registry = builtin::registry();
        registry.merge(&builtin::bank::registry());
        registry.merge(&builtin::chains::registry());
        let spec = ClusterSpec { engine, topology, catalog: Arc::new(catalog), registry: Arc::new(registry), seed };
        let mut sim = Simulator::new(spec, cfg)?;
        let mut acked = AckedWrites::for_engine(engine);
        let caps = engine.capabilities();
        // The transfer each engine runs best: Salt's BASE one, the whole one-round form where the
        // engine takes one-round transactions (with the one-round total), else the ACID one.
        let mut bank = if caps.base_transactions {
            Bank::new(8, "bank_transfer")
        } else if caps.one_round {
            Bank::one_round(8, args.partitions)
        } else {
            Bank::new(8, "bank_transfer_acid")
        };
        let mut chains = SaltChains::new(2 * args.partitions as i64);
        let outcome = match args.workload.as_str() {
            "acked" => sim
                .run(&mut acked)
                .map(|r| format!("{r} | acked writes {} | reads checked {}", acked.acked(), acked.reads_checked)),
            "salt-chains" => sim.run(&mut chains).map(|r| {
                format!(
                    "{r} | chain steps acked {} | ACID checks {} over {} tags | final check {} tags",
                    chains.steps_acked, chains.checks, chains.tags_checked, chains.final_tags
                )
            }),
            _ => sim.run(&mut bank).map(|r| {
                format!(
                    "{r} | bank: accounts {} | totals compared {} (each: row count, sum, no negative balance) | final total {}",
                    bank.accounts,
                    bank.totals_checked,
                    if bank.final_checked { "compared" } else { "NOT compared" }
                )
            }),
        };
        failures += report(seed, nodes, outcome, args.quiet);
    }
    println!("{} passed, {} failed", args.seeds.max(1) - failures, failures);
    if failures > 0 {
        bail!("{failures} simulation run(s) failed");
    }
    Ok(())
}

/// Prints one seed's outcome (a failure with its replay command); 1 when it failed.
fn report(seed: u64, nodes: u32, outcome: Result<String, String>, quiet: bool) -> u64 {
    match outcome {
        Ok(line) => {
            if !quiet {
                println!("ok   {line}");
            }
            0
        }
        Err(e) => {
            println!("FAIL seed {seed} ({nodes} nodes): {e}");
            println!("     replay: litmus sim --seed {seed}{}", replay_flags());
            1
        }
    }
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
        let takes_value = !matches!(flag.as_str(), "--faults" | "--quiet" | "--trace");
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
