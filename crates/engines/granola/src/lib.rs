//! # `granola`, `granola-locking`, `sinfonia` — one-round transactions (Granola, USENIX ATC'12)
//!
//! The specification is `../shared/seeds/granola-atc12.md`; section numbers below are the
//! paper's. Partitions are the paper's *repositories*; the coordinator half is its *client
//! proxy* (§4.2).
//!
//! **Guarantee: serializable** (`Guarantee::AnsiLevels`, §4.6) for one-round transactions. The
//! serial order is the order of final timestamps, ties broken by TID (§4.1).
//!
//! ## The rules, as implemented
//!
//! * **Timestamps (§4.1, §4.3 step 1, §4.4 step 1).** A repository proposes
//!   `max(clock, highTS + 1, last executed + 1)` for every transaction (clock: `PartCtx::now`).
//!   A TID is the coordinator's `TxnId` plus an attempt number ([`Gtid`]); a retry after
//!   CONFLICT is a new TID (§4.2).
//! * **Client proxy (§4.2).** The coordinator keeps `highTS`, the highest timestamp in any
//!   reply, and sends it with every request; it collects a reply from every participant:
//!   all COMMIT → the fragments' values; an ABORT → the error; a CONFLICT → a retry with a new
//!   TID after a random backoff, bounded exponential ([`coordinator::backoff_cap`]).
//! * **Single-partition transactions (§4.3).** Assigned a timestamp on arrival, executed in
//!   timestamp order (`run` upcall: [`litmus_protocol::fragment::run_local`]). Their log record is the
//!   redo record written at execution, before the reply leaves (persist before send); a
//!   transaction that wrote nothing logs nothing (the read-only case of §4.3). A one-round plan
//!   whose fragments all land on one partition is single-partition whatever its class.
//! * **Independent transactions (§4.4).** Each participant proposes a timestamp, logs request
//!   and proposal ([`Record::Accept`]), and sends a COMMIT VOTE with it *directly to the other
//!   participants* (`PartCtx::send_to_partition`). The final timestamp is the highest vote;
//!   the transaction runs when it is the lowest `(timestamp, TID)` in the queue and its final
//!   timestamp is known, so other transactions keep flowing while its votes are outstanding,
//!   and a transaction with a lower timestamp whose votes are missing holds back those after
//!   it. A CONFLICT vote ends it.
//! * **Read-only single-partition transactions (§4.3)** log nothing; their replies are
//!   remembered in memory (up to [`DONE_REMEMBERED_MAX`]) so a request the client proxy resent
//!   while it ran is answered, not run again (a ~100 ms TPC-C check resent every
//!   [`RESEND_AFTER`] and re-run each time never finished).
//! * **Coordinated transactions (§4.5).** `prepare`: the fragments run against the current
//!   rows; a fragment error votes ABORT; a lock set (keys read: shared; keys written:
//!   exclusive; a range read: the whole table) that conflicts with a prepared transaction votes
//!   CONFLICT (no waiting); otherwise the transaction holds its locks and its writes. Request,
//!   vote and proposal are logged, the vote goes to the other participants, and the transaction
//!   commits (writes applied at the highest timestamp, locks released) once every vote is
//!   COMMIT, or ends at the first ABORT / CONFLICT.
//! * **Locking mode (§4.5).** While a coordinated transaction holds locks, independent
//!   transactions are prepared like coordinated ones (CONFLICT on a lock conflict, never
//!   ABORT) and commit as soon as their votes are in; single-partition transactions run at
//!   once, are checked against the locks (CONFLICT if they collide) and are logged before
//!   their reply leaves.
//! * **Switching modes (§4.5).** A coordinated transaction that arrives while timestamp-mode
//!   transactions are queued waits until they have executed (this implementation's way of
//!   "prepare the in-flight independent transactions first": it never runs `prepare` on a
//!   queued timestamp-mode transaction); new transactions arriving while it waits are answered
//!   CONFLICT, so the queue drains. When the last coordinated transaction ends, prepared
//!   independent transactions drop their locks and prepared writes (`abort` upcall) and go
//!   back into the timestamp queue, to run again at their final timestamp.
//! * **Recovery (§5.2, §5.4 first paragraph).** A partition's state is a deterministic
//!   function of its log ([`Record`], applied by the same `apply` live and in recovery):
//!   accepted transactions with their votes, prepared writes and locks; executed transactions
//!   as redo records; ended ones with their outcome (so a retransmitted request is answered,
//!   never run twice). Votes received are not logged: every tick, a partition resends its vote
//!   to each participant whose vote it lacks, asking for an answer; a participant that has
//!   finished the transaction answers with the vote it logged. Votes carry the request, so a
//!   participant whose request was lost (or whose coordinator crashed) accepts it from its
//!   peer's vote; coordinators resend requests to participants that have not replied. So every
//!   transaction ends once faults heal.
//! * **`forcePrepare` (§5.4, timestamp mode).** When the queue's head has waited
//!   [`FORCE_PREPARE_AFTER`] for votes, the partition answers its queued single-partition
//!   transactions CONFLICT and takes `forcePrepare` locks for every queued distributed one in
//!   timestamp order, conflicts or not (logged: [`Record::Forced`]). It is then in locking mode:
//!   a forced transaction runs (`run` upcall) once its final timestamp is known and no forced
//!   one ahead of it holds conflicting locks — so a blocked one that conflicts with nothing
//!   ahead runs at once, and conflicting ones keep their final-timestamp order — and new
//!   transactions are checked against the forced locks. The lock set is one run's locks when
//!   every fragment declared its keys come from its arguments
//!   ([`litmus_protocol::procedure::ProcOptions::keys_from_args`]), else escalated to whole tables (the
//!   paper's order-independent superset). Unlike the paper, forced transactions are never
//!   `prepare`d (writes computed ahead): one whose final timestamp falls after a conflicting
//!   one must see its writes.
//!
//! ## Emulated costs (Fig. 10)
//!
//! [`cost`]: a benchmark knob burning CPU per fragment execution and per lock acquired in
//! locking mode (`prepare`, `forcePrepare`), both zero by default.
//!
//! ## The baselines of §6 (one engine definition, [`GranolaEngine`], parameterised by mode)
//!
//! * **`granola-locking`** — "Granola (locking)": the repository is in locking mode always
//!   (§4.5), whatever the transactions' classes: independent transactions are prepared under
//!   lock sets and commit when their votes are in, single-partition ones run at once checked
//!   against the locks, and a conflict answers CONFLICT (the client proxy retries).
//! * **`sinfonia`** — lock-based two-phase commit with distributed transactions sent through a
//!   single coordinator node: the same locking-mode repository, but the client proxy sends a
//!   distributed request to the coordinator node ([`relay`], role 0 on node 0), which forwards
//!   it to the participants, and participants send their votes to it, which forwards them. The
//!   coordinator node is stateless (participants log their votes and resend them through it).
//!   Single-partition transactions go straight to their partition.
//!
//! ## Not implemented (yet)
//!
//! * §5.1's replication protocol and §5.2's leases: a partition's replicas are a raft group of
//!   the runtime instead (`docs/replication.md`), whose leader lease decides who serves; a
//!   coordinator's (and `sinfonia`'s relay's) group restarts it on another node when its own is
//!   lost, which is §5.4's recovery with the group's log in place of the coordinator's disk.
//! * §5.4 for read-only independent transactions: they are forced like the others (plans do
//!   not say they read only), not answered CONFLICT.
//! * The read-only flag of Fig. 3: plans do not say whether they write, so a read-only
//!   *independent* transaction is logged like any other (a single-partition one that writes
//!   nothing is not).
//! * Coordinator-driven transactions: Granola runs one-round transactions only (§2). Interactive
//!   transactions and ordinary (op-by-op) procedures are refused with
//!   `InvalidInput::Unsupported { engine: "granola", .. }` (`Capabilities::interactive` is
//!   false).
//! * `sinfonia`: participants answer the client proxy directly (Sinfonia's coordinator would
//!   answer it); a lock conflict answers CONFLICT and the proxy retries (no lock waiting).
//!
//! Outcomes of finished transactions are remembered (for retransmissions and peers' questions)
//! up to [`DONE_REMEMBERED_MAX`], oldest forgotten first.

