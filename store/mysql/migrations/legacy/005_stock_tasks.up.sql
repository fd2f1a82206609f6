-- Stock held by another service (see the PostgreSQL migration of the same
-- name for the design). MySQL has no partial indexes: the due rows are the
-- prefix status = 'PENDING' of (status, next_at). One statement per section,
-- each safe to run again (see 001_init.up.sql).

-- name: add_reservation_id
ALTER TABLE orders ADD COLUMN reservation_id VARCHAR(255) NULL;

-- name: add_orders_reservation
-- A reservation backs one order (NULLs do not collide).
ALTER TABLE orders ADD UNIQUE KEY orders_reservation (reservation_id);

-- name: create_stock_tasks
CREATE TABLE IF NOT EXISTS stock_tasks (
    id             VARCHAR(64)  NOT NULL,
    order_id       VARCHAR(128) NOT NULL,
    action         VARCHAR(16)  NOT NULL,
    reservation_id VARCHAR(255) NOT NULL,
    items          TEXT         NOT NULL,
    status         VARCHAR(16)  NOT NULL DEFAULT 'PENDING',
    attempts       INT          NOT NULL DEFAULT 0,
    failures       INT          NOT NULL DEFAULT 0,
    next_at        DATETIME(3)  NOT NULL,
    since          DATETIME(3)  NOT NULL,
    created_at     DATETIME(3)  NOT NULL,
    done_at        DATETIME(3)  NULL,
    dead_at        DATETIME(3)  NULL,
    result         VARCHAR(32)  NOT NULL DEFAULT '',
    last_error     TEXT         NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY stock_tasks_reservation_action (reservation_id, action),
    KEY stock_tasks_order (order_id),
    KEY stock_tasks_due (status, next_at),
    KEY stock_tasks_open (status, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
