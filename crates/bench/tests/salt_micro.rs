//! The Salt microbenchmarks (Salt §8.3, Figs. 11–13), sweeps, figures and many-engine
//! comparisons, end to end on small embedded nocc clusters (each run well under a second).

use clap::Parser;
use litmus_bench::harness::{self, BenchConfig};
use litmus_bench::BenchArgs;
use litmus_client::Client;
use litmus_core::{Formula, Value};
use litmus_runtime::embedded::EmbeddedCluster;
use litmus_workloads::salt_micro::{self, SaltMicro, SaltMicroKind, SaltMicroOptions, HOT_ROWS};
use litmus_workloads::workload::{Outcomes, RunStats, Workload};
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn parse(argv: &[&str]) -> BenchArgs {
    Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied())).map(|c| c.args).unwrap()
}

fn small_config(kind: SaltMicroKind) -> BenchConfig {
    BenchConfig {
        clients: 3,
        duration: Duration::from_millis(300),
        warmup: Duration::from_millis(100),
        quiet: true,
        ..BenchConfig::new(kind.name(), litmus_engines::NOCC)
    }
}

fn run_micro(kind: SaltMicroKind, opts: SaltMicroOptions) -> litmus_bench::BenchReport {
    let w = SaltMicro::new(kind, opts, false).unwrap();
    let report = harness::run(&small_config(kind), std::sync::Arc::new(w)).unwrap();
    eprintln!(
        "{} on nocc ({}): {:.0} txn/s — {}",
        kind.name(),
        report.workload_settings,
        report.throughput,
        report.verify.message
    );
    assert!(report.committed > 0 && report.throughput > 0.0);
    assert!(report.verify.ok, "{}", report.verify.message);
    assert_eq!((report.errors, report.user_aborts, report.gave_up), (0, 0, 0));
    report
}

#[test]
fn salt_contention_updates_five_rows_and_the_counters_add_up() {
    let report = run_micro(SaltMicroKind::Contention, SaltMicroOptions { rows: 20, ..SaltMicroOptions::DEFAULT });
    assert!(report.workload_settings.contains("contention_ratio=0.2500"), "{}", report.workload_settings);
    assert!(report.verify.message.contains("20 rows intact"), "{}", report.verify.message);
    assert_eq!(report.latency.keys().collect::<Vec<_>>(), vec![salt_micro::KIND_UPDATE]);
    assert_eq!(report.latency_all.count, report.committed);
}

#[test]
fn salt_position_counts_hot_and_cold_updates_separately() {
    let opts = SaltMicroOptions { after: 4, cold_rows: 300, ..SaltMicroOptions::DEFAULT };
    let report = run_micro(SaltMicroKind::Position, opts);
    assert!(report.verify.message.contains("310 rows intact"), "{}", report.verify.message);
    assert!(report.verify.message.contains("hot rows") && report.verify.message.contains("cold rows"));
    assert!(report.workload_settings.contains("op 6 of 10"), "{}", report.workload_settings);
}

#[test]
fn salt_rw_mixes_reads_and_writes() {
    let report = run_micro(SaltMicroKind::ReadWrite, SaltMicroOptions { rows: 20, ..SaltMicroOptions::DEFAULT });
    for kind in [salt_micro::KIND_READ, salt_micro::KIND_UPDATE] {
        assert!(report.latency[kind].count > 0, "no committed {kind}");
    }
}

/// A small nocc cluster with salt_rows loaded for `w`.
fn loaded_cluster(w: &SaltMicro) -> EmbeddedCluster {
    litmus_workloads::workload::loaded_cluster(w, litmus_engines::NOCC, 1, 2).unwrap()
}

fn updates(committed: u64, errors: u64) -> RunStats {
    RunStats {
        total: [(salt_micro::KIND_UPDATE, Outcomes { committed, errors, ..Outcomes::default() })].into(),
        ..RunStats::default()
    }
}

fn rows(ids: &[i64]) -> Vec<Value> {
    ids.iter().map(|&r| Value::Int(r)).collect()
}

