//! Where each role runs: nodes, partitions, coordinators.
//!
//! A cluster has `nodes` servers and `partitions` partitions, each kept by `replicas` nodes.
//! Partition `p`'s replicas sit on nodes `p, p+1, …, p+replicas-1 (mod nodes)`: distinct nodes,
//! the first (`p mod nodes`, the partition's *home*) its preferred leader, so leaders spread as
//! the partitions do. Every node runs one coordinator. Clients live on their own hosts. All
//! three runtimes use the same layout, so a workload runs unchanged on any of them.
//!
//! Coordinators address a partition as [`Addr::Partition`], which reaches its home node; with
//! `replicas > 1` the replica there serves the request or forwards it to the group's leader
//! ([`crate::replica`]). Coordinators are replica groups too: coordinator `n`'s members sit on
//! nodes `n, n+1, …` and [`Addr::Coordinator`] reaches the member on node `n`, which serves or
//! forwards. Replicas address each other as [`Addr::Replica`].

use litmus_core::{Catalog, InvalidInput, NodeId, PartitionId};
use litmus_protocol::{Addr, Coordinator, CoordinatorConfig, EngineKind, GroupId, Machine, Partition, Registry};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Largest number of partitions a cluster may have.
pub const PARTITIONS_MAX: u32 = 4096;
/// Largest number of nodes a cluster may have.
pub const NODES_MAX: u32 = 256;
/// Largest replication factor (a raft group of more members only adds latency).
pub const REPLICAS_MAX: u32 = 7;

fn one() -> u32 {
    1
}

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
    /// Members of each partition's replica group (1: no replication, today's single owner).
    #[serde(default = "one")]
    pub replicas: u32,
}

impl Topology {
    pub fn new(nodes: u32, partitions: u32) -> Result<Topology, InvalidInput> {
        if nodes == 0 || nodes > NODES_MAX {
            return Err(InvalidInput::Config(format!("nodes must be in 1..={NODES_MAX}, got {nodes}")));
        }
        if partitions == 0 || partitions > PARTITIONS_MAX {
            return Err(InvalidInput::Config(format!("partitions must be in 1..={PARTITIONS_MAX}, got {partitions}")));
        }
        Ok(Topology { nodes, partitions, replicas: 1 })
    }

    /// The same layout with each partition kept by `replicas` distinct nodes.
    pub fn with_replicas(mut self, replicas: u32) -> Result<Topology, InvalidInput> {
        if replicas == 0 || replicas > REPLICAS_MAX {
            return Err(InvalidInput::Config(format!("replicas must be in 1..={REPLICAS_MAX}, got {replicas}")));
        }
        if replicas > self.nodes {
            return Err(InvalidInput::Config(format!(
                "replicas ({replicas}) cannot exceed the number of nodes ({}): each replica of a partition \
                 needs a node of its own",
                self.nodes
            )));
        }
        self.replicas = replicas;
        Ok(self)
    }

    /// Whether partitions are replica groups (more than one replica each).
    pub fn replicated(&self) -> bool {
        self.replicas > 1
    }

    /// The partition's home: its preferred leader, where [`Addr::Partition`] is delivered.
    pub fn node_of(&self, p: PartitionId) -> NodeId {
        NodeId(p.0 % self.nodes)
    }

    /// The nodes that keep partition `p`, its home first.
    pub fn replicas_of(&self, p: PartitionId) -> Vec<NodeId> {
        self.members_of(GroupId::Partition(p))
    }

    /// The nodes that keep a replica group's members, its home first.
    pub fn members_of(&self, g: GroupId) -> Vec<NodeId> {
        let first = match g {
            GroupId::Partition(p) => p.0,
            GroupId::Coordinator(n) => n.0,
            GroupId::Role(r) => r.node(self.nodes).0,
        };
        (0..self.replicas).map(|i| NodeId((first + i) % self.nodes)).collect()
    }

    /// The coordinators whose replica groups keep a member on `node` (its own among them).
    pub fn coordinators_on(&self, node: NodeId) -> Vec<NodeId> {
        self.node_ids().filter(|&n| self.members_of(GroupId::Coordinator(n)).contains(&node)).collect()
    }

    /// The machine a message to `to` is delivered to on the node [`Topology::host_of`] names:
    /// with replication, a partition's or a coordinator's messages go to its member on its
    /// home node.
    pub fn machine_addr(&self, to: Addr) -> Addr {
        match to {
            Addr::Partition(p) if self.replicated() => Addr::Replica(GroupId::Partition(p), self.node_of(p)),
            Addr::Coordinator(n) if self.replicated() => Addr::Replica(GroupId::Coordinator(n), n),
            Addr::Role(r) if self.replicated() => Addr::Replica(GroupId::Role(r), r.node(self.nodes)),
            other => other,
        }
    }

    pub fn host_of(&self, addr: Addr) -> Host {
        match addr {
            Addr::Partition(p) => Host::Node(self.node_of(p)),
            Addr::Coordinator(n) => Host::Node(n),
            Addr::Client(_) => Host::Clients,
            // An engine's role (placed by the one rule; a role the engine does not run on that
            // node loses its messages there).
            Addr::Role(r) => Host::Node(r.node(self.nodes)),
            Addr::Replica(_, n) => Host::Node(n),
        }
    }

    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> {
        (0..self.nodes).map(NodeId)
    }

