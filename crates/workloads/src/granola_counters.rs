//! # `granola-counters` — Granola's microbenchmark (Granola ATC'12 §6.1, Figs. 8–11)
//!
//! Counters on every partition, incremented by one-round transactions:
//!
//! ```text
//!   gc_counters(p int, k int, v int)   primary key (p, k), partitioned by p (p on partition p mod P)
//!   per partition: k = 0 the shared counter, k = 1..=PRIVATE_COUNTERS private ones
//! ```
//!
//! * a *single-partition* transaction (`gc_single(p, k)`) increments one counter;
//! * a *distributed* one increments one counter on each of `--span N` consecutive partitions
//!   (`p, p+1, ..` mod P), as an *independent* transaction (`gc_independent`), or with
//!   `--coordinated` as a *coordinated* one (`gc_coordinated`: every participant reads its
//!   counter and votes — always COMMIT: the counters never go negative — so the protocol, not
//!   the data, decides the cost).
//!
//! Options: `--distributed F` (the fraction of distributed transactions, Fig. 8's x axis),
//! `--span N` (partitions per distributed transaction, 2..=8), `--coordinated` (Fig. 11),
//! `--conflict R` (the probability that a counter is the partition's shared one rather than a
//! random private one: the conflict rate of Figs. 10–11). Fig. 9's "no consistency" variant is
//! the same workload on `nocc`. The workload is one definition: `granola`, `granola-locking` and
//! `sinfonia` take it whole, the other engines through the adapter.
//!
//! Fig. 10's knobs: `--exec-cost-us N` burns N µs of CPU per fragment execution and
//! `--lock-cost-us M` M µs per lock acquired in locking mode, in the granola engines only
//! (`litmus_granola::cost`; both 0 by default). Set when the run is prepared.
//!
//! ## Invariant (checked by `verify`)
//!
//! Every counter exists once, and with `U` committed increments and `I` indeterminate ones
//! (a transaction counts its span), `U <= sum(v) <= U + I`.

use crate::workload::{RunStats, TxnRequest, Workload};
use litmus_client::Client;
use litmus_core::{Catalog, Column, ColumnType, Error, Formula, InvalidInput, Partitioning, TableSchema, Value};
use litmus_protocol::fragment::{FragmentCall, OneRoundClass};
use litmus_protocol::{Ctx, Registry};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

pub const NAME: &str = "granola-counters";
pub const TABLE: &str = "gc_counters";
pub const SINGLE: &str = "gc_single";
pub const INDEPENDENT: &str = "gc_independent";
pub const COORDINATED: &str = "gc_coordinated";
pub const LOAD: &str = "gc_load";
pub const SUM: &str = "gc_sum";
pub const KIND_SINGLE: &str = "single";
pub const KIND_DISTRIBUTED: &str = "distributed";
/// Private counters per partition (besides the shared one, `k = 0`).
pub const PRIVATE_COUNTERS: i64 = 1_000;
/// Most partitions one distributed transaction touches.
pub const SPAN_MAX: u32 = 8;
/// Largest emulated cost (µs) per fragment or lock: a second of spinning per lock is a typo.
pub const COST_US_MAX: u64 = 100_000;
/// Most partitions the load and sum plans cover.
pub const PARTITIONS_MAX: i64 = 4096;

