//! `--history`: a ycsb-t run on omid writes an Elle rw-register history that
//! parses, whose committed reads all saw committed writes, and a corrupted copy is caught.

use litmus_bench::harness::{self, BenchConfig};
use litmus_bench::history::{self, MicroOp, OpType};
use litmus_bench::{Ycsb, YcsbOptions};
use litmus_workloads::ycsb_t::{YcsbT, YcsbTOptions};
use std::time::Duration;

fn config(path: &std::path::Path) -> BenchConfig {
    BenchConfig {
        clients: 4,
        duration: Duration::from_millis(500),
        warmup: Duration::from_millis(100),
        net_delay_us: Some(0),
        quiet: true,
        history: Some(path.to_path_buf()),
        ..BenchConfig::new("ycsb-t", litmus_engines::OMID)
    }
}

#[test]
fn a_ycsb_t_run_writes_a_history_whose_reads_match_its_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.edn");
    let w = YcsbT::new(YcsbTOptions { mix: Some("mixed".into()) }, 40, false).unwrap();
    let report = harness::run(&config(&path), std::sync::Arc::new(w)).unwrap();
    assert!(report.verify.ok, "{}", report.verify.message);
    let text = std::fs::read_to_string(&path).unwrap();
    let ops = history::parse(text.as_bytes()).unwrap();
    let summary = history::check(&ops).unwrap_or_else(|p| panic!("{p:?}"));
    // Every transaction of the run is in it (warmup too), and 40 rows under 4 clients make
    // reads see writes.
    assert!(summary.ok >= report.committed, "{summary:?} vs {} committed", report.committed);
    assert!(summary.reads_of_writes > 0, "{summary:?}");
    assert_eq!(
        ops.iter().filter(|o| o.kind == OpType::Invoke).count() as u64,
        summary.ok + summary.fail + summary.info
    );

    // Corrupt one committed read to a value nobody wrote: the check names it.
    let (i, j) = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| o.kind == OpType::Ok)
        .find_map(|(i, o)| o.value.iter().position(|m| matches!(m, MicroOp::Read { .. })).map(|j| (i, j)))
        .expect("a committed read");
    let mut bad = ops.clone();
    let MicroOp::Read { key, .. } = bad[i].value[j] else { unreachable!() };
    bad[i].value[j] = MicroOp::Read { key, value: Some(-5) };
    let corrupted: String = bad.iter().map(|o| format!("{o}\n")).collect();
    let problems = history::check(&history::parse(corrupted.as_bytes()).unwrap()).unwrap_err();
    assert!(problems.iter().any(|p| p.contains("never written")), "{problems:?}");
}

#[test]
fn a_workload_without_a_history_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg =
        BenchConfig { workload: "ycsb".into(), engine: litmus_engines::ACID, ..config(&dir.path().join("h.edn")) };
    let w = Ycsb::new(YcsbOptions { records: 10, ..YcsbOptions::DEFAULT }, false).unwrap();
    let err = format!("{:#}", harness::run(&cfg, std::sync::Arc::new(w)).unwrap_err());
    assert!(err.contains("cannot record a --history"), "{err}");
}
