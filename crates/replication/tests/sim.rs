//! Seeded simulations of one replica group (see `harness` for the model and the checks).
//! Each test names the rule it checks; each check is also shown to fail with its rule broken.

mod harness;

use harness::{first_failure, sweep, Sim, SimConfig};
use litmus_replication::{ReadMode, FRAME_BYTES_MAX};

const SWEEP_SEEDS: u64 = 12;

#[test]
fn raft_5_2_a_leader_is_elected_and_commands_commit() {
    for members in [1, 3, 5] {
        let runs = sweep("raft_5_2", &SimConfig::calm(members), 3);
        for sim in runs {
            assert!(sim.stats.elections >= 1, "members {members}: {}", sim.report());
            assert!(sim.stats.acked > 1000, "members {members}: {}", sim.report());
        }
    }
}

#[test]
fn raft_5_3_and_5_4_agreement_and_durability_under_faults() {
    for members in [3, 5] {
        let runs = sweep("raft_5_3_and_5_4", &SimConfig::new(members), SWEEP_SEEDS);
        let crashes: u64 = runs.iter().map(|s| s.stats.crashes).sum();
        let parts: u64 = runs.iter().map(|s| s.stats.partitions).sum();
        let elections: u64 = runs.iter().map(|s| s.stats.elections).sum();
        assert!(crashes > 0 && parts > 0 && elections > runs.len() as u64, "faults were injected");
    }
}

#[test]
fn all_members_crash_and_restart_lose_nothing_acknowledged() {
    let cfg = SimConfig {
        crash_weight: 0,
        partition_weight: 0,
        data_loss_weight: 0,
        crash_all_weight: 1,
        ..SimConfig::new(3)
    };
    let runs = sweep("all_members_crash", &cfg, SWEEP_SEEDS);
    assert!(runs.iter().all(|s| s.stats.crashes >= 3 && s.stats.acked > 100));
}

#[test]
fn raft_6_4_read_index_reads_are_linearizable() {
    let cfg = SimConfig { read_mode: ReadMode::ReadIndex, ..SimConfig::new(3) };
    let runs = sweep("raft_6_4_read_index", &cfg, SWEEP_SEEDS);
    assert!(runs.iter().all(|s| s.stats.reads_served > 100 && s.stats.lease_reads == 0));
}

#[test]
fn raft_6_4_1_lease_reads_are_linearizable_under_faults_and_clock_drift() {
    let cfg = SimConfig { clock_drift: 0.08, ..SimConfig::new(3) };
    let runs = sweep("raft_6_4_1_lease_reads", &cfg, SWEEP_SEEDS);
    assert!(runs.iter().all(|s| s.stats.lease_reads > 100));
}

/// A leader cut off from its group keeps its lease only until its followers' promises run
/// out; the others elect a new leader after that. Reads keep coming to the old leader.
fn isolated_leader(cfg: SimConfig, seed: u64) -> Sim {
    let mut sim = Sim::new(seed, cfg);
    sim.run_until(2_000_000);
    let old = sim.leader().expect("a leader after 2 s");
    sim.isolate(old);
    sim.run_until(5_000_000);
    let new = sim.leader().filter(|l| *l != old);
    assert!(new.is_some() || !sim.violations.is_empty(), "seed {seed}: no new leader: {}", sim.report());
    sim.heal_all();
    sim.run_until(8_000_000);
    sim
}

fn lease_scenario() -> SimConfig {
    SimConfig { fault_phase_us: 0, loss: 0.0, duplication: 0.0, fault_every_us: 0, ..SimConfig::new(3) }
}

#[test]
fn raft_6_4_1_isolated_leader_stops_serving_before_a_new_leader_is_elected() {
    for seed in harness::seeds(10) {
        let sim = isolated_leader(lease_scenario(), seed);
        assert!(sim.violations.is_empty(), "seed {seed}: {}", sim.report());
        assert!(sim.stats.lease_reads > 50, "seed {seed}: {}", sim.report());
    }
}

