//! Decisions arriving at a partition: commits, prepares, aborts, the end of BASE transactions,
//! coordinator epochs, and the periodic sweep of work whose coordinator went silent.

use super::*;

impl LockingPartition {
    /// Installs a committed write at the next commit timestamp; returns the row it replaced.
    pub(super) fn install(&mut self, table: TableId, key: Key, row: Option<Row>, store: &mut MvccStore) -> Option<Row> {
        self.state.last_ts = self.state.last_ts.next();
        store.replace_latest(table, key, self.state.last_ts, row)
    }

    /// What a unit's commit record says besides its writes.
    pub(super) fn committed(&mut self, unit: Unit, saline: LockList, results: Vec<(u32, PartResult)>) {
        self.state.in_doubt.remove(&unit);
        self.state.pending.remove(&unit);
        if let Some(t) = self.txns.get_mut(&unit.txn).filter(|t| t.sub == unit.sub) {
            t.open = false;
        }
        if unit.sub > 0 {
            // The durable saline set changes: the next `Locked` record walks all locks.
            self.locks_followed.remove(&unit.txn);
            self.state.committed.insert(unit, results);
            self.state.saline.insert(unit.txn, saline);
        } else {
            self.state.acid_committed.insert(unit.txn);
        }
    }

    /// `ops`: see `Request::Commit` (`None`: a logged decision, never refused).
    pub(super) fn on_commit(
        &mut self,
        from: Addr,
        unit: Unit,
        writes: Vec<WriteImage>,
        ops: Option<u32>,
        ctx: &mut PartCtx,
    ) {
        let txn = unit.txn;
        // A commit we applied already (a re-sent decision, a duplicated message), or one for a
        // transaction that has ended here, changes nothing.
        if self.finished.get(&txn) == Some(&false) {
            // We rolled it back (orphan timeout, epoch change) before the commit arrived.
            return ctx.reply(from, Reply::Aborted { unit });
        }
        if unit.sub == 0
            && !self.state.acid_committed.contains(&txn)
            && !self.txns.contains_key(&txn)
            && !self.state.in_doubt.contains_key(&unit)
        {
            // We hold nothing of it (we restarted before it prepared): its writes were computed
            // under locks we no longer hold, so applying them could overwrite newer ones.
            return ctx.reply(from, Reply::Aborted { unit });
        }
        // `base_ended` is durable, `finished` is not: `EndBase` goes out before every commit it
        // names is acknowledged, so a commit whose acknowledgement was lost is re-sent after
        // the transaction ended here — across our restart too, when only the durable set still
        // knows it (re-applied then, its images overwrote newer writes: `litmus sim --engine
        // salt --workload bank --faults --seed 221`).
        let done = self.state.committed.contains_key(&unit)
            || self.finished.contains_key(&txn)
            || self.state.base_ended.contains(&txn)
            || self.state.acid_committed.contains(&txn);
        if !done && ops.is_some_and(|n| !self.txns.get(&txn).is_some_and(|t| t.sub == unit.sub && t.ops == n)) {
            // We restarted after some of its operations ran here (their locks are gone): a
            // later one started a fresh record. The coordinator rolls the transaction back.
            return ctx.reply(from, Reply::Aborted { unit });
        }
        if !done {
            let mut grants = Vec::new();
            if unit.sub == 0 {
                grants.extend(self.locks.cancel_waits(txn));
                grants.extend(self.locks.release_all(txn));
                self.txns.remove(&txn);
                self.parked.retain(|_, p| p.unit.txn != txn);
                self.log_commit(unit, writes, vec![], vec![], ctx);
                self.remember_finished(txn, true);
            } else {
                grants.extend(self.locks.downgrade_alkaline(txn));
                grants.extend(self.locks.release_non_saline(txn));
                if let Some(t) = self.txns.get_mut(&txn) {
                    t.buffer.clear();
                    t.prepared = false;
                }
                let saline = self.saline_of(txn);
                self.log_commit(unit, writes, saline, vec![], ctx);
            }
            self.resume(grants, ctx);
        }
        ctx.reply(from, Reply::Committed { unit });
    }

