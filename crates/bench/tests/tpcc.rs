//! TPC-C end to end on small embedded clusters: the loaded database passes every consistency
//! condition (3.3.2.11 included), short runs on `acid` and `salt` keep them, and a corrupted
//! database is caught, condition by condition.

use litmus_bench::harness::{self, BenchConfig};
use litmus_client::Client;
use litmus_core::{Decimal, Formula, Value};
use litmus_protocol::EngineKind;
use litmus_runtime::embedded::EmbeddedCluster;
use litmus_workloads::tpcc::schema::*;
use litmus_workloads::tpcc::{self, Tpcc, TpccOptions};
use std::time::Duration;

/// 2 warehouses, 30 customers per district, 1,000 items.
fn small(base_txns: u32) -> Tpcc {
    small_with(base_txns, 1)
}

/// The same with `delivery_txns` database transactions per ACID Delivery.
fn small_with(base_txns: u32, delivery_txns: u32) -> Tpcc {
    let opts = TpccOptions { base_txns: Some(base_txns), scale_div: 100, delivery_txns, ..TpccOptions::DEFAULT };
    Tpcc::new(&opts, false).unwrap()
}

fn loaded_cluster(w: &Tpcc, engine: EngineKind) -> EmbeddedCluster {
    litmus_workloads::workload::loaded_cluster(w, engine, 2, 3).unwrap()
}

fn run(engine: EngineKind, base_txns: u32) -> litmus_bench::BenchReport {
    run_with(engine, base_txns, 1)
}

fn run_with(engine: EngineKind, base_txns: u32, delivery_txns: u32) -> litmus_bench::BenchReport {
    let w = small_with(base_txns, delivery_txns);
    let cfg = BenchConfig {
        clients: 6,
        partitions: 3,
        duration: Duration::from_millis(1500),
        warmup: Duration::from_millis(200),
        quiet: true,
        ..BenchConfig::new("tpcc", engine)
    };
    let report = harness::run(&cfg, std::sync::Arc::new(w)).unwrap();
    eprintln!(
        "tpcc on {engine} base_txns={base_txns}: {:.0} txn/s, {} user aborts — {}",
        report.throughput, report.user_aborts, report.verify.message
    );
    assert!(report.verify.ok, "{}", report.verify.message);
    assert!(report.committed > 50, "only {} committed", report.committed);
    for kind in [tpcc::KIND_NEW_ORDER, tpcc::KIND_PAYMENT] {
        assert!(report.latency.contains_key(kind), "no {kind} in {:?}", report.latency.keys());
    }
    assert!(report.verify.message.contains("3.3.2.1-3.3.2.10, 3.3.2.12"), "{}", report.verify.message);
    assert_eq!(report.errors, 0);
    report
}

#[test]
fn acid_run_keeps_the_consistency_conditions() {
    run(litmus_engines::ACID, 0);
}

#[test]
fn salt_run_with_new_order_and_payment_base_keeps_the_consistency_conditions() {
    run(litmus_engines::SALT, 2);
}

#[test]
fn salt_run_with_every_transaction_base_keeps_the_consistency_conditions() {
    run(litmus_engines::SALT, 5);
}

#[test]
fn salt_local_run_keeps_the_consistency_conditions() {
    run(litmus_engines::SALT_LOCAL, 2);
}

/// `--delivery-txns 10`: the terminals run each ACID Delivery as ten district transactions.
#[test]
fn runs_with_deliveries_per_district_keep_the_consistency_conditions() {
    for engine in [litmus_engines::ACID, litmus_engines::SALT] {
        let report = run_with(engine, if engine == litmus_engines::SALT { 2 } else { 0 }, 10);
        assert!(report.latency.contains_key(tpcc::KIND_DELIVERY), "no delivery on {engine}");
    }
}

