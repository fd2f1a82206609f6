package wechatpay_test

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment/gatewaytest"
	"github.com/lapsehq/lapse/payment/wechatpay"
)

const (
	mchID          = "1230000109"
	merchantSerial = "3775B6A45ACD588826D15E583A95F5DD********"
	timeout        = 250 * time.Millisecond
)

// testKeys are the test's keys: the merchant's (signs requests), WeChat
// Pay's platform key and its self-signed certificate (sign responses and
// notifications), an attacker's key with a certificate of the same serial,
// and one with a serial lapse was never given.
type testKeys struct {
	merchant, platform, other *rsa.PrivateKey
	platformCert, otherCert   *x509.Certificate
	strangerCert              *x509.Certificate
	apiV3                     []byte
}

var keys = sync.OnceValue(func() testKeys {
	gen := func() *rsa.PrivateKey {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		return key
	}
	cert := func(key *rsa.PrivateKey, serial *big.Int) *x509.Certificate {
		tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "Tenpay.com Root CA", Organization: []string{"Tenpay.com"}},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(5 * 365 * 24 * time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			panic(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			panic(err)
		}
		return c
	}
	serial, _ := new(big.Int).SetString("5157F09EFDC096DE15EBE81A47057A7232F1B8E1", 16)
	k := testKeys{merchant: gen(), platform: gen(), other: gen(), apiV3: []byte("a7cde1ZJB1kG2e7VfTs3jQzaWizur8Gb")}
	k.platformCert = cert(k.platform, serial)
	k.otherCert = cert(k.other, serial)
	k.strangerCert = cert(k.other, big.NewInt(0x0ABCDEF))
	return k
})

func platformSerial() string { return fmt.Sprintf("%X", keys().platformCert.SerialNumber) }

func sha256RSA(key *rsa.PrivateKey, msg string) string {
	sum := sha256.Sum256([]byte(msg))
	sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, sum[:])
	if err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(sig)
}

func nonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// signHeaders signs body as WeChat Pay does, with key, naming serial, at
// time at: Wechatpay-Timestamp, -Nonce, -Signature, -Serial.
func signHeaders(h http.Header, key *rsa.PrivateKey, serial string, at time.Time, body []byte) {
	ts, n := strconv.FormatInt(at.Unix(), 10), nonce()
	h.Set("Wechatpay-Timestamp", ts)
	h.Set("Wechatpay-Nonce", n)
	h.Set("Wechatpay-Signature", sha256RSA(key, ts+"\n"+n+"\n"+string(body)+"\n"))
	h.Set("Wechatpay-Serial", serial)
	h.Set("Wechatpay-Signature-Type", "WECHATPAY2-SHA256-RSA2048")
}

type trade struct {
	state string
	cents int64
	// currency is the order's amount.currency ("": CNY); the payer pays
	// in CNY (payer_currency), as a cross-border buyer does.
	currency string
}

// fakeWeChatPay plays WeChat Pay API v3 for query by out_trade_no, close
// and refund, with the documented request and response shapes (one refund
// per out_refund_no, answered again to a request repeated; a trade refunded
// is in state REFUND). It verifies every
// request's Authorization (a request that does not verify fails the test)
// and signs its responses with the platform key.
type fakeWeChatPay struct {
	t       *testing.T
	release chan struct{}

	mu     sync.Mutex
	trades map[string]trade
	fault  gatewaytest.Fault
	skew   time.Duration // added to the timestamps it signs with
	calls  map[string]int
	// refunds: out_trade_no → out_refund_no → the refund.
	refunds map[string]map[string]*fakeRefund
	// refundStatus is the status new refunds are made in ("": SUCCESS).
	refundStatus string
	lastRefund   []byte // the body of the last refund request
	faultOp      string // when set, fault applies to this operation only
}

type fakeRefund struct {
	id     string
	cents  int64
	status string
}

func newFake(t *testing.T) (*fakeWeChatPay, string) {
	f := &fakeWeChatPay{t: t, release: make(chan struct{}), trades: map[string]trade{}, calls: map[string]int{},
		refunds: map[string]map[string]*fakeRefund{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v3/pay/transactions/out-trade-no/{no}", f.handle("query", f.query))
	mux.HandleFunc("POST /v3/pay/transactions/out-trade-no/{no}/close", f.handle("close", f.close))
	mux.HandleFunc("POST /v3/refund/domestic/refunds", f.handle("refund", f.refund))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("fake WeChat Pay: %s %s is not an API of the adapter's", r.Method, r.RequestURI)
		http.NotFound(w, r)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(f.release) }) // runs first: hung requests end
	return f, srv.URL
}

