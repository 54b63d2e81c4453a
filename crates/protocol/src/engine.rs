//! The plug point for concurrency-control engines.
//!
//! An engine has two halves, each driven by a generic role:
//!
//! * [`CoordinatorEngine`] — inside the [`crate::Coordinator`]: turns each per-partition piece
//!   of an operation into messages, and runs the commit protocol (none, 2PC, an oracle round,
//!   timestamp votes...).
//! * [`PartitionEngine`] — inside the [`crate::Partition`]: answers those messages against the
//!   partition's store (locks, versions, formulas), logging every state change as a
//!   log record of its own that it can re-apply deterministically during recovery.
//!
//! An [`EngineDef`] bundles the two halves with the engine's name, guarantee, capabilities and
//! any roles it adds to the cluster (Omid's status oracle); [`EngineKind`] is a handle on one.
//! Each engine is a crate of its own; the registry crate `litmus-engines` lists them.
//!
//! The generic roles own everything engines share: the client session, procedures and their
//! executor, validation and routing of operations, merging of results, the store, the log and
//! snapshots. They never name an engine: engine messages travel as opaque [`Payload`]s and
//! engine records as bytes.

pub use crate::capability::{BaseEvent, BaseTransactions, GroupedIssue, OneRoundTransactions, RoleTraffic};
use crate::machine::{Effects, Machine};
use crate::message::{Addr, Envelope, Message, PartitionReply, PartitionRequest, Payload, SubOpId};
use crate::op::{PartOp, PartResult};
use crate::payload::PayloadData;
use litmus_core::{Catalog, Error, Isolation, NodeId, PartitionId, Time, TxnId, Value};
use litmus_storage::mvcc::MvccStore;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::fmt;

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
    /// What the procedure's invariants need ([`crate::procedure::Coordination`], registered
    /// with it from the invariant-confluence analysis); `None` for interactive transactions and
    /// procedures registered without a verdict. Engines that run without coordination
    /// (`coordfree`) refuse or specialise on it; the others ignore it.
    pub coordination: Option<crate::procedure::Coordination>,
}

/// Something an engine tells its coordinator.
#[derive(Debug)]
pub enum Event {
    /// One per-partition piece of an operation finished.
    OpDone { id: SubOpId, result: Result<PartResult, Error> },
    /// An event of Salt's BASE transactions ([`BaseTransactions`]).
    Base(BaseEvent),
    /// A commit (or abort) finished: `Ok` means committed (for an abort request: rolled back).
    /// `unlogged`: the transaction has no record on the coordinator's log, so the answer
    /// need not wait for the log ([`Effects::send_now`]).
    TxnDone { txn: TxnId, result: Result<(), Error>, unlogged: bool },
    /// A commit finished and assigned ids at commit (VLDB'15 §6.2: the procedure ran with
    /// temporary ids): each `(tmp, real)` replaces `Value::Int(tmp)` in the procedure's return
    /// values by `Value::Int(real)` — the `[tmpID → realID]` lookup applied to what the client
    /// reads.
    TxnDoneAssigned { txn: TxnId, ids: Vec<(i64, i64)> },
    /// A one-round transaction ([`OneRoundTransactions::one_round`]) ended: committed with the
    /// fragments' values in plan order, or aborted with this error (nothing applied).
    OneRoundDone { txn: TxnId, result: Result<Vec<Value>, Error> },
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
    pub out: &'a mut Effects,
    pub events: &'a mut Vec<Event>,
    /// The engine records logged since the last snapshot (the coordinator's snapshot keeps
    /// what [`CoordinatorEngine::compact`] leaves of them); `None` when no snapshot will be
    /// taken ([`crate::machine::Machine::never_snapshotted`]).
    pub(crate) kept: Option<&'a mut Vec<Vec<u8>>>,
}

/// What a [`CoordCtx`] borrows, owned, for unit tests that drive a coordinator engine directly
/// (one place to build the context, so a new field breaks no test).
#[cfg(any(test, feature = "testkit"))]
pub struct CoordCtxParts {
    pub rng: ChaCha8Rng,
    pub out: Effects,
    pub events: Vec<Event>,
    pub kept: Vec<Vec<u8>>,
}

#[cfg(any(test, feature = "testkit"))]
impl CoordCtxParts {
    pub fn new(seed: u64) -> Self {
        use rand::SeedableRng;
        CoordCtxParts { rng: ChaCha8Rng::seed_from_u64(seed), out: Effects::default(), events: vec![], kept: vec![] }
    }
    pub fn ctx<'a>(&'a mut self, me: Addr, partitions: u32, catalog: &'a Catalog) -> CoordCtx<'a> {
        CoordCtx {
            now: Time::ZERO,
            me,
            epoch: 1,
            rng: &mut self.rng,
            partitions,
            catalog,
            out: &mut self.out,
            events: &mut self.events,
            kept: Some(&mut self.kept),
        }
    }
}

