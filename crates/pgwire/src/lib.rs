//! # litmus-pgwire: the PostgreSQL wire protocol in front of the cluster
//!
//! Each accepted connection gets its own [`litmus_sql::Session`] over its own
//! [`litmus_client::Client`] (made by the [`Connector`] the server was given: a TCP client to
//! the node's own coordinator in `litmus server`, an in-process one in `litmus demo`). The
//! `pgwire` crate speaks the protocol: startup (SCRAM-SHA-256 for the configured SQL users, TLS
//! with the node's certificate: [`auth`]), the simple query protocol and the extended one
//! (parse, bind, describe, execute: prepared statements with typed parameters, results in text
//! or binary format).
//!
//! The session is synchronous (the client blocks on each request), so every statement runs on
//! tokio's blocking pool; the protocol tasks never block. A connection that goes away with a
//! transaction open rolls it back.
//!
//! `COPY ... FROM STDIN` (text format) is collected until the client's CopyDone and then
//! inserted as one statement.
//!
//! Cancel requests (psql's Ctrl-C): each connection is handed a key at startup
//! (`BackendKeyData`: a process id and a random secret); a `CancelRequest` presenting it
//! raises the connection's session canceller, and its statement stops before its next read or
//! write with `57014` (one waiting for a lock notices when the wait ends).
//!
//! Not built: `COPY ... TO`.

pub mod auth;
mod wire;

use async_trait::async_trait;
use bytes::BytesMut;
use futures_util::stream;
use futures_util::{Sink, SinkExt};
use litmus_client::Client;
use litmus_sql::copy::CopySpec;
use litmus_sql::{Column, Output, Session, SqlError, SqlType};
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::sasl::scram::ScramAuth;
use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::CopyResponse;
use pgwire::api::results::{
    DescribePortalResponse, DescribeStatementResponse, FieldFormat, FieldInfo, QueryResponse, Response, Tag,
};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::PidSecretKeyGenerator;
use pgwire::api::{ClientInfo, PgWireServerHandlers, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::data::DataRow;
use pgwire::messages::startup::SecretKey;
use pgwire::messages::PgWireBackendMessage;
use sqlparser::ast::Statement;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Makes the cluster client a new connection's session runs over.
pub type Connector = Arc<dyn Fn() -> Result<Client, litmus_core::Error> + Send + Sync>;

/// A parsed statement of the extended protocol, with the parameter types described for it.
#[derive(Debug)]
pub struct Prepared {
    stmt: Option<Statement>,
    described: Mutex<Option<Vec<SqlType>>>,
}

/// What one connection holds: its session, made on first use, a `COPY` in progress, and what
/// cancels its statements.
struct Conn {
    session: Arc<Mutex<Option<Session>>>,
    copy: Mutex<Option<(CopySpec, Vec<u8>)>>,
    connect: Connector,
    seed: u64,
    parser: Arc<Parser>,
    /// The session's canceller ([`Session::canceller`]), made before the session: the cancel
    /// key handed out at startup names it.
    cancel: Arc<AtomicBool>,
    keys: Arc<CancelKeys>,
    /// The cancel key this connection was given, forgotten when it closes.
    issued: Mutex<Option<CancelKey>>,
}

/// A connection's cancel key: its process id and its secret's bytes.
type CancelKey = (i32, Vec<u8>);

/// The cancel keys of the open connections (PostgreSQL's `BackendKeyData`): a process id and a
/// secret per connection, which a `CancelRequest` on a new connection must present. At most one
/// per open connection (bounded by the server's connection limit).
#[derive(Default)]
struct CancelKeys {
    keys: Mutex<HashMap<CancelKey, Arc<AtomicBool>>>,
    next_pid: AtomicI32,
}

impl CancelKeys {
    /// A fresh key for a connection whose statements `flag` cancels. The secret is 64 bits of
    /// the standard library's randomly keyed hasher (seeded from the OS) folded to 32, as the
    /// protocol's version 3.0 key is an `int32`.
    fn issue(&self, flag: Arc<AtomicBool>) -> (i32, SecretKey) {
        use std::hash::{BuildHasher, Hasher};
        let pid = self.next_pid.fetch_add(1, Ordering::Relaxed).wrapping_add(1) & i32::MAX;
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_i32(pid);
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
        let bits = h.finish();
        let secret = SecretKey::I32((bits ^ (bits >> 32)) as i32);
        if let Ok(mut keys) = self.keys.lock() {
            keys.insert((pid, secret.to_bytes().to_vec()), flag);
        }
        (pid, secret)
    }

    fn forget(&self, key: &CancelKey) {
        if let Ok(mut keys) = self.keys.lock() {
            keys.remove(key);
        }
    }
}

#[async_trait]
impl CancelHandler for CancelKeys {
    /// Cancels the statement of the connection the key names; a wrong key does nothing (and,
    /// as in PostgreSQL, the requester is told nothing either way).
    async fn on_cancel_request(&self, request: CancelRequest) {
        let flag =
            self.keys.lock().ok().and_then(|k| k.get(&(request.pid, request.secret_key.to_bytes().to_vec())).cloned());
        if let Some(flag) = flag {
            flag.store(true, Ordering::Relaxed);
        }
    }
}

impl PidSecretKeyGenerator for Conn {
    fn generate(&self, _client: &dyn ClientInfo) -> (i32, SecretKey) {
        let (pid, secret) = self.keys.issue(self.cancel.clone());
        if let Ok(mut issued) = self.issued.lock() {
            *issued = Some((pid, secret.to_bytes().to_vec()));
        }
        (pid, secret)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(key) = self.issued.lock().ok().and_then(|mut k| k.take()) {
            self.keys.forget(&key);
        }
        // The session's drop rolls back an open transaction: a blocking request, so off the
        // protocol's threads when there are any.
        let session = self.session.lock().map(|mut s| s.take()).unwrap_or(None);
        if let (Some(s), Ok(rt)) = (session, tokio::runtime::Handle::try_current()) {
            rt.spawn_blocking(move || drop(s));
        }
    }
}

fn user_error(e: SqlError) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(e)))
}

