//! # The benchmark terminal: one closed-loop client as a state machine
//!
//! Written once and driven three ways:
//!
//! ```text
//!   Terminals (this module): per terminal: deal from the deck or generate ─► call ─► answer:
//!     committed / user abort / error ─► record (tally, latency, history) ─► next
//!     retryable ─► policy: retry after a randomized backoff (a *pause*) | give up | starved
//!   ├─ embedded harness: TerminalDriver, hosted on the worker that runs the terminal's
//!   │    coordinator (litmus_runtime::embedded::EmbeddedCluster::start_terminals)
//!   ├─ --connect and `litmus calibrate`: one blocking client thread per terminal (run_blocking)
//!   └─ --runtime sim: SimDriver, in virtual time (crate::simbench)
//! ```
//!
//! The machine sees only [`Time`] (nanoseconds on the driver's clock) and answers; it never
//! blocks, reads a clock or sleeps. The rules (what the harness module doc promises):
//!
//! * A transaction belongs to the measured window when it *starts* in `[measure_from, until)`;
//!   its latency runs from its first attempt to its final answer, and is recorded for
//!   committed transactions only.
//! * A retryable failure ([`Error::is_retryable`]) is retried after a pause drawn uniformly in
//!   `[cap/2, cap]` ([`harness::backoff_cap_us`]), each retry telling the server how long the
//!   transaction has been retrying (`retrying_for`, so it keeps its first attempt's age).
//!   [`RetryPolicy::GiveUpAfter`]: at most `retries` retries, then `gave_up`; and after
//!   `until + STRAGGLER_GRACE` it stops retrying (`unfinished`). [`RetryPolicy::UntilCommitted`]:
//!   retries until it commits; one still failing after its `bound` fails the run with
//!   [`BenchError::Starved`], naming it.
//! * A business transaction of several database transactions ([`Workload::next_step`], e.g. a
//!   TPC-C Delivery as one per district) runs its steps one after another as one logical
//!   transaction: counted once, its latency from the first step's start to the last answer;
//!   each step is retried on its own, its `retrying_for` and commit bound running from the
//!   step's start. A stop between steps leaves it `unfinished`; its committed steps stay.
//! * A user abort or another error is final. A rejection as invalid input fails the run with
//!   [`BenchError::Rejected`] (every retry would be rejected too).
//! * A stop (a failure anywhere in the run, or a signal relayed by the harness through
//!   [`Control::stop`]) ends every terminal at its next decision: no new transaction, no retry
//!   (`unfinished`).

use crate::harness::{self, BenchError, STRAGGLER_GRACE};
use crate::history::{HistoryWriter, OpType};
use hdrhistogram::Histogram;
use litmus_core::{Error, Time, Value};
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_workloads::mix::Deck;
use litmus_workloads::workload::{Outcomes, RetryPolicy, TxnRequest, Workload};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What every terminal of a run shares: the live commit counter (progress bar), the stop flag,
/// the failure that stopped the run, and the `--history` writer.
pub(crate) struct Control {
    /// Commits so far (warmup included), for the live throughput.
    pub committed: AtomicU64,
    pub stop: AtomicBool,
    /// What stopped the run: a rejected request, a starved transaction, a history write.
    failure: Mutex<Option<BenchError>>,
    /// `--history`: where transactions are recorded, and the number of terminals (a terminal
    /// whose transaction ended unknown goes on as process `p + terminals`).
    history: Option<(HistoryWriter, u64)>,
}

impl Control {
    pub fn new(history: Option<(HistoryWriter, u64)>) -> Control {
        Control { committed: AtomicU64::new(0), stop: AtomicBool::new(false), failure: Mutex::new(None), history }
    }

