//! Salt §5.1 release order across a partition restart: the indirect dirty read of Fig. 4 stays
//! prevented (Fig. 5) when the partition crashes while LK-6 holds a lock back.
//!
//! The test talks to one `salt` partition directly, playing the coordinators:
//!
//! ```text
//!   BASE₁: write x                (committed subtransaction; BASE₁ still running → saline x)
//!   BASE₂: read x, write y        (committed; read x depends on BASE₁'s x, write y on read x)
//!   BASE₂ ends                    (its locks on x and y are *releasing*: held back by BASE₁)
//!   ── partition restarts ──
//!   ACID:  read y                 must wait: y holds BASE₂'s write, which depends on BASE₁
//!   BASE₁ ends                    → the ACID read is granted
//! ```

use litmus_core::{Isolation, Key, NodeId, PartitionId, Time, TxnId, Value};
use litmus_locking::partition::LOCK_WAIT_PATIENCE;
use litmus_locking::{Reply, Request, TxnClass, Unit, WriteImage};
use litmus_protocol::message::{PartitionRequest, Payload, SubOpId};
use litmus_protocol::op::{OpKind, PartOp, PartResult};
use litmus_protocol::{builtin, Addr, Envelope, Input, Machine, Message, Partition};
use std::sync::Arc;

const P: PartitionId = PartitionId(0);

struct Harness {
    catalog: Arc<litmus_core::Catalog>,
    part: Partition,
    log: Vec<Vec<u8>>,
    now: Time,
}

impl Harness {
    fn new() -> Self {
        let catalog = Arc::new(builtin::bank::catalog());
        let part = Partition::new(P, litmus_locking::SALT, catalog.clone(), 1);
        Harness { catalog, part, log: Vec::new(), now: Time::ZERO }
    }

    /// Sends one request; returns the locking replies it produced.
    fn send(&mut self, from: NodeId, req: Request) -> Vec<Reply> {
        self.now = self.now + std::time::Duration::from_millis(1);
        let env = Envelope {
            from: Addr::Coordinator(from),
            to: Addr::Partition(P),
            msg: Message::PartitionRequest(PartitionRequest { body: Payload::new(req) }),
        };
        self.step(Input::Message(env))
    }

    /// Advances time by `ms` and ticks the partition; returns the locking replies.
    fn tick(&mut self, ms: u64) -> Vec<Reply> {
        self.now = self.now + std::time::Duration::from_millis(ms);
        self.step(Input::Tick)
    }

    /// Steps the partition now; persists its records and returns its locking replies.
    fn step(&mut self, input: Input) -> Vec<Reply> {
        let mut out = litmus_protocol::Effects::default();
        self.part.step(self.now, input, &mut out);
        self.log.extend(out.persist);
        out.send
            .into_iter()
            .filter_map(|e| match e.msg {
                Message::PartitionReply(r) => r.body.decode::<Reply>().ok(),
                _ => None,
            })
            .collect()
    }

    /// Crash and restart from the log (no snapshot): every unsynced effect is already in it.
    fn restart(&mut self) {
        let mut part = Partition::new(P, litmus_locking::SALT, self.catalog.clone(), 1);
        part.recover(None, &self.log).expect("recover");
        self.part = part;
    }
}

fn txn(node: u32, seq: u64) -> TxnId {
    TxnId { node: NodeId(node), epoch: 1, seq }
}

fn key(id: i64) -> Key {
    Key::encode(&[Value::Int(id)]).unwrap()
}

fn class(base: bool, age: u64) -> TxnClass {
    TxnClass { isolation: Isolation::Serializable, base, age, immortal: base, lock_free: false }
}

/// Runs one operation of `unit` and returns its reply (none if it waits).
fn op(h: &mut Harness, unit: Unit, n: u32, base: bool, kind: OpKind) -> Option<Reply> {
    let table = h.catalog.table_by_name(builtin::bank::ACCOUNTS).unwrap().id;
    let id = SubOpId { txn: unit.txn, op: n, part: P };
    let attempt = unit.txn.epoch << 16;
    let req = Request::Op {
        id,
        unit,
        attempt,
        // The ACID reader is the oldest, so LK-5 lets it wait patiently.
        class: class(base, if base { unit.txn.seq } else { 0 }),
        op: PartOp { table, kind },
        local_commit: false,
        after: vec![],
        resent: false,
        incarnation: None,
    };
    h.send(unit.txn.node, req).into_iter().find(|r| matches!(r, Reply::Op { .. }))
}

