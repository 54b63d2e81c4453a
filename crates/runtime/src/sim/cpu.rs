//! The CPU model ([`CpuModel`]): the simulator as a measuring instrument.
//!
//! Each node has `cores_per_node` cores. Every machine step — a message handled, a tick —
//! takes the earliest free core of its node for the step's cost from a measured
//! [`CostTable`] ([`crate::cost`]: by role and message kind and the work the step reported, plus
//! the runtime's own per-step overhead); a step that logged records also pays one flush. Steps start in arrival order
//! (one FIFO run queue per node), so a node whose cores are all busy queues its messages and
//! the queueing shows in virtual time, as on real hardware.
//!
//! A step's state change happens when it starts; the messages it emits leave when it ends
//! (`Send` events at the end time), and its records sync `cost + flush + fsync_latency` after
//! it starts (messages that need them still wait: persist before send). A node that crashes
//! before a step ends sends nothing of that step. Network delay comes from [`super::NetConfig`]
//! unchanged; clients are free (they live on their own host).
//!
//! Off by default ([`super::SimConfig::cpu`] is `None`): the fault-injection simulations keep
//! their meaning; `runtime/tests/sim_cpu.rs` runs them with costs on as well.
//!
//! Not modelled (yet): cache effects and lock contention inside a real process, network
//! bandwidth (every message is a latency draw, whatever its size), and the clients' CPU.

use crate::cost::CostTable;
use std::sync::Arc;

/// K cores per node, charged from a cost table.
#[derive(Clone, Debug)]
pub struct CpuModel {
    pub cores_per_node: u32,
    pub costs: Arc<CostTable>,
}

/// Most cores per simulated node.
pub const CORES_PER_NODE_MAX: u32 = 1024;

impl CpuModel {
    /// `cores_per_node` cores charged from `costs`; zero or more than [`CORES_PER_NODE_MAX`]
    /// cores is an error.
    pub fn new(cores_per_node: u32, costs: Arc<CostTable>) -> Result<CpuModel, litmus_core::InvalidInput> {
        if cores_per_node == 0 || cores_per_node > CORES_PER_NODE_MAX {
            return Err(litmus_core::InvalidInput::Config(format!(
                "cores per node must be in 1..={CORES_PER_NODE_MAX}, got {cores_per_node}"
            )));
        }
        Ok(CpuModel { cores_per_node, costs })
    }
}
