//! Scripted trace tests: scenario files run over a [`SyncCluster`], in the style of toydb's
//! goldenscripts (the `goldenscript` crate).
//!
//! A script is a schedule of client requests, deliveries, ticks and faults; its expected output
//! is the message trace and the outcomes, written under each block by
//! `UPDATE_GOLDENFILES=1 cargo test` and reviewed as a diff. A test fails on any difference and
//! prints it. Every engine crate keeps its scripts in `tests/scripts/` and runs them with
//! [`run_dir`], naming the engines the scripts may use.
//!
//! ## Commands
//!
//! ```text
//! cluster engine=salt [partitions=2] [catalog=bank]   a new cluster (catalogs: kv, bank, chains,
//!                                                      and any the test adds)
//! call [client=1] PROC ARG...                          queue a stored-procedure call; arguments
//!                                                      are parsed by the procedure's parameter types
//! begin [client=1] [isolation=serializable]            queue an interactive begin
//! op [client=1] read|write|insert|delete|scan TABLE VALUE...
//! op [client=1] add TABLE KEY... COLUMN=N              an update by the formula `COLUMN += N`
//! commit [client=1] / rollback [client=1]              end the client's interactive transaction
//! deliver [N] [from=ADDR] [to=ADDR] [match=TEXT]       deliver the next message (or N), printing
//!                                                      each as `from -> to: summary`; with a
//!                                                      filter, the first that matches overtakes
//!                                                      the others (addresses as printed: c1,
//!                                                      coord-n0, p1, role-0; TEXT a part of the
//!                                                      summary)
//! stabilize                                            deliver until the queue is empty
//! tick [ms=5]                                          advance time and tick every machine
//! crash coordinator | partition=N | all                restart from the log; messages to the
//!                                                      crashed machines are lost (and printed)
//! duplicate                                            queue a copy of the last queued message
//! drop                                                 lose the next queued message
//! queue                                                the messages in flight, in order
//! status                                               every request and its outcome so far
//! read TABLE KEY...                                    a key's newest committed version
//! dump [TABLE]                                         every version of every row, per partition
//! ```
//!
//! A client's requests are numbered `c1#1`, `c1#2`... in the order sent. Engine payloads are
//! rendered through their `Debug`, compacted (`TxnId { node: NodeId(0), epoch: 1, seq: 2 }` is
//! `txn0.1.2`, `Int(5)` is `5`, `PartitionId(1)` is `p1`): engines keep their state in ordered
//! maps, so the rendering is deterministic.

use super::SyncCluster;
use crate::message::{Batched, RequestBody, ResponseBody};
use crate::procedure::Registry;
use crate::{Addr, EngineKind, Envelope, Message, Op, OpResult};
use goldenscript::Command;
use litmus_core::{Catalog, ColumnType, Error, Formula, Isolation, Key, NodeId, PartitionId, TxnId, Value};
use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::fmt::Write as _;
use std::path::Path;

type CmdResult = Result<String, Box<dyn StdError>>;

/// A named catalog and its procedures, for `cluster catalog=NAME`.
#[derive(Clone, Copy)]
pub struct CatalogDef {
    pub name: &'static str,
    pub catalog: fn() -> Catalog,
    pub registry: fn() -> Registry,
}

/// The built-in catalogs of [`crate::builtin`].
pub const BUILTIN_CATALOGS: &[CatalogDef] = &[
    CatalogDef { name: "kv", catalog: crate::builtin::catalog, registry: crate::builtin::registry },
    CatalogDef { name: "bank", catalog: crate::builtin::bank::catalog, registry: crate::builtin::bank::registry },
    CatalogDef { name: "chains", catalog: crate::builtin::chains::catalog, registry: crate::builtin::chains::registry },
];

/// Most messages `stabilize` delivers before it reports a livelock.
const STABILIZE_MAX: u64 = 100_000;

