package nats_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	lnats "github.com/lapsehq/lapse/outbox/nats"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	good := []struct {
		url   string
		want  lnats.Config
		check func(lnats.Config) bool
	}{
		{url: "nats://localhost:4222/lapse.events", want: lnats.Config{Servers: []string{"localhost:4222"}, Prefix: "lapse.events"}},
		{url: "nats://localhost", want: lnats.Config{Servers: []string{"localhost:4222"}, Prefix: "lapse.events"}},
		{url: "nats://n1,N2:4223/", want: lnats.Config{Servers: []string{"n1:4222", "n2:4223"}, Prefix: "lapse.events"}},
		{url: "nats://u:p%40ss@h/shop.events?stream=SHOP&dedupe_window=10m&timeout=5s",
			want: lnats.Config{Servers: []string{"h:4222"}, Prefix: "shop.events", User: "u", Password: "p@ss", Stream: "SHOP",
				DedupeWindow: 10 * time.Minute, PublishTimeout: 5 * time.Second}},
		{url: "nats://s3cr3tt0ken@h/x", want: lnats.Config{Servers: []string{"h:4222"}, Prefix: "x", Token: "s3cr3tt0ken"}},
	}
	for _, g := range good {
		cfg, err := lnats.ParseURL(g.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", g.url, err)
			continue
		}
		w := g.want
		if !slices.Equal(cfg.Servers, w.Servers) || cfg.Prefix != w.Prefix || cfg.User != w.User || cfg.Password != w.Password ||
			cfg.Token != w.Token || cfg.Stream != w.Stream || cfg.DedupeWindow != w.DedupeWindow || cfg.PublishTimeout != w.PublishTimeout {
			t.Errorf("ParseURL(%q) = %+v, want %+v", g.url, cfg, w)
		}
	}

	bad := map[string]string{
		"tls://h/x":                          "nats://",
		"nats:///x":                          "no server",
		"nats://h/a..b":                      "empty token",
		"nats://h/a.*":                       "wildcard",
		"nats://h/a.>":                       "wildcard",
		"nats://h/x?stream=A.B":              "stream",
		"nats://h/x?dedupe_window=0s":        "positive duration",
		"nats://h/x?timeout=soon":            "positive duration",
		"nats://h/x?max_age=1h":              `unknown parameter "max_age"`,
		"nats://h:0/x":                       "port",
		"nats://:secret@h/x":                 "empty user",
		"nats://h/x#f":                       "fragment",
		"nats://h/x?stream=A&stream=B":       "2 times",
		"nats://secret@h/x?dedupe_window=-1": "positive duration",
	}
	for u, want := range bad {
		_, err := lnats.ParseURL(u)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURL(%q): %v, want an error mentioning %q", u, err, want)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseURL(%q): the error %q quotes the credentials", u, err)
		}
	}
}

func TestStreamName(t *testing.T) {
	t.Parallel()
	for prefix, want := range map[string]string{"lapse.events": "LAPSE_EVENTS", "shop-eu.orders": "SHOP-EU_ORDERS", "a/b": "A_B"} {
		if got := lnats.StreamName(prefix); got != want {
			t.Errorf("StreamName(%q) = %q, want %q", prefix, got, want)
		}
	}
}

// TestNameHoldsNoCredentials: the name is the servers and prefix only.
func TestNameHoldsNoCredentials(t *testing.T) {
	t.Parallel()
	js := admin(t)
	prefix := newPrefix(t, js)
	cfg, err := lnats.ParseURL("nats://" + serverAddr(t) + "/" + prefix)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Token = "t0ken-that-must-not-show" // the test server ignores a token it does not ask for
	s := newSink(t, cfg)
	if want := "nats://" + serverAddr(t) + "/" + prefix; s.Name() != want {
		t.Errorf("name %q, want %q", s.Name(), want)
	}
	if strings.Contains(s.Name(), "t0ken") {
		t.Errorf("name %q shows the token", s.Name())
	}
}
