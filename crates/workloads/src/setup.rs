//! # Setup calls: loading and checking a workload's data through clients
//!
//! A workload's `prepare` and `verify` call idempotent procedures (load batches, read-only
//! checks) that may meet the same transient failures as the measured transactions: they retry
//! with backoff ([`call_idempotent`]), stop at a signal ([`stop_requested`]) and give up at the
//! verification's deadline ([`set_setup_deadline`]), which the harness sets around `verify`.
//! [`load_in_batches`] loads rows from a few clients in parallel behind a progress bar.

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use litmus_client::Client;
use litmus_core::Error;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Set by SIGINT / SIGTERM: every phase stops at its next call.
static STOP: AtomicBool = AtomicBool::new(false);
/// Retries of idempotent setup calls stop after this instant (the verification's budget).
static SETUP_DEADLINE: Mutex<Option<Instant>> = Mutex::new(None);

/// Installs (once per process) a SIGINT / SIGTERM handler: the first signal stops the run at
/// its next call (the report says so); a second one exits with status 130.
pub fn install_stop_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            if STOP.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
            eprintln!("litmus bench: stopping (signal); a second signal exits at once");
        });
    });
}

/// True once a stop signal arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

fn setup_deadline_passed() -> bool {
    SETUP_DEADLINE.lock().map(|d| d.is_some_and(|d| Instant::now() >= d)).unwrap_or(false)
}

/// Most retries of one transaction after retryable failures.
pub const RETRIES_MAX: u32 = 8;
/// First backoff before a retry; doubles per retry.
pub const BACKOFF_BASE_US: u64 = 100;
/// Longest backoff before a retry.
pub const BACKOFF_MAX_US: u64 = 10_000;
/// Most retries of an idempotent setup call (load, check); these may also retry timeouts.
pub const SETUP_RETRIES_MAX: u32 = 20;

/// Clients loading initial data in parallel ([`load_in_batches`]).
pub const LOAD_CLIENTS_MAX: usize = 4;
/// Rows above which loading shows a progress bar.
pub const LOAD_PROGRESS_ROWS_MIN: u64 = 10_000;

/// Calls an idempotent procedure (a load batch, a read-only check), retrying retryable errors
/// and timeouts alike, at most [`SETUP_RETRIES_MAX`] times. Never use it for a procedure whose
/// effect must happen once.
pub fn call_idempotent(
    client: &mut Client,
    procedure: &str,
    args: Vec<litmus_core::Value>,
) -> Result<Vec<litmus_core::Value>, Error> {
    let mut attempt = 0;
    loop {
        if stop_requested() {
            return Err(Error::unavailable("stopped by a signal"));
        }
        match client.call(procedure, args.clone()) {
            Ok(v) => return Ok(v),
            Err(e)
                if attempt < SETUP_RETRIES_MAX
                    && !setup_deadline_passed()
                    && !stop_requested()
                    && (e.is_retryable() || matches!(e, Error::Unavailable { .. })) =>
            {
                attempt += 1;
                std::thread::sleep(Duration::from_micros(backoff_cap_us(attempt)));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Loads rows `0..rows` by calling the idempotent `procedure` with `args(start, count)` for
/// batches of at most `batch_rows`, from up to [`LOAD_CLIENTS_MAX`] clients in parallel threads
/// (each batch retried by [`call_idempotent`]). Shows a progress bar labelled `load` when
/// `progress` and there are at least [`LOAD_PROGRESS_ROWS_MIN`] rows. Stops at the first failure.
pub fn load_in_batches(
    clients: &mut dyn FnMut() -> Result<Client, Error>,
    rows: u64,
    batch_rows: u64,
    progress: bool,
    procedure: &str,
    args: &(dyn Fn(u64, u64) -> Vec<litmus_core::Value> + Sync),
) -> anyhow::Result<()> {
    assert!(batch_rows > 0, "load batches must hold at least one row");
    let batches = rows.div_ceil(batch_rows);
    let threads = (batches as usize).clamp(1, LOAD_CLIENTS_MAX);
    let mut sessions = Vec::with_capacity(threads);
    for _ in 0..threads {
        sessions.push(clients().context("open a load client")?);
        // A transport that runs one request at a time gains nothing from parallel loaders, and
        // a deterministic one (the simulator's) must see the batches in one order.
        if sessions[0].serialises() {
            break;
        }
    }
    let bar = progress_bar(rows, "load", BAR_COUNTED, !progress || rows < LOAD_PROGRESS_ROWS_MIN);
    let next_batch = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(threads);
        for (i, client) in sessions.iter_mut().enumerate() {
            let (next_batch, failed, bar) = (&next_batch, &failed, &bar);
            let load = move || -> anyhow::Result<()> {
                while !failed.load(Ordering::Relaxed) {
                    let start = next_batch.fetch_add(1, Ordering::Relaxed) * batch_rows;
                    if start >= rows {
                        break;
                    }
                    let count = batch_rows.min(rows - start);
                    if let Err(e) = call_idempotent(client, procedure, args(start, count)) {
                        failed.store(true, Ordering::Relaxed);
                        return Err(e).with_context(|| format!("load rows {start}..{}", start + count));
                    }
                    bar.inc(count);
                }
                Ok(())
            };
            let handle = std::thread::Builder::new()
                .name(format!("load-{i}"))
                .spawn_scoped(s, load)
                .context("spawn a load thread")?;
            handles.push(handle);
        }
        join_loaders(handles)
    });
    bar.finish_and_clear();
    result
}

/// Waits for every load thread; the first error (or panic) wins.
pub fn join_loaders(handles: Vec<std::thread::ScopedJoinHandle<'_, anyhow::Result<()>>>) -> anyhow::Result<()> {
    let mut first = Ok(());
    for h in handles {
        let r = h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a load thread panicked")));
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// The backoff ceiling before retry number `attempt` (1-based).
pub fn backoff_cap_us(attempt: u32) -> u64 {
    BACKOFF_BASE_US.saturating_mul(1 << attempt.saturating_sub(1).min(20)).min(BACKOFF_MAX_US)
}

/// Progress bar template for counted work (rows loaded).
pub const BAR_COUNTED: &str = "{prefix:>7} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} {msg}";
/// Progress bar template for a timed run (position in milliseconds, not shown).
pub const BAR_TIMED: &str = "{prefix:>7} [{elapsed_precise}] {wide_bar} {msg}";

/// A progress bar on stderr drawn with `template`; hidden when asked or when stderr is not a
/// terminal.
pub fn progress_bar(len: u64, prefix: &'static str, template: &str, hidden: bool) -> ProgressBar {
    if hidden || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    bar.set_style(ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()));
    bar.set_prefix(prefix);
    bar
}

/// Setup calls ([`call_idempotent`]) stop retrying after `deadline` (`None`: no deadline).
pub fn set_setup_deadline(deadline: Option<Instant>) {
    if let Ok(mut d) = SETUP_DEADLINE.lock() {
        *d = deadline;
    }
}
