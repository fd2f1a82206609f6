package alipay_test

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/alipay"
	"github.com/lapsehq/lapse/payment/gatewaytest"
)

const appID = "2021000000000001"

// The test's keys: the app's (signs requests), Alipay's (signs responses
// and notifications), and an attacker's.
var keys = sync.OnceValue(func() (k struct{ app, alipay, other *rsa.PrivateKey }) {
	gen := func() *rsa.PrivateKey {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		return key
	}
	k.app, k.alipay, k.other = gen(), gen(), gen()
	return k
})

// signContent is the RSA2 signing string, written here from Alipay's
// documentation independently of the package's: the non-empty parameters
// but the excluded ones, sorted, k=v joined with &.
func signContent(v url.Values, exclude ...string) string {
	var keys []string
	for k := range v {
		skip := v.Get(k) == ""
		for _, x := range exclude {
			skip = skip || k == x
		}
		if !skip {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + v.Get(k)
	}
	return strings.Join(parts, "&")
}

func rsa2(key *rsa.PrivateKey, content []byte) string {
	sum := sha256.Sum256(content)
	sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, sum[:])
	if err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(sig)
}

func rsa2Verify(key *rsa.PublicKey, content []byte, sig string) bool {
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		return false
	}
	sum := sha256.Sum256(content)
	return rsa.VerifyPKCS1v15(key, crypto.SHA256, sum[:], raw) == nil
}

type trade struct {
	status string
	cents  int64
	// currency, when set, is answered as trans_currency (a cross-border
	// trade priced in it); a domestic trade has none.
	currency string
}

// fakeAlipay plays Alipay's OpenAPI gateway for trade.query, trade.close,
// trade.refund and trade.fastpay.refund.query with the documented request
// and response shapes (one refund per out_request_no of a trade; a trade
// refunded whole is TRADE_CLOSED). It verifies
// every request's signature (a request that does not verify fails the test)
// and signs its responses with Alipay's key.
type fakeAlipay struct {
	t       *testing.T
	release chan struct{}

	mu      sync.Mutex
	trades  map[string]trade            // by out_trade_no
	refunds map[string]map[string]int64 // out_trade_no → out_request_no → fen
	fault   gatewaytest.Fault
	methods map[string]int
	biz     map[string]string // method → the last biz_content
}

func newFake(t *testing.T) (*fakeAlipay, string) {
	f := &fakeAlipay{t: t, release: make(chan struct{}), trades: map[string]trade{}, methods: map[string]int{},
		refunds: map[string]map[string]int64{}, biz: map[string]string{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(f.release) }) // runs first: hung requests end
	return f, srv.URL + "/gateway.do"
}

