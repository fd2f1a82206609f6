package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/store/storetest"
)

// legacyTables are the tables of lapse before version 9, unprefixed.
var legacyTables = []string{"skus", "orders", "order_items", "stock_ledger", "idempotency_keys", "outbox",
	"payment_callbacks", "payments", "outbox_sinks", "outbox_deliveries", "stock_tasks", "schema_migrations"}

// legacyRows fills every table of an earlier lapse's database (version 8),
// written as that lapse wrote them.
const legacyRows = `
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
INSERT INTO orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at, cancelled_at,
                    cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id)
SELECT 'o-' || i, CASE i % 4 WHEN 0 THEN 'PENDING' WHEN 1 THEN 'PAYING' WHEN 2 THEN 'PAID' ELSE 'CANCELLED' END, i * 10, 'USD',
       1700000000000, 1700000000000 + i * 1000, 1700000000000 + i * 1000,
       CASE WHEN i % 4 = 2 THEN 1700000001000 END, CASE WHEN i % 4 = 3 THEN 1700000002000 END, CASE WHEN i % 4 = 3 THEN 'timeout' END,
       CASE WHEN i % 4 = 2 THEN 'pay-' || i END, i % 40 = 2, i % 4, 1 + i % 4, CASE WHEN i % 10 = 0 THEN 'res-' || i END
FROM n;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50)
INSERT INTO skus (sku, available, locked, sold, total, updated_at) SELECT 'sku-' || i, 100, i % 3, i % 2, 100 + i % 3 + i % 2, 1700000000000 FROM n;
INSERT INTO order_items (order_id, sku, qty) SELECT id, 'sku-' || (1 + rowid % 50), 1 + rowid % 3 FROM orders;
INSERT INTO stock_ledger (order_id, sku, action, qty, created_at) SELECT order_id, sku, 'reserve', qty, 1700000000000 FROM order_items;
INSERT INTO idempotency_keys (key, request_hash, order_id, created_at) SELECT 'k-' || id, 'h', id, 1700000000000 FROM orders WHERE rowid <= 100;
INSERT INTO outbox (event_id, type, order_id, payload, created_at, published_at, fanned_out)
SELECT 'ev-' || id, 'order.created', id, '{"id":"' || id || '"}', 1700000000000, CASE WHEN rowid % 2 = 0 THEN 1700000000000 END, rowid % 2 = 0
FROM orders WHERE rowid <= 300;
INSERT INTO payment_callbacks (callback_id, order_id, seen_at) SELECT 'cb-' || id, id, 1700000000000 FROM orders WHERE rowid <= 20;
INSERT INTO payments (order_id, payment_id, status, amount_cents, currency, conflicts, created_at, updated_at)
SELECT id, payment_id, 'SUCCEEDED', amount_cents, 'USD', 0, 1700000000000, 1700000000000 FROM orders WHERE payment_id IS NOT NULL;
INSERT INTO outbox_sinks (name, registered_at) VALUES ('webhook', 1700000000000), ('kafka', 1700000000000);
INSERT INTO outbox_deliveries (sink, seq, order_id, next_at, attempts, dead)
SELECT 'webhook', seq, order_id, 1700000000000, seq % 3, seq % 50 = 0 FROM outbox WHERE fanned_out = 1;
INSERT INTO stock_tasks (id, order_id, action, reservation_id, items, status, next_at, since, created_at)
SELECT 't-' || id, id, 'release', reservation_id, '[]', 'PENDING', 1700000000000, 1700000000000, 1700000000000 FROM orders WHERE reservation_id IS NOT NULL;
`

