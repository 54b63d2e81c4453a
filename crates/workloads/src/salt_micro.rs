//! # Salt's contention microbenchmarks (Salt OSDI'14 §8.3, Figs. 11–13)
//!
//! Three workloads reproduce the microbenchmarks with which Salt shows how contention, the
//! position of the contended operation and the read-write mix affect ACID and BASE
//! transactions. Every transaction is one stored procedure that wraps *each* operation in its
//! own alkaline subtransaction (Salt §4, Fig. 2), registered as a BASE procedure
//! ([`ProcOptions::base`]):
//!
//! ```text
//!   salt_update_n(r_1, ..., r_n)                 begin BASE transaction
//!     for r in r_1..r_n, in argument order:
//!       begin alkaline-subtransaction            ┐ ctx.alkaline_update: the three lines as one
//!         counter(r) += 1                        │ request (a formula, no read)
//!       end alkaline-subtransaction              ┘ [salt_read_5: ctx.alkaline_read]
//!                                                end BASE transaction
//! ```
//!
//! A single-operation alkaline subtransaction is issued as one request
//! ([`Ctx::alkaline_update`], the same as `begin_alkaline; update; end_alkaline`) so that
//! `salt-local` can commit it at the partition as soon as the operation completes (§6.4). The
//! operations are sequential (each awaited before the next is issued), so the position of an
//! operation in the argument list is its position in time, which is what Fig. 12 varies.
//!
//! What the boundaries mean is the engine's business, not the workload's:
//!
//! * engines with BASE transactions (`salt`, `salt-local`) hold each alkaline lock only until
//!   the end of its subtransaction and acknowledge the transaction at *accept* — after the first
//!   alkaline subtransaction commits — finishing the rest in the background (§4, §6.1);
//!   `salt-local` releases it as soon as the operation completes (§6.4);
//! * engines without them (`nocc`, `acid`) ignore the BASE option and the boundaries, so the
//!   same body runs as one ACID transaction holding its locks to the end.
//!
//! | workload          | paper   | each transaction                                   | knob                 |
//! |-------------------|---------|----------------------------------------------------|----------------------|
//! | `salt-contention` | Fig. 11 | updates 5 distinct rows of `--rows N`              | contention ratio 5/N |
//! | `salt-position`   | Fig. 12 | updates 10 rows: 1 of [`HOT_ROWS`] shared hot rows, 9 of `--cold-rows` | `--after K` |
//! | `salt-rw`         | Fig. 13 | reads 5 or updates 5 distinct rows of `--rows` (100) | `--read-fraction f` |
//!
//! `--after K` (0..=9) is the number of operations that follow the contended update: the hot
//! update is operation `10 - K` of 10 (1-based), so `K = 9` puts it first (an ACID engine then
//! holds the hot lock for the whole transaction) and `K = 0` last.
//!
//! ## Schema and procedures
//!
//! ```text
//!   salt_rows(row_id int, counter int)   primary key row_id, partitioned by it (row r on partition r mod P)
//!   salt-contention, salt-rw: rows 0..rows
//!   salt-position:            hot rows 0..10, cold rows 10..10+cold_rows
//! ```
//!
//! * `salt_update_5(r_1..r_5)`, `salt_update_10(r_1..r_10)` (BASE): `counter += 1` on each row;
//!   an update of a missing row is rejected as invalid input (and stops the run).
//! * `salt_read_5(r_1..r_5) -> [counter_1..counter_5]` (BASE): a missing row aborts the transaction
//!   ([`litmus_core::Error::UserAbort`]).
//! * `salt_load(start, count)`: writes rows `start..start+count` with `counter = 0` (overwrites,
//!   so a retried load is harmless). `salt_check(start, end) -> [rows, sum(counter), bad_rows,
//!   first_bad_row | NULL]` scans at most [`CHECK_CHUNK_ROWS`] rows. Both are plain ACID
//!   procedures.
//!
//! The three workloads share the table and the procedures (a cluster only ever runs one of
//! them), and neither depends on the options, so `litmus server` registers them up front.
//!
//! ## Choices
//!
//! * The rows of a salt-contention or salt-rw transaction are accessed in ascending `row_id`
//!   order, so a two-phase-locking ACID engine never deadlocks on them: the figures measure how
//!   long locks are held (what §8.3 attributes the difference to), not deadlock handling. In a
//!   salt-position transaction the 9 cold rows are in ascending order around the hot one.
//! * Procedures run at the default isolation ([`litmus_core::Isolation::Serializable`]).
//!
//! ## Invariant (checked by `verify`)
//!
//! With `U` committed update transactions and `I` indeterminate ones (see
//! [`mod@crate::workload`]), per group of rows — all rows, or for salt-position the hot and the
//! cold rows separately — whose transactions update `k` of them (5; or 1 hot and 9 cold):
//!
//! * every row exists once with a counter `>= 0`, and no transaction found a row missing;
//! * `k·U <= sum(counter) <= k·(U + I)`: no committed update lost, none applied twice or
//!   invented.
//!
//! Under Salt a BASE transaction is acknowledged at accept and its remaining alkaline
//! subtransactions finish in the background, so the sums may still be climbing when the clients
//! stop. `verify` therefore re-reads them every [`VERIFY_SETTLE_POLL`] until two consecutive
//! readings agree and hold the invariant (or a reading reaches the upper bound, beyond which
//! nothing can change), for at most [`VERIFY_SETTLE_MAX`]. A check that keeps aborting (an ACID
//! scan waiting out BASE transactions) counts as a reading not yet taken. A sum above its upper
//! bound fails at once: counters only grow.
//!
//! ## Not implemented
//!
//! Salt §8.3 runs its microbenchmarks on two partitions with three-way replication; here the
//! cluster shape is the harness's (`--nodes`, `--partitions`) and there is no replication. The
//! transactions have no exception handlers (an alkaline subtransaction that fails fails the
//! transaction), since a counter increment has no constraint to violate.

