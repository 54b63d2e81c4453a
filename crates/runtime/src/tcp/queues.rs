//! The server's queues, each with a named bound, and what happens when one is full.
//!
//! | queue | producer → consumer | bound | when full |
//! | --- | --- | --- | --- |
//! | inbox | connection readers → node thread | [`INBOX_MAX`] envelopes | the reader waits ([`deliver`]): it stops reading its socket, and TCP pushes back on the sender |
//! | local | node thread → node thread | [`LOCAL_QUEUE_MAX`] envelopes | dropped and counted ([`LocalQueue`]), as the network may drop a message |
//! | peer link | node thread → the link's writer | [`PEER_QUEUE_MAX`] frames | dropped and counted, as the network may drop a frame |
//! | client | node thread → the connection's writer | [`CLIENT_QUEUE_MAX`] frames | the client is disconnected with a logged, typed reason ([`SLOW_CLIENT`]) |
//!
//! **Why no cycle of full queues can stop two nodes.** Who waits for whom:
//!
//! * the node thread waits only for its inbox (with a timeout: the next tick) and its disk. It
//!   never waits for room in a queue: a full peer queue drops the frame, a full client queue
//!   disconnects the client, and messages between its own machines go to a queue it owns and
//!   empties itself;
//! * a connection's reader waits for its socket and for room in the inbox, which only the node
//!   thread makes;
//! * a peer link's writer waits for its queue (filled by the node thread) and for its socket,
//!   drained by the reader of that link on the other node; a client connection's writer waits
//!   for the client.
//!
//! So every chain of waits ends at a node thread (writer → the remote reader → the remote node
//! thread), and a node thread waits for no one: the wait-for graph has no cycle. Two nodes whose
//! peer queues to each other are both full keep stepping, drop what does not fit, and empty
//! their inboxes, which lets the readers read again, which drains the sockets the writers wait
//! on. The protocols already tolerate a lost message (resends, timeouts), so a drop costs a
//! resend, never a stuck transaction.

use super::metrics::ServerMetrics;
use crossbeam_channel::{Sender, TrySendError};
use litmus_protocol::Envelope;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Envelopes from peers and clients waiting for the node thread. The node thread takes at most
/// [`crate::embedded::WORKER_BATCH_MAX`] (256) per loop iteration, so sixteen iterations' worth
/// absorbs a burst from every connection at once; beyond that, readers wait and the sockets
/// behind them fill, which slows the senders down instead of growing this node's memory.
pub const INBOX_MAX: usize = 16 * crate::embedded::WORKER_BATCH_MAX;

/// Frames waiting for one peer link's writer. A loop iteration of the node thread steps at most
/// 256 inputs and each step sends at most one frame per destination, so this holds four
/// iterations of traffic to one peer: a healthy link that stalls for a moment (a full TCP
/// window) loses nothing, and a dead or stuck one costs at most this many frames of memory.
pub const PEER_QUEUE_MAX: usize = 4 * crate::embedded::WORKER_BATCH_MAX;

/// Frames waiting for one client connection's writer. A client has its requests answered in
/// turn (the blocking transport keeps one outstanding; an oracle session acknowledges every
/// push), so a thousand unread replies means the client stopped reading: it is disconnected
/// rather than let one slow reader hold an unbounded share of the memory the single node thread
/// serves everyone from (the policy of Redis's `client-output-buffer-limit`, where PostgreSQL's
/// process per backend would block only that backend).
pub const CLIENT_QUEUE_MAX: usize = 1024;

/// Messages between this node's own machines waiting for the node thread. The node thread takes
/// them before new input from the inbox, so in steady state at most a loop iteration's output
/// waits here (256 steps, each sending at most one envelope to each local machine); the bound
/// turns a runaway into counted message loss instead of memory exhaustion.
pub const LOCAL_QUEUE_MAX: usize = 64 * 1024;

/// The reason a client is disconnected when its queue is full (sent as `Unavailable`, logged).
pub const SLOW_CLIENT: &str = "disconnected: the client left CLIENT_QUEUE_MAX replies unread (it stopped reading)";

/// The queue bounds of one server: the named constants, smaller in tests that fill them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QueueBounds {
    pub inbox_max: usize,
    pub peer_queue_max: usize,
    pub client_queue_max: usize,
    pub local_queue_max: usize,
}

impl Default for QueueBounds {
    fn default() -> Self {
        QueueBounds {
            inbox_max: INBOX_MAX,
            peer_queue_max: PEER_QUEUE_MAX,
            client_queue_max: CLIENT_QUEUE_MAX,
            local_queue_max: LOCAL_QUEUE_MAX,
        }
    }
}

/// Puts `env` in the node's inbox, waiting while it is full: the calling reader reads nothing
/// more from its socket meanwhile (backpressure). The wait holds a thread of tokio's blocking
/// pool (`block_in_place` hands the worker's other tasks to another thread), so the other
/// connections keep being served. `false` when the node thread is gone.
pub(super) fn deliver(inbox: &Sender<Envelope>, env: Envelope, metrics: &ServerMetrics) -> bool {
    match inbox.try_send(env) {
        Ok(()) => true,
        Err(TrySendError::Disconnected(_)) => false,
        Err(TrySendError::Full(env)) => {
            metrics.inbox_full_waits.fetch_add(1, Ordering::Relaxed);
            tokio::task::block_in_place(|| inbox.send(env).is_ok())
        }
    }
}

