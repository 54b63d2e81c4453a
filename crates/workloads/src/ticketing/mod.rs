//! # Ticketing: Salt's Fusion Ticket experiment (Salt OSDI'14 §8, Figs. 8 and 10)
//!
//! One event, two categories of `--seats-per-category` seats (10,000 each, as in §8), and
//! closed-loop clients booking tickets through the 11 transactions of a booking flow modelled on
//! Fusion Ticket. Every transaction is a stored procedure; the contended one is `create-order`,
//! which — as in Fusion Ticket — reserves seats by updating the category's shared counter row
//! (free seats, placement cursor, next order number) before it touches the seats themselves.
//!
//! ## The 11 transactions (one report kind each)
//!
//! | kind                  | what it does                                                              | mix |
//! |-----------------------|---------------------------------------------------------------------------|-----|
//! | `browse-events`       | reads the event row (categories, seats per category)                      | 10% |
//! | `view-seat-map`       | reads a window of [`SEAT_MAP_SEATS`] seats of a category                    |  8% |
//! | `check-availability`  | reads a category's counter row (free seats)                               | 10% |
//! | `create-order`        | **contended**: category counters (free −= k, cursor += k, next order += 1), then claims the k seats at the cursor and records the order (`RESERVED`) | 18% |
//! | `add-customer`        | a `RESERVED` order gets a customer (customer row upserted) → `CUSTOMER`   | 10% |
//! | `payment`             | a `CUSTOMER` order is paid: its seats become sold, its tickets are created → `PAID` |  6% |
//! | `confirm`             | a `PAID` order's confirmation is sent → `CONFIRMED`                       |  7% |
//! | `issue-tickets`       | a `CONFIRMED` order's tickets are printed (issued = 1) → `ISSUED`          |  7% |
//! | `cancel-order`        | a `CUSTOMER` order is cancelled: order deleted, seats freed, free += k    |  8% |
//! | `expire-reservations` | the session's oldest `RESERVED` order expires (as `cancel-order`)          | 10% |
//! | `delete-order`        | administrative: an `ISSUED` order is deleted with its tickets, seats freed, free += k |  6% |
//!
//! **Sessions.** As in Fusion Ticket, an order belongs to the client session that created it (its
//! cart), and only that session acts on it. Each closed-loop client is one session: terminal
//! `i` is session `i` (its RNG stream, [`SESSIONS`] at most), `create-order` records the session
//! in the order, and the transactions that act on an existing order find one of the session's
//! own through the order queue (`tk_order_queue(state, session, order_id)`, an index table —
//! there are no secondary indexes): the procedure scans the session's entries of the state's
//! queue and takes the pick-th oldest (`0..`[`QUEUE_PICK_MAX`]; the oldest, for
//! `expire-reservations`). A session with no order in that state makes the transaction a
//! successful no-op (it returns `[0]`; `[1]` when it acted). [`Workload::generate`] is a pure
//! function of the client's RNG, so it cannot remember which step its order is at; each step is
//! drawn from the mix and acts on whichever of the session's orders is at that step. Two
//! sessions never touch each other's orders or queue entries, so the only rows clients share are
//! the category counters and the seats — the contention §8 describes.
//!
//! **Steady state.** Each queue is drained faster than it fills, so orders flow through and
//! every seat comes back to the pool: RESERVED gets 18% and is drained by add-customer 10% and
//! expire 10% (about half the reservations are abandoned, as carts are); CUSTOMER gets ~9% and is
//! drained by payment 6% and cancel 8%; PAID, CONFIRMED and ISSUED get ~4% and are drained by
//! confirm 7%, issue-tickets 7% and the administrative `delete-order` 6%, which here stands for
//! the event's turnover (voiding issued orders returns their seats — without it a long run sells
//! out). Many of these calls find no order of the session in that state and commit as no-ops; a long run does not
//! sell out and the live orders stay a small fraction of the capacity.
//!
//! **Statements.** `create-order` issues its statements one at a time, as Fusion Ticket's PHP
//! placement code does (update the counters, read them back, a read per seat, a write per seat,
//! insert the order, insert its queue entry); under ACID the category row stays locked through
//! all of them. The three display transactions (`browse-events`, `view-seat-map`,
//! `check-availability`) run at read-uncommitted, i.e. without read locks, like the plain
//! non-locking `SELECT`s of MySQL Cluster (whose only isolation level is read-committed without
//! read locks); they may show a free-seat count that is about to change, which is all a seat map
//! promises. The other transactions are serializable.
//!
//! **Seat placement** is Fusion Ticket's "best available": a category hands out seats in order
//! from its cursor (positions `cursor..cursor+k` modulo the capacity), so every `create-order` of
//! a category goes through the same counter row — the contention of §8 — rather than picking
//! uniformly random seats (which would have none). A request asks for 1..=[`ORDER_SEATS_MAX`]
//! seats.
//!
//! ## BASE-ification (`--base-txns K`, Fig. 10)
//!
//! `K` (0..=3, default 1) is how many transactions run as BASE transactions, in contention
//! order: 1 `create-order`, 2 `+ expire-reservations`, 3 `+ cancel-order` (the other writers of a
//! category's counter row). Each of them is registered twice, as an ACID procedure and as a BASE
//! one with the same body (`tk_create_order` / `tk_create_order_base`, ...); `generate` calls the
//! BASE one when it is among the first K. Under `acid` (and `nocc`) BASE procedures run as ACID
//! transactions, so `--compare acid,salt` compares Fusion Ticket before and after BASE-ification
//! with the engine flag alone. `delete-order` is administrative and stays ACID (§8's point:
//! Salt leaves the rare transactions unmodified).
//!
//! `create-order` as a BASE transaction (Salt §4, Fig. 2 pattern):
//!
//! ```text
//!   begin BASE transaction
//!     alkaline 1 (the short contended one):  category: free -= k, cursor += k, next_order += 1;
//!                                            read it back; free < 0 → abort "sold out" (before
//!                                            accept: the BASE transaction aborts, nothing changed)
//!     ── accept: the client is answered ──
//!     alkaline 2:  read the k seats at the cursor; if all are free: mark them RESERVED for the
//!                  order, insert the order and its queue entry; else change nothing
//!     alkaline 3 (only if alkaline 2 did not reserve — a seat still held when the cursor wrapped,
//!                 or an error): compensate: category free += k
//!   end BASE transaction
//! ```
//!
//! Between alkaline 1 and 2 the counter row says the seats are taken while the seats are still
//! free; BASE transactions may see that (Salt isolation), ACID ones never do (the saline lock).
//! No seat is lost (the compensation returns the counter) and none is sold twice (alkaline 2
//! claims a seat only if it reads it free, under its alkaline lock). `expire-reservations` and
//! `cancel-order` as BASE transactions: alkaline 1 takes the order off its queue and deletes it
//! (accept), alkaline 2 frees its seats, alkaline 3 is the contended `free += k` as a
//! single-operation subtransaction ([`Ctx::alkaline_update`], which `salt-local` commits at the
//! partition, §6.4). `create-order`'s alkaline 1 is two operations (update, then read back), so
//! `salt-local` runs it like `salt`.
//!
//! ## Expected business failures
//!
//! * `create-order` when the category has fewer than k free seats: a user abort ("sold out") —
//!   counted under `user aborts`, not a run failure;
//! * `create-order` whose seats at the cursor are not all free: compensated, commits without an
//!   order (`[]`);
//! * no order of the session in the state acted on: a committed no-op (`[0]`).
//!
//! Any other user abort is a broken invariant found on the way (e.g. an order's seat held by
//! someone else) and `verify` fails the run.
//!
//! **Retries.** A transaction that aborts on a lock conflict is retried, keeping its first
//! attempt's priority, until it commits (a customer keeps trying to book, as TPC-C's terminals
//! never give up); one still failing after `tpcc::COMMIT_BOUND` fails the run. Giving a
//! transaction up after a few retries would free its client for cheaper transactions and
//! flatter whichever engine aborts more.
//!
//! ## Schema (all columns `int`)
//!
//! ```text
//!   tk_event(event_id, categories, seats_per_category)       1 row, partitioned by event_id
//!   tk_category(cat_id, capacity, free, cursor, next_order)  partitioned by cat_id (cat c on partition c mod P)
//!   tk_seat(seat_id, cat_id, state, order_id)                seat_id = cat·capacity + position; by seat_id
//!   tk_order(order_id, cat_id, first_pos, seats, state, customer_id, amount, session)
//!                                                            order_id = seq·CATEGORIES + cat; by order_id
//!   tk_ticket(order_id, seat_id, issued)                     by order_id (with its order)
//!   tk_order_queue(state, session, order_id)                 by (state, session)
//!   tk_customer(customer_id, orders)                         by customer_id
//! ```
//!
//! Seat states: 0 free (order −1), 1 reserved, 2 sold. Order states: 1 `RESERVED`, 2 `CUSTOMER`,
//! 3 `PAID`, 4 `CONFIRMED`, 5 `ISSUED`. An order's seats are positions `first_pos..first_pos+seats`
//! modulo the capacity.
//!
//! ## Invariants (checked by `verify`)
//!
//! After the clients stop, `verify` reads every table in chunks (ACID scans) until two
//! consecutive readings agree — Salt's accepted BASE transactions finish in the background — for
//! at most [`VERIFY_SETTLE_MAX`], then checks:
//!
//! 1. every seat row exists once with a valid state; free seats belong to no order;
//! 2. per category, `sold + reserved + free = capacity` counted from the seats, and the counter
//!    row's `free` equals the free seats counted;
//! 3. **no seat is sold twice**: the seat lists of live orders are disjoint; each live order's
//!    seats are held by it (reserved for `RESERVED`/`CUSTOMER`, sold for `PAID`..`ISSUED`) and
//!    every held seat belongs to a live order;
//! 4. every paid order (`PAID`..`ISSUED`) has exactly one ticket per seat, issued iff `ISSUED`,
//!    and no ticket exists without a paid order;
//! 5. every live order is in exactly the queue of its state, under its own session, and the
//!    queues hold nothing else;
//! 6. no transaction but `create-order` aborted itself (the harness keeps counts, not reasons;
//!    `create-order`'s only user abort is "sold out").
//!
//! ## What limits the Salt/ACID ratio here
//!
//! The paper reports 6.5x (Fig. 8). On a small machine (2 shared cores, embedded cluster, LAN
//! delay; `scripts/ticketing-figures.sh`) the ratio stays far lower, and grows with K (the
//! measured ratios are in the results docs). What holds it back:
//!
//! * **ACID writers of the hot row.** With K = 1, `expire-reservations`, `cancel-order` and
//!   `delete-order` (24% of the mix) update the category row as ACID transactions: each waits for
//!   the saline locks of every in-flight BASE `create-order` (until their *end*, i.e. through
//!   alkaline 2's statement-at-a-time seat claims), and, in FIFO order (Salt §6: MySQL
//!   Cluster's per-object queue), later alkaline requests wait behind it — so whenever one is
//!   queued, `create-order` is serialized again at its full length. BASE-ifying them (K = 2, 3)
//!   raises the ratio; the administrative `delete-order` stays ACID, as in §8. The paper found
//!   K = 2, 3 add nothing, so in Fusion Ticket the other writers of the counter are much rarer
//!   than in this mix, which we chose to keep the event from selling out in a long run.
//! * **The hot row's hold under Salt.** With K = 3, `create-order`'s alkaline 1 (update, read
//!   back, commit: three round trips) is the serial section: two rows held for about a LAN
//!   round trip each. At high client counts the queues on the two rows outlast the lock
//!   patience, and many `create-order` attempts die and retry.
//! * **CPU.** Salt sends more messages per transaction than ACID (a commit per
//!   subtransaction); on two cores the runs are CPU-bound near the peak.
//! * **Orders belong to sessions.** Each session owns its orders, as in Fusion Ticket. A queue
//!   shared by buckets of sessions would make two clients picking from a bucket both take its
//!   range lock and both wait to upgrade it for the delete: most of every writer's attempts
//!   would abort.
//!
//! ## Not implemented
//!
//! Fusion Ticket's PHP application logic (sessions, carts, discounts, payment providers) is
//! reduced to the database accesses above; the paper's ten three-way-replicated partitions are
//! the harness's cluster shape. A session's steps are drawn independently from the mix, where a
//! Fusion Ticket session walks one booking through them in order.

