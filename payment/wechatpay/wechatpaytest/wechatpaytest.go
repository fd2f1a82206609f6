// Package wechatpaytest is a local server playing WeChat Pay API v3 for the
// calls lapse makes — query by out_trade_no, close, refund — with the
// documented request and response shapes, and the notifications WeChat Pay
// posts: the resource encrypted under the APIv3 key, the body signed with
// the platform key. It keeps state: trades by out_trade_no, one refund per
// out_refund_no (answered again to a request repeated; a trade refunded is
// in state REFUND). It verifies every request's Authorization with the
// merchant's public key (a request that does not verify fails the test) and
// signs its answers with the platform key.
package wechatpaytest

import (
	"bytes"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
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
)

// The merchant the server serves: wechatpay.Config's MchID and SerialNo.
const (
	MchID          = "1230000109"
	MerchantSerial = "3775B6A45ACD588826D15E583A95F5DD********"
)

// Keys are the test's keys: the merchant's (signs lapse's requests:
// wechatpay.Config.PrivateKey), WeChat Pay's platform key and its
// self-signed certificate (sign answers and notifications:
// wechatpay.Config.PlatformCerts), an attacker's key with a certificate of
// the same serial, one with a serial lapse was never given, and the APIv3
// key notifications are encrypted under.
type Keys struct {
	Merchant, Platform, Other *rsa.PrivateKey
	PlatformCert, OtherCert   *x509.Certificate
	StrangerCert              *x509.Certificate
	APIv3                     []byte
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
	k := Keys{Merchant: gen(), Platform: gen(), Other: gen(), APIv3: []byte("a7cde1ZJB1kG2e7VfTs3jQzaWizur8Gb")}
	k.PlatformCert = cert(k.Platform, serial)
	k.OtherCert = cert(k.Other, serial)
	k.StrangerCert = cert(k.Other, big.NewInt(0x0ABCDEF))
	return k
})

// PlatformSerial is the platform certificate's serial, as WeChat Pay names
// it in Wechatpay-Serial.
func PlatformSerial() string { return fmt.Sprintf("%X", TestKeys().PlatformCert.SerialNumber) }

func sha256RSA(key *rsa.PrivateKey, msg string) string {
	sum := sha256.Sum256([]byte(msg))
	sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, sum[:])
	if err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(sig)
}

// Nonce is a random nonce of 32 hex characters.
func Nonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// SignHeaders signs body as WeChat Pay does, with key, naming serial, at
// time at: Wechatpay-Timestamp, -Nonce, -Signature, -Serial.
func SignHeaders(h http.Header, key *rsa.PrivateKey, serial string, at time.Time, body []byte) {
	ts, n := strconv.FormatInt(at.Unix(), 10), Nonce()
	h.Set("Wechatpay-Timestamp", ts)
	h.Set("Wechatpay-Nonce", n)
	h.Set("Wechatpay-Signature", sha256RSA(key, ts+"\n"+n+"\n"+string(body)+"\n"))
	h.Set("Wechatpay-Serial", serial)
	h.Set("Wechatpay-Signature-Type", "WECHATPAY2-SHA256-RSA2048")
}

// Trade is the state the server keeps of one.
type Trade struct {
	State string // NOTPAY, USERPAYING, SUCCESS, CLOSED, REFUND, …
	Cents int64
	// Currency is the order's amount.currency ("": CNY); the payer pays
	// in CNY (payer_currency), as a cross-border buyer does.
	Currency string
}

// Server is a running fake WeChat Pay. Faults injects faults by operation
// (query, close, refund): a 500 answered, or a request applied and its
// answer withheld.
type Server struct {
	// URL is the API's base (wechatpay.Config.APIBase).
	URL    string
	Faults gatewaytest.Faults

	t       testing.TB
	release chan struct{}

	mu     sync.Mutex
	trades map[string]Trade
	fault  gatewaytest.Fault
	skew   time.Duration // added to the timestamps it signs with
	calls  map[string]int
	// refunds: out_trade_no → out_refund_no → the refund.
	refunds map[string]map[string]*Refund
	// refundNos: out_trade_no → the out_refund_no of each refund request.
	refundNos map[string][]string
	// refundStatus is the status new refunds are made in ("": SUCCESS).
	refundStatus string
	lastRefund   []byte // the body of the last refund request
	faultOp      string // when set, fault applies to this operation only
}

