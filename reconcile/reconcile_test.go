package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/reconcile"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/sqlite"
)

// The range under reconciliation: [from, to).
var (
	from = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	to   = from.Add(24 * time.Hour)
)

// world is a real SQLite store and a mock gateway, filled through their own
// methods, plus what the tests expect to be found.
type world struct {
	t     *testing.T
	ctx   context.Context
	clk   *clock.Fake
	store *sqlite.Store
	mock  *payment.Mock
	gw    *payment.HTTPGateway
	// extra statement lines beyond the mock's trades (what the query API
	// cannot show: payments of orders lapse does not have, double charges).
	extraStatement []string
	want           []string // "kind order_id", sorted
	wantRefunds    []string
	inRange        []string
	outOfRange     []string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	clk := clock.NewFake(from)
	s, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "lapse.db"), Clock: clk, Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetStock(ctx, "sku", 1000); err != nil {
		t.Fatal(err)
	}
	m := payment.NewMock(payment.MockConfig{}) // no CallbackURL: lapse is never called back
	srv := httptest.NewServer(m)
	t.Cleanup(func() { srv.Close(); m.Close() })
	gw, err := payment.NewHTTPGateway(srv.URL, payment.HTTPConfig{Retries: -1, BreakerFailures: -1})
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, ctx: ctx, clk: clk, store: s, mock: m, gw: gw}
}

// create makes an order at the clock's time and moves the clock on a second.
func (w *world) create(id string, amount int64) {
	w.t.Helper()
	_, err := w.store.CreateOrder(w.ctx, store.CreateOrderParams{
		ID: id, Items: []order.Item{{SKU: "sku", Qty: 1}}, AmountCents: amount, Currency: "EUR",
		Timeout: 15 * time.Minute, Grace: time.Minute,
	})
	if err != nil {
		w.t.Fatalf("create %s: %v", id, err)
	}
	if now := w.clk.Now(); !now.Before(from) && now.Before(to) {
		w.inRange = append(w.inRange, id)
	} else {
		w.outOfRange = append(w.outOfRange, id)
	}
	w.clk.Advance(time.Second)
}

func (w *world) startPayment(id string) {
	w.t.Helper()
	if _, err := w.store.StartPayment(w.ctx, store.StartPaymentParams{OrderID: id}); err != nil {
		w.t.Fatalf("start payment %s: %v", id, err)
	}
}

// paid has lapse learn of a successful payment (the callback).
func (w *world) paid(id, paymentID string, amount int64, want store.PaymentOutcome) {
	w.t.Helper()
	res, err := w.store.CompletePayment(w.ctx, store.PaymentParams{OrderID: id, PaymentID: paymentID, AmountCents: amount})
	if err != nil || res.Outcome != want {
		w.t.Fatalf("complete payment %s: %v, outcome %v, want %v", id, err, res.Outcome, want)
	}
}

// failed has the gateway report the current attempt of id failed.
func (w *world) failed(id string) {
	w.t.Helper()
	o, err := w.store.GetOrder(w.ctx, id)
	if err != nil {
		w.t.Fatal(err)
	}
	if res, err := w.store.FailPayment(w.ctx, store.PaymentParams{OrderID: id, PaymentID: o.PaymentID}); err != nil || res.Outcome != store.OutcomeFailed {
		w.t.Fatalf("fail payment %s: %v, %v", id, err, res.Outcome)
	}
}

func (w *world) cancel(id string) {
	w.t.Helper()
	if _, err := w.store.CancelOrder(w.ctx, id); err != nil {
		w.t.Fatalf("cancel %s: %v", id, err)
	}
}

// gatewayPay has the buyer pay at the gateway.
func (w *world) gatewayPay(id string, amount int64, outcome, paymentID string) {
	w.t.Helper()
	if _, err := w.mock.Pay(id, amount, outcome, paymentID); err != nil {
		w.t.Fatalf("gateway pay %s: %v", id, err)
	}
}

func (w *world) gatewayClose(id string) {
	w.t.Helper()
	if err := w.gw.Close(w.ctx, id); err != nil {
		w.t.Fatalf("gateway close %s: %v", id, err)
	}
}

func (w *world) expect(kind reconcile.Kind, id string) {
	w.want = append(w.want, string(kind)+" "+id)
}

