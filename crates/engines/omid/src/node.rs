//! The status oracle as a runtime role: [`OracleMachine`] wraps [`StatusOracle`] in the
//! [`Machine`] contract so the simulator, the embedded runtime and the TCP runtime run it like
//! any partition or coordinator, at [`ORACLE`] (node 0) and, in clusters of two nodes or
//! more, a hot standby at [`ORACLE_STANDBY`] (node 1).
//!
//! * **Peers.** Coordinators (and benchmark clients) are the oracle's clients. The machine maps
//!   each peer address to an oracle [`ClientId`] on first contact; sessions are volatile (OM-8:
//!   lost in a crash), so the map is too.
//! * **Tags.** Oracle replies do not name the request they answer (a `Began` carries only the
//!   timestamp). Peers tag each request ([`OracleRequest::tag`]); the oracle answers every
//!   request except `Ack` exactly once and in arrival order (held replies are released in the
//!   order they were decided), so the machine echoes tags from a per-peer FIFO. Pushes and
//!   disconnections are untagged.
//! * **Log.** Each WAL [`Batch`] is one log record (one per step: see [`runtime_config`]); a [`Checkpoint`] is the snapshot (none while
//!   a batch is open). The runtime's persist-before-send rule is exactly OM-7's "no reply before
//!   its batch is durable". Recovery replays through [`StatusOracle::recover`]; the crash-range
//!   batch it produces is emitted at the first step.
//! * **Garbage collection (§IV "HBase Garbage Collection").** Every [`GC_INTERVAL`] the serving
//!   oracle sends `Gc { low_water: Tmin }` to every partition, where `Tmin` is the smallest start
//!   timestamp still in flight (or the next timestamp), with up to [`PURGE_TXNS_MAX`] aborted
//!   transactions and crash ranges below it whose versions the partitions must delete
//!   ([`StatusOracle::purge_work`]); each partition answers the sender with what it purged, and
//!   the oracle forgets an entry once every partition did (OM-4). See [`super::engine`] for what the
//!   partitions do with it.
//!
//! ## Hot standby (§IV "Recovery": "a hot backup could continuously read the state from the WAL")
//!
//! Two replicas of one machine; which one serves is durable state of the oracle's own log: a
//! [`Record::Role`] names the **epoch** and its primary (replica 0 = [`ORACLE`], 1 =
//! [`ORACLE_STANDBY`]). A fresh cluster is epoch 0 with replica 0 serving and replica 1 its
//! standby, both at the empty state. What replica a restart comes back as is what its log says.
//!
//! * **Log shipping, synchronous.** The primary persists each batch (OM-7, as a lone oracle does) and ships
//!   it ([`Replication::Ship`], numbered by `lsn`, the batch's position in the stream) to the
//!   standby, which tails it into a [`Standby`] (persisting it in its own log) and acknowledges
//!   (`Ack`, after its log is durable). **A primary with a standby in sync answers nothing until
//!   the standby has acknowledged every batch up to the reply's state** — so a failover never
//!   loses an acknowledged commit. Unacknowledged batches are shipped again after
//!   [`SHIP_RESEND_AFTER`]; a standby that misses batches the primary no longer holds in memory
//!   (either restarted) gets a state transfer ([`Replication::Install`]: the primary's
//!   checkpoint, logged by the standby as a [`Record::Install`]). The standby keeps batches that
//!   arrive ahead of a missing one (the network reorders) and applies them in order. Cost: one
//!   round trip to node 1 per oracle reply (`bench ycsb-t --engine omid --nodes 3`, embedded:
//!   about 0.7× the throughput of the same cluster without a standby).
//! * **No stale answers.** An ack also has to answer a message sent *after* the reply was decided
//!   (`seq`; a reply decided in a step gets a heartbeat at once): a standby that acknowledges has
//!   not promoted yet, so a reply (even a `Begin` or `InSnapshot` that logged nothing) reflects
//!   the newest state — raft's ReadIndex. Every primary incarnation starts with a batch of its
//!   own, so an ack of an earlier incarnation's message can never release a reply.
//! * **Failover.** A standby that hears nothing of its epoch's primary — batches, or heartbeats
//!   every [`HEARTBEAT_INTERVAL`] — for [`PROMOTE_AFTER`] promotes itself: the epoch + 1 with
//!   itself as primary, and OM-8's last step (abort what was in flight: a crash range above its
//!   last reservation). It refuses coordinators until then ([`OracleError::NotServing`]).
//! * **Fencing.** A replica answers any ship from an older epoch with [`Replication::Fenced`], so
//!   the old primary can never again collect the ack every answer needs: it drops its held
//!   replies (never sent, so never acknowledged) and refuses coordinators. A restarted old
//!   primary comes back as the primary of its old epoch, but is fenced at its first ship. It
//!   then asks the new primary to `Join`, and **becomes the new standby by state transfer** (its
//!   own tail may hold batches nobody acknowledged; the checkpoint replaces them). Its
//!   knowledge of the newer epoch is not logged until the checkpoint is: a replica whose
//!   log says "standby of epoch e" always holds epoch e's state.
//! * **Standby down: degrade only when it is safe, else stall.** Two replicas cannot tell a
//!   crashed standby from a partitioned one, and a partitioned standby promotes. So a primary
//!   whose standby is in sync *stalls* while the standby is silent (coordinators fail over to the
//!   standby address and back until one of them answers) — never answers alone. It serves alone
//!   only while the other replica is known **out** ([`Record::Role`]'s `standby_out`): right after
//!   a promotion the old primary lacks the new epoch, cannot promote (a primary never does) and
//!   can only come back through `Join`, so the new primary answers without acks, which is what
//!   keeps the cluster committing while node 0 is down. On `Join` the primary logs
//!   `standby_out = false` *before* it sends the checkpoint, and is synchronous from then on —
//!   also after a restart. (A third voter — a witness, or this log under Raft — would let a
//!   primary drop a dead standby safely; not built.)
//! * **Garbage collection** comes from the serving oracle only: a primary alone, or one whose
//!   batches are all acknowledged (so its `Tmin` is below every timestamp a promoted standby
//!   issues) with an ack received for a message sent less than [`SERVE_LEASE`] ago (shorter than
//!   [`PROMOTE_AFTER`]). Fenced replicas and standbys send none. The same goes for purging
//!   (the `purge` and `crashed` lists of `Gc`): partitions answer `Purged` to the replica that
//!   asked, and only an unfenced primary counts the reports. Who reported is volatile, so a
//!   new primary (or a restarted one) asks again; what the reports conclude (`Forgotten`,
//!   `CrashForgotten`) is logged, so shipped. A purged aborted `Ts` is one the standby also holds
//!   as aborted (the primary collects only with every batch acknowledged).
//! * **Sessions** (which client session began each in-flight `Ts`, session ids, `BeginAs` ids)
//!   are not logged, so a standby has none: at its promotion everything in flight is aborted by
//!   the crash range anyway, whoever owned it. The aborts a session's end decides are logged
//!   records like any other, so they reach the standby before the reply that follows them.
//! * **Coordinators** ([`super::engine::OmidCoordinator`]) talk to one replica; on
//!   `NotServing`, or when it answers nothing for [`super::engine::ORACLE_FAILOVER_AFTER`] while
//!   requests wait, they switch to the other address — their session ends and they reconnect
//!   (OM-E4) with a new session id (`ConnectAs`), ignoring replies of the replica they left. A
//!   coordinator's first connect (at its first tick) goes to [`ORACLE`] and moves the
//!   same way if that replica does not serve.
//!
//! A single-node cluster runs [`OracleMachine::new`]: no standby, no role records, failover is
//! the node restarting and recovering from its log.

