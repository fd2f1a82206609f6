package store

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse/order"
)

// A list cursor is the (created_at in Unix ms, id) of a page's last order,
// opaque to callers; every driver pages newest first on that pair.

// EncodeCursor returns the cursor that continues after an order.
func EncodeCursor(created time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(created.UnixMilli(), 10) + "|" + id))
}

// DecodeCursor reads a cursor, or returns ErrInvalidCursor.
func DecodeCursor(c string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", ErrInvalidCursor
	}
	num, id, ok := strings.Cut(string(b), "|")
	if !ok {
		return time.Time{}, "", ErrInvalidCursor
	}
	ms, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return time.Time{}, "", ErrInvalidCursor
	}
	return time.UnixMilli(ms).UTC(), id, nil
}

// Page cuts the limit+1 orders a driver read into a page and the cursor of
// the next one ("" when this is the last).
func Page(orders []order.Order, limit int) ListOrdersResult {
	res := ListOrdersResult{Orders: orders}
	if len(orders) > limit {
		res.Orders = orders[:limit]
		last := res.Orders[limit-1]
		res.NextCursor = EncodeCursor(last.CreatedAt, last.ID)
	}
	return res
}