impl CoordCtx<'_> {
    pub fn send(&mut self, to: Addr, msg: Message) {
        self.out.send.push(Envelope { from: self.me, to, msg });
    }
    pub fn send_to_partition(&mut self, p: PartitionId, body: impl PayloadData) {
        self.send(Addr::Partition(p), Message::PartitionRequest(PartitionRequest { body: Payload::new(body) }));
    }
    /// [`CoordCtx::send_to_partition`] for a request that depends on nothing on the
    /// coordinator's log ([`Effects::send_now`]): a transaction's request while the
    /// transaction has logged nothing here. It does not wait for other transactions' records.
    pub fn send_to_partition_now(&mut self, p: PartitionId, body: impl PayloadData) {
        let msg = Message::PartitionRequest(PartitionRequest { body: Payload::new(body) });
        self.out.send_now.push(Envelope { from: self.me, to: Addr::Partition(p), msg });
    }
    /// Engine-defined traffic to one of the engine's roles (or a client that talks to them).
    pub fn send_role(&mut self, to: Addr, body: impl PayloadData) {
        self.send(to, Message::Role(Payload::new(body)));
    }
    /// Counts one event for reports (`litmus bench` prints each name per committed
    /// transaction): what an engine does inside that a client cannot see, e.g. a retry.
    pub fn count(&mut self, name: &'static str) {
        self.out.counts.push(name);
    }
    /// Logs an engine record on the coordinator's log (replayed through `apply` on recovery).
    pub fn persist(&mut self, record: Vec<u8>) {
        self.out.persist.push(crate::coordinator::CoordRecord::encode_engine(&record));
        if let Some(kept) = self.kept.as_mut() {
            kept.push(record);
        }
    }
    pub fn op_done(&mut self, id: SubOpId, result: Result<PartResult, Error>) {
        self.events.push(Event::OpDone { id, result });
    }
    pub fn txn_done(&mut self, txn: TxnId, result: Result<(), Error>) {
        self.events.push(Event::TxnDone { txn, result, unlogged: false });
    }
    /// [`CoordCtx::txn_done`] for a transaction with no record on the coordinator's log (one
    /// whose commit no participant's answer makes final before its records are durable): its
    /// client is answered without waiting for other transactions' records.
    pub fn txn_done_unlogged(&mut self, txn: TxnId, result: Result<(), Error>) {
        self.events.push(Event::TxnDone { txn, result, unlogged: true });
    }
    pub fn txn_done_assigned(&mut self, txn: TxnId, ids: Vec<(i64, i64)>) {
        self.events.push(Event::TxnDoneAssigned { txn, ids });
    }
    pub fn one_round_done(&mut self, txn: TxnId, result: Result<Vec<Value>, Error>) {
        self.events.push(Event::OneRoundDone { txn, result });
    }
    pub fn control_done(&mut self, txn: TxnId, op: u32, result: Result<(), Error>) {
        self.events.push(Event::Base(BaseEvent::ControlDone { txn, op, result }));
    }
    pub fn early_commit(&mut self, txn: TxnId) {
        self.events.push(Event::Base(BaseEvent::EarlyCommit { txn }));
    }
    pub fn rerun(&mut self, txn: TxnId) {
        self.events.push(Event::Base(BaseEvent::Rerun { txn }));
    }
}

/// The coordinator half of an engine. Every method must eventually lead to the matching event
/// (`issue` → `OpDone`, `commit`/`abort` → `TxnDone`), possibly in a later step.
pub trait CoordinatorEngine: Send {
    fn begin(&mut self, txn: TxnId, opts: &TxnOptions, ctx: &mut CoordCtx);
    fn issue(&mut self, id: SubOpId, op: PartOp, ctx: &mut CoordCtx);
    fn commit(&mut self, txn: TxnId, ctx: &mut CoordCtx);
    fn abort(&mut self, txn: TxnId, ctx: &mut CoordCtx);
    fn on_reply(&mut self, from: PartitionId, reply: Payload, ctx: &mut CoordCtx);
    fn on_tick(&mut self, ctx: &mut CoordCtx);
    /// Re-applies a record this engine persisted (coordinator-side decisions, e.g. 2PC).
    fn apply(&mut self, record: &[u8]) -> Result<(), Error>;
    /// Log compaction: of `records` (everything this engine persisted, in order, since the
    /// last compaction), those whose replay still matters. Replaying the result into a fresh
    /// engine must give the same durable state as replaying all of them: drop only records
    /// whose effect later records undo. By default everything is kept.
    fn compact(&self, records: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        records
    }
    /// Whether `txn`, being committed, has written the record that commits it (a two-phase
    /// commit's decision), asked when this coordinator stops leading its replica group:
    /// `Some(false)` when nothing that could commit it is on the log (the next leader presumes
    /// it aborted), `Some(true)` when it commits once what this coordinator logged is durable,
    /// `None` (the default) when the engine cannot say (its participants or a role decide).
    fn commit_logged(&self, _txn: TxnId) -> Option<bool> {
        None
    }

