//! The oracle as a runtime machine ([`super::node`]): one [`OracleMachine`], every logged record
//! durable, crashes that rebuild it from its log (its failover, OM-8).

use super::engine;
use super::messages::{Batch, Checkpoint, Fate, Record, Reply, Request};
use super::node::{runtime_config, OracleMachine, OracleReply, OracleRequest, OracleWire, GC_INTERVAL, ORACLE};
use super::replica::{ClientReplica, Visibility};
use super::{OracleError, RowId};
use litmus_core::{ClientId, PartitionId, Time, Timestamp};
use litmus_protocol::machine::{Effects, Input, Machine};
use litmus_protocol::message::{Addr, Envelope, Message, PartitionReply, Payload};

const CLIENT: Addr = Addr::Client(ClientId(7));
const PARTITIONS: u32 = 2;

/// A `Gc` as sent: `(low_water, purge, crashed)`.
type Gc = (Timestamp, Vec<Timestamp>, Vec<(Timestamp, Timestamp)>);

struct Lone {
    oracle: OracleMachine,
    log: Vec<Vec<u8>>,
    now: Time,
    /// What the last step persisted.
    persisted: Vec<Vec<u8>>,
    replies: Vec<OracleReply>,
    gcs: Vec<Gc>,
    next_tag: u64,
}

impl Lone {
    fn new() -> Lone {
        let mut oracle = OracleMachine::new(runtime_config(), PARTITIONS);
        oracle.recover(None, &[]).unwrap();
        let now = Time::from_millis(1);
        let mut l = Lone {
            oracle,
            log: Vec::new(),
            now,
            persisted: Vec::new(),
            replies: Vec::new(),
            gcs: Vec::new(),
            next_tag: 0,
        };
        l.run(10);
        l
    }

    /// One step; what it persists joins the log before anything it sends is looked at.
    fn step(&mut self, input: Input) {
        let mut out = Effects::default();
        self.oracle.step(self.now, input, &mut out);
        self.log.extend(out.persist.iter().cloned());
        self.persisted = out.persist;
        for env in out.send {
            assert_eq!(env.from, ORACLE);
            match env.to {
                Addr::Client(_) => {
                    let Some(OracleWire::Reply(r)) = OracleWire::peek(&env.msg).cloned() else {
                        panic!("a client gets oracle replies")
                    };
                    self.replies.push(r);
                }
                Addr::Partition(_) => {
                    let Message::PartitionRequest(r) = env.msg else { panic!("partitions get requests") };
                    let Ok(engine::Request::Gc { low_water, purge, crashed }) = r.body.decode::<engine::Request>()
                    else {
                        panic!("the oracle sends partitions Gc only")
                    };
                    let crashed = crashed.iter().map(|r| (r.after, r.upto)).collect();
                    self.gcs.push((low_water, purge, crashed));
                }
                other => panic!("the oracle sent to {other:?}"),
            }
        }
    }

    /// Lets `ms` pass in 5 ms ticks.
    fn run(&mut self, ms: u64) {
        for _ in 0..ms / 5 {
            self.now = Time(self.now.0 + 5_000_000);
            self.step(Input::Tick);
        }
    }

    /// Sends a request; the tag it carries.
    fn send(&mut self, body: Request) -> u64 {
        self.next_tag += 1;
        let msg = OracleWire::Request(OracleRequest { tag: self.next_tag, body }).into_message();
        self.step(Input::Message(Envelope { from: CLIENT, to: ORACLE, msg }));
        self.next_tag
    }

    fn answer(&self, tag: u64) -> Option<&Reply> {
        self.replies.iter().find(|r| r.tag == Some(tag)).map(|r| &r.body)
    }

    fn begin(&mut self, id: u64) -> Timestamp {
        let b = self.send(Request::BeginAs { id });
        let Some(Reply::Began { start_ts, .. }) = self.answer(b).cloned() else {
            panic!("began: {:?}", self.answer(b))
        };
        start_ts
    }

