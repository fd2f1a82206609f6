package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A token under 16 bytes is refused on every address, loopback included
// (a 1-byte token on 127.0.0.1 was accepted): lapse serve exits 2 before
// listening, with a message that asks for 16 bytes and never shows the
// token.
func TestServeRefusesAShortTokenEverywhere(t *testing.T) {
	t.Parallel()
	const short = "k" // the reported 1-byte token
	db := "sqlite://" + filepath.Join(t.TempDir(), "x.db")
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{nil, []string{"serve", "--store", db, "--addr", "127.0.0.1:0", "--api-token", short}},
		{nil, []string{"serve", "--store", db, "--addr", "127.0.0.1:0", "--api-token", "0123456789abcde"}}, // 15 bytes
		{nil, []string{"serve", "--store", db, "--addr", "[::1]:0", "--api-token-file", writeSecret(t, short+"\n")}},
		{[]string{"LAPSE_API_TOKEN=" + short}, []string{"serve", "--store", db, "--addr", "localhost:0"}},
	} {
		out, code := lapseRun(t, 15*time.Second, c.env, c.args...)
		if code != 2 || !strings.Contains(out, "at least 16 bytes") || strings.Contains(out, "lapse serving") {
			t.Errorf("lapse %v (env %v): exit %d, want 2 with a message that asks for 16 bytes, before serving:\n%s", c.args, c.env, code, out)
		}
	}
}
