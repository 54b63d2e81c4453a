//! Fortification on real threads and sockets: three nodes on loopback keep every partition on
//! all three (`replicas = 3`). Node 0's protocol thread is made to stall, as in a long step
//! (a commit of 100,000 rows), for longer than the election timeout. With fortification its
//! followers hold their election timers and node 0 keeps its leaderships; without it
//! ([`BREAK_NO_FORTIFY`]) they elect other leaders. A killed node is still replaced: a
//! fortification comes only from a live thread.

use litmus_protocol::builtin;
use litmus_runtime::ports::free_port;
use litmus_runtime::replica::{BREAK_NO_FORTIFY, BREAK_RULE, ELECTION_SPREAD_TICKS, ELECTION_TICKS};
use litmus_runtime::tcp::{serve_until, NodeConfig, STALL_ONCE};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The tests change process-wide settings: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Past the longest election timeout.
const STALL_MS: u64 =
    (ELECTION_TICKS + ELECTION_SPREAD_TICKS) as u64 * litmus_protocol::machine::TICK_INTERVAL_MS + 200;

struct Cluster {
    metrics: Vec<String>,
    stops: Vec<Arc<AtomicBool>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for s in &self.stops {
            s.store(true, Ordering::Relaxed);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn start() -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let peers: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let metrics: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let mut stops = Vec::new();
    let mut threads = Vec::new();
    for node in 0..3u32 {
        let cfg = NodeConfig {
            fsync: litmus_storage::wal::FsyncPolicy::Never,
            seed: 1,
            replicas: 3,
            metrics_addr: Some(metrics[node as usize].clone()),
            ..NodeConfig::new(
                node,
                peers[node as usize].clone(),
                dir.path().join(format!("n{node}")),
                "nocc",
                3,
                peers.clone(),
            )
        };
        let stop = Arc::new(AtomicBool::new(false));
        stops.push(stop.clone());
        threads.push(std::thread::spawn(move || {
            let _ = serve_until(cfg, Arc::new(builtin::catalog()), Arc::new(builtin::registry()), stop);
        }));
    }
    Cluster { metrics, stops, threads, _dir: dir }
}

/// The sum of one engine event's counter over the nodes' metrics.
fn events(c: &Cluster, event: &str) -> u64 {
    let line = format!("event=\"{event}\"}}");
    c.metrics
        .iter()
        .map(|addr| {
            let Ok(mut s) = std::net::TcpStream::connect(addr) else { return 0 };
            let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            text.lines()
                .filter(|l| l.contains(&line))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// How many leaderships moved while node 0 stalled three times, once its groups settled.
fn step_downs_over_stalls(c: &Cluster) -> u64 {
    // The homes lead once their groups are up (and the first leaders hand back to them).
    let settled = Instant::now() + Duration::from_secs(3);
    while Instant::now() < settled {
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = events(c, "replica stepped down");
    for _ in 0..3 {
        STALL_ONCE.store((1u64 << 32) | STALL_MS, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(STALL_MS + 800));
    }
    events(c, "replica stepped down") - before
}

#[test]
fn a_leader_whose_thread_is_busy_past_the_election_timeout_keeps_its_leadership() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = start();
    let moved = step_downs_over_stalls(&c);
    assert_eq!(moved, 0, "leaderships moved while node 0 was only busy ({STALL_MS} ms stalls)");
}

/// The check above is seen to fail: without fortification the same stalls move leaderships.
#[test]
fn without_fortification_a_busy_leader_loses_its_leadership() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    BREAK_RULE.store(BREAK_NO_FORTIFY, Ordering::Relaxed);
    let c = start();
    let moved = step_downs_over_stalls(&c);
    BREAK_RULE.store(0, Ordering::Relaxed);
    assert!(moved > 0, "no leadership moved over three {STALL_MS} ms stalls without fortification");
}
