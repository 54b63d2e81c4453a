//! End-to-end runs of the harness on small embedded clusters (each well under a second).

use clap::{CommandFactory, Parser};
use litmus_bench::harness::{self, BenchConfig};
use litmus_bench::{BenchArgs, CompareList, EngineList};
use litmus_client::Client;
use litmus_core::{Formula, Value};
use litmus_protocol::{builtin, EngineKind};
use litmus_runtime::embedded::EmbeddedCluster;
use litmus_workloads::salt_micro;
use litmus_workloads::workload::{Outcomes, RunStats, Workload};
use litmus_workloads::ycsb::{self, KeyDistribution, Ycsb, YcsbOptions};
use std::time::Duration;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn parse(argv: &[&str]) -> Result<BenchArgs, clap::Error> {
    Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied())).map(|c| c.args)
}

fn small_config(clients: usize, duration_ms: u64) -> BenchConfig {
    BenchConfig {
        clients,
        duration: Duration::from_millis(duration_ms),
        warmup: Duration::from_millis(100),
        quiet: true,
        ..BenchConfig::new("ycsb", litmus_engines::NOCC)
    }
}

#[test]
fn ycsb_on_nocc_commits_records_latency_and_verifies() {
    let opts = YcsbOptions { records: 500, ..YcsbOptions::DEFAULT };
    let report = harness::run(&small_config(2, 500), std::sync::Arc::new(Ycsb::new(opts, false).unwrap())).unwrap();
    eprintln!("ycsb A, 2 clients, 500 records: {:.0} txn/s", report.throughput);
    assert!(report.throughput > 0.0);
    assert!(report.committed > 0);
    assert!(report.verify.ok, "{}", report.verify.message);
    for kind in [ycsb::KIND_READ, ycsb::KIND_UPDATE] {
        let l = &report.latency[kind];
        assert!(l.count > 0, "no committed {kind}");
        assert!(l.p50_us > 0 && l.p50_us <= l.p95_us && l.p95_us <= l.p99_us && l.p99_us <= l.max_us, "{l:?}");
    }
    assert_eq!(report.latency.values().map(|l| l.count).sum::<u64>(), report.committed);
    assert_eq!((report.errors, report.user_aborts, report.gave_up), (0, 0, 0));
}

#[test]
fn multi_key_uniform_transactions_verify() {
    let opts = YcsbOptions {
        records: 400,
        txn_size: 4,
        read_ratio: 0.2,
        distribution: KeyDistribution::Uniform,
        ..YcsbOptions::DEFAULT
    };
    let cfg = BenchConfig { net_delay_us: Some(0), ..small_config(3, 300) };
    let report = harness::run(&cfg, std::sync::Arc::new(Ycsb::new(opts, false).unwrap())).unwrap();
    eprintln!("ycsb 4-key 80% update, 3 clients, no delay: {:.0} txn/s", report.throughput);
    assert!(report.throughput > 0.0);
    assert!(report.verify.ok, "{}", report.verify.message);
    assert!(report.verify.message.contains("4 key(s) each"), "{}", report.verify.message);
}

