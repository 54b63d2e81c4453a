//! Unit tests of coordfree, named after its rules (the property tests over whole clusters are
//! in `crates/engine/tests/coordfree.rs`).

use super::messages::{IdAssign, KeyWrites, Record, Seen, WriteMeta};
use super::partition::CoordfreePartition;
use super::{contains_id, ramp, rewrite_ids, tmp_id};
use crate::engine::PartitionEngine;
use crate::message::Addr;
use crate::op::OpKind;
use litmus_core::formula::ColumnUpdate;
use litmus_core::{Formula, Key, NodeId, PartitionId, Row, TableId, Time, Timestamp, TxnId, Value};
use litmus_storage::mvcc::MvccStore;
use std::collections::BTreeMap;
use std::sync::Arc;

fn txn(seq: u64) -> TxnId {
    TxnId { node: NodeId(1), epoch: 2, seq }
}

fn key(vs: &[i64]) -> Key {
    Key::ints(vs)
}

#[test]
fn rule_r5_temporary_ids_are_unique_per_transaction_and_below_every_real_id() {
    let ids: Vec<i64> = (0..1000).map(|s| tmp_id(txn(s))).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len());
    assert!(ids.iter().all(|&i| i < -(1 << 60)));
    assert_ne!(tmp_id(TxnId { node: NodeId(2), epoch: 2, seq: 5 }), tmp_id(txn(5)));
    let mut row = vec![Value::Int(ids[3]), Value::Int(7)];
    assert!(rewrite_ids(&mut row, &[(ids[3], 41)]));
    assert_eq!(row, vec![Value::Int(41), Value::Int(7)]);
    assert!(!rewrite_ids(&mut row, &[(ids[3], 41)]));
    let k = key(&[1, ids[3]]);
    assert!(contains_id(&k, &[], ids[3]));
    assert!(!contains_id(&key(&[1, 2]), &[], ids[3]));
}

#[test]
fn rule_r4_a_key_named_by_another_writers_metadata_is_fetched_again() {
    let t = TableId(0);
    let w1 = Arc::new(WriteMeta { txn: txn(1), keys: vec![(t, key(&[0])), (t, key(&[1]))] });
    let w0 = Arc::new(WriteMeta { txn: txn(0), keys: vec![(t, key(&[0])), (t, key(&[1]))] });
    let mut seen = BTreeMap::new();
    seen.insert((t, key(&[0])), Seen { ts: Timestamp(3), writer: Some(w1.clone()) });
    seen.insert((t, key(&[1])), Seen { ts: Timestamp(2), writer: Some(w0) });
    let wants = ramp::missing(&seen, &|_| true, &|_| false);
    // Key 1 was read at writer 0's version, but writer 1 wrote it too; key 0 likewise for
    // writer 0 (the partition decides which is newer).
    assert_eq!(wants.len(), 2);
    let k1 = wants.iter().find(|w| w.key == key(&[1])).unwrap();
    assert_eq!((k1.have, k1.writers.clone()), (Timestamp(2), vec![txn(1)]));
    // Keys already handed to the procedure are not fetched; a version from the same writer is
    // consistent.
    assert!(ramp::missing(&seen, &|_| false, &|_| false).is_empty());
    seen.insert((t, key(&[1])), Seen { ts: Timestamp(4), writer: Some(w1) });
    assert!(ramp::missing(&seen, &|_| true, &|_| false).is_empty());
}

/// The counter's partition assigns ids in commit order (not transaction order), from the
/// counter's value, increments it, and puts the rows under the real id; replaying the log
/// gives the same database.
#[test]
fn rule_r5_the_counter_partition_assigns_ids_in_commit_order_and_replays_them() {
    let (counter, rows) = (TableId(0), TableId(1));
    let mut store = MvccStore::new();
    store.put(counter, key(&[7]), Timestamp(0), Some(vec![Value::Int(7), Value::Int(10)].into()));
    let mut records = Vec::new();
    for seq in [1, 2] {
        let tmp = tmp_id(txn(seq));
        let bump = OpKind::Update { key: key(&[7]), updates: vec![ColumnUpdate::new(1, Formula::Add(Value::Int(1)))] };
        let row: Row = vec![Value::Int(7), Value::Int(tmp), Value::Int(seq as i64)].into();
        let insert = OpKind::Insert { key: key(&[7, tmp]), row };
        records.push(Record::Prepared {
            txn: txn(seq),
            meta: Arc::new(WriteMeta { txn: txn(seq), keys: vec![(counter, key(&[7])), (rows, key(&[7, tmp]))] }),
            writes: vec![
                KeyWrites { table: counter, key: key(&[7]), ops: vec![bump] },
                KeyWrites { table: rows, key: key(&[7, tmp]), ops: vec![insert] },
            ],
            assign: Some(IdAssign { table: counter, key: key(&[7]), column: 1, tmp }),
            participants: vec![PartitionId(0)],
            id_partition: Some(PartitionId(0)),
            coordinator: Addr::Coordinator(NodeId(1)),
        });
    }
    // The second transaction commits first: it gets id 10.
    for seq in [2, 1] {
        records.push(Record::Committed { txn: txn(seq), ids: vec![], at: Time::ZERO });
    }
    let bytes: Vec<Vec<u8>> = records.iter().map(|r| postcard::to_stdvec(r).unwrap()).collect();
    let mut p = CoordfreePartition::default();
    let initial = store.clone();
    for b in &bytes {
        p.apply_bytes(b, &mut store).unwrap();
    }
    let row_of = |s: &MvccStore, id: i64| s.latest(rows, &key(&[7, id])).and_then(|(_, r)| r.cloned());
    assert_eq!(row_of(&store, 10), Some(Row::from(vec![Value::Int(7), Value::Int(10), Value::Int(2)])));
    assert_eq!(row_of(&store, 11), Some(Row::from(vec![Value::Int(7), Value::Int(11), Value::Int(1)])));
    let next = store.latest(counter, &key(&[7])).and_then(|(_, r)| r.cloned()).unwrap();
    assert_eq!(next[1], Value::Int(12));
    assert_eq!(row_of(&store, tmp_id(txn(1))), None, "a row left under its temporary id");
    p.check_invariants().unwrap();
    let mut replayed = initial;
    let mut q = CoordfreePartition::default();
    for b in &bytes {
        q.apply_bytes(b, &mut replayed).unwrap();
    }
    assert_eq!(replayed, store, "replay gave another database");
}

