//! The built-in workloads as `litmus analyze` sees them: each one's DDL with its declared
//! invariants, its catalog and procedures, and argument samples drawn from the workload's own
//! generator (so the recorded footprints are those of the transactions a benchmark runs).
//! Each is a workload's `analysis` in the registry ([`crate::WorkloadDef::analysis`]).

use crate::ticketing::{self, Ticketing, TicketingOptions};
use crate::tpcc::{self, Tpcc, TpccOptions, TxnType};
use crate::workload::Workload;
use crate::ycsb::{self, Ycsb, YcsbOptions};
use litmus_analyze::{analyze, ProcSpec, WorkloadSpec};
use litmus_protocol::procedure::Coordination;
use litmus_protocol::Registry;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Argument samples per procedure (each recorded under several synthetic data variants).
pub const SAMPLES: usize = 48;
/// Seed of the argument samples.
pub const SEED: u64 = 17;

/// TPC-C's tables and its consistency conditions 3.3.2.1–12 (and keys, foreign keys).
pub const TPCC_DDL: &str = include_str!("tpcc/invariants.sql");

/// Ticketing's invariants (the ones its `verify` checks that the DDL can state).
pub const TICKETING_DDL: &str = include_str!("ticketing/invariants.sql");
/// Ticketing's flows run through queues of earlier transactions' orders: more samples.
pub const TICKETING_SAMPLES: usize = 160;

/// Ticketing: the 11 booking transactions (ACID procedures), inputs from the workload's mix.
pub fn ticketing_spec() -> anyhow::Result<WorkloadSpec> {
    let w = Ticketing::new(TicketingOptions { seats_per_category: 64, base_txns: 0 }, false)?;
    let mut registry = Registry::new();
    w.register(&mut registry);
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let mut samples: Vec<Vec<Vec<litmus_core::Value>>> = vec![Vec::new(); ticketing::TRANSACTIONS.len()];
    while samples.iter().any(|s| s.len() < TICKETING_SAMPLES) {
        let req = w.generate(&mut rng);
        let i = ticketing::TRANSACTIONS.iter().position(|t| t.kind == req.kind).expect("a known kind");
        if samples[i].len() < TICKETING_SAMPLES {
            samples[i].push(req.args);
        }
    }
    let procedures = ticketing::TRANSACTIONS
        .iter()
        .zip(samples)
        .map(|(t, samples)| ProcSpec { procedure: t.procedure.into(), label: t.kind.into(), samples })
        .collect();
    Ok(WorkloadSpec {
        name: "ticketing".into(),
        named_as: "Ticketing invariants (Salt §8; checked by the workload's verify)".into(),
        ddl: TICKETING_DDL.into(),
        catalog: w.catalog(),
        registry,
        procedures,
    })
}

/// YCSB's invariant: the update counter.
pub const YCSB_DDL: &str = include_str!("ycsb_invariants.sql");

/// YCSB (workload A, one key per transaction): a read and an update transaction.
pub fn ycsb_spec() -> anyhow::Result<WorkloadSpec> {
    let w = Ycsb::new(YcsbOptions::default(), false)?;
    let mut registry = Registry::new();
    w.register(&mut registry);
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let (mut reads, mut updates) = (Vec::new(), Vec::new());
    let mut procedure = "";
    while reads.len() < SAMPLES || updates.len() < SAMPLES {
        let req = w.generate(&mut rng);
        procedure = req.procedure;
        let into = if req.kind == ycsb::KIND_READ { &mut reads } else { &mut updates };
        if into.len() < SAMPLES {
            into.push(req.args);
        }
    }
    let procedures = vec![
        ProcSpec { procedure: procedure.into(), label: ycsb::KIND_READ.into(), samples: reads },
        ProcSpec { procedure: procedure.into(), label: ycsb::KIND_UPDATE.into(), samples: updates },
    ];
    Ok(WorkloadSpec {
        name: "ycsb".into(),
        named_as: "YCSB invariants (checked by the workload's verify)".into(),
        ddl: YCSB_DDL.into(),
        catalog: w.catalog(),
        registry,
        procedures,
    })
}

