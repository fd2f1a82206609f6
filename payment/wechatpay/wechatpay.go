// Package wechatpay is lapse's WeChat Pay adapter (API v3): a
// payment.AttemptGateway on the query-by-out_trade_no and close calls, and
// a payment.Notifier of WeChat Pay's payment notifications, written on the
// standard library from WeChat Pay's documented formats:
//
//   - requests carry Authorization: WECHATPAY2-SHA256-RSA2048 mchid="…",
//     nonce_str="…",signature="…",timestamp="…",serial_no="…", the
//     signature SHA256withRSA (PKCS #1 v1.5) with the merchant's private key
//     over "METHOD\nURL\ntimestamp\nnonce\nbody\n" (URL: the path and query
//     as sent);
//   - every response, and every notification, is verified with the WeChat
//     Pay platform certificate named by Wechatpay-Serial over
//     "timestamp\nnonce\nbody\n" (Wechatpay-Timestamp, Wechatpay-Nonce,
//     Wechatpay-Signature), and refused when its timestamp is more than five
//     minutes off, before anything in it is read;
//   - a notification's resource is decrypted with AEAD_AES_256_GCM under
//     the APIv3 key.
//
// The trade of a payment attempt is its out_trade_no: lapse's payment_id.
// Query and Close, which speak of the order as a whole, use the order id as
// out_trade_no.
package wechatpay

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/redact"
)

// DefaultAPIBase is WeChat Pay's API v3 host.
const DefaultAPIBase = "https://api.mch.weixin.qq.com"

// DefaultTolerance is how far a response's or notification's signed
// timestamp may be from the clock.
const DefaultTolerance = 5 * time.Minute

// TimeExpire is the time_expire to give a WeChat Pay order (JSAPI, Native,
// H5, App) that must not be paid after payBefore (lapse's pay_before):
// RFC 3339 with a UTC offset, rounded down to the second.
func TimeExpire(payBefore time.Time) string {
	return payBefore.Truncate(time.Second).Format(time.RFC3339)
}

// ErrBadResponse is returned, wrapped, when WeChat Pay answers something
// the adapter cannot trust or read: a status it does not expect, a body
// that is not the API's, a signature that does not verify or is stale, an
// unknown trade_state, another trade's record. It means "unknown": lapse
// asks again later and never cancels on it.
var ErrBadResponse = errors.New("wechatpay: unexpected response")

