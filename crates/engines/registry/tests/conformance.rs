//! The conformance suite: every registered engine ([`litmus_engines::ALL`]) held to the guarantee it
//! declares ([`Guarantee`]). Registering an engine adds it here; nothing lists engines by hand.
//!
//! What every engine must do, whatever its guarantee:
//! * an acknowledged write survives a crash of every machine;
//! * bad input is rejected with a typed error and changes nothing;
//! * every call is answered once the cluster settles (no call hangs).
//!
//! Anomalies, per guarantee (as toydb's per-level anomaly scripts: what a guarantee forbids must
//! not happen, and what it allows is shown to happen, so each check is seen to fail):
//!
//! | anomaly       | `None`  | `AnsiLevels` (serializable) | `SnapshotIsolation` | `ReadAtomic` |
//! |---------------|---------|-----------------------------|---------------------|--------------|
//! | dirty read    | shown   | forbidden                   | forbidden           | forbidden    |
//! | lost update   | shown   | forbidden                   | forbidden           | shown        |
//! | write skew    | shown   | forbidden                   | shown (allowed)     | shown        |
//! | bank total    | —       | holds                       | holds               | —            |
//!
//! (`ReadAtomic`, the coordination-free engine, keeps invariants by refusing the procedures
//! that need coordination, not by isolation: a bank transfer without a registered verdict may
//! lose an update there, and the check shows it.)
//!
//! An engine that runs one-round transactions only (`Capabilities::interactive` false:
//! Granola) is held to the same rules through one-round procedures (`bank_open_1r`,
//! `bank_balance_1r`, `bank_transfer_1r`); the interactive anomaly scripts skip it, and it must
//! refuse an interactive operation with `InvalidInput::Unsupported`.

use litmus_core::{Error, Isolation, TxnId, Value};
use litmus_protocol::builtin::bank;
use litmus_protocol::engine::Guarantee;
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::op::{Op, OpResult};
use litmus_protocol::testkit::SyncCluster;
use litmus_protocol::{EngineKind, Machine};
use std::time::Duration;

const INITIAL: i64 = 100;

fn cluster(engine: EngineKind, accounts: i64) -> SyncCluster {
    let mut c = SyncCluster::new(engine, bank::catalog(), bank::registry(), 3);
    let open = if engine.capabilities().interactive { "bank_open" } else { "bank_open_1r" };
    for id in 0..accounts {
        c.proc(0, open, vec![Value::Int(id), Value::Int(INITIAL)]).unwrap();
    }
    c
}

/// The ACID transfer this engine runs: the interactive procedure, or its one-round form.
fn transfer(engine: EngineKind) -> &'static str {
    if engine.capabilities().interactive {
        "bank_transfer_acid"
    } else {
        "bank_transfer_1r"
    }
}

/// Queues a request without waiting for its answer.
fn submit(c: &mut SyncCluster, client: u64, body: RequestBody) -> (u64, u64) {
    (client, c.send(client, body))
}

/// The answer to a submitted request, after the cluster settled. Every call must be answered.
fn answer(c: &mut SyncCluster, engine: EngineKind, (client, id): (u64, u64)) -> Result<ResponseBody, Error> {
    c.settle();
    c.response(client, id).unwrap_or_else(|| panic!("{engine}: request {id} of client {client} never answered")).clone()
}

/// Sends a request and returns its answer once the cluster settled.
fn run(c: &mut SyncCluster, engine: EngineKind, client: u64, body: RequestBody) -> Result<ResponseBody, Error> {
    let id = submit(c, client, body);
    answer(c, engine, id)
}

fn begin(c: &mut SyncCluster, client: u64) -> TxnId {
    c.begin(client, Isolation::Serializable)
}

fn read(id: i64) -> Op {
    Op::Read { table: bank::ACCOUNTS.into(), key: vec![Value::Int(id)] }
}

fn write(id: i64, bal: i64) -> Op {
    Op::Write { table: bank::ACCOUNTS.into(), row: vec![Value::Int(id), Value::Int(bal)].into() }
}

fn balance_of(r: Result<ResponseBody, Error>) -> Result<i64, Error> {
    match r? {
        ResponseBody::Op(OpResult::Row(Some(row))) => Ok(row[1].as_int().unwrap()),
        other => panic!("not a row: {other:?}"),
    }
}

