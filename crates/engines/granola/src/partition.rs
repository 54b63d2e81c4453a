//! The repository (Granola §4.3–§4.5, §5.2): timestamp queue, votes, locking mode.
//!
//! State is split in two:
//!
//! * [`Durable`] — a deterministic function of the log ([`Record`], applied by
//!   [`GranolaPartition::apply`] live right after logging and in recovery): accepted
//!   distributed transactions with their proposals (and, in locking mode, their prepared
//!   writes, values and locks), remembered outcomes, the store's version counter.
//! * volatile — votes received, the final timestamps they imply, single-partition
//!   transactions waiting in the queue (not yet logged, §4.3), coordinated transactions waiting
//!   for the queue to drain (not yet voted). A restart loses them; votes are solicited again
//!   (§5.2) and requests retransmitted by the client proxy.
//!
//! The queue holds every transaction that will run in timestamp order, keyed by
//! `(timestamp, TID)` — the final timestamp when known, else the proposal (never above the
//! final one). Its head runs when its final timestamp is known.

use super::locks::LockSet;
use super::{Gtid, Outcome, Reply, Request, TxnRequest, Vote, DONE_REMEMBERED_MAX, FORCE_PREPARE_AFTER, RESEND_AFTER};
use litmus_core::{Error, PartitionId, Time, Timestamp, Value};
use litmus_protocol::engine::{decode_record, PartCtx, PartitionEngine};
use litmus_protocol::fragment::{run_local, FragmentWrite, OneRoundClass};
use litmus_protocol::message::{Addr, Payload};
use litmus_protocol::procedure::Ctx;
use litmus_storage::mvcc::MvccStore;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a prepared transaction holds (locking mode, §4.5): its writes and values, computed by
/// `prepare`, and its locks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    pub locks: LockSet,
    pub writes: Vec<FragmentWrite>,
    pub values: Vec<(u32, Vec<Value>)>,
}

/// A distributed transaction this partition voted COMMIT for and that has not ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    pub req: TxnRequest,
    pub proposal: Timestamp,
    /// `Some` while prepared in locking mode; `None` while queued in timestamp order.
    pub prepared: Option<Prepared>,
    /// The locks `forcePrepare` took for it (§5.4): it stays queued, runs at its final
    /// timestamp, and meanwhile holds these locks against every other transaction.
    pub forced: Option<LockSet>,
}

/// A finished transaction: the vote this partition sent (to answer a peer) and its reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Done {
    pub vote_ts: Timestamp,
    pub vote: Vote,
    pub coord: Addr,
    pub reply: Reply,
}

/// The partition's log records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Record {
    /// A distributed transaction's request, proposed timestamp and vote (§4.4 step 2, §4.5
    /// step 3), logged before the vote is sent; with its prepared state in locking mode.
    Accept { req: TxnRequest, proposal: Timestamp, vote: Vote, prepared: Option<Prepared> },
    /// A transaction executed (committed) here at `ts`: the redo of its writes and its values.
    Executed {
        req: TxnRequest,
        ts: Timestamp,
        vote_ts: Timestamp,
        writes: Vec<FragmentWrite>,
        values: Vec<(u32, Vec<Value>)>,
    },
    /// A transaction ended without committing here (ABORT or CONFLICT), remembered so that a
    /// retransmission is answered and never run.
    Ended { req: TxnRequest, vote_ts: Timestamp, vote: Vote, outcome: Outcome },
    /// `forcePrepare` (§5.4) took these locks for a queued transaction: logged, so a restarted
    /// partition holds them again.
    Forced { gtid: Gtid, locks: LockSet },
}

/// The logged half of the state.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Durable {
    /// Highest timestamp executed here (§4.3 step 1).
    pub last_exec: Timestamp,
    /// The store's own version counter (one version per key, as `nocc`).
    pub version: Timestamp,
    pub pending: BTreeMap<Gtid, Pending>,
    pub done: BTreeMap<Gtid, Done>,
    done_order: VecDeque<Gtid>,
}

