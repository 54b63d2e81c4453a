//! Table 2 as code: the verdict for one (invariant clause, operation) pair.
//!
//! [`judge`] returns `None` when the operation does not touch what the clause constrains (a
//! read never does: reads add no versions), and otherwise a [`Judgement`] citing the Claim
//! of the paper's Table 2 (proofs in its extended version, Appendix C) that decides the pair.
//! A pair no rule recognises is [`Verdict::Unknown`], *potentially not I-confluent*: sound,
//! not complete (§5.3). The rules, one per Table 2 row:
//!
//! | invariant | operation | I-C? | Claim |
//! |---|---|---|---|
//! | attribute equality (`= v`, `IN`) | any | yes | 1 |
//! | attribute inequality (`<> v`, `NOT NULL`) | any | yes | 2 |
//! | uniqueness (`PRIMARY KEY`, `UNIQUE`) | insert of a chosen value | **no** | 3 |
//! | uniqueness | insert of an assigned value or a unique token | yes | 4 |
//! | uniqueness | delete | yes | 3 (§5.1: deletions add no duplicate) |
//! | sequential ID (`AUTO_INCREMENT`, `LITMUS_SEQUENTIAL`, `LITMUS_NEXT_ID`) | insert, counter increment | **no** | 5 |
//! | foreign key | insert (either side), update of the reference | yes | 6 |
//! | foreign key | delete of a referenced row | **no** | 7 |
//! | foreign key | delete of a referencing row | yes | 7 (only referenced rows can dangle) |
//! | foreign key `ON DELETE CASCADE` | delete of a referenced row | yes | 8 |
//! | correspondence (`LITMUS_IFF`, FK type) | insert, set non-NULL | yes | 6 |
//! | correspondence | delete with the matching change in the same transaction | yes | 8 |
//! | correspondence | delete alone | **no** | 7 |
//! | secondary index (`LITMUS_INDEX`) | any write of the index or of indexed base rows | yes | 9 |
//! | materialized roll-up (MV) | insert, delete, increment/decrement, filter/join column update | yes | 10 |
//! | `>` / `>=` threshold | increment, assign, insert | yes | 11 |
//! | `<` / `<=` threshold | increment | **no** | 12 |
//! | `>` / `>=` threshold | decrement | **no** | 13 |
//! | `<` / `<=` threshold | decrement, assign, insert | yes | 14 |
//! | counter (`LITMUS_COUNTER`) | increment, decrement | yes | 11, 14 (no bound) |
//! | `[NOT] CONTAINS` | any | yes | 15, 16 |
//! | `SIZE =` | set add/remove/assign | **no** | 17 |
//!
//! An upsert whose id was read from the database rewrites a row of a sequence and assigns no
//! id: it does not touch a sequential-id clause.
//!
//! Everything else that touches a constrained column — an *assignment* to a summed roll-up
//! column or a counter (a read-modify-write that last-writer-wins merge would lose, §5.2), a
//! delete under a sequential ID, a multiply, an upsert over a counter — is Unknown.
//!
//! Upserts (`write`: insert or replace) are judged as inserts for referential and row-level
//! clauses and as assignments of every column for roll-ups and counters. Under a primary key an
//! upsert asks for no uniqueness check — it replaces the row with that key, and merge keeps one
//! row per key — so the pair is I-confluent by the same argument as Claim 4 (no two rows with one
//! key can result); it is reported with that reasoning.
//!
//! The analysis assumes what I-confluence assumes (§4.1): every transaction, run alone on a
//! valid state, leaves it valid. It does not check that; the workloads' `verify` does.

use crate::footprint::{Access, Change, Footprint, Source};
use crate::invariant::{Clause, Cmp, ColRef};
use serde::Serialize;
use std::collections::BTreeSet;
use std::fmt;

