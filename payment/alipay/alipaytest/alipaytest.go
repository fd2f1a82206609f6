// Package alipaytest is a local server playing Alipay's OpenAPI gateway
// for the calls lapse makes — alipay.trade.query, alipay.trade.close,
// alipay.trade.refund and alipay.trade.fastpay.refund.query — with the
// documented request and response shapes, and the notifications Alipay
// posts, signed as Alipay signs them. It keeps state: trades by
// out_trade_no, one refund per out_request_no of a trade (the same request
// again moves no money; a trade refunded whole is TRADE_CLOSED). It checks
// every request's signature with the app's public key (a request that does
// not verify fails the test) and signs its answers with Alipay's key.
//
// Its signing is written from Alipay's documentation independently of
// package alipay's, so that a test of the adapter against it is a test of
// the adapter's reading of the documentation.
package alipaytest

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

	"github.com/lapsehq/lapse/payment/alipay"
	"github.com/lapsehq/lapse/payment/gatewaytest"
)

// AppID is the app the server serves.
const AppID = "2021000000000001"

// Keys are the test's keys: the app's (signs lapse's requests:
// alipay.Config.PrivateKey), Alipay's (signs answers and notifications: its
// public half is alipay.Config.AlipayPublicKey), and an attacker's.
type Keys struct {
	App, Alipay, Other *rsa.PrivateKey
}

// TestKeys are the keys every Server uses, made once per process.
var TestKeys = sync.OnceValue(func() Keys {
	gen := func() *rsa.PrivateKey {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		return key
	}
	return Keys{App: gen(), Alipay: gen(), Other: gen()}
})

// SignContent is the RSA2 signing string: the non-empty parameters but the
// excluded ones, sorted, k=v joined with &.
func SignContent(v url.Values, exclude ...string) string {
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

// RSA2 signs content with key: SHA256withRSA, base64.
func RSA2(key *rsa.PrivateKey, content []byte) string {
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

// SignNotification signs the parameters of a notification with key as
// Alipay does (sign_type RSA2; sign over every non-empty parameter but
// sign and sign_type) and returns them, the form Alipay posts.
func SignNotification(key *rsa.PrivateKey, v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	out.Set("sign_type", "RSA2")
	out.Del("sign")
	out.Set("sign", RSA2(key, []byte(SignContent(out, "sign", "sign_type"))))
	return out
}

// Trade is the state the server keeps of one.
type Trade struct {
	Status string // WAIT_BUYER_PAY, TRADE_SUCCESS, TRADE_FINISHED, TRADE_CLOSED, …
	Cents  int64
	// Currency, when set, is answered as trans_currency (a cross-border
	// trade priced in it); a domestic trade has none.
	Currency string
}

// Server is a running fake Alipay. Faults injects faults by method
// (alipay.trade.refund, …): a 500 answered, or a request applied and its
// answer withheld.
type Server struct {
	// URL is the gateway's address (alipay.Config.GatewayURL).
	URL    string
	Faults gatewaytest.Faults

	t       testing.TB
	release chan struct{}

	mu         sync.Mutex
	trades     map[string]Trade            // by out_trade_no
	refunds    map[string]map[string]int64 // out_trade_no → out_request_no → fen
	refundReqs map[string][]string         // out_trade_no → out_request_no of each refund request
	fault      gatewaytest.Fault
	methods    map[string]int
	biz        map[string]string // method → the last biz_content
}

// New starts a server; it stops when the test ends.
func New(t testing.TB) *Server {
	s := &Server{t: t, release: make(chan struct{}), trades: map[string]Trade{}, methods: map[string]int{},
		refunds: map[string]map[string]int64{}, refundReqs: map[string][]string{}, biz: map[string]string{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(s.release); s.Faults.Release() }) // runs first: hung requests end
	s.URL = srv.URL + "/gateway.do"
	return s
}

// Set implements gatewaytest.Fake: trades are kept by out_trade_no, the
// payment id (the order id when there is none).
func (s *Server) Set(orderID, paymentID string, st gatewaytest.Trade, cents int64) {
	no := gatewaytest.TradeNo(orderID, paymentID)
	switch st {
	case gatewaytest.TradePaid:
		s.SetStatus(no, "TRADE_SUCCESS", cents)
	case gatewaytest.TradeNotPaid:
		s.SetStatus(no, "WAIT_BUYER_PAY", 0)
	case gatewaytest.TradeClosed:
		s.SetStatus(no, "TRADE_CLOSED", 0)
	case gatewaytest.TradeUnknown:
		s.mu.Lock()
		delete(s.trades, no)
		s.mu.Unlock()
	case gatewaytest.TradeUnmapped:
		s.SetStatus(no, "TRADE_REVERSED", 0)
	default:
		panic(fmt.Sprintf("alipay has no %s trade", st))
	}
}

// SetStatus creates or replaces a domestic trade.
func (s *Server) SetStatus(no, status string, cents int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trades[no] = Trade{status, cents, ""}
}

// SetPriced sets a paid trade priced in currency (trans_currency).
func (s *Server) SetPriced(no string, cents int64, currency string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trades[no] = Trade{"TRADE_SUCCESS", cents, currency}
}

// Trade is the trade of out_trade_no no, if any.
func (s *Server) Trade(no string) (Trade, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tr, ok := s.trades[no]
	return tr, ok
}

// Calls is how many requests of method were served.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.methods[method]
}

// Refunds implements gatewaytest.RefundFake: the refunds made of a trade,
// one per out_request_no.
func (s *Server) Refunds(orderID, paymentID string) int {
	no := gatewaytest.TradeNo(orderID, paymentID)
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.refunds[no])
}

