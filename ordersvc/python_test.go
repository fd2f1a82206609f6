package ordersvc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/ordersvc/ordersvctest"
	"github.com/lapsehq/lapse/outbox/webhook"
)

// liveCommand is a command for orderID whose cancel_after has just passed,
// and its id.
func liveCommand(orderID string, cancelAfter time.Time) (ordersvc.Command, string) {
	return ordersvc.Command{
		Type: ordersvc.Type, OrderID: orderID, SchemaVersion: ordersvc.SchemaVersion,
		Deadline: ordersvc.FormatTime(cancelAfter.Add(-5 * time.Second)), CancelAfter: ordersvc.FormatTime(cancelAfter),
		AmountCents: 1299, Currency: "EUR", Attempts: []ordersvc.Attempt{},
	}, ordersvc.CommandID(orderID, cancelAfter)
}

// pyClient keeps connections to the Python receiver alive, as lapse's
// sender does, so its HTTP/1.1 keep-alive is exercised too.
var pyClient = &http.Client{Timeout: 30 * time.Second}

// post sends body to url as lapse does, signed by s as id now; it returns
// the status, the body, and the transport's error (a dropped answer).
func post(t *testing.T, url string, s *webhook.Signer, id string, attempt int, body []byte) (int, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(ordersvc.HeaderAttempt, strconv.Itoa(attempt))
	if err := s.SetHeaders(req.Header, id, time.Now(), body); err != nil {
		t.Fatal(err)
	}
	resp, err := pyClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	return resp.StatusCode, got, err
}

