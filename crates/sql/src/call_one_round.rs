//! `CALL` as one one-round transaction (Granola §2), on the engines that run one-round
//! transactions only.
//!
//! A procedure declares its whole transaction up front, which is what a one-round transaction
//! needs. When every statement of its body writes rows named by their whole primary key —
//!
//! * `UPDATE t SET c = expr, ... WHERE k1 = e1 AND ... [AND more conditions]`, the `ei` of the
//!   arguments and constants only, the key's columns left alone;
//! * `DELETE FROM t WHERE k1 = e1 AND ... [AND more conditions]`;
//! * `INSERT INTO t [(cols)] VALUES (...), ...` of arguments and constants, without
//!   `ON CONFLICT`;
//!
//! in tables not replicated — the session plans the call as one fragment per row, routed to
//! the partition holding it, plus one catalog fragment per definition the plan was made from
//! (the procedure's and each table's). Each participant runs its fragments on its own rows:
//! an `UPDATE` fragment reads its row, keeps it if the other conditions fail, computes the new
//! row and checks it (types, `NOT NULL`, `CHECK`); an `INSERT` fragment inserts its checked
//! row (an existing key votes abort, `23505`); a catalog fragment votes abort when the
//! definition changed since the plan was made (a retryable abort: the session plans again).
//! The engine decides the transaction in one round (`Coordinated`: any participant may vote
//! abort), so no statement runs twice and no read goes out before the writes.
//!
//! Any other body, and any `CALL` inside `BEGIN`, runs as an ordinary transaction
//! ([`crate::one_round`]). On the other engines a procedure runs in the session's transaction,
//! except a BASE procedure ([`crate::routine::ProcClass::Base`]): planned the same way, its
//! `COMMIT`s grouping the row writes, it runs as [`BASE_PROCEDURE`], one alkaline
//! subtransaction per group (Salt §4).

use crate::catalog::{decode_def, encode_key, object_name, TableDef, TablePartitioning, CATALOG_TID, ROWS_TABLE};
use crate::dml::{check_row, full_row, parse_expr};
use crate::error::{sqlstate, SqlError};
use crate::expr::{column_ref, Env, Scope, Source};
use crate::query::conjuncts;
use crate::routine::{ProcDef, PROC_TID};
use crate::store::Tx;
use crate::types::Datum;
use crate::StatementCtx;
use litmus_core::hash::FxHasher;
use litmus_core::{AbortReason, ColumnType, Error, Value};
use litmus_protocol::fragment::{FragmentCall, OneRoundClass};
use litmus_protocol::procedure::Ctx;
use litmus_protocol::Registry;
use serde::{Deserialize, Serialize};
use sqlparser::ast::{AssignmentTarget, BinaryOperator, Expr, FromTable, SetExpr, Statement, TableFactor, TableObject};
use std::collections::BTreeMap;
use std::hash::Hasher;

/// The one-round procedure a planned `CALL` runs: its one argument is the postcard bytes of
/// its fragment calls.
pub const CALL_PROCEDURE: &str = "litmus.sql_call";
/// A fragment writing one row ([`RowWrite`]).
pub const WRITE_FRAGMENT: &str = "litmus.sql_write";
/// A fragment comparing one catalog row with the digest the plan was made from.
pub const CATALOG_FRAGMENT: &str = "litmus.sql_catalog";
/// The BASE procedure a `CALL` of a BASE procedure runs: its one argument is the postcard
/// bytes of its [`Planned`] row writes.
pub const BASE_PROCEDURE: &str = "litmus.sql_base";
/// The procedure a `CALL` of writes by key runs, as one transaction, on the engines that run
/// stored procedures op by op: its one argument is the postcard bytes of its [`Planned`] row
/// writes.
pub const PROC_PROCEDURE: &str = "litmus.sql_proc";

/// Adds the one-round `CALL` procedure and its fragments to a server's registry.
pub fn register(registry: &mut Registry) {
    registry.register_fragment(WRITE_FRAGMENT, vec![ColumnType::Bytes], |ctx: Ctx, args: Vec<Value>| async move {
        write_fragment(ctx, args).await
    });
    let params = vec![ColumnType::Int, ColumnType::Bytes, ColumnType::Int];
    registry.register_fragment(CATALOG_FRAGMENT, params, |ctx: Ctx, args: Vec<Value>| async move {
        catalog_fragment(ctx, args).await
    });
    registry.register_with(
        BASE_PROCEDURE,
        vec![ColumnType::Bytes],
        litmus_protocol::procedure::ProcOptions::base(),
        |ctx: Ctx, args: Vec<Value>| async move { base_body(ctx, args).await },
    );
    registry.register(PROC_PROCEDURE, vec![ColumnType::Bytes], |ctx: Ctx, args: Vec<Value>| async move {
        proc_body(ctx, args).await
    });
    registry.register_one_round(CALL_PROCEDURE, vec![ColumnType::Bytes], OneRoundClass::Coordinated, |args| {
        let Some(Value::Bytes(b)) = args.first() else {
            return Err(litmus_core::InvalidInput::MalformedFrame("a planned CALL without its plan".into()).into());
        };
        postcard::from_bytes::<Vec<FragmentCall>>(b)
            .map_err(|e| litmus_core::InvalidInput::MalformedFrame(format!("a planned CALL: {e}")).into())
    });
}

