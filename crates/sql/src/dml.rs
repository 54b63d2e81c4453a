//! `INSERT`, `UPDATE`, `DELETE`: rows are found as `SELECT` finds them (by key when the
//! conditions allow), checked against the table's types, `NOT NULL` and `CHECK`s, then written
//! in the statement's transaction. A statement that fails part way fails its transaction, so
//! nothing of it is applied.

use crate::catalog::{ident, object_name, TableDef};
use crate::error::{sqlstate, SqlError};
use crate::expr::{Env, Scope, Source};
use crate::query::{conjuncts, for_each_match, too_many};
use crate::store::{Tx, STATEMENT_ROWS_MAX};
use crate::types::Datum;
use crate::StatementCtx;
use sqlparser::ast::{
    AssignmentTarget, Delete, Expr, FromTable, Insert, OnConflictAction, OnInsert, SetExpr, TableFactor, TableObject,
    Update,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

pub(crate) fn parse_expr(text: &str) -> Result<Expr, SqlError> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(text)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| SqlError::internal(format!("stored expression {text}: {e}")))
}

/// Casts a full row to the table's types and checks `NOT NULL` and the `CHECK`s.
pub(crate) fn check_row(ctx: &StatementCtx, def: &TableDef, row: Vec<Datum>) -> Result<Vec<Datum>, SqlError> {
    let mut out = Vec::with_capacity(row.len());
    for (v, c) in row.into_iter().zip(&def.columns) {
        let v = v.cast(&c.ty)?;
        if v.is_null() && c.not_null {
            return Err(SqlError::new(
                sqlstate::NOT_NULL_VIOLATION,
                format!(
                    "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                    c.name, def.name
                ),
            ));
        }
        out.push(v);
    }
    let scope = Scope::new(vec![Source { alias: def.name.clone(), def: def.clone(), for_update: false }]);
    let env = Env { scope: &scope, row: &out, params: &[], aggregates: None, now_us: ctx.now_us };
    for check in &def.checks {
        // A CHECK passes unless it is false (NULL passes).
        if env.eval(&parse_expr(check)?)? == Datum::Bool(false) {
            return Err(SqlError::new(
                sqlstate::CHECK_VIOLATION,
                format!("new row for relation \"{}\" violates check constraint ({check})", def.name),
            ));
        }
    }
    Ok(out)
}

/// `INSERT INTO t [(cols)] VALUES (...), ... | SELECT ... [ON CONFLICT DO NOTHING]`.
pub fn insert(tx: &mut Tx, ctx: &StatementCtx, ins: &Insert) -> Result<usize, SqlError> {
    if ins.returning.is_some() {
        return Err(SqlError::unsupported("INSERT ... RETURNING"));
    }
    let do_nothing = match &ins.on {
        None => false,
        Some(OnInsert::OnConflict(c)) if matches!(c.action, OnConflictAction::DoNothing) => true,
        Some(other) => return Err(SqlError::unsupported(format!("{other}"))),
    };
    let TableObject::TableName(name) = &ins.table else {
        return Err(SqlError::unsupported("INSERT INTO a table function"));
    };
    let def = tx.table(&object_name(name)?)?;
    let targets: Vec<usize> = if ins.columns.is_empty() {
        def.visible()
    } else {
        ins.columns.iter().map(|c| def.column(&object_name(c)?)).collect::<Result<_, _>>()?
    };
    let source = ins.source.as_ref().ok_or_else(|| SqlError::unsupported("INSERT without VALUES or SELECT"))?;
    let rows = source_rows(tx, ctx, source)?;
    let mut inserted = 0;
    for values in rows {
        if values.len() > targets.len() {
            return Err(SqlError::syntax("INSERT has more expressions than target columns"));
        }
        let row = full_row(ctx, &def, &targets, values)?;
        let row = check_row(ctx, &def, row)?;
        if do_nothing && tx.get(&def, &def.key_of(&row)?)?.is_some() {
            continue;
        }
        tx.insert(&def, &row)?;
        inserted += 1;
    }
    Ok(inserted)
}