// The Python receiver, in another process with its own SQLite database,
// verifies what lapse's Signer signs (current and previous secret) and
// answers each of the five results as the contract says; a bad signature
// is 401 and applies nothing; a redelivery gets the same answer and is not
// applied twice; its faults (503s, answers dropped after applying, a
// restart) behave as lapse's end-to-end tests need.
func TestPythonReceiver(t *testing.T) {
	current, previous := newSecret(t), newSecret(t)
	py := ordersvctest.StartPython(t, ordersvctest.PythonConfig{
		Secrets: []string{current, previous},
		Env:     []string{"PAYING_RETRY_AFTER=7"},
	})
	lapse := newSigner(t, current, previous)
	py.Seed(
		ordersvctest.Order{ID: "o-pending", Status: "pending"},
		ordersvctest.Order{ID: "o-cancelled", Status: "cancelled"},
		ordersvctest.Order{ID: "o-paid", Status: "paid"},
		ordersvctest.Order{ID: "o-paying", Status: "paying"},
		ordersvctest.Order{ID: "o-forged", Status: "pending"},
		ordersvctest.Order{ID: "o-old-secret", Status: "pending"},
		ordersvctest.Order{ID: "o-dropped", Status: "pending"},
	)
	cancelAfter := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	send := func(t *testing.T, s *webhook.Signer, orderID string) (int, ordersvc.Answer, []byte) {
		t.Helper()
		c, id := liveCommand(orderID, cancelAfter)
		status, body, err := post(t, py.URL, s, id, 1, mustJSON(t, c))
		if err != nil {
			t.Fatalf("%s: %v", orderID, err)
		}
		var a ordersvc.Answer
		if status == http.StatusOK {
			a = decodeAnswer(t, body)
			if a.CommandID != id {
				t.Errorf("%s: command_id %q, want %q", orderID, a.CommandID, id)
			}
		}
		return status, a, body
	}

	// Through lapse's own sender, as the dispatcher sends.
	sender := func(secrets ...string) *ordersvc.HTTP {
		h, err := ordersvc.NewHTTP(ordersvc.HTTPConfig{URL: py.URL, Secrets: secrets})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	t.Run("the five results", func(t *testing.T) {
		for _, tc := range []struct {
			orderID string
			secrets []string
			want    ordersvc.Answer
		}{
			{"o-pending", []string{current, previous}, ordersvc.Answer{Result: ordersvc.Cancelled}},
			{"o-cancelled", []string{current, previous}, ordersvc.Answer{Result: ordersvc.AlreadyCancelled}},
			{"o-paid", []string{current, previous}, ordersvc.Answer{Result: ordersvc.AlreadyPaid}},
			{"o-paying", []string{current, previous}, ordersvc.Answer{Result: ordersvc.Paying, RetryAfterSeconds: 7}},
			{"o-unknown", []string{current, previous}, ordersvc.Answer{Result: ordersvc.NotFound}},
			// A lapse not yet given the new secret.
			{"o-old-secret", []string{previous}, ordersvc.Answer{Result: ordersvc.Cancelled}},
		} {
			c, id := liveCommand(tc.orderID, cancelAfter)
			got, err := sender(tc.secrets...).Send(context.Background(), ordersvc.Delivery{ID: id, Attempt: 1, Command: c})
			tc.want.CommandID = id
			if err != nil || got != tc.want {
				t.Errorf("%s: %+v, %v; want %+v", tc.orderID, got, err, tc.want)
			}
		}
		c, id := liveCommand("o-forged", cancelAfter)
		_, err := sender(newSecret(t)).Send(context.Background(), ordersvc.Delivery{ID: id, Attempt: 1, Command: c})
		var serr *ordersvc.StatusError
		if !errors.As(err, &serr) || serr.Code != http.StatusUnauthorized || !ordersvc.IsRefusal(err) {
			t.Errorf("signed with another secret: %v, want 401, refused for good", err)
		}
	})

	t.Run("a bad signature", func(t *testing.T) {
		if status, _, body := send(t, newSigner(t, newSecret(t)), "o-forged"); status != http.StatusUnauthorized || errorCode(body) != ordersvc.CodeInvalidSignature {
			t.Errorf("another secret: %d %s, want 401 %s", status, body, ordersvc.CodeInvalidSignature)
		}
		c, id := liveCommand("o-forged", cancelAfter)
		req, _ := http.NewRequest(http.MethodPost, py.URL, bytes.NewReader(mustJSON(t, c)))
		req.Header.Set("webhook-id", id)
		resp, err := pyClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || errorCode(got) != ordersvc.CodeMissingSignature {
			t.Errorf("unsigned: %d %s, want 401 %s", resp.StatusCode, got, ordersvc.CodeMissingSignature)
		}
		stale := mustJSON(t, c)
		req, _ = http.NewRequest(http.MethodPost, py.URL, bytes.NewReader(stale))
		if err := lapse.SetHeaders(req.Header, id, time.Now().Add(-10*time.Minute), stale); err != nil {
			t.Fatal(err)
		}
		if resp, err = pyClient.Do(req); err != nil {
			t.Fatal(err)
		}
		got, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || errorCode(got) != ordersvc.CodeStaleTimestamp {
			t.Errorf("10 minutes old: %d %s, want 401 %s", resp.StatusCode, got, ordersvc.CodeStaleTimestamp)
		}
		if got := py.Orders()["o-forged"]; got != "pending" {
			t.Errorf("o-forged is %s after refused commands, want pending", got)
		}
	})

	t.Run("an invalid command", func(t *testing.T) {
		c, id := liveCommand("o-forged", cancelAfter)
		c.SchemaVersion = 2
		if status, body, err := post(t, py.URL, lapse, id, 1, mustJSON(t, c)); err != nil || status != http.StatusBadRequest || errorCode(body) != ordersvc.CodeInvalidCommand {
			t.Errorf("schema_version 2: %d %s %v, want 400 %s", status, body, err, ordersvc.CodeInvalidCommand)
		}
	})

	t.Run("a redelivery", func(t *testing.T) {
		if status, a, body := send(t, lapse, "o-pending"); status != http.StatusOK || a.Result != ordersvc.Cancelled {
			t.Errorf("o-pending again: %d %s, want the first answer, cancelled", status, body)
		}
	})

	t.Run("faults", func(t *testing.T) {
		py.SetFaults(ordersvctest.Faults{Fail503Until: ordersvctest.Int(2)})
		for i := range 3 {
			want := map[bool]int{true: 503, false: 200}[i < 2]
			if status, _, body := send(t, lapse, "o-paid"); status != want {
				t.Errorf("delivery %d with 2 failures set: %d %s, want %d", i+1, status, body, want)
			}
		}

		py.SetFaults(ordersvctest.Faults{DropAnswerRate: ordersvctest.Float(1)})
		c, id := liveCommand("o-dropped", cancelAfter)
		if status, body, err := post(t, py.URL, lapse, id, 1, mustJSON(t, c)); err == nil {
			t.Errorf("dropping every answer: %d %s, want no answer", status, body)
		}
		if got := py.Orders()["o-dropped"]; got != "cancelled" {
			t.Errorf("o-dropped is %s after its answer was dropped, want cancelled (applied, then dropped)", got)
		}
		py.SetFaults(ordersvctest.Faults{DropAnswerRate: ordersvctest.Float(0)})
		if status, body, err := post(t, py.URL, lapse, id, 2, mustJSON(t, c)); err != nil || status != 200 || decodeAnswer(t, body).Result != ordersvc.Cancelled {
			t.Errorf("the retry: %d %s %v, want 200 cancelled, the answer that was dropped", status, body, err)
		}

		py.Restart()
		pyClient.CloseIdleConnections() // lapse's would fail once, and retry
		if status, a, body := send(t, lapse, "o-dropped"); status != http.StatusOK || a.Result != ordersvc.Cancelled {
			t.Errorf("after a restart: %d %s, want cancelled (the answers are in its database)", status, body)
		}
	})

	t.Run("status", func(t *testing.T) {
		for orderID, want := range map[string]ordersvc.OrderStatus{
			"o-pending": ordersvc.StatusCancelled, "o-paying": ordersvc.StatusPaying, "o-paid": ordersvc.StatusPaid,
			"o-forged": ordersvc.StatusPending, "o-unknown": ordersvc.StatusNotFound,
		} {
			req, err := ordersvc.NewStatusRequest(context.Background(), py.URL, lapse, orderID, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			resp, err := pyClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var got ordersvc.StatusAnswer
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			if resp.StatusCode != 200 || err != nil || got != (ordersvc.StatusAnswer{OrderID: orderID, Status: want}) {
				t.Errorf("status of %s: %d %+v %v, want %s", orderID, resp.StatusCode, got, err, want)
			}
		}
		req, _ := ordersvc.NewStatusRequest(context.Background(), py.URL, lapse, "o-paid", time.Now())
		q := req.URL.Query()
		q.Set("order_id", "o-forged")
		req.URL.RawQuery = q.Encode()
		resp, err := pyClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 401 || errorCode(got) != ordersvc.CodeStatusIDMismatch {
			t.Errorf("a request for o-paid asking about o-forged: %d %s, want 401 %s", resp.StatusCode, got, ordersvc.CodeStatusIDMismatch)
		}
	})

	// What lapse's end-to-end tests count: each cancel applied once,
	// however often its command came.
	perOrder := map[string]int{}
	for _, a := range py.Applied() {
		perOrder[a.OrderID]++
	}
	want := map[string]int{"o-pending": 1, "o-old-secret": 1, "o-dropped": 1}
	if len(perOrder) != len(want) {
		t.Errorf("applied %v, want %v", perOrder, want)
	}
	for id, n := range want {
		if perOrder[id] != n {
			t.Errorf("%s applied %d times, want %d", id, perOrder[id], n)
		}
	}
	var dropped, failed int
	for _, d := range py.Deliveries() {
		switch d.Outcome {
		case "dropped":
			dropped++
		case "503":
			failed++
		}
		if d.Attempt == "" || d.CancelAfter != ordersvc.FormatTime(cancelAfter) {
			t.Errorf("delivery %+v: want its lapse-attempt and cancel_after recorded", d)
		}
	}
	if dropped != 1 || failed != 2 {
		t.Errorf("deliveries: %d dropped and %d answered 503, want 1 and 2", dropped, failed)
	}
}
