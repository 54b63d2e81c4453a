//! `tpcc-neworder` (VLDB'15 §6.2) end to end on small embedded clusters: concurrent New-Orders
//! on `coordfree` and `acid` keep TPC-C's consistency conditions (3.3.2.2–3: sequential,
//! gap-free order ids per district, through the nested atomic increment on coordfree), the
//! clients are told the real ids, TPC-C's Delivery is refused on coordfree naming the
//! invariant, and bad settings are typed errors.

use litmus_bench::harness::{self, BenchConfig};
use litmus_bench::tpcc::TpccOptions;
use litmus_bench::tpcc_neworder::{NewOrderConfigError, NewOrderOptions, TpccNewOrder};
use litmus_client::Client;
use litmus_core::{Error, InvalidInput, Value};
use litmus_engine::EngineKind;
use std::time::Duration;

fn small(partitions: u32, distributed: f64) -> TpccNewOrder {
    let opts = NewOrderOptions { warehouses_per_partition: 1, distributed };
    let tpcc = TpccOptions { scale_div: 100, ..TpccOptions::DEFAULT };
    TpccNewOrder::new(&opts, &tpcc, partitions, false).unwrap()
}

fn run(engine: EngineKind, distributed: f64) -> litmus_bench::BenchReport {
    let w = small(3, distributed);
    let cfg = BenchConfig {
        clients: 12,
        partitions: 3,
        duration: Duration::from_millis(1500),
        warmup: Duration::from_millis(200),
        quiet: true,
        ..BenchConfig::new("tpcc-neworder", engine)
    };
    let report = harness::run(&cfg, &w).unwrap();
    eprintln!("tpcc-neworder on {engine}: {:.0} txn/s — {}", report.throughput, report.verify.message);
    assert!(report.verify.ok, "{engine}: {}", report.verify.message);
    assert!(report.committed > 50, "{engine}: only {} committed", report.committed);
    assert!(report.verify.message.contains("3.3.2.1-3.3.2.10, 3.3.2.12"), "{}", report.verify.message);
    assert_eq!(report.errors, 0, "{engine}");
    report
}

#[test]
fn coordfree_new_orders_keep_sequential_gap_free_ids_under_concurrency() {
    run(EngineKind::Coordfree, 0.1);
    run(EngineKind::Coordfree, 1.0); // every New-Order spans two partitions
}

#[test]
fn acid_new_orders_keep_the_consistency_conditions() {
    run(EngineKind::Acid, 0.1);
}

/// The id a client is told is the real one: the order row with that id belongs to it, and the
/// next New-Order of the district gets the next id.
#[test]
fn coordfree_returns_the_real_order_id_to_the_client() {
    let w = small(2, 0.0);
    let cluster = litmus_bench::workload::loaded_cluster(&w, EngineKind::Coordfree, 1, 2).unwrap();
    let mut client = Client::new(Box::new(cluster.transport()));
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(3);
    let mut ids = std::collections::BTreeMap::<(i64, i64), Vec<i64>>::new();
    let mut calls = 0;
    while calls < 20 {
        let t = w.new_order(&mut rng);
        let (wh, d) = (t.args[0].as_int().unwrap(), t.args[1].as_int().unwrap());
        match client.call(t.procedure, t.args.clone()) {
            Ok(v) => {
                ids.entry((wh, d)).or_default().push(v[0].as_int().unwrap());
                calls += 1;
            }
            Err(Error::UserAbort(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    for ((wh, d), got) in ids {
        let first = got[0];
        assert!(first > 0, "a temporary id leaked to the client: {first}");
        let want: Vec<i64> = (first..first + got.len() as i64).collect();
        assert_eq!(got, want, "district ({wh}, {d}): ids not consecutive");
    }
}

/// R6 through the analyzer's verdicts: TPC-C Delivery needs coordination (3.3.2.2, 3.3.2.3
/// under its delete), so coordfree refuses it and names the invariant; Payment is
/// coordination-free and runs.
#[test]
fn coordfree_refuses_tpcc_delivery_naming_the_invariant() {
    let w = small(2, 0.0);
    let cluster = litmus_bench::workload::loaded_cluster(&w, EngineKind::Coordfree, 1, 2).unwrap();
    let mut client = Client::new(Box::new(cluster.transport()));
    let r = client.call(litmus_bench::tpcc::txns::DELIVERY_PROC, vec![Value::Int(1), Value::Int(3), Value::Int(7)]);
    match r {
        Err(Error::Invalid(InvalidInput::NeedsCoordination { invariant, procedure, .. })) => {
            assert!(invariant.contains("3.3.2.2") || invariant.contains("3.3.2.3"), "{invariant}");
            assert_eq!(procedure, litmus_bench::tpcc::txns::DELIVERY_PROC);
        }
        other => panic!("delivery was not refused: {other:?}"),
    }
    let verdicts = litmus_bench::analysis::tpcc_verdicts();
    let payment = verdicts.iter().find(|(p, _)| p == litmus_bench::tpcc::txns::PAYMENT_PROC).unwrap();
    assert_eq!(payment.1, litmus_engine::procedure::Coordination::Free);
}

#[test]
fn bad_settings_are_typed_errors() {
    let tpcc = TpccOptions { scale_div: 100, ..TpccOptions::DEFAULT };
    let bad = |d: f64, k: u64, p: u32, t: &TpccOptions| {
        TpccNewOrder::new(&NewOrderOptions { warehouses_per_partition: k, distributed: d }, t, p, false).err()
    };
    assert_eq!(bad(1.5, 1, 4, &tpcc), Some(NewOrderConfigError::Distributed(1.5)));
    assert_eq!(bad(0.1, 0, 4, &tpcc), Some(NewOrderConfigError::PerPartition));
    assert_eq!(bad(0.1, 1, 1, &tpcc), Some(NewOrderConfigError::OneWarehouse));
    let eight = TpccOptions { warehouses: 8, ..tpcc.clone() };
    assert!(matches!(bad(0.1, 1, 4, &eight), Some(NewOrderConfigError::Warehouses { .. })));
    assert_eq!(bad(0.1, 1, 8, &eight), None);
    assert_eq!(small(4, 0.1).tpcc().scale().warehouses, 4, "one warehouse per partition by default");
}
