//! Where an envelope leaving the node goes: one of this node's machines, a peer link or a client
//! connection ([`TcpRouter`]).

use super::metrics::ServerMetrics;
use super::queues::{QueueBounds, Throttle};
use super::{frame_bytes, NodeConfig};
use crate::topology::{Host as NetHost, Topology};
use bytes::Bytes;
use litmus_core::{ClientId, Error, InvalidInput, NodeId};
use litmus_protocol::wire::{ClusterIdentity, Frame};
use litmus_protocol::{Addr, EngineKind, Envelope, Message};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio_util::sync::CancellationToken;

/// Routes envelopes leaving the node loop: peer links and client connections (messages for this
/// node's own machines are handed back to the node loop, [`TcpRouter::route_out`]). Never waits:
/// a full queue drops or disconnects ([`super::queues`]).
pub(super) struct TcpRouter {
    pub(super) me: NodeId,
    pub(super) engine: EngineKind,
    pub(super) topology: Topology,
    pub(super) identity: ClusterIdentity,
    pub(super) cfg: NodeConfig,
    pub(super) bounds: QueueBounds,
    /// Each peer link's queue, by node id (`None` for this node).
    pub(super) peers: Vec<Option<PeerQueue>>,
    pub(super) clients: RwLock<HashMap<ClientId, ClientQueue>>,
    pub(super) metrics: Arc<ServerMetrics>,
    /// Set when the node must stop serving (a peer refused our identity).
    pub(super) fatal: Mutex<Option<Error>>,
    /// Some peer has agreed with our identity. A node that has never agreed with any peer and
    /// meets a different identity is the odd one out and stops; one that has (a healthy member
    /// dialing a misconfigured newcomer) keeps serving and logs the refusal.
    pub(super) confirmed: AtomicBool,
    /// TLS on every client and peer connection, when configured.
    pub(super) tls: Option<crate::tls::ServerTls>,
    /// The peer each replicated coordinator or role last spoke from ([`TcpRouter::heard_from`]),
    /// for the node thread's `LeaderCache`; `hints_version` counts changes.
    pub(super) leader_hints: RwLock<HashMap<Addr, NodeId>>,
    pub(super) hints_version: std::sync::atomic::AtomicU64,
}

/// A peer link's queue: frames for the link's writer, at most `PEER_QUEUE_MAX`.
pub(super) struct PeerQueue {
    pub(super) tx: mpsc::Sender<Bytes>,
    /// Rate-limits the log of frames dropped on a full queue.
    pub(super) full: Throttle,
}

impl PeerQueue {
    /// A queue of `max` frames, and the receiving end for the link's writer.
    pub(super) fn new(max: usize) -> (PeerQueue, mpsc::Receiver<Bytes>) {
        let (tx, rx) = mpsc::channel(max);
        (PeerQueue { tx, full: Throttle::default() }, rx)
    }
}

/// A client connection's queue: frames for its writer, at most `CLIENT_QUEUE_MAX`, and the
/// token that ends the connection when the server gives up on the client.
pub(super) struct ClientQueue {
    pub(super) tx: mpsc::Sender<Bytes>,
    pub(super) gone: CancellationToken,
}

/// The node a client is connected to: the one that assigned its id (the node id in its top
/// 16 bits).
pub(super) fn client_node(c: ClientId) -> NodeId {
    NodeId((c.0 >> 48) as u32)
}

impl TcpRouter {
    /// A message from a replicated coordinator or role arrived from peer `node`: that is where
    /// its group's leader runs now (`crate::replica::LeaderCache::learn`).
    pub(super) fn heard_from(&self, from: Addr, node: NodeId) {
        if !self.topology.replicated() || !matches!(from, Addr::Coordinator(_) | Addr::Role(_)) {
            return;
        }
        if self.leader_hints.read().expect("hints lock").get(&from) == Some(&node) {
            return;
        }
        self.leader_hints.write().expect("hints lock").insert(from, node);
        self.hints_version.fetch_add(1, Ordering::Relaxed);
    }

    /// A peer disagrees with us: stop serving if we never agreed with anyone.
    pub(super) fn peer_mismatch(&self, what: String) {
        if self.confirmed.load(Ordering::Relaxed) {
            tracing::warn!("{what}; still serving (other peers agree with this node)");
        } else {
            *self.fatal.lock().expect("fatal lock") =
                Some(InvalidInput::Config(format!("{what}; refusing to serve")).into());
        }
    }

    /// Whether `to` is one of this node's machines.
    pub(super) fn is_here(&self, to: Addr) -> bool {
        self.topology.host_of(to) == NetHost::Node(self.me)
    }
}

