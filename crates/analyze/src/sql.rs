//! Footprints of SQL transactions: `litmus analyze --schema my.sql --sql txns.sql` judges a
//! script of SQL transactions (a pgbench script, say) against the invariants of the user's
//! `CREATE TABLE`s, and the SQL front end asks the same question of each statement on
//! `coordfree` ([`statement_footprint`]).
//!
//! **The schema** is read as LitmusDB's SQL takes it ([`sql_schema`]): a table without a
//! primary key gets the hidden `rowid` key, a unique id chosen without coordination (a
//! `LITMUS_UNIQUE_ID()` token, Claim 4); `TIMESTAMP` and `BOOLEAN` columns are read as integers
//! and strings (the analysis does not look at their values); storage options (`WITH
//! (fillfactor = n)`) are dropped. Then [`crate::ddl`] reads it: `PRIMARY KEY`, `UNIQUE`,
//! `FOREIGN KEY`, `NOT NULL`, `CHECK` and the `LITMUS_` extensions.
//!
//! **The transactions** ([`parse_script`]): `BEGIN ... COMMIT` (or `END`) blocks, and each
//! statement outside a block on its own, as a pgbench script or psql runs them. A comment line
//! `-- transaction: NAME` names the next one (else `txn1`, `txn2`, ...). pgbench's
//! meta-commands (`\set`, `\sleep`, ...) are skipped, and its variables (`:aid`) are
//! parameters; `\set v random(lo, hi)` tells the sign of `:v` (all of `lo..=hi` positive,
//! negative or zero), so `x = x + :v` is an increment, a decrement, or — signs unknown — both.
//!
//! **Statements to accesses** (a statement reads the tables it names, as the engine does):
//!
//! | statement | access |
//! |---|---|
//! | `SELECT ... FROM t` | read `t` |
//! | `INSERT INTO t [(cols)] VALUES ... / SELECT` | insert `t`: each column chosen, NULL (a `NULL` literal or left out), or a unique token (the hidden `rowid`, a `DEFAULT LITMUS_UNIQUE_ID()` column left out); `ON CONFLICT` makes it an upsert |
//! | `UPDATE t SET c = c + e` (`e + c`, `c - e`) | increment or decrement `t.c` by the sign of `e` (add zero when `e = 0`) |
//! | `UPDATE t SET c = c * e` | multiply `t.c` |
//! | `UPDATE t SET c = NULL` / `= e` | assign NULL / assign `t.c` |
//! | `DELETE FROM t` | delete `t` |
//!
//! Anything else in a transaction (DDL, `SET`, `COPY`) is a typed [`SqlScriptError`].

