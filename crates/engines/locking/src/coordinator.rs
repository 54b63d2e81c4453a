//! The coordinator half of the locking engine: units, 2PC, BASE acceptance and roll-forward.
//! See the module doc of [`super`] for the protocol.

use super::lock::RemoteDep;
use super::{CoordinatorRecord, LockingConfig, Reply, Request, TxnClass, Unit, WriteImage};
use litmus_core::{AbortReason, Error, PartitionId, Time, TxnId, Value};
use litmus_protocol::engine::{BaseTransactions, CoordCtx, CoordinatorEngine, TxnOptions};
use litmus_protocol::message::{Addr, Payload, SubOpId};
use litmus_protocol::op::{PartOp, PartResult};
use litmus_protocol::procedure::Control;
use rand::Rng;
use serde::ser::{SerializeStructVariant, Serializer};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

mod replies;

/// Marks a recovered transaction whose run number is assigned at its first operation.
const ATTEMPT_UNSET: u32 = u32::MAX;

/// First backoff before re-running an accepted BASE transaction, in microseconds; it doubles
/// with every retry up to `RETRY_BACKOFF_DOUBLINGS_MAX` times.
pub const RETRY_BACKOFF_BASE_US: u64 = 200;
pub const RETRY_BACKOFF_DOUBLINGS_MAX: u32 = 6;

/// An accepted BASE transaction waiting this long for an operation's reply is re-run.
pub const BASE_OP_TIMEOUT: Duration = Duration::from_millis(300);

/// Most accepted BASE transactions a coordinator answers early (Salt §6.1) while they still
/// run; beyond it clients are answered when the transaction ends. Without a bound, clients
/// answered at acceptance pile up background work faster than contended rows can absorb it.
pub const BASE_BACKGROUND_MAX: usize = 64;

/// How often a coordinator repeats its epoch to every partition.
pub const EPOCH_ANNOUNCE_INTERVAL: Duration = Duration::from_secs(1);

/// How often undelivered commit decisions are sent again.
pub const RESEND_INTERVAL: Duration = Duration::from_millis(50);

/// An operation unanswered this long is sent again (`Request::Op::resent`). A lost request
/// would otherwise leave its transaction waiting for the coordinator's 10 s stall timeout, and
/// a simulated TPC-C load, whose batches send hundreds of messages over a lossy network, would
/// never finish (`litmus sim --seed 20001 --engine acid --workload tpcc-neworder --faults`).
pub const OP_RESEND_AFTER: Duration = Duration::from_millis(100);
/// LK-7: how long this coordinator vouches for a running ACID transaction it has heard
/// nothing about (no operation reply: its client sends nothing), when a participant asks
/// (`Reply::QueryIdle`). Past it the transaction loses its unprepared work where it is idle,
/// and fails at its next operation or commit: a bound on how long a forgotten interactive
/// transaction holds its locks (PostgreSQL's `idle_in_transaction_session_timeout`, fixed here).
pub const IDLE_TRANSACTION_MAX: Duration = Duration::from_secs(60);

/// An operation sent and not yet answered.
#[derive(Debug)]
struct InFlight {
    /// It is a whole alkaline subtransaction.
    single: bool,
    /// When it was last sent.
    sent: Time,
    /// The request, to send again after [`OP_RESEND_AFTER`]. Boxed: `in_flight` is a B-tree
    /// whose inserts and removes shift entries, and a `Request` is ~200 bytes.
    req: Box<Request>,
}

/// What to do once the unit in progress has committed (or failed to).
#[derive(Debug, Clone)]
enum Then {
    /// Answer a procedure's control point (`end_alkaline`, or `begin_alkaline` that had to
    /// close an implicit subtransaction first).
    Control { op: u32, open_explicit: bool },
    /// Answer a single-operation alkaline subtransaction with its result.
    AlkalineOp { id: SubOpId, result: PartResult },
    /// The procedure finished: commit the transaction.
    Finish,
}

#[derive(Debug)]
enum Phase {
    Running,
    Preparing { waiting: BTreeSet<PartitionId>, then: Then },
    Committing { waiting: BTreeSet<PartitionId>, then: Then },
}

