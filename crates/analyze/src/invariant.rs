//! The invariant model: tables as the DDL declares them and the invariants over them.
//!
//! An [`Invariant`] is what a user names (a TPC-C consistency condition, a `PRIMARY KEY`, a
//! `CHECK`); it is a conjunction of [`Clause`]s, the primitive invariants Table 2 of the paper
//! has rows for. The analyzer judges clauses and reports invariants: an invariant's verdict for
//! a transaction is the worst verdict of its clauses.

use litmus_core::{ColumnType, Value};
use serde::Serialize;
use std::collections::BTreeSet;
use std::fmt;

/// `table.column`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ColRef {
    pub table: String,
    pub column: String,
}

impl ColRef {
    pub fn new(table: &str, column: &str) -> Self {
        ColRef { table: table.into(), column: column.into() }
    }
}

impl fmt::Display for ColRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.table, self.column)
    }
}

/// A row-level comparison with a constant (`CHECK (col > 0)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Cmp {
    Gt,
    Ge,
    Lt,
    Le,
}

impl Cmp {
    /// `>` or `>=`: a lower bound.
    pub fn is_lower_bound(self) -> bool {
        matches!(self, Cmp::Gt | Cmp::Ge)
    }
}

impl fmt::Display for Cmp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
            Cmp::Lt => "<",
            Cmp::Le => "<=",
        })
    }
}

/// A primitive invariant: one row of Table 2's invariant column.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Clause {
    /// `PRIMARY KEY (cols)`: no two rows share the key (Claims 3, 4).
    PrimaryKey { table: String, columns: Vec<String> },
    /// `UNIQUE (cols)` (Claims 3, 4).
    Unique { table: String, columns: Vec<String> },
    /// `NOT NULL`: a per-record inequality with NULL (Claim 2).
    NotNull { col: ColRef },
    /// `CHECK (col = v)`, `CHECK (col IN (...))` (Claim 1) or `CHECK (col <> v)` (Claim 2).
    Equality { col: ColRef, values: Vec<String>, equal: bool },
    /// `FOREIGN KEY (columns) REFERENCES ref_table (ref_columns) [ON DELETE CASCADE]`
    /// (Claims 6, 7, 8).
    ForeignKey { table: String, columns: Vec<String>, ref_table: String, ref_columns: Vec<String>, cascade: bool },
    /// `CHECK (col > c)` and friends: a row-level threshold (Claims 11–14).
    Threshold { col: ColRef, cmp: Cmp, bound: String },
    /// `LITMUS_COUNTER(col)`: the column is a counter, its value the initial one plus every
    /// committed increment (§5.2's counter ADT: no lost update).
    Counter { col: ColRef },
    /// `LITMUS_SEQUENTIAL(col, group...)`: per group, the values of `col` are consecutive,
    /// without gaps or duplicates (Table 3's S_ID; Claim 5).
    Sequential { col: ColRef, group: Vec<String> },
    /// `LITMUS_NEXT_ID(counter, table.id)`: the counter row hands out the ids of `id`,
    /// `counter - 1 = max(id)` over the rows of its group (sequential ID assignment per group,
    /// Table 3's S_ID; Claim 5).
    NextId { counter: ColRef, id: ColRef },
    /// `view = aggregate`: a materialized roll-up (sum or count over other rows; Table 3's MV;
    /// Claim 10). `values` are the summed columns and this row's view columns, `filters` the
    /// columns of predicates and join paths, `tables` every table whose rows are aggregated.
    RollUp {
        values: BTreeSet<ColRef>,
        filters: BTreeSet<ColRef>,
        tables: BTreeSet<String>,
        /// `col IS NOT NULL` filters: a row inserted with `col` NULL is outside the aggregate.
        not_null_filters: BTreeSet<ColRef>,
    },
    /// `LITMUS_IFF(p, q)`: `p` holds iff `q` does, for predicates `col IS [NOT] NULL` and
    /// `LITMUS_EXISTS(table)` over corresponding rows (Table 3's FK type; Claims 6–8).
    Correspondence { cols: BTreeSet<ColRef>, tables: BTreeSet<String> },
    /// `LITMUS_INDEX(t.c, ...)` declared on an index table: its rows mirror the listed columns
    /// of `base`'s rows (a secondary index kept as a table; Claim 9).
    SecondaryIndex { index: String, base: String, cols: BTreeSet<ColRef> },
    /// `LITMUS_CONTAINS(col, v)` / `NOT LITMUS_CONTAINS(col, v)` over a set column (Claims 15, 16).
    Contains { col: ColRef, element: String, negated: bool },
    /// `LITMUS_SIZE(col) = n` over a set column (Claim 17).
    Size { col: ColRef, size: String },
}

