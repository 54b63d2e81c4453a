//! Unit tests of coordfree, named after its rules (the property tests over whole clusters are
//! in `crates/engine/tests/coordfree.rs`).

use super::messages::{IdAssign, KeyWrites, Record, Seen, Want, WriteMeta};
use super::partition::CoordfreePartition;
use super::{contains_id, ramp, rewrite_ids, tmp_id};
use litmus_core::formula::ColumnUpdate;
use litmus_core::{Formula, Key, NodeId, PartitionId, Row, TableId, Time, Timestamp, TxnId, Value};
use litmus_protocol::engine::PartitionEngine;
use litmus_protocol::message::Addr;
use litmus_protocol::op::OpKind;
use litmus_storage::mvcc::MvccStore;
use std::sync::Arc;

fn txn(seq: u64) -> TxnId {
    TxnId { node: NodeId(1), epoch: 2, seq }
}

fn key(vs: &[i64]) -> Key {
    Key::ints(vs)
}

/// Every key on a partition of its own (its first column): no writer's timestamp on one
/// partition says anything about another key (CF-4c never applies).
fn own_partition(k: &(TableId, Key)) -> Option<PartitionId> {
    match Key::decode(k.1.as_bytes()).ok()?.first()? {
        Value::Int(i) => Some(PartitionId(*i as u32)),
        _ => None,
    }
}

#[test]
fn rule_cf5_temporary_ids_are_unique_per_transaction_and_below_every_real_id() {
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

proptest::proptest! {
    /// §6.2's `[tmpID → realID]` lookup finds the id in a key by walking its encoding
    /// ([`Key::has_int`]): exactly in the keys that hold it, whatever the key's other values
    /// (strings holding the id's bytes included).
    #[test]
    fn rule_temporary_ids_are_found_in_every_key_that_holds_one(
        ints in proptest::collection::vec(-3i64..3, 0..4),
        at in 0usize..4,
        text in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12),
    ) {
        let tmp = tmp_id(txn(7));
        let mut values: Vec<Value> = ints.into_iter().map(Value::Int).collect();
        values.insert(at.min(values.len()), Value::String(String::from_utf8_lossy(&text).as_ref().into()));
        let without = Key::encode(&values).expect("encodable");
        proptest::prop_assert!(!contains_id(&without, &[], tmp));
        values.insert(at.min(values.len()), Value::Int(tmp));
        let with = Key::encode(&values).expect("encodable");
        proptest::prop_assert!(contains_id(&with, &[], tmp));
    }
}

#[test]
fn rule_cf4_a_key_named_by_another_writers_metadata_is_fetched_again() {
    let t = TableId(0);
    let w1 = Arc::new(WriteMeta::new(txn(1), vec![(t, key(&[0])), (t, key(&[1]))]));
    let w0 = Arc::new(WriteMeta::new(txn(0), vec![(t, key(&[0])), (t, key(&[1]))]));
    let mut seen = ramp::ReadSet::default();
    seen.insert((t, key(&[0])), Seen { ts: Timestamp(3), writer: Some(w1.clone()) });
    seen.insert((t, key(&[1])), Seen { ts: Timestamp(2), writer: Some(w0) });
    let wants = ramp::missing(&seen, &|_| true, &|_| false, &own_partition);
    // Key 1 was read at writer 0's version, but writer 1 wrote it too; key 0 likewise for
    // writer 0 (the partition decides which is newer).
    assert_eq!(wants.len(), 2);
    let k1 = wants.iter().find(|w| w.key == key(&[1])).unwrap();
    assert_eq!((k1.have, k1.writers.clone()), (Timestamp(2), vec![txn(1)]));
    // Keys already handed to the procedure are not fetched; a version from the same writer is
    // consistent.
    assert!(ramp::missing(&seen, &|_| false, &|_| false, &own_partition).is_empty());
    seen.insert((t, key(&[1])), Seen { ts: Timestamp(4), writer: Some(w1) });
    assert!(ramp::missing(&seen, &|_| true, &|_| false, &own_partition).is_empty());
}

