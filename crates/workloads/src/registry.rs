//! # The workload registry: one definition per workload
//!
//! A [`WorkloadDef`] is everything the rest of the tree knows about a workload: its name and
//! one line of description, the flags a sweep may vary, how it is built from the flags (and
//! which form runs on a given engine), its schema, its declared invariants for `litmus
//! analyze`, and its simulator run for `litmus sim`. Each workload's module defines its own
//! (`DEF`); [`crate::ALL`] lists them, one line each, and `litmus bench`, `litmus sim`,
//! `litmus analyze` and `litmus server` read that list. Adding a workload is its module and
//! one line in [`crate::ALL`].
//!
//! What a workload needs of the engine under `litmus bench` is its generator's
//! [`Workload::needs_isolation`] (it may depend on the options); under `litmus sim` it is
//! [`SimDef::needs`].

use crate::granola_counters::CountersOptions;
use crate::salt_micro::SaltMicroOptions;
use crate::ticketing::TicketingOptions;
use crate::tpcc::TpccOptions;
use crate::tpcc_neworder::NewOrderOptions;
use crate::workload::Workload;
use crate::ycsb::YcsbOptions;
use crate::ycsb_t::YcsbTOptions;
use litmus_analyze::WorkloadSpec;
use litmus_core::Catalog;
use litmus_protocol::engine::Guarantee;
use litmus_protocol::{EngineKind, Registry};
use litmus_runtime::sim::SimConfig;
use litmus_runtime::Topology;

/// Builds a workload's generator and checker from the flags.
pub type Build = fn(&Options) -> anyhow::Result<Box<dyn Workload>>;

/// Builds the form of a workload that runs on an engine.
pub type BuildFor = fn(&Options, EngineKind) -> anyhow::Result<Box<dyn Workload>>;

/// One workload: the single definition every command reads (see the module doc).
pub struct WorkloadDef {
    /// What users name it (`litmus bench <name>`, `litmus sim --workload <name>`).
    pub name: &'static str,
    /// One line: what it runs and what it checks.
    pub about: &'static str,
    /// The flags of its own a `--sweep` may vary (besides `clients`, `nodes`, `partitions`).
    pub sweeps: &'static [&'static str],
    /// Builds its generator and checker from the flags; `None`: a simulator-only workload.
    pub build: Option<Build>,
    /// The form that runs on `engine` (e.g. one-round transactions on an engine that runs
    /// only those); `None`: [`WorkloadDef::build`]'s on every engine.
    pub build_for: Option<BuildFor>,
    /// Adds its tables and procedures to a server's (`None`: none of its own, or shared with
    /// the entry before it that has them).
    pub schema: Option<fn(&mut Catalog, &mut Registry)>,
    /// Its tables, procedures and declared invariants as `litmus analyze` reads them.
    pub analysis: Option<fn() -> anyhow::Result<WorkloadSpec>>,
    /// Its run under the deterministic simulator.
    pub sim: Option<SimDef>,
}

/// A workload's run under `litmus sim`.
pub struct SimDef {
    /// The weakest guarantee under which its checks hold, and why: on an engine that does not
    /// give it, its "failures" would be the workload's, not the engine's.
    pub needs: Option<(Guarantee, &'static str)>,
    /// Nodes when `--nodes` is not given, for a seed.
    pub nodes: fn(seed: u64) -> u32,
    /// `--step-cost-us` when not given.
    pub step_cost_us: u64,
    /// One seed: the outcome line, or what failed (`Err`: the cluster could not be set up,
    /// which fails the command rather than the seed).
    pub run: fn(&SimRun, SimConfig) -> anyhow::Result<Result<String, String>>,
}

/// The settings of one simulated seed besides the simulator's own.
#[derive(Clone, Copy, Debug)]
pub struct SimRun {
    pub engine: EngineKind,
    pub topology: Topology,
    pub seed: u64,
    /// `--rows` (ycsb-t's table).
    pub rows: u64,
}

/// Three nodes, whatever the seed.
pub fn three_nodes(_seed: u64) -> u32 {
    3
}

/// The flags a workload is built from (`litmus bench`'s, gathered).
#[derive(Clone, Copy, Debug)]
pub struct Options<'a> {
    pub ycsb: &'a YcsbOptions,
    pub salt: &'a SaltMicroOptions,
    /// `--base-txns` (tpcc, ticketing).
    pub base_txns: Option<u32>,
    pub tpcc: &'a TpccOptions,
    pub ticketing: &'a TicketingOptions,
    pub ycsb_t: &'a YcsbTOptions,
    pub neworder: &'a NewOrderOptions,
    pub counters: &'a CountersOptions,
    /// `--distributed` (tpcc-neworder, granola-counters).
    pub distributed: Option<f64>,
    pub nodes: u32,
    pub partitions: u32,
    /// Show progress bars while loading.
    pub progress: bool,
}

impl WorkloadDef {
    /// Whether `litmus bench` runs it.
    pub fn benchable(&self) -> bool {
        self.build.is_some()
    }

    /// Its generator and checker as the flags describe.
    pub fn build(&self, opts: &Options) -> anyhow::Result<Box<dyn Workload>> {
        match self.build {
            Some(build) => build(opts),
            None => Err(UnknownWorkload(self.name.into()).into()),
        }
    }

