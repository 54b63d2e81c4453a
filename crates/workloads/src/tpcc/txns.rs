//! The five TPC-C transactions (clauses 2.4–2.8) as stored procedures, each registered twice:
//! a plain ACID procedure and a BASE one (`_base`, [`ProcOptions::base`]) with Salt's alkaline
//! boundaries (see the module doc of [`super`] for where they are and why that is safe). Under
//! engines without BASE transactions the `_base` procedures run as one ACID transaction.
//!
//! Row updates that depend on the old value are written *update first, then read*: the formula
//! update takes the write lock at once, so two transactions never both hold a read lock on a
//! row and then both wait to upgrade it (a cycle wait-die would break with an abort — and an
//! accepted BASE transaction cannot abort).

use super::schema::{col, *};
use super::{
    arg_dec, arg_int, arg_opt_int, arg_opt_str, bad_arg, row_dec, row_int, row_str, DISTRICTS, ORDER_LINES_MAX,
};
use litmus_core::{ColumnType, Decimal, Error, Formula, InvalidInput, Isolation, Row, Value};
use litmus_protocol::procedure::{ProcOptions, ProcResult};
use litmus_protocol::{Ctx, Op, OpResult, Registry};

pub const NEW_ORDER_PROC: &str = "tpcc_new_order";
pub const PAYMENT_PROC: &str = "tpcc_payment";
pub const ORDER_STATUS_PROC: &str = "tpcc_order_status";
pub const DELIVERY_PROC: &str = "tpcc_delivery";
/// One district's step of Delivery as a database transaction of its own (clause 2.7.4.1: the
/// business transaction may be done as up to 10 database transactions): `[w, carrier, date, d]`.
pub const DELIVERY_DISTRICT_PROC: &str = "tpcc_delivery_district";
pub const STOCK_LEVEL_PROC: &str = "tpcc_stock_level";
pub const NEW_ORDER_BASE_PROC: &str = "tpcc_new_order_base";
pub const PAYMENT_BASE_PROC: &str = "tpcc_payment_base";
pub const ORDER_STATUS_BASE_PROC: &str = "tpcc_order_status_base";
pub const DELIVERY_BASE_PROC: &str = "tpcc_delivery_base";
pub const STOCK_LEVEL_BASE_PROC: &str = "tpcc_stock_level_base";

/// Arguments of New-Order before its order lines: `w, d, c, o_entry_d, ol_cnt`.
pub const NEW_ORDER_FIXED_ARGS: usize = 5;
/// New-Order's arity: the fixed arguments and `(i_id, supply_w_id, quantity)` per line, padded
/// with NULLs to [`ORDER_LINES_MAX`] lines.
pub const NEW_ORDER_ARGS: usize = NEW_ORDER_FIXED_ARGS + 3 * ORDER_LINES_MAX;
/// Most customers with one last name a by-name lookup considers.
pub const NAME_LOOKUP_ROWS_MAX: u32 = 1_000;
/// Orders Stock-Level looks back over (clause 2.8.2.2).
pub const STOCK_LEVEL_ORDERS: i64 = 20;
/// Longest `c_data` (clause 2.5.2.2).
pub const C_DATA_CHARS_MAX: usize = 500;

pub(crate) fn dec(v: Decimal) -> Value {
    Value::Decimal(v)
}

pub(crate) fn overflow(what: &str) -> Error {
    InvalidInput::Overflow(what.into()).into()
}

async fn begin(ctx: &Ctx, base: bool) -> Result<(), Error> {
    if base {
        ctx.begin_alkaline().await?;
    }
    Ok(())
}

async fn end(ctx: &Ctx, base: bool) -> Result<(), Error> {
    if base {
        ctx.end_alkaline().await?;
    }
    Ok(())
}

/// A row that must exist (a missing one means the database is not a TPC-C database: the
/// transaction aborts and `verify` reports it).
pub(crate) async fn must_read(ctx: &Ctx, table: &str, key: &[Value]) -> Result<Row, Error> {
    ctx.read(table, key).await?.ok_or_else(|| ctx.abort(format!("{table} row {key:?} is missing")))
}

/// Issues all reads at once, then waits for them in order.
pub(crate) async fn read_many(ctx: &Ctx, table: &str, keys: &[Vec<Value>]) -> Result<Vec<Option<Row>>, Error> {
    ctx.read_many(table, keys).await
}

