//! The TCP runtime: one process per node, a framed binary protocol between nodes and clients.
//!
//! `litmus server --config node.toml` runs [`serve`]. The node's machines (its coordinator and
//! partitions) live in one [`Host`] driven by one thread — the same loop shape as an embedded
//! worker — so protocol code never meets async Rust. Tokio appears only at this edge: accepting
//! connections, reading and writing frames ([`litmus_engine::wire`], length-delimited postcard).
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
use litmus_engine::message::{RequestBody, ResponseBody};
use litmus_engine::wire::{self, Frame, FRAME_SIZE_MAX, PROTOCOL_VERSION};
use litmus_engine::{Addr, ClientSession, EngineKind, Envelope, Input, Message, Registry};
use litmus_storage::wal::FsyncPolicy;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

/// A node's configuration file (`litmus server --config node.toml`).
///
/// ```toml
/// node = 0
/// listen = "127.0.0.1:7100"
/// data_dir = "data/node0"
/// engine = "nocc"
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
    #[serde(default)]
    pub seed: u64,
}

fn default_engine() -> String {
    "nocc".into()
}
fn default_fsync() -> FsyncPolicy {
    FsyncPolicy::Always
}

impl NodeConfig {
    pub fn topology(&self) -> Result<Topology, InvalidInput> {
        let t = Topology::new(self.peers.len() as u32, self.partitions)?;
        if self.node >= t.nodes {
            return Err(InvalidInput::Config(format!("node {} but only {} peers listed", self.node, t.nodes)));
        }
        Ok(t)
    }
}

/// A blocking client connection to a `litmus server`. Every request has a deadline (the
/// connection's timeout, counted from the send): when it passes the call returns
/// `Unavailable { outcome_unknown: true }` — whatever else the server sends meanwhile (late
/// answers to earlier requests) does not extend it, and a frame cut by the deadline stays
/// buffered, so the stream never loses its framing.
pub struct TcpTransport {
    stream: TcpStream,
    engine: String,
    session: ClientSession,
    timeout: Duration,
    buf: Vec<u8>,
    /// Bytes received and not yet decoded (at most part of one frame between requests).
    inbox: Vec<u8>,
}

impl TcpTransport {
    pub fn connect(addr: &str) -> Result<TcpTransport, Error> {
        Self::connect_with_timeout(addr, litmus_engine::client::REQUEST_TIMEOUT_DEFAULT)
    }

    pub fn connect_with_timeout(addr: &str, timeout: Duration) -> Result<TcpTransport, Error> {
        let io = |e: std::io::Error| Error::unavailable(format!("connect {addr}: {e}"));
        let mut stream = TcpStream::connect(addr).map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        let mut buf = Vec::new();
        wire::write_frame(&mut buf, &Frame::HelloClient { version: PROTOCOL_VERSION });
        stream.write_all(&buf).map_err(io)?;
        match wire::read_frame(&mut stream)? {
            Frame::Welcome { client, node, engine } => Ok(TcpTransport {
                stream,
                engine,
                session: ClientSession::new(client, Addr::Coordinator(node), timeout),
                timeout,
                buf: Vec::new(),
                inbox: Vec::new(),
            }),
            Frame::Rejected(e) => Err(e),
            other => Err(Error::Internal(format!("unexpected handshake frame {other:?}"))),
        }
    }
}

impl Transport for TcpTransport {
    fn server_engine(&self) -> Option<&str> {
        Some(&self.engine)
    }

