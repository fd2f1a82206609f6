package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/alipay"
	"github.com/lapsehq/lapse/payment/wechatpay"
)

// cnGatewayFlags are the flags of --gateway alipay and --gateway wechatpay.
// The private keys and the APIv3 key are secret flags (secrets.go): best
// given as files (--…-file, a mounted secret), never shown in an error.
type cnGatewayFlags struct {
	alipayAppID, alipayPublicKeyFile, alipayGatewayURL *string
	alipayPrivateKey                                   secretFlag

	wechatMchID, wechatSerial, wechatPlatformCertFile, wechatAPIBase *string
	wechatPrivateKey, wechatAPIv3Key                                 secretFlag
}

func addCNGatewayFlags(fs *flagSet) cnGatewayFlags {
	return cnGatewayFlags{
		alipayAppID:         fs.String("alipay-app-id", "", "with --gateway alipay: the app's APPID"),
		alipayPrivateKey:    addSecretFlag(fs, "alipay-private-key", "with --gateway alipay: the app's RSA2 private key (PEM, or the bare base64 Alipay's key tool writes); prefer --alipay-private-key-file"),
		alipayPublicKeyFile: fs.String("alipay-public-key-file", "", "with --gateway alipay: file of Alipay's public key (支付宝公钥, PEM or bare base64), which verifies its responses and notifications"),
		alipayGatewayURL:    fs.String("alipay-gateway-url", alipay.DefaultGatewayURL, "with --gateway alipay: the OpenAPI gateway (the sandbox's, or a local one in tests)"),

		wechatMchID:            fs.String("wechatpay-mchid", "", "with --gateway wechatpay: the merchant id (mchid)"),
		wechatSerial:           fs.String("wechatpay-serial", "", "with --gateway wechatpay: the serial number of the merchant's API certificate"),
		wechatPrivateKey:       addSecretFlag(fs, "wechatpay-private-key", "with --gateway wechatpay: the merchant's API private key (apiclient_key.pem); prefer --wechatpay-private-key-file"),
		wechatPlatformCertFile: fs.String("wechatpay-platform-cert-file", "", "with --gateway wechatpay: file of WeChat Pay's platform certificate(s) (PEM; several while they rotate), which verify its responses and notifications"),
		wechatAPIv3Key:         addSecretFlag(fs, "wechatpay-apiv3-key", "with --gateway wechatpay: the APIv3 key (32 bytes), which decrypts notifications; prefer --wechatpay-apiv3-key-file"),
		wechatAPIBase:          fs.String("wechatpay-api-base", wechatpay.DefaultAPIBase, "with --gateway wechatpay: the API's scheme and host (a local one in tests)"),
	}
}

// open returns the gateway named (alipay or wechatpay) with the notifier of
// its notifications (POST /v1/payments/notify/alipay, …/wechatpay).
func (f cnGatewayFlags) open(name string, timeout time.Duration) (payment.Gateway, []payment.Notifier, error) {
	switch name {
	case "alipay":
		return f.openAlipay(timeout)
	case "wechatpay":
		return f.openWeChatPay(timeout)
	}
	return nil, nil, fmt.Errorf("--gateway %q: not a gateway of lapse's", name)
}

func (f cnGatewayFlags) openAlipay(timeout time.Duration) (payment.Gateway, []payment.Notifier, error) {
	if *f.alipayAppID == "" || *f.alipayPublicKeyFile == "" {
		return nil, nil, errors.New("--gateway alipay needs --alipay-app-id, --alipay-private-key-file and --alipay-public-key-file")
	}
	pemKey, err := f.alipayPrivateKey.get()
	if err != nil {
		return nil, nil, err
	}
	if pemKey == "" {
		return nil, nil, errors.New("--gateway alipay needs --alipay-private-key-file (or LAPSE_ALIPAY_PRIVATE_KEY)")
	}
	key, err := alipay.ParsePrivateKey([]byte(pemKey))
	if err != nil {
		return nil, nil, fmt.Errorf("--alipay-private-key: %w", err)
	}
	b, err := os.ReadFile(*f.alipayPublicKeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--alipay-public-key-file: %w", err)
	}
	pub, err := alipay.ParsePublicKey(b)
	if err != nil {
		return nil, nil, fmt.Errorf("--alipay-public-key-file %s: %w", *f.alipayPublicKeyFile, err)
	}
	cfg := alipay.Config{AppID: *f.alipayAppID, PrivateKey: key, AlipayPublicKey: pub, GatewayURL: *f.alipayGatewayURL, Timeout: timeout}
	gw, err := alipay.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	n, err := alipay.NewNotifier(cfg)
	if err != nil {
		return nil, nil, err
	}
	return gw, []payment.Notifier{n}, nil
}

func (f cnGatewayFlags) openWeChatPay(timeout time.Duration) (payment.Gateway, []payment.Notifier, error) {
	if *f.wechatMchID == "" || *f.wechatSerial == "" || *f.wechatPlatformCertFile == "" {
		return nil, nil, errors.New("--gateway wechatpay needs --wechatpay-mchid, --wechatpay-serial, --wechatpay-private-key-file, --wechatpay-platform-cert-file and --wechatpay-apiv3-key-file")
	}
	pemKey, err := f.wechatPrivateKey.get()
	if err != nil {
		return nil, nil, err
	}
	apiV3, err := f.wechatAPIv3Key.get()
	if err != nil {
		return nil, nil, err
	}
	if pemKey == "" || apiV3 == "" {
		return nil, nil, errors.New("--gateway wechatpay needs --wechatpay-private-key-file and --wechatpay-apiv3-key-file (or LAPSE_WECHATPAY_PRIVATE_KEY, LAPSE_WECHATPAY_APIV3_KEY)")
	}
	key, err := wechatpay.ParsePrivateKey([]byte(pemKey))
	if err != nil {
		return nil, nil, fmt.Errorf("--wechatpay-private-key: %w", err)
	}
	v3, err := wechatpay.ParseAPIv3Key([]byte(apiV3))
	if err != nil {
		return nil, nil, fmt.Errorf("--wechatpay-apiv3-key: %w", err)
	}
	b, err := os.ReadFile(*f.wechatPlatformCertFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--wechatpay-platform-cert-file: %w", err)
	}
	var certs []*x509.Certificate
	if certs, err = wechatpay.ParseCertificates(b); err != nil {
		return nil, nil, fmt.Errorf("--wechatpay-platform-cert-file %s: %w", *f.wechatPlatformCertFile, err)
	}
	cfg := wechatpay.Config{MchID: *f.wechatMchID, SerialNo: *f.wechatSerial, PrivateKey: key, PlatformCerts: certs,
		APIv3Key: v3, APIBase: *f.wechatAPIBase, Timeout: timeout}
	gw, err := wechatpay.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	n, err := wechatpay.NewNotifier(cfg)
	if err != nil {
		return nil, nil, err
	}
	return gw, []payment.Notifier{n}, nil
}
