//! # Step costs: what one machine step costs a core, measured and looked up
//!
//! The simulator charges CPU time per machine step ([`crate::sim::CpuModel`]); `litmus
//! calibrate` measures it on the embedded runtime. Both name a step the same way, by its
//! [`step_key`]: the machine's role and what arrived, e.g.
//!
//! ```text
//!   coordinator call tpcc_new_order     a client's stored-procedure call (begin + first ops)
//!   coordinator reply LockReply         a partition's answer, as the engine's payload variant
//!   partition request Prepare           an engine request at a partition
//!   role0 role Begin                    traffic of an engine-added role (Omid's oracle)
//!   partition tick                      a timer tick
//! ```
//!
//! The payload's kind is its engine type's variant name (the first word of its `Debug` form),
//! so every engine — including ones added later — is named without this module knowing it.
//!
//! A [`CostTable`] holds, per engine, the mean CPU nanoseconds of each key and how many steps
//! the mean is over, and how the cost grows with the work a step did ([`CostEntry`]: machines
//! report units of work in [`litmus_protocol::Effects::work`], keys and rows; the line is fitted
//! by least squares, [`StepStats::entry`]) — so that a transaction whose work is split over two
//! partitions is charged its rows and one more step's fixed part, not two mean steps. Plus two
//! measured extras per engine:
//! [`RUNTIME_OVERHEAD_KEY`] (the worker's CPU per step outside the machine: mailboxes, the
//! delay heap, routing) and [`FLUSH_KEY`] (one group commit). [`CostTable::resolver`]
//! answers any key with a fallback chain: the engine's own mean for the key, the engine's mean
//! over the role, every engine's mean for the key, every engine's mean over the role, and
//! finally [`CostTable::default_ns`]. Nothing is invented at lookup time: every number but the
//! last fallback was measured.

use litmus_protocol::{Addr, Input, Message};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

/// Key of the worker's CPU per step outside the machine (embedded runtime overhead).
pub const RUNTIME_OVERHEAD_KEY: &str = "runtime per-step";
/// Key of one group commit (a `Host::flush` that had records to write).
pub const FLUSH_KEY: &str = "runtime flush";
/// Cost of a step nothing was measured for, in any engine (the table's default).
pub const DEFAULT_STEP_NS: u64 = 10_000;

/// The role part of a step key.
pub fn role_of(addr: Addr) -> String {
    match addr {
        Addr::Coordinator(_) | Addr::Replica(litmus_protocol::GroupId::Coordinator(_), _) => "coordinator".into(),
        Addr::Role(r) | Addr::Replica(litmus_protocol::GroupId::Role(r), _) => format!("role{}", r.0),
        Addr::Partition(_) | Addr::Replica(..) => "partition".into(),
        Addr::Client(_) => "client".into(),
    }
}

/// The name of a machine step: `"<role> <what arrived>"` (see the module doc).
pub fn step_key(to: Addr, input: &Input) -> String {
    let mut key = role_of(to);
    key.push(' ');
    match input {
        Input::Tick => key.push_str("tick"),
        Input::Message(env) => match &env.msg {
            Message::ClientRequest(r) => match &r.body {
                litmus_protocol::message::RequestBody::Call { procedure, .. } => {
                    key.push_str("call ");
                    key.push_str(procedure);
                }
                other => {
                    key.push_str("client ");
                    first_word(&mut key, other);
                }
            },
            Message::ClientResponse(_) => key.push_str("response"),
            Message::PartitionRequest(r) => push_kind(&mut key, "request", &r.body),
            Message::PartitionReply(r) => push_kind(&mut key, "reply", &r.body),
            Message::Role(p) => {
                key.push_str("role ");
                first_word(&mut key, p);
            }
            // A batch is named by its items (`step_keys`); as one step, "<role> batch".
            Message::Batch(_) => key.push_str("batch"),
            Message::Raft(_) => key.push_str("raft"),
            Message::Fortify { .. } => key.push_str("fortify"),
        },
    }
    key
}