/// R4b: the read index asks, for one batch, exactly what the reference [`ramp::missing`] asks
/// for that batch, and never the same (key, writer) twice.
#[test]
fn rule_r4b_the_read_index_asks_what_the_scan_of_the_read_set_asks_once() {
    use rand::{Rng, SeedableRng};
    let t = TableId(0);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
    for _ in 0..300 {
        // Writers 0..6 over keys 0..12, each writing 1-4 keys; a read set of versions by them.
        let metas: Vec<Arc<WriteMeta>> = (0..6)
            .map(|w| {
                let n = rng.gen_range(1..=4);
                let mut keys: Vec<(TableId, Key)> = (0..n).map(|_| (t, key(&[rng.gen_range(0..12)]))).collect();
                keys.sort();
                keys.dedup();
                Arc::new(WriteMeta { txn: txn(w), keys })
            })
            .collect();
        let mut seen = BTreeMap::new();
        let mut index = ramp::ReadIndex::default();
        for k in 0..12 {
            if rng.gen_bool(0.6) {
                let writer = rng.gen_bool(0.8).then(|| metas[rng.gen_range(0..6)].clone());
                let s = Seen { ts: Timestamp(rng.gen_range(1..9)), writer };
                index.add(&s);
                seen.insert((t, key(&[k])), s);
            }
        }
        let batch: std::collections::BTreeSet<(TableId, Key)> =
            seen.keys().filter(|_| rng.gen_bool(0.5)).cloned().collect();
        let scan: ramp::ScanRead = (t, key(&[rng.gen_range(0..12)]), Some(key(&[rng.gen_range(0..13)])), None);
        let scans = if rng.gen_bool(0.5) { vec![scan] } else { vec![] };
        let covered = |k: &(TableId, Key)| scans.iter().any(|s| ramp::covered_by(s, k.0, &k.1));
        let reference = ramp::missing(&seen, &|k| batch.contains(k), &covered);
        assert_eq!(index.missing(&seen, &batch, &scans), reference);
        assert!(index.missing(&seen, &batch, &scans).is_empty(), "asked twice");
    }
}

/// The check above, fed an index that forgot a writer's metadata: it asks less than the
/// reference, and the comparison sees it.
#[test]
fn break_the_rule_an_index_missing_a_writer_asks_less() {
    let t = TableId(0);
    let w1 = Arc::new(WriteMeta { txn: txn(1), keys: vec![(t, key(&[0])), (t, key(&[1]))] });
    let w0 = Arc::new(WriteMeta { txn: txn(0), keys: vec![(t, key(&[0])), (t, key(&[1]))] });
    let mut seen = BTreeMap::new();
    seen.insert((t, key(&[0])), Seen { ts: Timestamp(3), writer: Some(w1) });
    seen.insert((t, key(&[1])), Seen { ts: Timestamp(2), writer: Some(w0) });
    let batch = seen.keys().cloned().collect();
    let mut index = ramp::ReadIndex::default();
    index.add(&seen[&(t, key(&[1]))]); // writer 1's metadata never indexed
    let reference = ramp::missing(&seen, &|_| true, &|_| false);
    assert_ne!(index.missing(&seen, &batch, &[]), reference);
}

/// `WriteMeta::names` rejects keys outside its range without a search and finds the ones
/// inside, across tables (keys sort by table first).
#[test]
fn write_meta_names_exactly_its_keys() {
    let (a, b) = (TableId(1), TableId(2));
    let meta = WriteMeta { txn: txn(0), keys: vec![(a, key(&[5])), (b, key(&[1])), (b, key(&[9]))] };
    for (k, named) in [
        ((a, key(&[5])), true),
        ((b, key(&[1])), true),
        ((b, key(&[9])), true),
        ((a, key(&[4])), false), // below the range
        ((a, key(&[6])), false), // inside the range, not written
        ((b, key(&[5])), false),
        ((b, key(&[10])), false), // above the range
        ((TableId(0), key(&[5])), false),
    ] {
        assert_eq!(meta.names(&k), named, "{k:?}");
    }
    assert!(!WriteMeta { txn: txn(1), keys: vec![] }.names(&(a, key(&[5]))));
}