use crate::setup::{call_idempotent, load_in_batches};
use crate::workload::{RunStats, TxnRequest, Workload};
use anyhow::Context as _;
use litmus_client::Client;
use litmus_core::{
    Catalog, Column, ColumnType, Error, Formula, InvalidInput, Isolation, Partitioning, Row, TableSchema, Value,
};
use litmus_protocol::engine::Guarantee;
use litmus_protocol::procedure::{ProcOptions, ProcResult};
use litmus_protocol::{Ctx, Op, OpResult, Registry};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

pub const EVENT: &str = "tk_event";
pub const CATEGORY: &str = "tk_category";
pub const SEAT: &str = "tk_seat";
pub const ORDER: &str = "tk_order";
pub const TICKET: &str = "tk_ticket";
pub const QUEUE: &str = "tk_order_queue";
pub const CUSTOMER: &str = "tk_customer";

/// Seat categories of the event (Salt §8: two).
pub const CATEGORIES: i64 = 2;
/// The one event's id.
pub const EVENT_ID: i64 = 0;
/// Most seats one order asks for.
pub const ORDER_SEATS_MAX: i64 = 4;
/// Seats a seat-map view reads.
pub const SEAT_MAP_SEATS: i64 = 20;
/// Client sessions (each a closed-loop client, `rng.get_stream()` modulo this): an order
/// belongs to the session that created it, and only that session acts on it.
pub const SESSIONS: i64 = 1 << 20;
/// A pipeline transaction takes the pick-th oldest of its session's orders, pick < this.
pub const QUEUE_PICK_MAX: i64 = 4;
/// Customers the orders are attributed to.
pub const CUSTOMERS: i64 = 10_000;
/// Ticket price per category, whole currency units.
pub const PRICES_BY_CATEGORY: [i64; CATEGORIES as usize] = [50, 30];
/// Default seats per category (Salt §8).
pub const SEATS_PER_CATEGORY_DEFAULT: u64 = 10_000;
/// Fewest seats per category (an order must fit several times).
pub const SEATS_PER_CATEGORY_MIN: u64 = 64;
/// Most seats per category.
pub const SEATS_PER_CATEGORY_MAX: u64 = 1_000_000;
/// Most BASE-ified transactions (`--base-txns`).
pub const BASE_TXNS_MAX: u32 = 3;
/// Seats written by one load call.
pub const LOAD_BATCH_SEATS: u64 = 500;
/// Rows (or ids) one verify dump covers.
pub const DUMP_CHUNK_ROWS: i64 = 2_000;
/// Most rows one verify dump may return (a chunk of tickets: every order with the most seats).
/// A queue with more entries per state than this fails `verify` loudly.
pub const DUMP_ROWS_MAX: usize = (DUMP_CHUNK_ROWS * ORDER_SEATS_MAX) as usize;
/// Longest `verify` waits for Salt's background work to settle.
pub const VERIFY_SETTLE_MAX: Duration = Duration::from_secs(10);
/// Pause between two readings while settling.
pub const VERIFY_SETTLE_POLL: Duration = Duration::from_millis(100);

