//! Scripted trace tests of `basic` (`tests/scripts/`, one scenario per file, each naming the
//! TFP rule it shows: R, W1, W2, V, F). Regenerate with `UPDATE_GOLDENFILES=1` and review the
//! diff; see `litmus_protocol::testkit::script` for the commands.

use litmus_protocol::testkit::script::{run_dir, ScriptRunner};

#[test]
fn scripts() {
    run_dir("tests/scripts", || ScriptRunner::new(&[litmus_basic::BASIC]));
}
