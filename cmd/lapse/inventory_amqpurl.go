package main

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/lapsehq/lapse/inventory"
)

// inventoryAMQPURL reads the AMQP URL of `lapse serve --inventory` and
// `lapse inventory --amqp`: the broker's URL, with one parameter of the
// stock transport's own, ?prefix=NAME (inventory.AMQPPrefix: the command
// exchange NAME, its queue NAME.commands, the dead letters NAME.dead;
// default lapse.stock), and one of the inventory's, ?prefetch=N
// (inventory.AMQPPrefetch: how many commands it applies at once, default
// 32; lapse's side ignores it). Both sides must be given the same prefix; a
// different one is a separate deployment on the same broker (tests use one
// each). The parameters are taken out of the URL returned; the connection's
// own parameters (heartbeat, TLS files, …) stay in it. Errors never show
// the URL's password.
func inventoryAMQPURL(raw string) (broker string, opts []inventory.AMQPOption, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", nil, errors.New("malformed URL")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", nil, errors.New("malformed URL query")
	}
	if vs, ok := q["prefix"]; ok {
		if len(vs) != 1 || vs[0] == "" || strings.HasPrefix(vs[0], "amq.") || len(vs[0]) > 200 {
			return "", nil, fmt.Errorf("prefix %q: want one name of 1 to 200 characters, not starting with \"amq.\"", strings.Join(vs, ","))
		}
		opts = append(opts, inventory.AMQPPrefix(vs[0]))
		q.Del("prefix")
		u.RawQuery = q.Encode()
	}
	if vs, ok := q["prefetch"]; ok {
		n, err := strconv.Atoi(strings.Join(vs, ","))
		if err != nil || n < 1 || n > 65535 {
			return "", nil, fmt.Errorf("prefetch %q: want one number from 1 to 65535", strings.Join(vs, ","))
		}
		opts = append(opts, inventory.AMQPPrefetch(n))
		q.Del("prefetch")
		u.RawQuery = q.Encode()
	}
	return u.String(), opts, nil
}
