//! TLS on the TCP runtime, with a CA and certificates generated here (rcgen): a TLS cluster
//! whose peer link and client links carry transactions; plaintext clients, certificate-less
//! clients under mutual TLS, certificates from another CA, and certificate-less peers refused
//! with typed errors while the server keeps serving.

use litmus_core::NodeId;
use litmus_core::{Error, InvalidInput, Value};
use litmus_protocol::builtin;
use litmus_protocol::message::{RequestBody, ResponseBody};
use litmus_protocol::wire::{self, ClusterIdentity, Frame, PROTOCOL_VERSION};
use litmus_runtime::tcp::{serve_until, Credentials, NodeConfig, TcpTransport};
use litmus_runtime::tls::ClientTls;
use litmus_runtime::Transport;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A CA that writes itself and the certificates it signs as PEM files into a directory.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
    dir: PathBuf,
    name: &'static str,
}

impl Ca {
    fn new(dir: &Path, name: &'static str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, format!("{name} test CA"));
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(dir.join(format!("{name}-ca.pem")), cert.pem()).unwrap();
        Ca { cert, key, dir: dir.to_path_buf(), name }
    }

    fn ca_pem(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    /// A leaf certificate for loopback (IP 127.0.0.1 and DNS localhost): (cert, key) paths.
    fn issue(&self, who: &str) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, who);
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let (c, k) =
            (self.dir.join(format!("{}-{who}.pem", self.name)), self.dir.join(format!("{}-{who}.key", self.name)));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    fn client(&self, who: Option<&str>) -> Credentials {
        let tls = match who {
            Some(w) => {
                let (c, k) = self.issue(w);
                ClientTls::load(&self.ca_pem(), Some((&c, &k)), None).unwrap()
            }
            None => ClientTls::load(&self.ca_pem(), None, None).unwrap(),
        };
        Credentials { token: None, tls: Some(tls) }
    }
}

use litmus_runtime::ports::free_port;

/// Stops the servers a test started when it ends (pass or fail).
struct Servers(Arc<AtomicBool>);
impl Drop for Servers {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Starts one server per node of `peers`, each with TLS from `ca` (node certificates from
/// `node_ca(node)`), mutual TLS for clients when `client_auth`.
fn start(
    dir: &Path,
    peers: &[String],
    ca: &Ca,
    client_auth: bool,
    node_ca: impl Fn(u32) -> Option<&'static Ca>,
) -> Servers {
    let stop = Arc::new(AtomicBool::new(false));
    for node in 0..peers.len() as u32 {
        let issuer = node_ca(node);
        let (cert, key) = issuer.map_or_else(|| ca.issue(&format!("node{node}")), |c| c.issue(&format!("node{node}")));
        let cfg = NodeConfig {
            fsync: litmus_storage::wal::FsyncPolicy::Never,
            seed: 1,
            tls_cert: Some(cert),
            tls_key: Some(key),
            tls_ca: Some(ca.ca_pem()),
            tls_client_auth: client_auth,
            hello_timeout_ms: 2_000,
            ..NodeConfig::new(
                node,
                peers[node as usize].clone(),
                dir.join(format!("n{node}")),
                "nocc",
                4,
                peers.to_vec(),
            )
        };
        let stop = stop.clone();
        std::thread::spawn(move || serve_until(cfg, Arc::new(builtin::catalog()), Arc::new(builtin::registry()), stop));
    }
    Servers(stop)
}

fn connect(addr: &str, auth: &Credentials) -> Result<TcpTransport, Error> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpTransport::connect_any_with(&[addr.to_string()], Duration::from_secs(5), auth) {
            Err(Error::Unavailable { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            other => return other,
        }
    }
}

/// A call retried while the cluster is still forming (a peer link not up yet is retryable).
fn call(t: &mut TcpTransport, procedure: &str, args: Vec<Value>) -> Result<ResponseBody, Error> {
    let started = Instant::now();
    loop {
        let r = t.request(RequestBody::Call {
            procedure: procedure.into(),
            args: args.clone(),
            retrying_for: started.elapsed(),
        });
        match &r {
            Err(e) if e.is_retryable() && started.elapsed() < Duration::from_secs(15) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => return r,
        }
    }
}

fn unauthenticated(r: Result<TcpTransport, Error>) -> String {
    match r {
        Err(Error::Invalid(InvalidInput::Unauthenticated(text))) => text,
        Err(e) => panic!("expected Unauthenticated, got {e:?}"),
        Ok(_) => panic!("expected Unauthenticated, got a connection"),
    }
}

fn leak(ca: Ca) -> &'static Ca {
    Box::leak(Box::new(ca))
}

#[test]
fn a_tls_cluster_runs_transactions_over_client_and_peer_links_and_refuses_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "good");
    let peers: Vec<String> = (0..2).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let _servers = start(dir.path(), &peers, &ca, false, |_| None);
    let auth = ca.client(None);
    let mut a = connect(&peers[0], &auth).unwrap();
    let mut b = connect(&peers[1], &auth).unwrap();
    // Written through node 0, read through node 1: with 4 partitions over 2 nodes, half the
    // keys cross the TLS peer link each way.
    for k in 0..20 {
        let r = call(&mut a, "kv_put", vec![Value::Int(k), Value::Bytes(vec![k as u8].into())]);
        assert!(matches!(r, Ok(ResponseBody::Returned(_))), "{r:?}");
    }
    for k in 0..20 {
        let r = call(&mut b, "kv_get", vec![Value::Int(k)]).unwrap();
        assert_eq!(r, ResponseBody::Returned(vec![Value::Bytes(vec![k as u8].into())]), "key {k}");
    }

    // A plaintext client is told, in plaintext, that the server requires TLS.
    let text = unauthenticated(connect(&peers[0], &Credentials::default()));
    assert!(text.contains("requires TLS"), "{text}");
    // A raw plaintext hello gets the same typed rejection frame.
    let mut raw = std::net::TcpStream::connect(&peers[1]).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut hello = Vec::new();
    wire::write_frame(&mut hello, &Frame::HelloClient { version: PROTOCOL_VERSION, expect: None, token: None });
    std::io::Write::write_all(&mut raw, &hello).unwrap();
    let frame = wire::read_frame(&mut raw).unwrap();
    assert!(matches!(frame, Frame::Rejected(Error::Invalid(InvalidInput::Unauthenticated(_)))), "{frame:?}");

    // A client trusting another CA refuses the servers' certificates.
    let other = Ca::new(dir.path(), "other");
    let text = unauthenticated(connect(&peers[0], &other.client(None)));
    assert!(text.contains("certificate"), "{text}");

    // The servers kept serving through all of it.
    let r = call(&mut a, "kv_get", vec![Value::Int(3)]).unwrap();
    assert_eq!(r, ResponseBody::Returned(vec![Value::Bytes(vec![3].into())]));
    let mut c = connect(&peers[1], &auth).unwrap();
    let r = call(&mut c, "kv_get", vec![Value::Int(4)]).unwrap();
    assert_eq!(r, ResponseBody::Returned(vec![Value::Bytes(vec![4].into())]));
}

