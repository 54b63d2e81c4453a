//! Tests of the lock manager's rules (`lock.rs`), one or more per rule of its module doc.

use super::invariants::acyclic;
use super::*;
use litmus_core::NodeId;
use proptest::prelude::*;
use Access::{RangeRead as RR, Read as R, Write as W};
use LockClass::{Acid, Alkaline, Saline};

const ACID_R: LockMode = LockMode::new(Acid, R);
const ACID_W: LockMode = LockMode::new(Acid, W);
const ACID_RR: LockMode = LockMode::new(Acid, RR);
const ALK_R: LockMode = LockMode::new(Alkaline, R);
const ALK_W: LockMode = LockMode::new(Alkaline, W);
const ALK_RR: LockMode = LockMode::new(Alkaline, RR);
const SAL_R: LockMode = LockMode::new(Saline, R);
const SAL_W: LockMode = LockMode::new(Saline, W);
const TABLE: TableId = TableId(1);

fn txn(n: u64) -> TxnId {
    TxnId { node: NodeId(0), epoch: 0, seq: n }
}

/// Transaction `n` with age `n`: a smaller number is older.
fn owner(n: u64) -> Owner {
    Owner { txn: txn(n), age: n }
}

fn key(k: i64) -> Target {
    Target::Key(Key::ints(&[k]))
}

fn range(start: i64, end: Option<i64>) -> Target {
    Target::Range { start: Key::ints(&[start]), end: end.map(|e| Key::ints(&[e])) }
}

/// `lm.acquire` for txn `n` (age `n`); tests name the token they expect in grants.
fn acq(lm: &mut LockManager, n: u64, target: Target, mode: LockMode, token: u64) -> Decision {
    lm.acquire(owner(n), TABLE, target, mode, token)
}

fn grant(n: u64, token: u64) -> Grant {
    Grant { txn: txn(n), token }
}

/// The invariant checker (run by the property tests and, after every step, by the
/// simulator) fails on a broken lock table: a waiter flipped to held without its grant — two
/// incompatible locks held at once — and a waiter forgotten in the wait index.
#[test]
fn invariant_checker_fails_on_a_skipped_wait_and_a_lost_waiter() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 1, key(1), ACID_W, 1), Decision::Granted);
    assert_eq!(acq(&mut lm, 2, key(1), ACID_W, 2), Decision::Waiting);
    assert_eq!(lm.check_invariants(), Ok(()));
    let mut broken = lm.clone();
    let waiter = *broken.waiting.iter().next().expect("one waiter");
    broken.entries.get_mut(&waiter).expect("entry").state = State::Held;
    broken.waiting.remove(&waiter);
    let e = broken.check_invariants().expect_err("two writers hold the key");
    assert!(e.contains("incompatible"), "{e}");
    let mut lost = lm.clone();
    lost.waiting.clear();
    assert!(lost.check_invariants().is_err(), "a waiter missing from the wait index");
}

/// The index of tainted reads (`LockManager::tainted`) answers `read_taint` and
/// `reads_settled` as the walk of every lock did, and the invariant checker fails when a
/// tainted read is missing from it (then `read_taint` would miss it: a later write
/// elsewhere would not wait for it, LK-6b across partitions).
#[test]
fn tainted_reads_are_indexed_and_the_checker_sees_a_missing_one() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 1, key(1), ALK_W, 1), Decision::Granted);
    lm.downgrade_alkaline(txn(1));
    assert_eq!(acq(&mut lm, 2, key(2), ALK_R, 2), Decision::Granted); // clean read
    assert_eq!(acq(&mut lm, 2, key(1), ALK_R, 3), Decision::Granted); // reads BASE₁'s write
    let g = lm.read_taint(txn(2)).expect("tainted");
    assert_eq!(lm.tainted[&txn(2)].len(), 1, "only the read that depends on a write");
    assert!(!lm.reads_settled(txn(2), g) && lm.reads_settled(txn(2), g - 1));
    assert_eq!(lm.check_invariants(), Ok(()));
    let mut missing = lm.clone();
    missing.tainted.clear();
    let e = missing.check_invariants().expect_err("a tainted read left out of the index");
    assert!(e.contains("tainted read"), "{e}");
    lm.release_all(txn(1));
    assert_eq!(lm.read_taint(txn(2)), None);
    lm.release_all(txn(2));
    assert!(lm.tainted.is_empty(), "the index empties with its locks");
    assert_eq!(lm.check_invariants(), Ok(()));
}

/// LK-4's ordered index of locked keys: built when a table gets its first range lock,
/// kept up to date as point queues come and go, and checked by `check_invariants` — seen
/// to fail with a key missing from it or left in it.
#[test]
fn rule_lk4_ordered_index_follows_the_point_queues_once_a_range_lock_exists() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 1, key(1), ACID_W, 1), Decision::Granted);
    assert!(lm.points.ordered.is_empty(), "no range lock yet: no ordered index");
    // The range request finds key 1's writer by walking the table's queues.
    assert_eq!(acq(&mut lm, 2, range(0, Some(5)), ACID_RR, 2), Decision::Waiting);
    assert_eq!(lm.points.ordered[&TABLE].len(), 1, "built with the range lock");
    assert_eq!(acq(&mut lm, 3, key(3), ACID_W, 3), Decision::Waiting, "behind the range request");
    assert_eq!(acq(&mut lm, 4, key(7), ACID_W, 4), Decision::Granted, "outside the range");
    assert_eq!(lm.points.ordered[&TABLE].len(), 3);
    assert_eq!(lm.check_invariants(), Ok(()));

    let mut missing = lm.clone();
    missing.points.ordered.get_mut(&TABLE).unwrap().remove(&Key::ints(&[3]));
    assert!(missing.check_invariants().is_err(), "a locked key missing from the ordered index");
    let mut stale = lm.clone();
    stale.points.ordered.get_mut(&TABLE).unwrap().insert(Key::ints(&[9]));
    assert!(stale.check_invariants().is_err(), "an unlocked key left in the ordered index");

    assert_eq!(lm.release_all(txn(1)), vec![grant(2, 2)]);
    assert_eq!(lm.release_all(txn(4)), vec![]);
    assert_eq!(lm.points.ordered[&TABLE].len(), 1, "keys leave the index with their queues");
    assert_eq!(lm.release_all(txn(2)), vec![grant(3, 3)]);
    assert_eq!(lm.check_invariants(), Ok(()));
}

// ----- LK-1: Salt Table 2 -----

/// Salt §5.1, Table 2, cell by cell (rows and columns: ACID-R, ACID-W, alka-R, alka-W,
/// saline-R, saline-W).
#[test]
fn rule_lk1_salt_table_2_cell_by_cell() {
    const ORDER: [LockMode; 6] = [ACID_R, ACID_W, ALK_R, ALK_W, SAL_R, SAL_W];
    const TABLE_2: [&str; 6] = [
        "✓ ✗ ✓ ✗ ✓ ✗", //
        "✗ ✗ ✗ ✗ ✗ ✗",
        "✓ ✗ ✓ ✗ ✓ ✓",
        "✗ ✗ ✗ ✗ ✓ ✓",
        "✓ ✗ ✓ ✓ ✓ ✓",
        "✗ ✗ ✓ ✓ ✓ ✓",
    ];
    for (i, row) in TABLE_2.iter().enumerate() {
        let cells: Vec<&str> = row.split(' ').collect();
        assert_eq!(cells.len(), 6);
        for (j, cell) in cells.iter().enumerate() {
            let expected = *cell == "✓";
            assert_eq!(compatible(ORDER[i], ORDER[j]), expected, "held {:?} requested {:?}", ORDER[i], ORDER[j]);
            assert_eq!(compatible(ORDER[j], ORDER[i]), expected, "Table 2 is symmetric");
        }
    }
}

/// LK-1: `RangeRead` behaves as `Read` for compatibility.
#[test]
fn rule_lk1_range_read_behaves_as_read() {
    let all = [ACID_R, ACID_W, ALK_R, ALK_W, SAL_R, SAL_W];
    for m in all {
        for n in all {
            let rr = |x: LockMode| if x.access == R { LockMode::new(x.class, RR) } else { x };
            assert_eq!(compatible(rr(m), n), compatible(m, n));
            assert_eq!(compatible(m, rr(n)), compatible(m, n));
            assert_eq!(compatible(rr(m), rr(n)), compatible(m, n));
        }
    }
}

