package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/bench"
	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/redact"
	"github.com/lapsehq/lapse/store"
	amqptimer "github.com/lapsehq/lapse/timer/amqp"
	"github.com/lapsehq/lapse/timer/redis"

	gomysql "github.com/go-sql-driver/mysql"
	goredis "github.com/redis/go-redis/v9"
)

// rateFlag is orders per second, written 1000 or 1000/s.
type rateFlag float64

func (r *rateFlag) String() string { return strconv.FormatFloat(float64(*r), 'f', -1, 64) }

func (r *rateFlag) Set(s string) error {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "/s"), 64)
	if err != nil {
		return errors.New("want orders per second, like 1000 or 1000/s")
	}
	*r = rateFlag(v)
	return nil
}

// benchFlags maps bench.Config fields to the flags that set them, for errors.
var benchFlags = map[string]string{
	"Orders": "--orders", "Rate": "--rate", "Timeout": "--timeout", "Duration": "--duration",
	"Lead": "--lead", "Spread": "--spread", "PayRatio": "--pay-ratio", "PayAt": "--pay-at",
	"SKUs": "--skus", "HotSKUShare": "--hot-sku-share", "Concurrency": "--concurrency",
	"KillEvery": "--kill-every", "Wait": "--wait",
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", stderr)
	storeURL := fs.String("store", "", "store URL (default: a fresh SQLite file in a temporary directory); with --target, the server's store, audited after the run")
	timers := fs.Enum("timers", "memory", "timer backend of the in-process service: memory, sql, redis://host:6379/0, redis-cluster://h1:7000,…, redis-sentinel://h1:26379,…/0?master=NAME (keys under a prefix of the run's own, deleted afterwards), amqp://user:pass@host:5672/vhost, nats://host:4222 or kafka://host:9092/prefix", "memory", "sql")
	target := fs.String("target", "", "drive a running `lapse serve` at this URL (http://host:port) through its HTTP API instead of a service in this process")
	apiToken := fs.String("api-token", "", "with --target: the server's bearer token")
	callbackSecret := fs.String("callback-secret", "", "with --target: the server's callback secret, to sign the payment callbacks (needed with --pay-ratio > 0)")
	orders := fs.Int("orders", 2000, "orders to create (with --duration: an upper bound, none unless given)")
	var rate rateFlag
	fs.Var(&rate, "rate", "orders created per second, open loop: 1000 or 1000/s (0: as fast as --concurrency allows)")
	timeout := fs.Duration("timeout", 0, positive, "each order's payment window; deadline = creation + timeout (default 5s with --rate or --duration)")
	duration := fs.Duration("duration", 0, none, "keep creating orders at --rate for this long (a soak), then wait for the last deadlines")
	grace := fs.Duration("grace", 0, none, "wait after expires_at before cancelling (the service's grace; lapse serve's default is 60s)")
	lead := fs.Duration("lead", 5*time.Second, positive, "without --rate/--timeout/--duration: time from the start to the first deadline (creation must finish within it)")
	spread := fs.Duration("spread", time.Second, positive, "without --rate/--timeout/--duration: window the deadlines are spread over")
	payRatio := fs.Float64("pay-ratio", 0, "fraction of orders paid (payment started, then a signed success callback) before their deadline")
	payAt := fs.Enum("pay-at", string(bench.PayRandom), "when payments start: near-deadline (just before expires_at) or random (any time before it)", string(bench.PayNearDeadline), string(bench.PayRandom))
	skus := fs.Int("skus", 100, "SKUs the orders spread over")
	hotShare := fs.Float64("hot-sku-share", 0, "fraction of orders that all reserve one SKU (a flash sale)")
	concurrency := fs.Int("concurrency", 0, "goroutines creating orders (default 8; 64 with --rate)")
	killEvery := fs.Duration("kill-every", 0, span{zero: "never", min: 10 * time.Millisecond}, "kill the in-process worker this often, without shutdown, and start a fresh one on the same store (a crash and a restart)")
	flushRedisAt := fs.Duration("flush-redis-at", 0, none, "with --timers redis://…: this long into the run, delete every key of the run's timers from Redis, as a FLUSHALL would (lapse must notice, reseed from the store and still cancel everything)")
	restartDBAt := fs.Duration("restart-db-at", 0, none, "this long into the run, take the database away and bring it back, as a restart does to its clients: run --restart-db-cmd, or else cut every connection of the run (PostgreSQL: pg_terminate_backend on the run's application_name; through a proxy of the run's) and refuse new ones for --restart-db-down. Creates, payments and reads that fail meanwhile are retried, creates with an Idempotency-Key")
	restartDBCmd := fs.String("restart-db-cmd", "", "with --restart-db-at: a shell command (sh -c) that restarts the database, e.g. 'pg_ctlcluster 15 main restart'; the fault lasts until it exits (an exit status other than 0 fails the run). Needed with --target")
	restartDBDown := fs.Duration("restart-db-down", time.Second, none, "with --restart-db-at and no --restart-db-cmd: how long the database stays away (new connections refused)")
	chaosLatency := fs.Duration("chaos-latency", 0, none, "put a proxy (toxiproxy, in this process) between the in-process service and its servers — the store's PostgreSQL or MySQL, and Redis timers — that delays every answer by this much: one round trip costs this much more (whole milliseconds)")
	chaosJitter := fs.Duration("chaos-jitter", 0, none, "with --chaos-latency: vary each delay by up to ± this much, uniformly (whole milliseconds)")
	invURL := fs.String("inventory", "", "a remote inventory holds the stock (amqp://user:pass@host:5672/vhost[?prefix=…] or http://host:port, as lapse serve --inventory): each order is reserved there first, then created with the reservation; reports the stock tasks' lag, commit → DONE")
	invAPI := fs.String("inventory-api", "", "with --inventory: the reference inventory's HTTP API (lapse inventory --listen), where the run sets its SKUs' stock (PUT /skus/{sku}); default the --inventory URL when it is http://…, else the stock must be there already")
	invReserve := fs.Enum("reserve-via", "transport", "with --inventory: how the run reserves each order — transport (a reserve command over --inventory's transport, as lapse --inventory-reserve would) or api (POST /reservations on --inventory-api, as a shop's checkout would; lapse's tasks still use the transport)", "transport", "api")
	taskWorkers := fs.Int("task-workers", 2, "with --inventory: batches of stock tasks the dispatcher sends at once (lapse serve --task-workers; 1 to 64)")
	sinkFl := addSinkFlags(fs)
	osFl := addBenchOrderServiceFlags(fs)
	// A soak with retention: the in-process service deletes finished
	// orders as lapse serve would (the same flags), and the run samples
	// the tables' sizes each minute.
	retFl := addRetentionFlags(fs)
	relayDrain := fs.Int("relay-drain", 0, "with --sink: before the run, write this many orders' events with no relay running, then time one relay emptying them into each sink, beside a plain publisher to the same broker (the ceiling)")
	wait := fs.Duration("wait", time.Minute, positive, "how long past the last deadline to wait for every cancel")
	asJSON := fs.Bool("json", false, "print the result as one JSON object (no progress line)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run (in-process service included) to this file, for go tool pprof")
	blockProfile := fs.String("blockprofile", "", "write a profile of where goroutines waited (locks, channels, the store's connection pool) to this file")
	if err := parseFlags(fs, joinOrderServiceURL(args)); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	usage := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "lapse bench: "+format+"\n", a...)
		return errUsage
	}

	// Zero means "the default" in bench.Config; given on the command line it
	// is a mistake (parseFlags says so for the durations).
	for name, zero := range map[string]bool{"orders": *orders == 0, "skus": *skus == 0} {
		if given[name] && zero {
			return usage("--%s %s: want more than 0", name, fs.Lookup(name).Value)
		}
	}
	cfg := bench.Config{
		Orders: *orders, Rate: float64(rate), Timeout: *timeout, Duration: *duration,
		PayRatio: *payRatio, PayAt: bench.PayAt(*payAt), SKUs: *skus, HotSKUShare: *hotShare,
		Concurrency: *concurrency, KillEvery: *killEvery, Wait: *wait,
	}
	if given["lead"] {
		cfg.Lead = *lead
	}
	if given["spread"] {
		cfg.Spread = *spread
	}
	if *duration > 0 && !given["orders"] {
		cfg.Orders = 0 // only the duration bounds the run
	}
	if err := cfg.Validate(); err != nil {
		var ce *bench.ConfigError
		if errors.As(err, &ce) && benchFlags[ce.Field] != "" {
			return usage("%s %s", benchFlags[ce.Field], ce.Message)
		}
		return usage("%v", err)
	}
	if *target != "" {
		switch {
		case *killEvery > 0:
			return usage("--kill-every restarts a worker in this process; it does not combine with --target (restart the server yourself)")
		case given["timers"]:
			return usage("--timers is the in-process service's; with --target the server's own timers run")
		case len(sinkFl.sinks) > 0:
			return usage("--sink is the in-process service's; with --target the server's own sinks run (lapse serve --sink)")
		case given["grace"]:
			return usage("--grace is the in-process service's; with --target the server's applies (lapse serve --grace)")
		case given["order-retention"] || given["task-retention"]:
			return usage("--order-retention and --task-retention are the in-process service's; with --target the server's own retention runs (lapse serve --order-retention)")
		case *payRatio > 0 && *callbackSecret == "":
			return usage("--pay-ratio %v with --target: payments need --callback-secret (the server's), to sign the success callbacks", *payRatio)
		}
		if u, err := url.Parse(*target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usage("--target %q: want http://host:port", redact.URL(*target))
		}
	}
	retention, rerr := retFl.config()
	if rerr != nil {
		return usage("%v", rerr)
	}
	cfg.Trimmed = retention.Orders > 0
	if *taskWorkers < 1 || *taskWorkers > 64 {
		return usage("--task-workers %d: want 1 to 64", *taskWorkers)
	}
	if err := checkBenchInventory(*invURL, *invAPI, *invReserve, *target != ""); err != nil {
		return usage("%v", err)
	}
	if err := osFl.check(given, *target != "", *invURL); err != nil {
		return usage("%v", err)
	}
	redisTimers := isRedisURL(*timers)
	if *target == "" && !redisTimers {
		if err := setTimers(&lapse.Config{}, *timers); err != nil {
			return usage("%v", err)
		}
	}
	if err := checkChaos(given, *target != "", *storeURL, *timers, *chaosLatency, *chaosJitter); err != nil {
		return usage("%v", err)
	}
	if err := checkRestartDB(given, *target != "", *storeURL, *restartDBAt, *restartDBCmd, *restartDBDown); err != nil {
		return usage("%v", err)
	}
	if given["restart-db-at"] {
		// The MySQL driver logs every connection cut, on a logger of its
		// own that each store URL takes when parsed.
		_ = gomysql.SetLogger(log.New(io.Discard, "", 0))
	}
	// The proxies of the run: for --chaos-latency, and for --restart-db-at
	// without a command (cutting the run's connections, and only them, is
	// what the proxy is for). They outlive everything that dials them.
	var (
		chaos      *bench.Chaos
		storeDial  = *storeURL // the store URL the run opens (a proxy's)
		timersDial = *timers
		appName    string // the run's application_name on PostgreSQL, for --restart-db-at
	)
	if *target == "" && (given["chaos-latency"] || (given["restart-db-at"] && *restartDBCmd == "")) {
		c, err := bench.NewChaos(bench.ChaosConfig{Latency: *chaosLatency, Jitter: *chaosJitter})
		if err != nil {
			return usage("%v", err)
		}
		chaos = c
		defer chaos.Close()
		if given["restart-db-at"] && strings.HasPrefix(*storeURL, "postgres") {
			appName = runName("lapse-bench-")
			if storeDial, err = withApplicationName(storeDial, appName); err != nil {
				return usage("--store: %v", err)
			}
		}
		if storeDial, err = chaos.ProxyURL("store", storeDial); err != nil {
			return usage("--store: %v", err)
		}
		if given["chaos-latency"] && redisTimers {
			if timersDial, err = chaos.ProxyURL("redis", timersDial); err != nil {
				return usage("--timers: %v", err)
			}
		}
		cfg.Chaos = chaos
	}
	var rdb goredis.UniversalClient
	if *target == "" && redisTimers {
		c, err := redis.ParseURL(timersDial)
		if err != nil {
			return usage("--timers: %v", err)
		}
		rdb = c
		defer rdb.Close()
	}
	if given["flush-redis-at"] {
		switch {
		case *target != "":
			return usage("--flush-redis-at acts on the in-process service's Redis timers; it does not combine with --target")
		case rdb == nil:
			return usage("--flush-redis-at needs Redis timers (--timers redis://…)")
		case *flushRedisAt < 0:
			return usage("--flush-redis-at %s: must not be negative", *flushRedisAt)
		}
	}
	progress := io.Writer(stderr)
	if *asJSON {
		progress = nil
	}
	cfg.Progress = progress
	if (retention.Orders > 0 || *duration >= time.Minute) && *storeURL != "" {
		cfg.SampleTables = pgTables(*storeURL) // a soak: the tables' growth, or its absence
	}

	var (
		t        bench.Target
		st       store.Store
		onWhat   string
		drained  []drainResult // --relay-drain
		err      error
		storeArg = *storeURL
	)
	if storeArg == "" && *target == "" {
		dir, err := os.MkdirTemp("", "lapse-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		storeArg = "sqlite://" + filepath.Join(dir, "bench.db")
	}
	if storeArg != "" {
		dial := storeArg
		if chaos != nil {
			dial = storeDial
		}
		st, err = openStore(ctx, dial)
		if err != nil {
			return err
		}
		defer st.Close()
		if *target == "" {
			if err := st.Migrate(ctx); err != nil {
				return err
			}
		}
	}
	if *target != "" {
		t, err = bench.HTTP(bench.HTTPConfig{URL: *target, APIToken: *apiToken, CallbackSecret: *callbackSecret, Store: st})
		if err != nil {
			return err
		}
		onWhat = "lapse serve at " + redact.URL(*target)
	} else {
		logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		if *killEvery > 0 || given["restart-db-at"] {
			// Killed workers log their interrupted batches, and every batch
			// fails while the database is away; that is the point.
			logger = slog.New(slog.DiscardHandler)
		}
		// Redis timers live under a prefix of this run's own, so a bench
		// never mixes its timers with those of a lapse sharing the Redis.
		prefix := fmt.Sprintf("lapse-bench-%d", time.Now().UnixNano())
		if rdb != nil {
			defer func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				if _, err := bench.DeleteRedisPrefix(ctx, rdb, prefix); err != nil {
					fmt.Fprintf(stderr, "lapse bench: removing the run's keys (%s:*) from Redis: %v\n", prefix, err)
				}
			}()
			if given["flush-redis-at"] {
				cfg.Faults = append(cfg.Faults, bench.Fault{Name: "flush-redis", At: *flushRedisAt, Do: func(ctx context.Context) (string, error) {
					n, err := bench.DeleteRedisPrefix(ctx, rdb, prefix)
					return fmt.Sprintf("deleted %d keys", n), err
				}})
			}
		}
		sinks := []outbox.Sink{outbox.DiscardSink{}}
		var outboxCfg outbox.Config
		if len(sinkFl.sinks) == 0 {
			// The run's discard sink is forgotten afterwards, or every later
			// event in this database would wait for it.
			forget, err := forgetNewSinks(ctx, st, sinkNames(sinks), stderr)
			if err != nil {
				return err
			}
			defer forget()
		} else {
			var closeSinks func()
			if outboxCfg, err = sinkFl.config(logger); err != nil {
				return usage("%v", err)
			}
			specs, stopKfake, err := fakeKafka(sinkFl.specs())
			if err != nil {
				return err
			}
			defer stopKfake()
			sinkFl.sinks = specs
			removeQueues, err := benchQueues(ctx, sinkFl.specs())
			if err != nil {
				return err
			}
			defer removeQueues()
			if sinks, closeSinks, err = sinkFl.open(ctx, logger); err != nil {
				return usage("%v", err)
			}
			defer closeSinks()
			forget, err := forgetNewSinks(ctx, st, sinkNames(sinks), stderr)
			if err != nil {
				return err
			}
			defer forget()
			if *relayDrain > 0 {
				drains, err := measureDrains(ctx, st, sinkFl.specs(), sinks, outboxCfg, *relayDrain, stderr)
				if err != nil {
					return err
				}
				drained = drains
			}
			cfg.Relay, cfg.RelayStore, cfg.RelaySinks = &bench.RelayProbe{}, st, sinkNames(sinks)
			outboxCfg.OnDelivered = cfg.Relay.OnDelivered
		}
		// RabbitMQ timers too, unless the URL names a prefix: the run's
		// queues are deleted afterwards, with any timer still in them.
		timersSpec := *timers
		if u, err := url.Parse(timersSpec); err == nil && (u.Scheme == "amqp" || u.Scheme == "amqps") && !u.Query().Has("prefix") {
			q := u.Query()
			q.Set("prefix", prefix)
			u.RawQuery = q.Encode()
			timersSpec = u.String()
			defer func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				if err := amqptimer.DeleteTopology(ctx, timersSpec, amqptimer.Config{}); err != nil {
					fmt.Fprintf(stderr, "lapse bench: removing the run's queues (%s.*) from RabbitMQ: %v\n", prefix, err)
				}
			}()
		}
		var invClient inventory.Client
		if *invURL != "" {
			inv, client, closeInv, err := openBenchInventory(ctx, *invURL, *invAPI, *invReserve == "api", logger)
			if err != nil {
				return err
			}
			defer closeInv()
			inv.Tasks = st
			cfg.Inventory, invClient = inv, client
		}
		var (
			osClient ordersvc.Client
			osWhat   string
		)
		if osFl.svc.on {
			client, what, closeOS, err := osFl.open(logger)
			if err != nil {
				return err
			}
			defer closeOS()
			osClient, osWhat = client, what
			cfg.OrderService = &bench.OrderService{Store: st}
		}
		t = bench.InProcess(st, func() (*lapse.Service, error) {
			c := lapse.Config{Store: st, Sinks: sinks, Outbox: outboxCfg, Logger: logger, Grace: *grace, Retention: retention}
			withBenchInventory(&c, cfg.Inventory, invClient, *taskWorkers)
			osFl.configure(&c, osClient)
			if rdb != nil {
				s, err := redis.New(rdb, redis.Config{Prefix: prefix, Logger: logger})
				if err != nil {
					return nil, err
				}
				c.Scheduler = s
			} else if err := setTimers(&c, timersSpec); err != nil {
				return nil, err
			}
			return lapse.New(c)
		})
		onWhat = fmt.Sprintf("%s + %s timers", redact.URL(storeArg), redact.URL(*timers))
		if *invURL != "" {
			onWhat += ", stock at the inventory " + redact.URL(*invURL)
		}
		if osWhat != "" {
			onWhat += ", orders owned by " + osWhat
		}
		if chaos != nil {
			onWhat += describeChaos(chaos.Result())
		}
	}
	if given["restart-db-at"] {
		cfg.Faults = append(cfg.Faults, restartDBFault(*restartDBAt, *restartDBCmd, *restartDBDown, chaos, *storeURL, appName))
		// While the database is away, calls fail; they are retried as a
		// client would, long enough for a slow restart.
		cfg.RetryFor = 30 * time.Second
	}
	fmt.Fprintf(stderr, "lapse bench: %s, on %s\n", describe(cfg, *grace, *target != ""), onWhat)
	stopProfiles, err := startProfiles(*cpuProfile, *blockProfile)
	if err != nil {
		return err
	}
	res, err := bench.Drive(ctx, t, cfg)
	res.Relay = withDrains(res.Relay, drained)
	if perr := stopProfiles(); err == nil && perr != nil {
		err = perr
	}
	if err != nil {
		var ce *bench.ConfigError
		if errors.As(err, &ce) {
			return usage("%v", err)
		}
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		printBench(stdout, res)
	}
	if res.Audit.Status == "failed" || res.Early > 0 || res.TasksNotDone > 0 || res.TasksDead > 0 ||
		(res.Commands != nil && (res.Commands.Unanswered > 0 || res.Commands.Mismatched > 0)) {
		return exitError{code: 1}
	}
	return nil
}

