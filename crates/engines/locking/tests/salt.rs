//! The locking engine against Salt's rules, on a synchronous cluster (tests/common): the
//! banking example (Figs. 1–2), roll-forward after a crash at every message (§6.2), ACID never
//! observing a BASE transaction's intermediate state (§5.1), and the anomaly suite per ANSI
//! level (§5, Table 1) — what each level forbids and what it allows.

use litmus_core::{AbortReason, Error, Formula, Isolation, Value};
use litmus_locking::partition::{LOCK_WAIT_PATIENCE, RUNNING_WITHIN};
use litmus_protocol::builtin::bank;
use litmus_protocol::machine::TICK_INTERVAL_MS;
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::op::{Op, OpResult};
use litmus_protocol::procedure::{Ctx, ProcOptions, Registry};
use litmus_protocol::testkit::SyncCluster;
use litmus_protocol::EngineKind;
use std::time::Duration;

const INITIAL: i64 = 100;

fn bank_cluster(engine: EngineKind, accounts: i64) -> SyncCluster {
    let mut c = SyncCluster::new(engine, bank::catalog(), bank::registry(), 3);
    for id in 0..accounts {
        c.proc(0, "bank_open", vec![Value::Int(id), Value::Int(INITIAL)]).unwrap();
    }
    c
}

fn total(c: &mut SyncCluster) -> Result<(i64, i64), Error> {
    let v = c.proc(9, "bank_total", vec![])?;
    Ok((v[0].as_int().unwrap(), v[1].as_int().unwrap()))
}

fn try_balance(c: &mut SyncCluster, id: i64) -> Result<i64, Error> {
    let body = RequestBody::Begin { isolation: Isolation::ReadCommitted, retrying_for: Duration::ZERO };
    let ResponseBody::Begun(txn) = c.call(8, body).unwrap() else { panic!() };
    let r =
        c.call(8, RequestBody::Op { txn, op: Op::Read { table: bank::ACCOUNTS.into(), key: vec![Value::Int(id)] } })?;
    c.call(8, RequestBody::Commit { txn })?;
    match r {
        ResponseBody::Op(OpResult::Row(Some(row))) => Ok(row[1].as_int().unwrap()),
        other => panic!("{other:?}"),
    }
}

fn balance(c: &mut SyncCluster, id: i64) -> i64 {
    let body = RequestBody::Begin { isolation: Isolation::ReadCommitted, retrying_for: Duration::ZERO };
    let ResponseBody::Begun(txn) = c.call(8, body).unwrap() else { panic!() };
    let r =
        c.call(8, RequestBody::Op { txn, op: Op::Read { table: bank::ACCOUNTS.into(), key: vec![Value::Int(id)] } });
    c.call(8, RequestBody::Commit { txn }).unwrap();
    match r.unwrap() {
        ResponseBody::Op(OpResult::Row(Some(row))) => row[1].as_int().unwrap(),
        other => panic!("{other:?}"),
    }
}

/// A call of the Salt Fig. 2 transfer, reporting how long the client has been retrying.
fn transfer(from: i64, to: i64, amount: i64, retrying_for: Duration) -> RequestBody {
    RequestBody::Call {
        procedure: "bank_transfer".into(),
        args: vec![Value::Int(from), Value::Int(to), Value::Int(amount)],
        retrying_for,
    }
}

/// Salt Fig. 2: the BASE transfer moves money; the unmodified ACID total never changes.
#[test]
fn fig2_base_transfer_and_acid_total() {
    for engine in [litmus_locking::ACID, litmus_locking::SALT, litmus_locking::SALT_LOCAL] {
        let mut c = bank_cluster(engine, 6);
        for (s, r, amt) in [(0, 1, 30), (1, 2, 50), (3, 4, 10), (5, 0, 100)] {
            c.proc(1, "bank_transfer", vec![Value::Int(s), Value::Int(r), Value::Int(amt)]).unwrap();
            c.settle();
            assert_eq!(total(&mut c).unwrap(), (6 * INITIAL, 6), "{engine}");
        }
        assert_eq!(balance(&mut c, 0), INITIAL - 30 + 100, "{engine}");
        assert_eq!(balance(&mut c, 2), INITIAL + 50, "{engine}");
        // Constraint violation (insufficient balance): nothing moves.
        c.proc(1, "bank_transfer", vec![Value::Int(3), Value::Int(4), Value::Int(1_000)]).unwrap();
        c.settle();
        assert_eq!(balance(&mut c, 3), INITIAL - 10, "{engine}");
    }
}

/// A client request the network duplicates runs once: a second BASE transfer (or interactive
/// update) would move the money twice — under Salt a BASE transaction cannot abort once
/// accepted, so a uniqueness check inside it would not save it either.
#[test]
fn duplicated_client_request_runs_once() {
    for engine in [litmus_locking::ACID, litmus_locking::SALT, litmus_locking::SALT_LOCAL] {
        let mut c = bank_cluster(engine, 2);
        c.send(1, transfer(0, 1, 30, Duration::ZERO));
        let late_copy = c.copy_last();
        c.settle();
        c.requeue(late_copy);
        c.settle();
        assert_eq!((balance(&mut c, 0), balance(&mut c, 1)), (INITIAL - 30, INITIAL + 30), "{engine}");
    }
}

/// Salt Fig. 2, lines 15–18: a failed credit (no such receiver) runs the compensating
/// alkaline subtransaction and the sender is refunded.
#[test]
fn fig2_exception_handler_compensates() {
    for engine in [litmus_locking::SALT, litmus_locking::SALT_LOCAL] {
        let mut c = bank_cluster(engine, 3);
        c.proc(1, "bank_transfer", vec![Value::Int(0), Value::Int(99), Value::Int(40)]).unwrap();
        c.settle();
        assert_eq!(balance(&mut c, 0), INITIAL, "{engine}: refunded");
        assert_eq!(total(&mut c).unwrap(), (3 * INITIAL, 3));
    }
    // Under ACID the same body is one transaction: debit and refund commit together.
    let mut c = bank_cluster(litmus_locking::ACID, 3);
    c.proc(1, "bank_transfer_acid", vec![Value::Int(0), Value::Int(99), Value::Int(40)]).unwrap();
    assert_eq!(balance(&mut c, 0), INITIAL);
}