/// Settings of `granola-counters`.
#[derive(clap::Args, Clone, Debug, PartialEq, Serialize)]
#[command(next_help_heading = "Granola counters options (granola-counters)")]
pub struct CountersOptions {
    /// Fraction of distributed transactions (0.0..=1.0): `--distributed`, shared with
    /// tpcc-neworder (see `BenchArgs::distributed`).
    #[arg(skip = 0.0)]
    pub distributed: f64,
    /// granola-counters: partitions each distributed transaction touches (2..=8).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub span: u32,
    /// granola-counters: distributed transactions are coordinated (vote from their data)
    /// rather than independent.
    #[arg(long)]
    pub coordinated: bool,
    /// granola-counters: probability that a counter is its partition's shared one (0.0..=1.0).
    #[arg(long, value_name = "R", default_value_t = 0.0)]
    pub conflict: f64,
    /// granola engines (Fig. 10): CPU microseconds burnt per fragment execution (emulated
    /// execution cost; 0: none).
    #[arg(long = "exec-cost-us", value_name = "N", default_value_t = 0)]
    pub exec_cost_us: u64,
    /// granola engines (Fig. 10): CPU microseconds burnt per lock acquired in locking mode
    /// (emulated lock management cost; 0: none).
    #[arg(long = "lock-cost-us", value_name = "M", default_value_t = 0)]
    pub lock_cost_us: u64,
}

impl Default for CountersOptions {
    fn default() -> Self {
        CountersOptions {
            distributed: 0.0,
            span: 2,
            coordinated: false,
            conflict: 0.0,
            exec_cost_us: 0,
            lock_cost_us: 0,
        }
    }
}

/// The workload on a cluster of `partitions` partitions.
pub struct Counters {
    opts: CountersOptions,
    partitions: u32,
}

impl Counters {
    pub fn new(opts: CountersOptions, partitions: u32) -> Result<Counters, InvalidInput> {
        let bad = |what: String| Err(InvalidInput::Config(what));
        if !(0.0..=1.0).contains(&opts.distributed) {
            return bad(format!("--distributed must be in 0.0..=1.0, got {}", opts.distributed));
        }
        if !(0.0..=1.0).contains(&opts.conflict) {
            return bad(format!("--conflict must be in 0.0..=1.0, got {}", opts.conflict));
        }
        if !(2..=SPAN_MAX).contains(&opts.span) {
            return bad(format!("--span must be in 2..={SPAN_MAX}, got {}", opts.span));
        }
        if opts.distributed > 0.0 && opts.span > partitions {
            return bad(format!("--span {} exceeds the {partitions} partitions", opts.span));
        }
        if !(1..=PARTITIONS_MAX as u32).contains(&partitions) {
            return bad(format!("{NAME} runs on 1..={PARTITIONS_MAX} partitions, got {partitions}"));
        }
        if opts.exec_cost_us.max(opts.lock_cost_us) > COST_US_MAX {
            return bad(format!("--exec-cost-us / --lock-cost-us must be at most {COST_US_MAX}"));
        }
        Ok(Counters { opts, partitions })
    }

    fn counter(&self, rng: &mut ChaCha8Rng) -> i64 {
        if rng.gen_bool(self.opts.conflict) {
            0
        } else {
            rng.gen_range(1..=PRIVATE_COUNTERS)
        }
    }
}

fn table() -> TableSchema {
    let cols =
        vec![Column::new("p", ColumnType::Int), Column::new("k", ColumnType::Int), Column::new("v", ColumnType::Int)];
    TableSchema::new(TABLE, cols, &["p", "k"], Partitioning::KeyPrefix { prefix_len: 1 })
}

fn int(args: &[Value], i: usize) -> Result<i64, Error> {
    args.get(i)
        .and_then(Value::as_int)
        .ok_or_else(|| InvalidInput::Config(format!("argument {i}: expected an int")).into())
}

fn incr(p: i64, k: i64) -> FragmentCall {
    FragmentCall::new("gc_incr", TABLE, vec![Value::Int(p)], vec![Value::Int(p), Value::Int(k)])
}

/// `(p0, span, partitions, k)`: counter `k` on partitions `p0, p0+1, ..` (mod `partitions`).
fn spread(args: &[Value]) -> Result<Vec<FragmentCall>, Error> {
    let (p0, span, partitions, k) = (int(args, 0)?, int(args, 1)?, int(args, 2)?, int(args, 3)?);
    if !(1..=PARTITIONS_MAX).contains(&partitions) || !(1..=i64::from(SPAN_MAX)).contains(&span) || span > partitions {
        return Err(InvalidInput::Config(format!("span {span} over {partitions} partitions")).into());
    }
    Ok((0..span).map(|i| incr((p0 + i).rem_euclid(partitions), k)).collect())
}

