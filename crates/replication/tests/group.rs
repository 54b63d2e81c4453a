//! One member driven by hand: the API's contracts, bad input, chunking, seeded jitter.

use litmus_replication::*;

fn voters(n: u64) -> Vec<ReplicaId> {
    (1..=n).map(ReplicaId).collect()
}

fn member(id: u64, n: u64, seed: u64) -> ReplicaGroup {
    ReplicaGroup::start(GroupConfig::new(ReplicaId(id), voters(n)), Durable::default(), seed).expect("starts")
}

/// `n` members started fresh, each config adjusted by `tune` first.
fn members_with(n: u64, tune: impl Fn(&mut GroupConfig)) -> Vec<ReplicaGroup> {
    (1..=n)
        .map(|i| {
            let mut c = GroupConfig::new(ReplicaId(i), voters(n));
            tune(&mut c);
            ReplicaGroup::start(c, Durable::default(), i - 1).unwrap()
        })
        .collect()
}

/// Delivers every message among `ms` until quiet, dropping those `keep` refuses (from, to);
/// `on_ready` sees each member's `Ready` (by index) before its messages go out.
fn deliver(
    ms: &mut [ReplicaGroup],
    keep: &dyn Fn(ReplicaId, ReplicaId) -> bool,
    on_ready: &mut dyn FnMut(usize, &Ready),
) {
    loop {
        let mut inflight = Vec::new();
        for (i, m) in ms.iter_mut().enumerate() {
            let from = m.id();
            let ready = m.take_ready();
            on_ready(i, &ready);
            inflight.extend(ready.messages.into_iter().filter(|w| keep(from, w.to)));
        }
        if inflight.is_empty() {
            return;
        }
        for w in inflight {
            let to = (w.to.0 - 1) as usize;
            ms[to].step_bytes(&w.encode());
        }
    }
}

/// `ticks` rounds of: tick every member, then [`deliver`] until quiet.
fn settle_with(ms: &mut [ReplicaGroup], ticks: usize, keep: &dyn Fn(ReplicaId, ReplicaId) -> bool) {
    for _ in 0..ticks {
        for m in ms.iter_mut() {
            m.tick();
        }
        deliver(ms, keep, &mut |_, _| {});
    }
}

/// Delivers every message among `ms` until quiet; `ticks` ticks each member first.
fn settle(ms: &mut [ReplicaGroup], ticks: usize) {
    settle_with(ms, ticks, &|_, _| true);
}

fn elect(n: u64) -> Vec<ReplicaGroup> {
    let mut ms: Vec<ReplicaGroup> = (1..=n).map(|i| member(i, n, 42 + i)).collect();
    settle(&mut ms, 40);
    assert_eq!(ms.iter().filter(|m| m.role() == Role::Leader).count(), 1, "one leader");
    ms
}

#[test]
fn raft_5_2_followers_refuse_proposals_and_name_the_leader() {
    let mut ms = elect(3);
    let leader = ms.iter().find(|m| m.role() == Role::Leader).unwrap().id();
    for m in ms.iter_mut().filter(|m| m.id() != leader) {
        let e = m.propose(b"x".to_vec()).unwrap_err();
        assert_eq!(e, Error::NotLeader { hint: Some(leader) });
        assert!(e.is_retryable());
        assert!(matches!(m.read(1), Err(Error::NotLeader { .. })));
    }
}

#[test]
fn a_proposal_commits_at_the_index_and_term_returned() {
    let mut ms = elect(3);
    let l = ms.iter().position(|m| m.role() == Role::Leader).unwrap();
    let at = ms[l].propose(b"hello".to_vec()).unwrap();
    settle(&mut ms, 3);
    assert!(ms[l].raft_commit_index() >= at.index);
    assert_eq!(ms[l].term(), at.term);
}

#[test]
fn bad_input_is_counted_never_a_panic() {
    let mut m = member(1, 3, 1);
    m.step_bytes(&[0xff, 0x13, 0x37]);
    m.step_bytes(&[]);
    let good = WireMessage {
        from: ReplicaId(2),
        to: ReplicaId(1),
        stamp: None,
        echo: None,
        rejoined: false,
        body: WireBody::Raft(vec![0xff; 9]),
    };
    m.step(good.clone());
    assert_eq!(m.stats().undecodable, 3);
    m.step(WireMessage { to: ReplicaId(3), ..good.clone() }); // not for us
    m.step(WireMessage { from: ReplicaId(9), ..good.clone() }); // not a voter
    m.step(WireMessage { from: ReplicaId(1), ..good.clone() }); // ourselves
    assert_eq!(m.stats().refused, 3);
    // Truncations and bit flips of real frames.
    let mut ms = elect(3);
    let l = ms.iter().position(|m| m.role() == Role::Leader).unwrap();
    ms[l].propose(vec![7; 100]).unwrap();
    let frames: Vec<Vec<u8>> = ms[l].take_ready().messages.iter().map(|w| w.encode()).collect();
    assert!(!frames.is_empty());
    let mut victim = member(2, 3, 5);
    for f in &frames {
        for cut in 0..f.len() {
            victim.step_bytes(&f[..cut]);
        }
    }
    assert!(victim.stats().undecodable > 0);
}

