package amqp

import (
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Names returns the exchanges and queues of prefix with levels, for tests
// that look at them: the level queues from 0 up, then the ready queue, the
// seed marker's queue and the seed lock's queue.
func Names(prefix string, levels int) (levelQueues []string, ready, marker, lock string) {
	n := names{prefix: prefix, levels: levels}
	for k := range levels {
		levelQueues = append(levelQueues, n.level(k))
	}
	return levelQueues, n.ready(), n.marker(), n.lock()
}

// DeleteTopologyOn deletes every exchange and queue of prefix with levels.
func DeleteTopologyOn(ch *amqp091.Channel, prefix string, levels int) error {
	return deleteTopology(ch, names{prefix: prefix, levels: levels})
}

// FixedQueue is the name of the queue of fixed delay f on prefix that takes
// a timer set on time, for a scheduler with lead and base.
func FixedQueue(prefix string, f, lead, base time.Duration) string {
	return names{prefix: prefix}.fixedQueue(fixedTTL(f, lead, base))
}

// FixedQueues are the names of every queue of cfg's fixed delays (the
// combs) on cfg.Prefix, with cfg's defaults applied.
func FixedQueues(cfg Config) []string {
	cfg.setDefaults()
	n := names{prefix: cfg.Prefix}
	var qs []string
	for _, t := range cfg.fixedTTLs() {
		qs = append(qs, n.fixedQueue(t))
	}
	return qs
}
