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

use super::messages::{Seen, Want, WriteMeta};
use litmus_core::{Key, TableId, TxnId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The second-round requests for a read set: for every key in `seen` that `fixable` allows (the
/// reads not yet handed to the procedure), the writers other read versions name as having
/// written it, other than the writer of the version read. Also keys a *covered* range read
/// returned no row for (`covered`: a key inside a scanned range that returned nothing for it).
pub fn missing(
    seen: &BTreeMap<(TableId, Key), Seen>,
    fixable: &dyn Fn(&(TableId, Key)) -> bool,
    covered: &dyn Fn(&(TableId, Key)) -> bool,
) -> Vec<Want> {
    let mut wants: BTreeMap<(TableId, Key), BTreeSet<litmus_core::TxnId>> = BTreeMap::new();
    let writers: BTreeMap<litmus_core::TxnId, &WriteMeta> =
        seen.values().filter_map(|s| s.writer.as_deref()).map(|m| (m.txn, m)).collect();
    for meta in writers.values() {
        for k in &meta.keys {
            match seen.get(k) {
                Some(s) => {
                    if s.writer.as_ref().map(|w| w.txn) != Some(meta.txn) && fixable(k) {
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
            let have = seen.get(&(table, key.clone())).map_or(litmus_core::Timestamp::ZERO, |s| s.ts);
            Want { table, key, have, writers: writers.into_iter().collect() }
        })
        .collect()
}

/// A range read of a batch: table, start, end, and the last key returned when the limit cut
/// the range (keys after it were not read).
pub type ScanRead = (TableId, Key, Option<Key>, Option<Key>);

/// Whether `key` lies in a range read's part that was actually read.
pub fn covered_by(scan: &ScanRead, table: TableId, key: &Key) -> bool {
    let (t, start, end, cut) = scan;
    *t == table && key >= start && end.as_ref().is_none_or(|e| key < e) && cut.as_ref().is_none_or(|c| key <= c)
}

/// A transaction's read set as its writers (R4b), so that a batch's second round costs what
/// the batch costs, not a walk over every key every writer wrote (a loader's metadata names
/// thousands): each writer's metadata is kept once, and whether it names a key is a range check
/// and a binary search of its sorted keys ([`WriteMeta::names`]); a batch key's read version is
/// looked up once for all writers. (Inverting small write sets into a key → writers map when a
/// writer is added was tried: the inserts cost 3x more than the searches they saved.) The (key, writer) pairs already
/// asked for are not asked again (the partition sent that writer's version, or said it is not
/// newer than the one read; a writer is learnt from a committed version, so it was prepared
/// everywhere before the first ask).
#[derive(Debug, Default)]
pub struct ReadIndex {
    writers: BTreeMap<TxnId, Arc<WriteMeta>>,
    asked: BTreeSet<(TableId, Key, TxnId)>,
}

impl ReadIndex {
    /// Adds the writer of a version read.
    pub fn add(&mut self, seen: &Seen) {
        if let Some(m) = &seen.writer {
            self.writers.entry(m.txn).or_insert_with(|| m.clone());
        }
    }

    /// [`missing`] for one batch — `fixable` = the batch's keys, `covered` = inside one of its
    /// range reads — less the pairs asked before, which it records as asked.
    pub fn missing(
        &mut self,
        seen: &BTreeMap<(TableId, Key), Seen>,
        batch: &BTreeSet<(TableId, Key)>,
        scans: &[ScanRead],
    ) -> Vec<Want> {
        let mut wants: BTreeMap<(TableId, Key), BTreeSet<TxnId>> = BTreeMap::new();
        // Key by key: the version read is looked up once, not once per writer.
        for k in batch {
            let Some(s) = seen.get(k) else { continue };
            let own = s.writer.as_ref().map(|w| w.txn);
            for (txn, meta) in &self.writers {
                if own != Some(*txn) && meta.names(k) {
                    wants.entry(k.clone()).or_default().insert(*txn);
                }
            }
        }
        for (txn, meta) in &self.writers {
            for scan in scans {
                let from = meta.keys.partition_point(|k| *k < (scan.0, scan.1.clone()));
                for k in meta.keys[from..].iter().take_while(|k| covered_by(scan, k.0, &k.1)) {
                    if !seen.contains_key(k) {
                        wants.entry(k.clone()).or_default().insert(*txn);
                    }
                }
            }
        }
        let mut out = Vec::with_capacity(wants.len());
        for ((table, key), writers) in wants {
            let writers: Vec<TxnId> =
                writers.into_iter().filter(|t| self.asked.insert((table, key.clone(), *t))).collect();
            if writers.is_empty() {
                continue;
            }
            let have = seen.get(&(table, key.clone())).map_or(litmus_core::Timestamp::ZERO, |s| s.ts);
            out.push(Want { table, key, have, writers });
        }
        out
    }
}
