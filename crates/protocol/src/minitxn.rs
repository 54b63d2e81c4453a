//! Minitransactions (Sinfonia §3): compare items and write items, decided in one round.
//!
//! The engines that run one-round transactions only (`granola`, `granola-locking`, `sinfonia`)
//! take no interactive transactions, yet a client (a SQL session) wants to read, compute and
//! write. Sinfonia's answer is optimistic: read with ordinary one-round reads
//! ([`crate::page::one_round_read`]), keep what was read, then commit with one minitransaction
//! whose *compare items* check that everything read is unchanged and whose *write items*
//! apply the writes. Each participant checks its own compare items and votes; the writes apply
//! only if every participant votes yes. So the transaction is serializable at its commit: what
//! it read was still current when it wrote (Sinfonia §3.2, "a minitransaction ... compare
//! items ... read items ... write items").
//!
//! ```text
//!  client ─Minitransaction{compares, writes}─► coordinator
//!          plan: route each compare and write to its partition (a range compare to every
//!          partition of the range, each with the rows it holds) → one MINI_FRAGMENT each,
//!          Single on one partition, Coordinated on several
//!          each partition: every compare holds? apply its writes : vote abort
//!         ◄─Returned([]) or a retryable abort ("read changed")─
//! ```
//!
//! A compare carries a row's [`digest`], not the row: a page of a thousand rows checks in a
//! few kilobytes. A range compare says what a page read found over the part of its range it
//! covered (after the page's `after`, up to its `resume` key): the same rows, no more (a
//! phantom fails it) and no fewer.

use crate::fragment::{FragmentCall, OneRoundClass, OneRoundPlan};
use crate::op::{resolve, Op, OpResult};
use crate::procedure::{Ctx, Procedure};
use litmus_core::hash::FxHasher;
use litmus_core::{limits, AbortReason, Catalog, ColumnType, Error, InvalidInput, Key, PartitionId, Row, Value};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::hash::Hasher;

/// The fragment each participant of a minitransaction runs: its one argument is the postcard
/// bytes of its [`Piece`]. Registered in every [`crate::Registry`].
pub const MINI_FRAGMENT: &str = "litmus.minitransaction";

/// What a transaction read, to be found unchanged at its commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Compare {
    /// The row of `table` at `key` has this [`digest`] (`None`: there is no such row).
    Row { table: String, key: Vec<Value>, digest: Option<u64> },
    /// A page read of `table` over `start..end` after `after` (as in [`Op::ScanPage`]) found
    /// exactly `rows` (each row's key and [`digest`], in key order) up to `through`, inclusive
    /// (`None`: to the range's end).
    Range {
        table: String,
        start: Vec<Value>,
        end: Option<Vec<Value>>,
        after: Option<Key>,
        through: Option<Key>,
        rows: Vec<(Key, u64)>,
    },
}

/// A transaction's compare items and write items (`Write`, `Insert`, `Delete` operations).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Minitransaction {
    pub compares: Vec<Compare>,
    pub writes: Vec<Op>,
}

/// A digest of a row: the 64-bit hash of its encoding. Stable across machines and builds of
/// the same row encoding.
pub fn digest(row: &Row) -> u64 {
    let mut h = FxHasher::default();
    match postcard::to_stdvec(row) {
        Ok(bytes) => {
            h.write_usize(bytes.len());
            h.write(&bytes);
        }
        // A row always encodes; should it not, no digest of a real row equals this one's.
        Err(_) => h.write_u64(u64::MAX),
    }
    h.finish()
}

/// One participant's share of a minitransaction.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Piece {
    pub compares: Vec<PieceCompare>,
    pub writes: Vec<Op>,
}

/// A compare item as one participant checks it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PieceCompare {
    Row {
        table: String,
        key: Vec<Value>,
        digest: Option<u64>,
    },
    /// The participant's share of a range compare: `rows` are those of the range it holds;
    /// `key_cols` are the table's key columns (to know each row's key).
    Range {
        table: String,
        key_cols: Vec<u32>,
        start: Vec<Value>,
        end: Option<Vec<Value>>,
        after: Option<Key>,
        through: Option<Key>,
        rows: Vec<(Key, u64)>,
    },
}

fn single_target(catalog: &Catalog, partitions: u32, preferred: PartitionId, op: &Op) -> Result<PartitionId, Error> {
    let parts = resolve(catalog, partitions, op)?.partitions(partitions, preferred);
    match parts[..] {
        [p] => Ok(p),
        _ => Err(Error::Internal(format!("a point operation resolved to {} partitions", parts.len()))),
    }
}

