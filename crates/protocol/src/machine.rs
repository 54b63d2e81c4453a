//! The state-machine model every role follows.
//!
//! A role (partition, coordinator, and later the Omid oracle) is a [`Machine`]: the runtime
//! hands it one [`Input`] and the current [`Time`], and it returns [`Effects`] — log records to
//! persist and messages to send. A machine does no I/O, reads no clock, spawns no thread and
//! draws randomness only from the seeded RNG it was built with, so the simulator can replay any
//! run from its seed (etcd raft's `Ready`, toydb's `step`).
//!
//! ## The runtime's one ordering rule: persist before send
//!
//! Each call to [`Machine::step`] may emit records and messages. The runtime must make every
//! record emitted so far durable (per its fsync policy) before it releases any message emitted in
//! the same or a later step. Messages may expose the effects of the records (an acknowledgement,
//! or a read of a just-written row), so a message must never overtake its records. The runtime
//! is free to batch the records of many steps into one write and one fsync (group commit).
//!
//! ## Recovery
//!
//! A restarted machine is rebuilt by [`Machine::recover`] from its last snapshot and the records
//! logged after it, before it sees any input. A crash loses unsynced records, and exactly those.

use crate::message::{Addr, Envelope, Message};
use litmus_core::{Error, Time};

/// What arrives at a machine.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// A message from another role.
    Message(Envelope),
    /// Time passed; the runtime ticks every machine at least every [`TICK_INTERVAL_MS`].
    Tick,
}

/// How often runtimes tick machines (timeouts are measured against `now`, not counted ticks).
pub const TICK_INTERVAL_MS: u64 = 5;

/// What a step produced. Records come before sends (see the module doc).
#[derive(Debug, Default)]
pub struct Effects {
    /// Serialized log records to append to this machine's log, in order.
    pub persist: Vec<Vec<u8>>,
    /// Messages to send once `persist` (and everything before it) is durable.
    pub send: Vec<Envelope>,
    /// Messages that depend on nothing this machine logged except its barrier records (see
    /// `barrier`): they leave once those are durable, ahead of the rest of the log. A
    /// coordinator's operations for a transaction that has logged nothing (an ACID one before
    /// its decision) go here, so they do not wait for the log syncs of other transactions'
    /// decisions. The TCP runtime sends them before its group flush (`Host::take_early`), the
    /// embedded one with the flush, the simulator as soon as the barriers are synced.
    pub send_now: Vec<Envelope>,
    /// The records of this step are barriers: no later message of this machine, `send_now`
    /// included, leaves before they are durable (a coordinator's epoch record, which every
    /// transaction id of the epoch relies on).
    pub barrier: bool,
    /// Events the engine counts for reports (e.g. Granola's CONFLICT retries): not state, not
    /// logged; a runtime adds them up (`Host::counts`) or drops them.
    pub counts: Vec<&'static str>,
    /// Units of work the step did, for the simulator's cost model (`litmus_runtime::cost`): keys a
    /// partition's store touched, keys a coordinator sent operations for and rows they
    /// answered. Not state, not logged.
    pub work: u64,
}

impl Effects {
    pub fn is_empty(&self) -> bool {
        self.persist.is_empty() && self.send.is_empty() && self.send_now.is_empty()
    }
    pub fn clear(&mut self) {
        self.persist.clear();
        self.send.clear();
        self.send_now.clear();
        self.barrier = false;
        self.counts.clear();
        self.work = 0;
    }

    /// Merges the partition requests and replies in `send[start..]` (one step's) that go from
    /// the same sender to the same coordinator or partition into one [`Message::Batch`], at the
    /// place of the first, keeping their order. Other messages, and a destination with one
    /// message, are left as they are. Messages to one destination keep their order (a message
    /// that does not batch closes the batch before it); messages to different destinations had
    /// none to keep.
    pub fn batch_sends(&mut self, start: usize) {
        batch(&mut self.send, start)
    }

    /// [`Effects::batch_sends`] for `send_now[start..]`.
    pub fn batch_sends_now(&mut self, start: usize) {
        batch(&mut self.send_now, start)
    }
}

