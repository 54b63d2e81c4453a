//! The ticketing workload (Salt §8, Fusion Ticket) end to end on small embedded clusters: every
//! run ends with the seat invariants (no seat sold twice, counters match the seats, paid orders
//! have exactly their tickets).

use litmus_bench::harness::{self, BenchConfig};
use litmus_bench::BenchReport;
use litmus_client::Client;
use litmus_core::{Error, Value};
use litmus_protocol::EngineKind;
use litmus_runtime::embedded::EmbeddedCluster;
use litmus_workloads::ticketing::{self, Ticketing, TicketingOptions};
use litmus_workloads::workload::{RunStats, Workload};
use std::time::Duration;

fn run(engine: EngineKind, seats_per_category: u64, base_txns: u32, clients: usize) -> BenchReport {
    run_for(engine, seats_per_category, base_txns, clients, Duration::from_millis(600))
}

fn run_for(
    engine: EngineKind,
    seats_per_category: u64,
    base_txns: u32,
    clients: usize,
    duration: Duration,
) -> BenchReport {
    let w = Ticketing::new(TicketingOptions { seats_per_category, base_txns }, false).unwrap();
    let cfg = BenchConfig {
        clients,
        duration,
        warmup: Duration::from_millis(100),
        quiet: true,
        ..BenchConfig::new("ticketing", engine)
    };
    let report = harness::run(&cfg, std::sync::Arc::new(w)).unwrap();
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
    for engine in [litmus_engines::ACID, litmus_engines::SALT, litmus_engines::SALT_LOCAL] {
        let report = run(engine, 2_000, 1, 6);
        let created = report.outcomes.get(ticketing::CREATE_ORDER.kind).map_or(0, |o| o.committed);
        assert!(created > 0, "{engine}: no order was created");
        assert!(report.latency.len() >= 8, "{engine}: kinds {:?}", report.latency.keys());
    }
}

#[test]
fn every_transaction_base_ified_keeps_the_invariants() {
    for engine in [litmus_engines::SALT, litmus_engines::SALT_LOCAL] {
        run(engine, 2_000, ticketing::BASE_TXNS_MAX, 6);
    }
}

/// 64 seats per category: the placement cursor wraps around the categories many times, onto
/// seats still held by live orders (create-order then compensates; a category may sell out,
/// which create-order reports as a user abort), and nothing is lost or sold twice.
#[test]
fn a_tiny_event_wraps_around_without_losing_a_seat() {
    let seats = ticketing::SEATS_PER_CATEGORY_MIN;
    for engine in [litmus_engines::ACID, litmus_engines::SALT] {
        // Long enough to wrap even on a loaded machine (the check counts orders, not time).
        let report = run_for(engine, seats, 1, 12, Duration::from_secs(3));
        let created = report.outcomes.get(ticketing::CREATE_ORDER.kind).map_or(0, |o| o.committed);
        assert!(created > 2 * seats, "{engine}: only {created} orders for {seats} seats per category: no wrap");
    }
}

/// A one-node cluster running `engine` with the ticketing tables loaded for `w`.
fn loaded_cluster(w: &Ticketing, engine: EngineKind) -> EmbeddedCluster {
    litmus_workloads::workload::loaded_cluster(w, engine, 1, 2).unwrap()
}

/// Free seats of category 0, read without locks (after Salt's background work settles).
fn free_seats(client: &mut Client) -> i64 {
    std::thread::sleep(Duration::from_millis(100));
    let out = client.call(ticketing::PROC_AVAILABILITY, vec![Value::Int(0)]).unwrap();
    out[0].as_int().unwrap()
}

/// The business paths, one call at a time: a category sells out (create-order aborts itself
/// with "sold out" and changes nothing), an expired reservation frees its seats, and a
/// create-order whose seats at the cursor are still held compensates — under ACID and under
/// Salt with create-order and expire-reservations BASE-ified.
#[test]
fn sold_out_expiry_and_compensation_keep_the_counters_exact() {
    let seats = ticketing::SEATS_PER_CATEGORY_MIN as i64;
    for engine in [litmus_engines::ACID, litmus_engines::SALT] {
        let w = Ticketing::new(TicketingOptions { seats_per_category: seats as u64, base_txns: 2 }, false).unwrap();
        let cluster = loaded_cluster(&w, engine);
        let mut client = Client::new(Box::new(cluster.transport()));
        let create = w.procedure_of(&ticketing::CREATE_ORDER);
        let order = |c: &mut Client, session: i64| {
            c.call(create, vec![Value::Int(0), Value::Int(ticketing::ORDER_SEATS_MAX), Value::Int(session)])
        };
        // Orders 0, 2, 4, ... (sequence 0..16, each of its own session) take positions 0..64:
        // every seat of category 0.
        for session in 0..seats / ticketing::ORDER_SEATS_MAX {
            order(&mut client, session).unwrap();
        }
        assert_eq!(free_seats(&mut client), 0, "{engine}");
        let err = order(&mut client, 0).unwrap_err();
        assert!(matches!(&err, Error::UserAbort(r) if r == ticketing::SOLD_OUT), "{engine}: {err:?}");
        assert_eq!(free_seats(&mut client), 0, "{engine}: a sold-out attempt changes nothing");

        // Sequence 5 (order 10) is the only order of session id 5: expiring it frees positions 20..24.
        let expire = w.procedure_of(&ticketing::EXPIRE_RESERVATIONS);
        client.call(expire, vec![Value::Int(5)]).unwrap();
        assert_eq!(free_seats(&mut client), ticketing::ORDER_SEATS_MAX, "{engine}");
        // The cursor has wrapped to position 0, still held by order 0: the next order finds its
        // seats taken and gives the counter back.
        order(&mut client, 0).unwrap();
        assert_eq!(free_seats(&mut client), ticketing::ORDER_SEATS_MAX, "{engine}: compensated");

        let verdict = w.verify(&mut client, &RunStats::default()).unwrap();
        assert!(verdict.contains("(128 seats: 0 sold, 60 reserved, 68 free)"), "{engine}: {verdict}");
        drop(client);
        cluster.shutdown().unwrap();
    }
}
