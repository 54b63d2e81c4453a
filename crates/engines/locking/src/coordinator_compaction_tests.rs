use super::*;
use litmus_core::{Isolation, Key, NodeId, TableId};
use proptest::prelude::*;
use rand::seq::SliceRandom;
use rand::Rng;
use rand::SeedableRng;

fn txn(seq: u64) -> TxnId {
    TxnId { node: NodeId(0), epoch: 1, seq }
}

/// A plausible log: per transaction, its records in protocol order (ACID: decided, maybe
/// ended; BASE: logic, subtransactions decided or done locally and maybe ended, maybe
/// finished, maybe ended), the transactions' logs interleaved at random.
/// `DecidedRef` is the `Decided` record byte for byte: a participant without writes is
/// listed with none, the results and the taint in order. Seen to fail with
/// `DECIDED_VARIANT = 2` (decodes as `LocalDone`) and with the read-only participant left
/// out of the writes.
#[test]
fn decided_ref_encodes_as_the_decided_record() {
    let write = |k: i64| WriteImage {
        table: TableId(0),
        key: Key::encode(&[Value::Int(k)]).unwrap(),
        row: Some(litmus_core::Row::from(vec![Value::Int(k), Value::String("s".into())])),
    };
    let unit = Unit { txn: txn(3), sub: 2 };
    let parts = BTreeSet::from([PartitionId(0), PartitionId(1), PartitionId(4)]);
    let writes = BTreeMap::from([(PartitionId(0), vec![write(0)]), (PartitionId(4), vec![write(4), write(5)])]);
    let id = |op| SubOpId { txn: txn(3), op, part: PartitionId(op) };
    let results = vec![(id(0), PartResult::Done), (id(1), PartResult::Row(None))];
    let taint = BTreeMap::from([(PartitionId(1), 9), (PartitionId(4), 2)]);
    let by_ref = litmus_protocol::payload::encode_exact(&DecidedRef {
        unit,
        parts: &parts,
        writes: &writes,
        results: &results,
        taint: &taint,
    });
    let record = CoordinatorRecord::Decided {
        unit,
        writes: parts.iter().map(|p| (*p, writes.get(p).cloned().unwrap_or_default())).collect(),
        results,
        taint: taint.into_iter().collect(),
    };
    assert_eq!(by_ref, postcard::to_stdvec(&record).unwrap());
    assert_eq!(postcard::from_bytes::<CoordinatorRecord>(&by_ref).unwrap(), record);
}

fn log(seed: u64) -> Vec<CoordinatorRecord> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let write = |p: u32| {
        (
            PartitionId(p),
            vec![WriteImage { table: TableId(0), key: Key::encode(&[Value::Int(p as i64)]).unwrap(), row: None }],
        )
    };
    let mut scripts: Vec<Vec<CoordinatorRecord>> = Vec::new();
    for t in 0..rng.gen_range(1..8u64) {
        let mut s = Vec::new();
        if rng.gen_bool(0.4) {
            let unit = Unit { txn: txn(t), sub: 0 };
            for _ in 0..rng.gen_range(1..3) {
                s.push(CoordinatorRecord::Decided {
                    unit,
                    writes: vec![write(0), write(1)],
                    results: vec![],
                    taint: vec![],
                });
                if rng.gen_bool(0.6) {
                    s.push(CoordinatorRecord::Ended { unit });
                }
            }
        } else {
            s.push(CoordinatorRecord::BaseLogic {
                txn: txn(t),
                procedure: "p".into(),
                args: vec![],
                age: t,
                isolation: Isolation::Serializable,
            });
            for sub in 1..rng.gen_range(2..5) {
                let unit = Unit { txn: txn(t), sub };
                let id = SubOpId { txn: txn(t), op: sub, part: PartitionId(sub % 2) };
                let results = vec![(id, PartResult::Done)];
                let taint = vec![(PartitionId(sub % 2), u64::from(sub))];
                if rng.gen_bool(0.3) {
                    s.push(CoordinatorRecord::LocalDone { unit, results, taint });
                } else {
                    s.push(CoordinatorRecord::Decided { unit, writes: vec![write(sub % 2)], results, taint });
                    if rng.gen_bool(0.7) {
                        s.push(CoordinatorRecord::Ended { unit });
                    }
                }
            }
            if rng.gen_bool(0.6) {
                s.push(CoordinatorRecord::BaseFinished { txn: txn(t), parts: vec![PartitionId(0), PartitionId(1)] });
                if rng.gen_bool(0.6) {
                    s.push(CoordinatorRecord::BaseEnded { txn: txn(t) });
                }
            }
        }
        scripts.push(s);
    }
    let mut order: Vec<usize> = scripts.iter().enumerate().flat_map(|(i, s)| std::iter::repeat_n(i, s.len())).collect();
    order.shuffle(&mut rng);
    let mut next = vec![0; scripts.len()];
    order
        .into_iter()
        .map(|i| {
            next[i] += 1;
            scripts[i][next[i] - 1].clone()
        })
        .collect()
}

/// The durable state replay builds (a fresh engine: volatile fields are equal).
fn replay(records: &[Vec<u8>]) -> String {
    let mut c = LockingCoordinator::new(LockingConfig { base: true, local: false });
    for r in records {
        c.apply(r).unwrap();
    }
    format!("{:?} | {:?} | {:?} | {:?}", c.txns, c.decisions, c.ending, c.logged_ending)
}

proptest! {
    /// Compaction keeps exactly what replay needs: every prefix of a log replays to the same
    /// state compacted or not, and compacting twice changes nothing more.
    #[test]
    fn compaction_replays_to_the_same_state(seed in any::<u64>()) {
        let records: Vec<Vec<u8>> = log(seed).iter().map(|r| postcard::to_stdvec(r).unwrap()).collect();
        let c = LockingCoordinator::new(LockingConfig { base: true, local: false });
        for n in 0..=records.len() {
            let prefix = records[..n].to_vec();
            let compacted = c.compact(prefix.clone());
            prop_assert_eq!(replay(&prefix), replay(&compacted), "prefix of {} records", n);
            prop_assert_eq!(c.compact(compacted.clone()), compacted);
        }
    }
}

#[test]
fn a_finished_log_compacts_to_nothing() {
    let unit = Unit { txn: txn(1), sub: 0 };
    let base = Unit { txn: txn(2), sub: 1 };
    let records: Vec<Vec<u8>> = [
        CoordinatorRecord::Decided { unit, writes: vec![], results: vec![], taint: vec![] },
        CoordinatorRecord::BaseLogic {
            txn: txn(2),
            procedure: "p".into(),
            args: vec![],
            age: 0,
            isolation: Isolation::Serializable,
        },
        CoordinatorRecord::Decided { unit: base, writes: vec![], results: vec![], taint: vec![] },
        CoordinatorRecord::Ended { unit },
        CoordinatorRecord::Ended { unit: base },
        CoordinatorRecord::BaseFinished { txn: txn(2), parts: vec![] },
        CoordinatorRecord::BaseEnded { txn: txn(2) },
    ]
    .iter()
    .map(|r| postcard::to_stdvec(r).unwrap())
    .collect();
    let c = LockingCoordinator::new(LockingConfig { base: true, local: false });
    assert!(c.compact(records.clone()).is_empty());
    // Without its last record the BASE transaction is live: its records stay.
    assert_eq!(c.compact(records[..6].to_vec()).len(), 4);
}
