//! The partition half of `coordfree`: versions with RAMP metadata, prepared versions, commit
//! with the nested atomic id assignment, second-round reads, cooperative termination.

use super::messages::{
    Fetched, IdAssign, KeyWrites, ReadResult, Record, Reply, Request, Seen, Stamp, Status, Want, WriteMeta,
};
use super::{
    rewrite_ids, ASK_EVERY, ASK_MAX, DECIDED_MAX, INQUIRE_EVERY, INTENT_STALE, META_KEEP, META_KEPT_MAX, VERSIONS_KEPT,
    VERSIONS_KEPT_MAX, VERSIONS_RECENT,
};
use litmus_core::hash::FxHashMap;
use litmus_core::{Error, InvalidInput, Key, PartitionId, Row, TableId, Time, Timestamp, TxnId, Value};
use litmus_protocol::engine::{decode_record, PartCtx, PartitionEngine};
use litmus_protocol::message::{Addr, Payload, SubOpId};
use litmus_protocol::op::{check_writes, write_image, OpKind, PartOp, PartResult};
use litmus_storage::mvcc::MvccStore;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

/// A prepared version: the writes of one transaction at this partition, not yet visible to
/// first-round reads.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Intent {
    meta: Arc<WriteMeta>,
    writes: Arc<[KeyWrites]>,
    assign: Option<IdAssign>,
    participants: Vec<PartitionId>,
    id_partition: Option<PartitionId>,
    coordinator: Addr,
    /// When it was prepared (volatile: `Time::ZERO` after recovery, so a recovered intent is
    /// inquired about at once).
    #[serde(skip)]
    since: Time,
    #[serde(skip)]
    last_inquiry: Option<Time>,
    /// Answers to this partition's inquiries (volatile).
    #[serde(skip)]
    answers: BTreeMap<PartitionId, Status>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Decision {
    Committed { ids: Vec<(i64, i64)> },
    Aborted,
}

/// The engine state beyond the store (snapshotted whole).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct CoordfreePartition {
    /// This partition's version order: the local timestamp of the last commit.
    last_ts: Timestamp,
    intents: BTreeMap<TxnId, Intent>,
    decided: FxHashMap<TxnId, Decision>,
    decided_order: VecDeque<TxnId>,
    /// RAMP metadata of recent commits, by their local timestamp (every key a transaction
    /// writes here gets the same one).
    metas: FxHashMap<Timestamp, Kept>,
    ts_of: FxHashMap<TxnId, Timestamp>,
    /// The stamp of the write installed last on each replicated row written here (CF-2b: last
    /// writer wins). Kept for good: a copy cut off for long may still commit an older write.
    lww: BTreeMap<(TableId, Key), Stamp>,
    /// Commits here not yet known to have committed at every participant (CF-8): their
    /// metadata is kept whatever its age (volatile: after recovery every kept commit is asked
    /// about again).
    #[serde(skip)]
    undone: BTreeSet<Timestamp>,
    /// Commits known committed everywhere, with when that was learnt: collected
    /// [`META_KEEP`] later (volatile, as `undone`).
    #[serde(skip)]
    done: VecDeque<(Time, Timestamp)>,
    /// When [`Self::ask_undone`] last walked `undone` (volatile).
    #[serde(skip)]
    last_ask_pass: Option<Time>,
    /// Second rounds whose answer depends on the order of two prepared versions (CF-4d): held
    /// until one of them commits, by reader and request (volatile: the reader re-sends).
    #[serde(skip)]
    held_fetches: BTreeMap<(Addr, SubOpId), Vec<Want>>,
}

/// The RAMP metadata of one commit here, kept until every participant has committed and
/// [`META_KEEP`] has passed since (CF-8).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Kept {
    meta: Arc<WriteMeta>,
    /// Every participant of the writer, this partition included.
    participants: Vec<PartitionId>,
    /// When it committed here.
    at: Time,
    /// Participants known to have committed it too (volatile).
    #[serde(skip)]
    confirmed: Vec<PartitionId>,
    /// When this partition last asked the others (volatile).
    #[serde(skip)]
    last_ask: Option<Time>,
}

