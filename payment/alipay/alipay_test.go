package alipay_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/alipay"
	"github.com/lapsehq/lapse/payment/gatewaytest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	gatewaytest.Run(t, gatewaytest.Harness{
		Timeout: timeout, NoPending: true, SignedResponses: true, PartialRefunds: true,
		New: func(t *testing.T) (payment.Gateway, gatewaytest.Fake) {
			f, u := newFake(t)
			return newGateway(t, u), f
		},
	})
}

// TRADE_FINISHED (past the refund window) is paid too; the amount is read
// exactly; a closed trade is asked about no further by close.
func TestQueryStates(t *testing.T) {
	t.Parallel()
	f, u := newFake(t)
	gw := newGateway(t, u)
	ctx := context.Background()
	f.SetStatus("p-fin", "TRADE_FINISHED", 1999999)
	st, err := gw.QueryAttempt(ctx, "o", "p-fin")
	if err != nil || st != (payment.Status{State: payment.StatePaid, PaymentID: "p-fin", AmountCents: 1999999, Currency: "CNY"}) {
		t.Fatalf("TRADE_FINISHED: %+v %v", st, err)
	}
	// Close of a paid trade: trade.close says ACQ.TRADE_STATUS_ERROR, the
	// query tells it is paid.
	if err := gw.CloseAttempt(ctx, "o", "p-fin"); !errors.Is(err, payment.ErrAlreadyPaid) {
		t.Fatalf("close of TRADE_FINISHED: %v", err)
	}
	if n := f.Calls("alipay.trade.query"); n != 2 {
		t.Fatalf("%d queries, want 2 (one after the close's status error)", n)
	}
}

// A trade's currency comes with its amount: trans_currency (the currency a
// cross-border trade is priced in) when the answer has one, else CNY (a
// domestic trade's total_amount is in yuan).
func TestQueryCarriesTheCurrency(t *testing.T) {
	t.Parallel()
	f, u := newFake(t)
	gw := newGateway(t, u)
	f.SetPriced("p-cny", 1299, "")
	f.SetPriced("p-usd", 1299, "USD")
	f.SetPriced("p-jpy", 1299, "JPY")
	for no, want := range map[string]string{"p-cny": "CNY", "p-usd": "USD", "p-jpy": "JPY"} {
		st, err := gw.QueryAttempt(context.Background(), "o", no)
		if err != nil || st.State != payment.StatePaid || st.Currency != want {
			t.Errorf("%s: %+v, %v; want PAID in %s", no, st, err, want)
		}
	}
}

