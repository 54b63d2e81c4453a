//! The locking partition driven message by message, with coordinators on several nodes (the
//! engine's cluster tests run one node).

use super::*;
use litmus_core::{Isolation, Value};
use litmus_protocol::builtin;
use litmus_protocol::message::Message;

const TICK: Duration = Duration::from_millis(litmus_protocol::machine::TICK_INTERVAL_MS);

/// The patience as the partition can see it: waits are checked once a tick, so a wait shorter
/// than a tick lasts a tick. Tests that wait "several patiences" wait several of these.
fn patience() -> Duration {
    LOCK_WAIT_PATIENCE.max(TICK)
}

struct H {
    p: LockingPartition,
    /// Partition 0 of one, and its store (`ctx.store`) and clock (`ctx.now`).
    ctx: litmus_protocol::engine::PartCtxParts,
    table: TableId,
    /// Every operation reply: (transaction, result, write images).
    replies: Vec<(TxnId, Result<PartResult, Error>, Vec<WriteImage>)>,
    /// Every wound sent (LK-5b): the wounded transactions.
    wounds: Vec<TxnId>,
    /// Every log record, in order.
    log: Vec<Vec<u8>>,
}

fn key(id: i64) -> Key {
    Key::encode(&[Value::Int(id)]).unwrap()
}

fn txn(node: u32, seq: u64) -> TxnId {
    TxnId { node: NodeId(node), epoch: 1, seq }
}

impl H {
    /// One `acid` partition holding accounts `ids` (committed).
    fn new(ids: &[i64]) -> H {
        let catalog = builtin::bank::catalog();
        let table = catalog.table_by_name(builtin::bank::ACCOUNTS).unwrap().id;
        let mut ctx = litmus_protocol::engine::PartCtxParts::new(PartitionId(0), 1, catalog, 1);
        for &id in ids {
            ctx.store.put(table, key(id), Timestamp(1), Some(Row::from(vec![Value::Int(id), Value::Int(100)])));
        }
        ctx.registry = builtin::bank::registry();
        ctx.now = Time(1_000_000_000);
        H {
            p: LockingPartition::new(LockingConfig { base: false, local: false }),
            ctx,
            table,
            replies: vec![],
            wounds: vec![],
            log: vec![],
        }
    }

    /// [`H::new`] for a `salt` partition.
    fn salt(ids: &[i64]) -> H {
        H { p: LockingPartition::new(LockingConfig { base: true, local: false }), ..H::new(ids) }
    }

    /// A `salt` partition recovered from this one's log (relocked by a tick).
    fn replayed(&self) -> H {
        self.restarted_on(&[])
    }

    /// [`H::replayed`] on a store loaded with accounts `ids` (the test's loaded rows are not in
    /// the log): a restart that keeps the data.
    fn restarted_on(&self, ids: &[i64]) -> H {
        let mut h = H::salt(ids);
        for record in &self.log {
            h.p.apply_bytes(record, &mut h.ctx.store).expect("our own log decodes");
        }
        h.tick(TICK);
        h
    }

    fn with(&mut self, f: impl FnOnce(&mut LockingPartition, &mut PartCtx)) {
        let out = self.ctx.run(&mut self.p, f);
        self.log.extend(out.persist);
        for env in out.send {
            if let Message::PartitionReply(r) = env.msg {
                match r.body.decode::<Reply>() {
                    Ok(Reply::Op { id, result, writes, .. }) => self.replies.push((id.txn, result, writes)),
                    Ok(Reply::Wound { txn }) => self.wounds.push(txn),
                    _ => {}
                }
            }
        }
    }

    fn request(&mut self, node: u32, r: Request) {
        self.with(|p, ctx| p.on_request(Addr::Coordinator(NodeId(node)), Payload::new(r), ctx));
    }

    /// Operation `n` of serializable ACID transaction `t` (its age: `t.seq`).
    fn op(&mut self, t: TxnId, n: u32, kind: OpKind) {
        self.op_as(t, n, kind, false);
    }

    /// Operation `n` of `t`, in its first subtransaction: an ACID transaction's, or with
    /// `accepted` an accepted BASE transaction's (alkaline locks, immortal: LK-5b).
    fn op_as(&mut self, t: TxnId, n: u32, kind: OpKind, accepted: bool) {
        let class = TxnClass {
            isolation: Isolation::Serializable,
            base: accepted,
            age: t.seq,
            immortal: accepted,
            lock_free: false,
        };
        self.op_class(t, n, kind, class);
    }

    /// Operation `n` of read-committed ACID transaction `t`, lock-free (LK-5h) while
    /// its operations so far, `kind` included, take only short-term locks.
    fn rc_op(&mut self, t: TxnId, n: u32, kind: OpKind) {
        let class = TxnClass::new(Isolation::ReadCommitted, false, t.seq).with_op(&kind);
        self.op_class(t, n, kind, class);
    }

    fn op_class(&mut self, t: TxnId, n: u32, kind: OpKind, class: TxnClass) {
        let id = SubOpId { txn: t, op: n, part: PartitionId(0) };
        let op = PartOp { table: self.table, kind };
        let r = Request::Op {
            id,
            unit: Unit { txn: t, sub: 0 },
            attempt: 0,
            class,
            op,
            local_commit: false,
            after: vec![],
            resent: false,
            incarnation: None,
        };
        self.request(t.node.0, r);
    }

    /// Operation `n` of subtransaction 1 of accepted BASE transaction `t`, whose write locks
    /// are not released before its reads `after` on other partitions settle (LK-6b).
    fn base_op(&mut self, t: TxnId, n: u32, kind: OpKind, after: Vec<RemoteDep>) {
        self.base_op_in(t, 1, n, kind, after);
    }

    /// [`H::base_op`] in subtransaction `sub`.
    fn base_op_in(&mut self, t: TxnId, sub: u32, n: u32, kind: OpKind, after: Vec<RemoteDep>) {
        let class =
            TxnClass { isolation: Isolation::Serializable, base: true, age: t.seq, immortal: true, lock_free: false };
        let id = SubOpId { txn: t, op: n, part: PartitionId(0) };
        let op = PartOp { table: self.table, kind };
        let unit = Unit { txn: t, sub };
        let r = Request::Op {
            id,
            unit,
            attempt: 0,
            class,
            op,
            local_commit: false,
            after,
            resent: false,
            incarnation: None,
        };
        self.request(t.node.0, r);
    }

    /// `t`'s locks, as a restart would persist them all, by grant number.
    fn locks_of(&self, t: TxnId) -> Vec<HeldLock> {
        let mut locks = self.p.locks.held_locks(t);
        locks.sort_by_key(|l| l.granted);
        locks
    }

