//! An embedded cluster with a PostgreSQL endpoint, for the tests with real clients.

use litmus_runtime::embedded::{EmbeddedCluster, EmbeddedConfig};
use litmus_runtime::{ClusterSpec, Topology};
use std::sync::Arc;

/// Starts a 2-node cluster of `engine` and serves SQL on a free loopback port; its address.
pub fn start(engine: litmus_protocol::EngineKind) -> std::net::SocketAddr {
    start_with(engine, Default::default())
}

/// The same, admitting connections as `security` says.
pub fn start_with(
    engine: litmus_protocol::EngineKind,
    security: litmus_pgwire::auth::Security,
) -> std::net::SocketAddr {
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
    let cluster = Arc::new(EmbeddedCluster::start(spec, EmbeddedConfig::default()).unwrap());
    let connect: litmus_pgwire::Connector =
        Arc::new(move || Ok(litmus_client::Client::new(Box::new(cluster.transport()))));
    litmus_pgwire::spawn("127.0.0.1:0", connect, security).unwrap()
}

/// The path of a PostgreSQL client program, or `None` with the reason printed.
#[allow(dead_code)]
pub fn program(name: &str) -> Option<std::path::PathBuf> {
    for dir in ["/usr/bin", "/usr/local/bin", "/usr/lib/postgresql/15/bin"] {
        let p = std::path::Path::new(dir).join(name);
        if p.exists() {
            return Some(p);
        }
    }
    println!("SKIPPED: {name} is not installed (apt-get install postgresql-client)");
    None
}
