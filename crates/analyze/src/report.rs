//! The analysis of a workload and its report (text and JSON).

use crate::ddl::{self, DdlError};
use crate::footprint::{Access, Footprint, RecordError, Recorder, Source};
use crate::invariant::{Clause, Invariant, Schema};
use crate::rules::{judge, Judgement, Verdict};
use litmus_core::{Catalog, Value};
use litmus_protocol::Registry;
use serde::Serialize;
use std::fmt::Write as _;

/// One procedure to analyze: its registered name, the label the report uses (a workload's
/// transaction kind, e.g. `new-order`) and argument samples from the workload's generator.
#[derive(Clone, Debug)]
pub struct ProcSpec {
    pub procedure: String,
    pub label: String,
    pub samples: Vec<Vec<Value>>,
}

/// Everything the analyzer needs about a workload.
#[derive(Clone, Debug)]
pub struct WorkloadSpec {
    pub name: String,
    /// What the named invariants are, for the report header (e.g. TPC-C's consistency
    /// conditions, clause 3.3.2).
    pub named_as: String,
    /// The DDL: tables and declared invariants.
    pub ddl: String,
    pub catalog: Catalog,
    pub registry: Registry,
    pub procedures: Vec<ProcSpec>,
}

#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error("{workload}: {error}")]
    Ddl { workload: String, error: DdlError },
    #[error("{0}")]
    Record(#[from] RecordError),
    #[error("unknown procedure {0}")]
    UnknownProcedure(String),
    #[error("{0}")]
    Declared(#[from] crate::declared::DeclError),
    #[error("{0}")]
    SqlScript(#[from] crate::sql::SqlScriptError),
}

/// One (invariant, procedure, operation) pair with its judgement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pair {
    pub invariant: String,
    pub procedure: String,
    pub label: String,
    pub operation: String,
    #[serde(flatten)]
    pub judgement: Judgement,
}

/// An invariant's verdict over every procedure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InvariantReport {
    pub name: String,
    pub named: bool,
    pub table: String,
    #[serde(rename = "type")]
    pub type_label: String,
    pub sql: String,
    pub verdict: Verdict,
    pub needs_coordination: bool,
    /// Labels of the procedures that write what it constrains.
    pub transactions: Vec<String>,
    /// Claims (and §5.3 for unrecognised pairs) that decided it.
    pub rules: Vec<String>,
    pub pairs: Vec<Pair>,
}

/// How a procedure can run, from the verdicts of its pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// Every pair is I-confluent: no coordination (Theorem 1).
    CoordinationFree,
    /// Only sequential id assignment from a counter row needs coordination, which can stay on
    /// that row's partition: a nested atomic increment at commit (§6.1).
    SingleSiteCoordination,
    /// Coordination across the transaction (serializable execution).
    Coordinated,
}

impl Class {
    pub fn engine(self) -> &'static str {
        match self {
            Class::CoordinationFree => "coordfree; any ACID engine is also correct",
            Class::SingleSiteCoordination => "coordfree (single-site id assignment at commit, §6.2); or acid",
            Class::Coordinated => "acid (serializable 2PL)",
        }
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Class::CoordinationFree => "coordination-free",
            Class::SingleSiteCoordination => "single-site coordination",
            Class::Coordinated => "coordinated",
        })
    }
}

/// A procedure's verdict: which pairs force coordination, and its footprint.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProcedureReport {
    pub procedure: String,
    pub label: String,
    pub needs_coordination: bool,
    pub class: Class,
    pub engine: String,
    /// The pairs that are not I-confluent or not recognised.
    pub reasons: Vec<Pair>,
    pub footprint: Footprint,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub named: usize,
    pub named_confluent: usize,
    pub named_need_coordination: Vec<String>,
    pub other: usize,
    pub other_need_coordination: Vec<String>,
    pub procedures_need_coordination: Vec<String>,
}

/// The whole analysis.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub workload: String,
    pub named_as: String,
    pub invariants: Vec<InvariantReport>,
    pub procedures: Vec<ProcedureReport>,
    pub summary: Summary,
}