func newGateway(t *testing.T, base string) *wechatpay.Gateway {
	t.Helper()
	k := keys()
	gw, err := wechatpay.New(wechatpay.Config{MchID: mchID, SerialNo: merchantSerial, PrivateKey: k.merchant,
		PlatformCerts: []*x509.Certificate{k.platformCert}, APIBase: base, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return gw
}

func (f *fakeWeChatPay) Set(orderID, paymentID string, st gatewaytest.Trade, cents int64) {
	no := paymentID
	if no == "" {
		no = orderID
	}
	states := map[gatewaytest.Trade]string{gatewaytest.TradePaid: "SUCCESS", gatewaytest.TradeNotPaid: "NOTPAY",
		gatewaytest.TradePending: "USERPAYING", gatewaytest.TradeClosed: "CLOSED", gatewaytest.TradeUnmapped: "REFUND"}
	if st == gatewaytest.TradeUnknown {
		f.mu.Lock()
		delete(f.trades, no)
		f.mu.Unlock()
		return
	}
	f.set(no, states[st], cents)
}

func (f *fakeWeChatPay) set(no, state string, cents int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trades[no] = trade{state, cents, ""}
}

// setPriced sets a paid trade whose amount.total is in currency.
func (f *fakeWeChatPay) setPriced(no string, cents int64, currency string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trades[no] = trade{"SUCCESS", cents, currency}
}

func (f *fakeWeChatPay) trade(no string) trade {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.trades[no]
}

func (f *fakeWeChatPay) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Refunds implements gatewaytest.RefundFake.
func (f *fakeWeChatPay) Refunds(orderID, paymentID string) int {
	no := paymentID
	if no == "" {
		no = orderID
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.refunds[no])
}

func (f *fakeWeChatPay) setRefundStatus(status string) {
	f.mu.Lock()
	f.refundStatus = status
	f.mu.Unlock()
}

// failOnly makes the requests of one operation (query, close, refund)
// answer with fault, the others as WeChat Pay does.
func (f *fakeWeChatPay) failOnly(op string, fault gatewaytest.Fault) {
	f.mu.Lock()
	f.faultOp, f.fault = op, fault
	f.mu.Unlock()
}

func (f *fakeWeChatPay) lastRefundBody() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastRefund
}

func (f *fakeWeChatPay) Fail(fault gatewaytest.Fault) {
	f.mu.Lock()
	f.fault = fault
	f.mu.Unlock()
}

func (f *fakeWeChatPay) setSkew(d time.Duration) {
	f.mu.Lock()
	f.skew = d
	f.mu.Unlock()
}

// answer is a response before it is signed.
type answer struct {
	status int
	body   any // nil: no body
}

// handle verifies the request's signature, then answers op's response,
// signed, or the fault set.
func (f *fakeWeChatPay) handle(name string, op func(r *http.Request, no string, body []byte) answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := verifyAuthorization(r, body); err != nil {
			f.t.Errorf("fake WeChat Pay: %s %s: %v", r.Method, r.RequestURI, err)
			f.write(w, answer{http.StatusUnauthorized, map[string]string{"code": "SIGN_ERROR", "message": "签名错误"}}, keys().platform, 0)
			return
		}
		if r.Header.Get("Accept") != "application/json" {
			f.t.Errorf("fake WeChat Pay: Accept %q", r.Header.Get("Accept"))
		}
		f.mu.Lock()
		fault, skew := f.fault, f.skew
		if f.faultOp != "" && f.faultOp != name {
			fault = gatewaytest.FaultNone
		}
		f.calls[name]++
		var a answer
		if fault == gatewaytest.FaultNone {
			a = op(r, r.PathValue("no"), body)
		}
		f.mu.Unlock()
		switch fault {
		case gatewaytest.FaultServerError:
			f.write(w, answer{http.StatusInternalServerError, map[string]string{"code": "SYSTEM_ERROR", "message": "系统错误"}}, keys().platform, skew)
		case gatewaytest.FaultHang:
			select {
			case <-r.Context().Done():
			case <-f.release:
			}
		case gatewaytest.FaultGarbage:
			raw := []byte("<html><body>系统繁忙</body></html>")
			signHeaders(w.Header(), keys().platform, platformSerial(), time.Now().Add(skew), raw)
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write(raw)
		case gatewaytest.FaultBadSignature:
			// What a forger would say: not paid (or closed), signed with a key
			// of its own under the platform certificate's serial.
			forged := answer{http.StatusNotFound, map[string]string{"code": "ORDER_NOT_EXIST", "message": "订单不存在"}}
			f.write(w, forged, keys().other, skew)
		default:
			f.write(w, a, keys().platform, skew)
		}
	}
}

