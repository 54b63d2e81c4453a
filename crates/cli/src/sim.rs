//! `litmus sim`: deterministic simulation runs of the durability check.

use anyhow::bail;
use litmus_protocol::EngineKind;
use litmus_runtime::sim::{CpuModel, SimConfig};
use litmus_runtime::Topology;
use litmus_workloads::{SimDef, SimRun, WorkloadDef};
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
    /// 1–2: ACID totals never see a BASE transfer in flight; money is conserved), `minibank`
    /// (Sinfonia §3 on the one-round engines: transfers as two one-round reads and a
    /// minitransaction comparing them; the bank's totals hold), `salt-chains`
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
    #[arg(long, default_value = litmus_workloads::sim_checks::ACKED.name)]
    workload: String,
    /// Nodes in the cluster (default 3; under `ycsb-t`, 1 for every third seed and 3
    /// otherwise).
    #[arg(long)]
    nodes: Option<u32>,
    #[arg(long, default_value_t = 6)]
    partitions: u32,
    /// Replicas of each partition (a raft group per partition; 1: not replicated). The node
    /// count rises to it when --nodes is not given.
    #[arg(long, default_value_t = 1)]
    replicas: u32,
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
    #[arg(long, default_value_t = litmus_workloads::ycsb_t_sim::SIM_ROWS)]
    rows: u64,
    /// Print nothing but failures and the summary.
    #[arg(long)]
    quiet: bool,
    /// Print the message-level trace of each seed: every message delivered or dropped, every
    /// crash, restart, partition and heal, stamped with virtual time.
    #[arg(long)]
    trace: bool,
}

fn check_probability(name: &str, p: Option<f64>) -> anyhow::Result<()> {
    if let Some(p) = p {
        if !(0.0..=1.0).contains(&p) {
            bail!("--{name} must be a probability in [0, 1], got {p}");
        }
    }
    Ok(())
}

/// Refuses an engine whose guarantee does not cover what the workload's checks need
/// ([`SimDef::needs`]): its "failures" would be the workload's, not the engine's (as `litmus
/// bench` refuses such a pairing, `Workload::needs_isolation`).
fn refuse_uncovered(engine: EngineKind, workload: &WorkloadDef, sim: &SimDef) -> anyhow::Result<()> {
    let Some((needed, why)) = sim.needs else { return Ok(()) };
    if engine.capabilities().guarantee.covers(needed) {
        return Ok(());
    }
    let fit: Vec<&str> =
        litmus_engines::ALL.iter().filter(|e| e.capabilities().guarantee.covers(needed)).map(|e| e.name()).collect();
    bail!(
        "engine {} provides {}, and the {} simulation needs at least {}: {why}. Choose one of: {}",
        engine.name(),
        engine.guarantee(),
        workload.name,
        needed.label(),
        fit.join(", ")
    )
}

/// The CPU model `--cores-per-node` and `--costs` ask for, if any.
fn cpu_model(args: &SimArgs) -> anyhow::Result<Option<CpuModel>> {
    let Some(k) = args.cores_per_node else { return Ok(None) };
    let table = match &args.costs {
        Some(path) => litmus_runtime::cost::CostTable::load(path)?,
        None => litmus_runtime::cost::CostTable::builtin(),
    };
    Ok(Some(CpuModel::new(k, Arc::new(table))?))
}

/// The simulator's settings for `seed` from the flags (the workload's defaults where a flag is
/// not given).
fn sim_config(args: &SimArgs, sim: &SimDef, seed: u64, cpu: &Option<CpuModel>) -> SimConfig {
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
    cfg.step_cost = Duration::from_micros(args.step_cost_us.unwrap_or(sim.step_cost_us));
    cfg.cpu = cpu.clone();
    cfg
}

pub fn run(args: SimArgs) -> anyhow::Result<()> {
    let engine: EngineKind = args.engine;
    let workload = litmus_workloads::sim_by_name(&args.workload)?;
    let sim = workload.sim.as_ref().expect("sim_by_name finds simulated workloads only");
    refuse_uncovered(engine, workload, sim)?;
    Topology::new(args.nodes.unwrap_or(3).max(args.replicas), args.partitions)?.with_replicas(args.replicas)?;
    for (n, p) in
        [("loss", args.loss), ("duplicate", args.duplicate), ("crash", args.crash), ("partition", args.partition)]
    {
        check_probability(n, p)?;
    }
    if args.clients == 0 || args.clients > 10_000 {
        bail!("--clients must be in 1..=10000");
    }
    let cpu = cpu_model(&args)?;
    let mut failures = 0;
    for seed in args.seed..args.seed.saturating_add(args.seeds.max(1)) {
        let nodes = args.nodes.unwrap_or_else(|| (sim.nodes)(seed).max(args.replicas));
        let topology = Topology::new(nodes, args.partitions)?.with_replicas(args.replicas)?;
        let cfg = sim_config(&args, sim, seed, &cpu);
        let outcome = (sim.run)(&SimRun { engine, topology, seed, rows: args.rows }, cfg)?;
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
