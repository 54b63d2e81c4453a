//! Stored procedures and the transaction context.
//!
//! A transaction is written once, as an `async fn(Ctx, Vec<Value>) -> Result<Vec<Value>>`,
//! against the [`Ctx`] operations (read, read of some columns, range read, write, insert, delete, formula update,
//! abort). The coordinator state machine polls the procedure's future itself with a no-op waker
//! — a tiny executor, no tokio — so a procedure can await remote reads while the coordinator
//! stays deterministic:
//!
//! ```text
//!   coordinator.step(msg)                 procedure future
//!   ───────────────────────              ─────────────────────────────
//!   poll ───────────────────────────────► ctx.read(..).await
//!                                          pushes Op #0 into TxnIo, Pending
//!   drain TxnIo.issued: route Op #0
//!   to its partition (engine) ...
//!   reply arrives: TxnIo.results[#0] = r
//!   poll ───────────────────────────────► read returns r; next op ...
//! ```
//!
//! A procedure never sees time or randomness except through its arguments, so re-running it
//! with the same arguments against the same reads issues the same operations (what Salt's
//! roll-forward and Granola's replicas rely on).

use crate::fragment::{FragmentCall, OneRoundClass, OneRoundPlan};
use crate::op::{Op, OpResult};
use litmus_core::{limits, ColumnType, Error, Formula, InvalidInput, Isolation, Row, Value};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

pub type ProcResult = Result<Vec<Value>, Error>;
pub type ProcFuture = Pin<Box<dyn Future<Output = ProcResult> + Send>>;
type ProcFn = dyn Fn(Ctx, Vec<Value>) -> ProcFuture + Send + Sync;
type PlanFn = dyn Fn(&[Value]) -> Result<Vec<FragmentCall>, Error> + Send + Sync;

/// A one-round procedure's declaration (see [`crate::fragment`]): its class and its plan, a
/// pure function from the call's arguments to fragment calls.
#[derive(Clone)]
pub struct OneRound {
    pub class: OneRoundClass,
    plan: Arc<PlanFn>,
}

/// How a procedure runs, declared at registration (engine-specific structure is declared, not
/// re-coded: the same body runs under every engine).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcOptions {
    /// Isolation level for engines that offer a choice (the locking engine: Salt Table 1).
    pub isolation: Isolation,
    /// `begin BASE transaction` (Salt §4): under the `salt` engines the procedure runs as a BASE
    /// transaction whose alkaline subtransactions are delimited by `Ctx::begin_alkaline` /
    /// `end_alkaline` (operations outside them form implicit ones). Other engines run it as one
    /// ACID transaction.
    pub base: bool,
    /// Granola §5.4 `forcePrepare` (fragments only): the keys the fragment reads and writes
    /// depend on its arguments alone, so the locks of one run cover every execution order.
    /// Otherwise `forcePrepare` escalates them to whole-table locks (the paper's superset).
    /// Declared with [`Registry::declare_keys_from_args`].
    pub keys_from_args: bool,
}

impl ProcOptions {
    /// A BASE procedure at the default isolation level.
    pub fn base() -> Self {
        ProcOptions { base: true, ..Default::default() }
    }
}

/// A registered procedure: its name, parameter types, options and body.
#[derive(Clone)]
pub struct Procedure {
    pub name: String,
    pub params: Vec<ColumnType>,
    pub options: ProcOptions,
    body: Arc<ProcFn>,
    /// Set for one-round procedures: the body is then the adapter ([`Registry::start`]).
    pub one_round: Option<OneRound>,
    /// What keeping the workload's invariants needs of this procedure, when a verdict was
    /// registered ([`Registry::declare_coordination`]); `None`: no verdict.
    pub coordination: Option<Coordination>,
}

