-- Retention (lapse serve --order-retention, store.Retention): finished
-- orders are deleted with every row that belongs to them, in small
-- batches, one instance at a time.
--
-- lapse_sku_carried: per SKU, the units of the ledger rows retention
-- deleted, by action, added in the deleting transaction. The counters of
-- lapse_skus are never touched; the audit sums the ledger rows left plus
-- these (sold_matches_commits), so it stays true on a trimmed database.
CREATE TABLE lapse_sku_carried (
    sku        text        PRIMARY KEY,
    reserved   bigint      NOT NULL DEFAULT 0,
    released   bigint      NOT NULL DEFAULT 0,
    committed  bigint      NOT NULL DEFAULT 0,
    orders     bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL
);

-- The retention turn: a batch takes this row (FOR UPDATE SKIP LOCKED) and
-- an instance that finds it held skips its run, as the relay's fan-out does
-- with lapse_outbox_fanout.
CREATE TABLE lapse_retention_turn (
    id int PRIMARY KEY CHECK (id = 1)
);
INSERT INTO lapse_retention_turn (id) VALUES (1);

-- The keys of a deleted order go with it: found by their order.
CREATE INDEX lapse_idempotency_keys_order ON lapse_idempotency_keys (order_id);
