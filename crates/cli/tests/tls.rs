//! TLS between clients and nodes, end to end with real processes: a 2-node cluster from the
//! example config with its TLS keys set (certificates made here with rcgen); `bench --connect`
//! and `shell` over TLS, a plaintext shell refused with a clear error, mutual TLS, and the loud
//! warning of a plaintext server listening beyond loopback.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{certs, free_port, run, Server, LITMUS};

/// Node `n`'s config: the example's, on free ports and a temp dir, with `edit` applied.
fn config(dir: &Path, n: usize, peers: &[String], edit: impl FnOnce(&mut toml::Table)) -> PathBuf {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../examples/cluster-3/node{n}.toml"));
    let mut t: toml::Table = toml::from_str(&std::fs::read_to_string(example).unwrap()).unwrap();
    t.insert("listen".into(), peers[n].clone().into());
    t.insert("peers".into(), toml::Value::Array(peers.iter().map(|p| p.clone().into()).collect()));
    t.insert("metrics_addr".into(), format!("127.0.0.1:{}", free_port()).into());
    t.insert("pg_listen".into(), format!("127.0.0.1:{}", free_port()).into());
    t.insert("fsync".into(), "never".into());
    t.insert("partitions".into(), 4.into());
    // The example's replica count, capped at the nodes these tests start.
    let replicas = t.get("replicas").and_then(toml::Value::as_integer).unwrap_or(1).min(peers.len() as i64);
    t.insert("replicas".into(), replicas.into());
    t.insert("data_dir".into(), dir.join(format!("data{n}")).display().to_string().into());
    edit(&mut t);
    let path = dir.join(format!("node{n}.toml"));
    std::fs::write(&path, toml::to_string(&t).unwrap()).unwrap();
    path
}

fn tls_keys(dir: &Path, n: usize) -> impl FnOnce(&mut toml::Table) {
    let dir = dir.to_path_buf();
    move |t| {
        t.insert("tls_cert".into(), dir.join(format!("node{n}.pem")).display().to_string().into());
        t.insert("tls_key".into(), dir.join(format!("node{n}.key")).display().to_string().into());
        t.insert("tls_ca".into(), dir.join("ca.pem").display().to_string().into());
    }
}

fn spawn(config: &Path, log: &Path) -> Server {
    let file = std::fs::File::create(log).unwrap();
    Server(
        Command::new(LITMUS)
            .args(["server", "--config"])
            .arg(config)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::from(file))
            .spawn()
            .expect("spawn litmus server"),
    )
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Waits until `log` contains `what` (the server logs it once it is listening).
fn wait_log(log: &Path, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(what) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_tls_cluster_serves_bench_and_shell_and_refuses_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certs(d, &["node0", "node1", "alice"]);
    let peers: Vec<String> = (0..2).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let _servers: Vec<Server> =
        (0..2).map(|n| spawn(&config(d, n, &peers, tls_keys(d, n)), &d.join(format!("n{n}.log")))).collect();
    for n in 0..2 {
        let log = wait_log(&d.join(format!("n{n}.log")), "listening");
        assert!(log.contains("with TLS") && !log.contains("WITHOUT TLS"), "{log}");
    }
    let ca = d.join("ca.pem").display().to_string();
    let addrs = peers.join(",");
    let bench = run(
        &[
            "bench",
            "ycsb",
            "--connect",
            &addrs,
            "--tls-ca",
            &ca,
            "--duration",
            "0.5",
            "--warmup",
            "0.2",
            "--clients",
            "2",
            "-q",
        ],
        "",
    );
    let out = text(&bench);
    assert!(bench.status.success() && out.contains("verify: ok"), "{out}");

    let shell = run(&["shell", "--connect", &peers[1], "--tls-ca", &ca], "tables\nput kv 7 hello\nget kv 7\n");
    let out = text(&shell);
    assert!(shell.status.success() && out.contains("7 | 0x68656c6c6f"), "{out}");

    // Plaintext against the TLS server: a clear, typed refusal; the server keeps serving.
    let plain = run(&["shell", "--connect", &peers[0]], "tables\n");
    let out = text(&plain);
    assert!(!plain.status.success() && out.contains("requires TLS") && out.contains("--tls-ca"), "{out}");
    let bad_pem = run(&["shell", "--connect", &peers[0], "--tls-ca", "/nonexistent/ca.pem"], "tables\n");
    let out = text(&bad_pem);
    assert!(!bad_pem.status.success() && out.contains("/nonexistent/ca.pem"), "{out}");
    let again = run(&["dump", "--connect", &peers[0], "--tls-ca", &ca, "--table", "kv"], "");
    assert!(again.status.success() && text(&again).contains("7,0x68656c6c6f"), "{}", text(&again));
}

#[test]
fn mutual_tls_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certs(d, &["node0", "alice"]);
    let peers = vec![format!("127.0.0.1:{}", free_port())];
    let cfg = config(d, 0, &peers, |t| {
        tls_keys(d, 0)(t);
        t.insert("tls_client_auth".into(), true.into());
    });
    let log = d.join("n0.log");
    let _server = spawn(&cfg, &log);
    let log = wait_log(&log, "listening");
    assert!(log.contains("client certificates required"), "{log}");
    let ca = d.join("ca.pem").display().to_string();
    let (cert, key) = (d.join("alice.pem").display().to_string(), d.join("alice.key").display().to_string());
    let ok =
        run(&["shell", "--connect", &peers[0], "--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key], "tables\n");
    assert!(ok.status.success(), "{}", text(&ok));
    let denied = run(&["shell", "--connect", &peers[0], "--tls-ca", &ca], "tables\n");
    let out = text(&denied);
    assert!(!denied.status.success() && out.contains("authentication failed") && out.contains("--tls-cert"), "{out}");
}

#[test]
fn a_plaintext_server_beyond_loopback_warns_loudly_and_a_tls_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certs(d, &["node0"]);
    for tls in [false, true] {
        let listen = vec![format!("0.0.0.0:{}", free_port())];
        let sub = d.join(format!("tls-{tls}"));
        std::fs::create_dir_all(&sub).unwrap();
        let cfg = config(&sub, 0, &listen, |t| {
            if tls {
                tls_keys(d, 0)(t);
            }
        });
        let log = sub.join("n0.log");
        let _server = spawn(&cfg, &log);
        let text = wait_log(&log, "listening");
        assert!(text.contains("listening"), "{text}");
        let warned = text.lines().any(|l| l.contains("WARN") && l.contains("WITHOUT TLS"));
        assert_eq!(warned, !tls, "tls = {tls}: {text}");
    }
}
