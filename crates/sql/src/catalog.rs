//! SQL tables over three built-in tables, and the catalog as rows of the first.
//!
//! The partitions run a catalog compiled into the binary (`litmus_core::Catalog`), validated
//! at every operation and shared by every node. SQL tables are created at run time, so they do
//! not enter it: every SQL table lives in one of three built-in tables, chosen by how it is
//! partitioned ([`TablePartitioning`], `CREATE TABLE ... WITH (...)`):
//!
//! ```text
//!   sql_rows ( tid INT, pk BYTES, row BYTES )  PRIMARY KEY (tid, pk)
//!              │        │         └ postcard(Vec<Datum>): the row, every column in order
//!              │        └ Key::encode(primary-key values): order-preserving
//!              └ 0: the catalog (pk = table name, row = postcard(TableDef))
//!                1: counters (pk = "table_id": the next table id)
//!                ≥ TABLE_ID_FIRST: a user table
//! ```
//!
//! partitioned by a hash of `(tid, pk)`, so a table's rows spread over every partition and a
//! point access goes to one. A table declared `WITH (partition_prefix = n)` lives in
//! [`PREFIX_ROWS_TABLE`] instead, `( tid, shard, pk, row )` keyed by `(tid, shard, pk)` and
//! partitioned by a hash of `(tid, shard)`, where `shard` is the encoding of the key's first `n`
//! values (a prefix of `pk`): rows that share those values live on one partition, as TPC-C
//! keeps a warehouse together, and a read of them touches that partition alone. Ordering by
//! `(shard, pk)` is ordering by `pk`, since `shard` is a prefix of `pk`. A table declared
//! `WITH (replicated = true)` lives in [`REPLICATED_ROWS_TABLE`], laid out as `sql_rows`, with
//! a copy on every partition: reads go to the nearest copy, writes to all. A range over a primary-key prefix `p` is the byte range
//! `[enc(p), enc(p) ++ 0xFF)` of `pk` (the key encoding is order-preserving and its tags are
//! below 0xFF). A table without a primary key gets a hidden `rowid` column as its key, as
//! CockroachDB does.
//!
//! The catalog is rows of the same table, written by ordinary transactions: DDL commits
//! through the same engines, logs and replication as data, is the same on every node, survives
//! restarts, and a statement reads the definition of each table it touches inside its own
//! transaction (so a concurrent `DROP TABLE` conflicts with it as a write would).

use crate::error::{sqlstate, SqlError};
use crate::types::{Datum, SqlType};
use litmus_core::{Column, ColumnType, Key, Partitioning, TableSchema, Value};
use serde::{Deserialize, Serialize};

/// The built-in table that holds every SQL table's rows and the catalog.
pub const ROWS_TABLE: &str = "sql_rows";
/// `tid` of catalog rows.
pub const CATALOG_TID: i64 = 0;
/// `tid` of counter rows.
pub const COUNTER_TID: i64 = 1;
/// The first id a user table gets.
pub const TABLE_ID_FIRST: i64 = 16;
/// The built-in table of the tables partitioned by a prefix of their key.
pub const PREFIX_ROWS_TABLE: &str = "sql_rows_by_prefix";
/// The built-in table of the replicated tables.
pub const REPLICATED_ROWS_TABLE: &str = "sql_rows_replicated";

/// How many key columns a built-in table's rows begin with: `(tid, shard, pk)` for
/// [`PREFIX_ROWS_TABLE`], `(tid, pk)` for the others.
pub fn key_columns(table: &str) -> usize {
    if table == PREFIX_ROWS_TABLE {
        3
    } else {
        2
    }
}
/// The hidden key column of a table declared without a primary key.
pub const ROWID: &str = "rowid";

