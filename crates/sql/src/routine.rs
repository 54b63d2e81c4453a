//! Stored procedures in PostgreSQL's idiom:
//!
//! ```sql
//! CREATE [OR REPLACE] PROCEDURE transfer(src INT, dst INT, amount INT) LANGUAGE sql AS $$
//!   UPDATE acct SET bal = bal - amount WHERE id = src;
//!   UPDATE acct SET bal = bal + amount WHERE id = dst;
//! $$;
//! CALL transfer(1, 2, 10);
//! DROP PROCEDURE [IF EXISTS] transfer;
//! ```
//!
//! A procedure is a catalog row ([`PROC_TID`]: its name, parameters and body), written by
//! the transaction that creates it, so it is durable and the same on every node, as a table's
//! definition is. Its body is `INSERT`, `UPDATE`, `DELETE` and `SELECT` statements; a
//! parameter is named in the body by its name or as `$n` (a name shadows a column of the same
//! name, so name parameters apart from columns). `CALL` runs the body in the caller's
//! transaction — its own transaction outside `BEGIN` — so the whole body commits or none of
//! it does, in one request from the client. What a `SELECT` in the body returns is not sent.
//!
//! The parser has no PostgreSQL `CREATE PROCEDURE` with a string body, but has `CREATE
//! FUNCTION`'s; [`rewrite`] reads the one as the other (a function without `RETURNS`, which
//! PostgreSQL refuses, is how a procedure arrives here).

use crate::catalog::object_name;
use crate::error::SqlError;
use crate::store::Tx;
use crate::types::SqlType;
use litmus_core::Value;
use serde::{Deserialize, Serialize};
use sqlparser::ast::{CreateFunction, CreateFunctionBody, Expr, Statement};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Token, Tokenizer};

/// `tid` of procedure rows in [`ROWS_TABLE`].
pub const PROC_TID: i64 = 2;
/// Most parameters of a procedure.
pub const PARAMS_MAX: usize = 100;

/// A stored procedure, as the catalog keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcDef {
    pub name: String,
    pub params: Vec<(String, SqlType)>,
    /// The body, each parameter written `$n`.
    pub body: String,
    pub class: ProcClass,
}

/// What kind of transaction a `CALL` runs (`SET litmus.transaction_class = '...'` in the
/// `CREATE PROCEDURE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProcClass {
    /// `'acid'`, the default: the body is one transaction (or part of the caller's).
    #[default]
    Acid,
    /// `'base'`: a Salt BASE transaction (Salt §4), each `COMMIT` in the body ending an
    /// alkaline subtransaction ([`crate::call_one_round`]).
    Base,
}

/// The setting that names a procedure's transaction class.
pub const CLASS_SETTING: &str = "litmus.transaction_class";

/// `sql` with each `CREATE [OR REPLACE] PROCEDURE` read as `CREATE ... FUNCTION` (see the
/// module doc); `None` when there is none or the text does not tokenize (the parser reports
/// that).
pub fn rewrite(sql: &str) -> Option<String> {
    if !sql.to_ascii_lowercase().contains("procedure") {
        return None;
    }
    let mut tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let words: Vec<usize> = (0..tokens.len()).filter(|&i| !matches!(tokens[i], Token::Whitespace(_))).collect();
    let keyword = |tokens: &[Token], i: usize, k: Keyword| matches!(&tokens[i], Token::Word(w) if w.keyword == k);
    let mut found = false;
    for (n, &i) in words.iter().enumerate() {
        if !keyword(&tokens, i, Keyword::PROCEDURE) {
            continue;
        }
        let create_before = match n {
            0 => false,
            _ if keyword(&tokens, words[n - 1], Keyword::CREATE) => true,
            _ => {
                n >= 3
                    && keyword(&tokens, words[n - 1], Keyword::REPLACE)
                    && keyword(&tokens, words[n - 3], Keyword::CREATE)
            }
        };
        if create_before {
            tokens[i] = Token::make_keyword("FUNCTION");
            found = true;
        }
    }
    found.then(|| tokens.iter().map(ToString::to_string).collect())
}

