-- An operator's cancel (POST /v1/orders/{id}/cancel with "reason":
-- "operator"): cancel_reason gains 'operator'. Each section is one
-- statement, and each can run again: a migration interrupted half-way
-- finishes on the next run (MySQL has no transactional DDL).

-- name: find_cancel_reason_check
-- The cancel_reason CHECK is unnamed (MariaDB names it CONSTRAINT_n, MySQL 8
-- lapse_orders_chk_n): found by its clause, dropped, and added again under a
-- name (on a re-run, the named one is found, dropped and added again). The
-- NATURAL JOIN is 011's, for the same reason (MariaDB numbers unnamed CHECKs
-- per table; only TABLE_NAME tells them apart).
SET @lapse_check = (SELECT CONSTRAINT_NAME
  FROM information_schema.TABLE_CONSTRAINTS
  NATURAL JOIN information_schema.CHECK_CONSTRAINTS
  WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'lapse_orders'
    AND CONSTRAINT_TYPE = 'CHECK' AND CHECK_CLAUSE LIKE '%cancel_reason%'
  LIMIT 1);

-- name: drop_cancel_reason_check_sql
SET @lapse_sql = IF(@lapse_check IS NULL, 'DO 0', CONCAT('ALTER TABLE lapse_orders DROP CONSTRAINT `', @lapse_check, '`'));

-- name: drop_cancel_reason_check_prepare
PREPARE lapse_stmt FROM @lapse_sql;

-- name: drop_cancel_reason_check
EXECUTE lapse_stmt;

-- name: drop_cancel_reason_check_deallocate
DEALLOCATE PREPARE lapse_stmt;

-- name: add_cancel_reason_check
ALTER TABLE lapse_orders ADD CONSTRAINT lapse_orders_cancel_reason_check
  CHECK (cancel_reason IN ('timeout', 'buyer', 'operator'));
