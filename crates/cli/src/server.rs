//! `litmus server`: one node of a TCP cluster.

use anyhow::Context;
use litmus_protocol::EngineKind;
use litmus_runtime::tcp::{serve_until, NodeConfig};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(clap::Args)]
pub struct ServerArgs {
    /// Node configuration (TOML): node, listen, data_dir, engine, partitions, fsync, peers,
    /// and optionally cluster, max_connections, max_frame_bytes, metrics_addr, pg_listen, pg_users, log, token,
    /// tls_cert, tls_key, tls_ca, tls_client_auth (see examples/cluster-3/).
    #[arg(long)]
    config: PathBuf,
    /// Override `node` (this node's id: its index in `peers`).
    #[arg(long)]
    node: Option<u32>,
    /// Override `listen` (address to accept peers and clients on).
    #[arg(long)]
    listen: Option<String>,
    /// Override `data_dir` (where the WALs and snapshots live).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Override `engine` (fixed when the cluster is created: a node refuses to serve with
    /// another).
    #[arg(long, value_parser = litmus_bench::EngineParser)]
    engine: Option<EngineKind>,
    /// Override `partitions` (fixed when the cluster is created).
    #[arg(long)]
    partitions: Option<u32>,
    /// Override `metrics_addr`: serve Prometheus text at http://ADDR/metrics and /health.
    #[arg(long)]
    metrics_addr: Option<String>,
    /// Override `pg_listen`: serve SQL over the PostgreSQL wire protocol at ADDR (psql,
    /// pgbench and PostgreSQL drivers connect there; see docs/sql.md).
    #[arg(long, value_name = "ADDR")]
    pg_listen: Option<String>,
    /// Override `fsync` (always: fdatasync every group commit; never: leave it to the OS).
    #[arg(long)]
    fsync: Option<String>,
    /// Override `tls_cert`: this node's certificate chain (PEM). TLS needs it, --tls-key and
    /// --tls-ca together.
    #[arg(long, value_name = "PEM")]
    tls_cert: Option<PathBuf>,
    /// Override `tls_key`: the private key of the certificate (PEM).
    #[arg(long, value_name = "PEM")]
    tls_key: Option<PathBuf>,
    /// Override `tls_ca`: the CA (PEM) that signed the cluster's certificates; peers (and
    /// clients that present a certificate) are verified against it.
    #[arg(long, value_name = "PEM")]
    tls_ca: Option<PathBuf>,
    /// Set `tls_client_auth`: every client must present a certificate signed by the CA.
    #[arg(long)]
    tls_client_auth: bool,
    /// This node lost its data directory and rejoins its running cluster (`replicas > 1`):
    /// each of its replicas catches up from the others but never votes again, since it may
    /// have voted or acknowledged entries before the loss. Replicas that find their data
    /// ignore it. Giving such a replica its vote back needs a membership change (not built).
    #[arg(long)]
    rejoin_after_data_loss: bool,
}

pub fn load_config(args: &ServerArgs) -> anyhow::Result<NodeConfig> {
    let text = std::fs::read_to_string(&args.config).with_context(|| format!("reading {}", args.config.display()))?;
    let mut cfg: NodeConfig = toml::from_str(&text).with_context(|| format!("parsing {}", args.config.display()))?;
    if let Some(n) = args.node {
        cfg.node = n;
    }
    if let Some(l) = &args.listen {
        cfg.listen = l.clone();
    }
    if let Some(d) = &args.data_dir {
        cfg.data_dir = d.clone();
    }
    if let Some(e) = args.engine {
        cfg.engine = e.name().into();
    }
    if let Some(p) = args.partitions {
        cfg.partitions = p;
    }
    if let Some(m) = &args.metrics_addr {
        cfg.metrics_addr = Some(m.clone());
    }
    if let Some(p) = &args.pg_listen {
        cfg.pg_listen = Some(p.clone());
    }
    if let Some(f) = &args.fsync {
        cfg.fsync = f.parse()?;
    }
    if let Some(p) = &args.tls_cert {
        cfg.tls_cert = Some(p.clone());
    }
    if let Some(p) = &args.tls_key {
        cfg.tls_key = Some(p.clone());
    }
    if let Some(p) = &args.tls_ca {
        cfg.tls_ca = Some(p.clone());
    }
    if args.tls_client_auth {
        cfg.tls_client_auth = true;
    }
    cfg.rejoin_after_data_loss = args.rejoin_after_data_loss;
    if let Ok(token) = std::env::var("LITMUS_TOKEN") {
        if !token.is_empty() {
            cfg.token = Some(token);
        }
    }
    cfg.topology()?;
    cfg.tls_files()?;
    Ok(cfg)
}

