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

#[cfg(test)]
mod tests {
    #[test]
    fn no_port_is_handed_out_twice() {
        let ports: Vec<u16> = (0..200).map(|_| super::free_port()).collect();
        let mut unique = ports.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ports.len());
    }
}
