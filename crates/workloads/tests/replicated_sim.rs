//! Replicated partitions under the simulator's faults: every engine's checks pass with three
//! replicas per partition, and the checks fail when the replication rules are broken on
//! purpose (`litmus_runtime::replica::BREAK_RULE`).
//!
//! The rule-breaking runs share one process-wide switch, so they run inside one test, in turn.
//! `REPLICA_SEEDS=n` widens every sweep.

use litmus_runtime::replica::{BREAK_RULE, BREAK_SEND_BEFORE_COMMIT, BREAK_SERVE_WITHOUT_LEASE};
use litmus_runtime::sim::SimConfig;
use litmus_runtime::Topology;
use litmus_workloads::SimRun;
use std::sync::atomic::Ordering;

fn seeds(default: u64) -> u64 {
    std::env::var("REPLICA_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// Runs `workload` on `engine` with 3 nodes and 3 replicas for `seed` under `cfg`'s faults.
fn run(engine: &str, workload: &str, seed: u64, cfg: SimConfig) -> Result<String, String> {
    let engine = litmus_engines::by_name(engine).expect("a registered engine");
    let def = litmus_workloads::sim_by_name(workload).expect("a simulated workload");
    let sim = def.sim.as_ref().expect("simulated");
    let topology = Topology::new(3, 6).unwrap().with_replicas(3).unwrap();
    (sim.run)(&SimRun { engine, topology, seed, rows: litmus_workloads::ycsb_t_sim::SIM_ROWS }, cfg)
        .expect("the run starts")
}

fn sweep(engine: &str, workload: &str, n: u64) {
    for seed in 0..n {
        if let Err(e) = run(engine, workload, seed, SimConfig::new(seed).with_faults()) {
            panic!("{engine} {workload} seed {seed}: {e}\n replay: litmus sim --engine {engine} --workload {workload} --replicas 3 --faults --seed {seed}");
        }
    }
}

#[test]
fn locking_engines_keep_their_checks_with_replicated_partitions() {
    sweep("acid", "bank", seeds(4));
    sweep("salt", "salt-chains", seeds(3));
    sweep("acid", "acked", seeds(3));
}

#[test]
fn one_round_and_formula_engines_keep_their_checks_with_replicated_partitions() {
    sweep("granola", "bank", seeds(4));
    sweep("basic", "basic-ycsb", seeds(3));
}

#[test]
fn coordfree_and_omid_keep_their_checks_with_replicated_partitions() {
    sweep("coordfree", "tpcc-neworder", seeds(3));
    sweep("omid", "ycsb-t", seeds(3));
}

/// The first failing seed among `n` with `rule` broken, if any.
fn first_failure(rule: u8, engine: &str, workload: &str, n: u64, cfg: impl Fn(u64) -> SimConfig) -> Option<u64> {
    BREAK_RULE.store(rule, Ordering::Relaxed);
    let found = (0..n).find(|&seed| run(engine, workload, seed, cfg(seed)).is_err());
    BREAK_RULE.store(0, Ordering::Relaxed);
    found
}

/// Crashes only (no loss or duplication, so nothing else can fail a run): a leader that
/// answers before its records commit loses acknowledged writes when it crashes and another
/// replica, which never had them, takes over.
fn crashes(seed: u64) -> SimConfig {
    let mut cfg = SimConfig::new(seed).with_faults();
    cfg.net.loss = 0.0;
    cfg.net.duplicate = 0.0;
    cfg.faults.partition = 0.0;
    cfg.faults.crash = 0.4;
    cfg
}

/// Network partitions only: a leader cut off from its group that goes on serving reads
/// without a lease answers from a state the new leader has moved past (a read of a key whose
/// write was acknowledged finds nothing).
fn partitions(seed: u64) -> SimConfig {
    let mut cfg = SimConfig::new(seed).with_faults();
    cfg.net.loss = 0.0;
    cfg.net.duplicate = 0.0;
    cfg.faults.crash = 0.0;
    cfg.faults.partition = 0.5;
    cfg
}

#[test]
fn the_checks_fail_when_replication_rules_are_broken() {
    let n = seeds(40);
    let send_early = first_failure(BREAK_SEND_BEFORE_COMMIT, "acid", "acked", n, crashes);
    assert!(send_early.is_some(), "no seed of {n} caught a leader acknowledging before commit");
    let no_lease = first_failure(BREAK_SERVE_WITHOUT_LEASE, "acid", "acked", n, partitions);
    assert!(no_lease.is_some(), "no seed of {n} caught a leader serving without a lease");
    // With the rules kept, the same schedules pass.
    for seed in [send_early.unwrap(), no_lease.unwrap()] {
        run("acid", "acked", seed, crashes(seed)).unwrap();
        run("acid", "acked", seed, partitions(seed)).unwrap();
    }
}
