//! # `--reset`: empty a workload's tables on running servers before a bench run
//!
//! A benchmark loads its rows with inserts and checks invariants over whole tables, so a second
//! run against the same `litmus server`s would fail on duplicate keys or count the first run's
//! rows. `litmus bench W --connect ... --reset` first deletes every row of W's tables through
//! the server-side procedure [`RESET_PROCEDURE`]`(table, limit)`: one transaction scans at most
//! `limit` rows of the table from its first key and deletes them, returning how many. The bench
//! calls it until a call deletes nothing, so no transaction grows with the table.
//!
//! Deleting is idempotent, so a chunk that failed (an abort, a timeout) is simply called again.
//! The procedure scans, so it needs an engine that runs interactive procedures (not the
//! one-round-only `granola` family, which refuses it with a typed error).

use crate::setup::call_idempotent;
use litmus_client::Client;
use litmus_core::{Catalog, ColumnType, Error, InvalidInput, Value};
use litmus_protocol::{Ctx, Op, Registry};
use std::collections::HashMap;
use std::sync::Arc;

/// `litmus_reset_chunk(table string, limit int) -> [rows deleted]`.
pub const RESET_PROCEDURE: &str = "litmus_reset_chunk";
/// Rows one reset transaction deletes at most.
pub const RESET_CHUNK_ROWS: u32 = 500;

/// Registers [`RESET_PROCEDURE`] for the tables of `catalog` (their key columns are looked up
/// here, once).
pub fn register(catalog: &Catalog, registry: &mut Registry) {
    let keys: HashMap<String, Vec<usize>> = catalog.tables().map(|t| (t.name.clone(), t.primary_key.clone())).collect();
    let keys = Arc::new(keys);
    registry.register(RESET_PROCEDURE, vec![ColumnType::String, ColumnType::Int], move |ctx: Ctx, args: Vec<Value>| {
        let keys = Arc::clone(&keys);
        async move {
            let table = args.first().and_then(Value::as_str).unwrap_or_default().to_string();
            let key_cols = keys.get(&table).cloned().ok_or_else(|| InvalidInput::UnknownTable(table.clone()))?;
            let limit = args.get(1).and_then(Value::as_int).unwrap_or(0);
            if !(1..=i64::from(RESET_CHUNK_ROWS)).contains(&limit) {
                return Err(InvalidInput::Config(format!(
                    "{RESET_PROCEDURE}: limit must be in 1..={RESET_CHUNK_ROWS}, got {limit}"
                ))
                .into());
            }
            let rows = ctx.scan(&table, &[], None, limit as u32).await?;
            let deletes: Vec<_> = rows
                .iter()
                .map(|r| {
                    let key = key_cols.iter().map(|&i| r.get(i).cloned().unwrap_or(Value::Null)).collect();
                    ctx.op(Op::Delete { table: table.clone(), key })
                })
                .collect();
            for d in deletes {
                d.await?;
            }
            Ok(vec![Value::Int(rows.len() as i64)])
        }
    });
}

/// Deletes every row of `tables` through `client`; the rows deleted per table.
pub fn reset(client: &mut Client, tables: &[String]) -> Result<Vec<(String, u64)>, Error> {
    let mut out = Vec::with_capacity(tables.len());
    for table in tables {
        let mut total = 0u64;
        loop {
            let args = vec![Value::String(table.as_str().into()), Value::Int(i64::from(RESET_CHUNK_ROWS))];
            let deleted = call_idempotent(client, RESET_PROCEDURE, args)?
                .first()
                .and_then(Value::as_int)
                .ok_or_else(|| Error::Internal(format!("{RESET_PROCEDURE} returned a malformed result")))?;
            total += deleted as u64;
            if deleted == 0 {
                break;
            }
        }
        out.push((table.clone(), total));
    }
    Ok(out)
}
