//! # The locking engine: ACID at the four ANSI levels (2PL + 2PC) and Salt BASE transactions
//!
//! Engines `acid`, `salt` and `salt-local` are this one module with different switches
//! ([`LockingConfig`]). Specification: Salt (OSDI '14) §4–§6; the lock manager is [`lock`].
//!
//! ## ACID transactions (Salt §5, Table 1)
//!
//! Strict two-phase locking with the transaction's isolation level deciding which accesses lock
//! and for how long ([`litmus_core::Isolation`]: 𝓛 = long-term, 𝓢 \ 𝓛 = short-term, released
//! when the operation completes). Serializable range reads take range locks, so inserts into a
//! scanned range wait (no phantoms). A scan with a row limit that has its `limit` rows locks its
//! range only up to the last row it returns (next-key narrowing, `partition::narrowed_scan_range`):
//! inserts after that row cannot change its result, so a TPC-C Delivery reading a district's
//! oldest NEW-ORDER row does not block the New-Orders appending at the tail. Writes are buffered at the partition and sent back to the
//! coordinator with each reply; the coordinator holds the redo (the *write images*) and ships
//! it with the commit. Deadlocks: **wait-die with patience** on the transaction's age (lock
//! LK-5): a blocked request queues, whoever it waits for; a request that still waits for an
//! older transaction after `partition::LOCK_WAIT_PATIENCE` (7 ms, checked every tick) aborts
//! with `AbortReason::Deadlock` (retryable). Every deadlock cycle has such a younger→older edge,
//! so none lasts much longer than the patience, and the oldest transaction never dies for it.
//! **LK-5f — waits are timed on the partition's wait clock** (`partition::
//! LockingPartition::wait_clock`): it runs with real time, except that the gap before a tick
//! counts for at most `partition::TICK_CREDIT_MAX` (6 ms; ticks come every 5 ms). The patience
//! (LK-5a, LK-5b) is measured on it. A partition whose worker was starved of CPU for tens of
//! milliseconds has not watched its waiters that long; on real time, the first tick after the
//! stall would find every waiter past its patience and abort them all at once, while the
//! messages that would release their locks could still sit unread in the stalled worker's
//! mailbox. A deadlock still ends: ticks the partition sees add up to the patience. LK-5e's
//! `RUNNING_WITHIN` stays on real time, like the liveness it bounds (LK-5a's exception judges
//! blockers by when they last ran): on the wait clock its wounds would come later in stalls,
//! and deadlocks through accepted BASE transactions would last longer. LK-5f removes one way
//! for a loaded partition to churn; it does not bound throughput under overload.
//!
//! Commit: one participant → one `Commit` message (no 2PC). Several → two-phase commit with
//! **presumed abort**: `Prepare` (each participant logs `Prepared` with the keys it must relock,
//! votes), the coordinator logs `Decided` with every participant's writes, sends `Commit`
//! (participants log the writes, apply, release), and logs `Ended` when all have acknowledged.
//! Aborts are never logged. An unprepared transaction's locks and buffered writes are
//! volatile, so a participant that restarts between two of its operations has lost the first
//! one's locks while the coordinator still holds its write images; the second operation then
//! starts a fresh record at the new incarnation. `Prepare` and the one-phase `Commit` therefore
//! carry how many operations of the unit the coordinator sent that participant, and a
//! participant that received a different number in its current incarnation votes no or
//! refuses the commit (the coordinator aborts, retryably) instead of applying images computed
//! under locks it no longer holds (a lost update; `litmus sim --workload bank --engine acid`
//! with crashes). Operations themselves name the incarnation of the participant that answered
//! an earlier operation of their unit (`Request::Op::incarnation`, from `Reply::Op`), and a
//! participant restarted since refuses them at once with a retryable abort: run alone in the
//! new incarnation, an operation can fail for a reason that is not the transaction's own (a
//! New-Order's insert of an order number it read before the restart and another New-Order
//! took since fails as a duplicate key, `litmus sim --workload tpcc-neworder --faults`). Every
//! start, a first one included, is a new incarnation.
//!
//! Lost messages: the coordinator resends an operation unanswered for `OP_RESEND_AFTER`
//! (100 ms), marked `resent`; the participant drops a resend of an operation still waiting
//! for locks, runs one it never received, and fails one it answered already (its reply was
//! lost) with a retryable abort. A network duplicate (not marked) is dropped, as a formula
//! must not apply twice. `Prepare` and the one-phase `Commit` are resent after
//! `BASE_OP_TIMEOUT` of silence, logged decisions every `RESEND_INTERVAL`. Without resends, a
//! lost operation would hold its transaction until the front end's stall timeout, and a load
//! over a lossy network would never finish.
//!
//! **LK-7 — an idle participant asks before it rolls back.** Unprepared ACID work that has
//! heard nothing for `partition::ORPHAN_TIMEOUT` (2 s) is rolled back: its coordinator is
//! gone, cut off, or its abort was lost. But a transaction can be silent on one participant
//! and alive: a serializable scan of a large table holds its range locks on the partitions it
//! has read while it reads the others (a 2,100,000-row `SELECT` took longer than that, and
//! died as a deadlock victim with nobody else running), and an interactive transaction waits
//! for its client. So from `partition::ORPHAN_ASK_AFTER` (500 ms) of silence, the participant
//! asks the coordinator (`Reply::QueryIdle`) every `QUERY_INTERVAL`; the coordinator answers
//! `Request::Alive` for a transaction it runs and has heard from within
//! `coordinator::IDLE_TRANSACTION_MAX` (60 s), and the answer counts as a message. A dead
//! coordinator answers nothing, so its transactions' work is still released after 2 s; a
//! client whose connection closes has its open transactions rolled back at once by the
//! runtime (`RequestBody::Disconnected`), so vouching never keeps a departed client's locks. A
//! transaction whose operation waits here for a lock is not asked about: its wait still ends
//! at the orphan timeout (a reader queued behind a BASE transaction held back by a network cut
//! would otherwise wait for as long as the cut lasts).
//!
//! Recovery: a participant relocks its in-doubt transactions and asks
//! the coordinator (`Query`); the coordinator answers from its log, and resends `Commit` for
//! every decision without `Ended`. A coordinator that restarts tells every partition its new
//! epoch; partitions drop the unprepared ACID work of its older epochs. BASE work of an older
//! epoch stays (its subtransaction may have been decided just before the crash, and its row
//! images are only valid under its locks): the partition asks about the transaction
//! (`QueryBase`) until the new incarnation rolls it forward, ends it, or — not in its log, so
//! never accepted — answers `EndBase`.
//!
//! ## BASE transactions (Salt §4–§6)
//!
//! A procedure registered with `ProcOptions::base()` runs as a BASE transaction under `salt`:
//! a sequence of **alkaline subtransactions** (explicit `begin_alkaline`/`end_alkaline`; an
//! operation outside them opens an implicit one that lasts to the next boundary).
//!
//! * Alkaline locks (Table 2) isolate a subtransaction from ACID and alkaline ones. When it
//!   commits, its long-term alkaline locks are **downgraded to saline** locks, held until the
//!   BASE transaction ends; saline locks conflict only with ACID locks (non read-read), so other
//!   BASE transactions see the committed subtransaction and ACID transactions never do.
//! * The two saline release-order rules of §5.1 (indirect dirty reads) are enforced by the lock
//!   manager ([`lock`] LK-6, §6.3's O(1) pointer check) — within one partition directly, and
//!   **across partitions** by remote dependencies (`lock::RemoteDep`): a partition answering a
//!   BASE operation reports the transaction's *read taint* there (the largest grant number of
//!   its reads that still depend on an unfinished BASE write, `Reply::Op::read_taint`); the
//!   coordinator keeps the taint per partition (logged with every decision, so a roll-forward
//!   keeps it) and sends it with every later write to another partition (`Request::Op::after`);
//!   the write's partition asks the reads' partition (`Request::AwaitReads`, partition to
//!   partition) and releases the write only after the answer (`Request::ReadsSettled`), which
//!   comes once those reads no longer depend on held writes. Questions are repeated every
//!   `QUERY_INTERVAL` while a released lock still waits; answers are idempotent.
//!   *Cost:* nothing for reads of settled data; for a BASE transaction that writes on Q after a
//!   tainted read on P ≠ Q, two messages per such (P, Q) pair (plus a repeat every 100 ms while
//!   the lock it holds back is released and still waiting), and no log records beyond the
//!   remote dependencies stored with the lock. In TPC-C these messages are a small fraction
//!   of all messages; ticketing sends none (its BASE transactions never write on another
//!   partition after a tainted read).
//!   **Per column** (LK-6a, [`lock`]): a read depends only on unfinished writes of the
//!   columns it reads. A TPC-C Payment updates its warehouse's and district's year-to-date
//!   totals and then selects their names and addresses (clause 2.5.2.2, `Ctx::read_columns`);
//!   read whole, those rows would be tainted by every other Payment's unfinished total, so a
//!   Payment's update of a remote customer would be held back from ACID readers until those
//!   Payments ended, and a Delivery that met it on CUSTOMER would die at once (its waits-for
//!   set unknown).
//!   It all survives restarts: locks are persisted with their grant order and relocked in it
//!   (with their remote dependencies), short-term reads LK-6 holds back are persisted with the
//!   subtransaction's locks, grant numbers start above every earlier incarnation's
//!   (`Record::Incarnation`), and locks LK-6 still holds back when their transaction ends are
//!   persisted too (`tests/salt_restart.rs`, `tests/salt_across_partitions.rs`).
//!   `litmus sim --workload salt-chains` checks it with a provenance oracle under faults.
//! * **Accept vs commit** (§6.1): before the first subtransaction commits, the coordinator logs
//!   the transaction's logic (procedure + arguments); when it commits the client is answered
//!   (early commit). An accepted transaction always commits.
//! * Every subtransaction commit is decided at the coordinator with a `SubDecided` record that
//!   holds the results of its operations — the **context table** of §6.2 — and its writes.
//!   Recovery replays the log and **rolls forward** each accepted, unfinished BASE transaction:
//!   the coordinator re-runs the procedure under the same id, operations of decided
//!   subtransactions are answered from the context table (no operation runs twice, earlier
//!   reads return the same values), and execution continues from the first undecided one —
//!   once every decision re-sent after the crash has been acknowledged (a later
//!   subtransaction's commit would otherwise downgrade the earlier one's alkaline locks before
//!   its row images are applied).
//! * **A subtransaction commits at its logged decision**. Once the `Decided` record
//!   is durable the transaction goes on — the client's early answer and the next
//!   subtransaction's operations leave with the commit messages, after the record — without
//!   waiting for the participants' commit records and acknowledgements. `EndBase` goes out
//!   as soon as the procedure has finished (its `BaseFinished` shares the last decision's
//!   sync) and names the subtransactions whose commits the partition has not acknowledged;
//!   the partition applies those first. A subtransaction thus pays two sequential log syncs (the
//!   partition's `Locked` before it answers, the coordinator's `Decided`) instead of three.
//!   **Ordering rule:** a partition keeps an operation or abort of a later subtransaction that
//!   overtakes the commit (or abort) of an earlier one whose operations ran there, until that
//!   arrives (`partition::LockingPartition::after_undecided_sub`; a `Locked` record stands for
//!   the earlier one across restarts). Run first, the operation would read rows the commit is
//!   about to change, and the commit would downgrade its new alkaline locks with the earlier
//!   ones; the abort would release locks the commit's images were made under. Within one run
//!   the coordinator never waits for its own undelivered decisions; a re-run (a retry, a
//!   roll-forward) still waits for every earlier run's (`send_op`). A transaction whose
//!   procedure finished logs `BaseFinished`
//!   before it sends `EndBase`, so a restart never runs it again; partitions remember ended
//!   BASE transactions durably (bounded) and refuse late duplicates of their operations.
//! * An accepted BASE transaction cannot abort, so its lock requests are never aborted for
//!   impatience: they wait and **wound** the older transactions in the way (LK-5b; the
//!   wounded ACID or not-yet-accepted transaction aborts, retryably). This breaks the one cycle
//!   LK-5a cannot: an older ACID transaction waiting for the BASE transaction's saline lock while
//!   holding what it needs (found by the simulator, `litmus sim --workload bank --engine salt`).
//!   ACID transactions still wait for BASE locks as in Salt Fig. 3, in per-object FIFO order.
//! * **LK-5d — deadlocks on one partition through accepted BASE transactions**
//!   (`partition::LockingPartition::cycle_victim`). When a request starts waiting (LK-5c), and
//!   again when an accepted BASE transaction's request has outlived the patience (before LK-5b
//!   wounds), the partition looks for a cycle through it in its own waits-for graph. If there
//!   is one, it aborts the youngest mortal member that waits for an older one (what LK-5a
//!   would abort), so the wound never falls on the older transaction first. A cycle of
//!   accepted BASE transactions only loses its youngest member's waiting subtransaction (its
//!   coordinator rolls it back and re-runs it; every edge of such a cycle is an alkaline lock,
//!   which the rollback releases): two accepted TPC-C New-Orders that lock stock rows in
//!   opposite orders would otherwise deadlock for good while the Deliveries queued behind them
//!   die. Otherwise LK-5b wounds.
//! * **LK-5e — a long wait wounds younger blockers too** (`partition::LockingPartition::
//!   wound_victims`). An accepted BASE transaction whose request has waited `RUNNING_WITHIN`
//!   (250 ms), and whose blockers are not working here (as for LK-5b), wounds every blocker
//!   that can still abort, younger ones included; LK-5b, after the patience, wounds only older
//!   ones. So every waits-for cycle that holds an accepted BASE transaction and a mortal one is
//!   broken within about `RUNNING_WITHIN` by a wound, wherever its other edges are — which is
//!   what lets a queue on an anchor wait behind accepted BASE transactions (LK-5a's anchor
//!   clause, below). A younger mortal blocker that works keeps its lock, and a short wait
//!   costs nothing new.
//! * **LK-5g — no wound for an accepted BASE transaction** (`partition::
//!   LockingPartition::wound_victims`): LK-5b and LK-5e wound only blockers that can still
//!   abort. An accepted blocker's coordinator would drop the wound, and the sweep repeats
//!   wounds every `QUERY_INTERVAL` while the wounder waits: accepted Payments waiting behind
//!   older accepted Payments would send useless messages by the thousand under load.
//! * **LK-5h — a lock-free transaction steps out of the queue** (`partition::
//!   LockingPartition::break_waits`). An ACID transaction every operation of which so far takes
//!   only short-term locks at its isolation level (`TxnClass::lock_free`, kept by the
//!   coordinator: a reader below repeatable read, such as TPC-C's read-committed Stock-Level)
//!   holds no lock between operations. Only its place in a queue can put it on a waits-for
//!   cycle, so where LK-5a, LK-5c and LK-5d would abort it, and where LK-5b and LK-5e would
//!   wound it, its waiting operations instead leave their queues and ask again on the next
//!   tick; a request refused at once (a lock with remote dependencies, a full queue) asks
//!   again the same way. It also waits out alive blockers wherever it waits, as on an anchor
//!   (LK-5a's exception). Only lock-free transactions step out: an ACID transaction holding
//!   range locks on every partition (a bank total) would keep them while it asks again, and
//!   keep out the transfers that would settle its reads (see
//!   `partition::LockingPartition::may_step_out`).
//!   An operation keeps stepping out for at most `partition::STEP_OUT_MAX` (1 s), then dies as
//!   any other: an operation sent before the transaction's first long-term lock elsewhere
//!   still says lock-free, and a deadlock through that stale flag lasts no longer. Without
//!   the rule, TPC-C's read-committed Stock-Levels under `salt` die in most of their attempts
//!   — waiting behind accepted New-Orders that wait themselves, refused on stock rows with
//!   remote dependencies, wounded on stock rows where accepted New-Orders queue behind them.
//! * **Waiting out working transactions** (LK-5a's exception, `partition::LockingPartition::
//!   blockers_running`): a mortal request past its patience keeps waiting when it waits on a
//!   queue anchor, or only for accepted BASE transactions, and everyone it waits for is *alive*
//!   — an operation of theirs ran on this partition within `RUNNING_WITHIN`, or they wait here
//!   only for alive ones (a cycle through this partition is never alive); on an anchor, an
//!   accepted BASE transaction counts as alive whatever it does (the **anchor clause**: it
//!   ends without aborting, and LK-5e wounds its way out of any cycle through it). Without
//!   the anchor clause, a TPC-C Delivery holding a district's anchor can wait on CUSTOMER for
//!   an accepted New-Order's saline read while that New-Order waits at another partition, and
//!   every Delivery queued behind it dies and retries into the same queue. Behind accepted
//!   BASE transactions, working counts only operations run here since the wait began
//!   (`blockers_progressing`): one that ran here only before may wait at another partition
//!   for the waiter, a cycle no partition sees whole (bank totals under Salt died in every
//!   such cycle otherwise). On an anchor only its holders are looked at
//!   (`LockManager::waits_for_holders`), not the consumers queued ahead, which wait for the
//!   same ones: a long queue on an anchor would exceed the bound on transactions examined,
//!   and the ones at its back would all die. An accepted BASE transaction likewise wounds
//!   (LK-5b) only blockers that are not alive in that sense. Accepted BASE transactions cannot
//!   abort, so dying behind one that works gains nothing; and a Delivery, which waits out
//!   saline locks district by district, would otherwise be wounded after hundreds of
//!   milliseconds of work. A deadlock across partitions through such a wait lasts at most
//!   `RUNNING_WITHIN` more.
//!   **A silent coordinator is not an idle one** (`partition::COORDINATOR_SILENT_MAX`): a
//!   blocker whose coordinator node has sent this partition nothing at all since the blocker
//!   last ran counts as working for up to 1 s instead of `RUNNING_WITHIN` — its node is not
//!   running (a stalled process or thread), and a deadlocked blocker's node keeps talking about
//!   its other transactions. A scheduling stall of a few hundred milliseconds on a loaded
//!   machine would otherwise kill every Delivery queued behind that node's Delivery, again
//!   and again as they retry into the same queue. A deadlock through a node that sends
//!   nothing at all lasts at most that second.
//! * A partition that restarts in the middle of a subtransaction relocks its logged locks but
//!   has lost its buffered writes and cannot tell whether the subtransaction's next operation
//!   continues the run or starts a roll-forward re-run: it rolls the subtransaction back and
//!   fails that operation (`AbortReason::Failure`), and the coordinator re-runs it as below.
//!   (Taking it for a new run would release the locks under write images the coordinator
//!   still holds: a lost update.)
//! * If concurrency control aborts a subtransaction after acceptance anyway (a cycle through
//!   itself, a queue limit, a lost message), the subtransaction is rolled back and the procedure
//!   is re-run the same way. Before acceptance the whole BASE transaction aborts and the client
//!   may retry.
//! * A subtransaction rolled back after acceptance is rolled back reliably: its `Abort` is
//!   resent until acknowledged, partitions durably mark it (`Record::BaseAborted`) and drop its
//!   operations that arrive late, and a roll-forward after a coordinator restart first rolls
//!   back, on every partition, the subtransaction the dead run left undecided. Otherwise stale
//!   alkaline locks stay until the transaction's next operation reaches that partition, and
//!   two accepted transactions can deadlock across partitions on each other's leftovers
//!   (neither can be aborted; found by `salt-chains`).
//! * Exceptions: an error inside a subtransaction (a failed operation, a user abort) rolls that
//!   subtransaction back and surfaces from `end_alkaline` or the operation, so the procedure can
//!   run a compensating subtransaction (Fig. 2).
//! * **Local-transaction optimization** (`salt-local`, §6.4): a single-operation subtransaction
//!   (`Ctx::alkaline_op`) on one partition is committed by the partition itself as soon as the
//!   operation completes — its ACID/alkaline locks are released (long-term ones become saline)
//!   without waiting for the coordinator. The partition remembers the result for roll-forward.
//!
//! Under `acid`, BASE procedures run as ordinary ACID transactions (boundaries are no-ops).
//!
//! ## A coordinator's node lost
//!
//! With `replicas > 1` a coordinator's log (its epoch records, commit decisions and Salt's
//! accepted BASE transactions) is kept by the coordinator's own replica group, on its node and
//! the ones after it (`litmus_runtime::replica`). When its node is lost, another member leads
//! the group and restarts the coordinator from that log, as a restart on its own node would:
//! it announces its new epoch (participants abort the old epoch's unprepared work and release
//! its locks), resends its logged decisions, answers participants' queries about prepared
//! transactions (presumed abort where it logged none) and rolls its accepted BASE transactions
//! forward. A participant reaches the coordinator wherever it leads: messages to
//! [`litmus_protocol::Addr::Coordinator`] go to the leader its node knows. With `replicas = 1`
//! the coordinator's log is on its node only, and its prepared transactions wait for that node
//! to restart.
//!
//! ## Not implemented (yet)
//!
//! * Lock waits have no timeout beyond LK-5's patience.
//! * A lost operation *reply* is not recovered: partitions keep no copy of replies (one per
//!   operation would cost every transaction for a loss only a faulty network shows), so the
//!   resent operation fails with a retryable abort and the transaction runs again.
//! * Deadlocks are broken by wait-die with patience (LK-5), not detected: a younger request
//!   queues behind an older holder for at most `LOCK_WAIT_PATIENCE`, then dies even if no
//!   cycle exists (a holder that keeps a hot lock longer than the patience still makes younger
//!   requests die and retry), and a real deadlock stalls its queues for about the patience.
//!   Pure wait-die would kill every younger requester at once, so TPC-C with the district row
//!   in mortal subtransactions would thrash although the row is held for a round trip.
//!   Deadlocks within one partition are found when they form (LK-5c); across partitions there
//!   is no waits-for graph detection, so they cost the patience. The price shows where
//!   deadlocks are common, as in the simulator's bank workload (every total reads every
//!   account): requests that would die and retry at once wait out cross-partition deadlocks
//!   instead. A stored-procedure call's retries keep their first attempt's age
//!   (`RequestBody::Call::retrying_for`, credited up to 60 s, past the bench's 30 s starvation bound), and so do
//!   interactive ones the client marks as retries (`Begin::retrying_for`: the SQL session does after `40001`/`40P01`);
//!   accepted BASE transactions wound (after the patience) whatever their own age, and
//!   ages compare each node's own clock (in the TCP runtime, time since that server started),
//!   so across nodes the credit is approximate.
//! * Next-key narrowing guesses the last row from committed data and rescans with the whole
//!   range locked when the guess went stale; it does not lock row by row as a B-tree engine
//!   would, so a scan that must wait for the narrowed range may wait for a row it turns out
//!   not to need.

