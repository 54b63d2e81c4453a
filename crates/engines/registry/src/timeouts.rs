//! The timeout chain, checked when the crate compiles.
//!
//! Each layer must give the layer below it time to act before it gives up itself, or a healthy
//! but slow protocol step is cut off by a timeout meant for a dead peer:
//!
//! ```text
//!  lock patience 7 ms < op resend 100 ms < BASE op re-run 300 ms < in-doubt query 1 s < orphan roll-back 2 s
//!    < client request 5 s < coordinator stall 10 s  (≤ interactive idle 10 s)
//!  Omid: resend to oracle 200 ms < fail over 300 ms < op/commit deadline 3 s < client 5 s
//! ```

use litmus_locking::coordinator::{BASE_OP_TIMEOUT, OP_RESEND_AFTER};
use litmus_locking::partition::{IN_DOUBT_QUERY_AFTER, LOCK_WAIT_PATIENCE, ORPHAN_TIMEOUT, TICK_CREDIT_MAX};
use litmus_omid::engine::{COMMIT_DEADLINE, OP_DEADLINE, ORACLE_FAILOVER_AFTER, ORACLE_RESEND_AFTER};
use litmus_protocol::client::REQUEST_TIMEOUT_DEFAULT;
use litmus_protocol::coordinator::{INTERACTIVE_IDLE_TIMEOUT, TXN_STALL_TIMEOUT};
use std::time::Duration;

const fn before(a: Duration, b: Duration) -> bool {
    a.as_nanos() < b.as_nanos()
}

const _: () = {
    // LK-5f: a stall counts as at most one tick's credit, less than the patience.
    assert!(before(TICK_CREDIT_MAX, LOCK_WAIT_PATIENCE));
    assert!(before(LOCK_WAIT_PATIENCE, OP_RESEND_AFTER));
    assert!(before(OP_RESEND_AFTER, BASE_OP_TIMEOUT));
    assert!(before(BASE_OP_TIMEOUT, IN_DOUBT_QUERY_AFTER));
    assert!(before(IN_DOUBT_QUERY_AFTER, ORPHAN_TIMEOUT));
    assert!(before(ORPHAN_TIMEOUT, REQUEST_TIMEOUT_DEFAULT));
    assert!(before(REQUEST_TIMEOUT_DEFAULT, TXN_STALL_TIMEOUT));
    assert!(TXN_STALL_TIMEOUT.as_nanos() <= INTERACTIVE_IDLE_TIMEOUT.as_nanos());
    assert!(before(ORACLE_RESEND_AFTER, ORACLE_FAILOVER_AFTER));
    assert!(before(ORACLE_FAILOVER_AFTER, OP_DEADLINE));
    assert!(before(OP_DEADLINE, REQUEST_TIMEOUT_DEFAULT));
    assert!(before(COMMIT_DEADLINE, REQUEST_TIMEOUT_DEFAULT));
};
