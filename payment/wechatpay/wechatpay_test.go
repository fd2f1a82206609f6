package wechatpay_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/gatewaytest"
	"github.com/lapsehq/lapse/payment/wechatpay"
	"github.com/lapsehq/lapse/payment/wechatpay/wechatpaytest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	gatewaytest.Run(t, gatewaytest.Harness{
		Timeout: timeout, SignedResponses: true, PartialRefunds: true,
		New: func(t *testing.T) (payment.Gateway, gatewaytest.Fake) {
			f, u := newFake(t)
			return newGateway(t, u), f
		},
	})
}

// A response correctly signed but more than five minutes off the clock is
// refused, whichever way; REVOKED and PAYERROR are closed; USERPAYING
// refuses a close (202), which is then an error.
func TestQueryDetails(t *testing.T) {
	t.Parallel()
	f, u := newFake(t)
	gw := newGateway(t, u)
	ctx := context.Background()
	f.SetState("p-old", "NOTPAY", 0)
	for _, skew := range []time.Duration{-6 * time.Minute, 6 * time.Minute} {
		f.SetSkew(skew)
		if st, err := gw.QueryAttempt(ctx, "o", "p-old"); err == nil || !strings.Contains(err.Error(), "off the clock") {
			t.Fatalf("a response signed %s off: %+v %v", skew, st, err)
		}
	}
	f.SetSkew(4 * time.Minute)
	if st, err := gw.QueryAttempt(ctx, "o", "p-old"); err != nil || st.State != payment.StateNotPaid {
		t.Fatalf("a response signed 4 min off: %+v %v", st, err)
	}
	f.SetSkew(0)
	for _, s := range []string{"REVOKED", "PAYERROR"} {
		f.SetState("p-"+s, s, 0)
		if st, err := gw.QueryAttempt(ctx, "o", "p-"+s); err != nil || st.State != payment.StateClosed {
			t.Fatalf("%s: %+v %v", s, st, err)
		}
	}
	f.SetState("p-paying", "USERPAYING", 0)
	if err := gw.CloseAttempt(ctx, "o", "p-paying"); err == nil || errors.Is(err, payment.ErrAlreadyPaid) {
		t.Fatalf("close while the user is paying: %v, want an error", err)
	}
	if tr := f.Trade("p-paying"); tr.State != "USERPAYING" {
		t.Fatalf("p-paying is %s", tr.State)
	}
	// Another platform certificate than the one that signed: refused.
	k := keys()
	other, err := wechatpay.New(wechatpay.Config{MchID: mchID, SerialNo: merchantSerial, PrivateKey: k.Merchant,
		PlatformCerts: []*x509.Certificate{k.StrangerCert}, APIBase: u, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.QueryAttempt(ctx, "o", "p-old"); err == nil || !strings.Contains(err.Error(), "not configured") {
		t.Fatalf("a response from an unconfigured certificate: %v", err)
	}
}

// A transaction's currency comes with its amount: amount.currency, the one
// amount.total (the merchant's amount) is in — not payer_currency, the
// buyer's yuan for a cross-border trade.
func TestQueryCarriesTheCurrency(t *testing.T) {
	t.Parallel()
	f, u := newFake(t)
	gw := newGateway(t, u)
	for no, c := range map[string]string{"p-cny": "", "p-usd": "USD", "p-jpy": "JPY"} {
		f.SetPriced(no, 1299, c)
		want := c
		if want == "" {
			want = "CNY"
		}
		st, err := gw.QueryAttempt(context.Background(), "o", no)
		if err != nil || st.State != payment.StatePaid || st.AmountCents != 1299 || st.Currency != want {
			t.Errorf("%s: %+v, %v; want PAID 1299 %s", no, st, err, want)
		}
	}
}

// A payment notification carries the currency the same way.
func TestNotificationCarriesTheCurrency(t *testing.T) {
	t.Parallel()
	k := keys()
	n, err := wechatpay.NewNotifier(wechatpay.Config{MchID: mchID, PlatformCerts: []*x509.Certificate{k.PlatformCert}, APIv3Key: k.APIv3})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ currency, want string }{{"", "CNY"}, {"USD", "USD"}, {"JPY", "JPY"}} {
		body := notice{id: "n-" + c.want, no: "pay-1", state: "SUCCESS", cents: 1299, currency: c.currency}.body(t)
		reps, err := n.Verify(context.Background(), headers(k.Platform, platformSerial(), time.Now(), body), body)
		if err != nil || len(reps) != 1 || reps[0].Currency != c.want || reps[0].AmountCents != 1299 {
			t.Errorf("amount.currency %q: %+v, %v; want one report of 1299 %s", c.currency, reps, err, c.want)
		}
	}
}

// The adapter takes orders in yuan only (its Config names no other
// currency): lapse refuses an order in another at create.
func TestAcceptsOnlyCNY(t *testing.T) {
	t.Parallel()
	_, u := newFake(t)
	var gw payment.Gateway = newGateway(t, u)
	cg, ok := gw.(payment.CurrencyGateway)
	if !ok {
		t.Fatal("the WeChat Pay gateway is not a payment.CurrencyGateway")
	}
	for cur, want := range map[string]bool{"CNY": true, "USD": false, "JPY": false, "cny": false, "": false} {
		if got := cg.AcceptsCurrency(cur); got != want {
			t.Errorf("AcceptsCurrency(%q) = %v, want %v", cur, got, want)
		}
	}
}

func TestTimeExpire(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 31, 16, 30, 5, 999_000_000, time.UTC)
	if got := wechatpay.TimeExpire(at); got != "2026-12-31T16:30:05Z" {
		t.Fatalf("TimeExpire = %q", got)
	}
	if got := wechatpay.TimeExpire(at.In(time.FixedZone("CST", 8*3600))); got != "2027-01-01T00:30:05+08:00" {
		t.Fatalf("TimeExpire in Beijing = %q", got)
	}
}

