//! Who may connect to the SQL port: SQL users with SCRAM-SHA-256 passwords, and TLS.
//!
//! * **Users.** The node config's `pg_users` maps each SQL user to a password, given either as
//!   PostgreSQL's SCRAM verifier (`SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`,
//!   what `litmus pg-password` prints and `pg_authid.rolpassword` holds) or in clear, which is
//!   turned into a verifier with a fresh salt at startup. The server keeps only verifiers. They
//!   are SQL users only: the peers' shared `token` is a different secret. Without `pg_users`
//!   any user and database name are accepted.
//! * **SCRAM-SHA-256** (RFC 5802/7677, PostgreSQL's default since 14), and over TLS also
//!   SCRAM-SHA-256-PLUS, which binds the exchange to the server's certificate. A user that does
//!   not exist gets the same exchange as one that does (against a verifier no password
//!   matches), so a client cannot learn which users exist: both end in `28P01`.
//! * **TLS.** With the node's `tls_cert`/`tls_key`/`tls_ca` set, the SQL port answers
//!   PostgreSQL's `SSLRequest` (and direct TLS) with the same certificate, and refuses a
//!   plaintext startup with `28000`, as the node's own port refuses plaintext. With
//!   `tls_client_auth`, SQL clients must present a certificate signed by the CA too.

use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use futures_util::Sink;
use pgwire::api::auth::sasl::scram::{gen_salted_password, ScramAuth, ScramSecret, SCRAM_ITERATIONS};
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::{AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler};
use pgwire::api::{ClientInfo, ErrorHandler, PidSecretKeyGenerator, METADATA_USER};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Debug};
use std::sync::Arc;

const PREFIX: &str = "SCRAM-SHA-256$";

/// A user's stored secret: PostgreSQL's SCRAM-SHA-256 verifier, parsed.
#[derive(Clone, PartialEq, Eq)]
pub struct Verifier {
    salt: Vec<u8>,
    iterations: usize,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
}

impl Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier").field("iterations", &self.iterations).finish_non_exhaustive()
    }
}

impl Verifier {
    /// The verifier of `password` with a fresh random salt and PostgreSQL's default 4096
    /// iterations.
    pub fn of_password(password: &str) -> Verifier {
        let salt: [u8; 16] = rand::random();
        Self::with_salt(password, &salt, SCRAM_ITERATIONS)
    }

    fn with_salt(password: &str, salt: &[u8], iterations: usize) -> Verifier {
        let salted = gen_salted_password(password, salt, iterations);
        match ScramSecret::verifier_from_salted_password(salt.to_vec(), salted, iterations) {
            ScramSecret::Verifier { salt, iterations, stored_key, server_key } => {
                Verifier { salt, iterations, stored_key, server_key }
            }
            ScramSecret::SaltedPassword { .. } => unreachable!("verifier_from_salted_password makes a verifier"),
        }
    }

    /// Parses PostgreSQL's text form, `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`
    /// (base64 parts).
    pub fn parse(text: &str) -> Result<Verifier, String> {
        let bad = |why: &str| {
            format!(
                "not a SCRAM-SHA-256 verifier ({why}): expected {PREFIX}<iterations>:<salt>$<StoredKey>:<ServerKey>"
            )
        };
        let rest = text.strip_prefix(PREFIX).ok_or_else(|| bad("prefix"))?;
        let (params, keys) = rest.split_once('$').ok_or_else(|| bad("no '$' before the keys"))?;
        let (iterations, salt) = params.split_once(':').ok_or_else(|| bad("no ':' after the iterations"))?;
        let (stored, server) = keys.split_once(':').ok_or_else(|| bad("no ':' between the keys"))?;
        let iterations: usize = iterations.parse().map_err(|_| bad("iterations is not a number"))?;
        if iterations == 0 {
            return Err(bad("zero iterations"));
        }
        let decode = |part: &str, what: &str| STANDARD.decode(part).map_err(|_| bad(&format!("{what} is not base64")));
        let (salt, stored_key, server_key) =
            (decode(salt, "salt")?, decode(stored, "StoredKey")?, decode(server, "ServerKey")?);
        if stored_key.len() != 32 || server_key.len() != 32 {
            return Err(bad("keys are not 32 bytes"));
        }
        Ok(Verifier { salt, iterations, stored_key, server_key })
    }

