-- Order-service mode (docs/order-service.md): the order service owns its
-- orders, and lapse commands their cancel. Each section is one statement,
-- and each can run again: a migration interrupted half-way finishes on the
-- next run (MySQL has no transactional DDL).

-- name: find_status_check
-- CANCELLING is an order whose cancel lapse has commanded: the order
-- service's answer decides what it becomes. The status CHECK is unnamed
-- (MariaDB names it CONSTRAINT_n, MySQL 8 lapse_orders_chk_n): found by
-- its clause, dropped, and added again under a name (on a re-run, the named
-- one is found, dropped and added again).
--
-- NATURAL JOIN, on purpose: MariaDB numbers unnamed CHECKs per table, so
-- another table's CONSTRAINT_2 (a shop's, whose clause may name PAYING too)
-- shares its name with lapse_orders' amount check, and only TABLE_NAME,
-- which MariaDB's CHECK_CONSTRAINTS has, tells them apart; MySQL 8's has no
-- TABLE_NAME and needs none (its CHECK names are unique in a database). The
-- columns the two views share are the join's condition on either server.
SET @lapse_check = (SELECT CONSTRAINT_NAME
  FROM information_schema.TABLE_CONSTRAINTS
  NATURAL JOIN information_schema.CHECK_CONSTRAINTS
  WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'lapse_orders'
    AND CONSTRAINT_TYPE = 'CHECK' AND CHECK_CLAUSE LIKE '%PAYING%'
  LIMIT 1);

-- name: drop_status_check_sql
SET @lapse_sql = IF(@lapse_check IS NULL, 'DO 0', CONCAT('ALTER TABLE lapse_orders DROP CONSTRAINT `', @lapse_check, '`'));

-- name: drop_status_check_prepare
PREPARE lapse_stmt FROM @lapse_sql;

-- name: drop_status_check
EXECUTE lapse_stmt;

-- name: drop_status_check_deallocate
DEALLOCATE PREPARE lapse_stmt;

-- name: add_status_check
ALTER TABLE lapse_orders ADD CONSTRAINT lapse_orders_status_check
  CHECK (status IN ('PENDING', 'PAYING', 'PAID', 'CANCELLED', 'CANCELLING'));

-- name: create_order_commands
-- One command per order and deadline (id: ordersvc.CommandID), the local
-- message table of the commands (see the PostgreSQL migration).
CREATE TABLE IF NOT EXISTS lapse_order_commands (
    id           VARCHAR(64)  NOT NULL,
    order_id     VARCHAR(128) NOT NULL,
    cancel_after DATETIME(3)  NOT NULL,
    status       VARCHAR(16)  NOT NULL DEFAULT 'PENDING',
    attempts     INT          NOT NULL DEFAULT 0,
    failures     INT          NOT NULL DEFAULT 0,
    next_at      DATETIME(3)  NOT NULL,
    since        DATETIME(3)  NOT NULL,
    created_at   DATETIME(3)  NOT NULL,
    done_at      DATETIME(3)  NULL,
    dead_at      DATETIME(3)  NULL,
    result       VARCHAR(32)  NOT NULL DEFAULT '',
    last_error   TEXT         NOT NULL,
    PRIMARY KEY (id),
    KEY order_commands_order (order_id),
    KEY order_commands_due (status, next_at),
    -- The listing of the commands not DONE (DONE rows are kept).
    KEY order_commands_open (status, id),
    CHECK (status IN ('PENDING', 'DONE', 'DEAD'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
