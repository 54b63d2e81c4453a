//! Operations of the transaction context, their validation and their routing.
//!
//! A client or a procedure names tables and columns ([`Op`]). The coordinator resolves an op
//! against the catalog ([`resolve`]) before anything is sent: unknown tables and columns, wrong
//! types, NULL keys and oversized values are rejected here with a typed error, so bad input never
//! reaches a partition and never half-applies. A resolved op is split into one [`PartOp`] per
//! target partition; the results are merged back ([`merge`]).

use litmus_core::formula::ColumnUpdate;
use litmus_core::{limits, Catalog, Error, Formula, InvalidInput, Key, PartitionId, Row, TableId, Value};
use serde::{Deserialize, Serialize};

/// An operation as written by a client or a procedure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// Point read by full primary key.
    Read { table: String, key: Vec<Value> },
    /// Point reads of many keys of one table, answered in the order of `keys` (a missing row is
    /// `None`): one request per partition holding any of them instead of one per key. Taken
    /// natively by engines that declare [`crate::Capabilities::batches`];
    /// [`crate::Ctx::read_many`] falls back to single reads elsewhere.
    ReadMany { table: String, keys: Vec<Vec<Value>> },
    /// Point read of some columns (`SELECT c1, c2 … WHERE key = …`): the row comes back at
    /// full width with the columns not named read as NULL. A BASE transaction's read of
    /// columns that no unfinished BASE write touched does not depend on that write
    /// (LK-6a per column, [`ColMask`]).
    ReadColumns { table: String, key: Vec<Value>, columns: Vec<String> },
    /// Range read: keys `>= start` and `< end` (both key prefixes). With `end: None` every key
    /// that starts with `start`. At most `limit` rows, in key order.
    Scan { table: String, start: Vec<Value>, end: Option<Vec<Value>>, limit: u32 },
    /// Insert or replace a whole row.
    Write { table: String, row: Row },
    /// Insert a row; fails with `DuplicateKey` if the key exists.
    Insert { table: String, row: Row },
    /// Delete by key (deleting a missing key is not an error).
    Delete { table: String, key: Vec<Value> },
    /// Apply formulas to columns of an existing row; fails with `KeyNotFound` if absent.
    Update { table: String, key: Vec<Value>, updates: Vec<(String, Formula)> },
    /// Point writes (`Write`, `Insert`, `Delete`, `Update`) of one table, applied in order as if
    /// sent one by one, but in one request per partition holding any of their keys. Each
    /// partition's share applies whole or not at all: one write that fails (a duplicate key, a
    /// missing row) fails it with that write's error. Taken natively by engines that declare
    /// [`crate::Capabilities::batches`]; [`crate::Ctx::write_many`] falls back to single writes
    /// elsewhere.
    WriteMany { table: String, writes: Vec<Op> },
    /// One page of the range read `start..end` (as in [`Op::Scan`]): the rows after `after` (a
    /// [`crate::page::Page::resume`] key; `None` from the start), at most `rows_max` rows and
    /// about `bytes_max` bytes of them, answered as [`OpResult::Page`] (see [`crate::page`]).
    /// Inside a one-round fragment it reads the fragment's partition's share of the range.
    /// (The last variant, so the older variants keep their encoding.)
    ScanPage {
        table: String,
        start: Vec<Value>,
        end: Option<Vec<Value>>,
        after: Option<Key>,
        rows_max: u32,
        bytes_max: u32,
    },
    /// Point read by full primary key, declaring that the transaction will write the row
    /// (`SELECT ... FOR UPDATE`, the read of an `UPDATE` or `DELETE`). An engine that declares
    /// [`crate::Capabilities::reads_for_update`] takes the write lock at once, so two
    /// transactions that read and then update one row queue on it instead of both taking a
    /// read lock and deadlocking on the upgrade; any other engine gets a plain [`Op::Read`]
    /// (the coordinator rewrites it). Answered as [`Op::Read`] is. (After `ScanPage`, so the
    /// older variants keep their encoding.)
    ReadForUpdate { table: String, key: Vec<Value> },
}

impl Op {
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            Op::Read { .. }
                | Op::ReadColumns { .. }
                | Op::ReadMany { .. }
                | Op::Scan { .. }
                | Op::ScanPage { .. }
                | Op::ReadForUpdate { .. }
        )
    }
}

/// Most keys one [`Op::ReadMany`] may name, and most writes one [`Op::WriteMany`] may hold.
pub const BATCH_LEN_MAX: usize = 4096;

/// A set of a table's columns, one bit per column; column 63 and every later one share the
/// last bit, so a set naming one of them stands for all of them (a superset: sound for
/// conflicts, and a read of such a set returns all of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ColMask(pub u64);

impl ColMask {
    /// Every column.
    pub const ALL: ColMask = ColMask(u64::MAX);

    fn bit(column: usize) -> u64 {
        1 << column.min(63)
    }

    /// The set of `columns` (indexes in the table's schema).
    pub fn of(columns: impl IntoIterator<Item = usize>) -> ColMask {
        ColMask(columns.into_iter().fold(0, |m, c| m | Self::bit(c)))
    }

    pub fn has(self, column: usize) -> bool {
        self.0 & Self::bit(column) != 0
    }

    pub fn intersects(self, other: ColMask) -> bool {
        self.0 & other.0 != 0
    }

    /// `self ⊇ other`.
    pub fn contains(self, other: ColMask) -> bool {
        self.0 & other.0 == other.0
    }

    /// `row` with the columns outside this set read as NULL.
    pub fn project(self, mut row: Row) -> Row {
        if self != ColMask::ALL {
            for (i, v) in row.iter_mut().enumerate() {
                if !self.has(i) {
                    *v = Value::Null;
                }
            }
        }
        row
    }
}

/// The result of an operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum OpResult {
    Row(Option<Row>),
    Rows(Vec<Row>),
    Done,
    /// An [`Op::ReadMany`]'s rows, in the order of its keys.
    Many(Vec<Option<Row>>),
    /// An [`Op::ScanPage`]'s rows and where to resume.
    Page(crate::page::Page),
}

