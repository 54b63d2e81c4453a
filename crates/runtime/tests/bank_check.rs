//! The bank simulation's checker fails when the bank is broken on purpose (a check counts only
//! once it has been seen to fail): a lost row, money made from nothing, a negative balance —
//! each injected after the run, before the checker looks — and it passes on the intact bank.

use litmus_core::{Error, Formula, Value};
use litmus_protocol::builtin::{self, bank::ACCOUNTS};
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::procedure::{Ctx, Registry};
use litmus_protocol::EngineKind;
use litmus_runtime::sim::workload::Bank;
use litmus_runtime::sim::{SimConfig, SimDriver, Simulator};
use litmus_runtime::{ClusterSpec, Topology};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::time::Duration;

/// Test-only procedures that break the bank's invariants.
fn breakers() -> Registry {
    let mut r = Registry::new();
    r.register("lose_row", vec![], |ctx: Ctx, _args: Vec<Value>| async move {
        ctx.delete(ACCOUNTS, &[Value::Int(0)]).await?;
        Ok(vec![])
    });
    r.register("mint", vec![], |ctx: Ctx, _args: Vec<Value>| async move {
        ctx.update(ACCOUNTS, &[Value::Int(0)], &[("bal", Formula::Add(Value::Int(1)))]).await?;
        Ok(vec![])
    });
    r.register("overdraw", vec![], |ctx: Ctx, _args: Vec<Value>| async move {
        let bal = ctx.read(ACCOUNTS, &[Value::Int(0)]).await?.map_or(0, |r| r[1].as_int().unwrap_or(0));
        ctx.update(ACCOUNTS, &[Value::Int(0)], &[("bal", Formula::Add(Value::Int(-bal - 5)))]).await?;
        ctx.update(ACCOUNTS, &[Value::Int(1)], &[("bal", Formula::Add(Value::Int(bal + 5)))]).await?;
        Ok(vec![])
    });
    r
}

/// The bank workload, with `mutation` run once after the run, before the checker.
struct Broken {
    bank: Bank,
    mutation: Option<&'static str>,
}

impl SimDriver for Broken {
    fn next(&mut self, client: usize, rng: &mut ChaCha8Rng) -> Option<RequestBody> {
        self.bank.next(client, rng)
    }
    fn done(&mut self, client: usize, request: &RequestBody, result: &Result<ResponseBody, Error>) {
        self.bank.done(client, request, result)
    }
    fn verify(&mut self, sim: &mut Simulator) -> Result<(), String> {
        if let Some(m) = self.mutation {
            let call = RequestBody::Call { procedure: m.into(), args: vec![], retrying_for: Duration::ZERO };
            let mut applied = false;
            for _ in 0..40 {
                if sim.request(call.clone()).is_ok() {
                    applied = true;
                    break;
                }
                sim.idle(Duration::from_millis(500)).map_err(|e| e.to_string())?;
            }
            assert!(applied, "the mutation {m} never ran");
        }
        self.bank.verify(sim)
    }
}

fn run(engine: EngineKind, mutation: Option<&'static str>) -> (Result<(), String>, u64) {
    let mut catalog = builtin::catalog();
    catalog.merge(&builtin::bank::catalog());
    let mut registry = builtin::registry();
    registry.merge(&builtin::bank::registry());
    registry.merge(&breakers());
    let spec = ClusterSpec {
        engine,
        topology: Topology::new(3, 6).unwrap(),
        catalog: Arc::new(catalog),
        registry: Arc::new(registry),
        seed: 5,
    };
    let mut cfg = SimConfig::new(5);
    cfg.duration = Duration::from_millis(800);
    let mut sim = Simulator::new(spec, cfg).unwrap();
    let transfer = if engine == litmus_engines::ACID { "bank_transfer_acid" } else { "bank_transfer" };
    let mut driver = Broken { bank: Bank::new(8, transfer), mutation };
    let r = sim.run(&mut driver).map(|_| ());
    (r, driver.bank.totals_checked)
}

#[test]
fn bank_check_passes_on_an_intact_bank_and_compares_totals() {
    for engine in [litmus_engines::ACID, litmus_engines::SALT] {
        let (r, checked) = run(engine, None);
        assert!(r.is_ok(), "{engine}: {r:?}");
        assert!(checked > 0, "{engine}: no total compared during the run");
    }
}

#[test]
fn bank_check_fails_on_a_lost_row() {
    let (r, _) = run(litmus_engines::ACID, Some("lose_row"));
    assert!(r.as_ref().is_err_and(|e| e.contains("lost or phantom row")), "{r:?}");
}

#[test]
fn bank_check_fails_when_money_is_made() {
    let (r, _) = run(litmus_engines::ACID, Some("mint"));
    assert!(r.as_ref().is_err_and(|e| e.contains("expected")), "{r:?}");
}

#[test]
fn bank_check_fails_on_a_negative_balance() {
    let (r, _) = run(litmus_engines::ACID, Some("overdraw"));
    assert!(r.as_ref().is_err_and(|e| e.contains("negative")), "{r:?}");
}
