//! Ticketing's stored procedures: the 11 booking transactions (and their BASE variants), the
//! load procedures and the chunked dump `verify` reads.

use super::*;

/// Registers every ticketing procedure.
pub(super) fn register(registry: &mut Registry) {
    let base = ProcOptions::base();
    let display = ProcOptions { isolation: Isolation::ReadUncommitted, ..ProcOptions::default() };
    let i = || ColumnType::Int;
    registry.register_with(PROC_BROWSE, vec![], display, browse_body);
    registry.register_with(PROC_SEAT_MAP, vec![i(), i()], display, seat_map_body);
    registry.register_with(PROC_AVAILABILITY, vec![i()], display, availability_body);
    registry.register(PROC_CREATE, vec![i(), i(), i()], create_order_body);
    registry.register_with(PROC_CREATE_BASE, vec![i(), i(), i()], base, create_order_body);
    registry.register(PROC_ADD_CUSTOMER, vec![i(), i(), i()], add_customer_body);
    registry.register(PROC_PAYMENT, vec![i(), i()], payment_body);
    registry.register(PROC_CONFIRM, vec![i(), i()], confirm_body);
    registry.register(PROC_ISSUE, vec![i(), i()], issue_body);
    registry.register(PROC_CANCEL, vec![i(), i()], cancel_body);
    registry.register_with(PROC_CANCEL_BASE, vec![i(), i()], base, cancel_body);
    registry.register(PROC_EXPIRE, vec![i()], expire_body);
    registry.register_with(PROC_EXPIRE_BASE, vec![i()], base, expire_body);
    registry.register(PROC_DELETE, vec![i(), i()], delete_body);
    registry.register(PROC_LOAD_EVENT, vec![i()], load_event_body);
    registry.register(PROC_LOAD_SEATS, vec![i(), i(), i()], load_seats_body);
    registry.register(PROC_DUMP, vec![i(), i(), i()], dump_body);
}

fn int_arg(args: &[Value], i: usize, procedure: &str) -> Result<i64, Error> {
    args.get(i).and_then(Value::as_int).ok_or_else(|| {
        InvalidInput::WrongType {
            what: format!("argument {i} of {procedure}"),
            expected: "int".into(),
            got: args.get(i).map_or("nothing".into(), Value::type_name),
        }
        .into()
    })
}

fn ranged_arg(args: &[Value], i: usize, procedure: &str, range: std::ops::Range<i64>) -> Result<i64, Error> {
    let v = int_arg(args, i, procedure)?;
    if !range.contains(&v) {
        return Err(InvalidInput::Config(format!("{procedure}: argument {i} must be in {range:?}, got {v}")).into());
    }
    Ok(v)
}

/// Issues every op at once and awaits them in order.
async fn all(ctx: &Ctx, ops: Vec<Op>) -> Result<Vec<OpResult>, Error> {
    let futures: Vec<_> = ops.into_iter().map(|op| ctx.op(op)).collect();
    let mut out = Vec::with_capacity(futures.len());
    for f in futures {
        out.push(f.await?);
    }
    Ok(out)
}

fn read_op(table: &str, key: i64) -> Op {
    Op::Read { table: table.into(), key: vec![int(key)] }
}

fn category_of(row: Option<Row>, cat: i64) -> Result<CategoryRow, Error> {
    let row = row.ok_or_else(|| Error::Internal(format!("{CATEGORY} row {cat} is missing")))?;
    CategoryRow::from_row(&row)
}

/// The pick-th oldest order of `session` in queue `state` (fewer: the newest), with its
/// row; `None` when the session has none in that state.
async fn pick_order(ctx: &Ctx, state: i64, session: i64, pick: i64) -> Result<Option<OrderRow>, Error> {
    let entries = ctx.scan_prefix(QUEUE, &[int(state), int(session)], QUEUE_PICK_MAX as u32).await?;
    let Some(entry) = entries.get((pick as usize).min(entries.len().saturating_sub(1))) else {
        return Ok(None);
    };
    let order_id = ints(entry, 3, QUEUE)?[2];
    let row = ctx.read(ORDER, &[int(order_id)]).await?;
    let order = row.as_deref().map(OrderRow::from_row).transpose()?;
    match order {
        Some(o) if o.state == state && o.session == session => Ok(Some(o)),
        other => Err(ctx.abort(format!("queue {state} lists order {order_id}, but the order is {other:?}"))),
    }
}

