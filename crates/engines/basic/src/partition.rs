//! The partition half of `basic`: `lrt` and `list` per item ([`super::item`]), rules R, W1, W2,
//! F and V against the store, parked reads, the §IV-D timeouts, and formula-list GC.
//!
//! Logged state (records, replayed by [`BasicPartition::apply`]): placed formulas, their
//! force-write or revocation (tombstones for unknown ones), folds of forced prefixes into the
//! store, and a floor above every read timestamp answered. Volatile: per-item `lrt` (replaced by
//! the floor after a restart), `read_by` facts and parked reads (a reader's coordinator resends).

use super::item::{Item, ReadView};
use super::messages::{ItemFormula, PrepareOutcome, ReadOutcome, Record, Reply, Request, WriteId};
use super::{ts_plus_micros, FOLD_LAG_US, IN_DOUBT_AFTER, LRT_FLOOR_STEP_US};
use litmus_core::{AbortReason, Error, InvalidInput, Key, PartitionId, Row, TableId, Time, Timestamp};
use litmus_protocol::engine::{decode_record, PartCtx, PartitionEngine};
use litmus_protocol::message::{Addr, Payload, SubOpId};
use litmus_protocol::op::{OpKind, PartOp, PartResult};
use litmus_storage::mvcc::MvccStore;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;

/// Outcomes of ended writes remembered (for duplicates and peers in doubt); older ones are
/// forgotten and `ended_floor` rises past them.
pub const ENDED_MAX: usize = 200_000;
/// Reads parked at once; beyond it a read is refused (retryable).
pub const PARKED_MAX: usize = 65_536;
/// In-doubt queries sent per tick at most.
pub const QUERIES_PER_TICK_MAX: usize = 256;

/// A write attempt with formulas on this partition.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct WriteAt {
    ts: Timestamp,
    items: BTreeSet<(TableId, Key)>,
    forced: bool,
    peers: Vec<PartitionId>,
    coordinator: Option<Addr>,
    /// When it was placed (volatile: the first tick after a restart).
    #[serde(skip)]
    since: Option<Time>,
    #[serde(skip)]
    asked: Option<Time>,
}

/// A read waiting for older pending formulas (`read_by`).
#[derive(Clone, Debug)]
struct Parked {
    from: Addr,
    id: SubOpId,
    ts: Timestamp,
    own: WriteId,
    op: PartOp,
    waits: BTreeSet<WriteId>,
    /// Not evaluated yet: it has just arrived, and rule R's real-time check applies (a read
    /// resumed after it parked began before any formula placed since).
    fresh: bool,
}

/// See the module doc.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct BasicPartition {
    items: BTreeMap<TableId, BTreeMap<Key, Item>>,
    writes: BTreeMap<WriteId, WriteAt>,
    /// Ended writes: `true` forced, `false` revoked, with their timestamp.
    ended: BTreeMap<WriteId, (bool, Timestamp)>,
    ended_order: VecDeque<WriteId>,
    /// Outcomes of writes at or below this timestamp may be forgotten.
    ended_floor: Timestamp,
    /// W1 revokes writes at or below it: items forgotten by GC, and after a restart.
    floor: Timestamp,
    /// Logged: above every read timestamp answered.
    durable_lrt: Timestamp,
    #[serde(skip)]
    scan_lrt: BTreeMap<TableId, Timestamp>,
    #[serde(skip)]
    max_seen: Timestamp,
    /// Reads below it are refused: deleted keys removed from the store at or below it
    /// ([`Record::Forget`]). Volatile: `floor` rises with it, and a restart starts it there
    /// (conservatively: `floor` also holds the logged read floor, so after a restart a read
    /// below that runs again once above it).
    #[serde(skip)]
    gone: Timestamp,
    #[serde(skip)]
    parked: Vec<Parked>,
    #[serde(skip)]
    dirty: BTreeSet<(TableId, Key)>,
    #[serde(skip)]
    started: bool,
}

/// Rule R, real-time order: the newest formula of another write, or stored version, of `key`
/// above a read at `ts` that arrives now (`own`: the reader's write attempt).
fn newer(
    items: Option<&Item>,
    store: &MvccStore,
    table: TableId,
    key: &Key,
    ts: Timestamp,
    own: WriteId,
) -> Option<Timestamp> {
    let formula = items.and_then(|i| i.newest_above(ts, own));
    let version = store.latest(table, key).map(|(v, _)| v).filter(|v| *v > ts);
    formula.max(version)
}

