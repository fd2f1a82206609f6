package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/alipay/alipaytest"
	"github.com/lapsehq/lapse/payment/gatewaytest"
	"github.com/lapsehq/lapse/payment/stripe/stripetest"
	"github.com/lapsehq/lapse/payment/wechatpay/wechatpaytest"
)

// refundGateway is one gateway of TestAutoRefundEndToEnd, played by its
// local fake: what lapse serve is started with, how the buyer's payment
// lands after the cancel and is notified as the gateway notifies it, and
// what the fake saw of the refund.
type refundGateway struct {
	args []string // lapse serve's gateway flags
	// faults are the fake's, refundOp the refund's operation in them.
	faults   *gatewaytest.Faults
	refundOp string
	// opened: the buyer opened a payment attempt before the deadline (POST
	// …/pay), so that lapse closes it at the gateway when it cancels. A
	// gateway whose notification names the order (mockpay, Stripe's
	// metadata) also gives back a payment lapse never heard of.
	opened bool
	// open puts the attempt's trade at the gateway, waiting for the buyer.
	open func(paymentID string)
	// land is the payment succeeding at the gateway after the cancel; it
	// returns the gateway's notification of it, to deliver.
	land func(t *testing.T, paymentID string) notification
	// refundKeys is the key of each refund request the fake received
	// (Idempotency-Key, out_request_no, out_refund_no, refund_key), in
	// order; refunds how many refunds it holds of the payment.
	refundKeys func(paymentID string) []string
	refunds    func(paymentID string) int
	// asked is how many requests about refunds the fake served: to make
	// one, or to find one made under a key (Stripe's adapter looks a
	// refund up by its key before it makes one: Stripe forgets
	// idempotency keys after 24 hours).
	asked func() int
}

// notification is a gateway's signed notification, to post to lapse as is.
type notification struct {
	path        string
	body        []byte
	header      http.Header
	wantStatus  int
	wantAnswer  string // the body the gateway needs to stop resending, if it reads one
	contentType string
}

// deliver posts n to lapse, as the gateway resends it.
func (n notification) deliver(t *testing.T, s *server) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+n.path, bytes.NewReader(n.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range n.header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", n.contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != n.wantStatus || (n.wantAnswer != "" && string(b) != n.wantAnswer) {
		t.Fatalf("notification %s: %d %q, want %d %q", n.path, resp.StatusCode, b, n.wantStatus, n.wantAnswer)
	}
}

const refundCents = 1299

func alipayRefundGateway(t *testing.T) refundGateway {
	f := writeCNFiles(t)
	ali := alipaytest.New(t)
	return refundGateway{
		args: []string{"--gateway", "alipay", "--alipay-app-id", alipaytest.AppID, "--alipay-private-key-file", f.privateKey,
			"--alipay-public-key-file", f.publicKey, "--alipay-gateway-url", ali.URL},
		faults: &ali.Faults, refundOp: "alipay.trade.refund", opened: true,
		open: func(no string) { ali.SetStatus(no, "WAIT_BUYER_PAY", 0) },
		land: func(t *testing.T, no string) notification {
			ali.SetStatus(no, "TRADE_SUCCESS", refundCents)
			v := ali.PaymentNotification("n-"+no, no)
			return notification{path: "/v1/payments/notify/alipay", body: []byte(v.Encode()), wantStatus: http.StatusOK,
				wantAnswer: "success", contentType: "application/x-www-form-urlencoded"}
		},
		refundKeys: ali.RefundRequestNos,
		refunds:    func(no string) int { return ali.Refunds("", no) },
		asked:      func() int { return ali.Calls("alipay.trade.refund") + ali.Calls("alipay.trade.fastpay.refund.query") },
	}
}

