//! The Omid engine end to end on the synchronous cluster (tests/common): coordinator (the Omid
//! client), partitions (versions tagged with start timestamps) and the status oracle. What
//! snapshot isolation forbids (lost update, fractured reads, reading uncommitted or aborted
//! writes) and what it allows (write skew), plus recovery of every machine from its log.

use litmus_core::{AbortReason, Error, Formula, Isolation, Timestamp, TxnId, Value};
use litmus_omid::node::{OracleMachine, OracleWire, ORACLE};
use litmus_protocol::builtin::bank;
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::op::{Op, OpResult};
use litmus_protocol::testkit::SyncCluster;

fn cluster(accounts: i64, initial: i64) -> SyncCluster {
    let mut c = SyncCluster::new(litmus_omid::OMID, bank::catalog(), bank::registry(), 3);
    for id in 0..accounts {
        c.proc(0, "bank_open", vec![Value::Int(id), Value::Int(initial)]).unwrap();
    }
    c
}

fn begin(c: &mut SyncCluster, client: u64) -> TxnId {
    c.begin(client, Isolation::Serializable)
}

fn read(c: &mut SyncCluster, client: u64, txn: TxnId, id: i64) -> Result<i64, Error> {
    let op = Op::Read { table: bank::ACCOUNTS.into(), key: vec![Value::Int(id)] };
    match c.call(client, RequestBody::Op { txn, op })? {
        ResponseBody::Op(OpResult::Row(Some(row))) => Ok(row[1].as_int().unwrap()),
        other => panic!("{other:?}"),
    }
}

fn add(c: &mut SyncCluster, client: u64, txn: TxnId, id: i64, amount: i64) -> Result<(), Error> {
    let updates = vec![("bal".to_string(), Formula::Add(Value::Int(amount)))];
    let op = Op::Update { table: bank::ACCOUNTS.into(), key: vec![Value::Int(id)], updates };
    c.call(client, RequestBody::Op { txn, op }).map(|_| ())
}

fn commit(c: &mut SyncCluster, client: u64, txn: TxnId) -> Result<ResponseBody, Error> {
    c.call(client, RequestBody::Commit { txn })
}

fn total(c: &mut SyncCluster) -> (i64, i64) {
    let v = c.proc(9, "bank_total", vec![]).unwrap();
    (v[0].as_int().unwrap(), v[1].as_int().unwrap())
}

/// OM-E1 to OM-E3: procedures and interactive transactions begin, read, write and commit.
#[test]
fn procedures_and_interactive_transactions_commit() {
    let mut c = cluster(4, 100);
    c.proc(1, "bank_transfer_acid", vec![Value::Int(0), Value::Int(1), Value::Int(30)]).unwrap();
    c.proc(1, "bank_transfer", vec![Value::Int(2), Value::Int(3), Value::Int(5)]).unwrap();
    assert_eq!(total(&mut c), (400, 4));
    let t = begin(&mut c, 2);
    assert_eq!(read(&mut c, 2, t, 0).unwrap(), 70);
    assert_eq!(read(&mut c, 2, t, 1).unwrap(), 130);
    assert_eq!(read(&mut c, 2, t, 3).unwrap(), 105);
    assert_eq!(commit(&mut c, 2, t).unwrap(), ResponseBody::Committed);
    // A duplicate insert fails in the snapshot and changes nothing.
    let e = c.proc(1, "bank_open", vec![Value::Int(0), Value::Int(1)]).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e:?}");
    assert_eq!(total(&mut c), (400, 4));
}

