//! The TPC-C consistency conditions (clause 3.3.2.1–3.3.2.12), checked after every run.
//!
//! Each district is checked by one ACID procedure, `tpcc_check_district`, that scans the
//! district's orders, new-orders, order lines, customers and (customer-keyed) history in chunks
//! of [`CHECK_SCAN_ROWS`] and checks what is local to the district: conditions 2–7, 10, 12 and
//! (fresh database) 11. It returns the district's `d_ytd` and its history amounts grouped by
//! the *paying* district `(h_w_id, h_d_id)`, from which the caller checks conditions 8 and 9
//! (history rows live with the customer, who may belong to another warehouse than the one
//! paid). `tpcc_check_warehouse` checks condition 1.
//!
//! The checker runs over a call function (`procedure, args -> values`), so the same code checks
//! a cluster through a [`litmus_client::Client`] and a simulated one through
//! `Simulator::request`. The caller's function should retry retryable errors (a check waiting
//! out a BASE transaction's saline locks dies for wait-die and is re-run).
//!
//! Before checking, [`quiesce`] waits until no BASE transaction is in flight: `tpcc_quiesce(w)`
//! takes ACID write locks on the warehouse's warehouse and district rows (a formula update that
//! adds zero), which conflict with the saline locks every in-flight BASE transaction of this
//! workload holds on one of those rows from its accept to its end (see [`super`]).

use super::schema::{col, *};
use super::{arg_int, arg_opt_int, row_dec, row_int, Scale, DISTRICTS};
use litmus_core::{ColumnType, Decimal, Error, Formula, Row, Value};
use litmus_protocol::procedure::ProcResult;
use litmus_protocol::{Ctx, Registry};
use std::collections::{BTreeMap, BTreeSet};

pub const CHECK_DISTRICT: &str = "tpcc_check_district";
pub const CHECK_WAREHOUSE: &str = "tpcc_check_warehouse";
pub const QUIESCE: &str = "tpcc_quiesce";

/// Rows per scan of a check procedure: a partition answers a scan whole, so its answer must fit
/// a frame (1 MiB by default) even for the widest rows (`tpcc_customer`, up to ~700 bytes
/// encoded): 1,000 rows stay under it, as a page does ([`litmus_protocol::page::PAGE_ROWS_DEFAULT`]).
pub const CHECK_SCAN_ROWS: u32 = litmus_protocol::page::PAGE_ROWS_DEFAULT;
/// Violation messages a district check returns (it counts all of them).
pub const CHECK_MESSAGES_MAX: usize = 8;

/// The conditions a district check covers besides 11.
pub const CONDITIONS: &str = "3.3.2.1-3.3.2.10, 3.3.2.12";

/// A call of a stored procedure: the checker's only way to the database.
pub type Call<'a> = dyn FnMut(&str, Vec<Value>) -> Result<Vec<Value>, Error> + 'a;

/// Every row of `table` in district `(w, d)` (keys `(w, d, ...)` with an Int last key column,
/// `key_len` key columns), in key order, [`CHECK_SCAN_ROWS`] at a time.
async fn scan_district(ctx: &Ctx, table: &str, w: i64, d: i64, key_len: usize) -> Result<Vec<Row>, Error> {
    let end = [Value::Int(w), Value::Int(d + 1)];
    let mut start = vec![Value::Int(w), Value::Int(d)];
    let mut out = Vec::new();
    loop {
        let rows = ctx.scan(table, &start, Some(&end), CHECK_SCAN_ROWS).await?;
        let n = rows.len();
        if let Some(last) = rows.last() {
            start = last[..key_len].to_vec();
            let k = row_int(last, key_len - 1)?;
            start[key_len - 1] = Value::Int(k + 1);
        }
        out.extend(rows);
        if n < CHECK_SCAN_ROWS as usize {
            return Ok(out);
        }
    }
}

struct Violations {
    count: i64,
    messages: Vec<String>,
}

impl Violations {
    fn add(&mut self, msg: impl FnOnce() -> String) {
        self.count += 1;
        if self.messages.len() < CHECK_MESSAGES_MAX {
            self.messages.push(msg());
        }
    }
}

fn sum(a: Decimal, b: Decimal) -> Decimal {
    Decimal(a.0.saturating_add(b.0))
}

