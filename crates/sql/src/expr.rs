//! Expressions: evaluation over a row and typing for result descriptions.
//!
//! A [`Scope`] names the columns a row holds (each source table under its alias, in order);
//! an [`Env`] is that scope with one row's values, the statement's parameters, the results of
//! its aggregates (for a grouped query) and the statement's timestamp. SQL's three-valued logic
//! holds: a comparison with NULL is NULL and a `WHERE` keeps only true rows.

use crate::catalog::{ident, TableDef};
use crate::error::{sqlstate, SqlError};
use crate::types::{rescale, Datum, SqlType, NUMERIC_SCALE_MAX};
use sqlparser::ast::{
    BinaryOperator as B, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, UnaryOperator, Value as V,
};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// One source of columns: a table under its alias.
#[derive(Clone, Debug)]
pub struct Source {
    pub alias: String,
    pub def: TableDef,
    /// Its rows are read for update (the target of an `UPDATE` or `DELETE`, a table `SELECT
    /// ... FOR UPDATE` names): under the lock their write takes (`Transaction::read_for_update`).
    pub for_update: bool,
}

/// The columns a row holds: each source's columns in order, concatenated.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    pub sources: Vec<Source>,
}

impl Scope {
    pub fn new(sources: Vec<Source>) -> Scope {
        Scope { sources }
    }

    /// The position in the concatenated row of `[qualifier.]name`, and its type.
    pub fn resolve(&self, qualifier: Option<&str>, name: &str) -> Result<(usize, SqlType), SqlError> {
        let mut offset = 0;
        let mut found = None;
        for s in &self.sources {
            if qualifier.is_none_or(|q| q == s.alias) {
                if let Some(i) = s.def.columns.iter().position(|c| c.name == name) {
                    if found.is_some() {
                        return Err(SqlError::new("42702", format!("column reference \"{name}\" is ambiguous")));
                    }
                    found = Some((offset + i, s.def.columns[i].ty.clone()));
                }
            }
            offset += s.def.columns.len();
        }
        found.ok_or_else(|| match qualifier {
            Some(q) if !self.sources.iter().any(|s| s.alias == q) => {
                SqlError::new("42P01", format!("missing FROM-clause entry for table \"{q}\""))
            }
            Some(q) => SqlError::no_column(&format!("{q}.{name}")),
            None => SqlError::no_column(name),
        })
    }

    pub fn width(&self) -> usize {
        self.sources.iter().map(|s| s.def.columns.len()).sum()
    }
}

/// What an expression is evaluated against.
pub struct Env<'a> {
    pub scope: &'a Scope,
    pub row: &'a [Datum],
    pub params: &'a [Datum],
    /// Results of a grouped query's aggregates, by the aggregate's SQL text.
    pub aggregates: Option<&'a BTreeMap<String, Datum>>,
    /// The statement's timestamp (microseconds since 1970): `now()`, `CURRENT_TIMESTAMP`.
    pub now_us: i64,
}

/// The column reference of an expression, if it is one: (qualifier, name).
pub fn column_ref(e: &Expr) -> Option<(Option<String>, String)> {
    match e {
        Expr::Identifier(i) => Some((None, ident(i))),
        Expr::CompoundIdentifier(parts) if parts.len() == 2 => Some((Some(ident(&parts[0])), ident(&parts[1]))),
        Expr::Nested(e) => column_ref(e),
        _ => None,
    }
}

/// The aggregate functions.
pub const AGGREGATES: [&str; 5] = ["count", "sum", "min", "max", "avg"];

/// Whether `f` names an aggregate.
pub fn is_aggregate(f: &sqlparser::ast::Function) -> bool {
    AGGREGATES.contains(&f.name.to_string().to_lowercase().as_str())
}

/// The arguments of a function call (`*` is an empty list with `star`).
pub fn function_args(f: &sqlparser::ast::Function) -> Result<(Vec<&Expr>, bool), SqlError> {
    match &f.args {
        FunctionArguments::None => Ok((vec![], false)),
        FunctionArguments::List(list) => {
            let mut out = vec![];
            let mut star = false;
            for a in &list.args {
                match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => out.push(e),
                    FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => star = true,
                    other => return Err(SqlError::unsupported(format!("function argument {other}"))),
                }
            }
            Ok((out, star))
        }
        FunctionArguments::Subquery(_) => Err(SqlError::unsupported("subqueries")),
    }
}

