package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/store"
)

// RelayProbe records what the outbox relay delivered during a run: each
// event's lag from its commit to the sink's confirmation. Set its
// OnDelivered as the relay's outbox.Config.OnDelivered.
type RelayProbe struct {
	mu    sync.Mutex
	sinks map[string]*relaySeen
	order []string
}

type relaySeen struct {
	lags        []float64 // ms
	first, last time.Time
}

// OnDelivered implements the relay's hook.
func (p *RelayProbe) OnDelivered(sink string, evs []order.Event, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sinks == nil {
		p.sinks = map[string]*relaySeen{}
	}
	s := p.sinks[sink]
	if s == nil {
		s = &relaySeen{first: at}
		p.sinks[sink] = s
		p.order = append(p.order, sink)
	}
	for _, e := range evs {
		s.lags = append(s.lags, float64(at.Sub(e.CreatedAt).Microseconds())/1000)
	}
	s.last = at
}

// Delivered counts the events delivered to sink so far.
func (p *RelayProbe) Delivered(sink string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.sinks[sink]; s != nil {
		return len(s.lags)
	}
	return 0
}

// RelayResult is one sink's deliveries in a run.
type RelayResult struct {
	Sink string `json:"sink"`
	// Events counts events the sink confirmed (a redelivery counts again).
	Events int `json:"events"`
	// PerS is Events over the time from the first confirmation to the last.
	PerS float64 `json:"events_per_s"`
	// LagMS is from each event's commit (its created_at, the store's clock)
	// to the sink's confirmation.
	LagMS Percentiles `json:"lag_ms"`
	// DrainPerS, in a drain measurement, is the rate at which the relay
	// emptied a backlog; RawPerS the rate of a plain publisher to the same
	// broker measured in the same run, with confirms, same message size.
	DrainEvents int     `json:"drain_events,omitempty"`
	DrainPerS   float64 `json:"drain_per_s,omitempty"`
	RawPerS     float64 `json:"raw_per_s,omitempty"`
	RawError    string  `json:"raw_error,omitempty"`
}

// Results returns each sink's deliveries, in the order sinks first delivered.
func (p *RelayProbe) Results() []RelayResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]RelayResult, 0, len(p.order))
	for _, name := range p.order {
		s := p.sinks[name]
		r := RelayResult{Sink: name, Events: len(s.lags), LagMS: percentiles(s.lags)}
		if d := s.last.Sub(s.first).Seconds(); d > 0 {
			r.PerS = float64(len(s.lags)) / d
		}
		out = append(out, r)
	}
	return out
}

// WaitRelayed waits until the store holds no event waiting for any of
// sinks (not fanned out, or pending for one of them), or until timeout; it
// says how many are left. Sinks other relays registered on the same
// database are not waited for.
func WaitRelayed(ctx context.Context, st store.Outbox, sinks []string, timeout time.Duration) (int64, error) {
	deadline := time.Now().Add(timeout)
	for {
		stats, err := st.OutboxStats(ctx)
		if err != nil {
			return 0, fmt.Errorf("bench: read the outbox: %w", err)
		}
		left := stats.Unfanned
		for _, s := range stats.Sinks {
			if slices.Contains(sinks, s.Sink) {
				left += s.Pending
			}
		}
		if left == 0 || time.Now().After(deadline) {
			return left, nil
		}
		select {
		case <-ctx.Done():
			return left, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// DrainRelay measures how fast a relay empties a backlog into sink: it
// waits until backlog events wait in st (the caller wrote them with no relay
// running), runs a relay with cfg until the sink has them all, and returns
// events per second.
func DrainRelay(ctx context.Context, st store.Outbox, sink outbox.Sink, cfg outbox.Config, backlog int, timeout time.Duration) (float64, error) {
	probe := &RelayProbe{}
	cfg.OnDelivered = probe.OnDelivered
	r := &outbox.Relay{Store: st, Sinks: []outbox.Sink{sink}, Config: cfg}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	deadline := start.Add(timeout)
	for probe.Delivered(sink.Name()) < backlog {
		if time.Now().After(deadline) {
			stop()
			<-done
			return 0, fmt.Errorf("bench: the relay delivered %d of %d events in %s", probe.Delivered(sink.Name()), backlog, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	stop()
	<-done
	return float64(backlog) / took.Seconds(), nil
}
