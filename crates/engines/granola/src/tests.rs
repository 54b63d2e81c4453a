//! Rule tests, named after the paper's sections: partitions driven directly, messages between
//! them delivered by hand (so the order of votes is the test's choice).

use super::partition::{GranolaPartition, Record};
use super::*;
use litmus_core::{Catalog, NodeId, Time};
use litmus_protocol::builtin;
use litmus_protocol::engine::{decode_record, CoordCtxParts, OneRoundTransactions, PartCtx};
use litmus_protocol::fragment::{FragmentCall, OneRoundClass, OneRoundPlan};
use litmus_protocol::machine::Effects;
use litmus_protocol::message::{Envelope, Message, Payload};
use litmus_protocol::procedure::Registry;
use litmus_storage::mvcc::MvccStore;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::time::Duration;

const COORD: Addr = Addr::Coordinator(NodeId(0));
const INITIAL: i64 = 100;

struct Part {
    p: GranolaPartition,
    store: MvccStore,
    log: Vec<Vec<u8>>,
    clock: u64,
}

/// Two (or more) partitions, the messages between them, and the replies to the client proxy.
struct H {
    parts: Vec<Part>,
    catalog: Catalog,
    registry: Registry,
    rng: ChaCha8Rng,
    net: Vec<Envelope>,
    replies: Vec<(PartitionId, Reply)>,
    /// `granola-locking` partitions.
    locking: bool,
    /// §5.4's wait before `forcePrepare` (`None`: off).
    force_after: Option<Duration>,
}

impl H {
    /// `n` partitions of `granola-locking` (always in locking mode).
    fn locking(n: usize) -> H {
        let mut h = H::new(n);
        h.locking = true;
        for part in &mut h.parts {
            part.p = GranolaPartition::new(true, None);
        }
        h
    }

    fn new(n: usize) -> H {
        let mut catalog = builtin::catalog();
        catalog.merge(&builtin::bank::catalog());
        let mut registry = builtin::registry();
        registry.merge(&builtin::bank::registry());
        let parts = (0..n).map(|_| Part {
            p: GranolaPartition::new(false, None),
            store: MvccStore::new(),
            log: vec![],
            clock: 1_000,
        });
        let rng = ChaCha8Rng::seed_from_u64(7);
        let force_after = Some(FORCE_PREPARE_AFTER);
        H { parts: parts.collect(), catalog, registry, rng, net: vec![], replies: vec![], locking: false, force_after }
    }

