//! The simulator's CPU model: every step occupies a core for a measured cost.
//!
//! * The fault-injection simulations keep their meaning with costs on: the same checks
//!   (acknowledged writes, bank totals, liveness) pass for every registered engine with the
//!   committed cost table charged on 2 cores per node, as they do with costs off.
//! * Queueing shows in virtual time: with one core per node and a fixed cost per step, the
//!   throughput is bounded by the cores, and a second core raises it.
//! * Same seed, same figures, with costs on.

use litmus_protocol::engine::Guarantee;
use litmus_protocol::{builtin, EngineKind};
use litmus_runtime::cost::CostTable;
use litmus_runtime::sim::workload::{AckedWrites, Bank};
use litmus_runtime::sim::{CpuModel, SimConfig, SimReport, Simulator};
use litmus_runtime::{ClusterSpec, Topology};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

fn spec(engine: EngineKind, seed: u64, nodes: u32, partitions: u32) -> ClusterSpec {
    let mut catalog = builtin::catalog();
    catalog.merge(&builtin::bank::catalog());
    let mut registry = builtin::registry();
    registry.merge(&builtin::bank::registry());
    ClusterSpec {
        engine,
        topology: Topology::new(nodes, partitions).unwrap(),
        catalog: Arc::new(catalog),
        registry: Arc::new(registry),
        seed,
    }
}

