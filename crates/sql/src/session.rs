//! One connection's SQL session: its transaction state, its settings, and the dispatch of each
//! statement to the planner inside the right transaction.
//!
//! ```text
//!            BEGIN                     a statement fails
//!   Idle ───────────► Open(txn) ───────────────────────► Failed
//!    ▲                  │  COMMIT / ROLLBACK               │ COMMIT / ROLLBACK
//!    └──────────────────┴──────────────────────────────────┘ (both roll back)
//! ```
//!
//! Outside `BEGIN` every statement begins, runs and commits its own transaction. A failed
//! statement rolls back its transaction (or finds it already aborted by the engine), so
//! nothing of it stays. Dropping a session with an open transaction rolls it back.
//!
//! ## Retries keep their age
//!
//! A PostgreSQL client retries a transaction that failed with `40001` or `40P01` by running it
//! again (pgbench's `--max-tries`, drivers' retry loops), without saying so. The session infers
//! it: when one of its transactions ended in a retryable abort and the session begins its next
//! transaction within [`RETRY_INHERIT_WITHIN`] of that abort, the new transaction is taken as a
//! retry and begun with the first attempt's age (`Client::begin_retry`, whose `retrying_for` is
//! the time since the first attempt began; the coordinator caps the credit). Engines that
//! resolve conflicts by age (wait-die on the locking engines) then let a retry that keeps
//! losing become the oldest and win, instead of dying young again on every try — as a
//! stored-procedure call's retries do, and as CockroachDB keeps a retried transaction's
//! priority. The chain ends when a transaction commits, fails for another reason, or the next
//! one begins later than the bound. A transaction that is not in fact a retry of the aborted
//! one only runs with an older age: priority, never correctness.
//!
//! ## Statements outside a transaction block retry themselves
//!
//! A statement outside `BEGIN … COMMIT` runs in a transaction of its own, and nothing of it
//! reaches the client before that transaction commits. So when it ends in a retryable abort
//! (nothing applied), the session runs it again, as CockroachDB retries implicit transactions:
//! up to [`IMPLICIT_RETRIES_MAX`] attempts within [`IMPLICIT_RETRY_WITHIN`], each with the
//! first attempt's age. Clients that retry nothing — `pgbench -i`'s `ALTER TABLE … ADD PRIMARY
//! KEY`, a `psql` script — then see no abort a retry would have cured: a lock conflict, or a
//! replica group's leader change under a long statement. A commit whose outcome is unknown
//! (`40003`) is never retried, and a statement inside a block never is (the client owns that
//! transaction). Nor is a statement whose begin did not run because no coordinator leader
//! was reachable (an election: `Unavailable`, nothing begun) failed at once: it begins again
//! after a pause that grows by [`BEGIN_UNAVAILABLE_PAUSE`] per attempt, within the same bounds,
//! so an election (0.25–0.6 s) is waited out.

use crate::catalog::{object_name, table_def};
use crate::error::{sqlstate, SqlError};
use crate::one_round::{OneRoundStore, OneRoundTxn};
use crate::store::Tx;
use crate::types::{Datum, SqlType};
use crate::{dml, query, Column, StatementCtx};
use litmus_client::{Client, Transaction};
use litmus_core::{Isolation, TxnId};
use sqlparser::ast::{ObjectType, Set, Statement, TransactionIsolationLevel, TransactionMode};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Attempts of a statement outside a transaction block (see the module doc).
pub const IMPLICIT_RETRIES_MAX: u32 = 10;
/// No attempt of a statement outside a transaction block begins this long after its first.
pub const IMPLICIT_RETRY_WITHIN: Duration = Duration::from_secs(30);
/// How much longer each pause before beginning again grows, when a statement outside a
/// transaction block found no coordinator leader to begin with (see the module doc).
pub const BEGIN_UNAVAILABLE_PAUSE: Duration = Duration::from_millis(100);

/// What a statement produced.
#[derive(Debug, PartialEq)]
pub enum Output {
    /// A result set.
    Rows { columns: Vec<Column>, rows: Vec<Vec<Datum>> },
    /// A command's completion tag (`INSERT 0 3`, `CREATE TABLE`, ...).
    Command(String),
    /// A transaction began (`BEGIN`).
    Begin,
    /// A transaction ended: `COMMIT` or `ROLLBACK`.
    End(&'static str),
    /// This many rows went to the sink of [`Session::execute_streaming`], after the columns.
    Streamed(usize),
}

/// Where the session is, as the wire protocol reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnStatus {
    Idle,
    InTransaction,
    Failed,
}

enum State {
    Idle,
    Open(Open),
    Failed,
}

