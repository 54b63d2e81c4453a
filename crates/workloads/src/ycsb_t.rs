//! # `ycsb-t`: the transactional YCSB of Omid §V (Fig. 11), with a snapshot-isolation check
//!
//! Omid's YCSB extension: transactions of `n` rows, `n` uniform with mean 8, of three types —
//! *ReadTxn* (all reads), *WriteTxn* (all writes), *ComplexTxn* (half reads, half writes) — in
//! four mixes (`--mix`): `read-only` (all ReadTxn), `write-only` (all WriteTxn), `complex` (all
//! ComplexTxn) and `mixed` (50% ReadTxn, 50% ComplexTxn). Keys are uniform; the row count is
//! ycsb's `--records` (rounded down to even). Run it on `omid` and on `nocc` (`--compare
//! nocc,omid`) for Omid's overhead over the store without transactions.
//!
//! ## Schema and transactions
//!
//! ```text
//!   ycsbt(k int, v int, stamp int, writes int)   key k, partitioned by k
//!   ycsbt_log(id int, seq int, n int)            key (id, seq), partitioned by id
//! ```
//!
//! Rows come in **pairs** `(2p, 2p+1)` (on different partitions whenever there are two or more).
//! A transaction touches `m` distinct pairs, `m` uniform in `1..=7` (so `2m` rows, mean 8). It
//! reads a pair by reading both rows; it writes a pair with two formula updates:
//! `v += d, stamp := id, writes += 1` on `2p` and `v -= d, stamp := id, writes += 1` on `2p+1`,
//! where `id` is the transaction's random 63-bit id and `d` its random amount. A transaction
//! that wrote inserts `ycsbt_log(id, 0, m_w)` (its number of written pairs). A read that finds
//! the two rows of a pair with different stamps inserts `ycsbt_log(id, 1 + i, p)`: a **fractured
//! read** (it saw one of a writer's two writes but not the other). All operations of a
//! transaction are issued before any is awaited (one round, as in ycsb).
//!
//! ## The snapshot-isolation verdict (`verify`)
//!
//! * **no fractured read**: no `ycsbt_log` row with `seq > 0` (a reader sees all or none of a
//!   transaction's writes, and never a dirty or intermediate state);
//! * **no lost update**: `sum(writes) = 2 · sum(n)` over the `seq = 0` log rows — each committed
//!   writer added one to each of its rows, and the log row commits atomically with them, so a
//!   lost update (two writers of a row both committing from the same snapshot) leaves the sum
//!   short; an aborted or indeterminate transaction counts on both sides or on neither;
//! * **atomic pairs**: `sum(v) = 0` and, in the final state, both rows of every pair carry the
//!   same stamp.
//!
//! `--history` records each transaction for Elle's rw-register checker (`litmus_bench::history`):
//! rows are registers whose value is the `stamp` (the writer's unique id), which is why
//! `ycsbt_txn` returns the stamps it read.
//!
//! Write skew cannot show here (every write set covers what it read of a pair); `nocc`, which
//! isolates nothing, fails the first check under concurrency — which is the point of checking.

use crate::setup::{call_idempotent, load_in_batches};
use crate::workload::MicroOp;
use crate::workload::{RunStats, TxnRequest, Workload};
use anyhow::Context as _;
use litmus_client::Client;
use litmus_core::{Catalog, Column, ColumnType, Error, Formula, InvalidInput, Partitioning, TableSchema, Value};
use litmus_protocol::engine::Guarantee;
use litmus_protocol::procedure::ProcResult;
use litmus_protocol::{Ctx, Op, OpResult, Registry};
use rand::seq::index::sample;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::fmt;
use std::str::FromStr;

pub const TABLE: &str = "ycsbt";
pub const LOG_TABLE: &str = "ycsbt_log";
pub const TXN_PROCEDURE: &str = "ycsbt_txn";
pub const LOAD_PROCEDURE: &str = "ycsbt_load";
pub const CHECK_PROCEDURE: &str = "ycsbt_check";
pub const CHECK_LOG_PROCEDURE: &str = "ycsbt_check_log";