/// The digest of a catalog row's payload, as the plan and the catalog fragment compute it.
fn digest(bytes: &[u8]) -> i64 {
    let mut h = FxHasher::default();
    h.write_usize(bytes.len());
    h.write(bytes);
    h.finish() as i64
}

/// One row written by a fragment.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RowWrite {
    pub def: TableDef,
    pub params: Vec<Datum>,
    pub now_us: i64,
    pub kind: RowWriteKind,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum RowWriteKind {
    /// The row at `pk`, if it satisfies every `filter`, with each column set to its expression
    /// (SQL text over the old row, named by `alias`, and the parameters).
    Update { pk: Vec<u8>, alias: String, sets: Vec<(usize, String)>, filter: Vec<String> },
    /// Delete the row at `pk` if it satisfies every `filter`.
    Delete { pk: Vec<u8>, alias: String, filter: Vec<String> },
    /// Insert this checked row.
    Insert { row: Vec<Datum> },
}

/// A SQL error as it crosses the wire from a fragment: its SQLSTATE leads the message of a
/// user abort ([`SqlError::from`] reads it back).
fn to_core(e: SqlError) -> Error {
    match e.code {
        sqlstate::SERIALIZATION_FAILURE => Error::Abort(AbortReason::Other(e.message)),
        code => Error::UserAbort(format!("{code}: {}", e.message)),
    }
}

fn stored_payload(row: &litmus_core::Row) -> Result<Vec<u8>, Error> {
    match row.last() {
        Some(Value::Bytes(b)) => Ok(b.to_vec()),
        other => Err(Error::Internal(format!("a stored SQL row ends in {other:?}"))),
    }
}

async fn write_fragment(ctx: Ctx, args: Vec<Value>) -> litmus_protocol::procedure::ProcResult {
    let Some(Value::Bytes(b)) = args.first() else {
        return Err(litmus_core::InvalidInput::MalformedFrame("a row write without its piece".into()).into());
    };
    let w: RowWrite =
        postcard::from_bytes(b).map_err(|e| litmus_core::InvalidInput::MalformedFrame(format!("a row write: {e}")))?;
    apply(&ctx, &w).await
}

/// Writes one planned row: at its partition (a fragment) or through a procedure's context
/// (a BASE procedure), which routes each operation.
async fn apply(ctx: &Ctx, w: &RowWrite) -> litmus_protocol::procedure::ProcResult {
    let table = w.def.physical_table();
    let sctx =
        StatementCtx { params: w.params.clone(), param_types: vec![], now_us: w.now_us, refuse_coordination: false };
    match &w.kind {
        RowWriteKind::Insert { row } => {
            let mut stored = w.def.stored_key(&w.def.key_of(row).map_err(to_core)?);
            stored.push(Value::Bytes(crate::catalog::encode_row(row).map_err(to_core)?.into()));
            match ctx.insert(table, stored).await {
                Err(Error::Invalid(litmus_core::InvalidInput::DuplicateKey(_))) => {
                    Err(to_core(crate::store::duplicate(&w.def, row)))
                }
                other => other.map(|()| vec![Value::Int(1)]),
            }
        }
        RowWriteKind::Update { pk, alias, filter, .. } | RowWriteKind::Delete { pk, alias, filter } => {
            let key = w.def.stored_key(pk);
            let Some(stored) = ctx.read(table, &key).await? else { return Ok(vec![Value::Int(0)]) };
            let old = crate::catalog::decode_row(&stored_payload(&stored)?, &w.def).map_err(to_core)?;
            let source = Source { alias: alias.clone(), def: w.def.clone(), for_update: true };
            let scope = Scope::new(vec![source]);
            let env = Env { scope: &scope, row: &old, params: &w.params, aggregates: None, now_us: w.now_us };
            for f in filter {
                if !env.truth(&parse_expr(f).map_err(to_core)?).map_err(to_core)? {
                    return Ok(vec![Value::Int(0)]);
                }
            }
            let RowWriteKind::Update { sets, .. } = &w.kind else {
                ctx.delete(table, &key).await?;
                return Ok(vec![Value::Int(1)]);
            };
            let mut new = old.clone();
            for (col, e) in sets {
                new[*col] = env.eval(&parse_expr(e).map_err(to_core)?).map_err(to_core)?;
            }
            let new = check_row(&sctx, &w.def, new).map_err(to_core)?;
            let mut row = key;
            row.push(Value::Bytes(crate::catalog::encode_row(&new).map_err(to_core)?.into()));
            ctx.write(table, row).await?;
            Ok(vec![Value::Int(1)])
        }
    }
}

