//! The coordinator half of `coordfree`: read buffering with RAMP-Fast's two rounds, write
//! buffering, the two-phase RAMP write with the counter partition's commit first, refusal.

use super::messages::{Fetched, IdAssign, KeyWrites, Reply, Request, Want, WriteMeta};
use super::partition::fold;
use super::{contains_id, ramp, tmp_id, DONE_EVERY, READ_WINDOW, RESEND_AFTER};
use litmus_core::hash::{FxHashMap, FxHashSet};
use litmus_core::{
    AbortReason, Catalog, Error, Formula, InvalidInput, Key, PartitionId, Row, TableId, Time, TxnId, Value,
};
use litmus_protocol::engine::{CoordCtx, CoordinatorEngine, GroupedIssue, TxnOptions};
use litmus_protocol::message::{Payload, SubOpId};
use litmus_protocol::op::{OpKind, PartOp, PartResult};
use litmus_protocol::procedure::Coordination;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

mod batch;
use batch::{BatchRead, PieceKeys};

/// The op number of a transaction's second-round reads (never a procedure's op number: those
/// count up from zero).
const FETCH_OP: u32 = u32::MAX;

/// The engine's name, in errors.
const ENGINE: &str = "coordfree";

/// The declared id counter of a procedure with [`Coordination::SequentialId`].
#[derive(Debug)]
struct SeqDecl {
    table: TableId,
    column: usize,
    invariant: String,
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    Preparing,
    /// Waiting for the counter's partition to commit and assign the id.
    CommittingId,
    Committing,
}

#[derive(Debug)]
struct CommitState {
    phase: Phase,
    participants: Vec<PartitionId>,
    id_partition: Option<PartitionId>,
    prepares: BTreeMap<PartitionId, Request>,
    waiting: BTreeSet<PartitionId>,
    ids: Vec<(i64, i64)>,
    last_sent: Time,
}

/// One key's buffered operations by partition, in partition order: a partitioned row's on its
/// one partition, a replicated row's on each copy. Held inline for one partition (a map per
/// buffered key would cost an allocation per write).
#[derive(Debug, Default)]
struct PartOps(smallvec::SmallVec<[(PartitionId, Vec<OpKind>); 1]>);

impl PartOps {
    fn get(&self, part: PartitionId) -> Option<&Vec<OpKind>> {
        self.0.iter().find(|(p, _)| *p == part).map(|(_, ops)| ops)
    }

    /// Any copy's operations (they are the same on every copy).
    fn first(&self) -> Option<&Vec<OpKind>> {
        self.0.first().map(|(_, ops)| ops)
    }

    fn push(&mut self, part: PartitionId, op: OpKind) {
        match self.0.iter().position(|(p, _)| *p >= part) {
            Some(i) if self.0[i].0 == part => self.0[i].1.push(op),
            Some(i) => self.0.insert(i, (part, vec![op])),
            None => self.0.push((part, vec![op])),
        }
    }

