-- YCSB as LitmusDB stores it (ycsb.rs), with the invariant its `verify` checks: ycsb_updates
-- counts the committed updates of its row, none lost, none doubled.
CREATE TABLE usertable (
  ycsb_key INT PRIMARY KEY,
  field0 BYTEA NOT NULL,
  field1 BYTEA NOT NULL,
  ycsb_updates INT NOT NULL,
  CONSTRAINT "ycsb_updates counts updates" CHECK (LITMUS_COUNTER(ycsb_updates)),
  CONSTRAINT "ycsb_updates >= 0" CHECK (ycsb_updates >= 0)
);
