//! SQL tables over one built-in table, and the catalog as rows of it.
//!
//! The partitions run a catalog compiled into the binary (`litmus_core::Catalog`), validated
//! at every operation and shared by every node. SQL tables are created at run time, so they do
//! not enter it: every SQL table lives in the one built-in table [`ROWS_TABLE`]
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
//! point access goes to one. A range over a primary-key prefix `p` is the byte range
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
/// [`ROWS_TABLE`]'s key columns: a row's first two values (`tid`, `pk`).
pub const ROWS_KEY_COLUMNS: usize = 2;
/// The hidden key column of a table declared without a primary key.
pub const ROWID: &str = "rowid";

/// The schema of [`ROWS_TABLE`], to add to a server's catalog.
pub fn rows_table() -> TableSchema {
    TableSchema::new(
        ROWS_TABLE,
        vec![
            Column::new("tid", ColumnType::Int),
            Column::new("pk", ColumnType::Bytes),
            Column::new("row", ColumnType::Bytes),
        ],
        &["tid", "pk"],
        Partitioning::KeyPrefix { prefix_len: 2 },
    )
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
    postcard::from_bytes(bytes).map_err(|e| SqlError::internal(format!("catalog row: {e}")))
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
    Ok(TableDef { id: -1, name, columns, primary_key, checks })
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