func TestKeyFiles(t *testing.T) {
	t.Parallel()
	k := keys()
	der, err := x509.MarshalPKCS8PrivateKey(k.Merchant)
	if err != nil {
		t.Fatal(err)
	}
	got, err := wechatpay.ParsePrivateKey(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if err != nil || !got.Equal(k.Merchant) {
		t.Fatalf("ParsePrivateKey: %v", err)
	}
	if _, err := wechatpay.ParsePrivateKey(der); err == nil {
		t.Fatal("a key without PEM was read")
	}
	certs := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.PlatformCert.Raw}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.StrangerCert.Raw})...)
	cs, err := wechatpay.ParseCertificates(certs)
	if err != nil || len(cs) != 2 {
		t.Fatalf("ParseCertificates: %d %v", len(cs), err)
	}
	if key, err := wechatpay.ParseAPIv3Key(append(append([]byte(nil), k.APIv3...), '\n')); err != nil || string(key) != string(k.APIv3) {
		t.Fatalf("ParseAPIv3Key: %v", err)
	}
	if _, err := wechatpay.ParseAPIv3Key([]byte("short-secret-value")); err == nil || strings.Contains(err.Error(), "short-secret") {
		t.Fatalf("a short APIv3 key: %v (never shown)", err)
	}
}

// notify builds a payment notification of WeChat Pay's documented shape:
// the transaction encrypted under apiV3Key, the body signed by key.
type notice struct {
	id, no, state string
	cents         int64
	currency      string // amount.currency; "" is CNY
	mchID         string
	apiV3Key      []byte
}

