package mysql_test

import (
	"context"
	"database/sql"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/mysql"
	"github.com/lapsehq/lapse/store/storetest"
)

// legacyTables are the tables of lapse before version 9, unprefixed.
var legacyTables = []string{"skus", "orders", "order_items", "stock_ledger", "idempotency_keys", "outbox",
	"payment_callbacks", "payments", "outbox_sinks", "outbox_fanout", "outbox_deliveries", "stock_tasks", "schema_migrations"}

// legacyRows fills every table of an earlier lapse's database (version 8),
// written as that lapse wrote them.
var legacyRows = []string{
	`INSERT INTO orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at, cancelled_at,
	                     cancel_reason, payment_id, refund_required, payment_attempts, version, reservation_id)
	 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
	 SELECT CONCAT('o-', i), ELT(1 + i % 4, 'PENDING', 'PAYING', 'PAID', 'CANCELLED'), i * 10, 'USD',
	        '2024-01-01 00:00:00', '2024-01-01 00:00:00' + INTERVAL i SECOND, '2024-01-01 00:00:00' + INTERVAL i SECOND,
	        IF(i % 4 = 2, '2024-01-01 00:00:01', NULL), IF(i % 4 = 3, '2024-01-01 00:00:02', NULL), IF(i % 4 = 3, 'timeout', NULL),
	        IF(i % 4 = 2, CONCAT('pay-', i), NULL), i % 40 = 2, i % 4, 1 + i % 4, IF(i % 10 = 0, CONCAT('res-', i), NULL)
	 FROM n`,
	`INSERT INTO skus (sku, available, locked, sold, total, updated_at)
	 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50)
	 SELECT CONCAT('sku-', i), 100, i % 3, i % 2, 100 + i % 3 + i % 2, '2024-01-01 00:00:00' FROM n`,
	`INSERT INTO order_items (order_id, sku, qty) SELECT id, CONCAT('sku-', 1 + CRC32(id) % 50), 1 + CRC32(id) % 3 FROM orders`,
	`INSERT INTO stock_ledger (order_id, sku, action, qty, created_at) SELECT order_id, sku, 'reserve', qty, '2024-01-01 00:00:00' FROM order_items`,
	`INSERT INTO idempotency_keys (idempotency_key, request_hash, order_id, created_at) SELECT CONCAT('k-', id), 'h', id, '2024-01-01 00:00:00' FROM orders WHERE amount_cents <= 1000`,
	`INSERT INTO outbox (event_id, type, order_id, payload, created_at, published_at, fanned_out)
	 SELECT UUID(), 'order.created', id, CONCAT('{"id":"', id, '"}'), '2024-01-01 00:00:00', IF(amount_cents % 20 = 0, '2024-01-01 00:00:00', NULL), amount_cents % 20 = 0
	 FROM orders WHERE amount_cents <= 3000 ORDER BY amount_cents`,
	`INSERT INTO payment_callbacks (callback_id, order_id, seen_at) SELECT CONCAT('cb-', id), id, '2024-01-01 00:00:00' FROM orders WHERE amount_cents <= 200`,
	`INSERT INTO payments (order_id, payment_id, status, amount_cents, currency, conflicts, created_at, updated_at)
	 SELECT id, payment_id, 'SUCCEEDED', amount_cents, 'USD', 0, '2024-01-01 00:00:00', '2024-01-01 00:00:00' FROM orders WHERE payment_id IS NOT NULL`,
	`INSERT INTO outbox_sinks (name, registered_at) VALUES ('webhook', '2024-01-01 00:00:00'), ('kafka', '2024-01-01 00:00:00')`,
	`INSERT INTO outbox_deliveries (sink, seq, order_id, next_at, attempts, dead)
	 SELECT 'webhook', seq, order_id, '2024-01-01 00:00:00', seq % 3, seq % 50 = 0 FROM outbox WHERE fanned_out`,
	`INSERT INTO stock_tasks (id, order_id, action, reservation_id, items, status, next_at, since, created_at, last_error)
	 SELECT CONCAT('t-', id), id, 'release', reservation_id, '[]', 'PENDING', '2024-01-01 00:00:00', '2024-01-01 00:00:00', '2024-01-01 00:00:00', ''
	 FROM orders WHERE reservation_id IS NOT NULL`,
}

