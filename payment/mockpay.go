package payment

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/lapsehq/lapse/redact"
)

// MockConfig configures a Mock. Zero fields take the defaults named below.
// The switches (CallbackDelay … FailCloses) can also be changed while it runs,
// through POST /_control or SetControl.
type MockConfig struct {
	// CallbackURL is lapse's base URL (http://127.0.0.1:8080); callbacks go
	// to CallbackURL + "/v1/payments/notify". Defaults to none: no callback is
	// sent (each one counts as dropped).
	CallbackURL string
	// CallbackSecret signs every callback with Sign, in the SignatureHeader
	// header. Defaults to none: callbacks go unsigned, and lapse refuses them.
	CallbackSecret []byte
	// CallbackDelay holds every callback this long before its first delivery
	// attempt (a slow gateway: the callback arrives after the deadline).
	// Defaults to 0.
	CallbackDelay time.Duration
	// DropCallbacks drops every callback, SUCCEEDED and FAILED: the trade
	// changes, lapse is never told ("callback lost"). Defaults to false.
	DropCallbacks bool
	// SilentPaid sends no callback for a successful payment (FAILED ones are
	// still sent): a gateway that reports "paid" only when queried.
	// Defaults to false.
	SilentPaid bool
	// FailQueries answers every query with 503. Defaults to false.
	FailQueries bool
	// FailCloses answers every close with 503. Defaults to false.
	FailCloses bool
	// FailRefunds answers the next FailRefunds refunds with 500, refunding
	// nothing (a gateway down while lapse refunds). Defaults to 0.
	FailRefunds int64
	// CallbackAttempts is how many times a callback is sent before the mock
	// gives up on it (on a connection error or any non-2xx answer).
	// Defaults to 4.
	CallbackAttempts int
	// CallbackBackoff is the wait before the second attempt; it doubles for
	// each further one. Defaults to 200 ms.
	CallbackBackoff time.Duration
	// AuthToken, when set, is required as "Authorization: Bearer <token>" on
	// the protocol's routes (query, close, refund, pay); the /_… test routes stay
	// open. Defaults to none.
	AuthToken string
	// HTTPClient sends the callbacks. Defaults to a client with a 5 s timeout.
	HTTPClient *http.Client
	// Now is the clock callbacks are signed with. Defaults to time.Now.
	Now func() time.Time
	// Logger receives the callbacks given up on. Defaults to slog.Default().
	Logger *slog.Logger
}