pub mod coordinator;
pub mod lock;
pub mod partition;

use litmus_core::{Access, Error, Isolation, Key, NodeId, PartitionId, Row, TableId, TxnId};
use litmus_protocol::message::SubOpId;
use litmus_protocol::op::{OpKind, PartOp, PartResult};
use serde::{Deserialize, Serialize};

pub use coordinator::LockingCoordinator;
pub use partition::LockingPartition;

use litmus_protocol::engine::{Capabilities, CoordinatorEngine, EngineDef, Guarantee, PartitionEngine};

/// The registered engines `acid`, `salt` and `salt-local`: one implementation, three configs.
#[derive(Clone, Copy, Debug)]
pub struct LockingEngine {
    name: &'static str,
    cfg: LockingConfig,
}

impl LockingEngine {
    pub const ACID: LockingEngine = LockingEngine { name: "acid", cfg: LockingConfig { base: false, local: false } };
    pub const SALT: LockingEngine = LockingEngine { name: "salt", cfg: LockingConfig { base: true, local: false } };
    pub const SALT_LOCAL: LockingEngine =
        LockingEngine { name: "salt-local", cfg: LockingConfig { base: true, local: true } };
}

impl EngineDef for LockingEngine {
    fn name(&self) -> &'static str {
        self.name
    }
    fn guarantee(&self) -> &'static str {
        if self.cfg.base {
            "ACID for ACID transactions; Salt isolation for BASE transactions (Salt §5)"
        } else {
            "ACID at the chosen ANSI level (strict 2PL, 2PC, wait-die)"
        }
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            guarantee: Guarantee::AnsiLevels,
            base_transactions: self.cfg.base,
            one_round: false,
            interactive: true,
            batches: true,
            // UPDATE and SELECT ... FOR UPDATE lock for writing at their read (no upgrade deadlock).
            reads_for_update: true,
        }
    }
    fn coordinator(&self) -> Box<dyn CoordinatorEngine> {
        Box::new(LockingCoordinator::new(self.cfg))
    }
    fn partition(&self) -> Box<dyn PartitionEngine> {
        Box::new(LockingPartition::new(self.cfg))
    }
}

