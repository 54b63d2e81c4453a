//! Tests named after the rules of the module doc and the sentences of Omid ICDE'14 they check.

use super::messages::{Batch, Connected, Delta, OracleEffects, Outbound, Reply, Request};
use super::oracle::{Input, StatusOracle};
use super::replica::{ClientReplica, ReplicaGap, Visibility};
use super::*;
use litmus_core::{ClientId, Time, Timestamp};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

fn row(n: u64) -> RowId {
    RowId(n)
}

fn small_config() -> OracleConfig {
    OracleConfig { batch_bytes_max: 1 << 20, ..OracleConfig::default() }
}

/// Drives one oracle, collects what it persists and sends.
struct Harness {
    o: StatusOracle,
    config: OracleConfig,
    now: Time,
    /// Batches emitted (the WAL).
    log: Vec<Batch>,
    sent: Vec<Outbound>,
}

impl Harness {
    fn new(config: OracleConfig) -> Harness {
        Harness { o: StatusOracle::new(config.clone()), config, now: Time::ZERO, log: Vec::new(), sent: Vec::new() }
    }

    fn absorb(&mut self, out: OracleEffects) -> Vec<Outbound> {
        self.log.extend(out.persist);
        self.sent.extend(out.send.iter().cloned());
        out.send
    }

    /// Sends a request without flushing; returns what went out at once.
    fn send(&mut self, client: u64, request: Request) -> Vec<Outbound> {
        let mut out = OracleEffects::default();
        self.o.step(self.now, Input::Request { client: ClientId(client), request }, &mut out);
        self.absorb(out)
    }

    fn advance(&mut self, ms: u64) -> Vec<Outbound> {
        self.now = Time(self.now.0 + ms * 1_000_000);
        let mut out = OracleEffects::default();
        self.o.step(self.now, Input::Tick, &mut out);
        self.absorb(out)
    }

    /// Sends and waits out the batch: the replies to this request.
    fn call(&mut self, client: u64, request: Request) -> Vec<Reply> {
        let mut sent = self.send(client, request);
        sent.extend(self.advance(5));
        sent.into_iter()
            .filter_map(|o| match o {
                Outbound::Reply { client: c, reply } if c == ClientId(client) => Some(reply),
                _ => None,
            })
            .collect()
    }

    fn connect(&mut self, client: u64) -> Connected {
        match self.call(client, Request::Connect).pop() {
            Some(Reply::Connected(c)) => c,
            other => panic!("expected Connected, got {other:?}"),
        }
    }

    fn begin_with_delta(&mut self, client: u64) -> (Timestamp, Delta) {
        match self.call(client, Request::Begin).pop() {
            Some(Reply::Began { start_ts, delta }) => (start_ts, delta),
            other => panic!("expected Began, got {other:?}"),
        }
    }

    fn begin(&mut self, client: u64) -> Timestamp {
        self.begin_with_delta(client).0
    }

    fn commit(&mut self, client: u64, start_ts: Timestamp, rows: &[u64]) -> Result<Timestamp, CommitAbort> {
        let write_set = rows.iter().map(|&n| row(n)).collect();
        match self.call(client, Request::Commit { start_ts, write_set }).pop() {
            Some(Reply::Committed { commit_ts, .. }) => Ok(commit_ts),
            Some(Reply::Aborted { reason, .. }) => Err(reason),
            other => panic!("expected a commit outcome, got {other:?}"),
        }
    }

    /// Crash: in-memory state and the open batch are lost; a new oracle recovers from the log.
    fn crash_and_recover(&mut self) {
        let (o, out) = StatusOracle::recover(self.config.clone(), None, &self.log);
        self.o = o;
        self.absorb(out);
    }
}

// ---- OM-2: Algorithm 3 ----------------------------------------------------------------------

#[test]
fn alg3_line1_aborts_when_tmax_exceeds_start_ts() {
    let mut h = Harness::new(OracleConfig { last_commit_rows_max: 1, ..small_config() });
    h.connect(1);
    let old = h.begin(1);
    let a = h.begin(1);
    h.commit(1, a, &[1]).unwrap();
    let b = h.begin(1);
    let tc_b = h.commit(1, b, &[2]).unwrap(); // evicts row 1: Tmax = Tc(a) > old
    assert!(h.o.tmax() > old && h.o.tmax() < tc_b);
    // `old` was in flight when Tmax passed it: aborted then (OM-4); its commit finds it gone.
    assert_eq!(h.commit(1, old, &[9]), Err(CommitAbort::NotInFlight));
    assert!(h.o.is_aborted(old));
}

#[test]
fn alg3_line5_aborts_when_a_row_committed_after_start() {
    let mut h = Harness::new(small_config());
    h.connect(1);
    let t1 = h.begin(1);
    let t2 = h.begin(1);
    let tc1 = h.commit(1, t1, &[1, 2]).unwrap();
    assert_eq!(h.commit(1, t2, &[3, 2]), Err(CommitAbort::RowConflict { row: row(2), last_commit: tc1 }));
    assert!(h.o.is_aborted(t2), "an aborted writer enters the aborted list");
    assert_eq!(h.o.last_commit(row(3)), None, "an abort changes no lastCommit");
    assert_eq!(
        CommitAbort::RowConflict { row: row(2), last_commit: tc1 }.abort_reason(),
        litmus_core::AbortReason::WriteConflict
    );
}

#[test]
fn alg3_commit_assigns_fresh_tc_and_sets_last_commit_of_every_row() {
    let mut h = Harness::new(small_config());
    h.connect(1);
    let t1 = h.begin(1);
    let tc1 = h.commit(1, t1, &[1, 2, 2]).unwrap(); // footnote 4: duplicates count once
    assert!(tc1 > t1);
    assert_eq!(h.o.last_commit(row(1)), Some(tc1));
    assert_eq!(h.o.last_commit(row(2)), Some(tc1));
    assert_eq!(h.o.last_commit_rows(), 2);
    assert_eq!(h.o.commit_ts(t1), Some(tc1));
    // A transaction that started after Tc(t1) does not overlap t1 in time: it commits.
    let t2 = h.begin(1);
    let tc2 = h.commit(1, t2, &[1]).unwrap();
    assert_eq!(h.o.last_commit(row(1)), Some(tc2));
    assert_eq!(h.o.last_commit(row(2)), Some(tc1));
}

