package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

func readyz(t *testing.T, s *server) int {
	t.Helper()
	resp, err := http.Get(s.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// /readyz answers 503 while the timer backend does not answer: such an
// instance takes orders but cannot cancel them on time. The start-up line
// shows the default order timeout the service uses.
func TestReadyzAsksTheTimerBackend(t *testing.T) {
	t.Parallel()
	t.Run("Redis unreachable", func(t *testing.T) {
		t.Parallel()
		s := startServe(t, []string{"LAPSE_DEFAULT_TIMEOUT=2m"}, "--store", "sqlite://"+filepath.Join(t.TempDir(), "x.db"),
			"--timers", "redis://"+freePort(t)+"/0")
		if got := readyz(t, s); got != http.StatusServiceUnavailable {
			t.Errorf("/readyz: %d, want 503", got)
		}
		s.stop()
		if !strings.Contains(s.logs.String(), "default_timeout=2m0s") {
			t.Errorf("the start-up line does not show the default timeout in use:\n%s", s.logs.String())
		}
	})
	t.Run("Redis up", func(t *testing.T) {
		t.Parallel()
		s := startServe(t, nil, "--store", "sqlite://"+filepath.Join(t.TempDir(), "x.db"), "--timers", redisURL(t, 12))
		if got := readyz(t, s); got != http.StatusOK {
			t.Errorf("/readyz: %d, want 200", got)
		}
		s.stop()
	})
	t.Run("in-process timers", func(t *testing.T) {
		t.Parallel()
		s := startServe(t, nil, "--store", "sqlite://"+filepath.Join(t.TempDir(), "x.db"))
		if got := readyz(t, s); got != http.StatusOK {
			t.Errorf("/readyz: %d, want 200", got)
		}
		s.stop()
	})
}