impl Env<'_> {
    /// Evaluates `e` to a value.
    pub fn eval(&self, e: &Expr) -> Result<Datum, SqlError> {
        match e {
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) => {
                let (q, name) = column_ref(e).ok_or_else(|| SqlError::unsupported(format!("name {e}")))?;
                let (i, _) = self.scope.resolve(q.as_deref(), &name)?;
                self.row.get(i).cloned().ok_or_else(|| SqlError::internal(format!("column {name} outside the row")))
            }
            Expr::Value(v) => self.literal(&v.value),
            Expr::Nested(e) => self.eval(e),
            Expr::BinaryOp { left, op, right } => self.binary(left, op, right),
            Expr::UnaryOp { op, expr } => unary(op, self.eval(expr)?),
            Expr::IsNull(e) => Ok(Datum::Bool(self.eval(e)?.is_null())),
            Expr::IsNotNull(e) => Ok(Datum::Bool(!self.eval(e)?.is_null())),
            Expr::IsTrue(e) => Ok(Datum::Bool(self.eval(e)? == Datum::Bool(true))),
            Expr::IsFalse(e) => Ok(Datum::Bool(self.eval(e)? == Datum::Bool(false))),
            Expr::Between { expr, negated, low, high } => {
                let v = self.eval(expr)?;
                let ge = cmp_bool(v.compare(&self.eval(low)?)?, |o| o != Ordering::Less);
                let le = cmp_bool(v.compare(&self.eval(high)?)?, |o| o != Ordering::Greater);
                let both = and(ge, le);
                Ok(if *negated { not(both)? } else { both })
            }
            Expr::InList { expr, list, negated } => {
                let v = self.eval(expr)?;
                let mut out = Datum::Bool(false);
                for item in list {
                    match v.compare(&self.eval(item)?)? {
                        Some(Ordering::Equal) => {
                            out = Datum::Bool(true);
                            break;
                        }
                        None => out = Datum::Null,
                        Some(_) => {}
                    }
                }
                Ok(if *negated { not(out)? } else { out })
            }
            Expr::Like { negated, expr, pattern, escape_char: None, any: false } => {
                let (v, p) = (self.eval(expr)?, self.eval(pattern)?);
                if v.is_null() || p.is_null() {
                    return Ok(Datum::Null);
                }
                let m = like(&v.to_text(), &p.to_text());
                Ok(Datum::Bool(m != *negated))
            }
            Expr::Cast { expr, data_type, .. } => self.eval(expr)?.cast(&SqlType::from_ast(data_type)?),
            Expr::TypedString(t) => self.literal(&t.value.value)?.cast(&SqlType::from_ast(&t.data_type)?),
            Expr::Case { operand, conditions, else_result, .. } => {
                self.case(operand.as_deref(), conditions, else_result.as_deref())
            }
            Expr::Function(f) => self.function(f),
            other => Err(SqlError::unsupported(format!("expression {other}"))),
        }
    }

    /// Evaluates a condition: true, or false for false and NULL.
    pub fn truth(&self, e: &Expr) -> Result<bool, SqlError> {
        match self.eval(e)? {
            Datum::Bool(b) => Ok(b),
            Datum::Null => Ok(false),
            other => Err(SqlError::new(
                sqlstate::DATATYPE_MISMATCH,
                format!("argument of WHERE must be type boolean, not type {}", other.natural_type()),
            )),
        }
    }

    fn literal(&self, v: &V) -> Result<Datum, SqlError> {
        Ok(match v {
            V::Number(n, _) => match n.parse::<i64>() {
                Ok(i) => Datum::Int(i),
                Err(_) => {
                    let (units, scale) = crate::types::parse_numeric(n)?;
                    Datum::Numeric { units, scale }
                }
            },
            V::SingleQuotedString(s) | V::EscapedStringLiteral(s) | V::DoubleQuotedString(s) => Datum::Text(s.clone()),
            V::HexStringLiteral(h) => Datum::Text(format!("\\x{h}")).cast(&SqlType::Bytea)?,
            V::Boolean(b) => Datum::Bool(*b),
            V::Null => Datum::Null,
            V::Placeholder(p) => {
                let n: usize =
                    p.trim_start_matches('$').parse().map_err(|_| SqlError::unsupported(format!("placeholder {p}")))?;
                self.params
                    .get(n.wrapping_sub(1))
                    .cloned()
                    .ok_or_else(|| SqlError::new(sqlstate::UNDEFINED_PARAMETER, format!("there is no parameter {p}")))?
            }
            other => return Err(SqlError::unsupported(format!("literal {other}"))),
        })
    }

    fn binary(&self, left: &Expr, op: &B, right: &Expr) -> Result<Datum, SqlError> {
        match op {
            B::And => {
                let l = self.eval(left)?;
                if l == Datum::Bool(false) {
                    return Ok(l);
                }
                Ok(and(bool_of(l)?, bool_of(self.eval(right)?)?))
            }
            B::Or => {
                let l = self.eval(left)?;
                if l == Datum::Bool(true) {
                    return Ok(l);
                }
                let (l, r) = (bool_of(l)?, bool_of(self.eval(right)?)?);
                Ok(not(and(not(l)?, not(r)?))?)
            }
            _ => binary_values(op, self.eval(left)?, self.eval(right)?),
        }
    }

    fn case(
        &self,
        operand: Option<&Expr>,
        conditions: &[sqlparser::ast::CaseWhen],
        otherwise: Option<&Expr>,
    ) -> Result<Datum, SqlError> {
        let subject = operand.map(|o| self.eval(o)).transpose()?;
        for w in conditions {
            let hit = match &subject {
                Some(s) => s.compare(&self.eval(&w.condition)?)? == Some(Ordering::Equal),
                None => self.truth(&w.condition)?,
            };
            if hit {
                return self.eval(&w.result);
            }
        }
        otherwise.map_or(Ok(Datum::Null), |e| self.eval(e))
    }

    fn function(&self, f: &sqlparser::ast::Function) -> Result<Datum, SqlError> {
        let name = f.name.to_string().to_lowercase();
        if is_aggregate(f) {
            let aggs = self.aggregates.ok_or_else(|| {
                SqlError::new(sqlstate::GROUPING_ERROR, format!("aggregate function {name} is not allowed here"))
            })?;
            return aggs
                .get(&f.to_string())
                .cloned()
                .ok_or_else(|| SqlError::internal(format!("aggregate {f} not computed")));
        }
        let (args, _) = function_args(f)?;
        let vals: Vec<Datum> = args.iter().map(|a| self.eval(a)).collect::<Result<_, _>>()?;
        let one = || -> Result<&Datum, SqlError> {
            match vals.as_slice() {
                [v] => Ok(v),
                _ => Err(SqlError::new("42883", format!("function {name} takes one argument"))),
            }
        };
        Ok(match name.as_str() {
            "now" | "current_timestamp" | "localtimestamp" | "transaction_timestamp" | "statement_timestamp" => {
                Datum::Timestamp(self.now_us)
            }
            "coalesce" => vals.into_iter().find(|v| !v.is_null()).unwrap_or(Datum::Null),
            "lower" => text_fn(one()?, |s| s.to_lowercase()),
            "upper" => text_fn(one()?, |s| s.to_uppercase()),
            "length" | "char_length" => match one()? {
                Datum::Null => Datum::Null,
                v => Datum::Int(v.to_text().chars().count() as i64),
            },
            "abs" => match one()? {
                Datum::Int(i) => Datum::Int(i.checked_abs().ok_or_else(|| SqlError::out_of_range("bigint"))?),
                Datum::Numeric { units, scale } => Datum::Numeric { units: units.abs(), scale: *scale },
                Datum::Null => Datum::Null,
                v => return Err(SqlError::new("42883", format!("function abs({}) does not exist", v.natural_type()))),
            },
            "version" => Datum::Text(crate::SERVER_VERSION_STRING.into()),
            "current_database" | "current_schema" => Datum::Text("public".into()),
            _ => return Err(SqlError::new("42883", format!("function {name} does not exist or is not supported"))),
        })
    }
}

