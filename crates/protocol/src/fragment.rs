//! One-round transactions: a transaction declared as one fragment per participating partition.
//!
//! A *fragment* is a procedure body (`async fn(Ctx, args)`, the same [`Ctx`] operations as any
//! procedure) confined to one partition's rows. A *one-round procedure* is a pure plan from the
//! call's arguments to fragment calls, each routed by a (table, key prefix), plus the class that
//! says how participants decide (Granola §2):
//!
//! * [`OneRoundClass::Single`] — one partition;
//! * [`OneRoundClass::Independent`] — every participant reaches the same commit decision
//!   without seeing the others' data (it cannot abort on its own data);
//! * [`OneRoundClass::Coordinated`] — each participant votes commit or abort from its own data
//!   (a fragment that returns an error votes abort).
//!
//! ## The life of a one-round transaction
//!
//! ```text
//!  client ─Call{name,args}─► coordinator: plan(args) → [(fragment, route, args)]
//!                            route → partition (catalog partitioning); invalid → typed error
//!   engine takes one-round?  ├─ yes: engine.one_round(txn, plan)  → fragments travel whole,
//!                            │        operations and commit in one message per partition;
//!                            │        each partition runs its fragment locally
//!                            │        ([`run_local`]) and the engine answers OneRoundDone
//!                            └─ no:  the adapter runs the fragments in plan order as one
//!                                    ordinary procedure, op by op, under the engine's own
//!                                    concurrency control
//! ```
//!
//! So every engine runs one definition of a workload: engines built for one round (Granola,
//! coordination-free execution) take the fragments whole; coordinator-driven engines (`acid`,
//! `salt`, `omid`) run them through the adapter. `nocc` takes them whole.
//!
//! A fragment never sees time or randomness except through its arguments, so running it again
//! against the same rows gives the same writes (replicas and recovery rely on it).

use crate::op::{merge, overlay_scan, resolve, write_image, write_images, OpKind, OpResult, PartResult, Targets};
use crate::procedure::{poll_once, Ctx, Issued, ProcFuture};
use litmus_core::{Catalog, Error, InvalidInput, Key, PartitionId, Partitioning, Row, TableId, Timestamp, Value};
use litmus_storage::mvcc::MvccStore;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::task::Poll;

/// How the participants of a one-round transaction decide (Granola §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OneRoundClass {
    Single,
    Independent,
    Coordinated,
}

/// One fragment of a planned transaction: the registered fragment, where it runs (the partition
/// owning `route_key` in `route_table`) and its arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FragmentCall {
    pub fragment: String,
    pub route_table: String,
    /// A key prefix long enough to name one partition under the table's partitioning.
    pub route_key: Vec<Value>,
    pub args: Vec<Value>,
}

impl FragmentCall {
    pub fn new(fragment: &str, route_table: &str, route_key: Vec<Value>, args: Vec<Value>) -> Self {
        FragmentCall { fragment: fragment.into(), route_table: route_table.into(), route_key, args }
    }

    /// The partition this fragment runs at; a route that does not name one partition is bad
    /// input (the plan is wrong), never a panic.
    pub fn partition(&self, catalog: &Catalog, partitions: u32) -> Result<PartitionId, Error> {
        let op =
            crate::op::Op::Scan { table: self.route_table.clone(), start: self.route_key.clone(), end: None, limit: 1 };
        match resolve(catalog, partitions, &op)?.targets {
            Targets::One(p) => Ok(p),
            _ => Err(InvalidInput::Config(format!(
                "fragment {} routes by {}{:?}, which names no single partition",
                self.fragment, self.route_table, self.route_key
            ))
            .into()),
        }
    }
}

/// A planned one-round transaction: its class and its fragments with their partitions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OneRoundPlan {
    pub class: OneRoundClass,
    pub fragments: Vec<(PartitionId, FragmentCall)>,
}

impl OneRoundPlan {
    /// The participants, sorted, each once.
    pub fn participants(&self) -> Vec<PartitionId> {
        let mut p: Vec<PartitionId> = self.fragments.iter().map(|(p, _)| *p).collect();
        p.sort();
        p.dedup();
        p
    }
}

/// One write a fragment left, in its partition's buffer: `None` deletes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FragmentWrite {
    pub table: TableId,
    pub key: Key,
    pub row: Option<Row>,
}

/// What a fragment did at its partition: its return values and its writes (not yet applied).
#[derive(Clone, Debug, PartialEq)]
pub struct FragmentOutcome {
    pub values: Vec<Value>,
    pub writes: Vec<FragmentWrite>,
    /// What it read, for engines that lock (Granola's locking mode): a key, or a whole table
    /// for a range read (`None`).
    pub reads: Vec<(TableId, Option<Key>)>,
}

/// Most operations one fragment may issue (a runaway fragment is an error, not a hang).
pub const FRAGMENT_OPS_MAX: usize = 100_000;

