//! Footprints declared by hand, for procedures the recorder cannot run (a user's own, written
//! outside LitmusDB): `litmus analyze --schema my.sql --procedures my.toml`.
//!
//! ```toml
//! [[procedure]]
//! name = "transfer"
//! reads = ["account"]
//! updates = [{ column = "account.balance", change = "decrement" },
//!            { column = "account.balance", change = "increment" }]
//! inserts = [{ table = "history", columns = { id = "token" } }]  # other columns: chosen
//! deletes = []
//! upserts = []
//! ```
//!
//! Column sources: `chosen`, `null`, `token` (unique without coordination), `assigned:t.c`
//! (read from counter `t.c` after incrementing it), `read:t.c`. Changes: `assign`,
//! `assign_null`, `increment`, `decrement`, `multiply`, `min`, `max`, `set_add`, `set_remove`.
//! Every table and column must be the schema's. The workloads built into LitmusDB never need
//! this: their footprints are recorded from the code.

use crate::footprint::{Access, Change, Footprint, Source};
use crate::invariant::{ColRef, Schema};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredProcedures {
    #[serde(rename = "procedure", default)]
    pub procedures: Vec<DeclaredProcedure>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredProcedure {
    pub name: String,
    #[serde(default)]
    pub reads: Vec<String>,
    #[serde(default)]
    pub inserts: Vec<DeclaredInsert>,
    #[serde(default)]
    pub upserts: Vec<DeclaredInsert>,
    #[serde(default)]
    pub updates: Vec<DeclaredUpdate>,
    #[serde(default)]
    pub deletes: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredInsert {
    pub table: String,
    #[serde(default)]
    pub columns: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredUpdate {
    pub column: String,
    pub change: String,
}

/// What is wrong with a declared footprint.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeclError {
    #[error("procedure {procedure}: unknown table {table}")]
    UnknownTable { procedure: String, table: String },
    #[error("procedure {procedure}: unknown column {column}")]
    UnknownColumn { procedure: String, column: String },
    #[error("procedure {procedure}: bad {what} {value:?}")]
    Bad { procedure: String, what: &'static str, value: String },
    #[error("no [[procedure]] declared")]
    Empty,
}

impl DeclaredProcedures {
    /// The footprints, checked against the schema.
    pub fn footprints(&self, schema: &Schema) -> Result<Vec<Footprint>, DeclError> {
        if self.procedures.is_empty() {
            return Err(DeclError::Empty);
        }
        self.procedures.iter().map(|p| p.footprint(schema)).collect()
    }
}

impl DeclaredProcedure {
    fn footprint(&self, schema: &Schema) -> Result<Footprint, DeclError> {
        let p = &self.name;
        let table =
            |t: &str| schema.table(t).ok_or_else(|| DeclError::UnknownTable { procedure: p.clone(), table: t.into() });
        let col = |c: &str| -> Result<ColRef, DeclError> {
            let unknown = || DeclError::UnknownColumn { procedure: p.clone(), column: c.into() };
            let (t, name) = c.split_once('.').ok_or_else(unknown)?;
            let r = ColRef::new(t, name);
            schema.column(&r).map(|_| r).ok_or_else(unknown)
        };
        let bad = |what, value: &str| DeclError::Bad { procedure: p.clone(), what, value: value.into() };
        let mut accesses = BTreeSet::new();
        for t in &self.reads {
            accesses.insert(Access::Read { table: table(t)?.name.clone() });
        }
        for t in &self.deletes {
            accesses.insert(Access::Delete { table: table(t)?.name.clone() });
        }
        for (list, upsert) in [(&self.inserts, false), (&self.upserts, true)] {
            for ins in list {
                let t = table(&ins.table)?;
                for c in ins.columns.keys() {
                    col(&format!("{}.{c}", t.name))?;
                }
                let mut columns = Vec::new();
                for c in &t.columns {
                    let s = match ins.columns.get(&c.name).map(String::as_str) {
                        None | Some("chosen") => Source::Chosen,
                        Some("null") => Source::Null,
                        Some("token") => Source::Token,
                        Some(other) => match other.split_once(':') {
                            Some(("assigned", from)) => Source::Assigned { counter: col(from)? },
                            Some(("read", from)) => Source::Read { from: col(from)? },
                            _ => return Err(bad("column source", other)),
                        },
                    };
                    columns.push((c.name.clone(), s));
                }
                accesses.insert(Access::Insert { table: t.name.clone(), upsert, columns });
            }
        }
        for u in &self.updates {
            let change = match u.change.as_str() {
                "assign" => Change::Assign,
                "assign_null" => Change::AssignNull,
                "increment" => Change::Increment,
                "decrement" => Change::Decrement,
                "multiply" => Change::Multiply,
                "min" => Change::Min,
                "max" => Change::Max,
                "set_add" => Change::SetAdd,
                "set_remove" => Change::SetRemove,
                other => return Err(bad("change", other)),
            };
            accesses.insert(Access::Update { col: col(&u.column)?, change });
        }
        Ok(Footprint { procedure: p.clone(), runs: 0, committed: 0, panicked: 0, accesses })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::analyze_declared;
    use crate::rules::Verdict;

    const DDL: &str = "
        CREATE TABLE account (id INT PRIMARY KEY, balance DECIMAL NOT NULL,
                              CONSTRAINT \"balance >= 0\" CHECK (balance >= 0));
        CREATE TABLE history (id INT PRIMARY KEY, account INT NOT NULL REFERENCES account);
    ";

    fn decl(toml_like: Vec<DeclaredProcedure>) -> DeclaredProcedures {
        DeclaredProcedures { procedures: toml_like }
    }

    fn proc(name: &str) -> DeclaredProcedure {
        DeclaredProcedure {
            name: name.into(),
            reads: vec![],
            inserts: vec![],
            upserts: vec![],
            updates: vec![],
            deletes: vec![],
        }
    }

    #[test]
    fn declared_withdrawals_need_coordination_and_deposits_do_not() {
        let mut withdraw = proc("withdraw");
        withdraw.updates.push(DeclaredUpdate { column: "account.balance".into(), change: "decrement".into() });
        withdraw.inserts.push(DeclaredInsert {
            table: "history".into(),
            columns: [("id".to_string(), "token".to_string())].into_iter().collect(),
        });
        let mut deposit = proc("deposit");
        deposit.updates.push(DeclaredUpdate { column: "account.balance".into(), change: "increment".into() });
        let r = analyze_declared("bank", DDL, &decl(vec![withdraw, deposit])).unwrap();
        let verdict = |n: &str| r.procedures.iter().find(|p| p.procedure == n).unwrap();
        assert!(verdict("withdraw").reasons.iter().any(|p| p.judgement.rule == "Claim 13"));
        assert!(!verdict("deposit").needs_coordination);
        let inv = r.invariants.iter().find(|i| i.name == "balance >= 0").unwrap();
        assert_eq!(inv.verdict, Verdict::No);
    }

    #[test]
    fn declarations_are_checked_against_the_schema() {
        let schema = crate::ddl::parse(DDL).unwrap();
        let mut p = proc("p");
        p.deletes.push("nope".into());
        assert!(matches!(decl(vec![p]).footprints(&schema), Err(DeclError::UnknownTable { .. })));
        let mut p = proc("p");
        p.updates.push(DeclaredUpdate { column: "account.nope".into(), change: "assign".into() });
        assert!(matches!(decl(vec![p]).footprints(&schema), Err(DeclError::UnknownColumn { .. })));
        let mut p = proc("p");
        p.updates.push(DeclaredUpdate { column: "account.balance".into(), change: "frob".into() });
        assert!(matches!(decl(vec![p]).footprints(&schema), Err(DeclError::Bad { .. })));
        assert_eq!(decl(vec![]).footprints(&schema), Err(DeclError::Empty));
    }
}
