//! The locking engine over a lossy network and restarting partitions: operations are resent
//! (`OP_RESEND_AFTER`), a resend is told apart from the network's duplicates, and an operation
//! of a unit whose partition restarted since answering it is refused
//! (`Request::Op::incarnation`).
//!
//! What they prevent, as `litmus sim --workload tpcc-neworder --engine acid --faults` shows:
//! a lost operation stalling its transaction for the coordinator's 10 s stall timeout (seed
//! 20001's load would never finish); and a New-Order's insert resent to a restarted partition
//! running there alone and failing as a duplicate key (seed 30186), an error that is not the
//! transaction's own.

use litmus_core::{AbortReason, Error, Isolation, TxnId, Value};
use litmus_locking::coordinator::OP_RESEND_AFTER;
use litmus_locking::{Reply, Request};
use litmus_protocol::builtin::bank;
use litmus_protocol::message::{Batched, RequestBody, ResponseBody};
use litmus_protocol::op::{Op, OpResult};
use litmus_protocol::testkit::SyncCluster;
use litmus_protocol::{Addr, Ctx, Message, Registry};
use std::collections::BTreeMap;
use std::time::Duration;

const PARTITIONS: u32 = 3;

/// Accounts `read_all` reads: more than partitions, so some partition holds two.
const READ_ALL: i64 = 8;

/// The bank's procedures, and `read_all`: reads accounts `0..READ_ALL`, all operations issued
/// at once, and returns the sum of their balances.
fn registry() -> Registry {
    let mut r = bank::registry();
    r.register("read_all", vec![], |ctx: Ctx, _args: Vec<Value>| async move {
        let reads: Vec<_> = (0..READ_ALL).map(|id| ctx.op(read(id))).collect();
        let mut sum = 0;
        for f in reads {
            if let OpResult::Row(Some(row)) = f.await? {
                sum += row[1].as_int().unwrap_or(0);
            }
        }
        Ok(vec![Value::Int(sum)])
    });
    r
}

fn cluster() -> SyncCluster {
    let mut c = SyncCluster::new(litmus_locking::ACID, bank::catalog(), registry(), PARTITIONS);
    for id in 0..4 {
        c.proc(0, "bank_open", vec![Value::Int(id), Value::Int(100)]).unwrap();
    }
    c
}

fn begin(c: &mut SyncCluster, client: u64) -> TxnId {
    c.begin(client, Isolation::Serializable)
}

fn read(id: i64) -> Op {
    Op::Read { table: bank::ACCOUNTS.into(), key: vec![Value::Int(id)] }
}

fn insert(id: i64, bal: i64) -> Op {
    Op::Insert { table: bank::ACCOUNTS.into(), row: vec![Value::Int(id), Value::Int(bal)].into() }
}

fn balance(c: &mut SyncCluster, id: i64) -> Option<i64> {
    let t = begin(c, 50);
    let r = c.call(50, RequestBody::Op { txn: t, op: read(id) }).unwrap();
    c.call(50, RequestBody::Commit { txn: t }).unwrap();
    match r {
        ResponseBody::Op(OpResult::Row(row)) => row.map(|r| r[1].as_int().unwrap()),
        other => panic!("not a row: {other:?}"),
    }
}

fn is_op_request(msg: &Message) -> bool {
    matches!(msg, Message::PartitionRequest(r) if matches!(r.body.peek::<Request>(), Some(Request::Op { .. })))
}

fn is_op_reply(msg: &Message) -> bool {
    matches!(msg, Message::PartitionReply(r) if matches!(r.body.peek::<Reply>(), Some(Reply::Op { .. })))
}

/// Delivers until the next message is one `drop` picks, and drops it (the network lost it).
fn lose_next(c: &mut SyncCluster, drop: fn(&Message) -> bool) {
    loop {
        let next = c.queue.front().expect("the message to lose comes");
        if drop(&next.msg) {
            c.queue.pop_front();
            return;
        }
        c.deliver_one();
    }
}

/// Ticks the cluster past `OP_RESEND_AFTER`, delivering as it goes.
fn wait_out_resend(c: &mut SyncCluster) {
    let steps = (OP_RESEND_AFTER.as_millis() as u64 / 10) * 2;
    for _ in 0..steps {
        c.tick(10);
        while c.deliver_one() {}
    }
}

