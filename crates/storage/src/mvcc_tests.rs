use super::*;
use litmus_core::Value;
use proptest::prelude::*;
use std::ops::Bound::{Excluded, Included, Unbounded};

const T: TableId = TableId(1);

fn k(i: i64) -> Key {
    Key::ints(&[i])
}
fn r(i: i64) -> Row {
    vec![Value::Int(i)].into()
}
fn ts(t: u64) -> Timestamp {
    Timestamp(t)
}

/// Every key looked up, row scanned and version installed or removed counts one unit of
/// work (what the simulator charges a partition step by); taking the count resets it, and
/// it is not state: a clone starts from nothing and equal stores compare equal.
#[test]
fn store_operations_are_counted_as_work() {
    let mut s = MvccStore::new();
    s.put(T, k(1), ts(1), Some(r(1)));
    s.put(T, k(2), ts(1), Some(r(2)));
    s.put(T, k(3), ts(1), Some(r(3)));
    assert_eq!(s.take_work(), 3);
    assert_eq!(s.take_work(), 0, "taken");
    assert!(s.get(T, &k(1), ts(2)).is_some());
    assert!(s.latest(T, &k(9)).is_none());
    assert_eq!(s.scan(T, Unbounded, Unbounded, ts(2), 10).len(), 3);
    assert_eq!(s.take_work(), 1 + 1 + (1 + 3), "two lookups and a scan of three rows");
    s.replace_latest(T, k(1), ts(3), Some(r(4)));
    assert!(s.remove_version(T, &k(2), ts(1)));
    assert_eq!(s.take_work(), 2);
    let _ = s.get(T, &k(1), ts(3));
    let copy = s.clone();
    assert_eq!(copy.take_work(), 0, "a clone starts counting from nothing");
    assert_eq!(copy, s, "the count is not state");
    assert_eq!(s.take_work(), 1);
}

/// `keys_in` lists every key holding a version, deleted ones included (unlike the scans),
/// lazily: only the keys taken count as work.
#[test]
fn keys_in_lists_deleted_keys_too() {
    let mut s = MvccStore::new();
    s.put(T, k(1), ts(1), Some(r(1)));
    s.put(T, k(1), ts(3), None);
    s.put(T, k(2), ts(1), Some(r(2)));
    s.put(T, k(3), ts(1), Some(r(3)));
    assert_eq!(s.scan_keys(T, Unbounded, Unbounded, Timestamp::MAX, 10), vec![&k(2), &k(3)]);
    s.take_work();
    assert_eq!(s.keys_in(T, Unbounded, Unbounded).take(2).collect::<Vec<_>>(), vec![&k(1), &k(2)]);
    assert_eq!(s.take_work(), 1 + 2);
    assert_eq!(s.keys_in(T, Excluded(&k(1)), Included(&k(3))).count(), 2);
    assert_eq!(s.keys_in(T, Included(&k(3)), Excluded(&k(1))).count(), 0, "inverted");
    assert_eq!(s.keys_in(TableId(2), Unbounded, Unbounded).count(), 0);
}

#[test]
fn read_sees_newest_version_at_or_below_ts() {
    let mut s = MvccStore::new();
    s.put(T, k(1), ts(2), Some(r(20)));
    s.put(T, k(1), ts(5), Some(r(50)));
    assert_eq!(s.get(T, &k(1), ts(1)), None);
    assert_eq!(s.get(T, &k(1), ts(2)), Some(&r(20)));
    assert_eq!(s.get(T, &k(1), ts(4)), Some(&r(20)));
    assert_eq!(s.get(T, &k(1), ts(5)), Some(&r(50)));
    assert_eq!(s.get(T, &k(1), Timestamp::MAX), Some(&r(50)));
    assert_eq!(s.get(TableId(2), &k(1), ts(5)), None, "tables are separate key spaces");
    s.check_invariants().unwrap();
}

