//! Lock waits at a partition: patience (LK-5), wounds and deaths, deadlocks within the
//! partition (LK-5c), stepping out of queues, and resuming requests whose locks were granted.

use super::*;

impl LockingPartition {
    /// LK-5a and LK-5b, every tick. The operations of mortal transactions that have waited
    /// at least [`LOCK_WAIT_PATIENCE`] and still wait for an older transaction (or themselves)
    /// are aborted, as a request that dies at once would be; their waits are dropped and
    /// whoever queued behind them resumes. Impatience is a property of the transaction: one of
    /// its operations that is overdue aborts them all, as the coordinator then aborts the
    /// transaction anyway. An accepted BASE transaction cannot abort: once its operation has
    /// waited as long, it wounds the older transactions it waits for instead. Both wait the
    /// same patience first, so a lock held for a moment costs a wait, not an abort, either way.
    pub(super) fn abort_impatient(&mut self, ctx: &mut PartCtx) {
        // Per transaction with an overdue operation: when the earliest began waiting, and for
        // mortal ones whether they all wait for queue anchors (LK-5a's exception).
        let mut overdue: Vec<(TxnId, bool, Time)> = Vec::new();
        let mut wound: Vec<(TxnId, Time, bool)> = Vec::new();
        let clock = self.wait_clock(ctx.now);
        for p in self.parked.values_mut().filter(|p| !p.stepped_out) {
            let txn = p.unit.txn;
            // LK-5f: waits are timed on the wait clock, where a stall counts as one tick.
            let waited = clock.saturating_sub(p.waited_from);
            if waited < LOCK_WAIT_PATIENCE {
                continue;
            }
            if self.txns.get(&txn).is_some_and(|t| t.class.immortal) {
                // LK-5e: past `RUNNING_WITHIN`, younger mortal blockers are wounded too. On
                // real time, as the liveness it bounds (LK-5a's exception) is judged on it.
                let all = ctx.now.saturating_sub(p.waiting_since) >= RUNNING_WITHIN;
                if p.wounded && (p.wounded_all || !all) {
                    continue;
                }
                match wound.iter_mut().find(|(t, _, _)| *t == txn) {
                    Some(w) => {
                        w.1 = w.1.min(p.waiting_since);
                        w.2 |= all;
                    }
                    None => wound.push((txn, p.waiting_since, all)),
                }
            } else if let Some(o) = overdue.iter_mut().find(|(t, _, _)| *t == txn) {
                o.1 &= p.on_anchor;
                o.2 = o.2.min(p.waiting_since);
            } else {
                // in token order: who began waiting first goes first
                overdue.push((txn, p.on_anchor, p.waiting_since));
            }
        }
        for (txn, since, all) in wound {
            // LK-5d: a deadlock through it here is broken by its own victim (LK-5c's
            // choice), not by wounding whoever is older: the wound would fall on the older
            // mortal transaction in the way while a younger mortal member of the cycle is due
            // to die for LK-5a in the same sweep. A wait with no victim here (no cycle, or one
            // across partitions, which no partition sees) wounds.
            if let Some(victim) = self.cycle_victim(txn) {
                self.break_waits(victim, ctx);
                continue;
            }
            // LK-5b waits out blockers that are alive (the exception of LK-5a): an older
            // ACID transaction that works here — a TPC-C Delivery waiting out saline locks
            // one district after another — is on no cycle through here, and wounding it
            // would throw away hundreds of milliseconds of its work. One that waits here
            // for us, or works nowhere here, is wounded. Working counts only from
            // when the wait began ([`Self::blockers_progressing`]): a blocker that last ran here
            // before may be waiting for us at another partition.
            if self.blockers_progressing(txn, since, ctx.now) {
                continue;
            }
            for p in self.parked.values_mut().filter(|p| p.unit.txn == txn) {
                p.wounded = true;
                p.wounded_all |= all;
            }
            self.wound_blockers(txn, all, ctx);
        }
        for (txn, on_anchor, since) in overdue {
            // An abort earlier in this loop may have cleared its way (its waits-for set only
            // shrinks); then it keeps waiting.
            // The exception covers waits for queue anchors and waits for accepted BASE
            // transactions only: those end without any abort (they cannot abort), so a waiter
            // that outlives its patience behind a working one loses nothing by waiting on.
            // Behind accepted BASE transactions, working counts only operations run here since
            // the wait began: a transfer that ran here only before may be waiting at another
            // partition for this very waiter (bank totals under Salt otherwise died in every
            // such cycle, `tests/bank_check.rs`); a New-Order that keeps running here is alive.
            // LK-5h: a lock-free transaction waits out alive blockers wherever it waits, as on
            // an anchor: it holds nothing, so only the queue behind it can close a cycle through
            // it, and a cycle here is never alive.
            let exempt = ((on_anchor || self.lock_free(txn)) && self.blockers_running(txn, ctx.now))
                || (self.waits_only_for_immortals(txn) && self.blockers_progressing(txn, since, ctx.now));
            if self.locks.impatient(txn) && !exempt {
                self.break_waits(txn, ctx);
            }
        }
    }