// legacyDB is a database as an earlier lapse (001-008) left it, with rows in
// every table: the legacy migrations applied as that lapse applied them.
func legacyDB(t *testing.T, upTo int) (string, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lapse.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(sqlite.Files, "migrations/legacy/*.up.sql")
	if err != nil || len(names) != 8 {
		t.Fatalf("legacy migrations: %v (%v)", names, err)
	}
	for i, name := range names[:upTo] {
		b, err := fs.ReadFile(sqlite.Files, name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(string(b)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		base := strings.TrimSuffix(filepath.Base(name), ".up.sql")
		if _, err := db.Exec(`INSERT INTO schema_migrations VALUES (?, ?, ?)`, i+1, base[4:], 1600000000000+int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if upTo == 8 {
		if _, err := db.Exec(legacyRows); err != nil {
			t.Fatal(err)
		}
	}
	return path, db
}

func openPath(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// tableDigests is, per table (unprefixed name), its row count and its rows
// in order, read under prefix.
func tableDigests(t *testing.T, db *sql.DB, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, tb := range legacyTables {
		rows, err := db.Query(`SELECT * FROM "` + prefix + tb + `" ORDER BY 1, 2`)
		if err != nil {
			t.Fatalf("%s%s: %v", prefix, tb, err)
		}
		cols, _ := rows.Columns()
		var b strings.Builder
		n := 0
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			n++
			b.WriteString(strings.TrimSpace(strings.ReplaceAll(strings.Join(strings.Fields(fmtRow(vals)), " "), "\n", " ")))
			b.WriteByte('|')
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		out[tb] = itoa(n) + " " + b.String()
	}
	return out
}

// schemaShape is what a database's lapse_* tables and indexes are, one line
// each, sorted: columns, index columns, foreign keys.
func schemaShape(t *testing.T, db *sql.DB) string {
	t.Helper()
	var shape string
	err := db.QueryRow(`SELECT group_concat(x, char(10)) FROM (SELECT x FROM (
	SELECT 'column ' || m.name || '.' || c.name || ' #' || c.cid || ' ' || c.type || ' ' || c."notnull" || ' ' || coalesce(c.dflt_value, '') || ' pk' || c.pk AS x
	FROM sqlite_master m, pragma_table_info(m.name) c WHERE m.type = 'table' AND m.name LIKE 'lapse\_%' ESCAPE '\' AND m.name <> 'lapse_schema_migrations'
	UNION ALL
	SELECT 'index ' || m.name || ' ' || l.name || ' unique' || l."unique" || ' ' || l.origin || ' partial' || l.partial || ' ' || coalesce(i.sql, '') || ' ' ||
	       (SELECT group_concat(coalesce(ii.name, '?'), ',') FROM pragma_index_info(l.name) ii)
	FROM sqlite_master m, pragma_index_list(m.name) l LEFT JOIN sqlite_master i ON i.name = l.name
	WHERE m.type = 'table' AND m.name LIKE 'lapse\_%' ESCAPE '\' AND m.name <> 'lapse_schema_migrations'
	UNION ALL
	SELECT 'fk ' || m.name || '.' || f."from" || ' -> ' || f."table" || '.' || f."to"
	FROM sqlite_master m, pragma_foreign_key_list(m.name) f WHERE m.type = 'table' AND m.name LIKE 'lapse\_%' ESCAPE '\'
	) ORDER BY x)`).Scan(&shape)
	if err != nil {
		t.Fatal(err)
	}
	return shape
}

// An installation of an earlier lapse, with rows in every table, is renamed
// to lapse_* in place: every row kept, the same schema a fresh database
// gets, its identity unchanged, and the store working on it.
func TestMigrateRenamesAnEarlierLapseKeepingEveryRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db := legacyDB(t, 8)
	before := tableDigests(t, db, "")
	var lastSeq int64
	if err := db.QueryRow(`SELECT max(seq) FROM outbox`).Scan(&lastSeq); err != nil {
		t.Fatal(err)
	}
	s := openPath(t, path)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate the earlier database: %v", err)
	}
	after := tableDigests(t, db, "lapse_")
	for _, tb := range legacyTables {
		if tb == "schema_migrations" {
			continue // it gained version 9
		}
		if before[tb] != after[tb] {
			t.Errorf("%s: the rename changed its rows", tb)
		}
		if strings.HasPrefix(before[tb], "0 ") {
			t.Errorf("%s: the test left it empty", tb)
		}
	}
	var n, left int
	if err := db.QueryRow(`SELECT count(*), (SELECT count(*) FROM sqlite_master WHERE name IN ('orders', 'skus', 'outbox', 'payments'))
		FROM lapse_schema_migrations WHERE version BETWEEN 1 AND 9`).Scan(&n, &left); err != nil || n != 9 || left != 0 {
		t.Fatalf("after the rename: versions 1-9 recorded %d, old tables left %d (%v)", n, left, err)
	}
	if id, err := s.Identity(ctx); err != nil || id != "sqlite:"+time.UnixMilli(1600000000000).UTC().Format(time.RFC3339Nano) {
		t.Errorf("identity after the rename: %q (%v), want the first migration's time", id, err)
	}
	_, fresh := open(t, clock.Real{})
	freshDB, err := sql.Open("sqlite", "file:"+fresh)
	if err != nil {
		t.Fatal(err)
	}
	defer freshDB.Close()
	if got, want := schemaShape(t, db), schemaShape(t, freshDB); got != want {
		t.Errorf("the renamed schema differs from a fresh one:\n--- renamed\n%s\n--- fresh\n%s", got, want)
	}
	storetest.Stock(t, s, 5, "new-sku")
	storetest.Create(t, s, "after-rename", "new-sku")
	var seq int64
	if err := db.QueryRow(`SELECT max(seq) FROM lapse_outbox WHERE order_id = 'after-rename'`).Scan(&seq); err != nil || seq <= lastSeq {
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
	path, db := legacyDB(t, 5)
	if _, err := db.Exec(`INSERT INTO orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at, payment_id)
		VALUES ('old-paid', 'PAID', 500, 'EUR', 1, 1, 1, 1, 'pay-old')`); err != nil {
		t.Fatal(err)
	}
	if err := openPath(t, path).Migrate(context.Background()); err != nil {
		t.Fatalf("migrate a version-5 database: %v", err)
	}
	var status, currency string
	if err := db.QueryRow(`SELECT status, currency FROM lapse_payments WHERE order_id = 'old-paid'`).Scan(&status, &currency); err != nil || status != "SUCCEEDED" || currency != "EUR" {
		t.Fatalf("the paying attempt 008 records: %s %s (%v)", status, currency, err)
	}
}

// A database that holds the shop's own orders and a golang-migrate
// schema_migrations migrates, and lapse touches neither.
func TestMigrateLeavesTheShopsTablesAlone(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "shop.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`
CREATE TABLE schema_migrations (version uint64 NOT NULL PRIMARY KEY, dirty bool NOT NULL);
INSERT INTO schema_migrations VALUES (20240101120000, 0);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, status TEXT NOT NULL);
CREATE INDEX orders_created ON orders (customer);
INSERT INTO orders (customer, status) VALUES ('ann', 'pending'), ('bob', 'paid');`); err != nil {
		t.Fatal(err)
	}
	shop := func() string {
		var d string
		if err := db.QueryRow(`SELECT (SELECT group_concat(version || ' ' || dirty) FROM schema_migrations) || ' / ' ||
			(SELECT group_concat(id || ' ' || customer || ' ' || status) FROM orders) || ' / ' ||
			(SELECT group_concat(type || ' ' || name || ' ' || coalesce(sql, ''), ';') FROM sqlite_master WHERE name NOT LIKE 'lapse\_%' ESCAPE '\' AND name NOT LIKE 'sqlite\_%' ESCAPE '\')`).Scan(&d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	before := shop()
	s := openPath(t, path)
	for range 2 {
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatalf("migrate beside the shop's tables: %v", err)
		}
	}
	if after := shop(); after != before {
		t.Errorf("the shop's tables changed:\nbefore %s\nafter  %s", before, after)
	}
	storetest.Stock(t, s, 1, "a")
	storetest.Create(t, s, "o", "a")
}

// A rename that fails half-way leaves the earlier database as it was, rows
// included; the next Migrate renames it.
func TestFailedRenameLeavesTheEarlierSchemaAsItWas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db := legacyDB(t, 8)
	before := tableDigests(t, db, "")
	legacy, err := fs.Sub(sqlite.Files, "migrations/legacy")
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
			b = append(b, "\nINSERT INTO lapse_orders (id) VALUES ('no status');\n"...)
		}
		broken["l/"+p] = &fstest.MapFile{Data: b}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s := openPath(t, path)
	if err := s.MigrateWithLegacy(ctx, broken, "l"); err == nil || !strings.Contains(err.Error(), "NOT NULL") {
		t.Fatalf("a rename that fails: err = %v", err)
	}
	if after := tableDigests(t, db, ""); !equalMaps(before, after) {
		t.Fatal("the failed rename changed the earlier tables")
	}
	var lapseObjects int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name LIKE 'lapse\_%' ESCAPE '\'`).Scan(&lapseObjects); err != nil || lapseObjects != 0 {
		t.Fatalf("%d lapse_ objects after the failed rename (%v)", lapseObjects, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate after the failure: %v", err)
	}
	after := tableDigests(t, db, "lapse_")
	for _, tb := range legacyTables[:len(legacyTables)-1] {
		if before[tb] != after[tb] {
			t.Errorf("%s: the rename changed its rows", tb)
		}
	}
}

// What an earlier lapse does on a renamed database: its Migrate reads
// schema_migrations first (and its Identity too), and the marker left there
// refuses every read with a message that says why, before it creates
// anything.
func TestAnEarlierLapseRefusesTheRenamedSchema(t *testing.T) {
	t.Parallel()
	path, db := legacyDB(t, 8)
	if err := openPath(t, path).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The statements of the earlier Migrate, in order (its sqlite.go).
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatalf("the earlier CREATE TABLE IF NOT EXISTS: %v", err)
	}
	var n int
	err := db.QueryRow(`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, 1).Scan(&n)
	if err == nil || !strings.Contains(err.Error(), "migrated by a newer lapse") || !strings.Contains(err.Error(), "upgrade lapse") {
		t.Fatalf("the earlier migrate's first read: %d, err %v", n, err)
	}
	var at int64
	if err := db.QueryRow(`SELECT applied_at FROM schema_migrations WHERE version = 1`).Scan(&at); err == nil || !strings.Contains(err.Error(), "migrated by a newer lapse") {
		t.Fatalf("the earlier identity: %d, err %v", at, err)
	}
	// The marker does not stand in the way of renaming tables later.
	if _, err := db.Exec(`CREATE TABLE shop_t (x); ALTER TABLE shop_t RENAME TO shop_u`); err != nil {
		t.Fatalf("a rename beside the marker: %v", err)
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

func fmtRow(vals []any) string { return fmt.Sprint(vals...) }

func itoa(n int) string { return strconv.Itoa(n) }
