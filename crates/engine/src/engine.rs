//! The plug point for concurrency-control engines.
//!
//! An engine has two halves, each driven by a generic role:
//!
//! * [`CoordinatorEngine`] — inside the [`crate::Coordinator`]: turns each per-partition piece
//!   of an operation into messages, and runs the commit protocol (none, 2PC, an oracle round,
//!   timestamp votes...).
//! * [`PartitionEngine`] — inside the [`crate::Partition`]: answers those messages against the
//!   partition's store (locks, versions, formulas), logging every state change as a
//!   [`PartitionRecord`] that it can re-apply deterministically during recovery.
//!
//! The generic roles own everything engines share: the client session, procedures and their
//! executor, validation and routing of operations, merging of results, the store, the log and
//! snapshots. [`EngineKind`] names the engines a database can be created with.

use crate::engines::locking::{LockingConfig, LockingCoordinator, LockingPartition};
use crate::engines::nocc;
use crate::engines::omid::engine::{OmidCoordinator, OmidPartition};
use crate::engines::omid::node::OracleReply;
use crate::machine::Effects;
use crate::message::{Addr, EngineReply, EngineRequest, Envelope, Message, PartitionRecord, SubOpId};
use crate::op::{PartOp, PartResult};
use crate::procedure::Control;
use litmus_core::{Catalog, Error, InvalidInput, Isolation, PartitionId, Time, TxnId, Value};
use litmus_storage::mvcc::MvccStore;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What an engine learns about a transaction when it begins.
#[derive(Clone, Debug, PartialEq)]
pub struct TxnOptions {
    pub isolation: Isolation,
    /// A BASE transaction (Salt §4); see [`crate::procedure::ProcOptions::base`].
    pub base: bool,
    /// The procedure and its arguments (`None` for interactive transactions). Salt logs them
    /// before a BASE transaction is accepted, to roll it forward after a crash (§6.1).
    pub procedure: Option<(String, Vec<Value>)>,
    /// When the transaction's first attempt began: `now` for a first attempt, earlier for a
    /// client's retry (see `RequestBody::Call::retrying_for`). Engines that resolve conflicts by
    /// age (the locking engine's wait-die) derive the age from it, so a retry keeps its place.
    pub first_attempt: Time,
}

/// Something an engine tells its coordinator.
#[derive(Debug)]
pub enum Event {
    /// One per-partition piece of an operation finished.
    OpDone { id: SubOpId, result: Result<PartResult, Error> },
    /// A control point of a procedure (e.g. the end of an alkaline subtransaction) finished.
    ControlDone { txn: TxnId, op: u32, result: Result<(), Error> },
    /// Early commit (Salt §6.1): answer the client now; the transaction goes on and will commit.
    Accepted { txn: TxnId },
    /// Re-run the transaction's procedure from the start: the engine serves operations it has
    /// already completed from its context table (Salt §6.2 roll-forward; also used to retry an
    /// accepted BASE transaction's alkaline subtransaction that concurrency control aborted).
    Restart { txn: TxnId },
    /// A commit (or abort) finished: `Ok` means committed (for an abort request: rolled back).
    TxnDone { txn: TxnId, result: Result<(), Error> },
}

/// What a coordinator engine may touch while handling one input.
pub struct CoordCtx<'a> {
    pub now: Time,
    pub me: Addr,
    /// The coordinator's incarnation (bumped at every restart).
    pub epoch: u32,
    pub rng: &'a mut ChaCha8Rng,
    pub partitions: u32,
    pub catalog: &'a Catalog,
    pub(crate) out: &'a mut Effects,
    pub(crate) events: &'a mut Vec<Event>,
}

