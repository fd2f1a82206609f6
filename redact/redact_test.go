package redact_test

import (
	"strings"
	"testing"

	"github.com/lapsehq/lapse/redact"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		// Nothing to hide: unchanged, byte for byte.
		{"", ""},
		{"memory", "memory"},
		{"sqlite://lapse.db", "sqlite://lapse.db"},
		{"sqlite:///var/lib/my dir/lapse.db", "sqlite:///var/lib/my dir/lapse.db"},
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"},
		{"http://127.0.0.1:8090", "http://127.0.0.1:8090"},
		// A password in the userinfo.
		{"postgres://u:pw@host:5432/db", "postgres://u:xxxxx@host:5432/db"},
		{"redis://:pw@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"rediss://default:pw@redis.example:6380/2?dial_timeout=3s", "rediss://default:xxxxx@redis.example:6380/2?dial_timeout=3s"},
		{"redis-cluster://:pw@h1:7000,h2:7001,h3:7002", "redis-cluster://:xxxxx@h1:7000,h2:7001,h3:7002"},
		{"unix://:pw@/run/redis.sock?db=1", "unix://:xxxxx@/run/redis.sock?db=1"},
		{"http://user:pw@gateway:8090/lapse", "http://user:xxxxx@gateway:8090/lapse"},
		{"mysql://root:p%40ss@127.0.0.1:3306/test", "mysql://root:xxxxx@127.0.0.1:3306/test"},
		// Passwords written without escaping: '@', '/', '?' or ':' in them.
		{"postgres://u:p@ss@host/db", "postgres://u:xxxxx@host/db"},
		{"redis://:p/w@host:6379/0", "redis://:xxxxx@host:6379/0"},
		{"redis://:a:b@host", "redis://:xxxxx@host"},
		// Secrets in the query string.
		{"postgres://u@host/db?password=pw&sslmode=require", "postgres://u@host/db?password=xxxxx&sslmode=require"},
		{"postgres://host/db?sslmode=require&sslpassword=pw", "postgres://host/db?sslmode=require&sslpassword=xxxxx"},
		{"http://gw/x?token=pw&Client_Secret=pw2&api_key=pw3", "http://gw/x?token=xxxxx&Client_Secret=xxxxx&api_key=xxxxx"},
		// Not a URL at all, but a DSN with a password.
		{"root:pw@tcp(127.0.0.1:3306)/test", "root:xxxxx@tcp(127.0.0.1:3306)/test"},
	} {
		if got := redact.URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzURL: whatever the input, a password placed in the userinfo or the
// query never survives.
func FuzzURL(f *testing.F) {
	f.Add("redis", "host:6379/0", "user")
	f.Add("http", "gw/x?y=1", "")
	f.Fuzz(func(t *testing.T, scheme, rest, user string) {
		const pw = "hunter2-SECRET"
		for _, u := range []string{
			scheme + "://" + user + ":" + pw + "@" + rest,
			scheme + "://" + rest + "?password=" + pw,
		} {
			if got := redact.URL(u); strings.Contains(got, pw) {
				t.Fatalf("URL(%q) = %q: the password survived", u, got)
			}
		}
	})
}
