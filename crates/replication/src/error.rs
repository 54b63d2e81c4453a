//! Errors, classified by what the caller does next.

use crate::config::ReplicaId;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// This member is not the leader: send the call to `hint` (the leader this member last
    /// heard from, if any) or try the other members, within the caller's deadline.
    #[error("not the leader (try {hint:?})")]
    NotLeader { hint: Option<ReplicaId> },
    /// The leader is handing its leadership over; retry shortly at the new leader.
    #[error("leadership transfer in progress")]
    TransferInProgress,
    /// Raft refused the proposal (too many uncommitted bytes): retry later.
    #[error("proposal dropped: {0}")]
    Dropped(String),
    /// The proposal is larger than `proposal_bytes_max`: it can never be replicated.
    #[error("proposal of {bytes} bytes over the limit of {max}")]
    ProposalTooLarge { bytes: usize, max: usize },
    /// The owner asked for something that contradicts the group's state (a snapshot of an
    /// index not applied yet, a transfer to a non-voter).
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The durable state handed to a restarting member is not a valid raft state.
    #[error("corrupt durable state: {0}")]
    Corrupt(String),
}

impl Error {
    /// Whether the same call may succeed later (at this member or at another one).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::NotLeader { .. } | Error::TransferInProgress | Error::Dropped(_))
    }
}
