package main

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment/alipay"
	"github.com/lapsehq/lapse/payment/alipay/alipaytest"
	"github.com/lapsehq/lapse/payment/wechatpay"
	"github.com/lapsehq/lapse/payment/wechatpay/wechatpaytest"
)

// cnFiles are key files written for the test, those the local gateways
// (alipaytest, wechatpaytest) sign and verify with: the Alipay app's
// private key and Alipay's public key; the WeChat Pay merchant's private
// key, the platform certificate and the APIv3 key.
type cnFiles struct {
	privateKey, publicKey, merchantKey, cert, apiV3, broken string
	alipayKey                                               *rsa.PrivateKey // signs as Alipay
}

// brokenKeyMarker is in a malformed key file: no error may show it.
const brokenKeyMarker = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDSECRET"

func writeCNFiles(t *testing.T) cnFiles {
	t.Helper()
	dir := t.TempDir()
	ali, wx := alipaytest.TestKeys(), wechatpaytest.TestKeys()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	private := func(key *rsa.PrivateKey) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	pub, err := x509.MarshalPKIXPublicKey(&ali.Alipay.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return cnFiles{
		privateKey:  write("app_key.pem", private(ali.App)),
		publicKey:   write("alipay_public.pem", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})),
		merchantKey: write("merchant_key.pem", private(wx.Merchant)),
		cert:        write("platform.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: wx.PlatformCert.Raw})),
		apiV3:       write("apiv3.key", append(append([]byte(nil), wx.APIv3...), '\n')),
		broken:      write("broken.pem", []byte("-----BEGIN PRIVATE KEY-----\n"+brokenKeyMarker+"\n-----END PRIVATE KEY-----\n")),
		alipayKey:   ali.Alipay,
	}
}

// --gateway alipay and --gateway wechatpay open their adapter and its
// notifier; a missing flag or a bad key is an error that names the flag and
// never shows the key.
func TestCNGatewayFlags(t *testing.T) {
	t.Parallel()
	f := writeCNFiles(t)
	open := func(args ...string) (any, []string, error) {
		t.Helper()
		fs := newFlagSet("serve", io.Discard)
		gw := addGatewayFlags(fs)
		if err := parseFlags(fs, args); err != nil {
			t.Fatalf("parse %v: %v", args, err)
		}
		g, ns, err := gw.open(slog.New(slog.DiscardHandler))
		var names []string
		for _, n := range ns {
			names = append(names, n.Name())
		}
		return g, names, err
	}
	alipayArgs := []string{"--gateway", "alipay", "--alipay-app-id", "2021000000000001", "--alipay-private-key-file", f.privateKey,
		"--alipay-public-key-file", f.publicKey}
	g, names, err := open(alipayArgs...)
	if _, ok := g.(*alipay.Gateway); !ok || err != nil || strings.Join(names, ",") != "alipay" {
		t.Fatalf("--gateway alipay: %T %v %v", g, names, err)
	}
	wechatArgs := []string{"--gateway", "wechatpay", "--wechatpay-mchid", "1230000109", "--wechatpay-serial", "3775B6A45ACD5888",
		"--wechatpay-private-key-file", f.merchantKey, "--wechatpay-platform-cert-file", f.cert, "--wechatpay-apiv3-key-file", f.apiV3}
	g, names, err = open(wechatArgs...)
	if _, ok := g.(*wechatpay.Gateway); !ok || err != nil || strings.Join(names, ",") != "wechatpay" {
		t.Fatalf("--gateway wechatpay: %T %v %v", g, names, err)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{alipayArgs[:4], "--alipay-public-key-file"},
		{append(alipayArgs[:4:4], "--alipay-public-key-file", f.publicKey), "--alipay-private-key-file"},
		{append(alipayArgs[:4:4], "--alipay-private-key-file", f.broken, "--alipay-public-key-file", f.publicKey), "--alipay-private-key"},
		{append(alipayArgs[:4:4], "--alipay-private-key-file", f.privateKey, "--alipay-public-key-file", f.cert), "--alipay-public-key-file"},
		{wechatArgs[:6], "--wechatpay-platform-cert-file"},
		{append(wechatArgs[:8:8], "--wechatpay-platform-cert-file", f.cert, "--wechatpay-apiv3-key-file", f.privateKey), "--wechatpay-apiv3-key"},
		{append(wechatArgs[:6:6], "--wechatpay-private-key-file", f.broken, "--wechatpay-platform-cert-file", f.cert, "--wechatpay-apiv3-key-file", f.apiV3), "--wechatpay-private-key"},
	} {
		g, _, err := open(c.args...)
		if err == nil || g != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %T %v, want an error naming %s", c.args, g, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), brokenKeyMarker[20:]) || strings.Contains(err.Error(), "a7cde1ZJB1") || strings.Contains(err.Error(), "PRIVATE KEY") {
			t.Errorf("%v: the error shows key material: %v", c.args, err)
		}
	}
}

