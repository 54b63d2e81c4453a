use litmus_protocol::builtin;
use litmus_runtime::sim::{SimConfig, Simulator};
use litmus_runtime::{ClusterSpec, Topology};
use litmus_workloads::tpcc::sim::TpccSim;
use litmus_workloads::tpcc::{Tpcc, TpccOptions};
use litmus_workloads::workload::Workload;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn probe() {
    let from: u64 = std::env::var("FROM").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let n: u64 = std::env::var("N").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let crash: f64 = std::env::var("CRASH").ok().and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let mut bad = Vec::new();
    for seed in from..from + n {
        for base in [2u32, 5] {
            let opts = TpccOptions { base_txns: Some(base), scale_div: 100, delivery_txns: 1, ..TpccOptions::DEFAULT };
            let w = Tpcc::new(&opts, false).unwrap();
            let mut catalog = builtin::catalog();
            catalog.merge(&w.catalog());
            let mut registry = builtin::registry();
            w.register(&mut registry);
            let topology = Topology::new(3, 4).unwrap().with_replicas(3).unwrap();
            let spec = ClusterSpec {
                engine: litmus_engines::SALT,
                topology,
                catalog: Arc::new(catalog),
                registry: Arc::new(registry),
                seed,
            };
            let mut cfg = SimConfig::new(seed).with_faults();
            cfg.net.loss = 0.0;
            cfg.net.duplicate = 0.0;
            cfg.faults.crash = crash;
            cfg.faults.partition = 0.5;
            cfg.faults.outage_min = Duration::from_millis(300);
            cfg.faults.outage_max = Duration::from_millis(1500);
            cfg.clients = 16;
            cfg.duration = Duration::from_millis(4000);
            cfg.request_timeout = Duration::from_secs(3);
            cfg.invariant_check_every = 64;
            let mut sim = Simulator::new(spec, cfg).unwrap();
            let mut driver = TpccSim::new(w);
            driver.load(&mut sim).unwrap();
            match sim.run(&mut driver) {
                Ok(r) => eprintln!("seed {seed} base {base}: ok {}", r),
                Err(e) => {
                    eprintln!("seed {seed} base {base}: FAIL {e}");
                    bad.push((seed, base));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{bad:?}");
}
