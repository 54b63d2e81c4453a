//! A transaction's life at an Omid coordinator: operations, reads through the commit table,
//! the commit request and the cleanup after it.

use super::*;

impl OmidCoordinator {
    pub(super) fn execute(&mut self, id: SubOpId, op: PartOp, ctx: &mut CoordCtx) {
        let t = self.txns.get_mut(&id.txn).expect("live txn");
        if t.doomed {
            return ctx.op_done(id, Err(Error::Abort(AbortReason::Failure)));
        }
        let reader_ts = t.start_ts.expect("started");
        let table = op.table;
        match op.kind {
            // (The coordinator sends a read for update as a plain read: no `reads_for_update`.
            // Snapshot isolation finds the conflict when the row is written.)
            OpKind::Read { key, .. } | OpKind::ReadForUpdate { key } => {
                self.read(id, table, key, Then::Return, None, ctx)
            }
            OpKind::Scan { start, end, limit } => {
                let t = self.txns.get_mut(&id.txn).expect("live txn");
                t.ops.insert(
                    id,
                    OpState::Scan {
                        table,
                        start: start.clone(),
                        end: end.clone(),
                        limit,
                        rows: Vec::new(),
                        page: None,
                        older: false,
                    },
                );
                let tag = self.fresh_tag();
                let keys_max = limit.clamp(1, SCAN_PAGE_KEYS_MAX);
                let versions_max = VERSIONS_PER_READ;
                let req = Request::Scan { tag, id, table, start, after: None, end, keys_max, versions_max, reader_ts };
                self.send_part(id, id.part, req, ctx);
            }
            OpKind::Write { key, row } => self.put(id, table, key, Some(row), ctx),
            // Not declared (`Capabilities::read_many`): the coordinator refuses it before this.
            OpKind::ReadMany { .. } | OpKind::WriteMany { .. } => {
                let what = "batched reads and writes (issue single ones)".into();
                ctx.op_done(id, Err(InvalidInput::Unsupported { engine: "omid".into(), what }.into()))
            }
            kind @ (OpKind::Insert { .. } | OpKind::Update { .. } | OpKind::Delete { .. }) => {
                let key = kind.key().expect("point op").clone();
                self.read(id, table, key, Then::Write(kind), None, ctx)
            }
        }
    }

    pub(super) fn read(
        &mut self,
        id: SubOpId,
        table: TableId,
        key: Key,
        then: Then,
        before: Option<Timestamp>,
        ctx: &mut CoordCtx,
    ) {
        let t = self.txns.get_mut(&id.txn).expect("live txn");
        let reader_ts = t.start_ts.expect("started");
        t.ops.insert(id, OpState::Read { table, key: key.clone(), then, fetched: None });
        let tag = self.fresh_tag();
        let req = Request::Read { tag, id, table, key, reader_ts, before, versions_max: VERSIONS_PER_READ };
        self.send_part(id, id.part, req, ctx);
    }

    pub(super) fn put(&mut self, id: SubOpId, table: TableId, key: Key, row: Option<Row>, ctx: &mut CoordCtx) {
        let t = self.txns.get_mut(&id.txn).expect("live txn");
        let ts = t.start_ts.expect("started");
        // Recorded before sending, so an abort cleans up even a version whose ack was lost.
        t.writes.entry((table, key.clone())).or_default().insert(id.part);
        t.ops.insert(id, OpState::Put);
        let tag = self.fresh_tag();
        self.send_part(id, id.part, Request::Put { tag, id, ts, table, key, row }, ctx);
    }

    /// OM-5 for this transaction: the replica, else the oracle's answer, else unknown.
    pub(super) fn verdict(&self, t: &Txn, version_ts: Timestamp) -> Option<bool> {
        if let Some(&v) = t.verdicts.get(&version_ts) {
            return Some(v);
        }
        let replica = self.replica.as_ref()?;
        let reader_ts = t.start_ts.expect("started");
        match replica.in_snapshot(version_ts, reader_ts) {
            Visibility::Visible => Some(true),
            Visibility::Invisible => Some(false),
            Visibility::AskOracle => match self.fates.get(&version_ts)? {
                Fate::Committed(commit_ts) => Some(*commit_ts < reader_ts),
                Fate::Aborted => Some(false),
                Fate::Old => Some(true),
                Fate::NotCommitted => None,
            },
        }
    }

    /// The newest version in the snapshot: `Ok(Some(row))` found (`None` inside: a tombstone),
    /// `Ok(None)` none among `versions`, `Err(unknown)` the oracle must be asked first.
    pub(super) fn pick(&self, t: &Txn, versions: &[Version]) -> Result<Option<Option<Row>>, Vec<Timestamp>> {
        let mut unknown = Vec::new();
        for (ts, row) in versions {
            match self.verdict(t, *ts) {
                Some(true) if unknown.is_empty() => return Ok(Some(row.clone())),
                Some(true) => break,
                Some(false) => {}
                None => unknown.push(*ts),
            }
        }
        if unknown.is_empty() {
            Ok(None)
        } else {
            Err(unknown)
        }
    }

