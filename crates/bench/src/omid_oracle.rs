//! # `omid-oracle`: the status oracle alone, over the TCP runtime (Omid §V, Figs. 9, 10, 12)
//!
//! Omid's micro-benchmarks measure the status oracle in isolation from the data store: clients
//! send nothing but timestamp requests and commit requests. This benchmark does the same against
//! the real [`OracleMachine`] running inside a `litmus server` node (`omid` engine, one node, one
//! partition) started in this process on a loopback port — so every request crosses a socket,
//! the node loop, the WAL (group commit, `--fsync`) and back.
//!
//! ```text
//!   client thread ×--clients ──TCP──► node 0: Addr::Oracle (StatusOracle + WAL)
//!     keeps --outstanding transactions in flight, each: Begin ─► Began{Ts, ΔSO} ─► Commit(Ts, W)
//! ```
//!
//! * `W` is `--write-set` random row ids (no two commits conflict in practice: 64-bit ids).
//! * **Replication** (Fig. 9): with `replication-on` each client connects with `Connect` and
//!   keeps a [`ClientReplica`], applying the ΔSO piggybacked on every `Began`; with
//!   `replication-off` it connects with `ConnectUnreplicated`: the oracle piggybacks nothing (the
//!   paper's plain SO; such a client would ask `InSnapshot` for every version it reads).
//!   `--compare replication-off,replication-on` runs both, each on a fresh server, and ends with
//!   `ratio replication-on/replication-off = X` (commit throughput).
//! * Reported: commits per second over the measured window, aborts, commit latency percentiles
//!   (commit request to reply), begin-to-commit latency, mean ΔSO entries per `Began` (Fig. 8's
//!   piggyback size), and the **recovery time** (Fig. 12): after the run the oracle's log
//!   directory is copied and a fresh oracle is recovered from it (checkpoint + tail replay +
//!   crash range), timed; and the failover time of a hot standby ([`Standby`]) that had tailed
//!   the same log (its promotion only).
//!
//! ```text
//!   litmus bench omid-oracle --write-set 8 --duration 10
//!   litmus bench omid-oracle --compare replication-off,replication-on --duration 10
//! ```

use crate::{BenchArgs, CompareList};
use anyhow::Context as _;
use hdrhistogram::Histogram;
use litmus_core::{Catalog, Timestamp};
use litmus_engine::engines::omid::messages::{Batch, Checkpoint, Reply, Request};
use litmus_engine::engines::omid::node::{self, OracleMachine, OracleReply, OracleRequest};
use litmus_engine::engines::omid::oracle::Standby;
use litmus_engine::engines::omid::replica::ClientReplica;
use litmus_engine::engines::omid::RowId;
use litmus_engine::wire::{self, Frame, PROTOCOL_VERSION};
use litmus_engine::{builtin, Addr, Envelope, Machine, Message};
use litmus_runtime::host::Host;
use litmus_runtime::tcp::{serve, NodeConfig};
use litmus_storage::disk::DiskLog;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The benchmark's name on the command line.
pub const NAME: &str = "omid-oracle";
/// Largest `--write-set` (the oracle's own limit is higher; Fig. 10 goes to 512).
pub const WRITE_SET_ROWS_MAX: usize = 4096;
/// Largest `--outstanding`.
pub const OUTSTANDING_MAX: usize = 4096;
/// How long to wait for the in-process server to accept connections.
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(10);
const LATENCY_US_MAX: u64 = 60_000_000;

/// The `omid-oracle` flags.
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct OmidOracleOptions {
    /// omid-oracle: rows in each commit's write set.
    #[arg(long = "write-set", value_name = "ROWS", default_value_t = 8)]
    pub write_set: usize,
    /// omid-oracle: transactions each client keeps in flight.
    #[arg(long, default_value_t = 64)]
    pub outstanding: usize,
}

/// One run's results.
#[derive(Clone, Debug)]
pub struct OracleReport {
    pub replication: bool,
    pub commits_per_sec: f64,
    pub commits: u64,
    pub aborts: u64,
    pub commit_latency: Histogram<u64>,
    pub txn_latency: Histogram<u64>,
    pub delta_entries_per_begin: f64,
    pub recovery: Duration,
    /// Failover to a standby that had tailed the whole log: its promotion alone.
    pub standby_promote: Duration,
    pub log_bytes: u64,
}