/// The schemas of the built-in tables SQL keeps its tables in, to add to a server's catalog
/// (in this order, so each keeps its table id).
pub fn rows_tables() -> Vec<TableSchema> {
    let cols = |names: &[&str]| {
        names
            .iter()
            .map(|n| Column::new(n, if *n == "tid" { ColumnType::Int } else { ColumnType::Bytes }))
            .collect::<Vec<_>>()
    };
    vec![
        TableSchema::new(
            ROWS_TABLE,
            cols(&["tid", "pk", "row"]),
            &["tid", "pk"],
            Partitioning::KeyPrefix { prefix_len: 2 },
        ),
        TableSchema::new(
            PREFIX_ROWS_TABLE,
            cols(&["tid", "shard", "pk", "row"]),
            &["tid", "shard", "pk"],
            Partitioning::KeyPrefix { prefix_len: 2 },
        ),
        TableSchema::new(REPLICATED_ROWS_TABLE, cols(&["tid", "pk", "row"]), &["tid", "pk"], Partitioning::Replicated),
    ]
}

/// How a SQL table's rows spread over the partitions: `CREATE TABLE ... WITH
/// (partition_prefix = n)` or `WITH (replicated = true)`; by the whole key otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TablePartitioning {
    /// By a hash of the whole primary key: rows spread evenly, a point access touches one
    /// partition, a range read every partition.
    #[default]
    Key,
    /// By a hash of the first `n` primary-key columns: rows that share them live on one
    /// partition, and a read or write of them touches that partition alone.
    Prefix(u32),
    /// A copy on every partition: a read goes to the nearest copy, a write to every copy.
    Replicated,
}

/// A column of a SQL table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnDef {
    pub name: String,
    pub ty: SqlType,
    pub not_null: bool,
    /// The default expression as SQL text, evaluated at each insert that omits the column.
    pub default: Option<String>,
    /// The hidden row id: not in `SELECT *`, filled in by the server.
    pub hidden: bool,
}

/// A SQL table's definition, as the catalog stores it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDef {
    pub id: i64,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// Indices into `columns`, in key order (the hidden row id when none was declared).
    pub primary_key: Vec<usize>,
    /// `CHECK` constraints as SQL text.
    pub checks: Vec<String>,
    pub partitioning: TablePartitioning,
}

/// A table definition as catalogs written before partitioning options store it.
#[derive(Deserialize)]
struct TableDefUnpartitioned {
    id: i64,
    name: String,
    columns: Vec<ColumnDef>,
    primary_key: Vec<usize>,
    checks: Vec<String>,
}

impl TableDef {
    pub fn column(&self, name: &str) -> Result<usize, SqlError> {
        self.columns.iter().position(|c| c.name == name).ok_or_else(|| SqlError::no_column(name))
    }

    /// The indices of the columns `SELECT *` shows.
    pub fn visible(&self) -> Vec<usize> {
        (0..self.columns.len()).filter(|&i| !self.columns[i].hidden).collect()
    }

    pub fn has_rowid(&self) -> bool {
        self.columns.iter().any(|c| c.hidden)
    }

    /// The built-in table that holds the table's rows.
    pub fn physical_table(&self) -> &'static str {
        match self.partitioning {
            TablePartitioning::Key => ROWS_TABLE,
            TablePartitioning::Prefix(_) => PREFIX_ROWS_TABLE,
            TablePartitioning::Replicated => REPLICATED_ROWS_TABLE,
        }
    }

    /// The key, in [`TableDef::physical_table`], of the row whose encoded primary key is `pk`.
    pub fn stored_key(&self, pk: &[u8]) -> Vec<Value> {
        match self.partitioning {
            TablePartitioning::Prefix(n) => {
                let shard = Key::values_len(pk, n as usize).map_or(pk, |len| &pk[..len]);
                vec![Value::Int(self.id), Value::Bytes(shard.into()), Value::Bytes(pk.into())]
            }
            _ => vec![Value::Int(self.id), Value::Bytes(pk.into())],
        }
    }

    /// A bound of a range of encoded primary keys as a key of [`TableDef::physical_table`]:
    /// `[tid, shard, pk]` when `pk` holds the partitioning prefix whole (so a range within one
    /// shard names one partition), else `[tid, pk]` — which orders against `(shard, pk)` as
    /// `pk` does, `shard` being a prefix of `pk`.
    pub fn stored_bound(&self, pk: &[u8]) -> Vec<Value> {
        match self.partitioning {
            TablePartitioning::Prefix(n) if Key::values_len(pk, n as usize).is_some() => self.stored_key(pk),
            _ => vec![Value::Int(self.id), Value::Bytes(pk.into())],
        }
    }

    /// The encoded primary key of a full row.
    pub fn key_of(&self, row: &[Datum]) -> Result<Vec<u8>, SqlError> {
        let values: Vec<Datum> = self.primary_key.iter().map(|&i| row[i].clone()).collect();
        encode_key(&values)
    }
}

