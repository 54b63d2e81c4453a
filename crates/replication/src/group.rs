//! [`ReplicaGroup`]: one member of one replica group, driven by `step`, `tick` and the owner's
//! calls, emitting [`Ready`]. See the crate doc for the rules it adds around raft.

use crate::config::{GroupConfig, ReadMode, ReplicaId};
use crate::error::Error;
use crate::storage::{snapshot_of, LogStore};
use crate::types::*;
use crate::wire::{LeaseStamp, SnapshotChunk, WireBody, WireMessage};
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, EntryType, Message, MessageType};
use raft::{ProgressState, RawNode, SnapshotStatus, StateRole};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};

/// Election timeouts after a leadership transfer started at which a leader that is still
/// leading (the transfer failed; raft abandons one after an election timeout) steps down.
pub const TRANSFER_ABANDON_ELECTIONS: usize = 3;

/// A snapshot being received in chunks from one peer.
struct Assembly {
    index: u64,
    term: u64,
    header: Vec<u8>,
    /// offset → bytes.
    chunks: BTreeMap<u64, Vec<u8>>,
    held_bytes: u64,
    total_bytes: u64,
}

/// The role as the owner sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Follower,
    Candidate,
    Leader,
}

pub struct ReplicaGroup {
    cfg: GroupConfig,
    raw: RawNode<LogStore>,
    rng: ChaCha8Rng,
    /// Ticks since this member (re)started: its only clock.
    now_ticks: u64,
    /// (term, role) after the last call: a change means raft re-drew its election timeout.
    observed: (u64, StateRole),
    observed_leader: (u64, u64),
    out: Ready,
    /// Leader: per follower, the newest of this leader's send ticks the follower echoed.
    lease_acks: BTreeMap<ReplicaId, u64>,
    /// A term in which this member started a leadership transfer: no lease reads in it again.
    lease_revoked_term: u64,
    /// The tick at which the lease was revoked: a leader whose transfer failed gives up its
    /// leadership [`TRANSFER_ABANDON_ELECTIONS`] election timeouts later (see `tick`).
    lease_revoked_at: u64,
    /// Follower: the newest stamp from the leader of its term (a term has one leader).
    echo: Option<LeaseStamp>,
    pending_reads: BTreeSet<ReadId>,
    assemblies: BTreeMap<ReplicaId, Assembly>,
    /// Leader: when the snapshot in flight to each follower was sent.
    snapshot_sent_at: BTreeMap<ReplicaId, u64>,
    snapshot_asked: bool,
    /// Bytes of entry data applied since the last snapshot, and the last snapshot's size: the
    /// periodic snapshot waits for the log to outgrow both (see [`GroupConfig::snapshot_log_bytes_min`]).
    applied_bytes_since_snapshot: u64,
    last_snapshot_bytes: u64,
    applied: LogIndex,
    /// Rejoined after losing its data: never votes nor campaigns (see the crate doc).
    abstain: bool,
    /// Booted with no term ever seen: it never acknowledged a leader, so it promised no lease
    /// and may vote at once (a restarted member waits out an election timeout first).
    fresh: bool,
    stats: Stats,
}

impl ReplicaGroup {
    /// Starts a member from what its owner made durable (`Durable::default()` the first time).
    /// `seed` drives the election-timeout jitter: the same seed and inputs replay exactly.
    /// A member whose durable state is marked `abstaining` keeps abstaining.
    pub fn start(cfg: GroupConfig, durable: Durable, seed: u64) -> Result<Self, Error> {
        Self::boot(cfg, durable, seed)
    }

    /// Starts a member whose data directory was lost. It catches up from the leader (by
    /// snapshot if the log was compacted) but never votes or campaigns: it may have voted or
    /// acknowledged entries before the loss, and raft's safety rests on both being durable.
    /// Giving it a vote back is a membership change (remove and re-add), which is not built.
    /// The owner must first make `Durable { abstaining: true, ..Default::default() }` durable,
    /// so that later restarts through [`Self::start`] go on abstaining.
    pub fn rejoin_after_data_loss(cfg: GroupConfig, seed: u64) -> Result<Self, Error> {
        Self::boot(cfg, Durable { abstaining: true, ..Durable::default() }, seed)
    }

