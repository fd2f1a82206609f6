package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
)

// MaxBodyBytes bounds every request body (1 MiB).
const MaxBodyBytes = 1 << 20

// apiError is an error with an HTTP status and a stable code.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func badRequest(code, format string, args ...any) *apiError {
	return &apiError{Status: 400, Code: code, Message: fmt.Sprintf(format, args...)}
}

// maxEcho bounds how much of one input an error message quotes: enough to
// recognise it, never a way to have a megabyte key or path reflected back
// (into the answer, and into whatever logs keep answers).
const maxEcho = 64

// echo quotes s for an error message, cut at a character boundary so that
// the quoted text (escapes included) is at most maxEcho bytes.
func echo(s string) string {
	q := strconv.Quote(s)
	if len(q) <= maxEcho {
		return q
	}
	const more = "…"
	for cut := min(len(s), maxEcho); cut > 0; cut-- {
		if !utf8.RuneStart(s[cut]) {
			continue
		}
		if q = strconv.Quote(s[:cut]); len(q)+len(more) <= maxEcho {
			return q + more
		}
	}
	return `""` + more
}

// maxMessage bounds every error message the API writes. echo keeps the
// messages of this package short; this also covers the ones made deeper
// (the service's validation quotes a currency or status as it came), so no
// answer repeats more than maxMessage bytes of its request.
const maxMessage = 200

// clipMessage cuts msg to maxMessage bytes at a character boundary.
func clipMessage(msg string) string {
	if len(msg) <= maxMessage {
		return msg
	}
	const more = "…"
	cut := maxMessage - len(more)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + more
}

// decodeStrict decodes one JSON object into v: unknown fields, trailing data
// and type mismatches are 400s that name the field by its full path, array
// indexes included (items[1].qty). Field names must match exactly:
// encoding/json alone would take "AMOUNT_CENTS" for amount_cents, and a body
// holding both would silently use the last one.
func decodeStrict(body []byte, v any) error {
	if err := checkBody(body, v); err != nil {
		return err
	}
	return decodeInto(body, v)
}

// checkBody checks body against the json tags and field types of v's struct
// type (nested objects and arrays of objects included): every key exactly
// and once, every value of the kind its field takes. encoding/json reports a
// type error with a path that has no array index ("items.qty": which item?),
// so the types are checked here, where the path is known.
func checkBody(body []byte, v any) error {
	var raw any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return decodeInto(body, v) // reports the syntax error with its offset
	}
	if err := checkTokens(body); err != nil {
		return err
	}
	return checkShape(raw, reflect.TypeOf(v), "")
}

// checkTokens walks body's tokens and refuses two things encoding/json lets
// through: an object that names a key twice (which value would win is a
// parser's choice, and an amount is not a thing to guess), and a string
// that is not valid UTF-8 or holds a NUL. encoding/json silently turns
// invalid UTF-8 into U+FFFD (two different bodies, one order_id) and hands
// on "\u0000"; PostgreSQL refuses both in text, which made a 500 of what is
// the client's error. Such a string is refused here, naming its field.
func checkTokens(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		object bool
		keys   map[string]bool
		key    string // object: the key of the value being read
		expect bool   // object: the next string token is a key
		index  int    // array: the index of the value being read
	}
	var stack []*frame
	// pathOf is where the value inside stack[:n] being read sits: items[0].sku.
	pathOf := func(n int) string {
		var b strings.Builder
		for _, f := range stack[:n] {
			switch {
			case f.object && b.Len() == 0:
				b.WriteString(f.key)
			case f.object:
				b.WriteString("." + f.key)
			default:
				fmt.Fprintf(&b, "[%d]", f.index)
			}
		}
		return b.String()
	}
	// valueDone moves the enclosing container past the value just read.
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		if top := stack[len(stack)-1]; top.object {
			top.expect = true
		} else {
			top.index++
		}
	}
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil // EOF, or a syntax error that decodeInto reports
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch tk := tok.(type) {
		case json.Delim:
			switch tk {
			case '{':
				stack = append(stack, &frame{object: true, keys: map[string]bool{}, expect: true})
			case '[':
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
				valueDone()
			}
			continue
		case string:
			// The token's bytes as sent: what precedes its opening quote
			// is white space and separators.
			raw := body[start:dec.InputOffset()]
			raw = raw[bytes.IndexByte(raw, '"'):]
			isKey := top != nil && top.object && top.expect
			code, where := "invalid_field", pathOf(len(stack))
			switch {
			case isKey && len(stack) == 1:
				where = "a key"
			case isKey:
				where = pathOf(len(stack)-1) + ": a key"
			case top == nil:
				code, where = "invalid_json", "the body"
			}
			if !utf8.Valid(raw) {
				return badRequest(code, "%s: not valid UTF-8", where)
			}
			if strings.IndexByte(tk, 0) >= 0 {
				return badRequest(code, "%s: holds a NUL character", where)
			}
			if isKey {
				if top.keys[tk] {
					return badRequest("invalid_field", "%s appears twice in one object", echo(tk))
				}
				top.keys[tk] = true
				top.key = tk
				top.expect = false
				continue
			}
		}
		valueDone()
	}
}