use crate::setup::{call_idempotent, load_in_batches};
use crate::workload::{RunStats, TxnRequest, Workload};
use crate::ycsb::KeyChooser;
use anyhow::Context as _;
use litmus_client::Client;
use litmus_core::{Catalog, Column, ColumnType, Error, Formula, InvalidInput, Partitioning, TableSchema, Value};
use litmus_protocol::procedure::{ProcOptions, ProcResult};
use litmus_protocol::{Ctx, Op, Registry};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::time::{Duration, Instant};

pub const TABLE: &str = "salt_rows";
pub const ID_COLUMN: &str = "row_id";
pub const COUNTER_COLUMN: &str = "counter";

pub const KIND_READ: &str = "read";
pub const KIND_UPDATE: &str = "update";

/// Rows a salt-contention or salt-rw transaction touches.
pub const CONTENTION_OPS: usize = 5;
/// Rows a salt-position transaction updates (one hot, the rest cold).
pub const POSITION_OPS: usize = 10;
/// Shared hot rows of salt-position (row ids `0..HOT_ROWS`).
pub const HOT_ROWS: u64 = 10;
/// Largest `--after`: every other operation follows the hot one.
pub const AFTER_MAX: u32 = POSITION_OPS as u32 - 1;

pub const UPDATE_5_PROCEDURE: &str = "salt_update_5";
pub const UPDATE_10_PROCEDURE: &str = "salt_update_10";
pub const READ_5_PROCEDURE: &str = "salt_read_5";
pub const LOAD_PROCEDURE: &str = "salt_load";
pub const CHECK_PROCEDURE: &str = "salt_check";

/// Fewest cold rows: a salt-position transaction updates that many distinct ones.
pub const COLD_ROWS_MIN: u64 = POSITION_OPS as u64 - 1;
/// Largest table (or cold set) accepted.
pub const ROWS_MAX: u64 = 10_000_000;
/// Rows written by one `salt_load` call.
pub const LOAD_BATCH_ROWS: u64 = 500;
/// Most rows `salt_load` accepts in one call.
pub const LOAD_BATCH_ROWS_MAX: i64 = 1_000;
/// Rows checked by one `salt_check` call (also its most rows per call).
pub const CHECK_CHUNK_ROWS: u64 = 10_000;
/// Longest `verify` waits for background work (Salt's post-accept alkaline subtransactions) to
/// finish before it judges the sums.
pub const VERIFY_SETTLE_MAX: Duration = Duration::from_secs(5);
/// Pause between two readings of the sums while settling.
pub const VERIFY_SETTLE_POLL: Duration = Duration::from_millis(100);

/// Which microbenchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SaltMicroKind {
    /// Fig. 11: contention ratio.
    Contention,
    /// Fig. 12: position of the contended operation.
    Position,
    /// Fig. 13: read-write ratio.
    ReadWrite,
}

impl SaltMicroKind {
    pub const ALL: [SaltMicroKind; 3] = [SaltMicroKind::Contention, SaltMicroKind::Position, SaltMicroKind::ReadWrite];

