//! Fortification: a node's leaders keep their followers from campaigning while the node's
//! protocol thread is busy in a long step.
//!
//! A node runs all its machines on one thread. A step of hundreds of milliseconds (a commit of
//! 100,000 rows: `pgbench -i`) silences every raft leader on the node for that long, and on
//! loaded cores it can outlast the election timeout: the followers elect a new leader, and the
//! transaction whose records the old one was logging ends "outcome unknown". Yet the node is
//! alive and about to go on.
//!
//! So another thread speaks for the leaders: while the protocol thread has made no progress
//! for [`BUSY_AFTER`], it sends each follower of each group the node leads a
//! [`Message::Fortify`] every [`SEND_EVERY`], and the follower's raft timers stand still for
//! a short while ([`crate::replica::FORTIFY_TICKS`]). It stops once the thread has made no
//! progress for [`PROGRESS_MAX`] (a thread that is stuck, not busy), and of course when the
//! process dies, so a dead or wedged leader is still replaced. The leader's lease is untouched:
//! it ends in real time, whatever the followers' timers did (`litmus_replication::ReplicaGroup::advance`).
//! CockroachDB's leader fortification over store liveness keeps raft leaders the same way.
//!
//! The list of what to send is the node's, published by its thread at every tick
//! ([`crate::host::Host::fortifications`]).

use super::router::TcpRouter;
use litmus_protocol::{Envelope, Message};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often fortifications go out while the protocol thread is busy.
pub const SEND_EVERY: Duration = Duration::from_millis(25);
/// How long the protocol thread must have made no progress before its leaders are fortified:
/// well above an ordinary step, well below the election timeout.
pub const BUSY_AFTER: Duration = Duration::from_millis(50);
/// Beyond this without progress the thread is taken for stuck, and its followers are left to
/// elect another leader.
pub const PROGRESS_MAX: Duration = Duration::from_secs(2);

/// What the protocol thread shares with the fortifying thread.
pub(super) struct Fortifier {
    start: Instant,
    /// When the protocol thread last made progress (ms since `start`).
    progress_ms: AtomicU64,
    /// What to send: a [`Message::Fortify`] per follower of each group this node leads.
    envs: Mutex<Vec<Envelope>>,
    stopped: AtomicBool,
}

impl Fortifier {
    pub(super) fn new() -> Arc<Fortifier> {
        Arc::new(Fortifier {
            start: Instant::now(),
            progress_ms: AtomicU64::new(0),
            envs: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
        })
    }

    /// The protocol thread made progress: called at the top of each loop iteration (before its
    /// wait and its batch of steps) and before each tick, one clock read each, not one per step.
    /// A batch of many short steps that outlasts [`BUSY_AFTER`] fortifies too, as it should: the
    /// thread is busy.
    pub(super) fn progress(&self) {
        self.progress_ms.store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// The protocol thread's leaders now send these.
    pub(super) fn publish(&self, envs: Vec<Envelope>) {
        if let Ok(mut e) = self.envs.lock() {
            *e = envs;
        }
    }

    pub(super) fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// Whether the protocol thread is busy (not idle, not stuck) after `idle` without progress.
    fn busy(idle: Duration) -> bool {
        (BUSY_AFTER..=PROGRESS_MAX).contains(&idle)
    }

    /// Runs the fortifying thread until [`Fortifier::stop`].
    pub(super) fn spawn(self: &Arc<Self>, router: Arc<TcpRouter>) -> std::io::Result<std::thread::JoinHandle<()>> {
        let me = self.clone();
        std::thread::Builder::new().name("litmus-fortify".into()).spawn(move || {
            while !me.stopped.load(Ordering::Relaxed) {
                std::thread::sleep(SEND_EVERY);
                let now = me.start.elapsed().as_millis() as u64;
                let idle = Duration::from_millis(now.saturating_sub(me.progress_ms.load(Ordering::Relaxed)));
                if !Self::busy(idle) {
                    continue;
                }
                let envs = me.envs.lock().map(|e| e.clone()).unwrap_or_default();
                for env in envs {
                    debug_assert!(matches!(env.msg, Message::Fortify { .. }));
                    // Followers are on other nodes: nothing comes back to route locally.
                    let _ = router.route_out(env);
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaders_are_fortified_only_while_their_thread_is_busy_not_stuck() {
        assert!(!Fortifier::busy(Duration::from_millis(5)), "an ordinary wait");
        assert!(Fortifier::busy(BUSY_AFTER));
        assert!(Fortifier::busy(Duration::from_millis(700)), "a long step");
        assert!(!Fortifier::busy(PROGRESS_MAX + Duration::from_millis(1)), "stuck: let the followers elect");
    }
}
