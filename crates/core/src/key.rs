//! Order-preserving key encoding.
//!
//! A primary key (a tuple of values) is encoded so that comparing the encodings as bytes gives
//! the same order as comparing the tuples value by value. The store is an ordered map over these
//! bytes, so a range read over a key prefix (all order lines of one order, all customers of one
//! district) is a contiguous byte range.
//!
//! ```text
//!   value      tag   body
//!   NULL       0x01  -                                     (sorts first)
//!   Int(i)     0x02  (i as u64 ^ 1<<63) big-endian, 8 bytes (sign flip: negatives first)
//!   Decimal    0x03  same as Int over the fixed-point units
//!   String     0x04  bytes, 0x00 escaped as 0x00 0xFF, terminated by 0x00 0x01
//!   Bytes      0x05  same as String
//! ```
//!
//! The terminator `0x00 0x01` sorts below any escaped byte (`0x00 0xFF`) and below any other
//! byte, so `"ab" < "ab\0" < "abc"` holds on the encoding. Sets cannot be key columns.

use crate::error::InvalidInput;
use crate::value::{Decimal, Value};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

const TAG_NULL: u8 = 0x01;
const TAG_INT: u8 = 0x02;
const TAG_DECIMAL: u8 = 0x03;
const TAG_STRING: u8 = 0x04;
const TAG_BYTES: u8 = 0x05;

/// An encoded primary key (or key prefix).
///
/// Ordered as its bytes are (lexicographically). The comparison is written out eight bytes at
/// a time: keys are short (a TPC-C key is 2 to 4 integers of 9 bytes), compared many times per
/// B-tree lookup in the store and the lock table, and a `memcmp` call per comparison costs more
/// than the comparison.
///
/// A key of up to [`KEY_INLINE_MAX`] bytes is held inline; a longer one shares its bytes
/// behind a reference count. Inline, a hash-table lookup compares the key in the bucket it
/// found without following a pointer (a heap key costs a cache miss per bucket compared, the
/// bulk of a point lookup), and encoding a key does not allocate. Shared, a long key's clone (into lock-table entries, lock targets,
/// operations, write images and log records) stays a reference count, not a copy. Either way
/// a key serializes as a `Vec<u8>` would, so encodings keep their bytes.
#[derive(Clone)]
pub struct Key(Repr);

/// Longest key held inline: three integer columns (27 bytes) fit, and a key stays 32 bytes.
pub const KEY_INLINE_MAX: usize = 30;

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; KEY_INLINE_MAX] },
    Shared(Arc<[u8]>),
}

impl Default for Key {
    fn default() -> Key {
        Key(Repr::Inline { len: 0, bytes: [0; KEY_INLINE_MAX] })
    }
}

/// The bytes' hash, as the derive gave it (equal keys have equal bytes, so equal hashes).
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

/// Equal bytes, written out as the comparison is: every point read of the store and the lock
/// table ends in a hash hit's equality check, and a `bcmp` call costs more than comparing such
/// short keys inline. Agrees with `Hash`, which hashes the bytes.
impl PartialEq for Key {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        if let (Repr::Shared(a), Repr::Shared(b)) = (&self.0, &other.0) {
            if Arc::ptr_eq(a, b) {
                return true;
            }
        }
        let (a, b) = (self.as_bytes(), other.as_bytes());
        a.len() == b.len() && compare_bytes(a, b) == std::cmp::Ordering::Equal
    }
}

impl Eq for Key {}

impl From<Vec<u8>> for Key {
    fn from(bytes: Vec<u8>) -> Key {
        Key::from(&bytes[..])
    }
}

impl From<&[u8]> for Key {
    fn from(bytes: &[u8]) -> Key {
        if bytes.len() <= KEY_INLINE_MAX {
            let mut inline = [0; KEY_INLINE_MAX];
            inline[..bytes.len()].copy_from_slice(bytes);
            Key(Repr::Inline { len: bytes.len() as u8, bytes: inline })
        } else {
            Key(Repr::Shared(bytes.into()))
        }
    }
}

impl Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // A slice serializes as `Vec<u8>` does: one sequence.
        self.as_bytes().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        Vec::<u8>::deserialize(d).map(Key::from)
    }
}

/// Where a key is encoded: on the stack while it fits inline, then on the heap.
struct KeyBuf {
    len: usize,
    inline: [u8; KEY_INLINE_MAX],
    spilled: Option<Vec<u8>>,
}