/// A single-partition transaction waiting in the queue (not logged: §4.3 logs it when it runs).
#[derive(Clone, Debug)]
struct Waiting {
    req: TxnRequest,
    ts: Timestamp,
}

#[derive(Debug, Default)]
pub struct GranolaPartition {
    pub(crate) d: Durable,
    /// `(timestamp, TID)` of every transaction that runs in timestamp order.
    queue: BTreeSet<(Timestamp, Gtid)>,
    singles: BTreeMap<Gtid, Waiting>,
    /// Votes received, by transaction and participant.
    votes: BTreeMap<Gtid, BTreeMap<PartitionId, (Timestamp, Vote)>>,
    /// Final timestamps of queued distributed transactions whose votes are all in.
    finals: BTreeMap<Gtid, Timestamp>,
    /// Coordinated transactions waiting for the queue to drain before they prepare (§4.5).
    coord_waiting: Vec<TxnRequest>,
    last_resend: Time,
    /// Replies of executed read-only single-partition transactions (not logged, §4.3), so a
    /// retransmitted request is answered rather than run again; oldest forgotten first.
    read_only_done: BTreeMap<Gtid, (Addr, Reply)>,
    read_only_order: VecDeque<Gtid>,
    /// `granola-locking`, `sinfonia`: locking mode always (configuration, not state: the same
    /// on replay).
    always_locking: bool,
    /// `sinfonia`: votes go to this coordinator node, which forwards them ([`super::relay`]).
    relay: Option<Addr>,
    /// §5.4: how long the queue's head may wait for votes before `forcePrepare` (configuration;
    /// `None` disables it, which a test does to watch liveness fail).
    force_prepare_after: Option<Duration>,
    /// The incomplete transaction at the queue's head and since when it has been there.
    head_since: Option<(Gtid, Time)>,
}

/// The result of running a transaction's fragments at this partition.
struct Run {
    writes: Vec<FragmentWrite>,
    values: Vec<(u32, Vec<Value>)>,
    locks: LockSet,
}

impl GranolaPartition {
    /// A repository in timestamp mode (`granola`) or always in locking mode (`granola-locking`).
    /// With `relay` (`sinfonia`), votes travel through that coordinator node.
    pub fn new(always_locking: bool, relay: Option<Addr>) -> Self {
        GranolaPartition { always_locking, relay, force_prepare_after: Some(FORCE_PREPARE_AFTER), ..Default::default() }
    }

    /// The same partition with §5.4's `forcePrepare` off (`None`) or after another wait.
    pub fn with_force_prepare_after(mut self, after: Option<Duration>) -> Self {
        self.force_prepare_after = after;
        self
    }

    /// Sends a vote to the other participants: directly (§4.4 step 3), or through the relay.
    fn send_vote(&self, req: &TxnRequest, to: Option<PartitionId>, msg: Request, ctx: &mut PartCtx) {
        match (self.relay, to) {
            (Some(relay), _) => ctx.reply(relay, msg),
            (None, Some(p)) => ctx.send_to_partition(p, msg),
            (None, None) => {
                for p in req.participants() {
                    if p != ctx.me {
                        ctx.send_to_partition(p, msg.clone());
                    }
                }
            }
        }
    }

    // ---------------------------------------------------------------- durable state (apply)

