//! `--reset`: `litmus_reset_chunk` empties a table in chunks, and refuses bad
//! input with typed errors.

use litmus_client::Client;
use litmus_core::{Error, InvalidInput, Value};
use litmus_runtime::embedded::{DelayModel, EmbeddedCluster, EmbeddedConfig};
use litmus_runtime::{ClusterSpec, Topology};
use litmus_workloads::reset::{self, RESET_CHUNK_ROWS, RESET_PROCEDURE};
use std::sync::Arc;

#[test]
fn reset_empties_a_table_in_chunks_and_refuses_bad_input() {
    let (catalog, registry) = litmus_workloads::full_schema();
    let spec = ClusterSpec {
        engine: litmus_engines::ACID,
        topology: Topology::new(2, 4).unwrap(),
        catalog: Arc::new(catalog),
        registry: Arc::new(registry),
        seed: 1,
    };
    let cluster =
        EmbeddedCluster::start(spec, EmbeddedConfig { delay: DelayModel::NONE, ..EmbeddedConfig::default() }).unwrap();
    let mut c = Client::new(Box::new(cluster.transport()));
    let rows = 2 * i64::from(RESET_CHUNK_ROWS) + 7; // three chunks
    for k in 0..rows {
        c.call("kv_put", vec![Value::Int(k), Value::Bytes(vec![1u8].into())]).unwrap();
    }
    let deleted = reset::reset(&mut c, &["kv".to_string()]).unwrap();
    assert_eq!(deleted, vec![("kv".to_string(), rows as u64)]);
    for k in [0, rows / 2, rows - 1] {
        assert_eq!(c.call("kv_get", vec![Value::Int(k)]).unwrap(), vec![Value::Null], "key {k}");
    }
    // An empty table resets to nothing.
    assert_eq!(reset::reset(&mut c, &["kv".to_string()]).unwrap(), vec![("kv".to_string(), 0)]);

    let call = |c: &mut Client, table: &str, limit: i64| {
        c.call(RESET_PROCEDURE, vec![Value::String(table.into()), Value::Int(limit)]).unwrap_err()
    };
    assert!(matches!(call(&mut c, "nope", 10), Error::Invalid(InvalidInput::UnknownTable(t)) if t == "nope"));
    for limit in [0, -1, i64::from(RESET_CHUNK_ROWS) + 1] {
        assert!(matches!(call(&mut c, "kv", limit), Error::Invalid(InvalidInput::Config(_))), "limit {limit}");
    }
    drop(c);
    cluster.shutdown().unwrap();
}
