package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ensureTopics creates the scheduler's missing topics and remembers every
// topic's ID.
func (s *Scheduler) ensureTopics(ctx context.Context) error {
	_, err := s.ensureTopicsCreated(ctx)
	return err
}

// ensureTopicsCreated is ensureTopics, reporting whether it created any.
func (s *Scheduler) ensureTopicsCreated(ctx context.Context) (created bool, err error) {
	details, err := s.describeTopics(ctx)
	if err != nil {
		return false, err
	}
	var missing []string
	for _, t := range s.topics() {
		d, ok := details[t]
		if !ok || errors.Is(d.err, kerr.UnknownTopicOrPartition) {
			missing = append(missing, t)
			continue
		}
		if d.err != nil {
			return false, fmt.Errorf("kafka timers: topic %s: %w", t, d.err)
		}
	}
	if len(missing) > 0 {
		del := "delete"
		// The ladder's and due topic's records may be read long after they
		// were written (lapse down): the broker's retention decides, and
		// the loss check notices what it deleted unread.
		resp, err := s.adm.CreateTopics(ctx, s.cfg.Partitions, s.cfg.Replication, map[string]*string{"cleanup.policy": &del}, missing...)
		if err != nil {
			return false, fmt.Errorf("kafka timers: create topics: %w", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, r := range resp {
			if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
				return false, fmt.Errorf("kafka timers: create topic %s: %w", r.Topic, r.Err)
			}
			if r.Err == nil {
				s.ids[r.Topic] = r.ID
			}
		}
		s.log.Info("kafka timers: created topics", "topics", missing, "partitions", s.cfg.Partitions, "replication", s.cfg.Replication)
	} else {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	for t, d := range details {
		if d.err == nil {
			s.ids[t] = d.id
		}
	}
	return len(missing) > 0, nil
}

// topicState is a topic as the brokers describe it.
type topicState struct {
	id  kadm.TopicID
	err error
}

// describeTopics asks the brokers about the scheduler's topics, bypassing
// the client's metadata cache (kadm.ListTopics may answer from it for
// seconds after a topic was created or deleted).
func (s *Scheduler) describeTopics(ctx context.Context) (map[string]topicState, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false // the loss check must see a topic missing, not create it bare
	for _, t := range s.topics() {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, s.prod)
	if err != nil {
		return nil, fmt.Errorf("kafka timers: describe topics: %w", err)
	}
	states := map[string]topicState{}
	for _, t := range resp.Topics {
		if t.Topic != nil {
			states[*t.Topic] = topicState{id: t.TopicID, err: kerr.ErrorForCode(t.ErrorCode)}
		}
	}
	return states, nil
}

// checkLoss is the data-loss check (see "Durability and data loss" in the
// package documentation): on a loss it seeds the timers from the store.
func (s *Scheduler) checkLoss(ctx context.Context) error {
	details, err := s.describeTopics(ctx)
	if err != nil {
		return err
	}
	var lost []string
	s.mu.Lock()
	for _, t := range s.topics() {
		d, ok := details[t]
		switch {
		case !ok || d.err != nil:
			lost = append(lost, "topic "+t+" missing")
		case d.id != s.ids[t]:
			lost = append(lost, "topic "+t+" recreated")
		}
	}
	s.mu.Unlock()
	if len(lost) > 0 {
		if _, err := s.ensureTopicsCreated(ctx); err != nil {
			return err
		}
		select {
		case s.restart <- struct{}{}:
		default:
		}
	}
	deleted, err := s.deletedUnread(ctx)
	if err != nil {
		return err
	}
	lost = append(lost, deleted...)
	ends, err := s.adm.ListEndOffsets(ctx, s.marker)
	if err != nil {
		return fmt.Errorf("kafka timers: the seed marker's offsets: %w", err)
	}
	starts, err := s.adm.ListStartOffsets(ctx, s.marker)
	if err != nil {
		return fmt.Errorf("kafka timers: the seed marker's offsets: %w", err)
	}
	seeded := false
	ends.Each(func(o kadm.ListedOffset) {
		if st, ok := starts.Lookup(o.Topic, o.Partition); ok && o.Err == nil && st.Err == nil && o.Offset > st.Offset {
			seeded = true
		}
	})
	if !seeded {
		lost = append(lost, "no seed marker")
	}
	if len(lost) == 0 {
		return nil
	}
	return s.reseed(ctx, ends, lost)
}

// deletedUnread lists the partitions whose group's committed offset is
// below the partition's start: records deleted before they were read.
func (s *Scheduler) deletedUnread(ctx context.Context) ([]string, error) {
	var lost []string
	starts, err := s.adm.ListStartOffsets(ctx, append(s.levelTopics(), s.dueTopic)...)
	if err != nil {
		return nil, fmt.Errorf("kafka timers: start offsets: %w", err)
	}
	for _, g := range []string{s.ladderGroup(), s.dueGroup()} {
		committed, err := s.adm.FetchOffsets(ctx, g)
		if err != nil {
			if errors.Is(err, kerr.GroupIDNotFound) || errors.Is(err, kerr.CoordinatorNotAvailable) {
				continue
			}
			return nil, fmt.Errorf("kafka timers: committed offsets of %s: %w", g, err)
		}
		committed.Each(func(o kadm.OffsetResponse) {
			st, ok := starts.Lookup(o.Topic, o.Partition)
			if o.Err == nil && ok && st.Err == nil && o.At >= 0 && o.At < st.Offset {
				lost = append(lost, fmt.Sprintf("%s/%d: records %d to %d deleted unread", o.Topic, o.Partition, o.At, st.Offset-1))
			}
		})
	}
	return lost, nil
}

// reseed empties the seed marker, seeds the timers from the store and
// writes the marker.
func (s *Scheduler) reseed(ctx context.Context, markerEnds kadm.ListedOffsets, why []string) error {
	s.stats.losses.Add(1)
	seed := s.seed.Load()
	if seed == nil {
		s.log.Warn("kafka timers: timers may have been lost, and no seed function is set: the fallback sweep cancels their orders", "why", why)
		return nil
	}
	s.log.Warn("kafka timers: timers may have been lost; seeding them again from the store", "why", why)
	empty := kadm.Offsets{}
	markerEnds.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			empty.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.Offset, LeaderEpoch: -1})
		}
	})
	if len(empty) > 0 {
		if _, err := s.adm.DeleteRecords(ctx, empty); err != nil {
			return fmt.Errorf("kafka timers: empty the seed marker: %w", err)
		}
	}
	start := time.Now()
	if err := (*seed)(ctx); err != nil {
		return fmt.Errorf("kafka timers: seed: %w", err)
	}
	if err := s.prod.ProduceSync(ctx, &kgo.Record{Topic: s.marker, Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))}).FirstErr(); err != nil {
		return fmt.Errorf("kafka timers: write the seed marker: %w", err)
	}
	s.log.Info("kafka timers: seeded from the store", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

func (s *Scheduler) ladderGroup() string { return s.cfg.Prefix + ".ladder" }
func (s *Scheduler) dueGroup() string    { return s.cfg.Prefix + ".due" }