/// An open transaction.
enum Open {
    /// An interactive transaction of the cluster's engine.
    Server(TxnId),
    /// An optimistic transaction, on an engine that runs one-round transactions only
    /// ([`crate::one_round`]).
    OneRound(Box<OneRoundTxn>),
}

/// How soon after a transaction's retryable abort the session's next transaction begins to
/// count as its retry (see the module doc). pgbench and most drivers retry at once; the bound
/// leaves room for a driver's backoff and ends the chain for a session that moved on.
pub const RETRY_INHERIT_WITHIN: Duration = Duration::from_secs(1);

/// A transaction of the session that ended in a retryable abort.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Aborted {
    /// When the first attempt of the transaction began.
    first_began: Instant,
    /// When the abort was seen.
    at: Instant,
}

/// When the first attempt of a transaction beginning `now` began: that of the aborted one
/// before it if it began within [`RETRY_INHERIT_WITHIN`] of the abort (a retry), else `now`.
fn first_attempt_began(aborted: Option<Aborted>, now: Instant) -> Instant {
    match aborted {
        Some(a) if now.saturating_duration_since(a.at) <= RETRY_INHERIT_WITHIN => a.first_began.min(now),
        _ => now,
    }
}

/// One connection's session.
pub struct Session {
    client: Client,
    state: State,
    settings: BTreeMap<String, String>,
    isolation: Isolation,
    id: u64,
    /// Raised by a cancel request for the statement running (see [`Session::canceller`]).
    cancel: Arc<AtomicBool>,
    /// When the first attempt of the transaction running (or last run) began.
    first_began: Instant,
    /// The last transaction, if it ended in a retryable abort.
    aborted: Option<Aborted>,
    /// The last begin did not run (no coordinator leader was reachable): nothing was begun.
    begin_did_not_run: bool,
    /// The engine runs one-round transactions only (it refused a begin): transactions are
    /// optimistic, committed as minitransactions ([`crate::one_round`]).
    one_round: bool,
}

fn isolation_of(level: &TransactionIsolationLevel) -> Isolation {
    match level {
        TransactionIsolationLevel::ReadUncommitted => Isolation::ReadUncommitted,
        TransactionIsolationLevel::ReadCommitted => Isolation::ReadCommitted,
        TransactionIsolationLevel::RepeatableRead | TransactionIsolationLevel::Snapshot => Isolation::RepeatableRead,
        TransactionIsolationLevel::Serializable => Isolation::Serializable,
    }
}

fn isolation_name(i: Isolation) -> &'static str {
    match i {
        Isolation::ReadUncommitted => "read uncommitted",
        Isolation::ReadCommitted => "read committed",
        Isolation::RepeatableRead => "repeatable read",
        Isolation::Serializable => "serializable",
    }
}

fn now_us() -> i64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    d.as_micros() as i64
}

/// The settings a client may `SHOW` at connect, with PostgreSQL's values.
const SETTINGS: [(&str, &str); 10] = [
    ("server_version", crate::SERVER_VERSION),
    ("server_encoding", "UTF8"),
    ("client_encoding", "UTF8"),
    ("datestyle", "ISO, MDY"),
    ("timezone", "UTC"),
    ("integer_datetimes", "on"),
    ("standard_conforming_strings", "on"),
    ("search_path", "public"),
    ("application_name", ""),
    ("extra_float_digits", "1"),
];

impl Session {
    /// A session over `client`. `id` names it (a connection counter).
    pub fn new(client: Client, id: u64) -> Session {
        let settings = SETTINGS.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let cancel = Arc::new(AtomicBool::new(false));
        Session {
            client,
            state: State::Idle,
            settings,
            isolation: Isolation::Serializable,
            id,
            cancel,
            first_began: Instant::now(),
            aborted: None,
            begin_did_not_run: false,
            one_round: false,
        }
    }

    /// The session, cancelled through `flag` (made before the session, as a connection hands
    /// out its cancel key at startup).
    pub fn with_canceller(mut self, flag: Arc<AtomicBool>) -> Session {
        self.cancel = flag;
        self
    }

