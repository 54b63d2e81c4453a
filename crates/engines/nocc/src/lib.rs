//! # `nocc` — no concurrency control (UNSAFE baseline)
//!
//! Deneva's NO_CC and Granola's no-CC baseline: every operation is applied at its partition the
//! moment it arrives, with no locks, no timestamps and no commit protocol. It is the upper bound
//! of throughput in benchmarks and the engine used to exercise the runtimes.
//!
//! **Guarantee: none.** Transactions see each other's partial effects; an abort (by the
//! procedure or by a failure) does not undo writes already applied; a transaction spanning
//! partitions is not atomic. What it does guarantee, like every engine:
//!
//! * bad input is rejected by the coordinator before anything is sent (see [`litmus_protocol::op`]);
//! * each single operation is atomic and durable: its effect is logged before it is
//!   acknowledged, and an acknowledged write survives a crash;
//! * an operation that fails at the partition (duplicate insert, update of a missing row, a
//!   formula overflow) changes nothing.
//!
//! Versions: each write gets the partition's next timestamp and older versions of the key are
//! dropped at once, so the store holds one version per key.

pub mod base;

use litmus_core::{Error, Key, PartitionId, Row, TableId, Timestamp, TxnId, Value};
use litmus_protocol::engine::{
    decode_record, Capabilities, CoordCtx, CoordinatorEngine, EngineDef, Guarantee, OneRoundTransactions, PartCtx,
    PartitionEngine, TxnOptions,
};
use litmus_protocol::fragment::{run_local, FragmentCall, OneRoundPlan};
use litmus_protocol::message::{Addr, Payload, SubOpId};
use litmus_protocol::op::{write_image, OpKind, PartOp, PartResult};
use litmus_storage::mvcc::MvccStore;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    Op {
        id: SubOpId,
        op: PartOp,
    },
    /// Fragment `index` of a one-round transaction, run whole at the partition.
    Fragment {
        txn: TxnId,
        index: u32,
        call: FragmentCall,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    Op { id: SubOpId, result: Result<PartResult, Error> },
    Fragment { txn: TxnId, index: u32, result: Result<Vec<Value>, Error> },
}

/// The redo record of one applied write.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Record {
    Put { ts: Timestamp, table: TableId, key: Key, row: Option<Row> },
}

/// The registered engines that run these halves: `nocc`, and `base` under BASIC's name
/// ([`base`]). They differ only in what they are called and what they say they promise.
#[derive(Clone, Copy, Debug)]
pub struct NoccEngine {
    name: &'static str,
    guarantee: &'static str,
}

impl NoccEngine {
    /// `nocc`: the unsafe throughput baseline.
    pub const NOCC: NoccEngine =
        NoccEngine { name: "nocc", guarantee: "none (UNSAFE baseline: no isolation, no atomicity across partitions)" };
    /// `base`: BASIC §V's RubatoDB-with-BASE, the same machinery.
    pub const BASE: NoccEngine = NoccEngine {
        name: "base",
        guarantee:
            "BASE (BASIC §V): each partition applies its part on arrival; soft state, no cross-partition consistency",
    };
}

impl EngineDef for NoccEngine {
    fn name(&self) -> &'static str {
        self.name
    }
    fn guarantee(&self) -> &'static str {
        self.guarantee
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            guarantee: Guarantee::None,
            base_transactions: false,
            one_round: true,
            interactive: true,
            batches: false,
            reads_for_update: false,
        }
    }
    fn coordinator(&self) -> Box<dyn CoordinatorEngine> {
        Box::new(NoccCoordinator::default())
    }
    fn partition(&self) -> Box<dyn PartitionEngine> {
        Box::new(NoccPartition::default())
    }
}

/// A one-round transaction in flight: fragments still out, values by fragment index.
#[derive(Debug, Default)]
struct OneRoundState {
    waiting: BTreeSet<u32>,
    values: BTreeMap<u32, Vec<Value>>,
    error: Option<Error>,
}

#[derive(Debug, Default)]
pub struct NoccCoordinator {
    one_rounds: BTreeMap<TxnId, OneRoundState>,
}

impl CoordinatorEngine for NoccCoordinator {
    fn begin(&mut self, _txn: TxnId, _opts: &TxnOptions, _ctx: &mut CoordCtx) {}

    fn issue(&mut self, id: SubOpId, op: PartOp, ctx: &mut CoordCtx) {
        ctx.send_to_partition(id.part, Request::Op { id, op });
    }

    fn commit(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        ctx.txn_done(txn, Ok(()));
    }

    fn abort(&mut self, txn: TxnId, ctx: &mut CoordCtx) {
        self.one_rounds.remove(&txn);
        ctx.txn_done(txn, Ok(()));
    }

    fn on_reply(&mut self, _from: PartitionId, reply: Payload, ctx: &mut CoordCtx) {
        match reply.decode::<Reply>() {
            Ok(Reply::Op { id, result }) => ctx.op_done(id, result),
            Ok(Reply::Fragment { txn, index, result }) => {
                let Some(state) = self.one_rounds.get_mut(&txn) else { return };
                if !state.waiting.remove(&index) {
                    return; // a duplicated reply
                }
                match result {
                    Ok(values) => drop(state.values.insert(index, values)),
                    Err(e) => drop(state.error.get_or_insert(e)),
                }
                if state.waiting.is_empty() {
                    let state = self.one_rounds.remove(&txn).expect("present");
                    let result = match state.error {
                        Some(e) => Err(e),
                        None => Ok(state.values.into_values().flatten().collect()),
                    };
                    ctx.one_round_done(txn, result);
                }
            }
            Err(_) => {}
        }
    }

