package reference

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"

	"github.com/lapsehq/lapse/internal/migrate"
	"github.com/lapsehq/lapse/internal/sqlfile"
	"github.com/lapsehq/lapse/inventory"
)

//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql sqlite.sql postgres.sql
var files embed.FS

// dialect is what differs between the two databases: the statements (same
// names, each dialect's placeholders) and where the migrations are.
type dialect struct {
	name       string
	q          sqlfile.Queries
	migrations string
}

var (
	sqliteDialect   = dialect{"sqlite", sqlfile.MustLoad(files, "sqlite.sql"), "migrations/sqlite"}
	postgresDialect = dialect{"postgres", sqlfile.MustLoad(files, "postgres.sql"), "migrations/postgres"}
)

// Store is the inventory's database: SKU counters, reservations and the
// ledger. It implements inventory.Applier with no faults (Faulty adds them).
// Both databases go through database/sql, so that one body of Go serves
// both and a team copying it swaps only the .sql files.
type Store struct {
	db  *sql.DB
	d   dialect
	now func() time.Time
}

// Open opens the store a URL names and applies its migrations:
//
//	sqlite://inventory.db         a file, relative to the working directory
//	sqlite:///var/lib/inv.db      an absolute path
//	sqlite://:memory:             a database that lives as long as the Store
//	postgres://user:pw@host/db    PostgreSQL (postgresql:// too); the
//	                              tables are prefixed inv_, and ?search_path=
//	                              puts them in a schema of their own
//
// Errors never repeat the URL: it may hold a password.
func Open(ctx context.Context, storeURL string) (*Store, error) {
	scheme, rest, _ := strings.Cut(storeURL, "://")
	var s *Store
	switch scheme {
	case "sqlite":
		path, err := url.PathUnescape(rest)
		if err != nil || path == "" {
			return nil, errors.New("reference: store: want sqlite://path, or sqlite://:memory: for a database in memory")
		}
		v := url.Values{}
		v.Add("_pragma", "busy_timeout(10000)")
		v.Add("_pragma", "foreign_keys(ON)")
		v.Add("_pragma", "synchronous(FULL)")
		if path != ":memory:" {
			v.Add("_pragma", "journal_mode(WAL)")
		}
		// Writers would queue on SQLite's lock anyway; one connection
		// queues them in Go instead (and keeps a :memory: database one
		// database), and BEGIN IMMEDIATE takes the write lock up front.
		v.Set("_txlock", "immediate")
		db, err := sql.Open("sqlite", "file:"+path+"?"+v.Encode())
		if err != nil {
			return nil, fmt.Errorf("reference: open sqlite: %w", err)
		}
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		db.SetConnMaxLifetime(0)
		s = &Store{db: db, d: sqliteDialect, now: time.Now}
	case "postgres", "postgresql":
		db, err := sql.Open("pgx", storeURL)
		if err != nil {
			return nil, errors.New("reference: open postgres: malformed URL") // pgx's message may quote it
		}
		db.SetMaxOpenConns(16)
		db.SetMaxIdleConns(16)
		s = &Store{db: db, d: postgresDialect, now: time.Now}
	default:
		return nil, fmt.Errorf("reference: store: unsupported scheme %q (want sqlite://path or postgres://…)", scheme)
	}
	if err := s.db.PingContext(ctx); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("reference: open %s: %w", s.d.name, err)
	}
	if err := s.migrate(ctx); err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// migrate applies the embedded migrations not yet applied, each in its own
// transaction (both databases' DDL is transactional: a failed step leaves
// nothing behind).
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrate.Load(files, s.d.migrations)
	if err != nil {
		return err
	}
	for _, m := range ms {
		err := s.tx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, s.d.q.Get("migrate_lock")); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, s.d.q.Get("migrate_table")); err != nil {
				return err
			}
			var done bool
			if err := tx.QueryRowContext(ctx, s.d.q.Get("migrate_applied"), m.Version).Scan(&done); err != nil || done {
				return err
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, s.d.q.Get("migrate_record"), m.Version, m.Name, s.now().UnixMilli())
			return err
		})
		if err != nil {
			return fmt.Errorf("reference: migration %03d_%s: %w", m.Version, m.Name, err)
		}
	}
	return nil
}

// tx runs fn in a transaction, committed if fn returns nil.
func (s *Store) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// SKU is one SKU's counters. available + reserved + sold only changes with
// SetAvailable: the commands move units between the three.
type SKU struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Reserved  int64  `json:"reserved"`
	Sold      int64  `json:"sold"`
}

// ErrNotFound is returned for a SKU or reservation the store does not hold.
var ErrNotFound = errors.New("reference: not found")

// SetAvailable sets the units of sku available for new reservations,
// creating the SKU if needed; its reserved and sold units are left as they are.
func (s *Store) SetAvailable(ctx context.Context, sku string, available int64) (SKU, error) {
	var k SKU
	err := s.db.QueryRowContext(ctx, s.d.q.Get("sku_put"), sku, available).Scan(&k.SKU, &k.Available, &k.Reserved, &k.Sold)
	if err != nil {
		return SKU{}, fmt.Errorf("reference: set available of %q: %w", sku, err)
	}
	return k, nil
}

