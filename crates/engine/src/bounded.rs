//! A set that remembers its most recent members: inserting beyond the capacity forgets the
//! oldest. Used for "have I seen this before?" memories that must not grow without bound —
//! duplicated client requests, committed ACID and ended BASE transactions whose late messages
//! a partition refuses.
//!
//! Members live in a hash set ([`litmus_core::hash::FxBuild`]): a partition asks "is this
//! transaction finished?" on every operation, of a set of up to
//! the locking partition's `FINISHED_MEMORY_MAX` (100,000) members, and a B-tree of that size
//! cost a chain of cache misses per question (~1.6% of a TPC-C run, issue 13). Nothing walks
//! the members; the insertion order is the queue's.

use litmus_core::hash::FxBuild;
use serde::{Deserialize, Serialize};
use std::collections::{HashSet, VecDeque};
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

#[cfg(test)]
mod tests {
    use super::BoundedSet;

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
