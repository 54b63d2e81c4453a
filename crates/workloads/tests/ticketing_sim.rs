//! The ticketing workload in the deterministic simulator with every fault on (message loss,
//! duplication, crashes, partitions): after the faults heal and Salt's accepted BASE
//! transactions roll forward, no seat is sold twice or lost and the counters match the seats.
//! A failure prints the seed to replay.

use litmus_core::{Error, Value};
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::{builtin, EngineKind, Registry};
use litmus_runtime::sim::{SimConfig, SimDriver, Simulator};
use litmus_runtime::{ClusterSpec, Topology};
use litmus_workloads::ticketing::{self, Ticketing, TicketingOptions};
use litmus_workloads::workload::Workload;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::time::Duration;

/// Seats per category: small, so the cursor wraps and seats are reused within a run.
const SEATS: u64 = 64;
/// Readings of the tables `verify` tries before giving up (each after half a second of idling).
const VERIFY_ATTEMPTS_MAX: usize = 120;

/// Loads the event, then drives the workload's own transaction mix.
struct TicketingDriver {
    workload: Ticketing,
    event_loaded: bool,
    seats_loaded: bool,
    /// User aborts other than "sold out": a transaction found an invariant broken.
    violations: Vec<String>,
    committed: u64,
}

impl TicketingDriver {
    fn new(base_txns: u32) -> TicketingDriver {
        let workload = Ticketing::new(TicketingOptions { seats_per_category: SEATS, base_txns }, false).unwrap();
        TicketingDriver { workload, event_loaded: false, seats_loaded: false, violations: vec![], committed: 0 }
    }
}

fn call(procedure: &str, args: Vec<Value>) -> RequestBody {
    RequestBody::Call { procedure: procedure.into(), args, retrying_for: Duration::ZERO }
}

/// Tries per chunk of a snapshot read: the network still loses 1% of messages after the faults
/// heal, and a snapshot is many requests, so retrying the whole snapshot rarely gets through.
const CHUNK_TRIES_MAX: usize = 8;