    /// A crash and a restart: a new machine recovers from the log alone.
    fn restart(&mut self) {
        let mut oracle = OracleMachine::new(runtime_config(), PARTITIONS);
        oracle.recover(None, &self.log).expect("the log decodes");
        self.oracle = oracle;
    }

    /// Partition `part` reports that it purged what was asked.
    fn purged(&mut self, part: u32, start_ts: Vec<Timestamp>, crashed: Vec<(Timestamp, Timestamp)>) {
        let body = Payload::new(engine::Reply::Purged { start_ts, crashed });
        let msg = Message::PartitionReply(PartitionReply { from: PartitionId(part), body });
        self.step(Input::Message(Envelope { from: Addr::Partition(PartitionId(part)), to: ORACLE, msg }));
    }

    /// The last `Gc` sent after at least one more GC round (one per partition, all the same).
    fn next_gc(&mut self) -> Gc {
        self.gcs.clear();
        self.run(GC_INTERVAL.as_millis() as u64 + 20);
        assert!(self.gcs.len() >= PARTITIONS as usize, "a Gc to every partition");
        self.gcs.last().cloned().expect("a GC round")
    }
}

fn records(persist: &[Vec<u8>]) -> Vec<Record> {
    persist.iter().flat_map(|b| Batch::decode(b).expect("a batch").records).collect()
}

/// OM-7 and OM-8 on the machine: a reply leaves in the same step as the batch it depends on
/// (the runtime persists before it sends); a restart keeps every acknowledged commit, logs a
/// crash range for what was in flight before it answers anything, and ends every session.
#[test]
fn a_restart_keeps_acknowledged_commits_aborts_what_was_in_flight_and_ends_sessions() {
    let mut l = Lone::new();
    let c = l.send(Request::ConnectAs { session: 1 });
    assert!(matches!(l.answer(c), Some(Reply::Connected(_))));
    let start_ts = l.begin(1);
    let t = l.send(Request::Commit { start_ts, write_set: vec![RowId(1)] });
    let Some(Reply::Committed { commit_ts, .. }) = l.answer(t).cloned() else { panic!("committed") };
    assert!(
        records(&l.persisted).contains(&Record::Committed { start_ts, commit_ts }),
        "the commit's record is persisted by the step that answers it"
    );
    let in_flight = l.begin(2);

    l.restart();
    l.step(Input::Tick);
    let crashed = records(&l.persisted);
    assert!(
        crashed
            .iter()
            .any(|r| matches!(r, Record::CrashAborted { after, upto } if *after < in_flight && in_flight <= *upto)),
        "the first step logs the crash range: {crashed:?}"
    );
    let o = l.oracle.oracle();
    assert_eq!(o.commit_ts(start_ts), Some(commit_ts), "the acknowledged commit survived");
    assert!(o.is_aborted(in_flight) && !o.is_aborted(start_ts));
    // The session did not survive: the client is refused until it reconnects.
    let b = l.send(Request::BeginAs { id: 3 });
    assert_eq!(l.answer(b), Some(&Reply::Refused(OracleError::NotConnected)));
    let commit = l.send(Request::Commit { start_ts: in_flight, write_set: vec![RowId(2)] });
    assert_eq!(l.answer(commit), Some(&Reply::Refused(OracleError::NotConnected)));
    let c = l.send(Request::ConnectAs { session: 2 });
    assert!(matches!(l.answer(c), Some(Reply::Connected(_))));
    assert!(l.begin(4) > in_flight, "timestamps resume above every issued one");
}

