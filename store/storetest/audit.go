package storetest

import (
	"context"
	"testing"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/store"
)

// Corruption is one statement, in the driver's SQL, that breaks the invariant
// audit checks under Check. It runs on a store holding a PENDING order "open"
// and a PAID order "paid", each of one unit of SKU "a" (5 in stock).
type Corruption struct {
	Check string
	SQL   string
	// Name is the subtest's, when two corruptions break one check (the
	// default, Check, would repeat: a subtest name Go suffixes with "#01",
	// which a SQLite file: URI reads as a fragment).
	Name string
	// Warning: Check is a warning (warn_… in the audit file); what SQL
	// plants must show under it, and need not fail the audit.
	Warning bool
}

// Exec runs a statement against the database behind s, outside the store.
type Exec func(t *testing.T, s store.Store, sql string)

// AuditCatches shows that audit can fail: every corruption, planted in a
// fresh store whose audit passed, makes the audit fail under its check's
// name with at least one example (or, for a warning, shows under it).
func AuditCatches(t *testing.T, newStore Factory, exec Exec, corruptions []Corruption) {
	for _, c := range corruptions {
		name := c.Check
		if c.Name != "" {
			name = c.Name
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, clock.Real{})
			ctx := context.Background()
			Stock(t, s, 5, "a")
			Create(t, s, "open", "a")
			Create(t, s, "paid", "a")
			if _, err := s.StartPayment(ctx, store.StartPaymentParams{OrderID: "paid"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.CompletePayment(ctx, store.PaymentParams{OrderID: "paid", PaymentID: "p", AmountCents: 1000}); err != nil {
				t.Fatal(err)
			}
			AuditOK(t, s)
			exec(t, s, c.SQL)
			rep, err := s.Audit(ctx, store.AuditParams{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() && !c.Warning {
				t.Fatalf("audit passed after: %s", c.SQL)
			}
			for _, ch := range rep.Checks {
				if ch.Name == c.Check {
					if ch.Count == 0 || len(ch.Examples) == 0 {
						t.Fatalf("check %s did not fire", c.Check)
					}
					if ch.Warning != c.Warning {
						t.Fatalf("check %s: warning %v, want %v", c.Check, ch.Warning, c.Warning)
					}
					return
				}
			}
			t.Fatalf("no check named %s", c.Check)
		})
	}
}