    /// Applies one record: the same function live (right after logging it) and in recovery.
    pub fn apply(&mut self, record: Record, store: &mut MvccStore) -> Result<(), Error> {
        match record {
            Record::Accept { req, proposal, vote, prepared } => {
                let g = req.gtid;
                if vote == Vote::Commit {
                    if prepared.is_none() {
                        self.queue.insert((self.finals.get(&g).copied().unwrap_or(proposal), g));
                    }
                    self.d.pending.insert(g, Pending { req, proposal, prepared, forced: None });
                } else {
                    let reply = Reply { gtid: g, ts: proposal, outcome: outcome_of(&vote) };
                    self.remember(g, Done { vote_ts: proposal, vote, coord: req.coord, reply });
                }
            }
            Record::Executed { req, ts, vote_ts, writes, values } => {
                let g = req.gtid;
                self.forget_live(g, vote_ts);
                for w in writes {
                    self.put(store, w);
                }
                self.d.last_exec = self.d.last_exec.max(ts);
                let reply = Reply { gtid: g, ts, outcome: Outcome::Committed { values } };
                self.remember(g, Done { vote_ts, vote: Vote::Commit, coord: req.coord, reply });
            }
            Record::Ended { req, vote_ts, vote, outcome } => {
                let g = req.gtid;
                self.forget_live(g, vote_ts);
                let reply = Reply { gtid: g, ts: vote_ts, outcome };
                self.remember(g, Done { vote_ts, vote, coord: req.coord, reply });
            }
            Record::Forced { gtid, locks } => {
                if let Some(p) = self.d.pending.get_mut(&gtid) {
                    p.forced = Some(locks);
                }
            }
        }
        self.maybe_back_to_timestamp_mode();
        Ok(())
    }

    /// Installs a write as the key's one version. `replace_latest` drops the version it replaces
    /// and a deleted key outright: with `put` and `remove_version`, every delivered NEW-ORDER row
    /// stayed behind as a lone tombstone, which each later Delivery's scan for the district's
    /// oldest order walked again (the scan grew with the run, and so did the memory).
    fn put(&mut self, store: &mut MvccStore, w: FragmentWrite) {
        if w.row.is_none() && store.latest(w.table, &w.key).is_none_or(|(_, r)| r.is_none()) {
            return; // deleting a missing row changes nothing
        }
        self.d.version = self.d.version.next();
        store.replace_latest(w.table, w.key, self.d.version, w.row);
    }

    /// Removes a transaction from the pending set, the queue and the volatile maps.
    fn forget_live(&mut self, g: Gtid, vote_ts: Timestamp) {
        let key_ts = self.finals.remove(&g).unwrap_or(vote_ts);
        if let Some(p) = self.d.pending.remove(&g) {
            self.queue.remove(&(key_ts, g));
            self.queue.remove(&(p.proposal, g));
        }
        if let Some(w) = self.singles.remove(&g) {
            self.queue.remove(&(w.ts, g));
        }
        self.votes.remove(&g);
    }

    fn remember(&mut self, g: Gtid, done: Done) {
        if self.d.done.insert(g, done).is_none() {
            self.d.done_order.push_back(g);
        }
        while self.d.done_order.len() > DONE_REMEMBERED_MAX {
            let old = self.d.done_order.pop_front().expect("non-empty");
            self.d.done.remove(&old);
        }
    }

    /// Forgets the remembered replies of read-only transactions (a test breaks the rule with it).
    #[cfg(test)]
    pub(crate) fn forget_read_only_replies(&mut self) {
        self.read_only_done.clear();
        self.read_only_order.clear();
    }

    /// Whether the partition is in locking mode: always under `granola-locking`, else while a
    /// coordinated transaction holds locks or `forcePrepare` did (§5.4).
    fn locked(&self) -> bool {
        self.always_locking
            || self.forced_mode()
            || self.d.pending.values().any(|p| p.prepared.is_some() && p.req.class == OneRoundClass::Coordinated)
    }

    /// Whether some transaction holds locks taken by `forcePrepare` (§5.4).
    fn forced_mode(&self) -> bool {
        self.d.pending.values().any(|p| p.forced.is_some())
    }

    /// §4.5: once no coordinated transaction holds locks, prepared independent transactions
    /// release theirs (`abort` upcall) and wait in timestamp order again. Depends on logged
    /// state only, so recovery switches at the same record.
    fn maybe_back_to_timestamp_mode(&mut self) {
        if self.locked() {
            return;
        }
        for (g, p) in self.d.pending.iter_mut() {
            if p.prepared.take().is_some() {
                self.queue.insert((self.finals.get(g).copied().unwrap_or(p.proposal), *g));
            }
        }
    }

