package httpapi_test

import (
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/lapsehq/lapse/httpapi"
)

// loadOpenAPI parses and validates the served document with kin-openapi. A
// YAML slip that still parses — an unquoted description whose comma splits
// it into a bogus key — is an error here, not a silently different API.
func loadOpenAPI(t testing.TB) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(httpapi.OpenAPI)
	if err != nil {
		t.Fatalf("openapi.yaml does not load: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	return doc
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	// The descriptions that once split on their comma read whole.
	for path, want := range map[string]string{
		"/v1/orders/{id}/pay":    "The order, PAYING, its payment_id the current attempt's",
		"/v1/orders/{id}/cancel": "The order, CANCELLED with cancel_reason buyer (no body) or operator",
	} {
		op := doc.Paths.Find(path).Post
		if got := *op.Responses.Status(200).Value.Description; got != want {
			t.Errorf("POST %s 200: description %q, want %q", path, got, want)
		}
	}
}

// Every operation has an operationId, unique in the document and a
// camelCase verb phrase: the generated client (package client) names its
// methods after them, so a missing or repeated one breaks the client.
func TestOpenAPIOperationIDs(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	camel := regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)
	seen := map[string]string{}
	n := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			n++
			what := method + " " + path
			switch id := op.OperationID; {
			case id == "":
				t.Errorf("%s has no operationId", what)
			case !camel.MatchString(id):
				t.Errorf("%s: operationId %q is not camelCase", what, id)
			case seen[id] != "":
				t.Errorf("%s: operationId %q is %s's already", what, id, seen[id])
			default:
				seen[id] = what
			}
		}
	}
	if n < 17 {
		t.Errorf("%d operations in the document, want at least 17", n)
	}
}

// The OpenAPI document names every route, field and error code the API has,
// so it cannot drift silently from server.go.
func TestOpenAPIDocumentsEveryRouteAndCode(t *testing.T) {
	t.Parallel()
	doc := string(httpapi.OpenAPI)
	for _, want := range []string{
		"/v1/orders:", "/v1/orders/{id}:", "/v1/orders/{id}/pay:", "/v1/orders/{id}/cancel:", "/v1/orders/{id}/extend:", "/v1/orders/{id}/check:",
		"/v1/payments/notify:", "/v1/skus/{sku}:", "/v1/events:", "/v1/events/retry:", "/v1/tasks:", "/v1/tasks/retry:", "/healthz:", "/readyz:", "/metrics:",
		"Idempotency-Key", "Lapse-Signature",
		"timeout_seconds", "amount_cents", "cancel_after", "refund_required", "payment_attempts", "next_cursor", "next_after", "next_attempt_at", "retried",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("openapi.yaml does not mention %s", want)
		}
	}
	// Every error code written in the handlers appears in the document.
	src := readFile(t, "server.go") + readFile(t, "decode.go") + readFile(t, "tasks.go") + readFile(t, "events.go") + readFile(t, "operator.go")
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

// GET /openapi.yaml serves the document itself (through conforming, like
// every route the tests call).
func TestOpenAPIDocumentIsServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	resp, err := e.client.Get(e.url + "/openapi.yaml") // not e.do: the answer is YAML
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/yaml" || string(b) != string(httpapi.OpenAPI) {
		t.Fatalf("GET /openapi.yaml: %d %s, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(b))
	}
}
