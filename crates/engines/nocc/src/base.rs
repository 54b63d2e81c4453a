//! # `base` — the same operations BASE-style (BASIC §V's RubatoDB-with-BASE)
//!
//! The comparison point of `basic`: each partition applies its part of an operation the moment
//! it arrives — formulas folded into the row at once, no timestamps, no second round — so a
//! multi-partition read can see one part of a write and not another (Tables II and III: soft
//! state), and non-commutative formulas reaching replicas in different orders leave them
//! diverged (Example 3). What it keeps, like every engine: bad input rejected before anything is
//! sent, every single part atomic and durable (logged before it is acknowledged).
//!
//! It runs the `nocc` halves ([`crate::NoccEngine::BASE`]): "apply on arrival" *is* that machinery; `base`
//! is its own name so reports, the `basic-ycsb` inconsistency ratio and `--compare base,basic`
//! say what is compared. Guarantee: none across partitions (eventual consistency once writes
//! stop, for commutative formulas only).
//!
//! Not implemented: RubatoDB's replication and its asynchronous propagation (one copy per
//! partition here, as everywhere until replica groups land).
