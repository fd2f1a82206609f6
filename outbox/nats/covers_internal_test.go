package nats

import "testing"

func TestCovers(t *testing.T) {
	for _, c := range []struct {
		filter, sub string
		want        bool
	}{
		{"lapse.events.>", "lapse.events.>", true},
		{"lapse.>", "lapse.events.>", true},
		{">", "lapse.events.>", true},
		{"lapse.*.>", "lapse.events.>", true},
		{"*.events.>", "lapse.events.>", true},
		{"lapse.events.*", "lapse.events.>", false}, // order.cancelled has two tokens
		{"lapse.events.order.>", "lapse.events.>", false},
		{"lapse.events", "lapse.events.>", false},
		{"other.events.>", "lapse.events.>", false},
		{"lapse.events.>", "lapse.events.order.created", true},
		{"lapse.events.*.*", "lapse.events.order.created", true},
		{"lapse.events.*", "lapse.events.order.created", false},
	} {
		if got := covers(c.filter, c.sub); got != c.want {
			t.Errorf("covers(%q, %q) = %v, want %v", c.filter, c.sub, got, c.want)
		}
	}
}