pub const KIND_READ: &str = "read";
pub const KIND_WRITE: &str = "write";
pub const KIND_COMPLEX: &str = "complex";

/// Most pairs one transaction touches (`m` is uniform in `1..=PAIRS_PER_TXN_MAX`: mean 4 pairs =
/// 8 rows).
pub const PAIRS_PER_TXN_MAX: usize = 7;
/// Rows one load call writes.
pub const LOAD_BATCH_ROWS: u64 = 500;
/// Rows (or log rows) one check call scans.
pub const CHECK_CHUNK_ROWS: u64 = 2000;
/// Largest write amount `d`.
pub const AMOUNT_MAX: i64 = 1000;

/// Omid §V's four workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    ReadOnly,
    WriteOnly,
    Complex,
    Mixed,
}

impl Mix {
    pub const ALL: [Mix; 4] = [Mix::ReadOnly, Mix::WriteOnly, Mix::Complex, Mix::Mixed];
    pub fn name(self) -> &'static str {
        match self {
            Mix::ReadOnly => "read-only",
            Mix::WriteOnly => "write-only",
            Mix::Complex => "complex",
            Mix::Mixed => "mixed",
        }
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mix {
    type Err = String;
    fn from_str(s: &str) -> Result<Mix, String> {
        Mix::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            let known: Vec<_> = Mix::ALL.iter().map(|m| m.name()).collect();
            format!("unknown mix {s:?} (known: {})", known.join(", "))
        })
    }
}

/// The `--mix` flag of `litmus bench ycsb-t` (rows: ycsb's `--records`).
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct YcsbTOptions {
    /// ycsb-t transaction mix: read-only, write-only, complex (50% reads, 50% writes) or mixed
    /// (half read-only, half complex). basic-ycsb: read-heavy (90% reads) or write-heavy (50%).
    /// Default: complex (ycsb-t), read-heavy (basic-ycsb).
    #[arg(long)]
    pub mix: Option<String>,
}

/// See the module doc.
pub struct YcsbT {
    mix: Mix,
    pairs: u64,
    progress: bool,
}

impl YcsbT {
    pub fn new(opts: YcsbTOptions, records: u64, progress: bool) -> Result<YcsbT, InvalidInput> {
        let pairs = records / 2;
        if pairs < PAIRS_PER_TXN_MAX as u64 {
            return Err(InvalidInput::Config(format!(
                "ycsb-t needs --records >= {} (two rows per pair), got {records}",
                2 * PAIRS_PER_TXN_MAX
            )));
        }
        let mix = opts.mix.as_deref().unwrap_or("complex").parse::<Mix>().map_err(InvalidInput::Config)?;
        Ok(YcsbT { mix, pairs, progress })
    }
}

fn int_arg(args: &[Value], i: usize) -> Result<i64, Error> {
    args.get(i)
        .and_then(Value::as_int)
        .ok_or_else(|| InvalidInput::Config(format!("argument {i}: expected int")).into())
}

fn pairs_arg(args: &[Value], i: usize) -> Result<Vec<i64>, Error> {
    let bytes = args
        .get(i)
        .and_then(Value::as_bytes)
        .ok_or_else(|| InvalidInput::Config(format!("argument {i}: expected bytes")))?;
    if bytes.len() % 4 != 0 {
        return Err(InvalidInput::Config(format!("argument {i}: {} bytes is not a list of u32", bytes.len())).into());
    }
    Ok(bytes.chunks_exact(4).map(|c| i64::from(u32::from_le_bytes(c.try_into().expect("4 bytes")))).collect())
}

fn pack(pairs: &[u64]) -> Value {
    Value::Bytes(pairs.iter().flat_map(|&p| (p as u32).to_le_bytes()).collect())
}

