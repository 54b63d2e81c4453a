//! The data that crosses the boundary between a group member and its owner.

use crate::config::ReplicaId;
use crate::wire::WireMessage;
use serde::{Deserialize, Serialize};

/// A position in the replicated log (raft's index; 0 is "before the first entry").
pub type LogIndex = u64;

/// A read the owner asked for ([`crate::ReplicaGroup::read`]), named by the owner.
pub type ReadId = u64;

/// What raft must find again after a crash: the current term, the vote cast in it, and how far
/// the log is known committed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HardState {
    pub term: u64,
    pub vote: u64,
    pub raft_commit_index: LogIndex,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    pub index: LogIndex,
    pub term: u64,
    /// The owner's command; empty for the no-op a new leader appends (raft §8).
    pub data: Vec<u8>,
}

/// A place in the log: an index and the term of the entry there. Raft §5.3: two logs with an
/// entry of the same index and term agree on every entry up to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPosition {
    pub index: LogIndex,
    pub term: u64,
}

/// The log position a snapshot covers.
pub type SnapshotMeta = LogPosition;

/// What the owner keeps on disk for one member, handed back on a restart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Durable {
    pub hard_state: HardState,
    /// The owner's latest snapshot of its state machine and the log position it covers.
    pub snapshot: Option<(SnapshotMeta, Vec<u8>)>,
    /// The log after the snapshot, contiguous.
    pub entries: Vec<LogEntry>,
    /// The member rejoined after losing its data directory and must go on abstaining from
    /// votes after every later restart too: the owner writes this mark before it starts the
    /// member with [`crate::ReplicaGroup::rejoin_after_data_loss`].
    pub abstaining: bool,
}

/// Changes to make durable, in this order, **before** any message of the same [`Ready`] is sent
/// and before anything is applied:
/// 1. `snapshot`: a snapshot installed from the leader — the durable log restarts after it
///    (its data is in [`Apply::Snapshot`]; the owner stores it with its own snapshot files);
/// 2. `entries`: drop every durable entry at or after `entries[0].index`, then append these;
/// 3. `hard_state`: overwrite.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Persist {
    pub snapshot: Option<SnapshotMeta>,
    pub entries: Vec<LogEntry>,
    pub hard_state: Option<HardState>,
}

impl Persist {
    pub fn is_empty(&self) -> bool {
        self.snapshot.is_none() && self.entries.is_empty() && self.hard_state.is_none()
    }
}

/// One step of the state machine, in log order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Apply {
    /// A committed entry. `data` is empty for a leader's no-op: skip it but count the index.
    Entry(LogEntry),
    /// Replace the whole state machine by this snapshot (a lagging member catching up).
    Snapshot { meta: SnapshotMeta, data: Vec<u8> },
}

/// A read may be served once the owner has applied up to `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadReady {
    pub id: ReadId,
    pub index: LogIndex,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderChange {
    pub term: u64,
    /// `None` while an election runs.
    pub leader: Option<ReplicaId>,
}

/// Everything a member asks of its owner since the last [`crate::ReplicaGroup::take_ready`].
/// Handle it in field order: persist and sync, send, apply, serve reads, snapshot.
#[derive(Debug, Default)]
pub struct Ready {
    pub persist: Persist,
    pub messages: Vec<WireMessage>,
    pub apply: Vec<Apply>,
    pub reads: Vec<ReadReady>,
    /// Reads that will never be ready here (leadership lost): retry them at the leader.
    pub reads_failed: Vec<ReadId>,
    /// The group would like a snapshot of the state machine once `apply` is applied: call
    /// [`crate::ReplicaGroup::snapshot_taken`] with the applied index and the bytes.
    pub snapshot_wanted: Option<LogIndex>,
    pub leader_changes: Vec<LeaderChange>,
}

impl Ready {
    pub fn is_empty(&self) -> bool {
        self.persist.is_empty()
            && self.messages.is_empty()
            && self.apply.is_empty()
            && self.reads.is_empty()
            && self.reads_failed.is_empty()
            && self.snapshot_wanted.is_none()
            && self.leader_changes.is_empty()
    }
}

/// Counters of what came in from the network and was not used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes that did not decode as a message (envelope or raft message).
    pub undecodable: u64,
    /// Decoded messages refused: wrong addressee, unknown sender, a type peers never send.
    pub refused: u64,
    /// Snapshot chunks that did not continue the snapshot being reassembled.
    pub chunks_dropped: u64,
    /// Vote requests ignored because this member just booted or lost its data.
    pub votes_withheld: u64,
    /// Snapshots sent to lagging members (counted once per snapshot, not per chunk).
    pub snapshots_sent: u64,
    pub snapshots_installed: u64,
    /// Peers found holding less than they had acknowledged (a lost data directory).
    pub peers_lost_data: u64,
}
