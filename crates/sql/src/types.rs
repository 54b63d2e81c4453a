//! SQL types and values: [`SqlType`] (what a column is declared as) and [`Datum`] (a value),
//! with PostgreSQL's text forms, casts, comparison, arithmetic and the key encoding.
//!
//! Integers are 64-bit whatever their declared width (the width is checked on store);
//! `NUMERIC(p,s)` is an `i128` of units at its scale; `TIMESTAMP` is microseconds since
//! 1970-01-01 00:00:00 (no time zone).

use crate::error::SqlError;
use litmus_core::Value;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::fmt;

/// A declared column type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SqlType {
    Int2,
    Int4,
    Int8,
    /// `NUMERIC(precision, scale)`; `None`: unconstrained (kept at the scale it was written with).
    Numeric(Option<(u32, u32)>),
    Text,
    Varchar(Option<u32>),
    Char(u32),
    Bool,
    Bytea,
    Timestamp,
}

/// The largest scale a `NUMERIC` keeps (results of division and `avg`).
pub const NUMERIC_SCALE_MAX: u32 = 16;
/// The largest precision of a declared `NUMERIC`.
pub const NUMERIC_PRECISION_MAX: u32 = 38;

impl fmt::Display for SqlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SqlType::Int2 => write!(f, "smallint"),
            SqlType::Int4 => write!(f, "integer"),
            SqlType::Int8 => write!(f, "bigint"),
            SqlType::Numeric(None) => write!(f, "numeric"),
            SqlType::Numeric(Some((p, s))) => write!(f, "numeric({p},{s})"),
            SqlType::Text => write!(f, "text"),
            SqlType::Varchar(None) => write!(f, "character varying"),
            SqlType::Varchar(Some(n)) => write!(f, "character varying({n})"),
            SqlType::Char(n) => write!(f, "character({n})"),
            SqlType::Bool => write!(f, "boolean"),
            SqlType::Bytea => write!(f, "bytea"),
            SqlType::Timestamp => write!(f, "timestamp without time zone"),
        }
    }
}

impl SqlType {
    /// The type from sqlparser's data type; anything else is `0A000` naming it.
    pub fn from_ast(t: &sqlparser::ast::DataType) -> Result<SqlType, SqlError> {
        use sqlparser::ast::{CharacterLength, DataType as D, ExactNumberInfo};
        let char_len = |l: &Option<CharacterLength>| match l {
            Some(CharacterLength::IntegerLength { length, .. }) => Some(*length as u32),
            _ => None,
        };
        let numeric = |info: &ExactNumberInfo| match info {
            ExactNumberInfo::None => Ok(SqlType::Numeric(None)),
            ExactNumberInfo::Precision(p) => SqlType::numeric(*p as u32, 0),
            ExactNumberInfo::PrecisionAndScale(p, s) => SqlType::numeric(*p as u32, (*s).max(0) as u32),
        };
        Ok(match t {
            D::SmallInt(_) | D::Int2(_) => SqlType::Int2,
            D::Int(_) | D::Integer(_) | D::Int4(_) => SqlType::Int4,
            D::BigInt(_) | D::Int8(_) => SqlType::Int8,
            D::Numeric(i) | D::Decimal(i) | D::Dec(i) => numeric(i)?,
            D::Text | D::String(_) => SqlType::Text,
            D::Varchar(l) | D::CharacterVarying(l) | D::CharVarying(l) => SqlType::Varchar(char_len(l)),
            D::Char(l) | D::Character(l) => SqlType::Char(char_len(l).unwrap_or(1)),
            D::Boolean | D::Bool => SqlType::Bool,
            D::Bytea => SqlType::Bytea,
            D::Timestamp(_, sqlparser::ast::TimezoneInfo::None | sqlparser::ast::TimezoneInfo::WithoutTimeZone) => {
                SqlType::Timestamp
            }
            other => return Err(SqlError::unsupported(format!("column type {other}"))),
        })
    }