// cleanOrders plants orders on which lapse and the gateway agree.
func (w *world) cleanOrders() {
	// Created exactly at From: in the range.
	w.create("clean-paid", 1000)
	w.startPayment("clean-paid")
	w.gatewayPay("clean-paid", 1000, payment.OutcomeSucceeded, "pay-clean")
	w.paid("clean-paid", "pay-clean", 1000, store.OutcomePaid)

	w.create("clean-pending", 1000) // never paid: the gateway never saw it

	w.create("clean-cancelled", 2000)
	w.cancel("clean-cancelled")

	// A failed attempt, then the timeout: the trade was closed, the order cancelled.
	w.create("clean-closed", 1500)
	w.startPayment("clean-closed")
	w.gatewayPay("clean-closed", 1500, payment.OutcomeFailed, "")
	w.failed("clean-closed")
	w.gatewayClose("clean-closed")
	w.cancel("clean-closed")

	// A payment that arrived after the cancel, already flagged by lapse.
	w.create("known-refund", 900)
	w.cancel("known-refund")
	w.gatewayPay("known-refund", 900, payment.OutcomeSucceeded, "pay-late")
	w.paid("known-refund", "pay-late", 900, store.OutcomeRefundRequired)
	w.wantRefunds = append(w.wantRefunds, "known_refund known-refund")
}

// plant fills the world with one order per mismatch kind, clean orders, and
// orders outside the range that would be mismatches inside it.
func (w *world) plant() {
	// Before the range: cancelled, then paid at the gateway. Not reported.
	w.clk.Set(from.Add(-time.Hour))
	w.create("old-cancelled-paid", 1000)
	w.cancel("old-cancelled-paid")
	w.gatewayPay("old-cancelled-paid", 1000, payment.OutcomeSucceeded, "pay-old")

	w.clk.Set(from)
	w.cleanOrders()

	w.create("cancelled-paid", 1000)
	w.cancel("cancelled-paid")
	w.gatewayPay("cancelled-paid", 1000, payment.OutcomeSucceeded, "pay-cp")
	w.expect(reconcile.KindCancelledButPaid, "cancelled-paid")

	w.create("amount", 1000)
	w.startPayment("amount")
	w.paid("amount", "pay-amount", 1000, store.OutcomePaid)
	w.gatewayPay("amount", 1200, payment.OutcomeSucceeded, "pay-amount")
	w.expect(reconcile.KindAmountMismatch, "amount")

	w.create("payment-id", 1000)
	w.startPayment("payment-id")
	w.paid("payment-id", "pay-lapse", 1000, store.OutcomePaid)
	w.gatewayPay("payment-id", 1000, payment.OutcomeSucceeded, "pay-gateway")
	w.expect(reconcile.KindPaymentIDMismatch, "payment-id")

	w.create("paid-not-at-gateway", 1000)
	w.startPayment("paid-not-at-gateway")
	w.paid("paid-not-at-gateway", "pay-ghost", 1000, store.OutcomePaid)
	w.gatewayPay("paid-not-at-gateway", 1000, payment.OutcomeFailed, "")
	w.expect(reconcile.KindPaidButNotAtGateway, "paid-not-at-gateway")

	w.create("paid-closed-at-gateway", 1000)
	w.startPayment("paid-closed-at-gateway")
	w.paid("paid-closed-at-gateway", "pay-ghost-2", 1000, store.OutcomePaid)
	w.gatewayClose("paid-closed-at-gateway")
	w.expect(reconcile.KindPaidButNotAtGateway, "paid-closed-at-gateway")

	w.create("paid-never-seen", 1000) // lapse PAID; the gateway never heard of it
	w.startPayment("paid-never-seen")
	w.paid("paid-never-seen", "pay-ghost-3", 1000, store.OutcomePaid)
	w.expect(reconcile.KindPaidButNotAtGateway, "paid-never-seen")

	w.create("refund-not-at-gateway", 1000)
	w.cancel("refund-not-at-gateway")
	w.paid("refund-not-at-gateway", "pay-ghost-4", 1000, store.OutcomeRefundRequired)
	w.expect(reconcile.KindPaidButNotAtGateway, "refund-not-at-gateway")

	w.create("paid-open", 1000) // the callback was lost
	w.startPayment("paid-open")
	w.gatewayPay("paid-open", 1000, payment.OutcomeSucceeded, "pay-open")
	w.expect(reconcile.KindPaidButOpen, "paid-open")

	w.create("cancelled-pending", 1000)
	w.cancel("cancelled-pending")
	w.gatewayPay("cancelled-pending", 1000, payment.OutcomePending, "pay-pending")
	w.expect(reconcile.KindCancelledButPending, "cancelled-pending")

	// Statement only: a payment lapse never heard of, and a double charge.
	w.extraStatement = append(w.extraStatement, "ghost,pay-ghost,PAID,4200", "double,pay-d2,SUCCEEDED,1000")
	w.create("double", 1000)
	w.startPayment("double")
	w.gatewayPay("double", 1000, payment.OutcomeSucceeded, "pay-d1")
	w.paid("double", "pay-d1", 1000, store.OutcomePaid)

	// Exactly at To, after the range: lapse PAID, the gateway never saw it. Not reported.
	w.clk.Set(to)
	w.create("new-paid-never-seen", 1000)
	w.startPayment("new-paid-never-seen")
	w.paid("new-paid-never-seen", "pay-new", 1000, store.OutcomePaid)
}

