//! Simulation workloads that check the runtime's own promises.
//!
//! [`AckedWrites`]: clients write unique keys of the built-in `kv` table (single writes and
//! two-key writes across partitions) and read back keys they were told were written. Two rules
//! are checked, under crashes, partitions, loss, duplication and reordering:
//!
//! 1. a read of an acknowledged key, at any time, returns the acknowledged value;
//! 2. after the run (every fault healed), every acknowledged write is readable.
//!
//! A write whose outcome is unknown (timeout) may or may not be there; it is never checked.
//! The checks hold for every engine, including `nocc`: each write is a distinct key, so they
//! test durability and persist-before-send, not isolation.

use super::{SimDriver, Simulator};
use litmus_core::{Error, Value};
use litmus_protocol::message::{RequestBody, ResponseBody};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::time::Duration;

/// Keys per client: client `c` writes keys `c * KEYS_PER_CLIENT + i`.
const KEYS_PER_CLIENT: i64 = 1 << 32;

#[derive(Default)]
pub struct AckedWrites {
    /// Appended to the procedure names: `""`, or `"_1r"` for their one-round forms (engines
    /// that run nothing else, e.g. Granola).
    suffix: &'static str,
    next_key: BTreeMap<usize, i64>,
    /// Acknowledged writes: key → value.
    acked: BTreeMap<i64, Vec<u8>>,
    /// Violations found during the run.
    violations: Vec<String>,
    pub reads_checked: u64,
    /// The key acknowledged last: half the reads ask for it, so a read served from a state
    /// older than the newest acknowledged write (a stale leader) is likely to be caught.
    newest: Option<i64>,
}

impl AckedWrites {
    pub fn new() -> Self {
        Self::default()
    }

    /// The same workload through the one-round forms (`kv_put_1r`, `kv_put2_1r`, `kv_get_1r`).
    pub fn one_round() -> Self {
        AckedWrites { suffix: "_1r", ..Self::default() }
    }

    /// The form an engine runs: one-round when it runs no interactive transactions.
    pub fn for_engine(engine: litmus_protocol::EngineKind) -> Self {
        if engine.capabilities().interactive {
            Self::new()
        } else {
            Self::one_round()
        }
    }

    pub fn acked(&self) -> usize {
        self.acked.len()
    }

    fn value_of(key: i64) -> Vec<u8> {
        format!("v{key}").into_bytes()
    }

    fn fresh_key(&mut self, client: usize) -> i64 {
        let n = self.next_key.entry(client).or_insert(0);
        *n += 1;
        client as i64 * KEYS_PER_CLIENT + *n
    }
}

fn args_int(args: &[Value], i: usize) -> i64 {
    args[i].as_int().expect("int argument")
}

impl SimDriver for AckedWrites {
    fn next(&mut self, client: usize, rng: &mut ChaCha8Rng) -> Option<RequestBody> {
        let roll: f64 = rng.gen();
        let suffix = self.suffix;
        let call = |procedure: &str, args: Vec<Value>| {
            let procedure = format!("{procedure}{suffix}");
            Some(RequestBody::Call { procedure, args, retrying_for: Duration::ZERO })
        };
        if roll < 0.2 && !self.acked.is_empty() {
            // Read back the newest acknowledged key, or a random one.
            let key = match self.newest {
                Some(k) if roll < 0.1 => k,
                _ => *self.acked.keys().nth(rng.gen_range(0..self.acked.len())).expect("in range"),
            };
            return call("kv_get", vec![Value::Int(key)]);
        }
        if roll < 0.4 {
            let (a, b) = (self.fresh_key(client), self.fresh_key(client) + (KEYS_PER_CLIENT / 2));
            return call(
                "kv_put2",
                vec![
                    Value::Int(a),
                    Value::Bytes(Self::value_of(a).into()),
                    Value::Int(b),
                    Value::Bytes(Self::value_of(b).into()),
                ],
            );
        }
        let k = self.fresh_key(client);
        call("kv_put", vec![Value::Int(k), Value::Bytes(Self::value_of(k).into())])
    }

