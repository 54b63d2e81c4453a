//! The TCP runtime: one process per node, a framed binary protocol between nodes and clients.
//!
//! `litmus server --config node.toml` runs [`serve`]. The node's machines (its coordinator and
//! partitions) live in one [`Host`] driven by one thread — the same loop shape as an embedded
//! worker — so protocol code never meets async Rust. Tokio appears only at this edge: accepting
//! connections, reading and writing frames ([`litmus_protocol::wire`], length-delimited postcard).
//!
//! * Peer links: each node dials every other node and sends `HelloNode`; envelopes for a remote
//!   machine go out on that link. A broken link drops messages (the protocols already tolerate
//!   loss) and is redialed with backoff.
//! * Client connections: `HelloClient` is answered with `Welcome { client, node }`. The server
//!   stamps the assigned client id on everything the connection sends, and accepts only
//!   requests addressed to its own coordinator (or to a role the engine adds, e.g. Omid's oracle).
//! * A frame that does not decode or is too large is answered with `Rejected(error)` and the
//!   connection is closed; nothing it carried is applied.
//! * Every queue has a named bound (`queues`): a connection's reader waits for room in the
//!   node's inbox ([`INBOX_MAX`]; its socket then pushes back on the sender), while the node
//!   thread never waits for room anywhere — a full peer link queue ([`PEER_QUEUE_MAX`]) drops
//!   the frame as the network may, and a client that leaves [`CLIENT_QUEUE_MAX`] replies
//!   unread is disconnected ([`SLOW_CLIENT`]). Every chain of waits therefore ends at a node
//!   thread, which waits for nobody, so full queues cannot deadlock two nodes (the argument in
//!   full is in `tcp/queues.rs`).
//!
//! Layout: `client` (the blocking [`TcpTransport`]), `connection` (accepting, hellos, serving
//! a peer or a client), `peer` (dialing peers), `router` (where an envelope leaving the node
//! goes), `queues` (bounds and what a full queue does), `metrics` ([`ServerMetrics`],
//! `/metrics`); the node's config, its startup and its loop are here.

mod client;
mod connection;
mod fortify;
mod metrics;
mod peer;
mod queues;
mod router;

pub use client::{Credentials, TcpTransport};
pub use metrics::ServerMetrics;
pub use queues::{CLIENT_QUEUE_MAX, INBOX_MAX, LOCAL_QUEUE_MAX, PEER_QUEUE_MAX, SLOW_CLIENT};
pub use router::REPLY_OVERSIZED;

use crate::host::Host;
use crate::topology::{ClusterSpec, Topology};
use bytes::Bytes;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use litmus_core::{Catalog, Error, InvalidInput, NodeId, Time};
use litmus_protocol::wire::{self, ClusterIdentity, Frame, FRAME_SIZE_MAX};
use litmus_protocol::{EngineKind, Envelope, Input, Registry};
use litmus_storage::wal::FsyncPolicy;
use queues::QueueBounds;
use router::TcpRouter;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio_util::codec::LengthDelimitedCodec;

