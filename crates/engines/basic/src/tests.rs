//! Tests named after the paper's rules (BASIC §IV-B..E), Table IV as an exact schedule, Tables
//! II and III as schedules `base` exhibits and `basic` forbids, and a property test against a
//! serial model in timestamp order (§IV-E acyclicity).

use super::coordinator::BasicCoordinator;
use super::messages::{PrepareOutcome, ReadOutcome, Record, Reply, Request, WriteId};
use super::partition::BasicPartition;
use super::IN_DOUBT_AFTER;
use litmus_core::formula::ColumnUpdate;
use litmus_core::{
    Catalog, Column, ColumnType, Decimal, Formula, Isolation, Key, NodeId, PartitionId, Partitioning, TableId,
    TableSchema, Time, Timestamp, TxnId, Value,
};
use litmus_protocol::engine::{CoordCtxParts, CoordinatorEngine, PartCtx, PartCtxParts, PartitionEngine, TxnOptions};
use litmus_protocol::message::{Addr, Message, Payload, SubOpId};
use litmus_protocol::op::{OpKind, PartOp, PartResult};
use litmus_storage::mvcc::MvccStore;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const T: TableId = TableId(0);
const COORD: Addr = Addr::Coordinator(NodeId(0));

fn catalog() -> Catalog {
    let mut c = Catalog::new();
    let cols = vec![Column::new("k", ColumnType::Int), Column::new("v", ColumnType::Decimal)];
    c.add(TableSchema::new("item", cols, &["k"], Partitioning::KeyPrefix { prefix_len: 1 }));
    c
}

fn dec(x: i64) -> Value {
    Value::Decimal(Decimal::from_int(x).unwrap())
}

fn key() -> Key {
    Key::ints(&[1])
}

fn txn(seq: u64) -> TxnId {
    TxnId { node: NodeId(0), epoch: 1, seq }
}

fn wid(seq: u64) -> WriteId {
    WriteId { txn: txn(seq), attempt: 0 }
}

fn sub(seq: u64, part: u32) -> SubOpId {
    SubOpId { txn: txn(seq), op: 0, part: PartitionId(part) }
}

fn update(f: Formula) -> PartOp {
    PartOp { table: T, kind: OpKind::Update { key: key(), updates: vec![ColumnUpdate::new(1, f)] } }
}

fn read_op() -> PartOp {
    PartOp { table: T, kind: OpKind::Read { key: key(), cols: litmus_protocol::op::ColMask::ALL } }
}

/// One partition of three driven by hand: the engine, its context's parts (its store in
/// `ctx.store`), and every record it logged.
struct Part {
    engine: BasicPartition,
    ctx: PartCtxParts,
    log: Vec<Vec<u8>>,
}

impl Part {
    fn new(id: u32) -> Part {
        let ctx = PartCtxParts::new(PartitionId(id), 3, catalog(), id as u64);
        Part { engine: BasicPartition::default(), ctx, log: Vec::new() }
    }

    fn with_ctx(&mut self, f: impl FnOnce(&mut BasicPartition, &mut PartCtx)) -> Vec<(Addr, Message)> {
        let out = self.ctx.run(&mut self.engine, f);
        self.log.extend(out.persist);
        out.send.into_iter().map(|e| (e.to, e.msg)).collect()
    }

    /// Delivers `req` from `from`; returns the replies to the coordinator (decoded).
    fn deliver(&mut self, from: Addr, req: Request) -> Vec<Reply> {
        let sent = self.with_ctx(|e, ctx| e.on_request(from, Payload::new(req), ctx));
        replies(sent)
    }

    fn tick(&mut self, now: Time) -> Vec<(Addr, Message)> {
        self.ctx.now = now;
        self.with_ctx(|e, ctx| e.on_tick(ctx))
    }

    fn prepare(&mut self, seq: u64, ts: u64, op: PartOp) -> PrepareOutcome {
        let req = Request::Prepare {
            id: sub(seq, self.ctx.me.0),
            wid: wid(seq),
            ts: Timestamp(ts),
            op,
            peers: vec![PartitionId(0), PartitionId(1), PartitionId(2)],
        };
        match &self.deliver(COORD, req)[..] {
            [Reply::Prepared { outcome, .. }] => outcome.clone(),
            other => panic!("prepare answered {other:?}"),
        }
    }

    fn force(&mut self, seq: u64) {
        let r = self.deliver(COORD, Request::Force { wid: wid(seq) });
        assert!(r.iter().any(|r| matches!(r, Reply::Forced { .. })), "{r:?}");
    }

    /// A read at `ts`: `Some(value)` when answered, `None` when it waits.
    fn read(&mut self, seq: u64, ts: u64) -> Option<Value> {
        let req = Request::Read { id: sub(seq, self.ctx.me.0), ts: Timestamp(ts), own: wid(seq), op: read_op() };
        read_values(self.deliver(COORD, req)).pop()
    }

    /// A read at `ts`, as answered (it must not wait).
    fn read_outcome(&mut self, seq: u64, ts: u64) -> ReadOutcome {
        let req = Request::Read { id: sub(seq, self.ctx.me.0), ts: Timestamp(ts), own: wid(seq), op: read_op() };
        match &self.deliver(COORD, req)[..] {
            [Reply::Read { outcome, .. }] => outcome.clone(),
            other => panic!("read answered {other:?}"),
        }
    }

    /// The value with every forced formula applied (what a read above everything would see).
    fn committed(&self) -> Value {
        let base = self.ctx.store.latest(T, &key()).and_then(|(_, r)| r.cloned());
        let item = self.engine.item(T, &key());
        let row = item.value_at(base, Timestamp::MAX, wid(u64::MAX), false);
        row.expect("row exists")[1].clone()
    }

    fn list(&self) -> Vec<(u64, bool)> {
        self.engine.item(T, &key()).list.iter().map(|e| (e.ts.0, e.forced)).collect()
    }

    /// Loads `v` at timestamp 1 (a write placed and forced).
    fn load(&mut self, v: Value) {
        let op = PartOp { table: T, kind: OpKind::Write { key: key(), row: vec![Value::Int(1), v].into() } };
        assert_eq!(self.prepare(0, 1, op), PrepareOutcome::Placed);
        self.force(0);
    }
}

fn replies(sent: Vec<(Addr, Message)>) -> Vec<Reply> {
    sent.into_iter()
        .filter_map(|(_, m)| match m {
            Message::PartitionReply(r) => r.body.decode::<Reply>().ok(),
            _ => None,
        })
        .collect()
}

fn read_values(replies: Vec<Reply>) -> Vec<Value> {
    replies
        .into_iter()
        .filter_map(|r| match r {
            Reply::Read { outcome: ReadOutcome::Done(Ok(PartResult::Row(Some(row)))), .. } => Some(row[1].clone()),
            Reply::Read { outcome, .. } => panic!("read answered {outcome:?}"),
            _ => None,
        })
        .collect()
}

