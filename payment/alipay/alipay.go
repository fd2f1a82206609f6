// Package alipay is lapse's Alipay adapter: a payment.AttemptGateway on
// the OpenAPI gateway's alipay.trade.query and alipay.trade.close, and a
// payment.Notifier of Alipay's asynchronous notifications (notify_url),
// written on the standard library from Alipay's documented formats (public
// key mode, RSA2):
//
//   - requests are form-encoded POSTs of the common parameters (app_id,
//     method, format=JSON, charset=utf-8, sign_type=RSA2, timestamp in
//     Beijing time, version=1.0) and biz_content, signed SHA256withRSA
//     (PKCS #1 v1.5) with the app's private key over the k=v&… string of the
//     non-empty parameters but sign, sorted by name;
//   - every response is verified with Alipay's public key over the exact
//     JSON text of its <method>_response object, before anything in it is
//     read: a response that does not verify is an error, never an answer;
//   - notifications are verified with Alipay's public key over the sorted
//     non-empty parameters but sign and sign_type.
//
// The trade of a payment attempt is its out_trade_no: lapse's payment_id.
// Query and Close, which speak of the order as a whole, use the order id as
// out_trade_no (for a shop that opens one trade per order, named by it).
package alipay

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/redact"
)

// DefaultGatewayURL is Alipay's production OpenAPI gateway.
const DefaultGatewayURL = "https://openapi.alipay.com/gateway.do"

// Beijing is Alipay's time zone (China Standard Time, UTC+8, no daylight
// saving): the request timestamp and an order's time_expire are written in it.
var Beijing = time.FixedZone("CST", 8*60*60)

// TimeLayout is Alipay's "yyyy-MM-dd HH:mm:ss" (timestamp, time_expire).
const TimeLayout = "2006-01-02 15:04:05"

// TimeExpire is the time_expire to give alipay.trade.precreate / page.pay /
// wap.pay / app.pay for a trade that must not be paid after payBefore
// (lapse's pay_before): payBefore in Beijing time, "yyyy-MM-dd HH:mm:ss",
// rounded down to the second so that Alipay's expiry is never later.
func TimeExpire(payBefore time.Time) string {
	return payBefore.In(Beijing).Format(TimeLayout)
}

// ErrBadResponse is returned, wrapped, when Alipay answers something the
// adapter cannot trust or read: a non-200 status, a body that is not the
// method's signed response, a signature that does not verify, an unknown
// trade status, another trade's record. It means "unknown": lapse asks again
// later and never cancels on it.
var ErrBadResponse = errors.New("alipay: unexpected response")

// Config configures a Gateway and a Notifier.
type Config struct {
	// AppID is the app's APPID at Alipay. Required.
	AppID string
	// PrivateKey is the app's private key (RSA2): it signs the requests.
	// Required by the Gateway. Never logged or shown in an error.
	PrivateKey *rsa.PrivateKey
	// AlipayPublicKey is Alipay's public key (支付宝公钥, not the app's):
	// it verifies responses and notifications. Required.
	AlipayPublicKey *rsa.PublicKey
	// GatewayURL is the OpenAPI gateway. Defaults to DefaultGatewayURL (the
	// sandbox's is https://openapi-sandbox.dl.alipaydev.com/gateway.do).
	GatewayURL string
	// Timeout bounds one request. Defaults to 5 s. The adapter does not
	// retry: lapse's gateway check asks again later with backoff.
	Timeout time.Duration
	// HTTPClient sends the requests. Defaults to a client of its own that
	// does not follow redirects.
	HTTPClient *http.Client
	// Now is the clock of the request timestamp. Defaults to time.Now.
	Now func() time.Time
}

// Gateway is the Alipay adapter: a payment.AttemptGateway. It is safe for
// concurrent use.
type Gateway struct {
	// ByTradeNo gives Query, QueryAttempt, Close and CloseAttempt: the
	// order's trade is numbered by its id, each attempt's by its payment id.
	payment.ByTradeNo
	cfg Config
	url string
}

var _ payment.AttemptGateway = (*Gateway)(nil)

