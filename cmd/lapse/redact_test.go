package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// Every URL lapse serve shows — the store, the timers (standalone Redis,
// Redis Cluster and Sentinel) and the gateway — is shown without its password, in the
// start-up log and in the errors of a refused start.
func TestServeShowsNoPassword(t *testing.T) {
	t.Parallel()
	const (
		storePW, redisPW, clusterPW, gatewayPW = "store-pw-3141", "redis-pw-2718", "cluster-pw-1618", "gateway-pw-1414"
		sentinelPW                             = "sentinel-pw-1732"
	)
	secrets := []string{storePW, redisPW, clusterPW, gatewayPW, sentinelPW}
	noSecret := func(t *testing.T, out string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("the output shows the password %q:\n%s", s, out)
			}
		}
	}
	// Nothing listens on these: the timers and the gateway are not dialled
	// before the service serves, and their failures later name no URL.
	deadRedis, deadGateway := freePort(t), freePort(t)
	for _, timers := range []string{
		"redis://:" + redisPW + "@" + deadRedis + "/0",
		"redis-cluster://default:" + clusterPW + "@" + deadRedis + "," + freePort(t),
		"redis-sentinel://:" + redisPW + "@" + deadRedis + "," + freePort(t) + "/0?master=orders&sentinel_password=" + sentinelPW,
	} {
		t.Run(strings.Split(timers, ":")[0], func(t *testing.T) {
			t.Parallel()
			s := startServe(t, nil, "--store", "sqlite://"+filepath.Join(t.TempDir(), "x.db"), "--timers", timers,
				"--gateway", "http://lapse:"+gatewayPW+"@"+deadGateway)
			s.stop()
			logs := s.logs.String()
			noSecret(t, logs)
			start := logs[strings.Index(logs, `msg="lapse serving"`):]
			start = start[:strings.IndexByte(start, '\n')]
			start = strings.ReplaceAll(start, `"`, "") // slog quotes a value with '=' in it (a URL's query)
			for _, want := range []string{"timers=" + strings.Split(timers, ":")[0] + "://", "gateway=http://lapse:xxxxx@" + deadGateway} {
				if !strings.Contains(start, want) {
					t.Errorf("the start-up line does not show %q:\n%s", want, start)
				}
			}
			if !strings.Contains(start, ":xxxxx@"+deadRedis) {
				t.Errorf("the start-up line does not show the redacted timers URL:\n%s", start)
			}
		})
	}
	t.Run("refused starts", func(t *testing.T) {
		t.Parallel()
		db := "sqlite://" + filepath.Join(t.TempDir(), "x.db")
		for _, args := range [][]string{
			{"serve", "--store", db, "--gateway", "http://lapse:" + gatewayPW + "@bad host"},
			{"serve", "--store", db, "--gateway", "ftp://lapse:" + gatewayPW + "@gateway"},
			{"serve", "--store", db, "--timers", "redis://:" + redisPW + "@host:port/0"},
			{"serve", "--store", db, "--timers", "redis-cluster://:" + clusterPW + "@h1:7000/3"},
			{"serve", "--store", db, "--timers", "redis-sentinel://:" + redisPW + "@h1:26379/0?sentinel_password=" + sentinelPW},
			{"serve", "--store", db, "--timers", "redis-sentinel://:" + redisPW + "@h1:26379/x?master=m&sentinel_password=" + sentinelPW},
			{"serve", "--store", "oracle://lapse:" + storePW + "@db"},
			{"migrate", "--store", "oracle://lapse:" + storePW + "@db"},
			{"reconcile", "--store", db, "--gateway", "http://lapse:" + gatewayPW + "@bad host"},
			{"bench", "--target", "ftp://lapse:" + gatewayPW + "@server"},
		} {
			out, code := lapseCmd(t, nil, args...)
			if code == 0 {
				t.Errorf("lapse %v: exit 0", args)
			}
			noSecret(t, out)
		}
	})
}
