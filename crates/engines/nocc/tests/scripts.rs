//! Scripted trace tests of `nocc` and `base` (`tests/scripts/`). Regenerate with
//! `UPDATE_GOLDENFILES=1` and review the diff; see `litmus_protocol::testkit::script` for the
//! commands.

use litmus_protocol::testkit::script::{run_dir, ScriptRunner};

#[test]
fn scripts() {
    run_dir("tests/scripts", || ScriptRunner::new(&[litmus_nocc::NOCC, litmus_nocc::BASE]));
}
