package bench

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/httpapi"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/sqlite"
)

func TestBenchQuantileInterpolatesInsideTheBucketLikePromQL(t *testing.T) {
	t.Parallel()
	h := histogram{bounds: []float64{0.001, 0.005, 0.01, math.Inf(1)}, counts: []float64{50, 90, 100, 100}}
	for _, tc := range []struct{ q, want float64 }{
		{0.5, 0.001},   // the 50th sample closes the first bucket
		{0.7, 0.003},   // halfway through the second
		{0.99, 0.0095}, // nine tenths through the third
	} {
		if got := h.quantile(tc.q); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	over := histogram{bounds: []float64{0.001, math.Inf(1)}, counts: []float64{1, 10}}
	if got := over.quantile(0.99); got != 0.001 {
		t.Errorf("a quantile past the last finite bucket = %v, want its bound 0.001", got)
	}
	if got := (histogram{}).quantile(0.99); !math.IsNaN(got) {
		t.Errorf("empty histogram: %v, want NaN", got)
	}
}

func TestBenchWorkloadShape(t *testing.T) {
	t.Parallel()
	r := &run{cfg: Config{PayRatio: 0.3, SKUs: 10, HotSKUShare: 0.5}}
	paid, hot := 0, 0
	for i := range int64(10000) {
		if r.pays(i) {
			paid++
		}
		if r.sku(i) == skuName(0) {
			hot++
		}
	}
	if paid != 3000 {
		t.Errorf("pay-ratio 0.3 paid %d of 10000, want exactly 3000", paid)
	}
	if hot < 4800 || hot > 5200 {
		t.Errorf("hot-sku-share 0.5 put %d of 10000 orders on the hot SKU, want about 5000", hot)
	}
	r.cfg.HotSKUShare = 0
	if r.sku(3) != skuName(3) || r.sku(13) != skuName(3) {
		t.Error("without a hot SKU, orders take the SKUs in turn")
	}
}

func TestBenchConfigValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Rate: -1}, "Rate"},
		{Config{Rate: math.Inf(1)}, "Rate"},
		{Config{Orders: -1}, "Orders"},
		{Config{Rate: 10, Spread: time.Second}, "Spread"},
		{Config{Duration: time.Second, Lead: time.Second}, "Lead"},
		{Config{Timeout: time.Microsecond}, "Timeout"},
		{Config{PayRatio: 2}, "PayRatio"},
		{Config{PayRatio: math.NaN()}, "PayRatio"},
		{Config{HotSKUShare: 1.01}, "HotSKUShare"},
		{Config{PayAt: "later"}, "PayAt"},
		{Config{SKUs: -1}, "SKUs"},
		{Config{KillEvery: time.Millisecond}, "KillEvery"},
		{Config{Faults: []Fault{{Name: "x"}}}, "Faults"},
	} {
		err := tc.cfg.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%+v: error %v, want one naming %s", tc.cfg, err, tc.field)
		}
	}
	for _, ok := range []Config{{}, {Rate: 100}, {Duration: time.Second}, {Lead: time.Second, Spread: time.Millisecond}, {HotSKUShare: 1, SKUs: 1}} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

func newService(t *testing.T) (*lapse.Service, *sqlite.Store) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "bench.db"), Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	svc, err := lapse.New(lapse.Config{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return svc, st
}

func TestBenchMetricsReadOverHTTPMatchTheRegistry(t *testing.T) {
	t.Parallel()
	svc, _ := newService(t)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() { stop(); <-done }()
	if _, err := svc.SetStock(ctx, "s", 100); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{Items: []order.Item{{SKU: "s", Qty: 1}}, AmountCents: 1, Timeout: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	var direct counts
	settled := func(c counts) bool {
		n := len(c.lateness.counts)
		return c.cancelled == 20 && n > 0 && c.lateness.counts[n-1] == 20 // the counter moves just before the histogram
	}
	for !settled(direct) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		var err error
		if direct, err = gatherCounts(svc.Registry()); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(httpapi.New(svc, httpapi.Options{Logger: slog.New(slog.DiscardHandler)}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parsed, err := parseCounts(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if parsed.cancelled != 20 || direct.cancelled != 20 {
		t.Fatalf("cancelled: %v over HTTP, %v from the registry; want 20", parsed.cancelled, direct.cancelled)
	}
	if len(parsed.lateness.bounds) == 0 || len(parsed.lateness.bounds) != len(direct.lateness.bounds) {
		t.Fatalf("lateness buckets: %v over HTTP, %v from the registry", parsed.lateness, direct.lateness)
	}
	for i := range parsed.lateness.counts {
		if parsed.lateness.bounds[i] != direct.lateness.bounds[i] || parsed.lateness.counts[i] != direct.lateness.counts[i] {
			t.Fatalf("lateness buckets differ: %v over HTTP, %v from the registry", parsed.lateness, direct.lateness)
		}
	}
}

func TestBenchParseSampleReadsLabelsAndValues(t *testing.T) {
	t.Parallel()
	name, labels, v, err := parseSample(`lapse_cancel_lateness_seconds_bucket{le="+Inf",odd="a\"b,c"} 42 1700000000`)
	if err != nil || name != "lapse_cancel_lateness_seconds_bucket" || labels["le"] != "+Inf" || labels["odd"] != `a"b,c` || v != 42 {
		t.Fatalf("got %q %v %v %v", name, labels, v, err)
	}
	if _, _, _, err := parseSample("garbage"); err == nil {
		t.Error("a line without a value parsed")
	}
}

// Run is the API of the first bench: a Service the caller runs.
func TestBenchRunDrivesARunningService(t *testing.T) {
	t.Parallel()
	svc, st := newService(t)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() { stop(); <-done }()
	res, err := Run(ctx, svc, st, Config{Orders: 100, Lead: 5 * time.Second, Spread: 100 * time.Millisecond, PayRatio: 0.2, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if res.Orders != 100 || res.Paid+res.Cancelled != 100 || res.Early != 0 || !res.AuditOK || res.Audit.Status != "ok" {
		t.Fatalf("result %+v", res)
	}
	// The SQLite store counts its statements: a create alone is 8, and every
	// order is also paid or cancelled.
	switch p := res.DBStatementsPerOrder; {
	case p == nil:
		t.Error("db_statements_per_order = null, want a count from the store")
	case *p < 8 || *p > 100:
		t.Errorf("db_statements_per_order = %.1f, want 8 to 100", *p)
	default:
		t.Logf("db_statements_per_order = %.1f", *p)
	}
	if _, err := Drive(ctx, Running(svc, st), Config{Orders: 10, Rate: 100, KillEvery: time.Second}); err == nil {
		t.Fatal("KillEvery on a service the caller runs: no error")
	}
}