// A notification carries the trade's currency the same way.
func TestNotificationCarriesTheCurrency(t *testing.T) {
	t.Parallel()
	k := keys()
	n, err := alipay.NewNotifier(alipay.Config{AppID: appID, AlipayPublicKey: &k.alipay.PublicKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ field, value, want string }{{"", "", "CNY"}, {"trans_currency", "USD", "USD"}, {"currency", "JPY", "JPY"}} {
		v := notification("pay-1", "TRADE_SUCCESS", "12.99", "n-"+c.want)
		if c.field != "" {
			v.Set(c.field, c.value)
		}
		reps, err := n.Verify(context.Background(), formHeader, signed(v))
		if err != nil || len(reps) != 1 || reps[0].Currency != c.want || reps[0].AmountCents != 1299 {
			t.Errorf("%s=%q: %+v, %v; want one report of 1299 %s", c.field, c.value, reps, err, c.want)
		}
	}
}

// The adapter opens trades in yuan only (its Config names no other
// currency): lapse refuses an order in another at create.
func TestAcceptsOnlyCNY(t *testing.T) {
	t.Parallel()
	_, u := newFake(t)
	var gw payment.Gateway = newGateway(t, u)
	cg, ok := gw.(payment.CurrencyGateway)
	if !ok {
		t.Fatal("the Alipay gateway is not a payment.CurrencyGateway")
	}
	for cur, want := range map[string]bool{"CNY": true, "USD": false, "JPY": false, "cny": false, "": false} {
		if got := cg.AcceptsCurrency(cur); got != want {
			t.Errorf("AcceptsCurrency(%q) = %v, want %v", cur, got, want)
		}
	}
}

func TestParseAmount(t *testing.T) {
	t.Parallel()
	good := map[string]int64{"0.01": 1, "12.34": 1234, "12.3": 1230, "12": 1200, "0": 0, "0.00": 0, "88.88": 8888,
		"100000000.99": 10000000099, "999999999999999.99": 99999999999999999, "007.10": 710}
	for s, want := range good {
		if got, err := alipay.ParseAmount(s); err != nil || got != want {
			t.Errorf("ParseAmount(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", ".", "1.", ".5", "-1.00", "+1", "1.234", "1e2", " 1.00", "1.00 ", "1,00", "0x10", "１.00",
		"9999999999999999.00", "1.2.3", "NaN"} {
		if got, err := alipay.ParseAmount(s); err == nil {
			t.Errorf("ParseAmount(%q) = %d, want an error", s, got)
		}
	}
	for _, c := range []int64{0, 1, 10, 99, 100, 1234, 10000000099} {
		if got, err := alipay.ParseAmount(alipay.FormatAmount(c)); err != nil || got != c {
			t.Errorf("round trip of %d: %q → %d %v", c, alipay.FormatAmount(c), got, err)
		}
	}
}

// The signing string of Alipay's documented example.
func TestSignContent(t *testing.T) {
	t.Parallel()
	v := url.Values{
		"method": {"alipay.mobile.public.menu.add"}, "charset": {"GBK"}, "sign_type": {"RSA2"}, "timestamp": {"2014-07-24 03:07:50"},
		"biz_content": {`{"button":[{"actionParam":"ZFB_HFCZ","actionType":"out","name":"话费充值"}]}`},
		"version":     {"1.0"}, "app_id": {"2014072300007148"}, "sign": {"whatever"}, "empty": {""},
	}
	got, err := alipay.SignContent(v, "sign")
	want := `app_id=2014072300007148&biz_content={"button":[{"actionParam":"ZFB_HFCZ","actionType":"out","name":"话费充值"}]}&charset=GBK&method=alipay.mobile.public.menu.add&sign_type=RSA2&timestamp=2014-07-24 03:07:50&version=1.0`
	if err != nil || got != want {
		t.Fatalf("SignContent:\n got %s\nwant %s (%v)", got, want, err)
	}
	v.Add("app_id", "again")
	if _, err := alipay.SignContent(v, "sign"); err == nil {
		t.Fatal("a parameter given twice was signed")
	}
}

func TestTimeExpire(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 31, 16, 30, 5, 999_000_000, time.UTC)
	if got := alipay.TimeExpire(at); got != "2027-01-01 00:30:05" {
		t.Fatalf("TimeExpire = %q", got)
	}
}

func TestKeysReadAsPEMOrBareBase64(t *testing.T) {
	t.Parallel()
	k := keys().app
	pkcs8, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	pkix, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string][]byte{
		"pkcs8 pem":   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
		"pkcs1 pem":   pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}),
		"pkcs8 bare":  []byte(base64.StdEncoding.EncodeToString(pkcs8) + "\n"),
		"pkcs1 bare ": []byte(base64.StdEncoding.EncodeToString(x509.MarshalPKCS1PrivateKey(k))),
	} {
		got, err := alipay.ParsePrivateKey(in)
		if err != nil || !got.Equal(k) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, in := range map[string][]byte{
		"pkix pem":  pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkix}),
		"pkix bare": []byte(base64.StdEncoding.EncodeToString(pkix)),
	} {
		got, err := alipay.ParsePublicKey(in)
		if err != nil || !got.Equal(&k.PublicKey) {
			t.Errorf("%s: %v", name, err)
		}
	}
	secret := base64.StdEncoding.EncodeToString(pkcs8)
	if _, err := alipay.ParsePrivateKey([]byte(secret[:len(secret)-8] + "!!!!====")); err == nil || strings.Contains(err.Error(), secret[:20]) {
		t.Fatalf("a broken key: %v (the error must not show it)", err)
	}
}

// notification is an unsigned notification of Alipay's documented shape.
func notification(no, status, amount, notifyID string) url.Values {
	return url.Values{
		"gmt_create": {"2026-01-01 12:00:00"}, "charset": {"utf-8"}, "seller_email": {"shop@example.com"}, "subject": {"订单"},
		"buyer_id": {"2088102122524333"}, "invoice_amount": {amount}, "notify_id": {notifyID},
		"fund_bill_list": {`[{"amount":"` + amount + `","fundChannel":"ALIPAYACCOUNT"}]`}, "notify_type": {"trade_status_sync"},
		"trade_status": {status}, "receipt_amount": {amount}, "app_id": {appID}, "buyer_pay_amount": {amount},
		"sign_type": {"RSA2"}, "seller_id": {"2088102119685838"}, "gmt_payment": {"2026-01-01 12:00:05"},
		"notify_time": {"2026-01-01 12:00:06"}, "version": {"1.0"}, "out_trade_no": {no}, "total_amount": {amount},
		"trade_no": {"2026010122001424330501234567"}, "auth_app_id": {appID}, "buyer_logon_id": {"csq***@sandbox.com"},
		"point_amount": {"0.00"}, "passback_params": {""},
	}
}

