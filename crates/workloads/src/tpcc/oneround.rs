//! # TPC-C in one-round form (Granola §6.2, H-Store partitioning)
//!
//! The same database, inputs and checker as the ACID/BASE form ([`super`]), with every
//! transaction declared as a one-round procedure ([`litmus_protocol::fragment`]): one fragment
//! per participating warehouse, routed by the warehouse id (warehouse `w` on partition
//! `w mod P`). ITEM is replicated, so every transaction is single-partition or *independent*
//! (Granola §2): every participant reaches the same commit decision from its own rows.
//!
//! | transaction | form | participants |
//! | --- | --- | --- |
//! | New-Order | independent | home warehouse ([`NO_HOME`]) + each remote supplying warehouse ([`NO_SUPPLY`]) |
//! | Payment | independent | home warehouse ([`PAY_HOME`]) + the customer's warehouse when remote ([`PAY_CUSTOMER`]) |
//! | Order-Status, Delivery, Stock-Level | single | home warehouse (the ACID bodies, unchanged) |
//!
//! With the specification's rates (1% remote order lines, 15% remote Payments) about 10.7% of
//! the mix is distributed: 43.5% × (1 − 0.99^10) ≈ 4.1% of New-Orders (10 lines on average)
//! plus 43.5% × 15% ≈ 6.5% of Payments, `the_mix_is_about_eleven_percent_distributed`.
//!
//! **Why New-Order is independent.** Its only abort is the 1% rollback for an unused item
//! (clause 2.4.2.3). ITEM is on every partition, so every participant checks every item of the
//! order and all abort alike, applying nothing; no participant needs another's data. The home
//! fragment takes the order id, inserts ORDERS / NEW-ORDER / the index row and the order lines
//! (amounts from the replicated ITEM prices) and updates its local stock; each supplying
//! fragment updates its warehouse's stock rows. **Payment** cannot fail on a TPC-C database
//! (its arguments are checked by the plan, before anything is sent): the home fragment adds to
//! `w_ytd` / `d_ytd`, the customer fragment finds the customer (by id or last name, at the
//! customer's warehouse) and inserts HISTORY.
//!
//! Differences from the ACID form, both in output-only columns no condition reads: a remote
//! order line's `ol_dist_info` is empty (the supplying warehouse's `s_dist_xx` is not visible
//! at the home warehouse in one round), and a remote Payment's `h_data` names the paying
//! warehouse and district by id (their names live at the home warehouse).
//!
//! The load and check procedures are the ACID bodies as single-partition fragments (each
//! touches one warehouse), except the ITEM load: an independent transaction with one fragment
//! per partition, each writing its partition's copy of the replicated table. Engines that take
//! one-round transactions whole (`granola`) run these; every other engine can run them
//! through the adapter (`litmus bench tpcc --one-round`).

use super::check::{CHECK_DISTRICT, CHECK_WAREHOUSE};
use super::load::{self, LoadCall, LOAD_CUSTOMERS, LOAD_ITEMS, LOAD_ORDERS, LOAD_STOCK, LOAD_WAREHOUSE};
use super::schema::{col, *};
use super::txns::{
    self, dec, must_read, overflow, read_many, run_all, update_op, CustomerPayment, LineInput, NewOrderInput,
    NEW_ORDER_ARGS,
};
use super::{arg_dec, arg_int, arg_opt_int, arg_opt_str, bad_arg, row_dec, row_int, TxnType};
use litmus_core::{ColumnType, Decimal, Error, Formula, InvalidInput, Row, Value};
use litmus_protocol::fragment::{FragmentCall, OneRoundClass};
use litmus_protocol::procedure::ProcResult;
use litmus_protocol::{Ctx, Op, Registry};
use std::future::Future;