/// A node's configuration file (`litmus server --config node.toml`).
///
/// ```toml
/// node = 0
/// listen = "127.0.0.1:7100"
/// data_dir = "data/node0"
/// engine = "acid"
/// partitions = 6
/// fsync = "always"
/// peers = ["127.0.0.1:7100", "127.0.0.1:7101", "127.0.0.1:7102"]   # indexed by node id
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    pub node: u32,
    pub listen: String,
    pub data_dir: PathBuf,
    #[serde(default = "default_engine")]
    pub engine: String,
    pub partitions: u32,
    #[serde(default = "default_fsync")]
    pub fsync: FsyncPolicy,
    /// Addresses of all nodes, indexed by node id (this node's own entry included).
    pub peers: Vec<String>,
    /// Replicas of each partition: a raft group per partition on this many distinct nodes
    /// (1, the default: not replicated). At most the number of peers; recorded in the data
    /// dir with the partition count.
    #[serde(default = "default_replicas")]
    pub replicas: u32,
    /// This node lost its data directory and rejoins a running cluster: its replicas rejoin
    /// their groups without a vote (`litmus server --rejoin-after-data-loss`; not a config key).
    #[serde(skip)]
    pub rejoin_after_data_loss: bool,
    #[serde(default)]
    pub seed: u64,
    /// The cluster's name, recorded in the data dir at first start and carried by every hello.
    /// When absent, a fingerprint of the first peer list (so nodes started from the same list
    /// agree) is recorded, and later starts adopt what was recorded.
    #[serde(default)]
    pub cluster: Option<String>,
    /// Most client and peer connections open at once; more are answered `Rejected` and closed.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Largest frame accepted, in bytes (also what one connection may buffer of a partial
    /// frame). Well below the protocol's 16 MiB ceiling.
    #[serde(default = "default_max_frame_bytes")]
    pub max_frame_bytes: usize,
    /// A connection must send its hello within this many milliseconds.
    #[serde(default = "default_hello_timeout_ms")]
    pub hello_timeout_ms: u64,
    /// Serve Prometheus text at `http://ADDR/metrics` and a health check at `/health`.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// Serve the PostgreSQL wire protocol (SQL) at this address (`litmus server` starts it; the
    /// runtime itself does not read it).
    #[serde(default)]
    pub pg_listen: Option<String>,
    /// SQL users of the PostgreSQL port (`litmus server` reads it): each name maps to its
    /// password, as a SCRAM-SHA-256 verifier (`litmus pg-password` prints one) or in clear.
    /// Empty (the default): any user and database name are accepted. Distinct from `token`.
    #[serde(default)]
    pub pg_users: std::collections::BTreeMap<String, String>,
    /// Log filter (`tracing` directives: `info`, `debug`, `warn,litmus_runtime=debug`); the
    /// `RUST_LOG` environment variable overrides it. Default: `info`.
    #[serde(default)]
    pub log: Option<String>,
    /// The cluster's shared secret: every client and peer hello must carry it (`LITMUS_TOKEN`
    /// overrides it in `litmus server`). Without TLS it crosses the network in the clear.
    #[serde(default)]
    pub token: Option<String>,
    /// This node's certificate chain (PEM, leaf first). With `tls_key` and `tls_ca` it turns
    /// TLS on for every client and peer connection ([`crate::tls`]).
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    /// The private key of `tls_cert` (PEM).
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// The CA (PEM) that signed the cluster's certificates: peers are verified against it,
    /// and clients too when they present a certificate.
    #[serde(default)]
    pub tls_ca: Option<PathBuf>,
    /// Require every client to present a certificate signed by `tls_ca` (mutual TLS), beside
    /// the shared `token` if one is set.
    #[serde(default)]
    pub tls_client_auth: bool,
}

/// Default [`NodeConfig::max_connections`].
pub const MAX_CONNECTIONS_DEFAULT: usize = 1024;
/// Default [`NodeConfig::max_frame_bytes`]: 1 MiB.
pub const MAX_FRAME_BYTES_DEFAULT: usize = 1024 * 1024;

fn default_max_connections() -> usize {
    MAX_CONNECTIONS_DEFAULT
}
fn default_max_frame_bytes() -> usize {
    MAX_FRAME_BYTES_DEFAULT
}
fn default_hello_timeout_ms() -> u64 {
    10_000
}

fn default_replicas() -> u32 {
    1
}

fn default_engine() -> String {
    "acid".into()
}
fn default_fsync() -> FsyncPolicy {
    FsyncPolicy::Always
}

impl NodeConfig {
    pub fn topology(&self) -> Result<Topology, InvalidInput> {
        let t = Topology::new(self.peers.len() as u32, self.partitions)?.with_replicas(self.replicas)?;
        if self.node >= t.nodes {
            return Err(InvalidInput::Config(format!("node {} but only {} peers listed", self.node, t.nodes)));
        }
        Ok(t)
    }

    /// A config with the defaults for everything a config file may leave out.
    pub fn new(
        node: u32,
        listen: String,
        data_dir: PathBuf,
        engine: &str,
        partitions: u32,
        peers: Vec<String>,
    ) -> Self {
        NodeConfig {
            node,
            listen,
            data_dir,
            engine: engine.into(),
            partitions,
            fsync: default_fsync(),
            peers,
            replicas: 1,
            rejoin_after_data_loss: false,
            seed: 0,
            cluster: None,
            max_connections: MAX_CONNECTIONS_DEFAULT,
            max_frame_bytes: MAX_FRAME_BYTES_DEFAULT,
            hello_timeout_ms: default_hello_timeout_ms(),
            metrics_addr: None,
            pg_listen: None,
            pg_users: Default::default(),
            log: None,
            token: None,
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
            tls_client_auth: false,
        }
    }