    /// The `Locked` records logged so far.
    fn locked_records(&self) -> Vec<LockDelta> {
        let records = self.log.iter().map(|r| decode_record::<Record>("locking", r).expect("decodes"));
        records.filter_map(|r| if let Record::Locked { delta, .. } = r { Some(delta) } else { None }).collect()
    }

    /// The queue's head: the first account from 10.
    fn head(&mut self, t: TxnId, n: u32) {
        self.op(t, n, OpKind::Scan { start: key(10), end: Some(key(20)), limit: 1 });
    }

    fn commit(&mut self, t: TxnId, ops: u32) {
        let writes = self.replies.iter().filter(|r| r.0 == t).flat_map(|r| r.2.clone()).collect();
        self.request(t.node.0, Request::Commit { unit: Unit { txn: t, sub: 0 }, writes, ops: Some(ops) });
    }

    fn tick(&mut self, d: Duration) {
        let end = self.ctx.now + d;
        while self.ctx.now < end {
            self.ctx.now = self.ctx.now + TICK;
            self.with(|p, ctx| p.on_tick(ctx));
        }
    }

    fn results(&self, t: TxnId) -> Vec<&Result<PartResult, Error>> {
        self.replies.iter().filter(|r| r.0 == t).map(|r| &r.1).collect()
    }

    fn died(&self, t: TxnId) -> bool {
        self.results(t).iter().any(|r| matches!(r, Err(Error::Abort(AbortReason::Deadlock))))
    }
}

/// Accounts 10..13 used as a queue on one partition (30 and 31 are outside it): `a` (node 0) consumes the head while `b`
/// (node 1) waits for it, so the table is learnt as a queue; `b` then holds the anchor with
/// head 11, and `c` (node 0, youngest) queues behind it on the anchor. Returns `(b, c)`.
fn consumer_of_node_1_holds_the_anchor() -> (H, TxnId, TxnId) {
    let mut h = H::new(&[10, 11, 12, 13, 30, 31]);
    let (a, b, c) = (txn(0, 1), txn(1, 2), txn(0, 3));
    h.head(a, 0);
    h.op(a, 1, OpKind::Delete { key: key(10) });
    h.head(b, 0);
    h.commit(a, 2);
    assert!(matches!(h.results(b)[..], [Ok(PartResult::Rows(ref rows))] if rows.len() == 1), "{:?}", h.results(b));
    h.tick(TICK);
    h.head(c, 0);
    assert!(h.results(c).is_empty(), "c queues behind b");
    (h, b, c)
}

/// The queue anchor serves BASE consumers too: accepted BASE transactions (alkaline locks)
/// that consume the head of a learnt queue take turns on its anchor (an alkaline write lock),
/// rather than both reading the head and both waiting to delete it — a cycle of immortal
/// subtransactions. Taking turns on the district row instead (TPC-C's BASE Delivery) would
/// stall every New-Order and Payment of the district behind it.
#[test]
fn queue_anchor_makes_base_consumers_take_turns() {
    let mut h = H::new(&[10, 11, 12, 13, 30, 31]);
    let (a, b, c) = (txn(0, 1), txn(1, 2), txn(0, 3));
    let head = OpKind::Scan { start: key(10), end: Some(key(20)), limit: 1 };
    h.op_as(a, 0, head.clone(), true);
    h.op_as(a, 1, OpKind::Delete { key: key(10) }, true);
    h.op_as(b, 0, head.clone(), true);
    assert!(h.results(b).is_empty(), "b waits for a's delete of the head");
    h.commit(a, 2); // a's subtransaction commits: the head is gone, the table is a queue
    assert!(matches!(h.results(b)[..], [Ok(PartResult::Rows(ref rows))] if rows.len() == 1), "{:?}", h.results(b));
    let anchor = h.p.locks.held(b).into_iter().find(|(t, _, _)| *t == QUEUE_ANCHORS).expect("b holds the anchor");
    assert_eq!(anchor.2, LockMode::new(LockClass::Alkaline, Access::Write));
    h.op_as(c, 0, head, true);
    assert!(h.results(c).is_empty(), "c takes its turn after b's subtransaction");
    h.commit(b, 1);
    assert!(matches!(h.results(c)[..], [Ok(PartResult::Rows(_))]), "{:?}", h.results(c));
}

/// LK-5a's exception, [`COORDINATOR_SILENT_MAX`]: a consumer queued on an anchor keeps
/// waiting past [`RUNNING_WITHIN`] behind a holder whose coordinator node has sent nothing
/// since the holder last ran — that node is stalled, not the holder idle. (Under `salt` on a
/// loaded machine one node's worker went silent for ~350 ms, and the Deliveries queued behind
/// its Delivery died and retried, every ~13 ms, into the same queue: all 18–19 Delivery
/// aborts of a 10 s run.) As soon as that node is heard from again about anything
/// else, the holder counts as idle and the waiter dies as before; and silence is believed for
/// at most `COORDINATOR_SILENT_MAX`, which bounds a deadlock through a silent node.
#[test]
fn rule_lk5a_waiter_outlasts_a_holder_whose_coordinator_is_silent() {
    let (mut h, _b, c) = consumer_of_node_1_holds_the_anchor();
    // Node 0 keeps talking (c's node: a reader of account 13); node 1 says nothing.
    let d = txn(0, 4);
    for n in 0..((RUNNING_WITHIN + 4 * patience()).as_millis() / 20) as u32 {
        h.op(d, n, OpKind::Read { key: key(13), cols: ColMask::ALL });
        h.tick(Duration::from_millis(20));
    }
    assert!(h.results(c).is_empty(), "c waits behind b, whose node is silent: {:?}", h.results(c));
    // Node 1 speaks (another transaction's read): b has been idle since, and c dies.
    h.op(txn(1, 5), 0, OpKind::Read { key: key(13), cols: ColMask::ALL });
    h.tick(2 * TICK);
    assert!(h.died(c), "once node 1 is heard from, b counts as idle: {:?}", h.results(c));
}

/// The bound of the rule above: a node silent for longer than [`COORDINATOR_SILENT_MAX`] no
/// longer keeps its holder alive, so a deadlock through it ends.
#[test]
fn rule_lk5a_a_silent_coordinator_is_believed_for_a_bounded_time() {
    let (mut h, _b, c) = consumer_of_node_1_holds_the_anchor();
    h.tick(COORDINATOR_SILENT_MAX - 4 * patience());
    assert!(h.results(c).is_empty(), "c waits: {:?}", h.results(c));
    h.tick(8 * patience());
    assert!(h.died(c), "past the bound c dies: {:?}", h.results(c));
}

