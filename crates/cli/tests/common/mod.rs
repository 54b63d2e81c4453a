//! What the real-process tests share: the `litmus` binary, free ports, a server that dies with
//! the test.

#![allow(dead_code)]

use std::io::Write as _;
use std::process::{Child, Command, Output, Stdio};

pub const LITMUS: &str = env!("CARGO_BIN_EXE_litmus");

/// A port nothing listens on, never the same one twice in this process (the tests run in
/// parallel, and the kernel may hand a port out again before the first test's server bound it).
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap();
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if !handed_out.contains(&port) {
            handed_out.push(port);
            return port;
        }
    }
}

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