/// LK-1–LK-2: classes are nested, so a covering lock conflicts with everything the covered
/// request would (a covered request can be granted without a lock of its own).
#[test]
fn rule_lk2_covering_lock_conflicts_with_a_superset() {
    let all = [ACID_R, ACID_W, ACID_RR, ALK_R, ALK_W, ALK_RR, SAL_R, SAL_W, LockMode::new(Saline, RR)];
    for held in all {
        for req in all {
            if !held.covers(req) {
                continue;
            }
            for other in all {
                assert!(compatible(other, req) || !compatible(other, held), "{held:?} covers {req:?}");
            }
        }
    }
    assert!(ACID_W.covers(ACID_R) && ACID_W.covers(ALK_W) && ALK_W.covers(SAL_R));
    assert!(!ACID_R.covers(ACID_W) && !SAL_W.covers(ALK_R) && !ALK_R.covers(ACID_R));
}

// ----- LK-2: re-entrancy and upgrades -----

#[test]
fn rule_lk2_reentrant_request_covered_by_held_lock_is_granted_without_a_new_lock() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 1, key(1), ACID_W, 1), Decision::Granted);
    assert_eq!(acq(&mut lm, 1, key(1), ACID_W, 2), Decision::Granted);
    assert_eq!(acq(&mut lm, 1, key(1), ACID_R, 3), Decision::Granted);
    assert_eq!(lm.lock_count(), 1);
    // Releasing the short-term read the covered request "took" keeps the write.
    assert!(lm.release(txn(1), TABLE, &key(1), ACID_R).is_empty());
    assert_eq!(lm.held(txn(1)), vec![(TABLE, key(1), ACID_W)]);
}

#[test]
fn rule_lk2_upgrade_read_to_write_granted_when_alone() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 1, key(1), ACID_R, 1), Decision::Granted);
    assert_eq!(acq(&mut lm, 1, key(1), ACID_W, 2), Decision::Granted);
    assert_eq!(lm.held(txn(1)), vec![(TABLE, key(1), ACID_R), (TABLE, key(1), ACID_W)]);
}

#[test]
fn rule_lk2_upgrade_waits_for_other_reader_then_is_granted() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 1, key(1), ACID_R, 1), Decision::Granted);
    assert_eq!(acq(&mut lm, 2, key(1), ACID_R, 2), Decision::Granted);
    // Older txn 1 waits for younger txn 2's read lock.
    assert_eq!(acq(&mut lm, 1, key(1), ACID_W, 3), Decision::Waiting);
    assert_eq!(lm.release_all(txn(2)), vec![grant(1, 3)]);
    // Younger txn 2 upgrading against older txn 1 waits too, but impatiently (LK-5a).
    let mut lm = LockManager::new();
    acq(&mut lm, 1, key(1), ACID_R, 1);
    acq(&mut lm, 2, key(1), ACID_R, 2);
    assert_eq!(acq(&mut lm, 2, key(1), ACID_W, 3), Decision::Waiting);
    assert!(lm.impatient(txn(2)));
    assert!(!lm.impatient(txn(1)));
    assert_eq!(lm.release_all(txn(1)), vec![grant(2, 3)]);
    assert!(!lm.impatient(txn(2)), "granted: nothing to wait for");
}

/// LK-2 + 3: an upgrade queues behind an earlier conflicting waiter. The classic upgrade
/// deadlock (both readers upgrade) forms, but only the younger side is impatient: its abort
/// (LK-5a) lets the older upgrade through.
#[test]
fn rule_lk2_upgrade_respects_earlier_conflicting_waiter() {
    let mut lm = LockManager::new();
    acq(&mut lm, 2, key(1), ACID_R, 1);
    acq(&mut lm, 3, key(1), ACID_R, 2);
    assert_eq!(acq(&mut lm, 2, key(1), ACID_W, 3), Decision::Waiting); // 2 waits for 3
    assert_eq!(acq(&mut lm, 3, key(1), ACID_W, 4), Decision::Waiting); // 3 waits for 2
    assert!(lm.impatient(txn(3)));
    assert!(!lm.impatient(txn(2)));
    assert!(lm.cancel_waits(txn(3)).is_empty());
    assert_eq!(lm.release_all(txn(3)), vec![grant(2, 3)]);
}

#[test]
fn rule_lk2_own_locks_never_conflict_with_own_requests() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 5, key(1), ALK_W, 1), Decision::Granted);
    assert_eq!(acq(&mut lm, 5, key(1), ACID_W, 2), Decision::Granted);
    assert_eq!(acq(&mut lm, 5, range(0, None), ACID_RR, 3), Decision::Granted);
    assert_eq!(lm.lock_count(), 3);
}

// ----- LK-3: per-object FIFO -----

/// Salt §6: a reader may not overtake an earlier waiting writer (no writer starvation).
#[test]
fn rule_lk3_reader_queues_behind_earlier_waiting_writer() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 3, key(1), ACID_R, 1), Decision::Granted);
    assert_eq!(acq(&mut lm, 2, key(1), ACID_W, 2), Decision::Waiting);
    assert_eq!(acq(&mut lm, 1, key(1), ACID_R, 3), Decision::Waiting);
    assert_eq!(lm.release_all(txn(3)), vec![grant(2, 2)]);
    assert!(lm.is_waiting(txn(1)));
    assert_eq!(lm.release_all(txn(2)), vec![grant(1, 3)]);
}

/// Salt §6: "BASE transactions cannot cause ACID transactions to starve" — a stream of BASE
/// readers does not pass an ACID writer waiting for saline readers.
#[test]
fn rule_lk3_base_cannot_starve_acid() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 5, key(1), ALK_R, 1), Decision::Granted);
    lm.downgrade_alkaline(txn(5));
    assert_eq!(acq(&mut lm, 2, key(1), ACID_W, 2), Decision::Waiting);
    // Compatible with the saline holder, but behind the waiting ACID writer.
    assert_eq!(acq(&mut lm, 1, key(1), ALK_R, 3), Decision::Waiting);
    // Younger than the ACID writer it queues behind: waits, impatiently (LK-5a).
    assert_eq!(acq(&mut lm, 6, key(1), ALK_R, 4), Decision::Waiting);
    assert!(lm.impatient(txn(6)) && !lm.impatient(txn(1)) && !lm.impatient(txn(2)));
    assert_eq!(lm.release_all(txn(5)), vec![grant(2, 2)]);
    assert_eq!(lm.release_all(txn(2)), vec![grant(1, 3), grant(6, 4)]);
}

/// LK-3: "earlier" is one sequence across point queues and range locks.
#[test]
fn rule_lk3_fifo_is_global_across_keys_and_ranges() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 3, key(5), ACID_W, 1), Decision::Granted);
    assert_eq!(acq(&mut lm, 2, range(0, Some(9)), ACID_RR, 2), Decision::Waiting);
    // Key 7 is free, but the earlier range request covers it.
    assert_eq!(acq(&mut lm, 1, key(7), ACID_W, 3), Decision::Waiting);
    assert_eq!(lm.release_all(txn(3)), vec![grant(2, 2)]);
    assert!(lm.is_waiting(txn(1)));
    assert_eq!(lm.release_all(txn(2)), vec![grant(1, 3)]);
}

#[test]
fn rule_lk3_release_grants_every_waiter_that_now_passes_in_order() {
    let mut lm = LockManager::new();
    acq(&mut lm, 9, key(1), ACID_W, 1);
    assert_eq!(acq(&mut lm, 4, key(1), ACID_R, 2), Decision::Waiting);
    assert_eq!(acq(&mut lm, 3, key(1), ACID_R, 3), Decision::Waiting);
    assert_eq!(acq(&mut lm, 2, key(1), ACID_W, 4), Decision::Waiting);
    assert_eq!(acq(&mut lm, 1, key(1), ACID_R, 5), Decision::Waiting);
    assert_eq!(lm.release_all(txn(9)), vec![grant(4, 2), grant(3, 3)]);
    assert_eq!(lm.waiter_count(), 2);
}

#[test]
fn rule_lk3_cancel_waits_unblocks_requests_queued_behind() {
    let mut lm = LockManager::new();
    acq(&mut lm, 3, key(1), ACID_R, 1);
    assert_eq!(acq(&mut lm, 2, key(1), ACID_W, 2), Decision::Waiting);
    assert_eq!(acq(&mut lm, 1, key(1), ACID_R, 3), Decision::Waiting);
    assert_eq!(lm.cancel_waits(txn(2)), vec![grant(1, 3)]);
    assert!(!lm.is_waiting(txn(2)));
    assert_eq!(lm.held(txn(2)), vec![]);
}

// ----- LK-4: range locks -----

#[test]
fn rule_lk4_target_overlap() {
    assert!(key(3).overlaps(&key(3)) && !key(3).overlaps(&key(4)));
    assert!(range(1, Some(5)).overlaps(&key(1)));
    assert!(range(1, Some(5)).overlaps(&key(4)));
    assert!(!range(1, Some(5)).overlaps(&key(5)), "end is exclusive");
    assert!(!range(1, Some(5)).overlaps(&key(0)));
    assert!(range(1, None).overlaps(&key(i64::MAX)), "unbounded above");
    assert!(range(1, Some(5)).overlaps(&range(4, Some(9))));
    assert!(!range(1, Some(5)).overlaps(&range(5, Some(9))));
    assert!(range(1, None).overlaps(&range(7, None)));
    assert!(!range(3, Some(3)).overlaps(&range(0, None)), "an empty range overlaps nothing");
    assert!(!range(3, Some(3)).overlaps(&key(3)));
}