/// Salt §5.1 / Theorem 1: an ACID total-balance issued while a BASE transfer is between its
/// alkaline subtransactions either waits it out or aborts; it never sees the money in flight.
#[test]
fn acid_never_observes_base_intermediate_state() {
    for engine in [litmus_locking::SALT, litmus_locking::SALT_LOCAL] {
        for cut in 0..40 {
            let mut c = bank_cluster(engine, 4);
            let t = c.send(1, transfer(0, 3, 25, Duration::ZERO));
            for _ in 0..cut {
                c.deliver_one();
            }
            let q = c.send(
                2,
                RequestBody::Call { procedure: "bank_total".into(), args: vec![], retrying_for: Duration::ZERO },
            );
            c.settle();
            match c.response(2, q).expect("answered") {
                Ok(ResponseBody::Returned(v)) => assert_eq!(v[0], Value::Int(4 * INITIAL), "{engine} cut {cut}"),
                Err(Error::Abort(_)) => {} // wait-die: the younger ACID reader aborted
                other => panic!("{engine} cut {cut}: {other:?}"),
            }
            assert!(c.response(1, t).is_some_and(|r| r.is_ok()), "{engine} cut {cut}: transfer answered");
            assert_eq!(total(&mut c).unwrap(), (4 * INITIAL, 4));
            assert_eq!(balance(&mut c, 3), INITIAL + 25);
        }
    }
}

fn three_step_registry() -> Registry {
    let mut r = bank::registry();
    r.register_with("three_steps", vec![], ProcOptions::base(), |ctx: Ctx, _args: Vec<Value>| async move {
        for id in 0..3i64 {
            ctx.begin_alkaline().await?;
            ctx.update(bank::ACCOUNTS, &[Value::Int(id)], &[("bal", Formula::Add(Value::Int(1)))]).await?;
            ctx.end_alkaline().await?;
        }
        Ok(vec![])
    });
    r.register_with("three_local_steps", vec![], ProcOptions::base(), |ctx: Ctx, _args: Vec<Value>| async move {
        for id in 0..3i64 {
            ctx.alkaline_update(bank::ACCOUNTS, &[Value::Int(id)], &[("bal", Formula::Add(Value::Int(1)))]).await?;
        }
        Ok(vec![])
    });
    r
}

/// Salt §6.1–§6.2: crash every machine after any number of delivered messages; after restart an
/// accepted BASE transaction is rolled forward and each of its steps happens exactly once; one
/// that was never accepted happens entirely or not at all.
#[test]
fn accepted_base_rolls_forward_exactly_once_at_every_crash_point() {
    for (engine, procedure) in [
        (litmus_locking::SALT, "three_steps"),
        (litmus_locking::SALT_LOCAL, "three_local_steps"),
        (litmus_locking::SALT, "three_local_steps"),
    ] {
        let mut crash_points = 0;
        for cut in 0.. {
            let mut c = SyncCluster::new(engine, bank::catalog(), three_step_registry(), 3);
            for id in 0..3 {
                c.proc(0, "bank_open", vec![Value::Int(id), Value::Int(0)]).unwrap();
            }
            let id = c
                .send(1, RequestBody::Call { procedure: procedure.into(), args: vec![], retrying_for: Duration::ZERO });
            let mut finished = false;
            for _ in 0..cut {
                if !c.deliver_one() {
                    finished = true;
                    break;
                }
            }
            let accepted = c.response(1, id).is_some_and(|r| r.is_ok());
            c.crash_all();
            c.settle();
            let bals: Vec<Result<i64, Error>> = (0..3).map(|i| try_balance(&mut c, i)).collect();
            let bals: Vec<i64> = match bals.into_iter().collect() {
                Ok(b) => b,
                Err(e) => panic!("{engine} {procedure} cut {cut}: accepted={accepted}: reading after recovery: {e}"),
            };
            let all_once = bals == [1, 1, 1];
            assert!(
                all_once || (!accepted && bals == [0, 0, 0]),
                "{engine} {procedure} cut {cut}: accepted={accepted} balances {bals:?}"
            );
            crash_points += 1;
            if finished {
                break;
            }
        }
        assert!(crash_points > 10);
    }
}

fn begin(c: &mut SyncCluster, client: u64, isolation: Isolation) -> litmus_core::TxnId {
    c.begin(client, isolation)
}

fn op(c: &mut SyncCluster, client: u64, txn: litmus_core::TxnId, op: Op) -> Result<OpResult, Error> {
    match c.call(client, RequestBody::Op { txn, op }) {
        Ok(ResponseBody::Op(r)) => Ok(r),
        Ok(other) => panic!("{other:?}"),
        Err(e) => Err(e),
    }
}

fn read(id: i64) -> Op {
    Op::Read { table: bank::ACCOUNTS.into(), key: vec![Value::Int(id)] }
}
fn write(id: i64, bal: i64) -> Op {
    Op::Write { table: bank::ACCOUNTS.into(), row: vec![Value::Int(id), Value::Int(bal)].into() }
}
fn scan() -> Op {
    Op::Scan { table: bank::ACCOUNTS.into(), start: vec![Value::Int(10)], end: Some(vec![Value::Int(20)]), limit: 100 }
}
fn row_bal(r: Result<OpResult, Error>) -> Result<i64, Error> {
    match r? {
        OpResult::Row(Some(row)) => Ok(row[1].as_int().unwrap()),
        other => panic!("{other:?}"),
    }
}
fn is_cc_abort(r: &Result<impl std::fmt::Debug, Error>) -> bool {
    matches!(r, Err(Error::Abort(AbortReason::Deadlock)))
}

/// The patience as a partition sees it: waits are judged once a tick, so a patience shorter
/// than a tick lasts a tick.
fn patience_ms() -> u64 {
    (LOCK_WAIT_PATIENCE.as_millis() as u64).max(TICK_INTERVAL_MS)
}

/// Delivers every queued message without advancing time.
fn drain(c: &mut SyncCluster) {
    while c.deliver_one() {}
}

/// Sends a request that must queue behind an older lock holder (LK-5a): it is not
/// answered while it waits less than `LOCK_WAIT_PATIENCE`, and is aborted with
/// `AbortReason::Deadlock` once it has waited that long (plus a tick) and still waits.
fn waits_then_dies(c: &mut SyncCluster, client: u64, body: RequestBody) -> Result<ResponseBody, Error> {
    let id = c.send(client, body);
    drain(c);
    c.tick(patience_ms() - TICK_INTERVAL_MS);
    drain(c);
    assert!(c.response(client, id).is_none(), "a younger requester queues for the patience");
    c.tick(2 * TICK_INTERVAL_MS);
    drain(c);
    c.response(client, id).expect("an impatient requester is aborted after the patience").clone()
}

fn op_waits_then_dies(c: &mut SyncCluster, client: u64, txn: litmus_core::TxnId, op: Op) -> Result<OpResult, Error> {
    match waits_then_dies(c, client, RequestBody::Op { txn, op }) {
        Ok(ResponseBody::Op(r)) => Ok(r),
        Ok(other) => panic!("{other:?}"),
        Err(e) => Err(e),
    }
}

/// Dirty write (P0) is forbidden at every level: the second writer (younger) waits, and dies
/// after the patience while the first still holds its lock (LK-5a).
#[test]
fn anomaly_dirty_write_forbidden_at_every_level() {
    for level in Isolation::ALL {
        let mut c = bank_cluster(litmus_locking::ACID, 2);
        let t1 = begin(&mut c, 1, level);
        let t2 = begin(&mut c, 2, level);
        op(&mut c, 1, t1, write(0, 1)).unwrap();
        assert!(is_cc_abort(&op_waits_then_dies(&mut c, 2, t2, write(0, 2))), "{level}");
        c.call(1, RequestBody::Commit { txn: t1 }).unwrap();
        assert_eq!(balance(&mut c, 0), 1);
    }
}

