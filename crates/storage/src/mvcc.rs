//! # Multiversion ordered store for one partition
//!
//! [`MvccStore`] maps `(table, key)` to the list of versions of that row. A version is a
//! timestamp and either a row or a tombstone (the row was deleted at that timestamp). Engines
//! decide what a timestamp means (a partition counter, a Granola vote, an Omid start timestamp,
//! a hybrid clock); the store only orders versions by it. It never blocks, locks or checks
//! conflicts — that is the engines' job.
//!
//! ```text
//!   ts │
//!    5 │              a5                      (a5: row "a" written at 5)
//!    4 │  ×                       c4          (×: tombstone, "k1" deleted at 4)
//!    3 │                    b3
//!    2 │  a2          x2
//!    1 │  a1                                  gc(lwm = 3) keeps, per key, every version
//!   ───┼─────────────────────────────────     above 3 plus the newest one at or below 3:
//!      │  k1          k2    k3    k4            k1: × a2    k2: a5 x2   k3: b3   k4: c4
//!
//!   get(k1, 3) = a2     get(k1, 4) = None (tombstone)    get(k2, 4) = x2    get(k4, 3) = None
//! ```
//!
//! ## Visibility
//!
//! * [`MvccStore::get`] / [`MvccStore::scan`] at `ts`: the newest version with version
//!   timestamp `<= ts`; a tombstone there means "absent".
//! * [`MvccStore::scan_visible`] / [`MvccStore::versions`]: for engines whose visibility is not a
//!   timestamp comparison (Omid's `inSnapshot` consults commit timestamps from the status oracle):
//!   the newest version whose timestamp satisfies a predicate.
//!
//! ## Out-of-order installs
//!
//! Versions of one key may be installed in any timestamp order (Omid tags writes with the
//! writer's *start* timestamp, so a long transaction installs below newer ones).
//! [`MvccStore::put`] inserts in sorted position; installing the same timestamp twice replaces
//! the earlier version (an idempotent redo). [`MvccStore::remove_version`] undoes an aborted
//! writer's install.
//!
//! ## Garbage collection
//!
//! [`MvccStore::gc`] takes a low-water mark `lwm` below which no reader will ever read again, and
//! for each key keeps every version above `lwm` plus the newest version at or below it (which
//! still answers reads at `lwm <= ts < next version`). If that newest-old version is a tombstone
//! with nothing newer, the whole key goes. Reads at any `ts >= lwm` return the same rows before
//! and after (property test `gc_preserves_reads_at_or_above_low_water`). It visits every key:
//! run it periodically, not per transaction.
//!
//! ## Representation and invariants
//!
//! A `BTreeMap<TableId, Table>` (a map per table rather than one map keyed by `(TableId, Key)`,
//! so point reads borrow the `&Key` instead of cloning it into a tuple). A table keeps each
//! key's versions in a slot of a vector, and two maps from key to slot: a hash map for point
//! reads and writes — hashing the key once instead of comparing it with a dozen others down a
//! B-tree — and a `BTreeMap` for everything ordered (range reads, GC's walk, snapshots). A
//! range read walks the ordered map and goes straight to each key's slot; with the versions in
//! the hash map, every key of a range would cost a hash lookup. Neither map changes when a key gets a new version,
//! only when a key comes or goes; a removed key's slot is reused by the next new one.
//! Invariants, checked by [`MvccStore::check_invariants`] in tests and on snapshot decode:
//!
//! * every version list of a key is non-empty and strictly ascending by timestamp (no
//!   duplicates);
//! * a table's ordered map holds exactly the keys of its hash map, with the same slots; every
//!   slot belongs to one key or is free, and free slots are empty;
//! * no table is empty (so equal contents have equal snapshot bytes; equality compares
//!   contents, not slots);
//! * `key_count` and `version_count` equal the counts of the maps.
//!
//! Iteration is in `(table, key, ts)` order (the hash map is only looked up, never walked to
//! produce output), so everything here is deterministic.
//!
//! ## Snapshot encoding
//!
//! [`MvccStore::encode_snapshot`] is postcard of `(format, tables)` — all versions, tombstones
//! included, as a `BTreeMap<TableId, BTreeMap<Key, Vec<Version>>>` in key order — with
//! [`SNAPSHOT_FORMAT`] as a leading version number. Equal stores encode to equal
//! bytes. Decoding rejects trailing bytes and any invariant violation with a typed error.
//!
//! ## Not implemented
//!
//! * No per-key version limit: a key that is written often and never collected grows without
//!   bound. Engines must call [`MvccStore::gc`].
//! * `scan` does not enforce [`litmus_core::limits::SCAN_ROWS_MAX`]; requests are checked against
//!   it where they enter the system, and internal callers (consistency checks) may scan all rows.
//! * Decoding a snapshot trusts its nesting depth (a `Value::Set` inside a set ...); snapshot
//!   files are checksummed and written only by us.