pub const NEW_ORDER_1R: &str = "tpcc_new_order_1r";
pub const PAYMENT_1R: &str = "tpcc_payment_1r";
pub const ORDER_STATUS_1R: &str = "tpcc_order_status_1r";
pub const DELIVERY_1R: &str = "tpcc_delivery_1r";
pub const STOCK_LEVEL_1R: &str = "tpcc_stock_level_1r";
pub const LOAD_ITEMS_1R: &str = "tpcc_load_items_1r";
pub const LOAD_WAREHOUSE_1R: &str = "tpcc_load_warehouse_1r";
pub const LOAD_STOCK_1R: &str = "tpcc_load_stock_1r";
pub const LOAD_CUSTOMERS_1R: &str = "tpcc_load_customers_1r";
pub const LOAD_ORDERS_1R: &str = "tpcc_load_orders_1r";
pub const CHECK_DISTRICT_1R: &str = "tpcc_check_district_1r";
pub const CHECK_WAREHOUSE_1R: &str = "tpcc_check_warehouse_1r";

/// New-Order's fragment at the home warehouse.
pub const NO_HOME: &str = "tpcc_no_home";
/// New-Order's fragment at a remote supplying warehouse: `[supply_w] ++ new-order args`.
pub const NO_SUPPLY: &str = "tpcc_no_supply";
/// Payment's fragment at the home warehouse (the whole Payment when the customer is local).
pub const PAY_HOME: &str = "tpcc_pay_home";
/// Payment's fragment at a remote customer's warehouse.
pub const PAY_CUSTOMER: &str = "tpcc_pay_customer";

/// Most partitions the ITEM load plans a fragment for.
pub const PARTITIONS_MAX: i64 = 4096;

/// The one-round procedure of a transaction type.
pub fn procedure(t: TxnType) -> &'static str {
    match t {
        TxnType::NewOrder => NEW_ORDER_1R,
        TxnType::Payment => PAYMENT_1R,
        TxnType::OrderStatus => ORDER_STATUS_1R,
        TxnType::Delivery => DELIVERY_1R,
        TxnType::StockLevel => STOCK_LEVEL_1R,
    }
}

/// The one-round form of a load or check procedure of the ACID form.
pub fn one_round_of(procedure: &str) -> Option<&'static str> {
    Some(match procedure {
        LOAD_ITEMS => LOAD_ITEMS_1R,
        LOAD_WAREHOUSE => LOAD_WAREHOUSE_1R,
        LOAD_STOCK => LOAD_STOCK_1R,
        LOAD_CUSTOMERS => LOAD_CUSTOMERS_1R,
        LOAD_ORDERS => LOAD_ORDERS_1R,
        CHECK_DISTRICT => CHECK_DISTRICT_1R,
        CHECK_WAREHOUSE => CHECK_WAREHOUSE_1R,
        _ => return None,
    })
}

/// The load plan in one-round form for a cluster of `partitions` partitions (the ITEM load
/// writes every partition's copy).
pub fn load_plan(calls: Vec<LoadCall>, partitions: u32) -> Vec<LoadCall> {
    calls
        .into_iter()
        .map(|mut c| {
            if c.procedure == LOAD_ITEMS {
                c.args.push(Value::Int(partitions as i64));
            }
            c.procedure = one_round_of(c.procedure).unwrap_or(c.procedure);
            c
        })
        .collect()
}

fn wid(args: &[Value], i: usize, procedure: &str) -> Result<Value, Error> {
    Ok(Value::Int(arg_int(args, i, procedure)?))
}

fn at_warehouse(fragment: &str, w: Value, args: Vec<Value>) -> FragmentCall {
    FragmentCall::new(fragment, WAREHOUSE, vec![w], args)
}

