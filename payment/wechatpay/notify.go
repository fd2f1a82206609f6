package wechatpay

import (
	"cmp"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/lapsehq/lapse/payment"
)

// ErrInvalidNotification is returned, wrapped, by Notifier.Verify for a
// notification that is forged, stale, signed with another key, tampered
// with, undecryptable, malformed, or meant for another merchant.
var ErrInvalidNotification = errors.New("wechatpay: invalid notification")

// Notifier verifies WeChat Pay's payment and refund notifications (the
// notify_url of an order and of a refund: POST
// /v1/payments/notify/wechatpay) and turns them into lapse's reports. It is
// safe for concurrent use.
type Notifier struct {
	mchID string
	v     verifier
	aead  cipher.AEAD
}

var _ payment.Notifier = (*Notifier)(nil)

// NewNotifier returns the notifier of merchant cfg.MchID, verifying with
// cfg.PlatformCerts and decrypting with cfg.APIv3Key (the request-signing
// fields are not used).
func NewNotifier(cfg Config) (*Notifier, error) {
	switch {
	case cfg.MchID == "":
		return nil, errors.New("wechatpay: Config.MchID is required")
	case len(cfg.APIv3Key) != 32:
		return nil, fmt.Errorf("wechatpay: Config.APIv3Key: %d bytes, want 32", len(cfg.APIv3Key))
	case cfg.Tolerance < 0:
		return nil, errors.New("wechatpay: Config.Tolerance must not be negative")
	}
	cfg.setDefaults()
	v, err := newVerifier(cfg)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(cfg.APIv3Key)
	if err != nil {
		return nil, fmt.Errorf("wechatpay: APIv3 key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("wechatpay: APIv3 key: %w", err)
	}
	return &Notifier{mchID: cfg.MchID, v: v, aead: aead}, nil
}

// Name implements payment.Notifier.
func (*Notifier) Name() string { return "wechatpay" }

// notification is a WeChat Pay notification's body.
type notification struct {
	ID           string `json:"id"`
	CreateTime   string `json:"create_time"`
	EventType    string `json:"event_type"`
	ResourceType string `json:"resource_type"`
	Resource     *struct {
		Algorithm      string `json:"algorithm"`
		Ciphertext     string `json:"ciphertext"`
		AssociatedData string `json:"associated_data"`
		Nonce          string `json:"nonce"`
		OriginalType   string `json:"original_type"`
	} `json:"resource"`
}

// Verify implements payment.Notifier. The signature headers must verify
// over the body with the platform certificate they name, their timestamp
// within the tolerance; the resource must decrypt (AEAD_AES_256_GCM under
// the APIv3 key, which also authenticates it) into a transaction of our
// merchant. trade_state SUCCESS reports the payment of out_trade_no
// (amount.total, in the minor unit of amount.currency, CNY when absent); CLOSED, REVOKED and PAYERROR its failure; any
// other state nothing. A refund's resource (original_type refund: event
// REFUND.SUCCESS, REFUND.ABNORMAL, REFUND.CLOSED) is read by refundReport;
// any other resource reports nothing. The report's CallbackID is the
// notification's id, the same on every delivery.
func (n *Notifier) Verify(_ context.Context, h http.Header, body []byte) ([]payment.Report, error) {
	if err := n.v.verify(h, body); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidNotification, err)
	}
	var nt notification
	if err := json.Unmarshal(body, &nt); err != nil {
		return nil, fmt.Errorf("%w: malformed JSON: %v", ErrInvalidNotification, err)
	}
	if nt.ID == "" || nt.Resource == nil {
		return nil, fmt.Errorf("%w: want an id and a resource", ErrInvalidNotification)
	}
	r := nt.Resource
	if r.Algorithm != "AEAD_AES_256_GCM" {
		return nil, fmt.Errorf("%w: resource algorithm %q, want AEAD_AES_256_GCM", ErrInvalidNotification, r.Algorithm)
	}
	plain, err := n.decrypt(r.Ciphertext, r.Nonce, r.AssociatedData)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidNotification, err)
	}
	if r.OriginalType == "refund" || strings.HasPrefix(nt.EventType, "REFUND.") {
		return n.refundReport(nt.ID, plain)
	}
	if r.OriginalType != "" && r.OriginalType != "transaction" {
		return nil, nil // a complaint's: not lapse's business
	}
	var tx Transaction
	if err := json.Unmarshal(plain, &tx); err != nil {
		return nil, fmt.Errorf("%w: malformed resource: %v", ErrInvalidNotification, err)
	}
	if tx.MchID != n.mchID {
		return nil, fmt.Errorf("%w: mchid %q is not ours", ErrInvalidNotification, tx.MchID)
	}
	if tx.OutTradeNo == "" || tx.TradeState == "" {
		return nil, fmt.Errorf("%w: the transaction has no out_trade_no or trade_state", ErrInvalidNotification)
	}
	switch tx.TradeState {
	case stateSuccess:
		st, err := tx.status()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidNotification, err)
		}
		return []payment.Report{{PaymentID: tx.OutTradeNo, Succeeded: true, AmountCents: st.AmountCents, Currency: st.Currency, CallbackID: nt.ID}}, nil
	case stateClosed, stateRevoked, statePayError:
		return []payment.Report{{PaymentID: tx.OutTradeNo, CallbackID: nt.ID}}, nil
	}
	return nil, nil
}

