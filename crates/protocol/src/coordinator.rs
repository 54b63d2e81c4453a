//! The coordinator role: runs transactions on behalf of clients.
//!
//! ## The life of a transaction
//!
//! 1. A client sends `Call { procedure, args }` (or `Begin` and then ops, for an interactive
//!    transaction). The coordinator checks the procedure exists and the argument types, assigns
//!    a [`TxnId`] and calls `engine.begin`.
//! 2. It polls the procedure's future (see [`crate::procedure`]). Each operation the procedure
//!    issues is validated and routed ([`crate::op::resolve`]); invalid ones fail at once and
//!    change nothing. Valid ones are split into one piece per partition and handed to the
//!    engine (`engine.issue`), which sends them (or answers from its own state).
//! 3. The engine reports `OpDone` per piece; when all pieces of an op are in, the results are
//!    merged and handed to the procedure, which is polled again.
//! 4. When the procedure returns `Ok`, the coordinator asks the engine to commit; on `Err`, to
//!    abort. The engine reports `TxnDone` and the coordinator answers the client.
//!
//! Every client request is run at most once per coordinator incarnation: the network may
//! duplicate a message, so the coordinator remembers the last
//! [`CLIENT_REQUESTS_REMEMBERED_MAX`] (client, request id) pairs and drops repeats.
//!
//! The coordinator persists one record of its own: its epoch, bumped at every restart, so that
//! transaction ids are never reused. Engines persist their own records (2PC decisions) through
//! [`CoordCtx::persist`].

use crate::bounded::BoundedSeqSet;
use crate::engine::{BaseEvent, CoordCtx, CoordinatorEngine, EngineKind, Event, TxnOptions};
use crate::machine::{Effects, Input, Machine, TICK_INTERVAL_MS};
use crate::message::{
    Addr, Batched, ClientRequest, ClientResponse, Envelope, Message, RequestBody, ResponseBody, SubOpId,
};
use crate::op::{merge, resolve, Op, PartResult, Resolved, Shape};
use crate::procedure::{poll_once, Ctx, Issued, ProcFuture, Registry};
use litmus_core::{AbortReason, Catalog, Error, InvalidInput, NodeId, PartitionId, RequestId, Time, TxnId, Value};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// Most transactions one coordinator runs at once; beyond it clients get `Unavailable`.
pub const TXNS_ACTIVE_MAX: usize = 65_536;
/// An interactive transaction idle this long is aborted.
pub const INTERACTIVE_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// A transaction whose operations made no progress this long (a partition crashed or is cut
/// off) is aborted so its state is freed; the client has long since timed out.
pub const TXN_STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Engine records a coordinator keeps in memory between snapshots before it compacts them
/// (again each time they doubled): memory stays proportional to the work in flight.
pub const KEPT_RECORDS_COMPACT_AT: usize = 16_384;
/// Most a client's `retrying_for` may backdate a transaction's priority. A client could claim
/// more to jump the queue; the cap bounds how far. It must exceed how long a client keeps
/// retrying one transaction (the bench's TPC-C terminals: 30 s, then the run fails): past the
/// cap every long retry gets the same age, `now − cap`, so the one retrying longest no longer
/// wins, and wait-die's promise that the oldest never dies is gone. At 10 s, 128 TPC-C clients
/// on 2 cores under `salt` starved a Delivery for 30 s (105 attempts, each behind a younger
/// retry that the cap made look older).
pub const RETRY_PRIORITY_CREDIT_MAX: Duration = Duration::from_secs(60);

/// The coordinator's own log records.
#[derive(Debug, Serialize, Deserialize)]
pub enum CoordRecord {
    Epoch(u32),
    Engine(Vec<u8>),
}