/// Runs a fragment to completion at partition `me`, against the latest committed rows of
/// `store` overlaid with its own writes, and returns its values and writes without applying
/// them. An operation that would leave the partition is bad input; a fragment that returns an
/// error (a coordinated participant voting abort) leaves no writes. The engine decides when it
/// may run (timestamp order, locks) and applies the writes under its own log records.
pub fn run_local(
    mut fut: ProcFuture,
    ctx: &Ctx,
    catalog: &Catalog,
    partitions: u32,
    me: PartitionId,
    store: &MvccStore,
) -> Result<FragmentOutcome, Error> {
    let mut buffer: BTreeMap<(TableId, Key), Option<Row>> = BTreeMap::new();
    let mut order: Vec<(TableId, Key)> = Vec::new();
    let mut reads: Vec<(TableId, Option<Key>)> = Vec::new();
    let mut ops = 0usize;
    loop {
        if let Poll::Ready(result) = poll_once(&mut fut) {
            let values = result?;
            let writes = order
                .into_iter()
                .map(|(table, key)| {
                    let row = buffer.remove(&(table, key.clone())).expect("buffered");
                    FragmentWrite { table, key, row }
                })
                .collect();
            return Ok(FragmentOutcome { values, writes, reads });
        }
        let issued = ctx.io().take_issued();
        if issued.is_empty() {
            return Err(Error::Internal("a fragment waited on something other than its operations".into()));
        }
        for (id, what) in issued {
            ops += 1;
            if ops > FRAGMENT_OPS_MAX {
                return Err(InvalidInput::Oversized {
                    what: "operations of one fragment".into(),
                    size: ops,
                    limit: FRAGMENT_OPS_MAX,
                }
                .into());
            }
            let result = match what {
                // Control points (Salt's alkaline boundaries) mean nothing inside one fragment.
                Issued::Control(_) => Ok(OpResult::Done),
                Issued::Op(op) | Issued::UnitOp(op) => {
                    local_op(catalog, partitions, me, store, &mut buffer, &mut order, &mut reads, &op)
                }
            };
            ctx.io().complete(id, result);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn local_op(
    catalog: &Catalog,
    partitions: u32,
    me: PartitionId,
    store: &MvccStore,
    buffer: &mut BTreeMap<(TableId, Key), Option<Row>>,
    order: &mut Vec<(TableId, Key)>,
    reads: &mut Vec<(TableId, Option<Key>)>,
    op: &crate::op::Op,
) -> Result<OpResult, Error> {
    let resolved = resolve(catalog, partitions, op)?;
    let replicated = catalog.table(resolved.op.table).is_ok_and(|t| t.partitioning == Partitioning::Replicated);
    let local = match resolved.targets {
        Targets::One(p) => p == me,
        // A replicated table: every partition holds a copy; reads are served here.
        Targets::AnyReplica => true,
        // A write of a replicated table writes this partition's copy: the plan must send the
        // same write to every partition (as a load of TPC-C's ITEM does), one fragment each.
        Targets::All if replicated => true,
        // A page of a range read reads this partition's share of the range (a one-round page
        // read sends one to every partition of the range, `crate::page`).
        Targets::All => {
            !resolved.op.kind.is_write() && (partitions == 1 || matches!(op, crate::op::Op::ScanPage { .. }))
        }
        Targets::Split(_) => false, // keys on several partitions
    };
    if !local {
        return Err(InvalidInput::Config(format!(
            "a fragment at {me} issued an operation for another partition: {op:?}"
        ))
        .into());
    }
    let table = resolved.op.table;
    let shape = resolved.shape();
    let current = |buffer: &BTreeMap<(TableId, Key), Option<Row>>, key: &Key| match buffer.get(&(table, key.clone())) {
        Some(own) => own.clone(),
        None => store.latest(table, key).and_then(|(_, r)| r.cloned()),
    };
    let kind = &resolved.op.kind;
    match kind {
        // One fragment runs whole at its partition: a read for update is a read there.
        OpKind::Read { key, .. } | OpKind::ReadForUpdate { key } => reads.push((table, Some(key.clone()))),
        OpKind::Scan { .. } => reads.push((table, None)),
        OpKind::ReadMany { keys } => reads.extend(keys.iter().map(|(_, k)| (table, Some(k.clone())))),
        OpKind::WriteMany { writes } => reads.extend(writes.iter().map(|w| (table, w.key().cloned()))),
        // A write's image depends on the current row (formulas, insert of an existing key).
        kind => reads.push((table, kind.key().cloned())),
    }
    let part = match kind {
        OpKind::Read { key, .. } | OpKind::ReadForUpdate { key } => PartResult::Row(current(buffer, key)),
        OpKind::ReadMany { keys } => PartResult::Many(keys.iter().map(|(i, k)| (*i, current(buffer, k))).collect()),
        OpKind::WriteMany { writes } => {
            let name = || catalog.table(table).map(|t| t.name.clone()).unwrap_or_default();
            for (key, image) in write_images(writes, |k| current(buffer, k), name)? {
                if buffer.insert((table, key.clone()), image).is_none() {
                    order.push((table, key));
                }
            }
            PartResult::Done
        }
        OpKind::Scan { start, end, limit } => {
            let own: Vec<(Key, Option<Row>)> = buffer
                .range((table, start.clone())..)
                .take_while(|((t, k), _)| *t == table && end.as_ref().is_none_or(|e| k < e))
                .map(|((_, k), r)| (k.clone(), r.clone()))
                .collect();
            let hi = end.as_ref().map_or(Bound::Unbounded, Bound::Excluded);
            let stored = store.scan(table, Bound::Included(start), hi, Timestamp::MAX, *limit as usize + own.len());
            PartResult::Rows(overlay_scan(stored, own, *limit as usize))
        }
        kind => {
            let key = kind.key().expect("point write").clone();
            let name = || catalog.table(table).map(|t| t.name.clone()).unwrap_or_default();
            let image = write_image(kind, current(buffer, &key), name)?;
            if buffer.insert((table, key.clone()), image).is_none() {
                order.push((table, key));
            }
            PartResult::Done
        }
    };
    merge(shape, vec![part])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::bank;
    use crate::procedure::Registry;
    use litmus_core::Formula;

    /// Runs fragment `name` of the bank registry at partition `me` of a 4-partition cluster.
    fn run(name: &str, args: Vec<Value>, me: u32, store: &MvccStore) -> Result<FragmentOutcome, Error> {
        let reg = bank::registry();
        let ctx = Ctx::new();
        let fut = reg.fragment(name).unwrap().start(ctx.clone(), args);
        run_local(fut, &ctx, &bank::catalog(), 4, PartitionId(me), store)
    }

    fn store_with(id: i64, bal: i64) -> (MvccStore, PartitionId) {
        let catalog = bank::catalog();
        let t = catalog.table_by_name(bank::ACCOUNTS).unwrap();
        let mut store = MvccStore::new();
        let key = Key::encode(&[Value::Int(id)]).unwrap();
        store.put(t.id, key, Timestamp(1), Some(vec![Value::Int(id), Value::Int(bal)].into()));
        (store, t.partition_of(&[Value::Int(id)], 4).unwrap())
    }

    #[test]
    fn a_fragment_reads_the_partition_and_returns_its_writes_unapplied() {
        let (store, p) = store_with(1, 50);
        let out = run("bank_debit", vec![Value::Int(1), Value::Int(20)], p.0, &store).unwrap();
        assert_eq!(out.writes.len(), 1);
        assert_eq!(out.writes[0].row, Some(vec![Value::Int(1), Value::Int(30)].into()));
        let t = bank::catalog().table_by_name(bank::ACCOUNTS).unwrap().id;
        let unchanged = store.latest(t, &Key::encode(&[Value::Int(1)]).unwrap()).unwrap().1.cloned();
        assert_eq!(unchanged, Some(vec![Value::Int(1), Value::Int(50)].into()), "run_local applies nothing");
    }

    #[test]
    fn a_coordinated_participant_voting_abort_leaves_no_writes() {
        let (store, p) = store_with(1, 10);
        let r = run("bank_debit", vec![Value::Int(1), Value::Int(20)], p.0, &store);
        assert!(matches!(r, Err(Error::UserAbort(_))), "{r:?}");
    }

    #[test]
    fn a_fragment_that_leaves_its_partition_is_bad_input() {
        let (store, p) = store_with(1, 50);
        let elsewhere = (p.0 + 1) % 4;
        let r = run("bank_debit", vec![Value::Int(1), Value::Int(20)], elsewhere, &store);
        assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
    }

    #[test]
    fn a_fragment_reads_its_own_writes() {
        let mut reg = Registry::new();
        reg.register_fragment("twice", vec![litmus_core::ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
            let inc = [("bal", Formula::Add(Value::Int(1)))];
            ctx.update(bank::ACCOUNTS, &args, &inc).await?;
            ctx.update(bank::ACCOUNTS, &args, &inc).await?;
            Ok(ctx.read(bank::ACCOUNTS, &args).await?.unwrap_or_default().into_vec())
        });
        let (store, p) = store_with(1, 50);
        let ctx = Ctx::new();
        let fut = reg.fragment("twice").unwrap().start(ctx.clone(), vec![Value::Int(1)]);
        let out = run_local(fut, &ctx, &bank::catalog(), 4, p, &store).unwrap();
        assert_eq!(out.values, vec![Value::Int(1), Value::Int(52)]);
        assert_eq!(out.writes.len(), 1, "one key, one write");
    }
}
