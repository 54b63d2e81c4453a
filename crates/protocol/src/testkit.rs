//! A synchronous, in-order test cluster: one coordinator and a few partitions, messages
//! delivered one at a time from a FIFO queue, every logged record treated as synced, and a
//! "crash" that rebuilds every machine from its log. Tests can stop between any two messages.
//!
//! [`script`] runs scenario files over it (goldenscript): a schedule of client calls, crashes
//! and deliveries in, the message trace and outcomes out.

pub mod script;

use crate::message::{ClientRequest, RequestBody, ResponseBody};
use crate::{
    Addr, Coordinator, CoordinatorConfig, Effects, EngineKind, Envelope, Input, Machine, Message, Partition, Registry,
};
use litmus_core::Catalog;
use litmus_core::{ClientId, Error, NodeId, PartitionId, RequestId, Time};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

pub struct SyncCluster {
    engine: EngineKind,
    catalog: Arc<Catalog>,
    registry: Arc<Registry>,
    pub coordinator: Coordinator,
    pub partitions: Vec<Partition>,
    /// The roles the engine adds to a one-node cluster (e.g. Omid's status oracle).
    pub roles: BTreeMap<Addr, Box<dyn Machine>>,
    logs: BTreeMap<Addr, Vec<Vec<u8>>>,
    pub queue: VecDeque<Envelope>,
    pub now: Time,
    responses: BTreeMap<(u64, u64), Result<ResponseBody, Error>>,
    next_request: u64,
    pub delivered: u64,
}

impl SyncCluster {
    pub fn new(engine: EngineKind, catalog: Catalog, registry: Registry, partitions: u32) -> Self {
        let catalog = Arc::new(catalog);
        let registry = Arc::new(registry);
        let mut c = SyncCluster {
            engine,
            coordinator: Self::coordinator(engine, &catalog, &registry, partitions),
            partitions: vec![],
            roles: Self::roles(engine, partitions, &BTreeMap::new()),
            catalog,
            registry,
            logs: BTreeMap::new(),
            queue: VecDeque::new(),
            now: Time::from_millis(1),
            responses: BTreeMap::new(),
            next_request: 0,
            delivered: 0,
        };
        c.coordinator.recover(None, &[]).unwrap();
        for p in 0..partitions {
            let mut m =
                Partition::new(PartitionId(p), engine, c.catalog.clone(), 1).in_cluster(c.registry.clone(), partitions);
            m.recover(None, &[]).unwrap();
            c.partitions.push(m);
        }
        c
    }

    /// The engine's roles on the one node, recovered from their logs.
    fn roles(
        engine: EngineKind,
        partitions: u32,
        logs: &BTreeMap<Addr, Vec<Vec<u8>>>,
    ) -> BTreeMap<Addr, Box<dyn Machine>> {
        let mut roles = BTreeMap::new();
        for mut m in engine.roles(NodeId(0), 1, partitions) {
            m.recover(None, logs.get(&m.addr()).map_or(&[][..], |l| &l[..])).unwrap();
            roles.insert(m.addr(), m);
        }
        roles
    }

    fn coordinator(
        engine: EngineKind,
        catalog: &Arc<Catalog>,
        registry: &Arc<Registry>,
        partitions: u32,
    ) -> Coordinator {
        Coordinator::new(CoordinatorConfig {
            node: NodeId(0),
            engine,
            partitions,
            preferred: PartitionId(0),
            catalog: catalog.clone(),
            registry: registry.clone(),
            seed: 1,
        })
    }

    /// Queues a request from `client`; returns its id.
    pub fn send(&mut self, client: u64, body: RequestBody) -> u64 {
        self.next_request += 1;
        let id = self.next_request;
        self.queue.push_back(Envelope {
            from: Addr::Client(ClientId(client)),
            to: Addr::Coordinator(NodeId(0)),
            msg: Message::ClientRequest(ClientRequest { id: RequestId(id), body }),
        });
        id
    }

    /// A copy of the last queued message (to deliver again later: the network duplicated it).
    pub fn copy_last(&self) -> Envelope {
        self.queue.back().expect("a queued message").clone()
    }

    /// Queues a message (e.g. a late duplicate from [`SyncCluster::copy_last`]).
    pub fn requeue(&mut self, env: Envelope) {
        self.queue.push_back(env);
    }

    fn step_machine(&mut self, to: Addr, input: Input) {
        let mut out = Effects::default();
        match to {
            Addr::Coordinator(_) => self.coordinator.step(self.now, input, &mut out),
            Addr::Partition(p) => self.partitions[p.0 as usize].step(self.now, input, &mut out),
            // A role the engine does not run on one node reaches nobody.
            Addr::Role(_) => match self.roles.get_mut(&to) {
                Some(m) => m.step(self.now, input, &mut out),
                None => return,
            },
            // The test cluster does not replicate partitions.
            Addr::Client(_) | Addr::Replica(..) => unreachable!(),
        }
        self.logs.entry(to).or_default().append(&mut out.persist);
        self.queue.extend(out.send_now);
        self.queue.extend(out.send);
    }