/// The switches that make `acid`, `salt` and `salt-local`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockingConfig {
    /// Run `ProcOptions::base()` procedures as BASE transactions.
    pub base: bool,
    /// Salt §6.4: partitions commit single-operation alkaline subtransactions themselves.
    pub local: bool,
}

/// A unit of atomic commit at a partition: an ACID transaction (`sub == 0`) or one alkaline
/// subtransaction of a BASE transaction (`sub >= 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Unit {
    pub txn: TxnId,
    pub sub: u32,
}

/// How a transaction locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnClass {
    pub isolation: Isolation,
    /// Alkaline locks (a BASE transaction's subtransaction) instead of ACID locks.
    pub base: bool,
    /// Wait-die priority: smaller is older.
    pub age: u64,
    /// An accepted BASE transaction: it cannot abort, so it never dies for wait-die; it waits
    /// and, after the patience, wounds the older transactions in its way (LK-5b).
    pub immortal: bool,
    /// LK-5h: an ACID transaction every operation of which so far, this one included,
    /// takes only short-term locks at its isolation level (a reader below repeatable read, such
    /// as TPC-C's Stock-Level): it holds no lock anywhere but those of operations in flight. A
    /// wait of such a transaction steps out of its queue instead of aborting it.
    pub lock_free: bool,
}

