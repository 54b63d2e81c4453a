//! # `tpcc-neworder`: TPC-C New-Order alone (Bailis et al., VLDB'15 §6.2, Figs. 5–6)
//!
//! The paper's evaluation of coordination avoidance: New-Order only, one warehouse per
//! partition, no think time, clients swept to saturation; `coordfree` (RAMP-Fast with the
//! nested atomic id increment) against distributed two-phase locking (`acid`).
//!
//! * The database, procedures and checker are TPC-C's ([`crate::tpcc`]): the plain (ACID)
//!   `tpcc_new_order` procedure runs unchanged on every engine; `coordfree` runs it
//!   coordination-free because the analyzer's verdict registered with it
//!   ([`crate::analysis::declare_tpcc_verdicts`]) says only its sequential order id needs
//!   coordination, confined to the district's partition.
//! * `--warehouses-per-partition K` (default 1): `K × --partitions` warehouses (`--warehouses`,
//!   if given, must agree). `--distributed F` (default 0.1, the paper's "10% of New-Order
//!   transactions span multiple warehouses"): a New-Order is distributed with probability F,
//!   and then exactly one of its lines is supplied by another warehouse; the others are local.
//! * `--scale-div` defaults to 10 here (300 customers per district, 10,000 items) so that the
//!   load takes seconds; New-Order's contention is on the district's next-order id, which the
//!   divisor does not change.
//! * After every run TPC-C's consistency conditions 3.3.2.1–12 are checked (3.3.2.2–4 are the
//!   ones New-Order can break: sequential ids, contiguous new-orders, line counts), on every
//!   engine.
//! * `--home-routing`: client i, attached to node i mod `--nodes`, orders only for the
//!   warehouses of that node, so at `--distributed 0` a New-Order never leaves its node (the
//!   distribution sweep's 0% is really local). Without it, warehouses are drawn uniformly.
//!
//! [`NewOrderSim`] is the simulator's driver (`litmus sim --workload tpcc-neworder`): load, run
//! New-Orders from every client under faults, heal, check the conditions.

use crate::mix::MixSpec;
use crate::tpcc::sim::{sim_call, SIM_LOAD_BATCHES};
use crate::tpcc::txns::NewOrderInput;
use crate::tpcc::{gen, load, Tpcc, TpccOptions, TxnType, KIND_NEW_ORDER, LOAD_SEED};
use crate::workload::{RetryPolicy, RunStats, TxnRequest, Workload};
use litmus_client::Client;
use litmus_core::{Catalog, Error, Value};
use litmus_protocol::engine::Guarantee;
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::Registry;
use litmus_runtime::sim::{SimDriver, Simulator};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::time::Duration;

pub const NAME: &str = "tpcc-neworder";

/// Settings of `tpcc-neworder` (with `--partitions`, `--warehouses` and `--scale-div`).
#[derive(clap::Args, Clone, Debug, PartialEq, Serialize)]
#[command(next_help_heading = "TPC-C New-Order options (tpcc-neworder)")]
pub struct NewOrderOptions {
    /// tpcc-neworder: warehouses per partition (warehouses = K × --partitions).
    #[arg(long = "warehouses-per-partition", value_name = "K", default_value_t = 1)]
    pub warehouses_per_partition: u64,

    /// Fraction of New-Orders with one line supplied by another warehouse: `--distributed`,
    /// shared with granola-counters (see `BenchArgs::distributed`).
    #[arg(skip = DISTRIBUTED_DEFAULT)]
    pub distributed: f64,

    /// tpcc-neworder: each client orders for the warehouses of its own node (client i runs on
    /// node i mod --nodes), so a New-Order that is not distributed touches that node only.
    #[arg(long = "home-routing")]
    pub home_routing: bool,

    /// The cluster's nodes (`--nodes`, shared), for `--home-routing`.
    #[arg(skip = 1u32)]
    pub nodes: u32,
}

impl Default for NewOrderOptions {
    fn default() -> Self {
        NewOrderOptions { warehouses_per_partition: 1, distributed: DISTRIBUTED_DEFAULT, home_routing: false, nodes: 1 }
    }
}

/// `--distributed` when not given: TPC-C's rate of New-Orders with a remote line (~10%).
pub const DISTRIBUTED_DEFAULT: f64 = 0.1;

