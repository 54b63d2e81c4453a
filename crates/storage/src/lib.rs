//! # litmus-storage: what a partition keeps in memory and on disk
//!
//! ## The partition is a deterministic state machine that applies its own log
//!
//! A partition (see `litmus-engine`) is a `step(input, now) -> output` machine. Every input that
//! changes its state is first turned into a **log record** (opaque bytes to this crate) and the
//! partition's state is, by definition, the result of applying its records in log order to the
//! state of the latest snapshot. Applying a record is deterministic, so recovery is simply:
//!
//! ```text
//!   state = decode(latest intact snapshot)          // covers records 1..=snapshot_lsn
//!   for (lsn, record) in wal records with lsn > snapshot_lsn, in lsn order:
//!       state.apply(record)
//! ```
//!
//! ## Persist before send
//!
//! The runtime — never the state machine — does the I/O. For each step it
//!
//! 1. appends the step's log records to the [`Wal`] ([`Wal::append`] only buffers),
//! 2. makes them durable with one [`Wal::flush`] (one `write()` and, under
//!    [`FsyncPolicy::Always`], one `fdatasync`),
//! 3. only then sends the step's output messages (votes, acks, replies).
//!
//! So no other node or client ever hears of a state that a crash could take back: after a crash
//! the partition recovers at least every state it announced (etcd raft's rule, "persist before
//! send"). Records appended but not yet flushed when the process dies may or may not survive;
//! either is fine because nobody was told about them.
//!
//! ## Group commit
//!
//! A runtime that drains several inputs before flushing (every message waiting in its inbox, up
//! to a batch limit) pays one `write()` and one `fsync` for all of them: [`Wal::flush`] writes
//! every buffered record at once. [`Wal::fsync_count`] and [`Wal::bytes_written`] expose the
//! cost so benchmarks can report fsyncs per transaction.
//!
//! ## Snapshots bound recovery time and log size
//!
//! Periodically the runtime serializes the partition ([`MvccStore::encode_snapshot`] plus engine
//! state) and calls [`DiskLog::snapshot`], which flushes, writes the snapshot atomically
//! (tmp file, fsync, rename, fsync the directory) at the last lsn, and then deletes the WAL
//! segments the snapshot covers ([`Wal::truncate_prefix`]).
//!
//! ## Modules
//!
//! * [`mvcc`] — [`MvccStore`], the in-memory multiversion ordered map of one partition.
//! * [`wal`] — [`Wal`], segmented write-ahead log of checksummed frames with group commit.
//! * [`snapshot`] — atomic snapshot files with a checksummed header.
//! * [`disk`] — [`DiskLog`], WAL + snapshots in one directory, the runtime's single entry point.
//!
//! ## Errors
//!
//! Bad input (an oversized record) and damaged files return a typed [`StorageError`]; nothing
//! here panics on the contents of a file. A torn or corrupt WAL tail is not an error at all: it is
//! the expected trace of a crash and is cut off on open. A programming error (e.g. truncating the
//! log beyond its end) is an `assert!`.

pub mod disk;
pub mod mvcc;
pub mod snapshot;
pub mod wal;

pub use disk::DiskLog;
pub use mvcc::{MvccStore, VersionRef};
pub use snapshot::{read_latest_snapshot, write_snapshot};
pub use wal::{FsyncPolicy, Lsn, Records, Wal};

use litmus_core::{Error, InvalidInput};

/// Everything that can go wrong in storage, classified by what the caller must do: an
/// [`StorageError::RecordTooLarge`] is the caller's bad input (reject the request); every other
/// variant means the local disk or its contents failed (stop accepting writes, see
/// [`litmus_core::Error::Storage`]).
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// An operating-system I/O call failed. `context` says what we were doing and on which file.
    #[error("i/o error while {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A file's contents are damaged in a way recovery cannot repair (e.g. WAL records that a
    /// snapshot does not cover are missing).
    #[error("corrupt storage: {0}")]
    Corrupt(String),
    /// A WAL record exceeds [`wal::RECORD_SIZE_MAX`]. Nothing was changed.
    #[error("record is {size} bytes, limit is {limit}")]
    RecordTooLarge { size: usize, limit: usize },
    /// Bytes that passed their checksum do not decode (e.g. a snapshot from another format).
    #[error("cannot decode: {0}")]
    Decode(String),
    /// An earlier write or fsync of this [`Wal`] failed, so what reached the disk is unknown
    /// (after a failed fsync the kernel may have dropped the dirty pages: retrying it could report
    /// success for lost data). The log refuses further work; reopen it to recover.
    #[error("write-ahead log is unusable after an earlier failure: {0}")]
    Poisoned(String),
}

impl From<std::io::Error> for StorageError {
    fn from(source: std::io::Error) -> Self {
        StorageError::Io { context: "performing i/o".into(), source }
    }
}

impl From<StorageError> for Error {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::RecordTooLarge { size, limit } => {
                Error::Invalid(InvalidInput::Oversized { what: "log record".into(), size, limit })
            }
            other => Error::Storage(other.to_string()),
        }
    }
}

/// Attaches a description of the failed operation to an `io::Result`.
pub(crate) trait IoContext<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, StorageError>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, StorageError> {
        self.map_err(|source| StorageError::Io { context: what(), source })
    }
}

/// Makes the creation, rename or deletion of entries in `dir` durable. On Unix a new file's
/// name is only durable once its directory is fsynced; elsewhere this is a no-op.
pub(crate) fn sync_dir(dir: &std::path::Path) -> Result<(), StorageError> {
    #[cfg(unix)]
    {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .context(|| format!("syncing directory {}", dir.display()))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_too_large_maps_to_invalid_input() {
        let e: Error = StorageError::RecordTooLarge { size: 10, limit: 5 }.into();
        assert!(matches!(e, Error::Invalid(InvalidInput::Oversized { size: 10, limit: 5, .. })));
        assert!(e.is_deterministic());
    }

    #[test]
    fn disk_failures_map_to_storage_error() {
        let e: Error = StorageError::Corrupt("bad".into()).into();
        assert!(matches!(e, Error::Storage(ref m) if m.contains("bad")));
        assert!(!e.is_retryable());
        let io = std::io::Error::other("disk gone");
        let e: Error = Err::<(), _>(io).context(|| "writing x".into()).unwrap_err().into();
        assert!(matches!(e, Error::Storage(ref m) if m.contains("writing x") && m.contains("disk gone")));
    }
}