/// Plans a minitransaction: one [`MINI_FRAGMENT`] per partition its compares and writes touch,
/// `Single` on one partition and `Coordinated` on several (each participant votes on its own
/// compares). `preferred` serves the compares of replicated tables. Bad input (an unknown
/// table, a write that is not a point write) is a typed error and plans nothing.
pub fn plan(
    catalog: &Catalog,
    partitions: u32,
    preferred: PartitionId,
    mini: &Minitransaction,
) -> Result<OneRoundPlan, Error> {
    let mut pieces: BTreeMap<PartitionId, Piece> = BTreeMap::new();
    for c in &mini.compares {
        match c {
            Compare::Row { table, key, digest } => {
                let op = Op::Read { table: table.clone(), key: key.clone() };
                let p = single_target(catalog, partitions, preferred, &op)?;
                let compare = PieceCompare::Row { table: table.clone(), key: key.clone(), digest: *digest };
                pieces.entry(p).or_default().compares.push(compare);
            }
            Compare::Range { table, start, end, after, through, rows } => {
                let t = catalog.table_by_name(table)?;
                let op = Op::Scan { table: table.clone(), start: start.clone(), end: end.clone(), limit: 1 };
                let parts = resolve(catalog, partitions, &op)?.partitions(partitions, preferred);
                let mut shares: BTreeMap<PartitionId, Vec<(Key, u64)>> =
                    parts.iter().map(|p| (*p, Vec::new())).collect();
                for (key, d) in rows {
                    let p = match parts[..] {
                        [p] => p,
                        _ => {
                            let values = Key::decode(key.as_bytes())?;
                            t.partition_of(&values, partitions).unwrap_or(preferred)
                        }
                    };
                    let Some(share) = shares.get_mut(&p) else {
                        let what = format!("a compared row of {table} outside the compared range");
                        return Err(InvalidInput::MalformedFrame(what).into());
                    };
                    share.push((key.clone(), *d));
                }
                let key_cols: Vec<u32> = t.primary_key.iter().map(|&i| i as u32).collect();
                for (p, rows) in shares {
                    pieces.entry(p).or_default().compares.push(PieceCompare::Range {
                        table: table.clone(),
                        key_cols: key_cols.clone(),
                        start: start.clone(),
                        end: end.clone(),
                        after: after.clone(),
                        through: through.clone(),
                        rows,
                    });
                }
            }
        }
    }
    for w in &mini.writes {
        if !matches!(w, Op::Write { .. } | Op::Insert { .. } | Op::Delete { .. }) {
            let what = format!("a minitransaction's write item {w:?} (only point writes)");
            return Err(InvalidInput::MalformedFrame(what).into());
        }
        // A write of a replicated table goes to every copy.
        for p in resolve(catalog, partitions, w)?.partitions(partitions, preferred) {
            pieces.entry(p).or_default().writes.push(w.clone());
        }
    }
    let fragments = pieces
        .into_iter()
        .map(|(p, piece)| {
            let bytes = postcard::to_stdvec(&piece).map_err(|e| Error::Internal(format!("encode a piece: {e}")))?;
            Ok((p, FragmentCall::new(MINI_FRAGMENT, "", vec![], vec![Value::Bytes(bytes.into())])))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let class = if fragments.len() <= 1 { OneRoundClass::Single } else { OneRoundClass::Coordinated };
    Ok(OneRoundPlan { class, fragments })
}

/// The abort a participant votes when a compare fails: retryable, as any conflict.
fn changed(table: &str) -> Error {
    Error::Abort(AbortReason::Other(format!(
        "a row of {table} this transaction read changed before it committed (minitransaction compare)"
    )))
}

async fn check(ctx: &Ctx, c: &PieceCompare) -> Result<(), Error> {
    match c {
        PieceCompare::Row { table, key, digest: expected } => {
            let row = ctx.read(table, key).await?;
            if row.as_ref().map(digest) != *expected {
                return Err(changed(table));
            }
        }
        PieceCompare::Range { table, key_cols, start, end, after, through, rows } => {
            let mut expected = rows.iter();
            let mut cursor = after.clone();
            loop {
                let op = Op::ScanPage {
                    table: table.clone(),
                    start: start.clone(),
                    end: end.clone(),
                    after: cursor.clone(),
                    rows_max: limits::SCAN_ROWS_MAX as u32,
                    bytes_max: crate::page::PAGE_BYTES_MAX,
                };
                let OpResult::Page(page) = ctx.op(op).await? else {
                    return Err(Error::Internal("a scan page answered something else".into()));
                };
                for row in &page.rows {
                    let values: Vec<Value> = key_cols
                        .iter()
                        .map(|&i| row.get(i as usize).cloned().ok_or_else(|| Error::Internal("a short row".into())))
                        .collect::<Result<_, Error>>()?;
                    let key = Key::encode(&values)?;
                    if through.as_ref().is_some_and(|t| key > *t) {
                        return expected.next().map_or(Ok(()), |_| Err(changed(table)));
                    }
                    if expected.next() != Some(&(key, digest(row))) {
                        return Err(changed(table));
                    }
                }
                match page.resume {
                    Some(k) => cursor = Some(k),
                    None => return expected.next().map_or(Ok(()), |_| Err(changed(table))),
                }
            }
        }
    }
    Ok(())
}

/// The body of [`MINI_FRAGMENT`]: every compare holds, then the writes (in the fragment's
/// buffer: the engine applies them only if every participant voted yes).
pub(crate) fn mini_fragment() -> Procedure {
    Procedure::fragment(MINI_FRAGMENT, vec![ColumnType::Bytes], |ctx: Ctx, args: Vec<Value>| async move {
        let Some(Value::Bytes(bytes)) = args.first() else {
            let e = InvalidInput::WrongArity { what: "arguments of a minitransaction".into(), expected: 1, got: 0 };
            return Err(e.into());
        };
        let piece: Piece = postcard::from_bytes(bytes)
            .map_err(|e| InvalidInput::MalformedFrame(format!("a minitransaction's piece: {e}")))?;
        for c in &piece.compares {
            check(&ctx, c).await?;
        }
        for w in piece.writes {
            ctx.op(w).await?;
        }
        Ok(vec![])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use litmus_core::{Column, Partitioning, TableSchema};

    const PARTS: u32 = 4;

    fn catalog() -> Catalog {
        let mut c = Catalog::new();
        let cols = vec![Column::new("k", ColumnType::Int), Column::new("v", ColumnType::Int)];
        c.add(TableSchema::new("kv", cols, &["k"], Partitioning::KeyPrefix { prefix_len: 1 }));
        c
    }

    fn piece(call: &FragmentCall) -> Piece {
        let Some(Value::Bytes(b)) = call.args.first() else { panic!("no piece") };
        postcard::from_bytes(b).unwrap()
    }

    /// Sinfonia §3: each participant checks the compare items of the data it holds. A range
    /// compare reaches every partition of the range — one that held none of the rows read must
    /// still find none, or a phantom goes unseen — each with exactly the rows it holds.
    #[test]
    fn sinfonia_3_each_participant_gets_the_compare_items_of_the_rows_it_holds() {
        let c = catalog();
        let rows: Vec<(Key, u64)> = (0..20).map(|k| (Key::ints(&[k]), k as u64)).collect();
        let range = Compare::Range {
            table: "kv".into(),
            start: vec![],
            end: None,
            after: None,
            through: None,
            rows: rows.clone(),
        };
        let point = Compare::Row { table: "kv".into(), key: vec![Value::Int(3)], digest: None };
        let write = Op::Write { table: "kv".into(), row: vec![Value::Int(5), Value::Int(1)].into() };
        let mini = Minitransaction { compares: vec![range, point], writes: vec![write] };
        let plan = plan(&c, PARTS, PartitionId(0), &mini).unwrap();
        assert_eq!(plan.class, OneRoundClass::Coordinated);
        assert_eq!(plan.participants().len(), PARTS as usize, "every partition of the range checks it");
        let t = c.table_by_name("kv").unwrap();
        let owner = |k: i64| t.partition_of(&[Value::Int(k)], PARTS).unwrap();
        let mut seen = 0;
        for (p, call) in &plan.fragments {
            let piece = piece(call);
            for compare in &piece.compares {
                match compare {
                    PieceCompare::Range { rows, .. } => {
                        for (key, _) in rows {
                            let k = match Key::decode(key.as_bytes()).unwrap()[..] {
                                [Value::Int(k)] => k,
                                ref other => panic!("{other:?}"),
                            };
                            assert_eq!(owner(k), *p, "row {k} checked away from its partition");
                            seen += 1;
                        }
                    }
                    PieceCompare::Row { .. } => assert_eq!(owner(3), *p),
                }
            }
            for w in &piece.writes {
                assert!(matches!(w, Op::Write { .. }));
                assert_eq!(owner(5), *p, "a write goes to its row's partition");
            }
        }
        assert_eq!(seen, rows.len(), "every compared row is checked once");
    }

    #[test]
    fn a_write_item_that_is_not_a_point_write_is_refused_and_plans_nothing() {
        let c = catalog();
        let scan = Op::Scan { table: "kv".into(), start: vec![], end: None, limit: 1 };
        let mini = Minitransaction { compares: vec![], writes: vec![scan] };
        assert!(matches!(plan(&c, PARTS, PartitionId(0), &mini), Err(Error::Invalid(InvalidInput::MalformedFrame(_)))));
        let unknown = Compare::Row { table: "nope".into(), key: vec![Value::Int(1)], digest: None };
        let mini = Minitransaction { compares: vec![unknown], writes: vec![] };
        assert!(matches!(plan(&c, PARTS, PartitionId(0), &mini), Err(Error::Invalid(InvalidInput::UnknownTable(_)))));
    }

    #[test]
    fn a_digest_tells_rows_apart_and_is_the_same_for_equal_rows() {
        let a: Row = vec![Value::Int(1), Value::Int(2)].into();
        let b: Row = vec![Value::Int(2), Value::Int(1)].into();
        assert_eq!(digest(&a), digest(&a.clone()));
        assert_ne!(digest(&a), digest(&b));
    }
}