/// The resolved, validated body of an operation, as sent to a partition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum OpKind {
    /// A point read of the columns in `cols` (others may come back, the caller projects).
    Read {
        key: Key,
        cols: ColMask,
    },
    Scan {
        start: Key,
        end: Option<Key>,
        limit: u32,
    },
    Write {
        key: Key,
        row: Row,
    },
    Insert {
        key: Key,
        row: Row,
    },
    Delete {
        key: Key,
    },
    Update {
        key: Key,
        updates: Vec<ColumnUpdate>,
    },
    /// Point reads of whole rows; each key with its position in the [`Op::ReadMany`].
    ReadMany {
        keys: Vec<(u32, Key)>,
    },
    /// Point writes of the op's table, in order (each a `Write`, `Insert`, `Delete` or `Update`).
    WriteMany {
        writes: Vec<OpKind>,
    },
    /// [`Op::ReadForUpdate`]: a point read of the whole row under the lock a write of it would
    /// take. Sent only to engines that declare [`crate::Capabilities::reads_for_update`]
    /// (the coordinator turns it into [`OpKind::Read`] for the others).
    ReadForUpdate {
        key: Key,
    },
}

/// What merging an operation's pieces needs of it ([`merge`]): its shape, without the keys and
/// rows a clone of the whole [`OpKind`] would copy for every operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A point read, projected on `cols` when merged.
    Read {
        cols: ColMask,
    },
    Scan {
        limit: u32,
    },
    /// An [`Op::ScanPage`] ([`crate::page::merge_page`]).
    Page {
        rows_max: u32,
        bytes_max: u32,
    },
    Write,
    /// [`OpKind::ReadMany`] of `n` keys in all.
    ReadMany {
        n: u32,
    },
}

impl OpKind {
    pub fn shape(&self) -> Shape {
        match self {
            OpKind::Read { cols, .. } => Shape::Read { cols: *cols },
            OpKind::ReadForUpdate { .. } => Shape::Read { cols: ColMask::ALL },
            OpKind::Scan { limit, .. } => Shape::Scan { limit: *limit },
            // Of the whole operation (`Resolved::pieces` takes it before splitting).
            OpKind::ReadMany { keys } => Shape::ReadMany { n: keys.len() as u32 },
            _ => Shape::Write,
        }
    }
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            OpKind::Read { .. } | OpKind::Scan { .. } | OpKind::ReadMany { .. } | OpKind::ReadForUpdate { .. }
        )
    }
    /// The operation with a read for update made a plain read: what an engine without
    /// [`crate::Capabilities::reads_for_update`] is sent.
    pub fn without_update_intent(self) -> OpKind {
        match self {
            OpKind::ReadForUpdate { key } => OpKind::Read { key, cols: ColMask::ALL },
            other => other,
        }
    }
    /// The key of a point operation.
    pub fn key(&self) -> Option<&Key> {
        match self {
            OpKind::Read { key, .. }
            | OpKind::ReadForUpdate { key }
            | OpKind::Write { key, .. }
            | OpKind::Insert { key, .. }
            | OpKind::Delete { key }
            | OpKind::Update { key, .. } => Some(key),
            OpKind::Scan { .. } | OpKind::ReadMany { .. } | OpKind::WriteMany { .. } => None,
        }
    }
    /// How many keys the operation names: one for a point operation or a scan (its rows are
    /// counted when they come back, [`PartResult::rows`]), each key of a batch.
    pub fn keys(&self) -> usize {
        match self {
            OpKind::ReadMany { keys } => keys.len(),
            OpKind::WriteMany { writes } => writes.len(),
            _ => 1,
        }
    }
}

/// One partition's share of an operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartOp {
    pub table: TableId,
    pub kind: OpKind,
}

/// A partition's answer to a [`PartOp`]. Scans return keys so results can be merged in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PartResult {
    Row(Option<Row>),
    Rows(Vec<(Key, Row)>),
    Done,
    /// A piece of an [`OpKind::ReadMany`]: each key's position and row.
    Many(Vec<(u32, Option<Row>)>),
}

impl PartResult {
    /// How many rows came back (a point read's row or its absence counts one, as does a
    /// write's `Done`).
    pub fn rows(&self) -> usize {
        match self {
            PartResult::Rows(rows) => rows.len(),
            PartResult::Many(rows) => rows.len(),
            PartResult::Row(_) | PartResult::Done => 1,
        }
    }
}

/// Which partitions an operation touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Targets {
    One(PartitionId),
    /// A read of a replicated table: any one copy will do.
    AnyReplica,
    /// A write of a replicated table, or a range read not confined to one partition.
    All,
    /// An [`OpKind::ReadMany`] or [`OpKind::WriteMany`] over several partitions: the partition
    /// of each key or write, in order.
    Split(Vec<PartitionId>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub op: PartOp,
    pub targets: Targets,
    /// How the pieces merge when not by the shape of `op.kind` (an [`Op::ScanPage`] travels as
    /// a scan and merges as a page).
    pub merge_as: Option<Shape>,
}

impl Resolved {
    /// The shape the operation's pieces merge by.
    pub fn shape(&self) -> Shape {
        self.merge_as.unwrap_or_else(|| self.op.kind.shape())
    }

    /// The concrete partitions to contact; `preferred` picks the copy of a replicated read.
    pub fn partitions(&self, partitions: u32, preferred: PartitionId) -> Vec<PartitionId> {
        self.targets.partitions(partitions, preferred)
    }