fn error_info(e: SqlError) -> ErrorInfo {
    ErrorInfo::new("ERROR".into(), e.code.into(), e.message)
}

impl Conn {
    /// Runs `f` with the session on the blocking pool.
    async fn with_session<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Session) -> Result<T, SqlError> + Send + 'static,
    ) -> Result<T, SqlError> {
        joined(self.spawn_session(f).await)
    }

    /// Starts `f` with the session on the blocking pool.
    fn spawn_session<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Session) -> Result<T, SqlError> + Send + 'static,
    ) -> tokio::task::JoinHandle<Result<T, SqlError>> {
        let (slot, connect, seed) = (self.session.clone(), self.connect.clone(), self.seed);
        let cancel = self.cancel.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = slot.lock().map_err(|_| SqlError::internal("session lock poisoned"))?;
            if guard.is_none() {
                let client = connect().map_err(SqlError::from)?;
                *guard = Some(Session::new(client, seed).with_canceller(cancel));
            }
            f(guard.as_mut().expect("made above"))
        })
    }

    /// Runs one statement, a query's rows streamed to the client as they are read
    /// ([`Session::execute_streaming`]): the statement goes on on the blocking pool while the
    /// rows it has read so far are sent, at most [`ROWS_IN_FLIGHT`] ahead of the client. An
    /// error after the first row ends the result with that error, as PostgreSQL's does.
    async fn execute_streaming(
        &self,
        stmt: Statement,
        params: Vec<litmus_sql::Datum>,
        types: Vec<SqlType>,
        format: Format,
    ) -> Response {
        let (tx, mut rx) = tokio::sync::mpsc::channel(ROWS_IN_FLIGHT);
        let binary = format.clone();
        let task = self.spawn_session(move |s| {
            let mut sink = ChannelSink { tx, format: binary, columns: Vec::new() };
            s.execute_streaming(&stmt, &params, &types, &mut sink)
        });
        match rx.recv().await {
            Some(Piece::Columns(columns)) => {
                let schema = Arc::new(fields(&columns, &format));
                let rows = stream::unfold((rx, Some(task)), |(mut rx, task)| async move {
                    match rx.recv().await {
                        Some(Piece::Row(row)) => Some((Ok(row), (rx, task))),
                        Some(Piece::Columns(_)) => {
                            Some((Err(user_error(SqlError::internal("columns twice"))), (rx, None)))
                        }
                        None => match joined(task?.await) {
                            Ok(_) => None,
                            Err(e) => Some((Err(user_error(e)), (rx, None))),
                        },
                    }
                });
                Response::Query(QueryResponse::new(schema, rows))
            }
            Some(Piece::Row(_)) => {
                Response::Error(Box::new(error_info(SqlError::internal("a row before its columns"))))
            }
            None => match joined(task.await) {
                Ok(out) => response(out, &format),
                Err(e) => Response::Error(Box::new(error_info(e))),
            },
        }
    }
}

/// Rows of a streamed result read ahead of the client: a bound on what a slow reader makes the
/// server hold.
pub const ROWS_IN_FLIGHT: usize = 1024;

