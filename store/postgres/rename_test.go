package postgres_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/storetest"
)

// legacyTables are the tables of lapse before version 9, unprefixed.
var legacyTables = []string{"skus", "orders", "order_items", "stock_ledger", "idempotency_keys", "outbox",
	"payment_callbacks", "payments", "outbox_sinks", "outbox_fanout", "outbox_deliveries", "stock_tasks", "schema_migrations"}

// legacyRows fills every table of an earlier lapse's schema (version 8),
// written as that lapse wrote them.
const legacyRows = `
INSERT INTO skus (sku, available, locked, sold, total, updated_at)
SELECT 'sku-' || i, 100, i % 3, i % 2, 100 + i % 3 + i % 2, now() FROM generate_series(1, 50) i;
INSERT INTO orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at, cancelled_at,
                    cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id)
SELECT 'o-' || i, (ARRAY['PENDING', 'PAYING', 'PAID', 'CANCELLED'])[1 + i % 4], i * 10, 'USD',
       now() - interval '1 hour', now() + i * interval '1 second', now() + i * interval '1 second',
       CASE WHEN i % 4 = 2 THEN now() END, CASE WHEN i % 4 = 3 THEN now() END, CASE WHEN i % 4 = 3 THEN 'timeout' END,
       CASE WHEN i % 4 = 2 THEN 'pay-' || i END, i % 40 = 2, i % 4, 1 + i % 4, CASE WHEN i % 10 = 0 THEN 'res-' || i END
FROM generate_series(1, 1000) i;
INSERT INTO order_items (order_id, sku, qty) SELECT 'o-' || i, 'sku-' || (1 + i % 50), 1 + i % 3 FROM generate_series(1, 1000) i;
INSERT INTO stock_ledger (order_id, sku, action, qty, created_at)
SELECT 'o-' || i, 'sku-' || (1 + i % 50), 'reserve', 1 + i % 3, now() FROM generate_series(1, 1000) i;
INSERT INTO idempotency_keys (key, request_hash, order_id, created_at) SELECT 'k-' || i, md5(i::text), 'o-' || i, now() FROM generate_series(1, 100) i;
INSERT INTO outbox (event_id, type, order_id, payload, created_at, published_at, fanned_out)
SELECT gen_random_uuid(), 'order.created', 'o-' || i, json_build_object('id', 'o-' || i), now(),
       CASE WHEN i % 2 = 0 THEN now() END, i % 2 = 0 FROM generate_series(1, 300) i;
INSERT INTO payment_callbacks (callback_id, order_id, seen_at) SELECT 'cb-' || i, 'o-' || i, now() FROM generate_series(1, 20) i;
INSERT INTO payments (order_id, payment_id, status, amount_cents, currency, conflicts, created_at, updated_at)
SELECT 'o-' || i, 'pay-' || i, 'SUCCEEDED', i * 10, 'USD', 0, now(), now() FROM generate_series(2, 1000, 4) i;
INSERT INTO outbox_sinks (name, registered_at) VALUES ('webhook', now()), ('kafka', now());
INSERT INTO outbox_deliveries (sink, seq, order_id, next_at, attempts, dead)
SELECT 'webhook', seq, order_id, now(), seq % 3, seq % 50 = 0 FROM outbox WHERE fanned_out;
INSERT INTO stock_tasks (id, order_id, action, reservation_id, items, status, next_at, since, created_at)
SELECT 't-' || i, 'o-' || i, 'release', 'res-' || i, '[]', 'PENDING', now(), now(), now() FROM generate_series(10, 1000, 10) i;
`

// tableDigests is, per table (unprefixed name), its row count and a digest
// of its rows in order, read under prefix.
func tableDigests(t *testing.T, conn *pgx.Conn, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, tb := range legacyTables {
		var d string
		err := conn.QueryRow(context.Background(), `SELECT count(*) || ' ' || coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM `+
			pgx.Identifier{prefix + tb}.Sanitize()+` t`).Scan(&d)
		if err != nil {
			t.Fatalf("%s%s: %v", prefix, tb, err)
		}
		out[tb] = d
	}
	return out
}

// schemaShape is what a schema's lapse_* objects are: columns, indexes,
// constraints and sequences, one line each, sorted.
func schemaShape(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var shape string
	err := conn.QueryRow(context.Background(), `SELECT string_agg(x, E'\n' ORDER BY x) FROM (
	SELECT 'column ' || table_name || '.' || column_name || ' #' || ordinal_position || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
	FROM information_schema.columns WHERE table_schema = current_schema() AND table_name LIKE 'lapse\_%' AND table_name <> 'lapse_schema_migrations'
	UNION ALL
	SELECT 'index ' || regexp_replace(indexdef, ' ON \S+\.', ' ON ') FROM pg_indexes WHERE schemaname = current_schema() AND tablename <> 'lapse_schema_migrations'
	UNION ALL
	SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
	FROM pg_constraint WHERE connamespace = current_schema()::regnamespace AND conrelid::regclass::text <> 'lapse_schema_migrations'
	UNION ALL
	SELECT 'relation ' || relkind::text || ' ' || relname FROM pg_class
	WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'S') AND relname <> 'lapse_schema_migrations') s(x)`).Scan(&shape)
	if err != nil {
		t.Fatal(err)
	}
	return shape
}

