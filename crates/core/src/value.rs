//! Typed values.
//!
//! A [`Row`] is a vector of [`Value`]s in the table's column order. Values are totally ordered
//! (derived order: first by variant, then by content) so that sets of values and keys are
//! deterministic.

use crate::error::InvalidInput;
use crate::limits;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

/// A row: one value per column, in column order.
///
/// Rows are shared and immutable: the store, lock-free reads, write buffers, log records and
/// replies all hold the same allocation, and cloning a row is a reference count (rows are
/// cloned on every read). Writing through [`std::ops::DerefMut`]
/// (`row[i] = v`) is copy-on-write: it copies the values first only if the row is shared, so
/// no other holder ever sees the change. A row serializes exactly as the `Vec<Value>` it
/// replaced (a sequence), so the wire format, logs and snapshots keep their bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Row(Arc<[Value]>);

impl Row {
    /// The empty row.
    pub fn new() -> Row {
        Row::default()
    }
    /// The values, as an owned vector (copies them; for building a longer or shorter row).
    pub fn into_vec(self) -> Vec<Value> {
        self.0.to_vec()
    }
    /// Do `self` and `other` share one allocation? (Tests check reads do not copy.)
    pub fn ptr_eq(&self, other: &Row) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Default for Row {
    fn default() -> Row {
        static EMPTY: std::sync::OnceLock<Arc<[Value]>> = std::sync::OnceLock::new();
        Row(EMPTY.get_or_init(|| Arc::from(Vec::new())).clone())
    }
}

impl std::ops::Deref for Row {
    type Target = [Value];
    fn deref(&self) -> &[Value] {
        &self.0
    }
}

impl std::ops::DerefMut for Row {
    /// Copy-on-write: copies the values if another holder shares them.
    fn deref_mut(&mut self) -> &mut [Value] {
        Arc::make_mut(&mut self.0)
    }
}

impl AsRef<[Value]> for Row {
    fn as_ref(&self) -> &[Value] {
        &self.0
    }
}

impl fmt::Debug for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

impl From<Vec<Value>> for Row {
    fn from(v: Vec<Value>) -> Row {
        Row(v.into())
    }
}
impl From<&[Value]> for Row {
    fn from(v: &[Value]) -> Row {
        Row(v.into())
    }
}
impl<const N: usize> From<[Value; N]> for Row {
    fn from(v: [Value; N]) -> Row {
        Row(Arc::new(v))
    }
}
impl From<Row> for Vec<Value> {
    fn from(r: Row) -> Vec<Value> {
        r.into_vec()
    }
}
impl FromIterator<Value> for Row {
    fn from_iter<I: IntoIterator<Item = Value>>(iter: I) -> Row {
        Row(iter.into_iter().collect())
    }
}
impl<'a> IntoIterator for &'a Row {
    type Item = &'a Value;
    type IntoIter = std::slice::Iter<'a, Value>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}
impl PartialEq<Vec<Value>> for Row {
    fn eq(&self, other: &Vec<Value>) -> bool {
        *self.0 == **other
    }
}
impl PartialEq<Row> for Vec<Value> {
    fn eq(&self, other: &Row) -> bool {
        **self == *other.0
    }
}
impl PartialEq<[Value]> for Row {
    fn eq(&self, other: &[Value]) -> bool {
        *self.0 == *other
    }
}

impl Serialize for Row {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // A slice serializes as `Vec<Value>` does: one sequence.
        (*self.0).serialize(s)
    }
}
impl<'de> Deserialize<'de> for Row {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Row, D::Error> {
        Vec::<Value>::deserialize(d).map(Row::from)
    }
}

/// The type of a column.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ColumnType {
    /// 64-bit signed integer.
    Int,
    /// Fixed-point decimal with [`Decimal::SCALE`] fractional digits.
    Decimal,
    /// UTF-8 string.
    String,
    /// Opaque bytes.
    Bytes,
    /// A set of values of one element type (target of set add/remove formulas).
    Set(Box<ColumnType>),
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColumnType::Int => write!(f, "int"),
            ColumnType::Decimal => write!(f, "decimal"),
            ColumnType::String => write!(f, "string"),
            ColumnType::Bytes => write!(f, "bytes"),
            ColumnType::Set(t) => write!(f, "set<{t}>"),
        }
    }
}