    /// Takes back the last operation buffered on `part`.
    fn pop(&mut self, part: PartitionId) {
        if let Some(i) = self.0.iter().position(|(p, _)| *p == part) {
            self.0[i].1.pop();
            if self.0[i].1.is_empty() {
                self.0.remove(i);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = (PartitionId, &Vec<OpKind>)> {
        self.0.iter().map(|(p, ops)| (*p, ops))
    }
}

#[derive(Debug, Default)]
struct TxnState {
    procedure: String,
    refused: Option<Error>,
    seq: Option<SeqDecl>,
    assign: Option<(PartitionId, IdAssign)>,
    tmp: i64,
    /// Buffered writes by key, per partition (a replicated table's row is written on every
    /// partition, the same operations on each), in issue order.
    buffer: BTreeMap<(TableId, Key), PartOps>,
    /// RAMP: what the transaction knows of every version it read.
    seen: ramp::ReadSet,
    /// The committed row of every key this transaction point-read (second round applied),
    /// without its own writes: a later read of the key, or the validation of a write to it,
    /// is answered from here instead of asking the partition again (CF-4a).
    rows: FxHashMap<(TableId, Key), Option<Row>>,
    /// Rows of the id counter's table handed to the procedure by a read while not masked by
    /// this transaction's id assignment, or by a range read: never taken forward (CF-4g).
    unmasked: FxHashSet<(TableId, Key)>,
    /// The read set by key, for the second rounds (CF-4b).
    index: ramp::ReadIndex,
    /// The partition that served each key this transaction read: for a replicated row the
    /// copy read, as whose key the row is tracked (CF-4f); for the others their own partition,
    /// kept so that the read-set checks need not decode the key to find it.
    served: FxHashMap<(TableId, Key), PartitionId>,
    /// Reads outstanding or held until the whole batch is in (RAMP-Fast's `GET_ALL`).
    batch: Vec<BatchRead>,
    batch_keys: ramp::KeySet,
    /// The batch's range reads.
    scans: Vec<ramp::Scanned>,
    fetch_waiting: BTreeMap<PartitionId, (Request, Time)>,
    /// Second-round versions, with the partition each came from.
    fetched: Vec<(PartitionId, Fetched)>,
    /// When the first read was sent (CF-8: a transaction reading for longer than
    /// [`READ_WINDOW`] starts over).
    first_read: Option<Time>,
    commit: Option<CommitState>,
}

#[derive(Debug, Default)]
pub struct CoordfreeCoordinator {
    txns: BTreeMap<TxnId, TxnState>,
    /// Emptied states of finished transactions, for the next ones ([`SPARE_MAX`]).
    spare: Vec<TxnState>,
    /// Transactions committed at every participant, to tell the participants on the next
    /// tick (CF-8: their metadata can be collected).
    done: BTreeMap<PartitionId, Vec<TxnId>>,
    done_sent: Time,
}

fn refusal(procedure: &str, invariant: &str, operation: &str) -> Error {
    Error::Invalid(InvalidInput::NeedsCoordination {
        engine: ENGINE.into(),
        procedure: procedure.into(),
        invariant: invariant.into(),
        operation: operation.into(),
    })
}

/// Whether `table` is replicated on every partition.
fn replicated(catalog: &Catalog, table: TableId) -> bool {
    catalog.table(table).is_ok_and(|s| s.partitioning == litmus_core::Partitioning::Replicated)
}

/// The partition a key of the read set is tracked on (CF-4f): the one that served it when it
/// was read; for a key not read, its own (`None` for a replicated row no copy of which was
/// read).
fn tracked_on(
    catalog: &Catalog,
    partitions: u32,
    served: &FxHashMap<(TableId, Key), PartitionId>,
    k: &(TableId, Key),
) -> Option<PartitionId> {
    served.get(k).copied().or_else(|| partition_of(catalog, partitions, k.0, &k.1))
}

/// CF-2b: an update of a replicated row is refused: each copy would apply the formulas to its
/// own row (module doc).
fn replicated_update(catalog: &Catalog, table: TableId) -> Error {
    let name = catalog.table(table).map_or_else(|_| "?".to_string(), |s| s.name.clone());
    let what = format!("an update of replicated table {name} (write the whole row: its copies must end alike)");
    Error::Invalid(InvalidInput::Unsupported { engine: ENGINE.into(), what })
}

/// The partition of a key, `None` for a replicated table.
fn partition_of(catalog: &Catalog, partitions: u32, table: TableId, key: &Key) -> Option<PartitionId> {
    let schema = catalog.table(table).ok()?;
    let values = Key::decode(key.as_bytes()).ok()?;
    schema.partition_of(&values, partitions)
}

fn in_range(key: &Key, start: &Key, end: &Option<Key>) -> bool {
    key >= start && end.as_ref().is_none_or(|e| key < e)
}

/// Finished transactions' states kept for reuse: a New-Order fills a read set, a row cache and
/// a read index of 20 to 40 keys each, and growing them from empty again for every
/// transaction (rehashing on the way) is a visible share of `coordfree`'s CPU.
const SPARE_MAX: usize = 64;
/// States whose collections (the read index's included) grew beyond this many entries are not
/// kept: emptying a hash table costs its capacity, and one large read (a consistency check
/// reading every order line) would otherwise slow every later transaction's reuse.
const SPARE_CAPACITY_MAX: usize = 512;

impl TxnState {
    /// A fresh state that reuses this finished one's hashed collections, emptied. Everything
    /// not named here starts from its default, so nothing of the finished transaction leaks.
    fn recycled(self) -> Option<TxnState> {
        let TxnState { mut seen, mut rows, mut unmasked, mut index, mut served, mut batch_keys, .. } = self;
        let rooms = [seen.capacity(), rows.capacity(), unmasked.capacity(), served.capacity(), batch_keys.capacity()];
        if rooms.into_iter().chain([index.capacity()]).any(|c| c > SPARE_CAPACITY_MAX) {
            return None;
        }
        seen.clear();
        rows.clear();
        unmasked.clear();
        index.clear();
        served.clear();
        batch_keys.clear();
        Some(TxnState { seen, rows, unmasked, index, served, batch_keys, ..TxnState::default() })
    }

    /// CF-8: whether the transaction has been reading for [`READ_WINDOW`] or longer.
    fn reading_too_long(&self, now: Time) -> bool {
        self.first_read.is_some_and(|at| now.saturating_sub(at) >= READ_WINDOW)
    }

    /// The retryable abort of a batch that completes past [`READ_WINDOW`] (CF-8).
    fn too_long() -> Error {
        Error::Abort(AbortReason::Other(format!(
            "coordfree: reads outlived the metadata window ({READ_WINDOW:?}); retry"
        )))
    }

    /// Buffers a validated write; a counter bump of a sequential-id procedure becomes the
    /// transaction's deferred id assignment (CF-5).
    fn buffer_write(&mut self, part: PartitionId, table: TableId, key: Key, kind: OpKind) -> Result<(), Error> {
        if let (Some(seq), OpKind::Update { updates, .. }) = (&self.seq, &kind) {
            let bump = table == seq.table
                && updates.iter().any(|u| u.column == seq.column && u.formula == Formula::Add(Value::Int(1)));
            if bump {
                match &self.assign {
                    Some((_, a)) if a.key != key => {
                        return Err(refusal(
                            &self.procedure,
                            &seq.invariant,
                            "a second sequential id in one transaction",
                        ));
                    }
                    Some(_) => {}
                    None => {
                        let a = IdAssign { table: seq.table, key: key.clone(), column: seq.column, tmp: self.tmp };
                        self.assign = Some((part, a));
                    }
                }
            }
        }
        self.buffer.entry((table, key)).or_default().push(part, kind);
        Ok(())
    }
    /// A row as this transaction sees it: the read row with its own buffered writes on top
    /// (and the counter it bumped showing its temporary id + 1).
    /// `copy`: for a replicated row, the partition whose copy `row` is (its own buffered ops
    /// go on top: a write validated against one copy must not see the ops it buffered for
    /// another, or a replicated insert would find itself); `None` takes any copy's.
    fn own_image(
        &self,
        table: TableId,
        key: &Key,
        row: Option<Row>,
        catalog: &Catalog,
        copy: Option<PartitionId>,
    ) -> Option<Row> {
        let Some(ops) = self.own_ops(table, key, copy) else {
            return row;
        };
        let name = catalog.table(table).map_or("?", |t| t.name.as_str());
        let mut image = fold(ops, row, name).ok().flatten();
        if let (Some((_, a)), Some(r)) = (&self.assign, image.as_mut()) {
            if a.table == table && &a.key == key {
                if let Some(v) = r.get_mut(a.column) {
                    *v = Value::Int(self.tmp + 1);
                }
            }
        }
        image
    }

    /// Whether a read of this row shows this transaction's temporary id in place of the id
    /// counter (the row it assigns its id on, [`Self::own_image`]).
    fn masks(&self, table: TableId, key: &Key) -> bool {
        matches!(&self.assign, Some((_, a)) if a.table == table && &a.key == key)
    }

    /// CF-4g: whether a handed row's newer version `f` differs from the version handed only where
    /// the procedure could not see it, so that it can be taken forward instead of the reader
    /// retrying. That is: the row is the one this transaction assigns its id on, every read
    /// that handed it showed the temporary id in place of the counter (none before the bump,
    /// no range read), the two versions differ in the counter column only, and this
    /// transaction's own writes to it (the bump) validate on the newer one too. Every value
    /// the procedure was handed, and every validation it saw succeed, is then what the newer
    /// version would have given.
    fn unseen_change(&self, f: &Fetched, part: PartitionId, catalog: &Catalog) -> bool {
        let k = (f.table, f.key.clone());
        let Some((_, a)) = &self.assign else { return false };
        if !self.masks(f.table, &f.key)
            || self.unmasked.contains(&k)
            || replicated(catalog, f.table)
            || self.index.in_handed_scan(&k, part)
        {
            return false;
        }
        let (Some(Some(old)), Some(new)) = (self.rows.get(&k), &f.row) else { return false };
        let same_elsewhere =
            old.len() == new.len() && old.iter().zip(new.iter()).enumerate().all(|(c, (x, y))| c == a.column || x == y);
        let own = self.own_ops(f.table, &f.key, Some(part)).into_iter().flatten();
        same_elsewhere && litmus_protocol::op::check_writes(own, Some(new), String::new).is_ok()
    }

    /// This transaction's buffered ops on a row (`copy`: as in [`Self::own_image`]).
    fn own_ops(&self, table: TableId, key: &Key, copy: Option<PartitionId>) -> Option<&Vec<OpKind>> {
        let parts = self.buffer.get(&(table, key.clone()))?;
        match copy {
            Some(p) => parts.get(p),
            None => parts.first(),
        }
    }

    /// Whether the write `kind` applies to the row as this transaction sees it ([`Self::own_image`]
    /// of `row`), checked without building that image: a validated write is only buffered, so
    /// a copy of the row (of TPC-C's STOCK, eleven shared strings) would be thrown away. A row
    /// whose counter shows the temporary id is checked on its image.
    fn check_write(
        &self,
        table: TableId,
        key: &Key,
        row: Option<Row>,
        kind: &OpKind,
        catalog: &Catalog,
        copy: Option<PartitionId>,
    ) -> Result<(), Error> {
        let name = || catalog.table(table).map_or_else(|_| "?".to_string(), |t| t.name.clone());
        if self.masks(table, key) {
            let image = self.own_image(table, key, row, catalog, copy);
            return litmus_protocol::op::write_image(kind, image, name).map(|_| ());
        }
        let own = self.own_ops(table, key, copy).into_iter().flatten();
        litmus_protocol::op::check_writes(own.chain([kind]), row.as_ref(), name)
    }
}

impl CoordfreeCoordinator {
    /// Transactions in flight (tests).
    pub fn in_flight(&self) -> usize {
        self.txns.len()
    }

    fn send_fetches(&mut self, txn: TxnId, ctx: &mut CoordCtx) -> bool {
        let Some(t) = self.txns.get_mut(&txn) else { return false };
        let served = &t.served;
        let part_of = |k: &(TableId, Key)| tracked_on(ctx.catalog, ctx.partitions, served, k);
        let wants = t.index.missing(&t.seen, &t.batch_keys, &t.scans, &part_of);
        let mut by_part: BTreeMap<PartitionId, Vec<Want>> = BTreeMap::new();
        for w in wants {
            // A replicated row is asked of the copy that was read (CF-4f).
            if let Some(p) = part_of(&(w.table, w.key.clone())) {
                by_part.entry(p).or_default().push(w);
            }
        }
        if by_part.is_empty() {
            return false;
        }
        for (part, wants) in by_part {
            let req = Request::Fetch { id: SubOpId { txn, op: FETCH_OP, part }, wants };
            ctx.send_to_partition(part, req.clone());
            t.fetch_waiting.insert(part, (req, ctx.now));
        }
        true
    }

    /// When every read of the batch is in: the second round if a read is fractured, else the
    /// results go to the procedure.
    fn batch_in(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get(&txn) else { return };
        if t.batch.iter().any(|r| r.result.is_none()) || !t.fetch_waiting.is_empty() {
            return;
        }
        if t.reading_too_long(ctx.now) {
            return self.refuse_batch(txn, TxnState::too_long(), ctx);
        }
        if t.fetched.is_empty() && self.send_fetches(txn, ctx) {
            return;
        }
        self.deliver(txn, ctx);
    }

    fn deliver(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&txn) else { return };
        for (part, f) in std::mem::take(&mut t.fetched) {
            t.patch(part, &f);
        }
        let batch = std::mem::take(&mut t.batch);
        let served = &t.served;
        let part_of = |k: &(TableId, Key)| tracked_on(ctx.catalog, ctx.partitions, served, k);
        t.index.hand_over(t.batch_keys.iter(), &t.scans, &t.seen, &part_of);
        t.batch_keys.clear();
        t.scans.clear();
        let mut batch = batch.into_iter().peekable();
        while let Some(r) = batch.next() {
            if r.pos.is_none() {
                let id = r.id;
                let result = t.settle(r, ctx.catalog);
                ctx.op_done(id, result);
                continue;
            }
            // A batched piece: its keys are side by side, and answer as one.
            let mut piece = vec![r];
            while let Some(next) = batch.next_if(|n| n.id == piece[0].id && n.pos.is_some()) {
                piece.push(next);
            }
            let id = piece[0].id;
            let result = if piece[0].write.is_some() {
                t.settle_writes(piece, ctx.catalog)
            } else {
                let mut rows = Vec::with_capacity(piece.len());
                let mut failed = None;
                for r in piece {
                    let pos = r.pos.expect("a piece's key");
                    match t.settle(r, ctx.catalog) {
                        Ok(PartResult::Row(row)) => rows.push((pos, row)),
                        Ok(other) => {
                            failed.get_or_insert(Error::Internal(format!("coordfree: a batched read gave {other:?}")));
                        }
                        Err(e) => {
                            failed.get_or_insert(e);
                        }
                    }
                }
                failed.map_or(Ok(PartResult::Many(rows)), Err)
            };
            ctx.op_done(id, result);
        }
    }

    /// CF-8: the batch's reads fail with `e` (a retryable abort); the procedure aborts.
    fn refuse_batch(&mut self, txn: TxnId, e: Error, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&txn) else { return };
        t.batch_keys.clear();
        t.scans.clear();
        t.fetch_waiting.clear();
        t.fetched.clear();
        let mut last = None;
        for r in std::mem::take(&mut t.batch) {
            if last.replace(r.id) != Some(r.id) {
                ctx.op_done(r.id, Err(e.clone()));
            }
        }
    }

    /// Drops a finished transaction's state, keeping its collections for a later one.
    fn forget(&mut self, txn: TxnId) {
        if let Some(t) = self.txns.remove(&txn) {
            self.keep_spare(t);
        }
    }

    fn keep_spare(&mut self, t: TxnState) {
        if self.spare.len() < SPARE_MAX {
            self.spare.extend(t.recycled());
        }
    }

    fn fail(&mut self, txn: TxnId, e: Error, ctx: &mut CoordCtx) {
        if let Some(mut t) = self.txns.remove(&txn) {
            if let Some(c) = t.commit.take() {
                for p in c.participants {
                    ctx.send_to_partition(p, Request::Abort { txn });
                }
            }
            self.keep_spare(t);
        }
        ctx.txn_done(txn, Err(e));
    }

    fn on_prepared(&mut self, from: PartitionId, txn: TxnId, result: Result<(), Error>, ctx: &mut CoordCtx) {
        let Some(c) = self.txns.get_mut(&txn).and_then(|t| t.commit.as_mut()) else { return };
        if c.phase != Phase::Preparing || !c.waiting.remove(&from) {
            return;
        }
        if let Err(e) = result {
            return self.fail(txn, e, ctx);
        }
        if !c.waiting.is_empty() {
            return;
        }
        c.last_sent = ctx.now;
        match c.id_partition {
            Some(p) => {
                c.phase = Phase::CommittingId;
                c.waiting = BTreeSet::from([p]);
                ctx.send_to_partition(p, Request::Commit { txn, ids: vec![] });
            }
            None => {
                c.phase = Phase::Committing;
                c.waiting = c.participants.iter().copied().collect();
                for &p in &c.participants {
                    ctx.send_to_partition(p, Request::Commit { txn, ids: vec![] });
                }
            }
        }
    }

    fn on_committed(&mut self, from: PartitionId, txn: TxnId, ids: Vec<(i64, i64)>, ctx: &mut CoordCtx) {
        let Some(c) = self.txns.get_mut(&txn).and_then(|t| t.commit.as_mut()) else { return };
        // CF-9: a lone participant answers its prepare with its commit (and the ids it assigned).
        let alone = c.phase == Phase::Preparing && c.participants == [from];
        if (c.phase == Phase::Preparing && !alone) || !c.waiting.remove(&from) {
            return;
        }
        if alone {
            c.ids = ids;
        } else if c.phase == Phase::CommittingId {
            c.ids = ids;
            c.phase = Phase::Committing;
            c.last_sent = ctx.now;
            c.waiting = c.participants.iter().copied().filter(|p| Some(*p) != c.id_partition).collect();
            for &p in &c.waiting {
                ctx.send_to_partition(p, Request::Commit { txn, ids: c.ids.clone() });
            }
        }
        if c.waiting.is_empty() {
            let ids = std::mem::take(&mut c.ids);
            if c.participants.len() > 1 {
                for &p in &c.participants {
                    self.done.entry(p).or_default().push(txn);
                }
            }
            self.forget(txn);
            if ids.is_empty() {
                ctx.txn_done(txn, Ok(()));
            } else {
                ctx.txn_done_assigned(txn, ids);
            }
        }
    }
}

impl CoordinatorEngine for CoordfreeCoordinator {
    fn begin(&mut self, txn: TxnId, opts: &TxnOptions, ctx: &mut CoordCtx) {
        let procedure = opts.procedure.as_ref().map_or_else(|| "an interactive transaction".into(), |(p, _)| p.clone());
        let mut t = self.spare.pop().unwrap_or_default();
        (t.tmp, t.procedure) = (tmp_id(txn), procedure);
        match &opts.coordination {
            Some(Coordination::Required { invariant, operation }) => {
                t.refused = Some(refusal(&t.procedure, invariant, operation));
            }
            Some(Coordination::SequentialId { table, column, invariant }) => {
                let decl = ctx.catalog.table_by_name(table).and_then(|s| Ok((s.id, s.column(column)?)));
                match decl {
                    Ok((table, column)) => t.seq = Some(SeqDecl { table, column, invariant: invariant.clone() }),
                    Err(e) => t.refused = Some(e.into()),
                }
            }
            Some(Coordination::Free) | None => {}
        }
        self.txns.insert(txn, t);
    }

