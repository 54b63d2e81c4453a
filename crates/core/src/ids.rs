//! Identifiers. Small copyable newtypes so that a partition id is never passed as a node id.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id {
    ($(#[$m:meta])* $name:ident($t:ty), $prefix:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
        pub struct $name(pub $t);
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id!(/// A server process (hosts a coordinator and some partitions).
    NodeId(u32), "n");
id!(/// A partition of the key space; later a replica group.
    PartitionId(u32), "p");
id!(/// A client session.
    ClientId(u64), "c");
id!(/// A table in the catalog.
    TableId(u32), "t");
id!(/// A client request, unique per client; used to deduplicate retransmissions.
    RequestId(u64), "r");

/// A transaction, unique in the cluster: the coordinator that runs it and a sequence number that
/// the coordinator never reuses (it survives restarts through the coordinator's epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TxnId {
    pub node: NodeId,
    pub epoch: u32,
    pub seq: u64,
}

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "txn{}.{}.{}", self.node.0, self.epoch, self.seq)
    }
}
