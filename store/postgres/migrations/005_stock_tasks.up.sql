-- Stock held by another service (docs/sagas.md).
--
-- orders.reservation_id names the stock a remote inventory holds for the
-- order; NULL when lapse holds it in skus. Such an order moves no counter:
-- its cancel writes a release task, its payment a confirm task, in the
-- transition's own transaction (the local message table of the saga).
--
-- stock_tasks: one row per (order, action), the key refusing a second one as
-- stock_ledger's refuses a second release. A dispatcher claims PENDING rows
-- that are due with FOR UPDATE SKIP LOCKED, leasing them by moving next_at
-- forward and counting attempts (the claim's token for its settle). DONE rows
-- are kept: they are the record the audit and reconcile read. failures and
-- since count toward --task-max-attempts and --task-max-age, and start afresh
-- when an operator retries a DEAD task.
ALTER TABLE orders ADD COLUMN reservation_id text;

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
    CONSTRAINT stock_tasks_order_action UNIQUE (order_id, action)
);
CREATE INDEX stock_tasks_due ON stock_tasks (next_at) WHERE status = 'PENDING';
CREATE INDEX stock_tasks_open ON stock_tasks (status, id) WHERE status <> 'DONE';