impl KeyBuf {
    fn new() -> KeyBuf {
        KeyBuf { len: 0, inline: [0; KEY_INLINE_MAX], spilled: None }
    }

    fn extend_from_slice(&mut self, bytes: &[u8]) {
        if let Some(v) = &mut self.spilled {
            return v.extend_from_slice(bytes);
        }
        if self.len + bytes.len() <= KEY_INLINE_MAX {
            self.inline[self.len..self.len + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
        } else {
            let mut v = Vec::with_capacity(2 * (self.len + bytes.len()));
            v.extend_from_slice(&self.inline[..self.len]);
            v.extend_from_slice(bytes);
            self.spilled = Some(v);
        }
    }

    fn push(&mut self, byte: u8) {
        self.extend_from_slice(&[byte]);
    }

    fn into_key(self) -> Key {
        match self.spilled {
            Some(v) => Key(Repr::Shared(v.into())),
            None => Key(Repr::Inline { len: self.len as u8, bytes: self.inline }),
        }
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        compare_bytes(self.as_bytes(), other.as_bytes())
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// `a.cmp(b)` for byte slices, without a library call for short ones.
#[inline]
fn compare_bytes(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let n = a.len().min(b.len());
    let (mut a8, mut b8) = (a[..n].chunks_exact(8), b[..n].chunks_exact(8));
    for (x, y) in (&mut a8).zip(&mut b8) {
        let x = u64::from_be_bytes(x.try_into().expect("8 bytes"));
        let y = u64::from_be_bytes(y.try_into().expect("8 bytes"));
        if x != y {
            return x.cmp(&y);
        }
    }
    for (x, y) in a8.remainder().iter().zip(b8.remainder()) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Key::decode(self.as_bytes()) {
            Ok(vals) => {
                write!(f, "Key(")?;
                for (i, v) in vals.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{v}")?;
                }
                write!(f, ")")
            }
            Err(_) => write!(f, "Key({:02x?})", self.as_bytes()),
        }
    }
}

impl Key {
    /// Encodes a tuple of key values. Sets are rejected.
    pub fn encode(values: &[Value]) -> Result<Key, InvalidInput> {
        let mut out = KeyBuf::new();
        for v in values {
            encode_value(v, &mut out)?;
        }
        Ok(out.into_key())
    }

    /// Encodes integer key columns; infallible shorthand used by workloads.
    pub fn ints(values: &[i64]) -> Key {
        let mut out = KeyBuf::new();
        for &v in values {
            encode_int(TAG_INT, v, &mut out);
        }
        out.into_key()
    }

    /// Decodes an encoding produced by [`Key::encode`].
    pub fn decode(mut bytes: &[u8]) -> Result<Vec<Value>, InvalidInput> {
        let bad = |m: &str| InvalidInput::MalformedFrame(format!("key encoding: {m}"));
        let mut out = Vec::new();
        while let Some((&tag, rest)) = bytes.split_first() {
            bytes = rest;
            match tag {
                TAG_NULL => out.push(Value::Null),
                TAG_INT | TAG_DECIMAL => {
                    if bytes.len() < 8 {
                        return Err(bad("truncated integer"));
                    }
                    let (b, rest) = bytes.split_at(8);
                    bytes = rest;
                    let u = u64::from_be_bytes(b.try_into().expect("8 bytes"));
                    let i = (u ^ (1 << 63)) as i64;
                    out.push(if tag == TAG_INT { Value::Int(i) } else { Value::Decimal(Decimal(i)) });
                }
                TAG_STRING | TAG_BYTES => {
                    let mut buf = Vec::new();
                    loop {
                        match bytes {
                            [0x00, 0x01, rest @ ..] => {
                                bytes = rest;
                                break;
                            }
                            [0x00, 0xFF, rest @ ..] => {
                                buf.push(0);
                                bytes = rest;
                            }
                            [0x00, ..] | [] => return Err(bad("unterminated string")),
                            [b, rest @ ..] => {
                                buf.push(*b);
                                bytes = rest;
                            }
                        }
                    }
                    if tag == TAG_STRING {
                        out.push(Value::String(String::from_utf8(buf).map_err(|_| bad("invalid utf-8"))?.into()));
                    } else {
                        out.push(Value::Bytes(buf.into()));
                    }
                }
                _ => return Err(bad("unknown tag")),
            }
        }
        Ok(out)
    }