    /// Logs a record, then applies it (log, then apply).
    fn log_apply(&mut self, record: Record, ctx: &mut PartCtx) {
        ctx.log(&record);
        self.apply(record, ctx.store).expect("a record this partition just built applies");
    }

    // ---------------------------------------------------------------- timestamps and upcalls

    /// §4.3/§4.4 step 1: above the client's highTS, the last executed timestamp and the clock.
    fn propose(&self, high_ts: Timestamp, now: Time) -> Timestamp {
        Timestamp(now.as_nanos()).max(high_ts.next()).max(self.d.last_exec.next())
    }

    /// Runs this partition's fragments of `req` against the current rows (the `run` and
    /// `prepare` upcalls); writes are returned, not applied.
    fn run(req: &TxnRequest, ctx: &PartCtx) -> Result<Run, Error> {
        let mut bodies = Vec::new();
        for (i, call) in req.fragments_at(ctx.me) {
            bodies.push((i, ctx.registry.fragment(&call.fragment)?.clone(), call.args));
        }
        let fctx = Ctx::new();
        let values = Arc::new(Mutex::new(Vec::new()));
        let (c, out) = (fctx.clone(), values.clone());
        let fut = Box::pin(async move {
            for (i, frag, args) in bodies {
                let v = frag.start(c.clone(), args).await?;
                out.lock().expect("uncontended").push((i, v));
            }
            Ok(vec![])
        });
        let outcome = run_local(fut, &fctx, ctx.catalog, ctx.partitions, ctx.me, ctx.store)?;
        super::cost::executed(req.fragments_at(ctx.me).len());
        let locks = LockSet::of(&outcome);
        let values = std::mem::take(&mut *values.lock().expect("uncontended"));
        Ok(Run { writes: outcome.writes, values, locks })
    }

    fn lock_conflict(&self, locks: &LockSet) -> bool {
        let held =
            self.d.pending.values().flat_map(|p| p.prepared.as_ref().map(|x| &x.locks).into_iter().chain(&p.forced));
        held.into_iter().any(|held| held.conflicts(locks))
    }

    fn reply(&self, g: Gtid, ctx: &mut PartCtx) {
        if let Some(d) = self.d.done.get(&g) {
            ctx.reply(d.coord, d.reply.clone());
        }
    }

    fn send_votes(&self, req: &TxnRequest, ts: Timestamp, vote: &Vote, ctx: &mut PartCtx) {
        let msg = Request::Vote { from: ctx.me, ts, vote: vote.clone(), need_reply: false, req: req.clone() };
        self.send_vote(req, None, msg, ctx);
    }

    // ---------------------------------------------------------------- requests

    fn on_txn(&mut self, req: TxnRequest, ctx: &mut PartCtx) {
        let g = req.gtid;
        if self.d.done.contains_key(&g) {
            return self.reply(g, ctx); // a retransmission: answer from the log
        }
        if let Some((coord, reply)) = self.read_only_done.get(&g) {
            // A retransmission of a read-only transaction: running it again would be harmless
            // but not free (a long one answered late was resent and re-run, again and again).
            return ctx.reply(*coord, reply.clone());
        }
        let known = self.d.pending.contains_key(&g)
            || self.singles.contains_key(&g)
            || self.coord_waiting.iter().any(|r| r.gtid == g);
        if known || !req.participants().contains(&ctx.me) {
            return;
        }
        match req.class {
            OneRoundClass::Single => self.on_single(req, ctx),
            OneRoundClass::Independent | OneRoundClass::Coordinated => self.on_distributed(req, ctx),
        }
        self.progress(ctx);
    }

    /// Ends a transaction here without committing, remembering it.
    fn end(&mut self, req: TxnRequest, vote_ts: Timestamp, vote: Vote, outcome: Outcome, ctx: &mut PartCtx) {
        let g = req.gtid;
        self.log_apply(Record::Ended { req, vote_ts, vote, outcome }, ctx);
        self.reply(g, ctx);
    }

