//! # litmus-analyze: which transactions need coordination, and why
//!
//! Invariant confluence (Bailis et al., *Coordination Avoidance in Database Systems*, VLDB'15):
//! a set of transactions can run without coordination, available and convergent, while keeping
//! an invariant *iff* it is I-confluent with respect to that invariant (Theorem 1). The paper
//! decides common (invariant, operation) pairs once (Table 2, proofs in the extended version's
//! Appendix C) and applies them to applications by a simple static analysis (§5.3): look at each
//! invariant and each operation of each transaction, label the pairs Table 2 decides, and flag
//! every other pair as *potentially not I-confluent* — sound, not complete. This crate is that
//! analysis for LitmusDB:
//!
//! ```text
//!   DDL (SQL + LITMUS_ extensions) ──ddl::parse──► Schema { tables, invariants: clauses }
//!   Registry procedures + generated args ──footprint::Recorder──► Footprint per procedure
//!   rules::judge(clause, access) for every pair ──► Judgement { verdict, Claim, why }
//!   report::analyze ──► per invariant (Table 3) and per procedure: verdict, reasons, class
//! ```
//!
//! * [`ddl`] — the schema language: standard `CREATE TABLE` (PRIMARY KEY, UNIQUE, NOT NULL,
//!   FOREIGN KEY [ON DELETE CASCADE], CHECK with `=`, `<>`, `IN`, `>`, `>=`, `<`, `<=`,
//!   `GENERATED ... AS IDENTITY`/`AUTO_INCREMENT`) parsed with the `sqlparser` crate, and
//!   LitmusDB's extensions as `LITMUS_*` functions inside `CHECK`: sequential ids per group,
//!   materialized roll-ups (sum/count), counters, correspondences (Table 3's FK type), set
//!   CONTAINS and SIZE. Bad DDL gets a typed [`DdlError`].
//! * [`footprint`] — footprints *derived* by running each registered procedure in a recording
//!   context over the workload's generated arguments: what it inserts (with a chosen key, a key
//!   assigned from a counter it incremented, or a declared unique token), updates (assign,
//!   increment, decrement, set add/remove…), deletes and reads. Only what cannot be observed is
//!   declared (unique tokens, value domains).
//! * [`rules`] — Table 2, one rule per row, each citing its Claim (the table in that module's
//!   doc lists them all): Claims 1–2 (equality, inequality), 3–4 (uniqueness with a chosen or an
//!   assigned value), 5 (AUTO_INCREMENT / sequential ids), 6–8 (foreign keys: insert, delete,
//!   cascading delete), 10 (materialized views), 11–14 (thresholds under increment and
//!   decrement), 15–17 (CONTAINS, SIZE). Unrecognised pairs: §5.3.
//! * [`report`] — the analysis: each invariant's verdict with the transactions that touch it
//!   (Table 3's columns), each procedure's verdict, the pairs that force coordination, and a
//!   class — coordination-free; single-site coordination (only sequential id assignment from
//!   one counter row, which §6.1 confines to that row's partition with a nested atomic
//!   increment); coordinated — with the LitmusDB engine that fits it. Text and JSON.
//!
//! * [`declared`] — footprints declared in TOML for a user's procedures that LitmusDB cannot
//!   run (`litmus analyze --schema my.sql --procedures my.toml`).
//! * [`sql`] — footprints of SQL transactions (a pgbench script: `litmus analyze --schema
//!   my.sql --sql txns.sql`), and of single statements, which the SQL front end judges on
//!   `coordfree` before it runs them.
//!
//! What the analysis assumes (§4.1, §4.3): the invariants are complete and each transaction
//! run alone preserves them. It judges concurrency, not sequential correctness.

pub mod ddl;
pub mod declared;
pub mod footprint;
pub mod invariant;
pub mod report;
pub mod rules;
pub mod sql;

pub use ddl::DdlError;
pub use footprint::{Access, Change, Footprint, Recorder, Source};
pub use invariant::{Clause, Cmp, ColRef, Invariant, Schema};
pub use report::{analyze, analyze_declared, analyze_sql, AnalyzeError, Class, ProcSpec, Report, WorkloadSpec};
pub use rules::{judge, Judgement, Verdict};
