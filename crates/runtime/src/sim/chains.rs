//! `salt-chains`: random chains of BASE transactions over keys on random partitions, read by
//! concurrent ACID transactions, under faults — the randomized check of Salt isolation across
//! partitions (Salt §5.1, Theorem 1).
//!
//! Every value carries its provenance: the tags of the BASE transactions it was computed from
//! (`builtin::chains`). A BASE `chain_step` copies provenance from two keys to two others and,
//! in its last alkaline subtransaction, writes its end marker; a BASE `chain_fold` adds its tag
//! to one key's tag set, reads the set back under its own write and copies it to another key. An ACID `chain_check` reads three
//! keys, then the end marker of every tag in what it read, in the same transaction. The oracle:
//!
//! 1. **during the run**, no `chain_check` that succeeds finds a tag without its end marker —
//!    it would have observed, directly or through a chain of BASE transactions, a write of a
//!    BASE transaction that had not ended when it read it (the end marker is written before any
//!    of that transaction's saline locks can be released, and once written it stays);
//! 2. **after the run** (faults healed), every key passes the same check — every accepted BASE
//!    transaction was rolled forward to its end — and the check saw at least one tag whenever a
//!    chain step was acknowledged (it cannot pass empty).
//!
//! Half the checks run at read-committed, half at serializable.

use super::{SimDriver, Simulator};
use litmus_core::{Error, Value};
use litmus_protocol::message::{RequestBody, ResponseBody};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::time::Duration;

/// Attempts (500 ms of virtual time apart) at each final check.
const VERIFY_ATTEMPTS_MAX: usize = 40;

pub struct SaltChains {
    /// Keys `0..keys` of the `chain` table (spread over every partition by `k mod partitions`).
    pub keys: i64,
    next_tag: BTreeMap<usize, i64>,
    violations: Vec<String>,
    /// Successful ACID checks during the run, and the tags they checked.
    pub checks: u64,
    pub tags_checked: u64,
    /// Chain steps acknowledged (accepted).
    pub steps_acked: u64,
    /// Tags the final check saw.
    pub final_tags: u64,
}

impl SaltChains {
    pub fn new(keys: i64) -> Self {
        SaltChains {
            keys,
            next_tag: BTreeMap::new(),
            violations: vec![],
            checks: 0,
            tags_checked: 0,
            steps_acked: 0,
            final_tags: 0,
        }
    }

    /// A fresh tag for every call (retries included): client `c`'s n-th is `c << 32 | n`.
    fn tag(&mut self, client: usize) -> i64 {
        let n = self.next_tag.entry(client).or_insert(0);
        *n += 1;
        ((client as i64) << 32) | *n
    }

    fn call(procedure: &str, args: Vec<i64>) -> RequestBody {
        RequestBody::Call {
            procedure: procedure.into(),
            args: args.into_iter().map(Value::Int).collect(),
            retrying_for: Duration::ZERO,
        }
    }

    /// `[tags, missing, first missing]` from a check's result.
    fn parse(values: &[Value]) -> Result<(i64, i64, i64), String> {
        match values {
            [Value::Int(t), Value::Int(m), Value::Int(f)] => Ok((*t, *m, *f)),
            other => Err(format!("malformed chain_check result {other:?}")),
        }
    }
}

impl SimDriver for SaltChains {
    fn next(&mut self, client: usize, rng: &mut ChaCha8Rng) -> Option<RequestBody> {
        let mut key = || rng.gen_range(0..self.keys);
        let keys = [key(), key(), key(), key()];
        if rng.gen_bool(0.6) {
            let tag = self.tag(client);
            if rng.gen_bool(0.3) {
                return Some(Self::call("chain_fold", vec![tag, keys[0], keys[1]]));
            }
            return Some(Self::call("chain_step", vec![tag, keys[0], keys[1], keys[2], keys[3]]));
        }
        let procedure = if rng.gen_bool(0.5) { "chain_check" } else { "chain_check_ser" };
        Some(Self::call(procedure, keys[..3].to_vec()))
    }

    fn done(&mut self, _client: usize, request: &RequestBody, result: &Result<ResponseBody, Error>) {
        let RequestBody::Call { procedure, args, .. } = request else { return };
        match (procedure.as_str(), result) {
            ("chain_step" | "chain_fold", Ok(_)) => self.steps_acked += 1,
            ("chain_check" | "chain_check_ser", Ok(ResponseBody::Returned(v))) => match Self::parse(v) {
                Ok((tags, missing, first)) => {
                    self.checks += 1;
                    self.tags_checked += tags as u64;
                    if missing > 0 {
                        self.violations.push(format!(
                            "{procedure}{args:?} read a value derived from BASE transaction {first:#x} (and {} more) \
                             whose end marker was missing: it observed a BASE transaction that had not ended",
                            missing - 1
                        ));
                    }
                }
                Err(e) => self.violations.push(e),
            },
            _ => {}
        }
    }

    fn verify(&mut self, sim: &mut Simulator) -> Result<(), String> {
        if let Some(v) = self.violations.first() {
            return Err(format!("{} violation(s); first: {v}", self.violations.len()));
        }
        let mut k = 0;
        while k < self.keys {
            let keys = vec![k, (k + 1) % self.keys, (k + 2) % self.keys];
            let mut last = None;
            let mut done = false;
            for _ in 0..VERIFY_ATTEMPTS_MAX {
                match sim.request(Self::call("chain_check", keys.clone())) {
                    Ok(ResponseBody::Returned(v)) => {
                        let (tags, missing, first) = Self::parse(&v)?;
                        if missing > 0 {
                            return Err(format!(
                                "after the run, keys {keys:?} derive from BASE transaction {first:#x} that never ended \
                                 ({missing} tag(s) without an end marker)"
                            ));
                        }
                        self.final_tags += tags as u64;
                        done = true;
                        break;
                    }
                    other => {
                        last = Some(other);
                        sim.idle(Duration::from_millis(500)).map_err(|e| e.to_string())?;
                    }
                }
            }
            if !done {
                return Err(format!("the final check of keys {keys:?} never succeeded (last: {last:?})"));
            }
            k += 3;
        }
        if self.steps_acked > 0 && self.final_tags == 0 {
            return Err(format!("{} chain steps were acknowledged but the final check saw no tag", self.steps_acked));
        }
        Ok(())
    }
}