/// Exact fixed-point decimal: `units / 10^SCALE`. Money in TPC-C needs exact sums (the
/// consistency conditions compare sums for equality), so floating point is not an option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Decimal(pub i64);

impl Decimal {
    /// Number of fractional decimal digits.
    pub const SCALE: u32 = 6;
    const ONE: i64 = 10i64.pow(Self::SCALE);

    pub const ZERO: Decimal = Decimal(0);

    pub fn from_int(v: i64) -> Option<Decimal> {
        v.checked_mul(Self::ONE).map(Decimal)
    }
    /// `cents / 100`, the usual way money is written in workloads.
    pub fn from_cents(cents: i64) -> Decimal {
        Decimal(cents * (Self::ONE / 100))
    }
    pub fn checked_add(self, o: Decimal) -> Option<Decimal> {
        self.0.checked_add(o.0).map(Decimal)
    }
    /// Product, rounded toward zero to the scale.
    pub fn checked_mul(self, o: Decimal) -> Option<Decimal> {
        let p = (self.0 as i128) * (o.0 as i128) / (Self::ONE as i128);
        i64::try_from(p).ok().map(Decimal)
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let a = self.0.unsigned_abs();
        let one = Self::ONE as u64;
        write!(f, "{sign}{}.{:06}", a / one, a % one)
    }
}

/// A column value.
///
/// Strings and bytes are shared, immutable buffers: a row is copied into messages, write
/// buffers, log records and the store several times per operation, and copying a value is then
/// a reference count, not an allocation and a `memcpy`. They serialize as `String`
/// and `Vec<u8>` do, so logs and snapshots keep their format.
///
/// A set is boxed, which keeps a value at 24 bytes where the set inline would make every value 32:
/// rows are vectors of values, and a TPC-C run's store grows by several kilobytes of rows per
/// transaction, and zeroing fresh pages for them is a visible share of its CPU. A box
/// serializes as what it holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Value {
    Null,
    Int(i64),
    Decimal(Decimal),
    String(Arc<str>),
    Bytes(Arc<[u8]>),
    Set(Box<BTreeSet<Value>>),
}

const _: () = assert!(std::mem::size_of::<Value>() == 24, "a value stays 24 bytes");

impl Value {
    /// The set of `elements` (duplicates collapse).
    pub fn set(elements: impl IntoIterator<Item = Value>) -> Value {
        Value::Set(Box::new(elements.into_iter().collect()))
    }

