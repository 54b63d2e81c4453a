//! # `basic-ycsb`: BASIC §V's YCSB over column-partitioned items, with the inconsistency
//! detector of Table V
//!
//! Items have a key and [`FIELDS`] data columns, column-partitioned evenly over the partitions:
//! partition `g` holds the *column group* `g` of every item as the row `(g, k)` of
//! `basic_item` (partitioned by `g`). Field `i` lives in group `i · P / 24`. Each operation
//! reads or writes a random set of fields (1..=24, uniform) of one item (`--records` items,
//! `--distribution uniform|zipfian`), touching the groups of those fields: a multi-partition
//! operation, run as one call. `--mix read-heavy` is 90% reads, `write-heavy` 50%.
//!
//! ## The detector (Table V)
//!
//! Besides its fields, every group row carries counters `c0..c23`: a write touching groups `G`
//! adds 1 to `c_h` of group `g` for every other `h` in `G` — the formula lists of the parts,
//! summarised: `c_h` on `g` counts the writes shared with `h` whose formula `g` applied. A read
//! of groups `G` sees what each part observed; it is **inconsistent** when two parts disagree
//! on what they share: `c_h` on `g` ≠ `c_g` on `h` (some write reached one part of the read and
//! not the other). `inconsistency` = inconsistent reads / reads. `base` (apply on arrival) shows
//! it under load; `basic` must show exactly 0.
//!
//! `verify` reads every group of every item once the run is over and checks the counters of
//! each item agree pairwise (the columns of an item never diverge once writes stop), then
//! prints the ratio: the last lines are `inconsistent reads: …` and `inconsistency: <ratio>`
//! (`inconsistency: 0` when none). The detector counts inside the read procedure, in the
//! process that runs it: an embedded cluster or the simulator. Against `--connect`ed servers it
//! sees nothing and says `inconsistency: unknown`.

use crate::setup::{call_idempotent, load_in_batches};
use crate::workload::{RunStats, TxnRequest, Workload};
use crate::ycsb::{KeyChooser, KeyDistribution};
use anyhow::Context as _;
use litmus_client::Client;
use litmus_core::{Catalog, Column, ColumnType, Error, Formula, InvalidInput, Partitioning, TableSchema, Value};
use litmus_protocol::procedure::ProcResult;
use litmus_protocol::{Ctx, Op, OpResult, Registry};
use rand::seq::index::sample;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub const TABLE: &str = "basic_item";
pub const READ_PROCEDURE: &str = "basic_read";
pub const WRITE_PROCEDURE: &str = "basic_write";
pub const LOAD_PROCEDURE: &str = "basic_load";
pub const CHECK_PROCEDURE: &str = "basic_check";
pub const KIND_READ: &str = "read";
pub const KIND_WRITE: &str = "write";

/// Data columns per item (YCSB's 24 of §V).
pub const FIELDS: usize = 24;
/// Most column groups (one per partition).
pub const GROUPS_MAX: u32 = FIELDS as u32;
/// Items one load call writes (every group of each).
pub const LOAD_BATCH_ITEMS: u64 = 50;
/// Items one check call reads of one group.
pub const CHECK_CHUNK_ITEMS: u64 = 500;

/// Column index of field `i` and of counter `h` in a group row `(g, k, f0..f23, c0..c23)`.
const fn field_col(i: usize) -> usize {
    2 + i
}
const fn counter_col(h: u32) -> usize {
    2 + FIELDS + h as usize
}

/// §V's two mixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BasicMix {
    /// 90% reads, 10% writes.
    ReadHeavy,
    /// 50% reads, 50% writes.
    WriteHeavy,
}

impl BasicMix {
    pub const ALL: [BasicMix; 2] = [BasicMix::ReadHeavy, BasicMix::WriteHeavy];
    pub fn name(self) -> &'static str {
        match self {
            BasicMix::ReadHeavy => "read-heavy",
            BasicMix::WriteHeavy => "write-heavy",
        }
    }
    pub fn read_share(self) -> f64 {
        match self {
            BasicMix::ReadHeavy => 0.9,
            BasicMix::WriteHeavy => 0.5,
        }
    }
}

impl fmt::Display for BasicMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BasicMix {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<BasicMix, InvalidInput> {
        BasicMix::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            InvalidInput::Config(format!("basic-ycsb: unknown mix {s:?} (known: read-heavy, write-heavy)"))
        })
    }
}

