#!/usr/bin/env python3
"""A reference order service for lapse's order-service mode, on Python 3's
standard library alone (no pip package): it owns its orders in its own
SQLite database, verifies lapse's Standard Webhooks signatures, and answers
each order.cancel_if_pending command with a conditional update
(docs/order-service.md). Tests start it as another process, with faults.

Environment:
  LAPSE_SECRETS       whsec_ secrets, whitespace-separated (current and
                      previous while rotating); required
  RECEIVER_DB         SQLite file (default :memory:); a file outlives a
                      restart, as a real order service's database does
  HOST, PORT          where to listen (127.0.0.1, 0 = a free port); the
                      first line on stdout is "listening on http://HOST:PORT"
  RECEIVER_PATH       the command and status route (/lapse)
  TOLERANCE_SECONDS   webhook-timestamp tolerance (300)
  PAYING_RETRY_AFTER  retry_after_seconds of a paying answer (none)
  FAIL_503_UNTIL      answer the first N verified commands 503, applying
                      nothing (0)
  DROP_ANSWER_RATE    after applying and committing a command, close the
                      connection without answering with this probability
                      (0): lapse must send again and get the same answer
  SEED                seed of the drop decisions (random)

Routes:
  POST RECEIVER_PATH              a signed command -> 200 {"result",
                                  "command_id", "retry_after_seconds"?};
                                  401 bad signature, 400 bad command, 503
  GET  RECEIVER_PATH?order_id=ID  a signed status request (webhook-id
                                  status_<ID>_<unix ms>) -> 200
                                  {"order_id", "status"}
  Test routes, unsigned (never expose them):
  POST /seed      {"id", "status"} or a list of them: insert or overwrite
                  (status: pending, paying, paid, cancelled)
  GET  /orders    [{"id", "status"}]
  GET  /applied   [{"command_id", "order_id", "at_ms"}]: one row per
                  command whose update cancelled an order; an order with
                  two rows was cancelled twice
  GET  /deliveries [{"webhook_id", "order_id", "attempt", "cancel_after",
                  "received_at_ms", "outcome"}]: every verified command
  POST /faults    {"fail_503_until"?, "drop_answer_rate"?}: set the faults
                  (fail_503_until counts from now)
"""

import base64
import hashlib
import hmac
import json
import os
import random
import sqlite3
import sys
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, status TEXT NOT NULL
    CHECK (status IN ('pending', 'paying', 'paid', 'cancelled')));