    /// Asks the oracle the fate of writers the replica cannot judge: one request for all of
    /// them (up to [`FATES_PER_REQUEST_MAX`]), none for a writer already asked about.
    pub(super) fn ask(&mut self, txn: TxnId, unknown: Vec<Timestamp>, ctx: &mut CoordCtx) {
        if self.session != Session::Connected {
            return; // the transaction is doomed; it fails with the session
        }
        let mut new = Vec::new();
        for ts in unknown {
            match self.asking.entry(ts) {
                std::collections::btree_map::Entry::Occupied(_) => {}
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(BTreeSet::from([txn]));
                    new.push(ts);
                }
            }
        }
        new.sort_unstable();
        new.dedup();
        for chunk in new.chunks(FATES_PER_REQUEST_MAX) {
            self.call(OracleCall::Fates { start_ts: chunk.to_vec() }, Purpose::Fates, ctx);
        }
    }

    /// The oracle's answer about writers: final fates are remembered for every reader; a
    /// `NotCommitted` one decides "invisible" only for the transactions that were waiting when
    /// the question left. Every waiting operation moves on (asking again if it must).
    pub(super) fn on_fates(&mut self, fates: Vec<(Timestamp, Fate)>, ctx: &mut CoordCtx) {
        for (ts, fate) in fates {
            let waiting = self.asking.remove(&ts).unwrap_or_default();
            match fate {
                Fate::NotCommitted => {
                    for txn in waiting {
                        if let Some(t) = self.txns.get_mut(&txn) {
                            t.verdicts.insert(ts, false);
                        }
                    }
                }
                fate => {
                    if self.fates.len() >= FATES_CACHED_MAX {
                        self.fates.pop_first();
                    }
                    self.fates.insert(ts, fate);
                }
            }
        }
        let ops: Vec<SubOpId> = self.txns.values().flat_map(|t| t.ops.keys().copied()).collect();
        for id in ops {
            self.advance(id, ctx);
        }
    }

    /// Moves an op forward with what it has fetched.
    pub(super) fn advance(&mut self, id: SubOpId, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get(&id.txn) else { return };
        match t.ops.get(&id) {
            Some(OpState::Read { fetched: Some((versions, more)), table, key, then }) => {
                let (table, key, then, more) = (*table, key.clone(), then.clone(), *more);
                match self.pick(t, versions) {
                    Err(unknown) => self.ask(id.txn, unknown, ctx),
                    Ok(Some(row)) => self.read_done(id, table, key, then, row, ctx),
                    Ok(None) if more => {
                        let before = versions.last().map(|v| v.0);
                        self.read(id, table, key, then, before, ctx)
                    }
                    Ok(None) => self.read_done(id, table, key, then, None, ctx),
                }
            }
            Some(OpState::Scan { page: Some((keys, resume)), older: false, table, .. }) => {
                // Like a point read, per key: the newest `nv` versions came with the page; a key
                // none of whose versions is in the snapshot has its older ones fetched, one
                // request for all such keys of the page, until each key is decided.
                let mut picked = Vec::new();
                let mut unknown = Vec::new();
                let mut fetch = Vec::new();
                for (key, versions, more) in keys {
                    match self.pick(t, versions) {
                        Err(u) => unknown.extend(u),
                        Ok(Some(Some(row))) => picked.push((key.clone(), row)),
                        Ok(Some(None)) => {}
                        Ok(None) => {
                            if let Some(&(oldest, _)) = versions.last().filter(|_| *more) {
                                fetch.push((key.clone(), oldest));
                            }
                        }
                    }
                }
                if !unknown.is_empty() {
                    return self.ask(id.txn, unknown, ctx);
                }
                let (resume, table) = (resume.clone(), *table);
                let tag = self.fresh_tag();
                let t = self.txns.get_mut(&id.txn).expect("live txn");
                let reader_ts = t.start_ts.expect("started");
                if !fetch.is_empty() {
                    let Some(OpState::Scan { older, .. }) = t.ops.get_mut(&id) else { unreachable!() };
                    *older = true;
                    let versions_max = VERSIONS_PER_READ;
                    let req = Request::ReadOlder { tag, id, table, keys: fetch, reader_ts, versions_max };
                    return self.send_part(id, id.part, req, ctx);
                }
                let Some(OpState::Scan { rows, limit, table, start, end, page, .. }) = t.ops.get_mut(&id) else {
                    unreachable!()
                };
                *page = None;
                rows.extend(picked);
                let remaining = (*limit as usize).saturating_sub(rows.len());
                match resume {
                    Some(after) if remaining > 0 => {
                        let req = Request::Scan {
                            tag,
                            id,
                            table: *table,
                            start: start.clone(),
                            after: Some(after),
                            end: end.clone(),
                            keys_max: remaining as u32,
                            versions_max: VERSIONS_PER_READ,
                            reader_ts,
                        };
                        self.send_part(id, id.part, req, ctx);
                    }
                    _ => {
                        let mut rows = std::mem::take(rows);
                        rows.truncate(*limit as usize);
                        t.ops.remove(&id);
                        ctx.op_done(id, Ok(PartResult::Rows(rows)));
                    }
                }
            }
            _ => {}
        }
    }

    pub(super) fn read_done(
        &mut self,
        id: SubOpId,
        table: TableId,
        key: Key,
        then: Then,
        row: Option<Row>,
        ctx: &mut CoordCtx,
    ) {
        let t = self.txns.get_mut(&id.txn).expect("live txn");
        t.ops.remove(&id);
        let name = || ctx.catalog.table(table).map(|t| t.name.clone()).unwrap_or_else(|_| format!("#{}", table.0));
        let image = match then {
            Then::Return => return ctx.op_done(id, Ok(PartResult::Row(row))),
            Then::Write(OpKind::Delete { .. }) if row.is_none() => return ctx.op_done(id, Ok(PartResult::Done)),
            Then::Write(kind) => write_image(&kind, row, name),
        };
        match image {
            Err(e) => ctx.op_done(id, Err(e)),
            Ok(image) => self.put(id, table, key, image, ctx),
        }
    }

    // ---- finishing ---------------------------------------------------------------------------

    pub(super) fn start_cleanup(
        &mut self,
        ts: Timestamp,
        writes: &BTreeMap<(TableId, Key), BTreeSet<PartitionId>>,
        ctx: &mut CoordCtx,
    ) {
        let by_part = rows_by_partition(writes);
        if by_part.is_empty() {
            return;
        }
        self.cleanups.insert(ts, (by_part.keys().copied().collect(), ctx.now));
        for (part, rows) in by_part {
            ctx.send_to_partition(part, Request::Cleanup { ts, rows });
        }
    }

    pub(super) fn on_commit_reply(&mut self, txn: TxnId, body: OracleBody, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get(&txn) else { return };
        if t.phase != Phase::Committing {
            return;
        }
        let ts = t.start_ts.expect("committing has a snapshot");
        let result = match body {
            OracleBody::Committed { commit_ts, .. } => {
                let t = self.txns.remove(&txn).expect("present");
                for (part, rows) in rows_by_partition(&t.writes) {
                    ctx.send_to_partition(part, Request::Committed { ts, commit_ts, rows });
                }
                return ctx.txn_done(txn, Ok(()));
            }
            OracleBody::Aborted { reason: super::super::CommitAbort::NotInFlight, .. } => {
                // A resent or network-duplicated copy of this request may have committed it (its
                // reply lost); or `Tmax` or a crash aborted it. Not knowing which, the versions
                // stay (invisible if aborted) and the client learns the outcome is unknown.
                let reason = "the status oracle no longer has the transaction in flight".into();
                self.txns.remove(&txn);
                return ctx.txn_done(txn, Err(Error::Unavailable { reason, outcome_unknown: true }));
            }
            OracleBody::Aborted { reason, .. } => Error::Abort(reason.abort_reason()),
            // Even this copy's refusal does not say an earlier copy was not processed.
            OracleBody::Refused(OracleError::NotConnected) => return self.session_lost(ctx),
            OracleBody::Refused(e) => {
                Error::Invalid(InvalidInput::Unsupported { engine: "omid".into(), what: e.to_string() })
            }
            _ => return,
        };
        let t = self.txns.remove(&txn).expect("present");
        self.abort_at_oracle(ctx, ts);
        self.start_cleanup(ts, &t.writes, ctx);
        ctx.txn_done(txn, Err(result));
    }

    pub(super) fn on_begun(&mut self, purpose: Option<Purpose>, start_ts: Timestamp, delta: Delta, ctx: &mut CoordCtx) {
        if self.replica.is_none() {
            // From a session that ended (or is being replaced): the oracle aborts its
            // timestamps when the next session opens.
            return;
        }
        let end = delta.from + delta.entries.len() as u64;
        self.buffer_delta(delta);
        match purpose {
            Some(Purpose::Begin(txn)) => self.staged.push((txn, start_ts, end)),
            // A second answer to a resent `BeginAs` carries the timestamp the first gave.
            _ if self.staged.iter().any(|s| s.1 == start_ts)
                || self.txns.values().any(|t| t.start_ts == Some(start_ts)) => {}
            _ => self.release(ctx, start_ts),
        }
        self.drain_deltas(ctx);
    }
}