fn stored(store: &MvccStore, table: TableId, key: &Key) -> (Timestamp, Option<Row>) {
    store.latest(table, key).map_or((Timestamp::ZERO, None), |(ts, r)| (ts, r.cloned()))
}

/// The stored version a read at `ts` starts from; `Err(oldest)` when every version kept is newer
/// (older ones were pruned, or the key did not exist yet): the read must run again above it.
fn stored_at(store: &MvccStore, table: TableId, key: &Key, ts: Timestamp) -> Result<Option<Row>, Timestamp> {
    let mut oldest = None;
    for (vts, row) in store.versions(table, key) {
        if vts <= ts {
            return Ok(row.cloned());
        }
        oldest = Some(vts);
    }
    oldest.map_or(Ok(None), Err)
}

impl BasicPartition {
    /// The item's state (`lrt` 0 and an empty list when unknown).
    pub fn item(&self, table: TableId, key: &Key) -> Item {
        self.items.get(&table).and_then(|t| t.get(key)).cloned().unwrap_or_default()
    }

    fn with_item<R>(&mut self, table: TableId, key: &Key, f: impl FnOnce(&mut Item) -> R) -> R {
        f(self.items.entry(table).or_default().entry(key.clone()).or_default())
    }

    /// Write attempts placed here and not yet ended.
    pub fn pending_writes(&self) -> usize {
        self.writes.len()
    }

    /// Reads waiting for older formulas.
    pub fn parked_reads(&self) -> usize {
        self.parked.len()
    }

    fn start(&mut self, now: Time) {
        if self.started {
            return;
        }
        self.started = true;
        // After a restart the per-item lrt values are gone: every read answered before is below
        // the logged floor, so W1 revokes every write below it.
        self.floor = self.floor.max(self.durable_lrt);
        self.max_seen = self.max_seen.max(self.floor);
        self.gone = self.gone.max(self.floor);
        for (table, keys) in &self.items {
            self.dirty.extend(keys.keys().map(|k| (*table, k.clone())));
        }
        for w in self.writes.values_mut() {
            w.since.get_or_insert(now);
        }
    }

    /// Applies one record (live right after logging it, and in recovery).
    pub fn apply(&mut self, record: Record, store: &mut MvccStore) -> Result<(), Error> {
        match record {
            Record::Prepare { wid, ts, op, table, key, formula, peers, coordinator } => {
                self.with_item(table, &key, |item| item.place(wid, ts, op, formula));
                let w = self.writes.entry(wid).or_default();
                w.ts = ts;
                w.items.insert((table, key));
                w.peers = peers;
                w.coordinator = Some(coordinator);
            }
            Record::Force { wid } => {
                if let Some(w) = self.writes.remove(&wid) {
                    for (table, key) in &w.items {
                        self.with_item(*table, key, |item| item.force(wid));
                        self.dirty.insert((*table, key.clone()));
                    }
                    self.remember(wid, true, w.ts);
                }
            }
            Record::Revoke { wid } => {
                let ts = match self.writes.remove(&wid) {
                    Some(w) => {
                        for (table, key) in &w.items {
                            self.with_item(*table, key, |item| item.revoke(wid));
                            self.dirty.insert((*table, key.clone()));
                        }
                        w.ts
                    }
                    None => Timestamp::MAX,
                };
                if !self.ended.contains_key(&wid) {
                    self.remember(wid, false, ts);
                }
            }
            Record::Fold { table, key, upto } => {
                let (prev_ts, row) = stored(store, table, &key);
                if upto <= prev_ts {
                    return Err(Error::Internal(format!("basic fold {upto} not after {prev_ts}")));
                }
                for (ts, row) in self.with_item(table, &key, |item| item.fold(row, upto)) {
                    store.put(table, key.clone(), ts, row);
                }
                // Versions older than the newest one at or below `upto - lag` serve no read a
                // partition still answers (older reads get `TooOld`).
                let lag = Timestamp(upto.0.saturating_sub(FOLD_LAG_US << super::TS_NODE_BITS));
                let old: Vec<Timestamp> =
                    store.versions(table, &key).map(|(t, _)| t).filter(|t| *t <= lag).skip(1).collect();
                for t in old {
                    store.remove_version(table, &key, t);
                }
            }
            Record::LrtFloor(ts) => self.durable_lrt = self.durable_lrt.max(ts),
            Record::Forget { table, key, at } => {
                let versions: Vec<Timestamp> = store.versions(table, &key).map(|(t, _)| t).collect();
                if versions.first() != Some(&at) {
                    return Err(Error::Internal(format!("basic: forget of a key whose newest version is not {at}")));
                }
                for t in versions {
                    store.remove_version(table, &key, t);
                }
                self.floor = self.floor.max(at);
                self.gone = self.gone.max(at);
            }
        }
        Ok(())
    }