/// The order-preserving encoding of key values.
pub fn encode_key(values: &[Datum]) -> Result<Vec<u8>, SqlError> {
    let vs: Vec<Value> = values.iter().map(Datum::key_value).collect::<Result<_, _>>()?;
    Key::encode(&vs).map(|k| k.as_bytes().to_vec()).map_err(|e| SqlError::new("54000", e.to_string()))
}

/// A row's stored bytes.
pub fn encode_row(row: &[Datum]) -> Result<Vec<u8>, SqlError> {
    postcard::to_allocvec(row).map_err(|e| SqlError::internal(format!("encoding a row: {e}")))
}

/// A row from its stored bytes; a row that does not decode is corruption, reported.
pub fn decode_row(bytes: &[u8], def: &TableDef) -> Result<Vec<Datum>, SqlError> {
    let row: Vec<Datum> =
        postcard::from_bytes(bytes).map_err(|e| SqlError::internal(format!("row of {}: {e}", def.name)))?;
    if row.len() != def.columns.len() {
        return Err(SqlError::internal(format!(
            "row of {} has {} columns, table has {}",
            def.name,
            row.len(),
            def.columns.len()
        )));
    }
    Ok(row)
}

pub fn encode_def(def: &TableDef) -> Result<Vec<u8>, SqlError> {
    postcard::to_allocvec(def).map_err(|e| SqlError::internal(format!("encoding table {}: {e}", def.name)))
}

pub fn decode_def(bytes: &[u8]) -> Result<TableDef, SqlError> {
    match postcard::from_bytes(bytes) {
        Ok(def) => Ok(def),
        // Written before tables had partitioning options: partitioned by the whole key.
        Err(e) => match postcard::from_bytes::<TableDefUnpartitioned>(bytes) {
            Ok(d) => Ok(TableDef {
                id: d.id,
                name: d.name,
                columns: d.columns,
                primary_key: d.primary_key,
                checks: d.checks,
                partitioning: TablePartitioning::Key,
            }),
            Err(_) => Err(SqlError::internal(format!("catalog row: {e}"))),
        },
    }
}

/// The single name of an object (`public.t` and `t` are the same table).
pub fn object_name(name: &sqlparser::ast::ObjectName) -> Result<String, SqlError> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| p.as_ident().map(ident).ok_or_else(|| SqlError::unsupported(format!("object name {name}"))))
        .collect::<Result<_, _>>()?;
    match parts.as_slice() {
        [t] => Ok(t.clone()),
        [schema, t] if schema == "public" => Ok(t.clone()),
        _ => Err(SqlError::unsupported(format!("schemas other than public ({name})"))),
    }
}

/// An identifier as PostgreSQL folds it: lower case unless quoted.
pub fn ident(i: &sqlparser::ast::Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_lowercase()
    }
}

