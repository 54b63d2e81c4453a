//! The partition half of the locking engine: locks, buffered writes, commit, 2PC participant.
//! See the module doc of [`super`] for the protocol.

use super::lock::{
    Decision, Grant, HeldLock, HeldLockView, LockClass, LockDelta, LockManager, LockMode, Owner, RemoteDep, Target,
};
use super::{LockingConfig, LoggedImage, LoggedWrite, Record, Reply, Request, TxnClass, Unit, WriteImage};
use litmus_core::hash::FxHashMap;
use litmus_core::{AbortReason, Access, Error, Key, NodeId, PartitionId, Row, TableId, Time, Timestamp, TxnId};
use litmus_protocol::bounded::BoundedSet;
use litmus_protocol::engine::{decode_record, PartCtx, PartitionEngine};
use litmus_protocol::message::{Addr, Payload, SubOpId};
use litmus_protocol::op::{overlay_scan, write_image, write_images, ColMask, OpKind, PartOp, PartResult};
use litmus_storage::mvcc::MvccStore;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;
use std::time::Duration;

/// `txns` in a stable order (the map's iteration order depends on its history).
fn sorted(mut txns: Vec<TxnId>) -> Vec<TxnId> {
    txns.sort_unstable();
    txns
}

/// How many finished transactions a partition remembers, to ignore their late messages.
pub const FINISHED_MEMORY_MAX: usize = 100_000;
/// An unprepared ACID transaction with no message for this long is rolled back here (its
/// coordinator is gone or cut off, or its abort was lost; it can still abort, so this is safe —
/// an interactive transaction idle this long loses its locks and fails at its next operation).
pub const ORPHAN_TIMEOUT: Duration = Duration::from_secs(2);
/// How often an in-doubt participant asks its coordinator for the decision.
pub const QUERY_INTERVAL: Duration = Duration::from_millis(100);
/// How long a participant waits for the decision after voting yes before it starts asking
/// ([`QUERY_INTERVAL`]). A query that reaches a coordinator still collecting votes aborts the
/// transaction (presumed abort), so asking at once would abort healthy multi-partition
/// transactions whenever the votes are slower than the next sweep — as they are on a loaded
/// machine (a TPC-C load failed that way). Units recovered from the log ask at once. That a
/// query aborts a unit still collecting votes is kept on purpose: it is the coordinator's vote
/// timeout — a lost `Prepare` or vote otherwise holds every participant's locks until the
/// coordinator's stall timeout.
pub const IN_DOUBT_QUERY_AFTER: Duration = Duration::from_secs(1);
/// LK-5a (wait-die with patience): an operation of a mortal transaction that has waited
/// this long for a lock, and still waits for an older transaction (`LockManager::impatient`),
/// is aborted with `AbortReason::Deadlock`; checked every tick (`machine::TICK_INTERVAL_MS`,
/// 5 ms), so the real bound is this plus up to a tick. It bounds two things at once: how long
/// a deadlock that plain wait-die would have prevented can stall its queues, and how long a
/// younger request may queue behind an older one before giving up. It must exceed the time hot
/// locks are held by short transactions (TPC-C's district row under `salt`: one alkaline
/// subtransaction, about one LAN round trip, ~1 ms with the benchmark's simulated LAN) so that
/// a queue of a few of them drains, and stay well below what a deadlock may cost (each one
/// stalls everything queued behind its victims for this long).
///
/// 7 ms: under load, a waiter that sits behind an older transaction which itself waits (a
/// convoy: 2PL holds its locks while it waits) only lengthens the convoy, and dying releases
/// what it holds, so on TPC-C a shorter patience gives more throughput (the sweep over the
/// patience is in the results docs). But the patience must exceed [`TICK_CREDIT_MAX`], or a
/// stall alone makes every waiter impatient and LK-5f no longer protects anything; going
/// below it needs another stall rule (e.g. the first tick after a stall aborts nobody), and
/// the rule tests of `tests/salt.rs`, which time waits below a tick, would need rework.
pub const LOCK_WAIT_PATIENCE: Duration = Duration::from_millis(7);
/// LK-5a's exception ([`LockingPartition::blockers_running`]): a transaction counts as
/// running while an operation of it arrived this recently. Longer than the patience: on a
/// loaded machine a TPC-C Delivery's operations, one round trip apart, arrive up to tens of
/// milliseconds apart. It bounds how much longer a deadlock may last than without the rule.
pub const RUNNING_WITHIN: Duration = Duration::from_millis(250);
/// LK-5a's exception, for a blocker whose coordinator node has sent this partition nothing
/// since the blocker's operation last ran ([`LockingPartition::alive`]): it counts as working for
/// this long instead of [`RUNNING_WITHIN`]. Silence says that node is not running (a stalled
/// process or thread), not that the blocker is idle: a blocker stuck in a deadlock sends
/// nothing, but the node's other transactions keep talking. Bounds how long a deadlock lasts
/// when a node sends nothing at all.
pub const COORDINATOR_SILENT_MAX: Duration = Duration::from_secs(1);
/// LK-5h: how long an operation of a lock-free transaction may keep stepping out of
/// lock queues (and asking again) instead of aborting its transaction. Bounds a deadlock
/// through a transaction whose flag was stale: an operation sent before the transaction's
/// first long-term lock elsewhere still says lock-free.
pub const STEP_OUT_MAX: Duration = Duration::from_secs(1);
/// LK-5f: the most one tick advances the partition's wait clock
/// ([`LockingPartition::wait_clock`]), on which LK-5a and LK-5b time lock waits. Ticks come
/// every `machine::TICK_INTERVAL_MS` (5 ms) on a running partition; a longer gap means the
/// partition did not run (its worker was starved of CPU), and counts as this much. Shorter
/// than the patience, so a stall alone never makes a waiter impatient.
pub const TICK_CREDIT_MAX: Duration = Duration::from_millis(6);
/// The lock "table" of queue anchors ([`LockingPartition::queue_head`]): no table has this id.
pub const QUEUE_ANCHORS: TableId = TableId(u32::MAX);
/// Most transactions LK-5a's exception looks at to decide one waiter
/// ([`LockingPartition::blockers_running`]); beyond, it does not apply.
pub const ALIVE_VISITS_MAX: usize = 64;

/// Grant numbers of incarnation `n` start at `n << GRANT_INCARNATION_SHIFT` (`Record::Incarnation`).
pub const GRANT_INCARNATION_SHIFT: u32 = 40;

/// Most `AwaitReads` watches a partition keeps (LK-6b across partitions). Past it a watch is
/// dropped; the asker repeats its question every [`QUERY_INTERVAL`] while it still waits.
pub const READ_WATCHES_MAX: usize = 65_536;

type LockList = Vec<HeldLock>;

/// A transaction's state at this partition.
#[derive(Debug)]
struct PTxn {
    class: TxnClass,
    /// The unit in progress (sub 0 for ACID) and the attempt it belongs to.
    sub: u32,
    attempt: u32,
    /// Writes of the unit in progress, visible to this transaction only.
    buffer: BTreeMap<(TableId, Key), Option<Row>>,
    prepared: bool,
    last_active: Time,
    /// Operations already received, by (attempt, op): a duplicated message is ignored (a
    /// formula must not apply twice).
    seen: BTreeSet<(u32, u32)>,
    /// Operations of the unit in progress received by this incarnation. Its locks and buffered
    /// writes are volatile until it prepares (ACID): after a restart, a later operation of the
    /// unit starts a fresh record here that knows nothing of the earlier ones. `Prepare` and a
    /// one-phase `Commit` carry how many the coordinator sent, and a mismatch refuses them —
    /// the coordinator's write images of the earlier operations were computed under locks we
    /// no longer hold (found by `litmus sim --workload bank --engine acid` with crashes).
    ops: u32,
    /// Relocked after our restart for a BASE subtransaction whose operations ran here (its
    /// `Locked` record): the locks are back, but not its run number or buffered writes.
    recovered: bool,
    /// BASE: an operation of subtransaction `sub` ran here in this incarnation and neither its
    /// commit nor its abort has arrived yet (see [`LockingPartition::after_undecided_sub`]).
    open: bool,
}

/// The fields of a [`Request::Op`], as [`LockingPartition::on_op`] takes them.
struct OpRequest {
    id: SubOpId,
    unit: Unit,
    attempt: u32,
    class: TxnClass,
    op: PartOp,
    local_commit: bool,
    after: Vec<RemoteDep>,
    resent: bool,
    incarnation: Option<u64>,
}

/// An operation waiting for locks.
#[derive(Debug)]
struct Parked {
    from: Addr,
    id: SubOpId,
    unit: Unit,
    attempt: u32,
    op: PartOp,
    local_commit: bool,
    /// LK-6b across partitions: remote reads a BASE write lock of this operation waits for.
    after: Vec<RemoteDep>,
    /// Locks still to acquire, in order, with "short-term" flags.
    locks: VecDeque<(TableId, Target, LockMode, bool)>,
    short: Vec<(TableId, Target, LockMode)>,
    /// A limited scan whose range lock was narrowed ([`narrowed_scan_range`]).
    narrowed: Option<Narrowed>,
    /// When it started waiting for its current lock: for LK-5a's exception, which compares
    /// it with when blockers last ran.
    waiting_since: Time,
    /// The same on the wait clock (LK-5f): what the patience is measured on.
    waited_from: Duration,
    /// An accepted BASE transaction's operation that has wounded the older transactions it
    /// waits for (LK-5b, once the patience ran out); the sweep repeats the wounds.
    wounded: bool,
    /// LK-5e: it has waited [`RUNNING_WITHIN`] and wounded every mortal transaction it waits
    /// for, younger ones too; the sweep repeats these wounds as well.
    wounded_all: bool,
    /// It waits for a queue anchor ([`LockingPartition::queue_head`]): LK-5a's exception
    /// ([`LockingPartition::blockers_running`]) applies.
    on_anchor: bool,
    /// The lock it waits for (taken off `locks` when the wait began), put back if it steps
    /// out of the queue (LK-5h).
    waiting_for: Option<(TableId, Target, LockMode, bool)>,
    /// LK-5h: out of the lock table, asking for its lock again on the next tick.
    stepped_out: bool,
    /// LK-5h: when it first stepped out; past [`STEP_OUT_MAX`] it dies instead.
    out_since: Option<Time>,
}

impl Parked {
    /// LK-5h: it first stepped out less than [`STEP_OUT_MAX`] ago (or never has).
    fn may_step_out_at(&self, now: Time) -> bool {
        self.out_since.is_none_or(|s| now.saturating_sub(s) < STEP_OUT_MAX)
    }
}

#[derive(Serialize, Deserialize)]
struct State {
    last_ts: Timestamp,
    /// BASE subtransactions committed here, with their local-commit results (roll-forward).
    committed: BTreeMap<Unit, Vec<(u32, PartResult)>>,
    /// Prepared units waiting for a decision, with their coordinator and locks.
    in_doubt: BTreeMap<Unit, (NodeId, LockList)>,
    /// Saline locks of BASE transactions that have not ended.
    saline: BTreeMap<TxnId, LockList>,
    /// Recently committed ACID transactions (bounded), so a commit re-sent after our restart is
    /// acknowledged instead of applied twice (its images could overwrite newer writes).
    acid_committed: BoundedSet<TxnId>,
    /// Locks of BASE subtransactions whose operations ran here but whose commit or rollback has
    /// not arrived: relocked after a restart. The fold of the unit's `Locked` deltas, sorted by
    /// grant number (`lock::LockDelta::apply_to`).
    pending: BTreeMap<Unit, LockList>,
    /// Recently ended BASE transactions (bounded), so a late duplicate of one of their
    /// operations is refused even after a restart (re-running a locally committed operation
    /// would apply its formula twice; any other would take locks nobody releases).
    base_ended: BoundedSet<TxnId>,
    /// Saline locks of ended BASE transactions that LK-6 holds back (relocked and released
    /// again after a restart), until a `Released` record says they are gone.
    releasing: BTreeMap<TxnId, LockList>,
    /// Restarts so far (`Record::Incarnation`).
    incarnation: u64,
    /// Per live BASE transaction, the latest (attempt, subtransaction) rolled back here by an
    /// `Abort`: its operations that arrive later (reordered, duplicated) are stale and dropped.
    /// Run, they would take alkaline locks no one releases until the transaction's next
    /// operation reaches us — two accepted BASE transactions deadlocked that way across
    /// partitions (`litmus sim --workload salt-chains --faults`, seeds 279 and 1182).
    base_aborted: BTreeMap<TxnId, (u32, u32)>,
}

