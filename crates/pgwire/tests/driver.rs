//! A PostgreSQL driver we did not write (tokio-postgres) against the endpoint: prepared
//! statements with binary parameters and results, transactions, and SQLSTATEs.

mod common;

use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

async fn connect(addr: std::net::SocketAddr) -> tokio_postgres::Client {
    let url = format!("host={} port={} user=test dbname=test", addr.ip(), addr.port());
    let (client, conn) = tokio_postgres::connect(&url, NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

#[tokio::test]
async fn tokio_postgres_prepares_binds_reads_and_sees_sqlstates() {
    let addr = common::start(litmus_engines::ACID);
    let c = connect(addr).await;
    c.batch_execute("CREATE TABLE users (id BIGINT PRIMARY KEY, name TEXT NOT NULL, score INT, joined TIMESTAMP)")
        .await
        .unwrap();
    let insert = c.prepare("INSERT INTO users (id, name, score) VALUES ($1, $2, $3)").await.unwrap();
    assert_eq!(
        insert.params(),
        &[tokio_postgres::types::Type::INT8, tokio_postgres::types::Type::TEXT, tokio_postgres::types::Type::INT4]
    );
    for (id, name, score) in [(1i64, "ada", 10i32), (2, "bo", 20), (3, "cy", 30)] {
        assert_eq!(c.execute(&insert, &[&id, &name, &score]).await.unwrap(), 1);
    }
    let rows = c.query("SELECT id, name, score FROM users WHERE score >= $1 ORDER BY id", &[&20i32]).await.unwrap();
    let got: Vec<(i64, String, i32)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    assert_eq!(got, vec![(2, "bo".to_string(), 20), (3, "cy".to_string(), 30)]);
    let total: i64 = c.query_one("SELECT count(*) FROM users", &[]).await.unwrap().get(0);
    assert_eq!(total, 3);

    // x = x + $1 in a transaction that rolls back, then in one that commits.
    c.batch_execute("BEGIN").await.unwrap();
    c.execute("UPDATE users SET score = score + $1 WHERE id = $2", &[&5i32, &1i64]).await.unwrap();
    c.batch_execute("ROLLBACK").await.unwrap();
    c.execute("UPDATE users SET score = score + $1 WHERE id = $2", &[&7i32, &1i64]).await.unwrap();
    let score: i32 = c.query_one("SELECT score FROM users WHERE id = $1", &[&1i64]).await.unwrap().get(0);
    assert_eq!(score, 17);

    let dup = c.execute(&insert, &[&1i64, &"again", &0i32]).await.unwrap_err();
    assert_eq!(dup.code(), Some(&SqlState::UNIQUE_VIOLATION));
    let missing = c.query("SELECT * FROM nowhere", &[]).await.unwrap_err();
    assert_eq!(missing.code(), Some(&SqlState::UNDEFINED_TABLE));
    let bad = c.batch_execute("SELEKT 1").await.unwrap_err();
    assert_eq!(bad.code(), Some(&SqlState::SYNTAX_ERROR));
    let unsupported = c.batch_execute("SELECT id FROM users UNION SELECT id FROM users").await.unwrap_err();
    assert_eq!(unsupported.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED));

    // A connection dropped mid-transaction leaves nothing behind.
    let gone = connect(addr).await;
    gone.batch_execute("BEGIN; INSERT INTO users (id, name) VALUES (9, 'ghost')").await.unwrap();
    drop(gone);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let ghosts: i64 = c.query_one("SELECT count(*) FROM users WHERE id = 9", &[]).await.unwrap().get(0);
    assert_eq!(ghosts, 0);
}

/// A cancel request (`CancelToken::cancel_query`, what psql sends on Ctrl-C) stops the
/// statement running on the connection whose key it presents: a long nested-loop join ends
/// with `57014` well before it would have finished, its transaction is rolled back as after
/// any error, and the connection serves the next statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_stops_the_running_statement_with_57014() {
    let addr = common::start(litmus_engines::ACID);
    let c = connect(addr).await;
    c.batch_execute("CREATE TABLE n (k INT PRIMARY KEY)").await.unwrap();
    let values: Vec<String> = (0..400).map(|k| format!("({k})")).collect();
    c.batch_execute(&format!("INSERT INTO n VALUES {}", values.join(", "))).await.unwrap();
    // 400 × 400 × 400 rows by nested loops: far longer than this test waits.
    let long = "SELECT count(*) FROM n a, n b, n c WHERE a.k + b.k + c.k < 0";
    let token = c.cancel_token();
    let started = std::time::Instant::now();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        token.cancel_query(NoTls).await.unwrap();
    });
    let e = c.query(long, &[]).await.expect_err("cancelled");
    canceller.await.unwrap();
    assert_eq!(e.code(), Some(&SqlState::QUERY_CANCELED), "{e}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "stopped at the cancel: {:?}", started.elapsed());
    let n: i64 = c.query_one("SELECT count(*) FROM n", &[]).await.unwrap().get(0);
    assert_eq!(n, 400, "the connection goes on");
    // In a transaction: the cancel fails it, as any error does.
    c.batch_execute("BEGIN; INSERT INTO n VALUES (1000)").await.unwrap();
    let token = c.cancel_token();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        token.cancel_query(NoTls).await.unwrap();
    });
    assert_eq!(c.query(long, &[]).await.unwrap_err().code(), Some(&SqlState::QUERY_CANCELED));
    let failed = c.query("SELECT 1", &[]).await.unwrap_err();
    assert_eq!(failed.code(), Some(&SqlState::IN_FAILED_SQL_TRANSACTION));
    c.batch_execute("ROLLBACK").await.unwrap();
    let n: i64 = c.query_one("SELECT count(*) FROM n", &[]).await.unwrap().get(0);
    assert_eq!(n, 400, "the cancelled transaction left nothing");
}