/// Dirty read (P1): allowed at read-uncommitted, forbidden from read-committed up.
#[test]
fn anomaly_dirty_read_per_level() {
    for level in Isolation::ALL {
        let mut c = bank_cluster(litmus_locking::ACID, 2);
        let t1 = begin(&mut c, 1, Isolation::Serializable);
        let t2 = begin(&mut c, 2, level);
        op(&mut c, 1, t1, write(0, 7)).unwrap();
        if level == Isolation::ReadUncommitted {
            assert_eq!(row_bal(op(&mut c, 2, t2, read(0))).unwrap(), 7, "read-uncommitted allows dirty reads");
        } else if level == Isolation::ReadCommitted {
            // LK-5h: a lock-free reader is not aborted for waiting; it reads once the
            // writer is gone, and never the dirty value.
            let id = c.send(2, RequestBody::Op { txn: t2, op: read(0) });
            drain(&mut c);
            c.tick(4 * patience_ms());
            drain(&mut c);
            assert!(c.response(2, id).is_none(), "the read waits for the writer");
            c.call(1, RequestBody::Rollback { txn: t1 }).unwrap();
            c.tick(2 * TICK_INTERVAL_MS);
            drain(&mut c);
            let r = c.response(2, id).expect("answered once the writer rolled back").clone();
            let Ok(ResponseBody::Op(r)) = r else { panic!("{r:?}") };
            assert_ne!(row_bal(Ok(r)).unwrap(), 7, "read-committed forbids dirty reads");
            continue;
        } else {
            let r = row_bal(op_waits_then_dies(&mut c, 2, t2, read(0)));
            assert!(is_cc_abort(&r), "{level} forbids dirty reads: {r:?}");
        }
        c.call(1, RequestBody::Rollback { txn: t1 }).unwrap();
    }
}

/// Non-repeatable read (P2): allowed at read-committed (and below), forbidden from
/// repeatable-read up.
#[test]
fn anomaly_non_repeatable_read_per_level() {
    for level in Isolation::ALL {
        let mut c = bank_cluster(litmus_locking::ACID, 2);
        let t1 = begin(&mut c, 1, level);
        let t2 = begin(&mut c, 2, Isolation::Serializable);
        let first = row_bal(op(&mut c, 1, t1, read(0))).unwrap();
        if level <= Isolation::ReadCommitted {
            op(&mut c, 2, t2, write(0, 55)).unwrap();
            c.call(2, RequestBody::Commit { txn: t2 }).unwrap();
            let second = row_bal(op(&mut c, 1, t1, read(0))).unwrap();
            assert_ne!(first, second, "{level} allows non-repeatable reads");
        } else {
            let w = op_waits_then_dies(&mut c, 2, t2, write(0, 55));
            assert!(is_cc_abort(&w), "{level}: the writer must not overwrite a read-locked row");
            let second = row_bal(op(&mut c, 1, t1, read(0))).unwrap();
            assert_eq!(first, second, "{level} forbids non-repeatable reads");
        }
    }
}

/// Phantom (P3): allowed at repeatable-read and below, forbidden at serializable (range locks).
#[test]
fn anomaly_phantom_per_level() {
    for level in Isolation::ALL {
        let mut c = bank_cluster(litmus_locking::ACID, 2);
        let t1 = begin(&mut c, 1, level);
        let t2 = begin(&mut c, 2, Isolation::Serializable);
        let OpResult::Rows(before) = op(&mut c, 1, t1, scan()).unwrap() else { panic!() };
        let insert = Op::Insert { table: bank::ACCOUNTS.into(), row: vec![Value::Int(15), Value::Int(1)].into() };
        if level == Isolation::Serializable {
            let ins = op_waits_then_dies(&mut c, 2, t2, insert);
            assert!(is_cc_abort(&ins), "serializable forbids phantoms: {ins:?}");
            let OpResult::Rows(after) = op(&mut c, 1, t1, scan()).unwrap() else { panic!() };
            assert_eq!(before, after);
        } else {
            op(&mut c, 2, t2, insert).unwrap();
            c.call(2, RequestBody::Commit { txn: t2 }).unwrap();
            let OpResult::Rows(after) = op(&mut c, 1, t1, scan()).unwrap() else { panic!() };
            assert_eq!(after.len(), before.len() + 1, "{level} allows phantoms");
        }
    }
}

/// Two-phase commit: a transaction over three partitions commits atomically, and aborts
/// atomically when one participant fails (duplicate insert).
#[test]
fn two_phase_commit_is_atomic() {
    let mut c = bank_cluster(litmus_locking::ACID, 3);
    let t = begin(&mut c, 1, Isolation::Serializable);
    for id in 0..3 {
        op(&mut c, 1, t, write(id, 500)).unwrap();
    }
    assert_eq!(c.call(1, RequestBody::Commit { txn: t }).unwrap(), ResponseBody::Committed);
    assert_eq!(total(&mut c).unwrap(), (1500, 3));
    let t = begin(&mut c, 1, Isolation::Serializable);
    op(&mut c, 1, t, write(0, 1)).unwrap();
    op(&mut c, 1, t, write(1, 1)).unwrap();
    c.call(1, RequestBody::Rollback { txn: t }).unwrap();
    assert_eq!(total(&mut c).unwrap(), (1500, 3));
}

/// LK-5 (wait-die with patience) across a client's retries: the retry of a call carries
/// how long the client has been retrying (`retrying_for`), and the transaction gets the age of
/// its first attempt. A first attempt younger than the lock holder waits impatiently and dies
/// after the patience, changing nothing; its retry, whose first attempt began before the
/// holder, waits for it patiently — far beyond the patience — and then commits. Without this,
/// a transaction that keeps meeting older lock holders restarts as the youngest every time and
/// can starve (TPC-C Delivery under Salt did).
#[test]
fn wait_die_retry_keeps_the_first_attempts_age() {
    let mut c = bank_cluster(litmus_locking::ACID, 2);
    c.tick(100);
    let holder = begin(&mut c, 1, Isolation::Serializable);
    op(&mut c, 1, holder, write(0, 70)).unwrap();
    c.tick(5);
    let call = |retrying_for| transfer(0, 1, 10, retrying_for);
    // The first attempt began after the holder: younger, so it dies after the patience.
    assert!(is_cc_abort(&waits_then_dies(&mut c, 2, call(Duration::ZERO))));
    // The retry has been retrying since before the holder began: older, so it waits.
    let retry = c.send(2, call(Duration::from_millis(80)));
    c.settle(); // 1.2 s of ticks: many times the patience
    assert!(c.response(2, retry).is_none(), "the older retry waits for the holder");
    c.call(1, RequestBody::Commit { txn: holder }).unwrap();
    c.settle();
    assert!(matches!(c.response(2, retry), Some(Ok(ResponseBody::Returned(_)))), "{:?}", c.response(2, retry));
    assert_eq!((balance(&mut c, 0), balance(&mut c, 1)), (60, INITIAL + 10));
}

