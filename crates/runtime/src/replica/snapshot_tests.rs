//! A group snapshot taken by a member that does not follow by replay: it rebuilds its machine
//! from the committed records and snapshots that, so the snapshot must hold what the records
//! hold and nothing a restart adds before it serves. Omid's status oracle in a group of three
//! with snapshots every few entries, messages delivered at once.

use super::*;
use litmus_core::ClientId;
use litmus_core::Timestamp;
use litmus_omid::messages::{Checkpoint, Reply, Request};
use litmus_omid::node::{runtime_config, OracleMachine, OracleReply, OracleRequest, OracleWire, ORACLE, ORACLE_ROLE};
use litmus_omid::replica::{ClientReplica, Visibility};
use litmus_omid::RowId;

const CLIENT: Addr = Addr::Client(ClientId(1));
const SNAPSHOT_EVERY: u64 = 16;

fn member(node: u32) -> Replica {
    let build: litmus_protocol::engine::RoleBuilder =
        std::sync::Arc::new(|| Box::new(OracleMachine::new(runtime_config(), 1)));
    let voters = (0..3).map(NodeId).collect();
    let mut r = Replica::new(RoleMachine::new(ORACLE_ROLE, build), NodeId(node), voters, 7);
    r.cfg.snapshot_every_entries = SNAPSHOT_EVERY;
    r.cfg.snapshot_log_bytes_min = 0;
    r.cfg.compact_keep_entries = 4;
    r.recover(None, &[]).expect("a new group");
    r
}

struct Group {
    members: Vec<Option<Replica>>,
    queue: VecDeque<Envelope>,
    now: Time,
    replies: Vec<OracleReply>,
    tag: u64,
}

impl Group {
    fn new() -> Group {
        let members = (0..3).map(|n| Some(member(n))).collect();
        Group { members, queue: VecDeque::new(), now: Time::from_millis(1), replies: Vec::new(), tag: 0 }
    }

    fn step(&mut self, node: usize, input: Input) {
        let Some(m) = self.members[node].as_mut() else { return };
        let mut out = Effects::default();
        m.step(self.now, input, &mut out);
        self.queue.extend(out.send_now);
        self.queue.extend(out.send);
    }

    fn deliver_all(&mut self) {
        while let Some(env) = self.queue.pop_front() {
            match env.to {
                Addr::Replica(_, n) => self.step(n.0 as usize, Input::Message(env)),
                Addr::Client(_) => match OracleWire::peek(&env.msg) {
                    Some(OracleWire::Reply(r)) => self.replies.push(r.clone()),
                    _ => panic!("a client gets oracle replies"),
                },
                Addr::Role(_) => {
                    let live = self.members.iter().position(Option::is_some).expect("a live member");
                    self.step(live, Input::Message(env));
                }
                _ => {} // the oracle's Gc to partitions
            }
        }
    }

    fn run(&mut self, ms: u64) {
        for _ in 0..ms / TICK_INTERVAL_MS {
            self.now = Time(self.now.0 + TICK_INTERVAL_MS * 1_000_000);
            for n in 0..self.members.len() {
                self.step(n, Input::Tick);
            }
            self.deliver_all();
        }
    }

    fn call(&mut self, body: Request) -> Reply {
        self.tag += 1;
        let tag = self.tag;
        let msg = OracleWire::Request(OracleRequest { tag, body }).into_message();
        self.queue.push_back(Envelope { from: CLIENT, to: ORACLE, msg });
        for _ in 0..400 {
            self.deliver_all();
            if let Some(r) = self.replies.iter().find(|r| r.tag == Some(tag)) {
                return r.body.clone();
            }
            self.run(TICK_INTERVAL_MS);
        }
        panic!("no answer to request {tag}")
    }

    fn commit(&mut self, row: u64) -> Timestamp {
        let Reply::Began { start_ts, .. } = self.call(Request::BeginAs { id: row }) else { panic!("began") };
        let reply = self.call(Request::Commit { start_ts, write_set: vec![RowId(row)] });
        assert!(matches!(reply, Reply::Committed { .. }), "{reply:?}");
        start_ts
    }

    fn replica(&self, node: usize) -> &Replica {
        self.members[node].as_ref().expect("live")
    }

    /// The oracle inside the member on `node`.
    fn oracle(&self, node: usize) -> &litmus_omid::oracle::StatusOracle {
        let any = self.replica(node).inner.as_any().expect("inspectable");
        any.downcast_ref::<OracleMachine>().expect("the oracle").oracle()
    }
}

/// OM-8 in a replica group: the oracle's followers keep its log and, when the group asks for
/// a snapshot, rebuild the oracle from it and snapshot that. The snapshot holds what the log
/// holds: no crash range, which only a new leader logs (the leader that wrote the log goes on
/// committing in its reserved range). A follower that later leads from its snapshot keeps
/// every transaction the old leader committed after it committed: the oracle does not abort
/// it (OM-4: GC would purge it), nor does a new client's replica judge it aborted (OM-5); what
/// was in flight at the failover it still aborts, by the crash range it logs itself.
#[test]
fn a_followers_snapshot_of_the_oracle_holds_only_what_the_log_holds() {
    let mut g = Group::new();
    g.run(500);
    assert!(g.replica(0).is_leader(), "the home leads a new group");
    let Reply::Connected(_) = g.call(Request::ConnectAs { session: 1 }) else { panic!("connected") };
    let mut committed = Vec::new();
    let mut row = 0;
    while !(1..3).all(|n| g.replica(n).base.is_some()) {
        row += 1;
        assert!(row < 10 * SNAPSHOT_EVERY, "the followers take snapshots");
        committed.push(g.commit(row));
    }
    for n in 1..3 {
        let (meta, data) = g.replica(n).base.clone().expect("checked");
        let checkpoint = Checkpoint::decode(&data).expect("an oracle checkpoint");
        assert!(
            checkpoint.crash_ranges.is_empty(),
            "node {n}'s snapshot at {} holds crash ranges the log never held: {:?}",
            meta.index,
            checkpoint.crash_ranges
        );
    }
    // Commits after the followers' snapshots, then the leader's node fails.
    let mut late = Vec::new();
    for _ in 0..3 {
        row += 1;
        late.push(g.commit(row));
    }
    committed.extend(&late);
    let Reply::Began { start_ts: orphan, .. } = g.call(Request::BeginAs { id: 0 }) else { panic!("began") };
    g.members[0] = None;
    g.run(2000);
    let leader = (1..3).find(|&n| g.replica(n).is_leader()).expect("a new leader");
    let Reply::Connected(connected) = g.call(Request::ConnectAs { session: 2 }) else { panic!("connected") };
    for &ts in &committed {
        assert!(!g.oracle(leader).is_aborted(ts), "{ts:?} committed, yet the new leader's oracle aborts it");
    }
    assert!(g.oracle(leader).is_aborted(orphan), "the new leader fences off what was in flight");
    let replica = ClientReplica::new(&connected);
    let Reply::Began { start_ts: reader, .. } = g.call(Request::BeginAs { id: 1 }) else { panic!("began") };
    for &ts in &late {
        assert_ne!(replica.in_snapshot(ts, reader), Visibility::Invisible, "a new client's replica aborts {ts:?}");
    }
}
