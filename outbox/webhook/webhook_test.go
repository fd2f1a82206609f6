package webhook_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/outbox/sinktest"
	"github.com/lapsehq/lapse/outbox/webhook"
)

// newSecret returns a fresh whsec_ secret of 32 random bytes.
func newSecret(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return webhook.SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// verifier is a Standard Webhooks receiver's check of one secret, made
// with the specification's own library (timestamp tolerance included).
func verifier(t *testing.T, secret string) *standardwebhooks.Webhook {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatalf("the Standard Webhooks library refuses the secret: %v", err)
	}
	return wh
}

// receiver is an endpoint as a Standard Webhooks consumer writes it: it
// answers 401 to a request whose signature does not verify, and records
// the others.
type receiver struct {
	wh *standardwebhooks.Webhook

	mu       sync.Mutex
	got      []sinktest.Delivery
	rejected []string // why requests were refused
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err == nil {
		err = r.wh.Verify(body, req.Header)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.rejected = append(r.rejected, err.Error())
		http.Error(w, "signature does not verify", http.StatusUnauthorized)
		return
	}
	headers := map[string]string{}
	for k, v := range req.Header {
		headers[strings.ToLower(k)] = v[0]
	}
	r.got = append(r.got, sinktest.Delivery{Body: body, ContentType: req.Header.Get("Content-Type"), Headers: headers, Route: req.URL.Path})
	w.WriteHeader(http.StatusNoContent)
}

// Received implements sinktest.Receiver.
func (r *receiver) Received() []sinktest.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sinktest.Delivery(nil), r.got...)
}

func (r *receiver) rejections() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.rejected...)
}

// endpoint starts a receiver verifying secret on a loopback HTTP server.
func endpoint(t *testing.T, secret string) (*receiver, *httptest.Server) {
	t.Helper()
	recv := &receiver{wh: verifier(t, secret)}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		if r := recv.rejections(); len(r) > 0 {
			t.Errorf("the receiver refused %d requests whose signature did not verify: %v", len(r), r)
		}
	})
	return recv, srv
}

func newSink(t *testing.T, cfg webhook.Config) *webhook.Sink {
	t.Helper()
	s, err := webhook.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func publish(t *testing.T, s outbox.Sink, evs []order.Event) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := s.Publish(ctx, evs)
	if len(errs) != len(evs) {
		t.Fatalf("Publish: %d results for %d events", len(errs), len(evs))
	}
	return errs
}

func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Features{}, func(t *testing.T, format outbox.Format) (outbox.Sink, sinktest.Receiver) {
		secret := newSecret(t)
		recv, srv := endpoint(t, secret)
		return newSink(t, webhook.Config{URL: srv.URL + "/hooks/lapse", Secrets: []string{secret}, Format: format}), recv
	})
}

func TestRequest(t *testing.T) {
	secret := newSecret(t)
	recv, srv := endpoint(t, secret)
	s := newSink(t, webhook.Config{URL: srv.URL + "/in?token=abc", Secrets: []string{secret}})
	ev := sinktest.Events("h", 1, order.EventCreated)[0]
	before := time.Now()
	if err := publish(t, s, []order.Event{ev})[0]; err != nil {
		t.Fatalf("Publish: %v", err)
	}
	got := recv.Received()
	if len(got) != 1 {
		t.Fatalf("%d requests arrived, want 1", len(got))
	}
	d := got[0]
	want, ctype, err := outbox.FormatJSON.Structured(ev)
	if err != nil {
		t.Fatal(err)
	}
	if string(d.Body) != string(want) || d.ContentType != ctype {
		t.Errorf("body %s (%s), want the JSON envelope %s (%s)", d.Body, d.ContentType, want, ctype)
	}
	if d.Headers["webhook-id"] != ev.ID {
		t.Errorf("webhook-id %q, want the event id %q", d.Headers["webhook-id"], ev.ID)
	}
	ts, err := strconv.ParseInt(d.Headers["webhook-timestamp"], 10, 64)
	if err != nil || ts < before.Unix() || ts > time.Now().Unix() {
		t.Errorf("webhook-timestamp %q, want the unix seconds of the attempt (%d or later)", d.Headers["webhook-timestamp"], before.Unix())
	}
	if d.Headers["user-agent"] != "lapse" {
		t.Errorf("User-Agent %q, want lapse", d.Headers["user-agent"])
	}
	if d.Route != "/in" {
		t.Errorf("path %q, want /in", d.Route)
	}
}

