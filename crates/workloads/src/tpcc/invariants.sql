-- TPC-C (revision 5.11) as LitmusDB stores it (schema.rs), with the declared invariants that
-- `litmus analyze tpcc` judges: keys, NOT NULL, foreign keys (clause 1.3), and the twelve
-- consistency conditions of clause 3.3.2 as named constraints "3.3.2.1" ... "3.3.2.12".
-- LitmusDB extensions are the LITMUS_* functions (see litmus_analyze::ddl).
-- The analyzer checks every table here against the catalog: columns, order, types, keys.

CREATE TABLE tpcc_warehouse (
  w_id INT NOT NULL,
  w_name TEXT NOT NULL,
  w_street_1 TEXT NOT NULL, w_street_2 TEXT NOT NULL, w_city TEXT NOT NULL, w_state TEXT NOT NULL,
  w_zip TEXT NOT NULL,
  w_tax DECIMAL NOT NULL,
  w_ytd DECIMAL NOT NULL,
  PRIMARY KEY (w_id),
  -- 3.3.2.1: W_YTD = sum(D_YTD)
  CONSTRAINT "3.3.2.1" CHECK (w_ytd = LITMUS_SUM(tpcc_district.d_ytd, tpcc_district.d_w_id)),
  -- 3.3.2.8: W_YTD = sum(H_AMOUNT) of the payments made to the warehouse
  CONSTRAINT "3.3.2.8" CHECK (w_ytd = LITMUS_SUM(tpcc_history.h_amount, tpcc_history.h_w_id))
);

CREATE TABLE tpcc_district (
  d_w_id INT NOT NULL,
  d_id INT NOT NULL,
  d_name TEXT NOT NULL,
  d_street_1 TEXT NOT NULL, d_street_2 TEXT NOT NULL, d_city TEXT NOT NULL, d_state TEXT NOT NULL,
  d_zip TEXT NOT NULL,
  d_tax DECIMAL NOT NULL,
  d_ytd DECIMAL NOT NULL,
  d_next_o_id INT NOT NULL,
  PRIMARY KEY (d_w_id, d_id),
  FOREIGN KEY (d_w_id) REFERENCES tpcc_warehouse (w_id),
  -- 3.3.2.2: D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID): the district hands out its order ids
  CONSTRAINT "3.3.2.2" CHECK (LITMUS_NEXT_ID(d_next_o_id, tpcc_orders.o_id)
                              AND LITMUS_NEXT_ID(d_next_o_id, tpcc_new_order.no_o_id)),
  -- 3.3.2.4: sum(O_OL_CNT) = number of ORDER-LINE rows, per district
  CONSTRAINT "3.3.2.4" CHECK (LITMUS_SUM(tpcc_orders.o_ol_cnt, tpcc_orders.o_d_id)
                              = LITMUS_COUNT(tpcc_order_line, tpcc_order_line.ol_d_id)),
  -- 3.3.2.9: D_YTD = sum(H_AMOUNT) of the payments made to the district
  CONSTRAINT "3.3.2.9" CHECK (d_ytd = LITMUS_SUM(tpcc_history.h_amount, tpcc_history.h_d_id))
);

