//! # Write-ahead log with group commit
//!
//! [`Wal`] is an append-only sequence of opaque byte records numbered by a log sequence number
//! ([`Lsn`]), the first record being lsn 1. Records live in **segment files** in one directory;
//! a segment is named after the lsn of its first record, `wal-{first_lsn:020}.log`, so listing the
//! directory and sorting by name gives log order. Only the last segment (the *active* one) is
//! appended to.
//!
//! ```text
//!   dir/wal-00000000000000000001.log   lsn 1 ..= 41      (deleted once a snapshot covers 41)
//!   dir/wal-00000000000000000042.log   lsn 42 ..= now    (active)
//! ```
//!
//! ## Frame format
//!
//! Each record is one frame; a segment is frames back to back, with nothing before or between.
//! Integers are little-endian.
//!
//! ```text
//!   0        4        8                16                      16 + len
//!   ┌────────┬────────┬────────────────┬───────────────────────┐
//!   │ len    │ crc32  │ lsn            │ payload (len bytes)   │
//!   │ u32    │ u32    │ u64            │                       │
//!   └────────┴────────┴────────────────┴───────────────────────┘
//!   crc32 = CRC-32 (IEEE) of  len bytes ++ lsn bytes ++ payload
//! ```
//!
//! The checksum covers the length and the lsn too, so a damaged length field cannot make a
//! different byte range pass as a record. Frames inside a segment carry consecutive lsns starting
//! at the segment's name; a frame with the right checksum but an unexpected lsn is also corrupt.
//!
//! ## Appending, group commit and the fsync policy
//!
//! [`Wal::append`] only encodes the frame into an in-memory buffer and assigns the next lsn.
//! [`Wal::flush`] writes the whole buffer with one `write()` and then, under
//! [`FsyncPolicy::Always`], calls `fdatasync` ([`File::sync_data`]) once. Every record appended
//! before the flush becomes durable at once: the cost of the fsync is shared by the group.
//!
//! * [`FsyncPolicy::Always`]: a flushed record survives power loss.
//! * [`FsyncPolicy::Never`]: a flushed record is in the OS page cache; it survives the process
//!   being killed, not the machine losing power. No fsync is issued anywhere (not even for
//!   directories). For benchmarks that want to measure the protocol rather than the disk.
//!
//! The buffer is bounded by [`WRITE_BUFFER_BYTES_MAX`]: an append that would exceed it first
//! writes the buffer out without syncing. That does not advance [`Wal::durable_lsn`]; such
//! records may or may not survive a crash, like any unflushed record.
//!
//! ## Recovery: the first bad frame is the end of the log
//!
//! [`Wal::open`] reads every segment in order and stops at the first frame that is truncated,
//! has an impossible length, a wrong checksum or an unexpected lsn. That is the normal trace of a
//! crash in the middle of a `write()` (a *torn tail*). The segment is truncated to the last good
//! frame and every later segment is deleted, so appending continues with the next lsn. Damage
//! *before* the last good frame looks the same as a torn tail and is treated the same way: the
//! log ends at the first bad frame.
//!
//! ## Truncating the prefix after a snapshot
//!
//! [`Wal::truncate_prefix`]`(lsn)` is called once a durable snapshot covers every record
//! `<= lsn`. It flushes, starts a new active segment at `last_lsn + 1` (unless the active one is
//! still empty) and deletes every segment whose records are all `<= lsn` — a segment is covered
//! when the *next* segment starts at or below `lsn + 1`. A crash between creating and deleting
//! leaves extra covered segments, which the next [`Wal::open`] with `after_lsn = lsn` deletes.
//!
//! `open(dir, policy, after_lsn)` expects the log to contain every record after `after_lsn`:
//! if the oldest segment starts later than `after_lsn + 1` records are missing and it returns
//! [`StorageError::Corrupt`]. If instead the log ends before `after_lsn` (possible under
//! [`FsyncPolicy::Never`] after a power loss: the snapshot was fsynced, the log was not), it
//! starts a fresh segment at `after_lsn + 1`, so lsns never go backwards behind a snapshot.
//!
//! ## Failures
//!
//! Any failed `write()` or fsync *poisons* the log: what reached the disk is unknown, and after a
//! failed fsync Linux may have dropped the dirty pages, so a retry could report success for lost
//! data. Every later call returns [`StorageError::Poisoned`]; reopening runs recovery.
//!
//! ## Not implemented
//!
//! * No lock file: two processes opening the same directory corrupt each other.
//! * Segments rotate only in [`Wal::truncate_prefix`], never by size.
//! * No preallocation or O_DIRECT; fsync is `fdatasync` on the active segment.