/// LK-4 (Table 1, serializable: RR ∈ 𝓛): an insert inside a scanned range waits.
#[test]
fn rule_lk4_range_lock_blocks_writes_inside_the_range_no_phantom() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 1, range(10, Some(20)), ACID_RR, 1), Decision::Granted);
    assert_eq!(acq(&mut lm, 2, key(15), ACID_W, 2), Decision::Waiting); // younger writer waits
    assert!(lm.impatient(txn(2)), "... for an older transaction");
    assert_eq!(acq(&mut lm, 2, key(20), ACID_W, 3), Decision::Granted); // outside
    assert_eq!(acq(&mut lm, 2, key(9), ACID_W, 4), Decision::Granted);
    assert_eq!(acq(&mut lm, 2, key(10), ACID_R, 5), Decision::Granted); // reads share
    let mut lm = LockManager::new();
    acq(&mut lm, 2, range(10, None), ACID_RR, 1);
    assert_eq!(acq(&mut lm, 1, key(1_000), ACID_W, 2), Decision::Waiting); // older writer waits
    assert_eq!(lm.release_all(txn(2)), vec![grant(1, 2)]);
}

/// LK-4a: a serializable scan's page locks, each starting where the last ended, merge into one
/// range lock, so a scan of any number of pages holds one lock per table (one lock per page
/// would meet `RANGE_QUEUE_LEN_MAX` and die); the merged lock keeps out writes anywhere in the
/// pages read; a page that does not touch the lock, or that another transaction's write
/// blocks, gets a lock of its own (or waits) as before.
#[test]
fn rule_lk4a_a_scans_adjacent_page_locks_merge_into_one_range_lock() {
    let mut lm = LockManager::new();
    let pages = RANGE_QUEUE_LEN_MAX as i64 * 2;
    for p in 0..pages {
        assert_eq!(acq(&mut lm, 1, range(p * 10, Some(p * 10 + 10)), ACID_RR, p as u64), Decision::Granted, "page {p}");
    }
    assert_eq!(lm.queue_len(TableId(1), &range(0, None)), 1, "one range lock");
    assert_eq!(acq(&mut lm, 2, key(5), ACID_W, 100_000), Decision::Waiting, "the first page is still locked");
    assert_eq!(acq(&mut lm, 3, key(pages * 10 - 1), ACID_W, 100_001), Decision::Waiting, "and the last");
    assert_eq!(acq(&mut lm, 4, key(pages * 10), ACID_W, 100_002), Decision::Granted, "past the last page");
    // A gap: its own lock. Blocked by another's write: it waits, unmerged.
    assert_eq!(acq(&mut lm, 1, range(pages * 10 + 5, Some(pages * 10 + 9)), ACID_RR, 100_003), Decision::Granted);
    assert_eq!(lm.queue_len(TableId(1), &range(0, None)), 2);
    assert_eq!(acq(&mut lm, 1, range(pages * 10, Some(pages * 10 + 5)), ACID_RR, 100_004), Decision::Waiting);
    assert_eq!(lm.release_all(txn(1)).len(), 2, "the two waiting writers get their locks");
}

/// LK-4 + 1: range locks follow the class rules (a BASE scan does not block saline writes;
/// an ACID scan blocks them; an alkaline write waits for a held range).
#[test]
fn rule_lk4_range_locks_follow_table_2() {
    let mut lm = LockManager::new();
    acq(&mut lm, 2, key(5), ALK_W, 1);
    lm.downgrade_alkaline(txn(2)); // saline W on 5
    assert_eq!(acq(&mut lm, 3, range(0, Some(9)), ALK_RR, 2), Decision::Granted);
    assert_eq!(acq(&mut lm, 4, range(0, Some(9)), ACID_RR, 3), Decision::Waiting); // blocked by txn 2
    assert!(lm.impatient(txn(4)));
    assert_eq!(acq(&mut lm, 1, range(0, Some(9)), ACID_RR, 4), Decision::Waiting);
    assert!(!lm.impatient(txn(1)));
    assert_eq!(acq(&mut lm, 5, key(6), ALK_W, 5), Decision::Waiting); // alkaline range of txn 3
    assert!(lm.impatient(txn(5)));
    assert_eq!(lm.release_all(txn(3)), vec![], "txn 5 also queues behind the ACID range reads");
}

#[test]
#[should_panic(expected = "range targets are for RangeRead locks only")]
fn rule_lk4_point_mode_on_range_target_is_a_bug() {
    LockManager::new().acquire(owner(1), TABLE, range(0, None), ACID_W, 1);
}

// ----- LK-5: wait-die with patience -----

/// LK-5a: younger and older requesters both wait; only the younger one is impatient
/// (it waits for an older transaction), and it stays so while the older holder holds.
#[test]
fn rule_lk5_younger_waits_impatiently_older_waits_patiently() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 5, key(1), ACID_W, 1), Decision::Granted);
    assert_eq!(acq(&mut lm, 7, key(1), ACID_R, 2), Decision::Waiting);
    assert!(lm.impatient(txn(7)));
    assert_eq!(acq(&mut lm, 3, key(1), ACID_R, 3), Decision::Waiting);
    assert!(!lm.impatient(txn(3)), "3 waits only for younger 5 (and not for queued reader 7)");
    assert!(!lm.impatient(txn(5)), "not waiting");
    // The holder finishes within the patience: both readers are granted, no one died.
    assert_eq!(lm.release_all(txn(5)), vec![grant(7, 2), grant(3, 3)]);
    assert!(!lm.impatient(txn(7)));
    assert_eq!(Decision::Die.abort_reason(), Some(AbortReason::Deadlock));
    assert_eq!(Decision::Waiting.abort_reason(), None);
}

/// LK-5c: a deadlock closed in one lock table is found when its last wait begins, and the
/// victim is the youngest transaction waiting for an older one on the cycle — whichever
/// request closed it. No cycle, no victim; a victim the caller may not abort is skipped.
#[test]
fn rule_lk5c_local_deadlock_victim_is_the_youngest_impatient_member() {
    for older_closes in [false, true] {
        let mut lm = LockManager::new();
        acq(&mut lm, 3, key(1), ACID_W, 1);
        acq(&mut lm, 8, key(2), ACID_W, 2);
        let all = |_: TxnId| true;
        if older_closes {
            assert_eq!(acq(&mut lm, 8, key(1), ACID_W, 3), Decision::Waiting);
            assert_eq!(lm.deadlock_victim(txn(8), all), None, "8 → 3 only: no cycle yet");
            assert_eq!(acq(&mut lm, 3, key(2), ACID_W, 4), Decision::Waiting);
            assert_eq!(lm.deadlock_victim(txn(3), all), Some(txn(8)), "3 closed it; 8 waits for older 3");
        } else {
            assert_eq!(acq(&mut lm, 3, key(2), ACID_W, 3), Decision::Waiting);
            assert_eq!(lm.deadlock_victim(txn(3), all), None, "3 → 8 only: no cycle yet");
            assert_eq!(acq(&mut lm, 8, key(1), ACID_W, 4), Decision::Waiting);
            assert_eq!(lm.deadlock_victim(txn(8), all), Some(txn(8)));
        }
        assert_eq!(lm.deadlock_victim(txn(8), |t| t != txn(8)), None, "the only impatient member is spared");
    }
}

/// LK-5c on three-member cycles (each holds one key and waits for the next one's): in
/// 2 → 6 → 9 → 2 only 9 → 2 goes to an older transaction, so 9 is the victim; in
/// 2 → 9 → 6 → 2 both 9 → 6 and 6 → 2 do, and the younger of 9 and 6 is the victim. The
/// search finds the same victim from every member.
#[test]
fn rule_lk5c_longer_cycles_pick_the_youngest_impatient_member() {
    for (order, victim) in [([2, 6, 9], 9), ([2, 9, 6], 9)] {
        let mut lm = LockManager::new();
        for (i, n) in order.iter().enumerate() {
            acq(&mut lm, *n, key(i as i64), ACID_W, i as u64);
        }
        for (i, n) in order.iter().enumerate() {
            let next = key(((i + 1) % order.len()) as i64);
            assert_eq!(acq(&mut lm, *n, next, ACID_W, 10 + i as u64), Decision::Waiting);
        }
        let last = order[order.len() - 1];
        assert_eq!(lm.deadlock_victim(txn(last), |_| true), Some(txn(victim)), "{order:?}");
        for n in order {
            assert_eq!(lm.deadlock_victim(txn(n), |_| true), Some(txn(victim)), "searched from {n}");
        }
    }
}

