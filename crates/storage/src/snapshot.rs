//! # Snapshot files
//!
//! A snapshot is opaque bytes (the partition's encoded state) covering every WAL record
//! `<= lsn`. It lives in `snapshot-{lsn:020}.snap`, next to the WAL segments.
//!
//! ```text
//!   0          8          16         24     28
//!   ┌──────────┬──────────┬──────────┬──────┬─────────────────────┐
//!   │ magic    │ lsn      │ len      │ crc  │ payload (len bytes) │
//!   │ LTMSNAP1 │ u64 LE   │ u64 LE   │ u32  │                     │
//!   └──────────┴──────────┴──────────┴──────┴─────────────────────┘
//!   crc = CRC-32 (IEEE) of  lsn bytes ++ len bytes ++ payload
//! ```
//!
//! ## Atomic replacement
//!
//! [`write_snapshot`] writes `snapshot-{lsn}.snap.tmp`, fsyncs it, renames it to its final name,
//! fsyncs the directory, and only then deletes older snapshots and stray tmp files. A crash at any
//! point leaves either the old snapshot or the new one intact (plus, maybe, garbage that the next
//! write deletes). Snapshots are always fsynced, whatever the WAL's fsync policy: they are rare,
//! and the WAL segments they replace are deleted on the strength of them.
//!
//! ## Reading
//!
//! [`read_latest_snapshot`] tries snapshots newest first and returns the first intact one: wrong
//! magic, length, checksum, or an lsn that disagrees with the file name make a file *corrupt* and
//! it is skipped. An I/O error other than "not found" is returned: a transient failure must not
//! silently roll the partition back to an older state.

use crate::wal::Lsn;
use crate::{sync_dir, IoContext, StorageError};
use std::fs::{self, File};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

/// First bytes of every snapshot file; the trailing digit is the header format version.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"LTMSNAP1";

/// magic, lsn, len, crc.
pub const SNAPSHOT_HEADER_SIZE: usize = 8 + 8 + 8 + 4;

const TMP_SUFFIX: &str = ".tmp";

/// Atomically writes `bytes` as the snapshot covering WAL records `<= lsn`, then deletes older
/// snapshots. See the module doc.
pub fn write_snapshot(dir: &Path, lsn: Lsn, bytes: &[u8]) -> Result<(), StorageError> {
    fs::create_dir_all(dir).context(|| format!("creating snapshot directory {}", dir.display()))?;
    let final_path = snapshot_path(dir, lsn);
    let tmp_path = dir.join(format!("{}{TMP_SUFFIX}", snapshot_file_name(lsn)));

    let mut file = encode_header(lsn, bytes).to_vec();
    file.extend_from_slice(bytes);
    assert_eq!(file.len(), SNAPSHOT_HEADER_SIZE + bytes.len());
    File::create(&tmp_path)
        .and_then(|mut f| {
            f.write_all(&file)?;
            f.sync_all()
        })
        .context(|| format!("writing {}", tmp_path.display()))?;
    fs::rename(&tmp_path, &final_path)
        .context(|| format!("renaming {} to {}", tmp_path.display(), final_path.display()))?;
    sync_dir(dir)?;

    // The new snapshot is durable: older ones and leftovers of crashed writes are garbage.
    for entry in fs::read_dir(dir).context(|| format!("listing {}", dir.display()))? {
        let entry = entry.context(|| format!("listing {}", dir.display()))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
        let older = parse_snapshot_name(&name).is_some_and(|other| other < lsn);
        let stray_tmp = name.strip_suffix(TMP_SUFFIX).and_then(parse_snapshot_name).is_some();
        if older || stray_tmp {
            let path = entry.path();
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::Io { context: format!("deleting {}", path.display()), source: e }),
            }
        }
    }
    Ok(())
}

/// The newest intact snapshot in `dir` as `(lsn, bytes)`, or `None` if there is none (or `dir`
/// does not exist). Corrupt snapshots are skipped in favour of older intact ones.
pub fn read_latest_snapshot(dir: &Path) -> Result<Option<(Lsn, Vec<u8>)>, StorageError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StorageError::Io { context: format!("listing {}", dir.display()), source: e }),
    };
    let mut lsns = Vec::new();
    for entry in entries {
        let entry = entry.context(|| format!("listing {}", dir.display()))?;
        if let Some(lsn) = entry.file_name().to_str().and_then(parse_snapshot_name) {
            lsns.push(lsn);
        }
    }
    lsns.sort_unstable_by(|a, b| b.cmp(a));
    for lsn in lsns {
        let path = snapshot_path(dir, lsn);
        let mut file = Vec::new();
        match File::open(&path).and_then(|mut f| f.read_to_end(&mut file)) {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(StorageError::Io { context: format!("reading {}", path.display()), source: e }),
        }
        match decode_file(lsn, &file) {
            Ok(payload) => return Ok(Some((lsn, payload.to_vec()))),
            Err(_corrupt) => continue,
        }
    }
    Ok(None)
}