    /// LK-5f: the wait clock at `now`. It runs with real time, except that the time
    /// since the last tick counts for at most [`TICK_CREDIT_MAX`]: a partition whose worker was
    /// starved of CPU for 50 ms has not watched its waits for 50 ms. Timed on real time, the
    /// first tick after such a stall would find every waiter past its patience and abort them
    /// all at once, before the commits and releases queued in the stalled worker's mailbox had
    /// been read; their retries cost more CPU and make the next stall longer, so an overloaded
    /// partition churns. On the wait clock a stall counts as one tick, and a waiter dies only
    /// after ticks it actually saw add up to the patience.
    pub(super) fn wait_clock(&self, now: Time) -> Duration {
        let (clock, at) = self.wait_clock;
        clock + now.saturating_sub(at).min(TICK_CREDIT_MAX)
    }

    /// LK-5c and LK-5d: whom to abort for a cycle through `txn` in this partition's
    /// waits-for graph (`LockManager::deadlock_cycle`), if there is one.
    /// 1. The youngest mortal member that waits for an older one — what LK-5a would abort
    ///    after the patience.
    /// 2. Else, if the cycle is of accepted BASE transactions only (none can abort, and
    ///    LK-5b wounds only transactions that can, so nothing else breaks it), its youngest member
    ///    that waits for an older one loses the *subtransaction* that waits: its coordinator
    ///    rolls it back and re-runs it, which releases that subtransaction's alkaline locks —
    ///    every edge of such a cycle is an alkaline lock, as saline locks do not block BASE
    ///    requests — and its transaction stays accepted. (TPC-C New-Orders update their stock
    ///    rows in the order of their lines, so two accepted ones can deadlock on stock, with
    ///    Deliveries queued behind them.)
    /// 3. Else none: a cycle whose only edges to older transactions are accepted BASE
    ///    transactions' is left to LK-5b's wounds. Rolling back an accepted member's
    ///    subtransaction would not release the saline locks a mortal member may wait for, and
    ///    aborting the youngest mortal member instead makes overloaded runs stall more often,
    ///    not less.
    pub(super) fn cycle_victim(&self, txn: TxnId) -> Option<TxnId> {
        let cycle = self.locks.deadlock_cycle(txn)?;
        let immortal = |t: TxnId| self.txns.get(&t).is_some_and(|t| t.class.immortal);
        let youngest = |it: &mut dyn Iterator<Item = Owner>| it.max_by_key(|o| (o.age, o.txn)).map(|o| o.txn);
        let mortal = || cycle.iter().filter(|(o, _)| !immortal(o.txn));
        youngest(&mut mortal().filter(|(_, older)| *older).map(|(o, _)| *o)).or_else(|| {
            let all_immortal = cycle.iter().all(|(o, _)| immortal(o.txn));
            youngest(&mut cycle.iter().filter(|(_, older)| all_immortal && *older).map(|(o, _)| *o))
        })
    }

    /// Whether everyone `txn` waits for here is an accepted BASE transaction: immortal by its
    /// latest operation, or holding saline locks (a committed subtransaction; BASE
    /// transactions are accepted when their first subtransaction commits, §6.1), which is what
    /// a partition that saw only its earlier operations knows.
    pub(super) fn waits_only_for_immortals(&self, txn: TxnId) -> bool {
        self.locks.waits_for_set(txn).is_some_and(|set| !set.is_empty() && set.iter().all(|b| self.accepted(*b)))
    }

    /// An accepted BASE transaction, as far as this partition knows: immortal by its latest
    /// operation here, or holding saline locks here (a committed subtransaction; BASE
    /// transactions are accepted when their first subtransaction commits, §6.1).
    pub(super) fn accepted(&self, txn: TxnId) -> bool {
        self.txns.get(&txn).is_some_and(|t| t.class.immortal) || self.state.saline.contains_key(&txn)
    }

