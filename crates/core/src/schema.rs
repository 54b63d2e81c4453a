//! Tables and the catalog.
//!
//! A table has typed columns, a primary key (a list of columns, encoded with [`Key`]) and a
//! partitioning rule. TPC-C partitions every table by warehouse id (the first key column) and
//! replicates ITEM to every partition, as H-Store and Granola do (Granola §6.2); the catalog
//! expresses both.
//!
//! The catalog validates every row, key and formula before anything is written, so bad input
//! gets a typed [`InvalidInput`] and changes nothing.

use crate::error::InvalidInput;
use crate::formula::ColumnUpdate;
use crate::ids::{PartitionId, TableId};
use crate::key::Key;
use crate::limits;
use crate::value::{ColumnType, Row, Value};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    pub name: String,
    pub ty: ColumnType,
    pub nullable: bool,
}

impl Column {
    pub fn new(name: &str, ty: ColumnType) -> Self {
        Column { name: name.into(), ty, nullable: false }
    }
    pub fn nullable(name: &str, ty: ColumnType) -> Self {
        Column { name: name.into(), ty, nullable: true }
    }
}

/// How a table's rows map to partitions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Partitioning {
    /// By the first `prefix_len` primary-key columns. A single integer column `w` maps to
    /// partition `w mod P` (predictable placement, e.g. warehouse `w`); anything else hashes the
    /// encoded prefix with FNV-1a.
    KeyPrefix { prefix_len: usize },
    /// A full copy on every partition (read-only reference data such as TPC-C ITEM).
    Replicated,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSchema {
    pub id: TableId,
    pub name: String,
    pub columns: Vec<Column>,
    /// Indices into `columns`, in key order.
    pub primary_key: Vec<usize>,
    pub partitioning: Partitioning,
}

impl TableSchema {
    /// Builds a table; asserts the definition is well formed (a schema is code, not user input).
    pub fn new(name: &str, columns: Vec<Column>, primary_key: &[&str], partitioning: Partitioning) -> Self {
        assert!(!columns.is_empty() && columns.len() <= limits::COLUMNS_MAX, "table {name}: bad column count");
        let primary_key: Vec<usize> = primary_key
            .iter()
            .map(|k| {
                columns.iter().position(|c| c.name == *k).unwrap_or_else(|| panic!("table {name}: no key column {k}"))
            })
            .collect();
        assert!(!primary_key.is_empty(), "table {name}: empty primary key");
        for &k in &primary_key {
            assert!(!matches!(columns[k].ty, ColumnType::Set(_)), "table {name}: set key column");
        }
        if let Partitioning::KeyPrefix { prefix_len } = partitioning {
            assert!(prefix_len >= 1 && prefix_len <= primary_key.len(), "table {name}: bad partition prefix");
        }
        TableSchema { id: TableId(u32::MAX), name: name.into(), columns, primary_key, partitioning }
    }

