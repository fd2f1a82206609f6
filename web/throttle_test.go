package web_test

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/httpapi"
	"github.com/lapsehq/lapse/web"
)

// clientFrom is a client that follows no redirect and whose connections
// leave from source, a loopback address (all of 127/8 is loopback on
// Linux): another remote address as the server sees it.
func clientFrom(source string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func login(t *testing.T, hc *http.Client, base, tok string) *http.Response {
	t.Helper()
	resp, err := hc.PostForm(base+"/ui/login", url.Values{"token": {tok}, "next": {"/ui/orders"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// Wrong tokens at the login form are throttled per address: after a burst,
// 429 with Retry-After, whatever the token (the right one included); the
// right token from another address still logs in.
func TestWrongLoginsAreThrottled(t *testing.T) {
	t.Parallel()
	base := dashOn(t, openSQLite(t), token)
	here, elsewhere := clientFrom("127.0.0.1"), clientFrom("127.0.0.2")
	first429 := 0
	for i := 1; i <= 200; i++ {
		resp := login(t, here, base, "wrong-guess-"+strconv.Itoa(i))
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
	if resp := login(t, here, base, token); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("the right token from the throttled address: %d (cookie %q), want 429 and no session", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
	if resp := login(t, elsewhere, base, token); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/orders" {
		t.Errorf("the right token from another address: %d to %q, want 303 to /ui/orders", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// With one AuthThrottle for the API and the dashboard (as lapse serve
// runs them), an address has one budget: wrong Bearer tokens and wrong
// logins count together.
func TestAPIAndLoginShareOneBudget(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := lapse.New(lapse.Config{Store: openSQLite(t), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	thr := httpapi.NewAuthThrottle(httpapi.AuthThrottleConfig{Burst: 10, Every: time.Hour})
	dash, err := web.New(svc, web.Options{APIToken: token, Logger: logger, AuthThrottle: thr})
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, t.Context(), web.Mount(httpapi.New(svc, httpapi.Options{APIToken: token, Logger: logger, AuthThrottle: thr}), dash))
	here := clientFrom("127.0.0.1")
	for i := range 5 {
		req, _ := http.NewRequest("GET", base+"/v1/skus/tee", nil)
		req.Header.Set("Authorization", "Bearer wrong-"+strconv.Itoa(i))
		resp, err := here.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong Bearer %d: %d, want 401", i, resp.StatusCode)
		}
		if resp := login(t, here, base, "wrong-"+strconv.Itoa(i)); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong login %d: %d, want 401", i, resp.StatusCode)
		}
	}
	if resp := login(t, here, base, token); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a login after 5 wrong Bearer tokens and 5 wrong logins (a budget of 10): %d, want 429", resp.StatusCode)
	}
}

// A token under 16 bytes is refused: a word can be guessed online.
func TestDashboardRefusesAShortToken(t *testing.T) {
	t.Parallel()
	svc, err := lapse.New(lapse.Config{Store: openSQLite(t), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"k", "0123456789abcde"} {
		if _, err := web.New(svc, web.Options{APIToken: tok}); err == nil || !strings.Contains(err.Error(), "at least 16") {
			t.Errorf("web.New with a %d-byte token: %v, want a refusal asking for 16 bytes", len(tok), err)
		}
	}
	if _, err := web.New(svc, web.Options{APIToken: "0123456789abcdef"}); err != nil {
		t.Errorf("web.New with a 16-byte token: %v", err)
	}
}