    fn issue(&mut self, id: SubOpId, op: PartOp, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&id.txn) else {
            return ctx.op_done(id, Err(Error::Abort(AbortReason::Other("coordfree: transaction is gone".into()))));
        };
        if let Some(e) = &t.refused {
            return ctx.op_done(id, Err(e.clone()));
        }
        let op = match op.kind {
            OpKind::ReadMany { keys } => return t.issue_read_many(id, op.table, keys, ctx),
            OpKind::WriteMany { writes } => return t.issue_write_many(id, op.table, writes, ctx),
            kind => PartOp { table: op.table, kind },
        };
        if !op.kind.is_write() || matches!(op.kind, OpKind::Insert { .. } | OpKind::Update { .. }) {
            t.first_read.get_or_insert(ctx.now);
        }
        if !op.kind.is_write() {
            if let OpKind::Read { key, .. } = &op.kind {
                if let Some(result) = t.join(op.table, key, ctx.now) {
                    // CF-4a: read before; still checked with the batch against what was read since.
                    t.batch.push(BatchRead { id, pos: None, op, write: None, result: Some(result), sent: ctx.now });
                    return; // the batch closes at `issued_all`
                }
            }
            ctx.send_to_partition(id.part, Request::Read { id, op: op.clone() });
            t.batch.push(BatchRead { id, pos: None, op, write: None, result: None, sent: ctx.now });
            return;
        }
        let key = op.kind.key().expect("a point write").clone();
        if matches!(op.kind, OpKind::Update { .. }) && replicated(ctx.catalog, op.table) {
            return ctx.op_done(id, Err(replicated_update(ctx.catalog, op.table)));
        }
        if t.needs_row(&op.kind) {
            let cached = t.join(op.table, &key, ctx.now);
            let read = PartOp { table: op.table, kind: OpKind::Read { key, cols: litmus_protocol::op::ColMask::ALL } };
            if let Some(result) = cached {
                // CF-4a: validated against the row this transaction already read.
                let (write, result) = (Some(op.kind), Some(result));
                t.batch.push(BatchRead { id, pos: None, op: read, write, result, sent: ctx.now });
                return; // the batch closes at `issued_all`
            }
            ctx.send_to_partition(id.part, Request::Read { id, op: read.clone() });
            t.batch.push(BatchRead { id, pos: None, op: read, write: Some(op.kind), result: None, sent: ctx.now });
            return;
        }
        let result = t.buffer_write(id.part, op.table, key, op.kind);
        ctx.op_done(id, result.map(|()| PartResult::Done));
    }