#[test]
fn compare_prints_ratio_last_and_writes_both_runs_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cmp.json");
    let args = parse(&[
        "ycsb",
        "--compare",
        "nocc,nocc",
        "--duration",
        "0.3",
        "--warmup",
        "0",
        "--clients",
        "2",
        "--records",
        "300",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ])
    .unwrap();
    assert_eq!(args.compare, Some(CompareList::Engines(EngineList(vec![litmus_engines::NOCC, litmus_engines::NOCC]))));
    let mut out = Vec::new();
    litmus_bench::run_to(&args, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let last = text.lines().last().unwrap();
    assert!(last.starts_with("ratio nocc/nocc = "), "last line {last:?} of\n{text}");
    assert_eq!(text.matches("throughput: ").count(), 2, "{text}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["runs"].as_array().unwrap().len(), 2);
    assert!(v["runs"][1]["throughput"].as_f64().unwrap() > 0.0);
    assert!(v["ratio"].as_f64().unwrap() > 0.0);
}

#[test]
fn single_run_prints_percentiles_and_writes_json_with_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let data = dir.path().join("data");
    let args = parse(&[
        "ycsb",
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
        "--clients",
        "2",
        "--records",
        "200",
        "--read-ratio",
        "0.95",
        "--data-dir",
        data.to_str().unwrap(),
        "--fsync",
        "never",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ])
    .unwrap();
    let mut out = Vec::new();
    litmus_bench::run_to(&args, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.lines().any(|l| l.starts_with("throughput: ")), "{text}");
    assert!(text.lines().any(|l| l.trim_start().starts_with("read") && l.contains("p99=")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("verify: ok")), "{text}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(v["throughput"].as_f64().unwrap() > 0.0);
    assert!(v["latency"]["read"]["p50_us"].as_u64().unwrap() > 0);
    assert_eq!(v["verify"]["ok"], serde_json::Value::Bool(true));
    assert!(std::fs::read_dir(&data).unwrap().next().is_some(), "the cluster logged to --data-dir");

    // The same data directory again would recover the old run: refused.
    let err = litmus_bench::run_to(&args, &mut Vec::new()).unwrap_err();
    assert!(format!("{err:#}").contains("not empty"), "{err:#}");
}

/// A small cluster with the ycsb tables, loaded, for poking at `verify` directly.
fn loaded_cluster(w: &Ycsb) -> EmbeddedCluster {
    litmus_workloads::workload::loaded_cluster(w, litmus_engines::NOCC, 1, 2).unwrap()
}

#[test]
fn verify_rejects_lost_updates_and_foreign_fields() {
    let w = Ycsb::new(YcsbOptions { records: 150, ..YcsbOptions::DEFAULT }, false).unwrap();
    let cluster = loaded_cluster(&w);
    let mut client = Client::new(Box::new(cluster.transport()));
    let stats = |committed: u64, errors: u64| RunStats {
        total: [(ycsb::KIND_UPDATE, Outcomes { committed, errors, ..Outcomes::default() })].into(),
        ..RunStats::default()
    };
    // Freshly loaded: zero updates, which no committed update contradicts.
    assert!(w.verify(&mut client, &stats(0, 0)).is_ok());
    // Three committed updates that left no trace were lost.
    let err = w.verify(&mut client, &stats(3, 0)).unwrap_err().to_string();
    assert!(err.contains("outside [3, 3]"), "{err}");

    // One update applied: fine if it committed or was indeterminate; not if nobody sent it.
    let value = Value::Bytes([7i64.to_le_bytes().as_slice(), &[0; 8]].concat().into());
    client.call(ycsb::TXN_PROCEDURES[0], vec![Value::Int(7), value]).unwrap();
    assert!(w.verify(&mut client, &stats(1, 0)).is_ok());
    assert!(w.verify(&mut client, &stats(0, 1)).is_ok());
    let err = w.verify(&mut client, &stats(0, 0)).unwrap_err().to_string();
    assert!(err.contains("outside [0, 0]"), "{err}");

    // A write that lands another row's content on key 9 is caught.
    let mut txn = client.begin().unwrap();
    let foreign = Value::Bytes(ycsb::initial_field(10, 0, 100).into());
    txn.update(ycsb::TABLE, &[Value::Int(9)], &[("field0", Formula::Assign(foreign))]).unwrap();
    txn.commit().unwrap();
    let err = w.verify(&mut client, &stats(1, 0)).unwrap_err().to_string();
    assert!(err.contains("1 rows malformed") && err.contains("key 9"), "{err}");

    // A lost row is caught, and a read of it aborts as a missing row.
    client.call("kv_put", vec![Value::Int(1), Value::Bytes(vec![1].into())]).unwrap();
    let mut txn = client.begin().unwrap();
    txn.delete(ycsb::TABLE, &[Value::Int(20)]).unwrap();
    txn.commit().unwrap();
    let err = w.verify(&mut client, &stats(1, 0)).unwrap_err().to_string();
    assert!(err.contains("expected 150 rows in usertable, found 149"), "{err}");
    let read = client.call(ycsb::TXN_PROCEDURES[0], vec![Value::Int(20), Value::Null]).unwrap_err();
    assert!(matches!(read, litmus_core::Error::UserAbort(_)), "{read:?}");
    drop(client);
    cluster.shutdown().unwrap();
}

#[test]
fn flags_parse_with_defaults_and_reject_nonsense() {
    Cli::command().debug_assert();
    let args = parse(&["ycsb"]).unwrap();
    assert_eq!(args.engine, litmus_engines::ACID, "the default engine is a safe one");
    assert_eq!((args.nodes(), args.partitions, args.clients, args.workers, args.seed), (2, None, 8, 2, 1));
    assert_eq!(litmus_bench::config(&args, litmus_engines::ACID).unwrap().partitions, 4, "4 partitions by default");
    assert_eq!((args.duration, args.warmup), (10.0, 1.0));
    assert_eq!(args.ycsb, YcsbOptions::DEFAULT);
    let cfg = litmus_bench::config(&args, litmus_engines::NOCC).unwrap();
    assert_eq!(cfg, BenchConfig::new("ycsb", litmus_engines::NOCC));

    let args = parse(&["ycsb", "--connect", "a:1,b:2", "--txn-size", "3", "--distribution", "uniform"]).unwrap();
    assert_eq!(args.connect, Some(vec!["a:1".to_string(), "b:2".to_string()]));
    assert_eq!((args.ycsb.txn_size, args.ycsb.distribution), (3, KeyDistribution::Uniform));

    assert!(parse(&["ycsb", "--engine", "nope"]).unwrap_err().to_string().contains("unknown engine"));
    assert!(parse(&["ycsb", "--compare", "nocc"]).is_err());
    assert!(parse(&["ycsb", "--compare", "nocc,nope"]).is_err());
    assert!(parse(&["ycsb", "--compare", &["nocc"; litmus_bench::COMPARE_ENGINES_MAX + 1].join(",")]).is_err());
    assert!(parse(&["ycsb", "--plot", "x.svg"]).is_err(), "--plot needs --sweep");
    assert!(parse(&["ycsb", "--compare", "nocc,nocc", "--engine", "nocc"]).is_err());
    assert!(parse(&["ycsb", "--fsync", "sometimes"]).is_err());
    let args = parse(&["omid-oracle", "--compare", "replication-off,replication-on", "--write-set", "2"]).unwrap();
    assert_eq!(args.compare, Some(CompareList::Replication(vec![false, true])));
    assert_eq!(args.omid_oracle.write_set, 2);
    assert!(parse(&["omid-oracle", "--compare", "replication-off,replication-maybe"]).is_err());
    assert!(parse(&["omid-oracle", "--compare", "replication-on"]).is_err());
    assert!(litmus_bench::run_to(
        &parse(&["ycsb", "--compare", "replication-off,replication-on"]).unwrap(),
        &mut Vec::new()
    )
    .is_err());
    // --mix is shared by ycsb-t and basic-ycsb: each workload refuses the other's (and nonsense).
    for (w, mix) in [("ycsb-t", "sideways"), ("ycsb-t", "read-heavy"), ("basic-ycsb", "complex")] {
        assert!(litmus_bench::workload(w, &parse(&[w, "--mix", mix]).unwrap()).is_err(), "{w} --mix {mix}");
    }
    assert!(parse(&["ycsb", "--connect", "a:1", "--net-delay-us", "5"]).is_err());

    let err = litmus_bench::workload("tpch", &parse(&["tpch"]).unwrap()).err().unwrap().to_string();
    assert_eq!(
        err,
        "unknown workload \"tpch\" (known: ycsb, salt-contention, salt-position, salt-rw, tpcc, ticketing, ycsb-t, \
         basic-ycsb, tpcc-neworder, granola-counters)"
    );
    let err = litmus_bench::workload("ycsb", &parse(&["ycsb", "--read-ratio", "2"]).unwrap()).err().unwrap();
    assert!(err.to_string().contains("--read-ratio"), "{err}");
    for bad in [&["ycsb", "--duration", "0"][..], &["ycsb", "--warmup=-1"], &["ycsb", "--clients", "0"]] {
        assert!(litmus_bench::config(&parse(bad).unwrap(), litmus_engines::NOCC).is_err(), "{bad:?}");
    }
}

#[test]
fn connect_to_nothing_fails_clearly() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener); // nothing listens there now
    let cfg = BenchConfig { connect: Some(vec![addr]), ..small_config(1, 100) };
    let w = Ycsb::new(YcsbOptions { records: 10, ..YcsbOptions::DEFAULT }, false).unwrap();
    let err = format!("{:#}", harness::run(&cfg, std::sync::Arc::new(w)).unwrap_err());
    assert!(err.contains("connect"), "{err}");
}

