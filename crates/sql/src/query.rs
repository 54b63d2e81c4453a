//! `SELECT`: sources joined as nested loops, each level read by its primary key when the
//! conditions fix a key prefix (a point read for the whole key, a range read for a prefix,
//! else the whole table, page by page), then filter, group and aggregate, order, limit.

use crate::catalog::{ident, object_name, TableDef};
use crate::error::{sqlstate, SqlError};
use crate::expr::{column_ref, function_args, is_aggregate, type_of, Env, Scope, Source};
use crate::store::{KeyRange, Tx, STATEMENT_ROWS_MAX};
use crate::types::{Datum, SqlType};
use crate::{Column, StatementCtx};
use sqlparser::ast::{
    BinaryOperator, Expr, GroupByExpr, JoinConstraint, JoinOperator, LimitClause, LockType, OrderByExpr, OrderByKind,
    Query, SelectItem, SetExpr, TableFactor, TableWithJoins,
};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

/// A query's result.
pub struct Rows {
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Datum>>,
}

/// Splits a condition into its `AND`ed parts.
pub fn conjuncts(e: &Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
            conjuncts(left, out);
            conjuncts(right, out);
        }
        Expr::Nested(inner) => match inner.as_ref() {
            Expr::BinaryOp { op: BinaryOperator::And, .. } => conjuncts(inner, out),
            _ => out.push(e.clone()),
        },
        _ => out.push(e.clone()),
    }
}

/// The sources of a `FROM` list (inner and cross joins only) and the join conditions.
pub fn sources(tx: &mut Tx, from: &[TableWithJoins], conds: &mut Vec<Expr>) -> Result<Vec<Source>, SqlError> {
    let mut out = vec![];
    for twj in from {
        out.push(source(tx, &twj.relation)?);
        for j in &twj.joins {
            match &j.join_operator {
                JoinOperator::Join(c) | JoinOperator::Inner(c) | JoinOperator::CrossJoin(c) => match c {
                    JoinConstraint::On(e) => conjuncts(e, conds),
                    JoinConstraint::None | JoinConstraint::Natural
                        if matches!(j.join_operator, JoinOperator::CrossJoin(_)) => {}
                    other => return Err(SqlError::unsupported(format!("join constraint {other:?}"))),
                },
                other => {
                    return Err(SqlError::unsupported(format!("outer and other joins ({other:?}); inner joins only")))
                }
            }
            out.push(source(tx, &j.relation)?);
        }
    }
    Ok(out)
}

fn source(tx: &mut Tx, f: &TableFactor) -> Result<Source, SqlError> {
    match f {
        TableFactor::Table { name, alias, args: None, .. } => {
            let tname = object_name(name)?;
            if tname.starts_with("pg_") || tname.starts_with("information_schema") {
                return Err(SqlError::unsupported(format!("system catalog {tname}")));
            }
            let def = tx.table(&tname)?;
            let alias = alias.as_ref().map(|a| ident(&a.name)).unwrap_or(tname);
            Ok(Source { alias, def, for_update: false })
        }
        other => Err(SqlError::unsupported(format!("FROM item {other}"))),
    }
}

/// Rows of `sources` joined, which satisfy `conds`, handed to `each` (false: stop).
pub fn for_each_match(
    tx: &mut Tx,
    ctx: &StatementCtx,
    sources: &[Source],
    conds: &[Expr],
    each: &mut dyn FnMut(&[Datum]) -> Result<bool, SqlError>,
) -> Result<(), SqlError> {
    let scope = Scope::new(sources.to_vec());
    let mut row = Vec::with_capacity(scope.width());
    join_level(tx, ctx, &scope, conds, 0, &mut row, each).map(drop)
}