    fn remember(&mut self, wid: WriteId, forced: bool, ts: Timestamp) {
        self.ended.insert(wid, (forced, ts));
        self.ended_order.push_back(wid);
        while self.ended_order.len() > ENDED_MAX {
            let old = self.ended_order.pop_front().expect("non-empty");
            if let Some((_, ts)) = self.ended.remove(&old) {
                if ts != Timestamp::MAX {
                    self.ended_floor = self.ended_floor.max(ts);
                }
            }
        }
    }

    fn log_apply(&mut self, record: Record, ctx: &mut PartCtx) {
        ctx.log(&record);
        self.apply(record, ctx.store).expect("a record the partition just made applies");
    }

    /// Rule R for a point or range read; `None` when it parked.
    fn evaluate_read(&mut self, p: &mut Parked, store: &MvccStore) -> Option<ReadOutcome> {
        let table = p.op.table;
        if p.ts < self.gone {
            // A key deleted at or below `gone` may have had a row at TS, and is gone.
            return Some(ReadOutcome::TooOld { bound: self.gone });
        }
        match &p.op.kind {
            OpKind::Read { key, .. } => {
                let (ts, own, id) = (p.ts, p.own, p.id);
                if p.fresh {
                    let item = self.items.get(&table).and_then(|t| t.get(key));
                    if let Some(bound) = newer(item, store, table, key, ts, own) {
                        return Some(ReadOutcome::TooOld { bound });
                    }
                }
                let base = stored_at(store, table, key, p.ts);
                let view = self.with_item(table, key, |item| {
                    item.raise_lrt(ts);
                    base.map(|row| item.read(row, ts, own, id))
                });
                self.dirty.insert((table, key.clone()));
                match view {
                    Err(bound) => Some(ReadOutcome::TooOld { bound }),
                    Ok(view) => match view {
                        ReadView::Value(row) => Some(ReadOutcome::Done(Ok(PartResult::Row(row)))),
                        ReadView::Wait(w) => {
                            p.waits = w.into_iter().collect();
                            None
                        }
                    },
                }
            }
            OpKind::Scan { start, end, limit } => {
                let lrt = self.scan_lrt.entry(table).or_default();
                *lrt = (*lrt).max(p.ts);
                if end.as_ref().is_some_and(|e| e <= start) {
                    return Some(ReadOutcome::Done(Ok(PartResult::Rows(Vec::new()))));
                }
                let end_b = end.as_ref().map_or(Bound::Unbounded, Bound::Excluded);
                // Every key in the range that the store or a list holds, deleted ones included:
                // whether a key has a row at TS is its own rule R read (its newest version at or
                // below TS, the older formulas applied), never what its newest version says.
                let listed: Vec<Key> = self.items.get(&table).map_or_else(Vec::new, |items| {
                    items.range::<Key, _>((Bound::Included(start), end_b)).map(|(k, _)| k.clone()).collect()
                });
                let mut listed = listed.into_iter().peekable();
                let mut kept = store.keys_in(table, Bound::Included(start), end_b).peekable();
                let (ts, own, id) = (p.ts, p.own, p.id);
                let mut rows = Vec::new();
                let mut waits = BTreeSet::new();
                let mut bound = None;
                // Keys in order until `limit` rows: a key with no row at TS does not count; one
                // that waits for an older pending formula does not either (it may have none).
                while rows.len() < *limit as usize {
                    let key = match (kept.peek(), listed.peek()) {
                        (None, None) => break,
                        (Some(&k), Some(l)) if k < l => kept.next().cloned(),
                        (Some(&k), Some(l)) if k == l => kept.next().and(listed.next()),
                        (Some(_), None) => kept.next().cloned(),
                        (_, Some(_)) => listed.next(),
                    }
                    .expect("peeked");
                    if p.fresh {
                        let item = self.items.get(&table).and_then(|t| t.get(&key));
                        bound = bound.max(newer(item, store, table, &key, ts, own));
                    }
                    let row = match stored_at(store, table, &key, ts) {
                        Ok(row) => row,
                        Err(older) => {
                            return Some(ReadOutcome::TooOld { bound: bound.map_or(older, |b| older.max(b)) })
                        }
                    };
                    let view = match self.items.get_mut(&table).and_then(|t| t.get_mut(&key)) {
                        Some(item) => item.read(row, ts, own, id),
                        None => ReadView::Value(row),
                    };
                    match view {
                        ReadView::Value(Some(r)) => rows.push((key, r)),
                        ReadView::Value(None) => {}
                        ReadView::Wait(w) => waits.extend(w),
                    }
                }
                if let Some(bound) = bound {
                    return Some(ReadOutcome::TooOld { bound });
                }
                if !waits.is_empty() {
                    p.waits = waits;
                    return None;
                }
                Some(ReadOutcome::Done(Ok(PartResult::Rows(rows))))
            }
            _ => Some(ReadOutcome::Done(Err(Error::Internal("basic: a write sent as a read".into())))),
        }
    }

