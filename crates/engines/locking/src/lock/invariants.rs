//! The lock manager's invariants, checked by tests and the simulator after every step.

use super::*;

/// The lock manager's invariants, checked by its property tests after every operation and by
/// the simulator after every step of a partition ([`LockManager::check_invariants`]).
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
    ($cond:expr) => {
        if !$cond {
            return Err(format!("invariant violated: {}", stringify!($cond)));
        }
    };
}

macro_rules! ensure_eq {
    ($a:expr, $b:expr, $($fmt:tt)+) => {
        if $a != $b {
            return Err(format!("{:?} != {:?}: {}", $a, $b, format!($($fmt)+)));
        }
    };
    ($a:expr, $b:expr) => {
        if $a != $b {
            return Err(format!("{:?} != {:?}: {} vs {}", $a, $b, stringify!($a), stringify!($b)));
        }
    };
}

impl PointQueues {
    /// Bookkeeping: every ordered index names exactly its table's queued keys.
    pub(super) fn check(&self) -> Result<(), String> {
        for (table, ordered) in &self.ordered {
            let queued = self.queues.get(table).map_or(0, |q| q.len());
            ensure_eq!(ordered.len(), queued, "ordered index of table {:?}", table);
            for k in ordered {
                ensure!(self.get(*table, k).is_some(), "ordered key {:?} of table {:?} has no queue", k, table);
            }
        }
        for keys in self.queues.values() {
            ensure!(keys.values().all(|q| !q.is_empty() && q.windows(2).all(|w| w[0] < w[1])));
        }
        Ok(())
    }
}

impl LockManager {
    /// The transactions the waiter `w` waits for right now (the real waits-for graph): owners of
    /// conflicting held locks and earlier queued requests, and — when the waiter conflicts with a
    /// blocker's saline form — owners of held locks its release still depends on (LK-6).
    pub(super) fn waits_for_now(&self, w: u64) -> BTreeSet<(u64, TxnId)> {
        let lm = self;
        let we = &lm.entries[&w];
        let mut out = BTreeSet::new();
        for (&b, be) in &lm.entries {
            if be.owner.txn == we.owner.txn || be.table != we.table || !be.target.overlaps(&we.target) {
                continue;
            }
            let blocks =
                if be.is_held() { !compatible(be.mode, we.mode) } else { b < w && must_queue_behind(be.mode, we.mode) };
            if !blocks {
                continue;
            }
            if !be.is_held() || compatible(be.mode.as_saline(), we.mode) {
                out.insert(be.owner.priority());
                continue;
            }
            let mut stack = vec![b];
            let mut seen = BTreeSet::new();
            while let Some(id) = stack.pop() {
                let Some(e) = lm.entries.get(&id) else { continue };
                if !seen.insert(id) {
                    continue;
                }
                if e.state == State::Held {
                    out.insert(e.owner.priority());
                }
                stack.extend(e.deps.iter().copied());
            }
        }
        out
    }

