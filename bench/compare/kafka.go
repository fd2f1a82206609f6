package main

import (
	"context"
	"errors"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"

	lkafka "github.com/lapsehq/lapse/timer/kafka"
)

// lapseKafka is timer/kafka: delay-level topics forwarded by consumer
// groups down to a due topic. With no --kafka it runs on kfake, franz-go's
// in-process Kafka with three brokers, started for the row and closed after
// it: kfake's CPU is then this process's, counted with lapse's, and its
// speed is not a real broker's. With --kafka, on the brokers named, under a
// prefix of the run's own (its topics are left behind).
type lapseKafka struct {
	e       *env
	cluster *kfake.Cluster
	s       *lkafka.Scheduler
	r       runner
}

func (l *lapseKafka) start(ctx context.Context, e *env, rec *recorder) error {
	l.e = e
	brokers := strings.Split(e.kafkaBrokers, ",")
	if e.kafkaBrokers == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(3))
		if err != nil {
			return err
		}
		l.cluster, brokers = c, c.ListenAddrs()
	}
	s, err := lkafka.New(ctx, lkafka.Config{
		Brokers: brokers, Prefix: "lapsecmp-" + e.run + e.tag("kafka"), Logger: e.log,
	})
	if err != nil {
		return err
	}
	l.s = s
	l.r.goRun(func(ctx context.Context) { _ = s.Run(ctx, recordBatch(rec)) })
	return nil
}

// schedule uses Schedule, one call per timer as lapse does for each order
// it creates; calls in flight share the producer's requests.
func (l *lapseKafka) schedule(ctx context.Context, ts []item) error {
	for _, t := range ts {
		if err := l.s.Schedule(ctx, t.key, t.due); err != nil {
			return err
		}
	}
	return nil
}

func (l *lapseKafka) batch() int { return 1 }

func (l *lapseKafka) stop(ctx context.Context) error {
	err := l.r.halt(ctx)
	if l.s != nil {
		err = errors.Join(err, l.s.Close())
	}
	if l.cluster != nil {
		l.cluster.Close()
	}
	return err
}
