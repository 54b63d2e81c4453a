//! # The papers' figures: titles, axes and the Omid oracle's own benchmark
//!
//! What a sweep draws is the harness's ([`crate::sweep`], [`crate::plot`]); which paper figure
//! a sweep reproduces — its title, its x axis and how a value maps onto it — is here, keyed by
//! the workload (its registry name) and the swept parameter: Salt Figs. 7–13, Omid Figs. 7–12,
//! Granola Figs. 9–13 and VLDB'15 Figs. 5–6. [`omid_oracle`] is Omid's status-oracle
//! benchmark (Figs. 7–10, 12 and Table I), which runs no cluster workload.
//!
//! A module of `litmus-bench`, not a crate: `litmus bench` prints these titles in its own
//! output and `omid-oracle` is one of its subcommands' workloads, so a crate above the harness
//! would have to be threaded back into it.

pub mod omid_oracle;

use crate::sweep::SweepParam;
use crate::BenchArgs;
use litmus_workloads::salt_micro::{SaltMicroKind, CONTENTION_OPS};
use litmus_workloads::{ticketing, tpcc_neworder, ycsb_t};
use omid_oracle::NAME as ORACLE;

/// The workload as figure titles name it (ycsb-t draws one figure per mix).
pub fn label(args: &BenchArgs) -> String {
    if args.workload == ycsb_t::DEF.name {
        format!("{} --mix {}", args.workload, args.ycsb_t.mix.as_deref().unwrap_or("complex"))
    } else {
        args.workload.clone()
    }
}

/// The title of a clients sweep's latency-against-throughput figure: Salt Figs. 7–8, or Omid
/// Fig. 11 for ycsb-t.
pub fn latency_title(workload: &str, label: &str) -> String {
    let paper = if workload == ycsb_t::DEF.name { "Omid Fig. 11" } else { "Salt Figs. 7-8" };
    format!("{paper}: latency vs throughput ({label})")
}

/// How a sweep is drawn: the title, the x axis, and how a value maps onto it.
#[derive(Clone, Copy, Debug)]
pub struct FigureAxis {
    pub title: &'static str,
    pub x_label: &'static str,
    /// Short table column for `x` when it differs from the value.
    pub x_column: Option<&'static str>,
    x_of: fn(f64) -> f64,
}