    // Optional capabilities ([`crate::capability`]): what only some engines do, each behind a
    // trait of its own. `None` (the default) means the engine does not have it, and the
    // coordinator behaves as the capability's doc says for such engines.

    /// Salt's BASE transactions (alkaline subtransactions, roll-forward).
    fn base_transactions(&mut self) -> Option<&mut dyn BaseTransactions> {
        None
    }
    /// One-round transactions taken whole (Granola); must be `Some` exactly when
    /// [`Capabilities::one_round`] is set.
    fn one_round_transactions(&mut self) -> Option<&mut dyn OneRoundTransactions> {
        None
    }
    /// Traffic from the roles the engine adds to the cluster (Omid's status oracle).
    fn role_traffic(&mut self) -> Option<&mut dyn RoleTraffic> {
        None
    }
    /// Operations grouped by what a transaction issued together (coordfree's read batches).
    fn grouped_issue(&mut self) -> Option<&mut dyn GroupedIssue> {
        None
    }
}

/// What a partition engine may touch while handling one input.
pub struct PartCtx<'a> {
    pub now: Time,
    pub me: PartitionId,
    pub rng: &'a mut ChaCha8Rng,
    pub catalog: &'a Catalog,
    /// The procedures and fragments (engines that run one-round fragments look them up here).
    pub registry: &'a crate::procedure::Registry,
    /// Partitions in the cluster (to route a fragment's operations).
    pub partitions: u32,
    pub store: &'a mut MvccStore,
    pub out: &'a mut Effects,
}

/// What a [`PartCtx`] borrows, owned, for unit tests that drive a partition engine directly
/// (one place to build the context, so a new field breaks no test).
#[cfg(any(test, feature = "testkit"))]
pub struct PartCtxParts {
    pub now: Time,
    pub me: PartitionId,
    pub partitions: u32,
    pub rng: ChaCha8Rng,
    pub catalog: Catalog,
    pub registry: crate::procedure::Registry,
    pub store: MvccStore,
}

#[cfg(any(test, feature = "testkit"))]
impl PartCtxParts {
    /// Partition `me` of `partitions`, at time zero with an empty store and no procedures.
    pub fn new(me: PartitionId, partitions: u32, catalog: Catalog, seed: u64) -> Self {
        use rand::SeedableRng;
        PartCtxParts {
            now: Time::ZERO,
            me,
            partitions,
            rng: ChaCha8Rng::seed_from_u64(seed),
            catalog,
            registry: crate::procedure::Registry::new(),
            store: MvccStore::new(),
        }
    }

    /// Runs `f` on `engine` with a context over these parts: what it logged and sent.
    pub fn run<E: ?Sized>(&mut self, engine: &mut E, f: impl FnOnce(&mut E, &mut PartCtx)) -> Effects {
        let mut out = Effects::default();
        let mut ctx = PartCtx {
            now: self.now,
            me: self.me,
            rng: &mut self.rng,
            catalog: &self.catalog,
            registry: &self.registry,
            partitions: self.partitions,
            store: &mut self.store,
            out: &mut out,
        };
        f(engine, &mut ctx);
        out
    }
}

impl PartCtx<'_> {
    /// Logs a record. The caller applies it to the store right after (log, then apply: the same
    /// `apply` runs during recovery).
    pub fn log(&mut self, record: &impl Serialize) {
        self.out.persist.push(crate::payload::encode_exact(record));
    }
    pub fn reply(&mut self, to: Addr, body: impl PayloadData) {
        let msg = Message::PartitionReply(PartitionReply { from: self.me, body: Payload::new(body) });
        self.out.send.push(Envelope { from: Addr::Partition(self.me), to, msg });
    }
    /// A request to another partition (engines whose partitions talk to each other, e.g. the
    /// locking engine's cross-partition release order).
    pub fn send_to_partition(&mut self, to: PartitionId, body: impl PayloadData) {
        let msg = Message::PartitionRequest(PartitionRequest { body: Payload::new(body) });
        self.out.send.push(Envelope { from: Addr::Partition(self.me), to: Addr::Partition(to), msg });
    }
}