/// Seat states.
pub const SEAT_FREE: i64 = 0;
pub const SEAT_RESERVED: i64 = 1;
pub const SEAT_SOLD: i64 = 2;
/// Order states (also the queue a live order is in).
pub const ORDER_RESERVED: i64 = 1;
pub const ORDER_CUSTOMER: i64 = 2;
pub const ORDER_PAID: i64 = 3;
pub const ORDER_CONFIRMED: i64 = 4;
pub const ORDER_ISSUED: i64 = 5;
/// The `order_id` of a free seat.
pub const NO_ORDER: i64 = -1;
/// The user-abort reason of a sold-out category (an expected business failure).
pub const SOLD_OUT: &str = "sold out";

pub const PROC_BROWSE: &str = "tk_browse_events";
pub const PROC_SEAT_MAP: &str = "tk_seat_map";
pub const PROC_AVAILABILITY: &str = "tk_check_availability";
pub const PROC_CREATE: &str = "tk_create_order";
pub const PROC_CREATE_BASE: &str = "tk_create_order_base";
pub const PROC_ADD_CUSTOMER: &str = "tk_add_customer";
pub const PROC_PAYMENT: &str = "tk_payment";
pub const PROC_CONFIRM: &str = "tk_confirm";
pub const PROC_ISSUE: &str = "tk_issue_tickets";
pub const PROC_CANCEL: &str = "tk_cancel_order";
pub const PROC_CANCEL_BASE: &str = "tk_cancel_order_base";
pub const PROC_EXPIRE: &str = "tk_expire_reservations";
pub const PROC_EXPIRE_BASE: &str = "tk_expire_reservations_base";
pub const PROC_DELETE: &str = "tk_delete_order";
pub const PROC_LOAD_EVENT: &str = "tk_load_event";
pub const PROC_LOAD_SEATS: &str = "tk_load_seats";
pub const PROC_DUMP: &str = "tk_dump";