    fn request(&mut self, body: RequestBody) -> Result<ResponseBody, Error> {
        let started = Instant::now();
        let deadline = started + self.timeout;
        let (id, env) = self.session.request(Time::ZERO, body);
        self.buf.clear();
        wire::write_frame(&mut self.buf, &Frame::Envelope(env));
        self.stream.set_write_timeout(Some(self.timeout)).map_err(|e| Error::unavailable(format!("send: {e}")))?;
        self.stream.write_all(&self.buf).map_err(|e| Error::unavailable(format!("send: {e}")))?;
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
            self.stream.set_read_timeout(Some(left)).map_err(|e| Error::unavailable(format!("connection: {e}")))?;
            match std::io::Read::read(&mut self.stream, &mut chunk) {
                Ok(0) => return Err(Error::unavailable("connection closed by the server")),
                Ok(n) => self.inbox.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    return Err(Error::unavailable(format!("no answer within {:?}", self.timeout)));
                }
                Err(e) => return Err(Error::unavailable(format!("connection: {e}"))),
            }
        }
    }
}

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder().max_frame_length(FRAME_SIZE_MAX).new_codec()
}

fn frame_bytes(frame: &Frame) -> Bytes {
    Bytes::from(wire::encode(frame))
}

/// Routes envelopes leaving the node loop: local machines, peer links, client connections.
struct TcpRouter {
    me: NodeId,
    engine: EngineKind,
    topology: Topology,
    inbox: Sender<Envelope>,
    peers: Vec<Option<UnboundedSender<Bytes>>>,
    clients: RwLock<HashMap<ClientId, UnboundedSender<Bytes>>>,
}

impl TcpRouter {
    fn route(&self, env: Envelope) {
        match self.topology.host_of(env.to) {
            NetHost::Node(n) if n == self.me => {
                let _ = self.inbox.send(env);
            }
            NetHost::Node(n) => {
                if let Some(Some(tx)) = self.peers.get(n.0 as usize) {
                    let _ = tx.send(frame_bytes(&Frame::Envelope(env)));
                }
            }
            NetHost::Clients => {
                let Addr::Client(c) = env.to else { unreachable!("client host") };
                if let Some(tx) = self.clients.read().expect("clients lock").get(&c) {
                    let _ = tx.send(frame_bytes(&Frame::Envelope(env)));
                }
            }
        }
    }
}

/// Runs one node until the process is killed. Opens (and recovers) the node's machines from
/// `cfg.data_dir` before it accepts connections.
pub fn serve(cfg: NodeConfig, catalog: Arc<Catalog>, registry: Arc<Registry>) -> Result<(), Error> {
    serve_until(cfg, catalog, registry, Arc::new(AtomicBool::new(false)))
}

/// [`serve`] until `stop` is set: the node finishes the step at hand, makes what it logged
/// durable, sends what that released, closes its listener and returns (an in-process server,
/// e.g. a benchmark's, does not outlive its run).
pub fn serve_until(
    cfg: NodeConfig,
    catalog: Arc<Catalog>,
    registry: Arc<Registry>,
    stop: Arc<AtomicBool>,
) -> Result<(), Error> {
    let topology = cfg.topology()?;
    let engine: EngineKind = cfg.engine.parse()?;
    let me = NodeId(cfg.node);
    let spec = ClusterSpec { engine, topology, catalog, registry, seed: cfg.seed };
    let host = Host::open(spec.machines_of(me), Some(&cfg.data_dir), cfg.fsync)?;

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
        inbox: inbox_tx.clone(),
        peers,
        clients: RwLock::new(HashMap::new()),
    });

    let listener = rt
        .block_on(tokio::net::TcpListener::bind(&cfg.listen))
        .map_err(|e| Error::unavailable(format!("bind {}: {e}", cfg.listen)))?;
    for (addr, rx) in dialers {
        rt.spawn(dial_peer(addr, me, rx));
    }
    let accept_router = router.clone();
    rt.spawn(async move {
        let next_client = Arc::new(AtomicU64::new(0));
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(handle_connection(
                        stream,
                        accept_router.clone(),
                        inbox_tx.clone(),
                        next_client.clone(),
                    ));
                }
                Err(e) => eprintln!("litmus server: accept failed: {e}"),
            }
        }
    });
    eprintln!(
        "litmus server: node {} listening on {} ({} engine, {} partitions)",
        cfg.node, cfg.listen, engine, topology.partitions
    );
    let result = node_loop(host, inbox_rx, &router, &stop);
    rt.shutdown_background();
    result
}