#[test]
fn broken_lease_longer_than_the_election_timeout_is_caught() {
    let cfg = SimConfig { lease_ticks_unchecked: Some(60), ..lease_scenario() };
    let caught = harness::seeds(10).into_iter().find_map(|seed| {
        let sim = isolated_leader(cfg.clone(), seed);
        (!sim.violations.is_empty()).then_some((seed, sim.violations))
    });
    let (seed, v) = caught.expect("a lease longer than the election timeout must serve a stale read");
    eprintln!("caught at seed {seed}: {}", v[0]);
    assert!(v.iter().any(|v| v.contains("lease") || v.contains("linearizability")), "seed {seed}: {v:?}");
}

#[test]
fn raft_6_4_1_leases_hold_with_five_members_and_drift_inside_the_margin() {
    for seed in harness::seeds(6) {
        let cfg = SimConfig { members: 5, clock_drift: 0.08, ..lease_scenario() };
        let sim = isolated_leader(cfg, seed);
        assert!(sim.violations.is_empty(), "seed {seed}: {}", sim.report());
    }
}

/// Member 0's clock runs at half speed, the others' at one and a half: member 0 is made leader
/// and cut off. Its lease, counted in its slow ticks, must end before the fast followers'
/// promises (counted in theirs) do: the margin must cover the rate ratio (1/3 here).
fn slow_leader_cut_off(margin_ticks: usize, seed: u64) -> Sim {
    let cfg = SimConfig {
        clock_rates: Some(vec![0.5, 1.5, 1.5]),
        lease_margin_ticks: Some(margin_ticks),
        ..lease_scenario()
    };
    let mut sim = Sim::new(seed, cfg);
    sim.run_until(1_000_000);
    sim.transfer(0);
    sim.run_until(2_000_000);
    assert_eq!(sim.leader(), Some(0), "seed {seed}: the slow member leads");
    sim.isolate(0);
    sim.run_until(4_000_000);
    sim
}

#[test]
fn raft_6_4_1_a_lease_margin_that_covers_the_clock_drift_keeps_leases_safe() {
    for seed in harness::seeds(10) {
        let sim = slow_leader_cut_off(7, seed);
        assert!(sim.violations.is_empty(), "seed {seed}: {}", sim.report());
    }
}

#[test]
fn broken_clock_drift_beyond_the_lease_margin_is_caught() {
    let caught = harness::seeds(10).into_iter().find_map(|seed| {
        let sim = slow_leader_cut_off(1, seed);
        (!sim.violations.is_empty()).then_some((seed, sim.violations))
    });
    let (seed, v) = caught.expect("drift beyond the margin must let a lease outlive the promises");
    eprintln!("caught at seed {seed}: {}", v[0]);
    assert!(v.iter().any(|v| v.contains("lease")), "seed {seed}: {v:?}");
}

#[test]
fn broken_acknowledge_before_commit_is_caught() {
    // Reads off, so that the durability check alone must catch it.
    let cfg = SimConfig { ack_before_commit: true, read_every_us: u64::MAX / 4, ..SimConfig::new(3) };
    let (seed, v) = first_failure(&cfg, 20).expect("acknowledging at propose must lose a command");
    eprintln!("caught at seed {seed}: {}", v[0]);
    assert!(v.iter().any(|v| v.contains("durability")), "seed {seed}: {v:?}");
    // With reads on, the read check sees the acknowledged command missing too.
    let cfg = SimConfig { ack_before_commit: true, ..SimConfig::new(3) };
    let (seed, v) = first_failure(&cfg, 20).expect("a read must miss a command acknowledged at propose");
    eprintln!("caught at seed {seed}: {}", v[0]);
    assert!(v.iter().any(|v| v.contains("linearizability")), "seed {seed}: {v:?}");
}

