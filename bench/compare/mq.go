package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"

	lamqp "github.com/lapsehq/lapse/timer/amqp"
	lnats "github.com/lapsehq/lapse/timer/nats"
)

// lapseAMQP is timer/amqp: the RabbitMQ dead-letter delay ladder, on a
// prefix of the run's own whose exchanges and queues stop deletes.
type lapseAMQP struct {
	cfg lamqp.Config // Prefix, Logger (and with fixed, PaymentWindow) are set by start
	// fixed makes the workload's lead, every timer's delay, the payment
	// window: one TTL queue, as lapse serve runs with its default timeout.
	fixed  bool
	e      *env
	prefix string
	s      *lamqp.Scheduler
	r      runner
}

func (l *lapseAMQP) start(ctx context.Context, e *env, rec *recorder) error {
	if e.amqpURL == "" {
		return errNoServer
	}
	l.e = e
	l.prefix = "lapsecmp-" + e.run + e.tag("amqp")
	cfg := l.cfg
	cfg.Prefix, cfg.Logger = l.prefix, e.log
	if l.fixed {
		cfg.PaymentWindow = e.w.lead
		l.cfg.PaymentWindow = e.w.lead // stop deletes its queue
	}
	s, err := lamqp.Open(ctx, e.amqpURL, cfg)
	if err != nil {
		return err
	}
	l.s = s
	l.r.goRun(func(ctx context.Context) { _ = s.Run(ctx, recordBatch(rec)) })
	return nil
}

// schedule uses Schedule, one call per timer as lapse does for each order
// it creates; calls in flight share a batch of publishes and its confirms.
func (l *lapseAMQP) schedule(ctx context.Context, ts []item) error {
	for _, t := range ts {
		if err := l.s.Schedule(ctx, t.key, t.due); err != nil {
			return err
		}
	}
	return nil
}

func (l *lapseAMQP) batch() int { return 1 }

func (l *lapseAMQP) stop(ctx context.Context) error {
	err := l.r.halt(ctx)
	if l.s != nil {
		err = errors.Join(err, l.s.Close())
	}
	if l.prefix != "" {
		cfg := l.cfg
		cfg.Prefix = l.prefix
		err = errors.Join(err, lamqp.DeleteTopology(ctx, l.e.amqpURL, cfg))
	}
	return err
}

// rabbitRaw is the design lapse's ladder generalises, written directly
// against RabbitMQ with no lapse code: one durable wait queue whose
// x-message-ttl is the workload's lead (every timer of a run has the same
// delay, so one queue serves them all), dead-lettering into a durable ready
// queue. Publishes are persistent, mandatory and confirmed, pipelined on one
// channel per scheduling goroutine, a batch's confirms awaited together; the
// consumer acknowledges each delivery.
// It is the broker's ceiling for one TTL hop on this machine: what a timer
// costs RabbitMQ with nothing of lapse's around it.
type rabbitRaw struct {
	e    *env
	wait string
	conn *amqp091.Connection
	pubs chan *amqp091.Channel // idle publishing channels
	r    runner
}

func (l *rabbitRaw) start(ctx context.Context, e *env, rec *recorder) error {
	if e.amqpURL == "" {
		return errNoServer
	}
	l.e = e
	l.wait = "lapsecmp-" + e.run + e.tag("rabbitmq-raw")
	conn, err := amqp091.Dial(e.amqpURL)
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	l.conn = conn
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	ready := l.wait + ".ready"
	if _, err := ch.QueueDeclare(ready, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declare %s: %w", ready, err)
	}
	if _, err := ch.QueueDeclare(l.wait, true, false, false, false, amqp091.Table{
		"x-message-ttl":             e.w.lead.Milliseconds(),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": ready,
	}); err != nil {
		return fmt.Errorf("rabbitmq: declare %s: %w", l.wait, err)
	}
	if err := ch.Qos(200, 0, false); err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	deliveries, err := ch.Consume(ready, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("rabbitmq: consume %s: %w", ready, err)
	}
	l.pubs = make(chan *amqp091.Channel, e.conc)
	l.r.goRun(func(ctx context.Context) {
		for {
			select {
			case d, ok := <-deliveries:
				if !ok {
					return
				}
				rec.deliver(keyIndex(string(d.Body)), time.Now(), time.Time{})
				_ = d.Ack(false)
			case <-ctx.Done():
				return
			}
		}
	})
	return nil
}

// channel takes an idle confirm-mode publishing channel or opens one.
func (l *rabbitRaw) channel() (*amqp091.Channel, error) {
	select {
	case ch := <-l.pubs:
		return ch, nil
	default:
	}
	ch, err := l.conn.Channel()
	if err != nil {
		return nil, err
	}
	return ch, ch.Confirm(false)
}

