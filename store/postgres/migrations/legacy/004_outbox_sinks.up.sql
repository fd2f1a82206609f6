-- Events out to several sinks, shared by any number of relays.
--
-- outbox.fanned_out: the event has one outbox_deliveries row per sink
-- registered when it was fanned out. Fan-outs take outbox_fanout's row
-- (FOR UPDATE SKIP LOCKED) so they run one at a time.
--
-- outbox_deliveries: one row per (sink, event) not yet delivered. A relay
-- claims the lowest pending seq of each order for its sink (one event of an
-- order in flight per sink), leasing it by moving next_at forward; a
-- delivered row is deleted; a dead one stays (dead = true) until retried or
-- purged, holding back the later events of its order for that sink.
ALTER TABLE outbox ADD COLUMN fanned_out boolean NOT NULL DEFAULT false;
UPDATE outbox SET fanned_out = true WHERE published_at IS NOT NULL;
CREATE INDEX outbox_unfanned ON outbox (seq) WHERE NOT fanned_out;
CREATE INDEX outbox_published ON outbox (published_at) WHERE published_at IS NOT NULL;

CREATE TABLE outbox_sinks (
    name          text        PRIMARY KEY,
    registered_at timestamptz NOT NULL
);

CREATE TABLE outbox_fanout (
    id int PRIMARY KEY CHECK (id = 1)
);
INSERT INTO outbox_fanout (id) VALUES (1);

CREATE TABLE outbox_deliveries (
    sink             text        NOT NULL,
    seq              bigint      NOT NULL,
    order_id         text        NOT NULL,
    next_at          timestamptz NOT NULL,
    attempts         integer     NOT NULL DEFAULT 0,
    refusals         integer     NOT NULL DEFAULT 0,
    first_refused_at timestamptz,
    last_error       text,
    dead             boolean     NOT NULL DEFAULT false,
    dead_at          timestamptz,
    PRIMARY KEY (sink, seq)
);
CREATE INDEX outbox_deliveries_order ON outbox_deliveries (sink, order_id, seq);
CREATE INDEX outbox_deliveries_seq ON outbox_deliveries (seq);
CREATE INDEX outbox_deliveries_dead ON outbox_deliveries (sink, seq) WHERE dead;

-- Events published before this migration went to the one relay there was;
-- the rest are fanned out to the sinks the first relay registers.