#[test]
fn scan_keys_are_the_keys_scan_returns() {
    let mut s = MvccStore::new();
    for i in 0..8 {
        s.put(T, k(i), ts(1), Some(r(i)));
    }
    s.put(T, k(3), ts(2), None);
    for (lo, hi, at, limit) in [(0, 8, 9, 10), (1, 6, 9, 3), (2, 5, 1, 2), (0, 8, 9, 0), (5, 2, 9, 4)] {
        let (lo, hi) = (k(lo), k(hi));
        let keys: Vec<Key> =
            s.scan(T, Included(&lo), Excluded(&hi), ts(at), limit).into_iter().map(|(key, _)| key).collect();
        let only: Vec<Key> = s.scan_keys(T, Included(&lo), Excluded(&hi), ts(at), limit).into_iter().cloned().collect();
        assert_eq!(keys, only);
    }
}

#[test]
fn replace_latest_drops_a_lone_tombstone_with_its_key() {
    let mut s = MvccStore::new();
    s.replace_latest(T, k(1), ts(1), Some(r(1)));
    s.replace_latest(T, k(2), ts(2), Some(r(2)));
    s.replace_latest(T, k(1), ts(3), None);
    assert_eq!(s.latest(T, &k(1)), None, "the delete left nothing");
    assert_eq!((s.key_count(), s.version_count()), (1, 1));
    assert_eq!(s.scan_keys(T, Unbounded, Unbounded, Timestamp::MAX, 10), vec![&k(2)]);
    s.replace_latest(T, k(3), ts(4), None);
    assert_eq!((s.key_count(), s.version_count()), (1, 1), "deleting an absent key installs nothing");
    s.replace_latest(T, k(2), ts(5), None);
    assert_eq!(s, MvccStore::new(), "the table goes with its last key");
    // Above an older version the tombstone stays: it hides that version.
    s.put(T, k(4), ts(1), Some(r(4)));
    s.put(T, k(4), ts(2), Some(r(5)));
    s.replace_latest(T, k(4), ts(6), None);
    assert_eq!(s.get(T, &k(4), ts(1)), Some(&r(4)));
    assert_eq!(s.get(T, &k(4), ts(6)), None);
    assert_eq!(s.latest(T, &k(4)), Some((ts(6), None)));
    s.check_invariants().unwrap();
}

#[test]
fn tombstone_hides_row_at_and_after_its_ts_only() {
    let mut s = MvccStore::new();
    s.put(T, k(1), ts(1), Some(r(1)));
    s.put(T, k(1), ts(3), None);
    assert_eq!(s.get(T, &k(1), ts(2)), Some(&r(1)));
    assert_eq!(s.get(T, &k(1), ts(3)), None);
    assert_eq!(s.latest(T, &k(1)), Some((ts(3), None)));
    assert_eq!(s.scan(T, Unbounded, Unbounded, ts(9), 10), vec![]);
    assert_eq!(s.scan(T, Unbounded, Unbounded, ts(2), 10), vec![(k(1), r(1))]);
    assert_eq!((s.key_count(), s.version_count()), (1, 2));
}

#[test]
fn a_removed_keys_slot_is_reused_and_equality_ignores_slots() {
    let mut s = MvccStore::new();
    for i in 0..4 {
        s.put(T, k(i), ts(1), Some(r(i)));
    }
    assert!(s.remove_version(T, &k(1), ts(1)));
    s.replace_latest(T, k(2), ts(2), None);
    assert_eq!(s.tables[&T].free.len(), 2);
    s.put(T, k(9), ts(3), Some(r(9)));
    s.put(T, k(5), ts(3), Some(r(5)));
    assert_eq!((s.tables[&T].free.len(), s.tables[&T].slots.len()), (0, 4), "both slots reused");
    assert_eq!(
        s.scan(T, Unbounded, Unbounded, ts(9), 10),
        vec![(k(0), r(0)), (k(3), r(3)), (k(5), r(5)), (k(9), r(9))]
    );
    s.check_invariants().unwrap();
    // The same contents built in another order sit in other slots and are equal.
    let mut t = MvccStore::new();
    for i in [9, 5, 3, 0] {
        t.put(T, k(i), if i < 4 { ts(1) } else { ts(3) }, Some(r(i)));
    }
    assert_ne!(s.tables[&T].rows[&k(9)], t.tables[&T].rows[&k(9)]);
    assert_eq!(s, t);
    assert_eq!(s.encode_snapshot(), t.encode_snapshot());
    // A key pointing at another key's slot is a broken invariant, and the check says so.
    let slot = s.tables[&T].rows[&k(0)];
    s.tables.get_mut(&T).unwrap().order.insert(k(3), slot);
    s.tables.get_mut(&T).unwrap().rows.insert(k(3), slot);
    assert!(s.check_invariants().is_err());
}