/// One transaction type: its report kind, ACID procedure, BASE procedure (if it can be
/// BASE-ified) and share of the mix in percent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnType {
    pub kind: &'static str,
    pub procedure: &'static str,
    pub base_procedure: Option<&'static str>,
    pub percent: u32,
}

const fn txn(kind: &'static str, procedure: &'static str, base: Option<&'static str>, percent: u32) -> TxnType {
    TxnType { kind, procedure, base_procedure: base, percent }
}

pub const BROWSE_EVENTS: TxnType = txn("browse-events", PROC_BROWSE, None, 10);
pub const VIEW_SEAT_MAP: TxnType = txn("view-seat-map", PROC_SEAT_MAP, None, 8);
pub const CHECK_AVAILABILITY: TxnType = txn("check-availability", PROC_AVAILABILITY, None, 10);
pub const CREATE_ORDER: TxnType = txn("create-order", PROC_CREATE, Some(PROC_CREATE_BASE), 18);
pub const ADD_CUSTOMER: TxnType = txn("add-customer", PROC_ADD_CUSTOMER, None, 10);
pub const PAYMENT: TxnType = txn("payment", PROC_PAYMENT, None, 6);
pub const CONFIRM: TxnType = txn("confirm", PROC_CONFIRM, None, 7);
pub const ISSUE_TICKETS: TxnType = txn("issue-tickets", PROC_ISSUE, None, 7);
pub const CANCEL_ORDER: TxnType = txn("cancel-order", PROC_CANCEL, Some(PROC_CANCEL_BASE), 8);
pub const EXPIRE_RESERVATIONS: TxnType = txn("expire-reservations", PROC_EXPIRE, Some(PROC_EXPIRE_BASE), 10);
pub const DELETE_ORDER: TxnType = txn("delete-order", PROC_DELETE, None, 6);

/// The 11 transactions, in mix order.
pub const TRANSACTIONS: [TxnType; 11] = [
    BROWSE_EVENTS,
    VIEW_SEAT_MAP,
    CHECK_AVAILABILITY,
    CREATE_ORDER,
    ADD_CUSTOMER,
    PAYMENT,
    CONFIRM,
    ISSUE_TICKETS,
    CANCEL_ORDER,
    EXPIRE_RESERVATIONS,
    DELETE_ORDER,
];

/// The BASE-ifiable transactions in contention order: `--base-txns K` BASE-ifies the first K.
pub const BASE_ORDER: [TxnType; BASE_TXNS_MAX as usize] = [CREATE_ORDER, EXPIRE_RESERVATIONS, CANCEL_ORDER];

/// Settings of the ticketing workload.
#[derive(clap::Args, Clone, Debug, PartialEq, Serialize)]
#[command(next_help_heading = "Ticketing options (ticketing)")]
pub struct TicketingOptions {
    /// ticketing: seats in each of the event's two categories.
    #[arg(long = "seats-per-category", value_name = "N", default_value_t = TicketingOptions::DEFAULT.seats_per_category)]
    pub seats_per_category: u64,

    /// How many transactions run as BASE transactions under salt, in contention order (0..=3:
    /// 1 create-order, 2 + expire-reservations, 3 + cancel-order). Set by `--base-txns`, a flag
    /// of `litmus bench` shared with TPC-C.
    #[arg(skip = TicketingOptions::DEFAULT.base_txns)]
    pub base_txns: u32,
}

impl TicketingOptions {
    pub const DEFAULT: TicketingOptions =
        TicketingOptions { seats_per_category: SEATS_PER_CATEGORY_DEFAULT, base_txns: 1 };

    pub fn validate(&self) -> Result<(), TicketingConfigError> {
        if !(SEATS_PER_CATEGORY_MIN..=SEATS_PER_CATEGORY_MAX).contains(&self.seats_per_category) {
            return Err(TicketingConfigError::Seats(self.seats_per_category));
        }
        if self.base_txns > BASE_TXNS_MAX {
            return Err(TicketingConfigError::BaseTxns(self.base_txns));
        }
        Ok(())
    }
}

