package postgres_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/storetest"
)

// icuDatabase creates a database whose collation is ICU's en-US (the default
// of many managed PostgreSQL services, where "B" sorts after "a"), dropped
// when the test ends, and returns its URL.
func icuDatabase(t *testing.T) string {
	t.Helper()
	base := serverURL(t)
	name := uniqueName("lapse_icu_")
	ident := pgx.Identifier{name}.Sanitize()
	admin(t, base, "CREATE DATABASE "+ident+" TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'")
	t.Cleanup(func() { admin(t, base, "DROP DATABASE "+ident+" WITH (FORCE)") })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	u.RawQuery = "" // its own settings (search_path…) are for the test database
	return u.String()
}

// On a database whose collation is not C, SKU rows must still be locked in
// one order everywhere (byte order): with retries off, a deadlock between a
// create and a cancel would reach the caller. Lone creates (create_group=1)
// and group creates both run beside buyer cancels and timeout batches.
func TestNoDeadlockUnderICUCollation(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"lone", "group"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			u := icuDatabase(t)
			if mode == "lone" {
				u += "?create_group=1"
			}
			s, err := postgres.Open(context.Background(), postgres.Config{URL: u, Clock: clock.Real{}, Retries: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if err := s.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			storetest.NoDeadlocks(t, s, 80)
		})
	}
}