/// The counter's partition assigns ids in commit order (not transaction order), from the
/// counter's value, increments it, and puts the rows under the real id; replaying the log
/// gives the same database.
#[test]
fn rule_cf5_the_counter_partition_assigns_ids_in_commit_order_and_replays_them() {
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
            meta: Arc::new(WriteMeta::new(txn(seq), vec![(counter, key(&[7])), (rows, key(&[7, tmp]))])),
            writes: Arc::new([
                KeyWrites { table: counter, key: key(&[7]), ops: vec![bump], lww: None },
                KeyWrites { table: rows, key: key(&[7, tmp]), ops: vec![insert], lww: None },
            ]),
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

/// CF-4b: the read index asks, for each batch, exactly what the reference [`ramp::missing`] asks
/// for that batch less what earlier batches asked, and never the same (key, writer) twice —
/// also when a later batch reads keys of an earlier one again (CF-4a) after more writers were
/// learnt, which the index checks against the new writers only.
#[test]
fn rule_cf4b_the_read_index_asks_what_the_scan_of_the_read_set_asks_once() {
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeSet;
    let t = TableId(0);
    // Key 11 is a table of its own, replicated in some cases (replication is per table).
    let tk = |k: i64| (if k == 11 { TableId(1) } else { t }, key(&[k]));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
    let (mut asks, mut replicated_skips) = (0, 0);
    for _ in 0..500 {
        // Writers 0..6 over keys 0..12, each writing 1-4 keys; a read set of versions by them.
        let metas: Vec<Arc<WriteMeta>> = (0..6)
            .map(|w| {
                let n = rng.gen_range(1..=4);
                let mut keys: Vec<(TableId, Key)> = (0..n).map(|_| tk(rng.gen_range(0..12))).collect();
                keys.sort();
                keys.dedup();
                Arc::new(WriteMeta::new(txn(w), keys))
            })
            .collect();
        // Keys on two partitions (CF-4c applies across keys), or each on its own (it never does),
        // and key 11 sometimes in a replicated table (not tracked).
        let (parts, replicated) = (rng.gen_bool(0.7), rng.gen_bool(0.3));
        let part_of = |k: &(TableId, Key)| match own_partition(k) {
            Some(PartitionId(11)) if replicated => None,
            Some(PartitionId(i)) if parts => Some(PartitionId(i % 2)),
            other => other,
        };
        // Two batches: the first reads some keys; the second reads new keys and again some of
        // the first's, after the writers of its new versions were learnt.
        let mut seen = ramp::ReadSet::default();
        let mut index = ramp::ReadIndex::default();
        let mut asked_before: BTreeSet<(Key, TxnId)> = BTreeSet::new();
        let mut first: Vec<(TableId, Key)> = Vec::new();
        for round in 0..2 {
            let mut batch: ramp::KeySet = first.iter().filter(|_| rng.gen_bool(0.5)).cloned().collect();
            for k in 0..12 {
                if seen.contains_key(&tk(k)) || !rng.gen_bool(0.4) {
                    continue;
                }
                // A version's writer wrote its key (or it is the initial version).
                let wrote: Vec<&Arc<WriteMeta>> = metas.iter().filter(|m| m.keys.contains(&tk(k))).collect();
                let writer =
                    (!wrote.is_empty() && rng.gen_bool(0.8)).then(|| wrote[rng.gen_range(0..wrote.len())].clone());
                let s = Seen { ts: Timestamp(rng.gen_range(1..9)), writer };
                index.add(&s, part_of(&tk(k)));
                seen.insert(tk(k), s);
                batch.insert(tk(k));
            }
            if round == 0 {
                first = batch.iter().cloned().collect();
            }
            let scan: ramp::ScanRead = (t, key(&[rng.gen_range(0..12)]), Some(key(&[rng.gen_range(0..13)])), None);
            let scans: Vec<ramp::Scanned> = if rng.gen_bool(0.5) {
                vec![ramp::Scanned { read: scan, part: PartitionId(0), at: Timestamp(0) }]
            } else {
                vec![]
            };
            let covered = |k: &(TableId, Key)| scans.iter().any(|s| ramp::covered_by(&s.read, k.0, &k.1));
            let reference: Vec<Want> = ramp::missing(&seen, &|k| batch.contains(k), &covered, &part_of)
                .into_iter()
                .filter_map(|mut w| {
                    w.writers.retain(|txn| !asked_before.contains(&(w.key.clone(), *txn)));
                    (!w.writers.is_empty()).then_some(w)
                })
                .collect();
            let asked = index.missing(&seen, &batch, &scans, &part_of);
            assert_eq!(asked, reference, "round {round}");
            asks += asked.len();
            replicated_skips += usize::from(replicated && seen.keys().any(|k| k.0 == TableId(1)));
            assert!(index.missing(&seen, &batch, &scans, &part_of).is_empty(), "asked twice");
            asked_before.extend(asked.iter().flat_map(|w| w.writers.iter().map(|txn| (w.key.clone(), *txn))));
        }
    }
    // The comparison compared something: second rounds, and reads of the replicated table.
    assert!(asks > 300 && replicated_skips > 50, "{asks} asks, {replicated_skips} replicated reads");
}

/// The check above, fed an index that forgot a writer's metadata: it asks less than the
/// reference, and the comparison sees it.
#[test]
fn break_the_rule_an_index_missing_a_writer_asks_less() {
    let t = TableId(0);
    let w1 = Arc::new(WriteMeta::new(txn(1), vec![(t, key(&[0])), (t, key(&[1]))]));
    let w0 = Arc::new(WriteMeta::new(txn(0), vec![(t, key(&[0])), (t, key(&[1]))]));
    let mut seen = ramp::ReadSet::default();
    seen.insert((t, key(&[0])), Seen { ts: Timestamp(3), writer: Some(w1) });
    seen.insert((t, key(&[1])), Seen { ts: Timestamp(2), writer: Some(w0) });
    let batch = seen.keys().cloned().collect();
    let mut index = ramp::ReadIndex::default();
    index.add(&seen[&(t, key(&[1]))], None); // writer 1's metadata never indexed
    let reference = ramp::missing(&seen, &|_| true, &|_| false, &own_partition);
    assert_ne!(index.missing(&seen, &batch, &[], &own_partition), reference);
}

/// CF-4c: a key of partition P read at or after writer T's commit on P is not asked for T's
/// version; one read before it is. Keys 0-2 live on P0, key 3 on P1.
#[test]
fn rule_cf4c_a_key_read_after_the_writers_commit_on_its_partition_is_not_asked_again() {
    let t = TableId(0);
    let part_of = |k: &(TableId, Key)| Some(PartitionId(u32::from(k.1 == key(&[3]))));
    let all = vec![(t, key(&[0])), (t, key(&[1])), (t, key(&[2])), (t, key(&[3]))];
    let loader = Arc::new(WriteMeta::new(txn(0), all.clone()));
    let later = Arc::new(WriteMeta::new(txn(1), vec![(t, key(&[1]))]));
    let mut seen = ramp::ReadSet::default();
    seen.insert((t, key(&[0])), Seen { ts: Timestamp(5), writer: Some(loader.clone()) });
    // Overwritten after the loader (ts 9 > 5) on P0: reflects the loader's write.
    seen.insert((t, key(&[1])), Seen { ts: Timestamp(9), writer: Some(later.clone()) });
    // Read at a version older than the loader's on P0: the loader's is newer.
    seen.insert((t, key(&[2])), Seen { ts: Timestamp(3), writer: Some(later) });
    // On P1, where the loader's timestamp is not known: asked.
    seen.insert((t, key(&[3])), Seen { ts: Timestamp(7), writer: None });
    let batch = seen.keys().cloned().collect();
    let mut index = ramp::ReadIndex::default();
    for (k, s) in &seen {
        index.add(s, part_of(k));
    }
    let asked: Vec<Key> = index.missing(&seen, &batch, &[], &part_of).into_iter().map(|w| w.key).collect();
    assert_eq!(asked, vec![key(&[2]), key(&[3])]);
    assert_eq!(
        ramp::missing(&seen, &|_| true, &|_| false, &part_of).into_iter().map(|w| w.key).collect::<Vec<_>>(),
        vec![key(&[2]), key(&[3])]
    );
}

/// The rule above broken on purpose — the writer's timestamp on the partition taken as known
/// for every partition — skips the key of P1 whose loader version may be newer, and the
/// check sees it.
#[test]
fn break_the_rule_cf4c_a_timestamp_from_another_partition_skips_a_needed_fetch() {
    let t = TableId(0);
    let loader = Arc::new(WriteMeta::new(txn(0), vec![(t, key(&[0])), (t, key(&[3]))]));
    let mut seen = ramp::ReadSet::default();
    seen.insert((t, key(&[0])), Seen { ts: Timestamp(5), writer: Some(loader) });
    seen.insert((t, key(&[3])), Seen { ts: Timestamp(7), writer: None });
    let batch = seen.keys().cloned().collect();
    let right = |k: &(TableId, Key)| Some(PartitionId(u32::from(k.1 == key(&[3]))));
    let broken = |_: &(TableId, Key)| Some(PartitionId(0));
    let mut index = ramp::ReadIndex::default();
    for (k, s) in &seen {
        index.add(s, broken(k));
    }
    let asked = index.missing(&seen, &batch, &[], &broken);
    assert_ne!(asked, ramp::missing(&seen, &|_| true, &|_| false, &right));
    assert!(asked.is_empty(), "the key of P1 was skipped");
}

/// `WriteMeta::names` rejects keys outside its range without a search and finds the ones
/// inside, across tables (keys sort by table first).
#[test]
fn write_meta_names_exactly_its_keys() {
    let (a, b) = (TableId(1), TableId(2));
    let meta = WriteMeta::new(txn(0), vec![(a, key(&[5])), (b, key(&[1])), (b, key(&[9]))]);
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
    assert!(!WriteMeta::new(txn(1), vec![]).names(&(a, key(&[5]))));
}

/// `WriteMeta::names` with its Bloom filter built — small metadata and a loader's — names
/// exactly its keys: the filter may let a key through to the search, never turn one away.
#[test]
fn write_meta_names_exactly_its_keys_through_its_filter() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    for n in [1usize, 3, 23, 64, 65, 250, 1000] {
        let mut keys: Vec<(TableId, Key)> =
            (0..n).map(|_| (TableId(rng.gen_range(0..3)), key(&[rng.gen_range(0..2000), 7]))).collect();
        keys.sort();
        keys.dedup();
        let meta = WriteMeta::new(txn(0), keys.clone());
        for _ in 0..2000 {
            let k = (TableId(rng.gen_range(0..3)), key(&[rng.gen_range(0..2000), 7]));
            assert_eq!(meta.names(&k), keys.binary_search(&k).is_ok(), "{n} keys, {k:?}");
        }
        assert!(keys.iter().all(|k| meta.names(k)), "{n} keys: a written key turned away");
    }
}

