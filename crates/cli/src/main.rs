//! `litmus` — the LitmusDB command line.
//!
//! * `litmus bench <workload>` — run a workload on an embedded cluster (default) or against
//!   running servers (`--connect`), print throughput and latency percentiles.
//! * `litmus server --config node.toml` — run one node of a TCP cluster (`--pg-listen`: SQL).
//! * `litmus demo` — an in-memory cluster with a PostgreSQL endpoint; prints how to connect.
//! * `litmus sim --seed N` — run (or replay) a deterministic simulation with faults.
//! * `litmus analyze <workload> [--json out.json]` — which transactions need coordination, and
//!   why (invariant confluence, Bailis et al. VLDB'15 Table 2).
//! * `litmus shell --connect ADDR` / `litmus dump --connect ADDR --table T` — look at the data.

mod analyze;
mod demo;
mod server;
mod shell;
mod sim;

use clap::{Parser, Subcommand};

/// mimalloc instead of the system allocator: the engines allocate and free many small
/// objects per operation (rows, keys, messages), and glibc malloc takes a large share of the
/// CPU of a TPC-C run.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc v2's `mimalloc.h` (`mi_option_e`); `libmimalloc-sys`
/// declares `mi_option_set` but has no constant for this option.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long mimalloc keeps freed memory before it gives it back to the OS.
///
/// mimalloc's default is 10 ms. A busy cluster frees and reallocates the same few hundred MB
/// (rows, messages, log records) continuously, so memory given back after 10 ms is touched
/// again a moment later: the kernel zeroes a fresh (huge) page for every such fault
/// (`clear_page_erms` in a profile). After a second of disuse a page is truly idle; the price
/// is somewhat more resident memory.
pub const ALLOCATOR_PURGE_DELAY_MS: i64 = 1_000;

/// `mi_option_allow_thp` in the same enum (mimalloc v2.2).
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 37;

/// Whether mimalloc asks the kernel for transparent huge pages (`madvise(MADV_HUGEPAGE)` on
/// the memory it maps). mimalloc's default is yes; ours is no.
///
/// A cluster's memory grows by the rows its transactions insert (~3 KB per TPC-C
/// transaction), so the kernel keeps zeroing fresh pages for it, and zeroing a 2 MB huge page
/// on first touch costs more here than the TLB misses it saves (`clear_page_erms` and system
/// time grow with huge pages; TPC-C takes less CPU per transaction without them).
pub const ALLOCATOR_HUGE_PAGES: bool = false;

/// Applies [`ALLOCATOR_PURGE_DELAY_MS`] and [`ALLOCATOR_HUGE_PAGES`], each unless the user
/// chose through mimalloc's own environment variable (`MIMALLOC_PURGE_DELAY`,
/// `MIMALLOC_ALLOW_THP`, read when the process starts).
fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mimalloc's option setters are thread-safe and may be called at any time.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, ALLOCATOR_PURGE_DELAY_MS as _) };
    }
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() && !ALLOCATOR_HUGE_PAGES {
        // SAFETY: as above; memory mapped from now on is not advised for huge pages.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0) };
        // mimalloc advised its first arena before `main`, and it reads the option for its own
        // `prctl` only when the process starts: disable them for the process, as it would.
        #[cfg(target_os = "linux")]
        // SAFETY: PR_SET_THP_DISABLE only sets a flag of this process; no memory is touched.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
}

/// Whether the kernel may back this process with transparent huge pages.
#[cfg(all(test, target_os = "linux"))]
fn huge_pages_allowed() -> bool {
    // SAFETY: reads a flag of this process.
    unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) == 0 }
}

/// mimalloc's current purge delay in milliseconds.
#[cfg(test)]
fn allocator_purge_delay_ms() -> i64 {
    // SAFETY: reading an option is thread-safe.
    unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) as i64 }
}