// RefundRequestNos is the out_request_no of each alipay.trade.refund
// request of trade no received, in order, the failed ones included.
func (s *Server) RefundRequestNos(no string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.refundReqs[no]...)
}

// LastBiz is the biz_content of the last request of method.
func (s *Server) LastBiz(method string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.biz[method]
}

// Fail implements gatewaytest.Fake: every request answers with fault.
func (s *Server) Fail(fault gatewaytest.Fault) {
	s.mu.Lock()
	s.fault = fault
	s.mu.Unlock()
}

// PaymentNotification is the trade_status_sync notification of trade no
// in its present state, signed with Alipay's key: the form Alipay posts to
// the notify_url.
func (s *Server) PaymentNotification(notifyID, no string) url.Values {
	tr, _ := s.Trade(no)
	v := url.Values{"notify_id": {notifyID}, "notify_type": {"trade_status_sync"}, "app_id": {AppID}, "auth_app_id": {AppID},
		"charset": {"utf-8"}, "version": {"1.0"}, "trade_no": {"2026" + no}, "out_trade_no": {no}, "trade_status": {tr.Status},
		"total_amount": {alipay.FormatAmount(tr.Cents)}, "receipt_amount": {alipay.FormatAmount(tr.Cents)},
		"buyer_pay_amount": {alipay.FormatAmount(tr.Cents)}, "notify_time": {time.Now().In(beijing).Format("2006-01-02 15:04:05")},
		"gmt_payment": {"2026-01-01 12:00:00"}, "buyer_logon_id": {"159****5620"}, "seller_id": {"2088101117955611"}}
	if tr.Currency != "" {
		v.Set("trans_currency", tr.Currency)
	}
	return SignNotification(TestKeys().Alipay, v)
}