// refundNotice is the part of a refund notification's resource lapse reads.
type refundNotice struct {
	MchID        string `json:"mchid"`
	OutTradeNo   string `json:"out_trade_no"`
	OutRefundNo  string `json:"out_refund_no"`
	RefundID     string `json:"refund_id"`
	RefundStatus string `json:"refund_status"`
	Amount       *struct {
		Refund *int64 `json:"refund"`
	} `json:"amount"`
}

// refundReport reads a refund notification's decrypted resource: a refund
// of our merchant's out_trade_no. refund_status SUCCESS reports it
// succeeded, of amount.refund fen (the notification names no currency:
// the trade's, read as the order's); ABNORMAL (the buyer's account cannot
// take it back) and CLOSED report it failed; another status nothing.
func (n *Notifier) refundReport(id string, plain []byte) ([]payment.Report, error) {
	var rn refundNotice
	if err := json.Unmarshal(plain, &rn); err != nil {
		return nil, fmt.Errorf("%w: malformed refund resource: %v", ErrInvalidNotification, err)
	}
	if rn.MchID != n.mchID {
		return nil, fmt.Errorf("%w: mchid %q is not ours", ErrInvalidNotification, rn.MchID)
	}
	if rn.OutTradeNo == "" || rn.RefundStatus == "" {
		return nil, fmt.Errorf("%w: the refund has no out_trade_no or refund_status", ErrInvalidNotification)
	}
	rep := payment.Report{Kind: payment.ReportRefund, PaymentID: rn.OutTradeNo, RefundID: cmp.Or(rn.RefundID, rn.OutRefundNo), CallbackID: id}
	switch rn.RefundStatus {
	case refundSuccess:
		if rn.Amount == nil || rn.Amount.Refund == nil || *rn.Amount.Refund <= 0 {
			return nil, fmt.Errorf("%w: refund SUCCESS without a valid amount.refund", ErrInvalidNotification)
		}
		rep.Succeeded, rep.AmountCents = true, *rn.Amount.Refund
	case refundAbnormal, refundClosed:
	default:
		return nil, nil
	}
	return []payment.Report{rep}, nil
}

// decrypt opens a resource. Its errors never show the key.
func (n *Notifier) decrypt(ciphertext, nonce, associatedData string) ([]byte, error) {
	ct, err := base64.StdEncoding.DecodeString(ciphertext)
	if err != nil {
		return nil, errors.New("resource ciphertext is not base64")
	}
	if len(nonce) != n.aead.NonceSize() {
		return nil, fmt.Errorf("resource nonce of %d bytes, want %d", len(nonce), n.aead.NonceSize())
	}
	plain, err := n.aead.Open(nil, []byte(nonce), ct, []byte(associatedData))
	if err != nil {
		return nil, errors.New("resource does not decrypt with the APIv3 key (tampered, or another key)")
	}
	return plain, nil
}

// Acknowledge implements payment.Notifier: 204, no body.
func (*Notifier) Acknowledge(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }

// Refuse implements payment.Notifier: {"code":"FAIL","message":…}, 400 for
// a notification that failed verification, 413 for one over lapse's size
// limit (a *http.MaxBytesError: it will not fit the next time either) and
// 500 for one lapse could not apply; WeChat Pay sends it again whatever
// the answer, but only a 5xx says that lapse may take it later.
func (*Notifier) Refuse(w http.ResponseWriter, err error) {
	code, msg := http.StatusInternalServerError, "not applied; send it again"
	if errors.Is(err, ErrInvalidNotification) {
		code, msg = http.StatusBadRequest, "verification failed"
	} else if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		code, msg = http.StatusRequestEntityTooLarge, "notification too large"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": "FAIL", "message": msg})
}
