//! A transaction's read batch (RAMP-Fast's `GET_ALL`, CF-4): reads and the keys of batched
//! pieces joining it (CF-4h), the partitions' answers, the second round's versions patched in,
//! and what a delivered batch hands the procedure — rows with the transaction's own writes on
//! top (CF-1), writes validated and buffered (CF-2).

use super::{contains_id, in_range, replicated, replicated_update, TxnState};
use crate::messages::{Fetched, ReadResult, Request, Seen};
use litmus_core::{Catalog, Error, Key, PartitionId, TableId, Time};
use litmus_protocol::engine::CoordCtx;
use litmus_protocol::message::SubOpId;
use litmus_protocol::op::{overlay_scan, OpKind, PartOp, PartResult};

/// A batched piece's keys, each with its place in the piece.
pub(super) type PieceKeys = Vec<(u32, Key)>;

/// One read of a batch, or one key of a batched read or write (`pos`: its place in the
/// [`OpKind::ReadMany`] or [`OpKind::WriteMany`] piece; the keys of one piece share its `id`,
/// sit side by side in the batch and are asked of the partition in one request).
#[derive(Debug)]
pub(super) struct BatchRead {
    pub(super) id: SubOpId,
    pub(super) pos: Option<u32>,
    /// A point read (for a write, of the row it validates against), or a range read.
    pub(super) op: PartOp,
    /// An insert or update waiting for its row, to be validated before it is buffered (a
    /// duplicate key or a missing row fails the operation, as on every engine). In a batched
    /// write, one that needs no row (a blind write, or a row under the transaction's own new
    /// id) waits with the result `Done` so that the piece buffers in order.
    pub(super) write: Option<OpKind>,
    pub(super) result: Option<Result<PartResult, Error>>,
    pub(super) sent: Time,
}

impl TxnState {
    /// A read's result with this transaction's own buffered writes on top (CF-1).
    pub(super) fn overlay(&self, op: &PartOp, result: PartResult, catalog: &Catalog) -> PartResult {
        match (&op.kind, result) {
            (OpKind::Read { key, .. }, PartResult::Row(row)) => {
                PartResult::Row(self.own_image(op.table, key, row, catalog, None))
            }
            (OpKind::Scan { start, end, limit }, PartResult::Rows(rows)) => {
                let mut own = Vec::new();
                for ((t, k), _) in self.buffer.range((op.table, start.clone())..) {
                    if *t != op.table || !in_range(k, start, end) {
                        break;
                    }
                    let base = rows.iter().find(|(rk, _)| rk == k).map(|(_, r)| r.clone());
                    own.push((k.clone(), self.own_image(op.table, k, base, catalog, None)));
                }
                if own.is_empty() {
                    PartResult::Rows(rows)
                } else {
                    PartResult::Rows(overlay_scan(rows, own, *limit as usize))
                }
            }
            (_, other) => other,
        }
    }

    /// A point read, or a write's validating read, of `key` joins the batch (CF-4); the row this
    /// transaction read before, if any (CF-4a: then not asked again).
    pub(super) fn join(&mut self, table: TableId, key: &Key, now: Time) -> Option<Result<PartResult, Error>> {
        self.first_read.get_or_insert(now);
        let k = (table, key.clone());
        let cached = self.rows.get(&k).map(|row| Ok(PartResult::Row(row.clone())));
        self.batch_keys.insert(k);
        cached
    }

    /// Whether a write is validated against its row before it is buffered: an insert or an
    /// update, unless the row is under this transaction's own new id (no other has it).
    pub(super) fn needs_row(&self, w: &OpKind) -> bool {
        matches!(w, OpKind::Insert { .. } | OpKind::Update { .. })
            && w.key().is_some_and(|k| !contains_id(k, &[], self.tmp))
    }

