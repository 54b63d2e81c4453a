//! # One directory holding a partition's WAL and snapshots
//!
//! [`DiskLog`] is the runtime's single entry point to durable storage: WAL segments
//! (`wal-*.log`) and snapshots (`snapshot-*.snap`) share one directory.
//!
//! ```text
//!   open:      snapshot (lsn S, bytes)  ──►  Wal::open(after_lsn = S)  ──►  records S+1 ..= L
//!   run:       append … append, flush (group commit), then send          (persist before send)
//!   snapshot:  flush; write_snapshot(last_lsn); Wal::truncate_prefix(last_lsn)
//! ```
//!
//! The order inside [`DiskLog::snapshot`] is what makes it crash-safe: the snapshot is durable
//! before any segment it covers is deleted, and a crash between the two leaves covered segments
//! that the next [`DiskLog::open`] deletes (see [`crate::wal`]).

use crate::snapshot::{read_latest_snapshot, write_snapshot};
use crate::wal::{FsyncPolicy, Lsn, Records, Wal};
use crate::StorageError;
use std::path::{Path, PathBuf};

/// WAL + snapshots in one directory. See the module doc.
#[derive(Debug)]
pub struct DiskLog {
    wal: Wal,
    dir: PathBuf,
    /// Lsn covered by the newest snapshot written or recovered (0: none).
    snapshot_lsn: Lsn,
}

impl DiskLog {
    /// Opens (creating if needed) the storage in `dir`. Returns the newest intact snapshot's
    /// bytes, if any, and every WAL record after it. Recovery is: decode the snapshot (or start
    /// empty), then apply the records in order.
    pub fn open(dir: &Path, policy: FsyncPolicy) -> Result<(DiskLog, Option<Vec<u8>>, Records), StorageError> {
        let (snapshot_lsn, snapshot) = match read_latest_snapshot(dir)? {
            Some((lsn, bytes)) => (lsn, Some(bytes)),
            None => (0, None),
        };
        let (wal, records) = Wal::open(dir, policy, snapshot_lsn)?;
        assert!(wal.last_lsn() >= snapshot_lsn, "lsns never go back behind a snapshot");
        assert!(records.is_empty() || records[0].0 == snapshot_lsn + 1);
        Ok((DiskLog { wal, dir: dir.to_path_buf(), snapshot_lsn }, snapshot, records))
    }

    /// Buffers a record; see [`Wal::append`].
    pub fn append(&mut self, record: &[u8]) -> Result<Lsn, StorageError> {
        self.wal.append(record)
    }

    /// Group commit; see [`Wal::flush`].
    pub fn flush(&mut self) -> Result<Lsn, StorageError> {
        self.wal.flush()
    }

    /// Flushes, writes `bytes` as the snapshot covering every record appended so far, and deletes
    /// the WAL segments it covers. `bytes` must be the state after applying every record up to
    /// [`Wal::last_lsn`]. Returns the snapshot's lsn.
    pub fn snapshot(&mut self, bytes: &[u8]) -> Result<Lsn, StorageError> {
        let lsn = self.wal.flush()?;
        assert!(lsn >= self.snapshot_lsn);
        write_snapshot(&self.dir, lsn, bytes)?;
        self.snapshot_lsn = lsn;
        self.wal.truncate_prefix(lsn)?;
        Ok(lsn)
    }

    pub fn wal(&self) -> &Wal {
        &self.wal
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Lsn covered by the newest snapshot (0 if none).
    pub fn snapshot_lsn(&self) -> Lsn {
        self.snapshot_lsn
    }

    pub fn last_lsn(&self) -> Lsn {
        self.wal.last_lsn()
    }

    pub fn durable_lsn(&self) -> Lsn {
        self.wal.durable_lsn()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MvccStore;
    use litmus_core::{Key, TableId, Timestamp, Value};

    fn rec(i: u64) -> Vec<u8> {
        format!("r{i}").into_bytes()
    }

    #[test]
    fn reopen_returns_snapshot_and_only_later_records() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, snap, records) = DiskLog::open(dir.path(), FsyncPolicy::Always).unwrap();
        assert_eq!((snap, records.len()), (None, 0));
        for i in 1..=3 {
            log.append(&rec(i)).unwrap();
        }
        assert_eq!(log.snapshot(b"state@3").unwrap(), 3, "snapshot flushes buffered records first");
        for i in 4..=5 {
            log.append(&rec(i)).unwrap();
        }
        log.flush().unwrap();
        drop(log);

        let (mut log, snap, records) = DiskLog::open(dir.path(), FsyncPolicy::Always).unwrap();
        assert_eq!(snap, Some(b"state@3".to_vec()));
        assert_eq!(records, vec![(4, rec(4)), (5, rec(5))]);
        assert_eq!((log.snapshot_lsn(), log.last_lsn()), (3, 5));
        assert_eq!(log.append(&rec(6)).unwrap(), 6);
        log.snapshot(b"state@6").unwrap();
        drop(log);

        let (log, snap, records) = DiskLog::open(dir.path(), FsyncPolicy::Never).unwrap();
        assert_eq!((snap, records), (Some(b"state@6".to_vec()), vec![]));
        assert_eq!(log.last_lsn(), 6);
    }

    /// The recovery recipe of the crate doc, end to end with a real store.
    #[test]
    fn store_recovers_from_snapshot_plus_replay() {
        let dir = tempfile::tempdir().unwrap();
        let apply = |store: &mut MvccStore, record: &[u8]| {
            let i = record[0] as i64;
            store.put(TableId(0), Key::ints(&[i % 3]), Timestamp(i as u64), Some(vec![Value::Int(i)].into()));
        };
        let (mut log, _, _) = DiskLog::open(dir.path(), FsyncPolicy::Never).unwrap();
        let mut store = MvccStore::new();
        for i in 1..=10u8 {
            log.append(&[i]).unwrap();
            apply(&mut store, &[i]);
            if i == 6 {
                log.snapshot(&store.encode_snapshot()).unwrap();
            }
        }
        log.flush().unwrap();
        drop(log);

        let (_, snap, records) = DiskLog::open(dir.path(), FsyncPolicy::Never).unwrap();
        let mut recovered = MvccStore::decode_snapshot(&snap.unwrap()).unwrap();
        assert_eq!(records.len(), 4);
        for (_, record) in &records {
            apply(&mut recovered, record);
        }
        assert_eq!(recovered, store);
    }
}
