//! Operation footprints, derived by running procedures in a recording context.
//!
//! A procedure is an `async fn` over [`Ctx`]; the coordinator polls it ([`poll_once`]) and
//! answers the operations it issued ([`TxnIo::take_issued`](litmus_protocol::procedure::TxnIo)).
//! The recorder plays the coordinator against no database: it answers every read with a
//! synthetic row and every write with success, and writes down what was asked. Run over the
//! workload's generated arguments (and several synthetic data variants: rows missing, scans
//! empty, values from each column's declared `IN (...)` domain) this yields the procedure's
//! footprint — what it inserts, updates (and how), deletes and reads — from its code, so the
//! footprint cannot drift from it.
//!
//! **Key provenance.** Synthetic integers are *fingerprints*: `2^50 + slot * 2^20`, one slot per
//! synthesized value. A written integer `v = a * fingerprint + b` (small `a`, `|b|`) came from
//! that read. An inserted key column whose value came from a column that the same transaction
//! *incremented at the same row* is **assigned by that counter** (`o_id = d_next_o_id - 1`
//! after `d_next_o_id += 1`); one that came from a read without an increment is *read*; one
//! declared `DEFAULT LITMUS_UNIQUE_ID()` is a *token*; anything else (arguments, constants) is
//! *chosen*. Synthetic numbers are positive, so the sign of an increment computed from reads is
//! the sign it has on non-negative data.
//!
//! **A database of its own.** Data variant 0 plays the whole workload in order — sample `i` of
//! every procedure, then sample `i + 1` — against one in-memory store shared by all of them:
//! a read of a row nobody wrote synthesizes it *and keeps it*, writes and formula updates
//! apply, scans return the stored rows of their range. So a procedure finds the rows earlier
//! ones wrote (an order queued by `create-order` is there for `payment`), and counters move as
//! they would. Variants 1 and 2 run each procedure alone on synthetic rows, some missing, scans
//! sometimes empty, to reach the not-found branches.
//!
//! What the recorder cannot observe is declared in the DDL: unique tokens and value domains.
//! A footprint is the union over all runs (aborted ones included): a superset of what any run
//! commits, which keeps the analysis sound.

use crate::invariant::{ColRef, Schema};
use litmus_core::formula::apply_updates;
use litmus_core::{Catalog, ColumnType, Decimal, Error, Formula, Key, Row, TableSchema, Value};
use litmus_protocol::op::{op_table, resolve, OpKind, OpResult};
use litmus_protocol::procedure::{poll_once, Issued, Procedure};
use litmus_protocol::{Ctx, Op};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::task::Poll;

const FP_BASE: i64 = 1 << 50;
const FP_STRIDE: i64 = 1 << 20;
const FP_OFFSET_MAX: i64 = 1 << 16;
const FP_FACTOR_MAX: i64 = 64;
/// Most operations one recorded run may issue.
pub const RUN_OPS_MAX: usize = 100_000;
/// Synthetic data variants per argument sample.
pub const VARIANTS: u64 = 3;

/// Where an inserted value came from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Source {
    /// An argument or a constant: a specific value the transaction chose.
    Chosen,
    /// NULL.
    Null,
    /// Read from `counter` after the transaction incremented it at the same row: a
    /// database-assigned value.
    Assigned { counter: ColRef },
    /// A column declared `DEFAULT LITMUS_UNIQUE_ID()`: unique without coordination.
    Token,
    /// Read from a column (no increment).
    Read { from: ColRef },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Chosen => f.write_str("chosen"),
            Source::Null => f.write_str("null"),
            Source::Assigned { counter } => write!(f, "assigned from {counter}"),
            Source::Token => f.write_str("unique token"),
            Source::Read { from } => write!(f, "read from {from}"),
        }
    }
}