/// One chunk of a snapshot read, retried while it fails retryably (a lost message times out).
fn dump_chunk(sim: &mut Simulator, args: Vec<Value>) -> Result<Vec<Value>, Error> {
    let mut last = None;
    for _ in 0..CHUNK_TRIES_MAX {
        match sim.request(call(ticketing::PROC_DUMP, args.clone())) {
            Ok(ResponseBody::Returned(v)) => return Ok(v),
            Ok(other) => return Err(Error::Internal(format!("{} answered {other:?}", ticketing::PROC_DUMP))),
            Err(e) if e.is_retryable() || matches!(e, Error::Unavailable { .. }) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.expect("at least one try"))
}

impl SimDriver for TicketingDriver {
    fn next(&mut self, client: usize, rng: &mut ChaCha8Rng) -> Option<RequestBody> {
        // Client 0 loads (the loads overwrite, so repeating them until acknowledged is harmless
        // before any order exists); the others browse until the event is in.
        if !self.seats_loaded && client != 0 {
            return Some(call(ticketing::PROC_BROWSE, vec![]));
        }
        if !self.event_loaded {
            return Some(call(ticketing::PROC_LOAD_EVENT, vec![Value::Int(SEATS as i64)]));
        }
        if !self.seats_loaded {
            let args = vec![Value::Int(0), Value::Int(2 * SEATS as i64), Value::Int(SEATS as i64)];
            return Some(call(ticketing::PROC_LOAD_SEATS, args));
        }
        // Each client is its own session (the harness gives terminal `i` RNG stream `i`); the
        // per-call RNG is drawn from the simulator's, so the run still replays from its seed.
        let mut mine = ChaCha8Rng::seed_from_u64(rng.gen());
        mine.set_stream(client as u64);
        let t = self.workload.generate(&mut mine);
        Some(call(t.procedure, t.args))
    }

    fn done(&mut self, _client: usize, request: &RequestBody, result: &Result<ResponseBody, Error>) {
        let RequestBody::Call { procedure, .. } = request else { return };
        match (procedure.as_str(), result) {
            (ticketing::PROC_LOAD_EVENT, Ok(_)) => self.event_loaded = true,
            // Seats are loaded after the event was acknowledged (the event row is written
            // first, so an order can only start once both are in).
            (ticketing::PROC_LOAD_SEATS, Ok(_)) => self.seats_loaded = self.event_loaded,
            (_, Ok(_)) => self.committed += 1,
            (p, Err(Error::UserAbort(reason))) if reason != ticketing::SOLD_OUT => {
                self.violations.push(format!("{p}: {reason}"));
            }
            _ => {}
        }
    }

    fn verify(&mut self, sim: &mut Simulator) -> Result<(), String> {
        if let Some(v) = self.violations.first() {
            return Err(format!("{} transactions aborted on a broken invariant; first: {v}", self.violations.len()));
        }
        if !self.seats_loaded {
            return Ok(()); // heavy faults kept the event from loading: nothing to check
        }
        let mut last = String::new();
        for _ in 0..VERIFY_ATTEMPTS_MAX {
            let read = ticketing::read_snapshot(SEATS as i64, &mut |args| dump_chunk(sim, args));
            match read {
                Ok(s) => match ticketing::check_snapshot(&s, SEATS as i64) {
                    Ok(_) => {
                        // Stable? Accepted BASE transactions may still be rolling forward.
                        sim.idle(Duration::from_millis(500)).map_err(|e| e.to_string())?;
                        let again = ticketing::read_snapshot(SEATS as i64, &mut |args| dump_chunk(sim, args));
                        if again.as_ref() == Ok(&s) {
                            return Ok(());
                        }
                        last = "the tables were still changing".into();
                    }
                    Err(problems) => last = problems.join("; "),
                },
                Err(e) => last = e.to_string(),
            }
            sim.idle(Duration::from_millis(500)).map_err(|e| e.to_string())?;
        }
        // Say which table cannot be read (a lock that is never released shows up here).
        let mut probes = Vec::new();
        for (code, end) in [(0, 2), (1, 2 * SEATS as i64), (2, 1), (3, 1), (4, 1)] {
            let r = sim.request(call(ticketing::PROC_DUMP, vec![Value::Int(code), Value::Int(0), Value::Int(end)]));
            probes.push(format!("table {code}: {}", if r.is_ok() { "readable" } else { "NOT readable" }));
        }
        for cat in 0..2 {
            let r = sim.request(call(ticketing::PROC_AVAILABILITY, vec![Value::Int(cat)]));
            probes.push(format!("availability {cat} (no locks): {r:?}"));
        }
        Err(format!("ticketing invariants never held after the run: {last} [{}]", probes.join(", ")))
    }
}

fn spec(engine: EngineKind, seed: u64) -> ClusterSpec {
    let w = Ticketing::new(TicketingOptions { seats_per_category: SEATS, base_txns: 1 }, false).unwrap();
    let mut catalog = builtin::catalog();
    catalog.merge(&w.catalog());
    let mut registry: Registry = builtin::registry();
    w.register(&mut registry);
    ClusterSpec {
        engine,
        topology: Topology::new(3, 6).unwrap(),
        catalog: Arc::new(catalog),
        registry: Arc::new(registry),
        seed,
    }
}

#[test]
fn no_seat_is_sold_twice_under_faults() {
    let seeds: u64 = std::env::var("LITMUS_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300) / 30;
    for (engine, base_txns) in [(litmus_engines::ACID, 1), (litmus_engines::SALT, 1), (litmus_engines::SALT_LOCAL, 3)] {
        let mut committed = 0;
        for seed in 0..seeds {
            let mut cfg = SimConfig::new(seed).with_faults();
            cfg.faults.crash = 0.04;
            cfg.faults.partition = 0.04;
            cfg.duration = Duration::from_millis(1500);
            let mut sim = Simulator::new(spec(engine, seed), cfg).unwrap();
            let mut driver = TicketingDriver::new(base_txns);
            if let Err(e) = sim.run(&mut driver) {
                panic!("ticketing on {engine} (base-txns {base_txns}) seed {seed} failed: {e}");
            }
            committed += driver.committed;
        }
        assert!(committed > seeds, "{engine}: only {committed} transactions committed over {seeds} seeds");
    }
}

/// Diagnostic: which seeds fail for one engine (env LITMUS_TK_ENGINE, default salt;
/// LITMUS_TK_SEEDS, default 10; LITMUS_TK_FAULTS=0 turns the faults off), one line per seed.
#[test]
#[ignore]
fn diagnose_seeds() {
    let engine: EngineKind =
        litmus_engines::by_name(&std::env::var("LITMUS_TK_ENGINE").unwrap_or("salt".into())).unwrap();
    let seeds: u64 = std::env::var("LITMUS_TK_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    let faults = std::env::var("LITMUS_TK_FAULTS").map_or(true, |v| v == "1");
    for seed in 0..seeds {
        let mut cfg = SimConfig::new(seed);
        if faults {
            cfg = cfg.with_faults();
            cfg.faults.crash = 0.04;
            cfg.faults.partition = 0.04;
        }
        cfg.duration = Duration::from_millis(1500);
        let mut sim = Simulator::new(spec(engine, seed), cfg).unwrap();
        let mut driver = TicketingDriver::new(1);
        match sim.run(&mut driver) {
            Ok(r) => eprintln!("seed {seed}: ok ({} committed) {r}", driver.committed),
            Err(e) => eprintln!("seed {seed}: FAILED {e}"),
        }
    }
}