#[test]
fn verify_waits_for_updates_that_finish_after_the_acknowledgement() {
    // Salt acknowledges a BASE transaction at accept and finishes it in the background: here a
    // transaction counted as committed lands 300 ms after verify starts, and verify waits for it.
    let opts = SaltMicroOptions { rows: 10, ..SaltMicroOptions::DEFAULT };
    let w = SaltMicro::new(SaltMicroKind::Contention, opts, false).unwrap();
    let cluster = loaded_cluster(&w);
    let mut checker = Client::new(Box::new(cluster.transport()));
    assert!(w.verify(&mut checker, &updates(0, 0)).is_ok(), "freshly loaded");
    let mut late = Client::new(Box::new(cluster.transport()));
    let started = Instant::now();
    let verdict = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            late.call(salt_micro::UPDATE_5_PROCEDURE, rows(&[0, 1, 2, 3, 4])).unwrap();
        });
        w.verify(&mut checker, &updates(1, 0))
    });
    let message = verdict.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300), "{message}");
    assert!(message.contains("rows 5 within [5, 5]"), "{message}");

    // An indeterminate transaction may or may not have landed: the sum then settles below the
    // upper bound, and two equal readings suffice.
    let message = w.verify(&mut checker, &updates(1, 1)).unwrap();
    assert!(message.contains("within [5, 10]") && message.contains("2 reading(s)"), "{message}");

    // Counters only grow, so a sum above the bound fails at once, without waiting.
    let started = Instant::now();
    let err = w.verify(&mut checker, &updates(0, 0)).unwrap_err().to_string();
    assert!(err.contains("outside [0, 0]") && err.contains("1 reading(s)"), "{err}");
    assert!(started.elapsed() < salt_micro::VERIFY_SETTLE_MAX);

    // A lost update never settles into range: verify gives up after its bound.
    let w = w.with_settle_max(Duration::from_millis(250));
    let err = w.verify(&mut checker, &updates(2, 0)).unwrap_err().to_string();
    assert!(err.contains("outside [10, 10]"), "{err}");

    // A row gone missing is caught once two readings agree.
    let mut txn = checker.begin().unwrap();
    txn.delete(salt_micro::TABLE, &[Value::Int(9)]).unwrap();
    txn.commit().unwrap();
    let err = w.verify(&mut checker, &updates(1, 0)).unwrap_err().to_string();
    assert!(err.contains("expected 10 rows in salt_rows, found 9"), "{err}");
    drop((checker, late));
    cluster.shutdown().unwrap();
}

#[test]
fn position_verify_tells_hot_from_cold_updates() {
    let opts = SaltMicroOptions { cold_rows: 20, ..SaltMicroOptions::DEFAULT };
    let w = SaltMicro::new(SaltMicroKind::Position, opts, false).unwrap().with_settle_max(Duration::from_millis(250));
    let cluster = loaded_cluster(&w);
    let mut client = Client::new(Box::new(cluster.transport()));
    let hot = HOT_ROWS as i64;
    // A proper transaction: hot row 3 first, then 9 cold rows.
    let mut args = vec![3];
    args.extend(hot..hot + 9);
    client.call(salt_micro::UPDATE_10_PROCEDURE, rows(&args)).unwrap();
    assert!(w.verify(&mut client, &updates(1, 0)).is_ok());
    // Ten cold updates add up to 10 overall, but no hot row moved: caught.
    client.call(salt_micro::UPDATE_10_PROCEDURE, rows(&(hot..hot + 10).collect::<Vec<_>>())).unwrap();
    let err = w.verify(&mut client, &updates(2, 0)).unwrap_err().to_string();
    assert!(err.contains("hot rows = 1 outside [2, 2]"), "{err}");
    // A negative counter is malformed.
    let mut txn = client.begin().unwrap();
    txn.update(
        salt_micro::TABLE,
        &[Value::Int(hot + 15)],
        &[(salt_micro::COUNTER_COLUMN, Formula::Add(Value::Int(-5)))],
    )
    .unwrap();
    txn.commit().unwrap();
    let err = w.verify(&mut client, &updates(2, 0)).unwrap_err().to_string();
    assert!(err.contains("1 rows malformed") && err.contains("row 25"), "{err}");
    drop(client);
    cluster.shutdown().unwrap();
}