impl Default for TicketingOptions {
    fn default() -> Self {
        TicketingOptions::DEFAULT
    }
}

/// Rejected ticketing settings.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TicketingConfigError {
    #[error("--seats-per-category must be in {SEATS_PER_CATEGORY_MIN}..={SEATS_PER_CATEGORY_MAX}, got {0}")]
    Seats(u64),
    #[error("--base-txns must be in 0..={BASE_TXNS_MAX}, got {0}")]
    BaseTxns(u32),
}

/// The ticketing workload.
pub struct Ticketing {
    opts: TicketingOptions,
    progress: bool,
    settle_max: Duration,
}

impl Ticketing {
    pub fn new(opts: TicketingOptions, progress: bool) -> Result<Ticketing, TicketingConfigError> {
        opts.validate()?;
        Ok(Ticketing { opts, progress, settle_max: VERIFY_SETTLE_MAX })
    }

    /// Waits at most `settle_max` for background work before judging.
    pub fn with_settle_max(mut self, settle_max: Duration) -> Ticketing {
        self.settle_max = settle_max;
        self
    }

    pub fn options(&self) -> &TicketingOptions {
        &self.opts
    }

    /// The procedure `generate` calls for `t` under the configured `--base-txns`.
    pub fn procedure_of(&self, t: &TxnType) -> &'static str {
        let base = BASE_ORDER.iter().take(self.opts.base_txns as usize).any(|b| b.kind == t.kind);
        match t.base_procedure {
            Some(p) if base => p,
            _ => t.procedure,
        }
    }

    fn capacity(&self) -> i64 {
        self.opts.seats_per_category as i64
    }
}

mod check;
mod procs;

pub use check::{check_snapshot, read_snapshot, verdict_line, DumpCall, Snapshot, Verdict};

// ---------------------------------------------------------------------------------------------
// Rows

/// A category's counter row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CategoryRow {
    pub cat: i64,
    pub capacity: i64,
    pub free: i64,
    pub cursor: i64,
    pub next_order: i64,
}

/// An order row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderRow {
    pub order_id: i64,
    pub cat: i64,
    pub first_pos: i64,
    pub seats: i64,
    pub state: i64,
    pub customer: i64,
    pub amount: i64,
    /// The client session the order belongs to (its cart): the queue bucket it is listed in.
    pub session: i64,
}

fn int(v: i64) -> Value {
    Value::Int(v)
}

/// The tables `tk_dump` reads, by code.
const DUMP_TABLES: [&str; 5] = [CATEGORY, SEAT, ORDER, TICKET, QUEUE];

fn ints(row: &[Value], n: usize, what: &str) -> Result<Vec<i64>, Error> {
    let v: Option<Vec<i64>> = row.iter().map(Value::as_int).collect();
    match v {
        Some(v) if v.len() == n => Ok(v),
        _ => Err(Error::Internal(format!("malformed {what} row {row:?}"))),
    }
}

impl CategoryRow {
    fn from_row(row: &[Value]) -> Result<CategoryRow, Error> {
        let v = ints(row, 5, CATEGORY)?;
        Ok(CategoryRow { cat: v[0], capacity: v[1], free: v[2], cursor: v[3], next_order: v[4] })
    }
}

impl OrderRow {
    fn from_row(row: &[Value]) -> Result<OrderRow, Error> {
        let v = ints(row, 8, ORDER)?;
        Ok(OrderRow {
            order_id: v[0],
            cat: v[1],
            first_pos: v[2],
            seats: v[3],
            state: v[4],
            customer: v[5],
            amount: v[6],
            session: v[7],
        })
    }

    fn to_row(self) -> Vec<Value> {
        [self.order_id, self.cat, self.first_pos, self.seats, self.state, self.customer, self.amount, self.session]
            .into_iter()
            .map(Value::Int)
            .collect()
    }

    /// The seat ids of the order, given its category's capacity.
    pub fn seat_ids(&self, capacity: i64) -> Vec<i64> {
        (0..self.seats).map(|i| seat_id(self.cat, (self.first_pos + i).rem_euclid(capacity), capacity)).collect()
    }
}

/// The id of the seat at `pos` of category `cat`.
pub fn seat_id(cat: i64, pos: i64, capacity: i64) -> i64 {
    cat * capacity + pos
}

/// The category an order id belongs to.
pub fn order_category(order_id: i64) -> i64 {
    order_id.rem_euclid(CATEGORIES)
}

/// The ticketing schema.
pub fn tables() -> Vec<TableSchema> {
    let t = |name: &str, cols: &[&str], key: &[&str], prefix_len: usize| {
        TableSchema::new(
            name,
            cols.iter().map(|c| Column::new(c, ColumnType::Int)).collect(),
            key,
            Partitioning::KeyPrefix { prefix_len },
        )
    };
    vec![
        t(EVENT, &["event_id", "categories", "seats_per_category"], &["event_id"], 1),
        t(CATEGORY, &["cat_id", "capacity", "free", "cursor", "next_order"], &["cat_id"], 1),
        t(SEAT, &["seat_id", "cat_id", "state", "order_id"], &["seat_id"], 1),
        t(
            ORDER,
            &["order_id", "cat_id", "first_pos", "seats", "state", "customer_id", "amount", "session"],
            &["order_id"],
            1,
        ),
        t(TICKET, &["order_id", "seat_id", "issued"], &["order_id", "seat_id"], 1),
        t(QUEUE, &["state", "session", "order_id"], &["state", "session", "order_id"], 2),
        t(CUSTOMER, &["customer_id", "orders"], &["customer_id"], 1),
    ]
}

