//! Lock sets of prepared transactions (Granola §4.5 locking mode).
//!
//! A prepared transaction holds a shared lock on every key it read (the whole table for a
//! range read) and an exclusive lock on every key it wrote. Locks are not a separate table:
//! a new lock set is checked against the lock sets of the prepared transactions, which live in
//! the partition's logged state, so recovery restores them with nothing else to rebuild.

use litmus_core::{Key, TableId};
use litmus_protocol::fragment::FragmentOutcome;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LockSet {
    /// Shared: a key, or a whole table (`None`).
    pub shared: Vec<(TableId, Option<Key>)>,
    pub exclusive: Vec<(TableId, Key)>,
    /// Exclusive on whole tables: `forcePrepare`'s escalation (§5.4) for a fragment whose keys
    /// may depend on the order it runs in.
    pub tables: Vec<TableId>,
}

impl LockSet {
    /// The locks a fragment run needs.
    pub fn of(outcome: &FragmentOutcome) -> LockSet {
        let mut set = LockSet::default();
        set.add(outcome);
        set
    }

    pub fn add(&mut self, outcome: &FragmentOutcome) {
        self.shared.extend(outcome.reads.iter().cloned());
        self.exclusive.extend(outcome.writes.iter().map(|w| (w.table, w.key.clone())));
    }

    /// The same locks escalated to exclusive locks on every table they touch: a superset of
    /// what the transaction could lock in any execution order when the keys it touches may
    /// depend on that order but its tables do not (`forcePrepare`, §5.4).
    pub fn escalated(&self) -> LockSet {
        let mut tables: Vec<TableId> =
            self.shared.iter().map(|s| s.0).chain(self.exclusive.iter().map(|x| x.0)).collect();
        tables.extend(self.tables.iter().copied());
        tables.sort();
        tables.dedup();
        LockSet { shared: vec![], exclusive: vec![], tables }
    }

    /// Locks in the set.
    pub fn len(&self) -> usize {
        self.shared.len() + self.exclusive.len() + self.tables.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn touches(&self, t: TableId) -> bool {
        self.tables.contains(&t) || self.shared.iter().any(|s| s.0 == t) || self.exclusive.iter().any(|x| x.0 == t)
    }

    /// Whether two lock sets cannot be held at once: one writes what the other reads or writes.
    pub fn conflicts(&self, other: &LockSet) -> bool {
        if self.tables.iter().any(|t| other.touches(*t)) || other.tables.iter().any(|t| self.touches(*t)) {
            return true;
        }
        let covers =
            |s: &(TableId, Option<Key>), x: &(TableId, Key)| s.0 == x.0 && s.1.as_ref().is_none_or(|k| *k == x.1);
        let writes_touch = |a: &LockSet, b: &LockSet| {
            a.exclusive.iter().any(|x| b.exclusive.contains(x) || b.shared.iter().any(|s| covers(s, x)))
        };
        writes_touch(self, other) || writes_touch(other, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u8) -> Key {
        Key::from(vec![i])
    }

    #[test]
    fn locking_mode_shared_locks_share_and_exclusive_ones_exclude() {
        let t = TableId(0);
        let read = |i| LockSet { shared: vec![(t, Some(k(i)))], ..Default::default() };
        let write = |i| LockSet { exclusive: vec![(t, k(i))], ..Default::default() };
        let scan = LockSet { shared: vec![(t, None)], ..Default::default() };
        assert!(!read(1).conflicts(&read(1)));
        assert!(read(1).conflicts(&write(1)));
        assert!(write(1).conflicts(&read(1)));
        assert!(write(1).conflicts(&write(1)));
        assert!(!write(1).conflicts(&write(2)));
        assert!(scan.conflicts(&write(7)), "a range read locks the table");
        assert!(!scan.conflicts(&LockSet { exclusive: vec![(TableId(1), k(7))], ..Default::default() }));
    }

    #[test]
    fn force_prepare_5_4_escalated_locks_exclude_every_key_of_their_tables() {
        let (t, u) = (TableId(0), TableId(1));
        let one = LockSet { shared: vec![(t, Some(k(1)))], ..Default::default() };
        let forced = one.escalated();
        assert_eq!(forced.tables, vec![t]);
        assert!(!one.conflicts(&LockSet { shared: vec![(t, Some(k(2)))], ..Default::default() }));
        assert!(forced.conflicts(&LockSet { shared: vec![(t, Some(k(2)))], ..Default::default() }), "any key of t");
        assert!(LockSet { shared: vec![(t, Some(k(2)))], ..Default::default() }.conflicts(&forced), "symmetric");
        assert!(!forced.conflicts(&LockSet { exclusive: vec![(u, k(2))], ..Default::default() }), "other tables free");
    }
}
