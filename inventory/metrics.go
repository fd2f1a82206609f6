package inventory

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse/store"
)

// Metrics are the dispatcher's metrics (label action: reserve, release, confirm).
type Metrics struct {
	sent    *prometheus.CounterVec
	failed  *prometheus.CounterVec
	died    *prometheus.CounterVec
	lag     *prometheus.HistogramVec
	backlog prometheus.Gauge
	dead    prometheus.Gauge
	oldest  prometheus.Gauge
}

// NewMetrics registers the dispatcher's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"action"})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m := &Metrics{
		sent:    counter("lapse_stock_tasks_done_total", "Stock tasks the inventory applied (REPLENISH_SUCCESS or ALREADY_DONE)."),
		failed:  counter("lapse_stock_task_failures_total", "Sends of stock tasks that failed (no answer, an error, or REJECTED)."),
		died:    counter("lapse_stock_tasks_dead_total", "Stock tasks that became DEAD: rejected, or failing for too long; `lapse tasks retry` sends them again."),
		backlog: gauge("lapse_stock_tasks_pending", "Stock tasks not yet applied by the inventory (not DEAD)."),
		dead:    gauge("lapse_stock_tasks_dead", "Stock tasks DEAD now, waiting for an operator."),
		oldest:  gauge("lapse_stock_task_lag_seconds", "Age of the oldest PENDING stock task."),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lapse_stock_task_seconds", Help: "From a stock task's commit to the inventory's answer that applied it.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 3600},
		}, []string{"action"}),
	}
	for _, c := range []prometheus.Collector{m.sent, m.failed, m.died, m.backlog, m.dead, m.oldest, m.lag} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observe(ts []store.ClaimedTask, outcomes []store.TaskOutcome, at time.Time) {
	for i, o := range outcomes {
		action := string(ts[i].Action)
		switch {
		case o.Done:
			m.sent.WithLabelValues(action).Inc()
			m.lag.WithLabelValues(action).Observe(max(at.Sub(ts[i].CreatedAt).Seconds(), 0))
		case o.Dead:
			m.failed.WithLabelValues(action).Inc()
			m.died.WithLabelValues(action).Inc()
		default:
			m.failed.WithLabelValues(action).Inc()
		}
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
