//! The lock manager's internals: the queues of a target, whom a request waits for, granting,
//! releasing and waking.

use super::*;

impl LockManager {
    /// LK-6b for a covered re-write (LK-2): whether `txn`, writing again a target it
    /// holds write lock `id` on, has read anything since that lock was granted (a held BASE
    /// read requested later), or names remote reads `id` does not wait for.
    /// Whether transactions other than `txn` hold BASE writes of `cols` on targets overlapping
    /// `target` (what a BASE read of them would depend on, LK-6a).
    pub(super) fn has_other_base_writes(&self, txn: TxnId, table: TableId, target: &Target, cols: ColMask) -> bool {
        self.overlapping_iter(table, target).any(|x| {
            let xe = &self.entries[&x];
            xe.owner.txn != txn && xe.is_held() && xe.mode.is_base_write() && xe.mode.cols.intersects(cols)
        })
    }

    pub(super) fn rewrite_has_new_deps(&self, id: u64, after: &[RemoteDep]) -> bool {
        let e = &self.entries[&id];
        let local = self.by_txn[&e.owner.txn].range(id + 1..).any(|x| {
            let xe = &self.entries[x];
            xe.mode.is_base_read() && xe.is_held()
        });
        local || after.iter().any(|d| !e.remote.contains(d))
    }

    pub(super) fn locks_of(&self, txn: TxnId, keep: impl Fn(&Entry) -> bool) -> Vec<(TableId, Target, LockMode)> {
        self.ids_of(txn)
            .into_iter()
            .map(|id| &self.entries[&id])
            .filter(|e| keep(e))
            .map(|e| (e.table, e.target.clone(), e.mode))
            .collect()
    }

    /// Each waiting request of `txn`: its owner and whom it waits for now (LK-5; `None` past
    /// the walk limit).
    pub(super) fn waits_of(&self, txn: TxnId) -> Vec<(Owner, Option<BTreeMap<TxnId, Owner>>)> {
        let Some(seqs) = self.by_txn.get(&txn) else { return vec![] };
        seqs.iter()
            .map(|seq| (*seq, &self.entries[seq]))
            .filter(|(_, e)| e.is_waiting())
            .map(|(seq, e)| {
                let blockers = self.blockers(txn, e.table, &e.target, e.mode, seq);
                (e.owner, self.waits_for(e.mode, &blockers))
            })
            .collect()
    }

    pub(super) fn ids_of(&self, txn: TxnId) -> Vec<u64> {
        self.by_txn.get(&txn).map(|ids| ids.iter().copied().collect()).unwrap_or_default()
    }

    pub(super) fn queue_len(&self, table: TableId, target: &Target) -> usize {
        match target {
            Target::Key(k) => self.point_queue(table, k).map_or(0, <[u64]>::len),
            Target::Range { .. } => self.ranges.get(&table).map_or(0, Vec::len),
        }
    }

    /// Sequence numbers of every lock and request on a target overlapping `target`: the key's
    /// queue, walked in place (collecting it into a vector on every request and wake-up would
    /// allocate each time), or the queues of the keys
    /// inside a range target, in increasing order; then the table's overlapping range entries.
    pub(super) fn overlapping_iter<'a>(&'a self, table: TableId, target: &'a Target) -> impl Iterator<Item = u64> + 'a {
        let (queue, in_range): (&[u64], Vec<u64>) = match target {
            Target::Key(k) => (self.point_queue(table, k).unwrap_or_default(), Vec::new()),
            Target::Range { start, end } => {
                let mut ids = Vec::new();
                self.points.in_range(table, start, end.as_ref(), &mut ids);
                (&[], ids)
            }
        };
        let ranges = self.ranges.get(&table).map_or(&[][..], Vec::as_slice);
        queue
            .iter()
            .copied()
            .chain(in_range)
            .chain(ranges.iter().copied().filter(move |id| self.entries[id].target.overlaps(target)))
    }