use super::engine;
use super::messages::{Batch, Checkpoint, OracleEffects, Outbound, Record, Reply, Request};
use super::oracle::{Input as OracleInput, Standby, StatusOracle};
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
/// A primary with a standby ships at least this often (an empty ship is a heartbeat); a
/// fenced or joining replica asks to join this often.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(20);
/// A standby that hears nothing of its epoch's primary this long promotes itself.
pub const PROMOTE_AFTER: Duration = Duration::from_millis(200);
/// A primary with a standby sends `Gc` only within this long of sending a ship that the standby
/// acknowledged (shorter than [`PROMOTE_AFTER`]: the standby cannot have promoted since).
pub const SERVE_LEASE: Duration = Duration::from_millis(100);
/// Unacknowledged batches (or a state transfer) are shipped again after this long without an
/// acknowledgement that moves the standby forward.
pub const SHIP_RESEND_AFTER: Duration = Duration::from_millis(20);
/// Batches a standby keeps that arrived ahead of a missing one (beyond: dropped, shipped again).
const EARLY_BATCHES_MAX: u64 = 4096;
/// Ships remembered for the lease (`seq` → send time); older acks renew nothing.
const SHIPS_REMEMBERED_MAX: usize = 1024;

/// The status oracle's role: replica 0, the primary of a fresh cluster (node 0).
pub const ORACLE_ROLE: RoleId = RoleId(0);
/// The second oracle replica: the hot standby at start, the primary after a failover (node 1).
/// Clusters with one node have none.
pub const STANDBY_ROLE: RoleId = RoleId(1);
pub const ORACLE: Addr = Addr::Role(ORACLE_ROLE);
pub const ORACLE_STANDBY: Addr = Addr::Role(STANDBY_ROLE);