/// LK-5a: a younger requester behind a briefly held lock queues and is granted when the
/// holder commits within the patience — pure wait-die killed it at once (a hot row held for a
/// round trip made nearly every requester die and retry).
#[test]
fn rule_lk5a_younger_requester_is_granted_when_the_holder_commits_within_the_patience() {
    let mut c = bank_cluster(litmus_locking::ACID, 2);
    let t1 = begin(&mut c, 1, Isolation::Serializable);
    let t2 = begin(&mut c, 2, Isolation::Serializable);
    op(&mut c, 1, t1, write(0, 1)).unwrap();
    let w = c.send(2, RequestBody::Op { txn: t2, op: write(0, 2) });
    drain(&mut c);
    c.tick(patience_ms() / 2);
    drain(&mut c);
    assert!(c.response(2, w).is_none(), "the younger writer queues");
    let commit = c.send(1, RequestBody::Commit { txn: t1 });
    drain(&mut c);
    assert_eq!(c.response(1, commit), Some(&Ok(ResponseBody::Committed)));
    assert_eq!(c.response(2, w), Some(&Ok(ResponseBody::Op(OpResult::Done))), "granted, not killed");
    // Well past the patience: it holds the lock now, nothing aborts it.
    c.tick(3 * patience_ms());
    assert_eq!(c.call(2, RequestBody::Commit { txn: t2 }).unwrap(), ResponseBody::Committed);
    assert_eq!(balance(&mut c, 0), 2);
}

/// Two serializable transactions a tick apart: the older writes account `a` (10), the younger
/// account `b` (20); each holds its write lock.
fn older_and_younger_writers(c: &mut SyncCluster, a: i64, b: i64) -> (litmus_core::TxnId, litmus_core::TxnId) {
    let older = begin(c, 1, Isolation::Serializable);
    c.tick(1);
    let younger = begin(c, 2, Isolation::Serializable);
    op(c, 1, older, write(a, 10)).unwrap();
    op(c, 2, younger, write(b, 20)).unwrap();
    (older, younger)
}

/// LK-5a: a deadlock between a younger and an older transaction on two keys is broken
/// after the patience — the younger (waiting for the older) dies, the older (waiting for the
/// younger, a permanent wait) is then granted and commits.
#[test]
fn rule_lk5a_deadlock_between_younger_and_older_is_broken_after_the_patience() {
    for engine in [litmus_locking::ACID, litmus_locking::SALT] {
        let mut c = bank_cluster(engine, 3);
        let (older, younger) = older_and_younger_writers(&mut c, 0, 1);
        let y = c.send(2, RequestBody::Op { txn: younger, op: write(0, 21) }); // younger → older
        drain(&mut c);
        let o = c.send(1, RequestBody::Op { txn: older, op: write(1, 11) }); // older → younger
        drain(&mut c);
        c.tick(patience_ms() - TICK_INTERVAL_MS);
        drain(&mut c);
        assert!(c.response(2, y).is_none() && c.response(1, o).is_none(), "{engine}: both wait (a deadlock)");
        c.tick(2 * TICK_INTERVAL_MS);
        drain(&mut c);
        assert!(is_cc_abort(c.response(2, y).expect("the younger dies")), "{engine}: {:?}", c.response(2, y));
        assert_eq!(c.response(1, o), Some(&Ok(ResponseBody::Op(OpResult::Done))), "{engine}: the older gets through");
        assert_eq!(c.call(1, RequestBody::Commit { txn: older }).unwrap(), ResponseBody::Committed, "{engine}");
        assert_eq!((balance(&mut c, 0), balance(&mut c, 1)), (10, 11), "{engine}");
    }
}

/// A queue consumer's read of its head: the first row from `start` (accounts 10..20 are the queue).
fn queue_head(start: i64) -> Op {
    Op::Scan { table: bank::ACCOUNTS.into(), start: vec![Value::Int(start)], end: Some(vec![Value::Int(20)]), limit: 1 }
}

fn delete_account(id: i64) -> Op {
    Op::Delete { table: bank::ACCOUNTS.into(), key: vec![Value::Int(id)] }
}

/// A queue consumer's reply: the first row's key, `None` for an empty queue.
fn head_row(r: Option<Result<ResponseBody, Error>>) -> Option<i64> {
    match r {
        Some(Ok(ResponseBody::Op(OpResult::Rows(rows)))) => rows.first().map(|row| row[0].as_int().unwrap()),
        other => panic!("{other:?}"),
    }
}

/// Client `a.0`'s transaction consumes the queue's head (account 10) while `b.0`'s waits for
/// it: the table is learnt as a queue. Then `a` commits and `b`, granted the anchor, reads the
/// next head (11) and holds the anchor.
fn learn_queue(c: &mut SyncCluster, engine: EngineKind, a: (u64, litmus_core::TxnId), b: (u64, litmus_core::TxnId)) {
    assert_eq!(head_row(Some(op(c, a.0, a.1, queue_head(10)).map(ResponseBody::Op))), Some(10), "{engine}");
    op(c, a.0, a.1, delete_account(10)).unwrap();
    let bs = c.send(b.0, RequestBody::Op { txn: b.1, op: queue_head(10) });
    drain(c);
    assert_eq!(c.call(a.0, RequestBody::Commit { txn: a.1 }).unwrap(), ResponseBody::Committed, "{engine}");
    drain(c);
    assert_eq!(head_row(c.response(b.0, bs).cloned()), Some(11), "{engine}: b got the next head");
}