/// The filter is what keeps `names` cheap: it turns away nearly every key of the same shape
/// that the metadata does not name (TPC-C-like keys: district, order and stock ids).
#[test]
fn write_meta_filter_turns_away_keys_it_does_not_name() {
    let keys: Vec<(TableId, Key)> = {
        let mut k: Vec<_> = (0..250).map(|i| (TableId(8), key(&[3, i]))).collect();
        k.extend((1..=10).map(|l| (TableId(6), key(&[3, 4, 3001, l]))));
        k.sort();
        k
    };
    let meta = WriteMeta::new(txn(0), keys);
    let others: Vec<(TableId, Key)> = (250..10_250).map(|i| (TableId(8), key(&[3, i]))).collect();
    let passed = others.iter().filter(|k| meta.filter_passes(k)).count();
    assert!(passed < others.len() / 20, "{passed} of {} unnamed keys passed the filter", others.len());
}

/// CF-4d: a reader holding writer X's *prepared* version of a key asks for writer Y's, also
/// prepared there. Which is newer is decided by which commits last, so the partition holds the
/// answer until one of them commits: Y first → X's version (still to commit) stays the newest
/// and nothing is sent; X first → Y's prepared version is newer. Answering at once with Y's
/// version (the rule broken) leaves the reader at Y when Y commits before X: fractured, as the
/// two-batch reader of `tests/coordfree.rs` found.
#[test]
fn rule_cf4d_a_second_round_between_two_prepared_versions_waits_for_a_commit() {
    use litmus_core::{Catalog, Column, ColumnType, Partitioning, TableSchema};
    let mut catalog = Catalog::new();
    let int = |n: &str| Column::new(n, ColumnType::Int);
    catalog.add(TableSchema::new("kv", vec![int("k"), int("v")], &["k"], Partitioning::KeyPrefix { prefix_len: 1 }));
    let t = TableId(0);
    let k = key(&[0]);
    let prepare = |seq: u64| Record::Prepared {
        txn: txn(seq),
        meta: Arc::new(WriteMeta::new(txn(seq), vec![(t, k.clone())])),
        writes: Arc::new([KeyWrites {
            table: t,
            key: k.clone(),
            ops: vec![OpKind::Write { key: k.clone(), row: vec![Value::Int(0), Value::Int(seq as i64)].into() }],
            lww: None,
        }]),
        assign: None,
        participants: vec![PartitionId(0), PartitionId(1)],
        id_partition: None,
        coordinator: Addr::Coordinator(NodeId(1)),
    };
    let commit = |seq: u64| Record::Committed { txn: txn(seq), ids: vec![], at: Time::ZERO };
    let want =
        Want { table: t, key: k.clone(), have: Timestamp::MAX, have_writer: Some(txn(1)), writers: vec![txn(2)] };
    let run = |records: &[Record]| {
        let (mut p, mut store) = (CoordfreePartition::default(), MvccStore::new());
        for r in records {
            p.apply_bytes(&postcard::to_stdvec(r).unwrap(), &mut store).unwrap();
        }
        p.fetch(std::slice::from_ref(&want), &store, &catalog)
            .map(|f| f.unwrap().iter().map(|f| f.seen.ts).collect::<Vec<_>>())
    };
    assert_eq!(run(&[prepare(1), prepare(2)]), None, "undetermined: held");
    assert_eq!(run(&[prepare(1), prepare(2), commit(2)]), Some(vec![]), "Y first: X's stays newest");
    assert_eq!(run(&[prepare(1), prepare(2), commit(1)]), Some(vec![Timestamp::MAX]), "X first: Y's prepared");
    assert_eq!(run(&[prepare(1), prepare(2), commit(1), commit(2)]), Some(vec![Timestamp(2)]));
    // Two wanted writers both prepared: the same question between them.
    let both = Want { have: Timestamp::ZERO, have_writer: None, writers: vec![txn(1), txn(2)], ..want.clone() };
    let (mut p, mut store) = (CoordfreePartition::default(), MvccStore::new());
    for r in [prepare(1), prepare(2)] {
        p.apply_bytes(&postcard::to_stdvec(&r).unwrap(), &mut store).unwrap();
    }
    assert!(p.fetch(std::slice::from_ref(&both), &store, &catalog).is_none());
}

