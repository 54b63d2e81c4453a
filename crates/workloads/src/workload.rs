//! The workload abstraction (the shape of toydb's `src/bin/workload.rs`).
//!
//! A [`Workload`] is everything the harness needs to benchmark a database without knowing what
//! the transactions mean:
//!
//! ```text
//!   catalog() + register()   tables and stored procedures, merged into the cluster's
//!   prepare(clients)         initial data, loaded through ordinary clients
//!   generate(rng) ──► TxnRequest { kind, procedure, args } ──► Client::call   (closed loop)
//!   verify(client, stats)    the workload's invariant, checked against what the run reported
//! ```
//!
//! `generate` is a pure function of the RNG it is handed (one seeded stream per client), so a
//! client's request sequence replays from the seed. `verify` gets the outcome counts of the
//! *whole* run ([`RunStats::total`], warmup included), because the invariant is about every
//! transaction that may have touched the data, not only the measured ones.
//!
//! ## Outcome classes
//!
//! Every logical transaction ends in exactly one class, counted per kind in [`Outcomes`]:
//!
//! * `committed` — the call returned `Ok`.
//! * `gave_up` — every attempt failed with a retryable error ([`litmus_core::Error::is_retryable`])
//!   and the [`RetryPolicy`] gave it up; by the error contract such an attempt left no effect.
//!   Always printed (`gave up: N`); a workload with [`RetryPolicy::UntilCommitted`] has none.
//! * `user_aborts` — the procedure aborted itself ([`litmus_core::Error::UserAbort`]).
//! * `errors` — any other failure, among them `outcome_unknown` timeouts.
//!
//! A transaction in the last two classes is *indeterminate* for invariants: an engine without
//! atomicity (nocc) keeps the writes made before the failure, and a timed-out commit may or may
//! not have happened. Invariants must hold for every resolution of the indeterminate ones.

use crate::mix::MixSpec;
use litmus_client::Client;
use litmus_core::{Catalog, Error, PartitionId, Value};
use litmus_protocol::engine::Guarantee;
use litmus_protocol::Registry;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// A benchmark workload: schema, procedures, initial data, transaction mix and invariant.
pub trait Workload: Send + Sync {
    fn name(&self) -> &'static str;

    /// The workload's settings in one line (for report headers), e.g. `records=10000 ...`.
    fn describe(&self) -> String;

    /// Tables this workload needs (merged into the cluster catalog).
    fn catalog(&self) -> Catalog;

    /// Stored procedures it calls.
    fn register(&self, registry: &mut Registry);

    /// Loads the initial data through clients made by `clients` (several may load in parallel
    /// threads). Each call of `clients` opens a new client session.
    fn prepare(&self, clients: &mut dyn FnMut() -> Result<Client, Error>) -> anyhow::Result<()>;

    /// Picks the next transaction.
    fn generate(&self, rng: &mut ChaCha8Rng) -> TxnRequest;

    /// The next transaction of `kind` (one of [`Workload::mix`]'s), for a workload whose mix the
    /// harness deals from a deck ([`MixSpec::deck`]).
    fn generate_kind(&self, kind: &'static str, rng: &mut ChaCha8Rng) -> TxnRequest {
        let _ = kind;
        self.generate(rng)
    }

    /// The next database transaction of the business transaction `req` belongs to, now that
    /// `req` committed with `result`; `None` when the business transaction is complete (the
    /// default: one database transaction each). A terminal runs the steps one after another as
    /// one logical transaction: retried step by step, counted and timed once, from its first
    /// step's start to its last step's answer (TPC-C clause 2.7.4.1: a Delivery may be done as
    /// up to 10 database transactions).
    fn next_step(&self, req: &TxnRequest, result: &[Value]) -> Option<TxnRequest> {
        let _ = (req, result);
        None
    }

    /// The partition client `client`'s transactions start at, when the workload gives each
    /// client a home (a TPC-C terminal's warehouse, clause 2.4.1.1). The harness and the simulated
    /// bench attach such a client to the coordinator on that partition's node, as a deployment
    /// routes a terminal to the server holding its data; `None` attaches round robin.
    fn home_partition(&self, client: u64, partitions: u32) -> Option<PartitionId> {
        let _ = (client, partitions);
        None
    }

    /// The mix the workload defines, if any: the report gives the completed share of each kind
    /// and a verdict against it ([`crate::mix`]).
    fn mix(&self) -> Option<MixSpec> {
        None
    }

