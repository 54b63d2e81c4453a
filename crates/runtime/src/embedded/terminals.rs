//! Benchmark terminals hosted on the workers: closed-loop clients as event-driven state machines
//! next to the coordinator they talk to, as Silo's and Granola's benchmarks run theirs.
//!
//! A client thread blocked in [`EmbeddedTransport`](super::EmbeddedTransport) costs a futex
//! wake-up and a context switch per response; with one key per transaction that is most of a
//! transaction's CPU (YCSB's samples land mostly in the kernel). A hosted terminal costs
//! none: its [`ClientSession`] lives on the worker that runs its coordinator
//! ([`super::worker_placement`]), and its [`TerminalDriver`] is called from the worker loop.
//!
//! ```text
//!   EmbeddedCluster::start_terminals(nodes, make)
//!     terminals grouped by the worker of their node's coordinator; per group: client ids,
//!     registered with the router as ClientDest::Worker(w); make(indices) ─► driver D
//!     └─► Router::adopt[w] + poke ─► worker w adopts it: every terminal issues its first request
//!   worker loop, each iteration:
//!     response due for a hosted client ─► ClientSession::on_response ─► D::done_at ─► issue
//!     pause over (timer heap; the worker's sleep deadline includes it) ──────────────► issue
//!     worker tick ─► ClientSession::tick (request timeouts) ─► D::done_at(Unavailable) ─► issue
//!     issue: D::pause > 0 ? wait it out : D::next_at ─► request (routed with the flush:
//!            the delay model applies as to any client ↔ node message) | None: finished
//!     every terminal finished ─► clients unregistered, D sent back ─► TerminalsRun::wait
//! ```
//!
//! The delay is sampled by the router exactly as for a client thread's request: a terminal is
//! another host ([`crate::topology::Host::Client`]), so with a LAN delay its messages wait in
//! the delay queue, and with none they are stepped in the same worker iteration.
//!
//! Lifetimes: the driver is `'static` and `Send` (the workers are long-lived threads), so it
//! owns what it needs (e.g. an `Arc` of the workload). A driver that the cluster drops (the
//! cluster stopped, a worker failed) makes [`TerminalsRun::wait`] fail; nothing is leaked.
//!
//! Not done here: a terminal issues one request at a time (closed loop); interactive
//! transactions work (any [`RequestBody`]), but the driver sees only its own responses.

use super::{ClientDest, Router};
use crate::topology::Topology;
use litmus_core::{ClientId, Error, NodeId, RequestId, Time};
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::{ClientSession, Envelope, Message};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Range;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The closed-loop logic of a set of terminals, called by the worker that hosts them. The same
/// shape as [`crate::sim::SimDriver`]'s `next_at` / `done_at` / `pause`, in the cluster's time
/// ([`super::EmbeddedCluster::now`]); `terminal` is the index in the set given to `make`.
pub trait TerminalDriver: Send + 'static {
    /// The next request of an idle terminal, or `None`: it is finished (asked no more).
    fn next_at(&mut self, terminal: usize, now: Time) -> Option<RequestBody>;
    /// What came back for its request (a timeout is `Unavailable { outcome_unknown: true }`).
    fn done_at(&mut self, terminal: usize, result: Result<ResponseBody, Error>, now: Time);
    /// How long an idle terminal waits before [`TerminalDriver::next_at`] (a retry's backoff);
    /// zero: none. Asked again when the pause is over.
    fn pause(&mut self, terminal: usize, now: Time) -> Duration;
}

/// A set of hosted terminals as the worker loop sees it (the driver's type erased).
pub(super) trait Hosted: Send {
    /// Every terminal issues its first request (or pauses, or finishes).
    fn start(&mut self, now: Time, out: &mut Vec<Envelope>);
    /// Whether `client` is one of this set's terminals.
    fn owns(&self, client: ClientId) -> bool;
    /// A message for one of its terminals.
    fn deliver(&mut self, env: Envelope, now: Time, out: &mut Vec<Envelope>);
    /// Terminals whose pause is over issue their next request.
    fn wake(&mut self, now: Time, out: &mut Vec<Envelope>);
    /// Requests past their deadline fail.
    fn tick(&mut self, now: Time, out: &mut Vec<Envelope>);
    /// When the earliest pause ends.
    fn next_wake(&self) -> Option<Time>;
    /// Every terminal is finished: nothing outstanding, nothing to issue.
    fn finished(&self) -> bool;
    /// Its client ids.
    fn clients(&self) -> Range<u64>;
    /// Sends the driver back to [`TerminalsRun::wait`].
    fn hand_back(self: Box<Self>);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// Waiting for the answer to this request.
    Outstanding(RequestId),
    /// Waiting out a pause (in the timer heap).
    Pausing,
    /// The driver said `None`.
    Finished,
}

