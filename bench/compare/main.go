// Command compare runs one timer workload — N timers due over T seconds — on
// lapse's timer backends, on hibiken/asynq scheduled tasks and on
// riverqueue/river scheduled jobs, each with its default and a tuned
// configuration, against the same Redis and PostgreSQL, one system after the
// other, and reports per system the timers per second it sustained, the
// lateness of deliveries (p50/p99/max), early fires, duplicates and the CPU
// it used.
//
// It is a module of its own (bench/compare/go.mod) so that lapse itself never
// depends on asynq or river.
//
//	cd bench/compare && go run . --timers 20000 --over 10s
//	cd bench/compare && go run . million --timers 1000000 --queue-type classic
//	cd bench/compare && go run . scale --pending 1000000 --history 10000000
//
// The second form leaves a million timers pending on RabbitMQ and reports
// the broker's memory per timer and the publish rate (see million). The
// third seeds the memory and Redis timers from a million pending orders in
// PostgreSQL, rebuilds the Redis ones after a data loss, and times lapse's
// creates on an empty orders table and on one holding ten million orders
// (see scale).
//
// Every system runs in this process with a handler that only notes the time
// of each delivery, except lapse's sql timers, which have no handler: the
// timer is the order row, and it is "delivered" when the cancel transaction
// that claimed it commits (see lapseSQL). Each system gets keys, a queue or
// a schema of the run's own, removed when it stops.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/riverqueue/river"

	lredis "github.com/lapsehq/lapse/timer/redis"
)

// specs are the systems, in the order they run.
func specs() []spec {
	cpus := runtime.NumCPU()
	return []spec{
		{
			Name: "lapse-memory", Config: "defaults (batch 200; no other setting)",
			Insert: "Schedule, one call per timer",
			make:   func() system { return &lapseMemory{} },
		},
		{
			Name: "lapse-redis", Config: "defaults: 16 shards, 4 workers, batch 200, MaxSleep 250ms",
			Insert: "ScheduleMany, one call per create group of 64 timers (PostgreSQL's group commit size; calls in flight share a pipeline, one script call per shard)", Server: "redis",
			make: func() system { return &lapseRedis{} },
		},
		{
			Name: "lapse-redis-tuned", Config: "16 workers (one per shard), MaxSleep 50ms",
			Insert: "ScheduleMany, one call per create group of 64 timers (PostgreSQL's group commit size; calls in flight share a pipeline, one script call per shard)", Server: "redis",
			make: func() system {
				return &lapseRedis{cfg: lredis.Config{Workers: 16, MaxSleep: 50 * time.Millisecond}}
			},
		},
		{
			Name: "lapse-sql", Config: "defaults: 1 instance, claim 200, PollMaxSleep 1s",
			Insert: "CreateOrder, one call per timer (concurrent creates share a transaction: group commit)", Server: "postgres",
			make: func() system { return &lapseSQL{instances: 1} },
		},
		{
			Name: "lapse-sql-tuned", Config: "2 instances claiming from one store (SKIP LOCKED), PollMaxSleep 100ms",
			Insert: "CreateOrder, one call per timer (concurrent creates share a transaction: group commit)", Server: "postgres",
			make: func() system { return &lapseSQL{instances: 2, maxSleep: 100 * time.Millisecond} },
		},
		{
			Name: "lapse-amqp", Config: "as lapse serve runs it: the payment window (the workload's lead) a fixed delay, its own TTL queue; base 100ms, 23 levels, classic queues, batch 200",
			Insert: "Schedule, one call per timer (calls in flight share a batch of confirmed publishes)", Server: "rabbitmq",
			make: func() system { return &lapseAMQP{fixed: true} },
		},
		{
			Name: "lapse-amqp-ladder", Config: "no fixed delay: every timer rides the ladder; base 100ms, 23 levels, classic queues, batch 200",
			Insert: "Schedule, one call per timer (calls in flight share a batch of confirmed publishes)", Server: "rabbitmq",
			make: func() system { return &lapseAMQP{} },
		},
		{
			Name: "rabbitmq-raw", Config: "no lapse: one TTL queue (x-message-ttl = lead) dead-lettering into a ready queue, persistent, confirmed, prefetch 200",
			Insert: "basic.publish, a pacer batch back to back, its confirms awaited together", Server: "rabbitmq",
			make: func() system { return &rabbitRaw{} },
		},
		{
			Name: "lapse-nats", Config: "defaults: JetStream message schedules, batch 200, lead 400ms",
			Insert: "Schedule, one call per timer", Server: "nats",
			make: func() system { return &lapseNATS{} },
		},
		{
			Name: "lapse-kafka", Config: "defaults: levels 1s,10s,100s,1000s,10000s, lead 200ms, batch 200, 12 partitions; on kfake (3 brokers in this process) unless --kafka",
			Insert: "Schedule, one call per timer (calls in flight share the producer's requests)",
			make:   func() system { return &lapseKafka{} },
		},
		{
			Name: "asynq", Config: fmt.Sprintf("defaults: Concurrency %d (CPUs), DelayedTaskCheckInterval 5s, TaskCheckInterval 1s", cpus),
			Insert: "EnqueueContext + ProcessAt, one call per timer", Server: "redis",
			make: func() system { return &asynqSystem{} },
		},
		{
			Name: "asynq-tuned", Config: "Concurrency 50, DelayedTaskCheckInterval 50ms, TaskCheckInterval 10ms",
			Insert: "EnqueueContext + ProcessAt, one call per timer", Server: "redis",
			make: func() system {
				return &asynqSystem{cfg: asynq.Config{
					Concurrency: 50, DelayedTaskCheckInterval: 50 * time.Millisecond, TaskCheckInterval: 10 * time.Millisecond,
				}}
			},
		},
		{
			Name: "river", Config: "defaults: MaxWorkers 100 (required; River's examples use 100), FetchPollInterval 1s, FetchCooldown 100ms, pool of max(4, CPUs)",
			Insert: "InsertMany with ScheduledAt, one call per pacer batch", Server: "postgres",
			make: func() system {
				return &riverSystem{cfg: river.Config{Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}}}}
			},
		},
		{
			Name: "river-tuned", Config: "MaxWorkers 200, FetchPollInterval 20ms, FetchCooldown 5ms, pool of 20",
			Insert: "InsertMany with ScheduledAt, one call per pacer batch", Server: "postgres",
			make: func() system {
				return &riverSystem{maxConns: 20, cfg: river.Config{
					Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 200}},
					FetchPollInterval: 20 * time.Millisecond, FetchCooldown: 5 * time.Millisecond,
				}}
			},
		},
	}
}