/// TPC-C: the five transactions (the ACID procedures; the `_base` ones have the same bodies).
pub fn tpcc_spec() -> anyhow::Result<WorkloadSpec> {
    // A small scale: only the input ranges depend on it.
    // Delivery as the one procedure the analysis names (its district steps share its body and
    // its verdict: `declare_tpcc_verdicts`).
    let t = Tpcc::new(&TpccOptions { scale_div: 10, delivery_txns: 1, ..TpccOptions::DEFAULT }, false)?;
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

/// Each analyzed procedure's verdict in the engine's terms ([`Coordination`]), for registering
/// with the procedures (`coordfree` refuses what needs coordination, and assigns sequential ids
/// on one partition): derived from the report, never listed by hand.
pub fn verdicts(report: &litmus_analyze::Report) -> Vec<(String, Coordination)> {
    use litmus_analyze::report::Class;
    use litmus_analyze::{Access, Source};
    let names = |p: &litmus_analyze::report::ProcedureReport| {
        let mut names: Vec<&str> = p.reasons.iter().map(|r| r.invariant.as_str()).collect();
        names.dedup();
        names.join(", ")
    };
    report
        .procedures
        .iter()
        .map(|p| {
            let counter = p.footprint.accesses.iter().find_map(|a| match a {
                Access::Insert { columns, .. } => columns.iter().find_map(|(_, s)| match s {
                    Source::Assigned { counter } => Some(counter.clone()),
                    _ => None,
                }),
                _ => None,
            });
            let verdict = match (p.class, counter) {
                (Class::CoordinationFree, _) => Coordination::Free,
                (Class::SingleSiteCoordination, Some(c)) => {
                    Coordination::SequentialId { table: c.table, column: c.column, invariant: names(p) }
                }
                _ => Coordination::Required {
                    invariant: names(p),
                    operation: p.reasons.first().map_or_else(String::new, |r| r.operation.clone()),
                },
            };
            (p.procedure.clone(), verdict)
        })
        .collect()
}

/// TPC-C's verdicts (analyzed once per process: the analysis records a few hundred runs).
pub fn tpcc_verdicts() -> &'static [(String, Coordination)] {
    static VERDICTS: std::sync::OnceLock<Vec<(String, Coordination)>> = std::sync::OnceLock::new();
    VERDICTS.get_or_init(|| {
        let spec = tpcc_spec().expect("the built-in TPC-C spec is valid");
        verdicts(&analyze(&spec).expect("the built-in TPC-C analysis runs"))
    })
}

