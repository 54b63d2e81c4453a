//! SQL on the engines that run one-round transactions only (`granola`, `granola-locking`,
//! `sinfonia`): optimistic transactions committed as one minitransaction.
//!
//! Those engines take no interactive transaction: every transaction is declared whole and
//! decided in one round (Granola §2, Sinfonia §3). A SQL statement is not declared whole — it
//! reads to learn what to write — so it runs as Sinfonia's applications run theirs:
//!
//! 1. **Reads** go out as one-round read transactions ([`Client::read_row`],
//!    [`Client::read_page`]), each consistent in itself. The session keeps, for every read,
//!    a compare item: the row's digest, or a page's rows (keys and digests) over the part of
//!    the range it covered.
//! 2. **Writes** stay in the session, and later reads of the same rows see them.
//! 3. **Commit** is one minitransaction ([`litmus_protocol::minitxn`]): each participant
//!    checks its compare items against its current rows and votes; the writes apply only when
//!    every one held. The transaction is therefore serializable at its commit point, whatever
//!    level the session asked for. A compare that failed is a retryable abort (`40001`): a
//!    statement outside `BEGIN` runs again by itself; a client retries its transaction.
//!
//! A transaction that made one read and no writes commits without another round (that read
//! was one transaction). One that failed with an error that is not an abort is checked before
//! the error is reported: when what it read had already changed, the error may come from rows
//! that never stood together, so the client gets `40001` instead.
//!
//! Every compare and write item travels in the one commit request, so a transaction may read
//! and write at most [`ONE_ROUND_BYTES_MAX`] bytes of them (`54000` beyond): a `COPY` of
//! 100,000 rows is refused on these engines, where the interactive engines batch it.

use crate::catalog::key_columns;
use crate::store::RowStore;
use litmus_client::{Client, Paging};
use litmus_core::{AbortReason, Error, InvalidInput, Key, Row, Value};
use litmus_protocol::minitxn::{digest, Compare, Minitransaction};
use litmus_protocol::op::Op;
use litmus_protocol::page::{row_bytes, Page};
use std::collections::BTreeMap;

/// Most bytes of compare and write items one transaction carries to its commit: under the
/// servers' default frame limit (`max_frame_bytes`, 1 MiB) with room for the envelope.
pub const ONE_ROUND_BYTES_MAX: usize = 768 * 1024;

/// An optimistic transaction's state between statements: what it read and what it wrote.
#[derive(Debug, Default)]
pub struct OneRoundTxn {
    compares: Vec<Compare>,
    /// The digest each point read found (`None`: no row), by (table, key).
    read: BTreeMap<(String, Key), Option<u64>>,
    /// Own writes by (table, key): the row, or `None` for a delete. The last write wins.
    writes: BTreeMap<(String, Key), Option<Row>>,
    /// Reads sent to the cluster.
    reads_sent: usize,
    /// Estimated bytes of compare and write items.
    bytes: usize,
    /// Begun by `BEGIN` (not a statement's own).
    pub explicit: bool,
}

/// An optimistic transaction at work: its state and the session's client.
pub struct OneRoundStore<'a> {
    pub client: &'a mut Client,
    pub txn: &'a mut OneRoundTxn,
}

fn key_of(table: &str, row: &[Value]) -> Result<Key, Error> {
    let Some(key) = row.get(..key_columns(table)) else {
        return Err(Error::Internal(format!("a row of {} values has no key", row.len())));
    };
    Ok(Key::encode(key)?)
}

fn oversized(size: usize) -> Error {
    InvalidInput::Oversized {
        what: "bytes of rows one transaction reads and writes on an engine that runs one-round transactions only"
            .into(),
        size,
        limit: ONE_ROUND_BYTES_MAX,
    }
    .into()
}

/// A retryable abort: what the transaction read changed under it.
fn read_changed(table: &str) -> Error {
    Error::Abort(AbortReason::Other(format!("a row of {table} this transaction read changed while it ran")))
}

impl OneRoundTxn {
    fn grow(&mut self, by: usize) -> Result<(), Error> {
        self.bytes += by;
        if self.bytes > ONE_ROUND_BYTES_MAX {
            return Err(oversized(self.bytes));
        }
        Ok(())
    }

    /// The commit's minitransaction: every compare item, and every own write.
    fn minitransaction(&self) -> Result<Minitransaction, Error> {
        let mut writes = Vec::with_capacity(self.writes.len());
        for ((table, key), row) in &self.writes {
            writes.push(match row {
                Some(row) => Op::Write { table: table.clone(), row: row.clone() },
                None => Op::Delete { table: table.clone(), key: Key::decode(key.as_bytes())? },
            });
        }
        Ok(Minitransaction { compares: self.compares.clone(), writes })
    }

    /// Commits: the minitransaction, unless the transaction made no writes and at most one
    /// read (that read was a transaction by itself).
    pub fn commit(self, client: &mut Client) -> Result<(), Error> {
        if self.writes.is_empty() && self.reads_sent <= 1 {
            return Ok(());
        }
        client.minitransaction(self.minitransaction()?)
    }