// params are the run's settings, as the report shows them.
type params struct {
	Timers      int      `json:"timers"`
	Over        string   `json:"over"`
	OverSec     float64  `json:"over_s"`
	Lead        string   `json:"lead"`
	Wait        string   `json:"wait"`
	Concurrency int      `json:"concurrency"`
	Systems     []string `json:"systems"`
	Run         string   `json:"run"`
	Started     string   `json:"started"`
	CPUs        int      `json:"cpus"`
	GoVersion   string   `json:"go"`
	Redis       string   `json:"redis_version,omitempty"`
	Postgres    string   `json:"postgres_version,omitempty"`
}

// report is the whole output.
type report struct {
	Params  params   `json:"params"`
	Results []result `json:"results"`
	Skipped []string `json:"skipped,omitempty"` // systems not run, and why
}

func main() {
	if err := mainErr(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func mainErr(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "million" || args[0] == "scale") {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if args[0] == "scale" {
			return scale(ctx, args[1:], stdout, stderr)
		}
		return million(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		n        = fs.Int("timers", 20000, "timers per system")
		over     = fs.Duration("over", 10*time.Second, "window the due times are spread over, evenly (0: all due at once)")
		lead     = fs.Duration("lead", 10*time.Second, "time from scheduling a timer to its due time (the first is due lead after the start); below 5s river's scheduler, which runs every 5s looking 5s ahead, can miss a timer until its next run")
		wait     = fs.Duration("wait", 30*time.Second, "how long past the last due time to wait for every delivery")
		conc     = fs.Int("concurrency", 16, "goroutines scheduling timers")
		redisURL = fs.String("redis", "redis://127.0.0.1:6379/12", "Redis for lapse's redis timers and asynq (keys under prefixes of the run's own, deleted after)")
		pgURL    = fs.String("postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL for lapse's sql timers and river (a fresh schema per system, dropped after)")
		amqpURL  = fs.String("amqp", envOr("LAPSE_BENCH_AMQP", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ for lapse's amqp timers and the raw TTL queue, on this machine (queues of the run's own, deleted after; env LAPSE_BENCH_AMQP); empty skips those rows")
		natsURL  = fs.String("nats", os.Getenv("LAPSE_BENCH_NATS_TIMERS"), "nats-server 2.12+ with JetStream for lapse's nats timers, on this machine (a stream of the run's own, deleted after; env LAPSE_BENCH_NATS_TIMERS); empty skips that row (Debian's nats-server 2.9 has no message schedules)")
		kafkaURL = fs.String("kafka", os.Getenv("LAPSE_BENCH_KAFKA"), "Kafka brokers (host:9092,host:9093) for lapse's kafka timers (topics under a prefix of the run's own, left behind; env LAPSE_BENCH_KAFKA); empty runs that row on kfake, franz-go's in-process Kafka")
		sysList  = fs.String("systems", "all", "comma-separated systems to run, or all: "+strings.Join(names(), ","))
		asJSON   = fs.Bool("json", false, "print the result as JSON instead of a markdown table")
		out      = fs.String("out", "", "also write the markdown table to this file")
		verbose  = fs.Bool("v", false, "log the systems' warnings and errors")
		cpuProf  = fs.String("cpuprofile", "", "write a CPU profile of the whole run (this process: the lapse systems and the load generator) to this file, for go tool pprof")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case *n < 1 || *n > 1_000_000:
		return fmt.Errorf("--timers %d: want 1 to 1000000", *n)
	case *over < 0 || *over > time.Hour:
		return fmt.Errorf("--over %s: want 0 to 1h", *over)
	case *lead < 10*time.Millisecond || *lead > time.Hour:
		return fmt.Errorf("--lead %s: want 10ms to 1h", *lead)
	case *wait < 0 || *wait > time.Hour:
		return fmt.Errorf("--wait %s: want 0 to 1h", *wait)
	case *conc < 1 || *conc > 1000:
		return fmt.Errorf("--concurrency %d: want 1 to 1000", *conc)
	}
	chosen, err := pick(*sysList)
	if err != nil {
		return err
	}

	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	level := slog.LevelError + 4 // quiet: the report says what failed
	if *verbose {
		level = slog.LevelWarn
	}
	e := &env{
		w:    workload{n: *n, over: *over, lead: *lead},
		wait: *wait, conc: *conc, redisURL: *redisURL, pgURL: *pgURL, amqpURL: *amqpURL, natsURL: *natsURL, kafkaBrokers: *kafkaURL,
		run: runID(),
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	p := params{
		Timers: *n, Over: over.String(), OverSec: over.Seconds(), Lead: lead.String(), Wait: wait.String(), Concurrency: *conc,
		Run: e.run, Started: time.Now().UTC().Format(time.RFC3339), CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
	}
	for _, sp := range chosen {
		p.Systems = append(p.Systems, sp.Name)
	}
	if needs(chosen, "redis") {
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if e.redis, err = newRedisAdmin(ictx, *redisURL); err != nil {
			cancel()
			return err
		}
		p.Redis = e.redis.version(ictx)
		cancel()
		defer e.redis.close()
	}
	if needs(chosen, "postgres") {
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if e.pg, err = newPGAdmin(ictx, *pgURL); err != nil {
			cancel()
			return err
		}
		p.Postgres = e.pg.version(ictx)
		cancel()
		defer e.pg.close()
	}

	rep := report{Params: p}
	for _, sp := range chosen {
		if ctx.Err() != nil {
			break
		}
		if why := e.missing(sp.Server); why != "" {
			note := fmt.Sprintf("%s: skipped: %s.", sp.Name, why)
			fmt.Fprintln(stderr, "compare: "+note)
			rep.Skipped = append(rep.Skipped, note)
			continue
		}
		fmt.Fprintf(stderr, "compare: %s: %d timers over %s, lead %s …\n", sp.Name, *n, *over, *lead)
		res := run(ctx, e, sp)
		fmt.Fprintf(stderr, "compare: %s: %s\n", sp.Name, oneLine(res))
		rep.Results = append(rep.Results, res)
	}
	md := markdown(rep)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprint(stdout, md)
	}
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	return nil
}

// missing says why a system on server cannot run, or "".
func (e *env) missing(server string) string {
	switch {
	case server == "rabbitmq" && e.amqpURL == "":
		return "no RabbitMQ given (--amqp or LAPSE_BENCH_AMQP)"
	case server == "nats" && e.natsURL == "":
		return "no nats-server 2.12+ given (--nats or LAPSE_BENCH_NATS_TIMERS; Debian's 2.9 has no message schedules: `GOBIN=/tmp/natsbin go install github.com/nats-io/nats-server/v2@v2.15.2` and `/tmp/natsbin/nats-server -js -p 4223 -sd /tmp/nats4223`)"
	}
	return ""
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func names() []string {
	var ns []string
	for _, sp := range specs() {
		ns = append(ns, sp.Name)
	}
	return ns
}

// pick returns the systems named in list (comma-separated, or "all"), in the
// order of specs.
func pick(list string) ([]spec, error) {
	all := specs()
	if list == "all" || list == "" {
		return all, nil
	}
	want := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		found := false
		for _, sp := range all {
			if sp.Name == name {
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("--systems: unknown system %q: want %s", name, strings.Join(names(), ", "))
		}
		want[name] = true
	}
	var out []spec
	for _, sp := range all {
		if want[sp.Name] {
			out = append(out, sp)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--systems: no system named")
	}
	return out, nil
}

func needs(ss []spec, server string) bool {
	for _, sp := range ss {
		if sp.Server == server {
			return true
		}
	}
	return false
}

func runID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