impl CoordRecord {
    /// The postcard bytes of `CoordRecord::Engine(record)`, without building it: the variant
    /// index and the length as varints, then the bytes. Serde writes a `Vec<u8>` one element at
    /// a time, and every engine record of every transaction would go through that loop and a
    /// copy. `an_engine_record_is_encoded_as_postcard_would` pins the equality.
    pub(crate) fn encode_engine(record: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(record.len() + 1 + 10);
        out.push(1); // `Engine`, the second variant (a varint below 128 is one byte)
        let mut len = record.len();
        while len >= 0x80 {
            out.push((len as u8 & 0x7f) | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend_from_slice(record);
        out
    }
}

/// A coordinator snapshot: its epoch and the engine records that still matter
/// ([`crate::engine::CoordinatorEngine::compact`]), so the log stays as short as the work in
/// flight rather than as long as the node's life.
#[derive(Debug, Serialize, Deserialize)]
struct CoordSnapshot {
    epoch: u32,
    engine: Vec<Vec<u8>>,
}

/// Configuration shared by every coordinator of a cluster.
#[derive(Clone)]
pub struct CoordinatorConfig {
    pub node: NodeId,
    pub engine: EngineKind,
    pub partitions: u32,
    /// The partition that serves reads of replicated tables (a local one when there is one).
    pub preferred: PartitionId,
    pub catalog: Arc<Catalog>,
    pub registry: Arc<Registry>,
    pub seed: u64,
}

/// The options of a one-round transaction a request stands for (no procedure, no retry).
fn one_round_options(isolation: litmus_core::Isolation, now: Time) -> TxnOptions {
    TxnOptions { isolation, base: false, procedure: None, first_attempt: now, coordination: None }
}

enum Source {
    Procedure {
        fut: ProcFuture,
        ctx: Ctx,
    },
    Interactive,
    /// A one-round transaction the engine took whole ([`crate::fragment`]).
    OneRound,
    /// A one-round read transaction of one page ([`RequestBody::Read`]): its fragments' values
    /// merge into the page of `table` by `shape` ([`crate::page::merge_fragment_pages`]).
    OneRoundRead {
        table: litmus_core::TableId,
        shape: Shape,
    },
}

#[derive(Debug)]
enum Outcome {
    /// Commit; a procedure's return values.
    Commit(Vec<Value>),
    /// Abort because of this error (reported to the client).
    Abort(Error),
    /// Abort at the client's request.
    Rollback,
}

struct PendingOp {
    shape: Shape,
    /// Partitions whose piece is still out, each once (so a duplicated reply counts once).
    /// Mostly one: a vector, not a set.
    waiting: Vec<PartitionId>,
    results: Vec<PartResult>,
    error: Option<Error>,
    /// For interactive ops: the client request to answer.
    reply: Option<RequestId>,
}

struct Txn {
    client: Addr,
    /// The request that started (procedure) or is finishing (interactive) the transaction.
    request: Option<RequestId>,
    source: Source,
    /// Boxed: a B-tree's inserts and removes shift its entries.
    ops: BTreeMap<u32, Box<PendingOp>>,
    finishing: Option<Outcome>,
    last_active: Time,
    /// The procedure and arguments, to re-run it on `BaseEvent::Rerun`.
    procedure: Option<(String, Vec<Value>)>,
    /// Next op id of an interactive transaction (never reused, so a late reply to an old op
    /// cannot complete a new one).
    next_op: u32,
    /// A write sent to several partitions failed on some after it applied on others: the
    /// transaction can no longer commit (its commit rolls it back with this error), so a failed
    /// write never half-applies. Not for BASE transactions: their engine rolls back the
    /// subtransaction an operation failed in (Salt's alkaline subtransactions), and an accepted
    /// one must not be aborted.
    doomed: Option<Error>,
    /// Runs as a BASE transaction (the procedure is BASE and the engine has them).
    base: bool,
    /// The partition of the transaction's first operation on a partitioned table: its reads of
    /// a replicated table go there, a partition it uses already, rather than to this node's
    /// preferred one (a TPC-C New-Order whose warehouse is not on its node's first partition
    /// read its items from a second participant, and paid two-phase commit for it).
    home: Option<PartitionId>,
}

pub struct Coordinator {
    cfg: CoordinatorConfig,
    epoch: u32,
    epoch_logged: bool,
    next_seq: u64,
    engine: Box<dyn CoordinatorEngine>,
    rng: ChaCha8Rng,
    txns: BTreeMap<TxnId, Txn>,
    events: Vec<Event>,
    last_idle_check: Time,
    /// Transactions recovered from the log, restarted at the first step.
    to_roll_forward: Vec<TxnId>,
    /// Client requests seen recently (bounded by [`CLIENT_REQUESTS_REMEMBERED_MAX`], oldest
    /// forgotten first): the network may duplicate a request, and running it twice would run a
    /// procedure twice or apply an interactive operation's formula twice.
    seen_requests: BoundedSeqSet<Addr, RequestId>,
    /// Engine records persisted since the last snapshot (plus what compaction kept before it).
    kept: Vec<Vec<u8>>,
    /// `kept.len()` right after the last compaction (compaction runs again once it doubled).
    kept_compacted: usize,
    /// Whether a snapshot may be asked for, so `kept` is kept. Off for a coordinator without a
    /// log ([`Machine::never_snapshotted`]): its records, each a copy of a decision with every
    /// row written, would be a large share of a TPC-C run's memory growth and of the fresh
    /// pages it touches.
    keeps_records: bool,
}

/// How many client requests a coordinator remembers to drop their duplicates. Not durable: a
/// duplicate delayed across a coordinator restart is not recognized.
pub const CLIENT_REQUESTS_REMEMBERED_MAX: usize = 100_000;

impl Coordinator {
    pub fn new(cfg: CoordinatorConfig) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ (0x434f_4f52 << 32) ^ cfg.node.0 as u64);
        Coordinator {
            engine: cfg.engine.coordinator(),
            cfg,
            epoch: 0,
            epoch_logged: false,
            next_seq: 0,
            rng,
            txns: BTreeMap::new(),
            events: Vec::new(),
            last_idle_check: Time::ZERO,
            to_roll_forward: Vec::new(),
            kept: Vec::new(),
            kept_compacted: 0,
            keeps_records: true,
            seen_requests: BoundedSeqSet::new(CLIENT_REQUESTS_REMEMBERED_MAX),
        }
    }

    /// The node whose coordinator this is (where it runs unless its replica group's leader
    /// moved).
    pub fn node(&self) -> NodeId {
        self.cfg.node
    }