#[derive(Debug)]
struct CTxn {
    class: TxnClass,
    /// Runs as a BASE transaction (engine allows it and the procedure declares it).
    base: bool,
    procedure: Option<(String, Vec<Value>)>,
    attempt: u32,
    /// Current unit: sub 0 for ACID; for BASE the number of the current/last subtransaction.
    sub: u32,
    in_sub: bool,
    unit_parts: BTreeSet<PartitionId>,
    /// Operations of the unit in progress sent to each participant. `Prepare` and a one-phase
    /// `Commit` carry the count: a participant that restarted in between received fewer of
    /// them in its current incarnation and refuses (see `PTxn::ops`).
    unit_ops: BTreeMap<PartitionId, u32>,
    unit_writes: BTreeMap<PartitionId, Vec<WriteImage>>,
    unit_results: Vec<(SubOpId, PartResult)>,
    /// The first error an operation of this unit hit (an exception of the subtransaction).
    unit_error: Option<Error>,
    /// Every partition a BASE transaction touched (to end it there).
    all_parts: BTreeSet<PartitionId>,
    /// Ops in flight.
    in_flight: BTreeMap<SubOpId, InFlight>,
    /// Salt §6.2 context table: results of operations of decided subtransactions.
    context: BTreeMap<SubOpId, PartResult>,
    decided_subs: u32,
    logic_logged: bool,
    /// An ACID transaction's two-phase decision is on the log: its answer waits for it.
    decision_logged: bool,
    accepted: bool,
    phase: Phase,
    /// A re-run waiting out its backoff (after concurrency control aborted a subtransaction).
    retry_at: Option<Time>,
    retries: u32,
    /// Wounded while idle (LK-5b): its next operation and its commit fail.
    wounded: bool,
    /// The client was answered at acceptance (counted in `background`).
    answered_early: bool,
    /// Last reply received (an accepted BASE transaction whose operations go unanswered — a
    /// lost message, a crashed partition — is re-run after `BASE_OP_TIMEOUT`).
    last_progress: Time,
    /// LK-6b across partitions: per partition, the largest grant number of this BASE
    /// transaction's reads there that depended on an unfinished BASE write when answered
    /// (`Reply::Op::read_taint`). Every later write on another partition waits for them
    /// (`Request::Op::after`). Only grows: reads of rolled-back runs count too (a procedure
    /// can carry what they read into a compensating subtransaction).
    read_taint: BTreeMap<PartitionId, u64>,
    /// Per partition, the incarnation that answered an operation of the unit in progress, with
    /// the run and unit it belongs to (`Request::Op::incarnation`; stale once either moves on).
    incarnations: BTreeMap<PartitionId, (u32, Unit, u64)>,
    /// A roll-forward after our restart that has not yet rolled back, everywhere, the
    /// subtransaction the dead incarnation left in progress (see `send_op`).
    purge_stale: bool,
}

impl CTxn {
    fn new(class: TxnClass, procedure: Option<(String, Vec<Value>)>, attempt: u32, now: Time) -> Self {
        CTxn {
            class,
            base: class.base,
            procedure,
            attempt,
            sub: 0,
            in_sub: false,
            unit_parts: BTreeSet::new(),
            unit_ops: BTreeMap::new(),
            unit_writes: BTreeMap::new(),
            unit_results: Vec::new(),
            unit_error: None,
            all_parts: BTreeSet::new(),
            in_flight: BTreeMap::new(),
            context: BTreeMap::new(),
            decided_subs: 0,
            logic_logged: false,
            decision_logged: false,
            accepted: false,
            phase: Phase::Running,
            retry_at: None,
            retries: 0,
            wounded: false,
            answered_early: false,
            last_progress: now,
            read_taint: BTreeMap::new(),
            incarnations: BTreeMap::new(),
            purge_stale: false,
        }
    }
}

/// [`CoordinatorRecord::Decided`] serialized from the coordinator's own state, byte for byte the
/// record it stands for (postcard writes an enum variant as its index and then its fields in
/// order, a sequence as its length and elements, and a reference as what it points to;
/// `compaction_tests::decided_ref_encodes_as_the_decided_record` pins it). Every BASE
/// subtransaction logs a decision with its writes and the results of its operations (the
/// context table, Salt §6.2): building the record first copied both, and the pending decision
/// copied the writes again.
struct DecidedRef<'a> {
    unit: Unit,
    /// Every participant, in order; one without writes is listed with none.
    parts: &'a BTreeSet<PartitionId>,
    writes: &'a BTreeMap<PartitionId, Vec<WriteImage>>,
    results: &'a [(SubOpId, PartResult)],
    taint: &'a BTreeMap<PartitionId, u64>,
}

/// `CoordinatorRecord::Decided`'s variant index (its place in the enum).
const DECIDED_VARIANT: u32 = 1;

impl Serialize for DecidedRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Writes<'b>(&'b DecidedRef<'b>);
        impl Serialize for Writes<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let d = self.0;
                s.collect_seq(d.parts.iter().map(|p| (p, d.writes.get(p).map_or(&[][..], Vec::as_slice))))
            }
        }
        struct Taint<'b>(&'b BTreeMap<PartitionId, u64>);
        impl Serialize for Taint<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.0.iter())
            }
        }
        let mut v = s.serialize_struct_variant("CoordinatorRecord", DECIDED_VARIANT, "Decided", 4)?;
        v.serialize_field("unit", &self.unit)?;
        v.serialize_field("writes", &Writes(self))?;
        v.serialize_field("results", self.results)?;
        v.serialize_field("taint", &Taint(self.taint))?;
        v.end()
    }
}

/// A logged commit decision not yet acknowledged by every participant.
#[derive(Debug)]
struct Pending {
    waiting: BTreeSet<PartitionId>,
    writes: BTreeMap<PartitionId, Vec<WriteImage>>,
    /// The run that decided it (`None`: read back from the log after a restart). A BASE run
    /// goes on past its own undelivered decisions (the partitions order its operations after
    /// them, see `partition::LockingPartition::after_undecided_sub`), never past another
    /// run's (see `send_op`).
    attempt: Option<u32>,
}