/// A one-table catalog (`kv (k, v)`, partitioned by `k`) for partition-level tests.
fn kv_catalog() -> litmus_core::Catalog {
    use litmus_core::{Catalog, Column, ColumnType, Partitioning, TableSchema};
    let mut catalog = Catalog::new();
    let int = |n: &str| Column::new(n, ColumnType::Int);
    catalog.add(TableSchema::new("kv", vec![int("k"), int("v")], &["k"], Partitioning::KeyPrefix { prefix_len: 1 }));
    catalog
}

/// Writer `seq` prepared (`participants`) writing `v = seq` to key `k`, and its commit at `at`.
fn prepared_and_committed(seq: u64, k: i64, participants: &[u32], at: Time) -> [Record; 2] {
    let (t, key) = (TableId(0), key(&[k]));
    let prepared = Record::Prepared {
        txn: txn(seq),
        meta: Arc::new(WriteMeta::new(txn(seq), vec![(t, key.clone())])),
        writes: Arc::new([KeyWrites {
            table: t,
            key: key.clone(),
            ops: vec![OpKind::Write { key, row: vec![Value::Int(k), Value::Int(seq as i64)].into() }],
            lww: None,
        }]),
        assign: None,
        participants: participants.iter().map(|p| PartitionId(*p)).collect(),
        id_partition: None,
        coordinator: Addr::Coordinator(NodeId(1)),
    };
    [prepared, Record::Committed { txn: txn(seq), ids: vec![], at }]
}