/// Registers `body` as fragment `frag` and a single-partition one-round procedure `name` that
/// runs it at the warehouse named by argument 0.
fn single<F, Fut>(r: &mut Registry, name: &'static str, frag: &'static str, params: Vec<ColumnType>, body: F)
where
    F: Fn(Ctx, Vec<Value>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ProcResult> + Send + 'static,
{
    r.register_fragment(frag, params.clone(), body);
    r.register_one_round(name, params, OneRoundClass::Single, move |args: &[Value]| {
        Ok(vec![at_warehouse(frag, wid(args, 0, name)?, args.to_vec())])
    });
}

/// Every item of the order, read from this partition's ITEM copy; a missing one rolls the
/// New-Order back at every participant alike (clause 2.4.2.3).
async fn check_items(ctx: &Ctx, inp: &NewOrderInput) -> Result<Vec<Row>, Error> {
    let keys: Vec<Vec<Value>> = inp.lines.iter().map(|l| vec![Value::Int(l.item)]).collect();
    let rows = read_many(ctx, ITEM, &keys).await?;
    inp.lines
        .iter()
        .zip(rows)
        .map(|(l, r)| r.ok_or_else(|| ctx.abort(format!("item {} not found: new-order rolled back", l.item))))
        .collect()
}

/// The stock side of order lines (clause 2.4.2.2): counters, then the quantity from the row
/// read after them. Returns the stock rows, in line order.
async fn update_stock(ctx: &Ctx, home_w: i64, lines: &[LineInput]) -> Result<Vec<Row>, Error> {
    let keys: Vec<Vec<Value>> = lines.iter().map(|l| vec![Value::Int(l.supply_w), Value::Int(l.item)]).collect();
    let counters = lines
        .iter()
        .zip(&keys)
        .map(|(l, key)| {
            update_op(
                STOCK,
                key.clone(),
                &[
                    ("s_ytd", Formula::Add(Value::Int(l.quantity))),
                    ("s_order_cnt", Formula::Add(Value::Int(1))),
                    ("s_remote_cnt", Formula::Add(Value::Int(i64::from(l.supply_w != home_w)))),
                ],
            )
        })
        .collect();
    run_all(ctx, counters).await?;
    let mut rows = Vec::with_capacity(lines.len());
    let mut quantities = Vec::with_capacity(lines.len());
    for ((l, key), stock) in lines.iter().zip(&keys).zip(read_many(ctx, STOCK, &keys).await?) {
        let stock = stock.ok_or_else(|| ctx.abort(format!("stock ({}, {}) is missing", l.supply_w, l.item)))?;
        let q = row_int(&stock, col::S_QUANTITY)?;
        let new_q = if q >= l.quantity + 10 { q - l.quantity } else { q - l.quantity + 91 };
        quantities.push(update_op(STOCK, key.clone(), &[("s_quantity", Formula::Assign(Value::Int(new_q)))]));
        rows.push(stock);
    }
    run_all(ctx, quantities).await?;
    Ok(rows)
}

/// New-Order at the home warehouse: `[o_id, total]`.
async fn no_home(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let inp = NewOrderInput::parse(&args)?;
    let items = check_items(&ctx, &inp).await?;
    let (w, d, c) = (Value::Int(inp.w), Value::Int(inp.d), Value::Int(inp.c));
    let dkey = vec![w.clone(), d.clone()];
    ctx.update(DISTRICT, &dkey, &[("d_next_o_id", Formula::Add(Value::Int(1)))]).await?;
    let warehouse = must_read(&ctx, WAREHOUSE, std::slice::from_ref(&w)).await?;
    let district = must_read(&ctx, DISTRICT, &dkey).await?;
    let o_id = row_int(&district, col::D_NEXT_O_ID)? - 1;
    let (w_tax, d_tax) = (row_dec(&warehouse, col::W_TAX)?, row_dec(&district, col::D_TAX)?);
    let local: Vec<LineInput> = inp.lines.iter().filter(|l| l.supply_w == inp.w).copied().collect();
    let mut local_stock = update_stock(&ctx, inp.w, &local).await?.into_iter();
    let o = Value::Int(o_id);
    let all_local = local.len() == inp.lines.len();
    let order = vec![
        w.clone(),
        d.clone(),
        o.clone(),
        c.clone(),
        Value::Int(inp.entry_d),
        Value::Null,
        Value::Int(inp.lines.len() as i64),
        Value::Int(i64::from(all_local)),
    ];
    let mut ops = vec![
        Op::Insert { table: ORDERS.into(), row: order.into() },
        Op::Insert { table: NEW_ORDER.into(), row: vec![w.clone(), d.clone(), o.clone()].into() },
        Op::Write { table: CUSTOMER_LAST_ORDER.into(), row: vec![w.clone(), d.clone(), c.clone(), o.clone()].into() },
    ];
    let mut total = Decimal::ZERO;
    for (n, (l, item)) in inp.lines.iter().zip(&items).enumerate() {
        let amount = Decimal::from_int(l.quantity)
            .and_then(|q| q.checked_mul(row_dec(item, col::I_PRICE).ok()?))
            .ok_or_else(|| overflow("ol_amount"))?;
        total = total.checked_add(amount).ok_or_else(|| overflow("total"))?;
        // A remote line's s_dist_xx lives at the supplying warehouse (see the module doc).
        let dist_info = if l.supply_w == inp.w {
            let stock = local_stock.next().ok_or_else(|| Error::Internal("a local line without stock".into()))?;
            stock.get(col::s_dist(inp.d as usize)).cloned().unwrap_or(Value::Null)
        } else {
            Value::String("".into())
        };
        let line = vec![
            w.clone(),
            d.clone(),
            o.clone(),
            Value::Int(n as i64 + 1),
            Value::Int(l.item),
            Value::Int(l.supply_w),
            Value::Null,
            Value::Int(l.quantity),
            dec(amount),
            dist_info,
        ];
        ops.push(Op::Insert { table: ORDER_LINE.into(), row: line.into() });
    }
    run_all(&ctx, ops).await?;
    let customer = must_read(&ctx, CUSTOMER, &[w, d, c]).await?;
    let discount = row_dec(&customer, col::C_DISCOUNT)?;
    let one = Decimal::from_int(1).expect("1 fits");
    let factor = one.checked_add(w_tax).and_then(|x| x.checked_add(d_tax)).ok_or_else(|| overflow("tax"))?;
    let total = total
        .checked_mul(Decimal(one.0 - discount.0))
        .and_then(|t| t.checked_mul(factor))
        .ok_or_else(|| overflow("total"))?;
    Ok(vec![o, dec(total)])
}

/// New-Order at a remote supplying warehouse: the same item check, then its stock rows.
async fn no_supply(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let supply_w = arg_int(&args, 0, NO_SUPPLY)?;
    let inp = NewOrderInput::parse(args.get(1..).unwrap_or_default())?;
    check_items(&ctx, &inp).await?;
    let lines: Vec<LineInput> = inp.lines.iter().filter(|l| l.supply_w == supply_w).copied().collect();
    update_stock(&ctx, inp.w, &lines).await?;
    Ok(vec![])
}

fn new_order_plan(args: &[Value]) -> Result<Vec<FragmentCall>, Error> {
    let inp = NewOrderInput::parse(args)?;
    let mut calls = vec![at_warehouse(NO_HOME, Value::Int(inp.w), args.to_vec())];
    let mut remote: Vec<i64> = inp.lines.iter().map(|l| l.supply_w).filter(|s| *s != inp.w).collect();
    remote.sort_unstable();
    remote.dedup();
    for s in remote {
        let mut a = Vec::with_capacity(args.len() + 1);
        a.push(Value::Int(s));
        a.extend_from_slice(args);
        calls.push(at_warehouse(NO_SUPPLY, Value::Int(s), a));
    }
    Ok(calls)
}

/// Payment at the home warehouse: the year-to-date sums; the whole Payment when the customer's
/// warehouse is the home one (the ACID body).
async fn pay_home(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let p = PAY_HOME;
    let (w, c_w) = (arg_int(&args, 0, p)?, arg_int(&args, 2, p)?);
    if w == c_w {
        return txns::payment(ctx, args, false).await;
    }
    let amount = arg_dec(&args, 6, p)?;
    let add = Formula::Add(dec(amount));
    let (w, d) = (Value::Int(w), wid(&args, 1, p)?);
    ctx.update(DISTRICT, &[w.clone(), d], &[("d_ytd", add.clone())]).await?;
    ctx.update(WAREHOUSE, &[w], &[("w_ytd", add)]).await?;
    Ok(vec![])
}

/// Payment at a remote customer's warehouse: `[c_id, c_balance]`.
async fn pay_customer(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let p = PAY_CUSTOMER;
    let (w, d) = (wid(&args, 0, p)?, wid(&args, 1, p)?);
    let h_data = format!("w{w} d{d}");
    let pay = CustomerPayment {
        w,
        d,
        c_w: wid(&args, 2, p)?,
        c_d: wid(&args, 3, p)?,
        c_id: arg_opt_int(&args, 4, p)?,
        c_last: arg_opt_str(&args, 5, p)?,
        amount: arg_dec(&args, 6, p)?,
        h_date: arg_int(&args, 7, p)?,
        h_id: arg_int(&args, 8, p)?,
    };
    txns::payment_customer(&ctx, pay, h_data).await
}

/// Checks everything a participant could refuse, so that no participant of the independent
/// Payment fails alone.
fn payment_plan(args: &[Value]) -> Result<Vec<FragmentCall>, Error> {
    let p = PAYMENT_1R;
    let (w, c_w) = (arg_int(args, 0, p)?, arg_int(args, 2, p)?);
    for i in [1, 3, 7, 8] {
        arg_int(args, i, p)?;
    }
    let amount = arg_dec(args, 6, p)?;
    if amount.0 <= 0 {
        return Err(bad_arg(p, format!("amount must be positive, got {amount}")));
    }
    if arg_opt_int(args, 4, p)?.is_none() && arg_opt_str(args, 5, p)?.is_none() {
        return Err(bad_arg(p, "neither a customer id nor a last name".into()));
    }
    let mut calls = vec![at_warehouse(PAY_HOME, Value::Int(w), args.to_vec())];
    if c_w != w {
        calls.push(at_warehouse(PAY_CUSTOMER, Value::Int(c_w), args.to_vec()));
    }
    Ok(calls)
}

/// `tpcc_load_items_1r(start, count, seed, partitions)`: the ITEM batch at every partition.
fn load_items_plan(args: &[Value]) -> Result<Vec<FragmentCall>, Error> {
    let partitions = arg_int(args, 3, LOAD_ITEMS_1R)?;
    if !(1..=PARTITIONS_MAX).contains(&partitions) {
        return Err(InvalidInput::Config(format!("{LOAD_ITEMS_1R} over {partitions} partitions")).into());
    }
    let batch = args[..3].to_vec();
    Ok((0..partitions).map(|p| at_warehouse("tpcc_load_items_frag", Value::Int(p), batch.clone())).collect())
}

/// Registers the one-round procedures and their fragments.
pub fn register(r: &mut Registry) {
    use ColumnType::{Decimal as Dec, Int, String as Str};
    let payment_params = vec![Int, Int, Int, Int, Int, Str, Dec, Int, Int];
    r.register_fragment(NO_HOME, vec![Int; NEW_ORDER_ARGS], no_home);
    r.register_fragment(NO_SUPPLY, vec![Int; NEW_ORDER_ARGS + 1], no_supply);
    r.register_one_round(NEW_ORDER_1R, vec![Int; NEW_ORDER_ARGS], OneRoundClass::Independent, new_order_plan);
    r.register_fragment(PAY_HOME, payment_params.clone(), pay_home);
    r.register_fragment(PAY_CUSTOMER, payment_params.clone(), pay_customer);
    r.register_one_round(PAYMENT_1R, payment_params, OneRoundClass::Independent, payment_plan);
    single(r, ORDER_STATUS_1R, "tpcc_order_status_frag", vec![Int, Int, Int, Str], |c, a| {
        txns::order_status(c, a, false)
    });
    single(r, DELIVERY_1R, "tpcc_delivery_frag", vec![Int; 3], |c, a| txns::delivery(c, a, false));
    single(r, STOCK_LEVEL_1R, "tpcc_stock_level_frag", vec![Int; 3], |c, a| txns::stock_level(c, a, false));
    r.register_fragment("tpcc_load_items_frag", vec![Int; 3], load::load_items);
    r.register_one_round(LOAD_ITEMS_1R, vec![Int; 4], OneRoundClass::Independent, load_items_plan);
    single(r, LOAD_WAREHOUSE_1R, "tpcc_load_warehouse_frag", vec![Int; 3], load::load_warehouse);
    single(r, LOAD_STOCK_1R, "tpcc_load_stock_frag", vec![Int; 4], load::load_stock);
    single(r, LOAD_CUSTOMERS_1R, "tpcc_load_customers_frag", vec![Int; 5], load::load_customers);
    single(r, LOAD_ORDERS_1R, "tpcc_load_orders_frag", vec![Int; 8], load::load_orders);
    single(r, CHECK_DISTRICT_1R, "tpcc_check_district_frag", vec![Int; 3], super::check::check_district);
    single(r, CHECK_WAREHOUSE_1R, "tpcc_check_warehouse_frag", vec![Int], super::check::check_warehouse);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tpcc::{schema, Tpcc, TpccOptions};
    use crate::workload::{loaded_cluster, Outcomes, RunStats, Workload};
    use litmus_client::Client;
    use litmus_protocol::EngineKind;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn tpcc(warehouses: u64, partitions: u32) -> Tpcc {
        let opts = TpccOptions { warehouses, scale_div: 100, ..TpccOptions::DEFAULT };
        Tpcc::new(&opts, false).unwrap().with_one_round(partitions)
    }

    #[test]
    fn the_mix_is_about_eleven_percent_distributed() {
        // Granola §6.2: with the specification's remote rates, ~10.7% of TPC-C is distributed.
        let w = tpcc(4, 4);
        let mut registry = Registry::new();
        super::super::register(&mut registry);
        let catalog = schema::catalog();
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let (n, mut distributed) = (40_000, 0);
        for _ in 0..n {
            let t = w.generate(&mut rng);
            let proc = registry.get(t.procedure).unwrap();
            let plan = registry.plan(proc, &t.args, &catalog, 4).unwrap().expect("one-round");
            distributed += usize::from(plan.participants().len() > 1);
        }
        let share = distributed as f64 / n as f64;
        assert!((share - 0.107).abs() < 0.012, "{share:.3} distributed");
    }

    /// Runs `n` TPC-C transactions in one-round form on `engine`, then the consistency check.
    fn run_and_check(engine: EngineKind, n: usize) {
        let w = tpcc(2, 2);
        let cluster = loaded_cluster(&w, engine, 2, 2).unwrap();
        let mut client = Client::new(Box::new(cluster.transport()));
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut stats = RunStats::default();
        for _ in 0..n {
            let t = w.generate(&mut rng);
            let o = stats.total.entry(t.kind).or_insert_with(Outcomes::default);
            match client.call(t.procedure, t.args) {
                Ok(_) => o.committed += 1,
                Err(Error::UserAbort(_)) => o.user_aborts += 1,
                Err(e) => panic!("{engine}: {} failed: {e}", t.kind),
            }
        }
        let verdict = w.verify(&mut client, &stats);
        assert!(verdict.is_ok(), "{engine}: {verdict:?}");
    }

    #[test]
    fn one_round_tpcc_keeps_the_consistency_conditions_on_granola_and_through_the_adapter() {
        for engine in
            [litmus_engines::GRANOLA, litmus_engines::GRANOLA_LOCKING, litmus_engines::SINFONIA, litmus_engines::ACID]
        {
            run_and_check(engine, 300);
        }
    }

    #[test]
    fn bad_one_round_payment_input_is_refused_before_anything_is_sent() {
        let mut args = vec![Value::Int(1), Value::Int(1), Value::Int(2), Value::Int(1), Value::Int(5), Value::Null];
        args.extend([Value::Decimal(Decimal::ZERO), Value::Int(0), Value::Int(1)]);
        assert!(matches!(payment_plan(&args), Err(Error::Invalid(_))), "a zero amount");
        args[6] = Value::Decimal(Decimal::from_cents(100));
        args[4] = Value::Null;
        assert!(matches!(payment_plan(&args), Err(Error::Invalid(_))), "no customer named");
        args[4] = Value::Int(5);
        assert_eq!(payment_plan(&args).unwrap().len(), 2, "a remote customer: two participants");
    }
}
