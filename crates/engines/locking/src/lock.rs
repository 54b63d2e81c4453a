//! # The lock manager: ACID, alkaline and saline locks (Salt §5–§6)
//!
//! One [`LockManager`] per partition. It is a pure state machine: no I/O, no clock, no threads,
//! deterministic iteration (hash maps only for lookups; what is walked is a `BTreeMap`, a
//! `BTreeSet` or a `Vec`). It never blocks: [`LockManager::acquire`]
//! answers [`Decision::Granted`], [`Decision::Waiting`] or [`Decision::Die`], and every call that
//! can unblock someone returns the [`Grant`]s of requests that were `Waiting` and now hold their
//! lock (identified by the caller's `token`). The caller resumes those operations.
//!
//! ## LK-1 — conflicts (Salt §5.1, Table 2)
//!
//! Three lock classes, each with read and write locks. [`compatible`] is Table 2, one pure
//! function (`RangeRead` behaves as `Read`):
//!
//! ```text
//!              ACID-R  ACID-W  alka-R  alka-W  saline-R  saline-W
//!   ACID-R       ✓       ✗       ✓       ✗        ✓         ✗
//!   ACID-W       ✗       ✗       ✗       ✗        ✗         ✗
//!   alka-R       ✓       ✗       ✓       ✗        ✓         ✓
//!   alka-W       ✗       ✗       ✗       ✗        ✓         ✓
//!   saline-R     ✓       ✗       ✓       ✓        ✓         ✓
//!   saline-W     ✗       ✗       ✓       ✓        ✓         ✓
//! ```
//!
//! Read–read never conflicts; otherwise ACID conflicts with everything, alkaline with alkaline,
//! and saline with nothing but ACID. The table is symmetric. Classes are nested: every conflict
//! of a saline lock is a conflict of the alkaline lock of the same access, and every conflict of
//! an alkaline lock is one of the ACID lock ("ACID ⊒ alkaline ⊒ saline", [`LockClass::covers`]).
//!
//! ## LK-2 — re-entrancy and upgrades
//!
//! A transaction's own locks never conflict with its own requests. A request that one of the
//! transaction's held locks on the same (table, target) *covers* — same or stronger access
//! (`W` covers `R`) and a class at least as strict — is granted at once and creates no lock (so a
//! later [`LockManager::release`] of the weaker mode finds nothing and is a no-op: the stronger
//! lock stays). Anything else, an upgrade `R → W` included, is a new lock, granted under LK-3
//! like any other request. A transaction may hold several locks on one target (its `R` and its
//! `W`; two saline `W`s after two subtransactions each wrote it).
//!
//! ## LK-3 — per-object FIFO (Salt §6)
//!
//! "MySQL Cluster places operations that try to acquire locks on objects in a per-object queue in
//! lock-acquisition order; Salt leverages this mechanism to further ensure that BASE transactions
//! cannot cause ACID transactions to starve." Every request gets a number from one global
//! sequence, so "earlier" is defined across point queues and range locks. A request of `T` is
//! granted iff, on every overlapping target,
//!
//! * it is compatible with every lock held (or releasing, LK-6) by another transaction, and
//! * it need not queue behind any earlier waiting request of another transaction: it conflicts
//!   with it, or ([`must_queue_behind`]) the earlier request is a BASE read and this one a BASE
//!   write — granting the write first would change what the queued reader reads, and make the
//!   reader depend on the writer (LK-6a) after others already decided to wait behind it.
//!
//! When locks go away or weaken, the waiters on overlapping targets are re-examined in sequence
//! order and every one that now passes is granted, in one pass: a granted waiter conflicts with
//! no less than it did while waiting, so it can unblock only later requests that queued behind
//! it without conflicting (the second case above), and the same pass examines those next.
//!
//! ## LK-4 — range locks (Salt §5, Table 1: `RR ∈ 𝓛` for serializable)
//!
//! A [`Target::Range`] `[start, end)` (`end = None`: unbounded above) is used by `RangeRead` locks
//! only, and only they use it. It overlaps a key `k` when `start <= k < end`, and another range
//! when the two intersect. It conflicts (Table 2, as a read) with write locks on keys inside it,
//! so an insert, update or delete inside a scanned range waits: no phantoms. Point locks live in
//! a hash map per table, key → queue (every rule looks a key's queue up, several times per
//! request; looked up by `&Key`, no copy of the key per lookup). A table that has had a range
//! lock also keeps its locked keys in order, so that a range finds the keys inside it without
//! walking the table's queues ([`PointQueues`]); the tables only ever locked by key — most of
//! them — pay for no ordered index. Range locks live per table in a `Vec` (they are few, see
//! [`RANGE_QUEUE_LEN_MAX`]).
//!
//! ## LK-5 — deadlocks: wait-die with patience, on the owner's age
//!
//! Each owner carries an `age` (smaller = older; a retried transaction keeps its age — the
//! coordinator derives it from when the first attempt began, which a client's retry reports in
//! `RequestBody::Call::retrying_for`, and BASE re-runs keep theirs; ties are broken by `TxnId`,
//! so priorities are a total order).
//!
//! **LK-5a — queue, then die if impatient.** A request that cannot be granted looks at every
//! transaction it would wait for. If that set cannot be computed (the walk below exceeds
//! [`DEPENDENCY_WALK_MAX`]) or contains the requester itself, the requester gets
//! [`Decision::Die`] and nothing changes — the caller aborts it with `AbortReason::Deadlock`
//! ([`Decision::abort_reason`]) and retries it with the same age. Otherwise it gets
//! [`Decision::Waiting`], whether the transactions it waits for are older or younger. Pure
//! wait-die kills the younger requester at once; on a hot row held for one network round trip
//! (TPC-C's district row) nearly every requester is younger than the holder, so transactions
//! would die and retry with backoff instead of queueing for a lock that is about to go.
//!
//! Wait-die's test is kept, but applied *later*: [`LockManager::impatient`] says whether a
//! transaction has a waiting request that waits for an older transaction (or for itself). The
//! caller — the partition, every tick — aborts a mortal transaction that has waited at least
//! its *patience* (`partition::LOCK_WAIT_PATIENCE`) and is still impatient, dropping its waits
//! with [`LockManager::cancel_waits`]. Why this is safe:
//!
//! * *No deadlock outlives the patience.* Ages are a total order, so every cycle in the
//!   waits-for graph has an edge from a younger to an older transaction. That edge belongs to a
//!   request whose owner is impatient, so within the patience (plus one tick) the owner dies and
//!   the cycle is broken. A deadlock that wait-die would have prevented at once can stall its
//!   queues for about the patience; a younger request may queue behind an older one for as
//!   long, and is granted if the older one finishes in time.
//! * *No starvation.* The oldest transaction never waits for an older one, so it is never
//!   impatient and never dies for this (limits aside); retries keep their age, so a retried
//!   transaction eventually is the oldest and runs.
//! * *Edges from older to younger* are permanent waits, as under wait-die: they cannot close a
//!   cycle by themselves.
//! * The waits-for set of a waiting request only shrinks (below), so a request that was patient
//!   stays patient, and an impatient one can become patient (its older blockers finished) —
//!   then it keeps waiting and is granted.
//!
//! **LK-5b — accepted BASE transactions wound.** An accepted BASE transaction cannot be
//! aborted: its saline locks stay until it ends. If an older ACID transaction waited for such a
//! saline lock while holding a lock the BASE transaction needs, dying could not break the cycle
//! (the BASE side would die and re-run forever; found by the simulator, `litmus sim --workload
//! bank --engine salt`). So requests of accepted BASE transactions use
//! [`LockManager::acquire_immortal`]: they are never aborted for impatience, they wait, and
//! once they have waited the same patience the caller *wounds* ([`LockManager::wound_targets`])
//! the older transactions they wait for, which can abort. (Wounding at once, as this engine
//! first did, aborted a TPC-C New-Order whenever an accepted Payment's `w_ytd` update met its
//! `w_tax` read, a lock held for one round trip.) The cycle argument above holds with "dies"
//! read as "is wounded". ACID requests still wait for BASE locks in FIFO order, as in Salt
//! Fig. 3. (The partition adds LK-5e: after a longer wait it wounds younger blockers too,
//! `LockingPartition::wound_victims`; see the locking module's doc.)
//!
//! **LK-5c — local deadlocks are broken at once.** When a request starts waiting, the caller
//! asks [`LockManager::deadlock_victim`] whether the waits in this lock table now form a cycle
//! through its transaction (a bounded search). If so, the youngest member of the cycle that
//! waits for an older one — a transaction LK-5a would abort once its patience runs out — is
//! aborted now. This is what the patience costs a deadlock on one partition (the common case:
//! two transactions updating the same rows in different orders), not a stall of every queue
//! behind it; deadlocks across partitions still wait out the patience.
//!
//! *Whom a request waits for.* Its blockers' owners — and, because of LK-6, more: a lock whose
//! release is held back by release-order dependencies keeps blocking ACID requests until those
//! dependencies are released, i.e. until other transactions finish. So for a requester that
//! conflicts with the *saline* form of a blocker (which is exactly an ACID requester; every
//! non-ACID request passes a blocker once its owner downgrades it), the manager walks the
//! blocker's dependencies — for a granted lock its pending dependencies (fixed at grant), for a
//! waiting request every lock that could become its dependency when granted — and counts the
//! owners of every held lock on the way. Dependencies are fixed at grant and the FIFO rule keeps
//! new writers from slipping in before a queued reader, so this set only shrinks while the
//! requester waits: the argument above holds for the real waits-for graph (a property test
//! checks that every waiter with an edge to an older transaction is impatient, and that the
//! edges of patient waiters form no cycle). The walk is bounded by [`DEPENDENCY_WALK_MAX`].
//!
//! ## LK-6 — saline release order (Salt §5.1, Figs. 4–5; §6.3)
//!
//! Indirect dirty reads (Fig. 4: BASE₁ writes `x`; BASE₂ reads `x` and writes `y`; ACID₁ reads
//! `y`) are prevented by ordering releases:
//!
//! * **(a) read-after-write across transactions**: a BASE (alkaline or saline) read lock granted
//!   while other transactions hold BASE write locks on an overlapping target is not released
//!   before each of those write locks is — **per column**: only write locks of columns the
//!   read reads count (`LockMode::cols`; an operation's columns come from the locking
//!   partition: an update writes the columns it names, `Op::ReadColumns` reads the columns it
//!   names, anything else covers the whole row). A read of other columns cannot see what the
//!   write changed, so nothing it derives can leak it. A covering lock (LK-2) of fewer
//!   columns than a BASE request does not cover it: the request gets a lock of its own, granted
//!   at once, with the dependencies of its columns.
//! * **(b) write-after-read within a transaction**: a BASE write lock of `B` is not released
//!   before every BASE read lock that `B` requested earlier and held when the write was granted.
//!
//! A lock whose owner releases it (commit, abort, short-term release, end of the BASE
//! transaction) while some of its dependencies are still held turns into a *releasing* saline
//! lock of the same access: it still counts as held (it conflicts with ACID, LK-1) but no
//! call releases it; it goes away by itself, cascading, when its last dependency does, and the
//! grants it unblocks are returned by the call that released that dependency (Fig. 5: ACID₁'s
//! read of `y` waits until BASE₁ releases `x`, although BASE₂ ended first). ACID locks never have
//! dependencies and are always released at once.
//!
//! **Across partitions**. Rule (a) is about one object, so one lock table sees it.
//! Rule (b) is not: BASE₂ may read `x` on partition P and write `y` on Q, and Q's lock table
//! knows nothing of P's. So a BASE write lock can also carry *remote* dependencies
//! ([`RemoteDep`]: "the transaction's reads on P with grant numbers up to `upto`"), counted in
//! its pending count like local ones ([`LockManager::acquire_after`]). They are *settled* when
//! none of those reads still depends (rule (a)) on a write lock that is held: P answers
//! [`LockManager::reads_settled`], Q applies the answer with [`LockManager::remote_settled`].
//! Settlement is permanent (dependencies only go away; grant numbers only grow, across
//! restarts too), so questions and answers are idempotent. Only reads that depended on
//! something when they were answered ([`LockManager::read_taint`]) create remote dependencies;
//! reads of settled data never hold a write back. This is the transitive closure of §6.3's
//! direct dependencies across partitions: a chain x → y → w spanning three partitions is
//! released in order because each link waits for the settlement of the one before. A request
//! blocked by a lock with remote dependencies cannot know whom it waits for (its release
//! depends on transactions this table cannot see): as past [`DEPENDENCY_WALK_MAX`], it gets
//! [`Decision::Die`] (LK-5a) and its client retries with its age — an ACID reader of such a
//! lock retries until the remote reads settle rather than queueing (a lock-free one asks again
//! at the partition instead, the locking partition's LK-5h).
//!
//! A covered re-write (LK-2) that read something since its first write gets a lock of its
//! own carrying the new dependencies: merging them into the first lock would hold back what
//! others read of the first write behind reads made later — a release cycle.
//!
//! §6.3 keeps one pointer per saline lock to the most recent non-ACID lock on the object. Here
//! each lock stores its dependency list and a count of the pending ones, fixed when it is
//! granted; releasing a lock checks the count (O(1)) and decrements the counts of its
//! dependents. One pointer is not enough here: saline writes are compatible with each other, so
//! two BASE transactions may hold write locks on `x` at once and a reader depends on both; and a
//! range read depends on writers of several keys.
//!
//! ## Using it (the engine's side)
//!
//! * ACID transaction: [`LockManager::acquire`] with [`LockClass::Acid`]; short-term locks
//!   (Table 1, 𝓢 \ 𝓛) are released with [`LockManager::release`] when the operation completes;
//!   commit or abort: [`LockManager::release_all`].
//! * BASE transaction: acquire [`LockClass::Alkaline`] locks (Salt §5.1: "we acquire only an
//!   alkaline lock"); release short-term ones with `release` *before* the subtransaction ends.
//!   - alkaline subtransaction commits (also the §6.4 local-transaction optimization, right after
//!     its single operation): [`LockManager::downgrade_alkaline`] — long-term alkaline locks
//!     become saline, held until the BASE transaction ends (§6.4 footnote 5: saline locks are not
//!     released early). Releasing them instead would expose the BASE transaction to ACID ones.
//!   - alkaline subtransaction aborts: [`LockManager::release_non_saline`] (keeps the saline locks
//!     of earlier subtransactions).
//!   - BASE transaction ends: [`LockManager::release_all`].
//! * Partition restart: the partition persists each lock it must get back as a [`HeldLock`]
//!   with its **grant number** (the order locks were granted in, across incarnations) and
//!   relocks them with [`LockManager::acquire_recovered`] in that order. Rule-6 dependencies are
//!   fixed at grant from what is held then, so granting the survivors in their old order
//!   rebuilds exactly the dependencies among them that were still pending (a lock granted
//!   earlier and still held at the crash was held at the later grant too; one granted later
//!   was not). Locks of ended BASE transactions that LK-6 was holding back are persisted too,
//!   relocked and released again (they become *releasing* once more).
//! * Persisting a BASE subtransaction's locks after each of its operations (the partition's
//!   `Record::Locked`, a [`LockDelta`]): [`LockManager::track_changes`] makes the manager note
//!   every change to the transaction's held locks (granted, downgraded, releasing, remote
//!   dependency settled, freed); [`LockManager::take_changes`] and
//!   [`LockManager::delta_of_changes`] turn those into the next delta, at a cost proportional
//!   to the changes rather than to the locks held. [`LockManager::take_freed_releasing`] names
//!   the owners of releasing locks freed since the last call (an ended transaction's held-back
//!   locks are all releasing, so only those can have just lost their last lock).
//! * An operation that reads a value and writes another from it must hold a read lock on what it
//!   read (LK-6b only sees read locks). A blind or formula write needs only the write lock.
//! * LK-5a: a mortal transaction whose request has waited for the patience and that is
//!   [`LockManager::impatient`] is aborted (`cancel_waits`, then the abort releases the rest).
//!   LK-5b: an immortal one that waits wounds [`LockManager::wound_targets`], repeatedly.
//! * A waiting transaction that is aborted: [`LockManager::cancel_waits`] if it keeps running
//!   (an alkaline subtransaction's abort), else just `release_all`, which drops waits too.
//! * `release` with a mode the lock no longer has (an alkaline lock after `downgrade_alkaline`)
//!   or a lock that a covering lock absorbed (LK-2) is a no-op.
//!
//! ## Limits
//!
//! [`OBJECT_QUEUE_LEN_MAX`] locks and requests per key, [`RANGE_QUEUE_LEN_MAX`] range locks and
//! requests per table, [`DEPENDENCY_WALK_MAX`] locks visited by one LK-5 check. A request
//! that would exceed one gets `Die` (the caller aborts and retries it like any LK-5 victim);
//! a waiting request whose check exceeds it counts as impatient.
//!
//! ## Not implemented
//!
//! * Coverage is per exact target: a range lock does not cover a point read inside it.
//! * No lock escalation, no plain timeouts (liveness comes from LK-5 and finite transactions).
//! * Release-order dependencies live in memory; the partition persists what rebuilds them
//!   (grant order, remote dependencies in [`HeldLock::after`]; see the engine's module doc).