    /// Checks bookkeeping, (i) held locks of different transactions on overlapping targets are
    /// compatible, (ii) no lost wake-up, (iii) LK-5a: every waits-for cycle goes through an
    /// impatient transaction. `Err` names the first violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        let lm = self;
        let entries: Vec<(u64, &Entry)> = lm.entries.iter().map(|(&id, e)| (id, e)).collect();
        lm.points.check()?;
        // Bookkeeping: indices, counters (pair assertions for the O(1) check).
        for &(id, e) in &entries {
            ensure!(lm.by_txn[&e.owner.txn].contains(&id));
            let queued = match &e.target {
                Target::Key(k) => lm.points.get(e.table, k).is_some_and(|q| q.contains(&id)),
                Target::Range { .. } => {
                    lm.points.ordered.contains_key(&e.table) && lm.ranges.get(&e.table).is_some_and(|q| q.contains(&id))
                }
            };
            ensure!(queued, "entry {} is not in its queue", id);
            ensure_eq!(lm.waiting.contains(&id), e.is_waiting());
            if e.is_held() && e.mode.is_base_read() && e.pending > 0 {
                let indexed = lm.tainted.get(&e.owner.txn).is_some_and(|r| r.contains(&id));
                ensure!(indexed, "tainted read {} is not in its transaction's index", id);
            }
            let live = e.deps.iter().filter(|d| lm.entries.contains_key(d)).count();
            let remote = if e.is_held() { e.remote.len() } else { 0 };
            ensure_eq!(e.pending, live + remote, "pending count of {}", id);
            if e.state == State::Releasing {
                ensure!(e.pending > 0 && e.mode.class == LockClass::Saline);
            }
            if e.is_waiting() {
                ensure!(e.deps.is_empty() && e.dependents.is_empty());
            }
        }
        for (txn, reads) in &lm.tainted {
            for id in reads {
                ensure!(lm.entries.get(id).is_some_and(|e| e.owner.txn == *txn), "tainted index names {} gone", id);
            }
        }
        // (i) held (and releasing) locks of different txns on overlapping targets are compatible.
        for &(a, ea) in &entries {
            for &(b, eb) in &entries {
                if a < b
                    && ea.is_held()
                    && eb.is_held()
                    && ea.owner.txn != eb.owner.txn
                    && ea.table == eb.table
                    && ea.target.overlaps(&eb.target)
                {
                    ensure!(compatible(ea.mode, eb.mode), "incompatible locks {:?} {:?}", ea, eb);
                }
            }
        }
        // (ii) no lost wake-up: every waiter is blocked by another txn's lock or earlier request.
        for &(w, we) in &entries {
            if !we.is_waiting() {
                continue;
            }
            let blocked = entries.iter().any(|&(b, be)| {
                be.owner.txn != we.owner.txn
                    && be.table == we.table
                    && be.target.overlaps(&we.target)
                    && if be.is_held() {
                        !compatible(be.mode, we.mode)
                    } else {
                        b < w && must_queue_behind(be.mode, we.mode)
                    }
            });
            ensure!(blocked, "waiter {} {:?} is grantable", w, we);
        }
        // (iii) LK-5a: a waiter with an edge to an older transaction (or its own) is impatient;
        // a patient one has only edges from older to younger, so every waits-for cycle goes
        // through an impatient transaction (whom the partition aborts after the patience).
        let mut patient_graph: BTreeMap<TxnId, BTreeSet<TxnId>> = BTreeMap::new();
        for &(w, we) in &entries {
            if !we.is_waiting() {
                continue;
            }
            let impatient = lm.impatient(we.owner.txn);
            for prio in lm.waits_for_now(w) {
                let to = prio.1;
                if prio <= we.owner.priority() {
                    ensure!(impatient, "{:?} waits for older or same {:?} but is patient", we.owner, to);
                }
                if !impatient {
                    patient_graph.entry(we.owner.txn).or_default().insert(to);
                }
            }
        }
        ensure!(acyclic(&patient_graph), "waits-for cycle without an impatient txn: {:?}", patient_graph);
        Ok(())
    }
}

pub(super) fn acyclic(graph: &BTreeMap<TxnId, BTreeSet<TxnId>>) -> bool {
    // Kahn's algorithm.
    let mut indegree: BTreeMap<TxnId, usize> = BTreeMap::new();
    for (from, tos) in graph {
        indegree.entry(*from).or_default();
        for to in tos {
            *indegree.entry(*to).or_default() += 1;
        }
    }
    let mut ready: Vec<TxnId> = indegree.iter().filter(|(_, &d)| d == 0).map(|(t, _)| *t).collect();
    let mut removed = 0;
    while let Some(t) = ready.pop() {
        removed += 1;
        for to in graph.get(&t).into_iter().flatten() {
            let d = indegree.get_mut(to).expect("node");
            *d -= 1;
            if *d == 0 {
                ready.push(*to);
            }
        }
    }
    removed == indegree.len()
}