    /// `ops`: see `Request::Prepare`. A unit prepared already (a duplicated `Prepare`, or one
    /// relocked after our restart) votes yes again: its locks are durable.
    pub(super) fn on_prepare(&mut self, from: Addr, unit: Unit, ops: u32, ctx: &mut PartCtx) {
        let vote = match self.txns.get_mut(&unit.txn) {
            Some(t)
                if t.sub == unit.sub
                    && (t.prepared || t.ops == ops)
                    && !self.parked.values().any(|p| p.unit == unit) =>
            {
                t.prepared = true;
                let node = unit.txn.node;
                let locks = self.locks.held_locks(unit.txn);
                let record = Record::Prepared { unit, coordinator: node, locks };
                ctx.log(&record);
                self.apply_record(record, ctx.store);
                self.prepared_at.entry(unit).or_insert(ctx.now); // a duplicated Prepare keeps the first time
                Ok(())
            }
            _ => Err(Error::Abort(AbortReason::Failure)), // we lost it (restart, orphan timeout)
        };
        ctx.reply(from, Reply::Prepared { unit, vote });
    }

    pub(super) fn on_abort(&mut self, from: Option<Addr>, unit: Unit, ctx: &mut PartCtx) {
        let txn = unit.txn;
        let mut grants = self.locks.cancel_waits(txn);
        self.parked.retain(|_, p| p.unit.txn != txn);
        if self.state.in_doubt.contains_key(&unit) || self.state.pending.contains_key(&unit) {
            let record = Record::Aborted { unit };
            ctx.log(&record);
            self.apply_record(record, ctx.store);
        }
        if unit.sub == 0 {
            grants.extend(self.locks.release_all(txn));
            self.txns.remove(&txn);
            self.remember_finished(txn, false);
        } else {
            grants.extend(self.locks.release_non_saline(txn));
            if let Some(t) = self.txns.get_mut(&txn) {
                t.buffer.clear();
                t.prepared = false;
                if t.sub <= unit.sub {
                    t.open = false;
                }
            }
            // What the rolled-back subtransaction read may still be held back by LK-6a, and a
            // later write of the transaction may depend on it (LK-6b): keep it durable.
            // Only while it lives here: a late abort of an ended transaction must not bring its
            // (released or releasing) locks back for a restart to relock.
            let ended = self.state.base_ended.contains(&txn) || self.finished.contains_key(&txn);
            let saline = self.saline_of(txn);
            if !ended && self.state.saline.get(&txn).map_or(!saline.is_empty(), |s| *s != saline) {
                let record = Record::Saline { txn, locks: saline };
                ctx.log(&record);
                self.apply_record(record, ctx.store);
            }
        }
        self.resume(grants, ctx);
        if let Some(from) = from {
            ctx.reply(from, Reply::Aborted { unit });
        }
    }

    /// An `Abort` of BASE subtransaction `unit` of run `attempt`: its operations that arrive
    /// later are stale (see `State::base_aborted`), durably — a restart in between must not let
    /// a late one take locks. Logged only when it moves the mark (aborts are rare).
    pub(super) fn remember_base_abort(&mut self, unit: Unit, attempt: u32, ctx: &mut PartCtx) {
        let txn = unit.txn;
        if self.state.base_ended.contains(&txn) || self.finished.contains_key(&txn) {
            return;
        }
        if self.state.base_aborted.get(&txn).is_some_and(|&a| a >= (attempt, unit.sub)) {
            return;
        }
        let record = Record::BaseAborted { txn, attempt, sub: unit.sub };
        ctx.log(&record);
        self.apply_record(record, ctx.store);
    }

    pub(super) fn on_end_base(&mut self, txn: TxnId, ctx: &mut PartCtx) {
        // Its coordinator waits for none of them any more.
        self.deferred.remove(&txn);
        let mut grants = self.locks.cancel_waits(txn);
        grants.extend(self.locks.release_all(txn));
        self.unfollow(txn);
        self.txns.remove(&txn);
        self.parked.retain(|_, p| p.unit.txn != txn);
        // What LK-6 holds back must come back after a restart, still held back.
        let releasing = self.locks.held_locks(txn);
        // Logged once per transaction (a repeated EndBase finds it ended), so its late
        // duplicates stay refused after a restart.
        if !self.state.base_ended.contains(&txn) || !releasing.is_empty() {
            let record = Record::BaseEnded { txn, releasing };
            ctx.log(&record);
            self.apply_record(record, ctx.store);
        }
        self.remember_finished(txn, true);
        self.resume(grants, ctx);
    }