use litmus_core::hash::{FxHashMap, FxHashSet};
use litmus_core::{AbortReason, Access, Key, PartitionId, TableId, TxnId};
use litmus_protocol::op::ColMask;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::collections::{BTreeMap, BTreeSet};

mod invariants;
mod queues;
mod waits;

/// Most locks and waiting requests on one key.
pub const OBJECT_QUEUE_LEN_MAX: usize = 1024;
/// Most range locks and waiting range requests in one table.
pub const RANGE_QUEUE_LEN_MAX: usize = 1024;
/// Most locks one LK-5 check may visit while following release-order dependencies.
pub const DEPENDENCY_WALK_MAX: usize = 4096;
/// Most transactions one deadlock search ([`LockManager::deadlock_victim`]) visits.
pub const DEADLOCK_SEARCH_MAX: usize = 64;

/// LK-4's per-key queues: sequence numbers in increasing order, found by hashing the key.
///
/// Walked only through `ordered`: a table gets its ordered index of locked keys when its first
/// range lock is inserted and keeps it from then on (building it costs one pass over the
/// table's queues, once). A range request on a table without one (before its first range lock
/// is inserted, or when it dies) walks the table's queues instead; either way the ids found
/// are returned sorted, so which path ran never shows. Point queues are hashed, not kept in a
/// `BTreeMap<TableId, BTreeMap<Key, _>>`: each of the five or six lookups of one request would
/// descend it, comparing keys all the way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct PointQueues {
    /// A key's queue holds its first two ids inline: most keys are locked by one transaction
    /// at a time, and a vector per locked key would be an allocation per lock.
    queues: FxHashMap<TableId, FxHashMap<Key, SmallVec<[u64; 2]>>>,
    /// The keys of `queues[table]`, in order, for the tables that have had a range lock.
    ordered: FxHashMap<TableId, BTreeSet<Key>>,
}