fn three(v: i64) -> [Part; 3] {
    let mut ps = [Part::new(0), Part::new(1), Part::new(2)];
    for p in &mut ps {
        p.load(dec(v));
    }
    ps
}

/// Table IV, exactly: a(20) multiplies by 1.2 (ts 201), b(10) adds 10 (ts 202), check reads
/// (ts 203) on L/S/H = P1/P2/P3, all initially 100.
#[test]
fn table_iv_dynamic_timestamp_ordering_schedule() {
    let [mut l, mut s, mut h] = three(100);
    let a = || update(Formula::Multiply(Value::Decimal(Decimal::from_cents(120))));
    let b = || update(Formula::Add(dec(10)));
    // t1: W2 places a's formulas on L and S.
    assert_eq!(l.prepare(201, 201, a()), PrepareOutcome::Placed);
    assert_eq!(s.prepare(201, 201, a()), PrepareOutcome::Placed);
    assert_eq!((l.list(), s.list(), h.list()), (vec![(201, false)], vec![(201, false)], vec![]));
    assert_eq!([l.committed(), s.committed(), h.committed()], [dec(100), dec(100), dec(100)]);
    // t2: W2 places b everywhere; no read_by / read_b4 fact: F force-writes b without waiting
    // for the older a (dynamic ordering).
    for p in [&mut l, &mut s, &mut h] {
        assert_eq!(p.prepare(202, 202, b()), PrepareOutcome::Placed);
        p.force(202);
    }
    assert_eq!([l.committed(), s.committed(), h.committed()], [dec(110), dec(110), dec(110)]);
    assert_eq!(l.list(), vec![(201, false), (202, true)], "b waits in the list behind the pending a");
    assert_eq!(h.list(), vec![], "b folded on H");
    // t3: R on L and S applies a's pending formula: read_by, suspended; R on H returns at once.
    assert_eq!(l.read(203, 203), None);
    assert_eq!(s.read(203, 203), None);
    assert_eq!(h.read(203, 203), Some(dec(110)));
    assert!(l.engine.item(T, &key()).list[0].read_by.contains(&sub(203, 0)), "read_by(W_a1, L, R_c1)");
    assert_eq!(h.engine.item(T, &key()).lrt, Timestamp(203), "lrt(H, N3) = 203");
    // t4: W1 revokes W_a3 (201 < lrt 203); V revokes a on L and S; check resumes with 110s.
    assert!(matches!(h.prepare(201, 201, a()), PrepareOutcome::Revoked { bound } if bound >= Timestamp(203)));
    let rl = read_values(l.deliver(COORD, Request::Revoke { wid: wid(201) }));
    let rs = read_values(s.deliver(COORD, Request::Revoke { wid: wid(201) }));
    assert_eq!((rl, rs), (vec![dec(110)], vec![dec(110)]), "check returns 110/110/110");
    assert_eq!((l.list(), s.list()), (vec![], vec![]), "a's formulas and facts removed; b folded");
    // a retried under a new timestamp: every replica multiplies after the add (132), never
    // diverging (Example 3's non-commutative pair).
    let a2 = WriteId { txn: txn(201), attempt: 1 };
    for p in [&mut l, &mut s, &mut h] {
        let req = Request::Prepare { id: sub(201, p.ctx.me.0), wid: a2, ts: Timestamp(204), op: a(), peers: vec![] };
        assert!(matches!(&p.deliver(COORD, req)[..], [Reply::Prepared { outcome: PrepareOutcome::Placed, .. }]));
        p.deliver(COORD, Request::Force { wid: a2 });
    }
    assert_eq!([l.committed(), s.committed(), h.committed()], [dec(132), dec(132), dec(132)]);
}

#[test]
fn rule_r_read_applies_older_formulas_in_timestamp_order_and_not_newer() {
    let mut p = Part::new(0);
    p.load(dec(100));
    // Reads at 15 and 25 arrive while the older formulas are pending (they wait); the newer
    // formulas are placed after they arrived.
    assert_eq!(p.prepare(10, 10, update(Formula::Add(dec(10)))), PrepareOutcome::Placed);
    assert_eq!(p.read(15, 15), None);
    assert_eq!(p.prepare(20, 20, update(Formula::Multiply(dec(2)))), PrepareOutcome::Placed);
    assert_eq!(p.read(25, 25), None);
    assert_eq!(p.prepare(30, 30, update(Formula::Add(dec(1)))), PrepareOutcome::Placed);
    // Forced out of order (30 before 20): values still follow timestamp order.
    p.force(30);
    let r15 = read_values(p.deliver(COORD, Request::Force { wid: wid(10) }));
    assert_eq!(r15, vec![dec(110)], "an older read still sees the older value");
    let r25 = read_values(p.deliver(COORD, Request::Force { wid: wid(20) }));
    assert_eq!(r25, vec![dec(220)], "(100 + 10) * 2, not + 1");
    assert_eq!(p.read(35, 35), Some(dec(221)));
}

#[test]
fn rule_r_read_waits_for_pending_older_formula_and_skips_it_once_revoked() {
    let mut p = Part::new(0);
    p.load(dec(100));
    assert_eq!(p.prepare(10, 10, update(Formula::Add(dec(5)))), PrepareOutcome::Placed);
    assert_eq!(p.read(20, 20), None, "waits for the pending older formula");
    assert_eq!(p.engine.parked_reads(), 1);
    let r = read_values(p.deliver(COORD, Request::Revoke { wid: wid(10) }));
    assert_eq!(r, vec![dec(100)], "the revoked formula is removed before the read returns");
    assert_eq!(p.read(21, 21), Some(dec(100)));
    // Forced instead: the waiting read sees it.
    assert_eq!(p.prepare(30, 30, update(Formula::Add(dec(5)))), PrepareOutcome::Placed);
    assert_eq!(p.read(40, 40), None);
    let r = read_values(p.deliver(COORD, Request::Force { wid: wid(30) }));
    assert_eq!(r, vec![dec(105)]);
}

