package ordersvc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse/store"
)

// Metrics are the dispatcher's metrics, lapse_order_commands_*.
type Metrics struct {
	outcomes *prometheus.CounterVec
	handoffs *prometheus.CounterVec
	lag      prometheus.Histogram
	backlog  prometheus.Gauge
	dead     prometheus.Gauge
	oldest   prometheus.Gauge
}

// NewMetrics registers the dispatcher's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m := &Metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_order_commands_total",
			Help: "Sends of cancel commands to the order service, by outcome: the answer (cancelled, already_cancelled, already_paid, paying, not_found), failed (no answer; retried), dead (refused for good, or failing too long), conflict (an answer lapse's record contradicts).",
		}, []string{"result"}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_order_command_handoffs_total",
			Help: "Cancel batches in order-service mode, by whether the dispatcher took their commands as they were written: held (written claimed, sent as the batch commits) or busy (its hand-over full: written unclaimed, sent by a later claim, a transaction and a wait later).",
		}, []string{"outcome"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lapse_order_command_lag_seconds",
			Help:    "From an order's cancel_after to the order service's final answer recorded.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 3600},
		}),
		backlog: gauge("lapse_order_commands_pending", "Cancel commands not yet answered for good (not DEAD)."),
		dead:    gauge("lapse_order_commands_dead", "Cancel commands DEAD now, waiting for an operator (lapse commands retry)."),
		oldest:  gauge("lapse_order_commands_oldest_pending_seconds", "Age of the oldest PENDING cancel command."),
	}
	for _, c := range []prometheus.Collector{m.outcomes, m.handoffs, m.lag, m.backlog, m.dead, m.oldest} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, o := range []string{handoffHeld, handoffBusy} {
		m.handoffs.WithLabelValues(o)
	}
	return m, nil
}

// Outcomes of a Hold, the labels of lapse_order_command_handoffs_total.
const (
	handoffHeld = "held"
	handoffBusy = "busy"
)

func (m *Metrics) observe(cs []store.ClaimedCommand, outcomes []store.CommandOutcome, res store.SettleCommandsResult) {
	for i, o := range outcomes {
		switch {
		case o.Dead && o.Result == "":
			m.outcomes.WithLabelValues(outcomeDead).Inc()
		case o.Result == "":
			m.outcomes.WithLabelValues(outcomeFailed).Inc()
		default:
			m.outcomes.WithLabelValues(o.Result).Inc()
			if Result(o.Result).Final() {
				m.lag.Observe(max(res.Now.Sub(cs[i].CancelAfter).Seconds(), 0))
			}
		}
	}
	if n := len(res.Conflicts); n > 0 {
		m.outcomes.WithLabelValues(outcomeConflict).Add(float64(n))
	}
}

func (m *Metrics) setStats(st store.TaskStats) {
	m.backlog.Set(float64(st.Pending))
	m.dead.Set(float64(st.Dead))
	lag := 0.0
	if !st.OldestPending.IsZero() {
		lag = max(st.Now.Sub(st.OldestPending).Seconds(), 0)
	}
	m.oldest.Set(lag)
}
