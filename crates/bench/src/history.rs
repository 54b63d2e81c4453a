//! # `--history out.edn`: transaction histories for external checkers (Elle's rw-register)
//!
//! A bench run with `--history PATH` writes every logical transaction it ran as two operations
//! in the format of [Elle](https://github.com/jepsen-io/elle)'s `rw-register` checker (and
//! Jepsen's), one EDN map per line:
//!
//! ```text
//!   {:index 0, :type :invoke, :f :txn, :value [[:r 6 nil] [:w 9 77]], :process 0, :time 1200}
//!   {:index 1, :type :ok, :f :txn, :value [[:r 6 41] [:w 9 77]], :process 0, :time 5300}
//! ```
//!
//! * `:invoke` when the transaction starts (reads unknown: `nil`), then one completion:
//!   `:ok` (committed; reads filled in), `:fail` (never committed: every attempt aborted and the
//!   harness gave up, or the procedure aborted itself — no attempt had an effect), or `:info`
//!   (outcome unknown: a timeout or lost connection). Retried attempts of one transaction are
//!   one operation: an aborted attempt has no effect, and its writes carry the same values.
//! * `:process` is the bench client; after an `:info` the client continues as a new process
//!   (`process + clients`), as Jepsen does, since the old one may still be running.
//! * `:time` is nanoseconds since the run began; `:index` counts lines from 0.
//! * Written values are unique per key (the workload's job, e.g. ycsb-t writes its random
//!   transaction id as the row's stamp), so a checker can tell which write a read saw; the
//!   loaded initial value reads as `nil`.
//!
//! Only workloads that implement [`litmus_workloads::Workload::history`] can record one (ycsb-t).
//! [`check`] is a small in-repo check of a history's shape and of its reads (no read of a value
//! never written, nor of a failed transaction's write); the full isolation analysis is Elle's.

use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};
use std::io::{BufRead, Write};
use std::sync::Mutex;
use std::time::Instant;

pub use litmus_workloads::workload::MicroOp;

/// An operation's `:type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpType {
    Invoke,
    Ok,
    Fail,
    Info,
}

impl OpType {
    fn name(self) -> &'static str {
        match self {
            OpType::Invoke => "invoke",
            OpType::Ok => "ok",
            OpType::Fail => "fail",
            OpType::Info => "info",
        }
    }
}

/// One line of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryOp {
    pub index: u64,
    pub kind: OpType,
    pub process: u64,
    pub time_ns: u64,
    pub value: Vec<MicroOp>,
}

impl fmt::Display for HistoryOp {
    /// The op as one line of EDN (no newline).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut value = String::new();
        for (i, m) in self.value.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            let _ = match m {
                MicroOp::Read { key, value: Some(v) } => write!(value, "{sep}[:r {key} {v}]"),
                MicroOp::Read { key, value: None } => write!(value, "{sep}[:r {key} nil]"),
                MicroOp::Write { key, value: v } => write!(value, "{sep}[:w {key} {v}]"),
            };
        }
        write!(
            f,
            "{{:index {}, :type :{}, :f :txn, :value [{value}], :process {}, :time {}}}",
            self.index,
            self.kind.name(),
            self.process,
            self.time_ns
        )
    }
}

/// A history line that is not an op of the shape [`HistoryOp`] writes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("history line {line}: {what}")]
pub struct ParseError {
    pub line: usize,
    pub what: String,
}