/// Issues all writes at once (one batch per table where the engine takes batches), then waits
/// for them.
pub(crate) async fn run_all(ctx: &Ctx, ops: Vec<Op>) -> Result<(), Error> {
    ctx.write_many(ops).await
}

pub(crate) fn update_op(table: &str, key: Vec<Value>, updates: &[(&str, Formula)]) -> Op {
    Op::Update { table: table.into(), key, updates: updates.iter().map(|(c, f)| (c.to_string(), f.clone())).collect() }
}

/// One order line of a New-Order input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineInput {
    pub item: i64,
    pub supply_w: i64,
    pub quantity: i64,
}

/// Parsed New-Order arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct NewOrderInput {
    pub w: i64,
    pub d: i64,
    pub c: i64,
    pub entry_d: i64,
    pub lines: Vec<LineInput>,
}

impl NewOrderInput {
    pub fn to_args(&self) -> Vec<Value> {
        let mut args = vec![
            Value::Int(self.w),
            Value::Int(self.d),
            Value::Int(self.c),
            Value::Int(self.entry_d),
            Value::Int(self.lines.len() as i64),
        ];
        for l in &self.lines {
            args.extend([Value::Int(l.item), Value::Int(l.supply_w), Value::Int(l.quantity)]);
        }
        args.resize(NEW_ORDER_ARGS, Value::Null);
        args
    }

    pub fn parse(args: &[Value]) -> Result<NewOrderInput, Error> {
        let p = NEW_ORDER_PROC;
        let n = arg_int(args, 4, p)?;
        if !(1..=ORDER_LINES_MAX as i64).contains(&n) {
            return Err(bad_arg(p, format!("ol_cnt must be in 1..={ORDER_LINES_MAX}, got {n}")));
        }
        let mut lines = Vec::with_capacity(n as usize);
        for k in 0..n as usize {
            let at = NEW_ORDER_FIXED_ARGS + 3 * k;
            let line = LineInput {
                item: arg_int(args, at, p)?,
                supply_w: arg_int(args, at + 1, p)?,
                quantity: arg_int(args, at + 2, p)?,
            };
            if !(1..=10).contains(&line.quantity) {
                return Err(bad_arg(p, format!("quantity must be in 1..=10, got {}", line.quantity)));
            }
            lines.push(line);
        }
        let mut items: Vec<(i64, i64)> = lines.iter().map(|l| (l.supply_w, l.item)).collect();
        items.sort_unstable();
        if items.windows(2).any(|p| p[0] == p[1]) {
            return Err(bad_arg(p, "an item appears twice for one supplying warehouse".into()));
        }
        Ok(NewOrderInput {
            w: arg_int(args, 0, p)?,
            d: arg_int(args, 1, p)?,
            c: arg_int(args, 2, p)?,
            entry_d: arg_int(args, 3, p)?,
            lines,
        })
    }
}

/// What New-Order's first alkaline subtransaction (Salt Fig. 6 lines 2–7) read.
struct NewOrderHead {
    item_rows: Vec<Row>,
    w_tax: Decimal,
    o_id: i64,
    d_tax: Decimal,
}

