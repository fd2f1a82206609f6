package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// --gateway-retries 0 means what its help says: no retry (one request for
// a query answered 503), not the library's default of 2.
func TestGatewayRetriesZeroMeansNoRetry(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		retries string
		want    int64
	}{{"0", 1}, {"1", 2}} {
		var hits atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			hits.Add(1)
			http.Error(w, "down", http.StatusServiceUnavailable)
		}))
		fs := newFlagSet("x", io.Discard)
		gw := addGatewayFlags(fs)
		if err := parseFlags(fs, []string{"--gateway", srv.URL, "--gateway-retries", c.retries}); err != nil {
			t.Fatal(err)
		}
		g, _, err := gw.open(slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Query(context.Background(), "o-1"); err == nil {
			t.Fatalf("--gateway-retries %s: a 503 answered as a state", c.retries)
		}
		if n := hits.Load(); n != c.want {
			t.Errorf("--gateway-retries %s: %d requests, want %d", c.retries, n, c.want)
		}
		srv.Close()
	}
}
