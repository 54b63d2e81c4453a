//! # `basic` — BASIC's Timestamp-based Formula Protocol (TFP, Wu, Yuan, You; §IV)
//!
//! The unit is an atomic *multi-partition operation*: one read or one write of several columns
//! of one item, the columns spread over partitions (`basic-ycsb` keeps each partition's column
//! group of an item as a row keyed `(group, item)`). Here it is a transaction of the core: every
//! operation a procedure issues between `begin` and `commit` runs under one timestamp.
//!
//! ## Rules as implemented (§IV-B)
//!
//! * **Timestamps.** `TS(op)` is taken at `begin` from a hybrid clock at the coordinator
//!   (`max(now µs, last + 1)`, the node in the low [`TS_NODE_BITS`] bits): unique and increasing;
//!   raised past every bound a partition reports (a revocation, a folded item, a newer write);
//!   a logged floor keeps it increasing across restarts. Coordinators' clocks are not
//!   synchronized (skew; a restarted coordinator resumes at its floor, up to
//!   [`CLOCK_FLOOR_STEP_US`] ahead): timestamp order alone is not real-time order (see R).
//! * **Per item per partition** ([`item::Item`]): `lrt(x, P)` and `list(x, P)`, the update
//!   formulas in timestamp order: the core's [`litmus_core::Formula`]s (assign, add, multiply,
//!   …) for updates, a whole-row image for writes and deletes (§IV-A logical formula caching).
//! * **R** ([`item::Item::read`]): the stored value with every older formula applied in order;
//!   older formulas not yet forced or revoked get a `read_by` fact and the read waits for them
//!   (a parked read); a revoked formula is removed before the read returns; `lrt` is raised
//!   (at arrival, so a write below it that arrives while the read waits is refused).
//!   *Real-time order*: a read that arrives when the item already holds a formula of another
//!   write above `TS(R)`, pending or forced, or a stored version above it, is answered `TooOld`
//!   with that bound and runs again above it (an insert's read of the key's absence likewise
//!   revokes it): that write may have been acknowledged before the read began — a coordinator
//!   acknowledges once its decision is logged, before FORCE-WRITE arrives (or after a lost one
//!   is resent) — and a coordinator whose clock is behind gave the read a smaller timestamp.
//!   The coordinator reruns the refused read under a new timestamp when nothing was answered or
//!   placed at the old one (as V retries a write-only operation); otherwise the operation fails
//!   retryably.
//!   *Range reads*: R on each key of the range, in key order, that the store (deleted keys
//!   included) or a list holds: a key has a row at `TS(R)` when its newest stored version at or
//!   below `TS(R)`, with the older formulas applied, is one — whatever its newer versions say (a
//!   row deleted above `TS(R)` is in the snapshot, one deleted below it is not); the limit
//!   counts only keys with a row, and any key read refuses the whole scan (`TooOld`) or makes it
//!   wait as a point read of it would.
//! * **W1** ([`item::Item::w1_revokes`]): `TS(W) < lrt(x, P)` revokes the write.
//! * **W2** ([`item::Item::place`]): otherwise the formula is added to the list in timestamp
//!   order (logged before the PREPARE answer leaves).
//! * **V**: one revoked part revokes the operation on every partition in `P(op)`, formulas and
//!   facts dropped; a write-only operation is retried under a new timestamp (a new attempt
//!   [`messages::WriteId`]) up to [`RETRIES_MAX`] times; one that also read fails retryably
//!   (its reads were at the old timestamp) and the client retries it.
//! * **F**: with every part placed, the coordinator logs the decision and sends FORCE-WRITE to
//!   `P(op)`; each partition marks the formulas forced and folds the forced *prefix* of the
//!   list into stored versions, one per formula at its timestamp (a logged `Fold`); parked
//!   reads resume.
//! * **Dynamic timestamp ordering (§IV-C)**: a later write is force-written without waiting for
//!   an earlier pending one (Table IV's `b` before `a`): it takes effect for every read above it
//!   at once, and waits in the list behind the pending one only to be folded, so no write ever
//!   waits for another and replicas fold in timestamp order (Example 3 cannot diverge).
//! * **`read_b4` (W2 b)** is subsumed: a read that arrived (and waits) before a newer formula
//!   was placed still sees the value without it once it is forced (the stored versions are kept
//!   per timestamp), so the write need not wait for older reads to finish.
//! * **Partition independence**: an operation sends messages only to the partitions it touches;
//!   partitions talk to each other only about an operation they share (§IV-D queries).
//! * **§IV-D timeouts**: a partition asked about an operation it never prepared discards it (a
//!   tombstone refuses a late PREPARE); a prepared partition with no FORCE-WRITE / REVOKE after
//!   [`IN_DOUBT_AFTER`] asks the coordinator and the peers named in the PREPARE (any forced
//!   peer → force; any revoked / never-prepared peer → revoke); the coordinator aborts
//!   unilaterally when PREPARE replies time out ([`PREPARE_TIMEOUT`]) and answers a query about
//!   an operation it has no decision for with "revoked" (decisions are logged before any
//!   FORCE-WRITE leaves, so none is lost). Reads never wait for a failed write longer than that.
//! * **Formula-list GC**: lists hold only pending formulas and forced ones behind a pending
//!   one; a fold prunes stored versions more than [`FOLD_LAG_US`] older than the newest (a read
//!   older than every version kept is answered `TooOld` and runs again under a new timestamp);
//!   items with an empty list and an old `lrt` are forgotten (raising a partition-wide W1 floor).
//!   W1 also revokes a write at or below the item's newest stored version. A deleted key whose
//!   deletion is behind that horizon too leaves the store with its item (a logged `Forget`):
//!   the W1 floor and a read floor rise to the deletion's timestamp, so no write lands below
//!   it and no read below it is answered "no row" for a key that had one then (it gets `TooOld`
//!   and runs again above). Without it every deleted key stayed a tombstone for good, and range
//!   reads, which walk deleted keys, walked more of them each time (TPC-C's Delivery).
//!
//! ## Guarantee
//!
//! Every read sees exactly the operations with smaller timestamps (instant consistency: a
//! consistent snapshot), and a transaction's reads and writes are serializable in timestamp
//! order (multiversion timestamp ordering with formulas): declared as `AnsiLevels`, serializable
//! at every level. Whatever the clocks' skew, a read that begins after a write was acknowledged
//! sees it (R's real-time order), and a write that begins after a read answered is placed above
//! it (W1). Range reads raise a per-table `lrt` (no phantoms). After a partition restarts
//! its per-item `lrt`s are replaced by a logged floor above every read it answered.
//!
//! ## Not implemented (yet)
//!
//! * §IV's total-order multicast to replicas: a partition's replicas are a raft group of the
//!   runtime instead (`docs/replication.md`), which orders its log the same way.
//! * `read_b4` as a stored fact that delays FORCE-WRITE (subsumed; see above).
//!
//! Coordinator failover (§IV-D's Paxos remark) is the runtime's: with `replicas > 1` a
//! coordinator's log is kept by its own raft group, and a new leader restarts it from that log
//! (it resends its logged decisions and presumes every undecided operation revoked).
//! * More than 256 coordinator nodes (the node takes the low 8 bits of a timestamp).

