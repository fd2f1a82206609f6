package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment"
)

// A public listen address needs a token that cannot be guessed: at least
// 16 bytes. The refusal names the flag, never the token.
func TestServeRefusesAShortTokenOnAPublicAddress(t *testing.T) {
	t.Parallel()
	const short = "tok-0451" // 8 bytes
	for _, args := range [][]string{
		{"serve", "--addr", "0.0.0.0:0", "--api-token", short},
		{"serve", "--addr", "0.0.0.0:0", "--api-token-file", writeSecret(t, short+"\n")},
	} {
		out, code := lapseRun(t, 15*time.Second, nil, args...)
		if code != 2 || !strings.Contains(out, "at least 16 bytes") || strings.Contains(out, short) {
			t.Errorf("lapse %v: exit %d, want 2 and a message that asks for 16 bytes without showing the token:\n%s", args, code, out)
		}
	}
	out, code := lapseRun(t, 15*time.Second, nil, "serve", "--addr", "0.0.0.0:0")
	if code != 2 || !strings.Contains(out, "without --api-token") {
		t.Errorf("no token on a public address: exit %d:\n%s", code, out)
	}
}

// writeSecret writes a secret file of the test's own and returns its path.
func writeSecret(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// --api-token-file and --callback-secret-file read the secret from a file
// (a mounted Kubernetes or Docker secret), without its trailing newline; the
// secrets never appear in the log.
func TestServeReadsSecretsFromFiles(t *testing.T) {
	t.Parallel()
	const token, secret = "0123456789abcdef-token", "callback-secret-2718"
	s := startServe(t, nil, "--store", "sqlite://"+filepath.Join(t.TempDir(), "x.db"),
		"--api-token-file", writeSecret(t, token+"\n"), "--callback-secret-file", writeSecret(t, secret+"\r\n"))
	get := func(auth string) int {
		req, err := http.NewRequest("GET", s.url+"/v1/skus/tee", nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get(""); got != http.StatusUnauthorized {
		t.Errorf("no token: status %d, want 401", got)
	}
	if got := get(token); got != http.StatusNotFound {
		t.Errorf("the file's token: status %d, want 404 (authorized, no such SKU)", got)
	}
	notify := func(key string) int {
		body := `{"order_id":"nope","payment_id":"p","status":"SUCCEEDED","amount_cents":1}`
		req, err := http.NewRequest("POST", s.url+"/v1/payments/notify", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(payment.SignatureHeader, payment.Sign([]byte(key), time.Now(), []byte(body)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := notify(secret); got != http.StatusNotFound {
		t.Errorf("callback signed with the file's secret: status %d, want 404 (signature good, no such order)", got)
	}
	if got := notify(secret + "\r\n"); got != http.StatusUnauthorized {
		t.Errorf("callback signed with the secret and its newline: status %d, want 401", got)
	}
	s.stop()
	if logs := s.logs.String(); strings.Contains(logs, token) || strings.Contains(logs, secret) {
		t.Errorf("the log shows a secret:\n%s", logs)
	}
}

func TestServeRefusesASecretTwice(t *testing.T) {
	t.Parallel()
	file := writeSecret(t, "0123456789abcdef-from-the-file\n")
	empty := writeSecret(t, "\n")
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--api-token", "0123456789abcdef-flag", "--api-token-file", file}, "--api-token or --api-token-file, not both"},
		{[]string{"LAPSE_API_TOKEN=0123456789abcdef-env"}, []string{"--api-token-file", file}, "--api-token or --api-token-file, not both"},
		{nil, []string{"--callback-secret", "s", "--callback-secret-file", file}, "--callback-secret or --callback-secret-file, not both"},
		{[]string{"LAPSE_CALLBACK_SECRET_FILE=" + file}, []string{"--callback-secret", "s"}, "--callback-secret or --callback-secret-file, not both"},
		{nil, []string{"--callback-secret-file", filepath.Join(t.TempDir(), "missing")}, "--callback-secret-file"},
		{nil, []string{"--api-token-file", empty}, "--api-token-file " + empty + ": empty"},
	} {
		args := append([]string{"serve", "--addr", "127.0.0.1:0"}, c.args...)
		out, code := lapseRun(t, 15*time.Second, c.env, args...)
		if code != 2 || !strings.Contains(out, c.want) || strings.Contains(out, "from-the-file") {
			t.Errorf("%v lapse %v: exit %d, want 2 and %q:\n%s", c.env, args, code, c.want, out)
		}
	}
}

// A previous secret alone accepts callbacks signed with the old secret only:
// most likely a rotation half done, so it is said at start.
func TestServeWarnsOfAPreviousSecretAlone(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--store", "sqlite://"+filepath.Join(t.TempDir(), "x.db"), "--previous-callback-secret", "old-secret-1414")
	s.stop()
	logs := s.logs.String()
	if !strings.Contains(logs, "--previous-callback-secret without --callback-secret") || strings.Contains(logs, "old-secret-1414") {
		t.Errorf("want a warning that names the flags, not the secret:\n%s", logs)
	}
}