/// What the reads saw, counted as they return (shared by every coordinator of an in-process
/// cluster and by the simulator).
#[derive(Debug, Default)]
pub struct Detector {
    pub reads: AtomicU64,
    pub multi: AtomicU64,
    pub inconsistent: AtomicU64,
}

impl Detector {
    pub fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.reads.load(Ordering::Relaxed),
            self.multi.load(Ordering::Relaxed),
            self.inconsistent.load(Ordering::Relaxed),
        )
    }
}

/// The ratio line: `inconsistency: 0` exactly when no read was inconsistent.
pub fn ratio_line(reads: u64, inconsistent: u64) -> String {
    if inconsistent == 0 {
        "inconsistency: 0".into()
    } else {
        format!("inconsistency: {:.6}", inconsistent as f64 / reads.max(1) as f64)
    }
}

/// See the module doc.
pub struct BasicYcsb {
    mix: BasicMix,
    groups: u32,
    keys: KeyChooser,
    distribution: KeyDistribution,
    progress: bool,
    pub detector: Arc<Detector>,
}

impl BasicYcsb {
    /// `groups`: the partitions the columns are spread over (1..=24).
    pub fn new(
        mix: &str,
        groups: u32,
        records: u64,
        distribution: KeyDistribution,
        theta: f64,
        progress: bool,
    ) -> Result<BasicYcsb, InvalidInput> {
        let mix = mix.parse()?;
        if !(1..=GROUPS_MAX).contains(&groups) {
            return Err(InvalidInput::Config(format!("basic-ycsb needs 1..={GROUPS_MAX} partitions, got {groups}")));
        }
        let keys = KeyChooser::new(distribution, records, theta).map_err(|e| InvalidInput::Config(e.to_string()))?;
        Ok(BasicYcsb { mix, groups, keys, distribution, progress, detector: Arc::new(Detector::default()) })
    }

    pub fn records(&self) -> u64 {
        self.keys.records()
    }

    pub fn groups(&self) -> u32 {
        self.groups
    }
}

/// The group of field `i` among `groups`.
pub fn group_of(i: usize, groups: u32) -> u32 {
    (i as u64 * u64::from(groups) / FIELDS as u64) as u32
}

fn int_arg(args: &[Value], i: usize) -> Result<i64, Error> {
    args.get(i)
        .and_then(Value::as_int)
        .ok_or_else(|| InvalidInput::Config(format!("argument {i}: expected int")).into())
}

/// `(item, fields mask, groups)` of a read or write call, checked.
fn call_args(args: &[Value]) -> Result<(i64, u32, Vec<u32>), Error> {
    let (k, mask, groups) = (int_arg(args, 0)?, int_arg(args, 1)?, int_arg(args, 2)?);
    if k < 0 || mask <= 0 || mask >= 1 << FIELDS || !(1..=i64::from(GROUPS_MAX)).contains(&groups) {
        return Err(InvalidInput::Config(format!(
            "basic-ycsb: bad call (item {k}, fields {mask:#x}, groups {groups})"
        ))
        .into());
    }
    let groups = groups as u32;
    let mut touched: Vec<u32> = (0..FIELDS).filter(|i| mask & (1 << i) != 0).map(|i| group_of(i, groups)).collect();
    touched.dedup();
    Ok((k, mask as u32, touched))
}

fn row_key(g: u32, k: i64) -> Vec<Value> {
    vec![Value::Int(i64::from(g)), Value::Int(k)]
}

/// Whether the parts of a read disagree on the writes they share (see the module doc).
pub fn inconsistent<R: AsRef<[Value]>>(parts: &BTreeMap<u32, R>) -> bool {
    parts.iter().any(|(&g, row_g)| {
        parts
            .iter()
            .any(|(&h, row_h)| g < h && row_g.as_ref().get(counter_col(h)) != row_h.as_ref().get(counter_col(g)))
    })
}

/// `basic_read(k, fields, groups)` → `[multi-partition 0|1, inconsistent 0|1]`.
async fn read_body(ctx: Ctx, args: Vec<Value>, detector: Arc<Detector>) -> ProcResult {
    let (k, _, touched) = call_args(&args)?;
    let pending: Vec<_> =
        touched.iter().map(|&g| (g, ctx.op(Op::Read { table: TABLE.into(), key: row_key(g, k) }))).collect();
    let mut parts = BTreeMap::new();
    for (g, f) in pending {
        match f.await? {
            OpResult::Row(Some(row)) => drop(parts.insert(g, row)),
            OpResult::Row(None) => return Err(Error::UserAbort(format!("{TABLE} ({g}, {k}) is missing"))),
            other => return Err(Error::Internal(format!("basic-ycsb read returned {other:?}"))),
        }
    }
    let (multi, bad) = (parts.len() > 1, inconsistent(&parts));
    detector.reads.fetch_add(1, Ordering::Relaxed);
    detector.multi.fetch_add(u64::from(multi), Ordering::Relaxed);
    detector.inconsistent.fetch_add(u64::from(bad), Ordering::Relaxed);
    Ok(vec![Value::Int(i64::from(multi)), Value::Int(i64::from(bad))])
}