/// OM-8: the machine's snapshot plus the records logged after it recover what the whole log
/// does.
#[test]
fn a_restart_from_the_snapshot_and_the_later_records_recovers_the_same_state() {
    let mut l = Lone::new();
    let c = l.send(Request::ConnectAs { session: 1 });
    assert!(matches!(l.answer(c), Some(Reply::Connected(_))));
    fn commit(l: &mut Lone, id: u64) -> Timestamp {
        let start_ts = l.begin(id);
        let t = l.send(Request::Commit { start_ts, write_set: vec![RowId(id)] });
        assert!(matches!(l.answer(t), Some(Reply::Committed { .. })));
        start_ts
    }
    let early = commit(&mut l, 1);
    let snapshot = l.oracle.snapshot().expect("no open batch between steps");
    let cut = l.log.len();
    let late = commit(&mut l, 2);
    let mut from_snapshot = OracleMachine::new(runtime_config(), PARTITIONS);
    from_snapshot.recover(Some(&snapshot), &l.log[cut..]).unwrap();
    l.restart();
    let (a, b) = (from_snapshot.oracle(), l.oracle.oracle());
    for ts in [early, late] {
        assert!(a.commit_ts(ts).is_some());
        assert_eq!(a.commit_ts(ts), b.commit_ts(ts));
    }
    assert_eq!(a.checkpoint(), b.checkpoint());
}

/// OM-4 and OM-E5 on the machine: the oracle aborts what an ended session began; its `Gc`
/// asks the partitions to purge it, and once every partition reported, the abort is forgotten
/// (and the forgetting logged). After a restart, its `Gc` purges the crash range it logged,
/// and reports for it from every partition drop the range.
#[test]
fn gc_purges_what_ended_sessions_and_crashes_left_and_the_oracle_forgets_it() {
    let mut l = Lone::new();
    let c = l.send(Request::ConnectAs { session: 1 });
    assert!(matches!(l.answer(c), Some(Reply::Connected(_))));
    let start_ts = l.begin(1);
    // The same client opens a newer session: the old one's transaction is aborted.
    let c2 = l.send(Request::ConnectAs { session: 2 });
    assert!(matches!(l.answer(c2), Some(Reply::Connected(_))));
    assert!(l.oracle.oracle().aborted().any(|t| t == start_ts), "aborted with its session");
    assert!(records(&l.log).contains(&Record::Aborted { start_ts }), "the abort is logged");
    let (low_water, purge, _) = l.next_gc();
    assert!(start_ts < low_water);
    assert!(purge.contains(&start_ts), "GC names the aborted transaction: {purge:?}");
    l.purged(0, vec![start_ts], Vec::new());
    assert!(l.oracle.oracle().aborted().any(|t| t == start_ts), "one partition is not all");
    l.purged(0, vec![start_ts], Vec::new());
    assert!(l.oracle.oracle().aborted().any(|t| t == start_ts), "the same partition twice is still one");
    l.purged(1, vec![start_ts], Vec::new());
    assert!(!l.oracle.oracle().aborted().any(|t| t == start_ts), "forgotten once every partition purged");
    assert!(records(&l.log).contains(&Record::Forgotten { start_ts }), "the forgetting is logged");
    let (_, purge, _) = l.next_gc();
    assert!(!purge.contains(&start_ts), "nothing is asked twice once forgotten");

    // A transaction in flight at a crash: the recovered oracle aborts it by a crash range,
    // purges the range through GC, and forgets it once both partitions report.
    let in_flight = l.begin(2);
    l.restart();
    l.step(Input::Tick); // the first step logs the crash range
    let ranges: Vec<_> = l.oracle.oracle().crash_ranges().iter().map(|r| (r.after, r.upto)).collect();
    assert!(ranges.iter().any(|&(after, upto)| after < in_flight && in_flight <= upto), "{ranges:?}");
    let (_, _, crashed) = l.next_gc();
    assert_eq!(crashed, ranges, "GC names the crash range");
    l.purged(0, Vec::new(), crashed.clone());
    assert!(!l.oracle.oracle().crash_ranges().is_empty(), "one partition is not all");
    l.purged(1, Vec::new(), crashed);
    assert!(l.oracle.oracle().crash_ranges().is_empty(), "the purged range is forgotten");
    assert!(records(&l.log).iter().any(|r| matches!(r, Record::CrashForgotten { .. })), "and that is logged");
}

