//! Engine-owned message payloads, opaque to the roles and runtimes.
//!
//! An engine's requests, replies and role traffic are its own typed enums. The generic layers
//! carry them as a [`Payload`] without knowing the type:
//!
//! * **In process** (embedded runtime, simulator) a payload holds the typed value behind an
//!   `Arc`: sending costs no encoding, and the receiving engine gets its value back with
//!   [`Payload::decode`] (a downcast; a clone only if the payload was duplicated).
//! * **On the wire** (TCP) a payload serializes as the postcard bytes of its value and arrives
//!   as bytes; [`Payload::decode`] then decodes them. Bytes that are not a valid value of the
//!   expected type are a typed [`InvalidInput::Malformed`] error, never a panic.
//!
//! Equality compares the encoded bytes (used by tests), and `Debug` shows the typed value.

use litmus_core::{Error, InvalidInput};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// A value an engine can put in a [`Payload`]: any serializable, debuggable, thread-safe type.
pub trait PayloadData: Any + Send + Sync + fmt::Debug {
    fn encode(&self) -> Vec<u8>;
    fn as_any(&self) -> &dyn Any;
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

impl<T: Serialize + Any + Send + Sync + fmt::Debug> PayloadData for T {
    fn encode(&self) -> Vec<u8> {
        encode_exact(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// The postcard bytes of `value` (the same bytes as `postcard::to_stdvec`), in one allocation
/// of the exact size. `to_stdvec` grows its vector from empty; those reallocations, for every
/// log record of every transaction, are a visible share of a TPC-C profile. The
/// value is encoded once into a buffer the thread keeps, then copied out: computing the size
/// first would walk every value of a record twice.
///
/// Panics only if `value`'s `Serialize` itself fails, as `to_stdvec(..).expect(..)` did; the
/// derived implementations of engine records and messages do not fail.
pub fn encode_exact<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|scratch| {
        // A serializer that re-enters `encode_exact` (none does) would find it borrowed and
        // get a buffer of its own.
        let Ok(mut buf) = scratch.try_borrow_mut() else {
            return postcard::to_stdvec(value).expect("engine values serialize");
        };
        buf.clear();
        let mut bytes = postcard::to_extend(value, std::mem::take(&mut *buf)).expect("engine values serialize");
        let exact = bytes.to_vec();
        bytes.clear();
        if bytes.capacity() <= SCRATCH_KEPT_MAX {
            *buf = bytes;
        }
        exact
    })
}

/// The largest encoding buffer a thread keeps between records (a rare huge record, e.g. a
/// snapshot-sized batch, is not held on to).
const SCRATCH_KEPT_MAX: usize = 1 << 20;

#[derive(Clone)]
enum Repr {
    Typed(Arc<dyn PayloadData>),
    Wire(Arc<[u8]>),
}

/// An engine's message body. See the module doc.
#[derive(Clone)]
pub struct Payload(Repr);

impl Payload {
    pub fn new<T: PayloadData>(value: T) -> Payload {
        Payload(Repr::Typed(Arc::new(value)))
    }

    /// The payload as its engine's type. A payload of another type (a stray message from a
    /// misconfigured peer) or malformed bytes from the wire is an `InvalidInput::Malformed`.
    pub fn decode<T: DeserializeOwned + Clone + Any + Send + Sync>(self) -> Result<T, Error> {
        match self.0 {
            Repr::Typed(value) => match value.into_any().downcast::<T>() {
                Ok(value) => Ok(Arc::try_unwrap(value).unwrap_or_else(|shared| (*shared).clone())),
                Err(_) => Err(malformed(std::any::type_name::<T>(), "a payload of another type")),
            },
            Repr::Wire(bytes) => postcard::from_bytes(&bytes)
                .map_err(|e| malformed(std::any::type_name::<T>(), &format!("{} bytes: {e}", bytes.len()))),
        }
    }

    /// A look at the typed value without taking it, when the payload is typed and of type `T`
    /// (for tests and simulator filters; a payload from the wire returns `None`).
    pub fn peek<T: Any>(&self) -> Option<&T> {
        match &self.0 {
            Repr::Typed(value) => value.as_any().downcast_ref::<T>(),
            Repr::Wire(_) => None,
        }
    }