/// A committed read of one balance, in a transaction of its own.
fn balance(c: &mut SyncCluster, engine: EngineKind, id: i64) -> i64 {
    if !engine.capabilities().interactive {
        let r = c.proc(50, "bank_balance_1r", vec![Value::Int(id)]);
        return r.unwrap_or_else(|e| panic!("{engine}: bank_balance_1r failed: {e}"))[0].as_int().unwrap();
    }
    let t = begin(c, 50);
    let r = submit(c, 50, RequestBody::Op { txn: t, op: read(id) });
    let bal = balance_of(answer(c, engine, r)).unwrap();
    c.call(50, RequestBody::Commit { txn: t }).unwrap();
    bal
}

/// Every row version of every partition, to compare a database before and after.
fn dump(c: &SyncCluster) -> Vec<String> {
    let mut rows = Vec::new();
    for p in &c.partitions {
        let store = p.store();
        for (table, key, ts) in store.all_versions() {
            rows.push(format!("{table:?} {key:?} {ts:?} {:?}", store.latest(table, key)));
        }
    }
    rows
}

#[test]
fn conformance_acknowledged_writes_survive_a_crash_of_every_machine() {
    for &engine in litmus_engines::ALL {
        let mut c = cluster(engine, 6);
        for id in 0..6 {
            c.proc(1, transfer(engine), vec![Value::Int(id), Value::Int((id + 1) % 6), Value::Int(id + 1)]).unwrap();
        }
        let before: Vec<i64> = (0..6).map(|id| balance(&mut c, engine, id)).collect();
        c.crash_all();
        c.settle();
        let after: Vec<i64> = (0..6).map(|id| balance(&mut c, engine, id)).collect();
        assert_eq!(before, after, "{engine}: acknowledged writes lost in a crash");
        assert_eq!(after.iter().sum::<i64>(), 6 * INITIAL, "{engine}: serial transfers keep the total");
    }
}

#[test]
fn conformance_bad_input_is_rejected_and_changes_nothing() {
    for &engine in litmus_engines::ALL {
        let mut c = cluster(engine, 3);
        let before = dump(&c);
        let bad_calls = [
            RequestBody::Call { procedure: "no_such_procedure".into(), args: vec![], retrying_for: Duration::ZERO },
            RequestBody::Call {
                procedure: "bank_open".into(),
                args: vec![Value::Int(1)],
                retrying_for: Duration::ZERO,
            },
            RequestBody::Call {
                procedure: "bank_open".into(),
                args: vec!["text".into(), Value::Int(1)],
                retrying_for: Duration::ZERO,
            },
        ];
        for body in bad_calls {
            let r = c.call(2, body.clone());
            assert!(matches!(r, Err(Error::Invalid(_))), "{engine}: {body:?} gave {r:?}");
        }
        let bad_ops = [
            Op::Read { table: "no_such_table".into(), key: vec![Value::Int(0)] },
            Op::Write { table: bank::ACCOUNTS.into(), row: vec![Value::Int(0)].into() },
            Op::Write { table: bank::ACCOUNTS.into(), row: vec![Value::Int(0), "text".into()].into() },
            Op::Write { table: bank::ACCOUNTS.into(), row: vec![Value::Null, Value::Int(1)].into() },
            Op::Insert { table: bank::ACCOUNTS.into(), row: vec![Value::Int(0), Value::Int(1)].into() },
            Op::Update {
                table: bank::ACCOUNTS.into(),
                key: vec![Value::Int(99)],
                updates: vec![("bal".into(), litmus_core::Formula::Add(Value::Int(1)))],
            },
            Op::Update {
                table: bank::ACCOUNTS.into(),
                key: vec![Value::Int(0)],
                updates: vec![("no_such_column".into(), litmus_core::Formula::Add(Value::Int(1)))],
            },
        ];
        let huge = Op::Write {
            table: bank::ACCOUNTS.into(),
            row: vec![Value::Int(0), Value::Bytes(vec![0u8; 1 << 24].into())].into(),
        };
        if !engine.capabilities().interactive {
            // No interactive transactions: the same bad input as a minitransaction's items.
            for op in bad_ops.into_iter().chain([huge]) {
                let mini = litmus_protocol::minitxn::Minitransaction { compares: vec![], writes: vec![op.clone()] };
                let r = run(&mut c, engine, 3, RequestBody::Minitransaction(mini));
                assert!(matches!(r, Err(Error::Invalid(_))), "{engine}: {op:?} gave {r:?}");
            }
            c.settle();
            assert_eq!(before, dump(&c), "{engine}: bad input changed the database");
            continue;
        }
        for op in bad_ops {
            let t = begin(&mut c, 3);
            let r = run(&mut c, engine, 3, RequestBody::Op { txn: t, op: op.clone() });
            assert!(matches!(r, Err(Error::Invalid(_))), "{engine}: {op:?} gave {r:?}");
            // Whatever the engine did with the transaction, committing (or finding it gone)
            // must not apply anything.
            let _ = run(&mut c, engine, 3, RequestBody::Commit { txn: t });
        }
        let t = begin(&mut c, 3);
        let r = run(&mut c, engine, 3, RequestBody::Op { txn: t, op: huge });
        assert!(matches!(r, Err(Error::Invalid(_))), "{engine}: an oversized row gave {r:?}");
        let _ = run(&mut c, engine, 3, RequestBody::Rollback { txn: t });
        c.settle();
        assert_eq!(before, dump(&c), "{engine}: bad input changed the database");
    }
}

