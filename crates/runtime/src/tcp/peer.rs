//! Peer links: this node dials every other node and forwards the frames the node loop routes
//! to it.

use super::router::TcpRouter;
use super::{codec, frame_bytes};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use litmus_core::{Error, InvalidInput};
use litmus_protocol::wire::{self, Frame, PROTOCOL_VERSION};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::Receiver;
use tokio_util::codec::Framed;

/// Keeps a link to one peer: dial (with backoff), say hello, wait for the peer's hello, forward
/// frames. Frames queued while the link is down are dropped, like packets on a broken network.
/// A peer that answers with a different cluster identity stops this node unless another peer
/// agreed with it ([`TcpRouter::peer_mismatch`]).
pub(super) async fn dial_peer(addr: String, router: Arc<TcpRouter>, mut rx: Receiver<Bytes>) {
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
pub(super) fn tls_cause(e: &std::io::Error) -> String {
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
    rx: &mut Receiver<Bytes>,
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
