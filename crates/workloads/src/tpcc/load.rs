//! The initial population (clause 4.3.3.1) and the parallel loader.
//!
//! Rows are generated *inside* load procedures from a seed argument, so a call is a few
//! integers on the wire however many rows it writes, and a batch is a pure function of its
//! arguments: re-running it (a retry after a timeout) writes the same rows again (`write`
//! overwrites), so every load call is idempotent. Each call writes rows of one warehouse (one
//! partition; ITEM batches go to every replica). [`load`] spreads the calls over
//! [`LOAD_THREADS`] client threads with a progress bar.

use super::gen::{self, astring, data_with_original, money, nstring, rate, zip};
use super::schema::*;
use super::{arg_int, bad_arg, Scale, DISTRICTS};
use crate::setup::{call_idempotent, progress_bar, BAR_COUNTED, LOAD_PROGRESS_ROWS_MIN};
use anyhow::Context as _;
use litmus_client::Client;
use litmus_core::{ColumnType, Decimal, Error, Value};
use litmus_protocol::procedure::ProcResult;
use litmus_protocol::{Ctx, Op, Registry};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub const LOAD_ITEMS: &str = "tpcc_load_items";
pub const LOAD_WAREHOUSE: &str = "tpcc_load_warehouse";
pub const LOAD_STOCK: &str = "tpcc_load_stock";
pub const LOAD_CUSTOMERS: &str = "tpcc_load_customers";
pub const LOAD_ORDERS: &str = "tpcc_load_orders";

// Load calls are small because the locking engine's partitions drop a transaction idle at
// them for 2 s (`ORPHAN_TIMEOUT`) and clients time out at 5 s: a call of a few thousand rows
// (an ITEM row is written at every partition) can take that long on a busy machine. Many
// small calls from several threads load as fast (the engine's cost is per row).

/// Items or stock rows per load call.
pub const LOAD_ITEMS_PER_CALL: u64 = 250;
/// Customers per load call (each also writes a name-index row and a history row).
pub const LOAD_CUSTOMERS_PER_CALL: u64 = 50;
/// Orders per load call (each also writes 5–15 order lines, an index row, maybe a new-order).
pub const LOAD_ORDERS_PER_CALL: u64 = 20;
/// Most rows of one kind a load call accepts.
pub const LOAD_CALL_ROWS_MAX: i64 = 5_000;
/// Client threads loading in parallel.
pub const LOAD_THREADS: usize = 8;

/// The initial HISTORY amount of every customer, and minus its initial balance (10.00).
pub const H_AMOUNT_INITIAL_CENTS: i64 = 1_000;

/// A stable seed for one batch: splitmix64 over the parts.
pub fn batch_seed(parts: &[i64]) -> u64 {
    let mut h: u64 = 0x9E37_79B9_7F4A_7C15;
    for p in parts {
        h ^= *p as u64;
        h = h.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        h = z ^ (z >> 31);
    }
    h
}

/// A contiguous range `start+1 ..= start+count` from arguments `i` and `i+1`, checked.
fn id_range(args: &[Value], i: usize, proc: &str) -> Result<(i64, i64), Error> {
    let start = arg_int(args, i, proc)?;
    let count = arg_int(args, i + 1, proc)?;
    if start < 0 || !(0..=LOAD_CALL_ROWS_MAX).contains(&count) {
        return Err(bad_arg(proc, format!("bad range start {start} count {count} (at most {LOAD_CALL_ROWS_MAX})")));
    }
    Ok((start + 1, start + count))
}

fn positive(args: &[Value], i: usize, proc: &str) -> Result<i64, Error> {
    let v = arg_int(args, i, proc)?;
    if v < 1 {
        return Err(bad_arg(proc, format!("argument {i} must be positive, got {v}")));
    }
    Ok(v)
}

