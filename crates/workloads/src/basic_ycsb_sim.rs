//! `basic-ycsb` on the deterministic simulator (`litmus sim --workload basic-ycsb`): BASIC §V's
//! operations ([`crate::basic_ycsb`]) from every simulated client with every fault on. After
//! the faults heal, every column group of every item is read back, and:
//!
//! * **no read returned a mixed state**: the detector counted no inconsistent read (for an
//!   engine that promises isolation; `base` is expected to show them);
//! * **the columns of an item never diverge**: the groups of every item agree on the writes
//!   they share (atomicity: a write lands on every partition it touches or on none);
//! * every check call is answered (the simulator's liveness check covers the rest).
//!
//! The checks are seen to fail: `basic_ycsb_checks_fail_under_base` runs the same checks on
//! `base`, which applies parts on arrival and loses parts to faults.

use crate::basic_ycsb::{diverged, BasicYcsb, LOAD_BATCH_ITEMS, LOAD_PROCEDURE};
use crate::workload::Workload;
use crate::ycsb::KeyDistribution;
use crate::ycsb_t_sim::sim_call;
use litmus_core::{Error, Value};
use litmus_protocol::engine::Guarantee;
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::EngineKind;
use litmus_runtime::sim::{SimConfig, SimDriver, SimReport, Simulator};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// Items in the simulated table (few: operations collide).
pub const SIM_ITEMS: u64 = 16;

/// The driver; see the module doc.
pub struct BasicYcsbSim {
    w: BasicYcsb,
    /// Fail the run on an inconsistent read (engines that promise isolation).
    require_instant: bool,
    pub committed: u64,
    pub failed: u64,
    /// `(reads, multi-partition reads, inconsistent reads)`, once verified.
    pub seen: (u64, u64, u64),
}

impl BasicYcsbSim {
    pub fn new(partitions: u32, require_instant: bool) -> Result<BasicYcsbSim, litmus_core::InvalidInput> {
        let w = BasicYcsb::new("write-heavy", partitions, SIM_ITEMS, KeyDistribution::Uniform, 0.99, false)?;
        Ok(BasicYcsbSim { w, require_instant, committed: 0, failed: 0, seen: (0, 0, 0) })
    }

    pub fn workload(&self) -> &BasicYcsb {
        &self.w
    }

    /// Loads every item through the verification client (before `Simulator::run`).
    pub fn load(&self, sim: &mut Simulator) -> Result<(), Error> {
        let mut start = 0;
        while start < self.w.records() {
            let count = LOAD_BATCH_ITEMS.min(self.w.records() - start);
            let args = vec![Value::Int(start as i64), Value::Int(count as i64), Value::Int(self.w.groups().into())];
            sim_call(sim, LOAD_PROCEDURE, args)?;
            start += count;
        }
        Ok(())
    }
}

impl SimDriver for BasicYcsbSim {
    fn next(&mut self, _client: usize, rng: &mut ChaCha8Rng) -> Option<RequestBody> {
        let t = self.w.generate(rng);
        Some(RequestBody::Call { procedure: t.procedure.into(), args: t.args, retrying_for: Duration::ZERO })
    }

    fn done(&mut self, _client: usize, _request: &RequestBody, result: &Result<ResponseBody, Error>) {
        match result {
            Ok(ResponseBody::Returned(_)) => self.committed += 1,
            _ => self.failed += 1,
        }
    }

    fn verify(&mut self, sim: &mut Simulator) -> Result<(), String> {
        let mut call = |procedure: &str, args: Vec<Value>| sim_call(sim, procedure, args);
        let (items, bad_items) =
            diverged(self.w.records(), self.w.groups(), &mut call).map_err(|e| format!("basic-ycsb verify: {e:#}"))?;
        self.seen = self.w.detector.snapshot();
        let mut violations = Vec::new();
        if bad_items > 0 {
            violations.push(format!("{bad_items} of {items} items have column groups that diverged"));
        }
        if self.require_instant && self.seen.2 > 0 {
            violations.push(format!("{} of {} reads returned a mixed state", self.seen.2, self.seen.0));
        }
        if violations.is_empty() {
            Ok(())
        } else {
            Err(format!("basic-ycsb: {}", violations.join("; ")))
        }
    }
}