/// Moves `order` from its queue to `to`'s and writes it with state `to`.
async fn advance(ctx: &Ctx, mut order: OrderRow, to: i64) -> Result<(), Error> {
    let b = order.session;
    let from = order.state;
    order.state = to;
    all(
        ctx,
        vec![
            Op::Delete { table: QUEUE.into(), key: vec![int(from), int(b), int(order.order_id)] },
            Op::Insert { table: QUEUE.into(), row: vec![int(to), int(b), int(order.order_id)].into() },
            Op::Write { table: ORDER.into(), row: order.to_row().into() },
        ],
    )
    .await?;
    Ok(())
}

/// Checks that every seat of `order` is in state `expected` and held by it; returns the seat ids.
async fn held_seats(ctx: &Ctx, order: &OrderRow, capacity: i64, expected: i64) -> Result<Vec<i64>, Error> {
    let ids = order.seat_ids(capacity);
    let rows = all(ctx, ids.iter().map(|s| read_op(SEAT, *s)).collect()).await?;
    for (s, r) in ids.iter().zip(rows) {
        let ok = match r {
            OpResult::Row(Some(row)) => {
                let v = ints(&row, 4, SEAT)?;
                v[2] == expected && v[3] == order.order_id
            }
            _ => false,
        };
        if !ok {
            return Err(ctx.abort(format!("seat {s} of order {} is not held by it (invariant broken)", order.order_id)));
        }
    }
    Ok(ids)
}

fn seat_row(seat: i64, cat: i64, state: i64, order: i64) -> Vec<Value> {
    vec![int(seat), int(cat), int(state), int(order)]
}

/// The capacity of a category, from the event row (static: read locks only, no contention).
async fn capacity_of(ctx: &Ctx) -> Result<i64, Error> {
    let row =
        ctx.read(EVENT, &[int(EVENT_ID)]).await?.ok_or_else(|| Error::Internal(format!("{EVENT} row missing")))?;
    Ok(ints(&row, 3, EVENT)?[2])
}

/// `tk_browse_events() -> [event_id, categories, seats_per_category]`.
async fn browse_body(ctx: Ctx, _args: Vec<Value>) -> ProcResult {
    let row = ctx.read(EVENT, &[int(EVENT_ID)]).await?;
    Ok(row.unwrap_or_default().into_vec())
}

/// `tk_seat_map(first_seat_id, count) -> [free seats in the window]`.
async fn seat_map_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let first = int_arg(&args, 0, PROC_SEAT_MAP)?;
    let count = ranged_arg(&args, 1, PROC_SEAT_MAP, 1..SEAT_MAP_SEATS + 1)?;
    let rows = ctx.scan(SEAT, &[int(first)], Some(&[int(first + count)]), count as u32).await?;
    let free = rows.iter().filter(|r| r.get(2).and_then(Value::as_int) == Some(SEAT_FREE)).count();
    Ok(vec![int(free as i64)])
}

/// `tk_check_availability(cat) -> [free]`.
async fn availability_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let cat = ranged_arg(&args, 0, PROC_AVAILABILITY, 0..CATEGORIES)?;
    let c = category_of(ctx.read(CATEGORY, &[int(cat)]).await?, cat)?;
    Ok(vec![int(c.free)])
}