use crate::{sync_dir, IoContext, StorageError};
use litmus_core::InvalidInput;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Log sequence number. The first record is lsn 1; 0 means "no record".
pub type Lsn = u64;

/// Records recovered by [`Wal::open`]: `(lsn, record)` in lsn order.
pub type Records = Vec<(Lsn, Vec<u8>)>;

/// Largest record payload, in bytes. Larger appends are rejected.
pub const RECORD_SIZE_MAX: usize = 16 << 20;

/// Bytes of encoded frames buffered in memory before [`Wal::append`] writes them out early.
pub const WRITE_BUFFER_BYTES_MAX: usize = 32 << 20;

/// Capacity the buffer keeps after a flush; a larger one (after a burst) is released.
const WRITE_BUFFER_RETAINED_BYTES_MAX: usize = 1 << 20;

/// `len: u32`, `crc32: u32`, `lsn: u64`.
pub const FRAME_HEADER_SIZE: usize = 16;

const _: () = assert!(RECORD_SIZE_MAX <= u32::MAX as usize, "len must fit the u32 length field");

/// When [`Wal::flush`] calls fsync. See the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncPolicy {
    /// `fdatasync` on every flush: flushed records survive power loss.
    Always,
    /// `write()` to the OS only: flushed records survive a process kill, not power loss.
    Never,
}

impl FromStr for FsyncPolicy {
    type Err = InvalidInput;

    /// Parses `always` or `never` (ASCII case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("always") {
            Ok(FsyncPolicy::Always)
        } else if s.eq_ignore_ascii_case("never") {
            Ok(FsyncPolicy::Never)
        } else {
            Err(InvalidInput::Config(format!("fsync policy {s:?}: expected \"always\" or \"never\"")))
        }
    }
}

impl fmt::Display for FsyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FsyncPolicy::Always => "always",
            FsyncPolicy::Never => "never",
        })
    }
}

/// A segmented write-ahead log. See the module doc.
#[derive(Debug)]
pub struct Wal {
    dir: PathBuf,
    policy: FsyncPolicy,
    /// First lsns of the live segments, ascending. Never empty; the last one is `active`.
    segments: Vec<Lsn>,
    /// The active segment, positioned at its end.
    active: File,
    /// Encoded frames of records `written_lsn + 1 ..= last_lsn`.
    buffer: Vec<u8>,
    /// Lsn of the last appended record (buffered or not).
    last_lsn: Lsn,
    /// Lsn of the last record handed to `write()`.
    written_lsn: Lsn,
    /// Lsn of the last record written and synced as the policy demands.
    durable_lsn: Lsn,
    bytes_written: u64,
    fsync_count: u64,
    /// Set by the first failed write or fsync; see the module doc.
    poisoned: Option<String>,
}

/// Drops the segments wholly covered by the caller's snapshot: garbage left by a crash in
/// `truncate_prefix`, which the next segment starting at or below `after_lsn + 1` proves. Fails
/// when the log starts after the records needed. Returns whether a segment was removed.
fn drop_covered_segments(
    dir: &Path,
    segments: &mut Vec<Lsn>,
    after_lsn: Lsn,
    resume_lsn: Lsn,
) -> Result<bool, StorageError> {
    let mut dir_changed = false;
    while segments.len() >= 2 && segments[1] <= resume_lsn {
        remove_segment(dir, segments.remove(0))?;
        dir_changed = true;
    }
    if let Some(&first) = segments.first() {
        if first > resume_lsn {
            return Err(StorageError::Corrupt(format!(
                "log in {} starts at lsn {first} but records after lsn {after_lsn} are needed",
                dir.display()
            )));
        }
    }
    Ok(dir_changed)
}