    /// Stops the run with `error` (the first one wins).
    pub fn fail(&self, error: BenchError) {
        self.stop.store(true, Ordering::Relaxed);
        if let Ok(mut r) = self.failure.lock() {
            r.get_or_insert(error);
        }
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The failure that stopped the run, if one did.
    pub fn take_failure(&self) -> Option<BenchError> {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// The `--history` writer, to flush at the end.
    pub fn history(&self) -> Option<&HistoryWriter> {
        self.history.as_ref().map(|h| &h.0)
    }

    /// Records `req` as an op of `kind` by `process` in the history, if there is one. Failing
    /// to record stops the run.
    fn record(&self, workload: &dyn Workload, req: &TxnRequest, kind: OpType, process: u64, result: Option<&[Value]>) {
        let Some((history, _)) = &self.history else { return };
        let written =
            workload.history(req, result).and_then(|ops| history.record(kind, process, ops).map_err(|e| e.to_string()));
        if let Err(e) = written {
            self.fail(BenchError::History(e));
        }
    }
}

/// The measured window on the driver's clock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TimeWindow {
    pub measure_from: Time,
    pub until: Time,
}

/// One kind's record.
pub(crate) struct KindTally {
    /// Over the transactions started in the window.
    pub measured: Outcomes,
    /// Over the whole run (the workload's invariant counts these).
    pub total: Outcomes,
    /// Committed transactions of the window, µs from first attempt to answer.
    pub latency_us: Histogram<u64>,
}

pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, harness::LATENCY_US_MAX, harness::LATENCY_SIGNIFICANT_DIGITS)
        .expect("constant bounds are valid")
}

/// The transaction a terminal is running (first attempt and retries; for a business
/// transaction of several steps, [`Workload::next_step`], the step in progress).
struct Current {
    req: TxnRequest,
    /// When the logical transaction's first attempt started (its latency runs from here).
    started: Time,
    /// When the step in progress started: its retries' `retrying_for` and the commit bound run
    /// from here.
    step_started: Time,
    /// Attempts of the step in progress so far, less one.
    attempt: u64,
    outcome: Outcomes,
}

struct TerminalState {
    rng: ChaCha8Rng,
    current: Option<Current>,
    /// The backoff to wait before the next attempt (taken by [`Terminals::pause`]).
    pause: Duration,
    /// Its process in the `--history` (its index, plus the terminal count per unknown outcome).
    process: u64,
}

/// How one logical transaction ended.
enum Final {
    Committed(Vec<Value>),
    GaveUp,
    /// Still retrying when the run ended (grace over, or a stop).
    Unfinished,
    UserAbort,
    Failed(Error),
}

/// A set of terminals sharing one workload, deck, policy and window; each terminal draws from
/// its own stream (terminal `i` of the run: `ChaCha8Rng(seed)` stream `i`).
pub(crate) struct Terminals {
    workload: Arc<dyn Workload>,
    deck: Option<Arc<Deck>>,
    policy: RetryPolicy,
    window: TimeWindow,
    control: Arc<Control>,
    terminals: Vec<TerminalState>,
    tally: BTreeMap<&'static str, KindTally>,
    unfinished: u64,
}

impl Terminals {
    /// Terminals `indices` of a run (their positions among all its terminals).
    pub fn new(
        workload: Arc<dyn Workload>,
        deck: Option<Arc<Deck>>,
        window: TimeWindow,
        control: Arc<Control>,
        seed: u64,
        indices: &[usize],
    ) -> Terminals {
        let terminals = indices
            .iter()
            .map(|&i| {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                rng.set_stream(i as u64);
                TerminalState { rng, current: None, pause: Duration::ZERO, process: i as u64 }
            })
            .collect();
        let policy = workload.retry_policy();
        Terminals { workload, deck, policy, window, control, terminals, tally: BTreeMap::new(), unfinished: 0 }
    }

    /// The terminals' record by kind, and how many transactions were cut off unfinished
    /// (those still running count too).
    pub fn into_tally(self) -> (BTreeMap<&'static str, KindTally>, u64) {
        let running = self.terminals.iter().filter(|t| t.current.is_some()).count() as u64;
        (self.tally, self.unfinished + running)
    }

    fn call(c: &Current, now: Time) -> RequestBody {
        let retrying_for = if c.attempt == 0 { Duration::ZERO } else { Duration::from_nanos(now.0 - c.step_started.0) };
        RequestBody::Call { procedure: c.req.procedure.to_string(), args: c.req.args.clone(), retrying_for }
    }

