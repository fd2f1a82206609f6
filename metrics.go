package lapse

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/refund"
	"github.com/lapsehq/lapse/timer"
)

// timerCounters exports a timer backend's own counters (timer.Counted), read
// at each scrape: the backend keeps them, lapse only shows them.
type timerCounters struct{ c timer.Counted }

func (t timerCounters) desc(c timer.Counter) *prometheus.Desc {
	return prometheus.NewDesc(c.Name, c.Help, nil, nil)
}

func (t timerCounters) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range t.c.Counters() {
		ch <- t.desc(c)
	}
}

func (t timerCounters) Collect(ch chan<- prometheus.Metric) {
	for _, c := range t.c.Counters() {
		ch <- prometheus.MustNewConstMetric(t.desc(c), prometheus.CounterValue, float64(c.Value))
	}
}

// metrics are the Prometheus series of a Service; names are part of the
// public surface (dashboards and alerts depend on them).
type metrics struct {
	gatherer         prometheus.Gatherer
	created          prometheus.Counter
	paid             prometheus.Counter
	cancelled        *prometheus.CounterVec
	refundRequired   prometheus.Counter
	paymentConflicts prometheus.Counter
	// refundNotifications counts the gateways' refund notifications
	// (NotifyRefund) by gateway and outcome (RefundNotified, or error).
	refundNotifications *prometheus.CounterVec
	hookFailures        *prometheus.CounterVec
	// reservationChecks counts caller reservations the inventory did not
	// answer about at create ("unanswered": taken as sent).
	reservationChecks *prometheus.CounterVec
	lateness          prometheus.Histogram
	batches           *prometheus.CounterVec
	batchSize         prometheus.Histogram
	early             prometheus.Counter
	payingAtDeadline  prometheus.Counter
	scheduleErrors    prometheus.Counter
	outbox            *outbox.Metrics
	tasks             *inventory.Metrics // with Config.Inventory
	commands          *ordersvc.Metrics  // with Config.OrderService
	refunds           *refund.Metrics    // with Config.AutoRefund
	retention         *retention         // with Config.Retention on
	sweepCaught       prometheus.Counter
	gatewayChecks     *prometheus.CounterVec
	reminders         prometheus.Counter
	// heard counts deadlines the store told of (store.DueListener);
	// listenLost the times listening for them failed.
	heard      prometheus.Counter
	listenLost prometheus.Counter
	skew       *skewWatch
}

