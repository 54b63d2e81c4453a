//! # Replica groups: one member of a partition's raft group, without I/O
//!
//! A partition becomes a replica group: the same log on `replicas` nodes, kept in agreement by
//! Raft. This crate is one member of one group, [`ReplicaGroup`], a state machine in the house
//! style (`step`/`tick` in, data out), so the deterministic simulator and the TCP runtime drive
//! it the same way. It knows nothing about partitions: it replicates opaque commands and asks
//! its owner for snapshots. `docs/replication.md` says how partitions will use it.
//!
//! **Library: `raft` 0.7 (tikv's raft-rs, etcd raft's design)** — a sans-I/O `RawNode`
//! (step/tick/ready) the simulator drives directly, with check-quorum, pre-vote, read-index,
//! leader transfer and snapshot messages built in, and with `protobuf-codec` it builds with no
//! protoc or C++ (its `prost-codec` feature needs protoc).
//!
//! ```text
//!  owner ──propose/read/transfer/snapshot_taken──►┐
//!  network ──step(WireMessage)───────────────────►│ ReplicaGroup ── take_ready() ──► Ready
//!  clock ──tick()────────────────────────────────►┘   (raft RawNode + LogStore)       │
//!     1. persist + sync   (Persist: snapshot installed, entries from index i, hard state)
//!     2. send             (messages: WireMessage, postcard-framed, each < 1 MiB)
//!     3. apply in order   (Apply::Entry / Apply::Snapshot)
//!     4. serve reads      (ReadReady: once applied ≥ index) / reads_failed
//!     5. snapshot         (snapshot_wanted → snapshot_taken(applied, bytes))
//! ```
//!
//! ## The owner's contract
//!
//! * **Persist before send** (etcd raft): every [`Persist`] of a [`Ready`] is durable before
//!   any of its messages leaves and before anything in it is applied. A follower's
//!   acknowledgement of an entry it has not synced would let a crash of a majority lose a
//!   committed entry (`broken_send_before_persist_is_caught`).
//! * **Acknowledge on apply, not on propose**: [`ReplicaGroup::propose`] returns the index and
//!   term the command will have; the owner answers its client when [`Apply::Entry`] comes out
//!   with both (`broken_acknowledge_before_commit_is_caught`).
//! * **Restart from what was synced**: [`ReplicaGroup::start`] takes the [`Durable`] state
//!   (hard state, the owner's latest snapshot, the entries after it). The owner's state
//!   machine restarts from that snapshot; raft re-emits the committed entries after it.
//! * **Time is ticks, randomness is a seed**: the election timeout is drawn from
//!   `[election_ticks, election_ticks + election_spread_ticks)` with a `ChaCha8Rng` seeded by
//!   the owner. raft-rs
//!   draws it from a thread RNG on every change of term or role; [`ReplicaGroup`] redraws it
//!   from the seeded RNG after every call in which term or role changed (raft-rs resets the
//!   timeout only then), so the thread RNG's value is never used.
//!
//! ## Reads and leadership (Raft §6.4, §6.4.1, §3.10)
//!
//! Only a leader serves reads; followers answer [`Error::NotLeader`] with a hint.
//! [`ReadMode::ReadIndex`] confirms leadership with a quorum heartbeat per batch of reads.
//! [`ReadMode::Lease`] (default) serves at once while the leader holds a lease, and falls back
//! to read-index otherwise. raft-rs's own `LeaseBased` option is not used: with check-quorum a
//! leader notices it is cut off only at the end of the election-timeout period *after* the one
//! it last heard from a quorum in, up to two timeouts late, while followers may vote after
//! one. Instead:
//! * a leader stamps each message with its term and tick; a follower echoes back the newest
//!   stamp of a message that restarted its election timer (append, heartbeat, snapshot);
//! * by raft's check-quorum rule that follower will not vote for another candidate (nor
//!   campaign) until `election_ticks` of its own ticks after receiving it;
//! * so the leader holds a lease until the quorum-th newest echoed send tick (its own `now`
//!   counts for itself) plus `election_ticks - lease_margin_ticks` (margin = clock drift);
//! * a member that just booted forgot its promise: it ignores vote requests for its first
//!   `election_ticks` ticks;
//! * a leadership transfer lets the transferee campaign at once, so the leader gives up lease
//!   reads for the rest of its term the moment it starts one, and refuses proposals
//!   ([`Error::TransferInProgress`]). [`ReplicaGroup::hand_over`] picks the most up-to-date
//!   voter, for a node stopping on SIGTERM.
//!
//! ## Snapshots and log compaction
//!
//! When `snapshot_every_entries` entries were applied since the last snapshot, the group sets
//! [`Ready::snapshot_wanted`]; the owner answers with [`ReplicaGroup::snapshot_taken`] at its
//! applied index. The group keeps `compact_keep_entries` entries before it (a follower a little
//! behind gets entries, not the snapshot). A follower that needs older entries gets the
//! snapshot as [`WireBody::SnapshotChunk`]s of at most `snapshot_chunk_bytes`
//! ([`SNAPSHOT_CHUNK_BYTES_DEFAULT`], a quarter of [`FRAME_BYTES_MAX`]); the receiver
//! collects them in any order and installs the snapshot ([`Apply::Snapshot`]) once complete;
//! a leader that hears nothing back for `snapshot_retry_ticks` sends it again.
//!
//! ## A member that lost its data directory
//!
//! Raft's safety rests on votes and acknowledged entries being durable. A member whose disk
//! was lost restarts with [`ReplicaGroup::rejoin_after_data_loss`]: it catches up (by
//! snapshot if needed) and acknowledges new entries (durably), but never votes, campaigns or
//! accepts a transfer, and its owner marks its fresh data directory (`Durable::abstaining`)
//! so later restarts keep it so. Letting it vote again needs a membership change (remove,
//! re-add), which is not built; until then it counts as a failed member for elections
//! (`broken_lost_data_rejoining_as_a_voter_is_caught` shows the loss without this rule).
//! raft-rs trusts the leader's match index for a peer, which such a member undercuts; the
//! group repairs it: the member says `rejoined` in its envelopes, its leader re-probes it
//! from the index it reports, and a heartbeat's commit index is clamped to the local log.
//!
//! ## Input from the network
//!
//! [`ReplicaGroup::step_bytes`] decodes a postcard frame; a frame or raft message that does
//! not decode is dropped and counted ([`Stats::undecodable`]), as are messages for another
//! member, from a non-voter, of a type peers never send (proposals, local types), with
//! non-normal entries, or carrying a snapshot of another membership ([`Stats::refused`]).
//!
//! ## Caveats
//!
//! * Crash faults only: a decoded raft message that a correct peer could never send (say, an
//!   append conflicting with a committed entry) still meets raft-rs's own assertions, which
//!   panic. Peers are authenticated by the transport's TLS.
//! * Uses two raft-rs hooks marked for tests: `set_randomized_election_timeout` (seeded
//!   jitter) and writing a peer's `Progress` (data-loss repair). Pinned to raft 0.7.
//! * Raft messages are protobuf (protobuf 2) inside our serde envelope; only the envelope is
//!   postcard.
//! * Not built: membership changes, learners, re-admitting a data-lost member, follower reads,
//!   leader placement and rebalancing (the owner's job, see `docs/replication.md`).
//!
//! ## Tests
//!
//! `tests/sim.rs` runs seeded groups of 1, 3 and 5 members in virtual time with loss,
//! duplication, reordering, clock drift, partitions, crashes that lose unsynced writes, power
//! cuts of every member and lost data directories, and checks agreement (§5.3, §5.4.3),
//! durability of acknowledged commands (§5.4), linearizable reads (§6.4), leases (§6.4.1) and
//! liveness after the heal; each check is shown failing with its rule broken on purpose.
//! `REPLICATION_SEED=s` replays a seed, `REPLICATION_SEEDS=n` widens the sweep.
//! `tests/group.rs` drives members by hand.

mod config;
mod error;
mod group;
mod storage;
mod types;
mod wire;

pub use config::*;
pub use error::Error;
pub use group::{ReplicaGroup, Role, TRANSFER_ABANDON_ELECTIONS};
pub use types::*;
pub use wire::*;
