//! A host: the machines of one node, their logs, and the persist-before-send rule.
//!
//! The embedded and TCP runtimes both drive machines through a [`Host`]: deliver inputs with
//! [`Host::step`] / [`Host::tick`], then call [`Host::flush`], which appends every record the
//! steps produced, makes each dirty log durable with one write and (per the fsync policy) one
//! fsync — group commit — and only then returns the messages those steps want sent.

use litmus_core::{Error, Time};
use litmus_protocol::{Addr, Effects, Envelope, GroupId, Input, Machine};
use litmus_storage::disk::DiskLog;
use litmus_storage::wal::FsyncPolicy;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A machine is snapshotted (and its log prefix dropped) after this many records.
pub const SNAPSHOT_EVERY_RECORDS: u64 = 200_000;

/// A step or snapshot that holds a node's thread this long is logged: every machine of the
/// node, replicas' heartbeats included, waits behind it (a replica group's election timeout is
/// 250 ms).
pub const SLOW_STEP: std::time::Duration = std::time::Duration::from_millis(100);

struct Slot {
    machine: Box<dyn Machine>,
    log: Option<DiskLog>,
    dirty: bool,
    /// A barrier record ([`litmus_protocol::Effects::barrier`]) is not flushed yet: the
    /// machine's `send_now` messages wait for the flush like the rest.
    barrier: bool,
    records_since_snapshot: u64,
}

/// What one machine recovered from its data directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineRecovery {
    pub addr: Addr,
    /// The snapshot it started from: the lsn it covers and its size in bytes.
    pub snapshot: Option<(u64, u64)>,
    /// Log records replayed after the snapshot, and their bytes.
    pub records: u64,
    pub bytes: u64,
}

/// What [`Host::open`] recovered: every machine's share, and the time it took.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub machines: Vec<MachineRecovery>,
    pub elapsed: std::time::Duration,
}

impl RecoveryReport {
    /// Log records replayed by all machines.
    pub fn records(&self) -> u64 {
        self.machines.iter().map(|m| m.records).sum()
    }
    /// Bytes of log records replayed by all machines.
    pub fn bytes(&self) -> u64 {
        self.machines.iter().map(|m| m.bytes).sum()
    }
    /// Machines that started from a snapshot.
    pub fn snapshots(&self) -> usize {
        self.machines.iter().filter(|m| m.snapshot.is_some()).count()
    }
}

pub struct Host {
    slots: BTreeMap<Addr, Slot>,
    recovery: RecoveryReport,
    pending: Vec<Envelope>,
    /// Messages that need not wait for the next flush ([`Host::take_early`]).
    early: Vec<Envelope>,
    /// An emptied buffer a caller handed back ([`Host::recycle`]) to become the next `pending`,
    /// so that a busy worker does not grow a fresh vector of messages after every flush (those
    /// reallocations, hundreds of envelopes long, are a visible share of a TPC-C profile).
    spare: Vec<Envelope>,
    scratch: Effects,
    records_total: u64,
    record_bytes_total: u64,
    /// Engine counts not yet taken ([`Host::take_counts`]).
    counts: BTreeMap<&'static str, u64>,
    /// `litmus calibrate`: the CPU time of every step, by [`crate::cost::step_key`], measured
    /// while `profiling`.
    profile: Option<crate::cost::ProfileData>,
    profiling: bool,
    /// Where [`Addr::Partition`] is delivered when partitions are replicated
    /// ([`crate::Topology::machine_addr`]); `None`: as addressed.
    topology: Option<crate::Topology>,
    /// Replicated partitions: the leaders this host's replicas know, where its requests go.
    leaders: crate::replica::LeaderCache,
}

/// The directory of one machine's log inside a node's data directory.
pub fn machine_dir(data_dir: &Path, addr: Addr) -> PathBuf {
    data_dir.join(match addr {
        Addr::Coordinator(n) => format!("coordinator-{}", n.0),
        Addr::Partition(p) => format!("partition-{}", p.0),
        Addr::Client(c) => format!("client-{}", c.0),
        Addr::Role(r) => format!("role-{}", r.0),
        Addr::Replica(GroupId::Partition(p), n) => format!("partition-{}-replica-{}", p.0, n.0),
        Addr::Replica(GroupId::Coordinator(c), n) => format!("coordinator-{}-replica-{}", c.0, n.0),
        Addr::Replica(GroupId::Role(r), n) => format!("role-{}-replica-{}", r.0, n.0),
    })
}