/// The names of what one step handles: one [`step_key`], or for a [`Message::Batch`] one per
/// item, named as if it had arrived alone ("partition request Op" for each operation of a
/// batch). A batch's cost is its items' costs: the simulator charges their sum, and `litmus
/// calibrate` splits a batch step's measured time evenly over them, so the cost tables stay
/// per message kind and mean the same with or without batching.
pub fn step_keys(to: Addr, input: &Input) -> Vec<String> {
    let Input::Message(env) = input else { return vec![step_key(to, input)] };
    let Message::Batch(items) = &env.msg else { return vec![step_key(to, input)] };
    items
        .iter()
        .map(|item| {
            // The same name the item gets as a message of its own (`step_key`).
            let mut key = role_of(to);
            key.push(' ');
            match item {
                litmus_protocol::message::Batched::Request(r) => push_kind(&mut key, "request", &r.body),
                litmus_protocol::message::Batched::Reply(r) => push_kind(&mut key, "reply", &r.body),
            }
            key
        })
        .collect()
}

/// Appends `"<kind> <payload variant>"`, e.g. "request Prepare".
fn push_kind(key: &mut String, kind: &str, body: &dyn std::fmt::Debug) {
    key.push_str(kind);
    key.push(' ');
    first_word(key, body);
}

/// Appends the first identifier of `v`'s `Debug` form (an enum's variant name), stopping the
/// formatting as soon as it is complete.
fn first_word(out: &mut String, v: &dyn std::fmt::Debug) {
    struct Capped<'a> {
        out: &'a mut String,
        done: bool,
    }
    impl std::fmt::Write for Capped<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            for c in s.chars() {
                if c.is_alphanumeric() || c == '_' {
                    self.out.push(c);
                } else {
                    self.done = true;
                    return Err(std::fmt::Error);
                }
            }
            Ok(())
        }
    }
    let before = out.len();
    let mut w = Capped { out, done: false };
    let _ = write!(w, "{v:?}");
    if out.len() == before {
        out.push('?');
    }
}

/// The CPU time the calling thread has used, nanoseconds (`CLOCK_THREAD_CPUTIME_ID`); `None`
/// where the clock is unavailable.
pub fn thread_cpu_ns() -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `clock_gettime` writes one `timespec` through a valid pointer to a local.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// A monotonic clock in nanoseconds with a resolution of a few milliseconds
/// (`CLOCK_MONOTONIC_COARSE`): a read costs a few nanoseconds, cheap enough to time every step
/// of a node against [`crate::host::SLOW_STEP`] (`Instant::now` per step cost YCSB a tenth of
/// its throughput).
pub fn coarse_now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `clock_gettime` writes one `timespec` through a valid pointer to a local.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    if rc == 0 {
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    } else {
        0
    }
}

/// What one read of the thread clock ([`thread_cpu_ns`]) costs the reading thread, measured:
/// the least mean over a few rounds of back-to-back reads (a round the thread was preempted in
/// reads high). In a VM the clock is a system call (~650 ns on the development machine), which
/// is not small beside a machine step: a profile subtracts what its own reads cost
/// ([`ProfileData::probe_ns`]).
pub fn clock_read_ns() -> u64 {
    const ROUNDS: usize = 5;
    const READS: u64 = 200;
    (0..ROUNDS)
        .filter_map(|_| {
            let first = thread_cpu_ns()?;
            let mut last = first;
            for _ in 1..READS {
                last = thread_cpu_ns()?;
            }
            Some(last.saturating_sub(first) / (READS - 1))
        })
        .min()
        .unwrap_or(0)
}