// startProfiles starts the CPU profile and the block profile a run asked
// for; stop writes them.
func startProfiles(cpuFile, blockFile string) (stop func() error, err error) {
	var cpu *os.File
	if cpuFile != "" {
		if cpu, err = os.Create(cpuFile); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			cpu.Close()
			return nil, err
		}
	}
	if blockFile != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond)) // waits of 10 µs and more, sampled
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpu.Close())
		}
		if blockFile != "" {
			f, err := os.Create(blockFile)
			if err == nil {
				err = pprof.Lookup("block").WriteTo(f, 0)
				errs = append(errs, err, f.Close())
			} else {
				errs = append(errs, err)
			}
			runtime.SetBlockProfileRate(0)
		}
		return errors.Join(errs...)
	}, nil
}

// isRedisURL reports whether a --timers value names a Redis.
func isRedisURL(spec string) bool {
	scheme, _, ok := strings.Cut(spec, "://")
	return ok && (scheme == "redis" || scheme == "rediss" || scheme == "unix" || scheme == "redis-cluster" || scheme == "rediss-cluster" ||
		scheme == "redis-sentinel" || scheme == "rediss-sentinel")
}

// describe says what the workload is, for the first line on stderr.
func describe(c bench.Config, grace time.Duration, remote bool) string {
	var b strings.Builder
	switch {
	case !c.OpenLoop():
		lead, spread := c.Lead, c.Spread
		if lead == 0 {
			lead = 5 * time.Second
		}
		if spread == 0 {
			spread = time.Second
		}
		fmt.Fprintf(&b, "%d orders due over %s, %s from now", c.Orders, spread, lead)
	default:
		timeout := c.Timeout
		if timeout == 0 {
			timeout = 5 * time.Second
		}
		if c.Rate > 0 {
			fmt.Fprintf(&b, "%g orders/s", c.Rate)
		} else {
			b.WriteString("orders as fast as possible")
		}
		if c.Duration > 0 {
			fmt.Fprintf(&b, " for %s", c.Duration)
		}
		if c.Orders > 0 {
			fmt.Fprintf(&b, " (%d orders)", c.Orders)
		}
		fmt.Fprintf(&b, ", timeout %s", timeout)
	}
	if !remote {
		fmt.Fprintf(&b, ", grace %s", grace)
	}
	if c.PayRatio > 0 {
		fmt.Fprintf(&b, ", %g%% paid (%s)", c.PayRatio*100, c.PayAt)
	}
	skus := c.SKUs
	if skus == 0 {
		skus = 100
	}
	fmt.Fprintf(&b, ", %d SKUs", skus)
	if c.HotSKUShare > 0 {
		fmt.Fprintf(&b, " (%g%% of orders on one)", c.HotSKUShare*100)
	}
	if c.KillEvery > 0 {
		fmt.Fprintf(&b, ", killing the worker every %s", c.KillEvery)
	}
	for _, f := range c.Faults {
		fmt.Fprintf(&b, ", %s at %s", f.Name, f.At)
	}
	return b.String()
}