    /// A batched point read's piece: every key joins the batch as a read of its own would (CF-4a:
    /// one read before is answered from the cache), and the keys not cached are asked of the
    /// partition in one request.
    pub(super) fn issue_read_many(&mut self, id: SubOpId, table: TableId, keys: PieceKeys, ctx: &mut CoordCtx) {
        let mut ask = Vec::new();
        for (pos, key) in keys {
            let result = self.join(table, &key, ctx.now);
            if result.is_none() {
                ask.push((pos, key.clone()));
            }
            let op = PartOp { table, kind: OpKind::Read { key, cols: litmus_protocol::op::ColMask::ALL } };
            self.batch.push(BatchRead { id, pos: Some(pos), op, write: None, result, sent: ctx.now });
        }
        if !ask.is_empty() {
            let op = PartOp { table, kind: OpKind::ReadMany { keys: ask } };
            ctx.send_to_partition(id.part, Request::Read { id, op });
        }
    }

    /// A batched write's piece: each write is validated as a write of its own would be, and the
    /// piece buffers whole or not at all ([`Self::settle_writes`]). A piece that needs no row
    /// is settled now; otherwise its writes wait for the batch, the rows not cached asked of
    /// the partition in one request.
    pub(super) fn issue_write_many(&mut self, id: SubOpId, table: TableId, writes: Vec<OpKind>, ctx: &mut CoordCtx) {
        let keyed = writes.iter().all(|w| w.is_write() && w.key().is_some());
        if !keyed {
            let e = Error::Internal(format!("coordfree: a batched write holds more than point writes: {writes:?}"));
            return ctx.op_done(id, Err(e));
        }
        if replicated(ctx.catalog, table) && writes.iter().any(|w| matches!(w, OpKind::Update { .. })) {
            return ctx.op_done(id, Err(replicated_update(ctx.catalog, table)));
        }
        let now = ctx.now;
        let mut piece = Vec::with_capacity(writes.len());
        let mut ask = Vec::new();
        for (pos, w) in (0u32..).zip(writes) {
            let key = w.key().expect("keyed").clone();
            let result = if self.needs_row(&w) {
                let cached = self.join(table, &key, now);
                if cached.is_none() {
                    ask.push((pos, key.clone()));
                }
                cached
            } else {
                Some(Ok(PartResult::Done))
            };
            let op = PartOp { table, kind: OpKind::Read { key, cols: litmus_protocol::op::ColMask::ALL } };
            piece.push(BatchRead { id, pos: Some(pos), op, write: Some(w), result, sent: now });
        }
        if piece.iter().all(|r| matches!(r.result, Some(Ok(PartResult::Done)))) {
            let result = self.settle_writes(piece, ctx.catalog);
            return ctx.op_done(id, result);
        }
        self.batch.extend(piece);
        if !ask.is_empty() {
            let op = PartOp { table, kind: OpKind::ReadMany { keys: ask } };
            ctx.send_to_partition(id.part, Request::Read { id, op });
        }
    }

    /// Records what a read saw (RAMP's metadata, CF-4a): also a validating read's, whose row
    /// may answer later reads.
    pub(super) fn saw(&mut self, from: PartitionId, seen: Vec<(TableId, Key, Seen)>) {
        for (table, key, s) in seen {
            self.index.add(&s, Some(from));
            self.served.insert((table, key.clone()), from);
            self.batch_keys.insert((table, key.clone()));
            self.seen.insert((table, key), s);
        }
    }

    /// A partition's answer to a batched piece's request: each key's row goes to its read.
    pub(super) fn answer_piece(&mut self, from: PartitionId, id: SubOpId, first: usize, result: ReadResult) {
        let waiting = |r: &BatchRead| r.id == id && r.result.is_none();
        match result {
            Err(e) => {
                for r in self.batch[first..].iter_mut().filter(|r| waiting(r)) {
                    r.result = Some(Err(e.clone()));
                }
            }
            Ok((PartResult::Many(rows), seen)) => {
                self.saw(from, seen);
                for (pos, row) in rows {
                    if let Some(r) = self.batch[first..].iter_mut().find(|r| waiting(r) && r.pos == Some(pos)) {
                        r.result = Some(Ok(PartResult::Row(row)));
                    }
                }
            }
            Ok((other, _)) => {
                let e = Error::Internal(format!("coordfree: a batched read answered with {other:?}"));
                for r in self.batch[first..].iter_mut().filter(|r| waiting(r)) {
                    r.result = Some(Err(e.clone()));
                }
            }
        }
    }

