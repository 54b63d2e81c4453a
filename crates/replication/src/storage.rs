//! The group's in-memory view of its raft log, the `raft::Storage` the library reads.
//!
//! It mirrors what the owner made durable: the owner persists [`crate::Persist`] and the
//! group applies the same changes here, so on a restart the owner hands back
//! ([`crate::Durable`]) exactly what this held at its last sync.

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, StorageError};
use std::cell::Cell;

pub(crate) struct LogStore {
    pub(crate) hard_state: HardState,
    conf_state: ConfState,
    /// The latest snapshot, with its data (served to followers that need entries before
    /// `offset`). `None` before the first one: the log then starts at index 1.
    snapshot: Option<Snapshot>,
    snap_index: u64,
    /// The log starts after `offset` (`offset <= snap_index`: a tail before the snapshot is
    /// kept so that followers a little behind get entries, not a snapshot).
    offset: u64,
    offset_term: u64,
    /// `entries[i].index == offset + 1 + i`.
    entries: Vec<Entry>,
    /// Set when raft asked for a snapshot newer than the one held.
    pub(crate) snapshot_asked: Cell<bool>,
}

impl LogStore {
    pub(crate) fn new(conf_state: ConfState) -> Self {
        LogStore {
            hard_state: HardState::default(),
            conf_state,
            snapshot: None,
            snap_index: 0,
            offset: 0,
            offset_term: 0,
            entries: Vec::new(),
            snapshot_asked: Cell::new(false),
        }
    }

    pub(crate) fn snap_index(&self) -> u64 {
        self.snap_index
    }

    pub(crate) fn last(&self) -> u64 {
        self.offset + self.entries.len() as u64
    }

    /// Appends entries, replacing any suffix from the first one's index (raft's conflict rule).
    pub(crate) fn append(&mut self, ents: &[Entry]) {
        let Some(first) = ents.first() else { return };
        assert!(first.index <= self.last() + 1, "append at {} leaves a gap after {}", first.index, self.last());
        let skip = self.offset.saturating_sub(first.index - 1) as usize;
        let ents = &ents[skip.min(ents.len())..];
        let Some(first) = ents.first() else { return };
        self.entries.truncate((first.index - self.offset - 1) as usize);
        self.entries.extend_from_slice(ents);
    }

    /// Installs a snapshot received from the leader: the log restarts after it.
    pub(crate) fn install(&mut self, snap: Snapshot) {
        let meta = snap.get_metadata();
        self.snap_index = meta.index;
        self.offset = meta.index;
        self.offset_term = meta.term;
        self.conf_state = meta.get_conf_state().clone();
        self.entries.clear();
        self.hard_state.commit = self.hard_state.commit.max(meta.index);
        self.hard_state.term = self.hard_state.term.max(meta.term);
        self.snapshot = Some(snap);
    }

    /// The owner's snapshot of its state at `index` (applied): keep it, and drop the log up
    /// to `keep_entries` before it.
    pub(crate) fn compact(&mut self, index: u64, data: Vec<u8>, keep_entries: u64) -> u64 {
        assert!(index > self.snap_index && index <= self.last(), "snapshot at {index} outside the log");
        let term = self.entries[(index - self.offset - 1) as usize].term;
        self.snap_index = index;
        self.snapshot = Some(snapshot_of(index, term, &self.conf_state, data));
        let to = index.saturating_sub(keep_entries);
        if to > self.offset {
            self.offset_term = self.entries[(to - self.offset - 1) as usize].term;
            self.entries.drain(..(to - self.offset) as usize);
            self.offset = to;
        }
        term
    }
}

pub(crate) fn snapshot_of(index: u64, term: u64, conf_state: &ConfState, data: Vec<u8>) -> Snapshot {
    let mut meta = SnapshotMetadata { index, term, ..Default::default() };
    meta.set_conf_state(conf_state.clone());
    let mut snap = Snapshot { data: data.into(), ..Default::default() };
    snap.set_metadata(meta);
    snap
}

