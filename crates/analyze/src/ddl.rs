//! The DDL: a small subset of SQL `CREATE TABLE`, parsed with `sqlparser` (never by hand).
//!
//! Standard SQL, as any database reads it:
//!
//! ```sql
//! CREATE TABLE account (
//!   id      INT NOT NULL PRIMARY KEY,          -- PRIMARY KEY / UNIQUE     (Claims 3, 4)
//!   owner   INT NOT NULL REFERENCES person,    -- FOREIGN KEY              (Claims 6, 7)
//!   kind    TEXT NOT NULL CHECK (kind IN ('checking', 'savings')),  -- equality (Claim 1)
//!   balance DECIMAL NOT NULL CHECK (balance >= 0),                  -- threshold (Claims 11–14)
//!   serial  INT GENERATED ALWAYS AS IDENTITY,  -- AUTO_INCREMENT           (Claim 5)
//!   FOREIGN KEY (owner) REFERENCES person (id) ON DELETE CASCADE    --     (Claim 8)
//! );
//! ```
//!
//! LitmusDB's extensions are clearly marked: they are function calls whose names start with
//! `LITMUS_`, written inside standard `CHECK (...)` constraints (and one `DEFAULT`), so the
//! script stays parseable SQL:
//!
//! | extension | meaning | Table 2 / 3 |
//! |---|---|---|
//! | `CHECK (LITMUS_SEQUENTIAL(col, group...))` | per group, `col` values are consecutive (no gap, no duplicate) | S_ID, Claim 5 |
//! | `CHECK (LITMUS_NEXT_ID(counter, t.id))` | the counter column hands out `t.id` per group: `counter - 1 = max(t.id)` | S_ID, Claim 5 |
//! | `CHECK (x = LITMUS_SUM(t.c, ...) - LITMUS_COUNT(t2, ...))` | materialized roll-up: this row's columns equal sums/counts over other rows; extra arguments are join columns (`t.c`) and filters (`t.c IS NOT NULL`) | MV, Claim 10 |
//! | `CHECK (LITMUS_COUNTER(col))` | `col` is a counter: only increments/decrements, none lost | §5.2 |
//! | `CHECK (LITMUS_IFF(p, q))` | `p` iff `q`, with `p`, `q` either `[t.]col IS [NOT] NULL` or `LITMUS_EXISTS(t)` over corresponding rows | FK, Claims 6–8 |
//! | `CHECK (LITMUS_INDEX(t.c, ...))` | this (index) table mirrors columns `c` of table `t` | Claim 9 |
//! | `CHECK ([NOT] LITMUS_CONTAINS(col, v))` | set column contains (or not) `v` | Claims 15, 16 |
//! | `CHECK (LITMUS_SIZE(col) = n)` | set column has `n` elements | Claim 17 |
//! | `DEFAULT LITMUS_UNIQUE_ID()` | the column gets a unique value chosen without coordination | Claim 4 |
//!
//! Types: `INT`/`INTEGER`/`BIGINT`/`SMALLINT` (Int), `DECIMAL`/`NUMERIC` (Decimal),
//! `TEXT`/`VARCHAR`/`CHAR` (String), `BYTEA`/`BLOB` (Bytes), `T[]` (a set of `T`). Columns
//! are nullable unless `NOT NULL` or in the primary key, as in SQL. Anything else — another
//! statement, an unknown type, a `CHECK` the analyzer cannot read, an unknown `LITMUS_`
//! function, an unknown table or column — is a typed [`DdlError`].

use crate::invariant::{Clause, Cmp, ColRef, ColumnDef, Invariant, Schema, TableDef};
use litmus_core::{Catalog, ColumnType, Decimal, Value};
use sqlparser::ast::{
    BinaryOperator, ColumnOption, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, ObjectName, ReferentialAction,
    Statement, TableConstraint, UnaryOperator,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;
use std::collections::BTreeSet;

/// What is wrong with a DDL script.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DdlError {
    #[error("SQL syntax error: {0}")]
    Syntax(String),
    #[error("unsupported statement (only CREATE TABLE is read): {0}")]
    UnsupportedStatement(String),
    #[error("table {0} is declared twice")]
    DuplicateTable(String),
    #[error("table {0} has no primary key (LitmusDB tables need one)")]
    NoPrimaryKey(String),
    #[error("unknown table {table} (in {context})")]
    UnknownTable { table: String, context: String },
    #[error("unknown column {table}.{column} (in {context})")]
    UnknownColumn { table: String, column: String, context: String },
    #[error("column {table}.{column}: unsupported type {ty}")]
    UnsupportedType { table: String, column: String, ty: String },
    #[error("table {table}: unsupported CHECK expression {expr} (see the DDL subset in litmus_analyze::ddl)")]
    UnsupportedCheck { table: String, expr: String },
    #[error("table {table}: {what}")]
    Unsupported { table: String, what: String },
    #[error("table {table}: bad LitmusDB extension {function}: {why}")]
    BadExtension { table: String, function: String, why: String },
    #[error("the DDL does not match the catalog: {0}")]
    CatalogMismatch(String),
}

