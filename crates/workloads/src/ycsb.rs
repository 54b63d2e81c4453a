//! # YCSB: the Yahoo! Cloud Serving Benchmark, as transactions
//!
//! One table of `records` rows, keys `0..records`, and a mix of read and update transactions
//! over keys drawn uniformly or from a (scrambled) Zipfian distribution. With the defaults —
//! `--read-ratio 0.5 --distribution zipfian --txn-size 1` — it is YCSB workload A; `0.95` is
//! workload B and `1.0` workload C. `--txn-size n` makes every transaction touch `n` distinct
//! keys, as Deneva's multi-request YCSB does, so that most transactions span partitions.
//!
//! ## Schema
//!
//! ```text
//!   usertable(ycsb_key int, field0 bytes, field1 bytes, ycsb_updates int)
//!   primary key ycsb_key, partitioned by it (key k lives on partition k mod P)
//! ```
//!
//! Every field value starts with its row's key (8 bytes, little endian), then filler up to
//! `--field-size` bytes. `ycsb_updates` counts the updates a row received.
//!
//! ## Transactions
//!
//! A transaction is read-only with probability `read_ratio`, otherwise update-only (Deneva's
//! per-transaction write choice): a read transaction reads `n` whole rows, an update
//! transaction writes `n` rows with one formula update each,
//! `field0 := value, ycsb_updates += 1` (a blind write: no read first).
//!
//! Procedures take fixed parameter lists, so there is one procedure per transaction size,
//! `ycsb_txn_1` ..= `ycsb_txn_16` ([`TXN_SIZE_MAX`]), with parameters
//! `(key_1 int, value_1 bytes, ..., key_n int, value_n bytes)`: `value_i = NULL` reads key `i`,
//! a byte string writes it. The keys stay plain arguments (not packed into one blob), so the
//! read and write sets are visible in the call. A procedure issues all `n` operations before it
//! awaits any (one round of messages per transaction, as a one-shot stored procedure does); a
//! read that finds no row aborts the transaction ([`litmus_core::Error::UserAbort`]).
//!
//! Loading uses `ycsb_load(start, count, field_size)`, which writes `count` initial rows
//! ([`LOAD_BATCH_ROWS`] per call, [`crate::setup::LOAD_CLIENTS_MAX`] clients in parallel). It overwrites, so a
//! load retried after a timeout is harmless. `ycsb_check(start, end)` scans a key range and
//! returns `[rows, sum(ycsb_updates), bad_rows, first_bad_key]` for [`Ycsb::verify`].
//!
//! ## One-round form
//!
//! On engines that run one-round transactions only (`granola`, `granola-locking`, `sinfonia`)
//! the same transactions run as one-round procedures ([`litmus_protocol::fragment`]):
//! `ycsb_txn_n_1r` plans one fragment per key, `ycsb_op_frag(key, value)`, which is the body
//! above on one key. Reads and blind updates never abort on a partition's own data once the
//! table is loaded, so the class is *independent* (Granola §2); a single-key transaction is
//! single-partition. Loading and the check run the same way, one fragment per key.
//!
//! ## Invariant (checked by `verify`)
//!
//! With `U` committed update transactions and `I` indeterminate ones (user aborts and errors,
//! see [`mod@crate::workload`]), each touching `n` keys:
//!
//! * exactly `records` rows exist in `0..records`, and every field carries its own row's key
//!   (no write landed on the wrong row, no row lost or torn);
//! * `n·U <= sum(ycsb_updates) <= n·(U + I)`: no committed update was lost and nothing was
//!   applied that nobody asked for (or twice);
//! * no transaction found a row missing (no user aborts).
//!
//! ## Not implemented
//!
//! Inserts, scans and read-modify-write transactions (YCSB workloads D, E, F); the latest
//! distribution; fields other than `field0` are never updated.

use crate::setup::{call_idempotent, load_in_batches};
use crate::workload::{RunStats, TxnRequest, Workload};
use anyhow::Context as _;
use litmus_client::Client;
use litmus_core::schema::fnv1a;
use litmus_core::{
    limits, Catalog, Column, ColumnType, Error, Formula, InvalidInput, Partitioning, Row, TableSchema, Value,
};
use litmus_protocol::fragment::{FragmentCall, OneRoundClass};
use litmus_protocol::procedure::ProcResult;
use litmus_protocol::{Ctx, Op, OpResult, Registry};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};
use serde::Serialize;

pub const TABLE: &str = "usertable";
pub const KEY_COLUMN: &str = "ycsb_key";
/// Field columns per row (`field0`, `field1`). Fixed so that the schema does not depend on
/// options and `litmus server` can register it up front.
pub const FIELDS: usize = 2;
pub const FIELD_COLUMNS: [&str; FIELDS] = ["field0", "field1"];
pub const UPDATES_COLUMN: &str = "ycsb_updates";