/// Ordered from best to worst: the verdict of several pairs is their maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// I-confluent: no coordination needed for this pair.
    Yes,
    /// Potentially not I-confluent: no rule recognises the pair (§5.3).
    Unknown,
    /// Not I-confluent: coordination is needed.
    No,
}

impl Verdict {
    pub fn needs_coordination(self) -> bool {
        self != Verdict::Yes
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Yes => "I-confluent",
            Verdict::Unknown => "potentially not I-confluent",
            Verdict::No => "not I-confluent",
        })
    }
}

/// The verdict for one pair, the rule that decides it and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Judgement {
    pub verdict: Verdict,
    /// `Claim 5`, `Claims 15, 16`, or `§5.3` for an unrecognised pair.
    pub rule: String,
    pub why: String,
}

fn yes(rule: &str, why: impl Into<String>) -> Option<Judgement> {
    Some(Judgement { verdict: Verdict::Yes, rule: rule.into(), why: why.into() })
}

fn no(rule: &str, why: impl Into<String>) -> Option<Judgement> {
    Some(Judgement { verdict: Verdict::No, rule: rule.into(), why: why.into() })
}

fn unknown(why: impl Into<String>) -> Option<Judgement> {
    Some(Judgement { verdict: Verdict::Unknown, rule: "§5.3".into(), why: why.into() })
}

/// Whether the access writes column `col` (an update of it, or an insert into its table).
fn writes_col(a: &Access, col: &ColRef) -> bool {
    match a {
        Access::Update { col: c, .. } => c == col,
        Access::Insert { table, .. } => *table == col.table,
        _ => false,
    }
}

fn source_of<'a>(columns: &'a [(String, Source)], col: &str) -> Option<&'a Source> {
    columns.iter().find(|(c, _)| c == col).map(|(_, s)| s)
}

/// Whether an upsert rewrites an existing row of a sequence: its id was read from the
/// database (an id already handed out), so no id is assigned.
fn rewrites(columns: &[(String, Source)], id: &str) -> bool {
    matches!(source_of(columns, id), Some(Source::Read { .. }))
}

/// The verdict for `clause` and `access` (one access of `txn`), or `None` if the access does
/// not touch what the clause constrains.
pub fn judge(clause: &Clause, access: &Access, txn: &Footprint) -> Option<Judgement> {
    if !access.is_write() {
        return None;
    }
    match clause {
        Clause::PrimaryKey { table, columns } | Clause::Unique { table, columns } => {
            judge_unique(clause, table, columns, access)
        }
        Clause::NotNull { col } if writes_col(access, col) => yes("Claim 2", "per-record inequality (≠ NULL)"),
        Clause::Equality { col, equal: true, .. } if writes_col(access, col) => {
            yes("Claim 1", "per-record attribute equality")
        }
        Clause::Equality { col, equal: false, .. } if writes_col(access, col) => {
            yes("Claim 2", "per-record attribute inequality")
        }
        Clause::NotNull { .. } | Clause::Equality { .. } => None,
        Clause::ForeignKey { table, columns, ref_table, ref_columns, cascade } => {
            judge_foreign_key(access, table, columns, ref_table, ref_columns, *cascade)
        }
        Clause::Threshold { col, cmp, bound } => judge_threshold(access, col, cmp, bound),
        Clause::Counter { col } => judge_counter(access, col),
        Clause::Sequential { col, .. } => judge_sequential(access, col),
        Clause::NextId { counter, id } => judge_next_id(access, counter, id),
        Clause::RollUp { values, filters, tables, not_null_filters } => {
            judge_roll_up(access, values, filters, tables, not_null_filters)
        }
        Clause::SecondaryIndex { index, base, cols } => judge_secondary_index(access, index, base, cols),
        Clause::Correspondence { cols, tables } => judge_correspondence(access, cols, tables, txn),
        Clause::Contains { col, negated: true, .. } if writes_col(access, col) => {
            yes("Claim 16", "NOT CONTAINS holds under any operation")
        }
        Clause::Contains { col, negated: false, .. } if writes_col(access, col) => {
            yes("Claim 15", "CONTAINS holds under any operation")
        }
        Clause::Contains { .. } => None,
        Clause::Size { col, size } => judge_size(access, col, size),
    }
}