/// How long a SQL session waits for one answer from its coordinator. One SQL statement can be a
/// large transaction (`pgbench -i`'s `ALTER TABLE ... ADD PRIMARY KEY` re-keys 100,000 rows, and
/// its commit carries all of them), which the default 5 s took for a lost answer (`40003`) on a
/// loaded 3-node cluster.
const SQL_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How a SQL session reaches this node's coordinator: a client of the node's own address (as
/// its peers know it, so its certificate names it), with the cluster's token and TLS.
fn own_client(cfg: &NodeConfig) -> anyhow::Result<litmus_pgwire::Connector> {
    let addr = cfg.peers.get(cfg.node as usize).cloned().context("this node is not in peers")?;
    let tls = match cfg.tls_files()? {
        Some(files) => Some(litmus_client::ClientTls::load(&files.ca, Some((&files.cert, &files.key)), None)?),
        None => None,
    };
    let credentials = litmus_client::Credentials { token: cfg.token.clone(), tls };
    Ok(Arc::new(move || {
        litmus_client::Client::connect_any_with_timeout(std::slice::from_ref(&addr), &credentials, SQL_REQUEST_TIMEOUT)
    }))
}

/// Who the SQL port admits: the config's `pg_users` (SCRAM-SHA-256), over TLS with the node's
/// certificate when TLS is on.
fn sql_security(cfg: &NodeConfig) -> anyhow::Result<litmus_pgwire::auth::Security> {
    let users = if cfg.pg_users.is_empty() {
        None
    } else {
        Some(Arc::new(litmus_pgwire::auth::Users::from_config(&cfg.pg_users).map_err(anyhow::Error::msg)?))
    };
    let tls = match cfg.tls_files()? {
        Some(files) => {
            let (acceptor, cert_pem) = litmus_runtime::tls::ServerTls::acceptor_for(&files, b"postgresql")?;
            Some(litmus_pgwire::auth::SqlTls { acceptor, cert_pem })
        }
        None => None,
    };
    Ok(litmus_pgwire::auth::Security { users, tls })
}

/// `litmus pg-password`: the verifier of the password on stdin's first line (its line ending
/// dropped), so the password itself never reaches a config file or a shell history.
pub fn pg_password() -> anyhow::Result<()> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).context("reading the password from stdin")?;
    let password = line.strip_suffix('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).unwrap_or(&line);
    anyhow::ensure!(!password.is_empty(), "no password on stdin");
    println!("{}", litmus_pgwire::auth::Verifier::of_password(password));
    Ok(())
}

/// Sends `tracing` events to stderr, filtered by `RUST_LOG` when set, else by the config's
/// `log` (default `info`).
fn init_logging(cfg: &NodeConfig) -> anyhow::Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if !env.trim().is_empty() => EnvFilter::try_new(&env).with_context(|| format!("RUST_LOG={env:?}"))?,
        _ => {
            let level = cfg.log.as_deref().unwrap_or("info");
            EnvFilter::try_new(level).with_context(|| format!("log = {level:?} in the config"))?
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .try_init()
        .map_err(|e| anyhow::anyhow!("logging: {e}"))
}

pub fn run(args: ServerArgs) -> anyhow::Result<()> {
    let cfg = load_config(&args)?;
    init_logging(&cfg)?;
    // The plaintext-beyond-loopback warning is logged by the runtime once the listener is
    // bound (litmus_runtime::tls::plaintext_warning), where the real address is known.
    tracing::info!(
        node = cfg.node,
        engine = %cfg.engine,
        partitions = cfg.partitions,
        nodes = cfg.peers.len(),
        data_dir = %cfg.data_dir.display(),
        fsync = ?cfg.fsync,
        "starting (config {})",
        args.config.display()
    );
    let (mut catalog, mut registry) = litmus_workloads::full_schema();
    // SQL tables and their catalog live in built-in tables (litmus_sql::catalog); a planned
    // CALL runs as a built-in one-round procedure (litmus_sql::call_one_round).
    litmus_sql::install(&mut catalog, &mut registry);
    if let Some(pg) = &cfg.pg_listen {
        let security = sql_security(&cfg)?;
        let (users, tls) = (security.users.as_ref().map_or(0, |u| u.len()), security.tls.is_some());
        let addr = litmus_pgwire::spawn(pg, own_client(&cfg)?, security).with_context(|| format!("pg_listen {pg}"))?;
        tracing::info!(%addr, users, tls, "serving SQL over the PostgreSQL wire protocol");
    }
    // SIGTERM / SIGINT: the node finishes the step at hand, makes what it logged durable,
    // answers what that released and exits 0.
    let stop = Arc::new(AtomicBool::new(false));
    let on_signal = stop.clone();
    ctrlc::set_handler(move || {
        if on_signal.swap(true, Ordering::Relaxed) {
            tracing::warn!("second signal, exiting now");
            std::process::exit(130);
        }
        tracing::info!("signal received, draining");
    })
    .context("installing the SIGTERM handler")?;
    let node = cfg.node;
    serve_until(cfg, Arc::new(catalog), Arc::new(registry), stop)?;
    tracing::info!("node {node} stopped cleanly");
    Ok(())
}