use crate::StorageError;
use litmus_core::hash::FxHashMap;
use litmus_core::{Key, Row, TableId, Timestamp};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use smallvec::{smallvec, SmallVec};
use std::collections::BTreeMap;
use std::ops::Bound;

/// A version as seen by readers: its timestamp and its row, `None` for a tombstone.
pub type VersionRef<'a> = (Timestamp, Option<&'a Row>);

/// Version number of the snapshot encoding, the first field of every encoded snapshot.
pub const SNAPSHOT_FORMAT: u32 = 1;

/// One version of a row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Version {
    ts: Timestamp,
    /// `None`: the row was deleted at `ts`.
    row: Option<Row>,
}

/// The versions of one key: non-empty, strictly ascending by `ts`. Usually one entry, held
/// inline in the key's slot: a vector's own allocation per key cost a `malloc`, 32 bytes and a
/// pointer chase on every read.
type Versions = SmallVec<[Version; 1]>;

/// Where a key's versions live in its table's [`Table::slots`].
type Slot = u32;

/// One table's rows. See the module doc.
#[derive(Clone, Debug, Default)]
struct Table {
    /// The slot of each key, for point reads and writes.
    rows: FxHashMap<Key, Slot>,
    /// The same keys with the same slots, in order, for everything ordered.
    order: BTreeMap<Key, Slot>,
    /// Version lists by slot. A slot listed in `free` holds an empty list.
    slots: Vec<Versions>,
    /// Slots of removed keys, reused by the next new key.
    free: Vec<Slot>,
}

impl Table {
    fn versions(&self, key: &Key) -> Option<&Versions> {
        self.rows.get(key).map(|&s| &self.slots[s as usize])
    }

    fn versions_mut(&mut self, key: &Key) -> Option<&mut Versions> {
        self.rows.get(key).map(|&s| &mut self.slots[s as usize])
    }

    /// Adds a key that is not in the table.
    fn insert_new(&mut self, key: Key, versions: Versions) {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = versions;
                slot
            }
            None => {
                let slot = Slot::try_from(self.slots.len()).expect("fewer than 2^32 keys per table");
                self.slots.push(versions);
                slot
            }
        };
        self.order.insert(key.clone(), slot);
        let was = self.rows.insert(key, slot);
        debug_assert!(was.is_none(), "insert_new of a key already present");
    }

    /// Removes a key and its versions.
    fn remove(&mut self, key: &Key) {
        let Some(slot) = self.rows.remove(key) else { return };
        self.order.remove(key);
        self.slots[slot as usize] = Versions::new();
        self.free.push(slot);
    }

    fn len(&self) -> usize {
        self.rows.len()
    }

    fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// `(key, versions)` of the keys in `(start, end)`, in key order.
    fn range<'a>(&'a self, start: Bound<&Key>, end: Bound<&Key>) -> impl Iterator<Item = (&'a Key, &'a Versions)> + 'a {
        self.order.range::<Key, _>((start, end)).map(|(k, &s)| (k, &self.slots[s as usize]))
    }

    /// `(key, versions)` of every key, in key order.
    fn iter(&self) -> impl Iterator<Item = (&Key, &Versions)> + '_ {
        self.order.iter().map(|(k, &s)| (k, &self.slots[s as usize]))
    }
}

