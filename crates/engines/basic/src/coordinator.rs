//! The coordinator half of `basic`: timestamps (a hybrid clock), the PREPARE / FORCE-WRITE /
//! REVOKE rounds over `P(op)`, retry of a revoked write (and of a read refused below a newer
//! write, rule R's real-time order) under a new timestamp, resends, the
//! unilateral abort on a PREPARE timeout and the answers to participants in doubt (§IV-B, D).

use super::messages::{CoordRecord, PrepareOutcome, ReadOutcome, Reply, Request, WriteId};
use super::partition::too_old;
use super::{CLOCK_FLOOR_STEP_US, PREPARE_TIMEOUT, RESEND_AFTER, RETRIES_MAX, TS_NODE_BITS};
use litmus_core::{AbortReason, Error, PartitionId, Time, Timestamp, TxnId};
use litmus_protocol::engine::{decode_record, CoordCtx, CoordinatorEngine, TxnOptions};
use litmus_protocol::message::{Addr, Payload, SubOpId};
use litmus_protocol::op::{PartOp, PartResult};
use std::collections::{BTreeMap, BTreeSet};

/// A request still waiting for its answer.
#[derive(Debug)]
struct Outstanding {
    req: Request,
    first: Time,
    sent: Time,
    /// Issued by the procedure (its `OpDone` is owed); false for a retry's re-PREPARE.
    in_proc: bool,
}

#[derive(Debug)]
struct Txn {
    ts: Timestamp,
    attempt: u32,
    /// The operation read: a revoked write then fails it (its reads were at the old timestamp).
    read: bool,
    /// A read was answered to the procedure (at `ts`): the timestamp can no longer change.
    answered: bool,
    writes: Vec<(SubOpId, PartOp)>,
    outstanding: BTreeMap<SubOpId, Outstanding>,
    placed: BTreeSet<PartitionId>,
    contacted: BTreeSet<PartitionId>,
    revoked: bool,
    failed: Option<Error>,
    committing: bool,
}

impl Txn {
    fn wid(&self, txn: TxnId) -> WriteId {
        WriteId { txn, attempt: self.attempt }
    }
}

/// A decided write whose FORCE-WRITE not every participant acknowledged yet.
#[derive(Debug)]
struct Forcing {
    waiting: BTreeSet<PartitionId>,
    sent: Time,
}

/// See the module doc.
#[derive(Debug, Default)]
pub struct BasicCoordinator {
    /// Logical microseconds of the last timestamp issued.
    clock: u64,
    /// Logged: timestamps stay below it until the next `ClockFloor`.
    clock_floor: u64,
    txns: BTreeMap<TxnId, Txn>,
    forcing: BTreeMap<WriteId, Forcing>,
}

fn node_bits(me: Addr) -> u64 {
    match me {
        Addr::Coordinator(n) => u64::from(n.0) % (1 << TS_NODE_BITS),
        _ => 0,
    }
}

impl BasicCoordinator {
    /// `TS(op)`: unique (node in the low bits) and increasing at this coordinator; above every
    /// bound a partition reported and, across restarts, above the logged floor.
    fn next_ts(&mut self, ctx: &mut CoordCtx) -> Timestamp {
        self.clock = (ctx.now.as_nanos() / 1_000).max(self.clock + 1);
        if self.clock >= self.clock_floor {
            self.clock_floor = self.clock + CLOCK_FLOOR_STEP_US;
            ctx.persist(postcard::to_stdvec(&CoordRecord::ClockFloor(self.clock_floor)).expect("serialize"));
        }
        Timestamp((self.clock << TS_NODE_BITS) | node_bits(ctx.me))
    }

    fn bump(&mut self, bound: Timestamp) {
        self.clock = self.clock.max(bound.0 >> TS_NODE_BITS);
    }

    fn send(ctx: &mut CoordCtx, part: PartitionId, req: &Request) {
        ctx.send_to_partition(part, req.clone());
    }

    fn revoke_all(txn: TxnId, t: &mut Txn, ctx: &mut CoordCtx) {
        let wid = t.wid(txn);
        for &p in &t.contacted {
            Self::send(ctx, p, &Request::Revoke { wid });
        }
        t.contacted.clear();
        t.placed.clear();
    }

    fn prepare(txn: TxnId, t: &mut Txn, id: SubOpId, op: PartOp, in_proc: bool, ctx: &mut CoordCtx) {
        t.contacted.insert(id.part);
        let peers = t.contacted.iter().copied().collect();
        let req = Request::Prepare { id, wid: t.wid(txn), ts: t.ts, op, peers };
        Self::send(ctx, id.part, &req);
        t.outstanding.insert(id, Outstanding { req, first: ctx.now, sent: ctx.now, in_proc });
    }

