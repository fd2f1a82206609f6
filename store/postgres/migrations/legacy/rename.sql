-- From the schema of lapse 001-008 (unprefixed) to version 9 (every object
-- named lapse_*), in place: the same tables with every row, renamed, then
-- their constraints, indexes and sequence (their names are schema-wide in
-- PostgreSQL: a shop's own `orders` would want orders_pkey). The result is
-- the schema 009_lapse_tables.up.sql creates in a fresh database.
--
-- Run by Migrate (store/postgres/postgres.go) in the one transaction that
-- also brings the legacy schema to 008 and records version 9 in
-- lapse_schema_migrations: a failure leaves the database as it was.
--
-- lapse's old schema_migrations becomes lapse_schema_migrations (its rows,
-- and so the store's identity, kept), and a view named schema_migrations
-- takes its place: every read of it raises an error that says what happened.
-- An instance of an earlier lapse starting on this database reads it first
-- (its Migrate asks whether 001 is applied) and stops with that message,
-- where finding no schema_migrations at all it would create an empty schema
-- of its own and run on it. Once no earlier lapse can start on the database,
-- an operator may drop the view and the function.

-- Tables.
ALTER TABLE skus RENAME TO lapse_skus;
ALTER TABLE orders RENAME TO lapse_orders;
ALTER TABLE order_items RENAME TO lapse_order_items;
ALTER TABLE stock_ledger RENAME TO lapse_stock_ledger;
ALTER TABLE idempotency_keys RENAME TO lapse_idempotency_keys;
ALTER TABLE outbox RENAME TO lapse_outbox;
ALTER TABLE payment_callbacks RENAME TO lapse_payment_callbacks;
ALTER TABLE payments RENAME TO lapse_payments;
ALTER TABLE outbox_sinks RENAME TO lapse_outbox_sinks;
ALTER TABLE outbox_fanout RENAME TO lapse_outbox_fanout;
ALTER TABLE outbox_deliveries RENAME TO lapse_outbox_deliveries;
ALTER TABLE stock_tasks RENAME TO lapse_stock_tasks;

-- Constraints (a primary key or unique constraint renames its index too).
ALTER TABLE lapse_skus RENAME CONSTRAINT skus_available_check TO lapse_skus_available_check;
ALTER TABLE lapse_skus RENAME CONSTRAINT skus_locked_check TO lapse_skus_locked_check;
ALTER TABLE lapse_skus RENAME CONSTRAINT skus_pkey TO lapse_skus_pkey;
ALTER TABLE lapse_skus RENAME CONSTRAINT skus_sold_check TO lapse_skus_sold_check;
ALTER TABLE lapse_orders RENAME CONSTRAINT orders_amount_cents_check TO lapse_orders_amount_cents_check;
ALTER TABLE lapse_orders RENAME CONSTRAINT orders_cancel_reason_check TO lapse_orders_cancel_reason_check;
ALTER TABLE lapse_orders RENAME CONSTRAINT orders_pkey TO lapse_orders_pkey;
ALTER TABLE lapse_orders RENAME CONSTRAINT orders_status_check TO lapse_orders_status_check;
ALTER TABLE lapse_order_items RENAME CONSTRAINT order_items_order_id_fkey TO lapse_order_items_order_id_fkey;
ALTER TABLE lapse_order_items RENAME CONSTRAINT order_items_pkey TO lapse_order_items_pkey;
ALTER TABLE lapse_order_items RENAME CONSTRAINT order_items_qty_check TO lapse_order_items_qty_check;
ALTER TABLE lapse_stock_ledger RENAME CONSTRAINT stock_ledger_action_check TO lapse_stock_ledger_action_check;
ALTER TABLE lapse_stock_ledger RENAME CONSTRAINT stock_ledger_pkey TO lapse_stock_ledger_pkey;
ALTER TABLE lapse_idempotency_keys RENAME CONSTRAINT idempotency_keys_pkey TO lapse_idempotency_keys_pkey;
ALTER TABLE lapse_outbox RENAME CONSTRAINT outbox_event_id_key TO lapse_outbox_event_id_key;
ALTER TABLE lapse_outbox RENAME CONSTRAINT outbox_pkey TO lapse_outbox_pkey;
ALTER TABLE lapse_payment_callbacks RENAME CONSTRAINT payment_callbacks_pkey TO lapse_payment_callbacks_pkey;
ALTER TABLE lapse_payments RENAME CONSTRAINT payments_order_id_fkey TO lapse_payments_order_id_fkey;
ALTER TABLE lapse_payments RENAME CONSTRAINT payments_pkey TO lapse_payments_pkey;
ALTER TABLE lapse_payments RENAME CONSTRAINT payments_status_check TO lapse_payments_status_check;
ALTER TABLE lapse_outbox_sinks RENAME CONSTRAINT outbox_sinks_pkey TO lapse_outbox_sinks_pkey;
ALTER TABLE lapse_outbox_fanout RENAME CONSTRAINT outbox_fanout_id_check TO lapse_outbox_fanout_id_check;
ALTER TABLE lapse_outbox_fanout RENAME CONSTRAINT outbox_fanout_pkey TO lapse_outbox_fanout_pkey;
ALTER TABLE lapse_outbox_deliveries RENAME CONSTRAINT outbox_deliveries_pkey TO lapse_outbox_deliveries_pkey;
ALTER TABLE lapse_stock_tasks RENAME CONSTRAINT stock_tasks_action_check TO lapse_stock_tasks_action_check;
ALTER TABLE lapse_stock_tasks RENAME CONSTRAINT stock_tasks_pkey TO lapse_stock_tasks_pkey;
ALTER TABLE lapse_stock_tasks RENAME CONSTRAINT stock_tasks_reservation_action TO lapse_stock_tasks_reservation_action;
ALTER TABLE lapse_stock_tasks RENAME CONSTRAINT stock_tasks_status_check TO lapse_stock_tasks_status_check;

-- Indexes of no constraint.
ALTER INDEX orders_cancelled_at RENAME TO lapse_orders_cancelled_at;
ALTER INDEX orders_created RENAME TO lapse_orders_created;
ALTER INDEX orders_paid_at RENAME TO lapse_orders_paid_at;
ALTER INDEX orders_refund_required RENAME TO lapse_orders_refund_required;
ALTER INDEX orders_reservation RENAME TO lapse_orders_reservation;
ALTER INDEX orders_status_cancel_after RENAME TO lapse_orders_status_cancel_after;
ALTER INDEX outbox_order RENAME TO lapse_outbox_order;
ALTER INDEX outbox_published RENAME TO lapse_outbox_published;
ALTER INDEX outbox_unfanned RENAME TO lapse_outbox_unfanned;
ALTER INDEX outbox_unpublished RENAME TO lapse_outbox_unpublished;
ALTER INDEX payment_callbacks_seen_at RENAME TO lapse_payment_callbacks_seen_at;
ALTER INDEX payments_payment_id_unique RENAME TO lapse_payments_payment_id_unique;
ALTER INDEX payments_refund_required RENAME TO lapse_payments_refund_required;
ALTER INDEX outbox_deliveries_dead RENAME TO lapse_outbox_deliveries_dead;
ALTER INDEX outbox_deliveries_order RENAME TO lapse_outbox_deliveries_order;
ALTER INDEX outbox_deliveries_seq RENAME TO lapse_outbox_deliveries_seq;
ALTER INDEX stock_tasks_due RENAME TO lapse_stock_tasks_due;
ALTER INDEX stock_tasks_open RENAME TO lapse_stock_tasks_open;
ALTER INDEX stock_tasks_order RENAME TO lapse_stock_tasks_order;

-- The sequence behind lapse_outbox.seq (its default follows by oid).
ALTER SEQUENCE outbox_seq_seq RENAME TO lapse_outbox_seq_seq;

-- The migration table, and the marker in its old place.
ALTER TABLE schema_migrations RENAME TO lapse_schema_migrations;
ALTER TABLE lapse_schema_migrations RENAME CONSTRAINT schema_migrations_pkey TO lapse_schema_migrations_pkey;

CREATE FUNCTION lapse_schema_migrations_moved() RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'lapse: this database was migrated by a newer lapse: its tables are now lapse_* (and its migrations in lapse_schema_migrations); this lapse is too old to run on it: upgrade lapse'
        USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;
CREATE VIEW schema_migrations AS
    SELECT lapse_schema_migrations_moved() AS version, NULL::text AS name, NULL::timestamptz AS applied_at;
