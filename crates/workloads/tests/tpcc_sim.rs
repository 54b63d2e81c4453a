//! Small-scale TPC-C on the deterministic simulator with every fault on (loss, duplication,
//! crashes, partitions), on `acid` and `salt`, over a handful of seeds; every run ends with the
//! full consistency check. A failure prints the seed to replay.

use litmus_protocol::{builtin, EngineKind};
use litmus_runtime::sim::{SimConfig, Simulator};
use litmus_runtime::{ClusterSpec, Topology};
use litmus_workloads::tpcc::sim::TpccSim;
use litmus_workloads::tpcc::{Tpcc, TpccOptions};
use litmus_workloads::workload::Workload;
use std::sync::Arc;
use std::time::Duration;

/// 2 warehouses, 30 customers per district, 1,000 items; `delivery_txns` per ACID Delivery.
fn tpcc(base_txns: u32, delivery_txns: u32) -> Tpcc {
    let opts = TpccOptions { base_txns: Some(base_txns), scale_div: 100, delivery_txns, ..TpccOptions::DEFAULT };
    Tpcc::new(&opts, false).unwrap()
}

fn run(engine: EngineKind, base_txns: u32, seed: u64) -> (u64, String) {
    let (committed, verdict, _) = run_with(engine, base_txns, 1, seed);
    (committed, verdict)
}

/// Committed transactions, the check's verdict, and the Delivery calls that committed.
fn run_with(engine: EngineKind, base_txns: u32, delivery_txns: u32, seed: u64) -> (u64, String, u64) {
    run_in(engine, base_txns, delivery_txns, seed, Topology::new(2, 4).unwrap())
}

/// [`run_with`] on a given layout.
fn run_in(engine: EngineKind, base_txns: u32, delivery_txns: u32, seed: u64, topology: Topology) -> (u64, String, u64) {
    let w = tpcc(base_txns, delivery_txns);
    let mut catalog = builtin::catalog();
    catalog.merge(&w.catalog());
    let mut registry = builtin::registry();
    w.register(&mut registry);
    let spec = ClusterSpec { engine, topology, catalog: Arc::new(catalog), registry: Arc::new(registry), seed };
    let mut cfg = SimConfig::new(seed).with_faults();
    cfg.duration = Duration::from_millis(2000);
    // Every fault as `with_faults` sets it, 1% loss included: the locking engine resends a lost
    // operation after 100 ms (before it did not, and loss had to be lowered to 0.2% here). The
    // verification client still outwaits slow answers (its deadline is 4 request timeouts), or
    // the late answer of a timed-out verification request trips the simulator.
    cfg.request_timeout = Duration::from_secs(3);
    // The lock tables grow to hundreds of entries (a Delivery locks dozens of rows) and their
    // invariant check is quadratic: check every 64th step rather than every one.
    cfg.invariant_check_every = 64;
    let replay = format!("seed {seed}, engine {engine}, base_txns {base_txns}, delivery_txns {delivery_txns}");
    let mut sim = Simulator::new(spec, cfg).unwrap();
    let mut driver = TpccSim::new(w);
    driver.load(&mut sim).unwrap_or_else(|e| panic!("{replay}: load failed: {e}"));
    let fresh = driver.check(&mut sim, true).unwrap_or_else(|e| panic!("{replay}: fresh database: {e:#}"));
    assert!(fresh.to_string().contains("3.3.2.11"));
    let report = sim.run(&mut driver).unwrap_or_else(|e| panic!("{replay} failed: {e}"));
    let verdict = driver.verdict.clone().expect("verify ran");
    eprintln!("{replay}: {report}\n  {:?}\n  {verdict}", driver.outcomes);
    let deliveries = driver.outcomes.get(litmus_workloads::tpcc::KIND_DELIVERY).map_or(0, |o| o.0);
    (driver.committed(), verdict, deliveries)
}

