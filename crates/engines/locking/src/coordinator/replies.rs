//! What a locking coordinator does with its participants' answers (votes, commit
//! acknowledgements, wounds, queries) and what it sends again until they arrive.

use super::*;

impl LockingCoordinator {
    pub(super) fn on_vote(&mut self, unit: Unit, from: PartitionId, vote: Result<(), Error>, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&unit.txn) else { return };
        let Phase::Preparing { waiting, then } = &mut t.phase else { return };
        match vote {
            Ok(()) => {
                waiting.remove(&from);
                if waiting.is_empty() {
                    let then = then.clone();
                    self.decide(unit.txn, then, ctx);
                }
            }
            Err(e) => {
                let then = then.clone();
                self.abort_unit(unit.txn, then, e, ctx);
            }
        }
    }

    pub(super) fn on_committed(&mut self, unit: Unit, from: PartitionId, ctx: &mut CoordCtx) {
        if let Some(p) = self.decisions.get_mut(&unit) {
            p.waiting.remove(&from);
            if p.waiting.is_empty() {
                self.decisions.remove(&unit);
                Self::persist(ctx, &CoordinatorRecord::Ended { unit });
            }
        }
        let Some(t) = self.txns.get_mut(&unit.txn) else { return };
        if Self::unit(unit.txn, t) != unit {
            return;
        }
        let Phase::Committing { waiting, then } = &mut t.phase else { return };
        waiting.remove(&from);
        if waiting.is_empty() {
            let then = then.clone();
            self.unit_committed(unit.txn, then, ctx);
        }
    }

    /// A participant rolled the unit back before our one-phase commit reached it (it timed the
    /// transaction out): the commit fails. (Logged decisions are never refused: participants
    /// never time out prepared units or BASE subtransactions.)
    pub(super) fn on_commit_refused(&mut self, unit: Unit, from: PartitionId, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&unit.txn) else { return };
        if Self::unit(unit.txn, t) != unit || self.decisions.contains_key(&unit) {
            return;
        }
        let Phase::Committing { waiting, then } = &t.phase else { return };
        if !waiting.contains(&from) {
            return;
        }
        let then = then.clone();
        self.abort_unit(unit.txn, then, Error::Abort(AbortReason::Timeout), ctx);
    }

    /// LK-5b: an accepted BASE transaction waits for `txn`. If `txn` can still abort
    /// (an ACID transaction before its decision, or a BASE one before acceptance), it does.
    pub(super) fn on_wound(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&txn) else { return };
        if t.base && t.accepted {
            return;
        }
        let wounded = Error::Abort(AbortReason::Wounded);
        match &t.phase {
            Phase::Preparing { then, .. } => {
                let then = then.clone();
                self.abort_unit(txn, then, wounded, ctx);
            }
            Phase::Committing { .. } => {} // decided: it is about to release everything
            Phase::Running => {
                // Fail the operations in flight; the procedure (or client) sees a retryable
                // abort and the coordinator rolls the transaction back.
                let ids: Vec<SubOpId> = std::mem::take(&mut t.in_flight).into_keys().collect();
                if ids.is_empty() {
                    t.unit_error.get_or_insert(wounded.clone());
                    t.wounded = true;
                }
                for id in ids {
                    ctx.op_done(id, Err(wounded.clone()));
                }
            }
        }
    }

    pub(super) fn on_query(&mut self, unit: Unit, from: PartitionId, ctx: &mut CoordCtx) {
        let decision = match self.decisions.get(&unit) {
            Some(p) => {
                Request::Decision { unit, commit: true, writes: p.writes.get(&from).cloned().unwrap_or_default() }
            }
            None => {
                // Presumed abort. If the unit is still preparing here, it aborts now.
                if let Some(t) = self.txns.get(&unit.txn) {
                    if matches!(t.phase, Phase::Preparing { .. }) && Self::unit(unit.txn, t) == unit {
                        if let Phase::Preparing { then, .. } = &t.phase {
                            let then = then.clone();
                            self.abort_unit(unit.txn, then, Error::Abort(AbortReason::Failure), ctx);
                        }
                    } else if matches!(t.phase, Phase::Committing { .. }) {
                        return; // decided but not logged (one participant): it will get the commit
                    }
                }
                Request::Decision { unit, commit: false, writes: vec![] }
            }
        };
        ctx.send_to_partition(from, decision);
    }

    /// LK-7: a participant asks whether `txn`, idle there, is alive: yes while this
    /// coordinator runs it and heard from it within [`IDLE_TRANSACTION_MAX`] (a reply, a
    /// client's operation). Otherwise no answer, and the participant's orphan timeout rolls
    /// its work there back.
    pub(super) fn on_query_idle(&mut self, txn: TxnId, from: PartitionId, ctx: &mut CoordCtx) {
        let alive = self.txns.get(&txn).is_some_and(|t| {
            !t.base
                && matches!(t.phase, Phase::Running)
                && ctx.now.saturating_sub(t.last_progress) < IDLE_TRANSACTION_MAX
        });
        if alive {
            ctx.send_to_partition(from, Request::Alive { txn });
        }
    }

    /// A partition asks about a BASE transaction of an earlier incarnation of ours (see
    /// [`Reply::QueryBase`]).
    pub(super) fn on_query_base(&mut self, txn: TxnId, from: PartitionId, ctx: &mut CoordCtx) {
        if txn.epoch >= ctx.epoch || self.txns.contains_key(&txn) || self.ending.contains_key(&txn) {
            return; // ours and alive: rolled forward or ending, the partition will hear of it
        }
        ctx.send_to_partition(from, Request::EndBase { txn, after: vec![] });
    }

    /// Sends `EndBase` for `txn` to every partition that has not acknowledged it, naming the
    /// subtransactions whose commits that partition has not acknowledged yet: it applies them
    /// first. (Sent only once every commit was acknowledged, it would hold the saline locks
    /// for one more log sync and round trip.)
    pub(super) fn send_end_base(&self, txn: TxnId, ctx: &mut CoordCtx) {
        let Some(waiting) = self.ending.get(&txn) else { return };
        let units = Unit { txn, sub: 0 }..=Unit { txn, sub: u32::MAX };
        for part in waiting {
            let after = self.decisions.range(units.clone()).filter(|(_, p)| p.waiting.contains(part));
            let after = after.map(|(u, _)| u.sub).collect();
            ctx.send_to_partition(*part, Request::EndBase { txn, after });
        }
    }

    pub(super) fn resend_decisions(&mut self, ctx: &mut CoordCtx) {
        if ctx.now.saturating_sub(self.last_resend) < RESEND_INTERVAL {
            return;
        }
        self.last_resend = ctx.now;
        for (unit, p) in &self.decisions {
            for part in &p.waiting {
                let writes = p.writes.get(part).cloned().unwrap_or_default();
                ctx.send_to_partition(*part, Request::Commit { unit: *unit, writes, ops: None });
            }
        }
        let ending: Vec<TxnId> = self.ending.keys().copied().collect();
        for txn in ending {
            self.send_end_base(txn, ctx);
        }
        for ((unit, part), attempt) in &self.aborts {
            ctx.send_to_partition(*part, Request::Abort { unit: *unit, attempt: *attempt });
        }
        self.resend_unlogged(ctx);
        self.resend_ops(ctx);
    }

    /// Operations unanswered for [`OP_RESEND_AFTER`] are sent again, marked `resent`. The
    /// partition drops a resend of an operation that still waits for its locks, runs one it
    /// never received, and fails one it answered already (the reply was lost; it keeps no
    /// copy), which the transaction sees as a retryable abort.
    pub(super) fn resend_ops(&mut self, ctx: &mut CoordCtx) {
        for t in self.txns.values_mut().filter(|t| t.retry_at.is_none()) {
            for (id, f) in &mut t.in_flight {
                if ctx.now.saturating_sub(f.sent) < OP_RESEND_AFTER {
                    continue;
                }
                f.sent = ctx.now;
                let mut r = (*f.req).clone();
                if let Request::Op { resent, incarnation, unit, .. } = &mut r {
                    *resent = true;
                    // Another operation of the unit may have been answered since it was sent.
                    let known = t.incarnations.get(&id.part).filter(|(a, u, _)| *a == t.attempt && u == unit);
                    *incarnation = incarnation.or(known.map(|(_, _, i)| *i));
                }
                ctx.send_to_partition(id.part, r);
            }
        }
    }

    /// A one-phase `Commit` or a `Prepare` (neither is logged) that went unanswered for
    /// [`BASE_OP_TIMEOUT`] is sent again: lost, the transaction waited forever in `Committing`
    /// or `Preparing` and its client was never answered (found by the simulator's liveness
    /// check, `litmus sim --seed 0 --engine acid --faults`). Both are idempotent at the
    /// participant: a commit it applied is acknowledged again (its operation count still
    /// matches), and one it rolled back meanwhile (orphan timeout, restart) is refused, as is a
    /// prepare of work it lost — the coordinator then aborts.
    pub(super) fn resend_unlogged(&mut self, ctx: &mut CoordCtx) {
        for (txn, t) in &mut self.txns {
            if ctx.now.saturating_sub(t.last_progress) < BASE_OP_TIMEOUT {
                continue;
            }
            let unit = Unit { txn: *txn, sub: if t.base { t.sub } else { 0 } };
            match &t.phase {
                Phase::Committing { waiting, .. } if !self.decisions.contains_key(&unit) => {
                    for p in waiting {
                        let writes = t.unit_writes.get(p).cloned().unwrap_or_default();
                        let ops = Some(t.unit_ops.get(p).copied().unwrap_or_default());
                        ctx.send_to_partition(*p, Request::Commit { unit, writes, ops });
                    }
                }
                Phase::Preparing { waiting, .. } => {
                    for p in waiting {
                        let ops = t.unit_ops.get(p).copied().unwrap_or_default();
                        ctx.send_to_partition(*p, Request::Prepare { unit, ops });
                    }
                }
                _ => continue,
            }
            t.last_progress = ctx.now;
        }
    }
}