    /// The encoded bytes (what goes on the wire).
    pub fn to_bytes(&self) -> Vec<u8> {
        match &self.0 {
            Repr::Typed(value) => value.encode(),
            Repr::Wire(bytes) => bytes.to_vec(),
        }
    }
}

fn malformed(expected: &str, what: &str) -> Error {
    InvalidInput::MalformedFrame(format!("engine payload: expected {expected}, got {what}")).into()
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Typed(value) => value.fmt(f),
            Repr::Wire(bytes) => write!(f, "Payload({} bytes)", bytes.len()),
        }
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        self.to_bytes() == other.to_bytes()
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Repr::Typed(value) => s.serialize_bytes(&value.encode()),
            Repr::Wire(bytes) => s.serialize_bytes(bytes),
        }
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Payload, D::Error> {
        struct Bytes;
        impl<'de> serde::de::Visitor<'de> for Bytes {
            type Value = Payload;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("engine payload bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Payload, E> {
                Ok(Payload(Repr::Wire(v.into())))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Payload, A::Error> {
                let mut v = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    v.push(b);
                }
                Ok(Payload(Repr::Wire(v.into())))
            }
        }
        d.deserialize_bytes(Bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    enum Ping {
        Ping(u64),
        Pong { n: u64, text: String },
    }

    #[test]
    fn encode_exact_is_to_stdvec_in_one_exact_allocation() {
        let row: litmus_core::Row = vec![litmus_core::Value::Int(-3), "a longer string value".into()].into();
        for v in [Ping::Ping(u64::MAX), Ping::Pong { n: 1, text: "y".repeat(300) }] {
            let bytes = encode_exact(&v);
            assert_eq!(bytes, postcard::to_stdvec(&v).unwrap());
            assert_eq!(bytes.capacity(), bytes.len(), "no slack: the size was computed first");
        }
        // A row encodes as the `Vec<Value>` it replaced (wire format, logs and snapshots keep
        // their bytes), and decodes back from those bytes.
        let as_vec = postcard::to_stdvec(&row.clone().into_vec()).unwrap();
        assert_eq!(encode_exact(&row), as_vec);
        assert_eq!(postcard::from_bytes::<litmus_core::Row>(&as_vec).unwrap(), row);
        // Likewise a key and the `Vec<u8>` it replaced.
        let key = litmus_core::Key::ints(&[1, -2]);
        let as_vec = postcard::to_stdvec(&key.as_bytes().to_vec()).unwrap();
        assert_eq!(encode_exact(&key), as_vec);
        assert_eq!(postcard::from_bytes::<litmus_core::Key>(&as_vec).unwrap(), key);
    }

    #[test]
    fn typed_payload_round_trips_without_encoding() {
        let p = Payload::new(Ping::Pong { n: 7, text: "x".into() });
        assert_eq!(p.peek::<Ping>(), Some(&Ping::Pong { n: 7, text: "x".into() }));
        let dup = p.clone();
        assert_eq!(p.decode::<Ping>().unwrap(), Ping::Pong { n: 7, text: "x".into() });
        assert_eq!(dup.decode::<Ping>().unwrap(), Ping::Pong { n: 7, text: "x".into() });
    }

    #[test]
    fn wire_payload_decodes_to_the_same_value() {
        let p = Payload::new(Ping::Ping(42));
        let bytes = postcard::to_stdvec(&p).unwrap();
        let back: Payload = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, p);
        assert!(back.peek::<Ping>().is_none());
        assert_eq!(back.decode::<Ping>().unwrap(), Ping::Ping(42));
    }

    #[test]
    fn wrong_type_or_garbage_is_a_typed_error() {
        assert!(matches!(Payload::new(Ping::Ping(1)).decode::<String>(), Err(Error::Invalid(_))));
        let garbage: Payload = postcard::from_bytes(&postcard::to_stdvec(&vec![0xffu8; 3]).unwrap()).unwrap();
        assert!(matches!(garbage.decode::<Ping>(), Err(Error::Invalid(InvalidInput::MalformedFrame(_)))));
    }
}