fn text_fn(v: &Datum, f: impl Fn(&str) -> String) -> Datum {
    match v {
        Datum::Null => Datum::Null,
        v => Datum::Text(f(&v.to_text())),
    }
}

fn like(s: &str, p: &str) -> bool {
    let (s, p): (Vec<char>, Vec<char>) = (s.chars().collect(), p.chars().collect());
    fn go(s: &[char], p: &[char]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some('%') => (0..=s.len()).any(|i| go(&s[i..], &p[1..])),
            Some('_') => !s.is_empty() && go(&s[1..], &p[1..]),
            Some(c) => s.first() == Some(c) && go(&s[1..], &p[1..]),
        }
    }
    go(&s, &p)
}

fn cmp_bool(o: Option<Ordering>, f: impl Fn(Ordering) -> bool) -> Datum {
    o.map_or(Datum::Null, |o| Datum::Bool(f(o)))
}

fn bool_of(d: Datum) -> Result<Datum, SqlError> {
    match d {
        Datum::Bool(_) | Datum::Null => Ok(d),
        Datum::Text(_) => d.cast(&SqlType::Bool),
        other => Err(SqlError::new(
            sqlstate::DATATYPE_MISMATCH,
            format!("argument must be type boolean, not {}", other.natural_type()),
        )),
    }
}