pub struct LockingCoordinator {
    cfg: LockingConfig,
    txns: BTreeMap<TxnId, CTxn>,
    decisions: BTreeMap<Unit, Pending>,
    /// BASE transactions whose `EndBase` is not yet acknowledged everywhere.
    ending: BTreeMap<TxnId, BTreeSet<PartitionId>>,
    /// Rolled-back BASE subtransactions whose `Abort` a participant has not acknowledged, with
    /// the run it belonged to: resent every `RESEND_INTERVAL` (a lost one leaves the
    /// subtransaction's alkaline locks in place until the transaction's next operation reaches
    /// that partition — two accepted transactions deadlocked across partitions that way).
    aborts: BTreeMap<(Unit, PartitionId), u32>,
    /// Those of them whose logic is logged (their end is logged once acknowledged).
    logged_ending: BTreeSet<TxnId>,
    /// Accepted BASE transactions answered early and still running.
    background: usize,
    /// Recovered BASE transactions to roll forward.
    recovered: Vec<(TxnId, String, Vec<Value>)>,
    epoch_announced: bool,
    last_announce: Time,
    last_resend: Time,
    next_age: u64,
}

impl LockingCoordinator {
    pub fn new(cfg: LockingConfig) -> Self {
        LockingCoordinator {
            cfg,
            txns: BTreeMap::new(),
            decisions: BTreeMap::new(),
            ending: BTreeMap::new(),
            aborts: BTreeMap::new(),
            logged_ending: BTreeSet::new(),
            background: 0,
            recovered: Vec::new(),
            epoch_announced: false,
            last_announce: Time::ZERO,
            last_resend: Time::ZERO,
            next_age: 0,
        }
    }

    /// Logs a record (a [`CoordinatorRecord`], or [`DecidedRef`] for one), in a buffer of its
    /// exact size.
    fn persist(ctx: &mut CoordCtx, record: &impl Serialize) {
        ctx.persist(litmus_protocol::payload::encode_exact(record));
    }

    /// Tells every partition this coordinator's epoch, so they drop unprepared work of its
    /// earlier incarnations.
    fn announce_epoch(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        // Once at start, then every EPOCH_ANNOUNCE_INTERVAL (the message may be lost).
        if self.epoch_announced && ctx.now.saturating_sub(self.last_announce) < EPOCH_ANNOUNCE_INTERVAL {
            return;
        }
        self.epoch_announced = true;
        self.last_announce = ctx.now;
        for p in 0..ctx.partitions {
            // It depends only on the epoch record, a barrier: it leaves with the operations.
            ctx.send_to_partition_now(PartitionId(p), Request::Epoch { node: txn.node, epoch: txn.epoch });
        }
    }

    fn unit(txn: TxnId, t: &CTxn) -> Unit {
        Unit { txn, sub: if t.base { t.sub } else { 0 } }
    }

    /// Opens a subtransaction of a BASE transaction if none is open.
    fn open_sub(t: &mut CTxn) {
        if t.base && !t.in_sub {
            t.sub += 1;
            t.in_sub = true;
            t.unit_parts.clear();
            t.unit_ops.clear();
            t.unit_writes.clear();
            t.unit_results.clear();
            t.unit_error = None;
        }
    }

    /// Sends an operation; `single`: it is a whole alkaline subtransaction.
    fn send_op(&mut self, id: SubOpId, op: PartOp, single: bool, ctx: &mut CoordCtx) {
        let local_commit = single && self.cfg.local;
        let t = self.txns.get_mut(&id.txn).expect("live txn");
        if t.attempt == ATTEMPT_UNSET {
            // A rolled-forward transaction: a run number above any before the restart.
            t.attempt = (ctx.epoch << 16) | 0x8000;
            t.purge_stale = true;
        }
        let unit = Self::unit(id.txn, t);
        if t.base && unit.sub <= t.decided_subs {
            // Roll-forward: this operation belongs to a decided subtransaction.
            let result = t.context.get(&id).cloned().ok_or_else(|| {
                Error::Internal(format!(
                    "{}: op {} of decided sub {} missing from the context table",
                    id.txn, id.op, unit.sub
                ))
            });
            if single {
                t.in_sub = false;
            }
            return ctx.op_done(id, result);
        }
        let first = Unit { txn: id.txn, sub: 0 };
        let undelivered = self
            .decisions
            .range(first..)
            .take_while(|(u, _)| u.txn == id.txn)
            .any(|(_, p)| p.attempt != Some(t.attempt));
        if t.base && t.accepted && undelivered {
            // A rolled-forward run got past a subtransaction whose commit (decided before the
            // crash) is still being re-sent. Its row images are right only while its locks
            // are alkaline; committing a later subtransaction first would downgrade them to
            // saline and let other BASE transactions write in between. Run again once it is
            // delivered.
            return self.retry_accepted(id.txn, ctx);
        }
        let t = self.txns.get_mut(&id.txn).expect("live txn");
        if std::mem::take(&mut t.purge_stale) {
            // The dead incarnation's run may have left an undecided subtransaction (the one
            // after the last decided) holding alkaline locks on partitions this run may never
            // reach — it can block first on another transaction that waits for those locks (a
            // deadlock between two accepted transactions, `litmus sim --workload salt-chains
            // --faults`, seed 1182). Roll it back everywhere, reliably. Safe now: every decision
            // of the earlier runs has been delivered (checked above), so no alkaline lock a
            // decided subtransaction's images need is released.
            let stale = Unit { txn: id.txn, sub: t.decided_subs + 1 };
            let attempt = t.attempt - 1;
            for p in 0..ctx.partitions {
                let part = PartitionId(p);
                ctx.send_to_partition(part, Request::Abort { unit: stale, attempt });
                self.aborts.insert((stale, part), attempt);
            }
        }
        let t = self.txns.get_mut(&id.txn).expect("live txn");
        t.unit_parts.insert(id.part);
        *t.unit_ops.entry(id.part).or_default() += 1;
        if t.base {
            t.all_parts.insert(id.part);
        }
        // LK-6b across partitions: a write waits for the earlier tainted reads elsewhere (on
        // its own partition the lock manager sees them).
        let after = if t.base && op.kind.is_write() {
            t.read_taint.iter().filter(|(p, _)| **p != id.part).map(|(p, g)| RemoteDep { part: *p, upto: *g }).collect()
        } else {
            Vec::new()
        };
        let incarnation = Self::incarnation_of(t, id.part, unit);
        t.class = t.class.with_op(&op.kind);
        let r = Request::Op {
            id,
            unit,
            attempt: t.attempt,
            class: t.class,
            op,
            local_commit,
            after,
            resent: false,
            incarnation,
        };
        t.in_flight.insert(id, InFlight { single, sent: ctx.now, req: Box::new(r.clone()) });
        if t.logic_logged {
            ctx.send_to_partition(id.part, r);
        } else {
            // Nothing of this transaction is on our log: the operation need not wait for
            // other transactions' records to be synced.
            ctx.send_to_partition_now(id.part, r);
        }
    }