impl Default for State {
    fn default() -> Self {
        State {
            last_ts: Timestamp::default(),
            committed: BTreeMap::new(),
            in_doubt: BTreeMap::new(),
            saline: BTreeMap::new(),
            acid_committed: BoundedSet::new(FINISHED_MEMORY_MAX),
            pending: BTreeMap::new(),
            base_ended: BoundedSet::new(FINISHED_MEMORY_MAX),
            releasing: BTreeMap::new(),
            incarnation: 0,
            base_aborted: BTreeMap::new(),
        }
    }
}

pub struct LockingPartition {
    cfg: LockingConfig,
    locks: LockManager,
    txns: FxHashMap<TxnId, PTxn>,
    parked: BTreeMap<u64, Parked>,
    next_token: u64,
    state: State,
    /// Transactions that ended here: `true` if they committed (ACID) or ended (BASE), `false`
    /// if rolled back — a later commit for a rolled-back one must fail, not be acknowledged.
    finished: FxHashMap<TxnId, bool>,
    finished_order: VecDeque<TxnId>,
    /// Newest epoch seen per coordinator.
    epochs: BTreeMap<NodeId, u32>,
    /// Locks to take again after recovery, before the first input. Every start begins a new
    /// incarnation there, a first start and one from an empty log included: an operation that
    /// names the incarnation which answered its unit's earlier operations
    /// (`Request::Op::incarnation`) must see any restart since.
    relock_pending: bool,
    last_sweep: Time,
    /// When each unit prepared in this incarnation (volatile: recovered units are absent, and
    /// ask their coordinator at once). See [`IN_DOUBT_QUERY_AFTER`].
    prepared_at: BTreeMap<Unit, Time>,
    /// LK-6b across partitions: partitions waiting to hear that a transaction's reads here
    /// (up to a grant number) are settled. Volatile: askers repeat their question.
    read_watches: BTreeSet<(TxnId, u64, PartitionId)>,
    /// Tables seen used as queues: a limited scan's narrowed head row was deleted while it
    /// waited for it. ACID limited scans of these first write-lock the queue's anchor (see
    /// [`LockingPartition::queue_head`]). Volatile: a restart learns it again.
    queue_tables: BTreeSet<TableId>,
    /// When each coordinator node's last request reached this partition (LK-5a's exception:
    /// [`COORDINATOR_SILENT_MAX`]). Volatile.
    heard_from: BTreeMap<NodeId, Time>,
    /// LK-5f: the wait clock's reading at the last tick, and when that tick came.
    /// Volatile (a restart starts it again; parked operations do not survive one).
    wait_clock: (Duration, Time),
    /// Per BASE transaction, the subtransaction whose `Locked` records the lock manager's
    /// change tracking follows (`LockManager::track_changes`): its next record is computed from
    /// the locks changed since its last one ([`LockingPartition::log_locked`]). Volatile: after
    /// a restart the first record walks all the unit's locks again.
    locks_followed: BTreeMap<TxnId, u32>,
    /// Transactions in `State::releasing` to check at the next [`LockingPartition::resume`]
    /// beside those the lock manager names (`LockManager::take_freed_releasing`): after a
    /// relock, their held-back locks were released again and some may be gone already.
    releasing_recheck: BTreeSet<TxnId>,
    /// Operations and aborts of a BASE subtransaction that arrived before the commit (or abort)
    /// of an earlier subtransaction of theirs that ran here, and `EndBase`s that arrived before
    /// the commits they name, in arrival order ([`LockingPartition::must_wait`]). Volatile: the
    /// coordinator resends them all.
    deferred: BTreeMap<TxnId, Vec<(Addr, Request)>>,
}

impl LockingPartition {
    pub fn new(cfg: LockingConfig) -> Self {
        LockingPartition {
            cfg,
            locks: LockManager::new(),
            txns: FxHashMap::default(),
            parked: BTreeMap::new(),
            next_token: 0,
            state: State::default(),
            finished: FxHashMap::default(),
            finished_order: VecDeque::new(),
            epochs: BTreeMap::new(),
            queue_tables: BTreeSet::new(),
            heard_from: BTreeMap::new(),
            wait_clock: (Duration::ZERO, Time::ZERO),
            locks_followed: BTreeMap::new(),
            releasing_recheck: BTreeSet::new(),
            deferred: BTreeMap::new(),
            relock_pending: true,
            last_sweep: Time::ZERO,
            prepared_at: BTreeMap::new(),
            read_watches: BTreeSet::new(),
        }
    }

    fn remember_finished(&mut self, txn: TxnId, committed: bool) {
        if self.finished.insert(txn, committed).is_none() {
            self.finished_order.push_back(txn);
            if self.finished_order.len() > FINISHED_MEMORY_MAX {
                let old = self.finished_order.pop_front().expect("nonempty");
                self.finished.remove(&old);
            }
        }
    }

    /// Reacquires the locks of in-doubt units, of unfinished BASE transactions and those LK-6
    /// holds back after a restart, in their old grant order so that the §5.1 release-order
    /// dependencies among them come back as they were (see the lock module doc). The lock table
    /// is empty and these locks were all held at once, so every request is granted.
    fn relock(&mut self, ctx: &mut PartCtx) {
        let now = ctx.now;
        self.relock_pending = false;
        // A new incarnation: grant numbers above every earlier one's.
        let record = Record::Incarnation { n: self.state.incarnation + 1 };
        ctx.log(&record);
        self.apply_record(record, ctx.store);
        self.locks.set_grant_floor(self.state.incarnation << GRANT_INCARNATION_SHIFT);
        let mut all: Vec<(TxnId, &HeldLock)> = Vec::new();
        for (unit, (_, locks)) in &self.state.in_doubt {
            all.extend(locks.iter().map(|l| (unit.txn, l)));
        }
        for (txn, locks) in self.state.saline.iter().chain(&self.state.releasing) {
            all.extend(locks.iter().map(|l| (*txn, l)));
        }
        for (unit, locks) in &self.state.pending {
            all.extend(locks.iter().map(|l| (unit.txn, l)));
        }
        all.sort_by_key(|(_, l)| l.granted);
        // A saline lock can be listed twice (a subtransaction's `Locked` and an earlier commit).
        all.dedup_by(|a, b| a.0 == b.0 && a.1.granted == b.1.granted);
        for (txn, lock) in all {
            self.locks.acquire_recovered(txn, lock);
        }
        for txn in self.state.releasing.keys() {
            self.locks.release_all(*txn);
        }
        self.releasing_recheck.extend(self.state.releasing.keys().copied());
        let in_doubt = self.state.in_doubt.keys().map(|u| (u.txn, u.sub, true));
        let pending = self.state.pending.keys().map(|u| (u.txn, u.sub, false));
        let saline = self.state.saline.keys().map(|t| (*t, 0, false));
        let live: Vec<(TxnId, u32, bool)> = in_doubt.chain(pending).chain(saline).collect();
        for (txn, sub, prepared) in live {
            let base = !prepared;
            let recovered = self.state.pending.contains_key(&Unit { txn, sub });
            let t = self.txns.entry(txn).or_insert(PTxn {
                class: TxnClass { isolation: Default::default(), base, age: 0, immortal: base, lock_free: false },
                sub,
                attempt: 0,
                buffer: BTreeMap::new(),
                prepared,
                last_active: now,
                seen: BTreeSet::new(),
                ops: 0,
                recovered,
                open: false,
            });
            t.sub = t.sub.max(sub);
            t.recovered |= recovered && t.sub == sub;
        }
    }

    /// The locks `op` needs, and for a limited scan the end of its narrowed range (if any).
    fn lock_plan(&self, class: &TxnClass, op: &PartOp, store: &MvccStore) -> LockPlan {
        self.plan_for(class, op.table, &op.kind, store)
    }

    fn plan_for(&self, class: &TxnClass, table: TableId, kind: &OpKind, store: &MvccStore) -> LockPlan {
        let lock_class = if class.base { LockClass::Alkaline } else { LockClass::Acid };
        if let OpKind::ReadMany { keys } = kind {
            // Each key's read lock, as its own read would take it; in key order, each key once.
            let mut locks = VecDeque::new();
            if class.isolation.locked(Access::Read) {
                let mode = LockMode::new(lock_class, Access::Read);
                let short = class.isolation.short_term(Access::Read);
                let mut keys: Vec<&Key> = keys.iter().map(|(_, k)| k).collect();
                keys.sort_unstable();
                keys.dedup();
                locks.extend(keys.into_iter().map(|k| (table, Target::Key(k.clone()), mode, short)));
            }
            return LockPlan { locks, narrowed: None };
        }
        if let OpKind::WriteMany { writes } = kind {
            // Each write's lock, as its own operation would take it, in order (a key written
            // twice is covered the second time, LK-2).
            let mut locks = VecDeque::new();
            for w in writes {
                locks.extend(self.plan_for(class, table, w, store).locks);
            }
            return LockPlan { locks, narrowed: None };
        }
        let mut locked_to = None;
        let (access, target) = match kind {
            OpKind::Read { key, .. } => (Access::Read, Target::Key(key.clone())),
            // The lock the coming write takes, at once: no shared lock to upgrade later.
            OpKind::ReadForUpdate { key } => (Access::Write, Target::Key(key.clone())),
            OpKind::Scan { start, end, limit } => {
                // The guess costs a store scan: only where a range lock is taken at all.
                if class.isolation.locked(Access::RangeRead) {
                    locked_to = narrowed_scan_range(store, table, start, end.as_ref(), *limit);
                }
                let end = locked_to.clone().or_else(|| end.clone());
                (Access::RangeRead, Target::Range { start: start.clone(), end })
            }
            kind => (Access::Write, Target::Key(kind.key().expect("point write").clone())),
        };
        let mut locks = VecDeque::new();
        if !class.isolation.locked(access) {
            return LockPlan { locks, narrowed: None };
        }
        let short = class.isolation.short_term(access);
        // LK-6a per column: a BASE lock covers the columns its operation reads or writes.
        let cols = match kind {
            _ if lock_class == LockClass::Acid => ColMask::ALL,
            OpKind::Read { cols, .. } => *cols,
            OpKind::Update { updates, .. } => ColMask::of(updates.iter().map(|u| u.column)),
            _ => ColMask::ALL,
        };
        let mode = LockMode::new(lock_class, access).on(cols);
        if let (Some(_), OpKind::Scan { start, .. }) = (&locked_to, kind) {
            if let Some(head) = self.queue_head(table, mode, short, start) {
                locks.push_back(head);
            }
        }
        locks.push_back((table, target, mode, short));
        LockPlan { locks, narrowed: locked_to.map(|locked_to| Narrowed { locked_to, mode, short }) }
    }

