//! Time as data. State machines never read a clock: the runtime hands them [`Time`], which is
//! virtual in the simulator and monotonic wall time in the real runtimes.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in (virtual or real) time, in nanoseconds since the runtime started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Time(pub u64);

impl Time {
    pub const ZERO: Time = Time(0);

    pub fn from_micros(us: u64) -> Time {
        Time(us * 1_000)
    }
    pub fn from_millis(ms: u64) -> Time {
        Time(ms * 1_000_000)
    }
    pub fn as_nanos(self) -> u64 {
        self.0
    }
    pub fn saturating_sub(self, other: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(other.0))
    }
    /// The time `d` before this one (`ZERO` if that is before the runtime started).
    pub fn earlier_by(self, d: Duration) -> Time {
        Time(self.0.saturating_sub(d.as_nanos().min(u64::MAX as u128) as u64))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        Time(self.0.saturating_add(d.as_nanos().min(u64::MAX as u128) as u64))
    }
}

impl Sub<Time> for Time {
    type Output = Duration;
    fn sub(self, other: Time) -> Duration {
        self.saturating_sub(other)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}ms", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

/// A transaction timestamp: a version order, not a clock reading. Engines assign them (a
/// partition counter, a Granola vote, an Omid oracle, a hybrid clock); the store orders versions
/// by them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub const ZERO: Timestamp = Timestamp(0);
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    pub fn next(self) -> Timestamp {
        assert!(self.0 < u64::MAX, "timestamp space exhausted");
        Timestamp(self.0 + 1)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "@{}", self.0)
    }
}
