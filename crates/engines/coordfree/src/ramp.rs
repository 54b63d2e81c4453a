//! RAMP-Fast's fractured-read detection, as a pure function (Bailis et al., *Scalable Atomic
//! Visibility with RAMP Transactions*, SIGMOD'14, Algorithm 1 `GET_ALL` lines 19–23).
//!
//! Every committed version carries its writer's *write set* (the metadata). After the first
//! round of reads, a reader that read key `k` at version `v_k` and, elsewhere, a version whose
//! writer `T` also wrote `k`, may be missing `T`'s write to `k`: if `T`'s version of `k` is newer
//! than `v_k`, the read is *fractured*. The second round asks `k`'s partition for `T`'s version
//! of `k` if it is newer than the one read (the partition decides "newer" in its own version
//! order; a prepared but not yet committed version is newer than every committed one — RAMP's
//! prepared versions are readable by exact request, which is what makes it non-blocking).
//!
//! One second round suffices: every writer named in a wanted version's metadata is the writer of
//! a version already read, whose whole write set was already considered.
//!
//! **CF-4c, versions ordered per partition.** RAMP-Fast compares the transaction timestamps of the
//! metadata with the version read and fetches only a *newer* one. Here versions are ordered per
//! partition, and a transaction's writes on one partition all commit at one local timestamp. So
//! a reader that read some key of partition `P` at writer `T`'s version knows `T`'s timestamp on
//! `P`: a key of `P` read at that timestamp or a later one already reflects `T`'s write, and is
//! not asked for it. Without this, New-Order asked on nearly every call for the loader's (or an
//! older New-Order's) version of a stock row that a later New-Order had since overwritten.