async fn catalog_fragment(ctx: Ctx, args: Vec<Value>) -> litmus_protocol::procedure::ProcResult {
    let [Value::Int(tid), Value::Bytes(name), Value::Int(expected)] = &args[..] else {
        return Err(litmus_core::InvalidInput::MalformedFrame(format!("a catalog compare {args:?}")).into());
    };
    same_definition(&ctx, *tid, name, *expected).await?;
    Ok(vec![])
}

/// The BASE procedure a `CALL` of a BASE procedure runs (Salt §4): each group of its planned
/// row writes is one alkaline subtransaction, the first also comparing the catalog rows the
/// plan was made from. The coordinator re-runs it whole after a crash (Salt §6.2): its one
/// argument holds the plan.
async fn base_body(ctx: Ctx, args: Vec<Value>) -> litmus_protocol::procedure::ProcResult {
    let Some(Value::Bytes(b)) = args.first() else {
        return Err(litmus_core::InvalidInput::MalformedFrame("a BASE CALL without its plan".into()).into());
    };
    let planned: Planned = postcard::from_bytes(b)
        .map_err(|e| litmus_core::InvalidInput::MalformedFrame(format!("a BASE CALL's plan: {e}")))?;
    for (i, group) in planned.groups.iter().enumerate() {
        if i > 0 && group.is_empty() {
            continue;
        }
        ctx.begin_alkaline().await?;
        if i == 0 {
            for (tid, name, d) in &planned.catalog {
                same_definition(&ctx, *tid, name.as_bytes(), *d).await?;
            }
        }
        for w in group {
            apply(&ctx, w).await?;
        }
        ctx.end_alkaline().await?;
    }
    Ok(vec![])
}

/// The body of [`PROC_PROCEDURE`]: the catalog compares, then every planned row write, as one
/// transaction of the engine's.
async fn proc_body(ctx: Ctx, args: Vec<Value>) -> litmus_protocol::procedure::ProcResult {
    let Some(Value::Bytes(b)) = args.first() else {
        return Err(litmus_core::InvalidInput::MalformedFrame("a CALL without its plan".into()).into());
    };
    let planned: Planned = postcard::from_bytes(b)
        .map_err(|e| litmus_core::InvalidInput::MalformedFrame(format!("a CALL's plan: {e}")))?;
    for (tid, name, d) in &planned.catalog {
        same_definition(&ctx, *tid, name.as_bytes(), *d).await?;
    }
    for w in planned.groups.iter().flatten() {
        apply(&ctx, w).await?;
    }
    Ok(vec![])
}

/// A retryable abort unless the catalog row `(tid, name)` still has the digest `expected`.
async fn same_definition(ctx: &Ctx, tid: i64, name: &[u8], expected: i64) -> Result<(), Error> {
    let row = ctx.read(ROWS_TABLE, &[Value::Int(tid), Value::Bytes(name.into())]).await?;
    let now = match row {
        Some(r) => Some(digest(&stored_payload(&r)?)),
        None => None,
    };
    if now != Some(expected) {
        let name = String::from_utf8_lossy(name);
        return Err(Error::Abort(AbortReason::Other(format!(
            "the definition of {name} changed while a CALL was planned from it"
        ))));
    }
    Ok(())
}

/// What a plan was made from: catalog rows and their digests.
struct Planner<'a, 't> {
    tx: &'a mut Tx<'t>,
    read: BTreeMap<(i64, String), i64>,
    defs: BTreeMap<String, TableDef>,
}

impl Planner<'_, '_> {
    fn table(&mut self, name: &str) -> Result<TableDef, SqlError> {
        if let Some(d) = self.defs.get(name) {
            return Ok(d.clone());
        }
        let bytes = self
            .tx
            .read_system(&[Value::Int(CATALOG_TID), Value::Bytes(name.as_bytes().into())])?
            .ok_or_else(|| SqlError::no_table(name))?;
        let def = decode_def(&bytes)?;
        self.read.insert((CATALOG_TID, name.to_string()), digest(&bytes));
        self.defs.insert(name.to_string(), def.clone());
        Ok(def)
    }
}