/// One measured step kind: mean CPU nanoseconds over `n` steps, and how the cost grows with
/// the work a step did ([`litmus_protocol::Effects::work`]: keys and rows).
///
/// A step of `u` units costs `ns + unit_ns × (u − units)` ([`CostEntry::at`]): the mean, moved
/// along the least-squares line through the measured steps. A table without the two work
/// fields (or a step kind whose work never varied) charges the mean whatever the work.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostEntry {
    pub ns: f64,
    pub n: u64,
    /// Mean units of work per step.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub units: f64,
    /// Nanoseconds per unit of work beyond the mean (the fitted slope; never negative).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unit_ns: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl CostEntry {
    /// A mean cost that does not depend on work.
    pub fn mean(ns: f64, n: u64) -> CostEntry {
        CostEntry { ns, n, units: 0.0, unit_ns: 0.0 }
    }

    /// The cost of a step that did `units` units of work (never negative).
    pub fn at(&self, units: f64) -> f64 {
        (self.ns + self.unit_ns * (units - self.units)).max(0.0)
    }

    /// The same entry with every cost multiplied by `k` (units unchanged).
    pub fn scaled(&self, k: f64) -> CostEntry {
        CostEntry { ns: self.ns * k, unit_ns: self.unit_ns * k, ..*self }
    }
}

/// What a profile sums for one step kind to give its [`CostEntry`]: steps, nanoseconds, and
/// the sums a least-squares line of nanoseconds against units of work needs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepStats {
    pub n: u64,
    pub ns: u64,
    pub units: f64,
    pub units_sq: f64,
    pub units_ns: f64,
}

impl StepStats {
    /// One step (or a batch item's share of one) of `ns` nanoseconds and `units` units.
    pub fn add(&mut self, ns: u64, units: f64) {
        self.n += 1;
        self.ns += ns;
        self.units += units;
        self.units_sq += units * units;
        self.units_ns += units * ns as f64;
    }

    fn merge(&mut self, o: &StepStats) {
        self.n += o.n;
        self.ns += o.ns;
        self.units += o.units;
        self.units_sq += o.units_sq;
        self.units_ns += o.units_ns;
    }

    /// The mean and the least-squares slope of nanoseconds over units. A slope below zero is
    /// taken as none (work never makes a step cheaper: what was seen is noise), and one that
    /// would make a step of no work cost less than nothing is bent through zero.
    pub fn entry(&self) -> Option<CostEntry> {
        if self.n == 0 {
            return None;
        }
        let n = self.n as f64;
        let (mean_units, mean_ns) = (self.units / n, self.ns as f64 / n);
        let var = self.units_sq / n - mean_units * mean_units;
        let cov = self.units_ns / n - mean_units * mean_ns;
        let mut slope = if var > 1e-9 * mean_units.max(1.0).powi(2) { (cov / var).max(0.0) } else { 0.0 };
        if mean_ns - slope * mean_units < 0.0 {
            slope = mean_ns / mean_units;
        }
        let units = if slope > 0.0 { mean_units } else { 0.0 };
        Some(CostEntry { ns: mean_ns, n: self.n, units, unit_ns: slope })
    }
}

/// A table of step costs (see the module doc). Serialized as TOML.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostTable {
    /// Shown in simulated reports ("cost table default").
    pub name: String,
    /// The command line that measured it.
    pub command: String,
    /// Where and how it was measured (machine, load), free text.
    pub note: String,
    /// Cost of a step nothing in the table describes.
    pub default_ns: u64,
    /// Per engine name, per step key.
    pub engines: BTreeMap<String, BTreeMap<String, CostEntry>>,
}

/// Failures reading a cost table.
#[derive(Debug, thiserror::Error)]
pub enum CostTableError {
    #[error("read cost table {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("cost table {path} is not a valid table: {error}")]
    Parse { path: String, error: String },
    #[error("cost table {path}: {what}")]
    Invalid { path: String, what: String },
}