pub const KIND_READ: &str = "read";
pub const KIND_UPDATE: &str = "update";

/// Largest number of keys one transaction touches.
pub const TXN_SIZE_MAX: usize = 16;
/// `TXN_PROCEDURES[n - 1]` runs a transaction over `n` keys.
pub const TXN_PROCEDURES: [&str; TXN_SIZE_MAX] = [
    "ycsb_txn_1",
    "ycsb_txn_2",
    "ycsb_txn_3",
    "ycsb_txn_4",
    "ycsb_txn_5",
    "ycsb_txn_6",
    "ycsb_txn_7",
    "ycsb_txn_8",
    "ycsb_txn_9",
    "ycsb_txn_10",
    "ycsb_txn_11",
    "ycsb_txn_12",
    "ycsb_txn_13",
    "ycsb_txn_14",
    "ycsb_txn_15",
    "ycsb_txn_16",
];
pub const LOAD_PROCEDURE: &str = "ycsb_load";
pub const CHECK_PROCEDURE: &str = "ycsb_check";
/// The one-round form's transactions (Granola §2: independent), one per size like
/// [`TXN_PROCEDURES`], each planned as one [`OP_FRAGMENT`] per key.
pub const TXN_PROCEDURES_1R: [&str; TXN_SIZE_MAX] = [
    "ycsb_txn_1_1r",
    "ycsb_txn_2_1r",
    "ycsb_txn_3_1r",
    "ycsb_txn_4_1r",
    "ycsb_txn_5_1r",
    "ycsb_txn_6_1r",
    "ycsb_txn_7_1r",
    "ycsb_txn_8_1r",
    "ycsb_txn_9_1r",
    "ycsb_txn_10_1r",
    "ycsb_txn_11_1r",
    "ycsb_txn_12_1r",
    "ycsb_txn_13_1r",
    "ycsb_txn_14_1r",
    "ycsb_txn_15_1r",
    "ycsb_txn_16_1r",
];
/// One-round `ycsb_load`: one [`LOAD_FRAGMENT`] per key.
pub const LOAD_PROCEDURE_1R: &str = "ycsb_load_1r";
/// One-round `ycsb_check`: one [`CHECK_FRAGMENT`] per key, each returning a quadruple.
pub const CHECK_PROCEDURE_1R: &str = "ycsb_check_1r";
/// `ycsb_op_frag(key, value)`: one key's read (`value = NULL`) or update, at its partition.
pub const OP_FRAGMENT: &str = "ycsb_op_frag";
/// `ycsb_load_frag(key, 1, field_size)`: one key's initial row.
pub const LOAD_FRAGMENT: &str = "ycsb_load_frag";
/// `ycsb_check_frag(key)`: one key's check quadruple, as `ycsb_check` returns for its range.
pub const CHECK_FRAGMENT: &str = "ycsb_check_frag";

/// Largest table size accepted.
pub const RECORDS_MAX: u64 = 100_000_000;
/// Bytes at the start of every field holding the row's key.
pub const KEY_TAG_BYTES: usize = 8;
/// Largest field size (leaves room for the value's own header within the value limit).
pub const FIELD_SIZE_MAX: usize = limits::VALUE_SIZE_MAX / 2;
/// Rows written by one `ycsb_load` call.
pub const LOAD_BATCH_ROWS: u64 = 100;
/// Most rows `ycsb_load` accepts in one call.
pub const LOAD_BATCH_ROWS_MAX: i64 = 1_000;
/// Keys checked by one `ycsb_check` call (also its most rows per call).
pub const CHECK_CHUNK_ROWS: u64 = 1_000;
/// Draws from the key distribution before falling back to probing for a distinct key.
pub const DISTINCT_KEY_ATTEMPTS_MAX: u32 = 32;

/// How keys are drawn.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyDistribution {
    /// Every key equally likely.
    Uniform,
    /// Zipfian over key ranks, ranks scrambled over the key space with FNV-1a (YCSB's
    /// ScrambledZipfian), so hot keys spread over partitions.
    Zipfian,
}

/// YCSB settings (the `--records`, `--read-ratio`, ... flags of `litmus bench ycsb`).
#[derive(clap::Args, Clone, Debug, PartialEq, Serialize)]
#[command(next_help_heading = "YCSB options")]
pub struct YcsbOptions {
    /// Rows in usertable (keys 0..records), loaded before the run.
    #[arg(long, default_value_t = YcsbOptions::DEFAULT.records)]
    pub records: u64,

    /// Fraction of transactions that only read; the rest only update. 0.5 is YCSB workload A,
    /// 0.95 workload B, 1.0 workload C.
    #[arg(long = "read-ratio", value_name = "FRACTION", default_value_t = YcsbOptions::DEFAULT.read_ratio)]
    pub read_ratio: f64,

