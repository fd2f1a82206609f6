package alipay_test

import (
	"crypto/rsa"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/alipay"
	"github.com/lapsehq/lapse/payment/alipay/alipaytest"
)

const (
	appID   = alipaytest.AppID
	timeout = 250 * time.Millisecond
)

// keys are the test's keys: the app's (signs requests), Alipay's (signs
// responses and notifications), and an attacker's.
func keys() (k struct{ app, alipay, other *rsa.PrivateKey }) {
	tk := alipaytest.TestKeys()
	k.app, k.alipay, k.other = tk.App, tk.Alipay, tk.Other
	return k
}

// signContent and rsa2 are the fake's signing, written from Alipay's
// documentation independently of the package's.
var (
	signContent = alipaytest.SignContent
	rsa2        = alipaytest.RSA2
)

func newFake(t *testing.T) (*alipaytest.Server, string) {
	f := alipaytest.New(t)
	return f, f.URL
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

var _ payment.AttemptGateway = (*alipay.Gateway)(nil)