#[test]
fn full_schema_covers_the_workloads() {
    let (catalog, registry) = litmus_bench::full_schema();
    assert!(catalog.table_by_name(ycsb::TABLE).is_ok());
    assert!(catalog.table_by_name(builtin::KV_TABLE).is_ok());
    assert!(catalog.table_by_name(salt_micro::TABLE).is_ok());
    let salt = [
        salt_micro::UPDATE_5_PROCEDURE,
        salt_micro::UPDATE_10_PROCEDURE,
        salt_micro::READ_5_PROCEDURE,
        salt_micro::LOAD_PROCEDURE,
        salt_micro::CHECK_PROCEDURE,
    ];
    for name in ycsb::TXN_PROCEDURES.iter().chain(&[ycsb::LOAD_PROCEDURE, ycsb::CHECK_PROCEDURE, "kv_get"]).chain(&salt)
    {
        assert!(registry.get(name).is_ok(), "{name}");
    }
    for t in litmus_workloads::ticketing::tables() {
        assert!(catalog.table_by_name(&t.name).is_ok(), "{}", t.name);
    }
    for t in litmus_workloads::ticketing::TRANSACTIONS {
        assert!(registry.get(t.procedure).is_ok(), "{}", t.procedure);
        if let Some(base) = t.base_procedure {
            assert!(registry.get(base).unwrap().options.base, "{base}");
        }
    }
}