impl CostTable {
    /// The table committed with the repository, measured by `litmus calibrate` (see its
    /// `command` and `note`).
    pub fn builtin() -> CostTable {
        CostTable::parse(include_str!("../costs/default.toml"), "builtin").expect("the committed cost table is valid")
    }

    pub fn parse(text: &str, path: &str) -> Result<CostTable, CostTableError> {
        let t: CostTable =
            toml::from_str(text).map_err(|e| CostTableError::Parse { path: path.into(), error: e.to_string() })?;
        t.check().map_err(|what| CostTableError::Invalid { path: path.into(), what })?;
        Ok(t)
    }

    pub fn load(path: &Path) -> Result<CostTable, CostTableError> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| CostTableError::Io { path: path.display().to_string(), error })?;
        CostTable::parse(&text, &path.display().to_string())
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("cost tables serialize")
    }

    /// Every cost finite, non-negative and below a second.
    fn check(&self) -> Result<(), String> {
        if self.default_ns == 0 || self.default_ns > 1_000_000_000 {
            return Err(format!("default_ns must be in 1..=1e9, got {}", self.default_ns));
        }
        for (engine, keys) in &self.engines {
            for (key, e) in keys {
                for (what, v) in [("ns", e.ns), ("units", e.units), ("unit_ns", e.unit_ns)] {
                    if !v.is_finite() || !(0.0..=1e9).contains(&v) {
                        return Err(format!("engine {engine}, {key:?}: {what} must be in [0, 1e9], got {v}"));
                    }
                }
            }
        }
        Ok(())
    }

    /// The costs `engine` pays, with the fallbacks of the module doc.
    pub fn resolver(&self, engine: &str) -> CostResolver {
        let own = self.engines.get(engine).cloned().unwrap_or_default();
        let mut any: BTreeMap<String, (f64, u64)> = BTreeMap::new();
        for keys in self.engines.values() {
            for (k, e) in keys {
                let a = any.entry(k.clone()).or_default();
                a.0 += e.ns * e.n as f64;
                a.1 += e.n;
            }
        }
        let any = any.into_iter().filter(|(_, (_, n))| *n > 0).map(|(k, (sum, n))| (k, sum / n as f64)).collect();
        let role_mean = |keys: &BTreeMap<String, CostEntry>| {
            let mut per: BTreeMap<String, (f64, u64)> = BTreeMap::new();
            for (k, e) in keys {
                let Some(role) = k.split(' ').next() else { continue };
                if role == "runtime" {
                    continue;
                }
                let a = per.entry(role.to_string()).or_default();
                a.0 += e.ns * e.n as f64;
                a.1 += e.n;
            }
            per.into_iter().filter(|(_, (_, n))| *n > 0).map(|(k, (s, n))| (k, s / n as f64)).collect()
        };
        let mut all: BTreeMap<String, CostEntry> = BTreeMap::new();
        for keys in self.engines.values() {
            for (k, e) in keys {
                let a = all.entry(k.clone()).or_insert(CostEntry::mean(0.0, 0));
                let n = a.n + e.n;
                if n > 0 {
                    a.ns = (a.ns * a.n as f64 + e.ns * e.n as f64) / n as f64;
                }
                a.n = n;
            }
        }
        let overhead =
            own.get(RUNTIME_OVERHEAD_KEY).map(|e| e.ns).or_else(|| all.get(RUNTIME_OVERHEAD_KEY).map(|e| e.ns));
        let flush = own.get(FLUSH_KEY).map(|e| e.ns).or_else(|| all.get(FLUSH_KEY).map(|e| e.ns));
        CostResolver {
            own_role: role_mean(&own),
            any_role: role_mean(&all),
            own,
            any,
            default_ns: self.default_ns,
            overhead_ns: overhead.unwrap_or(0.0).round() as u64,
            flush_ns: flush.unwrap_or(0.0).round() as u64,
            cache: HashMap::new(),
        }
    }
}