/// Seed 110 of `litmus sim --engine basic --workload acked --faults`, at the partition: a
/// write at ts 30 is placed (PREPARE answered); its coordinator logs the decision and
/// acknowledges the client, FORCE-WRITE still in flight (or lost and resent 200 ms later). A
/// read that began after the acknowledgement, on a coordinator whose clock is behind, arrives
/// with ts 20: answered at 20 it returns the value without the write (the key's absence) — an
/// acknowledged write lost to a later read. It must run again above the write instead.
#[test]
fn rule_r_real_time_a_read_arriving_below_a_placed_write_runs_again_above_it() {
    let put = |v: i64| PartOp { table: T, kind: OpKind::Write { key: key(), row: vec![Value::Int(1), dec(v)].into() } };
    let insert =
        |v: i64| PartOp { table: T, kind: OpKind::Insert { key: key(), row: vec![Value::Int(1), dec(v)].into() } };
    // A new key (the acked workload's): the write pending above the read.
    let mut p = Part::new(0);
    assert_eq!(p.prepare(30, 30, put(7)), PrepareOutcome::Placed);
    assert_eq!(p.read_outcome(20, 20), ReadOutcome::TooOld { bound: Timestamp(30) }, "not the key's absence");
    // An insert reads the key's absence too: revoked, retried above the write.
    assert_eq!(p.prepare(21, 21, insert(8)), PrepareOutcome::Revoked { bound: Timestamp(30) });
    p.force(30);
    assert_eq!(p.read(31, 31), Some(dec(7)), "the run again above it sees the write");
    // An existing key, overwritten: pending, then forced and folded, above the read.
    let mut p = Part::new(1);
    p.load(dec(100));
    assert_eq!(p.prepare(30, 30, put(7)), PrepareOutcome::Placed);
    assert_eq!(p.read_outcome(20, 20), ReadOutcome::TooOld { bound: Timestamp(30) }, "not 100");
    p.force(30);
    assert_eq!(p.read_outcome(25, 25), ReadOutcome::TooOld { bound: Timestamp(30) }, "not 100");
    assert_eq!(p.read(31, 31), Some(dec(7)));
    // A write placed after an older read arrived (and waits) is no reason to run it again:
    // that read began before the write was acknowledged (read_b4, subsumed).
    assert_eq!(p.prepare(40, 40, update(Formula::Add(dec(1)))), PrepareOutcome::Placed);
    assert_eq!(p.read(45, 45), None, "waits for 40");
    assert_eq!(p.prepare(50, 50, update(Formula::Add(dec(2)))), PrepareOutcome::Placed);
    p.force(50);
    assert_eq!(read_values(p.deliver(COORD, Request::Force { wid: wid(40) })), vec![dec(8)]);
}

/// The keys of each scan answered in `replies` (`Err(bound)`: refused as too old).
fn scanned(replies: Vec<Reply>) -> Vec<Result<Vec<Key>, u64>> {
    replies
        .into_iter()
        .filter_map(|r| match r {
            Reply::Read { outcome: ReadOutcome::Done(Ok(PartResult::Rows(rows))), .. } => {
                Some(Ok(rows.into_iter().map(|(key, _)| key).collect()))
            }
            Reply::Read { outcome: ReadOutcome::TooOld { bound }, .. } => Some(Err(bound.0)),
            Reply::Read { outcome, .. } => panic!("scan answered {outcome:?}"),
            _ => None,
        })
        .collect()
}

/// Rule R for a range read: a scan at `TS` returns exactly the rows visible at `TS` (each key's
/// newest version at or below it, with the older formulas applied), as a point read of each key
/// would. A row deleted above `TS` (forced, folded, its item forgotten by GC) is in the
/// snapshot, and counts toward the limit; a row deleted at or below it is not, and does not.
/// Arriving below that deletion, the scan is refused like a point read (real-time order);
/// resumed after waiting, it returns the row. (A scan must not skip every key whose *newest*
/// stored version is a deletion, whatever its timestamp.)
#[test]
fn rule_r_a_range_read_sees_the_snapshot_at_its_timestamp() {
    let k = |i: i64| Key::ints(&[i]);
    let put = |i: i64| PartOp { table: T, kind: OpKind::Write { key: k(i), row: vec![Value::Int(i), dec(i)].into() } };
    let del = |i: i64| PartOp { table: T, kind: OpKind::Delete { key: k(i) } };
    let write = |p: &mut Part, ts: u64, op: PartOp| assert_eq!(p.prepare(ts, ts, op), PrepareOutcome::Placed);
    let scan = |p: &mut Part, ts: u64, limit: u32| {
        let op = PartOp { table: T, kind: OpKind::Scan { start: k(0), end: None, limit } };
        scanned(p.deliver(COORD, Request::Read { id: sub(ts, 0), ts: Timestamp(ts), own: wid(ts), op }))
    };
    // Forced (and so folded) writes; a tick forgets the items (only the store keeps the keys).
    let forced = |p: &mut Part, ts: u64, op: PartOp| {
        write(p, ts, op);
        p.force(ts);
        p.tick(Time::from_millis(ts));
    };
    let mut p = Part::new(0);
    for (ts, i) in [(10, 1), (11, 2), (12, 4)] {
        forced(&mut p, ts, put(i));
    }
    forced(&mut p, 30, del(1));
    assert_eq!(p.engine.item(T, &k(1)), Default::default(), "forgotten");
    assert_eq!(p.ctx.store.versions(T, &k(1)).map(|(t, _)| t.0).collect::<Vec<_>>(), vec![30, 10]);
    // Arriving at 20, below the deletion, a scan is refused like a point read of key 1 (real
    // time order), not answered with the snapshot without key 1.
    assert_eq!(scan(&mut p, 20, 10), vec![Err(30)], "key 1 existed at 20");
    // Above it, key 1 is gone, and does not use up the limit.
    assert_eq!(scan(&mut p, 40, 10), vec![Ok(vec![k(2), k(4)])]);
    assert_eq!(scan(&mut p, 41, 1), vec![Ok(vec![k(2)])], "a key deleted at or below TS is skipped");
    // A scan at 50 waits for the pending write of key 3 at 45; key 2 is deleted at 60 while it
    // waits: resumed, the scan at 50 still sees key 2.
    write(&mut p, 45, put(3));
    assert_eq!(scan(&mut p, 50, 10), vec![], "waits for 45");
    forced(&mut p, 60, del(2));
    let resumed = scanned(p.deliver(COORD, Request::Force { wid: wid(45) }));
    assert_eq!(resumed, vec![Ok(vec![k(2), k(3), k(4)])], "key 2 was deleted at 60, above 50");
    // A key deleted above TS counts toward the limit: a scan at 70 with limit 1 waits for the
    // pending deletion of key 0 at 65, key 3 is deleted at 80 meanwhile: key 3, not key 4.
    write(&mut p, 65, del(0));
    assert_eq!(scan(&mut p, 70, 1), vec![], "waits for 65");
    forced(&mut p, 80, del(3));
    let resumed = scanned(p.deliver(COORD, Request::Force { wid: wid(65) }));
    assert_eq!(resumed, vec![Ok(vec![k(3)])], "key 3 is the first row at 70");
    assert_eq!(scan(&mut p, 90, 10), vec![Ok(vec![k(4)])]);
}

/// One coordinator (node 0 of 3 partitions) with transaction 1 begun, serializable, and one
/// operation issued to partition 1: what the coordinator-side rule tests share.
struct CoordRig {
    cat: Catalog,
    parts: CoordCtxParts,
    c: BasicCoordinator,
    t: TxnId,
    id: SubOpId,
}