impl CoordCtx<'_> {
    pub fn send(&mut self, to: Addr, msg: Message) {
        self.out.send.push(Envelope { from: self.me, to, msg });
    }
    pub fn send_to_partition(&mut self, p: PartitionId, body: EngineRequest) {
        self.send(Addr::Partition(p), Message::PartitionRequest(crate::message::PartitionRequest { body }));
    }
    /// Logs an engine record on the coordinator's log (replayed through `apply` on recovery).
    pub fn persist(&mut self, record: Vec<u8>) {
        let rec = crate::coordinator::CoordRecord::Engine(record);
        self.out.persist.push(postcard::to_stdvec(&rec).expect("records serialize"));
    }
    pub fn op_done(&mut self, id: SubOpId, result: Result<PartResult, Error>) {
        self.events.push(Event::OpDone { id, result });
    }
    pub fn txn_done(&mut self, txn: TxnId, result: Result<(), Error>) {
        self.events.push(Event::TxnDone { txn, result });
    }
    pub fn control_done(&mut self, txn: TxnId, op: u32, result: Result<(), Error>) {
        self.events.push(Event::ControlDone { txn, op, result });
    }
    pub fn accepted(&mut self, txn: TxnId) {
        self.events.push(Event::Accepted { txn });
    }
    pub fn restart(&mut self, txn: TxnId) {
        self.events.push(Event::Restart { txn });
    }
}

/// The coordinator half of an engine. Every method must eventually lead to the matching event
/// (`issue` → `OpDone`, `commit`/`abort` → `TxnDone`), possibly in a later step.
pub trait CoordinatorEngine: Send {
    fn begin(&mut self, txn: TxnId, opts: &TxnOptions, ctx: &mut CoordCtx);
    fn issue(&mut self, id: SubOpId, op: PartOp, ctx: &mut CoordCtx);
    /// A procedure's control point. Engines without BASE transactions accept it at once.
    fn control(&mut self, txn: TxnId, op: u32, _control: Control, ctx: &mut CoordCtx) {
        ctx.control_done(txn, op, Ok(()));
    }
    /// A single-operation alkaline subtransaction ([`crate::Ctx::alkaline_op`]); by default a
    /// plain operation.
    fn issue_alkaline(&mut self, id: SubOpId, op: PartOp, ctx: &mut CoordCtx) {
        self.issue(id, op, ctx)
    }
    /// After `apply` has replayed the log: transactions to roll forward (Salt §6.2), as
    /// (id, procedure, arguments). The coordinator re-runs each procedure under its old id.
    fn take_recovered(&mut self) -> Vec<(TxnId, String, Vec<Value>)> {
        Vec::new()
    }
    fn commit(&mut self, txn: TxnId, ctx: &mut CoordCtx);
    fn abort(&mut self, txn: TxnId, ctx: &mut CoordCtx);
    fn on_reply(&mut self, from: PartitionId, reply: EngineReply, ctx: &mut CoordCtx);
    /// A reply from an Omid status oracle replica (`from`); engines that do not talk to it drop it.
    fn on_oracle_reply(&mut self, _from: Addr, _reply: OracleReply, _ctx: &mut CoordCtx) {}
    fn on_tick(&mut self, ctx: &mut CoordCtx);
    /// Re-applies a record this engine persisted (coordinator-side decisions, e.g. 2PC).
    fn apply(&mut self, record: &[u8]) -> Result<(), Error>;
}

/// What a partition engine may touch while handling one input.
pub struct PartCtx<'a> {
    pub now: Time,
    pub me: PartitionId,
    pub rng: &'a mut ChaCha8Rng,
    pub catalog: &'a Catalog,
    pub store: &'a mut MvccStore,
    pub(crate) out: &'a mut Effects,
}

impl PartCtx<'_> {
    /// Logs a record. The caller applies it to the store right after (log, then apply: the same
    /// `apply` runs during recovery).
    pub fn log(&mut self, record: &PartitionRecord) {
        self.out.persist.push(postcard::to_stdvec(record).expect("records serialize"));
    }
    pub fn reply(&mut self, to: Addr, body: EngineReply) {
        let msg = Message::PartitionReply(crate::message::PartitionReply { from: self.me, body });
        self.out.send.push(Envelope { from: Addr::Partition(self.me), to, msg });
    }
    /// A request to another partition (engines whose partitions talk to each other, e.g. the
    /// locking engine's cross-partition release order).
    pub fn send_to_partition(&mut self, to: PartitionId, body: EngineRequest) {
        let msg = Message::PartitionRequest(crate::message::PartitionRequest { body });
        self.out.send.push(Envelope { from: Addr::Partition(self.me), to: Addr::Partition(to), msg });
    }
}