impl Workload for Ticketing {
    fn name(&self) -> &'static str {
        "ticketing"
    }

    fn describe(&self) -> String {
        let base: Vec<&str> = BASE_ORDER.iter().take(self.opts.base_txns as usize).map(|t| t.kind).collect();
        format!(
            "1 event, {CATEGORIES} categories x {} seats; base_txns={} ({}); 11 transactions, create-order {}%",
            self.opts.seats_per_category,
            self.opts.base_txns,
            if base.is_empty() { "all ACID".to_string() } else { base.join(", ") },
            CREATE_ORDER.percent
        )
    }

    fn catalog(&self) -> Catalog {
        let mut c = Catalog::new();
        for t in tables() {
            c.add(t);
        }
        c
    }

    fn register(&self, registry: &mut Registry) {
        procs::register(registry);
    }

    fn prepare(&self, clients: &mut dyn FnMut() -> Result<Client, Error>) -> anyhow::Result<()> {
        let capacity = self.capacity();
        let mut client = clients().context("open a load client")?;
        call_idempotent(&mut client, PROC_LOAD_EVENT, vec![int(capacity)]).context("load the event")?;
        let args = move |start: u64, count: u64| vec![int(start as i64), int(count as i64), int(capacity)];
        load_in_batches(
            clients,
            CATEGORIES as u64 * self.opts.seats_per_category,
            LOAD_BATCH_SEATS,
            self.progress,
            PROC_LOAD_SEATS,
            &args,
        )
    }

    fn generate(&self, rng: &mut ChaCha8Rng) -> TxnRequest {
        let mut roll = rng.gen_range(0..100u32);
        let t = TRANSACTIONS
            .iter()
            .find(|t| {
                if roll < t.percent {
                    true
                } else {
                    roll -= t.percent;
                    false
                }
            })
            .copied()
            .unwrap_or(BROWSE_EVENTS);
        let cat = rng.gen_range(0..CATEGORIES);
        // The client's session (Fusion Ticket's clients act on their own orders): the harness
        // gives terminal `i` the RNG stream `i`.
        let session = (rng.get_stream() % SESSIONS as u64) as i64;
        let pick = rng.gen_range(0..QUEUE_PICK_MAX);
        let args = match t.kind {
            k if k == BROWSE_EVENTS.kind => vec![],
            k if k == VIEW_SEAT_MAP.kind => {
                let pos = rng.gen_range(0..=self.capacity() - SEAT_MAP_SEATS);
                vec![int(seat_id(cat, pos, self.capacity())), int(SEAT_MAP_SEATS)]
            }
            k if k == CHECK_AVAILABILITY.kind => vec![int(cat)],
            k if k == CREATE_ORDER.kind => vec![int(cat), int(rng.gen_range(1..=ORDER_SEATS_MAX)), int(session)],
            k if k == ADD_CUSTOMER.kind => vec![int(session), int(pick), int(rng.gen_range(0..CUSTOMERS))],
            k if k == EXPIRE_RESERVATIONS.kind => vec![int(session)],
            _ => vec![int(session), int(pick)],
        };
        TxnRequest { kind: t.kind, procedure: self.procedure_of(&t), args }
    }

    /// A customer keeps trying to book: no transaction is given up (a give-up freed the client
    /// for cheaper transactions, which flattered whichever engine aborted more). The bound is
    /// TPC-C's.
    fn retry_policy(&self) -> crate::workload::RetryPolicy {
        crate::workload::RetryPolicy::UntilCommitted { bound: crate::tpcc::COMMIT_BOUND }
    }

    fn mix(&self) -> Option<crate::mix::MixSpec> {
        Some(crate::mix::MixSpec::defined_shares(TRANSACTIONS.iter().map(|t| (t.kind, t.percent))))
    }

    fn needs_isolation(&self) -> Option<(Guarantee, &'static str)> {
        // Lost updates oversell: read atomicity is not enough, snapshot isolation is.
        Some((
            Guarantee::SnapshotIsolation,
            "selling seats with lost updates oversells them, and verify checks that none was sold twice",
        ))
    }

    fn verify(&self, client: &mut Client, stats: &RunStats) -> anyhow::Result<String> {
        // 6: user aborts other than "sold out" mean a transaction found an invariant broken; the
        // harness does not keep the reasons, so any user abort outside create-order counts.
        let unexpected: u64 =
            stats.total.iter().filter(|(k, _)| **k != CREATE_ORDER.kind).map(|(_, o)| o.user_aborts).sum();
        let started = Instant::now();
        let mut previous: Option<Snapshot> = None;
        let mut readings = 0u32;
        let (snapshot, verdict) = loop {
            let read = read_snapshot(self.capacity(), &mut |args| call_idempotent(client, PROC_DUMP, args));
            readings += 1;
            let waited = started.elapsed();
            let s = match read {
                Ok(s) => s,
                Err(e) if !(e.is_retryable() || matches!(e, Error::Unavailable { .. })) => {
                    return Err(e).context("read the ticketing tables");
                }
                Err(busy) => {
                    if waited >= self.settle_max {
                        anyhow::bail!(
                            "could not read the tables for {} ms ({readings} attempts): {busy}",
                            waited.as_millis()
                        );
                    }
                    previous = None;
                    std::thread::sleep(VERIFY_SETTLE_POLL);
                    continue;
                }
            };
            let stable = previous.as_ref() == Some(&s);
            match check_snapshot(&s, self.capacity()) {
                Ok(v) if stable => break (s, v),
                Ok(_) => {}
                Err(problems) if stable || waited >= self.settle_max => {
                    anyhow::bail!(
                        "ticketing invariants violated ({readings} readings over {} ms): {}",
                        waited.as_millis(),
                        problems.join("; ")
                    );
                }
                Err(_) => {}
            }
            if waited >= self.settle_max {
                anyhow::bail!("the tables were still changing after {} ms", waited.as_millis());
            }
            previous = Some(s);
            std::thread::sleep(VERIFY_SETTLE_POLL);
        };
        if unexpected > 0 {
            anyhow::bail!("{unexpected} transaction(s) other than create-order aborted themselves (an invariant broken on the way)");
        }
        Ok(format!("{}; settled after {readings} readings", verdict_line(&snapshot, &verdict)))
    }
}