/// The row `ops` leave on top of `current`, in order (the core's formulas merge increments
/// commutatively: each is applied to the latest committed row at commit).
pub fn fold(ops: &[OpKind], mut current: Option<Row>, table: &str) -> Result<Option<Row>, Error> {
    for op in ops {
        current = write_image(op, current, || table.to_string())?;
    }
    Ok(current)
}

impl CoordfreePartition {
    fn decide(&mut self, txn: TxnId, d: Decision) {
        if self.decided.insert(txn, d).is_none() {
            self.decided_order.push_back(txn);
            if self.decided_order.len() > DECIDED_MAX {
                let old = self.decided_order.pop_front().expect("nonempty");
                self.decided.remove(&old);
            }
        }
    }

    fn seen_at(&self, ts: Timestamp) -> Seen {
        Seen { ts, writer: self.metas.get(&ts).map(|k| k.meta.clone()) }
    }

    /// The latest committed version of a key: its row and what a reader knows of it.
    fn latest(&self, store: &MvccStore, table: TableId, key: &Key) -> (Option<Row>, Seen) {
        match store.latest(table, key) {
            Some((ts, row)) => (row.cloned(), self.seen_at(ts)),
            None => (None, Seen { ts: Timestamp::ZERO, writer: None }),
        }
    }

    /// Applies one record (live, right after logging it, and in recovery). Returns the ids a
    /// commit assigned.
    fn apply(
        &mut self,
        record: Record,
        store: &mut MvccStore,
        catalog: Option<&litmus_core::Catalog>,
    ) -> Result<Vec<(i64, i64)>, Error> {
        match record {
            Record::Prepared { txn, meta, writes, assign, participants, id_partition, coordinator } => {
                let intent = Intent {
                    meta,
                    writes,
                    assign,
                    participants,
                    id_partition,
                    coordinator,
                    since: Time::ZERO,
                    last_inquiry: None,
                    answers: BTreeMap::new(),
                };
                self.intents.insert(txn, intent);
                Ok(vec![])
            }
            Record::Aborted { txn } => {
                self.intents.remove(&txn);
                self.decide(txn, Decision::Aborted);
                Ok(vec![])
            }
            Record::Committed { txn, ids, at } => self.apply_commit(txn, ids, at, store, catalog),
        }
    }

    /// A commit: the prepared writes installed at the next timestamp, with the real ids when
    /// this partition assigns them; returns the ids (temporary, real) the commit used.
    fn apply_commit(
        &mut self,
        txn: TxnId,
        ids: Vec<(i64, i64)>,
        at: Time,
        store: &mut MvccStore,
        catalog: Option<&litmus_core::Catalog>,
    ) -> Result<Vec<(i64, i64)>, Error> {
        let Some(intent) = self.intents.remove(&txn) else {
            return match self.decided.get(&txn) {
                Some(Decision::Committed { ids }) => Ok(ids.clone()),
                _ => Err(Error::Internal(format!("coordfree: commit of {txn} without a prepared version"))),
            };
        };
        let ids = match &intent.assign {
            Some(a) => vec![assigned_id(txn, a, store)?],
            None => ids,
        };
        self.last_ts = self.last_ts.next();
        let ts = self.last_ts;
        let meta = if ids.is_empty() {
            intent.meta.clone()
        } else {
            let mut keys: Vec<(TableId, Key)> =
                intent.meta.keys.iter().map(|(t, k)| (*t, rewrite_key(k, &ids))).collect();
            keys.sort_unstable(); // real ids sort elsewhere than temporary ones
            Arc::new(WriteMeta::new(txn, keys))
        };
        for w in intent.writes.iter() {
            self.install_write(w, ts, &ids, store, catalog);
        }
        if intent.participants.len() > 1 {
            self.undone.insert(ts);
        } else {
            self.done.push_back((at, ts)); // committed everywhere with this commit
        }
        let participants = intent.participants;
        self.metas.insert(ts, Kept { meta, participants, at, confirmed: vec![], last_ask: None });
        self.ts_of.insert(txn, ts);
        self.decide(txn, Decision::Committed { ids: ids.clone() });
        Ok(ids)
    }