// signed signs v with Alipay's key and returns it form-encoded.
func signed(v url.Values) []byte {
	v.Set("sign", rsa2(keys().alipay, []byte(signContent(v, "sign", "sign_type"))))
	return []byte(v.Encode())
}

var formHeader = http.Header{"Content-Type": {"application/x-www-form-urlencoded; charset=utf-8"}}

func TestNotifications(t *testing.T) {
	t.Parallel()
	k := keys()
	n, err := alipay.NewNotifier(alipay.Config{AppID: appID, AlipayPublicKey: &k.alipay.PublicKey})
	if err != nil {
		t.Fatal(err)
	}
	l := gatewaytest.NewLapse(t, gatewaytest.LapseConfig{Notifiers: []payment.Notifier{n}})
	l.Paying(t, "o-1", "pay-o-1", 8888, time.Hour)
	l.Paying(t, "o-2", "pay-o-2", 100, time.Hour)
	send := func(body []byte) gatewaytest.Response { t.Helper(); return l.Notify(t, "alipay", formHeader, body) }
	refused := func(name string, body []byte) {
		t.Helper()
		r := send(body)
		if r.Status != http.StatusBadRequest || string(r.Body) != "failure" {
			t.Fatalf("%s: %d %q, want 400 failure", name, r.Status, r.Body)
		}
		if o := l.Order(t, "o-1"); o.Status != order.Paying {
			t.Fatalf("%s: o-1 is %s", name, o.Status)
		}
	}

	// Forged: signed by another key; no signature; tampered after signing;
	// another app's; a parameter twice; RSA (SHA1) claimed.
	v := notification("pay-o-1", "TRADE_SUCCESS", "88.88", "n-1")
	v.Set("sign", rsa2(k.other, []byte(signContent(v, "sign", "sign_type"))))
	refused("signed with another key", []byte(v.Encode()))
	v.Del("sign")
	refused("unsigned", []byte(v.Encode()))
	v = notification("pay-o-1", "TRADE_SUCCESS", "0.01", "n-1")
	signed(v)
	v.Set("total_amount", "88.88")
	refused("tampered amount", []byte(v.Encode()))
	v = notification("pay-o-2", "TRADE_SUCCESS", "88.88", "n-1")
	signed(v)
	v.Set("out_trade_no", "pay-o-1")
	refused("tampered out_trade_no", []byte(v.Encode()))
	v = notification("pay-o-1", "TRADE_SUCCESS", "88.88", "n-1")
	v.Set("app_id", "2021000000000999")
	refused("another app's", signed(v))
	v = notification("pay-o-1", "TRADE_SUCCESS", "88.88", "n-1")
	body := signed(v)
	refused("a parameter twice", append(body, []byte("&total_amount=0.01")...))
	v = notification("pay-o-1", "TRADE_SUCCESS", "88.88", "n-1")
	v.Set("sign_type", "RSA")
	refused("sign_type RSA", signed(v))
	refused("not a form", []byte("%zz"))

	// Waiting for the buyer: acknowledged, nothing to do.
	if r := send(signed(notification("pay-o-1", "WAIT_BUYER_PAY", "88.88", "n-0"))); r.Status != 200 || string(r.Body) != "success" {
		t.Fatalf("WAIT_BUYER_PAY: %d %q", r.Status, r.Body)
	}
	before := l.Order(t, "o-1")
	if before.Status != order.Paying {
		t.Fatalf("after WAIT_BUYER_PAY: %s", before.Status)
	}

	// Paid: applied, answered exactly "success".
	good := signed(notification("pay-o-1", "TRADE_SUCCESS", "88.88", "n-1"))
	r := send(good)
	if r.Status != http.StatusOK || string(r.Body) != "success" || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("valid: %d %q %q", r.Status, r.Body, r.Header.Get("Content-Type"))
	}
	paid := l.Order(t, "o-1")
	if paid.Status != order.Paid || paid.PaymentID != "pay-o-1" {
		t.Fatalf("o-1 after its notification: %s by %q", paid.Status, paid.PaymentID)
	}
	// Replayed: acknowledged, nothing changes.
	if r := send(good); r.Status != http.StatusOK || string(r.Body) != "success" {
		t.Fatalf("replay: %d %q", r.Status, r.Body)
	}
	if again := l.Order(t, "o-1"); again.Version != paid.Version || again.Status != order.Paid {
		t.Fatalf("the replay changed o-1: version %d → %d", paid.Version, again.Version)
	}

	// Closed: the attempt failed, the order back to PENDING.
	if r := send(signed(notification("pay-o-2", "TRADE_CLOSED", "1.00", "n-2"))); r.Status != http.StatusOK || string(r.Body) != "success" {
		t.Fatalf("TRADE_CLOSED: %d %q", r.Status, r.Body)
	}
	if o := l.Order(t, "o-2"); o.Status != order.Pending {
		t.Fatalf("o-2 after TRADE_CLOSED: %s, want PENDING", o.Status)
	}
}

