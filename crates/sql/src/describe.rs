//! Describing a statement before it runs (the extended query protocol's `Describe`): the types
//! of its parameters, inferred from the column each is compared with or assigned to (text
//! when nothing says), and its result columns.

use crate::catalog::object_name;
use crate::error::SqlError;
use crate::expr::{type_of, Scope, Source};
use crate::store::Tx;
use crate::types::SqlType;
use crate::{Column, StatementCtx};
use sqlparser::ast::{
    AssignmentTarget, Expr, FromTable, LimitClause, SetExpr, Statement, TableFactor, TableObject, Value,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

/// The number of parameters: the largest `$n`.
pub fn placeholders(stmt: &Statement) -> usize {
    let text = stmt.to_string();
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, &text).tokenize().unwrap_or_default();
    tokens
        .iter()
        .filter_map(|t| match t {
            Token::Placeholder(p) => p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

fn placeholder(e: &Expr) -> Option<usize> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Placeholder(p) => p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()).filter(|n| *n >= 1),
            _ => None,
        },
        Expr::Nested(e) => placeholder(e),
        _ => None,
    }
}

fn assign(out: &mut [Option<SqlType>], n: usize, ty: SqlType) {
    if let Some(slot) = out.get_mut(n - 1) {
        slot.get_or_insert(ty);
    }
}

/// Types the parameters `e` compares with a typed expression.
fn infer(e: &Expr, scope: &Scope, out: &mut [Option<SqlType>]) {
    let ty = |x: &Expr| type_of(x, scope, &[]).ok();
    match e {
        Expr::BinaryOp { left, right, .. } => {
            for (p, other) in [(left, right), (right, left)] {
                if let (Some(n), None, Some(t)) = (placeholder(p), placeholder(other), ty(other)) {
                    assign(out, n, t);
                }
            }
            infer(left, scope, out);
            infer(right, scope, out);
        }
        Expr::Between { expr, low, high, .. } => {
            if let Some(t) = ty(expr) {
                for b in [low, high] {
                    if let Some(n) = placeholder(b) {
                        assign(out, n, t.clone());
                    }
                }
            }
        }
        Expr::InList { expr, list, .. } => {
            if let Some(t) = ty(expr) {
                list.iter().filter_map(placeholder).for_each(|n| assign(out, n, t.clone()));
            }
        }
        Expr::Cast { expr, data_type, .. } => {
            if let (Some(n), Ok(t)) = (placeholder(expr), SqlType::from_ast(data_type)) {
                assign(out, n, t);
            }
        }
        Expr::Nested(e) | Expr::UnaryOp { expr: e, .. } | Expr::IsNull(e) | Expr::IsNotNull(e) => infer(e, scope, out),
        _ => {}
    }
}

fn table_scope(tx: &mut Tx, relation: &TableFactor) -> Result<Scope, SqlError> {
    let TableFactor::Table { name, alias, .. } = relation else { return Ok(Scope::default()) };
    let tname = object_name(name)?;
    let def = tx.table(&tname)?;
    let alias = alias.as_ref().map(|a| crate::catalog::ident(&a.name)).unwrap_or(tname);
    Ok(Scope::new(vec![Source { alias, def, for_update: false }]))
}

/// Parameter types and result columns of `stmt` (`count` parameters).
pub fn describe(
    tx: &mut Tx,
    ctx: &StatementCtx,
    stmt: &Statement,
    count: usize,
) -> Result<(Vec<SqlType>, Option<Vec<Column>>), SqlError> {
    let mut out: Vec<Option<SqlType>> = vec![None; count];
    let mut columns = None;
    match stmt {
        Statement::Query(q) => {
            if let SetExpr::Select(s) = q.body.as_ref() {
                let mut conds = vec![];
                let scope = Scope::new(crate::query::sources(tx, &s.from, &mut conds)?);
                conds.iter().chain(s.selection.iter()).chain(s.having.iter()).for_each(|e| infer(e, &scope, &mut out));
            }
            if let Some(LimitClause::LimitOffset { limit, offset, .. }) = &q.limit_clause {
                for e in limit.iter().chain(offset.iter().map(|o| &o.value)) {
                    if let Some(n) = placeholder(e) {
                        assign(&mut out, n, SqlType::Int8);
                    }
                }
            }
            columns = Some(crate::query::describe(tx, ctx, q)?);
        }
        Statement::Insert(ins) => {
            let TableObject::TableName(name) = &ins.table else {
                return Err(SqlError::unsupported("INSERT INTO a table function"));
            };
            let def = tx.table(&object_name(name)?)?;
            let targets: Vec<usize> = if ins.columns.is_empty() {
                def.visible()
            } else {
                ins.columns.iter().map(|c| def.column(&object_name(c)?)).collect::<Result<_, _>>()?
            };
            if let Some(SetExpr::Values(v)) = ins.source.as_ref().map(|q| q.body.as_ref()) {
                for row in &v.rows {
                    for (e, &t) in row.content.iter().zip(&targets) {
                        if let Some(n) = placeholder(e) {
                            assign(&mut out, n, def.columns[t].ty.clone());
                        }
                    }
                }
            }
        }
        Statement::Update(up) => {
            let scope = table_scope(tx, &up.table.relation)?;
            for a in &up.assignments {
                if let (AssignmentTarget::ColumnName(c), Some(n)) = (&a.target, placeholder(&a.value)) {
                    if let Ok(t) = type_of(&Expr::Identifier(sqlparser::ast::Ident::new(object_name(c)?)), &scope, &[])
                    {
                        assign(&mut out, n, t);
                    }
                }
                infer(&a.value, &scope, &mut out);
            }
            up.selection.iter().for_each(|e| infer(e, &scope, &mut out));
        }
        Statement::Delete(del) => {
            let (FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t)) = &del.from;
            if let Some(first) = t.first() {
                let scope = table_scope(tx, &first.relation)?;
                del.selection.iter().for_each(|e| infer(e, &scope, &mut out));
            }
        }
        _ => {}
    }
    Ok((out.into_iter().map(|t| t.unwrap_or(SqlType::Text)).collect(), columns))
}
