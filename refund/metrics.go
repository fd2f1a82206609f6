package refund

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse/store"
)

// Metrics are the dispatcher's metrics, lapse_refunds_*.
type Metrics struct {
	outcomes *prometheus.CounterVec
	pending  prometheus.Gauge
	dead     prometheus.Gauge
}

// NewMetrics registers the dispatcher's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_refunds_total",
			Help: "Refunds asked of the gateway (--auto-refund), by outcome: refunded, failed (retried), dead (an operator must look), stale (another claim holds it), conflict (refunded, but the attempt did not owe money in lapse's record).",
		}, []string{"result"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "lapse_refunds_pending", Help: "Refund tasks not yet refunded (not DEAD)."}),
		dead:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "lapse_refunds_dead", Help: "Refund tasks DEAD now, waiting for an operator (lapse refunds retry, or marked refunded by hand)."}),
	}
	for _, c := range []prometheus.Collector{m.outcomes, m.pending, m.dead} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{"refunded", "failed", "dead", "stale", "conflict"} {
		m.outcomes.WithLabelValues(r)
	}
	return m, nil
}

func (m *Metrics) observe(outcomes []store.RefundOutcome, res store.SettleRefundsResult) {
	for _, o := range outcomes {
		switch {
		case o.Done:
			m.outcomes.WithLabelValues("refunded").Inc()
		case o.Dead:
			m.outcomes.WithLabelValues("dead").Inc()
		default:
			m.outcomes.WithLabelValues("failed").Inc()
		}
	}
	m.outcomes.WithLabelValues("stale").Add(float64(len(res.Stale)))
	m.outcomes.WithLabelValues("conflict").Add(float64(len(res.Conflicts)))
}

// RunStats refreshes the backlog gauges from st every interval until ctx
// ends.
func (m *Metrics) RunStats(ctx context.Context, st store.Refunds, interval time.Duration) {
	for {
		if s, err := st.RefundStats(ctx); err == nil {
			m.pending.Set(float64(s.Pending))
			m.dead.Set(float64(s.Dead))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