/// The value of `e` when it depends on the arguments and constants only.
fn constant(e: &Expr, ctx: &StatementCtx) -> Option<Datum> {
    let scope = Scope::default();
    Env { scope: &scope, row: &[], params: &ctx.params, aggregates: None, now_us: ctx.now_us }.eval(e).ok()
}

/// A row named by its encoded key, and the conditions it must also meet (SQL text).
type KeyAndFilter = (Vec<u8>, Vec<String>);

/// The encoded key a `WHERE` fixes by equalities on every key column, and the conditions left;
/// `None` when it does not fix the whole key.
fn key_of_where(
    def: &TableDef,
    alias: &str,
    selection: Option<&Expr>,
    ctx: &StatementCtx,
) -> Result<Option<KeyAndFilter>, SqlError> {
    let mut conds = vec![];
    if let Some(w) = selection {
        conjuncts(w, &mut conds);
    }
    let mut key: Vec<Option<Datum>> = vec![None; def.primary_key.len()];
    let mut filter = vec![];
    for c in conds {
        let bound = match &c {
            Expr::BinaryOp { left, op: BinaryOperator::Eq, right } => {
                [(left, right), (right, left)].into_iter().find_map(|(col, val)| {
                    let (q, name) = column_ref(col)?;
                    if q.is_some_and(|q| q != alias && q != def.name) {
                        return None;
                    }
                    let at = def.primary_key.iter().position(|&k| def.columns[k].name == name)?;
                    Some((at, constant(val, ctx)?))
                })
            }
            _ => None,
        };
        match bound {
            Some((at, v)) if key[at].is_none() => key[at] = Some(v.cast(&def.columns[def.primary_key[at]].ty)?),
            _ => filter.push(c.to_string()),
        }
    }
    let Some(values) = key.into_iter().collect::<Option<Vec<Datum>>>() else { return Ok(None) };
    Ok(Some((encode_key(&values)?, filter)))
}

fn target(up_table: &TableFactor) -> Option<(String, Option<String>)> {
    let TableFactor::Table { name, alias, .. } = up_table else { return None };
    Some((object_name(name).ok()?, alias.as_ref().map(|a| crate::catalog::ident(&a.name))))
}

/// A body planned as row writes — in groups, a BASE body's `COMMIT`s ending each — and the
/// catalog rows the plan was made from, with their digests.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Planned {
    pub groups: Vec<Vec<RowWrite>>,
    pub catalog: Vec<(i64, String, i64)>,
}

/// Plans `def`'s body, bound to `ctx.params`, as one one-round transaction: the fragment calls
/// of [`CALL_PROCEDURE`], or `None` when the body is not of the forms in the module doc.
/// `proc_bytes` is the procedure's catalog row as read.
pub fn plan(
    tx: &mut Tx,
    def: &ProcDef,
    proc_bytes: &[u8],
    ctx: &StatementCtx,
) -> Result<Option<Vec<FragmentCall>>, SqlError> {
    let Some(planned) = plan_writes(tx, def, proc_bytes, ctx)? else { return Ok(None) };
    fragment_calls(planned).map(Some)
}

/// The fragment calls of [`CALL_PROCEDURE`] that run `planned` as one one-round transaction:
/// a [`WRITE_FRAGMENT`] per row, a [`CATALOG_FRAGMENT`] per definition.
pub fn fragment_calls(planned: Planned) -> Result<Vec<FragmentCall>, SqlError> {
    let mut calls = vec![];
    for w in planned.groups.into_iter().flatten() {
        let pk = match &w.kind {
            RowWriteKind::Update { pk, .. } | RowWriteKind::Delete { pk, .. } => pk.clone(),
            RowWriteKind::Insert { row } => w.def.key_of(row)?,
        };
        let route = w.def.stored_key(&pk);
        let table = w.def.physical_table();
        let bytes = postcard::to_allocvec(&w).map_err(|e| SqlError::internal(format!("encoding a row write: {e}")))?;
        calls.push(FragmentCall::new(WRITE_FRAGMENT, table, route, vec![Value::Bytes(bytes.into())]));
    }
    for (tid, name, d) in planned.catalog {
        let key = vec![Value::Int(tid), Value::Bytes(name.as_bytes().into())];
        let args = vec![Value::Int(tid), Value::Bytes(name.as_bytes().into()), Value::Int(d)];
        calls.push(FragmentCall::new(CATALOG_FRAGMENT, ROWS_TABLE, key, args));
    }
    Ok(calls)
}