impl TxnClass {
    /// A transaction's class before its first operation.
    pub fn new(isolation: Isolation, base: bool, age: u64) -> Self {
        TxnClass { isolation, base, age, immortal: false, lock_free: !base }
    }

    /// LK-5h: the class once `op` is sent, which may take a long-term lock.
    pub fn with_op(mut self, op: &OpKind) -> Self {
        let access = match op {
            OpKind::Read { .. } | OpKind::ReadMany { .. } => Access::Read,
            OpKind::Scan { .. } => Access::RangeRead,
            // Writes, and reads for update (which take a write's lock).
            _ => Access::Write,
        };
        self.lock_free &= !self.isolation.long_term(access);
        self
    }
}

/// One write's effect, as shipped with a commit: the row image, or `None` for a delete.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WriteImage {
    pub table: TableId,
    pub key: Key,
    pub row: Option<Row>,
}

/// A committed write as a partition's log keeps it ([`Record::CommitColumns`]): the whole row
/// (an insert, a delete, or an update that changed most columns), or only the columns the write
/// changed. A TPC-C New-Order updates four of a stock row's seventeen columns; a whole image
/// would mostly repeat what the row already holds, in log bytes and in encoding CPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LoggedImage {
    /// The row after the write (`None`: deleted).
    Row(Option<Row>),
    /// `(column, value)` of each column that differs from the key's row before the write,
    /// ascending; every other column keeps its value. Only logged where a row of the same
    /// width was there.
    Columns(Vec<(u32, litmus_core::Value)>),
}

