//! Real processes: `kill -9` durability and a 3-process TCP cluster running the YCSB bench.

use litmus_client::Client;
use litmus_core::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LITMUS: &str = env!("CARGO_BIN_EXE_litmus");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Server(Child);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn write_config(dir: &Path, node: usize, peers: &[String], partitions: u32, fsync: &str) -> std::path::PathBuf {
    let path = dir.join(format!("node{node}.toml"));
    let peers_toml = peers.iter().map(|p| format!("{p:?}")).collect::<Vec<_>>().join(", ");
    let text = format!(
        "node = {node}\nlisten = {:?}\ndata_dir = {:?}\nengine = \"nocc\"\npartitions = {partitions}\nfsync = \"{fsync}\"\npeers = [{peers_toml}]\n",
        peers[node],
        dir.join(format!("data{node}")).display().to_string(),
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn start(config: &Path) -> Server {
    let child = Command::new(LITMUS)
        .args(["server", "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn litmus server");
    Server(child)
}

fn connect(addr: &str) -> Client {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match Client::connect(addr) {
            Ok(c) => return c,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("could not connect to {addr}: {e}"),
        }
    }
}

/// `kill -9` during a write-heavy run, restart: nothing acknowledged is lost.
#[test]
fn kill_dash_nine_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let peers = vec![format!("127.0.0.1:{}", free_port())];
    let config = write_config(dir.path(), 0, &peers, 4, "always");
    let mut server = start(&config);
    let acked = Arc::new(Mutex::new(Vec::<i64>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (addr, acked, stop) = (peers[0].clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut c = connect(&addr);
                let mut k = w as i64 * 1_000_000;
                while !stop.load(Ordering::Relaxed) {
                    k += 1;
                    match c.call("kv_put", vec![Value::Int(k), Value::Bytes(k.to_le_bytes().to_vec())]) {
                        Ok(_) => acked.lock().unwrap().push(k),
                        Err(_) => break, // the server died under us
                    }
                }
            })
        })
        .collect();
    // Let the writers get going, then kill the server without warning.
    let deadline = Instant::now() + Duration::from_secs(20);
    while acked.lock().unwrap().len() < 300 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    server.0.kill().unwrap(); // SIGKILL
    server.0.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 300, "only {} writes acknowledged before the kill", acked.len());

    let _server = start(&config);
    let mut c = connect(&peers[0]);
    for k in &acked {
        let got = c.call("kv_get", vec![Value::Int(*k)]).unwrap();
        assert_eq!(got, vec![Value::Bytes(k.to_le_bytes().to_vec())], "acknowledged key {k} lost after kill -9");
    }
}

/// The YCSB benchmark runs against a 3-process cluster on loopback, as on the embedded runtime.
#[test]
fn ycsb_runs_on_a_three_process_tcp_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let peers: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let _servers: Vec<Server> = (0..3).map(|n| start(&write_config(dir.path(), n, &peers, 6, "never"))).collect();
    for p in &peers {
        drop(connect(p));
    }
    let json = dir.path().join("out.json");
    let out = Command::new(LITMUS)
        .args(["bench", "ycsb", "--duration", "2", "--warmup", "0.5", "--records", "2000", "--quiet", "--connect"])
        .arg(peers.join(","))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "bench failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("throughput"), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(report["throughput"].as_f64().unwrap() > 0.0, "{report}");
}
