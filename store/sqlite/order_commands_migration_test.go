package sqlite_test

import (
	"context"
	"database/sql"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/store/storetest"
)

// migratedBefore is a database as lapse left it before migration 011 (every
// migration below it applied, as Migrate records them), with rows in the
// tables that name lapse_orders: orders of every status, their items, their
// payment attempts, and the SKUs and ledger rows beside them. db has foreign
// keys on, as the store's connections have.
func migratedBefore(t *testing.T, version int) (string, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lapse.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE lapse_schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(sqlite.Files, "migrations/*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	for _, name := range names {
		base := strings.TrimSuffix(filepath.Base(name), ".up.sql")
		v, err := strconv.Atoi(base[:3])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if v >= version {
			continue
		}
		b, err := fs.ReadFile(sqlite.Files, name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(string(b)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := db.Exec(`INSERT INTO lapse_schema_migrations VALUES (?, ?, ?)`, v, base[4:], 1600000000000+int64(v)); err != nil {
			t.Fatal(err)
		}
		applied++
	}
	if applied == 0 {
		t.Fatalf("no migration below %d", version)
	}
	if _, err := db.Exec(rowsBefore011); err != nil {
		t.Fatal(err)
	}
	return path, db
}

// rowsBefore011 fills the tables 011 rebuilds or whose foreign keys name
// lapse_orders.
const rowsBefore011 = `
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 400)
INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at, cancelled_at,
                          cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id)
SELECT 'o-' || i, CASE i % 4 WHEN 0 THEN 'PENDING' WHEN 1 THEN 'PAYING' WHEN 2 THEN 'PAID' ELSE 'CANCELLED' END, i * 10, 'USD',
       1700000000000 + i, 1700000000000 + i * 1000, 1700000060000 + i * 1000,
       CASE WHEN i % 4 = 2 THEN 1700000001000 END, CASE WHEN i % 4 = 3 THEN 1700000002000 END,
       CASE WHEN i % 4 = 3 THEN CASE WHEN i % 8 = 3 THEN 'timeout' ELSE 'buyer' END END,
       CASE WHEN i % 4 IN (1, 2) THEN 'pay-' || i END, i % 40 = 2, i % 3, 1 + i % 4, CASE WHEN i % 10 = 0 THEN 'res-' || i END
FROM n;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50)
INSERT INTO lapse_skus (sku, available, locked, sold, total, updated_at)
SELECT 'sku-' || i, 100, i % 3, i % 2, 100 + i % 3 + i % 2, 1700000000000 FROM n;
INSERT INTO lapse_order_items (order_id, sku, qty) SELECT id, 'sku-' || (1 + rowid % 50), 1 + rowid % 3 FROM lapse_orders;
INSERT INTO lapse_order_items (order_id, sku, qty) SELECT id, 'sku-' || (1 + (rowid + 7) % 50), 2 FROM lapse_orders WHERE rowid % 3 = 0;
INSERT INTO lapse_stock_ledger (order_id, sku, action, qty, created_at) SELECT order_id, sku, 'reserve', qty, 1700000000000 FROM lapse_order_items;
INSERT INTO lapse_payments (order_id, payment_id, status, amount_cents, currency, conflicts, created_at, updated_at)
SELECT id, payment_id, CASE status WHEN 'PAID' THEN 'SUCCEEDED' ELSE 'PENDING' END, amount_cents, 'USD', 0, 1700000000000, 1700000000000
FROM lapse_orders WHERE payment_id IS NOT NULL;
INSERT INTO lapse_payments (order_id, payment_id, status, amount_cents, currency, conflicts, created_at, updated_at)
SELECT id, id || '-failed', 'FAILED', amount_cents, '', 1, 1699999999000, 1699999999000 FROM lapse_orders WHERE payment_attempts > 0;
`

// migrateKeepingRows is the step every SQLite migration that builds a
// table again shares (011 lapse_orders, 012 lapse_payments, 013
// lapse_orders): on db at path (migratedBefore version), it migrates, and
// fails the test unless every row of tables survives (each had some), the
// foreign keys hold, no copy of rebuilt is left aside, and the schema is a
// fresh one's. It returns the store, for the test's own probes.
func migrateKeepingRows(t *testing.T, path string, db *sql.DB, version int, rebuilt string, tables []string) *sqlite.Store {
	t.Helper()
	before := map[string][]string{}
	for _, tb := range tables {
		if before[tb] = rowsOf(t, db, tb); len(before[tb]) == 0 {
			t.Fatalf("%s: the test left it empty", tb)
		}
	}
	s := openPath(t, path)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate to %03d with rows: %v", version, err)
	}
	for _, tb := range tables {
		if after := rowsOf(t, db, tb); !slices.Equal(before[tb], after) {
			t.Errorf("%s: %d rows before, %d after, or some changed", tb, len(before[tb]), len(after))
		}
	}
	if bad := strings1(t, db, `SELECT "table" || ' row ' || rowid || ' -> ' || parent FROM pragma_foreign_key_check`); len(bad) != 0 {
		t.Errorf("foreign_key_check after %03d: %v", version, bad)
	}
	if left := strings1(t, db, `SELECT name FROM sqlite_master WHERE name LIKE '`+rebuilt+`%' AND type = 'table' AND name <> '`+rebuilt+`'`); len(left) != 0 {
		t.Errorf("tables left aside: %v", left)
	}
	_, fresh := open(t, clock.Real{})
	freshDB, err := sql.Open("sqlite", "file:"+fresh)
	if err != nil {
		t.Fatal(err)
	}
	defer freshDB.Close()
	if got, want := schemaShape(t, db), schemaShape(t, freshDB); got != want {
		t.Errorf("the migrated schema differs from a fresh one:\n--- migrated\n%s\n--- fresh\n%s", got, want)
	}
	return s
}

// wantOrdersForeignKey fails the test unless each of children has one
// foreign key, to lapse_orders.id.
func wantOrdersForeignKey(t *testing.T, db *sql.DB, children ...string) {
	t.Helper()
	for _, child := range children {
		fks := strings1(t, db, `SELECT "table" || '.' || "to" FROM pragma_foreign_key_list('`+child+`')`)
		if !slices.Equal(fks, []string{"lapse_orders.id"}) {
			t.Errorf("%s's foreign keys name %v, want lapse_orders.id", child, fks)
		}
	}
}

// refusedBy reports whether err is a constraint of kind ("CHECK",
// "FOREIGN KEY") refusing a row.
func refusedBy(err error, kind string) bool {
	return err != nil && strings.Contains(err.Error(), kind)
}

// rowsOf is every row of table, in primary-key order, as text.
func rowsOf(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT * FROM ` + table + ` ORDER BY 1, 2`)
	if err != nil {
		t.Fatalf("%s: %v", table, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmtRow(vals))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// strings1 runs a query returning one text column.
func strings1(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Migration 011 builds lapse_orders again (SQLite cannot alter a CHECK): on
// a database with orders, items and payments, every row survives, the
// foreign keys of lapse_order_items and lapse_payments still name
// lapse_orders (and hold), its indexes are back, no table is left aside,
// and the new status can be written while the CHECK still refuses others.
func TestOrderCommandsMigrationRebuildsOrdersKeepingEveryRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db := migratedBefore(t, 11)
	s := migrateKeepingRows(t, path, db, 11, "lapse_orders",
		[]string{"lapse_orders", "lapse_order_items", "lapse_payments", "lapse_skus", "lapse_stock_ledger"})
	wantOrdersForeignKey(t, db, "lapse_order_items", "lapse_payments")
	indexes := strings1(t, db, `SELECT name FROM pragma_index_list('lapse_orders') WHERE origin = 'c' ORDER BY name`)
	want := []string{"lapse_orders_cancelled_at", "lapse_orders_created", "lapse_orders_paid_at", "lapse_orders_refund_required",
		"lapse_orders_reservation", "lapse_orders_status_cancel_after"}
	if !slices.Equal(indexes, want) {
		t.Errorf("lapse_orders' indexes %v, want %v", indexes, want)
	}

	// The new status is accepted, any other refused; the foreign keys hold.
	if _, err := db.Exec(`UPDATE lapse_orders SET status = 'CANCELLING' WHERE id = 'o-4'`); err != nil {
		t.Errorf("write CANCELLING: %v", err)
	}
	if _, err := db.Exec(`UPDATE lapse_orders SET status = 'BOGUS' WHERE id = 'o-8'`); !refusedBy(err, "CHECK") {
		t.Errorf("write BOGUS: %v, want the CHECK to refuse it", err)
	}
	if _, err := db.Exec(`INSERT INTO lapse_order_items (order_id, sku, qty) VALUES ('no-such-order', 'sku-1', 1)`); !refusedBy(err, "FOREIGN KEY") {
		t.Errorf("an item of no order: %v, want the foreign key to refuse it", err)
	}
	if _, err := db.Exec(`INSERT INTO lapse_payments (order_id, payment_id, status, created_at, updated_at) VALUES ('no-such-order', 'p', 'PENDING', 0, 0)`); !refusedBy(err, "FOREIGN KEY") {
		t.Errorf("a payment of no order: %v, want the foreign key to refuse it", err)
	}

	// The store works on it: an old paid order is read with its items, a
	// migrated due one is commanded, a new one is created, and a second
	// Migrate changes nothing.
	if got, err := s.GetOrder(ctx, "o-2"); err != nil || len(got.Items) != 1 || got.Status != "PAID" {
		t.Errorf("a migrated order: %+v, %v", got, err)
	}
	res, err := s.CancelDue(ctx, store.CancelDueParams{IDs: []string{"o-8"}, Command: true})
	if err != nil || len(res.Cancelled) != 1 {
		t.Errorf("command a migrated due order: %+v, %v", res, err)
	}
	if got, err := s.GetOrder(ctx, "o-8"); err != nil || got.Status != "CANCELLING" {
		t.Errorf("the commanded order: %s, %v", got.Status, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Errorf("a second migrate: %v", err)
	}
	storetest.Stock(t, s, 5, "new-sku")
	storetest.Create(t, s, "after-011", "new-sku")
}