/// The goldenscript runner: one cluster per script, built by its `cluster` command.
pub struct ScriptRunner {
    engines: Vec<EngineKind>,
    catalogs: Vec<CatalogDef>,
    cluster: Option<SyncCluster>,
    /// What each request was, by (client, request id), in the order sent.
    requests: BTreeMap<(u64, u64), String>,
    /// Each client's open interactive transaction (`None` until its `Begun` arrives).
    txns: BTreeMap<u64, Option<TxnId>>,
    /// The request id of each client's `begin` whose answer is still awaited.
    begins: BTreeMap<u64, u64>,
}

impl ScriptRunner {
    /// A runner whose scripts may name these engines, with the built-in catalogs.
    pub fn new(engines: &[EngineKind]) -> Self {
        ScriptRunner {
            engines: engines.to_vec(),
            catalogs: BUILTIN_CATALOGS.to_vec(),
            cluster: None,
            requests: BTreeMap::new(),
            txns: BTreeMap::new(),
            begins: BTreeMap::new(),
        }
    }

    /// Adds a catalog the scripts may name (an engine's own test schema).
    pub fn with_catalog(mut self, def: CatalogDef) -> Self {
        self.catalogs.push(def);
        self
    }

    fn cluster(&mut self) -> Result<&mut SyncCluster, Box<dyn StdError>> {
        self.cluster.as_mut().ok_or_else(|| "no cluster: start the script with `cluster engine=...`".into())
    }

    fn cmd_cluster(&mut self, cmd: &Command) -> CmdResult {
        let mut args = cmd.consume_args();
        let engine = args.lookup("engine").ok_or("cluster needs engine=NAME")?.value.clone();
        let partitions: u32 = args.lookup_parse("partitions")?.unwrap_or(2);
        let catalog = args.lookup("catalog").map_or("kv".to_string(), |a| a.value.clone());
        args.reject_rest()?;
        let kind = *self
            .engines
            .iter()
            .find(|e| e.name() == engine)
            .ok_or_else(|| format!("unknown engine {engine} (this test runs {})", self.engine_names()))?;
        let def =
            self.catalogs.iter().find(|c| c.name == catalog).ok_or_else(|| format!("unknown catalog {catalog}"))?;
        self.cluster = Some(SyncCluster::new(kind, (def.catalog)(), (def.registry)(), partitions));
        self.requests.clear();
        self.txns.clear();
        self.begins.clear();
        Ok(format!("{engine}: {partitions} partitions, catalog {catalog}\n"))
    }

    fn engine_names(&self) -> String {
        self.engines.iter().map(|e| e.name()).collect::<Vec<_>>().join(", ")
    }

    /// Queues a request of `client`; prints it as the client's numbered request.
    fn send(&mut self, client: u64, body: RequestBody, label: String) -> CmdResult {
        let begin = matches!(body, RequestBody::Begin { .. });
        let id = self.cluster()?.send(client, body);
        if begin {
            self.begins.insert(client, id);
            self.txns.insert(client, None);
        }
        self.requests.insert((client, id), label.clone());
        Ok(format!("c{client}#{id} {label}\n"))
    }

    fn cmd_call(&mut self, cmd: &Command) -> CmdResult {
        let mut args = cmd.consume_args();
        let client = client_arg(&mut args)?;
        let proc = args.next_pos().ok_or("call needs a procedure name")?.value.clone();
        let raw: Vec<String> = args.rest_pos().iter().map(|a| a.value.clone()).collect();
        args.reject_rest()?;
        let params = self.cluster()?.registry().get(&proc)?.params.clone();
        if params.len() != raw.len() {
            return Err(format!("{proc} takes {} arguments, got {}", params.len(), raw.len()).into());
        }
        let values = raw.iter().zip(&params).map(|(s, ty)| parse_value(s, ty)).collect::<Result<Vec<_>, _>>()?;
        let label = format!("{proc}({})", join(&values));
        let body = RequestBody::Call { procedure: proc, args: values, retrying_for: std::time::Duration::ZERO };
        self.send(client, body, label)
    }

