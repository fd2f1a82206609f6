package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Two --sink flags that name one sink (the same URL, or URLs that differ
// only in a secret query parameter, which is left out of the name so that
// rotating it keeps the sink's progress) would share one progress: lapse
// serve refuses them at start, exit 2, naming both flags and the name, and
// never the query's secret. It refuses before it dials or opens anything:
// the database is not created.
func TestServeRefusesTwoSinksOfOneName(t *testing.T) {
	t.Parallel()
	hook := "https://hooks.example.com/in"
	for _, c := range []struct {
		name  string
		sinks []string
		flags []string // the flags the message names
	}{
		{"log twice", []string{"log", "log"}, []string{"--sink #1", "--sink #2"}},
		{"one webhook twice", []string{"log", hook, hook}, []string{"--sink #2", "--sink #3"}},
		{"webhooks differing in a secret parameter", []string{hook + "?token=s3cr3t-one", "log", hook + "?token=s3cr3t-two"}, []string{"--sink #1", "--sink #3"}},
		{"one exchange with other connection parameters", []string{"amqp://guest:guest@127.0.0.1:1/?exchange=ev", "amqp://guest:guest@127.0.0.1:1/?exchange=ev&heartbeat=5"}, []string{"--sink #1", "--sink #2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := []string{"serve", "--addr", "127.0.0.1:0", "--store", "sqlite://" + filepath.Join(dir, "x.db"), "--webhook-secret", testWebhookSecret}
			for _, s := range c.sinks {
				args = append(args, "--sink", s)
			}
			out, code := lapseRun(t, 20*time.Second, nil, args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2:\n%s", code, out)
			}
			for _, f := range c.flags {
				if !strings.Contains(out, f) {
					t.Errorf("the refusal does not name %s:\n%s", f, out)
				}
			}
			if strings.Contains(out, "s3cr3t") || strings.Contains(out, "lapse serving") {
				t.Errorf("the refusal shows a query secret, or lapse started:\n%s", out)
			}
			if _, err := os.Stat(filepath.Join(dir, "x.db")); err == nil {
				t.Error("a refused start created the database")
			}
		})
	}
}

// queryReceiver is a webhook endpoint that records, per query string, the
// ids of the events that arrived signed.
type queryReceiver struct {
	wh  *standardwebhooks.Webhook
	srv *httptest.Server

	mu  sync.Mutex
	ids map[string]map[string]bool // raw query → event ids
}

func newQueryReceiver(t *testing.T) *queryReceiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(testWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	r := &queryReceiver{wh: wh, ids: map[string]map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil || r.wh.Verify(body, req.Header) != nil {
			http.Error(w, "bad request or signature", http.StatusUnauthorized)
			return
		}
		r.mu.Lock()
		q := req.URL.RawQuery
		if r.ids[q] == nil {
			r.ids[q] = map[string]bool{}
		}
		r.ids[q][req.Header.Get("webhook-id")] = true
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *queryReceiver) count(query string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids[query])
}

// Two webhooks on one path that differ only in a (non-secret) query
// parameter are two destinations: each gets a name of its own, with a
// digest of its query, not the query, and each gets every event.
func TestServeDeliversToWebhooksDifferingOnlyInQuery(t *testing.T) {
	t.Parallel()
	rcv := newQueryReceiver(t)
	hook := rcv.srv.URL + "/hooks/lapse"
	s := startServe(t, nil, "--store", "sqlite://"+filepath.Join(t.TempDir(), "lapse.db"), "--timers", "memory",
		"--sink", hook+"?tenant=a", "--sink", hook+"?tenant=b", "--webhook-secret", testWebhookSecret)
	s.call("PUT", "/v1/skus/tee", `{"available": 5}`, 200)
	s.call("POST", "/v1/orders", `{"id": "q-1", "items": [{"sku": "tee", "qty": 1}], "amount_cents": 100}`, 201)
	s.call("POST", "/v1/orders/q-1/cancel", "", 200)
	deadline := time.Now().Add(20 * time.Second)
	for rcv.count("tenant=a") < 2 || rcv.count("tenant=b") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: %d events for tenant=a, %d for tenant=b, want 2 each\n%s", rcv.count("tenant=a"), rcv.count("tenant=b"), s.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.stop()
	logs := s.logs.String()
	names := regexp.MustCompile(`webhook:\S+\?query-sha256=[0-9a-f]{16}`).FindAllString(regexp.MustCompile(`msg="lapse serving".*`).FindString(logs), -1)
	if len(names) != 2 || names[0] == names[1] {
		t.Errorf("sink names %q at start, want two distinct ones with a digest of their query", names)
	}
	if strings.Contains(logs, "tenant=") {
		t.Errorf("the log shows a sink's query:\n%s", logs)
	}
	if strings.Contains(logs, "level=ERROR") {
		t.Errorf("an error was logged:\n%s", logs)
	}
}
