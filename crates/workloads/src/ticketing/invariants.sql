-- Ticketing (Salt's Fusion Ticket experiment) as LitmusDB stores it (ticketing.rs), with the
-- invariants its `verify` checks, as far as the DDL can state them. Named constraints are the
-- workload's invariants; LITMUS_* functions are LitmusDB extensions (litmus_analyze::ddl).

CREATE TABLE tk_event (
  event_id INT PRIMARY KEY,
  categories INT NOT NULL,
  seats_per_category INT NOT NULL CHECK (seats_per_category >= 64)
);

CREATE TABLE tk_category (
  cat_id INT PRIMARY KEY,
  capacity INT NOT NULL,
  free INT NOT NULL,
  cursor INT NOT NULL,
  next_order INT NOT NULL,
  -- A category never sells more seats than it has (create-order aborts "sold out").
  CONSTRAINT "free seats >= 0" CHECK (free >= 0),
  -- The counter row equals the free seats counted (verify 2).
  CONSTRAINT "free = count(free seats)" CHECK (free = LITMUS_COUNT(tk_seat, tk_seat.cat_id, tk_seat.state)),
  -- Order ids are handed out by the category's counter (order_id = seq * CATEGORIES + cat).
  CONSTRAINT "order ids from next_order" CHECK (LITMUS_NEXT_ID(next_order, tk_order.order_id))
);

CREATE TABLE tk_seat (
  seat_id INT PRIMARY KEY,
  cat_id INT NOT NULL REFERENCES tk_category (cat_id) CHECK (cat_id IN (0, 1)),
  state INT NOT NULL CHECK (state IN (0, 1, 2)),
  order_id INT NOT NULL
);

CREATE TABLE tk_order (
  order_id INT PRIMARY KEY,
  cat_id INT NOT NULL REFERENCES tk_category (cat_id) CHECK (cat_id IN (0, 1)),
  first_pos INT NOT NULL,
  seats INT NOT NULL CHECK (seats IN (1, 2, 3, 4)),
  state INT NOT NULL CHECK (state IN (1, 2, 3, 4, 5)),
  customer_id INT NOT NULL,
  amount INT NOT NULL CHECK (amount >= 0),
  -- The client session (cart) the order belongs to; only that session acts on it.
  session INT NOT NULL CHECK (session >= 0)
);

CREATE TABLE tk_ticket (
  order_id INT NOT NULL,
  seat_id INT NOT NULL,
  issued INT NOT NULL CHECK (issued IN (0, 1)),
  PRIMARY KEY (order_id, seat_id),
  -- No ticket without its order (verify 4); deleting an order deletes its tickets.
  CONSTRAINT "tickets belong to orders" FOREIGN KEY (order_id) REFERENCES tk_order (order_id) ON DELETE CASCADE,
  CONSTRAINT "tickets are of seats" FOREIGN KEY (seat_id) REFERENCES tk_seat (seat_id)
);

CREATE TABLE tk_order_queue (
  state INT NOT NULL CHECK (state IN (1, 2, 3, 4, 5)),
  session INT NOT NULL,
  order_id INT NOT NULL,
  PRIMARY KEY (state, session, order_id),
  -- Every queue entry is a live order (verify 5).
  CONSTRAINT "queued orders exist" FOREIGN KEY (order_id) REFERENCES tk_order (order_id)
);

CREATE TABLE tk_customer (
  customer_id INT PRIMARY KEY,
  orders INT NOT NULL,
  CONSTRAINT "orders per customer" CHECK (LITMUS_COUNTER(orders))
);
