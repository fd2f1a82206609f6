-- Retention (lapse serve --order-retention, store.Retention): finished
-- orders are deleted with every row that belongs to them, in small
-- batches. SQLite has one writer: the turn row is there for the schema to
-- match the other stores'; a batch's transaction is the turn.
--
-- lapse_sku_carried: per SKU, the units of the ledger rows retention
-- deleted, by action, added in the deleting transaction. The counters of
-- lapse_skus are never touched; the audit sums the ledger rows left plus
-- these (sold_matches_commits), so it stays true on a trimmed database.
CREATE TABLE lapse_sku_carried (
    sku        TEXT    PRIMARY KEY,
    reserved   INTEGER NOT NULL DEFAULT 0,
    released   INTEGER NOT NULL DEFAULT 0,
    committed  INTEGER NOT NULL DEFAULT 0,
    orders     INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER NOT NULL
);

CREATE TABLE lapse_retention_turn (
    id INTEGER PRIMARY KEY CHECK (id = 1)
);
INSERT INTO lapse_retention_turn (id) VALUES (1);

-- The keys of a deleted order go with it: found by their order.
CREATE INDEX lapse_idempotency_keys_order ON lapse_idempotency_keys (order_id);
