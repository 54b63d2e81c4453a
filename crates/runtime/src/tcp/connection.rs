//! Accepted connections: TLS sniffing, the hello, then a peer's frames into the node's inbox or
//! a client's requests to its coordinator and its replies back.

use super::metrics::ServerMetrics;
use super::peer::tls_cause;
use super::queues::{deliver, Throttle};
use super::router::{ClientQueue, TcpRouter};
use super::{codec, frame_bytes};
use bytes::Bytes;
use crossbeam_channel::Sender;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use litmus_core::{ClientId, Error, InvalidInput, NodeId};
use litmus_protocol::wire::{self, ClusterIdentity, Frame, PROTOCOL_VERSION};
use litmus_protocol::{Addr, Envelope, Message};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tokio_util::sync::CancellationToken;

/// What every connection of a node shares: the router, the node's inbox and the counter that
/// numbers its clients.
#[derive(Clone)]
pub(super) struct ConnCtx {
    pub(super) router: Arc<TcpRouter>,
    pub(super) inbox: Sender<Envelope>,
    pub(super) next_client: Arc<AtomicU64>,
}

/// Accepts connections until the runtime stops, each served by its own task. A failed accept
/// (out of descriptors, or similar) backs off instead of spinning, and is logged at most once a
/// second.
pub(super) async fn accept_loop(listener: tokio::net::TcpListener, ctx: ConnCtx) {
    let mut backoff = Duration::from_millis(5);
    let failures = Throttle::default();
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                backoff = Duration::from_millis(5);
                let _ = stream.set_nodelay(true);
                tokio::spawn(accept_connection(stream, ctx.clone()));
            }
            Err(e) => {
                failures.warn(|suppressed| {
                    tracing::warn!(
                        "accept failed: {e} ({suppressed} more failures not logged); backing off {backoff:?}"
                    )
                });
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
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
async fn accept_connection(stream: tokio::net::TcpStream, ctx: ConnCtx) {
    let metrics = ctx.router.metrics.clone();
    metrics.connections_accepted.fetch_add(1, Ordering::Relaxed);
    let open = metrics.connections_open.fetch_add(1, Ordering::Relaxed) + 1;
    let _guard = ConnGuard(metrics.clone());
    let Some(tls) = ctx.router.tls.clone() else {
        return handle_connection(stream, false, open, ctx).await;
    };
    let peer = stream.peer_addr().map_or_else(|_| "?".to_string(), |a| a.to_string());
    let hello_timeout = Duration::from_millis(ctx.router.cfg.hello_timeout_ms);
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
            let mut framed = Framed::new(stream, codec(ctx.router.cfg.max_frame_bytes));
            let _ = tokio::time::timeout(Duration::from_secs(1), framed.send(frame_bytes(&Frame::Rejected(e.into()))))
                .await;
            return;
        }
        _ => return, // closed, failed or silent before saying anything
    }
    match tokio::time::timeout(hello_timeout, tls.acceptor.accept(stream)).await {
        Ok(Ok(s)) => {
            let certified = s.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty());
            handle_connection(s, certified, open, ctx).await
        }
        Ok(Err(e)) => {
            metrics.frames_rejected.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("TLS handshake with {peer} failed: {}", tls_cause(&e));
        }
        Err(_) => tracing::warn!("TLS handshake with {peer} timed out"),
    }
}

/// Serves one connection (plain or TLS) from its hello on: a peer's frames go to the inbox, a
/// client's requests to this node's coordinator and its replies back. `certified`: the
/// connection presented a client certificate that `tls_ca` verified.
async fn handle_connection<S>(stream: S, certified: bool, open: u64, ctx: ConnCtx)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let router = &ctx.router;
    let mut framed = Framed::new(stream, codec(router.cfg.max_frame_bytes));
    if open as usize > router.cfg.max_connections {
        router.metrics.connections_rejected.fetch_add(1, Ordering::Relaxed);
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
            let _ = framed.send(rejection(router, e.into())).await;
            return;
        }
    };
    let refused = match hello {
        Ok(Frame::HelloNode { version, node, cluster, token }) if version == PROTOCOL_VERSION => {
            let hello = PeerHello { node, cluster, token, certified };
            match check_peer(router, &hello) {
                Ok(()) => return serve_peer(framed, hello.node, &ctx).await,
                Err(e) => e,
            }
        }
        Ok(Frame::HelloClient { version, expect, token }) if version == PROTOCOL_VERSION => {
            match check_client(router, expect.as_ref(), token.as_deref()) {
                Ok(()) => return serve_client(framed, ctx).await,
                Err(e) => e,
            }
        }
        Ok(Frame::HelloNode { version, .. } | Frame::HelloClient { version, .. }) => InvalidInput::MalformedFrame(
            format!("protocol version {version} is not this server's version {PROTOCOL_VERSION}"),
        )
        .into(),
        Ok(_) => {
            InvalidInput::MalformedFrame(format!("expected a hello of protocol version {PROTOCOL_VERSION}")).into()
        }
        Err(e) => e.into(),
    };
    let _ = framed.send(rejection(router, refused)).await;
}