    /// LK-5a's exception, for waits on queue anchors and on accepted BASE transactions: every transaction `txn` waits for is
    /// *alive*, so `txn` keeps waiting past its patience instead of dying.
    /// Alive is *working here* — an operation of it ran here within [`RUNNING_WITHIN`], it has
    /// not prepared, and none of its operations waits here — or being an accepted BASE
    /// transaction (the anchor clause: it cannot abort, and LK-5e breaks a cycle through it
    /// by wounding, [`Self::wound_victims`]), or waiting here only for alive transactions, looking at most at [`ALIVE_VISITS_MAX`] transactions of the waits-for
    /// graph (a queue: each waits for the ones ahead, the head works). One on a deadlock cycle
    /// sends no operation, so it stops counting [`RUNNING_WITHIN`] after its last one at the
    /// latest, and every path from an alive transaction ends at a working one (a transaction
    /// met again on the path is not alive): so no member of a deadlock on this partition is
    /// alive, and a deadlock across partitions through an anchor lasts at most
    /// [`RUNNING_WITHIN`] plus the patience. Without this, a queue behind a long transaction
    /// that holds its lock while it works — TPC-C Deliveries of one warehouse, each taking the
    /// district's oldest NEW-ORDER row in turn for tens of milliseconds — would die after the
    /// patience, retry into the same queue, and leave the lock idle during its backoff.
    ///
    /// "Within [`RUNNING_WITHIN`]", not "since the wait began": a Delivery under Salt pauses
    /// tens of milliseconds between operations on a loaded node, and the stricter test would
    /// abort the Deliveries queued behind it for "deadlocks" on the anchor that are no cycle.
    /// (Not applied to every wait: a transaction with operations in flight at two partitions
    /// looks working at each while the two wait for each other, so such deadlocks would last
    /// [`RUNNING_WITHIN`], which costs ticketing under `acid` much of its throughput.)
    pub(super) fn blockers_running(&self, txn: TxnId, now: Time) -> bool {
        let mut memo: BTreeMap<TxnId, bool> = BTreeMap::from([(txn, false)]);
        self.waits_for_alive(txn, now, None, &mut memo)
    }

    /// [`Self::blockers_running`], where working also means an operation ran here at or after
    /// `since` (when the waiter began waiting): one that ran here only before may since wait
    /// at another partition for the waiter, a cycle no partition sees whole.
    pub(super) fn blockers_progressing(&self, txn: TxnId, since: Time, now: Time) -> bool {
        let mut memo: BTreeMap<TxnId, bool> = BTreeMap::from([(txn, false)]);
        self.waits_for_alive(txn, now, Some(since), &mut memo)
    }

    /// Whether `txn` waits for someone and everyone it waits for is alive; `memo` holds the
    /// verdicts so far, and `false` for the transactions being decided (a cycle is not alive).
    /// On a queue anchor only its holders count (`LockManager::waits_for_holders`): the
    /// consumers queued ahead wait for the same ones, and the queue can be longer than
    /// [`ALIVE_VISITS_MAX`].
    pub(super) fn waits_for_alive(
        &self,
        txn: TxnId,
        now: Time,
        since: Option<Time>,
        memo: &mut BTreeMap<TxnId, bool>,
    ) -> bool {
        let Some(set) = self.locks.waits_for_holders(txn, QUEUE_ANCHORS) else { return false };
        !set.is_empty() && set.iter().all(|o| self.alive(*o, now, since, memo))
    }

    pub(super) fn alive(&self, txn: TxnId, now: Time, since: Option<Time>, memo: &mut BTreeMap<TxnId, bool>) -> bool {
        if let Some(known) = memo.get(&txn) {
            return *known;
        }
        if memo.len() >= ALIVE_VISITS_MAX {
            return false;
        }
        let alive = if since.is_none() && self.accepted(txn) {
            // LK-5a's anchor clause: an accepted BASE transaction ends without aborting, and
            // LK-5e breaks any cycle through it (see `blockers_running`).
            true
        } else if self.locks.is_waiting(txn) {
            memo.insert(txn, false); // on the path: a cycle back here is not alive
            self.waits_for_alive(txn, now, since, memo)
        } else {
            self.txns.get(&txn).is_some_and(|t| {
                let idle = now.saturating_sub(t.last_active);
                // Its coordinator has been silent here since it last ran: that node is not
                // running, so the blocker cannot be told idle (bounded, see the constant).
                let silent = self.heard_from.get(&txn.node).is_none_or(|h| *h <= t.last_active);
                !t.prepared
                    && (idle < RUNNING_WITHIN || (silent && idle < COORDINATOR_SILENT_MAX))
                    && since.is_none_or(|s| t.last_active >= s)
            })
        };
        memo.insert(txn, alive);
        alive
    }