func (n notice) body(t *testing.T) []byte {
	t.Helper()
	tx := wechatpaytest.Transaction(n.no, wechatpaytest.Trade{State: n.state, Cents: n.cents, Currency: n.currency})
	if n.mchID != "" {
		tx["mchid"] = n.mchID
	}
	summary := map[string]string{"SUCCESS": "支付成功"}[n.state]
	body, err := wechatpaytest.Notification{ID: n.id, EventType: "TRANSACTION.SUCCESS", Summary: summary, OriginalType: "transaction",
		Resource: tx, APIv3Key: n.apiV3Key}.Body()
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func TestNotifications(t *testing.T) {
	t.Parallel()
	k := keys()
	n, err := wechatpay.NewNotifier(wechatpay.Config{MchID: mchID, PlatformCerts: []*x509.Certificate{k.PlatformCert}, APIv3Key: k.APIv3})
	if err != nil {
		t.Fatal(err)
	}
	l := gatewaytest.NewLapse(t, gatewaytest.LapseConfig{Notifiers: []payment.Notifier{n}})
	l.Paying(t, "o-1", "pay-o-1", 12345, time.Hour)
	l.Paying(t, "o-2", "pay-o-2", 100, time.Hour)
	now := time.Now()
	refused := func(name string, h http.Header, body []byte) {
		t.Helper()
		r := l.Notify(t, "wechatpay", h, body)
		var b struct{ Code, Message string }
		if r.Status != http.StatusBadRequest || json.Unmarshal(r.Body, &b) != nil || b.Code != "FAIL" || b.Message == "" {
			t.Fatalf("%s: %d %s, want 400 {\"code\":\"FAIL\",…}", name, r.Status, r.Body)
		}
		if o := l.Order(t, "o-1"); o.Status != order.Paying {
			t.Fatalf("%s: o-1 is %s", name, o.Status)
		}
	}
	good := notice{id: "EV-2026060800001", no: "pay-o-1", state: "SUCCESS", cents: 12345}.body(t)
	platform := platformSerial()

	refused("stale", headers(k.Platform, platform, now.Add(-6*time.Minute), good), good)
	refused("from the future", headers(k.Platform, platform, now.Add(6*time.Minute), good), good)
	refused("signed with another key", headers(k.Other, platform, now, good), good)
	refused("signed by an unconfigured certificate", headers(k.Other, "ABCDEF", now, good), good)
	forged := headers(k.Platform, platform, now, good)
	forged.Set("Wechatpay-Signature", base64.StdEncoding.EncodeToString(make([]byte, 256)))
	refused("forged signature", forged, good)
	refused("WeChat Pay's signature probe", func() http.Header {
		h := headers(k.Platform, platform, now, good)
		h.Set("Wechatpay-Signature", "WECHATPAY/SIGNTEST/"+h.Get("Wechatpay-Signature"))
		return h
	}(), good)
	refused("unsigned", http.Header{"Content-Type": {"application/json"}}, good)
	tampered := []byte(strings.Replace(string(good), "EV-2026060800001", "EV-2026060800002", 1))
	refused("tampered after signing", headers(k.Platform, platform, now, good), tampered)
	// The next ones are signed by the platform: what they carry is wrong.
	cheap := notice{id: "EV-x", no: "pay-o-1", state: "SUCCESS", cents: 1, apiV3Key: []byte("0123456789abcdef0123456789abcdef")}.body(t)
	refused("encrypted with another APIv3 key", headers(k.Platform, platform, now, cheap), cheap)
	theirs := notice{id: "EV-y", no: "pay-o-1", state: "SUCCESS", cents: 12345, mchID: "1900000001"}.body(t)
	refused("another merchant's", headers(k.Platform, platform, now, theirs), theirs)
	var env map[string]any
	_ = json.Unmarshal(good, &env)
	res := env["resource"].(map[string]any)
	ct, _ := base64.StdEncoding.DecodeString(res["ciphertext"].(string))
	ct[len(ct)/2] ^= 1
	res["ciphertext"] = base64.StdEncoding.EncodeToString(ct)
	flipped, _ := json.Marshal(env)
	refused("a ciphertext bit flipped", headers(k.Platform, platform, now, flipped), flipped)

	// Valid: applied, 204.
	r := l.Notify(t, "wechatpay", headers(k.Platform, platform, now, good), good)
	if r.Status != http.StatusNoContent || len(r.Body) != 0 {
		t.Fatalf("valid: %d %s", r.Status, r.Body)
	}
	paid := l.Order(t, "o-1")
	if paid.Status != order.Paid || paid.PaymentID != "pay-o-1" {
		t.Fatalf("o-1: %s by %q", paid.Status, paid.PaymentID)
	}
	// Sent again as WeChat Pay retries (signed afresh): nothing changes.
	if r := l.Notify(t, "wechatpay", headers(k.Platform, platform, time.Now(), good), good); r.Status != http.StatusNoContent {
		t.Fatalf("replay: %d %s", r.Status, r.Body)
	}
	if again := l.Order(t, "o-1"); again.Version != paid.Version {
		t.Fatalf("the replay changed o-1: version %d → %d", paid.Version, again.Version)
	}
	// Closed: the attempt failed; o-2 is back to PENDING.
	closed := notice{id: "EV-2026060800003", no: "pay-o-2", state: "CLOSED"}.body(t)
	if r := l.Notify(t, "wechatpay", headers(k.Platform, platform, now, closed), closed); r.Status != http.StatusNoContent {
		t.Fatalf("CLOSED: %d %s", r.Status, r.Body)
	}
	if o := l.Order(t, "o-2"); o.Status != order.Pending {
		t.Fatalf("o-2 after CLOSED: %s", o.Status)
	}
}

// The gateway check end to end: a real lapse asks the fake WeChat Pay about
// PAYING orders past their deadline.
func TestGatewayCheck(t *testing.T) {
	t.Parallel()
	f, u := newFake(t)
	l := gatewaytest.NewLapse(t, gatewaytest.LapseConfig{Gateway: newGateway(t, u)})

	// Paid, the notification lost: PAID.
	l.Paying(t, "paid", "pay-paid", 2550, 2*time.Second)
	f.SetState("pay-paid", "SUCCESS", 2550)
	if o := l.WaitStatus(t, "paid", order.Paid, 10*time.Second); o.PaymentID != "pay-paid" {
		t.Fatalf("paid by %q", o.PaymentID)
	}
	// Not paid: closed at WeChat Pay, then cancelled.
	l.Paying(t, "left", "pay-left", 100, 2*time.Second)
	f.SetState("pay-left", "NOTPAY", 0)
	l.WaitStatus(t, "left", order.Cancelled, 10*time.Second)
	if tr := f.Trade("pay-left"); tr.State != "CLOSED" {
		t.Fatalf("pay-left is %s at WeChat Pay", tr.State)
	}
	// The user is entering a password: past the pending maximum, lapse
	// tries to close, WeChat Pay refuses (USER_PAYING), the order stays
	// PAYING; the payment goes through and the order is PAID.
	closes := f.Count("close")
	l.Paying(t, "typing", "pay-typing", 300, 2*time.Second)
	f.SetState("pay-typing", "USERPAYING", 0)
	deadline := time.Now().Add(10 * time.Second)
	for f.Count("close") == closes {
		if time.Now().After(deadline) {
			t.Fatal("no close of the trade in progress after the pending maximum")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if o := l.Order(t, "typing"); o.Status != order.Paying {
		t.Fatalf("typing is %s while the user pays", o.Status)
	}
	f.SetState("pay-typing", "SUCCESS", 300)
	l.WaitStatus(t, "typing", order.Paid, 20*time.Second)
}

// lockedBuffer is a log destination the test reads while lapse writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A notification over 1 MiB is refused for good — 413 with WeChat Pay's
// {"code":"FAIL"} body, not 500, which WeChat Pay would send again — and
// logged at WARN without its body.
func TestOversizedNotificationIsRefusedForGood(t *testing.T) {
	t.Parallel()
	k := keys()
	n, err := wechatpay.NewNotifier(wechatpay.Config{MchID: mchID, PlatformCerts: []*x509.Certificate{k.PlatformCert}, APIv3Key: k.APIv3})
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	l := gatewaytest.NewLapse(t, gatewaytest.LapseConfig{Notifiers: []payment.Notifier{n},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	l.Paying(t, "o-1", "pay-o-1", 1299, time.Hour)
	good := notice{id: "EV-big", no: "pay-o-1", state: "SUCCESS", cents: 1299}.body(t)
	big := append(good[:len(good)-1:len(good)-1], []byte(`,"pad":"`+strings.Repeat("PADDING", (1<<20)/7+1)+`"}`)...)
	r := l.Notify(t, "wechatpay", headers(k.Platform, platformSerial(), time.Now(), big), big)
	var body struct{ Code, Message string }
	if r.Status != http.StatusRequestEntityTooLarge || json.Unmarshal(r.Body, &body) != nil || body.Code != "FAIL" || body.Message == "" {
		t.Fatalf("oversized: %d %s, want 413 {\"code\":\"FAIL\",…}", r.Status, r.Body)
	}
	if o := l.Order(t, "o-1"); o.Status != order.Paying {
		t.Fatalf("o-1 after an oversized notification: %s", o.Status)
	}
	got := logs.String()
	if !strings.Contains(got, "level=WARN") || !strings.Contains(got, "gateway=wechatpay") || !strings.Contains(got, "too large") {
		t.Fatalf("no WARN line naming the gateway and the size:\n%s", got)
	}
	if strings.Contains(got, "PADDINGPADDING") {
		t.Fatal("the notification's body was logged")
	}
}
