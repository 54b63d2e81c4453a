//! # litmus-engines: the engine registry
//!
//! Every concurrency-control engine is a crate of its own (`crates/engines/<name>`) that
//! implements [`litmus_protocol::engine::EngineDef`] and exports a handle
//! ([`EngineKind`]) per engine it defines. This crate lists them: adding an engine is its
//! crate, a dependency here and one line in [`ALL`]. Nothing else names an engine: the roles,
//! runtimes, CLI, benchmarks and the conformance suite (`tests/conformance.rs`) all go through
//! [`ALL`] and [`by_name`].
//!
//! [`timeouts`] checks, when this crate compiles, that the engines' timeouts nest (each layer
//! gives the layer below it time to act before it gives up itself).

use litmus_core::InvalidInput;
pub use litmus_protocol::engine::EngineKind;

pub mod timeouts;

pub use litmus_basic::BASIC;
pub use litmus_coordfree::COORDFREE;
pub use litmus_granola::{GRANOLA, GRANOLA_LOCKING, SINFONIA};
pub use litmus_locking::{ACID, SALT, SALT_LOCAL};
pub use litmus_nocc::{BASE, NOCC};
pub use litmus_omid::OMID;

/// Every registered engine, in the order `--help` lists them.
pub const ALL: &[EngineKind] = &[
    NOCC,            // no concurrency control (UNSAFE): the throughput upper bound
    ACID,            // strict 2PL + 2PC at the four ANSI levels
    SALT,            // ACID plus Salt's BASE transactions
    SALT_LOCAL,      // Salt with the local-transaction optimization (Salt §6.4)
    OMID,            // snapshot isolation through a status oracle
    GRANOLA,         // one-round transactions by timestamp voting
    BASIC,           // BASIC's Timestamp-based Formula Protocol
    BASE,            // BASIC's comparison point: apply on arrival
    COORDFREE,       // coordination-free, read atomic (VLDB '15)
    GRANOLA_LOCKING, // Granola always in locking mode
    SINFONIA,        // lock-based 2PC of one-round transactions through one coordinator node
];

/// The registered engine called `name` (what users select with `--engine`).
pub fn by_name(name: &str) -> Result<EngineKind, InvalidInput> {
    ALL.iter().copied().find(|e| e.name() == name).ok_or_else(|| {
        let known: Vec<_> = ALL.iter().map(|e| e.name()).collect();
        InvalidInput::Config(format!("unknown engine {name:?} (known: {})", known.join(", ")))
    })
}

/// An engine's place in [`ALL`] (for listing engines in registration order).
pub fn position(engine: EngineKind) -> usize {
    ALL.iter().position(|e| *e == engine).unwrap_or(ALL.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_is_found_by_its_name_and_names_are_unique() {
        for (i, e) in ALL.iter().enumerate() {
            assert_eq!(by_name(e.name()).unwrap(), *e);
            assert_eq!(position(*e), i);
        }
        let err = by_name("no-such-engine").unwrap_err().to_string();
        assert!(err.contains("unknown engine") && err.contains("acid"), "{err}");
    }

    /// What an engine declares ([`litmus_protocol::engine::Capabilities`]) and the optional
    /// traits its coordinator half has ([`litmus_protocol::capability`]) agree: the
    /// coordinator hands one-round plans only to an engine that declares them, and BASE
    /// procedures run as BASE transactions only where the engine can take them.
    #[test]
    fn declared_capabilities_match_the_capability_traits() {
        for e in ALL {
            let caps = e.capabilities();
            let mut coord = e.coordinator();
            assert_eq!(caps.one_round, coord.one_round_transactions().is_some(), "{e}: one-round");
            if caps.base_transactions {
                assert!(coord.base_transactions().is_some(), "{e}: declares BASE transactions");
            }
        }
    }
}
