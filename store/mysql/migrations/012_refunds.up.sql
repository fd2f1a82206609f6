-- Refunds (--auto-refund): money a payment attempt owes back goes back
-- through the gateway, by a task of its own. Each section is one
-- statement, and each can run again: a migration interrupted half-way
-- finishes on the next run (MySQL has no transactional DDL).

-- name: find_payment_status_check
-- REFUNDED is an attempt whose money was given back (REFUND_REQUIRED
-- before). The status CHECK of lapse_payments is unnamed (MariaDB names it
-- CONSTRAINT_n, MySQL 8 lapse_payments_chk_n): found by its clause,
-- dropped, and added again under a name (on a re-run, the named one is
-- found, dropped and added again). NATURAL JOIN: see 011.
SET @lapse_check = (SELECT CONSTRAINT_NAME
  FROM information_schema.TABLE_CONSTRAINTS
  NATURAL JOIN information_schema.CHECK_CONSTRAINTS
  WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'lapse_payments'
    AND CONSTRAINT_TYPE = 'CHECK' AND CHECK_CLAUSE LIKE '%SUPERSEDED%'
  LIMIT 1);

-- name: drop_payment_status_check_sql
SET @lapse_sql = IF(@lapse_check IS NULL, 'DO 0', CONCAT('ALTER TABLE lapse_payments DROP CONSTRAINT `', @lapse_check, '`'));

-- name: drop_payment_status_check_prepare
PREPARE lapse_stmt FROM @lapse_sql;

-- name: drop_payment_status_check
EXECUTE lapse_stmt;

-- name: drop_payment_status_check_deallocate
DEALLOCATE PREPARE lapse_stmt;

-- name: add_payment_status_check
ALTER TABLE lapse_payments ADD CONSTRAINT lapse_payments_status_check
  CHECK (status IN ('PENDING', 'SUPERSEDED', 'FAILED', 'SUCCEEDED', 'REFUND_REQUIRED', 'REFUNDED'));

-- name: create_refunds
-- One refund per payment attempt, the local message table of the refunds
-- (see the PostgreSQL migration). payment_id is as wide as
-- lapse_payments.payment_id.
CREATE TABLE IF NOT EXISTS lapse_refunds (
    payment_id   VARCHAR(255) NOT NULL,
    order_id     VARCHAR(128) NOT NULL,
    amount_cents BIGINT       NOT NULL,
    currency     VARCHAR(16)  NOT NULL,
    status       VARCHAR(16)  NOT NULL DEFAULT 'PENDING',
    attempts     INT          NOT NULL DEFAULT 0,
    failures     INT          NOT NULL DEFAULT 0,
    next_at      DATETIME(3)  NOT NULL,
    since        DATETIME(3)  NOT NULL,
    created_at   DATETIME(3)  NOT NULL,
    done_at      DATETIME(3)  NULL,
    dead_at      DATETIME(3)  NULL,
    last_error   TEXT         NOT NULL,
    refund_id    VARCHAR(255) NOT NULL DEFAULT '',
    manual       BOOLEAN      NOT NULL DEFAULT FALSE,
    note         TEXT         NOT NULL,
    actor        VARCHAR(255) NOT NULL DEFAULT '',
    PRIMARY KEY (payment_id),
    KEY refunds_order (order_id),
    KEY refunds_due (status, next_at),
    -- The listing of the refunds not DONE (DONE rows are kept).
    KEY refunds_open (status, payment_id),
    CHECK (status IN ('PENDING', 'DONE', 'DEAD'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
