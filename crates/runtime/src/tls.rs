//! TLS for the TCP runtime: `rustls` with the `ring` provider, on client and peer links.
//!
//! TLS is a property of the byte stream only: the frames inside are the same as on a plaintext
//! link, and the state machines never see it. A server with TLS configured
//!
//! * presents `tls_cert`/`tls_key` to clients and peers, and verifies peers (and, with
//!   `tls_client_auth`, every client) against `tls_ca`;
//! * dials its peers over TLS, presenting the same certificate as a client certificate, so a
//!   peer link is always mutually authenticated;
//! * answers a plaintext hello with `Rejected(Unauthenticated("this server requires TLS…"))`
//!   in plaintext (so the client reads why) and closes the connection.
//!
//! Certificate problems are typed: a bad PEM path or file is `Invalid(Config)`, a handshake
//! refused over a certificate is `Invalid(Unauthenticated)` naming rustls's cause.

use litmus_core::{Error, InvalidInput};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn config_error(what: &str, path: &Path, e: impl fmt::Display) -> Error {
    InvalidInput::Config(format!("{what} {}: {e}", path.display())).into()
}

/// The certificates in a PEM file (a chain: leaf first), or a `Config` error naming the file.
pub fn load_certs(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| config_error(what, path, pem_error(e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| config_error(what, path, pem_error(e)))?;
    if certs.is_empty() {
        return Err(config_error(what, path, "no CERTIFICATE PEM block in the file"));
    }
    Ok(certs)
}

/// The private key in a PEM file (PKCS#8, PKCS#1 or SEC1), or a `Config` error naming the file.
pub fn load_key(what: &str, path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| config_error(what, path, pem_error(e)))
}

/// The CA certificates of a PEM file as a root store.
pub fn load_roots(what: &str, path: &Path) -> Result<RootCertStore, Error> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(what, path)? {
        roots.add(cert).map_err(|e| config_error(what, path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}

fn pem_error(e: rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error as E;
    match e {
        E::Io(io) => io.to_string(),
        E::NoItemsFound => "no matching PEM block in the file".into(),
        other => format!("not valid PEM: {other:?}"),
    }
}

/// The TLS name to verify a server against: the host part of `host:port` (an IP address or a
/// DNS name), unless `name` overrides it.
pub fn server_name(addr: &str, name: Option<&str>) -> Result<ServerName<'static>, Error> {
    let host = match name {
        Some(n) => n,
        None => match addr.parse::<SocketAddr>() {
            Ok(sa) => return Ok(ServerName::IpAddress(sa.ip().into())),
            Err(_) => addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_start_matches('[').trim_end_matches(']'),
        },
    };
    ServerName::try_from(host.to_string())
        .map_err(|e| InvalidInput::Config(format!("{host:?} is not a TLS server name: {e}")).into())
}

/// A client's TLS settings: the CA that signed the servers' certificates and, for servers that
/// require client certificates, the client's own certificate and key.
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<ClientConfig>,
    /// Verify servers against this name instead of the host part of their address.
    name: Option<String>,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls").field("name", &self.name).finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Loads `ca` (PEM) and, when given, the client certificate chain and key (PEM).
    pub fn load(ca: &Path, cert_key: Option<(&Path, &Path)>, name: Option<&str>) -> Result<ClientTls, Error> {
        let roots = load_roots("tls CA", ca)?;
        let identity = match cert_key {
            Some((cert, key)) => Some((load_certs("tls certificate", cert)?, load_key("tls key", key)?)),
            None => None,
        };
        Self::from_parts(roots, identity, name)
    }

    /// The same from certificates already in memory.
    pub fn from_parts(
        roots: RootCertStore,
        identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
        name: Option<&str>,
    ) -> Result<ClientTls, Error> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Internal(format!("tls: {e}")))?
            .with_root_certificates(roots);
        let config = match identity {
            Some((chain, key)) => builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| InvalidInput::Config(format!("tls certificate and key do not fit together: {e}")))?,
            None => builder.with_no_client_auth(),
        };
        if let Some(n) = name {
            server_name("", Some(n))?;
        }
        Ok(ClientTls { config: Arc::new(config), name: name.map(str::to_string) })
    }

    pub fn config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }

    /// The name to verify the server at `addr` against.
    pub fn server_name(&self, addr: &str) -> Result<ServerName<'static>, Error> {
        server_name(addr, self.name.as_deref())
    }
}