/// How an update changes a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// `:= v` with `v` not NULL.
    Assign,
    /// `:= NULL`.
    AssignNull,
    /// `+= x`, `x > 0`.
    Increment,
    /// `+= x`, `x < 0`.
    Decrement,
    /// `+= 0`: changes nothing (a write lock taken by an update).
    Touch,
    Multiply,
    Min,
    Max,
    SetAdd,
    SetRemove,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Change::Assign => "assign",
            Change::AssignNull => "assign NULL",
            Change::Increment => "increment",
            Change::Decrement => "decrement",
            Change::Touch => "add zero",
            Change::Multiply => "multiply",
            Change::Min => "min",
            Change::Max => "max",
            Change::SetAdd => "set add",
            Change::SetRemove => "set remove",
        })
    }
}

impl Change {
    fn of(formula: &Formula) -> Change {
        let sign = |v: &Value| match v {
            Value::Int(i) => i.signum(),
            Value::Decimal(d) => d.0.signum(),
            _ => 1,
        };
        match formula {
            Formula::Assign(Value::Null) => Change::AssignNull,
            Formula::Assign(_) => Change::Assign,
            Formula::Add(v) => match sign(v) {
                0 => Change::Touch,
                s if s > 0 => Change::Increment,
                _ => Change::Decrement,
            },
            Formula::Multiply(_) => Change::Multiply,
            Formula::Min(_) => Change::Min,
            Formula::Max(_) => Change::Max,
            Formula::SetAdd(_) => Change::SetAdd,
            Formula::SetRemove(_) => Change::SetRemove,
        }
    }
}

/// One kind of access a procedure makes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Access {
    /// Point read or range read.
    Read {
        table: String,
    },
    /// `insert` (fails on an existing key) or, with `upsert`, `write` (insert or replace).
    /// `columns`: every column's source.
    Insert {
        table: String,
        upsert: bool,
        columns: Vec<(String, Source)>,
    },
    /// A formula update of one column.
    Update {
        col: ColRef,
        change: Change,
    },
    Delete {
        table: String,
    },
}

impl Access {
    pub fn table(&self) -> &str {
        match self {
            Access::Read { table } | Access::Insert { table, .. } | Access::Delete { table } => table,
            Access::Update { col, .. } => &col.table,
        }
    }

    pub fn is_write(&self) -> bool {
        !matches!(self, Access::Read { .. })
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Access::Read { table } => write!(f, "read {table}"),
            Access::Insert { table, upsert, columns } => {
                write!(f, "{} {table}", if *upsert { "upsert" } else { "insert" })?;
                let notable: Vec<String> = columns
                    .iter()
                    .filter(|(_, s)| !matches!(s, Source::Chosen | Source::Null))
                    .map(|(c, s)| format!("{c} {s}"))
                    .collect();
                if !notable.is_empty() {
                    write!(f, " ({})", notable.join(", "))?;
                }
                Ok(())
            }
            Access::Update { col, change } => write!(f, "{change} {col}"),
            Access::Delete { table } => write!(f, "delete {table}"),
        }
    }
}

/// What a procedure does, over every recorded run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Footprint {
    pub procedure: String,
    /// Recorded runs (argument samples times data variants).
    pub runs: u64,
    /// Runs that returned `Ok`.
    pub committed: u64,
    /// Runs in which the procedure panicked on synthetic data (counted as failed).
    pub panicked: u64,
    pub accesses: BTreeSet<Access>,
}

impl Footprint {
    pub fn writes(&self) -> impl Iterator<Item = &Access> {
        self.accesses.iter().filter(|a| a.is_write())
    }
}

/// Why a procedure could not be recorded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("procedure {procedure}: no argument samples to run it on")]
    NoSamples { procedure: String },
    #[error(
        "procedure {procedure} is pending without having issued an operation (it awaits something other than its Ctx)"
    )]
    Stuck { procedure: String },
    #[error("procedure {procedure} issued more than {RUN_OPS_MAX} operations in one run")]
    TooManyOps { procedure: String },
    #[error("procedure {procedure}: argument sample {sample} is invalid: {error}")]
    BadSample { procedure: String, sample: usize, error: String },
}