    /// §4.3 (timestamp mode) and §4.5 "Locking Mode" for single-partition transactions.
    fn on_single(&mut self, req: TxnRequest, ctx: &mut PartCtx) {
        let ts = self.propose(req.high_ts, ctx.now);
        if !self.coord_waiting.is_empty() {
            // Switching to locking mode: let the queue drain.
            return self.end(req, ts, Vote::Conflict, Outcome::Conflict, ctx);
        }
        if !self.locked() {
            self.queue.insert((ts, req.gtid));
            self.singles.insert(req.gtid, Waiting { req, ts });
            return;
        }
        // Locking mode: run now, checked against the locks; logged before the reply leaves.
        let run = Self::run(&req, ctx);
        if let Ok(run) = &run {
            super::cost::locked(run.locks.len());
        }
        match run {
            Err(e) => self.end(req, ts, Vote::Abort(e.clone()), Outcome::Aborted(e), ctx),
            Ok(run) if self.lock_conflict(&run.locks) => self.end(req, ts, Vote::Conflict, Outcome::Conflict, ctx),
            Ok(run) => self.execute_single(req, ts, run, ctx),
        }
    }

    fn execute_single(&mut self, req: TxnRequest, ts: Timestamp, run: Run, ctx: &mut PartCtx) {
        let g = req.gtid;
        if run.writes.is_empty() {
            // Read-only: no log write (§4.3); nothing to remember, a rerun is harmless.
            self.d.last_exec = self.d.last_exec.max(ts);
            if let Some(w) = self.singles.remove(&g) {
                self.queue.remove(&(w.ts, g));
            }
            let reply = Reply { gtid: g, ts, outcome: Outcome::Committed { values: run.values } };
            if self.read_only_done.insert(g, (req.coord, reply.clone())).is_none() {
                self.read_only_order.push_back(g);
            }
            while self.read_only_order.len() > DONE_REMEMBERED_MAX {
                let old = self.read_only_order.pop_front().expect("non-empty");
                self.read_only_done.remove(&old);
            }
            return ctx.reply(req.coord, reply);
        }
        self.log_apply(Record::Executed { req, ts, vote_ts: ts, writes: run.writes, values: run.values }, ctx);
        self.reply(g, ctx);
    }

    /// §4.4 steps 1–3 and §4.5 steps 1–4.
    fn on_distributed(&mut self, req: TxnRequest, ctx: &mut PartCtx) {
        let proposal = self.propose(req.high_ts, ctx.now);
        let coordinated = req.class == OneRoundClass::Coordinated;
        let locked = self.locked();
        if !self.coord_waiting.is_empty() || (coordinated && !locked && !self.queue.is_empty()) {
            if coordinated {
                self.coord_waiting.push(req); // prepares once the queue has drained
                return;
            }
            return self.accept(req, proposal, Vote::Conflict, None, ctx);
        }
        if !coordinated && !locked {
            // Timestamp mode (§4.4).
            return self.accept(req, proposal, Vote::Commit, None, ctx);
        }
        self.prepare(req, proposal, ctx);
    }

    /// The `prepare` upcall (§4.5 step 1): run, vote from the partition's own data, lock.
    fn prepare(&mut self, req: TxnRequest, proposal: Timestamp, ctx: &mut PartCtx) {
        let run = Self::run(&req, ctx);
        if let Ok(run) = &run {
            super::cost::locked(run.locks.len());
        }
        match run {
            Err(e) => self.accept(req, proposal, Vote::Abort(e), None, ctx),
            Ok(run) if self.lock_conflict(&run.locks) => self.accept(req, proposal, Vote::Conflict, None, ctx),
            Ok(run) => {
                let prepared = Prepared { locks: run.locks, writes: run.writes, values: run.values };
                self.accept(req, proposal, Vote::Commit, Some(prepared), ctx)
            }
        }
    }