fn join_level(
    tx: &mut Tx,
    ctx: &StatementCtx,
    scope: &Scope,
    conds: &[Expr],
    level: usize,
    row: &mut Vec<Datum>,
    each: &mut dyn FnMut(&[Datum]) -> Result<bool, SqlError>,
) -> Result<bool, SqlError> {
    if level == scope.sources.len() {
        let env = Env { scope, row, params: &ctx.params, aggregates: None, now_us: ctx.now_us };
        for c in conds {
            if !env.truth(c)? {
                return Ok(true);
            }
        }
        return each(row);
    }
    let def = scope.sources[level].def.clone();
    let for_update = scope.sources[level].for_update;
    let range = access(ctx, scope, conds, level, row)?;
    if level + 1 == scope.sources.len() {
        // The innermost level streams: a LIMIT or a stop ends the read early.
        let env_scope = scope;
        let holds = |r: &[Datum], row: &mut Vec<Datum>| -> Result<bool, SqlError> {
            let at = row.len();
            row.extend_from_slice(r);
            let env = Env { scope: env_scope, row, params: &ctx.params, aggregates: None, now_us: ctx.now_us };
            let mut keep = true;
            for c in conds {
                if !env.truth(c)? {
                    keep = false;
                    break;
                }
            }
            row.truncate(at);
            Ok(keep)
        };
        let mut go_on = true;
        let mut visit = |r: Vec<Datum>, row: &mut Vec<Datum>| -> Result<bool, SqlError> {
            if !holds(&r, row)? {
                return Ok(true);
            }
            let at = row.len();
            row.extend(r);
            let more = each(row)?;
            row.truncate(at);
            Ok(more)
        };
        match range {
            Access::Point(key) => {
                let found = if for_update { tx.get_for_update(&def, &key)? } else { tx.get(&def, &key)? };
                if let Some(r) = found {
                    go_on = visit(r, row)?;
                }
            }
            Access::Range(range) if for_update => {
                // The keys of the rows that match as scanned; each is then read again under its
                // write lock and matched again as locked (below serializable the scan's lock is
                // short, and the row may have changed since), as PostgreSQL re-checks a row it
                // had to wait for. The scan's own lock is a read lock: two statements that
                // update one range can still deadlock on the upgrade (a key read is free of it).
                let mut keys = vec![];
                tx.scan_range(&def, &range, &mut |k, r| {
                    if holds(&r, row)? {
                        keys.push(k);
                    }
                    if keys.len() > STATEMENT_ROWS_MAX {
                        return Err(too_many());
                    }
                    Ok(true)
                })?;
                for k in keys {
                    if let Some(r) = tx.get_for_update(&def, &k)? {
                        go_on = visit(r, row)?;
                        if !go_on {
                            break;
                        }
                    }
                }
            }
            Access::Range(range) => tx.scan_range(&def, &range, &mut |_, r| {
                go_on = visit(r, row)?;
                Ok(go_on)
            })?,
        }
        return Ok(go_on);
    }
    let fetched = fetch(tx, &def, &range, for_update)?;
    for r in fetched {
        let at = row.len();
        row.extend(r);
        let go_on = join_level(tx, ctx, scope, conds, level + 1, row, each)?;
        row.truncate(at);
        if !go_on {
            return Ok(false);
        }
    }
    Ok(true)
}

/// How a level reads its table: one key, or a range of keys.
pub enum Access {
    Point(Vec<u8>),
    Range(KeyRange),
}

/// The access path of source `level`: a point read when equalities fix the whole key, else the
/// range their key prefix and any bounds on the next key column allow.
fn access(
    ctx: &StatementCtx,
    scope: &Scope,
    conds: &[Expr],
    level: usize,
    outer: &[Datum],
) -> Result<Access, SqlError> {
    let def = &scope.sources[level].def;
    let prefix = key_prefix(ctx, scope, conds, level, outer)?;
    if prefix.len() == def.primary_key.len() {
        return Ok(Access::Point(crate::catalog::encode_key(&prefix)?));
    }
    let mut range = KeyRange::prefix(&prefix)?;
    let (lo, hi) = bounds(ctx, scope, conds, level, outer, def.primary_key[prefix.len()])?;
    let with = |v: Datum, past: bool| -> Result<Vec<u8>, SqlError> {
        let mut vals = prefix.clone();
        vals.push(v);
        let mut k = crate::catalog::encode_key(&vals)?;
        if past {
            k.push(0xFF);
        }
        Ok(k)
    };
    if let Some((v, inclusive)) = lo {
        range.lo = Some(with(v, !inclusive)?);
    }
    if let Some((v, inclusive)) = hi {
        range.hi = Some(with(v, inclusive)?);
    }
    Ok(Access::Range(range))
}