fn stamp_of(result: OpResult, key: i64) -> Result<i64, Error> {
    match result {
        OpResult::Row(Some(row)) => {
            row.get(2).and_then(Value::as_int).ok_or_else(|| Error::Internal(format!("{TABLE} row {key}: bad stamp")))
        }
        OpResult::Row(None) => Err(Error::UserAbort(format!("{TABLE} row {key} is missing"))),
        other => Err(Error::Internal(format!("ycsb-t read returned {other:?}"))),
    }
}

/// `ycsbt_txn(id, reads, writes, d)` -> `[fractured reads, then the stamps read, two per read
/// pair]`: see the module doc.
async fn txn_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let id = int_arg(&args, 0)?;
    let reads = pairs_arg(&args, 1)?;
    let writes = pairs_arg(&args, 2)?;
    let amount = int_arg(&args, 3)?;
    let row = |k: i64| vec![Value::Int(k)];
    let mut pending_reads = Vec::with_capacity(reads.len());
    for &p in &reads {
        let a = ctx.op(Op::Read { table: TABLE.into(), key: row(2 * p) });
        let b = ctx.op(Op::Read { table: TABLE.into(), key: row(2 * p + 1) });
        pending_reads.push((p, a, b));
    }
    let mut pending_writes = Vec::with_capacity(2 * writes.len() + 1);
    for &p in &writes {
        for (k, d) in [(2 * p, amount), (2 * p + 1, -amount)] {
            let updates = vec![
                ("v".to_string(), Formula::Add(Value::Int(d))),
                ("stamp".to_string(), Formula::Assign(Value::Int(id))),
                ("writes".to_string(), Formula::Add(Value::Int(1))),
            ];
            pending_writes.push(ctx.op(Op::Update { table: TABLE.into(), key: row(k), updates }));
        }
    }
    if !writes.is_empty() {
        let log = vec![Value::Int(id), Value::Int(0), Value::Int(writes.len() as i64)];
        pending_writes.push(ctx.op(Op::Insert { table: LOG_TABLE.into(), row: log.into() }));
    }
    let mut fractured = Vec::new();
    let mut stamps = Vec::with_capacity(2 * pending_reads.len());
    for (i, (p, a, b)) in pending_reads.into_iter().enumerate() {
        let (sa, sb) = (stamp_of(a.await?, 2 * p)?, stamp_of(b.await?, 2 * p + 1)?);
        if sa != sb {
            fractured.push((i, p));
        }
        stamps.extend([Value::Int(sa), Value::Int(sb)]);
    }
    for w in pending_writes {
        w.await?;
    }
    for (i, p) in &fractured {
        let log = vec![Value::Int(id), Value::Int(1 + *i as i64), Value::Int(*p)];
        ctx.write(LOG_TABLE, log).await?;
    }
    let mut out = vec![Value::Int(fractured.len() as i64)];
    out.extend(stamps);
    Ok(out)
}

/// `ycsbt_load(start, count)`: rows `start..start+count` with `v = stamp = writes = 0`.
async fn load_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let (start, count) = (int_arg(&args, 0)?, int_arg(&args, 1)?);
    if start < 0 || !(0..=LOAD_BATCH_ROWS as i64).contains(&count) {
        return Err(InvalidInput::Config(format!("{LOAD_PROCEDURE}: bad range {start}+{count}")).into());
    }
    let writes: Vec<_> = (start..start + count)
        .map(|k| {
            ctx.op(Op::Write {
                table: TABLE.into(),
                row: vec![Value::Int(k), Value::Int(0), Value::Int(0), Value::Int(0)].into(),
            })
        })
        .collect();
    for w in writes {
        w.await?;
    }
    Ok(vec![Value::Int(count)])
}