/// LK-5a's exception (queue anchors): consumers of a table used as a queue — each
/// reads its head with a limited scan, then deletes it — take turns on the queue's anchor, and
/// one queued behind an older consumer that keeps working waits past the patience instead of
/// dying; it gets the head when the older one commits. (Known gap: if the older consumer
/// deletes its head while the other waits, the waiter is aborted; not yet understood.)
#[test]
fn rule_lk5a_queue_consumers_wait_their_turn_behind_a_working_consumer() {
    let (head, delete) = (queue_head, delete_account);
    let first = |r: Result<OpResult, Error>| match r {
        Ok(OpResult::Rows(rows)) => rows.first().map(|row| row[0].as_int().unwrap()),
        other => panic!("{other:?}"),
    };
    for engine in [litmus_locking::ACID, litmus_locking::SALT] {
        let mut c = bank_cluster(engine, 14);
        // a consumes the head (10); b, queued behind it, finds its head gone when a commits:
        // the table is now known as a queue.
        let a = begin(&mut c, 1, Isolation::Serializable);
        c.tick(1);
        let b = begin(&mut c, 2, Isolation::Serializable);
        c.tick(1);
        let late = begin(&mut c, 3, Isolation::Serializable);
        assert_eq!(first(op(&mut c, 1, a, head(10))), Some(10), "{engine}");
        op(&mut c, 1, a, delete(10)).unwrap();
        let bs = c.send(2, RequestBody::Op { txn: b, op: head(10) });
        drain(&mut c);
        assert_eq!(c.call(1, RequestBody::Commit { txn: a }).unwrap(), ResponseBody::Committed, "{engine}");
        drain(&mut c);
        let got = match c.response(2, bs).cloned() {
            Some(Ok(ResponseBody::Op(r))) => first(Ok(r)),
            other => panic!("{engine}: {other:?}"),
        };
        assert_eq!(got, Some(11), "{engine}: b got the next head");
        // The youngest consumer queues behind b on the anchor while b works on.
        let ls = c.send(3, RequestBody::Op { txn: late, op: head(10) });
        drain(&mut c);
        for _ in 0..4 * patience_ms() / TICK_INTERVAL_MS {
            c.tick(TICK_INTERVAL_MS);
            assert_eq!(first(op(&mut c, 2, b, head(10))), Some(11), "{engine}: b works on its queue");
            drain(&mut c);
            assert!(
                c.response(3, ls).is_none(),
                "{engine}: the consumer behind b waits while b works: {:?}",
                c.response(3, ls)
            );
        }
        assert_eq!(c.call(2, RequestBody::Commit { txn: b }).unwrap(), ResponseBody::Committed, "{engine}");
        drain(&mut c);
        let got = match c.response(3, ls).cloned() {
            Some(Ok(ResponseBody::Op(r))) => first(Ok(r)),
            other => panic!("{engine}: {other:?}"),
        };
        assert_eq!(got, Some(11), "{engine}: the next consumer gets the head b left");
        assert_eq!(c.call(3, RequestBody::Commit { txn: late }).unwrap(), ResponseBody::Committed, "{engine}");
    }
}

/// LK-5a's exception counts a transaction as working from when its operation last *ran*
/// here, not when it arrived: a consumer granted the queue's head after waiting longer than
/// `RUNNING_WITHIN` behind another has just started working, and the consumer queued behind it
/// waits on. (Counting from arrival made TPC-C Deliveries of one warehouse under `salt` die in
/// chains: each one granted the anchor looked idle to the next.)
#[test]
fn rule_lk5a_a_consumer_granted_after_a_long_wait_counts_as_working() {
    let (head, first) = (queue_head, head_row);
    for engine in [litmus_locking::ACID, litmus_locking::SALT] {
        let mut c = bank_cluster(engine, 14);
        let txns: Vec<_> = (1..=4)
            .map(|client| {
                let t = begin(&mut c, client, Isolation::Serializable);
                c.tick(1);
                t
            })
            .collect();
        let (a, b, late, last) = (txns[0], txns[1], txns[2], txns[3]);
        learn_queue(&mut c, engine, (1, a), (2, b));
        // late queues behind b on the anchor for longer than RUNNING_WITHIN while b works.
        let ls = c.send(3, RequestBody::Op { txn: late, op: head(10) });
        drain(&mut c);
        let works = RUNNING_WITHIN.as_millis() as u64 + 4 * patience_ms();
        for _ in 0..works / TICK_INTERVAL_MS {
            c.tick(TICK_INTERVAL_MS);
            assert_eq!(first(Some(op(&mut c, 2, b, head(10)).map(ResponseBody::Op))), Some(11), "{engine}");
            drain(&mut c);
        }
        assert!(c.response(3, ls).is_none(), "{engine}: late waits behind the working b");
        // last queues behind late; b commits and late is granted the head. (b deletes nothing
        // here: a consumer that deletes its head while others wait behind it on the anchor
        // aborts them — the known gap noted above.)
        let xs = c.send(4, RequestBody::Op { txn: last, op: head(10) });
        drain(&mut c);
        assert!(c.response(3, ls).is_none(), "{engine}: late still waits");
        assert_eq!(c.call(2, RequestBody::Commit { txn: b }).unwrap(), ResponseBody::Committed, "{engine}");
        drain(&mut c);
        assert_eq!(first(c.response(3, ls).cloned()), Some(11), "{engine}: late gets the head b left");
        // late now works (it just ran its scan); last, long past its patience, waits on.
        for _ in 0..4 * patience_ms() / TICK_INTERVAL_MS {
            c.tick(TICK_INTERVAL_MS);
            drain(&mut c);
            assert!(c.response(4, xs).is_none(), "{engine}: last waits behind late: {:?}", c.response(4, xs));
        }
        assert_eq!(c.call(3, RequestBody::Commit { txn: late }).unwrap(), ResponseBody::Committed, "{engine}");
        drain(&mut c);
        assert_eq!(first(c.response(4, xs).cloned()), Some(11), "{engine}: then last gets its turn");
        assert_eq!(c.call(4, RequestBody::Commit { txn: last }).unwrap(), ResponseBody::Committed, "{engine}");
    }
}

/// LK-5a's exception looks at an anchor's holders only: consumers queued on a queue's anchor
/// wait for whoever holds it, however many queue ahead of them. A queue longer than the bound
/// on how many transactions the exception examines (`ALIVE_VISITS_MAX`, 64) would make every
/// consumer at its back die after the patience although the holder works (at 128 TPC-C
/// clients on 2 warehouses, 64 Deliveries queue on each district's anchor). Here 70
/// consumers queue behind a working one, and none dies; when it commits, the next is granted.
#[test]
fn rule_lk5a_a_long_queue_of_consumers_waits_behind_a_working_holder() {
    let (head, first) = (queue_head, head_row);
    const QUEUED: u64 = 70;
    for engine in [litmus_locking::ACID, litmus_locking::SALT_LOCAL] {
        let mut c = bank_cluster(engine, 14);
        let a = begin(&mut c, 1, Isolation::Serializable);
        c.tick(1);
        let b = begin(&mut c, 2, Isolation::Serializable);
        c.tick(1);
        let queued: Vec<(u64, _)> = (0..QUEUED)
            .map(|i| {
                let client = 100 + i;
                (client, begin(&mut c, client, Isolation::Serializable))
            })
            .collect();
        learn_queue(&mut c, engine, (1, a), (2, b));
        let waits: Vec<(u64, u64)> = queued
            .iter()
            .map(|&(client, t)| (client, c.send(client, RequestBody::Op { txn: t, op: head(10) })))
            .collect();
        drain(&mut c);
        for _ in 0..4 * patience_ms() / TICK_INTERVAL_MS {
            c.tick(TICK_INTERVAL_MS);
            assert_eq!(first(Some(op(&mut c, 2, b, head(10)).map(ResponseBody::Op))), Some(11), "{engine}");
            drain(&mut c);
        }
        let died = waits.iter().filter(|(client, id)| c.response(*client, *id).is_some()).count();
        assert_eq!(died, 0, "{engine}: {died} of {QUEUED} consumers behind the working b died");
        assert_eq!(c.call(2, RequestBody::Commit { txn: b }).unwrap(), ResponseBody::Committed, "{engine}");
        drain(&mut c);
        let (client, id) = waits[0];
        assert_eq!(first(c.response(client, id).cloned()), Some(11), "{engine}: the first in the queue is next");
    }
}