    fn boot(cfg: GroupConfig, durable: Durable, seed: u64) -> Result<Self, Error> {
        let abstain = durable.abstaining;
        cfg.validate()?;
        let conf_state = ConfState { voters: cfg.voters.iter().map(|v| v.0).collect(), ..Default::default() };
        let mut store = LogStore::new(conf_state.clone());
        let mut applied = 0;
        if let Some((meta, data)) = durable.snapshot {
            store.install(snapshot_of(meta.index, meta.term, &conf_state, data));
            applied = meta.index;
        }
        let mut ents = Vec::with_capacity(durable.entries.len());
        for (expect, e) in (store.last() + 1..).zip(durable.entries) {
            if e.index != expect {
                return Err(Error::Corrupt(format!("entry {} where {expect} was expected", e.index)));
            }
            ents.push(to_raft_entry(e));
        }
        store.append(&ents);
        let hs = durable.hard_state;
        if hs.raft_commit_index > store.last() {
            return Err(Error::Corrupt(format!(
                "commit index {} past the last entry {}",
                hs.raft_commit_index,
                store.last()
            )));
        }
        store.hard_state.term = store.hard_state.term.max(hs.term);
        let fresh = store.hard_state.term == 0;
        store.hard_state.vote = hs.vote;
        store.hard_state.commit = store.hard_state.commit.max(hs.raft_commit_index);

        let et = cfg.election_ticks;
        let rc = raft::Config {
            id: cfg.id.0,
            election_tick: et,
            heartbeat_tick: cfg.heartbeat_ticks,
            min_election_tick: et,
            max_election_tick: et + cfg.election_spread_ticks,
            applied,
            max_size_per_msg: cfg.append_bytes_max,
            max_inflight_msgs: cfg.inflight_appends_max,
            check_quorum: true,
            pre_vote: true,
            read_only_option: raft::ReadOnlyOption::Safe,
            max_uncommitted_size: cfg.uncommitted_bytes_max,
            ..Default::default()
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let raw = RawNode::new(&rc, store, &logger).map_err(|e| Error::Corrupt(e.to_string()))?;
        let mut g = ReplicaGroup {
            cfg,
            raw,
            rng: ChaCha8Rng::seed_from_u64(seed),
            now_ticks: 0,
            observed: (u64::MAX, StateRole::Follower),
            observed_leader: (0, 0),
            out: Ready::default(),
            lease_acks: BTreeMap::new(),
            lease_revoked_term: 0,
            lease_revoked_at: 0,
            echo: None,
            pending_reads: BTreeSet::new(),
            assemblies: BTreeMap::new(),
            snapshot_sent_at: BTreeMap::new(),
            snapshot_asked: false,
            applied_bytes_since_snapshot: 0,
            last_snapshot_bytes: 0,
            applied,
            abstain,
            fresh,
            stats: Stats::default(),
        };
        g.drain();
        Ok(g)
    }

    // ---- queries ----

    pub fn id(&self) -> ReplicaId {
        self.cfg.id
    }

    pub fn config(&self) -> &GroupConfig {
        &self.cfg
    }

    pub fn role(&self) -> Role {
        match self.raw.raft.state {
            StateRole::Leader => Role::Leader,
            StateRole::Candidate | StateRole::PreCandidate => Role::Candidate,
            StateRole::Follower => Role::Follower,
        }
    }

    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    /// The leader this member knows of (itself included).
    pub fn leader(&self) -> Option<ReplicaId> {
        match self.raw.raft.leader_id {
            0 => None,
            id => Some(ReplicaId(id)),
        }
    }

    pub fn raft_commit_index(&self) -> LogIndex {
        self.raw.raft.raft_log.committed
    }

    pub fn last_index(&self) -> LogIndex {
        self.raw.raft.raft_log.last_index()
    }

    /// The index of the last entry handed out in [`Ready::apply`].
    pub fn applied_index(&self) -> LogIndex {
        self.applied
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    pub fn ticks(&self) -> u64 {
        self.now_ticks
    }

    /// Leader: the highest log index `peer` is known to hold (`None` elsewhere, or for a
    /// member that is not a voter).
    pub fn matched(&self, peer: ReplicaId) -> Option<LogIndex> {
        if self.raw.raft.state != StateRole::Leader {
            return None;
        }
        self.raw.raft.prs().get(peer.0).map(|p| p.matched)
    }

    /// Leader: whether `peer` holds every entry of this leader's log and echoed one of its
    /// heartbeats within the last `within` ticks, so a transfer to it would complete at once.
    pub fn is_caught_up(&self, peer: ReplicaId, within: u64) -> bool {
        let r = &self.raw.raft;
        r.state == StateRole::Leader
            && r.prs().get(peer.0).is_some_and(|p| p.matched >= r.raft_log.last_index())
            && self.lease_acks.get(&peer).is_some_and(|&t| t + within > self.now_ticks)
    }

    pub fn is_abstaining(&self) -> bool {
        self.abstain
    }

    /// Whether this member holds a read lease now (Raft §6.4.1): it is leader, has committed an
    /// entry of its term, is not handing over, and a quorum echoed a send tick of this leader
    /// less than `lease_ticks` ago. Each of those followers promised, by raft's check-quorum
    /// rule, not to vote for anyone else until an election timeout after that send.
    pub fn holds_lease(&self) -> bool {
        let r = &self.raw.raft;
        if r.state != StateRole::Leader
            || r.lead_transferee.is_some()
            || self.lease_revoked_term == r.term
            || !r.commit_to_current_term()
        {
            return false;
        }
        let mut ticks: Vec<u64> = self
            .cfg
            .voters
            .iter()
            .filter_map(|v| if *v == self.cfg.id { Some(self.now_ticks) } else { self.lease_acks.get(v).copied() })
            .collect();
        let q = self.cfg.quorum();
        if ticks.len() < q {
            return false;
        }
        ticks.sort_unstable_by(|a, b| b.cmp(a));
        ticks[q - 1] + self.cfg.lease_ticks() > self.now_ticks
    }

    fn not_leader(&self) -> Error {
        let hint = self.leader().filter(|l| *l != self.cfg.id);
        Error::NotLeader { hint }
    }

    // ---- the owner's calls ----

    /// Proposes a command. `Ok` is the position it will have if it commits: the owner
    /// acknowledges it only when [`Apply::Entry`] comes out with this index **and** term
    /// (another term's entry at that index means this proposal was lost with a leader change).
    pub fn propose(&mut self, data: Vec<u8>) -> Result<LogPosition, Error> {
        if self.raw.raft.state != StateRole::Leader {
            return Err(self.not_leader());
        }
        if self.raw.raft.lead_transferee.is_some() {
            return Err(Error::TransferInProgress);
        }
        if data.is_empty() {
            return Err(Error::Invalid("an empty proposal reads as a leader's no-op".into()));
        }
        if data.len() > self.cfg.proposal_bytes_max {
            return Err(Error::ProposalTooLarge { bytes: data.len(), max: self.cfg.proposal_bytes_max });
        }
        let before = self.raw.raft.raft_log.last_index();
        self.raw.propose(vec![], data).map_err(|e| Error::Dropped(e.to_string()))?;
        let index = self.raw.raft.raft_log.last_index();
        assert_eq!(index, before + 1, "a proposal appends exactly one entry");
        let term = self.raw.raft.term;
        self.drain();
        Ok(LogPosition { index, term })
    }

    /// Asks for a linearizable read. The read may be served once [`Ready::reads`] names it and
    /// the owner has applied up to its index; [`Ready::reads_failed`] names it if this member
    /// loses leadership first.
    pub fn read(&mut self, id: ReadId) -> Result<(), Error> {
        if self.raw.raft.state != StateRole::Leader {
            return Err(self.not_leader());
        }
        if self.cfg.read_mode == ReadMode::Lease && self.holds_lease() {
            self.out.reads.push(ReadReady { id, index: self.raft_commit_index() });
            return Ok(());
        }
        if self.pending_reads.len() >= self.cfg.reads_pending_max {
            return Err(Error::Dropped(format!("{} reads already wait for a quorum", self.pending_reads.len())));
        }
        self.pending_reads.insert(id);
        self.raw.read_index(id.to_le_bytes().to_vec());
        self.drain();
        Ok(())
    }

    /// Hands leadership to `to` (Raft §3.10). Lease reads stop for the rest of this term at once:
    /// the transferee campaigns without waiting out the followers' promises.
    pub fn transfer_leadership(&mut self, to: ReplicaId) -> Result<(), Error> {
        if self.raw.raft.state != StateRole::Leader {
            return Err(self.not_leader());
        }
        if to == self.cfg.id || !self.cfg.voters.contains(&to) {
            return Err(Error::Invalid(format!("cannot transfer leadership to {to}")));
        }
        self.lease_revoked_term = self.raw.raft.term;
        self.lease_revoked_at = self.now_ticks;
        self.raw.transfer_leader(to.0);
        self.drain();
        Ok(())
    }

    /// Campaigns now if this member has never seen a term (a cluster's first start): the
    /// owner's preferred leader calls it so that it, not whichever member times out first,
    /// leads from the start and no hand-over follows. Returns whether it campaigned.
    pub fn campaign_if_new(&mut self) -> bool {
        if self.raw.raft.term != 0 || self.abstain || self.raw.raft.state == StateRole::Leader {
            return false;
        }
        let _ = self.raw.campaign();
        self.drain();
        true
    }

    /// Hands leadership to the most up-to-date other voter (lowest id on ties), for a node that
    /// is about to stop. `Ok(None)` when this member is not the leader: nothing to hand over.
    pub fn hand_over(&mut self) -> Result<Option<ReplicaId>, Error> {
        if self.raw.raft.state != StateRole::Leader {
            return Ok(None);
        }
        let prs = self.raw.raft.prs();
        let best = self
            .cfg
            .voters
            .iter()
            .filter(|v| **v != self.cfg.id)
            .map(|v| (prs.get(v.0).map_or(0, |p| p.matched), std::cmp::Reverse(*v)))
            .max()
            .map(|(_, std::cmp::Reverse(v))| v);
        match best {
            Some(to) => self.transfer_leadership(to).map(|()| Some(to)),
            None => Ok(None),
        }
    }

    /// The owner took the snapshot asked for by [`Ready::snapshot_wanted`] (or one of its own
    /// accord) of its state with everything up to `index` applied. The group drops its log up
    /// to `index` and sends these bytes to members that need them. The owner then persists the
    /// snapshot and may drop its durable log up to `index` (a restart needs only the entries
    /// after the snapshot; the group keeps `compact_keep_entries` before it in memory).
    pub fn snapshot_taken(&mut self, index: LogIndex, data: Vec<u8>) -> Result<SnapshotMeta, Error> {
        let store = self.raw.store();
        if index > self.applied || index > self.raw.raft.raft_log.persisted {
            return Err(Error::Invalid(format!(
                "snapshot at {index} but only {} applied, {} persisted",
                self.applied, self.raw.raft.raft_log.persisted
            )));
        }
        if index <= store.snap_index() {
            return Err(Error::Invalid(format!("snapshot at {index} is not after {}", store.snap_index())));
        }
        self.snapshot_asked = false;
        self.applied_bytes_since_snapshot = 0;
        self.last_snapshot_bytes = data.len() as u64;
        let keep = self.cfg.compact_keep_entries;
        let term = self.raw.mut_store().compact(index, data, keep);
        Ok(SnapshotMeta { index, term })
    }

    /// Advances this member's clock by one tick.
    pub fn tick(&mut self) {
        self.advance(1, 1);
    }

    /// Advances this member's clock by `ticks` that passed, of which raft's own clock (election
    /// and heartbeat timers) counts at most `raft_ticks`.
    ///
    /// The two clocks part when the member's thread was stalled (a long step of another machine
    /// on its node): the stall is real time, so the lease clock counts all of it, and a leader's
    /// lease ends when it would have; but raft's timers count only the time the member ran, so
    /// a member does not wake to find its election timeout past (and campaign, or step down for
    /// want of a quorum) before it has read the heartbeats that queued for it meanwhile. That is
    /// safe: raft's safety needs no clock, and a clock that runs slow only makes a follower
    /// withhold its vote from a new candidate for longer, which keeps leases sound.
    pub fn advance(&mut self, ticks: u64, raft_ticks: u64) {
        self.now_ticks += ticks;
        let follower = self.raw.raft.state == StateRole::Follower;
        if !(self.abstain && follower) {
            for _ in 0..raft_ticks.min(ticks) {
                self.raw.tick();
            }
        }
        self.abandon_failed_transfer();
        self.retry_snapshots();
        self.drain();
    }

    /// Decodes and steps a frame from the network; one that does not decode is counted and
    /// dropped.
    pub fn step_bytes(&mut self, bytes: &[u8]) {
        match WireMessage::decode(bytes) {
            Ok(m) => self.step(m),
            Err(_) => self.stats.undecodable += 1,
        }
    }

    /// Steps a message from a peer. Never panics on a message a peer could not have sent
    /// (wrong addressee, unknown sender, bad bytes, local-only types): those are counted.
    pub fn step(&mut self, wm: WireMessage) {
        if wm.to != self.cfg.id || wm.from == self.cfg.id || !self.cfg.voters.contains(&wm.from) {
            self.stats.refused += 1;
            return;
        }
        if let Some(echo) = wm.echo {
            let r = &self.raw.raft;
            if r.state == StateRole::Leader && echo.term == r.term && echo.tick <= self.now_ticks {
                let e = self.lease_acks.entry(wm.from).or_insert(0);
                *e = (*e).max(echo.tick);
            }
        }
        let m = match wm.body {
            WireBody::Raft(bytes) => match Message::parse_from_bytes(&bytes) {
                Ok(m) => m,
                Err(_) => {
                    self.stats.undecodable += 1;
                    return;
                }
            },
            WireBody::SnapshotChunk(c) => match self.reassemble(wm.from, c) {
                Some(m) => m,
                None => return,
            },
        };
        if !self.acceptable(wm.from, &m) {
            self.stats.refused += 1;
            return;
        }
        let ty = m.get_msg_type();
        let vote = matches!(ty, MessageType::MsgRequestVote | MessageType::MsgRequestPreVote);
        if vote && (self.abstain || (!self.fresh && self.now_ticks < self.cfg.election_ticks as u64)) {
            self.stats.votes_withheld += 1;
            return;
        }
        if ty == MessageType::MsgTimeoutNow && self.abstain {
            self.stats.votes_withheld += 1;
            return;
        }
        let msg_term = m.term;
        let mut m = m;
        self.repair_after_data_loss(wm.from, wm.rejoined, &mut m);
        if self.raw.step(m).is_err() {
            self.stats.refused += 1;
        }
        // A message that restarted this follower's election timer extends its promise to the
        // leader: echo the leader's send tick back (in the answer raft is about to emit).
        let restarts_timer =
            matches!(ty, MessageType::MsgAppend | MessageType::MsgHeartbeat | MessageType::MsgSnapshot);
        let r = &self.raw.raft;
        if let Some(stamp) = wm.stamp {
            if restarts_timer
                && r.state == StateRole::Follower
                && r.leader_id == wm.from.0
                && r.term == msg_term
                && stamp.term == msg_term
            {
                self.echo = Some(self.echo.filter(|e| e.term == stamp.term).map_or(stamp, |e| e.max(stamp)));
            }
        }
        self.drain();
        if ty == MessageType::MsgAppendResponse {
            if let Some(p) = self.raw.raft.prs().get(wm.from.0) {
                if p.state != ProgressState::Snapshot {
                    self.snapshot_sent_at.remove(&wm.from);
                }
            }
        }
    }

    /// Takes everything the owner has to do (see [`Ready`] for the order).
    pub fn take_ready(&mut self) -> Ready {
        std::mem::take(&mut self.out)
    }

    pub fn has_ready(&self) -> bool {
        !self.out.is_empty()
    }

    // ---- internals ----

    /// Types a peer may send, with sender and addressee matching the envelope, and a snapshot
    /// that keeps the voters this member was configured with.
    fn acceptable(&self, from: ReplicaId, m: &Message) -> bool {
        use MessageType::*;
        let peer_type = matches!(
            m.get_msg_type(),
            MsgAppend
                | MsgAppendResponse
                | MsgRequestVote
                | MsgRequestVoteResponse
                | MsgRequestPreVote
                | MsgRequestPreVoteResponse
                | MsgSnapshot
                | MsgHeartbeat
                | MsgHeartbeatResponse
                | MsgTimeoutNow
        );
        if !peer_type || m.from != from.0 || m.to != self.cfg.id.0 || m.term == 0 {
            return false;
        }
        if m.get_entries().iter().any(|e| e.get_entry_type() != EntryType::EntryNormal) {
            return false;
        }
        if m.get_msg_type() == MsgSnapshot {
            let Some(s) = m.snapshot.as_ref() else { return false };
            let mut voters = s.get_metadata().get_conf_state().voters.clone();
            voters.sort_unstable();
            let mut ours: Vec<u64> = self.cfg.voters.iter().map(|v| v.0).collect();
            ours.sort_unstable();
            if voters != ours {
                return false;
            }
        }
        true
    }

    /// raft-rs assumes a member never loses what it acknowledged. A member that lost its data
    /// directory breaks that, which raft-rs meets with a panic (a heartbeat committing past its
    /// log) or a stall (its leader never sends below the old match index). Both are repaired
    /// here: a heartbeat's commit is clamped to the local log (it only ever informs), and a
    /// leader that sees a rejection below a peer's match index, from a peer that says it
    /// rejoined without its data, starts probing that peer afresh. (Without the peer's word a
    /// late rejection, reordered by the network, looks the same.)
    fn repair_after_data_loss(&mut self, from: ReplicaId, rejoined: bool, m: &mut Message) {
        match m.get_msg_type() {
            MessageType::MsgHeartbeat => {
                let last = self.raw.raft.raft_log.last_index();
                if m.commit > last {
                    m.commit = last;
                }
            }
            MessageType::MsgAppendResponse if rejoined && m.reject && self.raw.raft.state == StateRole::Leader => {
                if let Some(pr) = self.raw.raft.mut_prs().get_mut(from.0) {
                    if m.reject_hint < pr.matched {
                        pr.matched = m.reject_hint;
                        pr.become_probe();
                        self.stats.peers_lost_data += 1;
                    }
                }
            }
            _ => {}
        }
    }

    /// Collects a snapshot's chunks (the network may reorder or duplicate them); returns the
    /// snapshot message once every byte and the header are in.
    fn reassemble(&mut self, from: ReplicaId, c: SnapshotChunk) -> Option<Message> {
        let fits = c.total_bytes <= self.cfg.snapshot_bytes_max
            && c.offset.checked_add(c.data.len() as u64).is_some_and(|end| end <= c.total_bytes)
            && (c.offset == 0) != c.header.is_empty()
            && (!c.data.is_empty() || c.total_bytes == 0);
        if !fits {
            self.stats.chunks_dropped += 1;
            return None;
        }
        let same = |a: &Assembly| a.index == c.index && a.term == c.term && a.total_bytes == c.total_bytes;
        if !self.assemblies.get(&from).is_some_and(same) {
            let a = Assembly {
                index: c.index,
                term: c.term,
                header: Vec::new(),
                chunks: BTreeMap::new(),
                held_bytes: 0,
                total_bytes: c.total_bytes,
            };
            self.assemblies.insert(from, a);
        }
        let a = self.assemblies.get_mut(&from).expect("just inserted");
        if !c.header.is_empty() {
            a.header = c.header;
        }
        if let std::collections::btree_map::Entry::Vacant(v) = a.chunks.entry(c.offset) {
            a.held_bytes += c.data.len() as u64;
            v.insert(c.data);
        } else {
            self.stats.chunks_dropped += 1; // a duplicate
            return None;
        }
        if a.header.is_empty() || a.held_bytes < a.total_bytes {
            return None;
        }
        let a = self.assemblies.remove(&from).expect("looked up above");
        let mut data = Vec::with_capacity(a.total_bytes as usize);
        for (offset, bytes) in a.chunks {
            if offset != data.len() as u64 {
                self.stats.chunks_dropped += 1; // overlapping chunks: not from a correct peer
                return None;
            }
            data.extend_from_slice(&bytes);
        }
        let mut m = match Message::parse_from_bytes(&a.header) {
            Ok(m) => m,
            Err(_) => {
                self.stats.undecodable += 1;
                return None;
            }
        };
        let meta_ok =
            m.snapshot.as_ref().is_some_and(|s| s.get_metadata().index == a.index && s.get_metadata().term == a.term);
        if m.get_msg_type() != MessageType::MsgSnapshot || !meta_ok {
            self.stats.refused += 1;
            return None;
        }
        m.mut_snapshot().data = data.into();
        Some(m)
    }

    /// A follower that never answered a snapshot gets it again (chunks may have been lost).
    fn retry_snapshots(&mut self) {
        if self.raw.raft.state != StateRole::Leader {
            self.snapshot_sent_at.clear();
            return;
        }
        let due: Vec<ReplicaId> = self
            .snapshot_sent_at
            .iter()
            .filter(|(_, at)| self.now_ticks >= **at + self.cfg.snapshot_retry_ticks)
            .map(|(r, _)| *r)
            .collect();
        for r in due {
            self.snapshot_sent_at.remove(&r);
            self.raw.report_snapshot(r.0, SnapshotStatus::Failure);
        }
    }

    /// Moves raft's readiness into [`Self::out`], in raft's order (raft-rs 0.7 `Ready`).
    fn drain(&mut self) {
        while self.raw.has_ready() {
            let mut rd = self.raw.ready();
            let msgs = rd.take_messages();
            self.send(msgs);
            if !rd.snapshot().is_empty() {
                let snap = rd.snapshot().clone();
                let meta = SnapshotMeta { index: snap.get_metadata().index, term: snap.get_metadata().term };
                let data = snap.data.to_vec();
                self.raw.mut_store().install(snap);
                self.out.persist.snapshot = Some(meta);
                self.out.persist.entries.clear();
                self.applied_bytes_since_snapshot = 0;
                self.last_snapshot_bytes = data.len() as u64;
                self.out.apply.push(Apply::Snapshot { meta, data });
                self.applied = meta.index;
                self.stats.snapshots_installed += 1;
                self.persist_hard_state();
            }
            let committed = rd.take_committed_entries();
            self.emit_committed(committed);
            if !rd.entries().is_empty() {
                let ents = rd.take_entries();
                self.raw.mut_store().append(&ents);
                let first = ents[0].index;
                self.out.persist.entries.retain(|e| e.index < first);
                self.out.persist.entries.extend(ents.iter().map(from_raft_entry));
            }
            if let Some(hs) = rd.hs() {
                self.raw.mut_store().hard_state = hs.clone();
                self.persist_hard_state();
            }
            let reads = rd.take_read_states();
            for rs in reads {
                let Ok(bytes) = <[u8; 8]>::try_from(&rs.request_ctx[..]) else { continue };
                let id = u64::from_le_bytes(bytes);
                if self.pending_reads.remove(&id) {
                    self.out.reads.push(ReadReady { id, index: rs.index });
                }
            }
            let msgs = rd.take_persisted_messages();
            self.send(msgs);
            let mut light = self.raw.advance(rd);
            if let Some(commit) = light.commit_index() {
                self.raw.mut_store().hard_state.commit = commit;
                self.persist_hard_state();
            }
            let msgs = light.take_messages();
            self.send(msgs);
            let committed = light.take_committed_entries();
            self.emit_committed(committed);
            self.raw.advance_apply();
        }
        self.observe();
        if self.raw.store().snapshot_asked.replace(false) {
            self.snapshot_asked = false; // raft wants one now: ask again below
        }
        let since = self.applied.saturating_sub(self.raw.store().snap_index());
        // A snapshot costs its whole size; taken only once the log since the last one is as
        // large (and past a floor), its cost per logged byte stays bounded however large the
        // state grows.
        let bytes_due = self.cfg.snapshot_log_bytes_min.max(self.last_snapshot_bytes);
        if !self.snapshot_asked
            && since >= self.cfg.snapshot_every_entries
            && self.applied_bytes_since_snapshot >= bytes_due
        {
            self.snapshot_asked = true;
            self.out.snapshot_wanted = Some(self.applied);
        }
    }

    /// A leader that started a transfer revoked its lease for the term (the transferee may
    /// campaign past the followers' promises), so it serves nothing more in this term. Raft
    /// abandons a transfer that does not complete within an election timeout and the leader
    /// stays: it would then lead without ever serving. Once the transfer is over and a few
    /// election timeouts have passed, it steps down instead, and an ordinary election follows.
    fn abandon_failed_transfer(&mut self) {
        let r = &self.raw.raft;
        let waited = (TRANSFER_ABANDON_ELECTIONS * self.cfg.election_ticks) as u64;
        if r.state == StateRole::Leader
            && self.lease_revoked_term == r.term
            && r.lead_transferee.is_none()
            && self.now_ticks >= self.lease_revoked_at + waited
        {
            let term = r.term;
            self.raw.raft.become_follower(term, raft::INVALID_ID);
        }
    }

    fn persist_hard_state(&mut self) {
        let hs = &self.raw.store().hard_state;
        self.out.persist.hard_state = Some(HardState { term: hs.term, vote: hs.vote, raft_commit_index: hs.commit });
    }

    fn emit_committed(&mut self, ents: Vec<Entry>) {
        for e in ents {
            assert!(e.index == self.applied + 1, "committed entry {} after applied {}", e.index, self.applied);
            self.applied = e.index;
            self.applied_bytes_since_snapshot += e.data.len() as u64;
            self.out.apply.push(Apply::Entry(from_raft_entry(&e)));
        }
    }

    /// After every call: re-draw the election timeout from the seeded RNG when raft re-drew it
    /// (raft-rs draws from a thread RNG on every change of term or role), report leader
    /// changes, fail reads a deposed leader can no longer serve.
    fn observe(&mut self) {
        let (term, state, leader) = (self.raw.raft.term, self.raw.raft.state, self.raw.raft.leader_id);
        if (term, state) != self.observed {
            let et = self.cfg.election_ticks;
            let t = self.rng.gen_range(et..et + self.cfg.election_spread_ticks);
            self.raw.raft.set_randomized_election_timeout(t);
            if state != StateRole::Leader || term != self.observed.0 {
                self.lease_acks.clear();
                for id in std::mem::take(&mut self.pending_reads) {
                    self.out.reads_failed.push(id);
                }
            }
            self.observed = (term, state);
        }
        if (term, leader) != self.observed_leader {
            self.out.leader_changes.push(LeaderChange { term, leader: (leader != 0).then_some(ReplicaId(leader)) });
            self.observed_leader = (term, leader);
        }
    }

    /// Wraps raft's messages for the wire: stamps a leader's, echoes a follower's, and cuts
    /// snapshots into chunks.
    fn send(&mut self, msgs: Vec<Message>) {
        let r = &self.raw.raft;
        let stamp = (r.state == StateRole::Leader).then_some(LeaseStamp { term: r.term, tick: self.now_ticks });
        let leader = r.leader_id;
        for mut m in msgs {
            let to = ReplicaId(m.to);
            let echo = if m.to == leader && r.state == StateRole::Follower {
                self.echo.filter(|e| e.term == r.term)
            } else {
                None
            };
            let rejoined = self.abstain;
            let envelope = |body| WireMessage { from: self.cfg.id, to, stamp, echo, rejoined, body };
            if m.get_msg_type() == MessageType::MsgSnapshot {
                let data = std::mem::take(&mut m.mut_snapshot().data);
                let meta = m.get_snapshot().get_metadata();
                let (index, term) = (meta.index, meta.term);
                let header = m.write_to_bytes().expect("raft messages encode");
                let total_bytes = data.len() as u64;
                let mut offset = 0usize;
                let mut first = true;
                // One chunk even for an empty snapshot, so the receiver sees the header.
                while first || offset < data.len() {
                    let end = (offset + self.cfg.snapshot_chunk_bytes).min(data.len());
                    let chunk = SnapshotChunk {
                        index,
                        term,
                        offset: offset as u64,
                        total_bytes,
                        header: if first { header.clone() } else { Vec::new() },
                        data: data[offset..end].to_vec(),
                    };
                    self.out.messages.push(envelope(WireBody::SnapshotChunk(chunk)));
                    offset = end;
                    first = false;
                }
                self.stats.snapshots_sent += 1;
                self.snapshot_sent_at.insert(to, self.now_ticks);
            } else {
                let bytes = m.write_to_bytes().expect("raft messages encode");
                self.out.messages.push(envelope(WireBody::Raft(bytes)));
            }
        }
    }
}

fn from_raft_entry(e: &Entry) -> LogEntry {
    LogEntry { index: e.index, term: e.term, data: e.data.to_vec() }
}

fn to_raft_entry(e: LogEntry) -> Entry {
    Entry { index: e.index, term: e.term, data: e.data.into(), ..Default::default() }
}
