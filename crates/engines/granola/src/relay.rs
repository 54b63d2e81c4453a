//! `sinfonia`'s coordinator node (§6's baseline: lock-based two-phase commit with distributed
//! transactions sent through a single coordinator).
//!
//! One machine, role 0 ([`RELAY_ROLE`], on node 0), through which every distributed
//! transaction passes twice: the client proxy sends it the request, which it forwards to every
//! participant (phase one: prepare, under locks, as Granola's locking mode); each participant
//! sends it its vote, which it forwards to the other participants (phase two: once a
//! participant holds every vote it commits or aborts). So a distributed transaction costs the
//! same message delays as two-phase commit with a coordinator, and all of them load one node.
//!
//! It keeps no state and logs nothing: a participant logs its vote before sending it
//! (persist before send), resends it through the relay while it lacks a peer's, and answers a
//! peer's resent vote with its own; the client proxy resends requests. A restarted relay
//! therefore loses nothing.

use super::Request;
use litmus_core::{Error, Time};
use litmus_protocol::machine::{Effects, Input, Machine};
use litmus_protocol::message::{Addr, Envelope, Message, PartitionRequest, Payload, RoleId};

/// The relay's role id (on node `0 mod nodes`).
pub const RELAY_ROLE: RoleId = RoleId(0);
/// The relay's address.
pub const RELAY: Addr = Addr::Role(RELAY_ROLE);

/// The coordinator node of `sinfonia`.
#[derive(Debug, Default)]
pub struct Relay {
    /// Requests and votes forwarded (for tests and traces).
    pub forwarded: u64,
}

impl Relay {
    fn forward(&mut self, body: Payload, out: &mut Effects) {
        let Ok(msg) = body.decode::<Request>() else { return }; // garbage: dropped
        let (req, from) = match &msg {
            Request::Txn(req) => (req, None),
            Request::Vote { from, req, .. } => (req, Some(*from)),
        };
        for p in req.participants() {
            if Some(p) != from {
                let msg = Message::PartitionRequest(PartitionRequest { body: Payload::new(msg.clone()) });
                out.send.push(Envelope { from: RELAY, to: Addr::Partition(p), msg });
                self.forwarded += 1;
            }
        }
    }
}

impl Machine for Relay {
    fn addr(&self) -> Addr {
        RELAY
    }

    fn recover(&mut self, _snapshot: Option<&[u8]>, _records: &[Vec<u8>]) -> Result<(), Error> {
        Ok(())
    }

    fn step(&mut self, _now: Time, input: Input, out: &mut Effects) {
        let Input::Message(env) = input else { return };
        match env.msg {
            // From a client proxy: a distributed transaction's request.
            Message::Role(body) => self.forward(body, out),
            // From a participant: its vote.
            Message::PartitionReply(r) => self.forward(r.body, out),
            _ => {}
        }
    }

    fn snapshot(&mut self) -> Option<Vec<u8>> {
        None
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
