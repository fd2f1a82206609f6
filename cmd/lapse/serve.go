package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/httpapi"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/redact"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/timer/redis"
	"github.com/lapsehq/lapse/web"
)

func runServe(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address; a non-loopback address needs --api-token")
	storeURL := fs.String("store", "sqlite://lapse.db", storeUsage)
	timers := fs.Enum("timers", "memory", "timer backend: memory (in-process heap), sql (the orders table, claimed with SKIP LOCKED), redis://host:6379/0, redis-cluster://h1:7000,h2:7001,h3:7002 , redis-sentinel://[:password@]h1:26379,h2:26379/0?master=NAME (a master and its replicas, failed over by Sentinel), amqp://user:pass@host:5672/vhost (a RabbitMQ dead-letter delay ladder), nats://host:4222 (JetStream message schedules, nats-server 2.12+) or kafka://host:9092,host:9092/prefix (delay-level topics)", "memory", "sql")
	redisPrefix := fs.String("redis-prefix", redis.DefaultPrefix, "with Redis timers: the prefix of every key; deployments that share one Redis database need different ones (no '{' or '}')")
	sweepInterval := fs.Duration("sweep-interval", 30*time.Second, span{zero: "off", min: 10 * time.Millisecond}, "how often the fallback sweep looks for orders a timer backend lost (0 disables)")
	sweepLag := fs.Duration("sweep-lag", 10*time.Second, none, "how overdue an order must be before the fallback sweep takes it (may be 0)")
	grace := fs.Duration("grace", 60*time.Second, none, "wait after expires_at before cancelling, for late payment callbacks (may be 0)")
	defaultTimeout := fs.Duration("default-timeout", 15*time.Minute, span{min: time.Millisecond}, "payment window of an order that names no timeout_seconds")
	maxTimeout := fs.Duration("max-timeout", 7*24*time.Hour, positive, "largest timeout_seconds accepted")
	currency := fs.String("default-currency", "", "currency of an order that names none (ISO 4217); default USD, or CNY with --gateway alipay or wechatpay (the only currency they take)")
	callbackSecretFlag := addSecretFlag(fs, "callback-secret", "HMAC secret of the payment callback signature; without one every callback is refused")
	prevSecret := fs.String("previous-callback-secret", "", "a second accepted callback secret while rotating")
	apiTokenFlag := addSecretFlag(fs, "api-token", "bearer token required on /v1 routes (except the signed payment callback) and at the dashboard's login; at least 16 bytes")
	gw := addGatewayFlags(fs)
	confirmAfter := fs.Duration("confirm-after", time.Minute, positive, "query the gateway again this long after cancelling an order that had a payment attempt")
	pendingMax := fs.Duration("gateway-pending-max", 5*time.Minute, positive, "how long to wait while the gateway reports a payment in progress before closing the trade")
	autoRefund := fs.Bool("auto-refund", false, "refund at the gateway, by itself, every payment attempt that ends REFUND_REQUIRED (paid after the cancel, paid twice, a wrong amount): retried until the gateway has refunded it, once per attempt (needs a --gateway that refunds)")
	refundLease := fs.Duration("refund-lease", time.Minute, span{min: 100 * time.Millisecond}, "with --auto-refund: how long a claimed batch of refunds is held by one instance; a refund asked by an instance that died is asked again, with the same key, once this runs out")
	refundRetryBase := fs.Duration("refund-retry-base", 2*time.Second, span{min: time.Millisecond}, "with --auto-refund: the first backoff after a refund failed (a 5xx, no answer); it doubles, jittered, up to 10 min")
	remindBefore := fs.Duration("remind-before", 0, off, "send a best-effort order.expiring event this long before expires_at (0: off; not with --timers sql)")
	sinkFl := addSinkFlags(fs)
	invFl := addInventoryFlags(fs)
	osFl := addOrderServiceFlags(fs)
	retFl := addRetentionFlags(fs)
	noMigrate := fs.Bool("no-migrate", false, "do not apply schema migrations at start")
	shutdownTimeout := fs.Duration("shutdown-timeout", 30*time.Second, positive, "how long SIGTERM waits for requests and the cancel batch in hand")
	logLevel := fs.Enum("log-level", "info", "debug, info, warn or error", "debug", "info", "warn", "error")
	logFormat := fs.Enum("log-format", "text", "text or json", "text", "json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	usage := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "lapse serve: "+format+"\n", a...)
		return errUsage
	}
	callbackSecret, err := callbackSecretFlag.get()
	if err != nil {
		return usage("%v", err)
	}
	apiToken, err := apiTokenFlag.get()
	if err != nil {
		return usage("%v", err)
	}
	logger, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	if err := redis.ValidatePrefix(*redisPrefix); err != nil {
		fmt.Fprintf(stderr, "lapse serve: --redis-prefix: %v\n", err)
		return errUsage
	}
	if *maxTimeout < *defaultTimeout {
		fmt.Fprintf(stderr, "lapse serve: --max-timeout %s is below --default-timeout %s\n", *maxTimeout, *defaultTimeout)
		return errUsage
	}
	switch {
	case apiToken != "" && len(apiToken) < minToken:
		return usage("refusing a %d-byte --api-token: a token must be at least %d bytes, which cannot be guessed (openssl rand -hex 32 makes one)", len(apiToken), minToken)
	case apiToken == "" && !isLoopback(*addr):
		return usage("refusing to listen on %s without --api-token (or --api-token-file, LAPSE_API_TOKEN): anyone who can reach it could create and cancel orders; set a token or listen on 127.0.0.1", *addr)
	}
	if *currency == "" {
		*currency = "USD"
		if *gw.url == "alipay" || *gw.url == "wechatpay" {
			*currency = "CNY" // their domestic trades take nothing else
		}
	}
	cfg := lapse.Config{
		Grace: *grace, DefaultTimeout: *defaultTimeout, MaxTimeout: *maxTimeout,
		DefaultCurrency: *currency, Logger: logger, SweepInterval: *sweepInterval, SweepLag: *sweepLag,
	}
	cfg.RemindBefore = *remindBefore
	// 0 is "the default" in lapse.Config and "none" on the command line.
	if *sweepInterval == 0 {
		cfg.SweepInterval = -1
	}
	if *sweepLag == 0 {
		cfg.SweepLag = -1
	}
	if cfg.Outbox, err = sinkFl.config(logger); err != nil {
		return usage("%v", err)
	}
	if cfg.Retention, err = retFl.config(); err != nil {
		return usage("%v", err)
	}
	if err := invFl.check(); err != nil {
		return usage("%v", err)
	}
	if _, err := osFl.check(); err != nil {
		return usage("%v", err)
	}
	if osFl.on() && invFl.remote() {
		return usage("--order-service and --inventory %s: with an order service lapse holds no stock, local or remote", redact.URL(*invFl.url))
	}
	// Every URL-style flag is checked before anything is dialled: a value
	// wrong in itself exits 2 (usage), a server that does not answer 1.
	if err := checkStoreURL(*storeURL); err != nil {
		return usage("%v", err)
	}
	if err := checkTimers(*timers); err != nil {
		return usage("%v", err)
	}
	g, notifiers, err := gw.open(logger)
	if err != nil {
		return usage("%v", err)
	}
	sinks, closeSinks, err := sinkFl.open(ctx, logger)
	if err != nil {
		return usage("%v", err)
	}
	defer closeSinks()
	cfg.Sinks = sinks
	openedTimers, err := openTimers(&cfg, *timers, *redisPrefix)
	if err != nil {
		return err
	}
	defer openedTimers.close()
	closeInventory, err := invFl.configure(ctx, &cfg, logger)
	if err != nil {
		return err
	}
	defer closeInventory()
	closeOrderService, err := osFl.configure(ctx, &cfg, logger)
	if err != nil {
		return usage("%v", err)
	}
	defer closeOrderService()
	if g != nil {
		cfg.Gateway, cfg.GatewayTimeout = g, gw.callTimeout()
		cfg.ConfirmAfter, cfg.GatewayPendingMax = *confirmAfter, *pendingMax
	}
	if *autoRefund {
		if _, ok := g.(payment.Refunder); !ok {
			return usage("--auto-refund needs a --gateway that refunds (stripe, alipay, wechatpay or an HTTP gateway)")
		}
		cfg.AutoRefund = true
		cfg.Refunds.Lease, cfg.Refunds.RetryBase = *refundLease, *refundRetryBase
	}
	st, err := openStore(ctx, *storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if !*noMigrate {
		if err := st.Migrate(ctx); err != nil {
			return err
		}
	} else if c, ok := st.(store.SchemaChecker); ok {
		// --no-migrate on a database not migrated for this lapse: say so
		// now, not at the first statement on a table that is not there.
		if err := c.CheckSchema(ctx); err != nil {
			return fmt.Errorf("%s: %w", redact.URL(*storeURL), err)
		}
	}
	if err := claimTimers(ctx, openedTimers, st); err != nil {
		return err
	}
	cfg.Store = st
	if openedTimers.ping != nil {
		cfg.Store = readyStore{Store: st, timers: openedTimers.ping}
	}
	svc, err := lapse.New(cfg)
	if err != nil {
		return err
	}
	var secrets [][]byte
	for _, s := range []string{callbackSecret, *prevSecret} {
		if s != "" {
			secrets = append(secrets, []byte(s))
		}
	}
	switch {
	case len(secrets) == 0:
		logger.Warn("no callback secret: every payment callback will be refused with 401; start with --callback-secret S or set LAPSE_CALLBACK_SECRET")
	case callbackSecret == "":
		logger.Warn("--previous-callback-secret without --callback-secret: only callbacks signed with the previous secret are accepted; " +
			"while rotating, set --callback-secret to the new secret too")
	}
	// One budget of wrong tokens per address for the API and the dashboard.
	throttle := httpapi.NewAuthThrottle(httpapi.AuthThrottleConfig{})
	handler := httpapi.New(svc, httpapi.Options{APIToken: apiToken, CallbackSecrets: secrets, Notifiers: notifiers, AuthThrottle: throttle, Logger: logger})
	// The dashboard at / and /ui/… (package web), behind the same token.
	dash, err := web.New(svc, web.Options{APIToken: apiToken, AuthThrottle: throttle, Logger: logger})
	if err != nil {
		return err
	}
	handler = web.Mount(handler, dash)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second}
	started := []any{"addr", ln.Addr().String(), "store", redact.URL(*storeURL), "timers", redact.URL(*timers)}
	if isRedisURL(*timers) {
		started = append(started, "redis_prefix", *redisPrefix)
	}
	used := svc.Config()
	logger.Info("lapse serving", append(started, "grace", used.Grace, "default_timeout", used.DefaultTimeout,
		"gateway", redact.URL(*gw.url), "auth", apiToken != "", "sinks", sinkNames(sinks), "inventory", redact.URL(*invFl.url), "order_service", redact.URL(*osFl.url), "version", version)...)

	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	runDone := make(chan error, 1)
	go func() { runDone <- svc.Run(runCtx) }()
	go dash.Run(runCtx)
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Serve(ln) }()

	var failure error
	select {
	case <-ctx.Done():
		logger.Info("shutting down: no new requests, no new timer claims; finishing the batch in hand")
	case err := <-runDone:
		failure = fmt.Errorf("cancel loop stopped: %w", err)
		runDone <- nil
	case err := <-httpDone:
		failure = fmt.Errorf("http server stopped: %w", err)
		httpDone <- nil
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		logger.Warn("http shutdown", "err", err)
	}
	stopRun()
	select {
	case err := <-runDone:
		if err != nil && failure == nil {
			failure = err
		}
	case <-shutCtx.Done():
		logger.Warn("cancel loop did not stop within the shutdown timeout")
	}
	if e := <-httpDone; e != nil && !errors.Is(e, http.ErrServerClosed) && failure == nil {
		failure = e
	}
	logger.Info("stopped")
	return failure
}

// isLoopback reports whether addr only listens on a loopback interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