/// Bounds (value, inclusive) on column `col` of source `level` from `col < v`, `v >= col`,
/// `col BETWEEN a AND b` with `v` known before the level is read. A bound whose value the
/// column's type would change (5.5 for an integer) is not used: the filter still applies.
fn bounds(
    ctx: &StatementCtx,
    scope: &Scope,
    conds: &[Expr],
    level: usize,
    outer: &[Datum],
    col: usize,
) -> Result<(Bound, Bound), SqlError> {
    let outer_scope = Scope::new(scope.sources[..level].to_vec());
    let offset: usize = scope.sources[..level].iter().map(|s| s.def.columns.len()).sum();
    let ty = &scope.sources[level].def.columns[col].ty;
    let env = Env { scope: &outer_scope, row: outer, params: &ctx.params, aggregates: None, now_us: ctx.now_us };
    let is_col = |e: &Expr| {
        column_ref(e).and_then(|(q, n)| scope.resolve(q.as_deref(), &n).ok()).map(|r| r.0) == Some(offset + col)
    };
    let known = |e: &Expr| -> Option<Datum> {
        let v = env.eval(e).ok().filter(|v| !v.is_null())?;
        let cast = v.clone().cast(ty).ok()?;
        (cast.compare(&v).ok()? == Some(Ordering::Equal)).then_some(cast)
    };
    let (mut lo, mut hi) = (None, None);
    for c in conds {
        match c {
            Expr::BinaryOp { left, op, right } => {
                let (op, other) = if is_col(left) {
                    (op.clone(), right)
                } else if is_col(right) {
                    (flip(op), left)
                } else {
                    continue;
                };
                let Some(v) = known(other) else { continue };
                match op {
                    BinaryOperator::Gt => lo = lo.or(Some((v, false))),
                    BinaryOperator::GtEq => lo = lo.or(Some((v, true))),
                    BinaryOperator::Lt => hi = hi.or(Some((v, false))),
                    BinaryOperator::LtEq => hi = hi.or(Some((v, true))),
                    _ => {}
                }
            }
            Expr::Between { expr, negated: false, low, high } if is_col(expr) => {
                if let (Some(a), Some(b)) = (known(low), known(high)) {
                    lo = lo.or(Some((a, true)));
                    hi = hi.or(Some((b, true)));
                }
            }
            _ => {}
        }
    }
    Ok((lo, hi))
}

/// A bound on a key column: its value and whether it is inclusive.
type Bound = Option<(Datum, bool)>;

/// `a < b` read from b's side: `b > a`.
fn flip(op: &BinaryOperator) -> BinaryOperator {
    match op {
        BinaryOperator::Gt => BinaryOperator::Lt,
        BinaryOperator::GtEq => BinaryOperator::LtEq,
        BinaryOperator::Lt => BinaryOperator::Gt,
        BinaryOperator::LtEq => BinaryOperator::GtEq,
        other => other.clone(),
    }
}

/// The rows of `def` an access path reads (for an outer level of a join). For update, each row
/// of a range is read again under its write lock, and the row as locked is the one the
/// statement sees; every row of the range is locked (the join's conditions are checked only
/// when the inner levels are read).
fn fetch(tx: &mut Tx, def: &TableDef, access: &Access, for_update: bool) -> Result<Vec<Vec<Datum>>, SqlError> {
    let range = match access {
        Access::Point(key) if for_update => return Ok(tx.get_for_update(def, key)?.into_iter().collect()),
        Access::Point(key) => return Ok(tx.get(def, key)?.into_iter().collect()),
        Access::Range(range) => range,
    };
    let mut out = vec![];
    let mut keys = vec![];
    tx.scan_range(def, range, &mut |k, r| {
        if for_update {
            keys.push(k);
        } else {
            out.push(r);
        }
        if out.len().max(keys.len()) > STATEMENT_ROWS_MAX {
            return Err(too_many());
        }
        Ok(true)
    })?;
    for k in keys {
        out.extend(tx.get_for_update(def, &k)?);
    }
    Ok(out)
}

pub fn too_many() -> SqlError {
    SqlError::new("54000", format!("a statement may touch at most {STATEMENT_ROWS_MAX} rows"))
}