/// The partition half of an engine.
pub trait PartitionEngine: Send {
    /// A request from a coordinator or another partition. A payload the engine cannot decode (a
    /// peer running another engine) is dropped, like a lost message.
    fn on_request(&mut self, from: Addr, req: Payload, ctx: &mut PartCtx);
    fn on_tick(&mut self, ctx: &mut PartCtx);
    /// Applies a logged record (the bytes `PartCtx::log` wrote); deterministic. Used live and in
    /// recovery; a record that does not decode is corruption (an error, the node stops).
    fn apply_bytes(&mut self, record: &[u8], store: &mut MvccStore) -> Result<(), Error>;
    /// Engine state beyond the store, for snapshots.
    fn encode_state(&self) -> Vec<u8>;
    /// The engine's internal invariants (e.g. the lock manager's), checked by the simulator
    /// after every step; `Err` names the first violation.
    fn check_invariants(&self) -> Result<(), String> {
        Ok(())
    }
    fn decode_state(&mut self, bytes: &[u8]) -> Result<(), Error>;
    /// When the oldest transaction whose work here is volatile (not on the log, e.g. an
    /// unprepared transaction's locks and buffered writes) began here: a leadership change
    /// or a restart loses that work and aborts it. A replica about to hand its leadership
    /// over without need (leaders returning home) waits for such long transactions.
    fn volatile_since(&self) -> Option<Time> {
        None
    }
}

/// What an engine guarantees, in the terms the conformance suite checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guarantee {
    /// No isolation and no atomicity across partitions (the UNSAFE baseline); single operations
    /// are still atomic and durable, and bad input is still rejected.
    None,
    /// The four ANSI levels, serializable at `SERIALIZABLE` (strict 2PL). BASE procedures may
    /// run with Salt isolation between their alkaline subtransactions.
    AnsiLevels,
    /// Snapshot isolation: no lost updates, no dirty or fractured reads; write skew allowed.
    SnapshotIsolation,
    /// Read atomic (RAMP, Bailis et al. SIGMOD'14; the coordination-free engine): no dirty
    /// reads, no fractured reads (a transaction's writes become visible all at once), but lost
    /// updates and write skew are allowed — invariants that need more are kept by refusing the
    /// procedures that need coordination (VLDB'15 Theorem 1), not by isolation.
    ReadAtomic,
}

impl Guarantee {
    /// Its name in messages.
    pub fn label(self) -> &'static str {
        match self {
            Guarantee::None => "no isolation",
            Guarantee::AnsiLevels => "serializability (the ANSI levels)",
            Guarantee::SnapshotIsolation => "snapshot isolation",
            Guarantee::ReadAtomic => "read atomicity",
        }
    }

    /// Whether an engine with this guarantee gives a workload that needs `needed` what it
    /// needs. Serializable (the ANSI engines at `SERIALIZABLE`) covers everything; snapshot
    /// isolation covers read atomicity (it adds no lost updates); nothing covers more than it
    /// says.
    pub fn covers(self, needed: Guarantee) -> bool {
        matches!(
            (self, needed),
            (_, Guarantee::None)
                | (Guarantee::AnsiLevels, _)
                | (Guarantee::SnapshotIsolation, Guarantee::ReadAtomic | Guarantee::SnapshotIsolation)
                | (Guarantee::ReadAtomic, Guarantee::ReadAtomic)
        )
    }
}

/// What an engine can do, for planners, reports and the conformance suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    pub guarantee: Guarantee,
    /// Runs BASE procedures as BASE transactions (Salt); otherwise as single transactions.
    pub base_transactions: bool,
    /// Takes one-round transactions whole ([`OneRoundTransactions`]); otherwise the
    /// coordinator runs their fragments op by op (see [`crate::fragment`]).
    pub one_round: bool,
    /// Runs coordinator-driven transactions: interactive ones (`Begin` / `Op` / `Commit`) and
    /// ordinary procedures, op by op. An engine that runs one-round transactions only (Granola,
    /// §2) answers their operations with `InvalidInput::Unsupported` naming itself, and the
    /// conformance suite holds it to its guarantee through one-round procedures only.
    pub interactive: bool,
    /// Takes [`crate::Op::ReadMany`] and [`crate::Op::WriteMany`] whole, one request per
    /// partition (its partition half answers [`crate::op::OpKind::ReadMany`] and
    /// [`crate::op::OpKind::WriteMany`]); otherwise `Ctx::read_many` and `Ctx::write_many`
    /// send one operation per key.
    pub batches: bool,
    /// Takes [`crate::Op::ReadForUpdate`] as a read under a write lock (its partition half
    /// answers [`crate::op::OpKind::ReadForUpdate`]); otherwise the coordinator sends it as a
    /// plain read, which is all an engine without locks needs (it detects the conflict when
    /// the row is written).
    pub reads_for_update: bool,
}