impl LoggedImage {
    /// How the log keeps a write that turned `before` into `after`.
    pub fn between(before: Option<&Row>, after: &Option<Row>) -> LoggedImage {
        if let (Some(b), Some(a)) = (before, after) {
            if b.len() == a.len() {
                // Unchanged strings are the same shared buffer, so equality is a pointer compare.
                let changed: Vec<(u32, litmus_core::Value)> =
                    (0..a.len()).filter(|&i| b[i] != a[i]).map(|i| (i as u32, a[i].clone())).collect();
                if changed.len() * 2 <= a.len() {
                    return LoggedImage::Columns(changed);
                }
            }
        }
        LoggedImage::Row(after.clone())
    }

    /// The row after the write, given the key's row before it. `None` when a column image
    /// finds no row of its width to apply to, which a log this engine wrote never holds.
    pub fn resolve(self, before: Option<&Row>) -> Option<Option<Row>> {
        match self {
            LoggedImage::Row(row) => Some(row),
            LoggedImage::Columns(changed) => {
                let mut row = before?.clone();
                for (i, v) in changed {
                    *row.get_mut(i as usize)? = v;
                }
                Some(Some(row))
            }
        }
    }
}

/// One committed write in [`Record::CommitColumns`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoggedWrite {
    pub table: TableId,
    pub key: Key,
    pub image: LoggedImage,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Execute an operation of `unit` under locks. `attempt` distinguishes re-runs of the same
    /// procedure (stale replies of an earlier run are dropped). `local_commit`: the operation
    /// is a whole alkaline subtransaction and the partition commits it itself (Salt §6.4).
    ///
    /// `after`: for a BASE write, the transaction's earlier reads on *other* partitions that
    /// still depended on unfinished BASE writes when they were answered (LK-6b across
    /// partitions, `lock::RemoteDep`); the write lock is not released before they settle.
    Op {
        id: SubOpId,
        unit: Unit,
        attempt: u32,
        class: TxnClass,
        op: PartOp,
        local_commit: bool,
        after: Vec<lock::RemoteDep>,
        /// The coordinator sends it again, having heard nothing for
        /// [`coordinator::OP_RESEND_AFTER`] (a network duplicate is `false`, like the original).
        resent: bool,
        /// The incarnation of this partition that answered an earlier operation of the unit
        /// (`Reply::Op::incarnation`), if one did. A partition restarted since refuses the
        /// operation with a retryable abort: the unit's earlier work there is lost, so the
        /// unit cannot commit, and run alone the operation can fail for a reason that is not
        /// the transaction's own — a New-Order's insert of the order number it read before
        /// the restart, which another New-Order has taken since, failed as a duplicate key.
        incarnation: Option<u64>,
    },
    /// Commit `unit` with these writes (one-phase, or the second phase of 2PC). Idempotent.
    /// `ops`: for a one-phase ACID commit, how many operations of the unit the coordinator sent
    /// this participant; the participant refuses (`Reply::Aborted`) unless it received exactly
    /// that many in its current incarnation (it restarted in between: the earlier operations'
    /// locks are gone and their write images may be stale). `None` for a logged decision.
    Commit { unit: Unit, writes: Vec<WriteImage>, ops: Option<u32> },
    /// First phase of 2PC. `ops` as for `Commit`: a participant that did not receive exactly
    /// that many operations of the unit in its current incarnation votes no.
    Prepare { unit: Unit, ops: u32 },
    /// Roll `unit` back and release what it holds (for a subtransaction: its non-saline locks).
    /// Ignored when the partition already runs a later `attempt` of the transaction (a late or
    /// duplicated abort must not undo the re-run's work).
    Abort { unit: Unit, attempt: u32 },
    /// The BASE transaction ended: release its saline locks (subject to §5.1's order rules) —
    /// once the commits of its subtransactions `after` have been applied here (decided, not yet
    /// acknowledged by this partition when the coordinator sent this; the partition keeps the
    /// `EndBase` until they arrive).
    EndBase { txn: TxnId, after: Vec<u32> },
    /// The coordinator of `node` restarted with `epoch`: drop unprepared work of older epochs.
    Epoch { node: NodeId, epoch: u32 },
    /// Answer to a participant's `Query`: the decision for an in-doubt unit.
    Decision { unit: Unit, commit: bool, writes: Vec<WriteImage> },
    /// LK-7: the answer to `Reply::QueryIdle`: `txn` is alive, keep what it holds.
    Alive { txn: TxnId },
    /// Partition → partition (LK-6b across partitions): tell me once `txn`'s BASE reads here
    /// up to grant number `upto` are settled (`LockManager::reads_settled`). Answered at once
    /// if they are, else when they become so; the asker repeats it while it still waits.
    AwaitReads { txn: TxnId, upto: u64 },
    /// Partition → partition: the answer to `AwaitReads` (settlement is permanent).
    ReadsSettled { txn: TxnId, upto: u64 },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// An operation's result; `writes` are the images it produced (the coordinator keeps the
    /// redo). `committed`: the partition committed the unit itself (local optimization).
    Op {
        id: SubOpId,
        attempt: u32,
        result: Result<PartResult, Error>,
        writes: Vec<WriteImage>,
        committed: bool,
        /// BASE transactions: the largest grant number of its reads here that still depend on
        /// an unfinished BASE write (`LockManager::read_taint`); later writes elsewhere carry
        /// it in `Request::Op::after`.
        read_taint: Option<u64>,
        /// The partition's incarnation (restarts so far) that ran it (`Request::Op::incarnation`).
        incarnation: u64,
    },
    Prepared {
        unit: Unit,
        vote: Result<(), Error>,
    },
    Committed {
        unit: Unit,
    },
    Aborted {
        unit: Unit,
    },
    /// LK-5b: an accepted BASE transaction waits for `txn`; abort it if it can still
    /// abort (it may be waiting for the BASE transaction's saline locks: a cycle).
    Wound {
        txn: TxnId,
    },
    /// A participant asks about an in-doubt unit (after its restart).
    Query {
        unit: Unit,
    },
    /// LK-7: unprepared work of ACID transaction `txn` has been idle here for
    /// `partition::ORPHAN_ASK_AFTER`: is the transaction alive? Answered `Request::Alive` if
    /// so; unanswered, the participant rolls it back at `partition::ORPHAN_TIMEOUT`.
    QueryIdle {
        txn: TxnId,
    },
    /// A partition holds work of BASE transaction `txn`, begun by an earlier incarnation of
    /// this coordinator: is it still alive? Unknown to the coordinator's log means it was never
    /// accepted (its logic is logged before its first subtransaction commits), so nothing of it
    /// committed anywhere and the answer is `EndBase`; a known one is rolled forward (or ended)
    /// by the coordinator, which needs no answer.
    QueryBase {
        txn: TxnId,
    },
    /// The BASE transaction's locks here are released (answer to `EndBase`).
    BaseEnded {
        txn: TxnId,
    },
}