impl CoordRig {
    fn issuing(op: PartOp) -> CoordRig {
        let opts = TxnOptions {
            isolation: Isolation::Serializable,
            base: false,
            procedure: None,
            first_attempt: Time::ZERO,
            coordination: None,
        };
        let (t, id) = (txn(1), SubOpId { txn: txn(1), op: 0, part: PartitionId(1) });
        let mut rig = CoordRig { cat: catalog(), parts: CoordCtxParts::new(1), c: BasicCoordinator::default(), t, id };
        rig.with(Time::ZERO, |c, ctx| {
            c.begin(t, &opts, ctx);
            c.issue(id, op, ctx);
        });
        rig
    }

    /// Runs `f` on the coordinator at `now`.
    fn with(&mut self, now: Time, f: impl FnOnce(&mut BasicCoordinator, &mut litmus_protocol::engine::CoordCtx)) {
        let mut ctx = self.parts.ctx(COORD, 3, &self.cat);
        ctx.now = now;
        f(&mut self.c, &mut ctx);
    }

    /// The partition requests sent since the last call (taken).
    fn take_requests(&mut self) -> Vec<Request> {
        let sent = std::mem::take(&mut self.parts.out.send);
        sent.into_iter()
            .filter_map(|e| match e.msg {
                Message::PartitionRequest(r) => r.body.decode::<Request>().ok(),
                _ => None,
            })
            .collect()
    }
}

/// The coordinator's half of the rule: a read refused below a newer write, before anything was
/// answered at the operation's timestamp, runs again under a new timestamp above the bound
/// (the procedure sees no error); a late answer at the old timestamp is ignored.
#[test]
fn rule_r_real_time_a_refused_read_runs_again_under_a_timestamp_above_the_bound() {
    let mut rig = CoordRig::issuing(read_op());
    let read_ts = |reqs: Vec<Request>| -> Vec<Timestamp> {
        reqs.into_iter()
            .filter_map(|r| match r {
                Request::Read { ts, .. } => Some(ts),
                _ => None,
            })
            .collect()
    };
    let old = read_ts(rig.take_requests())[0];
    let bound = super::ts_plus_micros(old, 5_000);
    let id = rig.id;
    let reply = |ts, outcome| Payload::new(Reply::Read { id, ts, outcome });
    rig.with(Time::ZERO, |c, ctx| c.on_reply(PartitionId(1), reply(old, ReadOutcome::TooOld { bound }), ctx));
    let again = read_ts(rig.take_requests());
    assert!(matches!(&again[..], [ts] if *ts > bound), "run again above the bound: {again:?} vs {bound}");
    assert!(rig.parts.events.is_empty(), "the procedure sees no error: {:?}", rig.parts.events);
    let done = ReadOutcome::Done(Ok(PartResult::Row(None)));
    rig.with(Time::ZERO, |c, ctx| c.on_reply(PartitionId(1), reply(old, done.clone()), ctx));
    assert!(rig.parts.events.is_empty(), "a late answer at the old timestamp is ignored");
    rig.with(Time::ZERO, |c, ctx| c.on_reply(PartitionId(1), reply(again[0], done), ctx));
    let events = &rig.parts.events;
    assert!(matches!(&events[..], [litmus_protocol::engine::Event::OpDone { result: Ok(_), .. }]), "{events:?}");
}

#[test]
fn rule_w1_revokes_write_below_lrt() {
    let mut p = Part::new(0);
    p.load(dec(100));
    assert_eq!(p.read(50, 50), Some(dec(100)));
    let out = p.prepare(40, 40, update(Formula::Add(dec(1))));
    assert!(matches!(out, PrepareOutcome::Revoked { bound } if bound == Timestamp(50)), "{out:?}");
    assert_eq!(p.list(), vec![], "nothing placed");
    assert_eq!(p.prepare(60, 60, update(Formula::Add(dec(1)))), PrepareOutcome::Placed, "above lrt: W2");
}

#[test]
fn rule_w2_places_formula_in_timestamp_order_and_an_older_read_never_sees_it() {
    let mut p = Part::new(0);
    p.load(dec(100));
    assert_eq!(p.prepare(20, 20, update(Formula::Add(dec(2)))), PrepareOutcome::Placed);
    assert_eq!(p.read(25, 25), None, "an older read arrives and waits for 20");
    assert_eq!(p.prepare(40, 40, update(Formula::Add(dec(4)))), PrepareOutcome::Placed);
    assert_eq!(p.prepare(30, 30, update(Formula::Add(dec(3)))), PrepareOutcome::Placed);
    assert_eq!(p.list(), vec![(20, false), (30, false), (40, false)]);
    // read_b4's purpose: the later writes are forced while the older read waits here; the
    // older read still sees the value before them.
    p.force(40);
    p.force(30);
    let r = read_values(p.deliver(COORD, Request::Force { wid: wid(20) }));
    assert_eq!(r, vec![dec(102)]);
}

#[test]
fn rule_v_revoke_removes_formulas_and_facts_and_tombstones_unknown_operations() {
    let mut p = Part::new(0);
    p.load(dec(100));
    assert_eq!(p.prepare(10, 10, update(Formula::Add(dec(5)))), PrepareOutcome::Placed);
    p.deliver(COORD, Request::Revoke { wid: wid(10) });
    assert_eq!((p.list(), p.engine.pending_writes()), (vec![], 0));
    // A REVOKE that overtook its PREPARE: the late PREPARE is refused.
    p.deliver(COORD, Request::Revoke { wid: wid(11) });
    assert!(matches!(p.prepare(11, 11, update(Formula::Add(dec(5)))), PrepareOutcome::Revoked { .. }));
    assert_eq!(p.committed(), dec(100));
}

#[test]
fn rule_f_force_write_makes_the_formula_the_value() {
    let mut p = Part::new(0);
    p.load(dec(100));
    assert_eq!(p.prepare(10, 10, update(Formula::Add(dec(5)))), PrepareOutcome::Placed);
    assert_eq!(p.committed(), dec(100));
    p.force(10);
    assert_eq!(p.committed(), dec(105));
    assert_eq!(p.list(), vec![], "folded into a stored version");
    assert_eq!(p.ctx.store.latest(T, &key()).map(|(ts, _)| ts), Some(Timestamp(10)));
}

#[test]
fn rule_dynamic_ordering_forces_a_later_write_without_waiting_for_an_earlier_pending_one() {
    let mut p = Part::new(0);
    p.load(dec(100));
    assert_eq!(p.prepare(10, 10, update(Formula::Add(dec(1)))), PrepareOutcome::Placed);
    assert_eq!(p.prepare(20, 20, update(Formula::Add(dec(2)))), PrepareOutcome::Placed);
    p.force(20);
    assert_eq!(p.list(), vec![(10, false), (20, true)]);
    assert_eq!(p.committed(), dec(102), "the later write took effect first");
    p.force(10);
    assert_eq!((p.committed(), p.list()), (dec(103), vec![]));
}