    /// Installs one key's committed writes at `ts`, its temporary id rewritten to the real one,
    /// unless a later writer's row is there already (CF-2b).
    fn install_write(
        &mut self,
        w: &KeyWrites,
        ts: Timestamp,
        ids: &[(i64, i64)],
        store: &mut MvccStore,
        catalog: Option<&litmus_core::Catalog>,
    ) {
        // Only the writes that carry the temporary id are rewritten (copied): a
        // New-Order's stock updates are not.
        let (key, mut ops) = if ids.iter().any(|&(tmp, _)| super::contains_id(&w.key, &w.ops, tmp)) {
            let (key, ops) = rewrite_writes(&w.key, w.ops.clone(), ids);
            (key, Cow::Owned(ops))
        } else {
            (w.key.clone(), Cow::Borrowed(&w.ops[..]))
        };
        if let Some(stamp) = w.lww {
            // CF-2b: a later writer's row is installed already; this write lost.
            let slot = self.lww.entry((w.table, key.clone())).or_insert(stamp);
            if *slot > stamp {
                return;
            }
            *slot = stamp;
            // Whole-row ops: an insert validated when prepared replaces what an
            // older writer installed since, as a write would.
            for op in ops.to_mut() {
                if let OpKind::Insert { key, row } = op {
                    *op = OpKind::Write { key: key.clone(), row: row.clone() };
                }
            }
        }
        let name = catalog.and_then(|c| c.table(w.table).ok()).map_or("?", |t| t.name.as_str());
        // A write that no longer applies (an update of a row deleted since it was
        // prepared) is dropped: documented in the module doc. So is a deletion of
        // no row.
        let image = |current: Option<&Row>| {
            let existed = current.is_some();
            let image = fold(&ops, current.cloned(), name).ok()?;
            (image.is_some() || existed).then_some(image)
        };
        // CF-8b: the newest VERSIONS_KEPT, and those of the last VERSIONS_RECENT
        // commits here up to VERSIONS_KEPT_MAX (newest first).
        let recent = Timestamp(ts.0.saturating_sub(VERSIONS_RECENT));
        let prune = |i: usize, t: Timestamp| i >= VERSIONS_KEPT && (i >= VERSIONS_KEPT_MAX || t <= recent);
        store.install(w.table, key, ts, image, prune);
    }

    fn log_apply(&mut self, record: Record, ctx: &mut PartCtx) -> Result<Vec<(i64, i64)>, Error> {
        ctx.log(&record);
        self.apply(record, ctx.store, Some(ctx.catalog))
    }

    fn read(&self, op: &PartOp, store: &MvccStore) -> ReadResult {
        match &op.kind {
            OpKind::Read { key, .. } => {
                let (row, seen) = self.latest(store, op.table, key);
                Ok((PartResult::Row(row), vec![(op.table, key.clone(), seen)]))
            }
            // A batched point read: each key read as `Read` would read it.
            OpKind::ReadMany { keys } => {
                let mut rows = Vec::with_capacity(keys.len());
                let mut seen = Vec::with_capacity(keys.len());
                for (pos, key) in keys {
                    let (row, s) = self.latest(store, op.table, key);
                    rows.push((*pos, row));
                    seen.push((op.table, key.clone(), s));
                }
                Ok((PartResult::Many(rows), seen))
            }
            OpKind::Scan { start, end, limit } => {
                let end = end.as_ref().map_or(Bound::Unbounded, Bound::Excluded);
                let rows = store.scan(op.table, Bound::Included(start), end, Timestamp::MAX, *limit as usize);
                let seen = rows.iter().map(|(k, _)| (op.table, k.clone(), self.latest(store, op.table, k).1)).collect();
                Ok((PartResult::Rows(rows), seen))
            }
            other => Err(Error::Internal(format!("coordfree: a write sent as a read: {other:?}"))),
        }
    }