/// The known extension functions.
pub const EXTENSIONS: &[&str] = &[
    "LITMUS_SEQUENTIAL",
    "LITMUS_NEXT_ID",
    "LITMUS_SUM",
    "LITMUS_COUNT",
    "LITMUS_COUNTER",
    "LITMUS_IFF",
    "LITMUS_EXISTS",
    "LITMUS_INDEX",
    "LITMUS_CONTAINS",
    "LITMUS_SIZE",
    "LITMUS_UNIQUE_ID",
];

/// Parses a DDL script into tables and invariants.
pub fn parse(sql: &str) -> Result<Schema, DdlError> {
    let statements = Parser::parse_sql(&GenericDialect {}, sql).map_err(|e| DdlError::Syntax(e.to_string()))?;
    let mut creates = Vec::new();
    for s in statements {
        match s {
            Statement::CreateTable(ct) => creates.push(ct),
            other => {
                let mut text = other.to_string();
                text.truncate(80);
                return Err(DdlError::UnsupportedStatement(text));
            }
        }
    }
    // Pass 1: tables and columns (constraints may reference tables declared later).
    let mut schema = Schema::default();
    for ct in &creates {
        let name = object_name(&ct.name);
        if schema.table(&name).is_some() {
            return Err(DdlError::DuplicateTable(name));
        }
        let mut table = TableDef { name: name.clone(), columns: Vec::new(), primary_key: Vec::new() };
        for c in &ct.columns {
            let ty = column_type(&c.data_type.to_string()).ok_or_else(|| DdlError::UnsupportedType {
                table: name.clone(),
                column: c.name.value.clone(),
                ty: c.data_type.to_string(),
            })?;
            let mut def =
                ColumnDef { name: c.name.value.clone(), ty, nullable: true, unique_token: false, domain: Vec::new() };
            for o in &c.options {
                match &o.option {
                    ColumnOption::NotNull => def.nullable = false,
                    ColumnOption::PrimaryKey(_) => {
                        def.nullable = false;
                        table.primary_key = vec![def.name.clone()];
                    }
                    ColumnOption::Default(Expr::Function(f))
                        if object_name(&f.name).eq_ignore_ascii_case("LITMUS_UNIQUE_ID") =>
                    {
                        def.unique_token = true;
                    }
                    _ => {}
                }
            }
            table.columns.push(def);
        }
        for tc in &ct.constraints {
            if let TableConstraint::PrimaryKey(pk) = tc {
                let mut cols = Vec::new();
                for ic in &pk.columns {
                    cols.push(column_ident(&ic.column.expr, &table, "PRIMARY KEY")?);
                }
                table.primary_key = cols;
            }
        }
        if table.primary_key.is_empty() {
            return Err(DdlError::NoPrimaryKey(name));
        }
        for k in table.primary_key.clone() {
            if let Some(c) = table.columns.iter_mut().find(|c| c.name == k) {
                c.nullable = false;
            }
        }
        schema.tables.push(table);
    }
    // Pass 2: invariants.
    for ct in &creates {
        let name = object_name(&ct.name);
        let mut b = Builder { schema: &schema, table: name.clone(), out: Vec::new(), domains: Vec::new() };
        b.table_invariants(ct)?;
        let (invariants, domains) = (b.out, b.domains);
        schema.invariants.extend(invariants);
        for (col, values) in domains {
            if let Some(c) = schema
                .tables
                .iter_mut()
                .find(|t| t.name == col.table)
                .and_then(|t| t.columns.iter_mut().find(|c| c.name == col.column))
            {
                c.domain = values;
            }
        }
    }
    Ok(schema)
}

/// Checks that every table of the DDL exists in the catalog with the same columns (names,
/// order, types, nullability) and primary key: the DDL describes the database the procedures
/// run on, not a copy that could drift from it.
pub fn check_against(schema: &Schema, catalog: &Catalog) -> Result<(), DdlError> {
    for t in &schema.tables {
        let c =
            catalog.table_by_name(&t.name).map_err(|_| DdlError::CatalogMismatch(format!("no table {}", t.name)))?;
        let ddl: Vec<(&str, &ColumnType, bool)> =
            t.columns.iter().map(|c| (c.name.as_str(), &c.ty, c.nullable)).collect();
        let cat: Vec<(&str, &ColumnType, bool)> =
            c.columns.iter().map(|c| (c.name.as_str(), &c.ty, c.nullable)).collect();
        if ddl != cat {
            let diff = ddl
                .iter()
                .zip(&cat)
                .find(|(a, b)| a != b)
                .map(|(a, b)| format!("DDL has {a:?}, catalog has {b:?}"))
                .unwrap_or_else(|| format!("DDL has {} columns, catalog {}", ddl.len(), cat.len()));
            return Err(DdlError::CatalogMismatch(format!("table {}: {diff}", t.name)));
        }
        let pk: Vec<&str> = c.primary_key.iter().map(|&i| c.columns[i].name.as_str()).collect();
        if pk != t.primary_key.iter().map(String::as_str).collect::<Vec<_>>() {
            return Err(DdlError::CatalogMismatch(format!(
                "table {}: DDL primary key {:?}, catalog {:?}",
                t.name, t.primary_key, pk
            )));
        }
    }
    Ok(())
}

fn object_name(n: &ObjectName) -> String {
    n.0.last().map(|p| p.to_string().trim_matches('"').to_string()).unwrap_or_default()
}

