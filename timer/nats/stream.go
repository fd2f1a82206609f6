package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// permanentError is an error that trying again does not cure: a server too
// old for message schedules, a stream of the same name with other subjects.
// Run returns it instead of retrying.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

func permanent(format string, args ...any) error {
	return permanentError{fmt.Errorf(format, args...)}
}

func isPermanent(err error) bool {
	_, ok := errors.AsType[permanentError](err)
	return ok
}

// checkServer refuses a server older than s.minVersion. The version is the
// one the server announced when the connection was made (or remade, to
// another server of a cluster).
func (s *Scheduler) checkServer() error {
	v := s.nc.ConnectedServerVersion()
	if v == "" {
		return errors.New("nats: not connected to a server")
	}
	got, ok := parseVersion(v)
	if !ok {
		return permanent("nats: nats-server version %q: not a version this scheduler can compare with %s", v, MinServerVersion)
	}
	if slices.Compare(got[:], s.minVersion[:]) < 0 {
		return permanent("nats: nats-server %s has no message schedules (it would store the timers and never fire them): "+
			"lapse's NATS timers need nats-server %s or later", v, MinServerVersion)
	}
	return nil
}

// parseVersion parses "2.12.1" or "2.12.0-RC.1" (as 2.12.0) into numbers.
func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	core, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// streamConfig is the configuration of the scheduler's stream.
func (s *Scheduler) streamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        s.cfg.Stream,
		Description: "lapse order timers: message schedules (" + s.cfg.Prefix + ".sched.*), fired timers (" + s.cfg.Prefix + ".due.*)",
		Subjects:    s.streamSubjects(),
		// A work queue deletes a timer once its consumer acknowledges it;
		// the schedules and the seed marker, which no consumer reads, stay
		// until they are replaced or purged.
		Retention: jetstream.WorkQueuePolicy,
		// One schedule per key, one fired timer per key, one seed marker.
		MaxMsgsPerSubject: 1,
		Discard:           jetstream.DiscardOld,
		Storage:           jetstream.FileStorage,
		Replicas:          s.cfg.Replicas,
		AllowMsgSchedules: true,
		// Message schedules are roll-ups (the server would set these two
		// itself; set here so that the read-back compares equal).
		AllowRollup: true,
		DenyPurge:   false,
	}
}

func (s *Scheduler) streamSubjects() []string {
	return []string{s.subj.sched + "*", s.subj.due + "*", s.subj.seeded}
}

// ensureStream returns the stream, creating it or bringing its settings up
// to date the first time, and after forget. It refuses an existing stream
// of that name with other subjects (another deployment's, say), and checks
// that the server kept AllowMsgSchedules.
func (s *Scheduler) ensureStream(ctx context.Context) (jetstream.Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stream != nil {
		return s.stream, nil
	}
	if err := s.checkServer(); err != nil {
		return nil, err
	}
	want := s.streamConfig()
	if st, err := s.js.Stream(ctx, want.Name); err == nil {
		have := st.CachedInfo().Config.Subjects
		if !sameSet(have, want.Subjects) {
			return nil, permanent("nats: stream %s exists with subjects %v, not this scheduler's %v: "+
				"set a Stream of its own (or the Prefix it was made for)", want.Name, have, want.Subjects)
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("look up stream %s: %w", want.Name, err)
	}
	st, err := s.js.CreateOrUpdateStream(ctx, want)
	if err != nil {
		return nil, fmt.Errorf("create or update stream %s: %w", want.Name, err)
	}
	// Read the configuration back from the server rather than trusting
	// the answer to the update: a server that does not know a setting
	// drops it, and one without message schedules would then keep the
	// timers and never fire them.
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read back stream %s: %w", want.Name, err)
	}
	if err := checkApplied(want, info.Config, s.nc.ConnectedServerVersion()); err != nil {
		return nil, err
	}
	s.stream = st
	return st, nil
}

// checkApplied compares the stream configuration the server reports with
// the one asked for, on the settings the scheduler depends on.
func checkApplied(want, have jetstream.StreamConfig, version string) error {
	var bad []string
	if !have.AllowMsgSchedules {
		bad = append(bad, "AllowMsgSchedules is off (the server does not fire message schedules; need nats-server "+MinServerVersion+" or later)")
	}
	if have.Retention != want.Retention {
		bad = append(bad, fmt.Sprintf("retention is %v, want %v", have.Retention, want.Retention))
	}
	if have.MaxMsgsPerSubject != want.MaxMsgsPerSubject {
		bad = append(bad, fmt.Sprintf("MaxMsgsPerSubject is %d, want %d", have.MaxMsgsPerSubject, want.MaxMsgsPerSubject))
	}
	if have.DenyPurge {
		bad = append(bad, "DenyPurge is on (Unschedule purges)")
	}
	if len(bad) > 0 {
		return permanent("nats: stream %s on nats-server %s: %s", want.Name, version, strings.Join(bad, "; "))
	}
	return nil
}

// consumer returns the durable pull consumer, creating it or bringing its
// settings up to date the first time, and after forget.
func (s *Scheduler) consumer(ctx context.Context) (jetstream.Consumer, error) {
	st, err := s.ensureStream(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cons != nil {
		return s.cons, nil
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       consumerName,
		Description:   "lapse instances pulling fired order timers",
		FilterSubject: s.subj.due + "*",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		// Never give up on a timer: a batch fails while the store is down,
		// for as long as it is down.
		MaxDeliver: -1,
		// In flight: the batches in hand, and the failed ones waiting for
		// their backoff. Past it the server stops delivering until some are
		// acknowledged, which bounds what a store outage piles up.
		MaxAckPending: 50 * s.cfg.BatchSize,
	})
	if err != nil {
		return nil, fmt.Errorf("create or update consumer %s on stream %s: %w", consumerName, s.cfg.Stream, err)
	}
	s.cons = cons
	return cons, nil
}

// forget drops the stream and consumer handles: the next use looks them up,
// and creates them if they are gone.
func (s *Scheduler) forget() {
	s.mu.Lock()
	s.stream, s.cons = nil, nil
	s.mu.Unlock()
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
