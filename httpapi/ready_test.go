package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/httpapi"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/timer/memory"
)

// A service whose outbox relay stopped (here: two sinks of one name, which
// would share one progress) delivers no event to any sink again: /readyz
// says so with 503 not_ready and a reason naming the relay, while the store
// and the timers still answer.
func TestReadyzFailsOnceTheRelayStopped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "lapse.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	svc, err := lapse.New(lapse.Config{Store: st, Scheduler: memory.New(memory.Config{}), Logger: discard,
		Sinks: []outbox.Sink{outbox.DiscardSink{}, outbox.DiscardSink{}}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- svc.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-runDone:
		case <-time.After(10 * time.Second):
			t.Error("Service.Run did not return within 10s of its context ending")
		}
	})
	srv := httptest.NewServer(conforming(t, httpapi.New(svc, httpapi.Options{Logger: discard})))
	t.Cleanup(srv.Close)
	e := &env{url: srv.URL, client: srv.Client()}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := e.do(t, "GET", "/readyz", nil)
		if r.Status == http.StatusServiceUnavailable {
			wantError(t, r, http.StatusServiceUnavailable, "not_ready")
			if !bytes.Contains(r.Body, []byte("outbox relay")) {
				t.Errorf("/readyz: %s, want the reason: the outbox relay stopped", r.Body)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still answers %d %s 10s after a start whose relay stops at once", r.Status, r.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