/// New-Order's first alkaline subtransaction (see [`new_order`]): the items, the warehouse tax
/// and the district's next order id, bumped.
async fn new_order_head(ctx: &Ctx, inp: &NewOrderInput, base: bool) -> Result<NewOrderHead, Error> {
    let (w, d) = (Value::Int(inp.w), Value::Int(inp.d));
    begin(ctx, base).await?;
    let dkey = vec![w.clone(), d.clone()];
    let bump = ctx.op(update_op(DISTRICT, dkey.clone(), &[("d_next_o_id", Formula::Add(Value::Int(1)))]));
    // Clause 2.4.2.2 selects W_TAX, D_TAX and D_NEXT_O_ID, and C_DISCOUNT, C_LAST and
    // C_CREDIT: read as columns, they do not depend on Payments' unfinished year-to-date and
    // balance updates of the same rows (LK-6a per column).
    let warehouse =
        ctx.op(Op::ReadColumns { table: WAREHOUSE.into(), key: vec![w.clone()], columns: vec!["w_tax".into()] });
    let item_keys: Vec<Vec<Value>> = inp.lines.iter().map(|l| vec![Value::Int(l.item)]).collect();
    let items = read_many(ctx, ITEM, &item_keys).await?; // polled last: all three are out
    bump.await?;
    let warehouse = match warehouse.await? {
        OpResult::Row(Some(r)) => r,
        OpResult::Row(None) => return Err(ctx.abort(format!("{WAREHOUSE} row {w:?} is missing"))),
        other => return Err(Error::Internal(format!("read returned {other:?}"))),
    };
    let mut item_rows = Vec::with_capacity(items.len());
    for (l, row) in inp.lines.iter().zip(items) {
        match row {
            Some(r) => item_rows.push(r),
            None => return Err(ctx.abort(format!("item {} not found: new-order rolled back", l.item))),
        }
    }
    let w_tax = row_dec(&warehouse, col::W_TAX)?;
    let district = ctx.read_columns(DISTRICT, &dkey, &["d_tax", "d_next_o_id"]).await?;
    let district = district.ok_or_else(|| ctx.abort(format!("{DISTRICT} row {dkey:?} is missing")))?;
    end(ctx, base).await?;
    let o_id = row_int(&district, col::D_NEXT_O_ID)? - 1;
    let d_tax = row_dec(&district, col::D_TAX)?;
    Ok(NewOrderHead { item_rows, w_tax, o_id, d_tax })
}

/// New-Order's order lines (Salt Fig. 6 lines 9–11): the stock counters' update, the quantities,
/// and each line's stock update and ORDER-LINE row pushed onto `ops`; returns the lines' total
/// before tax and discount.
async fn stock_and_lines(
    ctx: &Ctx,
    inp: &NewOrderInput,
    item_rows: &[Row],
    o: &Value,
    ops: &mut Vec<Op>,
) -> Result<Decimal, Error> {
    let (w, d) = (Value::Int(inp.w), Value::Int(inp.d));
    // Stock: take the write locks with the counters' update, then read the quantities.
    let stock_keys: Vec<Vec<Value>> =
        inp.lines.iter().map(|l| vec![Value::Int(l.supply_w), Value::Int(l.item)]).collect();
    let counter_updates: Vec<Op> = inp
        .lines
        .iter()
        .zip(&stock_keys)
        .map(|(l, key)| {
            update_op(
                STOCK,
                key.clone(),
                &[
                    ("s_ytd", Formula::Add(Value::Int(l.quantity))),
                    ("s_order_cnt", Formula::Add(Value::Int(1))),
                    ("s_remote_cnt", Formula::Add(Value::Int(i64::from(l.supply_w != inp.w)))),
                ],
            )
        })
        .collect();
    run_all(ctx, counter_updates).await?;
    let stocks = read_many(ctx, STOCK, &stock_keys).await?;
    let mut total = Decimal::ZERO;
    for (n, ((l, item), stock)) in inp.lines.iter().zip(item_rows).zip(stocks).enumerate() {
        let stock = stock.ok_or_else(|| ctx.abort(format!("stock ({}, {}) is missing", l.supply_w, l.item)))?;
        let q = row_int(&stock, col::S_QUANTITY)?;
        let new_q = if q >= l.quantity + 10 { q - l.quantity } else { q - l.quantity + 91 };
        ops.push(update_op(STOCK, stock_keys[n].clone(), &[("s_quantity", Formula::Assign(Value::Int(new_q)))]));
        let price = row_dec(item, col::I_PRICE)?;
        let amount =
            Decimal::from_int(l.quantity).and_then(|q| q.checked_mul(price)).ok_or_else(|| overflow("ol_amount"))?;
        total = total.checked_add(amount).ok_or_else(|| overflow("total"))?;
        let dist_info = stock.get(col::s_dist(inp.d as usize)).cloned().unwrap_or(Value::Null);
        ops.push(Op::Insert {
            table: ORDER_LINE.into(),
            row: vec![
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
            ]
            .into(),
        });
    }
    Ok(total)
}

