package reference

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"unicode"

	"github.com/lapsehq/lapse/internal/sameorigin"
	"github.com/lapsehq/lapse/inventory"
)

// Limits of what the HTTP API accepts, so that a request can neither fill
// the database with huge keys nor hold the server reading.
const (
	maxBody  = 1 << 20
	maxID    = 200 // reservation ids, order ids, SKUs, idempotency keys
	maxItems = 1000
	maxQty   = 1_000_000_000
	// DefaultLedgerLimit and MaxLedgerLimit bound a GET /ledger page.
	DefaultLedgerLimit = 100
	MaxLedgerLimit     = 1000
)

// Error codes of the HTTP API besides the rejection reasons (ReasonReleased,
// …, inventory.ReasonInsufficientStock), in {"error": {"code", "message"}}.
const (
	CodeInvalidJSON      = "invalid_json"
	CodeInvalidCommand   = "invalid_command"
	CodeInvalidSKU       = "invalid_sku"
	CodeInvalidAvailable = "invalid_available"
	CodeInvalidParameter = "invalid_parameter"
	CodeAlreadyDone      = "already_done"
	CodeUnknownSKU       = "unknown_sku"
	CodeUnavailable      = "unavailable"
)

// errorBody is every error's JSON.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	var b errorBody
	b.Error.Code, b.Error.Message = code, message
	writeJSON(w, status, b)
}

// reservationBody is POST /reservations' request.
type reservationBody struct {
	ReservationID string           `json:"reservation_id"`
	OrderID       string           `json:"order_id"`
	Items         []inventory.Item `json:"items"`
}

// commandAnswer is a command's successful answer.
type commandAnswer struct {
	ReservationID string `json:"reservation_id"`
	Status        string `json:"status"`
}

// commands serves the command routes on an Applier.
type commands struct {
	a      inventory.Applier
	logger *slog.Logger
}

// CommandHandler serves the three stock commands of the HTTP transport on
// a — the routes inventory.NewHTTPClient calls, and all an inventory of
// one's own must answer:
//
//	POST /reservations {"reservation_id"?, "order_id"?, "items": [{"sku", "qty"}]}
//	     201 {"reservation_id", "status": "RESERVED"} when reserved now,
//	     200 with the same body when it was reserved before;
//	     409 insufficient_stock, 409 released (released before: never
//	     reserved again); 422 for another rejection.
//	POST /reservations/{id}/release, POST /reservations/{id}/confirm
//	     200 {"reservation_id", "status": "RELEASED" | "CONFIRMED"};
//	     409 already_done when that action was applied before;
//	     422 released, confirmed or unknown_reservation when it cannot be.
//
// A body must be declared Content-Type: application/json (415
// unsupported_media_type otherwise). Every command takes an
// Idempotency-Key header (lapse's task id), recorded
// in the ledger. A reserve without a reservation_id gets one derived from
// the key, so its retries land on the same reservation, or a random one
// without a key. Bad input is 400 and applies nothing; a failure of a
// (its database, the fail switch) is 503, and so is a request whose
// client went away; an answer withheld (inventory.ErrWithhold) closes the
// connection without a response.
func CommandHandler(a inventory.Applier, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.Default()
	}
	c := commands{a: a, logger: logger}
	mux := http.NewServeMux()
	c.register(mux)
	return mux
}

func (c commands) register(mux *http.ServeMux) {
	mux.HandleFunc("POST /reservations", c.reserve)
	mux.HandleFunc("POST /reservations/{id}/release", func(w http.ResponseWriter, r *http.Request) { c.follow(w, r, inventory.Release) })
	mux.HandleFunc("POST /reservations/{id}/confirm", func(w http.ResponseWriter, r *http.Request) { c.follow(w, r, inventory.Confirm) })
}

// validID reports whether s is usable as an id: not empty, not too long,
// no control characters (it goes into logs and URLs).
func validID(s string) bool {
	return s != "" && len(s) <= maxID && !strings.ContainsFunc(s, unicode.IsControl)
}

// taskID returns the request's Idempotency-Key, or a random one.
func taskID(r *http.Request) (string, bool) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		return "http_" + randomHex(12), true
	}
	return key, validID(key)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// decode reads a JSON body into v; an empty body leaves v as it is when
// emptyOK. A body, or a Content-Type, that is not declared JSON is refused
// (415): a page of another site can make a browser send text/plain, form
// and multipart bodies without asking first, never JSON.
func decode(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) bool {
	if !emptyOK || r.ContentLength != 0 || r.Header.Get("Content-Type") != "" {
		if e := sameorigin.RequireJSON(r); e != nil {
			writeError(w, e.Status, e.Code, e.Message)
			return false
		}
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidJSON, "body unreadable or larger than 1 MiB")
		return false
	}
	if len(strings.TrimSpace(string(b))) == 0 && emptyOK {
		return true
	}
	if err := json.Unmarshal(b, v); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidJSON, "body is not the expected JSON object: "+err.Error())
		return false
	}
	return true
}