func newGateway(t *testing.T, url string) *alipay.Gateway {
	t.Helper()
	k := keys()
	gw, err := alipay.New(alipay.Config{AppID: appID, PrivateKey: k.app, AlipayPublicKey: &k.alipay.PublicKey,
		GatewayURL: url, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return gw
}

const timeout = 250 * time.Millisecond

func (f *fakeAlipay) Set(orderID, paymentID string, st gatewaytest.Trade, cents int64) {
	no := paymentID
	if no == "" {
		no = orderID
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch st {
	case gatewaytest.TradePaid:
		f.trades[no] = trade{"TRADE_SUCCESS", cents, ""}
	case gatewaytest.TradeNotPaid:
		f.trades[no] = trade{"WAIT_BUYER_PAY", 0, ""}
	case gatewaytest.TradeClosed:
		f.trades[no] = trade{"TRADE_CLOSED", 0, ""}
	case gatewaytest.TradeUnknown:
		delete(f.trades, no)
	case gatewaytest.TradeUnmapped:
		f.trades[no] = trade{"TRADE_REVERSED", 0, ""}
	default:
		panic(fmt.Sprintf("alipay has no %s trade", st))
	}
}

func (f *fakeAlipay) setStatus(no, status string, cents int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trades[no] = trade{status, cents, ""}
}

// setPriced sets a paid trade priced in currency (trans_currency).
func (f *fakeAlipay) setPriced(no string, cents int64, currency string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trades[no] = trade{"TRADE_SUCCESS", cents, currency}
}

func (f *fakeAlipay) trade(no string) (trade, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tr, ok := f.trades[no]
	return tr, ok
}

func (f *fakeAlipay) calls(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.methods[method]
}

// Refunds implements gatewaytest.RefundFake.
func (f *fakeAlipay) Refunds(orderID, paymentID string) int {
	no := paymentID
	if no == "" {
		no = orderID
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.refunds[no])
}

// lastBiz is the biz_content of the last request of method.
func (f *fakeAlipay) lastBiz(method string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.biz[method]
}

func (f *fakeAlipay) Fail(fault gatewaytest.Fault) {
	f.mu.Lock()
	f.fault = fault
	f.mu.Unlock()
}

func (f *fakeAlipay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/gateway.do" {
		f.t.Errorf("fake Alipay: %s %s, want POST /gateway.do", r.Method, r.URL.Path)
		http.NotFound(w, r)
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		f.t.Errorf("fake Alipay: Content-Type %q", ct)
	}
	if err := r.ParseForm(); err != nil {
		f.t.Errorf("fake Alipay: %v", err)
		return
	}
	v := r.PostForm
	for k, vs := range v {
		if len(vs) != 1 {
			f.t.Errorf("fake Alipay: parameter %s given %d times", k, len(vs))
		}
	}
	method := v.Get("method")
	// The request's signature, checked as Alipay does: over every non-empty
	// parameter but sign (sign_type included), with the app's public key.
	if !rsa2Verify(&keys().app.PublicKey, []byte(signContent(v, "sign")), v.Get("sign")) {
		f.t.Errorf("fake Alipay: the request's signature does not verify: %s", signContent(v, "sign"))
		f.write(w, method, map[string]any{"code": "40002", "msg": "Invalid Arguments", "sub_code": "isv.invalid-signature"}, keys().alipay)
		return
	}
	want := map[string]string{"app_id": appID, "format": "JSON", "charset": "utf-8", "sign_type": "RSA2", "version": "1.0"}
	for k, w := range want {
		if v.Get(k) != w {
			f.t.Errorf("fake Alipay: %s=%q, want %q", k, v.Get(k), w)
		}
	}
	ts, err := time.ParseInLocation("2006-01-02 15:04:05", v.Get("timestamp"), time.FixedZone("CST", 8*3600))
	if err != nil || time.Since(ts).Abs() > 5*time.Minute {
		f.t.Errorf("fake Alipay: timestamp %q is not Beijing time now (%v)", v.Get("timestamp"), err)
	}
	var biz struct {
		OutTradeNo   string `json:"out_trade_no"`
		RefundAmount string `json:"refund_amount"`
		OutRequestNo string `json:"out_request_no"`
		RefundReason string `json:"refund_reason"`
	}
	if err := json.Unmarshal([]byte(v.Get("biz_content")), &biz); err != nil || biz.OutTradeNo == "" {
		f.t.Errorf("fake Alipay: biz_content %q: %v", v.Get("biz_content"), err)
	}

	f.mu.Lock()
	fault := f.fault
	f.methods[method]++
	f.biz[method] = v.Get("biz_content")
	tr, ok := f.trades[biz.OutTradeNo]
	var resp map[string]any
	switch method {
	case "alipay.trade.query":
		switch {
		case !ok:
			resp = map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": "ACQ.TRADE_NOT_EXIST", "sub_msg": "交易不存在",
				"out_trade_no": biz.OutTradeNo, "buyer_pay_amount": "0.00", "invoice_amount": "0.00", "point_amount": "0.00", "receipt_amount": "0.00"}
		default:
			resp = map[string]any{"code": "10000", "msg": "Success", "out_trade_no": biz.OutTradeNo, "trade_no": "2026" + biz.OutTradeNo,
				"trade_status": tr.status, "total_amount": alipay.FormatAmount(tr.cents), "buyer_logon_id": "159****5620",
				"buyer_pay_amount": "0.00", "point_amount": "0.00", "receipt_amount": "0.00", "buyer_user_id": "2088101117955611",
				"send_pay_date": "2026-01-01 12:00:00"}
			if tr.currency != "" {
				resp["trans_currency"] = tr.currency
			}
		}
	case "alipay.trade.close":
		switch {
		case !ok:
			resp = map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": "ACQ.TRADE_NOT_EXIST", "sub_msg": "交易不存在"}
		case tr.status == "WAIT_BUYER_PAY":
			if fault == gatewaytest.FaultNone {
				f.trades[biz.OutTradeNo] = trade{"TRADE_CLOSED", 0, ""}
			}
			resp = map[string]any{"code": "10000", "msg": "Success", "out_trade_no": biz.OutTradeNo, "trade_no": "2026" + biz.OutTradeNo}
		default: // paid, finished or closed: documented as ACQ.TRADE_STATUS_ERROR
			resp = map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": "ACQ.TRADE_STATUS_ERROR", "sub_msg": "交易状态不合法"}
		}
	case "alipay.trade.refund":
		resp = f.refund(tr, ok, biz.OutTradeNo, biz.OutRequestNo, biz.RefundAmount, fault == gatewaytest.FaultNone)
	case "alipay.trade.fastpay.refund.query":
		if biz.OutRequestNo == "" {
			f.t.Errorf("fake Alipay: refund query without out_request_no: %s", v.Get("biz_content"))
		}
		switch cents, found := f.refunds[biz.OutTradeNo][biz.OutRequestNo]; {
		case !ok:
			resp = map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": "ACQ.TRADE_NOT_EXIST", "sub_msg": "交易不存在"}
		case !found: // documented: a refund not found is answered without its fields
			resp = map[string]any{"code": "10000", "msg": "Success", "out_trade_no": biz.OutTradeNo, "trade_no": "2026" + biz.OutTradeNo}
		default:
			resp = map[string]any{"code": "10000", "msg": "Success", "out_trade_no": biz.OutTradeNo, "trade_no": "2026" + biz.OutTradeNo,
				"out_request_no": biz.OutRequestNo, "refund_amount": alipay.FormatAmount(cents), "total_amount": alipay.FormatAmount(tr.cents),
				"refund_status": "REFUND_SUCCESS"}
		}
	default:
		f.t.Errorf("fake Alipay: method %q", method)
		resp = map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": "isv.invalid-method"}
	}
	f.mu.Unlock()

	switch fault {
	case gatewaytest.FaultServerError:
		http.Error(w, "<html>502 Bad Gateway</html>", http.StatusBadGateway)
	case gatewaytest.FaultHang:
		select {
		case <-r.Context().Done():
		case <-f.release:
		}
	case gatewaytest.FaultGarbage:
		w.Header().Set("Content-Type", "text/html;charset=utf-8")
		_, _ = w.Write([]byte("<html><body>系统维护中</body></html>"))
	case gatewaytest.FaultBadSignature:
		f.write(w, method, map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": "ACQ.TRADE_NOT_EXIST", "sub_msg": "交易不存在"}, keys().other)
	default:
		f.write(w, method, resp, keys().alipay)
	}
}

// refund is alipay.trade.refund; call with f.mu held. It changes nothing
// unless apply (the fake is failing the request).
func (f *fakeAlipay) refund(tr trade, known bool, no, requestNo, amount string, apply bool) map[string]any {
	cents, err := alipay.ParseAmount(amount)
	if err != nil || cents <= 0 || requestNo == "" || len(requestNo) > 64 {
		f.t.Errorf("fake Alipay: refund of %q: refund_amount %q, out_request_no %q", no, amount, requestNo)
		return map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": "ACQ.INVALID_PARAMETER", "sub_msg": "参数无效"}
	}
	refunded := int64(0)
	for _, c := range f.refunds[no] {
		refunded += c
	}
	ok := func(change string) map[string]any {
		return map[string]any{"code": "10000", "msg": "Success", "out_trade_no": no, "trade_no": "2026" + no, "buyer_logon_id": "159****5620",
			"fund_change": change, "refund_fee": alipay.FormatAmount(refunded), "send_back_fee": amount}
	}
	fail := func(sub, msg string) map[string]any {
		return map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": sub, "sub_msg": msg}
	}
	switch prev, again := f.refunds[no][requestNo]; {
	case !known:
		return fail("ACQ.TRADE_NOT_EXIST", "交易不存在")
	case again && prev == cents:
		return ok("N") // the same request again: no money moves
	case again:
		return fail("ACQ.REFUND_AMT_NOT_EQUAL_TOTAL", "退款金额超限")
	case tr.status != "TRADE_SUCCESS":
		return fail("ACQ.TRADE_STATUS_ERROR", "交易状态不合法")
	case refunded+cents > tr.cents:
		return fail("ACQ.REFUND_AMT_NOT_EQUAL_TOTAL", "退款金额超限")
	}
	if !apply {
		return ok("Y")
	}
	if f.refunds[no] == nil {
		f.refunds[no] = map[string]int64{}
	}
	f.refunds[no][requestNo] = cents
	refunded += cents
	if refunded == tr.cents {
		f.trades[no] = trade{"TRADE_CLOSED", tr.cents, tr.currency} // refunded whole
	}
	return ok("Y")
}

// write answers {"<method>_response": obj, "sign": …}, obj signed as the
// exact text it is sent as — with spaces after its commas, as no Go
// encoder writes them, so that an adapter verifying a re-encoding fails.
func (f *fakeAlipay) write(w http.ResponseWriter, method string, obj map[string]any, key *rsa.PrivateKey) {
	raw, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	raw = bytes.ReplaceAll(raw, []byte(`,"`), []byte(`, "`))
	key2 := strings.ReplaceAll(method, ".", "_") + "_response"
	body := fmt.Sprintf(`{"%s":%s,"sign":"%s"}`, key2, raw, rsa2(key, raw))
	w.Header().Set("Content-Type", "text/html;charset=utf-8") // as Alipay does
	_, _ = w.Write([]byte(body))
}

var _ payment.AttemptGateway = (*alipay.Gateway)(nil)
