//! Transaction-level vocabulary shared by engines: ANSI isolation levels and operation access
//! types, with Salt's Table 1 (which accesses take long-term and short-term locks per level).

use crate::error::InvalidInput;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The kind of access an operation makes (Salt §5: R, RR, W).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Access {
    Read,
    RangeRead,
    Write,
}

/// The four ANSI isolation levels of lock-based systems (Salt §5, Table 1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Isolation {
    ReadUncommitted,
    ReadCommitted,
    RepeatableRead,
    #[default]
    Serializable,
}

impl Isolation {
    pub const ALL: [Isolation; 4] =
        [Isolation::ReadUncommitted, Isolation::ReadCommitted, Isolation::RepeatableRead, Isolation::Serializable];

    /// Salt Table 1, set 𝓛: accesses whose locks are long-term (held to the end of the
    /// transaction).
    pub fn long_term(self, a: Access) -> bool {
        match self {
            Isolation::ReadUncommitted | Isolation::ReadCommitted => a == Access::Write,
            Isolation::RepeatableRead => matches!(a, Access::Read | Access::Write),
            Isolation::Serializable => true,
        }
    }

    /// Salt Table 1, set 𝓢: accesses that must be isolated at all (take a lock, at least for
    /// the duration of the operation).
    pub fn locked(self, a: Access) -> bool {
        match self {
            Isolation::ReadUncommitted => a == Access::Write,
            Isolation::ReadCommitted | Isolation::RepeatableRead => matches!(a, Access::Read | Access::Write),
            Isolation::Serializable => true,
        }
    }

    /// Locks in 𝓢 \ 𝓛 are short-term: released as soon as the operation completes.
    pub fn short_term(self, a: Access) -> bool {
        self.locked(a) && !self.long_term(a)
    }

    pub fn name(self) -> &'static str {
        match self {
            Isolation::ReadUncommitted => "read-uncommitted",
            Isolation::ReadCommitted => "read-committed",
            Isolation::RepeatableRead => "repeatable-read",
            Isolation::Serializable => "serializable",
        }
    }
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Isolation {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Isolation::ALL
            .into_iter()
            .find(|i| i.name() == s)
            .ok_or_else(|| InvalidInput::Config(format!("unknown isolation level {s:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Access::*;

    /// Salt Table 1, row by row: (level, 𝓛, 𝓢).
    #[test]
    fn salt_table_1() {
        let table: [(Isolation, &[Access], &[Access]); 4] = [
            (Isolation::ReadUncommitted, &[Write], &[Write]),
            (Isolation::ReadCommitted, &[Write], &[Read, Write]),
            (Isolation::RepeatableRead, &[Read, Write], &[Read, Write]),
            (Isolation::Serializable, &[Read, RangeRead, Write], &[Read, RangeRead, Write]),
        ];
        for (level, l, s) in table {
            for a in [Read, RangeRead, Write] {
                assert_eq!(level.long_term(a), l.contains(&a), "{level} 𝓛 {a:?}");
                assert_eq!(level.locked(a), s.contains(&a), "{level} 𝓢 {a:?}");
            }
        }
        assert!(Isolation::ReadCommitted.short_term(Read));
        assert!(!Isolation::Serializable.short_term(Read));
        assert_eq!("repeatable-read".parse::<Isolation>().unwrap(), Isolation::RepeatableRead);
        assert!("snapshot".parse::<Isolation>().is_err());
    }
}