impl FigureAxis {
    /// The figure for sweeping `param` of workload `workload` (Salt's figures for its
    /// microbenchmarks; a generic one otherwise).
    pub fn of(workload: &str, param: SweepParam) -> FigureAxis {
        let generic = |title, x_label| FigureAxis { title, x_label, x_column: None, x_of: |v| v };
        if workload == ORACLE {
            match param {
                SweepParam::Clients => {
                    return generic("Omid Figs. 7-8: replication cost as clients grow", "clients (oracle sessions)")
                }
                SweepParam::Outstanding => {
                    return generic("Omid Fig. 9: scalability with load", "outstanding transactions per client")
                }
                SweepParam::WriteSet => {
                    return generic("Omid Fig. 10: scalability with write-set size", "rows per write set")
                }
                SweepParam::Duration => {
                    return generic("Omid Fig. 12: recovery vs run length", "run length before the crash (s)")
                }
                _ => {}
            }
        }
        if workload == tpcc_neworder::NAME {
            match param {
                SweepParam::Distributed => {
                    return FigureAxis {
                        title: "Granola Fig. 13 and VLDB'15 §6.2: New-Order as transactions span warehouses",
                        x_label: "distributed New-Orders (%)",
                        x_column: Some("dist %"),
                        x_of: |f| 100.0 * f,
                    }
                }
                SweepParam::Nodes => return generic("VLDB'15 Fig. 6: New-Order scale-out", "nodes"),
                SweepParam::Clients => {
                    return generic("VLDB'15 Fig. 5: New-Order, clients to saturation", "closed-loop clients")
                }
                _ => {}
            }
        }
        match (SaltMicroKind::from_name(workload), param) {
            (_, SweepParam::Clients) if workload == ycsb_t::DEF.name => {
                generic("Omid Fig. 11: overhead over the store without transactions", "closed-loop clients")
            }
            (Some(SaltMicroKind::Contention), SweepParam::Rows) => FigureAxis {
                title: "Salt Fig. 11: contention ratio",
                x_label: "contention ratio (5 / rows)",
                x_column: Some("ratio"),
                x_of: |rows| CONTENTION_OPS as f64 / rows,
            },
            (Some(SaltMicroKind::Position), SweepParam::After) => {
                generic("Salt Fig. 12: contention position", "operations after the contended update")
            }
            (Some(SaltMicroKind::ReadWrite), SweepParam::ReadFraction) => FigureAxis {
                title: "Salt Fig. 13: read-write ratio",
                x_label: "read-only transactions (%)",
                x_column: Some("read %"),
                x_of: |f| 100.0 * f,
            },
            (_, SweepParam::Rows) => generic("throughput vs rows", "rows"),
            (_, SweepParam::After) => generic("throughput vs after", "operations after the contended update"),
            (_, SweepParam::ColdRows) => generic("throughput vs cold rows", "cold rows"),
            (_, SweepParam::ReadFraction) => generic("throughput vs read fraction", "read-only fraction"),
            (_, SweepParam::Clients) => generic("throughput vs clients", "closed-loop clients"),
            (_, SweepParam::Nodes) => generic("throughput vs nodes", "nodes"),
            (_, SweepParam::Replicas) => generic("throughput vs replicas", "replicas per partition"),
            (_, SweepParam::Partitions) => generic("throughput vs partitions", "partitions"),
            (_, SweepParam::Records) => generic("throughput vs records", "records"),
            (_, SweepParam::ReadRatio) => generic("throughput vs read ratio", "read ratio"),
            (_, SweepParam::TxnSize) => generic("throughput vs transaction size", "keys per transaction"),
            (_, SweepParam::ZipfTheta) => generic("throughput vs zipf theta", "zipf theta"),
            (_, SweepParam::BaseTxns) if workload == ticketing::DEF.name => {
                generic("Salt Fig. 10: incremental BASE-ification", "BASE-ified transactions (create-order, ...)")
            }
            (_, SweepParam::BaseTxns) => {
                generic("Salt Fig. 9: incremental BASE-ification", "BASE-ified transactions (new-order, payment, ...)")
            }
            (_, SweepParam::Warehouses) => generic("throughput vs warehouses", "warehouses"),
            (_, SweepParam::WriteSet) => generic("throughput vs write-set size", "rows per write set"),
            (_, SweepParam::Outstanding) => generic("throughput vs outstanding", "outstanding transactions"),
            (_, SweepParam::Duration) => generic("throughput vs run length", "run length (s)"),
            (_, SweepParam::Distributed) if workload == tpcc_neworder::NAME => FigureAxis {
                title: "Granola Fig. 13: TPC-C new_order, remote items",
                x_label: "distributed new_order transactions (%)",
                x_column: Some("dist %"),
                x_of: |f| 100.0 * f,
            },
            (_, SweepParam::Distributed) => FigureAxis {
                title: "Granola Fig. 9: distributed transactions",
                x_label: "distributed transactions (%)",
                x_column: Some("dist %"),
                x_of: |f| 100.0 * f,
            },
            (_, SweepParam::Conflict) => {
                generic("Granola Fig. 11: lock conflict rate", "conflict rate (shared counter)")
            }
            (_, SweepParam::LockCostUs) => {
                generic("Granola Fig. 10: lock management cost", "lock cost per lock (us; --exec-cost-us per fragment)")
            }
        }
    }

    pub fn x(&self, value: f64) -> f64 {
        (self.x_of)(value)
    }

    /// The figure title with the workload named: `"Salt Fig. 11: contention ratio
    /// (salt-contention)"`.
    pub fn full_title(&self, workload: &str) -> String {
        format!("{} ({workload})", self.title)
    }
}
