package redis

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// ParseURL returns a client for a Redis URL:
//
//	redis://[user:password@]host:6379[/db][?option=value…]      standalone Redis
//	rediss://…                                                  the same over TLS
//	unix://[user:password@]/path/to/redis.sock[?db=0]            a Unix socket
//	redis-cluster://[user:password@]h1:7000,h2:7001,h3:7002[?…]  Redis Cluster
//	rediss-cluster://…                                          Redis Cluster over TLS
//
// Options are go-redis's (dial_timeout=3s, pool_size=20, …; see
// goredis.ParseURL and goredis.ParseClusterURL). A cluster URL names one or
// more seed nodes and no database (a Cluster has only database 0). The caller
// closes the client.
func ParseURL(u string) (goredis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return nil, errors.New("redis: URL without a scheme: want redis://, rediss://, unix://, redis-cluster:// or rediss-cluster://")
	}
	switch scheme {
	case "redis", "rediss", "unix":
		opt, err := goredis.ParseURL(u)
		if err != nil {
			return nil, urlError(err)
		}
		return goredis.NewClient(opt), nil
	case "redis-cluster", "rediss-cluster":
	default:
		return nil, fmt.Errorf("redis: URL scheme %q: want redis, rediss, unix, redis-cluster or rediss-cluster", scheme)
	}
	rest, query, _ := strings.Cut(rest, "?")
	var userinfo string
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		userinfo, rest = rest[:i+1], rest[i+1:]
	}
	hosts, db, _ := strings.Cut(rest, "/")
	if db != "" && db != "0" {
		return nil, fmt.Errorf("redis: cluster URL names database %q: a Redis Cluster has only database 0", db)
	}
	addrs := strings.Split(hosts, ",")
	for _, a := range addrs {
		if a == "" || strings.ContainsAny(a, " \t") {
			return nil, fmt.Errorf("redis: cluster URL: want host:port,host:port,…, got %q", hosts)
		}
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("redis: cluster URL options: %w", err)
	}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	base := strings.TrimSuffix(scheme, "-cluster") + "://" + userinfo + addrs[0]
	if len(q) > 0 {
		base += "?" + q.Encode()
	}
	opt, err := goredis.ParseClusterURL(base)
	if err != nil {
		return nil, urlError(err)
	}
	return goredis.NewClusterClient(opt), nil
}

// urlError wraps a parse error without the URL, which may hold a password.
func urlError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	return fmt.Errorf("redis: URL: %w", err)
}