async fn write_all(ctx: &Ctx, rows: Vec<(&'static str, Vec<Value>)>) -> Result<(), Error> {
    let writes: Vec<_> =
        rows.into_iter().map(|(t, row)| ctx.op(Op::Write { table: t.into(), row: row.into() })).collect();
    for w in writes {
        w.await?;
    }
    Ok(())
}

fn s(v: String) -> Value {
    Value::String(v.into())
}

fn address(rng: &mut ChaCha8Rng) -> [Value; 5] {
    [s(astring(rng, 10, 20)), s(astring(rng, 10, 20)), s(astring(rng, 10, 20)), s(astring(rng, 2, 2)), s(zip(rng))]
}

/// `tpcc_load_items(start, count, seed)`: items `start+1 ..= start+count`.
pub(crate) async fn load_items(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let (first, last) = id_range(&args, 0, LOAD_ITEMS)?;
    let seed = arg_int(&args, 2, LOAD_ITEMS)?;
    let mut rng = ChaCha8Rng::seed_from_u64(batch_seed(&[seed, 1, first]));
    let rows = (first..=last)
        .map(|i| {
            let row = vec![
                Value::Int(i),
                Value::Int(rng.gen_range(1..=10_000)),
                s(astring(&mut rng, 14, 24)),
                money(&mut rng, 100, 10_000),
                s(data_with_original(&mut rng)),
            ];
            (ITEM, row)
        })
        .collect();
    write_all(&ctx, rows).await?;
    Ok(vec![Value::Int(last - first + 1)])
}

/// `tpcc_load_warehouse(w, seed, customers)`: the warehouse and its ten districts
/// (`d_next_o_id = customers + 1`: one initial order per customer). The year-to-date amounts
/// are the initial history's sums, `d_ytd = customers * 10.00` and `w_ytd = 10 * d_ytd`
/// (30,000.00 and 300,000.00 at full scale).
pub(crate) async fn load_warehouse(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let w = positive(&args, 0, LOAD_WAREHOUSE)?;
    let seed = arg_int(&args, 1, LOAD_WAREHOUSE)?;
    let orders = positive(&args, 2, LOAD_WAREHOUSE)?;
    let mut rng = ChaCha8Rng::seed_from_u64(batch_seed(&[seed, 2, w]));
    let mut row = vec![Value::Int(w), s(astring(&mut rng, 6, 10))];
    row.extend(address(&mut rng));
    let d_ytd = orders * H_AMOUNT_INITIAL_CENTS;
    row.extend([rate(&mut rng, 0, 2000), Value::Decimal(Decimal::from_cents(DISTRICTS as i64 * d_ytd))]);
    let mut rows = vec![(WAREHOUSE, row)];
    for d in 1..=DISTRICTS as i64 {
        let mut row = vec![Value::Int(w), Value::Int(d), s(astring(&mut rng, 6, 10))];
        row.extend(address(&mut rng));
        row.extend([rate(&mut rng, 0, 2000), Value::Decimal(Decimal::from_cents(d_ytd)), Value::Int(orders + 1)]);
        rows.push((DISTRICT, row));
    }
    write_all(&ctx, rows).await?;
    Ok(vec![Value::Int(1 + DISTRICTS as i64)])
}

/// `tpcc_load_stock(w, start, count, seed)`: stock of items `start+1 ..= start+count` at `w`.
pub(crate) async fn load_stock(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let w = positive(&args, 0, LOAD_STOCK)?;
    let (first, last) = id_range(&args, 1, LOAD_STOCK)?;
    let seed = arg_int(&args, 3, LOAD_STOCK)?;
    let mut rng = ChaCha8Rng::seed_from_u64(batch_seed(&[seed, 3, w, first]));
    let rows = (first..=last)
        .map(|i| {
            let mut row = vec![Value::Int(w), Value::Int(i), Value::Int(rng.gen_range(10..=100))];
            row.extend((1..=DISTRICTS).map(|_| s(astring(&mut rng, 24, 24))));
            row.extend([Value::Int(0), Value::Int(0), Value::Int(0), s(data_with_original(&mut rng))]);
            (STOCK, row)
        })
        .collect();
    write_all(&ctx, rows).await?;
    Ok(vec![Value::Int(last - first + 1)])
}

/// `tpcc_load_customers(w, d, start, count, seed)`: customers `start+1 ..= start+count` of
/// district `(w, d)`, their name-index rows and their one history row each.
pub(crate) async fn load_customers(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let w = positive(&args, 0, LOAD_CUSTOMERS)?;
    let d = positive(&args, 1, LOAD_CUSTOMERS)?;
    let (first, last) = id_range(&args, 2, LOAD_CUSTOMERS)?;
    let seed = arg_int(&args, 4, LOAD_CUSTOMERS)?;
    let mut rng = ChaCha8Rng::seed_from_u64(batch_seed(&[seed, 4, w, d, first]));
    let mut rows = Vec::with_capacity(3 * (last - first + 1) as usize);
    for c in first..=last {
        let last_name = gen::last_name(gen::load_last_name_number(&mut rng, c as u64));
        let first_name = astring(&mut rng, 8, 16);
        let mut row = vec![
            Value::Int(w),
            Value::Int(d),
            Value::Int(c),
            s(first_name.clone()),
            s("OE".into()),
            s(last_name.clone()),
        ];
        row.extend(address(&mut rng));
        row.extend([
            s(nstring(&mut rng, 16, 16)),
            Value::Int(gen::DATE_BASE_SECS),
            s(if rng.gen_bool(0.1) { "BC" } else { "GC" }.into()),
            Value::Decimal(Decimal::from_cents(5_000_000)),
            rate(&mut rng, 0, 5000),
            Value::Decimal(Decimal::from_cents(-H_AMOUNT_INITIAL_CENTS)),
            Value::Decimal(Decimal::from_cents(H_AMOUNT_INITIAL_CENTS)),
            Value::Int(1),
            Value::Int(0),
            s(astring(&mut rng, 300, 500)),
        ]);
        rows.push((CUSTOMER, row));
        rows.push((CUSTOMER_NAME, vec![Value::Int(w), Value::Int(d), s(last_name), s(first_name), Value::Int(c)]));
        rows.push((
            HISTORY,
            vec![
                Value::Int(w),
                Value::Int(d),
                Value::Int(c),
                Value::Int(0),
                Value::Int(w),
                Value::Int(d),
                Value::Int(gen::DATE_BASE_SECS),
                Value::Decimal(Decimal::from_cents(H_AMOUNT_INITIAL_CENTS)),
                s(astring(&mut rng, 12, 24)),
            ],
        ));
    }
    write_all(&ctx, rows).await?;
    Ok(vec![Value::Int(last - first + 1)])
}

/// The customer of each initial order of a district: a random permutation of the customer ids
/// (clause 4.3.3.1), `perm[o - 1]` for order `o`.
pub fn order_customers(seed: i64, w: i64, d: i64, customers: i64) -> Vec<i64> {
    let mut perm: Vec<i64> = (1..=customers).collect();
    perm.shuffle(&mut ChaCha8Rng::seed_from_u64(batch_seed(&[seed, 5, w, d])));
    perm
}

/// `tpcc_load_orders(w, d, start, count, seed, customers, items, undelivered)`: orders
/// `start+1 ..= start+count` of district `(w, d)` with their order lines, the customers'
/// latest-order index rows, and NEW-ORDER rows for the last `undelivered` orders of the
/// district (whose number of orders is `customers`).
pub(crate) async fn load_orders(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let p = LOAD_ORDERS;
    let w = positive(&args, 0, p)?;
    let d = positive(&args, 1, p)?;
    let (first, last) = id_range(&args, 2, p)?;
    let seed = arg_int(&args, 4, p)?;
    let customers = positive(&args, 5, p)?;
    let items = positive(&args, 6, p)?;
    let undelivered = arg_int(&args, 7, p)?;
    if last > customers || !(0..=customers).contains(&undelivered) {
        return Err(bad_arg(p, format!("orders up to {last} of {customers}, {undelivered} undelivered")));
    }
    let perm = order_customers(seed, w, d, customers);
    let delivered_max = customers - undelivered;
    let mut rng = ChaCha8Rng::seed_from_u64(batch_seed(&[seed, 6, w, d, first]));
    let mut rows = Vec::new();
    for o in first..=last {
        let c = perm[(o - 1) as usize];
        let entry_d = gen::DATE_BASE_SECS;
        let delivered = o <= delivered_max;
        let ol_cnt = rng.gen_range(5..=15i64);
        let carrier = if delivered { Value::Int(rng.gen_range(1..=10)) } else { Value::Null };
        let order = [w, d, o, c, entry_d].map(Value::Int).to_vec();
        let mut order = order;
        order.extend([carrier, Value::Int(ol_cnt), Value::Int(1)]);
        rows.push((ORDERS, order));
        rows.push((CUSTOMER_LAST_ORDER, [w, d, c, o].map(Value::Int).to_vec()));
        if !delivered {
            rows.push((NEW_ORDER, [w, d, o].map(Value::Int).to_vec()));
        }
        for n in 1..=ol_cnt {
            let (delivery_d, amount) = if delivered {
                (Value::Int(entry_d), Value::Decimal(Decimal::ZERO))
            } else {
                (Value::Null, money(&mut rng, 1, 999_999))
            };
            let mut line = [w, d, o, n, rng.gen_range(1..=items), w].map(Value::Int).to_vec();
            line.extend([delivery_d, Value::Int(5), amount, s(astring(&mut rng, 24, 24))]);
            rows.push((ORDER_LINE, line));
        }
    }
    write_all(&ctx, rows).await?;
    Ok(vec![Value::Int(last - first + 1)])
}

/// Registers the load procedures (plain ACID).
pub fn register(registry: &mut Registry) {
    registry.register(LOAD_ITEMS, vec![ColumnType::Int; 3], load_items);
    registry.register(LOAD_WAREHOUSE, vec![ColumnType::Int; 3], load_warehouse);
    registry.register(LOAD_STOCK, vec![ColumnType::Int; 4], load_stock);
    registry.register(LOAD_CUSTOMERS, vec![ColumnType::Int; 5], load_customers);
    registry.register(LOAD_ORDERS, vec![ColumnType::Int; 8], load_orders);
}

/// One load call and the rows it writes (for the progress bar).
#[derive(Clone, Debug, PartialEq)]
pub struct LoadCall {
    pub procedure: &'static str,
    pub args: Vec<Value>,
    pub rows: u64,
}

fn ints(v: &[u64]) -> Vec<Value> {
    v.iter().map(|x| Value::Int(*x as i64)).collect()
}

/// Every load call of the initial population, warehouses (and districts) first.
pub fn plan(scale: &Scale, seed: u64) -> Vec<LoadCall> {
    plan_in_batches(scale, seed, LoadBatches::DEFAULT)
}

/// Rows per load call, by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadBatches {
    pub items: u64,
    pub customers: u64,
    pub orders: u64,
}