-- The final answer to each command id, written in the transaction that
-- applied it: a redelivery gets exactly the same answer.
CREATE TABLE IF NOT EXISTS answers (command_id TEXT PRIMARY KEY, result TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS applied (command_id TEXT NOT NULL, order_id TEXT NOT NULL, at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS deliveries (webhook_id TEXT NOT NULL, order_id TEXT NOT NULL,
    attempt TEXT NOT NULL, cancel_after TEXT NOT NULL, received_at_ms INTEGER NOT NULL, outcome TEXT NOT NULL);
"""

# What an order's status answers when the conditional update changed nothing.
ANSWER_OF_STATUS = {"cancelled": "already_cancelled", "paid": "already_paid", "paying": "paying"}
STATUSES = ("pending", "paying", "paid", "cancelled")
MAX_BODY = 1 << 20


def parse_secrets(value):
    keys = []
    for secret in value.split():
        if not secret.startswith("whsec_"):
            sys.exit("LAPSE_SECRETS: every secret starts with whsec_")
        keys.append(base64.b64decode(secret[len("whsec_"):], validate=True))
    if not keys:
        sys.exit("LAPSE_SECRETS: no secret")
    return keys


def now_ms():
    return int(time.time() * 1000)


class Service:
    """The order service's state: its database and its fault switches."""

    def __init__(self):
        self.keys = parse_secrets(os.environ.get("LAPSE_SECRETS", ""))
        self.tolerance = int(os.environ.get("TOLERANCE_SECONDS", "300"))
        self.path = os.environ.get("RECEIVER_PATH", "/lapse")
        retry = int(os.environ.get("PAYING_RETRY_AFTER", "0"))
        self.retry_after = retry if retry > 0 else None
        self.fail_503_left = int(os.environ.get("FAIL_503_UNTIL", "0"))
        self.drop_rate = float(os.environ.get("DROP_ANSWER_RATE", "0"))
        seed = os.environ.get("SEED")
        self.random = random.Random(int(seed) if seed else None)
        # One connection, one lock: every transaction runs alone, as
        # SQLite would make them anyway.
        self.lock = threading.Lock()
        self.db = sqlite3.connect(os.environ.get("RECEIVER_DB", ":memory:"), check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        # A test's receiver: a commit need not wait for the disk (WAL with
        # synchronous=NORMAL stays consistent across a crash of the process).
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)

    def verify(self, headers, body):
        """Returns None when the request is signed with one of the keys
        within the tolerance, else the error code to answer 401 with."""
        msg_id = headers.get("webhook-id")
        timestamp = headers.get("webhook-timestamp")
        signatures = headers.get("webhook-signature")
        if not (msg_id and timestamp and signatures):
            return "missing_signature"
        try:
            ts = int(timestamp)
        except ValueError:
            return "invalid_signature"
        if abs(time.time() - ts) > self.tolerance:
            return "stale_timestamp"
        signed = f"{msg_id}.{ts}.".encode() + body
        expected = [base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()) for key in self.keys]
        for versioned in signatures.split(" "):
            version, _, sig = versioned.partition(",")
            if version == "v1" and any(hmac.compare_digest(sig.encode(), e) for e in expected):
                return None
        return "invalid_signature"

    def take_503(self):
        with self.lock:
            if self.fail_503_left > 0:
                self.fail_503_left -= 1
                return True
            return False

    def apply(self, command_id, order_id):
        """The command, in one transaction: the stored answer to this
        command id if there is one, else the conditional update and what
        it found; a final answer is stored with it. Returns the result."""
        with self.lock:
            db = self.db
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT result FROM answers WHERE command_id = ?", (command_id,)).fetchone()
                if row:
                    db.execute("COMMIT")
                    return row[0]
                cur = db.execute("UPDATE orders SET status = 'cancelled' WHERE id = ? AND status = 'pending'", (order_id,))
                if cur.rowcount == 1:
                    result = "cancelled"
                    db.execute("INSERT INTO applied VALUES (?, ?, ?)", (command_id, order_id, now_ms()))
                else:
                    row = db.execute("SELECT status FROM orders WHERE id = ?", (order_id,)).fetchone()
                    result = "not_found" if row is None else ANSWER_OF_STATUS.get(row[0], "paying")
                if result != "paying":
                    db.execute("INSERT INTO answers VALUES (?, ?)", (command_id, result))
                db.execute("COMMIT")  # answer only what is committed
                return result
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def record(self, headers, command, outcome):
        with self.lock:
            self.db.execute("INSERT INTO deliveries VALUES (?, ?, ?, ?, ?, ?)", (
                headers.get("webhook-id"), command.get("order_id", ""), headers.get("lapse-attempt", ""),
                command.get("cancel_after", ""), now_ms(), outcome))

    def status(self, order_id):
        with self.lock:
            row = self.db.execute("SELECT status FROM orders WHERE id = ?", (order_id,)).fetchone()
        return "not_found" if row is None else row[0]

    def query(self, sql):
        with self.lock:
            cur = self.db.execute(sql)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def seed(self, orders):
        with self.lock:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT INTO orders (id, status) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET status = excluded.status",
                                [(o["id"], o["status"]) for o in orders])
            self.db.execute("COMMIT")