pub mod coordinator;
pub mod cost;
pub mod locks;
pub mod partition;
pub mod relay;
#[cfg(test)]
mod tests;

use litmus_core::{Error, NodeId, PartitionId, Timestamp, TxnId, Value};
use litmus_protocol::engine::{Capabilities, CoordinatorEngine, EngineDef, Guarantee, PartitionEngine};
use litmus_protocol::fragment::{FragmentCall, OneRoundClass};
use litmus_protocol::machine::Machine;
use litmus_protocol::message::Addr;
use serde::{Deserialize, Serialize};
use std::time::Duration;

pub use coordinator::GranolaCoordinator;
pub use partition::{GranolaPartition, Record};

/// How often a coordinator resends a request to participants that have not replied, and a
/// partition its vote to participants whose vote it lacks.
pub const RESEND_AFTER: Duration = Duration::from_millis(50);
/// How long the head of a partition's timestamp queue waits for missing votes (resending them
/// every [`RESEND_AFTER`]) before the partition `forcePrepare`s the queue and switches to
/// locking mode (§5.4), so that transactions not touching the stuck one's locks make progress.
pub const FORCE_PREPARE_AFTER: Duration = Duration::from_millis(500);
/// Longest random backoff before a retry after CONFLICT (the bound starts at a sixteenth and
/// doubles with each attempt: [`coordinator::backoff_cap`]).
pub const CONFLICT_BACKOFF_MAX: Duration = Duration::from_millis(40);
/// A transaction still in CONFLICT after retrying this long fails with `AbortReason::LockConflict`
/// (before the client's own deadline).
pub const CONFLICT_RETRY_FOR: Duration = Duration::from_secs(3);
/// Finished transactions a partition remembers (as many as a coordinator remembers client
/// requests): a request or vote delayed past this many later transactions would be run again.
pub const DONE_REMEMBERED_MAX: usize = 100_000;