impl Clause {
    /// Table 3's type column: MV, S_ID, FK, or the SQL constraint's name.
    pub fn type_label(&self) -> &'static str {
        match self {
            Clause::PrimaryKey { .. } => "PK",
            Clause::Unique { .. } => "UNIQUE",
            Clause::NotNull { .. } => "NOT NULL",
            Clause::Equality { .. } => "CHECK =",
            Clause::ForeignKey { .. } | Clause::Correspondence { .. } => "FK",
            Clause::Threshold { .. } => "CHECK <>",
            Clause::Counter { .. } => "COUNTER",
            Clause::Sequential { .. } | Clause::NextId { .. } => "S_ID",
            Clause::RollUp { .. } => "MV",
            Clause::SecondaryIndex { .. } => "INDEX",
            Clause::Contains { .. } => "CONTAINS",
            Clause::Size { .. } => "SIZE",
        }
    }
}

/// A declared invariant: a name, where it was declared, and its clauses.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Invariant {
    /// The constraint's name (`CONSTRAINT "3.3.2.1" CHECK ...`), or a generated one
    /// (`tpcc_orders: PRIMARY KEY`).
    pub name: String,
    /// Whether the DDL named it (named invariants are the ones a workload lists first).
    pub named: bool,
    /// The table whose `CREATE TABLE` declares it.
    pub table: String,
    /// The declaration, as SQL.
    pub sql: String,
    pub clauses: Vec<Clause>,
}

impl Invariant {
    /// The types of its clauses, `+`-joined (Table 3: `S_ID+FK`).
    pub fn type_label(&self) -> String {
        let mut labels: Vec<&str> = Vec::new();
        for c in &self.clauses {
            if !labels.contains(&c.type_label()) {
                labels.push(c.type_label());
            }
        }
        labels.join("+")
    }
}

/// A column as the DDL declares it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ColumnDef {
    pub name: String,
    #[serde(skip)]
    pub ty: ColumnType,
    pub nullable: bool,
    /// `DEFAULT LITMUS_UNIQUE_ID()`: a unique value chosen without coordination (a random
    /// 62-bit id or a replica-partitioned one), which the recorder cannot tell from a chosen
    /// constant, so it is declared.
    pub unique_token: bool,
    /// The values of `CHECK (col IN (...))`, used by the recorder as the column's domain.
    #[serde(skip)]
    pub domain: Vec<Value>,
}

/// A table as the DDL declares it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TableDef {
    pub name: String,
    pub columns: Vec<ColumnDef>,
    pub primary_key: Vec<String>,
}

impl TableDef {
    pub fn column(&self, name: &str) -> Option<&ColumnDef> {
        self.columns.iter().find(|c| c.name == name)
    }
}

/// Tables and invariants of a parsed DDL script.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Schema {
    pub tables: Vec<TableDef>,
    pub invariants: Vec<Invariant>,
}

impl Schema {
    pub fn table(&self, name: &str) -> Option<&TableDef> {
        self.tables.iter().find(|t| t.name == name)
    }

    pub fn column(&self, col: &ColRef) -> Option<&ColumnDef> {
        self.table(&col.table).and_then(|t| t.column(&col.column))
    }
}
