package ordersvctest

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the receiver's own database

	"github.com/lapsehq/lapse/ordersvc"
)

// AMQPEnv, in the environment of the Go receiver's process, is the broker
// URL it consumes from (with ?prefix=, as lapse's --order-service): RunAMQP
// reads it, and a program that finds it set runs RunAMQP.
const AMQPEnv = "LAPSE_ORDERSVCTEST_AMQP"

// AMQPConfig is how to run the Go receiver over RabbitMQ.
type AMQPConfig struct {
	// Command runs a program that calls RunAMQP when AMQPEnv is set: the
	// test binary run again (os.Args[0], -test.run naming a test that
	// does) needs no build of its own. Required.
	Command []string
	// URL is the broker's, with lapse's ?prefix=: the same as lapse's
	// --order-service, or another way to the same broker (a proxy).
	// Required.
	URL string
	// Secrets are the whsec_ secrets it verifies with. Required.
	Secrets []string
	// DB is its SQLite file; empty means a file in t.TempDir(). The file
	// outlives Kill, so Restart finds the orders where they were.
	DB string
	// Env adds environment variables, receiver.py's: the fault switches
	// FAIL_503_UNTIL (the apply fails and the command is requeued),
	// DROP_ANSWER_RATE (the apply fails after its commit), SEED, and
	// PAYING_RETRY_AFTER. Faults can also be changed while it runs, with
	// SetFaults.
	Env []string
}

// StartAMQP starts the Go receiver in a process of its own and waits until
// it has declared its command queue and listens for the test routes; it is
// killed when the test ends. lapse reaches it through the broker.
func StartAMQP(t testing.TB, cfg AMQPConfig) *Process {
	t.Helper()
	if len(cfg.Command) == 0 || cfg.URL == "" || len(cfg.Secrets) == 0 {
		t.Fatal("ordersvctest: StartAMQP without a command, a broker URL or secrets")
	}
	return startProcess(t, "amqp receiver", cfg.Command, cfg.Secrets, cfg.DB, append([]string{AMQPEnv + "=" + cfg.URL}, cfg.Env...), "")
}

//go:embed receiver.sql
var receiverSchema string

// The Go receiver's statements.
const (
	sqlAnswerOf   = `SELECT result FROM answers WHERE command_id = ?`
	sqlCancel     = `UPDATE orders SET status = 'cancelled' WHERE id = ? AND status = 'pending'`
	sqlApplied    = `INSERT INTO applied VALUES (?, ?, ?)`
	sqlStatusOf   = `SELECT status FROM orders WHERE id = ?`
	sqlAnswer     = `INSERT INTO answers VALUES (?, ?)`
	sqlDelivery   = `INSERT INTO deliveries VALUES (?, ?, '', ?, ?, ?)`
	sqlSeed       = `INSERT INTO orders (id, status) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET status = excluded.status`
	sqlOrders     = `SELECT id, status FROM orders ORDER BY id`
	sqlAppliedAll = `SELECT command_id, order_id, at_ms FROM applied ORDER BY rowid`
	sqlDeliveries = `SELECT webhook_id, order_id, attempt, cancel_after, received_at_ms, outcome FROM deliveries ORDER BY rowid`
)

// answerOfStatus is what an order's status answers when the conditional
// update changed nothing.
var answerOfStatus = map[string]ordersvc.Result{"cancelled": ordersvc.AlreadyCancelled, "paid": ordersvc.AlreadyPaid, "paying": ordersvc.Paying}

