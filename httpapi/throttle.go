package httpapi

import (
	"math"
	"net"
	"net/netip"
	"sync"
	"time"
)

// AuthThrottle limits wrong credentials per remote address: wrong bearer
// tokens on the API and wrong tokens at the dashboard's login. Without it
// one client could try thousands of tokens a second, each a log line.
//
// Each address has a budget of Burst failures, refilled at one per Every.
// An address whose budget is spent is answered 429 with Retry-After before
// its credential is even looked at, so a guess made while throttled tells
// nothing, the right token included; the right token from another address
// is never held up. A request without any credential costs nothing. An
// address is an IP, an IPv6 one by its /64 (what one host is commonly
// given). Memory is bounded: an address whose budget has refilled is
// forgotten, and at MaxAddresses the refilled ones are dropped first, then
// any one.
//
// Behind a reverse proxy every client has the proxy's address, so wrong
// tokens from one client throttle all of them; the budget is meant to be
// far beyond what a misconfigured client with a typo reaches in a minute.
//
// lapse serve shares one AuthThrottle between the API and the dashboard, so
// an address has one budget for both. It is safe for concurrent use.
type AuthThrottle struct {
	burst float64
	every time.Duration
	max   int
	now   func() time.Time

	mu    sync.Mutex
	addrs map[string]*budget
}

type budget struct {
	left    float64   // failures still allowed
	at      time.Time // when left was last brought up to date
	refused bool      // a refusal was reported for logging since the budget was last full
}

// AuthThrottleConfig configures an AuthThrottle; zero fields take the
// defaults.
type AuthThrottleConfig struct {
	// Burst is how many failures an address may make at once. Default 10.
	Burst int
	// Every is how often one more failure is allowed. Default 6 s (10 a
	// minute once the burst is spent).
	Every time.Duration
	// MaxAddresses bounds the addresses remembered. Default 10,000.
	MaxAddresses int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// NewAuthThrottle returns a throttle configured by cfg.
func NewAuthThrottle(cfg AuthThrottleConfig) *AuthThrottle {
	if cfg.Burst <= 0 {
		cfg.Burst = 10
	}
	if cfg.Every <= 0 {
		cfg.Every = 6 * time.Second
	}
	if cfg.MaxAddresses <= 0 {
		cfg.MaxAddresses = 10_000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &AuthThrottle{burst: float64(cfg.Burst), every: cfg.Every, max: cfg.MaxAddresses, now: cfg.Now, addrs: map[string]*budget{}}
}

// refill brings b up to now; it reports whether b is full (then it is the
// same as an address never seen).
func (t *AuthThrottle) refill(b *budget, now time.Time) bool {
	if d := now.Sub(b.at); d > 0 {
		b.left = math.Min(t.burst, b.left+float64(d)/float64(t.every))
		b.at = now
	}
	return b.left >= t.burst
}

// Allow reports whether a request from remote (an http.Request's
// RemoteAddr) may present a credential now. When it may not, wait is how
// long until it may, and first is true for the first refusal since the
// address last had its whole budget, so that a caller logs once per burst
// of guesses, not per request.
func (t *AuthThrottle) Allow(remote string) (ok bool, wait time.Duration, first bool) {
	key := addressKey(remote)
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.addrs[key]
	if b == nil {
		return true, 0, false
	}
	if t.refill(b, t.now()) {
		delete(t.addrs, key)
		return true, 0, false
	}
	if b.left >= 1 {
		return true, 0, false
	}
	wait = time.Duration((1 - b.left) * float64(t.every))
	first, b.refused = !b.refused, true
	return false, wait, first
}

// Fail records a wrong credential from remote. first is true when the
// address had no failure outstanding (the first of a burst), for the
// caller to log that one.
func (t *AuthThrottle) Fail(remote string) (first bool) {
	key := addressKey(remote)
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.addrs[key]
	if b == nil {
		t.makeRoom(now)
		b = &budget{left: t.burst, at: now}
		t.addrs[key] = b
	}
	first = t.refill(b, now)
	b.left--
	return first
}

// makeRoom keeps the map under its bound: at the bound, the addresses
// whose budget has refilled go, then, if none has, an arbitrary one (an
// attacker with that many addresses gains a burst per address anyway).
func (t *AuthThrottle) makeRoom(now time.Time) {
	if len(t.addrs) < t.max {
		return
	}
	for k, b := range t.addrs {
		if t.refill(b, now) {
			delete(t.addrs, k)
		}
	}
	for k := range t.addrs {
		if len(t.addrs) < t.max {
			return
		}
		delete(t.addrs, k)
	}
}

// addressKey is the address a budget belongs to: remote's IP, an IPv6
// one's /64; remote itself when it is not an IP (a Unix socket).
func addressKey(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// RetryAfter is wait in whole seconds, rounded up and at least 1: the
// value of a Retry-After header.
func RetryAfter(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}
