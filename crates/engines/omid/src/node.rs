//! The status oracle as a runtime role: [`OracleMachine`] wraps [`StatusOracle`] in the
//! [`Machine`] contract so the simulator, the embedded runtime and the TCP runtime run it like
//! any partition or coordinator, at [`ORACLE`]. There is one oracle.
//!
//! * **Peers.** Coordinators (and benchmark clients) are the oracle's clients. The machine maps
//!   each peer address to an oracle [`ClientId`] on first contact; sessions are volatile (OM-8:
//!   lost in a crash), so the map is too.
//! * **Tags.** Oracle replies do not name the request they answer (a `Began` carries only the
//!   timestamp). Peers tag each request ([`OracleRequest::tag`]); the oracle answers every
//!   request except `Ack` exactly once and in arrival order (held replies are released in the
//!   order they were decided), so the machine echoes tags from a per-peer FIFO. Pushes and
//!   disconnections are untagged.
//! * **Log.** Each WAL [`Batch`] is one log record (one per step: see [`runtime_config`]); a
//!   [`Checkpoint`] is the snapshot (none while a batch is open). The runtime's persist-before-send
//!   rule is exactly OM-7's "no reply before its batch is durable". Recovery rebuilds the
//!   log's state ([`StatusOracle::rebuild`]); the crash range that fences off what was in
//!   flight is added and logged at the first step ([`StatusOracle::fence`]), so a snapshot
//!   taken before it (a replica group's member that does not lead takes one so) holds what the
//!   log holds and nothing more.
//! * **Garbage collection (§IV "HBase Garbage Collection").** Every [`GC_INTERVAL`] the oracle
//!   sends `Gc { low_water: Tmin }` to every partition, where `Tmin` is the smallest start
//!   timestamp still in flight (or the next timestamp), with up to [`PURGE_TXNS_MAX`] aborted
//!   transactions and crash ranges below it whose versions the partitions must delete
//!   ([`StatusOracle::purge_work`]); each partition answers the oracle with what it purged, and
//!   the oracle forgets an entry once every partition did (OM-4). Who reported is volatile, so
//!   a restarted oracle asks for the work again (purging twice finds nothing); only the
//!   conclusions, `Forgotten` and `CrashForgotten`, are logged. See [`super::engine`] for what
//!   the partitions do with it.
//!
//! ## Failover is a restart
//!
//! The oracle's failover is its recovery (OM-8, §IV "Recovery"): [`Machine::recover`] rebuilds
//! the durable state from the checkpoint and the batches after it; the first step logs a crash
//! range that aborts whatever was in flight, and timestamps resume above the last reservation. Sessions,
//! session ids and `BeginAs` ids start empty; coordinators ([`super::engine::OmidCoordinator`])
//! find their session gone — the oracle answers nothing for
//! [`super::engine::ORACLE_FAILOVER_AFTER`] while requests wait, or refuses them as
//! `NotConnected` — and reconnect to [`ORACLE`] with a new session id (OM-E4). Where the
//! oracle's log lives is the cluster's choice:
//!
//! * **`replicas = 1`**: the oracle runs alone on node 0 ([`super::OmidEngine`]'s `roles`), its
//!   log on that node's disk. While node 0 is down no transaction starts or commits; the node's
//!   restart is the failover.
//! * **`replicas > 1`**: the runtime keeps the oracle in a raft replica group on node 0 and
//!   the nodes after it ([`super::OmidEngine`]'s `replicated_roles`; see
//!   `docs/replication.md`). The group's log is the oracle's log: the leader's replies leave
//!   only once the group has committed the step's batch (commit before send, the replicated
//!   form of OM-7), so every acknowledged commit is in the log a new leader recovers from. A
//!   new leader starts its machine as a restart does; [`ORACLE`] reaches whichever member
//!   leads. The group's snapshot may be taken by a member that does not lead, from the
//!   machine rebuilt from the log and never stepped: it holds no crash range, since the
//!   leader, which goes on committing in its reserved range, never logged one. The machine
//!   itself knows nothing of the group.