/// OM-2: Two transactions update the same row concurrently: the second to commit aborts (first
/// committer wins), and the total is right.
#[test]
fn no_lost_update() {
    let mut c = cluster(2, 100);
    let (t1, t2) = (begin(&mut c, 1), begin(&mut c, 2));
    assert_eq!(read(&mut c, 1, t1, 0).unwrap(), 100);
    assert_eq!(read(&mut c, 2, t2, 0).unwrap(), 100);
    add(&mut c, 1, t1, 0, 10).unwrap();
    add(&mut c, 2, t2, 0, 20).unwrap();
    assert_eq!(commit(&mut c, 1, t1).unwrap(), ResponseBody::Committed);
    assert_eq!(commit(&mut c, 2, t2), Err(Error::Abort(AbortReason::WriteConflict)));
    assert_eq!(total(&mut c), (210, 2));
}

/// OM-5: A reader sees its snapshot: not the writes of a transaction that committed after it
/// started (all or none of them), and never uncommitted or aborted writes.
#[test]
fn snapshot_reads_are_consistent() {
    let mut c = cluster(2, 100);
    let reader = begin(&mut c, 1);
    assert_eq!(read(&mut c, 1, reader, 0).unwrap(), 100);
    // A transfer commits between the reader's two reads.
    c.proc(2, "bank_transfer_acid", vec![Value::Int(0), Value::Int(1), Value::Int(40)]).unwrap();
    assert_eq!(read(&mut c, 1, reader, 1).unwrap(), 100, "fractured read");
    // An uncommitted write is invisible, to others and after its rollback.
    let writer = begin(&mut c, 3);
    add(&mut c, 3, writer, 0, 1000).unwrap();
    let other = begin(&mut c, 4);
    assert_eq!(read(&mut c, 4, other, 0).unwrap(), 60, "dirty read");
    assert_eq!(read(&mut c, 3, writer, 0).unwrap(), 1060, "own write");
    assert_eq!(c.call(3, RequestBody::Rollback { txn: writer }).unwrap(), ResponseBody::RolledBack);
    c.settle();
    assert_eq!(read(&mut c, 1, reader, 0).unwrap(), 100);
    assert_eq!(commit(&mut c, 1, reader).unwrap(), ResponseBody::Committed);
    assert_eq!(read(&mut c, 4, other, 0).unwrap(), 60);
    commit(&mut c, 4, other).unwrap();
    assert_eq!(total(&mut c), (200, 2));
}

/// Write skew: the constraint "x + y >= 0" is checked by two transactions that each read both
/// rows and withdraw from a different one. Their write sets are disjoint, so snapshot isolation
/// commits both and the constraint breaks — SI is not serializable, and this test shows it.
#[test]
fn write_skew_is_allowed() {
    let mut c = cluster(2, 50);
    let (t1, t2) = (begin(&mut c, 1), begin(&mut c, 2));
    for (client, txn, from) in [(1, t1, 0), (2, t2, 1)] {
        let sum = read(&mut c, client, txn, 0).unwrap() + read(&mut c, client, txn, 1).unwrap();
        assert_eq!(sum, 100);
        add(&mut c, client, txn, from, -80).unwrap(); // 100 - 80 >= 0 in this snapshot
    }
    assert_eq!(commit(&mut c, 1, t1).unwrap(), ResponseBody::Committed);
    assert_eq!(commit(&mut c, 2, t2).unwrap(), ResponseBody::Committed);
    assert_eq!(total(&mut c), (-60, 2), "both withdrawals committed: the constraint is violated");
}

/// OM-8: Every machine (oracle included) crashes and recovers from its log: acknowledged commits stay,
/// the transactions in flight are aborted, and new ones run.
#[test]
fn crash_and_recovery_keep_acknowledged_commits() {
    let mut c = cluster(3, 100);
    c.proc(1, "bank_transfer_acid", vec![Value::Int(0), Value::Int(1), Value::Int(10)]).unwrap();
    let in_flight = begin(&mut c, 2);
    add(&mut c, 2, in_flight, 2, 500).unwrap();
    c.crash_all();
    assert_eq!(total(&mut c), (300, 3));
    let t = begin(&mut c, 3);
    assert_eq!(read(&mut c, 3, t, 0).unwrap(), 90);
    assert_eq!(read(&mut c, 3, t, 2).unwrap(), 100, "the crashed transaction's write is invisible");
    commit(&mut c, 3, t).unwrap();
    c.proc(1, "bank_transfer_acid", vec![Value::Int(1), Value::Int(2), Value::Int(10)]).unwrap();
    assert_eq!(total(&mut c), (300, 3));
}