/// The scale divisor `tpcc-neworder` uses when `--scale-div` is left at TPC-C's default.
pub const SCALE_DIV_DEFAULT: u64 = 10;

/// Bad `tpcc-neworder` settings.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum NewOrderConfigError {
    #[error("--distributed must be a fraction in [0, 1], got {0}")]
    Distributed(f64),
    #[error("--warehouses-per-partition must be at least 1")]
    PerPartition,
    #[error("--warehouses {given} disagrees with --warehouses-per-partition {per} × --partitions {partitions}")]
    Warehouses { given: u64, per: u64, partitions: u32 },
    #[error("a distributed New-Order needs two warehouses or more")]
    OneWarehouse,
    #[error(transparent)]
    Tpcc(#[from] crate::tpcc::TpccConfigError),
}

/// The workload.
pub struct TpccNewOrder {
    tpcc: Tpcc,
    distributed: f64,
    /// With `--home-routing`: the warehouses of each node (warehouse w lives on partition
    /// w mod partitions, partition p on node p mod nodes); empty without it.
    home: Vec<Vec<u64>>,
}

impl TpccNewOrder {
    /// `tpcc` gives `--warehouses` (TPC-C's default 2 means "not given") and `--scale-div`.
    pub fn new(
        opts: &NewOrderOptions,
        tpcc: &TpccOptions,
        partitions: u32,
        progress: bool,
    ) -> Result<TpccNewOrder, NewOrderConfigError> {
        if !(0.0..=1.0).contains(&opts.distributed) {
            return Err(NewOrderConfigError::Distributed(opts.distributed));
        }
        if opts.warehouses_per_partition == 0 {
            return Err(NewOrderConfigError::PerPartition);
        }
        let warehouses = opts.warehouses_per_partition * u64::from(partitions.max(1));
        if tpcc.warehouses != TpccOptions::DEFAULT.warehouses && tpcc.warehouses != warehouses {
            return Err(NewOrderConfigError::Warehouses {
                given: tpcc.warehouses,
                per: opts.warehouses_per_partition,
                partitions,
            });
        }
        if opts.distributed > 0.0 && warehouses < 2 {
            return Err(NewOrderConfigError::OneWarehouse);
        }
        let scale_div =
            if tpcc.scale_div == TpccOptions::DEFAULT.scale_div { SCALE_DIV_DEFAULT } else { tpcc.scale_div };
        let inner = TpccOptions {
            warehouses,
            base_txns: Some(0),
            variant: None,
            scale_div,
            one_round: false,
            ..TpccOptions::DEFAULT
        };
        let mut home = vec![];
        if opts.home_routing {
            let (parts, nodes) = (u64::from(partitions.max(1)), u64::from(opts.nodes.max(1)));
            home = vec![vec![]; nodes as usize];
            for w in 1..=warehouses {
                home[((w % parts) % nodes) as usize].push(w);
            }
        }
        Ok(TpccNewOrder { tpcc: Tpcc::new(&inner, progress)?, distributed: opts.distributed, home })
    }

    /// The home warehouse of a New-Order drawn from `rng`, with `--home-routing`: one of the
    /// warehouses on the node of the client whose stream `rng` is (the harness and the
    /// simulator give client i stream i and attach it to node i mod nodes); any warehouse on a
    /// node that holds none (more nodes than partitions).
    fn home_warehouse(&self, rng: &mut ChaCha8Rng) -> Option<i64> {
        if self.home.is_empty() {
            return None;
        }
        let mine = &self.home[(rng.get_stream() % self.home.len() as u64) as usize];
        (!mine.is_empty()).then(|| mine[rng.gen_range(0..mine.len())] as i64)
    }

    pub fn tpcc(&self) -> &Tpcc {
        &self.tpcc
    }

    /// The one-round form (Granola §6.2; New-Order is independent), for engines that run
    /// one-round transactions only, on `partitions` partitions.
    pub fn with_one_round(mut self, partitions: u32) -> TpccNewOrder {
        self.tpcc = self.tpcc.with_one_round(partitions);
        self
    }