/// An engine: its two halves, any roles it adds to the cluster, and what it guarantees.
///
/// This is the one plug point. An engine is a crate that implements this trait and exports an
/// [`EngineKind`] for it, plus one line in the registry (`litmus_engines::ALL`). It owns its message payloads (typed inside the
/// engine, [`crate::Payload`] outside) and its log records (bytes outside).
pub trait EngineDef: Send + Sync + 'static {
    /// The name users select it by (`--engine`).
    fn name(&self) -> &'static str;
    /// What it guarantees, one line, for `--help` and reports.
    fn guarantee(&self) -> &'static str;
    fn capabilities(&self) -> Capabilities;
    fn coordinator(&self) -> Box<dyn CoordinatorEngine>;
    fn partition(&self) -> Box<dyn PartitionEngine>;
    /// The machines of the roles this engine adds on `node` of a cluster of `nodes` nodes and
    /// `partitions` partitions (role `r` must run on [`crate::message::RoleId::node`]).
    fn roles(&self, _node: NodeId, _nodes: u32, _partitions: u32) -> Vec<Box<dyn Machine>> {
        Vec::new()
    }
    /// The roles this engine adds when roles are replica groups (`replicas > 1`), in place of
    /// [`EngineDef::roles`]: each role and a builder of its machine as it runs alone. Its state
    /// must be its snapshot plus its records, its recovery a restart: the runtime keeps it in a
    /// replica group on the role's node and the ones after it, and a new leader recovers it
    /// from the group's log.
    fn replicated_roles(&self, _partitions: u32) -> Vec<(crate::message::RoleId, RoleBuilder)> {
        Vec::new()
    }
}

/// Builds one role's machine ([`EngineDef::replicated_roles`]).
pub type RoleBuilder = std::sync::Arc<dyn Fn() -> Box<dyn Machine> + Send + Sync>;

/// A handle on an engine (`litmus_engines::ALL` lists the registered ones); compared, hashed
/// and serialized by name.
#[derive(Clone, Copy)]
pub struct EngineKind(pub &'static dyn EngineDef);

impl EngineKind {
    pub fn name(self) -> &'static str {
        self.0.name()
    }
    pub fn guarantee(self) -> &'static str {
        self.0.guarantee()
    }
    pub fn capabilities(self) -> Capabilities {
        self.0.capabilities()
    }
    pub fn coordinator(self) -> Box<dyn CoordinatorEngine> {
        self.0.coordinator()
    }
    pub fn partition(self) -> Box<dyn PartitionEngine> {
        self.0.partition()
    }
    pub fn roles(self, node: NodeId, nodes: u32, partitions: u32) -> Vec<Box<dyn Machine>> {
        self.0.roles(node, nodes, partitions)
    }
    pub fn replicated_roles(self, partitions: u32) -> Vec<(crate::message::RoleId, RoleBuilder)> {
        self.0.replicated_roles(partitions)
    }
}

impl PartialEq for EngineKind {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}
impl Eq for EngineKind {}
impl std::hash::Hash for EngineKind {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.name().hash(h)
    }
}
impl fmt::Debug for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for EngineKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Decodes a log record an engine wrote with [`PartCtx::log`] or [`CoordCtx::persist`]; bytes
/// that do not decode are corruption (`Error::Storage`).
pub fn decode_record<T: serde::de::DeserializeOwned>(engine: &str, bytes: &[u8]) -> Result<T, Error> {
    postcard::from_bytes(bytes).map_err(|e| Error::Storage(format!("{engine} log record ({} bytes): {e}", bytes.len())))
}

#[cfg(test)]
mod guarantee_tests {
    use super::Guarantee::{self, AnsiLevels, ReadAtomic, SnapshotIsolation};

    /// The lattice the harness refuses by: none < read atomic < snapshot isolation <
    /// serializable; each covers what is below it and nothing above.
    #[test]
    fn a_guarantee_covers_exactly_the_weaker_ones() {
        let order = [Guarantee::None, ReadAtomic, SnapshotIsolation, AnsiLevels];
        for (i, have) in order.iter().enumerate() {
            for (j, need) in order.iter().enumerate() {
                assert_eq!(have.covers(*need), j <= i, "{have:?} covers {need:?}");
            }
        }
    }
}