    /// Logs request, proposal and vote, sends the vote to the other participants; answers the
    /// client at once if the vote is not COMMIT; then counts the votes already received.
    fn accept(
        &mut self,
        req: TxnRequest,
        proposal: Timestamp,
        vote: Vote,
        prepared: Option<Prepared>,
        ctx: &mut PartCtx,
    ) {
        let g = req.gtid;
        self.send_votes(&req, proposal, &vote, ctx);
        let commit = vote == Vote::Commit;
        self.log_apply(Record::Accept { req, proposal, vote, prepared }, ctx);
        if !commit {
            return self.reply(g, ctx);
        }
        self.count_votes(g, ctx);
    }

    fn on_vote(
        &mut self,
        from: PartitionId,
        ts: Timestamp,
        vote: Vote,
        need_reply: bool,
        req: TxnRequest,
        ctx: &mut PartCtx,
    ) {
        let g = req.gtid;
        if !req.participants().contains(&from) || !req.participants().contains(&ctx.me) {
            return;
        }
        if let Some(d) = self.d.done.get(&g) {
            if need_reply {
                let r = req.clone();
                let msg = Request::Vote { from: ctx.me, ts: d.vote_ts, vote: d.vote.clone(), need_reply: false, req };
                self.send_vote(&r, Some(from), msg, ctx);
            }
            return;
        }
        self.votes.entry(g).or_default().insert(from, (ts, vote));
        if let Some(p) = self.d.pending.get(&g) {
            if need_reply {
                let r = req.clone();
                let msg = Request::Vote { from: ctx.me, ts: p.proposal, vote: Vote::Commit, need_reply: false, req };
                self.send_vote(&r, Some(from), msg, ctx);
            }
            self.count_votes(g, ctx);
            return self.progress(ctx);
        }
        // Not seen yet (the request was lost, or the client proxy is gone): the vote carries it.
        self.on_txn(req, ctx);
    }

    /// §4.4 steps 4–5, §4.5 steps 5–6: a non-COMMIT vote ends the transaction; once every
    /// vote is COMMIT the final timestamp is the highest one.
    fn count_votes(&mut self, g: Gtid, ctx: &mut PartCtx) {
        let Some(p) = self.d.pending.get(&g) else { return };
        let votes = self.votes.get(&g).cloned().unwrap_or_default();
        if let Some((_, (_, v))) = votes.iter().find(|(_, (_, v))| *v != Vote::Commit) {
            let (req, proposal) = (p.req.clone(), p.proposal);
            return self.end(req, proposal, Vote::Commit, outcome_of(v), ctx);
        }
        let peers: Vec<PartitionId> = p.req.participants().into_iter().filter(|q| *q != ctx.me).collect();
        if !peers.iter().all(|q| votes.contains_key(q)) {
            return;
        }
        let final_ts = votes.values().map(|(ts, _)| *ts).fold(p.proposal, Timestamp::max);
        match &p.prepared {
            Some(prep) => {
                // Locking mode: commit at once (§4.5 step 6).
                let record = Record::Executed {
                    req: p.req.clone(),
                    ts: final_ts,
                    vote_ts: p.proposal,
                    writes: prep.writes.clone(),
                    values: prep.values.clone(),
                };
                self.log_apply(record, ctx);
                self.reply(g, ctx);
            }
            None => {
                // Timestamp mode: ready; runs in timestamp order (§4.4 steps 5–6).
                let old = self.finals.insert(g, final_ts).unwrap_or(p.proposal);
                self.queue.remove(&(old, g));
                self.queue.insert((final_ts, g));
            }
        }
    }