#[test]
fn scan_versions_returns_the_newest_versions_per_key_and_says_if_older_exist() {
    let mut s = MvccStore::new();
    for t in 1..=4 {
        s.put(T, k(1), ts(t), Some(r(t as i64)));
    }
    s.put(T, k(2), ts(7), None);
    s.put(T, k(3), ts(8), Some(r(8)));
    let page = s.scan_versions(T, Unbounded, Unbounded, 2, 3);
    assert_eq!(
        page,
        vec![
            (k(1), vec![(ts(4), Some(r(4))), (ts(3), Some(r(3))), (ts(2), Some(r(2)))], true),
            (k(2), vec![(ts(7), None)], false),
        ]
    );
    let all: Vec<_> = s.all_versions().map(|(_, key, t)| (key.clone(), t)).collect();
    assert_eq!(all.len(), 6);
    assert_eq!(all[0], (k(1), ts(1)));
    assert_eq!(all[5], (k(3), ts(8)));
}

#[test]
fn out_of_order_puts_are_sorted_and_same_ts_replaces() {
    let mut s = MvccStore::new();
    s.put(T, k(1), ts(5), Some(r(5)));
    s.put(T, k(1), ts(1), Some(r(1)));
    s.put(T, k(1), ts(3), Some(r(3)));
    s.put(T, k(1), ts(3), Some(r(33)));
    let all: Vec<_> = s.versions(T, &k(1)).collect();
    assert_eq!(all, vec![(ts(5), Some(&r(5))), (ts(3), Some(&r(33))), (ts(1), Some(&r(1)))]);
    assert_eq!(s.get(T, &k(1), ts(4)), Some(&r(33)));
    assert_eq!((s.key_count(), s.version_count()), (1, 3));
    assert_eq!(s.versions(T, &k(2)).count(), 0);
    s.check_invariants().unwrap();
}

#[test]
fn remove_version_undoes_one_install_and_drops_empty_keys() {
    let mut s = MvccStore::new();
    s.put(T, k(1), ts(1), Some(r(1)));
    s.put(T, k(1), ts(2), Some(r(2)));
    assert!(s.remove_version(T, &k(1), ts(2)));
    assert!(!s.remove_version(T, &k(1), ts(2)), "already gone");
    assert!(!s.remove_version(T, &k(9), ts(1)));
    assert!(!s.remove_version(TableId(7), &k(1), ts(1)));
    assert_eq!(s.get(T, &k(1), ts(9)), Some(&r(1)));
    assert!(s.remove_version(T, &k(1), ts(1)));
    assert_eq!((s.key_count(), s.version_count()), (0, 0));
    assert_eq!(s, MvccStore::new(), "no empty maps left behind");
}

#[test]
fn scan_bounds_and_limit() {
    let mut s = MvccStore::new();
    for i in 0..10 {
        s.put(T, k(i), ts(1), Some(r(i)));
    }
    s.put(TableId(0), k(3), ts(1), Some(r(-1)));
    s.put(TableId(2), k(3), ts(1), Some(r(-2)));
    let keys = |v: Vec<(Key, Row)>| v.into_iter().map(|(_, row)| row[0].as_int().unwrap()).collect::<Vec<_>>();
    assert_eq!(keys(s.scan(T, Included(&k(2)), Excluded(&k(5)), ts(1), 100)), vec![2, 3, 4]);
    assert_eq!(keys(s.scan(T, Excluded(&k(2)), Included(&k(5)), ts(1), 100)), vec![3, 4, 5]);
    assert_eq!(keys(s.scan(T, Unbounded, Excluded(&k(2)), ts(1), 100)), vec![0, 1]);
    assert_eq!(keys(s.scan(T, Included(&k(8)), Unbounded, ts(1), 100)), vec![8, 9]);
    assert_eq!(keys(s.scan(T, Unbounded, Unbounded, ts(1), 3)), vec![0, 1, 2]);
    assert_eq!(keys(s.scan(T, Unbounded, Unbounded, ts(1), 0)), Vec::<i64>::new());
    assert_eq!(keys(s.scan(T, Unbounded, Unbounded, ts(0), 100)), Vec::<i64>::new());
    // Empty and inverted ranges return nothing instead of panicking.
    assert!(s.scan(T, Included(&k(5)), Excluded(&k(5)), ts(1), 100).is_empty());
    assert!(s.scan(T, Excluded(&k(5)), Excluded(&k(5)), ts(1), 100).is_empty());
    assert!(s.scan(T, Included(&k(6)), Included(&k(5)), ts(1), 100).is_empty());
    assert_eq!(keys(s.scan(T, Included(&k(5)), Included(&k(5)), ts(1), 100)), vec![5]);
    // A prefix range.
    let p = Key::ints(&[]);
    assert_eq!(s.scan(T, Included(&p), Unbounded, ts(1), 100).len(), 10);
}

