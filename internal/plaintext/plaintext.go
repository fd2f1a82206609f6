// Package plaintext is the one check of text that reaches a store from
// outside lapse, shared by the HTTP API (package httpapi: path ids, the
// Idempotency-Key, cursors, query parameters) and the dashboard (package
// web: every path, query and form): valid UTF-8 without a NUL. PostgreSQL
// refuses anything else in a text column or parameter, and its error there
// was a 500 for what is the client's mistake; SQLite takes such text
// without a word. Each caller answers a failure with its own 400.
package plaintext

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Check returns nil when s is valid UTF-8 without a NUL, else an error
// that names field (and never quotes s: it is not text to print).
func Check(field, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s: not valid UTF-8", field)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%s: holds a NUL character", field)
	}
	return nil
}