/// `basic_write(k, fields, groups, value)`: each touched group assigns its fields and counts
/// the write once for every other touched group.
async fn write_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let (k, mask, touched) = call_args(&args)?;
    let (groups, v) = (int_arg(&args, 2)? as u32, int_arg(&args, 3)?);
    let mut pending = Vec::with_capacity(touched.len());
    for &g in &touched {
        let mut updates: Vec<(String, Formula)> = (0..FIELDS)
            .filter(|&i| mask & (1 << i) != 0 && group_of(i, groups) == g)
            .map(|i| (format!("f{i}"), Formula::Assign(Value::Int(v))))
            .collect();
        updates.extend(touched.iter().filter(|&&h| h != g).map(|h| (format!("c{h}"), Formula::Add(Value::Int(1)))));
        pending.push(ctx.op(Op::Update { table: TABLE.into(), key: row_key(g, k), updates }));
    }
    for f in pending {
        f.await?;
    }
    Ok(vec![Value::Int(touched.len() as i64)])
}

/// `basic_load(start, count, groups)`: every group row of items `start..start+count`, zeroed.
async fn load_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let (start, count, groups) = (int_arg(&args, 0)?, int_arg(&args, 1)?, int_arg(&args, 2)?);
    if start < 0 || !(0..=LOAD_BATCH_ITEMS as i64).contains(&count) || !(1..=i64::from(GROUPS_MAX)).contains(&groups) {
        return Err(InvalidInput::Config(format!("{LOAD_PROCEDURE}: bad range {start}+{count} / {groups}")).into());
    }
    let mut pending = Vec::new();
    for k in start..start + count {
        for g in 0..groups {
            let mut row = row_key(g as u32, k);
            row.extend(std::iter::repeat_n(Value::Int(0), FIELDS + GROUPS_MAX as usize));
            pending.push(ctx.op(Op::Write { table: TABLE.into(), row: row.into() }));
        }
    }
    for f in pending {
        f.await?;
    }
    Ok(vec![Value::Int(count)])
}

/// `basic_check(g, start, end, groups)` → `[k, c0..c{groups-1}]` for every item of the chunk.
async fn check_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let (g, start, end, groups) = (int_arg(&args, 0)?, int_arg(&args, 1)?, int_arg(&args, 2)?, int_arg(&args, 3)?);
    if !(0..=CHECK_CHUNK_ITEMS as i64).contains(&(end - start)) || !(1..=i64::from(GROUPS_MAX)).contains(&groups) {
        return Err(InvalidInput::Config(format!("{CHECK_PROCEDURE}: bad range {start}..{end}")).into());
    }
    let rows = ctx
        .scan(TABLE, &[Value::Int(g), Value::Int(start)], Some(&[Value::Int(g), Value::Int(end)]), (end - start) as u32)
        .await?;
    let mut out = Vec::with_capacity(rows.len() * (1 + groups as usize));
    for r in rows {
        out.push(r[1].clone());
        out.extend((0..groups as u32).map(|h| r[counter_col(h)].clone()));
    }
    Ok(out)
}

pub fn table() -> TableSchema {
    let int = |n: String| Column::new(&n, ColumnType::Int);
    let mut cols = vec![int("g".into()), int("k".into())];
    cols.extend((0..FIELDS).map(|i| int(format!("f{i}"))));
    cols.extend((0..GROUPS_MAX).map(|h| int(format!("c{h}"))));
    debug_assert_eq!(cols.len(), counter_col(GROUPS_MAX));
    debug_assert_eq!(field_col(0), 2);
    TableSchema::new(TABLE, cols, &["g", "k"], Partitioning::KeyPrefix { prefix_len: 1 })
}

