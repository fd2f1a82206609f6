package redis

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
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
//	redis-sentinel://[:password@]h1:26379,h2:26379[/db]?master=NAME[&…]
//	                                                            a master and its replicas, found through Sentinel
//	rediss-sentinel://…                                         the same over TLS
//
// Options are go-redis's (dial_timeout=3s, pool_size=20, …; see
// goredis.ParseURL and goredis.ParseClusterURL). A cluster URL names one or
// more seed nodes and no database (a Cluster has only database 0). A
// sentinel URL is read by ParseSentinelURL. The caller closes the client.
func ParseURL(u string) (goredis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return nil, errors.New("redis: URL without a scheme: want redis://, rediss://, unix://, redis-cluster://, rediss-cluster://, redis-sentinel:// or rediss-sentinel://")
	}
	switch scheme {
	case "redis", "rediss", "unix":
		opt, err := goredis.ParseURL(u)
		if err != nil {
			return nil, urlError(err)
		}
		return goredis.NewClient(opt), nil
	case "redis-sentinel", "rediss-sentinel":
		opt, err := ParseSentinelURL(u)
		if err != nil {
			return nil, err
		}
		return goredis.NewFailoverClient(opt), nil
	case "redis-cluster", "rediss-cluster":
	default:
		return nil, fmt.Errorf("redis: URL scheme %q: want redis, rediss, unix, redis-cluster, rediss-cluster, redis-sentinel or rediss-sentinel", scheme)
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

// ParseSentinelURL returns the options of a failover client (a client of
// the master that Sentinel names, following it through failovers) for
//
//	redis-sentinel://[[user]:password@]h1:26379,h2:26379,…[/db]?master=NAME[&option=value…]
//	rediss-sentinel://…  (TLS to the sentinels and the master)
//
// The hosts are sentinels (a few suffice: the client asks them for the
// others); master is the name they monitor the master by (their "sentinel
// monitor NAME …"); db defaults to 0. The password of the URL's userinfo is
// the master's (and its replicas'): Redis's requirepass, or with a user an
// ACL user's. Sentinels that require a password of their own (their
// requirepass) take it from sentinel_password= (and sentinel_username= for an
// ACL user); sentinels without one need neither. The other options are
// go-redis's (dial_timeout=3s, pool_size=20, …; see goredis.ParseFailoverURL),
// except those that would send writes to a replica (replica_only,
// route_by_latency, route_randomly). Errors never show a password.
func ParseSentinelURL(u string) (*goredis.FailoverOptions, error) {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok || (scheme != "redis-sentinel" && scheme != "rediss-sentinel") {
		return nil, errors.New("redis: sentinel URL: want redis-sentinel://[:password@]host:26379,…/db?master=NAME")
	}
	rest, query, _ := strings.Cut(rest, "?")
	var userinfo string
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		userinfo, rest = rest[:i], rest[i+1:]
	}
	hosts, db, _ := strings.Cut(rest, "/")
	if hosts == "" {
		return nil, errors.New("redis: sentinel URL names no sentinel: want redis-sentinel://host:26379,host:26379/db?master=NAME")
	}
	addrs := strings.Split(hosts, ",")
	for _, a := range addrs {
		if h, p, err := net.SplitHostPort(a); err != nil || h == "" || p == "" {
			return nil, fmt.Errorf("redis: sentinel URL: want host:port,host:port,… (every sentinel with its port, usually 26379), got %q", hosts)
		}
	}
	if db == "" {
		db = "0"
	}
	if n, err := strconv.Atoi(db); err != nil || n < 0 || strconv.Itoa(n) != db {
		return nil, fmt.Errorf("redis: sentinel URL: database %q: want a number (0 to the server's databases - 1)", db)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		// Not the error itself: it quotes the bad escape, which may be in a password.
		return nil, errors.New("redis: sentinel URL options: not a valid query (check the percent-encoding)")
	}
	master := q.Get("master")
	if master == "" || strings.ContainsAny(master, " \t") {
		return nil, errors.New("redis: sentinel URL names no master: want ?master=NAME, the name the sentinels monitor it by (sentinel monitor NAME host port quorum)")
	}
	for _, o := range []string{"master_name", "addr", "db", "username", "password"} {
		if q.Has(o) {
			return nil, fmt.Errorf("redis: sentinel URL option %s: give it in the URL itself (?master=, the hosts, /db, user:password@)", o)
		}
	}
	for _, o := range []string{"replica_only", "route_by_latency", "route_randomly"} {
		if q.Has(o) {
			return nil, fmt.Errorf("redis: sentinel URL option %s: lapse writes every command, so it talks to the master only", o)
		}
	}
	// go-redis's own form: the sentinels' credentials in the userinfo, the
	// master's in options, the further sentinels as addr= options.
	g := url.Values{}
	for k, v := range q {
		switch k {
		case "master", "sentinel_username", "sentinel_password":
		default:
			g[k] = v
		}
	}
	g.Set("master_name", master)
	g.Set("db", db)
	for _, a := range addrs[1:] {
		g.Add("addr", a)
	}
	if userinfo != "" {
		user, password, _ := strings.Cut(userinfo, ":")
		if user, err = url.PathUnescape(user); err != nil {
			return nil, errors.New("redis: sentinel URL: the user name is not percent-encoded right")
		}
		if password, err = url.PathUnescape(password); err != nil {
			return nil, errors.New("redis: sentinel URL: the password is not percent-encoded right")
		}
		if user != "" {
			g.Set("username", user)
		}
		if password != "" {
			g.Set("password", password)
		}
	}
	gu := url.URL{Scheme: strings.TrimSuffix(scheme, "-sentinel"), Host: addrs[0], RawQuery: g.Encode()}
	if p := q.Get("sentinel_password"); p != "" {
		gu.User = url.UserPassword(q.Get("sentinel_username"), p)
	} else if q.Get("sentinel_username") != "" {
		return nil, errors.New("redis: sentinel URL: sentinel_username without sentinel_password")
	}
	opt, err := goredis.ParseFailoverURL(gu.String())
	if err != nil {
		return nil, urlError(err)
	}
	return opt, nil
}

// urlError wraps a parse error without the URL, which may hold a password.
func urlError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	return fmt.Errorf("redis: URL: %w", err)
}
