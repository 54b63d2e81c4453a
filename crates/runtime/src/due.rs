//! A heap entry due at a time: the one ordering both the simulator's event queue and the
//! embedded runtime's delayed-message heap need (earliest first; ties by sequence number, so
//! equal times keep insertion order and a seed replays exactly).

use litmus_core::Time;

pub(crate) struct Due<T> {
    pub at: Time,
    pub seq: u64,
    pub item: T,
}

impl<T> PartialEq for Due<T> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<T> Eq for Due<T> {}
impl<T> PartialOrd for Due<T> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Due<T> {
    /// Reversed, so `BinaryHeap` (a max-heap) pops the earliest entry.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}