use crate::footprint::{Access, Change, Footprint, Source};
use crate::invariant::{ColRef, Schema};
use sqlparser::ast::{
    AssignmentTarget, BinaryOperator, CreateTableOptions, DataType, Expr, FromTable, Insert, ObjectName, SetExpr,
    Statement, TableFactor, TableObject, TableWithJoins, UnaryOperator, Value as V,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use std::collections::{BTreeMap, BTreeSet};

/// The hidden key column of a table declared without a primary key (as `litmus-sql` names it).
pub const ROWID: &str = "rowid";

/// What is wrong with a script of SQL transactions.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SqlScriptError {
    #[error("SQL syntax error in {transaction}: {message}")]
    Syntax { transaction: String, message: String },
    #[error("{transaction}: unknown table {table}")]
    UnknownTable { transaction: String, table: String },
    #[error("{transaction}: unknown column {table}.{column}")]
    UnknownColumn { transaction: String, table: String, column: String },
    #[error("{transaction}: not analyzed (only SELECT, INSERT, UPDATE, DELETE in a transaction): {statement}")]
    Unsupported { transaction: String, statement: String },
    #[error("{transaction}: BEGIN inside a transaction, or COMMIT outside one")]
    Nesting { transaction: String },
    #[error("no transactions in the script")]
    Empty,
    #[error("schema: {0}")]
    Ddl(#[from] crate::ddl::DdlError),
}

/// The user's DDL as LitmusDB's SQL takes it (module doc), parsed into tables and invariants.
pub fn sql_schema(ddl_text: &str) -> Result<Schema, crate::ddl::DdlError> {
    let stmts =
        Parser::parse_sql(&PostgreSqlDialect {}, ddl_text).map_err(|e| crate::ddl::DdlError::Syntax(e.to_string()))?;
    let mut text = String::new();
    for mut s in stmts {
        if let Statement::CreateTable(ct) = &mut s {
            ct.table_options = CreateTableOptions::None;
            for c in &mut ct.columns {
                c.data_type = match &c.data_type {
                    DataType::Timestamp(..) | DataType::Date | DataType::Datetime(_) => DataType::BigInt(None),
                    DataType::Boolean | DataType::Bool => DataType::Text,
                    other => other.clone(),
                };
            }
            let has_key = ct.constraints.iter().any(|c| matches!(c, sqlparser::ast::TableConstraint::PrimaryKey(_)))
                || ct
                    .columns
                    .iter()
                    .any(|c| c.options.iter().any(|o| matches!(o.option, sqlparser::ast::ColumnOption::PrimaryKey(_))));
            if !has_key {
                let hidden = format!("CREATE TABLE x ({ROWID} BIGINT PRIMARY KEY DEFAULT LITMUS_UNIQUE_ID())");
                if let Ok(mut parsed) = Parser::parse_sql(&PostgreSqlDialect {}, &hidden) {
                    if let Some(Statement::CreateTable(h)) = parsed.pop() {
                        ct.columns.insert(0, h.columns[0].clone());
                    }
                }
            }
        }
        text.push_str(&s.to_string());
        text.push_str(";\n");
    }
    crate::ddl::parse(&text)
}

/// The sign of a pgbench variable's values, from `\set v random(lo, hi)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sign {
    Positive,
    Negative,
    Zero,
    Unknown,
}

/// One transaction of a script: its name, its statements, and what the script tells of its
/// parameters' signs (`$n` is `signs[n - 1]`).
#[derive(Clone, Debug)]
pub struct ScriptTxn {
    pub name: String,
    pub statements: Vec<Statement>,
    signs: Vec<Sign>,
}

/// Splits a script into transactions (module doc).
pub fn parse_script(text: &str) -> Result<Vec<ScriptTxn>, SqlScriptError> {
    let mut vars: BTreeMap<String, Sign> = BTreeMap::new();
    let mut txns = Vec::new();
    let mut next_name: Option<String> = None;
    let mut open: Option<(String, String)> = None; // (name, SQL so far) of a BEGIN block
    let mut pending = String::new(); // SQL of statements outside a block, up to a ';'
    let mut counter = 0;
    let mut name_next = |next: &mut Option<String>| {
        counter += 1;
        next.take().unwrap_or_else(|| format!("txn{counter}"))
    };
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(meta) = trimmed.strip_prefix('\\') {
            let words: Vec<&str> = meta.split_whitespace().collect();
            if let ["set", var, rest @ ..] = words.as_slice() {
                vars.insert(var.to_string(), sign_of_set(&rest.join(" ")));
            }
            continue;
        }
        if let Some(comment) = trimmed.strip_prefix("--") {
            if let Some(name) = comment.trim().strip_prefix("transaction:") {
                next_name = Some(name.trim().to_string());
            }
            continue;
        }
        for piece in split_keep_semicolons(line) {
            let word = piece.trim().trim_end_matches(';').trim().to_ascii_lowercase();
            let is_begin = matches!(word.as_str(), "begin" | "start transaction") || word.starts_with("begin ");
            let is_end = matches!(word.as_str(), "commit" | "end");
            if is_begin && pending.trim().is_empty() {
                if let Some((name, _)) = &open {
                    return Err(SqlScriptError::Nesting { transaction: name.clone() });
                }
                open = Some((name_next(&mut next_name), String::new()));
                continue;
            }
            if is_end && pending.trim().is_empty() {
                let Some((name, sql)) = open.take() else {
                    return Err(SqlScriptError::Nesting { transaction: format!("txn{}", counter + 1) });
                };
                txns.push(transaction(name, &sql, &vars)?);
                continue;
            }
            match &mut open {
                Some((_, sql)) => {
                    sql.push_str(&piece);
                    sql.push('\n');
                }
                None => {
                    pending.push_str(&piece);
                    pending.push('\n');
                    if piece.trim_end().ends_with(';') {
                        let sql = std::mem::take(&mut pending);
                        if !sql.trim().trim_matches(';').trim().is_empty() {
                            txns.push(transaction(name_next(&mut next_name), &sql, &vars)?);
                        }
                    }
                }
            }
        }
    }
    if let Some((name, sql)) = open {
        // pgbench runs a script without END as one transaction per statement; a block left
        // open at the end is most likely an END forgotten: taken as the block.
        txns.push(transaction(name, &sql, &vars)?);
    }
    if !pending.trim().is_empty() {
        txns.push(transaction(name_next(&mut next_name), &pending, &vars)?);
    }
    if txns.is_empty() {
        return Err(SqlScriptError::Empty);
    }
    Ok(txns)
}