/// Writes that break a condition, run in one interactive transaction.
type Corruption = dyn FnOnce(&mut litmus_client::Transaction<'_>);

/// Runs `corrupt` in one interactive transaction, then expects the check to name `condition`.
fn expect_caught(
    w: &Tpcc,
    client: &mut Client,
    condition: &str,
    corrupt: impl FnOnce(&mut litmus_client::Transaction<'_>),
) {
    let mut txn = client.begin().unwrap();
    corrupt(&mut txn);
    txn.commit().unwrap();
    let err = w.check_client(client, false).expect_err(condition).to_string();
    eprintln!("{condition}: {err}");
    assert!(err.contains(condition), "expected {condition} in: {err}");
}

fn int(v: i64) -> Value {
    Value::Int(v)
}

fn cents(c: i64) -> Value {
    Value::Decimal(Decimal::from_cents(c))
}

#[test]
fn the_loaded_database_passes_every_condition_and_corruption_is_caught() {
    let w = small(0);
    let cluster = loaded_cluster(&w, litmus_engines::ACID);
    let mut client = Client::new(Box::new(cluster.transport()));
    let summary = w.check_client(&mut client, true).unwrap();
    assert_eq!((summary.warehouses, summary.districts, summary.customers), (2, 20, 600));
    assert_eq!(summary.orders, 600);
    assert!(summary.to_string().contains("3.3.2.11"), "{summary}");

    // 11: one more delivered order than a fresh database has (and 5, 7 for the same order are
    // kept consistent: carrier set, lines delivered, new-order row gone).
    let mut txn = client.begin().unwrap();
    let o = 30; // the last order of district (1, 1): undelivered at load
    txn.delete(NEW_ORDER, &[int(1), int(1), int(o)]).unwrap();
    txn.update(ORDERS, &[int(1), int(1), int(o)], &[("o_carrier_id", Formula::Assign(int(3)))]).unwrap();
    let lines = txn.scan(ORDER_LINE, &[int(1), int(1), int(o)], None, 20).unwrap();
    for l in &lines {
        let key = [int(1), int(1), int(o), l[3].clone()];
        txn.update(ORDER_LINE, &key, &[("ol_delivery_d", Formula::Assign(int(1)))]).unwrap();
    }
    txn.commit().unwrap();
    let err = w.check_client(&mut client, true).unwrap_err().to_string();
    assert!(err.contains("3.3.2.11 at warehouse 1 district 1"), "{err}");
    // Not fresh any more, but 2 (max(no_o_id)) now fails too: order 30 was the newest.
    assert!(err.contains("3.3.2.2"), "{err}");
    drop(cluster);

    let cases: Vec<(&str, Box<Corruption>)> = vec![
        (
            "3.3.2.1 at warehouse 2",
            Box::new(|t| {
                t.update(WAREHOUSE, &[int(2)], &[("w_ytd", Formula::Add(cents(1)))]).unwrap();
            }),
        ),
        (
            "3.3.2.9 at warehouse 1 district 4",
            Box::new(|t| {
                t.update(DISTRICT, &[int(1), int(4)], &[("d_ytd", Formula::Add(cents(5)))]).unwrap();
                t.update(WAREHOUSE, &[int(1)], &[("w_ytd", Formula::Add(cents(5)))]).unwrap();
            }),
        ),
        (
            "3.3.2.2 at warehouse 1 district 2",
            Box::new(|t| {
                t.update(DISTRICT, &[int(1), int(2)], &[("d_next_o_id", Formula::Add(int(1)))]).unwrap();
            }),
        ),
        (
            "3.3.2.3 at warehouse 2 district 3",
            Box::new(|t| {
                t.delete(NEW_ORDER, &[int(2), int(3), int(25)]).unwrap();
            }),
        ),
        (
            "3.3.2.6 at warehouse 2 district 5",
            Box::new(|t| {
                t.update(ORDERS, &[int(2), int(5), int(7)], &[("o_ol_cnt", Formula::Add(int(1)))]).unwrap();
            }),
        ),
        (
            "3.3.2.7 at warehouse 1 district 6",
            Box::new(|t| {
                t.update(
                    ORDER_LINE,
                    &[int(1), int(6), int(2), int(1)],
                    &[("ol_delivery_d", Formula::Assign(Value::Null))],
                )
                .unwrap();
            }),
        ),
        (
            "3.3.2.10 at warehouse 2 district 7",
            Box::new(|t| {
                t.update(CUSTOMER, &[int(2), int(7), int(9)], &[("c_balance", Formula::Add(cents(-1)))]).unwrap();
            }),
        ),
        (
            "3.3.2.12 at warehouse 1 district 8",
            Box::new(|t| {
                t.update(CUSTOMER, &[int(1), int(8), int(3)], &[("c_ytd_payment", Formula::Add(cents(7)))]).unwrap();
            }),
        ),
        (
            "3.3.2.8 at warehouse 2",
            Box::new(|t| {
                // A history row paid to warehouse 2 district 1, with matching district ytd: only 8
                // (and 1) can see it; 10 sees the customer's history change too.
                let row = vec![
                    int(1),
                    int(1),
                    int(1),
                    int(77),
                    int(2),
                    int(1),
                    int(0),
                    cents(100),
                    Value::String("x".into()),
                ];
                t.write(HISTORY, row).unwrap();
                t.update(DISTRICT, &[int(2), int(1)], &[("d_ytd", Formula::Add(cents(100)))]).unwrap();
            }),
        ),
        (
            "3.3.2.4 at warehouse 1 district 9",
            Box::new(|t| {
                t.delete(ORDER_LINE, &[int(1), int(9), int(4), int(1)]).unwrap();
                t.update(ORDERS, &[int(1), int(9), int(4)], &[("o_ol_cnt", Formula::Add(int(-1)))]).unwrap();
                t.write(
                    ORDER_LINE,
                    vec![
                        int(1),
                        int(9),
                        int(99),
                        int(1),
                        int(1),
                        int(1),
                        Value::Null,
                        int(1),
                        cents(0),
                        Value::String("x".into()),
                    ],
                )
                .unwrap();
            }),
        ),
        (
            "3.3.2.5 at warehouse 2 district 10",
            Box::new(|t| {
                t.update(ORDERS, &[int(2), int(10), int(28)], &[("o_carrier_id", Formula::Assign(int(1)))]).unwrap();
            }),
        ),
    ];
    for (condition, corrupt) in cases {
        // A fresh database per case, so each corruption is judged alone.
        let cluster = loaded_cluster(&w, litmus_engines::ACID);
        let mut client = Client::new(Box::new(cluster.transport()));
        expect_caught(&w, &mut client, condition, corrupt);
    }
}

/// Every row of `tables` for warehouse `w`, in key order.
fn snapshot(client: &mut Client, w: i64, tables: &[&str]) -> Vec<Vec<litmus_core::Row>> {
    let mut txn = client.begin().unwrap();
    let rows = tables.iter().map(|t| txn.scan(t, &[int(w)], Some(&[int(w + 1)]), 100_000).unwrap()).collect();
    txn.commit().unwrap();
    rows
}

/// Clause 2.7.4.1: a Delivery may be done as up to 10 database transactions. The ten
/// district steps (`tpcc_delivery_district`, one per district in turn, as a terminal runs them
/// with `--delivery-txns 10`) leave the database exactly as the one-transaction Delivery does,
/// and `next_step` walks the districts 1 to 10 and stops.
#[test]
fn clause_2_7_4_1_a_delivery_as_ten_district_transactions_leaves_what_one_transaction_leaves() {
    use litmus_workloads::tpcc::txns::{DELIVERY_DISTRICT_PROC, DELIVERY_PROC};
    use litmus_workloads::workload::{TxnRequest, Workload};
    let w = small(0);
    let tables = [NEW_ORDER, ORDERS, ORDER_LINE, CUSTOMER];
    let (carrier, date) = (int(4), int(20_261_127));
    let one = loaded_cluster(&w, litmus_engines::ACID);
    let mut c1 = Client::new(Box::new(one.transport()));
    let before = snapshot(&mut c1, 1, &tables);
    assert_eq!(c1.call(DELIVERY_PROC, vec![int(1), carrier.clone(), date.clone()]).unwrap(), vec![int(10)]);
    let after_one = snapshot(&mut c1, 1, &tables);
    assert_ne!(before, after_one, "a Delivery changes the warehouse's rows");

    let ten = loaded_cluster(&w, litmus_engines::ACID);
    let mut c10 = Client::new(Box::new(ten.transport()));
    assert_eq!(snapshot(&mut c10, 1, &tables), before, "both clusters load the same rows");
    let mut req = TxnRequest {
        kind: tpcc::KIND_DELIVERY,
        procedure: DELIVERY_DISTRICT_PROC,
        args: vec![int(1), carrier, date, int(1)],
    };
    let mut steps = 0;
    loop {
        let out = c10.call(req.procedure, req.args.clone()).unwrap();
        assert_eq!(out, vec![int(1)], "district {:?} delivers its oldest order", req.args[3]);
        steps += 1;
        match w.next_step(&req, &out) {
            Some(next) => req = next,
            None => break,
        }
    }
    assert_eq!(steps, 10);
    assert_eq!(snapshot(&mut c10, 1, &tables), after_one);
    // A district outside 1..=10 is refused as invalid input, changing nothing.
    let err = c10.call(DELIVERY_DISTRICT_PROC, vec![int(1), int(4), int(1), int(11)]).unwrap_err();
    assert!(matches!(err, litmus_core::Error::Invalid(_)), "{err:?}");
    assert_eq!(snapshot(&mut c10, 1, &tables), after_one);
}

#[test]
fn delivery_txns_other_than_one_or_ten_is_a_typed_config_error() {
    let opts = TpccOptions { delivery_txns: 3, ..TpccOptions::DEFAULT };
    let err = Tpcc::new(&opts, false).err().expect("3 is refused");
    assert!(matches!(err, tpcc::TpccConfigError::DeliveryTxns(3)), "{err:?}");
    for ok in [1, 10] {
        assert!(Tpcc::new(&TpccOptions { delivery_txns: ok, ..TpccOptions::DEFAULT }, false).is_ok());
    }
}
