//! `litmus bench omid-oracle`: flag validation (typed errors, nothing run), and short runs of
//! each experiment the paper's figures come from (a fresh in-process oracle server per run).

use clap::Parser;
use litmus_bench::{BenchArgs, BenchError};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn parse(argv: &[&str]) -> Result<BenchArgs, clap::Error> {
    Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied())).map(|c| c.args)
}

/// Runs `litmus bench` with `argv` (plus short timings) and returns its output.
fn run(argv: &[&str]) -> anyhow::Result<String> {
    let mut full = vec!["omid-oracle", "--warmup", "0.1", "--quiet"];
    full.extend_from_slice(argv);
    let mut out = Vec::new();
    litmus_bench::run_to(&parse(&full).expect("flags parse"), &mut out)?;
    Ok(String::from_utf8(out).expect("utf-8 output"))
}

fn read_json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("json written")).expect("valid json")
}

fn assert_svg(path: &std::path::Path) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(text.starts_with("<svg") && text.contains("</svg>"), "{} is not an SVG", path.display());
}

#[test]
fn bad_flags_are_typed_config_errors_and_run_nothing() {
    let cases: &[&[&str]] = &[
        &["--write-set", "0"],
        &["--write-set", "100000"],
        &["--outstanding", "0"],
        &["--clients", "0"],
        &["--clients", "5000"],
        &["--duration", "0"],
        &["--think-ms", "5"], // needs --outstanding 1
        &["--think-ms=-1", "--outstanding", "1"],
        &["--think-ms", "NaN", "--outstanding", "1"],
        &["--outstanding", "1", "--think-ms", "5", "--slow-fraction", "1.5"],
        &["--outstanding", "1", "--think-ms", "5", "--slow-fraction", "0.1", "--slow-factor", "0.5"],
        &["--outstanding", "1", "--think-ms", "1000000", "--slow-fraction", "0.1", "--slow-factor", "1000"],
        &["--slow-fraction", "0.1"],  // needs --think-ms
        &["--think-dist", "exp"],     // needs --think-ms
        &["--table", "slow-clients"], // needs --think-ms
        &["--table", "slow-clients", "--outstanding", "1", "--think-ms", "1", "--sweep", "clients=1,2"],
        &["--sweep", "nodes=1,2"],
        &["--sweep", "rows=10,100"],
        &["--sweep", "write-set=8,0"], // the bad value is last: still nothing runs
        &["--sweep", "clients=1,2", "--think-ms", "1"],
        &["--compare", "nocc,omid"],
        &["--connect", "127.0.0.1:1"],
        &["--repeat", "3"], // for --sweep only
        &["--repeat", "0", "--sweep", "write-set=2"],
    ];
    for argv in cases {
        let mut full = vec!["omid-oracle", "--warmup", "0.1", "--quiet"];
        full.extend_from_slice(argv);
        let mut out = Vec::new();
        let err = litmus_bench::run_to(&parse(&full).expect("flags parse"), &mut out)
            .expect_err(&format!("{argv:?} should be refused"));
        let typed = err.chain().any(|e| matches!(e.downcast_ref::<BenchError>(), Some(BenchError::Config(_))));
        assert!(typed, "{argv:?}: not a BenchError::Config: {err:#}");
        assert!(out.is_empty(), "{argv:?}: refused, yet something ran: {}", String::from_utf8_lossy(&out));
    }
    for argv in [
        &["omid-oracle", "--think-dist", "gamma"][..],
        &["omid-oracle", "--table", "slow"],
        &["omid-oracle", "--sweep", "duration=1,x"],
        &["omid-oracle", "--sweep", "outstanding=1.5"],
    ] {
        assert!(parse(argv).is_err(), "{argv:?} should not parse");
    }
}

#[test]
fn compare_replication_prints_the_ratio_last_and_writes_both_runs() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cmp.json");
    let json_arg = json.to_str().unwrap();
    let out = run(&[
        "--compare",
        "replication-off,replication-on",
        "--clients",
        "2",
        "--outstanding",
        "4",
        "--write-set",
        "2",
        "--duration",
        "0.3",
        "--json",
        json_arg,
    ])
    .unwrap();
    let last = out.lines().last().unwrap();
    assert!(last.starts_with("ratio replication-on/replication-off = "), "{out}");
    assert!(out.contains("piggyback bytes:"), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("cpu: ") && l.contains("µs per commit on the oracle's node thread")),
        "{out}"
    );
    let v = read_json(&json);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!((runs[0]["mode"].as_str(), runs[1]["mode"].as_str()), (Some("replication-off"), Some("replication-on")));
    for r in runs {
        assert!(r["commits"].as_u64().unwrap() > 0, "{r}");
        assert!(r["recovery_ms"].as_f64().unwrap() > 0.0 && r["log_bytes"].as_u64().unwrap() > 0, "{r}");
    }
    // The server's threads did the commits' work (the clients' threads are not counted).
    let server_cpu: f64 = runs.iter().map(|r| r["server_cpu_us_per_commit"].as_f64().unwrap()).sum();
    assert!(server_cpu > 0.0, "{runs:?}");
    // Without replication nothing is piggybacked; with it every commit of the other client is.
    assert_eq!(runs[0]["piggyback_entries_mean"].as_f64(), Some(0.0));
    assert!(runs[1]["piggyback_entries_mean"].as_f64().unwrap() > 0.5, "{}", runs[1]);
    let expected = runs[1]["commits_per_sec"].as_f64().unwrap() / runs[0]["commits_per_sec"].as_f64().unwrap();
    assert!((v["ratio"].as_f64().unwrap() - expected).abs() < 1e-9);
    assert_eq!(v["ratio_of"].as_str(), Some("replication-on/replication-off"));
}