    fn numeric(p: u32, s: u32) -> Result<SqlType, SqlError> {
        if p == 0 || p > NUMERIC_PRECISION_MAX || s > p || s > NUMERIC_SCALE_MAX {
            return Err(SqlError::unsupported(format!(
                "NUMERIC({p},{s}) (precision 1..{NUMERIC_PRECISION_MAX}, scale 0..{NUMERIC_SCALE_MAX})"
            )));
        }
        Ok(SqlType::Numeric(Some((p, s))))
    }

    /// Whether values of this type are integers.
    pub fn is_int(&self) -> bool {
        matches!(self, SqlType::Int2 | SqlType::Int4 | SqlType::Int8)
    }
}

/// A value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Datum {
    Null,
    Bool(bool),
    Int(i64),
    /// `units / 10^scale`.
    Numeric {
        units: i128,
        scale: u32,
    },
    Text(String),
    Bytes(Vec<u8>),
    /// Microseconds since 1970-01-01 00:00:00.
    Timestamp(i64),
}

impl Datum {
    pub fn is_null(&self) -> bool {
        matches!(self, Datum::Null)
    }

    /// The type a value has when nothing declares one (a literal, an expression's result).
    pub fn natural_type(&self) -> SqlType {
        match self {
            Datum::Null | Datum::Text(_) => SqlType::Text,
            Datum::Bool(_) => SqlType::Bool,
            Datum::Int(_) => SqlType::Int8,
            Datum::Numeric { .. } => SqlType::Numeric(None),
            Datum::Bytes(_) => SqlType::Bytea,
            Datum::Timestamp(_) => SqlType::Timestamp,
        }
    }

    /// Casts to a declared type, checking its width, length, precision (PostgreSQL's errors:
    /// `22003` out of range, `22001` too long, `22P02` bad text).
    pub fn cast(self, ty: &SqlType) -> Result<Datum, SqlError> {
        if self.is_null() {
            return Ok(Datum::Null);
        }
        match ty {
            SqlType::Int2 => int_in_range(self.to_int()?, i16::MIN as i64, i16::MAX as i64, "smallint"),
            SqlType::Int4 => int_in_range(self.to_int()?, i32::MIN as i64, i32::MAX as i64, "integer"),
            SqlType::Int8 => Ok(Datum::Int(self.to_int()?)),
            SqlType::Numeric(spec) => self.to_numeric(*spec),
            SqlType::Text => Ok(Datum::Text(self.to_text())),
            SqlType::Varchar(n) => varchar(self.to_text(), *n, false),
            SqlType::Char(n) => varchar(self.to_text(), Some(*n), true),
            SqlType::Bool => self.to_bool(),
            SqlType::Bytea => match self {
                Datum::Bytes(b) => Ok(Datum::Bytes(b)),
                Datum::Text(t) => parse_bytea(&t).map(Datum::Bytes),
                other => Err(SqlError::cannot_cast(&other, ty)),
            },
            SqlType::Timestamp => match self {
                Datum::Timestamp(t) => Ok(Datum::Timestamp(t)),
                Datum::Text(t) => parse_timestamp(&t).map(Datum::Timestamp),
                other => Err(SqlError::cannot_cast(&other, ty)),
            },
        }
    }

    fn to_int(&self) -> Result<i64, SqlError> {
        match self {
            Datum::Int(i) => Ok(*i),
            Datum::Numeric { units, scale } => {
                let p = 10i128.pow(*scale);
                let half = if *units >= 0 { p / 2 } else { -(p / 2) };
                i64::try_from((units + half) / p).map_err(|_| SqlError::out_of_range("bigint"))
            }
            Datum::Text(t) => t.trim().parse::<i64>().map_err(|_| SqlError::bad_text("integer", t)),
            Datum::Bool(b) => Ok(*b as i64),
            other => Err(SqlError::cannot_cast(other, &SqlType::Int8)),
        }
    }