/// LK-5a's exception covers waits for accepted BASE transactions: they cannot abort, so a
/// younger ACID transaction behind a working one's saline lock waits past its patience instead
/// of dying (TPC-C Stock-Levels behind New-Orders under `salt` would die of it); and LK-5b
/// does not wound an older blocker that works. Working counts operations run here since the
/// wait began. Here, on one partition: an older ACID writer holds account `to`; a BASE transfer
/// `from` → `to`, accepted after its debit, waits for it; a younger ACID reader of `from` waits
/// for the transfer's saline lock, and the transfer waits for the writer, who keeps working
/// there. Nobody dies: the writer commits, the transfer ends, the reader reads the debited
/// balance. On a different partition the same reader dies after the patience: the transfer
/// runs nothing there, and for all that partition knows it waits for the reader elsewhere.
#[test]
fn rule_lk5a_acid_waits_out_a_working_base_transaction_and_rule5b_spares_a_working_blocker() {
    let accounts = 12;
    let table = bank::catalog().table_by_name(bank::ACCOUNTS).unwrap().clone();
    let part = |id: i64| table.partition_of(&[Value::Int(id)], 3);
    let mut same: Vec<i64> = (1..accounts).filter(|id| part(*id) == part(0)).collect();
    let elsewhere = (1..accounts).find(|id| part(*id) != part(0)).unwrap();
    assert!(same.len() >= 2, "accounts on partition {:?}: {same:?}", part(0));
    let (from_here, busy) = (same.remove(0), same.remove(0));
    for (from, reader_dies) in [(from_here, false), (elsewhere, true)] {
        let mut c = bank_cluster(litmus_locking::SALT, accounts);
        let older = begin(&mut c, 1, Isolation::Serializable);
        op(&mut c, 1, older, write(0, 50)).unwrap();
        c.tick(1);
        let call = c.send(2, transfer(from, 0, 10, Duration::ZERO));
        drain(&mut c);
        assert!(matches!(c.response(2, call), Some(Ok(ResponseBody::Returned(_)))), "accepted after the debit");
        c.tick(1);
        let younger = begin(&mut c, 3, Isolation::Serializable);
        let r = c.send(3, RequestBody::Op { txn: younger, op: read(from) });
        drain(&mut c);
        for _ in 0..4 * patience_ms() / TICK_INTERVAL_MS {
            c.tick(TICK_INTERVAL_MS);
            drain(&mut c);
            if !reader_dies {
                assert!(c.response(3, r).is_none(), "the reader waits for the transfer: {:?}", c.response(3, r));
            }
            // The older writer keeps working beside the transfer's wait.
            op(&mut c, 1, older, read(busy)).unwrap();
        }
        if reader_dies {
            let dead = c.response(3, r).cloned();
            assert!(matches!(dead, Some(Err(Error::Abort(_)))), "from {from}: {dead:?}");
        }
        assert_eq!(c.call(1, RequestBody::Commit { txn: older }), Ok(ResponseBody::Committed), "not wounded");
        drain(&mut c);
        if !reader_dies {
            assert_eq!(
                row_bal(c.response(3, r).cloned().expect("answered").map(|b| match b {
                    ResponseBody::Op(o) => o,
                    other => panic!("{other:?}"),
                })),
                Ok(INITIAL - 10)
            );
            assert_eq!(c.call(3, RequestBody::Commit { txn: younger }), Ok(ResponseBody::Committed));
        }
        c.settle();
        assert_eq!((balance(&mut c, 0), balance(&mut c, from)), (60, INITIAL - 10), "from {from}");
    }
}

/// 2PC with presumed abort: a participant that voted yes asks its coordinator for the decision
/// only after `IN_DOUBT_QUERY_AFTER`. A query that reaches a coordinator still collecting votes
/// aborts the transaction, so a participant that asked at its next sweep aborted healthy
/// transactions whenever another participant's vote was slower than the sweep (a TPC-C load
/// failed so on a loaded machine). Here partition 1's `Prepare` is held back 300 ms while
/// partition 0 has voted yes and its sweeps run: the transfer still commits.
#[test]
fn two_pc_participant_waits_before_querying_a_coordinator_that_collects_votes() {
    use litmus_locking;
    use litmus_protocol::message::Message;
    let mut c = bank_cluster(litmus_locking::ACID, 3);
    let is_prepare_to_p1 = |env: &litmus_protocol::Envelope| {
        env.to == litmus_protocol::Addr::Partition(litmus_core::PartitionId(1))
            && matches!(&env.msg, Message::PartitionRequest(r)
                if matches!(r.body.peek::<litmus_locking::Request>(), Some(litmus_locking::Request::Prepare { .. })))
    };
    // Accounts 0 and 1 live on partitions 0 and 1 (key mod 3): the ACID transfer is a 2PC.
    let id = c.send(1, transfer(0, 1, 10, Duration::ZERO));
    while !c.queue.iter().any(is_prepare_to_p1) {
        assert!(c.deliver_one(), "the transfer never reached its prepare phase");
    }
    let at = c.queue.iter().position(is_prepare_to_p1).expect("found");
    let held = c.queue.remove(at).expect("found");
    for _ in 0..3 {
        while c.deliver_one() {}
        c.tick(100); // partition 0 is in doubt across three sweeps
    }
    c.requeue(held);
    c.settle();
    assert!(matches!(c.response(1, id), Some(Ok(ResponseBody::Returned(_)))), "{:?}", c.response(1, id));
    assert_eq!((balance(&mut c, 0), balance(&mut c, 1)), (INITIAL - 10, INITIAL + 10));
}

fn insert(id: i64) -> Op {
    Op::Insert { table: bank::ACCOUNTS.into(), row: vec![Value::Int(id), Value::Int(1)].into() }
}
fn scan_ids(r: Result<OpResult, Error>) -> Vec<i64> {
    match r.unwrap() {
        OpResult::Rows(rows) => rows.iter().map(|r| r[0].as_int().unwrap()).collect(),
        other => panic!("{other:?}"),
    }
}

/// Accounts 10, 16 and 25 (all on partition 1: key mod 3) and a scan of `[10, 30)` that
/// returns at most two rows.
fn three_accounts_and_a_scan_of_two() -> (SyncCluster, Op) {
    let mut c = bank_cluster(litmus_locking::ACID, 0);
    for id in [10, 16, 25] {
        c.proc(0, "bank_open", vec![Value::Int(id), Value::Int(INITIAL)]).unwrap();
    }
    let scan2 = Op::Scan {
        table: bank::ACCOUNTS.into(),
        start: vec![Value::Int(10)],
        end: Some(vec![Value::Int(30)]),
        limit: 2,
    };
    (c, scan2)
}