// lapse serve --gateway alipay serves POST /v1/payments/notify/alipay: a
// notification signed by Alipay's key marks the order paid and is answered
// "success"; a forged one "failure".
func TestAlipayNotificationThroughServe(t *testing.T) {
	t.Parallel()
	f := writeCNFiles(t)
	s := startServe(t, nil, "--store", "sqlite://"+filepath.Join(t.TempDir(), "lapse.db"),
		"--gateway", "alipay", "--alipay-app-id", "2021000000000001", "--alipay-private-key-file", f.privateKey,
		"--alipay-public-key-file", f.publicKey, "--alipay-gateway-url", "http://127.0.0.1:1/gateway.do")
	s.call("PUT", "/v1/skus/tee", `{"available": 5}`, 200)
	s.call("POST", "/v1/orders", `{"id":"cn-1","items":[{"sku":"tee","qty":1}],"amount_cents":999,"currency":"CNY","timeout_seconds":600}`, 201)
	s.call("POST", "/v1/orders/cn-1/pay", `{"payment_id":"ali-cn-1"}`, 200)
	v := url.Values{"notify_id": {"n-1"}, "notify_type": {"trade_status_sync"}, "app_id": {"2021000000000001"}, "charset": {"utf-8"},
		"version": {"1.0"}, "sign_type": {"RSA2"}, "trade_no": {"2026010122001"}, "out_trade_no": {"ali-cn-1"},
		"trade_status": {"TRADE_SUCCESS"}, "total_amount": {"9.99"}, "notify_time": {"2026-01-01 12:00:00"}}
	content, err := alipay.SignContent(v, "sign", "sign_type")
	if err != nil {
		t.Fatal(err)
	}
	sig, err := alipay.SignBytes(f.alipayKey, []byte(content))
	if err != nil {
		t.Fatal(err)
	}
	post := func(v url.Values) string {
		t.Helper()
		resp, err := http.Post(s.url+"/v1/payments/notify/alipay", "application/x-www-form-urlencoded", strings.NewReader(v.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	forged := url.Values{}
	for k, vs := range v {
		forged[k] = vs
	}
	forged.Set("sign", sig)
	forged.Set("total_amount", "0.01")
	if got := post(forged); got != "failure" {
		t.Fatalf("forged: %q", got)
	}
	if o := s.call("GET", "/v1/orders/cn-1", "", 200); o["status"] != "PAYING" {
		t.Fatalf("after a forged notification: %v", o["status"])
	}
	v.Set("sign", sig)
	if got := post(v); got != "success" {
		t.Fatalf("signed: %q", got)
	}
	if o := s.call("GET", "/v1/orders/cn-1", "", 200); o["status"] != "PAID" || o["payment_id"] != "ali-cn-1" {
		t.Fatalf("after the notification: %v by %v", o["status"], o["payment_id"])
	}
}

// `lapse reconcile --gateway alipay` asks Alipay about each trade
// (out_trade_no: the payment_id) lapse recorded of an order, on a store
// that `lapse serve --gateway alipay` filled against the same local Alipay:
// clean, then a superseded trade of a cancelled order found paid and the
// paid order's trade of another amount.
func TestReconcileWithAlipay(t *testing.T) {
	t.Parallel()
	f := writeCNFiles(t)
	ali := alipaytest.New(t)
	gateway := []string{"--gateway", "alipay", "--alipay-app-id", "2021000000000001", "--alipay-private-key-file", f.privateKey,
		"--alipay-public-key-file", f.publicKey, "--alipay-gateway-url", ali.URL}
	db := "sqlite://" + filepath.Join(t.TempDir(), "lapse.db")
	s := startServe(t, nil, append([]string{"--store", db, "--grace", "0s"}, gateway...)...)
	s.call("PUT", "/v1/skus/tee", `{"available": 5}`, 200)
	for _, id := range []string{"cn-paid", "cn-cancelled", "cn-abandoned"} {
		s.call("POST", "/v1/orders", fmt.Sprintf(`{"id":%q,"items":[{"sku":"tee","qty":1}],"amount_cents":999,"currency":"CNY","timeout_seconds":2}`, id), 201)
	}
	for _, no := range []string{"ali-old", "ali-new"} {
		ali.SetStatus(no, "WAIT_BUYER_PAY", 0) // the buyer scanned each code
	}
	ali.SetStatus("ali-paid", "TRADE_SUCCESS", 999) // paid, its notification lost: the deadline's check finds it
	s.call("POST", "/v1/orders/cn-paid/pay", `{"payment_id":"ali-paid"}`, 200)
	s.call("POST", "/v1/orders/cn-cancelled/pay", `{"payment_id":"ali-old"}`, 200)
	s.call("POST", "/v1/orders/cn-cancelled/pay", `{"payment_id":"ali-new"}`, 200)
	s.waitStatus("cn-paid", "PAID", 15*time.Second)
	s.waitStatus("cn-cancelled", "CANCELLED", 15*time.Second)
	s.waitStatus("cn-abandoned", "CANCELLED", 15*time.Second)
	s.stop()
	for _, no := range []string{"ali-old", "ali-new"} {
		if tr, _ := ali.Trade(no); tr.Status != "TRADE_CLOSED" {
			t.Fatalf("%s after lapse serve: %s, want TRADE_CLOSED", no, tr.Status)
		}
	}

	queries, closes := ali.Calls("alipay.trade.query"), ali.Calls("alipay.trade.close")
	rep, stderr, code := reconcileJSON(t, append([]string{"--store", db}, gateway...)...)
	if code != 0 || !rep.OK() || rep.Orders != 3 || rep.GatewayRecords != 2 {
		t.Fatalf("reconcile of a store Alipay agrees with: exit %d, %+v\n%s", code, rep, stderr)
	}
	if q, c := ali.Calls("alipay.trade.query")-queries, ali.Calls("alipay.trade.close")-closes; q != 3 || c != 0 {
		t.Errorf("reconcile made %d trade.query and %d trade.close calls; want 3 (one per trade) and none", q, c)
	}

	// ali-old, closed when ali-new superseded it, is paid after all; and
	// Alipay has ali-paid for another amount than the order's.
	ali.SetStatus("ali-old", "TRADE_SUCCESS", 999)
	ali.SetStatus("ali-paid", "TRADE_SUCCESS", 990)
	rep, stderr, code = reconcileJSON(t, append([]string{"--store", db}, gateway...)...)
	want := []string{"amount_mismatch cn-paid ali-paid", "cancelled_but_paid cn-cancelled ali-old"}
	if got := mismatchRows(rep.Mismatches); code != 1 || !slices.Equal(got, want) || len(rep.Errors) != 0 {
		t.Fatalf("exit %d, mismatches %q, errors %v; want 1 and %q\n%s", code, got, rep.Errors, want, stderr)
	}
}