/// The procedure a `CREATE PROCEDURE` (arriving as [`CreateFunction`] without a return type)
/// defines; what it cannot run is refused before anything is written.
pub fn proc_def(cf: &CreateFunction) -> Result<ProcDef, SqlError> {
    if cf.return_type.is_some() {
        return Err(SqlError::unsupported("CREATE FUNCTION (stored procedures are CREATE PROCEDURE ... LANGUAGE sql)"));
    }
    let name = object_name(&cf.name)?;
    match &cf.language {
        Some(l) if l.value.eq_ignore_ascii_case("sql") => {}
        Some(l) => return Err(SqlError::unsupported(format!("procedures in LANGUAGE {l} (LANGUAGE sql only)"))),
        None => return Err(SqlError::new("42P13", "no language specified (LANGUAGE sql)".into())),
    }
    if cf.behavior.is_some() || cf.security.is_some() || cf.using.is_some() {
        return Err(SqlError::unsupported(format!("procedure options other than LANGUAGE and SET {CLASS_SETTING}")));
    }
    let mut class = ProcClass::Acid;
    for p in &cf.set_params {
        let value = match &p.value {
            sqlparser::ast::FunctionSetValue::Values(v) if v.len() == 1 => {
                v[0].to_string().trim_matches('\'').to_lowercase()
            }
            _ => String::new(),
        };
        class = match (p.name.to_string().to_lowercase().as_str(), value.as_str()) {
            (CLASS_SETTING, "acid") => ProcClass::Acid,
            (CLASS_SETTING, "base") => ProcClass::Base,
            (CLASS_SETTING, other) => {
                return Err(SqlError::new("22023", format!("{CLASS_SETTING} is 'acid' or 'base', not '{other}'")))
            }
            (other, _) => return Err(SqlError::unsupported(format!("procedure setting {other}"))),
        };
    }
    let mut params: Vec<(String, SqlType)> = Vec::new();
    for a in cf.args.iter().flatten() {
        if a.mode.is_some() || a.default_expr.is_some() {
            return Err(SqlError::unsupported("OUT / INOUT parameters and parameter defaults"));
        }
        let pname = a.name.as_ref().map(|n| n.value.to_lowercase()).unwrap_or_default();
        if !pname.is_empty() && params.iter().any(|(n, _)| *n == pname) {
            return Err(SqlError::new("42P13", format!("parameter name \"{pname}\" used more than once")));
        }
        params.push((pname, SqlType::from_ast(&a.data_type)?));
    }
    if params.len() > PARAMS_MAX {
        return Err(SqlError::new("54023", format!("procedures take at most {PARAMS_MAX} parameters")));
    }
    let text = match &cf.function_body {
        Some(CreateFunctionBody::AsBeforeOptions { body, .. } | CreateFunctionBody::AsAfterOptions(body)) => {
            string_of(body)?
        }
        _ => return Err(SqlError::unsupported("a procedure body other than AS '...' or AS $$...$$")),
    };
    let body = with_placeholders(&text, &params)?;
    for stmt in crate::parse(&body)? {
        check_body_statement(&stmt, class)?;
    }
    Ok(ProcDef { name, params, body, class })
}

fn string_of(e: &Expr) -> Result<String, SqlError> {
    use sqlparser::ast::Value as V;
    match e {
        Expr::Value(v) => match &v.value {
            V::SingleQuotedString(s) => Ok(s.clone()),
            V::DollarQuotedString(d) => Ok(d.value.clone()),
            other => Err(SqlError::syntax(format!("a procedure body is a string, not {other}"))),
        },
        other => Err(SqlError::syntax(format!("a procedure body is a string, not {other}"))),
    }
}

