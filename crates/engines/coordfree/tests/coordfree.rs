//! The coordination-free engine (`coordfree`) against naive models, over message orders chosen
//! by proptest: RAMP read atomicity (no fractured reads), sequential gap-free ids from the
//! nested atomic increment (VLDB'15 §6.2), and refusal of procedures that need coordination.
//! Each check has a test beside it that feeds it a broken history and watches it fail.

use litmus_core::{Catalog, Column, ColumnType, Error, Formula, InvalidInput, Partitioning, TableSchema, Value};
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::procedure::Coordination;
use litmus_protocol::testkit::SyncCluster;
use litmus_protocol::{Ctx, Op, OpResult, Registry};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

// Two keys per partition (key k on partition k mod 3): a writer's versions of two keys of one
// partition share its local timestamp there, which is what CF-4c's skipped second rounds rely on.
const KEYS: i64 = 6;
const PARTITIONS: u32 = 3;

fn kv_catalog() -> Catalog {
    let mut c = Catalog::new();
    c.add(TableSchema::new(
        "kv",
        vec![Column::new("k", ColumnType::Int), Column::new("v", ColumnType::Int)],
        &["k"],
        Partitioning::KeyPrefix { prefix_len: 1 },
    ));
    // `ranged (g, k) -> v`, partitioned by `g`: group 0's rows are one range on partition 0.
    c.add(TableSchema::new(
        "ranged",
        vec![Column::new("g", ColumnType::Int), Column::new("k", ColumnType::Int), Column::new("v", ColumnType::Int)],
        &["g", "k"],
        Partitioning::KeyPrefix { prefix_len: 1 },
    ));
    // `item (i) -> v`, replicated on every partition.
    c.add(TableSchema::new(
        "item",
        vec![Column::new("i", ColumnType::Int), Column::new("v", ColumnType::Int)],
        &["i"],
        Partitioning::Replicated,
    ));
    c
}

fn read_op(k: i64) -> Op {
    Op::Read { table: "kv".into(), key: vec![Value::Int(k)] }
}

/// `put(tag, mask)`: writes `tag` to every key in the bit mask. `get_all()`: reads every key in
/// one batch (all six reads outstanding together, RAMP's `GET_ALL`). `get_twice()`: reads the
/// first half, then every key in one batch (the first half again from its cache, CF-4a) and
/// returns the second batch: a writer learnt in the second batch may name a key of the first
/// that its partition served before that writer committed there (CF-4c must not skip it).
fn kv_registry() -> Registry {
    let mut r = Registry::new();
    r.register("put", vec![ColumnType::Int, ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
        let (tag, mask) = (args[0].as_int().unwrap_or(0), args[1].as_int().unwrap_or(0));
        for k in (0..KEYS).filter(|k| mask & (1 << k) != 0) {
            ctx.op(Op::Write { table: "kv".into(), row: vec![Value::Int(k), Value::Int(tag)].into() }).await?;
        }
        Ok(vec![])
    });
    r.register("get_all", vec![], |ctx: Ctx, _args: Vec<Value>| async move { read_all(&ctx).await });
    // `put_many(tag, mask)` and `get_many()`: `put` and `get_all` as one batched write and one
    // batched read (`write_many`, `read_many`: a piece per partition, each asked in one request).
    r.register("put_many", vec![ColumnType::Int, ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
        let (tag, mask) = (args[0].as_int().unwrap_or(0), args[1].as_int().unwrap_or(0));
        let puts = (0..KEYS)
            .filter(|k| mask & (1 << k) != 0)
            .map(|k| Op::Write { table: "kv".into(), row: vec![Value::Int(k), Value::Int(tag)].into() })
            .collect();
        ctx.write_many(puts).await?;
        Ok(vec![])
    });
    r.register("get_many", vec![], |ctx: Ctx, _args: Vec<Value>| async move {
        let keys: Vec<Vec<Value>> = (0..KEYS).map(|k| vec![Value::Int(k)]).collect();
        let rows = ctx.read_many("kv", &keys).await?;
        rows.into_iter().map(|r| r.map(|r| r[1].clone()).ok_or_else(|| Error::Internal("no row".into()))).collect()
    });
    // `bump_many(mask, by)`: adds `by` to the keys in mask in one batched write of updates
    // (each validated against its row), then reads every key in one batched read: the keys it
    // updated show its own writes.
    r.register("bump_many", vec![ColumnType::Int, ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
        let (mask, by) = (args[0].as_int().unwrap_or(0), args[1].as_int().unwrap_or(0));
        let bumps = (0..KEYS)
            .filter(|k| mask & (1 << k) != 0)
            .map(|k| Op::Update {
                table: "kv".into(),
                key: vec![Value::Int(k)],
                updates: vec![("v".into(), Formula::Add(Value::Int(by)))],
            })
            .collect();
        ctx.write_many(bumps).await?;
        let keys: Vec<Vec<Value>> = (0..KEYS).map(|k| vec![Value::Int(k)]).collect();
        let rows = ctx.read_many("kv", &keys).await?;
        Ok(rows.into_iter().map(|r| r.map_or(Value::Null, |r| r[1].clone())).collect())
    });
    // `insert_pair(a, b)`: inserts `kv a` and `kv b` in one batched write; if that fails,
    // returns the error's text and commits what else the transaction wrote (nothing).
    r.register("insert_pair", vec![ColumnType::Int, ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
        let row = |k: &Value| Op::Insert { table: "kv".into(), row: vec![k.clone(), Value::Int(77)].into() };
        match ctx.write_many(vec![row(&args[0]), row(&args[1])]).await {
            Ok(()) => Ok(vec![]),
            Err(e) => Ok(vec![Value::String(e.to_string().into())]),
        }
    });
    // `insert_and_put(tag, mask)`: inserts `ranged (0, tag)` and writes `tag` to the keys in mask.
    r.register("insert_and_put", vec![ColumnType::Int, ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
        let (tag, mask) = (args[0].as_int().unwrap_or(0), args[1].as_int().unwrap_or(0));
        let row = vec![Value::Int(0), Value::Int(tag), Value::Int(tag)];
        ctx.op(Op::Insert { table: "ranged".into(), row: row.into() }).await?;
        for k in (0..KEYS).filter(|k| mask & (1 << k) != 0) {
            ctx.op(Op::Write { table: "kv".into(), row: vec![Value::Int(k), Value::Int(tag)].into() }).await?;
        }
        Ok(vec![])
    });
    // `insert_item_and_put(tag, mask)`: inserts the replicated `item (tag)` and writes `tag` to
    // the `kv` keys in mask.
    r.register(
        "insert_item_and_put",
        vec![ColumnType::Int, ColumnType::Int],
        |ctx: Ctx, args: Vec<Value>| async move {
            let (tag, mask) = (args[0].as_int().unwrap_or(0), args[1].as_int().unwrap_or(0));
            ctx.op(Op::Insert { table: "item".into(), row: vec![Value::Int(tag), Value::Int(tag)].into() }).await?;
            for k in (0..KEYS).filter(|k| mask & (1 << k) != 0) {
                ctx.op(Op::Write { table: "kv".into(), row: vec![Value::Int(k), Value::Int(tag)].into() }).await?;
            }
            Ok(vec![])
        },
    );
    // `get_items_and_kv()`: reads items 1..=3 and every `kv` key in one batch; returns the six
    // `kv` tags, then the items found.
    r.register("get_items_and_kv", vec![], |ctx: Ctx, _args: Vec<Value>| async move {
        let items: Vec<_> =
            (1..=3).map(|i| ctx.op(Op::Read { table: "item".into(), key: vec![Value::Int(i)] })).collect();
        let mut out = read_all(&ctx).await?;
        for f in items {
            if let OpResult::Row(Some(row)) = f.await? {
                out.push(row[1].clone());
            }
        }
        Ok(out)
    });
    // `scan_then_get()`: scans group 0 of `ranged`, then reads every key of `kv` in a later
    // batch; returns the six tags read, then the scanned rows' tags.
    r.register("scan_then_get", vec![], |ctx: Ctx, _args: Vec<Value>| async move {
        let scan =
            Op::Scan { table: "ranged".into(), start: vec![Value::Int(0)], end: Some(vec![Value::Int(1)]), limit: 100 };
        let scanned = match ctx.op(scan).await? {
            OpResult::Rows(rows) => rows.into_iter().map(|row| row[2].clone()).collect::<Vec<_>>(),
            other => return Err(Error::Internal(format!("{other:?}"))),
        };
        let mut out = read_all(&ctx).await?;
        out.extend(scanned);
        Ok(out)
    });
    r.register("get_twice", vec![], |ctx: Ctx, _args: Vec<Value>| async move {
        for f in (0..KEYS / 2).map(|k| ctx.op(read_op(k))).collect::<Vec<_>>() {
            f.await?;
        }
        read_all(&ctx).await
    });
    r.register("get_halves", vec![], |ctx: Ctx, _args: Vec<Value>| async move {
        let mut out = Vec::new();
        for half in [0..KEYS / 2, KEYS / 2..KEYS] {
            for f in half.map(|k| ctx.op(read_op(k))).collect::<Vec<_>>() {
                match f.await? {
                    OpResult::Row(Some(row)) => out.push(row[1].clone()),
                    other => return Err(Error::Internal(format!("{other:?}"))),
                }
            }
        }
        Ok(out)
    });
    r
}