impl Host {
    /// Opens the machines' logs under `data_dir` (or keeps nothing on disk when `None`) and
    /// recovers each machine from its snapshot and log.
    pub fn open(machines: Vec<Box<dyn Machine>>, data_dir: Option<&Path>, fsync: FsyncPolicy) -> Result<Host, Error> {
        let started = std::time::Instant::now();
        let mut recovery = RecoveryReport::default();
        let mut slots = BTreeMap::new();
        for mut machine in machines {
            let addr = machine.addr();
            let log = match data_dir {
                None => {
                    machine.recover(None, &[])?;
                    // No log, so `flush` never asks for a snapshot.
                    machine.never_snapshotted();
                    None
                }
                Some(dir) => {
                    let (log, snapshot, records) = DiskLog::open(&machine_dir(dir, addr), fsync)?;
                    let records: Vec<Vec<u8>> = records.into_iter().map(|(_, r)| r).collect();
                    machine.recover(snapshot.as_deref(), &records)?;
                    recovery.machines.push(MachineRecovery {
                        addr,
                        snapshot: snapshot.as_ref().map(|b| (log.snapshot_lsn(), b.len() as u64)),
                        records: records.len() as u64,
                        bytes: records.iter().map(|r| r.len() as u64).sum(),
                    });
                    Some(log)
                }
            };
            slots.insert(addr, Slot { machine, log, dirty: false, barrier: false, records_since_snapshot: 0 });
        }
        recovery.elapsed = started.elapsed();
        Ok(Host {
            slots,
            recovery,
            pending: Vec::new(),
            early: Vec::new(),
            spare: Vec::new(),
            scratch: Effects::default(),
            records_total: 0,
            record_bytes_total: 0,
            counts: BTreeMap::new(),
            profile: None,
            profiling: false,
            topology: None,
            leaders: Default::default(),
        })
    }

    /// Delivers messages to the machines of `topology`'s layout: a replicated partition's
    /// requests to its replica ([`crate::Topology::machine_addr`]).
    pub fn with_topology(mut self, topology: crate::Topology) -> Host {
        self.topology = Some(topology).filter(|t| t.replicated());
        self
    }

    /// What [`Host::open`] recovered from the data directory (nothing without one).
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Prepares to measure the thread CPU time of every step and flush while [`Host::set_profiling`] is on (`litmus calibrate`).
    pub fn enable_profile(&mut self) {
        self.profile = Some(crate::cost::ProfileData::measured());
        // Off until the worker sees the measured window open (`set_profiling`).
        self.profiling = false;
    }

    /// Pauses or resumes the profile (only the measured window is profiled).
    pub fn set_profiling(&mut self, on: bool) {
        self.profiling = on && self.profile.is_some();
    }

    /// What the profile measured so far (empty when profiling is off).
    pub fn take_profile(&mut self) -> crate::cost::ProfileData {
        self.profile.as_mut().map(std::mem::take).unwrap_or_default()
    }

