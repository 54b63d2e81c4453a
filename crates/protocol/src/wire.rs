//! The wire protocol: length-prefixed frames carrying postcard-encoded [`Frame`]s.
//!
//! ```text
//!   ┌──────────────┬─────────────────────────────┐
//!   │ u32 BE length│ postcard(Frame), ≤ 16 MiB    │
//!   └──────────────┴─────────────────────────────┘
//! ```
//!
//! A connection starts with a hello: `HelloNode(id)` from a peer server, `HelloClient` from a
//! client (answered with `Welcome` carrying the client id the server assigned; the server stamps
//! that id on every request from the connection, so a client cannot speak for another). After
//! that, both sides exchange `Envelope`s. A frame that does not decode, or is larger than
//! [`FRAME_SIZE_MAX`], is a typed `MalformedFrame`/`Oversized` error: the connection is answered
//! with `Rejected` and closed, and nothing is applied.

use crate::message::Envelope;
use litmus_core::{ClientId, Error, InvalidInput, NodeId};
use serde::{Deserialize, Serialize};

/// Largest frame payload accepted, in bytes.
pub const FRAME_SIZE_MAX: usize = 16 * 1024 * 1024;

/// Protocol version, checked in the hello. 4: the locking engine's cross-partition release
/// order (`Request::Op::after`, `Reply::Op::read_taint`, partition-to-partition requests).
/// 5: hellos carry the [`ClusterIdentity`]; a peer hello is answered (`HelloNode` or
/// `Rejected`).
/// 6: hellos carry the cluster's shared token (`token` in a server's config); a server with a
/// token refuses a hello without it, or with another, with `Rejected(Unauthenticated)`.
/// 7: a client's `Begin` carries `retrying_for`, as `Call` does.
/// 8: a replica's address names its group ([`crate::GroupId`]): coordinators are replicated too.
pub const PROTOCOL_VERSION: u32 = 8;

/// What a cluster is: recorded in each node's data dir at first start, carried by every peer
/// hello and every `Welcome`. Two nodes whose identities differ refuse to talk: a node with the
/// wrong partition count would route keys to partitions that do not hold them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterIdentity {
    /// Chosen at creation (`cluster` in the config, or derived from the first peer list).
    pub cluster_id: String,
    pub nodes: u32,
    pub partitions: u32,
    pub engine: String,
    /// Replicas of each partition (1 when the record predates replication).
    #[serde(default = "one_replica")]
    pub replicas: u32,
}

fn one_replica() -> u32 {
    1
}