// Refund is a refund the server made.
type Refund struct {
	ID     string
	Cents  int64
	Status string
}

// New starts a server; it stops when the test ends.
func New(t testing.TB) *Server {
	f := &Server{t: t, release: make(chan struct{}), trades: map[string]Trade{}, calls: map[string]int{},
		refunds: map[string]map[string]*Refund{}, refundNos: map[string][]string{}}
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
	t.Cleanup(func() { close(f.release); f.Faults.Release() }) // runs first: hung requests end
	f.URL = srv.URL
	return f
}

// Set implements gatewaytest.Fake: trades are kept by out_trade_no, the
// payment id (the order id when there is none).
func (f *Server) Set(orderID, paymentID string, st gatewaytest.Trade, cents int64) {
	no := gatewaytest.TradeNo(orderID, paymentID)
	states := map[gatewaytest.Trade]string{gatewaytest.TradePaid: "SUCCESS", gatewaytest.TradeNotPaid: "NOTPAY",
		gatewaytest.TradePending: "USERPAYING", gatewaytest.TradeClosed: "CLOSED", gatewaytest.TradeUnmapped: "ACCEPT"}
	if st == gatewaytest.TradeUnknown {
		f.mu.Lock()
		delete(f.trades, no)
		f.mu.Unlock()
		return
	}
	f.SetState(no, states[st], cents)
}

// SetState creates or replaces a trade priced in CNY.
func (f *Server) SetState(no, state string, cents int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trades[no] = Trade{state, cents, ""}
}

// SetPriced sets a paid trade whose amount.total is in currency.
func (f *Server) SetPriced(no string, cents int64, currency string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trades[no] = Trade{"SUCCESS", cents, currency}
}

// Trade is the trade of out_trade_no no (its zero value if none).
func (f *Server) Trade(no string) Trade {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.trades[no]
}

// Count is how many requests of op (query, close, refund) were served.
func (f *Server) Count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Refunds implements gatewaytest.RefundFake: the refunds made of a trade,
// one per out_refund_no.
func (f *Server) Refunds(orderID, paymentID string) int {
	no := gatewaytest.TradeNo(orderID, paymentID)
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.refunds[no])
}

// RefundNos is the out_refund_no of each refund request of trade no
// received, in order, the failed ones included.
func (f *Server) RefundNos(no string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.refundNos[no]...)
}

// SetRefundStatus is the status new refunds are made in ("": SUCCESS;
// PROCESSING, ABNORMAL, CLOSED).
func (f *Server) SetRefundStatus(status string) {
	f.mu.Lock()
	f.refundStatus = status
	f.mu.Unlock()
}

// FailOnly makes the requests of one operation (query, close, refund)
// answer with fault, the others as WeChat Pay does.
func (f *Server) FailOnly(op string, fault gatewaytest.Fault) {
	f.mu.Lock()
	f.faultOp, f.fault = op, fault
	f.mu.Unlock()
}

// LastRefundBody is the body of the last refund request.
func (f *Server) LastRefundBody() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastRefund
}

// Fail implements gatewaytest.Fake: every request answers with fault.
func (f *Server) Fail(fault gatewaytest.Fault) {
	f.mu.Lock()
	f.fault = fault
	f.mu.Unlock()
}