#[test]
fn proposals_are_bounded_and_configs_validated() {
    let mut ms = elect(1);
    let max = ms[0].config().proposal_bytes_max;
    assert_eq!(ms[0].propose(vec![1; max + 1]), Err(Error::ProposalTooLarge { bytes: max + 1, max }));
    assert!(matches!(ms[0].propose(Vec::new()), Err(Error::Invalid(_))));
    let bad = |f: &dyn Fn(&mut GroupConfig)| {
        let mut c = GroupConfig::new(ReplicaId(1), voters(3));
        f(&mut c);
        ReplicaGroup::start(c, Durable::default(), 0).err()
    };
    assert!(matches!(bad(&|c| c.id = ReplicaId(4)), Some(Error::Config(_))));
    assert!(matches!(bad(&|c| c.voters.push(ReplicaId(2))), Some(Error::Config(_))));
    assert!(matches!(bad(&|c| c.lease_margin_ticks = 0), Some(Error::Config(_))));
    assert!(matches!(bad(&|c| c.snapshot_chunk_bytes = FRAME_BYTES_MAX), Some(Error::Config(_))));
    assert!(matches!(bad(&|c| c.heartbeat_ticks = c.election_ticks), Some(Error::Config(_))));
}

#[test]
fn a_restart_with_a_commit_past_the_log_is_refused() {
    let d = Durable { hard_state: HardState { term: 1, vote: 1, raft_commit_index: 5 }, ..Durable::default() };
    let r = ReplicaGroup::start(GroupConfig::new(ReplicaId(1), voters(3)), d, 0);
    assert!(matches!(r.err(), Some(Error::Corrupt(_))));
}

#[test]
fn election_jitter_comes_from_the_seed() {
    // Same seeds: the same member wins at the same tick; raft's own thread RNG plays no part.
    let run = |base: u64| {
        let mut ms: Vec<ReplicaGroup> = (1..=5).map(|i| member(i, 5, base + i)).collect();
        let mut t = 0;
        while ms.iter().all(|m| m.role() != Role::Leader) {
            settle(&mut ms, 1);
            t += 1;
        }
        (t, ms.iter().find(|m| m.role() == Role::Leader).unwrap().id())
    };
    for base in [0, 100, 200] {
        assert_eq!(run(base), run(base));
    }
}

#[test]
fn raft_3_10_leadership_handover_moves_the_leader_and_ends_the_lease() {
    let mut ms = elect(3);
    let l = ms.iter().position(|m| m.role() == Role::Leader).unwrap();
    for i in 0..5 {
        ms[l].propose(vec![i; 10]).unwrap();
    }
    settle(&mut ms, 5);
    assert!(ms[l].holds_lease());
    let to = ms[l].hand_over().unwrap().expect("a transferee");
    assert!(!ms[l].holds_lease(), "no lease reads once a handover starts");
    assert_eq!(ms[l].propose(b"late".to_vec()), Err(Error::TransferInProgress));
    settle(&mut ms, 5);
    let new = ms.iter().find(|m| m.role() == Role::Leader).expect("a new leader");
    assert_eq!(new.id(), to);
    assert!(ms.iter().filter(|m| m.id() != to).all(|m| m.role() == Role::Follower));
    let mut f = member(2, 3, 0);
    assert_eq!(f.hand_over(), Ok(None));
}

/// [`settle`], every message to or from `cut` dropped.
fn settle_without(ms: &mut [ReplicaGroup], cut: ReplicaId, ticks: usize) {
    settle_with(ms, ticks, &|from, to| from != cut && to != cut);
}

