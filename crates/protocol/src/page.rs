//! Paged range reads: a scan of any size, answered a bounded page at a time.
//!
//! A range read's answer grows with the data, and a reply larger than a connection's frame
//! limit (`max_frame_bytes`, 1 MiB by default) cannot be sent. So a client reads a range as
//! pages ([`Op::ScanPage`]): each asks for at most `rows_max` rows and `bytes_max` bytes of
//! rows (estimated by [`row_bytes`], an upper bound of their encoded size), from the range's
//! start or from just after a *resume key*, and gets back [`Page`]: the rows in key order and,
//! when more may follow, the key of its last row to resume after.
//!
//! ```text
//!  client ─ScanPage{range, after: None, rows_max, bytes_max}─► coordinator
//!          resolve: Scan{start: max(start, after⁺), end, limit: rows_max} to the range's partitions
//!          each partition answers ≤ rows_max rows of the range (its own share)
//!          merge_page: sort by key, cut at rows_max rows and bytes_max bytes
//!         ◄─Page{rows, resume: Some(last key)}──  … again with after = resume, until resume: None
//! ```
//!
//! `after⁺` is the key's immediate successor (its bytes and a zero byte), so a resumed page
//! starts right after the last row sent, on every partition: keys are merged in one global
//! order, so paging by the last key skips nothing on a hash-partitioned table. A page is cut no
//! later than the last key of any partition that answered a full `rows_max` rows (beyond it
//! that partition's rows were not read), and `resume` is `None` only when no partition was cut
//! and no row was left out: the client stops without an extra empty round trip.
//!
//! **Consistency.** Each page is one operation of whatever transaction carries it. Pages read
//! in one interactive transaction see what that transaction's engine gives its reads (one
//! snapshot on the snapshot engines; read-committed pages, no locks held between pages, at
//! read committed on the locking engines). On the engines that run one-round transactions only
//! (`granola`, `granola-locking`, `sinfonia`) a client reads a page as its own one-round read
//! transaction ([`crate::message::RequestBody::Read`]): one read-only fragment per partition of
//! the range ([`SCAN_FRAGMENT`], planned by [`one_round_read`]), so each page is consistent in
//! itself and successive pages are read committed.
//!
//! **Limits.** The coordinator clamps `rows_max` to `1..=`[`litmus_core::limits::SCAN_ROWS_MAX`]
//! and `bytes_max` to [`PAGE_BYTES_MAX`]; a page always holds at least one row when the range
//! has one, so a single row over the frame limit is refused by the server as a typed
//! `Oversized` reply error (the connection stays open), never sent. A partition's own answer
//! to the coordinator is bounded by `rows_max` rows: the default page ([`PAGE_ROWS_DEFAULT`])
//! keeps it under the frame limit for rows up to ~1 KB; a peer frame over the limit is refused
//! and logged by the TCP runtime, and the operation then fails by timeout (a client that gets
//! an `Oversized` reply or a timeout on a page can ask again with a smaller page).

use crate::fragment::{FragmentCall, OneRoundClass, OneRoundPlan};
use crate::op::{resolve, Op, OpKind, OpResult, Shape};
use crate::procedure::{Ctx, Procedure};
use litmus_core::{limits, Catalog, ColumnType, Error, InvalidInput, Key, PartitionId, Row, TableId, Value};
use serde::{Deserialize, Serialize};

/// Default rows of one page: ~100 KB of TPC-C `order_line` rows; 1000 rows of up to ~1 KB keep a
/// partition's answer under the default 1 MiB frame.
pub const PAGE_ROWS_DEFAULT: u32 = 1000;
/// Default bytes of rows in one page (estimated by [`row_bytes`]): a quarter of the default frame
/// limit, so a page with its envelope stays well under it.
pub const PAGE_BYTES_DEFAULT: u32 = 256 * 1024;
/// Most bytes of rows a page may ask for; more is clamped to it.
pub const PAGE_BYTES_MAX: u32 = 4 * 1024 * 1024;

/// The fragment a one-round page read runs at each partition of its range: its one argument is
/// the postcard bytes of the [`Op::ScanPage`], its one value the postcard bytes of the
/// partition's [`PartPage`]. Registered in every [`crate::Registry`] (see
/// [`crate::Registry::fragment`]).
pub const SCAN_FRAGMENT: &str = "litmus.scan_page";