// SetSkew is added to the timestamps the server signs with.
func (f *Server) SetSkew(d time.Duration) {
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
func (f *Server) handle(name string, op func(r *http.Request, no string, body []byte) answer) http.HandlerFunc {
	fail := func(w http.ResponseWriter) {
		f.write(w, answer{http.StatusInternalServerError, map[string]string{"code": "SYSTEM_ERROR", "message": "系统错误"}}, TestKeys().Platform, 0)
	}
	serve := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := verifyAuthorization(r, body); err != nil {
			f.t.Errorf("fake WeChat Pay: %s %s: %v", r.Method, r.RequestURI, err)
			f.write(w, answer{http.StatusUnauthorized, map[string]string{"code": "SIGN_ERROR", "message": "签名错误"}}, TestKeys().Platform, 0)
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
			f.write(w, answer{http.StatusInternalServerError, map[string]string{"code": "SYSTEM_ERROR", "message": "系统错误"}}, TestKeys().Platform, skew)
		case gatewaytest.FaultHang:
			select {
			case <-r.Context().Done():
			case <-f.release:
			}
		case gatewaytest.FaultGarbage:
			raw := []byte("<html><body>系统繁忙</body></html>")
			SignHeaders(w.Header(), TestKeys().Platform, PlatformSerial(), time.Now().Add(skew), raw)
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write(raw)
		case gatewaytest.FaultBadSignature:
			// What a forger would say: not paid (or closed), signed with a key
			// of its own under the platform certificate's serial.
			forged := answer{http.StatusNotFound, map[string]string{"code": "ORDER_NOT_EXIST", "message": "订单不存在"}}
			f.write(w, forged, TestKeys().Other, skew)
		default:
			f.write(w, a, TestKeys().Platform, skew)
		}
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if name == "refund" {
			// Counted before the faults: a refund answered 500 was asked too.
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var b struct {
				OutTradeNo  string `json:"out_trade_no"`
				OutRefundNo string `json:"out_refund_no"`
			}
			_ = json.Unmarshal(body, &b)
			f.mu.Lock()
			f.refundNos[b.OutTradeNo] = append(f.refundNos[b.OutTradeNo], b.OutRefundNo)
			f.mu.Unlock()
		}
		f.Faults.Serve(w, r, name, http.HandlerFunc(serve), fail)
	}
}

func (f *Server) write(w http.ResponseWriter, a answer, key *rsa.PrivateKey, skew time.Duration) {
	var raw []byte
	if a.body != nil {
		var err error
		if raw, err = json.Marshal(a.body); err != nil {
			panic(err)
		}
		w.Header().Set("Content-Type", "application/json")
	}
	SignHeaders(w.Header(), key, PlatformSerial(), time.Now().Add(skew), raw)
	w.Header().Set("Request-ID", "08F78BB5AF0610D302A0048D6E36E2A9")
	w.WriteHeader(a.status)
	_, _ = w.Write(raw)
}

// verifyAuthorization checks a request's WECHATPAY2-SHA256-RSA2048
// Authorization as WeChat Pay does.
func verifyAuthorization(r *http.Request, body []byte) error {
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "WECHATPAY2-SHA256-RSA2048 ")
	if !ok {
		return fmt.Errorf("the Authorization %q: want WECHATPAY2-SHA256-RSA2048 …", r.Header.Get("Authorization"))
	}
	p := map[string]string{}
	for _, kv := range strings.Split(auth, ",") {
		k, v, ok := strings.Cut(kv, "=")
		uq, err := strconv.Unquote(v)
		if !ok || err != nil {
			return fmt.Errorf("the Authorization item %q is not k=\"v\"", kv)
		}
		p[k] = uq
	}
	if p["mchid"] != MchID || p["serial_no"] != MerchantSerial || p["nonce_str"] == "" {
		return fmt.Errorf("the Authorization %v: wrong mchid, serial_no or no nonce_str", p)
	}
	ts, err := strconv.ParseInt(p["timestamp"], 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return fmt.Errorf("the Authorization timestamp %q is not now", p["timestamp"])
	}
	sig, err := base64.StdEncoding.DecodeString(p["signature"])
	if err != nil {
		return err
	}
	msg := r.Method + "\n" + r.RequestURI + "\n" + p["timestamp"] + "\n" + p["nonce_str"] + "\n" + string(body) + "\n"
	sum := sha256.Sum256([]byte(msg))
	if rsa.VerifyPKCS1v15(&TestKeys().Merchant.PublicKey, crypto.SHA256, sum[:], sig) != nil {
		return fmt.Errorf("the signature does not verify over %q", msg)
	}
	return nil
}