#[test]
fn rule_timeout_prepare_phase_discards_an_operation_never_prepared_here() {
    let mut p = Part::new(1);
    p.load(dec(100));
    let sent = p.with_ctx(|e, ctx| {
        e.on_request(
            Addr::Partition(PartitionId(0)),
            Payload::new(Request::PeerQuery { wid: wid(7), ts: Timestamp(7) }),
            ctx,
        )
    });
    let answer: Vec<Request> = sent
        .into_iter()
        .filter_map(|(to, m)| match m {
            Message::PartitionRequest(r) if to == Addr::Partition(PartitionId(0)) => r.body.decode().ok(),
            _ => None,
        })
        .collect();
    assert_eq!(answer, vec![Request::Outcome { wid: wid(7), forced: false }]);
    assert!(matches!(p.prepare(7, 7, update(Formula::Add(dec(1)))), PrepareOutcome::Revoked { .. }), "discarded");
}

#[test]
fn rule_timeout_force_phase_asks_coordinator_and_peers_and_follows_a_forced_peer() {
    let mut p = Part::new(0);
    p.load(dec(100));
    p.tick(Time::from_millis(1));
    assert_eq!(p.prepare(10, 10, update(Formula::Add(dec(5)))), PrepareOutcome::Placed);
    assert!(p.tick(Time::from_millis(2)).is_empty(), "not in doubt yet");
    let sent = p.tick(Time::from_millis(2) + IN_DOUBT_AFTER);
    let asked_coord = replies(sent.clone()).contains(&Reply::Query { wid: wid(10) });
    let peers: Vec<Addr> =
        sent.iter().filter(|(_, m)| matches!(m, Message::PartitionRequest(_))).map(|(a, _)| *a).collect();
    assert!(asked_coord, "asks the coordinator");
    assert_eq!(peers, vec![Addr::Partition(PartitionId(1)), Addr::Partition(PartitionId(2))]);
    // A peer says it force-wrote: so does this partition.
    p.deliver(Addr::Partition(PartitionId(1)), Request::Outcome { wid: wid(10), forced: true });
    assert_eq!(p.committed(), dec(105));
}

#[test]
fn rule_timeout_coordinator_aborts_unilaterally_when_prepare_replies_time_out() {
    let mut rig = CoordRig::issuing(update(Formula::Add(dec(1))));
    let t = rig.t;
    rig.with(Time::ZERO + super::PREPARE_TIMEOUT, |c, ctx| {
        c.on_tick(ctx);
        c.commit(t, ctx);
    });
    let revokes = rig.take_requests().into_iter().filter(|r| matches!(r, Request::Revoke { .. })).count();
    assert_eq!(revokes, 1, "REVOKE sent to the silent participant");
    let failed =
        rig.parts.events.iter().any(|e| matches!(e, litmus_protocol::engine::Event::TxnDone { result: Err(_), .. }));
    assert!(failed, "the operation failed: {:?}", rig.parts.events);
}

#[test]
fn gc_prunes_versions_no_read_needs_and_old_reads_run_again() {
    let mut p = Part::new(0);
    p.load(dec(100));
    let lag = super::FOLD_LAG_US << super::TS_NODE_BITS;
    for (i, ts) in [10, 20, lag + 100, 2 * lag + 100].into_iter().enumerate() {
        assert_eq!(p.prepare(ts, ts, update(Formula::Add(dec(1)))), PrepareOutcome::Placed, "write {i}");
        p.force(ts);
    }
    let versions: Vec<u64> = p.ctx.store.versions(T, &key()).map(|(t, _)| t.0).collect();
    assert_eq!(versions, vec![2 * lag + 100, lag + 100], "older versions pruned");
    let req = Request::Read { id: sub(5, 0), ts: Timestamp(15), own: wid(5), op: read_op() };
    assert!(matches!(&p.deliver(COORD, req)[..], [Reply::Read { outcome: ReadOutcome::TooOld { .. }, .. }]));
}

/// Rules R and W1 (§IV-B) across GC of a deleted key ([`Record::Forget`]): once its deletion is
/// behind the fold horizon the key leaves the store with its item; a read below the deletion
/// is refused (the key may have had a row then: R must not answer "no row"), one above it
/// finds no row, a write below it is revoked (W1), and the log replays to the same store and,
/// after a restart, to the same refusal.
#[test]
fn rule_r_and_w1_hold_below_a_deleted_key_that_gc_forgot() {
    let mut p = Part::new(0);
    p.load(dec(100));
    let lag = super::FOLD_LAG_US << super::TS_NODE_BITS;
    let delete = PartOp { table: T, kind: OpKind::Delete { key: key() } };
    assert_eq!(p.prepare(2, 1_000, delete), PrepareOutcome::Placed);
    p.force(2);
    // Time passes: a write of another key far above raises what the partition has seen.
    let other = Key::ints(&[2]);
    let put = PartOp { table: T, kind: OpKind::Write { key: other.clone(), row: vec![Value::Int(2), dec(1)].into() } };
    assert_eq!(p.prepare(3, 3 * lag, put), PrepareOutcome::Placed);
    p.force(3);
    p.tick(Time::from_millis(1));
    assert_eq!(p.ctx.store.versions(T, &key()).count(), 0, "the deleted key left the store");
    assert!(p.engine.item(T, &key()).list.is_empty());
    assert!(
        matches!(p.read_outcome(4, 500), ReadOutcome::TooOld { bound } if bound >= Timestamp(1_000)),
        "a read below the deletion may have seen the row: refused"
    );
    let above = Request::Read { id: sub(5, 0), ts: Timestamp(3 * lag + 10), own: wid(5), op: read_op() };
    assert!(matches!(
        &p.deliver(COORD, above)[..],
        [Reply::Read { outcome: ReadOutcome::Done(Ok(PartResult::Row(None))), .. }]
    ));
    let insert = PartOp { table: T, kind: OpKind::Insert { key: key(), row: vec![Value::Int(1), dec(7)].into() } };
    assert!(matches!(p.prepare(6, 900, insert), PrepareOutcome::Revoked { .. }), "W1: below the deletion");
    let mut fresh = BasicPartition::default();
    let mut store = MvccStore::new();
    for r in &p.log {
        fresh.apply_bytes(r, &mut store).unwrap();
    }
    assert_eq!(store.encode_snapshot(), p.ctx.store.encode_snapshot());
    // Restarted from the log, and from a snapshot (the read floor is not in it: it starts at
    // the W1 floor the Forget raised).
    let mut from_log = Part::new(0);
    (from_log.engine, from_log.ctx.store) = (fresh, store);
    assert!(matches!(from_log.read_outcome(7, 500), ReadOutcome::TooOld { .. }), "restarted from the log");
    let mut from_snapshot = Part::new(0);
    from_snapshot.engine.decode_state(&p.engine.encode_state()).unwrap();
    from_snapshot.ctx.store = p.ctx.store.clone();
    assert!(matches!(from_snapshot.read_outcome(8, 500), ReadOutcome::TooOld { .. }), "restarted from a snapshot");
}