// New returns the adapter.
func New(cfg Config) (*Gateway, error) {
	switch {
	case cfg.AppID == "":
		return nil, errors.New("alipay: Config.AppID is required")
	case cfg.PrivateKey == nil:
		return nil, errors.New("alipay: Config.PrivateKey (the app's private key) is required")
	case cfg.AlipayPublicKey == nil:
		return nil, errors.New("alipay: Config.AlipayPublicKey (Alipay's public key) is required")
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("alipay: Config.Timeout %s: want a positive duration", cfg.Timeout)
	}
	if cfg.GatewayURL == "" {
		cfg.GatewayURL = DefaultGatewayURL
	}
	u, err := url.Parse(cfg.GatewayURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("alipay: gateway URL %q: want http(s)://host/path", redact.URL(cfg.GatewayURL))
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = payment.NewHTTPClient()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	g := &Gateway{cfg: cfg, url: cfg.GatewayURL}
	g.ByTradeNo = payment.ByTradeNo{Name: "alipay", Trades: g}
	return g, nil
}

// QueryTrade implements payment.Trades: the trade of out_trade_no.
func (g *Gateway) QueryTrade(ctx context.Context, outTradeNo string) (payment.Status, error) {
	return g.query(ctx, outTradeNo)
}

// CloseTrade implements payment.Trades.
func (g *Gateway) CloseTrade(ctx context.Context, outTradeNo string) error {
	return g.close(ctx, outTradeNo)
}

// tradeResponse is the part of alipay.trade.query's and alipay.trade.close's
// responses the adapter reads.
type tradeResponse struct {
	Code        string `json:"code"`
	Msg         string `json:"msg"`
	SubCode     string `json:"sub_code"`
	SubMsg      string `json:"sub_msg"`
	OutTradeNo  string `json:"out_trade_no"`
	TradeNo     string `json:"trade_no"`
	TradeStatus string `json:"trade_status"`
	TotalAmount string `json:"total_amount"`
	// TransCurrency is the currency a cross-border trade is priced in
	// (total_amount is in it); Currency its older name. A domestic trade
	// has neither: its total_amount is in yuan.
	TransCurrency string `json:"trans_currency"`
	Currency      string `json:"currency"`
}

// Domestic is the currency of a trade that names none: yuan.
const Domestic = "CNY"

// AcceptsCurrency implements payment.CurrencyGateway: the adapter opens no
// trade itself and its Config names no currency, so lapse's orders are
// taken in yuan only (a cross-border trade's trans_currency is still read
// and compared, see TradeCurrency).
func (g *Gateway) AcceptsCurrency(currency string) bool { return currency == Domestic }

var _ payment.CurrencyGateway = (*Gateway)(nil)

// TradeCurrency is the ISO 4217 code a trade's total_amount is in: its
// trans_currency, else its currency, else CNY (a domestic trade). A value
// that is not three letters is an error.
func TradeCurrency(transCurrency, currency string) (string, error) {
	c := transCurrency
	if c == "" {
		c = currency
	}
	if c == "" {
		return Domestic, nil
	}
	if len(c) != 3 || strings.IndexFunc(c, func(r rune) bool { return (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') }) >= 0 {
		return "", fmt.Errorf("currency %q: want an ISO 4217 code", c)
	}
	return strings.ToUpper(c), nil
}

// Result codes and sub codes the adapter acts on.
const (
	codeSuccess       = "10000"
	subTradeNotExist  = "ACQ.TRADE_NOT_EXIST"
	subTradeStatusErr = "ACQ.TRADE_STATUS_ERROR"
)

// Trade statuses.
const (
	statusWaitBuyerPay  = "WAIT_BUYER_PAY"
	statusTradeClosed   = "TRADE_CLOSED"
	statusTradeSuccess  = "TRADE_SUCCESS"
	statusTradeFinished = "TRADE_FINISHED"
)

func (r tradeResponse) failure() string {
	return fmt.Sprintf("code %s (%s), sub_code %s (%s)", r.Code, r.Msg, r.SubCode, r.SubMsg)
}

func (g *Gateway) query(ctx context.Context, outTradeNo string) (payment.Status, error) {
	r, err := g.call(ctx, "alipay.trade.query", outTradeNo)
	if err != nil {
		return payment.Status{}, err
	}
	if r.Code != codeSuccess {
		if r.SubCode == subTradeNotExist {
			// The buyer never scanned the code or opened the page: Alipay
			// has no trade yet. The trade's own time_expire keeps it from
			// being paid after the deadline (see docs/payments.md).
			return payment.Status{State: payment.StateNotPaid}, nil
		}
		return payment.Status{}, fmt.Errorf("%w: trade.query: %s", ErrBadResponse, r.failure())
	}
	if r.OutTradeNo != outTradeNo {
		return payment.Status{}, fmt.Errorf("%w: trade.query: the answer is about out_trade_no %q", ErrBadResponse, r.OutTradeNo)
	}
	switch r.TradeStatus {
	case statusTradeSuccess, statusTradeFinished:
		cents, err := ParseAmount(r.TotalAmount)
		if err != nil {
			return payment.Status{}, fmt.Errorf("%w: trade.query: total_amount: %w", ErrBadResponse, err)
		}
		currency, err := TradeCurrency(r.TransCurrency, r.Currency)
		if err != nil {
			return payment.Status{}, fmt.Errorf("%w: trade.query: %w", ErrBadResponse, err)
		}
		return payment.Status{State: payment.StatePaid, PaymentID: outTradeNo, AmountCents: cents, Currency: currency}, nil
	case statusWaitBuyerPay:
		return payment.Status{State: payment.StateNotPaid}, nil
	case statusTradeClosed:
		return payment.Status{State: payment.StateClosed}, nil
	}
	return payment.Status{}, fmt.Errorf("%w: trade.query: unknown trade_status %q", ErrBadResponse, r.TradeStatus)
}

func (g *Gateway) close(ctx context.Context, outTradeNo string) error {
	r, err := g.call(ctx, "alipay.trade.close", outTradeNo)
	if err != nil {
		return err
	}
	switch {
	case r.Code == codeSuccess:
		if r.OutTradeNo != "" && r.OutTradeNo != outTradeNo {
			return fmt.Errorf("%w: trade.close: the answer is about out_trade_no %q", ErrBadResponse, r.OutTradeNo)
		}
		return nil
	case r.SubCode == subTradeNotExist:
		// No trade to close: the buyer never started paying. Its own
		// time_expire is what stops a later payment.
		return nil
	case r.SubCode == subTradeStatusErr:
		// Paid, finished or closed already: the query tells which.
		st, err := g.query(ctx, outTradeNo)
		if err != nil {
			return fmt.Errorf("trade.close answered %s; the query that was to tell why: %w", r.SubCode, err)
		}
		switch st.State {
		case payment.StatePaid:
			return payment.ErrAlreadyPaid
		case payment.StateClosed:
			return nil
		}
		return fmt.Errorf("%w: trade.close answered %s for a trade in state %s", ErrBadResponse, r.SubCode, st.State)
	}
	return fmt.Errorf("%w: trade.close: %s", ErrBadResponse, r.failure())
}

// maxResponseBytes bounds what is read of an answer.
const maxResponseBytes = 1 << 20

// call sends one signed request of method about outTradeNo and returns its
// verified response.
func (g *Gateway) call(ctx context.Context, method, outTradeNo string) (tradeResponse, error) {
	var r tradeResponse
	err := g.invoke(ctx, method, struct {
		OutTradeNo string `json:"out_trade_no"`
	}{outTradeNo}, &r)
	return r, err
}

// invoke sends one signed request of method with biz as its biz_content,
// verifies the response's signature and decodes its <method>_response
// object into resp, which must carry a code.
func (g *Gateway) invoke(ctx context.Context, method string, biz, resp any) error {
	raw, err := g.send(ctx, method, biz)
	if err != nil {
		return err
	}
	var c struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("%w: %s: malformed response object: %v", ErrBadResponse, method, err)
	}
	if c.Code == "" {
		return fmt.Errorf("%w: %s: response without a code: %s", ErrBadResponse, method, payment.Snippet(raw))
	}
	if err := json.Unmarshal(raw, resp); err != nil {
		return fmt.Errorf("%w: %s: malformed response object: %v", ErrBadResponse, method, err)
	}
	return nil
}

// send sends one signed request and returns the exact text of its verified
// <method>_response object.
func (g *Gateway) send(ctx context.Context, method string, bizContent any) ([]byte, error) {
	biz, err := json.Marshal(bizContent)
	if err != nil {
		return nil, err
	}
	params := url.Values{
		"app_id":      {g.cfg.AppID},
		"method":      {method},
		"format":      {"JSON"},
		"charset":     {"utf-8"},
		"sign_type":   {"RSA2"},
		"timestamp":   {g.cfg.Now().In(Beijing).Format(TimeLayout)},
		"version":     {"1.0"},
		"biz_content": {string(biz)},
	}
	sig, err := Sign(g.cfg.PrivateKey, params)
	if err != nil {
		return nil, err
	}
	params.Set("sign", sig)

	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url, strings.NewReader(params.Encode()))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded;charset=utf-8")
	req.Header.Set("Accept", "application/json")
	resp, err := g.cfg.HTTPClient.Do(req)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // without the URL
		}
		var badCert *tls.CertificateVerificationError
		if errors.As(err, &badCert) {
			return nil, fmt.Errorf("%s: Alipay's TLS certificate: %w", method, err)
		}
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading the answer (%d): %w", method, resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s: HTTP %d: %s", ErrBadResponse, method, resp.StatusCode, payment.Snippet(body))
	}
	if len(body) > maxResponseBytes {
		return nil, fmt.Errorf("%w: %s: answer over %d bytes", ErrBadResponse, method, maxResponseBytes)
	}
	return g.verifyResponse(method, body)
}