/// A line cut after each `;` outside quotes, every piece kept with its `;`.
fn split_keep_semicolons(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in line.chars() {
        cur.push(c);
        if c == '\'' {
            quoted = !quoted;
        }
        if c == ';' && !quoted {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out
}

/// `random(lo, hi)` (and `random_gaussian` / `random_exponential` with their bounds) of
/// integer literals: the sign all of its values share.
fn sign_of_set(expr: &str) -> Sign {
    let e = expr.replace(' ', "");
    let Some(args) = e.split_once('(').map(|(_, a)| a.trim_end_matches(')')) else {
        return match e.parse::<i64>() {
            Ok(0) => Sign::Zero,
            Ok(v) if v > 0 => Sign::Positive,
            Ok(_) => Sign::Negative,
            Err(_) => Sign::Unknown,
        };
    };
    let bounds: Vec<Option<i64>> = args.split(',').take(2).map(|a| a.parse().ok()).collect();
    match bounds.as_slice() {
        [Some(lo), Some(hi)] if *lo > 0 && *hi > 0 => Sign::Positive,
        [Some(lo), Some(hi)] if *lo < 0 && *hi < 0 => Sign::Negative,
        [Some(0), Some(0)] => Sign::Zero,
        _ => Sign::Unknown,
    }
}

/// Parses one transaction's SQL, its pgbench variables made parameters.
fn transaction(name: String, sql: &str, vars: &BTreeMap<String, Sign>) -> Result<ScriptTxn, SqlScriptError> {
    let mut signs = Vec::new();
    let mut numbered: BTreeMap<String, usize> = BTreeMap::new();
    let mut text = String::with_capacity(sql.len());
    let chars: Vec<char> = sql.chars().collect();
    let mut i = 0;
    let mut quoted = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            quoted = !quoted;
        }
        let var_start = !quoted
            && c == ':'
            && chars.get(i + 1).is_some_and(|n| n.is_ascii_alphabetic() || *n == '_')
            && (i == 0 || chars[i - 1] != ':');
        if var_start {
            let mut j = i + 1;
            while j < chars.len() && (chars[j].is_ascii_alphanumeric() || chars[j] == '_') {
                j += 1;
            }
            let var: String = chars[i + 1..j].iter().collect();
            let n = *numbered.entry(var.clone()).or_insert_with(|| {
                signs.push(vars.get(&var).copied().unwrap_or(Sign::Unknown));
                signs.len()
            });
            text.push_str(&format!("${n}"));
            i = j;
            continue;
        }
        text.push(c);
        i += 1;
    }
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, &text)
        .map_err(|e| SqlScriptError::Syntax { transaction: name.clone(), message: e.to_string() })?;
    Ok(ScriptTxn { name, statements, signs })
}