    pub fn addrs(&self) -> impl Iterator<Item = Addr> + '_ {
        self.slots.keys().copied()
    }

    pub fn contains(&self, addr: Addr) -> bool {
        self.slots.contains_key(&addr)
    }

    /// Records logged since the host opened.
    pub fn records_total(&self) -> u64 {
        self.records_total
    }

    /// Bytes of the records logged since the host opened (with or without a log on disk).
    pub fn record_bytes_total(&self) -> u64 {
        self.record_bytes_total
    }

    /// A message from `from` arrived from peer `sender`: where a replicated coordinator or role
    /// leads ([`crate::replica::LeaderCache::learn`]).
    pub fn learn(&mut self, from: Addr, sender: litmus_core::NodeId) {
        if self.topology.is_some() {
            self.leaders.learn(from, sender);
        }
    }

    /// Delivers one input to one machine. Its records are buffered and its messages held until
    /// the next [`Host::flush`].
    pub fn step(&mut self, now: Time, to: Addr, input: Input) -> Result<(), Error> {
        let to = self.topology.map_or(to, |t| t.machine_addr(to));
        let Some(slot) = self.slots.get_mut(&to) else {
            return Ok(()); // not ours (e.g. a stale route): drop, like a lost packet
        };
        self.scratch.clear();
        let started = crate::cost::coarse_now_ns();
        let what = match &input {
            Input::Tick => "tick",
            Input::Message(_) => "message",
        };
        match self.profile.as_mut().filter(|_| self.profiling) {
            None => slot.machine.step(now, input, &mut self.scratch),
            Some(profile) => {
                let clock = || crate::cost::thread_cpu_ns().unwrap_or(0);
                let start = clock();
                let keys = crate::cost::step_keys(to, &input);
                let t0 = clock();
                slot.machine.step(now, input, &mut self.scratch);
                let t1 = clock();
                // The interval holds one clock read besides the step.
                let ns = t1.saturating_sub(t0).saturating_sub(profile.clock_ns);
                // A batch's time and work, split evenly over its items (`cost::step_keys`).
                let share = ns / keys.len().max(1) as u64;
                let work = self.scratch.work as f64 / keys.len().max(1) as f64;
                for key in keys {
                    profile.steps.entry(key).or_default().add(share, work);
                }
                // The profile's own CPU: the names, the counts and four clock reads (`start`
                // and the one ending here each half outside the interval).
                let end = clock();
                profile.probe_ns +=
                    end.saturating_sub(start).saturating_sub(t1.saturating_sub(t0)) + 2 * profile.clock_ns;
            }
        }
        let took_ns = crate::cost::coarse_now_ns().saturating_sub(started);
        if took_ns >= SLOW_STEP.as_nanos() as u64 {
            tracing::warn!(machine = ?to, input = what, ms = took_ns / 1_000_000, "slow step: every machine of this node waited");
        }
        if self.topology.is_some() {
            self.leaders.observe(slot.machine.as_ref());
            for env in self.scratch.send.iter_mut().chain(self.scratch.send_now.iter_mut()) {
                self.leaders.route(env);
            }
        }
        if !self.scratch.persist.is_empty() {
            self.records_total += self.scratch.persist.len() as u64;
            self.record_bytes_total += self.scratch.persist.iter().map(|r| r.len() as u64).sum::<u64>();
            slot.records_since_snapshot += self.scratch.persist.len() as u64;
            if let Some(log) = slot.log.as_mut() {
                for r in &self.scratch.persist {
                    log.append(r)?;
                }
                slot.dirty = true;
            }
        }
        slot.barrier |= self.scratch.barrier;
        if slot.barrier {
            self.pending.append(&mut self.scratch.send_now);
        } else {
            self.early.append(&mut self.scratch.send_now);
        }
        self.pending.append(&mut self.scratch.send);
        for name in self.scratch.counts.drain(..) {
            *self.counts.entry(name).or_default() += 1;
        }
        Ok(())
    }

    /// Engine counts ([`litmus_protocol::Effects::counts`]) since the last call, taken.
    pub fn take_counts(&mut self) -> BTreeMap<&'static str, u64> {
        std::mem::take(&mut self.counts)
    }

    /// Ticks every machine.
    pub fn tick(&mut self, now: Time) -> Result<(), Error> {
        let addrs: Vec<Addr> = self.slots.keys().copied().collect();
        for a in addrs {
            self.step(now, a, Input::Tick)?;
        }
        Ok(())
    }

    /// Group commit: makes every buffered record durable, snapshots machines whose logs grew
    /// long, and returns the messages that may now be sent.
    pub fn flush(&mut self) -> Result<Vec<Envelope>, Error> {
        let t0 = self.profile.as_ref().filter(|_| self.profiling).and_then(|_| crate::cost::thread_cpu_ns());
        let wrote = self.slots.values().any(|s| s.dirty);
        for slot in self.slots.values_mut() {
            let Some(log) = slot.log.as_mut() else { continue };
            if slot.dirty {
                log.flush()?;
                slot.dirty = false;
            }
            if slot.records_since_snapshot >= SNAPSHOT_EVERY_RECORDS {
                let started = std::time::Instant::now();
                if let Some(bytes) = slot.machine.snapshot() {
                    log.snapshot(&bytes)?;
                }
                slot.records_since_snapshot = 0;
                let took = started.elapsed();
                if took >= SLOW_STEP {
                    tracing::warn!(ms = took.as_millis() as u64, "slow snapshot: every machine of this node waited");
                }
            }
        }
        if let (Some(profile), Some(t0)) = (self.profile.as_mut(), t0) {
            if wrote {
                // The interval holds one clock read besides the flush; both reads are the
                // profile's.
                let ns = crate::cost::thread_cpu_ns().unwrap_or(t0).saturating_sub(t0);
                profile.flushes.0 += 1;
                profile.flushes.1 += ns.saturating_sub(profile.clock_ns);
                profile.probe_ns += 2 * profile.clock_ns;
            } else {
                profile.probe_ns += profile.clock_ns;
            }
        }
        for slot in self.slots.values_mut() {
            slot.barrier = false;
        }
        let mut out = std::mem::replace(&mut self.pending, std::mem::take(&mut self.spare));
        if !self.early.is_empty() {
            out.splice(0..0, self.early.drain(..));
        }
        Ok(out)
    }

    /// The messages that may leave before the next flush: those that depend on no record
    /// not yet durable but barriers ([`litmus_protocol::Effects::send_now`]). A runtime that
    /// does not take them gets them from [`Host::flush`].
    pub fn take_early(&mut self) -> Vec<Envelope> {
        std::mem::take(&mut self.early)
    }

    /// Hands back a buffer [`Host::flush`] returned, once the caller has taken its messages:
    /// the next flush's messages are gathered in it, keeping its capacity. Anything still in
    /// it is dropped.
    pub fn recycle(&mut self, mut buf: Vec<Envelope>) {
        buf.clear();
        if buf.capacity() > self.spare.capacity() {
            self.spare = buf;
        }
    }

    /// Starts handing over every leadership this host's machines hold ([`Machine::hand_over`]);
    /// returns how many still lead.
    pub fn hand_over(&mut self) -> usize {
        self.slots.values_mut().map(|s| s.machine.hand_over()).filter(|&leads| leads).count()
    }

    /// What this node's leaders send their followers while its thread is busy
    /// ([`Machine::fortify`]).
    pub fn fortifications(&self) -> Vec<Envelope> {
        self.slots.values().flat_map(|s| s.machine.fortify()).collect()
    }

    /// Whether messages are waiting for a flush.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty() || !self.early.is_empty() || self.slots.values().any(|s| s.dirty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use litmus_core::NodeId;
    use litmus_protocol::{Message, Payload};

    fn env(n: u64) -> Envelope {
        let a = Addr::Coordinator(NodeId(0));
        Envelope { from: a, to: a, msg: Message::Role(Payload::new(n)) }
    }

    #[test]
    fn a_recycled_buffer_gathers_a_later_flush_and_nothing_pending_is_lost() {
        let mut host = Host::open(vec![], None, FsyncPolicy::Never).unwrap();
        host.pending.extend((0..300).map(env));
        let out = host.flush().unwrap();
        assert_eq!(out.len(), 300);
        let (ptr, cap) = (out.as_ptr(), out.capacity());
        host.recycle(out);
        // Queued before the recycled buffer takes over: flushed, not lost in the swap.
        host.pending.push(env(7));
        let next = host.flush().unwrap();
        assert_eq!(format!("{next:?}"), format!("{:?}", vec![env(7)]));
        // The next messages gather in the recycled allocation.
        host.pending.push(env(8));
        let reused = host.flush().unwrap();
        assert_eq!((reused.as_ptr(), reused.capacity()), (ptr, cap), "the recycled allocation is reused");
        assert_eq!(format!("{reused:?}"), format!("{:?}", vec![env(8)]));
        // Without a recycle, flush still hands out a fresh vector.
        assert!(host.flush().unwrap().is_empty());
    }

    /// A coordinator that does nothing on a step.
    struct Idle;

    impl Machine for Idle {
        fn addr(&self) -> Addr {
            Addr::Coordinator(NodeId(0))
        }
        fn recover(&mut self, _: Option<&[u8]>, _: &[Vec<u8>]) -> Result<(), Error> {
            Ok(())
        }
        fn step(&mut self, _: Time, _: Input, _: &mut Effects) {}
        fn snapshot(&mut self) -> Option<Vec<u8>> {
            None
        }
    }

    /// Logs a record on its first step (a barrier, as a coordinator's epoch record is) and on
    /// every step sends one message that needs no log and one that does.
    struct Announcer {
        stepped: bool,
    }

    impl Machine for Announcer {
        fn addr(&self) -> Addr {
            Addr::Coordinator(NodeId(0))
        }
        fn recover(&mut self, _: Option<&[u8]>, _: &[Vec<u8>]) -> Result<(), Error> {
            Ok(())
        }
        fn step(&mut self, _: Time, input: Input, out: &mut Effects) {
            if !std::mem::replace(&mut self.stepped, true) {
                out.persist.push(vec![1]);
                out.barrier = true;
            }
            out.persist.push(vec![2]);
            if let Input::Message(m) = input {
                out.send_now.push(m.clone());
                out.send.push(m);
            }
        }
        fn snapshot(&mut self) -> Option<Vec<u8>> {
            None
        }
    }

    /// Effects::send_now: a message that needs no record leaves before the flush, unless a
    /// barrier record of its machine is not durable yet; `send` always waits for the flush.
    #[test]
    fn messages_that_need_no_log_leave_before_the_flush_but_never_before_a_barrier() {
        let dir = tempfile::tempdir().unwrap();
        let mut host =
            Host::open(vec![Box::new(Announcer { stepped: false })], Some(dir.path()), FsyncPolicy::Never).unwrap();
        let to = Addr::Coordinator(NodeId(0));
        host.step(Time::ZERO, to, Input::Message(env(1))).unwrap();
        assert!(host.take_early().is_empty(), "the barrier record is not durable yet");
        assert_eq!(host.flush().unwrap().len(), 2, "both leave with the flush");
        host.step(Time::ZERO, to, Input::Message(env(2))).unwrap();
        assert_eq!(format!("{:?}", host.take_early()), format!("{:?}", vec![env(2)]), "leaves before the flush");
        assert_eq!(format!("{:?}", host.flush().unwrap()), format!("{:?}", vec![env(2)]), "waited for the flush");
    }

    /// The profile's own CPU (its clock reads, step names and counts) is kept apart from the
    /// steps it measures: steps that do nothing measure close to nothing, and what profiling
    /// them cost is in `probe_ns` — at least the clock reads — not left for the runtime's
    /// overhead per step (which once charged every simulated envelope with it).
    #[test]
    fn profiling_keeps_its_own_cpu_apart_from_the_steps() {
        let mut host = Host::open(vec![Box::new(Idle)], None, FsyncPolicy::Never).unwrap();
        host.enable_profile();
        host.set_profiling(true);
        const STEPS: u64 = 2_000;
        for n in 0..STEPS {
            host.step(Time::ZERO, Addr::Coordinator(NodeId(0)), Input::Message(env(n))).unwrap();
        }
        let profile = host.take_profile();
        assert!(profile.clock_ns > 0, "a clock read costs something");
        let (steps, step_ns) = profile.steps.values().fold((0, 0), |a, s| (a.0 + s.n, a.1 + s.ns));
        assert_eq!(steps, STEPS);
        assert!(
            profile.probe_ns >= STEPS * 3 * profile.clock_ns,
            "the profile's clock reads are its own: probe {} ns, clock read {} ns",
            profile.probe_ns,
            profile.clock_ns
        );
        assert!(
            step_ns < profile.probe_ns,
            "steps that do nothing measured {step_ns} ns against the profile's own {} ns",
            profile.probe_ns
        );
    }
}
