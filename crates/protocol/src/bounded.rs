//! A set that remembers its most recent members: inserting beyond the capacity forgets the
//! oldest. Used for "have I seen this before?" memories that must not grow without bound —
//! duplicated client requests, committed ACID and ended BASE transactions whose late messages
//! a partition refuses.
//!
//! Members live in a hash set ([`litmus_core::hash::FxBuild`]): a partition asks "is this
//! transaction finished?" on every operation, of a set of up to
//! the locking partition's `FINISHED_MEMORY_MAX` (100,000) members, and a B-tree of that size
//! costs a chain of cache misses per question. Nothing walks
//! the members; the insertion order is the queue's.

use litmus_core::hash::FxBuild;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound(serialize = "T: Serialize", deserialize = "T: Deserialize<'de>"))]
pub struct BoundedSet<T: Eq + Hash + Clone> {
    members: HashSet<T, FxBuild>,
    /// Members in insertion order, oldest first.
    order: VecDeque<T>,
    capacity: usize,
}

impl<T: Eq + Hash + Clone> BoundedSet<T> {
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "a bounded set needs room for one member");
        BoundedSet { members: HashSet::default(), order: VecDeque::new(), capacity }
    }

    /// Adds `x`; `false` if it was already a member. Forgets the oldest member when full.
    pub fn insert(&mut self, x: T) -> bool {
        if !self.members.insert(x.clone()) {
            return false;
        }
        self.order.push_back(x);
        if self.order.len() > self.capacity {
            let oldest = self.order.pop_front().expect("over capacity, so nonempty");
            self.members.remove(&oldest);
        }
        true
    }

    pub fn contains(&self, x: &T) -> bool {
        self.members.contains(x)
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

/// A bounded memory of `(group, sequence number)` pairs whose sequence numbers mostly grow
/// within a group: a coordinator's "have I seen request `r` of client `c`?" (a session numbers
/// its requests in order). It holds at most `capacity` pairs; beyond that, the group of the
/// oldest insertion forgets its *smallest* number.
///
/// The same question in one [`BoundedSet`] of pairs would cost two cache misses per request
/// (the insert's bucket and the evicted member's):
/// here a group's numbers sit in order in one deque whose back takes the new number and whose
/// front gives up the old one, and the insertion order is a deque of groups, all walked at
/// their ends.
#[derive(Clone, Debug)]
pub struct BoundedSeqSet<G: Eq + Hash + Copy, S: Ord + Copy> {
    groups: HashMap<G, VecDeque<S>, FxBuild>,
    /// One entry per member: its group, in insertion order.
    order: VecDeque<G>,
    capacity: usize,
}

impl<G: Eq + Hash + Copy, S: Ord + Copy> BoundedSeqSet<G, S> {
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "a bounded set needs room for one member");
        BoundedSeqSet { groups: HashMap::default(), order: VecDeque::new(), capacity }
    }

    /// Adds `(group, seq)`; `false` if it was already a member. Beyond the capacity, the group
    /// inserted into longest ago forgets its smallest number.
    pub fn insert(&mut self, group: G, seq: S) -> bool {
        let seqs = self.groups.entry(group).or_default();
        match seqs.back() {
            Some(last) if *last >= seq => match seqs.binary_search(&seq) {
                Ok(_) => return false,
                Err(at) => seqs.insert(at, seq),
            },
            _ => seqs.push_back(seq),
        }
        self.order.push_back(group);
        if self.order.len() > self.capacity {
            let oldest = self.order.pop_front().expect("over capacity, so nonempty");
            let seqs = self.groups.get_mut(&oldest).expect("every queued group has members");
            seqs.pop_front();
            if seqs.is_empty() {
                self.groups.remove(&oldest);
            }
        }
        true
    }

    pub fn contains(&self, group: G, seq: S) -> bool {
        self.groups.get(&group).is_some_and(|seqs| seqs.binary_search(&seq).is_ok())
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::{BoundedSeqSet, BoundedSet};
    use proptest::prelude::*;
    use std::collections::{BTreeSet, VecDeque};

    #[test]
    fn a_seq_set_refuses_repeats_in_and_out_of_order_and_forgets_the_oldest_groups_smallest() {
        let mut s = BoundedSeqSet::new(3);
        assert!(s.insert('a', 2) && s.insert('a', 1), "out of order is new too");
        assert!(!s.insert('a', 2) && !s.insert('a', 1));
        assert!(s.insert('b', 1));
        assert_eq!(s.len(), 3);
        assert!(s.insert('b', 2), "over capacity: `a` (inserted first) forgets 1, its smallest");
        assert!(!s.contains('a', 1) && s.contains('a', 2) && s.contains('b', 1) && s.contains('b', 2));
        assert!(s.insert('c', 1) && s.insert('c', 2), "`a` forgets 2, then `b` forgets 1");
        assert!(!s.contains('a', 2) && !s.contains('b', 1) && s.contains('b', 2));
        assert!(!s.groups.contains_key(&'a'), "an emptied group is dropped");
        assert_eq!(s.len(), 3);
    }

    proptest! {
        /// Against the obvious model: a set of pairs and the queue of insertions' groups.
        #[test]
        fn a_seq_set_is_the_model(ops in proptest::collection::vec((0u8..3, 0u16..12), 0..200), cap in 1usize..8) {
            let mut s = BoundedSeqSet::new(cap);
            let mut members: BTreeSet<(u8, u16)> = BTreeSet::new();
            let mut order: VecDeque<u8> = VecDeque::new();
            for (g, q) in ops {
                let new = members.insert((g, q));
                if new {
                    order.push_back(g);
                    if order.len() > cap {
                        let old = order.pop_front().unwrap();
                        let smallest = *members.range((old, 0)..=(old, u16::MAX)).next().unwrap();
                        members.remove(&smallest);
                    }
                }
                prop_assert_eq!(s.insert(g, q), new);
                prop_assert_eq!(s.len(), members.len());
                for g in 0..3 {
                    for q in 0..12 {
                        prop_assert_eq!(s.contains(g, q), members.contains(&(g, q)));
                    }
                }
            }
        }
    }

    #[test]
    fn forgets_the_oldest_member_beyond_capacity() {
        let mut s = BoundedSet::new(2);
        assert!(s.insert(1) && s.insert(2));
        assert!(!s.insert(1), "already a member");
        assert!(s.insert(3));
        assert_eq!(s.len(), 2);
        assert!(!s.contains(&1) && s.contains(&2) && s.contains(&3));
        assert!(s.insert(1), "forgotten, so new again");
        assert!(!s.contains(&2));
    }
}