/// The footprints of a script's transactions over `schema`.
pub fn footprints(schema: &Schema, txns: &[ScriptTxn]) -> Result<Vec<Footprint>, SqlScriptError> {
    txns.iter()
        .map(|t| {
            let mut accesses = BTreeSet::new();
            for s in &t.statements {
                accesses.extend(accesses_of(schema, s, &t.signs, &t.name)?);
            }
            Ok(Footprint { procedure: t.name.clone(), runs: 0, committed: 0, panicked: 0, accesses })
        })
        .collect()
}

/// The footprint of one statement run as a transaction of its own, parameters of unknown
/// sign: what the SQL front end judges on `coordfree` before running it.
pub fn statement_footprint(schema: &Schema, name: &str, stmt: &Statement) -> Result<Footprint, SqlScriptError> {
    let accesses = accesses_of(schema, stmt, &[], name)?.into_iter().collect();
    Ok(Footprint { procedure: name.into(), runs: 0, committed: 0, panicked: 0, accesses })
}

fn object(name: &ObjectName) -> String {
    name.0.last().map(|p| p.to_string().trim_matches('"').to_lowercase()).unwrap_or_default()
}

fn accesses_of(schema: &Schema, stmt: &Statement, signs: &[Sign], txn: &str) -> Result<Vec<Access>, SqlScriptError> {
    let table = |name: &str| -> Result<String, SqlScriptError> {
        schema
            .table(name)
            .map(|t| t.name.clone())
            .ok_or_else(|| SqlScriptError::UnknownTable { transaction: txn.into(), table: name.into() })
    };
    let mut out = Vec::new();
    match stmt {
        Statement::Query(q) => reads_of_query(q, &table, &mut out)?,
        Statement::Insert(ins) => out.extend(insert_access(schema, ins, &table, txn, &mut vec![])?),
        Statement::Update(up) => {
            let TableFactor::Table { name, .. } = &up.table.relation else {
                return Err(unsupported(txn, stmt));
            };
            let t = table(&object(name))?;
            out.push(Access::Read { table: t.clone() });
            for a in &up.assignments {
                let AssignmentTarget::ColumnName(c) = &a.target else { return Err(unsupported(txn, stmt)) };
                let column = object(c);
                if schema.column(&ColRef::new(&t, &column)).is_none() {
                    return Err(SqlScriptError::UnknownColumn { transaction: txn.into(), table: t, column });
                }
                for change in changes(&column, &a.value, signs) {
                    out.push(Access::Update { col: ColRef::new(&t, &column), change });
                }
            }
        }
        Statement::Delete(del) => {
            let (FromTable::WithFromKeyword(ts) | FromTable::WithoutKeyword(ts)) = &del.from;
            for twj in ts {
                let TableFactor::Table { name, .. } = &twj.relation else { return Err(unsupported(txn, stmt)) };
                let t = table(&object(name))?;
                out.push(Access::Read { table: t.clone() });
                out.push(Access::Delete { table: t });
            }
        }
        other => return Err(unsupported(txn, other)),
    }
    Ok(out)
}

fn unsupported(txn: &str, stmt: &Statement) -> SqlScriptError {
    let mut statement = stmt.to_string();
    statement.truncate(80);
    SqlScriptError::Unsupported { transaction: txn.into(), statement }
}

fn reads_of_query(
    q: &sqlparser::ast::Query,
    table: &dyn Fn(&str) -> Result<String, SqlScriptError>,
    out: &mut Vec<Access>,
) -> Result<(), SqlScriptError> {
    match q.body.as_ref() {
        SetExpr::Select(s) => {
            for twj in &s.from {
                reads_of_from(twj, table, out)?;
            }
        }
        SetExpr::Query(inner) => reads_of_query(inner, table, out)?,
        _ => {}
    }
    Ok(())
}

