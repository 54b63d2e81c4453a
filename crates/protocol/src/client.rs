//! The client role: request ids, outstanding requests, and timeouts, as a pure state machine.
//!
//! The embedded and TCP client libraries and the simulator's workload clients all wrap a
//! [`ClientSession`]. A request is never retransmitted (a procedure is not idempotent); one that
//! gets no answer in time fails with `Unavailable { outcome_unknown: true }`, and the caller
//! decides (a read-only call may simply be retried).

use crate::message::{Addr, ClientRequest, ClientResponse, Envelope, Message, RequestBody, ResponseBody};
use litmus_core::{ClientId, Error, RequestId, Time};
use std::time::Duration;

/// Default time a client waits for an answer.
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct ClientSession {
    id: ClientId,
    coordinator: Addr,
    next_request: u64,
    timeout: Duration,
    /// Deadline of each outstanding request, in request order. A vector, not a map: a session
    /// has one or a few requests out, and a map allocated a node for every request a
    /// benchmark terminal made.
    outstanding: Vec<(RequestId, Time)>,
}

impl ClientSession {
    pub fn new(id: ClientId, coordinator: Addr, timeout: Duration) -> Self {
        ClientSession { id, coordinator, next_request: 0, timeout, outstanding: Vec::new() }
    }

    pub fn id(&self) -> ClientId {
        self.id
    }

    pub fn addr(&self) -> Addr {
        Addr::Client(self.id)
    }

    /// The coordinator this session sends its requests to.
    pub fn coordinator(&self) -> Addr {
        self.coordinator
    }

    /// Sends the next requests to another coordinator (the client reconnected elsewhere: its
    /// coordinator's node is down). Answers to requests already sent are still matched.
    pub fn fail_over(&mut self, coordinator: Addr) {
        self.coordinator = coordinator;
    }

    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// Starts a request; the envelope is to be sent to the coordinator.
    pub fn request(&mut self, now: Time, body: RequestBody) -> (RequestId, Envelope) {
        self.next_request += 1;
        let id = RequestId(self.next_request);
        self.outstanding.push((id, now + self.timeout));
        let msg = Message::ClientRequest(ClientRequest { id, body });
        (id, Envelope { from: self.addr(), to: self.coordinator, msg })
    }

    /// Matches a response to its request. Unknown or duplicate responses (a request that
    /// already timed out, a duplicated packet) yield `None`.
    pub fn on_response(&mut self, resp: ClientResponse) -> Option<(RequestId, Result<ResponseBody, Error>)> {
        self.remove(resp.id).then_some((resp.id, resp.result))
    }

    /// Removes request `id`; whether it was outstanding.
    fn remove(&mut self, id: RequestId) -> bool {
        match self.outstanding.iter().position(|(r, _)| *r == id) {
            Some(i) => {
                self.outstanding.remove(i);
                true
            }
            None => false,
        }
    }

    /// Gives up on a request without an answer: a later response to it is ignored, and it
    /// never expires through [`ClientSession::tick`].
    pub fn forget(&mut self, id: RequestId) {
        self.remove(id);
    }

    /// Fails every request whose deadline passed.
    pub fn tick(&mut self, now: Time) -> Vec<(RequestId, Error)> {
        if self.outstanding.iter().all(|(_, d)| *d > now) {
            return Vec::new();
        }
        let mut expired = Vec::new();
        self.outstanding.retain(|&(id, d)| {
            if d <= now {
                expired.push((
                    id,
                    Error::Unavailable { reason: "no response before the deadline".into(), outcome_unknown: true },
                ));
            }
            d > now
        });
        expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use litmus_core::NodeId;

    #[test]
    fn responses_match_requests_once_and_deadlines_expire() {
        let mut s = ClientSession::new(ClientId(1), Addr::Coordinator(NodeId(0)), Duration::from_millis(10));
        let (a, _) =
            s.request(Time::ZERO, RequestBody::Begin { isolation: Default::default(), retrying_for: Duration::ZERO });
        let (b, _) =
            s.request(Time::ZERO, RequestBody::Begin { isolation: Default::default(), retrying_for: Duration::ZERO });
        assert_ne!(a, b);
        let resp = ClientResponse { id: a, result: Ok(ResponseBody::Committed) };
        assert!(s.on_response(resp.clone()).is_some());
        assert!(s.on_response(resp).is_none(), "duplicate ignored");
        assert!(s.tick(Time::from_millis(5)).is_empty());
        let expired = s.tick(Time::from_millis(10));
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].0, b);
        assert!(!expired[0].1.is_retryable());
        assert_eq!(s.outstanding(), 0);
    }

    #[test]
    fn a_forgotten_request_neither_expires_nor_matches_a_late_response() {
        let mut s = ClientSession::new(ClientId(1), Addr::Coordinator(NodeId(0)), Duration::from_millis(10));
        let (a, _) =
            s.request(Time::ZERO, RequestBody::Begin { isolation: Default::default(), retrying_for: Duration::ZERO });
        s.forget(a);
        assert!(s.tick(Time::from_millis(50)).is_empty());
        assert!(s.on_response(ClientResponse { id: a, result: Ok(ResponseBody::Committed) }).is_none());
        assert_eq!(s.outstanding(), 0);
    }
}