/// A table definition from `CREATE TABLE` (without its id). What the server cannot enforce —
/// `UNIQUE` on other columns than the key, foreign keys — is refused with `0A000`.
pub fn table_def(ct: &sqlparser::ast::CreateTable) -> Result<TableDef, SqlError> {
    use sqlparser::ast::{ColumnOption, TableConstraint};
    let name = object_name(&ct.name)?;
    if ct.columns.is_empty() {
        return Err(SqlError::new(sqlstate::INVALID_TABLE_DEFINITION, format!("table {name} has no columns")));
    }
    if ct.query.is_some() {
        return Err(SqlError::unsupported("CREATE TABLE ... AS"));
    }
    let mut columns = Vec::new();
    let mut key_names: Option<Vec<String>> = None;
    let mut checks = Vec::new();
    for c in &ct.columns {
        let cname = ident(&c.name);
        if columns.iter().any(|d: &ColumnDef| d.name == cname) || cname == ROWID {
            return Err(SqlError::new("42701", format!("column \"{cname}\" specified more than once")));
        }
        let mut col = ColumnDef {
            name: cname.clone(),
            ty: SqlType::from_ast(&c.data_type)?,
            not_null: false,
            default: None,
            hidden: false,
        };
        for o in &c.options {
            match &o.option {
                ColumnOption::Null => {}
                ColumnOption::NotNull => col.not_null = true,
                ColumnOption::Default(e) => col.default = Some(e.to_string()),
                ColumnOption::PrimaryKey(_) => set_key(&mut key_names, vec![cname.clone()], &name)?,
                ColumnOption::Check(ch) => checks.push(ch.expr.to_string()),
                ColumnOption::Unique(_) => {
                    return Err(SqlError::unsupported(format!(
                        "UNIQUE on column {cname} (only the primary key is unique)"
                    )))
                }
                ColumnOption::ForeignKey(_) => {
                    return Err(SqlError::unsupported(format!("FOREIGN KEY on column {cname}")))
                }
                other => return Err(SqlError::unsupported(format!("column option {other}"))),
            }
        }
        columns.push(col);
    }
    for k in &ct.constraints {
        match k {
            TableConstraint::PrimaryKey(pk) => {
                let cols = pk
                    .columns
                    .iter()
                    .map(|c| c.column.expr.to_string().to_lowercase().trim_matches('"').to_string())
                    .collect();
                set_key(&mut key_names, cols, &name)?
            }
            TableConstraint::Check(ch) => checks.push(ch.expr.to_string()),
            TableConstraint::Unique(_) => {
                return Err(SqlError::unsupported("UNIQUE constraints (only the primary key is unique)"))
            }
            TableConstraint::ForeignKey(_) => return Err(SqlError::unsupported("FOREIGN KEY constraints")),
            other => return Err(SqlError::unsupported(format!("table constraint {other}"))),
        }
    }
    let primary_key = match key_names {
        Some(names) => names
            .iter()
            .map(|n| columns.iter().position(|c| &c.name == n).ok_or_else(|| SqlError::no_column(n)))
            .collect::<Result<Vec<_>, _>>()?,
        None => {
            columns.push(ColumnDef {
                name: ROWID.into(),
                ty: SqlType::Int8,
                not_null: true,
                default: None,
                hidden: true,
            });
            vec![columns.len() - 1]
        }
    };
    for &k in &primary_key {
        columns[k].not_null = true;
    }
    let partitioning = partitioning(&ct.table_options, primary_key.len())?;
    Ok(TableDef { id: -1, name, columns, primary_key, checks, partitioning })
}