/// (Claims 3, 4) A primary key or unique constraint.
fn judge_unique(clause: &Clause, table: &str, columns: &[String], access: &Access) -> Option<Judgement> {
    match access {
        Access::Insert { table: t, upsert, columns: cols } if t == table => {
            let primary = matches!(clause, Clause::PrimaryKey { .. });
            let sources: Vec<&Source> = columns.iter().filter_map(|c| source_of(cols, c)).collect();
            if let Some(s) = sources.iter().find(|s| matches!(s, Source::Assigned { .. } | Source::Token)) {
                yes("Claim 4", format!("the database chooses some unique value: key column {s}"))
            } else if *upsert && primary {
                yes(
                    "Claim 4",
                    "an upsert replaces the row with its key and merge keeps one row per key: no duplicate can \
                     arise (as Claim 4)",
                )
            } else {
                no("Claim 3", format!("inserts a specific value of ({}) chosen by the transaction", columns.join(", ")))
            }
        }
        Access::Update { col, change } if col.table == *table && columns.contains(&col.column) => match change {
            Change::Touch => None,
            _ => no("Claim 3", format!("{change} of unique column {col} chooses a specific value")),
        },
        Access::Delete { table: t } if t == table => yes("Claim 3", "deletions cannot introduce duplicates (§5.1)"),
        _ => None,
    }
}

/// (Claims 6–8) A foreign key.
fn judge_foreign_key(
    access: &Access,
    table: &str,
    columns: &[String],
    ref_table: &str,
    ref_columns: &[String],
    cascade: bool,
) -> Option<Judgement> {
    match access {
        Access::Insert { table: t, .. } if t == table || t == ref_table => {
            yes("Claim 6", "insertions under a foreign key: merge removes no referenced row")
        }
        Access::Update { col, change } if col.table == *table && columns.contains(&col.column) => match change {
            Change::Touch => None,
            _ => yes("Claim 6", "re-pointing a reference is an insertion of a reference (§5.1)"),
        },
        Access::Update { col, change } if col.table == *ref_table && ref_columns.contains(&col.column) => {
            match change {
                Change::Touch => None,
                _ => no("Claim 7", format!("{change} of referenced column {col} removes a referenced value")),
            }
        }
        Access::Delete { table: t } if t == ref_table && cascade => {
            yes("Claim 8", "cascading delete removes every referencing row, concurrent ones included")
        }
        Access::Delete { table: t } if t == ref_table => no(
            "Claim 7",
            format!("deleting a referenced {t} row while another transaction inserts a {table} row referencing it"),
        ),
        Access::Delete { table: t } if t == table => {
            yes("Claim 7", "deleting a referencing row leaves no dangling reference (only referenced rows can)")
        }
        _ => None,
    }
}

/// (Claims 11–14) A bound on a column.
fn judge_threshold(access: &Access, col: &ColRef, cmp: &Cmp, bound: &str) -> Option<Judgement> {
    {
        let lower = cmp.is_lower_bound();
        let (ok_claim, inv) = if lower {
            ("Claim 11", format!("{col} {cmp} {bound}"))
        } else {
            ("Claim 14", format!("{col} {cmp} {bound}"))
        };
        match access {
            Access::Insert { table, .. } if *table == col.table => {
                yes(ok_claim, format!("a new row's value is checked where it is written ({inv})"))
            }
            Access::Update { col: c, change } if c == col => match (change, lower) {
                (Change::Touch, _) => None,
                (Change::Increment, true) => yes("Claim 11", format!("increments keep {inv}")),
                (Change::Increment, false) => {
                    no("Claim 12", format!("two increments, each valid alone, can together break {inv}"))
                }
                (Change::Decrement, true) => {
                    no("Claim 13", format!("two decrements, each valid alone, can together break {inv}"))
                }
                (Change::Decrement, false) => yes("Claim 14", format!("decrements keep {inv}")),
                (Change::Assign | Change::AssignNull, _) => {
                    yes(ok_claim, format!("an assigned value is checked where it is written ({inv})"))
                }
                (other, _) => unknown(format!("{other} of {col} under {inv}: no rule")),
            },
            _ => None,
        }
    }
}