/// One page of a range read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Page {
    /// Rows in key order.
    pub rows: Vec<Row>,
    /// The key to resume after (the last row's), or `None`: the range has no more rows.
    pub resume: Option<Key>,
}

/// What one partition's fragment of a one-round page read returns: its rows of the range and
/// whether it stopped at `rows_max` (more of its rows may follow).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PartPage {
    pub rows: Vec<Row>,
    pub full: bool,
}

/// An upper bound of `v`'s postcard size: its tag, a varint of at most 10 bytes, and its bytes.
pub fn value_bytes(v: &Value) -> usize {
    match v {
        Value::Null => 1,
        Value::Int(_) | Value::Decimal(_) => 11,
        Value::String(s) => 6 + s.len(),
        Value::Bytes(b) => 6 + b.len(),
        Value::Set(s) => 6 + s.iter().map(value_bytes).sum::<usize>(),
    }
}

/// An upper bound of a row's postcard size (its length and its values).
pub fn row_bytes(row: &Row) -> usize {
    5 + row.iter().map(value_bytes).sum::<usize>()
}

/// The smallest key after `key` (its bytes and a zero byte): no key lies between the two.
pub fn successor(key: &Key) -> Key {
    let mut bytes = key.as_bytes().to_vec();
    bytes.push(0);
    Key::from(bytes)
}

/// The page's limits as the coordinator enforces them: `rows_max` in `1..=SCAN_ROWS_MAX`,
/// `bytes_max` in `1..=PAGE_BYTES_MAX`.
pub fn clamp(rows_max: u32, bytes_max: u32) -> (u32, u32) {
    (rows_max.clamp(1, limits::SCAN_ROWS_MAX as u32), bytes_max.clamp(1, PAGE_BYTES_MAX))
}