    fn on_tick(&mut self, _ctx: &mut CoordCtx) {}

    fn apply(&mut self, _record: &[u8]) -> Result<(), Error> {
        Ok(())
    }

    fn one_round_transactions(&mut self) -> Option<&mut dyn OneRoundTransactions> {
        Some(self)
    }
}

impl OneRoundTransactions for NoccCoordinator {
    /// Every fragment goes to its partition in one message and runs there whole (no commit
    /// round: `nocc` has nothing to commit). Not atomic across partitions, as everything here.
    fn one_round(&mut self, txn: TxnId, plan: OneRoundPlan, ctx: &mut CoordCtx) {
        let state = self.one_rounds.entry(txn).or_default();
        for (index, (part, call)) in plan.fragments.into_iter().enumerate() {
            state.waiting.insert(index as u32);
            ctx.send_to_partition(part, Request::Fragment { txn, index: index as u32, call });
        }
    }
}

#[derive(Debug, Default)]
pub struct NoccPartition {
    /// Timestamp of the last write applied (recovered from the log).
    last_ts: Timestamp,
}

impl NoccPartition {
    /// Applies one redo record (live, right after logging it, and in recovery).
    fn apply(&mut self, record: Record, store: &mut MvccStore) -> Result<(), Error> {
        let Record::Put { ts, table, key, row } = record;
        if ts <= self.last_ts {
            return Err(Error::Internal(format!("nocc record {ts} not after {}", self.last_ts)));
        }
        let previous = store.latest(table, &key).map(|(t, _)| t);
        store.put(table, key.clone(), ts, row);
        if let Some(prev) = previous {
            store.remove_version(table, &key, prev);
        }
        self.last_ts = ts;
        Ok(())
    }

    /// Runs a fragment at once against the latest rows, then logs and applies its writes.
    fn run_fragment(&mut self, call: FragmentCall, ctx: &mut PartCtx) -> Result<Vec<Value>, Error> {
        let frag = ctx.registry.fragment(&call.fragment)?.clone();
        let fctx = litmus_protocol::procedure::Ctx::new();
        let fut = frag.start(fctx.clone(), call.args);
        let outcome = run_local(fut, &fctx, ctx.catalog, ctx.partitions, ctx.me, ctx.store)?;
        for w in outcome.writes {
            if w.row.is_none() && ctx.store.latest(w.table, &w.key).is_none_or(|(_, r)| r.is_none()) {
                continue; // deleting a missing row changes nothing
            }
            let record = Record::Put { ts: self.last_ts.next(), table: w.table, key: w.key, row: w.row };
            ctx.log(&record);
            self.apply(record, ctx.store)?;
        }
        Ok(outcome.values)
    }

    fn execute(&mut self, op: PartOp, ctx: &mut PartCtx) -> Result<PartResult, Error> {
        let table_name = ctx.catalog.table(op.table)?.name.clone();
        match &op.kind {
            OpKind::Read { key, .. } => {
                Ok(PartResult::Row(ctx.store.latest(op.table, key).and_then(|(_, r)| r.cloned())))
            }
            OpKind::Scan { start, end, limit } => {
                let end = end.as_ref().map_or(Bound::Unbounded, Bound::Excluded);
                let rows = ctx.store.scan(op.table, Bound::Included(start), end, Timestamp::MAX, *limit as usize);
                Ok(PartResult::Rows(rows))
            }
            kind => {
                let key = kind.key().expect("point write").clone();
                let current = ctx.store.latest(op.table, &key).and_then(|(_, r)| r.cloned());
                let image = write_image(kind, current, || table_name.clone())?;
                if image.is_none() && ctx.store.latest(op.table, &key).is_none_or(|(_, r)| r.is_none()) {
                    return Ok(PartResult::Done); // deleting a missing row changes nothing
                }
                let record = Record::Put { ts: self.last_ts.next(), table: op.table, key, row: image };
                ctx.log(&record);
                self.apply(record, ctx.store)?;
                Ok(PartResult::Done)
            }
        }
    }
}

impl PartitionEngine for NoccPartition {
    fn on_request(&mut self, from: Addr, req: Payload, ctx: &mut PartCtx) {
        match req.decode::<Request>() {
            Ok(Request::Op { id, op }) => {
                let result = self.execute(op, ctx);
                ctx.reply(from, Reply::Op { id, result });
            }
            Ok(Request::Fragment { txn, index, call }) => {
                let result = self.run_fragment(call, ctx);
                ctx.reply(from, Reply::Fragment { txn, index, result });
            }
            Err(_) => {}
        }
    }

    fn on_tick(&mut self, _ctx: &mut PartCtx) {}

    fn apply_bytes(&mut self, record: &[u8], store: &mut MvccStore) -> Result<(), Error> {
        self.apply(decode_record("nocc", record)?, store)
    }

    fn encode_state(&self) -> Vec<u8> {
        postcard::to_stdvec(&self.last_ts).expect("serialize")
    }

    fn decode_state(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.last_ts = postcard::from_bytes(bytes).map_err(|e| Error::Storage(format!("nocc state: {e}")))?;
        Ok(())
    }
}

/// No concurrency control (UNSAFE): the throughput upper bound.
pub const NOCC: litmus_protocol::EngineKind = litmus_protocol::EngineKind(&NoccEngine::NOCC);
/// The same operations BASE-style (apply on arrival), BASIC's comparison point; see [`base`].
pub const BASE: litmus_protocol::EngineKind = litmus_protocol::EngineKind(&NoccEngine::BASE);