    /// The workload name `litmus bench` knows it by.
    pub fn name(self) -> &'static str {
        match self {
            SaltMicroKind::Contention => "salt-contention",
            SaltMicroKind::Position => "salt-position",
            SaltMicroKind::ReadWrite => "salt-rw",
        }
    }

    pub fn from_name(name: &str) -> Option<SaltMicroKind> {
        SaltMicroKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Settings of the Salt microbenchmarks (`--rows`, `--after`, `--cold-rows`, `--read-fraction`).
#[derive(clap::Args, Clone, Debug, PartialEq, Serialize)]
#[command(next_help_heading = "Salt microbenchmark options (salt-contention, salt-position, salt-rw)")]
pub struct SaltMicroOptions {
    /// salt-contention, salt-rw: rows in the table; each transaction touches 5 of them, so the
    /// contention ratio is 5/rows.
    #[arg(long, value_name = "N", default_value_t = SaltMicroOptions::DEFAULT.rows)]
    pub rows: u64,

    /// salt-position: operations that follow the contended update in each transaction (0..=9);
    /// the hot update is operation 10-K of 10.
    #[arg(long, value_name = "K", default_value_t = SaltMicroOptions::DEFAULT.after)]
    pub after: u32,

    /// salt-position: non-contended rows the other 9 updates of a transaction are drawn from.
    #[arg(long = "cold-rows", value_name = "N", default_value_t = SaltMicroOptions::DEFAULT.cold_rows)]
    pub cold_rows: u64,

    /// salt-rw: fraction of transactions that read 5 rows; the rest update 5.
    #[arg(long = "read-fraction", value_name = "FRACTION", default_value_t = SaltMicroOptions::DEFAULT.read_fraction)]
    pub read_fraction: f64,
}

impl SaltMicroOptions {
    pub const DEFAULT: SaltMicroOptions =
        SaltMicroOptions { rows: 100, after: AFTER_MAX, cold_rows: 100_000, read_fraction: 0.5 };

    pub fn validate(&self) -> Result<(), SaltMicroConfigError> {
        use SaltMicroConfigError::*;
        if self.rows < CONTENTION_OPS as u64 || self.rows > ROWS_MAX {
            return Err(Rows(self.rows));
        }
        if self.after > AFTER_MAX {
            return Err(After(self.after));
        }
        if self.cold_rows < COLD_ROWS_MIN || self.cold_rows > ROWS_MAX {
            return Err(ColdRows(self.cold_rows));
        }
        if !(0.0..=1.0).contains(&self.read_fraction) {
            return Err(ReadFraction(self.read_fraction));
        }
        Ok(())
    }
}

impl Default for SaltMicroOptions {
    fn default() -> Self {
        SaltMicroOptions::DEFAULT
    }
}

/// Rejected microbenchmark settings.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SaltMicroConfigError {
    #[error("--rows must be in {CONTENTION_OPS}..={ROWS_MAX}, got {0}")]
    Rows(u64),
    #[error("--after must be in 0..={AFTER_MAX}, got {0}")]
    After(u32),
    #[error("--cold-rows must be in {COLD_ROWS_MIN}..={ROWS_MAX}, got {0}")]
    ColdRows(u64),
    #[error("--read-fraction must be in [0, 1], got {0}")]
    ReadFraction(f64),
}

/// One of the three microbenchmarks.
pub struct SaltMicro {
    kind: SaltMicroKind,
    opts: SaltMicroOptions,
    /// Whether loading may show a progress bar.
    progress: bool,
    /// Longest `verify` waits for the sums to settle ([`VERIFY_SETTLE_MAX`] unless a test says
    /// otherwise).
    settle_max: Duration,
}

/// Rows whose counters one verify sum covers, and how many of them each update transaction
/// increments.
#[derive(Clone, Copy, Debug)]
struct Group {
    name: &'static str,
    start: u64,
    end: u64,
    per_txn: u64,
}

/// One reading of the table by `verify`.
#[derive(Clone, Debug, PartialEq)]
struct Reading {
    /// Rows found, per group.
    rows: Vec<u64>,
    /// Sum of the counters, per group.
    sums: Vec<u64>,
    bad: u64,
    first_bad: Option<Value>,
}

impl SaltMicro {
    pub fn new(kind: SaltMicroKind, opts: SaltMicroOptions, progress: bool) -> Result<SaltMicro, SaltMicroConfigError> {
        opts.validate()?;
        Ok(SaltMicro { kind, opts, progress, settle_max: VERIFY_SETTLE_MAX })
    }

    /// Waits at most `settle_max` (instead of [`VERIFY_SETTLE_MAX`]) for the sums to settle.
    pub fn with_settle_max(mut self, settle_max: Duration) -> SaltMicro {
        self.settle_max = settle_max;
        self
    }