/// What a streamed statement sends the protocol task.
enum Piece {
    Columns(Vec<Column>),
    Row(DataRow),
}

/// Encodes each row of a streamed result and hands it to the protocol task.
struct ChannelSink {
    tx: tokio::sync::mpsc::Sender<Piece>,
    format: Format,
    columns: Vec<Column>,
}

impl litmus_sql::query::RowSink for ChannelSink {
    fn columns(&mut self, columns: &[Column]) -> Result<(), SqlError> {
        self.columns = columns.to_vec();
        self.tx.blocking_send(Piece::Columns(self.columns.clone())).map_err(|_| gone())
    }

    fn row(&mut self, row: Vec<litmus_sql::Datum>) -> Result<(), SqlError> {
        let mut buf = BytesMut::with_capacity(16 * row.len());
        for (i, (d, c)) in row.iter().zip(&self.columns).enumerate() {
            wire::put_field(&mut buf, d, &c.ty, self.format.format_for(i) == FieldFormat::Binary);
        }
        self.tx.blocking_send(Piece::Row(DataRow::new(buf, row.len() as i16))).map_err(|_| gone())
    }
}

/// The client stopped reading a streamed result (it went away): the statement stops.
fn gone() -> SqlError {
    SqlError::new("08006", "the client went away while its result was sent".into())
}

/// A blocking task's result, its panic as an internal error.
fn joined<T>(r: Result<Result<T, SqlError>, tokio::task::JoinError>) -> Result<T, SqlError> {
    r.map_err(|e| SqlError::internal(format!("statement task: {e}")))?
}

fn fields(columns: &[Column], format: &Format) -> Vec<FieldInfo> {
    columns
        .iter()
        .enumerate()
        .map(|(i, c)| FieldInfo::new(c.name.clone(), None, None, wire::pg_type(&c.ty), format.format_for(i)))
        .collect()
}

/// A statement's output as a protocol response.
fn response(out: Output, format: &Format) -> Response {
    match out {
        Output::Rows { columns, rows } => {
            let schema = Arc::new(fields(&columns, format));
            let binary: Vec<bool> = (0..columns.len()).map(|i| format.format_for(i) == FieldFormat::Binary).collect();
            let encoded: Vec<PgWireResult<DataRow>> = rows
                .iter()
                .map(|r| {
                    let mut buf = BytesMut::with_capacity(16 * r.len());
                    for ((d, c), b) in r.iter().zip(&columns).zip(&binary) {
                        wire::put_field(&mut buf, d, &c.ty, *b);
                    }
                    Ok(DataRow::new(buf, r.len() as i16))
                })
                .collect();
            Response::Query(QueryResponse::new(schema, stream::iter(encoded)))
        }
        Output::Command(tag) => Response::Execution(command_tag(&tag)),
        Output::Begin => Response::TransactionStart(Tag::new("BEGIN")),
        Output::End(tag) => Response::TransactionEnd(Tag::new(tag)),
        Output::Streamed(n) => Response::Execution(Tag::new("SELECT").with_rows(n)),
    }
}

/// `INSERT 0 3` → command INSERT, oid 0, 3 rows.
fn command_tag(tag: &str) -> Tag {
    let parts: Vec<&str> = tag.split(' ').collect();
    match parts.as_slice() {
        ["INSERT", oid, n] => Tag::new("INSERT").with_oid(oid.parse().unwrap_or(0)).with_rows(n.parse().unwrap_or(0)),
        [cmd @ ("UPDATE" | "DELETE"), n] => Tag::new(cmd).with_rows(n.parse().unwrap_or(0)),
        _ => Tag::new(tag),
    }
}

#[async_trait]
impl SimpleQueryHandler for Conn {
    async fn do_query<C>(&self, _client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        if let Some(tag) = litmus_sql::maintenance_tag(query) {
            return Ok(vec![Response::Execution(Tag::new(tag))]);
        }
        if let Some(copy) = litmus_sql::copy::parse_copy(query) {
            return Ok(vec![self.start_copy(copy).await]);
        }
        let mut stmts = match litmus_sql::parse(query) {
            Ok(s) => s,
            Err(e) => return Ok(vec![Response::Error(Box::new(error_info(e)))]),
        };
        if let [Statement::Query(_)] = stmts.as_slice() {
            let stmt = stmts.pop().expect("one");
            return Ok(vec![self.execute_streaming(stmt, vec![], vec![], Format::UnifiedText).await]);
        }
        let outs = self
            .with_session(move |s| {
                // Statements run in order; the first failure ends the query string.
                let mut outs = vec![];
                for stmt in &stmts {
                    match s.execute(stmt, &[], &[]) {
                        Ok(o) => outs.push(Ok(o)),
                        Err(e) => {
                            outs.push(Err(e));
                            break;
                        }
                    }
                }
                Ok(outs)
            })
            .await
            .map_err(user_error)?;
        Ok(outs
            .into_iter()
            .map(|o| match o {
                Ok(o) => response(o, &Format::UnifiedText),
                Err(e) => Response::Error(Box::new(error_info(e))),
            })
            .collect())
    }
}