/// LK-5d, a deadlock of accepted BASE transactions only: none can abort and LK-5b
/// wounds none of them, so nothing else ends it. The youngest member that waits for an older
/// one loses the waiting subtransaction (a `Deadlock` reply; its coordinator rolls it back and
/// re-runs it). TPC-C New-Orders update their stock rows in the order of their lines, and two
/// accepted ones deadlocked on stock while Deliveries queued behind them died.
#[test]
fn rule_lk5d_a_deadlock_of_accepted_base_transactions_is_broken() {
    let mut h = H::new(&[1, 2]);
    let (a, b) = (txn(0, 1), txn(1, 2));
    h.op_as(a, 0, OpKind::Delete { key: key(1) }, true);
    h.op_as(b, 0, OpKind::Delete { key: key(2) }, true);
    h.op_as(a, 1, OpKind::Delete { key: key(2) }, true);
    h.op_as(b, 1, OpKind::Delete { key: key(1) }, true);
    h.tick(4 * patience());
    assert!(h.died(b), "the younger one's waiting operation aborts: {:?}", h.results(b));
    assert!(!h.died(a), "{:?}", h.results(a));
}

/// LK-5d's last case: a cycle in which the only member waiting for an older one is an
/// accepted BASE transaction has no 5d victim. Its mortal member waits for a younger one (wait-die
/// lets it), and rolling back the accepted member's subtransaction would not release the saline
/// locks a mortal member may wait for, so the cycle is left to LK-5b: the accepted member,
/// past its patience, wounds the older mortal one, and its own subtransaction is not rolled
/// back.
#[test]
fn rule_lk5d_a_cycle_whose_only_older_edge_is_accepted_is_left_to_rule5b() {
    let mut h = H::new(&[1, 2]);
    let (m, a) = (txn(0, 1), txn(1, 2)); // m older and mortal, a younger and accepted
    h.op(m, 0, OpKind::Delete { key: key(1) });
    h.op_as(a, 0, OpKind::Delete { key: key(2) }, true);
    h.op(m, 1, OpKind::Delete { key: key(2) });
    h.op_as(a, 1, OpKind::Delete { key: key(1) }, true);
    assert_eq!((h.results(m).len(), h.results(a).len()), (1, 1), "both wait: a cycle");
    h.tick(4 * patience());
    assert!(!h.died(a), "the accepted member's subtransaction is not rolled back: {:?}", h.results(a));
    assert!(!h.died(m), "m waits for a younger one: wait-die keeps it: {:?}", h.results(m));
    assert!(h.wounds.contains(&m), "LK-5b wounds the older mortal member: {:?}", h.wounds);
}

/// LK-5a's anchor clause: a consumer queued on an anchor keeps waiting behind a holder
/// that waits only for an accepted BASE transaction, however long that one is idle here: it
/// ends without aborting, and LK-5e breaks any cycle through it. Under `salt` at 128 TPC-C
/// clients, a Delivery holding a district's anchor waited for an accepted New-Order's saline
/// read of a customer while the New-Order waited at another partition; every Delivery queued
/// behind it (16 and 28 at once) died and retried into the same queue.
#[test]
fn rule_lk5a_anchor_waiter_outlasts_a_holder_waiting_for_an_accepted_base_transaction() {
    let (mut h, b, c) = consumer_of_node_1_holds_the_anchor();
    let n = txn(2, 6); // younger than b: b never dies for it
    h.op_as(n, 0, OpKind::Delete { key: key(30) }, true);
    h.op(b, 1, OpKind::Read { key: key(30), cols: ColMask::ALL });
    assert_eq!(h.results(b).len(), 1, "b waits for n: {:?}", h.results(b));
    // Every node keeps talking (readers of account 31), so no holder counts as silent.
    let rounds = ((RUNNING_WITHIN + 4 * patience()).as_millis() / 20) as u64;
    for i in 0..rounds {
        for node in 0..3 {
            h.op(txn(node, 100 + i), 0, OpKind::Read { key: key(31), cols: ColMask::ALL });
        }
        h.tick(Duration::from_millis(20));
    }
    assert!(h.results(c).is_empty(), "c waits behind b, which waits for accepted n: {:?}", h.results(c));
    assert!(!h.died(b), "{:?}", h.results(b));
}

/// LK-5e: an accepted BASE transaction that has waited [`RUNNING_WITHIN`] wounds every
/// transaction it waits for that can still abort and is not working here, younger ones too
/// (LK-5b wounds only older ones, after the patience). LK-5a's anchor clause lets a queue
/// wait behind accepted BASE transactions because of this: a cycle through one, which no
/// partition sees whole, is broken by its wound.
#[test]
fn rule_lk5e_an_accepted_base_transaction_wounds_a_younger_idle_blocker() {
    let mut h = H::new(&[1, 2]);
    let (a, b) = (txn(0, 1), txn(1, 2));
    h.op(b, 0, OpKind::Delete { key: key(1) });
    h.tick(TICK);
    h.op_as(a, 0, OpKind::Delete { key: key(1) }, true);
    assert!(h.results(a).is_empty(), "a waits for b");
    // b's node keeps talking (readers of account 2): b is idle, not its node silent.
    let talk = |h: &mut H, d: Duration| {
        for i in 0..(d.as_millis() / 10) as u64 {
            h.op(
                txn(1, 100 + h.ctx.now.as_nanos() / 1_000_000 + i),
                0,
                OpKind::Read { key: key(2), cols: ColMask::ALL },
            );
            h.tick(Duration::from_millis(10));
        }
    };
    talk(&mut h, RUNNING_WITHIN - 2 * patience());
    assert!(h.wounds.is_empty(), "b is younger: LK-5b spares it: {:?}", h.wounds);
    talk(&mut h, 4 * patience());
    assert!(h.wounds.contains(&b), "past RUNNING_WITHIN, a wounds b: {:?}", h.wounds);
    assert!(!h.wounds.contains(&a), "{:?}", h.wounds);
}

