//! # litmus-workloads: what the benchmarks and the simulator run
//!
//! A workload is its schema (tables and stored procedures), its generator (initial data and
//! the next transaction), its checker (the invariant after a run), and where it has them its
//! declared invariants for `litmus analyze` and its simulator driver for `litmus sim`.
//!
//! * [`mod@workload`] — the [`Workload`] trait (toydb's prepare / generate / verify shape) and the
//!   outcome counts ([`RunStats`]) a workload's invariant is checked against.
//! * [`ycsb`] — YCSB (workloads A/B/C, uniform or scrambled-zipfian keys, multi-key
//!   transactions), with an update-counter invariant.
//! * [`salt_micro`] — Salt's contention microbenchmarks (§8.3, Figs. 11–13): `salt-contention`,
//!   `salt-position`, `salt-rw`, every operation its own alkaline subtransaction.
//! * [`ticketing`] — Salt's Fusion Ticket experiment (§8, Figs. 8 and 10): 11 booking
//!   transactions, the contended `create-order` BASE-ifiable (`--base-txns`), seat invariants.
//! * [`ycsb_t`] — Omid §V's transactional YCSB (four mixes, 8 rows per transaction on
//!   average) with a snapshot-isolation check, and its simulator driver ([`ycsb_t_sim`]).
//! * [`tpcc`], [`tpcc_neworder`] — TPC-C and its New-Order-only form (VLDB'15 §6.2).
//! * [`basic_ycsb`], [`granola_counters`] — BASIC's and Granola's workloads.
//! * [`mix`] — a workload's defined mix, the shared deck TPC-C's terminals deal from, and the
//!   verdict on a run's completed mix against the minimums.
//! * [`analysis`] — the workloads as `litmus analyze` sees them (DDL with invariants).
//! * [`setup`] — loading and checking through clients: idempotent calls with retries.
//! * [`reset`] — `--reset`: emptying a workload's tables on running servers.
//! * [`registry`] — [`WorkloadDef`], one definition per workload; [`ALL`] lists them and
//!   [`by_name`] / [`sim_by_name`] find one (unknown names list the known ones).
//! * [`sim_checks`] — the simulator's own checks (`acked`, `bank`, `salt-chains`) as entries.

pub mod analysis;
pub mod basic_ycsb;
pub mod basic_ycsb_sim;
pub mod granola_counters;
pub mod mix;
pub mod registry;
pub mod reset;
pub mod salt_micro;
pub mod setup;
pub mod sim_checks;
pub mod ticketing;
pub mod tpcc;
pub mod tpcc_neworder;
pub mod workload;
pub mod ycsb;
pub mod ycsb_t;
pub mod ycsb_t_sim;

pub use registry::{
    analysis as analysis_of, analyzable_names, bench_names, by_name, full_schema, sim_by_name, sim_names, Options,
    SimDef, SimRun, UnknownSimWorkload, UnknownWorkload, WorkloadDef,
};
pub use workload::{MicroOp, Outcomes, RetryPolicy, RunStats, TxnRequest, Workload};

/// Every registered workload, in the order the commands list them.
pub const ALL: &[&WorkloadDef] = &[
    &sim_checks::ACKED,          // every acknowledged write survives (simulator only)
    &sim_checks::BANK,           // Salt Figs. 1-2: BASE transfers, ACID totals (simulator only)
    &sim_checks::MINIBANK,       // Sinfonia §3: transfers as reads + a minitransaction (simulator only)
    &sim_checks::SALT_CHAINS,    // Salt §5.1: BASE chains with provenance (simulator only)
    &ycsb::DEF,                  // YCSB A/B/C
    &salt_micro::CONTENTION_DEF, // Salt Fig. 11
    &salt_micro::POSITION_DEF,   // Salt Fig. 12
    &salt_micro::READ_WRITE_DEF, // Salt Fig. 13
    &tpcc::DEF,                  // TPC-C
    &ticketing::DEF,             // Salt §8's Fusion Ticket
    &ycsb_t::DEF,                // Omid §V's transactional YCSB
    &basic_ycsb::DEF,            // BASIC §V
    &tpcc_neworder::DEF,         // VLDB'15 §6.2, Granola Fig. 13
    &granola_counters::DEF,      // Granola §6.1
];

/// The workloads `litmus analyze` knows, in the order it lists them (TPC-C, its main subject,
/// first); exactly the entries of [`ALL`] with an `analysis` (a registry test checks it).
pub const ANALYZED: &[&WorkloadDef] = &[&tpcc::DEF, &ticketing::DEF, &ycsb::DEF];