// SKU returns one SKU's counters, or ErrNotFound.
func (s *Store) SKU(ctx context.Context, sku string) (SKU, error) {
	var k SKU
	err := s.db.QueryRowContext(ctx, s.d.q.Get("sku_get"), sku).Scan(&k.SKU, &k.Available, &k.Reserved, &k.Sold)
	if errors.Is(err, sql.ErrNoRows) {
		return SKU{}, ErrNotFound
	} else if err != nil {
		return SKU{}, fmt.Errorf("reference: sku %q: %w", sku, err)
	}
	return k, nil
}

// LedgerRow is one applied (reservation, action).
type LedgerRow struct {
	Seq           int64            `json:"seq"`
	ReservationID string           `json:"reservation_id"`
	Action        inventory.Action `json:"action"`
	TaskID        string           `json:"task_id"`
	At            time.Time        `json:"at"`
	// Tombstone marks a release of a reservation the inventory never
	// reserved: recorded so that a reserve arriving after it is refused.
	Tombstone bool `json:"tombstone,omitempty"`
}

// Reservation is what the store holds of one reservation.
type Reservation struct {
	ReservationID string           `json:"reservation_id"`
	OrderID       string           `json:"order_id,omitempty"`
	Status        string           `json:"status"`
	Items         []inventory.Item `json:"items"`
	Ledger        []LedgerRow      `json:"ledger"`
	CreatedAt     time.Time        `json:"created_at"`
	UpdatedAt     time.Time        `json:"updated_at"`
}

// Reservation statuses. A release of an unknown reservation leaves a
// RELEASED reservation without items (its tombstone).
const (
	StatusReserved  = "RESERVED"
	StatusReleased  = "RELEASED"
	StatusConfirmed = "CONFIRMED"
	statusNew       = "NEW" // only inside a transaction
)

// Reservation returns one reservation with its items and ledger rows, or
// ErrNotFound.
func (s *Store) Reservation(ctx context.Context, id string) (Reservation, error) {
	r := Reservation{ReservationID: id, Items: []inventory.Item{}, Ledger: []LedgerRow{}}
	var created, updated int64
	err := s.db.QueryRowContext(ctx, s.d.q.Get("reservation_get"), id).Scan(&r.OrderID, &r.Status, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return Reservation{}, ErrNotFound
	} else if err != nil {
		return Reservation{}, fmt.Errorf("reference: reservation %q: %w", id, err)
	}
	r.CreatedAt, r.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	items, err := queryItems(ctx, s.db, s.d.q.Get("items_of"), id)
	if err != nil {
		return Reservation{}, fmt.Errorf("reference: reservation %q: %w", id, err)
	}
	r.Items = append(r.Items, items...)
	rows, err := s.db.QueryContext(ctx, s.d.q.Get("ledger_of"), id)
	if err != nil {
		return Reservation{}, fmt.Errorf("reference: reservation %q: ledger: %w", id, err)
	}
	if r.Ledger, err = scanLedger(rows, r.Ledger); err != nil {
		return Reservation{}, fmt.Errorf("reference: reservation %q: ledger: %w", id, err)
	}
	return r, nil
}

// Ledger returns up to limit ledger rows with Seq > after, in Seq order.
//
// Seq is allocated when a command is applied, not when it commits, so on
// PostgreSQL a row may commit after a row with a higher Seq: a reader
// paging while commands are applied should page again from a little
// before its last Seq (reconcile reads a ledger that has settled).
func (s *Store) Ledger(ctx context.Context, after int64, limit int) ([]LedgerRow, error) {
	rows, err := s.db.QueryContext(ctx, s.d.q.Get("ledger_page"), after, limit)
	if err != nil {
		return nil, fmt.Errorf("reference: ledger: %w", err)
	}
	out, err := scanLedger(rows, []LedgerRow{})
	if err != nil {
		return nil, fmt.Errorf("reference: ledger: %w", err)
	}
	return out, nil
}

func scanLedger(rows *sql.Rows, out []LedgerRow) ([]LedgerRow, error) {
	defer rows.Close()
	for rows.Next() {
		var l LedgerRow
		var at int64
		if err := rows.Scan(&l.Seq, &l.ReservationID, &l.Action, &l.TaskID, &at, &l.Tombstone); err != nil {
			return nil, err
		}
		l.At = time.UnixMilli(at).UTC()
		out = append(out, l)
	}
	return out, rows.Err()
}

// queryer is what reads items: the database or a transaction.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func queryItems(ctx context.Context, q queryer, query, id string) ([]inventory.Item, error) {
	rows, err := q.QueryContext(ctx, query, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []inventory.Item
	for rows.Next() {
		var it inventory.Item
		if err := rows.Scan(&it.SKU, &it.Qty); err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sortItems(out)
	return out, nil
}