/// Parses the DDL, checks it against the catalog, records every procedure's footprint and
/// judges every (invariant, operation) pair.
pub fn analyze(spec: &WorkloadSpec) -> Result<Report, AnalyzeError> {
    let ddl_err = |error| AnalyzeError::Ddl { workload: spec.name.clone(), error };
    let schema = ddl::parse(&spec.ddl).map_err(ddl_err)?;
    ddl::check_against(&schema, &spec.catalog).map_err(ddl_err)?;
    let recorder = Recorder::new(&spec.catalog, &schema);
    let mut procs = Vec::new();
    for p in &spec.procedures {
        let proc = spec.registry.get(&p.procedure).map_err(|_| AnalyzeError::UnknownProcedure(p.procedure.clone()))?;
        procs.push((proc, p.samples.as_slice()));
    }
    let recorded = recorder.record_all(&procs)?;
    Ok(judge_all(spec, &schema, spec.procedures.iter().zip(recorded).collect()))
}

/// Analyzes a user's own DDL with declared footprints (nothing recorded, no catalog).
pub fn analyze_declared(
    name: &str,
    ddl_text: &str,
    declared: &crate::declared::DeclaredProcedures,
) -> Result<Report, AnalyzeError> {
    let schema = ddl::parse(ddl_text).map_err(|error| AnalyzeError::Ddl { workload: name.into(), error })?;
    let footprints = declared.footprints(&schema)?;
    let spec = WorkloadSpec {
        name: name.into(),
        named_as: "Named invariants".into(),
        ddl: ddl_text.into(),
        catalog: Catalog::new(),
        registry: Registry::new(),
        procedures: footprints
            .iter()
            .map(|f| ProcSpec { procedure: f.procedure.clone(), label: f.procedure.clone(), samples: vec![] })
            .collect(),
    };
    let pairs = spec.procedures.iter().zip(footprints).collect();
    Ok(judge_all(&spec, &schema, pairs))
}

/// Analyzes a script of SQL transactions (`litmus analyze --schema my.sql --sql txns.sql`)
/// against the invariants of `ddl_text`, both as LitmusDB's SQL reads them ([`crate::sql`]).
pub fn analyze_sql(name: &str, ddl_text: &str, script: &str) -> Result<Report, AnalyzeError> {
    let schema =
        crate::sql::sql_schema(ddl_text).map_err(|error| AnalyzeError::Ddl { workload: name.into(), error })?;
    let txns = crate::sql::parse_script(script)?;
    let footprints = crate::sql::footprints(&schema, &txns)?;
    let spec = WorkloadSpec {
        name: name.into(),
        named_as: "Named invariants".into(),
        ddl: ddl_text.into(),
        catalog: Catalog::new(),
        registry: Registry::new(),
        procedures: footprints
            .iter()
            .map(|f| ProcSpec { procedure: f.procedure.clone(), label: f.procedure.clone(), samples: vec![] })
            .collect(),
    };
    let pairs = spec.procedures.iter().zip(footprints).collect();
    Ok(judge_all(&spec, &schema, pairs))
}