// legacySchema is a schema as an earlier lapse (001-008) left it, with rows
// in every table, and its URL.
func legacySchema(t *testing.T) (*postgres.Store, string) {
	t.Helper()
	u := newSchema(t)
	s := openURL(t, u, nil)
	if err := s.LegacyVersion(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := connect(t, u).Exec(context.Background(), legacyRows); err != nil {
		t.Fatal(err)
	}
	return s, u
}

// An installation of an earlier lapse, with rows in every table, is renamed
// to lapse_* in place: every row kept, the same schema a fresh database
// gets, its identity unchanged, and the store working on it.
func TestMigrateRenamesAnEarlierLapseKeepingEveryRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, u := legacySchema(t)
	conn := connect(t, u)
	before := tableDigests(t, conn, "")
	var firstApplied time.Time
	var lastSeq int64
	if err := conn.QueryRow(ctx, `SELECT (SELECT applied_at FROM schema_migrations WHERE version = 1), (SELECT max(seq) FROM outbox)`).Scan(&firstApplied, &lastSeq); err != nil {
		t.Fatal(err)
	}

	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate the earlier schema: %v", err)
	}
	after := tableDigests(t, conn, "lapse_")
	for _, tb := range legacyTables {
		if tb == "schema_migrations" {
			continue // it gained version 9
		}
		if before[tb] != after[tb] {
			t.Errorf("%s: before the rename %s, after %s", tb, before[tb], after[tb])
		}
		if strings.HasPrefix(before[tb], "0 ") {
			t.Errorf("%s: the test left it empty", tb)
		}
	}
	var versions []int
	rows, _ := conn.Query(ctx, `SELECT version FROM lapse_schema_migrations ORDER BY version`)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil || len(versions) < 9 || versions[8] != 9 || (len(versions) > 9 && versions[9] != 10) {
		t.Fatalf("versions after the rename: %v (%v), want 1-9, then the later migrations", versions, err)
	}
	if id, err := s.Identity(ctx); err != nil || id != "postgres:"+firstApplied.UTC().Format(time.RFC3339Nano) {
		t.Errorf("identity after the rename: %q (%v), want the first migration's time %v", id, err, firstApplied)
	}
	for _, tb := range legacyTables {
		if tb == "schema_migrations" {
			continue // the marker view
		}
		var left bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, tb).Scan(&left); err != nil || left {
			t.Errorf("%s still there after the rename (%v)", tb, err)
		}
	}

	fresh, freshURL := open(t, clock.Real{})
	_ = fresh
	if got, want := schemaShape(t, conn), schemaShape(t, connect(t, freshURL)); got != want {
		t.Errorf("the renamed schema differs from a fresh one:\n--- renamed\n%s\n--- fresh\n%s", got, want)
	}

	// The store works on the renamed tables, and the outbox's sequence goes on.
	storetest.Stock(t, s, 5, "new-sku")
	storetest.Create(t, s, "after-rename", "new-sku")
	var seq int64
	if err := conn.QueryRow(ctx, `SELECT max(seq) FROM lapse_outbox WHERE order_id = 'after-rename'`).Scan(&seq); err != nil || seq <= lastSeq {
		t.Errorf("the new order's event has seq %d (%v), want after %d", seq, err, lastSeq)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Errorf("a second migrate: %v", err)
	}
}

// An earlier lapse that had not run every legacy migration is brought to the
// last one, then renamed.
func TestMigrateRenamesAnOlderLapseAfterItsMissingMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := newSchema(t)
	s := openURL(t, u, nil)
	legacy, err := fs.Sub(postgres.Files, "migrations/legacy")
	if err != nil {
		t.Fatal(err)
	}
	upTo5 := fstest.MapFS{}
	for _, name := range []string{"001_init.up.sql", "002_payment_callbacks.up.sql", "003_payments.up.sql", "004_outbox_sinks.up.sql", "005_stock_tasks.up.sql"} {
		b, err := fs.ReadFile(legacy, name)
		if err != nil {
			t.Fatal(err)
		}
		upTo5["m/"+name] = &fstest.MapFile{Data: b}
	}
	if err := s.LegacyVersionFrom(ctx, upTo5, "m"); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, u)
	if _, err := conn.Exec(ctx, `INSERT INTO orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at, payment_id)
		VALUES ('old-paid', 'PAID', 500, 'EUR', now(), now(), now(), now(), 'pay-old')`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate a version-5 schema: %v", err)
	}
	// 008 ran before the rename: the paid order's attempt was recorded.
	var status, currency string
	if err := conn.QueryRow(ctx, `SELECT status, currency FROM lapse_payments WHERE order_id = 'old-paid'`).Scan(&status, &currency); err != nil || status != "SUCCEEDED" || currency != "EUR" {
		t.Fatalf("the paying attempt 008 records: %s %s (%v)", status, currency, err)
	}
}