/// `ycsbt_check(start, end)` (even bounds) -> `[rows, sum(v), sum(writes), pairs with two stamps]`.
async fn check_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let (start, end) = (int_arg(&args, 0)?, int_arg(&args, 1)?);
    if start % 2 != 0 || end % 2 != 0 || !(0..=CHECK_CHUNK_ROWS as i64).contains(&(end - start)) {
        return Err(InvalidInput::Config(format!("{CHECK_PROCEDURE}: bad range {start}..{end}")).into());
    }
    let rows = ctx.scan(TABLE, &[Value::Int(start)], Some(&[Value::Int(end)]), (end - start) as u32).await?;
    let int = |r: &[Value], i: usize| r.get(i).and_then(Value::as_int).unwrap_or(i64::MIN / 4);
    let (mut sum_v, mut sum_writes, mut torn) = (0i64, 0i64, 0i64);
    let mut stamps = std::collections::BTreeMap::new();
    for r in &rows {
        sum_v += int(r, 1);
        sum_writes += int(r, 3);
        stamps.insert(int(r, 0), int(r, 2));
    }
    for (&k, &s) in stamps.range(start..end).filter(|(k, _)| *k % 2 == 0) {
        if stamps.get(&(k + 1)) != Some(&s) {
            torn += 1;
        }
    }
    Ok(vec![Value::Int(rows.len() as i64), Value::Int(sum_v), Value::Int(sum_writes), Value::Int(torn)])
}

/// `ycsbt_check_log(id, seq)` -> `[rows, sum(n) of seq = 0 rows, seq > 0 rows, last id, last seq]`
/// over the next `CHECK_CHUNK_ROWS` log rows at or after `(id, seq)`.
async fn check_log_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let (id, seq) = (int_arg(&args, 0)?, int_arg(&args, 1)?);
    let start = [Value::Int(id), Value::Int(seq)];
    let rows = ctx.scan(LOG_TABLE, &start, Some(&[Value::Int(i64::MAX)]), CHECK_CHUNK_ROWS as u32).await?;
    let int = |r: &[Value], i: usize| r.get(i).and_then(Value::as_int).unwrap_or(0);
    let (mut written, mut fractured) = (0i64, 0i64);
    for r in &rows {
        if int(r, 1) == 0 {
            written += int(r, 2);
        } else {
            fractured += 1;
        }
    }
    let last = rows.last().map_or((Value::Null, Value::Null), |r| (r[0].clone(), r[1].clone()));
    Ok(vec![Value::Int(rows.len() as i64), Value::Int(written), Value::Int(fractured), last.0, last.1])
}

pub fn tables() -> Vec<TableSchema> {
    let int = |n: &str| Column::new(n, ColumnType::Int);
    vec![
        TableSchema::new(
            TABLE,
            vec![int("k"), int("v"), int("stamp"), int("writes")],
            &["k"],
            Partitioning::KeyPrefix { prefix_len: 1 },
        ),
        TableSchema::new(
            LOG_TABLE,
            vec![int("id"), int("seq"), int("n")],
            &["id", "seq"],
            Partitioning::KeyPrefix { prefix_len: 1 },
        ),
    ]
}