    /// The operation each target partition is sent, in partition order, and the shape its
    /// pieces merge by. A split read sends each partition its own keys; anything else goes
    /// whole to every target.
    pub fn pieces(self, partitions: u32, preferred: PartitionId) -> (Shape, Vec<(PartitionId, PartOp)>) {
        let shape = self.shape();
        let Resolved { op, targets, .. } = self;
        let table = op.table;
        let (op, parts) = match (targets, op.kind) {
            (Targets::Split(of_key), OpKind::ReadMany { keys }) => {
                let by_part = group(of_key, keys);
                return (
                    shape,
                    by_part.map(|(p, keys)| (p, PartOp { table, kind: OpKind::ReadMany { keys } })).collect(),
                );
            }
            (Targets::Split(of_write), OpKind::WriteMany { writes }) => {
                let by_part = group(of_write, writes);
                let pieces = by_part.map(|(p, writes)| (p, PartOp { table, kind: OpKind::WriteMany { writes } }));
                return (shape, pieces.collect());
            }
            (targets, kind) => (PartOp { table, kind }, targets.partitions(partitions, preferred)),
        };
        let last = parts.len().saturating_sub(1);
        let mut op = Some(op);
        let pieces = parts
            .into_iter()
            .enumerate()
            // The last piece takes the op itself: a clone per piece but one.
            .map(|(i, p)| (p, if i == last { op.take().expect("taken once") } else { op.clone().expect("present") }))
            .collect();
        (shape, pieces)
    }
}

impl Targets {
    /// The partitions these targets name, in partition order, each once.
    pub fn partitions(&self, partitions: u32, preferred: PartitionId) -> Vec<PartitionId> {
        match self {
            Targets::One(p) => vec![*p],
            Targets::AnyReplica => vec![preferred],
            Targets::All => (0..partitions).map(PartitionId).collect(),
            Targets::Split(parts) => {
                let mut parts = parts.clone();
                parts.sort_unstable();
                parts.dedup();
                parts
            }
        }
    }
}

/// `items` grouped by the partition beside each, in partition order, each group in order.
fn group<T>(parts: Vec<PartitionId>, items: Vec<T>) -> impl Iterator<Item = (PartitionId, Vec<T>)> {
    let mut by_part: std::collections::BTreeMap<PartitionId, Vec<T>> = Default::default();
    for (p, item) in parts.into_iter().zip(items) {
        by_part.entry(p).or_default().push(item);
    }
    by_part.into_iter()
}

/// The row a point write leaves behind, given the row it finds (`current`, `None` if absent):
/// the one definition of the write semantics every engine applies.
///
/// * `Write` replaces (or creates) the row;
/// * `Insert` fails with `DuplicateKey` if the row exists;
/// * `Update` applies its formulas, failing with `KeyNotFound` if the row is absent or with the
///   formula's error (overflow, wrong type), changing nothing;
/// * `Delete` leaves no row (`Ok(None)`; deleting a missing row is not an error — callers that
///   want to skip the no-op compare with `current`).
///
/// `table` names the table in errors; it is only called on an error.
pub fn write_image(kind: &OpKind, current: Option<Row>, table: impl FnOnce() -> String) -> Result<Option<Row>, Error> {
    match kind {
        OpKind::Write { row, .. } => Ok(Some(row.clone())),
        OpKind::Insert { row, .. } => match current {
            Some(_) => Err(InvalidInput::DuplicateKey(table()).into()),
            None => Ok(Some(row.clone())),
        },
        OpKind::Delete { .. } => Ok(None),
        OpKind::Update { updates, .. } => {
            let mut row = current.ok_or_else(|| InvalidInput::KeyNotFound(table()))?;
            litmus_core::formula::apply_updates(&mut row, updates)?;
            Ok(Some(row))
        }
        OpKind::Read { .. }
        | OpKind::ReadForUpdate { .. }
        | OpKind::Scan { .. }
        | OpKind::ReadMany { .. }
        | OpKind::WriteMany { .. } => Err(Error::Internal(format!("write_image of a read or a batch: {kind:?}"))),
    }
}

/// Whether `ops`, applied in order on top of `current` (`None`: no row), would succeed: the
/// checks and errors of [`write_image`] over each op in turn, without building the image. No
/// row is copied: an update's new values are staged per column, and a later op sees them, as it
/// would see them in the image. For a caller that only validates (a row of many string columns
/// costs an allocation and a reference count per column to copy).
pub fn check_writes<'a>(
    ops: impl IntoIterator<Item = &'a OpKind>,
    current: Option<&'a Row>,
    table: impl Fn() -> String,
) -> Result<(), Error> {
    let mut base = current;
    let mut staged: Vec<(usize, Value)> = Vec::new();
    for op in ops {
        match op {
            OpKind::Write { row, .. } | OpKind::Insert { row, .. } => {
                if matches!(op, OpKind::Insert { .. }) && base.is_some() {
                    return Err(InvalidInput::DuplicateKey(table()).into());
                }
                base = Some(row);
                staged.clear();
            }
            OpKind::Delete { .. } => {
                base = None;
                staged.clear();
            }
            OpKind::Update { updates, .. } => {
                let row = base.ok_or_else(|| InvalidInput::KeyNotFound(table()))?;
                litmus_core::formula::stage_updates(row, updates, &mut staged)?;
            }
            OpKind::Read { .. }
            | OpKind::ReadForUpdate { .. }
            | OpKind::Scan { .. }
            | OpKind::ReadMany { .. }
            | OpKind::WriteMany { .. } => {
                return Err(Error::Internal(format!("check_writes of a read or a batch: {op:?}")));
            }
        }
    }
    Ok(())
}

/// The rows an [`OpKind::WriteMany`]'s writes leave behind, in order, each write seeing the
/// ones before it (`current` gives the row before the batch): `(key, image)` per write, or the
/// first write's error — then nothing may be applied.
pub fn write_images(
    writes: &[OpKind],
    mut current: impl FnMut(&Key) -> Option<Row>,
    table: impl Fn() -> String,
) -> Result<Vec<(Key, Option<Row>)>, Error> {
    /// Up to this many writes, an earlier image of a key is found by scanning the images
    /// (a TPC-C batch holds 5 to 15 writes, and a map built for it cost more than the scan).
    const SCAN_MAX: usize = 16;
    let mut images: Vec<(Key, Option<Row>)> = Vec::with_capacity(writes.len());
    // The latest image of each key written so far: a batch may hold thousands of writes.
    let mut latest: litmus_core::hash::FxHashMap<&Key, usize> = Default::default();
    for w in writes {
        let key = w.key().ok_or_else(|| Error::Internal(format!("not a point write in a batch: {w:?}")))?;
        let earlier = if writes.len() <= SCAN_MAX {
            images.iter().rposition(|(k, _)| k == key)
        } else {
            latest.get(key).copied()
        };
        let before = match earlier {
            Some(i) => images[i].1.clone(),
            None => current(key),
        };
        let image = write_image(w, before, &table)?;
        if writes.len() > SCAN_MAX {
            latest.insert(key, images.len());
        }
        images.push((key.clone(), image));
    }
    Ok(images)
}

