//! The client's reads of many keys against an embedded cluster, on an engine that takes them
//! whole and on one that does not.

use litmus_client::Client;
use litmus_core::{Row, Value};
use litmus_protocol::builtin;
use litmus_protocol::op::BATCH_LEN_MAX;
use litmus_runtime::embedded::{EmbeddedCluster, EmbeddedConfig};
use litmus_runtime::{ClusterSpec, Topology};
use std::sync::Arc;

/// More keys than one operation may name come back whole and in order: several batches on
/// `acid`, single reads on `nocc` (which refuses batches by name).
#[test]
fn read_many_of_more_keys_than_a_batch_holds_returns_every_row_in_order() {
    for engine in [litmus_engines::ACID, litmus_engines::NOCC] {
        let spec = ClusterSpec {
            engine,
            topology: Topology::new(2, 4).unwrap(),
            catalog: Arc::new(builtin::catalog()),
            registry: Arc::new(builtin::registry()),
            seed: 1,
        };
        let cluster = EmbeddedCluster::start(spec, EmbeddedConfig::default()).unwrap();
        let mut c = Client::new(Box::new(cluster.transport()));
        let row = |k: i64| Row::from(vec![Value::Int(k), Value::Bytes(vec![k as u8].into())]);
        let n = BATCH_LEN_MAX as i64 + 3;
        let mut txn = c.begin().unwrap();
        for k in (0..n).step_by(2) {
            txn.write("kv", row(k)).unwrap();
        }
        txn.commit().unwrap();
        let keys: Vec<Vec<Value>> = (0..n).map(|k| vec![Value::Int(k)]).collect();
        let mut txn = c.begin().unwrap();
        let rows = txn.read_many("kv", &keys).unwrap();
        txn.commit().unwrap();
        let expected: Vec<Option<Row>> = (0..n).map(|k| (k % 2 == 0).then(|| row(k))).collect();
        assert_eq!(rows, expected, "{engine:?}");
        cluster.shutdown().unwrap();
    }
}
