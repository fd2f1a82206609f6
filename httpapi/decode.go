package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"time"

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

// decodeStrict decodes one JSON object into v: unknown fields, trailing data
// and type mismatches are 400s that name the field. Field names must match
// exactly: encoding/json alone would take "AMOUNT_CENTS" for amount_cents,
// and a body holding both would silently use the last one.
func decodeStrict(body []byte, v any) error {
	if err := exactKeys(body, v); err != nil {
		return err
	}
	return decodeInto(body, v)
}

// exactKeys checks every object key of body against the json tags of v's
// struct type (nested objects and arrays of objects included), exactly and
// without duplicates.
func exactKeys(body []byte, v any) error {
	var raw any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return decodeInto(body, v) // reports the syntax error with its offset
	}
	if err := noDuplicateKeys(body); err != nil {
		return err
	}
	return checkKeys(raw, reflect.TypeOf(v), "")
}

// noDuplicateKeys refuses an object that names a key twice: which value
// would win is a parser's choice, and an amount is not a thing to guess.
func noDuplicateKeys(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		object bool
		keys   map[string]bool
		expect bool // in an object: the next string token is a key
	}
	var stack []*frame
	for {
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
				if top != nil && top.object {
					top.expect = true
				}
				stack = append(stack, &frame{object: true, keys: map[string]bool{}, expect: true})
			case '[':
				if top != nil && top.object {
					top.expect = true
				}
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if top != nil && top.object && top.expect {
				if top.keys[tk] {
					return badRequest("invalid_field", "%q appears twice in one object", tk)
				}
				top.keys[tk] = true
				top.expect = false
				continue
			}
		}
		if top != nil && top.object {
			top.expect = true // a value was read: a key comes next
		}
	}
}

func checkKeys(raw any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch x := raw.(type) {
	case map[string]any:
		if t.Kind() != reflect.Struct {
			return nil // a type mismatch: decodeInto names it
		}
		fields := map[string]reflect.Type{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name != "" && name != "-" {
				fields[name] = f.Type
			}
		}
		for k, v := range x {
			ft, ok := fields[k]
			if !ok {
				return badRequest("invalid_field", "%s%q is not a known field (names are case-sensitive)", path, k)
			}
			if err := checkKeys(v, ft, path+k+"."); err != nil {
				return err
			}
		}
	case []any:
		if t.Kind() != reflect.Slice {
			return nil
		}
		for i, v := range x {
			if err := checkKeys(v, t.Elem(), fmt.Sprintf("%s[%d].", strings.TrimSuffix(path, "."), i)); err != nil {
				return err
			}
		}
	}
	return nil
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
			field := typeErr.Field
			if field == "" {
				return badRequest("invalid_json", "want a JSON object, got %s", typeErr.Value)
			}
			return badRequest("invalid_field", "%s: want %s, got %s", field, jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
		case errors.As(err, &syntaxErr):
			return badRequest("invalid_json", "malformed JSON at byte %d: %v", syntaxErr.Offset, err)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return badRequest("invalid_field", "%s is not a known field", strings.TrimPrefix(err.Error(), "json: unknown field "))
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
	if b.Items == nil {
		return r, badRequest("invalid_field", "items: required")
	}
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

type notifyBody struct {
	OrderID     *string `json:"order_id"`
	PaymentID   *string `json:"payment_id"`
	Status      *string `json:"status"`
	AmountCents *int64  `json:"amount_cents"`
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
	return lapse.Notification{
		OrderID: *b.OrderID, PaymentID: *b.PaymentID, Status: lapse.PaymentStatus(*b.Status), AmountCents: *b.AmountCents,
	}, nil
}

type setStockBody struct {
	Available *int64 `json:"available"`
}
