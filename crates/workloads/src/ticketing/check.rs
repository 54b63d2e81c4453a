//! Ticketing's verification: a settled reading of every table ([`read_snapshot`]) and the
//! invariants of the module doc checked on it ([`check_snapshot`]).

use super::*;

/// Everything `verify` reads, in one (settled) reading.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub categories: Vec<CategoryRow>,
    /// Per seat id: (cat, state, order).
    pub seats: BTreeMap<i64, (i64, i64, i64)>,
    pub orders: BTreeMap<i64, OrderRow>,
    /// (order, seat) -> issued.
    pub tickets: BTreeMap<(i64, i64), i64>,
    /// (state, session, order).
    pub queue: BTreeSet<(i64, i64, i64)>,
}

/// Totals of a snapshot that passed [`check_snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub seats: u64,
    pub free: u64,
    pub reserved: u64,
    pub sold: u64,
    pub live_orders: u64,
    pub paid_orders: u64,
    pub tickets: u64,
}

/// Most problems one check lists.
const PROBLEMS_MAX: usize = 20;

/// The problems a check found (the first [`PROBLEMS_MAX`]).
struct Problems(Vec<String>);

impl Problems {
    fn add(&mut self, msg: String) {
        if self.0.len() < PROBLEMS_MAX {
            self.0.push(msg);
        }
    }
}

/// Invariants 1 and 2: every seat exists once, well formed, and the category counters agree
/// with the seats; counts them into `v`.
fn check_seats(s: &Snapshot, capacity: i64, v: &mut Verdict, p: &mut Problems) {
    // 1, 2: seats and counters.
    let expected_seats = CATEGORIES * capacity;
    if s.seats.len() as i64 != expected_seats || s.seats.keys().any(|id| !(0..expected_seats).contains(id)) {
        p.add(format!("expected seats 0..{expected_seats}, found {} seat rows", s.seats.len()));
    }
    let mut counted = vec![[0i64; 3]; CATEGORIES as usize];
    for (&id, &(cat, state, order)) in &s.seats {
        if cat != id.div_euclid(capacity) || !(SEAT_FREE..=SEAT_SOLD).contains(&state) {
            p.add(format!("seat {id} is malformed: category {cat}, state {state}"));
            continue;
        }
        if (state == SEAT_FREE) != (order == NO_ORDER) {
            p.add(format!("seat {id} has state {state} and order {order}"));
        }
        counted[cat as usize][state as usize] += 1;
    }
    if s.categories.len() as i64 != CATEGORIES {
        p.add(format!("expected {CATEGORIES} category rows, found {}", s.categories.len()));
    }
    for c in &s.categories {
        let Some(n) = usize::try_from(c.cat).ok().and_then(|i| counted.get(i)) else {
            p.add(format!("unknown category {}", c.cat));
            continue;
        };
        let [free, reserved, sold] = *n;
        if free + reserved + sold != capacity || c.capacity != capacity {
            p.add(format!(
                "category {}: sold {sold} + reserved {reserved} + free {free} != capacity {capacity} (row says {})",
                c.cat, c.capacity
            ));
        }
        if c.free != free {
            p.add(format!("category {}: counter says {} free seats, the seats say {free}", c.cat, c.free));
        }
    }
    for n in &counted {
        v.free += n[0] as u64;
        v.reserved += n[1] as u64;
        v.sold += n[2] as u64;
    }
    v.seats = s.seats.len() as u64;
}

/// Invariants 3, 4 and 5: live orders own exactly their seats, paid orders have exactly their
/// tickets, and the queues list exactly the live orders; counts them into `v`.
fn check_orders(s: &Snapshot, capacity: i64, v: &mut Verdict, p: &mut Problems) {
    // 3, 4, 5: orders own their seats exactly, tickets and queues match.
    let mut owner: BTreeMap<i64, i64> = BTreeMap::new();
    for o in s.orders.values() {
        v.live_orders += 1;
        if !(ORDER_RESERVED..=ORDER_ISSUED).contains(&o.state)
            || !(1..=ORDER_SEATS_MAX).contains(&o.seats)
            || order_category(o.order_id) != o.cat
        {
            p.add(format!("order {} is malformed: {o:?}", o.order_id));
            continue;
        }
        let paid = o.state >= ORDER_PAID;
        let seat_state = if paid { SEAT_SOLD } else { SEAT_RESERVED };
        for sid in o.seat_ids(capacity) {
            if let Some(other) = owner.insert(sid, o.order_id) {
                p.add(format!("seat {sid} is in two live orders: {other} and {} (sold twice)", o.order_id));
            }
            match s.seats.get(&sid) {
                Some(&(_, st, ord)) if st == seat_state && ord == o.order_id => {}
                other => p.add(format!(
                    "order {} (state {}) should hold seat {sid}, which is {other:?}",
                    o.order_id, o.state
                )),
            }
            let ticket = s.tickets.get(&(o.order_id, sid));
            match (paid, ticket) {
                (false, None) => {}
                (true, Some(&issued)) if issued == i64::from(o.state == ORDER_ISSUED) => {}
                (_, t) => p.add(format!("order {} (state {}) has ticket {t:?} for seat {sid}", o.order_id, o.state)),
            }
        }
        if paid {
            v.paid_orders += 1;
        }
        if !s.queue.contains(&(o.state, o.session, o.order_id)) {
            p.add(format!("order {} (state {}) is not in its queue", o.order_id, o.state));
        }
    }
    for (&sid, &(_, state, order)) in &s.seats {
        if state != SEAT_FREE && owner.get(&sid) != Some(&order) {
            p.add(format!("seat {sid} (state {state}) is held by order {order}, which does not list it (lost seat)"));
        }
    }
    for &(order, sid) in s.tickets.keys() {
        v.tickets += 1;
        let ok = s.orders.get(&order).is_some_and(|o| o.state >= ORDER_PAID && owner.get(&sid) == Some(&order));
        if !ok {
            p.add(format!("ticket for seat {sid} of order {order} has no paid order holding that seat"));
        }
    }
    for &(state, session, order) in &s.queue {
        if !s.orders.get(&order).is_some_and(|o| o.state == state && o.session == session) {
            p.add(format!(
                "queue {state} of session id {session} lists order {order}, which is not its live order in that state"
            ));
        }
    }
}

