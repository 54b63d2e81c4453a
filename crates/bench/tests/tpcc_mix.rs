//! TPC-C measured as the specification measures it, end to end on a small embedded
//! cluster with a fault injected into Delivery: an attempt of it aborts (retryably) unless it
//! is the `every`-th one. The terminals retry until commit, so the run still commits the deck's
//! mix; a Delivery that can never commit fails the run loudly, naming it; and a run that gives
//! Deliveries up is flagged below the minimums on its `mix:` line.

use litmus_bench::harness::{self, BenchConfig, BenchError};
use litmus_client::Client;
use litmus_core::{AbortReason, Catalog, Error};
use litmus_protocol::{EngineKind, Registry};
use litmus_workloads::mix::MixSpec;
use litmus_workloads::tpcc::{self, txns, Tpcc, TpccOptions};
use litmus_workloads::workload::{RetryPolicy, RunStats, TxnRequest, Workload};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const FLAKY_DELIVERY: &str = "tpcc_delivery_flaky";

/// TPC-C whose Deliveries run through [`FLAKY_DELIVERY`].
struct FlakyDelivery {
    tpcc: Tpcc,
    /// Every `every`-th attempt runs; the others abort retryably (`u64::MAX`: never runs).
    every: u64,
    attempts: Arc<AtomicU64>,
    policy: Option<RetryPolicy>,
}

impl FlakyDelivery {
    fn new(every: u64, commit_bound: Duration, policy: Option<RetryPolicy>) -> FlakyDelivery {
        let opts = TpccOptions {
            warehouses: 2,
            base_txns: None,
            variant: None,
            scale_div: 100,
            one_round: false,
            // The fault wraps the one-transaction Delivery (its district steps would each be
            // an attempt of their own).
            delivery_txns: 1,
        };
        let tpcc = Tpcc::new(&opts, false).unwrap().with_commit_bound(commit_bound);
        FlakyDelivery { tpcc, every, attempts: Arc::new(AtomicU64::new(0)), policy }
    }

    fn flaky(&self, mut req: TxnRequest) -> TxnRequest {
        if req.kind == tpcc::KIND_DELIVERY {
            req.procedure = FLAKY_DELIVERY;
        }
        req
    }
}

impl Workload for FlakyDelivery {
    fn name(&self) -> &'static str {
        "tpcc"
    }
    fn describe(&self) -> String {
        format!("{}; delivery runs 1 attempt in {}", self.tpcc.describe(), self.every)
    }
    fn catalog(&self) -> Catalog {
        self.tpcc.catalog()
    }
    fn register(&self, registry: &mut Registry) {
        self.tpcc.register(registry);
        let real = registry.get(txns::DELIVERY_PROC).unwrap().clone();
        let (attempts, every) = (self.attempts.clone(), self.every);
        registry.register_with(FLAKY_DELIVERY, real.params.clone(), real.options, move |ctx, args| {
            let n = attempts.fetch_add(1, Ordering::Relaxed) + 1;
            let run = (every != u64::MAX && n.is_multiple_of(every)).then(|| real.start(ctx, args));
            async move {
                match run {
                    Some(fut) => fut.await,
                    None => Err(Error::Abort(AbortReason::Deadlock)),
                }
            }
        });
    }
    fn prepare(&self, clients: &mut dyn FnMut() -> Result<Client, Error>) -> anyhow::Result<()> {
        self.tpcc.prepare(clients)
    }
    fn generate(&self, rng: &mut ChaCha8Rng) -> TxnRequest {
        self.flaky(self.tpcc.generate(rng))
    }
    fn generate_kind(&self, kind: &'static str, rng: &mut ChaCha8Rng) -> TxnRequest {
        self.flaky(self.tpcc.generate_kind(kind, rng))
    }
    fn mix(&self) -> Option<MixSpec> {
        self.tpcc.mix()
    }
    fn retry_policy(&self) -> RetryPolicy {
        self.policy.unwrap_or_else(|| self.tpcc.retry_policy())
    }
    fn verify(&self, client: &mut Client, stats: &RunStats) -> anyhow::Result<String> {
        self.tpcc.verify(client, stats)
    }
}

fn config(engine: EngineKind) -> BenchConfig {
    BenchConfig {
        clients: 6,
        partitions: 3,
        duration: Duration::from_millis(2000),
        warmup: Duration::from_millis(200),
        net_delay_us: Some(0),
        quiet: true,
        ..BenchConfig::new("tpcc", engine)
    }
}

fn printed(report: &litmus_bench::BenchReport) -> String {
    let mut out = Vec::new();
    harness::print_report(&mut out, report).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn deliveries_that_abort_often_are_retried_until_the_deck_mix_commits() {
    for engine in [litmus_engines::ACID, litmus_engines::SALT] {
        let w = FlakyDelivery::new(4, tpcc::COMMIT_BOUND, None);
        let report = harness::run(&config(engine), std::sync::Arc::new(w)).unwrap();
        let text = printed(&report);
        eprintln!("{text}");
        assert!(report.verify.ok, "{}", report.verify.message);
        let d = &report.outcomes[tpcc::KIND_DELIVERY];
        // Three attempts in four abort: the Deliveries were retried, none was given up.
        assert!(d.committed > 0 && d.aborts >= 2 * d.committed, "{d:?}");
        assert_eq!(report.gave_up, 0, "{text}");
        let mix = report.mix.as_ref().expect("TPC-C reports its mix");
        assert!(mix.holds, "{text}");
        assert!(text.contains("mix: ") && text.contains("minimums met"), "{text}");
        assert!(text.contains("tpmC: ") && text.contains("gave up: 0"), "{text}");
        let share = mix.kinds.iter().find(|k| k.kind == tpcc::KIND_DELIVERY).unwrap().share;
        assert!((share - 1.0 / 23.0).abs() < 0.01, "delivery share {share}: {text}");
    }
}

#[test]
fn a_delivery_that_cannot_commit_within_the_bound_fails_the_run_naming_it() {
    let w = FlakyDelivery::new(u64::MAX, Duration::from_millis(500), None);
    let err = harness::run(&config(litmus_engines::ACID), std::sync::Arc::new(w)).expect_err("the run must fail");
    let starved = err.downcast_ref::<BenchError>().unwrap_or_else(|| panic!("not a BenchError: {err:#}"));
    assert!(matches!(starved, BenchError::Starved { kind: tpcc::KIND_DELIVERY, .. }), "{starved}");
    assert!(err.to_string().contains("delivery") && err.to_string().contains("could not commit"), "{err}");
}

#[test]
fn a_run_that_gives_deliveries_up_is_flagged_below_the_minimums() {
    // The old harness behaviour: give up after a few retries. Every Delivery is given up.
    let w = FlakyDelivery::new(u64::MAX, tpcc::COMMIT_BOUND, Some(RetryPolicy::GiveUpAfter { retries: 2 }));
    let report = harness::run(&config(litmus_engines::ACID), std::sync::Arc::new(w)).unwrap();
    let text = printed(&report);
    let mix = report.mix.as_ref().unwrap();
    assert!(!mix.holds, "{text}");
    assert!(report.gave_up > 0 && text.contains(&format!("gave up: {}", report.gave_up)), "{text}");
    assert!(text.contains("BELOW THE MINIMUMS: delivery 0.00% < 4.00%"), "{text}");
}
