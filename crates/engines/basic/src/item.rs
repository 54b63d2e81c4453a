//! One item on one partition: `lrt(x, P)` and `list(x, P)` (BASIC §IV-B), and the rules that
//! read and change them, as pure functions (no messages, no log): the partition
//! ([`super::partition`]) logs a record and then calls these, live and in recovery alike.

use super::messages::{ItemFormula, WriteId};
use litmus_core::formula::apply_updates;
use litmus_core::{Row, Timestamp};
use litmus_protocol::message::SubOpId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// `uf(x, op, P)`: the formulas one write attempt placed on the item, with its facts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub ts: Timestamp,
    pub wid: WriteId,
    /// The operation's formulas on this item, in the order it issued them.
    pub formulas: Vec<ItemFormula>,
    /// Operation indices already placed (a resent PREPARE places nothing twice).
    pub ops: BTreeSet<u32>,
    /// FORCE-WRITE received (rule F); until then the entry is pending.
    pub forced: bool,
    /// `read_by(op, x, R)`: reads that wait for this formula while it is pending (volatile).
    #[serde(skip)]
    pub read_by: BTreeSet<SubOpId>,
}

/// `lrt(x, P)` and `list(x, P)`, ordered by timestamp.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Item {
    pub lrt: Timestamp,
    pub list: Vec<Entry>,
}

/// Applies one formula to a row (`None`: no row). A column formula that does not apply (a
/// missing row, an overflow) leaves the row unchanged: PREPARE already checked it against the
/// value it would see, so this happens only when an earlier formula it counted on was revoked,
/// and every replica skips it alike (the list is the same everywhere).
pub fn apply_formula(row: Option<Row>, f: &ItemFormula) -> Option<Row> {
    match f {
        ItemFormula::Put(r) => Some(r.clone()),
        ItemFormula::Delete => None,
        ItemFormula::Update(us) => row.map(|mut r| {
            let before = r.clone();
            match apply_updates(&mut r, us) {
                Ok(()) => r,
                Err(_) => before,
            }
        }),
    }
}

/// What rule R finds for a read at `ts` (seeing `own`'s formulas too).
#[derive(Clone, Debug, PartialEq)]
pub enum ReadView {
    /// `v_um(x)`: the stored value with every older formula applied in timestamp order.
    Value(Option<Row>),
    /// Older formulas not yet terminated: the read waits for them (`read_by`).
    Wait(Vec<WriteId>),
}

impl Item {
    /// Rule R, first half: the formulas older than `ts` (and `own`'s) over `stored`, or the
    /// pending ones it must wait for. Records `read_by` on the pending ones for `reader`.
    pub fn read(&mut self, stored: Option<Row>, ts: Timestamp, own: WriteId, reader: SubOpId) -> ReadView {
        let mut waits = Vec::new();
        for e in self.list.iter_mut().filter(|e| e.ts < ts && e.wid != own) {
            if !e.forced {
                e.read_by.insert(reader);
                waits.push(e.wid);
            }
        }
        if !waits.is_empty() {
            return ReadView::Wait(waits);
        }
        ReadView::Value(self.value_at(stored, ts, own, false))
    }

    /// The value a read at `ts` sees: forced formulas older than `ts` and `own`'s, in timestamp
    /// order; `optimistic` also applies pending ones (PREPARE's check of an update).
    pub fn value_at(&self, stored: Option<Row>, ts: Timestamp, own: WriteId, optimistic: bool) -> Option<Row> {
        self.list
            .iter()
            .filter(|e| e.wid == own || (e.ts < ts && (e.forced || optimistic)))
            .flat_map(|e| e.formulas.iter())
            .fold(stored, apply_formula)
    }

    /// Rule R, real-time order: the newest formula of another write above `ts`, pending or
    /// forced (a read arriving below it may have begun after that write was acknowledged).
    pub fn newest_above(&self, ts: Timestamp, own: WriteId) -> Option<Timestamp> {
        self.list.iter().rev().find(|e| e.ts > ts && e.wid != own).map(|e| e.ts)
    }

    /// Rule R, last step: `lrt(x, P) := max(lrt, TS(R))`.
    pub fn raise_lrt(&mut self, ts: Timestamp) {
        self.lrt = self.lrt.max(ts);
    }

    /// Rule W1: a write at `ts` is too old when a read with a larger timestamp has read the
    /// item (`ts < lrt`), or when `ts` is at or below `floor` (what the partition folded or
    /// forgot). Equal to `lrt`: the writer's own read.
    pub fn w1_revokes(&self, ts: Timestamp, floor: Timestamp) -> bool {
        ts < self.lrt || ts <= floor
    }

    /// Rule W2 (a): adds the formula of `wid` (op `op`) to the list in timestamp order.
    /// Returns false when that op was already placed (a resent PREPARE).
    pub fn place(&mut self, wid: WriteId, ts: Timestamp, op: u32, formula: ItemFormula) -> bool {
        if let Some(e) = self.list.iter_mut().find(|e| e.wid == wid) {
            assert_eq!(e.ts, ts, "one write attempt has one timestamp");
            if !e.ops.insert(op) {
                return false;
            }
            e.formulas.push(formula);
            return true;
        }
        let at = self.list.partition_point(|e| (e.ts, e.wid) < (ts, wid));
        let entry = Entry {
            ts,
            wid,
            formulas: vec![formula],
            ops: BTreeSet::from([op]),
            forced: false,
            read_by: BTreeSet::new(),
        };
        self.list.insert(at, entry);
        true
    }

    /// Rule F on this item: the formulas of `wid` take effect.
    pub fn force(&mut self, wid: WriteId) {
        if let Some(e) = self.list.iter_mut().find(|e| e.wid == wid) {
            e.forced = true;
            e.read_by.clear();
        }
    }

    /// Rule V on this item: the formulas of `wid` and their facts are removed.
    pub fn revoke(&mut self, wid: WriteId) {
        self.list.retain(|e| e.wid != wid);
    }

    /// The timestamp of the last formula of the forced prefix at or below `horizon`.
    pub fn foldable(&self, horizon: Timestamp) -> Option<Timestamp> {
        self.list.iter().take_while(|e| e.forced && e.ts <= horizon).last().map(|e| e.ts)
    }

    /// Folds the forced prefix up to `upto` over `stored` and drops it from the list: the
    /// stored versions it makes, one per formula's timestamp (reads between them need each).
    pub fn fold(&mut self, stored: Option<Row>, upto: Timestamp) -> Vec<(Timestamp, Option<Row>)> {
        let n = self.list.iter().take_while(|e| e.forced && e.ts <= upto).count();
        let mut row = stored;
        let mut versions = Vec::with_capacity(n);
        for e in self.list.drain(..n) {
            row = e.formulas.iter().fold(row, apply_formula);
            versions.push((e.ts, row.clone()));
        }
        versions
    }

    /// Pending formulas (not yet forced or revoked).
    pub fn pending(&self) -> impl Iterator<Item = &Entry> {
        self.list.iter().filter(|e| !e.forced)
    }
}