/// `tk_create_order(cat, k) -> [order_id]` (`[]` when its seats were taken). See the module doc
/// for the alkaline subtransactions.
async fn create_order_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let cat = ranged_arg(&args, 0, PROC_CREATE, 0..CATEGORIES)?;
    let k = ranged_arg(&args, 1, PROC_CREATE, 1..ORDER_SEATS_MAX + 1)?;
    let session = ranged_arg(&args, 2, PROC_CREATE, 0..SESSIONS)?;
    let cat_key = [int(cat)];

    // Alkaline 1: the contended counter update, as short as possible.
    ctx.begin_alkaline().await?;
    let reserve =
        [("free", Formula::Add(int(-k))), ("cursor", Formula::Add(int(k))), ("next_order", Formula::Add(int(1)))];
    ctx.update(CATEGORY, &cat_key, &reserve).await?;
    let c = category_of(ctx.read(CATEGORY, &cat_key).await?, cat)?;
    if c.free < 0 {
        // Before accept: the whole (BASE or ACID) transaction aborts, the counters are untouched.
        return Err(ctx.abort(SOLD_OUT));
    }
    ctx.end_alkaline().await?;

    let order = OrderRow {
        order_id: (c.next_order - 1) * CATEGORIES + cat,
        cat,
        first_pos: (c.cursor - k).rem_euclid(c.capacity),
        seats: k,
        state: ORDER_RESERVED,
        customer: NO_ORDER,
        amount: 0,
        session,
    };
    // Alkaline 2: claim the seats at the cursor if they are all free, and record the order.
    let claimed = async {
        ctx.begin_alkaline().await?;
        // One statement at a time, as Fusion Ticket's placement code issues them: a read per
        // seat, then a write per seat, the order and its queue entry. Under ACID the category
        // row stays locked throughout.
        let ids = order.seat_ids(c.capacity);
        let mut all_free = true;
        for s in &ids {
            let row = ctx.read(SEAT, &[int(*s)]).await?;
            if row.and_then(|r| r.get(2).and_then(Value::as_int)) != Some(SEAT_FREE) {
                all_free = false;
                break;
            }
        }
        if all_free {
            for s in &ids {
                ctx.write(SEAT, seat_row(*s, cat, SEAT_RESERVED, order.order_id)).await?;
            }
            ctx.insert(ORDER, order.to_row()).await?;
            ctx.insert(QUEUE, vec![int(ORDER_RESERVED), int(session), int(order.order_id)]).await?;
        }
        ctx.end_alkaline().await?;
        Ok::<bool, Error>(all_free)
    }
    .await;
    match claimed {
        Ok(true) => Ok(vec![int(order.order_id)]),
        // Concurrency control aborted it: an ACID transaction is retried whole; an accepted BASE
        // one is re-run by its coordinator.
        Err(e) if e.is_retryable() => Err(e),
        failed => {
            // Alkaline 3: compensate — the seats go back to the counter (the cursor moves on).
            ctx.begin_alkaline().await?;
            ctx.update(CATEGORY, &cat_key, &[("free", Formula::Add(int(k)))]).await?;
            ctx.end_alkaline().await?;
            failed.map(|_| vec![])
        }
    }
}

/// `tk_add_customer(session, pick, customer_id) -> [acted]`.
async fn add_customer_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let session = ranged_arg(&args, 0, PROC_ADD_CUSTOMER, 0..SESSIONS)?;
    let pick = ranged_arg(&args, 1, PROC_ADD_CUSTOMER, 0..QUEUE_PICK_MAX)?;
    let customer = ranged_arg(&args, 2, PROC_ADD_CUSTOMER, 0..CUSTOMERS)?;
    let Some(mut order) = pick_order(&ctx, ORDER_RESERVED, session, pick).await? else {
        return Ok(vec![int(0)]);
    };
    let orders = match ctx.read(CUSTOMER, &[int(customer)]).await? {
        Some(row) => ints(&row, 2, CUSTOMER)?[1],
        None => 0,
    };
    ctx.write(CUSTOMER, vec![int(customer), int(orders + 1)]).await?;
    order.customer = customer;
    advance(&ctx, order, ORDER_CUSTOMER).await?;
    Ok(vec![int(1)])
}

/// `tk_payment(session, pick) -> [acted]`: seats sold, tickets created, order paid.
async fn payment_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let session = ranged_arg(&args, 0, PROC_PAYMENT, 0..SESSIONS)?;
    let pick = ranged_arg(&args, 1, PROC_PAYMENT, 0..QUEUE_PICK_MAX)?;
    let Some(mut order) = pick_order(&ctx, ORDER_CUSTOMER, session, pick).await? else {
        return Ok(vec![int(0)]);
    };
    let capacity = capacity_of(&ctx).await?;
    let ids = held_seats(&ctx, &order, capacity, SEAT_RESERVED).await?;
    let mut writes = Vec::with_capacity(2 * ids.len());
    for s in &ids {
        writes.push(Op::Write { table: SEAT.into(), row: seat_row(*s, order.cat, SEAT_SOLD, order.order_id).into() });
        writes.push(Op::Insert { table: TICKET.into(), row: vec![int(order.order_id), int(*s), int(0)].into() });
    }
    all(&ctx, writes).await?;
    order.amount = order.seats * PRICES_BY_CATEGORY[order.cat as usize];
    advance(&ctx, order, ORDER_PAID).await?;
    Ok(vec![int(1)])
}

