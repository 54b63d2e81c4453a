//! `litmus bench --runtime sim`: any workload on a simulated cluster in virtual
//! time, reported like a real run and marked simulated; deterministic; thousands of clients.

use clap::Parser;
use litmus_bench::harness::{self, BenchReport};
use litmus_bench::BenchArgs;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn parse(argv: &[&str]) -> BenchArgs {
    Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied())).expect("flags parse").args
}

fn run(argv: &[&str]) -> BenchReport {
    let args = parse(argv);
    let engine = litmus_bench::engines(&args)[0];
    let cfg = litmus_bench::config(&args, engine).expect("valid config");
    let w = litmus_bench::workload(&args.workload, &args).expect("workload");
    harness::run(&cfg, std::sync::Arc::from(w)).expect("the run")
}

const SMALL_YCSB: &[&str] =
    &["ycsb", "--runtime", "sim", "--quiet", "--records", "2000", "--duration", "0.3", "--warmup", "0.1"];

/// The figures of a report: everything but the wall-clock fields.
fn figures(r: &BenchReport) -> String {
    let mut r = r.clone();
    r.load_secs = 0.0;
    let s = r.simulated.as_mut().expect("simulated");
    (s.wall_secs, s.events_per_wall_sec) = (0.0, 0.0);
    serde_json::to_string(&r).unwrap()
}

#[test]
fn same_seed_same_report() {
    let argv: Vec<&str> = SMALL_YCSB.iter().copied().chain(["--engine", "acid", "--clients", "24"]).collect();
    let a = run(&argv);
    let b = run(&argv);
    assert!(a.committed > 100, "{a:?}");
    assert!(a.verify.ok, "{}", a.verify.message);
    assert_eq!(figures(&a), figures(&b), "same seed, other figures");
    // The comparison can fail: another seed gives other figures.
    let other: Vec<&str> = argv.iter().copied().chain(["--seed", "2"]).collect();
    assert_ne!(figures(&a), figures(&run(&other)), "the seed changed nothing");
}

#[test]
fn reports_are_marked_simulated_with_their_cost_table() {
    let argv: Vec<&str> = SMALL_YCSB.iter().copied().chain(["--engine", "nocc", "--nodes", "3"]).collect();
    let r = run(&argv);
    let sim = r.simulated.as_ref().expect("marked simulated");
    assert_eq!(sim.cost_table, litmus_runtime::cost::CostTable::builtin().name);
    assert_eq!(r.config.partitions, 4, "one partition per node, at least 4");
    assert!(sim.events > 0 && sim.events_per_wall_sec > 0.0);
    let mut out = Vec::new();
    harness::print_report(&mut out, &r).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("SIMULATED 3 nodes x 4 cores"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("throughput: ") && l.contains("(simulated, cost table")), "{text}");
    assert!(text.contains("events/s"), "{text}");
}

#[test]
fn ten_thousand_simulated_clients_run_and_verify() {
    let argv: Vec<&str> = [
        "ycsb",
        "--runtime",
        "sim",
        "--quiet",
        "--records",
        "20000",
        "--engine",
        "nocc",
        "--nodes",
        "8",
        "--clients",
        "10000",
        "--duration",
        "0.03",
        "--warmup",
        "0",
    ]
    .to_vec();
    let r = run(&argv);
    assert!(r.committed > 10_000, "10000 clients committed only {}", r.committed);
    assert!(r.verify.ok, "{}", r.verify.message);
    // The embedded runtime keeps its limit: one thread per client.
    let embedded = parse(&["ycsb", "--clients", "10000"]);
    assert!(litmus_bench::config(&embedded, litmus_engines::NOCC).is_err());
}

#[test]
fn more_cores_per_node_carry_more_load() {
    // Enough clients that the cores, not the clients' round trips, bound the 4-core cluster
    // too: with 64, a cost table re-measured on a quiet machine left 4 cores 26% busy and only
    // 1.26x ahead.
    let base: Vec<&str> = SMALL_YCSB.iter().copied().chain(["--engine", "acid", "--clients", "256"]).collect();
    let one: Vec<&str> = base.iter().copied().chain(["--cores-per-node", "1"]).collect();
    let four: Vec<&str> = base.iter().copied().chain(["--cores-per-node", "4"]).collect();
    let (one, four) = (run(&one), run(&four));
    let u1 = one.simulated.as_ref().unwrap().core_utilisation;
    assert!(u1 > 0.5, "256 clients on 2 single-core nodes: cores only {:.0}% busy", 100.0 * u1);
    assert!(four.throughput > 1.3 * one.throughput, "4 cores {} vs 1 core {}", four.throughput, one.throughput);
}

#[test]
fn bad_simulation_flags_are_typed_errors() {
    let args = parse(&["ycsb", "--runtime", "sim", "--cores-per-node", "0"]);
    let cfg = litmus_bench::config(&args, litmus_engines::NOCC).unwrap();
    let w: std::sync::Arc<dyn litmus_bench::Workload> = litmus_bench::workload("ycsb", &args).unwrap().into();
    assert!(harness::run(&cfg, w.clone()).is_err(), "zero cores ran");
    let args = parse(&["ycsb", "--runtime", "sim", "--costs", "/nonexistent/costs.toml"]);
    let cfg = litmus_bench::config(&args, litmus_engines::NOCC).unwrap();
    let e = harness::run(&cfg, w.clone()).unwrap_err();
    assert!(format!("{e:#}").contains("/nonexistent/costs.toml"), "{e:#}");
    let mut args = parse(&["ycsb", "--runtime", "sim"]);
    args.connect = Some(vec!["127.0.0.1:1".into()]);
    assert!(litmus_bench::config(&args, litmus_engines::NOCC).is_err(), "sim with --connect");
}

