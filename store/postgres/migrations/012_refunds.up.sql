-- Refunds (--auto-refund): money a payment attempt owes back goes back
-- through the gateway, by a task of its own.
--
-- REFUNDED is an attempt whose money was given back (REFUND_REQUIRED
-- before). The status CHECK of lapse_payments is replaced by name (renamed
-- installations keep the name their table had), found in the catalogue.
DO $$
DECLARE c text;
BEGIN
  FOR c IN SELECT conname FROM pg_constraint
           WHERE conrelid = 'lapse_payments'::regclass AND contype = 'c'
             AND pg_get_constraintdef(oid) LIKE '%status%SUPERSEDED%'
  LOOP
    EXECUTE format('ALTER TABLE lapse_payments DROP CONSTRAINT %I', c);
  END LOOP;
END $$;
ALTER TABLE lapse_payments ADD CONSTRAINT lapse_payments_status_check
  CHECK (status IN ('PENDING', 'SUPERSEDED', 'FAILED', 'SUCCEEDED', 'REFUND_REQUIRED', 'REFUNDED'));

-- One refund per payment attempt (payment_id: lapse's side of the
-- refund's idempotency), the local message table of the refunds: written
-- in the transaction that records the attempt REFUND_REQUIRED (with
-- --auto-refund) or by an operator's refund now, sent by any instance's
-- dispatcher (a claim with a lease), settled in the transaction that
-- moves the attempt to REFUNDED. An operator's refund made outside lapse
-- is recorded as a DONE row with manual set. DONE rows are kept for the
-- audit: every REFUNDED attempt has one, every one's attempt is REFUNDED.
CREATE TABLE lapse_refunds (
    payment_id   text        PRIMARY KEY,
    order_id     text        NOT NULL,
    amount_cents bigint      NOT NULL,
    currency     text        NOT NULL,
    status       text        NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'DONE', 'DEAD')),
    attempts     integer     NOT NULL DEFAULT 0,
    failures     integer     NOT NULL DEFAULT 0,
    next_at      timestamptz NOT NULL,
    since        timestamptz NOT NULL,
    created_at   timestamptz NOT NULL,
    done_at      timestamptz,
    dead_at      timestamptz,
    last_error   text        NOT NULL DEFAULT '',
    refund_id    text        NOT NULL DEFAULT '',
    manual       boolean     NOT NULL DEFAULT false,
    note         text        NOT NULL DEFAULT '',
    actor        text        NOT NULL DEFAULT ''
);
CREATE INDEX lapse_refunds_order ON lapse_refunds (order_id);
CREATE INDEX lapse_refunds_due ON lapse_refunds (next_at) WHERE status = 'PENDING';
CREATE INDEX lapse_refunds_open ON lapse_refunds (status, payment_id) WHERE status <> 'DONE';
