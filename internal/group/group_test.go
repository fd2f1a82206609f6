package group_test

import (
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/group"
)

// Values added while a group runs go into the next one, none is lost or run
// twice, groups never exceed the maximum, and one group runs at a time.
func TestQueueGroupsWhatArrivesWhileAGroupRuns(t *testing.T) {
	const n, limit = 500, 16
	var (
		mu      sync.Mutex
		seen    = map[int]int{}
		sizes   []int
		running int
		overlap bool
		wg      sync.WaitGroup
	)
	release := make(chan struct{})
	q := group.New(limit, func(g []int) {
		mu.Lock()
		running++
		overlap = overlap || running > 1
		sizes = append(sizes, len(g))
		for _, v := range g {
			seen[v]++
		}
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			<-release // hold the first group while the rest queue up
		}
		mu.Lock()
		running--
		mu.Unlock()
		for range g {
			wg.Done()
		}
	})
	wg.Add(n)
	q.Add(0)
	for i := 1; i < n; i++ {
		q.Add(i)
	}
	close(release)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not every value was run within 10s")
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if seen[i] != 1 {
			t.Errorf("value %d run %d times", i, seen[i])
		}
	}
	if overlap {
		t.Error("two groups ran at once")
	}
	for _, s := range sizes[1:] {
		if s > limit {
			t.Errorf("a group of %d, above the maximum %d", s, limit)
		}
	}
	// The 499 values added while the first group was held went into full groups.
	if len(sizes) > 1+(n-1+limit-1)/limit {
		t.Errorf("%d groups for %d values in groups of %d: %v", len(sizes), n, limit, sizes)
	}
}