    /// Builds this coordinator afresh, with nothing recovered: what a member of its replica
    /// group restarts it from (`litmus_runtime::replica`).
    pub fn template(&self) -> impl Fn() -> Coordinator + Send + 'static {
        let cfg = self.cfg.clone();
        move || Coordinator::new(cfg.clone())
    }

    /// Whether one of this coordinator's transactions still serves `client`'s request `id`:
    /// the procedure it runs, the commit or rollback it finishes, or an operation it waits
    /// for. Such a request may still change data, so the simulator waits for it before its
    /// checks read.
    pub fn holds_request(&self, client: Addr, id: RequestId) -> bool {
        self.txns
            .values()
            .any(|t| t.client == client && (t.request == Some(id) || t.ops.values().any(|op| op.reply == Some(id))))
    }

    /// This coordinator stops here (its replica group's leadership moved): every client
    /// waiting on it is answered, now or once the group settles what it logged. Nothing else is
    /// sent.
    ///
    /// * A transaction this coordinator alone drives that logged nothing that could commit it
    ///   (not finishing, or a two-phase commit before its decision) is presumed aborted by the
    ///   coordinator that takes over: a retryable abort, now.
    /// * One being rolled back or aborted gets that answer, now (presumed abort agrees).
    /// * One whose commit decision is logged ([`CoordinatorEngine::commit_logged`]) has
    ///   committed if what this coordinator logged becomes durable: its answer is returned, to
    ///   be sent once the group commits this leader's last proposal (the replica answers
    ///   "outcome unknown" if the group drops it).
    /// * Any other (BASE, whose accepted steps roll forward; one-round, whose participants
    ///   decide; an engine that cannot say) gets "outcome unknown", now.
    pub fn abandon(&mut self, out: &mut Effects) -> Vec<Envelope> {
        let mut owed = Vec::new();
        let me = self.me();
        for (txn, t) in std::mem::take(&mut self.txns) {
            let alone = !t.base && matches!(t.source, Source::Procedure { .. } | Source::Interactive);
            let unknown = || Error::Unavailable {
                reason: "the coordinator moved to another node (its replica group's leadership changed); \
                         outcome unknown"
                    .into(),
                outcome_unknown: true,
            };
            let presumed_aborted = || Err(Error::Abort(litmus_core::AbortReason::Failure));
            // The answer to the request that finishes the transaction, and whether it holds
            // only once what this coordinator logged is durable.
            let (finish, after_log) = match (&t.finishing, alone) {
                (None, true) => (presumed_aborted(), false),
                (Some(Outcome::Rollback), true) => (Ok(ResponseBody::RolledBack), false),
                (Some(Outcome::Abort(e)), true) => (Err(e.clone()), false),
                (Some(Outcome::Commit(values)), true) => match self.engine.commit_logged(txn) {
                    Some(false) => (presumed_aborted(), false),
                    Some(true) => match t.source {
                        Source::Interactive => (Ok(ResponseBody::Committed), true),
                        _ => (Ok(ResponseBody::Returned(values.clone())), true),
                    },
                    None => (Err(unknown()), false),
                },
                _ => (Err(unknown()), false),
            };
            let op_error =
                if alone && !after_log { Error::Abort(litmus_core::AbortReason::Failure) } else { unknown() };
            let answers = t.request.map(|id| (id, finish)).into_iter();
            let answers = answers.chain(t.ops.values().filter_map(|op| op.reply).map(|id| (id, Err(op_error.clone()))));
            for (id, result) in answers {
                let msg = Message::ClientResponse(ClientResponse { id, result });
                let env = Envelope { from: me, to: t.client, msg };
                if after_log {
                    owed.push(env)
                } else {
                    out.send.push(env)
                }
            }
        }
        owed
    }

    /// Since when the oldest transaction in flight here has been active, if any.
    pub fn busy_since(&self) -> Option<Time> {
        self.txns.values().map(|t| t.last_active).min()
    }

    /// Transactions in flight (for tests and metrics).
    pub fn active_txns(&self) -> usize {
        self.txns.len()
    }

    fn me(&self) -> Addr {
        Addr::Coordinator(self.cfg.node)
    }

    /// Runs `f` against the engine with a context borrowing this coordinator's parts.
    fn with_engine(&mut self, now: Time, out: &mut Effects, f: impl FnOnce(&mut dyn CoordinatorEngine, &mut CoordCtx)) {
        let mut ctx = CoordCtx {
            now,
            me: Addr::Coordinator(self.cfg.node),
            epoch: self.epoch,
            rng: &mut self.rng,
            partitions: self.cfg.partitions,
            catalog: &self.cfg.catalog,
            out,
            events: &mut self.events,
            kept: if self.keeps_records { Some(&mut self.kept) } else { None },
        };
        f(self.engine.as_mut(), &mut ctx);
    }

    fn respond(&self, out: &mut Effects, to: Addr, id: RequestId, result: Result<ResponseBody, Error>) {
        let msg = Message::ClientResponse(ClientResponse { id, result });
        out.send.push(Envelope { from: self.me(), to, msg });
    }

    fn new_txn(
        &mut self,
        now: Time,
        client: Addr,
        request: Option<RequestId>,
        source: Source,
        opts: TxnOptions,
        out: &mut Effects,
    ) -> TxnId {
        self.next_seq += 1;
        let id = TxnId { node: self.cfg.node, epoch: self.epoch, seq: self.next_seq };
        let procedure = opts.procedure.clone();
        let base = opts.base && self.cfg.engine.capabilities().base_transactions;
        let txn = Txn {
            client,
            request,
            source,
            ops: BTreeMap::new(),
            finishing: None,
            last_active: now,
            procedure,
            next_op: 0,
            doomed: None,
            home: None,
            base,
        };
        self.txns.insert(id, txn);
        self.with_engine(now, out, |e, ctx| e.begin(id, &opts, ctx));
        id
    }

    /// [`RequestBody::Disconnected`]: the client's open interactive transactions roll back.
    fn disconnected(&mut self, now: Time, from: Addr, out: &mut Effects) {
        let open: Vec<TxnId> = self
            .txns
            .iter()
            .filter(|(_, t)| t.client == from && matches!(t.source, Source::Interactive) && t.finishing.is_none())
            .map(|(txn, _)| *txn)
            .collect();
        for txn in open {
            self.finish(now, txn, Outcome::Rollback, out);
        }
    }

    fn on_client(&mut self, now: Time, from: Addr, req: ClientRequest, out: &mut Effects) {
        let id = req.id;
        if matches!(req.body, RequestBody::Disconnected) {
            return self.disconnected(now, from, out); // no id of the client's: never a duplicate
        }
        if !self.seen_requests.insert(from, id) {
            return; // a duplicated request: its first copy is running or was answered
        }
        let is_new_txn = matches!(req.body, RequestBody::Call { .. } | RequestBody::Begin { .. });
        if is_new_txn && self.txns.len() >= TXNS_ACTIVE_MAX {
            return self.respond(out, from, id, Err(Error::unavailable("coordinator at its transaction limit")));
        }
        match req.body {
            RequestBody::Call { procedure, args, retrying_for } => {
                let proc = match self.cfg.registry.get(&procedure).and_then(|p| p.check_args(&args).map(|_| p)) {
                    Ok(p) => p.clone(),
                    Err(e) => return self.respond(out, from, id, Err(e.into())),
                };
                let ctx = Ctx::new().with_batches(self.cfg.engine.capabilities().batches);
                let opts = TxnOptions {
                    isolation: proc.options.isolation,
                    base: proc.options.base,
                    procedure: Some((procedure, args.clone())),
                    first_attempt: now.earlier_by(retrying_for.min(RETRY_PRIORITY_CREDIT_MAX)),
                    coordination: proc.coordination.clone(),
                };
                if self.cfg.engine.capabilities().one_round {
                    match self.cfg.registry.plan(&proc, &args, &self.cfg.catalog, self.cfg.partitions) {
                        Err(e) => return self.respond(out, from, id, Err(e)),
                        Ok(Some(plan)) => {
                            let txn = self.new_txn(now, from, Some(id), Source::OneRound, opts, out);
                            return self.one_round(now, txn, plan, out);
                        }
                        Ok(None) => {}
                    }
                }
                let fut = match self.cfg.registry.start(&proc, ctx.clone(), args) {
                    Ok(fut) => fut,
                    Err(e) => return self.respond(out, from, id, Err(e)),
                };
                let txn = self.new_txn(now, from, Some(id), Source::Procedure { fut, ctx }, opts, out);
                self.drive(now, txn, out);
            }
            RequestBody::Read { op } => {
                if let Err(e) = self.takes_one_round("one-round read transactions (read in an interactive transaction)")
                {
                    return self.respond(out, from, id, Err(e));
                }
                let planned =
                    crate::page::one_round_read(&self.cfg.catalog, self.cfg.partitions, self.cfg.preferred, &op);
                let (plan, shape, table) = match planned {
                    Ok(p) => p,
                    Err(e) => return self.respond(out, from, id, Err(e)),
                };
                let opts = one_round_options(litmus_core::Isolation::ReadCommitted, now);
                let txn = self.new_txn(now, from, Some(id), Source::OneRoundRead { table, shape }, opts, out);
                self.one_round(now, txn, plan, out);
            }
            RequestBody::Minitransaction(mini) => {
                if let Err(e) = self.takes_one_round("minitransactions (commit an interactive transaction)") {
                    return self.respond(out, from, id, Err(e));
                }
                let planned = crate::minitxn::plan(&self.cfg.catalog, self.cfg.partitions, self.cfg.preferred, &mini);
                let plan = match planned {
                    Ok(p) if p.fragments.is_empty() => {
                        return self.respond(out, from, id, Ok(ResponseBody::Returned(vec![])))
                    }
                    Ok(p) => p,
                    Err(e) => return self.respond(out, from, id, Err(e)),
                };
                let opts = one_round_options(litmus_core::Isolation::Serializable, now);
                let txn = self.new_txn(now, from, Some(id), Source::OneRound, opts, out);
                self.one_round(now, txn, plan, out);
            }
            RequestBody::Begin { isolation, retrying_for } => {
                if !self.cfg.engine.capabilities().interactive {
                    // Every operation would be refused: say so at the begin.
                    let what = "interactive transactions (it runs one-round transactions only)".into();
                    let e = InvalidInput::Unsupported { engine: self.cfg.engine.name().into(), what };
                    return self.respond(out, from, id, Err(e.into()));
                }
                let opts = TxnOptions {
                    isolation,
                    base: false,
                    procedure: None,
                    first_attempt: now.earlier_by(retrying_for.min(RETRY_PRIORITY_CREDIT_MAX)),
                    coordination: None,
                };
                let txn = self.new_txn(now, from, None, Source::Interactive, opts, out);
                self.respond(out, from, id, Ok(ResponseBody::Begun(txn)));
            }
            RequestBody::Op { txn, op } => {
                if let Err(e) = self.check_interactive(txn, from, false) {
                    return self.respond(out, from, id, Err(e));
                }
                match self.resolve(&op) {
                    Err(e) => self.respond(out, from, id, Err(e)),
                    Ok(resolved) => {
                        let t = self.txns.get_mut(&txn).expect("checked");
                        t.last_active = now;
                        let op_id = t.next_op;
                        t.next_op += 1;
                        self.dispatch(now, txn, op_id, resolved, Some(id), false, out);
                        self.issued_all(now, txn, out);
                    }
                }
            }
            RequestBody::Disconnected => self.disconnected(now, from, out),
            RequestBody::Commit { txn } | RequestBody::Rollback { txn } => {
                let commit = matches!(req.body, RequestBody::Commit { .. });
                if let Err(e) = self.check_interactive(txn, from, commit) {
                    return self.respond(out, from, id, Err(e));
                }
                let outcome = if matches!(req.body, RequestBody::Commit { .. }) {
                    Outcome::Commit(vec![])
                } else {
                    Outcome::Rollback
                };
                self.txns.get_mut(&txn).expect("checked").request = Some(id);
                self.finish(now, txn, outcome, out);
            }
        }
    }

    /// `Unsupported`, naming `what`, unless the engine takes one-round transactions whole.
    fn takes_one_round(&self, what: &str) -> Result<(), Error> {
        if self.cfg.engine.capabilities().one_round {
            return Ok(());
        }
        Err(InvalidInput::Unsupported { engine: self.cfg.engine.name().into(), what: what.into() }.into())
    }

    /// Hands a one-round transaction to the engine whole; only called for an engine that
    /// declares [`crate::engine::Capabilities::one_round`], which has the capability (a registry
    /// test checks the two agree).
    fn one_round(&mut self, now: Time, txn: TxnId, plan: crate::fragment::OneRoundPlan, out: &mut Effects) {
        self.with_engine(now, out, |e, ctx| match e.one_round_transactions() {
            Some(o) => o.one_round(txn, plan, ctx),
            None => unreachable!("{} declares one-round transactions but takes none", ctx.me),
        });
    }

    /// The transaction issued everything it will before it hears back (see
    /// [`crate::capability::GroupedIssue`]).
    fn issued_all(&mut self, now: Time, txn: TxnId, out: &mut Effects) {
        self.with_engine(now, out, |e, ctx| {
            if let Some(g) = e.grouped_issue() {
                g.issued_all(txn, ctx)
            }
        });
    }

    /// `finishing`: the request commits the transaction.
    fn check_interactive(&self, txn: TxnId, from: Addr, finishing: bool) -> Result<(), Error> {
        match self.txns.get(&txn) {
            Some(t) if t.client == from && matches!(t.source, Source::Interactive) && t.finishing.is_none() => {
                if t.ops.is_empty() {
                    Ok(())
                } else {
                    Err(Error::Invalid(InvalidInput::Unsupported {
                        engine: self.cfg.engine.name().into(),
                        what: "a new request while an operation is in flight".into(),
                    }))
                }
            }
            // Begun by an earlier incarnation of this coordinator (a restart, or its replica
            // group's leader before this one): lost with it. An operation's transaction is
            // presumed aborted, and the client may run it again. A commit's is not: a copy of
            // it (a resend, a network duplicate) may have reached the earlier incarnation,
            // which may have committed it, so its outcome is unknown.
            None if txn.node == self.cfg.node && txn.epoch < self.epoch => Err(if finishing {
                Error::Unavailable {
                    reason: "the transaction's coordinator restarted or moved; outcome unknown".into(),
                    outcome_unknown: true,
                }
            } else {
                Error::Abort(AbortReason::Failure)
            }),
            _ => Err(InvalidInput::UnknownTransaction.into()),
        }
    }

    /// Hands the pieces of one op to the engine (`alkaline`: the op is a whole alkaline
    /// subtransaction, see `Ctx::alkaline_op`).
    #[allow(clippy::too_many_arguments)]
    fn dispatch(
        &mut self,
        now: Time,
        txn: TxnId,
        op_id: u32,
        resolved: Resolved,
        reply: Option<RequestId>,
        alkaline: bool,
        out: &mut Effects,
    ) {
        let t = self.txns.get_mut(&txn).expect("dispatch to a live txn");
        if let (None, crate::op::Targets::One(p)) = (t.home, &resolved.targets) {
            t.home = Some(*p);
        }
        let (shape, pieces) = resolved.pieces(self.cfg.partitions, t.home.unwrap_or(self.cfg.preferred));
        assert!(!pieces.is_empty());
        let waiting = pieces.iter().map(|(p, _)| *p).collect();
        let pending = Box::new(PendingOp { shape, waiting, results: vec![], error: None, reply });
        assert!(t.ops.insert(op_id, pending).is_none(), "op id reused");
        for (part, op) in pieces {
            out.work += op.kind.keys() as u64;
            let id = SubOpId { txn, op: op_id, part };
            if alkaline {
                self.with_engine(now, out, |e, ctx| match e.base_transactions() {
                    Some(b) => b.issue_unit(id, op, ctx),
                    None => e.issue(id, op, ctx),
                });
            } else {
                self.with_engine(now, out, |e, ctx| e.issue(id, op, ctx));
            }
        }
    }

    /// Resolves an operation (`op::resolve`), refusing a read or write of many keys on an engine
    /// that does not take it whole (procedures ask `Ctx::read_many` and `Ctx::write_many`, which
    /// fall back to single operations there).
    fn resolve(&self, op: &Op) -> Result<Resolved, Error> {
        if matches!(op, Op::ReadMany { .. } | Op::WriteMany { .. }) && !self.cfg.engine.capabilities().batches {
            let engine = self.cfg.engine.name().to_string();
            let what = "batched reads and writes (issue single ones)".into();
            return Err(InvalidInput::Unsupported { engine, what }.into());
        }
        let mut resolved = resolve(&self.cfg.catalog, self.cfg.partitions, op)?;
        if !self.cfg.engine.capabilities().reads_for_update {
            resolved.op.kind = resolved.op.kind.without_update_intent();
        }
        Ok(resolved)
    }

    /// Polls a procedure until it waits on the network or finishes.
    fn drive(&mut self, now: Time, txn: TxnId, out: &mut Effects) {
        loop {
            let Some(t) = self.txns.get_mut(&txn) else { return };
            if t.finishing.is_some() {
                return;
            }
            let Source::Procedure { fut, ctx } = &mut t.source else { return };
            match poll_once(fut) {
                Poll::Ready(Ok(values)) => return self.finish(now, txn, Outcome::Commit(values), out),
                Poll::Ready(Err(e)) => return self.finish(now, txn, Outcome::Abort(e), out),
                Poll::Pending => {}
            }
            let ctx = ctx.clone();
            let issued = ctx.io().take_issued();
            if issued.is_empty() {
                return; // waiting for replies
            }
            let mut completed_locally = false;
            for (op_id, what) in issued {
                let (op, alkaline) = match what {
                    Issued::Control(c) => {
                        self.with_engine(now, out, |e, ctx| match e.base_transactions() {
                            Some(b) => b.control(txn, op_id, c, ctx),
                            None => ctx.control_done(txn, op_id, Ok(())),
                        });
                        continue;
                    }
                    Issued::Op(op) => (op, false),
                    Issued::UnitOp(op) => (op, true),
                };
                match self.resolve(&op) {
                    Err(e) => {
                        ctx.io().complete(op_id, Err(e));
                        completed_locally = true;
                    }
                    Ok(resolved) => self.dispatch(now, txn, op_id, resolved, None, alkaline, out),
                }
            }
            self.issued_all(now, txn, out);
            if !completed_locally {
                return;
            }
        }
    }

    fn finish(&mut self, now: Time, txn: TxnId, outcome: Outcome, out: &mut Effects) {
        let t = self.txns.get_mut(&txn).expect("finish a live txn");
        assert!(t.finishing.is_none(), "{txn} finished twice");
        let outcome = match (outcome, &t.doomed) {
            (Outcome::Commit(_), Some(e)) => Outcome::Abort(e.clone()),
            (outcome, _) => outcome,
        };
        let commit = matches!(outcome, Outcome::Commit(_));
        t.finishing = Some(outcome);
        if commit {
            self.with_engine(now, out, |e, ctx| e.commit(txn, ctx));
        } else {
            self.with_engine(now, out, |e, ctx| e.abort(txn, ctx));
        }
    }

    /// Handles the engine's events. A procedure whose operations completed is polled once after
    /// the events at hand, not once per operation: the replies of a batch (or of one partition
    /// step) complete many operations of one procedure, and each poll re-runs its future.
    fn process_events(&mut self, now: Time, out: &mut Effects) {
        let mut to_drive: Vec<TxnId> = Vec::new();
        while !self.events.is_empty() {
            self.handle_events(now, &mut to_drive, out);
            for txn in std::mem::take(&mut to_drive) {
                self.drive(now, txn, out);
            }
        }
    }

    fn handle_events(&mut self, now: Time, to_drive: &mut Vec<TxnId>, out: &mut Effects) {
        while !self.events.is_empty() {
            let events = std::mem::take(&mut self.events);
            for event in events {
                match event {
                    Event::OpDone { id, result } => self.on_op_done(now, id, result, to_drive, out),
                    Event::Base(BaseEvent::ControlDone { txn, op, result }) => {
                        self.on_control_done(now, txn, op, result, out)
                    }
                    Event::Base(BaseEvent::EarlyCommit { txn }) => self.on_early_commit(txn, out),
                    Event::Base(BaseEvent::Rerun { txn }) => self.rerun(now, txn, out),
                    Event::TxnDone { txn, result, unlogged } => self.on_txn_done(txn, result, unlogged, out),
                    Event::TxnDoneAssigned { txn, ids } => {
                        if let Some(Txn { finishing: Some(Outcome::Commit(values)), .. }) = self.txns.get_mut(&txn) {
                            for v in values.iter_mut() {
                                if let Some(&(_, real)) = ids.iter().find(|(tmp, _)| *v == Value::Int(*tmp)) {
                                    *v = Value::Int(real);
                                }
                            }
                        }
                        self.on_txn_done(txn, Ok(()), false, out)
                    }
                    Event::OneRoundDone { txn, result } => {
                        if let Some(t) = self.txns.remove(&txn) {
                            let result = match t.source {
                                Source::OneRoundRead { table, shape } => result.and_then(|values| {
                                    let merged =
                                        crate::page::merge_fragment_pages(&self.cfg.catalog, table, values, shape);
                                    merged.map(ResponseBody::Op)
                                }),
                                _ => result.map(ResponseBody::Returned),
                            };
                            if let Some(request) = t.request {
                                self.respond(out, t.client, request, result);
                            }
                        }
                    }
                }
            }
        }
    }

    /// A piece of an operation is done; a procedure whose operation completed goes on
    /// `to_drive` (polled by `process_events`).
    fn on_op_done(
        &mut self,
        now: Time,
        id: SubOpId,
        result: Result<PartResult, Error>,
        to_drive: &mut Vec<TxnId>,
        out: &mut Effects,
    ) {
        let Some(t) = self.txns.get_mut(&id.txn) else { return }; // late reply
        let Some(op) = t.ops.get_mut(&id.op) else { return };
        let Some(at) = op.waiting.iter().position(|p| *p == id.part) else {
            return; // a duplicated reply
        };
        op.waiting.swap_remove(at);
        if let Ok(r) = &result {
            out.work += r.rows() as u64;
        }
        match result {
            Ok(r) => op.results.push(r),
            Err(e) => {
                op.error.get_or_insert(e);
            }
        }
        if !op.waiting.is_empty() {
            return;
        }
        let op = t.ops.remove(&id.op).expect("present");
        let result = match op.error {
            Some(e) => {
                if op.shape == Shape::Write && !op.results.is_empty() && !t.base {
                    t.doomed.get_or_insert_with(|| e.clone());
                }
                Err(e)
            }
            None => merge(op.shape, op.results),
        };
        t.last_active = now;
        let client = t.client;
        match &t.source {
            // A one-round transaction issues no operations through the coordinator.
            Source::OneRound | Source::OneRoundRead { .. } => {}
            Source::Procedure { ctx, .. } => {
                ctx.io().complete(id.op, result);
                if !to_drive.contains(&id.txn) {
                    to_drive.push(id.txn);
                }
            }
            Source::Interactive => {
                let request = op.reply.expect("interactive ops answer a request");
                let abort = matches!(result, Err(Error::Abort(_)));
                let finishing = t.finishing.is_some();
                self.respond(out, client, request, result.clone().map(ResponseBody::Op));
                if abort && !finishing {
                    // Concurrency control aborted the transaction; release what it holds.
                    let e = result.expect_err("abort");
                    self.finish(now, id.txn, Outcome::Abort(e), out);
                }
            }
        }
    }

    /// Early commit: answer the client now; `TxnDone` will find no request to answer.
    fn on_early_commit(&mut self, txn: TxnId, out: &mut Effects) {
        let Some(t) = self.txns.get_mut(&txn) else { return };
        if let Some(request) = t.request.take() {
            let client = t.client;
            self.respond(out, client, request, Ok(ResponseBody::Returned(vec![])));
        }
    }

    /// Re-runs a procedure from the start under the same transaction id; the engine answers
    /// what it already did from its context table.
    fn rerun(&mut self, now: Time, txn: TxnId, out: &mut Effects) {
        let Some(t) = self.txns.get_mut(&txn) else { return };
        let Some((name, args)) = t.procedure.clone() else { return };
        let Ok(proc) = self.cfg.registry.get(&name) else {
            panic!("{txn}: procedure {name} to roll forward is not registered");
        };
        let ctx = Ctx::new().with_batches(self.cfg.engine.capabilities().batches);
        let fut = match self.cfg.registry.start(proc, ctx.clone(), args) {
            Ok(fut) => fut,
            Err(e) => panic!("{txn}: procedure {name} to roll forward cannot start: {e}"),
        };
        t.source = Source::Procedure { fut, ctx };
        t.ops.clear();
        t.finishing = None;
        t.last_active = now;
        self.drive(now, txn, out);
    }

    fn on_control_done(&mut self, now: Time, txn: TxnId, op: u32, result: Result<(), Error>, out: &mut Effects) {
        let Some(t) = self.txns.get_mut(&txn) else { return };
        let Source::Procedure { ctx, .. } = &t.source else { return };
        t.last_active = now;
        ctx.io().complete(op, result.map(|()| crate::op::OpResult::Done));
        self.drive(now, txn, out);
    }

    fn on_txn_done(&mut self, txn: TxnId, result: Result<(), Error>, unlogged: bool, out: &mut Effects) {
        let Some(t) = self.txns.remove(&txn) else { return };
        // An engine may end a transaction that was still running (a participant that lost it,
        // e.g. to a restart or a leader change, answers that it is gone): that is an abort
        // with the engine's error.
        let outcome = t.finishing.unwrap_or_else(|| {
            Outcome::Abort(
                result
                    .clone()
                    .err()
                    .unwrap_or_else(|| Error::Internal("the engine ended a transaction that was still running".into())),
            )
        });
        let response = match (outcome, result) {
            (Outcome::Commit(values), Ok(())) => match t.source {
                Source::Procedure { .. } | Source::OneRound => Ok(ResponseBody::Returned(values)),
                Source::OneRoundRead { .. } => Err(Error::Internal("a one-round read finished as a commit".into())),
                Source::Interactive => Ok(ResponseBody::Committed),
            },
            (Outcome::Commit(_), Err(e)) => Err(e),
            (Outcome::Abort(e), _) => Err(e),
            (Outcome::Rollback, _) => Ok(ResponseBody::RolledBack),
        };
        if let Some(request) = t.request {
            if unlogged {
                let msg = Message::ClientResponse(ClientResponse { id: request, result: response });
                out.send_now.push(Envelope { from: self.me(), to: t.client, msg });
            } else {
                self.respond(out, t.client, request, response);
            }
        }
    }

    fn on_tick(&mut self, now: Time, out: &mut Effects) {
        self.with_engine(now, out, |e, ctx| e.on_tick(ctx));
        if now.saturating_sub(self.last_idle_check) < Duration::from_millis(100 * TICK_INTERVAL_MS) {
            return;
        }
        self.last_idle_check = now;
        let idle: Vec<TxnId> = self
            .txns
            .iter()
            .filter(|(_, t)| {
                let quiet = now.saturating_sub(t.last_active);
                let idle_interactive = matches!(t.source, Source::Interactive) && quiet > INTERACTIVE_IDLE_TIMEOUT;
                let stalled = !t.ops.is_empty() && quiet > TXN_STALL_TIMEOUT;
                t.finishing.is_none() && (idle_interactive || stalled)
            })
            .map(|(id, _)| *id)
            .collect();
        if idle.is_empty() {
            return;
        }
        // An accepted BASE transaction is never abandoned: its engine drives it to its end.
        let mut abandoned = Vec::with_capacity(idle.len());
        self.with_engine(now, out, |e, _| match e.base_transactions() {
            Some(b) => abandoned.extend(idle.into_iter().filter(|txn| !b.accepted(*txn))),
            None => abandoned = idle,
        });
        let idle = abandoned;
        for txn in idle {
            // Late replies for the dropped ops are ignored (`on_op_done` finds no op).
            self.txns.get_mut(&txn).expect("listed").ops.clear();
            self.finish(now, txn, Outcome::Abort(Error::Abort(AbortReason::Timeout)), out);
        }
    }
}