/// Every partition `0..partitions`, one fragment each, with `args` after the partition.
fn everywhere(fragment: &'static str, args: &[Value]) -> Result<Vec<FragmentCall>, Error> {
    let partitions = int(args, 0)?;
    if !(1..=PARTITIONS_MAX).contains(&partitions) {
        return Err(InvalidInput::Config(format!("{partitions} partitions")).into());
    }
    Ok((0..partitions)
        .map(|p| FragmentCall::new(fragment, TABLE, vec![Value::Int(p)], vec![Value::Int(p), args[1].clone()]))
        .collect())
}

/// Rounds of the engine's cost loop (`litmus_granola::cost::burn`) per µs of
/// this machine's CPU: the best of five 2 ms timings.
pub fn burn_iterations_per_us() -> u64 {
    use litmus_granola::cost::burn;
    let rounds = 200_000u64;
    let best = (0..5)
        .map(|_| {
            let t = std::time::Instant::now();
            std::hint::black_box(burn(rounds));
            t.elapsed().as_nanos().max(1) as u64
        })
        .min()
        .unwrap_or(1);
    (rounds * 1_000 / best).max(1)
}

/// Registers the fragments and one-round procedures (independent of the options).
pub fn register(r: &mut Registry) {
    use ColumnType::Int;
    r.register_fragment("gc_incr", vec![Int, Int], |ctx: Ctx, args: Vec<Value>| async move {
        // Read, then write: a coordinated participant votes from what it read (never abort).
        let row = ctx.read(TABLE, &args).await?.ok_or_else(|| ctx.abort(format!("counter {args:?} is missing")))?;
        let v = row.get(2).and_then(Value::as_int).unwrap_or(0);
        if v < 0 {
            return Err(ctx.abort(format!("counter {args:?} is negative")));
        }
        ctx.update(TABLE, &args, &[("v", Formula::Add(Value::Int(1)))]).await?;
        Ok(vec![])
    });
    r.register_fragment("gc_load_frag", vec![Int, Int], |ctx: Ctx, args: Vec<Value>| async move {
        let (p, last) = (args[0].clone(), args[1].as_int().unwrap_or(0).min(PRIVATE_COUNTERS));
        for k in 0..=last {
            ctx.write(TABLE, vec![p.clone(), Value::Int(k), Value::Int(0)]).await?;
        }
        Ok(vec![])
    });
    r.register_fragment("gc_sum_frag", vec![Int, Int], |ctx: Ctx, args: Vec<Value>| async move {
        let rows = ctx.scan_prefix(TABLE, &args[..1], (PRIVATE_COUNTERS + 2) as u32).await?;
        let sum: i64 = rows.iter().map(|r| r.get(2).and_then(Value::as_int).unwrap_or(0)).sum();
        Ok(vec![Value::Int(rows.len() as i64), Value::Int(sum)])
    });
    r.declare_keys_from_args(&["gc_incr", "gc_load_frag", "gc_sum_frag"]);
    r.register_one_round(SINGLE, vec![Int, Int], OneRoundClass::Single, |args: &[Value]| {
        Ok(vec![incr(int(args, 0)?, int(args, 1)?)])
    });
    r.register_one_round(INDEPENDENT, vec![Int; 4], OneRoundClass::Independent, spread);
    r.register_one_round(COORDINATED, vec![Int; 4], OneRoundClass::Coordinated, spread);
    // `(partitions, last_k)`: writes counters 0..=last_k at zero on every partition.
    r.register_one_round(LOAD, vec![Int, Int], OneRoundClass::Independent, |args: &[Value]| {
        everywhere("gc_load_frag", args)
    });
    // `(partitions, 0)` -> `[rows, sum]` per partition.
    r.register_one_round(SUM, vec![Int, Int], OneRoundClass::Independent, |args: &[Value]| {
        everywhere("gc_sum_frag", args)
    });
}