var beijing = time.FixedZone("CST", 8*3600)

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/gateway.do" {
		s.t.Errorf("fake Alipay: %s %s, want POST /gateway.do", r.Method, r.URL.Path)
		http.NotFound(w, r)
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		s.t.Errorf("fake Alipay: Content-Type %q", ct)
	}
	if err := r.ParseForm(); err != nil {
		s.t.Errorf("fake Alipay: %v", err)
		return
	}
	if method := r.PostForm.Get("method"); method == "alipay.trade.refund" {
		// Counted before the faults: a refund answered 500 was asked too.
		var biz struct {
			OutTradeNo   string `json:"out_trade_no"`
			OutRequestNo string `json:"out_request_no"`
		}
		_ = json.Unmarshal([]byte(r.PostForm.Get("biz_content")), &biz)
		s.mu.Lock()
		s.refundReqs[biz.OutTradeNo] = append(s.refundReqs[biz.OutTradeNo], biz.OutRequestNo)
		s.mu.Unlock()
	}
	s.Faults.Serve(w, r, r.PostForm.Get("method"), http.HandlerFunc(s.serve), func(w http.ResponseWriter) {
		http.Error(w, "<html>500 Internal Server Error</html>", http.StatusInternalServerError)
	})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	v := r.PostForm
	for k, vs := range v {
		if len(vs) != 1 {
			s.t.Errorf("fake Alipay: parameter %s given %d times", k, len(vs))
		}
	}
	method := v.Get("method")
	keys := TestKeys()
	// The request's signature, checked as Alipay does: over every non-empty
	// parameter but sign (sign_type included), with the app's public key.
	if !rsa2Verify(&keys.App.PublicKey, []byte(SignContent(v, "sign")), v.Get("sign")) {
		s.t.Errorf("fake Alipay: the request's signature does not verify: %s", SignContent(v, "sign"))
		s.write(w, method, map[string]any{"code": "40002", "msg": "Invalid Arguments", "sub_code": "isv.invalid-signature"}, keys.Alipay)
		return
	}
	want := map[string]string{"app_id": AppID, "format": "JSON", "charset": "utf-8", "sign_type": "RSA2", "version": "1.0"}
	for k, w := range want {
		if v.Get(k) != w {
			s.t.Errorf("fake Alipay: %s=%q, want %q", k, v.Get(k), w)
		}
	}
	ts, err := time.ParseInLocation("2006-01-02 15:04:05", v.Get("timestamp"), beijing)
	if err != nil || time.Since(ts).Abs() > 5*time.Minute {
		s.t.Errorf("fake Alipay: timestamp %q is not Beijing time now (%v)", v.Get("timestamp"), err)
	}
	var biz struct {
		OutTradeNo   string `json:"out_trade_no"`
		RefundAmount string `json:"refund_amount"`
		OutRequestNo string `json:"out_request_no"`
		RefundReason string `json:"refund_reason"`
	}
	if err := json.Unmarshal([]byte(v.Get("biz_content")), &biz); err != nil || biz.OutTradeNo == "" {
		s.t.Errorf("fake Alipay: biz_content %q: %v", v.Get("biz_content"), err)
	}

	s.mu.Lock()
	fault := s.fault
	s.methods[method]++
	s.biz[method] = v.Get("biz_content")
	tr, ok := s.trades[biz.OutTradeNo]
	var resp map[string]any
	switch method {
	case "alipay.trade.query":
		switch {
		case !ok:
			resp = map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": "ACQ.TRADE_NOT_EXIST", "sub_msg": "交易不存在",
				"out_trade_no": biz.OutTradeNo, "buyer_pay_amount": "0.00", "invoice_amount": "0.00", "point_amount": "0.00", "receipt_amount": "0.00"}
		default:
			resp = map[string]any{"code": "10000", "msg": "Success", "out_trade_no": biz.OutTradeNo, "trade_no": "2026" + biz.OutTradeNo,
				"trade_status": tr.Status, "total_amount": alipay.FormatAmount(tr.Cents), "buyer_logon_id": "159****5620",
				"buyer_pay_amount": "0.00", "point_amount": "0.00", "receipt_amount": "0.00", "buyer_user_id": "2088101117955611",
				"send_pay_date": "2026-01-01 12:00:00"}
			if tr.Currency != "" {
				resp["trans_currency"] = tr.Currency
			}
		}
	case "alipay.trade.close":
		switch {
		case !ok:
			resp = map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": "ACQ.TRADE_NOT_EXIST", "sub_msg": "交易不存在"}
		case tr.Status == "WAIT_BUYER_PAY":
			if fault == gatewaytest.FaultNone {
				s.trades[biz.OutTradeNo] = Trade{"TRADE_CLOSED", 0, ""}
			}
			resp = map[string]any{"code": "10000", "msg": "Success", "out_trade_no": biz.OutTradeNo, "trade_no": "2026" + biz.OutTradeNo}
		default: // paid, finished or closed: documented as ACQ.TRADE_STATUS_ERROR
			resp = map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": "ACQ.TRADE_STATUS_ERROR", "sub_msg": "交易状态不合法"}
		}
	case "alipay.trade.refund":
		resp = s.refund(tr, ok, biz.OutTradeNo, biz.OutRequestNo, biz.RefundAmount, fault == gatewaytest.FaultNone)
	case "alipay.trade.fastpay.refund.query":
		if biz.OutRequestNo == "" {
			s.t.Errorf("fake Alipay: refund query without out_request_no: %s", v.Get("biz_content"))
		}
		switch cents, found := s.refunds[biz.OutTradeNo][biz.OutRequestNo]; {
		case !ok:
			resp = map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": "ACQ.TRADE_NOT_EXIST", "sub_msg": "交易不存在"}
		case !found: // documented: a refund not found is answered without its fields
			resp = map[string]any{"code": "10000", "msg": "Success", "out_trade_no": biz.OutTradeNo, "trade_no": "2026" + biz.OutTradeNo}
		default:
			resp = map[string]any{"code": "10000", "msg": "Success", "out_trade_no": biz.OutTradeNo, "trade_no": "2026" + biz.OutTradeNo,
				"out_request_no": biz.OutRequestNo, "refund_amount": alipay.FormatAmount(cents), "total_amount": alipay.FormatAmount(tr.Cents),
				"refund_status": "REFUND_SUCCESS"}
		}
	default:
		s.t.Errorf("fake Alipay: method %q", method)
		resp = map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": "isv.invalid-method"}
	}
	s.mu.Unlock()

	switch fault {
	case gatewaytest.FaultServerError:
		http.Error(w, "<html>502 Bad Gateway</html>", http.StatusBadGateway)
	case gatewaytest.FaultHang:
		select {
		case <-r.Context().Done():
		case <-s.release:
		}
	case gatewaytest.FaultGarbage:
		w.Header().Set("Content-Type", "text/html;charset=utf-8")
		_, _ = w.Write([]byte("<html><body>系统维护中</body></html>"))
	case gatewaytest.FaultBadSignature:
		s.write(w, method, map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": "ACQ.TRADE_NOT_EXIST", "sub_msg": "交易不存在"}, keys.Other)
	default:
		s.write(w, method, resp, keys.Alipay)
	}
}

