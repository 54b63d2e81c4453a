//! Faults the simulator injects: random crashes, restarts and network partitions, and what a
//! crash loses (records not yet synced).

use super::*;

impl Simulator {
    pub(super) fn inject_faults(&mut self) {
        let f = self.cfg.faults.clone();
        let outage = |rng: &mut ChaCha8Rng| {
            Duration::from_nanos(rng.gen_range(f.outage_min.as_nanos() as u64..=f.outage_max.as_nanos() as u64))
        };
        if self.rng.gen_bool(f.crash) {
            let up: Vec<NodeId> = self.spec.topology.node_ids().filter(|n| self.nodes[n.0 as usize].up).collect();
            if !up.is_empty() {
                let victim = up[self.rng.gen_range(0..up.len())];
                self.schedule(Duration::ZERO, Event::Crash(victim));
                let d = outage(&mut self.rng);
                self.schedule(d, Event::Restart(victim));
            }
        }
        let n = self.spec.topology.nodes;
        if n >= 2 && self.blocked.is_empty() && self.rng.gen_bool(f.partition) {
            // A random non-trivial split into two groups.
            let mask: u64 = self.rng.gen_range(1..(1u64 << n.min(63)) - 1);
            for a in 0..n {
                for b in 0..n {
                    if (mask >> a) & 1 != (mask >> b) & 1 {
                        self.blocked.insert((NodeId(a), NodeId(b)));
                    }
                }
            }
            self.report.partitions += 1;
            self.trace_line(|| {
                format!(
                    "PARTITION nodes {{{}}} | the rest",
                    (0..n).filter(|a| (mask >> a) & 1 == 1).map(|a| a.to_string()).collect::<Vec<_>>().join(",")
                )
            });
            let d = outage(&mut self.rng);
            self.schedule(d, Event::Heal);
        }
    }

    /// One line of the `--trace` output, stamped with virtual time.
    pub(super) fn trace_line(&self, line: impl FnOnce() -> String) {
        if self.cfg.trace {
            println!("{:>12.3} ms  {}", self.now.0 as f64 / 1e6, line());
        }
    }

    pub(super) fn crash(&mut self, node: NodeId) {
        let n = &mut self.nodes[node.0 as usize];
        if !n.up {
            return;
        }
        self.trace_line(|| format!("CRASH node {}", node.0));
        let n = &mut self.nodes[node.0 as usize];
        n.up = false;
        n.incarnation += 1;
        n.machines.clear();
        n.leaders.clear();
        n.held.clear();
        n.sync_pending = false;
        n.runq.clear();
        n.wake_at = None;
        let now = self.now;
        n.cores.iter_mut().for_each(|c| *c = now);
        for disk in n.disks.values_mut() {
            disk.records.truncate(disk.synced); // the unsynced tail is lost
            disk.barrier = disk.barrier.min(disk.synced);
        }
        self.report.crashes += 1;
    }

    pub(super) fn sync(&mut self, node: NodeId, incarnation: u64) {
        let n = &mut self.nodes[node.0 as usize];
        if !n.up || n.incarnation != incarnation {
            return;
        }
        n.sync_pending = false;
        for (addr, disk) in n.disks.iter_mut() {
            disk.synced = disk.discarded + disk.records.len();
            if disk.records.len() >= SIM_SNAPSHOT_EVERY_RECORDS {
                if let Some(snap) = n.machines.get_mut(addr).and_then(|m| m.snapshot()) {
                    disk.snapshot = Some(snap);
                    disk.records.clear();
                    disk.synced = 0;
                    disk.barrier = 0;
                    // Held messages of this machine now wait for nothing.
                    for h in n.held.iter_mut().filter(|h| h.0 == *addr) {
                        h.1 = 0;
                    }
                }
            }
        }
        let held = std::mem::take(&mut n.held);
        let (ready, waiting): (Vec<_>, Vec<_>) =
            held.into_iter().partition(|(a, need, _, _)| n.disks[a].synced >= *need);
        n.held = waiting;
        for (_, _, not_before, env) in ready {
            if not_before > self.now {
                let incarnation = self.nodes[node.0 as usize].incarnation;
                self.schedule(Duration::from_nanos(not_before.0 - self.now.0), Event::Send { node, incarnation, env });
            } else {
                self.send_from(Host::Node(node), env);
            }
        }
    }
}