fn column_type(sql: &str) -> Option<ColumnType> {
    let s = sql.trim().to_ascii_uppercase();
    if let Some(inner) = s.strip_suffix("[]") {
        return column_type(inner).filter(|t| !matches!(t, ColumnType::Set(_))).map(|t| ColumnType::Set(Box::new(t)));
    }
    let base = s.split('(').next().unwrap_or("").trim();
    Some(match base {
        "INT" | "INTEGER" | "BIGINT" | "SMALLINT" | "INT64" => ColumnType::Int,
        "DECIMAL" | "NUMERIC" | "DEC" => ColumnType::Decimal,
        "TEXT" | "VARCHAR" | "CHAR" | "CHARACTER VARYING" | "CHARACTER" | "STRING" => ColumnType::String,
        "BYTEA" | "BLOB" | "BYTES" | "VARBINARY" => ColumnType::Bytes,
        _ => return None,
    })
}

fn column_ident(e: &Expr, table: &TableDef, context: &str) -> Result<String, DdlError> {
    match e {
        Expr::Identifier(i) if table.column(&i.value).is_some() => Ok(i.value.clone()),
        Expr::Identifier(i) => {
            Err(DdlError::UnknownColumn { table: table.name.clone(), column: i.value.clone(), context: context.into() })
        }
        other => Err(DdlError::Unsupported { table: table.name.clone(), what: format!("{context}: {other}") }),
    }
}

struct Builder<'a> {
    schema: &'a Schema,
    table: String,
    out: Vec<Invariant>,
    domains: Vec<(ColRef, Vec<Value>)>,
}

