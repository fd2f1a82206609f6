package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/alipay"
	"github.com/lapsehq/lapse/payment/stripe"
	"github.com/lapsehq/lapse/payment/wechatpay"
	"github.com/lapsehq/lapse/store"
)

// refundGateway is one gateway's refund notifications as the gateway sends
// them, signed with keys of the test's own (small local helpers: the
// adapters' fakes are not importable from here).
type refundGateway struct {
	name     string
	currency string
	notifier func(t *testing.T) payment.Notifier
	// refunded is the signed notification that refundID gave back cents
	// of paymentID.
	refunded func(t *testing.T, paymentID, refundID string, cents int64) (http.Header, []byte)
	// failed is the signed notification that refundID failed; nil for a
	// gateway that sends none (Alipay).
	failed func(t *testing.T, paymentID, refundID string, cents int64) (http.Header, []byte)
	// ack and refused are the answers to an accepted notification and to
	// one whose signature does not verify (as for payment notifications).
	ack, refused int
}

var rsaKey = sync.OnceValues(func() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) })

func testKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsaKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const refundWebhookSecret = "whsec_lapserefundtest0123456789"

// stripeRefunds: charge.refunded (a Charge with its refunds) for a refund
// that succeeded, charge.refund.updated (a Refund) for one that failed.
func stripeRefunds() refundGateway {
	seq := 0
	var mu sync.Mutex
	eventID := func() string {
		mu.Lock()
		defer mu.Unlock()
		seq++
		return fmt.Sprintf("evt_r%d", seq)
	}
	send := func(t *testing.T, typ string, object map[string]any) (http.Header, []byte) {
		t.Helper()
		body, err := json.Marshal(map[string]any{"id": eventID(), "object": "event", "api_version": "2020-08-27",
			"created": time.Now().Unix(), "livemode": false, "pending_webhooks": 1, "type": typ, "data": map[string]any{"object": object}})
		if err != nil {
			t.Fatal(err)
		}
		p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: refundWebhookSecret, Timestamp: time.Now()})
		return http.Header{"Stripe-Signature": {p.Header}, "Content-Type": {"application/json"}}, body
	}
	refund := func(paymentID, refundID, status string, cents int64) map[string]any {
		return map[string]any{"id": refundID, "object": "refund", "amount": cents, "currency": "usd", "status": status,
			"payment_intent": paymentID, "charge": "ch_" + paymentID}
	}
	return refundGateway{
		name: "stripe", currency: "USD", ack: http.StatusOK, refused: http.StatusBadRequest,
		notifier: func(t *testing.T) payment.Notifier {
			n, err := stripe.NewNotifier(refundWebhookSecret)
			if err != nil {
				t.Fatal(err)
			}
			return n
		},
		refunded: func(t *testing.T, paymentID, refundID string, cents int64) (http.Header, []byte) {
			return send(t, "charge.refunded", map[string]any{
				"id": "ch_" + paymentID, "object": "charge", "amount": cents, "amount_refunded": cents, "currency": "usd",
				"refunded": true, "paid": true, "status": "succeeded", "payment_intent": paymentID,
				"refunds": map[string]any{"object": "list", "has_more": false, "data": []any{refund(paymentID, refundID, "succeeded", cents)}},
			})
		},
		failed: func(t *testing.T, paymentID, refundID string, cents int64) (http.Header, []byte) {
			return send(t, "charge.refund.updated", refund(paymentID, refundID, "failed", cents))
		},
	}
}

const (
	wechatMchID    = "1900000109"
	wechatAPIv3Key = "lapse-refund-test-apiv3-key-0032"
)