    /// The length in bytes of the encoding of the first `n` values at the start of `bytes` (an
    /// encoding by [`Key::encode`], possibly followed by anything); `None` when `bytes` does not
    /// begin with `n` whole values.
    pub fn values_len(bytes: &[u8], n: usize) -> Option<usize> {
        let mut at = 0;
        for _ in 0..n {
            match *bytes.get(at)? {
                TAG_NULL => at += 1,
                TAG_INT | TAG_DECIMAL => {
                    at += 9;
                    if at > bytes.len() {
                        return None;
                    }
                }
                TAG_STRING | TAG_BYTES => {
                    at += 1;
                    loop {
                        match bytes.get(at..)? {
                            [0x00, 0x01, ..] => {
                                at += 2;
                                break;
                            }
                            [0x00, 0xFF, ..] => at += 2,
                            [0x00, ..] | [] => return None,
                            [_, ..] => at += 1,
                        }
                    }
                }
                _ => return None,
            }
        }
        Some(at)
    }

    /// The key with each integer column `i` for which `f(i)` is `Some(j)` holding `j` instead;
    /// `None` when `f` maps no column (or the bytes are no encoding). Works on the bytes: an
    /// integer's encoding has one width, so the key is copied once and the columns' bodies
    /// overwritten, with no decoding (`coordfree` rewrites a New-Order's temporary order id in
    /// about twenty keys per commit).
    pub fn map_ints(&self, f: impl Fn(i64) -> Option<i64>) -> Option<Key> {
        let bytes = self.as_bytes();
        let mut out: Option<Key> = None;
        for_each_int(bytes, |at, i| {
            if let Some(j) = f(i) {
                let copy = out.get_or_insert_with(|| match bytes.len() {
                    n if n <= KEY_INLINE_MAX => Key::from(bytes),
                    _ => Key(Repr::Shared(Arc::from(bytes))), // one allocation, not yet shared
                });
                let body = match &mut copy.0 {
                    Repr::Inline { bytes, .. } => &mut bytes[at..at + 8],
                    Repr::Shared(shared) => &mut Arc::get_mut(shared).expect("a fresh copy")[at..at + 8],
                };
                body.copy_from_slice(&int_body(j));
            }
            true
        })?;
        out
    }

    /// Whether an integer column holds `v` (`false` too for bytes that are no encoding).
    pub fn has_int(&self, v: i64) -> bool {
        let mut found = false;
        let _ = for_each_int(self.as_bytes(), |_, i| {
            found = i == v;
            !found
        });
        found
    }

    /// The smallest key strictly greater than every key that starts with `self` (for prefix
    /// range reads: `[prefix, prefix.prefix_end())`). `None` when there is no such key.
    pub fn prefix_end(&self) -> Option<Key> {
        let mut v = self.as_bytes().to_vec();
        while let Some(last) = v.pop() {
            if last < 0xFF {
                v.push(last + 1);
                return Some(Key::from(v));
            }
        }
        None
    }

    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..*len as usize],
            Repr::Shared(bytes) => bytes,
        }
    }
}

