//! # The simulator's own checks as workloads: `acked`, `bank`, `minibank`, `salt-chains`
//!
//! Their drivers live in `litmus_runtime::sim` (they check the runtime and the engines, and
//! the runtime's tests run them); these entries make them reachable through the registry for
//! `litmus sim --workload`.

use crate::registry::{three_nodes, SimDef, SimRun, WorkloadDef};
use litmus_protocol::builtin;
use litmus_protocol::engine::Guarantee;
use litmus_runtime::sim::chains::SaltChains;
use litmus_runtime::sim::minibank::MiniBank;
use litmus_runtime::sim::workload::{AckedWrites, Bank};
use litmus_runtime::sim::{SimConfig, Simulator};
use litmus_runtime::ClusterSpec;
use std::sync::Arc;

/// What a simulated seed returns: `Err` when the cluster could not be set up (the command
/// fails), else the outcome line or what failed.
type Outcome = anyhow::Result<Result<String, String>>;

/// A simulator-only entry.
const fn sim_only(name: &'static str, about: &'static str, sim: SimDef) -> WorkloadDef {
    WorkloadDef { name, about, sweeps: &[], build: None, build_for: None, schema: None, analysis: None, sim: Some(sim) }
}

/// Every acknowledged write survives.
pub const ACKED: WorkloadDef = sim_only(
    "acked",
    "every acknowledged write survives (the runtime's durability check)",
    SimDef { needs: None, nodes: three_nodes, step_cost_us: 0, run: run_acked },
);

/// Salt Figs. 1–2: ACID totals never see a BASE transfer in flight; money is conserved.
pub const BANK: WorkloadDef = sim_only(
    "bank",
    "transfers between accounts: ACID totals never see a BASE transfer in flight (Salt Figs. 1-2)",
    SimDef {
        needs: Some((Guarantee::SnapshotIsolation, "a lost update changes the bank's total")),
        nodes: three_nodes,
        step_cost_us: 0,
        run: run_bank,
    },
);

/// Sinfonia §3: transfers read both accounts in one-round reads and commit as one
/// minitransaction comparing what they read (how SQL commits on the one-round engines).
pub const MINIBANK: WorkloadDef = sim_only(
    "minibank",
    "transfers as two one-round reads and a minitransaction of compare and write items (Sinfonia §3)",
    SimDef {
        needs: Some((Guarantee::SnapshotIsolation, "a lost update changes the bank's total")),
        nodes: three_nodes,
        step_cost_us: 0,
        run: run_minibank,
    },
);

/// Salt §5.1: no ACID read sees a value derived from a BASE transaction that has not ended.
pub const SALT_CHAINS: WorkloadDef = sim_only(
    "salt-chains",
    "random BASE chains with provenance: no ACID read sees an unfinished BASE step (Salt §5.1)",
    SimDef {
        needs: Some((Guarantee::SnapshotIsolation, "its ACID checks read no uncommitted or lost step")),
        nodes: three_nodes,
        step_cost_us: 0,
        run: run_chains,
    },
);

/// A simulator over the built-ins with the bank's and the chains' tables and procedures.
fn simulator(run: &SimRun, cfg: SimConfig) -> anyhow::Result<Simulator> {
    let mut catalog = builtin::catalog();
    catalog.merge(&builtin::bank::catalog());
    catalog.merge(&builtin::chains::catalog());
    let mut registry = builtin::registry();
    registry.merge(&builtin::bank::registry());
    registry.merge(&builtin::chains::registry());
    let spec = ClusterSpec {
        engine: run.engine,
        topology: run.topology,
        catalog: Arc::new(catalog),
        registry: Arc::new(registry),
        seed: run.seed,
    };
    Ok(Simulator::new(spec, cfg)?)
}

fn run_acked(run: &SimRun, cfg: SimConfig) -> Outcome {
    let mut sim = simulator(run, cfg)?;
    let mut acked = AckedWrites::for_engine(run.engine);
    Ok(sim
        .run(&mut acked)
        .map(|r| format!("{r} | acked writes {} | reads checked {}", acked.acked(), acked.reads_checked)))
}

fn run_chains(run: &SimRun, cfg: SimConfig) -> Outcome {
    let mut sim = simulator(run, cfg)?;
    let mut chains = SaltChains::new(2 * run.topology.partitions as i64);
    Ok(sim.run(&mut chains).map(|r| {
        format!(
            "{r} | chain steps acked {} | ACID checks {} over {} tags | final check {} tags",
            chains.steps_acked, chains.checks, chains.tags_checked, chains.final_tags
        )
    }))
}

fn run_minibank(run: &SimRun, cfg: SimConfig) -> Outcome {
    if !run.engine.capabilities().one_round {
        anyhow::bail!("minibank needs an engine that takes one-round transactions whole (granola, granola-locking, sinfonia, nocc, base); {} does not", run.engine);
    }
    let mut sim = simulator(run, cfg)?;
    let mut bank = MiniBank::new(8, run.topology.partitions);
    Ok(sim.run(&mut bank).map(|r| {
        format!(
            "{r} | minibank: minitransactions committed {} aborted by a compare {} | totals compared {} | final total {}",
            bank.committed,
            bank.compare_aborts,
            bank.totals_checked(),
            if bank.final_checked() { "compared" } else { "NOT compared" }
        )
    }))
}

fn run_bank(run: &SimRun, cfg: SimConfig) -> Outcome {
    let mut sim = simulator(run, cfg)?;
    let caps = run.engine.capabilities();
    // The transfer each engine runs best: Salt's BASE one, the whole one-round form where the
    // engine takes one-round transactions (with the one-round total), else the ACID one.
    let mut bank = if caps.base_transactions {
        Bank::new(8, "bank_transfer")
    } else if caps.one_round {
        Bank::one_round(8, run.topology.partitions)
    } else {
        Bank::new(8, "bank_transfer_acid")
    };
    Ok(sim.run(&mut bank).map(|r| {
        format!(
            "{r} | bank: accounts {} | totals compared {} (each: row count, sum, no negative balance) | final total {}",
            bank.accounts,
            bank.totals_checked,
            if bank.final_checked { "compared" } else { "NOT compared" }
        )
    }))
}
