-- From the schema of lapse 001-008 (unprefixed) to version 9 (every object
-- named lapse_*), in place: the same tables with every row, renamed (SQLite
-- rewrites the foreign keys that name them, their automatic indexes and
-- lapse_outbox's AUTOINCREMENT counter with them), and their indexes, whose
-- names are database-wide (a shop's own `orders` may want orders_created):
-- SQLite cannot rename an index, so each is dropped and built again under
-- its new name. The result is the schema 009_lapse_tables.up.sql creates in
-- a fresh database.
--
-- Run by Migrate (store/sqlite/sqlite.go) in the one transaction that also
-- brings the legacy schema to 008 and records version 9 in
-- lapse_schema_migrations: a failure leaves the database as it was.
--
-- lapse's old schema_migrations becomes lapse_schema_migrations (its rows,
-- and so the store's identity, kept), and a view named schema_migrations
-- takes its place whose version column fails to evaluate with a message that
-- says what happened. An instance of an earlier lapse starting on this
-- database reads it first (its Migrate asks whether 001 is applied) and stops
-- with that message, where finding no schema_migrations at all it would
-- create an empty schema of its own and run on it. Once no earlier lapse can
-- start on the database, an operator may drop the view.

ALTER TABLE skus RENAME TO lapse_skus;
ALTER TABLE orders RENAME TO lapse_orders;
ALTER TABLE order_items RENAME TO lapse_order_items;
ALTER TABLE stock_ledger RENAME TO lapse_stock_ledger;
ALTER TABLE idempotency_keys RENAME TO lapse_idempotency_keys;
ALTER TABLE outbox RENAME TO lapse_outbox;
ALTER TABLE payment_callbacks RENAME TO lapse_payment_callbacks;
ALTER TABLE payments RENAME TO lapse_payments;
ALTER TABLE outbox_sinks RENAME TO lapse_outbox_sinks;
ALTER TABLE outbox_deliveries RENAME TO lapse_outbox_deliveries;
ALTER TABLE stock_tasks RENAME TO lapse_stock_tasks;

DROP INDEX orders_status_cancel_after;
CREATE INDEX lapse_orders_status_cancel_after ON lapse_orders (status, cancel_after);
DROP INDEX orders_created;
CREATE INDEX lapse_orders_created ON lapse_orders (created_at, id);
DROP INDEX outbox_unpublished;
CREATE INDEX lapse_outbox_unpublished ON lapse_outbox (seq) WHERE published_at IS NULL;
DROP INDEX outbox_order;
CREATE INDEX lapse_outbox_order ON lapse_outbox (order_id, type);
DROP INDEX payment_callbacks_seen_at;
CREATE INDEX lapse_payment_callbacks_seen_at ON lapse_payment_callbacks (seen_at);
DROP INDEX outbox_unfanned;
CREATE INDEX lapse_outbox_unfanned ON lapse_outbox (seq) WHERE fanned_out = 0;
DROP INDEX outbox_published;
CREATE INDEX lapse_outbox_published ON lapse_outbox (published_at) WHERE published_at IS NOT NULL;
DROP INDEX outbox_deliveries_order;
CREATE INDEX lapse_outbox_deliveries_order ON lapse_outbox_deliveries (sink, order_id, seq);
DROP INDEX outbox_deliveries_seq;
CREATE INDEX lapse_outbox_deliveries_seq ON lapse_outbox_deliveries (seq);
DROP INDEX orders_reservation;
CREATE UNIQUE INDEX lapse_orders_reservation ON lapse_orders (reservation_id) WHERE reservation_id IS NOT NULL;
DROP INDEX stock_tasks_order;
CREATE INDEX lapse_stock_tasks_order ON lapse_stock_tasks (order_id);
DROP INDEX stock_tasks_due;
CREATE INDEX lapse_stock_tasks_due ON lapse_stock_tasks (next_at) WHERE status = 'PENDING';
DROP INDEX stock_tasks_open;
CREATE INDEX lapse_stock_tasks_open ON lapse_stock_tasks (status, id) WHERE status <> 'DONE';
DROP INDEX orders_cancelled_at;
CREATE INDEX lapse_orders_cancelled_at ON lapse_orders (cancelled_at) WHERE cancelled_at IS NOT NULL;
DROP INDEX orders_paid_at;
CREATE INDEX lapse_orders_paid_at ON lapse_orders (paid_at) WHERE paid_at IS NOT NULL;
DROP INDEX orders_refund_required;
CREATE INDEX lapse_orders_refund_required ON lapse_orders (id) WHERE refund_required <> 0;
DROP INDEX payments_refund_required;
CREATE INDEX lapse_payments_refund_required ON lapse_payments (updated_at) WHERE status = 'REFUND_REQUIRED';
DROP INDEX payments_payment_id_unique;
CREATE UNIQUE INDEX lapse_payments_payment_id_unique ON lapse_payments (payment_id);

-- The migration table, and the marker in its old place.
ALTER TABLE schema_migrations RENAME TO lapse_schema_migrations;
CREATE VIEW schema_migrations (version, name, applied_at) AS
    SELECT json_extract('{}', 'lapse: this database was migrated by a newer lapse: its tables are now lapse_* (and its migrations in lapse_schema_migrations); this lapse is too old to run on it: upgrade lapse'), '', 0;