struct ClientResult {
    commits: u64,
    aborts: u64,
    begins: u64,
    delta_entries: u64,
    commit_latency: Histogram<u64>,
    txn_latency: Histogram<u64>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("constant bounds")
}

/// `litmus bench omid-oracle`.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let o = &args.omid_oracle;
    anyhow::ensure!((1..=WRITE_SET_ROWS_MAX).contains(&o.write_set), "--write-set must be in 1..={WRITE_SET_ROWS_MAX}");
    anyhow::ensure!((1..=OUTSTANDING_MAX).contains(&o.outstanding), "--outstanding must be in 1..={OUTSTANDING_MAX}");
    anyhow::ensure!(args.clients >= 1, "--clients must be at least 1");
    anyhow::ensure!(
        args.connect.is_none() && args.sweep.is_none(),
        "{NAME} runs its own server; no --connect or --sweep"
    );
    let modes = match &args.compare {
        None => vec![true],
        Some(CompareList::Replication(modes)) => modes.clone(),
        Some(CompareList::Engines(_)) => {
            anyhow::bail!("{NAME} compares replication-off,replication-on, not engines")
        }
    };
    let root = match &args.data_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("litmus-omid-oracle-{}", std::process::id())),
    };
    let mut reports = Vec::new();
    for (i, &replication) in modes.iter().enumerate() {
        let dir = root.join(format!("run{}-replication-{}", i + 1, on_off(replication)));
        let report = run_one(args, replication, &dir).with_context(|| format!("{NAME} run {}", i + 1))?;
        if i > 0 {
            writeln!(out)?;
        }
        print_report(out, args, &report)?;
        reports.push(report);
    }
    if args.data_dir.is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }
    if let [first, second, rest @ ..] = &reports[..] {
        writeln!(out)?;
        for later in rest.iter().chain([second]) {
            let ratio = later.commits_per_sec / first.commits_per_sec.max(f64::MIN_POSITIVE);
            writeln!(
                out,
                "ratio replication-{}/replication-{} = {ratio:.3}",
                on_off(later.replication),
                on_off(first.replication)
            )?;
        }
    }
    out.flush()?;
    Ok(())
}

fn on_off(replication: bool) -> &'static str {
    if replication {
        "on"
    } else {
        "off"
    }
}

fn free_loopback_port() -> anyhow::Result<String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("find a free port")?;
    Ok(l.local_addr()?.to_string())
}

fn run_one(args: &BenchArgs, replication: bool, dir: &Path) -> anyhow::Result<OracleReport> {
    anyhow::ensure!(!dir.exists() || dir.read_dir()?.next().is_none(), "{} is not empty", dir.display());
    let listen = free_loopback_port()?;
    let cfg = NodeConfig {
        node: 0,
        listen: listen.clone(),
        data_dir: dir.to_path_buf(),
        engine: "omid".into(),
        partitions: 1,
        fsync: args.fsync,
        peers: vec![listen.clone()],
        seed: args.seed,
    };
    let catalog: Arc<Catalog> = Arc::new(builtin::catalog());
    let registry = Arc::new(builtin::registry());
    // The server runs until the process exits (litmus server has no shutdown).
    std::thread::Builder::new()
        .name("omid-oracle-server".into())
        .spawn(move || {
            if let Err(e) = serve(cfg, catalog, registry) {
                eprintln!("{NAME}: server failed: {e}");
            }
        })
        .context("spawn the server")?;
    let started = Instant::now();
    while TcpStream::connect(&listen).is_err() {
        anyhow::ensure!(started.elapsed() < SERVER_START_TIMEOUT, "server on {listen} did not start");
        std::thread::sleep(Duration::from_millis(20));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for c in 0..args.clients {
        let (listen, stop, measuring) = (listen.clone(), stop.clone(), measuring.clone());
        let (write_set, outstanding, seed) = (args.omid_oracle.write_set, args.omid_oracle.outstanding, args.seed);
        handles.push(std::thread::spawn(move || {
            client_loop(&listen, replication, write_set, outstanding, seed ^ (c as u64) << 20, &stop, &measuring)
        }));
    }
    std::thread::sleep(Duration::from_secs_f64(args.warmup));
    measuring.store(true, Ordering::SeqCst);
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(args.duration));
    stop.store(true, Ordering::SeqCst);
    let measured_secs = window.elapsed().as_secs_f64();
    let (mut commits, mut aborts, mut begins, mut entries) = (0, 0, 0, 0);
    let (mut commit_latency, mut txn_latency) = (histogram(), histogram());
    for h in handles {
        let r = h.join().map_err(|_| anyhow::anyhow!("client thread panicked"))??;
        commits += r.commits;
        aborts += r.aborts;
        begins += r.begins;
        entries += r.delta_entries;
        commit_latency.add(&r.commit_latency).expect("same bounds");
        txn_latency.add(&r.txn_latency).expect("same bounds");
    }
    let (recovery, standby_promote, log_bytes) = measure_recovery(dir, args)?;
    Ok(OracleReport {
        replication,
        commits_per_sec: commits as f64 / measured_secs,
        commits,
        aborts,
        commit_latency,
        txn_latency,
        delta_entries_per_begin: entries as f64 / begins.max(1) as f64,
        recovery,
        standby_promote,
        log_bytes,
    })
}