    /// What the harness does when an attempt fails with a retryable error.
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::GiveUpAfter { retries: crate::setup::RETRIES_MAX }
    }

    /// The weakest guarantee the workload runs correctly under, and why, or `None` when it
    /// needs none. The harness refuses an engine whose guarantee does not cover it
    /// ([`litmus_protocol::engine::Guarantee::covers`]) up front, rather than report the
    /// workload's failures as if they were the database's.
    fn needs_isolation(&self) -> Option<(Guarantee, &'static str)> {
        None
    }

    /// Checks the workload's invariant after the run; returns a verdict line, `Err` on violation.
    fn verify(&self, client: &mut Client, stats: &RunStats) -> anyhow::Result<String>;

    /// Whether [`Workload::history`] can describe this workload's transactions (`--history`).
    fn records_history(&self) -> bool {
        false
    }

    /// `--history` (`litmus_bench::history`): the reads and writes of `req` as rw-register micro-ops,
    /// with written values unique per key — for the invocation (`result: None`, reads unknown)
    /// or for the committed call that returned `result`. `Err`: a result this cannot read.
    fn history(&self, req: &TxnRequest, result: Option<&[Value]>) -> Result<Vec<MicroOp>, String> {
        let _ = (req, result);
        Err(format!("{} records no history", self.name()))
    }
}

/// One read or write of a transaction, keys and values as integers: a micro-op of an Elle
/// rw-register history (`litmus_bench::history` writes and checks those).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MicroOp {
    /// `[:r k v]`; `None` is `nil` (unknown in an invocation, the initial value in a completion).
    Read { key: i64, value: Option<i64> },
    /// `[:w k v]`.
    Write { key: i64, value: i64 },
}

/// What the harness does with a transaction whose attempt failed with a retryable error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum RetryPolicy {
    /// Retry at most `retries` times, then count it under `gave_up`.
    GiveUpAfter { retries: u32 },
    /// Retry until it commits or aborts itself, keeping its first attempt's priority (TPC-C's
    /// terminals: no transaction is ever given up). One still failing after `bound` fails the
    /// run with `litmus_bench::BenchError::Starved`, naming it.
    UntilCommitted { bound: Duration },
}

/// One transaction to run: a stored procedure call and the label it is reported under.
#[derive(Clone, Debug, PartialEq)]
pub struct TxnRequest {
    /// Type label for the report, e.g. `"read"`, `"update"`.
    pub kind: &'static str,
    pub procedure: &'static str,
    pub args: Vec<Value>,
}

/// How the logical transactions of one kind ended (see the module doc for the classes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Outcomes {
    pub committed: u64,
    /// Attempts that failed with a retryable error (each is followed by a retry or a give-up).
    pub aborts: u64,
    /// Attempts re-run after a retryable failure.
    pub retries: u64,
    /// Transactions abandoned after `RETRIES_MAX` retries (never under
    /// [`RetryPolicy::UntilCommitted`]).
    pub gave_up: u64,
    pub user_aborts: u64,
    /// Non-retryable failures other than user aborts (`outcome_unknown` included).
    pub errors: u64,
    /// Of `errors`: timeouts whose commit may or may not have happened.
    pub outcome_unknown: u64,
    /// Of `aborts`: why (the engine's `AbortReason`, or unavailable).
    pub abort_reasons: AbortReasons,
}

/// Retryable failures by cause: what a user tuning a workload (or an engineer chasing an abort
/// rate) asks first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AbortReasons {
    pub lock_conflict: u64,
    pub deadlock: u64,
    pub wounded: u64,
    pub write_conflict: u64,
    pub timestamp_too_old: u64,
    pub vote_no: u64,
    pub failure: u64,
    pub timeout: u64,
    pub other: u64,
    /// `Error::Unavailable` with a known outcome (a node down, a connection lost).
    pub unavailable: u64,
}

impl AbortReasons {
    /// Counts one retryable failure.
    pub fn count(&mut self, e: &Error) {
        use litmus_core::AbortReason as R;
        let slot = match e {
            Error::Abort(R::LockConflict) => &mut self.lock_conflict,
            Error::Abort(R::Deadlock) => &mut self.deadlock,
            Error::Abort(R::Wounded) => &mut self.wounded,
            Error::Abort(R::WriteConflict) => &mut self.write_conflict,
            Error::Abort(R::TimestampTooOld) => &mut self.timestamp_too_old,
            Error::Abort(R::VoteNo) => &mut self.vote_no,
            Error::Abort(R::Failure) => &mut self.failure,
            Error::Abort(R::Timeout) => &mut self.timeout,
            Error::Unavailable { .. } => &mut self.unavailable,
            _ => &mut self.other,
        };
        *slot += 1;
    }

    pub fn add(&mut self, o: &AbortReasons) {
        for (a, b) in self.slots_mut().into_iter().zip(o.slots()) {
            *a += b;
        }
    }