/// The invariant-confluence verdict on a procedure (VLDB'15 Theorem 1, computed by
/// `litmus-analyze` from the procedure's recorded footprint and the workload's declared
/// invariants, and registered here as data so that the engine crate does not depend on the
/// analyzer or its SQL parser).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Coordination {
    /// Every (invariant, operation) pair is I-confluent: runs without coordination.
    Free,
    /// Only sequential id assignment from one counter column needs coordination, and it can stay
    /// on that counter row's partition (§6.1–6.2: a nested atomic increment at commit). The
    /// procedure increments `table.column` by one and reads it back as its id.
    SequentialId { table: String, column: String, invariant: String },
    /// Needs coordination across the transaction: `invariant` under `operation`.
    Required { invariant: String, operation: String },
}

impl std::fmt::Debug for Procedure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Procedure").field("name", &self.name).field("params", &self.params).finish()
    }
}

impl Procedure {
    /// Checks the argument count and types (NULL is accepted for any parameter).
    pub fn check_args(&self, args: &[Value]) -> Result<(), InvalidInput> {
        if args.len() > limits::ARGS_MAX || args.len() != self.params.len() {
            return Err(InvalidInput::WrongArity {
                what: format!("arguments of {}", self.name),
                expected: self.params.len(),
                got: args.len(),
            });
        }
        for (i, (a, ty)) in args.iter().zip(&self.params).enumerate() {
            if !a.is_null() && !a.has_type(ty) {
                return Err(InvalidInput::WrongType {
                    what: format!("argument {i} of {}", self.name),
                    expected: ty.to_string(),
                    got: a.type_name(),
                });
            }
            if !a.within_limits() {
                a.check_limits(&format!("argument {i} of {}", self.name))?;
            }
        }
        Ok(())
    }

    /// Starts the procedure; the returned future is driven by the coordinator.
    pub fn start(&self, ctx: Ctx, args: Vec<Value>) -> ProcFuture {
        (self.body)(ctx, args)
    }

    /// A fragment (see [`Registry::register_fragment`]) named `name`.
    pub(crate) fn fragment<F, Fut>(name: &str, params: Vec<ColumnType>, body: F) -> Procedure
    where
        F: Fn(Ctx, Vec<Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ProcResult> + Send + 'static,
    {
        let body: Arc<ProcFn> = Arc::new(move |ctx, args| Box::pin(body(ctx, args)));
        Procedure {
            name: name.to_string(),
            params,
            options: ProcOptions::default(),
            body,
            one_round: None,
            coordination: None,
        }
    }
}

/// The fragments every registry holds: [`crate::page::SCAN_FRAGMENT`], the read-only fragment
/// of a one-round read, and [`crate::minitxn::MINI_FRAGMENT`], a minitransaction's share.
fn builtin_fragment(name: &str) -> Option<&'static Procedure> {
    static SCAN: std::sync::OnceLock<Procedure> = std::sync::OnceLock::new();
    static MINI: std::sync::OnceLock<Procedure> = std::sync::OnceLock::new();
    match name {
        crate::page::SCAN_FRAGMENT => Some(SCAN.get_or_init(crate::page::scan_fragment)),
        crate::minitxn::MINI_FRAGMENT => Some(MINI.get_or_init(crate::minitxn::mini_fragment)),
        _ => None,
    }
}