/// `tk_confirm(session, pick) -> [acted]`.
async fn confirm_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let session = ranged_arg(&args, 0, PROC_CONFIRM, 0..SESSIONS)?;
    let pick = ranged_arg(&args, 1, PROC_CONFIRM, 0..QUEUE_PICK_MAX)?;
    let Some(order) = pick_order(&ctx, ORDER_PAID, session, pick).await? else {
        return Ok(vec![int(0)]);
    };
    advance(&ctx, order, ORDER_CONFIRMED).await?;
    Ok(vec![int(1)])
}

/// `tk_issue_tickets(session, pick) -> [acted]`: every ticket of the order marked issued.
async fn issue_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let session = ranged_arg(&args, 0, PROC_ISSUE, 0..SESSIONS)?;
    let pick = ranged_arg(&args, 1, PROC_ISSUE, 0..QUEUE_PICK_MAX)?;
    let Some(order) = pick_order(&ctx, ORDER_CONFIRMED, session, pick).await? else {
        return Ok(vec![int(0)]);
    };
    let tickets = ctx.scan_prefix(TICKET, &[int(order.order_id)], ORDER_SEATS_MAX as u32 + 1).await?;
    if tickets.len() as i64 != order.seats {
        return Err(ctx.abort(format!(
            "order {} has {} tickets for {} seats (invariant broken)",
            order.order_id,
            tickets.len(),
            order.seats
        )));
    }
    let mut writes = Vec::with_capacity(tickets.len());
    for t in &tickets {
        let v = ints(t, 3, TICKET)?;
        writes.push(Op::Write { table: TICKET.into(), row: vec![int(v[0]), int(v[1]), int(1)].into() });
    }
    all(&ctx, writes).await?;
    advance(&ctx, order, ORDER_ISSUED).await?;
    Ok(vec![int(1)])
}

/// Removes a live order in `state` and returns its seats: alkaline 1 deletes the order (and
/// its tickets) and its queue entry, alkaline 2 frees the seats, alkaline 3 is the contended
/// `free += k`. As an ACID procedure the boundaries are no-ops.
async fn release(ctx: &Ctx, state: i64, session: i64, pick: i64, seat_state: i64) -> ProcResult {
    ctx.begin_alkaline().await?;
    let Some(order) = pick_order(ctx, state, session, pick).await? else {
        ctx.end_alkaline().await?;
        return Ok(vec![int(0)]);
    };
    let capacity = capacity_of(ctx).await?;
    let mut deletes = vec![
        Op::Delete { table: ORDER.into(), key: vec![int(order.order_id)] },
        Op::Delete { table: QUEUE.into(), key: vec![int(state), int(session), int(order.order_id)] },
    ];
    if seat_state == SEAT_SOLD {
        for s in order.seat_ids(capacity) {
            deletes.push(Op::Delete { table: TICKET.into(), key: vec![int(order.order_id), int(s)] });
        }
    }
    all(ctx, deletes).await?;
    ctx.end_alkaline().await?;

    ctx.begin_alkaline().await?;
    let ids = held_seats(ctx, &order, capacity, seat_state).await?;
    let frees = ids
        .iter()
        .map(|s| Op::Write { table: SEAT.into(), row: seat_row(*s, order.cat, SEAT_FREE, NO_ORDER).into() })
        .collect();
    all(ctx, frees).await?;
    ctx.end_alkaline().await?;

    ctx.alkaline_update(CATEGORY, &[int(order.cat)], &[("free", Formula::Add(int(order.seats)))]).await?;
    Ok(vec![int(1)])
}