/// New-Order (clause 2.4.2) in the shape of Salt Fig. 6. Returns `[o_id, total]` (a BASE
/// transaction's client gets an empty answer at accept).
async fn new_order(ctx: Ctx, args: Vec<Value>, base: bool) -> ProcResult {
    let inp = NewOrderInput::parse(&args)?;
    let (w, d) = (Value::Int(inp.w), Value::Int(inp.d));
    // Fig. 6 lines 2–7, one alkaline subtransaction in a BASE transaction: every item must
    // exist, else the whole transaction rolls back (the 1% of New-Orders with an unused item);
    // the warehouse tax; the district's next order id. The three are issued at once (the
    // district lock is still held while the warehouse read waits, e.g. behind a Payment's
    // `w_ytd` update). Keeping the district
    // in the *first* subtransaction matters: until it commits the transaction can still die
    // for wait-die, so an ACID Delivery or Stock-Level holding the district row makes it wait
    // or retry; an accepted (later) subtransaction would instead wound them (LK-5b),
    // which starved Delivery. The abort for an unused item comes before accept.
    let NewOrderHead { item_rows, w_tax, o_id, d_tax } = new_order_head(&ctx, &inp, base).await?;

    // Lines 8–11: saline-protected in a BASE transaction (an implicit alkaline subtransaction
    // to the end of the procedure).
    let c = Value::Int(inp.c);
    let all_local = inp.lines.iter().all(|l| l.supply_w == inp.w);
    let o = Value::Int(o_id);
    let mut ops = vec![
        Op::Insert {
            table: ORDERS.into(),
            row: vec![
                w.clone(),
                d.clone(),
                o.clone(),
                c.clone(),
                Value::Int(inp.entry_d),
                Value::Null,
                Value::Int(inp.lines.len() as i64),
                Value::Int(i64::from(all_local)),
            ]
            .into(),
        },
        Op::Insert { table: NEW_ORDER.into(), row: vec![w.clone(), d.clone(), o.clone()].into() },
        Op::Write { table: CUSTOMER_LAST_ORDER.into(), row: vec![w.clone(), d.clone(), c.clone(), o.clone()].into() },
    ];
    let total = stock_and_lines(&ctx, &inp, &item_rows, &o, &mut ops).await?;
    run_all(&ctx, ops).await?;
    // Fig. 6 line 8, moved after the inserts: a BASE Delivery holds the NEW-ORDER range it
    // scanned and then updates a customer; reading the customer first and then inserting into
    // that range would let the two accepted (immortal) subtransactions wait for each other.
    let ckey = [w.clone(), d.clone(), c.clone()];
    let customer = ctx.read_columns(CUSTOMER, &ckey, &["c_discount", "c_last", "c_credit"]).await?;
    let customer = customer.ok_or_else(|| ctx.abort(format!("{CUSTOMER} row {ckey:?} is missing")))?;
    let discount = row_dec(&customer, col::C_DISCOUNT)?;
    let one = Decimal::from_int(1).expect("1 fits");
    let factor = one.checked_add(w_tax).and_then(|x| x.checked_add(d_tax)).ok_or_else(|| overflow("tax"))?;
    let total = total
        .checked_mul(Decimal(one.0 - discount.0))
        .and_then(|t| t.checked_mul(factor))
        .ok_or_else(|| overflow("total"))?;
    Ok(vec![o, dec(total)])
}

/// The customer a Payment or Order-Status names: by id, or by last name — the one at position
/// ⌈n/2⌉ of the n customers with that name sorted by first name (clause 2.5.2.2).
pub(crate) async fn find_customer(
    ctx: &Ctx,
    w: &Value,
    d: &Value,
    c_id: Option<i64>,
    last: Option<&str>,
) -> Result<i64, Error> {
    match (c_id, last) {
        (Some(c), _) => Ok(c),
        (None, Some(last)) => {
            let prefix = [w.clone(), d.clone(), Value::String(last.into())];
            let rows = ctx.scan_prefix(CUSTOMER_NAME, &prefix, NAME_LOOKUP_ROWS_MAX).await?;
            if rows.is_empty() {
                return Err(ctx.abort(format!("no customer named {last} in district ({w}, {d})")));
            }
            row_int(&rows[rows.len().div_ceil(2) - 1], col::CN_C_ID)
        }
        (None, None) => Err(bad_arg(PAYMENT_PROC, "neither a customer id nor a last name".into())),
    }
}