    pub fn column(&self, name: &str) -> Result<usize, InvalidInput> {
        self.columns
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| InvalidInput::UnknownColumn { table: self.name.clone(), column: name.into() })
    }

    /// The primary-key values of a row.
    pub fn key_values(&self, row: &[Value]) -> Vec<Value> {
        self.primary_key.iter().map(|&i| row[i].clone()).collect()
    }

    /// Encodes the primary key of a (validated) row.
    pub fn row_key(&self, row: &[Value]) -> Result<Key, InvalidInput> {
        Key::encode(&self.key_values(row))
    }

    /// Checks a full row: arity, types, nullability, sizes.
    pub fn validate_row(&self, row: &[Value]) -> Result<(), InvalidInput> {
        if row.len() != self.columns.len() {
            return Err(InvalidInput::WrongArity {
                what: format!("columns of {}", self.name),
                expected: self.columns.len(),
                got: row.len(),
            });
        }
        for (v, c) in row.iter().zip(&self.columns) {
            self.validate_value(c, v)?;
        }
        for &k in &self.primary_key {
            if row[k].is_null() {
                return Err(InvalidInput::NullViolation {
                    table: self.name.clone(),
                    column: self.columns[k].name.clone(),
                });
            }
        }
        Ok(())
    }

    fn validate_value(&self, c: &Column, v: &Value) -> Result<(), InvalidInput> {
        if v.is_null() {
            if c.nullable {
                return Ok(());
            }
            return Err(InvalidInput::NullViolation { table: self.name.clone(), column: c.name.clone() });
        }
        if !v.has_type(&c.ty) {
            return Err(InvalidInput::WrongType {
                what: format!("{}.{}", self.name, c.name),
                expected: c.ty.to_string(),
                got: v.type_name(),
            });
        }
        if v.within_limits() {
            return Ok(());
        }
        v.check_limits(&format!("{}.{}", self.name, c.name))
    }

    /// Checks a key tuple (a full key, or a prefix for range reads): arity and types.
    pub fn validate_key(&self, key: &[Value], allow_prefix: bool) -> Result<(), InvalidInput> {
        let n = self.primary_key.len();
        if key.len() > n || (!allow_prefix && key.len() != n) {
            return Err(InvalidInput::WrongArity {
                what: format!("key columns of {}", self.name),
                expected: n,
                got: key.len(),
            });
        }
        for (v, &i) in key.iter().zip(&self.primary_key) {
            let c = &self.columns[i];
            if v.is_null() || !v.has_type(&c.ty) {
                return Err(InvalidInput::WrongType {
                    what: format!("key {}.{}", self.name, c.name),
                    expected: c.ty.to_string(),
                    got: v.type_name(),
                });
            }
            if !v.within_limits() {
                v.check_limits(&format!("key {}.{}", self.name, c.name))?;
            }
        }
        Ok(())
    }

    /// Checks column updates: the columns exist, are not key columns, and operands are typed
    /// to fit the column (formula applicability to the current value is checked at apply time).
    pub fn validate_updates(&self, updates: &[ColumnUpdate]) -> Result<(), InvalidInput> {
        for u in updates {
            let Some(c) = self.columns.get(u.column) else {
                return Err(InvalidInput::UnknownColumn { table: self.name.clone(), column: format!("#{}", u.column) });
            };
            if self.primary_key.contains(&u.column) {
                return Err(InvalidInput::WrongType {
                    what: format!("update of key column {}.{}", self.name, c.name),
                    expected: "non-key column".into(),
                    got: "key column".into(),
                });
            }
            let op = u.formula.operand();
            let ok = match (&u.formula, &c.ty) {
                (crate::Formula::SetAdd(_) | crate::Formula::SetRemove(_), ColumnType::Set(elem)) => op.has_type(elem),
                (crate::Formula::Assign(v), _) if v.is_null() => c.nullable,
                (_, ty) => op.has_type(ty),
            };
            if !ok {
                return Err(InvalidInput::FormulaType {
                    formula: u.formula.to_string(),
                    value: format!("{}.{} ({})", self.name, c.name, c.ty),
                });
            }
            if !op.within_limits() {
                op.check_limits(&format!("{}.{}", self.name, c.name))?;
            }
        }
        Ok(())
    }

    /// The partition holding the row with this key, or `None` for replicated tables.
    pub fn partition_of(&self, key: &[Value], partitions: u32) -> Option<PartitionId> {
        assert!(partitions > 0);
        match self.partitioning {
            Partitioning::Replicated => None,
            Partitioning::KeyPrefix { prefix_len } => {
                assert!(key.len() >= prefix_len, "partition_of needs the partition-key prefix");
                let prefix = &key[..prefix_len];
                if let [Value::Int(i)] = prefix {
                    return Some(PartitionId(i.rem_euclid(partitions as i64) as u32));
                }
                let enc = Key::encode(prefix).expect("validated key");
                Some(PartitionId((fnv1a(enc.as_bytes()) % partitions as u64) as u32))
            }
        }
    }

    /// Whether a key prefix determines the partition (a range read within one partition).
    pub fn prefix_determines_partition(&self, prefix_len: usize) -> bool {
        match self.partitioning {
            Partitioning::Replicated => true,
            Partitioning::KeyPrefix { prefix_len: p } => prefix_len >= p,
        }
    }
}

/// FNV-1a: a stable hash (the same on every machine and version), unlike `DefaultHasher`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// All tables of a database.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    tables: Vec<TableSchema>,
    by_name: BTreeMap<String, TableId>,
}