    /// What one read of a delivered batch answers the procedure: the row read (cached for
    /// later reads, CF-4a) with this transaction's own writes on top; for a write, the write
    /// validated and buffered.
    pub(super) fn settle(&mut self, r: BatchRead, catalog: &Catalog) -> Result<PartResult, Error> {
        let result = r.result.expect("batch complete");
        if let (OpKind::Read { key, .. }, Ok(PartResult::Row(row))) = (&r.op.kind, &result) {
            self.rows.insert((r.op.table, key.clone()), row.clone());
        }
        // CF-4g: what the procedure is handed without the id mask (only a row of the
        // counter's table can ever be taken forward: no other read pays for the record).
        if r.write.is_none() && self.seq.as_ref().is_some_and(|s| s.table == r.op.table) {
            match (&r.op.kind, &result) {
                (OpKind::Read { key, .. }, _) if self.masks(r.op.table, key) => {}
                (OpKind::Read { key, .. }, _) => {
                    self.unmasked.insert((r.op.table, key.clone()));
                }
                (_, Ok(PartResult::Rows(rows))) => {
                    self.unmasked.extend(rows.iter().map(|(k, _)| (r.op.table, k.clone())));
                }
                _ => {}
            }
        }
        match (r.write, result) {
            (None, result) => result.map(|res| self.overlay(&r.op, res, catalog)),
            (Some(kind), Ok(PartResult::Row(row))) => {
                let key = kind.key().expect("a point write").clone();
                self.check_write(r.op.table, &key, row, &kind, catalog, Some(r.id.part))
                    .and_then(|()| self.buffer_write(r.id.part, r.op.table, key, kind))
                    .map(|()| PartResult::Done)
            }
            // A write of a batched piece that needs no row.
            (Some(kind), Ok(PartResult::Done)) => {
                let key = kind.key().expect("a point write").clone();
                self.buffer_write(r.id.part, r.op.table, key, kind).map(|()| PartResult::Done)
            }
            (Some(_), other) => other,
        }
    }

    /// A batched write piece, in order: all of its writes buffered, or none (the first error,
    /// with the ones buffered before it taken back), as a partition applies its share of a
    /// `WriteMany` whole or not at all.
    pub(super) fn settle_writes(&mut self, piece: Vec<BatchRead>, catalog: &Catalog) -> Result<PartResult, Error> {
        let assigned = self.assign.is_some();
        let mut buffered: Vec<(TableId, Key, PartitionId)> = Vec::with_capacity(piece.len());
        for r in piece {
            let (table, part) = (r.op.table, r.id.part);
            let key = r.write.as_ref().and_then(|w| w.key()).cloned();
            if let Err(e) = self.settle(r, catalog) {
                for (table, key, part) in buffered.into_iter().rev() {
                    self.unbuffer(table, key, part);
                }
                if !assigned {
                    self.assign = None;
                }
                return Err(e);
            }
            buffered.extend(key.map(|k| (table, k, part)));
        }
        Ok(PartResult::Done)
    }

    /// Takes back the last write buffered for a key on `part`.
    pub(super) fn unbuffer(&mut self, table: TableId, key: Key, part: PartitionId) {
        let k = (table, key);
        let Some(parts) = self.buffer.get_mut(&k) else { return };
        parts.pop(part);
        if parts.is_empty() {
            self.buffer.remove(&k);
        }
    }

    /// Puts a second-round version into the held batch results.
    pub(super) fn patch(&mut self, part: PartitionId, f: &Fetched) {
        self.index.add(&f.seen, Some(part));
        self.seen.insert((f.table, f.key.clone()), f.seen.clone());
        for r in &mut self.batch {
            if r.op.table != f.table {
                continue;
            }
            match (&r.op.kind, r.result.as_mut()) {
                (OpKind::Read { key, .. }, Some(Ok(PartResult::Row(row)))) if *key == f.key => *row = f.row.clone(),
                (OpKind::Scan { start, end, limit }, Some(Ok(PartResult::Rows(rows))))
                    if in_range(&f.key, start, end) =>
                {
                    rows.retain(|(k, _)| *k != f.key);
                    if let Some(row) = &f.row {
                        rows.push((f.key.clone(), row.clone()));
                        rows.sort_by(|a, b| a.0.cmp(&b.0));
                        rows.truncate(*limit as usize);
                    }
                }
                _ => {}
            }
        }
    }
}