// wechatRefunds: REFUND.SUCCESS and REFUND.ABNORMAL, the resource
// encrypted with the APIv3 key and the body signed with the platform key.
func wechatRefunds() refundGateway {
	var (
		once sync.Once
		cert *x509.Certificate
	)
	platform := func(t *testing.T) *x509.Certificate {
		t.Helper()
		once.Do(func() {
			k := testKey(t)
			tmpl := &x509.Certificate{SerialNumber: big.NewInt(0x5157F09EFDC096DE), Subject: pkix.Name{CommonName: "Tenpay.com Root CA"},
				NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
			if err != nil {
				t.Fatal(err)
			}
			if cert, err = x509.ParseCertificate(der); err != nil {
				t.Fatal(err)
			}
		})
		if cert == nil {
			t.Fatal("no platform certificate")
		}
		return cert
	}
	send := func(t *testing.T, eventType, paymentID, refundID, status string, cents int64) (http.Header, []byte) {
		t.Helper()
		plain, err := json.Marshal(map[string]any{"mchid": wechatMchID, "out_trade_no": paymentID, "transaction_id": "4200" + paymentID,
			"out_refund_no": "lapse-refund-" + paymentID, "refund_id": refundID, "refund_status": status,
			"success_time": time.Now().Format(time.RFC3339), "user_received_account": "招商银行信用卡0403",
			"amount": map[string]any{"total": cents, "refund": cents, "payer_total": cents, "payer_refund": cents}})
		if err != nil {
			t.Fatal(err)
		}
		block, err := aes.NewCipher([]byte(wechatAPIv3Key))
		if err != nil {
			t.Fatal(err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			t.Fatal(err)
		}
		nonce := "n0nce" + strconv.Itoa(int(cents%10)) + "abcdef"
		ct := aead.Seal(nil, []byte(nonce), plain, []byte("refund"))
		body, err := json.Marshal(map[string]any{"id": "EV-" + refundID + "-" + eventType, "create_time": time.Now().Format(time.RFC3339),
			"resource_type": "encrypt-resource", "event_type": eventType, "summary": "退款状态",
			"resource": map[string]any{"original_type": "refund", "algorithm": "AEAD_AES_256_GCM",
				"ciphertext": base64.StdEncoding.EncodeToString(ct), "associated_data": "refund", "nonce": nonce}})
		if err != nil {
			t.Fatal(err)
		}
		ts, wnonce := strconv.FormatInt(time.Now().Unix(), 10), "WN"+refundID
		sum := sha256.Sum256([]byte(ts + "\n" + wnonce + "\n" + string(body) + "\n"))
		sig, err := rsa.SignPKCS1v15(nil, testKey(t), crypto.SHA256, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		return http.Header{"Wechatpay-Timestamp": {ts}, "Wechatpay-Nonce": {wnonce}, "Wechatpay-Signature": {base64.StdEncoding.EncodeToString(sig)},
			"Wechatpay-Serial": {fmt.Sprintf("%X", platform(t).SerialNumber)}, "Wechatpay-Signature-Type": {"WECHATPAY2-SHA256-RSA2048"},
			"Content-Type": {"application/json"}}, body
	}
	return refundGateway{
		name: "wechatpay", currency: "CNY", ack: http.StatusNoContent, refused: http.StatusBadRequest,
		notifier: func(t *testing.T) payment.Notifier {
			n, err := wechatpay.NewNotifier(wechatpay.Config{MchID: wechatMchID, PlatformCerts: []*x509.Certificate{platform(t)}, APIv3Key: []byte(wechatAPIv3Key)})
			if err != nil {
				t.Fatal(err)
			}
			return n
		},
		refunded: func(t *testing.T, paymentID, refundID string, cents int64) (http.Header, []byte) {
			return send(t, "REFUND.SUCCESS", paymentID, refundID, "SUCCESS", cents)
		},
		failed: func(t *testing.T, paymentID, refundID string, cents int64) (http.Header, []byte) {
			return send(t, "REFUND.ABNORMAL", paymentID, refundID, "ABNORMAL", cents)
		},
	}
}

const alipayAppID = "2021000000000001"

// alipayRefunds: the trade's notification Alipay sends when a refund
// changes it — a whole refund closes the trade (TRADE_CLOSED), with
// refund_fee, gmt_refund and out_biz_no (the refund's out_request_no).
func alipayRefunds() refundGateway {
	return refundGateway{
		name: "alipay", currency: "CNY", ack: http.StatusOK, refused: http.StatusBadRequest,
		notifier: func(t *testing.T) payment.Notifier {
			n, err := alipay.NewNotifier(alipay.Config{AppID: alipayAppID, AlipayPublicKey: &testKey(t).PublicKey})
			if err != nil {
				t.Fatal(err)
			}
			return n
		},
		refunded: func(t *testing.T, paymentID, refundID string, cents int64) (http.Header, []byte) {
			t.Helper()
			now := time.Now().In(time.FixedZone("CST", 8*3600))
			v := url.Values{
				"notify_time": {now.Format(time.DateTime)}, "notify_type": {"trade_status_sync"}, "notify_id": {"nid-" + refundID},
				"app_id": {alipayAppID}, "charset": {"utf-8"}, "version": {"1.0"}, "sign_type": {"RSA2"},
				"trade_no": {"2026" + paymentID}, "out_trade_no": {paymentID}, "out_biz_no": {refundID},
				"trade_status": {"TRADE_CLOSED"}, "total_amount": {alipay.FormatAmount(cents)}, "refund_fee": {alipay.FormatAmount(cents)},
				"gmt_create": {now.Add(-time.Hour).Format(time.DateTime)}, "gmt_payment": {now.Add(-time.Hour).Format(time.DateTime)},
				"gmt_refund": {now.Format("2006-01-02 15:04:05.000")}, "gmt_close": {now.Format(time.DateTime)},
			}
			content, err := alipay.SignContent(v, "sign", "sign_type")
			if err != nil {
				t.Fatal(err)
			}
			sig, err := alipay.SignBytes(testKey(t), []byte(content))
			if err != nil {
				t.Fatal(err)
			}
			v.Set("sign", sig)
			return http.Header{"Content-Type": {"application/x-www-form-urlencoded; charset=utf-8"}}, []byte(v.Encode())
		},
	}
}

// A gateway's refund notification, through POST /v1/payments/notify/{name}
// into a Service: verified and recorded, never required. Money an attempt
// owes back (its refund task PENDING, DEAD, or none) is recorded given back
// once, however often the gateway sends it; a refund of money lapse owes
// nothing of, a failed refund, and a payment lapse does not know change
// nothing and are acknowledged; a forged one is refused as a payment's is.
func TestGatewayRefundNotifications(t *testing.T) {
	t.Parallel()
	for _, gw := range []refundGateway{stripeRefunds(), wechatRefunds(), alipayRefunds()} {
		t.Run(gw.name+" on SQLite", func(t *testing.T) {
			t.Parallel()
			testRefundNotifications(t, gw, false)
		})
	}
	t.Run("wechatpay on PostgreSQL", func(t *testing.T) {
		t.Parallel()
		testRefundNotifications(t, wechatRefunds(), true)
	})
}

func testRefundNotifications(t *testing.T, gw refundGateway, postgres bool) {
	ctx := context.Background()
	e := newEnv(t, envConfig{Notifiers: []payment.Notifier{gw.notifier(t)}, Postgres: postgres})
	e.setStock(t, "a", 100)
	const cents = 1299
	send := func(t *testing.T, h http.Header, body []byte) response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, e.url+"/v1/payments/notify/"+gw.name, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = h.Clone()
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return response{Status: resp.StatusCode, Header: resp.Header, Body: b.Bytes()}
	}
	// The gateway's three deliveries of one notification, each
	// acknowledged (so that it stops).
	deliverThrice := func(t *testing.T, h http.Header, body []byte) {
		t.Helper()
		for i := range 3 {
			if r := send(t, h, body); r.Status != gw.ack {
				t.Fatalf("delivery %d: %d %s, want %d", i+1, r.Status, r.Body, gw.ack)
			}
		}
	}
	// owing is an order paid by first and charged again by second: second
	// is money to give back.
	owing := func(t *testing.T, id, first, second string) {
		t.Helper()
		e.create(t, createReq{ID: id, Items: []item{{"a", 1}}, AmountCents: cents, Currency: gw.currency, TimeoutSeconds: secs(3600)})
		for _, pid := range []string{first, second} {
			if r := e.notifySigned(t, notifyReq{OrderID: id, PaymentID: pid, Status: "SUCCEEDED", AmountCents: cents, Currency: gw.currency}); r.Status != http.StatusOK {
				t.Fatalf("notify %s: %d %s", pid, r.Status, r.Body)
			}
		}
		if o := e.get(t, id); !o.RefundRequired || attemptStatus(o, second) != order.PaymentRefundRequired {
			t.Fatalf("%s: %+v, want %s REFUND_REQUIRED", id, o, second)
		}
	}
	refunded := func(t *testing.T, id string) int {
		t.Helper()
		evs, err := e.st.OrderEvents(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ev := range evs {
			if ev.Type == order.EventRefunded {
				n++
			}
		}
		return n
	}
	refundRow := func(t *testing.T, id, paymentID string) (order.Refund, bool) {
		t.Helper()
		rs, err := e.st.ListRefunds(ctx, store.ListTasksParams{OrderID: id, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.PaymentID == paymentID {
				return r, true
			}
		}
		return order.Refund{}, false
	}
	wantRecorded := func(t *testing.T, id, paymentID, refundID string) {
		t.Helper()
		o := e.get(t, id)
		if o.Status != order.Paid || o.RefundRequired || attemptStatus(o, paymentID) != order.PaymentRefunded {
			t.Errorf("%s after the refund notification: %s, refund_required %v, attempt %s; want PAID, not flagged, REFUNDED",
				id, o.Status, o.RefundRequired, attemptStatus(o, paymentID))
		}
		if n := refunded(t, id); n != 1 {
			t.Errorf("%s: %d order.refunded events, want 1", id, n)
		}
		r, ok := refundRow(t, id, paymentID)
		if !ok || r.Status != order.TaskDone || r.RefundID != refundID || r.Manual || r.Actor != "gateway:"+gw.name {
			t.Errorf("%s: refund row %+v (found %v), want DONE, refund_id %s, not manual, actor gateway:%s", id, r, ok, refundID, gw.name)
		}
	}

	t.Run("money owed back, its refund task PENDING, is recorded refunded once", func(t *testing.T) {
		owing(t, "rn1", "pi_rn1a", "pi_rn1b")
		if _, err := e.st.EnqueueRefund(ctx, "pi_rn1b"); err != nil {
			t.Fatal(err)
		}
		h, body := gw.refunded(t, "pi_rn1b", "re_rn1", cents)
		deliverThrice(t, h, body)
		wantRecorded(t, "rn1", "pi_rn1b", "re_rn1")
	})

	t.Run("money owed back, its refund task DEAD, is recorded refunded once", func(t *testing.T) {
		owing(t, "rn2", "pi_rn2a", "pi_rn2b")
		if _, err := e.st.EnqueueRefund(ctx, "pi_rn2b"); err != nil {
			t.Fatal(err)
		}
		claimed, err := e.st.ClaimRefunds(ctx, store.ClaimTasksParams{Limit: 10, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		var outs []store.RefundOutcome
		for _, c := range claimed {
			outs = append(outs, store.RefundOutcome{PaymentID: c.PaymentID, OrderID: c.OrderID, Attempts: c.Attempts, Error: "gave up", Dead: true})
		}
		if _, err := e.st.SettleRefunds(ctx, outs); err != nil {
			t.Fatal(err)
		}
		if r, _ := refundRow(t, "rn2", "pi_rn2b"); r.Status != order.TaskDead {
			t.Fatalf("refund task %+v, want DEAD", r)
		}
		h, body := gw.refunded(t, "pi_rn2b", "re_rn2", cents)
		deliverThrice(t, h, body)
		wantRecorded(t, "rn2", "pi_rn2b", "re_rn2")
	})

	t.Run("money owed back without a refund task is recorded refunded once", func(t *testing.T) {
		owing(t, "rn3", "pi_rn3a", "pi_rn3b")
		h, body := gw.refunded(t, "pi_rn3b", "re_rn3", cents)
		deliverThrice(t, h, body)
		wantRecorded(t, "rn3", "pi_rn3b", "re_rn3")
	})

	t.Run("a refund of a payment that owes nothing changes nothing", func(t *testing.T) {
		e.create(t, createReq{ID: "rn4", Items: []item{{"a", 1}}, AmountCents: cents, Currency: gw.currency, TimeoutSeconds: secs(3600)})
		if r := e.notifySigned(t, notifyReq{OrderID: "rn4", PaymentID: "pi_rn4", Status: "SUCCEEDED", AmountCents: cents, Currency: gw.currency}); r.Status != http.StatusOK {
			t.Fatalf("notify: %d %s", r.Status, r.Body)
		}
		before := e.get(t, "rn4")
		h, body := gw.refunded(t, "pi_rn4", "re_rn4", cents)
		deliverThrice(t, h, body)
		after := e.get(t, "rn4")
		if after.Status != order.Paid || after.Version != before.Version || attemptStatus(after, "pi_rn4") != order.PaymentSucceeded {
			t.Errorf("after: %s v%d attempt %s; want PAID v%d SUCCEEDED, unchanged", after.Status, after.Version, attemptStatus(after, "pi_rn4"), before.Version)
		}
		if n := refunded(t, "rn4"); n != 0 {
			t.Errorf("%d order.refunded events, want none", n)
		}
		if _, ok := refundRow(t, "rn4", "pi_rn4"); ok {
			t.Error("a refund row was written")
		}
	})

	if gw.failed != nil {
		t.Run("a failed refund is recorded as nothing but a count", func(t *testing.T) {
			owing(t, "rn5", "pi_rn5a", "pi_rn5b")
			h, body := gw.failed(t, "pi_rn5b", "re_rn5", cents)
			deliverThrice(t, h, body)
			o := e.get(t, "rn5")
			if !o.RefundRequired || attemptStatus(o, "pi_rn5b") != order.PaymentRefundRequired {
				t.Errorf("after a failed refund: refund_required %v, attempt %s; want still owed", o.RefundRequired, attemptStatus(o, "pi_rn5b"))
			}
			if n := refunded(t, "rn5"); n != 0 {
				t.Errorf("%d order.refunded events, want none", n)
			}
		})
	}

	t.Run("a refund of a payment lapse does not know is acknowledged, nothing written", func(t *testing.T) {
		h, body := gw.refunded(t, "pi_nobody", "re_nobody", cents)
		deliverThrice(t, h, body)
		if _, err := e.st.OrderOfPayment(ctx, "pi_nobody"); err == nil {
			t.Error("the unknown payment was recorded")
		}
	})

	t.Run("a forged refund notification is refused as a payment's is, nothing written", func(t *testing.T) {
		owing(t, "rn6", "pi_rn6a", "pi_rn6b")
		h, body := gw.refunded(t, "pi_rn6b", "re_rn6", cents)
		forged := bytes.Replace(body, []byte("re_rn6"), []byte("re_rn7"), 1)
		if r := send(t, h, forged); r.Status != gw.refused {
			t.Errorf("forged: %d %s, want %d", r.Status, r.Body, gw.refused)
		}
		if o := e.get(t, "rn6"); attemptStatus(o, "pi_rn6b") != order.PaymentRefundRequired || refunded(t, "rn6") != 0 {
			t.Errorf("after a forged notification: attempt %s, want REFUND_REQUIRED and no event", attemptStatus(o, "pi_rn6b"))
		}
	})

	t.Run("each notification is counted by gateway and outcome", func(t *testing.T) {
		want := map[string]float64{"refunded": 3, "duplicate": 6, "not_owed": 3, "unknown_payment": 3}
		if gw.failed != nil {
			want["failed"] = 3
		}
		got := refundNotificationCounts(t, e, gw.name)
		for outcome, n := range want {
			if got[outcome] != n {
				t.Errorf("lapse_refund_notifications_total{gateway=%q,outcome=%q} = %v, want %v (all: %v)", gw.name, outcome, got[outcome], n, got)
			}
		}
		if len(got) != len(want) {
			t.Errorf("outcomes counted: %v, want %v", got, want)
		}
	})
}

// refundNotificationCounts reads lapse_refund_notifications_total of one
// gateway from GET /metrics, by outcome.
func refundNotificationCounts(t *testing.T, e *env, gateway string) map[string]float64 {
	t.Helper()
	resp, err := e.client.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	prefix := `lapse_refund_notifications_total{gateway="` + gateway + `",outcome="`
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		outcome, value, _ := strings.Cut(rest, `"} `)
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[outcome] = n
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