// Config configures a Gateway and a Notifier.
type Config struct {
	// MchID is the merchant id (mchid). Required.
	MchID string
	// SerialNo is the serial number of the merchant's API certificate (商户
	// API证书序列号), sent as serial_no. Required by the Gateway.
	SerialNo string
	// PrivateKey is the merchant's API private key (apiclient_key.pem): it
	// signs the requests. Required by the Gateway. Never logged or shown
	// in an error.
	PrivateKey *rsa.PrivateKey
	// PlatformCerts are WeChat Pay's platform certificates (平台证书): the
	// one whose serial a response or notification names verifies it (more
	// than one while WeChat Pay rotates them). Required.
	PlatformCerts []*x509.Certificate
	// APIv3Key decrypts the notifications' resource (AES-256-GCM): 32
	// bytes. Required by the Notifier. Never logged or shown in an error.
	APIv3Key []byte
	// APIBase is the API's scheme and host. Defaults to DefaultAPIBase.
	APIBase string
	// Timeout bounds one request. Defaults to 5 s. The adapter does not
	// retry: lapse's gateway check asks again later with backoff.
	Timeout time.Duration
	// Tolerance is how far a signed timestamp may be from Now. Defaults to
	// DefaultTolerance.
	Tolerance time.Duration
	// HTTPClient sends the requests. Defaults to a client of its own that
	// does not follow redirects.
	HTTPClient *http.Client
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.APIBase == "" {
		c.APIBase = DefaultAPIBase
	}
	c.APIBase = strings.TrimRight(c.APIBase, "/")
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	if c.Tolerance == 0 {
		c.Tolerance = DefaultTolerance
	}
	if c.HTTPClient == nil {
		c.HTTPClient = payment.NewHTTPClient()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// verifier checks WeChat Pay's signatures (responses and notifications).
type verifier struct {
	certs     map[string]*rsa.PublicKey // by normalised serial
	tolerance time.Duration
	now       func() time.Time
}

func newVerifier(cfg Config) (verifier, error) {
	if len(cfg.PlatformCerts) == 0 {
		return verifier{}, errors.New("wechatpay: Config.PlatformCerts (WeChat Pay's platform certificate) is required")
	}
	v := verifier{certs: map[string]*rsa.PublicKey{}, tolerance: cfg.Tolerance, now: cfg.Now}
	for _, c := range cfg.PlatformCerts {
		k, ok := c.PublicKey.(*rsa.PublicKey)
		if !ok {
			return verifier{}, fmt.Errorf("wechatpay: platform certificate %X: a %T key, want RSA", c.SerialNumber, c.PublicKey)
		}
		v.certs[serialKey(fmt.Sprintf("%X", c.SerialNumber))] = k
	}
	return v, nil
}

// serialKey normalises a certificate serial in hex: upper case, no leading zeros.
func serialKey(s string) string {
	s = strings.TrimLeft(strings.ToUpper(strings.TrimSpace(s)), "0")
	if s == "" {
		return "0"
	}
	return s
}

// Signature headers.
const (
	headerTimestamp = "Wechatpay-Timestamp"
	headerNonce     = "Wechatpay-Nonce"
	headerSignature = "Wechatpay-Signature"
	headerSerial    = "Wechatpay-Serial"
	headerSigType   = "Wechatpay-Signature-Type"
	signatureType   = "WECHATPAY2-SHA256-RSA2048"
)

// verify checks the signature headers h over body.
func (v verifier) verify(h http.Header, body []byte) error {
	ts, nonce, sig, serial := h.Get(headerTimestamp), h.Get(headerNonce), h.Get(headerSignature), h.Get(headerSerial)
	if ts == "" || nonce == "" || sig == "" || serial == "" {
		return errors.New("unsigned: want Wechatpay-Timestamp, -Nonce, -Signature and -Serial")
	}
	if t := h.Get(headerSigType); t != "" && t != signatureType {
		return fmt.Errorf("Wechatpay-Signature-Type %q, want %s", t, signatureType)
	}
	key, ok := v.certs[serialKey(serial)]
	if !ok {
		return fmt.Errorf("signed by platform certificate %q, which is not configured", serial)
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("Wechatpay-Timestamp %q is not unix seconds", ts)
	}
	if off := v.now().Sub(time.Unix(secs, 0)); off > v.tolerance || off < -v.tolerance {
		return fmt.Errorf("Wechatpay-Timestamp %s is %s off the clock (tolerance %s)", ts, off.Round(time.Second), v.tolerance)
	}
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		return errors.New("Wechatpay-Signature is not base64")
	}
	sum := sha256.Sum256([]byte(ts + "\n" + nonce + "\n" + string(body) + "\n"))
	if rsa.VerifyPKCS1v15(key, crypto.SHA256, sum[:], raw) != nil {
		return errors.New("signature does not verify with the platform certificate")
	}
	return nil
}

// Gateway is the WeChat Pay adapter: a payment.AttemptGateway. It is safe
// for concurrent use.
type Gateway struct {
	// ByTradeNo gives Query, QueryAttempt, Close and CloseAttempt: the
	// order's trade is numbered by its id, each attempt's by its payment id.
	payment.ByTradeNo
	cfg Config
	v   verifier
}

var _ payment.AttemptGateway = (*Gateway)(nil)

// New returns the adapter.
func New(cfg Config) (*Gateway, error) {
	switch {
	case cfg.MchID == "":
		return nil, errors.New("wechatpay: Config.MchID is required")
	case cfg.SerialNo == "":
		return nil, errors.New("wechatpay: Config.SerialNo (the merchant certificate's serial) is required")
	case cfg.PrivateKey == nil:
		return nil, errors.New("wechatpay: Config.PrivateKey (the merchant's API private key) is required")
	case cfg.Timeout < 0 || cfg.Tolerance < 0:
		return nil, errors.New("wechatpay: Config.Timeout and Tolerance must not be negative")
	}
	cfg.setDefaults()
	u, err := url.Parse(cfg.APIBase)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" {
		return nil, fmt.Errorf("wechatpay: API base %q: want http(s)://host[:port]", redact.URL(cfg.APIBase))
	}
	v, err := newVerifier(cfg)
	if err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, v: v}
	g.ByTradeNo = payment.ByTradeNo{Name: "wechatpay", Trades: g}
	return g, nil
}

// QueryTrade implements payment.Trades: the trade of out_trade_no.
func (g *Gateway) QueryTrade(ctx context.Context, outTradeNo string) (payment.Status, error) {
	st, _, err := g.query(ctx, outTradeNo)
	return st, err
}

// CloseTrade implements payment.Trades.
func (g *Gateway) CloseTrade(ctx context.Context, outTradeNo string) error {
	return g.close(ctx, outTradeNo)
}