/// SQL users: tokio-postgres authenticates with SCRAM-SHA-256 against a verifier (as `litmus
/// pg-password` prints one) and against a password given in clear; a wrong password and an
/// unknown user are both refused with `28P01`, and no statement runs without a password.
#[tokio::test]
async fn tokio_postgres_authenticates_with_scram_and_a_wrong_password_gets_28p01() {
    use litmus_pgwire::auth::{Security, Users, Verifier};
    let users = std::collections::BTreeMap::from([
        ("alice".to_string(), Verifier::of_password("s3cret").to_string()),
        ("bob".to_string(), "hunter2".to_string()),
    ]);
    let security = Security { users: Some(std::sync::Arc::new(Users::from_config(&users).unwrap())), tls: None };
    let addr = common::start_with(litmus_engines::ACID, security);
    let login = |user: &str, password: &str| {
        format!("host={} port={} user={user} password={password} dbname=app", addr.ip(), addr.port())
    };
    for (user, password) in [("alice", "s3cret"), ("bob", "hunter2")] {
        let (c, conn) = tokio_postgres::connect(&login(user, password), NoTls).await.unwrap();
        tokio::spawn(conn);
        let two: i32 = c.query_one("SELECT 1 + 1", &[]).await.unwrap().get(0);
        assert_eq!(two, 2, "{user}");
    }
    for (user, password) in [("alice", "hunter2"), ("mallory", "s3cret")] {
        let e = tokio_postgres::connect(&login(user, password), NoTls).await.err().expect("refused");
        assert_eq!(e.code(), Some(&SqlState::INVALID_PASSWORD), "{user}: {e}");
        let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert_eq!(message, format!("password authentication failed for user \"{user}\""));
    }
    let url = format!("host={} port={} user=alice dbname=app", addr.ip(), addr.port());
    let e = tokio_postgres::connect(&url, NoTls).await.err().expect("no password");
    assert!(format!("{e:?}").contains("password missing"), "{e:?}");
}