/// Partition 0 of a cluster of two, stepped by hand.
struct Part0 {
    p: CoordfreePartition,
    ctx: litmus_protocol::engine::PartCtxParts,
}

impl Part0 {
    fn new(records: &[Record]) -> Self {
        let mut ctx = litmus_protocol::engine::PartCtxParts::new(PartitionId(0), 2, kv_catalog(), 1);
        let mut p = CoordfreePartition::default();
        for r in records {
            p.apply_bytes(&postcard::to_stdvec(r).unwrap(), &mut ctx.store).unwrap();
        }
        Part0 { p, ctx }
    }

    /// Runs `f` at `now`; the requests sent to other partitions, decoded.
    fn step(
        &mut self,
        now: Time,
        f: impl FnOnce(&mut CoordfreePartition, &mut litmus_protocol::engine::PartCtx),
    ) -> Vec<(PartitionId, super::messages::Request)> {
        use litmus_protocol::message::Message;
        self.run(now, f)
            .send
            .into_iter()
            .filter_map(|env| match (env.to, env.msg) {
                (Addr::Partition(p), Message::PartitionRequest(r)) => Some((p, r.body.decode().unwrap())),
                _ => None,
            })
            .collect()
    }

    /// Runs `f` at `now`; what it logged and sent.
    fn run(
        &mut self,
        now: Time,
        f: impl FnOnce(&mut CoordfreePartition, &mut litmus_protocol::engine::PartCtx),
    ) -> litmus_protocol::machine::Effects {
        self.ctx.now = now;
        self.ctx.run(&mut self.p, f)
    }