/// OM-E5: Garbage collection keeps what readers need: after many overwrites and a GC round, old
/// versions are gone and every read still returns the newest committed value.
#[test]
fn garbage_collection_drops_shadowed_versions() {
    let mut c = cluster(1, 0);
    for _ in 0..20 {
        c.proc(1, "bank_transfer_acid", vec![Value::Int(0), Value::Int(0), Value::Int(0)]).unwrap();
        let t = begin(&mut c, 2);
        add(&mut c, 2, t, 0, 1).unwrap();
        commit(&mut c, 2, t).unwrap();
    }
    let versions_before = c.partitions.iter().map(|p| p.store().version_count()).sum::<usize>();
    for _ in 0..3 {
        c.tick(600); // the oracle sends Tmin every GC_INTERVAL
        c.settle();
    }
    let versions_after = c.partitions.iter().map(|p| p.store().version_count()).sum::<usize>();
    assert!(versions_before >= 20 && versions_after <= 2, "{versions_before} -> {versions_after}");
    assert_eq!(total(&mut c), (20, 1));
}

/// OM-E6: No locks: a transaction whose client went silent (never commits nor rolls back) blocks
/// nobody — another writer of the same row commits at once, and readers skip its version.
#[test]
fn a_silent_client_blocks_nobody() {
    let mut c = cluster(1, 100);
    let silent = begin(&mut c, 1);
    add(&mut c, 1, silent, 0, 1).unwrap();
    let t = begin(&mut c, 2);
    add(&mut c, 2, t, 0, 5).unwrap();
    assert_eq!(commit(&mut c, 2, t).unwrap(), ResponseBody::Committed);
    assert_eq!(total(&mut c), (105, 1));
    // The silent transaction cannot commit over the newer write (first committer wins).
    assert_eq!(commit(&mut c, 1, silent), Err(Error::Abort(AbortReason::WriteConflict)));
}

fn oracle(c: &SyncCluster) -> &litmus_omid::oracle::StatusOracle {
    let oracle = c.roles.get(&ORACLE).expect("omid has an oracle");
    oracle.as_any().and_then(|m| m.downcast_ref::<OracleMachine>()).expect("an oracle machine").oracle()
}

/// Every version a partition holds with start timestamp `ts`.
fn versions_at(c: &SyncCluster, ts: Timestamp) -> usize {
    c.partitions.iter().map(|p| p.store().all_versions().filter(|v| v.2 == ts).count()).sum()
}

/// Lets the oracle send a few GC rounds (every `GC_INTERVAL`) and the partitions answer.
fn gc_rounds(c: &mut SyncCluster, rounds: usize) {
    for _ in 0..rounds {
        c.tick(600);
        c.settle();
    }
}