    fn cmd_begin(&mut self, cmd: &Command) -> CmdResult {
        let mut args = cmd.consume_args();
        let client = client_arg(&mut args)?;
        let isolation = match args.lookup("isolation") {
            Some(a) => a.value.parse::<Isolation>()?,
            None => Isolation::Serializable,
        };
        args.reject_rest()?;
        self.send(
            client,
            RequestBody::Begin { isolation, retrying_for: std::time::Duration::ZERO },
            format!("begin {isolation}"),
        )
    }

    /// The client's open transaction, once its `begin` was answered.
    fn txn_of(&mut self, client: u64) -> Result<TxnId, Box<dyn StdError>> {
        self.learn_begins();
        match self.txns.get(&client) {
            Some(Some(t)) => Ok(*t),
            Some(None) => Err(format!("c{client}'s begin is not answered yet: deliver first").into()),
            None => Err(format!("c{client} has no transaction: begin first").into()),
        }
    }

    /// Picks up the transaction ids of answered `begin`s.
    fn learn_begins(&mut self) {
        let Some(c) = self.cluster.as_ref() else { return };
        self.begins.retain(|client, id| match c.response(*client, *id) {
            Some(Ok(ResponseBody::Begun(t))) => {
                self.txns.insert(*client, Some(*t));
                false
            }
            Some(_) => {
                self.txns.remove(client);
                false
            }
            None => true,
        });
    }

    fn cmd_op(&mut self, cmd: &Command) -> CmdResult {
        let mut args = cmd.consume_args();
        let client = client_arg(&mut args)?;
        let kind = args.next_pos().ok_or("op needs a kind (read, write, insert, delete, scan, add)")?.value.clone();
        let table = args.next_pos().ok_or("op needs a table")?.value.clone();
        let raw: Vec<String> = args.rest_pos().iter().map(|a| a.value.clone()).collect();
        let adds: Vec<(String, String)> =
            args.rest_key().iter().map(|a| (a.key.clone().unwrap_or_default(), a.value.clone())).collect();
        let txn = self.txn_of(client)?;
        let schema = self.cluster()?.catalog().table_by_name(&table)?.clone();
        let key_types: Vec<&ColumnType> = schema.primary_key.iter().map(|&i| &schema.columns[i].ty).collect();
        let row_types: Vec<&ColumnType> = schema.columns.iter().map(|c| &c.ty).collect();
        let typed = |types: &[&ColumnType]| -> Result<Vec<Value>, Box<dyn StdError>> {
            if raw.len() > types.len() {
                return Err(format!("{table} takes at most {} values here, got {}", types.len(), raw.len()).into());
            }
            raw.iter().zip(types).map(|(s, ty)| parse_value(s, ty)).collect()
        };
        let op = match kind.as_str() {
            "read" => Op::Read { table: table.clone(), key: typed(&key_types)? },
            "delete" => Op::Delete { table: table.clone(), key: typed(&key_types)? },
            "write" => Op::Write { table: table.clone(), row: typed(&row_types)?.into() },
            "insert" => Op::Insert { table: table.clone(), row: typed(&row_types)?.into() },
            "scan" => Op::Scan { table: table.clone(), start: typed(&key_types)?, end: None, limit: 1000 },
            "add" => {
                let mut updates = Vec::new();
                for (column, n) in &adds {
                    let c = schema.column(column)?;
                    updates.push((column.clone(), Formula::Add(parse_value(n, &schema.columns[c].ty)?)));
                }
                Op::Update { table: table.clone(), key: typed(&key_types)?, updates }
            }
            other => return Err(format!("unknown op kind {other}").into()),
        };
        if kind != "add" && !adds.is_empty() {
            return Err(format!("op {kind} takes no key=value arguments").into());
        }
        let label = format!("{} {}", txn, render_op(&op));
        self.send(client, RequestBody::Op { txn, op }, label)
    }