/// Fig. 12: copies the oracle's log directory (the server keeps running) and times a fresh
/// oracle's recovery from it: open the log, load the checkpoint, replay the tail, log the crash
/// range. Then the hot-standby variant: a [`Standby`] fed the same checkpoint and records
/// (untimed: it does so while the primary runs) and promoted (timed).
fn measure_recovery(dir: &Path, args: &BenchArgs) -> anyhow::Result<(Duration, Duration, u64)> {
    let src = litmus_runtime::host::machine_dir(dir, Addr::Oracle);
    let copy_root = dir.join("recovery-copy");
    let dst = litmus_runtime::host::machine_dir(&copy_root, Addr::Oracle);
    std::fs::create_dir_all(&dst)?;
    let mut bytes = 0;
    for entry in std::fs::read_dir(&src).with_context(|| format!("read {}", src.display()))? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            bytes += std::fs::copy(entry.path(), dst.join(entry.file_name()))?;
        }
    }
    let machines: Vec<Box<dyn Machine>> = vec![Box::new(OracleMachine::new(node::runtime_config(), 1))];
    let start = Instant::now();
    let host = Host::open(machines, Some(&copy_root), args.fsync).context("recover the oracle")?;
    let elapsed = start.elapsed();
    drop(host);
    let (_log, snapshot, records) = DiskLog::open(&dst, args.fsync).context("reopen the log copy")?;
    let checkpoint = snapshot.as_deref().map(Checkpoint::decode).transpose()?;
    let mut standby = Standby::new(node::runtime_config(), checkpoint.as_ref());
    for (_, record) in &records {
        standby.tail(&Batch::decode(record)?);
    }
    let start = Instant::now();
    let (promoted, _) = standby.promote();
    let promote = start.elapsed();
    drop(promoted);
    let _ = std::fs::remove_dir_all(&copy_root);
    Ok((elapsed, promote, bytes))
}

struct InFlight {
    began_at: Instant,
    commit_sent_at: Option<Instant>,
}