/// `Record::Locked` is a delta (`lock::LockDelta`): each operation of a BASE subtransaction logs
/// the locks it took, and a restart folds the records back into all the unit's locks. (One
/// record per operation listing all of them cost O(n²) log for n operations: 22.5 KB per salt
/// TPC-C transaction.)
#[test]
fn salt_locked_records_log_each_operations_locks_and_fold_back_on_restart() {
    let mut h = H::salt(&[1, 2, 3, 4]);
    let t = txn(0, 1);
    for (n, id) in [1, 2, 3, 4].into_iter().enumerate() {
        h.base_op(t, n as u32, OpKind::Delete { key: key(id) }, vec![]);
    }
    assert!(h.results(t).iter().all(|r| r.is_ok()), "{:?}", h.results(t));
    let deltas = h.locked_records();
    assert_eq!(deltas.len(), 4, "one record per operation");
    assert!(deltas.iter().all(|d| d.added.len() == 1 && d.dropped.is_empty()), "each lists its own lock: {deltas:?}");
    let live = h.locks_of(t);
    assert_eq!(live.len(), 4);
    let unit = Unit { txn: t, sub: 1 };
    assert_eq!(h.p.state.pending.get(&unit), Some(&live));
    let r = h.replayed();
    assert_eq!(r.p.state.pending.get(&unit), Some(&live), "the folded records are the unit's locks");
    assert_eq!(r.locks_of(t), live, "and a restart relocks them all, in grant order");
}

/// A lock changes after it was logged: a BASE write's remote read dependency (LK-6b across
/// partitions) settles. The next operation's record re-lists it with its new `after`, replacing
/// the logged one: a fold that kept the old one (or kept both) would relock a write that waits
/// for reads already settled.
#[test]
fn salt_locked_records_carry_a_lock_that_changed_since_it_was_logged() {
    let mut h = H::salt(&[1, 2]);
    let t = txn(0, 1);
    let dep = RemoteDep { part: PartitionId(1), upto: 7 };
    h.base_op(t, 0, OpKind::Delete { key: key(1) }, vec![dep]);
    assert_eq!(h.locks_of(t)[0].after, vec![dep]);
    let settled = Request::ReadsSettled { txn: t, upto: 7 };
    h.with(|p, ctx| p.on_request(Addr::Partition(PartitionId(1)), Payload::new(settled), ctx));
    assert!(h.locks_of(t)[0].after.is_empty(), "the dependency settled");
    h.base_op(t, 1, OpKind::Delete { key: key(2) }, vec![]);
    let deltas = h.locked_records();
    assert_eq!(deltas.len(), 2);
    assert_eq!(deltas[1].added.len(), 2, "the new lock and the changed one: {:?}", deltas[1]);
    let live = h.locks_of(t);
    let r = h.replayed();
    assert_eq!(r.p.state.pending.get(&Unit { txn: t, sub: 1 }), Some(&live));
    assert_eq!(r.locks_of(t), live);
    assert!(r.locks_of(t).iter().all(|l| l.after.is_empty()), "{:?}", r.locks_of(t));
}

/// LK-5f: waits are timed on the partition's wait clock, on which the gap before a
/// tick counts for at most [`TICK_CREDIT_MAX`]. A partition whose worker did not run for 50 ms
/// (starved of CPU) has not watched its waiters for 50 ms: the first tick after the stall must
/// not find them all past their patience and abort them at once (an overloaded partition
/// would churn on the retries). Ticks it does see still add up to the patience, and the
/// waiter dies then.
#[test]
fn rule_lk5f_a_stalled_partition_does_not_count_the_stall_as_patience() {
    let mut h = H::new(&[1]);
    let (a, b) = (txn(0, 1), txn(1, 2));
    h.op(a, 0, OpKind::Delete { key: key(1) });
    h.tick(TICK);
    h.op(b, 0, OpKind::Delete { key: key(1) });
    assert!(h.results(b).is_empty(), "b waits for the older a");
    // The worker stalls for 50 ms: the next tick comes that late.
    h.ctx.now = h.ctx.now + Duration::from_millis(50);
    h.with(|p, ctx| p.on_tick(ctx));
    assert!(!h.died(b), "a stall is not patience: {:?}", h.results(b));
    // Ticks seen again: past the patience, b (younger, still impatient) dies.
    h.tick(patience() + 2 * TICK);
    assert!(h.died(b), "ticks seen count: {:?}", h.results(b));
}

/// LK-5g: an accepted BASE transaction that waits past the patience for an older
/// accepted one does not wound it — it cannot abort, and its coordinator would drop the wound;
/// the sweep would repeat such wounds while the wounder waits, useless messages by the
/// thousand under load.
#[test]
fn rule_lk5g_no_wound_is_sent_to_an_accepted_base_transaction() {
    let mut h = H::new(&[1]);
    let (old, young) = (txn(0, 1), txn(1, 2));
    h.op_as(old, 0, OpKind::Delete { key: key(1) }, true);
    h.tick(TICK);
    h.op_as(young, 0, OpKind::Delete { key: key(1) }, true);
    assert!(h.results(young).is_empty(), "young waits for old");
    h.tick(QUERY_INTERVAL + 4 * patience());
    assert!(h.wounds.is_empty(), "old is accepted: no wound: {:?}", h.wounds);
    // A mortal older blocker is still wounded (LK-5b).
    let mut h = H::new(&[1]);
    h.op(old, 0, OpKind::Delete { key: key(1) });
    h.tick(TICK);
    h.op_as(young, 0, OpKind::Delete { key: key(1) }, true);
    h.tick(4 * patience());
    assert!(h.wounds.contains(&old), "a mortal older blocker is wounded: {:?}", h.wounds);
}

/// LK-5h: a lock-free transaction (read-committed reads only) queued ahead of an
/// accepted BASE transaction is in its way only by its place in the queue. Past the patience
/// the accepted one wounds the older mortal holder (LK-5b), but not the reader: the reader
/// steps out of the queue and its transaction goes on. (Wounded, TPC-C Stock-Levels under
/// `salt` would die often.)
#[test]
fn rule_lk5h_a_lock_free_reader_in_an_accepted_transactions_way_steps_out_unwounded() {
    let mut h = H::new(&[1]);
    let (holder, reader, base) = (txn(0, 1), txn(1, 2), txn(0, 3));
    h.op(holder, 0, OpKind::Delete { key: key(1) });
    h.tick(TICK);
    h.rc_op(reader, 0, OpKind::Read { key: key(1), cols: ColMask::ALL });
    h.op_as(base, 0, OpKind::Delete { key: key(1) }, true);
    assert!(h.results(reader).is_empty() && h.results(base).is_empty(), "both wait for the holder");
    h.tick(RUNNING_WITHIN + 4 * patience());
    assert!(h.wounds.contains(&holder), "the idle older holder is wounded: {:?}", h.wounds);
    assert!(!h.wounds.contains(&reader), "the lock-free reader is not: {:?}", h.wounds);
    assert!(!h.died(reader) && h.results(reader).is_empty(), "it waits on: {:?}", h.results(reader));
}