impl PointQueues {
    fn get(&self, table: TableId, key: &Key) -> Option<&[u64]> {
        self.queues.get(&table)?.get(key).map(|q| q.as_slice())
    }

    fn push(&mut self, table: TableId, key: &Key, id: u64) {
        use std::collections::hash_map::Entry;
        match self.queues.entry(table).or_default().entry(key.clone()) {
            Entry::Occupied(mut queue) => queue.get_mut().push(id),
            Entry::Vacant(slot) => {
                slot.insert(smallvec::smallvec![id]);
                if let Some(ordered) = self.ordered.get_mut(&table) {
                    ordered.insert(key.clone());
                }
            }
        }
    }

    fn remove(&mut self, table: TableId, key: &Key, id: u64) {
        let keys = self.queues.get_mut(&table).expect("an entry is in its queue");
        let queue = keys.get_mut(key).expect("an entry is in its queue");
        queue.retain(|x| *x != id);
        if queue.is_empty() {
            keys.remove(key);
            if let Some(ordered) = self.ordered.get_mut(&table) {
                ordered.remove(key);
            }
        }
    }

    /// Keeps `table`'s locked keys in order from now on.
    fn order(&mut self, table: TableId) {
        if !self.ordered.contains_key(&table) {
            let keys = self.queues.get(&table).map(|q| q.keys().cloned().collect()).unwrap_or_default();
            self.ordered.insert(table, keys);
        }
    }

