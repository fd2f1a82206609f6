package drain

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestFullPassesRunAgainAtOnceAndShortOnesWaitForAWake(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake := make(chan struct{}, 1)
	claims := []int{10, 10, 3} // two full batches, then a short one
	passes := make(chan int, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Loop{Batch: 10, Interval: time.Hour, Wake: wake, Flush: -1}.Run(ctx, func(context.Context) (Pass, error) {
			n := 0
			if len(claims) > 0 {
				n, claims = claims[0], claims[1:]
			}
			passes <- n
			return Pass{Claimed: n}, nil
		})
	}()
	for _, want := range []int{10, 10, 3} {
		if got := <-passes; got != want {
			t.Fatalf("pass claimed %d, want %d", got, want)
		}
	}
	select {
	case n := <-passes:
		t.Fatalf("a short pass was followed at once by another (%d) although nothing woke the worker", n)
	case <-time.After(50 * time.Millisecond):
	}
	wake <- struct{}{}
	select {
	case <-passes:
	case <-time.After(10 * time.Second):
		t.Fatal("a wake did not start a pass")
	}
	cancel()
	<-done
}

func TestFailedPassesBackOffAndReportTheirError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waits := make(chan time.Duration, 10)
	boom := errors.New("store down")
	calls := 0
	Loop{Batch: 10, Interval: time.Hour, BackoffBase: time.Millisecond, BackoffMax: 4 * time.Millisecond, Flush: -1,
		OnError: func(err error, retryIn time.Duration) {
			if !errors.Is(err, boom) {
				t.Errorf("OnError got %v", err)
			}
			waits <- retryIn
			if len(waits) == 4 {
				cancel()
			}
		}}.Run(ctx, func(context.Context) (Pass, error) {
		calls++
		return Pass{}, boom
	})
	if calls != 4 {
		t.Fatalf("%d passes, want 4", calls)
	}
	close(waits)
	var got []time.Duration
	for w := range waits {
		got = append(got, w)
	}
	// 1, 2, 4, 4 ms, each ±20%.
	for i, want := range []time.Duration{1, 2, 4, 4} {
		want *= time.Millisecond
		if got[i] < want*8/10 || got[i] > want*12/10 {
			t.Errorf("pause %d: %s, want %s ±20%%", i, got[i], want)
		}
	}
}

func TestStopEndsTheWorkerAndShutdownFlushesUntilAShortPass(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	Loop{Batch: 5}.Run(ctx, func(pctx context.Context) (Pass, error) {
		calls++
		if calls == 1 {
			cancel()
			return Pass{Claimed: 5}, nil // full: but ctx ended, so the flush goes on
		}
		if pctx.Err() != nil {
			t.Error("the flush ran on an ended context")
		}
		if calls < 4 {
			return Pass{Claimed: 5}, nil
		}
		return Pass{Claimed: 1}, nil
	})
	if calls != 4 {
		t.Fatalf("%d passes, want 1 + a flush of 3 ending at the short one", calls)
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	calls = 0
	go func() {
		defer close(stopped)
		Loop{Batch: 5, Interval: time.Millisecond}.Run(ctx2, func(context.Context) (Pass, error) {
			calls++
			return Pass{Stop: true}, nil
		})
	}()
	select {
	case <-stopped:
		t.Fatal("a stopped worker returned before its context ended")
	case <-time.After(20 * time.Millisecond):
	}
	cancel2()
	<-stopped
	if calls != 1 {
		t.Fatalf("%d passes after a stop, want 1 (no flush either)", calls)
	}
}

// A worker told to yield holds its pass while Yield says so, runs it once
// Yield stops saying so, and never holds longer than MaxYield at a time.
func TestYieldHoldsPassesBoundedByMaxYield(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var busy atomic.Bool
	busy.Store(true)
	passes := make(chan time.Time, 100)
	holds := make(chan time.Duration, 100)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		Loop{Batch: 10, Interval: time.Hour, Flush: -1, Yield: busy.Load, MaxYield: 300 * time.Millisecond,
			OnYield: func(d time.Duration) { holds <- d }}.Run(ctx, func(context.Context) (Pass, error) {
			passes <- time.Now()
			return Pass{Claimed: 10}, nil // always full: runs again at once, unless held
		})
	}()
	// Yield stays true: each pass comes after a hold of MaxYield.
	for i := range 3 {
		at := <-passes
		var held time.Duration
		select {
		case held = <-holds:
		case <-time.After(10 * time.Second):
			t.Fatalf("pass %d ran without a hold while Yield says true", i)
		}
		if held < 300*time.Millisecond {
			t.Fatalf("pass %d held %s, want MaxYield (300ms) while Yield says true", i, held)
		}
		if min := time.Duration(i+1) * 300 * time.Millisecond; at.Sub(start) < min {
			t.Fatalf("pass %d ran %s after the start, want at least %s", i, at.Sub(start), min)
		}
	}
	// Yield turns false: passes run back to back, unheld (one hold may be
	// under way at the switch).
	busy.Store(false)
	deadline := time.After(10 * time.Second)
	for n := 0; n < 20; {
		select {
		case <-passes:
			n++
		case <-deadline:
			t.Fatal("passes did not resume once Yield turned false")
		}
	}
	cancel()
	<-done
	if len(holds) > 1 {
		t.Fatalf("%d holds after Yield turned false, want at most the one under way", len(holds))
	}
}
