package rabbitmq

import (
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url, dial, exchange, name string
	}{
		{"amqp://guest:guest@127.0.0.1:5672/", "amqp://guest:guest@127.0.0.1:5672/", DefaultExchange, "amqp://127.0.0.1:5672/%2F/lapse.events"},
		{"amqp://u:p@rabbit/orders?exchange=shop.events&heartbeat=5", "amqp://u:p@rabbit/orders?heartbeat=5", "shop.events", "amqp://rabbit:5672/orders/shop.events"},
		{"amqps://u:p%40ss@rabbit.example:5671/%2F?exchange=a:b-c_d&cacertfile=/ca.pem", "amqps://u:p%40ss@rabbit.example:5671/%2F?cacertfile=%2Fca.pem", "a:b-c_d", "amqps://rabbit.example:5671/%2F/a:b-c_d"},
		{"amqps://rabbit.example", "amqps://rabbit.example", DefaultExchange, "amqps://rabbit.example:5671/%2F/lapse.events"},
	} {
		dial, exchange, name, err := parseURL(tc.url)
		if err != nil || dial != tc.dial || exchange != tc.exchange || name != tc.name {
			t.Errorf("parseURL(%q) = %q, %q, %q, %v; want %q, %q, %q", tc.url, dial, exchange, name, err, tc.dial, tc.exchange, tc.name)
		}
	}
	for _, tc := range []struct{ url, want string }{
		{"http://u:sEcReT@rabbit/", `scheme "http"`},
		{"amqp://u:sEcReT@rabbit/?exchange=x&exhange=y", `unknown query parameter "exhange"`},
		{"amqp://u:sEcReT@rabbit/?exchange=a&exchange=b", "exchange given 2 times"},
		{"amqp://u:sEcReT@rabbit/?exchange=", "empty"},
		{"amqp://u:sEcReT@rabbit/?exchange=amq.topic", "reserved"},
		{"amqp://u:sEcReT@rabbit/?exchange=a%2Fb", `character '/'`},
		{"amqp://u:sEcReT@rabbit/?exchange=" + strings.Repeat("x", 256), "255"},
		{"amqp://u:sEc%ZZReT@rabbit/", "percent-encoded"},
		{"amqp://u:sEcReT@rabbit/?heartbeat=many", "heartbeat"},
	} {
		_, _, _, err := parseURL(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "sEc") {
			t.Errorf("parseURL(%q): %v; want an error with %q, without the password", tc.url, err, tc.want)
		}
	}
}