/// Runs procedures against synthetic data and records their footprints.
pub struct Recorder<'a> {
    catalog: &'a Catalog,
    schema: &'a Schema,
}

/// A small deterministic generator (splitmix64) for the synthetic data variants.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Rows by table and encoded key: the store of data variant 0.
type Store = BTreeMap<(String, Key), Row>;

/// Per fingerprint slot: the column and row key it was synthesized for.
type Slots = Vec<(ColRef, Vec<Value>)>;

/// The state of one recorded run.
struct Run<'a> {
    catalog: &'a Catalog,
    schema: &'a Schema,
    variant: u64,
    mix: Mix,
    /// The shared store (variant 0 only).
    store: Option<&'a mut Store>,
    /// Fingerprint slots, shared by every run of a recording (fingerprints stay unique).
    slots: &'a mut Slots,
    /// Increments issued: (column, row key).
    increments: BTreeSet<(ColRef, Vec<Value>)>,
    /// The last integer value returned in this run per column name, with its table (store mode).
    seen: BTreeMap<String, (String, Value)>,
    /// The procedure panicked (on synthetic data).
    panicked: bool,
    accesses: BTreeSet<Access>,
    /// Inserts, resolved once the run is over (a counter may be incremented after the read
    /// that its value came from).
    inserts: Vec<(String, bool, Row)>,
}

impl<'a> Recorder<'a> {
    pub fn new(catalog: &'a Catalog, schema: &'a Schema) -> Self {
        Recorder { catalog, schema }
    }

    /// Records `proc` over every argument sample and [`VARIANTS`] data variants each.
    pub fn record(&self, proc: &Procedure, samples: &[Vec<Value>]) -> Result<Footprint, RecordError> {
        Ok(self.record_all(&[(proc, samples)])?.pop().expect("one footprint"))
    }

    /// Records a workload's procedures together: variant 0 interleaves them (sample `i` of
    /// each, in order) over one shared store; variants 1 and 2 run each alone.
    pub fn record_all(&self, procs: &[(&Procedure, &[Vec<Value>])]) -> Result<Vec<Footprint>, RecordError> {
        let mut fps = Vec::with_capacity(procs.len());
        for (proc, samples) in procs {
            if samples.is_empty() {
                return Err(RecordError::NoSamples { procedure: proc.name.clone() });
            }
            for (i, args) in samples.iter().enumerate() {
                proc.check_args(args).map_err(|e| RecordError::BadSample {
                    procedure: proc.name.clone(),
                    sample: i,
                    error: e.to_string(),
                })?;
            }
            fps.push(Footprint {
                procedure: proc.name.clone(),
                runs: 0,
                committed: 0,
                panicked: 0,
                accesses: BTreeSet::new(),
            });
        }
        let mut store = Store::new();
        let mut slots = Slots::new();
        let rounds = procs.iter().map(|(_, s)| s.len()).max().unwrap_or(0);
        for i in 0..rounds {
            for variant in 0..VARIANTS {
                for ((proc, samples), fp) in procs.iter().zip(fps.iter_mut()) {
                    let Some(args) = samples.get(i) else { continue };
                    let seed = (i as u64) << 8 | variant;
                    let shared = (variant == 0).then_some(&mut store);
                    let (accesses, ok, panicked) = self.run(proc, args.clone(), variant, seed, shared, &mut slots)?;
                    fp.runs += 1;
                    fp.committed += u64::from(ok);
                    fp.panicked += u64::from(panicked);
                    fp.accesses.extend(accesses);
                }
            }
        }
        Ok(fps)
    }