/// A transaction identifier (§3.2): the coordinator's transaction and the attempt (a retry
/// after CONFLICT is a new TID). Ordered, to break timestamp ties (§4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Gtid {
    pub txn: TxnId,
    pub attempt: u32,
}

/// A transaction REQUEST (§4.2): the whole plan, so that any participant can hand it to a peer
/// that never received it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TxnRequest {
    pub gtid: Gtid,
    /// The class it runs as: a plan on one partition is `Single` whatever it declared.
    pub class: OneRoundClass,
    /// The client proxy to reply to.
    pub coord: Addr,
    pub high_ts: Timestamp,
    /// Every fragment with its partition, in plan order (the index is the plan position).
    pub fragments: Vec<(PartitionId, FragmentCall)>,
}

impl TxnRequest {
    pub fn participants(&self) -> Vec<PartitionId> {
        let mut p: Vec<PartitionId> = self.fragments.iter().map(|(p, _)| *p).collect();
        p.sort();
        p.dedup();
        p
    }
    /// This partition's fragments with their plan positions.
    pub fn fragments_at(&self, me: PartitionId) -> Vec<(u32, FragmentCall)> {
        let at = self.fragments.iter().enumerate().filter(|(_, (p, _))| *p == me);
        at.map(|(i, (_, c))| (i as u32, c.clone())).collect()
    }
}

/// A participant's vote (§4.4 step 3, §4.5 step 4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Vote {
    Commit,
    /// The application refused (a coordinated fragment returned this error).
    Abort(Error),
    /// A lock conflict (locking mode): the client retries.
    Conflict,
}

/// Traffic to a partition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// From the client proxy.
    Txn(TxnRequest),
    /// From another participant: its vote and proposed timestamp. `need_reply`: the sender
    /// lacks this partition's vote (recovery, §5.2 / §5.4), answer with it.
    Vote { from: PartitionId, ts: Timestamp, vote: Vote, need_reply: bool, req: TxnRequest },
}

/// How a transaction ended at one participant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    /// Committed: this partition's fragments' values, by plan position.
    Committed {
        values: Vec<(u32, Vec<Value>)>,
    },
    Aborted(Error),
    Conflict,
}

