//! `litmus server`: one node of a TCP cluster.

use anyhow::Context;
use litmus_runtime::tcp::{serve, NodeConfig};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct ServerArgs {
    /// Node configuration (TOML): node, listen, data_dir, engine, partitions, fsync, peers.
    #[arg(long)]
    config: PathBuf,
    /// Override `node` (this node's id: its index in `peers`).
    #[arg(long)]
    node: Option<u32>,
    /// Override `listen` (address to accept peers and clients on).
    #[arg(long)]
    listen: Option<String>,
    /// Override `data_dir` (where the WALs and snapshots live).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Override `engine`.
    #[arg(long)]
    engine: Option<String>,
    /// Override `fsync` (always: fdatasync every group commit; never: leave it to the OS).
    #[arg(long)]
    fsync: Option<String>,
}

pub fn load_config(args: &ServerArgs) -> anyhow::Result<NodeConfig> {
    let text = std::fs::read_to_string(&args.config).with_context(|| format!("reading {}", args.config.display()))?;
    let mut cfg: NodeConfig = toml::from_str(&text).with_context(|| format!("parsing {}", args.config.display()))?;
    if let Some(n) = args.node {
        cfg.node = n;
    }
    if let Some(l) = &args.listen {
        cfg.listen = l.clone();
    }
    if let Some(d) = &args.data_dir {
        cfg.data_dir = d.clone();
    }
    if let Some(e) = &args.engine {
        cfg.engine = e.clone();
    }
    if let Some(f) = &args.fsync {
        cfg.fsync = f.parse()?;
    }
    cfg.topology()?;
    Ok(cfg)
}

pub fn run(args: ServerArgs) -> anyhow::Result<()> {
    let cfg = load_config(&args)?;
    let (catalog, registry) = litmus_bench::full_schema();
    serve(cfg, Arc::new(catalog), Arc::new(registry))?;
    Ok(())
}
