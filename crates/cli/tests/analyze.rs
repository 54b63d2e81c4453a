//! The acceptance commands of `litmus analyze`, run as a user runs them.

use std::process::Command;

const LITMUS: &str = env!("CARGO_BIN_EXE_litmus");

#[test]
fn analyze_tpcc_lists_the_twelve_conditions_and_only_2_and_3_need_coordination() {
    let out = Command::new(LITMUS).args(["analyze", "tpcc"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    for n in 1..=12 {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("3.3.2.{n} ")))
            .unwrap_or_else(|| panic!("no line for 3.3.2.{n}:\n{text}"));
        assert_eq!(line.contains("NEEDS COORDINATION"), n == 2 || n == 3, "{line}");
    }
    assert!(text.contains("10 of 12 I-confluent; need coordination: 3.3.2.2, 3.3.2.3"), "{text}");
    assert!(text.contains("new-order (tpcc_new_order): NEEDS COORDINATION"), "{text}");
    assert!(text.contains("payment (tpcc_payment): coordination-free"), "{text}");
}

#[test]
fn analyze_tpcc_json_writes_the_same_report() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.json");
    let out = Command::new(LITMUS).args(["analyze", "tpcc", "--json"]).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let named: Vec<(String, bool)> = v["invariants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["named"] == true)
        .map(|i| (i["name"].as_str().unwrap().to_string(), i["needs_coordination"].as_bool().unwrap()))
        .collect();
    assert_eq!(named.len(), 12);
    let need: Vec<&str> = named.iter().filter(|(_, c)| *c).map(|(n, _)| n.as_str()).collect();
    assert_eq!(need, vec!["3.3.2.2", "3.3.2.3"]);
}

#[test]
fn bad_ddl_and_unknown_workloads_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.sql");
    std::fs::write(&path, "CREATE TABLE tpcc_item (i_id INT PRIMARY KEY, CHECK (LITMUS_FROB(i_id)))").unwrap();
    let out = Command::new(LITMUS).args(["analyze", "tpcc", "--schema"]).arg(&path).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("LITMUS_FROB"), "{err}");
    let out = Command::new(LITMUS).args(["analyze", "nope"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown workload"));
}

#[test]
fn a_users_own_schema_and_declared_procedures() {
    let dir = tempfile::tempdir().unwrap();
    let sql = dir.path().join("bank.sql");
    let toml = dir.path().join("bank.toml");
    std::fs::write(
        &sql,
        "CREATE TABLE account (id INT PRIMARY KEY, balance DECIMAL NOT NULL,
                               CONSTRAINT \"balance >= 0\" CHECK (balance >= 0));",
    )
    .unwrap();
    std::fs::write(
        &toml,
        "[[procedure]]\nname = \"withdraw\"\nupdates = [{ column = \"account.balance\", change = \"decrement\" }]\n\
         [[procedure]]\nname = \"deposit\"\nupdates = [{ column = \"account.balance\", change = \"increment\" }]\n",
    )
    .unwrap();
    let out =
        Command::new(LITMUS).args(["analyze", "--schema"]).arg(&sql).arg("--procedures").arg(&toml).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("withdraw (withdraw): NEEDS COORDINATION"), "{text}");
    assert!(text.contains("Claim 13"), "{text}");
    assert!(text.contains("deposit (deposit): coordination-free"), "{text}");
}

/// `litmus analyze --schema DDL --sql SCRIPT` over pgbench's own TPC-B script: the transaction
/// may withdraw (`:delta` is `random(-5000, 5000)`), so the accounts' lower bound needs
/// coordination (Claim 13); the history insert, keyed by a hidden row id, does not. Bad input
/// is an error naming it, with a failing exit status.
#[test]
fn analyze_sql_judges_pgbench_s_script_against_the_user_s_ddl() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/pgbench-analyze");
    let out = Command::new(LITMUS)
        .args(["analyze", "--schema", &format!("{dir}/schema.sql"), "--sql", &format!("{dir}/tpcb.sql")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("tpcb-like (tpcb-like): NEEDS COORDINATION"), "{text}");
    assert!(text.contains("overdraft limit") && text.contains("Claim 13"), "{text}");
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.sql");
    std::fs::write(&bad, "UPDATE nope SET x = 1;").unwrap();
    let out = Command::new(LITMUS)
        .args(["analyze", "--schema", &format!("{dir}/schema.sql"), "--sql"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown table nope"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
