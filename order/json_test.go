package order_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
)

// A command's JSON carries next_at only while it is PENDING, done_at and
// dead_at only once set, and reads back to the same command.
func TestCommandJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	cases := []struct {
		name     string
		c        order.Command
		has, not []string
	}{
		{"pending", order.Command{ID: "cmd_a", OrderID: "o1", CancelAfter: at, Status: order.TaskPending, Attempts: 2,
			LastError: "503", CreatedAt: at, NextAt: at.Add(time.Second)},
			[]string{`"next_at":"2030-01-02T03:04:06.006Z"`, `"last_error":"503"`, `"cancel_after":"2030-01-02T03:04:05.006Z"`},
			[]string{"done_at", "dead_at", "result"}},
		{"done", order.Command{ID: "cmd_b", OrderID: "o2", CancelAfter: at, Status: order.TaskDone, Attempts: 1,
			Result: "cancelled", CreatedAt: at, NextAt: at, DoneAt: at.Add(time.Millisecond)},
			[]string{`"result":"cancelled"`, `"done_at":"2030-01-02T03:04:05.007Z"`},
			[]string{"next_at", "dead_at", "last_error"}},
		{"dead", order.Command{ID: "cmd_c", OrderID: "o3", CancelAfter: at, Status: order.TaskDead, Attempts: 1,
			Result: "not_found", LastError: "no such order", CreatedAt: at, NextAt: at, DeadAt: at},
			[]string{`"status":"DEAD"`, `"dead_at":`}, []string{"next_at", "done_at"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.c)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.has {
				if !strings.Contains(string(b), s) {
					t.Errorf("%s lacks %s", b, s)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(string(b), `"`+s+`"`) {
					t.Errorf("%s has %s", b, s)
				}
			}
			var back order.Command
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			want := tc.c
			if want.Status != order.TaskPending {
				want.NextAt = time.Time{} // not on the wire once settled
			}
			if back != want {
				t.Errorf("read back %+v, want %+v", back, want)
			}
		})
	}
}

// An order lists its commands only when it has some.
func TestOrderCommandsJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	o := order.Order{ID: "o1", Status: order.Cancelling, CreatedAt: at, ExpiresAt: at, CancelAfter: at}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"commands"`) {
		t.Fatalf("an order without commands: %s", b)
	}
	o.Commands = []order.Command{{ID: "cmd_a", OrderID: "o1", CancelAfter: at, Status: order.TaskPending, CreatedAt: at, NextAt: at}}
	if b, err = json.Marshal(o); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"commands":[{"id":"cmd_a"`) {
		t.Fatalf("an order with a command: %s", b)
	}
	var back order.Order
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Commands) != 1 || back.Commands[0] != o.Commands[0] {
		t.Fatalf("read back %+v, want %+v", back.Commands, o.Commands)
	}
}

// A refund's JSON carries next_at only while it is PENDING, done_at and
// dead_at only once set, manual always, and reads back to the same refund.
func TestRefundJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	cases := []struct {
		name     string
		r        order.Refund
		has, not []string
	}{
		{"pending", order.Refund{PaymentID: "pi_1", OrderID: "o1", AmountCents: 999, Currency: "EUR", Status: order.TaskPending,
			Attempts: 2, LastError: "503", CreatedAt: at, NextAt: at.Add(time.Second)},
			[]string{`"next_at":"2030-01-02T03:04:06.006Z"`, `"last_error":"503"`, `"manual":false`, `"amount_cents":999`},
			[]string{"done_at", "dead_at", "refund_id", "note", "actor"}},
		{"done by the gateway", order.Refund{PaymentID: "pi_2", OrderID: "o2", AmountCents: 1, Currency: "JPY", Status: order.TaskDone,
			Attempts: 1, RefundID: "re_1", CreatedAt: at, NextAt: at, DoneAt: at.Add(time.Millisecond)},
			[]string{`"refund_id":"re_1"`, `"done_at":"2030-01-02T03:04:05.007Z"`}, []string{"next_at", "dead_at", "last_error"}},
		{"marked refunded", order.Refund{PaymentID: "pi_3", OrderID: "o3", AmountCents: 5, Currency: "USD", Status: order.TaskDone,
			Manual: true, Note: "console", Actor: "alice", CreatedAt: at, NextAt: at, DoneAt: at},
			[]string{`"manual":true`, `"note":"console"`, `"actor":"alice"`}, []string{"next_at", "refund_id"}},
		{"dead", order.Refund{PaymentID: "pi_4", OrderID: "o4", AmountCents: 5, Currency: "USD", Status: order.TaskDead,
			Attempts: 9, LastError: "card expired", CreatedAt: at, NextAt: at, DeadAt: at},
			[]string{`"status":"DEAD"`, `"dead_at":`}, []string{"next_at", "done_at"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.r)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.has {
				if !strings.Contains(string(b), s) {
					t.Errorf("%s lacks %s", b, s)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(string(b), `"`+s+`"`) {
					t.Errorf("%s has %s", b, s)
				}
			}
			var back order.Refund
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			want := tc.r
			if want.Status != order.TaskPending {
				want.NextAt = time.Time{} // not on the wire once settled
			}
			if back != want {
				t.Errorf("read back %+v, want %+v", back, want)
			}
		})
	}
}