/// `tpcc_check_district(w, d, fresh_delivered | NULL)` -> `[d_ytd, violations, orders, lines,
/// customers, n, message_1..message_n, (h_w_id, h_d_id, sum(h_amount))...]`. With
/// `fresh_delivered`, also condition 11: orders - new-orders = fresh_delivered.
pub(crate) async fn check_district(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let p = CHECK_DISTRICT;
    let (w, d) = (arg_int(&args, 0, p)?, arg_int(&args, 1, p)?);
    let fresh_delivered = arg_opt_int(&args, 2, p)?;
    let at = format!("warehouse {w} district {d}");
    let mut v = Violations { count: 0, messages: Vec::new() };

    let district = ctx.read(DISTRICT, &[Value::Int(w), Value::Int(d)]).await?;
    let Some(district) = district else {
        return Ok(vec![
            Value::Decimal(Decimal::ZERO),
            Value::Int(1),
            Value::Int(0),
            Value::Int(0),
            Value::Int(0),
            Value::Int(1),
            Value::String(format!("{at}: the district row is missing").into()),
        ]);
    };
    let next_o_id = row_int(&district, col::D_NEXT_O_ID)?;
    let d_ytd = row_dec(&district, col::D_YTD)?;

    // order id -> (customer, carrier is null, ol_cnt)
    let mut orders: BTreeMap<i64, (i64, bool, i64)> = BTreeMap::new();
    for o in scan_district(&ctx, ORDERS, w, d, 3).await? {
        let carrier_null = o[col::O_CARRIER_ID].is_null();
        orders.insert(row_int(&o, col::O_ID)?, (row_int(&o, col::O_C_ID)?, carrier_null, row_int(&o, col::O_OL_CNT)?));
    }
    let new_orders: BTreeSet<i64> = scan_district(&ctx, NEW_ORDER, w, d, 3)
        .await?
        .iter()
        .map(|r| row_int(r, col::NO_O_ID))
        .collect::<Result<_, _>>()?;
    let lines = scan_district(&ctx, ORDER_LINE, w, d, 4).await?;

    check_order_ids(&orders, &new_orders, next_o_id, &at, &mut v);
    let delivered = check_orders_and_lines(&orders, &new_orders, &lines, &at, &mut v)?;
    // 3.3.2.11 (fresh database only)
    if let Some(expected) = fresh_delivered {
        let diff = orders.len() as i64 - new_orders.len() as i64;
        if diff != expected {
            v.add(|| format!("3.3.2.11 at {at}: count(order) - count(new-order) = {diff}, expected {expected}"));
        }
    }
    let (paid, by_payer) = history_sums(&scan_district(&ctx, HISTORY, w, d, 4).await?)?;
    // 3.3.2.10 and 3.3.2.12
    let customers = scan_district(&ctx, CUSTOMER, w, d, 3).await?;
    check_customers(&customers, &delivered, &paid, &at, &mut v)?;

    let mut out = vec![
        Value::Decimal(d_ytd),
        Value::Int(v.count),
        Value::Int(orders.len() as i64),
        Value::Int(lines.len() as i64),
        Value::Int(customers.len() as i64),
        Value::Int(v.messages.len() as i64),
    ];
    out.extend(v.messages.into_iter().map(Value::from));
    for ((hw, hd), s) in by_payer {
        out.extend([Value::Int(hw), Value::Int(hd), Value::Decimal(s)]);
    }
    Ok(out)
}

/// 3.3.2.2 and 3.3.2.3: the district's next order id against its orders and new-orders.
fn check_order_ids(
    orders: &BTreeMap<i64, (i64, bool, i64)>,
    new_orders: &BTreeSet<i64>,
    next_o_id: i64,
    at: &str,
    v: &mut Violations,
) {
    // 3.3.2.2
    let max_o = orders.keys().next_back().copied();
    if max_o.unwrap_or(0) != next_o_id - 1 {
        v.add(|| format!("3.3.2.2 at {at}: d_next_o_id - 1 = {} but max(o_id) = {max_o:?}", next_o_id - 1));
    }
    if let (Some(&min_no), Some(&max_no)) = (new_orders.first(), new_orders.last()) {
        if max_no != next_o_id - 1 {
            v.add(|| format!("3.3.2.2 at {at}: d_next_o_id - 1 = {} but max(no_o_id) = {max_no}", next_o_id - 1));
        }
        // 3.3.2.3
        let count = new_orders.len() as i64;
        if max_no - min_no + 1 != count {
            v.add(|| {
                format!(
                    "3.3.2.3 at {at}: max(no_o_id) - min(no_o_id) + 1 = {} but {count} new-order rows",
                    max_no - min_no + 1
                )
            });
        }
    }
}