func (c *MockConfig) setDefaults() {
	if c.CallbackAttempts <= 0 {
		c.CallbackAttempts = 4
	}
	if c.CallbackBackoff <= 0 {
		c.CallbackBackoff = 200 * time.Millisecond
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// MockControl is the mock's runtime switches, as GET and POST /_control
// read and write them. A POST changes only the fields it names.
type MockControl struct {
	CallbackDelayMS int64 `json:"callback_delay_ms"`
	DropCallbacks   bool  `json:"drop_callbacks"`
	FailQueries     bool  `json:"fail_queries"`
	FailCloses      bool  `json:"fail_closes"`
	SilentPaid      bool  `json:"silent_paid"`
	// FailRefunds is how many of the next refunds are answered 500.
	FailRefunds int64 `json:"fail_refunds"`
}

// MockStats counts what the mock was asked and did (GET /_stats, or
// GET /_stats?order_id=… for one order).
type MockStats struct {
	Queries            int64 `json:"queries"`             // GET /payments/{id}, failed ones included
	Closes             int64 `json:"closes"`              // POST /payments/{id}/close, failed ones included
	Pays               int64 `json:"pays"`                // POST /payments/{id}/pay
	Refunds            int64 `json:"refunds"`             // POST /payments/{id}/refund, failed and repeated ones included
	CallbacksSent      int64 `json:"callbacks_sent"`      // delivery attempts (HTTP requests to lapse)
	CallbacksDelivered int64 `json:"callbacks_delivered"` // callbacks lapse answered with a 2xx
	CallbacksFailed    int64 `json:"callbacks_failed"`    // callbacks given up after CallbackAttempts
	CallbacksDropped   int64 `json:"callbacks_dropped"`   // callbacks never sent (drop_callbacks, silent_paid, no CallbackURL)
	CallbacksPending   int64 `json:"callbacks_pending"`   // callbacks waiting or being delivered
}

// MockTrade is what the mock knows of one order, in the query's JSON shape.
type MockTrade struct {
	OrderID     string `json:"order_id"`
	Status      State  `json:"status"`
	AmountCents int64  `json:"amount_cents"`
	PaymentID   string `json:"payment_id"`
}

// MockRefund is a refund the mock made (GET /_refunds): one per refund_key.
type MockRefund struct {
	RefundID    string `json:"refund_id"`
	RefundKey   string `json:"refund_key"`
	OrderID     string `json:"order_id"`
	PaymentID   string `json:"payment_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// Pay outcomes, as the buyer's POST /payments/{id}/pay names them.
const (
	OutcomeSucceeded = "SUCCEEDED" // the trade is PAID; a SUCCEEDED callback is sent
	OutcomeFailed    = "FAILED"    // the trade is NOT_PAID; a FAILED callback is sent
	OutcomePending   = "PENDING"   // the payment is in progress: PENDING, no callback
)

// ErrTradeClosed is returned by Mock.Pay for a trade that was closed.
var ErrTradeClosed = errors.New("payment: mock: trade closed")

// Mock is an in-memory payment gateway speaking HTTPGateway's protocol, for
// `lapse mockpay` and end-to-end tests. Besides the protocol it serves:
//
//	POST /payments/{order_id}/pay {"amount_cents", "outcome"?, "payment_id"?}
//	     the buyer pays at the gateway. outcome is SUCCEEDED (the default),
//	     FAILED or PENDING; payment_id defaults to a generated one. 200 with
//	     the trade; 409 {"status":"CLOSED"|"PAID"} if the trade was closed or
//	     already paid. SUCCEEDED and FAILED send a signed callback
//	     {"order_id","payment_id","status","amount_cents"} to lapse, retried
//	     with backoff.
//	GET  /_control, POST /_control {"callback_delay_ms","drop_callbacks",
//	     "fail_queries","fail_closes","silent_paid","fail_refunds"}   the switches
//	GET  /_stats[?order_id=…]   request counters (MockStats)
//	GET  /_refunds[?order_id=…] the refunds made (MockRefund), in order
//	GET  /_statement            every trade as a reconciliation statement:
//	     CSV order_id,payment_id,status,amount_cents with a header line
//	GET  /healthz
//
// A query of an order the mock never saw answers 404 {"order_id", "status":
// "NOT_PAID"}. A close of such an order records it CLOSED, so a later payment
// is refused, as a real gateway's close must. A refund (the protocol's
// refund route) gives back the whole of the payment that paid the trade —
// the mock refunds no part of one — once per refund_key, and once per
// payment. It is safe for concurrent use.
// Close it to stop its pending callbacks.
type Mock struct {
	cfg    MockConfig
	mux    *http.ServeMux
	prefix string // of generated payment ids

	mu     sync.Mutex
	ctl    MockControl
	trades map[string]*MockTrade
	total  MockStats
	per    map[string]*MockStats
	seq    int64
	// refunds are the refunds made, in order; byKey indexes them.
	refunds []*MockRefund
	byKey   map[string]*MockRefund
	closed  bool // no callback goroutine starts once set

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewMock returns a mock gateway.
func NewMock(cfg MockConfig) *Mock {
	cfg.setDefaults()
	var p [4]byte
	_, _ = rand.Read(p[:])
	ctx, cancel := context.WithCancel(context.Background())
	m := &Mock{
		cfg: cfg, prefix: "mp_" + hex.EncodeToString(p[:]) + "_",
		ctl: MockControl{
			CallbackDelayMS: cfg.CallbackDelay.Milliseconds(), DropCallbacks: cfg.DropCallbacks,
			FailQueries: cfg.FailQueries, FailCloses: cfg.FailCloses, SilentPaid: cfg.SilentPaid,
			FailRefunds: max(cfg.FailRefunds, 0),
		},
		trades: map[string]*MockTrade{}, per: map[string]*MockStats{}, byKey: map[string]*MockRefund{},
		ctx: ctx, cancel: cancel,
	}
	mux := http.NewServeMux()
	mux.Handle("GET /payments/{order_id}", m.authed(m.serveQuery))
	mux.Handle("POST /payments/{order_id}/close", m.authed(m.serveClose))
	mux.Handle("POST /payments/{order_id}/pay", m.authed(m.servePay))
	mux.Handle("POST /payments/{order_id}/refund", m.authed(m.serveRefund))
	mux.HandleFunc("GET /_refunds", func(w http.ResponseWriter, r *http.Request) {
		writeMockJSON(w, http.StatusOK, m.Refunds(r.URL.Query().Get("order_id")))
	})
	mux.HandleFunc("GET /_control", func(w http.ResponseWriter, r *http.Request) { writeMockJSON(w, http.StatusOK, m.Control()) })
	mux.HandleFunc("POST /_control", m.serveSetControl)
	mux.HandleFunc("GET /_stats", func(w http.ResponseWriter, r *http.Request) {
		if id := r.URL.Query().Get("order_id"); id != "" {
			writeMockJSON(w, http.StatusOK, m.OrderStats(id))
			return
		}
		writeMockJSON(w, http.StatusOK, m.Stats())
	})
	mux.HandleFunc("GET /_statement", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/csv")
		_ = m.WriteStatement(w)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeMockJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	m.mux = mux
	return m
}

// ServeHTTP implements http.Handler.
func (m *Mock) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.mux.ServeHTTP(w, r) }

// ListenAndServe listens on addr and serves until ctx ends (see Serve).
func (m *Mock) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("payment: mock: %w", err)
	}
	return m.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then shuts the server down (waiting up
// to 5 s for requests in flight) and closes the mock. It returns nil after
// ctx ends, or the server's error.
func (m *Mock) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: m, ReadHeaderTimeout: 5 * time.Second}
	m.cfg.Logger.Info("mock payment gateway listening", "addr", ln.Addr().String(), "callback_url", redact.URL(m.cfg.CallbackURL))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	defer m.Close()
	select {
	case err := <-errc:
		return fmt.Errorf("payment: mock: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		<-errc
		if err != nil {
			return fmt.Errorf("payment: mock: shutdown: %w", err)
		}
		return nil
	}
}

// Close stops the callbacks waiting or being retried (they count as failed)
// and waits for their goroutines. The handler still answers afterwards, but
// sends no more callbacks.
func (m *Mock) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	return nil
}

// Control returns the current switches.
func (m *Mock) Control() MockControl {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ctl
}

// SetControl replaces the switches.
func (m *Mock) SetControl(c MockControl) {
	m.mu.Lock()
	m.ctl = c
	m.mu.Unlock()
}

// Stats returns the counters over every order.
func (m *Mock) Stats() MockStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total
}

// OrderStats returns the counters of one order (zero if never named).
func (m *Mock) OrderStats(orderID string) MockStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.per[orderID]; s != nil {
		return *s
	}
	return MockStats{}
}

// count applies f to the totals and to orderID's counters. m.mu must be held.
func (m *Mock) count(orderID string, f func(*MockStats)) {
	f(&m.total)
	s := m.per[orderID]
	if s == nil {
		s = &MockStats{}
		m.per[orderID] = s
	}
	f(s)
}

// Trade returns what the mock knows of an order, without counting a query.
func (m *Mock) Trade(orderID string) (MockTrade, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.trades[orderID]; t != nil {
		return *t, true
	}
	return MockTrade{}, false
}

// WriteStatement writes every trade, sorted by order id, as the CSV
// statement `lapse reconcile --statement` reads.
func (m *Mock) WriteStatement(w io.Writer) error {
	m.mu.Lock()
	trades := make([]MockTrade, 0, len(m.trades))
	for _, t := range m.trades {
		trades = append(trades, *t)
	}
	m.mu.Unlock()
	slices.SortFunc(trades, func(a, b MockTrade) int {
		if a.OrderID < b.OrderID {
			return -1
		} else if a.OrderID > b.OrderID {
			return 1
		}
		return 0
	})
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"order_id", "payment_id", "status", "amount_cents"})
	for _, t := range trades {
		_ = cw.Write([]string{t.OrderID, t.PaymentID, string(t.Status), strconv.FormatInt(t.AmountCents, 10)})
	}
	cw.Flush()
	return cw.Error()
}

// Pay is the buyer paying at the gateway (what POST /payments/{id}/pay does).
// paymentID may be empty (one is generated). It returns the trade and the
// payment id of this attempt, ErrTradeClosed or ErrAlreadyPaid.
func (m *Mock) Pay(orderID string, amountCents int64, outcome, paymentID string) (MockTrade, error) {
	switch outcome {
	case "":
		outcome = OutcomeSucceeded
	case OutcomeSucceeded, OutcomeFailed, OutcomePending:
	default:
		return MockTrade{}, fmt.Errorf("payment: mock: outcome %q: want SUCCEEDED, FAILED or PENDING", outcome)
	}
	if orderID == "" || amountCents < 0 {
		return MockTrade{}, errors.New("payment: mock: want an order id and amount_cents >= 0")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.count(orderID, func(s *MockStats) { s.Pays++ })
	t := m.trades[orderID]
	if t == nil {
		t = &MockTrade{OrderID: orderID, Status: StateNotPaid}
		m.trades[orderID] = t
	}
	switch t.Status {
	case StateClosed:
		return *t, ErrTradeClosed
	case StatePaid:
		return *t, ErrAlreadyPaid
	}
	if paymentID == "" {
		m.seq++
		paymentID = m.prefix + strconv.FormatInt(m.seq, 10)
	}
	t.AmountCents, t.PaymentID = amountCents, paymentID
	switch outcome {
	case OutcomeSucceeded:
		t.Status = StatePaid
	case OutcomeFailed:
		t.Status = StateNotPaid
	case OutcomePending:
		t.Status = StatePending
		return *t, nil
	}
	res := *t
	cb := mockCallback{OrderID: orderID, PaymentID: paymentID, Status: outcome, AmountCents: amountCents}
	switch {
	case m.cfg.CallbackURL == "", m.ctl.DropCallbacks, m.ctl.SilentPaid && outcome == OutcomeSucceeded:
		m.count(orderID, func(s *MockStats) { s.CallbacksDropped++ })
	case m.closed:
		m.count(orderID, func(s *MockStats) { s.CallbacksFailed++ })
	default:
		m.count(orderID, func(s *MockStats) { s.CallbacksPending++ })
		m.wg.Add(1)
		go m.deliver(cb, time.Duration(m.ctl.CallbackDelayMS)*time.Millisecond)
	}
	return res, nil
}

// mockCallback is the body of POST /v1/payments/notify.
type mockCallback struct {
	OrderID     string `json:"order_id"`
	PaymentID   string `json:"payment_id"`
	Status      string `json:"status"`
	AmountCents int64  `json:"amount_cents"`
}

// deliver sends one callback after delay, with retries.
func (m *Mock) deliver(cb mockCallback, delay time.Duration) {
	defer m.wg.Done()
	delivered := false
	defer func() {
		m.mu.Lock()
		m.count(cb.OrderID, func(s *MockStats) {
			s.CallbacksPending--
			if delivered {
				s.CallbacksDelivered++
			} else {
				s.CallbacksFailed++
			}
		})
		m.mu.Unlock()
	}()
	if !m.sleep(delay) {
		return
	}
	body, _ := json.Marshal(cb)
	backoff := m.cfg.CallbackBackoff
	var err error
	for attempt := 1; ; attempt++ {
		m.mu.Lock()
		m.count(cb.OrderID, func(s *MockStats) { s.CallbacksSent++ })
		m.mu.Unlock()
		if err = m.post(body); err == nil {
			delivered = true
			return
		}
		if attempt >= m.cfg.CallbackAttempts || !m.sleep(backoff) {
			break
		}
		backoff *= 2
	}
	m.cfg.Logger.Warn("mock gateway gave up on a callback", "order_id", cb.OrderID, "status", cb.Status, "err", err)
}

// sleep waits d, or returns false if the mock is closed first.
func (m *Mock) sleep(d time.Duration) bool {
	if d <= 0 {
		return m.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-m.ctx.Done():
		return false
	}
}

func (m *Mock) post(body []byte) error {
	req, err := http.NewRequestWithContext(m.ctx, http.MethodPost, m.cfg.CallbackURL+"/v1/payments/notify", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if len(m.cfg.CallbackSecret) > 0 {
		req.Header.Set(SignatureHeader, Sign(m.cfg.CallbackSecret, m.cfg.Now(), body))
	}
	resp, err := m.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("lapse answered %d: %s", resp.StatusCode, bytes.TrimSpace(answer))
	}
	return nil
}

func (m *Mock) authed(h http.HandlerFunc) http.Handler {
	if m.cfg.AuthToken == "" {
		return h
	}
	want := []byte("Bearer " + m.cfg.AuthToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			writeMockJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong bearer token"})
			return
		}
		h(w, r)
	})
}

// The mock keeps one trade per order, the last attempt paid into it. Asked
// about one attempt (?payment_id=), it answers the trade if that attempt is
// the trade's, and NOT_PAID for any other (a later attempt replaced it).
func (m *Mock) serveQuery(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("order_id")
	attempt := r.URL.Query().Get("payment_id")
	m.mu.Lock()
	m.count(id, func(s *MockStats) { s.Queries++ })
	fail := m.ctl.FailQueries
	t, ok := m.trades[id]
	var trade MockTrade
	if ok {
		trade = *t
	}
	m.mu.Unlock()
	if ok && attempt != "" && trade.PaymentID != "" && trade.PaymentID != attempt {
		trade = MockTrade{OrderID: id, Status: StateNotPaid}
	}
	switch {
	case fail:
		writeMockJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "queries are failing (fail_queries)"})
	case !ok:
		writeMockJSON(w, http.StatusNotFound, map[string]string{"order_id": id, "status": string(StateNotPaid)})
	default:
		writeMockJSON(w, http.StatusOK, trade)
	}
}

func (m *Mock) serveClose(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("order_id")
	attempt := r.URL.Query().Get("payment_id")
	m.mu.Lock()
	m.count(id, func(s *MockStats) { s.Closes++ })
	if m.ctl.FailCloses {
		m.mu.Unlock()
		writeMockJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "closes are failing (fail_closes)"})
		return
	}
	if t := m.trades[id]; t != nil && attempt != "" && t.PaymentID != "" && t.PaymentID != attempt {
		// Another attempt holds the trade: this one is not open.
		m.mu.Unlock()
		writeMockJSON(w, http.StatusOK, map[string]string{"status": string(StateClosed)})
		return
	}
	t := m.trades[id]
	if t == nil {
		t = &MockTrade{OrderID: id}
		m.trades[id] = t
	}
	paid := t.Status == StatePaid
	if !paid {
		t.Status = StateClosed
	}
	m.mu.Unlock()
	if paid {
		writeMockJSON(w, http.StatusConflict, map[string]string{"status": string(StatePaid)})
		return
	}
	writeMockJSON(w, http.StatusOK, map[string]string{"status": string(StateClosed)})
}

func (m *Mock) servePay(w http.ResponseWriter, r *http.Request) {
	var b struct {
		AmountCents *int64 `json:"amount_cents"`
		Outcome     string `json:"outcome"`
		PaymentID   string `json:"payment_id"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil || b.AmountCents == nil {
		writeMockJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"amount_cents", "outcome"?, "payment_id"?}`})
		return
	}
	t, err := m.Pay(r.PathValue("order_id"), *b.AmountCents, b.Outcome, b.PaymentID)
	switch {
	case errors.Is(err, ErrTradeClosed):
		writeMockJSON(w, http.StatusConflict, map[string]string{"order_id": t.OrderID, "status": string(StateClosed)})
	case errors.Is(err, ErrAlreadyPaid):
		writeMockJSON(w, http.StatusConflict, map[string]string{"order_id": t.OrderID, "status": string(StatePaid)})
	case err != nil:
		writeMockJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
	default:
		writeMockJSON(w, http.StatusOK, t)
	}
}

func (m *Mock) serveSetControl(w http.ResponseWriter, r *http.Request) {
	var b struct {
		CallbackDelayMS *int64 `json:"callback_delay_ms"`
		DropCallbacks   *bool  `json:"drop_callbacks"`
		FailQueries     *bool  `json:"fail_queries"`
		FailCloses      *bool  `json:"fail_closes"`
		SilentPaid      *bool  `json:"silent_paid"`
		FailRefunds     *int64 `json:"fail_refunds"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil || (b.CallbackDelayMS != nil && *b.CallbackDelayMS < 0) || (b.FailRefunds != nil && *b.FailRefunds < 0) {
		writeMockJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("want a subset of %s with callback_delay_ms and fail_refunds >= 0", `{"callback_delay_ms","drop_callbacks","fail_queries","fail_closes","silent_paid","fail_refunds"}`)})
		return
	}
	m.mu.Lock()
	set := func(dst *bool, src *bool) {
		if src != nil {
			*dst = *src
		}
	}
	if b.CallbackDelayMS != nil {
		m.ctl.CallbackDelayMS = *b.CallbackDelayMS
	}
	set(&m.ctl.DropCallbacks, b.DropCallbacks)
	set(&m.ctl.FailQueries, b.FailQueries)
	set(&m.ctl.FailCloses, b.FailCloses)
	set(&m.ctl.SilentPaid, b.SilentPaid)
	if b.FailRefunds != nil {
		m.ctl.FailRefunds = *b.FailRefunds
	}
	ctl := m.ctl
	m.mu.Unlock()
	writeMockJSON(w, http.StatusOK, ctl)
}

