//! The ticketing workload (Salt §8, Fusion Ticket) end to end on small embedded clusters: every
//! run ends with the seat invariants (no seat sold twice, counters match the seats, paid orders
//! have exactly their tickets).

use litmus_bench::harness::{self, BenchConfig};
use litmus_bench::ticketing::{self, Ticketing, TicketingOptions};
use litmus_bench::BenchReport;
use litmus_engine::EngineKind;
use std::time::Duration;

fn run(engine: EngineKind, seats_per_category: u64, base_txns: u32, clients: usize) -> BenchReport {
    let w = Ticketing::new(TicketingOptions { seats_per_category, base_txns }, false).unwrap();
    let cfg = BenchConfig {
        clients,
        duration: Duration::from_millis(600),
        warmup: Duration::from_millis(100),
        quiet: true,
        ..BenchConfig::new("ticketing", engine)
    };
    let report = harness::run(&cfg, &w).unwrap();
    eprintln!(
        "ticketing on {engine} (seats {seats_per_category}, K={base_txns}): {:.0} txn/s, {} user aborts — {}",
        report.throughput, report.user_aborts, report.verify.message
    );
    assert!(report.verify.ok, "{engine}: {}", report.verify.message);
    assert!(report.verify.message.contains("no seat sold twice"), "{}", report.verify.message);
    assert_eq!(report.errors, 0, "{engine}: no run failures");
    report
}

#[test]
fn no_seat_is_sold_twice_under_acid_salt_and_salt_local() {
    for engine in [EngineKind::Acid, EngineKind::Salt, EngineKind::SaltLocal] {
        let report = run(engine, 2_000, 1, 6);
        let created = report.outcomes.get(ticketing::CREATE_ORDER.kind).map_or(0, |o| o.committed);
        assert!(created > 0, "{engine}: no order was created");
        assert!(report.latency.len() >= 8, "{engine}: kinds {:?}", report.latency.keys());
    }
}

#[test]
fn every_transaction_base_ified_keeps_the_invariants() {
    for engine in [EngineKind::Salt, EngineKind::SaltLocal] {
        run(engine, 2_000, ticketing::BASE_TXNS_MAX, 6);
    }
}

/// 64 seats per category: the placement cursor wraps around the categories many times, onto
/// seats still held by live orders (create-order then compensates; a category may sell out,
/// which create-order reports as a user abort), and nothing is lost or sold twice.
#[test]
fn a_tiny_event_wraps_around_without_losing_a_seat() {
    let seats = ticketing::SEATS_PER_CATEGORY_MIN;
    for engine in [EngineKind::Acid, EngineKind::Salt] {
        let report = run(engine, seats, 1, 12);
        let created = report.outcomes.get(ticketing::CREATE_ORDER.kind).map_or(0, |o| o.committed);
        assert!(created > 2 * seats, "{engine}: only {created} orders for {seats} seats per category: no wrap");
    }
}