/// Reads every group of every item back; the number of items whose groups disagree.
pub fn diverged(records: u64, groups: u32, call: &mut crate::ycsb_t::CheckCall<'_>) -> anyhow::Result<(u64, u64)> {
    let (mut items, mut diverged) = (0u64, 0u64);
    let mut start = 0;
    while start < records {
        let end = (start + CHECK_CHUNK_ITEMS).min(records);
        // item -> group -> counters
        let mut seen: BTreeMap<i64, BTreeMap<u32, Vec<Value>>> = BTreeMap::new();
        for g in 0..groups {
            let args =
                vec![Value::Int(g.into()), Value::Int(start as i64), Value::Int(end as i64), Value::Int(groups.into())];
            let out =
                call(CHECK_PROCEDURE, args).with_context(|| format!("check group {g} of items {start}..{end}"))?;
            let width = 1 + groups as usize;
            if out.len() % width != 0 {
                anyhow::bail!("{CHECK_PROCEDURE} returned {} values, not rows of {width}", out.len());
            }
            for row in out.chunks(width) {
                let k = row[0].as_int().ok_or_else(|| anyhow::anyhow!("{CHECK_PROCEDURE}: bad key {:?}", row[0]))?;
                let mut full = vec![Value::Null; counter_col(0)];
                full.extend(row[1..].iter().cloned());
                seen.entry(k).or_default().insert(g, full);
            }
        }
        for parts in seen.values() {
            if parts.len() != groups as usize {
                anyhow::bail!("an item has {} of its {groups} column groups", parts.len());
            }
            items += 1;
            diverged += u64::from(inconsistent(parts));
        }
        start = end;
    }
    if items != records {
        anyhow::bail!("expected {records} items, found {items}");
    }
    Ok((items, diverged))
}

impl Workload for BasicYcsb {
    fn name(&self) -> &'static str {
        "basic-ycsb"
    }

    fn describe(&self) -> String {
        format!(
            "mix={} items={} fields={FIELDS} column-groups={} keys={:?}",
            self.mix,
            self.records(),
            self.groups,
            self.distribution
        )
    }

    fn catalog(&self) -> Catalog {
        let mut c = Catalog::new();
        c.add(table());
        c
    }

    fn register(&self, registry: &mut Registry) {
        use ColumnType::Int;
        let detector = self.detector.clone();
        registry.register(READ_PROCEDURE, vec![Int, Int, Int], move |ctx: Ctx, args: Vec<Value>| {
            read_body(ctx, args, detector.clone())
        });
        registry.register(WRITE_PROCEDURE, vec![Int, Int, Int, Int], write_body);
        registry.register(LOAD_PROCEDURE, vec![Int, Int, Int], load_body);
        registry.register(CHECK_PROCEDURE, vec![Int, Int, Int, Int], check_body);
    }

    fn prepare(&self, clients: &mut dyn FnMut() -> Result<Client, Error>) -> anyhow::Result<()> {
        let groups = self.groups;
        let args = move |start: u64, count: u64| {
            vec![Value::Int(start as i64), Value::Int(count as i64), Value::Int(groups.into())]
        };
        load_in_batches(clients, self.records(), LOAD_BATCH_ITEMS, self.progress, LOAD_PROCEDURE, &args)
    }

    fn generate(&self, rng: &mut ChaCha8Rng) -> TxnRequest {
        let k = self.keys.sample(rng) as i64;
        let m = rng.gen_range(1..=FIELDS);
        let mask: i64 = sample(rng, FIELDS, m).into_iter().map(|i| 1i64 << i).sum();
        let groups = Value::Int(self.groups.into());
        if rng.gen_bool(self.mix.read_share()) {
            TxnRequest {
                kind: KIND_READ,
                procedure: READ_PROCEDURE,
                args: vec![Value::Int(k), Value::Int(mask), groups],
            }
        } else {
            let v = rng.gen_range(1..i64::from(u32::MAX));
            let args = vec![Value::Int(k), Value::Int(mask), groups, Value::Int(v)];
            TxnRequest { kind: KIND_WRITE, procedure: WRITE_PROCEDURE, args }
        }
    }

    fn mix(&self) -> Option<crate::mix::MixSpec> {
        let reads = (self.mix.read_share() * 10.0).round() as u32;
        Some(crate::mix::MixSpec::defined_shares([(KIND_READ, reads), (KIND_WRITE, 10 - reads)]))
    }

    fn verify(&self, client: &mut Client, stats: &RunStats) -> anyhow::Result<String> {
        let mut call = |procedure: &str, args: Vec<Value>| call_idempotent(client, procedure, args);
        let (items, diverged) = diverged(self.records(), self.groups, &mut call)?;
        if diverged > 0 {
            anyhow::bail!("{diverged} of {items} items have column groups that disagree once writes stopped");
        }
        let (reads, multi, bad) = self.detector.snapshot();
        let committed_reads = stats.total_of(KIND_READ).committed;
        if reads == 0 && committed_reads > 0 {
            // The detector counts inside the procedures, in this process: with --connect the
            // reads ran on the servers and nothing was seen here.
            return Ok(format!(
                "the column groups of all {items} items agree\ninconsistency: unknown ({committed_reads} reads ran \
                 outside this process; the detector counts in-process only)"
            ));
        }
        Ok(format!(
            "the column groups of all {items} items agree\ninconsistent reads: {bad} of {reads} reads ({multi} multi-partition)\n{}",
            ratio_line(reads, bad)
        ))
    }
}