/// Procedures by name. Built once at startup and shared read-only by every coordinator.
#[derive(Clone, Default, Debug)]
pub struct Registry {
    procs: BTreeMap<String, Procedure>,
    /// Fragments of one-round procedures, by name (bodies confined to one partition).
    fragments: BTreeMap<String, Procedure>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `body` under `name`. Registering a name twice is a programming error.
    pub fn register<F, Fut>(&mut self, name: &str, params: Vec<ColumnType>, body: F)
    where
        F: Fn(Ctx, Vec<Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ProcResult> + Send + 'static,
    {
        self.register_with(name, params, ProcOptions::default(), body)
    }

    /// Registers `body` with explicit options (e.g. an isolation level).
    pub fn register_with<F, Fut>(&mut self, name: &str, params: Vec<ColumnType>, options: ProcOptions, body: F)
    where
        F: Fn(Ctx, Vec<Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ProcResult> + Send + 'static,
    {
        let body: Arc<ProcFn> = Arc::new(move |ctx, args| Box::pin(body(ctx, args)));
        let proc = Procedure { name: name.to_string(), params, options, body, one_round: None, coordination: None };
        let prev = self.procs.insert(name.to_string(), proc);
        assert!(prev.is_none(), "procedure {name} registered twice");
    }

    /// Registers a fragment: a body that runs against one partition's rows (see
    /// [`crate::fragment`]). One-round procedures name it in their plans.
    pub fn register_fragment<F, Fut>(&mut self, name: &str, params: Vec<ColumnType>, body: F)
    where
        F: Fn(Ctx, Vec<Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ProcResult> + Send + 'static,
    {
        assert!(builtin_fragment(name).is_none(), "fragment {name} is a built-in one");
        let prev = self.fragments.insert(name.to_string(), Procedure::fragment(name, params, body));
        assert!(prev.is_none(), "fragment {name} registered twice");
    }

    /// Declares that these registered fragments read and write only keys named by their
    /// arguments ([`ProcOptions::keys_from_args`]): Granola's `forcePrepare` (§5.4) may then
    /// lock exactly the keys of one run instead of whole tables.
    pub fn declare_keys_from_args(&mut self, fragments: &[&str]) {
        for name in fragments {
            let frag = self.fragments.get_mut(*name);
            frag.unwrap_or_else(|| panic!("fragment {name} not registered")).options.keys_from_args = true;
        }
    }

    /// Registers a one-round procedure: `plan` maps the call's arguments to fragment calls
    /// (registered with [`Registry::register_fragment`]); its result is the fragments' values
    /// concatenated in plan order.
    pub fn register_one_round<P>(&mut self, name: &str, params: Vec<ColumnType>, class: OneRoundClass, plan: P)
    where
        P: Fn(&[Value]) -> Result<Vec<FragmentCall>, Error> + Send + Sync + 'static,
    {
        let unused: Arc<ProcFn> = Arc::new(|_, _| Box::pin(async { Err(Error::Internal("one-round body".into())) }));
        let one_round = Some(OneRound { class, plan: Arc::new(plan) });
        let proc = Procedure {
            name: name.to_string(),
            params,
            options: ProcOptions::default(),
            body: unused,
            one_round,
            coordination: None,
        };
        let prev = self.procs.insert(name.to_string(), proc);
        assert!(prev.is_none(), "procedure {name} registered twice");
    }

    /// A registered fragment, or a built-in one ([`crate::page::SCAN_FRAGMENT`]).
    pub fn fragment(&self, name: &str) -> Result<&Procedure, InvalidInput> {
        match self.fragments.get(name) {
            Some(f) => Ok(f),
            None => builtin_fragment(name).ok_or_else(|| InvalidInput::UnknownProcedure(format!("fragment {name}"))),
        }
    }

    /// The plan of a one-round procedure's call: its fragments, checked (names, argument types)
    /// and routed to their partitions. `None` for an ordinary procedure.
    pub fn plan(
        &self,
        proc: &Procedure,
        args: &[Value],
        catalog: &litmus_core::Catalog,
        partitions: u32,
    ) -> Result<Option<OneRoundPlan>, Error> {
        let Some(one_round) = &proc.one_round else { return Ok(None) };
        let calls = (one_round.plan)(args)?;
        if calls.is_empty() {
            return Err(InvalidInput::Config(format!("{} planned no fragment", proc.name)).into());
        }
        let mut fragments = Vec::with_capacity(calls.len());
        for call in calls {
            self.fragment(&call.fragment)?.check_args(&call.args)?;
            fragments.push((call.partition(catalog, partitions)?, call));
        }
        let plan = OneRoundPlan { class: one_round.class, fragments };
        if one_round.class == OneRoundClass::Single && plan.participants().len() != 1 {
            return Err(
                InvalidInput::Config(format!("single-partition {} planned several partitions", proc.name)).into()
            );
        }
        Ok(Some(plan))
    }

    /// Starts `proc` for an engine that runs procedures op by op. A one-round procedure runs
    /// through the adapter: its fragments in plan order, as one transaction.
    pub fn start(&self, proc: &Procedure, ctx: Ctx, args: Vec<Value>) -> Result<ProcFuture, Error> {
        if proc.one_round.is_none() {
            return Ok(proc.start(ctx, args));
        }
        // Routing is irrelevant op by op: plan against one partition.
        let calls = (proc.one_round.as_ref().expect("checked").plan)(&args)?;
        let mut bodies = Vec::with_capacity(calls.len());
        for call in calls {
            let frag = self.fragment(&call.fragment)?;
            frag.check_args(&call.args)?;
            bodies.push((frag.clone(), call.args));
        }
        Ok(Box::pin(async move {
            let mut values = Vec::new();
            for (frag, args) in bodies {
                values.extend(frag.start(ctx.clone(), args).await?);
            }
            Ok(values)
        }))
    }

    pub fn get(&self, name: &str) -> Result<&Procedure, InvalidInput> {
        self.procs.get(name).ok_or_else(|| InvalidInput::UnknownProcedure(name.to_string()))
    }

    /// Registers the invariant-confluence verdict of procedure `name` (see [`Coordination`]).
    pub fn declare_coordination(&mut self, name: &str, verdict: Coordination) -> Result<(), InvalidInput> {
        let proc = self.procs.get_mut(name).ok_or_else(|| InvalidInput::UnknownProcedure(name.to_string()))?;
        proc.coordination = Some(verdict);
        Ok(())
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.procs.keys().map(String::as_str)
    }

    pub fn merge(&mut self, other: &Registry) {
        for (k, v) in &other.procs {
            if !self.procs.contains_key(k) {
                self.procs.insert(k.clone(), v.clone());
            }
        }
        for (k, v) in &other.fragments {
            if !self.fragments.contains_key(k) {
                self.fragments.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Operations issued by a procedure and results handed back, shared between the procedure's
/// future and the coordinator. Only ever touched by the thread stepping the coordinator; the
/// mutex exists to make the future `Send`, it is never contended.
#[derive(Debug, Default)]
pub struct TxnIo {
    next_op: u32,
    /// The engine takes reads and writes of many keys whole ([`crate::Capabilities::batches`]).
    batches: bool,
    issued: Vec<(u32, Issued)>,
    results: BTreeMap<u32, Result<OpResult, Error>>,
}

/// What a procedure asks of its coordinator: a data operation, or a control point that declares
/// structure engines may use (Salt runs each section of a BASE procedure as an alkaline
/// subtransaction; engines without sections ignore the points).
#[derive(Clone, Debug, PartialEq)]
pub enum Issued {
    Op(Op),
    Control(Control),
    /// An operation that is a unit of atomicity by itself (a one-operation section): an engine
    /// may commit it at the partition in the same message (Salt §6.4's local transactions).
    UnitOp(Op),
}

/// Control points of a procedure: the boundaries of its sections (Salt: alkaline
/// subtransactions, `Ctx::begin_alkaline` / `end_alkaline`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Control {
    /// A section begins (Salt: `begin alkaline-subtransaction`, §4, Fig. 2).
    BeginSection,
    /// A section ends (Salt: `end alkaline-subtransaction` commits it; an error means it was
    /// rolled back, and the procedure's exception handler may compensate).
    EndSection,
}

impl TxnIo {
    /// Requests issued since the last call, in issue order.
    pub fn take_issued(&mut self) -> Vec<(u32, Issued)> {
        std::mem::take(&mut self.issued)
    }
    pub fn complete(&mut self, op: u32, result: Result<OpResult, Error>) {
        let prev = self.results.insert(op, result);
        assert!(prev.is_none(), "op {op} completed twice");
    }
}

/// The transaction context handed to a procedure.
#[derive(Clone, Debug, Default)]
pub struct Ctx {
    io: Arc<Mutex<TxnIo>>,
}

impl Ctx {
    pub fn new() -> Self {
        Self::default()
    }

    /// A context whose [`Ctx::read_many`] and [`Ctx::write_many`] send one [`Op::ReadMany`] or
    /// [`Op::WriteMany`] per table (`true`: the engine takes them whole) or one op per key.
    pub fn with_batches(self, batches: bool) -> Self {
        self.io().batches = batches;
        self
    }

    /// The coordinator's side of the context.
    pub fn io(&self) -> std::sync::MutexGuard<'_, TxnIo> {
        self.io.lock().expect("txn io poisoned")
    }

    /// Issues an operation and waits for its result.
    pub fn op(&self, op: Op) -> OpFuture {
        self.issue(Issued::Op(op))
    }

    fn issue(&self, what: Issued) -> OpFuture {
        let mut io = self.io();
        let id = io.next_op;
        io.next_op += 1;
        io.issued.push((id, what));
        OpFuture { io: self.io.clone(), id }
    }

    /// `begin alkaline-subtransaction` (Salt §4). Under engines without BASE transactions the
    /// procedure runs as one ACID transaction and this is a no-op.
    pub async fn begin_alkaline(&self) -> Result<(), Error> {
        self.issue(Issued::Control(Control::BeginSection)).await.map(drop)
    }

    /// A single-operation alkaline subtransaction: `begin_alkaline; op; end_alkaline` in one
    /// request, which `salt-local` commits at the partition as soon as the operation completes
    /// (Salt §6.4). Other engines run it as a plain operation.
    pub fn alkaline_op(&self, op: Op) -> OpFuture {
        self.issue(Issued::UnitOp(op))
    }

    /// `update` as a single-operation alkaline subtransaction (see [`Ctx::alkaline_op`]).
    pub async fn alkaline_update(&self, table: &str, key: &[Value], updates: &[(&str, Formula)]) -> Result<(), Error> {
        let updates = updates.iter().map(|(c, f)| (c.to_string(), f.clone())).collect();
        self.alkaline_op(Op::Update { table: table.into(), key: key.to_vec(), updates }).await.map(drop)
    }

    /// `read` as a single-operation alkaline subtransaction (see [`Ctx::alkaline_op`]).
    pub async fn alkaline_read(&self, table: &str, key: &[Value]) -> Result<Option<Row>, Error> {
        match self.alkaline_op(Op::Read { table: table.into(), key: key.to_vec() }).await? {
            OpResult::Row(r) => Ok(r),
            other => Err(Error::Internal(format!("read returned {other:?}"))),
        }
    }

    /// Point reads of many keys of one table, issued at once; the rows come back in the order
    /// of `keys` (`None`: no such row). On engines that take it whole
    /// ([`crate::Capabilities::batches`]) this is one [`Op::ReadMany`] — one request per
    /// partition holding any of the keys — and otherwise one read per key; either way it
    /// locks, depends and sees exactly what the single reads would. More keys than an
    /// operation may name ([`crate::op::BATCH_LEN_MAX`]) go as several, so a procedure reads
    /// the same on every engine.
    pub async fn read_many(&self, table: &str, keys: &[Vec<Value>]) -> Result<Vec<Option<Row>>, Error> {
        if keys.is_empty() {
            return Ok(vec![]);
        }
        if self.io().batches {
            let batches: Vec<OpFuture> = keys
                .chunks(crate::op::BATCH_LEN_MAX)
                .map(|keys| self.op(Op::ReadMany { table: table.into(), keys: keys.to_vec() }))
                .collect();
            let mut rows = Vec::with_capacity(keys.len());
            for batch in batches {
                match batch.await? {
                    OpResult::Many(found) => rows.extend(found),
                    other => return Err(Error::Internal(format!("read_many returned {other:?}"))),
                }
            }
            return Ok(rows);
        }
        let reads: Vec<_> = keys.iter().map(|k| self.op(Op::Read { table: table.into(), key: k.clone() })).collect();
        let mut rows = Vec::with_capacity(reads.len());
        for read in reads {
            rows.push(row_of(read.await?)?);
        }
        Ok(rows)
    }

    /// Point writes (`Write`, `Insert`, `Delete`, `Update`), issued at once and awaited; the
    /// first error is returned. On engines that take them whole ([`crate::Capabilities::batches`])
    /// the writes of each table go as one [`Op::WriteMany`] (one request per partition, in the
    /// order the tables first appear, each table's writes in their order), elsewhere one
    /// operation each. Either way each write takes the locks it would take alone; where a write
    /// fails, a batch applies none of its partition's share, and single writes apply the others
    /// — so a caller that goes on after an error should roll back (procedures that return the
    /// error do). More writes of a table than an operation may hold
    /// ([`crate::op::BATCH_LEN_MAX`]) go as several batches, in order.
    pub async fn write_many(&self, ops: Vec<Op>) -> Result<(), Error> {
        if let Some(bad) = ops
            .iter()
            .find(|op| !matches!(op, Op::Write { .. } | Op::Insert { .. } | Op::Delete { .. } | Op::Update { .. }))
        {
            let what = "operation of a write_many".to_string();
            return Err(
                InvalidInput::WrongType { what, expected: "a point write".into(), got: format!("{bad:?}") }.into()
            );
        }
        let batches = self.io().batches;
        let futures: Vec<OpFuture> = if batches {
            let mut by_table: Vec<(String, Vec<Op>)> = Vec::new();
            for op in ops {
                let table = crate::op::op_table(&op);
                match by_table.iter_mut().find(|(t, _)| t == table) {
                    Some((_, writes)) => writes.push(op),
                    None => by_table.push((table.to_string(), vec![op])),
                }
            }
            let mut futures = Vec::new();
            for (table, writes) in by_table {
                let mut writes = writes.into_iter().peekable();
                while writes.peek().is_some() {
                    let mut batch: Vec<Op> = writes.by_ref().take(crate::op::BATCH_LEN_MAX).collect();
                    futures.push(match batch.len() {
                        1 => self.op(batch.pop().expect("one")),
                        _ => self.op(Op::WriteMany { table: table.clone(), writes: batch }),
                    });
                }
            }
            futures
        } else {
            ops.into_iter().map(|op| self.op(op)).collect()
        };
        for f in futures {
            f.await?;
        }
        Ok(())
    }

    /// `read_columns` as a single-operation alkaline subtransaction (see [`Ctx::alkaline_op`]).
    pub async fn alkaline_read_columns(
        &self,
        table: &str,
        key: &[Value],
        columns: &[&str],
    ) -> Result<Option<Row>, Error> {
        row_of(self.alkaline_op(read_columns_op(table, key, columns)).await?)
    }

    /// `end alkaline-subtransaction`: commits it. An error means it rolled back; a procedure may
    /// catch it and run a compensating alkaline subtransaction (Salt Fig. 2).
    pub async fn end_alkaline(&self) -> Result<(), Error> {
        self.issue(Issued::Control(Control::EndSection)).await.map(drop)
    }

    /// Point read by full primary key.
    pub async fn read(&self, table: &str, key: &[Value]) -> Result<Option<Row>, Error> {
        match self.op(Op::Read { table: table.into(), key: key.to_vec() }).await? {
            OpResult::Row(r) => Ok(r),
            other => Err(Error::Internal(format!("read returned {other:?}"))),
        }
    }

    /// Point read of the named columns ([`Op::ReadColumns`]): the row at full width, with every
    /// other column NULL. Under Salt, a BASE transaction that reads only columns no unfinished
    /// BASE write touched does not depend on those writes (LK-6a per column), so its later
    /// writes are not held back behind them.
    pub async fn read_columns(&self, table: &str, key: &[Value], columns: &[&str]) -> Result<Option<Row>, Error> {
        row_of(self.op(read_columns_op(table, key, columns)).await?)
    }

    /// Every row whose key starts with `prefix`, in key order, at most `limit`.
    pub async fn scan_prefix(&self, table: &str, prefix: &[Value], limit: u32) -> Result<Vec<Row>, Error> {
        self.scan(table, prefix, None, limit).await
    }

    /// Rows with keys in `[start, end)` (key prefixes), in key order, at most `limit`.
    pub async fn scan(
        &self,
        table: &str,
        start: &[Value],
        end: Option<&[Value]>,
        limit: u32,
    ) -> Result<Vec<Row>, Error> {
        let op = Op::Scan { table: table.into(), start: start.to_vec(), end: end.map(<[Value]>::to_vec), limit };
        match self.op(op).await? {
            OpResult::Rows(r) => Ok(r),
            other => Err(Error::Internal(format!("scan returned {other:?}"))),
        }
    }

    /// Insert or replace a row.
    pub async fn write(&self, table: &str, row: impl Into<Row>) -> Result<(), Error> {
        self.op(Op::Write { table: table.into(), row: row.into() }).await.map(drop)
    }

    /// Insert a new row (`DuplicateKey` if present).
    pub async fn insert(&self, table: &str, row: impl Into<Row>) -> Result<(), Error> {
        self.op(Op::Insert { table: table.into(), row: row.into() }).await.map(drop)
    }

    pub async fn delete(&self, table: &str, key: &[Value]) -> Result<(), Error> {
        self.op(Op::Delete { table: table.into(), key: key.to_vec() }).await.map(drop)
    }

    /// Applies formulas to named columns of an existing row (`bal += x`).
    pub async fn update(&self, table: &str, key: &[Value], updates: &[(&str, Formula)]) -> Result<(), Error> {
        let updates = updates.iter().map(|(c, f)| (c.to_string(), f.clone())).collect();
        self.op(Op::Update { table: table.into(), key: key.to_vec(), updates }).await.map(drop)
    }

    /// The error a procedure returns to abort itself with a reason (not retryable).
    pub fn abort(&self, reason: impl Into<String>) -> Error {
        Error::UserAbort(reason.into())
    }
}

fn read_columns_op(table: &str, key: &[Value], columns: &[&str]) -> Op {
    Op::ReadColumns { table: table.into(), key: key.to_vec(), columns: columns.iter().map(|c| c.to_string()).collect() }
}

fn row_of(result: OpResult) -> Result<Option<Row>, Error> {
    match result {
        OpResult::Row(r) => Ok(r),
        other => Err(Error::Internal(format!("read returned {other:?}"))),
    }
}

/// Resolves when the coordinator completes the operation.
pub struct OpFuture {
    io: Arc<Mutex<TxnIo>>,
    id: u32,
}

impl Future for OpFuture {
    type Output = Result<OpResult, Error>;
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut io = self.io.lock().expect("txn io poisoned");
        match io.results.remove(&self.id) {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }
}

/// Polls a procedure once. The coordinator re-polls after every completion, so no waker is
/// needed: a no-op waker keeps the executor free of threads and clocks.
pub fn poll_once(fut: &mut ProcFuture) -> Poll<ProcResult> {
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    fut.as_mut().poll(&mut cx)
}

fn noop_waker() -> Waker {
    const VTABLE: RawWakerVTable = RawWakerVTable::new(|_| RAW, |_| {}, |_| {}, |_| {});
    const RAW: RawWaker = RawWaker::new(std::ptr::null(), &VTABLE);
    // SAFETY: every vtable function ignores the (null) data pointer.
    unsafe { Waker::from_raw(RAW) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn procedure_issues_ops_and_resumes_on_completion() {
        let mut reg = Registry::new();
        reg.register("incr", vec![ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
            let row = ctx.read("kv", &args[..1]).await?.ok_or_else(|| ctx.abort("missing"))?;
            ctx.update("kv", &args[..1], &[("v", Formula::Add(Value::Int(1)))]).await?;
            Ok(row.into_vec())
        });
        let p = reg.get("incr").unwrap();
        assert!(p.check_args(&[Value::Int(1)]).is_ok());
        assert!(p.check_args(&["x".into()]).is_err());
        assert!(p.check_args(&[]).is_err());
        assert!(matches!(reg.get("nope"), Err(InvalidInput::UnknownProcedure(_))));

        let ctx = Ctx::new();
        let mut fut = p.start(ctx.clone(), vec![Value::Int(1)]);
        assert!(poll_once(&mut fut).is_pending());
        let issued = ctx.io().take_issued();
        assert_eq!(issued.len(), 1);
        assert!(matches!(issued[0].1, Issued::Op(Op::Read { .. })));
        ctx.io().complete(issued[0].0, Ok(OpResult::Row(Some(vec![Value::Int(1), Value::Int(5)].into()))));
        assert!(poll_once(&mut fut).is_pending());
        let issued = ctx.io().take_issued();
        assert!(matches!(issued[0].1, Issued::Op(Op::Update { .. })));
        ctx.io().complete(issued[0].0, Ok(OpResult::Done));
        match poll_once(&mut fut) {
            Poll::Ready(Ok(v)) => assert_eq!(v, vec![Value::Int(1), Value::Int(5)]),
            other => panic!("{other:?}"),
        }
    }

    /// More keys or writes than one operation may hold go as several batches, in order, so a
    /// procedure that reads or writes many rows runs the same on every engine.
    #[test]
    fn reads_and_writes_of_more_keys_than_a_batch_holds_go_as_several_batches() {
        let max = crate::op::BATCH_LEN_MAX;
        let n = max + 2;
        let ctx = Ctx::new().with_batches(true);
        let keys: Vec<Vec<Value>> = (0..n as i64).map(|k| vec![Value::Int(k)]).collect();
        let reader = ctx.clone();
        let mut fut: ProcFuture = Box::pin(async move {
            let rows = reader.read_many("kv", &keys).await?;
            Ok(rows.into_iter().map(|r| r.map_or(Value::Null, |r| r[0].clone())).collect())
        });
        assert!(poll_once(&mut fut).is_pending());
        // Keys or writes per issued operation.
        let sizes = |issued: &[(u32, Issued)]| -> Vec<usize> {
            issued
                .iter()
                .map(|(_, i)| match i {
                    Issued::Op(Op::ReadMany { keys, .. }) => keys.len(),
                    Issued::Op(Op::WriteMany { writes, .. }) => writes.len(),
                    Issued::Op(Op::Write { .. }) => 1,
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        let issued = ctx.io().take_issued();
        assert_eq!(sizes(&issued), vec![max, 2]);
        for (id, i) in issued {
            let Issued::Op(Op::ReadMany { keys, .. }) = i else { unreachable!() };
            let rows = keys.into_iter().map(|k| Some(Row::from(k))).collect();
            ctx.io().complete(id, Ok(OpResult::Many(rows)));
        }
        match poll_once(&mut fut) {
            Poll::Ready(Ok(v)) => assert_eq!(v, (0..n as i64).map(Value::Int).collect::<Vec<_>>(), "in key order"),
            other => panic!("{other:?}"),
        }

        let writer = ctx.clone();
        let put = |k: i64| Op::Write { table: "kv".into(), row: vec![Value::Int(k), Value::Int(k)].into() };
        let writes: Vec<Op> = (0..n as i64).map(put).chain([put(-1)]).collect();
        let mut fut: ProcFuture = Box::pin(async move { writer.write_many(writes).await.map(|()| vec![]) });
        assert!(poll_once(&mut fut).is_pending());
        let issued = ctx.io().take_issued();
        assert_eq!(sizes(&issued), vec![max, 3], "the table's writes in two batches, in order");
    }
}
