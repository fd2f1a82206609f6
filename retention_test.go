package lapse_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/sqlite"
)

// Config.Retention, as an embedding program sets it: a buyer-cancelled
// order, its events delivered by the relay, is deleted once it finished
// more than Retention.Orders ago by the store's clock; an open order stays;
// the metrics count it.
func TestServiceRetentionDeletesFinishedOrders(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "l.db"), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetStock(context.Background(), "sku", 10); err != nil {
		t.Fatal(err)
	}
	svc := newService(t, lapse.Config{Store: st, Retention: lapse.RetentionConfig{Orders: time.Hour, Every: 10 * time.Millisecond}})
	start(t, svc)
	create(t, svc, "done", time.Hour)
	create(t, svc, "open", time.Hour)
	if _, err := svc.Cancel(context.Background(), "done"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the cancel's event delivered", func() bool {
		os, err := st.OutboxStats(context.Background())
		if err != nil || os.Unfanned != 0 || len(os.Sinks) == 0 {
			return false
		}
		for _, k := range os.Sinks {
			if k.Pending != 0 {
				return false
			}
		}
		return true
	})
	if metric(t, svc, "lapse_retention_deleted_total") != 0 {
		t.Fatal("deleted before the retention")
	}
	clk.Advance(time.Hour + time.Second)
	waitFor(t, 10*time.Second, "the finished order deleted", func() bool {
		_, err := svc.Get(context.Background(), "done")
		return errors.Is(err, store.ErrNotFound)
	})
	if got := status(t, svc, "open"); got != "PENDING" {
		t.Errorf("the open order: %s", got)
	}
	if n := metric(t, svc, "lapse_retention_deleted_total"); n < 5 { // order, item, two ledger rows, two events
		t.Errorf("lapse_retention_deleted_total %v, want the order's rows", n)
	}
	auditPasses(t, st)
}

func auditPasses(t *testing.T, st store.Store) {
	t.Helper()
	rep, err := st.Audit(context.Background(), store.AuditParams{AllowedLag: time.Hour})
	if err != nil || !rep.OK() {
		t.Fatalf("audit: %+v, %v", rep, err)
	}
}

func TestRetentionConfigValidation(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	for name, rc := range map[string]lapse.RetentionConfig{
		"negative orders": {Orders: -time.Hour},
		"negative tasks":  {Tasks: -time.Hour},
		"batch too big":   {Orders: time.Hour, Batch: 10001},
		"negative batch":  {Orders: time.Hour, Batch: -1},
	} {
		if _, err := lapse.New(lapse.Config{Store: st, Retention: rc, Logger: quiet}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