impl Machine for Coordinator {
    fn addr(&self) -> Addr {
        self.me()
    }

    fn recover(&mut self, snapshot: Option<&[u8]>, records: &[Vec<u8>]) -> Result<(), Error> {
        let mut last_epoch = 0;
        if let Some(bytes) = snapshot {
            let snap: CoordSnapshot =
                postcard::from_bytes(bytes).map_err(|e| Error::Storage(format!("coordinator snapshot: {e}")))?;
            last_epoch = snap.epoch;
            for r in snap.engine {
                self.engine.apply(&r)?;
                self.kept.push(r);
            }
        }
        for bytes in records {
            match postcard::from_bytes(bytes) {
                Ok(CoordRecord::Epoch(e)) => last_epoch = last_epoch.max(e),
                Ok(CoordRecord::Engine(r)) => {
                    self.engine.apply(&r)?;
                    self.kept.push(r);
                }
                Err(e) => return Err(Error::Storage(format!("coordinator log record: {e}"))),
            }
        }
        self.epoch = last_epoch + 1;
        self.epoch_logged = false;
        for (txn, name, args) in self.engine.base_transactions().map(|b| b.take_reruns()).unwrap_or_default() {
            // Rolled forward on the first step; nobody waits for an answer.
            let t = Txn {
                client: Addr::Coordinator(self.cfg.node),
                request: None,
                source: Source::Interactive,
                ops: BTreeMap::new(),
                finishing: None,
                last_active: Time::ZERO,
                procedure: Some((name, args)),
                next_op: 0,
                doomed: None,
                home: None,
                base: true, // only BASE transactions are rolled forward
            };
            self.txns.insert(txn, t);
            self.to_roll_forward.push(txn);
        }
        Ok(())
    }