/// Merges the partitions' answers to one page: each part its rows (with their keys, any order)
/// and whether it answered a full `rows_max` rows. The rows are sorted by key and cut at
/// `rows_max`, at `bytes_max` (after the first row: a page is never empty while rows remain),
/// and after the last key of any full part; `resume` is the last row's key when anything was
/// cut or a part was full. Deterministic: the same parts give the same page in any order.
pub fn merge_page(parts: Vec<(Vec<(Key, Row)>, bool)>, rows_max: u32, bytes_max: u32) -> Page {
    let mut more = false;
    // Beyond the smallest last key of a full part, that part's rows were not read.
    let mut bound: Option<Key> = None;
    let mut rows: Vec<(Key, Row)> = Vec::new();
    for (part, full) in parts {
        if full {
            more = true;
            if let Some((last, _)) = part.iter().max_by(|a, b| a.0.cmp(&b.0)) {
                if bound.as_ref().is_none_or(|b| last < b) {
                    bound = Some(last.clone());
                }
            }
        }
        rows.extend(part);
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let total = rows.len();
    let mut kept: Vec<(Key, Row)> = Vec::with_capacity(total.min(rows_max as usize));
    let mut bytes = 0usize;
    for (key, row) in rows {
        if kept.len() >= rows_max as usize || bound.as_ref().is_some_and(|b| key > *b) {
            break;
        }
        let size = row_bytes(&row);
        if !kept.is_empty() && bytes + size > bytes_max as usize {
            break;
        }
        bytes += size;
        kept.push((key, row));
    }
    more |= kept.len() < total;
    let resume = if more { kept.last().map(|(k, _)| k.clone()) } else { None };
    Page { rows: kept.into_iter().map(|(_, r)| r).collect(), resume }
}

/// The range read an [`Op::ScanPage`] stands for, resolved: `Scan` from `max(start, after⁺)`.
/// A resume key before the range starts it at the range's start; one at or past its end reads
/// nothing (the start is clamped to the end).
pub(crate) fn resume_from(kind: OpKind, after: Option<&Key>) -> OpKind {
    let (Some(after), OpKind::Scan { start, end, limit }) = (after, &kind) else { return kind };
    let next = successor(after);
    let mut from = if next > *start { next } else { start.clone() };
    if let Some(end) = end {
        if from > *end {
            from = end.clone();
        }
    }
    OpKind::Scan { start: from, end: end.clone(), limit: *limit }
}

/// A one-round read transaction for `op` (an [`Op::ScanPage`] or a point [`Op::Read`]): one
/// read-only fragment ([`SCAN_FRAGMENT`]) at each partition the read touches (`preferred` for
/// a replicated table), `Single` on one partition and `Independent` on several (a read cannot
/// vote abort). Returns the plan, the shape its fragments' answers merge by and the table.
pub fn one_round_read(
    catalog: &Catalog,
    partitions: u32,
    preferred: PartitionId,
    op: &Op,
) -> Result<(OneRoundPlan, Shape, TableId), Error> {
    let (Op::ScanPage { table, .. } | Op::Read { table, .. }) = op else {
        return Err(InvalidInput::WrongType {
            what: "a one-round read".into(),
            expected: "a scan page or a point read".into(),
            got: format!("{op:?}"),
        }
        .into());
    };
    let resolved = resolve(catalog, partitions, op)?;
    let shape = resolved.shape();
    let parts = resolved.partitions(partitions, preferred);
    let arg =
        Value::Bytes(postcard::to_stdvec(op).map_err(|e| Error::Internal(format!("encode a scan page: {e}")))?.into());
    let fragments: Vec<(PartitionId, FragmentCall)> =
        parts.iter().map(|p| (*p, FragmentCall::new(SCAN_FRAGMENT, table, vec![], vec![arg.clone()]))).collect();
    let class = if fragments.len() == 1 { OneRoundClass::Single } else { OneRoundClass::Independent };
    Ok((OneRoundPlan { class, fragments }, shape, resolved.op.table))
}

/// Merges the values of a one-round read's fragments (one [`PartPage`] each) into its answer:
/// a page ([`OpResult::Page`]) for a scan page, a row ([`OpResult::Row`]) for a point read. A
/// value that is not a part page is a typed `MalformedFrame` error.
pub fn merge_fragment_pages(
    catalog: &Catalog,
    table: TableId,
    values: Vec<Value>,
    shape: Shape,
) -> Result<OpResult, Error> {
    let t = catalog.table(table)?;
    let mut parts = Vec::with_capacity(values.len());
    for v in values {
        let Value::Bytes(bytes) = v else {
            return Err(InvalidInput::MalformedFrame(format!("a scan fragment returned {v:?}")).into());
        };
        let part: PartPage = postcard::from_bytes(&bytes)
            .map_err(|e| InvalidInput::MalformedFrame(format!("a scan fragment's page: {e}")))?;
        parts.push(part);
    }
    match shape {
        Shape::Page { rows_max, bytes_max } => {
            let mut keyed = Vec::with_capacity(parts.len());
            for part in parts {
                let rows = part.rows.into_iter().map(|r| Ok((t.row_key(&r)?, r))).collect::<Result<Vec<_>, Error>>()?;
                keyed.push((rows, part.full));
            }
            Ok(OpResult::Page(merge_page(keyed, rows_max, bytes_max)))
        }
        Shape::Read { .. } => Ok(OpResult::Row(parts.into_iter().flat_map(|p| p.rows).next())),
        other => Err(Error::Internal(format!("a one-round read merged as {other:?}"))),
    }
}

/// The body of [`SCAN_FRAGMENT`]: the page of the range at this partition.
pub(crate) fn scan_fragment() -> Procedure {
    Procedure::fragment(SCAN_FRAGMENT, vec![ColumnType::Bytes], |ctx: Ctx, args: Vec<Value>| async move {
        let Some(Value::Bytes(bytes)) = args.first() else {
            return Err(
                InvalidInput::WrongArity { what: "arguments of a scan page".into(), expected: 1, got: 0 }.into()
            );
        };
        let op: Op = postcard::from_bytes(bytes)
            .map_err(|e| InvalidInput::MalformedFrame(format!("a scan page's operation: {e}")))?;
        if !matches!(op, Op::ScanPage { .. } | Op::Read { .. }) {
            return Err(InvalidInput::MalformedFrame(format!("a scan fragment was sent {op:?}")).into());
        }
        let part = match ctx.op(op).await? {
            OpResult::Page(page) => PartPage { full: page.resume.is_some(), rows: page.rows },
            OpResult::Row(row) => PartPage { full: false, rows: row.into_iter().collect() },
            other => return Err(Error::Internal(format!("a scan page answered {other:?}"))),
        };
        let bytes = postcard::to_stdvec(&part).map_err(|e| Error::Internal(format!("encode a page: {e}")))?;
        Ok(vec![Value::Bytes(bytes.into())])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(k: i64, len: usize) -> (Key, Row) {
        (Key::ints(&[k]), Row::from(vec![Value::Int(k), Value::Bytes(vec![7u8; len].into())]))
    }

    fn keys(page: &Page) -> Vec<i64> {
        page.rows.iter().map(|r| if let Value::Int(k) = r[0] { k } else { panic!() }).collect()
    }

    /// Pages resume after their last key and together hold every row once, in key order, on
    /// partitions answering interleaved keys (a hash-partitioned table).
    #[test]
    fn pages_merge_in_global_key_order_and_resume_after_the_last_key() {
        let part = |ks: &[i64], rows_max: u32| {
            let rows: Vec<_> = ks.iter().map(|k| kv(*k, 3)).take(rows_max as usize).collect();
            let full = rows.len() == rows_max as usize;
            (rows, full)
        };
        let (a, b) = ([1, 4, 5, 9], [2, 3, 6, 7, 8]);
        let mut seen = Vec::new();
        let mut after: Option<Key> = None;
        for _ in 0..10 {
            let from = |ks: &[i64]| -> Vec<i64> {
                ks.iter().copied().filter(|k| after.as_ref().is_none_or(|a| Key::ints(&[*k]) > *a)).collect()
            };
            let page = merge_page(vec![part(&from(&a), 3), part(&from(&b), 3)], 3, u32::MAX);
            seen.extend(keys(&page));
            after = page.resume.clone();
            if after.is_none() {
                break;
            }
        }
        assert_eq!(seen, (1..=9).collect::<Vec<_>>());
    }

    #[test]
    fn a_page_is_cut_at_its_bytes_but_never_empty() {
        let rows: Vec<_> = (0..10).map(|k| kv(k, 1000)).collect();
        let one = row_bytes(&rows[0].1);
        let page = merge_page(vec![(rows.clone(), false)], 100, (2 * one + 1) as u32);
        assert_eq!(keys(&page), vec![0, 1]);
        assert_eq!(page.resume, Some(Key::ints(&[1])));
        let page = merge_page(vec![(rows, false)], 100, 1);
        assert_eq!(keys(&page), vec![0], "a row larger than the page still comes alone");
        assert!(page.resume.is_some());
    }

    #[test]
    fn a_page_stops_at_the_last_key_of_a_full_partition() {
        // Part A answered its full 2 rows (up to key 3); part B's key 5 lies beyond what A read.
        let a = (vec![kv(1, 1), kv(3, 1)], true);
        let b = (vec![kv(2, 1), kv(5, 1)], false);
        let page = merge_page(vec![a, b], 10, u32::MAX);
        assert_eq!(keys(&page), vec![1, 2, 3]);
        assert_eq!(page.resume, Some(Key::ints(&[3])));
        let done = merge_page(vec![(vec![kv(1, 1)], false), (vec![], false)], 10, u32::MAX);
        assert_eq!(done.resume, None, "nothing cut, no part full: the range is done");
    }

    #[test]
    fn row_bytes_bounds_the_encoded_size() {
        let row = Row::from(vec![
            Value::Int(i64::MIN),
            Value::Decimal(litmus_core::Decimal(-5)),
            Value::String("abc".repeat(100).into()),
            Value::Bytes(vec![1u8; 200].into()),
            Value::Null,
            Value::set([Value::Int(1), Value::String("x".into())]),
        ]);
        assert!(postcard::to_stdvec(&row).unwrap().len() <= row_bytes(&row));
    }

    #[test]
    fn a_resume_key_starts_the_range_after_it_and_never_outside_it() {
        let scan = |s: i64, e: i64| OpKind::Scan { start: Key::ints(&[s]), end: Some(Key::ints(&[e])), limit: 5 };
        let start = |k: OpKind| match k {
            OpKind::Scan { start, .. } => start,
            _ => unreachable!(),
        };
        assert_eq!(start(resume_from(scan(1, 9), Some(&Key::ints(&[4])))), successor(&Key::ints(&[4])));
        assert_eq!(start(resume_from(scan(5, 9), Some(&Key::ints(&[2])))), Key::ints(&[5]), "before the range");
        assert_eq!(start(resume_from(scan(1, 9), Some(&Key::ints(&[20])))), Key::ints(&[9]), "past the range");
        assert_eq!(start(resume_from(scan(1, 9), None)), Key::ints(&[1]));
    }
}