    pub fn kind(&self) -> SaltMicroKind {
        self.kind
    }

    pub fn options(&self) -> &SaltMicroOptions {
        &self.opts
    }

    /// Rows loaded: `0..table_rows()`.
    pub fn table_rows(&self) -> u64 {
        match self.kind {
            SaltMicroKind::Contention | SaltMicroKind::ReadWrite => self.opts.rows,
            SaltMicroKind::Position => HOT_ROWS + self.opts.cold_rows,
        }
    }

    /// Salt Fig. 11's x axis: the probability-like ratio of rows a transaction touches to rows
    /// there are (5/N; for salt-position, 1 hot row of 10).
    pub fn contention_ratio(&self) -> f64 {
        match self.kind {
            SaltMicroKind::Contention | SaltMicroKind::ReadWrite => CONTENTION_OPS as f64 / self.opts.rows as f64,
            SaltMicroKind::Position => 1.0 / HOT_ROWS as f64,
        }
    }

    fn groups(&self) -> Vec<Group> {
        match self.kind {
            SaltMicroKind::Contention | SaltMicroKind::ReadWrite => {
                vec![Group { name: "rows", start: 0, end: self.opts.rows, per_txn: CONTENTION_OPS as u64 }]
            }
            SaltMicroKind::Position => vec![
                Group { name: "hot rows", start: 0, end: HOT_ROWS, per_txn: 1 },
                Group {
                    name: "cold rows",
                    start: HOT_ROWS,
                    end: HOT_ROWS + self.opts.cold_rows,
                    per_txn: POSITION_OPS as u64 - 1,
                },
            ],
        }
    }

    /// Reads every group's rows once. `Ok(Err(e))`: a check kept failing with a retryable error
    /// (the database is busy, e.g. an ACID scan waiting out BASE transactions), which the settle
    /// loop waits out.
    fn read_sums(&self, client: &mut Client, groups: &[Group]) -> anyhow::Result<Result<Reading, Error>> {
        let mut reading = Reading { rows: vec![0; groups.len()], sums: vec![0; groups.len()], bad: 0, first_bad: None };
        for (i, g) in groups.iter().enumerate() {
            let mut start = g.start;
            while start < g.end {
                let end = (start + CHECK_CHUNK_ROWS).min(g.end);
                let args = vec![Value::Int(start as i64), Value::Int(end as i64)];
                let out = match call_idempotent(client, CHECK_PROCEDURE, args) {
                    Ok(out) => out,
                    Err(e) if e.is_retryable() || matches!(e, Error::Unavailable { .. }) => return Ok(Err(e)),
                    Err(e) => return Err(e).with_context(|| format!("check rows {start}..{end}")),
                };
                let count = |i: usize| out.get(i).and_then(Value::as_int).and_then(|v| u64::try_from(v).ok());
                let (Some(rows), Some(sum), Some(bad)) = (count(0), count(1), count(2)) else {
                    anyhow::bail!("{CHECK_PROCEDURE} returned {out:?}, expected [rows, sum, bad_rows, first_bad_row]");
                };
                reading.rows[i] += rows;
                reading.sums[i] += sum;
                reading.bad += bad;
                if reading.first_bad.is_none() && bad > 0 {
                    reading.first_bad = out.get(3).cloned();
                }
                start = end;
            }
        }
        Ok(Ok(reading))
    }
}

fn int_arg(args: &[Value], i: usize, procedure: &str) -> Result<i64, Error> {
    args.get(i).and_then(Value::as_int).ok_or_else(|| {
        InvalidInput::WrongType {
            what: format!("argument {i} of {procedure}"),
            expected: "int".into(),
            got: args.get(i).map_or("nothing".into(), Value::type_name),
        }
        .into()
    })
}

/// `salt_update_n(r_1, ..., r_n)`: one single-operation alkaline subtransaction per row, in
/// argument order.
async fn update_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    for row in args {
        ctx.alkaline_update(TABLE, &[row], &[(COUNTER_COLUMN, Formula::Add(Value::Int(1)))]).await?;
    }
    Ok(vec![])
}

/// `salt_read_5(r_1, ..., r_5) -> [counter_1, ..., counter_5]`: one alkaline subtransaction per
/// row, in argument order.
async fn read_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let mut counters = Vec::with_capacity(args.len());
    for row in args {
        let found = ctx.alkaline_read(TABLE, std::slice::from_ref(&row)).await?;
        match found {
            Some(r) if r.len() == 2 => counters.push(r[1].clone()),
            _ => return Err(ctx.abort(format!("{TABLE} row {row} is missing"))),
        }
    }
    Ok(counters)
}

