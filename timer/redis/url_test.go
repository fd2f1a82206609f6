package redis_test

import (
	"slices"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse/redact"
	"github.com/lapsehq/lapse/timer/redis"
)

// A sentinel URL's parts land where go-redis's failover client reads them:
// the userinfo is the master's credentials, sentinel_password the
// sentinels'; what is wrong is said at once, without the password.
func TestParseSentinelURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url       string
		want      goredis.FailoverOptions // MasterName, SentinelAddrs, DB, Username, Password, SentinelUsername, SentinelPassword
		tls       bool
		dialTimed bool
		err       string
	}{
		{url: "redis-sentinel://127.0.0.1:26379,127.0.0.1:26380/2?master=orders",
			want: goredis.FailoverOptions{MasterName: "orders", SentinelAddrs: []string{"127.0.0.1:26379", "127.0.0.1:26380"}, DB: 2}},
		{url: "redis-sentinel://:secret@s1:26379?master=m",
			want: goredis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"s1:26379"}, Password: "secret"}},
		{url: "redis-sentinel://lapse:s%40cret@s1:26379,s2:26379,s3:26379/0?master=m&sentinel_password=sentsecret&dial_timeout=2s",
			want:      goredis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"s1:26379", "s2:26379", "s3:26379"}, Username: "lapse", Password: "s@cret", SentinelPassword: "sentsecret"},
			dialTimed: true},
		{url: "redis-sentinel://s1:26379/?master=m&sentinel_username=watcher&sentinel_password=sentsecret",
			want: goredis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"s1:26379"}, SentinelUsername: "watcher", SentinelPassword: "sentsecret"}},
		{url: "rediss-sentinel://s1:26379?master=m", want: goredis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"s1:26379"}}, tls: true},

		{url: "redis-sentinel://:secret@s1:26379,s2:26379/0", err: "names no master"},
		{url: "redis-sentinel://:secret@s1:26379/0?master=", err: "names no master"},
		{url: "redis-sentinel://:secret@/0?master=m", err: "names no sentinel"},
		{url: "redis-sentinel://?master=m", err: "names no sentinel"},
		{url: "redis-sentinel://:secret@s1:26379,,s2:26379?master=m", err: "want host:port"},
		{url: "redis-sentinel://:secret@s1?master=m", err: "want host:port"},
		{url: "redis-sentinel://:secret@s1:26379/x?master=m", err: `database "x"`},
		{url: "redis-sentinel://:secret@s1:26379/-1?master=m", err: `database "-1"`},
		{url: "redis-sentinel://:secret@s1:26379/0/1?master=m", err: `database "0/1"`},
		{url: "redis-sentinel://:secret@s1:26379?master=m&replica_only=true", err: "replica_only"},
		{url: "redis-sentinel://:secret@s1:26379?master=m&route_randomly=true", err: "route_randomly"},
		{url: "redis-sentinel://:secret@s1:26379?master=m&password=secret", err: "option password"},
		{url: "redis-sentinel://:secret@s1:26379?master=m&no_such_option=1", err: "no_such_option"},
		{url: "redis-sentinel://:secret@s1:26379?master=m&dial_timeout=soon", err: "dial_timeout"},
		{url: "redis-sentinel://s1:26379?master=m&sentinel_username=u", err: "sentinel_username without sentinel_password"},
		{url: "redis-sentinel://s1:26379?master=m&sentinel_password=%zzsecret", err: "not a valid query"},
	} {
		t.Run(redact.URL(tc.url), func(t *testing.T) {
			opt, err := redis.ParseSentinelURL(tc.url)
			if tc.err != "" {
				if err == nil {
					t.Fatalf("no error, want one mentioning %q", tc.err)
				}
				if !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %q, want it to mention %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("error %q shows the password", err)
				}
				// lapse serve reads the URL through ParseURL: the same error.
				if rdb, err2 := redis.ParseURL(tc.url); err2 == nil || err2.Error() != err.Error() {
					if rdb != nil {
						_ = rdb.Close()
					}
					t.Errorf("ParseURL: error %v, want %v", err2, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w := tc.want
			if opt.MasterName != w.MasterName || !slices.Equal(opt.SentinelAddrs, w.SentinelAddrs) || opt.DB != w.DB ||
				opt.Username != w.Username || opt.Password != w.Password ||
				opt.SentinelUsername != w.SentinelUsername || opt.SentinelPassword != w.SentinelPassword {
				t.Errorf("options master %q sentinels %v db %d user %q password %q sentinel user %q password %q,\nwant master %q sentinels %v db %d user %q password %q sentinel user %q password %q",
					opt.MasterName, opt.SentinelAddrs, opt.DB, opt.Username, opt.Password, opt.SentinelUsername, opt.SentinelPassword,
					w.MasterName, w.SentinelAddrs, w.DB, w.Username, w.Password, w.SentinelUsername, w.SentinelPassword)
			}
			if (opt.TLSConfig != nil) != tc.tls {
				t.Errorf("TLS %v, want %v", opt.TLSConfig != nil, tc.tls)
			}
			if tc.dialTimed && opt.DialTimeout == 0 {
				t.Error("dial_timeout not applied")
			}
			rdb, err := redis.ParseURL(tc.url)
			if err != nil {
				t.Fatalf("ParseURL: %v", err)
			}
			defer rdb.Close() // never dialled: the client connects on first use
			if _, ok := rdb.(*goredis.Client); !ok {
				t.Errorf("ParseURL: client %T, want a failover *goredis.Client", rdb)
			}
		})
	}
}

// The URL as lapse logs it shows neither password.
func TestSentinelURLRedacted(t *testing.T) {
	t.Parallel()
	u := "redis-sentinel://:mastersecret@s1:26379,s2:26379/0?master=m&sentinel_password=sentsecret"
	got := redact.URL(u)
	if strings.Contains(got, "secret") {
		t.Errorf("redact.URL(%q) = %q: a password shows", u, got)
	}
	if !strings.Contains(got, "s1:26379,s2:26379/0?master=m") {
		t.Errorf("redact.URL(%q) = %q: the hosts or the master are hidden", u, got)
	}
}