/// 3.3.2.4 to 3.3.2.7 over a district's orders (order id -> customer, carrier is null,
/// ol_cnt), new-orders and order lines; returns the delivered amount per customer (for 3.3.2.10
/// and 3.3.2.12).
fn check_orders_and_lines(
    orders: &BTreeMap<i64, (i64, bool, i64)>,
    new_orders: &BTreeSet<i64>,
    lines: &[Row],
    at: &str,
    v: &mut Violations,
) -> Result<BTreeMap<i64, Decimal>, Error> {
    // 3.3.2.4
    let ol_cnt_sum: i64 = orders.values().map(|o| o.2).sum();
    if ol_cnt_sum != lines.len() as i64 {
        v.add(|| format!("3.3.2.4 at {at}: sum(o_ol_cnt) = {ol_cnt_sum} but {} order-line rows", lines.len()));
    }
    // 3.3.2.5
    for (o_id, (_, carrier_null, _)) in orders {
        if *carrier_null != new_orders.contains(o_id) {
            v.add(|| {
                format!(
                    "3.3.2.5 at {at}: order {o_id} has carrier null = {carrier_null} but a new-order row = {}",
                    new_orders.contains(o_id)
                )
            });
        }
    }
    for o_id in new_orders.iter().filter(|o| !orders.contains_key(o)) {
        v.add(|| format!("3.3.2.5 at {at}: new-order row {o_id} has no order"));
    }
    // 3.3.2.6, 3.3.2.7, and the delivered amounts per customer for 10 and 12.
    let mut line_counts: BTreeMap<i64, i64> = BTreeMap::new();
    let mut delivered: BTreeMap<i64, Decimal> = BTreeMap::new();
    for l in lines {
        let o_id = row_int(l, col::OL_O_ID)?;
        *line_counts.entry(o_id).or_default() += 1;
        let delivery_null = l[col::OL_DELIVERY_D].is_null();
        match orders.get(&o_id) {
            None => v.add(|| format!("3.3.2.6 at {at}: order line {o_id}/{} has no order", l[col::OL_NUMBER])),
            Some((c, carrier_null, _)) => {
                if delivery_null != *carrier_null {
                    v.add(|| {
                        format!(
                            "3.3.2.7 at {at}: order {o_id} line {}: ol_delivery_d null = {delivery_null} \
                        but o_carrier_id null = {carrier_null}",
                            l[col::OL_NUMBER]
                        )
                    });
                }
                if !delivery_null {
                    let e = delivered.entry(*c).or_insert(Decimal::ZERO);
                    *e = sum(*e, row_dec(l, col::OL_AMOUNT)?);
                }
            }
        }
    }
    for (o_id, (_, _, ol_cnt)) in orders {
        let n = line_counts.get(o_id).copied().unwrap_or(0);
        if n != *ol_cnt {
            v.add(|| format!("3.3.2.6 at {at}: order {o_id} has o_ol_cnt = {ol_cnt} but {n} order lines"));
        }
    }
    Ok(delivered)
}

/// A district's history rows summed per customer, and per paying (warehouse, district).
#[allow(clippy::type_complexity)] // two maps, named at the one call
fn history_sums(rows: &[Row]) -> Result<(BTreeMap<i64, Decimal>, BTreeMap<(i64, i64), Decimal>), Error> {
    let mut paid: BTreeMap<i64, Decimal> = BTreeMap::new();
    let mut by_payer: BTreeMap<(i64, i64), Decimal> = BTreeMap::new();
    for h in rows {
        let amount = row_dec(h, col::H_AMOUNT)?;
        let e = paid.entry(row_int(h, col::H_C_ID)?).or_insert(Decimal::ZERO);
        *e = sum(*e, amount);
        let e = by_payer.entry((row_int(h, col::H_W_ID)?, row_int(h, col::H_D_ID)?)).or_insert(Decimal::ZERO);
        *e = sum(*e, amount);
    }
    Ok((paid, by_payer))
}

