//! Request latency histograms and aborts by cause, for a server's Prometheus metrics.
//!
//! A TCP server notes when each client request arrives ([`RequestLatency::start`]) and, when
//! the coordinator's answer leaves for the client, records the time in between under the
//! request's kind ([`RequestLatency::finish`]): `call`, `begin`, `op`, `commit`, `rollback`.
//! The histograms are Prometheus histograms (cumulative fixed buckets, `_sum`, `_count`) of
//! atomic counters, so recording takes no lock beyond the pending-request map's.
//! Retryable aborts are counted by their [`AbortReason`] ([`AbortCounts`]).

use litmus_core::{AbortReason, ClientId, RequestId};
use litmus_protocol::message::RequestBody;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Upper bounds of the histogram buckets, in seconds (`+Inf` follows).
pub const BUCKETS_SECS: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Request kinds, in the order of [`RequestLatency`]'s histograms.
pub const KINDS: [&str; 5] = ["call", "begin", "op", "commit", "rollback"];

/// Most requests awaiting an answer that are timed; beyond it new ones go untimed (a client that
/// never reads its answers cannot grow the map without bound).
pub const PENDING_MAX: usize = 100_000;

fn kind_of(body: &RequestBody) -> usize {
    match body {
        RequestBody::Call { .. } => 0,
        RequestBody::Begin { .. } => 1,
        RequestBody::Op { .. } | RequestBody::Read { .. } => 2,
        RequestBody::Commit { .. } | RequestBody::Minitransaction(_) => 3,
        RequestBody::Rollback { .. } | RequestBody::Disconnected => 4,
    }
}

