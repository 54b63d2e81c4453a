//! The status oracle as a runtime role: [`OracleMachine`] wraps [`StatusOracle`] in the
//! [`Machine`] contract so the simulator, the embedded runtime and the TCP runtime run it like
//! any partition or coordinator, at [`Addr::Oracle`] (placed on node 0 by the topology).
//!
//! * **Peers.** Coordinators (and benchmark clients) are the oracle's clients. The machine maps
//!   each peer address to an oracle [`ClientId`] on first contact; sessions are volatile (rule 8:
//!   lost in a crash), so the map is too.
//! * **Tags.** Oracle replies do not name the request they answer (a `Began` carries only the
//!   timestamp). Peers tag each request ([`OracleRequest::tag`]); the oracle answers every
//!   request except `Ack` exactly once and in arrival order (held replies are released in the
//!   order they were decided), so the machine echoes tags from a per-peer FIFO. Pushes and
//!   disconnections are untagged.
//! * **Log.** Each WAL [`Batch`] is one log record (one per step: see [`runtime_config`]); a [`Checkpoint`] is the snapshot (none while
//!   a batch is open). The runtime's persist-before-send rule is exactly rule 7's "no reply before
//!   its batch is durable". Recovery replays through [`StatusOracle::recover`]; the crash-range
//!   batch it produces is emitted at the first step.
//! * **Garbage collection (§IV "HBase Garbage Collection").** Every [`GC_INTERVAL`] the oracle
//!   sends `Gc { low_water: Tmin }` to every partition, where `Tmin` is the smallest start
//!   timestamp still in flight (or the next timestamp), with up to [`PURGE_TXNS_MAX`] aborted
//!   transactions and crash ranges below it whose versions the partitions must delete
//!   ([`StatusOracle::purge_work`]); each partition answers with what it purged, and the oracle
//!   forgets an entry once every partition did (rule 4). See [`super::engine`] for what the
//!   partitions do with it.

use super::engine;
use super::messages::{Batch, Checkpoint, OracleEffects, Outbound, Reply, Request};
use super::oracle::{Input as OracleInput, StatusOracle};
use super::{OracleConfig, OracleError};
use crate::machine::{Effects, Input, Machine};
use crate::message::{Addr, EngineReply, EngineRequest, Envelope, Message, PartitionReply, PartitionRequest};
use litmus_core::{ClientId, Error, PartitionId, Time};
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
    /// Records produced by recovery, emitted at the first step.
    recovered: Vec<Batch>,
    last_gc: Time,
    scratch: OracleEffects,
}

impl OracleMachine {
    pub fn new(config: OracleConfig, partitions: u32) -> OracleMachine {
        OracleMachine {
            oracle: StatusOracle::new(config.clone()),
            config,
            partitions,
            ids: BTreeMap::new(),
            addrs: BTreeMap::new(),
            tags: BTreeMap::new(),
            next_id: 0,
            recovered: Vec::new(),
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

    fn emit(&mut self, out: &mut Effects) {
        let effects = std::mem::take(&mut self.scratch);
        for batch in &effects.persist {
            out.persist.push(batch.encode());
        }
        for o in effects.send {
            match o {
                Outbound::Reply { client, reply } => {
                    let Some(&to) = self.addrs.get(&client) else { continue };
                    let tag = if matches!(reply, Reply::Push { .. }) {
                        None
                    } else {
                        self.tags.get_mut(&client).and_then(VecDeque::pop_front)
                    };
                    let msg = Message::OracleReply(OracleReply { tag, body: reply });
                    out.send.push(Envelope { from: Addr::Oracle, to, msg });
                }
                Outbound::Disconnect { client } => {
                    self.tags.remove(&client);
                    let Some(&to) = self.addrs.get(&client) else { continue };
                    let body = Reply::Refused(OracleError::NotConnected);
                    let msg = Message::OracleReply(OracleReply { tag: None, body });
                    out.send.push(Envelope { from: Addr::Oracle, to, msg });
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
        for p in 0..self.partitions {
            let (purge, crashed) = (purge.clone(), crashed.clone());
            let body = EngineRequest::Omid(engine::Request::Gc { low_water, purge, crashed });
            let msg = Message::PartitionRequest(PartitionRequest { body });
            out.send.push(Envelope { from: Addr::Oracle, to: Addr::Partition(PartitionId(p)), msg });
        }
    }
}

impl Machine for OracleMachine {
    fn addr(&self) -> Addr {
        Addr::Oracle
    }

    fn recover(&mut self, snapshot: Option<&[u8]>, records: &[Vec<u8>]) -> Result<(), Error> {
        let checkpoint = snapshot.map(Checkpoint::decode).transpose()?;
        let batches = records.iter().map(|r| Batch::decode(r)).collect::<Result<Vec<_>, _>>()?;
        let (oracle, effects) = StatusOracle::recover(self.config.clone(), checkpoint.as_ref(), &batches);
        assert!(effects.send.is_empty(), "recovery sends nothing");
        self.oracle = oracle;
        self.recovered = effects.persist;
        Ok(())
    }

    fn step(&mut self, now: Time, input: Input, out: &mut Effects) {
        for batch in std::mem::take(&mut self.recovered) {
            out.persist.push(batch.encode());
        }
        match input {
            Input::Tick => {
                self.oracle.step(now, OracleInput::Tick, &mut self.scratch);
                self.emit(out);
                self.send_gc(now, out);
            }
            Input::Message(Envelope {
                msg: Message::PartitionReply(PartitionReply { from, body: EngineReply::Omid(reply) }),
                ..
            }) => {
                let engine::Reply::Purged { start_ts, crashed } = reply else { return };
                let partitions = self.partitions;
                let input = OracleInput::Purged { partition: from.0, partitions, start_ts, crashed };
                self.oracle.step(now, input, &mut self.scratch);
                self.emit(out);
            }
            Input::Message(env) => {
                let Message::OracleRequest(OracleRequest { tag, body }) = env.msg else { return };
                let client = self.client_of(env.from);
                if body != Request::Ack {
                    self.tags.entry(client).or_default().push_back(tag);
                }
                self.oracle.step(now, OracleInput::Request { client, request: body }, &mut self.scratch);
                self.emit(out);
            }
        }
    }

    fn snapshot(&self) -> Option<Vec<u8>> {
        self.oracle.checkpoint().map(|c| c.encode())
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