/// 3.3.2.10 and 3.3.2.12: each customer's balance and year-to-date payment against what was
/// delivered to it and what it paid.
fn check_customers(
    customers: &[Row],
    delivered: &BTreeMap<i64, Decimal>,
    paid: &BTreeMap<i64, Decimal>,
    at: &str,
    v: &mut Violations,
) -> Result<(), Error> {
    for cu in customers {
        let c = row_int(cu, col::C_ID)?;
        let balance = row_dec(cu, col::C_BALANCE)?;
        let ytd = row_dec(cu, col::C_YTD_PAYMENT)?;
        let del = delivered.get(&c).copied().unwrap_or(Decimal::ZERO);
        let hist = paid.get(&c).copied().unwrap_or(Decimal::ZERO);
        if balance != Decimal(del.0 - hist.0) {
            v.add(|| {
                format!(
                    "3.3.2.10 at {at}: customer {c}: c_balance = {balance} but delivered sum(ol_amount) \
                {del} - sum(h_amount) {hist} = {}",
                    Decimal(del.0 - hist.0)
                )
            });
        }
        if sum(balance, ytd) != del {
            v.add(|| {
                format!(
                    "3.3.2.12 at {at}: customer {c}: c_balance + c_ytd_payment = {} but delivered \
                sum(ol_amount) = {del}",
                    sum(balance, ytd)
                )
            });
        }
    }
    Ok(())
}

/// `tpcc_check_warehouse(w)` -> `[w_ytd, sum(d_ytd), districts]`.
pub(crate) async fn check_warehouse(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let w = arg_int(&args, 0, CHECK_WAREHOUSE)?;
    let warehouse = ctx.read(WAREHOUSE, &[Value::Int(w)]).await?;
    let w_ytd = match &warehouse {
        Some(r) => Value::Decimal(row_dec(r, col::W_YTD)?),
        None => Value::Null,
    };
    let districts = ctx.scan_prefix(DISTRICT, &[Value::Int(w)], DISTRICTS as u32 + 1).await?;
    let mut total = Decimal::ZERO;
    for r in &districts {
        total = sum(total, row_dec(r, col::D_YTD)?);
    }
    Ok(vec![w_ytd, Value::Decimal(total), Value::Int(districts.len() as i64)])
}

/// `tpcc_quiesce(w)`: write-locks (adding zero) the warehouse row and its district rows, so it
/// commits only when no BASE transaction holding saline locks on them is in flight.
async fn quiesce_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let w = Value::Int(arg_int(&args, 0, QUIESCE)?);
    let zero = Formula::Add(Value::Decimal(Decimal::ZERO));
    ctx.update(WAREHOUSE, std::slice::from_ref(&w), &[("w_ytd", zero.clone())]).await?;
    for d in 1..=DISTRICTS as i64 {
        ctx.update(DISTRICT, &[w.clone(), Value::Int(d)], &[("d_ytd", zero.clone())]).await?;
    }
    Ok(vec![])
}

pub fn register(registry: &mut Registry) {
    registry.register(CHECK_DISTRICT, vec![ColumnType::Int; 3], check_district);
    registry.register(CHECK_WAREHOUSE, vec![ColumnType::Int], check_warehouse);
    registry.register(QUIESCE, vec![ColumnType::Int], quiesce_body);
}

/// What a successful check covered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckSummary {
    pub warehouses: u64,
    pub districts: u64,
    pub orders: u64,
    pub order_lines: u64,
    pub customers: u64,
    /// Whether 3.3.2.11 (fresh database) was checked.
    pub fresh: bool,
}

impl std::fmt::Display for CheckSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let eleven = if self.fresh { " and 3.3.2.11 (fresh database)" } else { "" };
        write!(
            f,
            "TPC-C consistency conditions {CONDITIONS}{eleven} hold: {} warehouses, {} districts, {} orders, {} order \
             lines, {} customers",
            self.warehouses, self.districts, self.orders, self.order_lines, self.customers
        )
    }
}

/// Waits for in-flight BASE transactions to finish (see the module doc).
pub fn quiesce(call: &mut Call<'_>, scale: &Scale) -> Result<(), Error> {
    for w in 1..=scale.warehouses {
        call(QUIESCE, vec![Value::Int(w as i64)])?;
    }
    Ok(())
}

