//! The client proxy (Granola §4.2), as the coordinator half of the engine.
//!
//! It keeps `highTS` (the highest timestamp seen in a reply; 0 after a restart, §5.3's option
//! for clients without cross-session constraints), sends each one-round transaction to its
//! participants with `highTS` and a TID, and waits for a reply from every participant:
//!
//! * every participant COMMIT → the fragments' values in plan order;
//! * an ABORT → that error (the transaction aborts everywhere);
//! * a CONFLICT → a retry with a new TID (the next attempt) after a random backoff, up to
//!   [`CONFLICT_RETRY_FOR`](super::CONFLICT_RETRY_FOR).
//!
//! Requests to participants that have not replied are resent every
//! [`RESEND_AFTER`](super::RESEND_AFTER) (a participant answers a retransmission from what it
//! logged). Coordinator-driven transactions are refused (see the module doc of
//! [`super`]).

use super::{Gtid, Outcome, Reply, Request, TxnRequest, CONFLICT_BACKOFF_MAX, CONFLICT_RETRY_FOR, RESEND_AFTER};
use litmus_core::{AbortReason, Error, InvalidInput, PartitionId, Time, Timestamp, TxnId, Value};
use litmus_protocol::engine::{CoordCtx, CoordinatorEngine, OneRoundTransactions, TxnOptions};
use litmus_protocol::fragment::{FragmentCall, OneRoundClass, OneRoundPlan};
use litmus_protocol::message::{Addr, Payload, SubOpId};
use litmus_protocol::op::PartOp;
use rand::Rng;
use std::collections::BTreeMap;
use std::time::Duration;

/// A one-round transaction in flight.
#[derive(Debug)]
struct InFlight {
    class: OneRoundClass,
    fragments: Vec<(PartitionId, FragmentCall)>,
    participants: Vec<PartitionId>,
    attempt: u32,
    /// Replies of the current attempt (committed ones; the first other ends the attempt).
    replies: BTreeMap<PartitionId, Reply>,
    sent_at: Time,
    /// Set while backing off after a CONFLICT: when to send the next attempt.
    retry_at: Option<Time>,
    started: Time,
}

#[derive(Debug, Default)]
pub struct GranolaCoordinator {
    /// The highest timestamp observed in a reply (§4.2).
    high_ts: Timestamp,
    txns: BTreeMap<TxnId, InFlight>,
    /// `sinfonia`: distributed transactions are sent through this coordinator node.
    relay: Option<Addr>,
    /// The engine's name, for refusals.
    engine: &'static str,
}

impl GranolaCoordinator {
    /// A client proxy; with `relay`, distributed transactions go through that node.
    pub fn new(engine: &'static str, relay: Option<Addr>) -> Self {
        GranolaCoordinator { relay, engine, ..Default::default() }
    }

    /// `highTS`, for tests.
    pub fn high_ts(&self) -> Timestamp {
        self.high_ts
    }

    fn request(&self, txn: TxnId, t: &InFlight, ctx: &CoordCtx) -> TxnRequest {
        TxnRequest {
            gtid: Gtid { txn, attempt: t.attempt },
            class: t.class,
            coord: ctx.me,
            high_ts: self.high_ts,
            fragments: t.fragments.clone(),
        }
    }

    /// Sends the current attempt to every participant that has not replied to it.
    fn send(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get(&txn) else { return };
        let req = self.request(txn, t, ctx);
        if let (Some(relay), true) = (self.relay, t.participants.len() > 1) {
            // The coordinator node forwards it to every participant (duplicates are answered).
            ctx.send_role(relay, Request::Txn(req));
            self.txns.get_mut(&txn).expect("present").sent_at = ctx.now;
            return;
        }
        for &p in &t.participants {
            if !t.replies.contains_key(&p) {
                ctx.send_to_partition(p, Request::Txn(req.clone()));
            }
        }
        self.txns.get_mut(&txn).expect("present").sent_at = ctx.now;
    }

    fn conflict(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        let t = self.txns.get_mut(&txn).expect("present");
        if ctx.now.saturating_sub(t.started) > CONFLICT_RETRY_FOR {
            self.txns.remove(&txn);
            ctx.count(COUNT_CONFLICT_GAVE_UP);
            return ctx.one_round_done(txn, Err(Error::Abort(AbortReason::LockConflict)));
        }
        ctx.count(COUNT_CONFLICT_RETRIES);
        // Random backoff (§4.2), its bound doubling with the attempts.
        let cap = backoff_cap(t.attempt).as_micros() as u64;
        let wait = Duration::from_micros(ctx.rng.gen_range(1..=cap.max(2)));
        t.retry_at = Some(Time(ctx.now.as_nanos() + wait.as_nanos() as u64));
        t.replies.clear();
        t.attempt += 1;
    }
}