/// Splits EDN text into tokens: `{`, `}`, `[`, `]`, and atoms (keywords, numbers, `nil`);
/// commas are whitespace.
fn tokens(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices() {
        let delim = matches!(c, '{' | '}' | '[' | ']');
        if delim || c.is_whitespace() || c == ',' {
            if let Some(st) = start.take() {
                out.push(&s[st..i]);
            }
            if delim {
                out.push(&s[i..i + 1]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(st) = start {
        out.push(&s[st..]);
    }
    out
}

/// Parses one line written by [`HistoryOp`]'s `Display` (keys in any order).
pub fn parse_line(line: usize, text: &str) -> Result<HistoryOp, ParseError> {
    let err = |what: String| ParseError { line, what };
    let t = tokens(text);
    if t.first() != Some(&"{") || t.last() != Some(&"}") {
        return Err(err("not an EDN map".into()));
    }
    let int = |s: &str| s.parse::<i64>().map_err(|_| err(format!("expected an integer, got {s:?}")));
    let uint = |s: &str| s.parse::<u64>().map_err(|_| err(format!("expected a non-negative integer, got {s:?}")));
    let (mut index, mut kind, mut process, mut time, mut value, mut f) = (None, None, None, None, None, None);
    let mut i = 1;
    while i + 1 < t.len() {
        let key = t[i];
        i += 1;
        match key {
            ":value" => {
                if t.get(i) != Some(&"[") {
                    return Err(err(":value is not a vector".into()));
                }
                i += 1;
                let mut ops = Vec::new();
                while t.get(i) == Some(&"[") {
                    let (Some(f), Some(k), Some(v), Some("]")) =
                        (t.get(i + 1), t.get(i + 2), t.get(i + 3), t.get(i + 4).copied())
                    else {
                        return Err(err("a micro-op is not [f k v]".into()));
                    };
                    let key = int(k)?;
                    ops.push(match *f {
                        ":r" => MicroOp::Read { key, value: if *v == "nil" { None } else { Some(int(v)?) } },
                        ":w" => MicroOp::Write { key, value: int(v)? },
                        other => return Err(err(format!("unknown micro-op {other}"))),
                    });
                    i += 5;
                }
                if t.get(i) != Some(&"]") {
                    return Err(err(":value is not closed".into()));
                }
                i += 1;
                value = Some(ops);
            }
            _ => {
                let v = *t.get(i).ok_or_else(|| err(format!("{key} has no value")))?;
                i += 1;
                match key {
                    ":index" => index = Some(uint(v)?),
                    ":process" => process = Some(uint(v)?),
                    ":time" => time = Some(uint(v)?),
                    ":f" => f = Some(v),
                    ":type" => {
                        kind = Some(match v {
                            ":invoke" => OpType::Invoke,
                            ":ok" => OpType::Ok,
                            ":fail" => OpType::Fail,
                            ":info" => OpType::Info,
                            other => return Err(err(format!("unknown :type {other}"))),
                        })
                    }
                    other => return Err(err(format!("unknown key {other}"))),
                }
            }
        }
    }
    if f != Some(":txn") {
        return Err(err(":f is not :txn".into()));
    }
    let missing = |k: &str| err(format!("no {k}"));
    Ok(HistoryOp {
        index: index.ok_or_else(|| missing(":index"))?,
        kind: kind.ok_or_else(|| missing(":type"))?,
        process: process.ok_or_else(|| missing(":process"))?,
        time_ns: time.ok_or_else(|| missing(":time"))?,
        value: value.ok_or_else(|| missing(":value"))?,
    })
}

/// Reads a whole history (blank lines skipped).
pub fn parse(r: impl BufRead) -> Result<Vec<HistoryOp>, ParseError> {
    let mut ops = Vec::new();
    for (n, line) in r.lines().enumerate() {
        let line = line.map_err(|e| ParseError { line: n + 1, what: e.to_string() })?;
        if !line.trim().is_empty() {
            ops.push(parse_line(n + 1, &line)?);
        }
    }
    Ok(ops)
}

/// What [`check`] counted in a sound history.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistorySummary {
    pub ok: u64,
    pub fail: u64,
    pub info: u64,
    /// Reads in `:ok` transactions that saw a written value (not the initial `nil`).
    pub reads_of_writes: u64,
}

/// Checks a history's shape and reads; every problem found, or what it counted.
///
/// Shape: indices count from 0, times never go back, each process alternates an invocation and
/// its completion (writing what it invoked), and no process is reused after `:info`. Reads: a
/// value is written at most once per key, and every read of an `:ok` transaction sees `nil`
/// (the initial value), its own earlier write, or a value some transaction that did not fail
/// wrote to that key (a read of a failed write is Adya's G1a, aborted read).
pub fn check(ops: &[HistoryOp]) -> Result<HistorySummary, Vec<String>> {
    let mut problems = Vec::new();
    let mut summary = HistorySummary::default();
    let mut open: HashMap<u64, &HistoryOp> = HashMap::new();
    let mut crashed: Vec<u64> = Vec::new();
    // (key, value) -> whether its writer failed.
    let mut written: HashMap<(i64, i64), bool> = HashMap::new();
    let mut last_time = 0;
    for (i, op) in ops.iter().enumerate() {
        if op.index != i as u64 {
            problems.push(format!("op {i} has :index {}", op.index));
        }
        if op.time_ns < last_time {
            problems.push(format!("op {i}: time goes back ({} < {last_time})", op.time_ns));
        }
        last_time = op.time_ns;
        if crashed.contains(&op.process) {
            problems.push(format!("op {i}: process {} is used after its :info", op.process));
        }
        match (op.kind, open.remove(&op.process)) {
            (OpType::Invoke, None) => {
                open.insert(op.process, op);
            }
            (OpType::Invoke, Some(prev)) => {
                problems.push(format!("op {i}: process {} invokes while op {} is open", op.process, prev.index));
                open.insert(op.process, op);
            }
            (_, None) => problems.push(format!("op {i}: process {} completes nothing", op.process)),
            (kind, Some(inv)) => {
                let writes = |o: &HistoryOp| o.value.iter().filter(|m| matches!(m, MicroOp::Write { .. })).count();
                let keys = |o: &HistoryOp| {
                    o.value
                        .iter()
                        .map(|m| match m {
                            MicroOp::Read { key, .. } => (0, *key),
                            MicroOp::Write { key, .. } => (1, *key),
                        })
                        .collect::<Vec<_>>()
                };
                if keys(inv) != keys(op)
                    || writes(inv) != writes(op)
                    || inv.value.iter().zip(&op.value).any(|(a, b)| matches!(a, MicroOp::Write { .. }) && a != b)
                {
                    problems.push(format!("op {i}: completion of op {} differs from what it invoked", inv.index));
                }
                match kind {
                    OpType::Ok => summary.ok += 1,
                    OpType::Fail => summary.fail += 1,
                    OpType::Info => {
                        summary.info += 1;
                        crashed.push(op.process);
                    }
                    OpType::Invoke => unreachable!("matched above"),
                }
                for m in &op.value {
                    if let MicroOp::Write { key, value } = *m {
                        if written.insert((key, value), kind == OpType::Fail).is_some() {
                            problems.push(format!("op {i}: value {value} written to key {key} twice"));
                        }
                    }
                }
            }
        }
    }
    for op in ops.iter().filter(|o| o.kind == OpType::Ok) {
        let mut own: BTreeMap<i64, i64> = BTreeMap::new();
        for m in &op.value {
            match *m {
                MicroOp::Write { key, value } => {
                    own.insert(key, value);
                }
                MicroOp::Read { value: None, .. } => {}
                MicroOp::Read { key, value: Some(v) } => {
                    summary.reads_of_writes += 1;
                    if own.get(&key) == Some(&v) {
                        continue;
                    }
                    match written.get(&(key, v)) {
                        None => problems.push(format!("op {}: read {v} of key {key}, a value never written", op.index)),
                        Some(true) => problems.push(format!(
                            "op {}: read {v} of key {key}, written by a failed transaction (G1a)",
                            op.index
                        )),
                        Some(false) => {}
                    }
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(summary)
    } else {
        Err(problems)
    }
}

/// Appends ops to a history file as a run goes, numbering them in file order (one lock per op:
/// a bench client writes two lines per transaction, far below what a lock costs).
pub struct HistoryWriter {
    inner: Mutex<(Box<dyn Write + Send>, u64)>,
    started: Instant,
}

impl HistoryWriter {
    pub fn new(out: Box<dyn Write + Send>) -> HistoryWriter {
        HistoryWriter { inner: Mutex::new((out, 0)), started: Instant::now() }
    }

    /// Writes one op; index and time are taken under the lock, so both grow in file order.
    pub fn record(&self, kind: OpType, process: u64, value: Vec<MicroOp>) -> std::io::Result<()> {
        let mut g = self.inner.lock().map_err(|_| std::io::Error::other("history writer poisoned"))?;
        let (out, next) = &mut *g;
        let op = HistoryOp { index: *next, kind, process, time_ns: self.started.elapsed().as_nanos() as u64, value };
        *next += 1;
        writeln!(out, "{op}")
    }

    pub fn flush(&self) -> std::io::Result<()> {
        let mut g = self.inner.lock().map_err(|_| std::io::Error::other("history writer poisoned"))?;
        g.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(index: u64, kind: OpType, process: u64, value: Vec<MicroOp>) -> HistoryOp {
        HistoryOp { index, kind, process, time_ns: index * 10, value }
    }
    use MicroOp::{Read as R, Write as W};

    fn sound() -> Vec<HistoryOp> {
        vec![
            op(0, OpType::Invoke, 0, vec![W { key: 1, value: 7 }]),
            op(1, OpType::Invoke, 1, vec![R { key: 1, value: None }, W { key: 2, value: 8 }]),
            op(2, OpType::Ok, 0, vec![W { key: 1, value: 7 }]),
            op(3, OpType::Fail, 1, vec![R { key: 1, value: None }, W { key: 2, value: 8 }]),
            op(4, OpType::Invoke, 1, vec![R { key: 1, value: None }, R { key: 2, value: None }]),
            op(5, OpType::Ok, 1, vec![R { key: 1, value: Some(7) }, R { key: 2, value: None }]),
        ]
    }

    #[test]
    fn ops_print_as_edn_and_parse_back() {
        let ops = sound();
        let text: String = ops.iter().map(|o| format!("{o}\n")).collect();
        assert!(
            text.starts_with("{:index 0, :type :invoke, :f :txn, :value [[:w 1 7]], :process 0, :time 0}\n"),
            "{text}"
        );
        assert!(text.contains("[[:r 1 7] [:r 2 nil]]"), "{text}");
        assert_eq!(parse(text.as_bytes()).unwrap(), ops);
        assert_eq!(check(&ops).unwrap(), HistorySummary { ok: 2, fail: 1, info: 0, reads_of_writes: 1 });
    }

    #[test]
    fn malformed_lines_are_typed_errors() {
        for bad in [
            "",
            "[1 2]",
            "{:index 0}",
            "{:index x, :type :ok, :f :txn, :value [], :process 0, :time 0}",
            "{:index 0, :type :done, :f :txn, :value [], :process 0, :time 0}",
            "{:index 0, :type :ok, :f :txn, :value [[:r 1]], :process 0, :time 0}",
            "{:index 0, :type :ok, :f :read, :value [], :process 0, :time 0}",
        ] {
            assert!(parse_line(3, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn corrupted_histories_are_caught() {
        // A read of a value never written.
        let mut h = sound();
        h[5].value[0] = R { key: 1, value: Some(99) };
        let p = check(&h).unwrap_err();
        assert!(p.iter().any(|p| p.contains("never written")), "{p:?}");
        // A read of a failed transaction's write (G1a).
        let mut h = sound();
        h[5].value[1] = R { key: 2, value: Some(8) };
        let p = check(&h).unwrap_err();
        assert!(p.iter().any(|p| p.contains("G1a")), "{p:?}");
        // A value written twice to one key.
        let mut h = sound();
        h[1].value[1] = W { key: 1, value: 7 };
        h[3].value[1] = W { key: 1, value: 7 };
        let p = check(&h).unwrap_err();
        assert!(p.iter().any(|p| p.contains("twice")), "{p:?}");
        // A completion without an invocation, and indices out of order.
        let mut h = sound();
        h.remove(4);
        let p = check(&h).unwrap_err();
        assert!(p.iter().any(|p| p.contains("completes nothing")), "{p:?}");
        assert!(p.iter().any(|p| p.contains(":index")), "{p:?}");
    }
}