/// `salt_load(start, count)`: writes rows `start..start+count` with zero counters.
async fn load_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let start = int_arg(&args, 0, LOAD_PROCEDURE)?;
    let count = int_arg(&args, 1, LOAD_PROCEDURE)?;
    let bad = |what: String| -> Error { InvalidInput::Config(format!("{LOAD_PROCEDURE}: {what}")).into() };
    if !(0..=LOAD_BATCH_ROWS_MAX).contains(&count) {
        return Err(bad(format!("count must be in 0..={LOAD_BATCH_ROWS_MAX}, got {count}")));
    }
    if start < 0 || start.checked_add(count).is_none() {
        return Err(bad(format!("bad row range start {start} count {count}")));
    }
    let writes: Vec<_> = (start..start + count)
        .map(|r| ctx.op(Op::Write { table: TABLE.into(), row: vec![Value::Int(r), Value::Int(0)].into() }))
        .collect();
    for w in writes {
        w.await?;
    }
    Ok(vec![Value::Int(count)])
}

/// `salt_check(start, end)` -> `[rows, sum(counter), bad_rows, first_bad_row | NULL]`.
async fn check_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let start = int_arg(&args, 0, CHECK_PROCEDURE)?;
    let end = int_arg(&args, 1, CHECK_PROCEDURE)?;
    let span = end.checked_sub(start).filter(|s| (0..=CHECK_CHUNK_ROWS as i64).contains(s)).ok_or_else(|| {
        Error::from(InvalidInput::Config(format!(
            "{CHECK_PROCEDURE}: range {start}..{end} must span 0..={CHECK_CHUNK_ROWS} rows"
        )))
    })?;
    let rows = ctx.scan(TABLE, &[Value::Int(start)], Some(&[Value::Int(end)]), span as u32).await?;
    let (mut sum, mut bad, mut first_bad) = (0i64, 0i64, Value::Null);
    for row in &rows {
        let id_ok = row.first().and_then(Value::as_int).is_some_and(|id| (start..end).contains(&id));
        match row.get(1).and_then(Value::as_int).filter(|c| *c >= 0 && id_ok && row.len() == 2) {
            Some(c) => sum = sum.checked_add(c).ok_or_else(|| InvalidInput::Overflow("sum(counter)".into()))?,
            None => {
                bad += 1;
                if first_bad.is_null() {
                    first_bad = row.first().cloned().unwrap_or(Value::Null);
                }
            }
        }
    }
    Ok(vec![Value::Int(rows.len() as i64), Value::Int(sum), Value::Int(bad), first_bad])
}

/// The salt_rows schema.
pub fn table() -> TableSchema {
    TableSchema::new(
        TABLE,
        vec![Column::new(ID_COLUMN, ColumnType::Int), Column::new(COUNTER_COLUMN, ColumnType::Int)],
        &[ID_COLUMN],
        Partitioning::KeyPrefix { prefix_len: 1 },
    )
}

/// `n` distinct rows of `0..rows`, ascending.
fn distinct_sorted(rng: &mut ChaCha8Rng, rows: u64, n: usize) -> Vec<u64> {
    let mut keys = KeyChooser::Uniform { records: rows }.distinct(rng, n);
    keys.sort_unstable();
    keys
}

fn int_values(rows: impl IntoIterator<Item = u64>) -> Vec<Value> {
    rows.into_iter().map(|r| Value::Int(r as i64)).collect()
}

impl Workload for SaltMicro {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn describe(&self) -> String {
        let o = &self.opts;
        match self.kind {
            SaltMicroKind::Contention => format!(
                "rows={} contention_ratio={:.4} (5/rows); {CONTENTION_OPS} updates per transaction, each its own \
                 alkaline subtransaction",
                o.rows,
                self.contention_ratio()
            ),
            SaltMicroKind::Position => format!(
                "hot_rows={HOT_ROWS} cold_rows={} after={} (the hot update is op {} of {POSITION_OPS}); each update \
                 its own alkaline subtransaction",
                o.cold_rows,
                o.after,
                POSITION_OPS as u32 - o.after
            ),
            SaltMicroKind::ReadWrite => format!(
                "rows={} read_fraction={} contention_ratio={:.4}; {CONTENTION_OPS} reads or {CONTENTION_OPS} updates \
                 per transaction, each its own alkaline subtransaction",
                o.rows,
                o.read_fraction,
                self.contention_ratio()
            ),
        }
    }

    fn catalog(&self) -> Catalog {
        let mut c = Catalog::new();
        c.add(table());
        c
    }