    /// Appends the ids queued on the keys of `table` inside `[start, end)`, in increasing order.
    fn in_range(&self, table: TableId, start: &Key, end: Option<&Key>, out: &mut Vec<u64>) {
        let Some(keys) = self.queues.get(&table) else { return };
        let from = out.len();
        match self.ordered.get(&table) {
            Some(ordered) => {
                for k in ordered.range::<Key, _>(start..) {
                    if !range_contains(start, end, k) {
                        break;
                    }
                    out.extend_from_slice(&keys[k]);
                }
            }
            None => {
                for (k, q) in keys {
                    if range_contains(start, end, k) {
                        out.extend_from_slice(q);
                    }
                }
            }
        }
        out[from..].sort_unstable();
    }
}

/// The three kinds of locks of Salt §5.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum LockClass {
    /// Taken by ACID transactions; isolates them from everyone.
    Acid,
    /// Taken by an alkaline subtransaction; isolates it from ACID and alkaline ones.
    Alkaline,
    /// A committed alkaline subtransaction's lock, held until its BASE transaction ends;
    /// conflicts only with ACID locks.
    Saline,
}

impl LockClass {
    /// `ACID ⊒ alkaline ⊒ saline`: a lock of a stricter class conflicts with a superset.
    fn strictness(self) -> u8 {
        match self {
            LockClass::Saline => 0,
            LockClass::Alkaline => 1,
            LockClass::Acid => 2,
        }
    }

    /// `self` is at least as strict as `other`.
    pub fn covers(self, other: LockClass) -> bool {
        self.strictness() >= other.strictness()
    }
}

/// A lock's class and access, and the columns it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LockMode {
    pub class: LockClass,
    pub access: Access,
    /// The columns read or written: only LK-6a's dependencies look at them (a BASE read
    /// depends on a BASE write of the same target only if their columns meet). Conflicts
    /// (LK-1) are per row whatever the columns; ACID locks cover every column.
    pub cols: ColMask,
}

impl LockMode {
    pub const fn new(class: LockClass, access: Access) -> Self {
        LockMode { class, access, cols: ColMask::ALL }
    }

    /// The same lock on `cols` only.
    pub const fn on(self, cols: ColMask) -> Self {
        LockMode { cols, ..self }
    }

    pub fn is_write(self) -> bool {
        self.access == Access::Write
    }

    /// A BASE (alkaline or saline) read or range read: can depend on writers (LK-6a).
    fn is_base_read(self) -> bool {
        self.class != LockClass::Acid && !self.is_write()
    }

    /// A BASE (alkaline or saline) write: readers can depend on it (LK-6a).
    fn is_base_write(self) -> bool {
        self.class != LockClass::Acid && self.is_write()
    }

    /// LK-2: holding `self` makes a request for `other` on the same target redundant.
    pub fn covers(self, other: LockMode) -> bool {
        let access = self.access == other.access || (self.access == Access::Write && other.access == Access::Read);
        access && self.class.covers(other.class)
    }

    /// The same access as a saline lock (what `downgrade_alkaline` and a delayed release leave).
    pub fn as_saline(self) -> LockMode {
        LockMode { class: LockClass::Saline, ..self }
    }
}

/// Salt Table 2 (LK-1), symmetric. `RangeRead` behaves as `Read`. A transaction is never in
/// conflict with itself; callers check the owner separately.
pub fn compatible(held: LockMode, requested: LockMode) -> bool {
    use LockClass::*;
    if !held.is_write() && !requested.is_write() {
        return true;
    }
    match (held.class, requested.class) {
        (Acid, _) | (_, Acid) => false,
        (Alkaline, Alkaline) => false,
        (Saline, _) | (_, Saline) => true,
    }
}

/// LK-3: a request of another transaction must wait behind an earlier `waiting` request that it
/// conflicts with, or that is a BASE read when the request is a BASE write (see the module doc).
pub fn must_queue_behind(waiting: LockMode, requested: LockMode) -> bool {
    !compatible(waiting, requested) || (waiting.is_base_read() && requested.is_base_write())
}

/// What a lock covers: one key, or the keys of `[start, end)` (`end = None`: no upper bound).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Target {
    Key(Key),
    Range { start: Key, end: Option<Key> },
}

impl Target {
    /// LK-4: a key overlaps a range that contains it; ranges overlap when they intersect.
    pub fn overlaps(&self, other: &Target) -> bool {
        match (self, other) {
            (Target::Key(a), Target::Key(b)) => a == b,
            (Target::Key(k), Target::Range { start, end }) | (Target::Range { start, end }, Target::Key(k)) => {
                range_contains(start, end.as_ref(), k)
            }
            (Target::Range { start: s1, end: e1 }, Target::Range { start: s2, end: e2 }) => {
                let lo = s1.max(s2);
                e1.as_ref().is_none_or(|e| lo < e) && e2.as_ref().is_none_or(|e| lo < e)
            }
        }
    }

    fn is_range(&self) -> bool {
        matches!(self, Target::Range { .. })
    }
}

fn range_contains(start: &Key, end: Option<&Key>, k: &Key) -> bool {
    start <= k && end.is_none_or(|e| k < e)
}

/// Who asks: the transaction and its LK-5 age (smaller = older; kept across retries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Owner {
    pub txn: TxnId,
    pub age: u64,
}

impl Owner {
    /// Rule-5 priority, a total order: smaller is older.
    fn priority(self) -> (u64, TxnId) {
        (self.age, self.txn)
    }
}

/// The answer to [`LockManager::acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    Granted,
    /// Queued; a later call returns a [`Grant`] with this request's token.
    Waiting,
    /// The request would wait for its own transaction, or a limit is reached (LK-5a): abort
    /// the requester. Nothing changed.
    Die,
}

impl Decision {
    pub fn abort_reason(self) -> Option<AbortReason> {
        match self {
            Decision::Die => Some(AbortReason::Deadlock),
            Decision::Granted | Decision::Waiting => None,
        }
    }
}

/// A request that was `Waiting` (the caller's `token`) and now holds its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Grant {
    pub txn: TxnId,
    pub token: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Waiting {
        token: u64,
    },
    Held,
    /// Released by its owner but held back by LK-6; always saline, always `pending > 0`.
    Releasing,
}

/// A held lock as persisted by a partition, to be taken again after a restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldLock {
    pub table: TableId,
    pub target: Target,
    pub mode: LockMode,
    /// Grant number: locks are relocked in this order (see the module doc).
    pub granted: u64,
    /// LK-6b across partitions: remote read sets this lock still may not be released before.
    pub after: Vec<RemoteDep>,
}

/// A held lock seen in place in the lock table ([`LockManager::held_lock_views`]): a
/// [`HeldLock`] before (or instead of) copying it.
#[derive(Clone, Copy, Debug)]
pub struct HeldLockView<'a> {
    pub table: TableId,
    pub target: &'a Target,
    pub mode: LockMode,
    pub granted: u64,
    pub after: &'a [RemoteDep],
}

