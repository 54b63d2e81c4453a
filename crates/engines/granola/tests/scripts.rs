//! Scripted trace tests of `granola`, `granola-locking` and `sinfonia` (`tests/scripts/`, one
//! scenario per file, each naming the paper section it shows). Regenerate with
//! `UPDATE_GOLDENFILES=1` and review the diff; see `litmus_protocol::testkit::script` for the
//! commands.

use litmus_protocol::testkit::script::{run_dir, ScriptRunner};

#[test]
fn scripts() {
    run_dir("tests/scripts", || {
        ScriptRunner::new(&[litmus_granola::GRANOLA, litmus_granola::GRANOLA_LOCKING, litmus_granola::SINFONIA])
    });
}
