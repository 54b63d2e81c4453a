//! A node lost for good mid-transaction, at each step of commit: its coordinator's replica
//! group and the roles it led (Omid's oracle, Sinfonia's relay) elect leaders on the other
//! nodes, which recover them from the group's log; the transactions the dead coordinator had
//! in flight are finished or aborted there, so no acknowledged write is lost and nothing stays
//! blocked (the simulator's liveness check, and the final reads of every acknowledged key,
//! which wait for no lock a dead coordinator holds). `REPLICA_SEEDS=n` widens the sweeps.

use litmus_core::NodeId;
use litmus_protocol::message::Message;
use litmus_protocol::{builtin, Addr, EngineKind, Envelope, GroupId};
use litmus_runtime::replica::{BREAK_FORGET_ON_TAKEOVER, BREAK_RULE};
use litmus_runtime::sim::chains::SaltChains;
use litmus_runtime::sim::workload::AckedWrites;
use litmus_runtime::sim::{SimConfig, Simulator};
use litmus_runtime::{ClusterSpec, Topology};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The tests take turns: one of them breaks a rule process-wide.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn seeds(default: u64) -> u64 {
    std::env::var("REPLICA_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// Three nodes, six partitions, every group on all three nodes; the built-in procedures and
/// salt-chains'.
fn spec(engine: EngineKind, seed: u64) -> ClusterSpec {
    let mut catalog = builtin::catalog();
    catalog.merge(&builtin::chains::catalog());
    let mut registry = builtin::registry();
    registry.merge(&builtin::chains::registry());
    ClusterSpec {
        engine,
        topology: Topology::new(3, 6).unwrap().with_replicas(3).unwrap(),
        catalog: Arc::new(catalog),
        registry: Arc::new(registry),
        seed,
    }
}

fn to_coordinator(env: &Envelope) -> bool {
    matches!(env.to, Addr::Coordinator(_) | Addr::Replica(GroupId::Coordinator(_), _))
}

fn to_role(env: &Envelope) -> bool {
    matches!(env.to, Addr::Role(_) | Addr::Replica(GroupId::Role(_), _))
}

/// Which messages a step of commit is.
type Step = fn(&Envelope) -> bool;

/// The steps of commit node 0 dies at: as one of these messages reaches it.
const STEPS: &[(&str, Step)] = &[
    ("a client's request reaches its coordinator", |e| to_coordinator(e) && matches!(e.msg, Message::ClientRequest(_))),
    ("a participant's answer (an operation's result, a vote, an acknowledgement) reaches the coordinator", |e| {
        to_coordinator(e) && matches!(e.msg, Message::PartitionReply(_) | Message::Batch(_))
    }),
    ("the oracle's or the relay's answer reaches the coordinator", |e| {
        to_coordinator(e) && matches!(e.msg, Message::Role(_))
    }),
    ("a request reaches the oracle or the relay", to_role),
];

/// Runs `engine` with node 0 lost for good at the first message `step` matches after `after`;
/// `None` when no such message came (the engine has no such step).
fn lose_node_0(
    engine: EngineKind,
    seed: u64,
    after: Duration,
    step: fn(&Envelope) -> bool,
) -> Option<Result<(), String>> {
    let mut sim = Simulator::new(spec(engine, seed), SimConfig::new(seed)).unwrap();
    sim.lose_on_delivery(NodeId(0), after, Duration::from_millis(2), Box::new(step));
    let mut driver = AckedWrites::for_engine(engine);
    let result = sim.run(&mut driver).map(|_| ());
    if !sim.lost_for_good(NodeId(0)) {
        return None;
    }
    Some(result.and_then(|()| if driver.acked() == 0 { Err("no write was acknowledged".into()) } else { Ok(()) }))
}

#[test]
fn a_node_lost_for_good_at_any_step_of_commit_loses_no_acknowledged_write_and_blocks_nothing() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut runs = 0;
    for (e, &engine) in litmus_engines::ALL.iter().enumerate() {
        for (what, step) in STEPS {
            for seed in 0..seeds(1) {
                // A different moment per engine and seed: early (loading the first keys) to
                // well into the run.
                let after = Duration::from_millis(250 + 60 * e as u64 + 170 * seed);
                match lose_node_0(engine, seed, after, *step) {
                    None => {}
                    Some(Ok(())) => runs += 1,
                    Some(Err(e)) => panic!("{} seed {seed}, node 0 lost as {what}: {e}", engine.name()),
                }
            }
        }
    }
    // Every engine has the first two steps; omid and sinfonia the last two.
    assert!(runs >= 2 * litmus_engines::ALL.len(), "only {runs} runs lost node 0");
}

/// The checks fail when a new leader starts the dead coordinator empty instead of recovering
/// it from the group's log: Salt's accepted BASE transactions are then never rolled forward
/// (salt-chains' final check finds a tag without its end marker), and logged decisions are
/// forgotten.
#[test]
fn a_coordinator_restarted_without_its_log_is_caught() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let run = |seed: u64| {
        let mut sim = Simulator::new(spec(litmus_engines::SALT, seed), SimConfig::new(seed)).unwrap();
        let after = Duration::from_millis(300 + 37 * seed);
        sim.lose_on_delivery(NodeId(0), after, Duration::from_millis(2), Box::new(STEPS[1].1));
        let mut driver = SaltChains::new(12);
        sim.run(&mut driver).map(|_| ())
    };
    let n = seeds(40);
    BREAK_RULE.store(BREAK_FORGET_ON_TAKEOVER, Ordering::Relaxed);
    let caught = (0..n).find(|&seed| run(seed).is_err());
    BREAK_RULE.store(0, Ordering::Relaxed);
    let seed = caught.unwrap_or_else(|| panic!("no seed of {n} caught a coordinator restarted without its log"));
    run(seed).unwrap_or_else(|e| panic!("seed {seed} with the rule kept: {e}"));
}