    fn done(&mut self, _client: usize, request: &RequestBody, result: &Result<ResponseBody, Error>) {
        let RequestBody::Call { procedure, args, .. } = request else { return };
        let Ok(ResponseBody::Returned(values)) = result else { return };
        match procedure.strip_suffix(self.suffix).unwrap_or(procedure) {
            "kv_put" => {
                self.acked.insert(args_int(args, 0), Self::value_of(args_int(args, 0)));
                self.newest = Some(args_int(args, 0));
            }
            "kv_put2" => {
                for i in [0, 2] {
                    self.acked.insert(args_int(args, i), Self::value_of(args_int(args, i)));
                }
                self.newest = Some(args_int(args, 2));
            }
            "kv_get" => {
                self.reads_checked += 1;
                let key = args_int(args, 0);
                let want = Value::Bytes(Self::value_of(key).into());
                if values.first() != Some(&want) {
                    self.violations.push(format!("read of acknowledged key {key} returned {values:?}"));
                }
            }
            _ => {}
        }
    }

    fn verify(&mut self, sim: &mut Simulator) -> Result<(), String> {
        if let Some(v) = self.violations.first() {
            return Err(format!("{} violations during the run; first: {v}", self.violations.len()));
        }
        for (&key, value) in &self.acked {
            let mut attempt = 0;
            let got = loop {
                attempt += 1;
                match sim.request(RequestBody::Call {
                    procedure: format!("kv_get{}", self.suffix),
                    args: vec![Value::Int(key)],
                    retrying_for: Duration::ZERO,
                }) {
                    Ok(ResponseBody::Returned(v)) => break v,
                    Err(_) if attempt < VERIFY_ATTEMPTS_MAX => {
                        // Locks of transactions cut off by the faults time out; give it time.
                        sim.idle(std::time::Duration::from_millis(500)).map_err(|e| e.to_string())?;
                    }
                    other => return Err(format!("reading acknowledged key {key} after the run: {other:?}")),
                }
            };
            if got.first() != Some(&Value::Bytes(value.clone().into())) {
                return Err(format!("acknowledged write of key {key} lost: read {got:?}"));
            }
        }
        Ok(())
    }
}

/// Attempts (500 ms of virtual time apart) at the final check before a run is declared stuck.
const VERIFY_ATTEMPTS_MAX: usize = 40;

/// The banking workload of Salt Figs. 1–2 under faults: clients run BASE (or ACID) transfers
/// between random accounts and the unmodified ACID `bank_total`. Checked invariants:
///
/// 1. every `bank_total` that succeeds once every account is open sees every account (no lost
///    or phantom row), exactly the initial total (ACID transactions never observe a BASE
///    transaction's intermediate state, Salt §5.1, Theorem 1) and no negative balance (a
///    transfer debits only what the balance covers);
/// 2. after the run, with every fault healed and accepted BASE transactions rolled forward, the
///    same holds — accounts the run never got open are opened first, so the final check always
///    runs: it cannot pass without checking.
///
/// A malformed `bank_total` result is a violation, never a pass.
pub struct Bank {
    pub accounts: i64,
    pub initial: i64,
    /// Procedure used for transfers (`bank_transfer` is BASE, `bank_transfer_acid` is ACID).
    pub transfer: &'static str,
    /// Opening an account and the total: `bank_open` / `bank_total`, or their one-round forms.
    pub open: &'static str,
    pub total: &'static str,
    /// `bank_total_1r`'s partitions argument (`None`: `bank_total` takes none).
    total_partitions: Option<i64>,
    opened: std::collections::BTreeSet<i64>,
    violations: Vec<String>,
    /// Totals compared during the run (every one of them against all three rules).
    pub totals_checked: u64,
    /// Whether the final check ran and passed.
    pub final_checked: bool,
}

impl Bank {
    pub fn new(accounts: i64, transfer: &'static str) -> Self {
        Bank {
            accounts,
            initial: 1_000,
            transfer,
            open: "bank_open",
            total: "bank_total",
            total_partitions: None,
            opened: Default::default(),
            violations: vec![],
            totals_checked: 0,
            final_checked: false,
        }
    }

    /// The bank in one round (engines that take one-round transactions whole):
    /// `bank_transfer_1r`, `bank_open_1r`, and `bank_total_1r` over `partitions` partitions.
    pub fn one_round(accounts: i64, partitions: u32) -> Self {
        Bank {
            open: "bank_open_1r",
            total: "bank_total_1r",
            total_partitions: Some(partitions as i64),
            ..Bank::new(accounts, "bank_transfer_1r")
        }
    }

    fn total_call(&self) -> RequestBody {
        match self.total_partitions {
            None => Self::call(self.total, vec![]),
            Some(p) => Self::call(self.total, vec![Value::Int(self.accounts), Value::Int(p)]),
        }
    }

    fn expected_total(&self) -> i64 {
        self.accounts * self.initial
    }