impl Reply {
    /// An operation's failure: no result, no writes.
    pub fn op_failed(id: SubOpId, attempt: u32, error: Error, incarnation: u64) -> Reply {
        Reply::Op { id, attempt, result: Err(error), writes: vec![], committed: false, read_taint: None, incarnation }
    }
}

/// A partition's log records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Record {
    /// A unit committed: its writes, and (for a subtransaction) the saline locks its BASE
    /// transaction holds here, and (local commits) the op results for roll-forward. Written by
    /// earlier versions (and still replayed); this one writes [`Record::CommitColumns`].
    Commit { unit: Unit, writes: Vec<WriteImage>, saline: Vec<lock::HeldLock>, results: Vec<(u32, PartResult)> },
    /// 2PC first phase: the unit's write locks, to relock if we restart in doubt.
    Prepared { unit: Unit, coordinator: NodeId, locks: Vec<lock::HeldLock> },
    /// A prepared unit was rolled back.
    Aborted { unit: Unit },
    /// Locks a BASE subtransaction's operation took here, logged before it is answered: its
    /// commit decision may be re-sent after we restart, and until it arrives nobody else may
    /// write what it wrote (its row images would overwrite theirs). The unit's locks (its
    /// alkaline ones, and saline ones not durable in a `Commit` record), as the change from
    /// what its earlier `Locked` records said: folded in log order they give its locks at the
    /// last one (`State::pending`). One record per operation listing them all cost O(n²) for
    /// n operations: 22.5 KB of log per salt TPC-C transaction against acid's 6.8 KB.
    Locked { unit: Unit, delta: lock::LockDelta },
    /// A BASE transaction ended here. Its saline locks are gone, except `releasing`: those
    /// LK-6 still holds back (§5.1), relocked and released again after a restart.
    BaseEnded { txn: TxnId, releasing: Vec<lock::HeldLock> },
    /// The locks LK-6 held back for ended `txn` are gone (logged in the step that freed them,
    /// before any lock they kept out can be logged by someone else).
    Released { txn: TxnId },
    /// The saline locks a BASE transaction holds here after one of its subtransactions rolled
    /// back (its reads may still be held back by LK-6a; relocked after a restart).
    Saline { txn: TxnId, locks: Vec<lock::HeldLock> },
    /// Subtransaction `sub` of run `attempt` of BASE `txn` was rolled back here: operations of
    /// it (or of earlier ones) that arrive later are stale.
    BaseAborted { txn: TxnId, attempt: u32, sub: u32 },
    /// A restart: grant numbers of this incarnation start at `n << GRANT_INCARNATION_SHIFT`, so
    /// they never repeat (`lock::RemoteDep::upto` compares them across restarts).
    Incarnation { n: u64 },
    /// [`Record::Commit`] with each write as [`LoggedImage`]: the columns it changed where
    /// that is shorter. Replayed in order, each write against the key's row as the writes
    /// before it left it, exactly as it was applied.
    CommitColumns { unit: Unit, writes: Vec<LoggedWrite>, saline: Vec<lock::HeldLock>, results: Vec<(u32, PartResult)> },
}

