//! Ports for tests and examples that start real servers on loopback.

use std::sync::Mutex;

/// A loopback port nothing listens on now, never the same one twice in this process.
///
/// Tests run in parallel threads, and the kernel may hand a port that `bind(0)` returned out
/// again before the first test's server has bound it: two tests' servers then met on one port
/// (in CI a TLS client reached the other test's CA, `UnknownIssuer`).
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("loopback has a free port")
            .port();
        if !handed_out.contains(&port) {
            handed_out.push(port);
            return port;
        }
    }
}