    /// LK-2: a held lock of `txn` on this exact target whose mode covers `mode` — the newest
    /// (a covered re-write compares against the reads made since it, `rewrite_has_new_deps`).
    ///
    /// Looked up in the shorter of the target's queue and `txn`'s own entries: a TPC-C
    /// Stock-Level or Delivery holds hundreds of locks, while a hot key's queue holds hundreds
    /// of waiters (thousands of zipfian YCSB clients in the simulator); a search linear in
    /// either would make every acquire pay for it.
    pub(super) fn covering_lock(&self, txn: TxnId, table: TableId, target: &Target, mode: LockMode) -> Option<u64> {
        let covers = |e: &Entry| e.owner.txn == txn && e.state == State::Held && e.mode.covers(mode);
        let own = self.by_txn.get(&txn).map_or(0, BTreeSet::len);
        let queued = match target {
            Target::Key(k) => self.point_queue(table, k).map_or(0, <[u64]>::len),
            Target::Range { .. } => self.ranges.get(&table).map_or(0, Vec::len),
        };
        if own < queued {
            let ids = self.by_txn.get(&txn)?;
            ids.iter().rev().copied().find(|id| {
                let e = &self.entries[id];
                e.table == table && &e.target == target && covers(e)
            })
        } else {
            self.on_target(table, target).rev().find(|id| covers(&self.entries[id]))
        }
    }