#[test]
fn scan_limit_counts_visible_rows_not_keys() {
    let mut s = MvccStore::new();
    s.put(T, k(1), ts(1), None);
    s.put(T, k(2), ts(5), Some(r(2)));
    s.put(T, k(3), ts(1), Some(r(3)));
    s.put(T, k(4), ts(1), Some(r(4)));
    assert_eq!(s.scan(T, Unbounded, Unbounded, ts(2), 2), vec![(k(3), r(3)), (k(4), r(4))]);
}

#[test]
fn scan_visible_uses_predicate_on_version_timestamps() {
    let mut s = MvccStore::new();
    s.put(T, k(1), ts(1), Some(r(1)));
    s.put(T, k(1), ts(2), Some(r(2)));
    s.put(T, k(1), ts(3), None);
    // Only odd timestamps "committed": the newest visible version of k1 is the tombstone at 3.
    assert!(s.scan_visible(T, Unbounded, Unbounded, |t| t.0 % 2 == 1, 10).is_empty());
    // Only ts 1 and 2 visible.
    assert_eq!(s.scan_visible(T, Unbounded, Unbounded, |t| t.0 <= 2, 10), vec![(k(1), r(2))]);
    assert_eq!(s.scan_visible(T, Unbounded, Unbounded, |t| t.0 == 1, 10), vec![(k(1), r(1))]);
    assert!(s.scan_visible(T, Unbounded, Unbounded, |_| false, 10).is_empty());
}

#[test]
fn gc_keeps_newest_version_at_or_below_mark_and_drops_dead_keys() {
    let mut s = MvccStore::new();
    // The grid of the module doc.
    s.put(T, k(1), ts(1), Some(r(1)));
    s.put(T, k(1), ts(2), Some(r(2)));
    s.put(T, k(1), ts(4), None);
    s.put(T, k(2), ts(2), Some(r(22)));
    s.put(T, k(2), ts(5), Some(r(25)));
    s.put(T, k(3), ts(3), Some(r(33)));
    s.put(T, k(4), ts(4), Some(r(44)));
    s.put(T, k(5), ts(1), Some(r(5)));
    s.put(T, k(5), ts(2), None);
    assert_eq!(s.gc(ts(3)), 3, "k1@1, and both versions of the deleted k5");
    assert_eq!(s.versions(T, &k(1)).map(|v| v.0).collect::<Vec<_>>(), vec![ts(4), ts(2)]);
    assert_eq!(s.versions(T, &k(5)).count(), 0);
    assert_eq!((s.key_count(), s.version_count()), (4, 6));
    assert_eq!(s.get(T, &k(1), ts(3)), Some(&r(2)));
    assert_eq!(s.gc(ts(3)), 0, "gc is idempotent");
    assert_eq!(s.gc(ts(10)), 3, "k1 dead; k2 keeps 25");
    assert_eq!((s.key_count(), s.version_count()), (3, 3));
    s.check_invariants().unwrap();
}

#[test]
fn snapshot_round_trips_and_is_deterministic() {
    let mut a = MvccStore::new();
    let mut b = MvccStore::new();
    let puts = [(1, 3, Some(1)), (2, 1, None), (1, 1, Some(2)), (3, 2, Some(3))];
    for &(key, t, v) in &puts {
        a.put(T, k(key), ts(t), v.map(r));
    }
    for &(key, t, v) in puts.iter().rev() {
        b.put(T, k(key), ts(t), v.map(r));
    }
    let bytes = a.encode_snapshot();
    assert_eq!(bytes, b.encode_snapshot(), "insertion order does not matter");
    let c = MvccStore::decode_snapshot(&bytes).unwrap();
    assert_eq!(c, a);
    assert_eq!(MvccStore::decode_snapshot(&MvccStore::new().encode_snapshot()).unwrap(), MvccStore::new());
}