    fn cmd_end(&mut self, cmd: &Command, commit: bool) -> CmdResult {
        let mut args = cmd.consume_args();
        let client = client_arg(&mut args)?;
        args.reject_rest()?;
        let txn = self.txn_of(client)?;
        self.txns.remove(&client);
        if commit {
            self.send(client, RequestBody::Commit { txn }, format!("{txn} commit"))
        } else {
            self.send(client, RequestBody::Rollback { txn }, format!("{txn} rollback"))
        }
    }

    fn cmd_deliver(&mut self, cmd: &Command) -> CmdResult {
        let mut args = cmd.consume_args();
        let n: u64 = match args.next_pos() {
            Some(a) => a.parse()?,
            None => 1,
        };
        let from = args.lookup("from").map(|a| a.value.clone());
        let to = args.lookup("to").map(|a| a.value.clone());
        let text = args.lookup("match").map(|a| a.value.clone());
        args.reject_rest()?;
        let c = self.cluster()?;
        let wanted = |env: &Envelope| {
            from.as_ref().is_none_or(|f| *f == addr(env.from))
                && to.as_ref().is_none_or(|t| *t == addr(env.to))
                && text.as_ref().is_none_or(|t| render_message(&env.msg).contains(t.as_str()))
        };
        let mut out = String::new();
        for _ in 0..n {
            // The first queued message that matches overtakes the ones before it.
            let Some(i) = c.queue.iter().position(wanted) else {
                out.push_str("(nothing to deliver)\n");
                break;
            };
            let env = c.queue.remove(i).expect("a queued message");
            c.queue.push_front(env.clone());
            c.deliver_one();
            writeln!(out, "{}", render_envelope(&env))?;
        }
        Ok(out)
    }

    fn cmd_stabilize(&mut self) -> CmdResult {
        let c = self.cluster()?;
        let mut out = String::new();
        let mut n = 0;
        while let Some(env) = c.queue.front().cloned() {
            n += 1;
            if n > STABILIZE_MAX {
                return Err(format!("still delivering after {STABILIZE_MAX} messages: a livelock").into());
            }
            c.deliver_one();
            writeln!(out, "{}", render_envelope(&env))?;
        }
        Ok(out)
    }

    fn cmd_tick(&mut self, cmd: &Command) -> CmdResult {
        let mut args = cmd.consume_args();
        let ms: u64 = args.lookup_parse("ms")?.unwrap_or(crate::machine::TICK_INTERVAL_MS);
        args.reject_rest()?;
        let c = self.cluster()?;
        let before = c.queue.len();
        c.tick(ms);
        let queued = c.queue.len() - before;
        let now = c.now.as_nanos() / 1_000_000;
        Ok(format!("now {now}ms, queued {queued}\n"))
    }

    fn cmd_crash(&mut self, cmd: &Command) -> CmdResult {
        let mut args = cmd.consume_args();
        let partition: Option<u32> = args.lookup_parse("partition")?;
        let what = args.next_pos().map(|a| a.value.clone());
        args.reject_rest()?;
        let c = self.cluster()?;
        let lost_to = |to: Addr| match (&what, partition) {
            (Some(w), None) if w == "all" => true,
            (Some(w), None) if w == "coordinator" => to == Addr::Coordinator(NodeId(0)),
            (None, Some(p)) => to == Addr::Partition(PartitionId(p)),
            _ => false,
        };
        let lost: Vec<String> = c.queue.iter().filter(|e| lost_to(e.to)).map(render_envelope).collect();
        let name = match (what.as_deref(), partition) {
            (Some("all"), None) => {
                c.crash_all();
                "every machine".to_string()
            }
            (Some("coordinator"), None) => {
                c.crash_coordinator();
                "coord-n0".to_string()
            }
            (None, Some(p)) if p < c.partitions.len() as u32 => {
                c.crash_partition(p);
                format!("p{p}")
            }
            _ => return Err("crash coordinator | crash partition=N | crash all".into()),
        };
        let mut out = format!("{name} restarted from its log\n");
        for l in lost {
            writeln!(out, "lost {l}")?;
        }
        Ok(out)
    }