/// Reads segments in order, stopping at the first bad frame or lsn gap (a torn or corrupt tail
/// is cut off its segment). Returns the records after `after_lsn`, the lsn after the last
/// intact one, and how many segments the log keeps.
fn read_segments(
    dir: &Path,
    segments: &[Lsn],
    after_lsn: Lsn,
    resume_lsn: Lsn,
    policy: FsyncPolicy,
) -> Result<(Records, Lsn, usize), StorageError> {
    let mut records = Vec::new();
    let mut next_lsn = segments.first().copied().unwrap_or(resume_lsn);
    let mut kept = 0;
    for (i, &first_lsn) in segments.iter().enumerate() {
        if first_lsn != next_lsn {
            break; // A gap or overlap between segments: the log ended in the previous one.
        }
        kept = i + 1;
        let path = segment_path(dir, first_lsn);
        let bytes = read_file(&path)?;
        let end = parse_frames(&bytes, first_lsn, |lsn, payload| {
            if lsn > after_lsn {
                records.push((lsn, payload.to_vec()));
            }
            next_lsn = lsn + 1;
        });
        if end < bytes.len() {
            // Torn or corrupt tail: cut the segment to its last good frame.
            let file = OpenOptions::new()
                .write(true)
                .open(&path)
                .context(|| format!("opening {} to cut its tail", path.display()))?;
            file.set_len(end as u64).context(|| format!("truncating {} to {end} bytes", path.display()))?;
            if policy == FsyncPolicy::Always {
                file.sync_all().context(|| format!("syncing truncated {}", path.display()))?;
            }
            break;
        }
    }
    Ok((records, next_lsn, kept))
}

/// The last segment, opened for appending at its end.
fn open_active(dir: &Path, segments: &[Lsn]) -> Result<File, StorageError> {
    let active_path = segment_path(dir, *segments.last().expect("at least one segment"));
    let mut active =
        OpenOptions::new().write(true).open(&active_path).context(|| format!("opening {}", active_path.display()))?;
    active.seek(SeekFrom::End(0)).context(|| format!("seeking to the end of {}", active_path.display()))?;
    Ok(active)
}

impl Wal {
    /// Opens (creating if needed) the log in `dir`, recovers it (see the module doc) and returns
    /// it with every intact record with lsn `> after_lsn`, in lsn order.
    pub fn open(dir: &Path, policy: FsyncPolicy, after_lsn: Lsn) -> Result<(Wal, Records), StorageError> {
        fs::create_dir_all(dir).context(|| format!("creating log directory {}", dir.display()))?;
        let mut segments = list_segments(dir)?;
        let resume_lsn = after_lsn.checked_add(1).ok_or_else(|| StorageError::Corrupt("after_lsn overflows".into()))?;

        let mut dir_changed = drop_covered_segments(dir, &mut segments, after_lsn, resume_lsn)?;
        let (records, next_lsn, kept) = read_segments(dir, &segments, after_lsn, resume_lsn, policy)?;
        // Everything after the end of the log is unreachable; later appends reuse those lsns.
        for first_lsn in segments.drain(kept..) {
            remove_segment(dir, first_lsn)?;
            dir_changed = true;
        }
        let mut last_lsn = next_lsn - 1;

        if segments.is_empty() || last_lsn < after_lsn {
            // A fresh log, or a log that ends before the snapshot: start at after_lsn + 1 and drop
            // the (covered) rest so that the segment sequence has no gap.
            assert!(records.is_empty());
            create_segment(dir, resume_lsn, policy)?;
            for first_lsn in segments.drain(..) {
                remove_segment(dir, first_lsn)?;
            }
            segments.push(resume_lsn);
            last_lsn = after_lsn;
            dir_changed = true;
        }
        if dir_changed && policy == FsyncPolicy::Always {
            sync_dir(dir)?;
        }

        let active = open_active(dir, &segments)?;

        // Postconditions: records are the contiguous range after_lsn+1 ..= last_lsn.
        assert!(last_lsn >= after_lsn);
        assert!(records.is_empty() || records[0].0 == after_lsn + 1);
        assert!(records.last().map_or(last_lsn == after_lsn, |r| r.0 == last_lsn));
        debug_assert!(records.windows(2).all(|w| w[0].0 + 1 == w[1].0));

        let wal = Wal {
            dir: dir.to_path_buf(),
            policy,
            segments,
            active,
            buffer: Vec::new(),
            last_lsn,
            written_lsn: last_lsn,
            durable_lsn: last_lsn,
            bytes_written: 0,
            fsync_count: 0,
            poisoned: None,
        };
        Ok((wal, records))
    }