func wechatpayRefundGateway(t *testing.T) refundGateway {
	f := writeCNFiles(t)
	wx := wechatpaytest.New(t)
	return refundGateway{
		args: []string{"--gateway", "wechatpay", "--wechatpay-mchid", wechatpaytest.MchID, "--wechatpay-serial", wechatpaytest.MerchantSerial,
			"--wechatpay-private-key-file", f.merchantKey, "--wechatpay-platform-cert-file", f.cert, "--wechatpay-apiv3-key-file", f.apiV3,
			"--wechatpay-api-base", wx.URL},
		faults: &wx.Faults, refundOp: "refund", opened: true,
		open: func(no string) { wx.SetState(no, "NOTPAY", 0) },
		land: func(t *testing.T, no string) notification {
			wx.SetState(no, "SUCCESS", refundCents)
			body, h, err := wx.PaymentNotification("EV-"+no, no)
			if err != nil {
				t.Fatal(err)
			}
			return notification{path: "/v1/payments/notify/wechatpay", body: body, header: h, wantStatus: http.StatusNoContent,
				contentType: "application/json"}
		},
		refundKeys: wx.RefundNos,
		refunds:    func(no string) int { return wx.Refunds("", no) },
		asked:      func() int { return wx.Count("refund") },
	}
}

func stripeRefundGateway(t *testing.T) refundGateway {
	const key, whsec = "sk_test_refundE2EKey", "whsec_refundE2ESecret"
	fs := stripetest.New(t, key)
	return refundGateway{
		args: []string{"--gateway", "stripe", "--stripe-key-file", writeSecret(t, key+"\n"), "--stripe-api-base", fs.URL,
			"--stripe-webhook-secret-file", writeSecret(t, whsec+"\n")},
		faults: &fs.Faults, refundOp: "POST /v1/refunds", opened: true,
		open: func(pi string) {
			fs.Set(stripetest.PaymentIntent{ID: pi, Status: "requires_payment_method", Amount: refundCents})
		},
		land: func(t *testing.T, pi string) notification {
			fs.SetStatus(pi, "succeeded")
			body := fmt.Sprintf(`{"id": "evt_%s", "object": "event", "api_version": "2025-01-27.acacia", "type": "payment_intent.succeeded",
				"data": {"object": {"id": %q, "object": "payment_intent", "status": "succeeded", "amount_received": %d, "currency": "usd", "metadata": {}}}}`,
				pi, pi, refundCents)
			signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: whsec})
			return notification{path: "/v1/payments/notify/stripe", body: []byte(body), header: http.Header{"Stripe-Signature": {signed.Header}},
				wantStatus: http.StatusOK, contentType: "application/json"}
		},
		refundKeys: func(pi string) []string {
			// The Idempotency-Key of each POST /v1/refunds (the fake lists
			// every POST's, in the order of its calls).
			keys, posts := fs.IdempotencyKeys(), 0
			var out []string
			for _, c := range fs.Calls() {
				if !strings.HasPrefix(c, "POST ") {
					continue
				}
				if c == "POST /v1/refunds" {
					out = append(out, keys[posts])
				}
				posts++
			}
			return out
		},
		refunds: func(pi string) int { return len(fs.Refunds(pi)) },
		asked:   func() int { return fs.Count("POST /v1/refunds") + fs.Count("GET /v1/refunds") },
	}
}