/// A range read over a store overlaid with a transaction's own uncommitted writes (`own`, in
/// key order; `None` is a delete): the store's rows, with own writes replacing, adding and
/// removing rows, at most `limit`. `stored` must hold up to `limit + own.len()` rows of the range
/// so that deletes cannot starve the result.
pub fn overlay_scan(stored: Vec<(Key, Row)>, own: Vec<(Key, Option<Row>)>, limit: usize) -> Vec<(Key, Row)> {
    let mut rows: std::collections::BTreeMap<Key, Row> = stored.into_iter().collect();
    for (k, r) in own {
        match r {
            Some(r) => rows.insert(k, r),
            None => rows.remove(&k),
        };
    }
    rows.into_iter().take(limit).collect()
}

/// A batch holds 1 to [`BATCH_LEN_MAX`] keys or writes.
fn check_batch_len(what: &str, len: usize) -> Result<(), InvalidInput> {
    if (1..=BATCH_LEN_MAX).contains(&len) {
        return Ok(());
    }
    let expected = if len == 0 { 1 } else { BATCH_LEN_MAX };
    Err(InvalidInput::WrongArity { what: what.into(), expected, got: len })
}

/// The table an operation names.
pub fn op_table(op: &Op) -> &str {
    match op {
        Op::Read { table, .. }
        | Op::ReadColumns { table, .. }
        | Op::ReadMany { table, .. }
        | Op::Scan { table, .. }
        | Op::ScanPage { table, .. }
        | Op::Write { table, .. }
        | Op::Insert { table, .. }
        | Op::Delete { table, .. }
        | Op::Update { table, .. }
        | Op::WriteMany { table, .. }
        | Op::ReadForUpdate { table, .. } => table,
    }
}

/// Validates `op` against the catalog and routes it. Never panics on bad input.
pub fn resolve(catalog: &Catalog, partitions: u32, op: &Op) -> Result<Resolved, Error> {
    let single = |op: PartOp, targets: Targets| Resolved { op, targets, merge_as: None };
    // A replicated table's row is on every copy: a read goes to any one, a write to all.
    let writes_replicated = |targets: Targets| match targets {
        Targets::AnyReplica => Targets::All,
        t => t,
    };
    let resolved = match op {
        Op::Read { table, key } => {
            let (table, key, targets) = resolve_point(catalog, partitions, table, key)?;
            single(PartOp { table, kind: OpKind::Read { key, cols: ColMask::ALL } }, targets)
        }
        Op::ReadForUpdate { table, key } => {
            // A replicated table's row is locked on the first partition's copy, the same for
            // every coordinator: two readers for update of it meet there (on copies of their
            // own they would both lock and then deadlock writing each other's), and every
            // write of it goes to every copy, so it meets the lock too.
            let (table, key, targets) = resolve_point(catalog, partitions, table, key)?;
            let targets = match targets {
                Targets::AnyReplica => Targets::One(PartitionId(0)),
                t => t,
            };
            single(PartOp { table, kind: OpKind::ReadForUpdate { key } }, targets)
        }
        Op::ReadColumns { table: name, key, columns } => {
            let (table, key, targets) = resolve_point(catalog, partitions, name, key)?;
            let schema = catalog.table(table)?;
            let cols = ColMask::of(columns.iter().map(|c| schema.column(c)).collect::<Result<Vec<_>, _>>()?);
            single(PartOp { table, kind: OpKind::Read { key, cols } }, targets)
        }
        Op::ReadMany { table, keys } => resolve_read_many(catalog, partitions, table, keys)?,
        Op::WriteMany { table, writes } => resolve_write_many(catalog, partitions, table, writes)?,
        Op::Delete { table, key } => {
            let (table, key, targets) = resolve_point(catalog, partitions, table, key)?;
            single(PartOp { table, kind: OpKind::Delete { key } }, writes_replicated(targets))
        }
        Op::Update { table: name, key, updates } => {
            let (table, key, targets) = resolve_point(catalog, partitions, name, key)?;
            let schema = catalog.table(table)?;
            let updates = updates
                .iter()
                .map(|(col, f)| Ok(ColumnUpdate::new(schema.column(col)?, f.clone())))
                .collect::<Result<Vec<_>, InvalidInput>>()?;
            schema.validate_updates(&updates)?;
            single(PartOp { table, kind: OpKind::Update { key, updates } }, writes_replicated(targets))
        }
        Op::Write { table, row } | Op::Insert { table, row } => {
            let t = catalog.table_by_name(table)?;
            t.validate_row(row)?;
            let key_vals = t.key_values(row);
            let key = Key::encode(&key_vals)?;
            let targets = match t.partition_of(&key_vals, partitions) {
                Some(p) => Targets::One(p),
                None => Targets::All,
            };
            let kind = if matches!(op, Op::Write { .. }) {
                OpKind::Write { key, row: row.clone() }
            } else {
                OpKind::Insert { key, row: row.clone() }
            };
            single(PartOp { table: t.id, kind }, targets)
        }
        Op::ScanPage { table, start, end, after, rows_max, bytes_max } => {
            let (rows_max, bytes_max) = crate::page::clamp(*rows_max, *bytes_max);
            let range = Op::Scan { table: table.clone(), start: start.clone(), end: end.clone(), limit: rows_max };
            let Resolved { op, targets, .. } = resolve(catalog, partitions, &range)?;
            let kind = crate::page::resume_from(op.kind, after.as_ref());
            Resolved {
                op: PartOp { table: op.table, kind },
                targets,
                merge_as: Some(Shape::Page { rows_max, bytes_max }),
            }
        }
        Op::Scan { table, start, end, limit } => {
            resolve_scan(catalog, partitions, table, start, end.as_deref(), *limit)?
        }
    };
    Ok(resolved)
}