/// A server's TLS settings (the node config's `tls_*` keys).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    /// Require every client to present a certificate signed by `ca`.
    pub client_auth: bool,
}

/// What a TLS server holds: its acceptor, and the client side it dials its peers with.
#[derive(Clone)]
pub struct ServerTls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// Presents this node's certificate to its peers and verifies theirs against the CA.
    pub peers: ClientTls,
    pub client_auth: bool,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls").field("client_auth", &self.client_auth).finish_non_exhaustive()
    }
}

impl ServerTls {
    pub fn load(files: &TlsFiles) -> Result<ServerTls, Error> {
        let chain = load_certs("tls_cert", &files.cert)?;
        let key = load_key("tls_key", &files.key)?;
        let roots = load_roots("tls_ca", &files.ca)?;
        Self::from_parts(chain, key, roots, files.client_auth)
    }

    pub fn from_parts(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        roots: RootCertStore,
        client_auth: bool,
    ) -> Result<ServerTls, Error> {
        let config = server_config(chain.clone(), key.clone_key(), roots.clone(), client_auth)?;
        let peers = ClientTls::from_parts(roots, Some((chain, key)), None)?;
        Ok(ServerTls { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)), peers, client_auth })
    }

    /// An acceptor for another protocol served beside the node's own (the SQL port), with the
    /// same certificate and client verification, offering `alpn` (PostgreSQL's direct TLS
    /// requires `postgresql`). Returns it with the certificate chain's PEM text.
    pub fn acceptor_for(files: &TlsFiles, alpn: &[u8]) -> Result<(tokio_rustls::TlsAcceptor, Vec<u8>), Error> {
        let chain = load_certs("tls_cert", &files.cert)?;
        let key = load_key("tls_key", &files.key)?;
        let roots = load_roots("tls_ca", &files.ca)?;
        let mut config = server_config(chain, key, roots, files.client_auth)?;
        config.alpn_protocols = vec![alpn.to_vec()];
        let pem = std::fs::read(&files.cert).map_err(|e| config_error("tls_cert", &files.cert, e))?;
        Ok((tokio_rustls::TlsAcceptor::from(Arc::new(config)), pem))
    }
}

fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    roots: RootCertStore,
    client_auth: bool,
) -> Result<ServerConfig, Error> {
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
    // Client certificates are always verified when offered (peers always offer theirs);
    // with `client_auth` they are also required.
    let verifier = if client_auth { verifier } else { verifier.allow_unauthenticated() };
    let verifier = verifier.build().map_err(|e| InvalidInput::Config(format!("tls_ca: {e}")))?;
    ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Internal(format!("tls: {e}")))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| InvalidInput::Config(format!("tls_cert and tls_key do not fit together: {e}")).into())
}

/// The first byte of a TLS record carrying a handshake (a ClientHello starts with it). A
/// plaintext hello starts with its length prefix, whose first byte is 0 for any frame under
/// 16 MiB, so the two never meet.
pub const TLS_HANDSHAKE_BYTE: u8 = 0x16;

