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
//! the mean is over, plus two measured extras per engine:
//! [`RUNTIME_OVERHEAD_KEY`] (the worker's CPU per step outside the machine: mailboxes, the
//! delay heap, routing) and [`FLUSH_KEY`] (one group commit). [`CostTable::resolver`]
//! answers any key with a fallback chain: the engine's own mean for the key, the engine's mean
//! over the role, every engine's mean for the key, every engine's mean over the role, and
//! finally [`CostTable::default_ns`]. Nothing is invented at lookup time: every number but the
//! last fallback was measured.

use litmus_engine::{Addr, Input, Message};
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
        Addr::Coordinator(_) => "coordinator".into(),
        Addr::Partition(_) => "partition".into(),
        Addr::Role(r) => format!("role{}", r.0),
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
                litmus_engine::message::RequestBody::Call { procedure, .. } => {
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
                litmus_engine::message::Batched::Request(r) => push_kind(&mut key, "request", &r.body),
                litmus_engine::message::Batched::Reply(r) => push_kind(&mut key, "reply", &r.body),
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

/// One measured step kind: mean CPU nanoseconds over `n` steps.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostEntry {
    pub ns: f64,
    pub n: u64,
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
                if !e.ns.is_finite() || e.ns < 0.0 || e.ns > 1e9 {
                    return Err(format!("engine {engine}, {key:?}: ns must be in [0, 1e9], got {}", e.ns));
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
                let a = all.entry(k.clone()).or_insert(CostEntry { ns: 0.0, n: 0 });
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
            own: own.into_iter().map(|(k, e)| (k, e.ns)).collect(),
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
    own: BTreeMap<String, f64>,
    own_role: BTreeMap<String, f64>,
    any: BTreeMap<String, f64>,
    any_role: BTreeMap<String, f64>,
    default_ns: u64,
    /// Added to every step: the runtime's own CPU per step.
    pub overhead_ns: u64,
    /// One group commit.
    pub flush_ns: u64,
    cache: HashMap<String, u64>,
}

impl CostResolver {
    /// CPU nanoseconds of one step named `key` ([`step_key`]), the runtime overhead included.
    pub fn step_ns(&mut self, key: String) -> u64 {
        if let Some(&ns) = self.cache.get(&key) {
            return ns;
        }
        let role = key.split(' ').next().unwrap_or_default();
        let ns = self
            .own
            .get(&key)
            .or_else(|| self.own_role.get(role))
            .or_else(|| self.any.get(&key))
            .or_else(|| self.any_role.get(role))
            .map_or(self.default_ns, |ns| ns.round() as u64)
            + self.overhead_ns;
        self.cache.insert(key, ns);
        ns
    }

    /// CPU nanoseconds of one envelope's steps ([`step_keys`]: one, or a batch's items): each
    /// item's cost, and the runtime overhead once. The overhead was measured per envelope the
    /// worker took from its queue, not per item of a batch; charging it per item made a batched
    /// engine pay it several times over (coordfree's New-Order 4.3x, acid's 1.7x: its reads and
    /// operations travel in batches per partition).
    pub fn envelope_ns(&mut self, keys: Vec<String>) -> u64 {
        let overhead = self.overhead_ns;
        keys.into_iter().map(|k| self.step_ns(k) - overhead).sum::<u64>() + overhead
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

/// What a profile holds: per key, (steps, total CPU ns); and the workers' totals.
#[derive(Clone, Debug, Default)]
pub struct ProfileData {
    pub steps: BTreeMap<String, (u64, u64)>,
    /// Steps and CPU nanoseconds of the worker threads in all (machine steps included).
    pub worker_steps: u64,
    pub worker_cpu_ns: u64,
    /// Group commits that wrote records, and their CPU nanoseconds.
    pub flushes: (u64, u64),
    /// CPU nanoseconds the profile itself took: its clock reads, step names and counts. Not
    /// the runtime's: subtracted from the worker's CPU with the machines' before the overhead
    /// per step is taken (it was a quarter of that overhead, and charged to every simulated
    /// step).
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
        for (k, (n, ns)) in &o.steps {
            let e = self.steps.entry(k.clone()).or_default();
            e.0 += n;
            e.1 += ns;
        }
        self.worker_steps += o.worker_steps;
        self.worker_cpu_ns += o.worker_cpu_ns;
        self.flushes.0 += o.flushes.0;
        self.flushes.1 += o.flushes.1;
        self.probe_ns += o.probe_ns;
        self.clock_ns = self.clock_ns.max(o.clock_ns);
    }

    /// The table entries these measurements give: each key's mean, the runtime's overhead per
    /// step (worker CPU spent neither inside machines nor on the profile itself, per step) and
    /// the flush cost.
    pub fn entries(&self) -> BTreeMap<String, CostEntry> {
        let mut out: BTreeMap<String, CostEntry> = self
            .steps
            .iter()
            .filter(|(_, (n, _))| *n > 0)
            .map(|(k, &(n, ns))| (k.clone(), CostEntry { ns: ns as f64 / n as f64, n }))
            .collect();
        let in_machines: u64 = self.steps.values().map(|(_, ns)| ns).sum();
        if self.worker_steps > 0 {
            let outside = self
                .worker_cpu_ns
                .saturating_sub(in_machines)
                .saturating_sub(self.flushes.1)
                .saturating_sub(self.probe_ns);
            out.insert(
                RUNTIME_OVERHEAD_KEY.into(),
                CostEntry { ns: outside as f64 / self.worker_steps as f64, n: self.worker_steps },
            );
        }
        if self.flushes.0 > 0 {
            out.insert(
                FLUSH_KEY.into(),
                CostEntry { ns: self.flushes.1 as f64 / self.flushes.0 as f64, n: self.flushes.0 },
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
    use litmus_engine::message::PartitionRequest;
    use litmus_engine::{Envelope, Payload};

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
        assert_eq!(step_key(Addr::Role(litmus_engine::RoleId(0)), &Input::Tick), "role0 tick");
    }

    /// A batch is its items: each named as if it had arrived alone, so the simulator charges the
    /// sum of their measured costs (a batch named as one step fell back to the role's mean).
    #[test]
    fn a_batch_steps_as_its_items() {
        use litmus_engine::message::Batched;
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
        assert_eq!(r.envelope_ns(step_keys(p, &batch)), 4_005, "both items and the runtime overhead once");
        assert_eq!(r.envelope_ns(step_keys(p, &alone)), 3_005);
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
                    (
                        e.to_string(),
                        keys.iter().map(|(k, ns, n)| (k.to_string(), CostEntry { ns: *ns, n: *n })).collect(),
                    )
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
        d.steps.insert("partition tick".into(), (4, 400));
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

    #[test]
    fn a_clock_read_costs_something_and_less_than_a_millisecond() {
        let c = clock_read_ns();
        assert!(c > 0 && c < 1_000_000, "{c}");
    }
}