    /// The TLS files, when TLS is on: all of `tls_cert`, `tls_key` and `tls_ca`, or none (a
    /// `Config` error names what is missing).
    pub fn tls_files(&self) -> Result<Option<crate::tls::TlsFiles>, InvalidInput> {
        match (&self.tls_cert, &self.tls_key, &self.tls_ca) {
            (Some(cert), Some(key), Some(ca)) => Ok(Some(crate::tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
                client_auth: self.tls_client_auth,
            })),
            (None, None, None) if !self.tls_client_auth => Ok(None),
            (cert, key, ca) => {
                let missing: Vec<&str> =
                    [("tls_cert", cert.is_none()), ("tls_key", key.is_none()), ("tls_ca", ca.is_none())]
                        .into_iter()
                        .filter_map(|(k, m)| m.then_some(k))
                        .collect();
                Err(InvalidInput::Config(format!(
                    "TLS needs tls_cert, tls_key and tls_ca together{}; missing {}",
                    if self.tls_client_auth { " (tls_client_auth is set)" } else { "" },
                    missing.join(", ")
                )))
            }
        }
    }

    /// The identity this config describes (before the data dir's record is consulted).
    pub fn identity(&self) -> ClusterIdentity {
        let cluster_id = match &self.cluster {
            Some(c) => c.clone(),
            None => {
                // FNV-1a of the peer list: the same on every node started from the same list.
                let mut h: u64 = 0xcbf2_9ce4_8422_2325;
                for b in self.peers.join(",").bytes() {
                    h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
                }
                format!("c{h:016x}")
            }
        };
        ClusterIdentity {
            cluster_id,
            nodes: self.peers.len() as u32,
            partitions: self.partitions,
            engine: self.engine.clone(),
            replicas: self.replicas,
        }
    }
}

/// The file in a node's data dir that records the cluster it belongs to.
pub const CLUSTER_FILE: &str = "CLUSTER.toml";

#[derive(Serialize, Deserialize)]
struct ClusterRecord {
    node: u32,
    #[serde(flatten)]
    identity: ClusterIdentity,
}

/// Checks `cfg` against what its data dir recorded at first start (recording it if this is the
/// first start). Returns the cluster's identity, or a `Config` error naming every difference.
pub fn check_data_dir(cfg: &NodeConfig) -> Result<ClusterIdentity, Error> {
    let path = cfg.data_dir.join(CLUSTER_FILE);
    let mut ours = cfg.identity();
    let io = |e: std::io::Error| Error::Storage(format!("{}: {e}", path.display()));
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let rec: ClusterRecord = toml::from_str(&text)
                .map_err(|e| Error::Invalid(InvalidInput::Config(format!("{}: {e}", path.display()))))?;
            if cfg.cluster.is_none() {
                ours.cluster_id = rec.identity.cluster_id.clone();
            }
            let mut diffs = ours.differences(&rec.identity, "configured", "recorded");
            if rec.node != cfg.node {
                diffs.push(format!("node: configured {}, recorded {}", cfg.node, rec.node));
            }
            if !diffs.is_empty() {
                return Err(Error::Invalid(InvalidInput::Config(format!(
                    "the config disagrees with the cluster recorded in {} ({}); refusing to serve. \
                     Changing a cluster's topology needs repartitioning, which LitmusDB does not do yet: \
                     restore the recorded values, or start a new cluster in an empty data dir",
                    path.display(),
                    diffs.join("; ")
                ))));
            }
            Ok(ours)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(&cfg.data_dir).map_err(io)?;
            let rec = ClusterRecord { node: cfg.node, identity: ours.clone() };
            let text = toml::to_string(&rec).map_err(|e| Error::Internal(format!("cluster record: {e}")))?;
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, text).map_err(io)?;
            std::fs::rename(&tmp, &path).map_err(io)?;
            Ok(ours)
        }
        Err(e) => Err(io(e)),
    }
}

fn codec(max_frame: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder().max_frame_length(max_frame.min(FRAME_SIZE_MAX)).new_codec()
}

