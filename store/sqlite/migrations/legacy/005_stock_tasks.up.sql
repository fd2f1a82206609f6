-- Stock held by another service (see the PostgreSQL migration of the same
-- name for the design). Times are Unix milliseconds, as everywhere in this
-- store; SQLite's one writer serializes the claims.
ALTER TABLE orders ADD COLUMN reservation_id TEXT;
CREATE UNIQUE INDEX orders_reservation ON orders (reservation_id) WHERE reservation_id IS NOT NULL;

CREATE TABLE stock_tasks (
    id             TEXT    PRIMARY KEY,
    order_id       TEXT    NOT NULL,
    action         TEXT    NOT NULL CHECK (action IN ('reserve', 'release', 'confirm')),
    reservation_id TEXT    NOT NULL,
    items          TEXT    NOT NULL,
    status         TEXT    NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'DONE', 'DEAD')),
    attempts       INTEGER NOT NULL DEFAULT 0,
    failures       INTEGER NOT NULL DEFAULT 0,
    next_at        INTEGER NOT NULL,
    since          INTEGER NOT NULL,
    created_at     INTEGER NOT NULL,
    done_at        INTEGER,
    dead_at        INTEGER,
    result         TEXT    NOT NULL DEFAULT '',
    last_error     TEXT    NOT NULL DEFAULT '',
    UNIQUE (reservation_id, action)
) WITHOUT ROWID;
CREATE INDEX stock_tasks_order ON stock_tasks (order_id);
CREATE INDEX stock_tasks_due ON stock_tasks (next_at) WHERE status = 'PENDING';
CREATE INDEX stock_tasks_open ON stock_tasks (status, id) WHERE status <> 'DONE';
