//! The partition role: one shard of the data, a deterministic state machine over its own log.
//!
//! ```text
//!   PartitionRequest ──► engine.on_request ──► PartCtx::log(record) ──► Effects.persist
//!                                         └──► engine.apply(record, store)   (same fn as replay)
//!                                         └──► PartCtx::reply ──────────► Effects.send
//! ```
//!
//! State = snapshot + log. The runtime persists records before it releases replies, snapshots
//! the partition from time to time ([`Machine::snapshot`]) and drops the log prefix the snapshot
//! covers. Because the partition applies exactly what it logs, the log can be put
//! under a consensus library (each partition a replica group) without touching the engines.

use crate::engine::{EngineKind, PartCtx, PartitionEngine};
use crate::machine::{Effects, Input, Machine};
use crate::message::{Addr, Batched, Message};
use crate::procedure::Registry;
use litmus_core::{Catalog, Error, PartitionId, Time};
use litmus_storage::mvcc::MvccStore;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub struct Partition {
    id: PartitionId,
    kind: EngineKind,
    seed: u64,
    catalog: Arc<Catalog>,
    registry: Arc<Registry>,
    partitions: u32,
    store: MvccStore,
    engine: Box<dyn PartitionEngine>,
    rng: ChaCha8Rng,
}

#[derive(Serialize, Deserialize)]
struct Snapshot {
    store: Vec<u8>,
    engine: Vec<u8>,
}

impl Partition {
    pub fn new(id: PartitionId, engine: EngineKind, catalog: Arc<Catalog>, seed: u64) -> Self {
        Partition {
            id,
            kind: engine,
            seed,
            catalog,
            registry: Arc::new(Registry::new()),
            partitions: id.0 + 1,
            store: MvccStore::new(),
            engine: engine.partition(),
            rng: ChaCha8Rng::seed_from_u64(seed ^ (0x5041_5254 << 32) ^ id.0 as u64),
        }
    }

    /// The cluster this partition belongs to: its procedures and fragments, and how many
    /// partitions there are (engines that run one-round fragments at the partition need both).
    pub fn in_cluster(mut self, registry: Arc<Registry>, partitions: u32) -> Self {
        assert!(self.id.0 < partitions, "{} outside a cluster of {partitions} partitions", self.id);
        self.registry = registry;
        self.partitions = partitions;
        self
    }

    pub fn id(&self) -> PartitionId {
        self.id
    }

    /// Builds this partition afresh, empty, in the same cluster: what a replica rebuilds from
    /// when its speculative state must be dropped (`litmus_runtime::replica`).
    pub fn template(&self) -> impl Fn() -> Partition + Send + 'static {
        let (id, kind, seed, catalog) = (self.id, self.kind, self.seed, self.catalog.clone());
        let (registry, partitions) = (self.registry.clone(), self.partitions);
        move || Partition::new(id, kind, catalog.clone(), seed).in_cluster(registry.clone(), partitions)
    }

    /// The partition as a restart from a snapshot of it would find it, without encoding the
    /// store: the same rows, the engine's durable state carried into a fresh engine, every
    /// volatile structure (lock tables, waiting requests, caches) dropped. Valid only when
    /// everything the store and the engine state hold was logged (a replica that lost its
    /// leadership with no proposal in flight): it then equals a rebuild from the log, at the
    /// cost of the engine state rather than of the whole partition.
    pub fn restart_in_place(&mut self) -> Result<(), Error> {
        let mut fresh = (self.template())();
        fresh.engine.decode_state(&self.engine.encode_state())?;
        std::mem::swap(&mut fresh.store, &mut self.store);
        *self = fresh;
        Ok(())
    }

    /// [`crate::engine::PartitionEngine::volatile_since`].
    pub fn volatile_since(&self) -> Option<Time> {
        self.engine.volatile_since()
    }

    /// Read-only access to the store, for tests and verification.
    pub fn store(&self) -> &MvccStore {
        &self.store
    }
}

impl Machine for Partition {
    fn addr(&self) -> Addr {
        Addr::Partition(self.id)
    }

    fn recover(&mut self, snapshot: Option<&[u8]>, records: &[Vec<u8>]) -> Result<(), Error> {
        let corrupt = |what: &str, e: &dyn std::fmt::Display| Error::Storage(format!("{} {what}: {e}", self.id));
        if let Some(bytes) = snapshot {
            let snap: Snapshot = postcard::from_bytes(bytes).map_err(|e| corrupt("snapshot", &e))?;
            self.store = MvccStore::decode_snapshot(&snap.store).map_err(|e| corrupt("snapshot store", &e))?;
            self.engine.decode_state(&snap.engine)?;
        }
        for bytes in records {
            self.engine.apply_bytes(bytes, &mut self.store)?;
        }
        Ok(())
    }

    fn step(&mut self, now: Time, input: Input, out: &mut Effects) {
        let sent_before = out.send.len();
        // Counted from here: not the replay's or a test's reads before this step.
        self.store.take_work();
        let mut ctx = PartCtx {
            now,
            me: self.id,
            rng: &mut self.rng,
            catalog: &self.catalog,
            registry: &self.registry,
            partitions: self.partitions,
            store: &mut self.store,
            out,
        };
        match input {
            Input::Tick => self.engine.on_tick(&mut ctx),
            // A partition receives nothing but requests; anything else is a stray message and
            // is dropped.
            Input::Message(env) => match env.msg {
                Message::PartitionRequest(req) => self.engine.on_request(env.from, req.body, &mut ctx),
                Message::Batch(items) => {
                    for item in items {
                        if let Batched::Request(req) = item {
                            self.engine.on_request(env.from, req.body, &mut ctx)
                        }
                    }
                }
                _ => {}
            },
        }
        // The replies this step produced for one coordinator go back together.
        out.batch_sends(sent_before);
        out.work += self.store.take_work();
    }

    fn snapshot(&mut self) -> Option<Vec<u8>> {
        let snap = Snapshot { store: self.store.encode_snapshot(), engine: self.engine.encode_state() };
        Some(postcard::to_stdvec(&snap).expect("snapshot serializes"))
    }

    fn check_invariants(&self) -> Result<(), String> {
        self.engine.check_invariants()
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
