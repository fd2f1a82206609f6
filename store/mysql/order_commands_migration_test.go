package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"testing/fstest"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/store/mysql"
	"github.com/lapsehq/lapse/store/storetest"
)

// commandsVersion is the migration that adds CANCELLING and the commands.
const commandsVersion = 11

// migrationsBelow holds the embedded migrations below version v, under "m".
func migrationsBelow(t *testing.T, v int) fs.FS {
	t.Helper()
	names, err := fs.Glob(mysql.Files, "migrations/*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	out := fstest.MapFS{}
	for _, name := range names {
		n, err := strconv.Atoi(path.Base(name)[:3])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n >= v {
			continue
		}
		b, err := fs.ReadFile(mysql.Files, name)
		if err != nil {
			t.Fatal(err)
		}
		out["m/"+path.Base(name)] = &fstest.MapFile{Data: b}
	}
	return out
}

// ordersBeforeCommands writes orders (with items and payments) into a
// database below 011.
func ordersBeforeCommands(t *testing.T, db *sql.DB) {
	t.Helper()
	for _, q := range []string{
		`INSERT INTO lapse_skus (sku, available, locked, sold, total, updated_at) VALUES ('sku-1', 10, 3, 1, 14, '2024-01-01')`,
		`INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after, paid_at, payment_id, payment_attempts)
		 VALUES ('o-pending', 'PENDING', 100, 'EUR', '2024-01-01', '2024-01-01 00:15', '2024-01-01 00:16', NULL, NULL, 0),
		        ('o-paying', 'PAYING', 200, 'EUR', '2024-01-01', '2024-01-01 00:15', '2024-01-01 00:16', NULL, 'p-2', 0),
		        ('o-paid', 'PAID', 300, 'EUR', '2024-01-01', '2024-01-01 00:15', '2024-01-01 00:16', '2024-01-01 00:01', 'p-3', 0)`,
		`INSERT INTO lapse_order_items (order_id, sku, qty) VALUES ('o-pending', 'sku-1', 1), ('o-paying', 'sku-1', 2), ('o-paid', 'sku-1', 1)`,
		`INSERT INTO lapse_payments (order_id, payment_id, status, amount_cents, currency, conflicts, created_at, updated_at)
		 VALUES ('o-paying', 'p-2', 'PENDING', 200, '', 0, '2024-01-01', '2024-01-01'),
		        ('o-paid', 'p-3', 'SUCCEEDED', 300, 'EUR', 0, '2024-01-01', '2024-01-01')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// checkConstraint matches a CHECK constraint of SHOW CREATE TABLE.
var checkConstraint = regexp.MustCompile("(?m)^\\s*CONSTRAINT `([^`]+)` CHECK \\((.*)\\),?$")

// checks are the CHECK constraints of table, as "name: clause", from SHOW
// CREATE TABLE (information_schema differs between MySQL and MariaDB).
func checks(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	var name, create string
	if err := db.QueryRow("SHOW CREATE TABLE "+table).Scan(&name, &create); err != nil {
		t.Fatalf("show create table %s: %v", table, err)
	}
	var out []string
	for _, m := range checkConstraint.FindAllStringSubmatch(create, -1) {
		out = append(out, m[1]+": "+m[2])
	}
	slices.Sort(out)
	return out
}

// refusedByCheck reports whether err is a CHECK constraint refusing a row
// (MariaDB 4025 ER_CONSTRAINT_FAILED, MySQL 3819 ER_CHECK_CONSTRAINT_VIOLATED).
func refusedByCheck(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && (me.Number == 4025 || me.Number == 3819)
}

// wantStatusCheckReplaced checks a database migrated through 011: one status
// CHECK, named lapse_orders_status_check, that takes CANCELLING and refuses
// what is not a status, beside the other checks of lapse_orders, which
// still hold.
func wantStatusCheckReplaced(t *testing.T, db *sql.DB) {
	t.Helper()
	wantOneCheck(t, db, "lapse_orders", "PAYING", "lapse_orders_status_check", "CANCELLING")
	defer probeOrder(t, db, "check-probe", "PENDING")()
	if _, err := db.Exec(`UPDATE lapse_orders SET status = 'CANCELLING' WHERE id = 'check-probe'`); err != nil {
		t.Errorf("write CANCELLING: %v", err)
	}
	if _, err := db.Exec(`UPDATE lapse_orders SET status = 'BOGUS' WHERE id = 'check-probe'`); !refusedByCheck(err) {
		t.Errorf("write BOGUS: %v, want a CHECK to refuse it", err)
	}
	if _, err := db.Exec(`UPDATE lapse_orders SET amount_cents = -1 WHERE id = 'check-probe'`); !refusedByCheck(err) {
		t.Errorf("write a negative amount: %v, want the amount's CHECK to refuse it", err)
	}
	if _, err := db.Exec(`UPDATE lapse_orders SET cancel_reason = 'whim' WHERE id = 'check-probe'`); !refusedByCheck(err) {
		t.Errorf("write a cancel reason 'whim': %v, want the reason's CHECK to refuse it", err)
	}
}

// ordersAfterCommands checks that the rows ordersBeforeCommands wrote are
// as they were.
func ordersAfterCommands(t *testing.T, db *sql.DB) {
	t.Helper()
	var got string
	if err := db.QueryRow(`SELECT CONCAT((SELECT GROUP_CONCAT(id, ' ', status, ' ', amount_cents ORDER BY id) FROM lapse_orders),
		' / ', (SELECT GROUP_CONCAT(order_id, ' ', qty ORDER BY order_id) FROM lapse_order_items),
		' / ', (SELECT GROUP_CONCAT(order_id, ' ', payment_id, ' ', status ORDER BY order_id) FROM lapse_payments))`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := "o-paid PAID 300,o-paying PAYING 200,o-pending PENDING 100 / o-paid 1,o-paying 2,o-pending 1 / o-paid p-3 SUCCEEDED,o-paying p-2 PENDING"; got != want {
		t.Errorf("rows after 011:\n got %s\nwant %s", got, want)
	}
}

// recorded is how many times version v is recorded.
func recorded(t *testing.T, db *sql.DB, v int) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM lapse_schema_migrations WHERE version = ?`, v).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Migration 011 replaces lapse_orders' unnamed status CHECK by a named one
// that takes CANCELLING, and runs again from wherever a run stopped: after
// any of its steps (a new session, as after a crash), or after all of them
// with the version not yet recorded.
func TestOrderCommandsMigrationRunsAgainFromAnyStep(t *testing.T) {
	t.Parallel()
	runsAgainFromAnyStep(t, commandsVersion, wantStatusCheckReplaced)
}

// The same on a database renamed from an earlier lapse (its tables and
// their checks renamed in place), with rows in every table.
func TestOrderCommandsMigrationOnARenamedDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db, s := legacyDatabase(t, 8)
	before := tableDigests(t, db, "")
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate the earlier database: %v", err)
	}
	wantStatusCheckReplaced(t, db)
	runAgain(t, s, db, commandsVersion)
	wantStatusCheckReplaced(t, db)
	after := tableDigests(t, db, "lapse_")
	for _, tb := range legacyTables[:len(legacyTables)-1] {
		if before[tb] != after[tb] {
			t.Errorf("%s: before %s, after %s", tb, before[tb], after[tb])
		}
	}
	_, fresh := open(t, clock.Real{})
	if got, want := checks(t, db, "lapse_orders"), checks(t, fresh, "lapse_orders"); !slices.Equal(got, want) {
		t.Errorf("lapse_orders' checks:\nrenamed %q\nfresh   %q", got, want)
	}
}

// The shop's own tables in the same database, whose CHECKs name PAYING too,
// change nothing of what 011 finds. MariaDB numbers unnamed CHECKs per table
// (CONSTRAINT_1, CONSTRAINT_2, …), so the shop's CONSTRAINT_2 shares its name
// with lapse_orders' amount check, and information_schema lists the tables
// in the order of the database directory (several tables: some come before
// lapse_orders).
func TestOrderCommandsMigrationBesideAShopsStatusChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, db := emptyDatabase(t)
	var tables []string
	for _, name := range []string{"orders", "carts", "checkouts", "invoices", "refunds", "shipments", "tickets", "bookings"} {
		if _, err := db.Exec(`CREATE TABLE ` + name + ` (id BIGINT PRIMARY KEY, qty INT NOT NULL, status VARCHAR(16) NOT NULL, reason VARCHAR(16) NULL,
			CHECK (qty > 0), CHECK (status IN ('NEW', 'PAYING', 'SHIPPED')), CHECK (reason IN ('PAYING', 'LATE')))`); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	shop := map[string][]string{}
	for _, tb := range tables {
		shop[tb] = checks(t, db, tb)
	}
	s := openURL(t, url, nil)
	if err := s.MigrateFS(ctx, migrationsBelow(t, commandsVersion), "m"); err != nil {
		t.Fatalf("migrate below 011: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate through 011: %v", err)
	}
	wantStatusCheckReplaced(t, db)
	runAgain(t, s, db, commandsVersion)
	wantStatusCheckReplaced(t, db)
	for _, tb := range tables {
		if got := checks(t, db, tb); !slices.Equal(got, shop[tb]) {
			t.Errorf("the shop's %s checks:\nbefore %q\nafter  %q", tb, shop[tb], got)
		}
	}
	storetest.Stock(t, s, 1, "a")
	storetest.Create(t, s, "o", "a")
}