// A database that holds the shop's own orders and a golang-migrate
// schema_migrations migrates, and lapse touches neither.
func TestMigrateLeavesTheShopsTablesAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := newSchema(t)
	conn := connect(t, u)
	if _, err := conn.Exec(ctx, `
CREATE TABLE schema_migrations (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL);
INSERT INTO schema_migrations VALUES (20240101120000, false);
CREATE TABLE orders (id bigserial PRIMARY KEY, customer text NOT NULL, status text NOT NULL);
INSERT INTO orders (customer, status) VALUES ('ann', 'pending'), ('bob', 'paid');
CREATE TABLE stock_ledger (action text);
CREATE TABLE order_items (qty int);`); err != nil {
		t.Fatal(err)
	}
	shop := func() string {
		var d string
		if err := conn.QueryRow(ctx, `SELECT (SELECT string_agg(t::text, '|' ORDER BY t::text) FROM schema_migrations t) || ' / ' ||
			(SELECT string_agg(t::text, '|' ORDER BY t::text) FROM orders t) || ' / ' ||
			(SELECT string_agg(table_name || '.' || column_name || ' ' || data_type, ',' ORDER BY table_name, ordinal_position)
			 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name NOT LIKE 'lapse\_%') || ' / ' ||
			(SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes WHERE schemaname = current_schema() AND indexname NOT LIKE 'lapse\_%')`).Scan(&d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	before := shop()
	s := openURL(t, u, nil)
	for range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("migrate beside the shop's tables: %v", err)
		}
	}
	if after := shop(); after != before {
		t.Errorf("the shop's tables changed:\nbefore %s\nafter  %s", before, after)
	}
	storetest.Stock(t, s, 1, "a")
	storetest.Create(t, s, "o", "a")
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM lapse_orders`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("lapse_orders holds %d rows (%v), want 1", n, err)
	}
}

// A rename that fails half-way leaves the earlier schema as it was, rows
// included; the next Migrate renames it.
func TestFailedRenameLeavesTheEarlierSchemaAsItWas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, u := legacySchema(t)
	conn := connect(t, u)
	before := tableDigests(t, conn, "")
	legacy, err := fs.Sub(postgres.Files, "migrations/legacy")
	if err != nil {
		t.Fatal(err)
	}
	broken := fstest.MapFS{}
	if err := fs.WalkDir(legacy, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(legacy, p)
		if p == "rename.sql" {
			b = append(b, "\nSELECT 1 / 0;\n"...)
		}
		broken["l/"+p] = &fstest.MapFile{Data: b}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.MigrateWithLegacy(ctx, broken, "l"); err == nil || !strings.Contains(err.Error(), "division by zero") {
		t.Fatalf("a rename that fails: err = %v", err)
	}
	if after := tableDigests(t, conn, ""); !equalMaps(before, after) {
		t.Fatalf("after the failed rename:\n%v\nbefore:\n%v", after, before)
	}
	var lapseObjects int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relname LIKE 'lapse\_%'`).Scan(&lapseObjects); err != nil || lapseObjects != 0 {
		t.Fatalf("%d lapse_ objects after the failed rename (%v)", lapseObjects, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate after the failure: %v", err)
	}
	after := tableDigests(t, conn, "lapse_")
	for _, tb := range legacyTables[:len(legacyTables)-1] {
		if before[tb] != after[tb] {
			t.Errorf("%s: before %s, after %s", tb, before[tb], after[tb])
		}
	}
}

// What an earlier lapse does on a renamed schema: its Migrate reads
// schema_migrations first (and its Identity too), and the marker left there
// refuses every read with a message that says why, before it creates
// anything.
func TestAnEarlierLapseRefusesTheRenamedSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, u := legacySchema(t)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, u)
	// The statements of the earlier Migrate, in order (its queries.sql).
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		t.Fatalf("the earlier CREATE TABLE IF NOT EXISTS: %v", err)
	}
	var done bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, 1).Scan(&done)
	if err == nil || !strings.Contains(err.Error(), "migrated by a newer lapse") || !strings.Contains(err.Error(), "upgrade lapse") {
		t.Fatalf("the earlier migrate's first read: done %v, err %v", done, err)
	}
	var at time.Time
	err = conn.QueryRow(ctx, `SELECT applied_at FROM schema_migrations WHERE version = 1`).Scan(&at)
	if err == nil || !strings.Contains(err.Error(), "migrated by a newer lapse") {
		t.Fatalf("the earlier identity: %v, err %v", at, err)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