/// The rustls error inside an I/O error, if that is what it is.
pub fn rustls_cause(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

/// A client-side TLS failure talking to `addr`, typed: a certificate refused on either side
/// is `Invalid(Unauthenticated)` naming the cause; a server that does not speak TLS says so;
/// anything else is the connection being unavailable.
pub fn client_error(addr: &str, e: &std::io::Error) -> Error {
    match rustls_cause(e) {
        Some(rustls::Error::InvalidMessage(m)) => InvalidInput::Unauthenticated(format!(
            "TLS handshake with {addr} failed: the server did not answer in TLS ({m:?}); is it running without TLS?"
        ))
        .into(),
        Some(rustls::Error::AlertReceived(alert)) => InvalidInput::Unauthenticated(format!(
            "TLS: the server at {addr} refused this client ({alert:?}); it may require a client certificate \
             signed by its CA (--tls-cert/--tls-key)"
        ))
        .into(),
        Some(cause) => InvalidInput::Unauthenticated(format!("TLS handshake with {addr} failed: {cause}")).into(),
        None => Error::unavailable(format!("connect {addr}: {e}")),
    }
}

/// The warning a server logs at start when it listens beyond loopback without TLS (`None`
/// when it needs none). An unspecified address (`0.0.0.0`, `::`) listens on every interface.
pub fn plaintext_warning(listen: SocketAddr, tls: bool, token: bool) -> Option<String> {
    if tls || listen.ip().is_loopback() {
        return None;
    }
    let token = if token { ", data and the cluster token" } else { " and data, unauthenticated," };
    Some(format!(
        "listening on {listen} (not loopback) WITHOUT TLS: requests{token} cross the network in the clear. \
         Set tls_cert, tls_key and tls_ca in the config (see README, \"TLS\")"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plaintext_listener_beyond_loopback_is_warned_about() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        for quiet in ["127.0.0.1:7100", "[::1]:7100", "127.0.0.2:1"] {
            assert_eq!(plaintext_warning(at(quiet), false, false), None, "{quiet}");
        }
        for loud in ["0.0.0.0:7100", "[::]:7100", "10.0.0.5:7100", "192.168.1.2:7100"] {
            let w = plaintext_warning(at(loud), false, true).unwrap_or_default();
            assert!(w.contains("WITHOUT TLS") && w.contains("cluster token"), "{loud}: {w}");
            assert_eq!(plaintext_warning(at(loud), true, true), None, "{loud} with TLS");
        }
    }

    #[test]
    fn tls_config_keys_go_together_and_a_partial_set_names_what_is_missing() {
        let mut cfg = crate::tcp::NodeConfig::new(0, "127.0.0.1:1".into(), "d".into(), "acid", 1, vec!["a".into()]);
        assert_eq!(cfg.tls_files(), Ok(None));
        cfg.tls_client_auth = true;
        let Err(InvalidInput::Config(text)) = cfg.tls_files() else { panic!("client auth without TLS") };
        assert!(text.contains("missing tls_cert, tls_key, tls_ca"), "{text}");
        cfg.tls_cert = Some("c.pem".into());
        cfg.tls_ca = Some("ca.pem".into());
        let Err(InvalidInput::Config(text)) = cfg.tls_files() else { panic!("no key") };
        assert!(text.contains("missing tls_key") && !text.contains("tls_ca,"), "{text}");
        cfg.tls_key = Some("k.pem".into());
        assert_eq!(cfg.tls_files().unwrap().map(|f| f.client_auth), Some(true));
    }

    #[test]
    fn server_names_come_from_the_address_host_or_the_override() {
        assert!(matches!(server_name("127.0.0.1:7100", None), Ok(ServerName::IpAddress(_))));
        assert!(matches!(server_name("[::1]:7100", None), Ok(ServerName::IpAddress(_))));
        assert_eq!(server_name("db1.example:7100", None).unwrap().to_str(), "db1.example");
        assert_eq!(server_name("127.0.0.1:7100", Some("node0")).unwrap().to_str(), "node0");
        assert!(matches!(server_name("x:1", Some("not a name!")), Err(Error::Invalid(InvalidInput::Config(_)))));
    }

    #[test]
    fn bad_pem_paths_and_files_are_config_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not pem at all\n").unwrap();
        for (p, what) in [(&missing, "No such file"), (&garbage, "PEM block")] {
            for e in [
                ClientTls::load(p, None, None).unwrap_err(),
                ServerTls::load(&TlsFiles { cert: p.clone(), key: p.clone(), ca: p.clone(), client_auth: false })
                    .unwrap_err(),
            ] {
                let Error::Invalid(InvalidInput::Config(text)) = &e else { panic!("{e:?}") };
                assert!(text.contains(&p.display().to_string()) && text.contains(what), "{text}");
            }
        }
    }
}