// validItems says what is wrong with a command's items, or "".
func validItems(items []inventory.Item, required bool) string {
	if required && len(items) == 0 {
		return "items: want at least one {\"sku\", \"qty\"}"
	}
	if len(items) > maxItems {
		return fmt.Sprintf("items: at most %d", maxItems)
	}
	for _, it := range items {
		if !validID(it.SKU) || it.Qty <= 0 || it.Qty > maxQty {
			return fmt.Sprintf("items: %q×%d: want a sku of 1 to %d characters and 0 < qty <= %d", it.SKU, it.Qty, maxID, maxQty)
		}
	}
	return ""
}

func (c commands) reserve(w http.ResponseWriter, r *http.Request) {
	var body reservationBody
	if !decode(w, r, &body, false) {
		return
	}
	task, ok := taskID(r)
	if !ok {
		writeError(w, http.StatusBadRequest, CodeInvalidCommand, "Idempotency-Key: want 1 to 200 characters, no control characters")
		return
	}
	if body.ReservationID == "" {
		if r.Header.Get("Idempotency-Key") != "" {
			sum := sha256.Sum256([]byte(task))
			body.ReservationID = "rsv_" + hex.EncodeToString(sum[:16])
		} else {
			body.ReservationID = "rsv_" + randomHex(16)
		}
	}
	if !validID(body.ReservationID) || (body.OrderID != "" && !validID(body.OrderID)) {
		writeError(w, http.StatusBadRequest, CodeInvalidCommand, "reservation_id and order_id: want 1 to 200 characters, no control characters")
		return
	}
	if msg := validItems(body.Items, true); msg != "" {
		writeError(w, http.StatusBadRequest, CodeInvalidCommand, msg)
		return
	}
	cmd := inventory.Command{TaskID: task, Action: inventory.Reserve, ReservationID: body.ReservationID, OrderID: body.OrderID, Items: body.Items}
	c.apply(w, r, cmd, func(ans inventory.Answer) {
		ok := commandAnswer{ReservationID: cmd.ReservationID, Status: StatusReserved}
		switch {
		case ans.Result == inventory.Success:
			writeJSON(w, http.StatusCreated, ok)
		case ans.Result == inventory.AlreadyDone:
			writeJSON(w, http.StatusOK, ok)
		case ans.Reason == inventory.ReasonInsufficientStock:
			writeError(w, http.StatusConflict, ans.Reason, "not enough stock available for every item; nothing was reserved")
		case ans.Reason == ReasonReleased:
			writeError(w, http.StatusConflict, ans.Reason, "the reservation was released; it is never reserved again")
		default:
			c.rejected(w, ans)
		}
	})
}

// follow serves release and confirm.
func (c commands) follow(w http.ResponseWriter, r *http.Request, action inventory.Action) {
	id := r.PathValue("id")
	// The body is optional: lapse sends the order id and items, which the
	// reference does not need (it moves the reservation's own items).
	var body reservationBody
	if !decode(w, r, &body, true) {
		return
	}
	task, ok := taskID(r)
	if !ok {
		writeError(w, http.StatusBadRequest, CodeInvalidCommand, "Idempotency-Key: want 1 to 200 characters, no control characters")
		return
	}
	if !validID(id) || (body.OrderID != "" && !validID(body.OrderID)) {
		writeError(w, http.StatusBadRequest, CodeInvalidCommand, "reservation id and order_id: want 1 to 200 characters, no control characters")
		return
	}
	if msg := validItems(body.Items, false); msg != "" {
		writeError(w, http.StatusBadRequest, CodeInvalidCommand, msg)
		return
	}
	cmd := inventory.Command{TaskID: task, Action: action, ReservationID: id, OrderID: body.OrderID, Items: body.Items}
	status := StatusReleased
	if action == inventory.Confirm {
		status = StatusConfirmed
	}
	c.apply(w, r, cmd, func(ans inventory.Answer) {
		switch ans.Result {
		case inventory.Success:
			writeJSON(w, http.StatusOK, commandAnswer{ReservationID: id, Status: status})
		case inventory.AlreadyDone:
			writeError(w, http.StatusConflict, CodeAlreadyDone, fmt.Sprintf("%s of %s was applied before", action, id))
		default:
			c.rejected(w, ans)
		}
	})
}

// rejected writes a rejection other than reserve's two 409s.
func (c commands) rejected(w http.ResponseWriter, ans inventory.Answer) {
	status := http.StatusUnprocessableEntity
	if ans.Reason == ReasonInvalidCommand {
		status = http.StatusBadRequest
	}
	reason := ans.Reason
	if reason == "" {
		reason = "rejected"
	}
	writeError(w, status, reason, "the inventory refuses this command: "+reason)
}

// apply runs cmd and has write answer it, or answers the failure.
func (c commands) apply(w http.ResponseWriter, r *http.Request, cmd inventory.Command, write func(inventory.Answer)) {
	ans, err := c.a.Apply(r.Context(), cmd)
	switch {
	case errors.Is(err, inventory.ErrWithhold):
		withhold(w)
	case errors.Is(err, ErrFail):
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the inventory is failing on purpose (fault switch)")
	case err != nil:
		if !errors.Is(err, context.Canceled) {
			c.logger.Error("inventory: command failed", "action", cmd.Action, "reservation_id", cmd.ReservationID, "task_id", cmd.TaskID, "err", err)
		}
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the inventory could not apply the command; send it again")
	default:
		write(ans)
	}
}