CREATE TABLE tpcc_customer (
  c_w_id INT NOT NULL,
  c_d_id INT NOT NULL,
  c_id INT NOT NULL,
  c_first TEXT NOT NULL, c_middle TEXT NOT NULL, c_last TEXT NOT NULL,
  c_street_1 TEXT NOT NULL, c_street_2 TEXT NOT NULL, c_city TEXT NOT NULL, c_state TEXT NOT NULL,
  c_zip TEXT NOT NULL,
  c_phone TEXT NOT NULL,
  c_since INT NOT NULL,
  c_credit TEXT NOT NULL CHECK (c_credit IN ('GC', 'BC')),
  c_credit_lim DECIMAL NOT NULL,
  c_discount DECIMAL NOT NULL,
  c_balance DECIMAL NOT NULL,
  c_ytd_payment DECIMAL NOT NULL,
  c_payment_cnt INT NOT NULL,
  c_delivery_cnt INT NOT NULL,
  c_data TEXT NOT NULL,
  PRIMARY KEY (c_w_id, c_d_id, c_id),
  FOREIGN KEY (c_w_id, c_d_id) REFERENCES tpcc_district (d_w_id, d_id),
  -- 3.3.2.10: C_BALANCE = sum(OL_AMOUNT of delivered lines) - sum(H_AMOUNT), per customer
  CONSTRAINT "3.3.2.10" CHECK (c_balance = LITMUS_SUM(tpcc_order_line.ol_amount,
                                                      tpcc_order_line.ol_delivery_d IS NOT NULL,
                                                      tpcc_orders.o_c_id)
                                           - LITMUS_SUM(tpcc_history.h_amount, tpcc_history.h_c_id)),
  -- 3.3.2.12: C_BALANCE + C_YTD_PAYMENT = sum(OL_AMOUNT of delivered lines), per customer
  CONSTRAINT "3.3.2.12" CHECK (c_balance + c_ytd_payment = LITMUS_SUM(tpcc_order_line.ol_amount,
                                                                     tpcc_order_line.ol_delivery_d IS NOT NULL,
                                                                     tpcc_orders.o_c_id))
);

-- An index table standing in for a secondary index on customer names (written at load).
CREATE TABLE tpcc_customer_name (
  cn_w_id INT NOT NULL,
  cn_d_id INT NOT NULL,
  cn_last TEXT NOT NULL,
  cn_first TEXT NOT NULL,
  cn_c_id INT NOT NULL,
  PRIMARY KEY (cn_w_id, cn_d_id, cn_last, cn_first, cn_c_id),
  FOREIGN KEY (cn_w_id, cn_d_id, cn_c_id) REFERENCES tpcc_customer (c_w_id, c_d_id, c_id),
  CHECK (LITMUS_INDEX(tpcc_customer.c_last, tpcc_customer.c_first))
);

-- HISTORY has no primary key in TPC-C; LitmusDB keys it by customer and a random 62-bit h_id
-- from the Payment's input: a unique value chosen without coordination (declared, since a
-- recording cannot tell it from a chosen constant).
CREATE TABLE tpcc_history (
  h_c_w_id INT NOT NULL,
  h_c_d_id INT NOT NULL,
  h_c_id INT NOT NULL,
  h_id INT NOT NULL DEFAULT LITMUS_UNIQUE_ID(),
  h_w_id INT NOT NULL,
  h_d_id INT NOT NULL,
  h_date INT NOT NULL,
  h_amount DECIMAL NOT NULL,
  h_data TEXT NOT NULL,
  PRIMARY KEY (h_c_w_id, h_c_d_id, h_c_id, h_id),
  FOREIGN KEY (h_c_w_id, h_c_d_id, h_c_id) REFERENCES tpcc_customer (c_w_id, c_d_id, c_id),
  FOREIGN KEY (h_w_id, h_d_id) REFERENCES tpcc_district (d_w_id, d_id)
);