#[test]
fn decode_rejects_garbage_without_panicking() {
    let mut s = MvccStore::new();
    s.put(T, k(1), ts(1), Some(vec![Value::String("hello".into())].into()));
    let bytes = s.encode_snapshot();
    for cut in 0..bytes.len() {
        assert!(MvccStore::decode_snapshot(&bytes[..cut]).is_err(), "truncated at {cut}");
    }
    let mut trailing = bytes.clone();
    trailing.push(0);
    assert!(matches!(MvccStore::decode_snapshot(&trailing), Err(StorageError::Decode(_))));
    let mut wrong_format = bytes.clone();
    wrong_format[0] = 9;
    assert!(matches!(MvccStore::decode_snapshot(&wrong_format), Err(StorageError::Decode(_))));
    // Two versions at the same ts (a crafted file) violate an invariant.
    let bad = postcard::to_allocvec(&SnapshotRef {
        format: SNAPSHOT_FORMAT,
        tables: &BTreeMap::from([(
            T,
            Table::from(BTreeMap::from([(
                k(1),
                smallvec![Version { ts: ts(1), row: None }, Version { ts: ts(1), row: None }],
            )])),
        )]),
    })
    .unwrap();
    assert!(matches!(MvccStore::decode_snapshot(&bad), Err(StorageError::Corrupt(_))));
    let empty_versions = postcard::to_allocvec(&SnapshotRef {
        format: SNAPSHOT_FORMAT,
        tables: &BTreeMap::from([(T, Table::from(BTreeMap::from([(k(1), smallvec![])])))]),
    })
    .unwrap();
    assert!(matches!(MvccStore::decode_snapshot(&empty_versions), Err(StorageError::Corrupt(_))));
}

// ---- Property tests against a naive model ----

/// The naive model: a flat list of every installed version.
#[derive(Default)]
struct Model {
    entries: Vec<(TableId, Key, Timestamp, Option<Row>)>,
}

impl Model {
    fn put(&mut self, t: TableId, key: Key, at: Timestamp, row: Option<Row>) {
        self.entries.retain(|e| !(e.0 == t && e.1 == key && e.2 == at));
        self.entries.push((t, key, at, row));
    }
    fn remove(&mut self, t: TableId, key: &Key, at: Timestamp) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| !(e.0 == t && &e.1 == key && e.2 == at));
        before != self.entries.len()
    }
    fn get(&self, t: TableId, key: &Key, at: Timestamp) -> Option<Row> {
        let newest = self.entries.iter().filter(|e| e.0 == t && &e.1 == key && e.2 <= at).max_by_key(|e| e.2)?;
        newest.3.clone()
    }
    fn keys(&self, t: TableId) -> Vec<Key> {
        let mut keys: Vec<Key> = self.entries.iter().filter(|e| e.0 == t).map(|e| e.1.clone()).collect();
        keys.sort();
        keys.dedup();
        keys
    }
    fn scan(&self, t: TableId, lo: Bound<&Key>, hi: Bound<&Key>, at: Timestamp, limit: usize) -> Vec<(Key, Row)> {
        let in_range = |key: &Key| {
            (match lo {
                Included(s) => key >= s,
                Excluded(s) => key > s,
                Unbounded => true,
            }) && (match hi {
                Included(e) => key <= e,
                Excluded(e) => key < e,
                Unbounded => true,
            })
        };
        self.keys(t)
            .into_iter()
            .filter(|key| in_range(key))
            .filter_map(|key| self.get(t, &key, at).map(|row| (key, row)))
            .take(limit)
            .collect()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Put(u32, i64, u64, Option<i64>),
    Remove(u32, i64, u64),
    Replace(u32, i64, u64, Option<i64>),
    /// `install` of the newest row's value plus `v` (a tombstone for `None`; nothing on a
    /// missing row), keeping the newest `keep` versions.
    Install(u32, i64, u64, Option<i64>, usize),
}

