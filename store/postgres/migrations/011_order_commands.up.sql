-- Order-service mode (docs/order-service.md): the order service owns its
-- orders, and lapse commands their cancel.
--
-- CANCELLING is an order whose deadline passed and whose cancel lapse has
-- commanded: the order service's answer decides what it becomes (CANCELLED,
-- PAID, or PAYING to be asked again). The CHECK is replaced by name (renamed
-- installations keep the name their table had), found in the catalogue.
DO $$
DECLARE c text;
BEGIN
  FOR c IN SELECT conname FROM pg_constraint
           WHERE conrelid = 'lapse_orders'::regclass AND contype = 'c'
             AND pg_get_constraintdef(oid) LIKE '%status%PAYING%'
  LOOP
    EXECUTE format('ALTER TABLE lapse_orders DROP CONSTRAINT %I', c);
  END LOOP;
END $$;
ALTER TABLE lapse_orders ADD CONSTRAINT lapse_orders_status_check
  CHECK (status IN ('PENDING', 'PAYING', 'PAID', 'CANCELLED', 'CANCELLING'));

-- One command per order and deadline (id: ordersvc.CommandID), the local
-- message table of the commands: written in the transaction that moves the
-- order to CANCELLING, sent by any instance's dispatcher (a claim with a
-- lease), settled by the order service's answer in the transaction that
-- makes the order's transition. DONE rows are kept for the audit and
-- reconcile.
CREATE TABLE lapse_order_commands (
    id           text        PRIMARY KEY,
    order_id     text        NOT NULL,
    cancel_after timestamptz NOT NULL,
    status       text        NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'DONE', 'DEAD')),
    attempts     integer     NOT NULL DEFAULT 0,
    failures     integer     NOT NULL DEFAULT 0,
    next_at      timestamptz NOT NULL,
    since        timestamptz NOT NULL,
    created_at   timestamptz NOT NULL,
    done_at      timestamptz,
    dead_at      timestamptz,
    result       text        NOT NULL DEFAULT '',
    last_error   text        NOT NULL DEFAULT ''
);
CREATE INDEX lapse_order_commands_order ON lapse_order_commands (order_id);
CREATE INDEX lapse_order_commands_due ON lapse_order_commands (next_at) WHERE status = 'PENDING';
CREATE INDEX lapse_order_commands_open ON lapse_order_commands (status, id) WHERE status <> 'DONE';