    /// The incarnation of `part` that answered an earlier operation of `unit` in this run.
    fn incarnation_of(t: &CTxn, part: PartitionId, unit: Unit) -> Option<u64> {
        t.incarnations.get(&part).filter(|(a, u, _)| *a == t.attempt && *u == unit).map(|(_, _, i)| *i)
    }

    fn log_logic(txn: TxnId, t: &mut CTxn, ctx: &mut CoordCtx) {
        if t.logic_logged {
            return;
        }
        t.logic_logged = true;
        let (procedure, args) = t.procedure.clone().expect("BASE transactions run procedures");
        let r = CoordinatorRecord::BaseLogic { txn, procedure, args, age: t.class.age, isolation: t.class.isolation };
        Self::persist(ctx, &r);
    }

    /// Commits the unit in progress, then does `then`.
    fn commit_unit(&mut self, txn: TxnId, then: Then, ctx: &mut CoordCtx) {
        let t = self.txns.get_mut(&txn).expect("live txn");
        let unit = Self::unit(txn, t);
        if let Some(e) = t.unit_error.clone().filter(|_| t.base) {
            // An exception inside the subtransaction: roll it back, surface the error.
            return self.abort_unit(txn, then, e, ctx);
        }
        if t.base {
            Self::log_logic(txn, t, ctx);
        }
        let parts: BTreeSet<PartitionId> = t.unit_parts.clone();
        if parts.is_empty() {
            return self.unit_committed(txn, then, ctx);
        }
        if parts.len() > 1 && !t.base {
            for p in &parts {
                let ops = t.unit_ops.get(p).copied().unwrap_or_default();
                // Not logged here (presumed abort): it waits for no record.
                ctx.send_to_partition_now(*p, Request::Prepare { unit, ops });
            }
            t.phase = Phase::Preparing { waiting: parts, then };
            return;
        }
        self.decide(txn, then, ctx);
    }

    /// Logs the commit decision (2PC, or any BASE subtransaction) and sends the commits.
    fn decide(&mut self, txn: TxnId, then: Then, ctx: &mut CoordCtx) {
        let t = self.txns.get_mut(&txn).expect("live txn");
        let unit = Self::unit(txn, t);
        let parts = t.unit_parts.clone();
        let logged = t.base || parts.len() > 1;
        if logged {
            t.decision_logged = true;
            // Every participant is listed, read-only ones with no writes: on replay the list is
            // who must still acknowledge (a missing one would never be sent the commit again).
            let results = if t.base { t.unit_results.as_slice() } else { &[] };
            let record = DecidedRef { unit, parts: &parts, writes: &t.unit_writes, results, taint: &t.read_taint };
            Self::persist(ctx, &record);
        }
        for p in &parts {
            let writes = t.unit_writes.get(p).cloned().unwrap_or_default();
            // A one-phase commit is checked against what the participant received; a logged
            // decision is final (the participants' state for it is durable).
            let ops = (!logged).then(|| t.unit_ops.get(p).copied().unwrap_or_default());
            if logged {
                ctx.send_to_partition(*p, Request::Commit { unit, writes, ops });
            } else {
                // A one-phase commit depends on no record of ours.
                ctx.send_to_partition_now(*p, Request::Commit { unit, writes, ops });
            }
        }
        if !logged {
            t.phase = Phase::Committing { waiting: parts, then };
            return;
        }
        // Only the decision resends them from now on (`resend_unlogged` skips a logged one).
        let writes = std::mem::take(&mut t.unit_writes);
        let attempt = Some(t.attempt);
        if t.base {
            // Salt §6.1/§6.2: a subtransaction has committed once its decision is durable (the
            // context table holds its results, recovery rolls it forward). The transaction goes
            // on at once — the client's early answer and the next subtransaction leave with
            // this step's messages, after the record — instead of waiting one more log sync
            // (the participants' commit records) and a round trip for the acknowledgements.
            // A participant orders what comes after the commit behind it
            // (`partition::LockingPartition::must_wait`), and `EndBase` names the commits a
            // participant has not acknowledged (`send_end_base`). So a subtransaction costs
            // two sequential log syncs, not three.
            self.decisions.insert(unit, Pending { waiting: parts, writes, attempt });
            return self.unit_committed(txn, then, ctx);
        }
        t.phase = Phase::Committing { waiting: parts.clone(), then };
        self.decisions.insert(unit, Pending { waiting: parts, writes, attempt });
    }