/// Every key's tag, read in one batch (all reads outstanding together).
async fn read_all(ctx: &Ctx) -> Result<Vec<Value>, Error> {
    let futs: Vec<_> = (0..KEYS).map(|k| ctx.op(read_op(k))).collect();
    let mut out = Vec::new();
    for f in futs {
        match f.await? {
            OpResult::Row(Some(row)) => out.push(row[1].clone()),
            other => return Err(Error::Internal(format!("{other:?}"))),
        }
    }
    Ok(out)
}

/// A reader's returned tags (panics on anything else, naming the reader).
fn returned_tags(c: &SyncCluster, client: u64, id: u64) -> Vec<i64> {
    match c.response(client, id) {
        Some(Ok(ResponseBody::Returned(v))) => v.iter().map(|v| v.as_int().unwrap()).collect(),
        other => panic!("reader {client}: {other:?}"),
    }
}

/// What reader `client` returned for its call `id` of `body`; a reader refused with a
/// retryable abort (CF-4e, CF-8) calls once more, with nothing else in flight, and that is taken.
fn read_after_retry(c: &mut SyncCluster, client: u64, mut id: u64, body: RequestBody) -> Vec<i64> {
    if matches!(c.response(client, id), Some(Err(e)) if e.is_retryable()) {
        id = c.send(client, body);
        c.settle();
    }
    returned_tags(c, client, id)
}

/// Every writer's call returned (so a check over the readers is about something).
fn all_returned(c: &SyncCluster, writers: &[(u64, u64)]) -> Result<(), String> {
    match writers.iter().find(|&&(client, id)| !matches!(c.response(client, id), Some(Ok(ResponseBody::Returned(_))))) {
        Some(&(client, id)) => Err(format!("writer {client}: {:?}", c.response(client, id))),
        None => Ok(()),
    }
}

/// Every key written with tag 0, and a `put` of `tag` to every key queued (not delivered).
fn all_keys_then_a_queued_put(tag: i64) -> SyncCluster {
    let mut c = SyncCluster::new(litmus_coordfree::COORDFREE, kv_catalog(), kv_registry(), PARTITIONS);
    let all = Value::Int((1 << KEYS) - 1);
    c.proc(0, "put", vec![Value::Int(0), all.clone()]).unwrap();
    c.send(1, call("put", vec![Value::Int(tag), all]));
    c
}

fn call(procedure: &str, args: Vec<Value>) -> RequestBody {
    RequestBody::Call { procedure: procedure.into(), args, retrying_for: Duration::ZERO }
}

