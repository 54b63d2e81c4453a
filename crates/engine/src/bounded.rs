//! A set that remembers its most recent members: inserting beyond the capacity forgets the
//! oldest. Used for "have I seen this before?" memories that must not grow without bound —
//! duplicated client requests, committed ACID and ended BASE transactions whose late messages
//! a partition refuses.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, VecDeque};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundedSet<T: Ord + Clone> {
    members: BTreeSet<T>,
    /// Members in insertion order, oldest first.
    order: VecDeque<T>,
    capacity: usize,
}

impl<T: Ord + Clone> BoundedSet<T> {
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "a bounded set needs room for one member");
        BoundedSet { members: BTreeSet::new(), order: VecDeque::new(), capacity }
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
