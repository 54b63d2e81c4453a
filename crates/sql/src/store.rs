//! Reading and writing SQL rows and catalog entries inside one client transaction, over the
//! built-in table (`catalog::ROWS_TABLE`). Range reads go page by page
//! (`Transaction::scan_page`), so a table of any size is read in bounded replies.

use crate::catalog::{self, TableDef, CATALOG_TID, COUNTER_TID, ROWS_TABLE, TABLE_ID_FIRST};
use crate::error::SqlError;
use crate::types::Datum;
use litmus_client::{PageSizer, Paging, Transaction};
use litmus_core::{Row, Value};
use litmus_protocol::op::{Op, BATCH_LEN_MAX};
use litmus_protocol::page::Page;
use std::sync::atomic::{AtomicBool, Ordering};

/// The most rows one statement may touch or return (a bound on the memory a statement holds).
pub const STATEMENT_ROWS_MAX: usize = 2_000_000;

/// The most bytes of rows one batch of writes carries: well under the servers' frame limit
/// (`max_frame_bytes`, 1 MiB by default).
pub const BATCH_BYTES_MAX: usize = 256 * 1024;

/// A range of a table's encoded primary keys: `lo` inclusive (`None`: from the first key),
/// `hi` exclusive (`None`: to the last).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyRange {
    pub lo: Option<Vec<u8>>,
    pub hi: Option<Vec<u8>>,
}

impl KeyRange {
    /// Every key that starts with the key values `prefix`: `[enc(p), enc(p) ++ 0xFF)` (the
    /// encoding's tags are all below 0xFF).
    pub fn prefix(prefix: &[Datum]) -> Result<KeyRange, SqlError> {
        if prefix.is_empty() {
            return Ok(KeyRange::default());
        }
        let lo = catalog::encode_key(prefix)?;
        let mut hi = lo.clone();
        hi.push(0xFF);
        Ok(KeyRange { lo: Some(lo), hi: Some(hi) })
    }
}

/// What a statement reads and writes through: a transaction of the cluster's engine. An
/// interactive transaction ([`Transaction`]) on the engines that take them; on the engines
/// that run one-round transactions only, an optimistic transaction committed as one
/// minitransaction ([`crate::one_round::OneRoundStore`]).
pub trait RowStore {
    fn read(&mut self, table: &str, key: &[Value]) -> Result<Option<Row>, litmus_core::Error>;
    /// A read under the lock a write of the row takes (a plain read where there is none).
    fn read_for_update(&mut self, table: &str, key: &[Value]) -> Result<Option<Row>, litmus_core::Error>;
    /// Inserts or replaces a whole row.
    fn write(&mut self, table: &str, row: Vec<Value>) -> Result<(), litmus_core::Error>;
    /// Inserts a row; an existing key is `DuplicateKey`.
    fn insert(&mut self, table: &str, row: Vec<Value>) -> Result<(), litmus_core::Error>;
    fn delete(&mut self, table: &str, key: &[Value]) -> Result<(), litmus_core::Error>;
    /// Point writes of one table, applied in order.
    fn write_many(&mut self, table: &str, writes: Vec<Op>) -> Result<(), litmus_core::Error>;
    /// One page of the range `start..end` after `after` (see [`Transaction::scan_page`]).
    fn scan_page(
        &mut self,
        table: &str,
        start: &[Value],
        end: Option<&[Value]>,
        after: Option<&litmus_core::Key>,
        paging: Paging,
    ) -> Result<Page, litmus_core::Error>;
    /// Whether a `CALL` may run here as one one-round transaction of its own
    /// ([`crate::call_one_round`]): an optimistic transaction of one statement, outside
    /// `BEGIN`, on an engine that runs one-round transactions only.
    fn takes_one_round_calls(&self) -> bool {
        false
    }
    /// Runs the planned `CALL` (the arguments of `call_one_round::CALL_PROCEDURE`) as the
    /// transaction; what the transaction read to plan it is then settled.
    fn one_round_call(&mut self, args: Vec<Value>) -> Result<(), litmus_core::Error> {
        let _ = args;
        Err(litmus_core::Error::Internal("a one-round CALL outside a one-round transaction".into()))
    }
}