    fn cmd_duplicate(&mut self) -> CmdResult {
        let c = self.cluster()?;
        if c.queue.is_empty() {
            return Err("nothing queued to duplicate".into());
        }
        let env = c.copy_last();
        let out = format!("duplicated {}\n", render_envelope(&env));
        c.requeue(env);
        Ok(out)
    }

    fn cmd_drop(&mut self) -> CmdResult {
        let c = self.cluster()?;
        let env = c.queue.pop_front().ok_or("nothing queued to drop")?;
        Ok(format!("dropped {}\n", render_envelope(&env)))
    }

    fn cmd_queue(&mut self) -> CmdResult {
        let c = self.cluster()?;
        if c.queue.is_empty() {
            return Ok("(empty)\n".into());
        }
        Ok(c.queue.iter().map(|e| format!("queued {}\n", render_envelope(e))).collect())
    }

    fn cmd_status(&mut self) -> CmdResult {
        let c = self.cluster.as_ref().ok_or("no cluster")?;
        let mut out = String::new();
        for ((client, id), label) in &self.requests {
            let outcome = match c.response(*client, *id) {
                Some(r) => render_result(r),
                None => "pending".to_string(),
            };
            writeln!(out, "c{client}#{id} {label} → {outcome}")?;
        }
        Ok(out)
    }

    fn cmd_read(&mut self, cmd: &Command) -> CmdResult {
        let mut args = cmd.consume_args();
        let table = args.next_pos().ok_or("read needs a table")?.value.clone();
        let raw: Vec<String> = args.rest_pos().iter().map(|a| a.value.clone()).collect();
        args.reject_rest()?;
        let c = self.cluster()?;
        let schema = c.catalog().table_by_name(&table)?.clone();
        let key = schema
            .primary_key
            .iter()
            .zip(&raw)
            .map(|(&i, s)| parse_value(s, &schema.columns[i].ty))
            .collect::<Result<Vec<_>, _>>()?;
        let encoded = Key::encode(&key)?;
        let parts: Vec<u32> = match schema.partition_of(&key, c.partitions.len() as u32) {
            Some(p) => vec![p.0],
            None => (0..c.partitions.len() as u32).collect(),
        };
        let mut out = String::new();
        for p in parts {
            let row = c.partitions[p as usize].store().latest(schema.id, &encoded);
            let shown = match row {
                Some((ts, Some(row))) => format!("[{}] {ts}", join(row)),
                Some((ts, None)) => format!("deleted {ts}"),
                None => "no row".to_string(),
            };
            writeln!(out, "p{p} {table}({}): {shown}", join(&key))?;
        }
        Ok(out)
    }

    fn cmd_dump(&mut self, cmd: &Command) -> CmdResult {
        let mut args = cmd.consume_args();
        let only = args.next_pos().map(|a| a.value.clone());
        args.reject_rest()?;
        let c = self.cluster()?;
        let mut out = String::new();
        for (p, part) in c.partitions.iter().enumerate() {
            let store = part.store();
            let mut keys: Vec<(litmus_core::TableId, Key)> = Vec::new();
            for (table, key, _) in store.all_versions() {
                if keys.last() != Some(&(table, key.clone())) {
                    keys.push((table, key.clone()));
                }
            }
            for (table, key) in keys {
                let name = c.catalog().table(table).map_or("?".to_string(), |t| t.name.clone());
                if only.as_ref().is_some_and(|o| *o != name) {
                    continue;
                }
                let shown_key = Key::decode(key.as_bytes()).map_or_else(|_| format!("{key:?}"), |k| join(&k));
                let versions: Vec<String> = store
                    .versions(table, &key)
                    .map(|(ts, row)| match row {
                        Some(row) => format!("{ts} [{}]", join(row)),
                        None => format!("{ts} deleted"),
                    })
                    .collect();
                writeln!(out, "p{p} {name}({shown_key}): {}", versions.join(", "))?;
            }
        }
        if out.is_empty() {
            out.push_str("(no rows)\n");
        }
        Ok(out)
    }
}