/// (Claims 11, 14; §5.2) A counter column.
fn judge_counter(access: &Access, col: &ColRef) -> Option<Judgement> {
    match access {
        Access::Insert { table, upsert: false, .. } if *table == col.table => {
            yes("Claims 11, 14", "a new counter starts at its inserted value")
        }
        Access::Insert { table, upsert: true, .. } if *table == col.table => {
            unknown(format!("an upsert replaces counter {col}: concurrent increments would be lost (§5.2)"))
        }
        Access::Update { col: c, change } if c == col => match change {
            Change::Touch => None,
            Change::Increment | Change::Decrement => {
                yes("Claims 11, 14", format!("counter {change}s merge by addition (§5.2), no bound to cross"))
            }
            other => {
                unknown(format!("{other} of counter {col}: last-writer-wins merge loses concurrent increments (§5.2)"))
            }
        },
        _ => None,
    }
}

/// (Claim 5) A gap-free sequence.
fn judge_sequential(access: &Access, col: &ColRef) -> Option<Judgement> {
    match access {
        Access::Insert { table, columns, upsert: true } if *table == col.table && rewrites(columns, &col.column) => {
            None
        }
        Access::Insert { table, columns, .. } if *table == col.table => {
            let s = source_of(columns, &col.column).cloned().unwrap_or(Source::Chosen);
            no(
                "Claim 5",
                format!(
                    "insert with {} = {s}: the next value of a sequence is known only after every concurrent \
                     insert (AUTO_INCREMENT)",
                    col.column
                ),
            )
        }
        Access::Update { col: c, change } if c == col && *change != Change::Touch => {
            unknown(format!("{change} of sequential column {col}: no rule"))
        }
        Access::Delete { table } if *table == col.table => {
            unknown(format!("delete from {table} under a gap-free sequence of {}: no rule", col.column))
        }
        _ => None,
    }
}

/// (Claim 5) Ids taken from a counter row.
fn judge_next_id(access: &Access, counter: &ColRef, id: &ColRef) -> Option<Judgement> {
    match access {
        Access::Update { col, change } if col == counter => match change {
            Change::Touch => None,
            Change::Increment => no(
                "Claim 5",
                format!("increments {counter} to assign the next {}: two replicas hand out the same id", id.column),
            ),
            other => unknown(format!("{other} of id counter {counter}: no rule")),
        },
        Access::Insert { table, columns, upsert: true } if *table == id.table && rewrites(columns, &id.column) => None,
        Access::Insert { table, columns, .. } if *table == id.table => {
            let s = source_of(columns, &id.column).cloned().unwrap_or(Source::Chosen);
            no("Claim 5", format!("insert with {} {s}: sequential assignment (AUTO_INCREMENT)", id.column))
        }
        Access::Insert { table, .. } if *table == counter.table => {
            unknown(format!("inserting an id counter row of {table}: no rule"))
        }
        Access::Delete { table } if *table == id.table || *table == counter.table => {
            unknown(format!("delete from {table} under sequential ids {id} (counter {counter}): no rule"))
        }
        _ => None,
    }
}

