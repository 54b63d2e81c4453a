//! SQL on the engines that run one-round transactions only (`granola`, `granola-locking`,
//! `sinfonia`): optimistic transactions whose commit is one minitransaction (Sinfonia §3).
//! What they read must still be current when they write, so a lost update, a write on a
//! stale read and a phantom each abort with `40001`, and nothing of the aborted transaction
//! stays.

mod common;

use common::{cluster, code, rows, run, session};
use litmus_protocol::EngineKind;
use litmus_sql::Output;

const ONE_ROUND: [EngineKind; 3] = [litmus_engines::GRANOLA, litmus_engines::GRANOLA_LOCKING, litmus_engines::SINFONIA];

#[test]
fn statements_and_transactions_run_with_their_usual_answers_and_errors() {
    for engine in ONE_ROUND {
        let name = engine.name();
        let c = cluster(engine);
        let mut s = session(&c, 1);
        run(&mut s, "CREATE TABLE t (k INT PRIMARY KEY, v TEXT NOT NULL, n INT CHECK (n >= 0))").unwrap();
        run(&mut s, "INSERT INTO t VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3)").unwrap();
        assert_eq!(code(&mut s, "INSERT INTO t VALUES (4, 'd', 4), (1, 'dup', 0)"), "23505", "{name}");
        assert_eq!(code(&mut s, "INSERT INTO t VALUES (5, NULL, 1)"), "23502", "{name}");
        assert_eq!(code(&mut s, "UPDATE t SET n = n - 3 WHERE k = 2"), "23514", "{name}");
        assert_eq!(code(&mut s, "SELECT * FROM nope"), "42P01", "{name}");
        assert_eq!(code(&mut s, "CREATE TABLE t (k INT)"), "42P07", "{name}");
        assert_eq!(rows(&mut s, "SELECT k, n FROM t ORDER BY k"), vec![vec!["1", "1"], vec!["2", "2"], vec!["3", "3"]]);
        assert_eq!(
            run(&mut s, "UPDATE t SET n = n * 10 WHERE k >= 2").unwrap(),
            Output::Command("UPDATE 2".into()),
            "{name}"
        );
        assert_eq!(rows(&mut s, "SELECT sum(n), count(*) FROM t"), vec![vec!["51", "3"]], "{name}");

        // A transaction block reads its own writes and commits them together ...
        run(&mut s, "BEGIN; INSERT INTO t VALUES (7, 'g', 7); UPDATE t SET n = n + 1 WHERE k = 7").unwrap();
        assert_eq!(rows(&mut s, "SELECT n FROM t WHERE k = 7"), vec![vec!["8"]], "{name}");
        assert_eq!(rows(&mut s, "SELECT count(*) FROM t"), vec![vec!["4"]], "{name}: the scan sees its insert");
        run(&mut s, "DELETE FROM t WHERE k = 1").unwrap();
        assert_eq!(rows(&mut s, "SELECT k FROM t ORDER BY k"), vec![vec!["2"], vec!["3"], vec!["7"]], "{name}");
        assert_eq!(run(&mut s, "COMMIT").unwrap(), Output::End("COMMIT"));
        // ... rolls them back whole, and fails as PostgreSQL's does.
        run(&mut s, "BEGIN; DELETE FROM t; INSERT INTO t VALUES (9, 'i', 9); ROLLBACK").unwrap();
        run(&mut s, "BEGIN").unwrap();
        assert_eq!(code(&mut s, "INSERT INTO t VALUES (2, 'x', 0)"), "23505", "{name}");
        assert_eq!(code(&mut s, "SELECT 1"), "25P02", "{name}");
        assert_eq!(run(&mut s, "COMMIT").unwrap(), Output::End("ROLLBACK"));
        assert_eq!(
            rows(&mut s, "SELECT k, n FROM t ORDER BY k"),
            vec![vec!["2", "20"], vec!["3", "30"], vec!["7", "8"]]
        );
        run(&mut s, "DROP TABLE t").unwrap();
        assert_eq!(code(&mut s, "SELECT * FROM t"), "42P01", "{name}");
        c.shutdown().unwrap();
    }
}

/// Two transactions read the same row and both write it: the second to commit finds its read
/// changed (`40001`), so the first one's increment is not lost.
#[test]
fn sinfonia_3_a_write_on_a_read_that_changed_fails_its_compare_and_no_update_is_lost() {
    for engine in ONE_ROUND {
        let name = engine.name();
        let c = cluster(engine);
        let (mut a, mut b) = (session(&c, 2), session(&c, 3));
        run(&mut a, "CREATE TABLE c (id INT PRIMARY KEY, v INT); INSERT INTO c VALUES (1, 0)").unwrap();
        run(&mut a, "BEGIN; UPDATE c SET v = v + 1 WHERE id = 1").unwrap();
        run(&mut b, "BEGIN; UPDATE c SET v = v + 10 WHERE id = 1").unwrap();
        assert_eq!(run(&mut a, "COMMIT").unwrap(), Output::End("COMMIT"), "{name}");
        let e = run(&mut b, "COMMIT").expect_err(name);
        assert_eq!(e.code, "40001", "{name}: {e}");
        assert_eq!(rows(&mut b, "SELECT v FROM c"), vec![vec!["1"]], "{name}");
        c.shutdown().unwrap();
    }
}

