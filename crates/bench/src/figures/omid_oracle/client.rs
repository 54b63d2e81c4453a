//! The oracle benchmark's clients and server: one run ([`run_one`]) starts a status oracle
//! on loopback TCP, drives it from client threads that keep their write
//! sets' transactions in flight ([`pipelined`]) or think between them ([`paced`]), and
//! measures recovery from the oracle's log afterwards ([`measure_recovery`]).

use super::*;
use std::thread::JoinHandle;

fn free_loopback_port() -> anyhow::Result<String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("find a free port")?;
    Ok(l.local_addr()?.to_string())
}

/// Starts the oracle's server on a free loopback port with its log in `dir`, and waits until it
/// accepts connections; its address, the flag that stops it, and its thread.
fn start_server(spec: &RunSpec, dir: &Path) -> anyhow::Result<(String, Arc<AtomicBool>, JoinHandle<()>)> {
    let listen = free_loopback_port()?;
    let cfg = NodeConfig {
        fsync: spec.fsync,
        seed: spec.seed,
        ..NodeConfig::new(0, listen.clone(), dir.to_path_buf(), "omid", 1, vec![listen.clone()])
    };
    let catalog: Arc<Catalog> = Arc::new(builtin::catalog());
    let registry = Arc::new(builtin::registry());
    // The server runs until this run ends (`server_stop`), so it does not tick through later
    // sweep points.
    let server_stop = Arc::new(AtomicBool::new(false));
    let server_stopping = server_stop.clone();
    let server = std::thread::Builder::new()
        .name(SERVER_THREAD.into())
        .spawn(move || {
            if let Err(e) = serve_until(cfg, catalog, registry, server_stopping) {
                eprintln!("{NAME}: server failed: {e}");
            }
        })
        .context("spawn the server")?;
    let started = Instant::now();
    while TcpStream::connect(&listen).is_err() {
        anyhow::ensure!(started.elapsed() < SERVER_START_TIMEOUT, "server on {listen} did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((listen, server_stop, server))
}

/// One thread per client of `spec`, each running [`client_loop`] against `listen` until `stop`.
fn spawn_clients(
    spec: &RunSpec,
    replication: bool,
    listen: &str,
    stop: &Arc<AtomicBool>,
    measuring: &Arc<AtomicBool>,
) -> anyhow::Result<Vec<JoinHandle<anyhow::Result<ClientResult>>>> {
    let mut handles = Vec::new();
    for c in 0..spec.clients {
        let (listen, stop, measuring) = (listen.to_string(), stop.clone(), measuring.clone());
        let client = ClientSpec {
            replication,
            slow: c < spec.slow_clients,
            seed: spec.seed ^ (c as u64) << 20,
            write_set: spec.write_set,
            outstanding: spec.outstanding,
            think: spec.think,
            think_dist: spec.think_dist,
            slow_factor: spec.slow_factor,
        };
        let handle = std::thread::Builder::new()
            .name(format!("omid-client-{c}"))
            .stack_size(CLIENT_STACK_BYTES)
            .spawn(move || client_loop(&listen, &client, &stop, &measuring))
            .context("spawn a client thread")?;
        handles.push(handle);
    }
    Ok(handles)
}

pub(super) fn run_one(spec: &RunSpec, replication: bool, dir: &Path) -> anyhow::Result<OracleReport> {
    if dir.exists() && dir.read_dir()?.next().is_some() {
        return Err(config_error(format!("{} is not empty", dir.display())));
    }
    let (listen, server_stop, server) = start_server(spec, dir)?;

    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let handles = spawn_clients(spec, replication, &listen, &stop, &measuring)?;
    std::thread::sleep(spec.warmup);
    measuring.store(true, Ordering::SeqCst);
    let window = Instant::now();
    let cpu_before = server_cpu();
    std::thread::sleep(spec.duration);
    // Close the window first: a reply that arrives after it is not counted.
    measuring.store(false, Ordering::SeqCst);
    let cpu_after = server_cpu();
    let measured_secs = window.elapsed().as_secs_f64();

    stop.store(true, Ordering::SeqCst);
    let (mut commits, mut aborts, mut pushes, mut normal_commits) = (0, 0, 0, 0);
    let (mut entries, mut bytes, mut slow_bytes) = (Moments::default(), Moments::default(), Moments::default());
    let (mut commit_latency, mut txn_latency, mut normal_commit_latency) = (histogram(), histogram(), histogram());
    let mut first_error = None;
    for h in handles {
        let r = match h.join().map_err(|_| anyhow::anyhow!("client thread panicked")).and_then(|r| r) {
            Ok(r) => r,
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        commits += r.commits;
        aborts += r.aborts;
        pushes += r.pushes;
        entries.merge(&r.entries);
        bytes.merge(&r.bytes);
        commit_latency.add(&r.commit_latency).expect("same bounds");
        txn_latency.add(&r.txn_latency).expect("same bounds");
        if r.slow {
            slow_bytes.merge(&r.bytes);
        } else {
            normal_commits += r.commits;
            normal_commit_latency.add(&r.commit_latency).expect("same bounds");
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    server_stop.store(true, Ordering::SeqCst);
    server.join().map_err(|_| anyhow::anyhow!("the oracle server thread panicked"))?;
    let (recovery, log_bytes) = measure_recovery(dir, spec)?;
    Ok(OracleReport {
        replication,
        commits_per_sec: commits as f64 / measured_secs,
        commits,
        aborts,
        commit_latency,
        txn_latency,
        normal_commits_per_sec: normal_commits as f64 / measured_secs,
        normal_commit_latency,
        delta_entries_per_begin: entries.mean(),
        piggyback_entries: entries,
        piggyback_bytes: bytes,
        slow_piggyback_bytes: slow_bytes,
        pushes,
        measured_secs,
        recovery,
        log_bytes,
        oracle_thread_cpu_us_per_commit: per_commit(cpu_before, cpu_after, |c| c.0, commits),
        server_cpu_us_per_commit: per_commit(cpu_before, cpu_after, |c| c.1, commits),
    })
}

/// The server's thread that runs the node (the oracle's machine): [`server_cpu`] finds it by
/// this name (a thread's name in `/proc` keeps its first 15 bytes).
const SERVER_THREAD: &str = "omid-oracle-server";

/// Microseconds of CPU per commit between two [`server_cpu`] readings, of the part `pick` takes.
fn per_commit(
    before: Option<(u64, u64)>,
    after: Option<(u64, u64)>,
    pick: fn((u64, u64)) -> u64,
    commits: u64,
) -> Option<f64> {
    let ticks = pick(after?).saturating_sub(pick(before?));
    (commits > 0).then(|| ticks as f64 * 10_000.0 / commits as f64)
}

/// CPU (user + system, in clock ticks of 10 ms, Linux's `USER_HZ`) of the server's threads in
/// this process, from `/proc/self/task`: its node thread (named by [`start_server`]), and it
/// plus every other thread that is not a client's (`omid-client-*`) or this one. `None` where
/// the files cannot be read.
fn server_cpu() -> Option<(u64, u64)> {
    let me = std::fs::read_to_string("/proc/thread-self/comm").ok()?;
    let (mut node, mut server) = (0, 0);
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        let (Ok(comm), Ok(stat)) =
            (std::fs::read_to_string(dir.join("comm")), std::fs::read_to_string(dir.join("stat")))
        else {
            continue; // the thread ended meanwhile
        };
        // Fields after the command's closing parenthesis: state is the 3rd field, utime the
        // 14th and stime the 15th.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        let comm = comm.trim_end();
        if comm.starts_with("omid-client") || comm == me.trim_end() {
            continue;
        }
        if SERVER_THREAD.starts_with(comm) {
            node += ticks;
        }
        server += ticks;
    }
    Some((node, server))
}

/// Fig. 12: copies the oracle's log directory (the server keeps running) and times a fresh
/// oracle's recovery from it: open the log, load the checkpoint, replay the tail, log the crash
/// range. Returns the time and the log directory's size in bytes.
pub(super) fn measure_recovery(dir: &Path, spec: &RunSpec) -> anyhow::Result<(Duration, u64)> {
    let src = litmus_runtime::host::machine_dir(dir, ORACLE);
    let copy_root = dir.join("recovery-copy");
    let dst = litmus_runtime::host::machine_dir(&copy_root, ORACLE);
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
    let host = Host::open(machines, Some(&copy_root), spec.fsync).context("recover the oracle")?;
    let elapsed = start.elapsed();
    drop(host);
    let _ = std::fs::remove_dir_all(&copy_root);
    Ok((elapsed, bytes))
}

/// What one client thread does.
pub(super) struct ClientSpec {
    pub(super) replication: bool,
    pub(super) slow: bool,
    pub(super) seed: u64,
    pub(super) write_set: usize,
    pub(super) outstanding: usize,
    pub(super) think: Duration,
    pub(super) think_dist: ThinkDist,
    pub(super) slow_factor: f64,
}

impl ClientSpec {
    /// This client's next think time.
    pub(super) fn think(&self, rng: &mut ChaCha8Rng) -> Duration {
        let mean = self.think.as_secs_f64() * if self.slow { self.slow_factor } else { 1.0 };
        let secs = match self.think_dist {
            ThinkDist::Fixed => mean,
            ThinkDist::Exp => Exp::new(1.0).expect("rate 1 is valid").sample(rng) * mean,
        };
        Duration::from_secs_f64(secs.min(THINK_MS_MAX / 1e3))
    }
}

/// One oracle session over one socket: the handshake, tagged requests, replies with the
/// replica kept and pushes acknowledged.
struct Session {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
    buf: Vec<u8>,
    me: litmus_core::ClientId,
    next_tag: u64,
    replica: Option<ClientReplica>,
    /// Pushes received (and acknowledged) while `counting`.
    pushes: u64,
}

impl Session {
    /// Connects, says hello and opens the oracle session (`Connect` or `ConnectUnreplicated`).
    fn open(listen: &str, replication: bool) -> anyhow::Result<Session> {
        let stream = TcpStream::connect(listen).context("connect")?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut buf = Vec::new();
        wire::write_frame(&mut buf, &Frame::HelloClient { version: PROTOCOL_VERSION, expect: None, token: None });
        (&stream).write_all(&buf)?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let me = match wire::read_frame(&mut reader)? {
            Frame::Welcome { client, engine, .. } => {
                anyhow::ensure!(engine == "omid", "server runs {engine}, not omid");
                client
            }
            other => anyhow::bail!("unexpected handshake {other:?}"),
        };
        let mut session = Session { stream, reader, buf, me, next_tag: 0, replica: None, pushes: 0 };
        session.send(if replication { Request::Connect } else { Request::ConnectUnreplicated })?;
        match session.recv(false)? {
            (_, Reply::Connected(c)) => session.replica = replication.then(|| ClientReplica::new(&c)),
            (_, other) => anyhow::bail!("expected Connected, got {other:?}"),
        }
        Ok(session)
    }

    /// Sends a tagged request; returns its tag.
    fn send(&mut self, body: Request) -> anyhow::Result<u64> {
        self.next_tag += 1;
        let msg = OracleWire::Request(OracleRequest { tag: self.next_tag, body }).into_message();
        self.buf.clear();
        wire::write_frame(&mut self.buf, &Frame::Envelope(Envelope { from: Addr::Client(self.me), to: ORACLE, msg }));
        self.stream.write_all(&self.buf)?;
        Ok(self.next_tag)
    }

    fn apply(&mut self, delta: &Delta) -> anyhow::Result<()> {
        if let Some(r) = self.replica.as_mut() {
            r.apply(delta).map_err(|e| anyhow::anyhow!("replica gap over TCP: {e}"))?;
        }
        Ok(())
    }

    /// The next reply that answers a request (applying a `Began`'s ΔSO to the replica); pushes
    /// on the way are applied, acknowledged and counted when `counting`.
    fn recv(&mut self, counting: bool) -> anyhow::Result<(Option<u64>, Reply)> {
        loop {
            if let Some(reply) = self.next(counting)? {
                return Ok(reply);
            }
        }
    }

    /// One frame: `None` for a push (handled here).
    fn next(&mut self, counting: bool) -> anyhow::Result<Option<(Option<u64>, Reply)>> {
        let frame = wire::read_frame(&mut self.reader).context("read a reply")?;
        let Frame::Envelope(Envelope { msg: Message::Role(payload), .. }) = frame else {
            anyhow::bail!("unexpected frame {frame:?}");
        };
        let Some(OracleWire::Reply(OracleReply { tag, body })) = OracleWire::from_payload(payload) else {
            anyhow::bail!("a role message that is not an oracle reply");
        };
        match body {
            Reply::Push { delta } => {
                self.apply(&delta)?;
                self.send(Request::Ack)?;
                self.pushes += u64::from(counting);
                Ok(None)
            }
            Reply::Refused(e) => anyhow::bail!("oracle refused: {e}"),
            Reply::Began { start_ts, delta } => {
                self.apply(&delta)?;
                Ok(Some((tag, Reply::Began { start_ts, delta })))
            }
            body => Ok(Some((tag, body))),
        }
    }

    /// Handles the pushes that have already arrived, without waiting for more.
    fn poll_pushes(&mut self, counting: bool) -> anyhow::Result<()> {
        loop {
            self.stream.set_nonblocking(true)?;
            let ready = match self.reader.fill_buf() {
                Ok([]) => Err(anyhow::anyhow!("the server closed the connection")),
                Ok(_) => Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
                Err(e) => Err(e.into()),
            };
            self.stream.set_nonblocking(false)?;
            if !ready? {
                return Ok(());
            }
            if let Some((_, reply)) = self.next(counting)? {
                anyhow::bail!("unexpected reply while no request is outstanding: {reply:?}");
            }
        }
    }

    /// Sleeps `d` in slices, answering pushes; `false` when the run ended meanwhile.
    fn think(&mut self, d: Duration, stop: &AtomicBool, counting: &AtomicBool) -> anyhow::Result<bool> {
        let until = Instant::now() + d;
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(false);
            }
            let now = Instant::now();
            if now >= until {
                return Ok(true);
            }
            std::thread::sleep(THINK_SLICE.min(until - now));
            self.poll_pushes(counting.load(Ordering::Relaxed))?;
        }
    }
}

struct InFlight {
    began_at: Instant,
    commit_sent_at: Option<Instant>,
}

fn client_loop(
    listen: &str,
    spec: &ClientSpec,
    stop: &AtomicBool,
    measuring: &AtomicBool,
) -> anyhow::Result<ClientResult> {
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let mut session = Session::open(listen, spec.replication)?;
    let mut result = ClientResult {
        slow: spec.slow,
        commits: 0,
        aborts: 0,
        pushes: 0,
        entries: Moments::default(),
        bytes: Moments::default(),
        commit_latency: histogram(),
        txn_latency: histogram(),
    };
    if spec.think.is_zero() {
        pipelined(&mut session, spec, &mut rng, stop, measuring, &mut result)?;
    } else {
        paced(&mut session, spec, &mut rng, stop, measuring, &mut result)?;
    }
    result.pushes = session.pushes;
    Ok(result)
}

fn write_set(rng: &mut ChaCha8Rng, rows: usize) -> Vec<RowId> {
    (0..rows).map(|_| RowId(rng.gen())).collect()
}

fn record_began(result: &mut ClientResult, delta: &Delta) {
    result.entries.add(delta.entries.len() as f64);
    // Counted, not encoded: the size flavor walks the value without allocating.
    let size = postcard::ser_flavors::Size::default();
    let bytes = postcard::serialize_with_flavor::<Delta, _, usize>(delta, size).unwrap_or(0);
    result.bytes.add(bytes as f64);
}

fn us(d: Duration) -> u64 {
    (d.as_micros() as u64).clamp(1, LATENCY_US_MAX)
}

fn record_outcome(result: &mut ClientResult, committed: bool, began_at: Instant, commit_sent_at: Instant) {
    if committed {
        let now = Instant::now();
        result.commits += 1;
        result.txn_latency.record(us(now - began_at)).expect("clamped");
        result.commit_latency.record(us(now - commit_sent_at)).expect("clamped");
    } else {
        result.aborts += 1;
    }
}

/// No think time: keeps `outstanding` transactions in flight, committing each as soon as its
/// timestamp arrives (Figs. 9, 10: "clients keep the pipe on the SO full").
fn pipelined(
    session: &mut Session,
    spec: &ClientSpec,
    rng: &mut ChaCha8Rng,
    stop: &AtomicBool,
    measuring: &AtomicBool,
    result: &mut ClientResult,
) -> anyhow::Result<()> {
    let mut in_flight: HashMap<u64, InFlight> = HashMap::new();
    let mut by_ts: HashMap<Timestamp, InFlight> = HashMap::new();
    loop {
        while in_flight.len() + by_ts.len() < spec.outstanding {
            let tag = session.send(Request::Begin)?;
            in_flight.insert(tag, InFlight { began_at: Instant::now(), commit_sent_at: None });
        }
        let measured = measuring.load(Ordering::Relaxed);
        let (tag, body) = session.recv(measured)?;
        match body {
            Reply::Began { start_ts, delta } => {
                let t = tag.and_then(|t| in_flight.remove(&t)).context("Began for an unknown tag")?;
                if measured {
                    record_began(result, &delta);
                }
                session.send(Request::Commit { start_ts, write_set: write_set(rng, spec.write_set) })?;
                by_ts.insert(start_ts, InFlight { commit_sent_at: Some(Instant::now()), ..t });
            }
            Reply::Committed { start_ts, .. } | Reply::Aborted { start_ts, .. } => {
                let t = by_ts.remove(&start_ts).context("commit reply for an unknown transaction")?;
                if measured {
                    let sent = t.commit_sent_at.context("commit reply before the commit")?;
                    record_outcome(result, matches!(body, Reply::Committed { .. }), t.began_at, sent);
                }
            }
            other => anyhow::bail!("unexpected reply {other:?}"),
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
    }
}

/// With think time: one transaction at a time — Begin, wait for the timestamp, think, Commit,
/// wait for the outcome (Figs. 7–8, Table I). Starts after a random offset in `[0, think)`.
fn paced(
    session: &mut Session,
    spec: &ClientSpec,
    rng: &mut ChaCha8Rng,
    stop: &AtomicBool,
    measuring: &AtomicBool,
    result: &mut ClientResult,
) -> anyhow::Result<()> {
    let offset = spec.think(rng).mul_f64(rng.gen_range(0.0..1.0));
    if !session.think(offset, stop, measuring)? {
        return Ok(());
    }
    while !stop.load(Ordering::Relaxed) {
        let began_at = Instant::now();
        session.send(Request::Begin)?;
        let measured = measuring.load(Ordering::Relaxed);
        let (start_ts, delta) = match session.recv(measured)? {
            (_, Reply::Began { start_ts, delta }) => (start_ts, delta),
            (_, other) => anyhow::bail!("expected Began, got {other:?}"),
        };
        if measuring.load(Ordering::Relaxed) {
            record_began(result, &delta);
        }
        let think = spec.think(rng);
        if !session.think(think, stop, measuring)? {
            return Ok(());
        }
        let sent = Instant::now();
        session.send(Request::Commit { start_ts, write_set: write_set(rng, spec.write_set) })?;
        let measured = measuring.load(Ordering::Relaxed);
        let committed = match session.recv(measured)? {
            (_, Reply::Committed { .. }) => true,
            (_, Reply::Aborted { .. }) => false,
            (_, other) => anyhow::bail!("expected the commit's outcome, got {other:?}"),
        };
        if measuring.load(Ordering::Relaxed) {
            record_outcome(result, committed, began_at, sent);
        }
    }
    Ok(())
}