// RunAMQP is the Go receiver's process, receiver.py's twin over RabbitMQ:
// ordersvc.ServeAMQP applies each command with a conditional update in its
// own SQLite database (RECEIVER_DB) and stores the final answer with it, so
// a redelivery gets the same answer; it serves receiver.py's test routes
// (/seed, /orders, /applied, /deliveries, /faults) and /hold and /release
// on HOST:PORT, and says "listening on http://HOST:PORT" once its command
// queue is declared. It runs until ctx ends.
func RunAMQP(ctx context.Context) error {
	env := func(name, def string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		return def
	}
	s := &amqpShop{holding: make(chan string, 1)}
	var err error
	if s.failLeft, err = strconv.Atoi(env("FAIL_503_UNTIL", "0")); err != nil {
		return fmt.Errorf("FAIL_503_UNTIL: %w", err)
	}
	if s.dropRate, err = strconv.ParseFloat(env("DROP_ANSWER_RATE", "0"), 64); err != nil {
		return fmt.Errorf("DROP_ANSWER_RATE: %w", err)
	}
	if s.retryAfter, err = strconv.Atoi(env("PAYING_RETRY_AFTER", "0")); err != nil {
		return fmt.Errorf("PAYING_RETRY_AFTER: %w", err)
	}
	seed, err := strconv.ParseUint(env("SEED", strconv.FormatInt(time.Now().UnixNano(), 10)), 10, 64)
	if err != nil {
		return fmt.Errorf("SEED: %w", err)
	}
	s.random = rand.New(rand.NewPCG(seed, seed))
	// A test's receiver: a commit need not wait for the disk (WAL with
	// synchronous=NORMAL stays consistent across a kill of the process).
	s.db, err = sql.Open("sqlite", "file:"+env("RECEIVER_DB", "receiver.db")+
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)")
	if err != nil {
		return fmt.Errorf("open the receiver's database: %w", err)
	}
	defer s.db.Close()
	// One connection: every transaction runs alone, as SQLite would make
	// them anyway.
	s.db.SetMaxOpenConns(1)
	if _, err := s.db.ExecContext(ctx, receiverSchema); err != nil {
		return fmt.Errorf("create the receiver's tables: %w", err)
	}

	ln, err := net.Listen("tcp", net.JoinHostPort(env("HOST", "127.0.0.1"), env("PORT", "0")))
	if err != nil {
		return fmt.Errorf("listen for the test routes: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	server, err := ordersvc.NewAMQPServer(ctx, os.Getenv(AMQPEnv), s.apply,
		ordersvc.AMQPSecrets(strings.Fields(os.Getenv("LAPSE_SECRETS"))...), ordersvc.AMQPLogger(log),
		ordersvc.AMQPRetryBackoff(50*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		return err
	}
	defer server.Close()
	srv := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	fmt.Printf("listening on http://%s\n", ln.Addr())
	return server.Serve(ctx)
}

// amqpShop is the Go receiver's state: its database, fault switches and
// the hold of Process.Hold.
type amqpShop struct {
	db *sql.DB

	mu         sync.Mutex
	failLeft   int
	dropRate   float64
	retryAfter int
	random     *rand.Rand
	armed      bool          // hold the next applied command
	holding    chan string   // the held command's id
	release    chan struct{} // closed by /release
}

// apply is the command, as receiver.py's handler does it: a fault, or the
// conditional update in one transaction, recorded as a delivery.
func (s *amqpShop) apply(ctx context.Context, c ordersvc.Command, id string) (ordersvc.Answer, error) {
	received := time.Now().UnixMilli()
	s.mu.Lock()
	fail := s.failLeft > 0
	if fail {
		s.failLeft--
	}
	s.mu.Unlock()
	if fail {
		s.record(ctx, id, c, received, "failed")
		return ordersvc.Answer{}, errors.New("fault injected: the database is unavailable")
	}
	result, err := s.applyTx(ctx, id, c.OrderID)
	if err != nil {
		s.record(ctx, id, c, received, "failed")
		return ordersvc.Answer{}, err
	}
	s.mu.Lock()
	drop := s.dropRate > 0 && s.random.Float64() < s.dropRate
	var held chan string
	var release chan struct{}
	if !drop && s.armed {
		s.armed, held, release = false, s.holding, s.release
	}
	s.mu.Unlock()
	if drop {
		// Applied and committed, and the answer lost: the command goes
		// back to the queue, to be answered from the stored answer.
		s.record(ctx, id, c, received, "dropped")
		return ordersvc.Answer{}, errors.New("fault injected: the answer lost after the commit")
	}
	s.record(ctx, id, c, received, string(result))
	if held != nil {
		held <- id
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	a := ordersvc.Answer{Result: result, CommandID: id}
	if result == ordersvc.Paying && s.retryAfter > 0 {
		a.RetryAfterSeconds = s.retryAfter
	}
	return a, nil
}

// applyTx is one transaction: the stored answer to this command id if
// there is one, else the conditional update and what it found; a final
// answer is stored with it.
func (s *amqpShop) applyTx(ctx context.Context, id, orderID string) (ordersvc.Result, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("apply %s: %w", id, err)
	}
	defer func() { _ = tx.Rollback() }()
	var result ordersvc.Result
	switch err := tx.QueryRowContext(ctx, sqlAnswerOf, id).Scan(&result); {
	case err == nil:
		return result, tx.Commit()
	case !errors.Is(err, sql.ErrNoRows):
		return "", fmt.Errorf("apply %s: stored answer: %w", id, err)
	}
	res, err := tx.ExecContext(ctx, sqlCancel, orderID)
	if err != nil {
		return "", fmt.Errorf("apply %s: cancel: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		result = ordersvc.Cancelled
		if _, err := tx.ExecContext(ctx, sqlApplied, id, orderID, time.Now().UnixMilli()); err != nil {
			return "", fmt.Errorf("apply %s: record: %w", id, err)
		}
	} else {
		var status string
		switch err := tx.QueryRowContext(ctx, sqlStatusOf, orderID).Scan(&status); {
		case errors.Is(err, sql.ErrNoRows):
			result = ordersvc.NotFound
		case err != nil:
			return "", fmt.Errorf("apply %s: status: %w", id, err)
		default:
			result = answerOfStatus[status]
		}
	}
	if result != ordersvc.Paying {
		if _, err := tx.ExecContext(ctx, sqlAnswer, id, result); err != nil {
			return "", fmt.Errorf("apply %s: store the answer: %w", id, err)
		}
	}
	if err := tx.Commit(); err != nil { // answer only what is committed
		return "", fmt.Errorf("apply %s: commit: %w", id, err)
	}
	return result, nil
}

// record keeps a delivery for /deliveries; a failure to is logged (the
// test then finds the delivery missing).
func (s *amqpShop) record(ctx context.Context, id string, c ordersvc.Command, receivedMs int64, outcome string) {
	if _, err := s.db.ExecContext(ctx, sqlDelivery, id, c.OrderID, c.CancelAfter, receivedMs, outcome); err != nil {
		slog.Error("ordersvctest: record a delivery", "command_id", id, "err", err)
	}
}

func (s *amqpShop) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /seed", func(w http.ResponseWriter, r *http.Request) {
		var orders []Order
		if err := json.NewDecoder(r.Body).Decode(&orders); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := s.seed(r.Context(), orders); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, map[string]int{"seeded": len(orders)})
	})
	mux.HandleFunc("POST /faults", func(w http.ResponseWriter, r *http.Request) {
		var f Faults
		if err := json.NewDecoder(r.Body).Decode(&f); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		if f.Fail503Until != nil {
			s.failLeft = *f.Fail503Until
		}
		if f.DropAnswerRate != nil {
			s.dropRate = *f.DropAnswerRate
		}
		s.mu.Unlock()
		writeJSON(w, f)
	})
	mux.HandleFunc("POST /hold", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.armed, s.release = true, make(chan struct{})
		s.mu.Unlock()
		select {
		case id := <-s.holding:
			writeJSON(w, map[string]string{"command_id": id})
		case <-time.After(25 * time.Second):
			s.mu.Lock()
			s.armed = false
			s.mu.Unlock()
			http.Error(w, "no command applied within 25 s", http.StatusGatewayTimeout)
		}
	})
	mux.HandleFunc("POST /release", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		if s.release != nil {
			close(s.release)
			s.release = nil
		}
		s.mu.Unlock()
		writeJSON(w, map[string]bool{"released": true})
	})
	mux.HandleFunc("GET /orders", func(w http.ResponseWriter, r *http.Request) {
		list, err := query(r.Context(), s.db, sqlOrders, func(rows *sql.Rows) (o Order, err error) {
			return o, rows.Scan(&o.ID, &o.Status)
		})
		writeRows(w, list, err)
	})
	mux.HandleFunc("GET /applied", func(w http.ResponseWriter, r *http.Request) {
		list, err := query(r.Context(), s.db, sqlAppliedAll, func(rows *sql.Rows) (a Applied, err error) {
			return a, rows.Scan(&a.CommandID, &a.OrderID, &a.AtMs)
		})
		writeRows(w, list, err)
	})
	mux.HandleFunc("GET /deliveries", func(w http.ResponseWriter, r *http.Request) {
		list, err := query(r.Context(), s.db, sqlDeliveries, func(rows *sql.Rows) (d Delivery, err error) {
			return d, rows.Scan(&d.WebhookID, &d.OrderID, &d.Attempt, &d.CancelAfter, &d.ReceivedAtMs, &d.Outcome)
		})
		writeRows(w, list, err)
	})
	return mux
}

func (s *amqpShop) seed(ctx context.Context, orders []Order) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, o := range orders {
		if _, err := tx.ExecContext(ctx, sqlSeed, o.ID, o.Status); err != nil {
			return fmt.Errorf("seed %s as %q: %w", o.ID, o.Status, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	return nil
}

func query[T any](ctx context.Context, db *sql.DB, q string, scan func(*sql.Rows) (T, error)) ([]T, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	list := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, v)
	}
	return list, rows.Err()
}

func writeRows[T any](w http.ResponseWriter, list []T, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, list)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
