//! # litmus-core: the vocabulary every other crate speaks
//!
//! Nothing here does I/O or reads a clock. The crate defines:
//!
//! * [`value`] — typed column values ([`Value`], [`ColumnType`], fixed-point [`Decimal`]).
//! * [`schema`] — tables with typed columns, a primary key and a partition key, collected in a
//!   [`Catalog`] that validates rows and keys before anything is written.
//! * [`key`] — an order-preserving ("memcomparable") encoding of primary keys so that byte order
//!   equals value order and range reads over the ordered store are correct.
//! * [`formula`] — update formulas (assign, add, multiply, min, max, set add/remove) as first-class
//!   values with `apply` and a commutativity table. They are TFP's formulas (BASIC §IV.B), the
//!   merge operators of coordination-free execution (I-confluence §5) and the redo records of
//!   Salt's roll-forward recovery (Salt §6.2).
//! * [`txn`] — ANSI isolation levels and access types (Salt Table 1).
//! * [`time`] and [`ids`] — timestamps, virtual time, and identifiers.
//! * [`hash`] — a fast deterministic hasher for internal hash maps (store and lock table).
//! * [`error`] — typed errors classified by what the caller must do ([`Error::is_retryable`]).

pub mod error;
pub mod formula;
pub mod hash;
pub mod ids;
pub mod key;
pub mod schema;
pub mod time;
pub mod txn;
pub mod value;

pub use error::{AbortReason, Error, InvalidInput, Result};
pub use formula::{ColumnUpdate, Formula};
pub use ids::{ClientId, NodeId, PartitionId, RequestId, TableId, TxnId};
pub use key::Key;
pub use schema::{Catalog, Column, Partitioning, TableSchema};
pub use time::{Time, Timestamp};
pub use txn::{Access, Isolation};
pub use value::{ColumnType, Decimal, Row, Value};

/// Hard limits on user-supplied data ("put a limit on everything").
pub mod limits {
    /// Largest encoded size of a single value (string or bytes), in bytes.
    pub const VALUE_SIZE_MAX: usize = 64 * 1024;
    /// Largest number of columns in a table.
    pub const COLUMNS_MAX: usize = 256;
    /// Largest number of elements in a set value.
    pub const SET_ELEMENTS_MAX: usize = 4096;
    /// Largest number of procedure arguments.
    pub const ARGS_MAX: usize = 1024;
    /// Largest number of rows a single range read may return.
    pub const SCAN_ROWS_MAX: usize = 100_000;
}