    /// The name of this value's type, for error messages.
    pub fn type_name(&self) -> String {
        match self {
            Value::Null => "null".into(),
            Value::Int(_) => "int".into(),
            Value::Decimal(_) => "decimal".into(),
            Value::String(_) => "string".into(),
            Value::Bytes(_) => "bytes".into(),
            Value::Set(_) => "set".into(),
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }
    pub fn as_decimal(&self) -> Option<Decimal> {
        match self {
            Value::Decimal(v) => Some(*v),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(v) => Some(v),
            _ => None,
        }
    }
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(v) => Some(v),
            _ => None,
        }
    }
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// Does this value inhabit `ty`? `Null` inhabits no type (nullability is a column property).
    pub fn has_type(&self, ty: &ColumnType) -> bool {
        match (self, ty) {
            (Value::Int(_), ColumnType::Int)
            | (Value::Decimal(_), ColumnType::Decimal)
            | (Value::String(_), ColumnType::String)
            | (Value::Bytes(_), ColumnType::Bytes) => true,
            (Value::Set(s), ColumnType::Set(elem)) => s.iter().all(|v| v.has_type(elem)),
            _ => false,
        }
    }

    /// Approximate in-memory size in bytes, used for limits and memory accounting.
    pub fn size(&self) -> usize {
        match self {
            Value::Null | Value::Int(_) | Value::Decimal(_) => 9,
            Value::String(s) => 1 + s.len(),
            Value::Bytes(b) => 1 + b.len(),
            Value::Set(s) => 1 + s.iter().map(Value::size).sum::<usize>(),
        }
    }

    /// Whether [`Value::check_limits`] passes, without building the name an error would carry
    /// (validation runs for every value of every operation; formatting the name each time was
    /// a measurable share of a TPC-C run).
    pub fn within_limits(&self) -> bool {
        match self {
            Value::Null | Value::Int(_) | Value::Decimal(_) => true,
            Value::String(_) | Value::Bytes(_) => self.size() <= limits::VALUE_SIZE_MAX,
            Value::Set(s) => s.len() <= limits::SET_ELEMENTS_MAX && self.size() <= limits::VALUE_SIZE_MAX,
        }
    }

    /// Checks the size limits of [`crate::limits`].
    pub fn check_limits(&self, what: &str) -> Result<(), InvalidInput> {
        let size = self.size();
        if size > limits::VALUE_SIZE_MAX {
            return Err(InvalidInput::Oversized { what: what.into(), size, limit: limits::VALUE_SIZE_MAX });
        }
        if let Value::Set(s) = self {
            if s.len() > limits::SET_ELEMENTS_MAX {
                return Err(InvalidInput::Oversized {
                    what: format!("{what} (set elements)"),
                    size: s.len(),
                    limit: limits::SET_ELEMENTS_MAX,
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => write!(f, "NULL"),
            Value::Int(v) => write!(f, "{v}"),
            Value::Decimal(v) => write!(f, "{v}"),
            Value::String(v) => write!(f, "{v:?}"),
            Value::Bytes(v) => write!(f, "0x{}", v.iter().map(|b| format!("{b:02x}")).collect::<String>()),
            Value::Set(s) => {
                write!(f, "{{")?;
                for (i, v) in s.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{v}")?;
                }
                write!(f, "}}")
            }
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<Decimal> for Value {
    fn from(v: Decimal) -> Self {
        Value::Decimal(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::String(v.into())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::String(v.into())
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(v.into())
    }
}
impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Self {
        Value::Bytes(v.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_display_and_arithmetic() {
        assert_eq!(Decimal::from_cents(1234).to_string(), "12.340000");
        assert_eq!(Decimal::from_cents(-5).to_string(), "-0.050000");
        let a = Decimal::from_cents(250);
        let b = Decimal::from_int(2).unwrap();
        assert_eq!(a.checked_mul(b), Some(Decimal::from_cents(500)));
        assert_eq!(Decimal(i64::MAX).checked_add(Decimal(1)), None);
    }

    #[test]
    fn has_type_rejects_mismatch_and_null() {
        assert!(Value::Int(1).has_type(&ColumnType::Int));
        assert!(!Value::Int(1).has_type(&ColumnType::String));
        assert!(!Value::Null.has_type(&ColumnType::Int));
        let s = Value::set([Value::Int(1)]);
        assert!(s.has_type(&ColumnType::Set(Box::new(ColumnType::Int))));
        assert!(!s.has_type(&ColumnType::Set(Box::new(ColumnType::String))));
    }

    #[test]
    fn row_clones_share_and_writes_copy_on_write() {
        let a: Row = vec![Value::Int(1), Value::from("x")].into();
        let mut b = a.clone();
        assert!(a.ptr_eq(&b), "a clone is a reference, not a copy");
        b[0] = Value::Int(2);
        assert!(!a.ptr_eq(&b), "writing to a shared row copies it first");
        assert_eq!(a, vec![Value::Int(1), Value::from("x")], "the other holder does not see the write");
        assert_eq!(b, vec![Value::Int(2), Value::from("x")]);
        // A row held once is written in place.
        let before = b.as_ptr();
        b[1] = Value::Null;
        assert_eq!(b.as_ptr(), before);
    }

    #[test]
    fn row_debug_and_default_look_like_the_vec_it_replaced() {
        // (Its encoding is checked against `Vec<Value>`'s in the engine, which has a codec.)
        let values = vec![Value::Int(1), Value::Null, Value::set([Value::Int(2)])];
        let row: Row = values.clone().into();
        assert_eq!(format!("{row:?}"), format!("{values:?}"));
        assert_eq!(Row::default().len(), 0);
        assert_eq!(Row::from([Value::Int(1)]), vec![Value::Int(1)]);
    }

    #[test]
    fn oversized_value_is_rejected() {
        let v = Value::Bytes(vec![0; limits::VALUE_SIZE_MAX + 1].into());
        assert!(matches!(v.check_limits("x"), Err(InvalidInput::Oversized { .. })));
        assert!(Value::Bytes(vec![0; 10].into()).check_limits("x").is_ok());
    }
}