/// LK-5h: where LK-5a aborts a serializable reader behind an idle older holder, a
/// lock-free one steps out and asks again every tick, and reads once the holder commits — for
/// at most `STEP_OUT_MAX`, after which it dies as any other (a deadlock through a stale
/// lock-free flag lasts no longer).
#[test]
fn rule_lk5h_a_lock_free_reader_waits_out_an_idle_holder_for_at_most_step_out_max() {
    for commits in [true, false] {
        let mut h = H::new(&[1]);
        let (holder, reader, serializable) = (txn(0, 1), txn(1, 2), txn(1, 3));
        h.op(holder, 0, OpKind::Delete { key: key(1) });
        h.tick(TICK);
        h.rc_op(reader, 0, OpKind::Read { key: key(1), cols: ColMask::ALL });
        h.op(serializable, 0, OpKind::Read { key: key(1), cols: ColMask::ALL });
        h.tick(RUNNING_WITHIN + 4 * patience());
        assert!(h.died(serializable), "LK-5a: {:?}", h.results(serializable));
        assert!(h.results(reader).is_empty(), "the lock-free reader waits on: {:?}", h.results(reader));
        if commits {
            h.commit(holder, 1);
            h.tick(2 * TICK);
            assert!(
                matches!(h.results(reader)[..], [Ok(PartResult::Row(None))]),
                "it reads the committed delete: {:?}",
                h.results(reader)
            );
        } else {
            // The holder's node is silent: it counts as working for COORDINATOR_SILENT_MAX
            // (LK-5a's exception), then the reader steps out for STEP_OUT_MAX.
            h.tick(COORDINATOR_SILENT_MAX + STEP_OUT_MAX - RUNNING_WITHIN - 10 * patience());
            assert!(h.results(reader).is_empty(), "it still asks: {:?}", h.results(reader));
            h.tick(RUNNING_WITHIN);
            assert!(h.died(reader), "past STEP_OUT_MAX it dies: {:?}", h.results(reader));
        }
    }
}

/// LK-5h, the coordinator's half (`TxnClass::with_op`): a transaction is lock-free
/// while every operation it has sent takes only short-term locks at its isolation level (Salt
/// Table 1: 𝓛 is {write} below repeatable read), and stops being so for good at the first one
/// that does not. BASE transactions are never lock-free.
#[test]
fn rule_lk5h_a_transaction_is_lock_free_until_its_first_long_term_lock() {
    let read = OpKind::Read { key: key(1), cols: ColMask::ALL };
    let scan = OpKind::Scan { start: key(1), end: None, limit: 10 };
    let write = OpKind::Delete { key: key(1) };
    let rc = TxnClass::new(Isolation::ReadCommitted, false, 1);
    assert!(rc.lock_free);
    let after_reads = rc.with_op(&read).with_op(&scan);
    assert!(after_reads.lock_free, "read-committed reads and scans lock short-term");
    assert!(!after_reads.with_op(&write).lock_free, "a write locks to the end");
    assert!(!after_reads.with_op(&write).with_op(&read).lock_free, "and it stays locked");
    assert!(TxnClass::new(Isolation::ReadUncommitted, false, 1).with_op(&read).lock_free);
    for level in [Isolation::RepeatableRead, Isolation::Serializable] {
        assert!(!TxnClass::new(level, false, 1).with_op(&read).lock_free, "{level}: reads lock to the end");
    }
    assert!(!TxnClass::new(Isolation::ReadCommitted, true, 1).lock_free, "BASE transactions are not lock-free");
}

/// A read of many keys locks each key as its own read would (LK-1–LK-3, in key order):
/// it waits for a writer of any one of them, holds every read lock to the end at serializable
/// (a writer of any of its keys then waits for it), and answers every key at once, in the
/// caller's order, with the committed row.
#[test]
fn rule_lk1_a_read_of_many_keys_locks_each_key_as_its_read_would() {
    let mut h = H::new(&[1, 2, 3]);
    let (w, r, late) = (txn(0, 1), txn(1, 2), txn(0, 3));
    let update = |k: i64| OpKind::Update {
        key: key(k),
        updates: vec![litmus_core::ColumnUpdate::new(1, litmus_core::Formula::Add(Value::Int(5)))],
    };
    h.op(w, 0, update(2));
    let many = OpKind::ReadMany { keys: vec![(0, key(3)), (1, key(9)), (2, key(2)), (3, key(1))] };
    h.op(r, 0, many);
    assert!(h.results(r).is_empty(), "r waits for w's write lock on key 2");
    h.commit(w, 1);
    let row = |k: i64, v: i64| Some(Row::from(vec![Value::Int(k), Value::Int(v)]));
    let expected = PartResult::Many(vec![(0, row(3, 100)), (1, None), (2, row(2, 105)), (3, row(1, 100))]);
    assert_eq!(h.results(r), vec![&Ok(expected)], "every key, in the caller's order, after w committed");
    assert_eq!(h.p.locks.held(r).len(), 4, "a serializable reader holds a read lock per key (key 9's absence too)");
    h.op(late, 0, update(1));
    assert!(h.results(late).is_empty(), "a writer of any of its keys waits for the reader");
}

/// LK-5h with a read of many keys: at read committed its locks are short-term, so the
/// transaction stays lock-free, and they are gone once it is answered.
#[test]
fn rule_lk5h_a_read_of_many_keys_is_short_term_at_read_committed() {
    let mut h = H::new(&[1, 2]);
    let r = txn(0, 1);
    let many = OpKind::ReadMany { keys: vec![(0, key(2)), (1, key(1))] };
    assert!(TxnClass::new(Isolation::ReadCommitted, false, 1).with_op(&many).lock_free);
    assert!(!TxnClass::new(Isolation::Serializable, false, 1).with_op(&many).lock_free);
    h.rc_op(r, 0, many);
    assert!(matches!(h.results(r)[..], [Ok(PartResult::Many(ref rows))] if rows.len() == 2), "{:?}", h.results(r));
    assert!(h.p.locks.held(r).is_empty(), "short-term read locks are released once it is answered");
}