    /// `req` from coordinator 1: how many records it logged, and its replies to the coordinator.
    fn ask(&mut self, now: Time, req: super::messages::Request) -> (usize, Vec<super::messages::Reply>) {
        use litmus_protocol::message::Message;
        let from = Addr::Coordinator(NodeId(1));
        let out = self.run(now, |p, ctx| p.on_request(from, litmus_protocol::message::Payload::new(req), ctx));
        let replies = out
            .send
            .into_iter()
            .filter_map(|env| match env.msg {
                Message::PartitionReply(r) if env.to == from => Some(r.body.decode().unwrap()),
                _ => None,
            })
            .collect();
        (out.persist.len(), replies)
    }

    fn request(&mut self, now: Time, from: Addr, req: super::messages::Request) {
        self.step(now, |p, ctx| p.on_request(from, litmus_protocol::message::Payload::new(req), ctx));
    }
}

/// CF-8: the metadata of a commit is kept while any participant may not have committed it, and
/// collected `META_KEEP` after the partition learns that all have: from the coordinator's
/// `Done`, or, when that never comes (a crashed coordinator), by asking the others.
#[test]
fn rule_cf8_metadata_is_collected_meta_keep_after_every_participant_committed() {
    use super::messages::Request;
    use super::{INTENT_STALE, META_KEEP};
    let s = |secs: u64| Time::ZERO + std::time::Duration::from_secs(secs);
    let mut records = Vec::new();
    records.extend(prepared_and_committed(1, 0, &[0, 1], s(1))); // told by its coordinator
    records.extend(prepared_and_committed(2, 2, &[0, 1], s(1))); // its coordinator crashed
    records.extend(prepared_and_committed(3, 4, &[0], s(1))); // one participant: done at commit
    let mut part = Part0::new(&records);
    part.request(s(2), Addr::Coordinator(NodeId(1)), Request::Done { txns: vec![txn(1)] });
    // Long past META_KEEP: the writer of one participant and the one told are collected; the
    // one nobody has confirmed is kept, and its other participant is asked about it.
    let late = s(2) + META_KEEP + INTENT_STALE;
    let asked = part.step(late, |p, ctx| p.on_tick(ctx));
    assert!(!part.p.keeps_meta_of(txn(1)), "collected META_KEEP after Done");
    assert!(!part.p.keeps_meta_of(txn(3)), "a single participant's commit is done at once");
    assert!(part.p.keeps_meta_of(txn(2)), "kept: partition 1 may not have committed it");
    assert_eq!(asked, vec![(PartitionId(1), Request::AskCommitted { txns: vec![txn(2)] })]);
    // Partition 1 answers that it has: collected META_KEEP after the answer, not before.
    part.request(late, Addr::Partition(PartitionId(1)), Request::CommittedHere { txns: vec![txn(2)] });
    part.step(late + (META_KEEP - std::time::Duration::from_millis(1)), |p, ctx| p.on_tick(ctx));
    assert!(part.p.keeps_meta_of(txn(2)), "collected before META_KEEP had passed since");
    part.step(late + META_KEEP, |p, ctx| p.on_tick(ctx));
    assert!(!part.p.keeps_meta_of(txn(2)));
}