impl TcpRouter {
    /// Sends `env` to the peer or client it is for, or gives it back when it is for one of this
    /// node's machines. Never waits: a full peer queue drops the frame, a full client queue
    /// disconnects the client ([`super::queues`]).
    ///
    /// No frame over `max_frame_bytes` leaves this node (the codec would refuse it and close the
    /// connection under everything else it carries): a batch over the limit goes as its items,
    /// one frame each; a client response over it is answered instead with a typed `Oversized`
    /// error for the same request (the connection stays usable); any other frame over it is
    /// dropped, as the network may drop it. Every refused frame is logged (peer, size, limit)
    /// and counted in `frames_rejected`.
    #[must_use = "an envelope for this node's machines is handed back to be delivered"]
    pub(super) fn route_out(&self, env: Envelope) -> Option<Envelope> {
        match self.topology.host_of(env.to) {
            NetHost::Node(n) if n == self.me => return Some(env),
            NetHost::Node(n) => self.to_peer(n, env),
            NetHost::Clients => self.to_client(env),
        }
        None
    }

    fn to_peer(&self, n: NodeId, env: Envelope) {
        let limit = self.cfg.max_frame_bytes;
        let Some(Some(queue)) = self.peers.get(n.0 as usize) else { return };
        let frame = Frame::Envelope(env);
        let bytes = frame_bytes(&frame);
        if bytes.len() <= limit {
            return self.push_to_peer(n, queue, bytes);
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
                    self.to_peer(n, Envelope { from: env.from, to: env.to, msg });
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

    /// Queues a frame for a peer link; a full queue drops it, as the network may drop a frame.
    fn push_to_peer(&self, n: NodeId, queue: &PeerQueue, bytes: Bytes) {
        match queue.tx.try_send(bytes) {
            Ok(()) | Err(TrySendError::Closed(_)) => {} // closed: the node is stopping
            Err(TrySendError::Full(_)) => {
                self.metrics.peer_frames_dropped.fetch_add(1, Ordering::Relaxed);
                queue.full.warn(|suppressed| {
                    let peer = self.cfg.peers.get(n.0 as usize).map_or("?", String::as_str);
                    tracing::warn!(
                        peer = %format!("node {} at {peer}", n.0),
                        limit = self.bounds.peer_queue_max,
                        "peer link queue full (PEER_QUEUE_MAX): the link is down or slow; frame dropped \
                         ({suppressed} more not logged)"
                    )
                });
            }
        }
    }

    /// Sends a message to a client connected here, or to the node the client is connected to
    /// (a coordinator answers from wherever its replica group's leader is; clients connect to
    /// the coordinator's home node).
    pub(super) fn to_client(&self, env: Envelope) {
        let limit = self.cfg.max_frame_bytes;
        let Addr::Client(c) = env.to else { unreachable!("client host") };
        let home = client_node(c);
        if home != self.me && !self.clients.read().expect("clients lock").contains_key(&c) {
            return self.to_peer(home, env);
        }
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
        self.push_to_client(c, bytes);
    }

    /// Queues a frame for a client connection. A client that left its queue full has stopped
    /// reading: it is disconnected ([`super::SLOW_CLIENT`], logged and counted) rather than
    /// let the node thread wait for it or buffer for it without end.
    fn push_to_client(&self, c: ClientId, bytes: Bytes) {
        let full = match self.clients.read().expect("clients lock").get(&c) {
            Some(queue) => matches!(queue.tx.try_send(bytes), Err(TrySendError::Full(_))),
            None => false, // gone (closed, or disconnected already): the reply is dropped
        };
        if !full {
            return;
        }
        let Some(queue) = self.clients.write().expect("clients lock").remove(&c) else { return };
        queue.gone.cancel();
        self.metrics.clients_disconnected_slow.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(client = %c, limit = self.bounds.client_queue_max, "{}", super::SLOW_CLIENT);
    }
}

/// The `what` of the `Oversized` error a client gets instead of a reply larger than the
/// server's `max_frame_bytes` (e.g. a page of rows each near the limit: ask for fewer rows).
/// A procedure's reply refused so has still committed.
pub const REPLY_OVERSIZED: &str = "reply (over the server's max_frame_bytes; a procedure it answered did commit)";

impl TcpRouter {
    /// Queues a `Rejected` frame for a client whose connection is about to close; dropped if the
    /// client's queue is full (it is being disconnected anyway).
    pub(super) fn route_reject(&self, client: ClientId, frame: Bytes) {
        if let Some(queue) = self.clients.read().expect("clients lock").get(&client) {
            let _ = queue.tx.try_send(frame);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use litmus_core::{PartitionId, RequestId};
    use litmus_protocol::message::{ClientResponse, ResponseBody};
    use litmus_protocol::Payload;

    /// Node 0 of two, with the given queue bounds, and the receiving end of its link to node 1.
    fn router(bounds: QueueBounds) -> (TcpRouter, mpsc::Receiver<Bytes>) {
        let peers = vec!["127.0.0.1:1".to_string(), "127.0.0.1:2".to_string()];
        let cfg = NodeConfig::new(0, peers[0].clone(), "unused".into(), "nocc", 2, peers);
        let (queue, rx) = PeerQueue::new(bounds.peer_queue_max);
        let router = TcpRouter {
            me: NodeId(0),
            engine: litmus_engines::by_name("nocc").unwrap(),
            topology: cfg.topology().unwrap(),
            identity: cfg.identity(),
            cfg,
            bounds,
            peers: vec![None, Some(queue)],
            clients: RwLock::new(HashMap::new()),
            metrics: Arc::new(ServerMetrics::default()),
            fatal: Mutex::new(None),
            confirmed: AtomicBool::new(false),
            tls: None,
            leader_hints: RwLock::new(HashMap::new()),
            hints_version: Default::default(),
        };
        (router, rx)
    }

    fn bounds(max: usize) -> QueueBounds {
        QueueBounds { inbox_max: max, peer_queue_max: max, client_queue_max: max, local_queue_max: max }
    }

    fn to(to: Addr, n: u64) -> Envelope {
        Envelope { from: Addr::Coordinator(NodeId(0)), to, msg: Message::Role(Payload::new(n)) }
    }

    fn reply(client: ClientId, n: u64) -> Envelope {
        let msg = Message::ClientResponse(ClientResponse { id: RequestId(n), result: Ok(ResponseBody::Committed) });
        Envelope { from: Addr::Coordinator(NodeId(0)), to: Addr::Client(client), msg }
    }

    /// The node thread never waits on a peer link: past `PEER_QUEUE_MAX` frames the link's queue
    /// drops what comes, counted, and the frames already queued still go out in order.
    #[test]
    fn a_full_peer_queue_drops_the_frame_and_counts_it() {
        let (router, mut rx) = router(bounds(3));
        for n in 0..5 {
            assert!(router.route_out(to(Addr::Partition(PartitionId(1)), n)).is_none());
        }
        assert_eq!(router.metrics.peer_frames_dropped.load(Ordering::Relaxed), 2);
        let mut sent = vec![];
        while let Ok(bytes) = rx.try_recv() {
            let Ok(Frame::Envelope(env)) = litmus_protocol::wire::decode(&bytes) else { panic!("an envelope") };
            sent.push(env.msg);
        }
        assert_eq!(sent.len(), 3);
        // Room again: the link takes frames again.
        assert!(router.route_out(to(Addr::Partition(PartitionId(1)), 9)).is_none());
        assert!(rx.try_recv().is_ok());
        assert_eq!(router.metrics.peer_frames_dropped.load(Ordering::Relaxed), 2);
    }

    /// A client that leaves `CLIENT_QUEUE_MAX` replies unread is disconnected: its queue is
    /// removed, its connection told to close, and the disconnection counted once; later replies
    /// for it are dropped without blocking.
    #[test]
    fn a_client_that_leaves_its_queue_full_is_disconnected() {
        let (router, _rx) = router(bounds(2));
        let (c, other) = (ClientId(7), ClientId(8));
        let mut queues = vec![];
        for client in [c, other] {
            let (tx, rx) = mpsc::channel(router.bounds.client_queue_max);
            let gone = CancellationToken::new();
            router.clients.write().unwrap().insert(client, ClientQueue { tx, gone: gone.clone() });
            queues.push((rx, gone));
        }
        for n in 0..2 {
            assert!(router.route_out(reply(c, n)).is_none());
        }
        assert!(!queues[0].1.is_cancelled(), "a full queue is not yet an overflow");
        assert!(router.route_out(reply(c, 2)).is_none());
        assert!(queues[0].1.is_cancelled(), "the overflowing client's connection is told to close");
        assert!(!router.clients.read().unwrap().contains_key(&c));
        assert!(router.route_out(reply(c, 3)).is_none());
        assert_eq!(router.metrics.clients_disconnected_slow.load(Ordering::Relaxed), 1);
        // The other client is served as before.
        assert!(router.route_out(reply(other, 0)).is_none());
        assert!(queues[1].0.try_recv().is_ok());
        assert!(!queues[1].1.is_cancelled());
    }

    /// A message for one of this node's machines is handed back to the node loop, not queued.
    #[test]
    fn a_message_for_this_node_is_handed_back() {
        let (router, mut rx) = router(bounds(1));
        let env = router.route_out(to(Addr::Partition(PartitionId(0)), 1)).expect("handed back");
        assert_eq!(env.to, Addr::Partition(PartitionId(0)));
        assert!(router.is_here(Addr::Coordinator(NodeId(0))));
        assert!(!router.is_here(Addr::Coordinator(NodeId(1))));
        assert!(rx.try_recv().is_err());
    }
}