/// LK-5a: an impatient requester becomes patient when the older transactions it waits
/// for are gone (its waits-for set only shrinks), and then waits like any older requester.
#[test]
fn rule_lk5_impatience_ends_when_the_older_blocker_goes() {
    let mut lm = LockManager::new();
    acq(&mut lm, 2, key(1), ACID_R, 1);
    acq(&mut lm, 9, key(1), ACID_R, 2);
    assert_eq!(acq(&mut lm, 5, key(1), ACID_W, 3), Decision::Waiting);
    assert!(lm.impatient(txn(5)), "waits for older 2");
    assert!(lm.release_all(txn(2)).is_empty(), "still blocked by 9");
    assert!(!lm.impatient(txn(5)), "waits only for younger 9 now");
    assert_eq!(lm.release_all(txn(9)), vec![grant(5, 3)]);
}

/// LK-5: aborting an impatient requester (what the partition does after the patience)
/// leaves the locks as they were, and a retry keeps its age.
#[test]
fn rule_lk5_impatient_abort_changes_nothing_and_retry_keeps_age() {
    let mut lm = LockManager::new();
    acq(&mut lm, 5, key(1), ACID_W, 1);
    let before = lm.entries.clone();
    assert_eq!(lm.acquire(Owner { txn: txn(70), age: 7 }, TABLE, key(1), ACID_R, 2), Decision::Waiting);
    assert!(lm.impatient(txn(70)));
    assert!(lm.cancel_waits(txn(70)).is_empty());
    assert!(lm.release_all(txn(70)).is_empty());
    assert_eq!(lm.entries, before);
    assert!(!lm.impatient(txn(70)), "no waiting request");
    lm.release_all(txn(5));
    acq(&mut lm, 9, key(1), ACID_W, 3);
    // The retry (new id, same age 7) is now older than the holder: it waits patiently.
    assert_eq!(lm.acquire(Owner { txn: txn(71), age: 7 }, TABLE, key(1), ACID_R, 4), Decision::Waiting);
    assert!(!lm.impatient(txn(71)));
}

/// LK-5 (ties): equal ages are ordered by `TxnId`.
#[test]
fn rule_lk5_equal_ages_are_ordered_by_txn_id() {
    let mut lm = LockManager::new();
    lm.acquire(Owner { txn: txn(2), age: 1 }, TABLE, key(1), ACID_W, 1);
    assert_eq!(lm.acquire(Owner { txn: txn(3), age: 1 }, TABLE, key(1), ACID_W, 2), Decision::Waiting);
    assert!(lm.impatient(txn(3)));
    assert_eq!(lm.acquire(Owner { txn: txn(1), age: 1 }, TABLE, key(1), ACID_W, 3), Decision::Waiting);
    assert!(!lm.impatient(txn(1)));
}

/// LK-5 + 6: an ACID request blocked by a lock whose release waits for an older
/// transaction waits for that transaction too, so it is impatient. Without this, BASE₁
/// (age 1) could wait for ACID (age 3) holding z while ACID waits for BASE₂'s releasing
/// lock on y, which waits for BASE₁: a deadlock LK-5 would not see. A request that would
/// so wait for its own transaction dies at once.
#[test]
fn rule_lk5_wait_die_counts_release_order_dependencies() {
    let mut lm = LockManager::new();
    acq(&mut lm, 1, key(1), ALK_W, 1); // BASE₁ writes x
    lm.downgrade_alkaline(txn(1));
    acq(&mut lm, 5, key(1), ALK_R, 2); // BASE₂ reads x (LK-6a)
    acq(&mut lm, 5, key(2), ALK_W, 3); // and writes y (LK-6b)
    lm.downgrade_alkaline(txn(5));
    assert!(lm.release_all(txn(5)).is_empty());
    assert_eq!(lm.releasing(txn(5)).len(), 2);
    // BASE₁ itself reading y would wait for its own write on x: it dies, changing nothing.
    let before = lm.clone();
    assert_eq!(acq(&mut lm, 1, key(2), ACID_R, 6), Decision::Die);
    assert_eq!(lm, before);
    // ACID (age 3) is older than BASE₂ but younger than BASE₁, whom it would wait for.
    assert_eq!(acq(&mut lm, 3, key(2), ACID_R, 4), Decision::Waiting);
    assert!(lm.impatient(txn(3)));
    assert_eq!(acq(&mut lm, 0, key(2), ACID_R, 5), Decision::Waiting);
    assert!(!lm.impatient(txn(0)));
    assert_eq!(lm.release_all(txn(1)), vec![grant(3, 4), grant(0, 5)]);
}

/// LK-5: a queued request's future dependencies count too. BASE 5's range read waits
/// (behind BASE 7's alkaline write); when granted it will depend on BASE 1's saline write
/// inside the range (LK-6a). ACID 3 writing another key of the range queues behind the
/// range read, so it would wait for BASE 1, which is older: it is impatient; ACID 0 is not.
#[test]
fn rule_lk5_wait_die_counts_dependencies_of_queued_readers() {
    let mut lm = LockManager::new();
    acq(&mut lm, 1, key(5), ALK_W, 1);
    lm.downgrade_alkaline(txn(1)); // saline W(5) of BASE 1
    acq(&mut lm, 7, key(6), ALK_W, 2);
    assert_eq!(acq(&mut lm, 5, range(0, Some(9)), ALK_RR, 3), Decision::Waiting);
    assert_eq!(acq(&mut lm, 3, key(7), ACID_W, 4), Decision::Waiting);
    assert!(lm.impatient(txn(3)));
    assert_eq!(acq(&mut lm, 0, key(7), ACID_W, 5), Decision::Waiting);
    assert!(!lm.impatient(txn(0)));
}

#[test]
fn rule_lk5_limits_make_the_requester_die() {
    let mut lm = LockManager::new();
    for n in 0..OBJECT_QUEUE_LEN_MAX as u64 {
        assert_eq!(acq(&mut lm, 10 + n, key(1), ACID_R, n), Decision::Granted);
    }
    assert_eq!(acq(&mut lm, 1, key(1), ACID_R, 9_999), Decision::Die);
    assert_eq!(acq(&mut lm, 1, key(2), ACID_R, 9_999), Decision::Granted);
}

// ----- LK-6: saline release order -----

/// LK-6a: a BASE reader of a BASE write keeps its lock until the writer releases.
#[test]
fn rule_lk6a_read_after_write_reader_released_after_writer() {
    let mut lm = LockManager::new();
    acq(&mut lm, 1, key(1), ALK_W, 1);
    lm.downgrade_alkaline(txn(1));
    assert_eq!(acq(&mut lm, 2, key(1), ALK_R, 2), Decision::Granted);
    lm.downgrade_alkaline(txn(2));
    lm.release_all(txn(2));
    assert_eq!(lm.releasing(txn(2)), vec![(TABLE, key(1), SAL_R)]);
    lm.release_all(txn(1));
    assert_eq!(lm.lock_count(), 0);
}

/// LK-6a under read-committed: a short-term read of a dirty value becomes a releasing
/// saline lock instead of going away.
#[test]
fn rule_lk6a_short_term_read_of_base_write_stays_as_saline() {
    let mut lm = LockManager::new();
    acq(&mut lm, 1, key(1), ALK_W, 1);
    lm.downgrade_alkaline(txn(1));
    acq(&mut lm, 2, key(1), ALK_R, 2);
    lm.release(txn(2), TABLE, &key(1), ALK_R);
    assert_eq!(lm.releasing(txn(2)), vec![(TABLE, key(1), SAL_R)]);
    // A short-term read with nothing to depend on goes away at once.
    acq(&mut lm, 3, key(2), ALK_R, 3);
    lm.release(txn(3), TABLE, &key(2), ALK_R);
    assert_eq!(lm.held(txn(3)), vec![]);
}

/// LK-6a: saline writes are compatible, so a reader may depend on two writers at once
/// (why one "most recent" pointer is not enough), and a range read on writers of many keys.
#[test]
fn rule_lk6a_reader_depends_on_every_base_writer() {
    let mut lm = LockManager::new();
    for n in [1, 2] {
        assert_eq!(acq(&mut lm, n, key(1), ALK_W, n), Decision::Granted);
        lm.downgrade_alkaline(txn(n));
    }
    acq(&mut lm, 3, key(5), ALK_W, 3);
    lm.downgrade_alkaline(txn(3));
    acq(&mut lm, 4, key(1), ALK_R, 4);
    acq(&mut lm, 5, range(0, None), ALK_RR, 5);
    lm.release_all(txn(4));
    lm.release_all(txn(5));
    lm.release_all(txn(2));
    lm.release_all(txn(3));
    assert_eq!(lm.releasing(txn(4)).len(), 1, "still waits for writer 1");
    assert_eq!(lm.releasing(txn(5)).len(), 1, "still waits for writer 1");
    lm.release_all(txn(1));
    assert_eq!(lm.lock_count(), 0);
}