    /// Runs the queue's head while its timestamp is final; once the queue is empty, prepares the
    /// coordinated transactions that were waiting for it (§4.5 "Switching Modes").
    fn progress(&mut self, ctx: &mut PartCtx) {
        while let Some((ts, g)) = self.next_runnable() {
            if let Some(w) = self.singles.get(&g) {
                let req = w.req.clone();
                match Self::run(&req, ctx) {
                    Err(e) => self.end(req, ts, Vote::Abort(e.clone()), Outcome::Aborted(e), ctx),
                    Ok(run) => self.execute_single(req, ts, run, ctx),
                }
                continue;
            }
            let p = self.d.pending.get(&g).expect("a queued transaction is pending").clone();
            match Self::run(&p.req, ctx) {
                // An independent fragment must not fail (§2); if it does, this participant
                // reports the error and applies nothing.
                Err(e) => self.end(p.req, p.proposal, Vote::Commit, Outcome::Aborted(e), ctx),
                Ok(run) => {
                    let record = Record::Executed {
                        req: p.req,
                        ts,
                        vote_ts: p.proposal,
                        writes: run.writes,
                        values: run.values,
                    };
                    self.log_apply(record, ctx);
                    self.reply(g, ctx);
                }
            }
        }
        // Once `forcePrepare` holds its locks the partition is in locking mode (§5.4): the
        // coordinated transactions prepare against them without waiting for the queue.
        if (self.queue.is_empty() || self.forced_mode()) && !self.coord_waiting.is_empty() {
            for req in std::mem::take(&mut self.coord_waiting) {
                let proposal = self.propose(req.high_ts, ctx.now);
                self.prepare(req, proposal, ctx);
            }
        }
    }

    /// The queue entry that may run now. In timestamp mode, the head, once its final timestamp
    /// is known: everything after it waits (§4.4). After `forcePrepare` (§5.4), any entry whose
    /// final timestamp is known and whose locks conflict with no entry before it: an entry
    /// before it that is still incomplete has at least its queue timestamp, so only a
    /// conflicting one could come first in the serial order.
    fn next_runnable(&self) -> Option<(Timestamp, Gtid)> {
        let head = *self.queue.first()?;
        let ready = |(ts, g): (Timestamp, Gtid)| self.singles.contains_key(&g) || self.finals.get(&g) == Some(&ts);
        if !self.forced_mode() {
            return ready(head).then_some(head);
        }
        let mut before: Vec<&LockSet> = Vec::new();
        for &(ts, g) in &self.queue {
            // Every queued transaction was force-prepared; one that was not bars all after it.
            let locks = self.d.pending.get(&g).and_then(|p| p.forced.as_ref())?;
            if ready((ts, g)) && !before.iter().any(|b| b.conflicts(locks)) {
                return Some((ts, g));
            }
            before.push(locks);
        }
        None
    }

    /// §5.4, timestamp mode: once the queue's head has waited [`FORCE_PREPARE_AFTER`] for
    /// votes (resent meanwhile), `forcePrepare` every queued distributed transaction.
    fn maybe_force_prepare(&mut self, ctx: &mut PartCtx) {
        let Some(after) = self.force_prepare_after else { return };
        let head =
            self.queue.first().copied().filter(|&(ts, g)| {
                !self.locked() && self.d.pending.contains_key(&g) && self.finals.get(&g) != Some(&ts)
            });
        match (head, self.head_since) {
            (None, _) => self.head_since = None,
            (Some((_, g)), Some((h, since))) if h == g => {
                if ctx.now.saturating_sub(since) >= after {
                    self.force_prepare(ctx);
                }
            }
            (Some((_, g)), _) => self.head_since = Some((g, ctx.now)),
        }
    }

    /// §5.4 "Timestamp Mode": queued single-partition transactions are answered CONFLICT (the
    /// client retries; state does not diverge); every queued distributed transaction, blocked
    /// or incomplete, takes its `forcePrepare` locks, in timestamp order, even where they
    /// conflict. Then a blocked transaction whose locks conflict with none before it runs at
    /// once ([`Self::next_runnable`]), and the partition is in locking mode until the forced
    /// transactions have ended. Unlike the paper, no transaction is `prepare`d ahead of its
    /// votes here: a forced one runs (`run` upcall) at its final timestamp, so one whose final
    /// timestamp lands after a conflicting one's still sees that one's writes.
    fn force_prepare(&mut self, ctx: &mut PartCtx) {
        self.head_since = None;
        let singles: Vec<Waiting> = self.singles.values().cloned().collect();
        for w in singles {
            self.end(w.req, w.ts, Vote::Conflict, Outcome::Conflict, ctx);
        }
        let queued: Vec<Gtid> = self.queue.iter().map(|(_, g)| *g).collect();
        for g in queued {
            let Some(p) = self.d.pending.get(&g) else { continue };
            let locks = Self::force_locks(&p.req, ctx);
            self.log_apply(Record::Forced { gtid: g, locks }, ctx);
        }
        self.progress(ctx);
    }

