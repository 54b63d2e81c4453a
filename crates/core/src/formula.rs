//! Update formulas.
//!
//! A formula is an update expressed as a function of the old value (`bal += 10`) rather than as
//! the new value. They are first-class because three designs are built on them:
//!
//! * **BASIC / TFP** (§IV.A "logical formula caching"): a partition keeps the list of formulas
//!   applied to an item instead of copies of versions; a read at timestamp `t` folds the formulas
//!   older than `t` over the base value.
//! * **Invariant confluence** (§5, §6): commuting formulas (counters, set insertions) merge
//!   without coordination; [`Formula::commutes_with`] is the table the analyzer consults.
//! * **Salt roll-forward** (§6.2): the redo record of a write is a formula, replayed exactly once.
//!
//! ## Commutativity table
//!
//! `a.commutes_with(b)` is true when applying `a` then `b` gives the same value as `b` then `a`
//! for every old value on which both are defined:
//!
//! ```text
//!              Assign(y)  Add   Mul   Min   Max   SetAdd(y)  SetRemove(y)
//! Assign(x)    x == y     no    no    no    no    no         no
//! Add          no         yes   no    no    no    -          -
//! Mul          no         no    yes   no    no    -          -
//! Min          no         no    no    yes   no    -          -
//! Max          no         no    no    no    yes   -          -
//! SetAdd(x)    no         -     -     -     -     yes        x != y
//! SetRemove(x) no         -     -     -     -     x != y     yes
//! ```
//!
//! (`-`: the pair never applies to the same column type, reported as not commuting.) The unit
//! test `commutativity_table_matches_brute_force` checks every "yes" against evaluation.

use crate::error::InvalidInput;
use crate::value::Value;
use serde::{Deserialize, Serialize};
use std::fmt;

/// An update formula over one value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Formula {
    /// `v := x`
    Assign(Value),
    /// `v := v + x` (int or decimal)
    Add(Value),
    /// `v := v * x` (int or decimal)
    Multiply(Value),
    /// `v := min(v, x)`
    Min(Value),
    /// `v := max(v, x)`
    Max(Value),
    /// `v := v ∪ {x}`
    SetAdd(Value),
    /// `v := v \ {x}`
    SetRemove(Value),
}

impl fmt::Display for Formula {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Formula::Assign(x) => write!(f, ":= {x}"),
            Formula::Add(x) => write!(f, "+= {x}"),
            Formula::Multiply(x) => write!(f, "*= {x}"),
            Formula::Min(x) => write!(f, "min= {x}"),
            Formula::Max(x) => write!(f, "max= {x}"),
            Formula::SetAdd(x) => write!(f, "∪= {{{x}}}"),
            Formula::SetRemove(x) => write!(f, "∖= {{{x}}}"),
        }
    }
}

impl Formula {
    /// The operand of the formula.
    pub fn operand(&self) -> &Value {
        match self {
            Formula::Assign(x)
            | Formula::Add(x)
            | Formula::Multiply(x)
            | Formula::Min(x)
            | Formula::Max(x)
            | Formula::SetAdd(x)
            | Formula::SetRemove(x) => x,
        }
    }

    /// Applies the formula to `old`, returning the new value. A type mismatch or an overflow is
    /// an error and leaves nothing changed (the caller applies the result only on success).
    pub fn apply(&self, old: &Value) -> Result<Value, InvalidInput> {
        let mismatch = || InvalidInput::FormulaType { formula: self.to_string(), value: old.type_name() };
        let overflow = || InvalidInput::Overflow(format!("{old} {self}"));
        match (self, old) {
            (Formula::Assign(x), _) => Ok(x.clone()),
            (Formula::Add(Value::Int(x)), Value::Int(v)) => v.checked_add(*x).map(Value::Int).ok_or_else(overflow),
            (Formula::Add(Value::Decimal(x)), Value::Decimal(v)) => {
                v.checked_add(*x).map(Value::Decimal).ok_or_else(overflow)
            }
            (Formula::Multiply(Value::Int(x)), Value::Int(v)) => v.checked_mul(*x).map(Value::Int).ok_or_else(overflow),
            (Formula::Multiply(Value::Decimal(x)), Value::Decimal(v)) => {
                v.checked_mul(*x).map(Value::Decimal).ok_or_else(overflow)
            }
            (Formula::Min(x), v) | (Formula::Max(x), v)
                if std::mem::discriminant(x) == std::mem::discriminant(v) && !v.is_null() =>
            {
                let pick_x = if matches!(self, Formula::Min(_)) { x < v } else { x > v };
                Ok(if pick_x { x.clone() } else { v.clone() })
            }
            (Formula::SetAdd(x), Value::Set(s)) => {
                let mut s = s.clone();
                s.insert(x.clone());
                Ok(Value::Set(s))
            }
            (Formula::SetRemove(x), Value::Set(s)) => {
                let mut s = s.clone();
                s.remove(x);
                Ok(Value::Set(s))
            }
            _ => Err(mismatch()),
        }
    }

