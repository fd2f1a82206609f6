package rabbit

import (
	"testing"
	"time"
)

func TestBackoffDoublesWithJitterUpToTheMaximum(t *testing.T) {
	cfg, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	c := &Conn{cfg: cfg}
	for _, tc := range []struct {
		attempt int
		ceiling time.Duration
	}{
		{1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {3, 400 * time.Millisecond},
		{6, 3200 * time.Millisecond}, {7, 5 * time.Second}, {100, 5 * time.Second},
	} {
		lo, hi := tc.ceiling, time.Duration(0)
		for range 200 {
			d := c.backoff(tc.attempt)
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo < tc.ceiling/2 || hi > tc.ceiling {
			t.Errorf("attempt %d: waits from %s to %s, want within [%s, %s]", tc.attempt, lo, hi, tc.ceiling/2, tc.ceiling)
		}
		if hi-lo < tc.ceiling/10 {
			t.Errorf("attempt %d: waits from %s to %s: no jitter", tc.attempt, lo, hi)
		}
	}
}
