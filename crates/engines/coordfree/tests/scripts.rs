//! Scripted trace tests of `coordfree` (`tests/scripts/`, one scenario per file, each naming
//! the CF rule it shows). Regenerate with `UPDATE_GOLDENFILES=1` and review the diff; see
//! `litmus_protocol::testkit::script` for the commands.

use litmus_core::{Catalog, Column, ColumnType, Error, Partitioning, TableSchema, Value};
use litmus_protocol::testkit::script::{run_dir, CatalogDef, ScriptRunner};
use litmus_protocol::{Ctx, Registry};

/// `kv(k int, v int)` (key k on partition k mod partitions), for RAMP scenarios.
fn ramp_catalog() -> Catalog {
    let mut c = Catalog::new();
    c.add(TableSchema::new(
        "kv",
        vec![Column::new("k", ColumnType::Int), Column::new("v", ColumnType::Int)],
        &["k"],
        Partitioning::KeyPrefix { prefix_len: 1 },
    ));
    c
}

/// `put2(k1, k2, v)`: writes `v` to both keys. `get2(k1, k2)`: reads both in one batch (RAMP's
/// `GET_ALL`), a missing row as NULL.
fn ramp_registry() -> Registry {
    let mut r = Registry::new();
    let int = || ColumnType::Int;
    r.register("put2", vec![int(), int(), int()], |ctx: Ctx, args: Vec<Value>| async move {
        ctx.write("kv", vec![args[0].clone(), args[2].clone()]).await?;
        ctx.write("kv", vec![args[1].clone(), args[2].clone()]).await?;
        Ok(vec![])
    });
    r.register("get2", vec![int(), int()], |ctx: Ctx, args: Vec<Value>| async move {
        let rows = ctx.read_many("kv", &[vec![args[0].clone()], vec![args[1].clone()]]).await?;
        Ok::<_, Error>(rows.into_iter().map(|r| r.map_or(Value::Null, |r| r[1].clone())).collect())
    });
    r
}

#[test]
fn scripts() {
    run_dir("tests/scripts", || {
        ScriptRunner::new(&[litmus_coordfree::COORDFREE]).with_catalog(CatalogDef {
            name: "ramp",
            catalog: ramp_catalog,
            registry: ramp_registry,
        })
    });
}