/// How the table is partitioned, from `CREATE TABLE`'s `WITH (...)` storage parameters:
/// `partition_prefix = n` (1 to the number of key columns) or `replicated = true`.
/// `fillfactor` (pgbench sends it), a page-layout hint of PostgreSQL's heap with no
/// counterpart here, is accepted; any other parameter is `22023`, as PostgreSQL says it.
pub fn partitioning(
    options: &sqlparser::ast::CreateTableOptions,
    key_len: usize,
) -> Result<TablePartitioning, SqlError> {
    use sqlparser::ast::{CreateTableOptions, SqlOption};
    let invalid = |m: String| SqlError::new("22023", m);
    let opts = match options {
        CreateTableOptions::None => return Ok(TablePartitioning::Key),
        CreateTableOptions::With(opts) => opts,
        other => return Err(SqlError::unsupported(format!("table options {other}"))),
    };
    let mut chosen = TablePartitioning::Key;
    for o in opts {
        let SqlOption::KeyValue { key, value } = o else {
            return Err(invalid(format!("invalid storage parameter {o}")));
        };
        let text = value.to_string().trim_matches('\'').to_lowercase();
        let next = match key.value.to_lowercase().as_str() {
            "fillfactor" => continue,
            "partition_prefix" => match text.parse::<usize>() {
                Ok(n) if (1..=key_len).contains(&n) => TablePartitioning::Prefix(n as u32),
                _ => {
                    return Err(invalid(format!(
                        "partition_prefix must be a number of key columns from 1 to {key_len}, not {text}"
                    )))
                }
            },
            "replicated" => match text.as_str() {
                "true" | "on" | "1" => TablePartitioning::Replicated,
                "false" | "off" | "0" => TablePartitioning::Key,
                _ => return Err(invalid(format!("replicated must be true or false, not {text}"))),
            },
            other => return Err(invalid(format!("unrecognized parameter \"{other}\""))),
        };
        if chosen != TablePartitioning::Key && next != chosen {
            return Err(invalid("a table is either replicated or partitioned by a key prefix".into()));
        }
        chosen = next;
    }
    Ok(chosen)
}

