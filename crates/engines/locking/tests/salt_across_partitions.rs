//! Salt §5.1's release order when the objects live on different partitions.
//!
//! Fig. 4: BASE₁ writes `x`; BASE₂ reads `x` and writes `y` from it; ACID₁ reads `y`. ACID₁
//! must not see `y` while BASE₁ has not ended — *write-after-read within a transaction*
//! (LK-6b) keeps BASE₂'s saline lock on `y` until BASE₂'s read of `x` is released, and
//! *read-after-write across transactions* (LK-6a) keeps that read until BASE₁ releases `x`.
//! Fig. 5: once BASE₁ ends, the chain is released and ACID₁ reads `y`.
//!
//! Every test holds BASE₁ back by cutting off the partition of its last subtransaction (`z`):
//! messages to it wait in a side queue, so BASE₁ provably has not ended; delivering them lets
//! it finish. Keys are `kv` keys; key `k` lives on partition `k mod PARTS`.

use litmus_core::{Error, Isolation, PartitionId, Value};
use litmus_protocol::builtin::{self, KV_TABLE};
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::op::{Op, OpResult};
use litmus_protocol::procedure::{Ctx, ProcOptions, Registry};
use litmus_protocol::testkit::SyncCluster;
use litmus_protocol::{Addr, EngineKind, Envelope};
use std::time::Duration;

const PARTS: u32 = 5;

/// `b_write(x, v, z)`: BASE, alkaline 1 writes `x := v`, alkaline 2 writes `z := v`.
/// `b_copy(src, dst, tag)`: BASE, one alkaline subtransaction reading `src` and writing
/// `dst := src ++ tag` — its write derives from its read (Fig. 4's BASE₂).
/// `b_copy_split(src, dst, tag)`: the same with the read and the write in separate alkaline
/// subtransactions (the value crosses the boundary in a local variable, §5.1 footnote 4).
fn registry() -> Registry {
    let mut r = builtin::registry();
    let base = ProcOptions::base();
    use litmus_core::ColumnType::{Bytes as B, Int as I};
    r.register_with("b_write", vec![I, B, I], base, |ctx: Ctx, args: Vec<Value>| async move {
        ctx.begin_alkaline().await?;
        ctx.write(KV_TABLE, vec![args[0].clone(), args[1].clone()]).await?;
        ctx.end_alkaline().await?;
        ctx.begin_alkaline().await?;
        ctx.write(KV_TABLE, vec![args[2].clone(), args[1].clone()]).await?;
        ctx.end_alkaline().await?;
        Ok(vec![])
    });
    async fn copy(ctx: Ctx, args: Vec<Value>, split: bool) -> Result<Vec<Value>, Error> {
        ctx.begin_alkaline().await?;
        let row = ctx.read(KV_TABLE, &args[..1]).await?;
        let mut v = match row.map(|r| r[1].clone()) {
            Some(Value::Bytes(b)) => b.to_vec(),
            _ => Vec::new(),
        };
        if split {
            ctx.end_alkaline().await?;
            ctx.begin_alkaline().await?;
        }
        v.extend_from_slice(args[2].as_bytes().unwrap_or_default());
        ctx.write(KV_TABLE, vec![args[1].clone(), Value::Bytes(v.into())]).await?;
        ctx.end_alkaline().await?;
        Ok(vec![])
    }
    r.register_with("b_copy", vec![I, I, B], base, |ctx, args| copy(ctx, args, false));
    r.register_with("b_copy_split", vec![I, I, B], base, |ctx, args| copy(ctx, args, true));
    r
}

fn cluster(engine: EngineKind) -> SyncCluster {
    SyncCluster::new(engine, builtin::catalog(), registry(), PARTS)
}

fn call(procedure: &str, args: Vec<Value>) -> RequestBody {
    RequestBody::Call { procedure: procedure.into(), args, retrying_for: Duration::ZERO }
}

fn bytes(s: &str) -> Value {
    Value::Bytes(s.as_bytes().to_vec().into())
}

/// Messages to `cut` are set aside instead of delivered.
struct Cut {
    to: Addr,
    held: Vec<Envelope>,
}