/// A `Rejected` frame, counted in `frames_rejected`.
fn rejection(router: &TcpRouter, e: Error) -> Bytes {
    router.metrics.frames_rejected.fetch_add(1, Ordering::Relaxed);
    frame_bytes(&Frame::Rejected(e))
}

/// What a peer's hello says about it.
struct PeerHello {
    node: NodeId,
    cluster: ClusterIdentity,
    token: Option<String>,
    /// The connection presented a certificate that `tls_ca` verified.
    certified: bool,
}

/// Whether a peer may link to this node: a certificate under TLS (peers dial with their node
/// certificate), the cluster's token and the same cluster identity. A refusal is logged.
fn check_peer(router: &TcpRouter, hello: &PeerHello) -> Result<(), Error> {
    let node = hello.node.0;
    if router.tls.is_some() && !hello.certified {
        tracing::warn!("refused peer node {node}: no client certificate (peer links are mutual TLS)");
        return Err(InvalidInput::Unauthenticated("a peer link needs a certificate signed by tls_ca".into()).into());
    }
    if !wire::token_accepted(router.cfg.token.as_deref(), hello.token.as_deref()) {
        tracing::warn!("refused peer node {node}: wrong or missing cluster token");
        return Err(InvalidInput::Unauthenticated("wrong or missing cluster token".into()).into());
    }
    let diffs = router.identity.differences(&hello.cluster, &format!("node {}", router.me.0), &format!("node {node}"));
    if !diffs.is_empty() {
        tracing::warn!("refused peer node {node}: different cluster ({})", diffs.join("; "));
        return Err(InvalidInput::Config(format!("different cluster: {}", diffs.join("; "))).into());
    }
    Ok(())
}

/// A peer whose hello was accepted: answer with ours, then hand everything it sends to our
/// machines, waiting for room in the inbox when it is full (backpressure: the peer's link
/// writer then waits for the socket, and the peer's node thread drops what its full queue
/// cannot take).
async fn serve_peer<S>(mut framed: Framed<S, LengthDelimitedCodec>, node: NodeId, ctx: &ConnCtx)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let router = &ctx.router;
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
    while let Some(Ok(bytes)) = framed.next().await {
        match wire::decode(&bytes) {
            Ok(Frame::Envelope(env)) if router.is_here(env.to) => {
                router.heard_from(env.from, node);
                if !deliver(&ctx.inbox, env, &router.metrics) {
                    return; // the node is stopping
                }
            }
            // An answer for a client of ours from a coordinator leading on the peer.
            Ok(Frame::Envelope(env @ Envelope { to: Addr::Client(c), .. }))
                if super::router::client_node(c) == router.me =>
            {
                router.to_client(env)
            }
            _ => break, // a confused peer: drop the link, it will redial
        }
    }
    tracing::warn!("peer node {} disconnected", node.0);
}

/// Whether a client may connect: the cluster's token, and the identity it expects if it names
/// one.
fn check_client(router: &TcpRouter, expect: Option<&ClusterIdentity>, token: Option<&str>) -> Result<(), Error> {
    if !wire::token_accepted(router.cfg.token.as_deref(), token) {
        let what = if token.is_some() { "wrong cluster token" } else { "this server requires a cluster token" };
        return Err(InvalidInput::Unauthenticated(what.into()).into());
    }
    if let Some(expect) = expect {
        let diffs = router.identity.differences(expect, "server", "client expects");
        if !diffs.is_empty() {
            return Err(InvalidInput::Config(format!("different cluster: {}", diffs.join("; "))).into());
        }
    }
    Ok(())
}