func printBench(w io.Writer, res bench.Result) {
	fmt.Fprintf(w, "orders        %d created (%.0f/s), %d paid, %d cancelled", res.Orders, res.CreatedPerS, res.Paid, res.Cancelled)
	if res.PayMissed > 0 {
		fmt.Fprintf(w, " (%d of them too late to pay)", res.PayMissed)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "lateness ms   p50 %.0f  p90 %.0f  p99 %.0f  p99.9 %.0f  max %.0f",
		res.LatenessMS.P50, res.LatenessMS.P90, res.LatenessMS.P99, res.LatenessMS.P999, res.LatenessMS.Max)
	if res.LatenessFrom == "metrics" {
		fmt.Fprint(w, " (retention deleted the rows: estimated from lapse_cancel_lateness_seconds's buckets)")
	} else {
		fmt.Fprintf(w, "\nearly         %d", res.Early)
		fmt.Fprintf(w, "\ndrain         last cancel %.3fs after the last deadline", res.DrainSeconds)
	}
	fmt.Fprintln(w)
	if res.RetentionDeleted > 0 {
		fmt.Fprintf(w, "retention     %d orders deleted during the run\n", res.RetentionDeleted)
	}
	printTables(w, res.Tables)
	if res.DBStatementsPerOrder != nil {
		fmt.Fprintf(w, "db statements %.1f per order\n", *res.DBStatementsPerOrder)
	} else {
		fmt.Fprintf(w, "db statements not counted by this store\n")
	}
	if res.Restarts > 0 || res.SweepCaught > 0 {
		fmt.Fprintf(w, "restarts      %d (fallback sweep caught %d)\n", res.Restarts, res.SweepCaught)
	}
	if c := res.Chaos; c != nil {
		fmt.Fprintf(w, "chaos         proxies for %s", strings.Join(c.Proxied, ", "))
		if c.LatencyMS > 0 {
			fmt.Fprintf(w, ", +%gms per round trip", c.LatencyMS)
			if c.JitterMS > 0 {
				fmt.Fprintf(w, " (±%gms)", c.JitterMS)
			}
		}
		fmt.Fprintln(w)
	}
	for _, f := range res.Faults {
		switch {
		case f.Skipped != "":
			fmt.Fprintf(w, "fault         %s: not injected, %s\n", f.Name, f.Skipped)
		case f.Error != "":
			fmt.Fprintf(w, "fault         %s at %.1fs failed: %s\n", f.Name, f.AtS, f.Error)
		case f.Detail != "":
			fmt.Fprintf(w, "fault         %s at %.1fs: %s\n", f.Name, f.AtS, f.Detail)
		default:
			fmt.Fprintf(w, "fault         %s at %.1fs\n", f.Name, f.AtS)
		}
	}
	if res.Retries > 0 {
		fmt.Fprintf(w, "retries       %d calls retried after a failure\n", res.Retries)
	}
	for _, r := range res.Relay {
		if r.Events > 0 {
			fmt.Fprintf(w, "relay         %s: %d events (%.0f/s), lag ms p50 %.1f  p99 %.1f  max %.1f\n",
				r.Sink, r.Events, r.PerS, r.LagMS.P50, r.LagMS.P99, r.LagMS.Max)
		}
		if r.DrainEvents > 0 {
			fmt.Fprintf(w, "relay drain   %s: %d events at %.0f/s", r.Sink, r.DrainEvents, r.DrainPerS)
			switch {
			case r.RawError != "":
				fmt.Fprintf(w, " (plain publisher failed: %s)", r.RawError)
			case r.RawPerS > 0:
				fmt.Fprintf(w, "; a plain publisher %.0f/s: %.0f%%", r.RawPerS, 100*r.DrainPerS/r.RawPerS)
			}
			fmt.Fprintln(w)
		}
	}
	printBenchInventory(w, res)
	printBenchCommands(w, res)
	if res.RelayUndelivered > 0 {
		fmt.Fprintf(w, "relay         %d events still undelivered at the end\n", res.RelayUndelivered)
	}
	switch res.Audit.Status {
	case "ok":
		fmt.Fprintf(w, "audit         ok\n")
	case "skipped":
		fmt.Fprintf(w, "audit         skipped: %s\n", res.Audit.Skipped)
	default:
		fmt.Fprintf(w, "audit         FAILED: %s\n", strings.Join(res.Audit.Violations, ", "))
	}
	if len(res.Audit.Warnings) > 0 {
		fmt.Fprintf(w, "audit warns   %s\n", strings.Join(res.Audit.Warnings, ", "))
	}
	fmt.Fprintf(w, "took          %.1fs\n", res.Seconds)
}

// printTables prints the sampled table sizes: per sample, the orders kept
// and every lapse table's bytes in all.
func printTables(w io.Writer, samples []bench.TableSample) {
	for _, sm := range samples {
		var rows, bytes int64
		for _, t := range sm.Tables {
			bytes += t.Bytes
			if t.Table == "lapse_orders" {
				rows = t.Rows
			}
		}
		fmt.Fprintf(w, "tables        at %4.0fs: %d orders kept, %.1f MB in %d lapse tables\n", sm.AtSeconds, rows, float64(bytes)/(1<<20), len(sm.Tables))
	}
}
