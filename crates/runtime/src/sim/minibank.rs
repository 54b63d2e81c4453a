//! The bank, transferred with minitransactions (Sinfonia §3): the way a SQL session commits on
//! the engines that run one-round transactions only.
//!
//! Each transfer is three requests: a one-round read of the payer's account, one of the
//! payee's, then a minitransaction whose compare items are the two rows as read and whose
//! write items are the two new balances. A payer that cannot pay is not charged (no write).
//! The invariants are [`Bank`]'s: every consistent total sees every account, the initial sum,
//! and no negative balance. A minitransaction whose compares did not hold would lose an update
//! (two transfers from one balance) or overdraw an account, so the totals check isolation as
//! well as atomicity, under every fault the simulator injects.

use super::workload::Bank;
use super::{SimDriver, Simulator};
use litmus_core::{Error, Row, Value};
use litmus_protocol::builtin::bank;
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::minitxn::{digest, Compare, Minitransaction};
use litmus_protocol::op::{Op, OpResult};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// Where one client's transfer is.
#[derive(Clone, Debug)]
enum Step {
    /// Read the payer's account next.
    ReadFrom { from: i64, to: i64, amount: i64 },
    /// Read the payee's account next.
    ReadTo { from: i64, to: i64, amount: i64, from_row: Row },
    /// Commit the two rows as read.
    Commit { from: i64, to: i64, amount: i64, from_row: Row, to_row: Row },
}

/// See the module doc.
pub struct MiniBank {
    bank: Bank,
    steps: BTreeMap<usize, Step>,
    /// Minitransactions committed, and aborted because a compare failed.
    pub committed: u64,
    pub compare_aborts: u64,
}

impl MiniBank {
    /// `accounts` accounts over `partitions` partitions (for the one-round total).
    pub fn new(accounts: i64, partitions: u32) -> Self {
        MiniBank {
            bank: Bank::one_round(accounts, partitions),
            steps: BTreeMap::new(),
            committed: 0,
            compare_aborts: 0,
        }
    }

    pub fn totals_checked(&self) -> u64 {
        self.bank.totals_checked
    }

    pub fn final_checked(&self) -> bool {
        self.bank.final_checked
    }

    fn read(id: i64) -> RequestBody {
        RequestBody::Read { op: Op::Read { table: bank::ACCOUNTS.into(), key: vec![Value::Int(id)] } }
    }

    fn balance(row: &Row) -> Option<i64> {
        row.get(1).and_then(Value::as_int)
    }

    fn commit(from: i64, to: i64, amount: i64, from_row: &Row, to_row: &Row) -> Option<RequestBody> {
        let (paid, got) = (Self::balance(from_row)?, Self::balance(to_row)?);
        if paid < amount {
            return None;
        }
        let compare = |id: i64, row: &Row| Compare::Row {
            table: bank::ACCOUNTS.into(),
            key: vec![Value::Int(id)],
            digest: Some(digest(row)),
        };
        let write = |id: i64, bal: i64| Op::Write {
            table: bank::ACCOUNTS.into(),
            row: vec![Value::Int(id), Value::Int(bal)].into(),
        };
        Some(RequestBody::Minitransaction(Minitransaction {
            compares: vec![compare(from, from_row), compare(to, to_row)],
            writes: vec![write(from, paid - amount), write(to, got + amount)],
        }))
    }
}

impl SimDriver for MiniBank {
    fn next(&mut self, client: usize, rng: &mut ChaCha8Rng) -> Option<RequestBody> {
        match self.steps.remove(&client) {
            Some(Step::ReadFrom { from, to, amount }) => {
                self.steps.insert(client, Step::ReadFrom { from, to, amount });
                return Some(Self::read(from));
            }
            Some(Step::ReadTo { from, to, amount, from_row }) => {
                self.steps.insert(client, Step::ReadTo { from, to, amount, from_row });
                return Some(Self::read(to));
            }
            Some(Step::Commit { from, to, amount, from_row, to_row }) => {
                if let Some(req) = Self::commit(from, to, amount, &from_row, &to_row) {
                    return Some(req);
                }
                // The payer cannot pay: nothing to write.
            }
            None => {}
        }
        let request = self.bank.next(client, rng)?;
        let RequestBody::Call { procedure, .. } = &request else { return Some(request) };
        if procedure != self.bank.transfer {
            return Some(request); // opening an account, or a total
        }
        let accounts = self.bank.accounts;
        let from = rng.gen_range(0..accounts);
        let to = (from + rng.gen_range(1..accounts)) % accounts;
        let amount = rng.gen_range(1..300);
        self.steps.insert(client, Step::ReadFrom { from, to, amount });
        Some(Self::read(from))
    }

    fn done(&mut self, client: usize, request: &RequestBody, result: &Result<ResponseBody, Error>) {
        match request {
            RequestBody::Read { .. } => {
                let row = match result {
                    Ok(ResponseBody::Op(OpResult::Row(Some(row)))) => row.clone(),
                    // Not there yet, or not read: the transfer starts over.
                    _ => {
                        self.steps.remove(&client);
                        return;
                    }
                };
                let next = match self.steps.remove(&client) {
                    Some(Step::ReadFrom { from, to, amount }) => Step::ReadTo { from, to, amount, from_row: row },
                    Some(Step::ReadTo { from, to, amount, from_row }) => {
                        Step::Commit { from, to, amount, from_row, to_row: row }
                    }
                    _ => return,
                };
                self.steps.insert(client, next);
            }
            RequestBody::Minitransaction(_) => {
                self.steps.remove(&client);
                match result {
                    Ok(_) => self.committed += 1,
                    Err(Error::Abort(_)) => self.compare_aborts += 1,
                    Err(_) => {}
                }
            }
            _ => self.bank.done(client, request, result),
        }
    }

    fn verify(&mut self, sim: &mut Simulator) -> Result<(), String> {
        self.bank.verify(sim)
    }
}