    fn to_numeric(&self, spec: Option<(u32, u32)>) -> Result<Datum, SqlError> {
        let (units, scale) = match self {
            Datum::Int(i) => (*i as i128, 0),
            Datum::Numeric { units, scale } => (*units, *scale),
            Datum::Text(t) => parse_numeric(t)?,
            other => return Err(SqlError::cannot_cast(other, &SqlType::Numeric(spec))),
        };
        let Some((p, s)) = spec else { return Ok(Datum::Numeric { units, scale }) };
        let units = rescale(units, scale, s)?;
        if units.unsigned_abs() >= 10u128.pow(p) {
            return Err(SqlError::new("22003", format!("numeric field overflow: precision {p}, scale {s}")));
        }
        Ok(Datum::Numeric { units, scale: s })
    }

    fn to_bool(&self) -> Result<Datum, SqlError> {
        match self {
            Datum::Bool(b) => Ok(Datum::Bool(*b)),
            Datum::Int(i) => Ok(Datum::Bool(*i != 0)),
            Datum::Text(t) => match t.trim().to_ascii_lowercase().as_str() {
                "t" | "true" | "yes" | "on" | "1" | "y" => Ok(Datum::Bool(true)),
                "f" | "false" | "no" | "off" | "0" | "n" => Ok(Datum::Bool(false)),
                _ => Err(SqlError::bad_text("boolean", t)),
            },
            other => Err(SqlError::cannot_cast(other, &SqlType::Bool)),
        }
    }

    /// PostgreSQL's text output form.
    pub fn to_text(&self) -> String {
        match self {
            Datum::Null => String::new(),
            Datum::Bool(b) => if *b { "t" } else { "f" }.into(),
            Datum::Int(i) => i.to_string(),
            Datum::Numeric { units, scale } => format_numeric(*units, *scale),
            Datum::Text(t) => t.clone(),
            Datum::Bytes(b) => {
                let mut s = String::with_capacity(2 + 2 * b.len());
                s.push_str("\\x");
                for byte in b {
                    s.push_str(&format!("{byte:02x}"));
                }
                s
            }
            Datum::Timestamp(us) => format_timestamp(*us),
        }
    }

    /// SQL comparison: `None` when either side is NULL (unknown). Integers and numerics
    /// compare by value; text against a number or a timestamp is read as one.
    pub fn compare(&self, other: &Datum) -> Result<Option<Ordering>, SqlError> {
        use Datum::*;
        Ok(Some(match (self, other) {
            (Null, _) | (_, Null) => return Ok(None),
            (Int(a), Int(b)) => a.cmp(b),
            (Int(_) | Numeric { .. }, Int(_) | Numeric { .. }) => {
                let (a, sa) = self.as_units();
                let (b, sb) = other.as_units();
                let s = sa.max(sb);
                rescale(a, sa, s)?.cmp(&rescale(b, sb, s)?)
            }
            (Text(a), Text(b)) => a.cmp(b),
            (Bool(a), Bool(b)) => a.cmp(b),
            (Bytes(a), Bytes(b)) => a.cmp(b),
            (Timestamp(a), Timestamp(b)) => a.cmp(b),
            (Text(_), b) => return self.clone().cast(&b.natural_type())?.compare(other),
            (a, Text(_)) => return self.compare(&other.clone().cast(&a.natural_type())?),
            (a, b) => {
                return Err(SqlError::new(
                    "42883",
                    format!("operator does not exist: {} = {}", a.natural_type(), b.natural_type()),
                ))
            }
        }))
    }

    fn as_units(&self) -> (i128, u32) {
        match self {
            Datum::Int(i) => (*i as i128, 0),
            Datum::Numeric { units, scale } => (*units, *scale),
            _ => unreachable!("as_units on a non-number"),
        }
    }