/// One `basic-ycsb` simulation: load, run with `cfg`'s faults, heal, verify, liveness.
pub fn simulate(
    engine: EngineKind,
    nodes: u32,
    partitions: u32,
    cfg: SimConfig,
) -> Result<(SimReport, BasicYcsbSim), String> {
    let require = engine.capabilities().guarantee != Guarantee::None;
    simulate_checking(engine, nodes, partitions, cfg, require)
}

/// [`simulate`], choosing whether an inconsistent read fails the run.
pub fn simulate_checking(
    engine: EngineKind,
    nodes: u32,
    partitions: u32,
    cfg: SimConfig,
    require_instant: bool,
) -> Result<(SimReport, BasicYcsbSim), String> {
    let topology = litmus_runtime::Topology::new(nodes, partitions).map_err(|e| e.to_string())?;
    simulate_in(engine, topology, cfg, require_instant)
}

/// [`simulate_checking`] on a given layout (e.g. with replicated partitions).
pub fn simulate_in(
    engine: EngineKind,
    topology: litmus_runtime::Topology,
    cfg: SimConfig,
    require_instant: bool,
) -> Result<(SimReport, BasicYcsbSim), String> {
    use litmus_protocol::builtin;
    let partitions = topology.partitions;
    let mut driver = BasicYcsbSim::new(partitions, require_instant).map_err(|e| e.to_string())?;
    let mut catalog = builtin::catalog();
    catalog.merge(&driver.workload().catalog());
    let mut registry = builtin::registry();
    driver.workload().register(&mut registry);
    let spec = litmus_runtime::ClusterSpec {
        engine,
        topology,
        catalog: std::sync::Arc::new(catalog),
        registry: std::sync::Arc::new(registry),
        seed: cfg.seed,
    };
    let mut sim = Simulator::new(spec, cfg).map_err(|e| e.to_string())?;
    driver.load(&mut sim).map_err(|e| format!("basic-ycsb load: {e}"))?;
    let report = sim.run(&mut driver)?;
    Ok((report, driver))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(seed: u64) -> SimConfig {
        let mut cfg = SimConfig::new(seed).with_faults();
        cfg.duration = Duration::from_millis(1000);
        cfg
    }

    #[test]
    fn basic_ycsb_holds_under_faults_on_basic() {
        let mut reads = 0;
        for seed in 0..12 {
            match simulate(litmus_engines::BASIC, 3, 6, cfg(seed)) {
                Ok((_, d)) => reads += d.seen.0,
                Err(e) => panic!(
                    "seed {seed}: {e}\nreplay: litmus sim --engine basic --workload basic-ycsb --faults --seed {seed}"
                ),
            }
        }
        assert!(reads > 100, "only {reads} reads checked");
    }

    /// Break the rule: `base` applies each part on arrival; the same checks must catch it.
    /// (Without faults: reordering by network latency is enough, and `nocc`'s machinery, which
    /// `base` runs, does not survive every fault the simulator injects — the reason the
    /// simulator's own every-engine test skips `nocc`.)
    #[test]
    fn basic_ycsb_checks_fail_under_base() {
        let no_dup = |seed| {
            let mut c = SimConfig::new(seed);
            c.duration = Duration::from_millis(1000);
            c
        };
        let failed = (0..12)
            .filter(|&seed| matches!(simulate_checking(litmus_engines::BASE, 3, 6, no_dup(seed), true), Err(e) if e.contains("basic-ycsb")))
            .count();
        assert!(failed > 0, "the checks never failed on base: they check nothing");
    }
}