/// LK-6b: a BASE write is released only after the reads that the txn requested before it.
#[test]
fn rule_lk6b_write_after_read_released_after_earlier_reads() {
    let mut lm = LockManager::new();
    acq(&mut lm, 1, key(1), ALK_W, 1);
    lm.downgrade_alkaline(txn(1));
    acq(&mut lm, 2, key(1), ALK_R, 2); // depends on 1 (LK-6a)
    acq(&mut lm, 2, key(2), ALK_W, 3); // depends on the read (LK-6b)
    acq(&mut lm, 2, key(3), ALK_R, 4); // a later read: no dependency of the write
    lm.downgrade_alkaline(txn(2));
    lm.release_all(txn(2));
    assert_eq!(lm.releasing(txn(2)), vec![(TABLE, key(1), SAL_R), (TABLE, key(2), SAL_W)]);
    lm.release_all(txn(1));
    assert_eq!(lm.lock_count(), 0);
}

/// LK-6b does not hold back writes whose earlier reads saw nothing dirty.
#[test]
fn rule_lk6b_clean_reads_release_with_their_writes() {
    let mut lm = LockManager::new();
    acq(&mut lm, 2, key(1), ALK_R, 1);
    acq(&mut lm, 2, key(2), ALK_W, 2);
    lm.downgrade_alkaline(txn(2));
    assert!(lm.release_all(txn(2)).is_empty());
    assert_eq!(lm.lock_count(), 0);
}

/// LK-6: ACID locks are never held back.
#[test]
fn rule_lk6_acid_locks_are_released_at_once() {
    let mut lm = LockManager::new();
    acq(&mut lm, 1, key(1), ACID_R, 1);
    acq(&mut lm, 1, key(2), ACID_W, 2);
    lm.release_all(txn(1));
    assert_eq!(lm.lock_count(), 0);
}

/// Salt Fig. 4: the indirect dirty read that a naive Salt would allow — BASE₁ writes x,
/// BASE₂ reads x and writes y (both compatible: BASE transactions see each other), BASE₂
/// ends; ACID₁ then reads y. Fig. 5: with LK-6, ACID₁'s read of y is granted only when
/// BASE₁ releases x.
#[test]
fn fig4_fig5_indirect_dirty_read_is_prevented() {
    let (base1, base2, acid1) = (3, 2, 1);
    let (x, y) = (key(1), key(2));
    let mut lm = LockManager::new();
    // Fig. 4: w(x) by BASE₁ in alkaline₁, committed (saline).
    assert_eq!(acq(&mut lm, base1, x.clone(), ALK_W, 10), Decision::Granted);
    assert!(lm.downgrade_alkaline(txn(base1)).is_empty());
    // BASE₂: r(x) w(y) — its reads see BASE₁'s committed alkaline state.
    assert_eq!(acq(&mut lm, base2, x.clone(), ALK_R, 20), Decision::Granted);
    assert_eq!(acq(&mut lm, base2, y.clone(), ALK_W, 21), Decision::Granted);
    lm.downgrade_alkaline(txn(base2));
    // BASE₂ ends first.
    assert!(lm.release_all(txn(base2)).is_empty());
    // Fig. 5: BASE₂ cannot release its lock on x before BASE₁ commits, nor its lock on y
    // before its lock on x.
    assert_eq!(lm.releasing(txn(base2)), vec![(TABLE, x.clone(), SAL_R), (TABLE, y.clone(), SAL_W)]);
    // ACID₁ reads y: blocked by BASE₂'s (releasing) saline write lock.
    assert_eq!(acq(&mut lm, acid1, y.clone(), ACID_R, 30), Decision::Waiting);
    // BASE₁ commits: the cascade frees x (BASE₂), then y (BASE₂), then grants ACID₁.
    assert_eq!(lm.release_all(txn(base1)), vec![grant(acid1, 30)]);
    assert_eq!(lm.held(txn(base2)), vec![]);
    assert_eq!(lm.held(txn(acid1)), vec![(TABLE, y, ACID_R)]);
}

// ----- Salt Fig. 3 -----

/// Fig. 3(a): BASE waits until ACID commits.
#[test]
fn fig3a_base_waits_until_acid_commits() {
    let (base, acid) = (1, 2);
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, acid, key(1), ACID_W, 1), Decision::Granted);
    assert_eq!(acq(&mut lm, base, key(1), ALK_W, 2), Decision::Waiting);
    assert_eq!(lm.release_all(txn(acid)), vec![grant(base, 2)]);
}

/// Fig. 3(b): BASE₂ waits only for alkaline₁ (until BASE₁'s downgrade), not for BASE₁.
#[test]
fn fig3b_base2_waits_only_for_alkaline1() {
    let (base1, base2) = (2, 1);
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, base1, key(1), ALK_W, 1), Decision::Granted);
    assert_eq!(acq(&mut lm, base2, key(1), ALK_W, 2), Decision::Waiting);
    assert_eq!(lm.downgrade_alkaline(txn(base1)), vec![grant(base2, 2)]);
    assert_eq!(lm.held(txn(base1)), vec![(TABLE, key(1), SAL_W)]);
}

/// Fig. 3(c): ACID must wait the whole BASE transaction out.
#[test]
fn fig3c_acid_waits_for_the_whole_base_transaction() {
    let (acid, base) = (1, 2);
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, base, key(1), ALK_W, 1), Decision::Granted);
    assert_eq!(acq(&mut lm, acid, key(1), ACID_R, 2), Decision::Waiting);
    assert!(lm.downgrade_alkaline(txn(base)).is_empty(), "alkaline₁ commits: still saline");
    assert_eq!(acq(&mut lm, base, key(2), ALK_W, 3), Decision::Granted); // alkaline₂
    assert!(lm.downgrade_alkaline(txn(base)).is_empty());
    assert_eq!(lm.release_all(txn(base)), vec![grant(acid, 2)]);
}

// ----- engine-facing calls -----

#[test]
fn release_non_saline_keeps_saline_locks() {
    let mut lm = LockManager::new();
    acq(&mut lm, 1, key(1), ALK_W, 1);
    lm.downgrade_alkaline(txn(1)); // alkaline₁ committed
    acq(&mut lm, 1, key(2), ALK_W, 2); // alkaline₂ …
    acq(&mut lm, 1, key(3), ALK_R, 3);
    lm.release_non_saline(txn(1)); // … aborts
    assert_eq!(lm.held(txn(1)), vec![(TABLE, key(1), SAL_W)]);
}

#[test]
fn downgrade_lets_alkaline_requests_pass_but_not_acid() {
    let mut lm = LockManager::new();
    acq(&mut lm, 3, key(1), ALK_W, 1);
    assert_eq!(acq(&mut lm, 1, key(1), ACID_R, 2), Decision::Waiting);
    assert_eq!(acq(&mut lm, 2, key(1), ALK_R, 3), Decision::Waiting);
    // The ACID reader stays blocked; the alkaline reader (not in conflict with the queued
    // ACID reader) now passes, and depends on the saline write it reads (LK-6a).
    assert_eq!(lm.downgrade_alkaline(txn(3)), vec![grant(2, 3)]);
    assert!(lm.is_waiting(txn(1)));
    assert_eq!(lm.release_all(txn(3)), vec![grant(1, 2)]);
}

#[test]
fn release_all_drops_waiting_requests() {
    let mut lm = LockManager::new();
    acq(&mut lm, 2, key(1), ACID_W, 1);
    assert_eq!(acq(&mut lm, 1, key(1), ACID_W, 2), Decision::Waiting);
    assert!(lm.release_all(txn(1)).is_empty());
    assert_eq!(lm.waiter_count(), 0);
    assert_eq!(lm.lock_count(), 1);
}

// ----- LK-8: invariants under random operations -----

const SLOTS: u64 = 4;

#[derive(Clone, Debug)]
enum Op {
    Acquire { slot: u64, target: Target, class: LockClass, write: bool, cols: ColMask },
    Release { slot: u64, pick: usize },
    Downgrade { slot: u64 },
    ReleaseNonSaline { slot: u64 },
    ReleaseAll { slot: u64 },
    CancelWaits { slot: u64 },
}