    /// [`WorkloadDef::build`], in the form that runs on `engine`.
    pub fn build_for(&self, opts: &Options, engine: EngineKind) -> anyhow::Result<Box<dyn Workload>> {
        match self.build_for {
            Some(build_for) if self.build.is_some() => build_for(opts, engine),
            _ => self.build(opts),
        }
    }

    /// Whether a `--sweep` of `flag` changes anything for it.
    pub fn sweeps(&self, flag: &str) -> bool {
        self.sweeps.contains(&flag)
    }
}

impl std::fmt::Debug for WorkloadDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadDef").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Names of the workloads `litmus bench` runs, in registration order.
pub fn bench_names() -> Vec<&'static str> {
    crate::ALL.iter().filter(|w| w.benchable()).map(|w| w.name).collect()
}

/// Names of the workloads `litmus sim` runs, in registration order.
pub fn sim_names() -> Vec<&'static str> {
    crate::ALL.iter().filter(|w| w.sim.is_some()).map(|w| w.name).collect()
}

/// Names of the workloads `litmus analyze` knows, in its order ([`crate::ANALYZED`]).
pub fn analyzable_names() -> Vec<&'static str> {
    crate::ANALYZED.iter().map(|w| w.name).collect()
}

/// Unknown workload name (for `litmus bench` and `litmus analyze`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown workload {0:?} (known: {known})", known = bench_names().join(", "))]
pub struct UnknownWorkload(pub String);

/// Unknown simulation workload name (for `litmus sim --workload`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown simulation workload {0:?} (known: {known})", known = sim_names().join(", "))]
pub struct UnknownSimWorkload(pub String);

/// The workload `litmus bench` runs as `name`.
pub fn by_name(name: &str) -> Result<&'static WorkloadDef, UnknownWorkload> {
    crate::ALL.iter().copied().find(|w| w.name == name && w.benchable()).ok_or_else(|| UnknownWorkload(name.into()))
}

/// The workload `litmus sim --workload name` runs.
pub fn sim_by_name(name: &str) -> Result<&'static WorkloadDef, UnknownSimWorkload> {
    crate::ALL
        .iter()
        .copied()
        .find(|w| w.name == name && w.sim.is_some())
        .ok_or_else(|| UnknownSimWorkload(name.into()))
}

/// The analyzer's view of the workload `name` (`litmus analyze <name>`).
pub fn analysis(name: &str) -> anyhow::Result<WorkloadSpec> {
    match crate::ALL.iter().find(|w| w.name == name).and_then(|w| w.analysis) {
        Some(spec) => spec(),
        None => Err(UnknownWorkload(name.into()).into()),
    }
}

/// Every table and procedure a `litmus server` needs to serve any workload: the built-ins and
/// each workload's (their schemas and procedures do not depend on workload options), then the
/// `--reset` procedure over all of them.
pub fn full_schema() -> (Catalog, Registry) {
    let mut catalog = litmus_protocol::builtin::catalog();
    let mut registry = litmus_protocol::builtin::registry();
    for schema in crate::ALL.iter().filter_map(|w| w.schema) {
        schema(&mut catalog, &mut registry);
    }
    crate::reset::register(&catalog, &mut registry);
    (catalog, registry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_each_command_finds_its_workloads() {
        for (i, w) in crate::ALL.iter().enumerate() {
            assert!(crate::ALL[..i].iter().all(|v| v.name != w.name), "{} registered twice", w.name);
            assert!(w.benchable() || w.sim.is_some(), "{} runs nowhere", w.name);
            if w.benchable() {
                assert_eq!(by_name(w.name).unwrap().name, w.name);
            }
            if w.sim.is_some() {
                assert_eq!(sim_by_name(w.name).unwrap().name, w.name);
            }
        }
        let mut analyzed: Vec<_> = crate::ALL.iter().filter(|w| w.analysis.is_some()).map(|w| w.name).collect();
        let mut listed = analyzable_names();
        analyzed.sort_unstable();
        listed.sort_unstable();
        assert_eq!(analyzed, listed, "ANALYZED lists exactly the workloads with an analysis");
        assert_eq!(analyzable_names(), ["tpcc", "ticketing", "ycsb"]);
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        assert_eq!(
            by_name("tpch").unwrap_err().to_string(),
            "unknown workload \"tpch\" (known: ycsb, salt-contention, salt-position, salt-rw, tpcc, ticketing, \
             ycsb-t, basic-ycsb, tpcc-neworder, granola-counters)"
        );
        assert_eq!(
            sim_by_name("ycsb").unwrap_err().to_string(),
            "unknown simulation workload \"ycsb\" (known: acked, bank, minibank, salt-chains, ycsb-t, basic-ycsb, tpcc-neworder)"
        );
        assert!(by_name("acked").is_err(), "a simulator-only workload is not a bench workload");
        assert!(analysis("salt-rw").is_err());
    }

    #[test]
    fn sweeps_name_only_flags_of_the_workload() {
        assert!(by_name("ycsb").unwrap().sweeps("records") && !by_name("ycsb").unwrap().sweeps("rows"));
        assert!(by_name("salt-rw").unwrap().sweeps("read-fraction"));
        assert!(by_name("tpcc-neworder").unwrap().sweeps("distributed"));
    }
}