/// Omid §V's transactional YCSB on the omid engine: every mix commits and the snapshot-isolation
/// verdict holds (no fractured read, no lost update, atomic pairs) under 6 concurrent clients.
#[test]
fn ycsb_t_on_omid_passes_the_snapshot_isolation_check() {
    use litmus_workloads::ycsb_t::{Mix, YcsbT, YcsbTOptions};
    for mix in [Mix::Complex, Mix::Mixed] {
        let cfg = BenchConfig { workload: "ycsb-t".into(), net_delay_us: Some(0), ..small_config(6, 400) };
        let cfg = BenchConfig { engine: litmus_engines::OMID, ..cfg };
        let report = harness::run(
            &cfg,
            std::sync::Arc::new(YcsbT::new(YcsbTOptions { mix: Some(mix.name().into()) }, 200, false).unwrap()),
        )
        .unwrap();
        assert!(report.throughput > 0.0, "{mix}");
        assert!(report.verify.ok, "{mix}: {}", report.verify.message);
        assert!(report.verify.message.contains("snapshot isolation holds"), "{}", report.verify.message);
    }
}

/// What an engine does inside that no client sees is reported per committed transaction:
/// `granola-locking` answers CONFLICT to transactions that hit a locked counter (all of them
/// hit their partition's shared one here), and its client proxy retries them (§4.2); the
/// report counts those retries, and an engine that counts nothing reports nothing.
#[test]
fn engine_counts_report_the_conflicts_the_client_proxy_retried() {
    use litmus_workloads::granola_counters::{Counters, CountersOptions};
    let opts = CountersOptions { distributed: 1.0, coordinated: true, conflict: 1.0, ..CountersOptions::default() };
    let engine: EngineKind = litmus_engines::by_name("granola-locking").unwrap();
    let cfg = BenchConfig { partitions: 2, engine, workload: "granola-counters".into(), ..small_config(8, 600) };
    let locking = harness::run(&cfg, std::sync::Arc::new(Counters::new(opts, 2).unwrap())).unwrap();
    assert!(locking.verify.ok, "{}", locking.verify.message);
    let retries = locking.engine_counts_per_txn.get("granola.conflict_retries").copied().unwrap_or(0.0);
    assert!(retries > 0.0, "{:?}", locking.engine_counts_per_txn);
    let mut text = Vec::new();
    harness::print_report(&mut text, &locking).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.lines().any(|l| l.starts_with("engine: granola.conflict_retries ")), "{text}");
    let json = serde_json::to_value(&locking).unwrap();
    assert!(json["engine_counts_per_txn"]["granola.conflict_retries"].as_f64().unwrap() > 0.0);
    let plain =
        harness::run(&small_config(2, 300), std::sync::Arc::new(Ycsb::new(YcsbOptions::DEFAULT, false).unwrap()))
            .unwrap();
    assert!(plain.engine_counts_per_txn.is_empty());
    assert!(serde_json::to_value(&plain).unwrap().get("engine_counts_per_txn").is_none());
}