/// Messages the node thread sends its own machines, in order, at most `max` waiting; over
/// that a message is dropped and counted in `local_dropped`.
pub(super) struct LocalQueue {
    queue: VecDeque<Envelope>,
    max: usize,
    throttle: Throttle,
}

impl LocalQueue {
    pub(super) fn new(max: usize) -> LocalQueue {
        LocalQueue { queue: VecDeque::new(), max, throttle: Throttle::default() }
    }

    pub(super) fn push(&mut self, env: Envelope, metrics: &ServerMetrics) {
        if self.queue.len() < self.max {
            self.queue.push_back(env);
            return;
        }
        metrics.local_dropped.fetch_add(1, Ordering::Relaxed);
        self.throttle.warn(|suppressed| {
            tracing::warn!(
                limit = self.max,
                from = %env.from,
                to = %env.to,
                "local queue full (LOCAL_QUEUE_MAX); message dropped ({suppressed} more not logged)"
            )
        });
    }

    pub(super) fn pop(&mut self) -> Option<Envelope> {
        self.queue.pop_front()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }
}

/// At most one log line a second for a repeated event; the lines in between are counted and the
/// count is given in the next one.
#[derive(Default)]
pub(super) struct Throttle(Mutex<(Option<Instant>, u64)>);

/// The least time between two lines of a [`Throttle`].
const THROTTLE_INTERVAL: Duration = Duration::from_secs(1);

impl Throttle {
    /// Calls `log(suppressed)` unless a line was logged within the last second.
    pub(super) fn warn(&self, log: impl FnOnce(u64)) {
        let mut state = self.0.lock().expect("throttle lock");
        let (last, suppressed) = &mut *state;
        if last.is_none_or(|t| t.elapsed() >= THROTTLE_INTERVAL) {
            log(*suppressed);
            *last = Some(Instant::now());
            *suppressed = 0;
        } else {
            *suppressed += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use litmus_core::NodeId;
    use litmus_protocol::{Addr, Message, Payload};
    use std::sync::Arc;

    fn env(n: u64) -> Envelope {
        let a = Addr::Coordinator(NodeId(0));
        Envelope { from: a, to: a, msg: Message::Role(Payload::new(n)) }
    }

    /// A reader that finds the inbox full waits (reads nothing more) until the node thread takes
    /// an envelope, then delivers; nothing is lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_inbox_makes_the_reader_wait_until_the_node_takes_one() {
        let metrics = Arc::new(ServerMetrics::default());
        let (tx, rx) = crossbeam_channel::bounded(2);
        assert!(deliver(&tx, env(1), &metrics));
        assert!(deliver(&tx, env(2), &metrics));
        assert_eq!(metrics.inbox_full_waits.load(Ordering::Relaxed), 0);
        let (tx2, m2) = (tx.clone(), metrics.clone());
        let reader = tokio::spawn(async move { deliver(&tx2, env(3), &m2) });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!reader.is_finished(), "the reader waits while the inbox is full");
        assert_eq!(metrics.inbox_full_waits.load(Ordering::Relaxed), 1);
        let first = rx.recv().unwrap(); // the node thread takes one
        assert!(reader.await.unwrap(), "delivered once there was room");
        let order: Vec<u64> =
            [first, rx.recv().unwrap(), rx.recv().unwrap()].into_iter().map(|e| *payload(&e)).collect();
        assert_eq!(order, [1, 2, 3]);
        drop(rx);
        assert!(!deliver(&tx, env(4), &metrics), "no node thread: reported, not waited for");
    }

    fn payload(e: &Envelope) -> &u64 {
        let Message::Role(p) = &e.msg else { panic!("a role message") };
        p.peek::<u64>().expect("a u64 payload")
    }

    /// The node thread's own queue never blocks it: over its bound a message is dropped and
    /// counted, and what was queued comes out in order.
    #[test]
    fn a_full_local_queue_drops_and_counts() {
        let metrics = ServerMetrics::default();
        let mut q = LocalQueue::new(3);
        for n in 0..5 {
            q.push(env(n), &metrics);
        }
        assert_eq!(q.len(), 3);
        assert_eq!(metrics.local_dropped.load(Ordering::Relaxed), 2);
        let out: Vec<u64> = std::iter::from_fn(|| q.pop()).map(|e| *payload(&e)).collect();
        assert_eq!(out, [0, 1, 2]);
        assert!(q.is_empty());
    }

    /// A repeated warning is logged at most once a second, with the count of those skipped.
    #[test]
    fn a_throttle_logs_once_a_second_and_counts_the_rest() {
        let t = Throttle::default();
        let mut logged = vec![];
        for _ in 0..5 {
            t.warn(|skipped| logged.push(skipped));
        }
        assert_eq!(logged, [0]);
        t.0.lock().unwrap().0 = Some(Instant::now() - THROTTLE_INTERVAL);
        t.warn(|skipped| logged.push(skipped));
        assert_eq!(logged, [0, 4]);
    }
}