impl Conn {
    /// Answers a `COPY ... FROM STDIN` with CopyIn (the data follows) or its error.
    async fn start_copy(&self, copy: Result<CopySpec, SqlError>) -> Response {
        let spec = match copy {
            Ok(spec) => spec,
            Err(e) => return Response::Error(Box::new(error_info(e))),
        };
        let probe = spec.clone();
        match self.with_session(move |s| s.copy_width(&probe)).await {
            Ok(width) => {
                if let Ok(mut c) = self.copy.lock() {
                    *c = Some((spec, Vec::new()));
                }
                Response::CopyIn(CopyResponse::new(0, width, stream::empty()))
            }
            Err(e) => Response::Error(Box::new(error_info(e))),
        }
    }
}

#[async_trait]
impl CopyHandler for Conn {
    async fn on_copy_data<C>(&self, _client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut guard = self.copy.lock().map_err(|_| user_error(SqlError::internal("copy lock poisoned")))?;
        let Some((_, buf)) = guard.as_mut() else {
            return Err(user_error(SqlError::new("08P01", "COPY data without COPY".into())));
        };
        if buf.len() + copy_data.data.len() > litmus_sql::copy::COPY_BYTES_MAX {
            *guard = None;
            return Err(user_error(SqlError::new(
                "54000",
                format!("COPY data over {} bytes", litmus_sql::copy::COPY_BYTES_MAX),
            )));
        }
        buf.extend_from_slice(&copy_data.data);
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let taken = self.copy.lock().ok().and_then(|mut c| c.take());
        let Some((spec, data)) = taken else {
            return Err(user_error(SqlError::new("08P01", "COPY done without COPY".into())));
        };
        let rows = self.with_session(move |s| s.copy_in(&spec, &data)).await.map_err(user_error)?;
        client.send(PgWireBackendMessage::CommandComplete(Tag::new("COPY").with_rows(rows).into())).await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, _client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Ok(mut c) = self.copy.lock() {
            *c = None;
        }
        user_error(SqlError::new("57014", format!("COPY from stdin failed: {}", fail.message)))
    }
}

/// Parses one statement for the extended protocol.
#[derive(Debug, Default)]
struct Parser;

#[async_trait]
impl QueryParser for Parser {
    type Statement = Arc<Prepared>;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Self::Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let mut stmts = litmus_sql::parse(sql).map_err(user_error)?;
        if stmts.len() > 1 {
            return Err(user_error(SqlError::syntax("cannot insert multiple commands into a prepared statement")));
        }
        Ok(Some(Arc::new(Prepared { stmt: stmts.pop(), described: Mutex::new(None) })))
    }

    fn get_parameter_types(&self, _stmt: &Self::Statement) -> PgWireResult<Vec<Type>> {
        Ok(vec![])
    }

    fn get_result_schema(&self, _stmt: &Self::Statement, _format: Option<&Format>) -> PgWireResult<Vec<FieldInfo>> {
        Ok(vec![])
    }
}

impl Conn {
    /// Parameter types (the client's where it named them, else inferred) and result columns.
    async fn describe(&self, stored: &StoredStatement<Arc<Prepared>>) -> Result<(Vec<SqlType>, Vec<Column>), SqlError> {
        let prepared = stored.statement.clone();
        let Some(stmt) = prepared.stmt.clone() else { return Ok((vec![], vec![])) };
        let (inferred, columns) = self.with_session(move |s| s.describe(&stmt)).await?;
        let n = inferred.len().max(stored.parameter_types.len());
        let types: Vec<SqlType> = (0..n)
            .map(|i| {
                let named = stored.parameter_types.get(i).cloned().flatten().and_then(|t| wire::sql_type(&t));
                named.or_else(|| inferred.get(i).cloned()).unwrap_or(SqlType::Text)
            })
            .collect();
        if let Ok(mut d) = prepared.described.lock() {
            *d = Some(types.clone());
        }
        Ok((types, columns.unwrap_or_default()))
    }
}