/// One key of one table: the table, the encoded key and where it lives (any copy of a
/// replicated table).
fn resolve_point(
    catalog: &Catalog,
    partitions: u32,
    table: &str,
    key: &[Value],
) -> Result<(TableId, Key, Targets), Error> {
    let t = catalog.table_by_name(table)?;
    t.validate_key(key, false)?;
    let k = Key::encode(key)?;
    let targets = match t.partition_of(key, partitions) {
        Some(p) => Targets::One(p),
        None => Targets::AnyReplica,
    };
    Ok((t.id, k, targets))
}

/// Many keys of one table: one piece per partition they fall on.
fn resolve_read_many(catalog: &Catalog, partitions: u32, name: &str, keys: &[Vec<Value>]) -> Result<Resolved, Error> {
    check_batch_len("keys of a read_many", keys.len())?;
    let t = catalog.table_by_name(name)?;
    let mut encoded = Vec::with_capacity(keys.len());
    let mut of_key = Vec::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        t.validate_key(key, false)?;
        encoded.push((i as u32, Key::encode(key)?));
        of_key.push(t.partition_of(key, partitions));
    }
    let targets = match of_key.first().copied().flatten() {
        None => Targets::AnyReplica, // a replicated table: every key is on every copy
        Some(first) if of_key.iter().all(|p| *p == Some(first)) => Targets::One(first),
        Some(_) => Targets::Split(of_key.into_iter().map(|p| p.expect("a partitioned table")).collect()),
    };
    Ok(Resolved { op: PartOp { table: t.id, kind: OpKind::ReadMany { keys: encoded } }, targets, merge_as: None })
}

/// Many point writes of one table, each resolved as on its own; one piece per partition.
fn resolve_write_many(catalog: &Catalog, partitions: u32, name: &str, writes: &[Op]) -> Result<Resolved, Error> {
    check_batch_len("writes of a write_many", writes.len())?;
    let t = catalog.table_by_name(name)?;
    let (mut kinds, mut of_write, mut everywhere) = (Vec::with_capacity(writes.len()), vec![], false);
    for w in writes {
        let point_write = matches!(w, Op::Write { .. } | Op::Insert { .. } | Op::Delete { .. } | Op::Update { .. });
        if !point_write || op_table(w) != name {
            let (what, expected) = ("operation of a write_many".to_string(), format!("a point write of {name:?}"));
            return Err(InvalidInput::WrongType { what, expected, got: format!("{w:?}") }.into());
        }
        let r = resolve(catalog, partitions, w)?;
        match r.targets {
            Targets::One(p) => of_write.push(p),
            _ => everywhere = true, // a replicated table: every copy takes every write
        }
        kinds.push(r.op.kind);
    }
    let targets = match of_write.first() {
        _ if everywhere => Targets::All,
        Some(&first) if of_write.iter().all(|p| *p == first) => Targets::One(first),
        _ => Targets::Split(of_write),
    };
    Ok(Resolved { op: PartOp { table: t.id, kind: OpKind::WriteMany { writes: kinds } }, targets, merge_as: None })
}

/// A range read: its bounds checked and encoded, its limit bounded; it stays on one partition
/// when both bounds share the partition prefix.
fn resolve_scan(
    catalog: &Catalog,
    partitions: u32,
    table: &str,
    start: &[Value],
    end: Option<&[Value]>,
    limit: u32,
) -> Result<Resolved, Error> {
    let t = catalog.table_by_name(table)?;
    t.validate_key(start, true)?;
    if let Some(end) = end {
        t.validate_key(end, true)?;
    }
    if limit as usize > limits::SCAN_ROWS_MAX {
        return Err(InvalidInput::Oversized {
            what: "scan limit".into(),
            size: limit as usize,
            limit: limits::SCAN_ROWS_MAX,
        }
        .into());
    }
    let start_key = Key::encode(start)?;
    let end_key = match end {
        Some(e) => Some(Key::encode(e)?),
        None => start_key.prefix_end(),
    };
    let targets = match &t.partitioning {
        litmus_core::Partitioning::Replicated => Targets::AnyReplica,
        litmus_core::Partitioning::KeyPrefix { prefix_len } => {
            let same_prefix = match end {
                None => start.len() >= *prefix_len,
                Some(e) => {
                    start.len() >= *prefix_len && e.len() >= *prefix_len && start[..*prefix_len] == e[..*prefix_len]
                }
            };
            if same_prefix {
                Targets::One(t.partition_of(start, partitions).expect("partitioned table"))
            } else {
                Targets::All
            }
        }
    };
    Ok(Resolved {
        op: PartOp { table: t.id, kind: OpKind::Scan { start: start_key, end: end_key, limit } },
        targets,
        merge_as: None,
    })
}