func (w *world) statement() string {
	w.t.Helper()
	var b bytes.Buffer
	if err := w.mock.WriteStatement(&b); err != nil {
		w.t.Fatal(err)
	}
	for _, l := range w.extraStatement {
		b.WriteString(l + "\n")
	}
	return b.String()
}

func found(ms []reconcile.Mismatch) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, string(m.Kind)+" "+m.OrderID)
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	if s == nil {
		s = []string{}
	}
	slices.Sort(s)
	return s
}

func wantExactly(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got  %q\n want %q", what, got, want)
	}
}

func TestEveryPlantedMismatchIsFound(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.plant()
	stmt := w.statement()
	if got := w.mock.Stats().Queries; got != 0 {
		t.Fatalf("planting queried the gateway %d times", got)
	}

	t.Run("from the query API", func(t *testing.T) {
		rep, err := reconcile.Run(w.ctx, reconcile.Params{Orders: w.store, Gateway: w.gw, From: from, To: to, Concurrency: 4, PageSize: 3})
		if err != nil {
			t.Fatal(err)
		}
		wantExactly(t, "mismatches", found(rep.Mismatches), sorted(w.want))
		wantExactly(t, "known refunds", found(rep.KnownRefunds), sorted(w.wantRefunds))
		if len(rep.Errors) != 0 || rep.OK() {
			t.Errorf("errors %v, OK %v; want no errors and not OK", rep.Errors, rep.OK())
		}
		if rep.Orders != len(w.inRange) || rep.GatewayRecords != len(w.inRange) || rep.Source != "gateway" {
			t.Errorf("report counts: %d orders, %d records, source %s; want %d, %d, gateway", rep.Orders, rep.GatewayRecords, rep.Source, len(w.inRange), len(w.inRange))
		}
		// One query per order of the range, none for the others.
		for _, id := range w.inRange {
			if n := w.mock.OrderStats(id).Queries; n != 1 {
				t.Errorf("%s queried %d times, want 1", id, n)
			}
		}
		for _, id := range w.outOfRange {
			if n := w.mock.OrderStats(id).Queries; n != 0 {
				t.Errorf("%s, outside the range, queried %d times", id, n)
			}
		}
		checkFields(t, rep)
	})

	t.Run("from a statement", func(t *testing.T) {
		rep, err := reconcile.Run(w.ctx, reconcile.Params{Orders: w.store, Statement: strings.NewReader(stmt), From: from, To: to, PageSize: 3})
		if err != nil {
			t.Fatal(err)
		}
		want := append(slices.Clone(w.want),
			string(reconcile.KindUnknownToLapse)+" ghost",
			string(reconcile.KindDuplicatePayment)+" double")
		wantExactly(t, "mismatches", found(rep.Mismatches), sorted(want))
		wantExactly(t, "known refunds", found(rep.KnownRefunds), sorted(w.wantRefunds))
		if rep.Orders != len(w.inRange) || rep.Source != "statement" {
			t.Errorf("report: %d orders, source %s; want %d, statement", rep.Orders, rep.Source, len(w.inRange))
		}
		if rep.Ignored != 1 { // old-cancelled-paid
			t.Errorf("ignored %d, want 1 (the order before the range)", rep.Ignored)
		}
		checkFields(t, rep)
		for _, m := range rep.Mismatches {
			switch m.Kind {
			case reconcile.KindUnknownToLapse:
				if m.LapseStatus != "" || m.GatewayAmount != 4200 || m.PaymentID != "pay-ghost" {
					t.Errorf("unknown_to_lapse row %+v", m)
				}
			case reconcile.KindDuplicatePayment:
				if m.PaymentID != "pay-d2" || !strings.Contains(m.Detail, "pay-d1") {
					t.Errorf("duplicate_payment row %+v", m)
				}
			}
		}
	})

	t.Run("without a range, every order is compared", func(t *testing.T) {
		rep, err := reconcile.Run(w.ctx, reconcile.Params{Orders: w.store, Statement: strings.NewReader(stmt)})
		if err != nil {
			t.Fatal(err)
		}
		got := found(rep.Mismatches)
		for _, extra := range []string{"cancelled_but_paid old-cancelled-paid", "paid_but_not_at_gateway new-paid-never-seen"} {
			if !slices.Contains(got, extra) {
				t.Errorf("mismatches %q lack %q", got, extra)
			}
		}
		if rep.Orders != len(w.inRange)+len(w.outOfRange) {
			t.Errorf("%d orders compared, want %d", rep.Orders, len(w.inRange)+len(w.outOfRange))
		}
	})
}

