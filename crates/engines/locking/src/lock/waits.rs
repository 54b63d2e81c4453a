//! Who waits for whom: the waits-for sets behind wound-wait (LK-5b), patience and deadlock
//! detection within a partition (LK-5c).

use super::*;

impl LockManager {
    /// Transactions older than `txn` that its waiting requests wait for (LK-5b's victims).
    pub fn wound_targets(&self, txn: TxnId) -> Vec<TxnId> {
        let mut out = BTreeSet::new();
        for (owner, waits_for) in self.waits_of(txn) {
            if let Some(others) = waits_for {
                out.extend(others.values().filter(|o| o.txn != txn && o.priority() < owner.priority()).map(|o| o.txn));
            }
        }
        out.into_iter().collect()
    }

    /// Every transaction the waiting requests of `txn` wait for (LK-5's waits-for set, older
    /// and younger, `txn` itself included if it waits for itself); `None` when the set cannot
    /// be computed (the walk exceeds [`DEPENDENCY_WALK_MAX`]). Empty if nothing of it waits.
    pub fn waits_for_set(&self, txn: TxnId) -> Option<BTreeSet<TxnId>> {
        let mut out = BTreeSet::new();
        for (_, waits_for) in self.waits_of(txn) {
            out.extend(waits_for?.into_keys());
        }
        Some(out)
    }

    /// [`LockManager::waits_for_set`], except that a waiting request on `fifo_table` counts
    /// only the transactions holding conflicting locks on its target, not the requests queued
    /// ahead of it. For a table whose requests are all exclusive and granted in arrival order
    /// (the queue anchors of the locking partition), the requests ahead wait for the same
    /// holders and are granted one by one after them: whether the queue moves is whether its
    /// holders move. Counting the requests ahead made the question cost the queue's length —
    /// past a bound, "unknown" (64 TPC-C Deliveries of one warehouse queued on a
    /// district's anchor at 128 clients, and each died for it).
    pub fn waits_for_holders(&self, txn: TxnId, fifo_table: TableId) -> Option<BTreeSet<TxnId>> {
        let Some(seqs) = self.by_txn.get(&txn) else { return Some(BTreeSet::new()) };
        let mut out = BTreeSet::new();
        for seq in seqs {
            let e = &self.entries[seq];
            if !e.is_waiting() {
                continue;
            }
            let mut blockers = self.blockers(txn, e.table, &e.target, e.mode, *seq);
            if e.table == fifo_table {
                blockers.retain(|b| !self.entries[b].is_waiting());
            }
            out.extend(self.waits_for(e.mode, &blockers)?.into_keys());
        }
        Some(out)
    }

    /// LK-5a: whether some waiting request of `txn` waits for a transaction older than `txn`,
    /// or for `txn` itself (or its waits-for set exceeds [`DEPENDENCY_WALK_MAX`]) — the test
    /// wait-die applies at request time, applied now. A mortal transaction that stays impatient
    /// for the patience is aborted by the caller; one that is not waits as long as it takes.
    pub fn impatient(&self, txn: TxnId) -> bool {
        self.waits_of(txn).into_iter().any(|(owner, waits_for)| match waits_for {
            Some(others) => others.values().any(|o| o.txn == txn || o.priority() < owner.priority()),
            None => true,
        })
    }

    /// LK-5c: a deadlock that `txn`'s waiting requests close in this lock table, found at
    /// once instead of after the patience. Searches the waits-for graph (a transaction waits
    /// for the owners its waiting requests wait for, LK-5) from `txn` for a path back to it,
    /// visiting at most [`DEADLOCK_SEARCH_MAX`] transactions. On the cycle found, every edge to
    /// an older transaction is one LK-5a will break; the victim is the youngest transaction
    /// with such an edge among those `can_abort` allows — what the patience would abort, only
    /// sooner. `None`: no cycle through `txn` here (there may be one across partitions, which
    /// the patience breaks), or no victim allowed.
    pub fn deadlock_victim(&self, txn: TxnId, can_abort: impl Fn(TxnId) -> bool) -> Option<TxnId> {
        let mut victim: Option<Owner> = None;
        for (a, b) in self.deadlock_cycle_edges(txn)? {
            if b.priority() < a.priority() && can_abort(a.txn) && victim.is_none_or(|v| a.priority() > v.priority()) {
                victim = Some(a);
            }
        }
        victim.map(|v| v.txn)
    }

    /// LK-5c's search, for a caller that chooses its victim itself (LK-5d): the
    /// members of a cycle through `txn` in the waits-for graph here, each with whether its
    /// edge on the cycle goes to an older transaction (one LK-5a would break). `None`: no
    /// cycle through `txn` found here.
    pub fn deadlock_cycle(&self, txn: TxnId) -> Option<Vec<(Owner, bool)>> {
        let edges = self.deadlock_cycle_edges(txn)?;
        Some(edges.into_iter().map(|(a, b)| (a, b.priority() < a.priority())).collect())
    }

    pub(super) fn deadlock_cycle_edges(&self, txn: TxnId) -> Option<Vec<(Owner, Owner)>> {
        if !self.may_be_waited_for(txn) {
            return None; // no path can lead back to `txn`
        }
        self.deadlock_search(txn)
    }

    /// [`LockManager::deadlock_victim`]'s search of the waits-for graph, without the shortcut:
    /// the edges (waiter, waited for) of the cycle found.
    pub(super) fn deadlock_search(&self, txn: TxnId) -> Option<Vec<(Owner, Owner)>> {
        let mut parent: BTreeMap<TxnId, Owner> = BTreeMap::new();
        let mut owner_of: BTreeMap<TxnId, Owner> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([txn]);
        let mut visited = BTreeSet::from([txn]);
        while let Some(t) = queue.pop_front() {
            for (owner, waits_for) in self.waits_of(t) {
                owner_of.insert(t, owner);
                for next in waits_for?.into_values() {
                    if next.txn == txn {
                        // The cycle: txn → … → t → txn.
                        let mut edges = vec![(owner, next)];
                        let mut b = t;
                        while let Some(&a) = parent.get(&b) {
                            edges.push((a, owner_of[&b]));
                            b = a.txn;
                        }
                        return Some(edges);
                    }
                    if visited.len() >= DEADLOCK_SEARCH_MAX || !visited.insert(next.txn) {
                        continue;
                    }
                    parent.insert(next.txn, owner);
                    queue.push_back(next.txn);
                }
            }
        }
        None
    }

    /// Whether another transaction may wait for `txn` here (LK-5's waits-for graph has an
    /// edge into it): a waiting request of another transaction on a target overlapping one of
    /// `txn`'s locks, or queued after one of its requests, or a lock whose release waits for
    /// one of `txn`'s (LK-6, `dependents`). A superset of the real edges, so `false` proves
    /// that no cycle runs through `txn`: [`LockManager::deadlock_victim`] then skips its
    /// search, which costs one waits-for set per transaction visited — on a hot key with
    /// hundreds queued (thousands of zipfian YCSB clients), most of the simulator's time.
    pub(super) fn may_be_waited_for(&self, txn: TxnId) -> bool {
        let Some(ids) = self.by_txn.get(&txn) else { return false };
        ids.iter().any(|&id| {
            let e = &self.entries[&id];
            !e.dependents.is_empty()
                || self.overlapping_iter(e.table, &e.target).any(|x| {
                    let xe = &self.entries[&x];
                    xe.owner.txn != txn && xe.is_waiting() && (e.is_held() || x > id)
                })
        })
    }
}
