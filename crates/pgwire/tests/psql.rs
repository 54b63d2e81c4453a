//! `psql`, the client we did not write, against the endpoint: create, insert, select, update
//! in a transaction, roll back, and the SQLSTATEs of the errors (psql prints them with
//! `VERBOSITY verbose`). Skips, saying why, when psql is not installed.

mod common;

use std::process::Command;

/// Runs `script` through psql (no psqlrc, unaligned tuples-only output); stdout and stderr.
fn psql(addr: std::net::SocketAddr, script: &str) -> Option<(String, String)> {
    let bin = common::program("psql")?;
    let out = Command::new(bin)
        .args([
            "-X",
            "-A",
            "-t",
            "-h",
            &addr.ip().to_string(),
            "-p",
            &addr.port().to_string(),
            "-U",
            "test",
            "-d",
            "test",
        ])
        .args(["-v", "VERBOSITY=verbose", "-c", script])
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("running psql");
    Some((String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned()))
}

fn psql_file(addr: std::net::SocketAddr, script: &str) -> Option<(String, String)> {
    let bin = common::program("psql")?;
    let path = std::env::temp_dir().join(format!("litmus-psql-{}.sql", std::process::id()));
    std::fs::write(&path, script).unwrap();
    let out = Command::new(bin)
        .args([
            "-X",
            "-A",
            "-t",
            "-h",
            &addr.ip().to_string(),
            "-p",
            &addr.port().to_string(),
            "-U",
            "test",
            "-d",
            "test",
        ])
        .args(["-v", "VERBOSITY=verbose", "-f"])
        .arg(&path)
        .output()
        .expect("running psql");
    let _ = std::fs::remove_file(&path);
    Some((String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned()))
}

/// On a locking engine and on the two kinds of one-round engine (timestamp voting, locking
/// two-phase commit), where SQL runs as optimistic transactions committed as minitransactions.
#[test]
fn psql_creates_inserts_selects_updates_rolls_back_and_sees_error_codes() {
    for engine in [litmus_engines::ACID, litmus_engines::GRANOLA, litmus_engines::SINFONIA] {
        psql_session(engine);
    }
}

fn psql_session(engine: litmus_protocol::EngineKind) {
    let addr = common::start(engine);
    let script = "\
CREATE TABLE accounts (id INT PRIMARY KEY, owner VARCHAR(20) NOT NULL, balance NUMERIC(10,2) DEFAULT 0);
INSERT INTO accounts VALUES (1, 'ann', 100.5), (2, 'bob', 50);
SELECT id, owner, balance FROM accounts ORDER BY id;
BEGIN;
UPDATE accounts SET balance = balance - 25 WHERE id = 1;
UPDATE accounts SET balance = balance + 25 WHERE id = 2;
SELECT sum(balance) FROM accounts;
ROLLBACK;
SELECT balance FROM accounts ORDER BY id;
BEGIN;
UPDATE accounts SET balance = balance - 25 WHERE id = 1;
COMMIT;
SELECT balance FROM accounts WHERE id = 1;
INSERT INTO accounts VALUES (1, 'dup', 0);
INSERT INTO accounts (id) VALUES (3);
SELECT * FROM missing;
SELEC 1;
SELECT DISTINCT owner FROM accounts;
CREATE PROCEDURE pay(who INT, amount NUMERIC(10,2)) LANGUAGE sql AS $$
  UPDATE accounts SET balance = balance - amount WHERE id = who;
$$;
CALL pay(2, 5);
SELECT balance FROM accounts WHERE id = 2;
SELECT count(*) FROM accounts;
";
    let Some((out, err)) = psql_file(addr, script) else { return };
    let lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        lines,
        vec![
            "CREATE TABLE",
            "INSERT 0 2",
            "1|ann|100.50",
            "2|bob|50.00",
            "BEGIN",
            "UPDATE 1",
            "UPDATE 1",
            "150.50",
            "ROLLBACK",
            "100.50",
            "50.00",
            "BEGIN",
            "UPDATE 1",
            "COMMIT",
            "75.50",
            "CREATE PROCEDURE",
            "CALL",
            "45.00",
            "2"
        ],
        "{engine}: stderr: {err}"
    );
    for code in ["23505", "23502", "42P01", "42601", "0A000"] {
        assert!(err.contains(&format!("ERROR:  {code}")), "{engine}: no {code} in: {err}");
    }
    // One psql call per statement too: a fresh connection sees the committed state.
    let Some((out, _)) = psql(addr, "SELECT owner FROM accounts WHERE id = 2") else { return };
    assert_eq!(out.trim(), "bob", "{engine}");
}