impl HeldLockView<'_> {
    /// Whether `lock` is this lock with every field as it is now (grant number compared first).
    pub fn is(&self, lock: &HeldLock) -> bool {
        self.granted == lock.granted
            && self.table == lock.table
            && self.mode == lock.mode
            && self.after == lock.after.as_slice()
            && *self.target == lock.target
    }

    pub fn to_held(&self) -> HeldLock {
        HeldLock {
            table: self.table,
            target: self.target.clone(),
            mode: self.mode,
            granted: self.granted,
            after: self.after.to_vec(),
        }
    }
}

impl<'a> From<&'a HeldLock> for HeldLockView<'a> {
    fn from(l: &'a HeldLock) -> Self {
        HeldLockView { table: l.table, target: &l.target, mode: l.mode, granted: l.granted, after: &l.after }
    }
}

/// How a set of held locks persisted earlier became the set held now, keyed by grant number
/// (unique within a partition, across restarts: `Record::Incarnation`). A partition persists a
/// BASE subtransaction's locks after each of its operations as one of these against what it
/// persisted before (`Record::Locked`), so an operation logs the locks it took, not all the
/// unit's locks again: whole sets would make a 10-line TPC-C New-Order log O(lines²) locks,
/// most of salt's log bytes. [`LockDelta::apply_to`] folds it; folding every delta in log order rebuilds exactly
/// the last set (`tests::lock_delta_folds_to_the_set_it_was_taken_from`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockDelta {
    /// Locks new since, and locks whose fields changed since (a held lock's `after` shrinks as
    /// remote reads settle): each replaces the persisted lock with its grant number.
    pub added: Vec<HeldLock>,
    /// Grant numbers of persisted locks no longer held (a held-back short-term lock freed).
    pub dropped: Vec<u64>,
}

impl LockDelta {
    /// The change from `logged` to `now`. `logged` sorted by grant number makes it
    /// O(n log n) without copying unchanged locks; unsorted, the delta is still right (a lock
    /// not found re-listed in `added` replaces itself), only longer.
    pub fn between<'a>(logged: &[HeldLock], now: impl IntoIterator<Item = HeldLockView<'a>>) -> LockDelta {
        let mut seen = vec![false; logged.len()];
        let mut delta = LockDelta::default();
        for lock in now {
            match logged.binary_search_by_key(&lock.granted, |l| l.granted) {
                Ok(i) => {
                    seen[i] = true;
                    if !lock.is(&logged[i]) {
                        delta.added.push(lock.to_held());
                    }
                }
                Err(_) => delta.added.push(lock.to_held()),
            }
        }
        delta.dropped.extend(
            logged
                .iter()
                .zip(&seen)
                .filter(|(l, seen)| !**seen && !delta.added.iter().any(|a| a.granted == l.granted))
                .map(|(l, _)| l.granted),
        );
        delta
    }

    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.dropped.is_empty()
    }

    /// Folds the delta into the set it was taken against; leaves it sorted by grant number.
    /// O(delta · log n) on a sorted set (moves aside), as every set it leaves is.
    pub fn apply_to(self, logged: &mut Vec<HeldLock>) {
        if !logged.is_sorted_by_key(|l| l.granted) {
            logged.sort_by_key(|l| l.granted);
        }
        for granted in self.dropped {
            if let Ok(i) = logged.binary_search_by_key(&granted, |l| l.granted) {
                logged.remove(i);
            }
        }
        for lock in self.added {
            match logged.binary_search_by_key(&lock.granted, |l| l.granted) {
                Ok(i) => logged[i] = lock,
                Err(i) => logged.insert(i, lock),
            }
        }
    }

    /// Whether it drops or replaces the lock with grant number `granted`.
    pub fn touches(&self, granted: u64) -> bool {
        self.dropped.contains(&granted) || self.added.iter().any(|a| a.granted == granted)
    }
}

/// LK-6b across partitions (Salt §5.1, *write-after-read within a transaction*): a BASE
/// write may not be released before the same transaction's earlier reads on partition `part`
/// — those granted there with a grant number up to `upto` — have released their saline locks,
/// i.e. until none of them still waits for a write of an unfinished BASE transaction (LK-6a).
/// The partition holding the write asks `part` (`Request::AwaitReads`); the answer
/// ([`LockManager::remote_settled`]) lifts the dependency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RemoteDep {
    pub part: PartitionId,
    pub upto: u64,
}

/// A lock or a waiting request. Its key in `LockManager::entries` is its request sequence number.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    /// Grant number (meaningful once held): increasing in grant order.
    granted: u64,
    owner: Owner,
    table: TableId,
    target: Target,
    mode: LockMode,
    state: State,
    /// LK-6: the locks this one may not be released before; fixed at grant (a covered
    /// re-write of the same target gets a lock of its own, see `acquire_after`).
    deps: Vec<u64>,
    /// LK-6b across partitions: remote read sets not yet known to be settled. A waiting
    /// request keeps here what it asked for; they count as pending from its grant.
    remote: Vec<RemoteDep>,
    /// How many of `deps` are still held plus `remote.len()` once held (the O(1) release check).
    pending: usize,
    /// The locks whose `deps` name this one.
    dependents: Vec<u64>,
}

impl Entry {
    fn is_held(&self) -> bool {
        matches!(self.state, State::Held | State::Releasing)
    }

    fn is_waiting(&self) -> bool {
        matches!(self.state, State::Waiting { .. })
    }
}

/// The lock table of one partition. See the module doc.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockManager {
    /// The next request's sequence number (LK-3: "earlier" means smaller).
    seq_next: u64,
    /// The next grant number ([`HeldLock::granted`]).
    granted_next: u64,
    /// Every lock and waiting request, by sequence number.
    /// (A hash map: looked up by id on every step of every rule; walked only to collect into
    /// ordered sets, so its order never shows.)
    entries: FxHashMap<u64, Entry>,
    /// Per-key queues: sequence numbers in increasing order.
    points: PointQueues,
    /// Per-table range locks and range requests, in increasing order.
    ranges: BTreeMap<TableId, Vec<u64>>,
    /// Each transaction's entries (looked up by transaction, never walked across them).
    by_txn: FxHashMap<TxnId, BTreeSet<u64>>,
    waiting: FxHashSet<u64>,
    /// The transactions whose lock changes are followed ([`LockManager::track_changes`]), each
    /// with what changed since it was last asked ([`LockManager::take_changes`]).
    changes: FxHashMap<TxnId, LockChanges>,
    /// Owners of releasing locks (LK-6) freed since [`LockManager::take_freed_releasing`]
    /// was last called (in the order freed; may repeat).
    freed_releasing: Vec<TxnId>,
    /// Per transaction, its BASE read locks granted with a pending LK-6a dependency, by
    /// sequence number, until they go: the only ones that can be *tainted*
    /// ([`LockManager::read_taint`], [`LockManager::reads_settled`]), as a lock's pending
    /// count only falls after its grant. Both questions, asked after every BASE operation,
    /// would otherwise walk all the transaction's locks.
    tainted: FxHashMap<TxnId, Vec<u64>>,
}