impl RowStore for Transaction<'_> {
    fn read(&mut self, table: &str, key: &[Value]) -> Result<Option<Row>, litmus_core::Error> {
        Transaction::read(self, table, key)
    }
    fn read_for_update(&mut self, table: &str, key: &[Value]) -> Result<Option<Row>, litmus_core::Error> {
        Transaction::read_for_update(self, table, key)
    }
    fn write(&mut self, table: &str, row: Vec<Value>) -> Result<(), litmus_core::Error> {
        Transaction::write(self, table, row)
    }
    fn insert(&mut self, table: &str, row: Vec<Value>) -> Result<(), litmus_core::Error> {
        Transaction::insert(self, table, row)
    }
    fn delete(&mut self, table: &str, key: &[Value]) -> Result<(), litmus_core::Error> {
        Transaction::delete(self, table, key)
    }
    fn write_many(&mut self, table: &str, writes: Vec<Op>) -> Result<(), litmus_core::Error> {
        Transaction::write_many(self, table, writes)
    }
    fn scan_page(
        &mut self,
        table: &str,
        start: &[Value],
        end: Option<&[Value]>,
        after: Option<&litmus_core::Key>,
        paging: Paging,
    ) -> Result<Page, litmus_core::Error> {
        Transaction::scan_page(self, table, start, end, after, paging)
    }
}

/// The transaction a statement runs in.
pub struct Tx<'t> {
    pub txn: &'t mut dyn RowStore,
    pub paging: Paging,
    /// Set by a cancel request (the client's `CancelRequest`, psql's Ctrl-C): the statement
    /// stops before its next operation with `57014`.
    pub cancel: Option<&'t AtomicBool>,
}

fn bytes_of(v: &Value, what: &str) -> Result<Vec<u8>, SqlError> {
    match v {
        Value::Bytes(b) => Ok(b.to_vec()),
        other => Err(SqlError::internal(format!("{what}: expected bytes, found {other:?}"))),
    }
}

/// A stored row's payload: its last value (after the key columns).
fn stored(row: &Row, what: &str) -> Result<Vec<u8>, SqlError> {
    row.last().map_or_else(|| Err(SqlError::internal(format!("{what}: empty row"))), |v| bytes_of(v, what))
}