/// Merges per-partition results of one op into the op's result. Scans are merged in key order
/// and cut to the limit; replicated writes must have succeeded everywhere (the caller checks
/// errors before merging). A partition's answer of the wrong kind, or a batch answer naming a
/// key the batch did not hold (a faulty or mismatched peer on the wire), is a typed
/// [`InvalidInput::MalformedFrame`] error, never a panic.
pub fn merge(shape: Shape, mut parts: Vec<PartResult>) -> Result<OpResult, Error> {
    let malformed = |what: &str, got: &dyn std::fmt::Debug| -> Error {
        InvalidInput::MalformedFrame(format!("a partition answered a {what} with {got:?}")).into()
    };
    Ok(match shape {
        Shape::Scan { limit } => {
            let mut rows: Vec<(Key, Row)> = Vec::new();
            for part in parts.drain(..) {
                match part {
                    PartResult::Rows(r) => rows.extend(r),
                    other => return Err(malformed("scan", &other)),
                }
            }
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            rows.truncate(limit as usize);
            OpResult::Rows(rows.into_iter().map(|(_, r)| r).collect())
        }
        Shape::Page { rows_max, bytes_max } => {
            let mut pages = Vec::with_capacity(parts.len());
            for part in parts {
                match part {
                    PartResult::Rows(rows) => {
                        let full = rows.len() >= rows_max as usize;
                        pages.push((rows, full));
                    }
                    other => return Err(malformed("scan page", &other)),
                }
            }
            OpResult::Page(crate::page::merge_page(pages, rows_max, bytes_max))
        }
        Shape::Read { cols } => match parts.pop() {
            Some(PartResult::Row(r)) => OpResult::Row(r.map(|r| cols.project(r))),
            other => return Err(malformed("read", &other)),
        },
        Shape::Write => OpResult::Done,
        Shape::ReadMany { n } => {
            let mut rows = vec![None; n as usize];
            for part in parts {
                match part {
                    PartResult::Many(found) => {
                        for (i, row) in found {
                            let slot = rows.get_mut(i as usize).ok_or_else(|| -> Error {
                                let what = format!("a partition answered a read_many of {n} keys for key {i}");
                                InvalidInput::MalformedFrame(what).into()
                            })?;
                            *slot = row;
                        }
                    }
                    other => return Err(malformed("read_many", &other)),
                }
            }
            OpResult::Many(rows)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use litmus_core::{Column, ColumnType, Partitioning, TableSchema};

    fn catalog() -> Catalog {
        let mut c = Catalog::new();
        c.add(TableSchema::new(
            "kv",
            vec![Column::new("k", ColumnType::Int), Column::new("v", ColumnType::Int)],
            &["k"],
            Partitioning::KeyPrefix { prefix_len: 1 },
        ));
        c.add(TableSchema::new(
            "item",
            vec![Column::new("i", ColumnType::Int), Column::new("name", ColumnType::String)],
            &["i"],
            Partitioning::Replicated,
        ));
        c
    }

    #[test]
    fn bad_input_is_rejected_with_typed_errors() {
        let c = catalog();
        let err = |op: Op| resolve(&c, 4, &op).unwrap_err();
        assert!(matches!(
            err(Op::Read { table: "nope".into(), key: vec![Value::Int(1)] }),
            Error::Invalid(InvalidInput::UnknownTable(_))
        ));
        assert!(matches!(
            err(Op::Read { table: "kv".into(), key: vec!["x".into()] }),
            Error::Invalid(InvalidInput::WrongType { .. })
        ));
        assert!(matches!(
            err(Op::Read { table: "kv".into(), key: vec![] }),
            Error::Invalid(InvalidInput::WrongArity { .. })
        ));
        assert!(matches!(
            err(Op::Write { table: "kv".into(), row: vec![Value::Int(1)].into() }),
            Error::Invalid(InvalidInput::WrongArity { .. })
        ));
        assert!(matches!(
            err(Op::Update {
                table: "kv".into(),
                key: vec![Value::Int(1)],
                updates: vec![("zz".into(), Formula::Add(Value::Int(1)))]
            }),
            Error::Invalid(InvalidInput::UnknownColumn { .. })
        ));
        assert!(matches!(
            err(Op::Write {
                table: "item".into(),
                row: vec![Value::Int(1), Value::String("x".repeat(limits::VALUE_SIZE_MAX).into())].into()
            }),
            Error::Invalid(InvalidInput::Oversized { .. })
        ));
    }

    #[test]
    fn routing_follows_partitioning() {
        let c = catalog();
        let r = resolve(&c, 4, &Op::Read { table: "kv".into(), key: vec![Value::Int(6)] }).unwrap();
        assert_eq!(r.targets, Targets::One(PartitionId(2)));
        let r = resolve(&c, 4, &Op::Read { table: "item".into(), key: vec![Value::Int(6)] }).unwrap();
        assert_eq!(r.targets, Targets::AnyReplica);
        let r =
            resolve(&c, 4, &Op::Write { table: "item".into(), row: vec![Value::Int(6), "a".into()].into() }).unwrap();
        assert_eq!(r.targets, Targets::All);
        assert_eq!(r.partitions(4, PartitionId(0)).len(), 4);
        let r = resolve(&c, 4, &Op::Scan { table: "kv".into(), start: vec![], end: None, limit: 10 }).unwrap();
        assert_eq!(r.targets, Targets::All);
        let r =
            resolve(&c, 4, &Op::Scan { table: "kv".into(), start: vec![Value::Int(5)], end: None, limit: 10 }).unwrap();
        assert_eq!(r.targets, Targets::One(PartitionId(1)));
    }

    /// A partition's answer of the wrong kind, or naming a key its batch did not hold, is a
    /// typed error for the transaction, never a panic of the coordinator.
    #[test]
    fn a_malformed_partition_answer_is_a_typed_error() {
        let row = Row::from(vec![Value::Int(6), Value::Int(7)]);
        let is_malformed =
            |r: Result<OpResult, Error>| matches!(r, Err(Error::Invalid(InvalidInput::MalformedFrame(_))));
        assert!(is_malformed(merge(Shape::Read { cols: ColMask::ALL }, vec![PartResult::Done])));
        assert!(is_malformed(merge(Shape::Read { cols: ColMask::ALL }, vec![])));
        assert!(is_malformed(merge(Shape::Scan { limit: 5 }, vec![PartResult::Rows(vec![]), PartResult::Done])));
        assert!(is_malformed(merge(Shape::ReadMany { n: 2 }, vec![PartResult::Row(None)])));
        let beyond = PartResult::Many(vec![(0, Some(row.clone())), (2, Some(row.clone()))]);
        assert!(is_malformed(merge(Shape::ReadMany { n: 2 }, vec![beyond])), "key index 2 of a 2-key batch");
        // Well-formed answers merge.
        let split = vec![PartResult::Many(vec![(1, Some(row.clone()))]), PartResult::Many(vec![(0, None)])];
        assert_eq!(merge(Shape::ReadMany { n: 2 }, split).unwrap(), OpResult::Many(vec![None, Some(row)]));
    }

    #[test]
    fn read_columns_resolves_to_its_column_set_and_reads_the_others_as_null() {
        let c = catalog();
        let op = |columns: &[&str]| Op::ReadColumns {
            table: "kv".into(),
            key: vec![Value::Int(6)],
            columns: columns.iter().map(|c| c.to_string()).collect(),
        };
        let r = resolve(&c, 4, &op(&["v"])).unwrap();
        let OpKind::Read { cols, .. } = r.op.kind else { panic!("{:?}", r.op.kind) };
        assert_eq!(cols, ColMask::of([1]));
        assert!(!op(&["v"]).is_write());
        let row = Row::from(vec![Value::Int(6), Value::Int(7)]);
        let merged = merge(Shape::Read { cols }, vec![PartResult::Row(Some(row.clone()))]).unwrap();
        assert_eq!(merged, OpResult::Row(Some(Row::from(vec![Value::Null, Value::Int(7)]))));
        let all = merge(Shape::Read { cols: ColMask::ALL }, vec![PartResult::Row(Some(row.clone()))]).unwrap();
        assert_eq!(all, OpResult::Row(Some(row)));
        // A column the table lacks is a typed error, as in an update.
        assert!(matches!(resolve(&c, 4, &op(&["nope"])), Err(Error::Invalid(InvalidInput::UnknownColumn { .. }))));
    }

    #[test]
    fn a_column_set_shares_its_last_bit_among_columns_63_and_up() {
        let wide = ColMask::of([70]);
        assert!(wide.has(63) && wide.has(64) && !wide.has(62));
        assert!(wide.intersects(ColMask::of([63])) && !wide.intersects(ColMask::of([1])));
        assert!(ColMask::ALL.contains(wide) && !wide.contains(ColMask::ALL));
    }

    #[test]
    fn read_many_goes_to_each_partition_with_its_own_keys_and_merges_in_the_callers_order() {
        let c = catalog();
        let keys = |ks: &[i64]| ks.iter().map(|k| vec![Value::Int(*k)]).collect::<Vec<_>>();
        let op = Op::ReadMany { table: "kv".into(), keys: keys(&[6, 1, 2, 5]) };
        assert!(!op.is_write());
        let r = resolve(&c, 4, &op).unwrap();
        assert_eq!(r.targets, Targets::Split(vec![PartitionId(2), PartitionId(1), PartitionId(2), PartitionId(1)]));
        let (shape, pieces) = r.pieces(4, PartitionId(0));
        assert_eq!(shape, Shape::ReadMany { n: 4 });
        let sent: Vec<(PartitionId, Vec<u32>)> = pieces
            .iter()
            .map(|(p, op)| match &op.kind {
                OpKind::ReadMany { keys } => (*p, keys.iter().map(|(i, _)| *i).collect()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(sent, vec![(PartitionId(1), vec![1, 3]), (PartitionId(2), vec![0, 2])]);
        // Pieces answer in any order; the rows come back in the order of the keys.
        let row = |k: i64| Some(Row::from(vec![Value::Int(k), Value::Int(10 * k)]));
        let merged = merge(
            shape,
            vec![PartResult::Many(vec![(0, row(6)), (2, None)]), PartResult::Many(vec![(1, row(1)), (3, row(5))])],
        )
        .unwrap();
        assert_eq!(merged, OpResult::Many(vec![row(6), row(1), None, row(5)]));
        // One partition: sent whole. A replicated table: to the preferred copy.
        let r = resolve(&c, 4, &Op::ReadMany { table: "kv".into(), keys: keys(&[2, 6]) }).unwrap();
        assert_eq!(r.targets, Targets::One(PartitionId(2)));
        let r = resolve(&c, 4, &Op::ReadMany { table: "item".into(), keys: keys(&[2, 6]) }).unwrap();
        assert_eq!(r.targets, Targets::AnyReplica);
        assert_eq!(r.pieces(4, PartitionId(3)).1.iter().map(|(p, _)| *p).collect::<Vec<_>>(), vec![PartitionId(3)]);
    }

    #[test]
    fn read_many_refuses_bad_input_with_typed_errors() {
        let c = catalog();
        let err = |keys: Vec<Vec<Value>>| resolve(&c, 4, &Op::ReadMany { table: "kv".into(), keys }).unwrap_err();
        assert!(matches!(err(vec![]), Error::Invalid(InvalidInput::WrongArity { .. })));
        assert!(matches!(
            err(vec![vec![Value::Int(1)]; BATCH_LEN_MAX + 1]),
            Error::Invalid(InvalidInput::WrongArity { .. })
        ));
        // One bad key refuses the whole operation.
        assert!(matches!(
            err(vec![vec![Value::Int(1)], vec!["x".into()]]),
            Error::Invalid(InvalidInput::WrongType { .. })
        ));
        let unknown = resolve(&c, 4, &Op::ReadMany { table: "nope".into(), keys: vec![vec![Value::Int(1)]] });
        assert!(matches!(unknown, Err(Error::Invalid(InvalidInput::UnknownTable(_)))));
    }

    #[test]
    fn write_many_goes_to_each_partition_with_its_own_writes_in_order() {
        let c = catalog();
        let put = |k: i64| Op::Write { table: "kv".into(), row: vec![Value::Int(k), Value::Int(k)].into() };
        let bump = |k: i64| Op::Update {
            table: "kv".into(),
            key: vec![Value::Int(k)],
            updates: vec![("v".into(), Formula::Add(Value::Int(1)))],
        };
        let op = Op::WriteMany { table: "kv".into(), writes: vec![put(6), put(1), bump(6), bump(5)] };
        assert!(op.is_write());
        let r = resolve(&c, 4, &op).unwrap();
        assert_eq!(r.targets, Targets::Split(vec![PartitionId(2), PartitionId(1), PartitionId(2), PartitionId(1)]));
        let (shape, pieces) = r.pieces(4, PartitionId(0));
        assert_eq!(shape, Shape::Write);
        let sent: Vec<(PartitionId, Vec<&'static str>)> = pieces
            .iter()
            .map(|(p, op)| match &op.kind {
                OpKind::WriteMany { writes } => (
                    *p,
                    writes.iter().map(|w| if matches!(w, OpKind::Write { .. }) { "write" } else { "update" }).collect(),
                ),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(sent, vec![(PartitionId(1), vec!["write", "update"]), (PartitionId(2), vec!["write", "update"])]);
        // A replicated table's batch goes whole to every copy.
        let item = |i: i64| Op::Write { table: "item".into(), row: vec![Value::Int(i), "a".into()].into() };
        let r = resolve(&c, 4, &Op::WriteMany { table: "item".into(), writes: vec![item(1), item(2)] }).unwrap();
        assert_eq!(r.targets, Targets::All);
        // Within a batch each write sees the ones before it; one failure fails it whole.
        let key = Key::ints(&[6]);
        let kinds = |ops: &[Op]| match resolve(&c, 4, &Op::WriteMany { table: "kv".into(), writes: ops.to_vec() }) {
            Ok(Resolved { op: PartOp { kind: OpKind::WriteMany { writes }, .. }, .. }) => writes,
            other => panic!("{other:?}"),
        };
        let images = write_images(&kinds(&[put(6), bump(6), bump(6)]), |_| None, || "kv".into()).unwrap();
        assert_eq!(images.last().unwrap().1, Some(Row::from(vec![Value::Int(6), Value::Int(8)])));
        // Longer than the scanned batches, earlier images are found through a map: the same.
        let long: Vec<Op> = [put(6), put(7)].into_iter().chain((0..9).flat_map(|_| [bump(6), bump(7)])).collect();
        let images = write_images(&kinds(&long), |_| None, || "kv".into()).unwrap();
        assert_eq!(images.len(), 20);
        assert_eq!(images[18].1, Some(Row::from(vec![Value::Int(6), Value::Int(15)])));
        assert_eq!(images[19].1, Some(Row::from(vec![Value::Int(7), Value::Int(16)])));
        let insert = Op::Insert { table: "kv".into(), row: vec![Value::Int(6), Value::Int(0)].into() };
        let row = Row::from(vec![Value::Int(6), Value::Int(1)]);
        let err = write_images(&kinds(&[bump(6), insert]), |k| (*k == key).then(|| row.clone()), || "kv".into());
        assert!(matches!(err, Err(Error::Invalid(InvalidInput::DuplicateKey(_)))), "{err:?}");
    }

    #[test]
    fn write_many_refuses_bad_input_with_typed_errors() {
        let c = catalog();
        let err = |writes: Vec<Op>| resolve(&c, 4, &Op::WriteMany { table: "kv".into(), writes }).unwrap_err();
        assert!(matches!(err(vec![]), Error::Invalid(InvalidInput::WrongArity { .. })));
        let read = Op::Read { table: "kv".into(), key: vec![Value::Int(1)] };
        assert!(
            matches!(err(vec![read]), Error::Invalid(InvalidInput::WrongType { .. })),
            "a read in a batch of writes"
        );
        let other = Op::Write { table: "item".into(), row: vec![Value::Int(1), "a".into()].into() };
        assert!(matches!(err(vec![other]), Error::Invalid(InvalidInput::WrongType { .. })), "another table's write");
        let bad = Op::Write { table: "kv".into(), row: vec![Value::Int(1)].into() };
        assert!(
            matches!(err(vec![bad]), Error::Invalid(InvalidInput::WrongArity { .. })),
            "a bad write refuses it whole"
        );
    }

    #[test]
    fn merge_scan_orders_and_limits() {
        let kind = OpKind::Scan { start: Key::default(), end: None, limit: 3 };
        let row = |i: i64| (Key::ints(&[i]), Row::from(vec![Value::Int(i)]));
        let out = merge(
            kind.shape(),
            vec![PartResult::Rows(vec![row(1), row(4)]), PartResult::Rows(vec![row(2), row(3), row(5)])],
        )
        .unwrap();
        assert_eq!(
            out,
            OpResult::Rows(vec![vec![Value::Int(1)].into(), vec![Value::Int(2)].into(), vec![Value::Int(3)].into()])
        );
    }

    proptest::proptest! {
        // Cheap cases, and the schedules that tell a stale staged value apart are rare (an
        // update near the top, a whole-row write, an update that overflows only on the stale
        // value): many of them.
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]
        /// `check_writes` agrees with its naive model, the image [`write_image`] builds op by op:
        /// the same success, and the same error (type, overflow, missing or duplicate row).
        #[test]
        fn check_writes_agrees_with_building_the_image(
            present in proptest::bool::ANY,
            start in 0usize..4,
            ops in proptest::collection::vec((0u8..6, 0usize..4), 0..6),
        ) {
            // Values near the top, so that which value an update sees decides whether it
            // overflows.
            const VALUES: [i64; 4] = [0, 1, i64::MAX - 1, i64::MAX];
            let start = VALUES[start];
            let key = Key::from(&b"k"[..]);
            let ops: Vec<OpKind> = ops
                .into_iter()
                .map(|(kind, n)| (kind, VALUES[n]))
                .map(|(kind, n)| match kind {
                    0 => OpKind::Write { key: key.clone(), row: vec![Value::Int(1), Value::Int(n)].into() },
                    1 => OpKind::Insert { key: key.clone(), row: vec![Value::Int(1), Value::Int(n)].into() },
                    2 => OpKind::Delete { key: key.clone() },
                    3 => OpKind::Update { key: key.clone(), updates: vec![ColumnUpdate::new(1, Formula::Add(Value::Int(n.min(1))))] },
                    4 => OpKind::Update {
                        key: key.clone(),
                        updates: vec![ColumnUpdate::new(1, Formula::Assign(Value::Int(n))), ColumnUpdate::new(1, Formula::Add(Value::Int(1)))],
                    },
                    _ => OpKind::Update { key: key.clone(), updates: vec![ColumnUpdate::new(1, Formula::Add("x".into()))] },
                })
                .collect();
            let current: Option<Row> = present.then(|| vec![Value::Int(1), Value::Int(start)].into());
            let mut image = current.clone();
            let mut built = Ok(());
            for op in &ops {
                match write_image(op, image.clone(), || "t".into()) {
                    Ok(next) => image = next,
                    Err(e) => {
                        built = Err(e);
                        break;
                    }
                }
            }
            let checked = check_writes(&ops, current.as_ref(), || "t".into());
            proptest::prop_assert_eq!(format!("{checked:?}"), format!("{built:?}"));
        }
    }
}