// refund is alipay.trade.refund; call with s.mu held. It changes nothing
// unless apply (the fake is failing the request).
func (s *Server) refund(tr Trade, known bool, no, requestNo, amount string, apply bool) map[string]any {
	cents, err := alipay.ParseAmount(amount)
	if err != nil || cents <= 0 || requestNo == "" || len(requestNo) > 64 {
		s.t.Errorf("fake Alipay: refund of %q: refund_amount %q, out_request_no %q", no, amount, requestNo)
		return map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": "ACQ.INVALID_PARAMETER", "sub_msg": "参数无效"}
	}
	refunded := int64(0)
	for _, c := range s.refunds[no] {
		refunded += c
	}
	ok := func(change string) map[string]any {
		return map[string]any{"code": "10000", "msg": "Success", "out_trade_no": no, "trade_no": "2026" + no, "buyer_logon_id": "159****5620",
			"fund_change": change, "refund_fee": alipay.FormatAmount(refunded), "send_back_fee": amount}
	}
	fail := func(sub, msg string) map[string]any {
		return map[string]any{"code": "40004", "msg": "Business Failed", "sub_code": sub, "sub_msg": msg}
	}
	switch prev, again := s.refunds[no][requestNo]; {
	case !known:
		return fail("ACQ.TRADE_NOT_EXIST", "交易不存在")
	case again && prev == cents:
		return ok("N") // the same request again: no money moves
	case again:
		return fail("ACQ.REFUND_AMT_NOT_EQUAL_TOTAL", "退款金额超限")
	case tr.Status != "TRADE_SUCCESS":
		return fail("ACQ.TRADE_STATUS_ERROR", "交易状态不合法")
	case refunded+cents > tr.Cents:
		return fail("ACQ.REFUND_AMT_NOT_EQUAL_TOTAL", "退款金额超限")
	}
	if !apply {
		return ok("Y")
	}
	if s.refunds[no] == nil {
		s.refunds[no] = map[string]int64{}
	}
	s.refunds[no][requestNo] = cents
	refunded += cents
	if refunded == tr.Cents {
		s.trades[no] = Trade{"TRADE_CLOSED", tr.Cents, tr.Currency} // refunded whole
	}
	return ok("Y")
}

// write answers {"<method>_response": obj, "sign": …}, obj signed as the
// exact text it is sent as — with spaces after its commas, as no Go
// encoder writes them, so that an adapter verifying a re-encoding fails.
func (s *Server) write(w http.ResponseWriter, method string, obj map[string]any, key *rsa.PrivateKey) {
	raw, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	raw = bytes.ReplaceAll(raw, []byte(`,"`), []byte(`, "`))
	key2 := strings.ReplaceAll(method, ".", "_") + "_response"
	body := fmt.Sprintf(`{"%s":%s,"sign":"%s"}`, key2, raw, RSA2(key, raw))
	w.Header().Set("Content-Type", "text/html;charset=utf-8") // as Alipay does
	_, _ = w.Write([]byte(body))
}