// Refunds returns the refunds the mock made, in order: of one order, or of
// every order when orderID is "".
func (m *Mock) Refunds(orderID string) []MockRefund {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []MockRefund{}
	for _, rf := range m.refunds {
		if orderID == "" || rf.OrderID == orderID {
			out = append(out, *rf)
		}
	}
	return out
}

// serveRefund is the protocol's refund route (HTTPGateway.Refund).
func (m *Mock) serveRefund(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("order_id")
	var b refundBody
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil || b.PaymentID == "" || b.AmountCents <= 0 || b.RefundKey == "" {
		writeMockJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"payment_id", "amount_cents" > 0, "refund_key", "currency"?, "reason"?}`})
		return
	}
	if k := r.Header.Get("Idempotency-Key"); k != "" && k != b.RefundKey {
		writeMockJSON(w, http.StatusBadRequest, map[string]string{"error": "Idempotency-Key and refund_key differ"})
		return
	}
	status, answer := m.refund(id, b)
	writeMockJSON(w, status, answer)
}

// refund applies one refund request and returns the answer to send.
func (m *Mock) refund(orderID string, b refundBody) (int, any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.count(orderID, func(s *MockStats) { s.Refunds++ })
	if m.ctl.FailRefunds > 0 {
		m.ctl.FailRefunds--
		return http.StatusInternalServerError, map[string]string{"error": "refunds are failing (fail_refunds)"}
	}
	refusal := func(status int, reason string) (int, any) {
		return status, map[string]string{"error": reason, "order_id": orderID, "payment_id": b.PaymentID}
	}
	if rf := m.byKey[b.RefundKey]; rf != nil {
		if rf.OrderID != orderID || rf.PaymentID != b.PaymentID || rf.AmountCents != b.AmountCents {
			return refusal(http.StatusConflict, refusalKeyReused)
		}
		return http.StatusOK, mockRefundAnswer(rf)
	}
	t := m.trades[orderID]
	switch {
	case t == nil || t.PaymentID != b.PaymentID:
		return refusal(http.StatusNotFound, refusalUnknownPayment)
	case t.Status != StatePaid:
		return refusal(http.StatusConflict, refusalNotPaid)
	}
	for _, rf := range m.refunds {
		if rf.OrderID == orderID && rf.PaymentID == b.PaymentID {
			return refusal(http.StatusConflict, refusalAlreadyRefunded)
		}
	}
	if b.AmountCents != t.AmountCents {
		return refusal(http.StatusConflict, refusalPartial)
	}
	m.seq++
	rf := &MockRefund{RefundID: m.prefix + "re_" + strconv.FormatInt(m.seq, 10), RefundKey: b.RefundKey, OrderID: orderID,
		PaymentID: b.PaymentID, AmountCents: b.AmountCents, Currency: b.Currency, Reason: b.Reason}
	m.refunds = append(m.refunds, rf)
	m.byKey[rf.RefundKey] = rf
	return http.StatusOK, mockRefundAnswer(rf)
}

func mockRefundAnswer(rf *MockRefund) map[string]any {
	return map[string]any{"refund_id": rf.RefundID, "status": string(RefundSucceeded), "amount_cents": rf.AmountCents,
		"currency": rf.Currency, "order_id": rf.OrderID, "payment_id": rf.PaymentID}
}

func writeMockJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