impl goldenscript::Runner for ScriptRunner {
    fn run(&mut self, cmd: &Command) -> CmdResult {
        let out = match cmd.name.as_str() {
            "cluster" => self.cmd_cluster(cmd),
            "call" => self.cmd_call(cmd),
            "begin" => self.cmd_begin(cmd),
            "op" => self.cmd_op(cmd),
            "commit" => self.cmd_end(cmd, true),
            "rollback" => self.cmd_end(cmd, false),
            "deliver" => self.cmd_deliver(cmd),
            "stabilize" => self.cmd_stabilize(),
            "tick" => self.cmd_tick(cmd),
            "crash" => self.cmd_crash(cmd),
            "duplicate" => self.cmd_duplicate(),
            "drop" => self.cmd_drop(),
            "queue" => self.cmd_queue(),
            "status" | "responses" => self.cmd_status(),
            "read" => self.cmd_read(cmd),
            "dump" => self.cmd_dump(cmd),
            other => Err(format!("unknown command {other}").into()),
        };
        self.learn_begins();
        out
    }
}

/// Runs every script in `dir` (sorted by name) with a fresh runner from `runner`, and fails
/// naming every script whose output differs (each one's diff is printed as it fails).
/// `UPDATE_GOLDENFILES=1` rewrites the scripts with their new output instead.
pub fn run_dir(dir: impl AsRef<Path>, runner: impl Fn() -> ScriptRunner) {
    let dir = dir.as_ref();
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file() && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no scripts in {}", dir.display());
    let mut failed = Vec::new();
    for path in &paths {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut r = runner();
            goldenscript::run(&mut r, path)
        }));
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                eprintln!("script {name}: {e}");
                failed.push(name);
            }
            Err(_) => failed.push(name),
        }
    }
    assert!(
        failed.is_empty(),
        "scripts whose output differs (diffs above; regenerate with UPDATE_GOLDENFILES=1 and review \
         `git diff`): {}",
        failed.join(", ")
    );
}

fn client_arg(args: &mut goldenscript::ArgumentConsumer<'_>) -> Result<u64, Box<dyn StdError>> {
    Ok(args.lookup_parse("client")?.unwrap_or(1))
}

/// A script argument as a value of type `ty`: `null`, an integer, a decimal, a string or bytes
/// (the text's UTF-8), a set as `{1,2}`.
fn parse_value(s: &str, ty: &ColumnType) -> Result<Value, Box<dyn StdError>> {
    if s == "null" {
        return Ok(Value::Null);
    }
    Ok(match ty {
        ColumnType::Int => Value::Int(s.parse().map_err(|e| format!("{s} as int: {e}"))?),
        ColumnType::String => Value::String(s.into()),
        ColumnType::Bytes => Value::Bytes(s.as_bytes().to_vec().into()),
        ColumnType::Set(elem) => {
            let inner = s.strip_prefix('{').and_then(|s| s.strip_suffix('}')).ok_or("a set is {a,b}")?;
            let elems = inner.split(',').filter(|e| !e.is_empty()).map(|e| parse_value(e.trim(), elem));
            Value::set(elems.collect::<Result<Vec<_>, _>>()?)
        }
        other => return Err(format!("values of type {other} are not parsed in scripts").into()),
    })
}

/// A value as scripts show it: bytes that are printable text as `'text'`.
fn show(v: &Value) -> String {
    match v {
        Value::Bytes(b) if !b.is_empty() && b.iter().all(|c| c.is_ascii_graphic() || *c == b' ') => {
            format!("'{}'", String::from_utf8_lossy(b))
        }
        other => other.to_string(),
    }
}