    fn run(
        &self,
        proc: &Procedure,
        args: Vec<Value>,
        variant: u64,
        seed: u64,
        store: Option<&mut Store>,
        slots: &mut Slots,
    ) -> Result<(BTreeSet<Access>, bool, bool), RecordError> {
        let mut run = Run {
            catalog: self.catalog,
            schema: self.schema,
            variant,
            mix: Mix(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5151),
            store,
            slots,
            increments: BTreeSet::new(),
            seen: BTreeMap::new(),
            panicked: false,
            accesses: BTreeSet::new(),
            inserts: Vec::new(),
        };
        let ctx = Ctx::new();
        let mut fut = proc.start(ctx.clone(), args);
        let mut ops = 0usize;
        let ok = loop {
            // A procedure trusts its data; synthetic data may make it panic (an overflow on a
            // fingerprint-sized value): that run counts as failed, the recording goes on.
            let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poll_once(&mut fut)));
            let Ok(polled) = polled else {
                run.panicked = true;
                break false;
            };
            match polled {
                Poll::Ready(r) => break r.is_ok(),
                Poll::Pending => {
                    let issued = ctx.io().take_issued();
                    if issued.is_empty() {
                        return Err(RecordError::Stuck { procedure: proc.name.clone() });
                    }
                    ops += issued.len();
                    if ops > RUN_OPS_MAX {
                        return Err(RecordError::TooManyOps { procedure: proc.name.clone() });
                    }
                    for (id, what) in issued {
                        let result = match what {
                            Issued::Control(_) => Ok(OpResult::Done),
                            Issued::Op(op) | Issued::UnitOp(op) => run.answer(&op),
                        };
                        ctx.io().complete(id, result);
                    }
                }
            }
        };
        let inserts = std::mem::take(&mut run.inserts);
        for (table, upsert, row) in inserts {
            let t = self.catalog.table_by_name(&table).expect("resolved");
            let columns = t
                .columns
                .iter()
                .enumerate()
                .zip(&row)
                .map(|((i, c), v)| {
                    let s = match run.source(&table, &c.name, v) {
                        // A non-key value taken from a read is, for every rule, a value the
                        // transaction chose; only key provenance is worth keeping.
                        Source::Read { .. } if !t.primary_key.contains(&i) => Source::Chosen,
                        s => s,
                    };
                    (c.name.clone(), s)
                })
                .collect();
            run.accesses.insert(Access::Insert { table, upsert, columns });
        }
        Ok((run.accesses, ok, run.panicked))
    }
}