fn seeds(div: u64) -> u64 {
    std::env::var("LITMUS_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300) / div
}

fn with_costs(mut cfg: SimConfig, cores: u32) -> SimConfig {
    cfg.cpu = Some(CpuModel::new(cores, Arc::new(CostTable::builtin())).unwrap());
    cfg
}

/// A table in which every step costs `ns` (nothing measured: the default applies).
fn flat(ns: u64) -> Arc<CostTable> {
    Arc::new(CostTable {
        name: "flat".into(),
        command: "test".into(),
        note: String::new(),
        default_ns: ns,
        engines: BTreeMap::new(),
    })
}

#[test]
fn acknowledged_writes_survive_faults_with_costs_on_and_off_under_every_engine() {
    for &engine in litmus_engines::ALL {
        for costs in [false, true] {
            let mut acked = 0;
            for seed in 0..seeds(10) {
                let mut cfg = SimConfig::new(seed).with_faults();
                cfg.duration = Duration::from_millis(1000);
                if costs {
                    cfg = with_costs(cfg, 2);
                }
                let mut sim = Simulator::new(spec(engine, seed, 3, 6), cfg).unwrap();
                let mut driver = AckedWrites::for_engine(engine);
                if let Err(e) = sim.run(&mut driver) {
                    panic!("{engine} seed {seed} costs {costs} failed: {e}\nreplay: litmus sim --seed {seed} --faults --engine {engine}{}", if costs { " --cores-per-node 2" } else { "" });
                }
                if costs {
                    assert!(sim.report().cpu_busy_ns > 0, "costs on charged nothing");
                } else {
                    assert_eq!(sim.report().cpu_busy_ns, 0, "costs off charged something");
                }
                acked += driver.acked();
            }
            assert!(acked > seeds(10) as usize * 20, "{engine} costs {costs}: only {acked} acknowledged writes");
        }
    }
}

#[test]
fn bank_totals_hold_under_faults_with_costs_on() {
    // As tests/sim.rs: read atomicity (coordfree) lets two transfers lose an update.
    let isolating = |e: &&EngineKind| ![Guarantee::None, Guarantee::ReadAtomic].contains(&e.capabilities().guarantee);
    for &engine in litmus_engines::ALL.iter().filter(isolating) {
        let caps = engine.capabilities();
        let transfer = if caps.base_transactions { "bank_transfer" } else { "bank_transfer_acid" };
        let mut checked = 0;
        let runs = seeds(15).max(10);
        for seed in 0..runs {
            let mut cfg = SimConfig::new(seed).with_faults();
            cfg.faults.crash = 0.04;
            cfg.faults.partition = 0.04;
            cfg.duration = Duration::from_millis(1500);
            let mut sim = Simulator::new(spec(engine, seed, 3, 6), with_costs(cfg, 4)).unwrap();
            let mut driver = if caps.interactive { Bank::new(8, transfer) } else { Bank::one_round(8, 6) };
            if let Err(e) = sim.run(&mut driver) {
                panic!("{engine} seed {seed} failed: {e}\nreplay: litmus sim --seed {seed} --faults --engine {engine} --workload bank --cores-per-node 4");
            }
            assert!(driver.final_checked, "{engine} seed {seed}: the final total was never compared");
            checked += driver.totals_checked;
        }
        // Totals compete with transfers on slow (charged) cores under faults: fewer succeed
        // than with free steps, but the check must have run.
        eprintln!("{engine}: {checked} totals checked in {runs} runs");
        assert!(checked > 0, "{engine}: no total checked in {runs} runs");
    }
}

fn fault_free(engine: EngineKind, seed: u64, cores: u32, table: Arc<CostTable>) -> (SimReport, usize) {
    let mut cfg = SimConfig::new(seed);
    cfg.clients = 16;
    cfg.duration = Duration::from_secs(1);
    cfg.request_timeout = Duration::from_secs(5);
    cfg.cpu = Some(CpuModel::new(cores, table).unwrap());
    let mut sim = Simulator::new(spec(engine, seed, 1, 1), cfg).unwrap();
    let mut driver = AckedWrites::for_engine(engine);
    let report = sim.run(&mut driver).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    (report, driver.acked())
}

/// Steps are charged by the work the machines report (`Effects::work`): the committed table
/// with `unit_ns` more for every unit of work charges each request at least three units more
/// (the coordinator's key, the partition's store operation, the row that comes back). A
/// simulator that charged means whatever the work charges both tables alike.
#[test]
fn steps_are_charged_by_the_work_they_did() {
    let per_unit = |unit_ns: f64| {
        let mut t = CostTable::builtin();
        for keys in t.engines.values_mut() {
            for e in keys.values_mut() {
                (e.units, e.unit_ns) = (0.0, unit_ns);
            }
        }
        Arc::new(t)
    };
    const UNIT_NS: f64 = 100_000.0;
    let (plain, _) = fault_free(litmus_engines::NOCC, 3, 2, per_unit(0.0));
    let (worked, _) = fault_free(litmus_engines::NOCC, 3, 2, per_unit(UNIT_NS));
    let per_request = |r: &SimReport| r.cpu_busy_ns as f64 / r.requests_ok.max(1) as f64;
    assert!(plain.requests_ok > 0 && worked.requests_ok > 0, "{plain:?} {worked:?}");
    assert!(
        per_request(&worked) >= per_request(&plain) + 3.0 * UNIT_NS,
        "{:.0} ns a request with work charged, {:.0} without",
        per_request(&worked),
        per_request(&plain)
    );
}

/// One node, one partition, every step 1 ms: a request takes at least a coordinator step, a
/// partition step and the coordinator's answer, so one core completes at most ~330 requests a
/// second whatever the client count; a second core nearly doubles it.
#[test]
fn busy_cores_queue_steps_in_virtual_time() {
    let (one, _) = fault_free(litmus_engines::NOCC, 3, 1, flat(1_000_000));
    let (two, _) = fault_free(litmus_engines::NOCC, 3, 2, flat(1_000_000));
    let (free, _) = fault_free(litmus_engines::NOCC, 3, 1, flat(1));
    // The workload phase is 1 s; the drain and liveness idle add no requests.
    assert!(one.requests_ok <= 400, "one core did {} requests in 1 s at 1 ms a step", one.requests_ok);
    assert!(one.requests_ok >= 150, "one core did only {} requests", one.requests_ok);
    assert!(
        two.requests_ok as f64 > 1.6 * one.requests_ok as f64,
        "two cores {} vs one {}",
        two.requests_ok,
        one.requests_ok
    );
    assert!(
        free.requests_ok > 5 * one.requests_ok,
        "near-free steps {} vs 1 ms steps {}",
        free.requests_ok,
        one.requests_ok
    );
    // Charged: at least three steps per request, all of them on the node's core.
    assert!(one.cpu_busy_ns >= 3 * 1_000_000 * one.requests_ok, "{one:?}");
}

#[test]
fn same_seed_same_figures_with_costs_on() {
    let table = Arc::new(CostTable::builtin());
    let a = fault_free(litmus_engines::ACID, 11, 2, table.clone());
    let b = fault_free(litmus_engines::ACID, 11, 2, table.clone());
    assert_eq!(a, b);
    // The comparison can fail: another seed, or another table, gives other figures.
    let c = fault_free(litmus_engines::ACID, 12, 2, table);
    assert_ne!(a.0.trace_hash, c.0.trace_hash);
    let mut other = CostTable::builtin();
    other.default_ns *= 3;
    for keys in other.engines.values_mut() {
        for e in keys.values_mut() {
            *e = e.scaled(3.0);
        }
    }
    let d = fault_free(litmus_engines::ACID, 11, 2, Arc::new(other));
    assert_ne!(a.0.requests_ok, d.0.requests_ok, "tripled costs changed nothing");
}