/// The values of the longest primary-key prefix of source `level` that `conds` fix by
/// equalities whose other side is known from the outer levels (or the parameters).
fn key_prefix(
    ctx: &StatementCtx,
    scope: &Scope,
    conds: &[Expr],
    level: usize,
    outer: &[Datum],
) -> Result<Vec<Datum>, SqlError> {
    let outer_scope = Scope::new(scope.sources[..level].to_vec());
    let offset: usize = scope.sources[..level].iter().map(|s| s.def.columns.len()).sum();
    let def = &scope.sources[level].def;
    let env = Env { scope: &outer_scope, row: outer, params: &ctx.params, aggregates: None, now_us: ctx.now_us };
    let mut prefix = vec![];
    'key: for &k in &def.primary_key {
        for c in conds {
            let Expr::BinaryOp { left, op: BinaryOperator::Eq, right } = c else { continue };
            for (col, other) in [(left, right), (right, left)] {
                let Some((q, name)) = column_ref(col) else { continue };
                if scope.resolve(q.as_deref(), &name).ok().map(|r| r.0) != Some(offset + k) {
                    continue;
                }
                // The other side must be computable before this level is read.
                if let Ok(v) = env.eval(other) {
                    if v.is_null() {
                        // `= NULL` matches nothing; the filter after the read says so.
                        break 'key;
                    }
                    prefix.push(v.cast(&def.columns[k].ty)?);
                    continue 'key;
                }
            }
        }
        break;
    }
    Ok(prefix)
}

/// One accumulating aggregate.
#[derive(Clone, Debug)]
struct Acc {
    func: String,
    count: i64,
    value: Datum,
}

impl Acc {
    fn add(&mut self, v: Datum, star: bool) -> Result<(), SqlError> {
        if v.is_null() && !star {
            return Ok(());
        }
        self.count += 1;
        self.value = match self.func.as_str() {
            "count" => Datum::Null,
            "sum" | "avg" if self.value.is_null() => v.cast(&SqlType::Numeric(None))?,
            "sum" | "avg" => {
                crate::expr::arith(&BinaryOperator::Plus, std::mem::replace(&mut self.value, Datum::Null), v)?
            }
            "min" | "max" if self.value.is_null() => v,
            "min" | "max" => {
                let o = v.compare(&self.value)?;
                let better = if self.func == "min" { o == Some(Ordering::Less) } else { o == Some(Ordering::Greater) };
                if better {
                    v
                } else {
                    std::mem::replace(&mut self.value, Datum::Null)
                }
            }
            other => return Err(SqlError::internal(format!("aggregate {other}"))),
        };
        Ok(())
    }

    fn result(&self, ty: &SqlType) -> Result<Datum, SqlError> {
        Ok(match self.func.as_str() {
            "count" => Datum::Int(self.count),
            "avg" if self.count == 0 => Datum::Null,
            "avg" => crate::expr::arith(&BinaryOperator::Divide, self.value.clone(), Datum::Int(self.count))?,
            "sum" if ty.is_int() => self.value.clone().cast(&SqlType::Int8)?,
            _ => self.value.clone(),
        })
    }
}

/// Aggregate calls in `e` (by their SQL text).
fn find_aggregates(e: &Expr, out: &mut Vec<sqlparser::ast::Function>) {
    match e {
        Expr::Function(f) if is_aggregate(f) && !out.iter().any(|g| g.to_string() == f.to_string()) => {
            out.push(f.clone())
        }
        Expr::Function(f) if is_aggregate(f) => {}
        Expr::Function(f) => {
            if let Ok((args, _)) = function_args(f) {
                args.into_iter().for_each(|a| find_aggregates(a, out));
            }
        }
        Expr::BinaryOp { left, right, .. } => {
            find_aggregates(left, out);
            find_aggregates(right, out);
        }
        Expr::UnaryOp { expr, .. } | Expr::Nested(expr) | Expr::Cast { expr, .. } => find_aggregates(expr, out),
        Expr::IsNull(e) | Expr::IsNotNull(e) => find_aggregates(e, out),
        Expr::Case { conditions, else_result, .. } => {
            for w in conditions {
                find_aggregates(&w.condition, out);
                find_aggregates(&w.result, out);
            }
            if let Some(e) = else_result {
                find_aggregates(e, out);
            }
        }
        _ => {}
    }
}

/// The projection: output expressions with their column names.
fn projection(items: &[SelectItem], scope: &Scope) -> Result<Vec<(Expr, String)>, SqlError> {
    let mut out = vec![];
    for item in items {
        match item {
            SelectItem::UnnamedExpr(e) => out.push((e.clone(), column_name(e))),
            SelectItem::ExprWithAlias { expr, alias } => out.push((expr.clone(), ident(alias))),
            SelectItem::Wildcard(_) => {
                for s in &scope.sources {
                    push_all(s, &mut out);
                }
            }
            SelectItem::QualifiedWildcard(kind, _) => {
                let q = kind.to_string().to_lowercase();
                let s = scope.sources.iter().find(|s| s.alias == q).ok_or_else(|| {
                    SqlError::new(sqlstate::UNDEFINED_TABLE, format!("missing FROM-clause entry for table \"{q}\""))
                })?;
                push_all(s, &mut out);
            }
            other => return Err(SqlError::unsupported(format!("select item {other}"))),
        }
    }
    Ok(out)
}