    /// The partitions whose home is `node`.
    pub fn partitions_of(&self, node: NodeId) -> Vec<PartitionId> {
        (0..self.partitions).map(PartitionId).filter(|&p| self.node_of(p) == node).collect()
    }

    /// The partitions `node` keeps a replica of (its home partitions among them).
    pub fn replicas_on(&self, node: NodeId) -> Vec<PartitionId> {
        (0..self.partitions).map(PartitionId).filter(|&p| self.replicas_of(p).contains(&node)).collect()
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
    /// there ([`litmus_protocol::EngineDef::roles`], e.g. Omid's status oracle); with
    /// replication, its members of the replica groups of partitions, coordinators and roles.
    pub fn machines_of(&self, node: NodeId) -> Vec<Box<dyn Machine>> {
        self.machines_of_node(node, false)
    }

    /// [`ClusterSpec::machines_of`] for a node that lost its data directory: its replicas
    /// that find no durable state rejoin without a vote
    /// ([`crate::replica::Replica::rejoining`]).
    pub fn machines_of_node(&self, node: NodeId, rejoining: bool) -> Vec<Box<dyn Machine>> {
        let coordinator = |n| {
            Coordinator::new(CoordinatorConfig {
                node: n,
                engine: self.engine,
                partitions: self.topology.partitions,
                preferred: self.topology.preferred(n),
                catalog: self.catalog.clone(),
                registry: self.registry.clone(),
                seed: self.seed,
            })
        };
        let partition = |p| {
            Partition::new(p, self.engine, self.catalog.clone(), self.seed)
                .in_cluster(self.registry.clone(), self.topology.partitions)
        };
        let mut out: Vec<Box<dyn Machine>> = Vec::new();
        if self.topology.replicated() {
            let member = |m: crate::replica::Replica| -> Box<dyn Machine> {
                Box::new(if rejoining { m.rejoining() } else { m })
            };
            for n in self.topology.coordinators_on(node) {
                let voters = self.topology.members_of(GroupId::Coordinator(n));
                out.push(member(crate::replica::Replica::new(coordinator(n), node, voters, self.seed)));
            }
            for p in self.topology.replicas_on(node) {
                let voters = self.topology.replicas_of(p);
                out.push(member(crate::replica::Replica::new(partition(p), node, voters, self.seed)));
            }
            for (r, build) in self.engine.replicated_roles(self.topology.partitions) {
                let voters = self.topology.members_of(GroupId::Role(r));
                if voters.contains(&node) {
                    let role = crate::replica::RoleMachine::new(r, build);
                    out.push(member(crate::replica::Replica::new(role, node, voters, self.seed)));
                }
            }
            return out;
        }
        out.push(Box::new(coordinator(node)));
        for p in self.topology.partitions_of(node) {
            out.push(Box::new(partition(p)));
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

    #[test]
    fn replicas_sit_on_distinct_nodes_with_the_home_first() {
        let t = Topology::new(3, 6).unwrap().with_replicas(3).unwrap();
        assert_eq!(t.replicas_of(PartitionId(4)), vec![NodeId(1), NodeId(2), NodeId(0)]);
        assert_eq!(t.replicas_on(NodeId(0)).len(), 6);
        let p4 = GroupId::Partition(PartitionId(4));
        assert_eq!(t.machine_addr(Addr::Partition(PartitionId(4))), Addr::Replica(p4, NodeId(1)));
        assert_eq!(t.host_of(Addr::Replica(p4, NodeId(2))), Host::Node(NodeId(2)));
        let c2 = GroupId::Coordinator(NodeId(2));
        assert_eq!(t.members_of(c2), vec![NodeId(2), NodeId(0), NodeId(1)]);
        assert_eq!(t.machine_addr(Addr::Coordinator(NodeId(2))), Addr::Replica(c2, NodeId(2)));
        assert_eq!(
            Topology::new(4, 4).unwrap().with_replicas(2).unwrap().coordinators_on(NodeId(0)),
            vec![NodeId(0), NodeId(3)]
        );
        let two = Topology::new(4, 8).unwrap().with_replicas(2).unwrap();
        for p in 0..8 {
            let r = two.replicas_of(PartitionId(p));
            assert_ne!(r[0], r[1]);
        }
        // Leaders (homes) spread evenly: each node is home to two of the eight partitions.
        for n in two.node_ids() {
            assert_eq!(two.partitions_of(n).len(), 2);
        }
        let err = Topology::new(2, 4).unwrap().with_replicas(3).unwrap_err();
        assert!(err.to_string().contains("cannot exceed the number of nodes"), "{err}");
        assert!(Topology::new(3, 3).unwrap().with_replicas(0).is_err());
        assert_eq!(
            Topology::new(3, 3).unwrap().machine_addr(Addr::Partition(PartitionId(1))),
            Addr::Partition(PartitionId(1))
        );
    }
}