/// A participant's REPLY to the client proxy, with the transaction's timestamp (its final
/// timestamp when committed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub gtid: Gtid,
    pub ts: Timestamp,
    pub outcome: Outcome,
}

/// The registered engines `granola` (timestamp mode, switching to locking mode while a
/// coordinated transaction holds locks), `granola-locking` (always in locking mode: the
/// paper's "Granola (locking)" baseline of §6) and `sinfonia` (always in locking mode, with
/// distributed transactions sent through one coordinator node, [`relay`]: §6's lock-based
/// two-phase commit). One engine definition, parameterised by mode.
#[derive(Clone, Copy, Debug)]
pub struct GranolaEngine {
    pub name: &'static str,
    /// Always in locking mode (§4.5): every distributed transaction is prepared under locks and
    /// every single-partition transaction runs at once, checked against them.
    pub always_locking: bool,
    /// Requests and votes of distributed transactions go through the coordinator node
    /// ([`relay::RELAY`]) instead of from participant to participant.
    pub relay: bool,
}

impl GranolaEngine {
    pub const TIMESTAMP: GranolaEngine = GranolaEngine { name: "granola", always_locking: false, relay: false };
    pub const LOCKING: GranolaEngine = GranolaEngine { name: "granola-locking", always_locking: true, relay: false };
    pub const SINFONIA: GranolaEngine = GranolaEngine { name: "sinfonia", always_locking: true, relay: true };
}

impl EngineDef for GranolaEngine {
    fn name(&self) -> &'static str {
        self.name
    }
    fn guarantee(&self) -> &'static str {
        match (self.always_locking, self.relay) {
            (_, true) => "serializable one-round transactions by lock-based two-phase commit through one coordinator node (Sinfonia, Granola §6's baseline); no interactive transactions",
            (true, false) => "serializable one-round transactions, Granola always in locking mode (prepare/commit with lock sets, CONFLICT on a conflict); no interactive transactions",
            (false, false) => "serializable one-round transactions (timestamp voting, locking mode for coordinated ones); no interactive transactions",
        }
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            guarantee: Guarantee::AnsiLevels,
            base_transactions: false,
            one_round: true,
            interactive: false,
            batches: false,
            reads_for_update: false,
        }
    }
    fn coordinator(&self) -> Box<dyn CoordinatorEngine> {
        Box::new(GranolaCoordinator::new(self.name, self.relay.then_some(relay::RELAY)))
    }
    fn partition(&self) -> Box<dyn PartitionEngine> {
        Box::new(GranolaPartition::new(self.always_locking, self.relay.then_some(relay::RELAY)))
    }
    fn roles(&self, node: NodeId, nodes: u32, _partitions: u32) -> Vec<Box<dyn Machine>> {
        if self.relay && node == relay::RELAY_ROLE.node(nodes) {
            vec![Box::new(relay::Relay::default())]
        } else {
            Vec::new()
        }
    }
    /// With `replicas > 1` the relay is a replica group too, so that `sinfonia` outlives its
    /// coordinator node (the relay logs nothing: its group only elects where it runs).
    fn replicated_roles(
        &self,
        _partitions: u32,
    ) -> Vec<(litmus_protocol::RoleId, litmus_protocol::engine::RoleBuilder)> {
        if !self.relay {
            return Vec::new();
        }
        let build: litmus_protocol::engine::RoleBuilder = std::sync::Arc::new(|| Box::new(relay::Relay::default()));
        vec![(relay::RELAY_ROLE, build)]
    }
}

/// Serializable one-round transactions by timestamp voting (Granola ATC '12).
pub const GRANOLA: litmus_protocol::EngineKind = litmus_protocol::EngineKind(&GranolaEngine::TIMESTAMP);
/// Granola always in locking mode (the paper's "Granola (locking)" baseline).
pub const GRANOLA_LOCKING: litmus_protocol::EngineKind = litmus_protocol::EngineKind(&GranolaEngine::LOCKING);
/// Lock-based two-phase commit of one-round transactions through one coordinator node (Sinfonia, Granola §6's baseline); see [`relay`].
pub const SINFONIA: litmus_protocol::EngineKind = litmus_protocol::EngineKind(&GranolaEngine::SINFONIA);
