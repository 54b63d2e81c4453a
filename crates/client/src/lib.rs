//! # litmus-client: the Rust client library
//!
//! A [`Client`] talks to one coordinator over a [`Transport`] — in-process channels to an
//! embedded cluster ([`litmus_runtime::embedded::EmbeddedTransport`]) or a TCP connection to a
//! `litmus server` ([`litmus_runtime::tcp::TcpTransport`]). It offers:
//!
//! * [`Client::call`] — run a registered stored procedure as one transaction;
//! * [`Client::begin`] — an interactive [`Transaction`] with read / scan / write / insert /
//!   delete / formula update, then commit or rollback.
//! * [`Client::read_page`] — one page of a range read as its own one-round read transaction,
//!   for engines that run nothing else (`granola`, `granola-locking`, `sinfonia`).
//!
//! A range read of any size is read in pages ([`litmus_protocol::page`]) of at most
//! [`Paging::rows_max`] rows and [`Paging::bytes_max`] bytes each ([`Client::set_paging`];
//! defaults [`PAGE_ROWS_DEFAULT`], [`PAGE_BYTES_DEFAULT`]): [`Transaction::scan`] pages through
//! its range, [`Transaction::scan_page`] and [`Client::read_page`] hand out one page and the key
//! to resume after. A reply over the server's frame limit comes back as a typed `Oversized`
//! error ([`litmus_runtime::tcp::REPLY_OVERSIZED`]) on a connection that stays usable; scans and
//! `read_many` then ask again for half as much.
//!
//! Every failure is a typed [`litmus_core::Error`]: [`Error::is_retryable`] tells whether to try
//! again. Bad input (unknown table or procedure, wrong types, oversized values) is rejected by the
//! server before anything is applied.
//!
//! ```no_run
//! # fn demo(mut client: litmus_client::Client) -> Result<(), litmus_core::Error> {
//! use litmus_core::{Formula, Value};
//! let out = client.call("kv_get", vec![Value::Int(7)])?;
//! let mut txn = client.begin()?;
//! txn.update("kv_counter", &[Value::Int(7)], &[("n", Formula::Add(Value::Int(1)))])?;
//! txn.commit()?;
//! # Ok(()) }
//! ```

use litmus_core::{Error, Formula, InvalidInput, Isolation, Key, Row, TxnId, Value};
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::minitxn::Minitransaction;
use litmus_protocol::op::{Op, OpResult};
use std::time::Duration;

pub use litmus_protocol::page::{Page, PAGE_BYTES_DEFAULT, PAGE_ROWS_DEFAULT};

pub use litmus_runtime::tcp::Credentials;
pub use litmus_runtime::tls::ClientTls;
pub use litmus_runtime::transport::Transport;

/// How much one page of a range read may hold (see [`litmus_protocol::page`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Paging {
    /// Most rows of one page.
    pub rows_max: u32,
    /// Most bytes of rows of one page (estimated as their encoded size).
    pub bytes_max: u32,
}

impl Default for Paging {
    fn default() -> Self {
        Paging { rows_max: PAGE_ROWS_DEFAULT, bytes_max: PAGE_BYTES_DEFAULT }
    }
}

impl Paging {
    /// Half the page, at least one row and one byte: what to ask for after a reply was too large.
    pub fn halved(self) -> Paging {
        Paging { rows_max: (self.rows_max / 2).max(1), bytes_max: (self.bytes_max / 2).max(1) }
    }
}

/// Rows of the first page of a range read, before any row's size is known.
pub const PAGE_ROWS_FIRST: u32 = 16;

/// The size of each next page of one range read: [`PAGE_ROWS_FIRST`] rows first, then as many
/// rows of the largest row seen so far as fit in `bytes_max` (at most `rows_max`). The server
/// cuts a page at `bytes_max`, but each partition answers the coordinator up to the page's
/// rows: sizing the rows by the rows seen keeps every partition's answer near `bytes_max` too,
/// under the frame limit, whatever the table's row size.
#[derive(Clone, Copy, Debug)]
pub struct PageSizer {
    paging: Paging,
    rows: u32,
}

impl PageSizer {
    pub fn new(paging: Paging) -> Self {
        PageSizer { paging, rows: PAGE_ROWS_FIRST.min(paging.rows_max).max(1) }
    }

    /// The paging of the next page.
    pub fn next(&self) -> Paging {
        Paging { rows_max: self.rows, bytes_max: self.paging.bytes_max }
    }