/// Payment (clause 2.5.2): `[w, d, c_w, c_d, c_id | NULL, c_last | NULL, amount, h_date, h_id]`.
/// BASE: the district and the warehouse year-to-date updates are single-operation alkaline
/// subtransactions (the contended part, Salt §8.2), the customer and history the last one.
/// What Payment selects of its warehouse and district (clause 2.5.2.2).
const WAREHOUSE_ADDRESS: &[&str] = &["w_name", "w_street_1", "w_street_2", "w_city", "w_state", "w_zip"];
const DISTRICT_ADDRESS: &[&str] = &["d_name", "d_street_1", "d_street_2", "d_city", "d_state", "d_zip"];

pub(crate) async fn payment(ctx: Ctx, args: Vec<Value>, base: bool) -> ProcResult {
    let p = PAYMENT_PROC;
    let (w, d) = (Value::Int(arg_int(&args, 0, p)?), Value::Int(arg_int(&args, 1, p)?));
    let (c_w, c_d) = (Value::Int(arg_int(&args, 2, p)?), Value::Int(arg_int(&args, 3, p)?));
    let c_id = arg_opt_int(&args, 4, p)?;
    let c_last = arg_opt_str(&args, 5, p)?;
    let amount = arg_dec(&args, 6, p)?;
    let h_date = arg_int(&args, 7, p)?;
    let h_id = arg_int(&args, 8, p)?;
    if amount.0 <= 0 {
        return Err(bad_arg(p, format!("amount must be positive, got {amount}")));
    }
    let add = |x: Decimal| Formula::Add(dec(x));
    let wkey = vec![w.clone()];
    let dkey = vec![w.clone(), d.clone()];
    if base {
        // District first: the first subtransaction is the one that can still die, so an ACID
        // Delivery or Stock-Level holding the district row makes this Payment wait or retry;
        // once accepted, it would instead wound them (LK-5b), which starved Delivery.
        ctx.alkaline_update(DISTRICT, &dkey, &[("d_ytd", add(amount))]).await?;
        ctx.alkaline_update(WAREHOUSE, &wkey, &[("w_ytd", add(amount))]).await?;
    } else {
        // The same order as New-Order (district, then warehouse): no lock-order cycle between them.
        ctx.update(DISTRICT, &dkey, &[("d_ytd", add(amount))]).await?;
        ctx.update(WAREHOUSE, &wkey, &[("w_ytd", add(amount))]).await?;
    }
    // Clause 2.5.2.2 selects the names and addresses, never updated; the year-to-date
    // totals it updates are not read back. In a BASE Payment each read is its own
    // single-operation subtransaction, so the last one does not hold a lock on the hot
    // warehouse row while it works on a (maybe remote) customer; and reading only these
    // columns, it does not depend on other Payments' unfinished w_ytd and d_ytd updates (lock
    // LK-6a per column), which would hold its customer update back from ACID readers such as
    // Delivery until those Payments end.
    let missing = |what: &str| ctx.abort(format!("{what} is missing"));
    let (warehouse, district) = if base {
        (
            ctx.alkaline_read_columns(WAREHOUSE, &wkey, WAREHOUSE_ADDRESS).await?,
            ctx.alkaline_read_columns(DISTRICT, &dkey, DISTRICT_ADDRESS).await?,
        )
    } else {
        (
            ctx.read_columns(WAREHOUSE, &wkey, WAREHOUSE_ADDRESS).await?,
            ctx.read_columns(DISTRICT, &dkey, DISTRICT_ADDRESS).await?,
        )
    };
    let warehouse = warehouse.ok_or_else(|| missing("warehouse"))?;
    let district = district.ok_or_else(|| missing("district"))?;
    let h_data = format!("{}    {}", row_str(&warehouse, col::W_NAME)?, row_str(&district, col::D_NAME)?);
    let pay = CustomerPayment { w, d, c_w, c_d, c_id, c_last, amount, h_date, h_id };
    payment_customer(&ctx, pay, h_data).await
}

/// The customer's side of a Payment (clause 2.5.2.2): found by id or last name, balance and
/// counters updated, `c_data` extended for bad credit, the HISTORY row inserted (its `h_data`
/// given). Shared by the ACID/BASE Payment and the one-round form ([`super::oneround`]).
pub(crate) struct CustomerPayment<'a> {
    pub w: Value,
    pub d: Value,
    pub c_w: Value,
    pub c_d: Value,
    pub c_id: Option<i64>,
    pub c_last: Option<&'a str>,
    pub amount: Decimal,
    pub h_date: i64,
    pub h_id: i64,
}