/// A batch of writes locks each key as its own write would (LK-1: a reader of any of
/// them waits for it) and applies whole or not at all: one write that fails (here an insert
/// of an existing key) fails the batch, and the transaction's own later read sees none of it.
#[test]
fn rule_lk1_a_batch_of_writes_locks_each_key_and_applies_whole_or_not_at_all() {
    let mut h = H::new(&[1, 2, 3]);
    let (w, r) = (txn(0, 1), txn(1, 2));
    let bump = |k: i64| OpKind::Update {
        key: key(k),
        updates: vec![litmus_core::ColumnUpdate::new(1, litmus_core::Formula::Add(Value::Int(5)))],
    };
    let insert = |k: i64| OpKind::Insert { key: key(k), row: Row::from(vec![Value::Int(k), Value::Int(0)]) };
    h.op(w, 0, OpKind::WriteMany { writes: vec![bump(1), bump(3), insert(2)] });
    assert!(
        matches!(h.results(w)[..], [Err(Error::Invalid(litmus_core::InvalidInput::DuplicateKey(_)))]),
        "the insert of 2 fails the batch: {:?}",
        h.results(w)
    );
    h.op(w, 1, OpKind::ReadMany { keys: vec![(0, key(1)), (1, key(3))] });
    let unchanged = |k: i64| Some(Row::from(vec![Value::Int(k), Value::Int(100)]));
    assert_eq!(h.results(w)[1], &Ok(PartResult::Many(vec![(0, unchanged(1)), (1, unchanged(3))])), "nothing applied");
    h.op(w, 2, OpKind::WriteMany { writes: vec![bump(1), bump(3), bump(3), insert(4)] });
    assert_eq!(h.results(w)[2], &Ok(PartResult::Done));
    h.op(r, 0, OpKind::Read { key: key(3), cols: ColMask::ALL });
    assert!(h.results(r).is_empty(), "a reader of a key in the batch waits for its writer");
    h.commit(w, 3);
    let row = |k: i64, v: i64| Some(Row::from(vec![Value::Int(k), Value::Int(v)]));
    assert_eq!(h.results(r), vec![&Ok(PartResult::Row(row(3, 110)))], "each write saw the one before it");
    assert_eq!(h.ctx.store.latest(h.table, &key(4)).and_then(|(_, r)| r.cloned()), row(4, 0));
}

/// A commit record logs each write as the columns it changed where that is shorter than the row
/// (`LoggedImage`), against the row the writes before it left; replaying the log over the same
/// starting rows rebuilds the same rows (a partition stays a deterministic function of its log).
#[test]
fn commit_record_logs_the_changed_columns_and_replays_to_the_same_rows() {
    let mut h = H::new(&[1, 2, 3]);
    let w = txn(0, 1);
    let bump = |k: i64, by: i64| OpKind::Update {
        key: key(k),
        updates: vec![litmus_core::ColumnUpdate::new(1, litmus_core::Formula::Add(Value::Int(by)))],
    };
    let insert = OpKind::Insert { key: key(4), row: Row::from(vec![Value::Int(4), Value::Int(7)]) };
    h.op(w, 0, OpKind::WriteMany { writes: vec![bump(1, 5), bump(1, 6), insert, OpKind::Delete { key: key(2) }] });
    h.op(w, 1, bump(3, 0)); // a write that changes nothing
    assert_eq!(h.results(w), vec![&Ok(PartResult::Done), &Ok(PartResult::Done)]);
    h.commit(w, 2);
    let logged: Vec<LoggedWrite> = h
        .log
        .iter()
        .filter_map(|r| match decode_record::<Record>("locking", r).expect("decodes") {
            Record::CommitColumns { writes, .. } => Some(writes),
            _ => None,
        })
        .flatten()
        .collect();
    let images: Vec<(Key, LoggedImage)> = logged.into_iter().map(|w| (w.key, w.image)).collect();
    assert_eq!(
        images,
        vec![
            // In the commit's order; the second bump against the row the first one left.
            (key(1), LoggedImage::Columns(vec![(1, Value::Int(105))])),
            (key(1), LoggedImage::Columns(vec![(1, Value::Int(111))])),
            (key(4), LoggedImage::Row(Some(Row::from(vec![Value::Int(4), Value::Int(7)])))),
            (key(2), LoggedImage::Row(None)),
            (key(3), LoggedImage::Columns(vec![])),
        ]
    );
    // Replayed over the rows it started from, the log gives the same rows.
    let mut replay = H::new(&[1, 2, 3]);
    for record in &h.log {
        replay.p.apply_bytes(record, &mut replay.ctx.store).expect("our own log decodes");
    }
    let rows = |h: &H| h.ctx.store.scan(h.table, Bound::Unbounded, Bound::Unbounded, Timestamp::MAX, 100);
    assert_eq!(rows(&replay), rows(&h));
    assert_eq!(
        rows(&h).into_iter().map(|(_, r)| r[1].clone()).collect::<Vec<_>>(),
        vec![Value::Int(111), Value::Int(100), Value::Int(7)]
    );
    // Replayed over a store without the rows its column images change (a log that is not this
    // store's), the record is a typed error and installs nothing.
    let commit = h
        .log
        .iter()
        .find(|r| matches!(decode_record::<Record>("locking", r), Ok(Record::CommitColumns { .. })))
        .expect("a commit record");
    let mut stranger = H::new(&[]);
    let err = stranger.p.apply_bytes(commit, &mut stranger.ctx.store).unwrap_err();
    assert!(matches!(err, Error::Storage(_)), "{err}");
    assert_eq!(stranger.ctx.store, MvccStore::new(), "nothing applied");
}

/// `LoggedImage::between` keeps the whole row when most columns changed, when the width
/// differs and for inserts and deletes; `resolve` refuses a column image with no row under it.
#[test]
fn a_logged_image_is_the_shorter_of_row_and_columns_and_needs_its_row() {
    let row = |vs: &[i64]| Row::from(vs.iter().map(|&v| Value::Int(v)).collect::<Vec<_>>());
    let before = row(&[1, 2, 3, 4]);
    let two = Some(row(&[1, 9, 3, 8]));
    assert_eq!(
        LoggedImage::between(Some(&before), &two),
        LoggedImage::Columns(vec![(1, Value::Int(9)), (3, Value::Int(8))])
    );
    let three = Some(row(&[7, 9, 3, 8]));
    assert_eq!(LoggedImage::between(Some(&before), &three), LoggedImage::Row(three.clone()));
    let wider = Some(row(&[1, 2, 3, 4, 5]));
    assert_eq!(LoggedImage::between(Some(&before), &wider), LoggedImage::Row(wider.clone()));
    assert_eq!(LoggedImage::between(None, &two), LoggedImage::Row(two.clone()));
    assert_eq!(LoggedImage::between(Some(&before), &None), LoggedImage::Row(None));
    assert_eq!(LoggedImage::between(Some(&before), &two).resolve(Some(&before)), Some(two.clone()));
    assert_eq!(LoggedImage::Columns(vec![(1, Value::Int(9))]).resolve(None), None);
    assert_eq!(LoggedImage::Columns(vec![(4, Value::Int(9))]).resolve(Some(&before)), None);
}

/// `t`'s row `id` as this partition has it now (its latest committed version).
fn row_of(h: &H, id: i64) -> Option<Row> {
    h.ctx.store.get(h.table, &key(id), Timestamp(u64::MAX)).cloned()
}