    /// The next request of terminal `t`: the retry of its current transaction, or a new one
    /// while the window is open; `None` once it is over or the run stops.
    pub fn next_at(&mut self, t: usize, now: Time) -> Option<RequestBody> {
        let st = &mut self.terminals[t];
        if let Some(c) = &st.current {
            return Some(Self::call(c, now));
        }
        if now >= self.window.until || self.control.stopped() {
            return None;
        }
        let req = match &self.deck {
            Some(deck) => self.workload.generate_kind(deck.deal(), &mut st.rng),
            None => self.workload.generate(&mut st.rng),
        };
        self.control.record(self.workload.as_ref(), &req, OpType::Invoke, st.process, None);
        let c = Current { req, started: now, step_started: now, attempt: 0, outcome: Outcomes::default() };
        let body = Self::call(&c, now);
        st.current = Some(c);
        Some(body)
    }

    /// The answer to terminal `t`'s request.
    pub fn done_at(&mut self, t: usize, result: Result<ResponseBody, Error>, now: Time) {
        let Some(mut c) = self.terminals[t].current.take() else { return };
        let end = match result {
            Ok(ResponseBody::Returned(values)) => match self.workload.next_step(&c.req, &values) {
                // The business transaction goes on with its next step, at once: unless the run
                // stops, which leaves it unfinished (its committed steps stay committed).
                Some(next) if !self.control.stopped() => {
                    c.req = next;
                    c.step_started = now;
                    c.attempt = 0;
                    self.terminals[t].current = Some(c);
                    return;
                }
                Some(_) => Final::Unfinished,
                None => Final::Committed(values),
            },
            Ok(other) => Final::Failed(Error::Internal(format!("unexpected response {other:?}"))),
            Err(e) if e.is_retryable() => {
                c.outcome.aborts += 1;
                c.outcome.abort_reasons.count(&e);
                let straggling = matches!(self.policy, RetryPolicy::GiveUpAfter { .. })
                    && now >= self.window.until + STRAGGLER_GRACE;
                if self.control.stopped() || straggling {
                    Final::Unfinished
                } else {
                    let give_up = match self.policy {
                        RetryPolicy::GiveUpAfter { retries } => c.attempt >= u64::from(retries),
                        RetryPolicy::UntilCommitted { bound } => {
                            let waited = Duration::from_nanos(now.0 - c.step_started.0);
                            if waited >= bound {
                                self.control.fail(BenchError::Starved {
                                    kind: c.req.kind,
                                    procedure: c.req.procedure,
                                    waited_secs: waited.as_secs_f64(),
                                    attempts: c.attempt + 1,
                                    last: e,
                                });
                            }
                            // Stopping (this or another failure): the run's report is void.
                            self.control.stopped()
                        }
                    };
                    if give_up {
                        Final::GaveUp
                    } else {
                        c.attempt += 1;
                        c.outcome.retries += 1;
                        let st = &mut self.terminals[t];
                        let cap = harness::backoff_cap_us(c.attempt.min(u64::from(u32::MAX)) as u32);
                        st.pause = Duration::from_micros(st.rng.gen_range(cap / 2..=cap));
                        st.current = Some(c);
                        return;
                    }
                }
            }
            Err(Error::UserAbort(_)) => Final::UserAbort,
            Err(e) => Final::Failed(e),
        };
        self.finish(t, c, end, now);
    }

    /// How long terminal `t` waits before its next request (its retry's backoff, once).
    pub fn pause(&mut self, t: usize) -> Duration {
        std::mem::take(&mut self.terminals[t].pause)
    }