def invalid(command):
    """What makes command not a valid order.cancel_if_pending, or None."""
    if not isinstance(command, dict):
        return "the body is not a JSON object"
    if command.get("type") != "order.cancel_if_pending":
        return "type is not order.cancel_if_pending"
    if command.get("schema_version") != 1:
        return "unknown schema_version"
    if not isinstance(command.get("order_id"), str) or not command["order_id"]:
        return "no order_id"
    for field in ("deadline", "cancel_after"):
        try:
            datetime.fromisoformat(str(command.get(field)).replace("Z", "+00:00"))
        except ValueError:
            return field + " is not RFC 3339"
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as lapse's client expects
    service = None  # set in main

    def log_message(self, *args):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, status, code, message):
        self.reply(status, {"error": {"code": code, "message": message}})

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            self.error(413, "body_too_large", "over 1 MiB")
            return None
        return self.rfile.read(n)

    def do_POST(self):
        url = urlsplit(self.path)
        body = self.body()
        if body is None:
            return
        if url.path == "/seed":
            orders = json.loads(body)
            orders = orders if isinstance(orders, list) else [orders]
            if any(o.get("status") not in STATUSES for o in orders):
                return self.error(400, "invalid_status", "status is one of " + ", ".join(STATUSES))
            self.service.seed(orders)
            return self.reply(200, {"seeded": len(orders)})
        if url.path == "/faults":
            faults = json.loads(body)
            with self.service.lock:
                self.service.fail_503_left = int(faults.get("fail_503_until", self.service.fail_503_left))
                self.service.drop_rate = float(faults.get("drop_answer_rate", self.service.drop_rate))
            return self.reply(200, faults)
        if url.path != self.service.path:
            return self.error(404, "not_found", "no such route")
        self.handle_command(body)

    def handle_command(self, body):
        svc = self.service
        code = svc.verify(self.headers, body)
        if code:
            return self.error(401, code, "not signed with a current secret within the tolerance")
        try:
            command = json.loads(body)
        except ValueError:
            return self.error(400, "invalid_json", "the body is not JSON")
        problem = invalid(command)
        if problem:
            return self.error(400, "invalid_command", problem)
        command_id = self.headers["webhook-id"]
        if svc.take_503():
            svc.record(self.headers, command, "503")
            return self.error(503, "unavailable", "fault injected: try again")
        try:
            result = svc.apply(command_id, command["order_id"])
        except sqlite3.Error as e:
            svc.record(self.headers, command, "503")
            return self.error(503, "unavailable", str(e))
        with svc.lock:
            drop = svc.drop_rate > 0 and svc.random.random() < svc.drop_rate
        svc.record(self.headers, command, "dropped" if drop else result)
        if drop:
            # Applied and committed, and the answer lost on the way.
            self.close_connection = True
            return
        answer = {"result": result, "command_id": command_id}
        if result == "paying" and svc.retry_after:
            answer["retry_after_seconds"] = svc.retry_after
        self.reply(200, answer)

    def do_GET(self):
        url = urlsplit(self.path)
        svc = self.service
        if self.body() is None:  # read, so the connection stays usable
            return
        if url.path == "/orders":
            return self.reply(200, svc.query("SELECT id, status FROM orders ORDER BY id"))
        if url.path == "/applied":
            return self.reply(200, svc.query("SELECT command_id, order_id, at_ms FROM applied ORDER BY rowid"))
        if url.path == "/deliveries":
            return self.reply(200, svc.query("SELECT * FROM deliveries ORDER BY rowid"))
        if url.path != svc.path:
            return self.error(404, "not_found", "no such route")
        code = svc.verify(self.headers, b"")
        if code:
            return self.error(401, code, "not signed with a current secret within the tolerance")
        order_id = parse_qs(url.query).get("order_id", [""])[0]
        if not order_id:
            return self.error(400, "invalid_order_id", "want ?order_id=")
        prefix = "status_" + order_id + "_"
        msg_id = self.headers["webhook-id"]
        if not (msg_id.startswith(prefix) and msg_id[len(prefix):].isdigit()):
            return self.error(401, "status_id_mismatch", "webhook-id is not status_<order_id>_<unix ms>")
        self.reply(200, {"order_id": order_id, "status": svc.status(order_id)})


def main():
    Handler.service = Service()
    server = ThreadingHTTPServer((os.environ.get("HOST", "127.0.0.1"), int(os.environ.get("PORT", "0"))), Handler)
    server.daemon_threads = True
    host, port = server.server_address[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