/// Checks the invariants of the module doc on one reading; every violation is listed.
pub fn check_snapshot(s: &Snapshot, capacity: i64) -> Result<Verdict, Vec<String>> {
    let mut p = Problems(Vec::new());
    let mut v = Verdict { seats: 0, free: 0, reserved: 0, sold: 0, live_orders: 0, paid_orders: 0, tickets: 0 };
    check_seats(s, capacity, &mut v, &mut p);
    check_orders(s, capacity, &mut v, &mut p);
    let Problems(problems) = p;
    if problems.is_empty() {
        Ok(v)
    } else {
        Err(problems)
    }
}

/// Rows of `DUMP_TABLES[code]` with first key column in `start..end`, each of `cols` ints, read
/// through `call` (which runs `tk_dump` with the given arguments).
fn dump(call: &mut DumpCall<'_>, code: usize, start: i64, end: i64, cols: usize) -> Result<Vec<Vec<i64>>, Error> {
    let mut rows = Vec::new();
    let mut from = start;
    while from < end {
        let to = (from + DUMP_CHUNK_ROWS).min(end);
        let out = call(vec![int(code as i64), int(from), int(to)])?;
        if out.len() % cols != 0 || out.len() / cols > DUMP_ROWS_MAX {
            return Err(Error::Internal(format!(
                "{PROC_DUMP} of {} returned {} values (not rows of {cols}, or too many rows)",
                DUMP_TABLES[code],
                out.len()
            )));
        }
        for chunk in out.chunks(cols) {
            rows.push(ints(chunk, cols, DUMP_TABLES[code])?);
        }
        from = to;
    }
    Ok(rows)
}

/// Runs `tk_dump` with the given arguments.
pub type DumpCall<'a> = dyn FnMut(Vec<Value>) -> Result<Vec<Value>, Error> + 'a;

/// Reads every ticketing table (chunk by chunk, each chunk its own transaction) through `call`.
/// Only meaningful as a snapshot when nothing else runs; `verify` reads until two readings agree.
pub fn read_snapshot(capacity: i64, call: &mut DumpCall<'_>) -> Result<Snapshot, Error> {
    let mut s = Snapshot::default();
    for r in dump(call, 0, 0, CATEGORIES, 5)? {
        s.categories.push(CategoryRow { cat: r[0], capacity: r[1], free: r[2], cursor: r[3], next_order: r[4] });
    }
    for r in dump(call, 1, 0, CATEGORIES * capacity, 4)? {
        if s.seats.insert(r[0], (r[1], r[2], r[3])).is_some() {
            return Err(Error::Internal(format!("seat {} read twice", r[0])));
        }
    }
    let order_end = s.categories.iter().map(|c| c.next_order).max().unwrap_or(0) * CATEGORIES;
    for r in dump(call, 2, 0, order_end, 8)? {
        let o = OrderRow::from_row(&r.iter().copied().map(int).collect::<Vec<_>>())?;
        s.orders.insert(o.order_id, o);
    }
    for r in dump(call, 3, 0, order_end, 3)? {
        s.tickets.insert((r[0], r[1]), r[2]);
    }
    for state in ORDER_RESERVED..=ORDER_ISSUED {
        for r in dump(call, 4, state, state + 1, 3)? {
            s.queue.insert((r[0], r[1], r[2]));
        }
    }
    Ok(s)
}

/// The verdict line of a snapshot that passed [`check_snapshot`].
pub fn verdict_line(s: &Snapshot, v: &Verdict) -> String {
    let orders_created: i64 = s.categories.iter().map(|c| c.next_order).sum();
    format!(
        "no seat sold twice; per category sold + reserved + free = capacity and = counter rows ({} seats: {} \
         sold, {} reserved, {} free); {} live orders own exactly their seats, {} paid orders have exactly their \
         {} tickets, no orphan ticket, queues match ({orders_created} order numbers issued)",
        v.seats, v.sold, v.reserved, v.free, v.live_orders, v.paid_orders, v.tickets
    )
}