pub(crate) async fn payment_customer(ctx: &Ctx, pay: CustomerPayment<'_>, h_data: String) -> ProcResult {
    let CustomerPayment { w, d, c_w, c_d, c_id, c_last, amount, h_date, h_id } = pay;
    let add = |x: Decimal| Formula::Add(dec(x));
    let c = find_customer(ctx, &c_w, &c_d, c_id, c_last).await?;
    let ckey = vec![c_w.clone(), c_d.clone(), Value::Int(c)];
    let neg = Decimal(-amount.0);
    ctx.update(
        CUSTOMER,
        &ckey,
        &[("c_balance", add(neg)), ("c_ytd_payment", add(amount)), ("c_payment_cnt", Formula::Add(Value::Int(1)))],
    )
    .await?;
    let customer = must_read(ctx, CUSTOMER, &ckey).await?;
    if row_str(&customer, col::C_CREDIT)? == "BC" {
        let old = row_str(&customer, col::C_DATA)?;
        let mut data = format!("{c} {c_d} {c_w} {d} {w} {amount} | {old}");
        data.truncate(C_DATA_CHARS_MAX);
        ctx.update(CUSTOMER, &ckey, &[("c_data", Formula::Assign(Value::String(data.into())))]).await?;
    }
    ctx.insert(
        HISTORY,
        vec![
            c_w,
            c_d,
            Value::Int(c),
            Value::Int(h_id),
            w,
            d,
            Value::Int(h_date),
            dec(amount),
            Value::String(h_data.into()),
        ],
    )
    .await?;
    Ok(vec![Value::Int(c), customer[col::C_BALANCE].clone()])
}

/// Order-Status (clause 2.6.2): `[w, d, c_id | NULL, c_last | NULL]` -> `[c_id, c_balance,
/// o_id, o_carrier_id, lines]`. The customer's latest order comes from the
/// `customer_last_order` index, written by New-Order in the same transaction as the order.
pub(crate) async fn order_status(ctx: Ctx, args: Vec<Value>, base: bool) -> ProcResult {
    let p = ORDER_STATUS_PROC;
    let (w, d) = (Value::Int(arg_int(&args, 0, p)?), Value::Int(arg_int(&args, 1, p)?));
    let c_id = arg_opt_int(&args, 2, p)?;
    let c_last = arg_opt_str(&args, 3, p)?;
    begin(&ctx, base).await?;
    let c = find_customer(&ctx, &w, &d, c_id, c_last).await?;
    let customer = must_read(&ctx, CUSTOMER, &[w.clone(), d.clone(), Value::Int(c)]).await?;
    let last = must_read(&ctx, CUSTOMER_LAST_ORDER, &[w.clone(), d.clone(), Value::Int(c)]).await?;
    let o = last[col::CLO_O_ID].clone();
    let order = must_read(&ctx, ORDERS, &[w.clone(), d.clone(), o.clone()]).await?;
    let lines = ctx.scan_prefix(ORDER_LINE, &[w, d, o.clone()], ORDER_LINES_MAX as u32).await?;
    end(&ctx, base).await?;
    Ok(vec![
        Value::Int(c),
        customer[col::C_BALANCE].clone(),
        o,
        order[col::O_CARRIER_ID].clone(),
        Value::Int(lines.len() as i64),
    ])
}

/// Delivery (clause 2.7.4), in one transaction: `[w, carrier, date]` -> `[orders delivered]`.
///
/// Each district's step delivers the oldest new order `o` only if order `o - 1` exists: a BASE
/// New-Order that has taken id `o - 1` but not yet written its rows would otherwise leave a
/// hole in NEW-ORDER for good (see the module doc). It does not read the district row, so it
/// never waits for, nor blocks, the district's New-Orders and Payments; its NEW-ORDER scan
/// locks only up to the row it returns (next-key narrowing in the engine), not the tail where
/// New-Orders insert. The BASE variant is one alkaline subtransaction per district; two BASE
/// Deliveries of one district take turns on the engine's queue anchor for NEW-ORDER, as ACID
/// ones do (taking turns on the district row instead would stall its New-Orders and
/// Payments behind every BASE Delivery).
pub(crate) async fn delivery(ctx: Ctx, args: Vec<Value>, base: bool) -> ProcResult {
    let p = DELIVERY_PROC;
    let w = arg_int(&args, 0, p)?;
    let carrier = arg_int(&args, 1, p)?;
    let date = arg_int(&args, 2, p)?;
    let mut delivered = 0;
    for d in 1..=DISTRICTS as i64 {
        begin(&ctx, base).await?;
        delivered += i64::from(deliver_district(&ctx, w, d, carrier, date).await?);
        end(&ctx, base).await?;
    }
    Ok(vec![Value::Int(delivered)])
}

