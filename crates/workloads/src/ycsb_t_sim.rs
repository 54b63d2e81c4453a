//! `ycsb-t` on the deterministic simulator (`litmus sim --workload ycsb-t`): Omid §V's
//! transactions ([`crate::ycsb_t`]) from every simulated client while a scripted crash takes
//! down the oracle's node (node 0) just after a commit request reaches it — the oracle alone
//! there (`replicas = 1`: its failover is the node's restart), or one member of its replica
//! group (`replicas > 1`: another member takes over) — on top of the random faults. After the faults heal, every row and log row is read as the bench's
//! verify does ([`Tally`]), and:
//!
//! * the snapshot-isolation verdict of [`crate::ycsb_t`] holds;
//! * nothing acknowledged is lost: the pairs written by transactions the clients were told
//!   committed are at most the pairs the log rows record (outcome-unknown ones may add);
//! * every check call is answered: the verify is retried for at most [`SIM_VERIFY_MAX`] of
//!   virtual time, and the simulator's liveness check ([`litmus_runtime::sim`]) fails the run
//!   if a live coordinator leaves any request unanswered after the faults heal.

use crate::workload::Workload;
use crate::ycsb_t::{Mix, Tally, YcsbT, YcsbTOptions, LOAD_PROCEDURE};
use litmus_core::{Error, NodeId, Value};
use litmus_omid::messages::Request as OracleCall;
use litmus_omid::node::{OracleRequest, OracleWire, ORACLE, ORACLE_ROLE};
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::{Addr, Envelope, GroupId};
use litmus_runtime::sim::{SimDriver, Simulator};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// Rows in the simulated table by default (pairs: half as many).
pub const SIM_ROWS: u64 = 64;
/// Rows per load call (small: a call must finish within the simulated client's timeout even
/// when messages cost CPU time).
pub const SIM_LOAD_BATCH_ROWS: u64 = 50;
/// Virtual time one load or check call may take, retries included.
pub const SIM_VERIFY_MAX: Duration = Duration::from_secs(20);
/// The liveness bound an omid run is held to (tighter than the simulator's default).
pub const OMID_LIVENESS_BOUND: Duration = Duration::from_secs(5);
/// Virtual time between two attempts of a check call.
const SIM_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The driver; see the module doc.
pub struct YcsbTSim {
    ycsbt: YcsbT,
    rows: u64,
    /// Pairs written by transactions acknowledged as committed.
    acked_pairs: i64,
    pub committed: u64,
    pub failed: u64,
    /// The verify's tally, once run.
    pub tally: Option<Tally>,
}

impl YcsbTSim {
    /// A table of `rows` rows (even, at least `2 * PAIRS_PER_TXN_MAX`).
    pub fn new(rows: u64) -> Result<YcsbTSim, litmus_core::InvalidInput> {
        let ycsbt = YcsbT::new(YcsbTOptions { mix: Some(Mix::Complex.name().into()) }, rows, false)?;
        Ok(YcsbTSim { ycsbt, rows: rows / 2 * 2, acked_pairs: 0, committed: 0, failed: 0, tally: None })
    }

    /// The workload's tables and procedures, for the simulated cluster's spec.
    pub fn workload(&self) -> &YcsbT {
        &self.ycsbt
    }

    /// Loads the rows through the verification client (before `Simulator::run`, fault-free).
    pub fn load(&self, sim: &mut Simulator) -> Result<(), Error> {
        let mut start = 0;
        while start < self.rows {
            let count = SIM_LOAD_BATCH_ROWS.min(self.rows - start);
            sim_call(sim, LOAD_PROCEDURE, vec![Value::Int(start as i64), Value::Int(count as i64)])?;
            start += count;
        }
        Ok(())
    }

    /// The oracle-crash schedule for `seed`: node 0 (where the oracle starts) crashes just
    /// after a commit request with writes reaches the oracle, at a random point of the run.
    /// With three replicas or more the node is lost for good (the oracle's replica group and
    /// node 0's coordinator's group elect new leaders elsewhere); otherwise it stays down for a
    /// while (restarted during the run) or until the faults heal.
    pub fn schedule_oracle_crash(sim: &mut Simulator, seed: u64, duration: Duration, replicas: u32) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6f6d_6964_6372_6173);
        let span = duration.as_millis().max(10) as u64;
        let after = Duration::from_millis(rng.gen_range(span / 5..=span * 3 / 5));
        let down_for = if rng.gen_bool(0.5) {
            Duration::from_millis(rng.gen_range(100..=600))
        } else {
            duration // restarted when the faults heal
        };
        let committing = |env: &Envelope| {
            matches!(env.to, ORACLE | Addr::Replica(GroupId::Role(ORACLE_ROLE), _))
                && matches!(OracleWire::peek(&env.msg),
                    Some(OracleWire::Request(OracleRequest { body: OracleCall::Commit { write_set, .. }, .. }))
                        if !write_set.is_empty())
        };
        if replicas >= 3 {
            sim.lose_on_delivery(NodeId(0), after, Duration::from_millis(3), Box::new(committing));
        } else {
            sim.crash_on_delivery(NodeId(0), after, Duration::from_millis(3), down_for, Box::new(committing));
        }
    }
}