    /// Whether everything the transaction read is still current (a compare-only
    /// minitransaction; true when it read nothing).
    pub fn still_current(&self, client: &mut Client) -> Result<bool, Error> {
        if self.compares.is_empty() {
            return Ok(true);
        }
        let check = Minitransaction { compares: self.compares.clone(), writes: vec![] };
        match client.minitransaction(check) {
            Ok(()) => Ok(true),
            Err(Error::Abort(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl OneRoundStore<'_> {
    fn point_read(&mut self, table: &str, key: &[Value]) -> Result<Option<Row>, Error> {
        let k = Key::encode(key)?;
        let id = (table.to_string(), k);
        if let Some(own) = self.txn.writes.get(&id) {
            return Ok(own.clone());
        }
        let row = self.client.read_row(table, key)?;
        self.txn.reads_sent += 1;
        let d = row.as_ref().map(digest);
        match self.txn.read.get(&id) {
            // Read before and found otherwise: this transaction cannot commit.
            Some(before) if *before != d => return Err(read_changed(table)),
            Some(_) => {}
            None => {
                self.txn.grow(16 + id.1.as_bytes().len())?;
                self.txn.compares.push(Compare::Row { table: table.into(), key: key.to_vec(), digest: d });
                self.txn.read.insert(id, d);
            }
        }
        Ok(row)
    }

    fn put(&mut self, table: &str, key: Key, row: Option<Row>) -> Result<(), Error> {
        let size = row.as_ref().map_or(16 + key.as_bytes().len(), row_bytes);
        self.txn.grow(size)?;
        self.txn.writes.insert((table.to_string(), key), row);
        Ok(())
    }
}

impl RowStore for OneRoundStore<'_> {
    fn takes_one_round_calls(&self) -> bool {
        !self.txn.explicit && self.txn.writes.is_empty()
    }

    fn one_round_call(&mut self, args: Vec<Value>) -> Result<(), Error> {
        self.client.call(crate::call_one_round::CALL_PROCEDURE, args)?;
        // The call's catalog fragments checked what was read to plan it.
        self.txn.compares.clear();
        self.txn.read.clear();
        self.txn.reads_sent = 0;
        self.txn.bytes = 0;
        Ok(())
    }

    fn read(&mut self, table: &str, key: &[Value]) -> Result<Option<Row>, Error> {
        self.point_read(table, key)
    }

    fn read_for_update(&mut self, table: &str, key: &[Value]) -> Result<Option<Row>, Error> {
        // The commit's compare of this read does what a lock would: the write applies only if
        // the row is still what was read.
        self.point_read(table, key)
    }

    fn write(&mut self, table: &str, row: Vec<Value>) -> Result<(), Error> {
        let key = key_of(table, &row)?;
        self.put(table, key, Some(row.into()))
    }

    fn insert(&mut self, table: &str, row: Vec<Value>) -> Result<(), Error> {
        let key = key_of(table, &row)?;
        if self.point_read(table, &row[..key_columns(table)])?.is_some() {
            return Err(InvalidInput::DuplicateKey(format!("{table} {key:?}")).into());
        }
        self.put(table, key, Some(row.into()))
    }

    fn delete(&mut self, table: &str, key: &[Value]) -> Result<(), Error> {
        self.put(table, Key::encode(key)?, None)
    }

    fn write_many(&mut self, table: &str, writes: Vec<Op>) -> Result<(), Error> {
        for w in writes {
            match w {
                Op::Write { row, .. } => self.write(table, row.to_vec())?,
                Op::Insert { row, .. } => self.insert(table, row.to_vec())?,
                Op::Delete { key, .. } => self.delete(table, &key)?,
                other => return Err(Error::Internal(format!("a batched write {other:?}"))),
            }
        }
        Ok(())
    }

    fn scan_page(
        &mut self,
        table: &str,
        start: &[Value],
        end: Option<&[Value]>,
        after: Option<&Key>,
        paging: Paging,
    ) -> Result<Page, Error> {
        let page = self.client.read_page(table, start, end, after, paging)?;
        self.txn.reads_sent += 1;
        let mut found = Vec::with_capacity(page.rows.len());
        for row in &page.rows {
            found.push((key_of(table, row)?, digest(row)));
        }
        self.txn.grow(32 + found.iter().map(|(k, _)| 8 + k.as_bytes().len()).sum::<usize>())?;
        self.txn.compares.push(Compare::Range {
            table: table.into(),
            start: start.to_vec(),
            end: end.map(<[Value]>::to_vec),
            after: after.cloned(),
            through: page.resume.clone(),
            rows: found.clone(),
        });
        // The page as this transaction sees it: its own writes over the part of the range
        // the page covered.
        let lo = Key::encode(start)?;
        let hi = match end {
            Some(e) => Some(Key::encode(e)?),
            None => lo.prefix_end(),
        };
        let covered = |k: &Key| {
            *k >= lo
                && after.is_none_or(|a| k > a)
                && hi.as_ref().is_none_or(|h| k < h)
                && page.resume.as_ref().is_none_or(|r| k <= r)
        };
        let mut merged: BTreeMap<Key, Row> = found.into_iter().map(|(k, _)| k).zip(page.rows.iter().cloned()).collect();
        for ((t, k), own) in self.txn.writes.range((table.to_string(), lo.clone())..) {
            if t != table || hi.as_ref().is_some_and(|h| k >= h) {
                break;
            }
            if !covered(k) {
                continue;
            }
            match own {
                Some(row) => merged.insert(k.clone(), row.clone()),
                None => merged.remove(k),
            };
        }
        Ok(Page { rows: merged.into_values().collect(), resume: page.resume })
    }
}