/// The partition half of an engine.
pub trait PartitionEngine: Send {
    fn on_request(&mut self, from: Addr, req: EngineRequest, ctx: &mut PartCtx);
    fn on_tick(&mut self, ctx: &mut PartCtx);
    /// Applies a logged record; deterministic. Used live (after `PartCtx::log`) and in recovery.
    fn apply(&mut self, record: PartitionRecord, store: &mut MvccStore) -> Result<(), Error>;
    /// Engine state beyond the store, for snapshots.
    fn encode_state(&self) -> Vec<u8>;
    fn decode_state(&mut self, bytes: &[u8]) -> Result<(), Error>;
}

/// The engines a database can run. Each names its paper and its guarantee in its module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EngineKind {
    /// No concurrency control (UNSAFE): the throughput upper bound. See [`crate::engines::nocc`].
    Nocc,
    /// Strict 2PL + 2PC at the four ANSI levels; BASE procedures run as ACID.
    /// See [`crate::engines::locking`].
    Acid,
    /// ACID plus Salt BASE transactions (alkaline/saline locks, early commit, roll-forward).
    Salt,
    /// Salt with the local-transaction optimization (Salt §6.4).
    SaltLocal,
    /// Snapshot isolation through a status oracle (Omid ICDE'14). See [`crate::engines::omid`].
    Omid,
}

impl EngineKind {
    pub const ALL: &'static [EngineKind] =
        &[EngineKind::Nocc, EngineKind::Acid, EngineKind::Salt, EngineKind::SaltLocal, EngineKind::Omid];

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Nocc => "nocc",
            EngineKind::Acid => "acid",
            EngineKind::Salt => "salt",
            EngineKind::SaltLocal => "salt-local",
            EngineKind::Omid => "omid",
        }
    }

    fn locking(self) -> Option<LockingConfig> {
        match self {
            EngineKind::Nocc | EngineKind::Omid => None,
            EngineKind::Acid => Some(LockingConfig { base: false, local: false }),
            EngineKind::Salt => Some(LockingConfig { base: true, local: false }),
            EngineKind::SaltLocal => Some(LockingConfig { base: true, local: true }),
        }
    }

    /// What the engine guarantees, one line, for `--help` and reports.
    pub fn guarantee(self) -> &'static str {
        match self {
            EngineKind::Nocc => "none (UNSAFE baseline: no isolation, no atomicity across partitions)",
            EngineKind::Acid => "ACID at the chosen ANSI level (strict 2PL, 2PC, wait-die)",
            EngineKind::Salt | EngineKind::SaltLocal => {
                "ACID for ACID transactions; Salt isolation for BASE transactions (Salt §5)"
            }
            EngineKind::Omid => "snapshot isolation (lock-free, status oracle; BASE procedures run as SI)",
        }
    }

    /// Whether the cluster runs an Omid status oracle ([`crate::message::Addr::Oracle`]).
    pub fn needs_oracle(self) -> bool {
        self == EngineKind::Omid
    }

    pub fn coordinator(self) -> Box<dyn CoordinatorEngine> {
        if self == EngineKind::Omid {
            return Box::new(OmidCoordinator::new());
        }
        match self.locking() {
            None => Box::new(nocc::NoccCoordinator),
            Some(cfg) => Box::new(LockingCoordinator::new(cfg)),
        }
    }

    pub fn partition(self) -> Box<dyn PartitionEngine> {
        if self == EngineKind::Omid {
            return Box::new(OmidPartition::default());
        }
        match self.locking() {
            None => Box::new(nocc::NoccPartition::default()),
            Some(cfg) => Box::new(LockingPartition::new(cfg)),
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for EngineKind {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EngineKind::ALL.iter().copied().find(|e| e.name() == s).ok_or_else(|| {
            let known: Vec<_> = EngineKind::ALL.iter().map(|e| e.name()).collect();
            InvalidInput::Config(format!("unknown engine {s:?} (known: {})", known.join(", ")))
        })
    }
}