impl LoadBatches {
    pub const DEFAULT: LoadBatches =
        LoadBatches { items: LOAD_ITEMS_PER_CALL, customers: LOAD_CUSTOMERS_PER_CALL, orders: LOAD_ORDERS_PER_CALL };
}

/// [`plan`] with other batch sizes (the simulator uses small ones).
pub fn plan_in_batches(scale: &Scale, seed: u64, batches: LoadBatches) -> Vec<LoadCall> {
    let LoadBatches { items: items_per_call, customers: customers_per_call, orders: orders_per_call } = batches;
    assert!(items_per_call > 0 && customers_per_call > 0 && orders_per_call > 0);
    let mut calls = Vec::new();
    let (c, items) = (scale.customers, scale.items);
    for w in 1..=scale.warehouses {
        calls.push(LoadCall { procedure: LOAD_WAREHOUSE, args: ints(&[w, seed, c]), rows: 1 + DISTRICTS as u64 });
    }
    for start in (0..items).step_by(items_per_call as usize) {
        let count = items_per_call.min(items - start);
        calls.push(LoadCall { procedure: LOAD_ITEMS, args: ints(&[start, count, seed]), rows: count });
    }
    for w in 1..=scale.warehouses {
        for start in (0..items).step_by(items_per_call as usize) {
            let count = items_per_call.min(items - start);
            calls.push(LoadCall { procedure: LOAD_STOCK, args: ints(&[w, start, count, seed]), rows: count });
        }
        for d in 1..=DISTRICTS as u64 {
            for start in (0..c).step_by(customers_per_call as usize) {
                let count = customers_per_call.min(c - start);
                let args = ints(&[w, d, start, count, seed]);
                calls.push(LoadCall { procedure: LOAD_CUSTOMERS, args, rows: 3 * count });
            }
            for start in (0..c).step_by(orders_per_call as usize) {
                let count = orders_per_call.min(c - start);
                let args = ints(&[w, d, start, count, seed, c, items, scale.new_orders_initial()]);
                // ~10 order lines, an index row and (30%) a new-order per order.
                calls.push(LoadCall { procedure: LOAD_ORDERS, args, rows: 12 * count });
            }
        }
    }
    calls
}