impl CoordinatorEngine for GranolaCoordinator {
    fn begin(&mut self, _txn: TxnId, _opts: &TxnOptions, _ctx: &mut CoordCtx) {}

    /// Granola runs one-round transactions only (§2): an operation of a coordinator-driven
    /// transaction is refused, naming the engine.
    fn issue(&mut self, id: SubOpId, _op: PartOp, ctx: &mut CoordCtx) {
        let what = "interactive transactions and op-by-op procedures (Granola runs one-round procedures only)";
        ctx.op_done(id, Err(InvalidInput::Unsupported { engine: self.engine.into(), what: what.into() }.into()));
    }

    fn commit(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        ctx.txn_done(txn, Ok(()));
    }

    fn abort(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        ctx.txn_done(txn, Ok(()));
    }

    fn on_reply(&mut self, from: PartitionId, reply: Payload, ctx: &mut CoordCtx) {
        let Ok(reply) = reply.decode::<Reply>() else { return };
        self.high_ts = self.high_ts.max(reply.ts);
        let txn = reply.gtid.txn;
        let Some(t) = self.txns.get_mut(&txn) else { return }; // late or duplicated
        if t.attempt != reply.gtid.attempt || t.retry_at.is_some() || !t.participants.contains(&from) {
            return; // an earlier attempt's reply
        }
        match reply.outcome {
            Outcome::Aborted(e) => {
                self.txns.remove(&txn);
                ctx.one_round_done(txn, Err(e));
            }
            Outcome::Conflict => self.conflict(txn, ctx),
            Outcome::Committed { .. } => {
                t.replies.insert(from, reply);
                if t.replies.len() < t.participants.len() {
                    return;
                }
                let t = self.txns.remove(&txn).expect("present");
                let mut values: Vec<(u32, Vec<Value>)> = Vec::new();
                for r in t.replies.into_values() {
                    if let Outcome::Committed { values: v } = r.outcome {
                        values.extend(v);
                    }
                }
                values.sort_by_key(|(i, _)| *i);
                ctx.one_round_done(txn, Ok(values.into_iter().flat_map(|(_, v)| v).collect()));
            }
        }
    }

    fn on_tick(&mut self, ctx: &mut CoordCtx) {
        let due: Vec<TxnId> = self
            .txns
            .iter()
            .filter(|(_, t)| match t.retry_at {
                Some(at) => ctx.now >= at,
                None => ctx.now.saturating_sub(t.sent_at) >= RESEND_AFTER,
            })
            .map(|(id, _)| *id)
            .collect();
        for txn in due {
            self.txns.get_mut(&txn).expect("listed").retry_at = None;
            self.send(txn, ctx);
        }
    }

    fn apply(&mut self, _record: &[u8]) -> Result<(), Error> {
        Ok(())
    }

    fn one_round_transactions(&mut self) -> Option<&mut dyn OneRoundTransactions> {
        Some(self)
    }
}

impl OneRoundTransactions for GranolaCoordinator {
    fn one_round(&mut self, txn: TxnId, plan: OneRoundPlan, ctx: &mut CoordCtx) {
        let participants = plan.participants();
        let class = if participants.len() == 1 { OneRoundClass::Single } else { plan.class };
        let t = InFlight {
            class,
            fragments: plan.fragments,
            participants,
            attempt: 0,
            replies: BTreeMap::new(),
            sent_at: ctx.now,
            retry_at: None,
            started: ctx.now,
        };
        self.txns.insert(txn, t);
        self.send(txn, ctx);
    }
}

/// Reported by `litmus bench` per committed transaction: CONFLICTs the client proxy retried
/// (§4.2), and transactions it gave up on after [`CONFLICT_RETRY_FOR`] of them (the client
/// sees a retryable abort).
pub const COUNT_CONFLICT_RETRIES: &str = "granola.conflict_retries";
pub const COUNT_CONFLICT_GAVE_UP: &str = "granola.conflict_gave_up";

/// The bound of the random backoff before retry `attempt + 1` after a CONFLICT: exponential,
/// `CONFLICT_BACKOFF_MAX / 16` doubled at each attempt, up to [`CONFLICT_BACKOFF_MAX`]
/// (conflicting retries spread out fast under contention instead of livelocking).
pub fn backoff_cap(attempt: u32) -> Duration {
    (CONFLICT_BACKOFF_MAX / 16).saturating_mul(1 << attempt.min(16)).min(CONFLICT_BACKOFF_MAX)
}
