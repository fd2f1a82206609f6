-- The Go receiver's database (amqp.go), the same tables as receiver.py's.
CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, status TEXT NOT NULL
    CHECK (status IN ('pending', 'paying', 'paid', 'cancelled')));
-- The final answer to each command id, written in the transaction that
-- applied it: a redelivery gets exactly the same answer.
CREATE TABLE IF NOT EXISTS answers (command_id TEXT PRIMARY KEY, result TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS applied (command_id TEXT NOT NULL, order_id TEXT NOT NULL, at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS deliveries (webhook_id TEXT NOT NULL, order_id TEXT NOT NULL,
    attempt TEXT NOT NULL, cancel_after TEXT NOT NULL, received_at_ms INTEGER NOT NULL, outcome TEXT NOT NULL);