    /// For an ACID or alkaline limited scan of a table used as a queue (`queue_tables`), a write
    /// lock of its class on an
    /// anchor standing for "the head of the queue that starts at the scan's start key" (in
    /// [`QUEUE_ANCHORS`]), the same for every consumer of it, to take before the scan's range
    /// lock. Consumers of a queue read its head and then delete it; two that both read-lock the head both wait to delete it,
    /// and the younger dies of that upgrade deadlock. Under Salt's faster mix TPC-C Deliveries
    /// of one warehouse queue four or five deep on each district's oldest NEW-ORDER row and
    /// died of it on most attempts. With the anchor they take turns: one lock, taken first, in
    /// the same order by all (a lock only adds waits, never a wrong result). BASE consumers take
    /// turns per subtransaction (the anchor's alkaline lock turns saline when it commits);
    /// accepted ones cannot die of the upgrade deadlock, so without the anchor they would
    /// deadlock until LK-5d rolls one back.
    fn queue_head(
        &self,
        table: TableId,
        mode: LockMode,
        short: bool,
        start: &Key,
    ) -> Option<(TableId, Target, LockMode, bool)> {
        if mode.class == LockClass::Saline || short || !self.queue_tables.contains(&table) {
            return None;
        }
        let write = LockMode::new(mode.class, Access::Write);
        // The anchor lives in a lock namespace no table uses, so that no range lock overlaps
        // it (a waiting anchor request inside the holder's scan range would queue the holder's
        // range lock behind it, a deadlock).
        let mut anchor = table.0.to_be_bytes().to_vec();
        anchor.extend_from_slice(start.as_bytes());
        Some((QUEUE_ANCHORS, Target::Key(Key::from(anchor)), write, false))
    }

    /// The coordinator sent again an operation we received ([`Request::Op::resent`]). Still
    /// waiting for its locks: nothing to do, its reply comes when it runs. Answered already:
    /// the reply was lost, and we keep no copy of it (a copy per operation would cost every
    /// transaction for a loss only a faulty network shows), so the operation fails with a
    /// retryable abort and its transaction rolls back. (A plain network duplicate, `resent`
    /// unset, is dropped.)
    fn on_resent_op(&mut self, from: Addr, id: SubOpId, attempt: u32, ctx: &mut PartCtx) {
        if self.parked.values().any(|p| p.id == id && p.attempt == attempt) {
            return;
        }
        let e = Error::Abort(AbortReason::Failure);
        ctx.reply(from, Reply::op_failed(id, attempt, e, self.state.incarnation));
    }

    /// An operation arrives: answered from what is decided already, refused when its
    /// transaction cannot go on here, ignored when stale or duplicated; otherwise it waits
    /// for its locks ([`Self::advance`]).
    fn on_op(&mut self, from: Addr, req: OpRequest, ctx: &mut PartCtx) {
        if self.answer_decided(from, &req, ctx) {
            return;
        }
        let OpRequest { id, unit, attempt, class, op, local_commit, after, resent, incarnation } = req;
        let txn = unit.txn;
        let t = self.txns.entry(txn).or_insert(PTxn {
            class,
            sub: unit.sub,
            attempt,
            buffer: BTreeMap::new(),
            prepared: false,
            last_active: ctx.now,
            seen: BTreeSet::new(),
            ops: 0,
            recovered: false,
            open: false,
        });
        if !t.seen.insert((attempt, id.op)) {
            if resent {
                return self.on_resent_op(from, id, attempt, ctx);
            }
            return; // a duplicate
        }
        if t.prepared {
            let e = Error::Internal(format!("{txn} sent an operation after prepare"));
            return ctx.reply(from, Reply::op_failed(id, attempt, e, self.state.incarnation));
        }
        t.last_active = ctx.now;
        t.class = class;
        if std::mem::take(&mut t.recovered) && unit.sub == t.sub {
            // The subtransaction whose locks we relocked after our restart goes on (or is run
            // again). We cannot tell which, and it cannot go on here: its buffered writes are
            // lost, and taking this for a new run would release its locks while the
            // coordinator still holds its earlier operations' write images (a lost update,
            // `base_subtransaction_fails_after_its_partition_restarts_between_operations`).
            // Roll it back and fail the operation; the coordinator rolls the subtransaction
            // back too and runs it again (or aborts a not-yet-accepted transaction).
            t.attempt = t.attempt.max(attempt);
            self.on_abort(None, unit, ctx);
            let e = Error::Abort(AbortReason::Failure);
            return ctx.reply(from, Reply::op_failed(id, attempt, e, self.state.incarnation));
        }
        if incarnation.is_some_and(|i| i != self.state.incarnation) {
            // We restarted since an earlier operation of the unit ran here (see the field).
            let e = Error::Abort(AbortReason::Failure);
            return ctx.reply(from, Reply::op_failed(id, attempt, e, self.state.incarnation));
        }
        if attempt < t.attempt {
            return; // a stale operation of an earlier run
        }
        if attempt > t.attempt || unit.sub != t.sub {
            self.start_run(unit, attempt, ctx);
        }
        if let Some(t) = self.txns.get_mut(&txn) {
            t.ops += 1;
            t.open = unit.sub > 0;
        }
        let LockPlan { locks, narrowed } = self.lock_plan(&class, &op, ctx.store);
        let waiting_since = ctx.now;
        let waited_from = self.wait_clock(ctx.now);
        let parked = Parked {
            from,
            id,
            unit,
            attempt,
            op,
            local_commit,
            after,
            locks,
            short: vec![],
            narrowed,
            waiting_since,
            waited_from,
            wounded: false,
            wounded_all: false,
            on_anchor: false,
            waiting_for: None,
            stepped_out: false,
            out_since: None,
        };
        self.advance(parked, ctx);
    }

    /// Answers an operation whose fate is decided already, and says whether it did: one of a
    /// subtransaction committed here (its result again, for roll-forward), of one rolled back
    /// (ignored), or of a transaction that ended here or whose coordinator restarted since
    /// (refused with a retryable abort).
    fn answer_decided(&mut self, from: Addr, req: &OpRequest, ctx: &mut PartCtx) -> bool {
        let (id, unit, attempt, txn) = (req.id, req.unit, req.attempt, req.unit.txn);
        if let Some(results) = self.state.committed.get(&unit) {
            // Roll-forward re-sent an operation of a subtransaction we committed locally.
            let result = results.iter().find(|(o, _)| *o == id.op).map(|(_, r)| r.clone());
            let result = result.ok_or_else(|| Error::Internal(format!("{unit:?} committed without op {}", id.op)));
            ctx.reply(
                from,
                Reply::Op {
                    id,
                    attempt,
                    result,
                    writes: vec![],
                    committed: true,
                    read_taint: None,
                    incarnation: self.state.incarnation,
                },
            );
            return true;
        }
        if unit.sub > 0 && self.state.base_aborted.get(&txn).is_some_and(|&a| (attempt, unit.sub) <= a) {
            return true; // an operation of a subtransaction rolled back already (`State::base_aborted`)
        }
        let ended = self.finished.contains_key(&txn)
            || self.state.base_ended.contains(&txn)
            || self.state.acid_committed.contains(&txn);
        if ended || self.epochs.get(&txn.node).is_some_and(|&e| e > txn.epoch && !req.class.base) {
            let e = Error::Abort(AbortReason::Failure);
            ctx.reply(from, Reply::op_failed(id, attempt, e, self.state.incarnation));
            return true;
        }
        false
    }

    /// A new run (roll-forward/retry) or a new subtransaction of `unit`'s transaction: what the
    /// previous one left unfinished here is rolled back (its saline locks stay).
    fn start_run(&mut self, unit: Unit, attempt: u32, ctx: &mut PartCtx) {
        let txn = unit.txn;
        let t = self.txns.get_mut(&txn).expect("the transaction was entered");
        let fresh_run = attempt > t.attempt;
        t.attempt = attempt;
        t.sub = unit.sub;
        t.buffer.clear();
        t.ops = 0;
        if fresh_run {
            // The earlier run's unfinished work goes, its logged locks with it (a restart
            // must not relock them: others may take them from now on). A new run starts
            // only once every decision of the earlier runs has been delivered (see the
            // coordinator's `send_op`), so nothing decided is pending here.
            let stale: Vec<Unit> = self.state.pending.keys().filter(|u| u.txn == txn).copied().collect();
            for u in stale {
                let record = Record::Aborted { unit: u };
                ctx.log(&record);
                self.apply_record(record, ctx.store);
            }
            let mut grants = self.locks.cancel_waits(txn);
            self.parked.retain(|_, p| p.unit.txn != txn);
            grants.extend(self.locks.release_non_saline(txn));
            self.resume(grants, ctx);
        }
    }

    /// Acquires the remaining locks of `p`, then executes it; parks it if it must wait.
    fn advance(&mut self, mut p: Parked, ctx: &mut PartCtx) {
        while let Some((table, target, mode, short)) = p.locks.front().cloned() {
            let age = self.txns.get(&p.unit.txn).map_or(0, |t| t.class.age);
            let token = self.next_token;
            let owner = Owner { txn: p.unit.txn, age };
            // Accepted BASE transactions (LK-5b) ask the same way; the difference is ours:
            // `abort_impatient` wounds for them instead of aborting them.
            let decision = self.locks.acquire_after(owner, table, target.clone(), mode, token, &p.after);
            match decision {
                Decision::Granted => {
                    p.locks.pop_front();
                    if short {
                        p.short.push((table, target, mode));
                    }
                }
                Decision::Waiting => {
                    self.next_token += 1;
                    p.locks.pop_front();
                    if short {
                        p.short.push((table, target.clone(), mode));
                    }
                    p.waiting_for = Some((table, target, mode, short));
                    p.waiting_since = ctx.now;
                    p.waited_from = self.wait_clock(ctx.now);
                    p.wounded = false;
                    p.wounded_all = false;
                    p.on_anchor = table == QUEUE_ANCHORS;
                    let txn = p.unit.txn;
                    self.parked.insert(token, p);
                    // LK-5c: a deadlock closed here is broken now, not after the patience.
                    if let Some(victim) = self.cycle_victim(txn) {
                        self.break_waits(victim, ctx);
                    }
                    return;
                }
                Decision::Die if self.may_step_out(&p, ctx.now) => {
                    // LK-5h: it asks again next tick rather than abort.
                    p.stepped_out = true;
                    p.out_since.get_or_insert(ctx.now);
                    self.parked.insert(token, p);
                    self.next_token += 1;
                    return;
                }
                Decision::Die => return die(p, self.state.incarnation, ctx),
            }
        }
        self.execute(p, ctx);
    }