impl raft::Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(self.hard_state.clone(), self.conf_state.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low <= self.offset {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let lo = (low - self.offset - 1) as usize;
        let hi = (high - self.offset - 1) as usize;
        let mut ents = self.entries[lo..hi].to_vec();
        raft::util::limit_size(&mut ents, max_size.into());
        Ok(ents)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.offset {
            return Ok(self.offset_term);
        }
        if idx < self.offset {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > self.last() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[(idx - self.offset - 1) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.offset + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        match &self.snapshot {
            Some(s) if s.get_metadata().index >= request_index => Ok(s.clone()),
            _ => {
                self.snapshot_asked.set(true);
                Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The log store against a naive model: a full vector of the log that never compacts
    //! (etcd raft's `quorum/quick_test.go` habit).

    use super::*;
    use raft::Storage;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn entry(index: u64, term: u64) -> Entry {
        Entry { index, term, data: vec![index as u8, term as u8].into(), ..Default::default() }
    }

    #[test]
    fn log_store_matches_a_naive_log_under_appends_compactions_and_installs() {
        for seed in 0..200 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut store = LogStore::new(ConfState::default());
            let mut model: Vec<Entry> = Vec::new(); // model[i].index == i + 1
            let mut floor = 0; // entries at or below `floor` may be gone from the store
            let mut term = 1;
            for _ in 0..200 {
                match rng.gen_range(0..10) {
                    0..=6 => {
                        // Append from anywhere after the floor (a conflicting suffix is replaced).
                        let from = rng.gen_range(floor + 1..=model.len() as u64 + 1);
                        term += rng.gen_range(0..2);
                        let n = rng.gen_range(1..5);
                        let ents: Vec<Entry> = (from..from + n).map(|i| entry(i, term)).collect();
                        store.append(&ents);
                        model.truncate(from as usize - 1);
                        model.extend(ents);
                    }
                    7..=8 if model.len() as u64 > store.snap_index() => {
                        let index = rng.gen_range(store.snap_index() + 1..=model.len() as u64);
                        let keep = rng.gen_range(0..4);
                        let t = store.compact(index, vec![1], keep);
                        assert_eq!(t, model[index as usize - 1].term);
                        floor = index;
                    }
                    9 => {
                        // A snapshot from a leader, past the end of the log or inside it.
                        let index = rng.gen_range(floor + 1..=model.len() as u64 + 3);
                        term += 1;
                        store.install(snapshot_of(index, term, &ConfState::default(), vec![2]));
                        model.truncate(index as usize);
                        while (model.len() as u64) < index {
                            model.push(entry(model.len() as u64 + 1, term));
                        }
                        model[index as usize - 1] = entry(index, term);
                        floor = index;
                    }
                    _ => {}
                }
                let first = store.first_index().unwrap();
                assert!(first <= floor + 1, "seed {seed}: the log starts by the floor");
                assert_eq!(store.last_index().unwrap(), model.len() as u64, "seed {seed}");
                for i in first..=model.len() as u64 {
                    assert_eq!(store.term(i).unwrap(), model[i as usize - 1].term, "seed {seed}: term({i})");
                }
                if first - 1 > 0 {
                    assert_eq!(store.term(first - 1).unwrap(), model[first as usize - 2].term, "seed {seed}");
                }
                let got = store.entries(first, model.len() as u64 + 1, None, GetEntriesContext::empty(false));
                let got = got.unwrap();
                let want = &model[first as usize - 1..];
                assert_eq!(got.len(), want.len(), "seed {seed}");
                for (g, w) in got.iter().zip(want) {
                    assert_eq!((g.index, g.term), (w.index, w.term), "seed {seed}");
                }
                if first > 1 {
                    assert!(store.entries(first - 1, first, None, GetEntriesContext::empty(false)).is_err());
                }
            }
        }
    }
}
