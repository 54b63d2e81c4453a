//! Running an operation whose locks are granted, and logging what its unit locked and committed.

use super::*;

impl LockingPartition {
    pub(super) fn execute(&mut self, mut p: Parked, ctx: &mut PartCtx) {
        let txn = p.unit.txn;
        let catalog = ctx.catalog; // a shared borrow of its own: the table name is for error messages only
        let table_name = catalog.table(p.op.table).map_or("", |t| t.name.as_str());
        // Read-uncommitted reads see other transactions' uncommitted writes (dirty reads are
        // what that level allows; footnote 3 of Salt §5.1).
        let dirty = match (&p.op.kind, self.txns.get(&txn).map(|t| t.class.isolation)) {
            (OpKind::Read { key, .. }, Some(litmus_core::Isolation::ReadUncommitted)) => self
                .txns
                .iter()
                .filter(|(other, _)| **other != txn)
                .filter_map(|(other, o)| Some((*other, o.buffer.get(&(p.op.table, key.clone()))?)))
                .min_by_key(|(other, _)| *other) // an exclusive lock has one holder; the min keeps replay exact
                .map(|(_, row)| row.clone()),
            _ => None,
        };
        let t = self.txns.get_mut(&txn).expect("executing a live txn");
        // Working here (LK-5a's exception) counts from when an operation last *ran*: one
        // granted after a long wait in a queue has just started working, and the queue behind
        // it must not take it for idle.
        t.last_active = ctx.now;
        let mut writes = Vec::new();
        let result = match dirty {
            Some(row) if !t.buffer.contains_key(&(p.op.table, p.op.kind.key().expect("read").clone())) => {
                Ok(PartResult::Row(row))
            }
            _ => execute_op(&p.op, &mut t.buffer, ctx.store, table_name, &mut writes),
        };
        if let (Some(n), OpKind::Scan { end, limit, .. }) = (&p.narrowed, &p.op.kind) {
            if !scan_fits_lock(&result, *limit, &n.locked_to) {
                // Rows inside the narrowed range went away before the lock was granted (a
                // Delivery ahead of this one deleted the oldest NEW-ORDER row it waited for):
                // narrow again from where the lock ends, to the next rows, and scan again
                // (scans write nothing). Only when too few rows are left is the rest of the
                // range locked — which would also wait for every insert in flight at its tail.
                // The vanished head says the table is used as a queue (`queue_tables`).
                let (from, mode, short) = (n.locked_to.clone(), n.mode, n.short);
                let next = narrowed_scan_range(ctx.store, p.op.table, &from, end.as_ref(), *limit);
                if self.queue_tables.insert(p.op.table) {
                    // First seen here: take the anchor now (later scans take it first).
                    if let OpKind::Scan { start, .. } = &p.op.kind {
                        if let Some(anchor) = self.queue_head(p.op.table, mode, short, start) {
                            p.locks.push_back(anchor);
                        }
                    }
                }
                let rest = Target::Range { start: from, end: next.clone().or_else(|| end.clone()) };
                p.locks.push_back((p.op.table, rest, mode, short));
                p.narrowed = next.map(|locked_to| Narrowed { locked_to, mode, short });
                return self.advance(p, ctx);
            }
        }
        let mut grants = Vec::new();
        for (table, target, mode) in &p.short {
            grants.extend(self.locks.release(txn, *table, target, *mode));
        }
        let mut committed = false;
        if p.local_commit && self.cfg.local {
            // Salt §6.4: a single-operation alkaline subtransaction commits here and now.
            if let Ok(r) = &result {
                let writes = std::mem::take(&mut t.buffer)
                    .into_iter()
                    .map(|((table, key), row)| WriteImage { table, key, row })
                    .collect::<Vec<_>>();
                grants.extend(self.locks.downgrade_alkaline(txn));
                grants.extend(self.locks.release_non_saline(txn));
                let saline = self.saline_of(txn);
                let results = vec![(p.id.op, r.clone())];
                self.log_commit(p.unit, writes, saline, results, ctx);
                committed = true;
            } else {
                t.buffer.clear();
                grants.extend(self.locks.release_non_saline(txn));
            }
        }
        if !committed && p.unit.sub > 0 && result.is_ok() {
            self.log_locked(p.unit, ctx);
        }
        let base = p.unit.sub > 0;
        if base && !p.after.is_empty() {
            Self::await_reads(txn, &p.after, ctx);
        }
        let read_taint = if base { self.locks.read_taint(txn) } else { None };
        let r = Reply::Op {
            id: p.id,
            attempt: p.attempt,
            result,
            writes: if committed { vec![] } else { writes },
            committed,
            read_taint,
            incarnation: self.state.incarnation,
        };
        ctx.reply(p.from, r);
        self.resume(grants, ctx);
    }