    /// LK-5a and LK-5b, every tick. The operations of mortal transactions that have waited
    /// at least [`LOCK_WAIT_PATIENCE`] and still wait for an older transaction (or themselves)
    /// are aborted, as a request that dies at once would be; their waits are dropped and
    /// whoever queued behind them resumes. Impatience is a property of the transaction: one of
    /// its operations that is overdue aborts them all, as the coordinator then aborts the
    /// transaction anyway. An accepted BASE transaction cannot abort: once its operation has
    /// waited as long, it wounds the older transactions it waits for instead. Both wait the
    /// same patience first, so a lock held for a moment costs a wait, not an abort, either way.
    fn abort_impatient(&mut self, ctx: &mut PartCtx) {
        // Per transaction with an overdue operation: when the earliest began waiting, and for
        // mortal ones whether they all wait for queue anchors (LK-5a's exception).
        let mut overdue: Vec<(TxnId, bool, Time)> = Vec::new();
        let mut wound: Vec<(TxnId, Time, bool)> = Vec::new();
        let clock = self.wait_clock(ctx.now);
        for p in self.parked.values_mut().filter(|p| !p.stepped_out) {
            let txn = p.unit.txn;
            // LK-5f: waits are timed on the wait clock, where a stall counts as one tick.
            let waited = clock.saturating_sub(p.waited_from);
            if waited < LOCK_WAIT_PATIENCE {
                continue;
            }
            if self.txns.get(&txn).is_some_and(|t| t.class.immortal) {
                // LK-5e: past `RUNNING_WITHIN`, younger mortal blockers are wounded too. On
                // real time, as the liveness it bounds (LK-5a's exception) is judged on it.
                let all = ctx.now.saturating_sub(p.waiting_since) >= RUNNING_WITHIN;
                if p.wounded && (p.wounded_all || !all) {
                    continue;
                }
                match wound.iter_mut().find(|(t, _, _)| *t == txn) {
                    Some(w) => {
                        w.1 = w.1.min(p.waiting_since);
                        w.2 |= all;
                    }
                    None => wound.push((txn, p.waiting_since, all)),
                }
            } else if let Some(o) = overdue.iter_mut().find(|(t, _, _)| *t == txn) {
                o.1 &= p.on_anchor;
                o.2 = o.2.min(p.waiting_since);
            } else {
                // in token order: who began waiting first goes first
                overdue.push((txn, p.on_anchor, p.waiting_since));
            }
        }
        for (txn, since, all) in wound {
            // LK-5d: a deadlock through it here is broken by its own victim (LK-5c's
            // choice), not by wounding whoever is older: the wound would fall on the older
            // mortal transaction in the way while a younger mortal member of the cycle is due
            // to die for LK-5a in the same sweep. A wait with no victim here (no cycle, or one
            // across partitions, which no partition sees) wounds.
            if let Some(victim) = self.cycle_victim(txn) {
                self.break_waits(victim, ctx);
                continue;
            }
            // LK-5b waits out blockers that are alive (the exception of LK-5a): an older
            // ACID transaction that works here — a TPC-C Delivery waiting out saline locks
            // one district after another — is on no cycle through here, and wounding it
            // would throw away hundreds of milliseconds of its work. One that waits here
            // for us, or works nowhere here, is wounded. Working counts only from
            // when the wait began ([`Self::blockers_progressing`]): a blocker that last ran here
            // before may be waiting for us at another partition.
            if self.blockers_progressing(txn, since, ctx.now) {
                continue;
            }
            for p in self.parked.values_mut().filter(|p| p.unit.txn == txn) {
                p.wounded = true;
                p.wounded_all |= all;
            }
            self.wound_blockers(txn, all, ctx);
        }
        for (txn, on_anchor, since) in overdue {
            // An abort earlier in this loop may have cleared its way (its waits-for set only
            // shrinks); then it keeps waiting.
            // The exception covers waits for queue anchors and waits for accepted BASE
            // transactions only: those end without any abort (they cannot abort), so a waiter
            // that outlives its patience behind a working one loses nothing by waiting on.
            // Behind accepted BASE transactions, working counts only operations run here since
            // the wait began: a transfer that ran here only before may be waiting at another
            // partition for this very waiter (bank totals under Salt otherwise died in every
            // such cycle, `tests/bank_check.rs`); a New-Order that keeps running here is alive.
            // LK-5h: a lock-free transaction waits out alive blockers wherever it waits, as on
            // an anchor: it holds nothing, so only the queue behind it can close a cycle through
            // it, and a cycle here is never alive.
            let exempt = ((on_anchor || self.lock_free(txn)) && self.blockers_running(txn, ctx.now))
                || (self.waits_only_for_immortals(txn) && self.blockers_progressing(txn, since, ctx.now));
            if self.locks.impatient(txn) && !exempt {
                self.break_waits(txn, ctx);
            }
        }
    }

    /// LK-5f: the wait clock at `now`. It runs with real time, except that the time
    /// since the last tick counts for at most [`TICK_CREDIT_MAX`]: a partition whose worker was
    /// starved of CPU for 50 ms has not watched its waits for 50 ms. Timed on real time, the
    /// first tick after such a stall would find every waiter past its patience and abort them
    /// all at once, before the commits and releases queued in the stalled worker's mailbox had
    /// been read; their retries cost more CPU and make the next stall longer, so an overloaded
    /// partition churns. On the wait clock a stall counts as one tick, and a waiter dies only
    /// after ticks it actually saw add up to the patience.
    fn wait_clock(&self, now: Time) -> Duration {
        let (clock, at) = self.wait_clock;
        clock + now.saturating_sub(at).min(TICK_CREDIT_MAX)
    }

    /// LK-5c and LK-5d: whom to abort for a cycle through `txn` in this partition's
    /// waits-for graph (`LockManager::deadlock_cycle`), if there is one.
    /// 1. The youngest mortal member that waits for an older one — what LK-5a would abort
    ///    after the patience.
    /// 2. Else, if the cycle is of accepted BASE transactions only (none can abort, and
    ///    LK-5b wounds only transactions that can, so nothing else breaks it), its youngest member
    ///    that waits for an older one loses the *subtransaction* that waits: its coordinator
    ///    rolls it back and re-runs it, which releases that subtransaction's alkaline locks —
    ///    every edge of such a cycle is an alkaline lock, as saline locks do not block BASE
    ///    requests — and its transaction stays accepted. (TPC-C New-Orders update their stock
    ///    rows in the order of their lines, so two accepted ones can deadlock on stock, with
    ///    Deliveries queued behind them.)
    /// 3. Else none: a cycle whose only edges to older transactions are accepted BASE
    ///    transactions' is left to LK-5b's wounds. Rolling back an accepted member's
    ///    subtransaction would not release the saline locks a mortal member may wait for, and
    ///    aborting the youngest mortal member instead makes overloaded runs stall more often,
    ///    not less.
    fn cycle_victim(&self, txn: TxnId) -> Option<TxnId> {
        let cycle = self.locks.deadlock_cycle(txn)?;
        let immortal = |t: TxnId| self.txns.get(&t).is_some_and(|t| t.class.immortal);
        let youngest = |it: &mut dyn Iterator<Item = Owner>| it.max_by_key(|o| (o.age, o.txn)).map(|o| o.txn);
        let mortal = || cycle.iter().filter(|(o, _)| !immortal(o.txn));
        youngest(&mut mortal().filter(|(_, older)| *older).map(|(o, _)| *o)).or_else(|| {
            let all_immortal = cycle.iter().all(|(o, _)| immortal(o.txn));
            youngest(&mut cycle.iter().filter(|(_, older)| all_immortal && *older).map(|(o, _)| *o))
        })
    }

    /// Whether everyone `txn` waits for here is an accepted BASE transaction: immortal by its
    /// latest operation, or holding saline locks (a committed subtransaction; BASE
    /// transactions are accepted when their first subtransaction commits, §6.1), which is what
    /// a partition that saw only its earlier operations knows.
    fn waits_only_for_immortals(&self, txn: TxnId) -> bool {
        self.locks.waits_for_set(txn).is_some_and(|set| !set.is_empty() && set.iter().all(|b| self.accepted(*b)))
    }

    /// An accepted BASE transaction, as far as this partition knows: immortal by its latest
    /// operation here, or holding saline locks here (a committed subtransaction; BASE
    /// transactions are accepted when their first subtransaction commits, §6.1).
    fn accepted(&self, txn: TxnId) -> bool {
        self.txns.get(&txn).is_some_and(|t| t.class.immortal) || self.state.saline.contains_key(&txn)
    }

    /// LK-5a's exception, for waits on queue anchors and on accepted BASE transactions: every transaction `txn` waits for is
    /// *alive*, so `txn` keeps waiting past its patience instead of dying.
    /// Alive is *working here* — an operation of it ran here within [`RUNNING_WITHIN`], it has
    /// not prepared, and none of its operations waits here — or being an accepted BASE
    /// transaction (the anchor clause: it cannot abort, and LK-5e breaks a cycle through it
    /// by wounding, [`Self::wound_victims`]), or waiting here only for alive transactions, looking at most at [`ALIVE_VISITS_MAX`] transactions of the waits-for
    /// graph (a queue: each waits for the ones ahead, the head works). One on a deadlock cycle
    /// sends no operation, so it stops counting [`RUNNING_WITHIN`] after its last one at the
    /// latest, and every path from an alive transaction ends at a working one (a transaction
    /// met again on the path is not alive): so no member of a deadlock on this partition is
    /// alive, and a deadlock across partitions through an anchor lasts at most
    /// [`RUNNING_WITHIN`] plus the patience. Without this, a queue behind a long transaction
    /// that holds its lock while it works — TPC-C Deliveries of one warehouse, each taking the
    /// district's oldest NEW-ORDER row in turn for tens of milliseconds — would die after the
    /// patience, retry into the same queue, and leave the lock idle during its backoff.
    ///
    /// "Within [`RUNNING_WITHIN`]", not "since the wait began": a Delivery under Salt pauses
    /// tens of milliseconds between operations on a loaded node, and the stricter test would
    /// abort the Deliveries queued behind it for "deadlocks" on the anchor that are no cycle.
    /// (Not applied to every wait: a transaction with operations in flight at two partitions
    /// looks working at each while the two wait for each other, so such deadlocks would last
    /// [`RUNNING_WITHIN`], which costs ticketing under `acid` much of its throughput.)
    fn blockers_running(&self, txn: TxnId, now: Time) -> bool {
        let mut memo: BTreeMap<TxnId, bool> = BTreeMap::from([(txn, false)]);
        self.waits_for_alive(txn, now, None, &mut memo)
    }

    /// [`Self::blockers_running`], where working also means an operation ran here at or after
    /// `since` (when the waiter began waiting): one that ran here only before may since wait
    /// at another partition for the waiter, a cycle no partition sees whole.
    fn blockers_progressing(&self, txn: TxnId, since: Time, now: Time) -> bool {
        let mut memo: BTreeMap<TxnId, bool> = BTreeMap::from([(txn, false)]);
        self.waits_for_alive(txn, now, Some(since), &mut memo)
    }

    /// Whether `txn` waits for someone and everyone it waits for is alive; `memo` holds the
    /// verdicts so far, and `false` for the transactions being decided (a cycle is not alive).
    /// On a queue anchor only its holders count (`LockManager::waits_for_holders`): the
    /// consumers queued ahead wait for the same ones, and the queue can be longer than
    /// [`ALIVE_VISITS_MAX`].
    fn waits_for_alive(&self, txn: TxnId, now: Time, since: Option<Time>, memo: &mut BTreeMap<TxnId, bool>) -> bool {
        let Some(set) = self.locks.waits_for_holders(txn, QUEUE_ANCHORS) else { return false };
        !set.is_empty() && set.iter().all(|o| self.alive(*o, now, since, memo))
    }

    fn alive(&self, txn: TxnId, now: Time, since: Option<Time>, memo: &mut BTreeMap<TxnId, bool>) -> bool {
        if let Some(known) = memo.get(&txn) {
            return *known;
        }
        if memo.len() >= ALIVE_VISITS_MAX {
            return false;
        }
        let alive = if since.is_none() && self.accepted(txn) {
            // LK-5a's anchor clause: an accepted BASE transaction ends without aborting, and
            // LK-5e breaks any cycle through it (see `blockers_running`).
            true
        } else if self.locks.is_waiting(txn) {
            memo.insert(txn, false); // on the path: a cycle back here is not alive
            self.waits_for_alive(txn, now, since, memo)
        } else {
            self.txns.get(&txn).is_some_and(|t| {
                let idle = now.saturating_sub(t.last_active);
                // Its coordinator has been silent here since it last ran: that node is not
                // running, so the blocker cannot be told idle (bounded, see the constant).
                let silent = self.heard_from.get(&txn.node).is_none_or(|h| *h <= t.last_active);
                !t.prepared
                    && (idle < RUNNING_WITHIN || (silent && idle < COORDINATOR_SILENT_MAX))
                    && since.is_none_or(|s| t.last_active >= s)
            })
        };
        memo.insert(txn, alive);
        alive
    }