fn write(id: i64, bal: i64) -> OpKind {
    OpKind::Write { key: key(id), row: vec![Value::Int(id), Value::Int(bal)].into() }
}

fn read(id: i64) -> OpKind {
    OpKind::Read { key: key(id), cols: litmus_protocol::op::ColMask::ALL }
}

/// Commits a subtransaction with the images its operations returned.
fn commit(h: &mut Harness, unit: Unit, replies: &[Option<Reply>]) {
    let writes: Vec<WriteImage> = replies
        .iter()
        .flat_map(|r| match r {
            Some(Reply::Op { writes, result: Ok(_), .. }) => writes.clone(),
            other => panic!("operation did not succeed: {other:?}"),
        })
        .collect();
    let replies = h.send(unit.txn.node, Request::Commit { unit, writes, ops: None });
    assert!(replies.iter().any(|r| matches!(r, Reply::Committed { .. })), "{replies:?}");
}

#[test]
fn fig5_release_order_survives_partition_restart() {
    let mut h = Harness::new();
    let (x, y) = (1, 2);
    let (base1, base2, acid) = (txn(0, 1), txn(1, 2), txn(2, 3));

    let u1 = Unit { txn: base1, sub: 1 };
    let w = op(&mut h, u1, 0, true, write(x, 10));
    commit(&mut h, u1, &[w]);

    let u2 = Unit { txn: base2, sub: 1 };
    let r = op(&mut h, u2, 0, true, read(x));
    assert!(
        matches!(&r, Some(Reply::Op { result: Ok(PartResult::Row(Some(row))), .. }) if row[1] == Value::Int(10)),
        "BASE₂ reads BASE₁'s committed subtransaction: {r:?}"
    );
    let w = op(&mut h, u2, 1, true, write(y, 20));
    commit(&mut h, u2, &[r, w]);
    let ended = h.send(base2.node, Request::EndBase { txn: base2, after: vec![] });
    assert!(ended.iter().any(|r| matches!(r, Reply::BaseEnded { .. })));

    // Before the restart: Fig. 5 — ACID's read of y waits for BASE₁.
    let acid_unit = Unit { txn: acid, sub: 0 };
    assert_eq!(op(&mut h, acid_unit, 0, false, read(y)), None, "ACID read of y must wait (before restart)");

    h.restart();

    // Recovered locks count as the oldest for LK-5, so the reader waits impatiently and
    // dies (and would retry) after the patience; either way it must not read y.
    let acid2 = txn(2, 4);
    let blocked = op(&mut h, Unit { txn: acid2, sub: 0 }, 0, false, read(y));
    assert_eq!(blocked, None, "after a restart, ACID's read of y must still be kept out (waits)");
    assert!(h.tick(5).is_empty(), "within the patience it keeps waiting");
    let blocked = h.tick(LOCK_WAIT_PATIENCE.as_millis() as u64);
    // Past the patience it dies (retryably) or — BASE₂ holding saline locks, an accepted
    // transaction, LK-5a's exception — waits on; it never reads y.
    assert!(
        blocked.is_empty() || matches!(&blocked[..], [Reply::Op { result: Err(e), .. }] if e.is_retryable()),
        "after a restart, ACID's read of y must still be kept out by BASE₂'s held-back lock: {blocked:?}"
    );
    // BASE₁ ends: the chain x → read x → y is released and a retried read gets through.
    h.send(base1.node, Request::EndBase { txn: base1, after: vec![] });
    let acid3 = txn(2, 5);
    match op(&mut h, Unit { txn: acid3, sub: 0 }, 0, false, read(y)) {
        Some(Reply::Op { result: Ok(PartResult::Row(Some(row))), .. }) => {
            assert_eq!(row[1], Value::Int(20), "ACID sees BASE₂'s y")
        }
        other => panic!("ACID read of y refused after BASE₁ ended: {other:?}"),
    }
}