    /// Commit once every PREPARE answered: FORCE-WRITE (rule F), a retry under a new timestamp
    /// after a W1 revocation (rule V), or the end of a failed operation.
    fn try_finish(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&txn) else { return };
        if !t.committing || !t.outstanding.is_empty() {
            return;
        }
        if let Some(e) = t.failed.clone() {
            Self::revoke_all(txn, t, ctx);
            self.txns.remove(&txn);
            ctx.txn_done(txn, Err(e));
            return;
        }
        if t.writes.is_empty() {
            self.txns.remove(&txn);
            ctx.txn_done(txn, Ok(()));
            return;
        }
        if t.revoked {
            Self::revoke_all(txn, t, ctx);
            if t.read || t.attempt >= RETRIES_MAX {
                self.txns.remove(&txn);
                ctx.txn_done(txn, Err(too_old()));
                return;
            }
            // Rule V: revoked everywhere; retried under a new timestamp.
            let mut t = self.txns.remove(&txn).expect("present");
            t.attempt += 1;
            t.ts = self.next_ts(ctx);
            t.revoked = false;
            for (id, op) in t.writes.clone() {
                Self::prepare(txn, &mut t, id, op, false, ctx);
            }
            self.txns.insert(txn, t);
            return;
        }
        let t = self.txns.remove(&txn).expect("present");
        let wid = t.wid(txn);
        let parts: Vec<PartitionId> = t.placed.iter().copied().collect();
        // Persist before send: the decision is durable before any FORCE-WRITE leaves.
        ctx.persist(postcard::to_stdvec(&CoordRecord::Decided { wid, parts: parts.clone() }).expect("serialize"));
        for &p in &parts {
            Self::send(ctx, p, &Request::Force { wid });
        }
        self.forcing.insert(wid, Forcing { waiting: parts.into_iter().collect(), sent: ctx.now });
        ctx.txn_done(txn, Ok(()));
    }

    /// Rule R, real-time order: a read refused below a newer write (`TooOld`) before anything
    /// was answered or placed at the operation's timestamp runs again, with every read still
    /// out, under a new timestamp above the bound (already bumped): a new attempt, as a revoked
    /// write-only operation under rule V. Late answers at the old timestamp are ignored.
    fn rerun_reads(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        let ts = self.next_ts(ctx);
        let Some(t) = self.txns.get_mut(&txn) else { return };
        t.attempt += 1;
        t.ts = ts;
        let own = t.wid(txn);
        let now = ctx.now;
        for (&id, o) in &mut t.outstanding {
            if let Request::Read { op, .. } = &o.req {
                o.req = Request::Read { id, ts, own, op: op.clone() };
                (o.first, o.sent) = (now, now);
                Self::send(ctx, id.part, &o.req);
            }
        }
    }

    fn on_prepared(&mut self, id: SubOpId, wid: WriteId, outcome: PrepareOutcome, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&id.txn) else { return };
        if wid.attempt != t.attempt {
            return; // an answer to a revoked attempt
        }
        let Some(out) = t.outstanding.remove(&id) else { return };
        let result = match outcome {
            PrepareOutcome::Placed => {
                t.placed.insert(id.part);
                Ok(PartResult::Done)
            }
            PrepareOutcome::Revoked { bound } => {
                self.clock = self.clock.max(bound.0 >> TS_NODE_BITS);
                t.revoked = true;
                if t.read {
                    Err(too_old())
                } else {
                    Ok(PartResult::Done) // retried under a new timestamp at commit
                }
            }
            PrepareOutcome::Failed(e) => {
                t.failed.get_or_insert(e.clone());
                Err(e)
            }
        };
        if out.in_proc {
            ctx.op_done(id, result);
        }
        self.try_finish(id.txn, ctx);
    }
}

impl CoordinatorEngine for BasicCoordinator {
    fn begin(&mut self, txn: TxnId, _opts: &TxnOptions, ctx: &mut CoordCtx) {
        let ts = self.next_ts(ctx);
        let t = Txn {
            ts,
            attempt: 0,
            read: false,
            answered: false,
            writes: Vec::new(),
            outstanding: BTreeMap::new(),
            placed: BTreeSet::new(),
            contacted: BTreeSet::new(),
            revoked: false,
            failed: None,
            committing: false,
        };
        self.txns.insert(txn, t);
    }

