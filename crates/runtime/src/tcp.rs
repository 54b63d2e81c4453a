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

use crate::host::Host;
use crate::topology::{ClusterSpec, Host as NetHost, Topology};
use crate::transport::Transport;
use bytes::Bytes;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use futures_util::{SinkExt, StreamExt};
use litmus_core::{Catalog, ClientId, Error, InvalidInput, NodeId, Time};
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::wire::{self, ClusterIdentity, Frame, FRAME_SIZE_MAX, PROTOCOL_VERSION};
use litmus_protocol::{Addr, ClientSession, EngineKind, Envelope, Input, Message, Registry};
use litmus_storage::wal::FsyncPolicy;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

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

/// A blocking client connection to a `litmus server`. Every request has a deadline (the
/// connection's timeout, counted from the send): when it passes the call returns
/// `Unavailable { outcome_unknown: true }` — whatever else the server sends meanwhile (late
/// answers to earlier requests) does not extend it, and a frame cut by the deadline stays
/// buffered, so the stream never loses its framing.
pub struct TcpTransport {
    stream: Conn,
    engine: String,
    cluster: ClusterIdentity,
    session: ClientSession,
    timeout: Duration,
    buf: Vec<u8>,
    /// Bytes received and not yet decoded (at most part of one frame between requests).
    inbox: Vec<u8>,
    /// Coordinators to (re)connect to, tried in turn from the one last connected.
    addrs: Vec<String>,
    current: usize,
    /// The connection was lost: the next request reconnects first (with backoff, to any of
    /// `addrs`), as a new client session.
    broken: bool,
    /// The cluster's shared token (sent in every hello) and TLS settings.
    auth: Credentials,
}

/// How a client proves itself to a cluster: the shared token (sent in the hello) and, for a
/// cluster with TLS, the CA to verify servers against and an optional client certificate.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    pub token: Option<String>,
    pub tls: Option<crate::tls::ClientTls>,
}

/// A client's byte stream: plain TCP or TLS over it (rustls's blocking `StreamOwned`).
enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => &s.sock,
        }
    }

    /// Writes all of `buf` and pushes it (and TLS's record around it) onto the socket.
    fn send(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.write_all(buf),
            Conn::Tls(s) => {
                s.write_all(buf)?;
                s.flush()
            }
        }
    }
}

impl std::io::Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl TcpTransport {
    pub fn connect(addr: &str) -> Result<TcpTransport, Error> {
        Self::connect_with_timeout(addr, litmus_protocol::client::REQUEST_TIMEOUT_DEFAULT)
    }

    pub fn connect_with_timeout(addr: &str, timeout: Duration) -> Result<TcpTransport, Error> {
        Self::connect_any(&[addr.to_string()], timeout)
    }

    /// Connects to the first of `addrs` that answers; after a lost connection the transport
    /// reconnects (with backoff) to the same coordinator or, failing that, to the next one.
    pub fn connect_any(addrs: &[String], timeout: Duration) -> Result<TcpTransport, Error> {
        Self::connect_any_with_token(addrs, timeout, None)
    }

    /// [`TcpTransport::connect_any`] to a cluster that requires the shared `token`.
    pub fn connect_any_with_token(
        addrs: &[String],
        timeout: Duration,
        token: Option<&str>,
    ) -> Result<TcpTransport, Error> {
        let auth = Credentials { token: token.map(str::to_string), tls: None };
        Self::connect_any_with(addrs, timeout, &auth)
    }