    /// The order-preserving form of a key column (the core's `Value`, which `Key` encodes).
    pub fn key_value(&self) -> Result<Value, SqlError> {
        Ok(match self {
            Datum::Null => return Err(SqlError::new("23502", "null value in a primary key column".to_string())),
            Datum::Bool(b) => Value::Int(*b as i64),
            Datum::Int(i) | Datum::Timestamp(i) => Value::Int(*i),
            Datum::Numeric { units, scale } => {
                let d = rescale(*units, *scale, litmus_core::Decimal::SCALE)
                    .ok()
                    .and_then(|u| i64::try_from(u).ok())
                    .ok_or_else(|| {
                    SqlError::unsupported(format!(
                        "a NUMERIC key with more than {} decimal places or 12 digits",
                        litmus_core::Decimal::SCALE
                    ))
                })?;
                Value::Decimal(litmus_core::Decimal(d))
            }
            Datum::Text(t) => Value::String(t.as_str().into()),
            Datum::Bytes(b) => Value::Bytes(b.as_slice().into()),
        })
    }
}

fn int_in_range(i: i64, lo: i64, hi: i64, name: &str) -> Result<Datum, SqlError> {
    if i < lo || i > hi {
        return Err(SqlError::out_of_range(name));
    }
    Ok(Datum::Int(i))
}

fn varchar(s: String, n: Option<u32>, pad: bool) -> Result<Datum, SqlError> {
    let len = s.chars().count();
    match n {
        Some(n) if len > n as usize => {
            // PostgreSQL trims trailing spaces past the length before refusing.
            let trimmed = s.trim_end_matches(' ');
            if trimmed.chars().count() > n as usize {
                return Err(SqlError::new("22001", format!("value too long for type character varying({n})")));
            }
            Ok(Datum::Text(trimmed.chars().chain(std::iter::repeat(' ')).take(n as usize).collect()))
        }
        Some(n) if pad && len < n as usize => {
            Ok(Datum::Text(s.chars().chain(std::iter::repeat(' ')).take(n as usize).collect()))
        }
        _ => Ok(Datum::Text(s)),
    }
}

/// `units` at `from` decimal places, at `to` places (rounding half away from zero).
pub fn rescale(units: i128, from: u32, to: u32) -> Result<i128, SqlError> {
    let overflow = || SqlError::out_of_range("numeric");
    if to >= from {
        let f = 10i128.checked_pow(to - from).ok_or_else(overflow)?;
        units.checked_mul(f).ok_or_else(overflow)
    } else {
        let f = 10i128.checked_pow(from - to).ok_or_else(overflow)?;
        let half = if units >= 0 { f / 2 } else { -(f / 2) };
        Ok((units + half) / f)
    }
}

/// Parses `-12.3400` into units and scale.
pub fn parse_numeric(t: &str) -> Result<(i128, u32), SqlError> {
    let s = t.trim();
    let bad = || SqlError::bad_text("numeric", t);
    let (neg, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if (int.is_empty() && frac.is_empty()) || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    if frac.len() as u32 > NUMERIC_SCALE_MAX || int.len() + frac.len() > 38 {
        return Err(SqlError::out_of_range("numeric"));
    }
    let all = format!("{int}{frac}");
    let units: i128 = if all.is_empty() { 0 } else { all.parse().map_err(|_| bad())? };
    Ok((if neg { -units } else { units }, frac.len() as u32))
}

fn format_numeric(units: i128, scale: u32) -> String {
    let sign = if units < 0 { "-" } else { "" };
    let a = units.unsigned_abs();
    if scale == 0 {
        return format!("{sign}{a}");
    }
    let p = 10u128.pow(scale);
    format!("{sign}{}.{:0width$}", a / p, a % p, width = scale as usize)
}

fn parse_bytea(t: &str) -> Result<Vec<u8>, SqlError> {
    let Some(hex) = t.strip_prefix("\\x") else { return Ok(t.as_bytes().to_vec()) };
    if hex.len() % 2 != 0 {
        return Err(SqlError::bad_text("bytea", t));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| SqlError::bad_text("bytea", t)))
        .collect()
}

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Parses `YYYY-MM-DD[ HH:MM:SS[.ffffff]]` (a `T` separator too).
pub fn parse_timestamp(t: &str) -> Result<i64, SqlError> {
    let bad = || SqlError::bad_text("timestamp", t);
    let s = t.trim();
    let (date, time) = s.split_once([' ', 'T']).unwrap_or((s, "00:00:00"));
    let nums = |part: &str, sep: char| -> Option<Vec<String>> { Some(part.split(sep).map(str::to_string).collect()) };
    let d = nums(date, '-').ok_or_else(bad)?;
    let [y, m, dd] = d.as_slice() else { return Err(bad()) };
    let (y, m, dd): (i64, i64, i64) =
        (y.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?, dd.parse().map_err(|_| bad())?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&dd) {
        return Err(bad());
    }
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let tparts = nums(hms, ':').ok_or_else(bad)?;
    let [h, mi, sec] = tparts.as_slice() else { return Err(bad()) };
    let (h, mi, sec): (i64, i64, i64) =
        (h.parse().map_err(|_| bad())?, mi.parse().map_err(|_| bad())?, sec.parse().map_err(|_| bad())?);
    if h > 23 || mi > 59 || sec > 60 || frac.len() > 6 || !frac.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let micros: i64 = if frac.is_empty() { 0 } else { format!("{frac:0<6}").parse().map_err(|_| bad())? };
    Ok(days_from_civil(y, m, dd) * MICROS_PER_DAY + ((h * 60 + mi) * 60 + sec) * 1_000_000 + micros)
}