    /// Buffers a record and returns its lsn. It is not durable until [`Wal::flush`]. A record
    /// larger than [`RECORD_SIZE_MAX`] is rejected and changes nothing.
    pub fn append(&mut self, record: &[u8]) -> Result<Lsn, StorageError> {
        self.check_poisoned()?;
        if record.len() > RECORD_SIZE_MAX {
            return Err(StorageError::RecordTooLarge { size: record.len(), limit: RECORD_SIZE_MAX });
        }
        if !self.buffer.is_empty() && self.buffer.len() + FRAME_HEADER_SIZE + record.len() > WRITE_BUFFER_BYTES_MAX {
            self.write_buffer()?;
        }
        let lsn = self.last_lsn + 1;
        let before = self.buffer.len();
        encode_frame(lsn, record, &mut self.buffer);
        assert_eq!(self.buffer.len(), before + FRAME_HEADER_SIZE + record.len());
        self.last_lsn = lsn;
        Ok(lsn)
    }

    /// Group commit: writes every buffered record with one `write()` and, under
    /// [`FsyncPolicy::Always`], one fsync. Returns the durable lsn (= [`Wal::last_lsn`]).
    pub fn flush(&mut self) -> Result<Lsn, StorageError> {
        self.check_poisoned()?;
        self.write_buffer()?;
        if self.durable_lsn < self.written_lsn {
            if self.policy == FsyncPolicy::Always {
                if let Err(source) = self.active.sync_data() {
                    return Err(self.poison(format!("fsync of the active segment in {}", self.dir.display()), source));
                }
                self.fsync_count += 1;
            }
            self.durable_lsn = self.written_lsn;
        }
        assert_eq!(self.durable_lsn, self.last_lsn);
        Ok(self.durable_lsn)
    }

    /// Writes the buffer to the active segment without syncing.
    fn write_buffer(&mut self) -> Result<(), StorageError> {
        if self.buffer.is_empty() {
            assert_eq!(self.written_lsn, self.last_lsn);
            return Ok(());
        }
        if let Err(source) = self.active.write_all(&self.buffer) {
            return Err(self.poison(format!("writing the active segment in {}", self.dir.display()), source));
        }
        self.bytes_written += self.buffer.len() as u64;
        self.written_lsn = self.last_lsn;
        self.buffer.clear();
        if self.buffer.capacity() > WRITE_BUFFER_RETAINED_BYTES_MAX {
            self.buffer.shrink_to(WRITE_BUFFER_RETAINED_BYTES_MAX);
        }
        Ok(())
    }

    /// Lsn of the last appended record (0 if none ever).
    pub fn last_lsn(&self) -> Lsn {
        self.last_lsn
    }

    /// Lsn up to which records are written and synced as the policy demands.
    pub fn durable_lsn(&self) -> Lsn {
        self.durable_lsn
    }

    /// Called once a durable snapshot covers every record `<= lsn`: flushes, starts a new
    /// segment, and deletes the segments whose records are all `<= lsn`.
    ///
    /// Panics if `lsn > last_lsn()`: a snapshot cannot cover records that were never appended.
    pub fn truncate_prefix(&mut self, lsn: Lsn) -> Result<(), StorageError> {
        assert!(lsn <= self.last_lsn, "truncate_prefix({lsn}) beyond the last lsn {}", self.last_lsn);
        self.flush()?;
        let next_lsn = self.last_lsn + 1;
        let active_first = *self.segments.last().expect("at least one segment");
        let rotate = active_first != next_lsn;
        if rotate {
            // The active segment holds records: rotate so that it can be deleted later.
            let file = match create_segment(&self.dir, next_lsn, self.policy) {
                Ok(file) => file,
                Err(e) => return Err(self.poison_with(e)),
            };
            if self.policy == FsyncPolicy::Always {
                self.fsync_count += 1; // create_segment synced the new file.
            }
            self.active = file;
            self.segments.push(next_lsn);
        }
        let covered_end = lsn + 1;
        let mut removed = false;
        while self.segments.len() >= 2 && self.segments[1] <= covered_end {
            let first_lsn = self.segments.remove(0);
            if let Err(e) = remove_segment(&self.dir, first_lsn) {
                return Err(self.poison_with(e));
            }
            removed = true;
        }
        if (removed || rotate) && self.policy == FsyncPolicy::Always {
            if let Err(e) = sync_dir(&self.dir) {
                return Err(self.poison_with(e));
            }
            self.fsync_count += 1;
        }
        assert!(self.segments[0] <= covered_end, "segments with records > lsn are kept");
        Ok(())
    }

