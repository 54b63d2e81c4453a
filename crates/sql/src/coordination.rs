//! On `coordfree` (read atomic, RAMP-Fast), invariants are kept by refusing what would need
//! coordination to keep them, not by isolation (VLDB'15 Theorem 1). The engine refuses stored
//! procedures registered as needing it; a SQL statement is judged here, before it runs, by the
//! same analysis (`litmus_analyze`, Table 2): its footprint (`litmus_analyze::sql::
//! statement_footprint`: what it inserts, updates how, deletes) against the invariants of the
//! tables it names as the catalog holds them — the primary key (or the hidden row id, a unique
//! token), `NOT NULL`, `CHECK`s. A pair the analysis does not find I-confluent refuses the
//! statement with `0A000`, naming the invariant, the operation and the rule; nothing is written.
//!
//! So on `coordfree` an `INSERT` with a chosen primary key is refused (uniqueness of a chosen
//! value, Claim 3: two replicas could both insert the key), and so is an `UPDATE` that lowers a
//! column a `CHECK (c >= k)` bounds from below (Claim 13); an insert into a table without a
//! primary key (row ids are unique tokens, Claim 4) or an increment under that bound (Claim 11)
//! runs. A statement's parameters are of unknown sign: `c = c + $1` may lower `c`.
//!
//! The judgement is per statement, with the statement as the whole transaction; the rules that
//! look at the rest of a transaction (a roll-up kept in the same transaction, Claim 10) never
//! apply to the invariants SQL tables declare.

use crate::catalog::{TableDef, ROWID};
use crate::error::{sqlstate, SqlError};
use crate::store::Tx;
use crate::types::SqlType;
use sqlparser::ast::{FromTable, Statement, TableFactor, TableObject};

/// Refuses `stmt` (`0A000`) if keeping an invariant of the tables it writes would need
/// coordination; reads and DDL always pass.
pub fn check(tx: &mut Tx, stmt: &Statement) -> Result<(), SqlError> {
    let names = written_tables(stmt)?;
    if names.is_empty() {
        return Ok(());
    }
    let mut ddl = String::new();
    for name in &names {
        ddl.push_str(&create_table(&tx.table(name)?));
        ddl.push_str(";\n");
    }
    // Tables a statement also reads (INSERT ... SELECT) are only read: their invariants are
    // not touched, and only the written tables are declared.
    // An invariant the analysis cannot read (a CHECK beyond Table 2's forms) cannot be shown
    // I-confluent: refused, as §5.3 flags every pair it does not recognise.
    let schema = litmus_analyze::sql::sql_schema(&ddl).map_err(|e| {
        SqlError::unsupported(format!(
            "on engine coordfree, writing a table whose invariants the analyzer cannot read ({e})"
        ))
    })?;
    let footprint = match litmus_analyze::sql::statement_footprint(&schema, "statement", stmt) {
        Ok(f) => f,
        // A table the statement only reads is not declared: judge its writes alone.
        Err(litmus_analyze::sql::SqlScriptError::UnknownTable { .. }) => return writes_only(&schema, stmt),
        Err(e) => return Err(SqlError::internal(format!("the statement as the analyzer reads it: {e}"))),
    };
    judge(&schema, &footprint)
}

fn judge(schema: &litmus_analyze::Schema, footprint: &litmus_analyze::Footprint) -> Result<(), SqlError> {
    for inv in &schema.invariants {
        for clause in &inv.clauses {
            for access in &footprint.accesses {
                let Some(j) = litmus_analyze::judge(clause, access, footprint) else { continue };
                if j.verdict.needs_coordination() {
                    return Err(SqlError::new(
                        sqlstate::FEATURE_NOT_SUPPORTED,
                        format!(
                            "not supported on engine coordfree: {access} needs coordination to keep invariant \"{}\" ({}: {})",
                            inv.name, j.rule, j.why
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// An `INSERT ... SELECT` from a table it does not write: its insert judged alone.
fn writes_only(schema: &litmus_analyze::Schema, stmt: &Statement) -> Result<(), SqlError> {
    let Statement::Insert(ins) = stmt else {
        return Err(SqlError::internal("a write of an undeclared table"));
    };
    let mut plain = ins.clone();
    plain.source = None;
    let footprint = litmus_analyze::sql::statement_footprint(schema, "statement", &Statement::Insert(plain))
        .map_err(|e| SqlError::internal(format!("the statement as the analyzer reads it: {e}")))?;
    // Every column of an INSERT ... SELECT is chosen by the query.
    let footprint = litmus_analyze::Footprint {
        accesses: footprint
            .accesses
            .into_iter()
            .map(|a| match a {
                litmus_analyze::Access::Insert { table, upsert, columns } => litmus_analyze::Access::Insert {
                    table,
                    upsert,
                    columns: columns
                        .into_iter()
                        .map(|(c, s)| {
                            let chosen = !matches!(s, litmus_analyze::Source::Token);
                            (c, if chosen { litmus_analyze::Source::Chosen } else { s })
                        })
                        .collect(),
                },
                other => other,
            })
            .collect(),
        ..footprint
    };
    judge(schema, &footprint)
}

/// The tables `stmt` writes.
fn written_tables(stmt: &Statement) -> Result<Vec<String>, SqlError> {
    let name = |n: &sqlparser::ast::ObjectName| crate::catalog::object_name(n);
    Ok(match stmt {
        Statement::Insert(ins) => match &ins.table {
            TableObject::TableName(n) => vec![name(n)?],
            _ => vec![],
        },
        Statement::Update(up) => match &up.table.relation {
            TableFactor::Table { name: n, .. } => vec![name(n)?],
            _ => vec![],
        },
        Statement::Delete(del) => {
            let (FromTable::WithFromKeyword(ts) | FromTable::WithoutKeyword(ts)) = &del.from;
            let mut out = vec![];
            for t in ts {
                if let TableFactor::Table { name: n, .. } = &t.relation {
                    out.push(name(n)?);
                }
            }
            out
        }
        _ => vec![],
    })
}

/// A table's definition as `CREATE TABLE` text the analyzer reads: a table keyed by the hidden
/// row id is declared without a key (the analyzer gives it the same unique-token key).
fn create_table(def: &TableDef) -> String {
    let mut parts = vec![];
    for c in def.columns.iter().filter(|c| !c.hidden) {
        let ty = match &c.ty {
            SqlType::Int2 | SqlType::Int4 | SqlType::Int8 => "BIGINT".to_string(),
            SqlType::Numeric(_) => "NUMERIC".into(),
            SqlType::Text | SqlType::Varchar(_) | SqlType::Char(_) => "TEXT".into(),
            SqlType::Bool => "BOOLEAN".into(),
            SqlType::Bytea => "BYTEA".into(),
            SqlType::Timestamp => "TIMESTAMP".into(),
        };
        let not_null = if c.not_null { " NOT NULL" } else { "" };
        parts.push(format!("\"{}\" {ty}{not_null}", c.name));
    }
    if !def.has_rowid() {
        let key: Vec<String> = def.primary_key.iter().map(|&i| format!("\"{}\"", def.columns[i].name)).collect();
        parts.push(format!("PRIMARY KEY ({})", key.join(", ")));
    }
    for check in &def.checks {
        parts.push(format!("CHECK ({check})"));
    }
    debug_assert!(def.columns.iter().all(|c| !c.hidden || c.name == ROWID));
    format!("CREATE TABLE \"{}\" ({})", def.name, parts.join(", "))
}
