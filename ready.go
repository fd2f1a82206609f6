package lapse

import (
	"context"
	"errors"
	"fmt"
)

// ErrRelayStopped is Ready's error once the outbox relay stopped for good
// (Relay.Run returned an error, such as two sinks of one name): no event
// reaches any sink again until the process restarts, though orders are
// still taken and cancelled. A load balancer or an orchestrator should take
// such an instance out and restart it.
var ErrRelayStopped = errors.New("lapse: the outbox relay stopped")

// Ready returns nil while the service can do its whole job: the store (and,
// with lapse serve, the timer backend behind it) answers and the outbox
// relay runs. Otherwise it says why; an error matching ErrRelayStopped is
// the relay's. It is what GET /readyz answers.
func (s *Service) Ready(ctx context.Context) error {
	if err := s.relayStopped.Load(); err != nil {
		return fmt.Errorf("%w: %w", ErrRelayStopped, *err)
	}
	return s.store.Ping(ctx)
}