    fn finish(&mut self, t: usize, mut c: Current, end: Final, now: Time) {
        let (workload, control) = (self.workload.as_ref(), self.control.as_ref());
        let process = &mut self.terminals[t].process;
        match &end {
            Final::Committed(out) => control.record(workload, &c.req, OpType::Ok, *process, Some(out)),
            // Every attempt aborted (a retryable abort or the procedure's own): no effect.
            Final::GaveUp | Final::Unfinished | Final::UserAbort => {
                control.record(workload, &c.req, OpType::Fail, *process, None)
            }
            Final::Failed(_) => {
                control.record(workload, &c.req, OpType::Info, *process, None);
                *process += control.history.as_ref().map_or(0, |h| h.1);
            }
        }
        match end {
            Final::Committed(_) => {
                c.outcome.committed = 1;
                control.committed.fetch_add(1, Ordering::Relaxed);
            }
            Final::GaveUp => c.outcome.gave_up = 1,
            Final::Unfinished => self.unfinished += 1,
            Final::UserAbort => c.outcome.user_aborts = 1,
            Final::Failed(e) => {
                c.outcome.errors = 1;
                c.outcome.outcome_unknown = u64::from(matches!(e, Error::Unavailable { outcome_unknown: true, .. }));
                if let Error::Invalid(_) = e {
                    control.fail(BenchError::Rejected { kind: c.req.kind, procedure: c.req.procedure, error: e });
                }
            }
        }
        let k = self.tally.entry(c.req.kind).or_insert_with(|| KindTally {
            measured: Outcomes::default(),
            total: Outcomes::default(),
            latency_us: new_histogram(),
        });
        k.total.add(&c.outcome);
        if c.started >= self.window.measure_from && c.started < self.window.until {
            k.measured.add(&c.outcome);
            if c.outcome.committed == 1 {
                let us = (now.0 - c.started.0) / 1000;
                k.latency_us.saturating_record(us.clamp(1, harness::LATENCY_US_MAX));
            }
        }
    }

    /// Runs terminal `t` to its end on a blocking client, on the clock `now` (a client thread:
    /// `--connect`, `litmus calibrate`). Pauses are slept.
    pub fn run_blocking(&mut self, t: usize, client: &mut litmus_client::Client, now: &dyn Fn() -> Time) {
        loop {
            let pause = self.pause(t);
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
            let Some(body) = self.next_at(t, now()) else { break };
            let RequestBody::Call { procedure, args, retrying_for } = body else {
                unreachable!("a terminal only calls procedures")
            };
            let result = client.call_retry(&procedure, args, retrying_for).map(ResponseBody::Returned);
            self.done_at(t, result, now());
        }
    }
}

impl litmus_runtime::embedded::TerminalDriver for Terminals {
    fn next_at(&mut self, terminal: usize, now: Time) -> Option<RequestBody> {
        Terminals::next_at(self, terminal, now)
    }
    fn done_at(&mut self, terminal: usize, result: Result<ResponseBody, Error>, now: Time) {
        Terminals::done_at(self, terminal, result, now)
    }
    fn pause(&mut self, terminal: usize, _: Time) -> Duration {
        Terminals::pause(self, terminal)
    }
}