#[test]
fn alg3_concurrent_transactions_with_disjoint_write_sets_both_commit() {
    let mut h = Harness::new(small_config());
    h.connect(1);
    let (t1, t2) = (h.begin(1), h.begin(1));
    assert!(h.commit(1, t2, &[2]).is_ok());
    assert!(h.commit(1, t1, &[1]).is_ok());
    // Read-only: no Tc list entry, no aborted entry.
    let t3 = h.begin(1);
    assert!(h.commit(1, t3, &[]).is_ok());
    assert_eq!(h.o.commit_ts(t3), None);
    assert_eq!(h.commit(1, t3, &[]), Err(CommitAbort::NotInFlight), "a second commit finds nothing in flight");
}

// ---- OM-5: Algorithm 4 ----------------------------------------------------------------------

#[test]
fn alg4_committed_version_is_visible_iff_tc_precedes_reader() {
    let mut h = Harness::new(small_config());
    h.connect(1);
    let w = h.begin(1);
    let early_reader = h.begin(1);
    let tc = h.commit(1, w, &[1]).unwrap();
    let late_reader = h.begin(1);
    assert!(early_reader < tc && tc < late_reader);
    assert!(!h.o.in_snapshot(w, early_reader), "line 2: Tc > Ts(reader)");
    assert!(h.o.in_snapshot(w, late_reader), "line 2: Tc < Ts(reader)");
    assert!(h.o.in_snapshot(late_reader, late_reader), "a transaction reads its own writes");
}

#[test]
fn alg4_aborted_and_in_progress_versions_are_invisible() {
    let mut h = Harness::new(small_config());
    h.connect(1);
    let in_progress = h.begin(1);
    let aborted = h.begin(1);
    h.call(1, Request::Abort { start_ts: aborted });
    let reader = h.begin(1);
    assert!(!h.o.in_snapshot(in_progress, reader), "line 4: Tmax < Ts_f, no Tc: not committed");
    assert!(!h.o.in_snapshot(aborted, reader), "line 4: aborted");
    assert!(h.o.is_aborted(aborted));
}

#[test]
fn alg4_version_below_tmax_without_commit_info_is_old_and_committed() {
    let mut h = Harness::new(OracleConfig { last_commit_rows_max: 1, commit_list_txns_max: 1, ..small_config() });
    h.connect(1);
    let w = h.begin(1);
    let tc_w = h.commit(1, w, &[1]).unwrap();
    let w2 = h.begin(1);
    h.commit(1, w2, &[2]).unwrap(); // evicts w: Tmax = Tc(w), Tc(w) dropped
    assert_eq!(h.o.tmax(), tc_w);
    assert_eq!(h.o.commit_ts(w), None, "Tc entries at or below Tmax are dropped");
    let reader = h.begin(1);
    assert!(h.o.in_snapshot(w, reader), "line 7: old committed transaction");
}

// ---- OM-3: memory limits --------------------------------------------------------------------

#[test]
fn eviction_raises_tmax_to_the_evicted_tc_and_aborts_only_starts_below_it() {
    let mut h = Harness::new(OracleConfig { last_commit_rows_max: 2, ..small_config() });
    h.connect(1);
    let t1 = h.begin(1);
    let tc1 = h.commit(1, t1, &[1, 2]).unwrap();
    let after = h.begin(1); // starts after Tc(t1): survives the eviction of t1's rows
    let t2 = h.begin(1);
    assert_eq!(h.o.tmax(), Timestamp::ZERO);
    let tc2 = h.commit(1, t2, &[3]).unwrap(); // 3 rows > 2: evict the oldest (Tc = tc1)
    assert_eq!(h.o.tmax(), tc1, "Tmax = the largest evicted Tc");
    assert_eq!(h.o.last_commit(row(1)), None);
    assert_eq!(h.o.last_commit(row(2)), None, "rows at or below Tmax are redundant");
    assert_eq!(h.o.last_commit(row(3)), Some(tc2));
    assert!(h.o.last_commit_rows() <= 2);
    // Equation (1): Tmax < Ts ⇒ lastCommit(r) < Ts: `after` commits on an evicted row.
    assert!(h.commit(1, after, &[1]).is_ok());
}

/// OM-3: the commit list is bounded; past the limit `Tmax` rises.
#[test]
fn commit_list_limit_raises_tmax_when_a_hot_row_keeps_last_commit_small() {
    let mut h = Harness::new(OracleConfig { commit_list_txns_max: 3, ..small_config() });
    h.connect(1);
    let mut tcs = Vec::new();
    for _ in 0..5 {
        let t = h.begin(1);
        tcs.push(h.commit(1, t, &[7]).unwrap());
    }
    assert_eq!(h.o.last_commit_rows(), 1);
    assert_eq!(h.o.tmax(), tcs[1], "the two oldest Tc entries went; Tmax covers them");
}

// ---- OM-4: aborted and uncommitted lists ----------------------------------------------------

#[test]
fn uncommitted_transactions_are_aborted_when_tmax_passes_their_start() {
    let mut h = Harness::new(OracleConfig { last_commit_rows_max: 1, ..small_config() });
    h.connect(1);
    let slow = h.begin(1);
    let t = h.begin(1);
    h.commit(1, t, &[1]).unwrap();
    assert!(h.o.is_in_flight(slow));
    let t = h.begin(1);
    h.commit(1, t, &[2]).unwrap(); // Tmax rises past `slow`
    assert!(!h.o.is_in_flight(slow));
    assert!(h.o.is_aborted(slow), "§III: add it to the aborted list");
}