    fn commit(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        let Some(t) = self.txns.get_mut(&txn) else {
            return ctx.txn_done(txn, Err(Error::Abort(AbortReason::Other("coordfree: transaction is gone".into()))));
        };
        if let Some(e) = t.refused.clone() {
            self.forget(txn);
            return ctx.txn_done(txn, Err(e));
        }
        if t.buffer.is_empty() {
            self.forget(txn);
            return ctx.txn_done(txn, Ok(()));
        }
        let id_partition = t.assign.as_ref().map(|(p, _)| *p);
        if let (Some(idp), Some(seq)) = (id_partition, &t.seq) {
            // The id can be assigned on one partition only if every write that carries it
            // lives there (§6.2: all coordination confined to a single server).
            let elsewhere = t
                .buffer
                .iter()
                .any(|((_, k), parts)| parts.iter().any(|(p, ops)| p != idp && contains_id(k, ops, t.tmp)));
            if elsewhere {
                let e = refusal(&t.procedure, &seq.invariant, "rows carrying the new id on another partition");
                self.forget(txn);
                return ctx.txn_done(txn, Err(e));
            }
        }
        let meta = Arc::new(WriteMeta::new(txn, t.buffer.keys().cloned().collect()));
        let mut writes: BTreeMap<PartitionId, Vec<KeyWrites>> = BTreeMap::new();
        let stamp = (ctx.now, txn);
        for ((table, key), parts) in std::mem::take(&mut t.buffer) {
            let lww = replicated(ctx.catalog, table).then_some(stamp);
            for (p, ops) in parts.0 {
                writes.entry(p).or_default().push(KeyWrites { table, key: key.clone(), ops, lww });
            }
        }
        let participants: Vec<PartitionId> = writes.keys().copied().collect();
        let mut prepares = BTreeMap::new();
        for (p, writes) in writes {
            let assign = t.assign.as_ref().filter(|(ap, _)| *ap == p).map(|(_, a)| a.clone());
            let req = Request::Prepare {
                txn,
                meta: meta.clone(),
                writes: writes.into(),
                assign,
                participants: participants.clone(),
                id_partition,
            };
            ctx.send_to_partition(p, req.clone());
            prepares.insert(p, req);
        }
        t.commit = Some(CommitState {
            phase: Phase::Preparing,
            waiting: participants.iter().copied().collect(),
            participants,
            id_partition,
            prepares,
            ids: vec![],
            last_sent: ctx.now,
        });
    }

