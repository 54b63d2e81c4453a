//! Where each role runs: nodes, partitions, coordinators.
//!
//! A cluster has `nodes` servers and `partitions` partitions. Partition `p` lives on node
//! `p mod nodes`; every node runs one coordinator. Clients live on their own hosts. All three
//! runtimes use the same layout, so a workload runs unchanged on any of them.

use litmus_core::{Catalog, InvalidInput, NodeId, PartitionId};
use litmus_protocol::{Addr, Coordinator, CoordinatorConfig, EngineKind, Machine, Partition, Registry};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Largest number of partitions a cluster may have.
pub const PARTITIONS_MAX: u32 = 4096;
/// Largest number of nodes a cluster may have.
pub const NODES_MAX: u32 = 256;

/// A host on the (real or simulated) network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Host {
    Node(NodeId),
    /// Client machines (never crash in the simulator).
    Clients,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    pub nodes: u32,
    pub partitions: u32,
}

impl Topology {
    pub fn new(nodes: u32, partitions: u32) -> Result<Topology, InvalidInput> {
        if nodes == 0 || nodes > NODES_MAX {
            return Err(InvalidInput::Config(format!("nodes must be in 1..={NODES_MAX}, got {nodes}")));
        }
        if partitions == 0 || partitions > PARTITIONS_MAX {
            return Err(InvalidInput::Config(format!("partitions must be in 1..={PARTITIONS_MAX}, got {partitions}")));
        }
        Ok(Topology { nodes, partitions })
    }

    pub fn node_of(&self, p: PartitionId) -> NodeId {
        NodeId(p.0 % self.nodes)
    }

    pub fn host_of(&self, addr: Addr) -> Host {
        match addr {
            Addr::Partition(p) => Host::Node(self.node_of(p)),
            Addr::Coordinator(n) => Host::Node(n),
            Addr::Client(_) => Host::Clients,
            // An engine's role (placed by the one rule; a role the engine does not run on that
            // node, e.g. Omid's standby in a one-node cluster, loses its messages there).
            Addr::Role(r) => Host::Node(r.node(self.nodes)),
        }
    }

    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> {
        (0..self.nodes).map(NodeId)
    }

    pub fn partitions_of(&self, node: NodeId) -> Vec<PartitionId> {
        (0..self.partitions).map(PartitionId).filter(|&p| self.node_of(p) == node).collect()
    }

    /// The partition a coordinator reads replicated tables from: its first local one.
    pub fn preferred(&self, node: NodeId) -> PartitionId {
        self.partitions_of(node).first().copied().unwrap_or(PartitionId(0))
    }

    /// The coordinator a client connects to (round robin by client id).
    pub fn coordinator_for(&self, client: u64) -> Addr {
        Addr::Coordinator(NodeId((client % self.nodes as u64) as u32))
    }
}

/// Everything needed to build the machines of a cluster.
#[derive(Clone)]
pub struct ClusterSpec {
    pub engine: EngineKind,
    pub topology: Topology,
    pub catalog: Arc<Catalog>,
    pub registry: Arc<Registry>,
    pub seed: u64,
}

impl ClusterSpec {
    /// The machines a node runs: its coordinator, its partitions, and the roles the engine adds
    /// there ([`litmus_protocol::EngineDef::roles`], e.g. Omid's status oracle and its standby).
    pub fn machines_of(&self, node: NodeId) -> Vec<Box<dyn Machine>> {
        let mut out: Vec<Box<dyn Machine>> = vec![Box::new(Coordinator::new(CoordinatorConfig {
            node,
            engine: self.engine,
            partitions: self.topology.partitions,
            preferred: self.topology.preferred(node),
            catalog: self.catalog.clone(),
            registry: self.registry.clone(),
            seed: self.seed,
        }))];
        for p in self.topology.partitions_of(node) {
            let partition = Partition::new(p, self.engine, self.catalog.clone(), self.seed);
            out.push(Box::new(partition.in_cluster(self.registry.clone(), self.topology.partitions)));
        }
        out.extend(self.engine.roles(node, self.topology.nodes, self.topology.partitions));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_round_robin() {
        let t = Topology::new(3, 7).unwrap();
        assert_eq!(t.partitions_of(NodeId(0)), vec![PartitionId(0), PartitionId(3), PartitionId(6)]);
        assert_eq!(t.preferred(NodeId(2)), PartitionId(2));
        assert_eq!(t.host_of(Addr::Partition(PartitionId(4))), Host::Node(NodeId(1)));
        assert!(Topology::new(0, 1).is_err());
        assert!(Topology::new(1, PARTITIONS_MAX + 1).is_err());
    }
}