/// OM-E4 and OM-4: a coordinator crashes with a transaction open. Its restarted incarnation opens a new
/// oracle session at once, which aborts the old session's transactions: `Tmin` moves on, garbage
/// collection proceeds, the orphan's version is purged from the partition, and its aborted-list
/// entry leaves once every partition reported.
#[test]
fn a_crashed_coordinators_transaction_stops_holding_tmin_once_it_restarts() {
    let mut c = cluster(2, 100);
    let orphan_txn = begin(&mut c, 1);
    add(&mut c, 1, orphan_txn, 0, 7).unwrap();
    let orphan = oracle(&c).t_min();
    assert!(oracle(&c).is_in_flight(orphan) && versions_at(&c, orphan) == 1);
    c.crash_coordinator();
    assert_eq!(oracle(&c).t_min(), orphan, "held while the coordinator is down");
    // The restarted coordinator connects at its first tick, with no work to do: its new session
    // ends the old one, whose transaction is aborted.
    c.tick(10);
    while c.deliver_one() {}
    assert!(!oracle(&c).is_in_flight(orphan) && oracle(&c).is_aborted(orphan));
    assert!(oracle(&c).t_min() > orphan);
    for _ in 0..5 {
        c.proc(2, "bank_transfer_acid", vec![Value::Int(0), Value::Int(1), Value::Int(1)]).unwrap();
    }
    let before = c.partitions.iter().map(|p| p.store().version_count()).sum::<usize>();
    gc_rounds(&mut c, 3);
    let after = c.partitions.iter().map(|p| p.store().version_count()).sum::<usize>();
    assert_eq!(versions_at(&c, orphan), 0, "the orphan's version is purged");
    assert!(!oracle(&c).is_aborted(orphan), "its aborted-list entry left");
    assert!(after < before && after <= 2, "GC proceeds past the orphan: {before} -> {after}");
    assert_eq!(total(&mut c), (200, 2));
}

/// A client that began a transaction, wrote a version and went silent (§IV "Silent Clients"):
/// the oracle pushes to it, gets no `Ack`, drops it — and now also aborts its transaction, whose
/// version garbage collection then purges. A late duplicate of its put cannot bring it back.
#[test]
fn a_silent_clients_transaction_is_aborted_and_its_version_purged() {
    use litmus_omid::node::OracleRequest;
    use litmus_omid::{engine::Request as PartReq, messages::Request as OracleCall};
    use litmus_protocol::message::{PartitionRequest, SubOpId};
    use litmus_protocol::{Addr, Envelope, Message};
    let mut c = cluster(2, 100);
    let silent = Addr::Client(litmus_core::ClientId(77));
    let to_oracle = |tag, body| Envelope {
        from: silent,
        to: ORACLE,
        msg: OracleWire::Request(OracleRequest { tag, body }).into_message(),
    };
    c.requeue(to_oracle(1, OracleCall::ConnectAs { session: 1 }));
    c.requeue(to_oracle(2, OracleCall::Begin));
    c.settle();
    let ts = oracle(&c).t_min();
    assert!(oracle(&c).is_in_flight(ts));
    let table = bank::catalog().table_by_name(bank::ACCOUNTS).unwrap().id;
    let key = litmus_core::Key::encode(&[Value::Int(0)]).unwrap();
    let put = Envelope {
        from: silent,
        to: Addr::Partition(litmus_core::PartitionId(0)),
        msg: Message::PartitionRequest(PartitionRequest {
            body: litmus_protocol::Payload::new(PartReq::Put {
                tag: 3,
                id: SubOpId {
                    txn: litmus_core::TxnId { node: litmus_core::NodeId(9), epoch: 1, seq: 1 },
                    op: 0,
                    part: litmus_core::PartitionId(0),
                },
                ts,
                table,
                key: key.clone(),
                row: Some(vec![Value::Int(0), Value::Int(1_000_000)].into()),
            }),
        }),
    };
    c.requeue(put.clone());
    c.settle();
    assert_eq!(versions_at(&c, ts), 1);
    // Others work for 40 s of virtual time; the silent client never acknowledges the push.
    for _ in 0..40 {
        c.proc(2, "bank_transfer_acid", vec![Value::Int(0), Value::Int(1), Value::Int(1)]).unwrap();
        c.tick(1000);
        c.settle();
    }
    assert!(!oracle(&c).is_in_flight(ts), "aborted when its session was dropped");
    gc_rounds(&mut c, 3);
    assert_eq!(versions_at(&c, ts), 0, "purged");
    assert!(!oracle(&c).is_aborted(ts), "forgotten");
    c.requeue(put); // a late duplicate: refused below the GC mark
    c.settle();
    assert_eq!(versions_at(&c, ts), 0, "a late put cannot resurrect the version");
    assert_eq!(total(&mut c), (200, 2));
}