struct HostedSet<D: TerminalDriver> {
    driver: D,
    /// Client id of terminal 0; terminal `t` is `base + t`.
    base: u64,
    sessions: Vec<ClientSession>,
    slots: Vec<Slot>,
    /// Pauses by end time, earliest first.
    pauses: BinaryHeap<Reverse<(Time, usize)>>,
    /// Terminals not finished.
    running: usize,
    /// Where the driver goes back to, with the set's position in the run.
    back: mpsc::Sender<(usize, D)>,
    position: usize,
}

impl<D: TerminalDriver> HostedSet<D> {
    fn issue(&mut self, t: usize, now: Time, out: &mut Vec<Envelope>) {
        debug_assert_ne!(self.slots[t], Slot::Finished);
        let pause = self.driver.pause(t, now);
        if !pause.is_zero() {
            self.slots[t] = Slot::Pausing;
            self.pauses.push(Reverse((now + pause, t)));
            return;
        }
        match self.driver.next_at(t, now) {
            Some(body) => {
                let (id, env) = self.sessions[t].request(now, body);
                self.slots[t] = Slot::Outstanding(id);
                out.push(env);
            }
            None => {
                self.slots[t] = Slot::Finished;
                self.running -= 1;
            }
        }
    }

    fn answered(
        &mut self,
        t: usize,
        id: RequestId,
        result: Result<ResponseBody, Error>,
        now: Time,
        out: &mut Vec<Envelope>,
    ) {
        if self.slots[t] != Slot::Outstanding(id) {
            return; // not the request it waits for (cannot happen with one at a time)
        }
        self.driver.done_at(t, result, now);
        self.issue(t, now, out);
    }
}

impl<D: TerminalDriver> Hosted for HostedSet<D> {
    fn start(&mut self, now: Time, out: &mut Vec<Envelope>) {
        for t in 0..self.slots.len() {
            self.issue(t, now, out);
        }
    }

    fn owns(&self, client: ClientId) -> bool {
        self.clients().contains(&client.0)
    }

    fn deliver(&mut self, env: Envelope, now: Time, out: &mut Vec<Envelope>) {
        let litmus_protocol::Addr::Client(c) = env.to else { return };
        let Message::ClientResponse(resp) = env.msg else { return };
        let t = (c.0 - self.base) as usize; // the worker delivers only what `owns` accepts
        if let Some((id, result)) = self.sessions[t].on_response(resp) {
            self.answered(t, id, result, now, out);
        }
    }

    fn wake(&mut self, now: Time, out: &mut Vec<Envelope>) {
        while let Some(&Reverse((at, t))) = self.pauses.peek() {
            if at > now {
                break;
            }
            self.pauses.pop();
            self.issue(t, now, out);
        }
    }

    fn tick(&mut self, now: Time, out: &mut Vec<Envelope>) {
        for t in 0..self.sessions.len() {
            if let Slot::Outstanding(_) = self.slots[t] {
                for (id, e) in self.sessions[t].tick(now) {
                    self.answered(t, id, Err(e), now, out);
                }
            }
        }
    }

    fn next_wake(&self) -> Option<Time> {
        self.pauses.peek().map(|Reverse((at, _))| *at)
    }

    fn finished(&self) -> bool {
        self.running == 0
    }

    fn clients(&self) -> Range<u64> {
        self.base..self.base + self.sessions.len() as u64
    }

    fn hand_back(self: Box<Self>) {
        debug_assert!(self.slots.iter().all(|s| *s == Slot::Finished));
        let _ = self.back.send((self.position, self.driver)); // the caller may have given up
    }
}

/// Terminals running on the workers ([`super::EmbeddedCluster::start_terminals`]).
pub struct TerminalsRun<D> {
    back: mpsc::Receiver<(usize, D)>,
    sets: usize,
}

impl<D> TerminalsRun<D> {
    /// Blocks until every terminal is finished and returns the drivers in the order of their
    /// first terminal. Fails if `bound` passes first (the drivers stay with the workers until
    /// they finish or the cluster stops) or the cluster stopped.
    pub fn wait(self, bound: Duration) -> Result<Vec<D>, Error> {
        let deadline = Instant::now() + bound;
        let mut got: Vec<Option<D>> = (0..self.sets).map(|_| None).collect();
        for _ in 0..self.sets {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.back.recv_timeout(left) {
                Ok((i, d)) => got[i] = Some(d),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(Error::unavailable(format!("hosted terminals still running after {bound:?}")))
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Error::unavailable("the cluster stopped before its terminals finished"))
                }
            }
        }
        Ok(got.into_iter().map(|d| d.expect("every set sent once")).collect())
    }
}

