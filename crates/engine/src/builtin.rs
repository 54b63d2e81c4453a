//! Built-in tables and procedures every database has: a key-value table used by the runtime
//! tests, the simulator's durability check and the examples.
//!
//! * `kv(k int, v bytes)`, partitioned by `k`;
//! * `kv_get(k) -> [v | NULL]`, `kv_put(k, v)`, `kv_delete(k)`;
//! * `kv_put2(k1, v1, k2, v2)` — a two-key (usually two-partition) write.

use crate::procedure::{Ctx, Registry};
use litmus_core::{Catalog, Column, ColumnType, Partitioning, TableSchema, Value};

pub const KV_TABLE: &str = "kv";

pub fn catalog() -> Catalog {
    let mut c = Catalog::new();
    c.add(TableSchema::new(
        KV_TABLE,
        vec![Column::new("k", ColumnType::Int), Column::new("v", ColumnType::Bytes)],
        &["k"],
        Partitioning::KeyPrefix { prefix_len: 1 },
    ));
    c
}

pub fn registry() -> Registry {
    let mut r = Registry::new();
    r.register("kv_get", vec![ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
        let row = ctx.read(KV_TABLE, &args[..1]).await?;
        Ok(vec![row.map_or(Value::Null, |mut r| r.remove(1))])
    });
    r.register("kv_put", vec![ColumnType::Int, ColumnType::Bytes], |ctx: Ctx, args: Vec<Value>| async move {
        ctx.write(KV_TABLE, args).await?;
        Ok(vec![])
    });
    r.register("kv_delete", vec![ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
        ctx.delete(KV_TABLE, &args[..1]).await?;
        Ok(vec![])
    });
    r.register(
        "kv_put2",
        vec![ColumnType::Int, ColumnType::Bytes, ColumnType::Int, ColumnType::Bytes],
        |ctx: Ctx, args: Vec<Value>| async move {
            ctx.write(KV_TABLE, args[..2].to_vec()).await?;
            ctx.write(KV_TABLE, args[2..].to_vec()).await?;
            Ok(vec![])
        },
    );
    r
}

/// The banking application of Salt Figs. 1–2: `accounts(id int, bal int)` partitioned by id.
///
/// * `bank_transfer(sndr, rcvr, amt)` — the BASE transfer of Fig. 2: debit the sender in one
///   alkaline subtransaction (only if the balance covers it), credit the receiver in a second;
///   if the credit fails (e.g. no such receiver) a compensating alkaline subtransaction refunds
///   the sender. Returns nothing (a BASE transaction is answered when accepted).
/// * `bank_transfer_acid(sndr, rcvr, amt)` — the same body registered as an ACID transaction
///   (Fig. 1a); a missing receiver aborts it.
/// * `bank_total()` — the unmodified ACID `total-balance`: the sum of every balance
///   (serializable: a range read over all accounts).
pub mod bank {
    use crate::procedure::{Ctx, ProcOptions, Registry};
    use litmus_core::{Catalog, Column, ColumnType, Error, Formula, Partitioning, TableSchema, Value};

    pub const ACCOUNTS: &str = "accounts";

    pub fn catalog() -> Catalog {
        let mut c = Catalog::new();
        c.add(TableSchema::new(
            ACCOUNTS,
            vec![Column::new("id", ColumnType::Int), Column::new("bal", ColumnType::Int)],
            &["id"],
            Partitioning::KeyPrefix { prefix_len: 1 },
        ));
        c
    }

    async fn transfer(ctx: Ctx, args: Vec<Value>) -> Result<Vec<Value>, Error> {
        let (sndr, rcvr, amt) = (args[0].clone(), args[1].clone(), args[2].as_int().unwrap_or(0));
        // Alkaline 1: debit the sender if the balance covers the amount.
        let debited = async {
            ctx.begin_alkaline().await?;
            let bal = ctx.read(ACCOUNTS, std::slice::from_ref(&sndr)).await?.map_or(0, |r| r[1].as_int().unwrap_or(0));
            if bal >= amt {
                ctx.update(ACCOUNTS, std::slice::from_ref(&sndr), &[("bal", Formula::Add(Value::Int(-amt)))]).await?;
            }
            ctx.end_alkaline().await?;
            Ok::<bool, Error>(bal >= amt)
        }
        .await;
        match debited {
            Err(e) => return Err(e),        // before acceptance: the BASE transaction aborts
            Ok(false) => return Ok(vec![]), // constraint violation: nothing to do
            Ok(true) => {}
        }
        // Alkaline 2: credit the receiver; on failure, refund the sender (alkaline 3).
        let credited = async {
            ctx.begin_alkaline().await?;
            ctx.update(ACCOUNTS, std::slice::from_ref(&rcvr), &[("bal", Formula::Add(Value::Int(amt)))]).await?;
            ctx.end_alkaline().await
        }
        .await;
        if credited.is_err() {
            ctx.begin_alkaline().await?;
            ctx.update(ACCOUNTS, &[sndr], &[("bal", Formula::Add(Value::Int(amt)))]).await?;
            ctx.end_alkaline().await?;
        }
        Ok(vec![])
    }

    pub fn registry() -> Registry {
        let mut r = Registry::new();
        let params = vec![ColumnType::Int, ColumnType::Int, ColumnType::Int];
        r.register_with("bank_transfer", params.clone(), ProcOptions::base(), transfer);
        r.register("bank_transfer_acid", params, transfer);
        r.register("bank_total", vec![], |ctx: Ctx, _args: Vec<Value>| async move {
            let rows = ctx.scan(ACCOUNTS, &[], None, litmus_core::limits::SCAN_ROWS_MAX as u32).await?;
            let total: i64 = rows.iter().map(|r| r[1].as_int().unwrap_or(0)).sum();
            Ok(vec![Value::Int(total), Value::Int(rows.len() as i64)])
        });
        // An insert, not a write: a late duplicate of an open whose answer was lost must not
        // reset a balance that transfers have since changed.
        r.register("bank_open", vec![ColumnType::Int, ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
            ctx.insert(ACCOUNTS, args).await?;
            Ok(vec![])
        });
        r
    }
}