    fn answer_read(&mut self, p: &Parked, outcome: ReadOutcome, ctx: &mut PartCtx) {
        if matches!(outcome, ReadOutcome::Done(Ok(_))) && p.ts >= self.durable_lrt {
            // Persist before send: the floor is durable before the answer leaves.
            self.log_apply(Record::LrtFloor(ts_plus_micros(p.ts, LRT_FLOOR_STEP_US)), ctx);
        }
        ctx.reply(p.from, Reply::Read { id: p.id, ts: p.ts, outcome });
    }

    fn on_read(&mut self, mut p: Parked, ctx: &mut PartCtx) {
        self.max_seen = self.max_seen.max(p.ts);
        match self.evaluate_read(&mut p, ctx.store) {
            Some(outcome) => self.answer_read(&p, outcome, ctx),
            None if self.parked.len() >= PARKED_MAX => {
                let err = Error::unavailable(format!("{}: {PARKED_MAX} reads already wait", ctx.me));
                self.answer_read(&p, ReadOutcome::Done(Err(err)), ctx);
            }
            None => {
                p.fresh = false;
                self.parked.push(p);
            }
        }
    }

    /// Reads waiting on `ended` resume; those with nothing left to wait for are answered.
    fn resume(&mut self, ended: WriteId, ctx: &mut PartCtx) {
        let mut ready = Vec::new();
        self.parked.retain_mut(|p| {
            p.waits.remove(&ended);
            if p.waits.is_empty() {
                ready.push(p.clone());
                false
            } else {
                true
            }
        });
        for p in ready {
            self.on_read(p, ctx);
        }
    }

