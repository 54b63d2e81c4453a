//! # litmus-sql: SQL over the engines
//!
//! A [`Session`] runs SQL statements (parsed by `sqlparser`'s PostgreSQL dialect) for one
//! connection, over a [`litmus_client::Client`]: every statement is planned here and executed
//! as reads and writes of an interactive transaction, so it runs under whatever concurrency
//! control the cluster's engine gives (see `docs/sql.md` for what each engine guarantees). On
//! the engines that take no interactive transaction (the one-round ones) the transaction is
//! optimistic and commits as one minitransaction ([`one_round`]).
//!
//! * **Storage** ([`catalog`]): every SQL table lives in one built-in table, keyed by (table
//!   id, encoded primary key); the catalog is rows of the same table, written by ordinary
//!   transactions, so it is durable, the same on every node and replicated with the data.
//! * **Transactions**: outside `BEGIN` each statement is its own transaction (autocommit);
//!   inside, statements share one until `COMMIT` or `ROLLBACK`. A statement that fails fails
//!   its transaction (PostgreSQL's rule: later statements get `25P02` until `ROLLBACK`), so no
//!   statement is ever half applied.
//! * **Errors** ([`SqlError`]) carry PostgreSQL's SQLSTATEs: `0A000` for what is not
//!   supported (naming it), `23505`/`23502`/`23514` for constraints, `40001` for a retryable
//!   abort, `40003` when a commit's outcome is unknown, `42P01` for a missing table, `42601`
//!   for bad syntax.
//!
//! What is left out: subqueries, outer joins, `UNION`, `DISTINCT`, secondary indexes,
//! `UNIQUE` other than the primary key and foreign keys (refused at `CREATE TABLE`), Salt's
//! BASE transactions in SQL, update formulas (an `UPDATE` reads its row
//! for update — under the write's lock on the locking engines — then writes it).

pub mod call_one_round;
pub mod catalog;
mod coordination;
pub mod copy;
mod describe;
mod dml;
pub mod error;
pub mod expr;
pub mod one_round;
pub mod query;
pub mod routine;
mod session;
pub mod store;
pub mod types;

pub use catalog::{rows_tables, TablePartitioning, ROWS_TABLE};
pub use error::{sqlstate, SqlError};
pub use session::{Output, Session, TxnStatus, IMPLICIT_RETRIES_MAX, RETRY_INHERIT_WITHIN};
pub use types::{Datum, SqlType};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Adds what SQL needs to a server's catalog and registry: the built-in tables SQL tables
/// live in ([`rows_tables`]) and the one-round `CALL` procedure ([`call_one_round`]).
pub fn install(catalog: &mut litmus_core::Catalog, registry: &mut litmus_protocol::Registry) {
    for t in rows_tables() {
        catalog.add(t);
    }
    call_one_round::register(registry);
}

/// What `version()` and the `server_version` setting report: a PostgreSQL version that
/// clients accept, and our name.
pub const SERVER_VERSION: &str = "15.0";
pub const SERVER_VERSION_STRING: &str = "PostgreSQL 15.0 (LitmusDB)";

/// A result column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: SqlType,
}

/// What one statement's execution knows besides the data.
pub struct StatementCtx {
    pub params: Vec<Datum>,
    /// The parameters' types as far as known (for typing results).
    pub param_types: Vec<SqlType>,
    /// The statement's timestamp, microseconds since 1970.
    pub now_us: i64,
    /// The engine keeps invariants by refusing what needs coordination (`coordfree`): each
    /// write is judged before it runs ([`coordination`]).
    pub refuse_coordination: bool,
}

impl StatementCtx {
    /// A fresh hidden row id: one counter for every session of the process (so no two
    /// sessions of a server ever share one), started at a point drawn from the clock and the
    /// process id (so servers' ranges are far apart).
    pub fn next_rowid(&self) -> i64 {
        static NEXT: OnceLock<AtomicU64> = OnceLock::new();
        let next = NEXT.get_or_init(|| {
            let nanos =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos()
                    as u64;
            // splitmix64 of the clock and the pid: a start anywhere in the positive i64 range.
            let mut z = nanos ^ (u64::from(std::process::id()) << 32);
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            AtomicU64::new((z ^ (z >> 31)) >> 2)
        });
        next.fetch_add(1, Ordering::Relaxed) as i64
    }
}

/// Parses SQL text into statements; bad syntax is `42601`.
pub fn parse(sql: &str) -> Result<Vec<sqlparser::ast::Statement>, SqlError> {
    let rewritten = routine::rewrite(sql);
    sqlparser::parser::Parser::parse_sql(&sqlparser::dialect::PostgreSqlDialect {}, rewritten.as_deref().unwrap_or(sql))
        .map_err(|e| SqlError::syntax(format!("syntax error: {e}")))
}

/// `VACUUM ...` and `ANALYZE ...` (forms the parser does not know, such as `VACUUM ANALYZE t`)
/// are accepted as no-ops: there is no heap to vacuum and no planner statistics. The command
/// tag to answer, when `sql` is one of them.
pub fn maintenance_tag(sql: &str) -> Option<&'static str> {
    let first = sql.trim_start().split(|c: char| c.is_whitespace() || c == ';').next()?.to_ascii_lowercase();
    match first.as_str() {
        "vacuum" => Some("VACUUM"),
        "analyze" | "analyse" => Some("ANALYZE"),
        _ => None,
    }
}
