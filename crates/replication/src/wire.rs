//! What members send each other: a serde envelope (framed with postcard like every other
//! message of the system) around raft's protobuf-encoded message, or one chunk of a snapshot.

use crate::config::ReplicaId;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireMessage {
    pub from: ReplicaId,
    pub to: ReplicaId,
    /// Set by a leader: its term and its tick count when it sent the message.
    pub stamp: Option<LeaseStamp>,
    /// Set by a follower: the newest `stamp` it got from the leader it follows, in a message
    /// that restarted its election timer. The leader's lease runs from that tick.
    pub echo: Option<LeaseStamp>,
    /// The sender rejoined after losing its data directory: it may hold less than it once
    /// acknowledged, so its leader must not trust the old match index.
    pub rejoined: bool,
    pub body: WireBody,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LeaseStamp {
    pub term: u64,
    pub tick: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireBody {
    /// A raft `eraftpb::Message`, protobuf-encoded, with no snapshot data in it.
    Raft(Vec<u8>),
    /// A piece of a snapshot message. The receiver collects the chunks of one snapshot in any
    /// order (one snapshot per sender at a time: a newer one replaces it); if some are lost the
    /// leader sends the whole snapshot again after `snapshot_retry_ticks`.
    SnapshotChunk(SnapshotChunk),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotChunk {
    /// The snapshot's raft index and term: chunks of different snapshots never mix.
    pub index: u64,
    pub term: u64,
    pub offset: u64,
    pub total_bytes: u64,
    /// The raft message with its snapshot data cut out; in the first chunk only.
    pub header: Vec<u8>,
    pub data: Vec<u8>,
}

impl WireMessage {
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("a wire message always serializes")
    }

    pub fn decode(bytes: &[u8]) -> Result<WireMessage, postcard::Error> {
        postcard::from_bytes(bytes)
    }
}