    /// How keys are drawn.
    #[arg(long, value_enum, default_value_t = YcsbOptions::DEFAULT.distribution)]
    pub distribution: KeyDistribution,

    /// Skew θ of the zipfian distribution (YCSB uses 0.99; 0 is uniform over ranks).
    #[arg(long = "zipf-theta", value_name = "THETA", default_value_t = YcsbOptions::DEFAULT.zipf_theta)]
    pub zipf_theta: f64,

    /// Distinct keys each transaction reads or updates (1..=16). Above 1 most transactions span
    /// partitions.
    #[arg(long = "txn-size", value_name = "KEYS", default_value_t = YcsbOptions::DEFAULT.txn_size)]
    pub txn_size: usize,

    /// Bytes in each of the two fields of a row (at least 8: a field starts with its row's key).
    #[arg(long = "field-size", value_name = "BYTES", default_value_t = YcsbOptions::DEFAULT.field_size)]
    pub field_size: usize,
}

impl YcsbOptions {
    pub const DEFAULT: YcsbOptions = YcsbOptions {
        records: 10_000,
        read_ratio: 0.5,
        distribution: KeyDistribution::Zipfian,
        zipf_theta: 0.99,
        txn_size: 1,
        field_size: 100,
    };

    pub fn validate(&self) -> Result<(), YcsbConfigError> {
        use YcsbConfigError::*;
        if self.records == 0 || self.records > RECORDS_MAX {
            return Err(Records(self.records));
        }
        if !(0.0..=1.0).contains(&self.read_ratio) {
            return Err(ReadRatio(self.read_ratio));
        }
        if !self.zipf_theta.is_finite() || self.zipf_theta < 0.0 {
            return Err(ZipfTheta(self.zipf_theta));
        }
        if self.txn_size == 0 || self.txn_size > TXN_SIZE_MAX || self.txn_size as u64 > self.records {
            return Err(TxnSize { txn_size: self.txn_size, records: self.records });
        }
        if self.field_size < KEY_TAG_BYTES || self.field_size > FIELD_SIZE_MAX {
            return Err(FieldSize(self.field_size));
        }
        Ok(())
    }
}

impl Default for YcsbOptions {
    fn default() -> Self {
        YcsbOptions::DEFAULT
    }
}

/// Rejected YCSB settings.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum YcsbConfigError {
    #[error("--records must be in 1..={RECORDS_MAX}, got {0}")]
    Records(u64),
    #[error("--read-ratio must be in [0, 1], got {0}")]
    ReadRatio(f64),
    #[error("--zipf-theta must be finite and >= 0, got {0}")]
    ZipfTheta(f64),
    #[error("--txn-size must be in 1..={TXN_SIZE_MAX} and at most --records ({records}), got {txn_size}")]
    TxnSize { txn_size: usize, records: u64 },
    #[error("--field-size must be in {KEY_TAG_BYTES}..={FIELD_SIZE_MAX}, got {0}")]
    FieldSize(usize),
}

/// Draws keys in `0..records`.
#[derive(Clone, Debug)]
pub enum KeyChooser {
    Uniform {
        records: u64,
    },
    /// Zipf over ranks `1..=records`; rank `r` maps to key `fnv1a(r) mod records`.
    Zipfian {
        zipf: Zipf<f64>,
        records: u64,
    },
}

impl KeyChooser {
    pub fn new(distribution: KeyDistribution, records: u64, theta: f64) -> Result<KeyChooser, YcsbConfigError> {
        if records == 0 || records > RECORDS_MAX {
            return Err(YcsbConfigError::Records(records));
        }
        Ok(match distribution {
            KeyDistribution::Uniform => KeyChooser::Uniform { records },
            KeyDistribution::Zipfian => {
                let zipf = Zipf::new(records, theta).map_err(|_| YcsbConfigError::ZipfTheta(theta))?;
                KeyChooser::Zipfian { zipf, records }
            }
        })
    }

    pub fn records(&self) -> u64 {
        match self {
            KeyChooser::Uniform { records } | KeyChooser::Zipfian { records, .. } => *records,
        }
    }

    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        match self {
            KeyChooser::Uniform { records } => rng.gen_range(0..*records),
            KeyChooser::Zipfian { zipf, records } => {
                let rank = (zipf.sample(rng) as u64).clamp(1, *records);
                let key = fnv1a(&rank.to_le_bytes()) % records;
                debug_assert!(key < *records);
                key
            }
        }
    }

    /// `n` distinct keys (`n <= records`). Draws from the distribution, and after
    /// [`DISTINCT_KEY_ATTEMPTS_MAX`] repeats probes upward for a free key, so it always ends.
    pub fn distinct(&self, rng: &mut impl Rng, n: usize) -> Vec<u64> {
        let records = self.records();
        assert!(n as u64 <= records, "{n} distinct keys out of {records}");
        let mut keys = Vec::with_capacity(n);
        while keys.len() < n {
            let mut key = self.sample(rng);
            let mut attempts = 1;
            while keys.contains(&key) && attempts < DISTINCT_KEY_ATTEMPTS_MAX {
                key = self.sample(rng);
                attempts += 1;
            }
            while keys.contains(&key) {
                key = (key + 1) % records;
            }
            keys.push(key);
        }
        keys
    }
}

