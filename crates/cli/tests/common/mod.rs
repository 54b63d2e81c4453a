//! What the real-process tests share: the `litmus` binary, free ports, a server that dies with
//! the test.

#![allow(dead_code)]

use std::process::Child;

pub const LITMUS: &str = env!("CARGO_BIN_EXE_litmus");

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A server process, killed (`kill -9`) and reaped when dropped.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
