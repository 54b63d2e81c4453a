//! The SQL endpoint of the `litmus` binary, driven by psql: `litmus demo` as a new user starts
//! it (the address it prints is the one to connect to), and `litmus server --pg-listen`.
//! Skips, saying why, when psql is not installed.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

const LITMUS: &str = env!("CARGO_BIN_EXE_litmus");

fn psql_path() -> Option<&'static str> {
    let found = ["/usr/bin/psql", "/usr/local/bin/psql"].into_iter().find(|p| std::path::Path::new(p).exists());
    if found.is_none() {
        println!("SKIPPED: psql is not installed (apt-get install postgresql-client)");
    }
    found
}

/// Kills the child when the test ends, passing or not.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn psql(psql: &str, host: &str, port: &str, sql: &str) -> String {
    let out = Command::new(psql)
        .args(["-X", "-A", "-t", "-h", host, "-p", port, "-U", "litmus", "-d", "litmus", "-c", sql])
        .output()
        .expect("running psql");
    assert!(out.status.success(), "{sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn demo_prints_a_psql_line_that_creates_a_table_and_reads_it_back() {
    let Some(psql_bin) = psql_path() else { return };
    let child = Command::new(LITMUS)
        .args(["demo", "--pg-listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting litmus demo");
    let mut demo = Reaped(child);
    let stdout = demo.0.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
    let line = lines.by_ref().find(|l| l.contains("psql -h")).expect("the demo prints how to connect");
    // Keep reading, as a terminal would.
    std::thread::spawn(move || lines.for_each(drop));
    // "connect with:  psql -h HOST -p PORT -U litmus litmus"
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = |flag: &str| words[words.iter().position(|w| *w == flag).expect(flag) + 1];
    let (host, port) = (at("-h"), at("-p"));
    psql(psql_bin, host, port, "CREATE TABLE notes (id INT PRIMARY KEY, body TEXT)");
    psql(psql_bin, host, port, "INSERT INTO notes VALUES (1, 'hello'), (2, 'world')");
    assert_eq!(psql(psql_bin, host, port, "SELECT body FROM notes ORDER BY id"), "hello\nworld");
}

#[test]
fn server_with_pg_listen_serves_sql_that_survives_a_restart() {
    let Some(psql_bin) = psql_path() else { return };
    let dir = std::env::temp_dir().join(format!("litmus-sql-server-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (listen, pg) = (format!("127.0.0.1:{}", free()), free().to_string());
    let config = dir.join("node.toml");
    let toml = format!(
        "node = 0\nlisten = \"{listen}\"\ndata_dir = \"{}\"\nengine = \"acid\"\npartitions = 2\nfsync = \"always\"\npeers = [\"{listen}\"]\npg_listen = \"127.0.0.1:{pg}\"\n",
        dir.join("data").display()
    );
    std::fs::write(&config, toml).unwrap();
    let start = || {
        let child =
            Command::new(LITMUS).args(["server", "--config"]).arg(&config).stderr(Stdio::null()).spawn().unwrap();
        let server = Reaped(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(format!("127.0.0.1:{pg}")).is_err() {
            assert!(std::time::Instant::now() < deadline, "pg_listen never opened");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        server
    };
    let server = start();
    psql(
        psql_bin,
        "127.0.0.1",
        &pg,
        "CREATE TABLE kept (k INT PRIMARY KEY, v TEXT); INSERT INTO kept VALUES (7, 'durable')",
    );
    drop(server);
    // The catalog and the rows are ordinary logged data: both come back after a restart.
    let _server = start();
    assert_eq!(psql(psql_bin, "127.0.0.1", &pg, "SELECT v FROM kept WHERE k = 7"), "durable");
    let _ = std::fs::remove_dir_all(&dir);
}

/// SQL users and TLS on the SQL port: a node with `pg_users` (one user's password given as the
/// verifier `litmus pg-password` printed, one in clear) and its TLS keys. psql verifies the
/// server's certificate and authenticates with SCRAM-SHA-256, and with SCRAM-SHA-256-PLUS
/// when it asks for channel binding; a wrong password and a user that does not exist get the
/// same `28P01`; a plaintext connection is refused, saying TLS is required.
#[test]
fn sql_users_authenticate_with_scram_over_tls_and_plaintext_is_refused() {
    let Some(psql_bin) = psql_path() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    common::certs(d, &["node0"]);
    let verifier = common::run(&["pg-password"], "correct horse\n");
    assert!(verifier.status.success(), "{}", String::from_utf8_lossy(&verifier.stderr));
    let verifier = String::from_utf8(verifier.stdout).unwrap().trim().to_string();
    assert!(verifier.starts_with("SCRAM-SHA-256$4096:"), "{verifier}");
    let (listen, pg) = (format!("127.0.0.1:{}", common::free_port()), common::free_port());
    let config = d.join("node.toml");
    let path = |name: &str| d.join(name).display().to_string();
    std::fs::write(
        &config,
        format!(
            "node = 0\nlisten = \"{listen}\"\ndata_dir = \"{}\"\nengine = \"acid\"\npartitions = 2\nfsync = \"never\"\n\
             peers = [\"{listen}\"]\npg_listen = \"127.0.0.1:{pg}\"\n\
             tls_cert = \"{}\"\ntls_key = \"{}\"\ntls_ca = \"{}\"\n\
             [pg_users]\nalice = \"{verifier}\"\nbob = \"battery staple\"\n",
            path("data"),
            path("node0.pem"),
            path("node0.key"),
            path("ca.pem"),
        ),
    )
    .unwrap();
    let _server = common::start(&config);
    let ca = path("ca.pem");
    let run = |user: &str, password: &str, options: &str| {
        let url = format!("host=localhost port={pg} dbname=litmus user={user} {options}");
        let out = Command::new(psql_bin)
            .args(["-X", "-A", "-t", "-w", "-d", &url, "-c", "SELECT 1 + 1"])
            .env("PGPASSWORD", password)
            .output()
            .expect("running psql");
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    let verified = format!("sslmode=verify-full sslrootcert={ca}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (ok, text) = run("alice", "correct horse", &verified);
        if ok {
            assert_eq!(text.trim(), "2");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "alice never got in: {text}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let (ok, text) = run("bob", "battery staple", &format!("{verified} channel_binding=require"));
    assert!(ok, "SCRAM-SHA-256-PLUS: {text}");
    for (user, password) in [("alice", "wrong"), ("mallory", "correct horse")] {
        let (ok, text) = run(user, password, &verified);
        assert!(!ok, "{user} got in with {password:?}");
        assert!(text.contains(&format!("password authentication failed for user \"{user}\"")), "{user}: {text}");
    }
    let (ok, text) = run("alice", "correct horse", "sslmode=disable");
    assert!(!ok && text.contains("this server requires TLS"), "plaintext: {text}");
}

/// `pgbench` (TPC-B-like, 8 clients, simple and prepared) against a 3-node `acid` cluster with
/// every partition on all three nodes (`replicas = 3`), through one node's SQL port. Every
/// transaction updates the one branch row at scale 1; the updates read it for update, so they
/// queue on it and none fails after its tries (they once deadlocked on the lock upgrade and 2–5%
/// failed). The TPC-B identity holds after each run: the accounts', tellers' and branches'
/// totals moved by the history's sum of deltas. Skips, saying why, without pgbench or psql.
///
/// Wait-die's patience (`litmus-locking` LK-5a) kills many queued updaters of the branch row,
/// but the session begins each retry with its first attempt's age, so none dies ten times.
///
/// `pgbench -i` commits 100,000 rows in one transaction: steps of 300–700 ms on busy cores,
/// past the election timeout. Fortification and raft's running clock (docs/replication.md,
/// "Busy is not dead") keep the busy node's leaderships, so the load completes with both cores
/// taken.
#[test]
fn pgbench_on_a_replicated_three_node_acid_cluster_fails_no_transaction_and_balances_agree() {
    let (Some(psql_bin), Some(pgbench_bin)) = (psql_path(), pgbench_path()) else { return };
    let dir = tempfile::tempdir().unwrap();
    let peers: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", common::free_port())).collect();
    let pg: Vec<String> = (0..3).map(|_| common::free_port().to_string()).collect();
    let _servers: Vec<common::Server> = (0..3)
        .map(|n| {
            let config = common::write_replicated_config(dir.path(), n, &peers, 6, "acid", 3);
            let text = std::fs::read_to_string(&config).unwrap();
            // 16 MiB frames: pgbench -i loads its 100,000 accounts in one transaction.
            let extra = format!("pg_listen = \"127.0.0.1:{}\"\nmax_frame_bytes = 16777216\n", pg[n]);
            std::fs::write(&config, format!("{text}{extra}")).unwrap();
            common::start(&config)
        })
        .collect();
    let port = pg[0].as_str();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::process::Command::new(psql_bin)
        .args(["-X", "-h", "127.0.0.1", "-p", port, "-U", "litmus", "-d", "litmus", "-c", "SELECT 1"])
        .output()
        .map_or(true, |o| !o.status.success())
    {
        assert!(std::time::Instant::now() < deadline, "the cluster never answered SQL");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let pgbench = |args: &[&str]| -> String {
        let out = Command::new(pgbench_bin)
            .args(["-h", "127.0.0.1", "-p", port, "-U", "bench"])
            .args(args)
            .arg("bench")
            .output()
            .expect("running pgbench");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "pgbench {args:?} failed:\n{text}");
        text
    };
    let sum = |sql: &str| -> i64 {
        let text = psql(psql_bin, "127.0.0.1", port, sql);
        if text.is_empty() {
            0
        } else {
            text.parse().unwrap_or_else(|_| panic!("{sql}: {text}"))
        }
    };
    let totals = || {
        [
            sum("SELECT sum(abalance) FROM pgbench_accounts"),
            sum("SELECT sum(tbalance) FROM pgbench_tellers"),
            sum("SELECT sum(bbalance) FROM pgbench_branches"),
        ]
    };
    let init = pgbench(&["-i", "-s", "1"]);
    assert!(init.contains("creating primary keys"), "{init}");
    for mode in ["simple", "prepared"] {
        let before = totals();
        let report = pgbench(&["-c", "8", "-j", "2", "-T", "10", "-M", mode, "--max-tries", "10"]);
        println!("{report}");
        let processed = field(&report, "number of transactions actually processed:");
        let failed = field(&report, "number of failed transactions:");
        assert!(processed > 0, "{report}");
        assert_eq!(failed, 0, "{mode}: no transaction fails after its tries\n{report}");
        assert_eq!(sum("SELECT count(*) FROM pgbench_history"), processed, "{report}");
        let delta = sum("SELECT sum(delta) FROM pgbench_history");
        let after = totals();
        for (b, a) in before.iter().zip(after) {
            assert_eq!(a - b, delta, "{mode}: totals {before:?} -> {after:?}, history {delta}");
        }
    }
}

fn pgbench_path() -> Option<&'static str> {
    let found = ["/usr/bin/pgbench", "/usr/lib/postgresql/15/bin/pgbench"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    if found.is_none() {
        println!("SKIPPED: pgbench is not installed (apt-get install postgresql-contrib)");
    }
    found
}

/// The number after `name` in a pgbench report.
fn field(report: &str, name: &str) -> i64 {
    let line = report.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name:?} in:\n{report}"));
    line[name.len()..].split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}
