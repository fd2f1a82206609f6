-- Stock held by another service (docs/sagas.md).
--
-- orders.reservation_id names the stock a remote inventory holds for the
-- order; NULL when lapse holds it in skus. Such an order moves no counter:
-- its cancel writes a release task, its payment a confirm task, in the
-- transition's own transaction (the local message table of the saga).
--
-- A reservation backs one order (orders_reservation, unique).
--
-- stock_tasks: one row per (reservation, action) — what the inventory applies
-- once — the key refusing a second one as stock_ledger's refuses a second
-- release. A release that gives back a reservation whose order was never
-- created (--inventory-reserve) has the order id that was asked for; the key
-- is the reservation's so it cannot collide with another order's task. A dispatcher claims PENDING rows
-- that are due with FOR UPDATE SKIP LOCKED, leasing them by moving next_at
-- forward and counting attempts (the claim's token for its settle). DONE rows
-- are kept: they are the record the audit and reconcile read. failures and
-- since count toward --task-max-attempts and --task-max-age, and start afresh
-- when an operator retries a DEAD task.
ALTER TABLE orders ADD COLUMN reservation_id text;
CREATE UNIQUE INDEX orders_reservation ON orders (reservation_id) WHERE reservation_id IS NOT NULL;

CREATE TABLE stock_tasks (
    id             text        PRIMARY KEY,
    order_id       text        NOT NULL,
    action         text        NOT NULL CHECK (action IN ('reserve', 'release', 'confirm')),
    reservation_id text        NOT NULL,
    items          text        NOT NULL,
    status         text        NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'DONE', 'DEAD')),
    attempts       integer     NOT NULL DEFAULT 0,
    failures       integer     NOT NULL DEFAULT 0,
    next_at        timestamptz NOT NULL,
    since          timestamptz NOT NULL,
    created_at     timestamptz NOT NULL,
    done_at        timestamptz,
    dead_at        timestamptz,
    result         text        NOT NULL DEFAULT '',
    last_error     text        NOT NULL DEFAULT '',
    CONSTRAINT stock_tasks_reservation_action UNIQUE (reservation_id, action)
);
CREATE INDEX stock_tasks_order ON stock_tasks (order_id);
CREATE INDEX stock_tasks_due ON stock_tasks (next_at) WHERE status = 'PENDING';
CREATE INDEX stock_tasks_open ON stock_tasks (status, id) WHERE status <> 'DONE';