/// The YCSB workload.
pub struct Ycsb {
    opts: YcsbOptions,
    keys: KeyChooser,
    /// Whether loading may show a progress bar.
    progress: bool,
    /// Whether to run the one-round form (see the module doc).
    one_round: bool,
}

impl Ycsb {
    pub fn new(opts: YcsbOptions, progress: bool) -> Result<Ycsb, YcsbConfigError> {
        opts.validate()?;
        let keys = KeyChooser::new(opts.distribution, opts.records, opts.zipf_theta)?;
        Ok(Ycsb { opts, keys, progress, one_round: false })
    }

    /// The same workload in one-round form (see the module doc), for engines that run
    /// one-round transactions only.
    pub fn with_one_round(mut self) -> Ycsb {
        self.one_round = true;
        self
    }

    pub fn options(&self) -> &YcsbOptions {
        &self.opts
    }
}

/// The content of field `field` of row `key` at load time: the key, then filler.
pub fn initial_field(key: i64, field: usize, field_size: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(field_size);
    v.extend_from_slice(&key.to_le_bytes());
    v.extend((KEY_TAG_BYTES..field_size).map(|j| b'a' + ((key as usize).wrapping_add(field + j) % 26) as u8));
    v
}

fn initial_row(key: i64, field_size: usize) -> Row {
    let mut row = Vec::with_capacity(2 + FIELDS);
    row.push(Value::Int(key));
    row.extend((0..FIELDS).map(|f| Value::Bytes(initial_field(key, f, field_size).into())));
    row.push(Value::Int(0));
    row.into()
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

/// `ycsb_txn_n(key_1, value_1, ..., key_n, value_n)`; see the module doc.
async fn txn_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let mut pending = Vec::with_capacity(args.len() / 2);
    for pair in args.chunks_exact(2) {
        let key = vec![pair[0].clone()];
        let op = match &pair[1] {
            Value::Null => Op::Read { table: TABLE.into(), key },
            Value::Bytes(v) => Op::Update {
                table: TABLE.into(),
                key,
                updates: vec![
                    (FIELD_COLUMNS[0].into(), Formula::Assign(Value::Bytes(v.clone()))),
                    (UPDATES_COLUMN.into(), Formula::Add(Value::Int(1))),
                ],
            },
            other => {
                return Err(InvalidInput::WrongType {
                    what: "ycsb value argument".into(),
                    expected: "bytes or NULL".into(),
                    got: other.type_name(),
                }
                .into())
            }
        };
        // Issued now, awaited below: all operations go out in one round.
        pending.push((pair[0].clone(), ctx.op(op)));
    }
    let mut out = Vec::new();
    for (key, op) in pending {
        match op.await? {
            OpResult::Row(Some(row)) if row.len() > 1 => out.push(row[1].clone()),
            OpResult::Row(_) => return Err(ctx.abort(format!("{TABLE} row {key} is missing"))),
            OpResult::Done => {}
            other => return Err(Error::Internal(format!("ycsb op returned {other:?}"))),
        }
    }
    Ok(out)
}

/// `ycsb_load(start, count, field_size)`: writes the initial rows `start..start+count`.
async fn load_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let (start, count, field_size) = load_args(&args, LOAD_PROCEDURE)?;
    let writes: Vec<_> = (start..start + count)
        .map(|k| ctx.op(Op::Write { table: TABLE.into(), row: initial_row(k, field_size as usize) }))
        .collect();
    for w in writes {
        w.await?;
    }
    Ok(vec![Value::Int(count)])
}

/// The checked `(start, count, field_size)` of a load call.
fn load_args(args: &[Value], procedure: &str) -> Result<(i64, i64, i64), Error> {
    let start = int_arg(args, 0, procedure)?;
    let count = int_arg(args, 1, procedure)?;
    let field_size = int_arg(args, 2, procedure)?;
    let bad = |what: String| -> Error { InvalidInput::Config(format!("{procedure}: {what}")).into() };
    if !(0..=LOAD_BATCH_ROWS_MAX).contains(&count) {
        return Err(bad(format!("count must be in 0..={LOAD_BATCH_ROWS_MAX}, got {count}")));
    }
    if start < 0 || start.checked_add(count).is_none() {
        return Err(bad(format!("bad key range start {start} count {count}")));
    }
    if field_size < KEY_TAG_BYTES as i64 || field_size > FIELD_SIZE_MAX as i64 {
        return Err(bad(format!("field size must be in {KEY_TAG_BYTES}..={FIELD_SIZE_MAX}, got {field_size}")));
    }
    Ok((start, count, field_size))
}

