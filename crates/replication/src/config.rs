//! A group member's configuration: who the voters are, the timing in ticks, and every bound.

use crate::error::Error;
use litmus_core::NodeId;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The transport's frame limit (the TCP runtime's `MAX_FRAME_BYTES_DEFAULT`). Every message the
/// group emits fits in one frame when entries and chunks stay under the bounds below.
pub const FRAME_BYTES_MAX: usize = 1024 * 1024;

/// Bytes of snapshot data in one [`crate::WireBody::SnapshotChunk`]: a quarter of a frame, so a
/// chunk plus its header and the envelope never reach [`FRAME_BYTES_MAX`].
pub const SNAPSHOT_CHUNK_BYTES_DEFAULT: usize = 256 * 1024;

/// Bytes of entries in one append message (raft's `max_size_per_msg`). Raft still sends one
/// entry past it, so a proposal is also bounded ([`PROPOSAL_BYTES_MAX_DEFAULT`]).
pub const APPEND_BYTES_MAX_DEFAULT: u64 = 256 * 1024;

/// The largest proposal: with [`APPEND_BYTES_MAX_DEFAULT`] an append stays under half a frame.
pub const PROPOSAL_BYTES_MAX_DEFAULT: usize = 256 * 1024;

/// The largest snapshot a member accepts from a peer (reassembly memory bound).
pub const SNAPSHOT_BYTES_MAX_DEFAULT: u64 = 1 << 30;

/// One member of one group. Raft ids are non-zero; [`ReplicaId::of_node`] maps a node to one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReplicaId(pub u64);

impl ReplicaId {
    /// The replica that node `n` hosts (raft reserves id 0 for "none").
    pub fn of_node(n: NodeId) -> Self {
        ReplicaId(n.0 as u64 + 1)
    }

    pub fn node(self) -> NodeId {
        assert!(self.0 > 0, "replica id 0 is raft's 'none'");
        NodeId((self.0 - 1) as u32)
    }
}

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// How a leader decides it may serve a read from its own state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadMode {
    /// Raft §6.4 read-index: each read waits for a heartbeat round acknowledged by a quorum after
    /// it arrived. No clock assumption; one round trip per batch of reads.
    ReadIndex,
    /// Raft §6.4.1 leases: a leader serves at once while a quorum's promises not to elect anyone
    /// else have not run out (see the crate doc); otherwise it falls back to read-index. Safe as
    /// long as clocks drift by less than `lease_margin_ticks` per election timeout.
    Lease,
}

#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// This member.
    pub id: ReplicaId,
    /// Every voter, this member included. Fixed: membership changes are not built.
    pub voters: Vec<ReplicaId>,
    /// Ticks without hearing from a leader before a follower campaigns (the randomized timeout is
    /// drawn from `[election_ticks, election_ticks + election_spread_ticks)` with the group's
    /// seeded RNG).
    pub election_ticks: usize,
    /// The width of the randomized election timeout's range: wide enough that two followers
    /// rarely campaign at once (a split vote costs another timeout), narrow enough that the
    /// longest timeout stays near the shortest (the failover time is the longest).
    pub election_spread_ticks: usize,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_ticks: usize,
    pub read_mode: ReadMode,
    /// Reads waiting for a read-index round before `read` refuses more (retryable).
    pub reads_pending_max: usize,
    /// A lease lasts `election_ticks - lease_margin_ticks` from the send time of the heartbeat a
    /// quorum answered: the margin absorbs clock-rate drift between members.
    pub lease_margin_ticks: usize,
    /// Breaks the lease rule on purpose (tests that show the lease check fails): the lease lasts
    /// this many ticks whatever the election timeout. Never set outside such a test.
    #[doc(hidden)]
    pub lease_ticks_unchecked: Option<usize>,
    pub append_bytes_max: u64,
    pub inflight_appends_max: usize,
    pub proposal_bytes_max: usize,
    /// Bytes of raft entries proposed but not committed before proposals are refused.
    pub uncommitted_bytes_max: u64,
    pub snapshot_chunk_bytes: usize,
    pub snapshot_bytes_max: u64,
    /// Ask the owner for a snapshot once this many entries were applied since the last one,
    /// and their data is at least `snapshot_log_bytes_min` and the last snapshot's size.
    pub snapshot_every_entries: u64,
    /// See `snapshot_every_entries`: a snapshot re-encodes the owner's whole state, so one
    /// taken every so many entries would cost, per entry, in proportion to the state's size
    /// (a full TPC-C partition of hundreds of megabytes every few seconds, stalling its node).
    /// With the log as large as the last snapshot, a snapshot at most doubles the bytes written.
    pub snapshot_log_bytes_min: u64,
    /// Entries kept before a snapshot, so that a follower a little behind gets entries rather
    /// than the whole snapshot.
    pub compact_keep_entries: u64,
    /// A leader that sent a snapshot and heard nothing back for this long sends it again.
    pub snapshot_retry_ticks: u64,
}