use super::engine;
use super::messages::{Batch, Checkpoint, OracleEffects, Outbound, Reply, Request};
use super::oracle::{Input as OracleInput, StatusOracle};
use super::{OracleConfig, OracleError};
use litmus_core::{ClientId, Error, PartitionId, Time};
use litmus_protocol::machine::{Effects, Input, Machine};
use litmus_protocol::message::{Addr, Envelope, Message, PartitionReply, PartitionRequest, Payload, RoleId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// The oracle's configuration under a LitmusDB runtime. Every runtime already group-commits each
/// machine's records (all records of a loop iteration, over many steps, in one log write and one
/// fsync, before any of their messages leave) — which is what §IV's 1 KB / 5 ms batching is for.
/// Batching again inside the oracle would only add up to `batch_delay` plus a tick of latency
/// to every reply, so under a runtime the oracle emits its batch at the end of every step
/// (`batch_bytes_max = 1`: any record fills it); its own triggers remain for a host without group
/// commit.
pub fn runtime_config() -> OracleConfig {
    OracleConfig { batch_bytes_max: 1, ..OracleConfig::default() }
}

/// How often the oracle tells the partitions its `Tmin` (garbage collection).
pub const GC_INTERVAL: Duration = Duration::from_millis(500);

/// The status oracle's role (node 0; with `replicas > 1`, its replica group's).
pub const ORACLE_ROLE: RoleId = RoleId(0);
pub const ORACLE: Addr = Addr::Role(ORACLE_ROLE);

/// Everything that travels to and from the oracle, as one payload type (so a receiver tells a
/// request from a reply on the wire, where payloads are untyped bytes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OracleWire {
    /// A coordinator (or benchmark client) → the oracle.
    Request(OracleRequest),
    /// The oracle → a coordinator (or benchmark client).
    Reply(OracleReply),
}

impl OracleWire {
    pub fn into_message(self) -> Message {
        Message::Role(Payload::new(self))
    }
    /// The oracle traffic a role message carries (`None` for anything else, or malformed bytes).
    pub fn from_payload(payload: Payload) -> Option<OracleWire> {
        payload.decode().ok()
    }
    /// A look at the oracle traffic in `msg` (in process only: for simulator filters and tests).
    pub fn peek(msg: &Message) -> Option<&OracleWire> {
        match msg {
            Message::Role(p) => p.peek::<OracleWire>(),
            _ => None,
        }
    }
}

/// Most aborted transactions (and, separately, crash ranges) one GC message asks partitions to
/// purge.
pub const PURGE_TXNS_MAX: usize = 256;

/// A request to the oracle; `tag` is echoed in the reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OracleRequest {
    pub tag: u64,
    pub body: Request,
}

/// A reply from the oracle: `tag` of the request it answers, `None` for pushes and for the
/// notice that the session ended (`Refused(NotConnected)`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OracleReply {
    pub tag: Option<u64>,
    pub body: Reply,
}

/// See the module doc.
pub struct OracleMachine {
    config: OracleConfig,
    partitions: u32,
    oracle: StatusOracle,
    ids: BTreeMap<Addr, ClientId>,
    addrs: BTreeMap<ClientId, Addr>,
    tags: BTreeMap<ClientId, VecDeque<u64>>,
    next_id: u64,
    /// Rebuilt from its log and not fenced yet: the first step fences it (OM-8).
    fence_due: bool,
    last_gc: Time,
    scratch: OracleEffects,
}

impl OracleMachine {
    /// The oracle at [`ORACLE`], with an empty log until [`Machine::recover`] gives it one.
    pub fn new(config: OracleConfig, partitions: u32) -> OracleMachine {
        OracleMachine {
            oracle: StatusOracle::new(config.clone()),
            config,
            partitions,
            ids: BTreeMap::new(),
            addrs: BTreeMap::new(),
            tags: BTreeMap::new(),
            next_id: 0,
            fence_due: false,
            last_gc: Time::ZERO,
            scratch: OracleEffects::default(),
        }
    }

    /// The state machine inside (for tests and benchmarks).
    pub fn oracle(&self) -> &StatusOracle {
        &self.oracle
    }

    fn client_of(&mut self, addr: Addr) -> ClientId {
        if let Some(&id) = self.ids.get(&addr) {
            return id;
        }
        self.next_id += 1;
        let id = ClientId(self.next_id);
        self.ids.insert(addr, id);
        self.addrs.insert(id, addr);
        id
    }

