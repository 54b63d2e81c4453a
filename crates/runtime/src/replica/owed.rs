//! Answers a replica still owes its clients after it stopped leading.
//!
//! A leader holds every message its machine sent until the proposal carrying the records
//! before it commits. When the leader steps down with proposals in flight, the group may still
//! commit them (the next leader's log holds them) or replace them with another leader's
//! entries. A client answer held that way, and one the machine gives only once everything it
//! logged is durable ([`super::Replicable::abandon`]: a commit whose decision is logged), is
//! kept here with the position of the entry it waits for:
//!
//! * the group commits that entry (same index, same term): the answer was right, and is sent;
//! * another leader's entry takes that index, or a snapshot covers it (its term unknown), or
//!   nothing settles it within [`OWED_MAX_TICKS`]: the client is told the outcome is unknown.
//!
//! So a client whose commit decision was being replicated when its coordinator's leadership
//! moved learns that it committed, instead of `outcome unknown`, whenever the group kept it.

use litmus_core::{Error, RequestId};
use litmus_protocol::message::ClientResponse;
use litmus_protocol::{Addr, Envelope, Message};
use litmus_replication::{LogIndex, LogPosition};

/// How long an owed answer waits for its entry to settle (ticks): ten election timeouts.
pub const OWED_MAX_TICKS: u64 = 10 * super::ELECTION_TICKS as u64;

#[derive(Default)]
pub(super) struct Owed {
    answers: Vec<(LogPosition, u64, Envelope)>,
}

impl Owed {
    /// Keeps `answer` (a client response; anything else is dropped, as held messages of a
    /// deposed leader always were: their senders resend) until the entry at `pos` settles.
    pub(super) fn owe(&mut self, pos: LogPosition, tick: u64, answer: Envelope) {
        if matches!(answer.msg, Message::ClientResponse(_)) {
            self.answers.push((pos, tick, answer));
        }
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }

    /// Whether an answer to `client`'s request `id` is kept here.
    pub(super) fn answers_request(&self, client: Addr, id: RequestId) -> bool {
        self.answers
            .iter()
            .any(|(_, _, a)| a.to == client && matches!(&a.msg, Message::ClientResponse(r) if r.id == id))
    }

    /// The group committed the entry at `index`, of `term` (`None`: a snapshot covers it and
    /// its term is not known): sends the answers it settles.
    pub(super) fn settle(&mut self, index: LogIndex, term: Option<u64>, out: &mut Vec<Envelope>) {
        if self.answers.iter().all(|(pos, _, _)| pos.index > index) {
            return;
        }
        let (due, kept) = std::mem::take(&mut self.answers).into_iter().partition(|(pos, _, _)| pos.index <= index);
        self.answers = kept;
        for (pos, _, answer) in due {
            let kept = pos.index == index && term == Some(pos.term);
            out.push(if kept { answer } else { unknown(answer) });
        }
    }

    /// Answers owed for longer than [`OWED_MAX_TICKS`] become "outcome unknown".
    pub(super) fn expire(&mut self, tick: u64, out: &mut Vec<Envelope>) {
        if self.answers.iter().all(|(_, since, _)| tick.saturating_sub(*since) <= OWED_MAX_TICKS) {
            return;
        }
        let (due, kept) = std::mem::take(&mut self.answers)
            .into_iter()
            .partition(|(_, since, _)| tick.saturating_sub(*since) > OWED_MAX_TICKS);
        self.answers = kept;
        out.extend(due.into_iter().map(|(_, _, answer)| unknown(answer)));
    }
}

/// The same answer, saying the outcome is unknown.
fn unknown(answer: Envelope) -> Envelope {
    let Message::ClientResponse(r) = answer.msg else { unreachable!("only client responses are owed") };
    let result = Err(Error::Unavailable {
        reason: "the coordinator's replica group changed leaders while it logged this commit; outcome unknown".into(),
        outcome_unknown: true,
    });
    Envelope { msg: Message::ClientResponse(ClientResponse { id: r.id, result }), ..answer }
}

#[cfg(test)]
mod tests {
    use super::*;
    use litmus_core::{ClientId, NodeId, RequestId};
    use litmus_protocol::message::ResponseBody;
    use litmus_protocol::Addr;

    fn answer(id: u64) -> Envelope {
        let msg = Message::ClientResponse(ClientResponse { id: RequestId(id), result: Ok(ResponseBody::Committed) });
        Envelope { from: Addr::Coordinator(NodeId(0)), to: Addr::Client(ClientId(1)), msg }
    }

    fn results(sent: &[Envelope]) -> Vec<(u64, bool)> {
        sent.iter()
            .map(|e| match &e.msg {
                Message::ClientResponse(r) => (r.id.0, r.result.is_ok()),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// Raft §3.5 (an entry is known by its index and term; a new leader overwrites a
    /// follower's entries that conflict with its own): the answer held for an entry is sent
    /// when the group commits that entry in the term it was proposed in, and becomes "outcome unknown" when another leader's entry takes its
    /// place or a snapshot covers it; answers for later entries wait.
    #[test]
    fn raft_3_5_an_owed_answer_is_sent_only_if_its_entry_commits_in_its_term() {
        let mut owed = Owed::default();
        owed.owe(LogPosition { index: 5, term: 2 }, 0, answer(1));
        owed.owe(LogPosition { index: 6, term: 2 }, 0, answer(2));
        owed.owe(LogPosition { index: 9, term: 2 }, 0, answer(3));
        let mut out = Vec::new();
        owed.settle(4, Some(2), &mut out);
        assert!(out.is_empty());
        owed.settle(5, Some(2), &mut out);
        assert_eq!(results(&out), [(1, true)]);
        out.clear();
        owed.settle(6, Some(3), &mut out);
        assert_eq!(results(&out), [(2, false)], "another leader's entry at index 6");
        out.clear();
        owed.settle(12, None, &mut out);
        assert_eq!(results(&out), [(3, false)], "a snapshot covers index 9: its term is unknown");
        assert!(owed.is_empty());
    }

    #[test]
    fn an_owed_answer_nothing_settles_expires_as_unknown() {
        let mut owed = Owed::default();
        owed.owe(LogPosition { index: 5, term: 2 }, 100, answer(1));
        let mut out = Vec::new();
        owed.expire(100 + OWED_MAX_TICKS, &mut out);
        assert!(out.is_empty());
        owed.expire(101 + OWED_MAX_TICKS, &mut out);
        assert_eq!(results(&out), [(1, false)]);
    }

    #[test]
    fn only_client_answers_are_owed() {
        let mut owed = Owed::default();
        let msg = Message::Raft(Vec::new());
        owed.owe(LogPosition { index: 5, term: 2 }, 0, Envelope { msg, ..answer(1) });
        assert!(owed.is_empty());
    }
}