    /// What cancels the statement running: set it (from another thread) and the statement
    /// stops before its next read or write with `57014`, its transaction failed as after any
    /// error. A statement waiting for a lock notices when the wait ends. Each statement starts
    /// uncancelled: a cancel between statements cancels nothing, as in PostgreSQL.
    pub fn canceller(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// The id the session was made with.
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn status(&self) -> TxnStatus {
        match self.state {
            State::Idle => TxnStatus::Idle,
            State::Open(_) => TxnStatus::InTransaction,
            State::Failed => TxnStatus::Failed,
        }
    }

    /// The engine the cluster runs, when known.
    pub fn engine(&self) -> Option<&str> {
        self.client.server_engine()
    }

    /// Runs one statement with its parameters (`$1` is `params[0]`; `param_types` types the
    /// results of expressions over them, as far as known).
    pub fn execute(&mut self, stmt: &Statement, params: &[Datum], param_types: &[SqlType]) -> Result<Output, SqlError> {
        match stmt {
            Statement::Commit { chain: false, .. } => return self.commit(),
            Statement::Rollback { chain: false, savepoint: None } => return self.rollback(),
            _ if matches!(self.state, State::Failed) => return Err(failed_txn()),
            Statement::StartTransaction { modes, statements, exception: None, .. } if statements.is_empty() => {
                return self.begin(modes)
            }
            Statement::Set(s) => return self.set(s),
            Statement::ShowVariable { variable } => return self.show(variable),
            Statement::Vacuum(_) => return Ok(Output::Command("VACUUM".into())),
            Statement::Call(f) if !matches!(self.state, State::Open(_)) => {
                let ctx = self.ctx(params, param_types);
                return self.call_outside_block(f, &ctx);
            }
            Statement::Analyze(_) => return Ok(Output::Command("ANALYZE".into())),
            _ => {}
        }
        let ctx = self.ctx(params, param_types);
        self.in_own_or_open_txn(|tx| run_statement(tx, &ctx, stmt))
    }

    /// [`Session::execute`], a query's rows handed to `sink` as they are read when it needs no
    /// sorting or grouping ([`query::run_to`]): `Output::Streamed` then says how many. A
    /// statement outside a transaction block retries its retryable aborts only until its
    /// columns went to the sink: the client has begun to read it.
    pub fn execute_streaming(
        &mut self,
        stmt: &Statement,
        params: &[Datum],
        param_types: &[SqlType],
        sink: &mut dyn query::RowSink,
    ) -> Result<Output, SqlError> {
        let Statement::Query(q) = stmt else { return self.execute(stmt, params, param_types) };
        if matches!(self.state, State::Failed) {
            return Err(failed_txn());
        }
        let ctx = self.ctx(params, param_types);
        let mut started = false;
        let mut sink = Started { sink, started: &mut started };
        self.in_own_or_open_txn_until(
            |tx, sink| {
                if ctx.refuse_coordination {
                    crate::coordination::check(tx, stmt)?;
                }
                Ok(match query::run_to(tx, &ctx, q, Some(sink))? {
                    query::Ran::Rows(r) => Output::Rows { columns: r.columns, rows: r.rows },
                    query::Ran::Streamed(n) => Output::Streamed(n),
                })
            },
            |sink| *sink.started,
            &mut sink,
        )
    }

    /// Checks a `COPY ... FROM STDIN` before its data comes: the number of fields a line has.
    pub fn copy_width(&mut self, spec: &crate::copy::CopySpec) -> Result<usize, SqlError> {
        self.check_not_failed()?;
        self.in_txn(|tx| {
            let def = tx.table(&spec.table)?;
            Ok(crate::copy::targets(spec, &def)?.len())
        })
    }

    /// Runs a `COPY ... FROM STDIN` with all its data; the number of rows.
    pub fn copy_in(&mut self, spec: &crate::copy::CopySpec, data: &[u8]) -> Result<usize, SqlError> {
        self.check_not_failed()?;
        let ctx = self.ctx(&[], &[]);
        self.in_own_or_open_txn(|tx| {
            if ctx.refuse_coordination {
                // Judged as the INSERT of chosen values it is.
                let insert = crate::copy::as_insert(spec, &tx.table(&spec.table)?)?;
                crate::coordination::check(tx, &insert)?;
            }
            dml::copy_rows(tx, &ctx, spec, data)
        })
    }

    fn check_not_failed(&self) -> Result<(), SqlError> {
        if matches!(self.state, State::Failed) {
            return Err(failed_txn());
        }
        Ok(())
    }

    fn ctx(&self, params: &[Datum], param_types: &[SqlType]) -> StatementCtx {
        StatementCtx {
            params: params.to_vec(),
            param_types: param_types.to_vec(),
            now_us: now_us(),
            refuse_coordination: self.client.server_engine() == Some("coordfree"),
        }
    }

    /// The types of a statement's parameters (`$n`: inferred from what they are compared
    /// with or assigned to, else text) and its result columns (`None`: no rows).
    pub fn describe(&mut self, stmt: &Statement) -> Result<(Vec<SqlType>, Option<Vec<Column>>), SqlError> {
        let count = crate::describe::placeholders(stmt);
        if !matches!(stmt, Statement::Query(_) | Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)) {
            return Ok((vec![SqlType::Text; count], None));
        }
        if matches!(self.state, State::Failed) {
            return Ok((vec![SqlType::Text; count], None));
        }
        let ctx = self.ctx(&vec![Datum::Null; count], &[]);
        // Describing reads the catalog in a transaction of its own: no retry of the aborted
        // transaction, and not the end of its retries either.
        let aborted = self.aborted;
        let out = self.in_txn(|tx| crate::describe::describe(tx, &ctx, stmt, count));
        self.aborted = aborted;
        out
    }