/// Plans `def`'s body as row writes (see [`Planned`]), or `None` when it is not of the forms in
/// the module doc.
pub fn plan_writes(
    tx: &mut Tx,
    def: &ProcDef,
    proc_bytes: &[u8],
    ctx: &StatementCtx,
) -> Result<Option<Planned>, SqlError> {
    let mut p = Planner { tx, read: BTreeMap::new(), defs: BTreeMap::new() };
    p.read.insert((PROC_TID, def.name.clone()), digest(proc_bytes));
    let mut groups: Vec<Vec<(TableDef, RowWriteKind)>> = vec![vec![]];
    for stmt in crate::parse(&def.body)? {
        let writes = groups.last_mut().expect("one group at least");
        match &stmt {
            Statement::Commit { .. } => {
                groups.push(vec![]);
                continue;
            }
            Statement::Update(up) => {
                if up.from.is_some() || up.returning.is_some() || up.limit.is_some() || !up.table.joins.is_empty() {
                    return Ok(None);
                }
                let Some((name, alias)) = target(&up.table.relation) else { return Ok(None) };
                let t = p.table(&name)?;
                let alias = alias.unwrap_or_else(|| name.clone());
                let mut sets = vec![];
                for a in &up.assignments {
                    let AssignmentTarget::ColumnName(c) = &a.target else { return Ok(None) };
                    let col = t.column(&object_name(c)?)?;
                    if t.primary_key.contains(&col) || t.columns[col].hidden {
                        return Ok(None); // a key that moves is two writes on two partitions
                    }
                    sets.push((col, a.value.to_string()));
                }
                let Some((pk, filter)) = key_of_where(&t, &alias, up.selection.as_ref(), ctx)? else {
                    return Ok(None);
                };
                writes.push((t, RowWriteKind::Update { pk, alias, sets, filter }));
            }
            Statement::Delete(del) => {
                if del.using.is_some() || del.returning.is_some() || del.limit.is_some() {
                    return Ok(None);
                }
                let (FromTable::WithFromKeyword(ts) | FromTable::WithoutKeyword(ts)) = &del.from;
                let [one] = &ts[..] else { return Ok(None) };
                if !one.joins.is_empty() {
                    return Ok(None);
                }
                let Some((name, alias)) = target(&one.relation) else { return Ok(None) };
                let t = p.table(&name)?;
                let alias = alias.unwrap_or_else(|| name.clone());
                let Some((pk, filter)) = key_of_where(&t, &alias, del.selection.as_ref(), ctx)? else {
                    return Ok(None);
                };
                writes.push((t, RowWriteKind::Delete { pk, alias, filter }));
            }
            Statement::Insert(ins) => {
                if ins.returning.is_some() || ins.on.is_some() {
                    return Ok(None);
                }
                let TableObject::TableName(name) = &ins.table else { return Ok(None) };
                let t = p.table(&object_name(name)?)?;
                let targets: Vec<usize> = if ins.columns.is_empty() {
                    t.visible()
                } else {
                    ins.columns.iter().map(|c| t.column(&object_name(c)?)).collect::<Result<_, _>>()?
                };
                let Some(source) = ins.source.as_ref() else { return Ok(None) };
                let SetExpr::Values(v) = source.body.as_ref() else { return Ok(None) };
                for r in &v.rows {
                    let Some(values) = r.content.iter().map(|e| constant(e, ctx)).collect::<Option<Vec<_>>>() else {
                        return Ok(None);
                    };
                    if values.len() > targets.len() {
                        return Err(SqlError::syntax("INSERT has more expressions than target columns"));
                    }
                    let row = check_row(ctx, &t, full_row(ctx, &t, &targets, values)?)?;
                    writes.push((t.clone(), RowWriteKind::Insert { row }));
                }
            }
            _ => return Ok(None),
        }
    }
    let mut planned = Planned { groups: vec![], catalog: vec![] };
    for group in groups {
        let mut writes = vec![];
        for (t, kind) in group {
            if t.partitioning == TablePartitioning::Replicated {
                return Ok(None); // a write of every copy: one fragment per partition, not per row
            }
            writes.push(RowWrite { def: t, params: ctx.params.clone(), now_us: ctx.now_us, kind });
        }
        planned.groups.push(writes);
    }
    planned.catalog = p.read.into_iter().map(|((tid, name), d)| (tid, name, d)).collect();
    Ok(Some(planned))
}