/// Registers TPC-C's verdicts with its procedures, the BASE forms sharing their ACID form's.
pub fn declare_tpcc_verdicts(registry: &mut Registry) {
    for (procedure, verdict) in tpcc_verdicts() {
        let base =
            TxnType::CONTENTION_ORDER.iter().find(|t| t.procedure(false) == procedure).map(|t| t.procedure(true));
        let district_step = (procedure == tpcc::txns::DELIVERY_PROC).then_some(tpcc::txns::DELIVERY_DISTRICT_PROC);
        for name in std::iter::once(procedure.as_str()).chain(base).chain(district_step) {
            if registry.get(name).is_ok() {
                registry.declare_coordination(name, verdict.clone()).expect("registered");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use litmus_analyze::report::{judge_all, Class};
    use litmus_analyze::{analyze, Access, Change, ColRef, Report, Source, Verdict};

    fn tpcc() -> Report {
        analyze(&tpcc_spec().unwrap()).unwrap()
    }

    /// The paper's Table 3: every condition with its type, and exactly 3.3.2.2 and 3.3.2.3 not
    /// I-confluent, through New-Order (Claim 5) and Delivery.
    #[test]
    fn table_3_tpcc_consistency_conditions() {
        let r = tpcc();
        let named: Vec<(&str, &str, bool)> =
            r.named().map(|i| (i.name.as_str(), i.type_label.as_str(), i.needs_coordination)).collect();
        assert_eq!(
            named,
            vec![
                ("3.3.2.1", "MV", false),
                ("3.3.2.2", "S_ID", true),
                ("3.3.2.3", "S_ID", true),
                ("3.3.2.4", "MV", false),
                ("3.3.2.5", "FK", false),
                ("3.3.2.6", "MV", false),
                ("3.3.2.7", "FK", false),
                ("3.3.2.8", "MV", false),
                ("3.3.2.9", "MV", false),
                ("3.3.2.10", "MV", false),
                ("3.3.2.11", "FK", false),
                ("3.3.2.12", "MV", false),
            ]
        );
        assert_eq!(r.summary.named_confluent, 10);
        assert_eq!(r.summary.named_need_coordination, vec!["3.3.2.2", "3.3.2.3"]);
        assert!(r.summary.other_need_coordination.is_empty(), "{:?}", r.summary.other_need_coordination);
        for name in ["3.3.2.2", "3.3.2.3"] {
            let inv = r.invariants.iter().find(|i| i.name == name).unwrap();
            assert_eq!(inv.verdict, Verdict::No);
            assert_eq!(inv.transactions, vec!["new-order", "delivery"], "{name}");
            assert!(inv.pairs.iter().any(|p| p.label == "new-order"
                && p.judgement.verdict == Verdict::No
                && p.judgement.rule == "Claim 5"));
            assert!(inv.pairs.iter().any(|p| p.label == "delivery" && p.judgement.verdict.needs_coordination()));
        }
        // Table 3's transaction columns where they name one transaction.
        let txns = |n: &str| r.invariants.iter().find(|i| i.name == n).unwrap().transactions.clone();
        assert_eq!(txns("3.3.2.1"), vec!["payment"]);
        assert_eq!(txns("3.3.2.4"), vec!["new-order"]);
        assert_eq!(txns("3.3.2.6"), vec!["new-order"]);
        assert_eq!(txns("3.3.2.9"), vec!["payment"]);
        let class = |l: &str| r.procedures.iter().find(|p| p.label == l).unwrap().class;
        assert_eq!(class("new-order"), Class::SingleSiteCoordination);
        assert_eq!(class("delivery"), Class::Coordinated);
        for l in ["payment", "order-status", "stock-level"] {
            assert_eq!(class(l), Class::CoordinationFree, "{l}");
        }
        assert_eq!(r.summary.procedures_need_coordination, vec!["new-order", "delivery"]);
    }

    #[test]
    fn the_json_report_says_the_same() {
        let r = tpcc();
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["summary"]["named"], 12);
        assert_eq!(v["summary"]["named_need_coordination"], serde_json::json!(["3.3.2.2", "3.3.2.3"]));
        let text = r.text();
        assert!(text.contains("10 of 12 I-confluent; need coordination: 3.3.2.2, 3.3.2.3"), "{text}");
    }

    /// The footprints come from running the real procedures, not from a list.
    #[test]
    fn footprints_are_derived_from_the_real_procedures() {
        let r = tpcc();
        let fp = |l: &str| &r.procedures.iter().find(|p| p.label == l).unwrap().footprint;
        let next_o_id = ColRef::new(tpcc::schema::DISTRICT, "d_next_o_id");
        let no = fp("new-order");
        assert!(no.committed > 0);
        assert!(no.accesses.contains(&Access::Update { col: next_o_id.clone(), change: Change::Increment }));
        let assigned = Source::Assigned { counter: next_o_id };
        for table in [tpcc::schema::ORDERS, tpcc::schema::NEW_ORDER, tpcc::schema::ORDER_LINE] {
            assert!(
                no.accesses.iter().any(|a| matches!(a, Access::Insert { table: t, upsert: false, columns }
                    if t == table && columns.iter().any(|(_, s)| *s == assigned))),
                "{table}'s order id is assigned from d_next_o_id"
            );
        }
        assert!(no.accesses.iter().any(|a| matches!(a, Access::Insert { table, upsert: true, .. }
            if table == tpcc::schema::CUSTOMER_LAST_ORDER)));
        let pay = fp("payment");
        assert!(pay.accesses.contains(&Access::Update {
            col: ColRef::new(tpcc::schema::CUSTOMER, "c_balance"),
            change: Change::Decrement
        }));
        assert!(pay.accesses.contains(&Access::Update {
            col: ColRef::new(tpcc::schema::WAREHOUSE, "w_ytd"),
            change: Change::Increment
        }));
        // c_credit's declared domain ('GC', 'BC') reaches the bad-credit branch.
        assert!(pay
            .accesses
            .contains(&Access::Update { col: ColRef::new(tpcc::schema::CUSTOMER, "c_data"), change: Change::Assign }));
        let del = fp("delivery");
        assert!(del.accesses.contains(&Access::Delete { table: tpcc::schema::NEW_ORDER.into() }));
        assert!(del.accesses.contains(&Access::Update {
            col: ColRef::new(tpcc::schema::ORDERS, "o_carrier_id"),
            change: Change::Assign
        }));
        assert!(fp("stock-level").writes().next().is_none());
        assert!(fp("order-status").writes().next().is_none());
    }

    /// Ticketing: the booking counter's `free -= k` under `free >= 0` is §5.2's textbook case
    /// (Claim 13), its order ids come from a counter (Claim 5), and the read-only transactions
    /// are coordination-free; add-customer's read-then-write of a counter is a lost update.
    #[test]
    fn ticketing_create_order_needs_coordination_and_the_displays_do_not() {
        let r = analyze(&ticketing_spec().unwrap()).unwrap();
        let proc = |l: &str| r.procedures.iter().find(|p| p.label == l).unwrap();
        let create = proc("create-order");
        assert!(create.reasons.iter().any(|p| p.invariant == "free seats >= 0" && p.judgement.rule == "Claim 13"));
        assert!(create
            .reasons
            .iter()
            .any(|p| p.invariant == "order ids from next_order" && p.judgement.rule == "Claim 5"));
        assert!(create.footprint.accesses.iter().any(|a| matches!(a, Access::Insert { table, columns, .. }
            if table == ticketing::ORDER && columns[0].1 == Source::Assigned { counter: ColRef::new(ticketing::CATEGORY, "next_order") })));
        for l in ["browse-events", "view-seat-map", "check-availability"] {
            assert_eq!(proc(l).class, Class::CoordinationFree, "{l}");
        }
        assert!(proc("add-customer").reasons.iter().any(|p| p.invariant == "orders per customer"));
        // The recording reached the flows behind the queues: payment creates tickets.
        assert!(proc("payment").footprint.accesses.iter().any(|a| matches!(a, Access::Insert { table, .. }
            if table == ticketing::TICKET)));
    }

    /// YCSB: blind updates of a counter row and reads need no coordination (Claims 11, 14).
    #[test]
    fn ycsb_is_coordination_free() {
        let r = analyze(&ycsb_spec().unwrap()).unwrap();
        assert!(r.summary.procedures_need_coordination.is_empty(), "{}", r.text());
        assert_eq!(r.summary.named, 2);
        let update = r.procedures.iter().find(|p| p.label == "update").unwrap();
        assert!(update.footprint.accesses.contains(&Access::Update {
            col: ColRef::new(ycsb::TABLE, ycsb::UPDATES_COLUMN),
            change: Change::Increment
        }));
    }

    /// The BASE procedures have the same bodies (plus alkaline boundaries and zero-adds that
    /// only take locks): the same verdicts.
    #[test]
    fn base_procedures_get_the_same_verdicts() {
        let mut spec = tpcc_spec().unwrap();
        for p in &mut spec.procedures {
            let ty = TxnType::of_kind(&p.label).unwrap();
            p.procedure = ty.procedure(true).into();
        }
        let base = analyze(&spec).unwrap();
        let acid = tpcc();

        let classes = |r: &Report| r.procedures.iter().map(|p| (p.label.clone(), p.class)).collect::<Vec<_>>();
        assert_eq!(classes(&base), classes(&acid));
        assert_eq!(base.summary.named_need_coordination, acid.summary.named_need_coordination);
    }

    /// A footprint or an invariant broken by hand must be flagged: the analyzer is not a
    /// rubber stamp.
    #[test]
    fn hand_broken_footprints_and_invariants_are_flagged() {
        let spec = tpcc_spec().unwrap();
        let schema = litmus_analyze::ddl::parse(&spec.ddl).unwrap();
        let recorded = analyze(&spec).unwrap();
        let footprints = |edit: &dyn Fn(&str, &mut std::collections::BTreeSet<Access>)| {
            spec.procedures
                .iter()
                .map(|p| {
                    let mut fp =
                        recorded.procedures.iter().find(|r| r.procedure == p.procedure).unwrap().footprint.clone();
                    edit(&p.label, &mut fp.accesses);
                    (p, fp)
                })
                .collect::<Vec<_>>()
        };
        // Payment maintaining w_ytd by read-modify-write (assign) instead of an increment.
        let w_ytd = ColRef::new(tpcc::schema::WAREHOUSE, "w_ytd");
        let r = judge_all(
            &spec,
            &schema,
            footprints(&|label, acc| {
                if label == "payment" {
                    acc.remove(&Access::Update { col: w_ytd.clone(), change: Change::Increment });
                    acc.insert(Access::Update { col: w_ytd.clone(), change: Change::Assign });
                }
            }),
        );
        assert_eq!(r.summary.named_need_coordination, vec!["3.3.2.1", "3.3.2.2", "3.3.2.3", "3.3.2.8"]);
        assert!(r.summary.procedures_need_coordination.contains(&"payment".to_string()));
        // New-Order inserting orders under an id it chose rather than one the district assigned.
        let r = judge_all(
            &spec,
            &schema,
            footprints(&|label, acc| {
                if label == "new-order" {
                    let chosen: Vec<Access> = acc
                        .iter()
                        .map(|a| match a {
                            Access::Insert { table, upsert, columns } if table == tpcc::schema::ORDERS => {
                                Access::Insert {
                                    table: table.clone(),
                                    upsert: *upsert,
                                    columns: columns.iter().map(|(c, _)| (c.clone(), Source::Chosen)).collect(),
                                }
                            }
                            other => other.clone(),
                        })
                        .collect();
                    *acc = chosen.into_iter().collect();
                }
            }),
        );
        let pk = r.invariants.iter().find(|i| i.name == "tpcc_orders: PRIMARY KEY").unwrap();
        assert_eq!(pk.verdict, Verdict::No);
        assert!(pk.rules.contains(&"Claim 3".to_string()));
        // An invariant Payment cannot keep without coordination: a non-negative balance.
        let mut strict = spec.clone();
        strict.ddl =
            strict.ddl.replace("c_balance DECIMAL NOT NULL,", "c_balance DECIMAL NOT NULL CHECK (c_balance >= 0),");
        assert_ne!(strict.ddl, spec.ddl);
        let r = analyze(&strict).unwrap();
        let check = r.invariants.iter().find(|i| i.sql.contains("c_balance >= 0")).unwrap();
        assert!(check.pairs.iter().any(|p| p.label == "payment" && p.judgement.rule == "Claim 13"));
        assert!(r.summary.procedures_need_coordination.contains(&"payment".to_string()));
    }
}
