//! Optional capabilities of a coordinator engine.
//!
//! [`CoordinatorEngine`](crate::engine::CoordinatorEngine) holds what every engine does: begin,
//! issue, commit, abort, replies, ticks, and its log. What only some engines do sits here, one
//! trait per capability, reached through an accessor on the engine that answers `None` by
//! default. Each trait's doc says what the coordinator does for an engine without it, so an
//! engine implements only what it has, and a new capability is a trait here plus the
//! coordinator's use of it — no engine that lacks it changes.
//!
//! | capability | accessor | engines | without it |
//! | --- | --- | --- | --- |
//! | [`BaseTransactions`] | `base_transactions` | acid, salt, salt-local | control points accepted at once; unit ops are plain ops; nothing rolls forward |
//! | [`OneRoundTransactions`] | `one_round_transactions` | granola family, nocc, base | fragments run op by op |
//! | [`RoleTraffic`] | `role_traffic` | omid | role messages dropped |
//! | [`GroupedIssue`] | `grouped_issue` | coordfree | nothing |

use crate::engine::CoordCtx;
use crate::fragment::OneRoundPlan;
use crate::message::{Addr, Payload, SubOpId};
use crate::op::PartOp;
use crate::procedure::Control;
use litmus_core::{Error, TxnId, Value};

/// Salt's BASE transactions (Salt §4–§6): a procedure's control points (the boundaries of its
/// alkaline subtransactions), operations that are a unit of atomicity by themselves, and
/// roll-forward after a crash. The engine answers with [`BaseEvent`]s through the
/// [`CoordCtx`] (`control_done`, `early_commit`, `rerun`).
///
/// Without it, the coordinator accepts every control point at once, issues a unit operation
/// as a plain one, and rolls nothing forward: a BASE procedure runs as one ACID transaction.
pub trait BaseTransactions {
    /// A procedure's control point: answer [`BaseEvent::ControlDone`] (possibly later).
    fn control(&mut self, txn: TxnId, op: u32, control: Control, ctx: &mut CoordCtx);
    /// An operation that is a unit of atomicity by itself ([`crate::Ctx::alkaline_op`]): the
    /// engine may commit it at the partition in the same message.
    fn issue_unit(&mut self, id: SubOpId, op: PartOp, ctx: &mut CoordCtx);
    /// After `apply` has replayed the log: transactions to finish by re-running their
    /// procedure (Salt's roll-forward, §6.2), as (id, procedure, arguments), under their old ids.
    fn take_reruns(&mut self) -> Vec<(TxnId, String, Vec<Value>)>;
    /// Whether the transaction is accepted (Salt §6.1: its commit is decided though it is not
    /// finished). An accepted transaction runs to its end, however long a partition stays out
    /// of reach: the front end never abandons it as stalled (aborting it would end it with
    /// some of its subtransactions applied and the rest never run).
    fn accepted(&self, txn: TxnId) -> bool;
}

/// What a [`BaseTransactions`] engine tells its coordinator.
#[derive(Debug)]
pub enum BaseEvent {
    /// A control point of a procedure (e.g. the end of an alkaline subtransaction) finished.
    ControlDone { txn: TxnId, op: u32, result: Result<(), Error> },
    /// The transaction's commit is decided though it is not finished (Salt's early commit,
    /// §6.1): answer the client now; the transaction goes on and will commit.
    EarlyCommit { txn: TxnId },
    /// Re-run the transaction's procedure from the start: the engine serves operations it has
    /// already completed from its own state (Salt's roll-forward, §6.2, and its retry of an
    /// early-committed transaction's step that concurrency control aborted).
    Rerun { txn: TxnId },
}

/// One-round transactions taken whole (Granola §2; see [`crate::fragment`]): fragments,
/// operations and commit travel together, and the engine answers
/// [`Event::OneRoundDone`](crate::engine::Event::OneRoundDone). `begin` was called first.
///
/// Without it, the coordinator runs a one-round procedure's fragments op by op, as an
/// ordinary procedure.
pub trait OneRoundTransactions {
    fn one_round(&mut self, txn: TxnId, plan: OneRoundPlan, ctx: &mut CoordCtx);
}

/// Engine-defined traffic from one of the engine's roles ([`crate::Message::Role`]), such as
/// Omid's status oracle. Without it, such messages are dropped.
pub trait RoleTraffic {
    fn on_role_message(&mut self, from: Addr, msg: Payload, ctx: &mut CoordCtx);
}

/// Operations grouped by what a transaction issued together: the transaction issued every
/// operation it will issue before it hears back (a procedure's poll, or an interactive
/// client's op), so an engine that batches what is outstanding closes the batch here
/// (coordfree's read batches, RAMP's `GET_ALL`). Without it, nothing happens.
pub trait GroupedIssue {
    fn issued_all(&mut self, txn: TxnId, ctx: &mut CoordCtx);
}