    /// Invariant 1 on one `bank_total` result: `Err` names what is wrong. A one-round total is one
    /// `[total, count, min]` triple per partition, folded here.
    pub fn check_total(&self, v: &[Value]) -> Result<(), String> {
        if v.is_empty() || !v.len().is_multiple_of(3) {
            return Err(format!("malformed bank_total result {v:?}"));
        }
        let (mut total, mut n, mut min) = (0i64, 0i64, None::<i64>);
        for part in v.chunks(3) {
            match part {
                [Value::Int(t), Value::Int(c), m] => {
                    total += t;
                    n += c;
                    if let Some(m) = m.as_int() {
                        min = Some(min.map_or(m, |x: i64| x.min(m)));
                    }
                }
                other => return Err(format!("malformed bank_total result {other:?}")),
            }
        }
        if n != self.accounts {
            return Err(format!("a total saw {n} of {} accounts (a lost or phantom row)", self.accounts));
        }
        if total != self.expected_total() {
            return Err(format!("a total saw {total}, expected {}", self.expected_total()));
        }
        match min {
            Some(m) if m >= 0 => Ok(()),
            other => Err(format!("a total saw a negative (or no) smallest balance: {other:?}")),
        }
    }

    fn call(procedure: &str, args: Vec<Value>) -> RequestBody {
        RequestBody::Call { procedure: procedure.into(), args, retrying_for: Duration::ZERO }
    }
}

impl SimDriver for Bank {
    fn next(&mut self, client: usize, rng: &mut ChaCha8Rng) -> Option<RequestBody> {
        let unopened: Vec<i64> = (0..self.accounts).filter(|a| !self.opened.contains(a)).collect();
        if !unopened.is_empty() {
            // First every account is opened (a write of the initial balance, retried until
            // acknowledged; idempotent).
            let id = unopened[client % unopened.len()];
            return Some(Self::call(self.open, vec![Value::Int(id), Value::Int(self.initial)]));
        }
        if rng.gen_bool(0.3) {
            return Some(self.total_call());
        }
        let s = rng.gen_range(0..self.accounts);
        let r = (s + rng.gen_range(1..self.accounts)) % self.accounts;
        Some(Self::call(self.transfer, vec![Value::Int(s), Value::Int(r), Value::Int(rng.gen_range(1..300))]))
    }

    fn done(&mut self, _client: usize, request: &RequestBody, result: &Result<ResponseBody, Error>) {
        let RequestBody::Call { procedure, args, .. } = request else { return };
        let (open, total) = (procedure == self.open, procedure == self.total);
        match (open, total, result) {
            (true, _, Ok(_) | Err(Error::Invalid(litmus_core::InvalidInput::DuplicateKey(_)))) => {
                self.opened.insert(args[0].as_int().unwrap_or(-1));
            }
            (_, true, Ok(ResponseBody::Returned(v))) if self.opened.len() as i64 == self.accounts => {
                self.totals_checked += 1;
                if let Err(e) = self.check_total(v) {
                    self.violations.push(e);
                }
            }
            _ => {}
        }
    }

    fn verify(&mut self, sim: &mut Simulator) -> Result<(), String> {
        if let Some(v) = self.violations.first() {
            return Err(format!("{} violations; first: {v}", self.violations.len()));
        }
        let idle = |sim: &mut Simulator| sim.idle(Duration::from_millis(500)).map_err(|e| e.to_string());
        // Accounts the run never got open (heavy faults): open them now, so the check runs.
        for id in 0..self.accounts {
            let mut attempts = 0;
            while !self.opened.contains(&id) {
                attempts += 1;
                match sim.request(Self::call(self.open, vec![Value::Int(id), Value::Int(self.initial)])) {
                    Ok(_) | Err(Error::Invalid(litmus_core::InvalidInput::DuplicateKey(_))) => {
                        self.opened.insert(id);
                    }
                    other if attempts >= VERIFY_ATTEMPTS_MAX => {
                        return Err(format!("account {id} could not be opened after the run: {other:?}"))
                    }
                    _ => idle(sim)?,
                }
            }
        }
        let mut last = None;
        for _ in 0..VERIFY_ATTEMPTS_MAX {
            match sim.request(self.total_call()) {
                Ok(ResponseBody::Returned(v)) => {
                    self.check_total(&v).map_err(|e| format!("after the run: {e}"))?;
                    self.final_checked = true;
                    return Ok(());
                }
                other => {
                    // Still rolling forward or cleaning up: give it time.
                    last = Some(other);
                    idle(sim)?;
                }
            }
        }
        Err(format!("the final total never succeeded (last: {last:?})"))
    }
}
