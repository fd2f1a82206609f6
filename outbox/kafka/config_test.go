package kafka_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/outbox/kafka"
	"github.com/lapsehq/lapse/outbox/sinktest"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	good := []struct {
		url     string
		brokers []string
		topic   string
		check   func(kafka.Config) bool
	}{
		{"kafka://localhost:9092/events", []string{"localhost:9092"}, "events", nil},
		{"kafka://k1,K2:9093/lapse.events", []string{"k1:9092", "k2:9093"}, "lapse.events", nil},
		{"kafka://[::1]:9092,[::1]/t", []string{"[::1]:9092", "[::1]:9092"}, "t", nil},
		{"kafka://u:p%40ss@h/t?sasl=SCRAM-SHA-512&tls=true", []string{"h:9092"}, "t",
			func(c kafka.Config) bool { return c.SASL != nil && c.SASL.Name() == "SCRAM-SHA-512" && c.TLS != nil }},
		{"kafka://u:p@h/t?sasl=plain", []string{"h:9092"}, "t",
			func(c kafka.Config) bool { return c.SASL.Name() == "PLAIN" && c.TLS == nil }},
		{"kafka://h/t?timeout=5s&client_id=lapse-eu", []string{"h:9092"}, "t",
			func(c kafka.Config) bool { return c.PublishTimeout == 5*time.Second && c.ClientID == "lapse-eu" }},
	}
	for _, g := range good {
		cfg, err := kafka.ParseURL(g.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", g.url, err)
			continue
		}
		if !slices.Equal(cfg.Brokers, g.brokers) || cfg.Topic != g.topic || (g.check != nil && !g.check(cfg)) {
			t.Errorf("ParseURL(%q) = %+v, want brokers %v, topic %s", g.url, cfg, g.brokers, g.topic)
		}
	}

	bad := map[string]string{
		"http://h/t":                         "kafka://",
		"kafka:///t":                         "no broker",
		"kafka://h":                          "no topic",
		"kafka://h/":                         "no topic",
		"kafka://h/a/b":                      "letters, digits",
		"kafka://h/t?acks=1":                 `unknown parameter "acks"`,
		"kafka://h/t?timeout=-1s":            "positive duration",
		"kafka://h:99999/t":                  "port",
		"kafka://h,,k/t":                     "empty broker",
		"kafka://u:secret@h/t":               "no ?sasl=",
		"kafka://h/t?sasl=plain":             "needs a user",
		"kafka://u:secret@h/t?sasl=gssapi":   "want plain",
		"kafka://h/t?tls=maybe":              "true or false",
		"kafka://h/t?tls_ca=/no/such/ca.pem": "tls_ca",
		"kafka://h/t#frag":                   "fragment",
		"kafka://h/t?timeout=1s&timeout=2s":  "2 times",
	}
	for u, want := range bad {
		_, err := kafka.ParseURL(u)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURL(%q): %v, want an error mentioning %q", u, err, want)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseURL(%q): the error %q quotes the password", u, err)
		}
	}
}

// TestSASL: credentials in the URL authenticate with SCRAM; the name does
// not show them; a wrong password fails at New.
func TestSASL(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "lapse", "s3cret"))
	hosts := strings.Join(c.ListenAddrs(), ",")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	cfg, err := kafka.ParseURL("kafka://lapse:s3cret@" + hosts + "/" + topic + "?sasl=scram-sha-256")
	if err != nil {
		t.Fatal(err)
	}
	s, err := kafka.New(ctx, cfg)
	if err != nil {
		t.Fatalf("New with the right password: %v", err)
	}
	defer s.Close()
	if strings.Contains(s.Name(), "s3cret") || strings.Contains(s.Name(), "lapse@") {
		t.Errorf("name %q shows the credentials", s.Name())
	}
	for i, err := range s.Publish(ctx, sinktest.Events("s", 2, order.EventCreated)) {
		if err != nil {
			t.Errorf("event %d: %v", i, err)
		}
	}

	cfg, err = kafka.ParseURL("kafka://lapse:wrong@" + hosts + "/" + topic + "?sasl=scram-sha-256")
	if err != nil {
		t.Fatal(err)
	}
	// kfake ends the connection on a failed SCRAM exchange (Kafka answers
	// SASL_AUTHENTICATION_FAILED first); either way New must say that the
	// connection failed, not only that time ran out.
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	s2, err := kafka.New(short, cfg)
	if err == nil {
		s2.Close()
		t.Fatal("New with a wrong password succeeded")
	}
	if !strings.Contains(err.Error(), "last connection error") {
		t.Errorf("New with a wrong password: %v, want it to give the last connection error", err)
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Errorf("the error %q shows the password", err)
	}

}

func TestNameIsStable(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	s1 := newSinkURL(t, "kafka://"+strings.Join(addrs, ",")+"/"+topic)
	slices.Reverse(addrs)
	s2 := newSinkURL(t, "kafka://"+strings.Join(addrs, ",")+"/"+topic+"?timeout=3s")
	if s1.Name() != s2.Name() {
		t.Errorf("names %q and %q for the same brokers and topic", s1.Name(), s2.Name())
	}
	if !strings.HasPrefix(s1.Name(), "kafka://127.0.0.1:") || !strings.HasSuffix(s1.Name(), "/"+topic) {
		t.Errorf("name %q, want kafka://<brokers>/%s", s1.Name(), topic)
	}
}

func newSinkURL(t *testing.T, u string) *kafka.Sink {
	t.Helper()
	cfg, err := kafka.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Format = outbox.FormatJSON
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := kafka.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