/// `basic-ycsb` in the workload registry ([`crate::ALL`]).
pub const DEF: crate::WorkloadDef = crate::WorkloadDef {
    name: "basic-ycsb",
    about: "BASIC §V's operations over column groups: no mixed read, no diverged item",
    sweeps: &[],
    build: Some(|o| {
        Ok(Box::new(BasicYcsb::new(
            o.ycsb_t.mix.as_deref().unwrap_or("read-heavy"),
            o.partitions,
            o.ycsb.records,
            o.ycsb.distribution,
            o.ycsb.zipf_theta,
            o.progress,
        )?))
    }),
    build_for: None,
    schema: Some(|catalog, registry| {
        catalog.add(table());
        let basic = BasicYcsb::new("read-heavy", 4, 1000, KeyDistribution::Uniform, 0.99, false)
            .expect("default options are valid");
        basic.register(registry);
    }),
    analysis: None,
    sim: Some(crate::SimDef {
        needs: None,
        nodes: crate::registry::three_nodes,
        step_cost_us: 0,
        run: |run, cfg| {
            let require = run.engine.capabilities().guarantee != litmus_protocol::engine::Guarantee::None;
            Ok(crate::basic_ycsb_sim::simulate_in(run.engine, run.topology, cfg, require).map(|(r, d)| {
                let (reads, multi, bad) = d.seen;
                format!("{r} | basic-ycsb ok {} failed {} | reads {reads} ({multi} multi-partition, {bad} mixed) | columns agree", d.committed, d.failed)
            }))
        },
    }),
};

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn mixes_fields_and_groups_follow_the_paper() {
        for (mix, share) in [("read-heavy", 0.9), ("write-heavy", 0.5)] {
            let w = BasicYcsb::new(mix, 8, 1000, KeyDistribution::Uniform, 0.99, false).unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(3);
            let reads = (0..4000).filter(|_| w.generate(&mut rng).kind == KIND_READ).count();
            assert!((reads as f64 / 4000.0 - share).abs() < 0.03, "{mix}: {reads}");
        }
        // 24 fields evenly over 8 groups: 3 each.
        let per: Vec<usize> = (0..8).map(|g| (0..FIELDS).filter(|&i| group_of(i, 8) == g).count()).collect();
        assert_eq!(per, vec![3; 8]);
        assert!(BasicYcsb::new("mixed", 8, 1000, KeyDistribution::Uniform, 0.99, false).is_err());
        assert!(BasicYcsb::new("read-heavy", 25, 1000, KeyDistribution::Uniform, 0.99, false).is_err());
        assert!(call_args(&[Value::Int(1), Value::Int(0), Value::Int(4)]).is_err(), "no fields");
    }

    /// The detector is seen to fail: a read whose parts saw different shared writes.
    #[test]
    fn detector_flags_parts_that_disagree_and_passes_parts_that_agree() {
        let row = |c: [i64; 3]| {
            let mut r = vec![Value::Null; counter_col(0)];
            r.extend(c.iter().map(|&x| Value::Int(x)));
            r
        };
        // Write touching groups 0 and 2 reached 0 but not 2.
        let torn = BTreeMap::from([(0, row([0, 0, 1])), (2, row([0, 0, 0]))]);
        assert!(inconsistent(&torn));
        let agree = BTreeMap::from([(0, row([0, 3, 1])), (1, row([3, 0, 0])), (2, row([1, 0, 0]))]);
        assert!(!inconsistent(&agree));
        assert_eq!(ratio_line(10, 0), "inconsistency: 0");
        assert_eq!(ratio_line(1000, 5), "inconsistency: 0.005000");
    }
}
