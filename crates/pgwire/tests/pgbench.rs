//! `pgbench`, unmodified: its default initialization (drop, create, COPY of 100,000 accounts,
//! vacuum, primary keys added afterwards) and TPC-B-like runs with 8 clients, simple and
//! prepared, retrying serialization failures. No transaction fails after its 10 tries: the
//! updates read their rows for update, so updaters of the one branch row queue on it instead of
//! deadlocking on a lock upgrade; wait-die's patience (`litmus-locking` LK-5a) still kills a
//! queued updater that waited for an older holder, but the session begins pgbench's retry with
//! the first attempt's age, so a transaction that keeps dying soon is the oldest and waits
//! instead. After each run the balances agree: every account, teller and branch change is in
//! the history. Skips, saying why, when pgbench or psql is not installed.

mod common;

use std::net::SocketAddr;
use std::process::Command;

fn pg_args(addr: SocketAddr) -> Vec<String> {
    vec!["-h".into(), addr.ip().to_string(), "-p".into(), addr.port().to_string(), "-U".into(), "bench".into()]
}

fn pgbench(addr: SocketAddr, args: &[&str]) -> Option<String> {
    let bin = common::program("pgbench")?;
    let out = Command::new(bin).args(pg_args(addr)).args(args).arg("bench").output().expect("running pgbench");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "pgbench {args:?} failed:\n{text}");
    Some(text)
}

fn sum(addr: SocketAddr, sql: &str) -> Option<i64> {
    let bin = common::program("psql")?;
    let out = Command::new(bin)
        .args(pg_args(addr))
        .args(["-X", "-A", "-t", "-d", "bench", "-c", sql])
        .output()
        .expect("running psql");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success(), "{sql}: {}", String::from_utf8_lossy(&out.stderr));
    Some(if text.is_empty() { 0 } else { text.parse().unwrap_or_else(|_| panic!("{sql}: {text}")) })
}

fn field(report: &str, name: &str) -> i64 {
    let line = report.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name:?} in:\n{report}"));
    line[name.len()..].split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

/// The account, teller and branch totals, which every transaction changes by the same delta.
fn totals(addr: SocketAddr) -> Option<[i64; 3]> {
    Some([
        sum(addr, "SELECT sum(abalance) FROM pgbench_accounts")?,
        sum(addr, "SELECT sum(tbalance) FROM pgbench_tellers")?,
        sum(addr, "SELECT sum(bbalance) FROM pgbench_branches")?,
    ])
}

#[test]
fn pgbench_initializes_and_runs_tpcb_with_no_failed_transaction_and_balances_that_agree() {
    let addr = common::start(litmus_engines::ACID);
    let Some(init) = pgbench(addr, &["-i", "-s", "1"]) else { return };
    assert!(init.contains("creating primary keys"), "{init}");
    assert_eq!(sum(addr, "SELECT count(*) FROM pgbench_accounts"), Some(100_000));
    for mode in ["simple", "prepared"] {
        let Some(before) = totals(addr) else { return };
        let report = pgbench(addr, &["-c", "8", "-j", "2", "-T", "4", "-M", mode, "--max-tries", "10"]).unwrap();
        println!("{report}");
        let processed = field(&report, "number of transactions actually processed:");
        let failed = field(&report, "number of failed transactions:");
        assert!(processed > 0, "{report}");
        assert_eq!(failed, 0, "{mode}: no transaction fails after its 10 tries\n{report}");
        // pgbench empties the history before each run: it holds this run's deltas.
        assert_eq!(sum(addr, "SELECT count(*) FROM pgbench_history"), Some(processed), "{report}");
        let delta = sum(addr, "SELECT sum(delta) FROM pgbench_history").unwrap();
        let after = totals(addr).unwrap();
        for (b, a) in before.iter().zip(after) {
            assert_eq!(a - b, delta, "totals {before:?} -> {after:?}, history {delta} ({mode})");
        }
        println!("{mode}: {processed} transactions, {failed} failed after 10 tries, balances agree");
    }
}