func (f *fakeWeChatPay) write(w http.ResponseWriter, a answer, key *rsa.PrivateKey, skew time.Duration) {
	var raw []byte
	if a.body != nil {
		var err error
		if raw, err = json.Marshal(a.body); err != nil {
			panic(err)
		}
		w.Header().Set("Content-Type", "application/json")
	}
	signHeaders(w.Header(), key, platformSerial(), time.Now().Add(skew), raw)
	w.Header().Set("Request-ID", "08F78BB5AF0610D302A0048D6E36E2A9")
	w.WriteHeader(a.status)
	_, _ = w.Write(raw)
}

// verifyAuthorization checks a request's WECHATPAY2-SHA256-RSA2048
// Authorization as WeChat Pay does.
func verifyAuthorization(r *http.Request, body []byte) error {
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "WECHATPAY2-SHA256-RSA2048 ")
	if !ok {
		return fmt.Errorf("Authorization %q: want WECHATPAY2-SHA256-RSA2048 …", r.Header.Get("Authorization"))
	}
	p := map[string]string{}
	for _, kv := range strings.Split(auth, ",") {
		k, v, ok := strings.Cut(kv, "=")
		uq, err := strconv.Unquote(v)
		if !ok || err != nil {
			return fmt.Errorf("Authorization item %q is not k=\"v\"", kv)
		}
		p[k] = uq
	}
	if p["mchid"] != mchID || p["serial_no"] != merchantSerial || p["nonce_str"] == "" {
		return fmt.Errorf("Authorization %v: wrong mchid, serial_no or no nonce_str", p)
	}
	ts, err := strconv.ParseInt(p["timestamp"], 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return fmt.Errorf("Authorization timestamp %q is not now", p["timestamp"])
	}
	sig, err := base64.StdEncoding.DecodeString(p["signature"])
	if err != nil {
		return err
	}
	msg := r.Method + "\n" + r.RequestURI + "\n" + p["timestamp"] + "\n" + p["nonce_str"] + "\n" + string(body) + "\n"
	sum := sha256.Sum256([]byte(msg))
	if rsa.VerifyPKCS1v15(&keys().merchant.PublicKey, crypto.SHA256, sum[:], sig) != nil {
		return fmt.Errorf("the signature does not verify over %q", msg)
	}
	return nil
}

func transaction(no string, tr trade) map[string]any {
	desc := map[string]string{"SUCCESS": "支付成功", "NOTPAY": "未支付", "USERPAYING": "用户支付中", "CLOSED": "已关闭", "REFUND": "转入退款"}
	tx := map[string]any{"appid": "wxd678efh567hg6787", "mchid": mchID, "out_trade_no": no, "trade_type": "NATIVE",
		"trade_state": tr.state, "trade_state_desc": desc[tr.state], "attach": "", "payer": map[string]string{"openid": "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"}}
	if tr.state == "SUCCESS" || tr.state == "REFUND" {
		tx["transaction_id"] = "4200000" + no
		tx["bank_type"] = "CMC"
		tx["success_time"] = "2026-06-08T10:34:56+08:00"
		currency, payerTotal := tr.currency, tr.cents
		if currency == "" {
			currency = "CNY"
		} else if currency != "CNY" {
			payerTotal = tr.cents * 7 // the buyer's yuan: not the order's amount
		}
		tx["amount"] = map[string]any{"total": tr.cents, "payer_total": payerTotal, "currency": currency, "payer_currency": "CNY"}
	}
	return tx
}

// query is GET /v3/pay/transactions/out-trade-no/{no}?mchid=…; call with f.mu held.
func (f *fakeWeChatPay) query(r *http.Request, no string, _ []byte) answer {
	if r.URL.Query().Get("mchid") != mchID {
		f.t.Errorf("fake WeChat Pay: query with mchid %q", r.URL.Query().Get("mchid"))
	}
	tr, ok := f.trades[no]
	if !ok {
		return answer{http.StatusNotFound, map[string]string{"code": "ORDER_NOT_EXIST", "message": "订单不存在"}}
	}
	return answer{http.StatusOK, transaction(no, tr)}
}