const TS_MAX: u64 = 12;
const KEY_MAX: i64 = 6;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..2u32, 0..KEY_MAX, 0..TS_MAX, proptest::option::weighted(0.7, 0..100i64))
            .prop_map(|(t, key, at, v)| Op::Put(t, key, at, v)),
        1 => (0..2u32, 0..KEY_MAX, 0..TS_MAX).prop_map(|(t, key, at)| Op::Remove(t, key, at)),
        2 => (0..2u32, 0..KEY_MAX, 0..TS_MAX, proptest::option::weighted(0.7, 0..100i64))
            .prop_map(|(t, key, at, v)| Op::Replace(t, key, at, v)),
        2 => (0..2u32, 0..KEY_MAX, 0..TS_MAX, proptest::option::weighted(0.7, 0..100i64), 1..4usize)
            .prop_map(|(t, key, at, v, keep)| Op::Install(t, key, at, v, keep)),
    ]
}

fn bound() -> impl Strategy<Value = (u8, i64)> {
    (0..3u8, -1..KEY_MAX + 1)
}

fn to_bound(b: &(u8, i64), key: &Key) -> Bound<Key> {
    match b.0 {
        0 => Unbounded,
        1 => Included(key.clone()),
        _ => Excluded(key.clone()),
    }
}

fn apply(ops: &[Op]) -> (MvccStore, Model) {
    let mut s = MvccStore::new();
    let mut m = Model::default();
    for o in ops {
        match *o {
            Op::Put(t, key, at, v) => {
                s.put(TableId(t), k(key), ts(at), v.map(r));
                m.put(TableId(t), k(key), ts(at), v.map(r));
            }
            Op::Remove(t, key, at) => {
                assert_eq!(s.remove_version(TableId(t), &k(key), ts(at)), m.remove(TableId(t), &k(key), ts(at)));
            }
            Op::Replace(t, key, at, v) => {
                // The model: the newest version before, the put, then that version removed.
                let newest = m.entries.iter().filter(|e| e.0 == TableId(t) && e.1 == k(key)).max_by_key(|e| e.2);
                let newest_row = newest.and_then(|e| e.3.clone());
                let newest = newest.map(|e| e.2);
                let was = s.replace_latest(TableId(t), k(key), ts(at), v.map(r));
                assert_eq!(was, newest_row, "replace_latest returns the newest row before it");
                m.put(TableId(t), k(key), ts(at), v.map(r));
                if let Some(prev) = newest.filter(|&p| p != ts(at)) {
                    m.remove(TableId(t), &k(key), prev);
                }
                // A tombstone left alone goes with its key.
                let left: Vec<_> = m.entries.iter().filter(|e| e.0 == TableId(t) && e.1 == k(key)).collect();
                if left.len() == 1 && left[0].3.is_none() {
                    let lone = left[0].2;
                    m.remove(TableId(t), &k(key), lone);
                }
            }
            Op::Install(t, key, at, v, keep) => {
                let (t, key) = (TableId(t), k(key));
                let sum = |cur: Option<&Row>| cur.and_then(|c| c[0].as_int()).unwrap_or(0);
                let image = |cur: Option<&Row>| match (cur, v) {
                    (None, None) => None,
                    (cur, v) => Some(v.map(|x| r(x + sum(cur)))),
                };
                // The model: the image of the newest row, put, then all but `keep` dropped.
                let newest = m.entries.iter().filter(|e| e.0 == t && e.1 == key).max_by_key(|e| e.2);
                let expected = image(newest.and_then(|e| e.3.as_ref()));
                let installed = s.install(t, key.clone(), ts(at), image, |i, _| i >= keep);
                assert_eq!(installed, expected.is_some());
                if let Some(row) = expected {
                    m.put(t, key.clone(), ts(at), row);
                    let mut left: Vec<Timestamp> =
                        m.entries.iter().filter(|e| e.0 == t && e.1 == key).map(|e| e.2).collect();
                    left.sort_by_key(|&v| std::cmp::Reverse(v));
                    for old in left.into_iter().skip(keep) {
                        m.remove(t, &key, old);
                    }
                }
            }
        }
    }
    (s, m)
}