impl Workload for Counters {
    fn name(&self) -> &'static str {
        NAME
    }

    fn describe(&self) -> String {
        let o = &self.opts;
        format!(
            "partitions={} distributed={} span={} {} conflict={} (shared counter) private counters/partition={PRIVATE_COUNTERS} exec-cost={}us lock-cost={}us",
            self.partitions,
            o.distributed,
            o.span,
            if o.coordinated { "coordinated" } else { "independent" },
            o.conflict,
            o.exec_cost_us,
            o.lock_cost_us
        )
    }

    fn catalog(&self) -> Catalog {
        let mut c = Catalog::new();
        c.add(table());
        c
    }

    fn register(&self, registry: &mut Registry) {
        register(registry);
    }

    fn prepare(&self, clients: &mut dyn FnMut() -> Result<Client, Error>) -> anyhow::Result<()> {
        let per_us = burn_iterations_per_us();
        let (exec, lock) = (self.opts.exec_cost_us * per_us, self.opts.lock_cost_us * per_us);
        litmus_granola::cost::set(exec, lock);
        let mut client = clients()?;
        let args = vec![Value::Int(self.partitions as i64), Value::Int(PRIVATE_COUNTERS)];
        crate::setup::call_idempotent(&mut client, LOAD, args)?;
        Ok(())
    }

    fn generate(&self, rng: &mut ChaCha8Rng) -> TxnRequest {
        let p = rng.gen_range(0..self.partitions as i64);
        let k = self.counter(rng);
        if rng.gen_bool(self.opts.distributed) {
            let procedure = if self.opts.coordinated { COORDINATED } else { INDEPENDENT };
            let args = vec![
                Value::Int(p),
                Value::Int(self.opts.span as i64),
                Value::Int(self.partitions as i64),
                Value::Int(k),
            ];
            TxnRequest { kind: KIND_DISTRIBUTED, procedure, args }
        } else {
            TxnRequest { kind: KIND_SINGLE, procedure: SINGLE, args: vec![Value::Int(p), Value::Int(k)] }
        }
    }

    fn verify(&self, client: &mut Client, stats: &RunStats) -> anyhow::Result<String> {
        let (single, dist) = (stats.total_of(KIND_SINGLE), stats.total_of(KIND_DISTRIBUTED));
        let span = u64::from(self.opts.span);
        let low = single.committed + span * dist.committed;
        let high = low + single.indeterminate() + span * dist.indeterminate();
        let out = crate::setup::call_idempotent(client, SUM, vec![Value::Int(self.partitions as i64), Value::Int(0)])?;
        let (mut rows, mut sum) = (0i64, 0i64);
        for pair in out.chunks(2) {
            rows += pair[0].as_int().unwrap_or(0);
            sum += pair.get(1).and_then(Value::as_int).unwrap_or(0);
        }
        let expected_rows = self.partitions as i64 * (PRIVATE_COUNTERS + 1);
        if rows != expected_rows {
            anyhow::bail!("expected {expected_rows} counters, found {rows}");
        }
        let sum = sum as u64;
        if !(low..=high).contains(&sum) {
            anyhow::bail!("sum of counters {sum} outside [{low}, {high}] (committed increments, plus indeterminate)");
        }
        Ok(format!("{rows} counters, sum {sum} in [{low}, {high}] (committed increments, plus indeterminate ones)"))
    }
}