fn and(a: Datum, b: Datum) -> Datum {
    match (a, b) {
        (Datum::Bool(false), _) | (_, Datum::Bool(false)) => Datum::Bool(false),
        (Datum::Bool(true), Datum::Bool(true)) => Datum::Bool(true),
        _ => Datum::Null,
    }
}

fn not(a: Datum) -> Result<Datum, SqlError> {
    Ok(match bool_of(a)? {
        Datum::Bool(b) => Datum::Bool(!b),
        _ => Datum::Null,
    })
}

fn unary(op: &UnaryOperator, v: Datum) -> Result<Datum, SqlError> {
    match (op, v) {
        (_, Datum::Null) => Ok(Datum::Null),
        (UnaryOperator::Not, v) => not(v),
        (UnaryOperator::Plus, v @ (Datum::Int(_) | Datum::Numeric { .. })) => Ok(v),
        (UnaryOperator::Minus, Datum::Int(i)) => {
            i.checked_neg().map(Datum::Int).ok_or_else(|| SqlError::out_of_range("bigint"))
        }
        (UnaryOperator::Minus, Datum::Numeric { units, scale }) => Ok(Datum::Numeric { units: -units, scale }),
        (op, v) => Err(SqlError::new("42883", format!("operator does not exist: {op} {}", v.natural_type()))),
    }
}

/// A binary operator over two values (not AND / OR).
pub fn binary_values(op: &B, l: Datum, r: Datum) -> Result<Datum, SqlError> {
    let cmp = |f: fn(Ordering) -> bool| -> Result<Datum, SqlError> { Ok(cmp_bool(l.compare(&r)?, f)) };
    match op {
        B::Eq => cmp(|o| o == Ordering::Equal),
        B::NotEq => cmp(|o| o != Ordering::Equal),
        B::Lt => cmp(|o| o == Ordering::Less),
        B::LtEq => cmp(|o| o != Ordering::Greater),
        B::Gt => cmp(|o| o == Ordering::Greater),
        B::GtEq => cmp(|o| o != Ordering::Less),
        B::StringConcat => {
            if l.is_null() || r.is_null() {
                return Ok(Datum::Null);
            }
            Ok(Datum::Text(l.to_text() + &r.to_text()))
        }
        B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo => arith(op, l, r),
        other => Err(SqlError::unsupported(format!("operator {other}"))),
    }
}

/// Arithmetic on integers and numerics (text operands are read as numbers).
pub fn arith(op: &B, l: Datum, r: Datum) -> Result<Datum, SqlError> {
    let number = |d: Datum| -> Result<Datum, SqlError> {
        match d {
            Datum::Text(t) => Datum::Text(t).cast(&SqlType::Numeric(None)),
            d => Ok(d),
        }
    };
    match (number(l)?, number(r)?) {
        (Datum::Null, _) | (_, Datum::Null) => Ok(Datum::Null),
        (Datum::Int(a), Datum::Int(b)) => int_arith(op, a, b),
        (a @ (Datum::Int(_) | Datum::Numeric { .. }), b @ (Datum::Int(_) | Datum::Numeric { .. })) => {
            numeric_arith(op, a, b)
        }
        (a, b) => Err(SqlError::new(
            "42883",
            format!("operator does not exist: {} {op} {}", a.natural_type(), b.natural_type()),
        )),
    }
}

