package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/redact"
)

// gatewayFlags are the flags of the payment gateway client (serve, reconcile).
type gatewayFlags struct {
	url, token *string
	timeout    *time.Duration
	retries    *int
	stripe     stripeFlags
	cn         cnGatewayFlags // --gateway alipay | wechatpay (gateway_cn.go)
}

func addGatewayFlags(fs *flagSet) gatewayFlags {
	return gatewayFlags{
		url:     fs.Enum("gateway", "", "payment gateway: a base URL (lapse's JSON protocol), or stripe, alipay or wechatpay (their --stripe-… / --alipay-… / --wechatpay-… flags); without one PAYING orders wait for their callback", "stripe", "alipay", "wechatpay"),
		token:   fs.String("gateway-token", "", "bearer token sent to the gateway"),
		timeout: fs.Duration("gateway-timeout", 2*time.Second, positive, "timeout of one gateway request"),
		retries: fs.Int("gateway-retries", 2, "retries of a gateway request that failed with a 5xx, a timeout or a connection error (lapse's JSON protocol, stripe): 0 (none) to 10"),
		stripe:  addStripeFlags(fs),
		cn:      addCNGatewayFlags(fs),
	}
}

// maxGatewayRetries bounds --gateway-retries: each retry adds a timeout
// (and a backoff) to every call, which callTimeout allows for.
const maxGatewayRetries = 10

// open returns the gateway client and the notifiers of the gateway's own
// notifications (served at POST /v1/payments/notify/{name}), or nothing
// when no --gateway was given. It connects to nothing, so every error is
// about the flags.
func (g gatewayFlags) open(logger *slog.Logger) (payment.Gateway, []payment.Notifier, error) {
	if err := g.checkRetries(); err != nil {
		return nil, nil, err
	}
	switch *g.url {
	case "":
		return nil, nil, nil
	case "stripe":
		return g.stripe.open(g, logger)
	case "alipay", "wechatpay":
		return g.cn.open(*g.url, *g.timeout)
	}
	retries := *g.retries
	if retries == 0 {
		retries = -1 // none, as the flag says (0 is the default in payment.HTTPConfig)
	}
	gw, err := payment.NewHTTPGateway(*g.url, payment.HTTPConfig{Timeout: *g.timeout, Retries: retries, BearerToken: *g.token, Logger: logger})
	if err != nil {
		return nil, nil, fmt.Errorf("--gateway: %w", err)
	}
	return gw, nil, nil
}

// checkRetries says what is wrong with --gateway-retries.
func (g gatewayFlags) checkRetries() error {
	if *g.retries < 0 || *g.retries > maxGatewayRetries {
		return fmt.Errorf("--gateway-retries %d: want 0 (no retry) to %d", *g.retries, maxGatewayRetries)
	}
	return nil
}

// callTimeout bounds one gateway call including its retries.
func (g gatewayFlags) callTimeout() time.Duration {
	return time.Duration(*g.retries+1)*(*g.timeout) + 2*time.Second
}

func runMockpay(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlagSet("mockpay", stderr)
	listen := fs.String("listen", "127.0.0.1:8090", "address of the mock gateway; a loopback one unless --allow-public")
	allowPublic := fs.Bool("allow-public", false, "let --listen name a non-loopback address: anyone who reaches it can mark orders paid and have callbacks signed with --callback-secret sent to lapse")
	callbackURL := fs.String("callback-url", "http://127.0.0.1:8080", "lapse's base URL; callbacks go to <url>/v1/payments/notify")
	secret := fs.String("callback-secret", "", "secret the callbacks are signed with (lapse serve's --callback-secret)")
	delay := fs.Duration("callback-delay", 0, none, "hold every callback this long (a slow gateway)")
	drop := fs.Bool("drop-callbacks", false, "never send callbacks (callback lost)")
	silent := fs.Bool("silent-paid", false, "report paid when queried, but send no success callback")
	failQueries := fs.Bool("fail-queries", false, "answer every query with 503")
	failCloses := fs.Bool("fail-closes", false, "answer every close with 503")
	failRefunds := fs.Int("fail-refunds", 0, "answer the next N refunds with 500, refunding nothing")
	attempts := fs.Int("callback-attempts", 4, "deliveries of a callback before giving up")
	token := fs.String("token", "", "bearer token required on the protocol's routes")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *failRefunds < 0 {
		fmt.Fprintf(stderr, "lapse mockpay: --fail-refunds %d: want 0 or more\n", *failRefunds)
		return errUsage
	}
	// Its /_control route never takes a token, /payments/{id}/pay only with
	// --token, and a payment it is told of becomes a callback signed with the
	// real secret: whoever reaches the mock can have lapse mark orders paid.
	if !isLoopback(*listen) && !*allowPublic {
		fmt.Fprintf(stderr, "lapse mockpay: refusing to listen on %s: the mock gateway's test routes take no authentication and it signs callbacks with --callback-secret, so anyone who reaches it could mark orders paid; listen on 127.0.0.1, or pass --allow-public\n", *listen)
		return errUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	if *secret == "" {
		logger.Warn("no --callback-secret: callbacks go unsigned and lapse will refuse them")
	}
	m := payment.NewMock(payment.MockConfig{
		CallbackURL: *callbackURL, CallbackSecret: []byte(*secret), CallbackDelay: *delay, DropCallbacks: *drop,
		SilentPaid: *silent, FailQueries: *failQueries, FailCloses: *failCloses, FailRefunds: int64(*failRefunds), CallbackAttempts: *attempts,
		AuthToken: *token, Logger: logger,
	})
	defer m.Close()
	logger.Info("mock gateway serving", "addr", *listen, "callback_url", redact.URL(*callbackURL))
	err := m.ListenAndServe(ctx, *listen)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func parseWhen(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	t, err := time.Parse("2006-01-02", strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want RFC 3339 (2026-11-29T08:00:00Z) or a date (2026-11-29)", s)
	}
	return t, nil
}
