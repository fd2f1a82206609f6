package httpapi_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/httpapi"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/timer/memory"
)

// lockedBuffer is a log sink the server writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// clientFrom is an HTTP client whose connections leave from source, a
// loopback address of this machine (all of 127/8 is loopback on Linux):
// another remote address as the server sees it.
func clientFrom(source string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}

// throttledAPI serves the API with a token on SQLite, its log in logs.
func throttledAPI(t *testing.T, token string, opts httpapi.Options) (string, *lockedBuffer) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "lapse.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	svc, err := lapse.New(lapse.Config{Store: st, Scheduler: memory.New(memory.Config{}), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	opts.APIToken, opts.Logger = token, slog.New(slog.NewTextHandler(logs, nil))
	srv := httptest.NewServer(conforming(t, httpapi.New(svc, opts)))
	t.Cleanup(srv.Close)
	return srv.URL, logs
}

func getSKU(t *testing.T, hc *http.Client, base, auth string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", base+"/v1/skus/tee", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", auth)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// Wrong bearer tokens from one address are throttled: after a burst of
// them, that address is answered 429 auth_throttled with a Retry-After,
// its token not even looked at (the right one included, so a guess made
// while throttled tells nothing), and the log has a line per burst, not per
// guess. The right token from another address still works.
func TestWrongBearerTokensAreThrottled(t *testing.T) {
	t.Parallel()
	const token = "throttle-test-token-0123456789"
	base, logs := throttledAPI(t, token, httpapi.Options{})
	here, elsewhere := clientFrom("127.0.0.1"), clientFrom("127.0.0.2")
	if resp := getSKU(t, elsewhere, base, "Bearer "+token); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the right token from 127.0.0.2: %d, want 404 (no such sku): is 127.0.0.2 not loopback here?", resp.StatusCode)
	}
	first429 := 0
	for i := 1; i <= 200; i++ {
		resp := getSKU(t, here, base, "Bearer wrong-guess-"+strconv.Itoa(i))
		if resp.StatusCode == http.StatusTooManyRequests {
			first429 = i
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 {
				t.Errorf("429 with Retry-After %q, want a number of seconds", resp.Header.Get("Retry-After"))
			}
			break
		}
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong guess %d: %d, want 401", i, resp.StatusCode)
		}
	}
	if first429 == 0 || first429 > 21 {
		t.Fatalf("the first 429 came at guess %d, want one within 21 guesses", first429)
	}
	for i := range 50 {
		if resp := getSKU(t, here, base, "Bearer wrong-again-"+strconv.Itoa(i)); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("a guess while throttled: %d, want 429", resp.StatusCode)
		}
	}
	if resp := getSKU(t, here, base, "Bearer "+token); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the right token from the throttled address: %d, want 429 (a throttled guess must tell nothing)", resp.StatusCode)
	}
	if resp := getSKU(t, elsewhere, base, "Bearer "+token); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the right token from another address: %d, want 404 (no such sku)", resp.StatusCode)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n < 1 || n > 2 {
		t.Errorf("%d WARN lines for one burst of guesses, want 1 or 2:\n%s", n, logs.String())
	}
}

// The budget refills with time: one more guess per Every once the burst is
// spent, the whole burst after Burst × Every without a failure.
func TestAuthThrottleRefills(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	const token = "throttle-test-token-0123456789"
	thr := httpapi.NewAuthThrottle(httpapi.AuthThrottleConfig{Burst: 3, Every: time.Minute, Now: clk})
	base, _ := throttledAPI(t, token, httpapi.Options{AuthThrottle: thr})
	here := clientFrom("127.0.0.1")
	want := func(what string, auth string, status int) {
		t.Helper()
		if resp := getSKU(t, here, base, auth); resp.StatusCode != status {
			t.Fatalf("%s: %d, want %d", what, resp.StatusCode, status)
		}
	}
	for i := range 3 {
		want("guess "+strconv.Itoa(i), "Bearer wrong", http.StatusUnauthorized)
	}
	resp := getSKU(t, here, base, "Bearer wrong")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "60" {
		t.Fatalf("past the burst: %d, Retry-After %q; want 429 and 60", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	want("no Authorization at all (costs nothing, tells nothing)", "", http.StatusUnauthorized)
	advance(59 * time.Second)
	if resp := getSKU(t, here, base, "Bearer "+token); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("a second early: %d, Retry-After %q; want 429 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	advance(time.Second)
	want("one guess allowed after Every", "Bearer wrong", http.StatusUnauthorized)
	want("and then throttled again", "Bearer "+token, http.StatusTooManyRequests)
	advance(time.Minute)
	want("the right token once the budget allows", "Bearer "+token, http.StatusNotFound)
	want("the right token costs nothing", "Bearer "+token, http.StatusNotFound)
}