impl Run<'_> {
    /// Answers one operation like a database that has every row it is asked for (mostly).
    fn answer(&mut self, op: &Op) -> Result<OpResult, Error> {
        if let Op::WriteMany { writes, .. } = op {
            resolve(self.catalog, 1, op)?; // refused whole, as the coordinator refuses it
            for w in writes {
                self.answer(w)?;
            }
            return Ok(OpResult::Done);
        }
        // Validate as the coordinator would: bad operations get the error a database gives.
        let resolved = resolve(self.catalog, 1, op)?;
        if self.store.is_some() {
            return self.answer_stored(op, &resolved.op.kind);
        }
        let schema_of = |t: &str| self.catalog.table_by_name(t).expect("resolved").clone();
        match op {
            Op::Read { table, key } | Op::ReadColumns { table, key, .. } | Op::ReadForUpdate { table, key } => {
                self.accesses.insert(Access::Read { table: table.clone() });
                let missing = self.variant > 0 && self.mix.chance(20);
                if missing {
                    return Ok(OpResult::Row(None));
                }
                let t = schema_of(table);
                Ok(OpResult::Row(Some(project(&resolved.op.kind, self.row(&t, key)))))
            }
            Op::ReadMany { table, keys } => {
                self.accesses.insert(Access::Read { table: table.clone() });
                let t = schema_of(table);
                Ok(OpResult::Many(keys.iter().map(|k| Some(self.row(&t, k))).collect()))
            }
            Op::Scan { table, start, end: _, limit } => {
                self.accesses.insert(Access::Read { table: table.clone() });
                let n = match self.variant {
                    0 => 2,
                    1 => 0,
                    _ => self.mix.below(4) as u32,
                }
                .min(*limit);
                let t = schema_of(table);
                let rows = (0..n).map(|_| self.row(&t, start)).collect();
                Ok(OpResult::Rows(rows))
            }
            Op::ScanPage { table, start, rows_max, .. } => {
                // A page reads like a scan of its rows; the recorded run needs no second page.
                self.accesses.insert(Access::Read { table: table.clone() });
                let t = schema_of(table);
                let rows = (0..2.min(*rows_max)).map(|_| self.row(&t, start)).collect();
                Ok(OpResult::Page(litmus_protocol::page::Page { rows, resume: None }))
            }
            Op::Insert { table, row } | Op::Write { table, row } => {
                self.inserts.push((table.clone(), matches!(op, Op::Write { .. }), row.clone()));
                Ok(OpResult::Done)
            }
            Op::Delete { table, .. } => {
                self.accesses.insert(Access::Delete { table: table.clone() });
                Ok(OpResult::Done)
            }
            Op::Update { table, key, updates } => {
                self.note_updates(table, key, updates);
                Ok(OpResult::Done)
            }
            Op::WriteMany { .. } => unreachable!("a batch is answered write by write above"),
        }
    }

    /// Answers from the shared store, synthesizing (and keeping) rows nobody wrote.
    fn answer_stored(&mut self, op: &Op, kind: &OpKind) -> Result<OpResult, Error> {
        let table = op_table(op).to_string();
        let t = self.catalog.table_by_name(&table).expect("resolved").clone();
        match (op, kind) {
            (
                Op::Read { key, .. } | Op::ReadColumns { key, .. } | Op::ReadForUpdate { key, .. },
                OpKind::Read { key: k, .. } | OpKind::ReadForUpdate { key: k },
            ) => {
                self.accesses.insert(Access::Read { table: table.clone() });
                Ok(OpResult::Row(Some(project(kind, self.stored_row(&t, k, key)))))
            }
            (Op::ReadMany { keys, .. }, OpKind::ReadMany { keys: encoded }) => {
                self.accesses.insert(Access::Read { table: table.clone() });
                let rows = keys.iter().zip(encoded).map(|(key, (_, k))| Some(self.stored_row(&t, k, key))).collect();
                Ok(OpResult::Many(rows))
            }
            (Op::Scan { start, .. }, OpKind::Scan { start: s, end, limit }) => {
                self.accesses.insert(Access::Read { table: table.clone() });
                let store = self.store.as_deref().expect("store mode");
                let lo = (table.clone(), s.clone());
                let rows: Vec<Row> = store
                    .range(lo..)
                    .take_while(|((tn, k), _)| *tn == table && end.as_ref().is_none_or(|e| k < e))
                    .take(*limit as usize)
                    .map(|(_, r)| r.clone())
                    .collect();
                if !rows.is_empty() {
                    for r in &rows {
                        self.see(&t, r);
                    }
                    return Ok(OpResult::Rows(rows));
                }
                let mut out = Vec::new();
                for _ in 0..2.min(*limit) {
                    let row = self.row(&t, start);
                    let k = t.row_key(&row)?;
                    if k >= *s && end.as_ref().is_none_or(|e| k < *e) {
                        self.store.as_deref_mut().expect("store mode").insert((table.clone(), k), row.clone());
                    }
                    self.see(&t, &row);
                    out.push(row);
                }
                Ok(OpResult::Rows(out))
            }
            (
                Op::Insert { row, .. } | Op::Write { row, .. },
                OpKind::Insert { key, .. } | OpKind::Write { key, .. },
            ) => {
                self.inserts.push((table.clone(), matches!(op, Op::Write { .. }), row.clone()));
                self.store.as_deref_mut().expect("store mode").insert((table, key.clone()), row.clone());
                Ok(OpResult::Done)
            }
            (Op::Delete { .. }, OpKind::Delete { key }) => {
                self.accesses.insert(Access::Delete { table: table.clone() });
                self.store.as_deref_mut().expect("store mode").remove(&(table, key.clone()));
                Ok(OpResult::Done)
            }
            (Op::Update { key, updates, .. }, OpKind::Update { key: k, updates: resolved }) => {
                self.note_updates(&table, key, updates);
                let mut row = self.stored_row(&t, k, key);
                apply_updates(&mut row, resolved)?;
                self.store.as_deref_mut().expect("store mode").insert((table, k.clone()), row);
                Ok(OpResult::Done)
            }
            _ => Err(Error::Internal(format!("recorder: {op:?} resolved to {kind:?}"))),
        }
    }

    /// The stored row with this key, synthesized and kept if nobody wrote it.
    fn stored_row(&mut self, t: &TableSchema, k: &Key, key: &[Value]) -> Row {
        let id = (t.name.clone(), k.clone());
        let row = match self.store.as_deref().expect("store mode").get(&id) {
            Some(r) => r.clone(),
            None => {
                let row = self.row(t, key);
                self.store.as_deref_mut().expect("store mode").insert(id, row.clone());
                row
            }
        };
        self.see(t, &row);
        row
    }

    fn see(&mut self, t: &TableSchema, row: &[Value]) {
        for (c, v) in t.columns.iter().zip(row) {
            if matches!(v, Value::Int(_)) {
                self.seen.insert(c.name.clone(), (t.name.clone(), v.clone()));
            }
        }
    }

    fn note_updates(&mut self, table: &str, key: &[Value], updates: &[(String, Formula)]) {
        for (column, f) in updates {
            let col = ColRef::new(table, column);
            let change = Change::of(f);
            if change == Change::Increment {
                self.increments.insert((col.clone(), key.to_vec()));
            }
            self.accesses.insert(Access::Update { col, change });
        }
    }

    /// A synthetic row whose key starts with `prefix` (a full key for point reads).
    fn row(&mut self, t: &TableSchema, prefix: &[Value]) -> Row {
        let mut row: Row = vec![Value::Null; t.columns.len()].into();
        let mut key_vals: Vec<Value> = Vec::with_capacity(t.primary_key.len());
        for (n, &i) in t.primary_key.iter().enumerate() {
            let v = match prefix.get(n) {
                Some(v) => v.clone(),
                None => self.synth(t, i, &key_vals),
            };
            key_vals.push(v.clone());
            row[i] = v;
        }
        for (i, cell) in row.iter_mut().enumerate() {
            if !t.primary_key.contains(&i) {
                *cell = self.synth(t, i, &key_vals);
            }
        }
        row
    }

    fn synth(&mut self, t: &TableSchema, i: usize, key: &[Value]) -> Value {
        let c = &t.columns[i];
        if c.nullable && self.variant > 0 && self.mix.chance(25) {
            return Value::Null;
        }
        let domain = self.schema.table(&t.name).and_then(|d| d.column(&c.name)).map(|d| d.domain.clone());
        if let Some(domain) = domain.filter(|d| !d.is_empty()) {
            return domain[self.mix.below(domain.len() as u64) as usize].clone();
        }
        // In the shared store, a column named like one this run has already seen usually
        // repeats that value (a seat's `order_id` is the order's): rows that belong together
        // mostly agree, as a database's do, and the branches that check it are reached.
        if self.store.is_some() && c.ty == ColumnType::Int && self.mix.chance(75) {
            // Only from another table: two rows of one table sharing a value would blur which
            // row a value came from (a counter of district 1 read as district 2's).
            if let Some((_, v)) = self.seen.get(&c.name).filter(|(table, _)| *table != t.name) {
                return v.clone();
            }
        }
        let slot = self.slots.len() as i64;
        self.slots.push((ColRef::new(&t.name, &c.name), key.to_vec()));
        let fp = FP_BASE + slot * FP_STRIDE;
        match &c.ty {
            ColumnType::Int => Value::Int(fp),
            // Small positive amounts: procedures multiply money (prices, taxes, discounts) and
            // a fingerprint-sized decimal would overflow; keys are never decimals.
            ColumnType::Decimal => Value::Decimal(Decimal::from_cents(1 + slot % 99)),
            ColumnType::String => Value::String(format!("~fp{slot}~").into()),
            ColumnType::Bytes => Value::Bytes(Vec::new().into()),
            ColumnType::Set(_) => Value::Set(Default::default()),
        }
    }

    /// The fingerprint slot an integer came from, if any: `v = a * fp(slot) + b`.
    fn slot_of(&self, v: i64) -> Option<usize> {
        let top = FP_BASE + self.slots.len() as i64 * FP_STRIDE;
        for a in 1..=FP_FACTOR_MAX {
            let approx = v / a;
            if approx < FP_BASE - FP_OFFSET_MAX || approx > top + FP_OFFSET_MAX {
                continue;
            }
            let slot = ((approx - FP_BASE) + FP_STRIDE / 2).div_euclid(FP_STRIDE);
            if slot < 0 || slot as usize >= self.slots.len() {
                continue;
            }
            let b = v - a * (FP_BASE + slot * FP_STRIDE);
            if b.abs() <= FP_OFFSET_MAX {
                return Some(slot as usize);
            }
        }
        None
    }

    fn source(&self, table: &str, column: &str, v: &Value) -> Source {
        if self.schema.table(table).and_then(|t| t.column(column)).is_some_and(|c| c.unique_token) {
            return Source::Token;
        }
        let slot = match v {
            Value::Null => return Source::Null,
            Value::Int(i) => self.slot_of(*i),
            Value::String(s) => s
                .split('~')
                .filter_map(|p| p.strip_prefix("fp"))
                .find_map(|n| n.parse::<usize>().ok())
                .filter(|&n| n < self.slots.len()),
            _ => None,
        };
        match slot {
            None => Source::Chosen,
            Some(s) => {
                let (col, key) = &self.slots[s];
                if self.increments.contains(&(col.clone(), key.clone())) {
                    Source::Assigned { counter: col.clone() }
                } else {
                    Source::Read { from: col.clone() }
                }
            }
        }
    }
}