impl ClusterIdentity {
    /// Each field that differs, as `field: ours X, theirs Y` (empty when they agree).
    pub fn differences(&self, theirs: &ClusterIdentity, ours_name: &str, theirs_name: &str) -> Vec<String> {
        let mut d = Vec::new();
        let mut cmp = |field: &str, a: String, b: String| {
            if a != b {
                d.push(format!("{field}: {ours_name} {a}, {theirs_name} {b}"));
            }
        };
        cmp("cluster_id", self.cluster_id.clone(), theirs.cluster_id.clone());
        cmp("nodes", self.nodes.to_string(), theirs.nodes.to_string());
        cmp("partitions", self.partitions.to_string(), theirs.partitions.to_string());
        cmp("engine", self.engine.clone(), theirs.engine.clone());
        cmp("replicas", self.replicas.to_string(), theirs.replicas.to_string());
        d
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    /// A peer's hello; the accepting node answers with its own (or `Rejected` when the
    /// identities differ).
    HelloNode {
        version: u32,
        node: NodeId,
        cluster: ClusterIdentity,
        /// The cluster's shared token, when the node has one.
        token: Option<String>,
    },
    /// A client's hello; `expect`, when given, must match the server's cluster identity.
    HelloClient {
        version: u32,
        expect: Option<ClusterIdentity>,
        /// The cluster's shared token (required by a server configured with one).
        token: Option<String>,
    },
    /// The server's answer to a client hello: the client id it assigned, its node, its engine,
    /// the cluster it belongs to.
    Welcome {
        client: ClientId,
        node: NodeId,
        engine: String,
        cluster: ClusterIdentity,
    },
    Envelope(Envelope),
    /// The peer's last frame was rejected; the connection closes.
    Rejected(Error),
}

/// Whether a hello's `offered` token satisfies a server that `requires` one (any hello does when
/// it requires none). Compares in time independent of where the tokens differ.
pub fn token_accepted(requires: Option<&str>, offered: Option<&str>) -> bool {
    let Some(required) = requires else { return true };
    let offered = offered.unwrap_or("");
    let (a, b) = (required.as_bytes(), offered.as_bytes());
    let diff = a.iter().zip(b).fold(a.len() ^ b.len(), |d, (x, y)| d | usize::from(x ^ y));
    diff == 0
}

/// Encodes a frame payload (without the length prefix, which the codec adds).
pub fn encode(frame: &Frame) -> Vec<u8> {
    postcard::to_stdvec(frame).expect("frames serialize")
}

/// Decodes a frame payload. Never panics, whatever the bytes.
pub fn decode(bytes: &[u8]) -> Result<Frame, InvalidInput> {
    if bytes.len() > FRAME_SIZE_MAX {
        return Err(InvalidInput::Oversized { what: "frame".into(), size: bytes.len(), limit: FRAME_SIZE_MAX });
    }
    match postcard::from_bytes::<Frame>(bytes) {
        Ok(f) => Ok(f),
        Err(e) => Err(InvalidInput::MalformedFrame(e.to_string())),
    }
}

/// Appends a length-prefixed frame to `buf` (for blocking writers).
pub fn write_frame(buf: &mut Vec<u8>, frame: &Frame) {
    let payload = encode(frame);
    assert!(payload.len() <= FRAME_SIZE_MAX, "frame too large to send: {} bytes", payload.len());
    buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    buf.extend_from_slice(&payload);
}

/// Reads one length-prefixed frame from a blocking reader.
pub fn read_frame(r: &mut impl std::io::Read) -> Result<Frame, Error> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).map_err(|e| Error::unavailable(format!("connection: {e}")))?;
    let len = u32::from_be_bytes(len) as usize;
    if len > FRAME_SIZE_MAX {
        return Err(InvalidInput::Oversized { what: "frame".into(), size: len, limit: FRAME_SIZE_MAX }.into());
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).map_err(|e| Error::unavailable(format!("connection: {e}")))?;
    Ok(decode(&payload)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Addr, ClientRequest, Message, RequestBody};
    use crate::op::Op;
    use litmus_core::{RequestId, Value};
    use proptest::prelude::*;

    #[test]
    fn a_token_is_accepted_only_when_equal_or_not_required() {
        assert!(token_accepted(None, None) && token_accepted(None, Some("x")));
        assert!(token_accepted(Some("s3cret"), Some("s3cret")));
        for offered in [None, Some(""), Some("s3cre"), Some("s3cret!"), Some("S3cret")] {
            assert!(!token_accepted(Some("s3cret"), offered), "{offered:?}");
        }
    }

    fn sample() -> Frame {
        Frame::Envelope(Envelope {
            from: Addr::Client(ClientId(3)),
            to: Addr::Coordinator(NodeId(1)),
            msg: Message::ClientRequest(ClientRequest {
                id: RequestId(9),
                body: RequestBody::Op {
                    txn: litmus_core::TxnId { node: NodeId(1), epoch: 1, seq: 2 },
                    op: Op::Write {
                        table: "kv".into(),
                        row: vec![Value::Int(1), Value::Bytes(vec![0, 1, 2].into())].into(),
                    },
                },
            }),
        })
    }

    #[test]
    fn frames_round_trip() {
        let f = sample();
        assert_eq!(decode(&encode(&f)).unwrap(), f);
        let mut buf = vec![];
        write_frame(&mut buf, &f);
        assert_eq!(read_frame(&mut buf.as_slice()).unwrap(), f);
    }

    #[test]
    fn oversized_length_prefix_is_rejected_without_allocating() {
        let mut buf = ((FRAME_SIZE_MAX + 1) as u32).to_be_bytes().to_vec();
        buf.extend_from_slice(&[0; 16]);
        assert!(matches!(read_frame(&mut buf.as_slice()), Err(Error::Invalid(InvalidInput::Oversized { .. }))));
    }

    proptest! {
        /// Fuzz: arbitrary bytes never panic the decoder and are either a frame or a typed error.
        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            match decode(&bytes) {
                Ok(f) => { let _ = encode(&f); }
                Err(e) => {
                    let typed = matches!(e, InvalidInput::MalformedFrame(_) | InvalidInput::Oversized { .. });
                    prop_assert!(typed, "untyped decode error {:?}", e);
                }
            }
        }

        /// Fuzz: every single-byte corruption or truncation of a valid frame decodes to a frame
        /// or a typed error, never a panic.
        #[test]
        fn corrupted_frames_never_panic(pos in 0usize..200, byte in any::<u8>(), cut in 0usize..200) {
            let mut bytes = encode(&sample());
            let n = bytes.len();
            bytes[pos % n] = byte;
            bytes.truncate(cut.min(n));
            let _ = decode(&bytes);
        }
    }
}