/// The rows a `VALUES` list or a query gives.
fn source_rows(tx: &mut Tx, ctx: &StatementCtx, source: &sqlparser::ast::Query) -> Result<Vec<Vec<Datum>>, SqlError> {
    match source.body.as_ref() {
        SetExpr::Values(v) if source.order_by.is_none() && source.limit_clause.is_none() => {
            let scope = Scope::default();
            let env = Env { scope: &scope, row: &[], params: &ctx.params, aggregates: None, now_us: ctx.now_us };
            v.rows.iter().map(|r| r.content.iter().map(|e| env.eval(e)).collect()).collect()
        }
        _ => Ok(crate::query::run(tx, ctx, source)?.rows),
    }
}

/// A full row from the values given for `targets`: defaults (or NULL) elsewhere, a fresh row
/// id for the hidden key.
pub(crate) fn full_row(
    ctx: &StatementCtx,
    def: &TableDef,
    targets: &[usize],
    values: Vec<Datum>,
) -> Result<Vec<Datum>, SqlError> {
    let mut row: Vec<Option<Datum>> = vec![None; def.columns.len()];
    for (&t, v) in targets.iter().zip(values) {
        row[t] = Some(v);
    }
    let scope = Scope::default();
    let env = Env { scope: &scope, row: &[], params: &[], aggregates: None, now_us: ctx.now_us };
    row.into_iter()
        .zip(&def.columns)
        .map(|(v, c)| match (v, &c.default) {
            (Some(v), _) => Ok(v),
            (None, _) if c.hidden => Ok(Datum::Int(ctx.next_rowid())),
            (None, Some(d)) => env.eval(&parse_expr(d)?),
            (None, None) => Ok(Datum::Null),
        })
        .collect()
}

fn target_table(tx: &mut Tx, t: &sqlparser::ast::TableWithJoins) -> Result<Source, SqlError> {
    if !t.joins.is_empty() {
        return Err(SqlError::unsupported("joins in UPDATE or DELETE"));
    }
    let TableFactor::Table { name, alias, .. } = &t.relation else {
        return Err(SqlError::unsupported(format!("{}", t.relation)));
    };
    let tname = object_name(name)?;
    let def = tx.table(&tname)?;
    // The rows an UPDATE or DELETE reads are the rows it writes: read under the write's lock,
    // so two statements on one row queue instead of deadlocking on a lock upgrade.
    Ok(Source { alias: alias.as_ref().map(|a| ident(&a.name)).unwrap_or(tname), def, for_update: true })
}

/// The rows of `source` that satisfy `selection`.
fn matching(
    tx: &mut Tx,
    ctx: &StatementCtx,
    source: &Source,
    selection: Option<&Expr>,
) -> Result<Vec<Vec<Datum>>, SqlError> {
    let mut conds = vec![];
    if let Some(w) = selection {
        conjuncts(w, &mut conds);
    }
    let mut rows = vec![];
    for_each_match(tx, ctx, std::slice::from_ref(source), &conds, &mut |r| {
        rows.push(r.to_vec());
        if rows.len() > STATEMENT_ROWS_MAX {
            return Err(too_many());
        }
        Ok(true)
    })?;
    Ok(rows)
}

/// `UPDATE t SET c = expr, ... [WHERE ...]`; expressions see the old row (`x = x + $1`).
pub fn update(tx: &mut Tx, ctx: &StatementCtx, up: &Update) -> Result<usize, SqlError> {
    if up.from.is_some() || up.returning.is_some() || up.limit.is_some() || !up.order_by.is_empty() {
        return Err(SqlError::unsupported("UPDATE ... FROM / RETURNING / ORDER BY / LIMIT"));
    }
    let source = target_table(tx, &up.table)?;
    let def = source.def.clone();
    let mut sets = vec![];
    for a in &up.assignments {
        let AssignmentTarget::ColumnName(c) = &a.target else { return Err(SqlError::unsupported("tuple assignment")) };
        let col = def.column(&object_name(c)?)?;
        if def.columns[col].hidden {
            return Err(SqlError::no_column(&def.columns[col].name));
        }
        sets.push((col, a.value.clone()));
    }
    let rows = matching(tx, ctx, &source, up.selection.as_ref())?;
    let scope = Scope::new(vec![source]);
    for old in &rows {
        let env = Env { scope: &scope, row: old, params: &ctx.params, aggregates: None, now_us: ctx.now_us };
        let mut new = old.clone();
        for (col, e) in &sets {
            new[*col] = env.eval(e)?;
        }
        let new = check_row(ctx, &def, new)?;
        let (old_key, new_key) = (def.key_of(old)?, def.key_of(&new)?);
        if old_key != new_key {
            tx.delete(&def, &old_key)?;
            tx.insert(&def, &new)?;
        } else {
            tx.put(&def, &new)?;
        }
    }
    Ok(rows.len())
}

