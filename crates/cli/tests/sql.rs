//! The SQL endpoint of the `litmus` binary, driven by psql: `litmus demo` as a new user starts
//! it (the address it prints is the one to connect to), and `litmus server --pg-listen`.
//! Skips, saying why, when psql is not installed.

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