/// Looks up step costs for one engine (see [`CostTable::resolver`]); caches what it resolved.
#[derive(Clone, Debug)]
pub struct CostResolver {
    own: BTreeMap<String, CostEntry>,
    own_role: BTreeMap<String, f64>,
    any: BTreeMap<String, f64>,
    any_role: BTreeMap<String, f64>,
    default_ns: u64,
    /// Added to every step: the runtime's own CPU per step.
    pub overhead_ns: u64,
    /// One group commit.
    pub flush_ns: u64,
    cache: HashMap<String, CostEntry>,
}

impl CostResolver {
    /// What one step named `key` ([`step_key`]) costs, the runtime overhead not included: the
    /// engine's own entry (mean and cost per unit of work), or a fallback's mean.
    pub fn entry(&mut self, key: String) -> CostEntry {
        if let Some(e) = self.cache.get(&key) {
            return *e;
        }
        let role = key.split(' ').next().unwrap_or_default();
        let e = self.own.get(&key).copied().unwrap_or_else(|| {
            let ns = self
                .own_role
                .get(role)
                .or_else(|| self.any.get(&key))
                .or_else(|| self.any_role.get(role))
                .copied()
                .unwrap_or(self.default_ns as f64);
            CostEntry::mean(ns, 0)
        });
        self.cache.insert(key, e);
        e
    }

    /// CPU nanoseconds of one step named `key` that did the mean work, the runtime overhead
    /// included.
    pub fn step_ns(&mut self, key: String) -> u64 {
        self.entry(key).ns.round() as u64 + self.overhead_ns
    }

    /// CPU nanoseconds of one envelope's steps ([`step_keys`]: one, or a batch's items) that did
    /// `work` units of work in all: each item's cost at its even share of the work (as `litmus
    /// calibrate` split them), and the runtime overhead once. The overhead is measured per
    /// envelope the worker takes from its queue, not per item of a batch; charging it per item
    /// would make a batched engine pay it several times over (coordfree's and acid's reads and
    /// operations travel in batches per partition).
    ///
    /// Charging by work is what lets a simulated transaction split over partitions cost what it
    /// costs: a commit of 20 rows at one partition and 3 at another is charged as 23 rows and
    /// one more step's fixed part, not as two commits of the mean size.
    pub fn envelope_ns(&mut self, keys: Vec<String>, work: u64) -> u64 {
        let share = work as f64 / keys.len().max(1) as f64;
        keys.into_iter().map(|k| self.entry(k).at(share)).sum::<f64>().round() as u64 + self.overhead_ns
    }
}

/// Step costs measured on a running cluster (`litmus calibrate`): every host adds its steps
/// here when it stops.
#[derive(Debug, Default)]
pub struct CostProfile {
    inner: std::sync::Mutex<ProfileData>,
    /// Window edges seen: the profile measures between the first and the second.
    edges: std::sync::atomic::AtomicU64,
}

/// What a profile holds: per key, its steps' CPU and work ([`StepStats`]); and the workers'
/// totals.
#[derive(Clone, Debug, Default)]
pub struct ProfileData {
    pub steps: BTreeMap<String, StepStats>,
    /// Steps and CPU nanoseconds of the worker threads in all (machine steps included).
    pub worker_steps: u64,
    pub worker_cpu_ns: u64,
    /// Group commits that wrote records, and their CPU nanoseconds.
    pub flushes: (u64, u64),
    /// CPU nanoseconds the profile itself took: its clock reads, step names and counts. Not
    /// the runtime's: subtracted from the worker's CPU with the machines' before the overhead
    /// per step is taken (left in, it would inflate that overhead, which is charged to every
    /// simulated step).
    pub probe_ns: u64,
    /// What one clock read costs ([`clock_read_ns`]): a measured interval holds one read's
    /// worth besides what it measures.
    pub clock_ns: u64,
}

impl ProfileData {
    /// An empty profile, with the cost of a clock read measured now.
    pub fn measured() -> ProfileData {
        ProfileData { clock_ns: clock_read_ns(), ..ProfileData::default() }
    }

