//! The TCP runtime in one process: three nodes on loopback, a client, and a malformed frame.

use litmus_core::{Error, InvalidInput, Value};
use litmus_protocol::builtin;
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_runtime::tcp::{serve, NodeConfig, TcpTransport};
use litmus_runtime::Transport;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use litmus_runtime::ports::free_port;

fn connect_retry(addr: &str) -> TcpTransport {
    for _ in 0..100 {
        if let Ok(t) = TcpTransport::connect(addr) {
            return t;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("server {addr} did not come up");
}

#[test]
fn three_node_cluster_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let peers: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    for node in 0..3u32 {
        let cfg = NodeConfig {
            fsync: litmus_storage::wal::FsyncPolicy::Never,
            seed: 1,
            ..NodeConfig::new(
                node,
                peers[node as usize].clone(),
                dir.path().join(format!("n{node}")),
                "nocc",
                6,
                peers.clone(),
            )
        };
        std::thread::spawn(move || serve(cfg, Arc::new(builtin::catalog()), Arc::new(builtin::registry())));
    }
    let mut a = connect_retry(&peers[0]);
    let mut b = connect_retry(&peers[2]);
    for k in 0..30 {
        // Until the three servers have connected to each other a write may find a peer
        // unreachable; that error is retryable and a client retries it (bounded).
        let started = std::time::Instant::now();
        let r = loop {
            let r = a.request(RequestBody::Call {
                procedure: "kv_put".into(),
                args: vec![Value::Int(k), Value::Bytes(vec![k as u8].into())],
                retrying_for: started.elapsed(),
            });
            match &r {
                Err(e) if e.is_retryable() && started.elapsed() < Duration::from_secs(10) => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => break r,
            }
        };
        assert!(matches!(r, Ok(ResponseBody::Returned(_))), "{r:?}");
    }
    for k in 0..30 {
        let r = b
            .request(RequestBody::Call {
                procedure: "kv_get".into(),
                args: vec![Value::Int(k)],
                retrying_for: Duration::ZERO,
            })
            .unwrap();
        assert_eq!(
            r,
            ResponseBody::Returned(vec![Value::Bytes(vec![k as u8].into())]),
            "written via node 0, read via node 2"
        );
    }
    let err = b
        .request(RequestBody::Call { procedure: "nope".into(), args: vec![], retrying_for: Duration::ZERO })
        .unwrap_err();
    assert!(matches!(err, Error::Invalid(InvalidInput::UnknownProcedure(_))));

    // A garbage frame is answered with a typed rejection and changes nothing.
    let mut raw = std::net::TcpStream::connect(&peers[1]).unwrap();
    raw.write_all(&[0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff]).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let frame = litmus_protocol::wire::read_frame(&mut raw).unwrap();
    assert!(matches!(frame, litmus_protocol::wire::Frame::Rejected(Error::Invalid(_))), "{frame:?}");
    let mut rest = vec![];
    let _ = raw.read_to_end(&mut rest);
    let r = b
        .request(RequestBody::Call {
            procedure: "kv_get".into(),
            args: vec![Value::Int(1)],
            retrying_for: Duration::ZERO,
        })
        .unwrap();
    assert_eq!(r, ResponseBody::Returned(vec![Value::Bytes(vec![1].into())]));
}

/// A client whose connection closes with an interactive transaction open leaves no lock
/// behind: the node rolls the transaction back at once (`RequestBody::Disconnected`), as
/// PostgreSQL does a closed session's, instead of its coordinator vouching for it while its
/// participants wait (`litmus-locking` LK-7). A younger writer of the same row gets it well
/// within the participants' orphan timeout.
#[test]
fn a_closed_connection_rolls_back_its_open_transaction_at_once() {
    use litmus_core::{Isolation, Row};
    use litmus_protocol::op::Op;
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let cfg = NodeConfig {
        fsync: litmus_storage::wal::FsyncPolicy::Never,
        ..NodeConfig::new(0, listen.clone(), dir.path().join("n0"), "acid", 2, vec![listen.clone()])
    };
    std::thread::spawn(move || serve(cfg, Arc::new(builtin::catalog()), Arc::new(builtin::registry())));
    let write = |t: &mut TcpTransport, v: u8| -> Result<(), Error> {
        let txn =
            match t.request(RequestBody::Begin { isolation: Isolation::Serializable, retrying_for: Duration::ZERO })? {
                ResponseBody::Begun(txn) => txn,
                other => panic!("{other:?}"),
            };
        let row = Row::from(vec![Value::Int(1), Value::Bytes(vec![v].into())]);
        t.request(RequestBody::Op { txn, op: Op::Write { table: builtin::KV_TABLE.into(), row } }).map(drop)
    };
    let mut first = connect_retry(&listen);
    write(&mut first, 1).unwrap();
    drop(first); // the write lock on row 1 is held by an open transaction
    let mut second = connect_retry(&listen);
    let started = std::time::Instant::now();
    loop {
        match write(&mut second, 2) {
            Ok(()) => break,
            Err(e) if e.is_retryable() && started.elapsed() < Duration::from_secs(1) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("the closed connection's lock is still held after {:?}: {e}", started.elapsed()),
        }
    }
}
