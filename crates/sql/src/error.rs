//! SQL errors: a PostgreSQL SQLSTATE and a message, so that every driver sees the class it
//! acts on (`40001` retry, `40003` outcome unknown — never retried, `23xxx` constraint, `0A000`
//! unsupported, `42xxx` bad statement).

use crate::types::{Datum, SqlType};
use litmus_core::{AbortReason, Error, InvalidInput};

/// A statement's failure. `code` is the five-character SQLSTATE.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message} ({code})")]
pub struct SqlError {
    pub code: &'static str,
    pub message: String,
}

/// SQLSTATEs this crate answers with.
pub mod sqlstate {
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
    pub const SYNTAX_ERROR: &str = "42601";
    pub const UNDEFINED_TABLE: &str = "42P01";
    pub const UNDEFINED_COLUMN: &str = "42703";
    pub const DUPLICATE_TABLE: &str = "42P07";
    pub const INVALID_TABLE_DEFINITION: &str = "42P16";
    pub const DATATYPE_MISMATCH: &str = "42804";
    pub const GROUPING_ERROR: &str = "42803";
    pub const UNIQUE_VIOLATION: &str = "23505";
    pub const NOT_NULL_VIOLATION: &str = "23502";
    pub const CHECK_VIOLATION: &str = "23514";
    pub const FOREIGN_KEY_VIOLATION: &str = "23503";
    pub const SERIALIZATION_FAILURE: &str = "40001";
    pub const DEADLOCK_DETECTED: &str = "40P01";
    pub const STATEMENT_COMPLETION_UNKNOWN: &str = "40003";
    pub const IN_FAILED_TRANSACTION: &str = "25P02";
    pub const DIVISION_BY_ZERO: &str = "22012";
    pub const CONNECTION_FAILURE: &str = "08006";
    pub const INTERNAL_ERROR: &str = "XX000";
    pub const IO_ERROR: &str = "58030";
    pub const UNDEFINED_PARAMETER: &str = "42P02";
    pub const PROTOCOL_VIOLATION: &str = "08P01";
    pub const QUERY_CANCELED: &str = "57014";

    /// Every SQLSTATE this crate raises: a code read back from a fragment's error is one of
    /// them (`XX000` if not).
    const KNOWN: [&str; 39] = [
        "08006", "08P01", "0A000", "22001", "22003", "22012", "2201W", "22021", "22023", "22P02", "22P04", "23502",
        "23503", "23505", "23514", "25P02", "28000", "40001", "40003", "40P01", "42601", "42701", "42702", "42703",
        "42704", "42723", "42803", "42804", "42883", "42P01", "42P02", "42P07", "42P10", "42P13", "42P16", "54000",
        "54023", "57014", "58030",
    ];

    /// `code` as a known SQLSTATE, else `XX000`.
    pub fn known(code: &str) -> &'static str {
        KNOWN.iter().find(|k| **k == code).copied().unwrap_or(INTERNAL_ERROR)
    }
}

impl SqlError {
    pub fn new(code: &'static str, message: String) -> SqlError {
        SqlError { code, message }
    }
    /// `0A000`, naming the feature.
    pub fn unsupported(feature: impl Into<String>) -> SqlError {
        SqlError::new(sqlstate::FEATURE_NOT_SUPPORTED, format!("not supported: {}", feature.into()))
    }
    pub fn syntax(message: impl Into<String>) -> SqlError {
        SqlError::new(sqlstate::SYNTAX_ERROR, message.into())
    }
    pub fn no_table(name: &str) -> SqlError {
        SqlError::new(sqlstate::UNDEFINED_TABLE, format!("relation \"{name}\" does not exist"))
    }
    pub fn no_column(name: &str) -> SqlError {
        SqlError::new(sqlstate::UNDEFINED_COLUMN, format!("column \"{name}\" does not exist"))
    }
    pub fn out_of_range(ty: &str) -> SqlError {
        SqlError::new("22003", format!("value out of range for type {ty}"))
    }
    pub fn bad_text(ty: &str, text: &str) -> SqlError {
        SqlError::new("22P02", format!("invalid input syntax for type {ty}: \"{text}\""))
    }
    pub fn cannot_cast(d: &Datum, ty: &SqlType) -> SqlError {
        SqlError::new(sqlstate::DATATYPE_MISMATCH, format!("cannot cast type {} to {ty}", d.natural_type()))
    }
    pub fn internal(message: impl Into<String>) -> SqlError {
        SqlError::new(sqlstate::INTERNAL_ERROR, message.into())
    }