    pub fn merge(&mut self, o: &ProfileData) {
        for (k, stats) in &o.steps {
            self.steps.entry(k.clone()).or_default().merge(stats);
        }
        self.worker_steps += o.worker_steps;
        self.worker_cpu_ns += o.worker_cpu_ns;
        self.flushes.0 += o.flushes.0;
        self.flushes.1 += o.flushes.1;
        self.probe_ns += o.probe_ns;
        self.clock_ns = self.clock_ns.max(o.clock_ns);
    }

    /// The table entries these measurements give: each key's mean and cost per unit of work
    /// ([`StepStats::entry`]), the runtime's overhead per step (worker CPU spent neither inside
    /// machines nor on the profile itself, per step) and the flush cost.
    pub fn entries(&self) -> BTreeMap<String, CostEntry> {
        let mut out: BTreeMap<String, CostEntry> =
            self.steps.iter().filter_map(|(k, stats)| Some((k.clone(), stats.entry()?))).collect();
        let in_machines: u64 = self.steps.values().map(|s| s.ns).sum();
        if self.worker_steps > 0 {
            let outside = self
                .worker_cpu_ns
                .saturating_sub(in_machines)
                .saturating_sub(self.flushes.1)
                .saturating_sub(self.probe_ns);
            out.insert(
                RUNTIME_OVERHEAD_KEY.into(),
                CostEntry::mean(outside as f64 / self.worker_steps as f64, self.worker_steps),
            );
        }
        if self.flushes.0 > 0 {
            out.insert(
                FLUSH_KEY.into(),
                CostEntry::mean(self.flushes.1 as f64 / self.flushes.0 as f64, self.flushes.0),
            );
        }
        out
    }
}