/// What changed in one transaction's held locks, as its persisted form ([`HeldLockView`])
/// sees them, since [`LockManager::track_changes`] or the last
/// [`LockManager::take_changes`]: a partition that logs a BASE subtransaction's locks after
/// each operation ([`LockDelta`]) looks at these instead of at every lock the transaction holds
/// — which would make each operation's record cost O(locks held), O(n²) per subtransaction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockChanges {
    /// Sequence numbers of its entries granted, downgraded, turned releasing, or whose remote
    /// dependencies shrank (they may repeat, and may be gone since).
    touched: Vec<u64>,
    /// Grant numbers of its locks freed.
    freed: Vec<u64>,
}

impl LockManager {
    pub fn new() -> Self {
        Self::default()
    }

    /// Follows the changes to `txn`'s held locks from now on, forgetting any followed so far
    /// (the caller has just persisted them all).
    pub fn track_changes(&mut self, txn: TxnId) {
        self.changes.insert(txn, LockChanges::default());
    }

    /// Stops following `txn`'s changes ([`LockManager::track_changes`]).
    pub fn untrack(&mut self, txn: TxnId) {
        self.changes.remove(&txn);
    }

    /// What changed in `txn`'s held locks since it was followed or last asked, and goes on
    /// following them; `None` if they are not followed.
    pub fn take_changes(&mut self, txn: TxnId) -> Option<LockChanges> {
        self.changes.get_mut(&txn).map(std::mem::take)
    }

    /// The change from `logged` (sorted by grant number, what the owner persisted when it last
    /// took `changes`) to the held locks of its transaction that `keep` selects, computed from
    /// `changes` alone: O(changes · log n) where [`LockDelta::between`] walks every held lock.
    /// Right only if `keep` judges an unchanged lock as it did when `logged` was taken; the
    /// result folds ([`LockDelta::apply_to`]) to what `between` would give (checked in debug
    /// builds by the locking partition, and by `tests::tracked_changes_fold_to_the_held_set`).
    pub fn delta_of_changes(
        &self,
        changes: &LockChanges,
        logged: &[HeldLock],
        keep: impl Fn(&HeldLockView) -> bool,
    ) -> LockDelta {
        let logged_at = |granted: u64| logged.binary_search_by_key(&granted, |l| l.granted).ok();
        let mut touched = changes.touched.clone();
        touched.sort_unstable();
        touched.dedup();
        let mut delta = LockDelta::default();
        for seq in touched {
            // Gone since: its grant number is in `freed`.
            let Some(e) = self.entries.get(&seq).filter(|e| e.is_held()) else { continue };
            let view =
                HeldLockView { table: e.table, target: &e.target, mode: e.mode, granted: e.granted, after: &e.remote };
            match (keep(&view), logged_at(view.granted)) {
                (true, Some(i)) if view.is(&logged[i]) => {}
                (true, _) => delta.added.push(view.to_held()),
                (false, Some(_)) => delta.dropped.push(view.granted),
                (false, None) => {}
            }
        }
        delta.dropped.extend(changes.freed.iter().copied().filter(|g| logged_at(*g).is_some()));
        delta.added.sort_by_key(|l| l.granted);
        delta.dropped.sort_unstable();
        delta.dropped.dedup();
        delta
    }

    /// The owners of releasing locks (LK-6) freed since the last call, sorted, each once. A
    /// transaction that ended while LK-6 held some of its locks back holds nothing any more
    /// only after one of these: its locks were all releasing once it ended.
    pub fn take_freed_releasing(&mut self) -> Vec<TxnId> {
        let mut owners = std::mem::take(&mut self.freed_releasing);
        owners.sort_unstable();
        owners.dedup();
        owners
    }

    /// Notes that held entry `id` of `txn` changed, if `txn`'s changes are followed.
    fn touch(&mut self, txn: TxnId, id: u64) {
        if let Some(c) = self.changes.get_mut(&txn) {
            c.touched.push(id);
        }
    }

    /// Asks for a lock (LK-1–LK-5). `token` names the request in a later [`Grant`]. A request
    /// that waits for an older transaction waits too (LK-5a); the caller aborts it if it is
    /// still [`LockManager::impatient`] after the patience.
    pub fn acquire(&mut self, owner: Owner, table: TableId, target: Target, mode: LockMode, token: u64) -> Decision {
        self.acquire_after(owner, table, target, mode, token, &[])
    }

    /// LK-5b: a request of an *accepted* BASE transaction, which cannot be aborted. The lock
    /// manager decides it as any other (it dies only for a cycle through itself or a limit);
    /// the difference is the caller's: it never aborts it for impatience, it **wounds** the
    /// older transactions it waits for ([`LockManager::wound_targets`]) — they can abort, which
    /// breaks any cycle through this transaction's saline locks.
    pub fn acquire_immortal(
        &mut self,
        owner: Owner,
        table: TableId,
        target: Target,
        mode: LockMode,
        token: u64,
    ) -> Decision {
        self.acquire_after(owner, table, target, mode, token, &[])
    }

    /// Takes a lock back after a restart, with the grant number it had (call in increasing
    /// grant order, before any other request). The recovered locks were all held at once, so
    /// the request is always granted. Their owner counts as the oldest for LK-5 (age 0):
    /// mortal requesters behind them are impatient and die after the patience rather than
    /// queue for good behind a lock whose owner may itself need to queue behind them (a
    /// rolled-forward BASE transaction waits on anyone).
    pub fn acquire_recovered(&mut self, txn: TxnId, lock: &HeldLock) {
        let id = self.seq_next;
        let owner = Owner { txn, age: 0 };
        let d = self.acquire_after(owner, lock.table, lock.target.clone(), lock.mode, u64::MAX, &lock.after);
        assert_eq!(d, Decision::Granted, "locks held together before a restart are compatible");
        if let Some(e) = self.entries.get_mut(&id) {
            e.granted = lock.granted;
        }
        self.touch(txn, id);
        self.granted_next = self.granted_next.max(lock.granted + 1);
    }

