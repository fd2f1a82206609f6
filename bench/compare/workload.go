package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// workload is N timers due over a window: timer i is due at
// start + lead + i·over/N and is scheduled at start + i·over/N, so every
// timer is scheduled lead before it is due, and timers are scheduled at the
// rate they fall due (N/over per second): the shape of orders arriving at a
// steady rate with a payment window of lead. With over = 0 every timer is
// scheduled at once and all fall due together (a burst).
type workload struct {
	n    int
	over time.Duration
	lead time.Duration
}

// schedAt is when timer i is scheduled, as an offset from the start.
func (w workload) schedAt(i int) time.Duration {
	if w.n <= 1 {
		return 0
	}
	return time.Duration(int64(w.over) * int64(i) / int64(w.n))
}

// dueAt is when timer i falls due, as an offset from the start.
func (w workload) dueAt(i int) time.Duration { return w.lead + w.schedAt(i) }

// scheduledBy is how many timers are to be scheduled by offset d from the start.
func (w workload) scheduledBy(d time.Duration) int {
	if d < 0 {
		return 0
	}
	if w.over <= 0 || w.n <= 1 {
		return w.n
	}
	// The largest i with schedAt(i) <= d, plus one; schedAt is monotonic.
	i := int(int64(d) * int64(w.n) / int64(w.over))
	for i+1 < w.n && w.schedAt(i+1) <= d {
		i++
	}
	for i >= 0 && i < w.n && w.schedAt(i) > d {
		i--
	}
	return min(i+1, w.n)
}

// item is one timer to schedule.
type item struct {
	idx int
	key string
	due time.Time
}

// timerKey is the key (and, for the sql backend, the order id) of timer idx.
func timerKey(run string, idx int) string { return run + "-" + strconv.Itoa(idx) }

// keyIndex is the index in a key made by timerKey, or -1.
func keyIndex(key string) int {
	i := strings.LastIndexByte(key, '-')
	n, err := strconv.Atoi(key[i+1:])
	if err != nil {
		return -1
	}
	return n
}

// recorder keeps, per timer, when it was first delivered and how often.
// Handlers call deliver from any goroutine.
type recorder struct {
	due       []int64        // intended due time, Unix ns
	actualDue []atomic.Int64 // the due time the system itself holds, when it differs (sql: cancel_after); 0: due
	first     []atomic.Int64 // first delivery, Unix ns
	count     []atomic.Int32
	delivered atomic.Int64
	unknown   atomic.Int64 // deliveries of keys this run never scheduled
	done      chan struct{}
}

func newRecorder(n int) *recorder {
	return &recorder{
		due:       make([]int64, n),
		actualDue: make([]atomic.Int64, n),
		first:     make([]atomic.Int64, n),
		count:     make([]atomic.Int32, n),
		done:      make(chan struct{}),
	}
}

// deliver records a delivery of timer idx at at. due, when not zero, is the
// due time the system held for it (lateness is measured against it).
func (r *recorder) deliver(idx int, at time.Time, due time.Time) {
	if idx < 0 || idx >= len(r.count) {
		r.unknown.Add(1)
		return
	}
	if r.count[idx].Add(1) != 1 {
		return
	}
	if !due.IsZero() {
		r.actualDue[idx].Store(due.UnixNano())
	}
	r.first[idx].Store(at.UnixNano())
	if r.delivered.Add(1) == int64(len(r.count)) {
		close(r.done)
	}
}

// stats is what a run measured.
type stats struct {
	Delivered    int     `json:"delivered"`
	Missing      int     `json:"missing"`
	Duplicates   int     `json:"duplicates"`
	Unknown      int     `json:"unknown_deliveries"`
	Early        int     `json:"early"`
	EarliestMs   float64 `json:"most_early_ms"` // how early the earliest early fire was (0: none)
	LateP50Ms    float64 `json:"lateness_p50_ms"`
	LateP99Ms    float64 `json:"lateness_p99_ms"`
	LateMaxMs    float64 `json:"lateness_max_ms"`
	TimersPerSec float64 `json:"timers_per_s"` // delivered / (last delivery − first due or delivery)
	DrainMs      float64 `json:"drain_ms"`     // last delivery − last due
}