/// One Prometheus histogram.
#[derive(Default)]
pub struct Histogram {
    /// Per bucket (not cumulative), the last one `+Inf`.
    buckets: [AtomicU64; BUCKETS_SECS.len() + 1],
    sum_us: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = BUCKETS_SECS.iter().position(|&b| secs <= b).unwrap_or(BUCKETS_SECS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(d.as_micros().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Appends the `_bucket`, `_sum` and `_count` lines of `name` with `labels`.
    fn render(&self, o: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            cumulative += n.load(Ordering::Relaxed);
            let le = BUCKETS_SECS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(o, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(o, "{name}_sum{{{labels}}} {}", self.sum_us.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(o, "{name}_count{{{labels}}} {}", self.count());
    }
}

/// Latency of client requests by kind, from arrival to answer.
#[derive(Default)]
pub struct RequestLatency {
    pending: Mutex<HashMap<(ClientId, RequestId), (usize, Instant)>>,
    by_kind: [Histogram; KINDS.len()],
}

impl RequestLatency {
    /// A request arrived at `now`.
    pub fn start(&self, client: ClientId, id: RequestId, body: &RequestBody, now: Instant) {
        if let Ok(mut p) = self.pending.lock() {
            if p.len() < PENDING_MAX {
                p.insert((client, id), (kind_of(body), now));
            }
        }
    }

    /// Its answer left at `now` (an answer to an untimed request is ignored).
    pub fn finish(&self, client: ClientId, id: RequestId, now: Instant) {
        let started = self.pending.lock().ok().and_then(|mut p| p.remove(&(client, id)));
        if let Some((kind, at)) = started {
            self.by_kind[kind].record(now.saturating_duration_since(at));
        }
    }

    /// `client` is gone: forget its unanswered requests.
    pub fn forget(&self, client: ClientId) {
        if let Ok(mut p) = self.pending.lock() {
            p.retain(|(c, _), _| *c != client);
        }
    }

    /// The histogram of one kind (see [`KINDS`]).
    pub fn of(&self, kind: &str) -> Option<&Histogram> {
        KINDS.iter().position(|k| *k == kind).map(|i| &self.by_kind[i])
    }

    /// `litmus_request_duration_seconds` by kind, in Prometheus text.
    pub fn render(&self, o: &mut String, labels: &str) {
        let name = "litmus_request_duration_seconds";
        let _ = writeln!(o, "# HELP {name} Client request latency, from arrival to answer, by request kind.");
        let _ = writeln!(o, "# TYPE {name} histogram");
        for (kind, h) in KINDS.iter().zip(&self.by_kind) {
            h.render(o, name, &format!("{labels},kind=\"{kind}\""));
        }
    }
}

/// Causes of retryable aborts, in the order of [`AbortCounts`].
pub const ABORT_CAUSES: [&str; 9] = [
    "lock_conflict",
    "deadlock",
    "wounded",
    "write_conflict",
    "timestamp_too_old",
    "vote_no",
    "failure",
    "timeout",
    "other",
];

/// Retryable aborts answered to clients, by cause.
#[derive(Default)]
pub struct AbortCounts([AtomicU64; ABORT_CAUSES.len()]);

impl AbortCounts {
    pub fn count(&self, reason: &AbortReason) {
        let i = match reason {
            AbortReason::LockConflict => 0,
            AbortReason::Deadlock => 1,
            AbortReason::Wounded => 2,
            AbortReason::WriteConflict => 3,
            AbortReason::TimestampTooOld => 4,
            AbortReason::VoteNo => 5,
            AbortReason::Failure => 6,
            AbortReason::Timeout => 7,
            AbortReason::Other(_) => 8,
        };
        self.0[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, cause: &str) -> Option<u64> {
        ABORT_CAUSES.iter().position(|c| *c == cause).map(|i| self.0[i].load(Ordering::Relaxed))
    }

    /// `litmus_aborts_total` by cause, in Prometheus text.
    pub fn render(&self, o: &mut String, labels: &str) {
        let _ = writeln!(o, "# HELP litmus_aborts_total Retryable aborts answered to clients, by cause.");
        let _ = writeln!(o, "# TYPE litmus_aborts_total counter");
        for (cause, n) in ABORT_CAUSES.iter().zip(&self.0) {
            let _ = writeln!(o, "litmus_aborts_total{{{labels},cause=\"{cause}\"}} {}", n.load(Ordering::Relaxed));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use litmus_core::{NodeId, TxnId};

    #[test]
    fn requests_are_timed_by_kind_into_cumulative_buckets() {
        let l = RequestLatency::default();
        let t0 = Instant::now();
        let call = RequestBody::Call { procedure: "p".into(), args: vec![], retrying_for: Duration::ZERO };
        l.start(ClientId(1), RequestId(1), &call, t0);
        l.start(
            ClientId(1),
            RequestId(2),
            &RequestBody::Rollback { txn: TxnId { node: NodeId(0), epoch: 0, seq: 1 } },
            t0,
        );
        l.finish(ClientId(1), RequestId(1), t0 + Duration::from_millis(3));
        l.finish(ClientId(9), RequestId(1), t0 + Duration::from_millis(3)); // never started: ignored
        assert_eq!(l.of("call").unwrap().count(), 1);
        assert_eq!(l.of("rollback").unwrap().count(), 0);
        l.forget(ClientId(1));
        l.finish(ClientId(1), RequestId(2), t0 + Duration::from_millis(3));
        assert_eq!(l.of("rollback").unwrap().count(), 0, "a forgotten request is not timed");
        let mut o = String::new();
        l.render(&mut o, "node=\"0\"");
        assert!(
            o.contains("litmus_request_duration_seconds_bucket{node=\"0\",kind=\"call\",le=\"0.0025\"} 0\n"),
            "{o}"
        );
        assert!(o.contains("litmus_request_duration_seconds_bucket{node=\"0\",kind=\"call\",le=\"0.005\"} 1\n"), "{o}");
        assert!(o.contains("litmus_request_duration_seconds_bucket{node=\"0\",kind=\"call\",le=\"+Inf\"} 1\n"), "{o}");
        assert!(o.contains("litmus_request_duration_seconds_sum{node=\"0\",kind=\"call\"} 0.003\n"), "{o}");
        assert!(o.contains("litmus_request_duration_seconds_count{node=\"0\",kind=\"op\"} 0\n"), "{o}");
    }

    #[test]
    fn aborts_are_counted_by_cause() {
        let a = AbortCounts::default();
        a.count(&AbortReason::Deadlock);
        a.count(&AbortReason::Deadlock);
        a.count(&AbortReason::Other("x".into()));
        assert_eq!((a.get("deadlock"), a.get("other"), a.get("vote_no")), (Some(2), Some(1), Some(0)));
        let mut o = String::new();
        a.render(&mut o, "node=\"0\"");
        assert!(o.contains("litmus_aborts_total{node=\"0\",cause=\"deadlock\"} 2\n"), "{o}");
    }
}