/// Every point read and a sample of range reads at every timestamp in `from..=TS_MAX`.
fn assert_reads_equal(
    s: &MvccStore,
    m: &Model,
    from: u64,
    lo: &(u8, i64),
    hi: &(u8, i64),
    limit: usize,
) -> Result<(), TestCaseError> {
    let (lo_key, hi_key) = (k(lo.1), k(hi.1));
    let (lo_b, hi_b) = (to_bound(lo, &lo_key), to_bound(hi, &hi_key));
    for at in from..=TS_MAX {
        for t in 0..2 {
            for key in -1..=KEY_MAX {
                prop_assert_eq!(s.get(TableId(t), &k(key), ts(at)).cloned(), m.get(TableId(t), &k(key), ts(at)));
            }
            prop_assert_eq!(
                s.scan(TableId(t), lo_b.as_ref(), hi_b.as_ref(), ts(at), limit),
                m.scan(TableId(t), lo_b.as_ref(), hi_b.as_ref(), ts(at), limit)
            );
            prop_assert_eq!(
                s.scan_visible(TableId(t), lo_b.as_ref(), hi_b.as_ref(), |v| v.0 <= at, limit),
                m.scan(TableId(t), lo_b.as_ref(), hi_b.as_ref(), ts(at), limit)
            );
        }
    }
    // `scan_keys`, at the timestamps above and at `Timestamp::MAX` (its shortcut).
    for at in (from..=TS_MAX).map(ts).chain([Timestamp::MAX]) {
        for t in 0..2 {
            let keys: Vec<Key> =
                m.scan(TableId(t), lo_b.as_ref(), hi_b.as_ref(), at, limit).into_iter().map(|(key, _)| key).collect();
            let only: Vec<Key> =
                s.scan_keys(TableId(t), lo_b.as_ref(), hi_b.as_ref(), at, limit).into_iter().cloned().collect();
            prop_assert_eq!(only, keys);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_naive_model(
        ops in proptest::collection::vec(op(), 0..40),
        lo in bound(),
        hi in bound(),
        limit in 0..8usize,
    ) {
        let (s, m) = apply(&ops);
        s.check_invariants().map_err(TestCaseError::fail)?;
        prop_assert_eq!(s.version_count(), m.entries.len());
        prop_assert_eq!(s.key_count(), m.keys(TableId(0)).len() + m.keys(TableId(1)).len());
        assert_reads_equal(&s, &m, 0, &lo, &hi, limit)?;
        // latest and versions agree with the model too.
        for t in 0..2 {
            for key in 0..KEY_MAX {
                let mut expected: Vec<_> =
                    m.entries.iter().filter(|e| e.0 == TableId(t) && e.1 == k(key)).map(|e| (e.2, e.3.as_ref())).collect();
                expected.sort_by_key(|v| std::cmp::Reverse(v.0));
                prop_assert_eq!(s.versions(TableId(t), &k(key)).collect::<Vec<_>>(), expected.clone());
                prop_assert_eq!(s.latest(TableId(t), &k(key)), expected.first().copied());
            }
        }
        // Snapshots round-trip exactly.
        let decoded = MvccStore::decode_snapshot(&s.encode_snapshot()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&decoded, &s);
    }

    #[test]
    fn gc_preserves_reads_at_or_above_low_water(
        ops in proptest::collection::vec(op(), 0..40),
        low_water in 0..TS_MAX + 1,
        lo in bound(),
        hi in bound(),
        limit in 0..8usize,
    ) {
        let (mut s, m) = apply(&ops);
        let before = s.version_count();
        let removed = s.gc(ts(low_water));
        s.check_invariants().map_err(TestCaseError::fail)?;
        prop_assert_eq!(s.version_count() + removed, before);
        // The store after gc still answers every read at ts >= lwm like the un-collected model.
        assert_reads_equal(&s, &m, low_water, &lo, &hi, limit)?;
        // At most one version per key remains at or below the mark.
        for t in 0..2 {
            for key in 0..KEY_MAX {
                prop_assert!(s.versions(TableId(t), &k(key)).filter(|v| v.0 <= ts(low_water)).count() <= 1);
            }
        }
        prop_assert_eq!(s.gc(ts(low_water)), 0);
    }
}