    /// The `forcePrepare` upcall's lock set: the locks of a run against the current rows when
    /// every fragment here declared that its keys come from its arguments
    /// ([`litmus_protocol::procedure::ProcOptions::keys_from_args`]); else those locks escalated to whole
    /// tables; every table if the fragments fail to run.
    fn force_locks(req: &TxnRequest, ctx: &PartCtx) -> LockSet {
        let exact = req
            .fragments_at(ctx.me)
            .iter()
            .all(|(_, c)| ctx.registry.fragment(&c.fragment).is_ok_and(|f| f.options.keys_from_args));
        match Self::run(req, ctx) {
            Ok(run) if exact => run.locks,
            Ok(run) => run.locks.escalated(),
            Err(_) => LockSet { tables: ctx.catalog.tables().map(|t| t.id).collect(), ..Default::default() },
        }
    }

    /// §5.2 / §5.4: resend this partition's vote to every participant whose vote is missing,
    /// asking for theirs.
    fn resend_votes(&mut self, ctx: &mut PartCtx) {
        for (g, p) in &self.d.pending {
            let votes = self.votes.get(g);
            let missing: Vec<PartitionId> = p
                .req
                .participants()
                .into_iter()
                .filter(|q| *q != ctx.me && votes.is_none_or(|v| !v.contains_key(q)))
                .collect();
            // Through the relay, one message reaches every peer.
            let missing = if self.relay.is_some() { missing.into_iter().take(1).collect() } else { missing };
            for q in missing {
                let msg = Request::Vote {
                    from: ctx.me,
                    ts: p.proposal,
                    vote: Vote::Commit,
                    need_reply: true,
                    req: p.req.clone(),
                };
                self.send_vote(&p.req, Some(q), msg, ctx);
            }
        }
    }

    fn rebuild_queue(&mut self) {
        self.queue.clear();
        for (g, p) in &self.d.pending {
            if p.prepared.is_none() {
                self.queue.insert((p.proposal, *g));
            }
        }
    }
}

fn outcome_of(vote: &Vote) -> Outcome {
    match vote {
        Vote::Commit => Outcome::Committed { values: vec![] },
        Vote::Abort(e) => Outcome::Aborted(e.clone()),
        Vote::Conflict => Outcome::Conflict,
    }
}

impl PartitionEngine for GranolaPartition {
    fn on_request(&mut self, _from: Addr, req: Payload, ctx: &mut PartCtx) {
        match req.decode::<Request>() {
            Ok(Request::Txn(req)) => self.on_txn(req, ctx),
            Ok(Request::Vote { from, ts, vote, need_reply, req }) => self.on_vote(from, ts, vote, need_reply, req, ctx),
            Err(_) => {}
        }
    }

    fn on_tick(&mut self, ctx: &mut PartCtx) {
        self.progress(ctx);
        self.maybe_force_prepare(ctx);
        if ctx.now.saturating_sub(self.last_resend) >= RESEND_AFTER {
            self.last_resend = ctx.now;
            self.resend_votes(ctx);
        }
    }

    fn apply_bytes(&mut self, record: &[u8], store: &mut MvccStore) -> Result<(), Error> {
        self.apply(decode_record("granola", record)?, store)
    }

    fn encode_state(&self) -> Vec<u8> {
        postcard::to_stdvec(&self.d).expect("serialize")
    }

    fn decode_state(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.d = postcard::from_bytes(bytes).map_err(|e| Error::Storage(format!("granola state: {e}")))?;
        self.rebuild_queue();
        Ok(())
    }
}