// summarize reads the recorder. Lateness is first delivery − due, signed:
// an early fire counts as negative lateness in the percentiles.
func (r *recorder) summarize() stats {
	var s stats
	late := make([]int64, 0, len(r.count))
	firstDue, lastDue := int64(math.MaxInt64), int64(math.MinInt64)
	firstAt, lastAt := int64(math.MaxInt64), int64(math.MinInt64)
	for i := range r.count {
		c := int(r.count[i].Load())
		at := r.first[i].Load()
		if c == 0 || at == 0 {
			s.Missing++
			continue
		}
		s.Delivered++
		s.Duplicates += c - 1
		due := r.due[i]
		if d := r.actualDue[i].Load(); d != 0 {
			due = d
		}
		l := at - due
		late = append(late, l)
		if l < 0 {
			s.Early++
			s.EarliestMs = max(s.EarliestMs, ms(-l))
		}
		firstDue, lastDue = min(firstDue, due), max(lastDue, due)
		firstAt, lastAt = min(firstAt, at), max(lastAt, at)
	}
	s.Unknown = int(r.unknown.Load())
	if len(late) == 0 {
		return s
	}
	slices.Sort(late)
	s.LateP50Ms = ms(percentile(late, 0.50))
	s.LateP99Ms = ms(percentile(late, 0.99))
	s.LateMaxMs = ms(late[len(late)-1])
	// From the first due time (or the first delivery, when it came early) to
	// the last delivery: with due times spread over a window, a system that
	// keeps up shows the rate they fall due; with all due at once, the rate
	// it drains them.
	if span := lastAt - min(firstDue, firstAt); span > 0 {
		s.TimersPerSec = float64(s.Delivered) / (float64(span) / 1e9)
	}
	s.DrainMs = ms(lastAt - lastDue)
	return s
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// feed schedules the workload on sys from start: a pacer hands batches of the
// timers whose time has come to conc goroutines, each calling sys.schedule.
// It returns how many timers were scheduled only after their due time, and
// the first scheduling error with the count of timers whose call failed.
func feed(ctx context.Context, sys system, w workload, start time.Time, items []item, conc int) (late int, failed int, err error) {
	work := make(chan []item, conc)
	var (
		mu       sync.Mutex
		firstErr error
		nLate    atomic.Int64
		nFailed  atomic.Int64
		wg       sync.WaitGroup
	)
	for range conc {
		wg.Go(func() {
			for batch := range work {
				if ctx.Err() != nil {
					nFailed.Add(int64(len(batch)))
					continue
				}
				if err := sys.schedule(ctx, batch); err != nil {
					nFailed.Add(int64(len(batch)))
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				now := time.Now()
				for _, it := range batch {
					if !now.Before(it.due) {
						nLate.Add(1)
					}
				}
			}
		})
	}
	size := max(sys.batch(), 1)
	const tick = 5 * time.Millisecond
	next := 0
	for next < len(items) && ctx.Err() == nil {
		upto := w.scheduledBy(time.Since(start))
		for next < upto {
			end := min(next+size, upto)
			select {
			case work <- items[next:end]:
				next = end
			case <-ctx.Done():
				upto = next
			}
		}
		if next < len(items) {
			wait := time.Until(start.Add(w.schedAt(next)))
			select {
			case <-time.After(max(min(wait, tick), 0)):
			case <-ctx.Done():
			}
		}
	}
	close(work)
	wg.Wait()
	failed = int(nFailed.Load()) + len(items) - next
	if firstErr == nil && failed > 0 {
		firstErr = fmt.Errorf("scheduling stopped: %w", ctx.Err())
	}
	return int(nLate.Load()), failed, firstErr
}