    /// RAMP-Fast's second round: the newest of the wanted writers' versions, if newer than the
    /// one read. A prepared version counts as newest (it commits after everything committed).
    /// `None` while the answer depends on which of two prepared versions commits first (CF-4d):
    /// two wanted writers prepared here, or one wanted and the version read prepared too.
    /// An abort when a wanted version newer than the one read was pruned (limited
    /// multiversioning, CF-8): the reader starts over.
    pub(super) fn fetch(
        &self,
        wants: &[Want],
        store: &MvccStore,
        catalog: &litmus_core::Catalog,
    ) -> Option<Result<Vec<Fetched>, Error>> {
        let undetermined = wants.iter().any(|w| {
            let have_prepared = w.have == Timestamp::MAX
                && w.have_writer.is_some_and(|x| self.intents.contains_key(&x) && !w.writers.contains(&x));
            w.writers.iter().filter(|t| self.intents.contains_key(t)).count() + usize::from(have_prepared) > 1
        });
        if undetermined {
            return None;
        }
        let mut found = Vec::new();
        for w in wants.iter().cloned() {
            let name = catalog.table(w.table).map_or_else(|_| "?".to_string(), |t| t.name.clone());
            let prepared = w.writers.iter().rev().find_map(|t| {
                let intent = self.intents.get(t)?;
                let kw = intent.writes.iter().find(|kw| kw.table == w.table && kw.key == w.key)?;
                Some((intent, kw))
            });
            if let Some((intent, kw)) = prepared {
                let current = store.latest(w.table, &w.key).and_then(|(_, r)| r.cloned());
                if let Ok(row) = fold(&kw.ops, current, &name) {
                    let seen = Seen { ts: Timestamp::MAX, writer: Some(intent.meta.clone()) };
                    found.push(Fetched { table: w.table, key: w.key, row, seen });
                }
                continue;
            }
            // A prepared version read has no place in the order until its writer commits; once
            // it has, a wanted writer that committed after it is newer.
            let have = match w.have_writer {
                Some(x) if w.have == Timestamp::MAX => self.ts_of.get(&x).copied().unwrap_or(w.have),
                _ => w.have,
            };
            let newest = w.writers.iter().filter_map(|t| self.ts_of.get(t).copied()).filter(|ts| *ts > have).max();
            if let Some(ts) = newest {
                match store.versions(w.table, &w.key).find(|(t, _)| *t == ts) {
                    Some((_, row)) => {
                        found.push(Fetched { table: w.table, key: w.key, row: row.cloned(), seen: self.seen_at(ts) })
                    }
                    // Never there: the writer's write to this key was dropped at its commit
                    // (module doc), so it did not change the key.
                    None if !self.pruned_since(store, w.table, &w.key, ts) => {}
                    // Overwritten more than VERSIONS_KEPT times since: the version the reader
                    // needs is gone, and a newer one may need versions of its own writer.
                    None => {
                        return Some(Err(Error::Abort(litmus_core::AbortReason::Other(format!(
                            "coordfree: a version this read needs was pruned ({VERSIONS_KEPT} kept per key); retry"
                        )))))
                    }
                }
            }
        }
        Some(Ok(found))
    }

    /// Whether versions of a key as old as `ts` may have been pruned: the key holds
    /// [`VERSIONS_KEPT`] versions or more, all newer (pruning is the only thing that removes
    /// one, and never one of the newest [`VERSIONS_KEPT`]).
    fn pruned_since(&self, store: &MvccStore, table: TableId, key: &Key, ts: Timestamp) -> bool {
        let mut kept = 0;
        for (t, _) in store.versions(table, key) {
            if t < ts {
                return false;
            }
            kept += 1;
        }
        kept >= VERSIONS_KEPT
    }