#[test]
fn tpcc_compares_engines_in_virtual_time_and_verifies() {
    let args = parse(&[
        "tpcc",
        "--runtime",
        "sim",
        "--quiet",
        "--warehouses",
        "2",
        "--scale-div",
        "20",
        "--compare",
        "acid,salt",
        "--clients",
        "16",
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
    ]);
    let mut out = Vec::new();
    litmus_bench::run_to(&args, &mut out).expect("both runs verify");
    let text = String::from_utf8(out).unwrap();
    assert!(text.lines().last().unwrap().starts_with("ratio salt/acid = "), "{text}");
    assert_eq!(text.matches("SIMULATED").count(), 2, "{text}");
}

/// `litmus calibrate` on one engine and workload: a table that parses, with the measured
/// window's step kinds and the runtime's overhead, and nothing from the load phase.
#[test]
fn calibrate_writes_a_table_of_the_measured_window() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.toml");
    let args = litmus_bench::calibrate::CalibrateArgs {
        out: out.clone(),
        workloads: vec!["ycsb".into()],
        engines: Some(vec!["nocc".into()]),
        duration: 0.3,
        clients: 2,
        bench_flags: String::new(),
        name: None,
        note: "test".into(),
        quiet: true,
    };
    let mut printed = Vec::new();
    litmus_bench::calibrate::run(&args, "litmus calibrate (test)", &mut printed).unwrap();
    let table = litmus_runtime::cost::CostTable::load(&out).unwrap();
    assert_eq!(table.name, "t");
    let nocc = &table.engines["nocc"];
    assert!(nocc.keys().any(|k| k.starts_with("coordinator call ycsb_txn")), "{nocc:?}");
    assert!(nocc.contains_key(litmus_runtime::cost::RUNTIME_OVERHEAD_KEY), "{nocc:?}");
    assert!(!nocc.keys().any(|k| k.contains("load")), "the load phase was measured: {nocc:?}");
    // An engine that runs one-round transactions only is measured on the workload's one-round
    // form (it refuses the op-by-op one, which would leave it out of the table).
    // `--bench-flags` reach every run: four keys per transaction, and a warmup of their own
    // (which replaces calibrate's default one instead of being refused as given twice).
    let granola = litmus_bench::calibrate::CalibrateArgs {
        engines: Some(vec!["granola".into()]),
        bench_flags: "--txn-size 4 --warmup 0.2".into(),
        ..args.clone()
    };
    litmus_bench::calibrate::run(&granola, "litmus calibrate (test)", &mut Vec::new()).unwrap();
    let table = litmus_runtime::cost::CostTable::load(&out).unwrap();
    let g = &table.engines["granola"];
    assert!(g.keys().any(|k| k.contains("ycsb_txn_4_1r")), "granola measured on the one-round form: {g:?}");
    let bad = litmus_bench::calibrate::CalibrateArgs { bench_flags: "--txn-size 99".into(), ..granola };
    assert!(litmus_bench::calibrate::run(&bad, "x", &mut Vec::new()).is_err(), "bad bench flags are an error");
    // A name that is no registered engine is an error, before anything runs.
    let args = litmus_bench::calibrate::CalibrateArgs { engines: Some(vec!["nocc".into(), "bogus".into()]), ..args };
    assert!(litmus_bench::calibrate::run(&args, "x", &mut Vec::new()).is_err(), "an unknown engine is an error");
}

/// YCSB runs on the engines that take one-round transactions only through its one-round form
/// (one independent fragment per key), and verifies; the op-by-op form is refused there.
#[test]
fn ycsb_runs_in_one_round_form_on_the_granola_engines() {
    for engine in ["granola", "granola-locking", "sinfonia"] {
        let argv: Vec<&str> =
            SMALL_YCSB.iter().copied().chain(["--engine", engine, "--txn-size", "3", "--clients", "16"]).collect();
        let args = parse(&argv);
        let kind = litmus_bench::engines(&args)[0];
        let cfg = litmus_bench::config(&args, kind).expect("valid config");
        let w = litmus_bench::workload_for(&args.workload, &args, kind).expect("workload");
        let r = harness::run(&cfg, std::sync::Arc::from(w)).expect("the run");
        assert!(r.committed > 100, "{engine}: {r:?}");
        assert!(r.verify.ok, "{engine}: {}", r.verify.message);
        // The op-by-op form does not run there: the one-round form is what made it run.
        let plain = litmus_bench::workload(&args.workload, &args).expect("workload");
        let err = harness::run(&cfg, std::sync::Arc::from(plain)).expect_err("op-by-op ycsb on a one-round engine");
        assert!(format!("{err:#}").contains("one-round"), "{engine}: {err:#}");
    }
}