    /// LK-5 breaks the waits of `txn`: they step out of their queues if it is lock-free
    /// (LK-5h, [`Self::steps_out`]), else its waiting operations abort.
    fn break_waits(&mut self, txn: TxnId, ctx: &mut PartCtx) {
        if !self.steps_out(txn, ctx.now) {
            return self.abort_waiting(txn, ctx);
        }
        let grants = self.locks.cancel_waits(txn);
        for p in self.parked.values_mut().filter(|p| p.unit.txn == txn && !p.stepped_out) {
            let lock = p.waiting_for.take().expect("checked by steps_out");
            if lock.3 {
                p.short.pop();
            }
            p.locks.push_front(lock);
            p.stepped_out = true;
            p.out_since.get_or_insert(ctx.now);
        }
        self.resume(grants, ctx);
    }

    /// LK-5h: whether the waits of `txn` step out of their queues instead of aborting
    /// it. It must be lock-free ([`TxnClass::lock_free`]: every operation so far takes only
    /// short-term locks, so it holds none between operations), and each waiting operation must
    /// hold no lock but the one it waits for, and have stepped out first less than
    /// [`STEP_OUT_MAX`] ago. Then dropping its waits breaks every cycle through it, and it
    /// loses only its places in the queues: it asks again on the next tick
    /// ([`Self::retry_stepped_out`]). A TPC-C Stock-Level, whose ~200 stock reads are
    /// read-committed (clause 3.4.0.1), died for every wait behind an accepted BASE New-Order
    /// that itself waited, or on a stock row carrying remote dependencies.
    fn steps_out(&self, txn: TxnId, now: Time) -> bool {
        self.lock_free(txn)
            && self.parked.values().filter(|p| p.unit.txn == txn && !p.stepped_out).all(|p| {
                p.waiting_for.as_ref().is_some_and(|l| p.short.len() == usize::from(l.3)) && p.may_step_out_at(now)
            })
    }

    /// LK-5h: `txn` is lock-free as far as its latest operation here says
    /// ([`TxnClass::lock_free`]; never a BASE transaction).
    fn lock_free(&self, txn: TxnId) -> bool {
        self.txns.get(&txn).is_some_and(|t| t.class.lock_free)
    }

    /// LK-5h for an operation refused its next lock at once (`Decision::Die`: a lock whose
    /// release waits for remote reads, a full queue): whether it steps out and asks again next
    /// tick instead. Only a lock-free transaction's operation that holds no lock yet (see
    /// [`Self::steps_out`]), for at most [`STEP_OUT_MAX`].
    ///
    /// Not any ACID request refused because whom it would wait for cannot be known (a BASE
    /// write held back by the writer's reads on another partition): that helps TPC-C
    /// Deliveries on customer rows remote Payments wrote, but starves bank totals
    /// (`bank_check_passes_on_an_intact_bank_and_compares_totals` sees none finish), even with
    /// the asking bounded to the patience — presumably a total's range locks on every
    /// partition, held meanwhile, keep out the transfers that would settle those reads. Not a
    /// BASE operation either: asking again, one broke a `salt-local` TPC-C check (a Payment's
    /// `d_ytd` counted without its `w_ytd` and HISTORY row; cause not traced).
    fn may_step_out(&self, p: &Parked, now: Time) -> bool {
        self.lock_free(p.unit.txn) && p.short.is_empty() && p.may_step_out_at(now)
    }

    /// LK-5h, every tick: operations that stepped out of their queues ask again.
    fn retry_stepped_out(&mut self, ctx: &mut PartCtx) {
        let out: Vec<u64> = self.parked.iter().filter(|(_, p)| p.stepped_out).map(|(t, _)| *t).collect();
        for token in out {
            if let Some(mut p) = self.parked.remove(&token) {
                p.stepped_out = false;
                self.advance(p, ctx);
            }
        }
    }

    /// LK-5: aborts the waiting operations of `txn` with `AbortReason::Deadlock` (the
    /// coordinator then aborts the transaction); its waits are dropped and whoever queued
    /// behind them resumes.
    fn abort_waiting(&mut self, txn: TxnId, ctx: &mut PartCtx) {
        let grants = self.locks.cancel_waits(txn);
        let tokens: Vec<u64> = self.parked.iter().filter(|(_, p)| p.unit.txn == txn).map(|(t, _)| *t).collect();
        for token in tokens {
            let p = self.parked.remove(&token).expect("listed just now");
            die(p, self.state.incarnation, ctx);
        }
        self.resume(grants, ctx);
    }

    /// LK-5b: tell the coordinators of the older transactions an accepted BASE
    /// transaction waits for to abort them; with `all` (LK-5e), of every transaction it
    /// waits for that can still abort, younger ones too.
    ///
    /// A lock-free victim waiting here (LK-5h) is in the way only by its place in a queue: it
    /// steps out instead ([`Self::break_waits`]), and its transaction goes on. Wounded, TPC-C
    /// Stock-Levels queued on stock rows ahead of accepted New-Orders would die often.
    fn wound_blockers(&mut self, txn: TxnId, all: bool, ctx: &mut PartCtx) {
        for victim in self.wound_victims(txn, all) {
            let waits_here = self.parked.values().any(|p| p.unit.txn == victim && !p.stepped_out);
            if waits_here && self.steps_out(victim, ctx.now) {
                self.break_waits(victim, ctx);
            } else {
                ctx.reply(Addr::Coordinator(victim.node), Reply::Wound { txn: victim });
            }
        }
    }

    /// Whom [`Self::wound_blockers`] wounds: LK-5b, the older transactions `txn` waits for;
    /// LK-5e (`all`, once it has waited [`RUNNING_WITHIN`]), every one it waits for that is
    /// not an accepted BASE transaction (those cannot abort; LK-5d handles cycles of them).
    ///
    /// Neither wounds an accepted BASE transaction (LK-5g): it cannot abort, and its
    /// coordinator drops the wound; and the sweep repeats wounds every [`QUERY_INTERVAL`]
    /// while the wounder waits, so accepted Payments queued behind older accepted Payments
    /// would send useless messages by the thousand under load.
    fn wound_victims(&self, txn: TxnId, all: bool) -> Vec<TxnId> {
        let mortal = |b: &TxnId| *b != txn && !self.accepted(*b);
        let set = if all { self.locks.waits_for_set(txn) } else { None };
        let victims = match set {
            Some(set) => set.into_iter().collect(),
            None => self.locks.wound_targets(txn),
        };
        victims.into_iter().filter(mortal).collect()
    }

    /// Runs the operations whose locks were granted. Every lock release goes through here: first
    /// it logs that held-back locks of ended BASE transactions are gone, so that a restart never
    /// relocks them next to what they kept out.
    fn resume(&mut self, grants: Vec<Grant>, ctx: &mut PartCtx) {
        // Only a transaction whose releasing lock was freed can have just lost its last one
        // (once ended, all its locks are releasing; after a relock, `releasing_recheck`):
        // looking at every ended transaction LK-6 holds back, on every release, would cost
        // each release the whole held-back set.
        let mut candidates = self.locks.take_freed_releasing();
        if !self.releasing_recheck.is_empty() {
            candidates.extend(std::mem::take(&mut self.releasing_recheck));
            candidates.sort_unstable();
            candidates.dedup();
        }
        let freed: Vec<TxnId> = candidates
            .into_iter()
            .filter(|txn| self.state.releasing.contains_key(txn) && !self.locks.holds_any(*txn))
            .collect();
        debug_assert_eq!(
            freed,
            self.state.releasing.keys().filter(|txn| !self.locks.holds_any(**txn)).copied().collect::<Vec<_>>(),
            "every ended transaction that lost its last held-back lock is found"
        );
        for txn in freed {
            let record = Record::Released { txn };
            ctx.log(&record);
            self.apply_record(record, ctx.store);
        }
        self.answer_read_watches(ctx);
        for g in grants {
            if let Some(p) = self.parked.remove(&g.token) {
                self.advance(p, ctx);
            }
        }
    }

    /// LK-6b across partitions: answers every partition waiting for reads here that have
    /// settled meanwhile.
    fn answer_read_watches(&mut self, ctx: &mut PartCtx) {
        if self.read_watches.is_empty() {
            return;
        }
        let settled: Vec<(TxnId, u64, PartitionId)> =
            self.read_watches.iter().filter(|(txn, upto, _)| self.locks.reads_settled(*txn, *upto)).copied().collect();
        for (txn, upto, to) in settled {
            self.read_watches.remove(&(txn, upto, to));
            ctx.send_to_partition(to, Request::ReadsSettled { txn, upto });
        }
    }

    /// `AwaitReads` from partition `from`: answer now if `txn`'s reads up to `upto` are
    /// settled, else when they are.
    fn on_await_reads(&mut self, from: PartitionId, txn: TxnId, upto: u64, ctx: &mut PartCtx) {
        if self.locks.reads_settled(txn, upto) {
            ctx.send_to_partition(from, Request::ReadsSettled { txn, upto });
        } else if self.read_watches.len() < READ_WATCHES_MAX {
            self.read_watches.insert((txn, upto, from));
        }
    }

    /// Asks the partitions named by `after` to tell us when `txn`'s reads there settle.
    fn await_reads(txn: TxnId, after: &[RemoteDep], ctx: &mut PartCtx) {
        for d in after {
            ctx.send_to_partition(d.part, Request::AwaitReads { txn, upto: d.upto });
        }
    }