/// A transaction counted the rows of a range; another inserted into the range before it
/// committed: its commit aborts (the page it read no longer holds what it held).
#[test]
fn sinfonia_3_a_phantom_in_a_range_read_fails_the_range_compare() {
    for engine in ONE_ROUND {
        let name = engine.name();
        let c = cluster(engine);
        let (mut a, mut b) = (session(&c, 4), session(&c, 5));
        run(&mut a, "CREATE TABLE r (k INT PRIMARY KEY, v INT); CREATE TABLE log (n INT PRIMARY KEY)").unwrap();
        run(&mut a, "INSERT INTO r VALUES (1, 1), (2, 2)").unwrap();
        run(&mut a, "BEGIN").unwrap();
        assert_eq!(rows(&mut a, "SELECT count(*) FROM r"), vec![vec!["2"]]);
        run(&mut a, "INSERT INTO log VALUES (2)").unwrap();
        run(&mut b, "INSERT INTO r VALUES (3, 3)").unwrap();
        let e = run(&mut a, "COMMIT").expect_err(name);
        assert_eq!(e.code, "40001", "{name}: {e}");
        assert!(rows(&mut b, "SELECT n FROM log").is_empty(), "{name}: the aborted insert stayed");
        c.shutdown().unwrap();
    }
}

/// Clients increment counters at once, each statement its own transaction; the session
/// retries the ones whose compare failed. Every increment is counted once.
#[test]
fn concurrent_increments_each_count_once() {
    const THREADS: usize = 4;
    const EACH: usize = 25;
    for engine in ONE_ROUND {
        let name = engine.name();
        let c = cluster(engine);
        let mut s = session(&c, 6);
        run(&mut s, "CREATE TABLE n (id INT PRIMARY KEY, v INT); INSERT INTO n VALUES (1, 0), (2, 0)").unwrap();
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let mut s = session(&c, 10 + t as u64);
                scope.spawn(move || {
                    for i in 0..EACH {
                        let id = 1 + (t + i) % 2;
                        let sql = format!("UPDATE n SET v = v + 1 WHERE id = {id}");
                        run(&mut s, &sql).unwrap_or_else(|e| panic!("{name}: {sql}: {e}"));
                    }
                });
            }
        });
        assert_eq!(rows(&mut s, "SELECT sum(v) FROM n"), vec![vec![(THREADS * EACH).to_string()]], "{name}");
        c.shutdown().unwrap();
    }
}

/// A transaction read a row, another changed it and its twin together, then the first read
/// the twin and divided by it: an error from rows that never stood together. The client gets
/// the retryable abort, not the division by zero.
#[test]
fn an_error_computed_from_rows_that_never_stood_together_is_a_retryable_abort() {
    for engine in ONE_ROUND {
        let name = engine.name();
        let c = cluster(engine);
        let (mut a, mut b) = (session(&c, 7), session(&c, 8));
        run(&mut a, "CREATE TABLE p (k INT PRIMARY KEY, v INT); INSERT INTO p VALUES (1, 1), (2, 1)").unwrap();
        run(&mut a, "BEGIN").unwrap();
        assert_eq!(rows(&mut a, "SELECT v FROM p WHERE k = 1"), vec![vec!["1"]]);
        run(&mut b, "UPDATE p SET v = 0").unwrap();
        assert_eq!(code(&mut a, "SELECT 10 / v FROM p WHERE k = 2"), "40001", "{name}");
        run(&mut a, "ROLLBACK").unwrap();
        assert_eq!(code(&mut a, "SELECT 10 / v FROM p WHERE k = 2"), "22012", "{name}");
        c.shutdown().unwrap();
    }
}