    fn register(&self, registry: &mut Registry) {
        let base = ProcOptions::base();
        registry.register_with(UPDATE_5_PROCEDURE, vec![ColumnType::Int; CONTENTION_OPS], base, update_body);
        registry.register_with(UPDATE_10_PROCEDURE, vec![ColumnType::Int; POSITION_OPS], base, update_body);
        registry.register_with(READ_5_PROCEDURE, vec![ColumnType::Int; CONTENTION_OPS], base, read_body);
        registry.register(LOAD_PROCEDURE, vec![ColumnType::Int; 2], load_body);
        registry.register(CHECK_PROCEDURE, vec![ColumnType::Int; 2], check_body);
    }

    fn prepare(&self, clients: &mut dyn FnMut() -> Result<Client, Error>) -> anyhow::Result<()> {
        let args = |start: u64, count: u64| vec![Value::Int(start as i64), Value::Int(count as i64)];
        load_in_batches(clients, self.table_rows(), LOAD_BATCH_ROWS, self.progress, LOAD_PROCEDURE, &args)
    }

    fn generate(&self, rng: &mut ChaCha8Rng) -> TxnRequest {
        match self.kind {
            SaltMicroKind::Contention => TxnRequest {
                kind: KIND_UPDATE,
                procedure: UPDATE_5_PROCEDURE,
                args: int_values(distinct_sorted(rng, self.opts.rows, CONTENTION_OPS)),
            },
            SaltMicroKind::Position => {
                let hot = rng.gen_range(0..HOT_ROWS);
                let mut rows: Vec<u64> = distinct_sorted(rng, self.opts.cold_rows, POSITION_OPS - 1)
                    .into_iter()
                    .map(|r| HOT_ROWS + r)
                    .collect();
                rows.insert(POSITION_OPS - 1 - self.opts.after as usize, hot);
                debug_assert_eq!(rows.len(), POSITION_OPS);
                TxnRequest { kind: KIND_UPDATE, procedure: UPDATE_10_PROCEDURE, args: int_values(rows) }
            }
            SaltMicroKind::ReadWrite => {
                let read = rng.gen_bool(self.opts.read_fraction);
                let args = int_values(distinct_sorted(rng, self.opts.rows, CONTENTION_OPS));
                if read {
                    TxnRequest { kind: KIND_READ, procedure: READ_5_PROCEDURE, args }
                } else {
                    TxnRequest { kind: KIND_UPDATE, procedure: UPDATE_5_PROCEDURE, args }
                }
            }
        }
    }

    fn verify(&self, client: &mut Client, stats: &RunStats) -> anyhow::Result<String> {
        let groups = self.groups();
        let updates = stats.total_of(KIND_UPDATE);
        let (committed, indeterminate) = (updates.committed, updates.indeterminate());
        let bounds: Vec<(u64, u64)> =
            groups.iter().map(|g| (g.per_txn * committed, g.per_txn * (committed + indeterminate))).collect();
        let user_aborts = stats.total_all().user_aborts;

        // Everything wrong with a reading; `final` when waiting cannot fix it.
        let judge = |r: &Reading, stable: bool| -> (Vec<String>, bool) {
            let (mut problems, mut final_) = (Vec::new(), false);
            for (i, g) in groups.iter().enumerate() {
                let expected = g.end - g.start;
                if r.rows[i] != expected {
                    problems.push(format!("expected {expected} {} in {TABLE}, found {}", g.name, r.rows[i]));
                    final_ |= stable;
                }
                let (low, high) = bounds[i];
                if !(low..=high).contains(&r.sums[i]) {
                    problems.push(format!(
                        "sum({COUNTER_COLUMN}) over {} = {} outside [{low}, {high}] ({committed} committed and \
                         {indeterminate} indeterminate update transactions, {} row(s) each)",
                        g.name, r.sums[i], g.per_txn
                    ));
                    final_ |= r.sums[i] > high; // counters only grow
                }
            }
            if r.bad > 0 {
                let first = r.first_bad.as_ref().map_or("?".to_string(), Value::to_string);
                problems.push(format!("{} rows malformed or with a negative counter (first: row {first})", r.bad));
                final_ |= stable;
            }
            if user_aborts > 0 {
                problems.push(format!("{user_aborts} transactions found a row missing"));
                final_ = true;
            }
            (problems, final_)
        };

        let started = Instant::now();
        let mut previous: Option<Reading> = None;
        let mut readings = 0u32;
        let reading = loop {
            let read = self.read_sums(client, &groups)?;
            readings += 1;
            let r = match read {
                Ok(r) => r,
                Err(busy) => {
                    let waited = started.elapsed();
                    if waited >= self.settle_max {
                        anyhow::bail!(
                            "could not read the counters for {} ms ({readings} attempt(s)): {busy}",
                            waited.as_millis()
                        );
                    }
                    previous = None;
                    std::thread::sleep(VERIFY_SETTLE_POLL);
                    continue;
                }
            };
            let stable = previous.as_ref() == Some(&r);
            let complete = r.sums.iter().zip(&bounds).all(|(s, (_, high))| s == high);
            let (problems, final_) = judge(&r, stable);
            if problems.is_empty() && (stable || complete) {
                break r;
            }
            let waited = started.elapsed();
            if final_ || waited >= self.settle_max {
                let why = if problems.is_empty() {
                    format!("the counters were still changing after {} ms", waited.as_millis())
                } else {
                    problems.join("; ")
                };
                anyhow::bail!("{why} ({readings} reading(s) over {} ms)", waited.as_millis());
            }
            previous = Some(r);
            std::thread::sleep(VERIFY_SETTLE_POLL);
        };

        let total_rows: u64 = reading.rows.iter().sum();
        let sums: Vec<String> = groups
            .iter()
            .zip(&reading.sums)
            .zip(&bounds)
            .map(|((g, s), (low, high))| format!("{} {s} within [{low}, {high}]", g.name))
            .collect();
        Ok(format!(
            "{total_rows} rows intact; sum({COUNTER_COLUMN}): {} ({committed} committed, {indeterminate} indeterminate \
             update transactions); settled after {readings} reading(s)",
            sums.join(", ")
        ))
    }
}