/// Equal contents, whatever slots they sit in.
impl PartialEq for Table {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Table {}

impl Serialize for Table {
    /// As the `BTreeMap<Key, Versions>` it stands for (the snapshot format).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl From<BTreeMap<Key, Versions>> for Table {
    fn from(by_key: BTreeMap<Key, Versions>) -> Self {
        let mut table = Table::default();
        for (key, versions) in by_key {
            table.insert_new(key, versions);
        }
        table
    }
}

type Tables = BTreeMap<TableId, Table>;

/// A version copied out of the store: its timestamp and row (`None`: a tombstone).
pub type OwnedVersion = (Timestamp, Option<Row>);

/// The in-memory multiversion store of one partition. See the module doc.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MvccStore {
    tables: Tables,
    /// Number of `(table, key)` entries.
    key_count: usize,
    /// Number of versions over all keys, tombstones included.
    version_count: usize,
    /// Keys looked up, rows scanned and versions installed or removed since
    /// [`MvccStore::take_work`] (not state: equal stores may differ in it).
    work: Work,
}

/// A count of store operations, kept beside the data and not part of it: never compared,
/// serialized or cloned as state. A read counts through `&self`, hence the cell.
#[derive(Debug, Default)]
struct Work(std::cell::Cell<u64>);

impl Work {
    fn add(&self, n: usize) {
        self.0.set(self.0.get() + n as u64);
    }
}

impl Clone for Work {
    fn clone(&self) -> Self {
        Work::default()
    }
}

impl PartialEq for Work {
    fn eq(&self, _: &Work) -> bool {
        true
    }
}

impl Eq for Work {}

/// Serialized form, borrowed for encoding.
#[derive(Serialize)]
struct SnapshotRef<'a> {
    format: u32,
    tables: &'a Tables,
}

/// Serialized form, owned for decoding.
#[derive(Deserialize)]
struct SnapshotOwned {
    format: u32,
    tables: BTreeMap<TableId, BTreeMap<Key, Versions>>,
}