impl Builder<'_> {
    fn this(&self) -> &TableDef {
        self.schema.table(&self.table).expect("declared in pass 1")
    }

    fn push(&mut self, name: Option<&sqlparser::ast::Ident>, default: String, sql: String, clauses: Vec<Clause>) {
        let (name, named) = match name {
            Some(n) => (n.value.clone(), true),
            None => (default, false),
        };
        self.out.push(Invariant { name, named, table: self.table.clone(), sql, clauses });
    }

    /// The invariants a `CREATE TABLE` declares: its key and NOT NULL columns, then each column
    /// option and each table constraint.
    fn table_invariants(&mut self, ct: &sqlparser::ast::CreateTable) -> Result<(), DdlError> {
        self.key_invariants();
        for c in &ct.columns {
            for o in &c.options {
                self.column_option_invariants(&c.name.value, o)?;
            }
        }
        for tc in &ct.constraints {
            self.table_constraint_invariants(tc)?;
        }
        Ok(())
    }

    /// The primary key, and NOT NULL over the other columns that are not nullable.
    fn key_invariants(&mut self) {
        let t = self.table.clone();
        let pk = self.this().primary_key.clone();
        self.push(
            None,
            format!("{t}: PRIMARY KEY"),
            format!("PRIMARY KEY ({})", pk.join(", ")),
            vec![Clause::PrimaryKey { table: t.clone(), columns: pk.clone() }],
        );
        let not_null: Vec<String> = self
            .this()
            .columns
            .iter()
            .filter(|c| !c.nullable && !pk.contains(&c.name))
            .map(|c| c.name.clone())
            .collect();
        if !not_null.is_empty() {
            let clauses = not_null.iter().map(|c| Clause::NotNull { col: ColRef::new(&t, c) }).collect();
            self.push(None, format!("{t}: NOT NULL"), format!("NOT NULL ({})", not_null.join(", ")), clauses);
        }
    }

    /// What one column option declares (UNIQUE, REFERENCES, CHECK, AUTO_INCREMENT); an option
    /// the analyzer does not read is an error, one that declares nothing is skipped.
    fn column_option_invariants(&mut self, col: &str, o: &sqlparser::ast::ColumnOptionDef) -> Result<(), DdlError> {
        let t = self.table.clone();
        let col = col.to_string();
        match &o.option {
            ColumnOption::Unique(_) => self.push(
                o.name.as_ref(),
                format!("{t}: UNIQUE ({col})"),
                format!("{col} UNIQUE"),
                vec![Clause::Unique { table: t.clone(), columns: vec![col] }],
            ),
            ColumnOption::ForeignKey(fk) => {
                let clause = self.foreign_key(
                    std::slice::from_ref(&col),
                    &fk.foreign_table,
                    &fk.referred_columns,
                    fk.on_delete,
                )?;
                self.push(o.name.as_ref(), format!("{t}: FOREIGN KEY ({col})"), format!("{col} {fk}"), vec![clause]);
            }
            ColumnOption::Check(ch) => {
                let clauses = self.check(&ch.expr)?;
                self.push(
                    o.name.as_ref().or(ch.name.as_ref()),
                    format!("{t}: CHECK ({})", ch.expr),
                    format!("CHECK ({})", ch.expr),
                    clauses,
                );
            }
            ColumnOption::Generated { .. } | ColumnOption::Identity(_) => self.auto_increment(&col, o),
            ColumnOption::DialectSpecific(tokens)
                if tokens.iter().any(|tok| tok.to_string().eq_ignore_ascii_case("AUTO_INCREMENT")) =>
            {
                self.auto_increment(&col, o)
            }
            ColumnOption::Default(Expr::Function(f)) => {
                let fname = object_name(&f.name).to_ascii_uppercase();
                if fname.starts_with("LITMUS_") && fname != "LITMUS_UNIQUE_ID" {
                    return Err(DdlError::BadExtension {
                        table: t.clone(),
                        function: fname,
                        why: "only LITMUS_UNIQUE_ID() is a DEFAULT".into(),
                    });
                }
            }
            ColumnOption::Null
            | ColumnOption::NotNull
            | ColumnOption::PrimaryKey(_)
            | ColumnOption::Default(_)
            | ColumnOption::Comment(_) => {}
            other => {
                return Err(DdlError::Unsupported { table: t.clone(), what: format!("column option {other} on {col}") })
            }
        }
        Ok(())
    }

    /// What one table constraint declares (UNIQUE, FOREIGN KEY, CHECK; the primary key is read
    /// with the columns).
    fn table_constraint_invariants(&mut self, tc: &TableConstraint) -> Result<(), DdlError> {
        let t = self.table.clone();
        match tc {
            TableConstraint::PrimaryKey(_) => {}
            TableConstraint::Unique(u) => {
                let mut cols = Vec::new();
                for ic in &u.columns {
                    cols.push(column_ident(&ic.column.expr, self.this(), "UNIQUE")?);
                }
                self.push(
                    u.name.as_ref(),
                    format!("{t}: UNIQUE ({})", cols.join(", ")),
                    tc.to_string(),
                    vec![Clause::Unique { table: t.clone(), columns: cols }],
                );
            }
            TableConstraint::ForeignKey(fk) => {
                let cols: Vec<String> = fk.columns.iter().map(|i| i.value.clone()).collect();
                let clause = self.foreign_key(&cols, &fk.foreign_table, &fk.referred_columns, fk.on_delete)?;
                self.push(
                    fk.name.as_ref(),
                    format!("{t}: FOREIGN KEY ({})", cols.join(", ")),
                    tc.to_string(),
                    vec![clause],
                );
            }
            TableConstraint::Check(ch) => {
                let clauses = self.check(&ch.expr)?;
                self.push(ch.name.as_ref(), format!("{t}: CHECK ({})", ch.expr), tc.to_string(), clauses);
            }
            other => return Err(DdlError::Unsupported { table: t.clone(), what: format!("table constraint {other}") }),
        }
        Ok(())
    }

    fn auto_increment(&mut self, col: &str, o: &sqlparser::ast::ColumnOptionDef) {
        let t = self.table.clone();
        self.push(
            o.name.as_ref(),
            format!("{t}: AUTO_INCREMENT ({col})"),
            format!("{col} {}", o.option),
            vec![Clause::Sequential { col: ColRef::new(&t, col), group: vec![] }],
        );
    }

    fn foreign_key(
        &self,
        cols: &[String],
        foreign: &ObjectName,
        referred: &[sqlparser::ast::Ident],
        on_delete: Option<ReferentialAction>,
    ) -> Result<Clause, DdlError> {
        let t = self.this();
        for c in cols {
            if t.column(c).is_none() {
                return Err(DdlError::UnknownColumn {
                    table: t.name.clone(),
                    column: c.clone(),
                    context: "FOREIGN KEY".into(),
                });
            }
        }
        let ref_name = object_name(foreign);
        let parent = self.schema.table(&ref_name).ok_or_else(|| DdlError::UnknownTable {
            table: ref_name.clone(),
            context: format!("FOREIGN KEY of {}", t.name),
        })?;
        let ref_columns: Vec<String> = if referred.is_empty() {
            parent.primary_key.clone()
        } else {
            referred.iter().map(|i| i.value.clone()).collect()
        };
        for c in &ref_columns {
            if parent.column(c).is_none() {
                return Err(DdlError::UnknownColumn {
                    table: ref_name.clone(),
                    column: c.clone(),
                    context: format!("FOREIGN KEY of {}", t.name),
                });
            }
        }
        if ref_columns.len() != cols.len() {
            return Err(DdlError::Unsupported {
                table: t.name.clone(),
                what: format!(
                    "FOREIGN KEY ({}) references {} columns of {ref_name}",
                    cols.join(", "),
                    ref_columns.len()
                ),
            });
        }
        let cascade = match on_delete {
            None | Some(ReferentialAction::Restrict) | Some(ReferentialAction::NoAction) => false,
            Some(ReferentialAction::Cascade) => true,
            Some(other) => {
                return Err(DdlError::Unsupported {
                    table: t.name.clone(),
                    what: format!("ON DELETE {other} (only CASCADE, RESTRICT, NO ACTION)"),
                })
            }
        };
        Ok(Clause::ForeignKey {
            table: t.name.clone(),
            columns: cols.to_vec(),
            ref_table: ref_name,
            ref_columns,
            cascade,
        })
    }

    fn unsupported(&self, e: &Expr) -> DdlError {
        DdlError::UnsupportedCheck { table: self.table.clone(), expr: e.to_string() }
    }

    fn bad(&self, f: &str, why: impl Into<String>) -> DdlError {
        DdlError::BadExtension { table: self.table.clone(), function: f.into(), why: why.into() }
    }

    /// A column reference: `col` (this table) or `table.col`.
    fn col(&self, e: &Expr, context: &str) -> Result<ColRef, DdlError> {
        let (table, column) = match e {
            Expr::Identifier(i) => (self.table.clone(), i.value.clone()),
            Expr::CompoundIdentifier(parts) if parts.len() == 2 => (parts[0].value.clone(), parts[1].value.clone()),
            Expr::Nested(inner) => return self.col(inner, context),
            other => {
                return Err(DdlError::Unsupported {
                    table: self.table.clone(),
                    what: format!("{context}: expected a column, got {other}"),
                })
            }
        };
        let t = self.schema.table(&table).ok_or_else(|| DdlError::UnknownTable {
            table: table.clone(),
            context: format!("{context} in {}", self.table),
        })?;
        if t.column(&column).is_none() {
            return Err(DdlError::UnknownColumn { table, column, context: context.into() });
        }
        Ok(ColRef { table, column })
    }

    fn table_ref(&self, e: &Expr, context: &str) -> Result<String, DdlError> {
        match e {
            Expr::Identifier(i) if self.schema.table(&i.value).is_some() => Ok(i.value.clone()),
            Expr::Identifier(i) => Err(DdlError::UnknownTable { table: i.value.clone(), context: context.into() }),
            other => Err(self.bad(context, format!("expected a table name, got {other}"))),
        }
    }

    fn check(&mut self, e: &Expr) -> Result<Vec<Clause>, DdlError> {
        match e {
            Expr::Nested(inner) => self.check(inner),
            Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
                let mut v = self.check(left)?;
                v.extend(self.check(right)?);
                Ok(v)
            }
            Expr::IsNotNull(inner) => Ok(vec![Clause::NotNull { col: self.col(inner, "IS NOT NULL")? }]),
            Expr::UnaryOp { op: UnaryOperator::Not, expr } => match strip(expr) {
                Expr::Function(f) if fname(f) == "LITMUS_CONTAINS" => {
                    let (col, element) = self.contains_args(f)?;
                    Ok(vec![Clause::Contains { col, element, negated: true }])
                }
                _ => Err(self.unsupported(e)),
            },
            Expr::Function(f) => self.extension(f, e),
            Expr::InList { expr, list, negated: false } => {
                let col = self.col(expr, "IN")?;
                let ty = self.schema.column(&col).map(|c| c.ty.clone()).expect("resolved");
                let mut values = Vec::new();
                let mut domain = Vec::new();
                for item in list {
                    let lit = literal(item).ok_or_else(|| self.unsupported(e))?;
                    domain.push(lit_value(&lit, &ty).ok_or_else(|| self.unsupported(e))?);
                    values.push(lit);
                }
                self.domains.push((col.clone(), domain));
                Ok(vec![Clause::Equality { col, values, equal: true }])
            }
            Expr::BinaryOp { left, op, right } if contains_aggregate(e) => {
                if *op != BinaryOperator::Eq {
                    return Err(self.unsupported(e));
                }
                let mut r = RollUpParts::default();
                self.rollup_term(left, &mut r)?;
                self.rollup_term(right, &mut r)?;
                Ok(vec![Clause::RollUp {
                    values: r.values,
                    filters: r.filters,
                    tables: r.tables,
                    not_null_filters: r.not_null,
                }])
            }
            Expr::BinaryOp { left, op, right } => {
                if let (Expr::Function(f), Some(n)) = (strip(left), literal(right)) {
                    if fname(f) == "LITMUS_SIZE" && *op == BinaryOperator::Eq {
                        let args = self.args(f)?;
                        if args.len() != 1 {
                            return Err(self.bad("LITMUS_SIZE", "takes one set column"));
                        }
                        let col = self.set_col(args[0], "LITMUS_SIZE")?;
                        return Ok(vec![Clause::Size { col, size: n }]);
                    }
                }
                let (colx, lit, flipped) = match (literal(left), literal(right)) {
                    (None, Some(l)) => (left, l, false),
                    (Some(l), None) => (right, l, true),
                    _ => return Err(self.unsupported(e)),
                };
                let col = self.col(colx, "CHECK")?;
                let cmp = match (op, flipped) {
                    (BinaryOperator::Eq, _) => {
                        return Ok(vec![Clause::Equality { col, values: vec![lit], equal: true }])
                    }
                    (BinaryOperator::NotEq, _) => {
                        return Ok(vec![Clause::Equality { col, values: vec![lit], equal: false }])
                    }
                    (BinaryOperator::Gt, false) | (BinaryOperator::Lt, true) => Cmp::Gt,
                    (BinaryOperator::GtEq, false) | (BinaryOperator::LtEq, true) => Cmp::Ge,
                    (BinaryOperator::Lt, false) | (BinaryOperator::Gt, true) => Cmp::Lt,
                    (BinaryOperator::LtEq, false) | (BinaryOperator::GtEq, true) => Cmp::Le,
                    _ => return Err(self.unsupported(e)),
                };
                Ok(vec![Clause::Threshold { col, cmp, bound: lit }])
            }
            _ => Err(self.unsupported(e)),
        }
    }

    fn args<'e>(&self, f: &'e sqlparser::ast::Function) -> Result<Vec<&'e Expr>, DdlError> {
        let name = fname(f);
        match &f.args {
            FunctionArguments::None => Ok(vec![]),
            FunctionArguments::List(l) => l
                .args
                .iter()
                .map(|a| match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e),
                    other => Err(self.bad(&name, format!("unsupported argument {other}"))),
                })
                .collect(),
            FunctionArguments::Subquery(_) => Err(self.bad(&name, "a subquery is not an argument")),
        }
    }

    fn set_col(&self, e: &Expr, f: &str) -> Result<ColRef, DdlError> {
        let col = self.col(e, f)?;
        match self.schema.column(&col).map(|c| &c.ty) {
            Some(ColumnType::Set(_)) => Ok(col),
            _ => Err(self.bad(f, format!("{col} is not a set column (declare it as T[])"))),
        }
    }

    fn contains_args(&self, f: &sqlparser::ast::Function) -> Result<(ColRef, String), DdlError> {
        let args = self.args(f)?;
        if args.len() != 2 {
            return Err(self.bad("LITMUS_CONTAINS", "takes a set column and a value"));
        }
        let col = self.set_col(args[0], "LITMUS_CONTAINS")?;
        let element = literal(args[1]).ok_or_else(|| self.bad("LITMUS_CONTAINS", "the value must be a literal"))?;
        Ok((col, element))
    }

    fn extension(&mut self, f: &sqlparser::ast::Function, e: &Expr) -> Result<Vec<Clause>, DdlError> {
        let name = fname(f);
        let args = self.args(f)?;
        match name.as_str() {
            "LITMUS_SEQUENTIAL" => {
                let Some((first, group)) = args.split_first() else {
                    return Err(self.bad(&name, "takes a column and its group columns"));
                };
                let col = self.col(first, &name)?;
                if col.table != self.table {
                    return Err(self.bad(&name, "the column must be of the declaring table"));
                }
                let group = group.iter().map(|g| self.col(g, &name).map(|c| c.column)).collect::<Result<_, _>>()?;
                Ok(vec![Clause::Sequential { col, group }])
            }
            "LITMUS_NEXT_ID" => {
                if args.len() != 2 {
                    return Err(self.bad(&name, "takes the counter column and the id column (table.column)"));
                }
                let counter = self.col(args[0], &name)?;
                let id = self.col(args[1], &name)?;
                Ok(vec![Clause::NextId { counter, id }])
            }
            "LITMUS_COUNTER" => {
                if args.len() != 1 {
                    return Err(self.bad(&name, "takes one column"));
                }
                let col = self.col(args[0], &name)?;
                match self.schema.column(&col).map(|c| &c.ty) {
                    Some(ColumnType::Int | ColumnType::Decimal) => Ok(vec![Clause::Counter { col }]),
                    _ => Err(self.bad(&name, format!("{col} is not numeric"))),
                }
            }
            "LITMUS_IFF" => {
                if args.len() != 2 {
                    return Err(self.bad(&name, "takes two predicates"));
                }
                let mut cols = BTreeSet::new();
                let mut tables = BTreeSet::new();
                for a in args {
                    match strip(a) {
                        Expr::IsNull(c) | Expr::IsNotNull(c) => {
                            let col = self.col(c, &name)?;
                            tables.insert(col.table.clone());
                            cols.insert(col);
                        }
                        Expr::Function(g) if fname(g) == "LITMUS_EXISTS" => {
                            let ga = self.args(g)?;
                            if ga.len() != 1 {
                                return Err(self.bad("LITMUS_EXISTS", "takes one table"));
                            }
                            tables.insert(self.table_ref(ga[0], "LITMUS_EXISTS")?);
                        }
                        other => {
                            return Err(self.bad(
                                &name,
                                format!("predicates are `col IS [NOT] NULL` or LITMUS_EXISTS(table), got {other}"),
                            ))
                        }
                    }
                }
                Ok(vec![Clause::Correspondence { cols, tables }])
            }
            "LITMUS_INDEX" => {
                let cols: BTreeSet<ColRef> = args.iter().map(|a| self.col(a, &name)).collect::<Result<_, _>>()?;
                let bases: BTreeSet<&str> = cols.iter().map(|c| c.table.as_str()).collect();
                match (bases.len(), bases.first()) {
                    (1, Some(base)) if *base != self.table => Ok(vec![Clause::SecondaryIndex {
                        index: self.table.clone(),
                        base: base.to_string(),
                        cols: cols.clone(),
                    }]),
                    _ => Err(self.bad(&name, "takes one or more columns of one other table (table.column)")),
                }
            }
            "LITMUS_CONTAINS" => {
                let (col, element) = self.contains_args(f)?;
                Ok(vec![Clause::Contains { col, element, negated: false }])
            }
            n if n.starts_with("LITMUS_") && EXTENSIONS.contains(&n) => {
                Err(self.bad(n, "not a CHECK by itself (LITMUS_SUM/COUNT go in `x = ...`, LITMUS_SIZE in `... = n`)"))
            }
            n if n.starts_with("LITMUS_") => Err(self.bad(n, format!("unknown; known: {}", EXTENSIONS.join(", ")))),
            _ => Err(self.unsupported(e)),
        }
    }

    fn rollup_term(&self, e: &Expr, r: &mut RollUpParts) -> Result<(), DdlError> {
        match e {
            Expr::Nested(inner) => self.rollup_term(inner, r),
            Expr::BinaryOp { left, op: BinaryOperator::Plus | BinaryOperator::Minus, right } => {
                self.rollup_term(left, r)?;
                self.rollup_term(right, r)
            }
            Expr::UnaryOp { op: UnaryOperator::Minus, expr } => self.rollup_term(expr, r),
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) => {
                let col = self.col(e, "roll-up")?;
                r.tables.insert(col.table.clone());
                r.values.insert(col);
                Ok(())
            }
            Expr::Value(_) => Ok(()),
            Expr::Function(f) => {
                let name = fname(f);
                let args = self.args(f)?;
                let Some((first, rest)) = args.split_first() else {
                    return Err(self.bad(&name, "needs an argument"));
                };
                match name.as_str() {
                    "LITMUS_SUM" => {
                        let col = self.col(first, &name)?;
                        r.tables.insert(col.table.clone());
                        r.values.insert(col);
                    }
                    "LITMUS_COUNT" => {
                        r.tables.insert(self.table_ref(first, &name)?);
                    }
                    _ => return Err(self.bad(&name, "a roll-up is built of columns, LITMUS_SUM and LITMUS_COUNT")),
                }
                for a in rest {
                    match strip(a) {
                        Expr::IsNotNull(c) => {
                            let col = self.col(c, &name)?;
                            r.not_null.insert(col.clone());
                            r.tables.insert(col.table.clone());
                            r.filters.insert(col);
                        }
                        Expr::IsNull(c) => {
                            let col = self.col(c, &name)?;
                            r.tables.insert(col.table.clone());
                            r.filters.insert(col);
                        }
                        other => {
                            let col = self.col(other, &name)?;
                            r.tables.insert(col.table.clone());
                            r.filters.insert(col);
                        }
                    }
                }
                Ok(())
            }
            other => Err(self.unsupported(other)),
        }
    }
}