#[test]
fn uncommitted_limit_aborts_the_oldest_in_flight_transaction() {
    let mut h = Harness::new(OracleConfig { uncommitted_txns_max: 2, ..small_config() });
    h.connect(1);
    let (a, b) = (h.begin(1), h.begin(1));
    let c = h.begin(1);
    assert!(h.o.is_aborted(a) && h.o.tmax() == a);
    assert!(h.o.is_in_flight(b) && h.o.is_in_flight(c));
}

/// OM-4: an aborted entry leaves the list after `CleanedUp`, once the transactions started before the report ended.
#[test]
fn aborted_entry_is_forgotten_after_cleanup_once_earlier_starts_terminate() {
    let mut h = Harness::new(small_config());
    h.connect(1);
    let aborted = h.begin(1);
    let earlier = h.begin(1); // started before the cleanup report: may still read the versions
    h.call(1, Request::Abort { start_ts: aborted });
    h.call(1, Request::CleanedUp { start_ts: aborted });
    assert!(h.o.is_aborted(aborted), "§III: deferred until the already started transactions terminate");
    let later = h.begin(1); // started after the report: does not hold the removal back
    h.commit(1, earlier, &[]).unwrap();
    assert!(!h.o.is_aborted(aborted), "forgotten once `earlier` terminated");
    assert!(h.o.is_in_flight(later));
    // The removal is logged and replicated.
    assert!(h.log.iter().flat_map(|b| &b.records).any(|r| *r == messages::Record::Forgotten { start_ts: aborted }));
    // A cleanup report for an unknown transaction is ignored.
    h.call(1, Request::CleanedUp { start_ts: Timestamp(999) });
}

// ---- OM-7: WAL batching ---------------------------------------------------------------------

#[test]
fn commit_reply_is_released_only_with_its_batch_by_time() {
    let mut h = Harness::new(small_config());
    h.connect(1);
    let t = h.begin(1);
    let log_len = h.log.len();
    assert!(h.send(1, Request::Commit { start_ts: t, write_set: vec![row(1)] }).is_empty(), "held");
    assert!(h.advance(4).is_empty(), "4 ms < batch_delay");
    let sent = h.advance(1);
    assert_eq!(h.log.len(), log_len + 1, "the batch is emitted in the same step");
    assert!(matches!(&sent[..], [Outbound::Reply { reply: Reply::Committed { .. }, .. }]));
}

/// OM-7: group commit closes a batch at its size limit.
#[test]
fn batch_is_emitted_when_it_reaches_the_size_limit() {
    let mut h = Harness::new(OracleConfig { batch_bytes_max: 40, ..OracleConfig::default() });
    h.connect(1);
    let starts: Vec<Timestamp> = (0..4).map(|_| h.begin(1)).collect();
    let before = h.log.len();
    let mut released = 0;
    for (i, &t) in starts.iter().enumerate() {
        released += h.send(1, Request::Commit { start_ts: t, write_set: vec![row(i as u64)] }).len();
    }
    // Each commit logs 17 bytes: the third one fills the batch and releases three replies.
    assert_eq!(h.log.len(), before + 1);
    assert_eq!(released, 3);
}

/// OM-6 and OM-7: a begin reply waits for the commits logged before it and carries them to the client replica.
#[test]
fn begin_reply_waits_for_earlier_commits_and_carries_them() {
    let mut h = Harness::new(small_config());
    let c = h.connect(2);
    let mut replica = ClientReplica::new(&c);
    h.connect(1);
    let w = h.begin(1);
    assert!(h.send(1, Request::Commit { start_ts: w, write_set: vec![row(1)] }).is_empty());
    // Client 2's TsReq arrives while the commit is not durable: its reply must wait.
    assert!(h.send(2, Request::Begin).is_empty(), "a Begin reply never overtakes an earlier commit");
    let sent = h.advance(5);
    let (reader, delta) = sent
        .into_iter()
        .find_map(|o| match o {
            Outbound::Reply { client: ClientId(2), reply: Reply::Began { start_ts, delta } } => Some((start_ts, delta)),
            _ => None,
        })
        .expect("released with the batch");
    replica.apply(&delta).unwrap();
    assert_eq!(replica.in_snapshot(w, reader), Visibility::Visible, "ΔSO carries (Ts, Tc) of the commit");
}

// ---- OM-1 and 8: timestamps and recovery ----------------------------------------------------

#[test]
fn timestamps_are_reserved_in_batches_and_never_reused_across_a_crash() {
    let mut h = Harness::new(small_config());
    h.connect(1);
    let first = h.begin(1);
    let reserves = |h: &Harness| {
        h.log.iter().flat_map(|b| &b.records).filter(|r| matches!(r, messages::Record::Reserve { .. })).count()
    };
    assert_eq!(reserves(&h), 1);
    let mut issued = vec![first];
    for _ in 0..3 {
        issued.push(h.begin(1));
    }
    assert_eq!(reserves(&h), 1, "one WAL write reserves TIMESTAMP_BATCH timestamps");
    h.send(1, Request::Begin); // issued in memory; its reply waits and is lost in the crash
    h.crash_and_recover();
    h.connect(1);
    let after = h.begin(1);
    assert!(after.0 > TIMESTAMP_BATCH, "issues from above the last reserved bound");
    issued.push(after);
    assert!(issued.windows(2).all(|w| w[0] < w[1]), "unique and increasing: {issued:?}");
}

/// OM-8: recovery rebuilds the durable state; only records never flushed are lost.
#[test]
fn recovery_rebuilds_the_durable_state_and_loses_only_unflushed_records() {
    let mut h = Harness::new(OracleConfig { last_commit_rows_max: 3, ..small_config() });
    h.connect(1);
    for i in 0..6 {
        let t = h.begin(1);
        if i % 3 == 2 {
            h.call(1, Request::Abort { start_ts: t });
        } else {
            h.commit(1, t, &[i, i + 10]).unwrap();
        }
    }
    let durable = h.o.checkpoint().expect("no open batch");
    assert!(durable.tmax > Timestamp::ZERO && !durable.commits.is_empty() && !durable.aborted.is_empty());
    let unflushed = h.begin(1);
    h.send(1, Request::Commit { start_ts: unflushed, write_set: vec![row(50)] }); // never acknowledged
    h.crash_and_recover();
    let mut recovered = h.o.checkpoint().unwrap();
    let crash = recovered.crash_ranges.pop().expect("a crash range");
    assert_eq!(recovered.reserved_upto, durable.reserved_upto);
    assert_eq!(recovered, durable, "Tmax, Tc list and aborted list equal the pre-crash durable state");
    assert_eq!((crash.after, crash.upto), (durable.tmax, durable.reserved_upto));
    assert!(h.o.is_aborted(unflushed), "its commit was never acknowledged; it is aborted by the crash range");
}