/// `tk_cancel_order(session, pick) -> [acted]`: a checked-out (CUSTOMER) order is cancelled.
async fn cancel_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let session = ranged_arg(&args, 0, PROC_CANCEL, 0..SESSIONS)?;
    let pick = ranged_arg(&args, 1, PROC_CANCEL, 0..QUEUE_PICK_MAX)?;
    release(&ctx, ORDER_CUSTOMER, session, pick, SEAT_RESERVED).await
}

/// `tk_expire_reservations(session) -> [acted]`: the session's oldest RESERVED order expires.
async fn expire_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let session = ranged_arg(&args, 0, PROC_EXPIRE, 0..SESSIONS)?;
    release(&ctx, ORDER_RESERVED, session, 0, SEAT_RESERVED).await
}

/// `tk_delete_order(session, pick) -> [acted]` (administrative, ACID): an ISSUED order is deleted
/// with its tickets and its seats return to the pool.
async fn delete_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let session = ranged_arg(&args, 0, PROC_DELETE, 0..SESSIONS)?;
    let pick = ranged_arg(&args, 1, PROC_DELETE, 0..QUEUE_PICK_MAX)?;
    release(&ctx, ORDER_ISSUED, session, pick, SEAT_SOLD).await
}

/// `tk_load_event(seats_per_category)`: the event and category rows (overwrites: idempotent).
async fn load_event_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let capacity =
        ranged_arg(&args, 0, PROC_LOAD_EVENT, SEATS_PER_CATEGORY_MIN as i64..SEATS_PER_CATEGORY_MAX as i64 + 1)?;
    let mut writes =
        vec![Op::Write { table: EVENT.into(), row: vec![int(EVENT_ID), int(CATEGORIES), int(capacity)].into() }];
    for cat in 0..CATEGORIES {
        writes.push(Op::Write {
            table: CATEGORY.into(),
            row: vec![int(cat), int(capacity), int(capacity), int(0), int(0)].into(),
        });
    }
    all(&ctx, writes).await?;
    Ok(vec![])
}

/// `tk_load_seats(start, count, seats_per_category)`: free seats `start..start+count` (global
/// seat ids; overwrites: idempotent).
async fn load_seats_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let capacity =
        ranged_arg(&args, 2, PROC_LOAD_SEATS, SEATS_PER_CATEGORY_MIN as i64..SEATS_PER_CATEGORY_MAX as i64 + 1)?;
    let start = ranged_arg(&args, 0, PROC_LOAD_SEATS, 0..CATEGORIES * capacity)?;
    let count = ranged_arg(&args, 1, PROC_LOAD_SEATS, 0..LOAD_BATCH_SEATS as i64 + 1)?;
    let end = (start + count).min(CATEGORIES * capacity);
    let writes = (start..end)
        .map(|s| Op::Write { table: SEAT.into(), row: seat_row(s, s / capacity, SEAT_FREE, NO_ORDER).into() })
        .collect();
    all(&ctx, writes).await?;
    Ok(vec![int(end - start)])
}

/// `tk_dump(table_code, start, end) -> [row_0 ..., row_1 ..., ...]`: every row of table
/// `DUMP_TABLES[code]` whose first key column is in `start..end` (at most [`DUMP_CHUNK_ROWS`]
/// ids; for the ticket table that many orders, so up to `ORDER_SEATS_MAX` times as many rows),
/// flattened.
async fn dump_body(ctx: Ctx, args: Vec<Value>) -> ProcResult {
    let code = ranged_arg(&args, 0, PROC_DUMP, 0..DUMP_TABLES.len() as i64)?;
    let start = int_arg(&args, 1, PROC_DUMP)?;
    let end = int_arg(&args, 2, PROC_DUMP)?;
    if !(0..=DUMP_CHUNK_ROWS).contains(&(end - start)) {
        return Err(InvalidInput::Config(format!("{PROC_DUMP}: range {start}..{end} too wide")).into());
    }
    // One more than a chunk can hold, so that a truncated answer is recognizable.
    let limit = DUMP_ROWS_MAX as u32 + 1;
    let rows = ctx.scan(DUMP_TABLES[code as usize], &[int(start)], Some(&[int(end)]), limit).await?;
    Ok(rows.iter().flat_map(|r| r.iter().cloned()).collect())
}