impl Tx<'_> {
    /// The transaction, unless the statement was cancelled (`57014`).
    fn live(&mut self) -> Result<&mut dyn RowStore, SqlError> {
        if self.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(SqlError::new(
                crate::error::sqlstate::QUERY_CANCELED,
                "canceling statement due to user request".into(),
            ));
        }
        Ok(self.txn)
    }

    /// The payload of the system row (catalog, counter, procedure) at `key` of the rows table.
    pub fn read_system(&mut self, key: &[Value]) -> Result<Option<Vec<u8>>, SqlError> {
        match self.live()?.read(ROWS_TABLE, key)? {
            Some(row) => Ok(Some(stored(&row, "a system row")?)),
            None => Ok(None),
        }
    }

    /// Writes a system row (its key values and payload).
    pub fn write_system(&mut self, row: Vec<Value>) -> Result<(), SqlError> {
        self.live()?.write(ROWS_TABLE, row)?;
        Ok(())
    }

    pub fn delete_system(&mut self, key: &[Value]) -> Result<(), SqlError> {
        self.live()?.delete(ROWS_TABLE, key)?;
        Ok(())
    }

    /// The definition of table `name`, or `42P01`.
    pub fn table(&mut self, name: &str) -> Result<TableDef, SqlError> {
        self.find_table(name)?.ok_or_else(|| SqlError::no_table(name))
    }

    pub fn find_table(&mut self, name: &str) -> Result<Option<TableDef>, SqlError> {
        let key = [Value::Int(CATALOG_TID), Value::Bytes(name.as_bytes().into())];
        match self.live()?.read(ROWS_TABLE, &key)? {
            Some(row) => Ok(Some(catalog::decode_def(&stored(&row, "catalog")?)?)),
            None => Ok(None),
        }
    }

    /// Records a new table under a fresh id (the counter row is read and written in this
    /// transaction, so two concurrent creates conflict rather than share an id).
    pub fn create_table(&mut self, mut def: TableDef) -> Result<TableDef, SqlError> {
        let counter = [Value::Int(COUNTER_TID), Value::Bytes(b"table_id".as_slice().into())];
        let next = match self.live()?.read(ROWS_TABLE, &counter)? {
            Some(row) => {
                let b = stored(&row, "table id counter")?;
                i64::from_le_bytes(b.try_into().map_err(|_| SqlError::internal("table id counter: bad width"))?)
            }
            None => TABLE_ID_FIRST,
        };
        def.id = next;
        let bump =
            vec![counter[0].clone(), counter[1].clone(), Value::Bytes((next + 1).to_le_bytes().as_slice().into())];
        self.live()?.write(ROWS_TABLE, bump)?;
        let entry = vec![
            Value::Int(CATALOG_TID),
            Value::Bytes(def.name.as_bytes().into()),
            Value::Bytes(catalog::encode_def(&def)?.into()),
        ];
        self.live()?.insert(ROWS_TABLE, entry)?;
        Ok(def)
    }

    /// Rewrites a table's definition (same id).
    pub fn replace_table(&mut self, def: &TableDef) -> Result<(), SqlError> {
        let entry = vec![
            Value::Int(CATALOG_TID),
            Value::Bytes(def.name.as_bytes().into()),
            Value::Bytes(catalog::encode_def(def)?.into()),
        ];
        self.live()?.write(ROWS_TABLE, entry)?;
        Ok(())
    }

    /// Deletes a table's catalog entry.
    pub fn drop_table(&mut self, def: &TableDef) -> Result<(), SqlError> {
        self.live()?.delete(ROWS_TABLE, &[Value::Int(CATALOG_TID), Value::Bytes(def.name.as_bytes().into())])?;
        Ok(())
    }

    /// The row with primary key `key` (encoded), if any.
    pub fn get(&mut self, def: &TableDef, key: &[u8]) -> Result<Option<Vec<Datum>>, SqlError> {
        match self.live()?.read(def.physical_table(), &def.stored_key(key))? {
            Some(row) => Ok(Some(catalog::decode_row(&stored(&row, &def.name)?, def)?)),
            None => Ok(None),
        }
    }

    /// The row with primary key `key` (encoded), if any, read under the lock a write of it
    /// takes (`Transaction::read_for_update`; a plain read on engines without locks).
    pub fn get_for_update(&mut self, def: &TableDef, key: &[u8]) -> Result<Option<Vec<Datum>>, SqlError> {
        match self.live()?.read_for_update(def.physical_table(), &def.stored_key(key))? {
            Some(row) => Ok(Some(catalog::decode_row(&stored(&row, &def.name)?, def)?)),
            None => Ok(None),
        }
    }

    /// Calls `each` with every row whose encoded key starts with the key values `prefix`
    /// (every row for an empty prefix), in key order, page by page; `each` returns false to
    /// stop.
    pub fn scan(
        &mut self,
        def: &TableDef,
        prefix: &[Datum],
        each: &mut dyn FnMut(Vec<u8>, Vec<Datum>) -> Result<bool, SqlError>,
    ) -> Result<(), SqlError> {
        self.scan_range(def, &KeyRange::prefix(prefix)?, each)
    }

    /// Calls `each` with every row whose encoded key is in `range`, in key order, page by
    /// page; `each` returns false to stop.
    pub fn scan_range(
        &mut self,
        def: &TableDef,
        range: &KeyRange,
        each: &mut dyn FnMut(Vec<u8>, Vec<Datum>) -> Result<bool, SqlError>,
    ) -> Result<(), SqlError> {
        let start = match &range.lo {
            Some(lo) => def.stored_bound(lo),
            None => vec![Value::Int(def.id)],
        };
        let end = match (&range.lo, &range.hi) {
            (_, Some(hi)) => Some(def.stored_bound(hi)),
            // From a key to the table's end: every key below the next table id.
            (Some(_), None) => Some(vec![Value::Int(def.id + 1)]),
            (None, None) => None,
        };
        let table = def.physical_table();
        let pk = catalog::key_columns(table) - 1;
        let mut after = None;
        let mut sizer = PageSizer::new(self.paging);
        loop {
            let page = self.live()?.scan_page(table, &start, end.as_deref(), after.as_ref(), sizer.next())?;
            sizer.saw(&page);
            for row in &page.rows {
                let key = bytes_of(&row[pk], &def.name)?;
                if !each(key, catalog::decode_row(&stored(row, &def.name)?, def)?)? {
                    return Ok(());
                }
            }
            match page.resume {
                Some(k) => after = Some(k),
                None => return Ok(()),
            }
        }
    }

    /// Writes a full row (insert or replace).
    pub fn put(&mut self, def: &TableDef, row: &[Datum]) -> Result<(), SqlError> {
        let stored = self.stored_row(def, row)?;
        self.live()?.write(def.physical_table(), stored)?;
        Ok(())
    }

    /// Inserts a row; an existing key is `23505`.
    pub fn insert(&mut self, def: &TableDef, row: &[Datum]) -> Result<(), SqlError> {
        let stored = self.stored_row(def, row)?;
        match self.live()?.insert(def.physical_table(), stored) {
            Err(litmus_core::Error::Invalid(litmus_core::InvalidInput::DuplicateKey(_))) => Err(duplicate(def, row)),
            other => other.map_err(SqlError::from),
        }
    }

    pub fn delete(&mut self, def: &TableDef, key: &[u8]) -> Result<(), SqlError> {
        self.live()?.delete(def.physical_table(), &def.stored_key(key))?;
        Ok(())
    }

    /// Writes many rows in batches (`Op::WriteMany` where the engine takes it): inserts
    /// (`23505` on an existing key) or, with `replace`, writes.
    pub fn insert_many(&mut self, def: &TableDef, rows: &[Vec<Datum>], replace: bool) -> Result<(), SqlError> {
        let mut ops = Vec::with_capacity(rows.len());
        for r in rows {
            let row: Row = self.stored_row(def, r)?.into();
            let table = def.physical_table().into();
            ops.push(if replace { Op::Write { table, row } } else { Op::Insert { table, row } });
        }
        self.write_batches(def.physical_table(), ops, |e| match e {
            litmus_core::Error::Invalid(litmus_core::InvalidInput::DuplicateKey(_)) => SqlError::new(
                crate::error::sqlstate::UNIQUE_VIOLATION,
                format!("duplicate key value violates unique constraint \"{}_pkey\"", def.name),
            ),
            other => other.into(),
        })
    }

    /// Deletes many rows by encoded key, in batches.
    pub fn delete_many(&mut self, def: &TableDef, keys: &[Vec<u8>]) -> Result<(), SqlError> {
        let ops =
            keys.iter().map(|k| Op::Delete { table: def.physical_table().into(), key: def.stored_key(k) }).collect();
        self.write_batches(def.physical_table(), ops, SqlError::from)
    }

    fn write_batches(
        &mut self,
        table: &str,
        ops: Vec<Op>,
        error: impl Fn(litmus_core::Error) -> SqlError,
    ) -> Result<(), SqlError> {
        let mut batch = vec![];
        let mut bytes = 0;
        for op in ops {
            let size = match &op {
                Op::Write { row, .. } | Op::Insert { row, .. } => litmus_protocol::page::row_bytes(row),
                _ => 64,
            };
            if !batch.is_empty() && (batch.len() >= BATCH_LEN_MAX || bytes + size > BATCH_BYTES_MAX) {
                self.live()?.write_many(table, std::mem::take(&mut batch)).map_err(&error)?;
                bytes = 0;
            }
            bytes += size;
            batch.push(op);
        }
        if !batch.is_empty() {
            self.live()?.write_many(table, batch).map_err(&error)?;
        }
        Ok(())
    }

    fn stored_row(&self, def: &TableDef, row: &[Datum]) -> Result<Vec<Value>, SqlError> {
        let mut stored = def.stored_key(&def.key_of(row)?);
        stored.push(Value::Bytes(catalog::encode_row(row)?.into()));
        Ok(stored)
    }
}

/// `23505` naming the key, as PostgreSQL does.
pub fn duplicate(def: &TableDef, row: &[Datum]) -> SqlError {
    let cols: Vec<&str> = def.primary_key.iter().map(|&i| def.columns[i].name.as_str()).collect();
    let vals: Vec<String> = def.primary_key.iter().map(|&i| row[i].to_text()).collect();
    SqlError::new(
        crate::error::sqlstate::UNIQUE_VIOLATION,
        format!(
            "duplicate key value violates unique constraint \"{}_pkey\": Key ({})=({}) already exists",
            def.name,
            cols.join(", "),
            vals.join(", ")
        ),
    )
}