/// OM-8 in a replica group: a member that does not lead keeps the oracle's log, and when the
/// group wants a snapshot it rebuilds the oracle from that log without stepping it and takes
/// the snapshot from it. That snapshot holds what the log holds and nothing the rebuild would
/// add as a new incarnation: no crash range, since the leader never logged one and goes on
/// committing transactions in its reserved range. An oracle later recovered from that
/// snapshot and the records after it keeps every such commit committed: a new client's
/// replica does not judge it aborted (OM-5), and no crash range hands it to GC to purge (OM-4);
/// what was in flight when it took over is aborted by the crash range it logs itself.
#[test]
fn a_snapshot_of_the_oracle_rebuilt_from_its_log_holds_only_what_the_log_holds() {
    let mut l = Lone::new();
    let c = l.send(Request::ConnectAs { session: 1 });
    assert!(matches!(l.answer(c), Some(Reply::Connected(_))));
    let commit = |l: &mut Lone, id: u64| {
        let start_ts = l.begin(id);
        let t = l.send(Request::Commit { start_ts, write_set: vec![RowId(id)] });
        let Some(Reply::Committed { commit_ts, .. }) = l.answer(t).cloned() else { panic!("committed") };
        (start_ts, commit_ts)
    };
    let (early, _) = commit(&mut l, 1);
    let in_flight = l.begin(2);
    let leaders = l.oracle.snapshot().expect("no open batch between steps");

    // A follower rebuilds the oracle from the log so far and snapshots it, unstepped.
    let cut = l.log.len();
    let mut follower = OracleMachine::new(runtime_config(), PARTITIONS);
    follower.recover(None, &l.log[..cut]).unwrap();
    let snapshot = follower.snapshot().expect("a rebuilt oracle has no open batch");
    assert_eq!(
        Checkpoint::decode(&snapshot).unwrap(),
        Checkpoint::decode(&leaders).unwrap(),
        "the follower's snapshot is the leader's state at the same point of the log"
    );

    // The leader goes on: a transaction in its reserved range commits, the in-flight one too.
    let (late, late_tc) = commit(&mut l, 3);
    let t = l.send(Request::Commit { start_ts: in_flight, write_set: vec![RowId(2)] });
    assert!(matches!(l.answer(t), Some(Reply::Committed { .. })));
    let orphan = l.begin(5);

    // A member recovers from the follower's snapshot and the records after it, and serves.
    let mut next = OracleMachine::new(runtime_config(), PARTITIONS);
    next.recover(Some(&snapshot), &l.log[cut..]).unwrap();
    l.oracle = next;
    l.step(Input::Tick);
    for ts in [early, late, in_flight] {
        assert!(!l.oracle.oracle().is_aborted(ts), "{ts:?} committed, yet the recovered oracle aborts it");
    }
    assert_eq!(l.oracle.oracle().fate(late), Fate::Committed(late_tc));
    assert!(l.oracle.oracle().is_aborted(orphan), "the new incarnation still fences off what was in flight");
    let c = l.send(Request::ConnectAs { session: 2 });
    let Some(Reply::Connected(connected)) = l.answer(c).cloned() else { panic!("connected") };
    let replica = ClientReplica::new(&connected);
    let reader = l.begin(4);
    for ts in [late, in_flight] {
        assert_ne!(
            replica.in_snapshot(ts, reader),
            Visibility::Invisible,
            "a new client's replica judges the committed {ts:?} aborted"
        );
    }
    // What GC purges is what `is_aborted` says: the members of the crash ranges it names,
    // except the commits each range lists (OM-4). None of the commits above is among them.
    let (_, _, crashed) = l.next_gc();
    let ranges = l.oracle.oracle().crash_ranges();
    for ts in [early, late, in_flight] {
        let purged = ranges.iter().filter(|r| crashed.contains(&(r.after, r.upto))).any(|r| r.aborts(ts));
        assert!(!purged, "GC purges the committed {ts:?}: {ranges:?}");
    }
}