/// (Claim 10) A materialized roll-up.
fn judge_roll_up(
    access: &Access,
    values: &BTreeSet<ColRef>,
    filters: &BTreeSet<ColRef>,
    tables: &BTreeSet<String>,
    not_null_filters: &BTreeSet<ColRef>,
) -> Option<Judgement> {
    match access {
        Access::Insert { table, upsert, columns } if tables.contains(table) => {
            let outside = not_null_filters
                .iter()
                .any(|f| f.table == *table && source_of(columns, &f.column) == Some(&Source::Null));
            if outside {
                None
            } else if *upsert && values.iter().any(|v| v.table == *table) {
                unknown(format!(
                    "an upsert into {table} replaces summed values: concurrent deltas would be lost (§5.2)"
                ))
            } else {
                yes("Claim 10", format!("a new {table} row and the view change together, atomically visible"))
            }
        }
        Access::Delete { table } if tables.contains(table) => {
            yes("Claim 10", format!("a deleted {table} row and the view change together, atomically visible"))
        }
        Access::Update { col, change } if values.contains(col) => match change {
            Change::Touch => None,
            Change::Increment | Change::Decrement => {
                yes("Claim 10", format!("view maintenance by a delta ({change} of {col}); deltas merge by addition"))
            }
            other => unknown(format!(
                "{other} of summed column {col}: an assigned total replaces concurrent deltas under \
                 last-writer-wins (§5.2); maintain roll-ups with increments"
            )),
        },
        Access::Update { col, change } if filters.contains(col) => match change {
            Change::Touch => None,
            _ => yes(
                "Claim 10",
                format!("{col} moves a row into or out of the view, maintained in the same transaction"),
            ),
        },
        _ => None,
    }
}

/// (Claim 9) A secondary index table.
fn judge_secondary_index(access: &Access, index: &str, base: &str, cols: &BTreeSet<ColRef>) -> Option<Judgement> {
    match access {
        Access::Insert { table, .. } | Access::Delete { table } if table == index || table == base => {
            yes("Claim 9", format!("secondary index {index} maintained in the same transaction as {base}"))
        }
        Access::Update { col, change } if (col.table == *index || cols.contains(col)) && *change != Change::Touch => {
            yes("Claim 9", format!("secondary index {index} maintained in the same transaction as {base}"))
        }
        _ => None,
    }
}

/// (Claims 6–8) Rows that must correspond across tables.
fn judge_correspondence(
    access: &Access,
    cols: &BTreeSet<ColRef>,
    tables: &BTreeSet<String>,
    txn: &Footprint,
) -> Option<Judgement> {
    {
        let touches = |a: &Access| match a {
            Access::Insert { table, .. } | Access::Delete { table } => tables.contains(table),
            Access::Update { col, change } => cols.contains(col) && *change != Change::Touch,
            Access::Read { .. } => false,
        };
        match access {
            Access::Insert { table, .. } if tables.contains(table) => {
                yes("Claim 6", "insertions: correspondence constrains only the visibility of related writes")
            }
            Access::Update { col, change } if cols.contains(col) => match change {
                Change::Touch => None,
                Change::AssignNull => unknown(format!("clearing {col}: no rule")),
                Change::Assign => yes("Claim 6", format!("setting {col} is an insertion of the related fact")),
                other => unknown(format!("{other} of {col}: no rule")),
            },
            Access::Delete { table } if tables.contains(table) => {
                let matched = txn.writes().any(|a| a != access && touches(a));
                if matched {
                    yes("Claim 8", format!("deleting from {table} with the matching change in the same transaction (a cascading delete)"))
                } else {
                    no("Claim 7", format!("deleting from {table} without the matching change"))
                }
            }
            _ => None,
        }
    }
}

/// (Claims 2, 17) The size of a set column.
fn judge_size(access: &Access, col: &ColRef, size: &str) -> Option<Judgement> {
    match access {
        Access::Insert { table, upsert: false, .. } if *table == col.table => {
            yes("Claim 2", "a new row's set is checked where it is written (per record)")
        }
        Access::Update { col: c, change } if c == col && *change != Change::Touch => {
            no("Claim 17", format!("{change} of {col}: concurrent mutations change SIZE (= {size}) together"))
        }
        Access::Insert { table, upsert: true, .. } if *table == col.table => {
            no("Claim 17", format!("an upsert replaces the set {col} (SIZE = {size})"))
        }
        _ => None,
    }
}

