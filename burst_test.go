package lapse_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/store/storetest"
)

// A burst of due orders (cancel batches coming back full) makes the relay
// yield to the cancels: its hold is counted, every order is cancelled, and
// every event still goes out once the burst is over.
func TestRelayYieldsWhileABurstIsCancelled(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	storetest.Stock(t, st, 100, "sku")
	reg := prometheus.NewRegistry()
	sink := &sinkRecorder{}
	// Batches of 5: 100 orders due at once are 20 full batches.
	svc := newService(t, lapse.Config{Store: st, PollStore: true, SweepInterval: -1, BatchSize: 5,
		Sinks: []outbox.Sink{sink}, Registerer: reg, Outbox: outbox.Config{Workers: 1, MaxYield: 200 * time.Millisecond}})
	const n = 100
	// One deadline for all, far enough out that creating them on a loaded
	// machine does not spread them (spread, they are no burst).
	due := time.Now().Add(3 * time.Second)
	for i := range n {
		create(t, svc, fmt.Sprintf("b%03d", i), max(time.Until(due), 10*time.Millisecond))
	}
	start(t, svc)
	waitFor(t, 10*time.Second, "every order cancelled", func() bool {
		for i := range n {
			if status(t, svc, fmt.Sprintf("b%03d", i)) != order.Cancelled {
				return false
			}
		}
		return true
	})
	waitFor(t, 10*time.Second, "every cancelled event delivered", func() bool { return len(sink.of("order.cancelled")) == n })
	held := counterSum(t, reg, "lapse_outbox_yield_seconds_total")
	if held <= 0 {
		t.Fatalf("lapse_outbox_yield_seconds_total = %v: the relay did not yield to the burst", held)
	}
	t.Logf("the relay held its claims %.3f s during the burst", held)
	storetest.AuditOK(t, st)
}

// counterSum is the sum of the counter name's series in reg.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			sum := 0.0
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	return 0 // a counter vector without series is not gathered
}