/// BASE transaction `t` (node 0) deletes account 1 in subtransaction 1; the coordinator logs
/// that decision and goes on at once (Salt §6.2: the decision is durable), so the commit can
/// reach us after the next subtransaction's operation. Returns the commit, not yet delivered.
fn first_subtransaction_decided(h: &mut H, t: TxnId) -> Request {
    h.base_op(t, 0, OpKind::Delete { key: key(1) }, vec![]);
    let writes: Vec<WriteImage> = h.replies.iter().filter(|r| r.0 == t).flat_map(|r| r.2.clone()).collect();
    assert_eq!(writes.len(), 1, "{:?}", h.results(t));
    Request::Commit { unit: Unit { txn: t, sub: 1 }, writes, ops: None }
}

/// Salt §6.2 with the decision as the commit point: subtransaction 2's operation overtakes
/// subtransaction 1's commit. It must wait for it — run first, it read the row subtransaction
/// 1 deleted, and the commit then downgraded its fresh alkaline lock to saline with the
/// others (`downgrade_alkaline` is per transaction), exposing it to other BASE transactions
/// before its subtransaction committed.
#[test]
fn salt_6_2_a_subtransaction_overtaking_the_commit_before_it_waits_for_that_commit() {
    let mut h = H::salt(&[1, 2]);
    let t = txn(0, 1);
    let commit = first_subtransaction_decided(&mut h, t);
    h.base_op_in(t, 2, 1, OpKind::Read { key: key(1), cols: ColMask::ALL }, vec![]);
    h.base_op_in(t, 2, 2, OpKind::Delete { key: key(2) }, vec![]);
    assert_eq!(h.results(t).len(), 1, "kept until the commit: {:?}", h.results(t));
    h.request(0, commit);
    assert_eq!(row_of(&h, 1), None, "subtransaction 1's delete applied");
    let results = h.results(t);
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[1], &Ok(PartResult::Row(None)), "the read sees subtransaction 1's delete");
    assert!(results[2].is_ok(), "{results:?}");
    let alkaline: Vec<_> = h.locks_of(t).into_iter().filter(|l| l.mode.class == LockClass::Alkaline).collect();
    assert_eq!(alkaline.len(), 2, "subtransaction 2's locks are still alkaline: {:?}", h.locks_of(t));
}

/// The same after our restart: subtransaction 1's `Locked` record relocked its locks, and the
/// next subtransaction's operation (sent after we came back) arrives before the re-sent
/// commit. Run first, it was taken for a new run and rolled subtransaction 1 back (an
/// `Aborted` record, its locks released) — and the commit then applied its images without them.
#[test]
fn salt_6_2_after_a_restart_the_next_subtransaction_waits_for_the_resent_commit() {
    let mut h = H::salt(&[1, 2]);
    let t = txn(0, 1);
    let commit = first_subtransaction_decided(&mut h, t);
    let mut r = h.restarted_on(&[1, 2]);
    assert_eq!(r.locks_of(t).len(), 1, "relocked");
    let aborted =
        |h: &H| h.log.iter().any(|b| matches!(decode_record::<Record>("locking", b), Ok(Record::Aborted { .. })));
    r.base_op_in(t, 2, 1, OpKind::Read { key: key(1), cols: ColMask::ALL }, vec![]);
    assert!(r.results(t).is_empty(), "kept until the commit: {:?}", r.results(t));
    assert!(!aborted(&r), "subtransaction 1 was not rolled back");
    r.request(0, commit);
    assert_eq!(row_of(&r, 1), None, "subtransaction 1's delete applied");
    assert_eq!(r.results(t), vec![&Ok(PartResult::Row(None))], "and the read sees it");
    assert!(!aborted(&r));
}

/// An abort of subtransaction 2 (its run was retried) overtakes subtransaction 1's commit:
/// it must not release subtransaction 1's locks, under which the commit's images were made.
#[test]
fn salt_6_2_an_abort_overtaking_the_commit_before_it_leaves_that_subtransactions_locks() {
    let mut h = H::salt(&[1, 2]);
    let t = txn(0, 1);
    let commit = first_subtransaction_decided(&mut h, t);
    h.request(0, Request::Abort { unit: Unit { txn: t, sub: 2 }, attempt: 0 });
    assert_eq!(h.locks_of(t).len(), 1, "subtransaction 1's lock is kept");
    let u = txn(1, 2);
    h.base_op(u, 0, OpKind::Read { key: key(1), cols: ColMask::ALL }, vec![]);
    assert!(h.results(u).is_empty(), "another BASE transaction still waits: {:?}", h.results(u));
    h.request(0, commit);
    assert_eq!(h.results(u), vec![&Ok(PartResult::Row(None))], "and reads the delete once it commits");
}

/// `EndBase` goes out as soon as the procedure finished, naming the subtransactions whose
/// commits this partition has not acknowledged; it can arrive before them. Ended first, the
/// partition would have released the locks and then ignored the commit as one for an ended
/// transaction: subtransaction 1's delete lost.
#[test]
fn salt_6_2_end_base_before_the_commits_it_names_waits_for_them() {
    let mut h = H::salt(&[1, 2]);
    let t = txn(0, 1);
    let commit = first_subtransaction_decided(&mut h, t);
    h.request(0, Request::EndBase { txn: t, after: vec![1] });
    assert_eq!(h.locks_of(t).len(), 1, "kept until the commit: the lock is held");
    h.request(0, commit);
    assert_eq!(row_of(&h, 1), None, "subtransaction 1's delete applied");
    assert!(h.locks_of(t).is_empty(), "then the transaction ended: {:?}", h.locks_of(t));
    h.request(0, Request::EndBase { txn: t, after: vec![1] });
    assert!(h.locks_of(t).is_empty(), "a resent EndBase changes nothing");
}

/// A commit whose acknowledgement was lost is re-sent after `EndBase` ended the transaction
/// here (which no longer waits for every acknowledgement) — and after our restart, when only
/// the durable record of ended transactions still knows it. Applied again, its image would
/// overwrite what later transactions wrote (`litmus sim --engine salt --workload bank
/// --faults --seed 221`: a transfer's debit undone, money created).
#[test]
fn salt_6_2_a_commit_resent_after_the_transaction_ended_is_not_applied_again() {
    let mut h = H::salt(&[1, 2]);
    let t = txn(0, 1);
    let commit = first_subtransaction_decided(&mut h, t);
    h.request(0, commit.clone());
    h.request(0, Request::EndBase { txn: t, after: vec![1] });
    let u = txn(0, 2);
    let row = Row::from(vec![Value::Int(1), Value::Int(7)]);
    h.op(u, 0, OpKind::Write { key: key(1), row: row.clone() });
    h.commit(u, 1);
    assert_eq!(row_of(&h, 1), Some(row.clone()));
    let mut r = h.restarted_on(&[1, 2]);
    assert_eq!(row_of(&r, 1), Some(row.clone()), "replayed");
    r.request(0, commit);
    assert_eq!(row_of(&r, 1), Some(row), "the late commit changed nothing");
}