    /// Rules W1 and W2 for one PREPARE.
    fn prepare(
        &mut self,
        id: SubOpId,
        (wid, ts): (WriteId, Timestamp),
        op: PartOp,
        peers: Vec<PartitionId>,
        coordinator: Addr,
        ctx: &mut PartCtx,
    ) -> PrepareOutcome {
        self.max_seen = self.max_seen.max(ts);
        match self.ended.get(&wid) {
            Some((true, _)) => return PrepareOutcome::Placed,
            Some((false, _)) => return PrepareOutcome::Revoked { bound: ts },
            None => {}
        }
        let table = op.table;
        let Some(key) = op.kind.key().cloned() else {
            return PrepareOutcome::Failed(Error::Internal("basic: a scan sent as a write".into()));
        };
        let (vts, row) = stored(ctx.store, table, &key);
        let item = self.items.get(&table).and_then(|t| t.get(&key)).cloned().unwrap_or_default();
        if item.list.iter().any(|e| e.wid == wid && e.ops.contains(&id.op)) {
            return PrepareOutcome::Placed; // a resent PREPARE
        }
        let lrt = item.lrt.max(self.scan_lrt.get(&table).copied().unwrap_or_default());
        let floor = self.floor.max(vts);
        if (Item { lrt, list: vec![] }).w1_revokes(ts, floor) {
            return PrepareOutcome::Revoked { bound: lrt.max(floor) };
        }
        let table_name = || ctx.catalog.table(table).map(|t| t.name.clone()).unwrap_or_default();
        let formula = match op.kind {
            OpKind::Write { row, .. } => ItemFormula::Put(row),
            OpKind::Delete { .. } => ItemFormula::Delete,
            OpKind::Insert { row: new, .. } => {
                if item.pending().any(|e| e.ts < ts && e.wid != wid) {
                    return PrepareOutcome::Revoked { bound: ts };
                }
                // The insert reads the key's absence: rule R's real-time order (a newer stored
                // version is W1's floor above).
                if let Some(bound) = item.newest_above(ts, wid) {
                    return PrepareOutcome::Revoked { bound };
                }
                if item.value_at(row, ts, wid, false).is_some() {
                    return PrepareOutcome::Failed(InvalidInput::DuplicateKey(table_name()).into());
                }
                // The insert read the key's absence at `ts`.
                self.with_item(table, &key, |i| i.raise_lrt(ts));
                ItemFormula::Put(new)
            }
            OpKind::Update { updates, .. } => {
                let Some(mut current) = item.value_at(row, ts, wid, true) else {
                    return PrepareOutcome::Failed(InvalidInput::KeyNotFound(table_name()).into());
                };
                if let Err(e) = litmus_core::formula::apply_updates(&mut current, &updates) {
                    return PrepareOutcome::Failed(e.into());
                }
                ItemFormula::Update(updates)
            }
            OpKind::Read { .. }
            | OpKind::ReadForUpdate { .. }
            | OpKind::Scan { .. }
            | OpKind::ReadMany { .. }
            | OpKind::WriteMany { .. } => {
                unreachable!("point writes only (checked above)")
            }
        };
        let record = Record::Prepare { wid, ts, op: id.op, table, key: key.clone(), formula, peers, coordinator };
        self.log_apply(record, ctx);
        self.dirty.insert((table, key));
        if let Some(w) = self.writes.get_mut(&wid) {
            w.since.get_or_insert(ctx.now);
        }
        PrepareOutcome::Placed
    }

    /// Rule F or V for `wid`, logged; parked reads resume.
    fn end(&mut self, wid: WriteId, forced: bool, ctx: &mut PartCtx) {
        let known = self.writes.contains_key(&wid);
        if !known && self.ended.contains_key(&wid) {
            return;
        }
        if forced && !known {
            return; // nothing placed here (never prepared, or ended and forgotten)
        }
        let items = self.writes.get(&wid).map(|w| w.items.clone()).unwrap_or_default();
        self.log_apply(if forced { Record::Force { wid } } else { Record::Revoke { wid } }, ctx);
        // F updates the value: the forced prefix of each list becomes a stored version (a
        // forced formula behind a pending older one waits in the list: §IV-C).
        for (table, key) in items {
            let upto = self.items.get(&table).and_then(|t| t.get(&key)).and_then(|i| i.foldable(Timestamp::MAX));
            if let Some(upto) = upto {
                self.log_apply(Record::Fold { table, key, upto }, ctx);
            }
        }
        self.resume(wid, ctx);
    }

    fn gc(&mut self, ctx: &mut PartCtx) {
        let horizon = Timestamp(self.max_seen.0.saturating_sub(FOLD_LAG_US << super::TS_NODE_BITS));
        let dirty = std::mem::take(&mut self.dirty);
        let mut forget = Vec::new();
        for (table, key) in dirty {
            let Some(item) = self.items.get(&table).and_then(|t| t.get(&key)) else { continue };
            // A deleted key leaves the store with its item, once its deletion is behind the
            // horizon too (until then the item stays, so the key is looked at again).
            let tombstone = match ctx.store.latest(table, &key) {
                Some((at, None)) => Some(at),
                _ => None,
            };
            if item.list.is_empty() && item.lrt <= horizon && tombstone.is_none_or(|at| at <= horizon) {
                self.floor = self.floor.max(item.lrt);
                if let Some(t) = self.items.get_mut(&table) {
                    t.remove(&key);
                }
                forget.extend(tombstone.map(|at| Record::Forget { table, key, at }));
            } else {
                self.dirty.insert((table, key));
            }
        }
        for record in forget {
            self.log_apply(record, ctx);
        }
    }