fn seeds() -> u64 {
    std::env::var("LITMUS_TPCC_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(4)
}

#[test]
fn acid_tpcc_keeps_the_consistency_conditions_under_faults() {
    let mut committed = 0;
    for seed in 0..seeds() {
        committed += run(litmus_engines::ACID, 0, seed).0;
    }
    assert!(committed > 10 * seeds(), "only {committed} transactions committed");
}

/// Salt runs: Salt's choice (new-order, payment BASE) and everything BASE, on `salt` and
/// `salt-local`, every fault on (duplication included). The last three once failed, each
/// traced to the locking engine and fixed there: `salt,2,103` and `salt,5,201` never settled
/// (a BASE subtransaction's locks left behind by a dead coordinator incarnation), and
/// `salt-local,2,203` added a Payment's amount to `w_ytd` twice (a late duplicate of a
/// locally committed operation re-run after its transaction had ended).
const SALT_CASES: [(EngineKind, u32, u64); 8] = [
    (litmus_engines::SALT, 2, 100),
    (litmus_engines::SALT, 5, 101),
    (litmus_engines::SALT_LOCAL, 2, 102),
    (litmus_engines::SALT, 2, 106),
    (litmus_engines::SALT_LOCAL, 5, 109),
    (litmus_engines::SALT, 2, 103),
    (litmus_engines::SALT, 5, 201),
    (litmus_engines::SALT_LOCAL, 2, 203),
];

#[test]
fn salt_tpcc_keeps_the_consistency_conditions_under_faults() {
    let mut committed = 0;
    for (engine, base_txns, seed) in SALT_CASES {
        committed += run(engine, base_txns, seed).0;
    }
    assert!(committed > 10 * SALT_CASES.len() as u64, "only {committed} transactions committed");
}

/// Deliveries as ten district transactions (`--delivery-txns 10`, TPC-C clause 2.7.4.1),
/// crashes between the steps included: each step is a transaction of its own, so every
/// condition still holds after heal and the driver goes on with the next district
/// (`Workload::next_step`). `seeds()` seeds per engine (`LITMUS_TPCC_SIM_SEEDS` raises it).
#[test]
fn deliveries_per_district_keep_the_consistency_conditions_under_faults() {
    let (mut committed, mut district_steps) = (0, 0);
    for seed in 0..seeds() {
        for (engine, base_txns) in
            [(litmus_engines::ACID, 0), (litmus_engines::SALT, 2), (litmus_engines::SALT_LOCAL, 2)]
        {
            let (c, _, d) = run_with(engine, base_txns, 10, 300 + seed);
            committed += c;
            district_steps += d;
        }
    }
    assert!(committed > 30 * seeds(), "only {committed} transactions committed");
    // Each committed district step is one Delivery call. A driver that stopped after district
    // 1 commits ~9 per seed over the three engines (seen: 36 for 4 seeds); going on, 75-130.
    assert!(district_steps > 30 * seeds(), "only {district_steps} district steps committed");
}

/// Replays one run: `LITMUS_TPCC_SIM_REPLAY=engine,base_txns,seed[,delivery_txns] cargo test
/// -p litmus-bench --test tpcc_sim replay -- --ignored --nocapture`.
#[test]
#[ignore]
fn replay() {
    let spec = std::env::var("LITMUS_TPCC_SIM_REPLAY")
        .expect("set LITMUS_TPCC_SIM_REPLAY=engine,base_txns,seed[,delivery_txns]");
    let parts: Vec<&str> = spec.split(',').collect();
    let engine: EngineKind = litmus_engines::by_name(parts[0]).unwrap();
    let delivery_txns = parts.get(3).map_or(1, |d| d.parse().unwrap());
    run_with(engine, parts[1].parse().unwrap(), delivery_txns, parts[2].parse().unwrap());
}

/// With each partition a 3-replica raft group: leaders crash, are cut off and change, and every
/// run still ends with TPC-C's consistency conditions holding.
#[test]
fn tpcc_keeps_its_consistency_with_replicated_partitions() {
    let seeds: u64 = std::env::var("TPCC_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
    for engine in [litmus_engines::SALT, litmus_engines::ACID] {
        for seed in 0..seeds {
            let topology = Topology::new(3, 4).unwrap().with_replicas(3).unwrap();
            // The run fails (and panics with its seed) if the consistency check fails.
            let (committed, _, _) = run_in(engine, 2, 1, seed, topology);
            assert!(committed > 0, "seed {seed} on {engine}: nothing committed");
        }
    }
}