// Transaction is the transaction resource WeChat Pay answers a query with
// and encrypts in a payment notification.
func Transaction(no string, tr Trade) map[string]any {
	desc := map[string]string{"SUCCESS": "支付成功", "NOTPAY": "未支付", "USERPAYING": "用户支付中", "CLOSED": "已关闭", "REFUND": "转入退款", "ACCEPT": "已接收，等待扣款"}
	tx := map[string]any{"appid": "wxd678efh567hg6787", "mchid": MchID, "out_trade_no": no, "trade_type": "NATIVE",
		"trade_state": tr.State, "trade_state_desc": desc[tr.State], "attach": "", "payer": map[string]string{"openid": "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"}}
	if tr.State == "SUCCESS" || tr.State == "REFUND" {
		tx["transaction_id"] = "4200000" + no
		tx["bank_type"] = "CMC"
		tx["success_time"] = "2026-06-08T10:34:56+08:00"
		currency, payerTotal := tr.Currency, tr.Cents
		if currency == "" {
			currency = "CNY"
		} else if currency != "CNY" {
			payerTotal = tr.Cents * 7 // the buyer's yuan: not the order's amount
		}
		tx["amount"] = map[string]any{"total": tr.Cents, "payer_total": payerTotal, "currency": currency, "payer_currency": "CNY"}
	}
	return tx
}

// query is GET /v3/pay/transactions/out-trade-no/{no}?mchid=…; call with f.mu held.
func (f *Server) query(r *http.Request, no string, _ []byte) answer {
	if r.URL.Query().Get("mchid") != MchID {
		f.t.Errorf("fake WeChat Pay: query with mchid %q", r.URL.Query().Get("mchid"))
	}
	tr, ok := f.trades[no]
	if !ok {
		return answer{http.StatusNotFound, map[string]string{"code": "ORDER_NOT_EXIST", "message": "订单不存在"}}
	}
	return answer{http.StatusOK, Transaction(no, tr)}
}