    fn unit_committed(&mut self, txn: TxnId, then: Then, ctx: &mut CoordCtx) {
        let t = self.txns.get_mut(&txn).expect("live txn");
        t.phase = Phase::Running;
        if t.base {
            for (id, r) in t.unit_results.drain(..) {
                t.context.insert(id, r);
            }
            t.decided_subs = t.decided_subs.max(t.sub);
            t.in_sub = false;
            if !t.accepted {
                t.accepted = true;
                t.class.immortal = true;
                // Salt §6.1 early commit — unless too much accepted work is still running in
                // the background; then the client waits for the end (backpressure).
                if self.background < BASE_BACKGROUND_MAX {
                    self.background += 1;
                    t.answered_early = true;
                    ctx.early_commit(txn);
                }
            }
        }
        t.unit_parts.clear();
        t.unit_ops.clear();
        t.unit_writes.clear();
        self.then(txn, then, Ok(()), ctx);
    }

    fn then(&mut self, txn: TxnId, then: Then, result: Result<(), Error>, ctx: &mut CoordCtx) {
        match then {
            Then::Control { op, open_explicit } => {
                if open_explicit && result.is_ok() {
                    let t = self.txns.get_mut(&txn).expect("live txn");
                    Self::open_sub(t);
                }
                if op != u32::MAX {
                    ctx.control_done(txn, op, result);
                }
            }
            Then::AlkalineOp { id, result: r } => ctx.op_done(id, result.map(|()| r)),
            Then::Finish => self.finish(txn, result, ctx),
        }
    }

    /// Rolls back the unit in progress, then does `then` with `error`.
    fn abort_unit(&mut self, txn: TxnId, then: Then, error: Error, ctx: &mut CoordCtx) {
        let t = self.txns.get_mut(&txn).expect("live txn");
        let unit = Self::unit(txn, t);
        for p in &t.unit_parts {
            let abort = Request::Abort { unit, attempt: t.attempt };
            if t.logic_logged {
                ctx.send_to_partition(*p, abort);
            } else {
                ctx.send_to_partition_now(*p, abort);
            }
            if t.base {
                self.aborts.insert((unit, *p), t.attempt);
            }
        }
        t.unit_parts.clear();
        t.unit_ops.clear();
        t.unit_writes.clear();
        t.unit_results.clear();
        t.unit_error = None;
        t.in_sub = false;
        t.phase = Phase::Running;
        self.then(txn, then, Err(error), ctx);
    }

    /// The procedure is done and the last unit committed (or failed): end the transaction.
    fn finish(&mut self, txn: TxnId, result: Result<(), Error>, ctx: &mut CoordCtx) {
        let t = self.txns.remove(&txn).expect("live txn");
        // `EndBase` (or, for ACID, the end of the transaction) supersedes them.
        self.aborts.retain(|(u, _), _| u.txn != txn);
        if t.answered_early {
            self.background -= 1;
        }
        if t.base {
            // EndBase names the commits each partition must apply before it (a partition that
            // ended the transaction ignores later commits for it). Resent until every
            // partition acknowledges (a lost EndBase would leave its locks).
            if !t.all_parts.is_empty() {
                self.ending.insert(txn, t.all_parts.clone());
                if t.logic_logged {
                    // A restart must not run it again: partitions refuse the operations of a
                    // transaction that ended there, and a re-run could take another path.
                    let parts = t.all_parts.iter().copied().collect();
                    Self::persist(ctx, &CoordinatorRecord::BaseFinished { txn, parts });
                    self.logged_ending.insert(txn);
                }
                self.send_end_base(txn, ctx);
            } else if t.logic_logged {
                Self::persist(ctx, &CoordinatorRecord::BaseEnded { txn });
            }
            // An accepted BASE transaction has committed whatever its procedure did.
            ctx.txn_done(txn, if t.accepted { Ok(()) } else { result });
        } else if t.decision_logged {
            ctx.txn_done(txn, result);
        } else {
            // Committed in one phase by its participant (which answered once its record was
            // durable) or aborted: nothing of it is on our log.
            ctx.txn_done_unlogged(txn, result);
        }
    }

    /// Concurrency control aborted an operation of an accepted BASE transaction: roll the
    /// subtransaction back and re-run the procedure (decided subtransactions replay from the
    /// context table; the age is kept, so it eventually wins). Until the re-run starts
    /// (`retry_at`), operations and controls the abandoned run still issues — the rest of a
    /// batch it issued at once — are dropped: served against the reset state they would be
    /// taken for the new run's (found by the TPC-C simulation, `salt,2,103`).
    fn retry_accepted(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        let t = self.txns.get_mut(&txn).expect("live txn");
        let unit = Self::unit(txn, t);
        for p in &t.unit_parts {
            ctx.send_to_partition(*p, Request::Abort { unit, attempt: t.attempt });
            self.aborts.insert((unit, *p), t.attempt);
        }
        t.attempt += 1;
        t.sub = 0;
        t.in_sub = false;
        t.unit_parts.clear();
        t.unit_ops.clear();
        t.unit_writes.clear();
        t.unit_results.clear();
        t.unit_error = None;
        t.in_flight.clear();
        t.phase = Phase::Running;
        // Back off before the re-run (bounded exponential, jittered) so contention resolves
        // instead of storming; the age is kept, so it eventually wins.
        t.retries = t.retries.saturating_add(1);
        let max_us = RETRY_BACKOFF_BASE_US << t.retries.min(RETRY_BACKOFF_DOUBLINGS_MAX);
        let wait = Duration::from_micros(ctx.rng.gen_range(max_us / 2..=max_us));
        t.retry_at = Some(ctx.now + wait);
    }