/// Random calls over 4 transaction slots (ages 0–3), 4 keys and small ranges of one table.
/// Odd slots mostly take ACID locks, even ones mostly BASE locks; each mixes in the others.
fn op() -> impl Strategy<Value = Op> {
    let target = || {
        prop_oneof![
            2 => (0i64..4).prop_map(key),
            1 => (0i64..4, proptest::option::of(1i64..3)).prop_map(|(s, len)| range(s, len.map(|l| s + l))),
        ]
    };
    let acquire = (0..SLOTS).prop_flat_map(move |slot| {
        let class = if slot % 2 == 1 {
            prop_oneof![6 => Just(Acid), 1 => Just(Alkaline), 1 => Just(Saline)].boxed()
        } else {
            prop_oneof![1 => Just(Acid), 6 => Just(Alkaline), 1 => Just(Saline)].boxed()
        };
        // BASE locks name a few columns of two (LK-6a per column); ACID ones every column.
        let cols = prop_oneof![2 => Just(ColMask::ALL), 1 => Just(ColMask::of([0])), 1 => Just(ColMask::of([1]))];
        (Just(slot), target(), class, any::<bool>(), cols).prop_map(|(slot, target, class, write, cols)| {
            let cols = if class == Acid { ColMask::ALL } else { cols };
            Op::Acquire { slot, target, class, write, cols }
        })
    });
    let slot = 0..SLOTS;
    prop_oneof![
        8 => acquire,
        2 => (slot.clone(), 0usize..8).prop_map(|(slot, pick)| Op::Release { slot, pick }),
        2 => slot.clone().prop_map(|slot| Op::Downgrade { slot }),
        1 => slot.clone().prop_map(|slot| Op::ReleaseNonSaline { slot }),
        2 => slot.clone().prop_map(|slot| Op::ReleaseAll { slot }),
        1 => slot.prop_map(|slot| Op::CancelWaits { slot }),
    ]
}

fn check_invariants(lm: &LockManager) -> Result<(), TestCaseError> {
    lm.check_invariants().map_err(TestCaseError::fail)
}

#[test]
fn rule_lk5_cycle_check_detects_cycles() {
    let mut g = BTreeMap::new();
    g.insert(txn(1), BTreeSet::from([txn(2)]));
    assert!(acyclic(&g));
    g.insert(txn(2), BTreeSet::from([txn(1)]));
    assert!(!acyclic(&g));
}

/// A change to a persisted set of held locks, for the `LockDelta` property test.
#[derive(Clone, Debug)]
enum SetChange {
    /// A new lock (the next grant number), at a position of the acquisition order.
    Take { at: usize, write: bool },
    /// A lock goes away (a held-back short-term lock freed).
    Free { pick: usize },
    /// A lock's remote dependency settles (`after` shrinks).
    Settle { pick: usize },
    /// The owner persists its locks: a `LockDelta` against what it persisted before.
    Persist,
}

fn set_change() -> impl Strategy<Value = SetChange> {
    prop_oneof![
        4 => (0usize..16, any::<bool>()).prop_map(|(at, write)| SetChange::Take { at, write }),
        1 => (0usize..16).prop_map(|pick| SetChange::Free { pick }),
        1 => (0usize..16).prop_map(|pick| SetChange::Settle { pick }),
        3 => Just(SetChange::Persist),
    ]
}