/// Everything that travels to, from and between the oracle replicas, as one payload type (so a
/// receiver tells a request from a reply on the wire, where payloads are untyped bytes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OracleWire {
    /// A coordinator (or benchmark client) → the oracle.
    Request(OracleRequest),
    /// The oracle → a coordinator (or benchmark client).
    Reply(OracleReply),
    /// Between the two oracle replicas: log shipping, acks, fencing, state transfer.
    Replication(Replication),
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

/// The replica index of an oracle address (what [`Record::Role`] names).
pub fn replica_index(addr: Addr) -> u8 {
    u8::from(addr == ORACLE_STANDBY)
}

/// The address of oracle replica `index`.
pub fn replica_addr(index: u8) -> Addr {
    if index == 0 {
        ORACLE
    } else {
        ORACLE_STANDBY
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

/// Between the two oracle replicas (see the module doc, "Hot standby").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Replication {
    /// Primary → standby: batch `lsn` of the primary's stream, or (`batch: None`) a heartbeat
    /// saying the stream is at `lsn`. `seq` numbers the primary's messages (per incarnation).
    Ship { epoch: u64, seq: u64, lsn: u64, batch: Option<Batch> },
    /// Primary → standby: state transfer; the checkpoint covers the stream up to its `lsn`.
    Install { epoch: u64, seq: u64, checkpoint: Checkpoint },
    /// Standby → primary: batches up to `applied` are durable here; answers message `seq`.
    Ack { epoch: u64, seq: u64, applied: u64 },
    /// "Epoch `epoch` is newer than yours": the receiver no longer serves.
    Fenced { epoch: u64 },
    /// A replica that learned of `epoch` asks its primary for a state transfer.
    Join { epoch: u64 },
}

/// A reply held until the standby acknowledges the stream up to `lsn` in answer to a message
/// sent at or after `seq` (so the standby had not promoted when the reply was decided).
struct Held {
    lsn: u64,
    seq: u64,
    env: Envelope,
}

/// The serving (or, once fenced, formerly serving) replica.
struct Primary {
    oracle: StatusOracle,
    /// A newer epoch this replica heard of: it serves nothing and asks to join it.
    fenced_by: Option<u64>,
    /// Last replication message sent (this incarnation; the first is numbered from the clock).
    seq: u64,
    /// `seq` of the first message sent at or after the current step began.
    step_seq: u64,
    unacked: VecDeque<(u64, Batch)>,
    /// Recent messages to the standby, `(seq, sent at)`, for the lease.
    sent: VecDeque<(u64, Time)>,
    held: VecDeque<Held>,
    last_ship: Option<Time>,
    last_progress: Time,
    serving_until: Option<Time>,
    last_install: Option<Time>,
    last_join: Option<Time>,
    /// `seq` of the newest ack seen: an older one arriving late (the network reorders) says
    /// nothing new, and read as current it would look like a lagging standby and start a state
    /// transfer.
    acked_seq: u64,
}

impl Primary {
    fn new(oracle: StatusOracle) -> Primary {
        Primary {
            oracle,
            fenced_by: None,
            seq: 0,
            step_seq: 1,
            unacked: VecDeque::new(),
            sent: VecDeque::new(),
            held: VecDeque::new(),
            last_ship: None,
            last_progress: Time::ZERO,
            serving_until: None,
            last_install: None,
            last_join: None,
            acked_seq: 0,
        }
    }

    /// Replies wait for the standby: it holds this epoch's state and could take over.
    fn synchronous(&self, peer: Option<Addr>) -> bool {
        peer.is_some() && self.fenced_by.is_none() && !self.oracle.standby_out()
    }

    fn send(&mut self, now: Time, me: Addr, peer: Addr, r: Replication, out: &mut Effects) {
        self.last_ship = Some(now);
        if self.sent.len() >= SHIPS_REMEMBERED_MAX {
            self.sent.pop_front();
        }
        self.sent.push_back((self.seq, now));
        out.send.push(Envelope { from: me, to: peer, msg: OracleWire::Replication(r).into_message() });
    }

    fn ship(&mut self, now: Time, me: Addr, peer: Addr, lsn: u64, batch: Option<Batch>, out: &mut Effects) {
        self.seq += 1;
        let r = Replication::Ship { epoch: self.oracle.epoch(), seq: self.seq, lsn, batch };
        self.send(now, me, peer, r, out);
    }

    fn install(&mut self, now: Time, me: Addr, peer: Addr, out: &mut Effects) {
        if self.last_install.is_some_and(|at| now.saturating_sub(at) < SHIP_RESEND_AFTER) {
            return;
        }
        let Some(checkpoint) = self.oracle.checkpoint() else { return };
        self.last_install = Some(now);
        self.seq += 1;
        let r = Replication::Install { epoch: self.oracle.epoch(), seq: self.seq, checkpoint };
        self.send(now, me, peer, r, out);
    }

    /// The standby's acknowledgement: forget what it holds, release what it confirms.
    fn on_ack(&mut self, now: Time, me: Addr, peer: Addr, seq: u64, applied: u64, out: &mut Effects) {
        if seq < self.acked_seq || seq > self.seq {
            // Older than the newest, or an answer to a message this incarnation never sent
            // (one its previous incarnation sent before a crash): says nothing new.
            return;
        }
        self.acked_seq = seq;
        // Acks mostly come in order: older entries can renew nothing a newer ack did not.
        while self.sent.front().is_some_and(|(s, _)| *s < seq) {
            self.sent.pop_front();
        }
        if let Some(&(_, at)) = self.sent.front().filter(|(s, _)| *s == seq) {
            self.serving_until = self.serving_until.max(Some(at + SERVE_LEASE));
        }
        while self.unacked.front().is_some_and(|(lsn, _)| *lsn <= applied) {
            self.unacked.pop_front();
            self.last_progress = now;
        }
        while self.held.front().is_some_and(|h| h.lsn <= applied && h.seq <= seq) {
            out.send.push(self.held.pop_front().expect("checked").env);
        }
        let next_held = self.unacked.front().map_or(self.oracle.lsn() + 1, |(lsn, _)| *lsn);
        if applied < self.oracle.lsn() && next_held > applied + 1 {
            // The standby misses batches this incarnation no longer has (it restarted, or the
            // standby fell behind a restart of ours): state transfer.
            self.install(now, me, peer, out);
        }
    }

    /// A newer epoch exists: nothing decided here may be answered any more.
    fn fence(&mut self, now: Time, me: Addr, peer: Addr, epoch: u64, out: &mut Effects) {
        self.fenced_by = Some(self.fenced_by.unwrap_or(0).max(epoch));
        self.held.clear();
        self.unacked.clear();
        self.last_join = Some(now);
        let msg = OracleWire::Replication(Replication::Join { epoch }).into_message();
        out.send.push(Envelope { from: me, to: peer, msg });
    }
}

/// A hot standby: tails the primary's stream.
struct Follower {
    standby: Standby,
    /// Batches that arrived ahead of the stream (the network reorders), by `lsn`.
    early: BTreeMap<u64, Batch>,
    /// When the primary of the standby's epoch was last heard (`None`: not since recovery).
    last_heard: Option<Time>,
    /// A newer epoch heard of (this replica's state is stale): it may not promote, and asks
    /// to join.
    joining: Option<u64>,
    last_join: Option<Time>,
}

enum Role {
    Primary(Box<Primary>),
    Standby(Box<Follower>),
}

/// See the module doc.
pub struct OracleMachine {
    config: OracleConfig,
    partitions: u32,
    me: Addr,
    /// The other replica, when the cluster runs a hot standby.
    peer: Option<Addr>,
    role: Role,
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
    /// The oracle alone (no standby) at [`ORACLE`]: failover is its node restarting.
    pub fn new(config: OracleConfig, partitions: u32) -> OracleMachine {
        Self::replica(config, partitions, ORACLE, None)
    }

    /// Oracle replica `me` ([`ORACLE`] or [`ORACLE_STANDBY`]) with the other replica
    /// at `peer`. A fresh replica 0 serves epoch 0 and replica 1 is its standby.
    pub fn replica(config: OracleConfig, partitions: u32, me: Addr, peer: Option<Addr>) -> OracleMachine {
        let mut m = OracleMachine {
            role: Role::Primary(Box::new(Primary::new(StatusOracle::new(config.clone())))),
            config,
            partitions,
            me,
            peer,
            ids: BTreeMap::new(),
            addrs: BTreeMap::new(),
            tags: BTreeMap::new(),
            next_id: 0,
            recovered: Vec::new(),
            last_gc: Time::ZERO,
            scratch: OracleEffects::default(),
        };
        let standby = Standby::new(m.config.clone(), None);
        m.start_from(standby);
        m
    }

    /// The state machine inside (for tests and benchmarks): the serving oracle, or the
    /// standby's copy.
    pub fn oracle(&self) -> &StatusOracle {
        match &self.role {
            Role::Primary(p) => &p.oracle,
            Role::Standby(f) => f.standby.oracle(),
        }
    }

    /// Whether this replica answers oracle requests now (a primary not fenced by a newer epoch;
    /// with a standby in sync it still waits for its acknowledgements).
    pub fn is_primary(&self) -> bool {
        matches!(&self.role, Role::Primary(p) if p.fenced_by.is_none())
    }

    /// The epoch this replica last logged.
    pub fn epoch(&self) -> u64 {
        self.oracle().epoch()
    }

    /// Takes the role the recovered state says: the primary of its epoch restarts as primary
    /// (OM-8: aborting what was in flight); any other replica is that primary's standby.
    fn start_from(&mut self, standby: Standby) {
        self.ids.clear();
        self.addrs.clear();
        self.tags.clear();
        if self.peer.is_some() && standby.primary() != replica_index(self.me) {
            let f = Follower { standby, early: BTreeMap::new(), last_heard: None, joining: None, last_join: None };
            self.role = Role::Standby(Box::new(f));
            self.recovered.clear();
            return;
        }
        let (mut oracle, mut effects) = standby.promote();
        assert!(effects.send.is_empty(), "recovery sends nothing");
        if self.peer.is_some() {
            // Every incarnation of a primary starts with a batch of its own: an acknowledgement
            // of an earlier incarnation's message can never cover it.
            let (epoch, primary, out) = (oracle.epoch(), oracle.primary(), oracle.standby_out());
            oracle.log_role(epoch, primary, out, &mut effects);
        }
        self.recovered = effects.persist;
        self.role = Role::Primary(Box::new(Primary::new(oracle)));
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

    fn primary_mut(&mut self) -> Option<&mut Primary> {
        match &mut self.role {
            Role::Primary(p) => Some(p),
            Role::Standby(_) => None,
        }
    }

    /// Persists batches the oracle emitted (the newest `batches.len()` of its stream) and, to a
    /// standby in sync, ships them.
    fn batches_out(&mut self, now: Time, batches: Vec<Batch>, out: &mut Effects) {
        let (me, peer) = (self.me, self.peer);
        let Role::Primary(p) = &mut self.role else { return };
        let first = p.oracle.lsn() + 1 - batches.len() as u64;
        for (i, batch) in batches.into_iter().enumerate() {
            out.persist.push(batch.encode());
            if let (true, Some(peer)) = (p.synchronous(peer), peer) {
                let lsn = first + i as u64;
                if p.unacked.is_empty() {
                    p.last_progress = now;
                }
                p.unacked.push_back((lsn, batch.clone()));
                p.ship(now, me, peer, lsn, Some(batch), out);
            }
        }
    }

    fn emit(&mut self, now: Time, out: &mut Effects) {
        let effects = std::mem::take(&mut self.scratch);
        self.batches_out(now, effects.persist, out);
        let mut envelopes = Vec::new();
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
                    envelopes.push(Envelope { from: self.me, to, msg });
                }
                Outbound::Disconnect { client } => {
                    self.tags.remove(&client);
                    let Some(&to) = self.addrs.get(&client) else { continue };
                    let body = Reply::Refused(OracleError::NotConnected);
                    let msg = OracleWire::Reply(OracleReply { tag: None, body }).into_message();
                    envelopes.push(Envelope { from: self.me, to, msg });
                }
            }
        }
        let peer = self.peer;
        let Some(p) = self.primary_mut() else { return };
        if !p.synchronous(peer) {
            out.send.extend(envelopes);
            return;
        }
        let (lsn, seq) = (p.oracle.lsn(), p.step_seq);
        p.held.extend(envelopes.into_iter().map(|env| Held { lsn, seq, env }));
    }

    fn send_gc(&mut self, now: Time, out: &mut Effects) {
        if now.saturating_sub(self.last_gc) < GC_INTERVAL {
            return;
        }
        let peer = self.peer;
        let Role::Primary(p) = &mut self.role else { return };
        // Only the serving oracle collects: alone, or with every batch at the standby (so its
        // `Tmin` is below any timestamp a promoted standby issues) and the lease running.
        let serving = peer.is_none()
            || (p.fenced_by.is_none()
                && (p.oracle.standby_out()
                    || (p.unacked.is_empty() && p.serving_until.is_some_and(|until| now < until))));
        if !serving {
            return;
        }
        self.last_gc = now;
        let low_water = p.oracle.t_min();
        let (purge, crashed) = p.oracle.purge_work(low_water, PURGE_TXNS_MAX);
        for part in 0..self.partitions {
            let (purge, crashed) = (purge.clone(), crashed.clone());
            let body = Payload::new(engine::Request::Gc { low_water, purge, crashed });
            let msg = Message::PartitionRequest(PartitionRequest { body });
            out.send.push(Envelope { from: self.me, to: Addr::Partition(PartitionId(part)), msg });
        }
    }

    fn on_request(&mut self, now: Time, from: Addr, request: OracleRequest, out: &mut Effects) {
        let OracleRequest { tag, body } = request;
        if !self.is_primary() {
            if body != Request::Ack {
                let msg =
                    OracleWire::Reply(OracleReply { tag: Some(tag), body: Reply::Refused(OracleError::NotServing) })
                        .into_message();
                out.send.push(Envelope { from: self.me, to: from, msg });
            }
            return;
        }
        let client = self.client_of(from);
        if body != Request::Ack {
            self.tags.entry(client).or_default().push_back(tag);
        }
        let Role::Primary(p) = &mut self.role else { unreachable!("checked") };
        p.oracle.step(now, OracleInput::Request { client, request: body }, &mut self.scratch);
        self.emit(now, out);
    }

    /// A partition's purge report ([`engine::Reply::Purged`], the answer to this replica's
    /// `Gc`). Only a serving primary counts it: the purge bookkeeping is volatile (a report lost
    /// in a failover is asked for again by the next primary's `Gc`), and what it concludes
    /// (`Forgotten`, `CrashForgotten`) is logged and shipped like any record.
    fn on_purged(&mut self, now: Time, from: PartitionId, reply: engine::Reply, out: &mut Effects) {
        let engine::Reply::Purged { start_ts, crashed } = reply else { return };
        if !self.is_primary() {
            return;
        }
        let partitions = self.partitions;
        let Role::Primary(p) = &mut self.role else { unreachable!("checked") };
        let input = OracleInput::Purged { partition: from.0, partitions, start_ts, crashed };
        p.oracle.step(now, input, &mut self.scratch);
        self.emit(now, out);
    }

    fn tick(&mut self, now: Time, out: &mut Effects) {
        let (me, peer) = (self.me, self.peer);
        match &mut self.role {
            Role::Primary(p) => {
                p.oracle.step(now, OracleInput::Tick, &mut self.scratch);
                self.emit(now, out);
                let Role::Primary(p) = &mut self.role else { unreachable!() };
                if let Some(peer) = peer {
                    if let Some(epoch) = p.fenced_by {
                        if p.last_join.is_none_or(|at| now.saturating_sub(at) >= HEARTBEAT_INTERVAL) {
                            p.fence(now, me, peer, epoch, out);
                        }
                        return;
                    }
                    if !p.unacked.is_empty() && now.saturating_sub(p.last_progress) >= SHIP_RESEND_AFTER {
                        p.last_progress = now;
                        for (lsn, batch) in p.unacked.clone() {
                            p.ship(now, me, peer, lsn, Some(batch), out);
                        }
                    }
                    if p.last_ship.is_none_or(|at| now.saturating_sub(at) >= HEARTBEAT_INTERVAL) {
                        let lsn = p.oracle.lsn();
                        p.ship(now, me, peer, lsn, None, out);
                    }
                }
                self.send_gc(now, out);
            }
            Role::Standby(f) => {
                let Some(peer) = peer else { return };
                if let Some(epoch) = f.joining {
                    if f.last_join.is_none_or(|at| now.saturating_sub(at) >= HEARTBEAT_INTERVAL) {
                        f.last_join = Some(now);
                        let msg = OracleWire::Replication(Replication::Join { epoch }).into_message();
                        out.send.push(Envelope { from: me, to: peer, msg });
                    }
                    return;
                }
                let heard = *f.last_heard.get_or_insert(now);
                if now.saturating_sub(heard) >= PROMOTE_AFTER {
                    self.promote(now, out);
                }
            }
        }
    }

    /// The primary went silent: this standby serves the next epoch, alone until the other
    /// replica comes back and joins.
    fn promote(&mut self, now: Time, out: &mut Effects) {
        let placeholder = Role::Primary(Box::new(Primary::new(StatusOracle::new(self.config.clone()))));
        let Role::Standby(f) = std::mem::replace(&mut self.role, placeholder) else { unreachable!("a standby") };
        let epoch = f.standby.epoch() + 1;
        let (mut oracle, mut effects) = f.standby.promote();
        oracle.log_role(epoch, replica_index(self.me), true, &mut effects);
        self.ids.clear();
        self.addrs.clear();
        self.tags.clear();
        self.role = Role::Primary(Box::new(Primary::new(oracle)));
        self.batches_out(now, effects.persist, out);
    }

    /// Installs the primary's checkpoint (persisted before the acknowledgement leaves).
    fn install(&mut self, now: Time, epoch: u64, seq: u64, checkpoint: Checkpoint, out: &mut Effects) {
        let applied = checkpoint.lsn;
        out.persist.push(Batch { records: vec![Record::Install(Box::new(checkpoint.clone()))] }.encode());
        let standby = Standby::new(self.config.clone(), Some(&checkpoint));
        self.ids.clear();
        self.addrs.clear();
        self.tags.clear();
        self.recovered.clear();
        let f = Follower { standby, early: BTreeMap::new(), last_heard: Some(now), joining: None, last_join: None };
        self.role = Role::Standby(Box::new(f));
        self.ack(epoch, seq, applied, out);
    }

    fn ack(&self, epoch: u64, seq: u64, applied: u64, out: &mut Effects) {
        let Some(peer) = self.peer else { return };
        let msg = OracleWire::Replication(Replication::Ack { epoch, seq, applied }).into_message();
        out.send.push(Envelope { from: self.me, to: peer, msg });
    }

    fn reply(&self, r: Replication, out: &mut Effects) {
        let Some(peer) = self.peer else { return };
        out.send.push(Envelope { from: self.me, to: peer, msg: OracleWire::Replication(r).into_message() });
    }

    fn on_replication(&mut self, now: Time, r: Replication, out: &mut Effects) {
        let Some(peer) = self.peer else { return };
        let me = self.me;
        let mine = self.epoch();
        match (&mut self.role, r) {
            // Anything from an older epoch: its sender is fenced.
            (_, Replication::Ship { epoch, .. } | Replication::Install { epoch, .. }) if epoch < mine => {
                self.reply(Replication::Fenced { epoch: mine }, out)
            }
            // A newer epoch's state: this replica becomes its standby.
            (_, Replication::Install { epoch, seq, checkpoint }) if epoch > mine => {
                self.install(now, epoch, seq, checkpoint, out)
            }
            (Role::Primary(p), Replication::Ship { epoch, .. } | Replication::Fenced { epoch }) if epoch > mine => {
                p.fence(now, me, peer, epoch, out)
            }
            (Role::Primary(p), Replication::Ack { epoch, seq, applied }) if epoch == mine && p.fenced_by.is_none() => {
                p.on_ack(now, me, peer, seq, applied, out)
            }
            (Role::Primary(p), Replication::Join { epoch }) if epoch == mine && p.fenced_by.is_none() => {
                if p.oracle.standby_out() {
                    // From here on the other replica can take over: answer nothing it lacks.
                    let index = replica_index(me);
                    p.oracle.log_role(epoch, index, false, &mut self.scratch);
                    self.emit(now, out);
                }
                let Role::Primary(p) = &mut self.role else { unreachable!() };
                p.install(now, me, peer, out);
            }
            (Role::Standby(f), Replication::Ship { epoch, .. } | Replication::Fenced { epoch }) if epoch > mine => {
                f.joining = Some(epoch);
                f.last_join = Some(now);
                self.reply(Replication::Join { epoch }, out)
            }
            (Role::Standby(f), Replication::Ship { epoch, seq, lsn, batch }) if epoch == mine => {
                f.last_heard = Some(now);
                if let Some(batch) = batch {
                    if lsn > f.standby.lsn() && lsn - f.standby.lsn() <= EARLY_BATCHES_MAX {
                        f.early.insert(lsn, batch);
                    }
                }
                // Apply (and log, in stream order) what is contiguous.
                while let Some(batch) = f.early.remove(&(f.standby.lsn() + 1)) {
                    f.standby.tail(&batch);
                    out.persist.push(batch.encode());
                }
                let applied = f.standby.lsn();
                f.early.retain(|&lsn, _| lsn > applied);
                let applied = f.standby.lsn();
                self.ack(epoch, seq, applied, out)
            }
            (Role::Standby(f), Replication::Install { epoch, seq, checkpoint }) if epoch == mine => {
                f.last_heard = Some(now);
                if checkpoint.lsn > f.standby.lsn() {
                    self.install(now, epoch, seq, checkpoint, out)
                } else {
                    // A late copy: the stream is one history, so it is a prefix of ours.
                    let applied = f.standby.lsn();
                    self.ack(epoch, seq, applied, out)
                }
            }
            _ => {}
        }
    }
}