    /// Whether `self` and `other` commute (see the table in the module doc).
    pub fn commutes_with(&self, other: &Formula) -> bool {
        use Formula::*;
        match (self, other) {
            (Assign(x), Assign(y)) => x == y,
            (Add(_), Add(_)) | (Multiply(_), Multiply(_)) | (Min(_), Min(_)) | (Max(_), Max(_)) => true,
            (SetAdd(_), SetAdd(_)) | (SetRemove(_), SetRemove(_)) => true,
            (SetAdd(x), SetRemove(y)) | (SetRemove(y), SetAdd(x)) => x != y,
            _ => false,
        }
    }

    /// Whether applying the formula twice equals applying it once (safe to redo without a
    /// context table).
    pub fn is_idempotent(&self) -> bool {
        matches!(
            self,
            Formula::Assign(_) | Formula::Min(_) | Formula::Max(_) | Formula::SetAdd(_) | Formula::SetRemove(_)
        )
    }
}

/// A formula on one column of a row.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ColumnUpdate {
    pub column: usize,
    pub formula: Formula,
}

impl ColumnUpdate {
    pub fn new(column: usize, formula: Formula) -> Self {
        ColumnUpdate { column, formula }
    }
}

/// Applies column updates to a row. All-or-nothing: on error the row is untouched.
pub fn apply_updates(row: &mut [Value], updates: &[ColumnUpdate]) -> Result<(), InvalidInput> {
    let mut staged: Vec<(usize, Value)> = Vec::with_capacity(updates.len());
    stage_updates(row, updates, &mut staged)?;
    for (c, v) in staged {
        row[c] = v;
    }
    Ok(())
}

