package httpapi_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/lapsehq/lapse/httpapi"
)

// The OpenAPI document names every route, field and error code the API has,
// so it cannot drift silently from server.go.
func TestOpenAPIDocumentsEveryRouteAndCode(t *testing.T) {
	t.Parallel()
	doc := string(httpapi.OpenAPI)
	for _, want := range []string{
		"/v1/orders:", "/v1/orders/{id}:", "/v1/orders/{id}/pay:", "/v1/orders/{id}/cancel:",
		"/v1/payments/notify:", "/v1/skus/{sku}:", "/healthz:", "/readyz:", "/metrics:",
		"Idempotency-Key", "Lapse-Signature",
		"timeout_seconds", "amount_cents", "cancel_after", "refund_required", "payment_attempts", "next_cursor",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("openapi.yaml does not mention %s", want)
		}
	}
	// Every error code written in the handlers appears in the document.
	src := readFile(t, "server.go") + readFile(t, "decode.go")
	for _, m := range regexp.MustCompile(`"([a-z]+(?:_[a-z]+)+)"`).FindAllStringSubmatch(src, -1) {
		code := m[1]
		if !strings.Contains(src, `, "`+code+`"`) && !strings.Contains(src, `("`+code+`"`) {
			continue // not an error code
		}
		if !strings.Contains(doc, code) {
			t.Errorf("error code %s is not documented in openapi.yaml", code)
		}
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