    /// LK-5 breaks the waits of `txn`: they step out of their queues if it is lock-free
    /// (LK-5h, [`Self::steps_out`]), else its waiting operations abort.
    pub(super) fn break_waits(&mut self, txn: TxnId, ctx: &mut PartCtx) {
        if !self.steps_out(txn, ctx.now) {
            return self.abort_waiting(txn, ctx);
        }
        let grants = self.locks.cancel_waits(txn);
        for p in self.parked.values_mut().filter(|p| p.unit.txn == txn && !p.stepped_out) {
            let lock = p.waiting_for.take().expect("checked by steps_out");
            if lock.3 {
                p.short.pop();
            }
            p.locks.push_front(lock);
            p.stepped_out = true;
            p.out_since.get_or_insert(ctx.now);
        }
        self.resume(grants, ctx);
    }

    /// LK-5h: whether the waits of `txn` step out of their queues instead of aborting
    /// it. It must be lock-free ([`TxnClass::lock_free`]: every operation so far takes only
    /// short-term locks, so it holds none between operations), and each waiting operation must
    /// hold no lock but the one it waits for, and have stepped out first less than
    /// [`STEP_OUT_MAX`] ago. Then dropping its waits breaks every cycle through it, and it
    /// loses only its places in the queues: it asks again on the next tick
    /// ([`Self::retry_stepped_out`]). A TPC-C Stock-Level, whose ~200 stock reads are
    /// read-committed (clause 3.4.0.1), died for every wait behind an accepted BASE New-Order
    /// that itself waited, or on a stock row carrying remote dependencies.
    pub(super) fn steps_out(&self, txn: TxnId, now: Time) -> bool {
        self.lock_free(txn)
            && self.parked.values().filter(|p| p.unit.txn == txn && !p.stepped_out).all(|p| {
                p.waiting_for.as_ref().is_some_and(|l| p.short.len() == usize::from(l.3)) && p.may_step_out_at(now)
            })
    }

    /// LK-5h: `txn` is lock-free as far as its latest operation here says
    /// ([`TxnClass::lock_free`]; never a BASE transaction).
    pub(super) fn lock_free(&self, txn: TxnId) -> bool {
        self.txns.get(&txn).is_some_and(|t| t.class.lock_free)
    }

    /// LK-5h for an operation refused its next lock at once (`Decision::Die`: a lock whose
    /// release waits for remote reads, a full queue): whether it steps out and asks again next
    /// tick instead. Only a lock-free transaction's operation that holds no lock yet (see
    /// [`Self::steps_out`]), for at most [`STEP_OUT_MAX`].
    ///
    /// Not any ACID request refused because whom it would wait for cannot be known (a BASE
    /// write held back by the writer's reads on another partition): that helps TPC-C
    /// Deliveries on customer rows remote Payments wrote, but starves bank totals
    /// (`bank_check_passes_on_an_intact_bank_and_compares_totals` sees none finish), even with
    /// the asking bounded to the patience — presumably a total's range locks on every
    /// partition, held meanwhile, keep out the transfers that would settle those reads. Not a
    /// BASE operation either: asking again, one broke a `salt-local` TPC-C check (a Payment's
    /// `d_ytd` counted without its `w_ytd` and HISTORY row; cause not traced).
    pub(super) fn may_step_out(&self, p: &Parked, now: Time) -> bool {
        self.lock_free(p.unit.txn) && p.short.is_empty() && p.may_step_out_at(now)
    }

    /// LK-5h, every tick: operations that stepped out of their queues ask again.
    pub(super) fn retry_stepped_out(&mut self, ctx: &mut PartCtx) {
        let out: Vec<u64> = self.parked.iter().filter(|(_, p)| p.stepped_out).map(|(t, _)| *t).collect();
        for token in out {
            if let Some(mut p) = self.parked.remove(&token) {
                p.stepped_out = false;
                self.advance(p, ctx);
            }
        }
    }