/// Judges recorded (or hand-made) footprints against a schema's invariants.
pub fn judge_all(spec: &WorkloadSpec, schema: &Schema, footprints: Vec<(&ProcSpec, Footprint)>) -> Report {
    let mut invariants = Vec::new();
    let mut all_pairs: Vec<Pair> = Vec::new();
    for inv in &schema.invariants {
        let pairs = pairs_of(inv, &footprints);
        let verdict = pairs.iter().map(|p| p.judgement.verdict).max().unwrap_or(Verdict::Yes);
        let mut transactions: Vec<String> = Vec::new();
        let mut rules: Vec<String> = Vec::new();
        for p in &pairs {
            if !transactions.contains(&p.label) {
                transactions.push(p.label.clone());
            }
            if !rules.contains(&p.judgement.rule) {
                rules.push(p.judgement.rule.clone());
            }
        }
        all_pairs.extend(pairs.iter().cloned());
        invariants.push(InvariantReport {
            name: inv.name.clone(),
            named: inv.named,
            table: inv.table.clone(),
            type_label: inv.type_label(),
            sql: inv.sql.clone(),
            verdict,
            needs_coordination: verdict.needs_coordination(),
            transactions,
            rules,
            pairs,
        });
    }
    // Named invariants first, in natural order (3.3.2.2 before 3.3.2.10), then the others in
    // declaration order.
    invariants.sort_by(|a, b| {
        b.named.cmp(&a.named).then_with(|| {
            if a.named {
                natural_key(&a.name).cmp(&natural_key(&b.name))
            } else {
                std::cmp::Ordering::Equal
            }
        })
    });
    let mut procedures = Vec::new();
    for (p, fp) in footprints {
        let reasons: Vec<Pair> = all_pairs
            .iter()
            .filter(|x| x.procedure == p.procedure && x.judgement.verdict.needs_coordination())
            .cloned()
            .collect();
        let class = if reasons.is_empty() {
            Class::CoordinationFree
        } else if reasons.iter().all(|r| single_site(schema, r, &fp)) {
            Class::SingleSiteCoordination
        } else {
            Class::Coordinated
        };
        procedures.push(ProcedureReport {
            procedure: p.procedure.clone(),
            label: p.label.clone(),
            needs_coordination: !reasons.is_empty(),
            class,
            engine: class.engine().into(),
            reasons,
            footprint: fp,
        });
    }
    let named: Vec<&InvariantReport> = invariants.iter().filter(|i| i.named).collect();
    let other: Vec<&InvariantReport> = invariants.iter().filter(|i| !i.named).collect();
    let summary = Summary {
        named: named.len(),
        named_confluent: named.iter().filter(|i| !i.needs_coordination).count(),
        named_need_coordination: named.iter().filter(|i| i.needs_coordination).map(|i| i.name.clone()).collect(),
        other: other.len(),
        other_need_coordination: other.iter().filter(|i| i.needs_coordination).map(|i| i.name.clone()).collect(),
        procedures_need_coordination: procedures
            .iter()
            .filter(|p| p.needs_coordination)
            .map(|p| p.label.clone())
            .collect(),
    };
    Report { workload: spec.name.clone(), named_as: spec.named_as.clone(), invariants, procedures, summary }
}

/// `3.3.2.10` → `["", 3, ".", 3, ".", 2, ".", 10]`-like chunks that sort numbers by value.
fn natural_key(s: &str) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 {
            out.push((rest[..digits].parse().unwrap_or(u64::MAX), String::new()));
            rest = &rest[digits..];
        } else {
            let text = rest.len() - rest.trim_start_matches(|c: char| !c.is_ascii_digit()).len();
            out.push((0, rest[..text].to_string()));
            rest = &rest[text..];
        }
    }
    out
}

fn pairs_of(inv: &Invariant, footprints: &[(&ProcSpec, Footprint)]) -> Vec<Pair> {
    let mut out: Vec<Pair> = Vec::new();
    for (p, fp) in footprints {
        for a in &fp.accesses {
            // The worst judgement of the invariant's clauses for this access.
            let j = inv.clauses.iter().filter_map(|c| judge(c, a, fp)).max_by_key(|j| j.verdict);
            if let Some(judgement) = j {
                out.push(Pair {
                    invariant: inv.name.clone(),
                    procedure: p.procedure.clone(),
                    label: p.label.clone(),
                    operation: a.to_string(),
                    judgement,
                });
            }
        }
    }
    out
}

/// Whether a reason is sequential id assignment from a counter row (an increment of the
/// counter, or an insert whose id the counter assigned): coordination confined to the
/// counter row's partition (§6.1).
fn single_site(schema: &Schema, r: &Pair, fp: &Footprint) -> bool {
    let Some(inv) = schema.invariants.iter().find(|i| i.name == r.invariant) else { return false };
    let access = fp.accesses.iter().find(|a| a.to_string() == r.operation);
    inv.clauses.iter().all(|c| matches!(c, Clause::Sequential { .. } | Clause::NextId { .. }))
        && match access {
            Some(Access::Update { .. }) => r.judgement.verdict == Verdict::No,
            Some(Access::Insert { columns, .. }) => columns.iter().any(|(_, s)| matches!(s, Source::Assigned { .. })),
            _ => false,
        }
}

impl Report {
    /// The named invariants, in declaration order.
    pub fn named(&self) -> impl Iterator<Item = &InvariantReport> {
        self.invariants.iter().filter(|i| i.named)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serializes")
    }