/// CF-8 at the asked partition: a transaction still prepared here is not reported committed;
/// one committed (or forgotten, which only a long-past commit can be) is.
#[test]
fn rule_cf8_an_asked_partition_reports_only_what_it_has_committed() {
    use super::messages::Request;
    let mut records = Vec::new();
    records.extend(prepared_and_committed(1, 0, &[0, 1], Time::ZERO));
    records.push(prepared_and_committed(2, 2, &[0, 1], Time::ZERO)[0].clone());
    let mut part = Part0::new(&records);
    let asker = Addr::Partition(PartitionId(1));
    let ask = Request::AskCommitted { txns: vec![txn(1), txn(2), txn(7)] };
    let answer = part.step(Time::ZERO, |p, ctx| p.on_request(asker, litmus_protocol::message::Payload::new(ask), ctx));
    assert_eq!(answer, vec![(PartitionId(1), Request::CommittedHere { txns: vec![txn(1), txn(7)] })]);
}

/// A second round asking partition 0 for `writer`'s version of `kv 0`, having read its first.
fn want(writer: u64) -> Want {
    Want { table: TableId(0), key: key(&[0]), have: Timestamp(1), have_writer: None, writers: vec![txn(writer)] }
}

/// CF-8: a second round that wants a version pruned since (more than `VERSIONS_KEPT` newer
/// ones) aborts the read instead of answering "nothing newer", which would leave the reader
/// fractured; one that wants a version its writer never wrote gets "nothing newer".
#[test]
fn rule_cf8_a_second_round_for_a_pruned_version_aborts_the_read() {
    use super::{VERSIONS_KEPT, VERSIONS_RECENT};
    let mut records = Vec::new();
    for seq in 1..=(VERSIONS_KEPT as u64 + 1) {
        records.extend(prepared_and_committed(seq, 0, &[0, 1], Time::ZERO));
    }
    // Past the recent window (CF-8b) — commits of another key — then one more version of key 0,
    // whose commit prunes it.
    let others = VERSIONS_KEPT as u64 + 1..VERSIONS_KEPT as u64 + 1 + VERSIONS_RECENT;
    for seq in others {
        records.extend(prepared_and_committed(1_000 + seq, 2, &[0, 1], Time::ZERO));
    }
    let newest = VERSIONS_KEPT as u64 + 2;
    records.extend(prepared_and_committed(newest, 0, &[0, 1], Time::ZERO));
    let part = Part0::new(&records);
    let found = part.p.fetch(&[want(newest)], &part.ctx.store, &part.ctx.catalog).unwrap().unwrap();
    let last_commit = Timestamp(newest + VERSIONS_RECENT);
    assert_eq!(found.iter().map(|f| f.seen.ts).collect::<Vec<_>>(), vec![last_commit]);
    let pruned = part.p.fetch(&[want(2)], &part.ctx.store, &part.ctx.catalog).unwrap();
    assert!(matches!(pruned, Err(litmus_core::Error::Abort(_))), "{pruned:?}");
    // A writer whose write to a key was dropped at its commit never had a version of it:
    // nothing newer, not an abort (which the reader's retries would meet again and again).
    let dropped = Want { key: key(&[1]), have: Timestamp::ZERO, ..want(2) };
    assert_eq!(part.p.fetch(&[dropped], &part.ctx.store, &part.ctx.catalog).unwrap().unwrap(), vec![]);
}

/// CF-8b: a version overwritten more than `VERSIONS_KEPT` times is still found while it is among
/// the partition's last `VERSIONS_RECENT` commits (the district row of a busy New-Order mix is
/// overwritten that often while one reader reads); beyond `VERSIONS_KEPT_MAX` versions of one
/// key the oldest go even so.
#[test]
fn rule_cf8b_versions_of_recent_commits_are_kept() {
    use super::{VERSIONS_KEPT, VERSIONS_KEPT_MAX};
    let versions = |n: u64| {
        let records: Vec<Record> =
            (1..=n).flat_map(|seq| prepared_and_committed(seq, 0, &[0, 1], Time::ZERO)).collect();
        Part0::new(&records)
    };
    let part = versions(VERSIONS_KEPT as u64 + 6);
    let found = part.p.fetch(&[want(2)], &part.ctx.store, &part.ctx.catalog).unwrap().unwrap();
    assert_eq!(found.iter().map(|f| f.seen.ts).collect::<Vec<_>>(), vec![Timestamp(2)], "a recent version was pruned");
    let part = versions(VERSIONS_KEPT_MAX as u64 + 2);
    let pruned = part.p.fetch(&[want(2)], &part.ctx.store, &part.ctx.catalog).unwrap();
    assert!(matches!(pruned, Err(litmus_core::Error::Abort(_))), "more than VERSIONS_KEPT_MAX kept: {pruned:?}");
}