/// LK-4 with next-key narrowing: a serializable scan that returns its `limit` rows locks
/// its range only up to the last row it returned. An insert after that row cannot change its
/// result and goes ahead; one before it is a phantom and waits (or dies). Accounts 10, 16 and
/// 25 all live on partition 1 (key mod 3).
#[test]
fn rule_lk4_next_key_limited_scan_locks_only_up_to_its_last_row() {
    let (mut c, scan2) = three_accounts_and_a_scan_of_two();
    let reader = begin(&mut c, 1, Isolation::Serializable);
    assert_eq!(scan_ids(op(&mut c, 1, reader, scan2.clone())), vec![10, 16]);
    // After the last row read: granted at once, and commits.
    let tail = begin(&mut c, 2, Isolation::Serializable);
    op(&mut c, 2, tail, insert(19)).unwrap();
    c.call(2, RequestBody::Commit { txn: tail }).unwrap();
    // Inside the rows read: a phantom, it must not be granted while the reader holds its lock.
    let inside = begin(&mut c, 3, Isolation::Serializable);
    let ins = c.send(3, RequestBody::Op { txn: inside, op: insert(13) });
    while c.deliver_one() {} // no ticks: an idle transaction is an orphan after 2 s
    let r = c.response(3, ins);
    assert!(r.is_none_or(is_cc_abort), "{r:?}");
    assert_eq!(scan_ids(op(&mut c, 1, reader, scan2)), vec![10, 16], "repeatable under serializable");
    c.call(1, RequestBody::Commit { txn: reader }).unwrap();
}

/// Next-key narrowing when the guess goes stale: the range to lock is guessed from committed
/// rows, but a row inside it is deleted by a transaction the scan waits for. After the delete
/// commits the scan's result reaches past the locked prefix, so the partition locks the rest of
/// the range and scans again; the whole range is then protected.
#[test]
fn rule_lk4_next_key_limited_scan_relocks_when_rows_vanish_while_it_waits() {
    let (mut c, scan2) = three_accounts_and_a_scan_of_two();
    let reader = begin(&mut c, 1, Isolation::Serializable); // older: it waits, never dies
    c.tick(5);
    let deleter = begin(&mut c, 2, Isolation::Serializable);
    op(&mut c, 2, deleter, Op::Delete { table: bank::ACCOUNTS.into(), key: vec![Value::Int(16)] }).unwrap();
    let s = c.send(1, RequestBody::Op { txn: reader, op: scan2 });
    while c.deliver_one() {} // no ticks: an idle transaction is an orphan after 2 s
    assert!(c.response(1, s).is_none(), "the scan waits for the delete's lock");
    c.call(2, RequestBody::Commit { txn: deleter }).unwrap();
    while c.deliver_one() {} // no ticks: an idle transaction is an orphan after 2 s
    let Some(Ok(ResponseBody::Op(rows))) = c.response(1, s).cloned() else { panic!("{:?}", c.response(1, s)) };
    assert_eq!(scan_ids(Ok(rows)), vec![10, 25]);
    // The rest of the range is locked now: an insert between 16 and 25 is a phantom.
    let inside = begin(&mut c, 3, Isolation::Serializable);
    let ins = c.send(3, RequestBody::Op { txn: inside, op: insert(19) });
    while c.deliver_one() {} // no ticks: an idle transaction is an orphan after 2 s
    let r = c.response(3, ins);
    assert!(r.is_none_or(is_cc_abort), "{r:?}");
    c.call(1, RequestBody::Commit { txn: reader }).unwrap();
}

/// LK-5b with patience: an accepted BASE transaction that waits for an older ACID
/// transaction's lock wounds it only once it has waited `LOCK_WAIT_PATIENCE`. (Wounding at once
/// aborted TPC-C New-Orders whose `w_tax` read met an accepted Payment's `w_ytd` update, a lock
/// held for one round trip.) Here the accepted transfer 1 → 0 waits for the ACID holder of
/// account 0. A holder that commits within the patience is left alone. A holder that instead
/// asks for account 1 — saline-locked by the transfer's debit, so the two are deadlocked —
/// is wounded once the patience has run out, and the transfer completes. Accounts 1 and 0 live
/// on partitions 1 and 0.
#[test]
fn rule_lk5b_accepted_base_wounds_an_older_blocker_only_after_the_patience() {
    for deadlock in [false, true] {
        let mut c = bank_cluster(litmus_locking::SALT, 2);
        let acid = begin(&mut c, 1, Isolation::Serializable);
        op(&mut c, 1, acid, write(0, 50)).unwrap();
        c.tick(1);
        let call = c.send(2, transfer(1, 0, 10, Duration::ZERO));
        drain(&mut c);
        assert!(matches!(c.response(2, call), Some(Ok(ResponseBody::Returned(_)))), "accepted after the debit");
        c.tick(patience_ms() / 2);
        drain(&mut c);
        if !deadlock {
            assert_eq!(c.call(1, RequestBody::Commit { txn: acid }), Ok(ResponseBody::Committed), "not wounded");
        } else {
            // Accounts 0 and 1 live on different partitions: the cycle spans both. Where the
            // transfer waits, the ACID holder ran nothing since the wait began (it waits at the
            // other partition), so it does not count as working and is wounded.
            let read = c.send(1, RequestBody::Op { txn: acid, op: read(1) });
            drain(&mut c);
            assert!(c.response(1, read).is_none(), "the ACID holder waits for the transfer's saline lock");
            c.tick(patience_ms());
            drain(&mut c);
            let r = c.response(1, read).cloned();
            assert_eq!(r, Some(Err(Error::Abort(AbortReason::Wounded))), "wounded after the patience");
        }
        c.settle();
        let zero = if deadlock { INITIAL } else { 50 } + 10;
        assert_eq!((balance(&mut c, 0), balance(&mut c, 1)), (zero, INITIAL - 10), "deadlock {deadlock}");
    }
}

/// LK-5c: a deadlock on one partition is broken when it forms, without waiting out the
/// patience — the younger transaction (the one waiting for an older) dies, the older is granted.
/// Accounts 0 and 3 both live on partition 0. No time passes in this test.
#[test]
fn rule_lk5c_local_deadlock_is_broken_at_once() {
    for engine in [litmus_locking::ACID, litmus_locking::SALT] {
        let mut c = bank_cluster(engine, 4);
        let (older, younger) = older_and_younger_writers(&mut c, 0, 3);
        let y = c.send(2, RequestBody::Op { txn: younger, op: write(0, 21) });
        drain(&mut c);
        assert!(c.response(2, y).is_none(), "{engine}: younger waits (no cycle yet)");
        let o = c.send(1, RequestBody::Op { txn: older, op: write(3, 11) });
        drain(&mut c);
        let r = c.response(2, y).cloned();
        assert!(r.as_ref().is_some_and(is_cc_abort), "{engine}: the younger dies at once: {r:?}");
        c.call(2, RequestBody::Rollback { txn: younger }).ok();
        drain(&mut c);
        assert_eq!(c.response(1, o), Some(&Ok(ResponseBody::Op(OpResult::Done))), "{engine}");
        assert_eq!(c.call(1, RequestBody::Commit { txn: older }).unwrap(), ResponseBody::Committed);
        assert_eq!((balance(&mut c, 0), balance(&mut c, 3)), (10, 11), "{engine}");
    }
}