    fn in_doubt(&mut self, ctx: &mut PartCtx) {
        let (now, me) = (ctx.now, ctx.me);
        let mut sent = 0;
        for (wid, w) in self.writes.iter_mut().filter(|(_, w)| !w.forced) {
            let since = *w.since.get_or_insert(now);
            let due = now.saturating_sub(since) >= IN_DOUBT_AFTER
                && w.asked.is_none_or(|a| now.saturating_sub(a) >= IN_DOUBT_AFTER);
            if !due {
                continue;
            }
            w.asked = Some(now);
            if let Some(c) = w.coordinator {
                ctx.reply(c, Reply::Query { wid: *wid });
            }
            for &p in w.peers.iter().filter(|&&p| p != me) {
                ctx.send_to_partition(p, Request::PeerQuery { wid: *wid, ts: w.ts });
            }
            sent += 1;
            if sent >= QUERIES_PER_TICK_MAX {
                break;
            }
        }
    }

    fn peer_query(&mut self, from: Addr, wid: WriteId, ts: Timestamp, ctx: &mut PartCtx) {
        let Addr::Partition(peer) = from else { return };
        let forced = match (self.writes.get(&wid), self.ended.get(&wid)) {
            (Some(w), _) if w.forced => Some(true),
            (Some(_), _) => None,
            (None, Some((f, _))) => Some(*f),
            (None, None) if ts <= self.ended_floor => None,
            (None, None) => {
                // §IV-D: never prepared here, so it can never be force-written here: discard it
                // (a tombstone refuses a late PREPARE) and say so.
                self.log_apply(Record::Revoke { wid }, ctx);
                Some(false)
            }
        };
        if let Some(forced) = forced {
            ctx.send_to_partition(peer, Request::Outcome { wid, forced });
        }
    }
}

impl PartitionEngine for BasicPartition {
    fn on_request(&mut self, from: Addr, req: Payload, ctx: &mut PartCtx) {
        self.start(ctx.now);
        let Ok(req) = req.decode::<Request>() else { return };
        match req {
            Request::Read { id, ts, own, op } => {
                self.on_read(Parked { from, id, ts, own, op, waits: BTreeSet::new(), fresh: true }, ctx)
            }
            Request::Prepare { id, wid, ts, op, peers } => {
                let outcome = self.prepare(id, (wid, ts), op, peers, from, ctx);
                ctx.reply(from, Reply::Prepared { id, wid, outcome });
            }
            Request::Force { wid } => {
                self.end(wid, true, ctx);
                ctx.reply(from, Reply::Forced { wid });
            }
            Request::Revoke { wid } => self.end(wid, false, ctx),
            Request::Outcome { wid, forced } => {
                if self.writes.get(&wid).is_some_and(|w| !w.forced) {
                    self.end(wid, forced, ctx);
                }
            }
            Request::PeerQuery { wid, ts } => self.peer_query(from, wid, ts, ctx),
        }
    }

    fn on_tick(&mut self, ctx: &mut PartCtx) {
        self.start(ctx.now);
        self.in_doubt(ctx);
        self.gc(ctx);
    }

    fn apply_bytes(&mut self, record: &[u8], store: &mut MvccStore) -> Result<(), Error> {
        self.apply(decode_record("basic", record)?, store)
    }

    fn encode_state(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("basic state serializes")
    }

    fn decode_state(&mut self, bytes: &[u8]) -> Result<(), Error> {
        *self = postcard::from_bytes(bytes).map_err(|e| Error::Storage(format!("basic state: {e}")))?;
        Ok(())
    }

    fn check_invariants(&self) -> Result<(), String> {
        for (table, keys) in &self.items {
            for (key, item) in keys {
                if !item.list.windows(2).all(|w| (w[0].ts, w[0].wid) < (w[1].ts, w[1].wid)) {
                    return Err(format!("basic: list of {table:?} {key:?} not in timestamp order"));
                }
                for e in &item.list {
                    if !e.forced && !self.writes.contains_key(&e.wid) {
                        return Err(format!("basic: pending formula of ended write {:?} on {key:?}", e.wid));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A retryable abort for a read or write that must run again under a newer timestamp.
pub fn too_old() -> Error {
    Error::Abort(AbortReason::TimestampTooOld)
}
