-- pgbench's tables as `pgbench -i` creates them (primary keys included), with one invariant of
-- a bank added: no account overdrawn beyond its limit. pgbench_history has no primary key, so
-- LitmusDB keys it by a hidden row id chosen without coordination.
--   litmus analyze --schema examples/pgbench-analyze/schema.sql --sql examples/pgbench-analyze/tpcb.sql
CREATE TABLE pgbench_branches (bid INT NOT NULL PRIMARY KEY, bbalance INT, filler CHAR(88)) WITH (fillfactor = 100);
CREATE TABLE pgbench_tellers (tid INT NOT NULL PRIMARY KEY, bid INT, tbalance INT, filler CHAR(84)) WITH (fillfactor = 100);
CREATE TABLE pgbench_accounts (
    aid INT NOT NULL PRIMARY KEY,
    bid INT,
    abalance INT,
    filler CHAR(84),
    CONSTRAINT "overdraft limit" CHECK (abalance >= -100000)
) WITH (fillfactor = 100);
CREATE TABLE pgbench_history (tid INT, bid INT, aid INT, delta INT, mtime TIMESTAMP, filler CHAR(22));