    /// [`TcpTransport::connect_any`] with a token and/or TLS. A refused certificate or token is
    /// `Invalid(Unauthenticated)` naming the cause; it is not retried on the other addresses.
    pub fn connect_any_with(addrs: &[String], timeout: Duration, auth: &Credentials) -> Result<TcpTransport, Error> {
        let mut last = Error::unavailable("no coordinator address given");
        for (i, addr) in addrs.iter().enumerate() {
            match Self::handshake(addr, timeout, auth) {
                Ok((stream, engine, cluster, session)) => {
                    return Ok(TcpTransport {
                        stream,
                        engine,
                        cluster,
                        session,
                        timeout,
                        buf: Vec::new(),
                        inbox: Vec::new(),
                        addrs: addrs.to_vec(),
                        current: i,
                        broken: false,
                        auth: auth.clone(),
                    })
                }
                Err(e @ Error::Invalid(InvalidInput::Unauthenticated(_))) => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Reconnects after a lost connection: each address in turn from the current one, with
    /// backoff, for at most the request timeout. Nothing was sent yet, so a failure here is a
    /// plain (retryable) `Unavailable`.
    fn reconnect(&mut self) -> Result<(), Error> {
        let deadline = Instant::now() + self.timeout;
        let mut backoff = Duration::from_millis(20);
        let mut last = None;
        for attempt in 0.. {
            let i = (self.current + attempt) % self.addrs.len();
            match Self::handshake(&self.addrs[i], self.timeout, &self.auth) {
                Ok((stream, engine, cluster, session)) => {
                    (self.stream, self.engine, self.cluster, self.session) = (stream, engine, cluster, session);
                    self.inbox.clear();
                    self.current = i;
                    self.broken = false;
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
            if Instant::now() + backoff > deadline {
                break;
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
        let reason = match last {
            Some(Error::Unavailable { reason, .. }) => reason,
            Some(other) => other.to_string(),
            None => "no address".into(),
        };
        Err(Error::unavailable(format!("reconnecting: {reason}")))
    }

    fn handshake(
        addr: &str,
        timeout: Duration,
        auth: &Credentials,
    ) -> Result<(Conn, String, ClusterIdentity, ClientSession), Error> {
        let io = |e: std::io::Error| Error::unavailable(format!("connect {addr}: {e}"));
        let stream = TcpStream::connect(addr).map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        let mut conn = match &auth.tls {
            None => Conn::Plain(stream),
            Some(tls) => {
                let tls_conn = rustls::ClientConnection::new(tls.config(), tls.server_name(addr)?)
                    .map_err(|e| Error::Internal(format!("tls: {e}")))?;
                let mut s = rustls::StreamOwned::new(tls_conn, stream);
                while s.conn.is_handshaking() {
                    s.conn.complete_io(&mut s.sock).map_err(|e| crate::tls::client_error(addr, &e))?;
                }
                Conn::Tls(Box::new(s))
            }
        };
        let mut buf = Vec::new();
        let hello = Frame::HelloClient { version: PROTOCOL_VERSION, expect: None, token: auth.token.clone() };
        wire::write_frame(&mut buf, &hello);
        conn.send(&buf).map_err(|e| crate::tls::client_error(addr, &e))?;
        // Read the answer by hand, not with `wire::read_frame`, to keep a TLS alert's cause
        // (under TLS 1.3 a refused client certificate surfaces here, after the handshake).
        let mut len = [0u8; 4];
        let read = |conn: &mut Conn, buf: &mut [u8]| {
            std::io::Read::read_exact(conn, buf).map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => {
                    Error::unavailable(format!("connect {addr}: the server closed the connection during the hello"))
                }
                _ => crate::tls::client_error(addr, &e),
            })
        };
        read(&mut conn, &mut len)?;
        let n = u32::from_be_bytes(len) as usize;
        if len[0] == crate::tls::TLS_HANDSHAKE_BYTE && auth.tls.is_none() {
            return Err(InvalidInput::Unauthenticated(format!(
                "the server at {addr} answered in TLS: connect with --tls-ca"
            ))
            .into());
        }
        if n > FRAME_SIZE_MAX {
            return Err(InvalidInput::Oversized { what: "frame".into(), size: n, limit: FRAME_SIZE_MAX }.into());
        }
        let mut payload = vec![0u8; n];
        read(&mut conn, &mut payload)?;
        match wire::decode(&payload)? {
            Frame::Welcome { client, node, engine, cluster } => {
                Ok((conn, engine, cluster, ClientSession::new(client, Addr::Coordinator(node), timeout)))
            }
            Frame::Rejected(e) => Err(e),
            other => Err(Error::Internal(format!("unexpected handshake frame {other:?}"))),
        }
    }
}

impl TcpTransport {
    /// The identity of the cluster the server belongs to (from its `Welcome`).
    pub fn cluster(&self) -> &ClusterIdentity {
        &self.cluster
    }
}

impl Transport for TcpTransport {
    fn server_engine(&self) -> Option<&str> {
        Some(&self.engine)
    }

    fn server_layout(&self) -> Option<(NodeId, Topology)> {
        let Addr::Coordinator(node) = self.session.coordinator() else { return None };
        let t = Topology::new(self.cluster.nodes, self.cluster.partitions).ok()?;
        Some((node, t.with_replicas(self.cluster.replicas).ok()?))
    }

    fn request(&mut self, body: RequestBody) -> Result<ResponseBody, Error> {
        if self.broken {
            self.reconnect()?;
        }
        let started = Instant::now();
        let deadline = started + self.timeout;
        let (id, env) = self.session.request(Time::ZERO, body);
        self.buf.clear();
        wire::write_frame(&mut self.buf, &Frame::Envelope(env));
        let sent = self.stream.tcp().set_write_timeout(Some(self.timeout)).and_then(|()| self.stream.send(&self.buf));
        if let Err(e) = sent {
            // Part of the request may have reached the server: its outcome is unknown.
            self.broken = true;
            let _ = self.session.tick(Time::ZERO + self.timeout);
            return Err(Error::Unavailable {
                reason: format!("connection lost while sending: {e}"),
                outcome_unknown: true,
            });
        }
        loop {
            let frame = match self.next_frame(deadline) {
                Ok(f) => f,
                Err(Error::Unavailable { reason, .. }) => {
                    // Forget the request: a late answer is dropped as unknown.
                    let _ = self.session.tick(Time::ZERO + self.timeout);
                    return Err(Error::Unavailable { reason, outcome_unknown: true });
                }
                Err(e) => return Err(e),
            };
            match frame {
                Frame::Envelope(Envelope { msg: Message::ClientResponse(resp), .. }) => {
                    if let Some((rid, result)) = self.session.on_response(resp) {
                        if rid == id {
                            return result;
                        }
                    }
                }
                Frame::Rejected(e) => return Err(e),
                _ => {}
            }
        }
    }
}

impl TcpTransport {
    /// The next whole frame, or `Unavailable` once `deadline` passes (or the connection ends).
    fn next_frame(&mut self, deadline: Instant) -> Result<Frame, Error> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            if self.inbox.len() >= 4 {
                let len = u32::from_be_bytes(self.inbox[..4].try_into().expect("4 bytes")) as usize;
                if len > FRAME_SIZE_MAX {
                    return Err(
                        InvalidInput::Oversized { what: "frame".into(), size: len, limit: FRAME_SIZE_MAX }.into()
                    );
                }
                if self.inbox.len() >= 4 + len {
                    let frame = wire::decode(&self.inbox[4..4 + len]);
                    self.inbox.drain(..4 + len);
                    return Ok(frame?);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::unavailable(format!("no answer within {:?}", self.timeout)));
            }
            self.stream
                .tcp()
                .set_read_timeout(Some(left))
                .map_err(|e| Error::unavailable(format!("connection: {e}")))?;
            match std::io::Read::read(&mut self.stream, &mut chunk) {
                Ok(0) => {
                    self.broken = true;
                    return Err(Error::unavailable("connection closed by the server"));
                }
                Ok(n) => self.inbox.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    return Err(Error::unavailable(format!("no answer within {:?}", self.timeout)));
                }
                Err(e) => {
                    self.broken = true;
                    return Err(Error::unavailable(format!("connection lost: {e}")));
                }
            }
        }
    }
}

fn codec(max_frame: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder().max_frame_length(max_frame.min(FRAME_SIZE_MAX)).new_codec()
}

fn frame_bytes(frame: &Frame) -> Bytes {
    Bytes::from(wire::encode(frame))
}

/// Counters a server exposes at `/metrics` (Prometheus text exposition, written by hand: a
/// handful of counters do not need the `metrics` crates' dependency tree).
#[derive(Default)]
pub struct ServerMetrics {
    /// Transactions (procedure calls and interactive commits) that committed.
    pub txn_committed: AtomicU64,
    /// Interactive transactions rolled back by the client.
    pub txn_rolled_back: AtomicU64,
    /// Failed requests by cause: abort, user_abort, invalid, unavailable, storage, internal.
    pub failed: [AtomicU64; 6],
    pub connections_open: AtomicU64,
    pub connections_accepted: AtomicU64,
    /// Connections refused at `max_connections`.
    pub connections_rejected: AtomicU64,
    /// Frames answered `Rejected` (oversized, malformed, bad hello).
    pub frames_rejected: AtomicU64,
    pub peer_links_up: AtomicU64,
    /// Client request latency by kind.
    pub latency: crate::latency::RequestLatency,
    /// Retryable aborts by cause.
    pub aborts: crate::latency::AbortCounts,
    /// Events the engine counted (`CoordCtx::count`, e.g. Granola's CONFLICT retries), by name.
    pub engine: Mutex<BTreeMap<&'static str, u64>>,
}

const FAILURE_CAUSES: [&str; 6] = ["abort", "user_abort", "invalid", "unavailable", "storage", "internal"];

impl ServerMetrics {
    fn on_response(&self, result: &Result<ResponseBody, Error>) {
        let i = match result {
            Ok(ResponseBody::Returned(_)) | Ok(ResponseBody::Committed) => {
                self.txn_committed.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Ok(ResponseBody::RolledBack) => {
                self.txn_rolled_back.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Ok(_) => return,
            Err(Error::Abort(reason)) => {
                self.aborts.count(reason);
                0
            }
            Err(Error::UserAbort(_)) => 1,
            Err(Error::Invalid(_)) => 2,
            Err(Error::Unavailable { .. }) => 3,
            Err(Error::Storage(_)) => 4,
            Err(Error::Internal(_)) => 5,
        };
        self.failed[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition of these counters.
    pub fn render(&self, node: NodeId, engine: &str) -> String {
        use std::fmt::Write as _;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let l = format!("node=\"{}\",engine=\"{engine}\"", node.0);
        let mut o = String::new();
        let _ = writeln!(o, "# HELP litmus_transactions_total Transactions and failed requests, by outcome.");
        let _ = writeln!(o, "# TYPE litmus_transactions_total counter");
        let _ = writeln!(o, "litmus_transactions_total{{{l},outcome=\"committed\"}} {}", g(&self.txn_committed));
        let _ = writeln!(o, "litmus_transactions_total{{{l},outcome=\"rolled_back\"}} {}", g(&self.txn_rolled_back));
        for (cause, n) in FAILURE_CAUSES.iter().zip(&self.failed) {
            let _ = writeln!(o, "litmus_transactions_total{{{l},outcome=\"{cause}\"}} {}", g(n));
        }
        let _ = writeln!(o, "# HELP litmus_connections_open Client and peer connections open now.");
        let _ = writeln!(o, "# TYPE litmus_connections_open gauge");
        let _ = writeln!(o, "litmus_connections_open{{{l}}} {}", g(&self.connections_open));
        let _ = writeln!(o, "# TYPE litmus_connections_accepted_total counter");
        let _ = writeln!(o, "litmus_connections_accepted_total{{{l}}} {}", g(&self.connections_accepted));
        let _ = writeln!(o, "# TYPE litmus_connections_rejected_total counter");
        let _ = writeln!(o, "litmus_connections_rejected_total{{{l}}} {}", g(&self.connections_rejected));
        let _ = writeln!(o, "# TYPE litmus_frames_rejected_total counter");
        let _ = writeln!(o, "litmus_frames_rejected_total{{{l}}} {}", g(&self.frames_rejected));
        let _ = writeln!(o, "# TYPE litmus_peer_links_up gauge");
        let _ = writeln!(o, "litmus_peer_links_up{{{l}}} {}", g(&self.peer_links_up));
        let engine = self.engine.lock().expect("engine counts lock");
        if !engine.is_empty() {
            let _ = writeln!(
                o,
                "# HELP litmus_protocol_events_total Events the engine counted inside (e.g. granola.conflict_retries)."
            );
            let _ = writeln!(o, "# TYPE litmus_protocol_events_total counter");
            for (name, n) in engine.iter() {
                let _ = writeln!(o, "litmus_protocol_events_total{{{l},event=\"{name}\"}} {n}");
            }
        }
        drop(engine);
        self.aborts.render(&mut o, &l);
        self.latency.render(&mut o, &l);
        o
    }
}

/// Routes envelopes leaving the node loop: local machines, peer links, client connections.
struct TcpRouter {
    me: NodeId,
    engine: EngineKind,
    topology: Topology,
    identity: ClusterIdentity,
    cfg: NodeConfig,
    inbox: Sender<Envelope>,
    peers: Vec<Option<UnboundedSender<Bytes>>>,
    clients: RwLock<HashMap<ClientId, UnboundedSender<Bytes>>>,
    metrics: Arc<ServerMetrics>,
    /// Set when the node must stop serving (a peer refused our identity).
    fatal: Mutex<Option<Error>>,
    /// Some peer has agreed with our identity. A node that has never agreed with any peer and
    /// meets a different identity is the odd one out and stops; one that has (a healthy member
    /// dialing a misconfigured newcomer) keeps serving and logs the refusal.
    confirmed: AtomicBool,
    /// TLS on every client and peer connection, when configured.
    tls: Option<crate::tls::ServerTls>,
}

impl TcpRouter {
    /// A peer disagrees with us: stop serving if we never agreed with anyone.
    fn peer_mismatch(&self, what: String) {
        if self.confirmed.load(Ordering::Relaxed) {
            tracing::warn!("{what}; still serving (other peers agree with this node)");
        } else {
            *self.fatal.lock().expect("fatal lock") =
                Some(InvalidInput::Config(format!("{what}; refusing to serve")).into());
        }
    }
}

impl TcpRouter {
    /// Sends `env` where it goes. No frame over `max_frame_bytes` leaves this node (the codec
    /// would refuse it and close the connection under everything else it carries): a batch
    /// over the limit goes as its items, one frame each; a client response over it is answered
    /// instead with a typed `Oversized` error for the same request (the connection stays
    /// usable); any other frame over it is dropped, as the network may drop it. Every refused
    /// frame is logged (peer, size, limit) and counted in `frames_rejected`.
    fn route(&self, env: Envelope) {
        let limit = self.cfg.max_frame_bytes;
        match self.topology.host_of(env.to) {
            NetHost::Node(n) if n == self.me => {
                let _ = self.inbox.send(env);
            }
            NetHost::Node(n) => {
                let Some(Some(tx)) = self.peers.get(n.0 as usize) else { return };
                let frame = Frame::Envelope(env);
                let bytes = frame_bytes(&frame);
                if bytes.len() <= limit {
                    let _ = tx.send(bytes);
                    return;
                }
                let Frame::Envelope(env) = frame else { unreachable!("built above") };
                let peer = self.cfg.peers.get(n.0 as usize).map_or("?", String::as_str);
                match env.msg {
                    Message::Batch(items) if items.len() > 1 => {
                        for item in items {
                            let msg = match item {
                                litmus_protocol::message::Batched::Request(r) => Message::PartitionRequest(r),
                                litmus_protocol::message::Batched::Reply(r) => Message::PartitionReply(r),
                            };
                            self.route(Envelope { from: env.from, to: env.to, msg });
                        }
                    }
                    _ => {
                        self.metrics.frames_rejected.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            peer = %format!("node {} at {peer}", n.0),
                            size = bytes.len(),
                            limit,
                            from = %env.from,
                            to = %env.to,
                            "refused to send a frame over max_frame_bytes; dropped"
                        );
                    }
                }
            }
            NetHost::Clients => {
                let Addr::Client(c) = env.to else { unreachable!("client host") };
                if let Message::ClientResponse(resp) = &env.msg {
                    self.metrics.on_response(&resp.result);
                    self.metrics.latency.finish(c, resp.id, Instant::now());
                }
                let frame = Frame::Envelope(env);
                let mut bytes = frame_bytes(&frame);
                if bytes.len() > limit {
                    self.metrics.frames_rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        peer = %format!("client {c}"),
                        size = bytes.len(),
                        limit,
                        "refused to send a frame over max_frame_bytes; answered with an Oversized error"
                    );
                    let Frame::Envelope(env) = frame else { unreachable!("built above") };
                    let Message::ClientResponse(resp) = env.msg else { return }; // nothing else is sent to clients
                    let e = InvalidInput::Oversized { what: REPLY_OVERSIZED.into(), size: bytes.len(), limit };
                    let msg = Message::ClientResponse(litmus_protocol::message::ClientResponse {
                        id: resp.id,
                        result: Err(e.into()),
                    });
                    bytes = frame_bytes(&Frame::Envelope(Envelope { from: env.from, to: env.to, msg }));
                }
                if let Some(tx) = self.clients.read().expect("clients lock").get(&c) {
                    let _ = tx.send(bytes);
                }
            }
        }
    }
}

/// The `what` of the `Oversized` error a client gets instead of a reply larger than the
/// server's `max_frame_bytes` (e.g. a page of rows each near the limit: ask for fewer rows).
/// A procedure's reply refused so has still committed.
pub const REPLY_OVERSIZED: &str = "reply (over the server's max_frame_bytes; a procedure it answered did commit)";

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
    let identity = check_data_dir(&cfg)?;
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

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("litmus-net")
        .build()
        .map_err(|e| Error::Internal(format!("tokio runtime: {e}")))?;
    let (inbox_tx, inbox_rx) = crossbeam_channel::unbounded();
    let mut peers = Vec::new();
    let mut dialers = Vec::new();
    for (i, addr) in cfg.peers.iter().enumerate() {
        if i as u32 == cfg.node {
            peers.push(None);
            continue;
        }
        let (tx, rx) = unbounded_channel();
        peers.push(Some(tx));
        dialers.push((addr.clone(), rx));
    }
    let router = Arc::new(TcpRouter {
        me,
        engine,
        topology,
        identity: identity.clone(),
        cfg: cfg.clone(),
        inbox: inbox_tx.clone(),
        peers,
        clients: RwLock::new(HashMap::new()),
        metrics: Arc::new(ServerMetrics::default()),
        fatal: Mutex::new(None),
        confirmed: AtomicBool::new(false),
        tls,
    });

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
        rt.spawn(serve_metrics(l, router.clone()));
        tracing::info!("metrics at http://{addr}/metrics, health at http://{addr}/health");
    }
    for (addr, rx) in dialers {
        rt.spawn(dial_peer(addr, router.clone(), rx));
    }
    let accept_router = router.clone();
    rt.spawn(async move {
        let next_client = Arc::new(AtomicU64::new(0));
        let mut backoff = Duration::from_millis(5);
        let (mut last_log, mut suppressed) = (None::<Instant>, 0u64);
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    backoff = Duration::from_millis(5);
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(accept_connection(
                        stream,
                        accept_router.clone(),
                        inbox_tx.clone(),
                        next_client.clone(),
                    ));
                }
                Err(e) => {
                    // Out of descriptors (or similar): back off instead of spinning, and log at
                    // most once a second.
                    if last_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                        tracing::warn!(
                            "accept failed: {e} ({suppressed} more failures not logged); backing off {backoff:?}"
                        );
                        last_log = Some(Instant::now());
                        suppressed = 0;
                    } else {
                        suppressed += 1;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    });
    tracing::info!(
        "node {} listening on {}{} (cluster {}, {} engine, {} nodes, {} partitions, fsync {:?}, max {} connections, frames ≤ {} bytes)",
        cfg.node,
        cfg.listen,
        match &router.tls {
            Some(t) if t.client_auth => " with TLS, client certificates required",
            Some(_) => " with TLS",
            None => " in plaintext",
        },
        identity.cluster_id,
        engine,
        topology.nodes,
        topology.partitions,
        cfg.fsync,
        cfg.max_connections,
        cfg.max_frame_bytes
    );
    let result = node_loop(host, inbox_rx, &router, &stop);
    rt.shutdown_background();
    result
}

/// Answers `GET /metrics` (Prometheus text) and `GET /health` (`ok`) on `listener`.
async fn serve_metrics(listener: tokio::net::TcpListener, router: Arc<TcpRouter>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let router = router.clone();
        tokio::spawn(async move {
            // Read the whole request head (it may arrive in pieces; closing with unread bytes
            // would reset the connection under the reply).
            let mut buf = [0u8; 4096];
            let mut n = 0;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            while n < buf.len() && !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                match tokio::time::timeout_at(deadline, s.read(&mut buf[n..])).await {
                    Ok(Ok(0)) => break,
                    Ok(Ok(k)) => n += k,
                    _ => return,
                }
            }
            let req = String::from_utf8_lossy(&buf[..n]);
            let path = req.split_whitespace().nth(1).unwrap_or("/");
            let (status, ctype, body) = match path {
                "/metrics" => {
                    ("200 OK", "text/plain; version=0.0.4", router.metrics.render(router.me, router.engine.name()))
                }
                "/health" | "/ready" => ("200 OK", "text/plain", "ok\n".to_string()),
                _ => ("404 Not Found", "text/plain", "try /metrics or /health\n".to_string()),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes()).await;
            let _ = s.write_all(body.as_bytes()).await;
            let _ = s.shutdown().await;
        });
    }
}