    /// A New-Order (TPC-C's inputs: customer, 5–15 items, 1% rolled back), all lines local,
    /// then with probability `distributed` one line supplied by another warehouse.
    pub fn new_order(&self, rng: &mut ChaCha8Rng) -> TxnRequest {
        let mut t = self.tpcc.generate_type(TxnType::NewOrder, rng);
        let Ok(mut inp) = NewOrderInput::parse(&t.args) else { return t };
        if let Some(w) = self.home_warehouse(rng) {
            inp.w = w;
        }
        for l in &mut inp.lines {
            l.supply_w = inp.w;
        }
        if rng.gen_bool(self.distributed) {
            let n = rng.gen_range(0..inp.lines.len());
            inp.lines[n].supply_w = gen::other_warehouse(rng, self.tpcc.scale(), inp.w as u64) as i64;
        }
        inp.lines.sort_unstable_by_key(|l| (l.supply_w, l.item));
        t.args = inp.to_args();
        t
    }
}

impl Workload for TpccNewOrder {
    fn name(&self) -> &'static str {
        NAME
    }

    fn describe(&self) -> String {
        let s = self.tpcc.scale();
        format!(
            "warehouses={} customers/district={} items={} distributed={} (New-Order only, no think time; \
             retried until committed)",
            s.warehouses, s.customers, s.items, self.distributed
        )
    }

    fn catalog(&self) -> Catalog {
        self.tpcc.catalog()
    }

    fn register(&self, registry: &mut Registry) {
        self.tpcc.register(registry);
        crate::analysis::declare_tpcc_verdicts(registry);
    }

    fn prepare(&self, clients: &mut dyn FnMut() -> Result<Client, Error>) -> anyhow::Result<()> {
        self.tpcc.prepare(clients)
    }

    fn generate(&self, rng: &mut ChaCha8Rng) -> TxnRequest {
        self.new_order(rng)
    }

    fn mix(&self) -> Option<MixSpec> {
        None
    }

    fn retry_policy(&self) -> RetryPolicy {
        self.tpcc.retry_policy()
    }

    fn needs_isolation(&self) -> Option<(Guarantee, &'static str)> {
        // Read atomic: coordfree runs it (CF-5 assigns the ids on the district's partition).
        Some((Guarantee::ReadAtomic, "its order ids (TPC-C 3.3.2.2-3) need sequential assignment"))
    }

    fn verify(&self, client: &mut Client, stats: &RunStats) -> anyhow::Result<String> {
        self.tpcc.verify(client, stats)
    }
}

/// The simulator's driver: New-Orders from every client; `verify` checks the conditions.
pub struct NewOrderSim {
    w: TpccNewOrder,
    /// Answered `Ok`, rolled back for an unused item, failed otherwise.
    pub committed: u64,
    pub rolled_back: u64,
    pub failed: u64,
    unexpected: Vec<String>,
    pub verdict: Option<String>,
}

impl NewOrderSim {
    pub fn new(w: TpccNewOrder) -> NewOrderSim {
        NewOrderSim { w, committed: 0, rolled_back: 0, failed: 0, unexpected: vec![], verdict: None }
    }

    /// Loads the database (before `Simulator::run`, fault-free).
    pub fn load(&self, sim: &mut Simulator, partitions: u32) -> Result<(), Error> {
        let mut plan = load::plan_in_batches(self.w.tpcc.scale(), LOAD_SEED, SIM_LOAD_BATCHES);
        if self.w.tpcc.is_one_round() {
            plan = crate::tpcc::oneround::load_plan(plan, partitions);
        }
        for call in plan {
            sim_call(sim, call.procedure, call.args)?;
        }
        Ok(())
    }
}

impl SimDriver for NewOrderSim {
    fn next(&mut self, _client: usize, rng: &mut ChaCha8Rng) -> Option<RequestBody> {
        let t = self.w.new_order(rng);
        Some(RequestBody::Call { procedure: t.procedure.into(), args: t.args, retrying_for: Duration::ZERO })
    }

    fn done(&mut self, _client: usize, _request: &RequestBody, result: &Result<ResponseBody, Error>) {
        match result {
            Ok(_) => self.committed += 1,
            Err(Error::UserAbort(why)) if why.contains("not found") => self.rolled_back += 1,
            Err(Error::UserAbort(why)) => self.unexpected.push(format!("{KIND_NEW_ORDER}: {why}")),
            Err(Error::Invalid(e)) => self.unexpected.push(format!("{KIND_NEW_ORDER} refused: {e}")),
            Err(_) => self.failed += 1,
        }
    }

