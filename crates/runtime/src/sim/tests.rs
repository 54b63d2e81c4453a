//! The simulator's own rules, seen to hold where a run alone would rarely show them.

use super::*;
use crate::replica::ELECTION_TICKS;
use crate::Topology;
use litmus_core::Value;
use litmus_protocol::machine::TICK_INTERVAL_MS;
use litmus_protocol::{builtin, GroupId};
use std::sync::Arc;

/// One request from workload client 0, then nothing; remembers what came back.
#[derive(Default)]
struct OneRequest {
    sent: bool,
    result: Option<Result<ResponseBody, Error>>,
}

impl SimDriver for OneRequest {
    fn next(&mut self, _: usize, _: &mut ChaCha8Rng) -> Option<RequestBody> {
        if std::mem::replace(&mut self.sent, true) {
            return None;
        }
        let args = vec![Value::Int(1), Value::Bytes(b"one".to_vec().into())];
        Some(RequestBody::Call { procedure: "kv_put".into(), args, retrying_for: Duration::ZERO })
    }
    fn done(&mut self, _: usize, _: &RequestBody, result: &Result<ResponseBody, Error>) {
        self.result = Some(result.clone());
    }
    fn verify(&mut self, _: &mut Simulator) -> Result<(), String> {
        Ok(())
    }
}

/// The checks read in several transactions, so they begin only once no workload request may
/// still run. A request parked at a live member of its coordinator's group (no leader known)
/// stays there when another member crashes, and the member forwards it to the next leader,
/// which runs it: the crash does not make it one the checks may ignore.
#[test]
fn the_checks_wait_for_a_request_a_live_member_parked_while_another_member_crashed() {
    let spec = ClusterSpec {
        engine: litmus_engines::NOCC,
        topology: Topology::new(3, 3).unwrap().with_replicas(3).unwrap(),
        catalog: Arc::new(builtin::catalog()),
        registry: Arc::new(builtin::registry()),
        seed: 7,
    };
    // The client waits as long as the test does, so it sees the answer whenever it comes.
    let request_timeout = Duration::from_secs(10);
    let cfg = SimConfig { clients: 1, client_nodes: vec![NodeId(1)], request_timeout, ..SimConfig::new(7) };
    let mut sim = Simulator::new(spec, cfg).unwrap();
    let election = Duration::from_millis(ELECTION_TICKS as u64 * TICK_INTERVAL_MS);
    sim.idle(election).unwrap();
    // Node 1 alone: its coordinator's group loses its quorum, and node 1 stops leading it.
    sim.crash(NodeId(0));
    sim.crash(NodeId(2));
    sim.idle(3 * election).unwrap();
    // Node 2 returns, and waits out an election timeout before it votes: no leader yet.
    sim.start_node(NodeId(2)).unwrap();
    let mut driver = OneRequest::default();
    sim.start_clients(&mut driver);
    let soon = sim.now() + Duration::from_millis(20);
    sim.advance(&mut driver, soon).unwrap();
    let member = Addr::Replica(GroupId::Coordinator(NodeId(1)), NodeId(1));
    let (client, id) = *sim.unanswered.keys().next().expect("the request is out");
    let parked = machine_holds_request(sim.nodes[1].machines[&member].as_ref(), Addr::Client(ClientId(client)), id);
    assert!(parked, "node 1's member parks the request while its group has no leader");

    // Another member of the group crashes while the request is parked.
    sim.crash(NodeId(2));
    assert!(sim.workload_request_in_flight(), "a request a live member holds may still run: the checks wait for it");

    // And it does run: once node 2 is back, node 1 forwards it to the group's new leader.
    sim.start_node(NodeId(2)).unwrap();
    let later = sim.now() + 4 * election;
    sim.advance(&mut driver, later).unwrap();
    assert!(matches!(driver.result, Some(Ok(_))), "the parked request ran after the crash: {:?}", driver.result);
    assert!(!sim.workload_request_in_flight());
}