fn encode_header(lsn: Lsn, payload: &[u8]) -> [u8; SNAPSHOT_HEADER_SIZE] {
    let len = payload.len() as u64;
    let mut header = [0u8; SNAPSHOT_HEADER_SIZE];
    header[0..8].copy_from_slice(&SNAPSHOT_MAGIC);
    header[8..16].copy_from_slice(&lsn.to_le_bytes());
    header[16..24].copy_from_slice(&len.to_le_bytes());
    header[24..28].copy_from_slice(&snapshot_crc(lsn, len, payload).to_le_bytes());
    header
}

fn snapshot_crc(lsn: Lsn, len: u64, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&lsn.to_le_bytes());
    h.update(&len.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Checks a whole snapshot file named for `expected_lsn` and returns its payload.
fn decode_file(expected_lsn: Lsn, file: &[u8]) -> Result<&[u8], StorageError> {
    let corrupt = |what: &str| StorageError::Corrupt(format!("snapshot {expected_lsn}: {what}"));
    if file.len() < SNAPSHOT_HEADER_SIZE {
        return Err(corrupt("shorter than its header"));
    }
    let (header, payload) = file.split_at(SNAPSHOT_HEADER_SIZE);
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&header[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let (lsn, len) = (u64_at(8), u64_at(16));
    let crc = u32::from_le_bytes([header[24], header[25], header[26], header[27]]);
    if header[0..8] != SNAPSHOT_MAGIC {
        return Err(corrupt("bad magic"));
    }
    if len != payload.len() as u64 {
        return Err(corrupt("length does not match the file size"));
    }
    if snapshot_crc(lsn, len, payload) != crc {
        return Err(corrupt("checksum mismatch"));
    }
    if lsn != expected_lsn {
        return Err(corrupt("lsn does not match the file name"));
    }
    Ok(payload)
}

fn snapshot_file_name(lsn: Lsn) -> String {
    format!("snapshot-{lsn:020}.snap")
}

fn snapshot_path(dir: &Path, lsn: Lsn) -> PathBuf {
    dir.join(snapshot_file_name(lsn))
}

/// `snapshot-{20 digits}.snap` → its lsn. Other names are not snapshots.
fn parse_snapshot_name(name: &str) -> Option<Lsn> {
    let digits = name.strip_prefix("snapshot-")?.strip_suffix(".snap")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot_files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        names
    }

    #[test]
    fn write_then_read_latest_and_older_ones_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_latest_snapshot(dir.path()).unwrap(), None);
        assert_eq!(read_latest_snapshot(&dir.path().join("missing")).unwrap(), None);
        write_snapshot(dir.path(), 5, b"five").unwrap();
        write_snapshot(dir.path(), 9, b"nine").unwrap();
        assert_eq!(read_latest_snapshot(dir.path()).unwrap(), Some((9, b"nine".to_vec())));
        assert_eq!(snapshot_files(dir.path()), vec![snapshot_file_name(9)]);
        write_snapshot(dir.path(), 9, b"").unwrap();
        assert_eq!(read_latest_snapshot(dir.path()).unwrap(), Some((9, vec![])), "same lsn replaces");
    }

    #[test]
    fn corrupt_newest_snapshot_falls_back_to_an_older_intact_one() {
        let dir = tempfile::tempdir().unwrap();
        write_snapshot(dir.path(), 3, b"three").unwrap();
        // Simulate a crash before the older snapshot was deleted: write 7 by hand.
        let mut file = encode_header(7, b"seven").to_vec();
        file.extend_from_slice(b"seven");
        let newest = snapshot_path(dir.path(), 7);
        for at in 0..file.len() {
            let mut bad = file.clone();
            bad[at] ^= 0x10;
            fs::write(&newest, &bad).unwrap();
            assert_eq!(read_latest_snapshot(dir.path()).unwrap(), Some((3, b"three".to_vec())), "byte {at}");
        }
        for cut in 0..file.len() {
            fs::write(&newest, &file[..cut]).unwrap();
            assert_eq!(read_latest_snapshot(dir.path()).unwrap(), Some((3, b"three".to_vec())), "cut {cut}");
        }
        fs::write(&newest, &file).unwrap();
        assert_eq!(read_latest_snapshot(dir.path()).unwrap(), Some((7, b"seven".to_vec())));
    }

    #[test]
    fn snapshot_renamed_to_another_lsn_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        write_snapshot(dir.path(), 3, b"three").unwrap();
        fs::rename(snapshot_path(dir.path(), 3), snapshot_path(dir.path(), 4)).unwrap();
        assert_eq!(read_latest_snapshot(dir.path()).unwrap(), None);
    }

    #[test]
    fn stray_tmp_files_are_ignored_and_cleaned_up() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join(format!("{}{TMP_SUFFIX}", snapshot_file_name(8)));
        fs::write(&tmp, b"half-written").unwrap();
        fs::write(dir.path().join("wal-00000000000000000001.log"), b"").unwrap();
        assert_eq!(read_latest_snapshot(dir.path()).unwrap(), None);
        write_snapshot(dir.path(), 2, b"two").unwrap();
        assert!(!tmp.exists());
        assert_eq!(
            snapshot_files(dir.path()),
            vec![snapshot_file_name(2), "wal-00000000000000000001.log".to_string()],
            "other files are left alone"
        );
    }
}