/// Whether a usertable row is well formed for key range `start..end`; returns its key and update
/// count, or `None` for a bad row.
fn check_row(row: &[Value], start: i64, end: i64) -> Option<(i64, i64)> {
    if row.len() != 2 + FIELDS {
        return None;
    }
    let key = row[0].as_int().filter(|k| (start..end).contains(k))?;
    let tag = key.to_le_bytes();
    let fields_ok = row[1..=FIELDS].iter().all(|f| f.as_bytes().is_some_and(|b| b.starts_with(&tag)));
    let updates = row[1 + FIELDS].as_int().filter(|u| *u >= 0)?;
    fields_ok.then_some((key, updates))
}

/// `ycsb_check(start, end)` -> `[rows, sum(ycsb_updates), bad_rows, first_bad_key | NULL]`.
async fn check_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let (start, end) = check_args(&args, CHECK_PROCEDURE)?;
    let span = end - start;
    let rows = ctx.scan(TABLE, &[Value::Int(start)], Some(&[Value::Int(end)]), span as u32).await?;
    let (mut sum, mut bad, mut first_bad) = (0i64, 0i64, Value::Null);
    for row in &rows {
        match check_row(row, start, end) {
            Some((_, updates)) => {
                sum = sum.checked_add(updates).ok_or_else(|| InvalidInput::Overflow("sum(ycsb_updates)".into()))?
            }
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

/// The checked `(start, end)` of a check call: at most [`CHECK_CHUNK_ROWS`] keys.
fn check_args(args: &[Value], procedure: &str) -> Result<(i64, i64), Error> {
    let start = int_arg(args, 0, procedure)?;
    let end = int_arg(args, 1, procedure)?;
    end.checked_sub(start).filter(|s| (0..=CHECK_CHUNK_ROWS as i64).contains(s)).ok_or_else(|| {
        Error::from(InvalidInput::Config(format!(
            "{procedure}: range {start}..{end} must span 0..={CHECK_CHUNK_ROWS} keys"
        )))
    })?;
    Ok((start, end))
}

/// `ycsb_check_frag(key)`: `[rows, ycsb_updates, bad_rows, first_bad_key]` for one key.
async fn check_key_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let key = int_arg(&args, 0, CHECK_FRAGMENT)?;
    let row = match ctx.op(Op::Read { table: TABLE.into(), key: vec![Value::Int(key)] }).await? {
        OpResult::Row(row) => row,
        other => return Err(Error::Internal(format!("ycsb read returned {other:?}"))),
    };
    Ok(match row {
        None => vec![Value::Int(0), Value::Int(0), Value::Int(0), Value::Null],
        Some(row) => match check_row(&row, key, key + 1) {
            Some((_, updates)) => vec![Value::Int(1), Value::Int(updates), Value::Int(0), Value::Null],
            None => vec![Value::Int(1), Value::Int(0), Value::Int(1), row.first().cloned().unwrap_or(Value::Null)],
        },
    })
}

/// A fragment at key `k`'s partition.
fn at_key(fragment: &str, k: i64, args: Vec<Value>) -> FragmentCall {
    FragmentCall::new(fragment, TABLE, vec![Value::Int(k)], args)
}

/// `ycsb_txn_n_1r`: one [`OP_FRAGMENT`] per (key, value) pair.
fn txn_plan(args: &[Value]) -> Result<Vec<FragmentCall>, Error> {
    args.chunks_exact(2).map(|pair| Ok(at_key(OP_FRAGMENT, int_arg(pair, 0, OP_FRAGMENT)?, pair.to_vec()))).collect()
}

/// `ycsb_load_1r(start, count, field_size)`: one [`LOAD_FRAGMENT`] per key.
fn load_plan(args: &[Value]) -> Result<Vec<FragmentCall>, Error> {
    let (start, count, field_size) = load_args(args, LOAD_PROCEDURE_1R)?;
    Ok((start..start + count)
        .map(|k| at_key(LOAD_FRAGMENT, k, vec![Value::Int(k), Value::Int(1), Value::Int(field_size)]))
        .collect())
}

/// `ycsb_check_1r(start, end)`: one [`CHECK_FRAGMENT`] per key.
fn check_plan(args: &[Value]) -> Result<Vec<FragmentCall>, Error> {
    let (start, end) = check_args(args, CHECK_PROCEDURE_1R)?;
    Ok((start..end).map(|k| at_key(CHECK_FRAGMENT, k, vec![Value::Int(k)])).collect())
}

/// The usertable schema.
pub fn table() -> TableSchema {
    let mut columns = vec![Column::new(KEY_COLUMN, ColumnType::Int)];
    columns.extend(FIELD_COLUMNS.iter().map(|f| Column::new(f, ColumnType::Bytes)));
    columns.push(Column::new(UPDATES_COLUMN, ColumnType::Int));
    TableSchema::new(TABLE, columns, &[KEY_COLUMN], Partitioning::KeyPrefix { prefix_len: 1 })
}

impl Workload for Ycsb {
    fn name(&self) -> &'static str {
        "ycsb"
    }

    fn describe(&self) -> String {
        let o = &self.opts;
        let dist = match o.distribution {
            KeyDistribution::Uniform => "uniform".to_string(),
            KeyDistribution::Zipfian => format!("zipfian(θ={})", o.zipf_theta),
        };
        format!(
            "records={} read_ratio={} distribution={dist} txn_size={} fields={FIELDS}x{}B",
            o.records, o.read_ratio, o.txn_size, o.field_size
        )
    }

    fn catalog(&self) -> Catalog {
        let mut c = Catalog::new();
        c.add(table());
        c
    }

    fn register(&self, registry: &mut Registry) {
        for (i, name) in TXN_PROCEDURES.iter().enumerate() {
            let params = (0..=i).flat_map(|_| [ColumnType::Int, ColumnType::Bytes]).collect();
            registry.register(name, params, txn_body);
        }
        registry.register(LOAD_PROCEDURE, vec![ColumnType::Int; 3], load_body);
        registry.register(CHECK_PROCEDURE, vec![ColumnType::Int; 2], check_body);
        // The one-round form, registered always (a server serves every engine's form).
        registry.register_fragment(OP_FRAGMENT, vec![ColumnType::Int, ColumnType::Bytes], txn_body);
        for (i, name) in TXN_PROCEDURES_1R.iter().enumerate() {
            let params = (0..=i).flat_map(|_| [ColumnType::Int, ColumnType::Bytes]).collect();
            let class = if i == 0 { OneRoundClass::Single } else { OneRoundClass::Independent };
            registry.register_one_round(name, params, class, txn_plan);
        }
        registry.register_fragment(LOAD_FRAGMENT, vec![ColumnType::Int; 3], load_body);
        registry.register_one_round(LOAD_PROCEDURE_1R, vec![ColumnType::Int; 3], OneRoundClass::Independent, load_plan);
        registry.register_fragment(CHECK_FRAGMENT, vec![ColumnType::Int], check_key_body);
        registry.register_one_round(
            CHECK_PROCEDURE_1R,
            vec![ColumnType::Int; 2],
            OneRoundClass::Independent,
            check_plan,
        );
    }

    fn prepare(&self, clients: &mut dyn FnMut() -> Result<Client, Error>) -> anyhow::Result<()> {
        let field_size = self.opts.field_size as i64;
        let args =
            |start: u64, count: u64| vec![Value::Int(start as i64), Value::Int(count as i64), Value::Int(field_size)];
        let procedure = if self.one_round { LOAD_PROCEDURE_1R } else { LOAD_PROCEDURE };
        load_in_batches(clients, self.opts.records, LOAD_BATCH_ROWS, self.progress, procedure, &args)
    }

    fn generate(&self, rng: &mut ChaCha8Rng) -> TxnRequest {
        let n = self.opts.txn_size;
        let read = rng.gen_bool(self.opts.read_ratio);
        let keys = self.keys.distinct(rng, n);
        let mut args = Vec::with_capacity(2 * n);
        for key in keys {
            let key = key as i64;
            args.push(Value::Int(key));
            if read {
                args.push(Value::Null);
            } else {
                let mut v = vec![0u8; self.opts.field_size];
                v[..KEY_TAG_BYTES].copy_from_slice(&key.to_le_bytes());
                rng.fill(&mut v[KEY_TAG_BYTES..]);
                args.push(Value::Bytes(v.into()));
            }
        }
        let procedure = if self.one_round { TXN_PROCEDURES_1R[n - 1] } else { TXN_PROCEDURES[n - 1] };
        TxnRequest { kind: if read { KIND_READ } else { KIND_UPDATE }, procedure, args }
    }

    fn verify(&self, client: &mut Client, stats: &RunStats) -> anyhow::Result<String> {
        let records = self.opts.records;
        let (mut rows, mut sum, mut bad, mut first_bad) = (0u64, 0u64, 0u64, None);
        let mut start = 0;
        while start < records {
            let end = (start + CHECK_CHUNK_ROWS).min(records);
            let procedure = if self.one_round { CHECK_PROCEDURE_1R } else { CHECK_PROCEDURE };
            let out = call_idempotent(client, procedure, vec![Value::Int(start as i64), Value::Int(end as i64)])
                .with_context(|| format!("check rows {start}..{end}"))?;
            // One quadruple for the range, or (one-round form) one per key.
            if out.is_empty() || out.len() % 4 != 0 {
                anyhow::bail!("{procedure} returned {out:?}, expected [rows, sum, bad_rows, first_bad_key] quadruples");
            }
            for quad in out.chunks_exact(4) {
                let count = |i: usize| quad[i].as_int().and_then(|v| u64::try_from(v).ok());
                let (Some(r), Some(s), Some(b)) = (count(0), count(1), count(2)) else {
                    anyhow::bail!("{procedure} returned {out:?}, expected [rows, sum, bad_rows, first_bad_key]");
                };
                rows += r;
                sum += s;
                bad += b;
                if first_bad.is_none() && b > 0 {
                    first_bad = Some(quad[3].clone());
                }
            }
            start = end;
        }

        let n = self.opts.txn_size as u64;
        let updates = stats.total_of(KIND_UPDATE);
        let (low, high) = (n * updates.committed, n * (updates.committed + updates.indeterminate()));
        let user_aborts = stats.total_all().user_aborts;
        let mut violations = Vec::new();
        if rows != records {
            violations.push(format!("expected {records} rows in {TABLE}, found {rows}"));
        }
        if bad > 0 {
            let first = first_bad.map_or("?".to_string(), |k| k.to_string());
            violations.push(format!("{bad} rows malformed or carrying another row's key (first: key {first})"));
        }
        if !(low..=high).contains(&sum) {
            violations.push(format!(
                "sum({UPDATES_COLUMN}) = {sum} outside [{low}, {high}] ({} committed and {} indeterminate update \
                 transactions, {n} key(s) each)",
                updates.committed,
                updates.indeterminate()
            ));
        }
        if user_aborts > 0 {
            violations.push(format!("{user_aborts} transactions found a row missing"));
        }
        if !violations.is_empty() {
            anyhow::bail!(violations.join("; "));
        }
        Ok(format!(
            "{rows} rows intact; sum({UPDATES_COLUMN}) = {sum} within [{low}, {high}] ({} committed update \
             transactions, {n} key(s) each)",
            updates.committed
        ))
    }
}