    fn with(&mut self, i: usize, f: impl FnOnce(&mut GranolaPartition, &mut PartCtx)) {
        let mut out = Effects::default();
        let n = self.parts.len() as u32;
        let part = &mut self.parts[i];
        let mut ctx = PartCtx {
            now: Time(part.clock),
            me: PartitionId(i as u32),
            rng: &mut self.rng,
            catalog: &self.catalog,
            registry: &self.registry,
            partitions: n,
            store: &mut part.store,
            out: &mut out,
        };
        f(&mut part.p, &mut ctx);
        part.log.extend(out.persist);
        for env in out.send {
            match env.msg {
                Message::PartitionReply(r) => self.replies.push((r.from, r.body.decode::<Reply>().unwrap())),
                Message::PartitionRequest(_) => self.net.push(env),
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    fn send(&mut self, req: &TxnRequest) {
        for p in req.participants() {
            let r = Request::Txn(req.clone());
            self.with(p.0 as usize, |part, ctx| part.on_request(COORD, Payload::new(r), ctx));
        }
    }

    fn send_to(&mut self, p: usize, req: &TxnRequest) {
        let r = Request::Txn(req.clone());
        self.with(p, |part, ctx| part.on_request(COORD, Payload::new(r), ctx));
    }

    fn deliver(&mut self, env: Envelope) {
        let (Addr::Partition(p), Message::PartitionRequest(r)) = (env.to, env.msg) else { panic!("not a request") };
        self.with(p.0 as usize, |part, ctx| part.on_request(env.from, r.body, ctx));
    }

    /// Delivers every message in flight, and those they cause, in order.
    fn settle(&mut self) {
        while !self.net.is_empty() {
            let env = self.net.remove(0);
            self.deliver(env);
        }
    }

    /// Votes in flight for `g`, taken out of the network.
    fn take_votes(&mut self, g: Gtid) -> Vec<Envelope> {
        let (mine, rest) = std::mem::take(&mut self.net).into_iter().partition(|e| match &e.msg {
            Message::PartitionRequest(r) => {
                matches!(r.body.clone().decode::<Request>(), Ok(Request::Vote { req, .. }) if req.gtid == g)
            }
            _ => false,
        });
        self.net = rest;
        mine
    }

    fn replies_for(&self, g: Gtid) -> Vec<&Reply> {
        self.replies.iter().filter(|(_, r)| r.gtid == g).map(|(_, r)| r).collect()
    }

    fn records(&self, i: usize) -> Vec<Record> {
        self.parts[i].log.iter().map(|b| decode_record("granola", b).unwrap()).collect()
    }

    /// Crash and restart partition `i`: its state rebuilt from its log alone.
    fn restart(&mut self, i: usize) {
        let part = &mut self.parts[i];
        part.p = GranolaPartition::new(self.locking, None).with_force_prepare_after(self.force_after);
        part.store = MvccStore::new();
        for rec in &part.log {
            part.p.apply_bytes(rec, &mut part.store).unwrap();
        }
    }

    fn tick(&mut self, i: usize) {
        self.parts[i].clock += RESEND_AFTER.as_nanos() as u64;
        self.with(i, |part, ctx| part.on_tick(ctx));
    }
}

fn gtid(seq: u64) -> Gtid {
    Gtid { txn: TxnId { node: NodeId(0), epoch: 1, seq }, attempt: 0 }
}

fn req(seq: u64, class: OneRoundClass, high_ts: u64, fragments: Vec<FragmentCall>, catalog: &Catalog) -> TxnRequest {
    let fragments = fragments.into_iter().map(|c| (c.partition(catalog, 2).unwrap(), c)).collect();
    TxnRequest { gtid: gtid(seq), class, coord: COORD, high_ts: Timestamp(high_ts), fragments }
}

fn put(k: i64) -> FragmentCall {
    FragmentCall::new("kv_put_frag", "kv", vec![Value::Int(k)], vec![Value::Int(k), Value::Bytes(vec![k as u8].into())])
}
fn get(k: i64) -> FragmentCall {
    FragmentCall::new("kv_get_frag", "kv", vec![Value::Int(k)], vec![Value::Int(k)])
}
fn debit(id: i64, amt: i64) -> FragmentCall {
    FragmentCall::new("bank_debit", "accounts", vec![Value::Int(id)], vec![Value::Int(id), Value::Int(amt)])
}
fn credit(id: i64, amt: i64) -> FragmentCall {
    FragmentCall::new("bank_credit", "accounts", vec![Value::Int(id)], vec![Value::Int(id), Value::Int(amt)])
}

impl H {
    fn single(&mut self, seq: u64, high_ts: u64, f: FragmentCall) -> TxnRequest {
        let r = req(seq, OneRoundClass::Single, high_ts, vec![f], &self.catalog);
        self.send(&r);
        r
    }
    fn open_accounts(&mut self, ids: &[i64]) {
        for (i, &id) in ids.iter().enumerate() {
            let f = FragmentCall::new(
                "bank_open_frag",
                "accounts",
                vec![Value::Int(id)],
                vec![Value::Int(id), Value::Int(INITIAL)],
            );
            self.single(9_000 + i as u64, 0, f);
        }
    }
    fn balance(&self, id: i64) -> i64 {
        let t = self.catalog.table_by_name("accounts").unwrap().id;
        let key = litmus_core::Key::encode(&[Value::Int(id)]).unwrap();
        let store = &self.parts[id as usize % 2].store;
        store.latest(t, &key).and_then(|(_, r)| r.cloned()).unwrap()[1].as_int().unwrap()
    }
    fn coordinated_transfer(&mut self, seq: u64, from: i64, to: i64, amt: i64) -> TxnRequest {
        let f = vec![debit(from, amt), credit(to, amt)];
        req(seq, OneRoundClass::Coordinated, 0, f, &self.catalog)
    }
    fn committed_ts(&self, g: Gtid) -> Vec<Timestamp> {
        self.replies_for(g).iter().filter(|r| matches!(r.outcome, Outcome::Committed { .. })).map(|r| r.ts).collect()
    }
}

#[test]
fn timestamps_4_3_proposals_exceed_high_ts_the_last_executed_and_the_clock() {
    let mut h = H::new(2);
    let a = h.single(1, 50_000, put(0));
    let ts_a = h.committed_ts(a.gtid)[0];
    assert!(ts_a > Timestamp(50_000), "above the client's highTS: {ts_a}");
    // A later request with highTS 0 and a clock far behind still lands after the last executed.
    h.parts[0].clock = 10;
    let b = h.single(2, 0, put(2));
    assert!(h.committed_ts(b.gtid)[0] > ts_a, "above the last executed timestamp");
    h.parts[0].clock = 1_000_000;
    let c = h.single(3, 0, put(4));
    assert!(h.committed_ts(c.gtid)[0] >= Timestamp(1_000_000), "at least the clock");
}

#[test]
fn single_partition_4_3_writes_are_logged_and_read_only_skips_the_log() {
    let mut h = H::new(2);
    let w = h.single(1, 0, put(0));
    assert!(matches!(h.records(0).as_slice(), [Record::Executed { .. }]), "{:?}", h.records(0));
    let r = h.single(2, 0, get(0));
    assert_eq!(h.records(0).len(), 1, "a read-only single-partition transaction writes no log record");
    let got = &h.replies_for(r.gtid)[0].outcome;
    assert_eq!(got, &Outcome::Committed { values: vec![(0, vec![Value::Bytes(vec![0u8].into())])] });
    // A retransmitted request is answered from the log, not run again.
    h.send(&w);
    assert_eq!(h.records(0).len(), 1);
    assert_eq!(h.replies_for(w.gtid).len(), 2);
    assert_eq!(h.replies_for(w.gtid)[0], h.replies_for(w.gtid)[1]);
}

#[test]
fn single_partition_4_3_a_retransmitted_read_only_request_is_answered_not_run_again() {
    // Found by `litmus bench tpcc --engine granola` at full scale: a read-only transaction (the
    // consistency check, ~100 ms) was resent by the client proxy every RESEND_AFTER while it
    // ran; with no log record to answer from, every resend ran it again, the copies delayed
    // the next check, which was resent more often, and the partition never caught up.
    let mut h = H::new(2);
    h.single(1, 0, put(0));
    let r = h.single(2, 0, get(0));
    let first = h.replies_for(r.gtid)[0].clone();
    // The row changes; a retransmission of the read gets the first answer, not a new run.
    let f =
        FragmentCall::new("kv_put_frag", "kv", vec![Value::Int(0)], vec![Value::Int(0), Value::Bytes(vec![9].into())]);
    h.single(3, 0, f);
    h.send(&r);
    let replies = h.replies_for(r.gtid);
    assert_eq!(replies.len(), 2, "answered");
    assert_eq!(replies[1], &first, "from the remembered reply: a re-run would read the new value");
    // The check above sees a re-run: a partition that forgot the reply answers the new value.
    h.parts[0].p.forget_read_only_replies();
    h.send(&r);
    assert_ne!(h.replies_for(r.gtid)[2], &first, "a re-run is visible to the check");
}

#[test]
fn granola_locking_6_independent_transactions_prepare_under_locks_and_singles_check_them() {
    // The paper's "Granola (locking)" (§6): locking mode always (§4.5), with no coordinated
    // transaction in sight.
    let mut h = H::locking(2);
    let i = req(1, OneRoundClass::Independent, 0, vec![put(0), put(1)], &h.catalog);
    h.send(&i);
    assert!(
        matches!(h.records(0).as_slice(), [Record::Accept { prepared: Some(_), .. }]),
        "prepared (writes and locks logged), not queued: {:?}",
        h.records(0)
    );
    let votes = h.take_votes(i.gtid);
    // A single-partition transaction on a locked key: CONFLICT at once; on another key: runs at
    // once (no timestamp queue).
    let s1 = h.single(2, 0, put(0));
    assert_eq!(h.replies_for(s1.gtid)[0].outcome, Outcome::Conflict);
    let s2 = h.single(3, 0, put(2));
    assert_eq!(h.committed_ts(s2.gtid).len(), 1, "no conflict, no wait");
    // A second independent transaction on a locked key votes CONFLICT (never ABORT).
    let i2 = req(4, OneRoundClass::Independent, 0, vec![put(0), put(3)], &h.catalog);
    h.send(&i2);
    h.settle();
    assert!(h.replies_for(i2.gtid).iter().any(|r| r.outcome == Outcome::Conflict));
    for v in votes {
        h.deliver(v);
    }
    assert_eq!(h.committed_ts(i.gtid).len(), 2, "commits once the votes are in");
    // Still locking mode after the last prepared transaction ended: a new independent
    // transaction is prepared again, and a restart (recovery from the log) keeps the mode.
    h.restart(0);
    let i3 = req(5, OneRoundClass::Independent, 0, vec![put(4), put(5)], &h.catalog);
    h.send_to(0, &i3);
    assert!(matches!(h.records(0).last(), Some(Record::Accept { prepared: Some(_), .. })));
}

#[test]
fn granola_locking_6_the_same_requests_in_timestamp_mode_queue_instead() {
    // The contrast that makes the test above mean something: `granola` queues in timestamp
    // order where `granola-locking` prepares and answers CONFLICT.
    let mut h = H::new(2);
    let i = req(1, OneRoundClass::Independent, 0, vec![put(0), put(1)], &h.catalog);
    h.send(&i);
    assert!(matches!(h.records(0).as_slice(), [Record::Accept { prepared: None, .. }]));
    let s1 = h.single(2, 0, put(0));
    assert!(h.replies_for(s1.gtid).is_empty(), "queued behind the independent transaction, no CONFLICT");
    h.settle();
    assert_eq!(h.committed_ts(s1.gtid).len(), 1);
}

#[test]
fn independent_4_4_votes_go_directly_to_the_other_participants_and_the_highest_wins() {
    let mut h = H::new(2);
    h.parts[1].clock = 9_000; // partition 1's clock is ahead: its proposal is the final timestamp
    let r = req(1, OneRoundClass::Independent, 0, vec![put(0), put(1)], &h.catalog);
    h.send(&r);
    assert!(h.replies.is_empty(), "no reply before the votes are exchanged");
    assert!(
        matches!(h.records(0).as_slice(), [Record::Accept { vote: Vote::Commit, .. }]),
        "request + proposal logged"
    );
    let votes = h.take_votes(r.gtid);
    assert_eq!(votes.len(), 2);
    for v in &votes {
        assert!(matches!((v.from, v.to), (Addr::Partition(a), Addr::Partition(b)) if a != b), "partition to partition");
    }
    for v in votes {
        h.deliver(v);
    }
    let ts = h.committed_ts(r.gtid);
    assert_eq!(ts.len(), 2);
    assert_eq!(ts[0], ts[1], "every participant executes at one timestamp");
    assert!(ts[0] >= Timestamp(9_000), "the highest vote: {}", ts[0]);
}

#[test]
fn independent_4_4_execution_is_in_timestamp_order_under_out_of_order_votes() {
    let mut h = H::new(2);
    // I1 and I2 at the same clock: equal proposals, ordered by TID (§4.1).
    let i1 = req(1, OneRoundClass::Independent, 0, vec![put(0), put(1)], &h.catalog);
    let i2 = req(2, OneRoundClass::Independent, 0, vec![put(2), put(3)], &h.catalog);
    h.send(&i1);
    h.send(&i2);
    let (v1, v2) = (h.take_votes(i1.gtid), h.take_votes(i2.gtid));
    // A single-partition transaction keeps flowing (accepted, timestamped) while votes are out,
    // and waits behind the lower timestamps.
    let s = h.single(3, 0, put(4));
    assert!(h.replies.is_empty(), "nothing runs before I1, whose votes are missing");
    // I2's votes arrive first: it has its final timestamp, but I1 (lower TID, same timestamp)
    // goes first.
    for v in v2 {
        h.deliver(v);
    }
    assert!(h.replies_for(i2.gtid).is_empty(), "I2 waits for I1");
    for v in v1 {
        h.deliver(v);
    }
    let order: Vec<Gtid> = h.replies.iter().filter(|(p, _)| p.0 == 0).map(|(_, r)| r.gtid).collect();
    assert_eq!(order, vec![i1.gtid, i2.gtid, s.gtid], "timestamp order, ties by TID");
    let (t1, t2, t3) = (h.committed_ts(i1.gtid)[0], h.committed_ts(i2.gtid)[0], h.committed_ts(s.gtid)[0]);
    assert!(t1 == t2 && (t2, i2.gtid) < (t3, s.gtid), "{t1} {t2} {t3}: (timestamp, TID) order");
}

#[test]
fn high_ts_4_2_the_client_proxy_sends_the_highest_timestamp_it_saw() {
    let catalog = {
        let mut c = builtin::catalog();
        c.merge(&builtin::bank::catalog());
        c
    };
    let mut coord = GranolaCoordinator::default();
    let mut parts = CoordCtxParts::new(1);
    let mut ctx = parts.ctx(COORD, 2, &catalog);
    let plan = |k| OneRoundPlan { class: OneRoundClass::Single, fragments: vec![(PartitionId(0), put(k))] };
    let t1 = gtid(1).txn;
    coord.one_round(t1, plan(0), &mut ctx);
    let reply = Reply { gtid: gtid(1), ts: Timestamp(777), outcome: Outcome::Committed { values: vec![] } };
    coord.on_reply(PartitionId(0), Payload::new(reply), &mut ctx);
    assert_eq!(coord.high_ts(), Timestamp(777));
    coord.one_round(gtid(2).txn, plan(2), &mut ctx);
    let sent: Vec<TxnRequest> = parts
        .out
        .send
        .iter()
        .filter_map(|e| match &e.msg {
            Message::PartitionRequest(r) => match r.body.clone().decode::<Request>() {
                Ok(Request::Txn(t)) => Some(t),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].high_ts, Timestamp(0));
    assert_eq!(sent[1].high_ts, Timestamp(777), "the next request carries highTS");
    // ... and a partition proposes above it.
    let mut h = H::new(2);
    h.send(&sent[1]);
    assert!(h.committed_ts(sent[1].gtid)[0] > Timestamp(777));
}

#[test]
fn conflict_4_2_the_backoff_bound_doubles_with_each_attempt_up_to_the_maximum() {
    use super::coordinator::backoff_cap;
    let caps: Vec<Duration> = (0..8).map(backoff_cap).collect();
    assert_eq!(caps[0], CONFLICT_BACKOFF_MAX / 16);
    for w in caps.windows(2) {
        assert!(w[1] == (w[0] * 2).min(CONFLICT_BACKOFF_MAX), "{caps:?}: exponential, bounded");
    }
    assert_eq!(backoff_cap(u32::MAX), CONFLICT_BACKOFF_MAX, "no overflow, bounded");
}

#[test]
fn conflict_4_2_the_client_proxy_retries_with_a_new_tid_after_a_backoff() {
    let catalog = builtin::catalog();
    let mut coord = GranolaCoordinator::default();
    let plan = OneRoundPlan { class: OneRoundClass::Single, fragments: vec![(PartitionId(0), put(0))] };
    let mut parts = CoordCtxParts::new(1);
    let mut ctx = parts.ctx(COORD, 2, &catalog);
    coord.one_round(gtid(1).txn, plan, &mut ctx);
    let conflict = Reply { gtid: gtid(1), ts: Timestamp(5), outcome: Outcome::Conflict };
    coord.on_reply(PartitionId(0), Payload::new(conflict), &mut ctx);
    // Counted for the bench's report (the client never sees the CONFLICT).
    assert_eq!(ctx.out.counts, vec![super::coordinator::COUNT_CONFLICT_RETRIES]);
    ctx.out.send.clear();
    coord.on_tick(&mut ctx);
    assert!(ctx.out.send.is_empty(), "no retry before the backoff");
    ctx.now = Time(CONFLICT_BACKOFF_MAX.as_nanos() as u64);
    coord.on_tick(&mut ctx);
    let retry = match &ctx.out.send[..] {
        [e] => match &e.msg {
            Message::PartitionRequest(r) => r.body.clone().decode::<Request>().unwrap(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    assert!(matches!(retry, Request::Txn(t) if t.gtid == Gtid { txn: gtid(1).txn, attempt: 1 }), "a new TID");
    assert!(parts.events.is_empty(), "the client is not answered: the transaction is retried");
}

#[test]
fn coordinated_4_5_an_abort_vote_aborts_at_every_participant() {
    let mut h = H::new(2);
    h.open_accounts(&[0, 1]);
    let r = h.coordinated_transfer(1, 0, 1, INITIAL + 1); // an overdraft: partition 0 votes ABORT
    h.send(&r);
    h.settle();
    let replies = h.replies_for(r.gtid);
    assert_eq!(replies.len(), 2);
    assert!(replies.iter().all(|r| matches!(r.outcome, Outcome::Aborted(Error::UserAbort(_)))), "{replies:?}");
    assert_eq!([h.balance(0), h.balance(1)], [INITIAL, INITIAL], "nothing applied");
    let ok = h.coordinated_transfer(2, 0, 1, 30);
    h.send(&ok);
    h.settle();
    assert_eq!(h.committed_ts(ok.gtid).len(), 2);
    assert_eq!([h.balance(0), h.balance(1)], [INITIAL - 30, INITIAL + 30]);
}

#[test]
fn locking_mode_4_5_conflicts_answer_conflict_and_others_run() {
    let mut h = H::new(2);
    h.open_accounts(&[0, 1, 2]);
    let c = h.coordinated_transfer(1, 0, 1, 10);
    h.send(&c);
    let votes = h.take_votes(c.gtid); // C holds its locks at both partitions
                                      // A single-partition transaction on a locked row: CONFLICT; on another row: runs at once.
    let s1 = h.single(2, 0, credit(0, 5));
    assert_eq!(h.replies_for(s1.gtid)[0].outcome, Outcome::Conflict);
    let s2 = h.single(3, 0, credit(2, 5));
    assert_eq!(h.committed_ts(s2.gtid).len(), 1, "no conflict, no wait");
    // A coordinated transaction that conflicts votes CONFLICT.
    let c2 = h.coordinated_transfer(4, 1, 0, 1);
    h.send(&c2);
    h.settle();
    assert!(h.replies_for(c2.gtid).iter().any(|r| r.outcome == Outcome::Conflict));
    for v in votes {
        h.deliver(v);
    }
    assert_eq!(h.committed_ts(c.gtid).len(), 2);
    assert_eq!([h.balance(0), h.balance(1), h.balance(2)], [INITIAL - 10, INITIAL + 10, INITIAL + 5]);
}

#[test]
fn switching_modes_4_5_both_ways() {
    let mut h = H::new(2);
    h.open_accounts(&[0, 1]);
    // Timestamp mode: an independent transaction queued with its votes out.
    let i = req(1, OneRoundClass::Independent, 0, vec![put(0), put(1)], &h.catalog);
    h.send(&i);
    let iv = h.take_votes(i.gtid);
    // A coordinated transaction arrives: it waits for the queue to drain (no vote yet) ...
    let c = h.coordinated_transfer(2, 0, 1, 10);
    h.send(&c);
    assert!(h.take_votes(c.gtid).iter().all(|v| v.from != Addr::Partition(PartitionId(0))), "partition 0 waits");
    // ... and new transactions are turned away meanwhile, so the queue drains.
    let s = h.single(3, 0, put(2));
    assert_eq!(h.replies_for(s.gtid)[0].outcome, Outcome::Conflict);
    for v in iv {
        h.deliver(v);
    }
    assert_eq!(h.committed_ts(i.gtid).len(), 2);
    // The queue drained: partition 0 prepared C and voted; it is now in locking mode, where an
    // independent transaction is prepared (locks, logged prepared state), not queued.
    let cv = h.take_votes(c.gtid);
    assert!(cv.iter().any(|v| v.from == Addr::Partition(PartitionId(0))), "partition 0 voted once drained");
    let i2 = req(4, OneRoundClass::Independent, 0, vec![put(4), put(5)], &h.catalog);
    h.send_to(0, &i2);
    assert!(matches!(h.records(0).last(), Some(Record::Accept { prepared: Some(_), .. })), "prepared in locking mode");
    // C commits: back to timestamp mode; I2 drops its locks and runs in timestamp order.
    for v in cv {
        h.deliver(v);
    }
    assert_eq!(h.committed_ts(c.gtid).len(), 2);
    let s2 = h.single(5, 0, credit(0, 1));
    assert!(h.replies_for(s2.gtid).is_empty(), "timestamp mode again: queued behind I2, whose votes are out");
    h.send_to(1, &i2);
    h.settle();
    assert_eq!(h.committed_ts(i2.gtid).len(), 2);
    assert_eq!(h.committed_ts(s2.gtid).len(), 1);
    assert_eq!([h.balance(0), h.balance(1)], [INITIAL - 10 + 1, INITIAL + 10]);
}

#[test]
fn recovery_5_2_a_restarted_partition_rebuilds_from_its_log_and_resends_its_votes() {
    let mut h = H::new(2);
    h.open_accounts(&[0, 1]);
    let i = req(1, OneRoundClass::Independent, 0, vec![put(0), put(1)], &h.catalog);
    h.send(&i);
    let c = h.coordinated_transfer(2, 0, 1, 10);
    // Partition 1's vote for I is lost; partition 0 crashes before learning anything.
    let lost = h.take_votes(i.gtid);
    h.net.extend(lost.into_iter().filter(|v| v.to == Addr::Partition(PartitionId(1))));
    h.settle();
    assert_eq!(h.committed_ts(i.gtid).len(), 1, "partition 1 executed; partition 0 waits for a vote");
    h.restart(0);
    // Partition 0 recovered the vote it sent (its Accept record) and asks for the missing one.
    h.tick(0);
    h.settle();
    assert_eq!(h.committed_ts(i.gtid).len(), 2, "a finished participant answers with its logged vote");
    // A coordinated transaction prepared at partition 0 survives a restart with its locks.
    h.send(&c);
    let cv = h.take_votes(c.gtid);
    h.restart(0);
    let s = h.single(3, 0, credit(0, 1));
    assert_eq!(h.replies_for(s.gtid)[0].outcome, Outcome::Conflict, "the locks came back from the log");
    for v in cv {
        h.deliver(v);
    }
    h.settle();
    assert_eq!(h.committed_ts(c.gtid).len(), 2);
    assert_eq!([h.balance(0), h.balance(1)], [INITIAL - 10, INITIAL + 10]);
}

#[test]
fn recovery_5_4_a_participant_whose_request_was_lost_accepts_it_from_a_peers_vote() {
    let mut h = H::new(2);
    let i = req(1, OneRoundClass::Independent, 0, vec![put(0), put(1)], &h.catalog);
    h.send_to(0, &i); // the request to partition 1 is lost (the client proxy crashed)
    h.settle();
    assert_eq!(h.committed_ts(i.gtid).len(), 2, "the vote carried the request");
    // Duplicated votes and requests change nothing.
    h.tick(0);
    h.tick(1);
    h.send(&i);
    h.settle();
    assert_eq!(h.committed_ts(i.gtid).len(), 4, "retransmissions answered from the log");
    let executed = (0..2).map(|p| h.records(p).iter().filter(|r| matches!(r, Record::Executed { .. })).count());
    assert_eq!(executed.collect::<Vec<_>>(), vec![1, 1], "run once at each participant");
}

/// §4.6 against a serial model: random single-partition, independent and coordinated
/// transactions over three partitions (each fragment reads a key and writes a new value),
/// messages delivered in random order, duplicated, partitions restarted from their logs, the
/// client proxy retransmitting. Then every transaction committed at all of its participants or
/// at none, and running the committed ones serially in (final timestamp, TID) order gives the
/// same reads and the same final rows.
#[test]
fn serializability_4_6_matches_a_serial_model_in_final_timestamp_order() {
    use rand::Rng;
    let (mut total_committed, mut forced) = (0, 0);
    for seed in 0..40u64 {
        let mut h = H::new(3);
        h.registry.register_fragment(
            "rw",
            vec![litmus_core::ColumnType::Int, litmus_core::ColumnType::Bytes],
            |ctx: litmus_protocol::procedure::Ctx, args: Vec<Value>| async move {
                let old = ctx.read("kv", &args[..1]).await?.map_or(Value::Null, |r| r[1].clone());
                ctx.write("kv", args).await?;
                Ok(vec![old])
            },
        );
        // Its keys are its arguments': `forcePrepare` (§5.4, which the restarts and lost
        // messages below set off) locks keys, not the table, so forced transactions that do not
        // conflict run out of timestamp order.
        h.registry.declare_keys_from_args(&["rw"]);
        if seed % 2 == 1 {
            h.force_after(Some(RESEND_AFTER * 2)); // impatient: forcePrepare after two resends
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let keys = 30i64;
        let mut reqs: Vec<TxnRequest> = Vec::new();
        for seq in 1..=60u64 {
            let n = rng.gen_range(1..=3usize);
            let mut ks: Vec<i64> = (0..keys).collect();
            let mut frags = Vec::new();
            let mut parts = std::collections::BTreeSet::new();
            while frags.len() < n {
                let k = ks.remove(rng.gen_range(0..ks.len()));
                if parts.insert(k % 3) {
                    let v = Value::Bytes(format!("{seq}").into_bytes().into());
                    frags.push(FragmentCall::new("rw", "kv", vec![Value::Int(k)], vec![Value::Int(k), v]));
                }
            }
            let class = match (frags.len(), rng.gen_range(0..3)) {
                (1, _) => OneRoundClass::Single,
                (_, 0) => OneRoundClass::Coordinated,
                _ => OneRoundClass::Independent,
            };
            let fragments = frags.into_iter().map(|c| (c.partition(&h.catalog, 3).unwrap(), c)).collect();
            let high_ts = Timestamp(rng.gen_range(0..3_000));
            reqs.push(TxnRequest { gtid: gtid(seq), class, coord: COORD, high_ts, fragments });
        }
        let ended = |h: &H, r: &TxnRequest| {
            let from: std::collections::BTreeSet<PartitionId> =
                h.replies.iter().filter(|(_, x)| x.gtid == r.gtid).map(|(p, _)| *p).collect();
            from.len() == r.participants().len()
        };
        let mut issued = 0;
        for round in 0..20_000 {
            if issued < reqs.len() && rng.gen_bool(0.3) {
                let r = reqs[issued].clone();
                issued += 1;
                for p in r.participants() {
                    if rng.gen_bool(0.9) {
                        h.send_to(p.0 as usize, &r);
                    }
                }
            }
            if !h.net.is_empty() && rng.gen_bool(0.8) {
                let env = h.net.remove(rng.gen_range(0..h.net.len()));
                if rng.gen_bool(0.05) {
                    h.net.push(env.clone()); // duplicated
                }
                if rng.gen_bool(0.95) {
                    h.deliver(env); // else lost
                }
            }
            for p in 0..3 {
                h.parts[p].clock += rng.gen_range(0..50);
            }
            if rng.gen_bool(0.003) {
                h.restart(rng.gen_range(0..3));
            }
            if round % 50 == 0 {
                // The client proxy retransmits; partitions tick (resending votes).
                for r in reqs[..issued].iter().filter(|r| !ended(&h, r)).cloned().collect::<Vec<_>>() {
                    for p in r.participants() {
                        h.send_to(p.0 as usize, &r);
                    }
                }
                for p in 0..3 {
                    h.tick(p);
                }
            }
            if issued == reqs.len() && h.net.is_empty() && reqs.iter().all(|r| ended(&h, r)) {
                break;
            }
        }
        let mut committed = Vec::new();
        for r in &reqs {
            assert!(ended(&h, r), "seed {seed}: {:?} never ended everywhere", r.gtid);
            // The first reply from each participant (later ones are retransmissions).
            let mut first: BTreeMap<PartitionId, &Reply> = BTreeMap::new();
            for (p, x) in h.replies.iter().filter(|(_, x)| x.gtid == r.gtid) {
                first.entry(*p).or_insert(x);
            }
            let commits = first.values().filter(|x| matches!(x.outcome, Outcome::Committed { .. })).count();
            assert!(commits == 0 || commits == first.len(), "seed {seed}: {:?} not atomic: {first:?}", r.gtid);
            if commits > 0 {
                let ts: std::collections::BTreeSet<Timestamp> = first.values().map(|x| x.ts).collect();
                assert_eq!(ts.len(), 1, "seed {seed}: {:?} at several timestamps", r.gtid);
                let mut values: Vec<(u32, Vec<Value>)> = Vec::new();
                for x in first.values() {
                    if let Outcome::Committed { values: v } = &x.outcome {
                        values.extend(v.iter().cloned());
                    }
                }
                values.sort_by_key(|(i, _)| *i);
                committed.push(((*ts.iter().next().unwrap(), r.gtid), r, values));
            }
        }
        forced +=
            (0..3).map(|p| h.records(p).iter().filter(|r| matches!(r, Record::Forced { .. })).count()).sum::<usize>();
        // CONFLICTs are not retried here (the client proxy would): about half commit.
        assert!(committed.len() >= 8, "seed {seed}: only {} committed", committed.len());
        total_committed += committed.len();
        committed.sort_by_key(|(k, _, _)| *k);
        let mut model: BTreeMap<i64, Value> = BTreeMap::new();
        for (_, r, values) in &committed {
            for (i, (_, call)) in r.fragments.iter().enumerate() {
                let k = call.args[0].as_int().unwrap();
                let old = model.insert(k, call.args[1].clone()).unwrap_or(Value::Null);
                assert_eq!(values[i], (i as u32, vec![old]), "seed {seed}: {:?} read out of serial order", r.gtid);
            }
        }
        let t = h.catalog.table_by_name("kv").unwrap().id;
        for k in 0..keys {
            let key = litmus_core::Key::encode(&[Value::Int(k)]).unwrap();
            let row = h.parts[k as usize % 3].store.latest(t, &key).and_then(|(_, r)| r.cloned());
            assert_eq!(row.map(|r| r[1].clone()), model.get(&k).cloned(), "seed {seed}: key {k}");
        }
    }
    assert!(total_committed > 40 * 60 / 3, "only {total_committed} committed over 40 seeds");
    assert!(forced > 0, "no seed set off forcePrepare (§5.4): the model did not check it");
}

// ---------------------------------------------------------------- §5.4 forcePrepare

/// A kv key stored at partition `p` of `n`.
fn key_at(h: &H, p: u32, skip: usize) -> i64 {
    let n = h.parts.len() as u32;
    let at = |k: &i64| put(*k).partition(&h.catalog, n).unwrap() == PartitionId(p);
    (0..1_000).filter(at).nth(skip).unwrap()
}

fn req_n(h: &H, seq: u64, class: OneRoundClass, fragments: Vec<FragmentCall>) -> TxnRequest {
    let n = h.parts.len() as u32;
    let fragments = fragments.into_iter().map(|c| (c.partition(&h.catalog, n).unwrap(), c)).collect();
    TxnRequest { gtid: gtid(seq), class, coord: COORD, high_ts: Timestamp(0), fragments }
}

/// Partition 1 has failed: it never got I1 (on partitions 0 and 1), and partition 0's vote to
/// it is held back. Behind I1 at partition 0 wait I2 (with partition 2, keys of its own, all
/// votes in), I3 (with partition 2, I1's key at partition 0, all votes in) and a
/// single-partition S. Returns (I1, I2, I3, S, the held-back vote, I1's key at partition 0).
fn stuck_head(force: Option<Duration>) -> (H, [TxnRequest; 4], Vec<Envelope>, i64) {
    let mut h = H::new(3);
    h.force_after(force);
    let (a, b) = (key_at(&h, 0, 0), key_at(&h, 0, 1));
    let (c, d) = (key_at(&h, 1, 0), key_at(&h, 2, 0));
    let i1 = req_n(&h, 1, OneRoundClass::Independent, vec![put(a), put(c)]);
    let i2 = req_n(&h, 2, OneRoundClass::Independent, vec![put(b), put(d)]);
    let i3 = req_n(&h, 3, OneRoundClass::Independent, vec![put(a), put(key_at(&h, 2, 1))]);
    h.send_to(0, &i1);
    let held = h.take_votes(i1.gtid);
    h.send(&i2);
    h.send(&i3);
    let s = req_n(&h, 4, OneRoundClass::Single, vec![put(key_at(&h, 0, 2))]);
    h.send(&s);
    h.settle();
    assert!(h.replies.iter().all(|(p, _)| p.0 == 2), "partition 0 waits for I1's missing vote");
    (h, [i1, i2, i3, s], held, a)
}

impl H {
    /// Partitions whose `forcePrepare` waits `after` (`None`: off).
    fn force_after(&mut self, after: Option<Duration>) {
        self.force_after = after;
        for part in &mut self.parts {
            part.p = GranolaPartition::new(self.locking, None).with_force_prepare_after(after);
        }
    }

    /// Ticks partition `i` for `d` of its clock (a tick every [`RESEND_AFTER`]), dropping the
    /// votes it resends to partition 1 (down).
    fn tick_for(&mut self, i: usize, d: Duration) {
        for _ in 0..d.as_nanos() / RESEND_AFTER.as_nanos() {
            self.tick(i);
            self.net.retain(|e| e.to != Addr::Partition(PartitionId(1)));
            self.settle();
        }
    }
    fn outcomes_at(&self, p: u32, g: Gtid) -> Vec<Outcome> {
        self.replies.iter().filter(|(q, r)| q.0 == p && r.gtid == g).map(|(_, r)| r.outcome.clone()).collect()
    }
}

#[test]
fn force_prepare_5_4_a_blocked_transaction_that_conflicts_with_nothing_ahead_runs() {
    let (mut h, [_, i2, i3, s], _, a) = stuck_head(Some(FORCE_PREPARE_AFTER));
    h.tick_for(0, FORCE_PREPARE_AFTER / 2);
    assert!(h.outcomes_at(0, i2.gtid).is_empty(), "before the timeout, I2 waits behind I1 (§4.4)");
    h.tick_for(0, FORCE_PREPARE_AFTER);
    assert!(
        matches!(h.outcomes_at(0, i2.gtid).as_slice(), [Outcome::Committed { .. }]),
        "blocked I2 locks nothing I1 or I3 hold: it runs"
    );
    assert_eq!(h.outcomes_at(0, s.gtid), vec![Outcome::Conflict], "the queued single-partition one is refused");
    assert!(h.outcomes_at(0, i3.gtid).is_empty(), "I3 writes I1's key and may follow it in the serial order");
    let forced = h.records(0).iter().filter(|r| matches!(r, Record::Forced { .. })).count();
    assert_eq!(forced, 3, "I1, I2, I3 forcePrepared, logged");
    // Locking mode (§4.5) until the forced transactions end: I1's key is locked, others free.
    let blocked = h.single(10, 0, put(a));
    assert_eq!(h.outcomes_at(0, blocked.gtid), vec![Outcome::Conflict]);
    let free = req_n(&h, 11, OneRoundClass::Single, vec![put(key_at(&h, 0, 3))]);
    h.send(&free);
    assert!(matches!(h.outcomes_at(0, free.gtid).as_slice(), [Outcome::Committed { .. }]), "runs at once");
}

#[test]
fn force_prepare_5_4_when_the_failed_participant_returns_conflicting_ones_run_in_timestamp_order() {
    let (mut h, [i1, i2, i3, _], held, _) = stuck_head(Some(FORCE_PREPARE_AFTER));
    h.tick_for(0, FORCE_PREPARE_AFTER * 2);
    // Partition 1 returns: the vote held back reaches it; it accepts I1 from it and answers.
    for v in held {
        h.deliver(v);
    }
    h.settle();
    let order: Vec<Gtid> = h.replies.iter().filter(|(p, _)| p.0 == 0).map(|(_, r)| r.gtid).collect();
    let pos = |g: Gtid| order.iter().position(|x| *x == g).unwrap();
    assert!(pos(i2.gtid) < pos(i1.gtid) && pos(i1.gtid) < pos(i3.gtid), "{order:?}");
    let (t1, t3) = (h.committed_ts(i1.gtid), h.committed_ts(i3.gtid));
    assert!(t1.len() == 2 && t1[0] == t1[1], "I1 committed at both participants at one timestamp");
    assert!((t1[0], i1.gtid) < (t3[0], i3.gtid), "I3 after I1, as their timestamps say");
    // The forced transactions ended: timestamp mode again, a new independent one queues.
    let i5 = req_n(&h, 5, OneRoundClass::Independent, vec![put(key_at(&h, 0, 4)), put(key_at(&h, 2, 4))]);
    h.send(&i5);
    assert!(matches!(h.records(0).last(), Some(Record::Accept { prepared: None, .. })), "not prepared");
    h.settle();
    assert_eq!(h.committed_ts(i5.gtid).len(), 2);
}

#[test]
fn force_prepare_5_4_disabled_the_blocked_transactions_wait_for_the_failed_participant() {
    let (mut h, [_, i2, i3, s], _, _) = stuck_head(None);
    h.tick_for(0, FORCE_PREPARE_AFTER * 10);
    for g in [i2.gtid, i3.gtid, s.gtid] {
        assert!(h.outcomes_at(0, g).is_empty(), "{g:?}: no progress without forcePrepare");
    }
}

#[test]
fn force_prepare_5_4_forced_locks_come_back_from_the_log_after_a_restart() {
    let (mut h, [i1, _, i3, _], held, a) = stuck_head(Some(FORCE_PREPARE_AFTER));
    h.tick_for(0, FORCE_PREPARE_AFTER * 2);
    h.restart(0);
    let blocked = h.single(10, 0, put(a));
    assert_eq!(h.outcomes_at(0, blocked.gtid), vec![Outcome::Conflict], "I1's forced lock survived");
    // Votes lost in the crash are solicited again (§5.2); partition 1 returns; all ends.
    for v in held {
        h.deliver(v);
    }
    h.tick(0);
    h.tick(2);
    h.settle();
    assert_eq!(h.committed_ts(i1.gtid).len(), 2);
    assert_eq!(h.committed_ts(i3.gtid).len(), 2);
}