fn client_loop(
    listen: &str,
    replication: bool,
    write_set: usize,
    outstanding: usize,
    seed: u64,
    stop: &AtomicBool,
    measuring: &AtomicBool,
) -> anyhow::Result<ClientResult> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut stream = TcpStream::connect(listen).context("connect")?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut buf = Vec::new();
    wire::write_frame(&mut buf, &Frame::HelloClient { version: PROTOCOL_VERSION });
    stream.write_all(&buf)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let me = match wire::read_frame(&mut reader)? {
        Frame::Welcome { client, engine, .. } => {
            anyhow::ensure!(engine == "omid", "server runs {engine}, not omid");
            client
        }
        other => anyhow::bail!("unexpected handshake {other:?}"),
    };
    let mut next_tag = 0u64;
    let mut send = |stream: &mut TcpStream, body: Request| -> anyhow::Result<u64> {
        next_tag += 1;
        let msg = Message::OracleRequest(OracleRequest { tag: next_tag, body });
        buf.clear();
        wire::write_frame(&mut buf, &Frame::Envelope(Envelope { from: Addr::Client(me), to: Addr::Oracle, msg }));
        stream.write_all(&buf)?;
        Ok(next_tag)
    };
    let connect = if replication { Request::Connect } else { Request::ConnectUnreplicated };
    send(&mut stream, connect)?;
    let mut replica: Option<ClientReplica> = None;
    let mut result = ClientResult {
        commits: 0,
        aborts: 0,
        begins: 0,
        delta_entries: 0,
        commit_latency: histogram(),
        txn_latency: histogram(),
    };
    let mut in_flight: HashMap<u64, InFlight> = HashMap::new();
    let mut by_ts: HashMap<Timestamp, InFlight> = HashMap::new();
    let mut connected = false;
    loop {
        let frame = wire::read_frame(&mut reader).context("read a reply")?;
        let Frame::Envelope(Envelope { msg: Message::OracleReply(OracleReply { tag, body }), .. }) = frame else {
            anyhow::bail!("unexpected frame {frame:?}");
        };
        let measured = measuring.load(Ordering::Relaxed);
        match body {
            Reply::Connected(c) => {
                replica = replication.then(|| ClientReplica::new(&c));
                connected = true;
            }
            Reply::Began { start_ts, delta } => {
                let t = tag.and_then(|t| in_flight.remove(&t)).context("Began for an unknown tag")?;
                if let Some(r) = replica.as_mut() {
                    r.apply(&delta).map_err(|e| anyhow::anyhow!("replica gap over TCP: {e}"))?;
                }
                if measured {
                    result.begins += 1;
                    result.delta_entries += delta.entries.len() as u64;
                }
                let rows: Vec<RowId> = (0..write_set).map(|_| RowId(rng.gen())).collect();
                send(&mut stream, Request::Commit { start_ts, write_set: rows })?;
                by_ts.insert(start_ts, InFlight { commit_sent_at: Some(Instant::now()), ..t });
            }
            Reply::Committed { start_ts, .. } | Reply::Aborted { start_ts, .. } => {
                let committed = matches!(body, Reply::Committed { .. });
                let t = by_ts.remove(&start_ts).context("commit reply for an unknown transaction")?;
                if measured {
                    let now = Instant::now();
                    let us = |d: Duration| (d.as_micros() as u64).clamp(1, LATENCY_US_MAX);
                    if committed {
                        result.commits += 1;
                        result.txn_latency.record(us(now - t.began_at)).expect("clamped");
                        let sent = t.commit_sent_at.expect("commit sent");
                        result.commit_latency.record(us(now - sent)).expect("clamped");
                    } else {
                        result.aborts += 1;
                    }
                }
            }
            Reply::Push { delta } => {
                if let Some(r) = replica.as_mut() {
                    r.apply(&delta).map_err(|e| anyhow::anyhow!("replica gap over TCP: {e}"))?;
                }
                send(&mut stream, Request::Ack)?;
            }
            Reply::Refused(e) => anyhow::bail!("oracle refused: {e}"),
            Reply::Done { .. } | Reply::InSnapshot { .. } => {}
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(result);
        }
        while connected && in_flight.len() + by_ts.len() < outstanding {
            let tag = send(&mut stream, Request::Begin)?;
            in_flight.insert(tag, InFlight { began_at: Instant::now(), commit_sent_at: None });
        }
    }
}

fn print_report(out: &mut dyn Write, args: &BenchArgs, r: &OracleReport) -> std::io::Result<()> {
    let o = &args.omid_oracle;
    writeln!(
        out,
        "{NAME}: write-set={} clients={} outstanding={} (x{} = {} in flight) replication={} fsync={} transport=tcp-loopback",
        o.write_set,
        args.clients,
        o.outstanding,
        args.clients,
        args.clients * o.outstanding,
        on_off(r.replication),
        args.fsync
    )?;
    writeln!(
        out,
        "commits/s: {:.0}  ({} commits, {} aborts in the measured window)",
        r.commits_per_sec, r.commits, r.aborts
    )?;
    let p = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q);
    for (name, h) in [("commit latency", &r.commit_latency), ("begin..commit latency", &r.txn_latency)] {
        writeln!(
            out,
            "{name} us: p50 {} p90 {} p99 {} p99.9 {} max {}",
            p(h, 0.5),
            p(h, 0.9),
            p(h, 0.99),
            p(h, 0.999),
            h.max()
        )?;
    }
    writeln!(out, "piggyback: {:.2} metadata entries per timestamp reply", r.delta_entries_per_begin)?;
    writeln!(out, "recovery: {:.1} ms from a {} byte log directory", r.recovery.as_secs_f64() * 1e3, r.log_bytes)?;
    writeln!(out, "failover to a standby that tailed the log: {:.3} ms", r.standby_promote.as_secs_f64() * 1e3)
}
