package sqlite

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Urgent waiters get the writer before the others, whatever the arrival order;
// the others keep theirs; a waiter whose context ends leaves the queue.
func TestWriterServesUrgentFirstThenInOrder(t *testing.T) {
	var w writer
	ctx := context.Background()
	if err := w.lock(ctx, false); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	waiters := func() int { w.mu.Lock(); defer w.mu.Unlock(); return len(w.urgent) + len(w.normal) }
	enqueue := func(name string, urgent bool) {
		want := waiters() + 1
		wg.Go(func() {
			if err := w.lock(ctx, urgent); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			w.unlock()
		})
		for waiters() < want { // queued before the next one arrives
			time.Sleep(time.Millisecond)
		}
	}
	enqueue("n1", false)
	enqueue("n2", false)
	gone, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { left <- w.lock(gone, false) }()
	for waiters() < 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-left; err == nil {
		t.Fatal("a waiter whose context ended got the lock")
	}
	enqueue("u1", true)
	enqueue("n3", false)
	enqueue("u2", true)
	w.unlock()
	wg.Wait()
	want := []string{"u1", "u2", "n1", "n2", "n3"}
	if len(order) != len(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
	if w.busy || len(w.urgent)+len(w.normal) != 0 {
		t.Fatal("the writer is not free at the end")
	}
}
