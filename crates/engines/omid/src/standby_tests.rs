//! The hot standby as runtime machines ([`super::node`], "Hot standby"): two replicas, a FIFO
//! network between them that tests can cut, every logged record durable, crashes that rebuild a
//! replica from its log.

use super::engine;
use super::messages::{Reply, Request};
use super::node::{
    runtime_config, OracleMachine, OracleReply, OracleRequest, OracleWire, Replication, GC_INTERVAL, ORACLE,
    ORACLE_STANDBY, PROMOTE_AFTER,
};
use super::{OracleError, RowId};
use litmus_core::{ClientId, PartitionId, Time, Timestamp};
use litmus_protocol::machine::{Effects, Input, Machine};
use litmus_protocol::message::{Addr, Envelope, Message, PartitionReply, Payload};
use std::collections::VecDeque;

const CLIENT: Addr = Addr::Client(ClientId(7));
const ADDRS: [Addr; 2] = [ORACLE, ORACLE_STANDBY];

/// A `Gc` as sent: `(sender, purge, crashed)`.
type Gc = (Addr, Vec<Timestamp>, Vec<(Timestamp, Timestamp)>);

struct Pair {
    replicas: [OracleMachine; 2],
    logs: [Vec<Vec<u8>>; 2],
    up: [bool; 2],
    /// Replication messages between the replicas pass only while true.
    linked: bool,
    net: VecDeque<Envelope>,
    now: Time,
    replies: Vec<(Addr, OracleReply)>,
    gc_from: Vec<Addr>,
    /// The `Gc` messages sent: `(sender, purge, crashed)`.
    gcs: Vec<Gc>,
    next_tag: u64,
}

fn machine(i: usize) -> OracleMachine {
    OracleMachine::replica(runtime_config(), 2, ADDRS[i], Some(ADDRS[1 - i]))
}

impl Pair {
    fn new() -> Pair {
        let mut p = Pair {
            replicas: [machine(0), machine(1)],
            logs: [Vec::new(), Vec::new()],
            up: [true, true],
            linked: true,
            net: VecDeque::new(),
            now: Time::from_millis(1),
            replies: Vec::new(),
            gc_from: Vec::new(),
            gcs: Vec::new(),
            next_tag: 0,
        };
        p.replicas[0].recover(None, &[]).unwrap();
        p.replicas[1].recover(None, &[]).unwrap();
        p.settle();
        p
    }

    fn step(&mut self, i: usize, input: Input) {
        let mut out = Effects::default();
        self.replicas[i].step(self.now, input, &mut out);
        self.logs[i].extend(out.persist);
        for env in out.send {
            match env.to {
                Addr::Client(_) => {
                    let Some(OracleWire::Reply(r)) = OracleWire::peek(&env.msg).cloned() else {
                        panic!("a client gets oracle replies")
                    };
                    self.replies.push((env.from, r));
                }
                Addr::Partition(_) => {
                    let Message::PartitionRequest(r) = env.msg else { panic!("partitions get requests") };
                    let Ok(engine::Request::Gc { purge, crashed, .. }) = r.body.decode::<engine::Request>() else {
                        panic!("the oracle sends partitions Gc only")
                    };
                    self.gc_from.push(env.from);
                    let crashed = crashed.iter().map(|r| (r.after, r.upto)).collect();
                    self.gcs.push((env.from, purge, crashed));
                }
                _ => self.net.push_back(env),
            }
        }
    }

    fn deliver(&mut self) {
        while let Some(env) = self.net.pop_front() {
            let i = ADDRS.iter().position(|a| *a == env.to).expect("an oracle replica");
            let between = matches!(OracleWire::peek(&env.msg), Some(OracleWire::Replication(_)));
            if self.up[i] && (self.linked || !between) {
                self.step(i, Input::Message(env));
            }
        }
    }

    /// Lets `ms` pass in 5 ms ticks.
    fn run(&mut self, ms: u64) {
        for _ in 0..ms / 5 {
            self.now = Time(self.now.0 + 5_000_000);
            for i in 0..2 {
                if self.up[i] {
                    self.step(i, Input::Tick);
                }
            }
            self.deliver();
        }
    }