#[derive(Default)]
struct RollUpParts {
    values: BTreeSet<ColRef>,
    filters: BTreeSet<ColRef>,
    tables: BTreeSet<String>,
    not_null: BTreeSet<ColRef>,
}

fn strip(e: &Expr) -> &Expr {
    match e {
        Expr::Nested(inner) => strip(inner),
        other => other,
    }
}

fn fname(f: &sqlparser::ast::Function) -> String {
    object_name(&f.name).to_ascii_uppercase()
}

fn contains_aggregate(e: &Expr) -> bool {
    match e {
        Expr::Function(f) => matches!(fname(f).as_str(), "LITMUS_SUM" | "LITMUS_COUNT"),
        Expr::BinaryOp { left, right, .. } => contains_aggregate(left) || contains_aggregate(right),
        Expr::Nested(inner) | Expr::UnaryOp { expr: inner, .. } => contains_aggregate(inner),
        _ => false,
    }
}

/// A literal as SQL text (`0`, `-1`, `'BC'`).
fn literal(e: &Expr) -> Option<String> {
    match e {
        Expr::Value(v) => Some(v.to_string()),
        Expr::UnaryOp { op: UnaryOperator::Minus, expr } => literal(expr).map(|l| format!("-{l}")),
        Expr::Nested(inner) => literal(inner),
        _ => None,
    }
}