/// Calls a procedure from the verification client, retrying retryable errors and timeouts for
/// at most [`SIM_VERIFY_MAX`] of virtual time.
pub fn sim_call(sim: &mut Simulator, procedure: &str, args: Vec<Value>) -> Result<Vec<Value>, Error> {
    crate::tpcc::sim::sim_call_within(sim, procedure, args, SIM_VERIFY_MAX, SIM_RETRY_PAUSE)
}

impl SimDriver for YcsbTSim {
    fn next(&mut self, _client: usize, rng: &mut ChaCha8Rng) -> Option<RequestBody> {
        let t = self.ycsbt.generate(rng);
        Some(RequestBody::Call { procedure: t.procedure.into(), args: t.args, retrying_for: Duration::ZERO })
    }

    fn done(&mut self, _client: usize, request: &RequestBody, result: &Result<ResponseBody, Error>) {
        let RequestBody::Call { args, .. } = request else { return };
        match result {
            Ok(ResponseBody::Returned(_)) => {
                self.committed += 1;
                let written = args.get(2).and_then(Value::as_bytes).map_or(0, |b| b.len() / 4);
                self.acked_pairs += written as i64;
            }
            _ => self.failed += 1,
        }
    }

    fn verify(&mut self, sim: &mut Simulator) -> Result<(), String> {
        let mut call = |procedure: &str, args: Vec<Value>| sim_call(sim, procedure, args);
        let tally = Tally::collect(self.rows, &mut call).map_err(|e| format!("ycsb-t verify: {e:#}"))?;
        let mut violations = tally.violations(self.rows);
        if tally.written < self.acked_pairs {
            violations.push(format!(
                "acknowledged transactions wrote {} pairs, the log records {}: an acknowledged commit was lost",
                self.acked_pairs, tally.written
            ));
        }
        self.tally = Some(tally);
        if violations.is_empty() {
            Ok(())
        } else {
            Err(format!("ycsb-t: {}", violations.join("; ")))
        }
    }
}

/// One `ycsb-t` simulation of `engine` on `nodes` nodes and `partitions` partitions with the
/// oracle-crash schedule: load, run, heal, verify, liveness. The catalog and registry hold the
/// built-in procedures and ycsb-t's.
pub fn simulate(
    engine: litmus_protocol::EngineKind,
    nodes: u32,
    partitions: u32,
    cfg: litmus_runtime::sim::SimConfig,
    rows: u64,
) -> Result<(litmus_runtime::sim::SimReport, YcsbTSim), String> {
    let topology = litmus_runtime::Topology::new(nodes, partitions).map_err(|e| e.to_string())?;
    simulate_in(engine, topology, cfg, rows)
}

/// [`simulate`] on a given layout (e.g. with replicated partitions).
pub fn simulate_in(
    engine: litmus_protocol::EngineKind,
    topology: litmus_runtime::Topology,
    mut cfg: litmus_runtime::sim::SimConfig,
    rows: u64,
) -> Result<(litmus_runtime::sim::SimReport, YcsbTSim), String> {
    use litmus_protocol::builtin;
    if engine == litmus_engines::OMID {
        // Omid resends every request until answered and bounds every operation (OP_DEADLINE):
        // it is held to a tighter bound than the engines that wait out a stall timeout.
        cfg.liveness_bound = OMID_LIVENESS_BOUND;
    }
    let seed = cfg.seed;
    let mut driver = YcsbTSim::new(rows).map_err(|e| e.to_string())?;
    let mut catalog = builtin::catalog();
    catalog.merge(&driver.workload().catalog());
    let mut registry = builtin::registry();
    driver.workload().register(&mut registry);
    let spec = litmus_runtime::ClusterSpec {
        engine,
        topology,
        catalog: std::sync::Arc::new(catalog),
        registry: std::sync::Arc::new(registry),
        seed,
    };
    let duration = cfg.duration;
    let mut sim = Simulator::new(spec, cfg).map_err(|e| e.to_string())?;
    driver.load(&mut sim).map_err(|e| format!("ycsb-t load: {e}"))?;
    YcsbTSim::schedule_oracle_crash(&mut sim, seed, duration, topology.replicas);
    let report = sim.run(&mut driver)?;
    Ok((report, driver))
}