    /// Delivers one message; false when the queue is empty.
    pub fn deliver_one(&mut self) -> bool {
        let Some(env) = self.queue.pop_front() else { return false };
        self.delivered += 1;
        if std::env::var("SYNC_TRACE").is_ok() {
            eprintln!("{:>4} {} -> {}: {:?}", self.delivered, env.from, env.to, env.msg);
        }
        match env.to {
            Addr::Client(c) => {
                if let Message::ClientResponse(r) = env.msg {
                    self.responses.insert((c.0, r.id.0), r.result);
                }
            }
            to => self.step_machine(to, Input::Message(env)),
        }
        true
    }

    /// Advances time and ticks every machine.
    pub fn tick(&mut self, ms: u64) {
        self.now = self.now + std::time::Duration::from_millis(ms);
        self.step_machine(Addr::Coordinator(NodeId(0)), Input::Tick);
        for role in self.roles.keys().copied().collect::<Vec<_>>() {
            self.step_machine(role, Input::Tick);
        }
        for p in 0..self.partitions.len() {
            self.step_machine(Addr::Partition(PartitionId(p as u32)), Input::Tick);
        }
    }

    /// Delivers until nothing is left, ticking a few times so timers fire.
    pub fn settle(&mut self) {
        for _ in 0..20 {
            while self.deliver_one() {
                assert!(self.delivered < 10_000_000, "livelock");
            }
            self.tick(60);
        }
        while self.deliver_one() {}
    }

    /// Every answer a client received so far, by (client, request id).
    pub fn responses(&self) -> &BTreeMap<(u64, u64), Result<ResponseBody, Error>> {
        &self.responses
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn engine(&self) -> EngineKind {
        self.engine
    }

    pub fn response(&self, client: u64, id: u64) -> Option<&Result<ResponseBody, Error>> {
        self.responses.get(&(client, id))
    }

    /// Sends a request and delivers until it is answered.
    pub fn call(&mut self, client: u64, body: RequestBody) -> Result<ResponseBody, Error> {
        let id = self.send(client, body);
        for _ in 0..100 {
            while self.response(client, id).is_none() && self.deliver_one() {}
            if let Some(r) = self.response(client, id) {
                return r.clone();
            }
            self.tick(10);
        }
        panic!("request {id} of client {client} never answered");
    }

    /// Begins an interactive transaction at `isolation`.
    pub fn begin(&mut self, client: u64, isolation: litmus_core::Isolation) -> litmus_core::TxnId {
        match self.call(client, RequestBody::Begin { isolation, retrying_for: Duration::ZERO }).unwrap() {
            ResponseBody::Begun(t) => t,
            other => panic!("not begun: {other:?}"),
        }
    }

    pub fn proc(
        &mut self,
        client: u64,
        procedure: &str,
        args: Vec<litmus_core::Value>,
    ) -> Result<Vec<litmus_core::Value>, Error> {
        match self
            .call(client, RequestBody::Call { procedure: procedure.into(), args, retrying_for: Duration::ZERO })?
        {
            ResponseBody::Returned(v) => Ok(v),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// The coordinator alone crashes and restarts from its log (a new epoch): what it had in
    /// memory and the messages on their way to it are lost; everything else goes on.
    pub fn crash_coordinator(&mut self) {
        let me = Addr::Coordinator(NodeId(0));
        self.queue.retain(|env| env.to != me);
        let partitions = self.partitions.len() as u32;
        self.coordinator = Self::coordinator(self.engine, &self.catalog, &self.registry, partitions);
        let log = self.logs.get(&me).cloned().unwrap_or_default();
        self.coordinator.recover(None, &log).unwrap();
    }

    /// Partition `p` alone crashes and restarts from its log (every record synced): what it had
    /// in memory and the messages on their way to it are lost; everything else goes on.
    pub fn crash_partition(&mut self, p: u32) {
        let me = Addr::Partition(PartitionId(p));
        if std::env::var("SYNC_TRACE").is_ok() {
            eprintln!("---- crash {me} ----");
        }
        self.queue.retain(|env| env.to != me);
        let partitions = self.partitions.len() as u32;
        let mut m = Partition::new(PartitionId(p), self.engine, self.catalog.clone(), 1)
            .in_cluster(self.registry.clone(), partitions);
        let log = self.logs.get(&me).cloned().unwrap_or_default();
        m.recover(None, &log).unwrap();
        self.partitions[p as usize] = m;
    }

    /// Every machine crashes and restarts from its log (all records synced); in-flight messages
    /// are lost.
    pub fn crash_all(&mut self) {
        if std::env::var("SYNC_TRACE").is_ok() {
            eprintln!("---- crash ----");
        }
        self.queue.clear();
        let partitions = self.partitions.len() as u32;
        self.coordinator = Self::coordinator(self.engine, &self.catalog, &self.registry, partitions);
        let log = self.logs.get(&Addr::Coordinator(NodeId(0))).cloned().unwrap_or_default();
        self.coordinator.recover(None, &log).unwrap();
        for p in 0..partitions {
            let mut m = Partition::new(PartitionId(p), self.engine, self.catalog.clone(), 1)
                .in_cluster(self.registry.clone(), partitions);
            let log = self.logs.get(&Addr::Partition(PartitionId(p))).cloned().unwrap_or_default();
            m.recover(None, &log).unwrap();
            self.partitions[p as usize] = m;
        }
        self.roles = Self::roles(self.engine, partitions, &self.logs);
    }
}