    fn settle(&mut self) {
        self.deliver();
        self.run(10);
    }

    /// Sends a request to replica `i` and delivers what follows (no time passes).
    fn send(&mut self, i: usize, body: Request) -> u64 {
        self.next_tag += 1;
        let msg = OracleWire::Request(OracleRequest { tag: self.next_tag, body }).into_message();
        if self.up[i] {
            self.step(i, Input::Message(Envelope { from: CLIENT, to: ADDRS[i], msg }));
        }
        self.deliver();
        self.next_tag
    }

    fn answer(&self, tag: u64) -> Option<&Reply> {
        self.replies.iter().find(|(_, r)| r.tag == Some(tag)).map(|(_, r)| &r.body)
    }

    fn crash(&mut self, i: usize) {
        self.up[i] = false;
    }

    fn restart(&mut self, i: usize) {
        let mut m = machine(i);
        m.recover(None, &self.logs[i]).expect("the log decodes");
        self.replicas[i] = m;
        self.up[i] = true;
    }

    /// Connects, begins and commits one row at replica `i`; the commit timestamp if answered.
    fn commit_one(&mut self, i: usize, row: u64) -> Option<(Timestamp, Timestamp)> {
        let c = self.send(i, Request::Connect);
        self.answer(c)?;
        let b = self.send(i, Request::Begin);
        let Some(Reply::Began { start_ts, .. }) = self.answer(b).cloned() else { return None };
        let t = self.send(i, Request::Commit { start_ts, write_set: vec![RowId(row)] });
        match self.answer(t) {
            Some(Reply::Committed { commit_ts, .. }) => Some((start_ts, *commit_ts)),
            _ => None,
        }
    }
}

/// OM-8 (hot standby): a fresh pair has replica 0 serving and replica 1 tailing.
#[test]
fn a_fresh_pair_has_replica_0_serving_and_replica_1_tailing() {
    let p = Pair::new();
    assert!(p.replicas[0].is_primary() && !p.replicas[1].is_primary());
    assert_eq!((p.replicas[0].epoch(), p.replicas[1].epoch()), (0, 0));
    assert_eq!(p.replicas[1].oracle().lsn(), p.replicas[0].oracle().lsn(), "the standby tailed the start batch");
}

/// OM-7 with log shipping: no reply leaves before the standby acknowledges its batch.
#[test]
fn no_reply_leaves_before_the_standby_acknowledges_its_batch() {
    let mut p = Pair::new();
    let (start_ts, commit_ts) = p.commit_one(0, 1).expect("committed with the standby up");
    assert_eq!(p.replicas[1].oracle().commit_ts(start_ts), Some(commit_ts), "the standby holds the commit");
    // Cut the link: the primary decides the next commit but may not answer it.
    p.linked = false;
    let b = p.send(0, Request::Begin);
    assert!(p.answer(b).is_none(), "even a Begin waits for a fresh acknowledgement");
    p.run(100);
    assert!(p.answer(b).is_none(), "the primary stalls while its standby is unreachable (no degrade)");
    p.linked = true;
    p.run(50);
    assert!(matches!(p.answer(b), Some(Reply::Began { .. })), "released once the standby acknowledges");
}

/// OM-7 with log shipping: an acknowledgement releases only the batches it covers.
#[test]
fn an_acknowledgement_of_an_earlier_message_releases_no_later_decision() {
    let mut p = Pair::new();
    p.commit_one(0, 1).expect("committed");
    // Hold back the standby's answers: a stale ack (covering the whole stream) arrives after the
    // next request was decided. It proves nothing about the standby still being a standby then.
    let lsn = p.replicas[0].oracle().lsn();
    let b = p.send_without_delivery(0, Request::Begin);
    let stale = Replication::Ack { epoch: 0, seq: 1, applied: lsn };
    let msg = OracleWire::Replication(stale).into_message();
    p.step(0, Input::Message(Envelope { from: ORACLE_STANDBY, to: ORACLE, msg }));
    assert!(p.answer(b).is_none(), "released only by an ack of a message sent after the request");
    p.deliver();
    assert!(matches!(p.answer(b), Some(Reply::Began { .. })));
}