/// A transfer to a member that never hears of it fails: raft abandons it after an election
/// timeout, but the leader revoked its lease for the term and could never serve again, so it
/// steps down after `TRANSFER_ABANDON_ELECTIONS` election timeouts and a member that can serve
/// is elected.
#[test]
fn raft_3_10_a_leader_whose_transfer_failed_steps_down_for_an_election() {
    let mut ms = elect(3);
    let l = ms.iter().position(|m| m.role() == Role::Leader).unwrap();
    let (old, old_term) = (ms[l].id(), ms[l].term());
    let to = ms.iter().map(|m| m.id()).find(|&id| id != old).unwrap();
    ms[l].transfer_leadership(to).unwrap();
    let et = GroupConfig::new(ReplicaId(1), voters(3)).election_ticks;
    settle_without(&mut ms, to, et * 2);
    assert_eq!(ms[l].role(), Role::Leader, "still leading once raft abandoned the transfer");
    assert!(!ms[l].holds_lease(), "but serving nothing");
    settle_without(&mut ms, to, et * (TRANSFER_ABANDON_ELECTIONS + 4));
    let leader = ms.iter().find(|m| m.role() == Role::Leader).expect("a leader after the failed transfer");
    assert!(leader.term() > old_term, "a new election was held");
    settle(&mut ms, 10);
    let leader = ms.iter().find(|m| m.role() == Role::Leader).expect("a leader");
    assert!(leader.holds_lease(), "the group serves again");
}

#[test]
fn snapshots_travel_in_chunks_under_the_frame_limit() {
    let mut ms = members_with(3, |c| {
        c.snapshot_every_entries = 10;
        c.snapshot_log_bytes_min = 0;
        c.compact_keep_entries = 0;
    });
    settle(&mut ms, 40);
    let l = ms.iter().position(|m| m.role() == Role::Leader).unwrap();
    let lagging = (l + 1) % 3;
    // The lagging member hears nothing while the others commit and compact.
    let big = vec![3u8; 3 * SNAPSHOT_CHUNK_BYTES_DEFAULT + 1000];
    for round in 0..12 {
        ms[l].propose(vec![round; 1000]).unwrap();
        for _ in 0..3 {
            for (i, m) in ms.iter_mut().enumerate() {
                if i != lagging {
                    m.tick();
                }
            }
            let mut msgs = Vec::new();
            for (i, m) in ms.iter_mut().enumerate() {
                let rd = m.take_ready();
                if rd.snapshot_wanted.is_some() {
                    let at = m.applied_index();
                    m.snapshot_taken(at, big.clone()).unwrap();
                }
                if i != lagging {
                    msgs.extend(rd.messages.into_iter().filter(|w| w.to.0 as usize != lagging + 1));
                }
            }
            for w in msgs {
                ms[(w.to.0 - 1) as usize].step(w);
            }
        }
    }
    // Reconnect: the leader must send the snapshot, chunked.
    let mut chunks = 0;
    let mut installed = false;
    for _ in 0..60 {
        for m in ms.iter_mut() {
            m.tick();
        }
        let mut msgs = Vec::new();
        for m in ms.iter_mut() {
            let rd = m.take_ready();
            installed |= rd.apply.iter().any(|a| matches!(a, Apply::Snapshot { data, .. } if *data == big));
            msgs.extend(rd.messages);
        }
        for w in msgs {
            let bytes = w.encode();
            assert!(bytes.len() < FRAME_BYTES_MAX);
            if let WireBody::SnapshotChunk(c) = &w.body {
                assert!(c.data.len() <= SNAPSHOT_CHUNK_BYTES_DEFAULT);
                chunks += 1;
            }
            ms[(w.to.0 - 1) as usize].step_bytes(&bytes);
        }
    }
    assert!(chunks >= 2, "{chunks} chunks");
    assert!(installed, "the lagging member installed the snapshot");
    assert_eq!(ms[lagging].raft_commit_index(), ms[l].raft_commit_index());
}

#[test]
fn raft_6_4_1_a_member_just_booted_withholds_its_vote_for_an_election_timeout() {
    // Member 2 campaigns; member 1 has just restarted (it had seen term 1, so it may have
    // promised a leader a lease) and forgot any promise it made.
    let restarted = Durable { hard_state: HardState { term: 1, vote: 0, raft_commit_index: 0 }, ..Durable::default() };
    let mut m1 = ReplicaGroup::start(GroupConfig::new(ReplicaId(1), voters(3)), restarted, 1).expect("starts");
    let mut m2 = member(2, 3, 2);
    while m2.role() != Role::Candidate {
        m2.tick();
    }
    let asks: Vec<WireMessage> = m2.take_ready().messages.into_iter().filter(|w| w.to == ReplicaId(1)).collect();
    assert!(!asks.is_empty());
    for w in &asks {
        m1.step(w.clone());
    }
    assert_eq!(m1.stats().votes_withheld, asks.len() as u64);
    assert!(m1.take_ready().messages.is_empty(), "no vote while quiet");
    for _ in 0..m1.config().election_ticks {
        m1.tick();
    }
    m1.take_ready();
    for w in asks {
        m1.step(w);
    }
    assert!(!m1.take_ready().messages.is_empty(), "answers once the quiet period is over");
}