// The gateway check end to end: a real lapse asks the fake Alipay about a
// PAYING order past its deadline.
func TestGatewayCheck(t *testing.T) {
	t.Parallel()
	f, u := newFake(t)
	l := gatewaytest.NewLapse(t, gatewaytest.LapseConfig{Gateway: newGateway(t, u)})

	// Paid at Alipay, the notification lost: PAID.
	l.Paying(t, "paid", "pay-paid", 2550, 2*time.Second)
	f.SetStatus("pay-paid", "TRADE_SUCCESS", 2550)
	if o := l.WaitStatus(t, "paid", order.Paid, 10*time.Second); o.PaymentID != "pay-paid" {
		t.Fatalf("paid by %q", o.PaymentID)
	}
	// The buyer opened the page and left: the trade is closed, then the
	// order cancelled.
	l.Paying(t, "left", "pay-left", 100, 2*time.Second)
	f.SetStatus("pay-left", "WAIT_BUYER_PAY", 0)
	l.WaitStatus(t, "left", order.Cancelled, 10*time.Second)
	if tr, _ := f.Trade("pay-left"); tr.Status != "TRADE_CLOSED" {
		t.Fatalf("pay-left is %s at Alipay, want TRADE_CLOSED", tr.Status)
	}
	// Never scanned: Alipay has no trade; cancelled.
	l.Paying(t, "never", "pay-never", 100, 2*time.Second)
	l.WaitStatus(t, "never", order.Cancelled, 10*time.Second)
	if f.Calls("alipay.trade.close") < 2 {
		t.Fatal("the never-scanned trade was not closed")
	}
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

// A notification over 1 MiB is refused for good — 413 with "failure", not
// 503, which Alipay would send again for a day — and logged at WARN
// without its body.
func TestOversizedNotificationIsRefusedForGood(t *testing.T) {
	t.Parallel()
	k := keys()
	n, err := alipay.NewNotifier(alipay.Config{AppID: appID, AlipayPublicKey: &k.alipay.PublicKey})
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	l := gatewaytest.NewLapse(t, gatewaytest.LapseConfig{Notifiers: []payment.Notifier{n},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	l.Paying(t, "o-1", "pay-o-1", 8888, time.Hour)
	v := notification("pay-o-1", "TRADE_SUCCESS", "88.88", "n-big")
	v.Set("body", strings.Repeat("PADDING", (1<<20)/7+1))
	r := l.Notify(t, "alipay", formHeader, signed(v))
	if r.Status != http.StatusRequestEntityTooLarge || string(r.Body) != "failure" {
		t.Fatalf("oversized: %d %q, want 413 failure", r.Status, r.Body)
	}
	if o := l.Order(t, "o-1"); o.Status != order.Paying {
		t.Fatalf("o-1 after an oversized notification: %s", o.Status)
	}
	got := logs.String()
	if !strings.Contains(got, "level=WARN") || !strings.Contains(got, "gateway=alipay") || !strings.Contains(got, "too large") {
		t.Fatalf("no WARN line naming the gateway and the size:\n%s", got)
	}
	if strings.Contains(got, "PADDINGPADDING") {
		t.Fatal("the notification's body was logged")
	}
}