/// A read for update (`OpKind::ReadForUpdate`, the read of a SQL `UPDATE` or `SELECT ... FOR
/// UPDATE`) takes at once the lock the coming write takes (LK-1, `Access::Write`): a second
/// reader for update of the row queues behind the first, which then writes under the lock it
/// holds, commits, and hands the row on; the second reads the committed write. With plain reads
/// both would hold read locks and each would wait to upgrade: the younger dies (LK-5a) although
/// only one row is involved, which is what two concurrent `UPDATE t SET x = x + 1` met.
#[test]
fn rule_lk1_a_read_for_update_takes_the_write_lock_so_updaters_of_one_row_queue_without_an_upgrade() {
    let bump = OpKind::Update {
        key: key(1),
        updates: vec![litmus_core::ColumnUpdate::new(1, litmus_core::Formula::Add(Value::Int(5)))],
    };
    let row = |v: i64| Ok(PartResult::Row(Some(Row::from(vec![Value::Int(1), Value::Int(v)]))));

    // Plain reads, then writes: the upgrade deadlock.
    let mut h = H::new(&[1]);
    let (a, b) = (txn(0, 1), txn(1, 2));
    h.op(a, 0, OpKind::Read { key: key(1), cols: ColMask::ALL });
    h.op(b, 0, OpKind::Read { key: key(1), cols: ColMask::ALL });
    assert_eq!(h.results(b), vec![&row(100)], "read locks are shared");
    h.op(a, 1, bump.clone());
    h.op(b, 1, bump.clone());
    h.tick(patience() * 3);
    assert!(h.died(b), "each waits to upgrade past the other's read lock: the younger dies");

    // Reads for update: a queue.
    let mut h = H::new(&[1]);
    let (a, b) = (txn(0, 1), txn(1, 2));
    h.op(a, 0, OpKind::ReadForUpdate { key: key(1) });
    assert_eq!(h.results(a), vec![&row(100)]);
    assert!(h.replies.iter().all(|r| r.2.is_empty()), "a read for update writes nothing");
    h.op(b, 0, OpKind::ReadForUpdate { key: key(1) });
    assert!(h.results(b).is_empty(), "b waits for a's write lock");
    h.op(a, 1, bump.clone());
    assert_eq!(h.results(a).len(), 2, "a writes under the lock it holds: no upgrade to wait for");
    assert!(h.results(a)[1].is_ok());
    h.commit(a, 2);
    assert_eq!(h.results(b), vec![&row(105)], "b reads a's committed write");
    h.op(b, 1, bump);
    h.commit(b, 2);
    assert!(!h.died(b) && h.results(b)[1].is_ok());

    // A plain reader waits for it too, and at read committed the lock still lasts to the end.
    let mut h = H::new(&[1]);
    let (a, r) = (txn(0, 1), txn(1, 2));
    let rfu = OpKind::ReadForUpdate { key: key(1) };
    assert!(!TxnClass::new(Isolation::ReadCommitted, false, 1).with_op(&rfu).lock_free, "a write's lock is long-term");
    h.rc_op(a, 0, rfu);
    assert_eq!(h.results(a), vec![&row(100)]);
    assert_eq!(h.p.locks.held(a).len(), 1, "held after the read, as a write's lock is");
    h.rc_op(r, 0, OpKind::Read { key: key(1), cols: ColMask::ALL });
    assert!(h.results(r).is_empty(), "a reader waits for the write lock");
    h.commit(a, 1);
    assert_eq!(h.results(r), vec![&row(100)]);
}

/// LK-7: unprepared work idle past `ORPHAN_ASK_AFTER` makes the participant ask its
/// coordinator; while the coordinator answers `Alive` the work stays past
/// `ORPHAN_TIMEOUT` (its lock still blocks a younger writer), and once the answers stop it is
/// rolled back at `ORPHAN_TIMEOUT` after the last one (the writer gets the lock).
#[test]
fn rule_lk7_an_idle_transaction_keeps_its_locks_while_its_coordinator_vouches_for_it() {
    let mut h = H::new(&[1]);
    let (reader, writer) = (txn(0, 1), txn(1, 2));
    let bump = || OpKind::Update {
        key: key(1),
        updates: vec![litmus_core::ColumnUpdate::new(1, litmus_core::Formula::Add(Value::Int(5)))],
    };
    h.op(reader, 0, OpKind::Read { key: key(1), cols: ColMask::ALL });
    assert!(h.results(reader)[0].is_ok());
    let asked = |h: &mut H, d: Duration| -> usize {
        let mut n = 0;
        let end = h.ctx.now + d;
        while h.ctx.now < end {
            h.ctx.now = h.ctx.now + TICK;
            let out = h.ctx.run(&mut h.p, |p, ctx| p.on_tick(ctx));
            n += out
                .send
                .iter()
                .filter(|e| match &e.msg {
                    Message::PartitionReply(r) => {
                        matches!(r.body.clone().decode::<Reply>(), Ok(Reply::QueryIdle { txn }) if txn == reader)
                    }
                    _ => false,
                })
                .count();
        }
        n
    };
    assert_eq!(asked(&mut h, ORPHAN_ASK_AFTER - TICK), 0, "not asked while recently active");
    // Each answer counts as a message: asked again once idle that long again; five rounds
    // outlast the orphan timeout.
    for _ in 0..5 {
        assert!(asked(&mut h, ORPHAN_ASK_AFTER + QUERY_INTERVAL) > 0, "asked while idle");
        h.request(0, Request::Alive { txn: reader });
    }
    assert!(5 * ORPHAN_ASK_AFTER > ORPHAN_TIMEOUT);
    h.op(writer, 0, bump());
    h.tick(patience() + TICK);
    assert!(h.died(writer), "the vouched-for reader still holds its lock past ORPHAN_TIMEOUT");
    // No more answers: rolled back ORPHAN_TIMEOUT after the last.
    asked(&mut h, ORPHAN_TIMEOUT);
    let writer = txn(1, 3);
    h.op(writer, 0, bump());
    assert!(h.results(writer).first().is_some_and(|r| r.is_ok()), "the orphan's lock is gone: {:?}", h.results(writer));
}
