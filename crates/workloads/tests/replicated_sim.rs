//! Replicated partitions under the simulator's faults: every engine family's checks pass with
//! three replicas per partition (the rules broken on purpose are in
//! `crates/runtime/tests/replica_rules.rs`). `REPLICA_SEEDS=n` widens every sweep.

use litmus_runtime::sim::SimConfig;
use litmus_runtime::Topology;
use litmus_workloads::SimRun;

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