    /// The entries (locks and requests) on exactly (`table`, `target`), in sequence order.
    ///
    /// A key's queue holds only the entries on that key (`insert`), so it is taken whole; a
    /// table's range queue is filtered. (Comparing every entry's key again costs most where hot
    /// keys queue hundreds, as with thousands of YCSB clients on zipfian keys.)
    pub(super) fn on_target<'a>(
        &'a self,
        table: TableId,
        target: &'a Target,
    ) -> impl DoubleEndedIterator<Item = u64> + 'a {
        let (queue, whole): (&[u64], bool) = match target {
            Target::Key(k) => (self.point_queue(table, k).unwrap_or_default(), true),
            Target::Range { .. } => (self.ranges.get(&table).map_or(&[], Vec::as_slice), false),
        };
        queue.iter().copied().filter(move |id| {
            whole || {
                let e = &self.entries[id];
                e.table == table && &e.target == target
            }
        })
    }

    pub(super) fn point_queue(&self, table: TableId, key: &Key) -> Option<&[u64]> {
        self.points.get(table, key)
    }

    /// LK-3: what stands between request `seq` of `txn` and a grant.
    pub(super) fn blockers(&self, txn: TxnId, table: TableId, target: &Target, mode: LockMode, seq: u64) -> Vec<u64> {
        self.overlapping_iter(table, target)
            .filter(|id| {
                let e = &self.entries[id];
                e.owner.txn != txn
                    && match e.state {
                        State::Held | State::Releasing => !compatible(e.mode, mode),
                        State::Waiting { .. } => *id < seq && must_queue_behind(e.mode, mode),
                    }
            })
            .collect()
    }

    /// LK-5: every transaction a request for `mode` blocked by `blockers` would wait for,
    /// following LK-6 dependencies when the requester conflicts with a blocker's saline form.
    /// `None` when the walk exceeds [`DEPENDENCY_WALK_MAX`].
    pub(super) fn waits_for(&self, mode: LockMode, blockers: &[u64]) -> Option<BTreeMap<TxnId, Owner>> {
        let mut owners = BTreeMap::new();
        let mut stack = Vec::new();
        for &b in blockers {
            let e = &self.entries[&b];
            if compatible(e.mode.as_saline(), mode) {
                // Gone as soon as its owner downgrades or releases it (or, waiting, once granted).
                assert!(e.state != State::Releasing, "a releasing lock is saline and blocks only ACID requests");
                owners.insert(e.owner.txn, e.owner);
            } else {
                stack.push(b);
            }
        }
        let mut visited = BTreeSet::new();
        while let Some(id) = stack.pop() {
            if !visited.insert(id) {
                continue;
            }
            if visited.len() > DEPENDENCY_WALK_MAX {
                return None;
            }
            let e = &self.entries[&id];
            if e.is_held() && !e.remote.is_empty() {
                // LK-6b across partitions: its release waits for transactions this lock
                // table cannot see. Unknown, as past the walk limit: a new request dies, a
                // waiting one is impatient (LK-5a), so no cycle through other partitions lasts.
                return None;
            }
            if e.state != State::Releasing {
                owners.insert(e.owner.txn, e.owner);
            }
            match e.state {
                State::Held | State::Releasing => {
                    stack.extend(e.deps.iter().copied().filter(|d| self.entries.contains_key(d)))
                }
                State::Waiting { .. } => stack.extend(self.dependency_candidates(id, true)),
            }
        }
        Some(owners)
    }

    /// LK-6: the locks that lock `id` must not be released before, were it granted now.
    /// With `include_waiting`, also the waiting requests that could be granted before it (the
    /// only other locks it can come to depend on — see `must_queue_behind`).
    pub(super) fn dependency_candidates(&self, id: u64, include_waiting: bool) -> Vec<u64> {
        let e = &self.entries[&id];
        let eligible = |x: u64, xe: &Entry| xe.is_held() || (include_waiting && xe.is_waiting() && x < id);
        if e.mode.is_base_read() {
            // (a) read-after-write across transactions.
            self.overlapping_iter(e.table, &e.target)
                .filter(|&x| {
                    let xe = &self.entries[&x];
                    xe.owner.txn != e.owner.txn
                        && xe.mode.is_base_write()
                        && xe.mode.cols.intersects(e.mode.cols)
                        && eligible(x, xe)
                })
                .collect()
        } else if e.mode.is_base_write() {
            // (b) write-after-read within a transaction: reads requested earlier.
            self.by_txn[&e.owner.txn]
                .range(..id)
                .copied()
                .filter(|&x| {
                    let xe = &self.entries[&x];
                    xe.mode.is_base_read() && eligible(x, xe)
                })
                .collect()
        } else {
            Vec::new()
        }
    }

    pub(super) fn insert(
        &mut self,
        owner: Owner,
        table: TableId,
        target: Target,
        mode: LockMode,
        state: State,
        after: &[RemoteDep],
    ) {
        let id = self.seq_next;
        self.seq_next += 1;
        match &target {
            Target::Key(k) => self.points.push(table, k, id),
            Target::Range { .. } => {
                self.points.order(table);
                self.ranges.entry(table).or_default().push(id);
            }
        }
        self.by_txn.entry(owner.txn).or_default().insert(id);
        if matches!(state, State::Waiting { .. }) {
            self.waiting.insert(id);
        }
        let entry = Entry {
            granted: 0,
            owner,
            table,
            target,
            mode,
            state,
            deps: Vec::new(),
            remote: after.to_vec(),
            pending: 0,
            dependents: Vec::new(),
        };
        self.entries.insert(id, entry);
    }

    /// Grants waiting entry `id` and records its LK-6 dependencies.
    pub(super) fn make_held(&mut self, id: u64) {
        assert!(self.entries[&id].is_waiting());
        let deps = self.dependency_candidates(id, false);
        for d in &deps {
            self.entries.get_mut(d).expect("a dependency is held").dependents.push(id);
        }
        let e = self.entries.get_mut(&id).expect("entry exists");
        e.granted = self.granted_next;
        self.granted_next += 1;
        e.state = State::Held;
        e.pending = deps.len() + e.remote.len();
        e.deps = deps;
        let txn = e.owner.txn;
        if e.mode.is_base_read() && e.pending > 0 {
            self.tainted.entry(txn).or_default().push(id);
        }
        self.waiting.remove(&id);
        self.touch(txn, id);
    }

    /// The owner lets go of held lock `id`: freed now, or releasing until its dependencies are.
    pub(super) fn start_release(&mut self, id: u64, touched: &mut Vec<(TableId, Target)>) {
        let e = self.entries.get_mut(&id).expect("entry exists");
        assert_eq!(e.state, State::Held);
        if e.pending == 0 {
            self.free(id, touched);
        } else {
            assert_ne!(e.mode.class, LockClass::Acid, "ACID locks have no release-order dependencies");
            e.state = State::Releasing;
            e.mode = e.mode.as_saline();
            touched.push((e.table, e.target.clone()));
            let txn = e.owner.txn;
            self.touch(txn, id);
        }
    }

    /// Frees lock `id` and, cascading, every releasing lock that was waiting only for it.
    pub(super) fn free(&mut self, id: u64, touched: &mut Vec<(TableId, Target)>) {
        let mut work: SmallVec<[u64; 4]> = smallvec::smallvec![id];
        while let Some(id) = work.pop() {
            let e = self.unlink(id);
            assert!(e.is_held() && e.pending == 0, "LK-6: a lock is freed only when its dependencies are");
            if let Some(c) = self.changes.get_mut(&e.owner.txn) {
                c.freed.push(e.granted);
            }
            if e.state == State::Releasing {
                self.freed_releasing.push(e.owner.txn);
            }
            for d in &e.dependents {
                let de = self.entries.get_mut(d).expect("a dependent outlives its dependencies");
                de.pending -= 1;
                if de.pending == 0 && de.state == State::Releasing {
                    work.push(*d);
                }
            }
            touched.push((e.table, e.target));
        }
    }

    pub(super) fn unlink(&mut self, id: u64) -> Entry {
        let e = self.entries.remove(&id).expect("entry exists");
        match &e.target {
            Target::Key(k) => self.points.remove(e.table, k, id),
            Target::Range { .. } => {
                let queue = self.ranges.get_mut(&e.table).expect("an entry is in its queue");
                queue.retain(|&x| x != id);
                if queue.is_empty() {
                    self.ranges.remove(&e.table);
                }
            }
        }
        let ids = self.by_txn.get_mut(&e.owner.txn).expect("an entry is indexed by its txn");
        ids.remove(&id);
        if ids.is_empty() {
            self.by_txn.remove(&e.owner.txn);
        }
        self.waiting.remove(&id);
        if let Some(reads) = self.tainted.get_mut(&e.owner.txn) {
            reads.retain(|&x| x != id);
            if reads.is_empty() {
                self.tainted.remove(&e.owner.txn);
            }
        }
        e
    }

    /// LK-3: re-examines, in sequence order, the waiters on targets overlapping `touched`
    /// (locks that went away or weakened) and grants those that now pass.
    pub(super) fn wake(&mut self, touched: Vec<(TableId, Target)>) -> Vec<Grant> {
        self.wake_from(touched.into_iter().map(|(table, target)| (table, target, 0)).collect())
    }

    /// [`LockManager::wake`], re-examining on each target only the waiters from a sequence
    /// number on (a cancelled request could block only those queued after it; a hot key's
    /// whole queue re-examined after every abort would dominate the simulator's cost).
    pub(super) fn wake_from(&mut self, touched: Vec<(TableId, Target, u64)>) -> Vec<Grant> {
        if self.waiting.is_empty() {
            return Vec::new(); // no one to wake (the usual case), so no queue to look up
        }
        let mut candidates = BTreeSet::new();
        for (table, target, from) in &touched {
            self.add_waiters(*table, target, *from, &mut candidates);
        }
        let mut grants = Vec::new();
        // Requests on a key found still waiting in this pass, by key: a later request on the
        // key that must queue behind one of them (LK-3) waits too, without computing its
        // blockers — that is linear in the queue, so a long queue woke in quadratic time.
        let mut still_waiting: Vec<(TableId, Key, LockMode, TxnId)> = Vec::new();
        while let Some(id) = candidates.pop_first() {
            let Some(e) = self.entries.get(&id) else { continue };
            let State::Waiting { token } = e.state else { continue };
            let (txn, table, target, mode) = (e.owner.txn, e.table, e.target.clone(), e.mode);
            if self.covering_lock(txn, table, &target, mode).is_some() {
                self.unlink(id); // the txn got a covering lock meanwhile (LK-2)
            } else if let Target::Key(k) = &target {
                let behind = still_waiting
                    .iter()
                    .any(|(t, key, m, owner)| *t == table && key == k && *owner != txn && must_queue_behind(*m, mode));
                if behind || !self.blockers(txn, table, &target, mode, id).is_empty() {
                    still_waiting.push((table, k.clone(), mode, txn));
                    continue;
                }
                self.make_held(id);
            } else if self.blockers(txn, table, &target, mode, id).is_empty() {
                self.make_held(id);
            } else {
                continue;
            }
            grants.push(Grant { txn, token });
            // A later request may have queued behind this one without conflicting with it.
            self.add_waiters(table, &target, id + 1, &mut candidates);
        }
        grants
    }

    pub(super) fn add_waiters(&self, table: TableId, target: &Target, from: u64, out: &mut BTreeSet<u64>) {
        out.extend(self.overlapping_iter(table, target).filter(|&id| id >= from && self.waiting.contains(&id)));
    }
}