/// OM-8 and OM-E5: After the oracle recovers, the transactions in flight at its crash are a crash range. Their
/// versions (here: an open write of a crashed coordinator) are purged by GC and the range leaves
/// the oracle's metadata; committed members of the range are untouched.
#[test]
fn a_crash_ranges_versions_are_purged_and_the_range_forgotten() {
    let mut c = cluster(3, 100);
    let in_flight = begin(&mut c, 2);
    add(&mut c, 2, in_flight, 2, 500).unwrap();
    let lost = oracle(&c).t_min();
    c.crash_all();
    c.tick(10); // the recovered oracle's first step logs the crash range
    assert_eq!(oracle(&c).crash_ranges().len(), 1);
    assert!(oracle(&c).is_aborted(lost) && versions_at(&c, lost) == 1);
    c.proc(1, "bank_transfer_acid", vec![Value::Int(0), Value::Int(1), Value::Int(10)]).unwrap();
    gc_rounds(&mut c, 3);
    assert_eq!(versions_at(&c, lost), 0);
    assert!(oracle(&c).crash_ranges().is_empty(), "every partition purged the range");
    assert_eq!(total(&mut c), (300, 3));
    let t = begin(&mut c, 3);
    assert_eq!(read(&mut c, 3, t, 2).unwrap(), 100);
    assert_eq!(read(&mut c, 3, t, 0).unwrap(), 90);
    commit(&mut c, 3, t).unwrap();
}

mod scans {
    //! Scans honour `nv` (OM-E2): a page carries the newest `VERSIONS_PER_READ` versions of each key
    //! and the coordinator fetches older ones only for keys whose visible version was not among
    //! them. Checked against a naive model: the committed map at each reader's start.

    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const KEYS: i64 = 6;

    #[derive(Clone, Debug)]
    enum Step {
        /// A transaction writes (`Some`) or deletes (`None`) these keys and commits.
        Commit(Vec<(i64, Option<i64>)>),
        /// A transaction writes these keys and stays open forever: invisible versions.
        Open(Vec<i64>),
        /// A reader starts (its snapshot is the model now).
        Reader,
        /// Reader `n mod readers` scans from `from` with `limit`.
        Scan { reader: usize, from: i64, limit: u32 },
    }

    fn step() -> impl Strategy<Value = Step> {
        let write = (0..KEYS, prop::option::weighted(0.85, 0..1000i64));
        prop_oneof![
            4 => prop::collection::vec(write, 1..4).prop_map(Step::Commit),
            3 => prop::collection::vec(0..KEYS, 1..3).prop_map(Step::Open),
            1 => Just(Step::Reader),
            3 => (0..8usize, 0..KEYS, 1..8u32).prop_map(|(reader, from, limit)| Step::Scan { reader, from, limit }),
        ]
    }

    fn write(c: &mut SyncCluster, client: u64, txn: TxnId, id: i64, bal: Option<i64>) {
        let table = bank::ACCOUNTS.to_string();
        let op = match bal {
            Some(bal) => Op::Write { table, row: vec![Value::Int(id), Value::Int(bal)].into() },
            None => Op::Delete { table, key: vec![Value::Int(id)] },
        };
        c.call(client, RequestBody::Op { txn, op }).unwrap();
    }

    fn scan(c: &mut SyncCluster, client: u64, txn: TxnId, from: i64, limit: u32) -> Vec<(i64, i64)> {
        let (start, end) = (vec![Value::Int(from)], Some(vec![Value::Int(KEYS)]));
        let op = Op::Scan { table: bank::ACCOUNTS.into(), start, end, limit };
        match c.call(client, RequestBody::Op { txn, op }).unwrap() {
            ResponseBody::Op(OpResult::Rows(rows)) => {
                rows.iter().map(|r| (r[0].as_int().unwrap(), r[1].as_int().unwrap())).collect()
            }
            other => panic!("{other:?}"),
        }
    }

