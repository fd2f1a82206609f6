package stripe_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/stripe"
)

// stripeMockURL is the stripe-mock this test binary started (TestMain).
var stripeMockURL string

// TestMain starts stripe-mock (Stripe's own server for its OpenAPI spec:
// it checks every request's path, method and parameters against the spec and
// answers with the spec's fixtures), pinned in go.mod as a tool: `go tool -n
// stripe-mock` builds it once into the build cache. It listens on loopback
// ports of its choosing only.
func TestMain(m *testing.M) {
	stop, err := startStripeMock()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stripe-mock:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

func startStripeMock() (func(), error) {
	out, err := exec.Command("go", "tool", "-n", "stripe-mock").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return nil, fmt.Errorf("go tool -n stripe-mock: %w", err)
	}
	cmd := exec.Command(strings.TrimSpace(string(out)), "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "Listening for HTTP at address: "); ok {
				found <- addr
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case addr := <-found:
		stripeMockURL = "http://" + addr
		return stop, nil
	case <-time.After(60 * time.Second):
		stop()
		return nil, fmt.Errorf("did not say where it listens within 60 s")
	}
}

// The wire format against stripe-mock: every request lapse sends — the
// retrieve, the session list with its filters, the cancel, the expire —
// passes stripe-mock's validation against Stripe's OpenAPI spec, and its
// answers parse. (stripe-mock keeps no state: its fixtures answer
// requires_payment_method whatever happened; the state-dependent paths are
// tested against stripetest.)
func TestWireFormatAgainstStripeMock(t *testing.T) {
	t.Parallel()
	g := newGateway(t, stripeMockURL, stripe.Config{Key: "sk_test_123"})
	ctx := context.Background()
	st, err := g.QueryAttempt(ctx, "o-1", "pi_lapse1")
	if err != nil || st.State != payment.StateNotPaid {
		t.Fatalf("query: %+v, %v; want NOT_PAID (the fixture is requires_payment_method)", st, err)
	}
	// The fixture's open session belongs to another PaymentIntent: not
	// expired; the PaymentIntent is cancelled.
	if err := g.CloseAttempt(ctx, "o-1", "pi_lapse1"); err != nil {
		t.Fatalf("close (cancel): %v", err)
	}
	// The PaymentIntent of the fixture's open session: the session is
	// expired (stripe-mock accepts the request as Stripe's spec has it).
	var list struct {
		Data []struct {
			ID            string `json:"id"`
			Status        string `json:"status"`
			PaymentIntent string `json:"payment_intent"`
		} `json:"data"`
	}
	req, _ := http.NewRequest("GET", stripeMockURL+"/v1/checkout/sessions", nil)
	req.Header.Set("Authorization", "Bearer sk_test_123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) == 0 ||
		list.Data[0].Status != "open" || !stripe.IsPaymentIntentID(list.Data[0].PaymentIntent) {
		t.Fatalf("stripe-mock's session fixture: %+v %v", list, err)
	}
	if err := g.CloseAttempt(ctx, "o-1", list.Data[0].PaymentIntent); err != nil {
		t.Fatalf("close (expire): %v", err)
	}
}

// stripe-mock echoes a key it refuses in its error message: lapse's error
// does not.
func TestStripeMockRefusalShowsNoKey(t *testing.T) {
	t.Parallel()
	key := "sk_live_lapseSecretValue42"
	g := newGateway(t, stripeMockURL, stripe.Config{Key: key})
	_, err := g.QueryAttempt(context.Background(), "o-1", "pi_1")
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "[redacted]") {
		t.Fatalf("%v, want a 401 with the key cut out", err)
	}
	if strings.Contains(err.Error(), "lapseSecretValue42") {
		t.Fatalf("the key in an error: %v", err)
	}
}

// The refund's requests — the list of a PaymentIntent's refunds, the
// create with payment_intent, amount, metadata and an Idempotency-Key —
// pass stripe-mock's validation, and its refund fixture (100 usd,
// succeeded) reads as a refund.
func TestRefundWireFormatAgainstStripeMock(t *testing.T) {
	t.Parallel()
	g := newGateway(t, stripeMockURL, stripe.Config{Key: "sk_test_123"})
	res, err := g.FindOrCreateRefund(context.Background(), payment.Refund{OrderID: "o-1", PaymentID: "pi_lapse1", AmountCents: 100,
		Currency: "USD", Key: payment.RefundKey("pi_lapse1"), Reason: "paid after the cancel"})
	if err != nil || res.RefundID == "" || res.State != payment.RefundSucceeded || res.Currency != "USD" {
		t.Fatalf("refund: %+v, %v", res, err)
	}
}