/// `DELETE FROM t [WHERE ...]`.
pub fn delete(tx: &mut Tx, ctx: &StatementCtx, del: &Delete) -> Result<usize, SqlError> {
    if del.using.is_some()
        || del.returning.is_some()
        || del.limit.is_some()
        || !del.order_by.is_empty()
        || !del.tables.is_empty()
    {
        return Err(SqlError::unsupported("DELETE ... USING / RETURNING / ORDER BY / LIMIT"));
    }
    let tables = match &del.from {
        FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
    };
    let [table] = tables.as_slice() else { return Err(SqlError::unsupported("DELETE from several tables")) };
    let source = target_table(tx, table)?;
    let rows = matching(tx, ctx, &source, del.selection.as_ref())?;
    for r in &rows {
        tx.delete(&source.def, &source.def.key_of(r)?)?;
    }
    Ok(rows.len())
}

/// Deletes every row of a table (`TRUNCATE`, `DROP TABLE`).
pub fn delete_all(tx: &mut Tx, def: &TableDef) -> Result<usize, SqlError> {
    let mut keys = vec![];
    tx.scan(def, &[], &mut |k, _| {
        keys.push(k);
        if keys.len() > STATEMENT_ROWS_MAX {
            return Err(too_many());
        }
        Ok(true)
    })?;
    tx.delete_many(def, &keys)?;
    Ok(keys.len())
}

/// Inserts the rows of a `COPY`, in batches.
pub fn copy_rows(
    tx: &mut Tx,
    ctx: &StatementCtx,
    spec: &crate::copy::CopySpec,
    data: &[u8],
) -> Result<usize, SqlError> {
    let def = tx.table(&spec.table)?;
    let targets = crate::copy::targets(spec, &def)?;
    let mut rows = vec![];
    for values in crate::copy::parse_text(data, targets.len())? {
        let row = full_row(ctx, &def, &targets, values)?;
        rows.push(check_row(ctx, &def, row)?);
        if rows.len() > STATEMENT_ROWS_MAX {
            return Err(too_many());
        }
    }
    tx.insert_many(&def, &rows, false)?;
    Ok(rows.len())
}

/// `ALTER TABLE t ADD PRIMARY KEY (cols)` on a table created without one: every row is
/// re-keyed by the new key (refused with `23505` / `23502` when the rows are not unique and
/// non-null on it), and the hidden row id goes away.
pub fn add_primary_key(tx: &mut Tx, name: &str, columns: &[String]) -> Result<(), SqlError> {
    let def = tx.table(name)?;
    if !def.has_rowid() {
        return Err(SqlError::new(
            sqlstate::INVALID_TABLE_DEFINITION,
            format!("multiple primary keys for table \"{name}\" are not allowed"),
        ));
    }
    let mut new = def.clone();
    let rowid = new.columns.iter().position(|c| c.hidden).expect("has_rowid");
    new.columns.remove(rowid);
    new.primary_key = columns.iter().map(|c| new.column(c)).collect::<Result<_, _>>()?;
    for &k in &new.primary_key {
        new.columns[k].not_null = true;
    }
    let mut old_keys = vec![];
    let mut rows = vec![];
    let mut seen = std::collections::HashSet::new();
    tx.scan(&def, &[], &mut |key, mut row| {
        row.remove(rowid);
        for &k in &new.primary_key {
            if row[k].is_null() {
                return Err(SqlError::new(
                    sqlstate::NOT_NULL_VIOLATION,
                    format!("column \"{}\" of relation \"{name}\" contains null values", new.columns[k].name),
                ));
            }
        }
        if !seen.insert(new.key_of(&row)?) {
            return Err(crate::store::duplicate(&new, &row));
        }
        old_keys.push(key);
        rows.push(row);
        if rows.len() > STATEMENT_ROWS_MAX {
            return Err(too_many());
        }
        Ok(true)
    })?;
    tx.delete_many(&def, &old_keys)?;
    tx.insert_many(&new, &rows, true)?;
    tx.replace_table(&new)
}