    /// `(name, count)` of every non-zero cause, largest first.
    pub fn nonzero(&self) -> Vec<(&'static str, u64)> {
        let mut v: Vec<(&'static str, u64)> =
            Self::NAMES.iter().copied().zip(self.slots()).filter(|(_, n)| *n > 0).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v
    }

    const NAMES: [&'static str; 10] = [
        "lock conflict",
        "deadlock",
        "wounded",
        "write conflict",
        "timestamp too old",
        "vote no",
        "failure",
        "timeout",
        "other",
        "unavailable",
    ];

    fn slots(&self) -> [u64; 10] {
        [
            self.lock_conflict,
            self.deadlock,
            self.wounded,
            self.write_conflict,
            self.timestamp_too_old,
            self.vote_no,
            self.failure,
            self.timeout,
            self.other,
            self.unavailable,
        ]
    }

    fn slots_mut(&mut self) -> [&mut u64; 10] {
        [
            &mut self.lock_conflict,
            &mut self.deadlock,
            &mut self.wounded,
            &mut self.write_conflict,
            &mut self.timestamp_too_old,
            &mut self.vote_no,
            &mut self.failure,
            &mut self.timeout,
            &mut self.other,
            &mut self.unavailable,
        ]
    }
}

impl Outcomes {
    /// Transactions that may have left some or all of their writes (see the module doc).
    pub fn indeterminate(&self) -> u64 {
        self.user_aborts + self.errors
    }

    /// Logical transactions finished, in any class.
    pub fn finished(&self) -> u64 {
        self.committed + self.gave_up + self.user_aborts + self.errors
    }

    pub fn add(&mut self, o: &Outcomes) {
        self.committed += o.committed;
        self.aborts += o.aborts;
        self.retries += o.retries;
        self.gave_up += o.gave_up;
        self.user_aborts += o.user_aborts;
        self.errors += o.errors;
        self.outcome_unknown += o.outcome_unknown;
        self.abort_reasons.add(&o.abort_reasons);
    }
}

/// What a run did, handed to [`Workload::verify`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunStats {
    /// Length of the measured window, seconds.
    pub measured_secs: f64,
    /// Per kind, transactions that finished inside the measured window.
    pub measured: BTreeMap<&'static str, Outcomes>,
    /// Per kind, every transaction of the run (warmup and stragglers included).
    pub total: BTreeMap<&'static str, Outcomes>,
    /// Transactions cut off while retrying (grace over after the window, or a stop signal).
    pub unfinished: u64,
}

impl RunStats {
    /// Whole-run outcomes of one kind (zero if the kind never ran).
    pub fn total_of(&self, kind: &str) -> Outcomes {
        self.total.get(kind).copied().unwrap_or_default()
    }

    /// Whole-run outcomes summed over kinds.
    pub fn total_all(&self) -> Outcomes {
        let mut sum = Outcomes::default();
        self.total.values().for_each(|o| sum.add(o));
        sum
    }

    /// Measured-window outcomes summed over kinds.
    pub fn measured_all(&self) -> Outcomes {
        let mut sum = Outcomes::default();
        self.measured.values().for_each(|o| sum.add(o));
        sum
    }
}

/// An embedded cluster running `engine` on `nodes` nodes and `partitions` partitions, with no
/// injected network delay, holding `w`'s tables and procedures and loaded by `w.prepare`: the
/// fixture tests use to poke at a workload's `verify` directly.
pub fn loaded_cluster(
    w: &dyn Workload,
    engine: litmus_protocol::EngineKind,
    nodes: u32,
    partitions: u32,
) -> anyhow::Result<litmus_runtime::embedded::EmbeddedCluster> {
    use litmus_runtime::embedded::{DelayModel, EmbeddedCluster, EmbeddedConfig};
    use litmus_runtime::{ClusterSpec, Topology};
    let mut catalog = litmus_protocol::builtin::catalog();
    catalog.merge(&w.catalog());
    let mut registry = litmus_protocol::builtin::registry();
    w.register(&mut registry);
    let spec = ClusterSpec {
        engine,
        topology: Topology::new(nodes, partitions)?,
        catalog: std::sync::Arc::new(catalog),
        registry: std::sync::Arc::new(registry),
        seed: 5,
    };
    let cluster =
        EmbeddedCluster::start(spec, EmbeddedConfig { delay: DelayModel::NONE, ..EmbeddedConfig::default() })?;
    w.prepare(&mut || Ok(Client::new(Box::new(cluster.transport()))))?;
    Ok(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;
    use litmus_core::AbortReason;

    #[test]
    fn abort_reasons_count_each_cause_and_list_the_largest_first() {
        let mut r = AbortReasons::default();
        for e in [
            Error::Abort(AbortReason::Deadlock),
            Error::Abort(AbortReason::Wounded),
            Error::Abort(AbortReason::Deadlock),
            Error::unavailable("node down"),
            Error::Abort(AbortReason::Other("rolled back".into())),
        ] {
            r.count(&e);
        }
        assert_eq!(r.nonzero(), vec![("deadlock", 2), ("other", 1), ("unavailable", 1), ("wounded", 1)]);
        let mut total = Outcomes { aborts: 5, abort_reasons: r, ..Outcomes::default() };
        total.add(&Outcomes {
            aborts: 1,
            abort_reasons: AbortReasons { timeout: 1, ..Default::default() },
            ..Default::default()
        });
        assert_eq!(total.abort_reasons.nonzero().iter().map(|(_, n)| n).sum::<u64>(), total.aborts);
    }
}