/// OM-8: recovery aborts what was in flight at the crash, for good.
#[test]
fn recovery_aborts_transactions_in_flight_at_the_crash_forever() {
    let mut h = Harness::new(OracleConfig { last_commit_rows_max: 1, ..small_config() });
    h.connect(1);
    let committed = h.begin(1);
    let in_flight = h.begin(1);
    h.commit(1, committed, &[1]).unwrap();
    h.crash_and_recover();
    h.connect(1);
    assert_eq!(h.commit(1, in_flight, &[2]), Err(CommitAbort::NotInFlight));
    // Tmax rises far past the crash range: the in-flight transaction must stay aborted.
    for i in 0..3 {
        let t = h.begin(1);
        h.commit(1, t, &[100 + i]).unwrap();
    }
    assert!(h.o.tmax() > in_flight);
    let reader = h.begin(1);
    assert!(!h.o.in_snapshot(in_flight, reader));
    assert!(h.o.in_snapshot(committed, reader));
    // A second crash replays the crash range from its record.
    h.crash_and_recover();
    h.connect(1);
    let reader = h.begin(1);
    assert!(!h.o.in_snapshot(in_flight, reader) && h.o.in_snapshot(committed, reader));
}

/// OM-8: a checkpoint plus the batches after it recover what the full log does.
#[test]
fn checkpoint_plus_later_batches_recover_the_same_state_as_the_full_log() {
    let config = OracleConfig { last_commit_rows_max: 2, ..small_config() };
    let mut h = Harness::new(config.clone());
    h.connect(1);
    let run = |h: &mut Harness, base: u64| {
        for i in 0..4 {
            let t = h.begin(1);
            if i == 1 {
                h.call(1, Request::Abort { start_ts: t });
            } else {
                h.commit(1, t, &[base + i]).unwrap();
            }
        }
    };
    run(&mut h, 0);
    let checkpoint = messages::Checkpoint::decode(&h.o.checkpoint().unwrap().encode()).unwrap();
    let cut = h.log.len();
    run(&mut h, 10);
    let log: Vec<Batch> = h.log.iter().map(|b| Batch::decode(&b.encode()).unwrap()).collect();
    let (full, _) = StatusOracle::recover(config.clone(), None, &log);
    let (tail, _) = StatusOracle::recover(config, Some(&checkpoint), &log[cut..]);
    assert_eq!(full.checkpoint(), tail.checkpoint());
    assert!(Batch::decode(&[0xff, 0xff]).is_err(), "a corrupt batch is an error, not a panic");
}

/// OM-7: the log's encoding. Each record kind keeps its tag (postcard: the variant's position),
/// so every log the oracle wrote decodes; tags 6 and 7 name no record and do not decode.
#[test]
fn log_records_keep_their_tags() {
    use messages::Record;
    let ts = Timestamp;
    let cases = [
        (Record::Reserve { upto: ts(9) }, vec![0, 9]),
        (Record::Committed { start_ts: ts(1), commit_ts: ts(2) }, vec![1, 1, 2]),
        (Record::Aborted { start_ts: ts(3) }, vec![2, 3]),
        (Record::Forgotten { start_ts: ts(3) }, vec![3, 3]),
        (Record::Tmax(ts(4)), vec![4, 4]),
        (Record::CrashAborted { after: ts(4), upto: ts(8) }, vec![5, 4, 8]),
        (Record::CrashForgotten { after: ts(4), upto: ts(8) }, vec![8, 4, 8]),
    ];
    for (record, bytes) in cases {
        let batch = Batch { records: vec![record] };
        let encoded: Vec<u8> = [vec![1], bytes].concat();
        assert_eq!(batch.encode(), encoded, "{batch:?}");
        assert_eq!(Batch::decode(&encoded).unwrap(), batch);
    }
    for tag in [6, 7] {
        assert!(Batch::decode(&[1, tag, 0, 0, 0]).is_err(), "tag {tag} names no record");
    }
}

// ---- OM-6: replication ----------------------------------------------------------------------

#[test]
fn replica_asks_the_oracle_only_between_tmax_and_t_init() {
    let mut h = Harness::new(small_config());
    h.connect(1);
    let before = h.begin(1);
    h.commit(1, before, &[1]).unwrap();
    let c = h.connect(2); // connects after `before` committed: it has no (Ts, Tc) for it
    let mut replica = ClientReplica::new(&c);
    assert!(c.tmax < before && before < c.t_init);
    let (reader, delta) = h.begin_with_delta(2);
    replica.apply(&delta).unwrap();
    assert_eq!(replica.in_snapshot(before, reader), Visibility::AskOracle);
    let answer = h.call(2, Request::InSnapshot { version_ts: before, reader_ts: reader });
    assert_eq!(answer, vec![Reply::InSnapshot { version_ts: before, reader_ts: reader, visible: true }]);
    // After T_init the replica knows: a version of an in-flight transaction is invisible locally.
    let later = h.begin(1);
    assert_eq!(replica.in_snapshot(later, reader), Visibility::Invisible);
    assert_eq!(
        replica.apply(&Delta { from: 999, entries: vec![] }),
        Err(ReplicaGap::Gap { expected: delta.from + delta.entries.len() as u64, got: 999 })
    );
}