/// Delivers every queued message in the order `choices` picks (index modulo the queue), then
/// settles.
fn deliver_in(c: &mut SyncCluster, choices: &[usize]) {
    let mut i = 0;
    while !c.queue.is_empty() {
        let pick = choices.get(i).copied().unwrap_or(0) % c.queue.len();
        c.queue.swap(0, pick);
        c.deliver_one();
        i += 1;
    }
    c.settle();
}

/// The naive model of read atomicity (RAMP §3, Definition 3): a read of key `a` from writer `Wa`
/// and of key `b` from writer `Wb` is fractured if `Wb` also wrote `a` and `Wa` comes before
/// `Wb` in `a`'s version order. `orders[a]` is key `a`'s version order (tags, oldest first),
/// `writes[tag]` the keys that writer wrote. Returns the first fractured pair.
fn fractured(read: &[i64], orders: &[Vec<i64>], writes: &BTreeMap<i64, Vec<i64>>) -> Option<(usize, usize)> {
    for (a, &wa) in read.iter().enumerate() {
        for (b, &wb) in read.iter().enumerate() {
            if a == b || !writes.get(&wb).is_some_and(|ks| ks.contains(&(a as i64))) {
                continue;
            }
            let pos = |tag| orders[a].iter().position(|t| *t == tag);
            if pos(wa) < pos(wb) {
                return Some((a, b));
            }
        }
    }
    None
}

/// Each key's version order at its partition, as tags (the store keeps `VERSIONS_KEPT`, more
/// than the writers of one case).
fn version_orders(c: &SyncCluster) -> Vec<Vec<i64>> {
    (0..KEYS)
        .map(|k| {
            let p = &c.partitions[(k as u32 % PARTITIONS) as usize];
            let key = litmus_core::Key::encode(&[Value::Int(k)]).unwrap();
            let table = litmus_core::TableId(0);
            let mut vs: Vec<(u64, i64)> = p
                .store()
                .versions(table, &key)
                .map(|(ts, row)| (ts.0, row.and_then(|r| r[1].as_int()).unwrap_or(-1)))
                .collect();
            vs.sort();
            vs.into_iter().map(|(_, tag)| tag).collect()
        })
        .collect()
}

/// Concurrent multi-partition writers (`masks`) and readers running `procedures` in turn,
/// messages delivered in the order `choices` picks: the first fractured read, if any. A reader
/// refused with a retryable abort (CF-4e, CF-8) calls again once the writers are done.
fn fractured_read(masks: &[i64], readers: usize, choices: &[usize], procedures: &[&str]) -> Result<(), String> {
    fractured_read_by("put", masks, readers, choices, procedures)
}