/// The access a generated `Op::Acquire` asks for: a range is a range read.
fn access_of(target: &Target, write: bool) -> Access {
    match (target, write) {
        (Target::Range { .. }, _) => RR,
        (Target::Key(_), true) => W,
        (Target::Key(_), false) => R,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `Record::Locked`: folding every `LockDelta` in order rebuilds exactly the set the last
    /// one was taken from — new locks, freed ones and ones whose `after` changed after they
    /// were persisted — and a delta lists only what changed.
    #[test]
    fn lock_delta_folds_to_the_set_it_was_taken_from(changes in proptest::collection::vec(set_change(), 1..80)) {
        let mut now: Vec<HeldLock> = Vec::new();
        let mut logged: Vec<HeldLock> = Vec::new();
        let mut granted = 1u64 << 40;
        for change in changes.into_iter().chain([SetChange::Persist]) {
            match change {
                SetChange::Take { at, write } => {
                    granted += 1;
                    let after = if write { vec![RemoteDep { part: PartitionId(1), upto: granted }] } else { vec![] };
                    let mode = if write { ALK_W } else { SAL_R };
                    let lock = HeldLock { table: TABLE, target: key(granted as i64 % 7), mode, granted, after };
                    now.insert(at.min(now.len()), lock);
                }
                SetChange::Free { pick } if !now.is_empty() => {
                    now.remove(pick % now.len());
                }
                SetChange::Settle { pick } if !now.is_empty() => {
                    let n = now.len();
                    now[pick % n].after.clear();
                }
                SetChange::Persist => {
                    let delta = LockDelta::between(&logged, now.iter().map(HeldLockView::from));
                    for a in &delta.added {
                        prop_assert!(!logged.contains(a), "{a:?} was persisted already, unchanged");
                    }
                    for d in &delta.dropped {
                        prop_assert!(!now.iter().any(|l| l.granted == *d), "{d} is still held");
                    }
                    delta.apply_to(&mut logged);
                    let mut want = now.clone();
                    want.sort_by_key(|l| l.granted);
                    prop_assert_eq!(&logged, &want);
                }
                _ => {}
            }
        }
    }

    /// `LockManager::track_changes`: after any sequence of calls, the delta computed from the
    /// tracked changes alone (`delta_of_changes`) folds, onto what was persisted before, to
    /// every lock the transaction holds — granted, downgraded, releasing, settled, freed —
    /// as `LockDelta::between`'s walk of all of them does; and an ended transaction that
    /// loses its last held-back lock is named by `take_freed_releasing`.
    #[test]
    fn tracked_changes_fold_to_the_held_set(
        ops in proptest::collection::vec(
            prop_oneof![
                6 => op().prop_map(Some),
                1 => Just(None), // LK-6b: a remote read set settles
            ],
            1..80,
        )
    ) {
        let mut lm = LockManager::new();
        let mut incarnation = [0u64; SLOTS as usize];
        let txn_of = |slot: u64, inc: &[u64; SLOTS as usize]| txn(slot * 1_000 + inc[slot as usize]);
        let dep = RemoteDep { part: P1, upto: 7 };
        let mut logged: BTreeMap<TxnId, Vec<HeldLock>> = BTreeMap::new();
        let mut ended: BTreeSet<TxnId> = BTreeSet::new(); // ended, locks held back
        let mut token = 0u64;
        for slot in 0..SLOTS {
            lm.track_changes(txn_of(slot, &incarnation));
            logged.insert(txn_of(slot, &incarnation), Vec::new());
        }
        for op in ops {
            match op {
                None => {
                    for slot in 0..SLOTS {
                        lm.remote_settled(txn_of(slot, &incarnation), dep);
                    }
                }
                Some(Op::Acquire { slot, target, class, write, cols }) => {
                    let t = txn_of(slot, &incarnation);
                    let access = access_of(&target, write);
                    token += 1;
                    // Even slots' BASE writes wait for a remote read set (LK-6b).
                    let after = if slot % 2 == 0 { vec![dep] } else { vec![] };
                    let mode = LockMode::new(class, access).on(cols);
                    lm.acquire_after(Owner { txn: t, age: slot }, TABLE, target, mode, token, &after);
                }
                Some(Op::Release { slot, pick }) => {
                    let t = txn_of(slot, &incarnation);
                    let held: Vec<_> = lm.held(t).into_iter().filter(|h| !lm.releasing(t).contains(h)).collect();
                    if let Some((table, target, mode)) = held.get(pick) {
                        lm.release(t, *table, target, *mode);
                    }
                }
                Some(Op::Downgrade { slot }) => { lm.downgrade_alkaline(txn_of(slot, &incarnation)); }
                Some(Op::ReleaseNonSaline { slot }) => { lm.release_non_saline(txn_of(slot, &incarnation)); }
                Some(Op::ReleaseAll { slot }) => {
                    let t = txn_of(slot, &incarnation);
                    lm.release_all(t);
                    lm.untrack(t);
                    logged.remove(&t);
                    if lm.holds_any(t) {
                        ended.insert(t);
                    }
                    incarnation[slot as usize] += 1;
                    let next = txn_of(slot, &incarnation);
                    lm.track_changes(next);
                    logged.insert(next, Vec::new());
                }
                Some(Op::CancelWaits { slot }) => { lm.cancel_waits(txn_of(slot, &incarnation)); }
            }
            for (t, persisted) in logged.iter_mut() {
                let changes = lm.take_changes(*t).expect("tracked");
                let delta = lm.delta_of_changes(&changes, persisted, |_| true);
                let walked = LockDelta::between(persisted, lm.held_lock_views(*t));
                let mut folded_walk = persisted.clone();
                walked.apply_to(&mut folded_walk);
                delta.apply_to(persisted);
                let mut want: Vec<HeldLock> = lm.held_lock_views(*t).map(|l| l.to_held()).collect();
                want.sort_by_key(|l| l.granted);
                prop_assert_eq!(&*persisted, &want, "{:?}: folded tracked changes", t);
                prop_assert_eq!(&folded_walk, &want);
            }
            let freed = lm.take_freed_releasing();
            for t in ended.clone() {
                if !lm.holds_any(t) {
                    prop_assert!(freed.contains(&t), "{:?} lost its last held-back lock unnamed", t);
                    ended.remove(&t);
                }
            }
            check_invariants(&lm)?;
        }
    }

    /// LK-8: after any sequence of calls, (i) no incompatible locks overlap, (ii) no waiter
    /// is grantable, (iii) a waiter with an edge to an older txn is impatient, and patient
    /// waiters' edges go from older to younger (acyclic), (iv) every
    /// grant names a request that was waiting; `Die` changes nothing.
    #[test]
    fn rule_lk8_invariants_hold_under_random_operations(ops in proptest::collection::vec(op(), 1..60)) {
        let mut lm = LockManager::new();
        let mut incarnation = [0u64; SLOTS as usize];
        let txn_of = |slot: u64, inc: &[u64; SLOTS as usize]| txn(slot * 1_000 + inc[slot as usize]);
        let mut waiting: BTreeMap<u64, TxnId> = BTreeMap::new(); // token -> txn
        let mut token = 0u64;
        for op in ops {
            let grants = match op {
                Op::Acquire { slot, target, class, write, cols } => {
                    let t = txn_of(slot, &incarnation);
                    let access = access_of(&target, write);
                    token += 1;
                    let before = lm.clone();
                    // A retried transaction keeps its age: age = slot.
                    let mode = LockMode::new(class, access).on(cols);
                    let d = lm.acquire(Owner { txn: t, age: slot }, TABLE, target, mode, token);
                    match d {
                        Decision::Waiting => {
                            waiting.insert(token, t);
                            // (v) a local deadlock's victim is impatient (LK-5c aborts
                            // only what LK-5a would, sooner).
                            if let Some(v) = lm.deadlock_victim(t, |_| true) {
                                prop_assert!(lm.impatient(v), "victim {:?} is patient", v);
                            }
                            // (vi) LK-5c's shortcut is sound: where it skips the search
                            // (nobody may wait for the new waiter), the search finds no cycle.
                            if !lm.may_be_waited_for(t) {
                                prop_assert!(lm.deadlock_search(t).is_none(), "shortcut hid a cycle through {:?}", t);
                            }
                        }
                        Decision::Die => prop_assert_eq!(&lm, &before),
                        Decision::Granted => {}
                    }
                    Vec::new()
                }
                Op::Release { slot, pick } => {
                    let t = txn_of(slot, &incarnation);
                    let held: Vec<_> = lm.held(t).into_iter().filter(|h| !lm.releasing(t).contains(h)).collect();
                    match held.get(pick) {
                        Some((table, target, mode)) => lm.release(t, *table, target, *mode),
                        None => Vec::new(),
                    }
                }
                Op::Downgrade { slot } => lm.downgrade_alkaline(txn_of(slot, &incarnation)),
                Op::ReleaseNonSaline { slot } => lm.release_non_saline(txn_of(slot, &incarnation)),
                Op::ReleaseAll { slot } => {
                    let t = txn_of(slot, &incarnation);
                    waiting.retain(|_, w| *w != t);
                    incarnation[slot as usize] += 1; // the next one is a retry or a new txn
                    lm.release_all(t)
                }
                Op::CancelWaits { slot } => {
                    let t = txn_of(slot, &incarnation);
                    waiting.retain(|_, w| *w != t);
                    lm.cancel_waits(t)
                }
            };
            // (iv) every grant names a request that was waiting (once).
            for g in grants {
                prop_assert_eq!(waiting.remove(&g.token), Some(g.txn), "grant {:?} was not waiting", g);
            }
            let tokens: BTreeSet<u64> = lm.entries.values().filter_map(|e| match e.state {
                State::Waiting { token } => Some(token),
                _ => None,
            }).collect();
            prop_assert_eq!(&tokens, &waiting.keys().copied().collect::<BTreeSet<_>>());
            check_invariants(&lm)?;
        }
        // Everyone finishes: all locks and requests go away.
        for slot in 0..SLOTS {
            lm.release_all(txn_of(slot, &incarnation));
        }
        prop_assert_eq!(lm.lock_count(), 0);
        prop_assert_eq!(lm.waiter_count(), 0);
    }
}

/// LK-5b: a request of an accepted BASE transaction blocked by an older transaction
/// waits, and names the older blocker to wound; an ordinary request in the same place
/// waits impatiently (LK-5a: its caller aborts it after the patience).
#[test]
fn rule_lk5b_accepted_base_waits_and_wounds_older_blockers() {
    let mut lm = LockManager::new();
    let acid_w = LockMode::new(LockClass::Acid, Access::Write);
    let alk_w = LockMode::new(LockClass::Alkaline, Access::Write);
    assert_eq!(lm.acquire(Owner { txn: txn(1), age: 1 }, TABLE, key(1), acid_w, 1), Decision::Granted);
    // Younger ordinary BASE request: waits impatiently, and its caller aborts it.
    assert_eq!(lm.acquire(Owner { txn: txn(5), age: 5 }, TABLE, key(1), alk_w, 2), Decision::Waiting);
    assert!(lm.impatient(txn(5)));
    assert!(lm.cancel_waits(txn(5)).is_empty());
    // Younger accepted BASE request: waits and wounds txn 1.
    assert_eq!(lm.acquire_immortal(Owner { txn: txn(5), age: 5 }, TABLE, key(1), alk_w, 3), Decision::Waiting);
    assert_eq!(lm.wound_targets(txn(5)), vec![txn(1)]);
    // The wounded transaction aborts: the waiter is granted.
    let grants = lm.release_all(txn(1));
    assert_eq!(grants, vec![Grant { txn: txn(5), token: 3 }]);
    assert!(lm.wound_targets(txn(5)).is_empty());
}

// ----- LK-6 across partitions (Salt §5.1 LK-6b) -----

const P1: PartitionId = PartitionId(1);

/// LK-6a as seen from another partition: a BASE read of a held BASE write is *tainted*
/// (`read_taint`) and not settled (`reads_settled`) until the writer's saline lock goes.
#[test]
fn rule_lk6a_read_of_an_unfinished_base_write_is_tainted_until_the_write_is_released() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 1, key(1), ALK_W, 1), Decision::Granted);
    lm.downgrade_alkaline(txn(1)); // BASE₁'s subtransaction committed: saline W on x
    assert_eq!(acq(&mut lm, 2, key(1), ALK_R, 2), Decision::Granted);
    let g = lm.read_taint(txn(2)).expect("BASE₂'s read depends on BASE₁'s write");
    assert!(!lm.reads_settled(txn(2), g));
    assert!(lm.reads_settled(txn(2), g - 1), "reads granted before it are not in question");
    lm.release_all(txn(1)); // BASE₁ ends
    assert_eq!(lm.read_taint(txn(2)), None);
    assert!(lm.reads_settled(txn(2), g), "settled once the write it read is released");
    // A read of settled data is never tainted.
    assert_eq!(acq(&mut lm, 3, key(2), ALK_R, 3), Decision::Granted);
    assert_eq!(lm.read_taint(txn(3)), None);
}

/// LK-6a per column: a BASE read depends on a BASE write of its target only if their
/// columns meet. BASE₁'s unfinished write of column 3 holds back what BASE₃ wrote after
/// reading columns 2–3, and not what BASE₂ wrote after reading columns 1–2 (a TPC-C Payment
/// reads the warehouse's name and address, other Payments' unfinished updates are of its
/// year-to-date total; the Delivery that reads its customer then no longer waits for them).
#[test]
fn rule_lk6a_per_column_a_read_depends_only_on_writes_of_the_columns_it_reads() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 1, key(1), ALK_W.on(ColMask::of([3])), 1), Decision::Granted);
    lm.downgrade_alkaline(txn(1)); // BASE₁: saline W of column 3 of x
    assert_eq!(acq(&mut lm, 2, key(1), ALK_R.on(ColMask::of([1, 2])), 2), Decision::Granted);
    assert_eq!(lm.read_taint(txn(2)), None, "columns 1-2 are not the ones BASE₁ wrote");
    assert_eq!(acq(&mut lm, 3, key(1), ALK_R.on(ColMask::of([2, 3])), 3), Decision::Granted);
    assert!(lm.read_taint(txn(3)).is_some(), "column 3 is");
    assert_eq!(acq(&mut lm, 4, key(1), ALK_R, 4), Decision::Granted);
    assert!(lm.read_taint(txn(4)).is_some(), "a whole-row read reads column 3");
    // Each writes y, then ends: LK-6b holds back only BASE₃'s and BASE₄'s writes.
    for n in [2, 3, 4] {
        assert_eq!(acq(&mut lm, n, key(10 + n as i64), ALK_W, 10 + n), Decision::Granted);
        lm.release_all(txn(n));
    }
    assert_eq!(acq(&mut lm, 9, key(12), ACID_R, 92), Decision::Granted, "BASE₂'s write is free");
    assert_eq!(acq(&mut lm, 9, key(13), ACID_R, 93), Decision::Waiting, "BASE₃'s write waits for BASE₁");
    assert_eq!(acq(&mut lm, 9, key(14), ACID_R, 94), Decision::Waiting, "so does BASE₄'s");
    let grants = lm.release_all(txn(1));
    assert!(grants.contains(&grant(9, 93)) && grants.contains(&grant(9, 94)), "{grants:?}");
    lm.check_invariants().unwrap();
}