/// The coordinator's log records (inside `CoordRecord::Engine`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CoordinatorRecord {
    /// Salt §6.1: the logic of a BASE transaction, logged before it is accepted.
    BaseLogic { txn: TxnId, procedure: String, args: Vec<litmus_core::Value>, age: u64, isolation: Isolation },
    /// A commit decision (2PC, or any BASE subtransaction): every participant (read-only ones
    /// with no writes) and its writes, and for
    /// a subtransaction the results of its operations (the context table, Salt §6.2).
    /// `taint`: the transaction's read taint per partition so far (LK-6b across partitions),
    /// so a roll-forward's writes still wait for the reads it replays from the context table.
    Decided {
        unit: Unit,
        writes: Vec<(litmus_core::PartitionId, Vec<WriteImage>)>,
        results: Vec<(SubOpId, PartResult)>,
        taint: Vec<(PartitionId, u64)>,
    },
    /// Results of a subtransaction a partition committed locally (Salt §6.4), and the taint as
    /// in `Decided`.
    LocalDone { unit: Unit, results: Vec<(SubOpId, PartResult)>, taint: Vec<(PartitionId, u64)> },
    /// Every participant acknowledged the decision.
    Ended { unit: Unit },
    /// A BASE transaction's procedure finished (logged before `EndBase` goes out): a restart
    /// does not run it again, it only resends `EndBase` to `parts` until they acknowledge.
    BaseFinished { txn: TxnId, parts: Vec<PartitionId> },
    /// A BASE transaction finished and every partition it touched has released its saline
    /// locks.
    BaseEnded { txn: TxnId },
}

/// Strict 2PL + 2PC at the four ANSI levels; BASE procedures run as ACID.
pub const ACID: litmus_protocol::EngineKind = litmus_protocol::EngineKind(&LockingEngine::ACID);
/// ACID plus Salt BASE transactions (alkaline/saline locks, early commit, roll-forward).
pub const SALT: litmus_protocol::EngineKind = litmus_protocol::EngineKind(&LockingEngine::SALT);
/// Salt with the local-transaction optimization (Salt §6.4).
pub const SALT_LOCAL: litmus_protocol::EngineKind = litmus_protocol::EngineKind(&LockingEngine::SALT_LOCAL);
