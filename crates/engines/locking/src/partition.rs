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

mod decisions;
mod execute;
mod waits;

/// `txns` in a stable order (the map's iteration order depends on its history).
fn sorted(mut txns: Vec<TxnId>) -> Vec<TxnId> {
    txns.sort_unstable();
    txns
}

/// How many finished transactions a partition remembers, to ignore their late messages.
pub const FINISHED_MEMORY_MAX: usize = 100_000;
/// LK-7: an unprepared ACID transaction with no message for this long is rolled back here:
/// its coordinator is gone or cut off, or its abort was lost (it can still abort, so this is
/// safe). "No message" counts [`Request::Alive`]: a transaction busy elsewhere (a scan of the
/// other partitions) or waiting for its client keeps what it holds here while its coordinator
/// says it is alive ([`ORPHAN_ASK_AFTER`]).
pub const ORPHAN_TIMEOUT: Duration = Duration::from_secs(2);
/// LK-7: after this long without a message, a participant asks the coordinator of an
/// unprepared ACID transaction whether it is alive (`Reply::QueryIdle`), every
/// [`QUERY_INTERVAL`], until it hears, rolls it back, or the transaction goes on.
pub const ORPHAN_ASK_AFTER: Duration = Duration::from_millis(500);
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
    /// LK-7: when its coordinator last said it is alive (`Request::Alive`). Only the orphan
    /// timeout counts it: an idle transaction is alive, not running (LK-5a's exception judges
    /// blockers by `last_active`).
    vouched: Time,
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
    /// When its first operation reached this incarnation (a leadership change loses what an
    /// unprepared transaction holds here: see [`PartitionEngine::volatile_since`]).
    since: Time,
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
                vouched: now,
                seen: BTreeSet::new(),
                ops: 0,
                recovered,
                since: now,
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
            vouched: ctx.now,
            seen: BTreeSet::new(),
            ops: 0,
            recovered: false,
            since: ctx.now,
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
            Request::Alive { txn } => {
                if let Some(t) = self.txns.get_mut(&txn).filter(|t| !t.prepared) {
                    t.vouched = ctx.now;
                }
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
    fn volatile_since(&self) -> Option<Time> {
        self.txns.values().filter(|t| !t.prepared).map(|t| t.since).min()
    }

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