/// OM-6 (§IV "Client Replica"): a delta whose commits go backwards — a late delta of an
/// earlier session or oracle incarnation whose stream positions happen to line up — is refused
/// whole and changes nothing (the coordinator then starts a new session); it never panics.
#[test]
fn replica_refuses_a_delta_that_contradicts_it_and_changes_nothing() {
    use super::messages::MetaChange;
    let mut h = Harness::new(small_config());
    let c = h.connect(1);
    let mut replica = ClientReplica::new(&c);
    let t1 = h.begin(1);
    h.commit(1, t1, &[1]).unwrap();
    let (reader, delta) = h.begin_with_delta(1);
    replica.apply(&delta).unwrap();
    let tc = match delta.entries.iter().find_map(|e| match *e {
        MetaChange::Committed { commit_ts, .. } => Some(commit_ts),
        _ => None,
    }) {
        Some(tc) => tc,
        None => panic!("the delta carries t1's commit: {delta:?}"),
    };
    let stale = Delta {
        from: replica.cursor(),
        entries: vec![
            MetaChange::Aborted { start_ts: t1 },
            MetaChange::Committed { start_ts: Timestamp(1), commit_ts: Timestamp(tc.0 - 1) },
        ],
    };
    let (cursor, seen) = (replica.cursor(), replica.in_snapshot(t1, reader));
    assert!(matches!(replica.apply(&stale), Err(ReplicaGap::OutOfOrder { .. })));
    assert_eq!(replica.cursor(), cursor, "nothing applied");
    assert_eq!(replica.in_snapshot(t1, reader), seen);
}

/// OM-6 ("Silent Clients"): an idle client gets a push, and is disconnected without an acknowledgement.
#[test]
fn silent_client_gets_a_push_and_is_disconnected_without_an_ack() {
    let config = OracleConfig {
        idle_push_after: std::time::Duration::from_millis(100),
        push_ack_timeout: std::time::Duration::from_millis(50),
        ..small_config()
    };
    let mut h = Harness::new(config);
    h.connect(1);
    h.connect(2);
    h.connect(3);
    let keep_busy = |h: &mut Harness| {
        let t = h.begin(1);
        h.commit(1, t, &[1]).unwrap();
    };
    keep_busy(&mut h); // connects at 0, 5, 10 ms; client 1 heard at 20 ms; now 25 ms
    let sent = h.advance(85);
    let pushed: Vec<ClientId> = sent
        .iter()
        .filter_map(|o| match o {
            Outbound::Reply { client, reply: Reply::Push { .. } } => Some(*client),
            _ => None,
        })
        .collect();
    assert_eq!(pushed, vec![ClientId(2), ClientId(3)], "client 1 was heard recently");
    h.send(3, Request::Ack);
    let sent = h.advance(50);
    assert!(sent.contains(&Outbound::Disconnect { client: ClientId(2) }));
    assert!(!sent.contains(&Outbound::Disconnect { client: ClientId(3) }), "acknowledged");
    assert!(!h.o.is_connected(ClientId(2)) && h.o.is_connected(ClientId(3)));
    assert_eq!(h.call(2, Request::Begin), vec![Reply::Refused(OracleError::NotConnected)]);
}

/// OM-3: oversized write sets and clients beyond the bound are refused, so memory stays bounded.
#[test]
fn oversized_write_sets_and_excess_clients_are_refused() {
    let mut h = Harness::new(OracleConfig { write_set_rows_max: 2, clients_max: 1, ..small_config() });
    h.connect(1);
    let t = h.begin(1);
    let refused = h.call(1, Request::Commit { start_ts: t, write_set: vec![row(1), row(2), row(3)] });
    assert_eq!(refused, vec![Reply::Refused(OracleError::WriteSetTooLarge { rows: 3, limit: 2 })]);
    assert!(h.o.is_in_flight(t), "a refusal changes nothing");
    assert_eq!(h.call(2, Request::Connect), vec![Reply::Refused(OracleError::TooManyClients { limit: 1 })]);
}

/// OM-2: the row ids conflict detection compares tell tables, keys and cells apart.
#[test]
fn row_ids_distinguish_tables_keys_and_cells() {
    use litmus_core::{Key, TableId};
    let k = Key::ints(&[7]);
    assert_eq!(RowId::of(TableId(1), &k), RowId::of(TableId(1), &Key::ints(&[7])));
    assert_ne!(RowId::of(TableId(1), &k), RowId::of(TableId(2), &k));
    assert_ne!(RowId::of(TableId(1), &k), RowId::of(TableId(1), &Key::ints(&[8])));
    assert_ne!(RowId::of_cell(TableId(1), &k, 0), RowId::of_cell(TableId(1), &k, 1));
}

// ---- Property tests against naive models ------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Begin(u64),
    Commit(usize, Vec<u64>),
    Abort(usize),
    CleanUp(usize),
    Tick(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..3u64).prop_map(Op::Begin),
        3 => (any::<usize>(), proptest::collection::vec(0..8u64, 0..4)).prop_map(|(i, r)| Op::Commit(i, r)),
        1 => any::<usize>().prop_map(Op::Abort),
        1 => any::<usize>().prop_map(Op::CleanUp),
        2 => (0..8u64).prop_map(Op::Tick),
    ]
}

/// Naive SI (§II): a transaction commits iff no committed transaction wrote one of its rows with
/// `Ts < Tc'` (temporal overlap; the other half holds since `Tc` is assigned now); a version is
/// in a snapshot iff its writer committed before the reader started.
#[derive(Default)]
struct NaiveSi {
    committed: BTreeMap<Timestamp, (Timestamp, BTreeSet<RowId>)>,
}

impl NaiveSi {
    fn may_commit(&self, start_ts: Timestamp, rows: &[RowId]) -> bool {
        !self.committed.values().any(|(tc, w)| *tc > start_ts && rows.iter().any(|r| w.contains(r)))
    }
    fn in_snapshot(&self, version_ts: Timestamp, reader_ts: Timestamp) -> bool {
        version_ts == reader_ts || self.committed.get(&version_ts).is_some_and(|(tc, _)| *tc < reader_ts)
    }
}

