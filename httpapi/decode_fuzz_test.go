package httpapi

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
)

// createSeeds are bodies of POST /v1/orders worth starting from: valid ones,
// boundaries, and the invalid shapes the API must answer with a 400.
var createSeeds = []string{
	`{"items":[{"sku":"a","qty":1}],"amount_cents":100}`,
	`{"id":"ord-1","items":[{"sku":"apple","qty":3},{"sku":"pear","qty":2}],"amount_cents":1299,"currency":"EUR","timeout_seconds":120}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":0,"timeout_seconds":0.05}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":0,"timeout_seconds":0.0005}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":0,"timeout_seconds":0.0004}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":0,"timeout_seconds":9223372036}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":0,"timeout_seconds":9223372036.5}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":0,"timeout_seconds":1e300}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":0,"timeout_seconds":1e400}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":0,"timeout_seconds":1e-400}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":0,"timeout_seconds":-0}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":0,"timeout_seconds":-1}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":0,"timeout_seconds":"60"}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":9223372036854775807}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":9223372036854775808}`,
	`{"items":[{"sku":"a","qty":-9223372036854775808}],"amount_cents":-1}`,
	`{"items":[{"sku":"a","qty":1.0}],"amount_cents":1e2}`,
	`{"items":[],"amount_cents":1}`,
	`{"items":null,"amount_cents":1}`,
	`{"items":[null],"amount_cents":1}`,
	`{"items":[{}],"amount_cents":1}`,
	`{"items":[{"sku":null,"qty":null}],"amount_cents":1}`,
	`{"items":[{"sku":"a","qty":1,"x":1}],"amount_cents":1}`,
	`{"items":{"sku":"a","qty":1},"amount_cents":1}`,
	`{"items":"a","amount_cents":1}`,
	`{"id":"","items":[{"sku":"a","qty":1}],"amount_cents":1}`,
	`{"id":null,"items":[{"sku":"a","qty":1}],"amount_cents":1,"currency":null,"timeout_seconds":null}`,
	`{"id":"\u00e9\ud83d\ude00","items":[{"sku":"\u0000","qty":1}],"amount_cents":1,"currency":"\"\\"}`,
	"{\"id\":\"\xff\xfe\",\"items\":[{\"sku\":\"a\",\"qty\":1}],\"amount_cents\":1}",
	`{"items":[{"sku":"a","qty":1}],"amount_cents":1,"currency":""}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":1,"currency":"usd"}`,
	`{"ITEMS":[{"SKU":"a","QTY":1}],"Amount_Cents":1}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":1,"amount_cents":2}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":1,"extra":{"nested":[1,2,{"a":null}]}}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":1}{}`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":1} `,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":1} x`,
	`{"items":[{"sku":"a","qty":1}],"amount_cents":1`,
	`{"items":[`,
	`{`,
	`}`,
	`[]`,
	`[{"items":[]}]`,
	`"order"`,
	`42`,
	`true`,
	`null`,
	``,
	` `,
	"\xef\xbb\xbf{}",
	`{}`,
}

// createBody is the wire shape of a create request, for re-encoding.
type createBody struct {
	ID             string       `json:"id,omitempty"`
	Items          []order.Item `json:"items"`
	AmountCents    int64        `json:"amount_cents"`
	Currency       string       `json:"currency,omitempty"`
	TimeoutSeconds float64      `json:"timeout_seconds,omitempty"`
}

func encodeCreate(t *testing.T, r lapse.CreateOrderRequest) []byte {
	t.Helper()
	b, err := json.Marshal(createBody{
		ID: r.ID, Items: r.Items, AmountCents: r.AmountCents, Currency: r.Currency,
		TimeoutSeconds: float64(r.Timeout/time.Millisecond) / 1000,
	})
	if err != nil {
		t.Fatalf("re-encode %+v: %v", r, err)
	}
	return b
}

// lenient is the body read without DecodeCreateOrder's checks, to compare
// what it accepted against.
type lenient struct {
	ID    *string `json:"id"`
	Items []struct {
		SKU *string `json:"sku"`
		Qty *int64  `json:"qty"`
	} `json:"items"`
	AmountCents    *int64   `json:"amount_cents"`
	Currency       *string  `json:"currency"`
	TimeoutSeconds *float64 `json:"timeout_seconds"`
}

func FuzzDecodeCreateOrder(f *testing.F) {
	for _, s := range createSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := DecodeCreateOrder(body)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				t.Fatalf("error %T %v is not an *apiError (it would be a 500)", err, err)
			}
			if ae.Status != 400 || (ae.Code != "invalid_json" && ae.Code != "invalid_field") {
				t.Fatalf("error %d %q, want 400 invalid_json or invalid_field", ae.Status, ae.Code)
			}
			if strings.TrimSpace(ae.Message) == "" {
				t.Fatalf("error %q has no message", ae.Code)
			}
			return
		}

		// Accepted: every field is copied, the required ones are there.
		if r.Items == nil {
			t.Fatalf("accepted with nil Items: %q", body)
		}
		if r.Timeout < 0 || r.Timeout%time.Millisecond != 0 {
			t.Fatalf("Timeout %d: want >= 0 and whole milliseconds", r.Timeout)
		}
		if r.IdempotencyKey != "" {
			t.Fatalf("the decoder set IdempotencyKey %q", r.IdempotencyKey)
		}
		var l lenient
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
		}
		if l.AmountCents == nil || *l.AmountCents != r.AmountCents {
			t.Fatalf("amount_cents %v decoded as %d", l.AmountCents, r.AmountCents)
		}
		if (l.ID == nil && r.ID != "") || (l.ID != nil && (*l.ID == "" || *l.ID != r.ID)) {
			t.Fatalf("id %v decoded as %q", l.ID, r.ID)
		}
		if (l.Currency == nil && r.Currency != "") || (l.Currency != nil && (*l.Currency == "" || *l.Currency != r.Currency)) {
			t.Fatalf("currency %v decoded as %q", l.Currency, r.Currency)
		}
		if len(l.Items) != len(r.Items) {
			t.Fatalf("%d items decoded as %d", len(l.Items), len(r.Items))
		}
		for i, it := range l.Items {
			if it.SKU == nil || it.Qty == nil || *it.SKU != r.Items[i].SKU || *it.Qty != r.Items[i].Qty {
				t.Fatalf("items[%d] %v/%v decoded as %+v", i, it.SKU, it.Qty, r.Items[i])
			}
		}
		switch s := l.TimeoutSeconds; {
		case s == nil:
			if r.Timeout != 0 {
				t.Fatalf("no timeout_seconds decoded as %s", r.Timeout)
			}
		default:
			if !(*s > 0) || r.Timeout < time.Millisecond {
				t.Fatalf("timeout_seconds %v accepted as %s", *s, r.Timeout)
			}
			if want := math.Round(*s * 1000); float64(r.Timeout/time.Millisecond) != want {
				t.Fatalf("timeout_seconds %v decoded as %s, want %vms", *s, r.Timeout, want)
			}
		}

		// Re-encoding what was accepted and decoding it again gives the same request.
		again, err := DecodeCreateOrder(encodeCreate(t, r))
		if err != nil {
			t.Fatalf("re-encoded request %s refused: %v", encodeCreate(t, r), err)
		}
		if !reflect.DeepEqual(again, r) {
			t.Fatalf("round trip changed the request:\n first %+v\n again %+v", r, again)
		}
	})
}

func TestDecodeCreateOrderTimeout(t *testing.T) {
	t.Parallel()
	cases := []struct {
		seconds string
		want    time.Duration // 0: refused
	}{
		{"1", time.Second},
		{"0.05", 50 * time.Millisecond},
		{"0.25", 250 * time.Millisecond},
		{"0.001", time.Millisecond},
		{"0.0005", time.Millisecond}, // rounded to the nearest millisecond, not truncated
		{"0.0015", 2 * time.Millisecond},
		{"0.9999", time.Second},
		{"900", 15 * time.Minute},
		{"9223372036", 9223372036 * time.Second},
		{"0.0004", 0},
		{"0", 0},
		{"-0", 0},
		{"-1", 0},
		{"9223372037", 0},
		{"1e300", 0},
	}
	for _, c := range cases {
		t.Run(c.seconds, func(t *testing.T) {
			t.Parallel()
			body := `{"items":[{"sku":"a","qty":1}],"amount_cents":1,"timeout_seconds":` + c.seconds + `}`
			r, err := DecodeCreateOrder([]byte(body))
			if c.want == 0 {
				var ae *apiError
				if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_field" {
					t.Fatalf("timeout_seconds %s: got %v, %v; want a 400 invalid_field", c.seconds, r.Timeout, err)
				}
				return
			}
			if err != nil || r.Timeout != c.want {
				t.Fatalf("timeout_seconds %s: got %v, %v; want %v", c.seconds, r.Timeout, err, c.want)
			}
		})
	}
}