/// [`Effects::batch_sends`] on one list of messages.
fn batch(send: &mut Vec<Envelope>, start: usize) {
    if send.len() <= start + 1 {
        return;
    }
    let tail = send.split_off(start);
    // (from, to) → index in `send` of the message (or batch) going there.
    let mut slots: Vec<(Addr, Addr, usize)> = Vec::new();
    for env in tail {
        let batchable = matches!(env.to, Addr::Coordinator(_) | Addr::Partition(_))
            && matches!(env.msg, Message::PartitionRequest(_) | Message::PartitionReply(_));
        let slot = slots.iter().find(|(from, to, _)| *from == env.from && *to == env.to).map(|s| s.2);
        match (batchable, slot) {
            (true, Some(i)) => {
                let Ok(item) = env.msg.into_batched() else { unreachable!("checked batchable") };
                let first = &mut send[i].msg;
                if let Message::Batch(items) = first {
                    items.push(item);
                } else {
                    let prev = std::mem::replace(first, Message::Batch(Vec::new()));
                    let Ok(prev) = prev.into_batched() else { unreachable!("only batchable messages get a slot") };
                    *first = Message::Batch(vec![prev, item]);
                }
            }
            (true, None) => {
                slots.push((env.from, env.to, send.len()));
                send.push(env);
            }
            (false, _) => {
                // Later requests and replies must not overtake it: they start a new batch.
                slots.retain(|(from, to, _)| !(*from == env.from && *to == env.to));
                send.push(env)
            }
        }
    }
}

/// A deterministic role. See the module doc for the contract.
pub trait Machine: Send {
    /// This machine's address.
    fn addr(&self) -> Addr;

    /// Rebuilds state from a snapshot and the records logged after it. Called once before the
    /// first step of a restarted machine. Corrupt input is an error (the node refuses to start).
    fn recover(&mut self, snapshot: Option<&[u8]>, records: &[Vec<u8>]) -> Result<(), Error>;

    /// Handles one input at time `now`.
    fn step(&mut self, now: Time, input: Input, out: &mut Effects);

    /// A snapshot of the state produced by every record emitted so far, or `None` when this
    /// role keeps no durable state. The runtime writes it and drops the log prefix it covers.
    /// Between `recover` and the first step that is the state the recovered snapshot and
    /// records imply, without what the restart logs at its first step (a coordinator's new
    /// epoch, Omid's crash range): a replica group's member that does not lead takes the
    /// group's snapshots from a machine so recovered, while its leader goes on logging.
    /// Takes `&mut self` so a machine may compact what it keeps for the next one.
    fn snapshot(&mut self) -> Option<Vec<u8>>;

    /// The runtime keeps no log for this machine and will never call [`Machine::snapshot`]
    /// (an embedded cluster without a data directory): the machine may stop keeping what only
    /// a snapshot needs. Called once, before the first step. By default nothing changes.
    fn never_snapshotted(&mut self) {}

    /// The node is about to stop: start handing over any leadership this machine holds (a
    /// replica of a replicated partition), so that its group need not wait out an election.
    /// Returns whether it still leads; the runtime goes on stepping and ticking it, for a
    /// bounded time, until none of its machines does. By default: leads nothing.
    fn hand_over(&mut self) -> bool {
        false
    }

    /// Messages that may keep this machine's followers from campaigning while the node's thread
    /// is busy ([`crate::Message::Fortify`]): the runtime sends them from another thread, only
    /// while this thread is in a long step, and asks for them again at every tick. By default
    /// none (only a replica group's leader has followers).
    fn fortify(&self) -> Vec<crate::Envelope> {
        Vec::new()
    }

    /// The machine's internal invariants, checked by the simulator after every step; `Err`
    /// names the first violation.
    fn check_invariants(&self) -> Result<(), String> {
        Ok(())
    }