impl Workload for YcsbT {
    fn name(&self) -> &'static str {
        "ycsb-t"
    }

    fn describe(&self) -> String {
        format!("mix={} rows={} pairs/txn=1..={PAIRS_PER_TXN_MAX} (mean 8 rows)", self.mix, 2 * self.pairs)
    }

    fn catalog(&self) -> Catalog {
        let mut c = Catalog::new();
        for t in tables() {
            c.add(t);
        }
        c
    }

    fn register(&self, registry: &mut Registry) {
        use ColumnType::{Bytes, Int};
        registry.register(TXN_PROCEDURE, vec![Int, Bytes, Bytes, Int], txn_body);
        registry.register(LOAD_PROCEDURE, vec![Int, Int], load_body);
        registry.register(CHECK_PROCEDURE, vec![Int, Int], check_body);
        registry.register(CHECK_LOG_PROCEDURE, vec![Int, Int], check_log_body);
    }

    fn prepare(&self, clients: &mut dyn FnMut() -> Result<Client, Error>) -> anyhow::Result<()> {
        let args = |start: u64, count: u64| vec![Value::Int(start as i64), Value::Int(count as i64)];
        load_in_batches(clients, 2 * self.pairs, LOAD_BATCH_ROWS, self.progress, LOAD_PROCEDURE, &args)
    }

    fn generate(&self, rng: &mut ChaCha8Rng) -> TxnRequest {
        let kind = match self.mix {
            Mix::ReadOnly => KIND_READ,
            Mix::WriteOnly => KIND_WRITE,
            Mix::Complex => KIND_COMPLEX,
            Mix::Mixed if rng.gen_bool(0.5) => KIND_READ,
            Mix::Mixed => KIND_COMPLEX,
        };
        let m = rng.gen_range(1..=PAIRS_PER_TXN_MAX);
        let pairs: Vec<u64> = sample(rng, self.pairs as usize, m).into_iter().map(|p| p as u64).collect();
        let reads = match kind {
            KIND_READ => m,
            KIND_WRITE => 0,
            _ => (m + usize::from(rng.gen_bool(0.5))) / 2,
        };
        let id = rng.gen_range(1..i64::MAX);
        let amount = rng.gen_range(1..=AMOUNT_MAX);
        let args = vec![Value::Int(id), pack(&pairs[..reads]), pack(&pairs[reads..]), Value::Int(amount)];
        TxnRequest { kind, procedure: TXN_PROCEDURE, args }
    }

    fn mix(&self) -> Option<crate::mix::MixSpec> {
        let kinds: &[(&'static str, u32)] = match self.mix {
            Mix::ReadOnly => &[(KIND_READ, 1)],
            Mix::WriteOnly => &[(KIND_WRITE, 1)],
            Mix::Complex => &[(KIND_COMPLEX, 1)],
            Mix::Mixed => &[(KIND_READ, 1), (KIND_COMPLEX, 1)],
        };
        Some(crate::mix::MixSpec::defined_shares(kinds.iter().copied()))
    }

    fn needs_isolation(&self) -> Option<(Guarantee, &'static str)> {
        Some((Guarantee::SnapshotIsolation, "verify checks snapshot isolation (no fractured read, no lost update)"))
    }

    fn records_history(&self) -> bool {
        true
    }

    /// Registers are rows and their value the `stamp` (the writer's unique id; 0, the loaded
    /// value, is `nil`): `[:r k stamp]` per row of a read pair, `[:w k id]` per written row.
    fn history(&self, req: &TxnRequest, result: Option<&[Value]>) -> Result<Vec<MicroOp>, String> {
        let args = &req.args;
        let (id, reads, writes) = match (int_arg(args, 0), pairs_arg(args, 1), pairs_arg(args, 2)) {
            (Ok(id), Ok(r), Ok(w)) => (id, r, w),
            _ => return Err(format!("{TXN_PROCEDURE}: malformed arguments {args:?}")),
        };
        let read_keys = reads.iter().flat_map(|&p| [2 * p, 2 * p + 1]);
        let stamps: Vec<Option<i64>> = match result {
            None => vec![None; 2 * reads.len()],
            Some(out) if out.len() == 1 + 2 * reads.len() => out[1..]
                .iter()
                .map(|v| v.as_int().map(|s| (s != 0).then_some(s)))
                .collect::<Option<_>>()
                .ok_or_else(|| format!("{TXN_PROCEDURE} returned a malformed result {out:?}"))?,
            Some(out) => {
                return Err(format!("{TXN_PROCEDURE} returned {} values for {} read pairs", out.len(), reads.len()))
            }
        };
        let mut ops: Vec<MicroOp> = read_keys.zip(stamps).map(|(key, value)| MicroOp::Read { key, value }).collect();
        ops.extend(writes.iter().flat_map(|&p| [2 * p, 2 * p + 1]).map(|key| MicroOp::Write { key, value: id }));
        Ok(ops)
    }

    fn verify(&self, client: &mut Client, stats: &RunStats) -> anyhow::Result<String> {
        let mut call = |procedure: &str, args: Vec<Value>| call_idempotent(client, procedure, args);
        let tally = Tally::collect(2 * self.pairs, &mut call)?;
        let violations = tally.violations(2 * self.pairs);
        let all = stats.total_all();
        let abort_rate = all.aborts as f64 / (all.committed + all.aborts).max(1) as f64;
        if !violations.is_empty() {
            anyhow::bail!(
                "snapshot isolation violated: {}; abort rate {:.2}%",
                violations.join("; "),
                100.0 * abort_rate
            );
        }
        Ok(format!(
            "snapshot isolation holds: no fractured read, no lost update ({} pairs written by committed \
             transactions, {} log rows), every pair atomic; abort rate {:.2}% ({} aborted attempts, {} commits)",
            tally.written,
            tally.logged,
            100.0 * abort_rate,
            all.aborts,
            all.committed
        ))
    }
}