impl Pair {
    fn send_without_delivery(&mut self, i: usize, body: Request) -> u64 {
        self.next_tag += 1;
        let msg = OracleWire::Request(OracleRequest { tag: self.next_tag, body }).into_message();
        self.step(i, Input::Message(Envelope { from: CLIENT, to: ADDRS[i], msg }));
        self.next_tag
    }
}

/// OM-8 (failover): the standby refuses clients, and promotes itself when the primary is silent.
#[test]
fn the_standby_refuses_clients_and_promotes_when_the_primary_is_silent() {
    let mut p = Pair::new();
    let c = p.send(1, Request::Connect);
    assert_eq!(p.answer(c), Some(&Reply::Refused(OracleError::NotServing)));
    let (start_ts, commit_ts) = p.commit_one(0, 1).expect("committed");
    p.crash(0);
    p.run(PROMOTE_AFTER.as_millis() as u64 - 20);
    assert!(!p.replicas[1].is_primary(), "not before the timeout");
    p.run(40);
    assert!(p.replicas[1].is_primary(), "promoted");
    assert_eq!(p.replicas[1].epoch(), 1);
    let o = p.replicas[1].oracle();
    assert_eq!(o.commit_ts(start_ts), Some(commit_ts), "the acknowledged commit survived the failover");
    assert!(o.standby_out(), "the old primary lacks epoch 1: the new primary serves alone");
    let (s2, _) = p.commit_one(1, 2).expect("the promoted standby serves alone");
    assert!(s2 > commit_ts, "timestamps resume above every earlier one");
}

/// OM-8 (failover): a partitioned old primary is fenced and rejoins as the standby.
#[test]
fn a_partitioned_old_primary_is_fenced_and_rejoins_as_the_standby() {
    let mut p = Pair::new();
    p.commit_one(0, 1).expect("committed");
    p.linked = false;
    let b = p.send(0, Request::Begin); // decided by the old primary, never answered
    p.run(PROMOTE_AFTER.as_millis() as u64 + 20);
    assert!(p.replicas[1].is_primary() && p.replicas[1].epoch() == 1, "the standby took over");
    assert!(p.replicas[0].is_primary(), "the old primary does not know yet");
    let (s, c) = p.commit_one(1, 2).expect("the new primary serves alone");
    p.gc_from.clear();
    p.run(GC_INTERVAL.as_millis() as u64 + 20);
    assert!(!p.gc_from.is_empty() && p.gc_from.iter().all(|a| *a == ORACLE_STANDBY), "GC from the serving one");
    assert!(p.answer(b).is_none(), "the old primary never answered without an ack");
    // Heal: the old primary hears epoch 1, stops, and takes the state transfer.
    p.linked = true;
    p.run(60);
    assert!(p.answer(b).is_none(), "its held reply is dropped, never sent");
    assert!(!p.replicas[0].is_primary() && p.replicas[0].epoch() == 1, "replica 0 is now the standby of epoch 1");
    assert_eq!(p.replicas[0].oracle().commit_ts(s), Some(c), "it holds the new primary's state");
    assert!(!p.replicas[1].oracle().standby_out(), "the new primary waits for its new standby again");
    let refused = p.send(0, Request::Connect);
    assert_eq!(p.answer(refused), Some(&Reply::Refused(OracleError::NotServing)));
    // And it takes over in turn when replica 1 goes silent.
    let (s3, c3) = p.commit_one(1, 3).expect("committed through the new pair");
    p.crash(1);
    p.run(PROMOTE_AFTER.as_millis() as u64 + 20);
    assert!(p.replicas[0].is_primary() && p.replicas[0].epoch() == 2);
    assert_eq!(p.replicas[0].oracle().commit_ts(s3), Some(c3), "no acknowledged commit lost");
}