// mockpayRefundGateway is mockpay (payment.Mock, what `lapse mockpay`
// serves) in this process, behind the fault injection the fakes share:
// the buyer pays an order lapse cancelled without an attempt, and
// mockpay's callback names the order.
func mockpayRefundGateway(t *testing.T) refundGateway {
	const secret = "refund-e2e-callback-secret"
	mock := payment.NewMock(payment.MockConfig{})
	t.Cleanup(func() { _ = mock.Close() })
	faults := &gatewaytest.Faults{}
	var mu sync.Mutex
	keys := map[string][]string{} // payment_id → refund_key of each refund request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/refund") {
			mock.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var b struct {
			PaymentID string `json:"payment_id"`
			RefundKey string `json:"refund_key"`
		}
		_ = json.Unmarshal(body, &b)
		mu.Lock()
		keys[b.PaymentID] = append(keys[b.PaymentID], b.RefundKey)
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		faults.Serve(w, r, "refund", mock, func(w http.ResponseWriter) {
			http.Error(w, `{"error": "internal error"}`, http.StatusInternalServerError)
		})
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(faults.Release)
	var orderOf sync.Map // payment_id → order id
	return refundGateway{
		args:   []string{"--gateway", srv.URL, "--gateway-retries", "0", "--callback-secret", secret},
		faults: faults, refundOp: "refund", opened: false,
		open: func(string) {},
		land: func(t *testing.T, pid string) notification {
			id := strings.TrimPrefix(pid, "pay-")
			orderOf.Store(pid, id)
			if _, err := mock.Pay(id, refundCents, payment.OutcomeSucceeded, pid); err != nil {
				t.Fatal(err)
			}
			body, _ := json.Marshal(map[string]any{"order_id": id, "payment_id": pid, "status": "SUCCEEDED", "amount_cents": refundCents})
			return notification{path: "/v1/payments/notify", body: body,
				header:     http.Header{payment.SignatureHeader: {payment.Sign([]byte(secret), time.Now(), body)}},
				wantStatus: http.StatusOK, contentType: "application/json"}
		},
		refundKeys: func(pid string) []string {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(keys[pid])
		},
		refunds: func(pid string) int {
			id, _ := orderOf.Load(pid)
			n := 0
			for _, rf := range mock.Refunds(id.(string)) {
				if rf.PaymentID == pid {
					n++
				}
			}
			return n
		},
		asked: func() int {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, ks := range keys {
				n += len(ks)
			}
			return n
		},
	}
}

// --auto-refund end to end, with lapse serve a real process against each
// gateway's local fake, on PostgreSQL and SQLite: a payment lands at the
// gateway after lapse cancelled its order and its notification arrives
// three times (the same body); the gateway answers the refund 500 twice,
// then makes it but lapse is SIGKILLed before it hears so; lapse started
// again on the same store asks again, with the same key. The gateway holds
// one refund, the attempt is REFUNDED, refund_required is false, the
// order has one order.refunded event, and lapse audit passes.
func TestAutoRefundEndToEnd(t *testing.T) {
	t.Parallel()
	gateways := map[string]func(*testing.T) refundGateway{
		"stripe": stripeRefundGateway, "alipay": alipayRefundGateway, "wechatpay": wechatpayRefundGateway, "mockpay": mockpayRefundGateway,
	}
	stores := map[string]func(*testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "lapse.db") },
		"postgres": postgresURL,
	}
	for storeName, newStore := range stores {
		for gwName, newGateway := range gateways {
			t.Run(storeName+"/"+gwName, func(t *testing.T) {
				t.Parallel()
				autoRefundEndToEnd(t, newStore(t), newGateway(t))
			})
		}
	}
}