/// Figs. 7–8: with think time, each client's piggyback is about one entry per commit of every
/// client since its previous timestamp request, so it grows with the clients.
#[test]
fn a_clients_sweep_with_think_time_draws_figs_7_and_8() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("fig7.json");
    let out = run(&[
        "--outstanding",
        "1",
        "--think-ms",
        "2",
        "--sweep",
        "clients=1,4",
        "--duration",
        "0.4",
        "--json",
        json.to_str().unwrap(),
    ])
    .unwrap();
    assert!(out.contains("Omid Figs. 7-8"), "{out}");
    let points = read_json(&json);
    let points = points.as_array().unwrap();
    assert_eq!(points.len(), 2);
    let entries = |i: usize| points[i]["summary"]["piggyback_entries_mean"].as_f64().unwrap();
    let bytes = |i: usize| points[i]["summary"]["piggyback_bytes_mean"].as_f64().unwrap();
    assert!(entries(1) > 2.0 * entries(0) && bytes(1) > bytes(0), "{points:?}");
    for p in points {
        assert_eq!(p["param"].as_str(), Some("clients"));
        assert!(p["summary"]["commits"].as_u64().unwrap() > 0, "{p}");
        assert_eq!(p["summary"]["think_ms"].as_f64(), Some(2.0));
    }
    for name in ["fig7.svg", "fig7-latency.svg", "fig7-piggyback.svg"] {
        assert_svg(&dir.path().join(name));
    }
}

/// Fig. 9 and Fig. 12 shapes: two replication lines over the load; recovery against log size.
#[test]
fn load_and_duration_sweeps_draw_figs_9_and_12() {
    let dir = tempfile::tempdir().unwrap();
    let fig9 = dir.path().join("fig9.json");
    run(&[
        "--compare",
        "replication-off,replication-on",
        "--clients",
        "1",
        "--sweep",
        "outstanding=1,8",
        "--repeat",
        "2",
        "--duration",
        "0.2",
        "--json",
        fig9.to_str().unwrap(),
    ])
    .unwrap();
    let points = read_json(&fig9);
    let modes: Vec<_> = points.as_array().unwrap().iter().map(|p| p["mode"].as_str().unwrap().to_string()).collect();
    assert_eq!(modes, ["replication-off", "replication-on", "replication-off", "replication-on"]);
    assert_svg(&dir.path().join("fig9.svg"));
    assert_svg(&dir.path().join("fig9-latency.svg"));

    let fig12 = dir.path().join("fig12.json");
    let out = run(&["--clients", "2", "--sweep", "duration=0.1,0.4", "--json", fig12.to_str().unwrap()]).unwrap();
    assert!(out.contains("Omid Fig. 12"), "{out}");
    let points = read_json(&fig12);
    let log = |i: usize| points[i]["summary"]["log_bytes"].as_u64().unwrap();
    assert!(log(1) > log(0), "a longer run leaves more log: {points}");
    assert_svg(&dir.path().join("fig12-recovery.svg"));
}

/// Table I: four setups; slow clients' timestamp replies carry more metadata.
#[test]
fn the_slow_clients_table_has_the_papers_four_rows() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("table1.json");
    let out = run(&[
        "--table",
        "slow-clients",
        "--outstanding",
        "1",
        "--think-ms",
        "2",
        "--clients",
        "10",
        "--duration",
        "0.5",
        "--json",
        json.to_str().unwrap(),
    ])
    .unwrap();
    assert!(out.starts_with("Omid Table I"), "{out}");
    for setup in ["2 ms", "exp(2 ms)", "10% slow (x100)", "10% glacial (x1000)"] {
        assert!(out.lines().any(|l| l.starts_with(setup)), "no row {setup}: {out}");
    }
    let rows = read_json(&json);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let s = |i: usize, k: &str| rows[i]["summary"][k].clone();
    assert_eq!((s(0, "slow_clients").as_u64(), s(2, "slow_clients").as_u64()), (Some(0), Some(1)));
    assert_eq!((s(2, "slow_factor").as_f64(), s(3, "slow_factor").as_f64()), (Some(100.0), Some(1000.0)));
    assert_eq!(s(1, "think_dist").as_str(), Some("exp"));
    for (i, row) in rows.iter().enumerate() {
        assert!(row["summary"]["normal_commits_per_sec"].as_f64().unwrap() > 0.0, "row {i}: {row}");
    }
    // A slow client asks for a timestamp after 200 ms, by which the others committed ~900
    // transactions: its delta is far above the normal clients' (~9 entries).
    if s(2, "slow_begins").as_u64().unwrap() > 0 {
        let (slow, all) = (s(2, "slow_piggyback_bytes_mean").as_f64().unwrap(), s(0, "piggyback_bytes_mean"));
        assert!(slow > 3.0 * all.as_f64().unwrap(), "{}", rows[2]);
    }
}