    /// Learns the row size from a page just read.
    pub fn saw(&mut self, page: &Page) {
        let Some(widest) = page.rows.iter().map(litmus_protocol::page::row_bytes).max() else { return };
        // Half the page per partition: a partition answers up to the page's rows, the page is cut
        // at its bytes.
        let fit = (self.paging.bytes_max as usize / 2 / widest.max(1)).max(1);
        let grown = (self.rows as usize).max(fit.min(self.rows as usize * 4));
        self.rows = grown.min(fit).clamp(1, self.paging.rows_max as usize) as u32;
    }
}

/// Whether `e` is the server's refusal of a reply over its frame limit.
pub fn is_reply_oversized(e: &Error) -> bool {
    matches!(e, Error::Invalid(InvalidInput::Oversized { what, .. }) if what == litmus_runtime::tcp::REPLY_OVERSIZED)
}

/// Runs `read` with `paging`, halving it after each reply refused as too large (until one row).
fn halving<T>(mut paging: Paging, mut read: impl FnMut(Paging) -> Result<T, Error>) -> Result<T, Error> {
    loop {
        match read(paging) {
            Err(e) if is_reply_oversized(&e) && paging.rows_max > 1 => paging = paging.halved(),
            other => return other,
        }
    }
}

/// A client session with one coordinator.
pub struct Client {
    transport: Box<dyn Transport>,
    paging: Paging,
    /// The engine, named by whoever made the client, for a transport that does not learn it.
    engine: Option<String>,
}

impl Client {
    pub fn new(transport: Box<dyn Transport>) -> Self {
        Client { transport, paging: Paging::default(), engine: None }
    }

    /// Names the engine the cluster runs, for a transport that does not learn it (the embedded
    /// one): what [`Client::server_engine`] answers then. A transport that learns it (TCP's
    /// hello) is believed over this.
    pub fn with_engine(mut self, engine: &str) -> Self {
        self.engine = Some(engine.into());
        self
    }

    /// The page size range reads ask for.
    pub fn paging(&self) -> Paging {
        self.paging
    }

    /// Sets the page size range reads ask for (a test sets it small to page small data).
    pub fn set_paging(&mut self, paging: Paging) {
        self.paging = Paging { rows_max: paging.rows_max.max(1), bytes_max: paging.bytes_max.max(1) };
    }

    /// One page of the range `start..end` of `table` (as in [`Transaction::scan`]) after
    /// `after`, read as its own one-round read transaction: one read-only fragment per
    /// partition of the range. For engines that take one-round transactions whole; the
    /// others refuse it (`Unsupported`): read in a [`Transaction`] there. Each page is
    /// consistent in itself; successive pages are read committed.
    pub fn read_page(
        &mut self,
        table: &str,
        start: &[Value],
        end: Option<&[Value]>,
        after: Option<&Key>,
        paging: Paging,
    ) -> Result<Page, Error> {
        halving(paging, |paging| {
            let op = scan_page_op(table, start, end, after, paging);
            match self.request(RequestBody::Read { op })? {
                ResponseBody::Op(OpResult::Page(page)) => Ok(page),
                other => Err(unexpected(other)),
            }
        })
    }

    /// The row of `table` at `key`, read as its own one-round read transaction (as
    /// [`Client::read_page`] reads a page): for engines that take one-round transactions whole.
    pub fn read_row(&mut self, table: &str, key: &[Value]) -> Result<Option<Row>, Error> {
        let op = Op::Read { table: table.into(), key: key.to_vec() };
        match self.request(RequestBody::Read { op })? {
            ResponseBody::Op(OpResult::Row(row)) => Ok(row),
            other => Err(unexpected(other)),
        }
    }

