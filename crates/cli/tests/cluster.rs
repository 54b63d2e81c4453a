//! Real processes: `kill -9` durability and a 3-process TCP cluster running the YCSB bench.

use litmus_client::Client;
use litmus_core::{Formula, Value};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::{connect, free_port, start, wait_bounded, write_engine_config, Server, LITMUS};

fn write_config(dir: &Path, node: usize, peers: &[String], partitions: u32, fsync: &str) -> std::path::PathBuf {
    write_engine_config(dir, node, peers, partitions, fsync, "nocc")
}

/// `kill -9` during a write-heavy run, restart: nothing acknowledged is lost.
/// Writers `kv_put` on `engine` (one server, 4 partitions, fsync always) until 300 writes are
/// acknowledged; the server is killed with `kill -9` (every writer's call then ends, in error);
/// restarted, it must return every acknowledged write. Returns the restarted server, a client
/// and the acknowledged keys.
fn acknowledged_writes_survive_kill_dash_nine(engine: &str) -> (tempfile::TempDir, Server, Client, Vec<i64>) {
    let dir = tempfile::tempdir().unwrap();
    let peers = vec![format!("127.0.0.1:{}", free_port())];
    let config = write_engine_config(dir.path(), 0, &peers, 4, "always", engine);
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
                    match c.call("kv_put", vec![Value::Int(k), Value::Bytes(k.to_le_bytes().to_vec().into())]) {
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
    assert!(acked.len() >= 300, "{engine}: only {} writes acknowledged before the kill", acked.len());

    let server = start(&config);
    let mut c = connect(&peers[0]);
    for k in &acked {
        let got = c.call("kv_get", vec![Value::Int(*k)]).unwrap();
        let want = vec![Value::Bytes(k.to_le_bytes().to_vec().into())];
        assert_eq!(got, want, "{engine}: acknowledged key {k} lost after kill -9");
    }
    (dir, server, c, acked)
}

#[test]
fn kill_dash_nine_loses_no_acknowledged_write() {
    let (_dir, _server, mut c, acked) = acknowledged_writes_survive_kill_dash_nine("nocc");
    // The client's read of many keys, over TCP: `nocc` refuses `Op::ReadMany` by name, and the
    // client reads the keys one by one instead, in their order.
    let mut txn = c.begin().unwrap();
    let keys: Vec<Vec<Value>> = acked.iter().take(20).chain([&-1]).map(|k| vec![Value::Int(*k)]).collect();
    let rows = txn.read_many("kv", &keys).unwrap();
    let values: Vec<Option<Value>> = rows.iter().map(|r| r.as_ref().map(|r| r[1].clone())).collect();
    let expected: Vec<Option<Value>> =
        acked.iter().take(20).map(|k| Some(Value::Bytes(k.to_le_bytes().to_vec().into()))).chain([None]).collect();
    assert_eq!(values, expected);
    txn.commit().unwrap();
}

/// BASIC (TFP) on a real process: every write acknowledged before a `kill -9` is read back after
/// the restart (its decisions and forced formulas are logged before the acknowledgement, and a
/// read never answers below a placed write, rule R).
#[test]
fn kill_dash_nine_under_basic_loses_no_acknowledged_write() {
    acknowledged_writes_survive_kill_dash_nine("basic");
}

/// Under `acid` a partition logs an update as the columns it changed (`Record::CommitColumns`),
/// each against the row the log built before it. After a `kill -9` the restarted server replays
/// those records, and every key holds its last acknowledged value (or the one in flight at the
/// kill, whose outcome is unknown).
#[test]
fn kill_dash_nine_under_acid_replays_column_images_to_every_acknowledged_update() {
    const KEYS: usize = 16;
    const WRITERS: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let peers = vec![format!("127.0.0.1:{}", free_port())];
    let config = write_engine_config(dir.path(), 0, &peers, 4, "always", "acid");
    let mut server = start(&config);
    let mut c = connect(&peers[0]);
    let mut txn = c.begin().unwrap();
    for k in 0..KEYS as i64 {
        txn.insert("kv", vec![Value::Int(k), counter(0)]).unwrap();
    }
    txn.commit().unwrap();
    // Per key: updates acknowledged, and updates whose outcome the kill left unknown; the n-th
    // update of a key sets its value to n.
    let counts = Arc::new(Mutex::new(vec![(0i64, 0i64); KEYS]));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (addr, counts) = (peers[0].clone(), counts.clone());
            std::thread::spawn(move || {
                let mut c = connect(&addr);
                // Writer w owns keys w, w + 4, ...: two of them per transaction, on two partitions.
                let mine: Vec<i64> = (w..KEYS).step_by(WRITERS).map(|k| k as i64).collect();
                for round in 0.. {
                    let pair = [mine[round % mine.len()], mine[(round + 1) % mine.len()]];
                    let next = |k: i64| counts.lock().unwrap()[k as usize].0 + 1;
                    let values = pair.map(next);
                    let result = c.begin().and_then(|mut txn| {
                        for (k, n) in pair.into_iter().zip(values) {
                            txn.update("kv", &[Value::Int(k)], &[("v", Formula::Assign(counter(n)))])?;
                        }
                        txn.commit()
                    });
                    let mut counts = counts.lock().unwrap();
                    for k in pair {
                        match &result {
                            Ok(_) => counts[k as usize].0 += 1,
                            Err(_) => counts[k as usize].1 += 1,
                        }
                    }
                    if result.is_err() {
                        return; // the server died under us (or refused: counted as unknown)
                    }
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while counts.lock().unwrap().iter().map(|c| c.0).sum::<i64>() < 400 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    server.0.kill().unwrap(); // SIGKILL
    server.0.wait().unwrap();
    for w in writers {
        w.join().unwrap();
    }
    let counts = counts.lock().unwrap().clone();
    assert!(counts.iter().map(|c| c.0).sum::<i64>() >= 400, "too few increments acknowledged: {counts:?}");

    let _server = start(&config);
    let mut c = connect(&peers[0]);
    let mut txn = c.begin().unwrap();
    let keys: Vec<Vec<Value>> = (0..KEYS as i64).map(|k| vec![Value::Int(k)]).collect();
    let rows = txn.read_many("kv", &keys).unwrap();
    txn.commit().unwrap();
    for (k, (row, (acked, unknown))) in rows.iter().zip(&counts).enumerate() {
        let value = row.as_ref().map(|r| r[1].clone()).expect("every key survives");
        assert!(
            (*acked..=acked + unknown).any(|n| counter(n) == value),
            "key {k}: {value:?} after kill -9, {acked} updates acknowledged, {unknown} unknown"
        );
    }
}

fn counter(n: i64) -> Value {
    Value::Bytes(n.to_le_bytes().to_vec().into())
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
        .args(["bench", "ycsb", "--engine", "nocc", "--duration", "2", "--warmup", "0.5", "--records", "2000"])
        .args(["--quiet", "--connect"])
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

/// Omid failover (OM-8): `kill -9` of the node running the status oracle (alone there: its
/// failover is the node's restart) during `bench ycsb-t`, restarted 2 s later. The bench ends
/// within its window plus a bounded grace with `verify: ok` (snapshot isolation, no lost
/// update), every write a probe client was told committed is still there, and the failover
/// time — from the kill to the first commit acknowledged by the recovered oracle — is measured
/// and bounded.
#[test]
fn oracle_node_killed_during_ycsb_t() {
    let dir = tempfile::tempdir().unwrap();
    let peers: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let configs: Vec<_> = (0..3).map(|n| write_engine_config(dir.path(), n, &peers, 6, "always", "omid")).collect();
    let mut servers: Vec<Server> = configs.iter().map(|c| start(c)).collect();
    for p in &peers {
        drop(connect(p));
    }
    let (duration, warmup) = (8.0, 0.5);
    let json = dir.path().join("out.json");
    let bench_started = Instant::now();
    let bench = Command::new(LITMUS)
        .args(["bench", "ycsb-t", "--engine", "omid", "--clients", "8", "--records", "2000", "--quiet"])
        .args(["--duration", &duration.to_string(), "--warmup", &warmup.to_string(), "--connect"])
        .arg(format!("{},{}", peers[1], peers[2]))
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn litmus bench");

    // A probe commits small writes through node 1's coordinator all along: acknowledged keys
    // must survive, and the first acknowledgement after the kill times the failover.
    // (key, call started, acknowledged)
    let acked = Arc::new(Mutex::new(Vec::<(i64, Instant, Instant)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let probe = {
        let (addr, acked, stop) = (peers[1].clone(), acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut c = connect(&addr);
            let mut k = 7_000_000_000i64;
            while !stop.load(Ordering::Relaxed) {
                // Integer keys live on partition k mod 6, on node (k mod 6) mod 3: skip node 0's
                // partitions, which are down with it (partitions are not replicated), so the
                // probe measures the oracle's failover alone.
                k += if (k + 1) % 3 == 0 { 2 } else { 1 };
                let started = Instant::now();
                if c.call("kv_put", vec![Value::Int(k), Value::Bytes(k.to_le_bytes().to_vec().into())]).is_ok() {
                    acked.lock().unwrap().push((k, started, Instant::now()));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    // Kill node 0 (the oracle's) mid-window, commits in flight; restart it 2 s later.
    std::thread::sleep(Duration::from_secs(4));
    assert!(!acked.lock().unwrap().is_empty(), "the probe committed nothing before the kill");
    servers[0].0.kill().unwrap(); // SIGKILL
    servers[0].0.wait().unwrap();
    let killed_at = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    servers[0] = start(&configs[0]);

    // The bench must end within its window plus a bounded grace.
    let mut bench = bench;
    let status = wait_bounded(&mut bench, bench_started, duration + warmup, "bench ycsb-t");
    let bench_secs = bench_started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    probe.join().unwrap();
    let out = bench.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(status.success(), "bench failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("verify: ok"), "{stdout}");

    let acked = acked.lock().unwrap().clone();
    // The first commit both started and acknowledged after the kill went through the recovered
    // oracle.
    let first_after = acked.iter().find(|(_, started, _)| *started > killed_at).map(|(_, _, at)| *at - killed_at);
    let failover = first_after.expect("no commit acknowledged after the oracle's node was killed");
    eprintln!("oracle_node_killed_during_ycsb_t: failover (kill -> first commit through the recovered oracle) {failover:?}; bench ran {bench_secs:.1} s; {} probe commits", acked.len());
    assert!(failover < Duration::from_secs(5), "failover took {failover:?}");
    let mut c = connect(&peers[1]);
    for (k, _, _) in &acked {
        let got = c.call("kv_get", vec![Value::Int(*k)]).unwrap();
        assert_eq!(got, vec![Value::Bytes(k.to_le_bytes().to_vec().into())], "acknowledged key {k} lost");
    }
}

/// `kill -9` of one node of a 3-process `coordfree` cluster during `bench tpcc-neworder`,
/// restarted 2 s later: prepared RAMP writes of the killed node's partitions are recovered from
/// its log and finished (CF-7: coordinators re-send, partitions inquire), held second rounds
/// (CF-4d) are re-sent, and the bench ends within a bounded grace with TPC-C's consistency
/// conditions holding — sequential, gap-free order ids per district (3.3.2.2-3) included.
#[test]
fn coordfree_node_killed_during_tpcc_neworder() {
    let dir = tempfile::tempdir().unwrap();
    let peers: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let configs: Vec<_> =
        (0..3).map(|n| write_engine_config(dir.path(), n, &peers, 6, "always", "coordfree")).collect();
    let mut servers: Vec<Server> = configs.iter().map(|c| start(c)).collect();
    for p in &peers {
        drop(connect(p));
    }
    let (duration, warmup) = (8.0, 0.5);
    let bench_started = Instant::now();
    let bench = Command::new(LITMUS)
        .args(["bench", "tpcc-neworder", "--engine", "coordfree", "--clients", "8", "--quiet"])
        .args(["--warehouses", "6", "--partitions", "6", "--scale-div", "20"])
        .args(["--duration", &duration.to_string(), "--warmup", &warmup.to_string(), "--connect"])
        .arg(format!("{},{}", peers[1], peers[2]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn litmus bench");
    // Kill once the load is done and the window is open (the load of 6 small warehouses takes
    // about 1.2 s here), so New-Orders of every partition are in flight; the window goes on
    // for about 4 s after the restart.
    std::thread::sleep(Duration::from_secs(4));
    servers[0].0.kill().unwrap(); // SIGKILL
    servers[0].0.wait().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    servers[0] = start(&configs[0]);
    let mut bench = bench;
    let status = wait_bounded(&mut bench, bench_started, duration + warmup, "bench tpcc-neworder");
    let out = bench.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "coordfree_node_killed_during_tpcc_neworder: bench ran {:.1} s\n{stdout}",
        bench_started.elapsed().as_secs_f64()
    );
    assert!(status.success(), "bench failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("verify: ok"), "{stdout}");
}

/// `kill -9` of one node of a 3-process `coordfree` cluster during `bench tpcc-neworder`, left
/// down until the bench has ended: every call the bench makes ends within a bound (New-Orders
/// that reach the dead node's partitions fail instead of waiting for it), and when the node
/// comes back long after, its partitions recover from their logs, the writes prepared on the
/// live partitions are finished or dropped (CF-7), and every district meets TPC-C's conditions
/// (3.3.2.1-10, 12): order ids sequential and gap-free, every order with its lines.
#[test]
fn coordfree_node_left_down_during_tpcc_neworder() {
    let dir = tempfile::tempdir().unwrap();
    let peers: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let configs: Vec<_> =
        (0..3).map(|n| write_engine_config(dir.path(), n, &peers, 6, "always", "coordfree")).collect();
    let mut servers: Vec<Server> = configs.iter().map(|c| start(c)).collect();
    for p in &peers {
        drop(connect(p));
    }
    let (duration, warmup) = (6.0, 0.5);
    let bench_started = Instant::now();
    let bench = Command::new(LITMUS)
        .args(["bench", "tpcc-neworder", "--engine", "coordfree", "--clients", "8", "--quiet"])
        .args(["--warehouses", "6", "--partitions", "6", "--scale-div", "20"])
        .args(["--duration", &duration.to_string(), "--warmup", &warmup.to_string(), "--connect"])
        .arg(format!("{},{}", peers[1], peers[2]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn litmus bench");
    std::thread::sleep(Duration::from_secs(4));
    servers[0].0.kill().unwrap(); // SIGKILL, and not restarted while the bench runs
    servers[0].0.wait().unwrap();
    let mut bench = bench;
    // Every New-Order call ends (a client gives up on an answer after 5 s: "outcome unknown");
    // the bench's own check cannot read the dead node's partitions and retries for its 60 s
    // before it fails, typed. The whole run ends within that and a bounded grace.
    let verify_retries = 60.0;
    let status =
        wait_bounded(&mut bench, bench_started, duration + warmup + verify_retries, "bench tpcc-neworder, a node down");
    let out = bench.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!(
        "coordfree_node_left_down_during_tpcc_neworder: bench ended after {:.1} s\n{stdout}\n{stderr}",
        bench_started.elapsed().as_secs_f64()
    );
    assert!(stdout.contains("unfinished: 0"), "a New-Order call never ended: {stdout}");
    assert!(!status.success() && stderr.contains("unavailable"), "the dead node's data was checked? {stderr}");
    servers[0] = start(&configs[0]);
    let mut c = connect(&peers[1]);
    let deadline = Instant::now() + Duration::from_secs(60);
    for w in 1..=6i64 {
        for d in 1..=10i64 {
            let result = loop {
                match c.call("tpcc_check_district", vec![Value::Int(w), Value::Int(d), Value::Null]) {
                    Ok(r) => break r,
                    // The node's partitions are recovering, or a district's writer is being
                    // finished: retried until the deadline.
                    Err(e) if Instant::now() < deadline => {
                        eprintln!("check of warehouse {w} district {d}: {e}; retrying");
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    Err(e) => panic!("warehouse {w} district {d} not checkable a minute after the restart: {e}"),
                }
            };
            assert_eq!(result[1], Value::Int(0), "warehouse {w} district {d} violates TPC-C's conditions: {result:?}");
        }
    }
}

/// Bytes of each row's value in the paging tests: a table of [`PAGED_ROWS`] such rows is ~6 MiB.
const PAGED_VALUE_BYTES: usize = 4000;
const PAGED_ROWS: i64 = 1500;

/// The value of row `k` of the paging tests (deterministic, different per row).
fn paged_value(k: i64) -> Value {
    Value::Bytes((0..PAGED_VALUE_BYTES).map(|i| (k as usize * 31 + i * 7) as u8).collect::<Vec<u8>>().into())
}

/// FNV-1a over the lines, in order: the dump's checksum.
fn checksum<'a>(lines: impl IntoIterator<Item = &'a str>) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for line in lines {
        for b in line.bytes().chain([b'\n']) {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

/// The `litmus dump --format jsonl` line of row `k` (as the dump renders a bytes value).
fn paged_line(k: i64) -> String {
    let mut obj = serde_json::Map::new();
    obj.insert("k".into(), k.into());
    obj.insert("v".into(), paged_value(k).to_string().into());
    serde_json::Value::Object(obj).to_string()
}

/// A table of several MiB (beyond the frame limit many times over) written through a 3-node
/// TCP cluster of `engine` and dumped: every row comes back once, in key order, the count and
/// checksum equal to what was written. The servers' frame limit is set to 256 KiB, so the
/// dump's default 256 KiB pages come back over it, refused as typed `Oversized` replies, and
/// are asked again at half the size; a second dump with tiny pages and `--limit` pages
/// through the first rows.
fn dump_of_several_mib_through_a_three_node_cluster(engine: &str) {
    let dir = tempfile::tempdir().unwrap();
    let peers: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let servers: Vec<Server> = (0..3)
        .map(|n| {
            let config = write_engine_config(dir.path(), n, &peers, 6, "never", engine);
            let mut text = std::fs::read_to_string(&config).unwrap();
            text.push_str("max_frame_bytes = 262144\n");
            std::fs::write(&config, text).unwrap();
            start(&config)
        })
        .collect();
    for p in &peers {
        drop(connect(p));
    }
    let writers: Vec<_> = (0..4i64)
        .map(|w| {
            let addr = peers[w as usize % 3].clone();
            std::thread::spawn(move || {
                let mut c = connect(&addr);
                for k in (w..PAGED_ROWS).step_by(4) {
                    let mut attempts = 0;
                    // A one-round write: every engine runs it (op by op where it is not taken whole).
                    // (Idempotent: retried also when its outcome is unknown, e.g. while the peer
                    // links come up.)
                    while let Err(e) = c.call("kv_put_1r", vec![Value::Int(k), paged_value(k)]) {
                        attempts += 1;
                        assert!(attempts < 50 && !matches!(e, litmus_core::Error::Invalid(_)), "writing row {k}: {e}");
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let dump = |extra: &[&str]| {
        let mut args = vec!["dump", "--connect", &peers[0], "--table", "kv", "--format", "jsonl"];
        args.extend_from_slice(extra);
        let out = common::run(&args, "");
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(
            out.status.success(),
            "{engine}: litmus dump {extra:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let started = Instant::now();
    let all = dump(&[]);
    let lines: Vec<&str> = all.lines().collect();
    let want: Vec<String> = (0..PAGED_ROWS).map(paged_line).collect();
    eprintln!("{engine}: dumped {} rows, {} bytes, in {:?}", lines.len(), all.len(), started.elapsed());
    assert!(all.len() > 4 * 262_144, "{engine}: the table is several frames large");
    assert_eq!(lines.len() as i64, PAGED_ROWS, "{engine}: row count");
    assert_eq!(checksum(lines.iter().copied()), checksum(want.iter().map(String::as_str)), "{engine}: checksum");
    assert!(lines.iter().zip(&want).all(|(a, b)| a == b), "{engine}: rows differ");
    let some = dump(&["--page-rows", "7", "--page-bytes", "20000", "--limit", "100"]);
    let some: Vec<&str> = some.lines().collect();
    assert_eq!(some, want[..100].iter().map(String::as_str).collect::<Vec<_>>(), "{engine}: --limit 100 in tiny pages");
    drop(servers);
}

#[test]
fn dump_of_several_mib_on_every_engine_pages_through_a_three_node_cluster() {
    for engine in litmus_engines::ALL {
        dump_of_several_mib_through_a_three_node_cluster(engine.name());
    }
}

/// A reply over the server's frame limit is a typed `Oversized` error, the connection (and
/// the transaction) stay usable, and the same reads asked through the paging client succeed.
#[test]
fn a_reply_over_the_frame_limit_is_a_typed_error_and_the_connection_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let peers = vec![format!("127.0.0.1:{}", free_port())];
    let config = write_engine_config(dir.path(), 0, &peers, 4, "never", "acid");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("max_frame_bytes = 65536\n");
    std::fs::write(&config, text).unwrap();
    let _server = start(&config);
    let mut c = connect(&peers[0]);
    let big = |k: i64| Value::Bytes(vec![k as u8; 8000].into());
    for k in 0..20 {
        c.call("kv_put", vec![Value::Int(k), big(k)]).unwrap();
    }
    let mut txn = c.begin().unwrap();
    let whole = litmus_client::Paging { rows_max: 20, bytes_max: 4 << 20 };
    let e = txn.scan_page_once("kv", &[], None, None, whole).unwrap_err();
    assert!(litmus_client::is_reply_oversized(&e), "{e}");
    // The same connection and transaction go on.
    let row = txn.read("kv", &[Value::Int(3)]).unwrap().unwrap();
    assert_eq!(row[1], big(3));
    let rows = txn.scan("kv", &[], None, 1000).unwrap();
    assert_eq!(rows.len(), 20, "the paging scan reads all rows in pages under the limit");
    let page = txn.scan_page("kv", &[], None, None, whole).unwrap();
    assert!(!page.rows.is_empty() && page.rows.len() < 20 && page.resume.is_some(), "halved: {} rows", page.rows.len());
    let keys: Vec<Vec<Value>> = (0..20).map(|k| vec![Value::Int(k)]).collect();
    let many = txn.read_many("kv", &keys).unwrap();
    assert!(many.iter().enumerate().all(|(k, r)| r.as_ref().is_some_and(|r| r[1] == big(k as i64))));
    txn.commit().unwrap();
    assert_eq!(c.call("kv_get", vec![Value::Int(5)]).unwrap(), vec![big(5)]);
}