    /// [`LockManager::acquire`] for a BASE write that LK-6b ties to the transaction's earlier
    /// reads on other partitions (`after`): once granted, the lock is not released before each
    /// of them is settled ([`LockManager::remote_settled`]). A covered re-write (the transaction
    /// wrote the target before) that read something since, or names new remote reads, gets a
    /// lock of its own carrying them (see the module doc). `after` is ignored for other modes.
    pub fn acquire_after(
        &mut self,
        owner: Owner,
        table: TableId,
        target: Target,
        mode: LockMode,
        token: u64,
        after: &[RemoteDep],
    ) -> Decision {
        assert_eq!(
            target.is_range(),
            mode.access == Access::RangeRead,
            "range targets are for RangeRead locks only, and RangeRead locks only use range targets"
        );
        let after = if mode.is_base_write() { after } else { &[] };
        if let Target::Key(key) = &target {
            if !self.ranges.contains_key(&table) && self.points.get(table, key).is_none() {
                // LK-2 and LK-3 on a key nothing locks or awaits, in a table without range
                // locks: no lock covers the request and none blocks or queues it, so it is
                // granted — the usual case, decided on one lookup (the general path below
                // looked the key's queue up four times).
                let seq = self.seq_next;
                self.insert(owner, table, target, mode, State::Waiting { token }, after);
                self.make_held(seq);
                return Decision::Granted;
            }
        }
        if let Some(id) = self.covering_lock(owner.txn, table, &target, mode) {
            let held = self.entries[&id].mode;
            // LK-6a per column: a BASE write of columns the covering lock does not name gets
            // a lock of its own on them, which their readers depend on. A BASE read gets one when
            // it has something to depend on: other transactions' writes of its columns, if the
            // covering lock names fewer columns, or if it is the reader's own write (alkaline
            // writes are compatible with other transactions' saline ones, whose values the
            // read sees all the same). Granted at once, like the covered request.
            let new_cols = mode.class != LockClass::Acid && !held.cols.contains(mode.cols);
            let own_lock = if mode.is_base_read() {
                (new_cols || held.is_base_write()) && self.has_other_base_writes(owner.txn, table, &target, mode.cols)
            } else {
                new_cols
            };
            if own_lock || (mode.is_base_write() && held.is_base_write() && self.rewrite_has_new_deps(id, after)) {
                // LK-6b for a covered re-write: the value written now may derive from reads
                // made since `id` was granted. A lock of its own carries those dependencies;
                // adding them to `id` instead would hold back, behind reads made later, what
                // others read of the first write (a release cycle, found by `litmus sim
                // --workload salt-chains`). Granted at once, as LK-2 grants a covered request.
                let seq = self.seq_next;
                self.insert(owner, table, target, mode, State::Waiting { token }, after);
                self.make_held(seq);
            }
            return Decision::Granted;
        }
        let seq = self.seq_next;
        if let Some(id) = self.adjacent_own_range(owner.txn, table, &target, mode) {
            if self.blockers(owner.txn, table, &target, mode, seq).is_empty() {
                self.extend_range(id, &target);
                return Decision::Granted;
            }
        }
        let queue_len_max = if target.is_range() { RANGE_QUEUE_LEN_MAX } else { OBJECT_QUEUE_LEN_MAX };
        if self.queue_len(table, &target) >= queue_len_max {
            return Decision::Die;
        }
        let blockers = self.blockers(owner.txn, table, &target, mode, seq);
        if blockers.is_empty() {
            self.insert(owner, table, target, mode, State::Waiting { token }, after);
            self.make_held(seq);
            return Decision::Granted;
        }
        // LK-5a: wait, older blockers or not, unless the request would wait for itself.
        match self.waits_for(mode, &blockers) {
            Some(others) if others.values().all(|o| o.txn != owner.txn) => {
                self.insert(owner, table, target, mode, State::Waiting { token }, after);
                Decision::Waiting
            }
            _ => Decision::Die,
        }
    }

    /// LK-4a: a held ACID range lock of `txn` on `table` with exactly `mode` that `target`
    /// touches or overlaps, with no LK-6 bookkeeping (ACID locks have none). A serializable scan
    /// reads a table page by page and locks each page's range: merged into one lock, a scan of
    /// any length holds one range lock per table, not one per page (which
    /// [`RANGE_QUEUE_LEN_MAX`] would refuse past 1,024 pages, aborting a lone 2,000,000-row
    /// `SELECT` as a deadlock victim).
    fn adjacent_own_range(&self, txn: TxnId, table: TableId, target: &Target, mode: LockMode) -> Option<u64> {
        let Target::Range { start, end } = target else { return None };
        if mode.class != LockClass::Acid {
            return None;
        }
        self.by_txn.get(&txn)?.iter().copied().find(|id| {
            let e = &self.entries[id];
            let Target::Range { start: s2, end: e2 } = &e.target else { return false };
            let touches = e2.as_ref().is_none_or(|e2| start <= e2) && end.as_ref().is_none_or(|end| s2 <= end);
            e.table == table
                && e.mode == mode
                && e.state == State::Held
                && e.deps.is_empty()
                && e.dependents.is_empty()
                && e.remote.is_empty()
                && touches
        })
    }

    /// Widens range lock `id` to also cover `target` (LK-4a); a tracked set of held locks sees
    /// the change.
    fn extend_range(&mut self, id: u64, target: &Target) {
        let Target::Range { start, end } = target else { return };
        let e = self.entries.get_mut(&id).expect("found by adjacent_own_range");
        let txn = e.owner.txn;
        if let Target::Range { start: s2, end: e2 } = &mut e.target {
            if start < s2 {
                *s2 = start.clone();
            }
            *e2 = match (e2.take(), end) {
                (Some(a), Some(b)) => Some(if *b > a { b.clone() } else { a }),
                _ => None,
            };
        }
        self.touch(txn, id);
    }

    /// Releases one held lock of `txn` on (`table`, `target`) with exactly `mode` (a short-term
    /// lock, or the Salt §6.4 local-transaction optimization). Returns the waiters now granted.
    /// A no-op if there is no such lock (LK-2: a covered request created none).
    pub fn release(&mut self, txn: TxnId, table: TableId, target: &Target, mode: LockMode) -> Vec<Grant> {
        let found = self.on_target(table, target).rev().find(|id| {
            let e = &self.entries[id];
            e.owner.txn == txn && e.state == State::Held && e.mode == mode
        });
        let mut touched = Vec::new();
        if let Some(id) = found {
            self.start_release(id, &mut touched);
        }
        self.wake(touched)
    }

    /// End of an alkaline subtransaction (Salt §5.1): every alkaline lock of `txn` becomes a
    /// saline lock of the same access. ACID readers stay blocked; alkaline requests now pass.
    pub fn downgrade_alkaline(&mut self, txn: TxnId) -> Vec<Grant> {
        let mut touched = Vec::new();
        for id in self.ids_of(txn) {
            let e = self.entries.get_mut(&id).expect("by_txn names live entries");
            if e.state == State::Held && e.mode.class == LockClass::Alkaline {
                e.mode = e.mode.as_saline();
                touched.push((e.table, e.target.clone()));
                self.touch(txn, id);
            }
        }
        self.wake(touched)
    }

    /// Releases every held lock of `txn` that is not saline (abort of an alkaline
    /// subtransaction). Waiting requests stay. LK-6 still applies.
    pub fn release_non_saline(&mut self, txn: TxnId) -> Vec<Grant> {
        let mut touched = Vec::new();
        for id in self.ids_of(txn) {
            let Some(e) = self.entries.get(&id) else { continue };
            if e.state == State::Held && e.mode.class != LockClass::Saline {
                self.start_release(id, &mut touched);
            }
        }
        self.wake(touched)
    }