    fn verify(&mut self, sim: &mut Simulator) -> Result<(), String> {
        if !self.unexpected.is_empty() {
            return Err(format!("unexpected failures: {}", self.unexpected.join("; ")));
        }
        let mut call = |p: &str, args: Vec<Value>| sim_call(sim, p, args);
        let summary = self.w.tpcc.check_with(&mut call, false).map_err(|e| format!("{e:#}"))?;
        self.verdict = Some(summary.to_string());
        Ok(())
    }
}

/// The scale of a simulated run: one warehouse per partition, 10 customers per district, 333
/// items (the load must fit a simulation's virtual time and a test's real time).
pub const SIM_SCALE_DIV: u64 = 300;

/// One seed of `litmus sim --workload tpcc-neworder`: load (fault-free), New-Orders from every
/// client under `cfg`'s faults, heal, then TPC-C's consistency conditions; the summary line,
/// or what failed.
pub fn simulate(
    engine: litmus_protocol::EngineKind,
    topology: litmus_runtime::Topology,
    mut cfg: litmus_runtime::sim::SimConfig,
) -> Result<String, String> {
    use litmus_runtime::ClusterSpec;
    use std::sync::Arc;
    let partitions = topology.partitions;
    let opts = NewOrderOptions { warehouses_per_partition: 1, distributed: 0.1, ..NewOrderOptions::default() };
    let tpcc = TpccOptions { scale_div: SIM_SCALE_DIV, ..TpccOptions::DEFAULT };
    let mut w = TpccNewOrder::new(&opts, &tpcc, partitions, false).map_err(|e| e.to_string())?;
    if !engine.capabilities().interactive {
        w = w.with_one_round(partitions); // granola, granola-locking, sinfonia
    }
    let mut catalog = litmus_protocol::builtin::catalog();
    catalog.merge(&w.catalog());
    let mut registry = litmus_protocol::builtin::registry();
    w.register(&mut registry);
    let seed = cfg.seed;
    let spec = ClusterSpec { engine, topology, catalog: Arc::new(catalog), registry: Arc::new(registry), seed };
    // As TPC-C's simulations (crates/bench/tests/tpcc_sim.rs): the lock tables of `acid` grow
    // large and their check is quadratic; the verification client outwaits a transaction that
    // lost a reply it cannot recover.
    cfg.invariant_check_every = 64;
    cfg.request_timeout = Duration::from_secs(3);
    let mut sim = Simulator::new(spec, cfg).map_err(|e| e.to_string())?;
    let mut driver = NewOrderSim::new(w);
    driver.load(&mut sim, partitions).map_err(|e| format!("load failed: {e}"))?;
    let report = sim.run(&mut driver)?;
    Ok(format!(
        "{report} | new-orders committed {} rolled back {} failed {} | {}",
        driver.committed,
        driver.rolled_back,
        driver.failed,
        driver.verdict.unwrap_or_default()
    ))
}

/// `tpcc-neworder` in the workload registry ([`crate::ALL`]); its schema is `tpcc`'s.
pub const DEF: crate::WorkloadDef = crate::WorkloadDef {
    name: NAME,
    about: "VLDB'15 §6.2 / Granola Fig. 13: TPC-C New-Orders only, a warehouse per partition",
    sweeps: &["distributed"],
    build: Some(|o| {
        let mut opts = o.neworder.clone();
        opts.distributed = o.distributed.unwrap_or(opts.distributed);
        opts.nodes = o.nodes;
        Ok(Box::new(TpccNewOrder::new(&opts, o.tpcc, o.partitions, o.progress)?))
    }),
    // The one-round form on an engine that runs only one-round transactions.
    build_for: Some(|o, engine| {
        if engine.capabilities().interactive {
            return DEF.build(o);
        }
        let mut opts = o.neworder.clone();
        opts.distributed = o.distributed.unwrap_or(opts.distributed);
        let w = TpccNewOrder::new(&opts, o.tpcc, o.partitions, o.progress)?;
        Ok(Box::new(w.with_one_round(o.partitions)))
    }),
    schema: None,
    analysis: None,
    sim: Some(crate::SimDef {
        needs: Some((Guarantee::ReadAtomic, "its order ids need sequential assignment")),
        nodes: crate::registry::three_nodes,
        step_cost_us: 0,
        run: |run, cfg| Ok(simulate(run.engine, run.topology, cfg)),
    }),
};
