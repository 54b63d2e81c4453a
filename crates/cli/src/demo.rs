//! `litmus demo`: an in-process cluster with a PostgreSQL endpoint, in one command (as
//! `cockroach demo` does). Data lives in memory and goes away with the process.

use anyhow::Context;
use litmus_protocol::EngineKind;
use litmus_runtime::embedded::{EmbeddedCluster, EmbeddedConfig};
use litmus_runtime::{ClusterSpec, Topology};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(clap::Args)]
pub struct DemoArgs {
    /// The concurrency-control engine (`litmus server --help` lists them; see docs/sql.md for
    /// what SQL gets on each).
    #[arg(long, value_parser = litmus_bench::EngineParser, default_value = "acid")]
    engine: EngineKind,
    /// Nodes of the in-process cluster.
    #[arg(long, default_value_t = 1)]
    nodes: u32,
    /// Partitions (partition p on node p mod nodes).
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Where the PostgreSQL endpoint listens (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:26257", value_name = "ADDR")]
    pg_listen: String,
}

pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let (mut catalog, mut registry) = litmus_workloads::full_schema();
    litmus_sql::install(&mut catalog, &mut registry);
    let spec = ClusterSpec {
        engine: args.engine,
        topology: Topology::new(args.nodes, args.partitions)?,
        catalog: Arc::new(catalog),
        registry: Arc::new(registry),
        seed: 1,
    };
    let cluster = Arc::new(EmbeddedCluster::start(spec, EmbeddedConfig::default()).context("starting the cluster")?);
    let sessions = cluster.clone();
    let engine = args.engine.name();
    let connect: litmus_pgwire::Connector =
        Arc::new(move || Ok(litmus_client::Client::new(Box::new(sessions.transport())).with_engine(engine)));
    let addr = litmus_pgwire::spawn(&args.pg_listen, connect, Default::default())
        .with_context(|| format!("listening on {}", args.pg_listen))?;
    let stop = Arc::new(AtomicBool::new(false));
    let on_signal = stop.clone();
    ctrlc::set_handler(move || on_signal.store(true, Ordering::Relaxed)).context("installing the signal handler")?;
    // The banner is best effort: a reader that stops reading (closes the pipe) must not stop
    // the demo.
    let banner = [
        format!(
            "LitmusDB demo: engine {}, {} node(s), {} partitions, in memory",
            args.engine.name(),
            args.nodes,
            args.partitions
        ),
        format!("SQL (PostgreSQL wire protocol) at {addr}"),
        format!("connect with:  psql -h {} -p {} -U litmus litmus", addr.ip(), addr.port()),
        format!("or the URL:    postgresql://litmus@{addr}/litmus?sslmode=disable"),
        "Ctrl-C stops the demo (and forgets its data).".to_string(),
    ];
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", banner.join("\n")).and_then(|_| out.flush());
    drop(out);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    eprintln!("stopping");
    if let Ok(cluster) = Arc::try_unwrap(cluster) {
        cluster.shutdown()?;
    }
    Ok(())
}