/// The `Prepare` request of [`prepared_and_committed`]'s writer.
fn prepare_request(seq: u64, k: i64, participants: &[u32]) -> super::messages::Request {
    let [Record::Prepared { txn, meta, writes, assign, participants, id_partition, .. }, _] =
        prepared_and_committed(seq, k, participants, Time::ZERO)
    else {
        unreachable!("the first record is the prepare")
    };
    super::messages::Request::Prepare { txn, meta, writes, assign, participants, id_partition }
}

/// CF-9: a lone participant commits with its prepare, in the same step (both records logged
/// there), and answers `Committed`: one round instead of two. A resent prepare gets the same
/// answer and logs nothing; a participant of a transaction with others only prepares.
#[test]
fn rule_cf9_a_lone_participant_commits_with_its_prepare() {
    use super::messages::{Reply, Request};
    let mut part = Part0::new(&[]);
    let (logged, replies) = part.ask(Time::ZERO, prepare_request(1, 0, &[0]));
    assert_eq!((logged, replies.clone()), (2, vec![Reply::Committed { txn: txn(1), ids: vec![] }]));
    let read = |part: &Part0| part.ctx.store.get(TableId(0), &key(&[0]), Timestamp::MAX).cloned();
    assert_eq!(read(&part), Some(vec![Value::Int(0), Value::Int(1)].into()), "visible at once");
    assert_eq!(part.ask(Time::ZERO, prepare_request(1, 0, &[0])), (0, replies), "a resend");
    let (logged, replies) = part.ask(Time::ZERO, prepare_request(2, 0, &[0, 1]));
    assert_eq!((logged, replies), (1, vec![Reply::Prepared { txn: txn(2), result: Ok(()) }]));
    assert_eq!(read(&part), Some(vec![Value::Int(0), Value::Int(1)].into()), "prepared, not committed");
    let (_, replies) = part.ask(Time::ZERO, Request::Commit { txn: txn(2), ids: vec![] });
    assert_eq!(replies, vec![Reply::Committed { txn: txn(2), ids: vec![] }]);
    assert_eq!(read(&part), Some(vec![Value::Int(0), Value::Int(2)].into()));
    // A prepare naming another partition as its only participant is not this one's to commit.
    let (logged, replies) = part.ask(Time::ZERO, prepare_request(3, 0, &[1]));
    assert_eq!((logged, replies), (1, vec![Reply::Prepared { txn: txn(3), result: Ok(()) }]));
    assert_eq!(read(&part), Some(vec![Value::Int(0), Value::Int(2)].into()));
}

/// A read index emptied for another transaction (the coordinator reuses finished states)
/// asks exactly what a new one asks: nothing of the first transaction's writers, checked
/// keys, asked pairs or handed keys is left to suppress or add a second-round request.
#[test]
fn a_cleared_read_index_asks_what_a_new_one_asks() {
    let t = TableId(0);
    let part_of = |_: &(TableId, Key)| Some(PartitionId(0));
    let loader = Arc::new(WriteMeta::new(txn(0), vec![(t, key(&[0])), (t, key(&[1]))]));
    let later = Arc::new(WriteMeta::new(txn(1), vec![(t, key(&[1]))]));
    let mut seen = ramp::ReadSet::default();
    seen.insert((t, key(&[0])), Seen { ts: Timestamp(9), writer: Some(loader) });
    seen.insert((t, key(&[1])), Seen { ts: Timestamp(3), writer: Some(later) });
    let batch: ramp::KeySet = seen.keys().cloned().collect();
    let run = |index: &mut ramp::ReadIndex| {
        for (k, s) in &seen {
            index.add(s, part_of(k));
        }
        let asked: Vec<Key> = index.missing(&seen, &batch, &[], &part_of).into_iter().map(|w| w.key).collect();
        index.hand_over(batch.iter(), &[], &seen, &part_of);
        asked
    };
    let fresh = run(&mut ramp::ReadIndex::default());
    assert_eq!(fresh, vec![key(&[1])], "the loader's newer version of key 1 is asked");
    let mut reused = ramp::ReadIndex::default();
    run(&mut reused);
    reused.clear();
    assert_eq!(run(&mut reused), fresh);
}