fn int_arith(op: &B, a: i64, b: i64) -> Result<Datum, SqlError> {
    let zero = || SqlError::new(sqlstate::DIVISION_BY_ZERO, "division by zero".into());
    let v = match op {
        B::Plus => a.checked_add(b),
        B::Minus => a.checked_sub(b),
        B::Multiply => a.checked_mul(b),
        B::Divide if b == 0 => return Err(zero()),
        B::Divide => a.checked_div(b),
        B::Modulo if b == 0 => return Err(zero()),
        B::Modulo => a.checked_rem(b),
        _ => unreachable!("int_arith on {op}"),
    };
    v.map(Datum::Int).ok_or_else(|| SqlError::out_of_range("bigint"))
}

fn numeric_arith(op: &B, a: Datum, b: Datum) -> Result<Datum, SqlError> {
    let units = |d: &Datum| match d {
        Datum::Int(i) => (*i as i128, 0u32),
        Datum::Numeric { units, scale } => (*units, *scale),
        _ => unreachable!("numeric_arith on a non-number"),
    };
    let ((x, sx), (y, sy)) = (units(&a), units(&b));
    let overflow = || SqlError::out_of_range("numeric");
    let s = sx.max(sy);
    let (xa, ya) = (rescale(x, sx, s)?, rescale(y, sy, s)?);
    let (units, scale) = match op {
        B::Plus => (xa.checked_add(ya).ok_or_else(overflow)?, s),
        B::Minus => (xa.checked_sub(ya).ok_or_else(overflow)?, s),
        B::Multiply => (x.checked_mul(y).ok_or_else(overflow)?, sx + sy),
        B::Divide | B::Modulo if y == 0 => {
            return Err(SqlError::new(sqlstate::DIVISION_BY_ZERO, "division by zero".into()))
        }
        B::Divide => {
            let out = s.max(NUMERIC_SCALE_MAX.min(16));
            let num = rescale(xa, 0, out)?;
            (num / ya, out)
        }
        B::Modulo => (xa % ya, s),
        _ => unreachable!("numeric_arith on {op}"),
    };
    if scale > NUMERIC_SCALE_MAX {
        return Ok(Datum::Numeric { units: rescale(units, scale, NUMERIC_SCALE_MAX)?, scale: NUMERIC_SCALE_MAX });
    }
    Ok(Datum::Numeric { units, scale })
}

/// The type an expression's values have, for a result's description (`params`: the types of
/// the statement's parameters as far as known).
pub fn type_of(e: &Expr, scope: &Scope, params: &[SqlType]) -> Result<SqlType, SqlError> {
    Ok(match e {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => {
            let (q, name) = column_ref(e).ok_or_else(|| SqlError::unsupported(format!("name {e}")))?;
            scope.resolve(q.as_deref(), &name)?.1
        }
        Expr::Nested(e) => type_of(e, scope, params)?,
        Expr::Value(v) => match &v.value {
            V::Number(n, _) if n.parse::<i32>().is_ok() => SqlType::Int4,
            V::Number(n, _) if n.parse::<i64>().is_ok() => SqlType::Int8,
            V::Number(..) => SqlType::Numeric(None),
            V::Boolean(_) => SqlType::Bool,
            V::Placeholder(p) => {
                let n: usize = p.trim_start_matches('$').parse().unwrap_or(0);
                params.get(n.wrapping_sub(1)).cloned().unwrap_or(SqlType::Text)
            }
            _ => SqlType::Text,
        },
        Expr::BinaryOp { left, op, right } => match op {
            B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo => {
                let (l, r) = (type_of(left, scope, params)?, type_of(right, scope, params)?);
                match (&l, &r) {
                    (SqlType::Int2 | SqlType::Int4, SqlType::Int2 | SqlType::Int4) => SqlType::Int4,
                    _ if l.is_int() && r.is_int() => SqlType::Int8,
                    _ => SqlType::Numeric(None),
                }
            }
            B::StringConcat => SqlType::Text,
            _ => SqlType::Bool,
        },
        Expr::UnaryOp { op: UnaryOperator::Not, .. } => SqlType::Bool,
        Expr::UnaryOp { expr, .. } => type_of(expr, scope, params)?,
        Expr::IsNull(_) | Expr::IsNotNull(_) | Expr::Between { .. } | Expr::InList { .. } | Expr::Like { .. } => {
            SqlType::Bool
        }
        Expr::IsTrue(_) | Expr::IsFalse(_) => SqlType::Bool,
        Expr::Cast { data_type, .. } => SqlType::from_ast(data_type)?,
        Expr::TypedString(t) => SqlType::from_ast(&t.data_type)?,
        Expr::Case { conditions, .. } => match conditions.first() {
            Some(w) => type_of(&w.result, scope, params)?,
            None => SqlType::Text,
        },
        Expr::Function(f) => function_type(f, scope, params)?,
        _ => SqlType::Text,
    })
}