fn int_at(out: &[Value], i: usize) -> anyhow::Result<i64> {
    out.get(i).and_then(Value::as_int).ok_or_else(|| anyhow::anyhow!("check returned {out:?}: no int at {i}"))
}

fn dec_at(out: &[Value], i: usize) -> anyhow::Result<Decimal> {
    out.get(i).and_then(Value::as_decimal).ok_or_else(|| anyhow::anyhow!("check returned {out:?}: no decimal at {i}"))
}

/// Checks every condition over the whole database (after [`quiesce`]); `fresh`: also 3.3.2.11.
/// `Err` names every violated condition with warehouse, district and values.
pub fn check(call: &mut Call<'_>, scale: &Scale, fresh: bool) -> anyhow::Result<CheckSummary> {
    let mut problems: Vec<String> = Vec::new();
    let mut summary = CheckSummary { warehouses: scale.warehouses, fresh, ..CheckSummary::default() };
    let mut d_ytd: BTreeMap<(i64, i64), Decimal> = BTreeMap::new();
    let mut paid: BTreeMap<(i64, i64), Decimal> = BTreeMap::new();
    let mut w_ytd: BTreeMap<i64, Decimal> = BTreeMap::new();
    let fresh_arg =
        if fresh { Value::Int(scale.customers as i64 - scale.new_orders_initial() as i64) } else { Value::Null };
    for w in 1..=scale.warehouses as i64 {
        let out = call(CHECK_WAREHOUSE, vec![Value::Int(w)])?;
        let (Some(wy), total, n) = (out.first().and_then(Value::as_decimal), dec_at(&out, 1)?, int_at(&out, 2)?) else {
            problems.push(format!("warehouse {w} is missing"));
            continue;
        };
        w_ytd.insert(w, wy);
        if n != DISTRICTS as i64 {
            problems.push(format!("warehouse {w} has {n} districts, expected {DISTRICTS}"));
        }
        if wy != total {
            problems.push(format!("3.3.2.1 at warehouse {w}: w_ytd = {wy} but sum(d_ytd) = {total}"));
        }
        for d in 1..=DISTRICTS as i64 {
            let out = call(CHECK_DISTRICT, vec![Value::Int(w), Value::Int(d), fresh_arg.clone()])?;
            d_ytd.insert((w, d), dec_at(&out, 0)?);
            let violations = int_at(&out, 1)?;
            summary.districts += 1;
            summary.orders += int_at(&out, 2)? as u64;
            summary.order_lines += int_at(&out, 3)? as u64;
            summary.customers += int_at(&out, 4)? as u64;
            let n = int_at(&out, 5)? as usize;
            let messages = out.get(6..6 + n).ok_or_else(|| anyhow::anyhow!("check returned {out:?}"))?;
            problems.extend(messages.iter().map(|m| m.as_str().unwrap_or("?").to_string()));
            if violations > n as i64 {
                problems.push(format!("... and {} more at warehouse {w} district {d}", violations - n as i64));
            }
            for t in out[6 + n..].chunks(3) {
                let key = (int_at(t, 0)?, int_at(t, 1)?);
                let e = paid.entry(key).or_insert(Decimal::ZERO);
                *e = sum(*e, dec_at(t, 2)?);
            }
        }
    }
    // 3.3.2.8 and 3.3.2.9
    for (&w, &wy) in &w_ytd {
        let h: Decimal = paid.iter().filter(|((hw, _), _)| *hw == w).fold(Decimal::ZERO, |acc, (_, s)| sum(acc, *s));
        if h != wy {
            problems.push(format!("3.3.2.8 at warehouse {w}: w_ytd = {wy} but sum(h_amount) = {h}"));
        }
    }
    for (&(w, d), &dy) in &d_ytd {
        let h = paid.get(&(w, d)).copied().unwrap_or(Decimal::ZERO);
        if h != dy {
            problems.push(format!("3.3.2.9 at warehouse {w} district {d}: d_ytd = {dy} but sum(h_amount) = {h}"));
        }
    }
    for (w, d) in paid.keys().filter(|k| !d_ytd.contains_key(k)) {
        problems.push(format!("history names paying district ({w}, {d}), which does not exist"));
    }
    if problems.is_empty() {
        Ok(summary)
    } else {
        anyhow::bail!("TPC-C consistency check FAILED ({} problem(s)): {}", problems.len(), problems.join("; "))
    }
}