    /// Persists what the oracle emitted, then sends its replies (the runtime persists `persist`
    /// before it sends `send`).
    fn emit(&mut self, out: &mut Effects) {
        let effects = std::mem::take(&mut self.scratch);
        out.persist.extend(effects.persist.iter().map(Batch::encode));
        for o in effects.send {
            match o {
                Outbound::Reply { client, reply } => {
                    let Some(&to) = self.addrs.get(&client) else { continue };
                    let tag = if matches!(reply, Reply::Push { .. }) {
                        None
                    } else {
                        self.tags.get_mut(&client).and_then(VecDeque::pop_front)
                    };
                    let msg = OracleWire::Reply(OracleReply { tag, body: reply }).into_message();
                    out.send.push(Envelope { from: ORACLE, to, msg });
                }
                Outbound::Disconnect { client } => {
                    self.tags.remove(&client);
                    let Some(&to) = self.addrs.get(&client) else { continue };
                    let body = Reply::Refused(OracleError::NotConnected);
                    let msg = OracleWire::Reply(OracleReply { tag: None, body }).into_message();
                    out.send.push(Envelope { from: ORACLE, to, msg });
                }
            }
        }
    }

    fn send_gc(&mut self, now: Time, out: &mut Effects) {
        if now.saturating_sub(self.last_gc) < GC_INTERVAL {
            return;
        }
        self.last_gc = now;
        let low_water = self.oracle.t_min();
        let (purge, crashed) = self.oracle.purge_work(low_water, PURGE_TXNS_MAX);
        for part in 0..self.partitions {
            let (purge, crashed) = (purge.clone(), crashed.clone());
            let body = Payload::new(engine::Request::Gc { low_water, purge, crashed });
            let msg = Message::PartitionRequest(PartitionRequest { body });
            out.send.push(Envelope { from: ORACLE, to: Addr::Partition(PartitionId(part)), msg });
        }
    }

    fn on_request(&mut self, now: Time, from: Addr, request: OracleRequest, out: &mut Effects) {
        let OracleRequest { tag, body } = request;
        let client = self.client_of(from);
        if body != Request::Ack {
            self.tags.entry(client).or_default().push_back(tag);
        }
        self.oracle.step(now, OracleInput::Request { client, request: body }, &mut self.scratch);
        self.emit(out);
    }

    /// A partition's purge report ([`engine::Reply::Purged`], the answer to the oracle's `Gc`).
    /// The purge bookkeeping is volatile (a report lost in a restart is asked for again by the
    /// next `Gc`); what it concludes (`Forgotten`, `CrashForgotten`) is logged.
    fn on_purged(&mut self, now: Time, from: PartitionId, reply: engine::Reply, out: &mut Effects) {
        let engine::Reply::Purged { start_ts, crashed } = reply else { return };
        let input = OracleInput::Purged { partition: from.0, partitions: self.partitions, start_ts, crashed };
        self.oracle.step(now, input, &mut self.scratch);
        self.emit(out);
    }

    fn tick(&mut self, now: Time, out: &mut Effects) {
        self.oracle.step(now, OracleInput::Tick, &mut self.scratch);
        self.emit(out);
        self.send_gc(now, out);
    }
}

impl Machine for OracleMachine {
    fn addr(&self) -> Addr {
        ORACLE
    }

    /// OM-8: the durable state from the log and no sessions; what was in flight is aborted by
    /// a crash range at the first step, which logs it.
    fn recover(&mut self, snapshot: Option<&[u8]>, records: &[Vec<u8>]) -> Result<(), Error> {
        let checkpoint = snapshot.map(Checkpoint::decode).transpose()?;
        let batches = records.iter().map(|r| Batch::decode(r)).collect::<Result<Vec<_>, _>>()?;
        self.oracle = StatusOracle::rebuild(self.config.clone(), checkpoint.as_ref(), &batches);
        self.fence_due = true;
        self.ids.clear();
        self.addrs.clear();
        self.tags.clear();
        Ok(())
    }

    fn step(&mut self, now: Time, input: Input, out: &mut Effects) {
        if std::mem::take(&mut self.fence_due) {
            self.oracle.fence(&mut self.scratch);
            assert!(self.scratch.send.is_empty(), "fencing sends nothing");
            self.emit(out);
        }
        match input {
            Input::Tick => self.tick(now, out),
            Input::Message(env) => match env.msg {
                Message::Role(payload) => {
                    if let Some(OracleWire::Request(request)) = OracleWire::from_payload(payload) {
                        self.on_request(now, env.from, request, out)
                    }
                }
                Message::PartitionReply(PartitionReply { from, body }) => {
                    if let Ok(reply) = body.decode::<engine::Reply>() {
                        self.on_purged(now, from, reply, out)
                    }
                }
                _ => {}
            },
        }
    }

    /// The state of every record emitted so far: before the first step, the log's state
    /// without the crash range the first step will log.
    fn snapshot(&mut self) -> Option<Vec<u8>> {
        self.oracle.checkpoint().map(|c| c.encode())
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