/// A read's row as the procedure sees it: the columns it did not name read as NULL.
fn project(kind: &OpKind, row: Row) -> Row {
    match kind {
        OpKind::Read { cols, .. } => cols.project(row),
        _ => row,
    }
}

/// Footprints of several procedures by name.
pub type Footprints = BTreeMap<String, Footprint>;

#[cfg(test)]
mod tests {
    use super::*;
    use litmus_core::{Column, Partitioning};
    use litmus_protocol::Registry;

    fn catalog() -> Catalog {
        let mut c = Catalog::new();
        let int = |n: &str| Column::new(n, ColumnType::Int);
        c.add(TableSchema::new(
            "ctr",
            vec![int("g"), int("next"), int("kind")],
            &["g"],
            Partitioning::KeyPrefix { prefix_len: 1 },
        ));
        c.add(TableSchema::new(
            "item",
            vec![int("g"), int("id"), int("v"), int("tok")],
            &["g", "id"],
            Partitioning::KeyPrefix { prefix_len: 1 },
        ));
        c
    }

    const DDL: &str = "
        CREATE TABLE ctr (g INT PRIMARY KEY, next INT NOT NULL, kind INT NOT NULL CHECK (kind IN (1, 2)));
        CREATE TABLE item (g INT NOT NULL, id INT NOT NULL, v INT NOT NULL,
                           tok INT NOT NULL DEFAULT LITMUS_UNIQUE_ID(), PRIMARY KEY (g, id));
    ";