/// `ticketing` in the workload registry ([`crate::ALL`]).
pub const DEF: crate::WorkloadDef = crate::WorkloadDef {
    name: "ticketing",
    about: "Salt §8's Fusion Ticket: 11 booking transactions, seats never sold twice",
    sweeps: &["base-txns"],
    build: Some(|o| {
        let mut opts = o.ticketing.clone();
        opts.base_txns = o.base_txns.unwrap_or(opts.base_txns);
        Ok(Box::new(Ticketing::new(opts, o.progress)?))
    }),
    build_for: None,
    schema: Some(|catalog, registry| {
        let ticketing = Ticketing::new(TicketingOptions::default(), false).expect("default options are valid");
        catalog.merge(&ticketing.catalog());
        ticketing.register(registry);
    }),
    analysis: Some(crate::analysis::ticketing_spec),
    sim: None,
};

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    const CAP: i64 = 100;

    fn workload(base_txns: u32) -> Ticketing {
        Ticketing::new(TicketingOptions { seats_per_category: CAP as u64, base_txns }, false).unwrap()
    }

    /// A consistent snapshot: category 0 has order 0 (2 seats, ISSUED) and order 2 (1 seat,
    /// RESERVED); category 1 has nothing.
    fn consistent() -> Snapshot {
        let mut s = Snapshot::default();
        for id in 0..CATEGORIES * CAP {
            s.seats.insert(id, (id / CAP, SEAT_FREE, NO_ORDER));
        }
        let issued = OrderRow {
            order_id: 0,
            cat: 0,
            first_pos: 0,
            seats: 2,
            state: ORDER_ISSUED,
            customer: 7,
            amount: 100,
            session: 0,
        };
        let reserved = OrderRow {
            order_id: 2,
            cat: 0,
            first_pos: 2,
            seats: 1,
            state: ORDER_RESERVED,
            customer: -1,
            amount: 0,
            session: 0,
        };
        for (o, seat_state) in [(issued, SEAT_SOLD), (reserved, SEAT_RESERVED)] {
            for sid in o.seat_ids(CAP) {
                s.seats.insert(sid, (0, seat_state, o.order_id));
                if o.state >= ORDER_PAID {
                    s.tickets.insert((o.order_id, sid), 1);
                }
            }
            s.queue.insert((o.state, o.session, o.order_id));
            s.orders.insert(o.order_id, o);
        }
        s.categories = vec![
            CategoryRow { cat: 0, capacity: CAP, free: CAP - 3, cursor: 3, next_order: 2 },
            CategoryRow { cat: 1, capacity: CAP, free: CAP, cursor: 0, next_order: 0 },
        ];
        s
    }

    fn problems(s: &Snapshot) -> String {
        check_snapshot(s, CAP).expect_err("must be rejected").join("; ")
    }

    #[test]
    fn a_consistent_snapshot_passes() {
        let v = check_snapshot(&consistent(), CAP).unwrap();
        assert_eq!((v.seats, v.sold, v.reserved, v.free), (200, 2, 1, 197));
        assert_eq!((v.live_orders, v.paid_orders, v.tickets), (2, 1, 2));
    }

    #[test]
    fn a_seat_in_two_orders_is_caught_as_sold_twice() {
        let mut s = consistent();
        // Order 4 claims seat 1, already sold to order 0.
        let o = OrderRow {
            order_id: 4,
            cat: 0,
            first_pos: 1,
            seats: 1,
            state: ORDER_RESERVED,
            customer: -1,
            amount: 0,
            session: 0,
        };
        s.orders.insert(4, o);
        s.queue.insert((ORDER_RESERVED, 0, 4));
        assert!(problems(&s).contains("sold twice"), "{}", problems(&s));
    }

    #[test]
    fn counters_that_disagree_with_the_seats_are_caught() {
        let mut s = consistent();
        s.categories[0].free += 1;
        assert!(problems(&s).contains("counter says 98 free seats, the seats say 97"), "{}", problems(&s));
        let mut s = consistent();
        s.seats.remove(&150);
        assert!(problems(&s).contains("!= capacity"), "{}", problems(&s));
    }

    #[test]
    fn lost_seats_missing_tickets_and_orphans_are_caught() {
        // A held seat without an order (the order was deleted, the seat never freed).
        let mut s = consistent();
        s.seats.insert(50, (0, SEAT_RESERVED, 98));
        s.categories[0].free -= 1;
        assert!(problems(&s).contains("lost seat"), "{}", problems(&s));
        // A paid order missing a ticket.
        let mut s = consistent();
        s.tickets.remove(&(0, 1));
        assert!(problems(&s).contains("has ticket None"), "{}", problems(&s));
        // A ticket without a paid order.
        let mut s = consistent();
        s.tickets.insert((2, 2), 0);
        assert!(problems(&s).contains("no paid order"), "{}", problems(&s));
        // An order outside its queue.
        let mut s = consistent();
        s.queue.remove(&(ORDER_RESERVED, 0, 2));
        assert!(problems(&s).contains("not in its queue"), "{}", problems(&s));
        // An order listed in another session's queue.
        let mut s = consistent();
        s.queue.remove(&(ORDER_RESERVED, 0, 2));
        s.queue.insert((ORDER_RESERVED, 1, 2));
        assert!(problems(&s).contains("queue 1 of session id 1 lists order 2"), "{}", problems(&s));
    }

    #[test]
    fn order_seats_wrap_around_the_category() {
        let o = OrderRow {
            order_id: 3,
            cat: 1,
            first_pos: CAP - 1,
            seats: 3,
            state: 1,
            customer: -1,
            amount: 0,
            session: 0,
        };
        assert_eq!(o.seat_ids(CAP), vec![2 * CAP - 1, CAP, CAP + 1]);
        assert_eq!(order_category(o.order_id), 1);
    }

    #[test]
    fn the_mix_has_eleven_kinds_summing_to_one_hundred_percent() {
        assert_eq!(TRANSACTIONS.iter().map(|t| t.percent).sum::<u32>(), 100);
        let kinds: BTreeSet<_> = TRANSACTIONS.iter().map(|t| t.kind).collect();
        assert_eq!(kinds.len(), 11);
        let w = workload(1);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut seen = BTreeMap::new();
        for _ in 0..20_000 {
            let t = w.generate(&mut rng);
            *seen.entry(t.kind).or_insert(0u32) += 1;
        }
        for t in TRANSACTIONS {
            let share = f64::from(seen[t.kind]) / 200.0;
            assert!((share - f64::from(t.percent)).abs() < 1.5, "{}: {share}% for {}%", t.kind, t.percent);
        }
    }

    #[test]
    fn base_txns_picks_base_procedures_in_contention_order() {
        let expect = |k: u32, create: &str, expire: &str, cancel: &str| {
            let w = workload(k);
            assert_eq!(w.procedure_of(&CREATE_ORDER), create, "K={k}");
            assert_eq!(w.procedure_of(&EXPIRE_RESERVATIONS), expire, "K={k}");
            assert_eq!(w.procedure_of(&CANCEL_ORDER), cancel, "K={k}");
            assert_eq!(w.procedure_of(&DELETE_ORDER), PROC_DELETE);
        };
        expect(0, PROC_CREATE, PROC_EXPIRE, PROC_CANCEL);
        expect(1, PROC_CREATE_BASE, PROC_EXPIRE, PROC_CANCEL);
        expect(2, PROC_CREATE_BASE, PROC_EXPIRE_BASE, PROC_CANCEL);
        expect(3, PROC_CREATE_BASE, PROC_EXPIRE_BASE, PROC_CANCEL_BASE);
        let mut registry = Registry::new();
        workload(1).register(&mut registry);
        for t in BASE_ORDER {
            assert!(registry.get(t.base_procedure.unwrap()).unwrap().options.base);
            assert!(!registry.get(t.procedure).unwrap().options.base);
        }
    }

    #[test]
    fn generation_replays_from_the_seed_and_stays_in_range() {
        let w = workload(1);
        let run = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..200).map(|_| w.generate(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
        // Every order-acting call names the terminal's own session (its RNG stream).
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        rng.set_stream(37);
        for _ in 0..200 {
            let t = w.generate(&mut rng);
            let session = match t.kind {
                k if k == CREATE_ORDER.kind => Some(&t.args[2]),
                k if [BROWSE_EVENTS.kind, VIEW_SEAT_MAP.kind, CHECK_AVAILABILITY.kind].contains(&k) => None,
                _ => Some(&t.args[0]),
            };
            assert!(session.is_none_or(|s| *s == int(37)), "{t:?}");
        }
        for t in run(9) {
            if t.kind == VIEW_SEAT_MAP.kind {
                let first = t.args[0].as_int().unwrap();
                assert!(first >= 0 && first + SEAT_MAP_SEATS <= CATEGORIES * CAP);
                assert_eq!(first / CAP, (first + SEAT_MAP_SEATS - 1) / CAP, "one category");
            }
        }
    }

    #[test]
    fn bad_options_are_rejected() {
        let bad = |o| Ticketing::new(o, false).err().expect("rejected");
        assert_eq!(bad(TicketingOptions { seats_per_category: 10, base_txns: 1 }), TicketingConfigError::Seats(10));
        assert_eq!(bad(TicketingOptions { seats_per_category: 100, base_txns: 4 }), TicketingConfigError::BaseTxns(4));
    }
}