func autoRefundEndToEnd(t *testing.T, store string, gw refundGateway) {
	const id = "late-1"
	pid := "pay-" + id
	if gw.refundOp == "POST /v1/refunds" {
		pid = "pi_late1" // a PaymentIntent id
	}
	args := append([]string{"--store", store, "--grace", "0s", "--auto-refund", "--refund-lease", "2s", "--refund-retry-base", "50ms"}, gw.args...)
	s := startServe(t, nil, args...)
	s.call("PUT", "/v1/skus/tee", `{"available": 5}`, 200)
	s.call("POST", "/v1/orders", fmt.Sprintf(`{"id": %q, "items": [{"sku": "tee", "qty": 1}], "amount_cents": %d, "timeout_seconds": 1}`, id, refundCents), 201)
	if gw.opened {
		gw.open(pid)
		s.call("POST", "/v1/orders/"+id+"/pay", fmt.Sprintf(`{"payment_id": %q}`, pid), 200)
	}
	s.waitStatus(id, "CANCELLED", 15*time.Second)

	// The refund: 500 twice, then made at the gateway and its answer never
	// heard — lapse is killed while the gateway holds it.
	gw.faults.FailNext(gw.refundOp, 2)
	made := gw.faults.HoldNext(gw.refundOp)
	n := gw.land(t, pid)
	n.deliver(t, s)
	if o := must(s.api().GetOrder(t.Context(), id))(t); o.Status != order.Cancelled || !o.RefundRequired {
		t.Fatalf("after the late payment's notification: %s, refund_required %v; want CANCELLED owing a refund", o.Status, o.RefundRequired)
	}
	n.deliver(t, s) // the gateway sends it again
	select {
	case <-made:
	case <-time.After(20 * time.Second):
		t.Fatalf("no refund made at the gateway within 20 s; refund requests %q", gw.refundKeys(pid))
	}
	s.kill()
	askedBefore := gw.asked()
	if o := attemptStatus(t, store, pid); o != string(order.PaymentRefundRequired) {
		t.Fatalf("the attempt is %s in the store after the kill, want REFUND_REQUIRED (lapse never heard the refund was made)", o)
	}

	s = startServe(t, nil, args...)
	deadline := time.Now().Add(20 * time.Second)
	for {
		o := must(s.api().GetOrder(t.Context(), id))(t)
		if !o.RefundRequired && hasAttempt(o, pid, order.PaymentRefunded) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refund not settled 20 s after the restart: %+v; refund requests %q", o, gw.refundKeys(pid))
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.deliver(t, s) // and a third time, the refund made
	o := must(s.api().GetOrder(t.Context(), id))(t)
	if o.Status != order.Cancelled || o.RefundRequired || !hasAttempt(o, pid, order.PaymentRefunded) {
		t.Fatalf("after the notification a third time: %+v; want CANCELLED, %s REFUNDED, no refund owed", o, pid)
	}
	s.stop()

	if gw.asked() == askedBefore {
		t.Fatal("lapse started again settled the refund without asking the gateway")
	}
	keys := gw.refundKeys(pid)
	if len(keys) < 3 {
		t.Fatalf("refund requests %q: want at least the two answered 500 and the one lapse did not hear", keys)
	}
	for _, k := range keys {
		if k == "" || k != keys[0] {
			t.Fatalf("refund requests with keys %q: want one key, every time", keys)
		}
	}
	if n := gw.refunds(pid); n != 1 {
		t.Fatalf("the gateway holds %d refunds of %s, want 1", n, pid)
	}
	if n := countRows(t, store, "SELECT count(*) FROM lapse_outbox WHERE order_id = '"+id+"' AND type = 'order.refunded'"); n != 1 {
		t.Fatalf("%d order.refunded events, want 1", n)
	}
	if out, code := lapseCmd(t, nil, "audit", "--store", store); code != 0 || !strings.Contains(out, "every invariant holds") {
		t.Fatalf("audit: exit %d\n%s", code, out)
	}
}

func hasAttempt(o order.Order, paymentID string, st order.PaymentStatus) bool {
	return slices.ContainsFunc(o.Payments, func(p order.Payment) bool { return p.PaymentID == paymentID && p.Status == st })
}

// kill ends lapse serve with SIGKILL: no shutdown, nothing flushed.
func (s *server) kill() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		s.t.Fatal("lapse serve did not die within 15 s of SIGKILL")
	}
}

// attemptStatus reads a payment attempt's status in the store, lapse not
// running.
func attemptStatus(t *testing.T, store, paymentID string) string {
	t.Helper()
	var st string
	queryRow(t, store, "SELECT status FROM lapse_payments WHERE payment_id = '"+paymentID+"'", &st)
	return st
}

func countRows(t *testing.T, store, query string) int {
	t.Helper()
	var n int
	queryRow(t, store, query, &n)
	return n
}

// queryRow scans the one row of a query (of test-controlled text) on the
// store's database.
func queryRow(t *testing.T, store, query string, dest any) {
	t.Helper()
	if path, ok := strings.CutPrefix(store, "sqlite://"); ok {
		db, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.QueryRow(query).Scan(dest); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, query).Scan(dest); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}