    fn secret(&self) -> ScramSecret {
        ScramSecret::Verifier {
            salt: self.salt.clone(),
            iterations: self.iterations,
            stored_key: self.stored_key.clone(),
            server_key: self.server_key.clone(),
        }
    }
}

impl fmt::Display for Verifier {
    /// PostgreSQL's text form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}{}:{}${}:{}",
            self.iterations,
            STANDARD.encode(&self.salt),
            STANDARD.encode(&self.stored_key),
            STANDARD.encode(&self.server_key)
        )
    }
}

/// The SQL users and their verifiers.
pub struct Users {
    by_name: HashMap<String, Verifier>,
    /// What a user that does not exist is checked against: a verifier of a random password,
    /// so the exchange looks the same and fails at the proof.
    decoy: Verifier,
}

impl Debug for Users {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Users").field("names", &self.by_name.keys().collect::<Vec<_>>()).finish_non_exhaustive()
    }
}

impl Users {
    /// From the config's `pg_users` (name to verifier or clear password). An entry that looks
    /// like a verifier but is not one is an error naming the user, never a clear password.
    pub fn from_config(users: &BTreeMap<String, String>) -> Result<Users, String> {
        let mut by_name = HashMap::new();
        for (name, secret) in users {
            if name.is_empty() {
                return Err("pg_users: a user name is empty".into());
            }
            let verifier = if secret.starts_with(PREFIX) {
                Verifier::parse(secret).map_err(|e| format!("pg_users.{name}: {e}"))?
            } else if secret.is_empty() {
                return Err(format!("pg_users.{name}: the password is empty"));
            } else {
                Verifier::of_password(secret)
            };
            by_name.insert(name.clone(), verifier);
        }
        let decoy: [u8; 32] = rand::random();
        Ok(Users { by_name, decoy: Verifier::of_password(&STANDARD.encode(decoy)) })
    }

    /// How many users there are.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

#[async_trait]
impl AuthSource for Users {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        // Only SCRAM is offered; a clear-text or MD5 exchange never asks for this.
        Err(PgWireError::InvalidPassword(login.user().unwrap_or_default().to_owned()))
    }

    async fn get_scram_secret(&self, login: &LoginInfo) -> PgWireResult<(ScramSecret, Option<()>)> {
        let user = login.user().ok_or(PgWireError::UserNameRequired)?;
        let verifier = self.by_name.get(user).unwrap_or(&self.decoy);
        Ok((verifier.secret(), None))
    }
}

/// TLS on the SQL port: the node's acceptor and certificate.
#[derive(Clone)]
pub struct SqlTls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// The node's certificate chain (PEM), for SCRAM's channel binding.
    pub cert_pem: Vec<u8>,
}

/// How the SQL port admits connections.
#[derive(Clone, Default)]
pub struct Security {
    /// SQL users; `None` accepts any user and database name.
    pub users: Option<Arc<Users>>,
    /// TLS, required of every connection when set.
    pub tls: Option<SqlTls>,
}

impl Security {
    /// The SCRAM mechanism for these users, with channel binding when TLS is on.
    pub(crate) fn scram(&self) -> Result<Option<ScramAuth>, String> {
        let Some(users) = &self.users else { return Ok(None) };
        let mut scram = ScramAuth::new(users.clone());
        if let Some(tls) = &self.tls {
            scram
                .configure_certificate(&tls.cert_pem)
                .map_err(|e| format!("tls_cert for SCRAM channel binding: {e}"))?;
        }
        Ok(Some(scram))
    }
}