/// [`fractured_read`] with the writers running `writer`.
fn fractured_read_by(
    writer: &str,
    masks: &[i64],
    readers: usize,
    choices: &[usize],
    procedures: &[&str],
) -> Result<(), String> {
    let mut c = SyncCluster::new(litmus_coordfree::COORDFREE, kv_catalog(), kv_registry(), PARTITIONS);
    c.proc(0, "put", vec![Value::Int(0), Value::Int((1 << KEYS) - 1)]).unwrap();
    let mut writes = BTreeMap::from([(0, (0..KEYS).collect::<Vec<_>>())]);
    for (i, &mask) in masks.iter().enumerate() {
        let tag = i as i64 + 1;
        writes.insert(tag, (0..KEYS).filter(|k| mask & (1 << k) != 0).collect());
        c.send(10 + i as u64, call(writer, vec![Value::Int(tag), Value::Int(mask)]));
    }
    let reads: Vec<(u64, u64)> = (0..readers)
        .map(|r| {
            let procedure = procedures[r % procedures.len()];
            (100 + r as u64, c.send(100 + r as u64, call(procedure, vec![])))
        })
        .collect();
    deliver_in(&mut c, choices);
    let orders = version_orders(&c);
    for (client, id) in reads {
        let procedure = procedures[(client - 100) as usize % procedures.len()];
        let got = read_after_retry(&mut c, client, id, call(procedure, vec![]));
        if let Some(pair) = fractured(&got, &orders, &writes) {
            return Err(format!("reader {client} read {got:?}, fractured at {pair:?}, orders {orders:?}"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// RAMP-Fast (CF-3, CF-4, CF-4c): concurrent multi-partition writers and one-batch readers,
    /// messages in any order; no read is fractured against the partitions' version orders.
    #[test]
    fn rule_cf4_ramp_reads_are_never_fractured(
        masks in proptest::collection::vec(1i64..64, 1..=3),
        readers in 1usize..6,
        choices in proptest::collection::vec(0usize..64, 0..400),
    ) {
        prop_assert_eq!(fractured_read(&masks, readers, &choices, &["get_all"]), Ok(()));
    }

    /// The same with readers that read part of the keys first and then all of them (the first
    /// part again from the transaction's cache, CF-4a), so that a second round can ask for a
    /// writer's version of a key read at another writer's prepared version (CF-4d). Without CF-4d
    /// this failed in about one schedule in three thousand.
    #[test]
    fn rule_cf4_two_batch_readers_are_never_fractured(
        masks in proptest::collection::vec(1i64..64, 1..=3),
        readers in 1usize..6,
        choices in proptest::collection::vec(0usize..64, 0..400),
    ) {
        prop_assert_eq!(fractured_read(&masks, readers, &choices, &["get_all", "get_twice"]), Ok(()));
    }

    /// The same with batched writes and reads (`write_many`, `read_many`): a batched read's
    /// keys join the batch as single reads would, and go to each partition in one request.
    #[test]
    fn rule_cf4h_batched_reads_are_never_fractured(
        masks in proptest::collection::vec(1i64..64, 1..=3),
        readers in 1usize..6,
        choices in proptest::collection::vec(0usize..64, 0..400),
    ) {
        prop_assert_eq!(fractured_read_by("put_many", &masks, readers, &choices, &["get_many", "get_twice"]), Ok(()));
    }

    /// Readers that read half the keys, then the other half, and return both: a writer learnt
    /// in the second batch may name a key of the first, already handed to the procedure at an
    /// older version (a fracture backwards, CF-4e): such a reader is refused and retries.
    #[test]
    fn rule_cf4e_reads_across_batches_are_never_fractured(
        masks in proptest::collection::vec(1i64..64, 1..=3),
        readers in 1usize..6,
        choices in proptest::collection::vec(0usize..64, 0..400),
    ) {
        prop_assert_eq!(fractured_read(&masks, readers, &choices, &["get_halves"]), Ok(()));
    }
}

/// Writers that each insert one row and write `kv` keys (`masks`; `writer(tag, mask)`), and
/// readers that read the `kv` keys and the inserted rows (`reader()`: six `kv` tags, then the
/// tags of the rows it found), messages in the order `choices` picks: the first reader that
/// read a writer's `kv` write but not its row. Every writer must commit (so the check is about
/// something), and a reader refused with a retryable abort calls again once they are done.
fn missed_row(writer: &str, reader: &str, masks: &[i64], readers: usize, choices: &[usize]) -> Result<(), String> {
    let mut c = SyncCluster::new(litmus_coordfree::COORDFREE, kv_catalog(), kv_registry(), PARTITIONS);
    c.proc(0, "put", vec![Value::Int(0), Value::Int((1 << KEYS) - 1)]).unwrap();
    let writers: Vec<(u64, u64)> = (10..)
        .zip(masks)
        .map(|(client, &mask)| {
            (client, c.send(client, call(writer, vec![Value::Int(client as i64 - 9), Value::Int(mask)])))
        })
        .collect();
    let reads: Vec<(u64, u64)> =
        (100..100 + readers as u64).map(|client| (client, c.send(client, call(reader, vec![])))).collect();
    deliver_in(&mut c, choices);
    all_returned(&c, &writers)?;
    for (client, id) in reads {
        let got = read_after_retry(&mut c, client, id, call(reader, vec![]));
        if let Some(missed) = row_missed(&got) {
            return Err(format!("reader {client} ({reader}) read {got:?}: it missed writer {missed}'s row"));
        }
    }
    Ok(())
}

/// The naive model for [`missed_row`]: `got` is six `kv` tags, then the tags of the rows
/// found; a `kv` tag `t > 0` read means writer `t`'s row must be among them.
fn row_missed(got: &[i64]) -> Option<i64> {
    let (kv, found) = got.split_at(KEYS as usize);
    kv.iter().copied().find(|t| *t > 0 && !found.contains(t))
}

#[test]
fn break_the_rule_a_read_that_missed_a_row_is_seen_by_the_check() {
    assert_eq!(row_missed(&[0, 2, 0, 0, 0, 0, 2]), None);
    assert_eq!(row_missed(&[0, 2, 0, 0, 0, 0, 1]), Some(2));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// CF-4e for range reads: a writer learnt in a later batch that inserted a row into a range
    /// read before it (and found empty there) is a fracture backwards: the reader is refused
    /// and retries.
    #[test]
    fn rule_cf4e_a_range_read_is_never_fractured_by_a_later_batch(
        masks in proptest::collection::vec(1i64..64, 1..=3),
        readers in 1usize..4,
        choices in proptest::collection::vec(0usize..64, 0..400),
    ) {
        prop_assert_eq!(missed_row("insert_and_put", "scan_then_get", &masks, readers, &choices), Ok(()));
    }

    /// CF-4f: reads of a replicated row are read atomic too: a writer of a replicated row and of
    /// partitioned rows is seen whole, whichever copy served the replicated read.
    #[test]
    fn rule_cf4f_reads_of_replicated_rows_are_never_fractured(
        masks in proptest::collection::vec(1i64..64, 1..=3),
        readers in 1usize..4,
        choices in proptest::collection::vec(0usize..64, 0..400),
    ) {
        prop_assert_eq!(missed_row("insert_item_and_put", "get_items_and_kv", &masks, readers, &choices), Ok(()));
    }
}

/// The check above, fed a fractured read on purpose: writer 1 wrote keys 0 and 1; reading key 0
/// from the initial writer and key 1 from writer 1 misses writer 1's key 0.
#[test]
fn break_the_rule_a_fractured_read_is_seen_by_the_check() {
    let writes = BTreeMap::from([(0, vec![0, 1, 2]), (1, vec![0, 1])]);
    let orders = vec![vec![0, 1], vec![0, 1], vec![0]];
    assert_eq!(fractured(&[1, 1, 0], &orders, &writes), None);
    assert_eq!(fractured(&[0, 1, 0], &orders, &writes), Some((0, 1)));
}

// ---- sequential ids (CF-5) and refusal (CF-6) ----

/// `counter (g) -> next`, `rows (g, id) -> tag`, both partitioned by group `g`, and `far (id)`
/// partitioned by the id itself.
fn id_catalog() -> Catalog {
    let mut c = Catalog::new();
    let int = |n: &str| Column::new(n, ColumnType::Int);
    c.add(TableSchema::new("counter", vec![int("g"), int("next")], &["g"], Partitioning::KeyPrefix { prefix_len: 1 }));
    c.add(TableSchema::new(
        "rows",
        vec![int("g"), int("id"), int("tag")],
        &["g", "id"],
        Partitioning::KeyPrefix { prefix_len: 1 },
    ));
    c.add(TableSchema::new("far", vec![int("id"), int("g")], &["id"], Partitioning::KeyPrefix { prefix_len: 1 }));
    c
}

/// New-Order in miniature: bump the group's counter, read it back, write a row under the id
/// (and, for `new_row_far`, a row keyed by the id, which lives on another partition).
async fn new_row(ctx: Ctx, args: Vec<Value>, far: bool) -> Result<Vec<Value>, Error> {
    let g = args[0].clone();
    let tag = args[1].clone();
    ctx.update("counter", std::slice::from_ref(&g), &[("next", Formula::Add(Value::Int(1)))]).await?;
    let row = ctx.read("counter", std::slice::from_ref(&g)).await?.ok_or_else(|| ctx.abort("no counter"))?;
    let id = Value::Int(row[1].as_int().unwrap_or(0) - 1);
    ctx.op(Op::Insert { table: "rows".into(), row: vec![g.clone(), id.clone(), tag].into() }).await?;
    if far {
        ctx.op(Op::Insert { table: "far".into(), row: vec![id.clone(), g].into() }).await?;
    }
    Ok(vec![id])
}

/// A reader that takes an id (so its counter read may show its temporary id): `bump_first`
/// bumps the counter and then reads it, seeing the temporary id in place of the counter;
/// otherwise it reads the counter's real value first and then bumps it. Then it reads the
/// group's rows. Returns the counter value it saw (its id + 1 when it bumped first: the real id
/// comes back through the `[tmp → real]` lookup) and the ids of the rows it read.
async fn counted_reader(ctx: Ctx, args: Vec<Value>, bump_first: bool) -> Result<Vec<Value>, Error> {
    let g = args[0].clone();
    let bump = || ctx.update("counter", std::slice::from_ref(&g), &[("next", Formula::Add(Value::Int(1)))]);
    if bump_first {
        bump().await?;
    }
    let row = ctx.read("counter", std::slice::from_ref(&g)).await?.ok_or_else(|| ctx.abort("no counter"))?;
    if !bump_first {
        bump().await?;
    }
    let rows = ctx.scan_prefix("rows", std::slice::from_ref(&g), 100).await?;
    let mut out = vec![if bump_first { Value::Int(row[1].as_int().unwrap_or(0) - 1) } else { row[1].clone() }];
    out.extend(rows.iter().map(|r| r[1].clone()));
    Ok(out)
}

fn id_registry(verdict: Coordination) -> Registry {
    let mut r = Registry::new();
    r.register("init", vec![ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
        ctx.op(Op::Insert { table: "counter".into(), row: vec![args[0].clone(), Value::Int(1)].into() }).await?;
        Ok(vec![])
    });
    r.register("new_row", vec![ColumnType::Int; 2], |ctx, args| new_row(ctx, args, false));
    r.register("new_row_far", vec![ColumnType::Int; 2], |ctx, args| new_row(ctx, args, true));
    r.register("read_then_bump", vec![ColumnType::Int], |ctx, args| counted_reader(ctx, args, false));
    r.register("bump_then_read", vec![ColumnType::Int], |ctx, args| counted_reader(ctx, args, true));
    for p in ["new_row", "new_row_far", "read_then_bump", "bump_then_read"] {
        r.declare_coordination(p, verdict.clone()).unwrap();
    }
    r
}

fn sequential() -> Coordination {
    Coordination::SequentialId {
        table: "counter".into(),
        column: "next".into(),
        invariant: "rows.id sequential per g".into(),
    }
}

/// The ids of group `g`'s rows, and the counter, as the partitions hold them.
fn ids_of(c: &mut SyncCluster, g: i64) -> (Vec<i64>, i64) {
    let p = &c.partitions[(g as u32 % PARTITIONS) as usize];
    let rows = litmus_core::TableId(1);
    let counter = litmus_core::TableId(0);
    let mut ids = Vec::new();
    for (table, key, _) in p.store().all_versions() {
        if table == rows {
            if let Some((_, Some(row))) = p.store().latest(table, key) {
                if row[0] == Value::Int(g) && !ids.contains(&row[1].as_int().unwrap()) {
                    ids.push(row[1].as_int().unwrap());
                }
            }
        }
    }
    ids.sort();
    let key = litmus_core::Key::encode(&[Value::Int(g)]).unwrap();
    let next = p.store().latest(counter, &key).and_then(|(_, r)| r.and_then(|r| r[1].as_int())).unwrap();
    (ids, next)
}

/// The naive model of TPC-C 3.3.2.2–3 for one group: ids are exactly `1..next`.
fn gap_free(ids: &[i64], next: i64) -> Result<(), String> {
    let want: Vec<i64> = (1..next).collect();
    if ids == want {
        Ok(())
    } else {
        Err(format!("ids {ids:?} are not 1..{next}"))
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// CF-5: concurrent id-taking transactions over two groups, messages in any order: every
    /// group's ids are sequential and gap-free, the counter is one past the last, and every
    /// client got back the real id its row carries (the `[tmp → real]` lookup).
    #[test]
    fn rule_cf5_nested_increment_gives_sequential_gap_free_ids(
        calls in proptest::collection::vec(0i64..2, 1..12),
        choices in proptest::collection::vec(0usize..64, 0..600),
    ) {
        let mut c = SyncCluster::new(litmus_coordfree::COORDFREE, id_catalog(), id_registry(sequential()), PARTITIONS);
        for g in 0..2 {
            c.proc(0, "init", vec![Value::Int(g)]).unwrap();
        }
        let sent: Vec<(i64, u64, u64)> = calls
            .iter()
            .enumerate()
            .map(|(i, &g)| (g, 10 + i as u64, c.send(10 + i as u64, call("new_row", vec![Value::Int(g), Value::Int(i as i64)]))))
            .collect();
        deliver_in(&mut c, &choices);
        let mut returned: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for (g, client, id) in sent {
            match c.response(client, id) {
                Some(Ok(ResponseBody::Returned(v))) => returned.entry(g).or_default().push(v[0].as_int().unwrap()),
                other => panic!("new_row: {other:?}"),
            }
        }
        for g in 0..2 {
            let (ids, next) = ids_of(&mut c, g);
            prop_assert_eq!(gap_free(&ids, next), Ok(()));
            let mut got = returned.remove(&g).unwrap_or_default();
            got.sort();
            prop_assert_eq!(got, ids, "clients were told other ids than the rows carry");
        }
    }
}

/// Writers taking ids in group 0 and readers of group 0's counter and rows (`counted_reader`,
/// alternately reading the counter before and after bumping it), messages in the order
/// `choices` picks; a reader refused with a retryable abort calls again once they are done.
/// The first reader whose counter value does not count a row it read.
fn row_uncounted(writers: usize, readers: usize, choices: &[usize]) -> Result<(), String> {
    let mut c = SyncCluster::new(litmus_coordfree::COORDFREE, id_catalog(), id_registry(sequential()), PARTITIONS);
    c.proc(0, "init", vec![Value::Int(0)]).unwrap();
    let ws: Vec<(u64, u64)> = (10..10 + writers as u64)
        .map(|client| (client, c.send(client, call("new_row", vec![Value::Int(0), Value::Int(client as i64)]))))
        .collect();
    let procedure = |client: u64| if client.is_multiple_of(2) { "read_then_bump" } else { "bump_then_read" };
    let rs: Vec<(u64, u64)> = (100..100 + readers as u64)
        .map(|client| (client, c.send(client, call(procedure(client), vec![Value::Int(0)]))))
        .collect();
    deliver_in(&mut c, choices);
    all_returned(&c, &ws)?;
    for (client, id) in rs {
        let got = read_after_retry(&mut c, client, id, call(procedure(client), vec![Value::Int(0)]));
        if let Some(row) = uncounted(&got) {
            return Err(format!("reader {client} ({}) read {got:?}: its counter missed row {row}", procedure(client)));
        }
    }
    Ok(())
}

/// The naive model for [`row_uncounted`]: `got` is a counter value, then the ids of the rows
/// read; a row's writer bumped the counter past its id, so a counter read atomically with the
/// row is above it.
fn uncounted(got: &[i64]) -> Option<i64> {
    let (counter, ids) = got.split_first()?;
    ids.iter().copied().find(|id| id >= counter)
}

#[test]
fn break_the_rule_a_row_the_counter_missed_is_seen_by_the_check() {
    assert_eq!(uncounted(&[3, 1, 2]), None);
    assert_eq!(uncounted(&[2, 1, 2]), Some(2));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// CF-4g (read atomicity, RAMP SIGMOD'14 §3, across batches; the id mask of VLDB'15 §6.2):
    /// a counter row handed to the procedure with its real value (read before the bump)
    /// is never taken forward to a writer's newer version: a reader that then reads the
    /// writer's row retries instead. One handed only with the temporary id in place of the
    /// counter (bump first) is taken forward, and may not make its reader retry.
    #[test]
    fn rule_cf4g_only_a_counter_the_procedure_saw_masked_is_taken_forward(
        writers in 1usize..4,
        readers in 1usize..5,
        choices in proptest::collection::vec(0usize..64, 0..600),
    ) {
        prop_assert_eq!(row_uncounted(writers, readers, &choices), Ok(()));
    }
}

#[test]
fn break_the_rule_a_gap_or_duplicate_is_seen_by_the_check() {
    assert_eq!(gap_free(&[1, 2, 3], 4), Ok(()));
    assert!(gap_free(&[1, 3], 4).is_err(), "a gap");
    assert!(gap_free(&[1, 2], 4).is_err(), "an id taken without its row");
    assert!(gap_free(&[-2305843009213693952], 1).is_err(), "a row left under its temporary id");
}

/// CF-6: a procedure whose verdict requires coordination is refused with a typed error naming the
/// invariant, and changes nothing.
#[test]
fn rule_cf6_a_procedure_that_needs_coordination_is_refused_naming_the_invariant() {
    let verdict = Coordination::Required { invariant: "3.3.2.3".into(), operation: "delete new_order".into() };
    let mut c = SyncCluster::new(litmus_coordfree::COORDFREE, id_catalog(), id_registry(verdict), PARTITIONS);
    c.proc(0, "init", vec![Value::Int(0)]).unwrap();
    let r = c.proc(1, "new_row", vec![Value::Int(0), Value::Int(5)]);
    match r {
        Err(Error::Invalid(InvalidInput::NeedsCoordination { engine, procedure, invariant, .. })) => {
            assert_eq!((&*engine, &*procedure, &*invariant), ("coordfree", "new_row", "3.3.2.3"));
        }
        other => panic!("not refused: {other:?}"),
    }
    assert_eq!(ids_of(&mut c, 0), (vec![], 1), "a refused procedure changed the database");
    // The same procedure runs on an engine that coordinates.
    let verdict = Coordination::Required { invariant: "3.3.2.3".into(), operation: "delete new_order".into() };
    let mut acid = SyncCluster::new(litmus_locking::ACID, id_catalog(), id_registry(verdict), PARTITIONS);
    acid.proc(0, "init", vec![Value::Int(0)]).unwrap();
    assert_eq!(acid.proc(1, "new_row", vec![Value::Int(0), Value::Int(5)]).unwrap(), vec![Value::Int(1)]);
}

/// CF-6 for CF-5: rows carrying the new id on another partition than the counter cannot be
/// assigned on one server: refused, nothing applied, the counter untouched.
#[test]
fn rule_cf6_an_id_whose_rows_span_partitions_is_refused() {
    let mut c = SyncCluster::new(litmus_coordfree::COORDFREE, id_catalog(), id_registry(sequential()), PARTITIONS);
    c.proc(0, "init", vec![Value::Int(0)]).unwrap();
    let r = c.proc(1, "new_row_far", vec![Value::Int(0), Value::Int(5)]);
    assert!(matches!(r, Err(Error::Invalid(InvalidInput::NeedsCoordination { .. }))), "{r:?}");
    assert_eq!(ids_of(&mut c, 0), (vec![], 1));
    assert_eq!(c.proc(1, "new_row", vec![Value::Int(0), Value::Int(5)]).unwrap(), vec![Value::Int(1)]);
}

/// CF-7: the coordinator dies after every participant prepared; the partitions finish the
/// transaction among themselves (all prepared → commit, the counter's partition first).
#[test]
fn rule_cf7_participants_finish_a_transaction_whose_coordinator_died() {
    let mut c = all_keys_then_a_queued_put(9);
    // Deliver until the three prepare acknowledgements are all that is left, then lose them
    // and the coordinator.
    loop {
        let to_coordinator = c.queue.iter().all(|e| matches!(e.to, litmus_protocol::Addr::Coordinator(_)));
        if c.queue.len() == 3 && to_coordinator {
            break;
        }
        assert!(c.deliver_one(), "the put finished before its prepares were all acknowledged");
    }
    assert_eq!(version_orders(&c), vec![vec![0]; KEYS as usize], "nothing is visible before commit");
    c.queue.clear();
    c.crash_coordinator();
    for _ in 0..40 {
        c.tick(100);
        while c.deliver_one() {}
    }
    let r = c.proc(2, "get_all", vec![]).unwrap();
    assert_eq!(r, vec![Value::Int(9); KEYS as usize], "the prepared write was not finished by the partitions");
}

/// CF-2 for a replicated table: the buffered row is written on every partition (otherwise the
/// TPC-C simulation reads items from a partition that has none).
#[test]
fn rule_cf2_a_replicated_row_is_written_on_every_partition() {
    let mut catalog = Catalog::new();
    let int = |n: &str| Column::new(n, ColumnType::Int);
    catalog.add(TableSchema::new("item", vec![int("i"), int("price")], &["i"], Partitioning::Replicated));
    let mut r = Registry::new();
    r.register("add_item", vec![ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
        ctx.op(Op::Write { table: "item".into(), row: vec![args[0].clone(), Value::Int(5)].into() }).await?;
        Ok(vec![])
    });
    let mut c = SyncCluster::new(litmus_coordfree::COORDFREE, catalog, r, PARTITIONS);
    c.proc(0, "add_item", vec![Value::Int(42)]).unwrap();
    let key = litmus_core::Key::encode(&[Value::Int(42)]).unwrap();
    for (p, part) in c.partitions.iter().enumerate() {
        let row = part.store().latest(litmus_core::TableId(0), &key).and_then(|(_, r)| r.cloned());
        assert_eq!(row, Some(vec![Value::Int(42), Value::Int(5)].into()), "partition {p} misses the replicated row");
    }
}

/// CF-8: a participant cut off before it commits leaves a writer half-committed for longer than
/// `META_KEEP`; the participants that committed keep the writer's metadata until it has
/// committed there too, so a reader arriving as the cut heals still finds the missing versions.
/// (Collecting metadata `META_KEEP` after the local commit, without CF-8, fractures this read:
/// keys 0, 1, 3 and 4 at the writer's tag, keys 2 and 5 at the old one.)
#[test]
fn rule_cf8_metadata_is_kept_until_every_participant_has_committed() {
    use litmus_core::PartitionId;
    use litmus_protocol::Addr;
    let mut c = all_keys_then_a_queued_put(9);
    // Deliver until partition 0 has committed (every participant prepared by then), then cut
    // partition 2 off: it stays prepared.
    while version_orders(&c)[0] != vec![0, 9] {
        assert!(c.deliver_one(), "the put never committed at partition 0");
    }
    let cut = Addr::Partition(PartitionId(2));
    let drop_cut = |c: &mut SyncCluster| c.queue.retain(|e| e.to != cut && e.from != cut);
    drop_cut(&mut c);
    while c.deliver_one() {
        drop_cut(&mut c);
    }
    for _ in 0..150 {
        c.tick(100); // 15 s, longer than META_KEEP
        drop_cut(&mut c);
        while c.deliver_one() {
            drop_cut(&mut c);
        }
    }
    assert_eq!(version_orders(&c)[2], vec![0], "partition 2 committed while cut off");
    // The cut heals; a reader's messages go first, before partition 2 hears of the commit.
    let id = c.send(2, call("get_all", vec![]));
    while c.deliver_one() {}
    let got = returned_tags(&c, 2, id);
    assert_eq!(got, vec![9; KEYS as usize], "a fractured read after the cut healed");
    c.settle();
    assert_eq!(version_orders(&c)[2], vec![0, 9], "partition 2 never committed after the cut healed");
}

/// CF-8 at the reader: a transaction whose reads take longer than `READ_WINDOW` (here its reads
/// are lost for six seconds) has them refused with a retryable abort: the metadata of a writer
/// it needs could have been collected meanwhile. The caller's retry then reads normally.
#[test]
fn rule_cf8_reads_that_outlive_the_metadata_window_start_over() {
    let mut c = SyncCluster::new(litmus_coordfree::COORDFREE, kv_catalog(), kv_registry(), PARTITIONS);
    c.proc(0, "put", vec![Value::Int(0), Value::Int((1 << KEYS) - 1)]).unwrap();
    let id = c.send(2, call("get_all", vec![]));
    assert!(c.deliver_one()); // the call reaches the coordinator, which sends its reads
    for _ in 0..60 {
        c.queue.clear(); // lost
        c.tick(100);
    }
    c.settle();
    match c.response(2, id) {
        Some(Err(e @ Error::Abort(_))) => assert!(e.is_retryable() && e.to_string().contains("metadata window"), "{e}"),
        other => panic!("expected a retryable abort, got {other:?}"),
    }
    assert_eq!(c.proc(2, "get_all", vec![]).unwrap(), vec![Value::Int(0); KEYS as usize]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// CF-2b: concurrent writers of one replicated row (writes, deletes and inserts in turn),
    /// messages in any order: every partition ends with the same row. (Before CF-2b each copy
    /// kept whichever commit reached it last, and two writers left the copies different at
    /// once.)
    #[test]
    fn rule_cf2b_concurrent_writers_of_a_replicated_row_leave_every_copy_alike(
        writers in 2i64..6,
        choices in proptest::collection::vec(0usize..64, 0..200),
    ) {
        let mut catalog = Catalog::new();
        let int = |n: &str| Column::new(n, ColumnType::Int);
        catalog.add(TableSchema::new("item", vec![int("i"), int("price")], &["i"], Partitioning::Replicated));
        let mut r = Registry::new();
        r.register("set_price", vec![ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
            let row = vec![Value::Int(42), args[0].clone()].into();
            match args[0].as_int().unwrap_or(0) % 3 {
                0 => ctx.op(Op::Write { table: "item".into(), row }).await?,
                1 => ctx.op(Op::Delete { table: "item".into(), key: vec![Value::Int(42)] }).await?,
                _ => ctx.op(Op::Insert { table: "item".into(), row }).await?,
            };
            Ok(vec![])
        });
        let mut c = SyncCluster::new(litmus_coordfree::COORDFREE, catalog, r, PARTITIONS);
        let ids: Vec<u64> = (0..writers).map(|w| c.send(10 + w as u64, call("set_price", vec![Value::Int(w)]))).collect();
        deliver_in(&mut c, &choices);
        // Writes and deletes validate nothing, so they commit (inserts may meet a row).
        for (w, id) in ids.iter().enumerate().filter(|(w, _)| w % 3 != 2) {
            let answer = c.response(10 + w as u64, *id);
            prop_assert!(matches!(answer, Some(Ok(ResponseBody::Returned(_)))), "writer {}: {:?}", w, answer);
        }
        let key = litmus_core::Key::encode(&[Value::Int(42)]).unwrap();
        let copies: Vec<_> = c
            .partitions
            .iter()
            .map(|p| p.store().latest(litmus_core::TableId(0), &key).and_then(|(_, r)| r.cloned()))
            .collect();
        prop_assert!(copies.iter().all(|r| *r == copies[0]), "copies differ: {:?}", copies);
    }
}

/// CF-2b: an update of a replicated row is refused with a typed error (each copy would apply its
/// formulas to its own row), and changes nothing.
#[test]
fn rule_cf2b_an_update_of_a_replicated_row_is_refused() {
    let mut catalog = Catalog::new();
    let int = |n: &str| Column::new(n, ColumnType::Int);
    catalog.add(TableSchema::new("item", vec![int("i"), int("price")], &["i"], Partitioning::Replicated));
    let mut r = Registry::new();
    r.register("add_item", vec![], |ctx: Ctx, _args: Vec<Value>| async move {
        ctx.op(Op::Write { table: "item".into(), row: vec![Value::Int(42), Value::Int(5)].into() }).await?;
        Ok(vec![])
    });
    r.register("raise_price", vec![], |ctx: Ctx, _args: Vec<Value>| async move {
        let updates = vec![("price".to_string(), Formula::Add(Value::Int(1)))];
        ctx.op(Op::Update { table: "item".into(), key: vec![Value::Int(42)], updates }).await?;
        Ok(vec![])
    });
    let mut c = SyncCluster::new(litmus_coordfree::COORDFREE, catalog, r, PARTITIONS);
    c.proc(0, "add_item", vec![]).unwrap();
    let e = c.proc(1, "raise_price", vec![]).unwrap_err();
    assert!(matches!(e, Error::Invalid(InvalidInput::Unsupported { .. })), "{e:?}");
    assert!(e.to_string().contains("replicated table item"), "{e}");
    let key = litmus_core::Key::encode(&[Value::Int(42)]).unwrap();
    for part in &c.partitions {
        let row = part.store().latest(litmus_core::TableId(0), &key).and_then(|(_, r)| r.cloned());
        assert_eq!(row, Some(vec![Value::Int(42), Value::Int(5)].into()));
    }
}

/// A batched write is buffered whole or not at all, as a partition applies its share of a
/// `write_many` (the locking engine's contract, `Ctx::write_many`): a procedure that goes on
/// after the error commits none of the batch.
#[test]
fn rule_cf4h_a_batched_write_that_fails_buffers_none_of_its_writes() {
    let mut c = SyncCluster::new(litmus_coordfree::COORDFREE, kv_catalog(), kv_registry(), PARTITIONS);
    // Keys 0 and 3 live on partition 0; 3 exists, so inserting it fails after 0 validated.
    c.proc(0, "put", vec![Value::Int(5), Value::Int(1 << 3)]).unwrap();
    let got = c.proc(1, "insert_pair", vec![Value::Int(0), Value::Int(3)]).unwrap();
    assert!(matches!(&got[..], [Value::String(e)] if e.contains("duplicate")), "{got:?}");
    let key = litmus_core::Key::encode(&[Value::Int(0)]).unwrap();
    let row = c.partitions[0].store().latest(litmus_core::TableId(0), &key).and_then(|(_, r)| r.cloned());
    assert_eq!(row, None, "the insert of key 0 was committed although its batch failed");
    // Both new: the batch commits whole.
    assert_eq!(c.proc(1, "insert_pair", vec![Value::Int(0), Value::Int(6)]).unwrap(), Vec::<Value>::new());
}

/// A batched write of updates validates each against its row (read in one request per
/// partition), and a batched read after it sees the transaction's own writes on top of the
/// rows read (CF-4a: the rows the updates read answer it from the cache).
#[test]
fn rule_cf4h_batched_updates_validate_against_their_rows_and_later_batched_reads_see_them() {
    let mut c = SyncCluster::new(litmus_coordfree::COORDFREE, kv_catalog(), kv_registry(), PARTITIONS);
    c.proc(0, "put", vec![Value::Int(10), Value::Int((1 << KEYS) - 1)]).unwrap();
    let got = c.proc(1, "bump_many", vec![Value::Int(0b100101), Value::Int(3)]).unwrap();
    let want: Vec<Value> = [13, 10, 13, 10, 10, 13].into_iter().map(Value::Int).collect();
    assert_eq!(got, want, "own updates on top of the rows read");
    assert_eq!(c.proc(2, "get_many", vec![]).unwrap(), want, "committed");
    // An update of a missing row fails the batch with the typed error; nothing of it is written.
    let mut c = SyncCluster::new(litmus_coordfree::COORDFREE, kv_catalog(), kv_registry(), PARTITIONS);
    c.proc(0, "put", vec![Value::Int(10), Value::Int(0b000001)]).unwrap();
    let err = c.proc(1, "bump_many", vec![Value::Int(0b001001), Value::Int(3)]).unwrap_err();
    assert!(matches!(err, Error::Invalid(InvalidInput::KeyNotFound(_))), "{err}");
    let key = litmus_core::Key::encode(&[Value::Int(0)]).unwrap();
    let row = c.partitions[0].store().latest(litmus_core::TableId(0), &key).and_then(|(_, r)| r.cloned());
    assert_eq!(row, Some(vec![Value::Int(0), Value::Int(10)].into()));
}