func TestSecretRotationSignsWithEverySecret(t *testing.T) {
	old, next := newSecret(t), newSecret(t)
	recv, srv := endpoint(t, next) // a receiver that already moved to the new secret
	s := newSink(t, webhook.Config{URL: srv.URL, Secrets: []string{old, next}})
	if err := publish(t, s, sinktest.Events("rot", 1, order.EventPaid))[0]; err != nil {
		t.Fatalf("Publish: %v", err)
	}
	d := recv.Received()[0]
	sigs := strings.Split(d.Headers["webhook-signature"], " ")
	if len(sigs) != 2 {
		t.Fatalf("webhook-signature %q: want two space-separated signatures", d.Headers["webhook-signature"])
	}
	header := func(sig string) http.Header {
		h := http.Header{}
		for _, k := range []string{"webhook-id", "webhook-timestamp"} {
			h.Set(k, d.Headers[k])
		}
		h.Set("webhook-signature", sig)
		return h
	}
	for i, secret := range []string{old, next} {
		if !strings.HasPrefix(sigs[i], "v1,") {
			t.Errorf("signature %d %q: want v1,<base64>", i+1, sigs[i])
		}
		if err := verifier(t, secret).Verify(d.Body, header(sigs[i])); err != nil {
			t.Errorf("signature %d does not verify with secret %d: %v", i+1, i+1, err)
		}
		if err := verifier(t, secret).Verify(d.Body, header(sigs[1-i])); err == nil {
			t.Errorf("signature %d verifies with secret %d: the signatures are not one per secret", 2-i, i+1)
		}
	}
	if err := verifier(t, newSecret(t)).Verify(d.Body, header(d.Headers["webhook-signature"])); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Errorf("an unrelated secret: %v, want ErrNoMatchingSignature", err)
	}
}

// outcome is how Publish classified one event's answer.
type outcome struct {
	kind       string // ok, refused, permanent, gone, transport
	retryAfter time.Duration
}

func classify(t *testing.T, err error) outcome {
	t.Helper()
	var refused *outbox.RefusedError
	switch {
	case err == nil:
		return outcome{kind: "ok"}
	case errors.Is(err, outbox.ErrGone):
		if errors.As(err, &refused) {
			t.Errorf("%v: a 410 is not a refusal (it would count toward the policy)", err)
		}
		return outcome{kind: "gone"}
	case errors.As(err, &refused):
		if refused.Permanent {
			return outcome{kind: "permanent", retryAfter: refused.RetryAfter}
		}
		return outcome{kind: "refused", retryAfter: refused.RetryAfter}
	}
	return outcome{kind: "transport"}
}

