//! How a client library reaches a coordinator.

use crate::topology::Topology;
use litmus_core::{Error, NodeId};
use litmus_protocol::message::{RequestBody, ResponseBody};

/// One request at a time to one coordinator; blocking. Implemented by the embedded runtime
/// (channels) and the TCP runtime (a socket).
pub trait Transport: Send {
    fn request(&mut self, body: RequestBody) -> Result<ResponseBody, Error>;
    /// The engine the server runs, when the transport learns it (the TCP hello does).
    fn server_engine(&self) -> Option<&str> {
        None
    }
    /// The node the session's coordinator runs on and the cluster's layout, when the transport
    /// learns them (the TCP hello does): a benchmark attaches a client to its home's node.
    fn server_layout(&self) -> Option<(NodeId, Topology)> {
        None
    }
    /// Whether the transport runs every request of every session one at a time, in the order
    /// they are made (the simulator's): loaders then use one session, so a seed replays.
    fn serialises(&self) -> bool {
        false
    }
}