/// How [`Tally::collect`] calls a check procedure (retrying as its caller sees fit).
pub type CheckCall<'a> = dyn FnMut(&str, Vec<Value>) -> Result<Vec<Value>, Error> + 'a;

/// What `verify` reads back: every row (`ycsbt_check`, in chunks) and every log row
/// (`ycsbt_check_log`). Shared by the bench and the simulator ([`crate::ycsb_t_sim`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub rows: i64,
    pub sum_v: i64,
    pub sum_writes: i64,
    pub torn: i64,
    /// `sum(n)` over the `seq = 0` log rows: pairs written by committed transactions.
    pub written: i64,
    pub fractured: i64,
    pub logged: i64,
}

/// Field `i` of a check procedure's result, which must be an integer: a malformed result is an
/// error, never a silent zero (a zero would pass the check without checking).
fn check_field(procedure: &str, out: &[Value], i: usize) -> anyhow::Result<i64> {
    out.get(i).and_then(Value::as_int).ok_or_else(|| anyhow::anyhow!("{procedure} returned a malformed result {out:?}"))
}

impl Tally {
    /// Reads every row and log row through `call` (which retries as its caller sees fit).
    pub fn collect(records: u64, call: &mut CheckCall<'_>) -> anyhow::Result<Tally> {
        let mut t = Tally::default();
        let mut start = 0;
        while start < records {
            let end = (start + CHECK_CHUNK_ROWS).min(records);
            let out = call(CHECK_PROCEDURE, vec![Value::Int(start as i64), Value::Int(end as i64)])
                .with_context(|| format!("check rows {start}..{end}"))?;
            let get = |i: usize| check_field(CHECK_PROCEDURE, &out, i);
            t.rows += get(0)?;
            t.sum_v += get(1)?;
            t.sum_writes += get(2)?;
            t.torn += get(3)?;
            start = end;
        }
        let (mut id, mut seq) = (0i64, 0i64);
        loop {
            let out = call(CHECK_LOG_PROCEDURE, vec![Value::Int(id), Value::Int(seq)]).context("check the log")?;
            let get = |i: usize| check_field(CHECK_LOG_PROCEDURE, &out, i);
            t.logged += get(0)?;
            t.written += get(1)?;
            t.fractured += get(2)?;
            if get(0)? < CHECK_CHUNK_ROWS as i64 {
                break;
            }
            (id, seq) = (get(3)?, get(4)? + 1);
        }
        Ok(t)
    }

    /// The snapshot-isolation verdict of the module doc: empty when it holds.
    pub fn violations(&self, records: u64) -> Vec<String> {
        let mut violations = Vec::new();
        if self.rows != records as i64 {
            violations.push(format!("expected {records} rows, found {}", self.rows));
        }
        if self.fractured > 0 {
            violations.push(format!("{} fractured reads (a pair read half-written)", self.fractured));
        }
        if self.sum_writes != 2 * self.written {
            violations.push(format!(
                "sum(writes) = {}, committed writers wrote {}: lost or phantom updates",
                self.sum_writes,
                2 * self.written
            ));
        }
        if self.sum_v != 0 || self.torn > 0 {
            violations.push(format!(
                "sum(v) = {} (expected 0), {} pairs with two stamps: a writer was not atomic",
                self.sum_v, self.torn
            ));
        }
        violations
    }
}