/// A partition that restarts between two operations of an ACID transaction has lost the
/// transaction's locks and buffered writes (both volatile before prepare). The transaction's
/// later operation reaches the new incarnation, which knows nothing of the earlier ones; the
/// commit must then fail, or the write images computed under the lost locks overwrite what
/// another transaction committed in between — a lost update (found by `litmus sim --workload
/// bank --engine acid` with crashes). Both commit paths: one participant (one-phase `Commit`)
/// and two (2PC `Prepare`).
#[test]
fn acid_commit_fails_after_a_participant_lost_its_earlier_operations() {
    for two_phase in [false, true] {
        // Accounts 0 and 3 live on partition 0, account 1 on partition 1.
        let mut c = bank_cluster(litmus_locking::ACID, 4);
        let t1 = begin(&mut c, 1, Isolation::Serializable);
        let bal = row_bal(op(&mut c, 1, t1, read(0))).unwrap();
        op(&mut c, 1, t1, write(0, bal - 50)).unwrap();
        if two_phase {
            op(&mut c, 1, t1, write(1, INITIAL)).unwrap();
        }
        c.crash_partition(0);
        // T1's write lock on account 0 is gone: T2 moves 70 from account 0 to account 2.
        let t2 = begin(&mut c, 2, Isolation::Serializable);
        let b0 = row_bal(op(&mut c, 2, t2, read(0))).unwrap();
        op(&mut c, 2, t2, write(0, b0 - 70)).unwrap();
        let b2 = row_bal(op(&mut c, 2, t2, read(2))).unwrap();
        op(&mut c, 2, t2, write(2, b2 + 70)).unwrap();
        c.call(2, RequestBody::Commit { txn: t2 }).unwrap();
        // T1 goes on at the new incarnation of partition 0 and tries to commit.
        let later = op(&mut c, 1, t1, write(3, INITIAL + 50));
        let commit = c.call(1, RequestBody::Commit { txn: t1 });
        assert!(later.is_err() || commit.is_err(), "two_phase {two_phase}: T1 committed: {commit:?}");
        // The new incarnation refuses the later operation (it names the incarnation that ran the
        // earlier ones, `Request::Op::incarnation`); were it run, the commit would be refused.
        let aborted = matches!(later, Err(Error::Abort(_))) || matches!(commit, Err(Error::Abort(_)));
        assert!(aborted, "two_phase {two_phase}: retryable abort, got {later:?} then {commit:?}");
        c.settle();
        assert_eq!(balance(&mut c, 0), INITIAL - 70, "two_phase {two_phase}: T2's debit survives");
        assert_eq!(total(&mut c).unwrap(), (4 * INITIAL, 4), "two_phase {two_phase}: money is conserved");
    }
}

fn is_op_to(env: &litmus_protocol::Envelope, part: u32) -> bool {
    use litmus_locking;
    use litmus_protocol::message::Message;
    env.to == litmus_protocol::Addr::Partition(litmus_core::PartitionId(part))
        && matches!(&env.msg, Message::PartitionRequest(r)
            if matches!(r.body.peek::<litmus_locking::Request>(), Some(litmus_locking::Request::Op { .. })))
}

/// Delivers messages until one operation request to partition `part` has been delivered.
fn deliver_through_op_to(c: &mut SyncCluster, part: u32) {
    loop {
        let next = c.queue.front().expect("the operation is on its way").clone();
        c.deliver_one();
        if is_op_to(&next, part) {
            return;
        }
    }
}

/// The BASE counterpart of the test above. A subtransaction's locks are logged (`Locked`) and
/// relocked when its partition restarts, but the partition's record of the transaction comes
/// back without its run number or buffered writes. Were the subtransaction's next operation at
/// the new incarnation taken for a new run, the partition would roll the unit back and release
/// its locks while the coordinator still holds the first operation's write image — and commits
/// it over what another transaction wrote in between (a lost update). It fails instead.
#[test]
fn base_subtransaction_fails_after_its_partition_restarts_between_operations() {
    let mut r = bank::registry();
    r.register_with("two_writes", vec![], ProcOptions::base(), |ctx: Ctx, _args: Vec<Value>| async move {
        ctx.begin_alkaline().await?;
        ctx.update(bank::ACCOUNTS, &[Value::Int(0)], &[("bal", Formula::Add(Value::Int(10)))]).await?;
        ctx.update(bank::ACCOUNTS, &[Value::Int(3)], &[("bal", Formula::Add(Value::Int(0)))]).await?;
        ctx.end_alkaline().await?;
        Ok(vec![])
    });
    for engine in [litmus_locking::SALT, litmus_locking::SALT_LOCAL] {
        // Accounts 0 and 3 live on partition 0.
        let mut c = SyncCluster::new(engine, bank::catalog(), r.clone(), 3);
        for id in 0..4 {
            c.proc(0, "bank_open", vec![Value::Int(id), Value::Int(INITIAL)]).unwrap();
        }
        let call = RequestBody::Call { procedure: "two_writes".into(), args: vec![], retrying_for: Duration::ZERO };
        let id = c.send(1, call);
        deliver_through_op_to(&mut c, 0); // the first update ran (and logged its locks)
        c.crash_partition(0);
        deliver_through_op_to(&mut c, 0); // the second update reaches the new incarnation
                                          // Hold its answer back while an ACID transaction adds 70 to account 0.
        let p0 = litmus_protocol::Addr::Partition(litmus_core::PartitionId(0));
        let held: Vec<_> = c.queue.iter().filter(|e| e.from == p0).cloned().collect();
        c.queue.retain(|e| e.from != p0);
        let t2 = begin(&mut c, 2, Isolation::Serializable);
        let mut t2_committed = false;
        if let Ok(b0) = row_bal(op(&mut c, 2, t2, read(0))) {
            if op(&mut c, 2, t2, write(0, b0 + 70)).is_ok() {
                t2_committed = c.call(2, RequestBody::Commit { txn: t2 }).is_ok();
            }
        }
        for e in held {
            c.requeue(e);
        }
        c.settle();
        let base_committed = matches!(c.response(1, id), Some(Ok(_)));
        let expected = INITIAL + if base_committed { 10 } else { 0 } + if t2_committed { 70 } else { 0 };
        assert_eq!(
            balance(&mut c, 0),
            expected,
            "{engine}: BASE committed {base_committed}, ACID +70 committed {t2_committed}"
        );
        assert_eq!(balance(&mut c, 3), INITIAL, "{engine}");
    }
}