/// LK-6a per column with LK-2: a read of more columns than the transaction's lock on the
/// target names is not covered by it — it gets a lock of its own, granted at once, with the
/// dependencies of the new columns. Otherwise a read of column 1 followed by a read of the
/// whole row would read BASE₁'s unfinished write with no dependency on it.
#[test]
fn rule_lk6a_per_column_a_read_of_more_columns_gets_the_dependencies_of_the_new_ones() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 1, key(1), ALK_W.on(ColMask::of([3])), 1), Decision::Granted);
    lm.downgrade_alkaline(txn(1));
    assert_eq!(acq(&mut lm, 2, key(1), ALK_R.on(ColMask::of([1])), 2), Decision::Granted);
    assert_eq!(lm.read_taint(txn(2)), None);
    // A waiter behind BASE₂ does not hold the wider read back: it is granted at once.
    assert_eq!(acq(&mut lm, 5, key(1), ACID_W, 5), Decision::Waiting);
    assert_eq!(acq(&mut lm, 2, key(1), ALK_R, 3), Decision::Granted);
    assert!(lm.read_taint(txn(2)).is_some(), "the whole row includes BASE₁'s column 3");
    // The same columns again, or fewer, are covered: no new lock.
    let held = lm.locks_of(txn(2), |e| e.is_held()).len();
    assert_eq!(acq(&mut lm, 2, key(1), ALK_R.on(ColMask::of([1, 3])), 4), Decision::Granted);
    assert_eq!(lm.locks_of(txn(2), |e| e.is_held()).len(), held);
    lm.check_invariants().unwrap();
}

/// LK-6a per column for a covered write: a BASE transaction that wrote column 3 of x and
/// then writes column 4 gets a lock on column 4 too, so that a later reader of column 4
/// depends on it. Covered by the first lock alone, the second write would be read with no
/// dependency while unfinished.
#[test]
fn rule_lk6a_per_column_a_write_of_more_columns_is_depended_on_by_their_readers() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 1, key(1), ALK_W.on(ColMask::of([3])), 1), Decision::Granted);
    assert_eq!(acq(&mut lm, 1, key(1), ALK_W.on(ColMask::of([4])), 2), Decision::Granted);
    lm.downgrade_alkaline(txn(1)); // BASE₁ committed the subtransaction; it is unfinished
    assert_eq!(acq(&mut lm, 2, key(1), ALK_R.on(ColMask::of([4])), 3), Decision::Granted);
    assert!(lm.read_taint(txn(2)).is_some(), "column 4 was written by unfinished BASE₁");
    lm.check_invariants().unwrap();
}

/// LK-6a when the reader wrote the target itself: its alkaline write is compatible with
/// other transactions' saline writes of the target, so a read it covers (LK-2) still
/// reads them and must depend on them. A TPC-C New-Order reads its district's next order
/// id after incrementing it: the value includes earlier New-Orders' unfinished increments.
#[test]
fn rule_lk6a_a_read_covered_by_the_readers_own_write_depends_on_others_unfinished_writes() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 1, key(1), ALK_W, 1), Decision::Granted);
    lm.downgrade_alkaline(txn(1)); // BASE₁: saline W on x
    assert_eq!(acq(&mut lm, 2, key(1), ALK_W, 2), Decision::Granted, "saline and alkaline writes mix");
    assert_eq!(lm.read_taint(txn(2)), None);
    assert_eq!(acq(&mut lm, 2, key(1), ALK_R, 3), Decision::Granted);
    assert!(lm.read_taint(txn(2)).is_some(), "BASE₂ read BASE₁'s unfinished write");
    // Where no one else writes the target, the covered read takes no lock.
    assert_eq!(acq(&mut lm, 3, key(2), ALK_W, 4), Decision::Granted);
    let held = lm.locks_of(txn(3), |e| e.is_held()).len();
    assert_eq!(acq(&mut lm, 3, key(2), ALK_R, 5), Decision::Granted);
    assert_eq!(lm.locks_of(txn(3), |e| e.is_held()).len(), held);
    lm.check_invariants().unwrap();
}

/// LK-6b across partitions: a BASE write that depends on remote reads stays (releasing,
/// saline) after its transaction ends, keeps ACID readers out, and goes when the remote
/// reads settle; a repeated answer changes nothing.
#[test]
fn rule_lk6b_remote_write_is_released_only_after_the_remote_reads_settle() {
    let mut lm = LockManager::new();
    let dep = RemoteDep { part: P1, upto: 7 };
    assert_eq!(lm.acquire_after(owner(2), TABLE, key(5), ALK_W, 1, &[dep]), Decision::Granted);
    assert_eq!(lm.remote_pending(), vec![(txn(2), dep, false)]);
    lm.downgrade_alkaline(txn(2));
    lm.release_all(txn(2)); // BASE₂ ends here
    assert_eq!(lm.releasing(txn(2)).len(), 1, "held back by the remote reads");
    assert_eq!(lm.remote_pending(), vec![(txn(2), dep, true)]);
    // An ACID reader, even the oldest, is kept out: whom it would wait for is not known
    // here, so (as past the walk limit, LK-5a) it dies and its client retries.
    assert_eq!(lm.acquire(Owner { txn: txn(9), age: 0 }, TABLE, key(5), ACID_R, 2), Decision::Die);
    assert!(lm.remote_settled(txn(2), RemoteDep { part: P1, upto: 6 }).is_empty(), "another read set");
    assert!(lm.remote_settled(txn(2), dep).is_empty(), "nobody was waiting");
    assert_eq!(lm.acquire(Owner { txn: txn(9), age: 0 }, TABLE, key(5), ACID_R, 3), Decision::Granted);
    assert!(lm.held(txn(2)).is_empty());
    assert!(lm.remote_settled(txn(2), dep).is_empty(), "a repeated answer changes nothing");
    lm.release_all(txn(9));
}

/// LK-6b with LK-2: a covered re-write (same subtransaction) made after a read gets a
/// lock of its own with the new dependency; the first write's lock keeps only its own, so
/// it is released at the end even while the re-write is held back (merging them caused a
/// release cycle, `litmus sim --workload salt-chains`, seed 222).
#[test]
fn rule_lk6b_covered_rewrite_after_a_read_gets_its_own_lock() {
    let mut lm = LockManager::new();
    assert_eq!(acq(&mut lm, 1, key(1), ALK_W, 1), Decision::Granted); // BASE₁ writes y
    lm.downgrade_alkaline(txn(1));
    assert_eq!(acq(&mut lm, 2, key(2), ALK_W, 2), Decision::Granted); // T writes x
    assert_eq!(acq(&mut lm, 2, key(1), ALK_R, 3), Decision::Granted); // T reads BASE₁'s y
    assert_eq!(acq(&mut lm, 2, key(2), ALK_W, 4), Decision::Granted); // T writes x again
    let writes_x = lm.held(txn(2)).into_iter().filter(|(_, t, m)| *t == key(2) && m.is_write()).count();
    assert_eq!(writes_x, 2, "the re-write has a lock of its own");
    // A re-write with nothing read since needs no new lock (LK-2 as before).
    assert_eq!(acq(&mut lm, 2, key(2), ALK_W, 5), Decision::Granted);
    assert_eq!(lm.held(txn(2)).len(), 3);
    lm.downgrade_alkaline(txn(2));
    lm.release_all(txn(2)); // T ends: its first write of x goes, the re-write waits for BASE₁
    assert_eq!(lm.releasing(txn(2)).len(), 2, "the re-write and T's read of y wait for BASE₁");
    lm.release_all(txn(1));
    assert!(lm.held(txn(2)).is_empty());
}

/// Grant numbers never go back (`set_grant_floor`): a remote dependency `upto` names the
/// same reads after a restart.
#[test]
fn rule_lk6b_grant_numbers_start_above_the_floor() {
    let mut lm = LockManager::new();
    lm.set_grant_floor(1 << 40);
    assert_eq!(acq(&mut lm, 1, key(1), ALK_W, 1), Decision::Granted);
    lm.downgrade_alkaline(txn(1));
    assert_eq!(acq(&mut lm, 2, key(1), ALK_R, 2), Decision::Granted);
    assert!(lm.read_taint(txn(2)).is_some_and(|g| g >= 1 << 40));
}