impl Cut {
    fn new(part: i64) -> Self {
        Cut { to: Addr::Partition(PartitionId((part as u32) % PARTS)), held: Vec::new() }
    }

    /// Delivers one message (or sets it aside); false when the queue is empty.
    fn deliver_one(&mut self, c: &mut SyncCluster) -> bool {
        while c.queue.front().is_some_and(|e| e.to == self.to) {
            self.held.push(c.queue.pop_front().expect("checked"));
        }
        c.deliver_one()
    }

    /// Delivers everything deliverable, with `ms` of ticks (timers fire, nothing reaches `to`).
    fn drain(&mut self, c: &mut SyncCluster, ms: u64) {
        for _ in 0..ms / 5 {
            while self.deliver_one(c) {}
            c.tick(5);
        }
        while self.deliver_one(c) {}
    }

    /// Sends a request and runs until it is answered (messages to `to` set aside), for up to
    /// 3 s of ticks: a read-committed read steps out of its queue and asks again for up to
    /// `STEP_OUT_MAX` (1 s) before it dies (LK-5h).
    fn call(&mut self, c: &mut SyncCluster, client: u64, body: RequestBody) -> Result<ResponseBody, Error> {
        let id = c.send(client, body);
        for _ in 0..600 {
            while c.response(client, id).is_none() && self.deliver_one(c) {}
            if let Some(r) = c.response(client, id) {
                return r.clone();
            }
            c.tick(5);
        }
        panic!("request {id} of client {client} never answered");
    }

    /// Heals the cut: the messages set aside are delivered, and everything settles.
    fn heal(self, c: &mut SyncCluster) {
        for e in self.held {
            c.requeue(e);
        }
        c.settle();
    }
}

/// An ACID read of `key` at `isolation` in its own interactive transaction: the value, or the
/// error the read (or its commit) failed with.
fn acid_read(c: &mut SyncCluster, cut: &mut Cut, isolation: Isolation, key: i64) -> Result<Option<Vec<u8>>, Error> {
    let ResponseBody::Begun(txn) =
        cut.call(c, 7, RequestBody::Begin { isolation, retrying_for: Duration::ZERO }).unwrap()
    else {
        panic!()
    };
    let op = Op::Read { table: KV_TABLE.into(), key: vec![Value::Int(key)] };
    let r = cut.call(c, 7, RequestBody::Op { txn, op });
    let _ = cut.call(c, 7, RequestBody::Commit { txn });
    match r? {
        ResponseBody::Op(OpResult::Row(row)) => Ok(row.map(|r| r[1].as_bytes().unwrap().to_vec())),
        other => panic!("{other:?}"),
    }
}

/// Starts BASE₁ (`x := "1"`, then `z := "1"`) with `z`'s partition cut off: BASE₁ is accepted
/// (its first subtransaction committed) and cannot end.
fn base1_held_back(c: &mut SyncCluster, x: i64, z: i64) -> Cut {
    let mut cut = Cut::new(z);
    let r = cut.call(c, 1, call("b_write", vec![Value::Int(x), bytes("1"), Value::Int(z)]));
    assert!(r.is_ok(), "BASE₁ accepted: {r:?}");
    cut.drain(c, 50);
    assert!(!cut.held.is_empty(), "BASE₁'s second subtransaction waits at the cut");
    cut
}

/// While BASE₁ has not ended, an ACID read of `key` (derived from BASE₁'s write) must wait —
/// and here, with nothing to wait for that it can see, die after the patience (read-committed:
/// after stepping out and asking again for `STEP_OUT_MAX`, LK-5h) and retry — but never
/// return the derived value.
fn assert_kept_out(c: &mut SyncCluster, cut: &mut Cut, isolation: Isolation, key: i64, what: &str) {
    for attempt in 0..3 {
        match acid_read(c, cut, isolation, key) {
            Err(e) if e.is_retryable() => {}
            Ok(v) => panic!(
                "{what}: ACID ({isolation:?}) read of {key} returned {:?} while BASE₁ has not ended (attempt {attempt})",
                v.map(|b| String::from_utf8_lossy(&b).into_owned())
            ),
            Err(e) => panic!("{what}: unexpected error {e:?}"),
        }
    }
}