    fn issue(&mut self, id: SubOpId, op: PartOp, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&id.txn) else {
            ctx.op_done(id, Err(Error::Internal(format!("basic: {} not begun", id.txn))));
            return;
        };
        if op.kind.is_write() {
            t.writes.push((id, op.clone()));
            Self::prepare(id.txn, t, id, op, true, ctx);
        } else {
            t.read = true;
            if t.revoked {
                ctx.op_done(id, Err(too_old()));
                return;
            }
            let req = Request::Read { id, ts: t.ts, own: t.wid(id.txn), op };
            Self::send(ctx, id.part, &req);
            t.outstanding.insert(id, Outstanding { req, first: ctx.now, sent: ctx.now, in_proc: true });
        }
    }

    fn commit(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&txn) else {
            ctx.txn_done(txn, Err(Error::Internal(format!("basic: {txn} not begun"))));
            return;
        };
        t.committing = true;
        // Reads still out are the procedure's business (it did not wait): forget them.
        t.outstanding.retain(|_, o| matches!(o.req, Request::Prepare { .. }));
        self.try_finish(txn, ctx);
    }

    fn abort(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        if let Some(mut t) = self.txns.remove(&txn) {
            Self::revoke_all(txn, &mut t, ctx);
        }
        ctx.txn_done(txn, Ok(()));
    }

    fn on_reply(&mut self, from: PartitionId, reply: Payload, ctx: &mut CoordCtx) {
        let Ok(reply) = reply.decode::<Reply>() else { return };
        match reply {
            Reply::Read { id, ts, outcome } => {
                let Some(t) = self.txns.get_mut(&id.txn) else { return };
                if t.ts != ts || !t.outstanding.contains_key(&id) {
                    return;
                }
                let rerun = t.writes.is_empty() && !t.answered && t.attempt < RETRIES_MAX;
                let result = match outcome {
                    ReadOutcome::Done(r) => r,
                    ReadOutcome::TooOld { bound } => {
                        self.bump(bound);
                        if rerun {
                            self.rerun_reads(id.txn, ctx);
                            return;
                        }
                        Err(too_old())
                    }
                };
                if let Some(t) = self.txns.get_mut(&id.txn) {
                    t.outstanding.remove(&id);
                    t.answered = true;
                }
                ctx.op_done(id, result);
            }
            Reply::Prepared { id, wid, outcome } => self.on_prepared(id, wid, outcome, ctx),
            Reply::Forced { wid } => {
                let Some(f) = self.forcing.get_mut(&wid) else { return };
                f.waiting.remove(&from);
                if f.waiting.is_empty() {
                    self.forcing.remove(&wid);
                    ctx.persist(postcard::to_stdvec(&CoordRecord::Ended { wid }).expect("serialize"));
                }
            }
            Reply::Query { wid } => {
                let forced = if self.forcing.contains_key(&wid) {
                    true
                } else if self.txns.get(&wid.txn).is_some_and(|t| t.attempt == wid.attempt) {
                    return; // still undecided here: the PREPARE timeout decides
                } else {
                    false // never decided (or this incarnation lost it): presumed revoked
                };
                ctx.send_to_partition(from, Request::Outcome { wid, forced });
            }
        }
    }

    fn on_tick(&mut self, ctx: &mut CoordCtx) {
        let now = ctx.now;
        let mut timed_out = Vec::new();
        for (&txn, t) in &mut self.txns {
            let mut expired = Vec::new();
            for (&id, o) in &mut t.outstanding {
                let is_prepare = matches!(o.req, Request::Prepare { .. });
                if is_prepare && now.saturating_sub(o.first) >= PREPARE_TIMEOUT {
                    expired.push(id);
                } else if now.saturating_sub(o.sent) >= RESEND_AFTER {
                    o.sent = now;
                    ctx.send_to_partition(id.part, o.req.clone());
                }
            }
            if !expired.is_empty() {
                // §IV-D: the coordinator aborts unilaterally when PREPARE replies time out.
                let e = Error::Abort(AbortReason::Timeout);
                t.failed.get_or_insert(e.clone());
                for id in expired {
                    if t.outstanding.remove(&id).is_some_and(|o| o.in_proc) {
                        ctx.op_done(id, Err(e.clone()));
                    }
                }
                timed_out.push(txn);
            }
        }
        for txn in timed_out {
            self.try_finish(txn, ctx);
        }
        for (&wid, f) in &mut self.forcing {
            if now.saturating_sub(f.sent) >= RESEND_AFTER {
                f.sent = now;
                for &p in &f.waiting {
                    ctx.send_to_partition(p, Request::Force { wid });
                }
            }
        }
    }

    fn apply(&mut self, record: &[u8]) -> Result<(), Error> {
        match decode_record::<CoordRecord>("basic", record)? {
            CoordRecord::Decided { wid, parts } => {
                self.forcing.insert(wid, Forcing { waiting: parts.into_iter().collect(), sent: Time::ZERO });
            }
            CoordRecord::Ended { wid } => drop(self.forcing.remove(&wid)),
            CoordRecord::ClockFloor(c) => {
                self.clock = self.clock.max(c);
                self.clock_floor = self.clock_floor.max(c);
            }
        }
        Ok(())
    }

    /// Decisions every participant acknowledged, and all but the last clock floor, are dropped.
    fn compact(&self, records: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let decoded: Vec<Option<CoordRecord>> = records.iter().map(|r| postcard::from_bytes(r).ok()).collect();
        let ended: BTreeSet<WriteId> = decoded
            .iter()
            .filter_map(|r| match r {
                Some(CoordRecord::Ended { wid }) => Some(*wid),
                _ => None,
            })
            .collect();
        let last_floor = decoded.iter().rposition(|r| matches!(r, Some(CoordRecord::ClockFloor(_))));
        records
            .into_iter()
            .zip(decoded)
            .enumerate()
            .filter(|(i, (_, r))| match r {
                Some(CoordRecord::Decided { wid, .. }) | Some(CoordRecord::Ended { wid }) => !ended.contains(wid),
                Some(CoordRecord::ClockFloor(_)) => Some(*i) == last_floor,
                None => true,
            })
            .map(|(_, (bytes, _))| bytes)
            .collect()
    }
}
