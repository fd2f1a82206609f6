package drain

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

// An error kept on a row is cut on a rune boundary: a cut through a
// multi-byte character is invalid UTF-8, which PostgreSQL refuses in a
// text column — and the settle carrying it would fail every time.
func TestTruncateKeepsValidUTF8(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc"},
		{"ab€cd", 3, "ab"}, // € is 3 bytes: bytes 2..4
		{"ab€cd", 4, "ab"},
		{"ab€cd", 5, "ab€"},
		{"订单超时", 7, "订单"},
	} {
		got := Truncate(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) || len(got) > tc.n {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestSendAllBoundsConcurrencyAndKeepsOrder(t *testing.T) {
	var inFlight, most atomic.Int32
	items := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	answers, errs := SendAll(context.Background(), Sending{Lease: time.Minute, Timeout: time.Second, Concurrency: 3}, time.Now(), items,
		func(ctx context.Context, i int) (int, error) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
			if i == 4 {
				return 0, errors.New("four")
			}
			return i * 10, nil
		})
	if most.Load() > 3 {
		t.Errorf("%d sends in flight at once, want at most 3", most.Load())
	}
	for i := range items {
		if i == 4 {
			if errs[i] == nil {
				t.Error("item 4's error lost")
			}
			continue
		}
		if errs[i] != nil || answers[i] != i*10 {
			t.Errorf("item %d: %d, %v", i, answers[i], errs[i])
		}
	}
}

// A send ends within 4/5 of the lease from before the claim, and a
// shutdown does not abandon the batch in hand.
func TestSendAllEndsWithinTheLeaseNotAtShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	_, errs := SendAll(ctx, Sending{Lease: 250 * time.Millisecond, Timeout: time.Minute}, start, []int{1},
		func(ctx context.Context, _ int) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		})
	took := time.Since(start)
	if !errors.Is(errs[0], context.DeadlineExceeded) || took < 200*time.Millisecond {
		t.Fatalf("the send ended after %s with %v: want the lease's 4/5 (200ms), not the cancelled context", took, errs[0])
	}
}

func TestRetryAfter(t *testing.T) {
	r := Retry{MaxAttempts: 3, MaxAge: time.Hour, Base: time.Second, Max: 10 * time.Second}
	if in, dead := r.After(1, 0); dead || in < 800*time.Millisecond || in > 1200*time.Millisecond {
		t.Errorf("first failure: %s dead=%v", in, dead)
	}
	if in, dead := r.After(2, 0); dead || in < 1600*time.Millisecond || in > 2400*time.Millisecond {
		t.Errorf("second failure: %s dead=%v", in, dead)
	}
	if _, dead := r.After(3, 0); !dead {
		t.Error("third failure of 3: not dead")
	}
	if _, dead := r.After(1, time.Hour); !dead {
		t.Error("an hour old with MaxAge 1h: not dead")
	}
}