fn push_all(s: &Source, out: &mut Vec<(Expr, String)>) {
    for i in s.def.visible() {
        let c = &s.def.columns[i].name;
        let e = Expr::CompoundIdentifier(vec![
            sqlparser::ast::Ident::with_quote('"', &s.alias),
            sqlparser::ast::Ident::with_quote('"', c),
        ]);
        out.push((e, c.clone()));
    }
}

/// The name PostgreSQL gives an unaliased output column.
fn column_name(e: &Expr) -> String {
    match e {
        Expr::Function(f) => f.name.to_string().to_lowercase(),
        Expr::Cast { expr, .. } | Expr::Nested(expr) => column_name(expr),
        _ => column_ref(e).map(|(_, n)| n).unwrap_or_else(|| "?column?".into()),
    }
}

/// Runs a query.
/// Where a streamed query's result goes, as it is read.
pub trait RowSink {
    /// The result's columns, before any row.
    fn columns(&mut self, columns: &[Column]) -> Result<(), SqlError>;
    /// One result row. An error (the client went away) stops the statement.
    fn row(&mut self, row: Vec<Datum>) -> Result<(), SqlError>;
}

/// What [`run_to`] did: built the result, or handed it to the sink row by row.
pub enum Ran {
    Rows(Rows),
    /// This many rows went to the sink.
    Streamed(usize),
}

pub fn run(tx: &mut Tx, ctx: &StatementCtx, q: &Query) -> Result<Rows, SqlError> {
    match run_to(tx, ctx, q, None)? {
        Ran::Rows(r) => Ok(r),
        Ran::Streamed(_) => unreachable!("no sink, nothing streamed"),
    }
}

/// Runs a query. With a `sink`, a query whose rows need no sorting or grouping (no `ORDER BY`,
/// aggregate or `GROUP BY`) streams: each row goes to the sink as soon as it is read, so a
/// result of any size is sent in the pages it is read in, never held whole. The others are
/// built (bounded by [`STATEMENT_ROWS_MAX`]) and returned.
pub fn run_to(tx: &mut Tx, ctx: &StatementCtx, q: &Query, sink: Option<&mut dyn RowSink>) -> Result<Ran, SqlError> {
    if q.with.is_some() || q.fetch.is_some() || !q.pipe_operators.is_empty() {
        return Err(SqlError::unsupported("WITH, FETCH and pipe operators"));
    }
    let select = match q.body.as_ref() {
        SetExpr::Select(s) => s,
        SetExpr::Query(_) if !q.locks.is_empty() => {
            return Err(SqlError::unsupported("FOR UPDATE on a parenthesized query"))
        }
        SetExpr::Query(_) if q.order_by.is_some() || q.limit_clause.is_some() => {
            return Err(SqlError::unsupported("ORDER BY, LIMIT or OFFSET outside a parenthesized query"))
        }
        SetExpr::Query(inner) => return run_to(tx, ctx, inner, sink),
        other => return Err(SqlError::unsupported(format!("query form {}", set_expr_kind(other)))),
    };
    if select.distinct.is_some() || select.having.is_some() && matches!(select.group_by, GroupByExpr::All(_)) {
        return Err(SqlError::unsupported("DISTINCT"));
    }
    let mut conds = vec![];
    let mut sources = sources(tx, &select.from, &mut conds)?;
    lock_clauses(q, &mut sources)?;
    if let Some(w) = &select.selection {
        conjuncts(w, &mut conds);
    }
    let scope = Scope::new(sources.clone());
    let proj = projection(&select.projection, &scope)?;
    let group_by = match &select.group_by {
        GroupByExpr::Expressions(es, mods) if mods.is_empty() => es.clone(),
        other => return Err(SqlError::unsupported(format!("{other}"))),
    };
    let order: Vec<OrderByExpr> = match &q.order_by {
        Some(o) => match &o.kind {
            OrderByKind::Expressions(es) => es.clone(),
            OrderByKind::All(_) => return Err(SqlError::unsupported("ORDER BY ALL")),
        },
        None => vec![],
    };
    let mut aggs = vec![];
    proj.iter().for_each(|(e, _)| find_aggregates(e, &mut aggs));
    select.having.iter().for_each(|h| find_aggregates(h, &mut aggs));
    order.iter().for_each(|o| find_aggregates(&o.expr, &mut aggs));
    let columns = proj
        .iter()
        .map(|(e, name)| Ok(Column { name: name.clone(), ty: type_of(e, &scope, &ctx.param_types)? }))
        .collect::<Result<Vec<_>, SqlError>>()?;
    let grouped = !group_by.is_empty() || !aggs.is_empty();
    if grouped && !q.locks.is_empty() {
        // PostgreSQL's rule: the locked rows would not be the rows returned.
        return Err(SqlError::unsupported("FOR UPDATE with GROUP BY or aggregate functions"));
    }
    if let Some(sink) = sink.filter(|_| !grouped && order.is_empty()) {
        sink.columns(&columns)?;
        let (limit, offset) = limit_offset(ctx, q)?;
        return streamed_rows(tx, ctx, &scope, &conds, &proj, (offset, limit), sink).map(Ran::Streamed);
    }
    let mut out = if grouped {
        grouped_rows(tx, ctx, &scope, &conds, &group_by, &aggs, select.having.as_ref(), &proj)?
    } else {
        plain_rows(tx, ctx, &scope, &conds, &proj, limit_hint(ctx, q, &order)?)?
    };
    sort(ctx, &scope, &proj, &order, &mut out)?;
    let rows = cut(ctx, q, out.into_iter().map(|(r, _, _)| r).collect())?;
    Ok(Ran::Rows(Rows { columns, rows }))
}