fn frame_bytes(frame: &Frame) -> Bytes {
    Bytes::from(wire::encode(frame))
}

/// Runs one node until the process is killed. Opens (and recovers) the node's machines from
/// `cfg.data_dir` before it accepts connections.
pub fn serve(cfg: NodeConfig, catalog: Arc<Catalog>, registry: Arc<Registry>) -> Result<(), Error> {
    serve_until(cfg, catalog, registry, Arc::new(AtomicBool::new(false)))
}

/// [`serve`] until `stop` is set: the node finishes the step at hand, makes what it logged
/// durable, sends what that released, closes its listener and returns (an in-process server,
/// e.g. a benchmark's, does not outlive its run).
///
/// Refuses to serve (a `Config` error naming each difference) when `cfg` disagrees with the
/// cluster recorded in its data dir, or when a peer answers our hello with a different
/// cluster identity.
pub fn serve_until(
    cfg: NodeConfig,
    catalog: Arc<Catalog>,
    registry: Arc<Registry>,
    stop: Arc<AtomicBool>,
) -> Result<(), Error> {
    serve_bounded(cfg, catalog, registry, stop, QueueBounds::default())
}

/// [`serve_until`] with the given queue bounds (tests fill small ones).
pub(crate) fn serve_bounded(
    cfg: NodeConfig,
    catalog: Arc<Catalog>,
    registry: Arc<Registry>,
    stop: Arc<AtomicBool>,
    bounds: QueueBounds,
) -> Result<(), Error> {
    let opened = open_node(&cfg, catalog, registry)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("litmus-net")
        .build()
        .map_err(|e| Error::Internal(format!("tokio runtime: {e}")))?;
    let (inbox_tx, inbox_rx) = crossbeam_channel::bounded(bounds.inbox_max);
    let mut peers = Vec::new();
    let mut dialers = Vec::new();
    for (i, addr) in cfg.peers.iter().enumerate() {
        if i as u32 == cfg.node {
            peers.push(None);
            continue;
        }
        let (queue, rx) = router::PeerQueue::new(bounds.peer_queue_max);
        peers.push(Some(queue));
        dialers.push((addr.clone(), rx));
    }
    let router = Arc::new(TcpRouter {
        me: NodeId(cfg.node),
        engine: opened.engine,
        topology: opened.topology,
        identity: opened.identity,
        cfg: cfg.clone(),
        bounds,
        peers,
        clients: RwLock::new(HashMap::new()),
        metrics: Arc::new(ServerMetrics::default()),
        fatal: Mutex::new(None),
        confirmed: AtomicBool::new(false),
        tls: opened.tls,
        leader_hints: RwLock::new(HashMap::new()),
        hints_version: Default::default(),
    });
    start_network(&rt, &router, inbox_tx, dialers)?;
    let fortifier = fortify::Fortifier::new();
    let fortifying = fortifier.spawn(router.clone()).map_err(|e| Error::Internal(format!("fortify thread: {e}")))?;
    let result = node_loop(opened.host, inbox_rx, &router, &fortifier, &stop);
    fortifier.stop();
    let _ = fortifying.join();
    rt.shutdown_background();
    result
}

/// A node's machines, recovered, and what its config resolved to.
struct OpenedNode {
    host: Host,
    topology: Topology,
    engine: EngineKind,
    identity: ClusterIdentity,
    tls: Option<crate::tls::ServerTls>,
}