impl Machine for OracleMachine {
    fn addr(&self) -> Addr {
        self.me
    }

    fn recover(&mut self, snapshot: Option<&[u8]>, records: &[Vec<u8>]) -> Result<(), Error> {
        let checkpoint = snapshot.map(Checkpoint::decode).transpose()?;
        let batches = records.iter().map(|r| Batch::decode(r)).collect::<Result<Vec<_>, _>>()?;
        let mut standby = Standby::new(self.config.clone(), checkpoint.as_ref());
        for batch in &batches {
            standby.tail(batch);
        }
        self.start_from(standby);
        Ok(())
    }

    fn step(&mut self, now: Time, input: Input, out: &mut Effects) {
        if let Role::Primary(p) = &mut self.role {
            if p.seq == 0 {
                // Numbers start at the clock, so they rise across restarts (the simulator's
                // network can still hold the previous incarnation's messages and their acks).
                p.seq = now.as_nanos();
            }
            p.step_seq = p.seq + 1;
        }
        let recovered = std::mem::take(&mut self.recovered);
        if !recovered.is_empty() {
            self.batches_out(now, recovered, out);
        }
        match input {
            Input::Tick => self.tick(now, out),
            Input::Message(env) => match env.msg {
                Message::Role(payload) => match OracleWire::from_payload(payload) {
                    Some(OracleWire::Request(request)) => self.on_request(now, env.from, request, out),
                    Some(OracleWire::Replication(r)) if Some(env.from) == self.peer => self.on_replication(now, r, out),
                    _ => {}
                },
                Message::PartitionReply(PartitionReply { from, body }) => {
                    if let Ok(reply) = body.decode::<engine::Reply>() {
                        self.on_purged(now, from, reply, out)
                    }
                }
                _ => {}
            },
        }
        // Replies decided in this step wait for an acknowledgement of a message sent after
        // their requests arrived: send one now rather than at the next heartbeat.
        let (me, peer) = (self.me, self.peer);
        if let (Role::Primary(p), Some(peer)) = (&mut self.role, peer) {
            if p.held.back().is_some_and(|h| h.seq > p.seq) {
                let lsn = p.oracle.lsn();
                p.ship(now, me, peer, lsn, None, out);
            }
        }
    }

    fn snapshot(&mut self) -> Option<Vec<u8>> {
        match &self.role {
            Role::Primary(p) => p.oracle.checkpoint().map(|c| c.encode()),
            Role::Standby(f) => Some(f.standby.checkpoint().encode()),
        }
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
