//! TPC-C on the deterministic simulator: load a small database through the verification
//! client, run the mix from every simulated client under faults, heal, then check every
//! consistency condition through `Simulator::request`.

use super::{check, load, Tpcc, LOAD_SEED};
use crate::workload::{TxnRequest, Workload};
use litmus_core::{Error, Value};
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_runtime::sim::{SimDriver, Simulator};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::time::Duration;

/// Virtual time one load or check call may take, retries included, before the simulation
/// gives up on it.
pub const SIM_CALL_MAX: Duration = Duration::from_secs(60);
/// Rows per load call in the simulator (small: a request must finish before the verification
/// client's timeout).
pub const SIM_LOAD_BATCHES: load::LoadBatches = load::LoadBatches { items: 20, customers: 5, orders: 2 };
/// Virtual time let pass between two attempts.
pub const SIM_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// Calls a procedure from the simulator's verification client, retrying "busy" errors for at
/// most [`SIM_CALL_MAX`] of virtual time.
pub fn sim_call(sim: &mut Simulator, procedure: &str, args: Vec<Value>) -> Result<Vec<Value>, Error> {
    sim_call_within(sim, procedure, args, SIM_CALL_MAX, SIM_RETRY_PAUSE)
}

/// [`sim_call`] retrying for at most `max` of virtual time, `pause` apart.
pub fn sim_call_within(
    sim: &mut Simulator,
    procedure: &str,
    args: Vec<Value>,
    max: Duration,
    pause: Duration,
) -> Result<Vec<Value>, Error> {
    let started = sim.now();
    loop {
        let body = RequestBody::Call { procedure: procedure.into(), args: args.clone(), retrying_for: Duration::ZERO };
        match sim.request(body) {
            Ok(ResponseBody::Returned(v)) => return Ok(v),
            Ok(other) => return Err(Error::Internal(format!("{procedure} answered {other:?}"))),
            Err(e)
                if (e.is_retryable() || matches!(e, Error::Unavailable { .. }))
                    && sim.now().0 - started.0 < max.as_nanos() as u64 =>
            {
                sim.idle(pause)?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The driver: the TPC-C mix from every client; [`SimDriver::verify`] quiesces and checks.
pub struct TpccSim {
    tpcc: Tpcc,
    /// Per kind: (ok, user aborts, other failures).
    pub outcomes: BTreeMap<&'static str, (u64, u64, u64)>,
    /// User aborts of a kind that must never abort itself.
    unexpected: Vec<String>,
    /// The check's verdict, after `verify`.
    pub verdict: Option<String>,
    /// Per client, the transaction it has in flight (answered in `done`).
    in_flight: BTreeMap<usize, TxnRequest>,
    /// Per client, the next step of its business transaction ([`Workload::next_step`]: a
    /// Delivery as ten district transactions), issued before anything new.
    steps: BTreeMap<usize, TxnRequest>,
}

impl TpccSim {
    pub fn new(tpcc: Tpcc) -> TpccSim {
        TpccSim {
            tpcc,
            outcomes: BTreeMap::new(),
            unexpected: Vec::new(),
            verdict: None,
            in_flight: BTreeMap::new(),
            steps: BTreeMap::new(),
        }
    }

    /// Loads the initial population (before `Simulator::run`, fault-free).
    pub fn load(&self, sim: &mut Simulator) -> Result<(), Error> {
        for call in load::plan_in_batches(self.tpcc.scale(), LOAD_SEED, SIM_LOAD_BATCHES) {
            sim_call(sim, call.procedure, call.args)?;
        }
        Ok(())
    }

    /// Checks the database (`fresh`: also 3.3.2.11).
    pub fn check(&self, sim: &mut Simulator, fresh: bool) -> anyhow::Result<check::CheckSummary> {
        let mut call = |p: &str, args: Vec<Value>| sim_call(sim, p, args);
        self.tpcc.check_with(&mut call, fresh)
    }

    /// Transactions answered `Ok`, over all kinds.
    pub fn committed(&self) -> u64 {
        self.outcomes.values().map(|o| o.0).sum()
    }
}

impl SimDriver for TpccSim {
    fn next(&mut self, client: usize, rng: &mut ChaCha8Rng) -> Option<RequestBody> {
        let t = self.steps.remove(&client).unwrap_or_else(|| self.tpcc.generate(rng));
        let body =
            RequestBody::Call { procedure: t.procedure.into(), args: t.args.clone(), retrying_for: Duration::ZERO };
        self.in_flight.insert(client, t);
        Some(body)
    }

    fn done(&mut self, client: usize, _: &RequestBody, result: &Result<ResponseBody, Error>) {
        let Some(req) = self.in_flight.remove(&client) else { return };
        if let Ok(ResponseBody::Returned(out)) = result {
            if let Some(next) = self.tpcc.next_step(&req, out) {
                self.steps.insert(client, next);
            }
        }
        let kind = req.kind;
        let o = self.outcomes.entry(kind).or_default();
        match result {
            Ok(_) => o.0 += 1,
            Err(Error::UserAbort(why)) => {
                o.1 += 1;
                if kind != super::KIND_NEW_ORDER || !why.contains("not found") {
                    self.unexpected.push(format!("{kind}: {why}"));
                }
            }
            Err(_) => o.2 += 1,
        }
    }

    fn verify(&mut self, sim: &mut Simulator) -> Result<(), String> {
        if !self.unexpected.is_empty() {
            return Err(format!("unexpected user aborts: {}", self.unexpected.join("; ")));
        }
        let summary = self.check(sim, false).map_err(|e| format!("{e:#}"))?;
        self.verdict = Some(summary.to_string());
        Ok(())
    }
}