fn join(values: &[Value]) -> String {
    values.iter().map(show).collect::<Vec<_>>().join(", ")
}

fn render_op(op: &Op) -> String {
    match op {
        Op::Read { table, key } => format!("read {table}({})", join(key)),
        Op::Delete { table, key } => format!("delete {table}({})", join(key)),
        Op::Write { table, row } => format!("write {table}[{}]", join(row)),
        Op::Insert { table, row } => format!("insert {table}[{}]", join(row)),
        Op::Scan { table, start, .. } => format!("scan {table}({})", join(start)),
        Op::Update { table, key, updates } => {
            let u: Vec<String> = updates.iter().map(|(c, f)| format!("{c} {f}")).collect();
            format!("update {table}({}) {}", join(key), u.join(", "))
        }
        other => compact(&format!("{other:?}")),
    }
}

fn render_result(r: &Result<ResponseBody, Error>) -> String {
    match r {
        Ok(ResponseBody::Returned(v)) => format!("returned [{}]", join(v)),
        Ok(ResponseBody::Begun(t)) => format!("begun {t}"),
        Ok(ResponseBody::Op(OpResult::Row(Some(row)))) => format!("row [{}]", join(row)),
        Ok(ResponseBody::Op(OpResult::Row(None))) => "no row".to_string(),
        Ok(ResponseBody::Op(OpResult::Rows(rows))) => {
            let rows: Vec<String> = rows.iter().map(|r| format!("[{}]", join(r))).collect();
            format!("rows {}", rows.join(" "))
        }
        Ok(ResponseBody::Op(OpResult::Done)) => "done".to_string(),
        Ok(ResponseBody::Op(other)) => compact(&format!("{other:?}")),
        Ok(ResponseBody::Committed) => "committed".to_string(),
        Ok(ResponseBody::RolledBack) => "rolled back".to_string(),
        Err(e) => format!("error: {e}"),
    }
}

/// One message on one line: `from -> to: summary`.
pub fn render_envelope(env: &Envelope) -> String {
    format!("{} -> {}: {}", addr(env.from), addr(env.to), render_message(&env.msg))
}

fn addr(a: Addr) -> String {
    match a {
        Addr::Coordinator(n) => format!("coord-{n}"),
        other => other.to_string(),
    }
}

fn render_message(msg: &Message) -> String {
    match msg {
        Message::ClientRequest(r) => {
            let what = match &r.body {
                RequestBody::Call { procedure, args, .. } => format!("call {procedure}({})", join(args)),
                RequestBody::Begin { isolation, .. } => format!("begin {isolation}"),
                RequestBody::Op { txn, op } => format!("{txn} {}", render_op(op)),
                RequestBody::Commit { txn } => format!("{txn} commit"),
                RequestBody::Rollback { txn } => format!("{txn} rollback"),
                RequestBody::Read { op } => format!("one-round read {}", render_op(op)),
                RequestBody::Disconnected => "disconnected".into(),
                RequestBody::Minitransaction(m) => {
                    format!("minitransaction of {} compares and {} writes", m.compares.len(), m.writes.len())
                }
            };
            format!("#{} {what}", r.id.0)
        }
        Message::ClientResponse(r) => format!("#{} {}", r.id.0, render_result(&r.result)),
        Message::PartitionRequest(r) => compact(&format!("{:?}", r.body)),
        Message::PartitionReply(r) => compact(&format!("{:?}", r.body)),
        Message::Role(p) => compact(&format!("{p:?}")),
        Message::Batch(items) => {
            let items: Vec<String> = items
                .iter()
                .map(|i| match i {
                    Batched::Request(r) => compact(&format!("{:?}", r.body)),
                    Batched::Reply(r) => compact(&format!("{:?}", r.body)),
                })
                .collect();
            format!("batch[{}]", items.join("; "))
        }
        Message::Raft(bytes) => format!("raft {} bytes", bytes.len()),
        Message::Fortify { term } => format!("fortify term {term}"),
    }
}