    fn abort(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        // Nothing was prepared before commit: dropping the buffers is the whole abort.
        self.forget(txn);
        ctx.txn_done(txn, Ok(()));
    }

    fn on_reply(&mut self, from: PartitionId, reply: Payload, ctx: &mut CoordCtx) {
        let Ok(reply) = reply.decode::<Reply>() else { return };
        match reply {
            Reply::Read { id, result, at } => {
                let Some(t) = self.txns.get_mut(&id.txn) else { return };
                let Some(first) = t.batch.iter().position(|r| r.id == id && r.result.is_none()) else { return };
                if t.batch[first].pos.is_some() {
                    t.answer_piece(from, id, first, result);
                    return self.batch_in(id.txn, ctx);
                }
                let result = result.map(|(res, seen)| {
                    t.saw(from, seen);
                    let r = &t.batch[first];
                    if let (OpKind::Scan { start, end, limit }, PartResult::Rows(rows)) = (&r.op.kind, &res) {
                        let cut =
                            (rows.len() >= *limit as usize).then(|| rows.last().map(|(k, _)| k.clone())).flatten();
                        let read = (r.op.table, start.clone(), end.clone(), cut);
                        t.scans.push(ramp::Scanned { read, part: from, at });
                    }
                    res
                });
                t.batch[first].result = Some(result);
                self.batch_in(id.txn, ctx);
            }
            Reply::Fetch { id, found } => {
                let Some(t) = self.txns.get_mut(&id.txn) else { return };
                if t.fetch_waiting.remove(&id.part).is_none() {
                    return;
                }
                let found = match found {
                    Ok(found) => found,
                    Err(e) => return self.refuse_batch(id.txn, e, ctx),
                };
                let handed = |f: &Fetched| t.index.was_handed(&(f.table, f.key.clone()), from);
                if let Some(f) = found.iter().find(|f| handed(f) && !t.unseen_change(f, from, ctx.catalog)) {
                    // CF-4e: a key the procedure already has, at a version older than a writer it
                    // now reads, or a row a range read it already has did not return: fractured
                    // backwards, and the value cannot be taken back.
                    let e = format!(
                        "coordfree: a read of {} found an earlier read of the transaction fractured; retry",
                        f.table
                    );
                    return self.refuse_batch(id.txn, Error::Abort(AbortReason::Other(e)), ctx);
                }
                // CF-4g: the handed rows left are taken forward (the second round's patch
                // records the newer version as read).
                for f in &found {
                    let k = (f.table, f.key.clone());
                    if t.index.was_handed(&k, from) {
                        t.index.take_forward(&k, &f.seen);
                        t.rows.insert(k, f.row.clone());
                    }
                }
                t.fetched.extend(found.into_iter().map(|f| (from, f)));
                if t.fetch_waiting.is_empty() {
                    if t.reading_too_long(ctx.now) {
                        return self.refuse_batch(id.txn, TxnState::too_long(), ctx);
                    }
                    self.deliver(id.txn, ctx);
                }
            }
            Reply::Prepared { txn, result } => self.on_prepared(from, txn, result, ctx),
            Reply::Committed { txn, ids } => self.on_committed(from, txn, ids, ctx),
            Reply::Aborted { txn } => {
                if self.txns.get(&txn).is_some_and(|t| t.commit.is_some()) {
                    self.forget(txn);
                    ctx.txn_done(txn, Err(Error::Abort(AbortReason::Other("coordfree: a participant aborted".into()))));
                }
            }
        }
    }