/// One district's step of Delivery as its own transaction (clause 2.7.4.1's comment: a
/// Delivery may be done as up to 10 database transactions, [`DELIVERY_DISTRICT_PROC`]): `[w,
/// carrier, date, d]` -> `[orders delivered: 0 or 1]`. A terminal runs it for districts 1 to 10
/// in turn ([`super::Tpcc`]'s `next_step`), so a Delivery holds one district's locks at a time.
pub(crate) async fn delivery_district(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let p = DELIVERY_DISTRICT_PROC;
    let (w, carrier, date, d) =
        (arg_int(&args, 0, p)?, arg_int(&args, 1, p)?, arg_int(&args, 2, p)?, arg_int(&args, 3, p)?);
    if !(1..=DISTRICTS as i64).contains(&d) {
        return Err(bad_arg(p, format!("district must be in 1..={DISTRICTS}, got {d}")));
    }
    Ok(vec![Value::Int(i64::from(deliver_district(&ctx, w, d, carrier, date).await?))])
}

/// Delivers district `d`'s oldest new order, if there is one to deliver: whether it did.
async fn deliver_district(ctx: &Ctx, w: i64, d: i64, carrier: i64, date: i64) -> Result<bool, Error> {
    let (w, d) = (Value::Int(w), Value::Int(d));
    let oldest = ctx.scan_prefix(NEW_ORDER, &[w.clone(), d.clone()], 1).await?;
    let Some(no) = oldest.first() else {
        return Ok(false);
    };
    let o_id = row_int(no, col::NO_O_ID)?;
    let o = Value::Int(o_id);
    if o_id > 1 && ctx.read(ORDERS, &[w.clone(), d.clone(), Value::Int(o_id - 1)]).await?.is_none() {
        // Order o-1 has its id but not its rows yet: a BASE New-Order in flight (see the
        // module doc: delivering `o` now would leave a hole in NEW-ORDER for good).
        return Ok(false);
    }
    ctx.delete(NEW_ORDER, &[w.clone(), d.clone(), o.clone()]).await?;
    let okey = vec![w.clone(), d.clone(), o.clone()];
    ctx.update(ORDERS, &okey, &[("o_carrier_id", Formula::Assign(Value::Int(carrier)))]).await?;
    let order = must_read(ctx, ORDERS, &okey).await?;
    let c = order[col::O_C_ID].clone();
    let lines = ctx.scan_prefix(ORDER_LINE, &okey, ORDER_LINES_MAX as u32).await?;
    let mut sum = Decimal::ZERO;
    let mut ops = Vec::with_capacity(lines.len() + 1);
    for line in &lines {
        sum = sum.checked_add(row_dec(line, col::OL_AMOUNT)?).ok_or_else(|| overflow("sum(ol_amount)"))?;
        let key = vec![w.clone(), d.clone(), o.clone(), line[col::OL_NUMBER].clone()];
        ops.push(update_op(ORDER_LINE, key, &[("ol_delivery_d", Formula::Assign(Value::Int(date)))]));
    }
    ops.push(update_op(
        CUSTOMER,
        vec![w.clone(), d.clone(), c],
        &[("c_balance", Formula::Add(dec(sum))), ("c_delivery_cnt", Formula::Add(Value::Int(1)))],
    ));
    run_all(ctx, ops).await?;
    Ok(true)
}

