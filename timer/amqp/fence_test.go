package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqptimer "github.com/lapsehq/lapse/timer/amqp"
)

// Instances of one deployment share a prefix; a second deployment on it is
// refused with an error that names the prefix and the deployment owning it.
func TestClaimFencesAPrefixByDeployment(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t, amqptimer.DefaultLevels)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a1 := mustOpen(t, amqptimer.Config{Prefix: prefix})
	a2 := mustOpen(t, amqptimer.Config{Prefix: prefix})
	b := mustOpen(t, amqptimer.Config{Prefix: prefix})
	if err := a1.Claim(ctx, "deployment-a"); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if err := a2.Claim(ctx, "deployment-a"); err != nil {
		t.Fatalf("a second instance of the same deployment: %v", err)
	}
	err := b.Claim(ctx, "deployment-b")
	if !errors.Is(err, amqptimer.ErrPrefixTaken) || !strings.Contains(err.Error(), prefix) || !strings.Contains(err.Error(), "deployment-a") {
		t.Fatalf("another deployment's claim: %v, want ErrPrefixTaken naming %s and deployment-a", err, prefix)
	}
	// The refusal changed nothing: the owner is still a's.
	if err := a1.Claim(ctx, "deployment-a"); err != nil {
		t.Fatalf("the owner's claim after a refusal: %v", err)
	}
}

// Two deployments starting at once on a new prefix: the claims are
// serialized, so every instance of one deployment is accepted and every
// instance of the other refused, never both.
func TestClaimRaceOnANewPrefix(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t, amqptimer.DefaultLevels)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const perDeployment = 3
	type result struct {
		deployment string
		err        error
	}
	var schedulers []*amqptimer.Scheduler
	for range 2 * perDeployment {
		schedulers = append(schedulers, mustOpen(t, amqptimer.Config{Prefix: prefix}))
	}
	results := make([]result, len(schedulers))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, s := range schedulers {
		dep := fmt.Sprintf("deployment-%d", i%2)
		wg.Go(func() {
			<-start
			results[i] = result{dep, s.Claim(ctx, dep)}
		})
	}
	close(start)
	wg.Wait()
	accepted := map[string]int{}
	for _, r := range results {
		switch {
		case r.err == nil:
			accepted[r.deployment]++
		case !errors.Is(r.err, amqptimer.ErrPrefixTaken):
			t.Fatalf("claim by %s: %v", r.deployment, r.err)
		}
	}
	if len(accepted) != 1 {
		t.Fatalf("accepted claims by deployment: %v, want every instance of exactly one", accepted)
	}
	for _, n := range accepted {
		if n != perDeployment {
			t.Fatalf("accepted claims by deployment: %v, want all %d instances of the winner", accepted, perDeployment)
		}
	}
}