    /// [`Session::in_txn`], retrying a transaction of its own that ended in a retryable abort
    /// (see the module doc, "Statements outside a transaction block retry themselves").
    fn in_own_or_open_txn<T>(&mut self, mut f: impl FnMut(&mut Tx) -> Result<T, SqlError>) -> Result<T, SqlError> {
        self.in_own_or_open_txn_until(|tx, ()| f(tx), |()| false, &mut ())
    }

    /// [`Session::in_own_or_open_txn`] with state `s` that `f` works on, which stops the
    /// retries once `settled(s)`.
    fn in_own_or_open_txn_until<S, T>(
        &mut self,
        mut f: impl FnMut(&mut Tx, &mut S) -> Result<T, SqlError>,
        settled: impl Fn(&S) -> bool,
        s: &mut S,
    ) -> Result<T, SqlError> {
        if matches!(self.state, State::Open(_)) {
            return self.in_txn(|tx| f(tx, s));
        }
        let first = Instant::now();
        let mut attempts = 1;
        loop {
            self.begin_did_not_run = false;
            let out = self.in_txn(|tx| f(tx, s));
            let again = attempts < IMPLICIT_RETRIES_MAX
                && first.elapsed() < IMPLICIT_RETRY_WITHIN
                && !self.cancel.load(Ordering::Relaxed)
                && !settled(s);
            match out {
                Err(e) if again && e.is_retryable_abort() => {}
                Err(_) if again && self.begin_did_not_run => {
                    std::thread::sleep(BEGIN_UNAVAILABLE_PAUSE * attempts);
                    // A cancel during the pause ends the statement (the next attempt would
                    // clear the flag before looking at it).
                    if self.cancel.load(Ordering::Relaxed) {
                        return Err(SqlError::new(
                            sqlstate::QUERY_CANCELED,
                            "canceling statement due to user request".into(),
                        ));
                    }
                }
                out => return out,
            }
            attempts += 1;
        }
    }

    /// Runs `f` in the open transaction, or in one of its own that commits after it.
    fn in_txn<T>(&mut self, f: impl FnOnce(&mut Tx) -> Result<T, SqlError>) -> Result<T, SqlError> {
        let explicit = matches!(self.state, State::Open(_));
        let paging = self.client.paging();
        self.cancel.store(false, Ordering::Relaxed);
        let cancel = self.cancel.clone();
        if !explicit {
            self.start(self.isolation)?;
        }
        let out = match &mut self.state {
            State::Open(Open::Server(id)) => {
                let mut txn: Transaction<'_> = self.client.resume(*id);
                let out = f(&mut Tx { txn: &mut txn, paging, cancel: Some(&cancel) });
                match out {
                    Ok(v) if explicit => {
                        txn.detach();
                        return Ok(v);
                    }
                    Ok(v) => txn.commit().map(|()| v).map_err(SqlError::from),
                    Err(e) => {
                        if txn.is_ended() {
                            txn.detach();
                        } else {
                            let _ = txn.rollback();
                        }
                        Err(e)
                    }
                }
            }
            State::Open(Open::OneRound(t)) => {
                let mut store = OneRoundStore { client: &mut self.client, txn: t };
                let out = f(&mut Tx { txn: &mut store, paging, cancel: Some(&cancel) });
                match out {
                    Ok(v) if explicit => return Ok(v),
                    Ok(v) => {
                        let State::Open(Open::OneRound(t)) = std::mem::replace(&mut self.state, State::Idle) else {
                            unreachable!("matched above")
                        };
                        t.commit(&mut self.client).map(|()| v).map_err(SqlError::from)
                    }
                    Err(e) => Err(reported(e, t, &mut self.client)),
                }
            }
            _ => unreachable!("a transaction was just begun"),
        };
        self.state = if out.is_err() && explicit { State::Failed } else { State::Idle };
        self.ended(out.as_ref().err());
        out
    }