/// `YYYY-MM-DD HH:MM:SS[.ffffff]`, as PostgreSQL prints a timestamp.
pub fn format_timestamp(us: i64) -> String {
    let days = us.div_euclid(MICROS_PER_DAY);
    let rem = us.rem_euclid(MICROS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let secs = rem / 1_000_000;
    let micros = rem % 1_000_000;
    let base = format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
    if micros == 0 {
        base
    } else {
        format!("{base}.{}", format!("{micros:06}").trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_keeps_its_declared_scale() {
        let d = Datum::Text("12.5".into()).cast(&SqlType::Numeric(Some((10, 2)))).unwrap();
        assert_eq!(d.to_text(), "12.50");
        let e = Datum::Text("123456789.1".into()).cast(&SqlType::Numeric(Some((10, 2))));
        assert_eq!(e.unwrap_err().code, "22003");
        assert_eq!(Datum::Numeric { units: -5, scale: 3 }.to_text(), "-0.005");
    }

    #[test]
    fn integer_widths_are_checked() {
        assert_eq!(Datum::Int(40_000).cast(&SqlType::Int2).unwrap_err().code, "22003");
        assert_eq!(Datum::Text("x".into()).cast(&SqlType::Int4).unwrap_err().code, "22P02");
        assert_eq!(Datum::Text(" 42".into()).cast(&SqlType::Int4).unwrap(), Datum::Int(42));
    }

    #[test]
    fn timestamps_round_trip_through_text() {
        for t in ["2024-02-29 13:45:07", "1969-12-31 23:59:59.5", "2000-01-01 00:00:00"] {
            let us = parse_timestamp(t).unwrap();
            assert_eq!(format_timestamp(us), t);
        }
        assert!(parse_timestamp("2024-13-01").is_err());
    }

    #[test]
    fn char_pads_and_varchar_refuses_long_values() {
        assert_eq!(Datum::Text("ab".into()).cast(&SqlType::Char(4)).unwrap(), Datum::Text("ab  ".into()));
        assert_eq!(Datum::Text("abcdef".into()).cast(&SqlType::Varchar(Some(3))).unwrap_err().code, "22001");
    }

    #[test]
    fn numbers_compare_by_value_across_scales() {
        let a = Datum::Numeric { units: 150, scale: 2 };
        assert_eq!(a.compare(&Datum::Int(1)).unwrap(), Some(Ordering::Greater));
        assert_eq!(a.compare(&Datum::Null).unwrap(), None);
        assert_eq!(Datum::Int(3).compare(&Datum::Text("3".into())).unwrap(), Some(Ordering::Equal));
    }
}