/// T1 writes, T2 reads the same row before T1 ends, then T1 rolls back.
#[test]
fn conformance_dirty_read_per_guarantee() {
    for &engine in litmus_engines::ALL {
        if !engine.capabilities().interactive {
            continue; // no interactive transactions: see `conformance_one_round_only_engines_refuse_interactive_operations`
        }
        let mut c = cluster(engine, 1);
        let (t1, t2) = (begin(&mut c, 1), begin(&mut c, 2));
        let w = submit(&mut c, 1, RequestBody::Op { txn: t1, op: write(0, 7) });
        answer(&mut c, engine, w).unwrap();
        let r = submit(&mut c, 2, RequestBody::Op { txn: t2, op: read(0) });
        c.settle();
        let early = c.response(2, r.1).cloned();
        let _ = run(&mut c, engine, 1, RequestBody::Rollback { txn: t1 });
        let seen = balance_of(early.unwrap_or_else(|| answer(&mut c, engine, r)));
        let dirty = seen == Ok(7);
        match engine.capabilities().guarantee {
            Guarantee::None => assert!(dirty, "{engine}: the UNSAFE baseline shows dirty reads (check sees them)"),
            _ => assert!(!dirty, "{engine} forbids dirty reads: read {seen:?}"),
        }
        let after = balance(&mut c, engine, 0);
        match engine.capabilities().guarantee {
            Guarantee::None => assert_eq!(after, 7, "{engine}: the UNSAFE baseline does not undo (documented)"),
            _ => assert_eq!(after, INITIAL, "{engine}: a rolled-back write is visible"),
        }
    }
}

/// Two transactions read the same balance and both write it back plus one.
#[test]
fn conformance_lost_update_per_guarantee() {
    for &engine in litmus_engines::ALL {
        if !engine.capabilities().interactive {
            continue; // no interactive transactions: see `conformance_one_round_only_engines_refuse_interactive_operations`
        }
        let mut c = cluster(engine, 1);
        let (t1, t2) = (begin(&mut c, 1), begin(&mut c, 2));
        let r1 = balance_of(run(&mut c, engine, 1, RequestBody::Op { txn: t1, op: read(0) }));
        let r2 = balance_of(run(&mut c, engine, 2, RequestBody::Op { txn: t2, op: read(0) }));
        let (r1, r2) = (r1.unwrap(), r2.unwrap());
        let w1 = submit(&mut c, 1, RequestBody::Op { txn: t1, op: write(0, r1 + 1) });
        let w2 = submit(&mut c, 2, RequestBody::Op { txn: t2, op: write(0, r2 + 1) });
        c.settle();
        let mut committed = 0;
        for (client, txn, w) in [(1, t1, w1), (2, t2, w2)] {
            if answer(&mut c, engine, w).is_ok() && run(&mut c, engine, client, RequestBody::Commit { txn }).is_ok() {
                committed += 1;
            }
        }
        let final_balance = balance(&mut c, engine, 0);
        let lost = final_balance != INITIAL + committed;
        match engine.capabilities().guarantee {
            Guarantee::None | Guarantee::ReadAtomic => {
                assert!(lost, "{engine} allows lost updates: the check must see one")
            }
            _ => assert!(!lost, "{engine} forbids lost updates: {committed} committed, balance {final_balance}"),
        }
    }
}

