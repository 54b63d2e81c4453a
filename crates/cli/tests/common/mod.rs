//! What the real-process tests share: the `litmus` binary, free ports, a server that dies with
//! the test.

#![allow(dead_code)]

use litmus_client::Client;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use std::io::Write as _;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub const LITMUS: &str = env!("CARGO_BIN_EXE_litmus");

pub use litmus_runtime::ports::free_port;

/// A server process, killed (`kill -9`) and reaped when dropped.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `litmus ARGS` to completion with `stdin` as its input.
pub fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(LITMUS)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// Writes node `node`'s config for a cluster of `peers` on `engine` under `dir`.
pub fn write_engine_config(
    dir: &Path,
    node: usize,
    peers: &[String],
    partitions: u32,
    fsync: &str,
    engine: &str,
) -> std::path::PathBuf {
    let path = dir.join(format!("node{node}.toml"));
    let peers_toml = peers.iter().map(|p| format!("{p:?}")).collect::<Vec<_>>().join(", ");
    let text = format!(
        "node = {node}\nlisten = {:?}\ndata_dir = {:?}\nengine = \"{engine}\"\npartitions = {partitions}\nfsync = \"{fsync}\"\npeers = [{peers_toml}]\n",
        peers[node],
        dir.join(format!("data{node}")).display().to_string(),
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// [`write_engine_config`] with each partition kept by `replicas` nodes.
pub fn write_replicated_config(
    dir: &Path,
    node: usize,
    peers: &[String],
    partitions: u32,
    engine: &str,
    replicas: u32,
) -> std::path::PathBuf {
    let path = write_engine_config(dir, node, peers, partitions, "always", engine);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{text}replicas = {replicas}\n")).unwrap();
    path
}

/// Waits for a bench started at `started` whose window (warmup included) is `window_secs`
/// long: it must end within that plus a bounded grace (load, recovery, verify), or the test
/// fails naming `what` (and the bench is killed).
pub fn wait_bounded(bench: &mut std::process::Child, started: Instant, window_secs: f64, what: &str) -> ExitStatus {
    let bound = Duration::from_secs_f64(window_secs) + Duration::from_secs(30);
    loop {
        if let Some(status) = bench.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > bound {
            let _ = bench.kill();
            panic!("{what} still running {:?} after it started", started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn start(config: &Path) -> Server {
    let child = Command::new(LITMUS)
        .args(["server", "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn litmus server");
    Server(child)
}

pub fn connect(addr: &str) -> Client {
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

/// Writes `ca.pem` and, per name, `NAME.pem`/`NAME.key` for 127.0.0.1 and localhost.
pub fn certs(dir: &Path, names: &[&str]) {
    let ca_key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, "litmus test CA");
    let ca = params.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    for name in names {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }
}