/// The rows of a query without sorting or grouping, each to `sink` as it is read, `offset`
/// skipped and at most `limit` sent (the read stops there); how many were sent.
fn streamed_rows(
    tx: &mut Tx,
    ctx: &StatementCtx,
    scope: &Scope,
    conds: &[Expr],
    proj: &[(Expr, String)],
    (offset, limit): (usize, Option<usize>),
    sink: &mut dyn RowSink,
) -> Result<usize, SqlError> {
    let limit = limit.unwrap_or(usize::MAX);
    let (mut seen, mut sent) = (0usize, 0usize);
    if limit == 0 {
        return Ok(0);
    }
    for_each_match(tx, ctx, &scope.sources, conds, &mut |row| {
        seen += 1;
        if seen <= offset {
            return Ok(true);
        }
        let env = Env { scope, row, params: &ctx.params, aggregates: None, now_us: ctx.now_us };
        sink.row(proj.iter().map(|(e, _)| env.eval(e)).collect::<Result<Vec<_>, _>>()?)?;
        sent += 1;
        Ok(sent < limit)
    })?;
    Ok(sent)
}

/// `FOR UPDATE [OF t, ...]`: the sources it names (all without `OF`) are read for update, each
/// row under the lock its write would take, held to the end of the transaction on the engines
/// that lock. `FOR SHARE` and `NOWAIT` / `SKIP LOCKED` are refused (`0A000`); an `OF` naming no
/// table of the `FROM` list is `42P01`.
fn lock_clauses(q: &Query, sources: &mut [Source]) -> Result<(), SqlError> {
    for clause in &q.locks {
        if clause.nonblock.is_some() {
            return Err(SqlError::unsupported(format!("{clause} (NOWAIT and SKIP LOCKED)")));
        }
        if matches!(clause.lock_type, LockType::Share) {
            return Err(SqlError::unsupported("SELECT ... FOR SHARE"));
        }
        match &clause.of {
            None => sources.iter_mut().for_each(|s| s.for_update = true),
            Some(name) => {
                let name = object_name(name)?;
                let source = sources.iter_mut().find(|s| s.alias == name).ok_or_else(|| {
                    SqlError::new(
                        sqlstate::UNDEFINED_TABLE,
                        format!("relation \"{name}\" in FOR UPDATE clause not found in FROM clause"),
                    )
                })?;
                source.for_update = true;
            }
        }
    }
    Ok(())
}

fn set_expr_kind(e: &SetExpr) -> &'static str {
    match e {
        SetExpr::SetOperation { .. } => "UNION / INTERSECT / EXCEPT",
        SetExpr::Values(_) => "VALUES",
        _ => "other than SELECT",
    }
}

/// An output row, the input row it came from and its group's aggregates (for ORDER BY).
type OutRow = (Vec<Datum>, Vec<Datum>, Option<BTreeMap<String, Datum>>);