func TestAnswersAreClassified(t *testing.T) {
	secret := newSecret(t)
	wh := verifier(t, secret)
	var (
		mu      sync.Mutex
		badSig  int
		stolen  int
		answers = map[string]func(http.ResponseWriter, *http.Request){}
	)
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		stolen++
		mu.Unlock()
	}))
	t.Cleanup(elsewhere.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		answer := answers[r.URL.Path]
		if wh.Verify(body, r.Header) != nil {
			badSig++
		}
		mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(srv.Close)

	status := func(code int, header ...string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			for i := 0; i+1 < len(header); i += 2 {
				w.Header().Set(header[i], header[i+1])
			}
			w.WriteHeader(code)
			fmt.Fprintf(w, "answer of %s", r.URL.Path)
		}
	}
	redirect := func(code int) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere.URL+"/stolen", code)
		}
	}
	httpDate := time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	const maxAge = time.Hour
	cases := []struct {
		name   string
		answer func(http.ResponseWriter, *http.Request)
		want   string
		// retry-after bounds, both zero for none
		minRA, maxRA time.Duration
	}{
		{"200", status(200), "ok", 0, 0},
		{"202", status(202), "ok", 0, 0},
		{"204", status(204), "ok", 0, 0},
		{"400", status(400), "permanent", 0, 0},
		{"401", status(401), "permanent", 0, 0},
		{"403", status(403), "permanent", 0, 0},
		{"404", status(404), "permanent", 0, 0},
		{"422", status(422), "permanent", 0, 0},
		{"408", status(408), "refused", 0, 0},
		{"409", status(409), "refused", 0, 0},
		{"500", status(500), "refused", 0, 0},
		{"502", status(502), "refused", 0, 0},
		{"504", status(504), "refused", 0, 0},
		{"500 with Retry-After (only 429 and 503 are heeded)", status(500, "Retry-After", "7"), "refused", 0, 0},
		{"429", status(429), "refused", 0, 0},
		{"429 Retry-After seconds", status(429, "Retry-After", "7"), "refused", 7 * time.Second, 7 * time.Second},
		{"429 Retry-After HTTP-date", status(429, "Retry-After", httpDate), "refused", 25 * time.Second, 30 * time.Second},
		{"429 Retry-After beyond the max age", status(429, "Retry-After", "99999999999999999"), "refused", maxAge, maxAge},
		{"503", status(503), "refused", 0, 0},
		{"503 Retry-After seconds", status(503, "Retry-After", "7"), "refused", 7 * time.Second, 7 * time.Second},
		{"503 Retry-After HTTP-date", status(503, "Retry-After", httpDate), "refused", 25 * time.Second, 30 * time.Second},
		{"503 Retry-After in the past", status(503, "Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"), "refused", 0, 0},
		{"503 Retry-After unreadable", status(503, "Retry-After", "soon"), "refused", 0, 0},
		{"410", status(410), "gone", 0, 0},
		{"301", redirect(301), "refused", 0, 0},
		{"302", redirect(302), "refused", 0, 0},
		{"307", redirect(307), "refused", 0, 0},
		{"308", redirect(308), "refused", 0, 0},
	}
	mu.Lock()
	for i, c := range cases {
		answers["/case/"+strconv.Itoa(i)] = c.answer
	}
	mu.Unlock()
	for i, c := range cases {
		path := "/case/" + strconv.Itoa(i)
		t.Run(c.name, func(t *testing.T) {
			s := newSink(t, webhook.Config{URL: srv.URL + path, Secrets: []string{secret}, MaxAge: maxAge})
			err := publish(t, s, sinktest.Events("cls", 1, order.EventCreated))[0]
			got := classify(t, err)
			if got.kind != c.want || got.retryAfter < c.minRA || got.retryAfter > c.maxRA {
				t.Errorf("%v: classified %s, retry after %s; want %s, retry after %s..%s", err, got.kind, got.retryAfter, c.want, c.minRA, c.maxRA)
			}
			if err == nil {
				return
			}
			var serr *webhook.StatusError
			if !errors.As(err, &serr) || strconv.Itoa(serr.Code) != c.name[:3] {
				t.Errorf("%v: want a StatusError with the status %s", err, c.name[:3])
			}
			if strings.Contains(err.Error(), "answer of") {
				t.Errorf("%v: the error quotes the response body", err)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if badSig != 0 {
		t.Errorf("%d requests had a signature that does not verify", badSig)
	}
	if stolen != 0 {
		t.Errorf("a redirect was followed: the other host received %d events", stolen)
	}
}

// hanging is an endpoint that accepts requests and never answers, until the
// client gives up or the test ends. arrived receives each request.
func hanging(t *testing.T) (srv *httptest.Server, arrived <-chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	in := make(chan struct{}, 16)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case in <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs before srv.Close
	return srv, in
}

func TestTimeout(t *testing.T) {
	srv, _ := hanging(t)
	const timeout = 300 * time.Millisecond
	s := newSink(t, webhook.Config{URL: srv.URL, Secrets: []string{newSecret(t)}, Timeout: timeout})
	start := time.Now()
	err := publish(t, s, sinktest.Events("to", 1, order.EventCreated))[0]
	took := time.Since(start)
	if got := classify(t, err); got.kind != "refused" || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v: classified %s; want a refusal wrapping context.DeadlineExceeded", err, got.kind)
	}
	if took < timeout || took > timeout+5*time.Second {
		t.Errorf("Publish returned after %s, want about the %s timeout", took, timeout)
	}
}

func TestContextEndIsNotARefusal(t *testing.T) {
	srv, arrived := hanging(t)
	s := newSink(t, webhook.Config{URL: srv.URL, Secrets: []string{newSecret(t)}, Concurrency: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs := sinktest.Events("ctx", 3, order.EventCreated)
	done := make(chan []error, 1)
	go func() { done <- s.Publish(ctx, evs) }()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never arrived")
	}
	cancel()
	var errs []error
	select {
	case errs = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Publish did not return within 10 s of its context's end")
	}
	if len(errs) != len(evs) {
		t.Fatalf("%d results for %d events", len(errs), len(evs))
	}
	for i, err := range errs {
		if got := classify(t, err); got.kind != "transport" || !errors.Is(err, context.Canceled) {
			t.Errorf("event %d: %v (%s); want context.Canceled, not a refusal", i, err, got.kind)
		}
	}
}

func TestUnreachableEndpointIsRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	secret := newSecret(t)
	s := newSink(t, webhook.Config{URL: "http://" + addr + "/hook?token=t0ps3cretT0ken", Secrets: []string{secret}})
	err = publish(t, s, sinktest.Events("down", 1, order.EventCreated))[0]
	if got := classify(t, err); got.kind != "refused" {
		t.Errorf("%v: classified %s; want a refusal (a down endpoint counts toward the max age)", err, got.kind)
	}
	assertNoSecret(t, err.Error(), "t0ps3cretT0ken", secret)
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("%v: want the error to name the endpoint", err)
	}
}

func TestConcurrencyIsBounded(t *testing.T) {
	const limit, n = 4, 40 // n a multiple of limit: every batch fills
	var (
		mu       sync.Mutex
		inFlight int // arrived and not yet let through
		most     int
		waiting  int // held at the current gate
		gate     = make(chan struct{})
	)
	secret := newSecret(t)
	recv := &receiver{wh: verifier(t, secret)}
	// The endpoint holds requests in batches of limit: a batch goes through
	// once limit requests wait at its gate. A sink keeping limit requests
	// in flight fills every batch, so the test sees the bound reached; one
	// sending more piles them up at the gate, past the bound.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		g := gate
		if waiting++; waiting == limit {
			close(gate)
			gate, waiting = make(chan struct{}), 0
		}
		mu.Unlock()
		select {
		case <-g:
		case <-time.After(10 * time.Second):
			t.Errorf("a batch of %d requests never filled", limit)
		}
		mu.Lock()
		inFlight-- // before answering: the answer frees the sink's slot
		mu.Unlock()
		recv.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s := newSink(t, webhook.Config{URL: srv.URL, Secrets: []string{secret}, Concurrency: limit})
	for i, err := range publish(t, s, sinktest.Events("conc", n, order.EventCreated)) {
		if err != nil {
			t.Errorf("event %d: %v", i, err)
		}
	}
	if got := len(recv.Received()); got != n {
		t.Errorf("%d events delivered, want %d", got, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if most != limit {
		t.Errorf("at most %d requests were in flight, want the limit %d", most, limit)
	}
}

func TestNew(t *testing.T) {
	secret := newSecret(t)
	ok := []webhook.Config{
		{URL: "https://hooks.example.com/lapse"},
		{URL: "https://hooks.example.com:8443/in?token=x"},
		{URL: "http://127.0.0.1:8080/hook"},
		{URL: "http://127.9.8.7/hook"},
		{URL: "http://[::1]:9000/hook"},
		{URL: "http://localhost:9000/hook"},
		{URL: "http://LocalHost./hook"},
		{URL: "http://hooks.example.com/lapse", Insecure: true},
		{URL: "http://10.1.2.3/lapse", Insecure: true},
		{URL: "https://hooks.example.com/", Format: outbox.FormatCloudEvents},
	}
	for _, cfg := range ok {
		cfg.Secrets = []string{secret}
		if _, err := webhook.New(cfg); err != nil {
			t.Errorf("New(%+v): %v", cfg.URL, err)
		}
	}
	bad := []struct {
		cfg  webhook.Config
		want string // in the error
	}{
		{webhook.Config{URL: "http://hooks.example.com/lapse"}, "--webhook-insecure"},
		{webhook.Config{URL: "http://10.1.2.3/lapse"}, "https"},
		{webhook.Config{URL: "http://[::ffff:10.1.2.3]/lapse"}, "https"},
		{webhook.Config{URL: "http://localhost.example.com/lapse"}, "https"},
		{webhook.Config{URL: "ftp://hooks.example.com/lapse"}, "https"},
		{webhook.Config{URL: "hooks.example.com/lapse"}, "https"},
		{webhook.Config{URL: "https:///lapse"}, "no host"},
		{webhook.Config{URL: ""}, "no URL"},
		{webhook.Config{URL: "https://alice:hunter2hunter2@hooks.example.com/lapse"}, "user info"},
		{webhook.Config{URL: "https://alice@hooks.example.com/lapse"}, "user info"},
		{webhook.Config{URL: "https://alice:hunter2 hunter2@hooks.example.com/lapse"}, "webhook URL"},
		{webhook.Config{URL: "https://hooks.example.com/lapse", MaxAge: -time.Hour}, "max age"},
		{webhook.Config{URL: "https://hooks.example.com/lapse", Timeout: -time.Second}, "timeout"},
		{webhook.Config{URL: "https://hooks.example.com/lapse", Concurrency: -1}, "concurrency"},
		{webhook.Config{URL: "https://hooks.example.com/lapse", Format: "xml"}, "event format"},
	}
	for _, c := range bad {
		c.cfg.Secrets = []string{secret}
		_, err := webhook.New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q): %v, want an error about %q", c.cfg.URL, err, c.want)
			continue
		}
		assertNoSecret(t, err.Error(), "hunter2", "alice", secret)
	}
}

func TestNewNeedsValidSecrets(t *testing.T) {
	good := newSecret(t)
	short := webhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	cases := []struct {
		name    string
		secrets []string
		want    string
	}{
		{"none", nil, "no secret"},
		{"no prefix", []string{strings.TrimPrefix(good, webhook.SecretPrefix)}, "secret 1 of 1: want whsec_"},
		{"not base64", []string{"whsec_n0t-b@se64-at-all-but-long-enough!!"}, "standard base64"},
		{"unpadded", []string{strings.TrimRight(webhook.SecretPrefix+base64.StdEncoding.EncodeToString(make([]byte, 25)), "=")}, "standard base64"},
		{"url alphabet", []string{webhook.SecretPrefix + base64.URLEncoding.EncodeToString([]byte{0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe})}, "standard base64"},
		{"too short", []string{short}, "16 bytes, want at least 24"},
		{"second of two bad", []string{good, "whsec_!!"}, "secret 2 of 2"},
		{"repeated", []string{good, good}, "secret 2 repeats secret 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := webhook.New(webhook.Config{URL: "https://hooks.example.com/in", Secrets: c.secrets})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v, want an error about %q", err, c.want)
			}
			for _, s := range c.secrets {
				assertNoSecret(t, err.Error(), s)
			}
		})
	}
}