/// Runs `ops` against an oracle with `config`, checking every commit decision against
/// [`NaiveSi`] and, after every step, every client replica's (and the oracle's) visibility
/// answers for live readers. `exact`: memory is unbounded, so decisions must agree exactly.
fn run_against_model(config: OracleConfig, ops: Vec<Op>, exact: bool) -> Result<(), TestCaseError> {
    let mut h = Harness::new(config);
    let mut model = NaiveSi::default();
    let mut replicas: BTreeMap<u64, ClientReplica> = BTreeMap::new();
    for c in 0..3 {
        replicas.insert(c, ClientReplica::new(&h.connect(c)));
    }
    let mut started: Vec<(u64, Timestamp)> = Vec::new(); // every start received, with its client
    let mut commit_requests: BTreeMap<Timestamp, (Vec<RowId>, Timestamp)> = BTreeMap::new(); // rows, Tmax then
                                                                                             // Versions nobody can read: cleaned up by their writer, or never written (a read-only commit).
    let mut cleaned: BTreeSet<Timestamp> = BTreeSet::new();
    let mut last_ts = Timestamp::ZERO;
    for op in ops {
        let sent = match op {
            Op::Begin(c) => h.send(c, Request::Begin),
            Op::Commit(i, rows) if !started.is_empty() => {
                let (c, ts) = started[i % started.len()];
                let rows: Vec<RowId> = rows.into_iter().map(row).collect();
                if let std::collections::btree_map::Entry::Vacant(e) = commit_requests.entry(ts) {
                    // The first request decides. A transaction that commits nothing wrote nothing.
                    if rows.is_empty() {
                        cleaned.insert(ts);
                    }
                    e.insert((rows.clone(), h.o.tmax()));
                }
                h.send(c, Request::Commit { start_ts: ts, write_set: rows })
            }
            Op::Abort(i) if !started.is_empty() => {
                let (c, ts) = started[i % started.len()];
                h.send(c, Request::Abort { start_ts: ts })
            }
            Op::CleanUp(i) if !started.is_empty() => {
                let (c, ts) = started[i % started.len()];
                if h.o.is_aborted(ts) {
                    cleaned.insert(ts); // the client deleted its versions
                }
                h.send(c, Request::CleanedUp { start_ts: ts })
            }
            Op::Tick(ms) => h.advance(ms),
            _ => Vec::new(),
        };
        // Replies come in decision order (OM-7), so the model sees commits in that order.
        for out in sent {
            let Outbound::Reply { client, reply } = out else {
                prop_assert!(false, "no client is idle this long");
                unreachable!()
            };
            match reply {
                Reply::Began { start_ts, delta } => {
                    prop_assert!(start_ts > last_ts, "timestamps increase");
                    last_ts = start_ts;
                    replicas.get_mut(&client.0).unwrap().apply(&delta).unwrap();
                    started.push((client.0, start_ts));
                }
                Reply::Committed { start_ts, commit_ts } => {
                    prop_assert!(commit_ts > last_ts, "timestamps increase");
                    last_ts = commit_ts;
                    let (rows, _) = &commit_requests[&start_ts];
                    prop_assert!(model.may_commit(start_ts, rows), "oracle committed what SI forbids");
                    if !rows.is_empty() {
                        model.committed.insert(start_ts, (commit_ts, rows.iter().copied().collect()));
                    }
                }
                Reply::Aborted { start_ts, reason } => {
                    let (rows, tmax_then) = &commit_requests[&start_ts];
                    match reason {
                        CommitAbort::RowConflict { .. } => {
                            prop_assert!(!model.may_commit(start_ts, rows), "spurious row conflict")
                        }
                        CommitAbort::TmaxPassed { tmax } => prop_assert!(!exact && tmax > start_ts),
                        CommitAbort::NotInFlight => {
                            // Aborted before: by the client, by Tmax (only with bounded memory), or a
                            // second commit of a finished transaction.
                            let was_tmax = *tmax_then > start_ts || h.o.tmax() > start_ts;
                            prop_assert!(!exact || !was_tmax || model.committed.contains_key(&start_ts));
                        }
                    }
                }
                Reply::Done { .. } => {}
                other => prop_assert!(false, "unexpected reply {:?}", other),
            }
        }
        // Visibility: for every live reader of every client, every version not cleaned up.
        for &(c, reader) in &started {
            if !h.o.is_in_flight(reader) {
                continue;
            }
            prop_assert!(reader > h.o.tmax());
            for &(_, version) in &started {
                if cleaned.contains(&version) {
                    continue;
                }
                let expected = model.in_snapshot(version, reader);
                prop_assert_eq!(h.o.in_snapshot(version, reader), expected, "oracle: {:?} in {:?}", version, reader);
                let replica = &replicas[&c];
                let local = match replica.in_snapshot(version, reader) {
                    Visibility::AskOracle => {
                        prop_assert!(replica.tmax() < version && version < replica.t_init());
                        h.o.in_snapshot(version, reader)
                    }
                    v => v == Visibility::Visible,
                };
                prop_assert_eq!(local, expected, "replica {}: {:?} in {:?}", c, version, reader);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// §II: with memory for every row, the oracle's commit/abort decisions are exactly naive SI's.
    #[test]
    fn si_decisions_equal_naive_snapshot_isolation(ops in proptest::collection::vec(op(), 1..60)) {
        run_against_model(small_config(), ops, true)?;
    }

    /// §III "Memory Limited Capacity": with a tiny lastCommit and Tc list the oracle never commits
    /// what SI forbids, reports a row conflict only when SI has one, aborts otherwise only when
    /// Tmax > Ts, and replicas answer inSnapshot exactly like naive SI for live readers.
    #[test]
    fn bounded_memory_only_adds_tmax_aborts_and_replicas_agree(ops in proptest::collection::vec(op(), 1..60)) {
        let config = OracleConfig {
            last_commit_rows_max: 3,
            commit_list_txns_max: 2,
            uncommitted_txns_max: 4,
            batch_bytes_max: 40,
            ..OracleConfig::default()
        };
        run_against_model(config, ops, false)?;
    }
}

// ---- Replication off (Fig. 9's plain SO) ------------------------------------------------------

/// A client connected without a replica gets empty deltas and does not hold the shared buffer;
/// a replicated client beside it still gets every change.
#[test]
fn unreplicated_sessions_get_no_piggyback_and_hold_no_buffer() {
    let mut h = Harness::new(small_config());
    let plain = match h.call(1, Request::ConnectUnreplicated).pop() {
        Some(Reply::Connected(c)) => c,
        other => panic!("{other:?}"),
    };
    let connected = h.connect(2);
    let mut replica = ClientReplica::new(&connected);
    let t = h.begin(1);
    h.commit(1, t, &[1]).unwrap();
    let (_, delta) = h.begin_with_delta(1);
    assert!(delta.entries.is_empty(), "no piggyback without replication: {delta:?}");
    assert!(plain.cursor <= delta.from);
    let (reader, delta) = h.begin_with_delta(2);
    assert!(!delta.entries.is_empty());
    replica.apply(&delta).unwrap();
    assert_eq!(replica.in_snapshot(t, reader), Visibility::Visible);
    // Only the replicated session's cursor keeps entries alive: after it catches up, the
    // unreplicated one (which never will) does not make the oracle disconnect anyone.
    h.advance(60_000);
    assert!(h.o.is_connected(ClientId(1)) && h.o.is_connected(ClientId(2)));
}

// ---- OM-4: sessions own their transactions; GC purges what no writer cleans up --------------

fn connect_as(h: &mut Harness, client: u64, session: u64) -> Reply {
    h.call(client, Request::ConnectAs { session }).pop().expect("a reply")
}

#[test]
fn a_new_session_aborts_the_transactions_of_the_old_one_and_replicates_the_aborts() {
    let mut h = Harness::new(small_config());
    assert!(matches!(connect_as(&mut h, 1, 10), Reply::Connected(_)));
    h.connect(2);
    let orphan = h.begin(1); // the coordinator crashes with it open
    let other = h.begin(2);
    assert_eq!(h.o.t_min(), orphan, "the orphan holds Tmin");
    // The restarted coordinator opens a newer session: its predecessor's transaction is aborted.
    assert!(matches!(connect_as(&mut h, 1, 11), Reply::Connected(_)));
    assert!(!h.o.is_in_flight(orphan) && h.o.is_aborted(orphan));
    assert_eq!(h.o.t_min(), other, "Tmin no longer held by the orphan");
    // A commit of the old session still in the network cannot commit it now.
    assert_eq!(h.commit(1, orphan, &[1]), Err(CommitAbort::NotInFlight));
    // The abort is logged and reaches the other clients' replicas.
    assert!(h.log.iter().flat_map(|b| &b.records).any(|r| *r == messages::Record::Aborted { start_ts: orphan }));
    let (_, delta) = h.begin_with_delta(2);
    assert!(delta.entries.contains(&messages::MetaChange::Aborted { start_ts: orphan }));
    // A duplicate of the current connect ends nothing; a late one of an older session is refused.
    let current = h.begin(1);
    assert!(matches!(connect_as(&mut h, 1, 11), Reply::Connected(_)));
    assert!(h.o.is_in_flight(current), "a duplicate connect is not a new session");
    assert_eq!(connect_as(&mut h, 1, 10), Reply::Refused(OracleError::StaleSession));
    assert!(h.o.is_in_flight(current) && h.o.is_connected(ClientId(1)));
    assert!(h.commit(1, current, &[2]).is_ok());
}

/// OM-6 under OM-E4 resends: a duplicate connect is answered from the session's cursor, so the replica stays whole.
#[test]
fn a_duplicate_connect_answers_from_the_sessions_cursor_so_the_replica_stays_whole() {
    let mut h = Harness::new(small_config());
    h.connect(2);
    let first = match connect_as(&mut h, 1, 5) {
        Reply::Connected(c) => c,
        other => panic!("{other:?}"),
    };
    let t = h.begin(2);
    let commit_ts = h.commit(2, t, &[1]).unwrap();
    // The first Connected was lost; the resent copy is answered from the same cursor, so the
    // next delta continues it and carries the commit.
    let again = match connect_as(&mut h, 1, 5) {
        Reply::Connected(c) => c,
        other => panic!("{other:?}"),
    };
    assert_eq!(again.cursor, first.cursor);
    let mut replica = ClientReplica::new(&again);
    let (reader, delta) = h.begin_with_delta(1);
    replica.apply(&delta).unwrap();
    assert!(commit_ts < reader);
    assert_eq!(replica.in_snapshot(t, reader), Visibility::Visible);
}

/// OM-4 and OM-6: a disconnected silent client's transactions are aborted.
#[test]
fn a_silent_clients_transactions_are_aborted_when_it_is_disconnected() {
    let config = OracleConfig {
        idle_push_after: std::time::Duration::from_millis(100),
        push_ack_timeout: std::time::Duration::from_millis(50),
        ..small_config()
    };
    let mut h = Harness::new(config);
    h.connect(1);
    h.connect(2);
    let silent = h.begin(2);
    let t = h.begin(1);
    h.commit(1, t, &[1]).unwrap();
    assert_eq!(h.o.t_min(), silent);
    h.advance(100); // push to client 2
    let sent = h.advance(60); // no ack: disconnected
    assert!(sent.contains(&Outbound::Disconnect { client: ClientId(2) }));
    assert!(h.o.is_aborted(silent) && !h.o.is_in_flight(silent));
    assert!(h.o.t_min() > silent, "Tmin moves on");
    h.advance(5); // the abort's batch
    assert!(h.log.iter().flat_map(|b| &b.records).any(|r| *r == messages::Record::Aborted { start_ts: silent }));
}

fn purged(h: &mut Harness, partition: u32, start_ts: Vec<Timestamp>, crashed: Vec<(Timestamp, Timestamp)>) {
    let mut out = OracleEffects::default();
    h.o.step(h.now, Input::Purged { partition, partitions: 2, start_ts, crashed }, &mut out);
    h.absorb(out);
    h.advance(5);
}

/// OM-4 and OM-E5: aborts below `Tmin` are purged by GC and forgotten once every partition reported.
#[test]
fn gc_purges_aborts_below_tmin_and_forgets_them_once_every_partition_reported() {
    let mut h = Harness::new(small_config());
    assert!(matches!(connect_as(&mut h, 1, 1), Reply::Connected(_)));
    let orphan = h.begin(1);
    let reader = h.begin(1);
    assert!(matches!(connect_as(&mut h, 1, 2), Reply::Connected(_))); // both aborted
    let live = h.begin(1);
    let low_water = h.o.t_min();
    assert_eq!(low_water, live);
    let (purge, crashed) = h.o.purge_work(low_water, 1);
    assert_eq!((purge, crashed), (vec![orphan], vec![]), "bounded, oldest first");
    let (purge, _) = h.o.purge_work(low_water, 10);
    assert_eq!(purge, vec![orphan, reader]);
    assert!(h.o.purge_work(orphan, 10).0.is_empty(), "only below the mark");
    purged(&mut h, 0, vec![orphan], vec![]);
    purged(&mut h, 0, vec![orphan], vec![]); // a duplicate report counts once
    assert!(h.o.is_aborted(orphan), "partition 1 has not purged yet");
    purged(&mut h, 1, vec![orphan, reader], vec![]);
    // Every partition purged `orphan`; `live` started before that, so the entry waits for it.
    assert!(h.o.is_aborted(orphan));
    assert_eq!(h.o.purge_work(low_water, 10).0, vec![reader], "a queued entry is not asked again");
    h.commit(1, live, &[]).unwrap();
    assert!(!h.o.is_aborted(orphan) && h.o.is_aborted(reader));
    assert!(h.log.iter().flat_map(|b| &b.records).any(|r| *r == messages::Record::Forgotten { start_ts: orphan }));
}

/// OM-8 and OM-4: a purged crash range is forgotten, and that is logged and replicated.
#[test]
fn a_purged_crash_range_is_forgotten_logged_and_replicated() {
    let mut h = Harness::new(small_config());
    h.connect(1);
    let committed = h.begin(1);
    let lost = h.begin(1);
    h.commit(1, committed, &[1]).unwrap();
    h.crash_and_recover();
    h.connect(1);
    h.connect(2);
    let range = h.o.crash_ranges()[0].clone();
    assert!(range.aborts(lost) && !range.aborts(committed));
    let low_water = h.o.t_min();
    assert_eq!(h.o.purge_work(low_water, 10).1, vec![range.clone()]);
    purged(&mut h, 0, vec![], vec![(range.after, range.upto)]);
    purged(&mut h, 1, vec![], vec![(range.after, range.upto)]);
    assert!(h.o.crash_ranges().is_empty(), "nothing in flight started before the report");
    let forgotten = messages::Record::CrashForgotten { after: range.after, upto: range.upto };
    assert!(h.log.iter().flat_map(|b| &b.records).any(|r| *r == forgotten));
    let (reader, delta) = h.begin_with_delta(2);
    assert!(delta.entries.contains(&messages::MetaChange::CrashForgotten { after: range.after, upto: range.upto }));
    assert!(h.o.in_snapshot(committed, reader));
    // Replay keeps it forgotten.
    h.crash_and_recover();
    assert_eq!(h.o.crash_ranges().len(), 1, "only the new crash's range");
    assert!(h.o.crash_ranges()[0].upto > range.upto);
}

/// OM-1 under OM-E4 resends: a resent begin gets the same timestamp while it is in flight.
#[test]
fn a_resent_begin_gets_the_same_timestamp_while_it_is_in_flight() {
    let mut h = Harness::new(small_config());
    h.connect(1);
    let began = |h: &mut Harness, id| match h.call(1, Request::BeginAs { id }).pop() {
        Some(Reply::Began { start_ts, .. }) => start_ts,
        other => panic!("{other:?}"),
    };
    let first = began(&mut h, 7);
    // The reply was lost; the resend must not leave `first` in flight forever.
    assert_eq!(began(&mut h, 7), first);
    assert_eq!(h.o.t_min(), first);
    let other = began(&mut h, 8);
    assert!(other > first);
    h.commit(1, first, &[1]).unwrap();
    // Once it finished, a late copy gets a fresh timestamp (which its client releases).
    let late = began(&mut h, 7);
    assert!(late > other && h.o.is_in_flight(late));
}

/// OM-E4b: a writer's fate is answered from durable state, for any reader — committed
/// at its `Tc`, aborted by the client or by a crash range (a commit in flight at the crash),
/// or not committed while in flight; one `Fates` request answers many writers, in order.
#[test]
fn fates_of_writers_are_final_and_decided_by_the_oracle_alone() {
    use super::messages::Fate;
    let mut h = Harness::new(small_config());
    h.connect(1);
    let committed = h.begin(1);
    let tc = h.commit(1, committed, &[1]).unwrap();
    let aborted = h.begin(1);
    h.call(1, Request::Abort { start_ts: aborted });
    let in_flight = h.begin(1);
    let asked = vec![committed, aborted, in_flight];
    let answer = h.call(1, Request::Fates { start_ts: asked.clone() });
    let expected = vec![(committed, Fate::Committed(tc)), (aborted, Fate::Aborted), (in_flight, Fate::NotCommitted)];
    assert_eq!(answer, vec![Reply::Fates { fates: expected }]);
    // The oracle crashes while `in_flight` is committing: recovery decides it (crash range),
    // and the committed writer keeps its Tc.
    h.crash_and_recover();
    h.connect(1);
    let answer = h.call(1, Request::Fates { start_ts: asked });
    let expected = vec![(committed, Fate::Committed(tc)), (aborted, Fate::Aborted), (in_flight, Fate::Aborted)];
    assert_eq!(answer, vec![Reply::Fates { fates: expected }]);
    assert!(matches!(h.commit(1, in_flight, &[2]), Err(CommitAbort::NotInFlight)), "a late commit cannot revive it");
}
