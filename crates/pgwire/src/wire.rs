//! Values on the PostgreSQL wire: type oids for SQL types, result values in text and binary
//! format, and parameters from either format.

use bytes::{BufMut, BytesMut};
use litmus_sql::{Datum, SqlError, SqlType};
use pgwire::api::Type;

/// Microseconds from 1970-01-01 to PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH_US: i64 = 946_684_800_000_000;

/// The PostgreSQL type of a SQL type.
pub fn pg_type(t: &SqlType) -> Type {
    match t {
        SqlType::Int2 => Type::INT2,
        SqlType::Int4 => Type::INT4,
        SqlType::Int8 => Type::INT8,
        SqlType::Numeric(_) => Type::NUMERIC,
        SqlType::Text => Type::TEXT,
        SqlType::Varchar(_) => Type::VARCHAR,
        SqlType::Char(_) => Type::BPCHAR,
        SqlType::Bool => Type::BOOL,
        SqlType::Bytea => Type::BYTEA,
        SqlType::Timestamp => Type::TIMESTAMP,
    }
}

/// The SQL type of a parameter type a client named (`None`: unspecified or unknown to us).
pub fn sql_type(t: &Type) -> Option<SqlType> {
    Some(match *t {
        Type::INT2 => SqlType::Int2,
        Type::INT4 => SqlType::Int4,
        Type::INT8 => SqlType::Int8,
        Type::NUMERIC => SqlType::Numeric(None),
        Type::TEXT => SqlType::Text,
        Type::VARCHAR => SqlType::Varchar(None),
        Type::BPCHAR => SqlType::Text,
        Type::BOOL => SqlType::Bool,
        Type::BYTEA => SqlType::Bytea,
        Type::TIMESTAMP => SqlType::Timestamp,
        _ => return None,
    })
}

