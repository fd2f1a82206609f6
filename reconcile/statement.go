package reconcile

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/lapsehq/lapse/payment"
)

// Record is what a statement says of one order, over all its lines.
type Record struct {
	OrderID string
	// Status is the order's state: PAID if any line is (with that line's
	// payment id and amount), else PENDING, else CLOSED, else NOT_PAID.
	Status payment.Status
	// ExtraPayments are further PAID lines with other payment ids: the
	// buyer was charged more than once.
	ExtraPayments []payment.Status
}

// rank orders states by how much they matter when lines of one order
// disagree: a successful payment outweighs everything before or after it.
var rank = map[payment.State]int{payment.StateNotPaid: 0, payment.StateClosed: 1, payment.StatePending: 2, payment.StatePaid: 3}

// ParseStatement reads a gateway statement: CSV (RFC 4180) lines of
//
//	order_id,payment_id,status,amount_cents
//
// The rules:
//   - status, in any case: PAID or SUCCEEDED (paid), NOT_PAID or FAILED (not
//     paid), CLOSED, PENDING. Anything else is an error naming the line.
//   - payment_id and amount_cents (an integer >= 0) are required on paid
//     lines and may be empty on the others.
//   - A header line (first field "order_id") is skipped wherever it appears,
//     so several files may be concatenated; so are blank lines and lines
//     starting with '#'. A UTF-8 byte order mark is ignored. Spaces before a
//     field are trimmed.
//   - An order may have several lines (a failed attempt, then a success);
//     they merge as Record describes. The same payment id on two paid lines
//     counts once, but must carry the same amount.
//
// It returns the records by order id.
func ParseStatement(r io.Reader) (map[string]Record, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 4
	cr.TrimLeadingSpace = true
	cr.Comment = '#'
	cr.ReuseRecord = true
	recs := map[string]Record{}
	for first := true; ; first = false {
		fields, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return recs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reconcile: statement: %w", err)
		}
		line, _ := cr.FieldPos(0)
		if first {
			fields[0] = strings.TrimPrefix(fields[0], "\uFEFF")
		}
		if strings.EqualFold(strings.TrimSpace(fields[0]), "order_id") {
			continue
		}
		id, st, err := parseLine(fields)
		if err != nil {
			return nil, fmt.Errorf("reconcile: statement line %d: %w", line, err)
		}
		rec, ok := recs[id]
		if !ok {
			recs[id] = Record{OrderID: id, Status: st}
			continue
		}
		if err := rec.merge(st); err != nil {
			return nil, fmt.Errorf("reconcile: statement line %d: order %s: %w", line, showID(id), err)
		}
		recs[id] = rec
	}
}

func parseLine(f []string) (string, payment.Status, error) {
	id, pid, status, amount := strings.TrimSpace(f[0]), strings.TrimSpace(f[1]), strings.TrimSpace(f[2]), strings.TrimSpace(f[3])
	if id == "" {
		return "", payment.Status{}, errors.New("empty order_id")
	}
	var st payment.Status
	switch strings.ToUpper(status) {
	case "PAID", "SUCCEEDED":
		st.State = payment.StatePaid
	case "NOT_PAID", "FAILED":
		st.State = payment.StateNotPaid
	case "CLOSED":
		st.State = payment.StateClosed
	case "PENDING":
		st.State = payment.StatePending
	default:
		return "", st, fmt.Errorf("status %q: want PAID, SUCCEEDED, NOT_PAID, FAILED, CLOSED or PENDING", status)
	}
	st.PaymentID = pid
	if amount != "" {
		n, err := strconv.ParseInt(amount, 10, 64)
		if err != nil || n < 0 {
			return "", st, fmt.Errorf("amount_cents %q: want an integer >= 0", amount)
		}
		st.AmountCents = n
	}
	if st.State == payment.StatePaid && (pid == "" || amount == "") {
		return "", st, errors.New("a paid line needs payment_id and amount_cents")
	}
	return id, st, nil
}

func (r *Record) merge(st payment.Status) error {
	if st.State == payment.StatePaid && r.Status.State == payment.StatePaid {
		for _, p := range append([]payment.Status{r.Status}, r.ExtraPayments...) {
			if p.PaymentID == st.PaymentID {
				if p.AmountCents != st.AmountCents {
					return fmt.Errorf("payment %s listed with amounts %d and %d", showID(st.PaymentID), p.AmountCents, st.AmountCents)
				}
				return nil
			}
		}
		r.ExtraPayments = append(r.ExtraPayments, st)
		return nil
	}
	if rank[st.State] > rank[r.Status.State] {
		r.Status = st
	}
	return nil
}