// close is POST /v3/pay/transactions/out-trade-no/{no}/close {"mchid"};
// call with f.mu held.
func (f *Server) close(r *http.Request, no string, body []byte) answer {
	var b struct {
		MchID string `json:"mchid"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.MchID != MchID || r.Header.Get("Content-Type") != "application/json" {
		f.t.Errorf("fake WeChat Pay: close body %q (%s): want {\"mchid\":%q}", body, r.Header.Get("Content-Type"), MchID)
	}
	tr, ok := f.trades[no]
	switch {
	case !ok: // WeChat Pay answers 204 to an out_trade_no it never saw
		return answer{http.StatusNoContent, nil}
	case tr.State == "SUCCESS":
		return answer{http.StatusBadRequest, map[string]string{"code": "ORDERPAID", "message": "订单已支付"}}
	case tr.State == "USERPAYING":
		return answer{http.StatusAccepted, map[string]string{"code": "USER_PAYING", "message": "用户支付中，需要输入密码"}}
	}
	f.trades[no] = Trade{"CLOSED", tr.Cents, tr.Currency}
	return answer{http.StatusNoContent, nil}
}

// refund is POST /v3/refund/domestic/refunds; call with f.mu held.
func (f *Server) refund(r *http.Request, _ string, body []byte) answer {
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
	currency := tr.Currency
	if currency == "" {
		currency = "CNY"
	}
	reply := func(rf *Refund) answer {
		return answer{http.StatusOK, map[string]any{"refund_id": rf.ID, "out_refund_no": b.OutRefundNo, "transaction_id": "4200000" + b.OutTradeNo,
			"out_trade_no": b.OutTradeNo, "channel": "ORIGINAL", "user_received_account": "招商银行信用卡0403", "status": rf.Status,
			"create_time": "2026-06-08T10:34:56+08:00", "funds_account": "AVAILABLE",
			"amount": map[string]any{"total": tr.Cents, "refund": rf.Cents, "payer_total": tr.Cents, "payer_refund": rf.Cents,
				"settlement_refund": rf.Cents, "settlement_total": tr.Cents, "discount_refund": 0, "currency": currency, "refund_fee": 0}}}
	}
	if rf := f.refunds[b.OutTradeNo][b.OutRefundNo]; rf != nil {
		if rf.Cents != b.Amount.Refund {
			return answer{http.StatusBadRequest, map[string]string{"code": "INVALID_REQUEST", "message": "退款单号重复，但退款金额与之前请求不一致"}}
		}
		return reply(rf)
	}
	refunded := int64(0)
	for _, rf := range f.refunds[b.OutTradeNo] {
		refunded += rf.Cents
	}
	switch {
	case tr.State != "SUCCESS" && tr.State != "REFUND":
		return answer{http.StatusBadRequest, map[string]string{"code": "INVALID_REQUEST", "message": "订单状态不正确"}}
	case b.Amount.Total != tr.Cents || b.Amount.Currency != currency:
		return answer{http.StatusBadRequest, map[string]string{"code": "PARAM_ERROR", "message": "订单金额或币种与支付时不一致"}}
	case refunded+b.Amount.Refund > tr.Cents:
		return answer{http.StatusBadRequest, map[string]string{"code": "INVALID_REQUEST", "message": "申请退款金额超过订单可退金额"}}
	}
	status := f.refundStatus
	if status == "" {
		status = "SUCCESS"
	}
	if f.refunds[b.OutTradeNo] == nil {
		f.refunds[b.OutTradeNo] = map[string]*Refund{}
	}
	rf := &Refund{ID: fmt.Sprintf("5030%012d", len(f.refunds[b.OutTradeNo])+1) + b.OutTradeNo, Cents: b.Amount.Refund, Status: status}
	f.refunds[b.OutTradeNo][b.OutRefundNo] = rf
	f.trades[b.OutTradeNo] = Trade{"REFUND", tr.Cents, tr.Currency}
	return reply(rf)
}

// Notification is a notification WeChat Pay posts: an event whose resource
// (a transaction, a refund) is encrypted under the APIv3 key with
// AEAD_AES_256_GCM, its associated data the resource's original type.
type Notification struct {
	ID        string // the event's id
	EventType string // TRANSACTION.SUCCESS, REFUND.SUCCESS, …
	Summary   string
	// OriginalType is the resource's type: transaction, refund.
	OriginalType string
	// Resource is encoded as JSON, then encrypted.
	Resource any
	// APIv3Key encrypts the resource; nil is TestKeys().APIv3.
	APIv3Key []byte
}

// Body is the notification's body as WeChat Pay posts it.
func (n Notification) Body() ([]byte, error) {
	key := n.APIv3Key
	if key == nil {
		key = TestKeys().APIv3
	}
	plain, err := json.Marshal(n.Resource)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	nonce := Nonce()[:12]
	ct := gcm.Seal(nil, []byte(nonce), plain, []byte(n.OriginalType))
	return json.Marshal(map[string]any{
		"id": n.ID, "create_time": "2026-06-08T10:34:56+08:00", "resource_type": "encrypt-resource",
		"event_type": n.EventType, "summary": n.Summary,
		"resource": map[string]string{"original_type": n.OriginalType, "algorithm": "AEAD_AES_256_GCM",
			"ciphertext": base64.StdEncoding.EncodeToString(ct), "associated_data": n.OriginalType, "nonce": nonce},
	})
}

// Signed is the notification's body and the headers WeChat Pay signs it
// with (the platform key, now).
func (n Notification) Signed() ([]byte, http.Header, error) {
	body, err := n.Body()
	if err != nil {
		return nil, nil, err
	}
	h := http.Header{"Content-Type": {"application/json"}}
	SignHeaders(h, TestKeys().Platform, PlatformSerial(), time.Now(), body)
	return body, h, nil
}

// PaymentNotification is the TRANSACTION.SUCCESS notification of trade no
// in its present state, signed: what WeChat Pay posts to the notify_url.
func (f *Server) PaymentNotification(id, no string) ([]byte, http.Header, error) {
	tr := f.Trade(no)
	return Notification{ID: id, EventType: "TRANSACTION.SUCCESS", Summary: "支付成功", OriginalType: "transaction",
		Resource: Transaction(no, tr)}.Signed()
}