/// The partition is a deterministic function of its log: replaying the records into a fresh
/// partition rebuilds the same store and lists.
#[test]
fn replaying_the_log_rebuilds_the_same_partition() {
    let [mut l, _, _] = three(100);
    assert_eq!(l.prepare(201, 201, update(Formula::Multiply(dec(2)))), PrepareOutcome::Placed);
    assert_eq!(l.prepare(202, 202, update(Formula::Add(dec(10)))), PrepareOutcome::Placed);
    l.force(202);
    let mut fresh = BasicPartition::default();
    let mut store = MvccStore::new();
    for r in &l.log {
        fresh.apply_bytes(r, &mut store).unwrap();
    }
    assert_eq!(fresh.item(T, &key()), l.engine.item(T, &key()));
    assert_eq!(store.encode_snapshot(), l.ctx.store.encode_snapshot());
    let records: Vec<Record> = l.log.iter().map(|r| postcard::from_bytes(r).unwrap()).collect();
    assert!(records.iter().any(|r| matches!(r, Record::Prepare { .. })));
}

// ---------------------------------------------------------------------------------------------
// Tables II and III: schedules `base` exhibits and `basic` forbids.

/// `base`'s partition (the `nocc` machinery) loaded with `v`, then `arrivals` applied in the
/// order they arrive; the value a read finds.
fn base_arrivals(v: i64, arrivals: &[Formula]) -> Value {
    use litmus_nocc::{NoccPartition, Request as BaseRequest};
    let mut p = Part::new(0);
    let mut engine = NoccPartition::default();
    let mut send = |p: &mut Part, op: PartOp| {
        let request = Payload::new(BaseRequest::Op { id: sub(1, 0), op });
        p.ctx.run(&mut engine, |e, ctx| e.on_request(COORD, request, ctx));
    };
    send(&mut p, PartOp { table: T, kind: OpKind::Write { key: key(), row: vec![Value::Int(1), dec(v)].into() } });
    for f in arrivals {
        send(&mut p, update(f.clone()));
    }
    p.ctx.store.latest(T, &key()).and_then(|(_, r)| r.cloned()).expect("row")[1].clone()
}

/// Example 3 / Table III under `base` (apply on arrival): a(20) reaches R3 after b(10); the
/// replicas diverge for good (130, 130, 132) and the check at t3 reads (130, 130, 110).
#[test]
fn table_iii_base_exhibits_diverged_replicas_basic_forbids_them() {
    let mul = Formula::Multiply(Value::Decimal(Decimal::from_cents(120)));
    let add = Formula::Add(dec(10));
    // base (its partition engine): each replica applies formulas in arrival order.
    let base = [
        base_arrivals(100, &[mul.clone(), add.clone()]),
        base_arrivals(100, &[mul.clone(), add.clone()]),
        base_arrivals(100, &[add.clone(), mul.clone()]),
    ];
    assert_eq!(base, [dec(130), dec(130), dec(132)], "Table III: base leaves the replicas diverged");
    // basic: the same arrival order (a before b on R1, R2; b before a on R3).
    let [mut r1, mut r2, mut r3] = three(100);
    for p in [&mut r1, &mut r2] {
        assert_eq!(p.prepare(201, 201, update(mul.clone())), PrepareOutcome::Placed);
        assert_eq!(p.prepare(202, 202, update(add.clone())), PrepareOutcome::Placed);
    }
    assert_eq!(r3.prepare(202, 202, update(add.clone())), PrepareOutcome::Placed);
    assert_eq!(r3.prepare(201, 201, update(mul.clone())), PrepareOutcome::Placed);
    for p in [&mut r1, &mut r2, &mut r3] {
        p.force(202);
        p.force(201);
    }
    let basic = [r1.committed(), r2.committed(), r3.committed()];
    assert_eq!(basic, [dec(130), dec(130), dec(130)], "timestamp order on every replica");
}

/// Example 2 / Table II: b(10) reaches S before the check but H after it. `base` answers the
/// check (20, 10, 20) — L − S ≠ H; `basic` makes the check wait for b on S and H alike.
#[test]
fn table_ii_base_exhibits_a_fractured_read_basic_forbids_it() {
    // base (its partition engine): the check at t3 finds L = 20 (a), S = 10 (b), H = 20 (a;
    // b's −10 not there yet).
    let checked = [
        base_arrivals(0, &[Formula::Add(dec(20))]),
        base_arrivals(0, &[Formula::Add(dec(10))]),
        base_arrivals(0, &[Formula::Add(dec(20))]),
    ];
    assert_eq!(checked, [dec(20), dec(10), dec(20)]);
    assert_ne!(dec(20 - 10), checked[2], "Table II: base's first check reads an inconsistent state (L − S ≠ H)");
    // basic: a (ts 1) forced on L and H; b (ts 2) placed on S and H, forced on S only so far.
    let [mut pl, mut ps, mut ph] = three(0);
    for p in [&mut pl, &mut ph] {
        assert_eq!(p.prepare(1, 2, update(Formula::Add(dec(20)))), PrepareOutcome::Placed);
        p.force(1);
    }
    assert_eq!(ps.prepare(2, 3, update(Formula::Add(dec(10)))), PrepareOutcome::Placed);
    assert_eq!(ph.prepare(2, 3, update(Formula::Add(dec(-10)))), PrepareOutcome::Placed);
    ps.force(2);
    let check = [pl.read(3, 4), ps.read(3, 4), ph.read(3, 4)];
    assert_eq!(check, [Some(dec(20)), Some(dec(10)), None], "H waits for b (read_by)");
    let rh = read_values(ph.deliver(COORD, Request::Force { wid: wid(2) }));
    assert_eq!(rh, vec![dec(10)], "L − S = H: 20 − 10 = 10");
}

// ---------------------------------------------------------------------------------------------
// Property: any delivery order of any operations gives reads equal to the serial model in
// timestamp order (§IV-E: every DMG edge goes from a smaller to a larger timestamp).

#[derive(Clone, Debug)]
struct GenOp {
    write: bool,
    parts: u8,
}

/// Runs `ops` (op `k` has timestamp `ts[k]`) over three partitions, delivering messages in the
/// order `seed` picks; write `k` adds `2^k` to column v. Returns (per read: ts and the value
/// each part saw; the forced writes).
/// Per read: its timestamp and, per part, what it saw (`None`: refused, `TooOld`, to run again
/// above a newer write) and the writes placed there before it arrived; the forced writes; the
/// partitions.
type Schedule = (Vec<(u64, Vec<(Option<i64>, Vec<usize>)>)>, Vec<usize>, [Part; 3]);

