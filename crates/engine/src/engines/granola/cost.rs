//! Fig. 10's emulated costs, a benchmark knob: CPU burnt per fragment execution (the paper sets
//! it to a TPC-C `new_order`'s) and per lock a transaction acquires in locking mode (the lock
//! management and undo logging overhead, "30–40% of total CPU" in OLTP systems, §6.1.4).
//!
//! Process-wide, set by the bench harness before a run (`litmus bench granola-counters
//! --exec-cost-us N --lock-cost-us M`); zero, the default, burns nothing. Burning spins on the
//! wall clock but changes no output: the protocol stays a deterministic function of its inputs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static EXEC_NS: AtomicU64 = AtomicU64::new(0);
static LOCK_NS: AtomicU64 = AtomicU64::new(0);

/// Sets the CPU cost of one fragment execution and of one lock acquired.
pub fn set(exec: Duration, lock: Duration) {
    EXEC_NS.store(exec.as_nanos() as u64, Ordering::Relaxed);
    LOCK_NS.store(lock.as_nanos() as u64, Ordering::Relaxed);
}

/// The costs set: (per fragment execution, per lock acquired).
pub fn get() -> (Duration, Duration) {
    (Duration::from_nanos(EXEC_NS.load(Ordering::Relaxed)), Duration::from_nanos(LOCK_NS.load(Ordering::Relaxed)))
}

/// Burns the cost of executing `fragments` fragments.
pub fn executed(fragments: usize) {
    burn(EXEC_NS.load(Ordering::Relaxed) * fragments as u64);
}

/// Burns the cost of acquiring `locks` locks.
pub fn locked(locks: usize) {
    burn(LOCK_NS.load(Ordering::Relaxed) * locks as u64);
}

fn burn(ns: u64) {
    if ns == 0 {
        return;
    }
    let until = Instant::now() + Duration::from_nanos(ns);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fig_10_costs_default_to_nothing_and_burn_what_is_set() {
        assert_eq!(get(), (Duration::ZERO, Duration::ZERO), "off unless the bench sets it");
        let t = Instant::now();
        burn(2_000_000);
        assert!(t.elapsed() >= Duration::from_millis(2), "burns at least the cost");
    }
}