    /// Nothing here waits forever on a lost message: unanswered reads, second rounds, prepares
    /// and commits are re-sent (all idempotent at the partition).
    fn on_tick(&mut self, ctx: &mut CoordCtx) {
        let now = ctx.now;
        if now.saturating_sub(self.done_sent) >= DONE_EVERY {
            self.done_sent = now;
            for (p, txns) in std::mem::take(&mut self.done) {
                ctx.send_to_partition(p, Request::Done { txns });
            }
        }
        for (txn, t) in &mut self.txns {
            // The unanswered keys of a batched piece go again as one request.
            let mut many: Vec<(SubOpId, TableId, PieceKeys)> = Vec::new();
            for r in t.batch.iter_mut().filter(|r| r.result.is_none() && now.saturating_sub(r.sent) >= RESEND_AFTER) {
                r.sent = now;
                match (r.pos, r.op.kind.key()) {
                    (Some(pos), Some(key)) => match many.last_mut() {
                        Some((id, _, keys)) if *id == r.id => keys.push((pos, key.clone())),
                        _ => many.push((r.id, r.op.table, vec![(pos, key.clone())])),
                    },
                    _ => ctx.send_to_partition(r.id.part, Request::Read { id: r.id, op: r.op.clone() }),
                }
            }
            for (id, table, keys) in many {
                ctx.send_to_partition(
                    id.part,
                    Request::Read { id, op: PartOp { table, kind: OpKind::ReadMany { keys } } },
                );
            }
            for (p, (req, sent)) in &mut t.fetch_waiting {
                if now.saturating_sub(*sent) >= RESEND_AFTER {
                    *sent = now;
                    ctx.send_to_partition(*p, req.clone());
                }
            }
            if let Some(c) = &mut t.commit {
                if now.saturating_sub(c.last_sent) < RESEND_AFTER {
                    continue;
                }
                c.last_sent = now;
                for &p in &c.waiting {
                    let req = match c.phase {
                        Phase::Preparing => c.prepares[&p].clone(),
                        Phase::CommittingId => Request::Commit { txn: *txn, ids: vec![] },
                        Phase::Committing => Request::Commit { txn: *txn, ids: c.ids.clone() },
                    };
                    ctx.send_to_partition(p, req);
                }
            }
        }
    }

