package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// conforming wraps the API's handler so that every request a test sends and
// every answer it gets are checked against openapi.yaml with kin-openapi:
//
//   - an answer must be one the document gives for its operation, status
//     included, with a body of the documented schema;
//   - a request the document refuses (a missing required header, a body off
//     its schema, a wrong Content-Type) must be refused with a 4xx: the
//     server may be stricter than the document, never laxer;
//   - a path the document lacks must be a 404 and a method it lacks a 405,
//     both in the error envelope, the 405's Allow header naming exactly the
//     methods the document has for that path.
//
// The answer is held until it is checked, so a disagreement is reported
// while the test that caused it is still running.
func conforming(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	doc := loadOpenAPI(t)
	doc.Servers = nil // match paths only: the test server is not on :8080
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatalf("openapi router: %v", err)
	}
	opts := &openapi3filter.Options{
		IncludeResponseStatus: true,
		// Tokens are the server's business (TestAuth); the document only names the scheme.
		AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
	}
	errSchema := doc.Components.Schemas["Error"].Value
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		what := r.Method + " " + clipForLog(r.URL.RequestURI())
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("%s: reading the request body: %v", what, err)
		}
		find := r
		if r.Method == http.MethodHead {
			find = r.Clone(r.Context())
			find.Method = http.MethodGet // net/http serves HEAD wherever it serves GET
		}
		route, params, routeErr := router.FindRoute(find)
		var in *openapi3filter.RequestValidationInput
		var reqErr error
		if routeErr == nil {
			vr := r.Clone(r.Context())
			vr.Body = io.NopCloser(bytes.NewReader(body))
			in = &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route, Options: opts}
			reqErr = openapi3filter.ValidateRequest(r.Context(), in)
		}

		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		status, respBody := rec.Code, rec.Body.Bytes()

		switch {
		case routeErr != nil:
			// No operation: either the path is the document's with another
			// method (405, Allow) or the document lacks the path (404).
			var allowed []string
			for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
				probe := r.Clone(r.Context())
				probe.Method = m
				if m == http.MethodHead {
					probe.Method = http.MethodGet
				}
				if _, _, err := router.FindRoute(probe); err == nil {
					allowed = append(allowed, m)
				}
			}
			switch {
			case status == http.StatusForbidden:
				// Refused before routing (foreign Host or Origin).
			case len(allowed) > 0 && status != http.StatusMethodNotAllowed:
				t.Errorf("%s: the document has this path but not this method; lapse answered %d, want 405", what, status)
			case len(allowed) > 0 && rec.Header().Get("Allow") != strings.Join(allowed, ", "):
				t.Errorf("%s: Allow %q, want %q (the document's methods for this path)", what, rec.Header().Get("Allow"), strings.Join(allowed, ", "))
			case len(allowed) == 0 && status != http.StatusNotFound:
				t.Errorf("%s: the document has no such path (%v); lapse answered %d, want 404", what, routeErr, status)
			}
			checkEnvelope(t, what, errSchema, rec, respBody)
		default:
			if reqErr != nil && (status < 400 || status > 499) {
				t.Errorf("%s: the document refuses this request (%v) but lapse answered %d", what, reqErr, status)
			}
			out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: rec.Header(), Options: opts}
			out.SetBodyBytes(respBody)
			if err := openapi3filter.ValidateResponse(r.Context(), out); err != nil {
				t.Errorf("%s: the answer %d %s does not conform to openapi.yaml: %v", what, status, clipForLog(string(respBody)), err)
			}
		}

		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		_, _ = w.Write(respBody)
	})
}

// checkEnvelope checks an answer that no operation describes: it must be an
// error in the documented envelope.
func checkEnvelope(t testing.TB, what string, errSchema *openapi3.Schema, rec *httptest.ResponseRecorder, body []byte) {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: Content-Type %q, want application/json", what, ct)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Errorf("%s: the answer is not JSON: %v: %s", what, err, clipForLog(string(body)))
		return
	}
	if err := errSchema.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		t.Errorf("%s: the answer is not the error envelope: %v", what, err)
	}
}

// clipForLog keeps test failure messages short when a test sends megabytes.
func clipForLog(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// The checks of conforming are themselves checked: a wrapper that lets
// everything through would make every server test vacuous.
func TestConformingCatchesDisagreements(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		method  string
		path    string
		body    string
		handler http.HandlerFunc
	}{
		{"an undocumented status", "GET", "/v1/orders/x", "", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTeapot)
			_, _ = w.Write([]byte(`{"error":{"code":"teapot","message":"short and stout"}}`))
		}},
		{"a body off its schema", "GET", "/v1/skus/a", "", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"sku":"a","available":"many"}`))
		}},
		{"a refused request answered 200", "PUT", "/v1/skus/a", `{"available":-1}`, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"sku":"a","available":0,"locked":0,"sold":0}`))
		}},
		{"an unknown path answered 200", "GET", "/nope", "", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{}`))
		}},
		{"a wrong method answered 404", "DELETE", "/v1/orders/x", "", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"no"}}`))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rec := &recordingTB{TB: t}
			h := conforming(rec, c.handler)
			req := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
			if c.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			if len(rec.errors) == 0 {
				t.Errorf("conforming let %s through", c.name)
			}
		})
	}
}

// recordingTB collects Errorf calls instead of failing the test.
type recordingTB struct {
	testing.TB
	errors []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errors = append(r.errors, format)
}

func (r *recordingTB) Helper() {}