fn read_after(c: &mut SyncCluster, isolation: Isolation, key: i64) -> Option<Vec<u8>> {
    let mut cut = Cut { to: Addr::Client(litmus_core::ClientId(u64::MAX)), held: vec![] };
    for _ in 0..20 {
        match acid_read(c, &mut cut, isolation, key) {
            Ok(v) => return v,
            Err(e) if e.is_retryable() => c.settle(),
            Err(e) => panic!("{e:?}"),
        }
    }
    panic!("ACID read of {key} never succeeded after BASE₁ ended");
}

const LEVELS_ABOVE_RU: [Isolation; 3] = [Isolation::ReadCommitted, Isolation::RepeatableRead, Isolation::Serializable];

/// Fig. 4 with `x` and `y` on different partitions (and, as placed by `Topology`, different
/// nodes of a 2-node cluster: partition `p` lives on node `p mod 2`): ACID₁ never reads
/// BASE₂'s `y` while BASE₁ is running. Fails on a lock manager that orders releases only
/// within one partition.
#[test]
fn fig4_indirect_dirty_read_across_partitions_is_prevented() {
    for engine in [litmus_locking::SALT, litmus_locking::SALT_LOCAL] {
        for copy in ["b_copy", "b_copy_split"] {
            let (x, y, z) = (1, 2, 4);
            let mut c = cluster(engine);
            let mut cut = base1_held_back(&mut c, x, z);
            let r = cut.call(&mut c, 2, call(copy, vec![Value::Int(x), Value::Int(y), bytes("2")]));
            assert!(r.is_ok(), "BASE₂ runs: {r:?}");
            cut.drain(&mut c, 50); // BASE₂ ends everywhere
            assert_kept_out(&mut c, &mut cut, Isolation::ReadCommitted, y, &format!("{engine} {copy}"));
            cut.heal(&mut c);
        }
    }
}

/// Fig. 5 across partitions: BASE₂ ends first, yet ACID₁'s read of `y` is released only when
/// BASE₁ ends — and then it sees BASE₂'s value, derived from BASE₁'s.
#[test]
fn fig5_release_order_across_partitions() {
    for engine in [litmus_locking::SALT, litmus_locking::SALT_LOCAL] {
        let (x, y, z) = (1, 2, 4);
        let mut c = cluster(engine);
        let mut cut = base1_held_back(&mut c, x, z);
        cut.call(&mut c, 2, call("b_copy", vec![Value::Int(x), Value::Int(y), bytes("2")])).unwrap();
        cut.drain(&mut c, 50);
        assert_kept_out(&mut c, &mut cut, Isolation::ReadCommitted, y, &format!("{engine}"));
        cut.heal(&mut c); // BASE₁ ends: x, then BASE₂'s read of x, then y are released
        assert_eq!(read_after(&mut c, Isolation::ReadCommitted, y), Some(b"12".to_vec()), "{engine}");
        assert_eq!(read_after(&mut c, Isolation::ReadCommitted, z), Some(b"1".to_vec()), "{engine}");
    }
}

/// The control case: `x` and `y` on one partition (LK-6's per-partition dependencies).
#[test]
fn fig4_indirect_dirty_read_on_one_partition_is_prevented() {
    let (x, y, z) = (1, 1 + PARTS as i64, 4);
    let mut c = cluster(litmus_locking::SALT);
    let mut cut = base1_held_back(&mut c, x, z);
    cut.call(&mut c, 2, call("b_copy", vec![Value::Int(x), Value::Int(y), bytes("2")])).unwrap();
    cut.drain(&mut c, 50);
    assert_kept_out(&mut c, &mut cut, Isolation::ReadCommitted, y, "same partition");
    cut.heal(&mut c);
    assert_eq!(read_after(&mut c, Isolation::ReadCommitted, y), Some(b"12".to_vec()));
}

