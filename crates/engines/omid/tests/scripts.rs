//! Scripted trace tests of `omid` (`tests/scripts/`, one scenario per file, each naming the
//! rule it shows). Regenerate with `UPDATE_GOLDENFILES=1` and review the diff; see
//! `litmus_protocol::testkit::script` for the commands.

use litmus_protocol::testkit::script::{run_dir, ScriptRunner};

#[test]
fn scripts() {
    run_dir("tests/scripts", || ScriptRunner::new(&[litmus_omid::OMID]));
}