// verifyResponse returns the exact text of the response's
// <method>_response object once its signature verifies.
func (g *Gateway) verifyResponse(method string, body []byte) ([]byte, error) {
	var env map[string]json.RawMessage
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("%w: %s: not JSON: %v: %s", ErrBadResponse, method, err, payment.Snippet(body))
	}
	key := strings.ReplaceAll(method, ".", "_") + "_response"
	raw, ok := env[key]
	if !ok {
		// A gateway-level error (a wrong app_id, a bad request signature)
		// comes as error_response; it is shown, never acted on.
		if e, ok := env["error_response"]; ok {
			return nil, fmt.Errorf("%w: %s: error_response %s", ErrBadResponse, method, payment.Snippet(e))
		}
		return nil, fmt.Errorf("%w: %s: no %s in the answer: %s", ErrBadResponse, method, key, payment.Snippet(body))
	}
	var sig string
	if s, ok := env["sign"]; !ok || json.Unmarshal(s, &sig) != nil || sig == "" {
		return nil, fmt.Errorf("%w: %s: unsigned response: %s", ErrBadResponse, method, payment.Snippet(body))
	}
	if err := Verify(g.cfg.AlipayPublicKey, raw, sig); err != nil {
		return nil, fmt.Errorf("%w: %s: response signature: %w", ErrBadResponse, method, err)
	}
	return raw, nil
}