/// Raft §6.4.1's boot rule guards promises; a member that has never seen a term made none, so
/// a brand-new group elects at once (its preferred leader campaigns on its first tick).
#[test]
fn raft_6_4_1_a_brand_new_member_votes_at_once_and_a_new_group_elects_its_campaigner() {
    let mut ms: Vec<ReplicaGroup> = (1..=3).map(|id| member(id, 3, id)).collect();
    assert!(ms[0].campaign_if_new(), "a member that never saw a term campaigns");
    deliver(&mut ms, &|_, _| true, &mut |_, _| {});
    assert_eq!(ms[0].role(), Role::Leader, "elected without waiting out an election timeout");
    assert!(!ms[1].campaign_if_new(), "a member that saw a term does not");
}

#[test]
fn a_member_that_lost_its_data_never_campaigns_nor_votes() {
    let cfg = GroupConfig::new(ReplicaId(1), voters(3));
    let mut m = ReplicaGroup::rejoin_after_data_loss(cfg.clone(), 7).unwrap();
    for _ in 0..1000 {
        m.tick();
    }
    assert_eq!(m.role(), Role::Follower);
    assert!(m.take_ready().messages.is_empty());
    // And a restart from its durable state keeps it so.
    let d = Durable { abstaining: true, ..Durable::default() };
    let m = ReplicaGroup::start(cfg, d, 8).unwrap();
    assert!(m.is_abstaining());
}

/// Log compaction (Raft dissertation ch. 5, when to snapshot: once the log outgrows the last
/// snapshot). A periodic snapshot re-encodes the whole state, so it is asked for only once the
/// entries applied since the last one add up to the last snapshot's size: its cost per logged byte
/// stays bounded however large the state is.
#[test]
fn raft_log_compaction_a_snapshot_is_asked_for_once_the_log_outgrew_the_last_one() {
    let mut ms = members_with(3, |c| {
        c.snapshot_every_entries = 1;
        c.snapshot_log_bytes_min = 0;
    });
    settle(&mut ms, 40);
    let l = ms.iter().position(|m| m.role() == Role::Leader).unwrap();
    ms[l].propose(vec![1; 10]).unwrap();
    settle(&mut ms, 2);
    let applied = ms[l].applied_index();
    ms[l].snapshot_taken(applied, vec![0; 1000]).unwrap();
    let mut asked_after = None;
    for i in 1..=200u32 {
        ms[l].propose(vec![2; 100]).unwrap();
        for m in ms.iter_mut() {
            m.tick();
        }
        let mut asked = false;
        deliver(&mut ms, &|_, _| true, &mut |i, ready| asked |= i == l && ready.snapshot_wanted.is_some());
        if asked {
            asked_after = Some(i);
            break;
        }
    }
    let asked = asked_after.expect("a snapshot is asked for once the log outgrew the last one");
    assert!((10..=11).contains(&asked), "asked after {asked} entries of 100 bytes; the last snapshot had 1,000");
}

/// Raft §6.4.1 (a lease rests on clocks) with raft's own timers on running time
/// (`ReplicaGroup::advance`): a stall its member's thread sat through counts in full on the
/// lease clock, but only as the ticks it is given on raft's election and heartbeat timers. A
/// follower handed a stall of ten election timeouts as 4 raft ticks does not campaign (it has
/// not yet read the heartbeats that queued meanwhile); handed it in full, it does. A leader
/// handed it as 4 ticks keeps leading, but its lease is over, as real time says.
#[test]
fn raft_6_4_1_a_stall_counts_in_full_for_the_lease_and_little_for_raft_timers() {
    let mut ms = elect(3);
    let leader = ms.iter().position(|m| m.role() == Role::Leader).unwrap();
    let follower = (leader + 1) % 3;
    let (term, stall) = (ms[follower].term(), 10 * 20);
    assert!(ms[leader].holds_lease());

    ms[follower].advance(stall, 4);
    assert_eq!((ms[follower].role(), ms[follower].term()), (Role::Follower, term), "4 raft ticks: no campaign");
    assert!(ms[follower].take_ready().messages.is_empty(), "no vote asked for");
    ms[follower].advance(stall, stall);
    assert_ne!(ms[follower].role(), Role::Follower, "the whole stall on raft's timers: it campaigns");

    ms[leader].advance(stall, 4);
    assert_eq!(ms[leader].role(), Role::Leader, "4 raft ticks: no check-quorum step-down");
    assert!(!ms[leader].holds_lease(), "the lease clock counted the whole stall");
}