func TestNameAndPolicy(t *testing.T) {
	s := newSink(t, webhook.Config{URL: "https://Hooks.Example.com:8443/in/lapse?token=t0ps3cret#frag", Secrets: []string{newSecret(t)}})
	if got, want := s.Name(), "webhook:https://hooks.example.com:8443/in/lapse"; got != want {
		t.Errorf("Name %q, want %q", got, want)
	}
	if got := s.Policy(); got != (outbox.Policy{MaxAge: 72 * time.Hour}) {
		t.Errorf("default policy %+v, want a max age of 72 h", got)
	}
	s = newSink(t, webhook.Config{URL: "https://hooks.example.com", Secrets: []string{newSecret(t)}, MaxAge: time.Hour})
	if got := s.Policy(); got != (outbox.Policy{MaxAge: time.Hour}) {
		t.Errorf("policy %+v, want a max age of 1 h", got)
	}
	if got, want := s.Name(), "webhook:https://hooks.example.com"; got != want {
		t.Errorf("Name %q, want %q", got, want)
	}
}

// A webhook's name keeps a digest of its query's non-secret parameters:
// endpoints that differ only in one are two sinks; a secret parameter
// (rotated without losing progress) is left out; the order of parameters
// does not matter; no part of the query shows.
func TestNameKeepsADigestOfTheQuery(t *testing.T) {
	name := func(u string) string {
		t.Helper()
		s := newSink(t, webhook.Config{URL: u, Secrets: []string{newSecret(t)}})
		got, err := webhook.SinkName(u)
		if err != nil || got != s.Name() {
			t.Fatalf("SinkName(%s) = %q, %v; want the sink's Name %q", u, got, err, s.Name())
		}
		return s.Name()
	}
	base := "https://hooks.example.com/in"
	a, b := name(base+"?tenant=a&v=2"), name(base+"?tenant=b&v=2")
	if a == b {
		t.Errorf("?tenant=a and ?tenant=b: one name %q, want two", a)
	}
	for _, n := range []string{a, b} {
		if !strings.HasPrefix(n, "webhook:"+base+"?query-sha256=") || strings.Contains(n, "tenant") {
			t.Errorf("name %q: want the URL without its query, then a digest of it", n)
		}
	}
	if got := name(base + "?v=2&tenant=a"); got != a {
		t.Errorf("the same parameters in another order: %q, want %q", got, a)
	}
	if got := name(base + "?tenant=a&v=2&token=s3cret"); got != a {
		t.Errorf("with a secret parameter added: %q, want %q (secrets are left out)", got, a)
	}
	for _, u := range []string{base + "?token=one", base + "?api_key=two&", base + "?"} {
		if got := name(u); got != "webhook:"+base {
			t.Errorf("%s: name %q, want %q (no parameter but secrets)", u, got, "webhook:"+base)
		}
	}
}