    fn apply(&mut self, _record: &[u8]) -> Result<(), Error> {
        Ok(()) // the coordinator logs nothing: partitions finish what a dead coordinator began
    }

    fn grouped_issue(&mut self) -> Option<&mut dyn GroupedIssue> {
        Some(self)
    }
}

impl GroupedIssue for CoordfreeCoordinator {
    /// Everything the procedure issued together is one batch (CF-4): reads answered from the
    /// transaction's own cache (CF-4a) wait here for the rest of it instead of closing a batch
    /// of one each (which ran the second-round check once per cached read).
    fn issued_all(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        if self.txns.get(&txn).is_some_and(|t| !t.batch.is_empty()) {
            self.batch_in(txn, ctx);
        }
    }
}

#[cfg(test)]
mod spare_tests {
    use super::super::messages::Seen;
    use super::*;
    use litmus_core::{NodeId, Timestamp};

    fn key_of(i: usize) -> (TableId, Key) {
        (TableId(0), Key::ints(&[i as i64]))
    }

    fn read(t: &mut TxnState, keys: usize) {
        for i in 0..keys {
            t.seen.insert(key_of(i), Seen { ts: Timestamp(1), writer: None });
            t.rows.insert(key_of(i), None);
        }
    }

    #[test]
    fn a_reused_state_starts_empty_with_room_for_a_like_transaction() {
        let mut t = TxnState { tmp: -7, procedure: "p".into(), ..TxnState::default() };
        read(&mut t, 30);
        let r = t.recycled().expect("small enough to keep");
        assert!(r.seen.is_empty() && r.rows.is_empty());
        assert!(r.seen.capacity() >= 30, "the room is kept");
        assert_eq!((r.tmp, r.procedure.as_str()), (0, ""), "nothing else carried over");
    }

    /// A large read set, or a read index of many writers (a consistency check reading every
    /// order line), is dropped: emptying it would cost every later transaction its capacity.
    #[test]
    fn a_state_grown_past_the_cap_is_not_kept() {
        let mut t = TxnState::default();
        read(&mut t, SPARE_CAPACITY_MAX + 1);
        assert!(t.recycled().is_none());
        let mut t = TxnState::default();
        for i in 0..=SPARE_CAPACITY_MAX as u64 {
            let txn = TxnId { node: NodeId(1), epoch: 1, seq: i };
            let writer = Arc::new(WriteMeta::new(txn, vec![key_of(i as usize)]));
            t.index.add(&Seen { ts: Timestamp(1), writer: Some(writer) }, Some(PartitionId(0)));
        }
        assert!(t.recycled().is_none(), "the read index counts too");
    }
}
