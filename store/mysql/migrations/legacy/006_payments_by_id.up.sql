-- A gateway's notification may name only the payment: its order is found by
-- payment id (see the PostgreSQL migration of the same name). One statement,
-- safe to run again (see 001_init.up.sql).

-- name: add_payments_payment_id
ALTER TABLE payments ADD KEY payments_payment_id (payment_id);