/// The body with every unquoted word naming a parameter replaced by `$n`.
fn with_placeholders(body: &str, params: &[(String, SqlType)]) -> Result<String, SqlError> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, body)
        .tokenize()
        .map_err(|e| SqlError::syntax(format!("syntax error in the procedure body: {e}")))?;
    let mut out = String::with_capacity(body.len());
    let mut after_period = false;
    for t in &tokens {
        let param = match t {
            Token::Word(w) if w.quote_style.is_none() && !after_period => {
                params.iter().position(|(n, _)| !n.is_empty() && *n == w.value.to_lowercase())
            }
            _ => None,
        };
        match param {
            Some(i) => out.push_str(&format!("${}", i + 1)),
            None => out.push_str(&t.to_string()),
        }
        if !matches!(t, Token::Whitespace(_)) {
            after_period = matches!(t, Token::Period);
        }
    }
    Ok(out)
}

fn check_body_statement(stmt: &Statement, class: ProcClass) -> Result<(), SqlError> {
    match stmt {
        Statement::Query(_) | Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_) => Ok(()),
        // Ends an alkaline subtransaction of a BASE procedure.
        Statement::Commit { chain: false, .. } if class == ProcClass::Base => Ok(()),
        Statement::Commit { .. } => Err(SqlError::unsupported(format!(
            "COMMIT in the body of a procedure that is not BASE (SET {CLASS_SETTING} = 'base')"
        ))),
        other => {
            let text = other.to_string();
            let head: Vec<&str> = text.split_whitespace().take(2).collect();
            Err(SqlError::unsupported(format!(
                "{} in a procedure body (INSERT, UPDATE, DELETE and SELECT only)",
                head.join(" ")
            )))
        }
    }
}

/// The key of procedure `name`'s catalog row.
pub fn key(name: &str) -> [Value; 2] {
    [Value::Int(PROC_TID), Value::Bytes(name.as_bytes().into())]
}

/// A procedure from its catalog row.
pub fn decode(name: &str, bytes: &[u8]) -> Result<ProcDef, SqlError> {
    postcard::from_bytes(bytes).map_err(|e| SqlError::internal(format!("procedure {name}: {e}")))
}

impl Tx<'_> {
    /// The procedure `name`, if any.
    pub fn find_procedure(&mut self, name: &str) -> Result<Option<ProcDef>, SqlError> {
        match self.read_system(&key(name))? {
            Some(bytes) => decode(name, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Records (or replaces) a procedure.
    pub fn put_procedure(&mut self, def: &ProcDef) -> Result<(), SqlError> {
        let bytes = postcard::to_allocvec(def).map_err(|e| SqlError::internal(format!("encoding a procedure: {e}")))?;
        let [tid, pk] = key(&def.name);
        self.write_system(vec![tid, pk, Value::Bytes(bytes.into())])
    }

    pub fn drop_procedure(&mut self, name: &str) -> Result<(), SqlError> {
        self.delete_system(&key(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_create_procedure_is_read_as_a_function() {
        let sql =
            "create or replace procedure p() language sql as $$ SELECT 'create procedure' $$; SELECT procedure FROM t";
        let out = rewrite(sql).unwrap();
        assert!(out.starts_with("create or replace FUNCTION p()"), "{out}");
        assert!(out.contains("$$ SELECT 'create procedure' $$; SELECT procedure FROM t"), "{out}");
        assert_eq!(rewrite("SELECT procedure FROM t"), None);
        assert_eq!(rewrite("CALL p()"), None);
    }

    #[test]
    fn parameters_become_placeholders_but_qualified_and_quoted_names_stay() {
        let params = vec![("src".to_string(), SqlType::Int4), ("amount".to_string(), SqlType::Int4)];
        let out = with_placeholders("UPDATE a SET bal = a.amount - AMOUNT WHERE \"src\" = src", &params).unwrap();
        assert_eq!(out, "UPDATE a SET bal = a.amount - $2 WHERE \"src\" = $1");
    }
}