fn set_key(key: &mut Option<Vec<String>>, cols: Vec<String>, table: &str) -> Result<(), SqlError> {
    if key.is_some() {
        return Err(SqlError::new(
            sqlstate::INVALID_TABLE_DEFINITION,
            format!("multiple primary keys for table \"{table}\" are not allowed"),
        ));
    }
    *key = Some(cols);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    fn create(sql: &str) -> Result<TableDef, SqlError> {
        let stmts = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        match &stmts[0] {
            sqlparser::ast::Statement::CreateTable(ct) => table_def(ct),
            other => panic!("not a create table: {other}"),
        }
    }

    /// Rows that share a table's partitioning prefix share a partition, and a range within the
    /// prefix is bounded by keys that share it (so the coordinator sends it to that partition
    /// alone); rows that differ in it spread.
    #[test]
    fn rows_sharing_the_partition_prefix_share_a_partition_and_so_does_a_range_within_it() {
        let mut def =
            create("CREATE TABLE s (w INT, d INT, o TEXT, PRIMARY KEY (w, d, o)) WITH (partition_prefix = 2)").unwrap();
        assert_eq!(def.partitioning, TablePartitioning::Prefix(2));
        def.id = 20;
        let schema = &rows_tables()[1];
        assert_eq!(schema.name, PREFIX_ROWS_TABLE);
        let part = |stored: &[Value]| schema.partition_of(stored, 8).unwrap();
        let key = |w: i32, d: i32, o: &str| {
            encode_key(&[Datum::Int(w.into()), Datum::Int(d.into()), Datum::Text(o.into())]).unwrap()
        };
        let home = part(&def.stored_key(&key(1, 2, "a")));
        for o in ["", "b", "zz\0z"] {
            assert_eq!(part(&def.stored_key(&key(1, 2, o))), home, "(1, 2, {o:?})");
        }
        let elsewhere = (0..40).filter(|w| part(&def.stored_key(&key(*w, 2, "a"))) != home).count();
        assert!(elsewhere > 20, "rows of other prefixes spread: {elsewhere} of 40 elsewhere");
        let range = crate::store::KeyRange::prefix(&[Datum::Int(1), Datum::Int(2)]).unwrap();
        let (lo, hi) = (def.stored_bound(range.lo.as_ref().unwrap()), def.stored_bound(range.hi.as_ref().unwrap()));
        assert_eq!(lo[..2], hi[..2], "a range within one prefix is bounded within its shard");
        let wide = crate::store::KeyRange::prefix(&[Datum::Int(1)]).unwrap();
        assert_eq!(def.stored_bound(wide.lo.as_ref().unwrap()).len(), 2, "a shorter prefix spans shards");
    }

    #[test]
    fn storage_parameters_say_how_a_table_is_partitioned_or_get_22023() {
        let p = |with: &str| create(&format!("CREATE TABLE t (a INT, b INT, PRIMARY KEY (a, b)) WITH ({with})"));
        assert_eq!(p("replicated = true").unwrap().partitioning, TablePartitioning::Replicated);
        assert_eq!(p("partition_prefix = 1, fillfactor = 90").unwrap().partitioning, TablePartitioning::Prefix(1));
        assert_eq!(p("fillfactor = 100").unwrap().partitioning, TablePartitioning::Key);
        for bad in ["partition_prefix = 3", "partition_prefix = 0", "replicated = maybe", "colour = 1"] {
            assert_eq!(p(bad).expect_err(bad).code, "22023", "{bad}");
        }
        assert_eq!(p("replicated = true, partition_prefix = 1").expect_err("both").code, "22023");
    }

    /// A catalog row written before tables had partitioning options reads as a table
    /// partitioned by its whole key.
    #[test]
    fn a_definition_stored_without_partitioning_reads_as_partitioned_by_the_key() {
        #[derive(Serialize)]
        struct Old<'a>(i64, &'a str, &'a [ColumnDef], &'a [usize], &'a [String]);
        let def = create("CREATE TABLE o (k INT PRIMARY KEY, v TEXT)").unwrap();
        let old = postcard::to_allocvec(&Old(17, "o", &def.columns, &def.primary_key, &def.checks)).unwrap();
        let read = decode_def(&old).unwrap();
        assert_eq!((read.id, read.name.as_str(), read.partitioning), (17, "o", TablePartitioning::Key));
        assert_eq!(read.columns, def.columns);
    }

    #[test]
    fn a_table_without_a_primary_key_gets_a_hidden_row_id() {
        let t = create("CREATE TABLE h (a INT, b TEXT)").unwrap();
        assert_eq!(t.primary_key, vec![2]);
        assert!(t.columns[2].hidden);
        assert_eq!(t.visible(), vec![0, 1]);
    }

    #[test]
    fn key_columns_are_not_null_and_types_are_kept() {
        let t =
            create("CREATE TABLE a (id BIGINT, x NUMERIC(10,2) NOT NULL DEFAULT 0, s VARCHAR(5), PRIMARY KEY (id))")
                .unwrap();
        assert_eq!(t.primary_key, vec![0]);
        assert!(t.columns[0].not_null);
        assert_eq!(t.columns[1].ty, SqlType::Numeric(Some((10, 2))));
        assert_eq!(t.columns[1].default.as_deref(), Some("0"));
        assert_eq!(t.columns[2].ty, SqlType::Varchar(Some(5)));
    }

    #[test]
    fn what_cannot_be_enforced_is_refused() {
        assert_eq!(create("CREATE TABLE u (a INT UNIQUE)").unwrap_err().code, "0A000");
        assert_eq!(create("CREATE TABLE f (a INT REFERENCES t(a))").unwrap_err().code, "0A000");
        assert_eq!(create("CREATE TABLE p (a INT PRIMARY KEY, b INT, PRIMARY KEY (b))").unwrap_err().code, "42P16");
        assert_eq!(create("CREATE TABLE j (a JSON)").unwrap_err().code, "0A000");
    }

    #[test]
    fn key_encoding_orders_like_the_values() {
        let a = encode_key(&[Datum::Int(-5)]).unwrap();
        let b = encode_key(&[Datum::Int(3)]).unwrap();
        let c = encode_key(&[Datum::Int(3), Datum::Text("x".into())]).unwrap();
        assert!(a < b && b < c);
        let mut upper = b.clone();
        upper.push(0xFF);
        assert!(c < upper);
    }
}