fn reads_of_from(
    twj: &TableWithJoins,
    table: &dyn Fn(&str) -> Result<String, SqlScriptError>,
    out: &mut Vec<Access>,
) -> Result<(), SqlScriptError> {
    for f in std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation)) {
        if let TableFactor::Table { name, .. } = f {
            out.push(Access::Read { table: table(&object(name))? });
        }
    }
    Ok(())
}

fn insert_access(
    schema: &Schema,
    ins: &Insert,
    table: &dyn Fn(&str) -> Result<String, SqlScriptError>,
    txn: &str,
    reads: &mut Vec<Access>,
) -> Result<Vec<Access>, SqlScriptError> {
    let TableObject::TableName(name) = &ins.table else {
        return Err(SqlScriptError::Unsupported { transaction: txn.into(), statement: ins.to_string() });
    };
    let t = table(&object(name))?;
    let def = schema.table(&t).expect("found above");
    let named: Vec<String> = if ins.columns.is_empty() {
        def.columns.iter().map(|c| c.name.clone()).filter(|c| c != ROWID).collect()
    } else {
        ins.columns.iter().map(object).collect()
    };
    for c in &named {
        if def.column(c).is_none() {
            return Err(SqlScriptError::UnknownColumn { transaction: txn.into(), table: t, column: c.to_string() });
        }
    }
    // A column is NULL only if every row gives it a NULL literal; chosen otherwise.
    let mut all_null: Vec<bool> = vec![true; named.len()];
    match ins.source.as_ref().map(|q| q.body.as_ref()) {
        Some(SetExpr::Values(v)) => {
            for row in &v.rows {
                for (i, e) in row.content.iter().enumerate().take(named.len()) {
                    all_null[i] &= matches!(e, Expr::Value(v) if matches!(v.value, V::Null));
                }
            }
        }
        Some(_) => {
            if let Some(q) = &ins.source {
                reads_of_query(q, table, reads)?;
            }
            all_null.iter_mut().for_each(|n| *n = false);
        }
        None => {}
    }
    let columns = def
        .columns
        .iter()
        .map(|c| {
            let source = match named.iter().position(|n| *n == c.name) {
                Some(i) if all_null[i] => Source::Null,
                Some(_) => Source::Chosen,
                None if c.unique_token => Source::Token,
                None => Source::Null,
            };
            (c.name.clone(), source)
        })
        .collect();
    let mut out = std::mem::take(reads);
    out.push(Access::Insert { table: t, upsert: ins.on.is_some(), columns });
    Ok(out)
}

/// The changes `column = value` makes (module doc's table).
fn changes(column: &str, value: &Expr, signs: &[Sign]) -> Vec<Change> {
    let is_col = |e: &Expr| match e {
        Expr::Identifier(i) => i.value.eq_ignore_ascii_case(column),
        Expr::CompoundIdentifier(parts) => parts.last().is_some_and(|i| i.value.eq_ignore_ascii_case(column)),
        _ => false,
    };
    let by_sign = |s: Sign, negate: bool| -> Vec<Change> {
        let s = match (s, negate) {
            (Sign::Positive, true) => Sign::Negative,
            (Sign::Negative, true) => Sign::Positive,
            (s, _) => s,
        };
        match s {
            Sign::Positive => vec![Change::Increment],
            Sign::Negative => vec![Change::Decrement],
            Sign::Zero => vec![Change::Touch],
            Sign::Unknown => vec![Change::Increment, Change::Decrement],
        }
    };
    match strip(value) {
        Expr::Value(v) if matches!(v.value, V::Null) => vec![Change::AssignNull],
        Expr::BinaryOp { left, op: BinaryOperator::Plus, right } if is_col(strip(left)) => {
            by_sign(sign(right, signs), false)
        }
        Expr::BinaryOp { left, op: BinaryOperator::Plus, right } if is_col(strip(right)) => {
            by_sign(sign(left, signs), false)
        }
        Expr::BinaryOp { left, op: BinaryOperator::Minus, right } if is_col(strip(left)) => {
            by_sign(sign(right, signs), true)
        }
        Expr::BinaryOp { left, op: BinaryOperator::Multiply, right } if is_col(strip(left)) || is_col(strip(right)) => {
            vec![Change::Multiply]
        }
        _ => vec![Change::Assign],
    }
}