    /// LK-5: aborts the waiting operations of `txn` with `AbortReason::Deadlock` (the
    /// coordinator then aborts the transaction); its waits are dropped and whoever queued
    /// behind them resumes.
    pub(super) fn abort_waiting(&mut self, txn: TxnId, ctx: &mut PartCtx) {
        let grants = self.locks.cancel_waits(txn);
        let tokens: Vec<u64> = self.parked.iter().filter(|(_, p)| p.unit.txn == txn).map(|(t, _)| *t).collect();
        for token in tokens {
            let p = self.parked.remove(&token).expect("listed just now");
            die(p, self.state.incarnation, ctx);
        }
        self.resume(grants, ctx);
    }

    /// LK-5b: tell the coordinators of the older transactions an accepted BASE
    /// transaction waits for to abort them; with `all` (LK-5e), of every transaction it
    /// waits for that can still abort, younger ones too.
    ///
    /// A lock-free victim waiting here (LK-5h) is in the way only by its place in a queue: it
    /// steps out instead ([`Self::break_waits`]), and its transaction goes on. Wounded, TPC-C
    /// Stock-Levels queued on stock rows ahead of accepted New-Orders would die often.
    pub(super) fn wound_blockers(&mut self, txn: TxnId, all: bool, ctx: &mut PartCtx) {
        for victim in self.wound_victims(txn, all) {
            let waits_here = self.parked.values().any(|p| p.unit.txn == victim && !p.stepped_out);
            if waits_here && self.steps_out(victim, ctx.now) {
                self.break_waits(victim, ctx);
            } else {
                ctx.reply(Addr::Coordinator(victim.node), Reply::Wound { txn: victim });
            }
        }
    }

    /// Whom [`Self::wound_blockers`] wounds: LK-5b, the older transactions `txn` waits for;
    /// LK-5e (`all`, once it has waited [`RUNNING_WITHIN`]), every one it waits for that is
    /// not an accepted BASE transaction (those cannot abort; LK-5d handles cycles of them).
    ///
    /// Neither wounds an accepted BASE transaction (LK-5g): it cannot abort, and its
    /// coordinator drops the wound; and the sweep repeats wounds every [`QUERY_INTERVAL`]
    /// while the wounder waits, so accepted Payments queued behind older accepted Payments
    /// would send useless messages by the thousand under load.
    pub(super) fn wound_victims(&self, txn: TxnId, all: bool) -> Vec<TxnId> {
        let mortal = |b: &TxnId| *b != txn && !self.accepted(*b);
        let set = if all { self.locks.waits_for_set(txn) } else { None };
        let victims = match set {
            Some(set) => set.into_iter().collect(),
            None => self.locks.wound_targets(txn),
        };
        victims.into_iter().filter(mortal).collect()
    }

    /// Runs the operations whose locks were granted. Every lock release goes through here: first
    /// it logs that held-back locks of ended BASE transactions are gone, so that a restart never
    /// relocks them next to what they kept out.
    pub(super) fn resume(&mut self, grants: Vec<Grant>, ctx: &mut PartCtx) {
        // Only a transaction whose releasing lock was freed can have just lost its last one
        // (once ended, all its locks are releasing; after a relock, `releasing_recheck`):
        // looking at every ended transaction LK-6 holds back, on every release, would cost
        // each release the whole held-back set.
        let mut candidates = self.locks.take_freed_releasing();
        if !self.releasing_recheck.is_empty() {
            candidates.extend(std::mem::take(&mut self.releasing_recheck));
            candidates.sort_unstable();
            candidates.dedup();
        }
        let freed: Vec<TxnId> = candidates
            .into_iter()
            .filter(|txn| self.state.releasing.contains_key(txn) && !self.locks.holds_any(*txn))
            .collect();
        debug_assert_eq!(
            freed,
            self.state.releasing.keys().filter(|txn| !self.locks.holds_any(**txn)).copied().collect::<Vec<_>>(),
            "every ended transaction that lost its last held-back lock is found"
        );
        for txn in freed {
            let record = Record::Released { txn };
            ctx.log(&record);
            self.apply_record(record, ctx.store);
        }
        self.answer_read_watches(ctx);
        for g in grants {
            if let Some(p) = self.parked.remove(&g.token) {
                self.advance(p, ctx);
            }
        }
    }
}