    /// A procedure in the shape of New-Order: bump a group's counter, read it back, insert
    /// under the id it handed out; plus an insert under a chosen id, and a data-dependent
    /// branch on a column with a declared domain.
    fn registry() -> Registry {
        let mut r = Registry::new();
        r.register("mk", vec![ColumnType::Int, ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
            let g = args[0].clone();
            ctx.update("ctr", std::slice::from_ref(&g), &[("next", Formula::Add(Value::Int(1)))]).await?;
            let row = ctx.read("ctr", std::slice::from_ref(&g)).await?.ok_or_else(|| ctx.abort("no group"))?;
            let id = row[1].as_int().expect("int") * 2 - 1;
            ctx.insert("item", vec![g.clone(), Value::Int(id), Value::Int(0), args[1].clone()]).await?;
            ctx.insert("item", vec![g.clone(), Value::Int(7), row[1].clone(), args[1].clone()]).await?;
            if row[2] == Value::Int(2) {
                ctx.delete("item", &[g.clone(), Value::Int(7)]).await?;
            }
            ctx.update("ctr", &[g], &[("kind", Formula::Add(Value::Int(0)))]).await?;
            Ok(vec![])
        });
        r
    }

    #[test]
    fn records_assigned_and_chosen_keys_formulas_and_both_branches() {
        let catalog = catalog();
        let schema = crate::ddl::parse(DDL).unwrap();
        let reg = registry();
        let samples: Vec<Vec<Value>> = (0..8).map(|i| vec![Value::Int(i), Value::Int(1000 + i)]).collect();
        let fp = Recorder::new(&catalog, &schema).record(reg.get("mk").unwrap(), &samples).unwrap();
        assert_eq!(fp.runs, 8 * VARIANTS);
        assert!(fp.committed > 0 && fp.committed < fp.runs, "some runs miss the group row");
        let inserts: Vec<&Vec<(String, Source)>> = fp
            .accesses
            .iter()
            .filter_map(|a| match a {
                Access::Insert { table, columns, upsert: false } if table == "item" => Some(columns),
                _ => None,
            })
            .collect();
        let id_sources: BTreeSet<&Source> = inserts.iter().map(|c| &c[1].1).collect();
        let counter = Source::Assigned { counter: ColRef::new("ctr", "next") };
        assert!(id_sources.contains(&counter), "{id_sources:?}");
        assert!(id_sources.contains(&Source::Chosen), "{id_sources:?}");
        assert!(inserts.iter().all(|c| c[3].1 == Source::Token), "declared unique token");
        assert!(fp.accesses.contains(&Access::Update { col: ColRef::new("ctr", "next"), change: Change::Increment }));
        assert!(fp.accesses.contains(&Access::Update { col: ColRef::new("ctr", "kind"), change: Change::Touch }));
        // The delete is behind `kind == 2`: the declared domain (1, 2) reaches it.
        assert!(fp.accesses.contains(&Access::Delete { table: "item".into() }));
        assert!(fp.accesses.contains(&Access::Read { table: "ctr".into() }));
    }