/// A lost operation is sent again and runs: the transaction commits, without waiting for the
/// coordinator's stall timeout.
#[test]
fn a_lost_operation_is_resent_and_runs() {
    let mut c = cluster();
    let t = begin(&mut c, 1);
    let id = c.send(1, RequestBody::Op { txn: t, op: insert(9, 70) });
    lose_next(&mut c, is_op_request);
    while c.deliver_one() {}
    assert!(c.response(1, id).is_none(), "the insert was lost: nothing answers it yet");
    wait_out_resend(&mut c);
    assert_eq!(c.response(1, id), Some(&Ok(ResponseBody::Op(OpResult::Done))), "the resent insert ran");
    c.call(1, RequestBody::Commit { txn: t }).unwrap();
    assert_eq!(balance(&mut c, 9), Some(70));
}

/// An operation whose reply was lost is not run twice: the partition keeps no copy of replies,
/// so it fails the resend with a retryable abort, and nothing the transaction did commits.
#[test]
fn a_resent_operation_answered_already_fails_retryably() {
    let mut c = cluster();
    let t = begin(&mut c, 1);
    let id = c.send(1, RequestBody::Op { txn: t, op: insert(9, 70) });
    lose_next(&mut c, is_op_reply);
    while c.deliver_one() {}
    assert!(c.response(1, id).is_none(), "the reply was lost");
    wait_out_resend(&mut c);
    let r = c.response(1, id).expect("the resend is answered").clone();
    assert!(matches!(r, Err(Error::Abort(AbortReason::Failure))), "a retryable abort, got {r:?}");
    c.settle();
    assert_eq!(balance(&mut c, 9), None, "the rolled-back insert is not visible");
}

/// A network duplicate of an operation answered already is dropped: only
/// the coordinator's own resend (`resent`) is answered with an abort.
#[test]
fn a_network_duplicate_of_an_answered_operation_is_dropped() {
    let mut c = cluster();
    let t = begin(&mut c, 1);
    let id = c.send(1, RequestBody::Op { txn: t, op: insert(9, 70) });
    loop {
        let next = c.queue.front().expect("the insert goes out");
        if is_op_request(&next.msg) {
            // The duplicate reaches the partition right behind the original, and whatever the
            // partition answers it overtakes the original's reply on the way back.
            let dup = next.clone();
            c.deliver_one();
            c.queue.push_front(dup);
            c.deliver_one();
            let replies: Vec<usize> = (0..c.queue.len()).filter(|&i| is_op_reply(&c.queue[i].msg)).collect();
            if let [first, .., last] = replies[..] {
                c.queue.swap(first, last);
            }
            break;
        }
        c.deliver_one();
    }
    while c.deliver_one() {}
    assert_eq!(c.response(1, id), Some(&Ok(ResponseBody::Op(OpResult::Done))));
    c.call(1, RequestBody::Commit { txn: t }).unwrap();
    assert_eq!(balance(&mut c, 9), Some(70));
}

/// An operation sent to a partition that restarted after answering an earlier operation of the
/// unit is refused with a retryable abort, not run alone: here the insert of a key that the
/// transaction found free before the restart, and that another transaction took since, would
/// fail as a duplicate key — an error that is not the transaction's own.
#[test]
fn an_operation_after_its_partition_restarted_is_refused() {
    let mut c = cluster();
    let t = begin(&mut c, 1);
    let r = c.call(1, RequestBody::Op { txn: t, op: read(9) }).unwrap();
    assert_eq!(r, ResponseBody::Op(OpResult::Row(None)), "account 9 is free");
    for p in 0..PARTITIONS {
        c.crash_partition(p);
    }
    c.proc(2, "bank_open", vec![Value::Int(9), Value::Int(5)]).unwrap();
    let r = c.call(1, RequestBody::Op { txn: t, op: insert(9, 70) });
    assert!(matches!(r, Err(Error::Abort(AbortReason::Failure))), "a retryable abort, got {r:?}");
    c.settle();
    assert_eq!(balance(&mut c, 9), Some(5));
}