    /// Runs the steps against the model; returns the most versions any key had.
    fn run(steps: Vec<Step>) -> Result<usize, TestCaseError> {
        let mut c = SyncCluster::new(litmus_omid::OMID, bank::catalog(), bank::registry(), 2);
        let mut model: BTreeMap<i64, i64> = BTreeMap::new();
        let mut readers: Vec<(TxnId, BTreeMap<i64, i64>)> = Vec::new();
        let mut max_versions = 0;
        for s in steps {
            match s {
                Step::Commit(writes) => {
                    let t = begin(&mut c, 1);
                    for &(id, bal) in &writes {
                        write(&mut c, 1, t, id, bal);
                    }
                    prop_assert_eq!(commit(&mut c, 1, t).unwrap(), ResponseBody::Committed);
                    for (id, bal) in writes {
                        match bal {
                            Some(bal) => model.insert(id, bal),
                            None => model.remove(&id),
                        };
                    }
                }
                Step::Open(ids) => {
                    let t = begin(&mut c, 2);
                    for id in ids {
                        write(&mut c, 2, t, id, Some(-1));
                    }
                }
                Step::Reader => {
                    let t = begin(&mut c, 3);
                    scan(&mut c, 3, t, 0, 1); // takes the snapshot now
                    readers.push((t, model.clone()));
                }
                Step::Scan { reader, from, limit } => {
                    let (txn, snapshot) = match readers.get(reader % readers.len().max(1)) {
                        Some((t, m)) => (*t, m.clone()),
                        None => continue,
                    };
                    let got = scan(&mut c, 3, txn, from, limit);
                    let want: Vec<(i64, i64)> =
                        snapshot.range(from..).take(limit as usize).map(|(&k, &v)| (k, v)).collect();
                    prop_assert_eq!(got, want, "reader {:?} from {} limit {}", txn, from, limit);
                }
            }
            let per_key = c
                .partitions
                .iter()
                .flat_map(|p| p.store().all_versions().map(|(_, k, _)| k.clone()).collect::<Vec<_>>())
                .fold(BTreeMap::<_, usize>::new(), |mut m, k| {
                    *m.entry(k).or_default() += 1;
                    m
                });
            max_versions = max_versions.max(per_key.values().copied().max().unwrap_or(0));
        }
        for (t, _) in readers {
            commit(&mut c, 3, t).unwrap();
        }
        Ok(max_versions)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn scans_return_the_readers_snapshot_over_keys_with_many_versions(
            steps in prop::collection::vec(step(), 1..50)
        ) {
            run(steps)?;
        }
    }

    /// The case the property is about, spelled out: a key with its snapshot version below more
    /// than `nv` newer invisible versions (commits after the reader, open writers), scanned with
    /// a limit smaller than the number of keys.
    #[test]
    fn a_scan_reaches_a_version_below_nv_newer_invisible_ones() {
        use litmus_omid::engine::VERSIONS_PER_READ;
        let mut steps = vec![Step::Commit(vec![(0, Some(1)), (1, Some(10)), (2, Some(20))]), Step::Reader];
        for i in 0..VERSIONS_PER_READ as i64 + 2 {
            steps.push(Step::Commit(vec![(1, Some(100 + i))]));
            steps.push(Step::Open(vec![1, 2]));
        }
        steps.push(Step::Commit(vec![(0, None)]));
        steps.push(Step::Scan { reader: 0, from: 0, limit: 2 });
        steps.push(Step::Scan { reader: 0, from: 1, limit: 5 });
        let versions = run(steps).unwrap();
        assert!(versions > 2 * VERSIONS_PER_READ as usize, "{versions} versions of the hot key");
    }
}