/// How long a stopping node waits for the replicas it leads to hand their leadership over:
/// two election timeouts.
pub const HAND_OVER_MAX: Duration =
    Duration::from_millis(2 * crate::replica::ELECTION_TICKS as u64 * litmus_protocol::machine::TICK_INTERVAL_MS);

/// The node's single protocol thread: step, tick, group commit, send.
fn node_loop(mut host: Host, inbox: Receiver<Envelope>, router: &TcpRouter, stop: &AtomicBool) -> Result<(), Error> {
    let start = Instant::now();
    let now = || Time(start.elapsed().as_nanos() as u64);
    let tick = Duration::from_millis(litmus_protocol::machine::TICK_INTERVAL_MS);
    let mut next_tick = now() + tick;
    let mut handing_over: Option<Instant> = None;
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
                    router.route(env);
                }
                return Ok(());
            }
        }
        let t = now();
        let first = if next_tick > t {
            match inbox.recv_timeout(next_tick - t) {
                Ok(env) => Some(env),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
        } else {
            None
        };
        let t = now();
        let mut stepped = 0;
        for env in first.into_iter().chain(std::iter::from_fn(|| inbox.try_recv().ok())) {
            host.step(t, env.to, Input::Message(env))?;
            stepped += 1;
            if stepped >= crate::embedded::WORKER_BATCH_MAX {
                break;
            }
        }
        if t >= next_tick {
            host.tick(t)?;
            next_tick = t + tick;
        }
        if host.has_pending() {
            for env in host.flush()? {
                router.route(env);
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

/// Keeps a link to one peer: dial (with backoff), say hello, wait for the peer's hello, forward
/// frames. Frames queued while the link is down are dropped, like packets on a broken network.
/// A peer that answers with a different cluster identity stops this node unless another peer
/// agreed with it ([`TcpRouter::peer_mismatch`]).
async fn dial_peer(addr: String, router: Arc<TcpRouter>, mut rx: UnboundedReceiver<Bytes>) {
    let mut backoff = Duration::from_millis(50);
    let hello = Frame::HelloNode {
        version: PROTOCOL_VERSION,
        node: router.me,
        cluster: router.identity.clone(),
        token: router.cfg.token.clone(),
    };
    loop {
        if let Ok(stream) = tokio::net::TcpStream::connect(&addr).await {
            let _ = stream.set_nodelay(true);
            match &router.tls {
                None => peer_link(stream, &addr, &router, &hello, &mut rx, &mut backoff).await,
                Some(tls) => {
                    let connector = tokio_rustls::TlsConnector::from(tls.peers.config());
                    let handshake = match tls.peers.server_name(&addr) {
                        Ok(name) => {
                            tokio::time::timeout(Duration::from_secs(10), connector.connect(name, stream)).await
                        }
                        Err(e) => {
                            tracing::warn!("peer {addr}: {e}");
                            Ok(Err(std::io::Error::other(e.to_string())))
                        }
                    };
                    match handshake {
                        Ok(Ok(s)) => peer_link(s, &addr, &router, &hello, &mut rx, &mut backoff).await,
                        Ok(Err(e)) => tracing::warn!("TLS handshake with peer {addr} failed: {}", tls_cause(&e)),
                        Err(_) => tracing::warn!("TLS handshake with peer {addr} timed out"),
                    }
                }
            }
            if rx.is_closed() {
                return;
            }
        }
        while rx.try_recv().is_ok() {}
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// The cause of a server-side TLS failure, for the log.
fn tls_cause(e: &std::io::Error) -> String {
    match crate::tls::rustls_cause(e) {
        Some(cause) => cause.to_string(),
        None => e.to_string(),
    }
}

/// One peer link's life on an established stream: hello both ways, then forward frames until
/// it breaks.
async fn peer_link<S>(
    stream: S,
    addr: &str,
    router: &TcpRouter,
    hello: &Frame,
    rx: &mut UnboundedReceiver<Bytes>,
    backoff: &mut Duration,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    {
        {
            let mut framed = Framed::new(stream, codec(router.cfg.max_frame_bytes));
            if framed.send(frame_bytes(hello)).await.is_ok() {
                let answer = tokio::time::timeout(Duration::from_secs(10), framed.next()).await;
                match answer.ok().flatten().map(|r| r.map(|b| wire::decode(&b))) {
                    Some(Ok(Ok(Frame::HelloNode { node, cluster, token, .. }))) => {
                        let diffs = router.identity.differences(&cluster, "ours", "theirs");
                        if !wire::token_accepted(router.cfg.token.as_deref(), token.as_deref()) {
                            router.peer_mismatch(format!(
                                "peer node {} at {addr} does not have this cluster's token",
                                node.0
                            ));
                        } else if !diffs.is_empty() {
                            router.peer_mismatch(format!(
                                "peer node {} at {addr} belongs to a different cluster ({})",
                                node.0,
                                diffs.join("; ")
                            ));
                        } else {
                            router.confirmed.store(true, Ordering::Relaxed);
                            *backoff = Duration::from_millis(50);
                            tracing::info!("peer link to node {} at {addr} up", node.0);
                            router.metrics.peer_links_up.fetch_add(1, Ordering::Relaxed);
                            // The peer sends nothing after its hello: anything read (EOF, an
                            // error) means the link is gone — noticed at once, not after
                            // frames were written into a dead socket and lost.
                            loop {
                                tokio::select! {
                                    next = rx.recv() => match next {
                                        Some(bytes) => {
                                            if framed.send(bytes).await.is_err() {
                                                break;
                                            }
                                        }
                                        None => return, // the node is stopping
                                    },
                                    _ = framed.next() => break,
                                }
                            }
                            router.metrics.peer_links_up.fetch_sub(1, Ordering::Relaxed);
                            tracing::warn!("peer link to {addr} down; redialing");
                        }
                    }
                    Some(Ok(Ok(Frame::Rejected(Error::Invalid(
                        e @ (InvalidInput::Config(_) | InvalidInput::Unauthenticated(_)),
                    ))))) => {
                        router.peer_mismatch(format!("peer at {addr} refused this node: {e}"));
                    }
                    _ => {} // not up yet, or confused: redial
                }
            }
        }
    }
}

/// Counts a connection while it lives.
struct ConnGuard(Arc<ServerMetrics>);
impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.connections_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A new connection: counted from the start (a pending TLS handshake holds a connection
/// too), then, on a TLS server, refused in plaintext if it does not open with a TLS handshake
/// and otherwise handshaken before [`handle_connection`] reads its hello.
async fn accept_connection(
    stream: tokio::net::TcpStream,
    router: Arc<TcpRouter>,
    inbox: Sender<Envelope>,
    next_client: Arc<AtomicU64>,
) {
    let metrics = router.metrics.clone();
    metrics.connections_accepted.fetch_add(1, Ordering::Relaxed);
    let open = metrics.connections_open.fetch_add(1, Ordering::Relaxed) + 1;
    let _guard = ConnGuard(metrics.clone());
    let Some(tls) = router.tls.clone() else {
        return handle_connection(stream, false, open, router, inbox, next_client).await;
    };
    let peer = stream.peer_addr().map_or_else(|_| "?".to_string(), |a| a.to_string());
    let hello_timeout = Duration::from_millis(router.cfg.hello_timeout_ms);
    let mut first = [0u8; 1];
    match tokio::time::timeout(hello_timeout, stream.peek(&mut first)).await {
        Ok(Ok(1..)) if first[0] == crate::tls::TLS_HANDSHAKE_BYTE => {}
        Ok(Ok(1..)) => {
            // A plaintext client: tell it why, in plaintext, and close.
            metrics.frames_rejected.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("refused a plaintext connection from {peer}: this server requires TLS");
            let e = InvalidInput::Unauthenticated(
                "this server requires TLS: connect with --tls-ca (and --tls-cert/--tls-key if it requires client \
                 certificates)"
                    .into(),
            );
            let mut framed = Framed::new(stream, codec(router.cfg.max_frame_bytes));
            let _ = tokio::time::timeout(Duration::from_secs(1), framed.send(frame_bytes(&Frame::Rejected(e.into()))))
                .await;
            return;
        }
        _ => return, // closed, failed or silent before saying anything
    }
    match tokio::time::timeout(hello_timeout, tls.acceptor.accept(stream)).await {
        Ok(Ok(s)) => {
            let certified = s.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty());
            handle_connection(s, certified, open, router, inbox, next_client).await
        }
        Ok(Err(e)) => {
            metrics.frames_rejected.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("TLS handshake with {peer} failed: {}", tls_cause(&e));
        }
        Err(_) => tracing::warn!("TLS handshake with {peer} timed out"),
    }
}

/// Serves one connection (plain or TLS) from its hello on. `certified`: the connection
/// presented a client certificate that `tls_ca` verified.
async fn handle_connection<S>(
    stream: S,
    certified: bool,
    open: u64,
    router: Arc<TcpRouter>,
    inbox: Sender<Envelope>,
    next_client: Arc<AtomicU64>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let metrics = router.metrics.clone();
    let mut framed = Framed::new(stream, codec(router.cfg.max_frame_bytes));
    let reject = |e: Error| {
        metrics.frames_rejected.fetch_add(1, Ordering::Relaxed);
        frame_bytes(&Frame::Rejected(e))
    };
    if open as usize > router.cfg.max_connections {
        metrics.connections_rejected.fetch_add(1, Ordering::Relaxed);
        let e = Error::unavailable(format!(
            "server at its connection limit (max_connections = {})",
            router.cfg.max_connections
        ));
        let _ = tokio::time::timeout(Duration::from_secs(1), framed.send(frame_bytes(&Frame::Rejected(e)))).await;
        return;
    }
    let hello = match tokio::time::timeout(Duration::from_millis(router.cfg.hello_timeout_ms), framed.next()).await {
        Ok(Some(Ok(bytes))) => wire::decode(&bytes),
        Ok(Some(Err(e))) => Err(frame_error(e, router.cfg.max_frame_bytes)),
        Ok(None) => return,
        Err(_) => {
            let e = InvalidInput::MalformedFrame(format!("no hello within {} ms", router.cfg.hello_timeout_ms));
            let _ = framed.send(reject(e.into())).await;
            return;
        }
    };
    match hello {
        Ok(Frame::HelloNode { version, node, cluster, token }) if version == PROTOCOL_VERSION => {
            if router.tls.is_some() && !certified {
                // Peers dial with their node certificate: a node hello without one is refused.
                tracing::warn!("refused peer node {}: no client certificate (peer links are mutual TLS)", node.0);
                let e = InvalidInput::Unauthenticated("a peer link needs a certificate signed by tls_ca".into());
                let _ = framed.send(reject(e.into())).await;
                return;
            }
            if !wire::token_accepted(router.cfg.token.as_deref(), token.as_deref()) {
                tracing::warn!("refused peer node {}: wrong or missing cluster token", node.0);
                let e = InvalidInput::Unauthenticated("wrong or missing cluster token".into());
                let _ = framed.send(reject(e.into())).await;
                return;
            }
            let diffs =
                router.identity.differences(&cluster, &format!("node {}", router.me.0), &format!("node {}", node.0));
            if !diffs.is_empty() {
                tracing::warn!("refused peer node {}: different cluster ({})", node.0, diffs.join("; "));
                let e = InvalidInput::Config(format!("different cluster: {}", diffs.join("; ")));
                let _ = framed.send(reject(e.into())).await;
                return;
            }
            router.confirmed.store(true, Ordering::Relaxed);
            let me = Frame::HelloNode {
                version: PROTOCOL_VERSION,
                node: router.me,
                cluster: router.identity.clone(),
                token: router.cfg.token.clone(),
            };
            if framed.send(frame_bytes(&me)).await.is_err() {
                return;
            }
            tracing::info!("peer node {} connected", node.0);
            // A peer: everything it sends goes to our machines.
            while let Some(Ok(bytes)) = framed.next().await {
                match wire::decode(&bytes) {
                    Ok(Frame::Envelope(env)) if router.topology.host_of(env.to) == NetHost::Node(router.me) => {
                        let _ = inbox.send(env);
                    }
                    _ => break, // a confused peer: drop the link, it will redial
                }
            }
            tracing::warn!("peer node {} disconnected", node.0);
        }
        Ok(Frame::HelloClient { version, expect, token }) if version == PROTOCOL_VERSION => {
            if !wire::token_accepted(router.cfg.token.as_deref(), token.as_deref()) {
                let what = if token.is_some() { "wrong cluster token" } else { "this server requires a cluster token" };
                let _ = framed.send(reject(InvalidInput::Unauthenticated(what.into()).into())).await;
                return;
            }
            if let Some(expect) = expect {
                let diffs = router.identity.differences(&expect, "server", "client expects");
                if !diffs.is_empty() {
                    let e = InvalidInput::Config(format!("different cluster: {}", diffs.join("; ")));
                    let _ = framed.send(reject(e.into())).await;
                    return;
                }
            }
            let client = ClientId(((router.me.0 as u64) << 48) | next_client.fetch_add(1, Ordering::Relaxed));
            let (tx, mut rx) = unbounded_channel::<Bytes>();
            router.clients.write().expect("clients lock").insert(client, tx);
            let welcome = Frame::Welcome {
                client,
                node: router.me,
                engine: router.engine.name().into(),
                cluster: router.identity.clone(),
            };
            if framed.send(frame_bytes(&welcome)).await.is_err() {
                router.clients.write().expect("clients lock").remove(&client);
                return;
            }
            let (mut sink, mut stream) = framed.split();
            let writer = tokio::spawn(async move {
                while let Some(bytes) = rx.recv().await {
                    if sink.send(bytes).await.is_err() {
                        break;
                    }
                }
                let _ = sink.close().await;
            });
            let me = Addr::Coordinator(router.me);
            while let Some(next) = stream.next().await {
                let frame = match next {
                    Ok(bytes) => wire::decode(&bytes),
                    Err(e) => Err(frame_error(e, router.cfg.max_frame_bytes)),
                };
                match frame {
                    Ok(Frame::Envelope(Envelope { msg: msg @ Message::ClientRequest(_), .. })) => {
                        if let Message::ClientRequest(req) = &msg {
                            router.metrics.latency.start(client, req.id, &req.body, Instant::now());
                        }
                        // The server, not the client, says who is speaking and to whom.
                        let _ = inbox.send(Envelope { from: Addr::Client(client), to: me, msg });
                    }
                    Ok(Frame::Envelope(Envelope { to: to @ Addr::Role(_), msg: msg @ Message::Role(_), .. })) => {
                        // A client talking to an engine's role directly (e.g. the Omid oracle
                        // benchmark); routed to the role's node, dropped if the engine has no
                        // such role.
                        router.route(Envelope { from: Addr::Client(client), to, msg });
                    }
                    Ok(other) => {
                        let e = InvalidInput::MalformedFrame(format!("unexpected frame from a client: {other:?}"));
                        router.route_reject(client, reject(e.into()));
                        break;
                    }
                    Err(e) => {
                        router.route_reject(client, reject(e.into()));
                        break;
                    }
                }
            }
            // Closing the sender ends the writer after it flushed what was queued.
            router.clients.write().expect("clients lock").remove(&client);
            router.metrics.latency.forget(client);
            let _ = writer.await;
        }
        Ok(Frame::HelloNode { version, .. } | Frame::HelloClient { version, .. }) => {
            let e = InvalidInput::MalformedFrame(format!(
                "protocol version {version} is not this server's version {PROTOCOL_VERSION}"
            ));
            let _ = framed.send(reject(e.into())).await;
        }
        Ok(_) => {
            let e = InvalidInput::MalformedFrame(format!("expected a hello of protocol version {PROTOCOL_VERSION}"));
            let _ = framed.send(reject(e.into())).await;
        }
        Err(e) => {
            let _ = framed.send(reject(e.into())).await;
        }
    }
}

/// A codec error as a typed rejection: a length prefix over the limit is `Oversized`.
fn frame_error(e: std::io::Error, limit: usize) -> InvalidInput {
    let text = e.to_string();
    if text.contains("frame size too big") {
        InvalidInput::Oversized { what: "frame".into(), size: limit + 1, limit }
    } else {
        InvalidInput::MalformedFrame(text)
    }
}

impl TcpRouter {
    fn route_reject(&self, client: ClientId, frame: Bytes) {
        if let Some(tx) = self.clients.read().expect("clients lock").get(&client) {
            let _ = tx.send(frame);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ServerMetrics;
    use litmus_core::NodeId;

    /// Engine counts appear on `/metrics` as one counter per event, and not at all when the
    /// engine counted nothing.
    #[test]
    fn metrics_render_the_engines_counted_events() {
        let m = ServerMetrics::default();
        assert!(!m.render(NodeId(0), "granola").contains("litmus_protocol_events_total"));
        m.engine.lock().unwrap().insert("granola.conflict_retries", 7);
        let text = m.render(NodeId(2), "granola");
        assert!(text.contains("# TYPE litmus_protocol_events_total counter"), "{text}");
        assert!(
            text.contains(
                "litmus_protocol_events_total{node=\"2\",engine=\"granola\",event=\"granola.conflict_retries\"} 7"
            ),
            "{text}"
        );
    }
}
