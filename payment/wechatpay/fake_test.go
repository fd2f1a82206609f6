package wechatpay_test

import (
	"crypto/rsa"
	"crypto/x509"
	"net/http"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment/wechatpay"
	"github.com/lapsehq/lapse/payment/wechatpay/wechatpaytest"
)

const (
	mchID          = wechatpaytest.MchID
	merchantSerial = wechatpaytest.MerchantSerial
	timeout        = 250 * time.Millisecond
)

var (
	keys           = wechatpaytest.TestKeys
	platformSerial = wechatpaytest.PlatformSerial
)

func newFake(t *testing.T) (*wechatpaytest.Server, string) {
	f := wechatpaytest.New(t)
	return f, f.URL
}

func newGateway(t *testing.T, base string) *wechatpay.Gateway {
	t.Helper()
	k := keys()
	gw, err := wechatpay.New(wechatpay.Config{MchID: mchID, SerialNo: merchantSerial, PrivateKey: k.Merchant,
		PlatformCerts: []*x509.Certificate{k.PlatformCert}, APIBase: base, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return gw
}

func headers(key *rsa.PrivateKey, serial string, at time.Time, body []byte) http.Header {
	h := http.Header{"Content-Type": {"application/json"}}
	wechatpaytest.SignHeaders(h, key, serial, at, body)
	return h
}
