//! Simulation runs: many seeds, every fault on, every acknowledged write must survive.
//! A failure prints the seed; replay with `litmus sim --seed N`.

use litmus_core::NodeId;
use litmus_protocol::engine::Guarantee;
use litmus_protocol::{builtin, Addr, EngineKind};
use litmus_runtime::sim::workload::AckedWrites;
use litmus_runtime::sim::{SimConfig, Simulator};
use litmus_runtime::{ClusterSpec, Topology};
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

fn run(seed: u64, cfg: SimConfig) -> (litmus_runtime::sim::SimReport, usize) {
    run_engine(litmus_engines::NOCC, seed, cfg)
}

fn run_engine(engine: EngineKind, seed: u64, cfg: SimConfig) -> (litmus_runtime::sim::SimReport, usize) {
    let mut sim = Simulator::new(spec(engine, seed, 3, 6), cfg).unwrap();
    let mut driver = AckedWrites::for_engine(engine);
    match sim.run(&mut driver) {
        Ok(report) => (report, driver.acked()),
        Err(e) => panic!("seed {seed} failed: {e}\nreplay: litmus sim --seed {seed} --faults --engine {engine}"),
    }
}

#[test]
fn clients_attach_to_the_nodes_they_are_given_and_the_rest_round_robin() {
    let cfg = SimConfig { clients: 4, client_nodes: vec![NodeId(2), NodeId(2)], ..SimConfig::new(1) };
    let sim = Simulator::new(spec(litmus_engines::NOCC, 1, 3, 6), cfg).unwrap();
    let nodes: Vec<_> = (0..5).map(|i| sim.coordinator_of(i).unwrap()).collect();
    let c = |n| Addr::Coordinator(NodeId(n));
    // Clients 0 and 1 as given; 2, 3 and the verifier (client 4) by number.
    assert_eq!(nodes, [c(2), c(2), c(2), c(0), c(1)]);
}