/// Each transaction reads both balances and withdraws from a different one, keeping the pair's
/// sum non-negative on its own snapshot; together they break it.
#[test]
fn conformance_write_skew_per_guarantee() {
    for &engine in litmus_engines::ALL {
        if !engine.capabilities().interactive {
            continue; // no interactive transactions: see `conformance_one_round_only_engines_refuse_interactive_operations`
        }
        let mut c = cluster(engine, 2);
        let (t1, t2) = (begin(&mut c, 1), begin(&mut c, 2));
        for (client, txn) in [(1, t1), (2, t2)] {
            for id in 0..2 {
                balance_of(run(&mut c, engine, client, RequestBody::Op { txn, op: read(id) })).unwrap();
            }
        }
        let a = submit(&mut c, 1, RequestBody::Op { txn: t1, op: write(0, -INITIAL + 1) });
        let b = submit(&mut c, 2, RequestBody::Op { txn: t2, op: write(1, -INITIAL + 1) });
        c.settle();
        let mut committed = 0;
        for (client, txn, w) in [(1, t1, a), (2, t2, b)] {
            if answer(&mut c, engine, w).is_ok() && run(&mut c, engine, client, RequestBody::Commit { txn }).is_ok() {
                committed += 1;
            }
        }
        let skew = committed == 2;
        match engine.capabilities().guarantee {
            Guarantee::None | Guarantee::SnapshotIsolation | Guarantee::ReadAtomic => {
                assert!(skew, "{engine} allows write skew: the check must see it ({committed} committed)")
            }
            Guarantee::AnsiLevels => assert!(!skew, "{engine} forbids write skew at serializable"),
        }
    }
}

/// Many clients transfer between a few accounts at once; the total never changes.
#[test]
fn conformance_bank_total_holds_under_concurrent_transfers() {
    for &engine in litmus_engines::ALL {
        let mut c = cluster(engine, 4);
        let mut calls = Vec::new();
        for client in 1..=12u64 {
            let (from, to) = (client as i64 % 4, (client as i64 + 1) % 4);
            let body = RequestBody::Call {
                procedure: transfer(engine).into(),
                args: vec![Value::Int(from), Value::Int(to), Value::Int(client as i64)],
                retrying_for: Duration::ZERO,
            };
            calls.push(submit(&mut c, client, body));
        }
        c.settle();
        let answered = calls.iter().filter(|(client, id)| c.response(*client, *id).is_some()).count();
        assert_eq!(answered, calls.len(), "{engine}: every call is answered once the cluster settles");
        let total: i64 = (0..4).map(|id| balance(&mut c, engine, id)).sum();
        if ![Guarantee::None, Guarantee::ReadAtomic].contains(&engine.capabilities().guarantee) {
            assert_eq!(total, 4 * INITIAL, "{engine}: concurrent transfers changed the total");
        }
    }
}

/// One definition of a workload runs on every engine: the one-round transfer (fragments at the
/// partitions where the engine takes them whole, op by op elsewhere) leaves the same database as
/// the interactive procedure, and a participant voting abort aborts it everywhere the engine
/// promises atomicity.
#[test]
fn conformance_one_round_procedures_match_their_op_by_op_form() {
    let transfers: Vec<(i64, i64, i64)> =
        (0..12).map(|i| (i % 4, (i * 3 + 1) % 4, 5 + i)).filter(|t| t.0 != t.1).collect();
    // The serial model: every transfer is covered (balances stay far above the amounts).
    let mut model = vec![INITIAL; 4];
    for &(from, to, amount) in &transfers {
        model[from as usize] -= amount;
        model[to as usize] += amount;
    }
    for &engine in litmus_engines::ALL {
        if !engine.capabilities().interactive {
            let mut c = cluster(engine, 4);
            for &(from, to, amount) in &transfers {
                c.proc(1, "bank_transfer_1r", vec![Value::Int(from), Value::Int(to), Value::Int(amount)])
                    .unwrap_or_else(|e| panic!("{engine}: bank_transfer_1r failed: {e}"));
            }
            let got: Vec<i64> = (0..4).map(|id| balance(&mut c, engine, id)).collect();
            assert_eq!(got, model, "{engine}: the one-round transfers left another database than the serial model");
        }
        let mut balances = Vec::new();
        for procedure in ["bank_transfer_acid", "bank_transfer_1r"] {
            if !engine.capabilities().interactive {
                break;
            }
            let mut c = cluster(engine, 4);
            for &(from, to, amount) in &transfers {
                c.proc(1, procedure, vec![Value::Int(from), Value::Int(to), Value::Int(amount)])
                    .unwrap_or_else(|e| panic!("{engine}: {procedure} failed: {e}"));
            }
            balances.push((0..4).map(|id| balance(&mut c, engine, id)).collect::<Vec<_>>());
        }
        if engine.capabilities().interactive {
            assert_eq!(balances[0], balances[1], "{engine}: the one-round form left another database");
        }
        let mut c = cluster(engine, 2);
        let r = c.proc(1, "bank_transfer_1r", vec![Value::Int(0), Value::Int(1), Value::Int(INITIAL + 1)]);
        assert!(matches!(r, Err(Error::UserAbort(_))), "{engine}: an overdraft votes abort: {r:?}");
        if engine.capabilities().guarantee != Guarantee::None {
            assert_eq!([balance(&mut c, engine, 0), balance(&mut c, engine, 1)], [INITIAL, INITIAL], "{engine}");
        }
        let bad = c.proc(1, "bank_transfer_1r", vec![Value::Int(0), Value::Null, Value::Int(1)]);
        assert!(matches!(bad, Err(Error::Invalid(_))), "{engine}: a plan routed by NULL is bad input: {bad:?}");
    }
}

