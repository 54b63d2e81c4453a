//! What a server counts and how it shows it: [`ServerMetrics`] and the `/metrics` endpoint.

use super::router::TcpRouter;
use litmus_core::{Error, NodeId};
use litmus_protocol::message::ResponseBody;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    /// Times a connection's reader found the inbox full and waited ([`super::INBOX_MAX`]).
    pub inbox_full_waits: AtomicU64,
    /// Frames dropped because a peer link's queue was full ([`super::PEER_QUEUE_MAX`]).
    pub peer_frames_dropped: AtomicU64,
    /// Clients disconnected because they left their queue full ([`super::CLIENT_QUEUE_MAX`]).
    pub clients_disconnected_slow: AtomicU64,
    /// Messages between this node's machines dropped over [`super::LOCAL_QUEUE_MAX`].
    pub local_dropped: AtomicU64,
    /// Client request latency by kind.
    pub latency: crate::latency::RequestLatency,
    /// Retryable aborts by cause.
    pub aborts: crate::latency::AbortCounts,
    /// Events the engine counted (`CoordCtx::count`, e.g. Granola's CONFLICT retries), by name.
    pub engine: Mutex<BTreeMap<&'static str, u64>>,
}

const FAILURE_CAUSES: [&str; 6] = ["abort", "user_abort", "invalid", "unavailable", "storage", "internal"];

impl ServerMetrics {
    pub(super) fn on_response(&self, result: &Result<ResponseBody, Error>) {
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
        let _ =
            writeln!(o, "# HELP litmus_queue_full_total Times a bounded queue was full, by queue and what was done.");
        let _ = writeln!(o, "# TYPE litmus_queue_full_total counter");
        for (queue, action, n) in [
            ("inbox", "reader_waited", &self.inbox_full_waits),
            ("peer", "frame_dropped", &self.peer_frames_dropped),
            ("client", "client_disconnected", &self.clients_disconnected_slow),
            ("local", "message_dropped", &self.local_dropped),
        ] {
            let _ = writeln!(o, "litmus_queue_full_total{{{l},queue=\"{queue}\",action=\"{action}\"}} {}", g(n));
        }
        let engine = self.engine.lock().expect("engine counts lock");
        if !engine.is_empty() {
            let _ = writeln!(
                o,
                "# HELP litmus_engine_events_total Events the engine counted inside (e.g. granola.conflict_retries)."
            );
            let _ = writeln!(o, "# TYPE litmus_engine_events_total counter");
            for (name, n) in engine.iter() {
                let _ = writeln!(o, "litmus_engine_events_total{{{l},event=\"{name}\"}} {n}");
            }
        }
        drop(engine);
        self.aborts.render(&mut o, &l);
        self.latency.render(&mut o, &l);
        o
    }
}

/// Answers `GET /metrics` (Prometheus text) and `GET /health` (`ok`) on `listener`.
pub(super) async fn serve_metrics(listener: tokio::net::TcpListener, router: Arc<TcpRouter>) {
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

#[cfg(test)]
mod tests {
    use super::ServerMetrics;
    use litmus_core::NodeId;

    /// Engine counts appear on `/metrics` as one counter per event, and not at all when the
    /// engine counted nothing.
    #[test]
    fn metrics_render_the_engines_counted_events() {
        let m = ServerMetrics::default();
        assert!(!m.render(NodeId(0), "granola").contains("litmus_engine_events_total"));
        m.engine.lock().unwrap().insert("granola.conflict_retries", 7);
        let text = m.render(NodeId(2), "granola");
        assert!(text.contains("# TYPE litmus_engine_events_total counter"), "{text}");
        assert!(
            text.contains(
                "litmus_engine_events_total{node=\"2\",engine=\"granola\",event=\"granola.conflict_retries\"} 7"
            ),
            "{text}"
        );
    }
}