/// Without ORDER BY, a LIMIT stops the read early.
fn limit_hint(ctx: &StatementCtx, q: &Query, order: &[OrderByExpr]) -> Result<Option<usize>, SqlError> {
    if !order.is_empty() {
        return Ok(None);
    }
    let (limit, offset) = limit_offset(ctx, q)?;
    Ok(limit.map(|l| l + offset))
}

fn plain_rows(
    tx: &mut Tx,
    ctx: &StatementCtx,
    scope: &Scope,
    conds: &[Expr],
    proj: &[(Expr, String)],
    stop_at: Option<usize>,
) -> Result<Vec<OutRow>, SqlError> {
    let mut out: Vec<OutRow> = vec![];
    if stop_at == Some(0) {
        return Ok(out);
    }
    for_each_match(tx, ctx, &scope.sources, conds, &mut |row| {
        let env = Env { scope, row, params: &ctx.params, aggregates: None, now_us: ctx.now_us };
        let values = proj.iter().map(|(e, _)| env.eval(e)).collect::<Result<Vec<_>, _>>()?;
        out.push((values, row.to_vec(), None));
        if out.len() > STATEMENT_ROWS_MAX {
            return Err(too_many());
        }
        Ok(stop_at.is_none_or(|n| out.len() < n))
    })?;
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn grouped_rows(
    tx: &mut Tx,
    ctx: &StatementCtx,
    scope: &Scope,
    conds: &[Expr],
    group_by: &[Expr],
    aggs: &[sqlparser::ast::Function],
    having: Option<&Expr>,
    proj: &[(Expr, String)],
) -> Result<Vec<OutRow>, SqlError> {
    let fresh: Vec<Acc> =
        aggs.iter().map(|f| Acc { func: f.name.to_string().to_lowercase(), count: 0, value: Datum::Null }).collect();
    let mut groups: Vec<(Vec<Datum>, Vec<Acc>)> = vec![];
    let mut index: HashMap<Vec<Datum>, usize> = HashMap::new();
    for_each_match(tx, ctx, &scope.sources, conds, &mut |row| {
        let env = Env { scope, row, params: &ctx.params, aggregates: None, now_us: ctx.now_us };
        let key = group_by.iter().map(|e| env.eval(e)).collect::<Result<Vec<_>, _>>()?;
        let g = *index.entry(key).or_insert_with(|| {
            groups.push((row.to_vec(), fresh.clone()));
            groups.len() - 1
        });
        if groups.len() > STATEMENT_ROWS_MAX {
            return Err(too_many());
        }
        for (acc, f) in groups[g].1.iter_mut().zip(aggs) {
            let (args, star) = function_args(f)?;
            let v = match args.first() {
                Some(a) => env.eval(a)?,
                None if star => Datum::Bool(true),
                None => return Err(SqlError::new("42883", format!("{f} needs an argument"))),
            };
            acc.add(v, star)?;
        }
        Ok(true)
    })?;
    if groups.is_empty() && group_by.is_empty() {
        groups.push((vec![Datum::Null; scope.width()], fresh));
    }
    let mut out = vec![];
    for (rep, accs) in groups {
        let mut results = BTreeMap::new();
        for (acc, f) in accs.iter().zip(aggs) {
            let (args, _) = function_args(f)?;
            let ty = args.first().map(|a| type_of(a, scope, &ctx.param_types)).transpose()?.unwrap_or(SqlType::Int8);
            results.insert(f.to_string(), acc.result(&ty)?);
        }
        let env = Env { scope, row: &rep, params: &ctx.params, aggregates: Some(&results), now_us: ctx.now_us };
        if let Some(h) = having {
            if !env.truth(h)? {
                continue;
            }
        }
        let values = proj.iter().map(|(e, _)| env.eval(e)).collect::<Result<Vec<_>, _>>()?;
        out.push((values, rep, Some(results)));
    }
    Ok(out)
}

fn sort(
    ctx: &StatementCtx,
    scope: &Scope,
    proj: &[(Expr, String)],
    order: &[OrderByExpr],
    rows: &mut [OutRow],
) -> Result<(), SqlError> {
    if order.is_empty() {
        return Ok(());
    }
    let mut keyed: Vec<(Vec<Datum>, usize)> = Vec::with_capacity(rows.len());
    for (i, (values, input, aggs)) in rows.iter().enumerate() {
        let env = Env { scope, row: input, params: &ctx.params, aggregates: aggs.as_ref(), now_us: ctx.now_us };
        let mut key = vec![];
        for o in order {
            key.push(order_value(&env, proj, values, &o.expr)?);
        }
        keyed.push((key, i));
    }
    let mut failure = None;
    keyed.sort_by(|(a, _), (b, _)| {
        for ((x, y), o) in a.iter().zip(b).zip(order) {
            let desc = matches!(o.options.sort, Some(sqlparser::ast::OrderBySort::Desc));
            let nulls_first = o.options.nulls_first.unwrap_or(desc);
            let ord = match (x.is_null(), y.is_null()) {
                (true, true) => Ordering::Equal,
                (true, false) => return if nulls_first { Ordering::Less } else { Ordering::Greater },
                (false, true) => return if nulls_first { Ordering::Greater } else { Ordering::Less },
                _ => match x.compare(y) {
                    Ok(o) => o.unwrap_or(Ordering::Equal),
                    Err(e) => {
                        failure.get_or_insert(e);
                        Ordering::Equal
                    }
                },
            };
            let ord = if desc { ord.reverse() } else { ord };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        Ordering::Equal
    });
    if let Some(e) = failure {
        return Err(e);
    }
    let order_of: Vec<usize> = keyed.into_iter().map(|(_, i)| i).collect();
    let mut taken: Vec<Option<OutRow>> = rows.iter_mut().map(|r| Some(std::mem::take(r))).collect();
    for (slot, i) in rows.iter_mut().zip(order_of) {
        *slot = taken[i].take().expect("each row placed once");
    }
    Ok(())
}

/// An ORDER BY item: an output column's position, an output column's name, or an expression.
fn order_value(env: &Env, proj: &[(Expr, String)], values: &[Datum], e: &Expr) -> Result<Datum, SqlError> {
    if let Expr::Value(v) = e {
        if let sqlparser::ast::Value::Number(n, _) = &v.value {
            let k: usize = n.parse().map_err(|_| SqlError::syntax(format!("ORDER BY position {n}")))?;
            return values
                .get(k.wrapping_sub(1))
                .cloned()
                .ok_or_else(|| SqlError::new("42P10", format!("ORDER BY position {k} is not in select list")));
        }
    }
    if let Expr::Identifier(i) = e {
        if let Some(pos) = proj.iter().position(|(_, name)| *name == ident(i)) {
            return Ok(values[pos].clone());
        }
    }
    env.eval(e)
}

fn limit_offset(ctx: &StatementCtx, q: &Query) -> Result<(Option<usize>, usize), SqlError> {
    let scope = Scope::default();
    let env = Env { scope: &scope, row: &[], params: &ctx.params, aggregates: None, now_us: ctx.now_us };
    let count = |e: &Expr| -> Result<usize, SqlError> {
        match env.eval(e)?.cast(&SqlType::Int8)? {
            Datum::Int(n) if n >= 0 => Ok(n as usize),
            Datum::Null => Ok(usize::MAX),
            _ => Err(SqlError::new("2201W", "LIMIT and OFFSET must not be negative".into())),
        }
    };
    Ok(match &q.limit_clause {
        None => (None, 0),
        Some(LimitClause::LimitOffset { limit, offset, limit_by }) if limit_by.is_empty() => {
            (limit.as_ref().map(count).transpose()?, offset.as_ref().map(|o| count(&o.value)).transpose()?.unwrap_or(0))
        }
        Some(other) => return Err(SqlError::unsupported(format!("{other}"))),
    })
}

fn cut(ctx: &StatementCtx, q: &Query, rows: Vec<Vec<Datum>>) -> Result<Vec<Vec<Datum>>, SqlError> {
    let (limit, offset) = limit_offset(ctx, q)?;
    Ok(rows.into_iter().skip(offset).take(limit.unwrap_or(usize::MAX)).collect())
}

/// The result columns of a query, without running it.
pub fn describe(tx: &mut Tx, ctx: &StatementCtx, q: &Query) -> Result<Vec<Column>, SqlError> {
    let select = match q.body.as_ref() {
        SetExpr::Select(s) => s,
        SetExpr::Query(inner) => return describe(tx, ctx, inner),
        other => return Err(SqlError::unsupported(format!("query form {}", set_expr_kind(other)))),
    };
    let mut conds = vec![];
    let scope = Scope::new(sources(tx, &select.from, &mut conds)?);
    projection(&select.projection, &scope)?
        .iter()
        .map(|(e, name)| Ok(Column { name: name.clone(), ty: type_of(e, &scope, &ctx.param_types)? }))
        .collect()
}