impl MvccStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Store operations since the last call: each key looked up, row scanned, and version
    /// installed or removed counts one. What the simulator's cost model charges a partition
    /// step by (`Effects::work`); nothing in the store depends on it.
    pub fn take_work(&self) -> u64 {
        self.work.0.take()
    }

    fn versions_of(&self, table: TableId, key: &Key) -> Option<&Versions> {
        self.work.add(1);
        self.tables.get(&table)?.versions(key)
    }

    /// The row visible at `ts`: the newest version with version timestamp `<= ts`. `None` if
    /// there is none or it is a tombstone.
    pub fn get(&self, table: TableId, key: &Key, ts: Timestamp) -> Option<&Row> {
        visible_at(self.versions_of(table, key)?, ts)
    }

    /// The newest version of any timestamp, tombstones included.
    pub fn latest(&self, table: TableId, key: &Key) -> Option<VersionRef<'_>> {
        let v = self.versions_of(table, key)?.last()?;
        Some((v.ts, v.row.as_ref()))
    }

    /// Every version of the key, newest first, tombstones included.
    pub fn versions(&self, table: TableId, key: &Key) -> impl Iterator<Item = VersionRef<'_>> {
        self.versions_of(table, key).into_iter().flat_map(|vs| vs.iter().rev()).map(|v| (v.ts, v.row.as_ref()))
    }

    /// Range read at `ts`: rows of `table` with key in `(start, end)` visible at `ts` (see
    /// [`MvccStore::get`]), in ascending key order, at most `limit` of them. An empty or inverted
    /// range returns nothing.
    pub fn scan(
        &self,
        table: TableId,
        start: Bound<&Key>,
        end: Bound<&Key>,
        ts: Timestamp,
        limit: usize,
    ) -> Vec<(Key, Row)> {
        let mut out = Vec::new();
        if limit == 0 || range_is_empty(start, end) {
            return out;
        }
        let Some(keys) = self.tables.get(&table) else { return out };
        for (key, versions) in keys.range(start, end) {
            if let Some(row) = visible_at(versions, ts) {
                out.push((key.clone(), row.clone()));
                if out.len() == limit {
                    break;
                }
            }
        }
        self.work.add(1 + out.len());
        debug_assert!(out.windows(2).all(|w| w[0].0 < w[1].0), "scan output must be ascending");
        out
    }

    /// The keys [`MvccStore::scan`] would return, without copying their rows (for callers
    /// that only need to know where a scan ends, e.g. to size a range lock).
    pub fn scan_keys(
        &self,
        table: TableId,
        start: Bound<&Key>,
        end: Bound<&Key>,
        ts: Timestamp,
        limit: usize,
    ) -> Vec<&Key> {
        let mut out = Vec::new();
        if limit == 0 || range_is_empty(start, end) {
            return out;
        }
        let Some(keys) = self.tables.get(&table) else { return out };
        for (key, versions) in keys.range(start, end) {
            if visible_at(versions, ts).is_some() {
                out.push(key);
                if out.len() == limit {
                    break;
                }
            }
        }
        self.work.add(1 + out.len());
        out
    }

    /// Range read with custom visibility: for each key, the newest version whose timestamp
    /// satisfies `visible`; keys where that version is a tombstone, or where no version is
    /// visible, are skipped.
    pub fn scan_visible(
        &self,
        table: TableId,
        start: Bound<&Key>,
        end: Bound<&Key>,
        visible: impl Fn(Timestamp) -> bool,
        limit: usize,
    ) -> Vec<(Key, Row)> {
        self.scan_with(table, start, end, limit, |versions| {
            versions.iter().rev().find(|v| visible(v.ts)).and_then(|v| v.row.as_ref())
        })
    }

    /// Range read of the newest versions: the first `keys_max` keys of `table` in `(start, end)`,
    /// each with its newest `versions_max` versions, newest first (tombstones included), and
    /// whether older ones exist. For engines that decide visibility away from the store (Omid's
    /// client-side `inSnapshot`), which fetch older versions of a key only when they need them.
    pub fn scan_versions(
        &self,
        table: TableId,
        start: Bound<&Key>,
        end: Bound<&Key>,
        keys_max: usize,
        versions_max: usize,
    ) -> Vec<(Key, Vec<OwnedVersion>, bool)> {
        if keys_max == 0 || range_is_empty(start, end) {
            return Vec::new();
        }
        let Some(keys) = self.tables.get(&table) else { return Vec::new() };
        self.work.add(1);
        keys.range(start, end)
            .take(keys_max)
            .inspect(|_| self.work.add(1))
            .map(|(key, versions)| {
                let newest = versions.iter().rev().take(versions_max).map(|v| (v.ts, v.row.clone())).collect();
                (key.clone(), newest, versions.len() > versions_max)
            })
            .collect()
    }

    /// Every key of `table` in `(start, end)` that holds a version, tombstones included (a key
    /// whose newest version is a deletion may still have a row at an older timestamp), in
    /// ascending order, lazily. For engines that decide per key which version a read sees
    /// (BASIC's range reads at a timestamp, with its formulas). An empty or inverted range
    /// yields nothing.
    pub fn keys_in<'a>(
        &'a self,
        table: TableId,
        start: Bound<&'a Key>,
        end: Bound<&'a Key>,
    ) -> impl Iterator<Item = &'a Key> + 'a {
        self.work.add(1);
        let keys = if range_is_empty(start, end) { None } else { self.tables.get(&table) };
        keys.into_iter().flat_map(move |t| t.range(start, end)).map(|(key, _)| {
            self.work.add(1);
            key
        })
    }

    /// Every version's `(table, key, ts)`, in table and key order (to build an index).
    pub fn all_versions(&self) -> impl Iterator<Item = (TableId, &Key, Timestamp)> {
        self.tables.iter().flat_map(|(&table, keys)| {
            keys.iter().flat_map(move |(key, vs)| vs.iter().map(move |v| (table, key, v.ts)))
        })
    }

    fn scan_with<'a>(
        &'a self,
        table: TableId,
        start: Bound<&Key>,
        end: Bound<&Key>,
        limit: usize,
        pick: impl Fn(&'a Versions) -> Option<&'a Row>,
    ) -> Vec<(Key, Row)> {
        let mut out = Vec::new();
        // `BTreeMap::range` panics on an inverted range; such a range is simply empty.
        if limit == 0 || range_is_empty(start, end) {
            return out;
        }
        let Some(keys) = self.tables.get(&table) else { return out };
        for (key, versions) in keys.range(start, end) {
            if let Some(row) = pick(versions) {
                out.push((key.clone(), row.clone()));
                if out.len() == limit {
                    break;
                }
            }
        }
        assert!(out.len() <= limit);
        self.work.add(1 + out.len());
        debug_assert!(out.windows(2).all(|w| w[0].0 < w[1].0), "scan output must be ascending");
        out
    }

    /// Installs a version at `ts` (`row: None` installs a tombstone). Versions may arrive in any
    /// timestamp order; the same `ts` replaces the existing version.
    pub fn put(&mut self, table: TableId, key: Key, ts: Timestamp, row: Option<Row>) {
        self.work.add(1);
        let t = self.tables.entry(table).or_default();
        match t.versions_mut(&key) {
            Some(versions) => {
                match versions.binary_search_by_key(&ts, |v| v.ts) {
                    Ok(i) => versions[i].row = row,
                    Err(i) => {
                        versions.insert(i, Version { ts, row });
                        self.version_count += 1;
                    }
                }
                debug_assert!(is_strictly_ascending(versions));
            }
            None => {
                self.key_count += 1;
                self.version_count += 1;
                t.insert_new(key, smallvec![Version { ts, row }]);
            }
        }
        assert!(self.version_count >= self.key_count);
    }

    /// Installs a version at `ts` and drops the version that was the newest before it (if it
    /// was at another timestamp): `latest`, `put` and `remove_version` in one lookup, for the
    /// engines that keep one committed version per key (the lock-based ones apply every commit
    /// this way). `row: None` installs a tombstone.
    ///
    /// A tombstone left as the key's only version is dropped with the key: with nothing older
    /// to hide, it reads as absence at every timestamp ([`MvccStore::get`], the scans); only
    /// `latest` and `versions` could tell them apart, by its timestamp. Kept, these lone
    /// tombstones would pile up at the head of every TPC-C district's NEW-ORDER rows, which each
    /// Delivery's scan for the oldest order walks again (and the memory would never be given
    /// back).
    ///
    /// Returns the row the newest version held before (`None` for an absent key or a
    /// tombstone): what `latest` said just before, without a second lookup (a commit record
    /// logs each write as its change to that row).
    pub fn replace_latest(&mut self, table: TableId, key: Key, ts: Timestamp, row: Option<Row>) -> Option<Row> {
        self.work.add(1);
        let t = self.tables.entry(table).or_default();
        let Some(versions) = t.versions_mut(&key) else {
            if row.is_none() {
                if t.is_empty() {
                    self.tables.remove(&table); // no table is empty (see the module doc)
                }
                return None; // a lone tombstone: nothing to install
            }
            self.key_count += 1;
            self.version_count += 1;
            t.insert_new(key, smallvec![Version { ts, row }]);
            return None;
        };
        // The newest version is either overwritten here (same timestamp) or dropped below.
        let previous = versions.last().map(|v| v.ts).filter(|&p| p != ts);
        let mut was = None;
        match versions.binary_search_by_key(&ts, |v| v.ts) {
            Ok(i) => {
                let old = std::mem::replace(&mut versions[i].row, row);
                if previous.is_none() {
                    was = old;
                }
            }
            Err(i) => {
                versions.insert(i, Version { ts, row });
                self.version_count += 1;
            }
        }
        if let Some(Ok(i)) = previous.map(|p| versions.binary_search_by_key(&p, |v| v.ts)) {
            was = versions.remove(i).row;
            self.version_count -= 1;
        }
        debug_assert!(is_strictly_ascending(versions));
        if versions.len() == 1 && versions[0].row.is_none() {
            t.remove(&key);
            self.key_count -= 1;
            self.version_count -= 1;
            if t.is_empty() {
                self.tables.remove(&table);
            }
        }
        assert!(self.version_count >= self.key_count);
        was
    }

    /// A read-modify-write of one key in one lookup, for the engines that keep several
    /// versions per key: `image` is handed the newest version's row (`None`: no key, or a
    /// tombstone) and returns what to install at `ts` (`Some(None)`: a tombstone), or `None` to
    /// leave the key alone. Once a version is installed, every version `prune(i, ts)` picks is
    /// removed, `i` counting from the newest (0, never removed). `latest`, `put` and one
    /// `remove_version` per pruned version did the same in as many lookups.
    /// Returns whether a version was installed.
    pub fn install(
        &mut self,
        table: TableId,
        key: Key,
        ts: Timestamp,
        image: impl FnOnce(Option<&Row>) -> Option<Option<Row>>,
        mut prune: impl FnMut(usize, Timestamp) -> bool,
    ) -> bool {
        self.work.add(1);
        let t = self.tables.entry(table).or_default();
        let Some(versions) = t.versions_mut(&key) else {
            let Some(row) = image(None) else {
                if t.is_empty() {
                    self.tables.remove(&table); // no table is empty (see the module doc)
                }
                return false;
            };
            self.key_count += 1;
            self.version_count += 1;
            t.insert_new(key, smallvec![Version { ts, row }]);
            return true;
        };
        let Some(row) = image(versions.last().and_then(|v| v.row.as_ref())) else { return false };
        match versions.binary_search_by_key(&ts, |v| v.ts) {
            Ok(i) => versions[i].row = row,
            Err(i) => {
                versions.insert(i, Version { ts, row });
                self.version_count += 1;
            }
        }
        let before = versions.len();
        let mut from_newest = before;
        versions.retain(|v| {
            from_newest -= 1;
            from_newest == 0 || !prune(from_newest, v.ts)
        });
        let removed = before - versions.len();
        self.version_count -= removed;
        self.work.add(removed);
        debug_assert!(is_strictly_ascending(versions));
        assert!(self.version_count >= self.key_count);
        true
    }

    /// Removes the version at exactly `ts` (cleanup of an aborted writer). Returns whether it
    /// existed. A key whose last version goes is removed.
    pub fn remove_version(&mut self, table: TableId, key: &Key, ts: Timestamp) -> bool {
        self.work.add(1);
        let Some(keys) = self.tables.get_mut(&table) else { return false };
        let Some(versions) = keys.versions_mut(key) else { return false };
        let Ok(i) = versions.binary_search_by_key(&ts, |v| v.ts) else { return false };
        versions.remove(i);
        self.version_count -= 1;
        if versions.is_empty() {
            keys.remove(key);
            self.key_count -= 1;
            if keys.is_empty() {
                self.tables.remove(&table);
            }
        }
        assert!(self.version_count >= self.key_count);
        true
    }

    /// Garbage collection below `low_water` (see the module doc). Returns the number of versions
    /// removed. Reads at any `ts >= low_water` are unchanged.
    pub fn gc(&mut self, low_water: Timestamp) -> usize {
        let mut versions_removed = 0;
        let mut keys_removed = 0;
        for keys in self.tables.values_mut() {
            let mut gone = Vec::new();
            for (key, &slot) in &keys.order {
                let versions = &mut keys.slots[slot as usize];
                // Index one past the newest version with ts <= low_water.
                let old_end = versions.partition_point(|v| v.ts <= low_water);
                if old_end == 0 {
                    continue; // Every version is above the mark.
                }
                let newest_old = old_end - 1;
                if newest_old == versions.len() - 1 && versions[newest_old].row.is_none() {
                    // Deleted at or before the mark and never rewritten: absent at every ts >= lwm.
                    versions_removed += versions.len();
                    keys_removed += 1;
                    gone.push(key.clone());
                    continue;
                }
                versions.drain(..newest_old);
                versions_removed += newest_old;
                assert!(versions[0].ts <= low_water, "the version answering reads at the mark is kept");
            }
            for key in &gone {
                keys.remove(key);
            }
        }
        self.tables.retain(|_, keys| !keys.is_empty());
        self.version_count -= versions_removed;
        self.key_count -= keys_removed;
        self.work.add(versions_removed);
        assert!(self.version_count >= self.key_count);
        versions_removed
    }

    /// Number of `(table, key)` entries (keys whose newest version is a tombstone included).
    pub fn key_count(&self) -> usize {
        self.key_count
    }

    /// Number of versions over all keys, tombstones included.
    pub fn version_count(&self) -> usize {
        self.version_count
    }

    /// Serializes every version of every key. Equal stores give equal bytes.
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let repr = SnapshotRef { format: SNAPSHOT_FORMAT, tables: &self.tables };
        // Serializing owned in-memory data with known lengths into a Vec cannot fail.
        postcard::to_allocvec(&repr).expect("postcard serialization of an in-memory store cannot fail")
    }

    /// Decodes [`MvccStore::encode_snapshot`] output, checking every invariant.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<Self, StorageError> {
        let (repr, rest): (SnapshotOwned, &[u8]) =
            postcard::take_from_bytes(bytes).map_err(|e| StorageError::Decode(format!("mvcc snapshot: {e}")))?;
        if !rest.is_empty() {
            return Err(StorageError::Decode(format!("mvcc snapshot: {} trailing bytes", rest.len())));
        }
        if repr.format != SNAPSHOT_FORMAT {
            return Err(StorageError::Decode(format!(
                "mvcc snapshot format {} (this build reads {SNAPSHOT_FORMAT})",
                repr.format
            )));
        }
        let key_count = repr.tables.values().map(BTreeMap::len).sum();
        let version_count = repr.tables.values().flat_map(BTreeMap::values).map(|v| v.len()).sum();
        let tables = repr.tables.into_iter().map(|(id, by_key)| (id, Table::from(by_key))).collect();
        let store = MvccStore { tables, key_count, version_count, work: Work::default() };
        store.check_invariants().map_err(|m| StorageError::Corrupt(format!("mvcc snapshot: {m}")))?;
        Ok(store)
    }

    /// Checks the representation invariants listed in the module doc.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut keys = 0;
        let mut versions_total = 0;
        for (table, by_key) in &self.tables {
            if by_key.is_empty() {
                return Err(format!("table {table} has an empty key map"));
            }
            if by_key.order.len() != by_key.rows.len()
                || by_key.order.iter().any(|(k, slot)| by_key.rows.get(k) != Some(slot))
            {
                return Err(format!("table {table}: the ordered keys and slots are not those of the rows"));
            }
            let mut used = vec![false; by_key.slots.len()];
            for &slot in by_key.order.values().chain(&by_key.free) {
                match used.get_mut(slot as usize) {
                    Some(u) if !*u => *u = true,
                    _ => return Err(format!("table {table}: slot {slot} is out of range or used twice")),
                }
            }
            if used.contains(&false) || by_key.free.iter().any(|&s| !by_key.slots[s as usize].is_empty()) {
                return Err(format!("table {table}: a slot is lost, or a free slot holds versions"));
            }
            for (key, versions) in by_key.iter() {
                if versions.is_empty() {
                    return Err(format!("{table} {key:?} has no versions"));
                }
                if !is_strictly_ascending(versions) {
                    return Err(format!("{table} {key:?} versions are not strictly ascending"));
                }
                keys += 1;
                versions_total += versions.len();
            }
        }
        if (keys, versions_total) != (self.key_count, self.version_count) {
            return Err(format!(
                "counts ({}, {}) do not match contents ({keys}, {versions_total})",
                self.key_count, self.version_count
            ));
        }
        Ok(())
    }
}

/// The row of the newest version with `ts <= read_ts`, if it is not a tombstone.
fn visible_at(versions: &Versions, read_ts: Timestamp) -> Option<&Row> {
    let end = versions.partition_point(|v| v.ts <= read_ts);
    versions[..end].last()?.row.as_ref()
}

fn is_strictly_ascending(versions: &Versions) -> bool {
    versions.windows(2).all(|w| w[0].ts < w[1].ts)
}

/// True when no key lies in `(start, end)`, including the inverted ranges `BTreeMap::range`
/// panics on (start > end, or start == end with both bounds excluded).
fn range_is_empty(start: Bound<&Key>, end: Bound<&Key>) -> bool {
    use Bound::{Excluded, Included, Unbounded};
    match (start, end) {
        (Unbounded, _) | (_, Unbounded) => false,
        (Included(s), Included(e)) => s > e,
        (Included(s), Excluded(e)) | (Excluded(s), Included(e)) | (Excluded(s), Excluded(e)) => s >= e,
    }
}

#[cfg(test)]
#[path = "mvcc_tests.rs"]
mod tests;