/// The node's single protocol thread: step, tick, group commit, send.
fn node_loop(mut host: Host, inbox: Receiver<Envelope>, router: &TcpRouter, stop: &AtomicBool) -> Result<(), Error> {
    let start = Instant::now();
    let now = || Time(start.elapsed().as_nanos() as u64);
    let tick = Duration::from_millis(litmus_engine::machine::TICK_INTERVAL_MS);
    let mut next_tick = now() + tick;
    loop {
        if stop.load(Ordering::Relaxed) {
            for env in host.flush()? {
                router.route(env);
            }
            return Ok(());
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
    }
}

/// Keeps a link to one peer: dial (with backoff), say hello, forward frames. Frames queued
/// while the link is down are dropped, like packets on a broken network.
async fn dial_peer(addr: String, me: NodeId, mut rx: UnboundedReceiver<Bytes>) {
    let mut backoff = Duration::from_millis(50);
    loop {
        match tokio::net::TcpStream::connect(&addr).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                backoff = Duration::from_millis(50);
                let mut framed = Framed::new(stream, codec());
                if framed.send(frame_bytes(&Frame::HelloNode { version: PROTOCOL_VERSION, node: me })).await.is_ok() {
                    while let Some(bytes) = rx.recv().await {
                        if framed.send(bytes).await.is_err() {
                            break;
                        }
                    }
                }
            }
            Err(_) => {
                while rx.try_recv().is_ok() {}
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

async fn handle_connection(
    stream: tokio::net::TcpStream,
    router: Arc<TcpRouter>,
    inbox: Sender<Envelope>,
    next_client: Arc<AtomicU64>,
) {
    let mut framed = Framed::new(stream, codec());
    let reject = |e: Error| frame_bytes(&Frame::Rejected(e));
    let hello = match framed.next().await {
        Some(Ok(bytes)) => wire::decode(&bytes),
        Some(Err(e)) => Err(InvalidInput::MalformedFrame(e.to_string())),
        None => return,
    };
    match hello {
        Ok(Frame::HelloNode { version, .. }) if version == PROTOCOL_VERSION => {
            // A peer: everything it sends goes to our machines.
            while let Some(Ok(bytes)) = framed.next().await {
                match wire::decode(&bytes) {
                    Ok(Frame::Envelope(env)) if router.topology.host_of(env.to) == NetHost::Node(router.me) => {
                        let _ = inbox.send(env);
                    }
                    _ => return, // a confused peer: drop the link, it will redial
                }
            }
        }
        Ok(Frame::HelloClient { version }) if version == PROTOCOL_VERSION => {
            let client = ClientId(((router.me.0 as u64) << 48) | next_client.fetch_add(1, Ordering::Relaxed));
            let (tx, mut rx) = unbounded_channel::<Bytes>();
            router.clients.write().expect("clients lock").insert(client, tx);
            if framed
                .send(frame_bytes(&Frame::Welcome { client, node: router.me, engine: router.engine.name().into() }))
                .await
                .is_err()
            {
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
                    Err(e) => Err(InvalidInput::MalformedFrame(e.to_string())),
                };
                match frame {
                    Ok(Frame::Envelope(Envelope { msg: msg @ Message::ClientRequest(_), .. })) => {
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
            let _ = writer.await;
        }
        Ok(_) => {
            let e = InvalidInput::MalformedFrame("expected a hello of protocol version 1".into());
            let _ = framed.send(reject(e.into())).await;
        }
        Err(e) => {
            let _ = framed.send(reject(e.into())).await;
        }
    }
}

impl TcpRouter {
    fn route_reject(&self, client: ClientId, frame: Bytes) {
        if let Some(tx) = self.clients.read().expect("clients lock").get(&client) {
            let _ = tx.send(frame);
        }
    }
}