#[test]
fn sweep_writes_a_table_json_points_and_an_svg_figure() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("fig11.json");
    let args = parse(&[
        "salt-contention",
        "--engine",
        "nocc",
        "--sweep",
        "rows=10,1000",
        "--duration",
        "0.2",
        "--warmup",
        "0",
        "--clients",
        "2",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]);
    let mut out = Vec::new();
    litmus_bench::run_to(&args, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    eprintln!("{text}");
    assert!(text.starts_with("Salt Fig. 11: contention ratio"), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.contains(" nocc ")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows[0].trim_start().starts_with("10 ") && rows[0].contains("0.5") && rows[0].ends_with("ok"), "{text}");
    assert!(rows[1].trim_start().starts_with("1000 ") && rows[1].contains("0.005"), "{text}");

    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let points = v.as_array().unwrap();
    assert_eq!(points.len(), 2);
    assert_eq!(points[0]["param"], "rows");
    assert_eq!(points[1]["value"].as_f64(), Some(1000.0));
    assert_eq!(points[1]["x"].as_f64(), Some(0.005));
    assert!(points.iter().all(|p| p["throughput"].as_f64().unwrap() > 0.0 && p["engine"] == "nocc"));
    assert_eq!(points[0]["report"]["verify"]["ok"], serde_json::Value::Bool(true));

    let svg_path = json.with_extension("svg");
    assert!(text.lines().last().unwrap().contains(svg_path.to_str().unwrap()), "{text}");
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.contains("<svg"), "not an SVG");
    assert!(svg.lines().any(|l| l.trim() == "nocc"), "the legend names the engine");
    assert!(svg.contains("Salt Fig. 11"), "the title names the figure");
}

#[test]
fn sweep_rejects_a_bad_value_before_running_anything() {
    let args = parse(&["salt-position", "--sweep", "after=0,12", "--duration", "0.1", "--quiet"]);
    let started = Instant::now();
    let err = format!("{:#}", litmus_bench::run_to(&args, &mut Vec::new()).unwrap_err());
    assert!(err.contains("after=12") && err.contains("--after must be in 0..=9"), "{err}");
    assert!(started.elapsed() < Duration::from_millis(100), "it ran something first");
    let args = parse(&["salt-contention", "--sweep", "after=0,9", "--quiet"]);
    let err = format!("{:#}", litmus_bench::run_to(&args, &mut Vec::new()).unwrap_err());
    assert!(err.contains("does not use --after"), "{err}");
}

#[test]
fn compare_of_three_engines_prints_every_ratio_over_the_first_and_a_ratio_last() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cmp.json");
    let args = parse(&[
        "salt-rw",
        "--compare",
        "nocc,nocc,nocc",
        "--rows",
        "30",
        "--duration",
        "0.2",
        "--warmup",
        "0",
        "--clients",
        "2",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]);
    let mut out = Vec::new();
    litmus_bench::run_to(&args, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.matches("throughput: ").count(), 3, "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let last = lines[lines.len() - 1];
    assert!(last.starts_with("ratio nocc/nocc = "), "last line {last:?} of\n{text}");
    assert!(lines[lines.len() - 2].starts_with("ratio nocc/nocc = "), "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("ratio ")).count(), 2, "{text}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["runs"].as_array().unwrap().len(), 3);
    assert_eq!(v["ratios"].as_array().unwrap().len(), 2);
    assert_eq!(v["ratio_of"], "nocc/nocc");
    assert!(v["ratio"].as_f64().unwrap() > 0.0);
}

#[test]
fn salt_flags_parse_with_defaults() {
    let args = parse(&["salt-contention"]);
    assert_eq!(args.salt, SaltMicroOptions::DEFAULT);
    assert_eq!((args.salt.rows, args.salt.after, args.salt.read_fraction), (100, 9, 0.5));
    let args = parse(&["salt-rw", "--rows", "50", "--read-fraction", "0.95", "--after", "3", "--cold-rows", "1000"]);
    assert_eq!(args.salt, SaltMicroOptions { rows: 50, read_fraction: 0.95, after: 3, cold_rows: 1000 });
    for name in litmus_workloads::bench_names() {
        assert!(litmus_bench::workload(name, &parse(&[name])).is_ok(), "{name}");
    }
    let err = litmus_bench::workload("salt-rw", &parse(&["salt-rw", "--read-fraction", "2"])).err().unwrap();
    assert!(err.to_string().contains("--read-fraction"), "{err}");
}