/// OM-8 (failover): a restarted old primary learns the newer epoch instead of serving.
#[test]
fn a_restarted_old_primary_learns_the_newer_epoch_instead_of_serving() {
    let mut p = Pair::new();
    p.commit_one(0, 1).expect("committed");
    p.crash(0);
    p.run(PROMOTE_AFTER.as_millis() as u64 + 20);
    let (s, c) = p.commit_one(1, 2).expect("the standby serves");
    p.restart(0);
    assert!(p.replicas[0].is_primary(), "its log says it serves epoch 0");
    let b = p.send(0, Request::Connect);
    p.run(60);
    assert!(p.answer(b).is_none(), "but it answers nothing: epoch 1 refuses to acknowledge it");
    assert!(!p.replicas[0].is_primary() && p.replicas[0].epoch() == 1);
    assert_eq!(p.replicas[0].oracle().commit_ts(s), Some(c));
    // A second restart recovers the standby role from the log (the installed checkpoint).
    p.crash(0);
    p.restart(0);
    assert!(!p.replicas[0].is_primary() && p.replicas[0].epoch() == 1);
    assert_eq!(p.replicas[0].oracle().commit_ts(s), Some(c));
}

/// OM-7 and OM-8: a restarted standby catches up, and the primary resumes.
#[test]
fn a_restarted_standby_catches_up_and_the_primary_resumes() {
    let mut p = Pair::new();
    p.commit_one(0, 1).expect("committed");
    p.crash(1);
    let t = p.send(0, Request::Connect);
    p.run(50);
    assert!(p.answer(t).is_none(), "stalled while the standby is down");
    p.restart(1);
    p.run(50);
    assert!(p.answer(t).is_some(), "answered once the restarted standby acknowledges");
    let (s, c) = p.commit_one(0, 2).expect("committed");
    assert_eq!(p.replicas[1].oracle().commit_ts(s), Some(c));
    assert!(p.replicas[0].is_primary() && p.replicas[0].epoch() == 0, "no failover happened");
}

/// OM-8: a restarted primary resyncs its standby by state transfer.
#[test]
fn a_restarted_primary_resyncs_its_standby_by_state_transfer() {
    let mut p = Pair::new();
    p.commit_one(0, 1).expect("committed");
    // The standby misses the primary's last batches, then the primary restarts (its resend
    // buffer is gone): a checkpoint brings the standby up to date.
    p.linked = false;
    let t = p.send(0, Request::Connect);
    let b = p.send(0, Request::Begin);
    assert!(p.answer(t).is_none() && p.answer(b).is_none());
    p.crash(0);
    p.restart(0);
    p.linked = true;
    p.run(50);
    let (s, c) = p.commit_one(0, 2).expect("committed after the restart");
    assert_eq!(p.replicas[1].oracle().lsn(), p.replicas[0].oracle().lsn());
    assert_eq!(p.replicas[1].oracle().commit_ts(s), Some(c));
    assert!(p.replicas[0].is_primary() && p.replicas[0].epoch() == 0);
}

/// OM-8: a restarted primary's lease is renewed by its own messages' acknowledgements only. An
/// acknowledgement of the previous incarnation's message, still in flight when the primary
/// crashed, names a number this incarnation has not reached: taken as the newest, it made every
/// later acknowledgement look late, and the primary served nothing until its count caught up.
#[test]
fn a_restarted_primary_is_not_stalled_by_an_acknowledgement_sent_to_its_previous_incarnation() {
    let mut p = Pair::new();
    p.commit_one(0, 1).expect("committed");
    // The standby's acknowledgement of the previous incarnation's thousandth message.
    let ack = Replication::Ack { epoch: p.replicas[0].epoch(), seq: 1_000, applied: p.replicas[1].oracle().lsn() };
    let late = Envelope { from: ADDRS[1], to: ADDRS[0], msg: OracleWire::Replication(ack).into_message() };
    p.crash(0);
    p.restart(0);
    p.step(0, Input::Message(late));
    p.deliver();
    p.run(50);
    assert!(p.commit_one(0, 2).is_some(), "the restarted primary serves within 50 ms");
}

impl Pair {
    /// Partition `part` reports to replica `i` that it purged what was asked.
    fn purged(&mut self, i: usize, part: u32, start_ts: Vec<Timestamp>, crashed: Vec<(Timestamp, Timestamp)>) {
        let body = Payload::new(engine::Reply::Purged { start_ts, crashed });
        let msg = Message::PartitionReply(PartitionReply { from: PartitionId(part), body });
        self.step(i, Input::Message(Envelope { from: Addr::Partition(PartitionId(part)), to: ADDRS[i], msg }));
        self.deliver();
    }