/// The new values `updates` give `row`'s columns, pushed onto `staged` (column, value) without
/// touching the row: a column already in `staged` (an earlier update's value) is read from
/// there, the latest entry winning. On error `staged` may hold part of the updates.
pub fn stage_updates(
    row: &[Value],
    updates: &[ColumnUpdate],
    staged: &mut Vec<(usize, Value)>,
) -> Result<(), InvalidInput> {
    for u in updates {
        let Some(cur) = row.get(u.column) else {
            return Err(InvalidInput::UnknownColumn { table: "?".into(), column: format!("#{}", u.column) });
        };
        // Later updates to the same column see earlier ones.
        let cur = staged.iter().rev().find(|(c, _)| *c == u.column).map(|(_, v)| v).unwrap_or(cur);
        let new = u.formula.apply(cur)?;
        staged.push((u.column, new));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Decimal;

    fn set(xs: &[i64]) -> Value {
        Value::set(xs.iter().map(|&x| Value::Int(x)))
    }

    #[test]
    fn apply_each_formula() {
        assert_eq!(Formula::Assign(Value::Int(3)).apply(&Value::Int(1)).unwrap(), Value::Int(3));
        assert_eq!(Formula::Add(Value::Int(3)).apply(&Value::Int(1)).unwrap(), Value::Int(4));
        assert_eq!(
            Formula::Add(Value::Decimal(Decimal::from_cents(5)))
                .apply(&Value::Decimal(Decimal::from_cents(10)))
                .unwrap(),
            Value::Decimal(Decimal::from_cents(15))
        );
        assert_eq!(Formula::Multiply(Value::Int(3)).apply(&Value::Int(2)).unwrap(), Value::Int(6));
        assert_eq!(Formula::Min(Value::Int(3)).apply(&Value::Int(2)).unwrap(), Value::Int(2));
        assert_eq!(Formula::Max(Value::Int(3)).apply(&Value::Int(2)).unwrap(), Value::Int(3));
        assert_eq!(Formula::SetAdd(Value::Int(3)).apply(&set(&[1])).unwrap(), set(&[1, 3]));
        assert_eq!(Formula::SetRemove(Value::Int(1)).apply(&set(&[1, 3])).unwrap(), set(&[3]));
    }

    #[test]
    fn type_mismatch_and_overflow_are_errors() {
        assert!(matches!(Formula::Add(Value::Int(1)).apply(&Value::Null), Err(InvalidInput::FormulaType { .. })));
        assert!(matches!(Formula::Add(Value::Int(1)).apply(&"x".into()), Err(InvalidInput::FormulaType { .. })));
        assert!(matches!(Formula::Add(Value::Int(1)).apply(&Value::Int(i64::MAX)), Err(InvalidInput::Overflow(_))));
        assert!(Formula::SetAdd(Value::Int(1)).apply(&Value::Int(1)).is_err());
    }

    #[test]
    fn apply_updates_is_all_or_nothing() {
        let mut row = vec![Value::Int(1), Value::String("a".into())];
        let bad =
            [ColumnUpdate::new(0, Formula::Add(Value::Int(1))), ColumnUpdate::new(1, Formula::Add(Value::Int(1)))];
        assert!(apply_updates(&mut row, &bad).is_err());
        assert_eq!(row, vec![Value::Int(1), Value::String("a".into())]);
        let good =
            [ColumnUpdate::new(0, Formula::Add(Value::Int(1))), ColumnUpdate::new(0, Formula::Multiply(Value::Int(5)))];
        apply_updates(&mut row, &good).unwrap();
        assert_eq!(row[0], Value::Int(10));
    }

    /// Every pair the table says commutes must commute on a spread of old values; every
    /// "no" cell is spot-checked with a witness (a table marked "no" is conservative: some
    /// operand pairs, e.g. `Assign(x)` and `Min(y)` with x <= y, commute anyway).
    #[test]
    fn commutativity_table_matches_brute_force() {
        let ints = [-3i64, 0, 2, 7];
        let mut formulas = vec![];
        for &x in &ints {
            let v = Value::Int(x);
            formulas.extend([
                Formula::Assign(v.clone()),
                Formula::Add(v.clone()),
                Formula::Multiply(v.clone()),
                Formula::Min(v.clone()),
                Formula::Max(v.clone()),
            ]);
        }
        for a in &formulas {
            for b in &formulas {
                for &o in &ints {
                    let old = Value::Int(o);
                    let ab = a.apply(&old).and_then(|v| b.apply(&v)).unwrap();
                    let ba = b.apply(&old).and_then(|v| a.apply(&v)).unwrap();
                    if a.commutes_with(b) {
                        assert_eq!(ab, ba, "{a} and {b} should commute on {old}");
                    }
                }
            }
        }
        // Spot checks of "no" cells with a witness.
        let old = Value::Int(2);
        for (a, b) in [
            (Formula::Add(Value::Int(1)), Formula::Multiply(Value::Int(3))),
            (Formula::Assign(Value::Int(1)), Formula::Add(Value::Int(1))),
            (Formula::Min(Value::Int(0)), Formula::Max(Value::Int(5))),
        ] {
            assert!(!a.commutes_with(&b));
            assert_ne!(
                a.apply(&old).and_then(|v| b.apply(&v)).unwrap(),
                b.apply(&old).and_then(|v| a.apply(&v)).unwrap()
            );
        }
        let sets = [set(&[]), set(&[1]), set(&[1, 2])];
        let sf = [
            Formula::SetAdd(Value::Int(1)),
            Formula::SetAdd(Value::Int(2)),
            Formula::SetRemove(Value::Int(1)),
            Formula::SetRemove(Value::Int(2)),
        ];
        for a in &sf {
            for b in &sf {
                let differs = sets.iter().any(|old| {
                    a.apply(old).and_then(|v| b.apply(&v)).unwrap() != b.apply(old).and_then(|v| a.apply(&v)).unwrap()
                });
                assert_eq!(a.commutes_with(b), !differs, "{a} vs {b}");
            }
        }
    }
}