pub mod coordinator;
pub mod item;
pub mod messages;
pub mod partition;
#[cfg(test)]
mod tests;

use litmus_core::Timestamp;
use litmus_protocol::engine::{Capabilities, CoordinatorEngine, EngineDef, Guarantee, PartitionEngine};
use std::time::Duration;

/// Low bits of a timestamp holding the coordinator's node.
pub const TS_NODE_BITS: u32 = 8;
/// Stored versions this far (logical µs) older than an item's newest are pruned (older reads retry).
pub const FOLD_LAG_US: u64 = 20_000;
/// A logged read floor runs this far (logical µs) ahead of the read that logged it.
pub const LRT_FLOOR_STEP_US: u64 = 100_000;
/// The coordinator's logged clock floor runs this far (µs) ahead.
pub const CLOCK_FLOOR_STEP_US: u64 = 1_000_000;
/// A prepared partition without FORCE-WRITE / REVOKE asks for the outcome after this.
pub const IN_DOUBT_AFTER: Duration = Duration::from_millis(300);
/// The coordinator resends an unanswered request after this.
pub const RESEND_AFTER: Duration = Duration::from_millis(200);
/// The coordinator aborts an operation whose PREPARE replies are missing after this.
pub const PREPARE_TIMEOUT: Duration = Duration::from_millis(1_000);
/// Attempts of a write-only operation under new timestamps before it fails (retryably).
pub const RETRIES_MAX: u32 = 8;

/// `ts` plus `us` logical microseconds.
pub fn ts_plus_micros(ts: Timestamp, us: u64) -> Timestamp {
    Timestamp(ts.0.saturating_add(us << TS_NODE_BITS))
}

/// The registered engine `basic`.
#[derive(Clone, Copy, Debug)]
pub struct BasicEngine;

impl EngineDef for BasicEngine {
    fn name(&self) -> &'static str {
        "basic"
    }
    fn guarantee(&self) -> &'static str {
        "instant consistency (BASIC TFP): every operation reads a consistent snapshot; serializable in timestamp order"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            guarantee: Guarantee::AnsiLevels,
            base_transactions: false,
            one_round: false,
            interactive: true,
            batches: false,
            reads_for_update: false,
        }
    }
    fn coordinator(&self) -> Box<dyn CoordinatorEngine> {
        Box::new(coordinator::BasicCoordinator::default())
    }
    fn partition(&self) -> Box<dyn PartitionEngine> {
        Box::new(partition::BasicPartition::default())
    }
}

/// BASIC's Timestamp-based Formula Protocol: instant consistency.
pub const BASIC: litmus_protocol::EngineKind = litmus_protocol::EngineKind(&BasicEngine);
