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
}

impl Effects {
    pub fn is_empty(&self) -> bool {
        self.persist.is_empty() && self.send.is_empty()
    }
    pub fn clear(&mut self) {
        self.persist.clear();
        self.send.clear();
    }

    /// Merges the partition requests and replies in `send[start..]` (one step's) that go from
    /// the same sender to the same coordinator or partition into one [`Message::Batch`], at the
    /// place of the first, keeping their order. Other messages, and a destination with one
    /// message, are left as they are. Messages to one destination keep their order (a message
    /// that does not batch closes the batch before it); messages to different destinations had
    /// none to keep.
    pub fn batch_sends(&mut self, start: usize) {
        if self.send.len() <= start + 1 {
            return;
        }
        let tail = self.send.split_off(start);
        // (from, to) → index in `send` of the message (or batch) going there.
        let mut slots: Vec<(Addr, Addr, usize)> = Vec::new();
        for env in tail {
            let batchable = matches!(env.to, Addr::Coordinator(_) | Addr::Partition(_))
                && matches!(env.msg, Message::PartitionRequest(_) | Message::PartitionReply(_));
            let slot = slots.iter().find(|(from, to, _)| *from == env.from && *to == env.to).map(|s| s.2);
            match (batchable, slot) {
                (true, Some(i)) => {
                    let Ok(item) = env.msg.into_batched() else { unreachable!("checked batchable") };
                    let first = &mut self.send[i].msg;
                    if let Message::Batch(items) = first {
                        items.push(item);
                    } else {
                        let prev = std::mem::replace(first, Message::Batch(Vec::new()));
                        let Ok(prev) = prev.into_batched() else { unreachable!("only batchable messages get a slot") };
                        *first = Message::Batch(vec![prev, item]);
                    }
                }
                (true, None) => {
                    slots.push((env.from, env.to, self.send.len()));
                    self.send.push(env);
                }
                (false, _) => {
                    // Later requests and replies must not overtake it: they start a new batch.
                    slots.retain(|(from, to, _)| !(*from == env.from && *to == env.to));
                    self.send.push(env)
                }
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
    /// Takes `&mut self` so a machine may compact what it keeps for the next one.
    fn snapshot(&mut self) -> Option<Vec<u8>>;

    /// The runtime keeps no log for this machine and will never call [`Machine::snapshot`]
    /// (an embedded cluster without a data directory): the machine may stop keeping what only
    /// a snapshot needs. Called once, before the first step. By default nothing changes.
    fn never_snapshotted(&mut self) {}

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
