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
use litmus_core::{Key, TableId};
use std::collections::{BTreeMap, BTreeSet};

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
