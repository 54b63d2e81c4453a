//! The blocking client side of the TCP runtime: [`TcpTransport`] speaks the framed protocol to
//! one coordinator, with deadlines, reconnection and optional TLS.

use crate::topology::Topology;
use crate::transport::Transport;
use litmus_core::{Error, InvalidInput, NodeId, Time};
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::wire::{self, ClusterIdentity, Frame, FRAME_SIZE_MAX, PROTOCOL_VERSION};
use litmus_protocol::{Addr, ClientSession, Envelope, Message};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

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