/// A chain one step longer, over three partitions: BASE₂ copies `x → y`, BASE₃ copies `y → w`.
/// ACID reads of `y` and of `w` wait for BASE₁ (transitively, through BASE₂'s held-back `y`).
#[test]
fn fig4_chain_of_three_base_transactions_across_three_partitions() {
    for engine in [litmus_locking::SALT, litmus_locking::SALT_LOCAL] {
        let (x, y, w, z) = (1, 2, 3, 4);
        let mut c = cluster(engine);
        let mut cut = base1_held_back(&mut c, x, z);
        cut.call(&mut c, 2, call("b_copy", vec![Value::Int(x), Value::Int(y), bytes("2")])).unwrap();
        cut.drain(&mut c, 20);
        cut.call(&mut c, 3, call("b_copy_split", vec![Value::Int(y), Value::Int(w), bytes("3")])).unwrap();
        cut.drain(&mut c, 50);
        assert_kept_out(&mut c, &mut cut, Isolation::ReadCommitted, w, &format!("{engine} w"));
        assert_kept_out(&mut c, &mut cut, Isolation::ReadCommitted, y, &format!("{engine} y"));
        cut.heal(&mut c);
        assert_eq!(read_after(&mut c, Isolation::ReadCommitted, w), Some(b"123".to_vec()), "{engine}");
    }
}

/// Every ACID level above read-uncommitted is protected (§5.1, Theorem 1); read-uncommitted may
/// see the derived value (§5.1 footnote 3) — the anomaly that level allows.
#[test]
fn fig4_across_partitions_at_every_isolation_level() {
    for isolation in LEVELS_ABOVE_RU {
        let (x, y, z) = (1, 2, 4);
        let mut c = cluster(litmus_locking::SALT);
        let mut cut = base1_held_back(&mut c, x, z);
        cut.call(&mut c, 2, call("b_copy", vec![Value::Int(x), Value::Int(y), bytes("2")])).unwrap();
        cut.drain(&mut c, 50);
        assert_kept_out(&mut c, &mut cut, isolation, y, &format!("{isolation:?}"));
        cut.heal(&mut c);
        assert_eq!(read_after(&mut c, isolation, y), Some(b"12".to_vec()), "{isolation:?}");
    }
    // Read-uncommitted takes no read locks: it reads y at once (BASE₁ still running).
    let (x, y, z) = (1, 2, 4);
    let mut c = cluster(litmus_locking::SALT);
    let mut cut = base1_held_back(&mut c, x, z);
    cut.call(&mut c, 2, call("b_copy", vec![Value::Int(x), Value::Int(y), bytes("2")])).unwrap();
    cut.drain(&mut c, 50);
    let seen = acid_read(&mut c, &mut cut, Isolation::ReadUncommitted, y).expect("read-uncommitted does not wait");
    assert_eq!(seen, Some(b"12".to_vec()), "read-uncommitted sees the indirect dirty read it allows");
    cut.heal(&mut c);
}

/// A partition restart while LK-6b holds a lock back across partitions: `y`'s partition
/// crashes after BASE₂ ended (its lock on `y` is releasing, waiting for `x`'s partition). The
/// remote dependency is durable — relocked with the lock — so ACID₁ is still kept out, and is
/// let in once BASE₁ ends. The same with `x`'s partition restarting (its grant numbers go on
/// from a new incarnation, so BASE₂'s read of `x` is still found).
#[test]
fn fig5_across_partitions_survives_either_partition_restarting() {
    for crashed in [2u32, 1] {
        let (x, y, z) = (1, 2, 4);
        let mut c = cluster(litmus_locking::SALT);
        let mut cut = base1_held_back(&mut c, x, z);
        cut.call(&mut c, 2, call("b_copy", vec![Value::Int(x), Value::Int(y), bytes("2")])).unwrap();
        cut.drain(&mut c, 50);
        c.crash_partition(crashed);
        cut.drain(&mut c, 200);
        assert_kept_out(&mut c, &mut cut, Isolation::ReadCommitted, y, &format!("partition {crashed} restarted"));
        cut.heal(&mut c);
        assert_eq!(read_after(&mut c, Isolation::ReadCommitted, y), Some(b"12".to_vec()), "crashed {crashed}");
    }
}