// withhold ends the request with no response at all: the connection is
// closed under the client, as when the inventory dies after its commit.
func withhold(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler) // HTTP/2: reset the stream
}

// routes serves the whole API of a Server.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	commands{a: s.faulty, logger: s.logger}.register(mux)
	mux.HandleFunc("PUT /skus/{sku}", s.putSKU)
	mux.HandleFunc("GET /skus/{sku}", s.getSKU)
	mux.HandleFunc("GET /reservations/{id}", s.getReservation)
	mux.HandleFunc("GET /ledger", s.getLedger)
	mux.HandleFunc("GET /faults", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.faulty.Faults()) })
	mux.HandleFunc("POST /faults", s.postFaults)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.store.Ping(r.Context()); err != nil {
			writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the store does not answer")
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return mux
}

func (s *Server) storeError(w http.ResponseWriter, what string, err error) {
	if !errors.Is(err, context.Canceled) {
		s.logger.Error("inventory: "+what, "err", err)
	}
	writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the inventory's store failed")
}

func (s *Server) putSKU(w http.ResponseWriter, r *http.Request) {
	sku := r.PathValue("sku")
	var body struct {
		Available *int64 `json:"available"`
	}
	if !decode(w, r, &body, false) {
		return
	}
	if !validID(sku) {
		writeError(w, http.StatusBadRequest, CodeInvalidSKU, "sku: want 1 to 200 characters, no control characters")
		return
	}
	if body.Available == nil || *body.Available < 0 || *body.Available > maxQty {
		writeError(w, http.StatusBadRequest, CodeInvalidAvailable, fmt.Sprintf("available: want 0 to %d", maxQty))
		return
	}
	k, err := s.store.SetAvailable(r.Context(), sku, *body.Available)
	if err != nil {
		s.storeError(w, "set available", err)
		return
	}
	writeJSON(w, http.StatusOK, k)
}

func (s *Server) getSKU(w http.ResponseWriter, r *http.Request) {
	k, err := s.store.SKU(r.Context(), r.PathValue("sku"))
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, CodeUnknownSKU, "no such SKU")
	case err != nil:
		s.storeError(w, "get sku", err)
	default:
		writeJSON(w, http.StatusOK, k)
	}
}

func (s *Server) getReservation(w http.ResponseWriter, r *http.Request) {
	res, err := s.store.Reservation(r.Context(), r.PathValue("id"))
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, ReasonUnknownReservation, "no such reservation")
	case err != nil:
		s.storeError(w, "get reservation", err)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

// LedgerPage is GET /ledger's answer. Next is the after of the following
// page, nil on the last one.
type LedgerPage struct {
	Rows []LedgerRow `json:"rows"`
	Next *int64      `json:"next"`
}

func (s *Server) getLedger(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, limit := int64(0), DefaultLedgerLimit
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, CodeInvalidParameter, "after: want a ledger seq, 0 or more")
			return
		}
		after = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLedgerLimit {
			writeError(w, http.StatusBadRequest, CodeInvalidParameter, fmt.Sprintf("limit: want 1 to %d", MaxLedgerLimit))
			return
		}
		limit = n
	}
	rows, err := s.store.Ledger(r.Context(), after, limit+1)
	if err != nil {
		s.storeError(w, "ledger", err)
		return
	}
	page := LedgerPage{Rows: rows}
	if len(rows) > limit {
		page.Rows = rows[:limit]
		next := page.Rows[limit-1].Seq
		page.Next = &next
	}
	writeJSON(w, http.StatusOK, page)
}

// postFaults changes the switches the body names, and answers all of them.
func (s *Server) postFaults(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Fail        *bool  `json:"fail"`
		DelayMS     *int64 `json:"delay_ms"`
		DropAnswers *bool  `json:"drop_answers"`
		Reject      *bool  `json:"reject"`
	}
	if !decode(w, r, &body, false) {
		return
	}
	if body.DelayMS != nil && (*body.DelayMS < 0 || *body.DelayMS > 3_600_000) {
		writeError(w, http.StatusBadRequest, CodeInvalidParameter, "delay_ms: want 0 to 3600000")
		return
	}
	f := s.faulty.update(func(f *Faults) {
		if body.Fail != nil {
			f.Fail = *body.Fail
		}
		if body.DelayMS != nil {
			f.DelayMS = *body.DelayMS
		}
		if body.DropAnswers != nil {
			f.DropAnswers = *body.DropAnswers
		}
		if body.Reject != nil {
			f.Reject = *body.Reject
		}
	})
	s.logger.Info("inventory: fault switches", "fail", f.Fail, "delay_ms", f.DelayMS, "drop_answers", f.DropAnswers, "reject", f.Reject)
	writeJSON(w, http.StatusOK, f)
}