fn run_schedule(ops: &[GenOp], ts: &[u64], seed: u64) -> Schedule {
    let mut ps = three(0);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // In flight: (partition, from, request).
    let mut net: Vec<(usize, Request)> = Vec::new();
    let mut prepares: Vec<Vec<Option<bool>>> = vec![vec![]; ops.len()];
    let mut reads: Vec<Vec<Option<i64>>> = vec![vec![]; ops.len()];
    // Per read and part: the writes placed on that part when the read arrived.
    let mut before: Vec<Vec<Vec<usize>>> = vec![vec![vec![]; 3]; ops.len()];
    let mut placed: [Vec<usize>; 3] = Default::default();
    let mut refused = 0;
    let parts_of = |o: &GenOp| (0..3).filter(|p| o.parts & (1 << p) != 0).collect::<Vec<usize>>();
    for (k, o) in ops.iter().enumerate() {
        let seq = 10 + k as u64;
        for p in parts_of(o) {
            let id = sub(seq, p as u32);
            let req = if o.write {
                let f = Formula::Add(Value::Decimal(Decimal::from_int(1 << k).unwrap()));
                Request::Prepare { id, wid: wid(seq), ts: Timestamp(ts[k]), op: update(f), peers: vec![] }
            } else {
                Request::Read { id, ts: Timestamp(ts[k]), own: wid(seq), op: read_op() }
            };
            net.push((p, req));
        }
        prepares[k] = vec![None; 3];
        reads[k] = vec![None; 3];
    }
    let mut forced = Vec::new();
    let mut decided = vec![false; ops.len()];
    while !net.is_empty() {
        let (p, req) = net.swap_remove(rng.gen_range(0..net.len()));
        if let Request::Read { id, .. } = &req {
            before[(id.txn.seq - 10) as usize][p] = placed[p].clone();
        }
        for r in ps[p].deliver(COORD, req) {
            match r {
                Reply::Prepared { id, outcome, .. } => {
                    let k = (id.txn.seq - 10) as usize;
                    prepares[k][p] = Some(matches!(outcome, PrepareOutcome::Placed));
                    if outcome == PrepareOutcome::Placed {
                        placed[p].push(k);
                    }
                    let mine = parts_of(&ops[k]);
                    if !decided[k] && mine.iter().all(|&q| prepares[k][q].is_some()) {
                        decided[k] = true;
                        let ok = mine.iter().all(|&q| prepares[k][q] == Some(true));
                        let w = wid(10 + k as u64);
                        if ok {
                            forced.push(k);
                        }
                        for q in mine {
                            net.push((q, if ok { Request::Force { wid: w } } else { Request::Revoke { wid: w } }));
                        }
                    }
                }
                Reply::Read { id, outcome: ReadOutcome::Done(Ok(PartResult::Row(Some(row)))), .. } => {
                    let k = (id.txn.seq - 10) as usize;
                    let Value::Decimal(d) = row[1] else { panic!("decimal") };
                    reads[k][p] = Some(d.0 / Decimal::from_int(1).unwrap().0);
                }
                Reply::Read { outcome: ReadOutcome::TooOld { bound }, ts, .. } => {
                    assert!(bound > ts, "refused below {bound}, not above {ts}");
                    refused += 1;
                }
                Reply::Read { outcome, .. } => panic!("read answered {outcome:?}"),
                Reply::Forced { .. } | Reply::Query { .. } => {}
            }
        }
    }
    let parts_read = |k: usize| parts_of(&ops[k]).into_iter().filter(|&p| reads[k][p].is_some()).count();
    let answered: usize = (0..ops.len()).filter(|&k| !ops[k].write).map(parts_read).sum();
    let parts: usize = ops.iter().filter(|o| !o.write).map(|o| parts_of(o).len()).sum();
    assert_eq!(answered + refused, parts, "every read answered or refused");
    let done = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| !o.write)
        .map(|(k, o)| (ts[k], parts_of(o).into_iter().map(|p| (reads[k][p], before[k][p].clone())).collect()))
        .collect();
    (done, forced, ps)
}

/// An operation of the scan property on one partition: a put or a deletion of key 0..4, or a
/// scan of every key with a limit.
#[derive(Clone, Debug)]
enum ScanGen {
    Put(i64),
    Delete(i64),
    Scan(u32),
}

/// Each answered scan (its op, and its rows: key and value); the forced writes.
type Scans = (Vec<(usize, Vec<(Key, Value)>)>, Vec<usize>);

/// Runs `ops` (op `k` has timestamp `ts[k]`) on one partition, in the order `seed` picks among
/// arrivals, decisions (force or revoke) of placed writes, and ticks (GC forgets the items of
/// folded keys).
fn run_scans(ops: &[ScanGen], ts: &[u64], seed: u64) -> Scans {
    enum Ev {
        Arrive(usize),
        Decide(usize),
        Tick,
    }
    let mut p = Part::new(0);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut net: Vec<Ev> = (0..ops.len()).map(Ev::Arrive).chain((0..ops.len()).map(|_| Ev::Tick)).collect();
    let (mut forced, mut scans, mut now) = (Vec::new(), Vec::new(), 0);
    let k_of = |seq: u64| (seq - 10) as usize;
    while !net.is_empty() {
        let got = match net.swap_remove(rng.gen_range(0..net.len())) {
            Ev::Arrive(k) => {
                let (seq, t) = (10 + k as u64, Timestamp(ts[k]));
                let (id, wid) = (sub(seq, 0), wid(seq));
                let req = match ops[k] {
                    ScanGen::Put(i) => {
                        let row = vec![Value::Int(i), dec(k as i64)].into();
                        let op = PartOp { table: T, kind: OpKind::Write { key: Key::ints(&[i]), row } };
                        Request::Prepare { id, wid, ts: t, op, peers: vec![] }
                    }
                    ScanGen::Delete(i) => {
                        let op = PartOp { table: T, kind: OpKind::Delete { key: Key::ints(&[i]) } };
                        Request::Prepare { id, wid, ts: t, op, peers: vec![] }
                    }
                    ScanGen::Scan(limit) => {
                        let op = PartOp { table: T, kind: OpKind::Scan { start: Key::ints(&[0]), end: None, limit } };
                        Request::Read { id, ts: t, own: wid, op }
                    }
                };
                p.deliver(COORD, req)
            }
            Ev::Decide(k) => {
                let w = wid(10 + k as u64);
                if rng.gen_bool(0.8) {
                    forced.push(k);
                    p.deliver(COORD, Request::Force { wid: w })
                } else {
                    p.deliver(COORD, Request::Revoke { wid: w })
                }
            }
            Ev::Tick => {
                now += 1;
                replies(p.tick(Time::from_millis(now)))
            }
        };
        for r in got {
            match r {
                Reply::Prepared { id, outcome: PrepareOutcome::Placed, .. } => net.push(Ev::Decide(k_of(id.txn.seq))),
                Reply::Prepared { outcome: PrepareOutcome::Revoked { .. }, .. } => {}
                Reply::Read { id, outcome: ReadOutcome::Done(Ok(PartResult::Rows(rows))), .. } => {
                    scans.push((k_of(id.txn.seq), rows.into_iter().map(|(key, row)| (key, row[1].clone())).collect()))
                }
                Reply::Read { id, outcome: ReadOutcome::TooOld { bound }, .. } => {
                    assert!(bound.0 > ts[k_of(id.txn.seq)], "refused below {bound}");
                }
                Reply::Forced { .. } | Reply::Query { .. } => {}
                other => panic!("answered {other:?}"),
            }
        }
    }
    assert_eq!((p.engine.pending_writes(), p.engine.parked_reads()), (0, 0));
    (scans, forced)
}