    /// Runs a minitransaction (Sinfonia §3, `litmus_protocol::minitxn`): its writes apply if
    /// every compare holds, else nothing does and the answer is a retryable abort. For engines
    /// that take one-round transactions whole; the others refuse it (`Unsupported`).
    pub fn minitransaction(&mut self, mini: Minitransaction) -> Result<(), Error> {
        match self.request(RequestBody::Minitransaction(mini))? {
            ResponseBody::Returned(_) => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Connects to a `litmus server` over TCP.
    pub fn connect(addr: &str) -> Result<Client, Error> {
        Ok(Client::new(Box::new(litmus_runtime::tcp::TcpTransport::connect(addr)?)))
    }

    /// Connects to the first of `addrs` that answers. After a lost connection the client
    /// reconnects on its next request (with backoff, to the same coordinator or the next one);
    /// the request that was in flight fails with `Unavailable { outcome_unknown: true }`.
    pub fn connect_any(addrs: &[String]) -> Result<Client, Error> {
        Client::connect_any_with_token(addrs, None)
    }

    /// [`Client::connect_any`] to a cluster that requires its shared `token` (`token` in the
    /// servers' config); a wrong or missing one is refused with `Invalid(Unauthenticated)`.
    pub fn connect_any_with_token(addrs: &[String], token: Option<&str>) -> Result<Client, Error> {
        let timeout = litmus_protocol::client::REQUEST_TIMEOUT_DEFAULT;
        let transport = litmus_runtime::tcp::TcpTransport::connect_any_with_token(addrs, timeout, token)?;
        Ok(Client::new(Box::new(transport)))
    }

    /// [`Client::connect_any`] with the cluster's token and/or TLS ([`ClientTls`]: the CA
    /// that signed the servers' certificates, and a client certificate for servers that
    /// require one). A refused certificate or token is `Invalid(Unauthenticated)` naming why.
    pub fn connect_any_with(addrs: &[String], auth: &Credentials) -> Result<Client, Error> {
        Client::connect_any_with_timeout(addrs, auth, litmus_protocol::client::REQUEST_TIMEOUT_DEFAULT)
    }

    /// [`Client::connect_any_with`], waiting up to `timeout` for each answer (then
    /// `Unavailable { outcome_unknown: true }`) instead of the default.
    pub fn connect_any_with_timeout(addrs: &[String], auth: &Credentials, timeout: Duration) -> Result<Client, Error> {
        let transport = litmus_runtime::tcp::TcpTransport::connect_any_with(addrs, timeout, auth)?;
        Ok(Client::new(Box::new(transport)))
    }

    fn request(&mut self, body: RequestBody) -> Result<ResponseBody, Error> {
        self.transport.request(body)
    }

    /// The engine the server runs, when the transport knows it (TCP connections do).
    pub fn server_engine(&self) -> Option<&str> {
        self.transport.server_engine().or(self.engine.as_deref())
    }

    /// The node this session's coordinator runs on and the cluster's layout, when the
    /// transport knows them (TCP connections do).
    pub fn server_layout(&self) -> Option<(litmus_core::NodeId, litmus_runtime::Topology)> {
        self.transport.server_layout()
    }

    /// Whether the transport runs requests one at a time in a deterministic order (the
    /// simulator's): parallel loaders should use one session.
    pub fn serialises(&self) -> bool {
        self.transport.serialises()
    }

    /// Runs a stored procedure as one transaction and returns its values.
    pub fn call(&mut self, procedure: &str, args: Vec<Value>) -> Result<Vec<Value>, Error> {
        self.call_retry(procedure, args, Duration::ZERO)
    }

    /// Runs a stored procedure again after a retryable failure; `retrying_for` is the time
    /// since the first attempt began. The server gives the retry the priority of that first
    /// attempt (engines that resolve conflicts by age, i.e. wait-die, let the oldest win), so a
    /// transaction that keeps losing to newer ones does not starve.
    pub fn call_retry(
        &mut self,
        procedure: &str,
        args: Vec<Value>,
        retrying_for: Duration,
    ) -> Result<Vec<Value>, Error> {
        match self.request(RequestBody::Call { procedure: procedure.into(), args, retrying_for })? {
            ResponseBody::Returned(v) => Ok(v),
            other => Err(unexpected(other)),
        }
    }

    /// Starts an interactive transaction at the serializable level.
    pub fn begin(&mut self) -> Result<Transaction<'_>, Error> {
        self.begin_with(Isolation::Serializable)
    }

    /// Starts an interactive transaction at an isolation level (engines without a choice of
    /// level ignore it; see the engine's documentation for what it guarantees).
    pub fn begin_with(&mut self, isolation: Isolation) -> Result<Transaction<'_>, Error> {
        self.begin_retry(isolation, Duration::ZERO)
    }

    /// Starts an interactive transaction again after a retryable failure; `retrying_for` is
    /// the time since the first attempt began. As for [`Client::call_retry`], the server gives
    /// the retry the priority of that first attempt.
    pub fn begin_retry(&mut self, isolation: Isolation, retrying_for: Duration) -> Result<Transaction<'_>, Error> {
        match self.request(RequestBody::Begin { isolation, retrying_for })? {
            ResponseBody::Begun(txn) => Ok(Transaction { client: self, txn, done: false }),
            other => Err(unexpected(other)),
        }
    }

    /// Takes up again a transaction this client began and then [`Transaction::detach`]ed (a
    /// session that spans requests, such as a SQL connection's open transaction). The caller
    /// must name a transaction of this client that is still open.
    pub fn resume(&mut self, txn: TxnId) -> Transaction<'_> {
        Transaction { client: self, txn, done: false }
    }
}

