package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// system is one timer system under test, configured one way.
type system interface {
	// start prepares what the system needs on the servers (a schema, a
	// queue, a key prefix of the run's own) and starts its consumer, which
	// reports every delivery to rec.
	start(ctx context.Context, e *env, rec *recorder) error
	// schedule sets the timers of one batch (at most batch() of them).
	schedule(ctx context.Context, ts []item) error
	// batch is the most timers one schedule call takes: 1 for systems
	// scheduled one timer per call, more for those with a bulk API.
	batch() int
	// stop stops the consumer and removes everything start made.
	stop(ctx context.Context) error
}

// spec describes a system for the report and makes it.
type spec struct {
	Name   string `json:"system"`
	Config string `json:"config"` // what differs from the system's defaults
	Insert string `json:"insert"` // the API that schedules a timer
	Server string `json:"server"` // the server whose CPU is read: redis, postgres or ""
	make   func() system
}

// result is one system's run.
type result struct {
	spec
	stats
	ScheduledLate int     `json:"scheduled_late"` // timers whose schedule call returned after their due time
	SchedFailed   int     `json:"schedule_failed"`
	CPUSec        float64 `json:"process_cpu_s"` // this process (system + load generator), user + system
	ServerCPUSec  float64 `json:"server_cpu_s"`  // -1: not measured
	SchedSec      float64 `json:"schedule_s"`    // from the start until every schedule call returned
	WallSec       float64 `json:"wall_s"`        // from the start to the last delivery (or the deadline)
	Error         string  `json:"error,omitempty"`
}

// run measures one system: start it, feed it the workload, wait for every
// delivery (at most wait past the last due time), stop it.
func run(ctx context.Context, e *env, sp spec) (res result) {
	res = result{spec: sp, ServerCPUSec: -1}
	sys := sp.make()
	rec := newRecorder(e.w.n)

	setup, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err := sys.start(setup, e, rec)
	cancel()
	defer func() {
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := sys.stop(stop); err != nil {
			e.log.Warn("stop", "system", sp.Name, "err", err)
			if res.Error == "" {
				res.Error = "stop: " + err.Error()
			}
		}
	}()
	if err != nil {
		res.Error = "start: " + err.Error()
		return res
	}

	cpu0, srv0 := processCPU(), e.serverCPU(ctx, sp.Server)
	start := time.Now()
	items := make([]item, e.w.n)
	for i := range items {
		due := start.Add(e.w.dueAt(i))
		items[i] = item{idx: i, key: timerKey(e.run+e.tag(sp.Name), i), due: due}
		rec.due[i] = due.UnixNano()
	}
	deadline := items[len(items)-1].due.Add(e.wait)
	rctx, rcancel := context.WithDeadline(ctx, deadline)
	defer rcancel()

	late, failed, err := feed(rctx, sys, e.w, start, items, e.conc)
	res.ScheduledLate, res.SchedFailed = late, failed
	res.SchedSec = time.Since(start).Seconds()
	if err != nil {
		res.Error = "schedule: " + err.Error()
	}
	select {
	case <-rec.done:
	case <-rctx.Done():
		if ctx.Err() == nil && res.Error == "" && failed == 0 {
			res.Error = fmt.Sprintf("not every timer delivered within %s of the last due time", e.wait)
		}
	}
	res.WallSec = time.Since(start).Seconds()
	res.CPUSec = processCPU() - cpu0
	if srv0 >= 0 {
		if srv1 := e.serverCPU(ctx, sp.Server); srv1 >= 0 {
			res.ServerCPUSec = srv1 - srv0
		}
	}
	res.stats = rec.summarize()
	return res
}

// env is what every system shares: the servers, the workload, the run's id.
type env struct {
	w        workload
	wait     time.Duration
	conc     int
	redisURL string
	pgURL    string
	amqpURL  string // "": the amqp rows are skipped
	natsURL  string // "": the nats row is skipped (it needs nats-server 2.12+)
	// kafkaBrokers are the brokers of the kafka row, comma-separated; "":
	// kfake, in this process.
	kafkaBrokers string
	run          string // this run's id: keys, queues and schemas carry it
	log          *slog.Logger
	pg           *pgAdmin
	redis        *redisAdmin
	procs        serverProcs
}

// tag makes a system's name fit keys, queue names and schema names.
func (e *env) tag(name string) string {
	b := []byte("-" + name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// serverCPU is the CPU seconds used so far by the server a system runs on:
// all of redis-server (INFO cpu), the PostgreSQL backends serving this
// run's connections (their application_name), or all of the RabbitMQ or
// nats-server process (read from /proc: the broker must run on this
// machine). -1 when unknown.
func (e *env) serverCPU(ctx context.Context, server string) float64 {
	switch server {
	case "redis":
		if e.redis == nil {
			return -1
		}
		return e.redis.cpu(ctx)
	case "postgres":
		if e.pg == nil {
			return -1
		}
		return e.pg.backendCPU(ctx, e.appName())
	case "rabbitmq", "nats":
		return e.procs.cpu(server, e.natsURL)
	}
	return -1
}

// appName is the application_name of this run's PostgreSQL connections.
func (e *env) appName() string { return "lapsecmp-" + e.run }

var errNoServer = errors.New("server not configured")
