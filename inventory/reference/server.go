package reference

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/lapsehq/lapse/internal/sameorigin"
)

// Config configures a Server.
type Config struct {
	// Faults are the switches it starts with. Defaults to none.
	Faults Faults
	// Logger receives failures and switch changes. Defaults to slog.Default().
	Logger *slog.Logger
	// AllowedHosts are names the API may be addressed by (the Host
	// header) beside its address and localhost: "name" at any port,
	// "name:port" at that port. Every other name is refused, as a
	// re-pointed one would be (DNS rebinding; see Server).
	AllowedHosts []string
}

// Server is the reference inventory over HTTP: CommandHandler's routes on
// the store behind fault switches, and the rest of the API:
//
//	PUT  /skus/{sku} {"available": N}   set a SKU's available units
//	GET  /skus/{sku}                    {"sku", "available", "reserved", "sold"}
//	GET  /reservations/{id}             its status, items and ledger rows
//	GET  /ledger?after=SEQ&limit=N      {"rows": [...], "next": SEQ | null}
//	GET  /faults, POST /faults          the switches (Faults); a POST
//	                                    changes only the fields it names
//	GET  /healthz
//
// Stop and Start again make the inventory go away and come back on the same
// address and store. The AMQP transport takes Applier, so the switches act
// on both.
//
// The API has no authentication, so it refuses what a web page of another
// site can make a browser send, as lapse's own API does without a token
// (package internal/sameorigin): 403 foreign_origin for a Host that is not
// the address it was reached at, localhost or one of Config.AllowedHosts
// (a name re-pointed at it), or an Origin other than its own; 415
// unsupported_media_type for a body, or a Content-Type, that is not JSON.
type Server struct {
	store   *Store
	faulty  *Faulty
	logger  *slog.Logger
	handler http.Handler

	mu   sync.Mutex
	srv  *http.Server
	errc chan error
	addr string // the last address listened on
}

// NewServer returns a server on st; it does not listen until Start.
func NewServer(st *Store, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{store: st, faulty: NewFaulty(st, cfg.Faults), logger: cfg.Logger}
	s.handler = s.sameOrigin(sameorigin.Guard{Hosts: cfg.AllowedHosts,
		Hint: "the reference inventory answers only requests addressed to its listen address, localhost or a name given with --allow-host, from no other site's page"},
		s.routes())
	return s
}

// sameOrigin refuses, before any route, a request whose Host or Origin
// names another site.
func (s *Server) sameOrigin(g sameorigin.Guard, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e := g.Check(r); e != nil {
			s.logger.Warn("inventory: request from another origin refused", "host", r.Host, "origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
			writeError(w, e.Status, e.Code, e.Message)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ServeHTTP implements http.Handler: the whole API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Applier is the store behind the fault switches: what every transport
// applies commands with.
func (s *Server) Applier() *Faulty { return s.faulty }

// Store is the server's store.
func (s *Server) Store() *Store { return s.store }

// Start listens on addr ("127.0.0.1:0" picks a port; "" is the address of
// the previous Start, to come back where it was) and serves in the
// background until Stop or Shutdown.
func (s *Server) Start(addr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("reference: server already started")
	}
	if addr == "" {
		addr = s.addr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("reference: listen: %w", err)
	}
	s.addr = ln.Addr().String()
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	s.errc = make(chan error, 1)
	go func(srv *http.Server, errc chan<- error) { errc <- srv.Serve(ln) }(s.srv, s.errc)
	return nil
}

// Addr is the address the server listens on, or listened on last.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// URL is http://Addr().
func (s *Server) URL() string { return "http://" + s.Addr() }

// Stop closes the listener and every connection at once, requests in
// flight included: the inventory goes away. The store stays open; Start
// serves again.
func (s *Server) Stop() error {
	return s.stop(func(srv *http.Server) error { return srv.Close() })
}

// Shutdown stops listening and waits for the requests in flight until ctx
// ends, then closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	return s.stop(func(srv *http.Server) error {
		err := srv.Shutdown(ctx)
		if err != nil {
			_ = srv.Close()
		}
		return err
	})
}

func (s *Server) stop(how func(*http.Server) error) error {
	s.mu.Lock()
	srv, errc := s.srv, s.errc
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := how(srv)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("reference: stop: %w", err)
	}
	return nil
}

// ListenAndServe serves on addr until ctx ends, then shuts down, giving
// requests in flight up to 5 s.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	if err := s.Start(addr); err != nil {
		return err
	}
	s.mu.Lock()
	errc := s.errc
	s.mu.Unlock()
	select {
	case err := <-errc:
		// Serve ended by itself: put its error back for stop to read.
		errc <- err
		_ = s.Stop()
		return fmt.Errorf("reference: serve: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return s.Shutdown(sctx)
	}
}
