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
use litmus_engine::message::{RequestBody, ResponseBody};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// Keys per client: client `c` writes keys `c * KEYS_PER_CLIENT + i`.
const KEYS_PER_CLIENT: i64 = 1 << 32;

#[derive(Default)]
pub struct AckedWrites {
    next_key: BTreeMap<usize, i64>,
    /// Acknowledged writes: key → value.
    acked: BTreeMap<i64, Vec<u8>>,
    /// Violations found during the run.
    violations: Vec<String>,
    pub reads_checked: u64,
}

impl AckedWrites {
    pub fn new() -> Self {
        Self::default()
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
        let call = |procedure: &str, args: Vec<Value>| Some(RequestBody::Call { procedure: procedure.into(), args });
        if roll < 0.2 && !self.acked.is_empty() {
            // Read back a random acknowledged key.
            let idx = rng.gen_range(0..self.acked.len());
            let key = *self.acked.keys().nth(idx).expect("in range");
            return call("kv_get", vec![Value::Int(key)]);
        }
        if roll < 0.4 {
            let (a, b) = (self.fresh_key(client), self.fresh_key(client) + (KEYS_PER_CLIENT / 2));
            return call(
                "kv_put2",
                vec![Value::Int(a), Value::Bytes(Self::value_of(a)), Value::Int(b), Value::Bytes(Self::value_of(b))],
            );
        }
        let k = self.fresh_key(client);
        call("kv_put", vec![Value::Int(k), Value::Bytes(Self::value_of(k))])
    }

    fn done(&mut self, _client: usize, request: &RequestBody, result: &Result<ResponseBody, Error>) {
        let RequestBody::Call { procedure, args } = request else { return };
        let Ok(ResponseBody::Returned(values)) = result else { return };
        match procedure.as_str() {
            "kv_put" => {
                self.acked.insert(args_int(args, 0), Self::value_of(args_int(args, 0)));
            }
            "kv_put2" => {
                for i in [0, 2] {
                    self.acked.insert(args_int(args, i), Self::value_of(args_int(args, i)));
                }
            }
            "kv_get" => {
                self.reads_checked += 1;
                let key = args_int(args, 0);
                let want = Value::Bytes(Self::value_of(key));
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
                match sim.request(RequestBody::Call { procedure: "kv_get".into(), args: vec![Value::Int(key)] }) {
                    Ok(ResponseBody::Returned(v)) => break v,
                    Err(e) if attempt < 5 => {
                        let _ = e;
                        continue;
                    }
                    other => return Err(format!("reading acknowledged key {key} after the run: {other:?}")),
                }
            };
            if got.first() != Some(&Value::Bytes(value.clone())) {
                return Err(format!("acknowledged write of key {key} lost: read {got:?}"));
            }
        }
        Ok(())
    }
}