/// Stock-Level (clause 2.8.2): `[w, d, threshold]` -> `[low stock items]`: distinct items of
/// the district's last 20 orders whose stock at `w` is below the threshold. Starts with the
/// district row (Salt isolation, as Delivery).
pub(crate) async fn stock_level(ctx: Ctx, args: Vec<Value>, base: bool) -> ProcResult {
    let p = STOCK_LEVEL_PROC;
    let (w, d) = (Value::Int(arg_int(&args, 0, p)?), Value::Int(arg_int(&args, 1, p)?));
    let threshold = arg_int(&args, 2, p)?;
    let dkey = [w.clone(), d.clone()];
    let district = if base {
        ctx.alkaline_read(DISTRICT, &dkey).await?.ok_or_else(|| ctx.abort(format!("district {dkey:?} is missing")))?
    } else {
        must_read(&ctx, DISTRICT, &dkey).await?
    };
    let next = row_int(&district, col::D_NEXT_O_ID)?;
    let from = [w.clone(), d.clone(), Value::Int(next - STOCK_LEVEL_ORDERS)];
    let to = [w.clone(), d.clone(), Value::Int(next)];
    let limit = (STOCK_LEVEL_ORDERS as usize * ORDER_LINES_MAX) as u32;
    let scan = Op::Scan { table: ORDER_LINE.into(), start: from.to_vec(), end: Some(to.to_vec()), limit };
    let lines = match if base { ctx.alkaline_op(scan).await? } else { ctx.op(scan).await? } {
        OpResult::Rows(r) => r,
        other => return Err(Error::Internal(format!("scan returned {other:?}"))),
    };
    let mut items: Vec<i64> = lines.iter().map(|l| row_int(l, col::OL_I_ID)).collect::<Result<_, _>>()?;
    items.sort_unstable();
    items.dedup();
    let keys: Vec<Vec<Value>> = items.iter().map(|i| vec![w.clone(), Value::Int(*i)]).collect();
    let stocks = if base {
        // One single-read alkaline subtransaction per stock row: the BASE Stock-Level never
        // holds one lock while waiting for another, so it cannot deadlock with accepted
        // New-Orders (which it could, reading ~200 rows in no particular order).
        let mut rows = Vec::with_capacity(keys.len());
        for k in &keys {
            rows.push(ctx.alkaline_read(STOCK, k).await?);
        }
        rows
    } else {
        read_many(&ctx, STOCK, &keys).await?
    };
    let mut low = 0;
    for s in stocks.iter().flatten() {
        if row_int(s, col::S_QUANTITY)? < threshold {
            low += 1;
        }
    }
    Ok(vec![Value::Int(low)])
}

/// Registers the ten transaction procedures.
pub fn register(registry: &mut Registry) {
    use ColumnType::{Decimal as Dec, Int, String as Str};
    let payment_params = vec![Int, Int, Int, Int, Int, Str, Dec, Int, Int];
    let status_params = vec![Int, Int, Int, Str];
    for (base, opts) in [(false, ProcOptions::default()), (true, ProcOptions::base())] {
        let name = |acid: &str, b: &str| if base { b.to_string() } else { acid.to_string() };
        registry.register_with(
            &name(NEW_ORDER_PROC, NEW_ORDER_BASE_PROC),
            vec![Int; NEW_ORDER_ARGS],
            opts,
            move |ctx, args| new_order(ctx, args, base),
        );
        registry.register_with(
            &name(PAYMENT_PROC, PAYMENT_BASE_PROC),
            payment_params.clone(),
            opts,
            move |ctx, args| payment(ctx, args, base),
        );
        registry.register_with(
            &name(ORDER_STATUS_PROC, ORDER_STATUS_BASE_PROC),
            status_params.clone(),
            opts,
            move |ctx, args| order_status(ctx, args, base),
        );
        registry.register_with(&name(DELIVERY_PROC, DELIVERY_BASE_PROC), vec![Int; 3], opts, move |ctx, args| {
            delivery(ctx, args, base)
        });
        if !base {
            // A BASE Delivery is one alkaline subtransaction per district already.
            registry.register_with(DELIVERY_DISTRICT_PROC, vec![Int; 4], opts, delivery_district);
        }
        // Clause 3.4.0.1: Stock-Level needs only level 1 isolation (no dirty reads) against
        // every transaction; the other four need level 3 among themselves. Its ~200 reads
        // take short-term locks, so it never holds one while waiting for another.
        let stock_level_opts = ProcOptions { isolation: Isolation::ReadCommitted, ..opts };
        registry.register_with(
            &name(STOCK_LEVEL_PROC, STOCK_LEVEL_BASE_PROC),
            vec![Int; 3],
            stock_level_opts,
            move |ctx, args| stock_level(ctx, args, base),
        );
    }
}