#[derive(Parser)]
#[command(
    name = "litmus",
    version,
    about = "LitmusDB: a partitioned transactional database where each transaction pays only for the coordination it needs",
    long_about = "LitmusDB runs several concurrency-control engines (the papers' designs) side by side on one core.\n\n\
Start here:\n  litmus bench ycsb --duration 5            run YCSB on an embedded 2-node cluster\n  \
litmus bench ycsb --compare nocc,nocc       run two engines in one invocation and print the ratio\n  \
litmus bench ycsb-t --engine omid --mix complex   Omid's transactional YCSB with an SI check\n  \
litmus bench omid-oracle --write-set 8       the Omid status oracle alone over TCP loopback\n  \
litmus bench basic-ycsb --compare base,basic --mix write-heavy   BASIC vs BASE, inconsistency ratio\n  \
litmus sim --seed 7 --faults                 one deterministic simulation with crashes, partitions, loss\n  \
litmus analyze tpcc                          which transactions need coordination, and why\n  \
litmus server --config examples/cluster-3/node0.toml   one node of a TCP cluster (see README)\n  \
litmus demo                                  an in-memory cluster speaking SQL; prints the psql line\n  \
litmus shell --connect 127.0.0.1:7100       look at its data (commands from stdin; help lists them)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a benchmark workload and report throughput, latency percentiles and invariant checks.
    Bench(Box<litmus_bench::BenchArgs>),
    /// Run one node of a TCP cluster (configuration from a TOML file, flags override it).
    Server(server::ServerArgs),
    /// Start an in-memory cluster with a PostgreSQL endpoint and print how to connect (psql).
    Demo(demo::DemoArgs),
    /// Run deterministic simulations: a seed replays bit for bit.
    Sim(sim::SimArgs),
    /// Invariant confluence: which of a workload's transactions need coordination, and why.
    Analyze(analyze::AnalyzeArgs),
    /// Look at a running cluster's data: tables, get, scan, put, delete, call, transactions
    /// (commands from stdin, one a line; `help` lists them).
    Shell(shell::ShellArgs),
    /// Write a table of a running cluster as CSV or JSON lines to stdout.
    ///
    /// Any size: the table is read in pages (--page-rows, --page-bytes) and each page is written
    /// before the next is read. What the dump sees depends on the engine: one snapshot on omid
    /// (snapshot isolation) and basic (the transaction's timestamp); read-committed pages of one
    /// read-committed transaction on acid, salt, salt-local, coordfree and base (no locks held
    /// between pages); whatever is stored on nocc; on granola, granola-locking and sinfonia,
    /// which run one-round transactions only, each page is its own one-round read transaction
    /// (consistent in itself, pages read committed). A transaction that fails retryably mid-dump
    /// (coordfree bounds how long one may read) is replaced by a new one that goes on from the
    /// last key written, so a long dump's pages are read committed across transactions.
    Dump(shell::DumpArgs),
    /// Print the SCRAM-SHA-256 verifier of a password read from stdin (one line), for a SQL
    /// user's entry in the node config's `pg_users` (`alice = "SCRAM-SHA-256$4096:..."`).
    PgPassword,
    /// Measure the CPU time of each machine step on the embedded runtime and write the cost
    /// table the simulator charges (`litmus bench --runtime sim`).
    Calibrate(litmus_bench::calibrate::CalibrateArgs),
}

fn main() {
    tune_allocator();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => litmus_bench::run(&args),
        Command::Server(args) => server::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Sim(args) => sim::run(args),
        Command::Analyze(args) => analyze::run(args),
        Command::Shell(args) => shell::run_shell(args),
        Command::Dump(args) => shell::run_dump(args),
        Command::PgPassword => server::pg_password(),
        Command::Calibrate(args) => {
            let command: Vec<String> = std::env::args().collect();
            litmus_bench::calibrate::run(&args, &command.join(" "), &mut std::io::stdout().lock())
        }
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tune_allocator_keeps_freed_memory_for_a_second_and_no_huge_pages_unless_the_user_chose() {
        let purge_chosen = std::env::var_os("MIMALLOC_PURGE_DELAY").is_some();
        let thp_chosen = std::env::var_os("MIMALLOC_ALLOW_THP").is_some();
        // mimalloc's own default (10 ms) purges and re-faults the pages a busy cluster reuses.
        if !purge_chosen {
            assert_ne!(allocator_purge_delay_ms(), ALLOCATOR_PURGE_DELAY_MS, "the default is not ours");
        }
        #[cfg(target_os = "linux")]
        let before = huge_pages_allowed();
        tune_allocator();
        if !purge_chosen {
            assert_eq!(allocator_purge_delay_ms(), ALLOCATOR_PURGE_DELAY_MS);
        }
        #[cfg(target_os = "linux")]
        if !thp_chosen {
            assert!(!huge_pages_allowed(), "huge pages were allowed before: {before}");
        }
    }
}