/// The Salt microbenchmark `kind` built from the flags.
fn build_kind(kind: SaltMicroKind, o: &crate::Options) -> anyhow::Result<Box<dyn Workload>> {
    Ok(Box::new(SaltMicro::new(kind, o.salt.clone(), o.progress)?))
}

/// `salt-contention` in the workload registry ([`crate::ALL`]); it also registers the table
/// and procedures the three microbenchmarks share.
pub const CONTENTION_DEF: crate::WorkloadDef = crate::WorkloadDef {
    name: "salt-contention",
    about: "Salt Fig. 11: five updates per transaction over few rows, every operation alkaline",
    sweeps: &["rows"],
    build: Some(|o| build_kind(SaltMicroKind::Contention, o)),
    build_for: None,
    schema: Some(|catalog, registry| {
        let salt = SaltMicro::new(SaltMicroKind::Contention, SaltMicroOptions::default(), false)
            .expect("default options are valid");
        catalog.merge(&salt.catalog());
        salt.register(registry);
    }),
    analysis: None,
    sim: None,
};

/// `salt-position` in the workload registry (its schema is `salt-contention`'s).
pub const POSITION_DEF: crate::WorkloadDef = crate::WorkloadDef {
    name: "salt-position",
    about: "Salt Fig. 12: where in the transaction the contended update sits",
    sweeps: &["after", "cold-rows"],
    build: Some(|o| build_kind(SaltMicroKind::Position, o)),
    build_for: None,
    schema: None,
    analysis: None,
    sim: None,
};