// close is POST /v3/pay/transactions/out-trade-no/{no}/close {"mchid"};
// call with f.mu held.
func (f *fakeWeChatPay) close(r *http.Request, no string, body []byte) answer {
	var b struct {
		MchID string `json:"mchid"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.MchID != mchID || r.Header.Get("Content-Type") != "application/json" {
		f.t.Errorf("fake WeChat Pay: close body %q (%s): want {\"mchid\":%q}", body, r.Header.Get("Content-Type"), mchID)
	}
	tr, ok := f.trades[no]
	switch {
	case !ok: // WeChat Pay answers 204 to an out_trade_no it never saw
		return answer{http.StatusNoContent, nil}
	case tr.state == "SUCCESS":
		return answer{http.StatusBadRequest, map[string]string{"code": "ORDERPAID", "message": "订单已支付"}}
	case tr.state == "USERPAYING":
		return answer{http.StatusAccepted, map[string]string{"code": "USER_PAYING", "message": "用户支付中，需要输入密码"}}
	}
	f.trades[no] = trade{"CLOSED", tr.cents, tr.currency}
	return answer{http.StatusNoContent, nil}
}

// refund is POST /v3/refund/domestic/refunds; call with f.mu held.
func (f *fakeWeChatPay) refund(r *http.Request, _ string, body []byte) answer {
	f.lastRefund = body
	var b struct {
		OutTradeNo  string `json:"out_trade_no"`
		OutRefundNo string `json:"out_refund_no"`
		Reason      string `json:"reason"`
		Amount      struct {
			Refund   int64  `json:"refund"`
			Total    int64  `json:"total"`
			Currency string `json:"currency"`
		} `json:"amount"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.OutTradeNo == "" || b.OutRefundNo == "" || len(b.OutRefundNo) > 64 ||
		b.Amount.Refund <= 0 || b.Amount.Total <= 0 || b.Amount.Currency == "" || r.Header.Get("Content-Type") != "application/json" {
		f.t.Errorf("fake WeChat Pay: refund body %q (%s)", body, r.Header.Get("Content-Type"))
		return answer{http.StatusBadRequest, map[string]string{"code": "PARAM_ERROR", "message": "参数错误"}}
	}
	tr, ok := f.trades[b.OutTradeNo]
	if !ok {
		return answer{http.StatusNotFound, map[string]string{"code": "RESOURCE_NOT_EXISTS", "message": "订单不存在"}}
	}
	currency := tr.currency
	if currency == "" {
		currency = "CNY"
	}
	reply := func(rf *fakeRefund) answer {
		return answer{http.StatusOK, map[string]any{"refund_id": rf.id, "out_refund_no": b.OutRefundNo, "transaction_id": "4200000" + b.OutTradeNo,
			"out_trade_no": b.OutTradeNo, "channel": "ORIGINAL", "user_received_account": "招商银行信用卡0403", "status": rf.status,
			"create_time": "2026-06-08T10:34:56+08:00", "funds_account": "AVAILABLE",
			"amount": map[string]any{"total": tr.cents, "refund": rf.cents, "payer_total": tr.cents, "payer_refund": rf.cents,
				"settlement_refund": rf.cents, "settlement_total": tr.cents, "discount_refund": 0, "currency": currency, "refund_fee": 0}}}
	}
	if rf := f.refunds[b.OutTradeNo][b.OutRefundNo]; rf != nil {
		if rf.cents != b.Amount.Refund {
			return answer{http.StatusBadRequest, map[string]string{"code": "INVALID_REQUEST", "message": "退款单号重复，但退款金额与之前请求不一致"}}
		}
		return reply(rf)
	}
	refunded := int64(0)
	for _, rf := range f.refunds[b.OutTradeNo] {
		refunded += rf.cents
	}
	switch {
	case tr.state != "SUCCESS" && tr.state != "REFUND":
		return answer{http.StatusBadRequest, map[string]string{"code": "INVALID_REQUEST", "message": "订单状态不正确"}}
	case b.Amount.Total != tr.cents || b.Amount.Currency != currency:
		return answer{http.StatusBadRequest, map[string]string{"code": "PARAM_ERROR", "message": "订单金额或币种与支付时不一致"}}
	case refunded+b.Amount.Refund > tr.cents:
		return answer{http.StatusBadRequest, map[string]string{"code": "INVALID_REQUEST", "message": "申请退款金额超过订单可退金额"}}
	}
	status := f.refundStatus
	if status == "" {
		status = "SUCCESS"
	}
	if f.refunds[b.OutTradeNo] == nil {
		f.refunds[b.OutTradeNo] = map[string]*fakeRefund{}
	}
	rf := &fakeRefund{id: fmt.Sprintf("5030%012d", len(f.refunds[b.OutTradeNo])+1) + b.OutTradeNo, cents: b.Amount.Refund, status: status}
	f.refunds[b.OutTradeNo][b.OutRefundNo] = rf
	f.trades[b.OutTradeNo] = trade{"REFUND", tr.cents, tr.currency}
	return reply(rf)
}