    /// Begins a transaction at `isolation` and opens it: a retry of the last one, with its
    /// first attempt's age, if that ended in a retryable abort just now (see the module doc).
    fn start(&mut self, isolation: Isolation) -> Result<(), SqlError> {
        let now = Instant::now();
        self.first_began = first_attempt_began(self.aborted.take(), now);
        let retrying_for = now.saturating_duration_since(self.first_began);
        if self.one_round {
            self.state = State::Open(Open::OneRound(Box::default()));
            return Ok(());
        }
        match self.client.begin_retry(isolation, retrying_for) {
            Ok(txn) => self.state = State::Open(Open::Server(txn.detach())),
            Err(litmus_core::Error::Invalid(litmus_core::InvalidInput::Unsupported { .. })) => {
                // The engine runs one-round transactions only.
                self.one_round = true;
                self.state = State::Open(Open::OneRound(Box::default()));
            }
            Err(e) => {
                self.begin_did_not_run = matches!(e, litmus_core::Error::Unavailable { outcome_unknown: false, .. });
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Notes how the session's transaction ended: committed (`None`) or failed with `error`.
    fn ended(&mut self, error: Option<&SqlError>) {
        self.aborted = match error {
            Some(e) if e.is_retryable_abort() => Some(Aborted { first_began: self.first_began, at: Instant::now() }),
            _ => None,
        };
    }

    fn begin(&mut self, modes: &[TransactionMode]) -> Result<Output, SqlError> {
        if matches!(self.state, State::Open(_)) {
            // PostgreSQL warns and carries on in the open transaction.
            return Ok(Output::Begin);
        }
        let mut isolation = self.isolation;
        for m in modes {
            if let TransactionMode::IsolationLevel(level) = m {
                isolation = isolation_of(level);
            }
        }
        self.start(isolation)?;
        if let State::Open(Open::OneRound(t)) = &mut self.state {
            t.explicit = true;
        }
        Ok(Output::Begin)
    }

    fn commit(&mut self) -> Result<Output, SqlError> {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Idle => Ok(Output::End("COMMIT")),
            // The failure that failed the transaction already said how it ended.
            State::Failed => Ok(Output::End("ROLLBACK")),
            State::Open(open) => {
                let out = match open {
                    Open::Server(id) => self.client.resume(id).commit(),
                    Open::OneRound(t) => t.commit(&mut self.client),
                }
                .map_err(SqlError::from);
                self.ended(out.as_ref().err());
                out.map(|()| Output::End("COMMIT"))
            }
        }
    }

    fn rollback(&mut self) -> Result<Output, SqlError> {
        if let State::Open(open) = std::mem::replace(&mut self.state, State::Idle) {
            if let Open::Server(id) = open {
                let _ = self.client.resume(id).rollback();
            }
            // Rolled back by the client: no abort to retry.
            self.aborted = None;
        }
        Ok(Output::End("ROLLBACK"))
    }

    fn set(&mut self, s: &Set) -> Result<Output, SqlError> {
        let tag = Output::Command("SET".into());
        match s {
            Set::SingleAssignment { variable, values, .. } => {
                let name = variable.to_string().to_lowercase();
                let value =
                    values.iter().map(|v| v.to_string().trim_matches('\'').to_string()).collect::<Vec<_>>().join(", ");
                if name == "default_transaction_isolation" || name == "transaction_isolation" {
                    self.isolation = parse_isolation(&value)?;
                }
                self.settings.insert(name, value);
                Ok(tag)
            }
            Set::SetTimeZone { value, .. } => {
                self.settings.insert("timezone".into(), value.to_string().trim_matches('\'').to_string());
                Ok(tag)
            }
            Set::SetNames { charset_name, .. } => {
                self.settings.insert("client_encoding".into(), charset_name.value.clone());
                Ok(tag)
            }
            Set::SetTransaction { modes, .. } => {
                for m in modes {
                    if let TransactionMode::IsolationLevel(level) = m {
                        if matches!(self.state, State::Open(_)) {
                            return Err(SqlError::unsupported(
                                "SET TRANSACTION ISOLATION LEVEL inside a transaction; use BEGIN ISOLATION LEVEL",
                            ));
                        }
                        self.isolation = isolation_of(level);
                    }
                }
                Ok(tag)
            }
            other => Err(SqlError::unsupported(format!("{other}"))),
        }
    }

    fn show(&mut self, variable: &[sqlparser::ast::Ident]) -> Result<Output, SqlError> {
        let name = variable.iter().map(|i| i.value.to_lowercase()).collect::<Vec<_>>().join(" ");
        let value =
            match name.as_str() {
                "transaction isolation level" | "transaction_isolation" | "default_transaction_isolation" => {
                    isolation_name(self.isolation).to_string()
                }
                _ => self.settings.get(&name).cloned().ok_or_else(|| {
                    SqlError::new("42704", format!("unrecognized configuration parameter \"{name}\""))
                })?,
            };
        let column = Column { name: name.replace(' ', "_"), ty: SqlType::Text };
        Ok(Output::Rows { columns: vec![column], rows: vec![vec![Datum::Text(value)]] })
    }
}

fn failed_txn() -> SqlError {
    SqlError::new(
        sqlstate::IN_FAILED_TRANSACTION,
        "current transaction is aborted, commands ignored until end of transaction block".into(),
    )
}

fn parse_isolation(v: &str) -> Result<Isolation, SqlError> {
    match v.to_lowercase().replace(['-', '_'], " ").as_str() {
        "read uncommitted" => Ok(Isolation::ReadUncommitted),
        "read committed" => Ok(Isolation::ReadCommitted),
        "repeatable read" => Ok(Isolation::RepeatableRead),
        "serializable" => Ok(Isolation::Serializable),
        other => Err(SqlError::new("22023", format!("invalid value for transaction isolation: \"{other}\""))),
    }
}

/// The error an optimistic transaction's statement reports: `e`, unless `e` is not an abort
/// and what the transaction read had already changed — then the statement computed on rows
/// that never stood together, and the client gets the retryable abort instead (see
/// [`crate::one_round`]).
fn reported(e: SqlError, txn: &OneRoundTxn, client: &mut Client) -> SqlError {
    if e.is_retryable_abort() || e.ended_transaction() {
        return e;
    }
    match txn.still_current(client) {
        Ok(false) => SqlError::from(litmus_core::Error::Abort(litmus_core::AbortReason::Other(
            "what this transaction read changed while it ran".into(),
        ))),
        _ => e,
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // A connection that goes away mid-transaction leaves nothing behind.
        if let State::Open(Open::Server(id)) = std::mem::replace(&mut self.state, State::Idle) {
            let _ = self.client.resume(id).rollback();
        }
    }
}

/// A sink that notes when the columns went out.
struct Started<'a, 'b> {
    sink: &'a mut dyn query::RowSink,
    started: &'b mut bool,
}

impl query::RowSink for Started<'_, '_> {
    fn columns(&mut self, columns: &[Column]) -> Result<(), SqlError> {
        *self.started = true;
        self.sink.columns(columns)
    }
    fn row(&mut self, row: Vec<Datum>) -> Result<(), SqlError> {
        self.sink.row(row)
    }
}

fn no_procedure(name: &str) -> SqlError {
    SqlError::new("42883", format!("procedure {name} does not exist"))
}

/// `CALL name(args)`: the procedure's body, with its parameters bound to the arguments, in the
/// statement's transaction (see [`crate::routine`]).
/// How a `CALL` runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CallMode {
    /// Inside `BEGIN`: in the open transaction; a BASE procedure, whose `COMMIT`s would end
    /// it, is refused (`2D000`, as PostgreSQL refuses a procedure's `COMMIT` there).
    InBlock,
    /// Its own transaction: a BASE procedure is planned (and then run by the caller).
    Own,
    /// Its own transaction, every procedure run as one transaction (an engine without
    /// stored procedures run op by op, where a BASE procedure cannot run).
    AsOneTransaction,
}

/// What a `CALL` did: ran, or planned its body for the caller to run at the coordinator as
/// `procedure` (one request: `call_one_round::PROC_PROCEDURE`, or `BASE_PROCEDURE`).
enum Called {
    Ran,
    Planned { procedure: &'static str, plan: Vec<u8> },
}

/// `CALL` outside a transaction block: a BASE procedure is planned in a transaction of its
/// own and then runs as a Salt BASE transaction (`call_one_round::BASE_PROCEDURE`); any other
/// runs in the statement's transaction.
impl Session {
    fn call_outside_block(&mut self, f: &sqlparser::ast::Function, ctx: &StatementCtx) -> Result<Output, SqlError> {
        let first = Instant::now();
        let mut attempts = 0;
        let mut mode = CallMode::Own;
        loop {
            attempts += 1;
            if self.one_round {
                // No procedure runs op by op here, so no BASE one: one (one-round) transaction.
                mode = CallMode::AsOneTransaction;
            }
            let (procedure, plan) = match self.in_own_or_open_txn(|tx| call(tx, ctx, f, mode))? {
                Called::Ran => return Ok(Output::Command("CALL".into())),
                Called::Planned { procedure, plan } => (procedure, plan),
            };
            let args = vec![litmus_core::Value::Bytes(plan.into())];
            let retrying_for = first.elapsed();
            match self.client.call_retry(procedure, args, retrying_for) {
                Ok(_) => return Ok(Output::Command("CALL".into())),
                Err(litmus_core::Error::Invalid(litmus_core::InvalidInput::Unsupported { .. })) => {
                    mode = CallMode::AsOneTransaction;
                }
                Err(e) => {
                    let e = SqlError::from(e);
                    let again = attempts < IMPLICIT_RETRIES_MAX && first.elapsed() < IMPLICIT_RETRY_WITHIN;
                    if !(again && e.is_retryable_abort()) {
                        return Err(e);
                    }
                }
            }
        }
    }
}

fn encode<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, SqlError> {
    postcard::to_allocvec(v).map_err(|e| SqlError::internal(format!("encoding a plan: {e}")))
}

fn call(tx: &mut Tx, ctx: &StatementCtx, f: &sqlparser::ast::Function, mode: CallMode) -> Result<Called, SqlError> {
    let name = object_name(&f.name)?;
    let bytes = tx.read_system(&crate::routine::key(&name))?.ok_or_else(|| no_procedure(&name))?;
    let def = crate::routine::decode(&name, &bytes)?;
    let (args, star) = crate::expr::function_args(f)?;
    if star || args.len() != def.params.len() {
        return Err(SqlError::new(
            "42883",
            format!("procedure {name} takes {} arguments, not {}", def.params.len(), args.len()),
        ));
    }
    let scope = crate::expr::Scope::new(vec![]);
    let env = crate::expr::Env { scope: &scope, row: &[], params: &ctx.params, aggregates: None, now_us: ctx.now_us };
    let params =
        args.iter().zip(&def.params).map(|(e, (_, ty))| env.eval(e)?.cast(ty)).collect::<Result<Vec<_>, SqlError>>()?;
    let inner = StatementCtx {
        params,
        param_types: def.params.iter().map(|(_, t)| t.clone()).collect(),
        now_us: ctx.now_us,
        refuse_coordination: ctx.refuse_coordination,
    };
    // On `coordfree` each statement of the body is judged as it runs (run_statement): no
    // planned body runs past that judgement.
    let mode = if inner.refuse_coordination && mode == CallMode::Own { CallMode::AsOneTransaction } else { mode };
    match (def.class, mode) {
        (crate::routine::ProcClass::Base, CallMode::InBlock) => {
            return Err(SqlError::new(
                "2D000",
                format!("invalid transaction termination: BASE procedure {name} commits, so it cannot run inside a transaction block"),
            ))
        }
        (crate::routine::ProcClass::Base, CallMode::Own | CallMode::AsOneTransaction) => {
            let Some(planned) = crate::call_one_round::plan_writes(tx, &def, &bytes, &inner)? else {
                return Err(SqlError::unsupported(format!(
                    "a statement in BASE procedure {name} that does not write rows named by their whole key, or writes a replicated table"
                )));
            };
            if mode == CallMode::Own {
                let plan = encode(&planned)?;
                return Ok(Called::Planned { procedure: crate::call_one_round::BASE_PROCEDURE, plan });
            }
            // No BASE transactions here: one transaction — one round where the engine runs
            // nothing else — else below.
            if tx.txn.takes_one_round_calls() {
                let calls = crate::call_one_round::fragment_calls(planned)?;
                tx.txn.one_round_call(vec![litmus_core::Value::Bytes(encode(&calls)?.into())])?;
                return Ok(Called::Ran);
            }
        }
        // Writes by key, its own transaction: one request to the coordinator, which runs them.
        (crate::routine::ProcClass::Acid, CallMode::Own) if !tx.txn.takes_one_round_calls() => {
            if let Some(planned) = crate::call_one_round::plan_writes(tx, &def, &bytes, &inner)? {
                let plan = encode(&planned)?;
                return Ok(Called::Planned { procedure: crate::call_one_round::PROC_PROCEDURE, plan });
            }
        }
        _ => {}
    }
    if tx.txn.takes_one_round_calls() {
        if let Some(calls) = crate::call_one_round::plan(tx, &def, &bytes, &inner)? {
            tx.txn.one_round_call(vec![litmus_core::Value::Bytes(encode(&calls)?.into())])?;
            return Ok(Called::Ran);
        }
    }
    for stmt in crate::parse(&def.body)? {
        if matches!(stmt, Statement::Commit { .. }) {
            continue; // a BASE procedure run as one transaction
        }
        run_statement(tx, &inner, &stmt)
            .map_err(|e| SqlError::new(e.code, format!("{} (in procedure {name})", e.message)))?;
    }
    Ok(Called::Ran)
}

fn run_statement(tx: &mut Tx, ctx: &StatementCtx, stmt: &Statement) -> Result<Output, SqlError> {
    if ctx.refuse_coordination {
        crate::coordination::check(tx, stmt)?;
    }
    Ok(match stmt {
        Statement::Query(q) => {
            let r = query::run(tx, ctx, q)?;
            Output::Rows { columns: r.columns, rows: r.rows }
        }
        Statement::Insert(i) => Output::Command(format!("INSERT 0 {}", dml::insert(tx, ctx, i)?)),
        Statement::Update(u) => Output::Command(format!("UPDATE {}", dml::update(tx, ctx, u)?)),
        Statement::Delete(d) => Output::Command(format!("DELETE {}", dml::delete(tx, ctx, d)?)),
        Statement::CreateTable(ct) => create_table(tx, ct)?,
        Statement::CreateFunction(cf) => {
            let def = crate::routine::proc_def(cf)?;
            if !cf.or_replace && tx.find_procedure(&def.name)?.is_some() {
                return Err(SqlError::new("42723", format!("procedure \"{}\" already exists", def.name)));
            }
            tx.put_procedure(&def)?;
            Output::Command("CREATE PROCEDURE".into())
        }
        Statement::DropProcedure { if_exists, proc_desc, .. } => {
            for d in proc_desc {
                let name = object_name(&d.name)?;
                match tx.find_procedure(&name)? {
                    Some(_) => tx.drop_procedure(&name)?,
                    None if *if_exists => {}
                    None => return Err(no_procedure(&name)),
                }
            }
            Output::Command("DROP PROCEDURE".into())
        }
        Statement::Call(f) => {
            call(tx, ctx, f, CallMode::InBlock)?;
            Output::Command("CALL".into())
        }
        Statement::Drop { object_type: ObjectType::Table, if_exists, names, cascade: false, .. } => {
            for n in names {
                let name = object_name(n)?;
                match tx.find_table(&name)? {
                    Some(def) => {
                        dml::delete_all(tx, &def)?;
                        tx.drop_table(&def)?;
                    }
                    None if *if_exists => {}
                    None => return Err(SqlError::no_table(&name)),
                }
            }
            Output::Command("DROP TABLE".into())
        }
        Statement::Truncate(t) => {
            for target in &t.table_names {
                let def = tx.table(&object_name(&target.name)?)?;
                dml::delete_all(tx, &def)?;
            }
            Output::Command("TRUNCATE TABLE".into())
        }
        Statement::AlterTable(at) => alter_table(tx, at)?,
        other => return Err(SqlError::unsupported(statement_kind(other))),
    })
}

fn alter_table(tx: &mut Tx, at: &sqlparser::ast::AlterTable) -> Result<Output, SqlError> {
    use sqlparser::ast::{AlterTableOperation, TableConstraint};
    let name = object_name(&at.name)?;
    for op in &at.operations {
        match op {
            AlterTableOperation::AddConstraint { constraint: TableConstraint::PrimaryKey(pk), .. } => {
                let cols: Vec<String> = pk
                    .columns
                    .iter()
                    .map(|c| c.column.expr.to_string().to_lowercase().trim_matches('"').to_string())
                    .collect();
                dml::add_primary_key(tx, &name, &cols)?;
            }
            other => return Err(SqlError::unsupported(format!("ALTER TABLE {other}"))),
        }
    }
    Ok(Output::Command("ALTER TABLE".into()))
}

fn create_table(tx: &mut Tx, ct: &sqlparser::ast::CreateTable) -> Result<Output, SqlError> {
    if ct.temporary || ct.or_replace || ct.like.is_some() || ct.partition_by.is_some() {
        return Err(SqlError::unsupported("CREATE TEMPORARY / OR REPLACE / LIKE / PARTITION BY"));
    }
    let def = table_def(ct)?;
    if tx.find_table(&def.name)?.is_some() {
        if ct.if_not_exists {
            return Ok(Output::Command("CREATE TABLE".into()));
        }
        return Err(SqlError::new(sqlstate::DUPLICATE_TABLE, format!("relation \"{}\" already exists", def.name)));
    }
    tx.create_table(def)?;
    Ok(Output::Command("CREATE TABLE".into()))
}

/// The statement's leading words, to name it in `0A000`.
fn statement_kind(s: &Statement) -> String {
    let text = s.to_string();
    let words: Vec<&str> = text.split_whitespace().take(2).collect();
    format!("statement {}", words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The retry rule as a table: a transaction begun within the bound after a retryable abort
    /// inherits the first attempt's start; later, or with no abort before it, it starts anew.
    #[test]
    fn a_retry_inherits_the_first_attempt_only_within_the_bound() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let aborted = |first: u64, at: u64| Some(Aborted { first_began: t0 + ms(first), at: t0 + ms(at) });
        let bound = RETRY_INHERIT_WITHIN.as_millis() as u64;
        let cases = [
            (None, 50, 50),
            (aborted(0, 40), 50, 0),
            (aborted(0, 40), 40 + bound, 0),
            (aborted(0, 40), 41 + bound, 41 + bound),
            (aborted(10, 2_000), 2_001, 10),
        ];
        for (before, now, began) in cases {
            assert_eq!(first_attempt_began(before, t0 + ms(now)), t0 + ms(began), "{before:?} at {now}");
        }
    }
}