impl super::EmbeddedCluster {
    /// Runs closed-loop terminals on the workers. Terminal `i` is a client session attached to
    /// the coordinator of `nodes[i]` (a node outside the cluster wraps around, as
    /// [`super::EmbeddedCluster::transport_on`]) and hosted on the worker that runs that
    /// coordinator. The terminals of one worker form one set: `make(indices)` builds its
    /// driver, `indices` being the terminals' positions in `nodes` (the driver's terminal `t`
    /// is `indices[t]`). Returns at once; [`TerminalsRun::wait`] collects the drivers.
    pub fn start_terminals<D: TerminalDriver>(
        &self,
        nodes: &[NodeId],
        mut make: impl FnMut(&[usize]) -> D,
    ) -> TerminalsRun<D> {
        let router: &Arc<Router> = &self.router;
        let topology: &Topology = &router.spec_topology;
        let coordinators: Vec<_> = nodes.iter().map(|n| topology.coordinator_for(u64::from(n.0))).collect();
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, c) in coordinators.iter().enumerate() {
            let w = *router.machines.get(&topology.machine_addr(*c)).expect("every coordinator runs on a worker");
            match groups.iter_mut().find(|(gw, _)| *gw == w) {
                Some((_, g)) => g.push(i),
                None => groups.push((w, vec![i])),
            }
        }
        let (tx, rx) = mpsc::channel();
        for (position, (w, indices)) in groups.iter().enumerate() {
            let n = indices.len() as u64;
            let base = self.next_client.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            {
                let mut clients = router.clients.write().expect("clients lock");
                for c in base..base + n {
                    clients.insert(ClientId(c), ClientDest::Worker(*w));
                }
            }
            let set = HostedSet {
                driver: make(indices),
                base,
                sessions: indices
                    .iter()
                    .enumerate()
                    .map(|(t, &i)| ClientSession::new(ClientId(base + t as u64), coordinators[i], self.request_timeout))
                    .collect(),
                slots: vec![Slot::Pausing; indices.len()],
                pauses: BinaryHeap::new(),
                running: indices.len(),
                back: tx.clone(),
                position,
            };
            router.adopt[*w].lock().expect("adopt lock").push(Box::new(set));
            router.workers[*w].poke();
        }
        TerminalsRun { back: rx, sets: groups.len() }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{DelayModel, EmbeddedCluster, EmbeddedConfig};
    use super::*;
    use crate::topology::ClusterSpec;

    fn cluster(cfg: EmbeddedConfig) -> EmbeddedCluster {
        let spec = ClusterSpec {
            engine: litmus_engines::ACID,
            topology: Topology::new(2, 4).unwrap(),
            catalog: Arc::new(litmus_protocol::builtin::catalog()),
            registry: Arc::new(litmus_protocol::builtin::registry()),
            seed: 3,
        };
        EmbeddedCluster::start(spec, cfg).unwrap()
    }

    /// A request's (sent at, answered at, result).
    type Answer = (Time, Time, Result<ResponseBody, Error>);

    /// Each terminal calls a procedure the servers do not have (answered at once with an
    /// error) until it has `calls` answers or `until` passed, pausing `pause` between calls.
    struct Probe {
        calls: usize,
        until: Time,
        pause: Duration,
        /// Per terminal: (sent at, answered at, result).
        log: Vec<Vec<Answer>>,
        sent_at: Vec<Option<Time>>,
        /// Per terminal: when its pause ends, if it is pausing.
        pausing_until: Vec<Option<Time>>,
        /// A request issued before its terminal's pause was over.
        early: bool,
    }

    impl Probe {
        fn new(terminals: usize, calls: usize, until: Time, pause: Duration) -> Probe {
            Probe {
                calls,
                until,
                pause,
                log: vec![Vec::new(); terminals],
                sent_at: vec![None; terminals],
                pausing_until: vec![None; terminals],
                early: false,
            }
        }
    }

    impl TerminalDriver for Probe {
        fn next_at(&mut self, t: usize, now: Time) -> Option<RequestBody> {
            if self.pausing_until[t].take().is_some_and(|end| now < end) {
                self.early = true;
            }
            if self.log[t].len() >= self.calls || now >= self.until {
                return None;
            }
            self.sent_at[t] = Some(now);
            let args = vec![];
            Some(RequestBody::Call { procedure: "no_such_procedure".into(), args, retrying_for: Duration::ZERO })
        }
        fn done_at(&mut self, t: usize, result: Result<ResponseBody, Error>, now: Time) {
            let sent = self.sent_at[t].take().expect("an answer follows a request");
            self.log[t].push((sent, now, result));
        }
        fn pause(&mut self, t: usize, now: Time) -> Duration {
            if self.log[t].is_empty() || self.pause.is_zero() || self.pausing_until[t].is_some() {
                return Duration::ZERO;
            }
            self.pausing_until[t] = Some(now + self.pause);
            self.pause
        }
    }