func (l *rabbitRaw) schedule(ctx context.Context, ts []item) error {
	ch, err := l.channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	dcs := make([]*amqp091.DeferredConfirmation, len(ts))
	for i, t := range ts {
		dcs[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, "", l.wait, true, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, Body: []byte(t.key),
		})
		if err != nil {
			return fmt.Errorf("rabbitmq: publish: %w", err)
		}
	}
	for _, dc := range dcs {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("rabbitmq: publish not confirmed (ack %v): %v", ok, err)
		}
	}
	l.pubs <- ch
	return nil
}

// batch lets the pacer hand over every timer whose time has come at once:
// they are published back to back and their confirms awaited together, the
// cheapest way to have a broker confirm them.
func (l *rabbitRaw) batch() int { return 1000 }

func (l *rabbitRaw) stop(ctx context.Context) error {
	err := l.r.halt(ctx)
	if l.conn == nil {
		return err
	}
	if ch, cerr := l.conn.Channel(); cerr == nil {
		for _, q := range []string{l.wait, l.wait + ".ready"} {
			if _, derr := ch.QueueDelete(q, false, false, false); derr != nil {
				err = errors.Join(err, fmt.Errorf("rabbitmq: delete %s: %w", q, derr))
			}
		}
	} else {
		err = errors.Join(err, cerr)
	}
	return errors.Join(err, l.conn.Close())
}

// lapseNATS is timer/nats: JetStream message schedules, on a stream and a
// subject prefix of the run's own, deleted by stop.
type lapseNATS struct {
	e      *env
	stream string
	s      *lnats.Scheduler
	r      runner
}

func (l *lapseNATS) start(ctx context.Context, e *env, rec *recorder) error {
	if e.natsURL == "" {
		return errNoServer
	}
	l.e = e
	prefix := "lapsecmp_" + e.run + strings.ReplaceAll(e.tag("nats"), "-", "_")
	l.stream = strings.ToUpper(prefix)
	s, err := lnats.Open(e.natsURL, lnats.Config{Prefix: prefix, Stream: l.stream, Logger: e.log})
	if err != nil {
		return err
	}
	l.s = s
	l.r.goRun(func(ctx context.Context) { _ = s.Run(ctx, recordBatch(rec)) })
	return nil
}

func (l *lapseNATS) schedule(ctx context.Context, ts []item) error {
	for _, t := range ts {
		if err := l.s.Schedule(ctx, t.key, t.due); err != nil {
			return err
		}
	}
	return nil
}

func (l *lapseNATS) batch() int { return 1 }

func (l *lapseNATS) stop(ctx context.Context) error {
	err := l.r.halt(ctx)
	if l.s != nil {
		err = errors.Join(err, l.s.Close())
	}
	if l.stream != "" {
		err = errors.Join(err, deleteStream(ctx, l.e.natsURL, l.stream))
	}
	return err
}

// deleteStream deletes a JetStream stream on its own connection.
func deleteStream(ctx context.Context, url, stream string) error {
	nc, err := natsgo.Connect(url)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	if err := js.DeleteStream(ctx, stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("nats: delete stream %s: %w", stream, err)
	}
	return nil
}

// serverProcs finds the processes of the brokers on this machine, whose
// CPU the report shows: RabbitMQ's Erlang VM (beam.smp; there is one
// broker per machine) and the nats-server listening on the run's port.
type serverProcs struct {
	once        sync.Once
	beam, natsd int // 0: not found
}

func (p *serverProcs) find(natsURL string) {
	p.once.Do(func() {
		port := "4222"
		if i := strings.LastIndexByte(natsURL, ':'); i >= 0 {
			port = strings.TrimRight(natsURL[i+1:], "/")
		}
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return
		}
		for _, ent := range entries {
			pid, err := strconv.Atoi(ent.Name())
			if err != nil {
				continue
			}
			comm, err := os.ReadFile("/proc/" + ent.Name() + "/comm")
			if err != nil {
				continue
			}
			switch strings.TrimSpace(string(comm)) {
			case "beam.smp":
				p.beam = pid
			case "nats-server":
				cmd, err := os.ReadFile("/proc/" + ent.Name() + "/cmdline")
				if err != nil {
					continue
				}
				args := strings.Split(string(cmd), "\x00")
				for i, a := range args {
					if (a == "-p" || a == "--port") && i+1 < len(args) && args[i+1] == port {
						p.natsd = pid
					}
				}
				if port == "4222" && p.natsd == 0 && !strings.Contains(string(cmd), "-p\x00") && !strings.Contains(string(cmd), "--port") {
					p.natsd = pid
				}
			}
		}
	})
}

// cpu is the CPU seconds so far of the process of server ("rabbitmq" or
// "nats"), -1 when it is not on this machine.
func (p *serverProcs) cpu(server, natsURL string) float64 {
	p.find(natsURL)
	pid := p.beam
	if server == "nats" {
		pid = p.natsd
	}
	if pid == 0 {
		return -1
	}
	t, ok := procTicks(pid)
	if !ok {
		return -1
	}
	return float64(t) / userHZ
}