impl CostProfile {
    /// Marks an edge of the measured window: the first call opens it, the second closes it.
    pub fn window_edge(&self) {
        self.edges.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether the measured window is open.
    pub fn active(&self) -> bool {
        self.edges.load(std::sync::atomic::Ordering::Relaxed) == 1
    }

    pub fn add(&self, data: &ProfileData) {
        if let Ok(mut g) = self.inner.lock() {
            g.merge(data);
        }
    }

    pub fn take(&self) -> ProfileData {
        self.inner.lock().map(|mut g| std::mem::take(&mut *g)).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use litmus_core::{NodeId, PartitionId};
    use litmus_protocol::message::PartitionRequest;
    use litmus_protocol::{Envelope, Payload};

    #[derive(Debug, serde::Serialize)]
    enum Req {
        Prepare { txn: u64 },
        Commit(u64),
    }

    fn env(msg: Message) -> Input {
        Input::Message(Envelope { from: Addr::Coordinator(NodeId(0)), to: Addr::Partition(PartitionId(1)), msg })
    }

    #[test]
    fn step_keys_name_role_and_payload_variant() {
        let p = Addr::Partition(PartitionId(1));
        let req = |r: Req| env(Message::PartitionRequest(PartitionRequest { body: Payload::new(r) }));
        assert_eq!(step_key(p, &req(Req::Prepare { txn: 7 })), "partition request Prepare");
        assert_eq!(step_key(p, &req(Req::Commit(3))), "partition request Commit");
        assert_eq!(step_key(Addr::Coordinator(NodeId(2)), &Input::Tick), "coordinator tick");
        assert_eq!(step_key(Addr::Role(litmus_protocol::RoleId(0)), &Input::Tick), "role0 tick");
    }

    /// A batch is its items: each named as if it had arrived alone, so the simulator charges the
    /// sum of their measured costs (a batch named as one step fell back to the role's mean).
    #[test]
    fn a_batch_steps_as_its_items() {
        use litmus_protocol::message::Batched;
        let p = Addr::Partition(PartitionId(1));
        let item = |r: Req| Batched::Request(PartitionRequest { body: Payload::new(r) });
        let batch = env(Message::Batch(vec![item(Req::Prepare { txn: 7 }), item(Req::Commit(3))]));
        assert_eq!(step_keys(p, &batch), ["partition request Prepare", "partition request Commit"]);
        assert_eq!(step_key(p, &batch), "partition batch");
        let alone = env(Message::PartitionRequest(PartitionRequest { body: Payload::new(Req::Commit(3)) }));
        assert_eq!(step_keys(p, &alone), [step_key(p, &alone)]);
        assert_eq!(step_keys(p, &Input::Tick), ["partition tick"]);
        let t = table(&[(
            "a",
            &[
                ("partition request Prepare", 1_000.0, 1),
                ("partition request Commit", 3_000.0, 1),
                (RUNTIME_OVERHEAD_KEY, 5.0, 1),
            ],
        )]);
        let mut r = t.resolver("a");
        assert_eq!(r.envelope_ns(step_keys(p, &batch), 0), 4_005, "both items and the runtime overhead once");
        assert_eq!(r.envelope_ns(step_keys(p, &alone), 9), 3_005, "a table without work fields charges means");
    }

    /// Per engine, (key, ns, n).
    type Spec<'a> = &'a [(&'a str, &'a [(&'a str, f64, u64)])];

    fn table(engines: Spec<'_>) -> CostTable {
        CostTable {
            name: "t".into(),
            command: "test".into(),
            note: String::new(),
            default_ns: 777,
            engines: engines
                .iter()
                .map(|(e, keys)| {
                    (e.to_string(), keys.iter().map(|(k, ns, n)| (k.to_string(), CostEntry::mean(*ns, *n))).collect())
                })
                .collect(),
        }
    }

    #[test]
    fn lookups_fall_back_from_engine_key_to_role_to_other_engines_to_default() {
        let t = table(&[
            (
                "a",
                &[("partition request X", 100.0, 1), ("partition request Y", 300.0, 1), (RUNTIME_OVERHEAD_KEY, 5.0, 2)],
            ),
            ("b", &[("coordinator call p", 1000.0, 1), ("coordinator call q", 3000.0, 3)]),
        ]);
        let mut r = t.resolver("a");
        assert_eq!(r.step_ns("partition request X".into()), 105);
        assert_eq!(r.step_ns("partition request Z".into()), 205, "a's partition mean");
        assert_eq!(r.step_ns("coordinator call p".into()), 1005, "b's key");
        assert_eq!(r.step_ns("coordinator call r".into()), 2505, "b's coordinator mean, weighted");
        assert_eq!(r.step_ns("role3 tick".into()), 782, "the default");
        let mut unknown = t.resolver("nobody");
        assert_eq!(unknown.step_ns("partition request X".into()), 105, "any engine's key and overhead");
    }

    #[test]
    fn tables_round_trip_and_bad_ones_are_typed_errors() {
        let t = table(&[("a", &[("partition tick", 12.5, 4)])]);
        assert_eq!(CostTable::parse(&t.to_toml(), "x").unwrap(), t);
        let mut bad = t.clone();
        bad.engines.get_mut("a").unwrap().get_mut("partition tick").unwrap().ns = -1.0;
        assert!(matches!(CostTable::parse(&bad.to_toml(), "x"), Err(CostTableError::Invalid { .. })));
        assert!(matches!(CostTable::parse("name = 3", "x"), Err(CostTableError::Parse { .. })));
        assert!(CostTable::builtin().engines.len() >= 2, "the committed table has engines");
    }

    #[test]
    fn the_thread_clock_advances_with_work() {
        let a = thread_cpu_ns().expect("linux has a thread clock");
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_ns().unwrap() > a);
    }

    #[test]
    fn profiles_give_means_overhead_and_flush() {
        let mut d = ProfileData::default();
        d.steps.insert("partition tick".into(), StepStats { n: 4, ns: 400, ..StepStats::default() });
        d.worker_steps = 4;
        d.worker_cpu_ns = 1000;
        d.flushes = (2, 200);
        d.probe_ns = 120;
        let e = d.entries();
        assert_eq!(e["partition tick"].ns, 100.0);
        assert_eq!(
            e[RUNTIME_OVERHEAD_KEY].ns, 70.0,
            "(1000 - 400 - 200 - 120) / 4: the profile's own CPU is not the runtime's"
        );
        assert_eq!(e[FLUSH_KEY].ns, 100.0);
    }

    /// A step kind's cost is fitted against its work: steps of 2,000 ns plus 300 ns a unit
    /// (with noise) give that line back, and a split step (a commit of 20 rows here, 3 there)
    /// is charged its rows plus one more fixed part, not twice the mean.
    #[test]
    fn step_costs_are_fitted_against_the_work_the_steps_did() {
        let mut s = StepStats::default();
        for i in 0..1_000u64 {
            let units = (i % 30) as f64;
            let noise = (i * 7_919 % 201) as f64 - 100.0;
            s.add((2_000.0 + 300.0 * units + noise) as u64, units);
        }
        let e = s.entry().unwrap();
        assert!((e.unit_ns - 300.0).abs() < 5.0, "{e:?}");
        assert!((e.at(0.0) - 2_000.0).abs() < 60.0, "{e:?}");
        assert!((e.at(23.0) - 8_900.0).abs() < 60.0, "{e:?}");
        let table = CostTable {
            engines: BTreeMap::from([("a".into(), BTreeMap::from([("partition request Commit".to_string(), e)]))]),
            ..table(&[])
        };
        let mut r = table.resolver("a");
        let commit = || vec!["partition request Commit".to_string()];
        let split = r.envelope_ns(commit(), 20) + r.envelope_ns(commit(), 3);
        let whole = r.envelope_ns(commit(), 23);
        assert!(whole.abs_diff(r.envelope_ns(commit(), 0) + 23 * 300) < 150, "a step of 23 units costs 23 units more");
        assert!(split.abs_diff(whole + 2_000) < 150, "split {split} against whole {whole}");
        // A batch's items share its work evenly.
        assert_eq!(r.envelope_ns(vec!["partition request Commit".into(); 2], 46), 2 * whole);

        // Work that made steps cheaper is noise: the mean is charged.
        let mut cheaper = StepStats::default();
        cheaper.add(1_000, 1.0);
        cheaper.add(900, 3.0);
        let e = cheaper.entry().unwrap();
        assert_eq!((e.ns, e.unit_ns, e.at(10.0)), (950.0, 0.0, 950.0));
        // A steep line is bent through zero rather than charge a step of no work less than it.
        let mut steep = StepStats::default();
        steep.add(100, 1.0);
        steep.add(1_100, 2.0);
        let e = steep.entry().unwrap();
        assert_eq!((e.at(0.0), e.at(2.0)), (0.0, 800.0));
        // Work that never varied leaves the mean alone.
        let mut same = StepStats::default();
        same.add(100, 4.0);
        same.add(300, 4.0);
        assert_eq!(same.entry().unwrap(), CostEntry::mean(200.0, 2));
        assert_eq!(StepStats::default().entry(), None);
    }

    #[test]
    fn bad_work_fields_are_typed_errors() {
        let mut t = table(&[("a", &[("partition tick", 12.5, 4)])]);
        t.engines.get_mut("a").unwrap().get_mut("partition tick").unwrap().unit_ns = -1.0;
        assert!(matches!(CostTable::parse(&t.to_toml(), "x"), Err(CostTableError::Invalid { .. })));
    }

    #[test]
    fn a_clock_read_costs_something_and_less_than_a_millisecond() {
        let c = clock_read_ns();
        assert!(c > 0 && c < 1_000_000, "{c}");
    }
}
