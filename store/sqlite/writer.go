package sqlite

import (
	"context"
	"slices"
	"sync"
)

// writer hands SQLite's single write connection to one transaction at a
// time, timeout cancels first, the rest in arrival order.
//
// Without it every writer queues inside database/sql, which gives a freed
// connection to any waiter: under a flood of creates a cancel batch could wait
// behind all of them, and that wait is the cancel's lateness. Measured with
// `lapse bench --rate 1000 --duration 10s --timeout 2s` (see docs/measured.md).
type writer struct {
	mu     sync.Mutex
	busy   bool
	urgent []chan struct{}
	normal []chan struct{}
}

// lock waits for the write connection; urgent waiters go before the others.
func (w *writer) lock(ctx context.Context, urgent bool) error {
	w.mu.Lock()
	if !w.busy {
		w.busy = true
		w.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	if urgent {
		w.urgent = append(w.urgent, ch)
	} else {
		w.normal = append(w.normal, ch)
	}
	w.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		defer w.mu.Unlock()
		select {
		case <-ch: // handed over as the context ended: pass it on
			w.handOff()
		default:
			w.urgent = slices.DeleteFunc(w.urgent, func(c chan struct{}) bool { return c == ch })
			w.normal = slices.DeleteFunc(w.normal, func(c chan struct{}) bool { return c == ch })
		}
		return ctx.Err()
	}
}

// unlock hands the write connection to the next waiter.
func (w *writer) unlock() {
	w.mu.Lock()
	w.handOff()
	w.mu.Unlock()
}

// handOff passes the lock on; call under w.mu.
func (w *writer) handOff() {
	switch {
	case len(w.urgent) > 0:
		close(w.urgent[0])
		w.urgent = w.urgent[1:]
	case len(w.normal) > 0:
		close(w.normal[0])
		w.normal = w.normal[1:]
	default:
		w.busy = false
	}
}
