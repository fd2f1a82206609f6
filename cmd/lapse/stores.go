package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/mysql"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/timer/memory"
)

// openStore opens the store a URL names; it does not migrate.
func openStore(ctx context.Context, url string) (store.Store, error) {
	scheme, _, _ := strings.Cut(url, "://")
	switch scheme {
	case "sqlite":
		path, err := sqlite.ParseURL(url)
		if err != nil {
			return nil, err
		}
		return sqlite.Open(ctx, sqlite.Config{Path: path})
	case "postgres", "postgresql":
		return postgres.Open(ctx, postgres.Config{URL: url})
	case "mysql":
		return mysql.Open(ctx, mysql.Config{URL: url})
	default:
		return nil, fmt.Errorf("--store %q: unsupported scheme %q (want sqlite://path, postgres://… or mysql://…)", redactURL(url), scheme)
	}
}

// setTimers configures the timer backend a --timers value names.
func setTimers(cfg *lapse.Config, spec string) error {
	switch spec {
	case "memory":
		cfg.Scheduler = memory.New(memory.Config{})
	case "sql":
		cfg.PollStore = true
	default:
		return fmt.Errorf("--timers %q: unsupported (want memory or sql)", spec)
	}
	return nil
}

// redactURL hides a password in a store URL for logs.
func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return u
	}
	cred := rest[:at]
	if user, _, hasPass := strings.Cut(cred, ":"); hasPass {
		return scheme + "://" + user + ":xxxxx@" + rest[at+1:]
	}
	return u
}