#[test]
fn mutual_tls_refuses_clients_without_a_certificate_from_the_cluster_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "good");
    let other = Ca::new(dir.path(), "other");
    let peers = vec![format!("127.0.0.1:{}", free_port())];
    let _servers = start(dir.path(), &peers, &ca, true, |_| None);

    let mut ok = connect(&peers[0], &ca.client(Some("alice"))).unwrap();
    let r = call(&mut ok, "kv_put", vec![Value::Int(1), Value::Bytes(vec![1].into())]);
    assert!(matches!(r, Ok(ResponseBody::Returned(_))), "{r:?}");

    // A certificate from another CA (the client itself trusts the server's CA).
    let (c, k) = other.issue("mallory");
    let wrong = Credentials { token: None, tls: Some(ClientTls::load(&ca.ca_pem(), Some((&c, &k)), None).unwrap()) };
    let text = unauthenticated(connect(&peers[0], &wrong));
    assert!(text.contains("refused this client"), "{text}");
    // No certificate at all.
    let text = unauthenticated(connect(&peers[0], &ca.client(None)));
    assert!(text.contains("refused this client"), "{text}");

    // The server kept serving, on the old connection and on new ones.
    let r = call(&mut ok, "kv_get", vec![Value::Int(1)]).unwrap();
    assert_eq!(r, ResponseBody::Returned(vec![Value::Bytes(vec![1].into())]));
    let mut again = connect(&peers[0], &ca.client(Some("bob"))).unwrap();
    assert!(call(&mut again, "kv_get", vec![Value::Int(1)]).is_ok());
}

#[test]
fn a_peer_hello_over_tls_without_a_node_certificate_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "good");
    let peers = vec![format!("127.0.0.1:{}", free_port())];
    let _servers = start(dir.path(), &peers, &ca, false, |_| None);
    // Wait until it serves.
    connect(&peers[0], &ca.client(None)).unwrap();

    let tls = ca.client(None).tls.unwrap();
    let sock = std::net::TcpStream::connect(&peers[0]).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let conn = rustls::ClientConnection::new(tls.config(), tls.server_name(&peers[0]).unwrap()).unwrap();
    let mut s = rustls::StreamOwned::new(conn, sock);
    let hello = Frame::HelloNode {
        version: PROTOCOL_VERSION,
        node: NodeId(1),
        cluster: ClusterIdentity {
            cluster_id: "x".into(),
            nodes: 2,
            partitions: 4,
            engine: "nocc".into(),
            replicas: 1,
        },
        token: None,
    };
    let mut buf = Vec::new();
    wire::write_frame(&mut buf, &hello);
    std::io::Write::write_all(&mut s, &buf).unwrap();
    std::io::Write::flush(&mut s).unwrap();
    let frame = wire::read_frame(&mut s).unwrap();
    let Frame::Rejected(Error::Invalid(InvalidInput::Unauthenticated(text))) = frame else { panic!("{frame:?}") };
    assert!(text.contains("peer link needs a certificate"), "{text}");
}

#[test]
fn a_node_with_a_certificate_from_another_ca_cannot_join_the_peer_links() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "good");
    let rogue = leak(Ca::new(dir.path(), "rogue"));
    let peers: Vec<String> = (0..2).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    // Node 1's certificate is signed by another CA (it still trusts the cluster CA).
    let _servers = start(dir.path(), &peers, &ca, false, |n| (n == 1).then_some(rogue));
    let mut a = connect(&peers[0], &ca.client(None)).unwrap();
    // Keys on node 1's partitions need the peer link, which never comes up: the requests
    // stay unavailable instead of succeeding.
    let started = Instant::now();
    let mut refused = 0;
    for k in 0..8 {
        let r = a.request(RequestBody::Call {
            procedure: "kv_put".into(),
            args: vec![Value::Int(k), Value::Bytes(vec![1].into())],
            retrying_for: started.elapsed(),
        });
        if r.is_err() {
            refused += 1;
            break;
        }
    }
    assert!(refused > 0, "some keys live on node 1, whose peer link must not come up");
}