/// Shortens the `Debug` of engine payloads: transaction ids, node / partition / table ids,
/// timestamps, integer values, printable bytes and the all-columns mask to their short forms.
pub fn compact(s: &str) -> String {
    let mut s = replace_bytes(&replace_txn_ids(s)).replace("ColMask(18446744073709551615)", "ColMask::ALL");
    for (name, short) in [
        ("NodeId", "n"),
        ("PartitionId", "p"),
        ("TableId", "t"),
        ("ClientId", "c"),
        ("RequestId", "r"),
        ("Timestamp", "@"),
        ("Int", ""),
    ] {
        s = unwrap_number(&s, name, short);
    }
    s
}

/// `TxnId { node: NodeId(a), epoch: b, seq: c }` → `txna.b.c`.
fn replace_txn_ids(s: &str) -> String {
    const HEAD: &str = "TxnId { node: NodeId(";
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(HEAD) {
        out.push_str(&rest[..i]);
        let after = &rest[i + HEAD.len()..];
        let parsed = (|| {
            let (node, after) = after.split_once("), epoch: ")?;
            let (epoch, after) = after.split_once(", seq: ")?;
            let (seq, after) = after.split_once(" }")?;
            let ok = [node, epoch, seq].iter().all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            ok.then(|| (format!("txn{node}.{epoch}.{seq}"), after))
        })();
        match parsed {
            Some((short, after)) => {
                out.push_str(&short);
                rest = after;
            }
            None => {
                out.push_str(HEAD);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `Bytes([97, 98])` → `'ab'` when the bytes are printable text.
fn replace_bytes(s: &str) -> String {
    const HEAD: &str = "Bytes([";
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(HEAD) {
        out.push_str(&rest[..i]);
        let after = &rest[i + HEAD.len()..];
        let text = after.split_once("])").and_then(|(list, tail)| {
            let bytes: Option<Vec<u8>> = list.split(", ").map(|b| b.parse::<u8>().ok()).collect();
            let bytes = bytes.filter(|b| b.iter().all(|c| (c.is_ascii_graphic() && *c != b'\'') || *c == b' '))?;
            Some((String::from_utf8(bytes).ok()?, tail))
        });
        match text {
            Some((text, tail)) => {
                out.push_str(&format!("'{text}'"));
                rest = tail;
            }
            None => {
                out.push_str(HEAD);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `Name(123)` (not preceded by an identifier character) → `short123`.
fn unwrap_number(s: &str, name: &str, short: &str) -> String {
    let head = format!("{name}(");
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(&head) {
        let prev = if i > 0 { rest[..i].chars().next_back() } else { out.chars().next_back() };
        let before_ok = !prev.is_some_and(|c| c.is_alphanumeric() || c == '_');
        let after = &rest[i + head.len()..];
        let digits = after.find(')').map(|j| &after[..j]).filter(|d| {
            let d = d.strip_prefix('-').unwrap_or(d);
            !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
        });
        match (before_ok, digits) {
            (true, Some(d)) => {
                out.push_str(&rest[..i]);
                out.push_str(short);
                out.push_str(d);
                rest = &after[d.len() + 1..];
            }
            _ => {
                out.push_str(&rest[..i + head.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::compact;

    #[test]
    fn compact_shortens_ids_and_integers() {
        let s = "Op { id: SubOpId { txn: TxnId { node: NodeId(0), epoch: 1, seq: 12 }, op: 0, part: PartitionId(1) }, \
                 row: [Int(-5), BigInt(3), Bytes([97, 32, 98])], ts: Timestamp(7) }";
        assert_eq!(
            compact(s),
            "Op { id: SubOpId { txn: txn0.1.12, op: 0, part: p1 }, row: [-5, BigInt(3), 'a b'], ts: @7 }"
        );
    }
}
