//! A coordinator whose replica group's leadership moves while it commits
//! (`Coordinator::abandon`) answers its client by what it logged, as presumed abort rules: a
//! two-phase commit before its decision record is aborted (the next leader knows nothing of
//! it), so the client may retry; one after it has committed once the record is durable, so the
//! answer is "committed", owed until the group settles the leader's proposals. Each answer is
//! checked against what the next coordinator, rebuilt from the log, then makes of the
//! transaction.

use litmus_core::{AbortReason, Error, Isolation, Value};
use litmus_locking::Request;
use litmus_protocol::builtin::bank;
use litmus_protocol::message::{Batched, RequestBody, ResponseBody};
use litmus_protocol::op::{Op, OpResult};
use litmus_protocol::testkit::SyncCluster;
use litmus_protocol::{Effects, Envelope, Message};

const PARTITIONS: u32 = 3;
const ACCOUNTS: [i64; 3] = [10, 11, 12];

/// The locking engine's requests in a message, batched or not.
fn requests(msg: &Message) -> Vec<&Request> {
    fn peek(r: &litmus_protocol::message::PartitionRequest) -> Option<&Request> {
        r.body.peek::<Request>()
    }
    match msg {
        Message::PartitionRequest(r) => peek(r).into_iter().collect(),
        Message::Batch(items) => items
            .iter()
            .filter_map(|i| match i {
                Batched::Request(r) => peek(r),
                Batched::Reply(_) => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn queued(c: &SyncCluster, pick: fn(&Request) -> bool) -> bool {
    c.queue.iter().any(|e| requests(&e.msg).into_iter().any(pick))
}

/// A transaction that opens the accounts (on more than one partition) and asks to commit;
/// delivered until its coordinator has sent the prepares (`decided` false) or logged its
/// decision and sent the commits (`decided` true). Returns the commit's request id.
fn committing(c: &mut SyncCluster, decided: bool) -> u64 {
    let t = c.begin(1, Isolation::Serializable);
    for id in ACCOUNTS {
        let op = Op::Insert { table: bank::ACCOUNTS.into(), row: vec![Value::Int(id), Value::Int(5)].into() };
        c.call(1, RequestBody::Op { txn: t, op }).unwrap();
    }
    let commit = c.send(1, RequestBody::Commit { txn: t });
    let there = if decided {
        |r: &Request| matches!(r, Request::Commit { .. })
    } else {
        |r: &Request| matches!(r, Request::Prepare { .. })
    };
    while !queued(c, there) {
        assert!(c.deliver_one(), "the commit never reached that point (one participant?)");
    }
    assert!(c.response(1, commit).is_none());
    commit
}

fn answers(sent: &[Envelope]) -> Vec<Result<ResponseBody, Error>> {
    sent.iter()
        .filter_map(|e| match &e.msg {
            Message::ClientResponse(r) => Some(r.result.clone()),
            _ => None,
        })
        .collect()
}

/// Whether every account the transaction opened exists, read after the coordinator was
/// rebuilt from its log and everything in flight settled.
fn opened(c: &mut SyncCluster) -> bool {
    c.crash_coordinator();
    c.settle();
    let t = c.begin(2, Isolation::Serializable);
    let found = ACCOUNTS.map(|id| {
        let op = Op::Read { table: bank::ACCOUNTS.into(), key: vec![Value::Int(id)] };
        matches!(c.call(2, RequestBody::Op { txn: t, op }), Ok(ResponseBody::Op(OpResult::Row(Some(_)))))
    });
    c.call(2, RequestBody::Commit { txn: t }).unwrap();
    assert!(found.iter().all(|f| *f == found[0]), "half a transaction: {found:?}");
    found[0]
}

#[test]
fn presumed_abort_a_deposed_coordinator_aborts_a_commit_its_decision_record_did_not_reach() {
    let mut c = SyncCluster::new(litmus_locking::ACID, bank::catalog(), bank::registry(), PARTITIONS);
    committing(&mut c, false);
    let mut out = Effects::default();
    let owed = c.coordinator.abandon(&mut out);
    assert!(owed.is_empty());
    assert_eq!(answers(&out.send), [Err(Error::Abort(AbortReason::Failure))], "retryable: nothing committed it");
    assert!(!opened(&mut c), "the next coordinator presumes it aborted");
}

#[test]
fn presumed_abort_a_deposed_coordinator_owes_committed_to_a_commit_whose_decision_it_logged() {
    let mut c = SyncCluster::new(litmus_locking::ACID, bank::catalog(), bank::registry(), PARTITIONS);
    committing(&mut c, true);
    let mut out = Effects::default();
    let owed = c.coordinator.abandon(&mut out);
    assert!(answers(&out.send).is_empty(), "nothing is said before the group settles the record");
    assert_eq!(answers(&owed), [Ok(ResponseBody::Committed)]);
    assert!(opened(&mut c), "the next coordinator finishes the commit from its log");
}
