package ordersvc_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/lapsehq/lapse/ordersvc"
)

// cancelIfPending is the whole of an order service's part: one conditional
// update, and when it changed nothing, a read of what the order is, in one
// transaction committed before the answer. Run again with the same
// command, it finds the order cancelled and answers already_cancelled, the
// same final state: no answers table is needed.
func cancelIfPending(ctx context.Context, db *sql.DB, orderID string) (ordersvc.Answer, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return ordersvc.Answer{}, err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE orders SET status = 'cancelled' WHERE id = ? AND status = 'pending'`, orderID)
	if err != nil {
		return ordersvc.Answer{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return ordersvc.Answer{}, err
	}
	status := "cancelled by this command"
	if n == 0 {
		err = tx.QueryRowContext(ctx, `SELECT status FROM orders WHERE id = ?`, orderID).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) {
			status, err = "no such order", nil
		}
		if err != nil {
			return ordersvc.Answer{}, err
		}
	}
	if err := tx.Commit(); err != nil { // answer only what is committed
		return ordersvc.Answer{}, err
	}
	switch status {
	case "cancelled by this command":
		return ordersvc.Answer{Result: ordersvc.Cancelled}, nil
	case "cancelled":
		return ordersvc.Answer{Result: ordersvc.AlreadyCancelled}, nil
	case "paid":
		return ordersvc.Answer{Result: ordersvc.AlreadyPaid}, nil
	case "no such order":
		return ordersvc.Answer{Result: ordersvc.NotFound}, nil
	}
	// "paying", or "pending" again after a failed payment: ask me later.
	return ordersvc.Answer{Result: ordersvc.Paying, RetryAfterSeconds: 60}, nil
}

// A Go order service mounts a Receiver at the URL it gives lapse
// (--order-service https://shop.example/lapse) with the secret it gives
// lapse (--order-service-secret-file), and answers each command with a
// conditional update in its own database.
func Example_receiver() {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT NOT NULL);
		INSERT INTO orders VALUES ('o-1', 'pending'), ('o-2', 'paid')`); err != nil {
		log.Fatal(err)
	}

	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // from a file, in a real service
	receiver, err := ordersvc.NewReceiver(ordersvc.ReceiverConfig{
		Secrets: []string{secret},
		Apply: func(ctx context.Context, c ordersvc.Command, _ string) (ordersvc.Answer, error) {
			return cancelIfPending(ctx, db, c.OrderID)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/lapse", receiver)
	shop := httptest.NewServer(mux)
	defer shop.Close()

	// What lapse sends at each order's cancel_after; o-1's command twice,
	// as when lapse did not hear the first answer.
	cancelAfter := time.Now().Add(-time.Second)
	for _, orderID := range []string{"o-1", "o-1", "o-2", "o-3"} {
		body, _ := json.Marshal(ordersvc.Command{
			Type: ordersvc.Type, OrderID: orderID, SchemaVersion: ordersvc.SchemaVersion,
			Deadline: ordersvc.FormatTime(cancelAfter.Add(-5 * time.Second)), CancelAfter: ordersvc.FormatTime(cancelAfter),
			AmountCents: 1299, Currency: "EUR",
		})
		id, now := ordersvc.CommandID(orderID, cancelAfter), time.Now()
		sig, err := ordersvc.Sign([]string{secret}, id, now, body)
		if err != nil {
			log.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, shop.URL+"/lapse", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("webhook-signature", sig)
		resp, err := shop.Client().Do(req)
		if err != nil {
			log.Fatal(err)
		}
		var a ordersvc.Answer
		_ = json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		fmt.Println(orderID, resp.StatusCode, a.Result)
	}
	// Output:
	// o-1 200 cancelled
	// o-1 200 already_cancelled
	// o-2 200 already_paid
	// o-3 200 not_found
}