    pub(super) fn on_epoch(&mut self, node: NodeId, epoch: u32, ctx: &mut PartCtx) {
        if self.epochs.get(&node).is_some_and(|&e| e >= epoch) {
            return;
        }
        self.epochs.insert(node, epoch);
        // Unprepared ACID work of a dead incarnation can still abort: roll it back. BASE work
        // is left in place — a subtransaction whose operations ran here may have been decided
        // just before the crash (its commit will be re-sent, and its row images are only
        // correct while we keep its locks), and an accepted transaction is rolled forward (its
        // new run supersedes what is here). The sweep asks the coordinator about the rest
        // (`Reply::QueryBase`): one it never logged is ended.
        let stale: Vec<TxnId> = self
            .txns
            .iter()
            .filter(|(id, t)| id.node == node && id.epoch < epoch && !t.prepared && !t.class.base)
            .map(|(id, _)| *id)
            .collect();
        let stale = sorted(stale);
        for txn in stale {
            self.on_abort(None, Unit { txn, sub: 0 }, ctx);
        }
    }

    pub(super) fn sweep(&mut self, ctx: &mut PartCtx) {
        if ctx.now.saturating_sub(self.last_sweep) < QUERY_INTERVAL {
            return;
        }
        self.last_sweep = ctx.now;
        self.prepared_at.retain(|unit, _| self.state.in_doubt.contains_key(unit));
        for (unit, (node, _)) in &self.state.in_doubt {
            if self.prepared_at.get(unit).is_some_and(|&at| ctx.now.saturating_sub(at) < IN_DOUBT_QUERY_AFTER) {
                continue;
            }
            ctx.reply(Addr::Coordinator(*node), Reply::Query { unit: *unit });
        }
        // BASE transactions of dead coordinator incarnations: still alive?
        let orphaned_base: BTreeSet<TxnId> = self
            .txns
            .iter()
            .filter(|(id, t)| t.class.base && self.epochs.get(&id.node).is_some_and(|&e| e > id.epoch))
            .map(|(id, _)| *id)
            .collect();
        for txn in orphaned_base {
            ctx.reply(Addr::Coordinator(txn.node), Reply::QueryBase { txn });
        }
        // LK-6b across partitions: ask again about remote reads that held-back locks still
        // wait for (the first question, or its answer, may be lost, or the answering partition
        // restarted and forgot it).
        for (txn, dep, releasing) in self.locks.remote_pending() {
            if releasing {
                Self::await_reads(txn, &[dep], ctx);
            }
        }
        // Wounds may be lost: repeat them while an accepted BASE transaction still waits.
        let waiting: BTreeMap<TxnId, bool> =
            self.parked.values().filter(|p| p.wounded).fold(BTreeMap::new(), |mut m, p| {
                *m.entry(p.unit.txn).or_insert(false) |= p.wounded_all;
                m
            });
        for (txn, all) in waiting {
            self.wound_blockers(txn, all, ctx);
        }
        // LK-7: idle unprepared ACID work is asked about, then rolled back if nobody vouches.
        let now = ctx.now;
        let idle = |t: &PTxn| {
            if !t.prepared && !t.class.base {
                Some(now.saturating_sub(t.last_active.max(t.vouched)))
            } else {
                None
            }
        };
        // A transaction whose operation waits here for a lock is not idle but stuck: it is not
        // asked about, and its wait ends at the orphan timeout as before.
        let waiting: BTreeSet<TxnId> = self.parked.values().map(|p| p.unit.txn).collect();
        for (txn, _) in
            self.txns.iter().filter(|(id, t)| !waiting.contains(id) && idle(t).is_some_and(|d| d > ORPHAN_ASK_AFTER))
        {
            ctx.reply(Addr::Coordinator(txn.node), Reply::QueryIdle { txn: *txn });
        }
        let orphans: Vec<TxnId> =
            self.txns.iter().filter(|(_, t)| idle(t).is_some_and(|d| d > ORPHAN_TIMEOUT)).map(|(id, _)| *id).collect();
        for txn in sorted(orphans) {
            self.on_abort(None, Unit { txn, sub: 0 }, ctx);
        }
    }
}