impl GroupConfig {
    pub fn new(id: ReplicaId, voters: Vec<ReplicaId>) -> Self {
        GroupConfig {
            id,
            voters,
            election_ticks: 10,
            election_spread_ticks: 10,
            heartbeat_ticks: 2,
            read_mode: ReadMode::Lease,
            reads_pending_max: 10_000,
            lease_margin_ticks: 2,
            lease_ticks_unchecked: None,
            append_bytes_max: APPEND_BYTES_MAX_DEFAULT,
            inflight_appends_max: 64,
            proposal_bytes_max: PROPOSAL_BYTES_MAX_DEFAULT,
            uncommitted_bytes_max: 16 << 20,
            snapshot_chunk_bytes: SNAPSHOT_CHUNK_BYTES_DEFAULT,
            snapshot_bytes_max: SNAPSHOT_BYTES_MAX_DEFAULT,
            snapshot_every_entries: 10_000,
            snapshot_log_bytes_min: 1 << 20,
            compact_keep_entries: 5_000,
            snapshot_retry_ticks: 40,
        }
    }

    /// How long a lease lasts, in this member's ticks.
    pub fn lease_ticks(&self) -> u64 {
        match self.lease_ticks_unchecked {
            Some(t) => t as u64,
            None => (self.election_ticks - self.lease_margin_ticks) as u64,
        }
    }

    pub fn quorum(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    pub fn validate(&self) -> Result<(), Error> {
        let bad = |why: String| Err(Error::Config(why));
        let mut sorted = self.voters.clone();
        sorted.sort();
        sorted.dedup();
        if sorted.len() != self.voters.len() {
            return bad(format!("duplicate voters in {:?}", self.voters));
        }
        if sorted.iter().any(|v| v.0 == 0) {
            return bad("replica id 0 is reserved".into());
        }
        if !sorted.contains(&self.id) {
            return bad(format!("{} is not among the voters {:?}", self.id, self.voters));
        }
        if self.heartbeat_ticks == 0 || self.election_ticks <= self.heartbeat_ticks {
            return bad(format!(
                "election_ticks ({}) must exceed heartbeat_ticks ({}) > 0",
                self.election_ticks, self.heartbeat_ticks
            ));
        }
        if self.election_spread_ticks == 0 {
            return bad("election_spread_ticks must be at least 1".into());
        }
        if self.lease_margin_ticks == 0 || self.lease_margin_ticks >= self.election_ticks {
            return bad(format!(
                "lease_margin_ticks ({}) must be in 1..election_ticks ({})",
                self.lease_margin_ticks, self.election_ticks
            ));
        }
        if self.snapshot_chunk_bytes == 0 || self.snapshot_chunk_bytes > FRAME_BYTES_MAX / 2 {
            return bad(format!(
                "snapshot_chunk_bytes ({}) must be in 1..={} (half a frame)",
                self.snapshot_chunk_bytes,
                FRAME_BYTES_MAX / 2
            ));
        }
        if self.proposal_bytes_max as u64 + self.append_bytes_max + 64 * 1024 > FRAME_BYTES_MAX as u64 {
            return bad("proposal_bytes_max + append_bytes_max must stay under a frame".into());
        }
        if self.snapshot_every_entries == 0 || self.inflight_appends_max == 0 || self.reads_pending_max == 0 {
            return bad("snapshot_every_entries, inflight_appends_max and reads_pending_max must be positive".into());
        }
        Ok(())
    }
}