    /// The machine itself, for checks that inspect its state (the simulator's tests downcast it).
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Batched, ClientResponse, PartitionReply, PartitionRequest, Payload};
    use litmus_core::{ClientId, NodeId, PartitionId, RequestId};

    const COORD: Addr = Addr::Coordinator(NodeId(0));
    const P0: Addr = Addr::Partition(PartitionId(0));
    const P1: Addr = Addr::Partition(PartitionId(1));

    fn request(to: Addr, n: u32) -> Envelope {
        Envelope { from: COORD, to, msg: Message::PartitionRequest(PartitionRequest { body: Payload::new(n) }) }
    }

    fn reply(from: Addr, n: u32) -> Envelope {
        let Addr::Partition(p) = from else { panic!("from a partition") };
        Envelope { from, to: COORD, msg: Message::PartitionReply(PartitionReply { from: p, body: Payload::new(n) }) }
    }

    fn client(n: u64) -> Envelope {
        let msg = Message::ClientResponse(ClientResponse {
            id: RequestId(n),
            result: Ok(crate::message::ResponseBody::Committed),
        });
        Envelope { from: COORD, to: Addr::Client(ClientId(1)), msg }
    }

    /// The numbers a message carries, in order (one for a single message, several for a batch).
    fn numbers(env: &Envelope) -> Vec<u32> {
        let body = |item: &Batched| match item {
            Batched::Request(r) => r.body.clone().decode::<u32>().unwrap(),
            Batched::Reply(r) => r.body.clone().decode::<u32>().unwrap(),
        };
        match &env.msg {
            Message::Batch(items) => items.iter().map(body).collect(),
            Message::PartitionRequest(r) => vec![r.body.clone().decode::<u32>().unwrap()],
            Message::PartitionReply(r) => vec![r.body.clone().decode::<u32>().unwrap()],
            Message::ClientResponse(r) => vec![r.id.0 as u32],
            other => panic!("unexpected {other:?}"),
        }
    }

    fn batched(send: Vec<Envelope>, start: usize) -> Vec<(Addr, Vec<u32>)> {
        let mut out = Effects { send, ..Effects::default() };
        out.batch_sends(start);
        out.send.iter().map(|e| (e.to, numbers(e))).collect()
    }

    #[test]
    fn one_message_per_destination_in_the_order_sent() {
        let send = vec![request(P0, 1), request(P1, 2), request(P0, 3), client(9), request(P0, 4), request(P1, 5)];
        let got = batched(send, 0);
        assert_eq!(got, vec![(P0, vec![1, 3, 4]), (P1, vec![2, 5]), (Addr::Client(ClientId(1)), vec![9])]);
    }

    #[test]
    fn a_lone_message_stays_a_plain_message() {
        let mut out = Effects { send: vec![request(P0, 1), request(P1, 2)], ..Effects::default() };
        out.batch_sends(0);
        assert!(out.send.iter().all(|e| matches!(e.msg, Message::PartitionRequest(_))), "{:?}", out.send);
    }

    #[test]
    fn replies_of_one_partition_step_go_back_together() {
        let got = batched(vec![reply(P0, 7), reply(P0, 8)], 0);
        assert_eq!(got, vec![(COORD, vec![7, 8])]);
        let mut out = Effects { send: vec![reply(P0, 7), reply(P0, 8)], ..Effects::default() };
        out.batch_sends(0);
        assert!(matches!(&out.send[..], [Envelope { msg: Message::Batch(items), .. }] if items.len() == 2));
    }

    #[test]
    fn messages_of_earlier_steps_are_left_alone() {
        let got = batched(vec![request(P0, 1), request(P0, 2), request(P0, 3)], 1);
        assert_eq!(got, vec![(P0, vec![1]), (P0, vec![2, 3])]);
    }

    #[test]
    fn a_message_that_does_not_batch_is_not_overtaken() {
        // A role message to a partition sits between two requests: the second must stay behind it.
        let role = Envelope { from: COORD, to: P0, msg: Message::Role(Payload::new(5u32)) };
        let mut out =
            Effects { send: vec![request(P0, 1), request(P0, 2), role, request(P0, 3)], ..Effects::default() };
        out.batch_sends(0);
        let kinds: Vec<String> = out
            .send
            .iter()
            .map(|e| match &e.msg {
                Message::Role(_) => "role".to_string(),
                _ => format!("{:?}", numbers(e)),
            })
            .collect();
        assert_eq!(kinds, vec!["[1, 2]", "role", "[3]"]);
    }
}