/// An engine without interactive transactions refuses an interactive transaction's begin and
/// an op-by-op procedure with a typed error naming itself, and changes nothing.
#[test]
fn conformance_one_round_only_engines_refuse_interactive_operations() {
    for &engine in litmus_engines::ALL {
        if engine.capabilities().interactive {
            continue;
        }
        let mut c = cluster(engine, 1);
        let before = dump(&c);
        let begin = RequestBody::Begin { isolation: Isolation::Serializable, retrying_for: Duration::ZERO };
        let r = run(&mut c, engine, 1, begin);
        let named = |r: &Result<ResponseBody, Error>| matches!(r, Err(Error::Invalid(litmus_core::InvalidInput::Unsupported { engine: e, .. })) if e == engine.name());
        assert!(named(&r), "{engine}: an interactive begin gave {r:?}");
        let r = c.proc(1, "bank_transfer_acid", vec![Value::Int(0), Value::Int(0), Value::Int(1)]);
        assert!(named(&r.clone().map(ResponseBody::Returned)), "{engine}: an op-by-op procedure gave {r:?}");
        c.settle();
        assert_eq!(before, dump(&c), "{engine}: a refused transaction changed the database");
        assert_eq!(balance(&mut c, engine, 0), INITIAL);
    }
}

/// A partition restarted in place (its rows and the engine's durable state kept, volatile state
/// dropped: what a replica that lost its leadership with nothing in flight does) holds the rows
/// a partition rebuilt from its log holds, on every engine, after concurrent transfers, and the
/// same engine state too, except under `basic`: its live items carry the read timestamps of
/// reads served (rule W1), which are not logged, so a replay knows fewer of them; keeping them
/// only refuses more late writes, as a restart from a snapshot already does.
#[test]
fn conformance_a_partition_restarted_in_place_equals_one_replayed_from_its_log() {
    for &engine in litmus_engines::ALL {
        let mut c = cluster(engine, 4);
        for client in 1..=8u64 {
            let (from, to) = (client as i64 % 4, (client as i64 + 1) % 4);
            let args = vec![Value::Int(from), Value::Int(to), Value::Int(client as i64)];
            let body = RequestBody::Call { procedure: transfer(engine).into(), args, retrying_for: Duration::ZERO };
            submit(&mut c, client, body);
        }
        c.settle();
        for p in 0..c.partitions.len() {
            c.partitions[p].restart_in_place().unwrap();
            let (rows, state) = (c.partitions[p].store().encode_snapshot(), c.partitions[p].snapshot());
            c.crash_partition(p as u32);
            let replayed = &mut c.partitions[p];
            assert!(
                rows == replayed.store().encode_snapshot(),
                "{engine}: partition {p}'s rows differ from its replay"
            );
            if engine != litmus_engines::BASIC {
                assert!(state == replayed.snapshot(), "{engine}: partition {p}'s state differs from its replay");
            }
        }
    }
}