    /// Bytes handed to `write()` since open.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// fsync calls since open: one per flush that wrote data under [`FsyncPolicy::Always`], plus
    /// the new file's and the directory's sync when [`Wal::truncate_prefix`] rotates or deletes
    /// segments. (Syncs during recovery in [`Wal::open`] are not counted.)
    pub fn fsync_count(&self) -> u64 {
        self.fsync_count
    }

    pub fn policy(&self) -> FsyncPolicy {
        self.policy
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn check_poisoned(&self) -> Result<(), StorageError> {
        match &self.poisoned {
            Some(cause) => Err(StorageError::Poisoned(cause.clone())),
            None => Ok(()),
        }
    }

    fn poison(&mut self, context: String, source: std::io::Error) -> StorageError {
        self.poison_with(StorageError::Io { context, source })
    }

    fn poison_with(&mut self, e: StorageError) -> StorageError {
        self.poisoned = Some(e.to_string());
        e
    }
}

/// Appends one frame (see the module doc) to `out`.
fn encode_frame(lsn: Lsn, payload: &[u8], out: &mut Vec<u8>) {
    assert!(payload.len() <= RECORD_SIZE_MAX);
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&frame_crc(len, lsn, payload).to_le_bytes());
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(payload);
}

fn frame_crc(len: u32, lsn: Lsn, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&len.to_le_bytes());
    h.update(&lsn.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Calls `on_record` for each good frame of a segment whose first lsn is `first_lsn`, and
/// returns the offset just past the last good frame (= `bytes.len()` if the segment is intact).
fn parse_frames(bytes: &[u8], first_lsn: Lsn, mut on_record: impl FnMut(Lsn, &[u8])) -> usize {
    let mut pos = 0;
    let mut expected_lsn = first_lsn;
    while bytes.len() - pos >= FRAME_HEADER_SIZE {
        let header = &bytes[pos..pos + FRAME_HEADER_SIZE];
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let mut lsn_bytes = [0u8; 8];
        lsn_bytes.copy_from_slice(&header[8..16]);
        let lsn = u64::from_le_bytes(lsn_bytes);
        if len as usize > RECORD_SIZE_MAX || bytes.len() - pos - FRAME_HEADER_SIZE < len as usize {
            break; // Impossible length or truncated payload.
        }
        let payload = &bytes[pos + FRAME_HEADER_SIZE..pos + FRAME_HEADER_SIZE + len as usize];
        // Lsn::MAX cannot be followed by another record: treat it as damage, not as a record.
        if frame_crc(len, lsn, payload) != crc || lsn != expected_lsn || lsn == Lsn::MAX {
            break;
        }
        on_record(lsn, payload);
        pos += FRAME_HEADER_SIZE + len as usize;
        expected_lsn += 1;
    }
    assert!(pos <= bytes.len());
    pos
}

fn segment_file_name(first_lsn: Lsn) -> String {
    format!("wal-{first_lsn:020}.log")
}

fn segment_path(dir: &Path, first_lsn: Lsn) -> PathBuf {
    dir.join(segment_file_name(first_lsn))
}

/// `wal-{20 digits}.log` → its first lsn (never 0). Other names are not segments.
fn parse_segment_name(name: &str) -> Option<Lsn> {
    let digits = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&lsn| lsn > 0)
}

/// First lsns of the segments in `dir`, ascending.
fn list_segments(dir: &Path) -> Result<Vec<Lsn>, StorageError> {
    let mut segments = Vec::new();
    for entry in fs::read_dir(dir).context(|| format!("listing {}", dir.display()))? {
        let entry = entry.context(|| format!("listing {}", dir.display()))?;
        if let Some(lsn) = entry.file_name().to_str().and_then(parse_segment_name) {
            segments.push(lsn);
        }
    }
    segments.sort_unstable();
    Ok(segments)
}

fn read_file(path: &Path) -> Result<Vec<u8>, StorageError> {
    let mut bytes = Vec::new();
    File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)).context(|| format!("reading {}", path.display()))?;
    Ok(bytes)
}

/// Creates an empty segment (replacing any stale file of that name) positioned for appending.
/// The caller syncs the directory.
fn create_segment(dir: &Path, first_lsn: Lsn, policy: FsyncPolicy) -> Result<File, StorageError> {
    let path = segment_path(dir, first_lsn);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .context(|| format!("creating {}", path.display()))?;
    if policy == FsyncPolicy::Always {
        file.sync_all().context(|| format!("syncing new {}", path.display()))?;
    }
    Ok(file)
}