/// `salt-rw` in the workload registry (its schema is `salt-contention`'s).
pub const READ_WRITE_DEF: crate::WorkloadDef = crate::WorkloadDef {
    name: "salt-rw",
    about: "Salt Fig. 13: read-only against read-write transactions on contended rows",
    sweeps: &["rows", "read-fraction"],
    build: Some(|o| build_kind(SaltMicroKind::ReadWrite, o)),
    build_for: None,
    schema: None,
    analysis: None,
    sim: None,
};

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn micro(kind: SaltMicroKind, opts: SaltMicroOptions) -> SaltMicro {
        SaltMicro::new(kind, opts, false).unwrap()
    }

    fn rows_of(t: &TxnRequest) -> Vec<u64> {
        t.args.iter().map(|v| v.as_int().unwrap() as u64).collect()
    }

    #[test]
    fn contention_transactions_update_five_distinct_rows_in_ascending_order() {
        let w = micro(SaltMicroKind::Contention, SaltMicroOptions { rows: 7, ..SaltMicroOptions::DEFAULT });
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for _ in 0..200 {
            let t = w.generate(&mut rng);
            assert_eq!((t.kind, t.procedure), (KIND_UPDATE, UPDATE_5_PROCEDURE));
            let rows = rows_of(&t);
            assert_eq!(rows.len(), CONTENTION_OPS);
            assert!(rows.windows(2).all(|p| p[0] < p[1]), "distinct and ascending: {rows:?}");
            assert!(rows.iter().all(|r| *r < 7));
        }
        assert!((w.contention_ratio() - 5.0 / 7.0).abs() < 1e-12);
        assert!(w.describe().contains("contention_ratio=0.7143"), "{}", w.describe());
    }

    #[test]
    fn position_puts_the_one_hot_update_after_k_cold_ones_follow() {
        for after in 0..=AFTER_MAX {
            let opts = SaltMicroOptions { after, cold_rows: 50, ..SaltMicroOptions::DEFAULT };
            let w = micro(SaltMicroKind::Position, opts);
            let mut rng = ChaCha8Rng::seed_from_u64(u64::from(after));
            for _ in 0..50 {
                let t = w.generate(&mut rng);
                assert_eq!(t.procedure, UPDATE_10_PROCEDURE);
                let rows = rows_of(&t);
                assert_eq!(rows.len(), POSITION_OPS);
                let hot: Vec<usize> = (0..rows.len()).filter(|&i| rows[i] < HOT_ROWS).collect();
                assert_eq!(hot, vec![POSITION_OPS - 1 - after as usize], "after={after}: {rows:?}");
                // Exactly K operations follow the hot one, and the cold ones are distinct.
                assert_eq!(rows.len() - 1 - hot[0], after as usize);
                let mut cold: Vec<u64> = rows.iter().copied().filter(|r| *r >= HOT_ROWS).collect();
                assert!(cold.iter().all(|r| *r < HOT_ROWS + 50));
                cold.dedup();
                assert_eq!(cold.len(), POSITION_OPS - 1);
            }
        }
    }

    #[test]
    fn read_write_follows_the_read_fraction() {
        for (fraction, kind, procedure) in [(1.0, KIND_READ, READ_5_PROCEDURE), (0.0, KIND_UPDATE, UPDATE_5_PROCEDURE)]
        {
            let w = micro(
                SaltMicroKind::ReadWrite,
                SaltMicroOptions { read_fraction: fraction, ..SaltMicroOptions::DEFAULT },
            );
            let mut rng = ChaCha8Rng::seed_from_u64(2);
            for _ in 0..50 {
                let t = w.generate(&mut rng);
                assert_eq!((t.kind, t.procedure), (kind, procedure));
                assert!(rows_of(&t).iter().all(|r| *r < 100));
            }
        }
        let w = micro(SaltMicroKind::ReadWrite, SaltMicroOptions::DEFAULT);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let reads = (0..2000).filter(|_| w.generate(&mut rng).kind == KIND_READ).count();
        assert!((800..1200).contains(&reads), "{reads} reads of 2000 at fraction 0.5");
    }

    #[test]
    fn transactions_are_base_procedures_and_setup_is_acid() {
        let mut registry = Registry::new();
        micro(SaltMicroKind::Contention, SaltMicroOptions::DEFAULT).register(&mut registry);
        for name in [UPDATE_5_PROCEDURE, UPDATE_10_PROCEDURE, READ_5_PROCEDURE] {
            assert!(registry.get(name).unwrap().options.base, "{name} must run as a BASE transaction");
        }
        for name in [LOAD_PROCEDURE, CHECK_PROCEDURE] {
            assert!(!registry.get(name).unwrap().options.base, "{name} must run as an ACID transaction");
        }
    }

    #[test]
    fn generation_replays_from_the_seed() {
        for kind in SaltMicroKind::ALL {
            let w = micro(kind, SaltMicroOptions::DEFAULT);
            let run = |seed| {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                (0..20).map(|_| w.generate(&mut rng)).collect::<Vec<_>>()
            };
            assert_eq!(run(3), run(3));
            assert_ne!(run(3), run(4));
        }
    }

    #[test]
    fn names_round_trip_and_bad_options_are_rejected() {
        for kind in SaltMicroKind::ALL {
            assert_eq!(SaltMicroKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(SaltMicroKind::from_name("salt"), None);
        let d = SaltMicroOptions::DEFAULT;
        let bad = |o: SaltMicroOptions| SaltMicro::new(SaltMicroKind::Contention, o, false).err().expect("rejected");
        assert_eq!(bad(SaltMicroOptions { rows: 4, ..d.clone() }), SaltMicroConfigError::Rows(4));
        assert_eq!(bad(SaltMicroOptions { after: 10, ..d.clone() }), SaltMicroConfigError::After(10));
        assert_eq!(bad(SaltMicroOptions { cold_rows: 8, ..d.clone() }), SaltMicroConfigError::ColdRows(8));
        assert_eq!(bad(SaltMicroOptions { read_fraction: -0.1, ..d }), SaltMicroConfigError::ReadFraction(-0.1));
    }
}