/// A literal as a value of the column's type (for domains).
fn lit_value(lit: &str, ty: &ColumnType) -> Option<Value> {
    match ty {
        ColumnType::Int => lit.parse().ok().map(Value::Int),
        ColumnType::Decimal => {
            let f: f64 = lit.parse().ok()?;
            Some(Value::Decimal(Decimal((f * 10f64.powi(Decimal::SCALE as i32)).round() as i64)))
        }
        ColumnType::String => lit
            .strip_prefix('\'')
            .and_then(|s| s.strip_suffix('\''))
            .map(|s| Value::String(s.replace("''", "'").into())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use litmus_core::{Column, Partitioning, TableSchema};

    fn err(sql: &str) -> DdlError {
        parse(sql).expect_err("bad DDL must be rejected")
    }

    #[test]
    fn parses_standard_constraints_and_extensions() {
        let s = parse(
            "CREATE TABLE a (id INT NOT NULL, n INT, tags TEXT[], k TEXT CHECK (k IN ('x', 'y')),
                             PRIMARY KEY (id), CONSTRAINT pos CHECK (n >= 0 AND n < 10),
                             CONSTRAINT c CHECK (LITMUS_COUNTER(n)));
             CREATE TABLE b (a INT NOT NULL REFERENCES a, id INT NOT NULL DEFAULT LITMUS_UNIQUE_ID(),
                             PRIMARY KEY (a, id), CONSTRAINT s CHECK (LITMUS_SEQUENTIAL(id, a)));",
        )
        .unwrap();
        assert_eq!(s.tables.len(), 2);
        let a = s.table("a").unwrap();
        assert_eq!(a.primary_key, vec!["id"]);
        assert!(a.column("n").unwrap().nullable && !a.column("id").unwrap().nullable);
        assert_eq!(a.column("tags").unwrap().ty, ColumnType::Set(Box::new(ColumnType::String)));
        assert_eq!(a.column("k").unwrap().domain, vec![Value::String("x".into()), Value::String("y".into())]);
        assert!(s.table("b").unwrap().column("id").unwrap().unique_token);
        let pos = s.invariants.iter().find(|i| i.name == "pos").unwrap();
        assert_eq!(pos.clauses.len(), 2);
        assert!(matches!(pos.clauses[0], Clause::Threshold { cmp: Cmp::Ge, .. }));
        assert!(matches!(pos.clauses[1], Clause::Threshold { cmp: Cmp::Lt, .. }));
        let fk = s.invariants.iter().find(|i| i.table == "b" && i.type_label() == "FK").unwrap();
        assert!(
            matches!(&fk.clauses[0], Clause::ForeignKey { ref_columns, cascade: false, .. } if ref_columns == &["id"])
        );
        assert!(s.invariants.iter().any(|i| i.name == "s" && i.type_label() == "S_ID"));
        assert!(s.invariants.iter().any(|i| i.name == "c" && i.type_label() == "COUNTER"));
    }

    #[test]
    fn syntax_errors_are_typed() {
        assert!(matches!(err("CREATE TABLE a (id INT PRIMARY KEY"), DdlError::Syntax(_)));
        assert!(matches!(err("CREAT TABLE a (id INT)"), DdlError::Syntax(_)));
    }

    #[test]
    fn other_statements_are_rejected() {
        assert!(matches!(err("DROP TABLE a"), DdlError::UnsupportedStatement(_)));
        assert!(matches!(err("SELECT 1"), DdlError::UnsupportedStatement(_)));
    }

    #[test]
    fn unknown_names_are_rejected() {
        assert!(matches!(err("CREATE TABLE a (id INT PRIMARY KEY REFERENCES nope)"), DdlError::UnknownTable { .. }));
        assert!(matches!(
            err("CREATE TABLE a (id INT, PRIMARY KEY (nope))"),
            DdlError::UnknownColumn { column, .. } if column == "nope"
        ));
        assert!(matches!(err("CREATE TABLE a (id INT PRIMARY KEY, CHECK (nope > 0))"), DdlError::UnknownColumn { .. }));
        assert!(matches!(
            err("CREATE TABLE a (id INT PRIMARY KEY, CHECK (id = LITMUS_SUM(b.x)))"),
            DdlError::UnknownTable { .. }
        ));
    }

    #[test]
    fn bad_extensions_are_rejected() {
        assert!(matches!(
            err("CREATE TABLE a (id INT PRIMARY KEY, CHECK (LITMUS_FROB(id)))"),
            DdlError::BadExtension { function, .. } if function == "LITMUS_FROB"
        ));
        assert!(matches!(
            err("CREATE TABLE a (id INT PRIMARY KEY, n TEXT, CHECK (LITMUS_COUNTER(n)))"),
            DdlError::BadExtension { .. }
        ));
        assert!(matches!(
            err("CREATE TABLE a (id INT PRIMARY KEY, n INT, CHECK (LITMUS_SIZE(n) = 2))"),
            DdlError::BadExtension { .. }
        ));
        assert!(matches!(
            err("CREATE TABLE a (id INT PRIMARY KEY, CHECK (LITMUS_NEXT_ID(id)))"),
            DdlError::BadExtension { .. }
        ));
    }

    #[test]
    fn unsupported_checks_and_types_are_rejected() {
        assert!(matches!(
            err("CREATE TABLE a (id INT PRIMARY KEY, n INT, CHECK (n > id))"),
            DdlError::UnsupportedCheck { .. }
        ));
        assert!(matches!(
            err("CREATE TABLE a (id INT PRIMARY KEY, n INT, CHECK (n > 0 OR n < -5))"),
            DdlError::UnsupportedCheck { .. }
        ));
        assert!(matches!(err("CREATE TABLE a (id INT PRIMARY KEY, t TIMESTAMP)"), DdlError::UnsupportedType { .. }));
        assert!(matches!(err("CREATE TABLE a (id INT)"), DdlError::NoPrimaryKey(_)));
        assert!(matches!(
            err("CREATE TABLE a (id INT PRIMARY KEY); CREATE TABLE a (id INT PRIMARY KEY)"),
            DdlError::DuplicateTable(_)
        ));
        assert!(matches!(
            err("CREATE TABLE p (id INT PRIMARY KEY); CREATE TABLE a (id INT PRIMARY KEY REFERENCES p ON DELETE SET NULL)"),
            DdlError::Unsupported { .. }
        ));
    }

    #[test]
    fn the_ddl_must_match_the_catalog() {
        let mut catalog = Catalog::new();
        catalog.add(TableSchema::new(
            "a",
            vec![Column::new("id", ColumnType::Int), Column::nullable("n", ColumnType::Int)],
            &["id"],
            Partitioning::KeyPrefix { prefix_len: 1 },
        ));
        let ok = parse("CREATE TABLE a (id INT PRIMARY KEY, n INT)").unwrap();
        assert_eq!(check_against(&ok, &catalog), Ok(()));
        for bad in [
            "CREATE TABLE a (id INT PRIMARY KEY, n INT NOT NULL)",
            "CREATE TABLE a (id INT PRIMARY KEY, n TEXT)",
            "CREATE TABLE a (id INT PRIMARY KEY)",
            "CREATE TABLE a (id INT, n INT NOT NULL, PRIMARY KEY (id, n))",
            "CREATE TABLE b (id INT PRIMARY KEY)",
        ] {
            let s = parse(bad).unwrap();
            assert!(matches!(check_against(&s, &catalog), Err(DdlError::CatalogMismatch(_))), "{bad}");
        }
    }
}