/// `granola-counters` in the workload registry ([`crate::ALL`]).
pub const DEF: crate::WorkloadDef = crate::WorkloadDef {
    name: NAME,
    about: "Granola §6.1's microbenchmark: single-partition and distributed counter increments",
    sweeps: &["distributed", "conflict", "lock-cost-us"],
    build: Some(|o| {
        let mut opts = o.counters.clone();
        opts.distributed = o.distributed.unwrap_or(opts.distributed);
        Ok(Box::new(Counters::new(opts, o.partitions)?))
    }),
    build_for: None,
    schema: Some(|catalog, registry| {
        let counters = Counters::new(Default::default(), 1).expect("default options are valid");
        catalog.merge(&counters.catalog());
        counters.register(registry);
    }),
    analysis: None,
    sim: None,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{loaded_cluster, Outcomes};
    use litmus_protocol::EngineKind;
    use rand::SeedableRng;

    fn opts(distributed: f64) -> CountersOptions {
        CountersOptions { distributed, ..CountersOptions::default() }
    }

    #[test]
    fn fig_10_cost_calibration_burns_about_the_time_asked() {
        let per_us = burn_iterations_per_us();
        let t = std::time::Instant::now();
        std::hint::black_box(litmus_granola::cost::burn(per_us * 2_000));
        let took = t.elapsed();
        assert!(took >= std::time::Duration::from_micros(500), "2 ms asked, {took:?} burnt");
    }

    #[test]
    fn bad_options_are_typed_errors() {
        assert!(Counters::new(opts(1.5), 4).is_err());
        assert!(Counters::new(CountersOptions { span: 9, ..opts(0.5) }, 8).is_err());
        assert!(Counters::new(CountersOptions { span: 4, ..opts(0.5) }, 2).is_err());
        assert!(Counters::new(CountersOptions { conflict: -0.1, ..opts(0.5) }, 2).is_err());
        assert!(Counters::new(CountersOptions { lock_cost_us: COST_US_MAX + 1, ..opts(0.5) }, 2).is_err());
    }

    #[test]
    fn the_mix_follows_the_options() {
        let w = Counters::new(CountersOptions { span: 3, conflict: 0.5, ..opts(0.25) }, 4).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (mut dist, mut shared, n) = (0, 0, 10_000);
        for _ in 0..n {
            let t = w.generate(&mut rng);
            dist += usize::from(t.kind == KIND_DISTRIBUTED);
            shared += usize::from(t.args.last() == Some(&Value::Int(0)));
        }
        assert!((dist as f64 / n as f64 - 0.25).abs() < 0.02, "{dist}");
        assert!((shared as f64 / n as f64 - 0.5).abs() < 0.02, "{shared}");
    }

    /// Runs `n` transactions on `engine`, then verifies; also verifies a lie about the count,
    /// which must fail (the check is seen to fail).
    fn run_and_verify(engine: EngineKind, coordinated: bool) {
        let w = Counters::new(CountersOptions { coordinated, conflict: 0.3, ..opts(0.5) }, 4).unwrap();
        let cluster = loaded_cluster(&w, engine, 2, 4).unwrap();
        let mut client = Client::new(Box::new(cluster.transport()));
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut stats = RunStats::default();
        for _ in 0..60 {
            let t = w.generate(&mut rng);
            client.call(t.procedure, t.args).unwrap();
            stats.total.entry(t.kind).or_insert_with(Outcomes::default).committed += 1;
        }
        let verdict = w.verify(&mut client, &stats);
        assert!(verdict.is_ok(), "{engine}: {verdict:?}");
        stats.total.entry(KIND_SINGLE).or_insert_with(Outcomes::default).committed += 1;
        assert!(w.verify(&mut client, &stats).is_err(), "{engine}: an increment counted but never made must fail");
    }

    #[test]
    fn counters_verify_on_the_granola_engines_and_through_the_adapter() {
        for engine in
            [litmus_engines::GRANOLA, litmus_engines::GRANOLA_LOCKING, litmus_engines::SINFONIA, litmus_engines::ACID]
        {
            run_and_verify(engine, false);
            run_and_verify(engine, true);
        }
    }
}