func TestReadSecrets(t *testing.T) {
	a, b, c := newSecret(t), newSecret(t), newSecret(t)
	dir := t.TempDir()
	file := func(content string) string {
		p := filepath.Join(dir, strconv.Itoa(len(content))+".secrets")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := []struct {
		name       string
		flag, path string
		want       []string
	}{
		{"flag, one", a, "", []string{a}},
		{"flag, spaces", a + " " + b, "", []string{a, b}},
		{"flag, commas", a + "," + b + ",", "", []string{a, b}},
		{"flag, comma and space", " " + a + ", " + b + " ", "", []string{a, b}},
		{"file, one", "", file(a + "\n"), []string{a}},
		{"file, comments", "", file("# rotation of 2024-05\n\n" + a + "  # the old one\r\n\t" + b + "\n# " + c + " (not yet)\n"), []string{a, b}},
		{"file, no final newline", "", file(c), []string{c}},
	}
	for _, g := range good {
		got, err := webhook.ReadSecrets(g.flag, g.path)
		if err != nil || !reflect.DeepEqual(got, g.want) {
			t.Errorf("%s: ReadSecrets = %d secrets, %v; want %d", g.name, len(got), err, len(g.want))
		}
	}

	bad := []struct {
		name       string
		flag, path string
		want       string
	}{
		{"both", a, file(b), "both set"},
		{"neither", "", "", "--webhook-secret or --webhook-secret-file"},
		{"flag, only separators", " , ", "", "no secret"},
		{"flag, malformed", a + " whsec_" + strings.Repeat("?", 40), "", "secret 2 of 2"},
		{"flag, repeated", a + "," + a, "", "repeats"},
		{"file, missing", "", filepath.Join(dir, "absent"), "no such file"},
		{"file, empty", "", file("# nothing yet\n\n"), "no secret"},
		{"file, two on a line", "", file("# x\n" + a + " " + b + "\n"), "line 2: 2 words"},
		{"file, malformed", "", file(a + "\nwhsec_" + strings.TrimPrefix(c, "whsec_")[:20] + "\n"), "line 2"},
		{"file, no prefix", "", file(strings.TrimPrefix(b, "whsec_") + "\n"), "line 1: want whsec_"},
		{"file, repeated", "", file(a + "\n" + b + "\n" + a + "\n"), "secret 3 repeats secret 1"},
	}
	for _, x := range bad {
		_, err := webhook.ReadSecrets(x.flag, x.path)
		if err == nil || !strings.Contains(err.Error(), x.want) {
			t.Errorf("%s: ReadSecrets: %v, want an error about %q", x.name, err, x.want)
			continue
		}
		assertNoSecret(t, err.Error(), a, b, c, strings.Repeat("?", 40), strings.TrimPrefix(c, "whsec_")[:20])
	}
}

// assertNoSecret fails if s shows any of secrets, or the base64 of a whsec_
// secret without its prefix.
func assertNoSecret(t *testing.T, s string, secrets ...string) {
	t.Helper()
	for _, secret := range secrets {
		body := strings.TrimPrefix(secret, webhook.SecretPrefix)
		if len(body) >= 8 && strings.Contains(s, body[:8]) || strings.Contains(s, secret) {
			t.Errorf("%q shows a secret", s)
		}
	}
}

// The body is the format's bytes exactly: the signature covers them, and
// a receiver verifies before it parses.
func TestCloudEventsBodyIsSigned(t *testing.T) {
	secret := newSecret(t)
	recv, srv := endpoint(t, secret)
	s := newSink(t, webhook.Config{URL: srv.URL, Secrets: []string{secret}, Format: outbox.FormatCloudEvents})
	ev := sinktest.Events("ce", 1, order.EventRefundRequired)[0]
	if err := publish(t, s, []order.Event{ev})[0]; err != nil {
		t.Fatalf("Publish: %v", err)
	}
	d := recv.Received()[0]
	var ce struct {
		ID   string          `json:"id"`
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(d.Body, &ce); err != nil {
		t.Fatal(err)
	}
	if ce.ID != ev.ID || ce.ID != d.Headers["webhook-id"] || ce.Type != ev.Type || d.ContentType != "application/cloudevents+json" {
		t.Errorf("CloudEvent %s (%s) with webhook-id %s; want id %s, type %s", d.Body, d.ContentType, d.Headers["webhook-id"], ev.ID, ev.Type)
	}
}