    /// Answers the held second rounds that a commit or an abort has since determined.
    fn answer_held(&mut self, ctx: &mut PartCtx) {
        if self.held_fetches.is_empty() {
            return;
        }
        for ((to, id), wants) in std::mem::take(&mut self.held_fetches) {
            match self.fetch(&wants, ctx.store, ctx.catalog) {
                Some(found) => ctx.reply(to, Reply::Fetch { id, found }),
                None => {
                    self.held_fetches.insert((to, id), wants);
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &mut self,
        from: Addr,
        txn: TxnId,
        meta: Arc<WriteMeta>,
        writes: Arc<[KeyWrites]>,
        assign: Option<IdAssign>,
        participants: Vec<PartitionId>,
        id_partition: Option<PartitionId>,
        ctx: &mut PartCtx,
    ) -> Result<(), Error> {
        match self.decided.get(&txn) {
            Some(Decision::Committed { .. }) => return Ok(()),
            Some(Decision::Aborted) => {
                return Err(Error::Abort(litmus_core::AbortReason::Other(
                    "coordfree: aborted by a participant's inquiry".into(),
                )))
            }
            None => {}
        }
        if self.intents.contains_key(&txn) {
            return Ok(()); // a duplicate
        }
        // Validation against the latest committed rows: an insert of an existing key or an
        // update of a missing row fails here and nothing is prepared.
        for w in writes.iter() {
            let schema = ctx.catalog.table(w.table)?;
            let current = ctx.store.latest(w.table, &w.key).and_then(|(_, r)| r);
            check_writes(&w.ops, current, || schema.name.clone())?;
        }
        if let Some(a) = &assign {
            let current = ctx.store.latest(a.table, &a.key).and_then(|(_, r)| r.cloned());
            if !matches!(current.as_ref().and_then(|r| r.get(a.column)), Some(Value::Int(_))) {
                return Err(InvalidInput::KeyNotFound(ctx.catalog.table(a.table)?.name.clone()).into());
            }
        }
        let record = Record::Prepared { txn, meta, writes, assign, participants, id_partition, coordinator: from };
        self.log_apply(record, ctx)?;
        if let Some(i) = self.intents.get_mut(&txn) {
            i.since = ctx.now;
        }
        Ok(())
    }

    fn commit(&mut self, txn: TxnId, ids: Vec<(i64, i64)>, ctx: &mut PartCtx) -> Option<Vec<(i64, i64)>> {
        match self.decided.get(&txn) {
            Some(Decision::Committed { ids }) => return Some(ids.clone()),
            Some(Decision::Aborted) => return None,
            None => {}
        }
        if !self.intents.contains_key(&txn) {
            return None;
        }
        match self.log_apply(Record::Committed { txn, ids, at: ctx.now }, ctx) {
            Ok(ids) => Some(ids),
            Err(e) => panic!("coordfree: applying a logged commit failed: {e}"),
        }
    }

    /// Cooperative termination: what the inquiries about a stale intent decided.
    fn resolve(&mut self, txn: TxnId, ctx: &mut PartCtx) {
        let Some(intent) = self.intents.get(&txn) else { return };
        let others: BTreeSet<PartitionId> = intent.participants.iter().copied().filter(|p| *p != ctx.me).collect();
        if let Some(ids) = intent.answers.values().find_map(|s| match s {
            Status::Committed { ids } => Some(ids.clone()),
            _ => None,
        }) {
            self.commit(txn, ids, ctx);
            return;
        }
        if intent.answers.values().any(|s| *s == Status::Aborted) {
            let _ = self.log_apply(Record::Aborted { txn }, ctx);
            return;
        }
        let all_prepared = others.iter().all(|p| intent.answers.get(p) == Some(&Status::Prepared));
        // Every participant prepared: the coordinator would have committed. The counter's
        // partition commits first (it assigns the id); the others learn the ids from it.
        let may_commit = intent.id_partition.is_none() || intent.id_partition == Some(ctx.me);
        if all_prepared && may_commit {
            self.commit(txn, vec![], ctx);
        }
    }

    /// Whether `txn`'s metadata is kept here (tests).
    #[cfg(test)]
    pub(super) fn keeps_meta_of(&self, txn: TxnId) -> bool {
        self.ts_of.get(&txn).is_some_and(|ts| self.metas.contains_key(ts))
    }

    /// CF-8: `txn` has committed at every participant; its metadata is collected [`META_KEEP`]
    /// from `now`.
    fn committed_everywhere(&mut self, txn: TxnId, now: Time) {
        if let Some(ts) = self.ts_of.get(&txn) {
            if self.undone.remove(ts) {
                self.done.push_back((now, *ts));
            }
        }
    }

    fn on_committed_here(&mut self, from: PartitionId, txns: Vec<TxnId>, now: Time) {
        for txn in txns {
            let Some(ts) = self.ts_of.get(&txn).copied() else { continue };
            let Some(kept) = self.metas.get_mut(&ts) else { continue };
            if !kept.confirmed.contains(&from) {
                kept.confirmed.push(from);
            }
            // This partition is the one participant neither confirmed nor asked.
            if kept.participants.iter().filter(|p| !kept.confirmed.contains(p)).count() <= 1 {
                self.committed_everywhere(txn, now);
            }
        }
    }

    /// CF-8: collects the metadata of commits known committed everywhere for [`META_KEEP`]
    /// (sooner, oldest first, beyond [`META_KEPT_MAX`] commits). Metadata of a commit not known
    /// committed everywhere is never collected: a reader may yet find the writer's version
    /// missing at a participant that has not committed it.
    fn collect_metas(&mut self, now: Time) {
        while let Some(&(at, ts)) = self.done.front() {
            if self.metas.len() <= META_KEPT_MAX && now.saturating_sub(at) < META_KEEP {
                break;
            }
            self.done.pop_front();
            if let Some(kept) = self.metas.remove(&ts) {
                self.ts_of.remove(&kept.meta.txn);
            }
        }
    }

    /// CF-8: asks the other participants about commits kept [`INTENT_STALE`] without a
    /// [`Request::Done`] (oldest first, at most [`ASK_MAX`] per pass and a pass per
    /// [`ASK_EVERY`], one message per partition).
    fn ask_undone(&mut self, ctx: &mut PartCtx) {
        let now = ctx.now;
        // A pass walks every kept commit still waiting for an answer (after a recovery, or with
        // a participant down, thousands): one pass per ASK_EVERY, not one per tick.
        if self.undone.is_empty() || self.last_ask_pass.is_some_and(|t| now.saturating_sub(t) < ASK_EVERY) {
            return;
        }
        self.last_ask_pass = Some(now);
        let mut asks: BTreeMap<PartitionId, Vec<TxnId>> = BTreeMap::new();
        let mut alone = Vec::new();
        let mut asked = 0;
        for ts in &self.undone {
            let Some(kept) = self.metas.get_mut(ts) else { continue };
            if now.saturating_sub(kept.at) < INTENT_STALE || asked >= ASK_MAX {
                break; // commit order: the rest are younger
            }
            if kept.last_ask.is_some_and(|t| now.saturating_sub(t) < INQUIRE_EVERY) {
                continue;
            }
            kept.last_ask = Some(now);
            asked += 1;
            let mut others =
                kept.participants.iter().filter(|p| **p != ctx.me && !kept.confirmed.contains(p)).peekable();
            if others.peek().is_none() {
                alone.push(kept.meta.txn);
            }
            for p in others {
                asks.entry(*p).or_default().push(kept.meta.txn);
            }
        }
        for txn in alone {
            self.committed_everywhere(txn, now);
        }
        for (p, txns) in asks {
            ctx.send_to_partition(p, Request::AskCommitted { txns });
        }
    }

    fn on_status(&mut self, from: PartitionId, txn: TxnId, status: Status, ctx: &mut PartCtx) {
        let Some(intent) = self.intents.get_mut(&txn) else { return };
        intent.answers.insert(from, status);
        self.resolve(txn, ctx);
    }

    fn on_inquire(&mut self, from: PartitionId, txn: TxnId, ctx: &mut PartCtx) {
        let status = match self.decided.get(&txn) {
            Some(Decision::Committed { ids }) => Status::Committed { ids: ids.clone() },
            Some(Decision::Aborted) => Status::Aborted,
            None if self.intents.contains_key(&txn) => Status::Prepared,
            None => {
                // Never prepared here: refuse it from now on, so the coordinator (if alive)
                // cannot commit it, and the inquirer can abort.
                let _ = self.log_apply(Record::Aborted { txn }, ctx);
                Status::Aborted
            }
        };
        ctx.send_to_partition(from, Request::Status { txn, status });
    }
}

/// The `[tmpID → realID]` lookup applied to a key (on its bytes, [`Key::map_ints`]).
fn rewrite_key(key: &Key, ids: &[(i64, i64)]) -> Key {
    let real = |i: i64| ids.iter().find(|(tmp, _)| *tmp == i).map(|&(_, real)| real);
    key.map_ints(real).unwrap_or_else(|| key.clone())
}

/// The `[tmpID → realID]` lookup applied to one key's writes (key, rows and assigned values).
fn rewrite_writes(key: &Key, mut ops: Vec<OpKind>, ids: &[(i64, i64)]) -> (Key, Vec<OpKind>) {
    let key = rewrite_key(key, ids);
    for op in &mut ops {
        match op {
            OpKind::Write { key: k, row } | OpKind::Insert { key: k, row } => {
                *k = key.clone();
                rewrite_ids(row, ids);
            }
            OpKind::Delete { key: k } => *k = key.clone(),
            OpKind::Update { key: k, updates } => {
                *k = key.clone();
                for u in updates {
                    if let litmus_core::Formula::Assign(v) = &mut u.formula {
                        rewrite_ids(std::slice::from_mut(v), ids);
                    }
                }
            }
            OpKind::Read { .. }
            | OpKind::ReadForUpdate { .. }
            | OpKind::Scan { .. }
            | OpKind::ReadMany { .. }
            | OpKind::WriteMany { .. } => {}
        }
    }
    (key, ops)
}

impl PartitionEngine for CoordfreePartition {
    fn on_request(&mut self, from: Addr, req: Payload, ctx: &mut PartCtx) {
        let Ok(req) = req.decode::<Request>() else { return };
        match req {
            Request::Read { id, op } => {
                let result = self.read(&op, ctx.store);
                ctx.reply(from, Reply::Read { id, result, at: self.last_ts });
            }
            Request::Fetch { id, wants } => match self.fetch(&wants, ctx.store, ctx.catalog) {
                Some(found) => ctx.reply(from, Reply::Fetch { id, found }),
                None => {
                    self.held_fetches.insert((from, id), wants);
                }
            },
            Request::Prepare { txn, meta, writes, assign, participants, id_partition } => {
                // Alone only if it names this partition alone (a request naming another is
                // malformed and only prepared: a coordinator would commit it there).
                let alone = participants == [ctx.me];
                let result = self.prepare(from, txn, meta, writes, assign, participants, id_partition, ctx);
                // CF-9: a lone participant commits with its prepare, in the same step.
                let committed = match result {
                    Ok(()) if alone => self.commit(txn, vec![], ctx),
                    _ => None,
                };
                match committed {
                    Some(ids) => ctx.reply(from, Reply::Committed { txn, ids }),
                    None => ctx.reply(from, Reply::Prepared { txn, result }),
                }
            }
            Request::Commit { txn, ids } => match self.commit(txn, ids, ctx) {
                Some(ids) => ctx.reply(from, Reply::Committed { txn, ids }),
                None if self.decided.get(&txn) == Some(&Decision::Aborted) => ctx.reply(from, Reply::Aborted { txn }),
                None => {}
            },
            Request::Abort { txn } => {
                if self.intents.contains_key(&txn) {
                    let _ = self.log_apply(Record::Aborted { txn }, ctx);
                }
            }
            Request::Inquire { txn } => {
                if let Addr::Partition(p) = from {
                    self.on_inquire(p, txn, ctx);
                }
            }
            Request::Status { txn, status } => {
                if let Addr::Partition(p) = from {
                    self.on_status(p, txn, status, ctx);
                }
            }
            Request::Done { txns } => {
                for txn in txns {
                    self.committed_everywhere(txn, ctx.now);
                }
            }
            Request::AskCommitted { txns } => {
                if let Addr::Partition(p) = from {
                    // Prepared here means not committed yet; anything else the asker committed
                    // is committed here (or forgotten long after its commit).
                    let txns: Vec<TxnId> = txns.into_iter().filter(|t| !self.intents.contains_key(t)).collect();
                    ctx.send_to_partition(p, Request::CommittedHere { txns });
                }
            }
            Request::CommittedHere { txns } => {
                if let Addr::Partition(p) = from {
                    self.on_committed_here(p, txns, ctx.now);
                }
            }
        }
        self.answer_held(ctx); // a commit or an abort may have ordered two prepared versions
    }

    fn on_tick(&mut self, ctx: &mut PartCtx) {
        self.collect_metas(ctx.now);
        self.ask_undone(ctx);
        let now = ctx.now;
        let stale: Vec<(TxnId, Vec<PartitionId>)> = self
            .intents
            .iter_mut()
            .filter(|(_, i)| now.saturating_sub(i.since) >= INTENT_STALE)
            .filter(|(_, i)| i.last_inquiry.is_none_or(|t| now.saturating_sub(t) >= INQUIRE_EVERY))
            .map(|(txn, i)| {
                i.last_inquiry = Some(now);
                (*txn, i.participants.iter().copied().filter(|p| *p != ctx.me).collect())
            })
            .collect();
        for (txn, others) in stale {
            if others.is_empty() {
                // The only participant, prepared: the coordinator commits such a transaction
                // (it aborts only when a prepare fails), so commit without it.
                self.resolve(txn, ctx);
                continue;
            }
            for p in others {
                ctx.send_to_partition(p, Request::Inquire { txn });
            }
        }
        self.answer_held(ctx);
    }

    fn apply_bytes(&mut self, record: &[u8], store: &mut MvccStore) -> Result<(), Error> {
        self.apply(decode_record("coordfree", record)?, store, None).map(|_| ())
    }

    fn encode_state(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("serialize")
    }

    fn decode_state(&mut self, bytes: &[u8]) -> Result<(), Error> {
        *self = postcard::from_bytes(bytes).map_err(|e| Error::Storage(format!("coordfree state: {e}")))?;
        // Which commits are known committed everywhere is not kept: ask about all of them again.
        self.undone = self.metas.keys().copied().collect();
        Ok(())
    }

    fn check_invariants(&self) -> Result<(), String> {
        for txn in self.intents.keys() {
            if self.decided.contains_key(txn) {
                return Err(format!("coordfree: {txn} is both prepared and decided"));
            }
        }
        if self.decided.len() != self.decided_order.len() {
            return Err("coordfree: decided map and its order disagree".into());
        }
        Ok(())
    }
}

/// The nested atomic increment (VLDB'15 §6.2): the counter's value before this commit's
/// increment is the real id; serial at this partition, so ids are sequential and every one is
/// used by the commit that takes it. Returns (temporary id, real id).
fn assigned_id(txn: TxnId, a: &IdAssign, store: &MvccStore) -> Result<(i64, i64), Error> {
    let current = store.latest(a.table, &a.key).and_then(|(_, r)| r.cloned());
    match current.as_ref().and_then(|r| r.get(a.column)) {
        Some(Value::Int(real)) => Ok((a.tmp, *real)),
        other => Err(Error::Internal(format!("coordfree: id counter of {txn} is not an integer: {other:?}"))),
    }
}