/// Granola §2: a procedure whose body writes rows named by their whole key is planned as one
/// one-round transaction — a fragment per row at its partition, and a catalog compare per
/// definition the plan was made from; any other body is not.
#[test]
fn granola_2_a_call_of_writes_by_key_is_planned_as_one_coordinated_one_round_transaction() {
    let c = cluster(litmus_engines::GRANOLA);
    let mut s = session(&c, 30);
    run(
        &mut s,
        "CREATE TABLE acct (id INT PRIMARY KEY, bal INT CHECK (bal >= 0));
         CREATE TABLE hist (n INT, amount INT, PRIMARY KEY (n, amount)) WITH (partition_prefix = 1);
         CREATE TABLE rates (k INT PRIMARY KEY, r INT) WITH (replicated = true);
         CREATE PROCEDURE transfer(src INT, dst INT, amount INT) LANGUAGE sql AS $$
           UPDATE acct SET bal = bal - amount WHERE id = src;
           UPDATE acct SET bal = bal + amount WHERE id = dst AND bal < 1000;
           INSERT INTO hist VALUES (src, amount), (dst, -amount);
         $$;
         CREATE PROCEDURE sweep() LANGUAGE sql AS $$ UPDATE acct SET bal = 0 WHERE bal < 10 $$;
         CREATE PROCEDURE peek(k INT) LANGUAGE sql AS $$ SELECT bal FROM acct WHERE id = k $$;
         CREATE PROCEDURE rate(k INT) LANGUAGE sql AS $$ UPDATE rates SET r = r + 1 WHERE k = k $$;",
    )
    .unwrap();
    let mut client = litmus_client::Client::new(Box::new(c.transport()));
    let paging = client.paging();
    let mut plan = |name: &str, args: Vec<litmus_sql::Datum>| {
        let mut txn = litmus_sql::one_round::OneRoundTxn::default();
        let mut store = litmus_sql::one_round::OneRoundStore { client: &mut client, txn: &mut txn };
        let mut tx = litmus_sql::store::Tx { txn: &mut store, paging, cancel: None };
        let bytes = tx.read_system(&litmus_sql::routine::key(name)).unwrap().unwrap();
        let def = litmus_sql::routine::decode(name, &bytes).unwrap();
        let ctx = litmus_sql::StatementCtx { params: args, param_types: vec![], now_us: 0, refuse_coordination: false };
        litmus_sql::call_one_round::plan(&mut tx, &def, &bytes, &ctx).unwrap()
    };
    use litmus_sql::call_one_round::{CATALOG_FRAGMENT, WRITE_FRAGMENT};
    use litmus_sql::Datum::Int;
    let calls = plan("transfer", vec![Int(1), Int(2), Int(5)]).expect("writes by key are one round");
    let count = |f: &str| calls.iter().filter(|c| c.fragment == f).count();
    assert_eq!((count(WRITE_FRAGMENT), count(CATALOG_FRAGMENT)), (4, 3), "{calls:#?}");
    assert!(plan("sweep", vec![]).is_none(), "a range of rows is not named up front");
    assert!(plan("peek", vec![Int(1)]).is_none(), "a read answers nothing in one round");
    assert!(plan("rate", vec![Int(1)]).is_none(), "a replicated row is written on every partition");
    // A plan made from a definition that changed since is refused whole, retryably.
    run(&mut s, "INSERT INTO acct VALUES (1, 100), (2, 0)").unwrap();
    let stale = plan("transfer", vec![Int(1), Int(2), Int(5)]).unwrap();
    run(&mut s, "CREATE OR REPLACE PROCEDURE transfer(src INT, dst INT, amount INT) LANGUAGE sql AS 'SELECT 1'")
        .unwrap();
    let bytes = litmus_core::Value::Bytes(postcard::to_allocvec(&stale).unwrap().into());
    let r = client.call(litmus_sql::call_one_round::CALL_PROCEDURE, vec![bytes]);
    assert!(matches!(r, Err(litmus_core::Error::Abort(_))), "a stale plan gave {r:?}");
    assert_eq!(rows(&mut s, "SELECT id, bal FROM acct ORDER BY id"), vec![vec!["1", "100"], vec!["2", "0"]]);
    assert_eq!(rows(&mut s, "SELECT count(*) FROM hist"), vec![vec!["0"]]);
    c.shutdown().unwrap();
}

/// One-round `CALL`s at once on one row count every increment once; a fragment's `CHECK`
/// and duplicate key come back with their SQLSTATEs, and the call leaves nothing.
#[test]
fn granola_2_one_round_calls_count_every_increment_once_and_a_no_vote_aborts_them_whole() {
    for engine in ONE_ROUND {
        let name = engine.name();
        let c = cluster(engine);
        let mut s = session(&c, 31);
        run(
            &mut s,
            "CREATE TABLE n (id INT PRIMARY KEY, v INT CHECK (v < 1000)); INSERT INTO n VALUES (1, 0), (2, 0);
             CREATE TABLE log (id INT PRIMARY KEY);
             CREATE PROCEDURE bump(a INT, b INT, by INT) LANGUAGE sql AS $$
               UPDATE n SET v = v + by WHERE id = a; UPDATE n SET v = v + by WHERE id = b $$;
             CREATE PROCEDURE note(i INT) LANGUAGE sql AS $$
               UPDATE n SET v = v + 1 WHERE id = 1; INSERT INTO log VALUES (i) $$;",
        )
        .unwrap();
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                let mut s = session(&c, 40 + t);
                scope.spawn(move || {
                    for _ in 0..20 {
                        run(&mut s, "CALL bump(1, 2, 1)").unwrap_or_else(|e| panic!("{name}: {e}"));
                    }
                });
            }
        });
        assert_eq!(rows(&mut s, "SELECT v FROM n ORDER BY id"), vec![vec!["80"], vec!["80"]], "{name}");
        assert_eq!(code(&mut s, "CALL bump(2, 1, 930)"), "23514", "{name}");
        run(&mut s, "CALL note(7)").unwrap();
        assert_eq!(code(&mut s, "CALL note(7)"), "23505", "{name}");
        assert_eq!(rows(&mut s, "SELECT v FROM n ORDER BY id"), vec![vec!["81"], vec!["80"]], "{name}: nothing stayed");
        c.shutdown().unwrap();
    }
}