#[test]
fn broken_send_before_persist_is_caught() {
    let cfg = SimConfig {
        send_before_sync: true,
        fsync_us: (1_000, 40_000),
        crash_weight: 0,
        partition_weight: 0,
        data_loss_weight: 0,
        crash_all_weight: 1,
        fault_every_us: 300_000,
        ..SimConfig::new(3)
    };
    let (seed, v) = first_failure(&cfg, 30).expect("acknowledging entries before they are durable must lose one");
    eprintln!("caught at seed {seed}: {}", v[0]);
    assert!(!v.is_empty(), "seed {seed}");
}

/// Entries committed by {A, L} while B is cut off; L loses its data directory and A crashes;
/// B comes back. If L votes, B (missing the entries) is elected and they are gone.
fn data_loss_then_leader_crash(cfg: SimConfig, seed: u64) -> Sim {
    let mut sim = Sim::new(seed, cfg);
    sim.run_until(1_000_000);
    let a = sim.leader().expect("a leader after 1 s");
    let (b, l) = ((a + 1) % 3, (a + 2) % 3);
    sim.isolate(b);
    sim.run_until(3_000_000);
    sim.crash(l);
    sim.run_until(3_100_000);
    sim.restart_with_data_loss(l);
    sim.run_until(3_500_000);
    sim.crash(a);
    sim.heal(b);
    sim.run_until(6_000_000);
    sim.restart(a);
    sim.run_until(10_000_000);
    sim.check_end();
    sim
}

fn data_loss_scenario() -> SimConfig {
    SimConfig { fault_phase_us: 0, fault_every_us: 0, ..SimConfig::new(3) }
}

#[test]
fn a_member_that_lost_its_data_never_votes_so_nothing_committed_is_lost() {
    for seed in harness::seeds(5) {
        let sim = data_loss_then_leader_crash(data_loss_scenario(), seed);
        assert!(sim.violations.is_empty(), "seed {seed}: {}", sim.report());
    }
}

#[test]
fn broken_lost_data_rejoining_as_a_voter_is_caught() {
    let cfg = SimConfig { rejoin_lost_data_as_voter: true, ..data_loss_scenario() };
    let sim = data_loss_then_leader_crash(cfg, 0);
    let v = &sim.violations;
    assert!(v.iter().any(|v| v.contains("agreement") || v.contains("durability")), "{}", sim.report());
    eprintln!("caught: {}", v[0]);
}

#[test]
fn broken_liveness_with_a_majority_down_is_caught() {
    let cfg = SimConfig { keep_majority_down: true, ..SimConfig::calm(3) };
    let (_, v) = first_failure(&cfg, 1).expect("no progress without a majority");
    eprintln!("caught: {}", v[0]);
    assert!(v.iter().any(|v| v.contains("liveness")), "{v:?}");
}

#[test]
fn lost_data_dir_catches_up_by_chunked_snapshots_under_the_frame_limit() {
    let cfg = SimConfig { payload_bytes: 256, ..SimConfig::calm(3) };
    let mut sim = Sim::new(7, cfg);
    sim.run_until(3_000_000);
    let follower = (0..3).find(|i| Some(*i) != sim.leader()).expect("a follower");
    sim.crash(follower);
    sim.run_until(5_000_000);
    sim.restart_with_data_loss(follower);
    sim.run_until(9_000_000);
    assert!(sim.violations.is_empty(), "{}", sim.report());
    let top = (0..3).map(|i| sim.applied(i)).max().unwrap();
    assert!(sim.applied(follower) + 64 >= top, "caught up: {} of {top}", sim.applied(follower));
    assert!(sim.member(follower).unwrap().is_abstaining());
    assert!(sim.stats.snapshots_installed >= 1 && sim.stats.chunks > 4, "{}", sim.report());
    assert!(sim.stats.max_frame_bytes < FRAME_BYTES_MAX, "{}", sim.report());
}

#[test]
fn same_seed_replays_bit_for_bit() {
    let a = Sim::new(3, SimConfig::new(3)).run();
    let b = Sim::new(3, SimConfig::new(3)).run();
    assert_eq!(a.trace, b.trace);
    assert_eq!(a.acked, b.acked);
    let c = Sim::new(4, SimConfig::new(3)).run();
    assert_ne!(a.trace, c.trace);
}