    /// After an operation of BASE subtransaction `unit`: logs its locks (`Record::Locked`) —
    /// its alkaline locks, and saline ones not durable yet: a short-term read that LK-6a
    /// holds back is saline already, and a later write's release order depends on it. (Saline
    /// locks of committed subtransactions are in their `Commit` record.) Logged as the change
    /// from what the unit's earlier operations logged (`State::pending`), not the whole list
    /// again (`lock::LockDelta`), and only while it holds an alkaline lock.
    ///
    /// The unit's first record walks all the transaction's locks; later ones look only at the
    /// locks that changed since the previous one (`LockManager::take_changes`), so an
    /// operation costs what it changed, not what the unit holds (the walk, with the durable
    /// check per lock, is a visible cost in a salt TPC-C profile). Both give the same
    /// record: which locks are selected depends, besides the locks, only on the durable saline
    /// set, and that changes only with records that also end the unit's `pending` entry.
    pub(super) fn log_locked(&mut self, unit: Unit, ctx: &mut PartCtx) {
        let txn = unit.txn;
        let durable = self.state.saline.get(&txn);
        let keep = |l: &HeldLockView| {
            l.mode.class == LockClass::Alkaline || !durable.is_some_and(|d| d.iter().any(|x| l.is(x)))
        };
        let logged = self.state.pending.get(&unit);
        let followed = logged.is_some() && self.locks_followed.get(&txn) == Some(&unit.sub);
        let changes = if followed { self.locks.take_changes(txn) } else { None };
        let logged = logged.map_or(&[][..], Vec::as_slice);
        let is_alkaline = |l: &HeldLock| l.mode.class == LockClass::Alkaline;
        let (delta, alkaline) = match changes {
            Some(changes) => {
                let delta = self.locks.delta_of_changes(&changes, logged, keep);
                let alkaline = delta.added.iter().any(is_alkaline)
                    || logged.iter().any(|l| is_alkaline(l) && !delta.touches(l.granted));
                (delta, alkaline)
            }
            None => {
                self.locks.track_changes(txn);
                self.locks_followed.insert(txn, unit.sub);
                let mut alkaline = false;
                let now = self
                    .locks
                    .held_lock_views(txn)
                    .filter(|l| keep(l))
                    .inspect(|l| alkaline |= l.mode.class == LockClass::Alkaline);
                (LockDelta::between(logged, now), alkaline)
            }
        };
        #[cfg(debug_assertions)]
        {
            // Pair check: the record folds to what the walk of every held lock selects.
            let mut folded = logged.to_vec();
            delta.clone().apply_to(&mut folded);
            let walked: Vec<HeldLock> = {
                let mut all: Vec<HeldLock> =
                    self.locks.held_lock_views(txn).filter(|l| keep(l)).map(|l| l.to_held()).collect();
                all.sort_by_key(|l| l.granted);
                all
            };
            assert_eq!(folded, walked, "{unit:?}: the Locked delta from tracked changes folds to the held locks");
            assert_eq!(alkaline, walked.iter().any(is_alkaline), "{unit:?}: holds an alkaline lock");
        }
        if alkaline && !delta.is_empty() {
            let record = Record::Locked { unit, delta };
            ctx.log(&record);
            self.apply_record(record, ctx.store);
        } else if !alkaline {
            // Not logged: `pending` stays behind the changes just taken, so the next record
            // walks everything again.
            self.locks_followed.remove(&txn);
        }
    }

    /// Stops following `txn`'s lock changes (`locks_followed`): it ended here.
    pub(super) fn unfollow(&mut self, txn: TxnId) {
        self.locks_followed.remove(&txn);
        self.locks.untrack(txn);
    }

    pub(super) fn saline_of(&self, txn: TxnId) -> LockList {
        self.locks.saline_locks(txn)
    }

    /// Logs and applies a unit's commit.
    pub(super) fn log_commit(
        &mut self,
        unit: Unit,
        writes: Vec<WriteImage>,
        saline: LockList,
        results: Vec<(u32, PartResult)>,
        ctx: &mut PartCtx,
    ) {
        // Each write is logged as it changes the row the writes before it left, then applied,
        // so that replaying the record in order rebuilds the same rows (`apply_record`).
        let mut logged = Vec::with_capacity(writes.len());
        for w in writes {
            let before = self.install(w.table, w.key.clone(), w.row.clone(), ctx.store);
            let image = LoggedImage::between(before.as_ref(), &w.row);
            logged.push(LoggedWrite { table: w.table, key: w.key, image });
        }
        let record = Record::CommitColumns { unit, writes: logged, saline, results };
        ctx.log(&record);
        if let Record::CommitColumns { unit, saline, results, .. } = record {
            self.committed(unit, saline, results);
        }
    }
}