    /// The last `Gc` sent, after one more GC round.
    fn next_gc(&mut self) -> Gc {
        self.gcs.clear();
        self.run(GC_INTERVAL.as_millis() as u64 + 20);
        self.gcs.last().cloned().expect("a GC round")
    }
}

/// OM-4 on the standby: Sessions (the SO aborts what an ended session began) and purging (partitions delete the
/// versions GC names and report it) with a standby: the aborts and what the reports conclude
/// are logged, so the standby holds them; reports count only at the serving primary; after a
/// promotion the new primary purges the crash range it logged.
#[test]
fn session_aborts_and_purges_reach_the_standby_and_only_the_serving_replica_collects() {
    let mut p = Pair::new();
    let c = p.send(0, Request::ConnectAs { session: 1 });
    assert!(matches!(p.answer(c), Some(Reply::Connected(_))));
    let b = p.send(0, Request::BeginAs { id: 1 });
    let Some(Reply::Began { start_ts, .. }) = p.answer(b).cloned() else { panic!("began") };
    // The same client opens a newer session: the old one's transaction is aborted, and the
    // standby holds the abort before the new session is answered.
    let c2 = p.send(0, Request::ConnectAs { session: 2 });
    assert!(matches!(p.answer(c2), Some(Reply::Connected(_))));
    assert!(p.replicas[0].oracle().aborted().any(|t| t == start_ts), "aborted with its session");
    assert!(p.replicas[1].oracle().aborted().any(|t| t == start_ts), "the abort was shipped");
    // GC (from the primary) asks the partitions to purge it.
    let (from, purge, _) = p.next_gc();
    assert_eq!(from, ORACLE);
    assert!(purge.contains(&start_ts), "GC names the aborted transaction: {purge:?}");
    // Reports to the standby count for nothing.
    p.purged(1, 0, vec![start_ts], Vec::new());
    p.purged(1, 1, vec![start_ts], Vec::new());
    assert!(p.replicas[0].oracle().aborted().any(|t| t == start_ts));
    // Both partitions report to the primary: forgotten there, and at the standby.
    p.purged(0, 0, vec![start_ts], Vec::new());
    assert!(p.replicas[0].oracle().aborted().any(|t| t == start_ts), "one partition is not all");
    p.purged(0, 1, vec![start_ts], Vec::new());
    assert!(!p.replicas[0].oracle().aborted().any(|t| t == start_ts), "forgotten once every partition purged");
    assert!(!p.replicas[1].oracle().aborted().any(|t| t == start_ts), "the standby forgot it too");

    // A transaction in flight when the primary fails: the promoted standby aborts it by a crash
    // range, purges the range through GC, and forgets it once both partitions report.
    let b2 = p.send(0, Request::BeginAs { id: 2 });
    let Some(Reply::Began { start_ts: in_flight, .. }) = p.answer(b2).cloned() else { panic!("began") };
    p.crash(0);
    p.run(PROMOTE_AFTER.as_millis() as u64 + 20);
    assert!(p.replicas[1].is_primary());
    let ranges: Vec<_> = p.replicas[1].oracle().crash_ranges().iter().map(|r| (r.after, r.upto)).collect();
    assert!(ranges.iter().any(|&(after, upto)| after < in_flight && in_flight <= upto), "{ranges:?}");
    let (from, _, crashed) = p.next_gc();
    assert_eq!(from, ORACLE_STANDBY, "GC from the serving replica");
    assert_eq!(crashed, ranges);
    p.purged(1, 0, Vec::new(), crashed.clone());
    p.purged(1, 1, Vec::new(), crashed);
    assert!(p.replicas[1].oracle().crash_ranges().is_empty(), "the purged range is forgotten");
    // The client's session did not survive the failover: it reconnects (a fresh session id
    // there, as a coordinator that switched replicas does) and works.
    let c3 = p.send(1, Request::ConnectAs { session: 3 });
    assert!(matches!(p.answer(c3), Some(Reply::Connected(_))));
    let b3 = p.send(1, Request::BeginAs { id: 3 });
    assert!(matches!(p.answer(b3), Some(Reply::Began { start_ts, .. }) if *start_ts > in_flight));
}