// Transaction is the part of a WeChat Pay transaction (the query's answer,
// a payment notification's decrypted resource) the adapter reads.
type Transaction struct {
	MchID         string `json:"mchid"`
	OutTradeNo    string `json:"out_trade_no"`
	TransactionID string `json:"transaction_id"`
	TradeState    string `json:"trade_state"`
	Amount        *struct {
		// Total is the order's amount, in Currency (CNY when absent);
		// payer_total and payer_currency, what the buyer paid in their
		// own currency, are not the merchant's amount and are not read.
		Total    *int64 `json:"total"`
		Currency string `json:"currency"`
	} `json:"amount"`
}

// Domestic is the currency of an amount that names none: yuan.
const Domestic = "CNY"

// AcceptsCurrency implements payment.CurrencyGateway: the adapter opens no
// order itself and its Config names no currency, so lapse's orders are
// taken in yuan only (a transaction's amount.currency is still read and
// compared).
func (g *Gateway) AcceptsCurrency(currency string) bool { return currency == Domestic }

var _ payment.CurrencyGateway = (*Gateway)(nil)

// Trade states.
const (
	stateSuccess    = "SUCCESS"
	stateNotPay     = "NOTPAY"
	stateUserPaying = "USERPAYING"
	stateClosed     = "CLOSED"
	stateRevoked    = "REVOKED"
	statePayError   = "PAYERROR"
)

// apiError is the body of a WeChat Pay error answer.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func parseAPIError(body []byte) apiError {
	var e apiError
	_ = json.Unmarshal(body, &e)
	return e
}

// query returns the trade's state, and whether WeChat Pay knows the trade.
func (g *Gateway) query(ctx context.Context, outTradeNo string) (payment.Status, bool, error) {
	tx, known, err := g.transaction(ctx, outTradeNo)
	if err != nil {
		return payment.Status{}, false, err
	}
	if !known {
		return payment.Status{State: payment.StateNotPaid}, false, nil
	}
	st, err := tx.status()
	if err != nil {
		return payment.Status{}, false, fmt.Errorf("%w: query: %w", ErrBadResponse, err)
	}
	return st, true, nil
}

// transaction returns the trade of outTradeNo as WeChat Pay answers it, and
// whether WeChat Pay knows it (404 ORDER_NOT_EXIST: it does not).
func (g *Gateway) transaction(ctx context.Context, outTradeNo string) (Transaction, bool, error) {
	path := "/v3/pay/transactions/out-trade-no/" + url.PathEscape(outTradeNo) + "?mchid=" + url.QueryEscape(g.cfg.MchID)
	code, body, err := g.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return Transaction{}, false, err
	}
	switch code {
	case http.StatusOK:
	case http.StatusNotFound:
		if e := parseAPIError(body); e.Code == "ORDER_NOT_EXIST" {
			return Transaction{}, false, nil
		}
		return Transaction{}, false, fmt.Errorf("%w: query: 404 without ORDER_NOT_EXIST: %s", ErrBadResponse, payment.Snippet(body))
	default:
		return Transaction{}, false, fmt.Errorf("%w: query: HTTP %d: %s", ErrBadResponse, code, payment.Snippet(body))
	}
	var tx Transaction
	if err := json.Unmarshal(body, &tx); err != nil {
		return Transaction{}, false, fmt.Errorf("%w: query: malformed transaction: %v: %s", ErrBadResponse, err, payment.Snippet(body))
	}
	if tx.OutTradeNo != outTradeNo || tx.MchID != g.cfg.MchID {
		return Transaction{}, false, fmt.Errorf("%w: query: the answer is about out_trade_no %q of mchid %q", ErrBadResponse, tx.OutTradeNo, tx.MchID)
	}
	return tx, true, nil
}

