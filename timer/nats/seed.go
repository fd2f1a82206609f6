package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse/timer"
)

const (
	// markerOK is the seed marker's body once a complete seed covered the
	// stream. While an instance seeds, the marker is "seeding <token>".
	markerOK      = "ok"
	markerSeeding = "seeding "
	// markerFailed is written by an instance whose seed failed, so that
	// the next check, anywhere, seeds at once rather than after seedLockTTL.
	markerFailed = "failed"
	// seedLockTTL is how long a seed marker outlives an instance that died
	// while seeding (by the server's timestamp on the marker); the seeding
	// instance writes it again every third of that.
	seedLockTTL = 15 * time.Second
)

// errTaken is returned by putMarker when the marker is no longer the one
// the caller read or wrote: another instance wrote it, or the stream lost it.
var errTaken = errors.New("the seed marker changed")

// watch checks the seed marker every LossCheck until ctx ends, and seeds
// when it is missing. It runs beside the consumer: a seed blocks neither
// Schedule nor deliveries.
func (s *Scheduler) watch(ctx context.Context) {
	timer.Watch(ctx, s.cfg.LossCheck, nil, func(ctx context.Context) error {
		if seed := s.seedFunc(); seed != nil {
			return s.checkSeeded(ctx, seed)
		}
		return nil
	}, func(err error, _ int, next time.Duration) {
		s.log.Error("nats timers: data-loss check or seed failed; retrying", "in", next, "err", err)
	})
}

// checkSeeded seeds the timers from the store if the seed marker is missing
// (or failed, or abandoned) and no other instance is seeding.
func (s *Scheduler) checkSeeded(ctx context.Context, seed func(context.Context) error) error {
	st, err := s.ensureStream(ctx)
	if err != nil {
		return err
	}
	m, err := st.GetLastMsgForSubject(ctx, s.subj.seeded)
	var seq uint64
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case errors.Is(err, jetstream.ErrStreamNotFound):
		s.forget() // deleted: the next check creates it, finds no marker and seeds
		return fmt.Errorf("read the seed marker: %w", err)
	case err != nil:
		return fmt.Errorf("read the seed marker: %w", err)
	default:
		seq = m.Sequence
		body := string(m.Data)
		if body == markerOK {
			return nil
		}
		if strings.HasPrefix(body, markerSeeding) && time.Since(m.Time) < seedLockTTL {
			s.log.Debug("nats timers: seed marker missing; another instance is seeding")
			return nil
		}
	}
	token := s.id + "-" + randomID()
	seq, err = s.putMarker(ctx, markerSeeding+token, seq)
	if errors.Is(err, errTaken) {
		return nil // another instance took the seed first
	}
	if err != nil {
		return err
	}
	s.log.Warn("nats timers: seed marker missing (a new stream, or one that lost its data: deleted, purged); " +
		"seeding the timers from the store")
	start := time.Now()
	seq, fenced, err := s.runSeed(ctx, seed, token, seq)
	if err != nil {
		if _, perr := s.putMarker(context.WithoutCancel(ctx), markerFailed, seq); perr != nil && !errors.Is(perr, errTaken) {
			s.log.Warn("nats timers: mark the seed failed; another instance seeds after the marker ages", "in", seedLockTTL, "err", perr)
		}
		return fmt.Errorf("seed from the store: %w", err)
	}
	if !fenced {
		_, err = s.putMarker(ctx, markerOK, seq)
	}
	if fenced || errors.Is(err, errTaken) {
		s.log.Warn("nats timers: seed marker changed during the seed (the stream lost data, or another instance " +
			"took the seed over); seeding again")
		return nil
	}
	if err != nil {
		return err
	}
	s.log.Info("nats timers: seeded from the store", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// runSeed calls seed, writing the marker "seeding <token>" again every
// third of seedLockTTL while it runs. It returns the marker's last sequence,
// and fenced if the marker was found changed meanwhile: then the seed does
// not count, since the stream may have lost what it scheduled.
func (s *Scheduler) runSeed(ctx context.Context, seed func(context.Context) error, token string, seq uint64) (uint64, bool, error) {
	var (
		last   atomic.Uint64
		fenced atomic.Bool
	)
	last.Store(seq)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(seedLockTTL / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				if fenced.Load() {
					continue
				}
				n, err := s.putMarker(ctx, markerSeeding+token, last.Load())
				switch {
				case errors.Is(err, errTaken):
					fenced.Store(true)
				case err != nil:
					if ctx.Err() == nil {
						s.log.Warn("nats timers: renew the seed marker failed; another instance may seed too (harmless)", "err", err)
					}
				default:
					last.Store(n)
				}
			}
		}
	})
	err := seed(ctx)
	close(done)
	wg.Wait()
	return last.Load(), fenced.Load(), err
}

// putMarker writes body to the seed marker if the marker's last sequence
// is still seq (0: no marker), and returns the new sequence; errTaken if it
// is not.
func (s *Scheduler) putMarker(ctx context.Context, body string, seq uint64) (uint64, error) {
	m := natsgo.NewMsg(s.subj.seeded)
	m.Data = []byte(body)
	ack, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectStream(s.cfg.Stream), jetstream.WithExpectLastSequencePerSubject(seq))
	if err != nil {
		if jerr, ok := errors.AsType[jetstream.JetStreamError](err); ok && jerr.APIError() != nil {
			switch jerr.APIError().ErrorCode {
			case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
				return 0, errTaken
			}
		}
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			s.forget()
			return 0, errTaken // the stream is gone, and the marker with it
		}
		return 0, fmt.Errorf("write the seed marker: %w", err)
	}
	return ack.Sequence, nil
}