    /// Every answer is the servers' rejection of the unknown procedure.
    fn all_rejected(p: &Probe) -> bool {
        p.log.iter().flatten().all(|(_, _, r)| matches!(r, Err(Error::Invalid(_))))
    }

    #[test]
    fn a_hosted_terminals_responses_reach_its_driver_through_the_delay_model() {
        let far = Time(u64::MAX / 2);
        for (delay, round_trip_min) in [(DelayModel::NONE, Duration::ZERO), (DelayModel::LAN, 2 * DelayModel::LAN.min)]
        {
            let c = cluster(EmbeddedConfig { delay, ..EmbeddedConfig::default() });
            // Terminals on nodes 0, 1, 0, 1, 2 (wraps to 0): two sets, one per worker.
            let nodes = [0, 1, 0, 1, 2].map(NodeId);
            let mut made = Vec::new();
            let run = c.start_terminals(&nodes, |indices| {
                made.push(indices.to_vec());
                Probe::new(indices.len(), 5, far, Duration::ZERO)
            });
            assert_eq!(made, [vec![0, 2, 4], vec![1, 3]], "grouped by their coordinator's worker");
            let probes = run.wait(Duration::from_secs(10)).expect("the terminals finish");
            for p in &probes {
                assert!(p.log.iter().all(|l| l.len() == 5), "every request answered: {:?}", p.log);
                assert!(all_rejected(p), "{:?}", p.log);
                for &(sent, answered, _) in p.log.iter().flatten() {
                    let rt = Duration::from_nanos(answered.0 - sent.0);
                    assert!(rt >= round_trip_min, "{delay:?}: a round trip of {rt:?} < {round_trip_min:?}");
                }
            }
            assert!(c.router.clients.read().unwrap().is_empty(), "finished terminals are unregistered");
            c.shutdown().unwrap();
        }
    }

    #[test]
    fn a_hosted_clients_request_times_out_on_the_workers_tick() {
        // Every message takes 30 ms one way and a request times out after 10 ms: the answer is
        // the session's timeout, and the late response is ignored.
        let delay = DelayModel { min: Duration::from_millis(30), max: Duration::from_millis(30) };
        let timeout = Duration::from_millis(10);
        let c = cluster(EmbeddedConfig { delay, request_timeout: timeout, ..EmbeddedConfig::default() });
        let run = c.start_terminals(&[NodeId(0)], |n| Probe::new(n.len(), 1, Time(u64::MAX / 2), Duration::ZERO));
        let probes = run.wait(Duration::from_secs(10)).expect("the terminal finishes");
        let log = &probes[0].log[0];
        assert_eq!(log.len(), 1, "{log:?}");
        let (sent, answered, result) = &log[0];
        assert!(matches!(result, Err(Error::Unavailable { outcome_unknown: true, .. })), "{result:?}");
        let waited = Duration::from_nanos(answered.0 - sent.0);
        assert!(waited >= timeout && waited < Duration::from_millis(60), "timed out after {waited:?}");
        c.shutdown().unwrap();
    }

    #[test]
    fn hosted_terminals_pause_and_end_within_a_bound_once_their_window_closes() {
        let c = cluster(EmbeddedConfig { delay: DelayModel::NONE, ..EmbeddedConfig::default() });
        let (window, pause) = (Duration::from_millis(200), Duration::from_millis(2));
        let until = c.now() + window;
        let started = Instant::now();
        let run = c.start_terminals(&[0, 1, 0, 1].map(NodeId), |n| Probe::new(n.len(), usize::MAX, until, pause));
        let probes = run.wait(Duration::from_secs(5)).expect("the terminals finish");
        let took = started.elapsed();
        assert!(took >= window && took < window + Duration::from_millis(500), "ended {took:?} after the start");
        for p in &probes {
            assert!(!p.early, "a request went out before its pause was over");
            assert!(all_rejected(p));
            for l in &p.log {
                // At most one call per pause in the window, and at least a few.
                let most = (window.as_nanos() / pause.as_nanos()) as usize + 1;
                assert!(l.len() >= 10 && l.len() <= most, "{} calls in {window:?} with {pause:?} pauses", l.len());
                assert!(l.iter().all(|(sent, _, _)| *sent < until), "nothing sent after the window");
            }
        }
        c.shutdown().unwrap();
    }
}