/// What a connection's startup goes through: the TLS requirement, then either no
/// authentication or SCRAM.
pub(crate) struct Gate<Open> {
    pub require_tls: bool,
    pub open: Arc<Open>,
    pub scram: Option<SASLAuthStartupHandler<DefaultServerParameterProvider>>,
}

impl<Open: PidSecretKeyGenerator + 'static> Gate<Open> {
    pub fn new(security: &Security, scram: Option<&ScramAuth>, open: Arc<Open>) -> Gate<Open> {
        let scram = scram.map(|s| {
            SASLAuthStartupHandler::new(Arc::new(DefaultServerParameterProvider::default()))
                .with_scram(s.clone())
                .with_pid_secret_key_generator(open.clone())
        });
        Gate { require_tls: security.tls.is_some(), open, scram }
    }
}

/// Rewrites a failed password check as PostgreSQL words it, naming the user of the startup
/// message (SCRAM's own user field is empty: libpq sends the name only at startup).
pub(crate) struct Errors;

impl ErrorHandler for Errors {
    fn on_error<C: ClientInfo>(&self, client: &C, error: &mut PgWireError) {
        if let PgWireError::InvalidPassword(_) = error {
            let user = client.metadata().get(METADATA_USER).cloned().unwrap_or_default();
            *error = PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".to_owned(),
                "28P01".to_owned(),
                format!("password authentication failed for user \"{user}\""),
            )));
        }
    }
}

fn tls_required() -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".to_owned(),
        "28000".to_owned(),
        "this server requires TLS: connect with sslmode=require (or verify-full with the cluster's CA)".to_owned(),
    )))
}

#[async_trait]
impl<Open> StartupHandler for Gate<Open>
where
    Open: StartupHandler + PidSecretKeyGenerator + 'static,
{
    async fn on_startup<C>(&self, client: &mut C, message: PgWireFrontendMessage) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if self.require_tls && !client.is_secure() {
            return Err(tls_required());
        }
        match &self.scram {
            Some(scram) => scram.on_startup(client, message).await,
            None => self.open.on_startup(client, message).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example: password "pencil", salt `W22ZaJ0SNY7soEsUEjb6gQ==`,
    /// 4096 iterations; the keys are what PostgreSQL stores for that password and salt.
    #[test]
    fn rfc_7677_a_verifier_is_the_stored_and_server_keys_of_the_salted_password() {
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let v = Verifier::with_salt("pencil", &salt, 4096);
        let text = v.to_string();
        assert_eq!(
            text,
            "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="
        );
        assert_eq!(Verifier::parse(&text).unwrap(), v);
    }

    #[test]
    fn a_malformed_verifier_is_refused_naming_the_user() {
        for bad in
            ["SCRAM-SHA-256$x:c2FsdA==$a:b", "SCRAM-SHA-256$4096:c2FsdA==", "SCRAM-SHA-256$4096:c2FsdA==$YQ==:YQ=="]
        {
            let users = BTreeMap::from([("alice".to_string(), bad.to_string())]);
            let e = Users::from_config(&users).unwrap_err();
            assert!(e.starts_with("pg_users.alice: not a SCRAM-SHA-256 verifier"), "{bad}: {e}");
        }
        let empty = BTreeMap::from([("bob".to_string(), String::new())]);
        assert!(Users::from_config(&empty).unwrap_err().contains("pg_users.bob"));
    }

    #[test]
    fn a_clear_password_is_kept_only_as_a_verifier_with_a_fresh_salt() {
        let users = BTreeMap::from([("alice".to_string(), "secret".to_string())]);
        let (a, b) = (Users::from_config(&users).unwrap(), Users::from_config(&users).unwrap());
        let (va, vb) = (&a.by_name["alice"], &b.by_name["alice"]);
        assert_ne!(va.salt, vb.salt);
        assert_eq!(*va, Verifier::with_salt("secret", &va.salt, va.iterations));
        assert!(!format!("{a:?}{va:?}").contains("secret"));
    }
}