// status maps a transaction's trade_state. REFUND (paid, then refunded in
// part or whole) is PAID and Refunded: the payment happened.
func (tx Transaction) status() (payment.Status, error) {
	switch tx.TradeState {
	case stateSuccess, stateRefund:
		if tx.Amount == nil || tx.Amount.Total == nil || *tx.Amount.Total < 0 {
			return payment.Status{}, fmt.Errorf("%s without a valid amount.total", tx.TradeState)
		}
		currency := tx.Amount.Currency
		if currency == "" {
			currency = Domestic
		}
		if len(currency) != 3 || strings.IndexFunc(currency, func(r rune) bool { return (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') }) >= 0 {
			return payment.Status{}, fmt.Errorf("amount.currency %q: want an ISO 4217 code", currency)
		}
		return payment.Status{State: payment.StatePaid, PaymentID: tx.OutTradeNo, AmountCents: *tx.Amount.Total,
			Currency: strings.ToUpper(currency), Refunded: tx.TradeState == stateRefund}, nil
	case stateNotPay:
		return payment.Status{State: payment.StateNotPaid}, nil
	case stateUserPaying:
		return payment.Status{State: payment.StatePending}, nil
	case stateClosed, stateRevoked, statePayError:
		return payment.Status{State: payment.StateClosed}, nil
	}
	return payment.Status{}, fmt.Errorf("unknown trade_state %q", tx.TradeState)
}

// close closes a trade, then asks what became of it: WeChat Pay answers 204
// to a repeated close and to an out_trade_no it never saw alike, and a
// payment can land while the close is under way, so the close counts once
// the query finds the trade closed (or unknown); a trade found paid is
// payment.ErrAlreadyPaid.
func (g *Gateway) close(ctx context.Context, outTradeNo string) error {
	body, err := json.Marshal(struct {
		MchID string `json:"mchid"`
	}{g.cfg.MchID})
	if err != nil {
		return err
	}
	code, answer, err := g.do(ctx, http.MethodPost, "/v3/pay/transactions/out-trade-no/"+url.PathEscape(outTradeNo)+"/close", body)
	if err != nil {
		return err
	}
	var refused string
	switch code {
	case http.StatusNoContent:
	case http.StatusAccepted, http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound:
		// USER_PAYING, ORDER_CLOSED, ORDERPAID, ORDER_NOT_EXIST…: the query tells.
		e := parseAPIError(answer)
		refused = fmt.Sprintf("close answered %d %s (%s)", code, e.Code, e.Message)
	default:
		return fmt.Errorf("%w: close: HTTP %d: %s", ErrBadResponse, code, payment.Snippet(answer))
	}
	st, known, err := g.query(ctx, outTradeNo)
	if err != nil {
		if refused != "" {
			return fmt.Errorf("%s; the query that was to tell why: %w", refused, err)
		}
		return fmt.Errorf("the query after the close: %w", err)
	}
	switch {
	case st.State == payment.StatePaid:
		return payment.ErrAlreadyPaid
	case st.State == payment.StateClosed, !known:
		return nil
	case refused != "":
		return fmt.Errorf("%w: %s, and the trade is %s", ErrBadResponse, refused, st.State)
	}
	return fmt.Errorf("%w: close answered 204, yet the trade is %s", ErrBadResponse, st.State)
}

// maxResponseBytes bounds what is read of an answer.
const maxResponseBytes = 1 << 20

// do sends one signed request (body nil for none) to the API path (with its
// query) and returns the status and body of an answer whose signature
// verified. A 5xx is an error.
func (g *Gateway) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.cfg.APIBase+path, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	auth, err := g.authorization(method, req.URL.RequestURI(), body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "lapse")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.cfg.HTTPClient.Do(req)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // without the URL
		}
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: reading the answer (%d): %w", method, path, resp.StatusCode, err)
	}
	if len(answer) > maxResponseBytes {
		return 0, nil, fmt.Errorf("%w: %s %s: answer over %d bytes", ErrBadResponse, method, path, maxResponseBytes)
	}
	if resp.StatusCode >= 500 {
		return 0, nil, fmt.Errorf("%w: %s %s: HTTP %d: %s", ErrBadResponse, method, path, resp.StatusCode, payment.Snippet(answer))
	}
	if err := g.v.verify(resp.Header, answer); err != nil {
		return 0, nil, fmt.Errorf("%w: %s %s: HTTP %d, response signature: %w", ErrBadResponse, method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, answer, nil
}

// authorization is the request's WECHATPAY2-SHA256-RSA2048 Authorization
// header, signing "METHOD\nURL\ntimestamp\nnonce\nbody\n".
func (g *Gateway) authorization(method, uri string, body []byte) (string, error) {
	var n [16]byte
	if _, err := rand.Read(n[:]); err != nil {
		return "", err
	}
	nonce := strings.ToUpper(hex.EncodeToString(n[:]))
	ts := strconv.FormatInt(g.cfg.Now().Unix(), 10)
	sum := sha256.Sum256([]byte(method + "\n" + uri + "\n" + ts + "\n" + nonce + "\n" + string(body) + "\n"))
	sig, err := rsa.SignPKCS1v15(nil, g.cfg.PrivateKey, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("wechatpay: signing the request: %w", err)
	}
	return fmt.Sprintf(`%s mchid="%s",nonce_str="%s",signature="%s",timestamp="%s",serial_no="%s"`,
		signatureType, g.cfg.MchID, nonce, base64.StdEncoding.EncodeToString(sig), ts, g.cfg.SerialNo), nil
}