    /// Whether this is a retryable abort (`40001`, `40P01`): the transaction is gone and the
    /// same transaction may succeed when run again.
    pub fn is_retryable_abort(&self) -> bool {
        matches!(self.code, sqlstate::SERIALIZATION_FAILURE | sqlstate::DEADLOCK_DETECTED)
    }

    /// Whether the statement's transaction is gone on the server (so the session must not
    /// roll it back again): a concurrency-control abort, or an unknown outcome.
    pub fn ended_transaction(&self) -> bool {
        matches!(
            self.code,
            sqlstate::SERIALIZATION_FAILURE | sqlstate::DEADLOCK_DETECTED | sqlstate::STATEMENT_COMPLETION_UNKNOWN
        )
    }
}

impl From<Error> for SqlError {
    fn from(e: Error) -> SqlError {
        let message = e.to_string();
        let code = match &e {
            Error::Abort(AbortReason::Deadlock) => sqlstate::DEADLOCK_DETECTED,
            Error::Abort(_) => sqlstate::SERIALIZATION_FAILURE,
            Error::Unavailable { outcome_unknown: true, .. } => sqlstate::STATEMENT_COMPLETION_UNKNOWN,
            Error::Unavailable { .. } => sqlstate::CONNECTION_FAILURE,
            // A SQL error from a fragment carries its SQLSTATE first (`call_one_round`).
            Error::UserAbort(m) => match m.split_once(": ") {
                Some((code, rest)) if code.len() == 5 && code.bytes().all(|b| b.is_ascii_alphanumeric()) => {
                    return SqlError::new(sqlstate::known(code), rest.to_string());
                }
                _ => sqlstate::CHECK_VIOLATION,
            },
            Error::Storage(_) => sqlstate::IO_ERROR,
            Error::Internal(_) => sqlstate::INTERNAL_ERROR,
            Error::Invalid(i) => invalid_code(i),
        };
        SqlError::new(code, message)
    }
}

fn invalid_code(i: &InvalidInput) -> &'static str {
    match i {
        InvalidInput::DuplicateKey(_) => sqlstate::UNIQUE_VIOLATION,
        InvalidInput::NullViolation { .. } => sqlstate::NOT_NULL_VIOLATION,
        InvalidInput::Unsupported { .. } | InvalidInput::NeedsCoordination { .. } => sqlstate::FEATURE_NOT_SUPPORTED,
        InvalidInput::Oversized { .. } => "54000",
        InvalidInput::Overflow(_) => "22003",
        InvalidInput::UnknownTable(_) | InvalidInput::UnknownTableId(_) => sqlstate::UNDEFINED_TABLE,
        InvalidInput::UnknownTransaction => sqlstate::IN_FAILED_TRANSACTION,
        InvalidInput::Unauthenticated(_) => "28000",
        _ => sqlstate::INTERNAL_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_commit_outcome_is_never_a_retryable_abort() {
        let e: SqlError = Error::Unavailable { reason: "timeout".into(), outcome_unknown: true }.into();
        assert_eq!(e.code, "40003");
        let e: SqlError = Error::Abort(AbortReason::LockConflict).into();
        assert_eq!(e.code, "40001");
        let e: SqlError = Error::Abort(AbortReason::Deadlock).into();
        assert_eq!(e.code, "40P01");
        let e: SqlError = Error::Invalid(InvalidInput::DuplicateKey("t".into())).into();
        assert_eq!(e.code, "23505");
    }
}
