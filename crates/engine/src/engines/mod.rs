//! Concurrency-control engines, one module each, and the one registry that lists them.
//!
//! Adding an engine: write its module (an [`EngineDef`] and its two halves; its rules in the
//! module doc), then add one line to [`EngineKind::ALL`] below. Nothing else names it: the
//! roles, runtimes, CLI, benchmarks and the conformance suite all go through the registry.

#![allow(non_upper_case_globals)] // the handles read like the enum they replaced: EngineKind::Acid

use crate::engine::EngineKind;

pub mod base;
pub mod basic;
pub mod coordfree;
pub mod granola;
pub mod locking;
pub mod nocc;
pub mod omid;

impl EngineKind {
    /// Every registered engine, in the order `--help` lists them.
    pub const ALL: &'static [EngineKind] = &[
        EngineKind::Nocc,
        EngineKind::Acid,
        EngineKind::Salt,
        EngineKind::SaltLocal,
        EngineKind::Omid,
        EngineKind::Granola,
        EngineKind::Basic,
        EngineKind::Base,
        EngineKind::Coordfree,
        EngineKind::GranolaLocking,
        EngineKind::Sinfonia,
    ];

    /// No concurrency control (UNSAFE): the throughput upper bound. See [`nocc`].
    pub const Nocc: EngineKind = EngineKind(&nocc::NoccEngine::NOCC);
    /// Strict 2PL + 2PC at the four ANSI levels; BASE procedures run as ACID. See [`locking`].
    pub const Acid: EngineKind = EngineKind(&locking::LockingEngine::ACID);
    /// ACID plus Salt BASE transactions (alkaline/saline locks, early commit, roll-forward).
    pub const Salt: EngineKind = EngineKind(&locking::LockingEngine::SALT);
    /// Salt with the local-transaction optimization (Salt §6.4).
    pub const SaltLocal: EngineKind = EngineKind(&locking::LockingEngine::SALT_LOCAL);
    /// Snapshot isolation through a status oracle (Omid ICDE'14). See [`omid`].
    pub const Omid: EngineKind = EngineKind(&omid::OmidEngine);
    /// Serializable one-round transactions by timestamp voting (Granola ATC'12). See [`granola`].
    pub const Granola: EngineKind = EngineKind(&granola::GranolaEngine::TIMESTAMP);
    /// BASIC's Timestamp-based Formula Protocol: instant consistency. See [`basic`].
    pub const Basic: EngineKind = EngineKind(&basic::BasicEngine);
    /// The same operations BASE-style (apply on arrival), BASIC's comparison point. See [`base`].
    pub const Base: EngineKind = EngineKind(&nocc::NoccEngine::BASE);
    /// Coordination-free: read atomic (RAMP-Fast), refuses what needs coordination (VLDB'15).
    pub const Coordfree: EngineKind = EngineKind(&coordfree::CoordfreeEngine);
    /// Granola always in locking mode (the paper's "Granola (locking)" baseline). See [`granola`].
    pub const GranolaLocking: EngineKind = EngineKind(&granola::GranolaEngine::LOCKING);
    /// Lock-based two-phase commit of one-round transactions through one coordinator node
    /// (Sinfonia, Granola §6's baseline). See [`granola::relay`].
    pub const Sinfonia: EngineKind = EngineKind(&granola::GranolaEngine::SINFONIA);
}
