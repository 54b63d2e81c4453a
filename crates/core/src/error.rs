//! Typed errors, classified by what the caller must do.
//!
//! * [`Error::Abort`] — concurrency control aborted the transaction; nothing it wrote is visible.
//!   Retrying the same transaction may succeed ([`Error::is_retryable`] is true).
//! * [`Error::UserAbort`] — the procedure chose to abort (e.g. TPC-C's unused item). Retrying the
//!   same input aborts again.
//! * [`Error::Invalid`] — bad input: unknown table or procedure, wrong argument type, oversized
//!   value, malformed frame. Rejected before anything is applied; never retryable.
//! * [`Error::Unavailable`] — a node or the network did not answer in time. The outcome of a
//!   commit may be unknown (`outcome_unknown`); a read-only request may be retried.
//! * [`Error::Storage`] — the local disk failed. The node stops accepting writes.
//! * [`Error::Internal`] — a bug; reported, never silently retried.

use serde::{Deserialize, Serialize};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Error {
    #[error("transaction aborted: {0}")]
    Abort(AbortReason),
    #[error("transaction aborted by procedure: {0}")]
    UserAbort(String),
    #[error("invalid input: {0}")]
    Invalid(InvalidInput),
    #[error("unavailable: {reason} (outcome unknown: {outcome_unknown})")]
    Unavailable { reason: String, outcome_unknown: bool },
    #[error("storage failure: {0}")]
    Storage(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// True when running the same transaction again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Abort(_) => true,
            Error::Unavailable { outcome_unknown, .. } => !outcome_unknown,
            Error::UserAbort(_) | Error::Invalid(_) | Error::Storage(_) | Error::Internal(_) => false,
        }
    }

    /// True when the same input on the same state always produces this error. A replicated
    /// command that fails non-deterministically must stop the node, never diverge it.
    pub fn is_deterministic(&self) -> bool {
        matches!(self, Error::UserAbort(_) | Error::Invalid(_))
    }

    pub fn unavailable(reason: impl Into<String>) -> Self {
        Error::Unavailable { reason: reason.into(), outcome_unknown: false }
    }
}

impl From<InvalidInput> for Error {
    fn from(e: InvalidInput) -> Self {
        Error::Invalid(e)
    }
}

impl From<AbortReason> for Error {
    fn from(e: AbortReason) -> Self {
        Error::Abort(e)
    }
}

/// Why concurrency control aborted a transaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum AbortReason {
    #[error("lock conflict")]
    LockConflict,
    #[error("deadlock victim")]
    Deadlock,
    /// Aborted for an accepted BASE transaction that cannot abort and waited for it (Salt lock
    /// LK-5b, "wound").
    #[error("wounded by a BASE transaction it blocked")]
    Wounded,
    #[error("write-write conflict")]
    WriteConflict,
    #[error("timestamp too old")]
    TimestampTooOld,
    #[error("participant voted no")]
    VoteNo,
    #[error("coordinator or participant failed")]
    Failure,
    #[error("timed out")]
    Timeout,
    #[error("{0}")]
    Other(String),
}

/// Bad input. Always rejected before any state changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum InvalidInput {
    #[error("unknown table {0:?}")]
    UnknownTable(String),
    #[error("unknown table id {0}")]
    UnknownTableId(u32),
    #[error("unknown column {column:?} in table {table:?}")]
    UnknownColumn { table: String, column: String },
    #[error("unknown procedure {0:?}")]
    UnknownProcedure(String),
    #[error("unknown transaction")]
    UnknownTransaction,
    #[error("{what}: expected {expected}, got {got}")]
    WrongType { what: String, expected: String, got: String },
    #[error("wrong number of {what}: expected {expected}, got {got}")]
    WrongArity { what: String, expected: usize, got: usize },
    #[error("column {column:?} of table {table:?} is not nullable")]
    NullViolation { table: String, column: String },
    #[error("{what} is {size} bytes, limit is {limit}")]
    Oversized { what: String, size: usize, limit: usize },
    #[error("malformed frame: {0}")]
    MalformedFrame(String),
    #[error("duplicate key in table {0:?}")]
    DuplicateKey(String),
    #[error("key not found in table {0:?}")]
    KeyNotFound(String),
    #[error("formula {formula} cannot apply to {value}")]
    FormulaType { formula: String, value: String },
    #[error("arithmetic overflow in {0}")]
    Overflow(String),
    #[error("operation not supported by engine {engine}: {what}")]
    Unsupported { engine: String, what: String },
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A hello without the cluster's shared token, or with another one: nothing is served.
    #[error("authentication failed: {0}")]
    Unauthenticated(String),
    /// A procedure the invariant-confluence analysis says needs coordination, sent to an engine
    /// that runs transactions without it (`coordfree`): refused, nothing applied. (`Box<str>`
    /// keeps `Error` small.)
    #[error("engine {engine} refuses {procedure}: it needs coordination to keep invariant {invariant} ({operation})")]
    NeedsCoordination { engine: Box<str>, procedure: Box<str>, invariant: Box<str>, operation: Box<str> },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_classification() {
        assert!(Error::Abort(AbortReason::Deadlock).is_retryable());
        assert!(Error::unavailable("x").is_retryable());
        assert!(!Error::Unavailable { reason: "x".into(), outcome_unknown: true }.is_retryable());
        assert!(!Error::UserAbort("no".into()).is_retryable());
        assert!(!Error::Invalid(InvalidInput::UnknownTable("t".into())).is_retryable());
        assert!(Error::Invalid(InvalidInput::UnknownTable("t".into())).is_deterministic());
        assert!(!Error::Abort(AbortReason::Deadlock).is_deterministic());
    }
}