#[test]
fn acknowledged_writes_survive_faults_over_many_seeds() {
    let seeds: u64 = std::env::var("LITMUS_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let mut crashes = 0;
    let mut partitions = 0;
    let mut acked = 0;
    let mut dropped = 0;
    for seed in 0..seeds {
        let mut cfg = SimConfig::new(seed).with_faults();
        cfg.duration = Duration::from_millis(1500);
        let (report, n) = run(seed, cfg);
        crashes += report.crashes;
        partitions += report.partitions;
        dropped += report.dropped;
        acked += n;
    }
    // The runs must actually have exercised faults and done work.
    assert!(crashes > seeds / 2, "only {crashes} crashes in {seeds} runs");
    assert!(partitions > seeds / 4, "only {partitions} partitions in {seeds} runs");
    assert!(dropped > 0);
    assert!(acked > seeds as usize * 50, "only {acked} acknowledged writes");
}

#[test]
fn same_seed_replays_bit_for_bit() {
    for seed in [7, 42, 1234] {
        let (a, _) = run(seed, SimConfig::new(seed).with_faults());
        let (b, _) = run(seed, SimConfig::new(seed).with_faults());
        assert_eq!(a, b, "seed {seed} did not replay");
    }
    let (a, _) = run(1, SimConfig::new(1).with_faults());
    let (b, _) = run(2, SimConfig::new(2).with_faults());
    assert_ne!(a.trace_hash, b.trace_hash, "different seeds should differ");
}

#[test]
fn fault_free_run_fails_no_request() {
    let (report, acked) = run(5, SimConfig::new(5));
    assert_eq!(report.requests_failed, 0, "{report}");
    assert!(acked > 100);
}

/// Acknowledged writes survive faults under every other registered engine too (2PC, recovery,
/// epochs; Omid's oracle crashing with node 0, recovering from its log and aborting what was in
/// flight). A new engine is held to it by registering.
#[test]
fn acknowledged_writes_survive_faults_under_every_engine() {
    let seeds: u64 = std::env::var("LITMUS_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300) / 3;
    for &engine in litmus_engines::ALL.iter().filter(|&&e| e != litmus_engines::NOCC) {
        let mut acked = 0;
        for seed in 0..seeds {
            let mut cfg = SimConfig::new(seed).with_faults();
            cfg.duration = Duration::from_millis(1000);
            acked += run_engine(engine, seed, cfg).1;
        }
        assert!(acked > seeds as usize * 20, "{engine}: only {acked} acknowledged writes");
    }
}

/// Omid's garbage collection under faults (OM-4, OM-E5): once the faults heal and the cluster
/// idles a few GC rounds, nothing holds `Tmin` (crashed coordinators' sessions were ended and
/// their transactions aborted), the aborted list and the crash ranges are empty (GC purged what
/// no writer cleaned up), and every version left at the partitions is committed.
#[test]
fn omid_leaves_no_garbage_once_faults_heal() {
    use litmus_omid::node::{OracleMachine, ORACLE};
    use litmus_protocol::{Addr, Partition};
    let seeds: u64 = std::env::var("LITMUS_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300) / 6;
    for seed in 0..seeds {
        let mut cfg = SimConfig::new(seed).with_faults();
        cfg.duration = Duration::from_millis(1000);
        let mut sim = Simulator::new(spec(litmus_engines::OMID, seed, 3, 6), cfg).unwrap();
        let mut driver = AckedWrites::new();
        let replay = format!("replay: litmus sim --seed {seed} --faults --engine omid");
        sim.run(&mut driver).unwrap_or_else(|e| panic!("seed {seed} failed: {e}\n{replay}"));
        sim.idle(Duration::from_secs(5)).unwrap();
        let machine = |addr| sim.machine(addr).and_then(|m| m.as_any()).expect("up and inspectable");
        let oracle = machine(ORACLE).downcast_ref::<OracleMachine>().expect("the oracle").oracle();
        let now = oracle.t_min();
        assert_eq!(oracle.in_flight(), 0, "seed {seed}: transactions still in flight");
        let aborted: Vec<_> = oracle.aborted().collect();
        assert!(aborted.is_empty(), "seed {seed}: aborted list not purged: {aborted:?}");
        assert!(oracle.crash_ranges().is_empty(), "seed {seed}: crash ranges left: {:?}", oracle.crash_ranges());
        for p in 0..6 {
            let partition = machine(Addr::Partition(litmus_core::PartitionId(p)));
            let store = partition.downcast_ref::<Partition>().expect("a partition").store();
            for (_, _, ts) in store.all_versions() {
                assert!(oracle.in_snapshot(ts, now), "seed {seed}: partition {p} keeps an uncommitted version {ts:?}");
            }
        }
    }
}

/// Every fault on, with milder crashes and partitions than the durability test, so a bank
/// gets work done.
fn mild_faults(seed: u64) -> SimConfig {
    let mut cfg = SimConfig::new(seed).with_faults();
    cfg.faults.crash = 0.04;
    cfg.faults.partition = 0.04;
    cfg.duration = Duration::from_millis(1500);
    cfg
}

/// How to replay a [`mild_faults`] run of `workload` on 3 nodes and 6 partitions.
fn mild_replay(engine: EngineKind, seed: u64, workload: &str) -> String {
    format!(
        "replay: litmus sim --seed {seed} --faults --crash 0.04 --partition 0.04 --duration-ms 1500 \
         --nodes 3 --partitions 6 --engine {engine} --workload {workload}"
    )
}

/// Salt §5.1 under faults: ACID totals never see a BASE transfer's intermediate state, and the
/// money is all there after roll-forward.
#[test]
fn bank_totals_hold_under_faults() {
    let seeds: u64 = std::env::var("LITMUS_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300) / 5;
    // Every engine that promises isolation: BASE transfers where the engine runs them (Salt),
    // ACID ones elsewhere. Under snapshot isolation every total reads one snapshot (no fractured
    // read) and concurrent transfers on one account cannot both commit (no lost update).
    // Read atomic (coordfree) keeps no bank total: it loses updates by design (its invariants
    // are kept by refusal, see its module doc).
    let isolating = |e: &&EngineKind| ![Guarantee::None, Guarantee::ReadAtomic].contains(&e.capabilities().guarantee);
    for &engine in litmus_engines::ALL.iter().filter(isolating) {
        let caps = engine.capabilities();
        let transfer = if caps.base_transactions { "bank_transfer" } else { "bank_transfer_acid" };
        let mut checked = 0;
        for seed in 0..seeds {
            let mut sim = Simulator::new(spec(engine, seed, 3, 6), mild_faults(seed)).unwrap();
            let mut driver = if caps.interactive {
                litmus_runtime::sim::workload::Bank::new(8, transfer)
            } else {
                litmus_runtime::sim::workload::Bank::one_round(8, 6)
            };
            if let Err(e) = sim.run(&mut driver) {
                panic!("{engine} seed {seed} failed: {e}\n{}", mild_replay(engine, seed, "bank"));
            }
            assert!(driver.final_checked, "{engine} seed {seed}: the final total was never compared");
            checked += driver.totals_checked;
        }
        assert!(checked > seeds, "{engine}: only {checked} totals checked");
    }
}

/// Sinfonia §3 under faults: transfers that read both accounts in one-round reads and commit
/// as one minitransaction comparing what they read (as SQL commits on the one-round engines)
/// keep every total whole, on each one-round engine: a compare that let a changed row through
/// would lose an update and change the total.
#[test]
fn sinfonia_3_minitransaction_transfers_keep_bank_totals_under_faults() {
    let seeds: u64 = std::env::var("LITMUS_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300) / 15;
    for engine in [litmus_engines::GRANOLA, litmus_engines::GRANOLA_LOCKING, litmus_engines::SINFONIA] {
        let (mut committed, mut compare_aborts, mut totals) = (0, 0, 0);
        for seed in 0..seeds {
            let mut sim = Simulator::new(spec(engine, seed, 3, 6), mild_faults(seed)).unwrap();
            let mut driver = litmus_runtime::sim::minibank::MiniBank::new(8, 6);
            if let Err(e) = sim.run(&mut driver) {
                panic!("{engine} seed {seed} failed: {e}\n{}", mild_replay(engine, seed, "minibank"));
            }
            assert!(driver.final_checked(), "{engine} seed {seed}: the final total was never compared");
            (committed, compare_aborts, totals) = (
                committed + driver.committed,
                compare_aborts + driver.compare_aborts,
                totals + driver.totals_checked(),
            );
        }
        assert!(committed > seeds * 10, "{engine}: only {committed} minitransactions committed");
        assert!(compare_aborts > 0, "{engine}: no compare ever failed, so none was tested");
        assert!(totals > seeds, "{engine}: only {totals} totals checked");
    }
}

/// Heavy faults (crash 0.15 per 100 ms, as `litmus sim --faults`) on the BASE engines, over a
/// range of seeds plus the ones that once failed:
/// * 1126, 1163, 1189 — a restarted coordinator's epoch made partitions roll back a BASE
///   subtransaction it had already decided; the re-sent commit then applied row images computed
///   under locks no longer held (money created or lost);
/// * 597, 1663 — a replayed decision forgot its read-only participants and waited forever;
/// * 2274 — a roll-forward released the earlier run's logged locks without logging it, and a
///   restart relocked them next to a newer owner's.
#[test]
fn bank_totals_hold_under_heavy_faults() {
    let seeds: u64 = std::env::var("LITMUS_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300) / 5;
    let regressions = [597, 1126, 1163, 1189, 1663, 2274];
    for engine in [litmus_engines::SALT, litmus_engines::SALT_LOCAL] {
        let mut compared = 0;
        for seed in (10_000..10_000 + seeds).chain(regressions) {
            let mut sim = Simulator::new(spec(engine, seed, 3, 6), SimConfig::new(seed).with_faults()).unwrap();
            let mut driver = litmus_runtime::sim::workload::Bank::new(8, "bank_transfer");
            if let Err(e) = sim.run(&mut driver) {
                panic!("{engine} seed {seed} failed: {e}\nreplay: litmus sim --seed {seed} --faults --engine {engine} --workload bank");
            }
            // Floors: every seed compares the final total, and the run compares some on the way.
            assert!(driver.final_checked, "{engine} seed {seed}: the final total was never compared");
            compared += driver.totals_checked;
        }
        assert!(compared > 0, "{engine}: no total compared during {seeds} heavy-fault runs");
    }
}

/// Granola under every fault at full strength (`litmus sim --faults`), 8 clients for 3 s: the
/// one-round bank (coordinated transfers in locking mode, independent totals by timestamp
/// voting) conserves money, every total sees one serial state, and every request ends once the
/// faults heal (votes resent, requests carried by votes). Each seed replays bit for bit.
#[test]
fn granola_bank_holds_under_heavy_faults() {
    let seeds: u64 = std::env::var("LITMUS_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300) / 10;
    let mut checked = 0;
    for seed in 20_000..20_000 + seeds {
        let mut cfg = SimConfig::new(seed).with_faults();
        cfg.clients = 8;
        cfg.duration = Duration::from_millis(3000);
        let mut sim = Simulator::new(spec(litmus_engines::GRANOLA, seed, 3, 6), cfg).unwrap();
        let mut driver = litmus_runtime::sim::workload::Bank::one_round(8, 6);
        if let Err(e) = sim.run(&mut driver) {
            panic!("seed {seed} failed: {e}\nreplay: litmus sim --seed {seed} --faults --clients 8 --duration-ms 3000 --engine granola --workload bank");
        }
        checked += driver.totals_checked;
    }
    assert!(checked > seeds * 10, "only {checked} totals checked");
}

/// ACID transfers under partition crashes, 8 clients for 3 s, seeds that once created money:
/// a partition restarted between two operations of a transaction (losing its locks and
/// buffered writes), the later operation started a fresh record at the new incarnation, and
/// the commit applied images computed under the lost locks (`Request::Prepare`/`Commit` now
/// carry how many operations the participant should have). 4382, 4555: crashes only (2005,
/// the first one reported, passed already after the wait-die patience change moved its
/// schedule); 1734: every fault.
#[test]
fn acid_bank_conserves_money_when_partitions_restart_mid_transaction() {
    for (seed, crash_only) in [(2005, true), (4382, true), (4555, true), (1734, false)] {
        let mut cfg = SimConfig::new(seed).with_faults();
        if crash_only {
            cfg.net.loss = 0.0;
            cfg.net.duplicate = 0.0;
            cfg.faults.partition = 0.0;
        }
        cfg.clients = 8;
        cfg.duration = Duration::from_millis(3000);
        let mut sim = Simulator::new(spec(litmus_engines::ACID, seed, 3, 6), cfg).unwrap();
        let mut driver = litmus_runtime::sim::workload::Bank::new(8, "bank_transfer_acid");
        if let Err(e) = sim.run(&mut driver) {
            let flags = if crash_only { " --partition 0 --loss 0 --duplicate 0" } else { "" };
            panic!("seed {seed} failed: {e}\nreplay: litmus sim --seed {seed} --faults{flags} --clients 8 --duration-ms 3000 --engine acid --workload bank");
        }
    }
}

/// Salt §6.2 roll-forward, with 8 clients (more contention than the tests above): a re-run of
/// an accepted BASE transaction resumes only after the commits it re-sends for subtransactions
/// decided before the crash are acknowledged. Seed 222 once committed a later subtransaction
/// first; that downgraded the earlier one's alkaline locks to saline, another BASE transfer
/// wrote the row, and the earlier row image overwrote it (money lost).
#[test]
fn roll_forward_resumes_after_resent_decisions_land() {
    for engine in [litmus_engines::SALT, litmus_engines::SALT_LOCAL] {
        for seed in [222, 223, 224] {
            let mut cfg = SimConfig::new(seed).with_faults();
            cfg.clients = 8;
            cfg.duration = Duration::from_millis(3000);
            let mut sim = Simulator::new(spec(engine, seed, 3, 6), cfg).unwrap();
            let mut driver = litmus_runtime::sim::workload::Bank::new(8, "bank_transfer");
            if let Err(e) = sim.run(&mut driver) {
                panic!("{engine} seed {seed} failed: {e}\nreplay: litmus sim --seed {seed} --faults --clients 8 --duration-ms 3000 --engine {engine} --workload bank");
            }
        }
    }
}

/// Omid's oracle as a replica group (`replicas = 3`): node 0 — the home of the oracle's group,
/// a coordinator and two of the six partitions, all of them replicated — crashes 300 ms into the
/// run and stays down for the rest of the workload phase, under loss, duplication and
/// reordering. Alone on node 0 (`replicas = 1`) the oracle would serve nothing until the node
/// came back; as a group, the members on nodes 1 and 2 elect a leader that recovers the oracle
/// from the group's log (OM-8), coordinators reconnect to it, and the cluster keeps committing.
/// When node 0 returns (at heal) it rejoins the groups as a follower. No acknowledged write is
/// lost, and every total of the bank adds up.
#[test]
fn omid_keeps_committing_through_the_oracle_group_while_node_0_is_down() {
    let crash_at = Duration::from_millis(300);
    let spec = |seed| {
        let mut spec = spec(litmus_engines::OMID, seed, 3, 6);
        spec.topology = spec.topology.with_replicas(3).unwrap();
        spec
    };
    for seed in 0..12 {
        let cfg = |duration| {
            let mut cfg = SimConfig::new(seed);
            cfg.net.loss = 0.01;
            cfg.net.duplicate = 0.01;
            cfg.duration = duration;
            // Requests that reach a group while it elects a leader wait for the timeout: more
            // clients and a shorter timeout keep the others busy.
            cfg.clients = 8;
            cfg.request_timeout = Duration::from_millis(250);
            cfg
        };
        // The writes acknowledged before the crash (the same seed replays the same prefix).
        let mut sim = Simulator::new(spec(seed), cfg(crash_at)).unwrap();
        let mut driver = AckedWrites::for_engine(litmus_engines::OMID);
        sim.run(&mut driver).unwrap_or_else(|e| panic!("seed {seed} failed: {e}"));
        let before = driver.acked();
        let mut sim = Simulator::new(spec(seed), cfg(Duration::from_millis(3000))).unwrap();
        sim.schedule_outage(litmus_core::NodeId(0), crash_at, Duration::from_secs(10));
        let mut driver = AckedWrites::new();
        if let Err(e) = sim.run(&mut driver) {
            panic!("seed {seed} failed: {e}");
        }
        // Without the oracle's group not one write could be acknowledged after the crash
        // (`before` also counts the writes in flight at the crash: its run drains them).
        assert!(
            driver.acked() > before + 30,
            "seed {seed}: {} writes acknowledged, {before} of them possible before node 0 crashed",
            driver.acked()
        );
        let mut sim = Simulator::new(spec(seed), cfg(Duration::from_millis(3000))).unwrap();
        sim.schedule_outage(litmus_core::NodeId(0), crash_at, Duration::from_secs(10));
        let mut bank = litmus_runtime::sim::workload::Bank::new(8, "bank_transfer_acid");
        if let Err(e) = sim.run(&mut bank) {
            panic!("bank seed {seed} failed: {e}");
        }
        assert!(bank.totals_checked > 0, "seed {seed}: no bank total checked");
    }
}