// checkFields spot-checks the columns of a few rows.
func checkFields(t *testing.T, rep reconcile.Report) {
	t.Helper()
	for _, m := range rep.Mismatches {
		switch m.OrderID {
		case "amount":
			if m.LapseStatus != order.Paid || m.LapseAmount != 1000 || m.GatewayStatus != payment.StatePaid || m.GatewayAmount != 1200 || m.PaymentID != "pay-amount" {
				t.Errorf("amount row %+v", m)
			}
		case "cancelled-paid":
			if m.LapseStatus != order.Cancelled || m.GatewayStatus != payment.StatePaid || m.PaymentID != "pay-cp" || m.Detail == "" {
				t.Errorf("cancelled-paid row %+v", m)
			}
		case "paid-closed-at-gateway":
			if m.GatewayStatus != payment.StateClosed || m.PaymentID != "pay-ghost-2" {
				t.Errorf("paid-closed-at-gateway row %+v", m)
			}
		}
	}
	if len(rep.KnownRefunds) == 1 {
		if r := rep.KnownRefunds[0]; r.LapseStatus != order.Cancelled || r.PaymentID != "pay-late" || r.GatewayAmount != 900 {
			t.Errorf("known refund row %+v", r)
		}
	}
}

func TestACleanRunFindsNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.cleanOrders()
	for _, src := range []string{"gateway", "statement"} {
		t.Run(src, func(t *testing.T) {
			p := reconcile.Params{Orders: w.store, From: from, To: to}
			if src == "gateway" {
				p.Gateway = w.gw
			} else {
				p.Statement = strings.NewReader(w.statement())
			}
			rep, err := reconcile.Run(w.ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() || len(rep.Mismatches) != 0 || len(rep.Errors) != 0 {
				t.Errorf("clean run: %+v", rep)
			}
			if rep.Orders != 5 {
				t.Errorf("%d orders compared, want 5", rep.Orders)
			}
			// The known refund is listed, and does not make the run dirty.
			wantExactly(t, "known refunds", found(rep.KnownRefunds), []string{"known_refund known-refund"})
		})
	}
}