    /// End (commit or abort) of `txn`: drops its waiting requests and releases all its locks;
    /// saline locks that LK-6 holds back stay *releasing* and go away by themselves later.
    pub fn release_all(&mut self, txn: TxnId) -> Vec<Grant> {
        let mut touched = Vec::new();
        for id in self.ids_of(txn) {
            let Some(e) = self.entries.get(&id) else { continue };
            match e.state {
                State::Waiting { .. } => {
                    let e = self.unlink(id);
                    touched.push((e.table, e.target));
                }
                State::Held => self.start_release(id, &mut touched),
                State::Releasing => {}
            }
        }
        self.wake(touched)
    }

    /// Abort: drops `txn`'s waiting requests (it may still hold locks; call `release_all` after).
    pub fn cancel_waits(&mut self, txn: TxnId) -> Vec<Grant> {
        let mut touched = Vec::new();
        for id in self.ids_of(txn) {
            if self.entries[&id].is_waiting() {
                let e = self.unlink(id);
                // Only requests queued after it can have waited for it (LK-3).
                touched.push((e.table, e.target, id + 1));
            }
        }
        self.wake_from(touched)
    }

    /// Every lock `txn` holds, releasing ones included, in acquisition order.
    pub fn held(&self, txn: TxnId) -> Vec<(TableId, Target, LockMode)> {
        self.locks_of(txn, Entry::is_held)
    }

    /// [`LockManager::held`] with grant numbers, as a partition persists them.
    pub fn held_locks(&self, txn: TxnId) -> Vec<HeldLock> {
        self.held_locks_where(txn, |_| true)
    }

    fn held_locks_where(&self, txn: TxnId, keep: impl Fn(&HeldLockView) -> bool) -> Vec<HeldLock> {
        self.held_lock_views(txn).filter(|l| keep(l)).map(|l| l.to_held()).collect()
    }

    /// [`LockManager::held_locks`] seen in place, in acquisition order, nothing copied.
    pub fn held_lock_views(&self, txn: TxnId) -> impl Iterator<Item = HeldLockView<'_>> + '_ {
        self.by_txn.get(&txn).into_iter().flatten().map(|id| &self.entries[id]).filter(|e| e.is_held()).map(|e| {
            HeldLockView { table: e.table, target: &e.target, mode: e.mode, granted: e.granted, after: &e.remote }
        })
    }

    /// [`LockManager::held_locks`] of the saline class only (what a BASE transaction keeps
    /// durable between subtransactions), without copying the others first.
    pub fn saline_locks(&self, txn: TxnId) -> Vec<HeldLock> {
        self.held_locks_where(txn, |l| l.mode.class == LockClass::Saline)
    }

    /// Whether `txn` holds any lock, releasing ones included: `!held(txn).is_empty()` without
    /// copying the list (the locking partition asks it of every ended BASE transaction whose
    /// locks LK-6 holds back, on every release).
    pub fn holds_any(&self, txn: TxnId) -> bool {
        self.by_txn.get(&txn).is_some_and(|ids| ids.iter().any(|id| self.entries[id].is_held()))
    }

    /// The locks of `txn` that its owner released but LK-6 holds back.
    pub fn releasing(&self, txn: TxnId) -> Vec<(TableId, Target, LockMode)> {
        self.locks_of(txn, |e| e.state == State::Releasing)
    }

    pub fn is_waiting(&self, txn: TxnId) -> bool {
        self.by_txn.get(&txn).is_some_and(|ids| ids.iter().any(|id| self.entries[id].is_waiting()))
    }

    /// Held and releasing locks.
    pub fn lock_count(&self) -> usize {
        self.entries.len() - self.waiting.len()
    }

    pub fn waiter_count(&self) -> usize {
        self.waiting.len()
    }

    /// LK-6b across partitions: `txn`'s reads on `dep.part` up to `dep.upto` are settled
    /// (that partition's [`LockManager::reads_settled`] said so). Every lock of `txn` waiting
    /// for that drops it; a releasing one whose last dependency it was goes away. Settlement is
    /// permanent, so a repeated answer changes nothing. Returns the waiters now granted.
    pub fn remote_settled(&mut self, txn: TxnId, dep: RemoteDep) -> Vec<Grant> {
        let mut touched = Vec::new();
        for id in self.ids_of(txn) {
            let Some(e) = self.entries.get_mut(&id) else { continue };
            let Some(i) = e.remote.iter().position(|d| *d == dep) else { continue };
            e.remote.remove(i);
            let held = e.is_held();
            self.touch(txn, id);
            let e = self.entries.get_mut(&id).expect("found just now");
            if held {
                e.pending -= 1;
                if e.pending == 0 && e.state == State::Releasing {
                    self.free(id, &mut touched);
                }
            }
        }
        self.wake(touched)
    }

    /// LK-6b across partitions, the answering side: whether every BASE read lock of `txn`
    /// granted here with a grant number up to `upto` has no pending LK-6a dependency (it reads
    /// no write of a BASE transaction whose saline lock is still held). Monotonic: dependencies
    /// only go away, and later reads get larger grant numbers.
    pub fn reads_settled(&self, txn: TxnId, upto: u64) -> bool {
        !self.tainted_reads(txn).any(|e| e.granted <= upto)
    }

    /// `txn`'s BASE read locks that still depend on a held BASE write (LK-6a).
    fn tainted_reads(&self, txn: TxnId) -> impl Iterator<Item = &Entry> + '_ {
        let ids = self.tainted.get(&txn).map_or(&[][..], Vec::as_slice);
        ids.iter().map(|id| &self.entries[id]).filter(|e| e.is_held() && e.mode.is_base_read() && e.pending > 0)
    }

    /// The largest grant number among `txn`'s BASE read locks here that still depend on
    /// another BASE transaction's write (LK-6a), if any: what a later write of `txn` on
    /// another partition must wait for ([`RemoteDep::upto`]).
    pub fn read_taint(&self, txn: TxnId) -> Option<u64> {
        self.tainted_reads(txn).map(|e| e.granted).max()
    }

    /// Held locks still waiting for remote read sets: `(txn, dep, releasing)` — releasing ones
    /// are what ACID requesters may be queued behind; the partition asks for their answers.
    pub fn remote_pending(&self) -> Vec<(TxnId, RemoteDep, bool)> {
        let mut out = BTreeSet::new();
        for e in self.entries.values().filter(|e| e.is_held()) {
            for d in &e.remote {
                out.insert((e.owner.txn, *d, e.state == State::Releasing));
            }
        }
        out.into_iter().collect()
    }

    /// Grant numbers from now on start at `floor` or above (a partition gives each incarnation
    /// its own range, so numbers never repeat across restarts: [`RemoteDep::upto`] compares
    /// them).
    pub fn set_grant_floor(&mut self, floor: u64) {
        self.granted_next = self.granted_next.max(floor);
    }
}

#[cfg(test)]
#[path = "lock_tests.rs"]
mod tests;