#[async_trait]
impl ExtendedQueryHandler for Conn {
    type Statement = Arc<Prepared>;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
    }

    async fn do_describe_statement<C>(
        &self,
        _client: &mut C,
        target: &StoredStatement<Self::Statement>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let (types, columns) = self.describe(target).await.map_err(user_error)?;
        Ok(DescribeStatementResponse::new(
            types.iter().map(wire::pg_type).collect(),
            fields(&columns, &Format::UnifiedText),
        ))
    }

    async fn do_describe_portal<C>(
        &self,
        _client: &mut C,
        portal: &Portal<Self::Statement>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let (_, columns) = self.describe(&portal.statement).await.map_err(user_error)?;
        Ok(DescribePortalResponse::new(fields(&columns, &portal.result_column_format)))
    }

    async fn do_query<C>(
        &self,
        _client: &mut C,
        portal: &Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let Some(stmt) = portal.statement.statement.stmt.clone() else { return Ok(Response::EmptyQuery) };
        let known = portal.statement.statement.described.lock().ok().and_then(|d| d.clone());
        let types = match known {
            Some(t) => t,
            None => match self.describe(&portal.statement).await {
                Ok((t, _)) => t,
                Err(e) => return Ok(Response::Error(Box::new(error_info(e)))),
            },
        };
        let mut params = Vec::with_capacity(portal.parameters.len());
        for (i, p) in portal.parameters.iter().enumerate() {
            let ty = types.get(i).cloned().unwrap_or(SqlType::Text);
            match wire::param(p.as_deref(), portal.parameter_format.is_binary(i), &ty) {
                Ok(d) => params.push(d),
                Err(e) => return Ok(Response::Error(Box::new(error_info(e)))),
            }
        }
        Ok(self.execute_streaming(stmt, params, types, portal.result_column_format.clone()).await)
    }
}

#[async_trait]
impl NoopStartupHandler for Conn {
    fn pid_secret_key_generator(&self) -> &dyn PidSecretKeyGenerator {
        self
    }
}

struct Handlers(Arc<Conn>, Arc<auth::Gate<Conn>>);

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.0.clone()
    }
    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.0.clone()
    }
    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.1.clone()
    }
    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.0.clone()
    }
    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        self.0.keys.clone()
    }
    fn error_handler(&self) -> Arc<impl pgwire::api::ErrorHandler> {
        Arc::new(auth::Errors)
    }
}

/// Serves PostgreSQL clients on `listener` until the task is dropped, admitting them as
/// `security` says.
pub async fn serve(
    listener: tokio::net::TcpListener,
    connect: Connector,
    security: auth::Security,
    scram: Option<ScramAuth>,
) {
    static CONNECTIONS: AtomicU64 = AtomicU64::new(0);
    let parser = Arc::new(Parser);
    let keys = Arc::new(CancelKeys::default());
    let acceptor = security.tls.as_ref().map(|t| t.acceptor.clone());
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "pg accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let seed = CONNECTIONS.fetch_add(1, Ordering::Relaxed);
        let conn = Conn {
            session: Arc::new(Mutex::new(None)),
            copy: Mutex::new(None),
            connect: connect.clone(),
            seed,
            parser: parser.clone(),
            cancel: Arc::new(AtomicBool::new(false)),
            keys: keys.clone(),
            issued: Mutex::new(None),
        };
        let conn = Arc::new(conn);
        let gate = Arc::new(auth::Gate::new(&security, scram.as_ref(), conn.clone()));
        let handlers = Arc::new(Handlers(conn, gate));
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            if let Err(e) = pgwire::tokio::process_socket(socket, acceptor, handlers).await {
                tracing::debug!(%peer, error = %e, "pg connection ended");
            }
        });
    }
}

/// Binds `listen` and serves PostgreSQL clients from a runtime of its own on a new thread;
/// returns the bound address. A `security` the server cannot use (a certificate SCRAM's channel
/// binding cannot read) is an `InvalidInput` error, before anything is bound.
pub fn spawn(listen: &str, connect: Connector, security: auth::Security) -> std::io::Result<std::net::SocketAddr> {
    let scram = security.scram().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let std_listener = std::net::TcpListener::bind(listen)?;
    std_listener.set_nonblocking(true)?;
    let addr = std_listener.local_addr()?;
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().thread_name("pgwire").build()?;
    std::thread::Builder::new().name("pgwire".into()).spawn(move || {
        rt.block_on(async move {
            match tokio::net::TcpListener::from_std(std_listener) {
                Ok(listener) => serve(listener, connect, security, scram).await,
                Err(e) => tracing::error!(error = %e, "pg listener"),
            }
        })
    })?;
    Ok(addr)
}
