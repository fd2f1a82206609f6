package amqp

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/internal/rabbit"
)

// ErrPrefixTaken is Claim's error when another deployment owns the prefix.
var ErrPrefixTaken = errors.New("amqp timers: the prefix belongs to another deployment")

// claimWait bounds how long Claim waits for another instance's claim to end.
const claimWait = 10 * time.Second

// Claim fences the prefix by deployment. Two deployments (two stores) whose
// schedulers share a prefix take each other's timers: each timer a
// deployment's instance receives for an order of the other is skipped (its
// store does not have it), and the other cancels that order late, through
// its fallback sweep. deployment names the deployment this scheduler
// serves (lapse serve uses the store's Identity): the first Claim on a
// prefix records it in the queue <prefix>.deployment; a Claim by the same
// deployment (any number of instances) succeeds; one by another deployment
// fails with ErrPrefixTaken, naming the prefix and the deployment that owns
// it, so that the second deployment refuses to start instead of silently
// sharing. Claims are serialized by an exclusive consumer on
// <prefix>.deployment-lock, so two deployments starting at once on a new
// prefix cannot both win.
//
// Deleting the prefix's queues (DeleteTopology) forgets the owner. A
// scheduler that never claims (a library user's) is not fenced.
func (s *Scheduler) Claim(ctx context.Context, deployment string) error {
	if deployment == "" {
		return errors.New("amqp timers: claim the prefix: empty deployment")
	}
	conn, _, err := s.checks.get()
	if err != nil {
		return fmt.Errorf("amqp timers: claim prefix %s: %w", s.cfg.Prefix, err)
	}
	lock, err := s.claimLock(ctx, conn)
	if err != nil {
		return fmt.Errorf("amqp timers: claim prefix %s: %w", s.cfg.Prefix, err)
	}
	defer func() { _ = lock.Close() }()
	var owner string
	var found bool
	err = withChannel(conn, func(ch *amqp091.Channel) error {
		d, ok, err := ch.Get(s.names.owner(), false)
		if err != nil || !ok {
			return err
		}
		owner, found = string(d.Body), true
		return d.Nack(false, true) // it stays, for the next claim
	})
	if err != nil {
		return fmt.Errorf("amqp timers: claim prefix %s: read its owner: %w", s.cfg.Prefix, err)
	}
	switch {
	case found && owner == deployment:
		return nil
	case found:
		return fmt.Errorf("%w: prefix %s is used by deployment %q, and this one is %q; two deployments on one prefix take each other's timers "+
			"(each cancels the other's orders late, through its sweep): give this one a prefix of its own (?prefix= in --timers), "+
			"or, if the other is retired for good, delete its queues (%s.*) first", ErrPrefixTaken, s.cfg.Prefix, owner, deployment, s.cfg.Prefix)
	}
	msg := rabbit.Message{RoutingKey: s.names.owner(), Publishing: amqp091.Publishing{
		MessageId: randomID(), Type: ownerType, Timestamp: time.Now(), DeliveryMode: amqp091.Persistent,
		ContentType: "text/plain", Body: []byte(deployment),
	}}
	if err := s.conn.Publish(ctx, []rabbit.Message{msg})[0]; err != nil {
		return fmt.Errorf("amqp timers: claim prefix %s: record its owner: %w", s.cfg.Prefix, err)
	}
	s.log.Info("amqp timers: the prefix is this deployment's now", "deployment", deployment)
	return nil
}

// ownerType is the AMQP type of the message naming a prefix's owner.
const ownerType = "lapse.timer-owner"

// claimLock takes the claim lock: an exclusive consumer on ownerLock, on a
// channel of its own (closing it releases the lock, as the broker does
// when the connection dies). Another instance's claim holds it for a few
// round trips: it is asked again until claimWait or ctx ends.
func (s *Scheduler) claimLock(ctx context.Context, conn *amqp091.Connection) (*amqp091.Channel, error) {
	ctx, cancel := context.WithTimeout(ctx, claimWait)
	defer cancel()
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		ch, err := conn.Channel()
		if err != nil {
			return nil, fmt.Errorf("open a channel for the claim lock: %w", err)
		}
		_, err = ch.Consume(s.names.ownerLock(), "", false, true, false, false, nil)
		if err == nil {
			return ch, nil
		}
		_ = ch.Close()
		if ae, ok := errors.AsType[*amqp091.Error](err); !ok || ae.Code != amqp091.AccessRefused {
			return nil, fmt.Errorf("take the claim lock: %w", err)
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("take the claim lock: another instance holds it: %w", err)
		}
	}
}