// legacyDatabase is a database as an earlier lapse left it at version upTo,
// with rows in every table at version 8.
func legacyDatabase(t *testing.T, upTo int) (string, *sql.DB, *mysql.Store) {
	t.Helper()
	url, db := emptyDatabase(t)
	s := openURL(t, url, nil)
	if err := s.LegacyVersion(context.Background(), upTo); err != nil {
		t.Fatal(err)
	}
	if upTo == 8 {
		for _, q := range legacyRows {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	return url, db, s
}

// tableDigests is, per table (unprefixed name), its row count and a digest
// of its rows, read under prefix.
func tableDigests(t *testing.T, db *sql.DB, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, tb := range legacyTables {
		var cols string
		if err := db.QueryRow(`SELECT GROUP_CONCAT(CONCAT('COALESCE(CAST(', column_name, ' AS CHAR), ''-'')') ORDER BY ordinal_position SEPARATOR ', ')
			FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?`, prefix+tb).Scan(&cols); err != nil {
			t.Fatalf("%s%s: %v", prefix, tb, err)
		}
		var d string
		if err := db.QueryRow(`SELECT CONCAT(COUNT(*), ' ', COALESCE(SUM(CRC32(CONCAT_WS('|', ` + cols + `))), 0), ' ', COALESCE(BIT_XOR(CRC32(CONCAT_WS('|', ` + cols + `))), 0)) FROM ` + prefix + tb).Scan(&d); err != nil {
			t.Fatalf("%s%s: %v", prefix, tb, err)
		}
		out[tb] = d
	}
	return out
}

// schemaShape is what a database's lapse_* tables are: columns, indexes and
// foreign keys, one line each, sorted.
func schemaShape(t *testing.T, db *sql.DB) string {
	t.Helper()
	var shape string
	if _, err := db.Exec(`SET SESSION group_concat_max_len = 1000000`); err != nil {
		t.Fatal(err)
	}
	err := db.QueryRow(`SELECT GROUP_CONCAT(x ORDER BY x SEPARATOR '\n') FROM (
	SELECT CONCAT('column ', table_name, '.', column_name, ' #', ordinal_position, ' ', column_type, ' ', is_nullable, ' ', COALESCE(column_default, ''), ' ', collation_name) AS x
	FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name LIKE 'lapse\_%' AND table_name <> 'lapse_schema_migrations'
	UNION ALL
	SELECT CONCAT('index ', table_name, ' ', index_name, ' ', non_unique, ' ', GROUP_CONCAT(column_name ORDER BY seq_in_index))
	FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name LIKE 'lapse\_%' AND table_name <> 'lapse_schema_migrations'
	GROUP BY table_name, index_name, non_unique
	UNION ALL
	SELECT CONCAT('fk ', table_name, ' ', constraint_name, ' ', referenced_table_name)
	FROM information_schema.referential_constraints WHERE constraint_schema = DATABASE()
	UNION ALL
	SELECT CONCAT('check ', table_name, ' ', check_clause)
	FROM information_schema.check_constraints WHERE constraint_schema = DATABASE()
	UNION ALL
	SELECT CONCAT('table ', table_name, ' ', engine, ' ', table_collation)
	FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'lapse\_%' AND table_name <> 'lapse_schema_migrations'
	) s`).Scan(&shape)
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
	_, db, s := legacyDatabase(t, 8)
	before := tableDigests(t, db, "")
	var firstApplied time.Time
	var lastSeq int64
	if err := db.QueryRow(`SELECT (SELECT applied_at FROM schema_migrations WHERE version = 1), (SELECT MAX(seq) FROM outbox)`).Scan(&firstApplied, &lastSeq); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate the earlier database: %v", err)
	}
	after := tableDigests(t, db, "lapse_")
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
	var n, left int
	if err := db.QueryRow(`SELECT COUNT(*), (SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name IN ('orders', 'skus', 'outbox', 'payments'))
		FROM lapse_schema_migrations WHERE version BETWEEN 1 AND 9`).Scan(&n, &left); err != nil || n != 9 || left != 0 {
		t.Fatalf("after the rename: versions 1-9 recorded %d, old tables left %d (%v)", n, left, err)
	}
	if id, err := s.Identity(ctx); err != nil || id != "mysql:"+firstApplied.UTC().Format(time.RFC3339Nano) {
		t.Errorf("identity after the rename: %q (%v), want the first migration's time %v", id, err, firstApplied)
	}
	_, fresh := open(t, clock.Real{})
	if got, want := schemaShape(t, db), schemaShape(t, fresh); got != want {
		t.Errorf("the renamed schema differs from a fresh one:\n--- renamed\n%s\n--- fresh\n%s", got, want)
	}
	storetest.Stock(t, s, 5, "new-sku")
	storetest.Create(t, s, "after-rename", "new-sku")
	var seq int64
	if err := db.QueryRow(`SELECT MAX(seq) FROM lapse_outbox WHERE order_id = 'after-rename'`).Scan(&seq); err != nil || seq <= lastSeq {
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
	_, db, s := legacyDatabase(t, 5)
	if _, err := db.Exec(`INSERT INTO orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at, payment_id)
		VALUES ('old-paid', 'PAID', 500, 'EUR', '2024-01-01', '2024-01-01', '2024-01-01', '2024-01-01', 'pay-old')`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
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
	url, db := emptyDatabase(t)
	for _, q := range []string{
		`CREATE TABLE schema_migrations (version BIGINT NOT NULL PRIMARY KEY, dirty BOOLEAN NOT NULL)`,
		`INSERT INTO schema_migrations VALUES (20240101120000, FALSE)`,
		`CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(64) NOT NULL, status VARCHAR(16) NOT NULL, KEY orders_created (customer))`,
		`INSERT INTO orders (customer, status) VALUES ('ann', 'pending'), ('bob', 'paid')`,
		`CREATE TABLE payments (id BIGINT PRIMARY KEY, order_id BIGINT NOT NULL, CONSTRAINT payments_order FOREIGN KEY (order_id) REFERENCES orders (id))`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	shop := func() string {
		var d string
		if _, err := db.Exec(`SET SESSION group_concat_max_len = 1000000`); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow(`SELECT CONCAT((SELECT GROUP_CONCAT(version, ' ', dirty) FROM schema_migrations), ' / ',
			(SELECT GROUP_CONCAT(id, ' ', customer, ' ', status ORDER BY id) FROM orders), ' / ',
			(SELECT GROUP_CONCAT(table_name, '.', column_name, ' ', column_type ORDER BY table_name, ordinal_position)
			 FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name NOT LIKE 'lapse\_%'), ' / ',
			(SELECT GROUP_CONCAT(table_name, '.', index_name ORDER BY table_name, index_name)
			 FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name NOT LIKE 'lapse\_%'))`).Scan(&d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	before := shop()
	s := openURL(t, url, nil)
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

// MySQL cannot roll the rename back: a rename that fails half-way leaves
// each step done or not, no version 9, and the next Migrate finishes it with
// every row kept.
func TestFailedRenameFinishesOnTheNextMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db, s := legacyDatabase(t, 8)
	before := tableDigests(t, db, "")
	legacy, err := fs.Sub(mysql.Files, "migrations/legacy")
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
			// A step that fails after the tables and one foreign key moved.
			b = []byte(strings.Replace(string(b), "-- name: rename_payments_fk", "-- name: fail\nSELECT * FROM no_such_table;\n\n-- name: rename_payments_fk", 1))
		}
		broken["l/"+p] = &fstest.MapFile{Data: b}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.MigrateWithLegacy(ctx, broken, "l"); err == nil || !strings.Contains(err.Error(), "step fail") {
		t.Fatalf("a rename that fails: err = %v", err)
	}
	var v9 int
	if err := db.QueryRow(`SELECT COUNT(*) FROM lapse_schema_migrations WHERE version = 9`).Scan(&v9); err != nil || v9 != 0 {
		t.Fatalf("version 9 recorded after a failed rename: %d (%v)", v9, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate after the failure: %v", err)
	}
	after := tableDigests(t, db, "lapse_")
	for _, tb := range legacyTables[:len(legacyTables)-1] {
		if before[tb] != after[tb] {
			t.Errorf("%s: before %s, after %s", tb, before[tb], after[tb])
		}
	}
	_, fresh := open(t, clock.Real{})
	if got, want := schemaShape(t, db), schemaShape(t, fresh); got != want {
		t.Errorf("the finished schema differs from a fresh one:\n--- finished\n%s\n--- fresh\n%s", got, want)
	}
	// The synthetic rows break invariants on purpose; the audit must run.
	if _, err := s.Audit(ctx, store.AuditParams{MaxExamples: 1}); err != nil {
		t.Fatalf("audit of the finished schema: %v", err)
	}
}

// What an earlier lapse does on a renamed database: its Migrate lists the
// versions in schema_migrations first, and the marker left there holds a
// version that is a sentence, which it cannot read as a number: it stops
// with the sentence in its error, before it creates anything.
func TestAnEarlierLapseRefusesTheRenamedSchema(t *testing.T) {
	t.Parallel()
	_, db, s := legacyDatabase(t, 8)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The statements of the earlier Migrate, in order (its queries.sql).
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INT          NOT NULL,
    name       VARCHAR(255) NOT NULL,
    applied_at DATETIME(3)  NOT NULL,
    PRIMARY KEY (version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`); err != nil {
		t.Fatalf("the earlier CREATE TABLE IF NOT EXISTS: %v", err)
	}
	rows, err := db.Query(`SELECT version FROM schema_migrations`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var scanErr error
	for rows.Next() {
		var v int
		if scanErr = rows.Scan(&v); scanErr != nil {
			break
		}
	}
	if scanErr == nil || !strings.Contains(scanErr.Error(), "migrated by a newer lapse") || !strings.Contains(scanErr.Error(), "upgrade lapse") {
		t.Fatalf("the earlier migrate reading the versions: %v", scanErr)
	}
	var at time.Time
	if err := db.QueryRow(`SELECT applied_at FROM schema_migrations WHERE version = 1`).Scan(&at); err == nil {
		t.Fatalf("the earlier identity read %v", at)
	}
}
