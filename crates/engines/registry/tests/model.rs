//! Property test against a naive model: a single client's operations, run through a real
//! coordinator and real partitions (delivered by a trivial in-order "network"), must give the
//! same results as a `BTreeMap`. Also checks that recovery from the partitions' logs rebuilds
//! the same state (log, then apply, is replay).

use litmus_core::{ClientId, Error, Formula, InvalidInput, NodeId, PartitionId, Row, Time, Value};
use litmus_protocol::message::{ClientRequest, RequestBody, ResponseBody};
use litmus_protocol::op::{Op, OpResult};
use litmus_protocol::{
    builtin, Addr, Coordinator, CoordinatorConfig, Effects, Envelope, Input, Machine, Message, Partition,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

const PARTITIONS: u32 = 3;

struct Cluster {
    coordinator: Coordinator,
    partitions: Vec<Partition>,
    logs: Vec<Vec<Vec<u8>>>,
    next_request: u64,
}

impl Cluster {
    fn new() -> Self {
        let catalog = Arc::new(builtin::catalog());
        let mut coordinator = Coordinator::new(CoordinatorConfig {
            node: NodeId(0),
            engine: litmus_engines::NOCC,
            partitions: PARTITIONS,
            preferred: PartitionId(0),
            catalog: catalog.clone(),
            registry: Arc::new(builtin::registry()),
            seed: 1,
        });
        coordinator.recover(None, &[]).unwrap();
        let partitions = (0..PARTITIONS)
            .map(|p| {
                let mut m = Partition::new(PartitionId(p), litmus_engines::NOCC, catalog.clone(), 1);
                m.recover(None, &[]).unwrap();
                m
            })
            .collect();
        Cluster { coordinator, partitions, logs: vec![vec![]; PARTITIONS as usize], next_request: 0 }
    }

    /// Sends one request and delivers messages in FIFO order until the client is answered.
    fn request(&mut self, body: RequestBody) -> Result<ResponseBody, Error> {
        self.next_request += 1;
        let id = litmus_core::RequestId(self.next_request);
        let client = Addr::Client(ClientId(0));
        let mut queue = VecDeque::from([Envelope {
            from: client,
            to: Addr::Coordinator(NodeId(0)),
            msg: Message::ClientRequest(ClientRequest { id, body }),
        }]);
        let now = Time::from_millis(1);
        while let Some(env) = queue.pop_front() {
            let mut out = Effects::default();
            match env.to {
                Addr::Client(_) => match env.msg {
                    Message::ClientResponse(r) if r.id == id => return r.result,
                    other => panic!("unexpected {other:?}"),
                },
                Addr::Coordinator(_) => self.coordinator.step(now, Input::Message(env), &mut out),
                Addr::Partition(p) => {
                    self.partitions[p.0 as usize].step(now, Input::Message(env), &mut out);
                    self.logs[p.0 as usize].append(&mut out.persist);
                }
                Addr::Role(_) => unreachable!("the model runs engines without roles"),
                Addr::Replica(..) => unreachable!("the model does not replicate partitions"),
            }
            queue.extend(out.send_now);
            queue.extend(out.send);
        }
        panic!("no response");
    }
}

#[derive(Clone, Debug)]
enum ModelOp {
    Put(i64, u8),
    Get(i64),
    Delete(i64),
    Insert(i64, u8),
    Scan(i64, u32),
}

fn model_op() -> impl Strategy<Value = ModelOp> {
    let key = 0i64..24;
    prop_oneof![
        (key.clone(), any::<u8>()).prop_map(|(k, v)| ModelOp::Put(k, v)),
        key.clone().prop_map(ModelOp::Get),
        key.clone().prop_map(ModelOp::Delete),
        (key.clone(), any::<u8>()).prop_map(|(k, v)| ModelOp::Insert(k, v)),
        (key, 0u32..10).prop_map(|(k, n)| ModelOp::Scan(k, n)),
    ]
}

fn row(k: i64, v: u8) -> Row {
    vec![Value::Int(k), Value::Bytes(vec![v].into())].into()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn coordinator_and_partitions_match_a_btreemap(ops in proptest::collection::vec(model_op(), 1..60)) {
        let mut c = Cluster::new();
        let mut model: BTreeMap<i64, u8> = BTreeMap::new();
        let txn = match c.request(RequestBody::Begin { isolation: Default::default(), retrying_for: Duration::ZERO }).unwrap() {
            ResponseBody::Begun(t) => t,
            other => panic!("{other:?}"),
        };
        for op in ops {
            let kv = "kv".to_string();
            match op {
                ModelOp::Put(k, v) => {
                    let r = c.request(RequestBody::Call { procedure: "kv_put".into(), args: row(k, v).into_vec(), retrying_for: Duration::ZERO });
                    prop_assert_eq!(r, Ok(ResponseBody::Returned(vec![])));
                    model.insert(k, v);
                }
                ModelOp::Get(k) => {
                    let r = c.request(RequestBody::Call { procedure: "kv_get".into(), args: vec![Value::Int(k)], retrying_for: Duration::ZERO });
                    let want = model.get(&k).map_or(Value::Null, |v| Value::Bytes(vec![*v].into()));
                    prop_assert_eq!(r, Ok(ResponseBody::Returned(vec![want])));
                }
                ModelOp::Delete(k) => {
                    let r = c.request(RequestBody::Op { txn, op: Op::Delete { table: kv, key: vec![Value::Int(k)] } });
                    prop_assert_eq!(r, Ok(ResponseBody::Op(OpResult::Done)));
                    model.remove(&k);
                }
                ModelOp::Insert(k, v) => {
                    let r = c.request(RequestBody::Op { txn, op: Op::Insert { table: kv, row: row(k, v) } });
                    if let std::collections::btree_map::Entry::Vacant(e) = model.entry(k) {
                        prop_assert_eq!(r, Ok(ResponseBody::Op(OpResult::Done)));
                        e.insert(v);
                    } else {
                        let dup = matches!(r, Err(Error::Invalid(InvalidInput::DuplicateKey(_))));
                        prop_assert!(dup, "expected DuplicateKey, got {:?}", r);
                    }
                }
                ModelOp::Scan(k, n) => {
                    let op = Op::Scan { table: kv, start: vec![Value::Int(k)], end: Some(vec![Value::Int(k + 10)]), limit: n };
                    let r = c.request(RequestBody::Op { txn, op });
                    let want: Vec<_> = model.range(k..k + 10).take(n as usize).map(|(&k, &v)| row(k, v)).collect();
                    prop_assert_eq!(r, Ok(ResponseBody::Op(OpResult::Rows(want))));
                }
            }
        }
        // Replaying each partition's log into a fresh partition rebuilds the same rows.
        let catalog = Arc::new(builtin::catalog());
        for p in 0..PARTITIONS {
            let mut fresh = Partition::new(PartitionId(p), litmus_engines::NOCC, catalog.clone(), 1);
            fresh.recover(None, &c.logs[p as usize]).unwrap();
            prop_assert_eq!(fresh.snapshot(), c.partitions[p as usize].snapshot());
        }
        // A formula on a bytes column is rejected before anything is sent, and changes nothing.
        let before: Vec<_> = c.partitions.iter_mut().map(|p| p.snapshot()).collect();
        let bad = Op::Update { table: "kv".into(), key: vec![Value::Int(1)], updates: vec![("v".into(), Formula::Add(Value::Int(1)))] };
        let rejected = c.request(RequestBody::Op { txn, op: bad }).is_err();
        prop_assert!(rejected);
        let after: Vec<_> = c.partitions.iter_mut().map(|p| p.snapshot()).collect();
        prop_assert_eq!(before, after);
    }
}

/// A transaction whose partition never answers is aborted after `TXN_STALL_TIMEOUT`, freeing
/// the coordinator's state and answering the client with a retryable timeout.
#[test]
fn stalled_transaction_is_aborted_and_freed() {
    use litmus_protocol::coordinator::TXN_STALL_TIMEOUT;
    let mut c = Cluster::new();
    let mut out = Effects::default();
    let req = Envelope {
        from: Addr::Client(ClientId(0)),
        to: Addr::Coordinator(NodeId(0)),
        msg: Message::ClientRequest(ClientRequest {
            id: litmus_core::RequestId(1),
            body: RequestBody::Call {
                procedure: "kv_get".into(),
                args: vec![Value::Int(1)],
                retrying_for: Duration::ZERO,
            },
        }),
    };
    c.coordinator.step(Time::from_millis(1), Input::Message(req), &mut out);
    assert_eq!(out.send.len() + out.send_now.len(), 1, "one read sent to a partition, which we drop");
    assert_eq!(c.coordinator.active_txns(), 1);
    let mut out = Effects::default();
    let later = Time::from_millis(2) + TXN_STALL_TIMEOUT + std::time::Duration::from_secs(1);
    c.coordinator.step(later, Input::Tick, &mut out);
    assert_eq!(c.coordinator.active_txns(), 0);
    let resp = out.send.iter().find_map(|e| match &e.msg {
        Message::ClientResponse(r) => Some(r.clone()),
        _ => None,
    });
    let resp = resp.expect("client answered");
    assert!(matches!(resp.result, Err(Error::Abort(litmus_core::AbortReason::Timeout))));
}
