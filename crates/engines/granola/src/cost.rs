//! Fig. 10's emulated costs, a benchmark knob: CPU burnt per fragment execution (the paper sets
//! it to a TPC-C `new_order`'s) and per lock a transaction acquires in locking mode (the lock
//! management and undo logging overhead, "30–40% of total CPU" in OLTP systems, §6.1.4).
//!
//! Process-wide, set by the bench harness before a run (`litmus bench granola-counters
//! --exec-cost-us N --lock-cost-us M`), in units of a fixed busy loop the harness calibrated
//! against its clock; zero, the default, burns nothing. The engine never reads a clock:
//! burning is a counted loop, and changes no output.

use std::sync::atomic::{AtomicU64, Ordering};

static EXEC_ITERS: AtomicU64 = AtomicU64::new(0);
static LOCK_ITERS: AtomicU64 = AtomicU64::new(0);

/// Sets the cost of one fragment execution and of one lock acquired, in [`burn`] iterations.
pub fn set(exec_iters: u64, lock_iters: u64) {
    EXEC_ITERS.store(exec_iters, Ordering::Relaxed);
    LOCK_ITERS.store(lock_iters, Ordering::Relaxed);
}

/// The costs set: (per fragment execution, per lock acquired), in [`burn`] iterations.
pub fn get() -> (u64, u64) {
    (EXEC_ITERS.load(Ordering::Relaxed), LOCK_ITERS.load(Ordering::Relaxed))
}

/// Burns the cost of executing `fragments` fragments.
pub fn executed(fragments: usize) {
    burn(EXEC_ITERS.load(Ordering::Relaxed).saturating_mul(fragments as u64));
}

/// Burns the cost of acquiring `locks` locks.
pub fn locked(locks: usize) {
    burn(LOCK_ITERS.load(Ordering::Relaxed).saturating_mul(locks as u64));
}

/// `iters` rounds of a busy loop the optimiser cannot remove; returns its checksum.
pub fn burn(iters: u64) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..iters {
        x = std::hint::black_box(x.rotate_left(5) ^ i).wrapping_mul(0x0100_0000_01b3);
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fig_10_costs_default_to_nothing_and_burn_counts_its_rounds() {
        assert_eq!(get(), (0, 0), "off unless the bench sets it");
        assert_ne!(burn(1_000), burn(1_001), "every round is computed");
    }
}