/// Appends one field of a data row: length, then the value in text or binary format.
pub fn put_field(buf: &mut BytesMut, d: &Datum, ty: &SqlType, binary: bool) {
    if d.is_null() {
        buf.put_i32(-1);
        return;
    }
    let at = buf.len();
    buf.put_i32(0);
    if binary {
        put_binary(buf, d, ty);
    } else {
        buf.put_slice(d.to_text().as_bytes());
    }
    let len = (buf.len() - at - 4) as i32;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

fn put_binary(buf: &mut BytesMut, d: &Datum, ty: &SqlType) {
    let d = d.clone().cast(ty).unwrap_or_else(|_| d.clone());
    match (ty, &d) {
        (SqlType::Int2, Datum::Int(i)) => buf.put_i16(*i as i16),
        (SqlType::Int4, Datum::Int(i)) => buf.put_i32(*i as i32),
        (SqlType::Int8, Datum::Int(i)) => buf.put_i64(*i),
        (SqlType::Bool, Datum::Bool(b)) => buf.put_u8(*b as u8),
        (SqlType::Numeric(_), Datum::Int(i)) => put_numeric(buf, *i as i128, 0),
        (SqlType::Numeric(_), Datum::Numeric { units, scale }) => put_numeric(buf, *units, *scale),
        (SqlType::Bytea, Datum::Bytes(b)) => buf.put_slice(b),
        (SqlType::Timestamp, Datum::Timestamp(us)) => buf.put_i64(us - PG_EPOCH_US),
        _ => buf.put_slice(d.to_text().as_bytes()),
    }
}

/// PostgreSQL's binary NUMERIC: ndigits, weight, sign, dscale, then base-10000 digits.
fn put_numeric(buf: &mut BytesMut, units: i128, scale: u32) {
    let digits = units.unsigned_abs().to_string();
    let scale = scale as usize;
    let padded =
        if digits.len() <= scale { format!("{}{digits}", "0".repeat(scale + 1 - digits.len())) } else { digits };
    let (int, frac) = padded.split_at(padded.len() - scale);
    let int_groups = int.len().div_ceil(4);
    let int = format!("{}{int}", "0".repeat(int_groups * 4 - int.len()));
    let frac = format!("{frac}{}", "0".repeat(frac.len().div_ceil(4) * 4 - frac.len()));
    let all = format!("{int}{frac}");
    let mut groups: Vec<i16> = (0..all.len() / 4).map(|i| all[i * 4..i * 4 + 4].parse().unwrap_or(0)).collect();
    let mut weight = int_groups as i16 - 1;
    while groups.first() == Some(&0) {
        groups.remove(0);
        weight -= 1;
    }
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    buf.put_i16(groups.len() as i16);
    buf.put_i16(weight);
    buf.put_u16(if units < 0 { 0x4000 } else { 0 });
    buf.put_u16(scale as u16);
    groups.iter().for_each(|g| buf.put_i16(*g));
}

fn get_numeric(b: &[u8]) -> Result<Datum, SqlError> {
    let bad = || SqlError::new("22P03", "malformed binary numeric parameter".into());
    let word = |i: usize| -> Result<i16, SqlError> {
        b.get(i * 2..i * 2 + 2).map(|w| i16::from_be_bytes([w[0], w[1]])).ok_or_else(bad)
    };
    let (n, weight, sign, dscale) = (word(0)? as usize, word(1)? as i32, word(2)? as u16, word(3)? as u16 as u32);
    if sign == 0xC000 {
        return Err(SqlError::unsupported("NaN numerics"));
    }
    let mut units: i128 = 0;
    for i in 0..n {
        let exp = 4 * (weight - i as i32) + dscale as i32;
        let d = word(4 + i)? as i128;
        let overflow = || SqlError::out_of_range("numeric");
        units = if exp >= 0 {
            units
                .checked_add(d.checked_mul(10i128.checked_pow(exp as u32).ok_or_else(overflow)?).ok_or_else(overflow)?)
                .ok_or_else(overflow)?
        } else {
            units + d / 10i128.pow((-exp) as u32)
        };
    }
    Ok(Datum::Numeric { units: if sign == 0x4000 { -units } else { units }, scale: dscale })
}

/// A parameter's value from the wire: text is kept as text (the statement casts it to what it
/// meets); binary is decoded by its type.
pub fn param(bytes: Option<&[u8]>, binary: bool, ty: &SqlType) -> Result<Datum, SqlError> {
    let Some(b) = bytes else { return Ok(Datum::Null) };
    if !binary {
        let text = std::str::from_utf8(b).map_err(|_| SqlError::new("22021", "parameter is not valid UTF-8".into()))?;
        return Datum::Text(text.to_string()).cast(ty).or_else(|_| Ok(Datum::Text(text.to_string())));
    }
    let fixed = |n: usize| -> Result<&[u8], SqlError> {
        (b.len() == n)
            .then_some(b)
            .ok_or_else(|| SqlError::new("22P03", format!("binary {ty} parameter of {} bytes", b.len())))
    };
    Ok(match ty {
        SqlType::Int2 => Datum::Int(i16::from_be_bytes(fixed(2)?.try_into().unwrap_or_default()) as i64),
        SqlType::Int4 => Datum::Int(i32::from_be_bytes(fixed(4)?.try_into().unwrap_or_default()) as i64),
        SqlType::Int8 => Datum::Int(i64::from_be_bytes(fixed(8)?.try_into().unwrap_or_default())),
        SqlType::Bool => Datum::Bool(fixed(1)?[0] != 0),
        SqlType::Numeric(_) => get_numeric(b)?,
        SqlType::Bytea => Datum::Bytes(b.to_vec()),
        SqlType::Timestamp => {
            Datum::Timestamp(i64::from_be_bytes(fixed(8)?.try_into().unwrap_or_default()) + PG_EPOCH_US)
        }
        SqlType::Text | SqlType::Varchar(_) | SqlType::Char(_) => Datum::Text(
            String::from_utf8(b.to_vec()).map_err(|_| SqlError::new("22021", "parameter is not valid UTF-8".into()))?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_numerics_round_trip() {
        for (units, scale) in [(0i128, 0u32), (1234567, 2), (-5, 3), (100000000, 0), (12, 6), (-123456789012345, 4)] {
            let mut buf = BytesMut::new();
            put_numeric(&mut buf, units, scale);
            assert_eq!(get_numeric(&buf).unwrap(), Datum::Numeric { units, scale }, "{units} e-{scale}");
        }
    }

    #[test]
    fn text_parameters_are_cast_to_the_inferred_type_when_they_fit() {
        assert_eq!(param(Some(b"42"), false, &SqlType::Int4).unwrap(), Datum::Int(42));
        assert_eq!(param(Some(b"x"), false, &SqlType::Int4).unwrap(), Datum::Text("x".into()));
        assert_eq!(param(None, true, &SqlType::Int4).unwrap(), Datum::Null);
        assert_eq!(param(Some(&7i64.to_be_bytes()), true, &SqlType::Int8).unwrap(), Datum::Int(7));
        assert_eq!(param(Some(&[0, 7]), true, &SqlType::Int4).unwrap_err().code, "22P03");
    }
}