mod property {
    use super::*;
    use proptest::prelude::*;

    fn ops() -> impl Strategy<Value = (Vec<GenOp>, Vec<u64>, u64)> {
        let op = (any::<bool>(), 1u8..8).prop_map(|(write, parts)| GenOp { write, parts });
        prop::collection::vec(op, 1..12).prop_flat_map(|ops| {
            let n = ops.len();
            let ts = Just((0..n as u64).map(|i| 100 + 10 * i).collect::<Vec<_>>()).prop_shuffle();
            (Just(ops), ts, any::<u64>())
        })
    }

    fn scan_ops() -> impl Strategy<Value = (Vec<ScanGen>, Vec<u64>, u64)> {
        let op = prop_oneof![
            (0..4i64).prop_map(ScanGen::Put),
            (0..4i64).prop_map(ScanGen::Delete),
            (1..4u32).prop_map(ScanGen::Scan),
        ];
        prop::collection::vec(op, 1..16).prop_flat_map(|ops| {
            let n = ops.len();
            let ts = Just((0..n as u64).map(|i| 100 + 10 * i).collect::<Vec<_>>()).prop_shuffle();
            (Just(ops), ts, any::<u64>())
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Every read equals the serial model at its timestamp on every part (instant
        /// consistency) and sees every forced write placed there before it arrived (real-time
        /// order: it may have been acknowledged before the read began), or is refused to run
        /// again above it; every partition ends in the serial state of the writes it got.
        #[test]
        fn reads_match_the_serial_model_in_timestamp_order((ops, ts, seed) in ops()) {
            let (reads, forced, ps) = run_schedule(&ops, &ts, seed);
            let masks: Vec<u8> = ops.iter().map(|o| o.parts).collect();
            let parts_of = |k: usize| (0..3).filter(|p| masks[k] & (1 << p) != 0).collect::<Vec<usize>>();
            for (rts, seen) in &reads {
                let r = ops.iter().enumerate().find(|(k, o)| !o.write && ts[*k] == *rts).map(|(k, _)| k).unwrap();
                for (i, p) in parts_of(r).into_iter().enumerate() {
                    let (seen, before) = &seen[i];
                    let Some(seen) = *seen else { continue };
                    for w in before.iter().filter(|w| forced.contains(w)) {
                        prop_assert!(seen & (1 << w) != 0, "read at {} on P{} misses write {} placed before it", rts, p, w);
                    }
                    // The serial model: forced writes on p with smaller timestamps.
                    let model: i64 = forced.iter().filter(|&&w| ts[w] < *rts && ops[w].parts & (1 << p) != 0).map(|&w| 1i64 << w).sum();
                    prop_assert_eq!(seen, model, "read at {} on P{}", rts, p);
                    // DMG edges: w -> r for every write seen (TS(w) < TS(r)); r -> w for every
                    // forced write not seen (TS(r) < TS(w)): acyclic by timestamp.
                    for &w in &forced {
                        if ops[w].parts & (1 << p) == 0 { continue }
                        let saw = seen & (1 << w) != 0;
                        prop_assert_eq!(saw, ts[w] < *rts);
                    }
                }
            }
            for (p, part) in ps.iter().enumerate() {
                let model: i64 = forced.iter().filter(|&&w| ops[w].parts & (1 << p) != 0).map(|&w| 1i64 << w).sum();
                prop_assert_eq!(part.committed(), Value::Decimal(Decimal::from_int(model).unwrap()));
                prop_assert_eq!(part.engine.pending_writes(), 0);
                prop_assert_eq!(part.engine.parked_reads(), 0);
            }
        }

        /// Every answered scan equals the serial model at its timestamp: per key the forced
        /// write with the largest smaller timestamp (a deletion: no row), the first `limit`
        /// rows in key order; deleted keys, and items already folded and forgotten, included.
        #[test]
        fn scans_match_the_serial_model_in_timestamp_order((ops, ts, seed) in scan_ops()) {
            let (scans, forced) = run_scans(&ops, &ts, seed);
            for (k, rows) in scans {
                let ScanGen::Scan(limit) = ops[k] else { unreachable!() };
                let model: Vec<(Key, Value)> = (0..4i64)
                    .filter_map(|i| {
                        let last = forced
                            .iter()
                            .filter(|&&w| ts[w] < ts[k])
                            .filter(|&&w| matches!(ops[w], ScanGen::Put(j) | ScanGen::Delete(j) if j == i))
                            .max_by_key(|&&w| ts[w])?;
                        matches!(ops[*last], ScanGen::Put(_)).then(|| (Key::ints(&[i]), dec(*last as i64)))
                    })
                    .take(limit as usize)
                    .collect();
                prop_assert_eq!(rows, model, "scan at {} (limit {})", ts[k], limit);
            }
        }
    }
}

/// The property's check is seen to fail: a "partition" that ignores W1 (a base-like apply on
/// arrival, modelled by forcing every write whatever it was answered) breaks the model.
#[test]
fn break_the_rule_forcing_revoked_writes_fails_the_serial_model_check() {
    // Read at 110 on P0 first, then a write at 100 arrives: W1 revokes it. Force it anyway.
    let mut p = Part::new(0);
    p.load(dec(0));
    assert_eq!(p.read(110, 110), Some(dec(0)));
    assert!(matches!(p.prepare(100, 100, update(Formula::Add(dec(1)))), PrepareOutcome::Revoked { .. }));
    // Had it been placed and forced, a read at 110 would now see it: the model (0) disagrees.
    let mut broken = Part::new(0);
    broken.load(dec(0));
    assert_eq!(broken.prepare(100, 100, update(Formula::Add(dec(1)))), PrepareOutcome::Placed);
    broken.force(100);
    let model = 0;
    assert_ne!(broken.read(110, 110), Some(dec(model)), "the check catches a write slipped below a read");
}