/// An integer's 8-byte body: sign bit flipped, big-endian (negatives sort first).
fn int_body(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

/// Calls `f(offset of the body, value)` for each integer column of an encoding, in order,
/// while it returns `true`; `None` if the bytes are no encoding (up to where `f` stopped).
fn for_each_int(bytes: &[u8], mut f: impl FnMut(usize, i64) -> bool) -> Option<()> {
    let mut at = 0;
    while let Some(&tag) = bytes.get(at) {
        at += 1;
        match tag {
            TAG_NULL => {}
            TAG_INT | TAG_DECIMAL => {
                let body: [u8; 8] = bytes.get(at..at + 8)?.try_into().expect("8 bytes");
                if tag == TAG_INT && !f(at, (u64::from_be_bytes(body) ^ (1 << 63)) as i64) {
                    return Some(());
                }
                at += 8;
            }
            TAG_STRING | TAG_BYTES => loop {
                match bytes.get(at..)? {
                    [0x00, 0x01, ..] => {
                        at += 2;
                        break;
                    }
                    [0x00, 0xFF, ..] => at += 2,
                    [0x00, ..] | [] => return None,
                    [_, ..] => at += 1,
                }
            },
            _ => return None,
        }
    }
    Some(())
}

fn encode_int(tag: u8, v: i64, out: &mut KeyBuf) {
    out.push(tag);
    out.extend_from_slice(&int_body(v));
}

fn encode_value(v: &Value, out: &mut KeyBuf) -> Result<(), InvalidInput> {
    match v {
        Value::Null => out.push(TAG_NULL),
        Value::Int(i) => encode_int(TAG_INT, *i, out),
        Value::Decimal(d) => encode_int(TAG_DECIMAL, d.0, out),
        Value::String(s) => encode_bytes(TAG_STRING, s.as_bytes(), out),
        Value::Bytes(b) => encode_bytes(TAG_BYTES, b, out),
        Value::Set(_) => {
            return Err(InvalidInput::WrongType {
                what: "key column".into(),
                expected: "int, decimal, string or bytes".into(),
                got: "set".into(),
            })
        }
    }
    Ok(())
}

fn encode_bytes(tag: u8, b: &[u8], out: &mut KeyBuf) {
    out.push(tag);
    for &byte in b {
        if byte == 0 {
            out.extend_from_slice(&[0x00, 0xFF]);
        } else {
            out.push(byte);
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The first `n` values' encoding is the encoding of those values alone, whatever
        /// follows; a cut inside a value is no whole value.
        #[test]
        fn values_len_measures_the_encoding_of_the_first_values(
            ints in proptest::collection::vec(any::<i64>(), 0..3),
            texts in proptest::collection::vec("[a-c\\x00]{0,4}", 0..3),
            tail in proptest::collection::vec(any::<u8>(), 0..4),
        ) {
            let values: Vec<Value> = ints.iter().map(|i| Value::Int(*i))
                .chain(texts.iter().map(|t| Value::String(t.as_str().into())))
                .chain([Value::Null])
                .collect();
            let whole = Key::encode(&values).unwrap();
            let mut bytes = whole.as_bytes().to_vec();
            bytes.extend(&tail);
            for n in 0..=values.len() {
                let first = Key::encode(&values[..n]).unwrap();
                prop_assert_eq!(Key::values_len(&bytes, n), Some(first.as_bytes().len()));
            }
            // Cut one byte short of the first value (an int or a string: more than its tag).
            let first = Key::encode(&values[..1]).unwrap().as_bytes().len();
            if first > 1 {
                prop_assert_eq!(Key::values_len(&bytes[..first - 1], 1), None);
            }
        }
    }

    #[test]
    fn short_keys_are_inline_and_long_clones_share_their_bytes() {
        let short = Key::ints(&[3, 4, 5]);
        assert!(matches!(short.0, Repr::Inline { len: 27, .. }), "three ints fit inline");
        let long = Key::ints(&[3, 4, 5, 6]);
        let c = long.clone();
        match (&long.0, &c.0) {
            (Repr::Shared(a), Repr::Shared(b)) => assert!(Arc::ptr_eq(a, b), "a clone is a reference, not a copy"),
            _ => panic!("four ints (36 bytes) are shared"),
        }
        for k in [&short, &long] {
            assert_eq!(&Key::from(k.as_bytes().to_vec()), k);
            assert_eq!(&Key::from(k.as_bytes()), k);
            // `prefix_end` builds a new key and leaves the original alone.
            assert!(k.prefix_end().unwrap() > *k);
        }
        assert_eq!(c, Key::ints(&[3, 4, 5, 6]));
        assert_eq!(Key::default().as_bytes(), b"");
        // A string key spills to the heap while it is encoded, and keeps its bytes.
        let s = Key::encode(&[Value::Int(1), Value::String("a key longer than thirty bytes".into())]).unwrap();
        assert_eq!(Key::decode(s.as_bytes()).unwrap()[1], Value::String("a key longer than thirty bytes".into()));
        assert_eq!(postcard::to_stdvec(&s).unwrap(), postcard::to_stdvec(&s.as_bytes().to_vec()).unwrap());
        assert_eq!(postcard::to_stdvec(&short).unwrap(), postcard::to_stdvec(&short.as_bytes().to_vec()).unwrap());
    }

    fn value_of_kind(kind: u8) -> BoxedStrategy<Value> {
        let bytes = proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(255u8), any::<u8>()], 0..6);
        let v = match kind {
            0 => any::<i64>().prop_map(Value::Int).boxed(),
            1 => any::<i64>().prop_map(|d| Value::Decimal(Decimal(d))).boxed(),
            2 => ".{0,6}".prop_map(|s: String| Value::String(s.into())).boxed(),
            _ => bytes.prop_map(|b| Value::Bytes(b.into())).boxed(),
        };
        prop_oneof![1 => Just(Value::Null), 8 => v].boxed()
    }

    fn key_value() -> BoxedStrategy<Value> {
        (0u8..4).prop_flat_map(value_of_kind).boxed()
    }

    /// Two key tuples of the same table (same column types, either may hold NULLs).
    fn tuple_pair() -> impl Strategy<Value = (Vec<Value>, Vec<Value>)> {
        proptest::collection::vec(0u8..4, 1..4).prop_flat_map(|kinds| {
            let a: Vec<_> = kinds.iter().map(|&k| value_of_kind(k)).collect();
            let b: Vec<_> = kinds.iter().map(|&k| value_of_kind(k)).collect();
            (a, b)
        })
    }

    proptest! {
        /// The encoding preserves the tuple order (the property range reads rely on).
        #[test]
        fn encoding_preserves_order((a, b) in tuple_pair()) {
            let ka = Key::encode(&a).unwrap();
            let kb = Key::encode(&b).unwrap();
            prop_assert_eq!(a.cmp(&b), ka.cmp(&kb));
        }

        /// `map_ints` agrees with decoding, mapping the integers and encoding again; and says
        /// `None` exactly when no integer column is mapped.
        #[test]
        fn map_ints_matches_decode_map_encode(
            values in proptest::collection::vec(key_value(), 0..5),
            from in prop_oneof![Just(-3i64), Just(0), Just(7), any::<i64>()],
            to in any::<i64>(),
            hits in proptest::collection::vec(any::<bool>(), 5),
        ) {
            let mut values = values;
            for (v, hit) in values.iter_mut().zip(hits) {
                match v {
                    Value::Int(i) if hit => *i = from, // often a hit
                    Value::Decimal(d) if hit => d.0 = from, // the same bytes, not an integer
                    _ => {}
                }
            }
            let key = Key::encode(&values).unwrap();
            let mut mapped = values.clone();
            let mut hit = false;
            for v in &mut mapped {
                if *v == Value::Int(from) {
                    *v = Value::Int(to);
                    hit = true;
                }
            }
            let expected = hit.then(|| Key::encode(&mapped).unwrap());
            prop_assert_eq!(key.has_int(from), hit);
            prop_assert_eq!(key.map_ints(|i| (i == from).then_some(to)), expected);
        }

        #[test]
        fn key_order_is_byte_order(a in proptest::collection::vec(any::<u8>(), 0..40), b in proptest::collection::vec(any::<u8>(), 0..40)) {
            prop_assert_eq!(Key::from(a.clone()).cmp(&Key::from(b.clone())), a.cmp(&b));
            let mut c = a.clone();
            c.extend_from_slice(&b);
            prop_assert_eq!(Key::from(a.clone()).cmp(&Key::from(c.clone())), a.cmp(&c));
            prop_assert_eq!(Key::from(c.clone()).cmp(&Key::from(a.clone())), c.cmp(&a));
        }

        #[test]
        fn key_equality_is_byte_equality(a in proptest::collection::vec(any::<u8>(), 0..40), at in any::<usize>(), flip in 1u8..) {
            prop_assert!(Key::from(a.clone()) == Key::from(a.clone()), "equal bytes in two allocations");
            let mut b = a.clone();
            if !b.is_empty() {
                let i = at % b.len();
                b[i] ^= flip; // one byte differs, anywhere (inside an 8-byte word or the tail)
                prop_assert!(Key::from(a.clone()) != Key::from(b.clone()));
            }
            b = a.clone();
            b.push(0);
            prop_assert!(Key::from(a.clone()) != Key::from(b), "a proper prefix is not equal");
        }

        #[test]
        fn encoding_round_trips(a in proptest::collection::vec(key_value(), 0..5)) {
            let k = Key::encode(&a).unwrap();
            prop_assert_eq!(Key::decode(k.as_bytes()).unwrap(), a);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = Key::decode(&bytes);
        }

        #[test]
        fn prefix_range_contains_extensions(p in proptest::collection::vec(any::<i64>(), 1..3), x in any::<i64>()) {
            let prefix = Key::ints(&p);
            let mut full = p.clone();
            full.push(x);
            let k = Key::ints(&full);
            prop_assert!(k >= prefix);
            prop_assert!(k < prefix.prefix_end().unwrap());
        }
    }

    #[test]
    fn string_terminator_sorts_before_extension() {
        let a = Key::encode(&["ab".into()]).unwrap();
        let b = Key::encode(&["ab\0".into()]).unwrap();
        let c = Key::encode(&["abc".into()]).unwrap();
        assert!(a < b && b < c);
    }

    #[test]
    fn set_is_not_a_key() {
        assert!(Key::encode(&[Value::Set(Default::default())]).is_err());
    }
}
