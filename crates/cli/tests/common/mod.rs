//! What the real-process tests share: the `litmus` binary, free ports, a server that dies with
//! the test.

#![allow(dead_code)]

use std::io::Write as _;
use std::process::{Child, Command, Output, Stdio};

pub const LITMUS: &str = env!("CARGO_BIN_EXE_litmus");

pub use litmus_runtime::ports::free_port;

/// A server process, killed (`kill -9`) and reaped when dropped.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `litmus ARGS` to completion with `stdin` as its input.
pub fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(LITMUS)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}