// checkShape checks raw (decoded with UseNumber) against t. path is where
// raw sits: "" for the body itself, else a field path such as items[0].qty.
// null fits anything, as it does for encoding/json (the field stays unset
// and the decoder's required-field checks speak).
func checkShape(raw any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if raw == nil {
		return nil
	}
	want := jsonKind(t.Kind().String())
	mismatch := func(got string) error {
		if path == "" {
			return badRequest("invalid_json", "want %s, got %s", want, got)
		}
		return badRequest("invalid_field", "%s: want %s, got %s", path, want, got)
	}
	switch x := raw.(type) {
	case map[string]any:
		if t.Kind() != reflect.Struct {
			return mismatch("an object")
		}
		fields := map[string]reflect.Type{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name != "" && name != "-" {
				fields[name] = f.Type
			}
		}
		prefix := path
		if prefix != "" {
			prefix += "."
		}
		for _, k := range slices.Sorted(maps.Keys(x)) { // the same field named on every run
			ft, ok := fields[k]
			if !ok {
				return badRequest("invalid_field", "%s%s is not a known field (names are case-sensitive)", prefix, echo(k))
			}
			if err := checkShape(x[k], ft, prefix+k); err != nil {
				return err
			}
		}
	case []any:
		if t.Kind() != reflect.Slice {
			return mismatch("an array")
		}
		for i, v := range x {
			if err := checkShape(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case string:
		if t.Kind() != reflect.String {
			return mismatch("a string")
		}
	case bool:
		if t.Kind() != reflect.Bool {
			return mismatch("true or false")
		}
	case json.Number:
		// The same parses encoding/json applies, so what passes here decodes.
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if _, err := strconv.ParseInt(x.String(), 10, t.Bits()); err != nil {
				return mismatch("the number " + echoNumber(x.String()))
			}
		case reflect.Float32, reflect.Float64:
			if _, err := strconv.ParseFloat(x.String(), t.Bits()); err != nil {
				return mismatch("the number " + echoNumber(x.String()))
			}
		default:
			return mismatch("the number " + echoNumber(x.String()))
		}
	}
	return nil
}

// echoNumber is echo for a number literal, which needs no quotes.
func echoNumber(n string) string {
	if len(n) <= maxEcho {
		return n
	}
	return n[:maxEcho] + "…"
}

// decodeInto is the decoding proper.
func decodeInto(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("invalid_json", "request body is empty; want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		switch {
		case errors.As(err, &typeErr):
			// checkShape finds type errors first, with the full path; this is
			// a backstop.
			field := typeErr.Field
			if field == "" {
				return badRequest("invalid_json", "want a JSON object, got %s", echoNumber(typeErr.Value))
			}
			return badRequest("invalid_field", "%s: want %s, got %s", echoNumber(field), jsonKind(typeErr.Type.Kind().String()), echoNumber(typeErr.Value))
		case errors.As(err, &syntaxErr):
			return badRequest("invalid_json", "malformed JSON at byte %d: %v", syntaxErr.Offset, err)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return badRequest("invalid_field", "%s is not a known field", echoNumber(strings.TrimPrefix(err.Error(), "json: unknown field ")))
		case errors.Is(err, io.ErrUnexpectedEOF):
			return badRequest("invalid_json", "malformed JSON: unexpected end of input")
		default:
			return badRequest("invalid_json", "malformed JSON: %v", err)
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("invalid_json", "unexpected data after the JSON object")
	}
	return nil
}

func jsonKind(goKind string) string {
	switch {
	case strings.HasPrefix(goKind, "int"), strings.HasPrefix(goKind, "uint"):
		return "an integer"
	case strings.HasPrefix(goKind, "float"):
		return "a number"
	case goKind == "string":
		return "a string"
	case goKind == "slice":
		return "an array"
	case goKind == "struct", goKind == "map", goKind == "ptr":
		return "an object"
	case goKind == "bool":
		return "true or false"
	}
	return goKind
}

type createOrderBody struct {
	ID             *string    `json:"id"`
	Items          []itemBody `json:"items"`
	AmountCents    *int64     `json:"amount_cents"`
	Currency       *string    `json:"currency"`
	TimeoutSeconds *float64   `json:"timeout_seconds"`
	ExpiresAt      *string    `json:"expires_at"`
	ReservationID  *string    `json:"reservation_id"`
}

type itemBody struct {
	SKU *string `json:"sku"`
	Qty *int64  `json:"qty"`
}

// DecodeCreateOrder parses the body of POST /v1/orders. It checks the shape
// (types, required fields, timeout_seconds > 0); the service checks the rest.
func DecodeCreateOrder(body []byte) (lapse.CreateOrderRequest, error) {
	var b createOrderBody
	if err := decodeStrict(body, &b); err != nil {
		return lapse.CreateOrderRequest{}, err
	}
	var r lapse.CreateOrderRequest
	if b.ID != nil {
		if *b.ID == "" {
			return r, badRequest("invalid_field", "id: must not be empty (omit it to have one generated)")
		}
		r.ID = *b.ID
	}
	// items: required unless the order service owns the orders (the
	// service decides; an absent list and an empty one are alike).
	r.Items = make([]order.Item, len(b.Items))
	for i, it := range b.Items {
		if it.SKU == nil {
			return r, badRequest("invalid_field", "items[%d].sku: required", i)
		}
		if it.Qty == nil {
			return r, badRequest("invalid_field", "items[%d].qty: required", i)
		}
		r.Items[i] = order.Item{SKU: *it.SKU, Qty: *it.Qty}
	}
	if b.AmountCents == nil {
		return r, badRequest("invalid_field", "amount_cents: required")
	}
	r.AmountCents = *b.AmountCents
	if b.Currency != nil {
		if *b.Currency == "" {
			return r, badRequest("invalid_field", "currency: must not be empty (omit it for the default)")
		}
		r.Currency = *b.Currency
	}
	if b.ReservationID != nil {
		if *b.ReservationID == "" {
			return r, badRequest("invalid_field", "reservation_id: must not be empty")
		}
		r.ReservationID = *b.ReservationID
	}
	if b.ExpiresAt != nil {
		if b.TimeoutSeconds != nil {
			return r, badRequest("invalid_field", "expires_at, timeout_seconds: send at most one of them")
		}
		at, err := time.Parse(time.RFC3339Nano, *b.ExpiresAt)
		if err != nil {
			return r, badRequest("invalid_field", "expires_at: want an RFC 3339 time such as 2030-01-02T03:04:05Z, got %s", echo(*b.ExpiresAt))
		}
		r.ExpiresAt = at
	}
	if b.TimeoutSeconds != nil {
		s := *b.TimeoutSeconds
		if !(s > 0) || math.IsInf(s, 0) || s > float64(math.MaxInt64/int64(time.Second)) {
			return r, badRequest("invalid_field", "timeout_seconds: must be a number > 0")
		}
		r.Timeout = time.Duration(math.Round(s*1000)) * time.Millisecond
		if r.Timeout <= 0 {
			return r, badRequest("invalid_field", "timeout_seconds: must be at least 0.001")
		}
	}
	return r, nil
}

type extendBody struct {
	ExpiresAt      *string  `json:"expires_at"`
	TimeoutSeconds *float64 `json:"timeout_seconds"`
}

// decodeExtend parses the body of POST /v1/orders/{id}/extend into the new
// expires_at: exactly one of expires_at (RFC 3339) and timeout_seconds
// (> 0, counted from now). The service checks the range.
func decodeExtend(body []byte, now time.Time) (time.Time, error) {
	var b extendBody
	if err := decodeStrict(body, &b); err != nil {
		return time.Time{}, err
	}
	switch {
	case (b.ExpiresAt == nil) == (b.TimeoutSeconds == nil):
		return time.Time{}, badRequest("invalid_field", "expires_at, timeout_seconds: send exactly one of them")
	case b.ExpiresAt != nil:
		at, err := time.Parse(time.RFC3339Nano, *b.ExpiresAt)
		if err != nil {
			return time.Time{}, badRequest("invalid_field", "expires_at: want an RFC 3339 time such as 2030-01-02T03:04:05Z, got %s", echo(*b.ExpiresAt))
		}
		return at, nil
	}
	s := *b.TimeoutSeconds
	if !(s > 0) || math.IsInf(s, 0) || s > float64(math.MaxInt64/int64(time.Second)) {
		return time.Time{}, badRequest("invalid_field", "timeout_seconds: must be a number > 0")
	}
	d := time.Duration(math.Round(s*1000)) * time.Millisecond
	if d <= 0 {
		return time.Time{}, badRequest("invalid_field", "timeout_seconds: must be at least 0.001")
	}
	return now.Add(d), nil
}

type notifyBody struct {
	OrderID     *string `json:"order_id"`
	PaymentID   *string `json:"payment_id"`
	Status      *string `json:"status"`
	AmountCents *int64  `json:"amount_cents"`
	// Currency is optional: absent, the payment is in the order's currency.
	Currency *string `json:"currency"`
}

func decodeNotify(body []byte) (lapse.Notification, error) {
	var b notifyBody
	if err := decodeStrict(body, &b); err != nil {
		return lapse.Notification{}, err
	}
	for name, v := range map[string]*string{"order_id": b.OrderID, "payment_id": b.PaymentID, "status": b.Status} {
		if v == nil || *v == "" {
			return lapse.Notification{}, badRequest("invalid_field", "%s: required", name)
		}
	}
	if b.AmountCents == nil {
		return lapse.Notification{}, badRequest("invalid_field", "amount_cents: required")
	}
	n := lapse.Notification{
		OrderID: *b.OrderID, PaymentID: *b.PaymentID, Status: lapse.PaymentStatus(*b.Status), AmountCents: *b.AmountCents,
	}
	if b.Currency != nil {
		if *b.Currency == "" {
			return lapse.Notification{}, badRequest("invalid_field", "currency: must not be empty (omit it for the order's)")
		}
		n.Currency = *b.Currency
	}
	return n, nil
}

type setStockBody struct {
	Available *int64 `json:"available"`
}