use super::messages::{key_hash, passes, Seen, Want, WriteMeta};
use litmus_core::hash::{FxHashMap, FxHashSet};
use litmus_core::{Key, PartitionId, TableId, Timestamp, TxnId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What a transaction read, by key (hashed: every read, check and hand-over looks a key up
/// here, and nothing needs the keys in order).
pub type ReadSet = FxHashMap<(TableId, Key), Seen>;
/// A batch's keys.
pub type KeySet = FxHashSet<(TableId, Key)>;
/// Keys to ask for, each with the writers to ask about, in key order.
type Wants = BTreeMap<(TableId, Key), BTreeSet<TxnId>>;

/// The second-round requests for a read set: for every key in `seen` that `fixable` allows (the
/// reads not yet handed to the procedure), the writers other read versions name as having
/// written it, other than the writer of the version read, unless the key was read at or after
/// that writer's timestamp on the key's partition (`part_of`, which gives a replicated row the
/// partition of the copy read, CF-4f; CF-4c; a key without one is not tracked). Also keys a *covered* range
/// read returned no row for (`covered`: a key inside a scanned range that returned nothing for
/// it).
pub fn missing(
    seen: &ReadSet,
    fixable: &dyn Fn(&(TableId, Key)) -> bool,
    covered: &dyn Fn(&(TableId, Key)) -> bool,
    part_of: &dyn Fn(&(TableId, Key)) -> Option<PartitionId>,
) -> Vec<Want> {
    let mut wants: BTreeMap<(TableId, Key), BTreeSet<TxnId>> = BTreeMap::new();
    let writers: BTreeMap<TxnId, &WriteMeta> =
        seen.values().filter_map(|s| s.writer.as_deref()).map(|m| (m.txn, m)).collect();
    // The writer's timestamp on a partition: that of a committed version of it read there.
    let ts_on = |txn: TxnId, part: PartitionId| {
        seen.iter()
            .filter(|(k, s)| {
                s.ts < Timestamp::MAX && s.writer.as_ref().is_some_and(|w| w.txn == txn) && part_of(k) == Some(part)
            })
            .map(|(_, s)| s.ts)
            .min()
    };
    for meta in writers.values() {
        for k in &meta.keys {
            match seen.get(k) {
                Some(s) => {
                    // A key without a partition (a replicated row not read) is not tracked.
                    let Some(part) = part_of(k) else { continue };
                    let reflected = s.ts < Timestamp::MAX && ts_on(meta.txn, part).is_some_and(|t| t <= s.ts);
                    if s.writer.as_ref().map(|w| w.txn) != Some(meta.txn) && fixable(k) && !reflected {
                        wants.entry(k.clone()).or_default().insert(meta.txn);
                    }
                }
                None => {
                    if covered(k) {
                        wants.entry(k.clone()).or_default().insert(meta.txn);
                    }
                }
            }
        }
    }
    wants
        .into_iter()
        .map(|((table, key), writers)| {
            let (have, have_writer) = have_of(seen.get(&(table, key.clone())));
            Want { table, key, have, have_writer, writers: writers.into_iter().collect() }
        })
        .collect()
}

/// A second round's `have`: the version read's timestamp, and its writer when it was a prepared
/// version (whose place in the version order is not known until it commits).
fn have_of(seen: Option<&Seen>) -> (Timestamp, Option<TxnId>) {
    match seen {
        Some(s) if s.ts == Timestamp::MAX => (s.ts, s.writer.as_ref().map(|w| w.txn)),
        Some(s) => (s.ts, None),
        None => (Timestamp::ZERO, None),
    }
}

/// A range read of a batch: table, start, end, and the last key returned when the limit cut
/// the range (keys after it were not read).
pub type ScanRead = (TableId, Key, Option<Key>, Option<Key>);

/// A range read as served: the range, the partition that served it, and its point in that
/// partition's version order (the partition's last commit when it read: every key the range
/// found empty was empty at that point).
#[derive(Clone, Debug)]
pub struct Scanned {
    pub read: ScanRead,
    pub part: PartitionId,
    pub at: Timestamp,
}

/// Whether `key` lies in a range read's part that was actually read.
pub fn covered_by(scan: &ScanRead, table: TableId, key: &Key) -> bool {
    let (t, start, end, cut) = scan;
    *t == table && key >= start && end.as_ref().is_none_or(|e| key < e) && cut.as_ref().is_none_or(|c| key <= c)
}

/// The largest filter copied into the index: a write set of up to 64 keys. New-Order writes
/// up to 34 (15 lines): at 8 words, the New-Orders with 15 lines would be searched in their
/// metadata (a cold cache line per writer) whenever their range held a key.
const FILTER_COPIED: usize = 16;

/// A writer of a version read: its metadata, its Bloom filter when small (copied here, as is
/// the range of keys it wrote: the test that rejects most keys then touches no metadata,
/// which is shared and cold in the cache), and its local timestamp on each partition it was
/// read from (from committed versions; CF-4c).
#[derive(Debug)]
struct Writer {
    /// The metadata's transaction, copied (comparing it reads no metadata).
    txn: TxnId,
    meta: Arc<WriteMeta>,
    filter: Option<([u64; FILTER_COPIED], usize)>,
    /// The first and last key written, for a writer whose filter is not copied.
    range: Option<((TableId, Key), (TableId, Key))>,
    /// The first partition it was read from, inline (nearly every writer is read from one:
    /// the CF-4c test then reads nothing outside this struct), and any others.
    ts_first: Option<(PartitionId, Timestamp)>,
    ts_more: Vec<(PartitionId, Timestamp)>,
}

impl Writer {
    fn new(meta: &Arc<WriteMeta>) -> Self {
        let words = meta.filter_words();
        let filter = (words.len() <= FILTER_COPIED).then(|| {
            let mut copy = [0u64; FILTER_COPIED];
            copy[..words.len()].copy_from_slice(words);
            (copy, words.len())
        });
        // The range is tested only where no filter was copied ([`Self::names`]).
        let range = match filter {
            Some(_) => None,
            None => meta.keys.first().cloned().zip(meta.keys.last().cloned()),
        };
        Writer { txn: meta.txn, meta: meta.clone(), filter, range, ts_first: None, ts_more: Vec::new() }
    }

    /// CF-4c: whether a version of partition `part` at `ts` (committed) was read at or after
    /// this writer's timestamp there, so reflects its write.
    #[inline]
    fn reflected_in(&self, part: PartitionId, ts: Timestamp) -> bool {
        match self.ts_first {
            Some((p, t)) if p == part => t <= ts,
            Some(_) => self.ts_more.iter().any(|(p, t)| *p == part && *t <= ts),
            None => false,
        }
    }

    fn learn_ts(&mut self, part: PartitionId, ts: Timestamp) {
        let slot = match &mut self.ts_first {
            Some((p, t)) if *p == part => Some(t),
            Some(_) => self.ts_more.iter_mut().find(|(p, _)| *p == part).map(|(_, t)| t),
            None => {
                self.ts_first = Some((part, ts));
                return;
            }
        };
        match slot {
            Some(t) => *t = (*t).min(ts),
            None => self.ts_more.push((part, ts)),
        }
    }

    /// Whether the copied filter (if any) may name the key of hash `hash`: `false` means the
    /// writer certainly did not write it.
    #[inline]
    fn may_name(&self, hash: u64) -> bool {
        self.filter.as_ref().is_none_or(|(words, n)| passes(&words[..*n], hash))
    }

    /// Whether the writer wrote `key`, once [`Self::may_name`] passed: the metadata's search
    /// (the range first where no filter was copied).
    #[inline]
    fn names(&self, key: &(TableId, Key), hash: u64) -> bool {
        match &self.filter {
            Some(_) => self.meta.names_searched(key),
            None => self.in_range(key) && self.meta.names_hashed(key, hash),
        }
    }

    fn in_range(&self, key: &(TableId, Key)) -> bool {
        self.range.as_ref().is_some_and(|(lo, hi)| lo <= key && key <= hi)
    }
}

/// A transaction's read set as its writers (CF-4b), so that a batch's second round costs what
/// the batch costs, not a walk over every key every writer wrote (a loader's metadata names
/// thousands): each writer's metadata is kept once; whether it names a key is a Bloom filter
/// test, then a range check and a binary search of its sorted keys
/// ([`WriteMeta::names_hashed`]); a batch key is hashed, and its read version looked up, once
/// for all writers.
/// (Inverting small write sets into a key → writers map when a writer is added was tried: the
/// inserts cost 3x more than the searches they saved.) Each writer's timestamp on every
/// partition it was read from is kept too (CF-4c). The (key, writer) pairs already asked for are
/// not asked again (the partition sent that writer's version, or said it is not newer than the
/// one read; a writer is learnt from a committed version, so it was prepared everywhere before
/// the first ask).
#[derive(Debug, Default)]
pub struct ReadIndex {
    /// Writers in the order they were learnt (a key remembers how many it was checked against).
    writers: Vec<Writer>,
    known: FxHashMap<TxnId, usize>,
    /// Per key checked before: the writers it was checked against (a prefix of `writers`) and
    /// the version it was read at then, and its hash. A key read again (CF-4a) is checked against
    /// the writers learnt since only, unless its version changed.
    checked: FxHashMap<(TableId, Key), (usize, Timestamp, u64)>,
    asked: BTreeSet<(TableId, Key, TxnId)>,
    /// Keys handed to the procedure by delivered batches (CF-4e).
    handed: Vec<Handed>,
    handed_keys: FxHashSet<(TableId, Key)>,
    /// Range reads handed to the procedure by delivered batches (CF-4e for the keys they found
    /// empty), each with how many writers it was checked against.
    handed_scans: Vec<(Scanned, usize)>,
    /// How many writers the last [`Self::missing`] checked its batch's range reads against.
    scans_checked: usize,
}

/// A key handed to the procedure: its hash, partition and the version handed, and how many of
/// the writers (a prefix of `ReadIndex::writers`) it was checked against.
#[derive(Debug)]
struct Handed {
    key: (TableId, Key),
    hash: u64,
    part: PartitionId,
    ts: Timestamp,
    own: Option<TxnId>,
    checked: usize,
}

impl ReadIndex {
    /// The most entries any of its collections has room for (a reused index is emptied in
    /// time proportional to it).
    pub fn capacity(&self) -> usize {
        let ReadIndex { writers, known, checked, handed, handed_keys, handed_scans, .. } = self;
        let rooms = [writers.capacity(), known.capacity(), checked.capacity(), handed.capacity()];
        rooms.into_iter().chain([handed_keys.capacity(), handed_scans.capacity()]).max().unwrap_or(0)
    }

    /// Empties the index for another transaction, keeping what its collections allocated
    /// (every field is named: one added later must be emptied here too).
    pub fn clear(&mut self) {
        let ReadIndex { writers, known, checked, asked, handed, handed_keys, handed_scans, scans_checked } = self;
        writers.clear();
        known.clear();
        checked.clear();
        asked.clear();
        handed.clear();
        handed_keys.clear();
        handed_scans.clear();
        *scans_checked = 0;
    }

    /// Adds the writer of a version read from partition `part` (`None`: a key that is not
    /// tracked; the coordinator always names the partition that served the read, a replicated
    /// row's copy included, CF-4f).
    pub fn add(&mut self, seen: &Seen, part: Option<PartitionId>) {
        let Some(m) = &seen.writer else { return };
        // A writer of one untracked table only names no key that is checked.
        if part.is_none() && m.keys.first().map(|k| k.0) == m.keys.last().map(|k| k.0) {
            return;
        }
        let i = *self.known.entry(m.txn).or_insert_with(|| {
            self.writers.push(Writer::new(m));
            self.writers.len() - 1
        });
        if let (Some(p), true) = (part, seen.ts < Timestamp::MAX) {
            self.writers[i].learn_ts(p, seen.ts);
        }
    }

    /// Records keys and range reads handed to the procedure (a batch delivered), with what the
    /// checks of later batches need of them, so that those checks touch neither the read set
    /// nor the keys' bytes (CF-4e).
    pub fn hand_over<'a>(
        &mut self,
        keys: impl Iterator<Item = &'a (TableId, Key)>,
        scans: &[Scanned],
        seen: &ReadSet,
        part_of: &dyn Fn(&(TableId, Key)) -> Option<PartitionId>,
    ) {
        // Checked against the writers known when the batch's second round was decided (a
        // delivery without one, if any, leaves the count lower: more is checked, not less).
        let checked = self.scans_checked.min(self.writers.len());
        self.handed_scans.extend(scans.iter().map(|s| (s.clone(), checked)));
        for k in keys {
            let (Some(s), Some(part)) = (seen.get(k), part_of(k)) else { continue };
            if !self.handed_keys.insert(k.clone()) {
                continue;
            }
            let (checked, hash) = match self.checked.get(k) {
                Some(&(n, ts, hash)) => (if ts == s.ts { n } else { 0 }, hash),
                None => (0, key_hash(k)),
            };
            let own = s.writer.as_ref().map(|w| w.txn);
            self.handed.push(Handed { key: k.clone(), hash, part, ts: s.ts, own, checked });
        }
    }

    /// Whether a key was handed to the procedure by an earlier batch, as a row read or as a
    /// key inside a range read (found empty there when it is not a handed row).
    /// `part` is the key's partition.
    pub fn was_handed(&self, key: &(TableId, Key), part: PartitionId) -> bool {
        self.handed_keys.contains(key) || self.scan_point(key, Some(part)).is_some()
    }

    /// Whether a handed range read of partition `part` covers `key`.
    pub fn in_handed_scan(&self, key: &(TableId, Key), part: PartitionId) -> bool {
        self.scan_point(key, Some(part)).is_some()
    }

    /// CF-4g: a handed key is now known at a newer version (`seen`), taken forward instead of
    /// refused: later checks compare writers with that version.
    pub fn take_forward(&mut self, key: &(TableId, Key), seen: &Seen) {
        for h in self.handed.iter_mut().filter(|h| h.key == *key) {
            h.ts = seen.ts;
            h.own = seen.writer.as_ref().map(|w| w.txn);
        }
        self.checked.remove(key);
    }

    /// The earliest version-order point of a handed range read of partition `part` that
    /// covers `key`.
    fn scan_point(&self, key: &(TableId, Key), part: Option<PartitionId>) -> Option<Timestamp> {
        let covers = |s: &Scanned| Some(s.part) == part && covered_by(&s.read, key.0, &key.1);
        self.handed_scans.iter().filter(|(s, _)| covers(s)).map(|(s, _)| s.at).min()
    }

    /// [`missing`] for one batch — `fixable` = the batch's keys and the keys handed to the
    /// procedure by earlier batches ([`Self::hand_over`]: the coordinator's CF-4e refuses a batch
    /// when one of those turns out fractured), `covered` = inside one of its range reads — less
    /// the pairs asked before, which it records as asked. Keys without a partition (`part_of`
    /// is `None`: a replicated row no copy of which was read) are not checked.
    pub fn missing(
        &mut self,
        seen: &ReadSet,
        batch: &KeySet,
        scans: &[Scanned],
        part_of: &dyn Fn(&(TableId, Key)) -> Option<PartitionId>,
    ) -> Vec<Want> {
        let mut wants = Wants::new();
        self.want_in_handed_scans(&mut wants, part_of);
        self.want_for_handed_keys(&mut wants);
        self.want_for_batch(&mut wants, seen, batch, part_of);
        self.want_in_batch_scans(&mut wants, seen, scans);
        self.not_asked_before(wants, seen, part_of)
    }

    /// Range reads handed over before: a writer learnt since that wrote a key inside one,
    /// not returned by it, unless the range was read at or after the writer's commit on its
    /// partition (CF-4c). The key is asked for versions newer than the range's point
    /// ([`Self::not_asked_before`]): one found means the range missed a row the procedure now
    /// sees the writer of.
    fn want_in_handed_scans(&mut self, wants: &mut Wants, part_of: &dyn Fn(&(TableId, Key)) -> Option<PartitionId>) {
        let learnt = self.writers.len();
        for (h, checked) in self.handed_scans.iter_mut().filter(|(_, n)| *n < learnt) {
            for w in &self.writers[*checked..] {
                if w.reflected_in(h.part, h.at) {
                    continue;
                }
                let (table, start) = (h.read.0, &h.read.1);
                let from = w.meta.keys.partition_point(|k| k.0 < table || (k.0 == table && k.1 < *start));
                for k in w.meta.keys[from..].iter().take_while(|k| covered_by(&h.read, k.0, &k.1)) {
                    if !self.handed_keys.contains(k) && part_of(k) == Some(h.part) {
                        wants.entry(k.clone()).or_default().insert(w.txn);
                    }
                }
            }
            *checked = learnt;
        }
    }

    /// Keys handed over before: against the writers learnt since (a key read again in this
    /// batch, CF-4a, may be checked twice; the wants are a set).
    fn want_for_handed_keys(&mut self, wants: &mut Wants) {
        let learnt = self.writers.len();
        for h in self.handed.iter_mut().filter(|h| h.checked < learnt) {
            for w in &self.writers[h.checked..] {
                if h.own == Some(w.txn)
                    || (h.ts < Timestamp::MAX && w.reflected_in(h.part, h.ts))
                    || !w.may_name(h.hash)
                {
                    continue;
                }
                if w.names(&h.key, h.hash) {
                    wants.entry(h.key.clone()).or_default().insert(w.txn);
                }
            }
            h.checked = learnt;
        }
    }

    /// The batch's keys, key by key: the version read is looked up, and the key hashed, once
    /// for all writers not checked against it yet.
    fn want_for_batch(
        &mut self,
        wants: &mut Wants,
        seen: &ReadSet,
        batch: &KeySet,
        part_of: &dyn Fn(&(TableId, Key)) -> Option<PartitionId>,
    ) {
        let learnt = self.writers.len();
        for k in batch {
            let Some(s) = seen.get(k) else { continue };
            let Some(part) = part_of(k) else { continue };
            // One lookup: a key new here was checked against no writer.
            let slot = self.checked.entry(k.clone()).or_insert_with(|| (0, s.ts, key_hash(k)));
            let from = if slot.1 == s.ts { slot.0 } else { 0 };
            if from == learnt {
                continue;
            }
            (slot.0, slot.1) = (learnt, s.ts);
            let hash = slot.2;
            let own = s.writer.as_ref().map(|w| w.txn);
            for w in &self.writers[from..] {
                // The writer itself, CF-4c, then the copied filter: they need no look at the
                // metadata (a cache miss per writer), and reject nearly every writer (the
                // version's own, older on the key's partition than the version read, or not
                // naming the key); the first two compare two integers each.
                if own == Some(w.txn) || (s.ts < Timestamp::MAX && w.reflected_in(part, s.ts)) || !w.may_name(hash) {
                    continue;
                }
                if w.names(k, hash) {
                    wants.entry(k.clone()).or_default().insert(w.txn);
                }
            }
        }
    }

    /// The batch's range reads: a key some writer wrote inside one that the read did not return.
    fn want_in_batch_scans(&mut self, wants: &mut Wants, seen: &ReadSet, scans: &[Scanned]) {
        self.scans_checked = self.writers.len();
        for Writer { meta, .. } in &self.writers {
            let txn = &meta.txn;
            for Scanned { read: scan, .. } in scans {
                let from = meta.keys.partition_point(|k| *k < (scan.0, scan.1.clone()));
                for k in meta.keys[from..].iter().take_while(|k| covered_by(scan, k.0, &k.1)) {
                    if !seen.contains_key(k) {
                        wants.entry(k.clone()).or_default().insert(*txn);
                    }
                }
            }
        }
    }

    /// The wants as requests, less the (key, writer) pairs asked before, which are recorded as
    /// asked now.
    fn not_asked_before(
        &mut self,
        wants: Wants,
        seen: &ReadSet,
        part_of: &dyn Fn(&(TableId, Key)) -> Option<PartitionId>,
    ) -> Vec<Want> {
        let mut out = Vec::with_capacity(wants.len());
        for ((table, key), writers) in wants {
            let writers: Vec<TxnId> =
                writers.into_iter().filter(|t| self.asked.insert((table, key.clone(), *t))).collect();
            if writers.is_empty() {
                continue;
            }
            // A key inside a handed range read is asked from the range's point: anything
            // newer was missed by that range (a fracture backwards, CF-4e).
            let k = (table, key);
            let (have, have_writer) = match self.scan_point(&k, part_of(&k)) {
                Some(at) => (at, None),
                None => have_of(seen.get(&k)),
            };
            out.push(Want { table, key: k.1, have, have_writer, writers });
        }
        out
    }
}
