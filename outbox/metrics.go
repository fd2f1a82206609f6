package outbox

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Metrics are the relay's per-sink metrics (label sink).
type Metrics struct {
	lag       *prometheus.GaugeVec
	backlog   *prometheus.GaugeVec
	dead      *prometheus.GaugeVec
	blocked   *prometheus.GaugeVec
	disabled  *prometheus.GaugeVec
	published *prometheus.CounterVec
	errors    *prometheus.CounterVec
	refused   *prometheus.CounterVec
	died      *prometheus.CounterVec
	delivery  *prometheus.HistogramVec
	yielded   *prometheus.CounterVec
}

// NewMetrics registers the relay's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"sink"})
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"sink"})
	}
	m := &Metrics{
		lag:       gauge("lapse_outbox_lag_seconds", "Age of the oldest event not yet published to the sink (not dead)."),
		backlog:   gauge("lapse_outbox_backlog", "Events waiting for the sink (not dead), fanned out or not."),
		dead:      gauge("lapse_outbox_dead", "Events dead for the sink: refused for good or for too long; `lapse events retry` sends them again."),
		blocked:   gauge("lapse_outbox_blocked", "Events waiting behind a dead event of their order for the sink."),
		disabled:  gauge("lapse_outbox_sink_disabled", "1 when the sink's destination answered 410 Gone and the relay stopped publishing to it."),
		published: counter("lapse_outbox_published_total", "Events the sink confirmed."),
		errors:    counter("lapse_outbox_publish_errors_total", "Events a publish attempt did not deliver (refused or failed)."),
		refused:   counter("lapse_outbox_refused_total", "Events the sink's destination refused."),
		died:      counter("lapse_outbox_dead_total", "Events that became dead for the sink."),
		yielded:   counter("lapse_outbox_yield_seconds_total", "Time the sink's relay workers held their claims back while a burst of due orders was being cancelled (Config.Yield), summed over workers."),
		delivery: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lapse_outbox_delivery_seconds", Help: "From an event's commit to the sink's confirmation.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 3600},
		}, []string{"sink"}),
	}
	for _, c := range []prometheus.Collector{m.lag, m.backlog, m.dead, m.blocked, m.disabled, m.published, m.errors, m.refused, m.died, m.delivery, m.yielded} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Disabled is the gauge that says sink was disabled by a 410 Gone.
func (m *Metrics) Disabled(sink string) prometheus.Gauge {
	return m.disabled.WithLabelValues(sink)
}

func (m *Metrics) observe(sink string, outcomes []store.Outcome, delivered []order.Event, at time.Time) {
	m.published.WithLabelValues(sink).Add(float64(len(delivered)))
	h := m.delivery.WithLabelValues(sink)
	for _, e := range delivered {
		h.Observe(at.Sub(e.CreatedAt).Seconds())
	}
	for _, o := range outcomes {
		if o.Delivered {
			continue
		}
		m.errors.WithLabelValues(sink).Inc()
		if o.Refused {
			m.refused.WithLabelValues(sink).Inc()
		}
		if o.Dead {
			m.died.WithLabelValues(sink).Inc()
		}
	}
}

func (m *Metrics) setStats(st store.OutboxStats) {
	for _, s := range st.Sinks {
		oldest := s.Oldest
		if !st.OldestUnfanned.IsZero() && (oldest.IsZero() || st.OldestUnfanned.Before(oldest)) {
			oldest = st.OldestUnfanned
		}
		lag := 0.0
		if !oldest.IsZero() {
			lag = max(st.Now.Sub(oldest).Seconds(), 0)
		}
		m.lag.WithLabelValues(s.Sink).Set(lag)
		m.backlog.WithLabelValues(s.Sink).Set(float64(s.Pending + st.Unfanned))
		m.dead.WithLabelValues(s.Sink).Set(float64(s.Dead))
		m.blocked.WithLabelValues(s.Sink).Set(float64(s.Blocked))
	}
}

// Yielded is the counter of the time sink's workers held their claims back
// for a burst of cancels (Config.Yield).
func (m *Metrics) Yielded(sink string) prometheus.Counter {
	return m.yielded.WithLabelValues(sink)
}
