-- From the schema of lapse 001-008 (unprefixed) to version 9 (every table
-- named lapse_*), in place: the same tables with every row. The result is
-- the schema 009_lapse_tables.up.sql creates in a fresh database.
--
-- Run by Migrate (store/mysql/migrate.go) once the legacy schema is at 008.
-- MySQL's DDL is not transactional, so each `-- name:` section is one
-- statement, atomic on its own, and safe to run again:
--   - rename_tables moves every table at once (RENAME TABLE of several
--     tables is atomic), lapse's old schema_migrations with them: it becomes
--     lapse_schema_migrations, its rows (and so the store's identity) kept.
--     Migrate runs it only while the old tables are there.
--   - the sections after it run while lapse_schema_migrations records 008
--     and not 009; version 9 is recorded after the last of them, so a
--     Migrate that stopped half-way is finished by the next one.
-- Index names are per table in MySQL and stay; foreign key names are
-- database-wide and take the lapse_ prefix (dropped and added in one
-- statement, with foreign_key_checks off for the session: no table copy).
--
-- A table named schema_migrations takes the old one's place, holding one
-- row whose version is a sentence: an instance of an earlier lapse starting
-- on this database reads it first (its Migrate lists the versions applied)
-- and stops, unable to read that version as a number, with the sentence in
-- its error; where finding no schema_migrations at all it would create an
-- empty schema of its own and run on it. Once no earlier lapse can start on
-- the database, an operator may drop it.

-- name: rename_tables
RENAME TABLE
    skus TO lapse_skus,
    orders TO lapse_orders,
    order_items TO lapse_order_items,
    stock_ledger TO lapse_stock_ledger,
    idempotency_keys TO lapse_idempotency_keys,
    outbox TO lapse_outbox,
    payment_callbacks TO lapse_payment_callbacks,
    payments TO lapse_payments,
    outbox_sinks TO lapse_outbox_sinks,
    outbox_fanout TO lapse_outbox_fanout,
    outbox_deliveries TO lapse_outbox_deliveries,
    stock_tasks TO lapse_stock_tasks,
    schema_migrations TO lapse_schema_migrations;

-- name: rename_order_items_fk
ALTER TABLE lapse_order_items
    DROP FOREIGN KEY order_items_order,
    ADD CONSTRAINT lapse_order_items_order FOREIGN KEY (order_id) REFERENCES lapse_orders (id);

-- name: rename_payments_fk
ALTER TABLE lapse_payments
    DROP FOREIGN KEY payments_order,
    ADD CONSTRAINT lapse_payments_order FOREIGN KEY (order_id) REFERENCES lapse_orders (id);

-- name: create_marker
CREATE TABLE IF NOT EXISTS schema_migrations (
    version VARCHAR(255) NOT NULL,
    PRIMARY KEY (version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: fill_marker
INSERT IGNORE INTO schema_migrations (version) VALUES
    ('lapse: this database was migrated by a newer lapse: its tables are now lapse_*; this lapse is too old to run on it: upgrade lapse');