/// A client whose hello was accepted: assign its id, register its queue, welcome it, then run
/// its writer (replies from the queue) and its reader (requests to the inbox) until either
/// ends or the server gives up on the client ([`super::SLOW_CLIENT`]).
async fn serve_client<S>(mut framed: Framed<S, LengthDelimitedCodec>, ctx: ConnCtx)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let router = &ctx.router;
    let client = ClientId((u64::from(router.me.0) << 48) | ctx.next_client.fetch_add(1, Ordering::Relaxed));
    let (tx, rx) = mpsc::channel::<Bytes>(router.bounds.client_queue_max);
    let gone = CancellationToken::new();
    router.clients.write().expect("clients lock").insert(client, ClientQueue { tx, gone: gone.clone() });
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
    let (sink, stream) = framed.split();
    let writer = tokio::spawn(client_writer(sink, rx, gone.clone()));
    tokio::select! {
        () = client_reader(stream, client, &ctx) => {}
        () = gone.cancelled() => {}
    }
    // The client's open interactive transactions roll back now, not when their locks time out.
    let bye = Message::ClientRequest(litmus_protocol::message::ClientRequest {
        id: litmus_core::RequestId(u64::MAX),
        body: litmus_protocol::message::RequestBody::Disconnected,
    });
    if let Some(env) =
        router.route_out(Envelope { from: Addr::Client(client), to: Addr::Coordinator(router.me), msg: bye })
    {
        deliver(&ctx.inbox, env, &router.metrics);
    }
    // Closing the sender ends the writer after it flushed what was queued.
    router.clients.write().expect("clients lock").remove(&client);
    router.metrics.latency.forget(client);
    let _ = writer.await;
}

/// Writes what the node queued for a client, in order. When the server gives up on the client
/// (`gone`), says why in a last frame if the socket takes it within a second, and closes.
async fn client_writer<S>(
    mut sink: SplitSink<Framed<S, LengthDelimitedCodec>, Bytes>,
    mut rx: mpsc::Receiver<Bytes>,
    gone: CancellationToken,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        let sent = tokio::select! {
            next = rx.recv() => match next {
                Some(bytes) => tokio::select! {
                    sent = sink.send(bytes) => sent.is_ok(),
                    () = gone.cancelled() => false,
                },
                None => false,
            },
            () = gone.cancelled() => false,
        };
        if !sent {
            break;
        }
    }
    if gone.is_cancelled() {
        // The client stopped reading: say why if its socket takes it within a second, then
        // drop the connection without waiting for the client (a flush could wait forever).
        let last = frame_bytes(&Frame::Rejected(Error::unavailable(super::SLOW_CLIENT)));
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            sink.send(last).await?;
            sink.close().await
        })
        .await;
        return;
    }
    let _ = sink.close().await;
}

/// Reads a client's frames until it closes or sends something wrong: requests go to this node's
/// coordinator (waiting for room in the inbox when it is full), role messages where the role
/// lives.
async fn client_reader<S>(mut stream: SplitStream<Framed<S, LengthDelimitedCodec>>, client: ClientId, ctx: &ConnCtx)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let router = &ctx.router;
    let me = Addr::Coordinator(router.me);
    while let Some(next) = stream.next().await {
        let frame = match next {
            Ok(bytes) => wire::decode(&bytes),
            Err(e) => Err(frame_error(e, router.cfg.max_frame_bytes)),
        };
        let env = match frame {
            Ok(Frame::Envelope(Envelope { msg: Message::ClientRequest(r), .. }))
                if matches!(r.body, litmus_protocol::message::RequestBody::Disconnected) =>
            {
                let e = InvalidInput::MalformedFrame("a client does not say it disconnected: it closes".into());
                router.route_reject(client, rejection(router, e.into()));
                return;
            }
            Ok(Frame::Envelope(Envelope { msg: msg @ Message::ClientRequest(_), .. })) => {
                if let Message::ClientRequest(req) = &msg {
                    router.metrics.latency.start(client, req.id, &req.body, Instant::now());
                }
                // The server, not the client, says who is speaking and to whom.
                Envelope { from: Addr::Client(client), to: me, msg }
            }
            Ok(Frame::Envelope(Envelope { to: to @ Addr::Role(_), msg: msg @ Message::Role(_), .. })) => {
                // A client talking to an engine's role directly (e.g. the Omid oracle
                // benchmark); routed to the role's node, dropped if the engine has no such
                // role.
                Envelope { from: Addr::Client(client), to, msg }
            }
            Ok(other) => {
                let e = InvalidInput::MalformedFrame(format!("unexpected frame from a client: {other:?}"));
                router.route_reject(client, rejection(router, e.into()));
                return;
            }
            Err(e) => {
                router.route_reject(client, rejection(router, e.into()));
                return;
            }
        };
        let Some(env) = router.route_out(env) else { continue }; // sent to the role's node
        if !deliver(&ctx.inbox, env, &router.metrics) {
            return; // the node is stopping
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