func TestGatewayFailuresAreReportedNotGuessed(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.cleanOrders()
	w.create("cancelled-paid", 1000)
	w.cancel("cancelled-paid")
	w.gatewayPay("cancelled-paid", 1000, payment.OutcomeSucceeded, "")
	w.mock.SetControl(payment.MockControl{FailQueries: true})
	rep, err := reconcile.Run(w.ctx, reconcile.Params{Orders: w.store, Gateway: w.gw, From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Mismatches) != 0 || len(rep.KnownRefunds) != 0 || rep.OK() {
		t.Errorf("with every query failing: %d mismatches, %d refunds, OK %v; want none, none, false", len(rep.Mismatches), len(rep.KnownRefunds), rep.OK())
	}
	var ids []string
	for _, e := range rep.Errors {
		ids = append(ids, e.OrderID)
		if !strings.Contains(e.Error, "503") {
			t.Errorf("error of %s: %q, want the gateway's 503", e.OrderID, e.Error)
		}
	}
	wantExactly(t, "orders in error", ids, sorted(w.inRange))
	if rep.Orders != 0 || rep.GatewayRecords != 0 {
		t.Errorf("%d orders compared, %d records; want 0, 0", rep.Orders, rep.GatewayRecords)
	}
}

func TestRunRefusesBadParams(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	cases := map[string]reconcile.Params{
		"no store":          {Gateway: w.gw},
		"no source":         {Orders: w.store},
		"two sources":       {Orders: w.store, Gateway: w.gw, Statement: strings.NewReader("")},
		"an empty range":    {Orders: w.store, Gateway: w.gw, From: to, To: from},
		"a zero-long range": {Orders: w.store, Gateway: w.gw, From: from, To: from},
		"a bad statement":   {Orders: w.store, Statement: strings.NewReader("o,p,REFUNDED,1\n")},
	}
	for name, p := range cases {
		if _, err := reconcile.Run(w.ctx, p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	ctx, cancel := context.WithCancel(w.ctx)
	cancel()
	w.create("o", 1)
	if _, err := reconcile.Run(ctx, reconcile.Params{Orders: w.store, Gateway: w.gw}); err == nil {
		t.Error("a cancelled context: no error")
	}
}

func TestReportRendering(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.plant()
	rep, err := reconcile.Run(w.ctx, reconcile.Params{Orders: w.store, Statement: strings.NewReader(w.statement()), From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	rep.Errors = append(rep.Errors, reconcile.OrderError{OrderID: "e-1", Error: "payment: query order \"e-1\":\nboom"})

	t.Run("a table, aligned", func(t *testing.T) {
		var b bytes.Buffer
		if err := reconcile.WriteTable(&b, rep); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, want := range []string{"NOT OK", "2026-03-01T00:00:00Z .. 2026-03-02T00:00:00Z", "against the statement",
			"MISMATCHES", "KNOWN REFUNDS", "ERRORS", "query order \"e-1\": boom"} {
			if !strings.Contains(out, want) {
				t.Errorf("table lacks %q:\n%s", want, out)
			}
		}
		lines := strings.Split(out, "\n")
		head := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "KIND") })
		if head < 0 {
			t.Fatalf("no header line:\n%s", out)
		}
		col := strings.Index(lines[head], "ORDER")
		rows := 0
		for _, l := range lines[head+1:] {
			if l == "" {
				break
			}
			rows++
			kind := strings.Fields(l)[0]
			rest := l[len(kind):]
			if at := len(kind) + len(rest) - len(strings.TrimLeft(rest, " ")); at != col {
				t.Errorf("row %q: ORDER column at %d, want %d", l, at, col)
			}
		}
		if rows != len(rep.Mismatches) {
			t.Errorf("%d rows under MISMATCHES, want %d:\n%s", rows, len(rep.Mismatches), out)
		}
	})

	t.Run("JSON with stable names", func(t *testing.T) {
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		var back struct {
			From       string           `json:"from"`
			Mismatches []map[string]any `json:"mismatches"`
		}
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.From != "2026-03-01T00:00:00Z" || len(back.Mismatches) != len(rep.Mismatches) {
			t.Fatalf("decoded %+v from %s", back, b)
		}
		keys := []string{"kind", "order_id", "lapse_status", "lapse_amount_cents", "gateway_status", "gateway_amount_cents", "payment_id", "detail"}
		for _, k := range keys {
			if _, ok := back.Mismatches[0][k]; !ok {
				t.Errorf("mismatch JSON lacks %q: %v", k, back.Mismatches[0])
			}
		}
		if len(back.Mismatches[0]) != len(keys) {
			t.Errorf("mismatch JSON keys %v, want exactly %v", back.Mismatches[0], keys)
		}
	})

	t.Run("a clean report says OK and lists empty arrays", func(t *testing.T) {
		clean := newWorld(t)
		rep, err := reconcile.Run(clean.ctx, reconcile.Params{Orders: clean.store, Gateway: clean.gw})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		reconcile.WriteTable(&b, rep)
		if !strings.Contains(b.String(), ": OK\n") || strings.Contains(b.String(), "MISMATCHES") {
			t.Errorf("clean table:\n%s", b.String())
		}
		j, _ := json.Marshal(rep)
		for _, want := range []string{`"mismatches":[]`, `"known_refunds":[]`, `"errors":[]`} {
			if !strings.Contains(string(j), want) {
				t.Errorf("clean JSON %s lacks %s", j, want)
			}
		}
		if strings.Contains(string(j), `"from"`) {
			t.Errorf("clean JSON %s has a zero from", j)
		}
	})
}

func ExampleWriteTable() {
	rep := reconcile.Report{
		From: from, To: to, Source: "statement", Orders: 120, GatewayRecords: 118,
		Mismatches: []reconcile.Mismatch{{
			Kind: reconcile.KindCancelledButPaid, OrderID: "o-17", LapseStatus: order.Cancelled, LapseAmount: 2500,
			GatewayStatus: payment.StatePaid, GatewayAmount: 2500, PaymentID: "pay-9",
			Detail: "lapse cancelled the order (timeout) and released its stock; the gateway has payment pay-9: refund it",
		}},
	}
	_ = reconcile.WriteTable(os.Stdout, rep)
	// Output:
	// reconciliation of orders created 2026-03-01T00:00:00Z .. 2026-03-02T00:00:00Z against the statement: NOT OK
	// 120 lapse orders, 118 gateway records, 0 ignored; 1 mismatches, 0 known refunds, 0 errors
	//
	// MISMATCHES
	// KIND                ORDER  LAPSE      LAPSE CENTS  GATEWAY  GATEWAY CENTS  PAYMENT  DETAIL
	// cancelled_but_paid  o-17   CANCELLED  2500         PAID     2500           pay-9    lapse cancelled the order (timeout) and released its stock; the gateway has payment pay-9: refund it
}

// countingOrders counts the pages read from a real store.
type countingOrders struct {
	store.Orders
	pages int
}

func (c *countingOrders) ListOrders(ctx context.Context, p store.ListOrdersParams) (store.ListOrdersResult, error) {
	c.pages++
	return c.Orders.ListOrders(ctx, p)
}

func TestPagingStopsAtTheStartOfTheRange(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.clk.Set(from.Add(-time.Hour))
	for i := range 20 {
		w.create(fmt.Sprintf("old-%02d", i), 100)
	}
	w.clk.Set(from)
	w.create("in-1", 100)
	w.create("in-2", 100)
	w.clk.Set(to)
	w.create("new-1", 100)
	c := &countingOrders{Orders: w.store}
	rep, err := reconcile.Run(w.ctx, reconcile.Params{Orders: c, Gateway: w.gw, From: from, To: to, PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Orders != 2 {
		t.Errorf("%d orders compared, want 2", rep.Orders)
	}
	// new-1 in-2 | in-1 old-19 | stop: 2 pages, not the 12 of the whole table.
	if c.pages != 2 {
		t.Errorf("%d pages read, want 2", c.pages)
	}
}

// memOrders is lapse's side as a fixed list of orders (newest first), for
// states the store itself now refuses to make.
type memOrders struct {
	store.Orders
	orders []order.Order
}

func (m memOrders) ListOrders(_ context.Context, _ store.ListOrdersParams) (store.ListOrdersResult, error) {
	return store.ListOrdersResult{Orders: m.orders}, nil
}

func (m memOrders) GetOrder(_ context.Context, id string) (order.Order, error) {
	for _, o := range m.orders {
		if o.ID == id {
			return o, nil
		}
	}
	return order.Order{}, store.ErrNotFound
}

// One payment recorded SUCCEEDED on two orders paid both (a PaymentIntent
// id given to /pay of each): the gateway agrees with each order alone, so
// only a look across orders finds it — a shared_payment row for each
// order, whatever the source.
func TestOnePaymentOnTwoOrdersIsFound(t *testing.T) {
	t.Parallel()
	at := from.Add(time.Minute)
	paidBy := func(id, pid string) order.Order {
		return order.Order{ID: id, Status: order.Paid, PaymentID: pid, AmountCents: 1299, Currency: "USD", CreatedAt: at,
			Payments: []order.Payment{{PaymentID: pid, Status: order.PaymentSucceeded, AmountCents: 1299}}}
	}
	orders := memOrders{orders: []order.Order{paidBy("o-b", "pi_shared"), paidBy("o-a", "pi_shared"), paidBy("o-c", "pi_own")}}
	gw := newAttemptGateway()
	gw.set("pi_shared", payment.StatePaid, 1299)
	gw.set("pi_own", payment.StatePaid, 1299)
	for _, src := range []string{"gateway", "statement"} {
		p := reconcile.Params{Orders: orders, From: from, To: to}
		if src == "gateway" {
			p.Gateway = gw
		} else {
			p.Statement = strings.NewReader("o-a,pi_shared,PAID,1299\no-b,pi_shared,PAID,1299\no-c,pi_own,PAID,1299\n")
		}
		rep, err := reconcile.Run(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		wantExactly(t, src+": mismatches", found(rep.Mismatches), []string{"shared_payment o-a", "shared_payment o-b"})
		for _, m := range rep.Mismatches {
			if m.PaymentID != "pi_shared" || m.LapseStatus != order.Paid || !strings.Contains(m.Detail, "o-a") || !strings.Contains(m.Detail, "o-b") {
				t.Errorf("%s: row %+v", src, m)
			}
		}
		if rep.OK() {
			t.Errorf("%s: a payment on two orders reported OK", src)
		}
	}
}