    /// Accepted BASE transactions whose operations went unanswered are re-run.
    fn retry_stalled(&mut self, ctx: &mut CoordCtx) {
        let stalled: Vec<TxnId> = self
            .txns
            .iter()
            .filter(|(_, t)| {
                t.base
                    && t.accepted
                    && t.retry_at.is_none()
                    && !t.in_flight.is_empty()
                    && ctx.now.saturating_sub(t.last_progress) > BASE_OP_TIMEOUT
            })
            .map(|(id, _)| *id)
            .collect();
        for txn in stalled {
            self.txns.get_mut(&txn).expect("listed").last_progress = ctx.now;
            self.retry_accepted(txn, ctx);
        }
    }

    fn restart_due(&mut self, ctx: &mut CoordCtx) {
        let due: Vec<TxnId> =
            self.txns.iter().filter(|(_, t)| t.retry_at.is_some_and(|at| at <= ctx.now)).map(|(id, _)| *id).collect();
        for txn in due {
            self.txns.get_mut(&txn).expect("listed").retry_at = None;
            ctx.rerun(txn);
        }
    }

    #[allow(clippy::too_many_arguments)] // the fields of one `Reply::Op`
    fn on_op_reply(
        &mut self,
        id: SubOpId,
        attempt: u32,
        result: Result<PartResult, Error>,
        writes: Vec<WriteImage>,
        committed: bool,
        read_taint: Option<u64>,
        incarnation: u64,
        ctx: &mut CoordCtx,
    ) {
        let Some(t) = self.txns.get_mut(&id.txn) else { return };
        if let Some(g) = read_taint.filter(|_| t.base) {
            // Recorded even for a stale attempt: the read lock is held all the same.
            let e = t.read_taint.entry(id.part).or_default();
            *e = (*e).max(g);
        }
        if attempt != t.attempt {
            return;
        }
        t.last_progress = ctx.now;
        let Some(InFlight { single, req, .. }) = t.in_flight.remove(&id) else { return };
        if let Request::Op { unit, .. } = *req {
            t.incarnations.insert(id.part, (attempt, unit, incarnation));
        }
        if matches!(result, Err(Error::Abort(_))) && t.base && t.accepted {
            return self.retry_accepted(id.txn, ctx);
        }
        if !writes.is_empty() {
            t.unit_writes.entry(id.part).or_default().extend(writes);
        }
        let unit = Self::unit(id.txn, t);
        if committed {
            // Salt §6.4: the partition committed this single-operation subtransaction.
            let r = result.clone().expect("locally committed ops succeeded");
            let taint = t.read_taint.iter().map(|(p, g)| (*p, *g)).collect();
            Self::persist(ctx, &CoordinatorRecord::LocalDone { unit, results: vec![(id, r.clone())], taint });
            t.unit_results.push((id, r));
            t.unit_parts.clear();
            t.unit_ops.clear();
            return self.unit_committed(id.txn, Then::AlkalineOp { id, result: result.expect("ok") }, ctx);
        }
        match result {
            Ok(r) => {
                if t.base {
                    t.unit_results.push((id, r.clone()));
                }
                if single && t.base {
                    // A single-operation subtransaction without the local optimization.
                    self.commit_unit(id.txn, Then::AlkalineOp { id, result: r }, ctx);
                } else {
                    ctx.op_done(id, Ok(r));
                }
            }
            Err(e) => {
                if single && t.base {
                    self.abort_unit(id.txn, Then::AlkalineOp { id, result: PartResult::Done }, e, ctx);
                } else {
                    if t.base && t.in_sub {
                        t.unit_error.get_or_insert(e.clone());
                    }
                    ctx.op_done(id, Err(e));
                }
            }
        }
    }
}

impl CoordinatorEngine for LockingCoordinator {
    /// Presumed abort (the crate doc, "Commit"): an ACID transaction is committed by its
    /// decision record, or, with one participant, by that participant's commit record.
    fn commit_logged(&self, txn: TxnId) -> Option<bool> {
        let t = self.txns.get(&txn).filter(|t| !t.base)?;
        match t.phase {
            _ if t.decision_logged => Some(true),
            Phase::Running | Phase::Preparing { .. } => Some(false),
            Phase::Committing { .. } => None, // one phase: the participant decides
        }
    }