/// Table 2, one test per row, named after its Claim. Each declares the invariant in the DDL
/// (so the parser is part of the case) and judges one operation.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariant::ColRef;

    const DDL: &str = "
        CREATE TABLE dept (id INT PRIMARY KEY, name TEXT NOT NULL, budget INT NOT NULL,
                           next_emp INT NOT NULL, headcount INT NOT NULL,
                           CONSTRAINT next_id CHECK (LITMUS_NEXT_ID(next_emp, emp.id)),
                           CONSTRAINT mv CHECK (headcount = LITMUS_COUNT(emp, emp.dept)));
        CREATE TABLE emp (id INT PRIMARY KEY, dept INT NOT NULL, salary INT NOT NULL,
                          badge INT NOT NULL, serial INT GENERATED ALWAYS AS IDENTITY,
                          tags TEXT[], status TEXT, last TEXT NOT NULL,
                          CONSTRAINT eq CHECK (status = 'active'),
                          CONSTRAINT ne CHECK (status <> 'fired'),
                          CONSTRAINT uniq UNIQUE (badge),
                          CONSTRAINT fk FOREIGN KEY (dept) REFERENCES dept (id),
                          CONSTRAINT gt CHECK (salary > 0),
                          CONSTRAINT lt CHECK (salary < 1000000),
                          CONSTRAINT has CHECK (LITMUS_CONTAINS(tags, 'staff')),
                          CONSTRAINT hasnt CHECK (NOT LITMUS_CONTAINS(tags, 'banned')),
                          CONSTRAINT size CHECK (LITMUS_SIZE(tags) = 3));
        CREATE TABLE emp_by_last (last TEXT NOT NULL, id INT NOT NULL, PRIMARY KEY (last, id),
                                  CONSTRAINT idx CHECK (LITMUS_INDEX(emp.last)));
        CREATE TABLE badge (emp INT PRIMARY KEY,
                            CONSTRAINT cascade FOREIGN KEY (emp) REFERENCES emp (id) ON DELETE CASCADE);
    ";

    fn clauses(name: &str) -> Vec<Clause> {
        let schema = crate::ddl::parse(DDL).expect("the test DDL parses");
        schema.invariants.into_iter().find(|i| i.name == name).unwrap_or_else(|| panic!("no {name}")).clauses
    }

    fn clause(name: &str) -> Clause {
        clauses(name).into_iter().next().expect("a clause")
    }

    fn footprint(accesses: &[Access]) -> Footprint {
        Footprint {
            procedure: "t".into(),
            runs: 1,
            committed: 1,
            panicked: 0,
            accesses: accesses.iter().cloned().collect(),
        }
    }

    fn insert(table: &str, cols: &[(&str, Source)]) -> Access {
        Access::Insert {
            table: table.into(),
            upsert: false,
            columns: cols.iter().map(|(c, s)| (c.to_string(), s.clone())).collect(),
        }
    }

    fn update(table: &str, col: &str, change: Change) -> Access {
        Access::Update { col: ColRef::new(table, col), change }
    }

    fn delete(table: &str) -> Access {
        Access::Delete { table: table.into() }
    }

    /// Judges `access` (alone in its transaction, or with `also`) under invariant `name`.
    fn judged(name: &str, access: &Access, also: &[Access]) -> Judgement {
        let mut all = vec![access.clone()];
        all.extend_from_slice(also);
        let fp = footprint(&all);
        clauses(name)
            .iter()
            .filter_map(|c| judge(c, access, &fp))
            .max_by_key(|j| j.verdict)
            .unwrap_or_else(|| panic!("{name} is not touched by {access}"))
    }

    fn assert_rule(j: &Judgement, verdict: Verdict, rule: &str) {
        assert_eq!((j.verdict, j.rule.as_str()), (verdict, rule), "{j:?}");
    }

    #[test]
    fn claim_1_attribute_equality_any_operation_is_confluent() {
        assert_rule(&judged("eq", &update("emp", "status", Change::Assign), &[]), Verdict::Yes, "Claim 1");
        assert_rule(&judged("eq", &insert("emp", &[]), &[]), Verdict::Yes, "Claim 1");
    }

    #[test]
    fn claim_2_attribute_inequality_any_operation_is_confluent() {
        assert_rule(&judged("ne", &update("emp", "status", Change::Assign), &[]), Verdict::Yes, "Claim 2");
        assert_rule(
            &judged("emp: NOT NULL", &update("emp", "salary", Change::Decrement), &[]),
            Verdict::Yes,
            "Claim 2",
        );
    }

    #[test]
    fn claim_3_uniqueness_choose_specific_value_is_not_confluent() {
        let chosen = insert("emp", &[("id", Source::Chosen), ("badge", Source::Chosen)]);
        assert_rule(&judged("emp: PRIMARY KEY", &chosen, &[]), Verdict::No, "Claim 3");
        assert_rule(&judged("uniq", &chosen, &[]), Verdict::No, "Claim 3");
        assert_rule(&judged("uniq", &update("emp", "badge", Change::Assign), &[]), Verdict::No, "Claim 3");
        // Deletions cannot introduce duplicates (§5.1).
        assert_rule(&judged("emp: PRIMARY KEY", &delete("emp"), &[]), Verdict::Yes, "Claim 3");
    }

    #[test]
    fn claim_4_uniqueness_choose_some_value_is_confluent() {
        let counter = ColRef::new("dept", "next_emp");
        let assigned = insert("emp", &[("id", Source::Assigned { counter }), ("badge", Source::Token)]);
        assert_rule(&judged("emp: PRIMARY KEY", &assigned, &[]), Verdict::Yes, "Claim 4");
        assert_rule(&judged("uniq", &assigned, &[]), Verdict::Yes, "Claim 4");
    }

    #[test]
    fn claim_5_auto_increment_insert_is_not_confluent() {
        let ins = insert("emp", &[("serial", Source::Chosen)]);
        assert_rule(&judged("emp: AUTO_INCREMENT (serial)", &ins, &[]), Verdict::No, "Claim 5");
        // Sequential id assignment per group from a counter row (TPC-C's d_next_o_id).
        let counter = ColRef::new("dept", "next_emp");
        let bump = update("dept", "next_emp", Change::Increment);
        let ins = insert("emp", &[("id", Source::Assigned { counter })]);
        assert_rule(&judged("next_id", &bump, std::slice::from_ref(&ins)), Verdict::No, "Claim 5");
        assert_rule(&judged("next_id", &ins, &[bump]), Verdict::No, "Claim 5");
        // Removing from a sequence is a pair Table 2 does not decide.
        assert_eq!(judged("next_id", &delete("emp"), &[]).verdict, Verdict::Unknown);
    }

    #[test]
    fn claim_6_foreign_key_insert_is_confluent() {
        assert_rule(&judged("fk", &insert("emp", &[]), &[]), Verdict::Yes, "Claim 6");
        assert_rule(&judged("fk", &insert("dept", &[]), &[]), Verdict::Yes, "Claim 6");
        assert_rule(&judged("fk", &update("emp", "dept", Change::Assign), &[]), Verdict::Yes, "Claim 6");
    }

    #[test]
    fn claim_7_foreign_key_delete_is_not_confluent() {
        assert_rule(&judged("fk", &delete("dept"), &[]), Verdict::No, "Claim 7");
        // Deleting a referencing row leaves no dangling reference.
        assert_rule(&judged("fk", &delete("emp"), &[]), Verdict::Yes, "Claim 7");
    }

    #[test]
    fn claim_8_foreign_key_cascading_delete_is_confluent() {
        assert_rule(&judged("cascade", &delete("emp"), &[]), Verdict::Yes, "Claim 8");
    }

    #[test]
    fn claim_9_secondary_index_update_is_confluent() {
        assert_rule(&judged("idx", &insert("emp_by_last", &[]), &[]), Verdict::Yes, "Claim 9");
        assert_rule(&judged("idx", &update("emp", "last", Change::Assign), &[]), Verdict::Yes, "Claim 9");
    }

    #[test]
    fn claim_10_materialized_view_update_is_confluent() {
        let ins = insert("emp", &[]);
        let bump = update("dept", "headcount", Change::Increment);
        assert_rule(&judged("mv", &ins, std::slice::from_ref(&bump)), Verdict::Yes, "Claim 10");
        assert_rule(&judged("mv", &bump, &[ins]), Verdict::Yes, "Claim 10");
        assert_rule(&judged("mv", &delete("emp"), &[]), Verdict::Yes, "Claim 10");
        // A total assigned from a read replaces concurrent deltas: not a rule of Table 2.
        assert_rule(&judged("mv", &update("dept", "headcount", Change::Assign), &[]), Verdict::Unknown, "§5.3");
    }

    #[test]
    fn claim_11_greater_than_increment_is_confluent() {
        assert_rule(&judged("gt", &update("emp", "salary", Change::Increment), &[]), Verdict::Yes, "Claim 11");
        assert_rule(&judged("gt", &update("emp", "salary", Change::Assign), &[]), Verdict::Yes, "Claim 11");
    }

    #[test]
    fn claim_12_less_than_increment_is_not_confluent() {
        assert_rule(&judged("lt", &update("emp", "salary", Change::Increment), &[]), Verdict::No, "Claim 12");
    }

    #[test]
    fn claim_13_greater_than_decrement_is_not_confluent() {
        assert_rule(&judged("gt", &update("emp", "salary", Change::Decrement), &[]), Verdict::No, "Claim 13");
    }

    #[test]
    fn claim_14_less_than_decrement_is_confluent() {
        assert_rule(&judged("lt", &update("emp", "salary", Change::Decrement), &[]), Verdict::Yes, "Claim 14");
        assert_rule(&judged("lt", &update("emp", "salary", Change::Assign), &[]), Verdict::Yes, "Claim 14");
    }

    #[test]
    fn claims_15_16_contains_any_operation_is_confluent() {
        for change in [Change::SetAdd, Change::SetRemove, Change::Assign] {
            assert_rule(&judged("has", &update("emp", "tags", change), &[]), Verdict::Yes, "Claim 15");
            assert_rule(&judged("hasnt", &update("emp", "tags", change), &[]), Verdict::Yes, "Claim 16");
        }
    }

    #[test]
    fn claim_17_size_mutation_is_not_confluent() {
        for change in [Change::SetAdd, Change::SetRemove] {
            assert_rule(&judged("size", &update("emp", "tags", change), &[]), Verdict::No, "Claim 17");
        }
    }

    #[test]
    fn reads_and_zero_increments_touch_nothing() {
        let read = Access::Read { table: "emp".into() };
        for name in ["gt", "lt", "fk", "uniq", "mv", "size"] {
            assert!(judge(&clause(name), &read, &footprint(std::slice::from_ref(&read))).is_none(), "{name}");
        }
        let touch = update("emp", "salary", Change::Touch);
        assert!(judge(&clause("gt"), &touch, &footprint(std::slice::from_ref(&touch))).is_none());
    }

    #[test]
    fn unrecognised_pairs_are_potentially_not_confluent() {
        // §5.3: sound, not complete — a multiply under a threshold has no rule.
        let j = judged("gt", &update("emp", "salary", Change::Multiply), &[]);
        assert_eq!(j.verdict, Verdict::Unknown);
        assert!(j.verdict.needs_coordination());
    }
}
