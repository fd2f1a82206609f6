package nats

import (
	"container/heap"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse/timer"
)

// hold keeps fired timers, leased, until their due time. The server fires a
// timer Config.Lead before it is due (its own schedule tick is 250 ms), so
// the lateness is this process's timer's, not the server's tick.
type hold struct {
	ackWait time.Duration
	log     *slog.Logger

	mu    sync.Mutex
	items heldHeap
	keys  map[string]int // held items per key, so drop skips most calls
	// tombs are the keys unscheduled lately: a timer of one that was
	// already fired and on its way here (pulled, not yet held) is dropped
	// when it arrives. A Schedule of the key lifts its tomb.
	tombs map[string]time.Time
	wake  chan struct{} // a new item, or room
}

type heldItem struct {
	m   jetstream.Msg
	t   timer.Timer
	seq uint64 // the fired message's stream sequence
	// at is when to hand it over: its due time, or at once when it came
	// much earlier than any lead explains (the service reschedules an
	// early timer; holding it would only crowd out the others).
	at time.Time
}

type heldHeap []heldItem

func (h heldHeap) Len() int           { return len(h) }
func (h heldHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h heldHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)        { *h = append(*h, x.(heldItem)) }
func (h *heldHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

func newHold(ackWait time.Duration, log *slog.Logger) *hold {
	return &hold{ackWait: ackWait, log: log, wake: make(chan struct{}, 1), keys: map[string]int{}, tombs: map[string]time.Time{}}
}

// holdSlack is how much earlier than its lead a timer may arrive and still
// be held (a server tick, clock differences); earlier ones go at once.
const holdSlack = 2 * time.Second

func (h *hold) add(m jetstream.Msg, t timer.Timer, lead time.Duration) {
	at := t.Due
	if time.Until(at) > max(lead, 0)+holdSlack {
		at = time.Now()
	}
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	h.mu.Lock()
	if at, ok := h.tombs[t.Key]; ok {
		if time.Since(at) < tombLife {
			h.mu.Unlock()
			if err := m.Ack(); err != nil {
				h.log.Debug("nats timers: acknowledge an unscheduled timer failed", "err", err)
			}
			return
		}
		delete(h.tombs, t.Key)
	}
	heap.Push(&h.items, heldItem{m: m, t: t, at: at, seq: seq})
	h.keys[t.Key]++
	h.mu.Unlock()
	h.signal()
}

func (h *hold) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// tombLife is how long an Unschedule keeps dropping the key's timers that
// were fired before it: longer than a fired timer can take to be pulled.
const tombLife = 30 * time.Second

// bury records that key was unscheduled (see tombs), and forgets tombs
// past tombLife.
func (h *hold) bury(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if len(h.tombs) > 1024 {
		for k, at := range h.tombs {
			if now.Sub(at) >= tombLife {
				delete(h.tombs, k)
			}
		}
	}
	h.tombs[key] = now
}

// unbury lifts key's tomb: it was scheduled again.
func (h *hold) unbury(key string) {
	h.mu.Lock()
	delete(h.tombs, key)
	h.mu.Unlock()
}

// drop removes the held timers of key fired before stream sequence before
// (a Schedule that replaced them, or an Unschedule) and acknowledges them:
// their subject was purged or superseded.
func (h *hold) drop(key string, before uint64) {
	h.mu.Lock()
	if h.keys[key] == 0 {
		h.mu.Unlock()
		return
	}
	var gone []jetstream.Msg
	kept := h.items[:0]
	for _, it := range h.items {
		if it.t.Key == key && it.seq < before {
			gone = append(gone, it.m)
			h.forget(key)
			continue
		}
		kept = append(kept, it)
	}
	h.items = kept
	heap.Init(&h.items)
	h.mu.Unlock()
	for _, m := range gone {
		if err := m.Ack(); err != nil {
			h.log.Debug("nats timers: acknowledge a superseded timer failed", "err", err)
		}
	}
}

// forget counts one item of key gone; h.mu is held.
func (h *hold) forget(key string) {
	if h.keys[key]--; h.keys[key] <= 0 {
		delete(h.keys, key)
	}
}

// next waits until at least one held timer is due and returns the due ones,
// at most n, earliest first; nothing once ctx ends.
func (h *hold) next(ctx context.Context, n int) ([]jetstream.Msg, []timer.Timer) {
	for {
		h.mu.Lock()
		now := time.Now()
		if len(h.items) > 0 && !h.items[0].at.After(now) {
			var msgs []jetstream.Msg
			var ts []timer.Timer
			for len(h.items) > 0 && len(msgs) < n && !h.items[0].at.After(now) {
				it := heap.Pop(&h.items).(heldItem)
				h.forget(it.t.Key)
				msgs, ts = append(msgs, it.m), append(ts, it.t)
			}
			h.mu.Unlock()
			h.signal() // room for the puller
			return msgs, ts
		}
		wait := time.Hour
		if len(h.items) > 0 {
			wait = h.items[0].at.Sub(now)
		}
		h.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-h.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// waitRoom waits until fewer than limit timers are held; false once ctx
// ends.
func (h *hold) waitRoom(ctx context.Context, limit int) bool {
	for {
		h.mu.Lock()
		n := len(h.items)
		h.mu.Unlock()
		if n < limit {
			return ctx.Err() == nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-h.wake:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// keepLeases tells the server every AckWait/3 that the held timers are
// still wanted, until ctx ends.
func (h *hold) keepLeases(ctx context.Context) {
	tick := time.NewTicker(h.ackWait / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		h.mu.Lock()
		msgs := make([]jetstream.Msg, len(h.items))
		for i, it := range h.items {
			msgs[i] = it.m
		}
		h.mu.Unlock()
		for _, m := range msgs {
			if err := m.InProgress(); err != nil && ctx.Err() == nil {
				h.log.Warn("nats timers: extend the lease of a held timer failed", "err", err)
				break
			}
		}
	}
}

// release hands back the timers not delivered (Run is ending): a nak with
// no delay gives them to another instance at once, instead of after
// AckWait.
func (h *hold) release() {
	h.mu.Lock()
	items := h.items
	h.items = nil
	clear(h.keys)
	h.mu.Unlock()
	for _, it := range items {
		if err := it.m.Nak(); err != nil {
			h.log.Debug("nats timers: hand back a held timer failed; it is delivered again after AckWait", "err", err)
		}
	}
}
