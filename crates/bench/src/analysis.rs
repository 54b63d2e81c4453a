//! The built-in workloads as `litmus analyze` sees them: each one's DDL with its declared
//! invariants, its catalog and procedures, and argument samples drawn from the workload's own
//! generator (so the recorded footprints are those of the transactions a benchmark runs).

use crate::tpcc::{self, Tpcc, TpccOptions, TxnType};
use crate::UnknownWorkload;
use litmus_analyze::{ProcSpec, WorkloadSpec};
use litmus_engine::Registry;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Argument samples per procedure (each recorded under several synthetic data variants).
pub const SAMPLES: usize = 48;
/// Seed of the argument samples.
pub const SEED: u64 = 17;
/// Workloads `litmus analyze` knows.
pub const ANALYZABLE: &[&str] = &["tpcc"];

/// TPC-C's tables and its consistency conditions 3.3.2.1–12 (and keys, foreign keys).
pub const TPCC_DDL: &str = include_str!("tpcc/invariants.sql");

/// The analyzer's view of a built-in workload.
pub fn spec(workload: &str) -> anyhow::Result<WorkloadSpec> {
    match workload {
        "tpcc" => tpcc_spec(),
        other => Err(UnknownWorkload(other.into()).into()),
    }
}

/// TPC-C: the five transactions (the ACID procedures; the `_base` ones have the same bodies).
pub fn tpcc_spec() -> anyhow::Result<WorkloadSpec> {
    // A small scale: only the input ranges depend on it.
    let t = Tpcc::new(&TpccOptions { scale_div: 10, ..TpccOptions::DEFAULT }, false)?;
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let mut registry = Registry::new();
    tpcc::register(&mut registry);
    let order = [TxnType::NewOrder, TxnType::Payment, TxnType::OrderStatus, TxnType::Delivery, TxnType::StockLevel];
    let procedures = order
        .iter()
        .map(|&ty| ProcSpec {
            procedure: ty.procedure(false).into(),
            label: ty.kind().into(),
            samples: (0..SAMPLES).map(|_| t.generate_type(ty, &mut rng).args).collect(),
        })
        .collect();
    Ok(WorkloadSpec {
        name: "tpcc".into(),
        named_as: "TPC-C consistency conditions (clause 3.3.2; the paper's Table 3)".into(),
        ddl: TPCC_DDL.into(),
        catalog: tpcc::schema::catalog(),
        registry,
        procedures,
    })
}
