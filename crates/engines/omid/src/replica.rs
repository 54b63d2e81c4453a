//! A client's read-only replica of the oracle's metadata (§III "RPC Overhead", §IV "Client
//! Replica", "Client Startup"): the Tc list, the aborted list and `Tmax`, built from the
//! [`Connected`] reply and the deltas piggybacked on `Begin` replies and pushes. Pure: the
//! client library feeds it replies and asks it [`ClientReplica::in_snapshot`].

use super::messages::{Connected, CrashRange, Delta, MetaChange};
use litmus_core::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The replica's answer to `inSnapshot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility {
    Visible,
    Invisible,
    /// `Tmax < Ts_f < T_init` and no local `Tc`: the metadata predates the connection; ask the
    /// oracle (§IV "Client Startup"; the coordinator asks the writer's fate,
    /// [`super::messages::Request::Fates`], and remembers it).
    AskOracle,
}

/// A delta that does not continue the replica: a message was lost or reordered (a gap), or its
/// entries contradict what the replica holds (commit timestamps out of order: a late delta of
/// an earlier session or oracle incarnation whose positions happen to line up). Nothing is
/// applied; the client must reconnect and start a new replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ReplicaGap {
    #[error("delta starts at {got}, replica expects {expected}")]
    Gap { expected: u64, got: u64 },
    #[error("delta at {from} commits at {commit_ts:?}, not after the replica's last commit {last:?}")]
    OutOfOrder { from: u64, commit_ts: Timestamp, last: Timestamp },
}

/// See the module doc.
#[derive(Clone, Debug)]
pub struct ClientReplica {
    t_init: Timestamp,
    tmax: Timestamp,
    commits: BTreeMap<Timestamp, Timestamp>,
    /// `(Tc, Ts)` in `Tc` order, for garbage collection by `Tmax`.
    commit_order: VecDeque<(Timestamp, Timestamp)>,
    aborted: BTreeSet<Timestamp>,
    crash_ranges: Vec<CrashRange>,
    cursor: u64,
}

impl ClientReplica {
    pub fn new(connected: &Connected) -> ClientReplica {
        ClientReplica {
            t_init: connected.t_init,
            tmax: connected.tmax,
            commits: BTreeMap::new(),
            commit_order: VecDeque::new(),
            aborted: connected.aborted.iter().copied().collect(),
            crash_ranges: connected.crash_ranges.clone(),
            cursor: connected.cursor,
        }
    }

    /// Applies ΔSO (from a `Began` reply or a `Push`).
    pub fn apply(&mut self, delta: &Delta) -> Result<(), ReplicaGap> {
        if delta.from != self.cursor {
            return Err(ReplicaGap::Gap { expected: self.cursor, got: delta.from });
        }
        // Validate before applying anything: the commits the replica keeps (above `Tmax`) only
        // grow along the stream.
        let (mut last, mut tmax) = (self.commit_order.back().map_or(Timestamp(0), |&(tc, _)| tc), self.tmax);
        for change in &delta.entries {
            match *change {
                MetaChange::Committed { commit_ts, .. } if commit_ts > tmax => {
                    if commit_ts <= last {
                        return Err(ReplicaGap::OutOfOrder { from: delta.from, commit_ts, last });
                    }
                    last = commit_ts;
                }
                MetaChange::Tmax(t) => tmax = tmax.max(t),
                _ => {}
            }
        }
        for change in &delta.entries {
            match change {
                &MetaChange::Committed { start_ts, commit_ts } => {
                    if commit_ts > self.tmax {
                        self.commits.insert(start_ts, commit_ts);
                        self.commit_order.push_back((commit_ts, start_ts));
                    }
                }
                &MetaChange::Aborted { start_ts } => {
                    self.aborted.insert(start_ts);
                }
                &MetaChange::Forgotten { start_ts } => {
                    self.aborted.remove(&start_ts);
                }
                MetaChange::CrashAborted(range) => self.crash_ranges.push(range.clone()),
                &MetaChange::CrashForgotten { after, upto } => {
                    self.crash_ranges.retain(|r| (r.after, r.upto) != (after, upto))
                }
                &MetaChange::Tmax(tmax) => {
                    self.tmax = self.tmax.max(tmax);
                    while let Some(&(commit_ts, start_ts)) = self.commit_order.front() {
                        if commit_ts > self.tmax {
                            break;
                        }
                        self.commit_order.pop_front();
                        self.commits.remove(&start_ts);
                    }
                }
            }
        }
        self.cursor += delta.entries.len() as u64;
        Ok(())
    }

    /// Algorithm 4 on the local replica, for a reader whose start timestamp this client received
    /// (so every `Tc < reader_ts` has reached the replica).
    pub fn in_snapshot(&self, version_ts: Timestamp, reader_ts: Timestamp) -> Visibility {
        let visible = |v: bool| if v { Visibility::Visible } else { Visibility::Invisible };
        if version_ts == reader_ts {
            return Visibility::Visible;
        }
        if let Some(&commit_ts) = self.commits.get(&version_ts) {
            return visible(commit_ts < reader_ts);
        }
        if self.aborted.contains(&version_ts) || self.crash_ranges.iter().any(|r| r.aborts(version_ts)) {
            return Visibility::Invisible;
        }
        if self.tmax < version_ts {
            // Not committed as far as this replica knows; before T_init it may not know.
            return if version_ts < self.t_init { Visibility::AskOracle } else { Visibility::Invisible };
        }
        Visibility::Visible
    }

    pub fn tmax(&self) -> Timestamp {
        self.tmax
    }
    pub fn t_init(&self) -> Timestamp {
        self.t_init
    }
    /// Position in the oracle's `commitinfo` of the next delta entry this replica expects.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }
    /// Entries held (Tc list and aborted list): the replica's memory footprint.
    pub fn len(&self) -> usize {
        self.commits.len() + self.aborted.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
