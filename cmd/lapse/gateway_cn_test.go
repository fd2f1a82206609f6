package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment/alipay"
	"github.com/lapsehq/lapse/payment/wechatpay"
)

// cnFiles are key files written for the test: the app's or merchant's
// private key, Alipay's public key, a WeChat Pay platform certificate and
// an APIv3 key.
type cnFiles struct {
	privateKey, publicKey, cert, apiV3, broken string
	alipayKey                                  *rsa.PrivateKey // signs as Alipay
}

var cnKeys = sync.OnceValue(func() [2]*rsa.PrivateKey {
	var ks [2]*rsa.PrivateKey
	for i := range ks {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		ks[i] = k
	}
	return ks
})

// brokenKeyMarker is in a malformed key file: no error may show it.
const brokenKeyMarker = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDSECRET"

func writeCNFiles(t *testing.T) cnFiles {
	t.Helper()
	dir := t.TempDir()
	ks := cnKeys()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	der, err := x509.MarshalPKCS8PrivateKey(ks[0])
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&ks[1].PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(0x5157F09E), Subject: pkix.Name{CommonName: "Tenpay.com Root CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	cert, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ks[1].PublicKey, ks[1])
	if err != nil {
		t.Fatal(err)
	}
	return cnFiles{
		privateKey: write("app_key.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		publicKey:  write("alipay_public.pem", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})),
		cert:       write("platform.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert})),
		apiV3:      write("apiv3.key", []byte("a7cde1ZJB1kG2e7VfTs3jQzaWizur8Gb\n")),
		broken:     write("broken.pem", []byte("-----BEGIN PRIVATE KEY-----\n"+brokenKeyMarker+"\n-----END PRIVATE KEY-----\n")),
		alipayKey:  ks[1],
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
		"--wechatpay-private-key-file", f.privateKey, "--wechatpay-platform-cert-file", f.cert, "--wechatpay-apiv3-key-file", f.apiV3}
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
