//! Built-in tables and procedures every database has: a key-value table used by the runtime
//! tests, the simulator's durability check and the examples.
//!
//! * `kv(k int, v bytes)`, partitioned by `k`;
//! * `kv_get(k) -> [v | NULL]`, `kv_put(k, v)`, `kv_delete(k)`;
//! * `kv_put2(k1, v1, k2, v2)` — a two-key (usually two-partition) write.
//! * `kv_get_1r`, `kv_put_1r`, `kv_put2_1r` — the same as one-round procedures.

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
        Ok(vec![row.map_or(Value::Null, |r| r[1].clone())])
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
    // One-round forms (see `crate::fragment`) for engines that run one-round transactions only:
    // `kv_get_1r` and `kv_put_1r` are single-partition, `kv_put2_1r` independent (a write cannot
    // fail, so every participant commits).
    r.register_fragment("kv_get_frag", vec![ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
        let row = ctx.read(KV_TABLE, &args[..1]).await?;
        Ok(vec![row.map_or(Value::Null, |r| r[1].clone())])
    });
    r.register_fragment(
        "kv_put_frag",
        vec![ColumnType::Int, ColumnType::Bytes],
        |ctx: Ctx, args: Vec<Value>| async move {
            ctx.write(KV_TABLE, args).await?;
            Ok(vec![])
        },
    );
    r.declare_keys_from_args(&["kv_get_frag", "kv_put_frag"]);
    use crate::fragment::{FragmentCall, OneRoundClass};
    let put =
        |k: &Value, v: &Value| FragmentCall::new("kv_put_frag", KV_TABLE, vec![k.clone()], vec![k.clone(), v.clone()]);
    r.register_one_round("kv_get_1r", vec![ColumnType::Int], OneRoundClass::Single, |args: &[Value]| {
        Ok(vec![FragmentCall::new("kv_get_frag", KV_TABLE, args.to_vec(), args.to_vec())])
    });
    r.register_one_round(
        "kv_put_1r",
        vec![ColumnType::Int, ColumnType::Bytes],
        OneRoundClass::Single,
        move |args: &[Value]| Ok(vec![put(&args[0], &args[1])]),
    );
    r.register_one_round(
        "kv_put2_1r",
        vec![ColumnType::Int, ColumnType::Bytes, ColumnType::Int, ColumnType::Bytes],
        OneRoundClass::Independent,
        move |args: &[Value]| Ok(vec![put(&args[0], &args[1]), put(&args[2], &args[3])]),
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
///   (serializable: a range read over all accounts), with the number of accounts it saw and
///   the smallest balance (`NULL` if none): `[total, accounts, min]`.
/// * One-round forms (`bank_transfer_1r`, `bank_open_1r`, `bank_balance_1r`, `bank_total_1r`)
///   for engines that take one-round transactions (Granola runs nothing else).
pub mod bank {
    use crate::fragment::OneRoundClass;
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

    fn params_1r() -> Vec<ColumnType> {
        vec![ColumnType::Int, ColumnType::Int, ColumnType::Int]
    }

    pub fn registry() -> Registry {
        let mut r = Registry::new();
        let params = vec![ColumnType::Int, ColumnType::Int, ColumnType::Int];
        r.register_with("bank_transfer", params.clone(), ProcOptions::base(), transfer);
        r.register("bank_transfer_acid", params, transfer);
        r.register("bank_total", vec![], |ctx: Ctx, _args: Vec<Value>| async move {
            let rows = ctx.scan(ACCOUNTS, &[], None, litmus_core::limits::SCAN_ROWS_MAX as u32).await?;
            let balances: Vec<i64> = rows.iter().map(|r| r[1].as_int().unwrap_or(0)).collect();
            let min = balances.iter().copied().min().map_or(Value::Null, Value::Int);
            Ok(vec![Value::Int(balances.iter().sum()), Value::Int(rows.len() as i64), min])
        });
        register_transfer_1r(&mut r);
        register_one_round_reads(&mut r);
        // An insert, not a write: a late duplicate of an open whose answer was lost must not
        // reset a balance that transfers have since changed.
        r.register("bank_open", vec![ColumnType::Int, ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
            ctx.insert(ACCOUNTS, args).await?;
            Ok(vec![])
        });
        r
    }

    /// `bank_transfer_1r` and its debit and credit fragments.
    fn register_transfer_1r(r: &mut Registry) {
        // The same transfer as one round (see `crate::fragment`): a debit fragment at the
        // sender's partition that votes abort on insufficient funds, and a credit fragment at the
        // receiver's. Engines that take one-round transactions run the fragments at the
        // partitions; the others run them op by op as one transaction.
        r.register_fragment(
            "bank_debit",
            vec![ColumnType::Int, ColumnType::Int],
            |ctx: Ctx, args: Vec<Value>| async move {
                let bal = ctx.read(ACCOUNTS, &args[..1]).await?.map_or(0, |r| r[1].as_int().unwrap_or(0));
                let amt = args[1].as_int().unwrap_or(0);
                if bal < amt {
                    return Err(ctx.abort("insufficient funds"));
                }
                ctx.update(ACCOUNTS, &args[..1], &[("bal", Formula::Add(Value::Int(-amt)))]).await?;
                Ok(vec![])
            },
        );
        r.register_fragment(
            "bank_credit",
            vec![ColumnType::Int, ColumnType::Int],
            |ctx: Ctx, args: Vec<Value>| async move {
                ctx.update(ACCOUNTS, &args[..1], &[("bal", Formula::Add(args[1].clone()))]).await?;
                Ok(vec![])
            },
        );
        r.register_one_round("bank_transfer_1r", params_1r(), OneRoundClass::Coordinated, |args: &[Value]| {
            use crate::fragment::FragmentCall;
            Ok(vec![
                FragmentCall::new(
                    "bank_debit",
                    ACCOUNTS,
                    vec![args[0].clone()],
                    vec![args[0].clone(), args[2].clone()],
                ),
                FragmentCall::new(
                    "bank_credit",
                    ACCOUNTS,
                    vec![args[1].clone()],
                    vec![args[1].clone(), args[2].clone()],
                ),
            ])
        });
    }

    /// `bank_open_1r`, `bank_balance_1r`, `bank_total_1r` and their fragments.
    fn register_one_round_reads(r: &mut Registry) {
        // One-round forms of opening, reading and totalling, for engines that run one-round
        // transactions only (Granola). `bank_total_1r(accounts, partitions)` is independent: one
        // fragment per partition sums that partition's accounts (ids `p, p + partitions, ..`
        // below `accounts`) as `[total, count, min]`; its result is one triple per partition,
        // in partition order (fold them for the bank's total).
        r.register_fragment(
            "bank_open_frag",
            vec![ColumnType::Int, ColumnType::Int],
            |ctx: Ctx, args: Vec<Value>| async move {
                ctx.insert(ACCOUNTS, args).await?;
                Ok(vec![])
            },
        );
        r.register_fragment("bank_read", vec![ColumnType::Int], |ctx: Ctx, args: Vec<Value>| async move {
            Ok(vec![ctx.read(ACCOUNTS, &args[..1]).await?.map_or(Value::Null, |r| r[1].clone())])
        });
        r.register_fragment(
            "bank_part_total",
            vec![ColumnType::Int, ColumnType::Int, ColumnType::Int],
            |ctx: Ctx, args: Vec<Value>| async move {
                let (first, step, end) = (
                    args[0].as_int().unwrap_or(0),
                    args[1].as_int().unwrap_or(1).max(1),
                    args[2].as_int().unwrap_or(0),
                );
                let (mut total, mut count, mut min) = (0i64, 0i64, None::<i64>);
                let mut id = first;
                while id < end {
                    if let Some(row) = ctx.read(ACCOUNTS, &[Value::Int(id)]).await? {
                        let bal = row[1].as_int().unwrap_or(0);
                        total += bal;
                        count += 1;
                        min = Some(min.map_or(bal, |m| m.min(bal)));
                    }
                    id += step;
                }
                Ok(vec![Value::Int(total), Value::Int(count), min.map_or(Value::Null, Value::Int)])
            },
        );
        r.declare_keys_from_args(&["bank_debit", "bank_credit", "bank_open_frag", "bank_read", "bank_part_total"]);
        r.register_one_round(
            "bank_open_1r",
            vec![ColumnType::Int, ColumnType::Int],
            OneRoundClass::Single,
            |args: &[Value]| {
                use crate::fragment::FragmentCall;
                Ok(vec![FragmentCall::new("bank_open_frag", ACCOUNTS, vec![args[0].clone()], args.to_vec())])
            },
        );
        r.register_one_round("bank_balance_1r", vec![ColumnType::Int], OneRoundClass::Single, |args: &[Value]| {
            use crate::fragment::FragmentCall;
            Ok(vec![FragmentCall::new("bank_read", ACCOUNTS, vec![args[0].clone()], args.to_vec())])
        });
        r.register_one_round(
            "bank_total_1r",
            vec![ColumnType::Int, ColumnType::Int],
            OneRoundClass::Independent,
            |args: &[Value]| {
                use crate::fragment::FragmentCall;
                let (accounts, partitions) = (args[0].as_int().unwrap_or(0), args[1].as_int().unwrap_or(0));
                if !(1..=4096).contains(&partitions) {
                    return Err(litmus_core::InvalidInput::Config(format!(
                        "bank_total_1r over {partitions} partitions"
                    ))
                    .into());
                }
                Ok((0..partitions.min(accounts.max(1)))
                    .map(|p| {
                        let args = vec![Value::Int(p), Value::Int(partitions), Value::Int(accounts)];
                        FragmentCall::new("bank_part_total", ACCOUNTS, vec![Value::Int(p)], args)
                    })
                    .collect())
            },
        );
    }
}

/// Chains of BASE transactions with provenance, for checking Salt isolation (§5.1, Theorem 1)
/// under faults (`litmus sim --workload salt-chains`).
///
/// * `chain(k int, v bytes, s set<int>)`: a value is its *provenance* — the tags (ids) of every
///   BASE transaction whose writes it was computed from, comma-separated in `v`, newest last, at
///   most [`chains::PROVENANCE_MAX`] of them (dropping old tags only makes the check weaker),
///   and as a set in `s` (where `chain_fold` adds to them); a key's provenance is both.
/// * `chain_end(tag int, done int)`: written by a chain step's *last* alkaline subtransaction.
/// * `chain_step(tag, s1, d1, s2, d2)` (BASE): alkaline 1 reads `s1` and writes
///   `d1 := prov(s1) + tag`; alkaline 2 reads `s2` and writes `d2 := prov(s1) + prov(s2) + tag`
///   (write-after-read across subtransactions, §5.1 footnote 4); alkaline 3 writes
///   `chain_end(tag)`. Keys may be on any partitions.
/// * `chain_fold(tag, x, y)` (BASE): alkaline 1 adds `tag` to `x`'s tag set `s` (a set-add
///   formula: the new set is built on whatever `s` holds, other BASE transactions' unfinished
///   writes included), reads `s` back — a read covered by its own write — and writes
///   `y := s(x) + tag`; alkaline 2 writes `chain_end(tag)`. A read covered by the reader's own
///   alkaline write still depends on other BASE transactions' writes of what it reads (lock
///   LK-6a): without that, `y` would carry their tags to ACID readers before they end.
/// * `chain_check(k1, k2, k3)` (ACID, read-committed) and `chain_check_ser` (serializable): read
///   the three keys, then `chain_end` of every tag in their provenance, in one transaction.
///   Returns `[tags checked, missing, first missing tag or -1]`. A tag whose end marker is
///   missing *after* the ACID transaction read a value derived from it means that transaction
///   observed a write of a BASE transaction that had not ended — an (indirect) dirty read.
pub mod chains {
    use crate::procedure::{Ctx, ProcOptions, Registry};
    use litmus_core::{Catalog, Column, ColumnType, Error, Formula, Isolation, Partitioning, TableSchema, Value};

    pub const CHAIN: &str = "chain";
    pub const CHAIN_END: &str = "chain_end";
    /// Most tags a value carries.
    pub const PROVENANCE_MAX: usize = 32;

    pub fn catalog() -> Catalog {
        let mut c = Catalog::new();
        c.add(TableSchema::new(
            CHAIN,
            vec![
                Column::new("k", ColumnType::Int),
                Column::new("v", ColumnType::Bytes),
                Column::new("s", ColumnType::Set(Box::new(ColumnType::Int))),
            ],
            &["k"],
            Partitioning::KeyPrefix { prefix_len: 1 },
        ));
        c.add(TableSchema::new(
            CHAIN_END,
            vec![Column::new("tag", ColumnType::Int), Column::new("done", ColumnType::Int)],
            &["tag"],
            Partitioning::KeyPrefix { prefix_len: 1 },
        ));
        c
    }

    /// The tags in a value (malformed parts are skipped).
    pub fn provenance(v: &[u8]) -> Vec<i64> {
        std::str::from_utf8(v).unwrap_or("").split(',').filter_map(|t| t.parse().ok()).collect()
    }

    /// The row of `k` with provenance `tags` (the newest [`PROVENANCE_MAX`]), in both columns.
    fn chain_row(k: &Value, tags: &[i64]) -> Vec<Value> {
        let tags = &tags[tags.len().saturating_sub(PROVENANCE_MAX)..];
        let s: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
        let set = Value::set(tags.iter().map(|t| Value::Int(*t)));
        vec![k.clone(), Value::Bytes(s.join(",").into_bytes().into()), set]
    }

    /// The tags in a row's tag set.
    fn set_tags(v: &Value) -> Vec<i64> {
        match v {
            Value::Set(s) => s.iter().filter_map(Value::as_int).collect(),
            _ => vec![],
        }
    }

    fn merge(into: &mut Vec<i64>, tags: &[i64]) {
        for t in tags {
            if !into.contains(t) {
                into.push(*t);
            }
        }
    }

    async fn read_prov(ctx: &Ctx, k: &Value) -> Result<Vec<i64>, Error> {
        let Some(row) = ctx.read(CHAIN, std::slice::from_ref(k)).await? else { return Ok(vec![]) };
        let mut tags = row[1].as_bytes().map(provenance).unwrap_or_default();
        merge(&mut tags, &set_tags(&row[2]));
        Ok(tags)
    }

    async fn step(ctx: Ctx, args: Vec<Value>) -> Result<Vec<Value>, Error> {
        let tag = args[0].as_int().unwrap_or(0);
        ctx.begin_alkaline().await?;
        let p1 = read_prov(&ctx, &args[1]).await?;
        let mut d1 = p1.clone();
        merge(&mut d1, &[tag]);
        ctx.write(CHAIN, chain_row(&args[2], &d1)).await?;
        ctx.end_alkaline().await?;
        ctx.begin_alkaline().await?;
        let p2 = read_prov(&ctx, &args[3]).await?;
        let mut d2 = p1;
        merge(&mut d2, &p2);
        merge(&mut d2, &[tag]);
        ctx.write(CHAIN, chain_row(&args[4], &d2)).await?;
        ctx.end_alkaline().await?;
        mark_ended(&ctx, tag).await
    }

    /// The chain's last subtransaction: marks transaction `tag` ended (what `check` reads).
    async fn mark_ended(ctx: &Ctx, tag: i64) -> Result<Vec<Value>, Error> {
        ctx.begin_alkaline().await?;
        ctx.write(CHAIN_END, vec![Value::Int(tag), Value::Int(1)]).await?;
        ctx.end_alkaline().await?;
        Ok(vec![])
    }

    async fn fold(ctx: Ctx, args: Vec<Value>) -> Result<Vec<Value>, Error> {
        let tag = args[0].as_int().unwrap_or(0);
        let (x, y) = (&args[1], &args[2]);
        ctx.begin_alkaline().await?;
        // No read before the update (a missing `x` fails it, and the fold with it): a read's
        // own lock would carry the dependencies the covered read below must find by itself.
        ctx.update(CHAIN, std::slice::from_ref(x), &[("s", Formula::SetAdd(Value::Int(tag)))]).await?;
        // Covered by the update just made: what it returns is built on other transactions' sets.
        let row = ctx.read_columns(CHAIN, std::slice::from_ref(x), &["s"]).await?;
        let mut tags = row.map(|r| set_tags(&r[2])).unwrap_or_default();
        merge(&mut tags, &[tag]);
        ctx.write(CHAIN, chain_row(y, &tags)).await?;
        ctx.end_alkaline().await?;
        mark_ended(&ctx, tag).await
    }

    async fn check(ctx: Ctx, args: Vec<Value>) -> Result<Vec<Value>, Error> {
        let mut tags = Vec::new();
        for k in &args {
            let p = read_prov(&ctx, k).await?;
            merge(&mut tags, &p);
        }
        let (mut missing, mut first) = (0i64, -1i64);
        for t in &tags {
            if ctx.read(CHAIN_END, &[Value::Int(*t)]).await?.is_none() {
                missing += 1;
                if first < 0 {
                    first = *t;
                }
            }
        }
        Ok(vec![Value::Int(tags.len() as i64), Value::Int(missing), Value::Int(first)])
    }

    pub fn registry() -> Registry {
        let mut r = Registry::new();
        let int = || ColumnType::Int;
        r.register_with("chain_step", vec![int(), int(), int(), int(), int()], ProcOptions::base(), step);
        r.register_with("chain_fold", vec![int(), int(), int()], ProcOptions::base(), fold);
        let rc = ProcOptions { isolation: Isolation::ReadCommitted, ..Default::default() };
        r.register_with("chain_check", vec![int(), int(), int()], rc, check);
        r.register("chain_check_ser", vec![int(), int(), int()], check);
        r
    }
}