/// Checks `cfg` (limits, TLS files, the cluster recorded in the data dir), then opens and
/// recovers the node's machines, logging what recovery read.
fn open_node(cfg: &NodeConfig, catalog: Arc<Catalog>, registry: Arc<Registry>) -> Result<OpenedNode, Error> {
    let topology = cfg.topology()?;
    let engine: EngineKind = litmus_engines::by_name(&cfg.engine)?;
    if cfg.max_frame_bytes == 0 || cfg.max_frame_bytes > FRAME_SIZE_MAX {
        return Err(InvalidInput::Config(format!(
            "max_frame_bytes must be between 1 and {FRAME_SIZE_MAX}, got {}",
            cfg.max_frame_bytes
        ))
        .into());
    }
    let tls = match cfg.tls_files()? {
        Some(files) => Some(crate::tls::ServerTls::load(&files)?),
        None => None,
    };
    let identity = check_data_dir(cfg)?;
    let me = NodeId(cfg.node);
    let spec = ClusterSpec { engine, topology, catalog, registry, seed: cfg.seed };
    let opened = Instant::now();
    let machines = spec.machines_of_node(me, cfg.rejoin_after_data_loss);
    let host = Host::open(machines, Some(&cfg.data_dir), cfg.fsync)?.with_topology(spec.topology);
    let recovery = host.recovery();
    for m in &recovery.machines {
        tracing::debug!(
            machine = %m.addr,
            snapshot_lsn = m.snapshot.map(|s| s.0),
            snapshot_bytes = m.snapshot.map(|s| s.1),
            records = m.records,
            bytes = m.bytes,
            "recovered machine"
        );
    }
    tracing::info!(
        node = cfg.node,
        data_dir = %cfg.data_dir.display(),
        machines = recovery.machines.len(),
        snapshots = recovery.snapshots(),
        snapshot_bytes = recovery.machines.iter().filter_map(|m| m.snapshot.map(|s| s.1)).sum::<u64>(),
        records_replayed = recovery.records(),
        bytes_replayed = recovery.bytes(),
        elapsed = ?opened.elapsed(),
        "recovered"
    );
    Ok(OpenedNode { host, topology, engine, identity, tls })
}

/// Binds the listener (and the metrics endpoint, if configured), starts a dialer per peer and
/// the accept loop, and logs what the node serves.
fn start_network(
    rt: &tokio::runtime::Runtime,
    router: &Arc<TcpRouter>,
    inbox: crossbeam_channel::Sender<Envelope>,
    dialers: Vec<(String, tokio::sync::mpsc::Receiver<Bytes>)>,
) -> Result<(), Error> {
    let cfg = &router.cfg;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(&cfg.listen))
        .map_err(|e| Error::unavailable(format!("bind {}: {e}", cfg.listen)))?;
    if let Ok(local) = listener.local_addr() {
        if let Some(warning) = crate::tls::plaintext_warning(local, router.tls.is_some(), cfg.token.is_some()) {
            tracing::warn!("{warning}");
        }
    }
    if let Some(addr) = &cfg.metrics_addr {
        let l = rt
            .block_on(tokio::net::TcpListener::bind(addr))
            .map_err(|e| Error::unavailable(format!("bind metrics {addr}: {e}")))?;
        rt.spawn(metrics::serve_metrics(l, router.clone()));
        tracing::info!("metrics at http://{addr}/metrics, health at http://{addr}/health");
    }
    for (addr, rx) in dialers {
        rt.spawn(peer::dial_peer(addr, router.clone(), rx));
    }
    let ctx = connection::ConnCtx { router: router.clone(), inbox, next_client: Arc::new(AtomicU64::new(0)) };
    rt.spawn(connection::accept_loop(listener, ctx));
    tracing::info!(
        "node {} listening on {}{} (cluster {}, {} engine, {} nodes, {} partitions, fsync {:?}, max {} connections, frames ≤ {} bytes)",
        cfg.node,
        cfg.listen,
        match &router.tls {
            Some(t) if t.client_auth => " with TLS, client certificates required",
            Some(_) => " with TLS",
            None => " in plaintext",
        },
        router.identity.cluster_id,
        router.engine,
        router.topology.nodes,
        router.topology.partitions,
        cfg.fsync,
        cfg.max_connections,
        cfg.max_frame_bytes
    );
    Ok(())
}

/// How long a stopping node waits for the replicas it leads to hand their leadership over:
/// two election timeouts.
pub const HAND_OVER_MAX: Duration =
    Duration::from_millis(2 * crate::replica::ELECTION_TICKS as u64 * litmus_protocol::machine::TICK_INTERVAL_MS);

/// A test's request that one node's protocol thread stall once, as in a long step:
/// `(node + 1) << 32 | milliseconds` (0: none). Process-wide; never set outside tests.
#[doc(hidden)]
pub static STALL_ONCE: AtomicU64 = AtomicU64::new(0);