// SignContent is the text an RSA2 signature covers: the k=v pairs of the
// non-empty parameters but those named in exclude, sorted by name and
// joined with &, values as they are (not URL-encoded). A parameter given
// more than once is an error: Alipay's parameters are single-valued.
func SignContent(params url.Values, exclude ...string) (string, error) {
	keys := make([]string, 0, len(params))
	for k, vs := range params {
		if len(vs) > 1 {
			return "", fmt.Errorf("alipay: parameter %q given %d times", k, len(vs))
		}
		if len(vs) == 0 || vs[0] == "" || contains(exclude, k) {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(params.Get(k))
	}
	return b.String(), nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Sign signs request parameters RSA2 (SHA256withRSA, PKCS #1 v1.5) over
// SignContent(params, "sign") and returns the signature in standard base64.
func Sign(key *rsa.PrivateKey, params url.Values) (string, error) {
	content, err := SignContent(params, "sign")
	if err != nil {
		return "", err
	}
	return SignBytes(key, []byte(content))
}

// SignBytes signs content RSA2 and returns the signature in standard base64.
func SignBytes(key *rsa.PrivateKey, content []byte) (string, error) {
	sum := sha256.Sum256(content)
	sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("alipay: signing: %w", err)
	}
	return base64.StdEncoding.EncodeToString(sig), nil
}

// errSignature is a signature that does not verify.
var errSignature = errors.New("signature does not verify with Alipay's public key")

// Verify checks an RSA2 signature (standard base64) of content.
func Verify(key *rsa.PublicKey, content []byte, sig string) error {
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		return fmt.Errorf("signature is not base64: %w", err)
	}
	sum := sha256.Sum256(content)
	if rsa.VerifyPKCS1v15(key, crypto.SHA256, sum[:], raw) != nil {
		return errSignature
	}
	return nil
}