impl litmus_runtime::sim::SimDriver for Terminals {
    fn next(&mut self, _: usize, _: &mut ChaCha8Rng) -> Option<RequestBody> {
        unreachable!("the simulator calls next_at")
    }
    fn done(&mut self, _: usize, _: &RequestBody, _: &Result<ResponseBody, Error>) {
        unreachable!("the simulator calls done_at")
    }
    fn verify(&mut self, _: &mut litmus_runtime::sim::Simulator) -> Result<(), String> {
        Ok(())
    }
    fn next_at(&mut self, client: usize, _: &mut ChaCha8Rng, now: Time) -> Option<RequestBody> {
        Terminals::next_at(self, client, now)
    }
    fn done_at(&mut self, client: usize, _: &RequestBody, result: &Result<ResponseBody, Error>, now: Time) {
        Terminals::done_at(self, client, result.clone(), now)
    }
    fn pause(&mut self, client: usize, _: Time) -> Duration {
        Terminals::pause(self, client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use litmus_core::Catalog;
    use litmus_core::{AbortReason, InvalidInput};
    use litmus_protocol::Registry;
    use litmus_workloads::workload::RunStats;

    /// One kind, one procedure, the retry policy under test; `steps`: a business transaction
    /// of that many steps (`p` with argument 0, 1, ...) instead of one call of a random argument.
    struct OneKind(RetryPolicy, Option<i64>);

    impl Workload for OneKind {
        fn name(&self) -> &'static str {
            "one-kind"
        }
        fn describe(&self) -> String {
            String::new()
        }
        fn catalog(&self) -> Catalog {
            Catalog::default()
        }
        fn register(&self, _: &mut Registry) {}
        fn prepare(&self, _: &mut dyn FnMut() -> Result<litmus_client::Client, Error>) -> anyhow::Result<()> {
            Ok(())
        }
        fn generate(&self, rng: &mut ChaCha8Rng) -> TxnRequest {
            let arg = if self.1.is_some() { 0 } else { rng.gen_range(0..1000) };
            TxnRequest { kind: "k", procedure: "p", args: vec![Value::Int(arg)] }
        }
        fn next_step(&self, req: &TxnRequest, _: &[Value]) -> Option<TxnRequest> {
            match (req.args[0].clone(), self.1) {
                (Value::Int(i), Some(steps)) if i + 1 < steps => {
                    Some(TxnRequest { args: vec![Value::Int(i + 1)], ..req.clone() })
                }
                _ => None,
            }
        }
        fn retry_policy(&self) -> RetryPolicy {
            self.0
        }
        fn verify(&self, _: &mut litmus_client::Client, _: &RunStats) -> anyhow::Result<String> {
            Ok(String::new())
        }
    }

    const MS: u64 = 1_000_000;

    /// A business transaction of three steps whose steps may retry for 50 ms each.
    fn three_steps() -> OneKind {
        OneKind(RetryPolicy::UntilCommitted { bound: Duration::from_millis(50) }, Some(3))
    }

    fn step_of(body: Option<RequestBody>) -> (i64, Duration) {
        match body {
            Some(RequestBody::Call { args, retrying_for, .. }) => match args[..] {
                [Value::Int(i)] => (i, retrying_for),
                _ => panic!("unexpected args {args:?}"),
            },
            other => panic!("expected a call, got {other:?}"),
        }
    }

    /// `Workload::next_step`: the steps run one after another as one logical transaction,
    /// counted and timed once; a step's retry and its commit bound run from the step's start.
    #[test]
    fn a_business_transaction_of_several_steps_counts_once_and_retries_step_by_step() {
        let control = Arc::new(Control::new(None));
        let window = TimeWindow { measure_from: Time(10 * MS), until: Time(100 * MS) };
        let mut t = Terminals::new(Arc::new(three_steps()), None, window, control.clone(), 7, &[0]);
        assert_eq!(step_of(t.next_at(0, Time(20 * MS))), (0, Duration::ZERO));
        t.done_at(0, committed(), Time(21 * MS));
        assert!(t.pause(0).is_zero(), "the next step goes at once");
        assert_eq!(step_of(t.next_at(0, Time(21 * MS))), (1, Duration::ZERO), "step 1 is a new transaction");
        t.done_at(0, aborted(), Time(22 * MS));
        t.pause(0);
        // The retry says how long step 1 has been retrying, not the whole business transaction.
        assert_eq!(step_of(t.next_at(0, Time(24 * MS))), (1, Duration::from_millis(3)));
        t.done_at(0, committed(), Time(25 * MS));
        // Step 2 starts 45 ms after step 0: the 50 ms bound is the step's, so it may retry.
        assert_eq!(step_of(t.next_at(0, Time(65 * MS))), (2, Duration::ZERO));
        t.done_at(0, aborted(), Time(70 * MS));
        assert!(control.take_failure().is_none(), "5 ms into step 2: not starved");
        t.pause(0);
        assert_eq!(step_of(t.next_at(0, Time(71 * MS))).0, 2);
        t.done_at(0, committed(), Time(72 * MS));
        assert_eq!(control.committed.load(Ordering::Relaxed), 1, "one logical transaction");
        let (m, _, unfinished, lat) = tally(t);
        assert_eq!((m.committed, m.aborts, m.retries, unfinished), (1, 2, 2, 0));
        assert_eq!(lat.len(), 1);
        assert!((51_900..=52_100).contains(&lat[0]), "from the first step's start to the last answer: {lat:?}");

        // A stop between steps leaves the business transaction unfinished (its steps stay done).
        let control = Arc::new(Control::new(None));
        let mut t = Terminals::new(Arc::new(three_steps()), None, window, control.clone(), 7, &[0]);
        t.next_at(0, Time(20 * MS)).expect("step 0");
        control.stop.store(true, Ordering::Relaxed);
        t.done_at(0, committed(), Time(21 * MS));
        assert!(t.next_at(0, Time(22 * MS)).is_none());
        let (m, _, unfinished, _) = tally(t);
        assert_eq!((m.committed, unfinished), (0, 1));
    }

    /// One terminal; the window is [10 ms, 100 ms).
    fn terminal(policy: RetryPolicy) -> (Terminals, Arc<Control>) {
        let control = Arc::new(Control::new(None));
        let window = TimeWindow { measure_from: Time(10 * MS), until: Time(100 * MS) };
        (Terminals::new(Arc::new(OneKind(policy, None)), None, window, control.clone(), 7, &[0]), control)
    }

    fn retrying_for(body: Option<RequestBody>) -> Duration {
        match body {
            Some(RequestBody::Call { retrying_for, .. }) => retrying_for,
            other => panic!("expected a call, got {other:?}"),
        }
    }

    fn aborted() -> Result<ResponseBody, Error> {
        Err(Error::Abort(AbortReason::LockConflict))
    }

    fn committed() -> Result<ResponseBody, Error> {
        Ok(ResponseBody::Returned(vec![]))
    }

    fn tally(t: Terminals) -> (Outcomes, Outcomes, u64, Vec<u64>) {
        let (mut tally, unfinished) = t.into_tally();
        let k = tally.remove("k").expect("kind k ran");
        let lat = k.latency_us.iter_recorded().map(|v| v.value_iterated_to()).collect();
        (k.measured, k.total, unfinished, lat)
    }

    #[test]
    fn retry_until_committed_keeps_the_first_attempts_start() {
        let (mut t, control) = terminal(RetryPolicy::UntilCommitted { bound: Duration::from_secs(10) });
        assert_eq!(retrying_for(t.next_at(0, Time(20 * MS))), Duration::ZERO);
        t.done_at(0, aborted(), Time(21 * MS));
        let pause = t.pause(0);
        assert!((50..=100).contains(&pause.as_micros()), "backoff in [cap/2, cap] of 100 µs: {pause:?}");
        assert_eq!(t.pause(0), Duration::ZERO, "a pause is taken once");
        // The retry tells the server since when it has been trying: the first attempt's start.
        assert_eq!(retrying_for(t.next_at(0, Time(23 * MS))), Duration::from_millis(3));
        t.done_at(0, committed(), Time(25 * MS));
        let (m, total, unfinished, lat) = tally(t);
        assert_eq!((m.committed, m.aborts, m.retries, m.gave_up, unfinished), (1, 1, 1, 0, 0));
        assert_eq!(m.abort_reasons.lock_conflict, 1);
        assert_eq!(total, m);
        assert_eq!(lat.len(), 1);
        assert!((4990..=5010).contains(&lat[0]), "latency from the first attempt: {lat:?}");
        assert_eq!(control.committed.load(Ordering::Relaxed), 1);
        assert!(control.take_failure().is_none());
    }

    #[test]
    fn a_starved_transaction_fails_the_run_naming_it() {
        let (mut t, control) = terminal(RetryPolicy::UntilCommitted { bound: Duration::from_millis(50) });
        t.next_at(0, Time(20 * MS)).expect("a first request");
        t.done_at(0, aborted(), Time(40 * MS));
        t.pause(0);
        t.next_at(0, Time(41 * MS)).expect("retried: 21 ms < 50 ms");
        t.done_at(0, aborted(), Time(70 * MS));
        match control.take_failure() {
            Some(BenchError::Starved { kind: "k", procedure: "p", attempts: 2, .. }) => {}
            other => panic!("expected the run to fail naming the starved transaction, got {other:?}"),
        }
        assert!(t.next_at(0, Time(71 * MS)).is_none(), "the run stops: no new transaction");
    }

    #[test]
    fn give_up_after_n_retries_then_start_a_new_transaction() {
        let (mut t, control) = terminal(RetryPolicy::GiveUpAfter { retries: 2 });
        t.next_at(0, Time(20 * MS)).expect("a first request");
        for i in 0..2 {
            t.done_at(0, aborted(), Time(21 * MS + i));
            assert!(!t.pause(0).is_zero(), "retry {} backs off", i + 1);
            assert!(!retrying_for(t.next_at(0, Time(22 * MS + i))).is_zero(), "retry {}", i + 1);
        }
        t.done_at(0, aborted(), Time(30 * MS));
        assert!(t.pause(0).is_zero(), "given up: no backoff");
        assert_eq!(retrying_for(t.next_at(0, Time(31 * MS))), Duration::ZERO, "a new transaction");
        t.done_at(0, committed(), Time(32 * MS));
        let (m, _, unfinished, _) = tally(t);
        assert_eq!((m.committed, m.aborts, m.retries, m.gave_up, unfinished), (1, 3, 2, 1, 0));
        assert!(control.take_failure().is_none());
    }

    #[test]
    fn a_user_abort_is_final_and_invalid_input_stops_the_run() {
        let (mut t, control) = terminal(RetryPolicy::UntilCommitted { bound: Duration::from_secs(10) });
        t.next_at(0, Time(20 * MS)).expect("a first request");
        t.done_at(0, Err(Error::UserAbort("no such item".into())), Time(21 * MS));
        assert!(t.pause(0).is_zero(), "no retry of a user abort");
        assert_eq!(retrying_for(t.next_at(0, Time(22 * MS))), Duration::ZERO, "a new transaction");
        assert!(control.take_failure().is_none());
        t.done_at(0, Err(Error::Invalid(InvalidInput::Config("no procedure p".into()))), Time(23 * MS));
        assert!(matches!(control.take_failure(), Some(BenchError::Rejected { kind: "k", procedure: "p", .. })));
        assert!(t.next_at(0, Time(24 * MS)).is_none(), "the run stops");
        let (m, _, _, _) = tally(t);
        assert_eq!((m.committed, m.user_aborts, m.errors, m.aborts), (0, 1, 1, 0));
    }

    #[test]
    fn the_window_counts_transactions_started_inside_it_and_stragglers_are_cut_off() {
        let (mut t, _) = terminal(RetryPolicy::GiveUpAfter { retries: 8 });
        // Started in the warmup, committed inside the window: the whole run's, not the window's.
        t.next_at(0, Time(5 * MS)).expect("a warmup request");
        t.done_at(0, committed(), Time(12 * MS));
        // Started inside, committed after the window: the window's, latency included.
        t.next_at(0, Time(99 * MS)).expect("a request in the window");
        t.done_at(0, committed(), Time(101 * MS));
        assert!(t.next_at(0, Time(101 * MS)).is_none(), "no new transaction after the window");
        let (m, total, unfinished, lat) = tally(t);
        assert_eq!((m.committed, total.committed, unfinished), (1, 2, 0));
        assert_eq!(lat.len(), 1);
        assert!((1990..=2010).contains(&lat[0]), "{lat:?}");

        // Still retrying after the grace: cut off, unfinished.
        let (mut t, _) = terminal(RetryPolicy::GiveUpAfter { retries: 8 });
        t.next_at(0, Time(90 * MS)).expect("a request in the window");
        let late = Time(100 * MS) + STRAGGLER_GRACE;
        t.done_at(0, aborted(), late);
        assert!(t.pause(0).is_zero() && t.next_at(0, late).is_none(), "no retry after the grace");
        let (m, _, unfinished, lat) = tally(t);
        assert_eq!((m.committed, m.aborts, m.gave_up, unfinished, lat.len()), (0, 1, 0, 1, 0));
    }
}
