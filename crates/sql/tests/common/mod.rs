//! What the SQL tests share: an embedded cluster with the SQL table, sessions over it, and
//! statements run to their output, rows or SQLSTATE.
#![allow(dead_code)]

use litmus_client::Client;
use litmus_runtime::embedded::{EmbeddedCluster, EmbeddedConfig};
use litmus_runtime::{ClusterSpec, Topology};
use litmus_sql::{parse, Output, Session, SqlError};
use std::sync::Arc;

pub fn cluster(engine: litmus_protocol::EngineKind) -> EmbeddedCluster {
    let mut catalog = litmus_protocol::builtin::catalog();
    let mut registry = litmus_protocol::builtin::registry();
    litmus_sql::install(&mut catalog, &mut registry);
    let spec = ClusterSpec {
        engine,
        topology: Topology::new(2, 4).unwrap(),
        catalog: Arc::new(catalog),
        registry: Arc::new(registry),
        seed: 1,
    };
    EmbeddedCluster::start(spec, EmbeddedConfig::default()).unwrap()
}

pub fn session(c: &EmbeddedCluster, seed: u64) -> Session {
    Session::new(Client::new(Box::new(c.transport())), seed)
}

/// A session that knows the cluster's engine (as a TCP client learns it from the server).
pub fn session_on(c: &EmbeddedCluster, engine: litmus_protocol::EngineKind, seed: u64) -> Session {
    Session::new(Client::new(Box::new(c.transport())).with_engine(engine.name()), seed)
}

/// Runs every statement of `sql`; the last one's output.
pub fn run(s: &mut Session, sql: &str) -> Result<Output, SqlError> {
    let mut last = Output::Command(String::new());
    for stmt in parse(sql)? {
        last = s.execute(&stmt, &[], &[])?;
    }
    Ok(last)
}

pub fn rows(s: &mut Session, sql: &str) -> Vec<Vec<String>> {
    match run(s, sql).unwrap_or_else(|e| panic!("{sql}: {e}")) {
        Output::Rows { rows, .. } => rows
            .iter()
            .map(|r| r.iter().map(|d| if d.is_null() { "NULL".into() } else { d.to_text() }).collect())
            .collect(),
        other => panic!("{sql}: no rows but {other:?}"),
    }
}

pub fn code(s: &mut Session, sql: &str) -> &'static str {
    run(s, sql).expect_err(sql).code
}