    fn step(&mut self, now: Time, input: Input, out: &mut Effects) {
        if !self.epoch_logged {
            // Logged before any message that carries a transaction id of this epoch.
            out.persist.push(postcard::to_stdvec(&CoordRecord::Epoch(self.epoch)).expect("serialize"));
            out.barrier = true;
            self.epoch_logged = true;
        }
        for txn in std::mem::take(&mut self.to_roll_forward) {
            self.rerun(now, txn, out);
        }
        let sent_before = out.send.len();
        let sent_now_before = out.send_now.len();
        match input {
            Input::Tick => self.on_tick(now, out),
            Input::Message(env) => match env.msg {
                Message::ClientRequest(req) => self.on_client(now, env.from, req, out),
                Message::PartitionReply(reply) => {
                    self.with_engine(now, out, |e, ctx| e.on_reply(reply.from, reply.body, ctx))
                }
                Message::Batch(items) => {
                    for item in items {
                        // A request in a batch to a coordinator is a stray like one alone.
                        if let Batched::Reply(reply) = item {
                            self.with_engine(now, out, |e, ctx| e.on_reply(reply.from, reply.body, ctx))
                        }
                    }
                }
                Message::Role(msg) => self.with_engine(now, out, |e, ctx| {
                    if let Some(r) = e.role_traffic() {
                        r.on_role_message(env.from, msg, ctx)
                    }
                }),
                // Anything else is a stray (e.g. duplicated) message: drop it.
                Message::ClientResponse(_)
                | Message::PartitionRequest(_)
                | Message::Raft(_)
                | Message::Fortify { .. } => {}
            },
        }
        self.process_events(now, out);
        out.batch_sends(sent_before);
        out.batch_sends_now(sent_now_before);
        if self.kept.len() >= KEPT_RECORDS_COMPACT_AT.max(2 * self.kept_compacted) {
            self.kept = self.engine.compact(std::mem::take(&mut self.kept));
            self.kept_compacted = self.kept.len();
        }
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn never_snapshotted(&mut self) {
        self.keeps_records = false;
        self.kept = Vec::new();
        self.kept_compacted = 0;
    }

    fn snapshot(&mut self) -> Option<Vec<u8>> {
        assert!(self.keeps_records, "a coordinator told it is never snapshotted kept no records for one");
        // The snapshot covers every record emitted (or replayed) so far: the newest epoch
        // logged is this incarnation's once its first step logged it, else the one before (a
        // recovered coordinator not stepped yet, as a replica group's follower keeps).
        let epoch = if self.epoch_logged { self.epoch } else { self.epoch.saturating_sub(1) };
        self.kept = self.engine.compact(std::mem::take(&mut self.kept));
        self.kept_compacted = self.kept.len();
        let snap = CoordSnapshot { epoch, engine: self.kept.clone() };
        Some(postcard::to_stdvec(&snap).expect("snapshot serializes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_record_is_encoded_as_postcard_would() {
        for len in [0usize, 1, 127, 128, 300, 16_383, 16_384, 70_000] {
            let record: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let direct = CoordRecord::encode_engine(&record);
            assert_eq!(direct, crate::payload::encode_exact(&CoordRecord::Engine(record.clone())), "length {len}");
            match postcard::from_bytes::<CoordRecord>(&direct) {
                Ok(CoordRecord::Engine(back)) => assert_eq!(back, record),
                other => panic!("length {len}: decoded {other:?}"),
            }
        }
    }

    /// An engine that does nothing: these tests drive the coordinator's own record keeping.
    struct Inert;
    impl crate::engine::CoordinatorEngine for Inert {
        fn begin(&mut self, _: TxnId, _: &crate::engine::TxnOptions, _: &mut CoordCtx) {}
        fn issue(&mut self, _: SubOpId, _: crate::op::PartOp, _: &mut CoordCtx) {}
        fn commit(&mut self, _: TxnId, _: &mut CoordCtx) {}
        fn abort(&mut self, _: TxnId, _: &mut CoordCtx) {}
        fn on_reply(&mut self, _: PartitionId, _: crate::Payload, _: &mut CoordCtx) {}
        fn on_tick(&mut self, _: &mut CoordCtx) {}
        fn apply(&mut self, _: &[u8]) -> Result<(), Error> {
            Ok(())
        }
    }
    struct InertDef;
    impl crate::engine::EngineDef for InertDef {
        fn name(&self) -> &'static str {
            "inert"
        }
        fn guarantee(&self) -> &'static str {
            "none"
        }
        fn capabilities(&self) -> crate::engine::Capabilities {
            crate::engine::Capabilities {
                guarantee: crate::engine::Guarantee::None,
                base_transactions: false,
                one_round: false,
                interactive: true,
                batches: false,
                reads_for_update: false,
            }
        }
        fn coordinator(&self) -> Box<dyn crate::engine::CoordinatorEngine> {
            Box::new(Inert)
        }
        fn partition(&self) -> Box<dyn crate::engine::PartitionEngine> {
            unreachable!("these tests build no partition")
        }
    }

    fn coordinator() -> Coordinator {
        let mut c = Coordinator::new(CoordinatorConfig {
            node: NodeId(0),
            engine: EngineKind(&InertDef),
            partitions: 1,
            preferred: PartitionId(0),
            catalog: Arc::new(Catalog::new()),
            registry: Arc::new(Registry::new()),
            seed: 1,
        });
        c.recover(None, &[]).unwrap();
        c
    }

    fn persist_one(c: &mut Coordinator) -> Effects {
        let mut out = Effects::default();
        c.with_engine(Time::ZERO, &mut out, |_, ctx| ctx.persist(vec![1, 2, 3]));
        out
    }

    #[test]
    fn records_are_kept_for_the_snapshot_unless_none_will_be_taken() {
        let mut c = coordinator();
        assert_eq!(persist_one(&mut c).persist.len(), 1);
        assert_eq!(c.kept, vec![vec![1, 2, 3]], "kept for the next snapshot");

        let mut c = coordinator();
        c.never_snapshotted();
        // Still logged (a log may yet be read by whoever wants it), but not kept in memory.
        assert_eq!(persist_one(&mut c).persist.len(), 1);
        assert!(c.kept.is_empty());
    }

    /// A coordinator whose replica group's leadership moves answers its waiting clients: an
    /// operation of a transaction not finishing gets a retryable abort (the next leader
    /// presumes it aborted), a commit being decided by an engine that cannot say whether its
    /// decision is logged gets "outcome unknown" (the locking engine can:
    /// `litmus-locking/tests/deposed_coordinator.rs`).
    #[test]
    fn an_abandoned_coordinator_aborts_what_logged_nothing_and_leaves_commits_unknown() {
        use crate::message::{ClientRequest, RequestBody, ResponseBody};
        let mut c = Coordinator::new(CoordinatorConfig {
            node: NodeId(0),
            engine: EngineKind(&InertDef),
            partitions: 1,
            preferred: PartitionId(0),
            catalog: Arc::new(crate::builtin::catalog()),
            registry: Arc::new(crate::builtin::registry()),
            seed: 1,
        });
        c.recover(None, &[]).unwrap();
        let client = Addr::Client(litmus_core::ClientId(7));
        let mut n = 0;
        let mut ask = |c: &mut Coordinator, body: RequestBody| -> Vec<Envelope> {
            n += 1;
            let msg = Message::ClientRequest(ClientRequest { id: RequestId(n), body });
            let mut out = Effects::default();
            c.step(Time::ZERO, Input::Message(Envelope { from: client, to: c.me(), msg }), &mut out);
            out.send.into_iter().filter(|e| e.to == client).collect()
        };
        let begin = || RequestBody::Begin { isolation: Default::default(), retrying_for: std::time::Duration::ZERO };
        let begun = |sent: Vec<Envelope>| match &sent[..] {
            [Envelope { msg: Message::ClientResponse(r), .. }] => match &r.result {
                Ok(ResponseBody::Begun(txn)) => *txn,
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        };
        let reading = begun(ask(&mut c, begin()));
        let read = crate::op::Op::Read { table: "kv".into(), key: vec![litmus_core::Value::Int(1)] };
        assert!(ask(&mut c, RequestBody::Op { txn: reading, op: read }).is_empty(), "the read waits");
        let committing = begun(ask(&mut c, begin()));
        assert!(ask(&mut c, RequestBody::Commit { txn: committing }).is_empty(), "the commit waits");
        let mut out = Effects::default();
        c.abandon(&mut out);
        let answers: Vec<(RequestId, Result<ResponseBody, Error>)> = out
            .send
            .into_iter()
            .map(|e| match e.msg {
                Message::ClientResponse(r) => (r.id, r.result),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(answers.len(), 2, "{answers:?}");
        assert_eq!(answers[0], (RequestId(2), Err(Error::Abort(litmus_core::AbortReason::Failure))));
        assert!(
            matches!(&answers[1], (RequestId(4), Err(Error::Unavailable { outcome_unknown: true, .. }))),
            "{answers:?}"
        );
        assert_eq!(c.active_txns(), 0);
    }

    /// An operation for a transaction an earlier incarnation began (a restart, or the replica
    /// group's previous leader) is a retryable abort: the transaction was lost with it. Its
    /// commit is "outcome unknown" (a copy may have reached the earlier incarnation). One this
    /// incarnation never began is invalid input.
    #[test]
    fn a_transaction_of_an_earlier_incarnation_is_presumed_aborted() {
        use crate::message::{ClientRequest, RequestBody, ResponseBody};
        let client = Addr::Client(litmus_core::ClientId(7));
        let mut n = 0;
        let mut ask = |c: &mut Coordinator, body: RequestBody| -> Result<ResponseBody, Error> {
            n += 1;
            let msg = Message::ClientRequest(ClientRequest { id: RequestId(n), body });
            let mut out = Effects::default();
            c.step(Time::ZERO, Input::Message(Envelope { from: client, to: c.me(), msg }), &mut out);
            match out.send.into_iter().chain(out.send_now).find(|e| e.to == client).map(|e| e.msg) {
                Some(Message::ClientResponse(r)) => r.result,
                other => panic!("{other:?}"),
            }
        };
        let mut first = coordinator();
        let begin = RequestBody::Begin { isolation: Default::default(), retrying_for: Duration::ZERO };
        let Ok(ResponseBody::Begun(txn)) = ask(&mut first, begin) else { panic!("not begun") };
        let mut next = Coordinator::new(first.cfg.clone());
        next.recover(None, &[postcard::to_stdvec(&CoordRecord::Epoch(txn.epoch)).unwrap()]).unwrap();
        let read =
            |txn| RequestBody::Op { txn, op: crate::op::Op::Read { table: "kv".into(), key: vec![Value::Int(1)] } };
        assert_eq!(ask(&mut next, read(txn)), Err(Error::Abort(AbortReason::Failure)));
        // A commit of it may have reached the earlier incarnation (a resend, a duplicate).
        let commit = ask(&mut next, RequestBody::Commit { txn });
        assert!(matches!(commit, Err(Error::Unavailable { outcome_unknown: true, .. })), "{commit:?}");
        let never = TxnId { epoch: txn.epoch + 1, ..txn };
        assert_eq!(ask(&mut next, read(never)), Err(InvalidInput::UnknownTransaction.into()));
    }

    /// A replica group's member that does not lead snapshots the coordinator rebuilt from the
    /// group's log and never stepped: the snapshot holds the epoch the log holds, not the one
    /// this rebuild would log at its first step (the leader goes on in the logged one).
    #[test]
    fn a_snapshot_before_the_first_step_holds_the_logged_epoch_only() {
        let mut follower = coordinator();
        follower.recover(None, &[postcard::to_stdvec(&CoordRecord::Epoch(3)).unwrap()]).unwrap();
        let snapshot = follower.snapshot().expect("a coordinator snapshots");
        let mut next = coordinator();
        next.recover(Some(&snapshot), &[]).unwrap();
        assert_eq!(next.epoch, 4, "one restart after the logged epoch 3");
    }

    #[test]
    #[should_panic(expected = "never snapshotted")]
    fn a_snapshot_after_never_snapshotted_is_a_bug() {
        let mut c = coordinator();
        c.never_snapshotted();
        persist_one(&mut c);
        c.snapshot();
    }
}