    fn execute(&mut self, mut p: Parked, ctx: &mut PartCtx) {
        let txn = p.unit.txn;
        let catalog = ctx.catalog; // a shared borrow of its own: the table name is for error messages only
        let table_name = catalog.table(p.op.table).map_or("", |t| t.name.as_str());
        // Read-uncommitted reads see other transactions' uncommitted writes (dirty reads are
        // what that level allows; footnote 3 of Salt §5.1).
        let dirty = match (&p.op.kind, self.txns.get(&txn).map(|t| t.class.isolation)) {
            (OpKind::Read { key, .. }, Some(litmus_core::Isolation::ReadUncommitted)) => self
                .txns
                .iter()
                .filter(|(other, _)| **other != txn)
                .filter_map(|(other, o)| Some((*other, o.buffer.get(&(p.op.table, key.clone()))?)))
                .min_by_key(|(other, _)| *other) // an exclusive lock has one holder; the min keeps replay exact
                .map(|(_, row)| row.clone()),
            _ => None,
        };
        let t = self.txns.get_mut(&txn).expect("executing a live txn");
        // Working here (LK-5a's exception) counts from when an operation last *ran*: one
        // granted after a long wait in a queue has just started working, and the queue behind
        // it must not take it for idle.
        t.last_active = ctx.now;
        let mut writes = Vec::new();
        let result = match dirty {
            Some(row) if !t.buffer.contains_key(&(p.op.table, p.op.kind.key().expect("read").clone())) => {
                Ok(PartResult::Row(row))
            }
            _ => execute_op(&p.op, &mut t.buffer, ctx.store, table_name, &mut writes),
        };
        if let (Some(n), OpKind::Scan { end, limit, .. }) = (&p.narrowed, &p.op.kind) {
            if !scan_fits_lock(&result, *limit, &n.locked_to) {
                // Rows inside the narrowed range went away before the lock was granted (a
                // Delivery ahead of this one deleted the oldest NEW-ORDER row it waited for):
                // narrow again from where the lock ends, to the next rows, and scan again
                // (scans write nothing). Only when too few rows are left is the rest of the
                // range locked — which would also wait for every insert in flight at its tail.
                // The vanished head says the table is used as a queue (`queue_tables`).
                let (from, mode, short) = (n.locked_to.clone(), n.mode, n.short);
                let next = narrowed_scan_range(ctx.store, p.op.table, &from, end.as_ref(), *limit);
                if self.queue_tables.insert(p.op.table) {
                    // First seen here: take the anchor now (later scans take it first).
                    if let OpKind::Scan { start, .. } = &p.op.kind {
                        if let Some(anchor) = self.queue_head(p.op.table, mode, short, start) {
                            p.locks.push_back(anchor);
                        }
                    }
                }
                let rest = Target::Range { start: from, end: next.clone().or_else(|| end.clone()) };
                p.locks.push_back((p.op.table, rest, mode, short));
                p.narrowed = next.map(|locked_to| Narrowed { locked_to, mode, short });
                return self.advance(p, ctx);
            }
        }
        let mut grants = Vec::new();
        for (table, target, mode) in &p.short {
            grants.extend(self.locks.release(txn, *table, target, *mode));
        }
        let mut committed = false;
        if p.local_commit && self.cfg.local {
            // Salt §6.4: a single-operation alkaline subtransaction commits here and now.
            if let Ok(r) = &result {
                let writes = std::mem::take(&mut t.buffer)
                    .into_iter()
                    .map(|((table, key), row)| WriteImage { table, key, row })
                    .collect::<Vec<_>>();
                grants.extend(self.locks.downgrade_alkaline(txn));
                grants.extend(self.locks.release_non_saline(txn));
                let saline = self.saline_of(txn);
                let results = vec![(p.id.op, r.clone())];
                self.log_commit(p.unit, writes, saline, results, ctx);
                committed = true;
            } else {
                t.buffer.clear();
                grants.extend(self.locks.release_non_saline(txn));
            }
        }
        if !committed && p.unit.sub > 0 && result.is_ok() {
            self.log_locked(p.unit, ctx);
        }
        let base = p.unit.sub > 0;
        if base && !p.after.is_empty() {
            Self::await_reads(txn, &p.after, ctx);
        }
        let read_taint = if base { self.locks.read_taint(txn) } else { None };
        let r = Reply::Op {
            id: p.id,
            attempt: p.attempt,
            result,
            writes: if committed { vec![] } else { writes },
            committed,
            read_taint,
            incarnation: self.state.incarnation,
        };
        ctx.reply(p.from, r);
        self.resume(grants, ctx);
    }

    /// After an operation of BASE subtransaction `unit`: logs its locks (`Record::Locked`) —
    /// its alkaline locks, and saline ones not durable yet: a short-term read that LK-6a
    /// holds back is saline already, and a later write's release order depends on it. (Saline
    /// locks of committed subtransactions are in their `Commit` record.) Logged as the change
    /// from what the unit's earlier operations logged (`State::pending`), not the whole list
    /// again (`lock::LockDelta`), and only while it holds an alkaline lock.
    ///
    /// The unit's first record walks all the transaction's locks; later ones look only at the
    /// locks that changed since the previous one (`LockManager::take_changes`), so an
    /// operation costs what it changed, not what the unit holds (the walk, with the durable
    /// check per lock, is a visible cost in a salt TPC-C profile). Both give the same
    /// record: which locks are selected depends, besides the locks, only on the durable saline
    /// set, and that changes only with records that also end the unit's `pending` entry.
    fn log_locked(&mut self, unit: Unit, ctx: &mut PartCtx) {
        let txn = unit.txn;
        let durable = self.state.saline.get(&txn);
        let keep = |l: &HeldLockView| {
            l.mode.class == LockClass::Alkaline || !durable.is_some_and(|d| d.iter().any(|x| l.is(x)))
        };
        let logged = self.state.pending.get(&unit);
        let followed = logged.is_some() && self.locks_followed.get(&txn) == Some(&unit.sub);
        let changes = if followed { self.locks.take_changes(txn) } else { None };
        let logged = logged.map_or(&[][..], Vec::as_slice);
        let is_alkaline = |l: &HeldLock| l.mode.class == LockClass::Alkaline;
        let (delta, alkaline) = match changes {
            Some(changes) => {
                let delta = self.locks.delta_of_changes(&changes, logged, keep);
                let alkaline = delta.added.iter().any(is_alkaline)
                    || logged.iter().any(|l| is_alkaline(l) && !delta.touches(l.granted));
                (delta, alkaline)
            }
            None => {
                self.locks.track_changes(txn);
                self.locks_followed.insert(txn, unit.sub);
                let mut alkaline = false;
                let now = self
                    .locks
                    .held_lock_views(txn)
                    .filter(|l| keep(l))
                    .inspect(|l| alkaline |= l.mode.class == LockClass::Alkaline);
                (LockDelta::between(logged, now), alkaline)
            }
        };
        #[cfg(debug_assertions)]
        {
            // Pair check: the record folds to what the walk of every held lock selects.
            let mut folded = logged.to_vec();
            delta.clone().apply_to(&mut folded);
            let walked: Vec<HeldLock> = {
                let mut all: Vec<HeldLock> =
                    self.locks.held_lock_views(txn).filter(|l| keep(l)).map(|l| l.to_held()).collect();
                all.sort_by_key(|l| l.granted);
                all
            };
            assert_eq!(folded, walked, "{unit:?}: the Locked delta from tracked changes folds to the held locks");
            assert_eq!(alkaline, walked.iter().any(is_alkaline), "{unit:?}: holds an alkaline lock");
        }
        if alkaline && !delta.is_empty() {
            let record = Record::Locked { unit, delta };
            ctx.log(&record);
            self.apply_record(record, ctx.store);
        } else if !alkaline {
            // Not logged: `pending` stays behind the changes just taken, so the next record
            // walks everything again.
            self.locks_followed.remove(&txn);
        }
    }

    /// Stops following `txn`'s lock changes (`locks_followed`): it ended here.
    fn unfollow(&mut self, txn: TxnId) {
        self.locks_followed.remove(&txn);
        self.locks.untrack(txn);
    }

    fn saline_of(&self, txn: TxnId) -> LockList {
        self.locks.saline_locks(txn)
    }

    /// Logs and applies a unit's commit.
    fn log_commit(
        &mut self,
        unit: Unit,
        writes: Vec<WriteImage>,
        saline: LockList,
        results: Vec<(u32, PartResult)>,
        ctx: &mut PartCtx,
    ) {
        // Each write is logged as it changes the row the writes before it left, then applied,
        // so that replaying the record in order rebuilds the same rows (`apply_record`).
        let mut logged = Vec::with_capacity(writes.len());
        for w in writes {
            let before = self.install(w.table, w.key.clone(), w.row.clone(), ctx.store);
            let image = LoggedImage::between(before.as_ref(), &w.row);
            logged.push(LoggedWrite { table: w.table, key: w.key, image });
        }
        let record = Record::CommitColumns { unit, writes: logged, saline, results };
        ctx.log(&record);
        if let Record::CommitColumns { unit, saline, results, .. } = record {
            self.committed(unit, saline, results);
        }
    }

    /// Installs a committed write at the next commit timestamp; returns the row it replaced.
    fn install(&mut self, table: TableId, key: Key, row: Option<Row>, store: &mut MvccStore) -> Option<Row> {
        self.state.last_ts = self.state.last_ts.next();
        store.replace_latest(table, key, self.state.last_ts, row)
    }

    /// What a unit's commit record says besides its writes.
    fn committed(&mut self, unit: Unit, saline: LockList, results: Vec<(u32, PartResult)>) {
        self.state.in_doubt.remove(&unit);
        self.state.pending.remove(&unit);
        if let Some(t) = self.txns.get_mut(&unit.txn).filter(|t| t.sub == unit.sub) {
            t.open = false;
        }
        if unit.sub > 0 {
            // The durable saline set changes: the next `Locked` record walks all locks.
            self.locks_followed.remove(&unit.txn);
            self.state.committed.insert(unit, results);
            self.state.saline.insert(unit.txn, saline);
        } else {
            self.state.acid_committed.insert(unit.txn);
        }
    }

    /// `ops`: see `Request::Commit` (`None`: a logged decision, never refused).
    fn on_commit(&mut self, from: Addr, unit: Unit, writes: Vec<WriteImage>, ops: Option<u32>, ctx: &mut PartCtx) {
        let txn = unit.txn;
        // A commit we applied already (a re-sent decision, a duplicated message), or one for a
        // transaction that has ended here, changes nothing.
        if self.finished.get(&txn) == Some(&false) {
            // We rolled it back (orphan timeout, epoch change) before the commit arrived.
            return ctx.reply(from, Reply::Aborted { unit });
        }
        if unit.sub == 0
            && !self.state.acid_committed.contains(&txn)
            && !self.txns.contains_key(&txn)
            && !self.state.in_doubt.contains_key(&unit)
        {
            // We hold nothing of it (we restarted before it prepared): its writes were computed
            // under locks we no longer hold, so applying them could overwrite newer ones.
            return ctx.reply(from, Reply::Aborted { unit });
        }
        // `base_ended` is durable, `finished` is not: `EndBase` goes out before every commit it
        // names is acknowledged, so a commit whose acknowledgement was lost is re-sent after
        // the transaction ended here — across our restart too, when only the durable set still
        // knows it (re-applied then, its images overwrote newer writes: `litmus sim --engine
        // salt --workload bank --faults --seed 221`).
        let done = self.state.committed.contains_key(&unit)
            || self.finished.contains_key(&txn)
            || self.state.base_ended.contains(&txn)
            || self.state.acid_committed.contains(&txn);
        if !done && ops.is_some_and(|n| !self.txns.get(&txn).is_some_and(|t| t.sub == unit.sub && t.ops == n)) {
            // We restarted after some of its operations ran here (their locks are gone): a
            // later one started a fresh record. The coordinator rolls the transaction back.
            return ctx.reply(from, Reply::Aborted { unit });
        }
        if !done {
            let mut grants = Vec::new();
            if unit.sub == 0 {
                grants.extend(self.locks.cancel_waits(txn));
                grants.extend(self.locks.release_all(txn));
                self.txns.remove(&txn);
                self.parked.retain(|_, p| p.unit.txn != txn);
                self.log_commit(unit, writes, vec![], vec![], ctx);
                self.remember_finished(txn, true);
            } else {
                grants.extend(self.locks.downgrade_alkaline(txn));
                grants.extend(self.locks.release_non_saline(txn));
                if let Some(t) = self.txns.get_mut(&txn) {
                    t.buffer.clear();
                    t.prepared = false;
                }
                let saline = self.saline_of(txn);
                self.log_commit(unit, writes, saline, vec![], ctx);
            }
            self.resume(grants, ctx);
        }
        ctx.reply(from, Reply::Committed { unit });
    }

    /// `ops`: see `Request::Prepare`. A unit prepared already (a duplicated `Prepare`, or one
    /// relocked after our restart) votes yes again: its locks are durable.
    fn on_prepare(&mut self, from: Addr, unit: Unit, ops: u32, ctx: &mut PartCtx) {
        let vote = match self.txns.get_mut(&unit.txn) {
            Some(t)
                if t.sub == unit.sub
                    && (t.prepared || t.ops == ops)
                    && !self.parked.values().any(|p| p.unit == unit) =>
            {
                t.prepared = true;
                let node = unit.txn.node;
                let locks = self.locks.held_locks(unit.txn);
                let record = Record::Prepared { unit, coordinator: node, locks };
                ctx.log(&record);
                self.apply_record(record, ctx.store);
                self.prepared_at.entry(unit).or_insert(ctx.now); // a duplicated Prepare keeps the first time
                Ok(())
            }
            _ => Err(Error::Abort(AbortReason::Failure)), // we lost it (restart, orphan timeout)
        };
        ctx.reply(from, Reply::Prepared { unit, vote });
    }

