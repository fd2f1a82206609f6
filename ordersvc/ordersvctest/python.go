package ordersvctest

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Path is where a command (POST) and a status request (GET ?order_id=) go
// on the Python receiver.
const Path = "/lapse"

// PythonConfig is how to run the Python receiver.
type PythonConfig struct {
	// Secrets are the whsec_ secrets it verifies with (LAPSE_SECRETS).
	// Required.
	Secrets []string
	// DB is its SQLite file; empty means a file in t.TempDir(). The file
	// outlives Kill, so Restart finds the orders where they were.
	DB string
	// Env adds environment variables: the fault switches FAIL_503_UNTIL,
	// DROP_ANSWER_RATE, SEED, and PAYING_RETRY_AFTER, TOLERANCE_SECONDS
	// (see receiver.py). Faults can also be changed while it runs, with
	// SetFaults.
	Env []string
}

// StartPython starts the Python receiver (HTTP) and waits until it
// listens; it is killed when the test ends. Its URL is lapse's
// --order-service.
func StartPython(t testing.TB, cfg PythonConfig) *Process {
	t.Helper()
	if len(cfg.Secrets) == 0 {
		t.Fatal("ordersvctest: StartPython without secrets")
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("ordersvctest: the Python receiver needs python3 on PATH: %v", err)
	}
	env := append([]string{"RECEIVER_PATH=" + Path, "PYTHONDONTWRITEBYTECODE=1"}, cfg.Env...)
	return startProcess(t, "python receiver", []string{python, Script()}, cfg.Secrets, cfg.DB, env, Path)
}

// Script is the path of receiver.py.
func Script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "receiver.py")
}

// secretsEnv is how both receivers take their secrets.
func secretsEnv(secrets []string) string { return "LAPSE_SECRETS=" + strings.Join(secrets, " ") }