fn strip(e: &Expr) -> &Expr {
    match e {
        Expr::Nested(inner) | Expr::Cast { expr: inner, .. } => strip(inner),
        other => other,
    }
}

/// The sign of a literal, a parameter whose sign the script tells, or their negation.
fn sign(e: &Expr, signs: &[Sign]) -> Sign {
    match strip(e) {
        Expr::Value(v) => match &v.value {
            V::Number(n, _) => match n.parse::<f64>() {
                Ok(x) if x > 0.0 => Sign::Positive,
                Ok(x) if x < 0.0 => Sign::Negative,
                Ok(_) => Sign::Zero,
                Err(_) => Sign::Unknown,
            },
            V::Placeholder(p) => p
                .strip_prefix('$')
                .and_then(|n| n.parse::<usize>().ok())
                .and_then(|n| signs.get(n.wrapping_sub(1)).copied())
                .unwrap_or(Sign::Unknown),
            _ => Sign::Unknown,
        },
        Expr::UnaryOp { op: UnaryOperator::Minus, expr } => match sign(expr, signs) {
            Sign::Positive => Sign::Negative,
            Sign::Negative => Sign::Positive,
            s => s,
        },
        _ => Sign::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Class;
    use crate::rules::Verdict;

    /// pgbench's tables (as `pgbench -i` creates them, primary keys added afterwards), with a
    /// bank's invariant on the accounts, and the TPC-B script as pgbench runs it.
    const DDL: &str = "
        CREATE TABLE pgbench_branches (bid INT NOT NULL PRIMARY KEY, bbalance INT, filler CHAR(88)) WITH (fillfactor = 100);
        CREATE TABLE pgbench_tellers (tid INT NOT NULL PRIMARY KEY, bid INT, tbalance INT, filler CHAR(84));
        CREATE TABLE pgbench_accounts (aid INT NOT NULL PRIMARY KEY, bid INT, abalance INT, filler CHAR(84),
                                       CONSTRAINT \"no overdraft\" CHECK (abalance >= -100000));
        CREATE TABLE pgbench_history (tid INT, bid INT, aid INT, delta INT, mtime TIMESTAMP, filler CHAR(22));
    ";

    const TPCB: &str = "
        \\set aid random(1, 100000 * :scale)
        \\set bid random(1, 1 * :scale)
        \\set tid random(1, 10 * :scale)
        \\set delta random(-5000, 5000)
        -- transaction: tpcb-like
        BEGIN;
        UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
        SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
        UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
        UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
        INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
        END;
        -- transaction: deposit
        \\set amount random(1, 100)
        UPDATE pgbench_accounts SET abalance = abalance + :amount WHERE aid = :aid;
        -- transaction: open-account
        INSERT INTO pgbench_accounts (aid, bid, abalance) VALUES (:aid, 1, 0);
    ";

    #[test]
    fn a_pgbench_script_is_judged_per_transaction_with_its_variables_signs() {
        let r = crate::report::analyze_sql("pgbench", DDL, TPCB).unwrap();
        let proc = |n: &str| r.procedures.iter().find(|p| p.procedure == n).unwrap_or_else(|| panic!("{n}"));
        // delta may be negative: the accounts' lower bound needs coordination (Claim 13).
        let tpcb = proc("tpcb-like");
        assert!(tpcb.needs_coordination);
        assert!(tpcb.reasons.iter().any(|p| p.invariant == "no overdraft" && p.judgement.rule == "Claim 13"));
        // The history row's key is the hidden row id: a unique token (Claim 4), no coordination.
        assert!(!tpcb.reasons.iter().any(|p| p.invariant.contains("pgbench_history")), "{:?}", tpcb.reasons);
        // amount is random(1, 100): an increment, which a lower bound allows (Claim 11).
        assert!(!proc("deposit").needs_coordination);
        assert_eq!(proc("deposit").class, Class::CoordinationFree);
        // A chosen primary key needs coordination (Claim 3).
        let open = proc("open-account");
        assert!(open.reasons.iter().any(|p| p.judgement.rule == "Claim 3"), "{:?}", open.reasons);
        let inv = r.invariants.iter().find(|i| i.name == "no overdraft").unwrap();
        assert_eq!(inv.verdict, Verdict::No);
    }

    #[test]
    fn statements_map_to_accesses_as_the_table_says() {
        let schema = sql_schema(DDL).unwrap();
        let one = |sql: &str| {
            let stmt = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().pop().unwrap();
            statement_footprint(&schema, "s", &stmt).map(|f| f.accesses.into_iter().collect::<Vec<_>>())
        };
        let upd = |c: &str, change| Access::Update { col: ColRef::new("pgbench_accounts", c), change };
        let read = Access::Read { table: "pgbench_accounts".into() };
        assert_eq!(
            one("UPDATE pgbench_accounts SET abalance = abalance - 5").unwrap(),
            vec![read.clone(), upd("abalance", Change::Decrement)]
        );
        assert_eq!(
            one("UPDATE pgbench_accounts SET abalance = 3 + abalance").unwrap(),
            vec![read.clone(), upd("abalance", Change::Increment)]
        );
        assert_eq!(
            one("UPDATE pgbench_accounts SET abalance = abalance + $1").unwrap(),
            vec![read.clone(), upd("abalance", Change::Increment), upd("abalance", Change::Decrement)],
            "a parameter of unknown sign may do either"
        );
        assert_eq!(
            one("UPDATE pgbench_accounts SET bid = NULL").unwrap(),
            vec![read.clone(), upd("bid", Change::AssignNull)]
        );
        assert_eq!(
            one("DELETE FROM pgbench_accounts WHERE aid = 1").unwrap(),
            vec![read.clone(), Access::Delete { table: "pgbench_accounts".into() }]
        );
        let history = one("INSERT INTO pgbench_history (tid, delta) VALUES (1, 2)").unwrap();
        let Access::Insert { columns, upsert: false, .. } = &history[0] else { panic!("{history:?}") };
        assert!(columns.contains(&(ROWID.into(), Source::Token)) && columns.contains(&("tid".into(), Source::Chosen)));
        assert!(columns.contains(&("aid".into(), Source::Null)));
        assert!(matches!(one("SELECT * FROM nope"), Err(SqlScriptError::UnknownTable { .. })));
        assert!(matches!(one("UPDATE pgbench_accounts SET nope = 1"), Err(SqlScriptError::UnknownColumn { .. })));
        assert!(matches!(one("DROP TABLE pgbench_accounts"), Err(SqlScriptError::Unsupported { .. })));
    }

    #[test]
    fn scripts_are_split_into_transactions_and_bad_ones_are_typed_errors() {
        let txns = parse_script("BEGIN;\nSELECT 1;\nCOMMIT;\nSELECT 2; SELECT 3;\n").unwrap();
        let names: Vec<&str> = txns.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, vec!["txn1", "txn2", "txn3"]);
        assert_eq!(txns[0].statements.len(), 1);
        assert!(matches!(parse_script("BEGIN; BEGIN;"), Err(SqlScriptError::Nesting { .. })));
        assert!(matches!(parse_script("COMMIT;"), Err(SqlScriptError::Nesting { .. })));
        assert!(matches!(parse_script("\\set x 1\n-- nothing\n"), Err(SqlScriptError::Empty)));
        assert!(matches!(parse_script("SELEC 1;"), Err(SqlScriptError::Syntax { .. })));
        assert_eq!(sign_of_set("random(-5000, 5000)"), Sign::Unknown);
        assert_eq!(sign_of_set("random(1, 10)"), Sign::Positive);
        assert_eq!(sign_of_set("random(-3, -1)"), Sign::Negative);
    }
}