fn function_type(f: &sqlparser::ast::Function, scope: &Scope, params: &[SqlType]) -> Result<SqlType, SqlError> {
    let name = f.name.to_string().to_lowercase();
    let (args, _) = function_args(f)?;
    let arg = || args.first().map(|a| type_of(a, scope, params)).transpose();
    Ok(match name.as_str() {
        "count" | "length" | "char_length" => SqlType::Int8,
        "sum" => match arg()? {
            Some(SqlType::Int2 | SqlType::Int4) => SqlType::Int8,
            Some(SqlType::Int8) | Some(SqlType::Numeric(_)) => SqlType::Numeric(None),
            Some(t) => t,
            None => SqlType::Numeric(None),
        },
        "avg" => SqlType::Numeric(None),
        "min" | "max" | "abs" | "coalesce" => arg()?.unwrap_or(SqlType::Text),
        "now" | "current_timestamp" | "localtimestamp" | "transaction_timestamp" | "statement_timestamp" => {
            SqlType::Timestamp
        }
        _ => SqlType::Text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    fn eval(sql: &str, params: &[Datum]) -> Result<Datum, SqlError> {
        let e = Parser::new(&PostgreSqlDialect {}).try_with_sql(sql).unwrap().parse_expr().unwrap();
        let scope = Scope::default();
        Env { scope: &scope, row: &[], params, aggregates: None, now_us: 0 }.eval(&e)
    }

    #[test]
    fn null_is_unknown_in_comparisons_and_logic() {
        assert_eq!(eval("NULL = 1", &[]).unwrap(), Datum::Null);
        assert_eq!(eval("NULL AND false", &[]).unwrap(), Datum::Bool(false));
        assert_eq!(eval("NULL OR true", &[]).unwrap(), Datum::Bool(true));
        assert_eq!(eval("1 IN (2, NULL)", &[]).unwrap(), Datum::Null);
        assert_eq!(eval("1 IN (1, NULL)", &[]).unwrap(), Datum::Bool(true));
    }

    #[test]
    fn arithmetic_keeps_exactness_and_reports_errors() {
        assert_eq!(eval("1.50 + 2", &[]).unwrap().to_text(), "3.50");
        assert_eq!(eval("7 / 2", &[]).unwrap(), Datum::Int(3));
        assert_eq!(eval("1 / 0", &[]).unwrap_err().code, "22012");
        assert_eq!(eval("9223372036854775807 + 1", &[]).unwrap_err().code, "22003");
        assert_eq!(eval("$1 + 1", &[Datum::Int(41)]).unwrap(), Datum::Int(42));
        assert_eq!(eval("$2", &[Datum::Int(41)]).unwrap_err().code, "42P02");
    }

    #[test]
    fn like_and_case_and_cast() {
        assert_eq!(eval("'hello' LIKE 'h%o'", &[]).unwrap(), Datum::Bool(true));
        assert_eq!(eval("CASE WHEN 1 > 2 THEN 'a' ELSE 'b' END", &[]).unwrap(), Datum::Text("b".into()));
        assert_eq!(eval("'12'::int + 1", &[]).unwrap(), Datum::Int(13));
        assert_eq!(eval("'x'::int", &[]).unwrap_err().code, "22P02");
    }
}
