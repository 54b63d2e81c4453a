//! `litmus` — the LitmusDB command line.
//!
//! * `litmus bench <workload>` — run a workload on an embedded cluster (default) or against
//!   running servers (`--connect`), print throughput and latency percentiles.
//! * `litmus server --config node.toml` — run one node of a TCP cluster.
//! * `litmus sim --seed N` — run (or replay) a deterministic simulation with faults.
//! * `litmus analyze <workload> [--json out.json]` — which transactions need coordination, and
//!   why (invariant confluence, Bailis et al. VLDB'15 Table 2).
//! * `litmus shell --connect ADDR` / `litmus dump --connect ADDR --table T` — look at the data.

mod analyze;
mod server;
mod shell;
mod sim;

use clap::{Parser, Subcommand};

/// mimalloc instead of the system allocator: the engines allocate and free many small
/// objects per operation (rows, keys, messages), and glibc malloc was about a quarter of the
/// CPU of a TPC-C run (issue 13).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc v2's `mimalloc.h` (`mi_option_e`); `libmimalloc-sys`
/// declares `mi_option_set` but has no constant for this option.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long mimalloc keeps freed memory before it gives it back to the OS.
///
/// mimalloc's default is 10 ms. A busy cluster frees and reallocates the same few hundred MB
/// (rows, messages, log records) continuously, so memory given back after 10 ms was touched
/// again a moment later: the kernel zeroed a fresh (huge) page for every such fault, 31,000 to
/// 43,000 faults and ~7% of the CPU of an 8 s TPC-C run (`clear_page_erms`, issue 13). After a
/// second of disuse a page is truly idle; the run then takes under 1,000 faults and ~10% more
/// resident memory.
pub const ALLOCATOR_PURGE_DELAY_MS: i64 = 1_000;

/// Applies [`ALLOCATOR_PURGE_DELAY_MS`] unless the user chose a purge delay through mimalloc's
/// own `MIMALLOC_PURGE_DELAY` environment variable (read when the process starts).
fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mimalloc's option setters are thread-safe and may be called at any time.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, ALLOCATOR_PURGE_DELAY_MS as _) };
    }
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
    /// Run deterministic simulations: a seed replays bit for bit.
    Sim(sim::SimArgs),
    /// Invariant confluence: which of a workload's transactions need coordination, and why.
    Analyze(analyze::AnalyzeArgs),
    /// Look at a running cluster's data: tables, get, scan, put, delete, call, transactions
    /// (commands from stdin, one a line; `help` lists them).
    Shell(shell::ShellArgs),
    /// Write a table of a running cluster as CSV or JSON lines to stdout.
    Dump(shell::DumpArgs),
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
        Command::Sim(args) => sim::run(args),
        Command::Analyze(args) => analyze::run(args),
        Command::Shell(args) => shell::run_shell(args),
        Command::Dump(args) => shell::run_dump(args),
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
    fn tune_allocator_keeps_freed_memory_for_a_second_unless_the_user_chose() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return; // the user's choice stands; nothing of ours to check
        }
        // mimalloc's own default (10 ms) purges and re-faults the pages a busy cluster reuses.
        assert_ne!(allocator_purge_delay_ms(), ALLOCATOR_PURGE_DELAY_MS, "the default is not ours");
        tune_allocator();
        assert_eq!(allocator_purge_delay_ms(), ALLOCATOR_PURGE_DELAY_MS);
    }
}