/// Records when each workload request was sent and when each succeeded.
struct Timed {
    inner: AckedWrites,
    sent: std::collections::BTreeMap<usize, litmus_core::Time>,
    /// (sent, answered) of every request that succeeded.
    ok: Vec<(litmus_core::Time, litmus_core::Time)>,
}

impl litmus_runtime::sim::SimDriver for Timed {
    fn next(
        &mut self,
        client: usize,
        rng: &mut rand_chacha::ChaCha8Rng,
    ) -> Option<litmus_protocol::message::RequestBody> {
        self.inner.next(client, rng)
    }
    fn next_at(
        &mut self,
        client: usize,
        rng: &mut rand_chacha::ChaCha8Rng,
        now: litmus_core::Time,
    ) -> Option<litmus_protocol::message::RequestBody> {
        self.sent.insert(client, now);
        self.inner.next_at(client, rng, now)
    }
    fn done(
        &mut self,
        client: usize,
        request: &litmus_protocol::message::RequestBody,
        result: &Result<litmus_protocol::message::ResponseBody, litmus_core::Error>,
    ) {
        self.inner.done(client, request, result)
    }
    fn done_at(
        &mut self,
        client: usize,
        request: &litmus_protocol::message::RequestBody,
        result: &Result<litmus_protocol::message::ResponseBody, litmus_core::Error>,
        now: litmus_core::Time,
    ) {
        if let (Ok(_), Some(&sent)) = (result, self.sent.get(&client)) {
            self.ok.push((sent, now));
        }
        self.inner.done_at(client, request, result, now)
    }
    fn verify(&mut self, sim: &mut Simulator) -> Result<(), String> {
        self.inner.verify(sim)
    }
}

/// Omid's status oracle loses its leader's node mid-commit: the oracle's group elects a new
/// leader, which recovers the oracle from the log (a new timestamp range; what was in flight
/// aborted), and a transaction begun after the loss commits within a second of it.
#[test]
fn the_oracle_serves_again_within_a_second_of_losing_its_leader() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let oracle = GroupId::Role(litmus_protocol::RoleId(0));
    for seed in 0..seeds(4) {
        let engine = litmus_engines::OMID;
        let mut sim = Simulator::new(spec(engine, seed), SimConfig::new(seed)).unwrap();
        let after = Duration::from_millis(500 + 50 * seed);
        sim.lose_on_delivery(NodeId(0), after, Duration::from_millis(2), Box::new(to_role));
        let mut driver = Timed { inner: AckedWrites::for_engine(engine), sent: Default::default(), ok: Vec::new() };
        let report = sim.run(&mut driver).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let (_, lost_at) = report.lost_node.expect("node 0 lost");
        let takeover = report.takeovers.iter().find(|t| t.0 == oracle).map(|t| t.1);
        let takeover = takeover.unwrap_or_else(|| panic!("seed {seed}: the oracle's group never served again"));
        let first = driver.ok.iter().filter(|(sent, _)| *sent > lost_at).map(|(_, done)| done.0 - lost_at.0).min();
        let first =
            Duration::from_nanos(first.unwrap_or_else(|| panic!("seed {seed}: nothing committed after the loss")));
        eprintln!(
            "seed {seed}: oracle's new leader serves {takeover:?} after the loss, first commit {first:?} after it"
        );
        assert!(first < Duration::from_secs(1), "seed {seed}: first commit {first:?} after the oracle's loss");
    }
}