    fn on_abort(&mut self, from: Option<Addr>, unit: Unit, ctx: &mut PartCtx) {
        let txn = unit.txn;
        let mut grants = self.locks.cancel_waits(txn);
        self.parked.retain(|_, p| p.unit.txn != txn);
        if self.state.in_doubt.contains_key(&unit) || self.state.pending.contains_key(&unit) {
            let record = Record::Aborted { unit };
            ctx.log(&record);
            self.apply_record(record, ctx.store);
        }
        if unit.sub == 0 {
            grants.extend(self.locks.release_all(txn));
            self.txns.remove(&txn);
            self.remember_finished(txn, false);
        } else {
            grants.extend(self.locks.release_non_saline(txn));
            if let Some(t) = self.txns.get_mut(&txn) {
                t.buffer.clear();
                t.prepared = false;
                if t.sub <= unit.sub {
                    t.open = false;
                }
            }
            // What the rolled-back subtransaction read may still be held back by LK-6a, and a
            // later write of the transaction may depend on it (LK-6b): keep it durable.
            // Only while it lives here: a late abort of an ended transaction must not bring its
            // (released or releasing) locks back for a restart to relock.
            let ended = self.state.base_ended.contains(&txn) || self.finished.contains_key(&txn);
            let saline = self.saline_of(txn);
            if !ended && self.state.saline.get(&txn).map_or(!saline.is_empty(), |s| *s != saline) {
                let record = Record::Saline { txn, locks: saline };
                ctx.log(&record);
                self.apply_record(record, ctx.store);
            }
        }
        self.resume(grants, ctx);
        if let Some(from) = from {
            ctx.reply(from, Reply::Aborted { unit });
        }
    }

    /// An `Abort` of BASE subtransaction `unit` of run `attempt`: its operations that arrive
    /// later are stale (see `State::base_aborted`), durably — a restart in between must not let
    /// a late one take locks. Logged only when it moves the mark (aborts are rare).
    fn remember_base_abort(&mut self, unit: Unit, attempt: u32, ctx: &mut PartCtx) {
        let txn = unit.txn;
        if self.state.base_ended.contains(&txn) || self.finished.contains_key(&txn) {
            return;
        }
        if self.state.base_aborted.get(&txn).is_some_and(|&a| a >= (attempt, unit.sub)) {
            return;
        }
        let record = Record::BaseAborted { txn, attempt, sub: unit.sub };
        ctx.log(&record);
        self.apply_record(record, ctx.store);
    }

    fn on_end_base(&mut self, txn: TxnId, ctx: &mut PartCtx) {
        // Its coordinator waits for none of them any more.
        self.deferred.remove(&txn);
        let mut grants = self.locks.cancel_waits(txn);
        grants.extend(self.locks.release_all(txn));
        self.unfollow(txn);
        self.txns.remove(&txn);
        self.parked.retain(|_, p| p.unit.txn != txn);
        // What LK-6 holds back must come back after a restart, still held back.
        let releasing = self.locks.held_locks(txn);
        // Logged once per transaction (a repeated EndBase finds it ended), so its late
        // duplicates stay refused after a restart.
        if !self.state.base_ended.contains(&txn) || !releasing.is_empty() {
            let record = Record::BaseEnded { txn, releasing };
            ctx.log(&record);
            self.apply_record(record, ctx.store);
        }
        self.remember_finished(txn, true);
        self.resume(grants, ctx);
    }

    fn on_epoch(&mut self, node: NodeId, epoch: u32, ctx: &mut PartCtx) {
        if self.epochs.get(&node).is_some_and(|&e| e >= epoch) {
            return;
        }
        self.epochs.insert(node, epoch);
        // Unprepared ACID work of a dead incarnation can still abort: roll it back. BASE work
        // is left in place — a subtransaction whose operations ran here may have been decided
        // just before the crash (its commit will be re-sent, and its row images are only
        // correct while we keep its locks), and an accepted transaction is rolled forward (its
        // new run supersedes what is here). The sweep asks the coordinator about the rest
        // (`Reply::QueryBase`): one it never logged is ended.
        let stale: Vec<TxnId> = self
            .txns
            .iter()
            .filter(|(id, t)| id.node == node && id.epoch < epoch && !t.prepared && !t.class.base)
            .map(|(id, _)| *id)
            .collect();
        let stale = sorted(stale);
        for txn in stale {
            self.on_abort(None, Unit { txn, sub: 0 }, ctx);
        }
    }

    fn sweep(&mut self, ctx: &mut PartCtx) {
        if ctx.now.saturating_sub(self.last_sweep) < QUERY_INTERVAL {
            return;
        }
        self.last_sweep = ctx.now;
        self.prepared_at.retain(|unit, _| self.state.in_doubt.contains_key(unit));
        for (unit, (node, _)) in &self.state.in_doubt {
            if self.prepared_at.get(unit).is_some_and(|&at| ctx.now.saturating_sub(at) < IN_DOUBT_QUERY_AFTER) {
                continue;
            }
            ctx.reply(Addr::Coordinator(*node), Reply::Query { unit: *unit });
        }
        // BASE transactions of dead coordinator incarnations: still alive?
        let orphaned_base: BTreeSet<TxnId> = self
            .txns
            .iter()
            .filter(|(id, t)| t.class.base && self.epochs.get(&id.node).is_some_and(|&e| e > id.epoch))
            .map(|(id, _)| *id)
            .collect();
        for txn in orphaned_base {
            ctx.reply(Addr::Coordinator(txn.node), Reply::QueryBase { txn });
        }
        // LK-6b across partitions: ask again about remote reads that held-back locks still
        // wait for (the first question, or its answer, may be lost, or the answering partition
        // restarted and forgot it).
        for (txn, dep, releasing) in self.locks.remote_pending() {
            if releasing {
                Self::await_reads(txn, &[dep], ctx);
            }
        }
        // Wounds may be lost: repeat them while an accepted BASE transaction still waits.
        let waiting: BTreeMap<TxnId, bool> =
            self.parked.values().filter(|p| p.wounded).fold(BTreeMap::new(), |mut m, p| {
                *m.entry(p.unit.txn).or_insert(false) |= p.wounded_all;
                m
            });
        for (txn, all) in waiting {
            self.wound_blockers(txn, all, ctx);
        }
        let orphans: Vec<TxnId> = self
            .txns
            .iter()
            .filter(|(_, t)| !t.prepared && !t.class.base && ctx.now.saturating_sub(t.last_active) > ORPHAN_TIMEOUT)
            .map(|(id, _)| *id)
            .collect();
        for txn in sorted(orphans) {
            self.on_abort(None, Unit { txn, sub: 0 }, ctx);
        }
    }

    /// Applies a record to the store and the durable bookkeeping (live and on replay).
    fn apply_record(&mut self, record: Record, store: &mut MvccStore) {
        match record {
            Record::Commit { unit, writes, saline, results } => {
                for w in writes {
                    self.install(w.table, w.key, w.row, store);
                }
                self.committed(unit, saline, results);
            }
            Record::CommitColumns { unit, writes, saline, results } => {
                // `apply_bytes` resolves these first; a record built here resolves by construction.
                let writes = full_images(writes, store).expect("a logged column image follows the row it changed");
                for w in writes {
                    self.install(w.table, w.key, w.row, store);
                }
                self.committed(unit, saline, results);
            }
            Record::Prepared { unit, coordinator, locks } => {
                self.state.in_doubt.insert(unit, (coordinator, locks));
            }
            Record::Aborted { unit } => {
                self.state.in_doubt.remove(&unit);
                self.state.pending.remove(&unit);
            }
            Record::Locked { unit, delta } => {
                delta.apply_to(self.state.pending.entry(unit).or_default());
            }
            Record::Released { txn } => {
                self.state.releasing.remove(&txn);
            }
            Record::Saline { txn, locks } => {
                self.locks_followed.remove(&txn);
                if locks.is_empty() {
                    self.state.saline.remove(&txn);
                } else {
                    self.state.saline.insert(txn, locks);
                }
            }
            Record::Incarnation { n } => self.state.incarnation = n,
            Record::BaseAborted { txn, attempt, sub } => {
                let mark = self.state.base_aborted.entry(txn).or_default();
                *mark = (*mark).max((attempt, sub));
            }
            Record::BaseEnded { txn, releasing } => {
                self.locks_followed.remove(&txn);
                self.state.base_ended.insert(txn);
                self.state.saline.remove(&txn);
                if !releasing.is_empty() {
                    self.state.releasing.insert(txn, releasing);
                }
                self.state.pending.retain(|u, _| u.txn != txn);
                self.state.committed.retain(|u, _| u.txn != txn);
                self.state.base_aborted.remove(&txn);
            }
        }
    }
}

/// What an operation must lock before it runs (see [`LockingPartition::lock_plan`]).
struct LockPlan {
    /// Locks to acquire, in order, with "short-term" flags.
    locks: VecDeque<(TableId, Target, LockMode, bool)>,
    narrowed: Option<Narrowed>,
}

/// A limited scan's range lock, narrowed to `[start, locked_to)` (see [`narrowed_scan_range`]).
#[derive(Debug)]
struct Narrowed {
    locked_to: Key,
    mode: LockMode,
    short: bool,
}

/// Next-key narrowing of a limited scan's range lock (LK-4). A scan of `[start, end)`
/// that returns at most `limit` rows reads only up to its `limit`-th row `k`, so it needs
/// `[start, k]` locked, not the whole range: an insert after `k` cannot change its result (a
/// TPC-C Delivery reads the *oldest* NEW-ORDER row of a district, and New-Orders append at the
/// tail). `k` is guessed from the committed data before the lock is taken; writes inside
/// `[start, k]` then wait for the lock, so the guess stays right unless rows there were deleted
/// (or the scan's own writes moved its result) in the meantime — [`scan_fits_lock`] checks the
/// result after the scan runs, and if it does not fit, the rest of the range is locked and the
/// scan runs again. Returns the exclusive end of the narrowed range (the successor of `k`), or
/// `None` if there are fewer than `limit` rows (lock the whole range).
fn narrowed_scan_range(store: &MvccStore, table: TableId, start: &Key, end: Option<&Key>, limit: u32) -> Option<Key> {
    if limit == 0 {
        return None;
    }
    let hi = end.map_or(Bound::Unbounded, Bound::Excluded);
    let keys = store.scan_keys(table, Bound::Included(start), hi, Timestamp::MAX, limit as usize);
    if keys.len() < limit as usize {
        return None;
    }
    let last = keys.last()?;
    let mut successor = last.as_bytes().to_vec();
    successor.push(0); // the smallest key greater than `last`
    let successor = Key::from(successor);
    // `last < end`, so `successor <= end`; equal means the whole range after all.
    (end != Some(&successor)).then_some(successor)
}

/// A scan's result is what the whole range would give iff it holds `limit` rows, all inside
/// the locked prefix `[start, locked_to)`.
fn scan_fits_lock(result: &Result<PartResult, Error>, limit: u32, locked_to: &Key) -> bool {
    match result {
        Ok(PartResult::Rows(rows)) => rows.len() == limit as usize && rows.last().is_some_and(|(k, _)| k < locked_to),
        _ => true, // an error: nothing was read
    }
}