/// `ycsb` in the workload registry ([`crate::ALL`]).
pub const DEF: crate::WorkloadDef = crate::WorkloadDef {
    name: "ycsb",
    about: "YCSB A/B/C over uniform or zipfian keys, multi-key transactions; update-counter invariant",
    sweeps: &["records", "read-ratio", "txn-size", "zipf-theta"],
    build: Some(|o| Ok(Box::new(Ycsb::new(o.ycsb.clone(), o.progress)?))),
    // An engine that runs one-round transactions only gets YCSB's one-round form.
    build_for: Some(|o, engine| {
        let w = Ycsb::new(o.ycsb.clone(), o.progress)?;
        Ok(if engine.capabilities().interactive { Box::new(w) } else { Box::new(w.with_one_round()) })
    }),
    schema: Some(|catalog, registry| {
        let ycsb = Ycsb::new(YcsbOptions::default(), false).expect("default options are valid");
        catalog.merge(&ycsb.catalog());
        ycsb.register(registry);
    }),
    analysis: Some(crate::analysis::ycsb_spec),
    sim: None,
};

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn one_round_plans_route_one_fragment_per_key_and_reject_bad_ranges() {
        let value = Value::Bytes(vec![0u8; 8].into());
        let plan = txn_plan(&[Value::Int(3), Value::Null, Value::Int(7), value]).unwrap();
        let keys: Vec<_> = plan.iter().map(|f| (f.fragment.as_str(), f.route_key.clone())).collect();
        assert_eq!(keys, [(OP_FRAGMENT, vec![Value::Int(3)]), (OP_FRAGMENT, vec![Value::Int(7)])]);
        assert_eq!(load_plan(&[Value::Int(10), Value::Int(5), Value::Int(16)]).unwrap().len(), 5);
        assert_eq!(check_plan(&[Value::Int(10), Value::Int(15)]).unwrap().len(), 5);
        // Bad input is a typed error, as in the op-by-op form.
        let too_many = [Value::Int(0), Value::Int(LOAD_BATCH_ROWS_MAX + 1), Value::Int(16)];
        assert!(matches!(load_plan(&too_many), Err(Error::Invalid(_))));
        assert!(matches!(load_plan(&[Value::Int(0), Value::Int(1), Value::Int(2)]), Err(Error::Invalid(_))));
        let wide = [Value::Int(0), Value::Int(CHECK_CHUNK_ROWS as i64 + 1)];
        assert!(matches!(check_plan(&wide), Err(Error::Invalid(_))));
        assert!(matches!(txn_plan(&[Value::Null, Value::Null]), Err(Error::Invalid(_))));
    }

    #[test]
    fn procedure_names_match_their_sizes() {
        for (i, name) in TXN_PROCEDURES.iter().enumerate() {
            assert_eq!(*name, format!("ycsb_txn_{}", i + 1));
        }
    }

    #[test]
    fn zipfian_keys_are_in_range_and_skewed() {
        let records = 10_000u64;
        let samples = 100_000u64;
        let chooser = KeyChooser::new(KeyDistribution::Zipfian, records, 0.99).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut hits = vec![0u64; records as usize];
        for _ in 0..samples {
            let k = chooser.sample(&mut rng);
            assert!(k < records, "key {k} out of range");
            hits[k as usize] += 1;
        }
        let uniform_mean = samples / records;
        let top = *hits.iter().max().unwrap();
        assert!(top > 100 * uniform_mean, "top key hit {top} times, uniform mean {uniform_mean}");
        // Scrambling spreads the hottest keys over partitions rather than onto key 0, 1, 2...
        let mut hottest: Vec<usize> = (0..records as usize).collect();
        hottest.sort_by_key(|&k| std::cmp::Reverse(hits[k]));
        let partitions: std::collections::BTreeSet<_> = hottest[..16].iter().map(|k| k % 4).collect();
        assert!(partitions.len() > 1, "the 16 hottest keys all on one of 4 partitions");

        // The negative space: uniform keys are not skewed.
        let chooser = KeyChooser::new(KeyDistribution::Uniform, records, 0.99).unwrap();
        let mut hits = vec![0u64; records as usize];
        for _ in 0..samples {
            hits[chooser.sample(&mut rng) as usize] += 1;
        }
        assert!(*hits.iter().max().unwrap() < 5 * uniform_mean);
    }

    #[test]
    fn transactions_touch_distinct_keys_and_follow_the_read_ratio() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        // A tiny, very skewed table forces the distinct-key fallback.
        let opts = YcsbOptions { records: 16, txn_size: 16, zipf_theta: 3.0, ..YcsbOptions::DEFAULT };
        let w = Ycsb::new(opts, false).unwrap();
        for _ in 0..200 {
            let t = w.generate(&mut rng);
            assert_eq!(t.procedure, "ycsb_txn_16");
            assert_eq!(t.args.len(), 32);
            let mut keys: Vec<i64> = t.args.iter().step_by(2).map(|k| k.as_int().unwrap()).collect();
            keys.sort();
            keys.dedup();
            assert_eq!(keys.len(), 16);
            assert!(keys.iter().all(|k| (0..16).contains(k)));
        }
        for (ratio, kind) in [(1.0, KIND_READ), (0.0, KIND_UPDATE)] {
            let w = Ycsb::new(YcsbOptions { read_ratio: ratio, ..YcsbOptions::DEFAULT }, false).unwrap();
            for _ in 0..50 {
                let t = w.generate(&mut rng);
                assert_eq!(t.kind, kind);
                let key = t.args[0].as_int().unwrap();
                match &t.args[1] {
                    Value::Null => assert_eq!(kind, KIND_READ),
                    Value::Bytes(v) => {
                        assert_eq!(v.len(), YcsbOptions::DEFAULT.field_size);
                        assert!(v.starts_with(&key.to_le_bytes()), "an update carries its key");
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
    }

    #[test]
    fn generation_replays_from_the_seed() {
        let w = Ycsb::new(YcsbOptions::DEFAULT, false).unwrap();
        let run = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..20).map(|_| w.generate(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn bad_options_are_rejected() {
        let bad = |o: YcsbOptions| Ycsb::new(o, false).err().expect("rejected");
        let d = YcsbOptions::DEFAULT;
        assert_eq!(bad(YcsbOptions { records: 0, ..d.clone() }), YcsbConfigError::Records(0));
        assert_eq!(bad(YcsbOptions { read_ratio: 1.5, ..d.clone() }), YcsbConfigError::ReadRatio(1.5));
        assert!(matches!(bad(YcsbOptions { txn_size: 17, ..d.clone() }), YcsbConfigError::TxnSize { .. }));
        assert!(matches!(bad(YcsbOptions { records: 2, txn_size: 3, ..d.clone() }), YcsbConfigError::TxnSize { .. }));
        assert_eq!(bad(YcsbOptions { field_size: 4, ..d.clone() }), YcsbConfigError::FieldSize(4));
        assert!(matches!(bad(YcsbOptions { zipf_theta: f64::NAN, ..d }), YcsbConfigError::ZipfTheta(_)));
    }

    #[test]
    fn check_row_accepts_loaded_rows_and_rejects_foreign_fields() {
        let row = initial_row(5, 16);
        assert_eq!(check_row(&row, 0, 10), Some((5, 0)));
        assert_eq!(check_row(&row, 6, 10), None, "key outside the range");
        let mut foreign = row.clone();
        foreign[1] = Value::Bytes(initial_field(6, 0, 16).into());
        assert_eq!(check_row(&foreign, 0, 10), None);
        let mut negative = row;
        negative[3] = Value::Int(-1);
        assert_eq!(check_row(&negative, 0, 10), None);
    }
}
