package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ensureTopics creates the scheduler's missing topics and remembers every
// topic's ID.
func (s *Scheduler) ensureTopics(ctx context.Context) error {
	_, err := s.ensureTopicsCreated(ctx)
	return err
}

// ensureTopicsCreated is ensureTopics, reporting whether it created any.
func (s *Scheduler) ensureTopicsCreated(ctx context.Context) (created bool, err error) {
	details, err := s.adm.ListTopics(ctx, s.topics()...)
	if err != nil {
		return false, fmt.Errorf("kafka timers: list topics: %w", err)
	}
	var missing []string
	for _, t := range s.topics() {
		d, ok := details[t]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			missing = append(missing, t)
			continue
		}
		if d.Err != nil {
			return false, fmt.Errorf("kafka timers: topic %s: %w", t, d.Err)
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
		for _, r := range resp {
			if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
				return false, fmt.Errorf("kafka timers: create topic %s: %w", r.Topic, r.Err)
			}
		}
		s.log.Info("kafka timers: created topics", "topics", missing, "partitions", s.cfg.Partitions, "replication", s.cfg.Replication)
		if details, err = s.waitTopics(ctx); err != nil {
			return true, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, d := range details {
		s.ids[t] = d.ID
	}
	return len(missing) > 0, nil
}

// waitTopics waits until every topic has a leader for each partition.
func (s *Scheduler) waitTopics(ctx context.Context) (kadm.TopicDetails, error) {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		details, err := s.adm.ListTopics(ctx, s.topics()...)
		ready := err == nil
		if ready {
			for _, t := range s.topics() {
				d, ok := details[t]
				if !ok || d.Err != nil || len(d.Partitions) == 0 {
					ready = false
					break
				}
				for _, p := range d.Partitions {
					if p.Leader < 0 || p.Err != nil {
						ready = false
					}
				}
			}
		}
		if ready {
			return details, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kafka timers: waiting for the topics' leaders: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
}

// checkLoss is the data-loss check (see "Durability and data loss" in the
// package documentation): on a loss it seeds the timers from the store.
func (s *Scheduler) checkLoss(ctx context.Context) error {
	details, err := s.adm.ListTopics(ctx, s.topics()...)
	if err != nil {
		return fmt.Errorf("kafka timers: list topics: %w", err)
	}
	var lost []string
	s.mu.Lock()
	for _, t := range s.topics() {
		d, ok := details[t]
		switch {
		case !ok || d.Err != nil:
			lost = append(lost, "topic "+t+" missing")
		case d.ID != s.ids[t]:
			lost = append(lost, "topic "+t+" recreated")
		}
	}
	s.mu.Unlock()
	if len(lost) > 0 {
		if _, err := s.ensureTopicsCreated(ctx); err != nil {
			return err
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