/// The coordinator remembers which incarnation answered: the partition sees it on the next
/// operation of the unit (the check above is not vacuous: without a restart it passes).
#[test]
fn operations_of_a_unit_carry_the_incarnation_that_answered() {
    let mut c = cluster();
    let t = begin(&mut c, 1);
    c.call(1, RequestBody::Op { txn: t, op: read(9) }).unwrap();
    c.send(1, RequestBody::Op { txn: t, op: insert(9, 70) });
    loop {
        let next = c.queue.front().expect("the insert goes out");
        if let Message::PartitionRequest(r) = &next.msg {
            if let Some(Request::Op { incarnation, .. }) = r.body.peek::<Request>() {
                assert_eq!(*incarnation, Some(1), "the first incarnation answered the read");
                assert!(matches!(next.to, Addr::Partition(_)));
                break;
            }
        }
        c.deliver_one();
    }
    while c.deliver_one() {}
    c.call(1, RequestBody::Commit { txn: t }).unwrap();
    assert_eq!(balance(&mut c, 9), Some(70));
}

/// The operations `read_all` issues at once, per partition: one message each, a batch where
/// a partition has several.
fn read_all_requests(c: &mut SyncCluster) -> (u64, BTreeMap<Addr, usize>) {
    let call = RequestBody::Call { procedure: "read_all".into(), args: vec![], retrying_for: Duration::ZERO };
    let id = c.send(1, call);
    while !c.queue.iter().any(|e| matches!(e.to, Addr::Partition(_))) {
        assert!(c.deliver_one(), "the reads go out");
    }
    let mut per_partition: BTreeMap<Addr, usize> = BTreeMap::new();
    for e in c.queue.iter().filter(|e| matches!(e.to, Addr::Partition(_))) {
        let ops = match &e.msg {
            Message::Batch(items) => items
                .iter()
                .filter(|i| matches!(i, Batched::Request(r) if matches!(r.body.peek::<Request>(), Some(Request::Op { .. }))))
                .count(),
            m if is_op_request(m) => 1,
            _ => 0,
        };
        assert!(per_partition.insert(e.to, ops).is_none(), "a second message to {}", e.to);
    }
    (id, per_partition)
}

fn open_read_all_accounts(c: &mut SyncCluster) {
    for id in 4..READ_ALL {
        c.proc(0, "bank_open", vec![Value::Int(id), Value::Int(100)]).unwrap();
    }
}

/// A procedure's operations issued together go to each partition in one message, and the
/// replies of one partition step come back in one.
#[test]
fn operations_issued_together_travel_in_one_message_per_partition() {
    let mut c = cluster();
    open_read_all_accounts(&mut c);
    let (id, per_partition) = read_all_requests(&mut c);
    assert_eq!(per_partition.values().sum::<usize>(), READ_ALL as usize, "every read went out once");
    assert!(per_partition.values().any(|&n| n > 1), "some partition got several reads: {per_partition:?}");
    let mut replies = 0;
    while let Some(e) = c.queue.front() {
        if matches!(e.to, Addr::Coordinator(_)) && matches!(e.msg, Message::Batch(_)) {
            replies += 1;
        }
        c.deliver_one();
    }
    assert!(replies > 0, "a partition answered its reads in one batch");
    assert_eq!(c.response(1, id), Some(&Ok(ResponseBody::Returned(vec![Value::Int(100 * READ_ALL)]))));
}

/// A lost batch is a lost message of each operation in it: every one is resent and runs.
#[test]
fn a_lost_batch_of_operations_is_resent_and_runs() {
    let mut c = cluster();
    open_read_all_accounts(&mut c);
    let (id, _) = read_all_requests(&mut c);
    let lost = c.queue.iter().position(|e| matches!(e.msg, Message::Batch(_))).expect("a batch of reads");
    c.queue.remove(lost);
    while c.deliver_one() {}
    assert!(c.response(1, id).is_none(), "the batch was lost: nothing answers the call yet");
    wait_out_resend(&mut c);
    assert_eq!(c.response(1, id), Some(&Ok(ResponseBody::Returned(vec![Value::Int(100 * READ_ALL)]))));
}