    /// The report as text.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let runs: u64 = self.procedures.iter().map(|p| p.footprint.runs).sum();
        let _ = writeln!(
            s,
            "litmus analyze {}: invariant confluence (Bailis et al., VLDB'15) — Table 2's rules over {} procedures' \
             footprints, derived from {runs} recorded runs",
            self.workload,
            self.procedures.len()
        );
        let _ = writeln!(s);
        let _ = writeln!(s, "{}:", self.named_as);
        let width = self.named().map(|i| i.name.len()).max().unwrap_or(4).max(9);
        let tw = self.named().map(|i| i.transactions.join(", ").len()).max().unwrap_or(0).max(12);
        let yw = self.named().map(|i| i.type_label.len()).max().unwrap_or(0).max(4);
        let _ = writeln!(s, "  {:width$}  {:yw$}  {:tw$}  verdict", "invariant", "type", "transactions");
        for i in self.named() {
            let _ = writeln!(
                s,
                "  {:width$}  {:yw$}  {:tw$}  {}",
                i.name,
                i.type_label,
                if i.transactions.is_empty() { "-".to_string() } else { i.transactions.join(", ") },
                verdict_line(i)
            );
        }
        let sm = &self.summary;
        let _ = writeln!(
            s,
            "{} of {} I-confluent; need coordination: {}",
            sm.named_confluent,
            sm.named,
            if sm.named_need_coordination.is_empty() { "none".into() } else { sm.named_need_coordination.join(", ") }
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Other declared invariants (keys, NOT NULL, foreign keys, checks): {}, {}",
            sm.other,
            if sm.other_need_coordination.is_empty() {
                "all I-confluent".to_string()
            } else {
                format!("need coordination: {}", sm.other_need_coordination.join(", "))
            }
        );
        for i in self.invariants.iter().filter(|i| !i.named && i.needs_coordination) {
            let _ = writeln!(s, "  {}  {}", i.name, verdict_line(i));
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "Procedures:");
        for p in &self.procedures {
            let _ = writeln!(
                s,
                "  {} ({}): {} — class: {}; engine: {}",
                p.label,
                p.procedure,
                if p.needs_coordination { "NEEDS COORDINATION" } else { "coordination-free" },
                p.class,
                p.engine
            );
            let mut seen: Vec<String> = Vec::new();
            for r in &p.reasons {
                let line = format!(
                    "    {} × {}: {} ({}): {}",
                    r.invariant, r.operation, r.judgement.verdict, r.judgement.rule, r.judgement.why
                );
                if !seen.contains(&line) {
                    let _ = writeln!(s, "{line}");
                    seen.push(line);
                }
            }
            let writes: Vec<String> = p.footprint.writes().map(|a| a.to_string()).collect();
            let how = if p.footprint.runs == 0 {
                "declared".to_string()
            } else if p.footprint.panicked > 0 {
                format!(
                    "{} runs, {} committed, {} panicked on synthetic data",
                    p.footprint.runs, p.footprint.committed, p.footprint.panicked
                )
            } else {
                format!("{} runs, {} committed", p.footprint.runs, p.footprint.committed)
            };
            let _ = writeln!(
                s,
                "    footprint ({how}): {}",
                if writes.is_empty() { "reads only".into() } else { writes.join("; ") }
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Sound, not complete (§5.3): a pair no Claim decides is reported as potentially not I-confluent."
        );
        s
    }
}

fn verdict_line(i: &InvariantReport) -> String {
    if !i.needs_coordination {
        let rules = i.rules.join(", ");
        return if rules.is_empty() {
            "I-confluent (no transaction writes it)".into()
        } else {
            format!("I-confluent ({rules})")
        };
    }
    // Per transaction, the worst pair.
    let mut parts: Vec<String> = Vec::new();
    for t in &i.transactions {
        let worst = i.pairs.iter().filter(|p| &p.label == t).max_by_key(|p| p.judgement.verdict).expect("has pairs");
        if worst.judgement.verdict.needs_coordination() {
            let v = if worst.judgement.verdict == Verdict::No { "not I-confluent" } else { "potentially not" };
            parts.push(format!("{t}: {v}, {}", worst.judgement.rule));
        }
    }
    format!("NEEDS COORDINATION — {}", parts.join("; "))
}