fn stall_if_asked(me: NodeId) {
    let asked = STALL_ONCE.load(Ordering::Relaxed);
    if asked != 0
        && asked >> 32 == me.0 as u64 + 1
        && STALL_ONCE.compare_exchange(asked, 0, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    {
        std::thread::sleep(Duration::from_millis(asked & 0xffff_ffff));
    }
}

/// The node's single protocol thread: step, tick, group commit, send. Messages between its own
/// machines stay on this thread (`queues::LocalQueue`) and are stepped before new input from
/// the inbox, so work in flight finishes before more is taken in; this thread never waits for
/// room in any queue (`queues`).
fn node_loop(
    mut host: Host,
    inbox: Receiver<Envelope>,
    router: &TcpRouter,
    fortifier: &fortify::Fortifier,
    stop: &AtomicBool,
) -> Result<(), Error> {
    let mut local = queues::LocalQueue::new(router.bounds.local_queue_max);
    let start = Instant::now();
    let now = || Time(start.elapsed().as_nanos() as u64);
    let tick = Duration::from_millis(litmus_protocol::machine::TICK_INTERVAL_MS);
    let mut next_tick = now() + tick;
    let mut handing_over: Option<Instant> = None;
    let mut hints_seen = 0;
    loop {
        if let Some(e) = router.fatal.lock().expect("fatal lock").take() {
            let _ = host.flush();
            return Err(e);
        }
        if stop.load(Ordering::Relaxed) {
            // Replicas this node leads hand their groups over first, so that no partition
            // waits out an election timeout for this node's planned stop.
            let until = *handing_over.get_or_insert_with(|| Instant::now() + HAND_OVER_MAX);
            if host.hand_over() == 0 || Instant::now() >= until {
                for env in host.flush()? {
                    let _ = router.route_out(env); // what is left for this node's machines goes with it
                }
                return Ok(());
            }
        }
        stall_if_asked(router.me);
        fortifier.progress();
        let t = now();
        let first = if next_tick > t && local.is_empty() {
            match inbox.recv_timeout(next_tick - t) {
                Ok(env) => Some(env),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
        } else {
            None
        };
        let t = now();
        let version = router.hints_version.load(Ordering::Relaxed);
        if version != hints_seen {
            hints_seen = version;
            for (&from, &node) in router.leader_hints.read().expect("hints lock").iter() {
                host.learn(from, node);
            }
        }
        let mut stepped = 0;
        let taken = std::iter::from_fn(|| local.pop()).chain(std::iter::from_fn(|| inbox.try_recv().ok()));
        for env in first.into_iter().chain(taken) {
            host.step(t, env.to, Input::Message(env))?;
            stepped += 1;
            if stepped >= crate::embedded::WORKER_BATCH_MAX {
                break;
            }
        }
        if t >= next_tick {
            fortifier.progress();
            host.tick(t)?;
            fortifier.publish(host.fortifications());
            next_tick = t + tick;
        }
        // Messages that wait for no record leave before the log is synced.
        for env in host.take_early() {
            if let Some(env) = router.route_out(env) {
                local.push(env, &router.metrics);
            }
        }
        if host.has_pending() {
            for env in host.flush()? {
                if let Some(env) = router.route_out(env) {
                    local.push(env, &router.metrics);
                }
            }
        }
        let counts = host.take_counts();
        if !counts.is_empty() {
            let mut all = router.metrics.engine.lock().expect("engine counts lock");
            for (name, n) in counts {
                *all.entry(name).or_default() += n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::free_port;
    use crate::Transport;
    use litmus_core::{RequestId, Value};
    use litmus_protocol::message::{ClientRequest, RequestBody, ResponseBody};
    use litmus_protocol::wire::PROTOCOL_VERSION;
    use litmus_protocol::{Addr, Message};
    use std::io::{Read, Write};

    fn metric(metrics_addr: &str, line: &str) -> Option<u64> {
        let mut s = std::net::TcpStream::connect(metrics_addr).ok()?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        text.lines().find(|l| l.starts_with(line))?.rsplit(' ').next()?.parse().ok()
    }

    /// One node with tiny queues: a client that sends hundreds of requests for large replies and
    /// reads none fills its queue and is disconnected (the connection closes, the cause is
    /// counted), while the inbox of two envelopes makes readers wait, and a well-behaved client
    /// is answered before, during and after.
    #[test]
    fn a_client_that_stops_reading_is_disconnected_and_the_node_keeps_serving() {
        let dir = tempfile::tempdir().unwrap();
        let listen = format!("127.0.0.1:{}", free_port());
        let metrics_addr = format!("127.0.0.1:{}", free_port());
        let cfg = NodeConfig {
            fsync: FsyncPolicy::Never,
            metrics_addr: Some(metrics_addr.clone()),
            ..NodeConfig::new(0, listen.clone(), dir.path().join("n0"), "nocc", 2, vec![listen.clone()])
        };
        let bounds =
            QueueBounds { inbox_max: 2, peer_queue_max: 2, client_queue_max: 4, local_queue_max: LOCAL_QUEUE_MAX };
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let stop = stop.clone();
            let (catalog, registry) = (litmus_protocol::builtin::catalog(), litmus_protocol::builtin::registry());
            std::thread::spawn(move || serve_bounded(cfg, Arc::new(catalog), Arc::new(registry), stop, bounds))
        };
        let mut good = (0..100)
            .find_map(|_| {
                let t = TcpTransport::connect(&listen).ok();
                if t.is_none() {
                    std::thread::sleep(Duration::from_millis(50));
                }
                t
            })
            .expect("the server comes up");
        let mut call = |procedure: &str, args: Vec<Value>| {
            good.request(RequestBody::Call { procedure: procedure.into(), args, retrying_for: Duration::ZERO })
        };
        let big = Value::Bytes(vec![7u8; litmus_core::limits::VALUE_SIZE_MAX - 1024].into());
        assert!(matches!(call("kv_put", vec![Value::Int(1), big]), Ok(ResponseBody::Returned(_))));

        // The slow client: hello, then requests for ~63 KiB replies, never reading one.
        let mut slow = std::net::TcpStream::connect(&listen).unwrap();
        let mut buf = Vec::new();
        wire::write_frame(&mut buf, &Frame::HelloClient { version: PROTOCOL_VERSION, expect: None, token: None });
        slow.write_all(&buf).unwrap();
        slow.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let Frame::Welcome { client, .. } = wire::read_frame(&mut slow).unwrap() else { panic!("welcome") };
        let get = |n: u64| {
            let body = RequestBody::Call {
                procedure: "kv_get".into(),
                args: vec![Value::Int(1)],
                retrying_for: Duration::ZERO,
            };
            let msg = Message::ClientRequest(ClientRequest { id: RequestId(n), body });
            let env = Envelope { from: Addr::Client(client), to: Addr::Coordinator(NodeId(0)), msg };
            wire::encode(&Frame::Envelope(env))
        };
        let disconnected = "litmus_queue_full_total{node=\"0\",engine=\"nocc\",queue=\"client\"";
        let mut sent = 0u64;
        while metric(&metrics_addr, disconnected) != Some(1) {
            assert!(sent < 20_000, "the slow client was never disconnected");
            let mut frames = Vec::new();
            for _ in 0..50 {
                sent += 1;
                let f = get(sent);
                frames.extend_from_slice(&(f.len() as u32).to_be_bytes());
                frames.extend_from_slice(&f);
            }
            if slow.write_all(&frames).is_err() {
                break; // closed under us: disconnected
            }
            assert!(matches!(call("kv_get", vec![Value::Int(2)]), Ok(ResponseBody::Returned(_))), "served meanwhile");
        }
        assert_eq!(metric(&metrics_addr, disconnected), Some(1));
        // The server lets go of the connection without waiting for the client to read: only the
        // good client's stays open.
        let open = "litmus_connections_open{node=\"0\",engine=\"nocc\"}";
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while metric(&metrics_addr, open) != Some(1) {
            assert!(std::time::Instant::now() < deadline, "the slow client's connection is still open");
            std::thread::sleep(Duration::from_millis(50));
        }
        // Its connection ends: what it reads runs out (end of stream or reset), it does not hang.
        let mut rest = Vec::new();
        if let Err(e) = slow.read_to_end(&mut rest) {
            assert!(!matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut), "{e}");
        }
        assert!(matches!(call("kv_get", vec![Value::Int(1)]), Ok(ResponseBody::Returned(_))), "still serving");
        assert!(metric(&metrics_addr, "litmus_queue_full_total{node=\"0\",engine=\"nocc\",queue=\"inbox\"").is_some());
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
    }
}