CREATE TABLE tpcc_new_order (
  no_w_id INT NOT NULL,
  no_d_id INT NOT NULL,
  no_o_id INT NOT NULL,
  PRIMARY KEY (no_w_id, no_d_id, no_o_id),
  -- 3.3.2.3: max(NO_O_ID) - min(NO_O_ID) + 1 = number of NEW-ORDER rows, per district
  CONSTRAINT "3.3.2.3" CHECK (LITMUS_SEQUENTIAL(no_o_id, no_w_id, no_d_id)),
  -- 3.3.2.11: count(ORDER) - count(NEW-ORDER) = 2100 on a fresh database; as the paper reads
  -- it (Table 3 #11), new-orders reference orders.
  CONSTRAINT "3.3.2.11" FOREIGN KEY (no_w_id, no_d_id, no_o_id) REFERENCES tpcc_orders (o_w_id, o_d_id, o_id)
);

CREATE TABLE tpcc_orders (
  o_w_id INT NOT NULL,
  o_d_id INT NOT NULL,
  o_id INT NOT NULL,
  o_c_id INT NOT NULL,
  o_entry_d INT NOT NULL,
  o_carrier_id INT,
  o_ol_cnt INT NOT NULL,
  o_all_local INT NOT NULL CHECK (o_all_local IN (0, 1)),
  PRIMARY KEY (o_w_id, o_d_id, o_id),
  FOREIGN KEY (o_w_id, o_d_id, o_c_id) REFERENCES tpcc_customer (c_w_id, c_d_id, c_id),
  -- 3.3.2.5: O_CARRIER_ID is NULL iff the order has a NEW-ORDER row
  CONSTRAINT "3.3.2.5" CHECK (LITMUS_IFF(o_carrier_id IS NULL, LITMUS_EXISTS(tpcc_new_order))),
  -- 3.3.2.6: O_OL_CNT = number of the order's ORDER-LINE rows
  CONSTRAINT "3.3.2.6" CHECK (o_ol_cnt = LITMUS_COUNT(tpcc_order_line, tpcc_order_line.ol_o_id))
);

-- An index table: a customer's latest order (Order-Status), upserted by every New-Order.
CREATE TABLE tpcc_customer_last_order (
  clo_w_id INT NOT NULL,
  clo_d_id INT NOT NULL,
  clo_c_id INT NOT NULL,
  clo_o_id INT NOT NULL,
  PRIMARY KEY (clo_w_id, clo_d_id, clo_c_id),
  FOREIGN KEY (clo_w_id, clo_d_id, clo_c_id) REFERENCES tpcc_customer (c_w_id, c_d_id, c_id),
  CHECK (LITMUS_INDEX(tpcc_orders.o_c_id))
);

CREATE TABLE tpcc_order_line (
  ol_w_id INT NOT NULL,
  ol_d_id INT NOT NULL,
  ol_o_id INT NOT NULL,
  ol_number INT NOT NULL,
  ol_i_id INT NOT NULL,
  ol_supply_w_id INT NOT NULL,
  ol_delivery_d INT,
  ol_quantity INT NOT NULL,
  ol_amount DECIMAL NOT NULL,
  ol_dist_info TEXT NOT NULL,
  PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number),
  FOREIGN KEY (ol_w_id, ol_d_id, ol_o_id) REFERENCES tpcc_orders (o_w_id, o_d_id, o_id),
  FOREIGN KEY (ol_i_id) REFERENCES tpcc_item (i_id),
  -- 3.3.2.7: OL_DELIVERY_D is NULL iff the order's O_CARRIER_ID is NULL
  CONSTRAINT "3.3.2.7" CHECK (LITMUS_IFF(ol_delivery_d IS NULL, tpcc_orders.o_carrier_id IS NULL))
);

CREATE TABLE tpcc_item (
  i_id INT NOT NULL,
  i_im_id INT NOT NULL,
  i_name TEXT NOT NULL,
  i_price DECIMAL NOT NULL,
  i_data TEXT NOT NULL,
  PRIMARY KEY (i_id)
);

CREATE TABLE tpcc_stock (
  s_w_id INT NOT NULL,
  s_i_id INT NOT NULL,
  s_quantity INT NOT NULL,
  s_dist_01 TEXT NOT NULL, s_dist_02 TEXT NOT NULL, s_dist_03 TEXT NOT NULL, s_dist_04 TEXT NOT NULL,
  s_dist_05 TEXT NOT NULL, s_dist_06 TEXT NOT NULL, s_dist_07 TEXT NOT NULL, s_dist_08 TEXT NOT NULL,
  s_dist_09 TEXT NOT NULL, s_dist_10 TEXT NOT NULL,
  s_ytd INT NOT NULL,
  s_order_cnt INT NOT NULL,
  s_remote_cnt INT NOT NULL,
  s_data TEXT NOT NULL,
  PRIMARY KEY (s_w_id, s_i_id),
  FOREIGN KEY (s_w_id) REFERENCES tpcc_warehouse (w_id),
  FOREIGN KEY (s_i_id) REFERENCES tpcc_item (i_id)
);
