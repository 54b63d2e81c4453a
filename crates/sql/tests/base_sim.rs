//! A SQL BASE procedure under faults (Salt §4–§6): the bank, its transfer the plan of a `CALL`
//! of a `SET litmus.transaction_class = 'base'` procedure — debit, `COMMIT`, credit — run as
//! `litmus.sql_base`, with crashes (coordinators included), partitions, loss and duplication.
//! ACID totals never see a transfer between its subtransactions, no update is lost, no
//! balance goes below its `CHECK`, and after the faults heal every accepted transfer has rolled
//! forward (Salt §6.2 re-runs `litmus.sql_base` from its argument): the money is all there.

use litmus_core::{Error, Value};
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::procedure::{Ctx, Registry};
use litmus_runtime::sim::workload::Bank;
use litmus_runtime::sim::{SimConfig, SimDriver, Simulator};
use litmus_runtime::{ClusterSpec, Topology};
use litmus_sql::call_one_round::{Planned, RowWrite, RowWriteKind, BASE_PROCEDURE};
use litmus_sql::catalog::{decode_row, encode_key, encode_row, table_def, TableDef, ROWS_TABLE};
use litmus_sql::Datum;
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::time::Duration;

/// The bank's transfer, as the driver names it before it becomes a planned SQL procedure.
const TRANSFER: &str = "sql_transfer";

fn acct() -> TableDef {
    let stmt = &litmus_sql::parse("CREATE TABLE acct (id INT PRIMARY KEY, bal INT CHECK (bal >= 0))").unwrap()[0];
    let sqlparser::ast::Statement::CreateTable(ct) = stmt else { unreachable!("a CREATE TABLE") };
    TableDef { id: 16, ..table_def(ct).unwrap() }
}

fn stored(def: &TableDef, row: &[Datum]) -> Vec<Value> {
    let mut stored = def.stored_key(&def.key_of(row).unwrap());
    stored.push(Value::Bytes(encode_row(row).unwrap().into()));
    stored
}

/// SQL's procedures, and the bank's open and total over the SQL table: `bank_open(id,
/// initial)` inserts a row, `bank_total()` returns `[total, count, min]` of the balances, read
/// in one ACID transaction.
fn spec(seed: u64) -> ClusterSpec {
    let mut catalog = litmus_protocol::builtin::catalog();
    let mut registry: Registry = litmus_protocol::builtin::registry();
    litmus_sql::install(&mut catalog, &mut registry);
    let ints = vec![litmus_core::ColumnType::Int, litmus_core::ColumnType::Int];
    registry.register("bank_open", ints, |ctx: Ctx, args: Vec<Value>| async move {
        let (id, initial) = (args[0].as_int().unwrap_or(0), args[1].as_int().unwrap_or(0));
        ctx.insert(ROWS_TABLE, stored(&acct(), &[Datum::Int(id), Datum::Int(initial)])).await?;
        Ok(vec![])
    });
    registry.register("bank_total", vec![], |ctx: Ctx, _args: Vec<Value>| async move {
        let def = acct();
        let limit = litmus_core::limits::SCAN_ROWS_MAX as u32;
        let rows = ctx.scan(ROWS_TABLE, &[Value::Int(def.id)], None, limit).await?;
        let (mut total, mut min) = (0i64, None::<i64>);
        for r in &rows {
            let Some(Value::Bytes(b)) = r.last() else { return Err(Error::Internal("a short row".into())) };
            let row = decode_row(b, &def).map_err(|e| Error::Internal(e.message))?;
            let Datum::Int(bal) = row[1] else { return Err(Error::Internal(format!("balance {:?}", row[1]))) };
            total += bal;
            min = Some(min.map_or(bal, |m: i64| m.min(bal)));
        }
        Ok(vec![Value::Int(total), Value::Int(rows.len() as i64), min.map_or(Value::Null, Value::Int)])
    });
    ClusterSpec {
        engine: litmus_engines::SALT,
        topology: Topology::new(3, 6).unwrap(),
        catalog: Arc::new(catalog),
        registry: Arc::new(registry),
        seed,
    }
}

/// The plan of `CALL transfer(src, dst, amount)`: debit, `COMMIT`, credit.
fn transfer(src: i64, dst: i64, amount: i64) -> Vec<Value> {
    let def = acct();
    let update = |id: i64, set: &str| RowWrite {
        def: def.clone(),
        params: vec![Datum::Int(amount)],
        now_us: 0,
        kind: RowWriteKind::Update {
            pk: encode_key(&[Datum::Int(id)]).unwrap(),
            alias: "acct".into(),
            sets: vec![(1, set.into())],
            filter: vec![],
        },
    };
    let planned =
        Planned { groups: vec![vec![update(src, "bal - $1")], vec![update(dst, "bal + $1")]], catalog: vec![] };
    vec![Value::Bytes(postcard::to_allocvec(&planned).unwrap().into())]
}

/// The bank's driver, its transfers sent as the planned BASE procedure.
struct SqlBank(Bank);

impl SimDriver for SqlBank {
    fn next(&mut self, client: usize, rng: &mut ChaCha8Rng) -> Option<RequestBody> {
        match self.0.next(client, rng)? {
            RequestBody::Call { procedure, args, retrying_for } if procedure == TRANSFER => {
                let int = |i: usize| args[i].as_int().unwrap_or(0);
                let args = transfer(int(0), int(1), int(2));
                Some(RequestBody::Call { procedure: BASE_PROCEDURE.into(), args, retrying_for })
            }
            other => Some(other),
        }
    }

    fn done(&mut self, client: usize, request: &RequestBody, result: &Result<ResponseBody, Error>) {
        self.0.done(client, request, result)
    }

    fn verify(&mut self, sim: &mut Simulator) -> Result<(), String> {
        self.0.verify(sim)
    }
}

#[test]
fn salt_6_2_a_sql_base_procedure_keeps_the_bank_whole_under_faults() {
    let seeds: u64 = std::env::var("LITMUS_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300) / 15;
    let mut checked = 0;
    for seed in 0..seeds {
        let mut cfg = SimConfig::new(seed).with_faults();
        cfg.faults.crash = 0.04;
        cfg.faults.partition = 0.04;
        cfg.duration = Duration::from_millis(1500);
        let mut sim = Simulator::new(spec(seed), cfg).unwrap();
        let mut driver = SqlBank(Bank::new(8, TRANSFER));
        if let Err(e) = sim.run(&mut driver) {
            let runs_it = 15 * (seed + 1);
            panic!(
                "seed {seed} failed: {e}\nreplay: LITMUS_SIM_SEEDS={runs_it} cargo test -p litmus-sql --test base_sim"
            );
        }
        assert!(driver.0.final_checked, "seed {seed}: the final total was never compared");
        checked += driver.0.totals_checked;
    }
    assert!(checked > seeds, "only {checked} totals checked");
}