/// Loads the initial population through clients made by `clients`, from [`LOAD_THREADS`]
/// threads, with a progress bar when `progress`. Stops at the first failure.
pub fn load(
    clients: &mut dyn FnMut() -> Result<Client, Error>,
    scale: &Scale,
    seed: u64,
    progress: bool,
) -> anyhow::Result<()> {
    load_calls(clients, plan(scale, seed), progress)
}

/// Runs `calls` (a load plan, maybe renamed to another form of the procedures) as [`load`] does.
pub fn load_calls(
    clients: &mut dyn FnMut() -> Result<Client, Error>,
    calls: Vec<LoadCall>,
    progress: bool,
) -> anyhow::Result<()> {
    let total: u64 = calls.iter().map(|c| c.rows).sum();
    let threads = LOAD_THREADS.min(calls.len()).max(1);
    let mut sessions = Vec::with_capacity(threads);
    for _ in 0..threads {
        sessions.push(clients().context("open a load client")?);
        // One order for a deterministic transport (the simulator's); see `load_in_batches`.
        if sessions[0].serialises() {
            break;
        }
    }
    let bar = progress_bar(total, "load", BAR_COUNTED, !progress || total < LOAD_PROGRESS_ROWS_MIN);
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    // The warehouse calls come first and are tiny; the rest may run in any order.
    let result = std::thread::scope(|s| {
        let handles: Vec<_> = sessions
            .iter_mut()
            .map(|client| {
                let (calls, next, failed, bar) = (&calls, &next, &failed, &bar);
                s.spawn(move || -> anyhow::Result<()> {
                    while !failed.load(Ordering::Relaxed) {
                        let Some(call) = calls.get(next.fetch_add(1, Ordering::Relaxed)) else { break };
                        if let Err(e) = call_idempotent(client, call.procedure, call.args.clone()) {
                            failed.store(true, Ordering::Relaxed);
                            return Err(e).with_context(|| format!("{}{:?}", call.procedure, call.args));
                        }
                        bar.inc(call.rows);
                    }
                    Ok(())
                })
            })
            .collect();
        crate::setup::join_loaders(handles)
    });
    bar.finish_and_clear();
    result
}