fn remove_segment(dir: &Path, first_lsn: Lsn) -> Result<(), StorageError> {
    let path = segment_path(dir, first_lsn);
    fs::remove_file(&path).context(|| format!("deleting {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: u64) -> Vec<u8> {
        format!("record-{i}").repeat(i as usize % 3 + 1).into_bytes()
    }

    fn open(dir: &Path, after: Lsn) -> (Wal, Vec<(Lsn, Vec<u8>)>) {
        Wal::open(dir, FsyncPolicy::Never, after).unwrap()
    }

    /// Writes records 1..=n in one flush and returns the segment path.
    fn write_records(dir: &Path, n: u64) -> PathBuf {
        let (mut wal, recovered) = open(dir, 0);
        assert!(recovered.is_empty());
        for i in 1..=n {
            assert_eq!(wal.append(&rec(i)).unwrap(), i);
        }
        assert_eq!(wal.flush().unwrap(), n);
        segment_path(dir, 1)
    }

    fn expected(range: std::ops::RangeInclusive<u64>) -> Vec<(Lsn, Vec<u8>)> {
        range.map(|i| (i, rec(i))).collect()
    }

    #[test]
    fn round_trip_and_reopen_continues_lsns() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), FsyncPolicy::Always, 0).unwrap();
        assert_eq!((wal.last_lsn(), wal.durable_lsn()), (0, 0));
        for i in 1..=5 {
            wal.append(&rec(i)).unwrap();
        }
        assert_eq!((wal.last_lsn(), wal.durable_lsn()), (5, 0));
        wal.append(b"").unwrap(); // Empty records are records.
        assert_eq!(wal.flush().unwrap(), 6);
        drop(wal);

        let (mut wal, got) = Wal::open(dir.path(), FsyncPolicy::Always, 0).unwrap();
        let mut want = expected(1..=5);
        want.push((6, vec![]));
        assert_eq!(got, want);
        assert_eq!((wal.last_lsn(), wal.durable_lsn()), (6, 6));
        assert_eq!(wal.append(b"seven").unwrap(), 7);
        wal.flush().unwrap();
        drop(wal);
        let (_, got) = open(dir.path(), 5);
        assert_eq!(got, vec![(6, vec![]), (7, b"seven".to_vec())]);
    }

    #[test]
    fn group_commit_is_one_write_and_one_fsync_per_flush() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), FsyncPolicy::Always, 0).unwrap();
        let payload_bytes: usize = (1..=10).map(|i| rec(i).len()).sum();
        for i in 1..=10 {
            wal.append(&rec(i)).unwrap();
        }
        assert_eq!(wal.bytes_written(), 0, "append only buffers");
        wal.flush().unwrap();
        assert_eq!(wal.fsync_count(), 1);
        assert_eq!(wal.bytes_written(), (payload_bytes + 10 * FRAME_HEADER_SIZE) as u64);
        wal.flush().unwrap();
        assert_eq!(wal.fsync_count(), 1, "nothing new to sync");

        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = open(dir.path(), 0);
        wal.append(b"x").unwrap();
        wal.flush().unwrap();
        assert_eq!((wal.fsync_count(), wal.durable_lsn()), (0, 1), "policy never does not fsync");
    }

    #[test]
    fn torn_tail_at_every_offset_recovers_earlier_records() {
        let src = tempfile::tempdir().unwrap();
        let seg = write_records(src.path(), 3);
        let full = fs::read(&seg).unwrap();
        let last_start = full.len() - FRAME_HEADER_SIZE - rec(3).len();
        for cut in last_start..full.len() {
            let dir = tempfile::tempdir().unwrap();
            fs::write(segment_path(dir.path(), 1), &full[..cut]).unwrap();
            let (mut wal, got) = open(dir.path(), 0);
            assert_eq!(got, expected(1..=2), "cut at {cut}");
            assert_eq!(fs::metadata(segment_path(dir.path(), 1)).unwrap().len(), last_start as u64);
            // The log continues where the good prefix ends.
            assert_eq!(wal.append(b"new").unwrap(), 3);
            wal.flush().unwrap();
            drop(wal);
            let (_, got) = open(dir.path(), 2);
            assert_eq!(got, vec![(3, b"new".to_vec())], "cut at {cut}");
        }
    }

    #[test]
    fn flipped_byte_in_last_frame_cuts_it() {
        let src = tempfile::tempdir().unwrap();
        let seg = write_records(src.path(), 3);
        let full = fs::read(&seg).unwrap();
        let last_start = full.len() - FRAME_HEADER_SIZE - rec(3).len();
        for at in last_start..full.len() {
            let dir = tempfile::tempdir().unwrap();
            let mut bytes = full.clone();
            bytes[at] ^= 0x40;
            fs::write(segment_path(dir.path(), 1), &bytes).unwrap();
            let (_, got) = open(dir.path(), 0);
            assert_eq!(got, expected(1..=2), "byte {at} flipped");
        }
    }

    #[test]
    fn corrupt_middle_frame_ends_the_log_there() {
        let dir = tempfile::tempdir().unwrap();
        let seg = write_records(dir.path(), 4);
        let mut bytes = fs::read(&seg).unwrap();
        let second_payload = 2 * FRAME_HEADER_SIZE + rec(1).len();
        bytes[second_payload] ^= 1;
        fs::write(&seg, &bytes).unwrap();
        let (wal, got) = open(dir.path(), 0);
        assert_eq!(got, expected(1..=1));
        assert_eq!(wal.last_lsn(), 1);
    }

    #[test]
    fn frame_with_good_crc_but_wrong_lsn_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = Vec::new();
        encode_frame(1, b"a", &mut bytes);
        encode_frame(3, b"c", &mut bytes); // lsn 2 is missing
        fs::write(segment_path(dir.path(), 1), &bytes).unwrap();
        let (_, got) = open(dir.path(), 0);
        assert_eq!(got, vec![(1, b"a".to_vec())]);
    }

    #[test]
    fn segment_at_the_end_of_the_lsn_space_does_not_overflow() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = Vec::new();
        encode_frame(Lsn::MAX, b"x", &mut bytes);
        fs::write(segment_path(dir.path(), Lsn::MAX), &bytes).unwrap();
        let (wal, got) = open(dir.path(), Lsn::MAX - 1);
        assert!(got.is_empty());
        assert_eq!(wal.last_lsn(), Lsn::MAX - 1);
    }

    #[test]
    fn oversized_record_is_rejected_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = open(dir.path(), 0);
        wal.append(b"a").unwrap();
        let big = vec![0u8; RECORD_SIZE_MAX + 1];
        assert!(matches!(
            wal.append(&big),
            Err(StorageError::RecordTooLarge { size, limit: RECORD_SIZE_MAX }) if size == RECORD_SIZE_MAX + 1
        ));
        assert_eq!(wal.last_lsn(), 1);
        assert_eq!(wal.append(b"b").unwrap(), 2, "the log is still usable");
        wal.flush().unwrap();
        drop(wal);
        assert_eq!(open(dir.path(), 0).1, vec![(1, b"a".to_vec()), (2, b"b".to_vec())]);
    }

    #[test]
    fn truncate_prefix_then_reopen_returns_only_later_records() {
        let dir = tempfile::tempdir().unwrap();
        write_records(dir.path(), 3);
        let (mut wal, _) = Wal::open(dir.path(), FsyncPolicy::Always, 0).unwrap();
        wal.append(&rec(4)).unwrap(); // Buffered: truncate_prefix flushes it first.
        wal.truncate_prefix(4).unwrap();
        assert_eq!(list_segments(dir.path()).unwrap(), vec![5], "old segment deleted");
        wal.truncate_prefix(4).unwrap();
        assert_eq!(list_segments(dir.path()).unwrap(), vec![5], "an empty active segment is not rotated");
        for i in 5..=6 {
            wal.append(&rec(i)).unwrap();
        }
        wal.flush().unwrap();
        drop(wal);
        let (mut wal, got) = open(dir.path(), 4);
        assert_eq!(got, expected(5..=6));
        // Truncating at an lsn inside the active segment keeps that segment.
        wal.truncate_prefix(5).unwrap();
        assert_eq!(list_segments(dir.path()).unwrap(), vec![5, 7]);
        wal.append(&rec(7)).unwrap();
        wal.flush().unwrap();
        drop(wal);
        assert_eq!(open(dir.path(), 5).1, expected(6..=7));
        // A reader whose snapshot is at 4 still finds lsn 5: segment 5 was kept.
        assert_eq!(open(dir.path(), 4).1, expected(5..=7));
        // But a reader with no snapshot lacks records 1..=4.
        assert!(matches!(Wal::open(dir.path(), FsyncPolicy::Never, 0), Err(StorageError::Corrupt(_))));
    }

    #[test]
    fn open_deletes_segments_left_by_a_crash_in_truncate_prefix() {
        let dir = tempfile::tempdir().unwrap();
        write_records(dir.path(), 3);
        // The new segment was created but the covered one was not deleted yet.
        create_segment(dir.path(), 4, FsyncPolicy::Never).unwrap();
        let (mut wal, got) = open(dir.path(), 3);
        assert!(got.is_empty());
        assert_eq!(list_segments(dir.path()).unwrap(), vec![4]);
        assert_eq!(wal.append(b"x").unwrap(), 4);
    }

    #[test]
    fn log_ending_before_the_snapshot_restarts_after_it() {
        let dir = tempfile::tempdir().unwrap();
        write_records(dir.path(), 3);
        let (mut wal, got) = open(dir.path(), 10);
        assert!(got.is_empty());
        assert_eq!(wal.last_lsn(), 10);
        assert_eq!(wal.append(b"x").unwrap(), 11);
        wal.flush().unwrap();
        drop(wal);
        assert_eq!(list_segments(dir.path()).unwrap(), vec![11]);
        assert_eq!(open(dir.path(), 10).1, vec![(11, b"x".to_vec())]);

        let empty = tempfile::tempdir().unwrap();
        let (wal, _) = open(empty.path(), 7);
        assert_eq!(wal.last_lsn(), 7, "a fresh log behind a snapshot starts after it");
    }

    #[test]
    fn segments_after_a_torn_one_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = open(dir.path(), 0);
        for i in 1..=3 {
            wal.append(&rec(i)).unwrap();
        }
        wal.truncate_prefix(0).unwrap(); // Rotates without deleting anything.
        wal.append(&rec(4)).unwrap();
        wal.flush().unwrap();
        drop(wal);
        assert_eq!(list_segments(dir.path()).unwrap(), vec![1, 4]);
        let seg = segment_path(dir.path(), 1);
        let len = fs::metadata(&seg).unwrap().len();
        OpenOptions::new().write(true).open(&seg).unwrap().set_len(len - 1).unwrap();
        let (mut wal, got) = open(dir.path(), 0);
        assert_eq!(got, expected(1..=2));
        assert_eq!(list_segments(dir.path()).unwrap(), vec![1]);
        assert_eq!(wal.append(b"x").unwrap(), 3);
    }

    #[test]
    fn unrelated_files_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("wal-1.log"), b"junk").unwrap();
        fs::write(dir.path().join("wal-00000000000000000000.log"), b"junk").unwrap();
        fs::write(dir.path().join("snapshot-00000000000000000001.snap"), b"junk").unwrap();
        write_records(dir.path(), 2);
        assert_eq!(open(dir.path(), 0).1, expected(1..=2));
    }

    #[test]
    fn append_spills_a_full_buffer_without_making_it_durable() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = open(dir.path(), 0);
        let chunk = vec![7u8; WRITE_BUFFER_BYTES_MAX / 2];
        wal.append(&chunk).unwrap();
        wal.append(&chunk).unwrap(); // Exceeds the buffer: the first frame is written out.
        assert_eq!(wal.bytes_written(), (FRAME_HEADER_SIZE + chunk.len()) as u64);
        assert_eq!(wal.durable_lsn(), 0);
        assert_eq!(wal.flush().unwrap(), 2);
    }

    #[test]
    fn fsync_policy_parses_and_displays() {
        assert_eq!("always".parse::<FsyncPolicy>().unwrap(), FsyncPolicy::Always);
        assert_eq!("Never".parse::<FsyncPolicy>().unwrap(), FsyncPolicy::Never);
        assert!(matches!("sometimes".parse::<FsyncPolicy>(), Err(InvalidInput::Config(_))));
        for p in [FsyncPolicy::Always, FsyncPolicy::Never] {
            assert_eq!(p.to_string().parse::<FsyncPolicy>().unwrap(), p);
        }
    }

    #[test]
    fn segment_names_round_trip() {
        assert_eq!(parse_segment_name(&segment_file_name(42)), Some(42));
        assert_eq!(parse_segment_name(&segment_file_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_segment_name("wal-0000000000000000004x.log"), None);
        assert_eq!(parse_segment_name("wal-+0000000000000000042.log"), None);
    }
}