/// The transaction of a kept request (an operation, an abort or an `EndBase`).
fn req_txn(req: &Request) -> TxnId {
    match req {
        Request::Op { unit, .. } | Request::Abort { unit, .. } => unit.txn,
        Request::EndBase { txn, .. } => *txn,
        _ => unreachable!("only operations, aborts and EndBase are kept"),
    }
}

/// LK-5: answers a parked operation's request with `AbortReason::Deadlock`; the
/// coordinator aborts the transaction (retryably). Its waits must be gone from the lock table.
fn die(p: Parked, incarnation: u64, ctx: &mut PartCtx) {
    let e = Error::Abort(AbortReason::Deadlock);
    ctx.reply(p.from, Reply::op_failed(p.id, p.attempt, e, incarnation));
}

/// A [`Record::CommitColumns`]'s writes as whole images: each resolved against the row the
/// writes before it in the record leave (the store's, for a key's first write in it). A column
/// image that finds no row of its width is a typed error.
fn full_images(writes: Vec<LoggedWrite>, store: &MvccStore) -> Result<Vec<WriteImage>, Error> {
    let mut images: Vec<WriteImage> = Vec::with_capacity(writes.len());
    let mut latest: FxHashMap<(TableId, Key), usize> = FxHashMap::default();
    for w in writes {
        let before = match latest.get(&(w.table, w.key.clone())) {
            Some(&i) => images[i].row.as_ref(),
            None => store.latest(w.table, &w.key).and_then(|(_, row)| row),
        };
        let Some(row) = w.image.resolve(before) else {
            return Err(Error::Storage(format!(
                "locking log record: a column image of table {} finds no row of its width to apply to",
                w.table
            )));
        };
        latest.insert((w.table, w.key.clone()), images.len());
        images.push(WriteImage { table: w.table, key: w.key, row });
    }
    Ok(images)
}

/// Runs one operation against the store overlaid with the unit's own buffered writes. Writes go
/// to the buffer and their images to `writes`; nothing touches the store.
fn execute_op(
    op: &PartOp,
    buffer: &mut BTreeMap<(TableId, Key), Option<Row>>,
    store: &MvccStore,
    table_name: &str,
    writes: &mut Vec<WriteImage>,
) -> Result<PartResult, Error> {
    let table = op.table;
    let current = |buffer: &BTreeMap<(TableId, Key), Option<Row>>, key: &Key| -> Option<Row> {
        // Most reads come before the unit's first write (TPC-C reads its rows, then writes):
        // with nothing buffered there is no key to copy into a lookup.
        if !buffer.is_empty() {
            if let Some(r) = buffer.get(&(table, key.clone())) {
                return r.clone();
            }
        }
        store.latest(table, key).and_then(|(_, r)| r.cloned())
    };
    let image = match &op.kind {
        OpKind::Read { key, .. } | OpKind::ReadForUpdate { key } => return Ok(PartResult::Row(current(buffer, key))),
        OpKind::ReadMany { keys } => {
            return Ok(PartResult::Many(keys.iter().map(|(i, k)| (*i, current(buffer, k))).collect()))
        }
        OpKind::WriteMany { writes: batch } => {
            // All or nothing: computed first, applied only if every write succeeds.
            let images = write_images(batch, |k| current(buffer, k), || table_name.to_string())?;
            for (key, image) in images {
                buffer.insert((table, key.clone()), image.clone());
                writes.push(WriteImage { table, key, row: image });
            }
            return Ok(PartResult::Done);
        }
        OpKind::Scan { start, end, limit } => {
            let hi = end.as_ref().map_or(Bound::Unbounded, Bound::Excluded);
            let own: Vec<(Key, Option<Row>)> = buffer
                .range((table, start.clone())..)
                .take_while(|((t, k), _)| *t == table && end.as_ref().is_none_or(|e| k < e))
                .map(|((_, k), r)| (k.clone(), r.clone()))
                .collect();
            let stored = store.scan(table, Bound::Included(start), hi, Timestamp::MAX, *limit as usize + own.len());
            return Ok(PartResult::Rows(overlay_scan(stored, own, *limit as usize)));
        }
        kind => write_image(kind, current(buffer, kind.key().expect("point write")), || table_name.to_string())?,
    };
    let key = op.kind.key().expect("point write").clone();
    buffer.insert((table, key.clone()), image.clone());
    writes.push(WriteImage { table, key, row: image });
    Ok(PartResult::Done)
}

impl LockingPartition {
    /// Ordering within a BASE transaction: is `unit` (an operation or an abort of it) behind an
    /// earlier subtransaction of its transaction whose operations ran here and whose commit or
    /// abort has not arrived? The coordinator goes on to the next subtransaction as soon as it
    /// has logged a subtransaction's decision, and its messages can overtake the commit (a
    /// reordering network, or a resend after our restart). Run first, the operation would
    /// lock beside the earlier subtransaction's alkaline locks, and the commit that arrives
    /// then would downgrade the new ones with them (`downgrade_alkaline` is per transaction) —
    /// or an abort of the later subtransaction would release the earlier one's locks before
    /// its row images are applied (a lost update). A `Locked` record stands for the earlier
    /// subtransaction across our restarts; `PTxn::open` for one that logged none.
    fn after_undecided_sub(&self, unit: Unit) -> bool {
        if unit.sub <= 1 {
            return false;
        }
        let txn = unit.txn;
        let logged = self.state.pending.range(Unit { txn, sub: 1 }..Unit { txn, sub: unit.sub }).next().is_some();
        logged || self.txns.get(&txn).is_some_and(|t| t.open && t.sub < unit.sub)
    }

    /// Must `req` wait for a commit (or abort) of an earlier subtransaction of its transaction?
    /// Operations and aborts: [`LockingPartition::after_undecided_sub`]. `EndBase`: for the
    /// commits it names that have not been applied here.
    fn must_wait(&self, req: &Request) -> bool {
        match req {
            Request::Op { unit, .. } | Request::Abort { unit, .. } => self.after_undecided_sub(*unit),
            Request::EndBase { txn, after } => {
                let ended = self.state.base_ended.contains(txn) || self.finished.contains_key(txn);
                !ended && after.iter().any(|&sub| !self.state.committed.contains_key(&Unit { txn: *txn, sub }))
            }
            _ => false,
        }
    }

    /// Keeps `req` until the commit or abort it waits for; a resent operation (or `EndBase`)
    /// already kept is not kept twice (an operation run twice would be failed as answered).
    fn defer(&mut self, from: Addr, req: Request) {
        let kept = self.deferred.entry(req_txn(&req)).or_default();
        let same = |r: &Request| match (r, &req) {
            (Request::Op { id: a, attempt: x, .. }, Request::Op { id: b, attempt: y, .. }) => a == b && x == y,
            (Request::EndBase { .. }, Request::EndBase { .. }) => true,
            _ => false,
        };
        if !kept.iter().any(|(_, r)| same(r)) {
            kept.push((from, req));
        }
    }

    /// Runs, in arrival order, what was kept for `txn` and is no longer behind an undecided
    /// subtransaction.
    fn release_deferred(&mut self, txn: TxnId, ctx: &mut PartCtx) {
        let Some(kept) = self.deferred.remove(&txn) else { return };
        for (from, req) in kept {
            if self.must_wait(&req) {
                self.defer(from, req);
            } else {
                self.dispatch(from, req, ctx);
            }
        }
    }

    fn dispatch(&mut self, from: Addr, req: Request, ctx: &mut PartCtx) {
        match req {
            Request::Op { id, unit, attempt, class, op, local_commit, after, resent, incarnation } => {
                let req = OpRequest { id, unit, attempt, class, op, local_commit, after, resent, incarnation };
                self.on_op(from, req, ctx)
            }
            Request::Commit { unit, writes, ops } => self.on_commit(from, unit, writes, ops, ctx),
            Request::Decision { unit, commit: true, writes } => self.on_commit(from, unit, writes, None, ctx),
            Request::Decision { unit, commit: false, .. } => self.on_abort(None, unit, ctx),
            Request::Prepare { unit, ops } => self.on_prepare(from, unit, ops, ctx),
            Request::Abort { unit, attempt } => {
                if unit.sub > 0 {
                    self.remember_base_abort(unit, attempt, ctx);
                }
                if self.txns.get(&unit.txn).is_some_and(|t| t.attempt > attempt) {
                    return ctx.reply(from, Reply::Aborted { unit });
                }
                self.on_abort(Some(from), unit, ctx)
            }
            Request::EndBase { txn, .. } => {
                self.on_end_base(txn, ctx);
                ctx.reply(from, Reply::BaseEnded { txn });
            }
            Request::Epoch { node, epoch } => self.on_epoch(node, epoch, ctx),
            Request::AwaitReads { txn, upto } => {
                if let Addr::Partition(from) = from {
                    self.on_await_reads(from, txn, upto, ctx);
                }
            }
            Request::ReadsSettled { txn, upto } => {
                if let Addr::Partition(part) = from {
                    let grants = self.locks.remote_settled(txn, RemoteDep { part, upto });
                    self.resume(grants, ctx);
                }
            }
        }
    }
}

impl PartitionEngine for LockingPartition {
    fn on_request(&mut self, from: Addr, req: Payload, ctx: &mut PartCtx) {
        if self.relock_pending {
            self.relock(ctx);
        }
        let Ok(req) = req.decode::<Request>() else { return };
        if let Addr::Coordinator(node) = from {
            self.heard_from.insert(node, ctx.now);
        }
        // Any transaction of a newer coordinator epoch tells us that incarnation restarted (the
        // `Epoch` announcement itself may have been lost).
        if let Request::Op { unit, .. } | Request::Prepare { unit, .. } | Request::Commit { unit, .. } = &req {
            if unit.txn.epoch > self.epochs.get(&unit.txn.node).copied().unwrap_or(1) {
                self.on_epoch(unit.txn.node, unit.txn.epoch, ctx);
            }
        }
        if self.must_wait(&req) {
            return self.defer(from, req);
        }
        let decided = match &req {
            Request::Commit { unit, .. } | Request::Decision { unit, .. } | Request::Abort { unit, .. }
                if unit.sub > 0 =>
            {
                Some(unit.txn)
            }
            _ => None,
        };
        self.dispatch(from, req, ctx);
        if let Some(txn) = decided {
            self.release_deferred(txn, ctx);
        }
    }

    fn on_tick(&mut self, ctx: &mut PartCtx) {
        if self.relock_pending {
            self.relock(ctx);
        }
        self.wait_clock = (self.wait_clock(ctx.now), ctx.now);
        self.retry_stepped_out(ctx);
        // Every tick, not in the rate-limited sweep: the patience is a few ticks.
        self.abort_impatient(ctx);
        self.sweep(ctx);
    }

    fn apply_bytes(&mut self, record: &[u8], store: &mut MvccStore) -> Result<(), Error> {
        let record = match decode_record("locking", record)? {
            // Resolved before anything is applied: a column image with no row under it (a log
            // that does not belong to this store) is a typed error that changes nothing.
            Record::CommitColumns { unit, writes, saline, results } => {
                Record::Commit { unit, writes: full_images(writes, store)?, saline, results }
            }
            record => record,
        };
        self.apply_record(record, store);
        self.relock_pending = true;
        Ok(())
    }

    fn check_invariants(&self) -> Result<(), String> {
        self.locks.check_invariants().map_err(|e| format!("lock manager: {e}"))
    }

    fn encode_state(&self) -> Vec<u8> {
        postcard::to_stdvec(&self.state).expect("serialize")
    }

    fn decode_state(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.state = postcard::from_bytes(bytes).map_err(|e| Error::Storage(format!("locking state: {e}")))?;
        self.relock_pending = true;
        Ok(())
    }
}

#[cfg(test)]
#[path = "partition_tests.rs"]
mod tests;