fn scan_page_op(table: &str, start: &[Value], end: Option<&[Value]>, after: Option<&Key>, paging: Paging) -> Op {
    Op::ScanPage {
        table: table.into(),
        start: start.to_vec(),
        end: end.map(<[Value]>::to_vec),
        after: after.cloned(),
        rows_max: paging.rows_max,
        bytes_max: paging.bytes_max,
    }
}

fn unexpected(body: ResponseBody) -> Error {
    Error::Internal(format!("unexpected response {body:?}"))
}

/// An interactive transaction. Dropping it without commit rolls it back.
pub struct Transaction<'a> {
    client: &'a mut Client,
    txn: TxnId,
    done: bool,
}

impl Transaction<'_> {
    pub fn id(&self) -> TxnId {
        self.txn
    }

    /// Lets go of the transaction without ending it: it stays open on the server, and
    /// [`Client::resume`] takes it up again. Returns its id.
    pub fn detach(mut self) -> TxnId {
        self.done = true;
        self.txn
    }

    /// Whether the server already ended this transaction (an abort or a lost connection on an
    /// operation): it must not be resumed.
    pub fn is_ended(&self) -> bool {
        self.done
    }

    fn op(&mut self, op: Op) -> Result<OpResult, Error> {
        match self.client.request(RequestBody::Op { txn: self.txn, op }) {
            Ok(ResponseBody::Op(r)) => Ok(r),
            Ok(other) => Err(unexpected(other)),
            Err(e) => {
                if matches!(e, Error::Abort(_) | Error::Unavailable { .. }) {
                    self.done = true; // the server already aborted it (or it is unreachable)
                }
                Err(e)
            }
        }
    }

    pub fn read(&mut self, table: &str, key: &[Value]) -> Result<Option<Row>, Error> {
        match self.op(Op::Read { table: table.into(), key: key.to_vec() })? {
            OpResult::Row(r) => Ok(r),
            other => Err(Error::Internal(format!("read returned {other:?}"))),
        }
    }

    /// Point read of a row the transaction means to write (`SELECT ... FOR UPDATE`, the read of
    /// an `UPDATE`): on an engine that declares `Capabilities::reads_for_update` (the locking
    /// ones) it takes the write lock at once, so two such transactions queue on the row instead
    /// of both read-locking it and deadlocking when each wants to write; elsewhere it is a
    /// plain [`Transaction::read`].
    pub fn read_for_update(&mut self, table: &str, key: &[Value]) -> Result<Option<Row>, Error> {
        match self.op(Op::ReadForUpdate { table: table.into(), key: key.to_vec() })? {
            OpResult::Row(r) => Ok(r),
            other => Err(Error::Internal(format!("read for update returned {other:?}"))),
        }
    }

    /// Point reads of many keys of one table, in the order of `keys` (`None`: no such row). On
    /// an engine that takes `Op::ReadMany` whole this is one round trip; an engine that does
    /// not refuses it (`InvalidInput::Unsupported`, nothing read) and the keys are read one by
    /// one instead. More keys than one operation may name (`op::BATCH_LEN_MAX`) go as several.
    pub fn read_many(&mut self, table: &str, keys: &[Vec<Value>]) -> Result<Vec<Option<Row>>, Error> {
        if keys.is_empty() {
            return Ok(vec![]);
        }
        let mut rows = Vec::with_capacity(keys.len());
        // More keys than one operation may name go as several; a reply over the server's frame
        // limit, as two of half as many.
        let mut chunk = keys.len().min(litmus_protocol::op::BATCH_LEN_MAX);
        let mut at = 0;
        while at < keys.len() {
            let these = &keys[at..(at + chunk).min(keys.len())];
            match self.op(Op::ReadMany { table: table.into(), keys: these.to_vec() }) {
                Ok(OpResult::Many(found)) => rows.extend(found),
                Ok(other) => return Err(Error::Internal(format!("read_many returned {other:?}"))),
                Err(Error::Invalid(InvalidInput::Unsupported { .. })) if rows.is_empty() => {
                    return keys.iter().map(|k| self.read(table, k)).collect();
                }
                Err(e) if is_reply_oversized(&e) && chunk > 1 => {
                    chunk /= 2;
                    continue;
                }
                Err(e) => return Err(e),
            }
            at += these.len();
        }
        Ok(rows)
    }

    /// Point read of the named columns: the row at full width, every other column NULL (see
    /// `Op::ReadColumns`).
    pub fn read_columns(&mut self, table: &str, key: &[Value], columns: &[&str]) -> Result<Option<Row>, Error> {
        let columns = columns.iter().map(|c| c.to_string()).collect();
        match self.op(Op::ReadColumns { table: table.into(), key: key.to_vec(), columns })? {
            OpResult::Row(r) => Ok(r),
            other => Err(Error::Internal(format!("read returned {other:?}"))),
        }
    }

    /// Range read: keys `>= start` and `< end` (key prefixes; `end: None` — every key starting
    /// with `start`), at most `limit` rows in key order, read in pages of the client's
    /// [`Paging`] so that no reply outgrows the server's frame limit.
    pub fn scan(&mut self, table: &str, start: &[Value], end: Option<&[Value]>, limit: u32) -> Result<Vec<Row>, Error> {
        let mut rows: Vec<Row> = Vec::new();
        let mut after: Option<Key> = None;
        let mut sizer = PageSizer::new(self.client.paging);
        while rows.len() < limit as usize {
            let mut paging = sizer.next();
            paging.rows_max = paging.rows_max.min(limit - rows.len() as u32);
            let page = self.scan_page(table, start, end, after.as_ref(), paging)?;
            sizer.saw(&page);
            rows.extend(page.rows);
            match page.resume {
                Some(key) => after = Some(key),
                None => break,
            }
        }
        Ok(rows)
    }

    /// One page of the range `start..end` (as in [`Transaction::scan`]) after `after` (a
    /// previous page's [`Page::resume`]; `None` from the start) of at most `paging` (halved
    /// after a reply over the frame limit; [`PageSizer`] sizes a sequence of pages).
    pub fn scan_page(
        &mut self,
        table: &str,
        start: &[Value],
        end: Option<&[Value]>,
        after: Option<&Key>,
        paging: Paging,
    ) -> Result<Page, Error> {
        halving(paging, |paging| self.scan_page_once(table, start, end, after, paging))
    }

    /// One page of exactly `paging` (not adapted: a reply over the frame limit is an error).
    pub fn scan_page_once(
        &mut self,
        table: &str,
        start: &[Value],
        end: Option<&[Value]>,
        after: Option<&Key>,
        paging: Paging,
    ) -> Result<Page, Error> {
        match self.op(scan_page_op(table, start, end, after, paging))? {
            OpResult::Page(page) => Ok(page),
            other => Err(Error::Internal(format!("scan page returned {other:?}"))),
        }
    }

    /// Point writes of one table (`Op::Write`, `Op::Insert`, `Op::Delete`, `Op::Update`),
    /// applied in order. On an engine that takes `Op::WriteMany` whole they travel as one
    /// request per partition (each partition's share applied whole or not at all); an engine
    /// that does not refuses it (`Unsupported`, nothing applied) and they go one by one. At
    /// most `op::BATCH_LEN_MAX` writes, and few enough bytes for the server's frame limit (the
    /// caller sizes the batch).
    pub fn write_many(&mut self, table: &str, writes: Vec<Op>) -> Result<(), Error> {
        if writes.len() > 1 {
            match self.op(Op::WriteMany { table: table.into(), writes: writes.clone() }) {
                Err(Error::Invalid(InvalidInput::Unsupported { .. })) => {}
                other => return other.map(drop),
            }
        }
        for w in writes {
            self.op(w)?;
        }
        Ok(())
    }

    pub fn write(&mut self, table: &str, row: impl Into<Row>) -> Result<(), Error> {
        self.op(Op::Write { table: table.into(), row: row.into() }).map(drop)
    }

    pub fn insert(&mut self, table: &str, row: impl Into<Row>) -> Result<(), Error> {
        self.op(Op::Insert { table: table.into(), row: row.into() }).map(drop)
    }

    pub fn delete(&mut self, table: &str, key: &[Value]) -> Result<(), Error> {
        self.op(Op::Delete { table: table.into(), key: key.to_vec() }).map(drop)
    }

    pub fn update(&mut self, table: &str, key: &[Value], updates: &[(&str, Formula)]) -> Result<(), Error> {
        let updates = updates.iter().map(|(c, f)| (c.to_string(), f.clone())).collect();
        self.op(Op::Update { table: table.into(), key: key.to_vec(), updates }).map(drop)
    }

    pub fn commit(mut self) -> Result<(), Error> {
        self.done = true;
        match self.client.request(RequestBody::Commit { txn: self.txn })? {
            ResponseBody::Committed => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    pub fn rollback(mut self) -> Result<(), Error> {
        self.done = true;
        match self.client.request(RequestBody::Rollback { txn: self.txn })? {
            ResponseBody::RolledBack => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.client.request(RequestBody::Rollback { txn: self.txn });
        }
    }
}