    fn begin(&mut self, txn: TxnId, opts: &TxnOptions, ctx: &mut CoordCtx) {
        self.announce_epoch(txn, ctx);
        // Wait-die age: when the transaction's first attempt began, so a client's retry keeps
        // its place and eventually wins (LK-5). First attempts get the begin time made
        // unique per coordinator; a retry may tie another transaction's age, and ties are
        // ordered by `TxnId`.
        let began = if opts.first_attempt < ctx.now {
            opts.first_attempt.as_nanos()
        } else {
            self.next_age = self.next_age.max(ctx.now.as_nanos()) + 1;
            self.next_age
        };
        let age = (began << 8) | (txn.node.0 as u64 & 0xff);
        let base = self.cfg.base && opts.base;
        let class = TxnClass::new(opts.isolation, base, age);
        let t = CTxn::new(class, opts.procedure.clone(), txn.epoch << 16, ctx.now);
        self.txns.insert(txn, t);
    }

    fn issue(&mut self, id: SubOpId, op: PartOp, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&id.txn) else {
            return ctx.op_done(id, Err(Error::Abort(AbortReason::Failure)));
        };
        if t.wounded {
            return ctx.op_done(id, Err(Error::Abort(AbortReason::Deadlock)));
        }
        if t.retry_at.is_some() {
            return; // from the run `retry_accepted` abandoned; a new run replaces it
        }
        Self::open_sub(t);
        self.send_op(id, op, false, ctx);
    }

    fn commit(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&txn) else {
            return ctx.txn_done(txn, Err(Error::Abort(AbortReason::Failure)));
        };
        if t.base && !t.in_sub {
            return self.finish(txn, Ok(()), ctx);
        }
        if t.base && t.sub <= t.decided_subs {
            t.in_sub = false;
            return self.finish(txn, Ok(()), ctx);
        }
        self.commit_unit(txn, Then::Finish, ctx);
    }

    fn abort(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        if !self.txns.contains_key(&txn) {
            return ctx.txn_done(txn, Ok(()));
        }
        self.abort_unit(txn, Then::Finish, Error::Abort(AbortReason::Other("rolled back".into())), ctx);
    }

    fn on_reply(&mut self, from: PartitionId, reply: Payload, ctx: &mut CoordCtx) {
        let Ok(reply) = reply.decode::<Reply>() else { return };
        match reply {
            Reply::Op { id, attempt, result, writes, committed, read_taint, incarnation } => {
                self.on_op_reply(id, attempt, result, writes, committed, read_taint, incarnation, ctx)
            }
            Reply::Prepared { unit, vote } => self.on_vote(unit, from, vote, ctx),
            Reply::Committed { unit } => self.on_committed(unit, from, ctx),
            Reply::Aborted { unit } => {
                self.aborts.remove(&(unit, from));
                self.on_commit_refused(unit, from, ctx)
            }
            Reply::Query { unit } => self.on_query(unit, from, ctx),
            Reply::QueryBase { txn } => self.on_query_base(txn, from, ctx),
            Reply::QueryIdle { txn } => self.on_query_idle(txn, from, ctx),
            Reply::Wound { txn } => self.on_wound(txn, ctx),
            Reply::BaseEnded { txn } => {
                if let Some(waiting) = self.ending.get_mut(&txn) {
                    waiting.remove(&from);
                    if waiting.is_empty() {
                        self.ending.remove(&txn);
                        if self.logged_ending.remove(&txn) {
                            Self::persist(ctx, &CoordinatorRecord::BaseEnded { txn });
                        }
                    }
                }
            }
        }
    }

    fn on_tick(&mut self, ctx: &mut CoordCtx) {
        let me = TxnId {
            node: match ctx.me {
                Addr::Coordinator(n) => n,
                _ => unreachable!(),
            },
            epoch: ctx.epoch,
            seq: 0,
        };
        self.announce_epoch(me, ctx);
        self.resend_decisions(ctx);
        self.retry_stalled(ctx);
        self.restart_due(ctx);
    }

    fn apply(&mut self, record: &[u8]) -> Result<(), Error> {
        let record: CoordinatorRecord =
            postcard::from_bytes(record).map_err(|e| Error::Storage(format!("locking coordinator record: {e}")))?;
        match record {
            CoordinatorRecord::BaseLogic { txn, procedure, args, age, isolation } => {
                let class = TxnClass::new(isolation, true, age);
                let mut t = CTxn::new(class, Some((procedure, args)), 0, Time::ZERO);
                t.logic_logged = true;
                self.txns.insert(txn, t);
            }
            CoordinatorRecord::Decided { unit, writes, results, taint } => {
                let waiting = writes.iter().map(|(p, _)| *p).collect();
                self.decisions.insert(unit, Pending { waiting, writes: writes.into_iter().collect(), attempt: None });
                self.record_context(unit, results, taint);
            }
            CoordinatorRecord::LocalDone { unit, results, taint } => self.record_context(unit, results, taint),
            CoordinatorRecord::Ended { unit } => {
                self.decisions.remove(&unit);
            }
            CoordinatorRecord::BaseFinished { txn, parts } => {
                self.txns.remove(&txn);
                self.ending.insert(txn, parts.into_iter().collect());
                self.logged_ending.insert(txn);
            }
            CoordinatorRecord::BaseEnded { txn } => {
                self.txns.remove(&txn);
                self.ending.remove(&txn);
                self.logged_ending.remove(&txn);
            }
        }
        Ok(())
    }

    /// Drops what later records undo (see the trait): a unit's `Decided` and its `Ended` once
    /// the `Ended` follows it — for a BASE subtransaction only once its transaction has ended
    /// (its context no longer feeds a roll-forward) — and every record of a BASE transaction
    /// whose `BaseEnded` is logged, except a `Decided` still waiting for its `Ended`.
    fn compact(&self, records: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let Ok(decoded) =
            records.iter().map(|r| postcard::from_bytes(r)).collect::<Result<Vec<CoordinatorRecord>, _>>()
        else {
            return records; // not ours to judge: keep everything
        };
        let ended_txns: BTreeSet<TxnId> = decoded
            .iter()
            .filter_map(|r| match r {
                CoordinatorRecord::BaseEnded { txn } => Some(*txn),
                _ => None,
            })
            .collect();
        let mut last_ended: BTreeMap<Unit, usize> = BTreeMap::new();
        for (i, r) in decoded.iter().enumerate() {
            if let CoordinatorRecord::Ended { unit } = r {
                last_ended.insert(*unit, i);
            }
        }
        let settled = |unit: &Unit| unit.sub == 0 || ended_txns.contains(&unit.txn);
        let keep = |i: usize, r: &CoordinatorRecord| match r {
            CoordinatorRecord::Decided { unit, .. } => !(settled(unit) && last_ended.get(unit).is_some_and(|&e| e > i)),
            CoordinatorRecord::Ended { unit } => !settled(unit),
            CoordinatorRecord::BaseLogic { txn, .. }
            | CoordinatorRecord::BaseFinished { txn, .. }
            | CoordinatorRecord::BaseEnded { txn } => !ended_txns.contains(txn),
            CoordinatorRecord::LocalDone { unit, .. } => !ended_txns.contains(&unit.txn),
        };
        records.into_iter().zip(&decoded).enumerate().filter(|(i, (_, r))| keep(*i, r)).map(|(_, (b, _))| b).collect()
    }

    fn base_transactions(&mut self) -> Option<&mut dyn BaseTransactions> {
        Some(self)
    }
}