    #[test]
    fn bad_samples_and_no_samples_are_errors() {
        let (catalog, schema, reg) = (catalog(), crate::ddl::parse(DDL).unwrap(), registry());
        let rec = Recorder::new(&catalog, &schema);
        let p = reg.get("mk").unwrap();
        assert!(matches!(rec.record(p, &[]), Err(RecordError::NoSamples { .. })));
        assert!(matches!(rec.record(p, &[vec![Value::Int(1)]]), Err(RecordError::BadSample { .. })));
    }

    #[test]
    fn fingerprints_trace_affine_uses() {
        let catalog = catalog();
        let schema = crate::ddl::parse(DDL).unwrap();
        let mut slots = Slots::new();
        let mut run = Run {
            catalog: &catalog,
            schema: &schema,
            variant: 0,
            mix: Mix(1),
            store: None,
            slots: &mut slots,
            increments: BTreeSet::new(),
            seen: BTreeMap::new(),
            panicked: false,
            accesses: BTreeSet::new(),
            inserts: vec![],
        };
        let t = catalog.table_by_name("ctr").unwrap().clone();
        let row = run.row(&t, &[Value::Int(3)]);
        let next = row[1].as_int().unwrap();
        for v in [next, next - 1, 2 * next + 1, 10 * next - 3] {
            assert_eq!(run.slot_of(v), Some(0), "{v}");
        }
        for v in [0, 1, 1_000_000, next / 3] {
            assert_eq!(run.slot_of(v), None, "{v}");
        }
    }
}
