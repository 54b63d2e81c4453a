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