impl BaseTransactions for LockingCoordinator {
    fn accepted(&self, txn: TxnId) -> bool {
        self.txns.get(&txn).is_some_and(|t| t.base && t.accepted)
    }

    fn issue_unit(&mut self, id: SubOpId, op: PartOp, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&id.txn) else {
            return ctx.op_done(id, Err(Error::Abort(AbortReason::Failure)));
        };
        if !t.base || t.in_sub || t.retry_at.is_some() {
            return self.issue(id, op, ctx);
        }
        Self::open_sub(t);
        if self.cfg.local {
            // The partition commits it: the logic must be durable first (Salt §6.1).
            Self::log_logic(id.txn, t, ctx);
        }
        self.send_op(id, op, true, ctx);
    }

    fn control(&mut self, txn: TxnId, op: u32, control: Control, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&txn) else {
            return ctx.control_done(txn, op, Err(Error::Abort(AbortReason::Failure)));
        };
        if !t.base {
            return ctx.control_done(txn, op, Ok(()));
        }
        if t.retry_at.is_some() {
            return; // from the run `retry_accepted` abandoned; a new run replaces it
        }
        match control {
            Control::BeginSection => {
                if t.in_sub && t.unit_error.is_some() {
                    // The previous subtransaction was left by an exception: roll it back (its
                    // error already reached the procedure) and open the new one.
                    let e = t.unit_error.clone().expect("checked");
                    self.abort_unit(txn, Then::Control { op: u32::MAX, open_explicit: false }, e, ctx);
                    let t = self.txns.get_mut(&txn).expect("live txn");
                    Self::open_sub(t);
                    ctx.control_done(txn, op, Ok(()));
                } else if t.in_sub {
                    // Close the implicit subtransaction first.
                    self.commit_unit(txn, Then::Control { op, open_explicit: true }, ctx);
                } else {
                    Self::open_sub(t);
                    ctx.control_done(txn, op, Ok(()));
                }
            }
            Control::EndSection => {
                if !t.in_sub {
                    return ctx.control_done(txn, op, Ok(()));
                }
                if t.sub <= t.decided_subs {
                    t.in_sub = false; // replayed from the context table
                    return ctx.control_done(txn, op, Ok(()));
                }
                self.commit_unit(txn, Then::Control { op, open_explicit: false }, ctx);
            }
        }
    }

    fn take_reruns(&mut self) -> Vec<(TxnId, String, Vec<Value>)> {
        let mut out = std::mem::take(&mut self.recovered);
        for (txn, t) in &mut self.txns {
            // Roll forward with a fresh run number (set from the new epoch at the first op).
            t.attempt = ATTEMPT_UNSET;
            if let Some((name, args)) = &t.procedure {
                out.push((*txn, name.clone(), args.clone()));
            }
        }
        out
    }
}

impl LockingCoordinator {
    fn record_context(&mut self, unit: Unit, results: Vec<(SubOpId, PartResult)>, taint: Vec<(PartitionId, u64)>) {
        if unit.sub == 0 {
            return;
        }
        if let Some(t) = self.txns.get_mut(&unit.txn) {
            for (p, g) in taint {
                let e = t.read_taint.entry(p).or_default();
                *e = (*e).max(g);
            }
            for (id, r) in results {
                t.all_parts.insert(id.part);
                t.context.insert(id, r);
            }
            t.decided_subs = t.decided_subs.max(unit.sub);
            t.accepted = true;
            t.class.immortal = true;
        }
    }
}

#[cfg(test)]
#[path = "coordinator_compaction_tests.rs"]
mod compaction_tests;
