//! End-of-run checks: liveness (every request answered in bounded time after the heal) and,
//! with replicated partitions, agreement of every replica and where leaders are.

use super::*;

impl Simulator {
    /// Replicated partitions: the node whose replica leads each partition now (up nodes only).
    pub fn leaders(&self) -> BTreeMap<litmus_core::PartitionId, NodeId> {
        let mut out = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate().filter(|(_, n)| n.up) {
            for m in n.machines.values() {
                let replica = m.as_any().and_then(|a| a.downcast_ref::<crate::replica::Replica>());
                if let Some(r) = replica.filter(|r| r.is_leader()) {
                    if let litmus_protocol::GroupId::Partition(p) = r.id() {
                        out.insert(p, NodeId(i as u32));
                    }
                }
            }
        }
        out
    }

    /// Replicated partitions, after the heal and the idle time of the liveness check: every
    /// replica of a partition has applied the same log prefix and holds the same rows (raft's
    /// state-machine safety, and catch-up of the replicas that were down or lost their data).
    pub(super) fn check_replicas_agree(&self) -> Result<(), String> {
        let mut seen: BTreeMap<litmus_protocol::GroupId, (NodeId, u64, Vec<u8>)> = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate().filter(|(_, n)| n.up) {
            for m in n.machines.values() {
                let Some(r) = m.as_any().and_then(|a| a.downcast_ref::<crate::replica::Replica>()) else {
                    continue;
                };
                // A coordinator's members agree on their log; a partition's also on its rows.
                let rows = r.partition().map(|p| p.store().encode_snapshot()).unwrap_or_default();
                let here = (NodeId(i as u32), r.applied(), rows);
                match seen.get(&r.id()) {
                    None => {
                        seen.insert(r.id(), here);
                    }
                    Some((first, applied, _)) if *applied != here.1 => {
                        return Err(format!(
                            "replicas disagree: {} applied {applied} entries on node {} and {} on node {}",
                            r.id(),
                            first.0,
                            here.1,
                            here.0 .0
                        ));
                    }
                    Some((first, applied, rows)) if *rows != here.2 => {
                        return Err(format!(
                            "replicas disagree: {} holds different rows on nodes {} and {} after {applied} entries",
                            r.id(),
                            first.0,
                            here.0 .0
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }

    /// See the module doc, "Liveness".
    pub(super) fn check_liveness(&mut self) -> Result<(), String> {
        let Some(healed) = self.healed_at else { return Ok(()) };
        let bound = self.cfg.liveness_bound;
        self.report.unanswered =
            self.unanswered.values().filter(|u| u.owed(&self.nodes) && self.now >= u.sent.max(healed) + bound).count()
                as u64;
        let mut stuck = self
            .unanswered
            .iter()
            .filter(|(_, u)| u.owed(&self.nodes) && self.now >= u.sent.max(healed) + self.cfg.liveness_bound);
        let Some(((client, id), first)) = stuck.next() else { return Ok(()) };
        let more = stuck.count();
        Err(format!(
            "liveness: request {} of client {client} ({}), sent at {} to node {}, was never answered \
             ({more} more); faults healed at {healed}, bound {:?}",
            id.0, first.what, first.sent, first.node.0, self.cfg.liveness_bound
        ))
    }
}