/// `--step-cost-us` of a ycsb-t simulation.
const SIM_STEP_COST_US: u64 = 20;

/// `ycsb-t` in the workload registry ([`crate::ALL`]).
pub const DEF: crate::WorkloadDef = crate::WorkloadDef {
    name: "ycsb-t",
    about: "Omid §V's transactional YCSB (four mixes), checked for snapshot isolation",
    sweeps: &[],
    build: Some(|o| Ok(Box::new(YcsbT::new(o.ycsb_t.clone(), o.ycsb.records, o.progress)?))),
    build_for: None,
    schema: Some(|catalog, registry| {
        let ycsb_t = YcsbT::new(YcsbTOptions { mix: None }, crate::ycsb::YcsbOptions::default().records, false)
            .expect("default options are valid");
        catalog.merge(&ycsb_t.catalog());
        ycsb_t.register(registry);
    }),
    analysis: None,
    sim: Some(crate::SimDef {
        needs: Some((Guarantee::SnapshotIsolation, "its check is snapshot isolation")),
        // Every third seed runs a one-node cluster.
        nodes: |seed| if seed % 3 == 0 { 1 } else { 3 },
        step_cost_us: SIM_STEP_COST_US,
        run: |run, cfg| {
            let nodes = run.topology.nodes;
            Ok(crate::ycsb_t_sim::simulate_in(run.engine, run.topology, cfg, run.rows).map(|(r, d)| {
                let written = d.tally.as_ref().map_or(0, |t| t.written);
                format!(
                    "{r} | nodes {nodes} | ycsb-t commits {} failed {} | pairs written {written}",
                    d.committed, d.failed
                )
            }))
        },
    }),
};

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn mixes_follow_the_paper() {
        for mix in Mix::ALL {
            let w = YcsbT::new(YcsbTOptions { mix: Some(mix.name().into()) }, 1000, false).unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(7);
            let (mut rows, mut reads, mut writes) = (0usize, 0usize, 0usize);
            for _ in 0..4000 {
                let t = w.generate(&mut rng);
                let (r, wr) = (pairs_arg(&t.args, 1).unwrap().len(), pairs_arg(&t.args, 2).unwrap().len());
                assert!((1..=PAIRS_PER_TXN_MAX).contains(&(r + wr)));
                rows += 2 * (r + wr);
                reads += r;
                writes += wr;
                match mix {
                    Mix::ReadOnly => assert_eq!(t.kind, KIND_READ),
                    Mix::WriteOnly => assert_eq!(t.kind, KIND_WRITE),
                    Mix::Complex => assert_eq!(t.kind, KIND_COMPLEX),
                    Mix::Mixed => assert!(t.kind == KIND_READ || t.kind == KIND_COMPLEX),
                }
            }
            let mean = rows as f64 / 4000.0;
            assert!((7.6..8.4).contains(&mean), "{mix}: mean size {mean}");
            let read_share = reads as f64 / (reads + writes) as f64;
            let expected = match mix {
                Mix::ReadOnly => 1.0,
                Mix::WriteOnly => 0.0,
                Mix::Complex => 0.5,
                Mix::Mixed => 0.75,
            };
            assert!((read_share - expected).abs() < 0.05, "{mix}: read share {read_share}");
        }
        assert!("bogus".parse::<Mix>().is_err());
        assert!(YcsbT::new(YcsbTOptions { mix: Some("complex".into()) }, 4, false).is_err());
        assert!(YcsbT::new(YcsbTOptions { mix: Some("read-heavy".into()) }, 1000, false).is_err());
    }
}
