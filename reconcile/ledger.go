package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/redact"
)

// LedgerRow is one command an inventory applied: GET /ledger's row
// (docs/inventory.md). Each (reservation, action) is applied at most once.
type LedgerRow struct {
	Seq           int64     `json:"seq"`
	ReservationID string    `json:"reservation_id"`
	Action        string    `json:"action"` // reserve, release, confirm
	TaskID        string    `json:"task_id"`
	At            time.Time `json:"at"`
	// Tombstone marks a release of a reservation the inventory never held.
	Tombstone bool `json:"tombstone,omitempty"`
}

// LedgerPage is one page of the ledger, in seq order. Next is the after of
// the following page, nil on the last one.
type LedgerPage struct {
	Rows []LedgerRow `json:"rows"`
	Next *int64      `json:"next"`
}

// Ledger is what reconciling stock reads of an inventory: its ledger, in
// pages, and one reservation's rows. Any inventory built to
// docs/inventory.md serves both (HTTPLedger reads them).
type Ledger interface {
	// LedgerPage returns up to limit rows with seq > after.
	LedgerPage(ctx context.Context, after int64, limit int) (LedgerPage, error)
	// ReservationLedger returns the ledger rows of one reservation, read
	// when called (not paged: every row committed by then), and false when
	// the inventory does not know the reservation.
	ReservationLedger(ctx context.Context, id string) ([]LedgerRow, bool, error)
}

// HTTPLedger reads an inventory's ledger over its HTTP API:
//
//	GET {URL}/ledger?after=SEQ&limit=N  {"rows": [...], "next": SEQ | null}
//	GET {URL}/reservations/{id}         {"reservation_id", "status", "ledger": [...]}; 404 unknown_reservation
type HTTPLedger struct {
	base   string
	client *http.Client
}

// maxLedgerBody bounds one answer read: a page of 1000 rows of 200-character
// ids is well under it.
const maxLedgerBody = 16 << 20

// NewHTTPLedger reads the inventory at baseURL (http://host:port) with
// client (nil: one with a 30-second timeout per request). Errors show the
// URL without its password.
func NewHTTPLedger(baseURL string, client *http.Client) *HTTPLedger {
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	return &HTTPLedger{base: strings.TrimRight(baseURL, "/"), client: client}
}

// LedgerPage implements Ledger.
func (h *HTTPLedger) LedgerPage(ctx context.Context, after int64, limit int) (LedgerPage, error) {
	u := h.base + "/ledger?after=" + strconv.FormatInt(after, 10) + "&limit=" + strconv.Itoa(limit)
	var page LedgerPage
	status, err := h.get(ctx, u, &page)
	if err != nil {
		return LedgerPage{}, err
	}
	if status != http.StatusOK {
		return LedgerPage{}, fmt.Errorf("GET %s: status %d", redact.URL(u), status)
	}
	last := after
	for _, r := range page.Rows {
		if r.Seq <= last {
			return LedgerPage{}, fmt.Errorf("GET %s: row seq %d after %d: want increasing seqs above after", redact.URL(u), r.Seq, last)
		}
		last = r.Seq
	}
	if page.Next != nil && (len(page.Rows) == 0 || *page.Next < last) {
		return LedgerPage{}, fmt.Errorf("GET %s: next %d does not follow the page's rows", redact.URL(u), *page.Next)
	}
	return page, nil
}

// ReservationLedger implements Ledger.
func (h *HTTPLedger) ReservationLedger(ctx context.Context, id string) ([]LedgerRow, bool, error) {
	res, found, err := h.Reservation(ctx, id)
	return res.Ledger, found, err
}

// Reservation is what GET /reservations/{id} reports of one reservation.
type Reservation struct {
	Status string           `json:"status"`
	Items  []inventory.Item `json:"items"`
	Ledger []LedgerRow      `json:"ledger"`
}

// ReservationReader reads one reservation with its items, for
// StockParams.CheckItems; HTTPLedger is one.
type ReservationReader interface {
	// Reservation returns the reservation, read when called, and false
	// when the inventory does not know it.
	Reservation(ctx context.Context, id string) (Reservation, bool, error)
}

// Reservation implements ReservationReader: GET {URL}/reservations/{id}.
func (h *HTTPLedger) Reservation(ctx context.Context, id string) (Reservation, bool, error) {
	u := h.base + "/reservations/" + url.PathEscape(id)
	var res struct {
		Reservation
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	status, err := h.get(ctx, u, &res)
	switch {
	case err != nil:
		return Reservation{}, false, err
	case status == http.StatusNotFound && res.Error != nil && res.Error.Code == "unknown_reservation":
		return Reservation{}, false, nil
	case status != http.StatusOK:
		// A 404 without unknown_reservation is a route the server does not
		// have: a wrong URL must not pass for reservations never made.
		return Reservation{}, false, fmt.Errorf("GET %s: status %d", redact.URL(u), status)
	}
	for i := range res.Ledger {
		res.Ledger[i].ReservationID = id // the reservation's own rows do not repeat it
	}
	return res.Reservation, true, nil
}

// get GETs u into v (also on an error status, when the body is JSON) and
// returns the status.
func (h *HTTPLedger) get(ctx context.Context, u string, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", redact.URL(u), err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message repeats the URL, password and all
		}
		return 0, fmt.Errorf("GET %s: %w", redact.URL(u), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxLedgerBody+1))
	if err != nil {
		return 0, fmt.Errorf("GET %s: read the answer: %w", redact.URL(u), err)
	}
	if len(body) > maxLedgerBody {
		return 0, fmt.Errorf("GET %s: answer larger than %d bytes", redact.URL(u), maxLedgerBody)
	}
	if err := json.Unmarshal(body, v); err != nil {
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, nil
		}
		return 0, fmt.Errorf("GET %s: not the ledger's JSON: %w", redact.URL(u), err)
	}
	return resp.StatusCode, nil
}