func newMetrics(reg prometheus.Registerer, s *Service) (*metrics, error) {
	var gatherer prometheus.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, gatherer = r, r
	} else if g, ok := reg.(prometheus.Gatherer); ok {
		gatherer = g
	} else {
		gatherer = prometheus.NewRegistry()
	}
	m := &metrics{
		gatherer: gatherer,
		created:  prometheus.NewCounter(prometheus.CounterOpts{Name: "lapse_orders_created_total", Help: "Orders created."}),
		paid:     prometheus.NewCounter(prometheus.CounterOpts{Name: "lapse_orders_paid_total", Help: "Orders moved to PAID."}),
		cancelled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_orders_cancelled_total", Help: "Orders cancelled, by reason (timeout, buyer, operator).",
		}, []string{"reason"}),
		refundRequired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_refund_required_total",
			Help: "Successful payments that could not pay their order (cancelled; in order-service mode, cancelled by the order service after lapse saw it paid; paid by another attempt; another amount or currency): money to give back.",
		}),
		refundNotifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_refund_notifications_total",
			Help: "Refund notifications of the payment gateways, verified, by gateway and outcome (refunded, duplicate, not_owed, partial, failed, unknown_payment, error).",
		}, []string{"gateway", "outcome"}),
		reservationChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_reservation_checks_total",
			Help: "Reads of a caller's reservation at create that the inventory did not answer: the reservation was taken as sent.",
		}, []string{"result"}),
		hookFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_hook_failures_total",
			Help: "Hooks of an embedding service (OnCancelled, OnPaid, OnRefundRequired) that failed: that order's transition was rolled back.",
		}, []string{"event"}),
		paymentConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_payment_conflicts_total",
			Help: "Payment reports refused because they disagree with how their attempt had already ended (counted on the attempt too).",
		}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lapse_cancel_lateness_seconds",
			Help:    "cancelled_at - cancel_after of timeout cancels.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_cancel_batches_total", Help: "Cancel batches run, by result (ok, error).",
		}, []string{"result"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lapse_cancel_batch_size", Help: "Timers per cancel batch.",
			Buckets: []float64{1, 5, 10, 25, 50, 100, 200, 500},
		}),
		early: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_timers_early_total", Help: "Timers delivered before the store's clock reached cancel_after (rescheduled, never cancelled early).",
		}),
		payingAtDeadline: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_timers_paying_total", Help: "Timers that found their order still PAYING (not cancelled blind).",
		}),
		scheduleErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_timer_schedule_errors_total", Help: "Timers that could not be scheduled after their order committed (recovered from the store).",
		}),
		gatewayChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_gateway_checks_total", Help: "Gateway queries before a cancel, by answer (PAID, NOT_PAID, PENDING, CLOSED, payment_unknown, error, close_error).",
		}, []string{"result"}),
		reminders: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_reminders_sent_total", Help: "order.expiring reminders sent (best effort).",
		}),
		sweepCaught: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_sweep_caught_total", Help: "Orders the fallback sweep cancelled: each is a timer the primary backend lost.",
		}),
		heard: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_due_heard_total",
			Help: "Deadlines the store told of as their transactions committed (PostgreSQL NOTIFY), handed to this instance's timers.",
		}),
		listenLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_due_listen_lost_total",
			Help: "Times listening for the store's deadlines failed; each is followed by listening again and planning from the store.",
		}),
		skew: newSkewWatch(s.log),
	}
	stuck := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lapse_payments_stuck",
		Help: "PAYING orders past cancel_after: payments whose outcome lapse is still waiting for.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, err := s.store.CountStuck(ctx)
		if err != nil {
			return -1
		}
		return float64(n)
	})
	for _, c := range []prometheus.Collector{m.created, m.paid, m.cancelled, m.refundRequired, m.paymentConflicts, m.refundNotifications, m.hookFailures, m.reservationChecks, m.lateness,
		m.batches, m.batchSize, m.early, m.payingAtDeadline, m.scheduleErrors, m.sweepCaught, m.gatewayChecks, m.reminders, m.heard, m.listenLost, m.skew.gauge, stuck} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("lapse: register metrics: %w", err)
		}
	}
	if c, ok := s.timers.(timer.Counted); ok {
		if err := reg.Register(timerCounters{c}); err != nil {
			return nil, fmt.Errorf("lapse: register the timer backend's metrics: %w", err)
		}
	}
	om, err := outbox.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("lapse: register outbox metrics: %w", err)
	}
	m.outbox = om
	if s.cfg.Inventory != nil {
		if m.tasks, err = inventory.NewMetrics(reg); err != nil {
			return nil, fmt.Errorf("lapse: register stock task metrics: %w", err)
		}
	}
	if s.cfg.OrderService != nil {
		if m.commands, err = ordersvc.NewMetrics(reg); err != nil {
			return nil, fmt.Errorf("lapse: register order-service command metrics: %w", err)
		}
	}
	if s.cfg.AutoRefund {
		if m.refunds, err = refund.NewMetrics(reg); err != nil {
			return nil, fmt.Errorf("lapse: register refund metrics: %w", err)
		}
	}
	if s.cfg.Retention.on() {
		if m.retention, err = newRetention(s.cfg.Retention, s.cfg.Store, s.log, reg); err != nil {
			return nil, err
		}
		m.retention.attempted = s.cfg.ConfirmAfter + time.Minute
	}
	return m, nil
}
