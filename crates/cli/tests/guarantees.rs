//! A workload whose checks need more than an engine guarantees is refused up front, naming
//! what it needs and the engines that give it, in `litmus bench` and in `litmus sim` alike;
//! nothing is loaded or run (a refused run's "failures" would be the workload's, not the
//! database's).

use std::process::Command;

const LITMUS: &str = env!("CARGO_BIN_EXE_litmus");

fn refused(args: &[&str]) -> String {
    let out = Command::new(LITMUS).args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?} ran:\n{}", String::from_utf8_lossy(&out.stdout));
    assert!(out.stdout.is_empty(), "{args:?} printed results before refusing");
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn a_workload_that_needs_more_than_the_engine_guarantees_is_refused_before_it_runs() {
    let e = refused(&["bench", "ycsb-t", "--engine", "coordfree", "--duration", "1"]);
    assert!(e.contains("engine coordfree provides read atomic"), "{e}");
    assert!(e.contains("ycsb-t needs at least snapshot isolation"), "{e}");
    assert!(e.contains("Choose one of: acid, salt, salt-local, omid"), "{e}");
    let e = refused(&["bench", "tpcc", "--engine", "coordfree", "--duration", "1"]);
    assert!(e.contains("tpcc needs at least snapshot isolation"), "{e}");
    let e = refused(&["bench", "tpcc-neworder", "--engine", "nocc", "--duration", "1"]);
    assert!(e.contains("tpcc-neworder needs at least read atomicity"), "{e}");
    assert!(e.contains("coordfree"), "{e}");
    let e = refused(&["sim", "--engine", "coordfree", "--workload", "ycsb-t", "--seeds", "1"]);
    assert!(e.contains("the ycsb-t simulation needs at least snapshot isolation"), "{e}");
    let e = refused(&["sim", "--engine", "nocc", "--workload", "bank", "--seeds", "1"]);
    assert!(e.contains("the bank simulation needs at least snapshot isolation"), "{e}");
}
