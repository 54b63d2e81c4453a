//! The embedded runtime end to end: procedures, interactive transactions, bad input, restart.

use litmus_core::{Error, Formula, InvalidInput, Row, Value};
use litmus_protocol::builtin;
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::op::{Op, OpResult};
use litmus_runtime::embedded::{DelayModel, EmbeddedCluster, EmbeddedConfig};
use litmus_runtime::{ClusterSpec, Topology, Transport};
use litmus_storage::wal::FsyncPolicy;
use std::sync::Arc;
use std::time::Duration;

fn spec() -> ClusterSpec {
    ClusterSpec {
        engine: litmus_engines::NOCC,
        topology: Topology::new(2, 4).unwrap(),
        catalog: Arc::new(builtin::catalog()),
        registry: Arc::new(builtin::registry()),
        seed: 1,
    }
}

fn call(t: &mut dyn Transport, procedure: &str, args: Vec<Value>) -> Result<Vec<Value>, Error> {
    match t.request(RequestBody::Call { procedure: procedure.into(), args, retrying_for: Duration::ZERO })? {
        ResponseBody::Returned(v) => Ok(v),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn procedures_and_interactive_transactions() {
    let cluster = EmbeddedCluster::start(spec(), EmbeddedConfig::default()).unwrap();
    let mut t = cluster.transport();
    for k in 0..20 {
        call(&mut t, "kv_put", vec![Value::Int(k), Value::Bytes(vec![k as u8].into())]).unwrap();
    }
    assert_eq!(call(&mut t, "kv_get", vec![Value::Int(7)]).unwrap(), vec![Value::Bytes(vec![7].into())]);
    assert_eq!(call(&mut t, "kv_get", vec![Value::Int(99)]).unwrap(), vec![Value::Null]);

    // Interactive: begin, scan across partitions, delete, commit.
    let txn =
        match t.request(RequestBody::Begin { isolation: Default::default(), retrying_for: Duration::ZERO }).unwrap() {
            ResponseBody::Begun(txn) => txn,
            other => panic!("{other:?}"),
        };
    let scan = Op::Scan { table: "kv".into(), start: vec![], end: None, limit: 5 };
    match t.request(RequestBody::Op { txn, op: scan }).unwrap() {
        ResponseBody::Op(OpResult::Rows(rows)) => {
            let keys: Vec<_> = rows.iter().map(|r| r[0].clone()).collect();
            assert_eq!(keys, (0..5).map(Value::Int).collect::<Vec<_>>(), "merged in key order");
        }
        other => panic!("{other:?}"),
    }
    // A read of some columns: the others read as NULL; a column the table lacks is a typed error.
    let read = |columns: &[&str]| Op::ReadColumns {
        table: "kv".into(),
        key: vec![Value::Int(7)],
        columns: columns.iter().map(|c| c.to_string()).collect(),
    };
    let row = t.request(RequestBody::Op { txn, op: read(&["v"]) }).unwrap();
    assert_eq!(row, ResponseBody::Op(OpResult::Row(Some(Row::from(vec![Value::Null, Value::Bytes(vec![7].into())])))));
    let err = t.request(RequestBody::Op { txn, op: read(&["nope"]) }).unwrap_err();
    assert!(matches!(err, Error::Invalid(InvalidInput::UnknownColumn { .. })), "{err}");
    t.request(RequestBody::Op { txn, op: Op::Delete { table: "kv".into(), key: vec![Value::Int(3)] } }).unwrap();
    assert_eq!(t.request(RequestBody::Commit { txn }).unwrap(), ResponseBody::Committed);
    assert_eq!(call(&mut t, "kv_get", vec![Value::Int(3)]).unwrap(), vec![Value::Null]);
    cluster.shutdown().unwrap();
}

/// `Op::ReadMany` and `Op::WriteMany`: on an engine that takes them whole (`acid`), one
/// request per partition holding any of the keys, reads answered in the order of the keys and
/// a partition's writes applied whole or not at all; an engine that does not (`nocc`) refuses
/// them with a typed error naming itself (procedures use `Ctx::read_many` and
/// `Ctx::write_many`, which go key by key there).
#[test]
fn reads_and_writes_of_many_keys_span_partitions_or_are_refused_by_name() {
    for engine in [litmus_engines::ACID, litmus_engines::COORDFREE, litmus_engines::NOCC] {
        let spec = ClusterSpec { engine, ..spec() };
        let cluster = EmbeddedCluster::start(spec, EmbeddedConfig::default()).unwrap();
        let mut t = cluster.transport();
        for k in [2, 5, 7] {
            call(&mut t, "kv_put", vec![Value::Int(k), Value::Bytes(vec![k as u8].into())]).unwrap();
        }
        let txn = match t
            .request(RequestBody::Begin { isolation: Default::default(), retrying_for: Duration::ZERO })
            .unwrap()
        {
            ResponseBody::Begun(txn) => txn,
            other => panic!("{other:?}"),
        };
        let keys = [7, 99, 2, 5].iter().map(|k| vec![Value::Int(*k)]).collect();
        let result = t.request(RequestBody::Op { txn, op: Op::ReadMany { table: "kv".into(), keys } });
        if engine.capabilities().batches {
            let row = |k: i64| Some(Row::from(vec![Value::Int(k), Value::Bytes(vec![k as u8].into())]));
            assert_eq!(result.unwrap(), ResponseBody::Op(OpResult::Many(vec![row(7), None, row(2), row(5)])));
            let err = t.request(RequestBody::Op { txn, op: Op::ReadMany { table: "kv".into(), keys: vec![] } });
            assert!(matches!(err, Err(Error::Invalid(InvalidInput::WrongArity { .. }))), "{err:?}");
        } else {
            let err = result.unwrap_err();
            assert!(
                matches!(&err, Error::Invalid(InvalidInput::Unsupported { engine: e, .. }) if e == "nocc"),
                "{err}"
            );
        }
        assert_eq!(t.request(RequestBody::Commit { txn }).unwrap(), ResponseBody::Committed);
        // Writes of many keys over several partitions (kv key k lives on partition k mod 4).
        let put =
            |k: i64| Op::Write { table: "kv".into(), row: vec![Value::Int(k), Value::Bytes(vec![1].into())].into() };
        let dup7 = Op::Insert { table: "kv".into(), row: vec![Value::Int(7), Value::Bytes(vec![2].into())].into() };
        let begin = |t: &mut dyn Transport| match t
            .request(RequestBody::Begin { isolation: Default::default(), retrying_for: Duration::ZERO })
        {
            Ok(ResponseBody::Begun(txn)) => txn,
            other => panic!("{other:?}"),
        };
        let batch = |txn, writes| RequestBody::Op { txn, op: Op::WriteMany { table: "kv".into(), writes } };
        let got = |t: &mut dyn Transport, k: i64| call(t, "kv_get", vec![Value::Int(k)]).unwrap();
        let txn = begin(&mut t);
        if engine.capabilities().batches {
            // Key 10 applies on partition 2; the insert of 7 fails on partition 3: the error comes
            // back typed, and the transaction can no longer commit — nothing of it half-applies.
            let err = t.request(batch(txn, vec![put(10), dup7])).unwrap_err();
            assert!(matches!(err, Error::Invalid(InvalidInput::DuplicateKey(_))), "{err}");
            let err = t.request(RequestBody::Commit { txn }).unwrap_err();
            assert!(matches!(err, Error::Invalid(InvalidInput::DuplicateKey(_))), "its commit rolls back: {err}");
            assert_eq!(got(&mut t, 10), vec![Value::Null], "key 10 was not written");
            let txn = begin(&mut t);
            assert_eq!(t.request(batch(txn, vec![put(12), put(13)])).unwrap(), ResponseBody::Op(OpResult::Done));
            assert_eq!(t.request(RequestBody::Commit { txn }).unwrap(), ResponseBody::Committed);
            assert_eq!(got(&mut t, 13), vec![Value::Bytes(vec![1].into())]);
        } else {
            let err = t.request(batch(txn, vec![put(12), put(13)])).unwrap_err();
            assert!(
                matches!(&err, Error::Invalid(InvalidInput::Unsupported { engine: e, .. }) if e == "nocc"),
                "{err}"
            );
            assert_eq!(t.request(RequestBody::Commit { txn }).unwrap(), ResponseBody::Committed);
        }
        cluster.shutdown().unwrap();
    }
}

#[test]
fn bad_input_gets_typed_errors_and_changes_nothing() {
    let cluster =
        EmbeddedCluster::start(spec(), EmbeddedConfig { delay: DelayModel::NONE, ..Default::default() }).unwrap();
    let mut t = cluster.transport();
    let err = call(&mut t, "nope", vec![]).unwrap_err();
    assert!(matches!(err, Error::Invalid(InvalidInput::UnknownProcedure(_))), "{err}");
    let err = call(&mut t, "kv_put", vec![Value::String("x".into()), Value::Bytes(vec![].into())]).unwrap_err();
    assert!(matches!(err, Error::Invalid(InvalidInput::WrongType { .. })), "{err}");
    let err = call(&mut t, "kv_put", vec![Value::Int(1)]).unwrap_err();
    assert!(matches!(err, Error::Invalid(InvalidInput::WrongArity { .. })), "{err}");
    let big = Value::Bytes(vec![0; litmus_core::limits::VALUE_SIZE_MAX + 1].into());
    let err = call(&mut t, "kv_put", vec![Value::Int(1), big]).unwrap_err();
    assert!(matches!(err, Error::Invalid(InvalidInput::Oversized { .. })), "{err}");
    assert_eq!(call(&mut t, "kv_get", vec![Value::Int(1)]).unwrap(), vec![Value::Null], "nothing was written");

    let txn =
        match t.request(RequestBody::Begin { isolation: Default::default(), retrying_for: Duration::ZERO }).unwrap() {
            ResponseBody::Begun(txn) => txn,
            other => panic!("{other:?}"),
        };
    let op = Op::Write { table: "nope".into(), row: Row::new() };
    let err = t.request(RequestBody::Op { txn, op }).unwrap_err();
    assert!(matches!(err, Error::Invalid(InvalidInput::UnknownTable(_))));
    let op = Op::Update {
        table: "kv".into(),
        key: vec![Value::Int(5)],
        updates: vec![("v".into(), Formula::Add(Value::Int(1)))],
    };
    let err = t.request(RequestBody::Op { txn, op }).unwrap_err();
    assert!(matches!(err, Error::Invalid(InvalidInput::FormulaType { .. })), "{err}");
    let op = Op::Insert { table: "kv".into(), row: vec![Value::Int(5), Value::Bytes(vec![1].into())].into() };
    t.request(RequestBody::Op { txn, op: op.clone() }).unwrap();
    let err = t.request(RequestBody::Op { txn, op }).unwrap_err();
    assert!(matches!(err, Error::Invalid(InvalidInput::DuplicateKey(_))), "{err}");
    assert_eq!(t.request(RequestBody::Commit { txn }).unwrap(), ResponseBody::Committed);
    let err = t.request(RequestBody::Commit { txn }).unwrap_err();
    assert!(matches!(err, Error::Invalid(InvalidInput::UnknownTransaction)));
    cluster.shutdown().unwrap();
}

#[test]
fn restart_recovers_acknowledged_writes_from_the_wal() {
    let dir = tempfile::tempdir().unwrap();
    let cfg =
        EmbeddedConfig { data_dir: Some(dir.path().to_path_buf()), fsync: FsyncPolicy::Always, ..Default::default() };
    {
        let cluster = EmbeddedCluster::start(spec(), cfg.clone()).unwrap();
        let mut t = cluster.transport();
        for k in 0..50 {
            call(&mut t, "kv_put", vec![Value::Int(k), Value::Bytes(vec![1, k as u8].into())]).unwrap();
        }
        call(&mut t, "kv_delete", vec![Value::Int(10)]).unwrap();
        cluster.shutdown().unwrap();
    }
    let cluster = EmbeddedCluster::start(spec(), cfg).unwrap();
    let mut t = cluster.transport();
    for k in 0..50 {
        let want = if k == 10 { Value::Null } else { Value::Bytes(vec![1, k as u8].into()) };
        assert_eq!(call(&mut t, "kv_get", vec![Value::Int(k)]).unwrap(), vec![want], "key {k}");
    }
    cluster.shutdown().unwrap();
}

/// A read of a replicated table goes to a partition the transaction already uses (its first
/// partition), not to the coordinator node's preferred one: a transaction on one partition that
/// also reads a replicated table stays on one partition and commits in one phase. The extra
/// read costs its own round trip and nothing more, whichever partition the transaction is on.
#[test]
fn a_replicated_read_goes_to_a_partition_the_transaction_already_uses() {
    use litmus_core::{Column, ColumnType, Partitioning, TableSchema};
    let mut catalog = builtin::catalog();
    let columns = vec![Column::new("i", ColumnType::Int), Column::new("v", ColumnType::Int)];
    catalog.add(TableSchema::new("items", columns, &["i"], Partitioning::Replicated));
    let spec = ClusterSpec { engine: litmus_engines::ACID, catalog: Arc::new(catalog), ..spec() };
    let cluster = EmbeddedCluster::start(spec, EmbeddedConfig::default()).unwrap();
    let mut t = cluster.transport();
    // Messages routed while one transaction reads kv key `k` (on partition k mod 4), and then
    // an item if `item`.
    let mut run = |k: i64, item: bool| {
        let before = cluster.messages_total();
        let txn = match t
            .request(RequestBody::Begin { isolation: Default::default(), retrying_for: Duration::ZERO })
            .unwrap()
        {
            ResponseBody::Begun(txn) => txn,
            other => panic!("{other:?}"),
        };
        t.request(RequestBody::Op { txn, op: Op::Read { table: "kv".into(), key: vec![Value::Int(k)] } }).unwrap();
        if item {
            t.request(RequestBody::Op { txn, op: Op::Read { table: "items".into(), key: vec![Value::Int(1)] } })
                .unwrap();
        }
        assert_eq!(t.request(RequestBody::Commit { txn }).unwrap(), ResponseBody::Committed);
        cluster.messages_total() - before
    };
    for k in 0..4 {
        // The fewest of a few runs: the cluster's first transactions also carry its start-up
        // messages (epoch announcements).
        let (alone, with_item) = (0..4)
            .map(|_| (run(k, false), run(k, true)))
            .fold((u64::MAX, u64::MAX), |m, r| (m.0.min(r.0), m.1.min(r.1)));
        assert_eq!(with_item, alone + 4, "kv key {k}: the item read adds its round trip only");
    }
    cluster.shutdown().unwrap();
}