impl Catalog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a table and returns its id. Adding an identical definition twice is a no-op (several
    /// workloads may share a table); a conflicting one is a programming error.
    pub fn add(&mut self, mut table: TableSchema) -> TableId {
        if let Some(&id) = self.by_name.get(&table.name) {
            let existing = &self.tables[id.0 as usize];
            assert!(
                existing.columns == table.columns && existing.primary_key == table.primary_key,
                "conflicting definitions of table {}",
                table.name
            );
            return id;
        }
        let id = TableId(self.tables.len() as u32);
        table.id = id;
        self.by_name.insert(table.name.clone(), id);
        self.tables.push(table);
        id
    }

    pub fn table(&self, id: TableId) -> Result<&TableSchema, InvalidInput> {
        self.tables.get(id.0 as usize).ok_or(InvalidInput::UnknownTableId(id.0))
    }

    pub fn table_by_name(&self, name: &str) -> Result<&TableSchema, InvalidInput> {
        self.by_name
            .get(name)
            .map(|id| &self.tables[id.0 as usize])
            .ok_or_else(|| InvalidInput::UnknownTable(name.into()))
    }

    pub fn tables(&self) -> impl Iterator<Item = &TableSchema> {
        self.tables.iter()
    }

    /// Merges another catalog's tables into this one.
    pub fn merge(&mut self, other: &Catalog) {
        for t in &other.tables {
            self.add(t.clone());
        }
    }
}

/// A fully validated row write, ready for the store.
pub fn check_row(table: &TableSchema, row: &Row) -> Result<Key, InvalidInput> {
    table.validate_row(row)?;
    table.row_key(row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formula::Formula;

    fn accounts() -> TableSchema {
        TableSchema::new(
            "accounts",
            vec![
                Column::new("branch", ColumnType::Int),
                Column::new("id", ColumnType::Int),
                Column::new("balance", ColumnType::Decimal),
                Column::nullable("note", ColumnType::String),
            ],
            &["branch", "id"],
            Partitioning::KeyPrefix { prefix_len: 1 },
        )
    }

    #[test]
    fn validate_row_reports_typed_errors() {
        let t = accounts();
        let ok = vec![Value::Int(1), Value::Int(2), Value::Decimal(crate::Decimal::ZERO), Value::Null];
        assert!(t.validate_row(&ok).is_ok());
        assert!(matches!(t.validate_row(&ok[..3]), Err(InvalidInput::WrongArity { .. })));
        let mut bad = ok.clone();
        bad[2] = Value::Int(1);
        assert!(matches!(t.validate_row(&bad), Err(InvalidInput::WrongType { .. })));
        let mut bad = ok.clone();
        bad[1] = Value::Null;
        assert!(matches!(t.validate_row(&bad), Err(InvalidInput::NullViolation { .. })));
    }

    #[test]
    fn validate_updates_rejects_key_columns_and_bad_operands() {
        let t = accounts();
        assert!(t.validate_updates(&[ColumnUpdate::new(2, Formula::Add(Value::Decimal(crate::Decimal(1))))]).is_ok());
        assert!(t.validate_updates(&[ColumnUpdate::new(0, Formula::Add(Value::Int(1)))]).is_err());
        assert!(t.validate_updates(&[ColumnUpdate::new(2, Formula::Add(Value::Int(1)))]).is_err());
        assert!(t.validate_updates(&[ColumnUpdate::new(9, Formula::Add(Value::Int(1)))]).is_err());
        assert!(t.validate_updates(&[ColumnUpdate::new(3, Formula::Assign(Value::Null))]).is_ok());
        assert!(t.validate_updates(&[ColumnUpdate::new(2, Formula::Assign(Value::Null))]).is_err());
    }

    #[test]
    fn partition_by_integer_prefix_is_modulo() {
        let t = accounts();
        assert_eq!(t.partition_of(&[Value::Int(7), Value::Int(1)], 4), Some(PartitionId(3)));
        assert_eq!(t.partition_of(&[Value::Int(-1)], 4), Some(PartitionId(3)));
        assert!(t.prefix_determines_partition(1));
        assert!(!t.prefix_determines_partition(0));
    }

    #[test]
    fn catalog_lookup() {
        let mut c = Catalog::new();
        let id = c.add(accounts());
        assert_eq!(c.add(accounts()), id);
        assert_eq!(c.table_by_name("accounts").unwrap().id, id);
        assert!(matches!(c.table_by_name("nope"), Err(InvalidInput::UnknownTable(_))));
        assert!(c.table(TableId(5)).is_err());
    }
}
