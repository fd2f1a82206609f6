package httpapi

import (
	"fmt"
	"testing"
	"time"
)

// The throttle's memory is bounded however many addresses fail, and one
// host's IPv6 addresses share its /64's budget.
func TestAuthThrottleIsBounded(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	thr := NewAuthThrottle(AuthThrottleConfig{Burst: 2, Every: time.Second, MaxAddresses: 100, Now: func() time.Time { return now }})
	for i := range 10_000 {
		thr.Fail(fmt.Sprintf("10.%d.%d.%d:1234", i>>16&255, i>>8&255, i&255))
		if n := len(thr.addrs); n > 100 {
			t.Fatalf("%d addresses remembered after %d failures, want at most 100", n, i+1)
		}
	}
	now = now.Add(time.Hour)
	thr.Fail("192.0.2.1:1") // makes room: every refilled budget goes
	if n := len(thr.addrs); n != 1 {
		t.Errorf("%d addresses remembered once all had refilled, want 1", n)
	}
	thr.Fail("192.0.2.2:1")
	now = now.Add(time.Hour)
	if ok, _, _ := thr.Allow("192.0.2.2:1"); !ok || len(thr.addrs) != 1 {
		t.Errorf("an address an hour after its failure: allowed %v, %d remembered; want allowed and forgotten", ok, len(thr.addrs))
	}
	thr.Fail("10.0.0.1:1")

	for _, a := range []string{"[2001:db8:1:2::1]:1", "[2001:db8:1:2:ffff::9]:2"} {
		thr.Fail(a)
	}
	if ok, _, _ := thr.Allow("[2001:db8:1:2:abcd::1]:3"); ok {
		t.Error("another address of the same /64 is not throttled")
	}
	if ok, _, _ := thr.Allow("[2001:db8:1:3::1]:3"); !ok {
		t.Error("an address of another /64 is throttled")
	}
	if ok, _, _ := thr.Allow("[::ffff:10.0.0.1]:3"); !ok {
		t.Error("10.0.0.1 written as an IPv4-mapped IPv6 address is throttled after one failure of a burst of 2")
	}
	thr.Fail("10.0.0.1:9")
	if ok, wait, first := thr.Allow("[::ffff:10.0.0.1]:3"); ok || wait <= 0 || !first {
		t.Errorf("10.0.0.1 (IPv4-mapped) after its burst: ok %v wait %v first %v, want refused, a wait, first", ok, wait, first)
	}
	if _, _, first := thr.Allow("10.0.0.1:4"); first {
		t.Error("a second refusal in one burst is reported as the first (it would be logged again)")
	}
}
