package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/varplane/varplane/internal/wire"
)

// Server defaults, applied by NewServer: the one set of server limits of the
// wire layer, shared with the RPC listener.
const (
	DefaultReadHeaderTimeout = wire.ServerReadHeaderTimeout
	DefaultReadTimeout       = wire.ServerReadTimeout
	DefaultWriteTimeout      = wire.ServerWriteTimeout
	DefaultIdleTimeout       = wire.ServerIdleTimeout
	DefaultMaxHeaderBytes    = wire.ServerMaxHeaderBytes
)

// Server is an HTTP server for a Handler (or any http.Handler) with
// bounded timeouts and graceful shutdown. Set its fields before Open.
// WriteTimeout does not cut streaming routes: the watch route lifts its own
// deadlines through http.ResponseController.
type Server struct {
	// Addr is the TCP address to listen on ("127.0.0.1:0" picks a free port).
	Addr    string
	Handler http.Handler

	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int

	// AllowedHosts are the Host names the server answers beside the
	// loopback names and its listen address (see wire.HostPolicy); "*"
	// answers every host. Any other Host is 421, so that a page whose name
	// is rebound to this machine cannot reach it.
	AllowedHosts []string

	// Logger receives the server's own errors (slog.Default when nil).
	Logger *slog.Logger

	// H2C makes the server answer HTTP/2 with prior knowledge (h2c, how
	// gRPC clients connect without TLS) besides HTTP/1.1, so that one port
	// serves HTTP/1.1, Connect and gRPC (route gRPC requests in Handler;
	// Host, which the policy above holds, is :authority for HTTP/2).
	H2C bool
	// HTTP2 is the HTTP/2 configuration (windows, streams, pings); nil
	// takes net/http's defaults.
	HTTP2 *http.HTTP2Config
	// TLS, when set, serves HTTPS on the listener (wire.ServerTLS):
	// HTTP/1.1 and HTTP/2, gRPC included, share the port through ALPN.
	TLS *tls.Config

	// HTTP2Guard, when set, holds the HTTP/2 connections (h2c and TLS) to
	// its ping policy and maximum age (see wire.HTTP2Guard).
	HTTP2Guard *wire.HTTP2Guard

	// Listener holds the connection caps of the listener (NewServer sets
	// wire.DefaultMaxConns and wire.DefaultMaxConnsPerAddr); its Accept
	// survives EMFILE with a pause and a log line.
	Listener wire.ListenerOptions

	mu         sync.Mutex
	onShutdown []func()
	ln         net.Listener
	wln        *wire.Listener
	srv        *http.Server
	done       chan struct{}
	serveErr   error
}

// NewServer returns a Server for handler on addr with the default timeouts.
func NewServer(addr string, handler http.Handler) *Server {
	return &Server{
		Addr:              addr,
		Handler:           handler,
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		ReadTimeout:       DefaultReadTimeout,
		WriteTimeout:      DefaultWriteTimeout,
		IdleTimeout:       DefaultIdleTimeout,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
		Listener:          wire.ListenerOptions{MaxConns: wire.DefaultMaxConns, MaxConnsPerAddr: wire.DefaultMaxConnsPerAddr},
	}
}

// Open listens on Addr synchronously, so that URL is valid when it returns,
// and serves in a background goroutine until Close. It returns the listen
// error, or an error when the server is already open.
func (s *Server) Open() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("httpapi: server already open")
	}
	raw, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.Addr, err)
	}
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	lopts := s.Listener
	if lopts.Logger == nil {
		lopts.Logger = log
	}
	s.wln = wire.NewListener(raw, lopts)
	ln := s.wln
	s.ln = ln
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(s.H2C)
	protos.SetHTTP2(s.TLS != nil)
	s.srv = &http.Server{
		Handler:           wire.NewHostPolicy(raw.Addr(), s.AllowedHosts).Guard(s.Handler),
		Protocols:         &protos,
		TLSConfig:         s.TLS,
		HTTP2:             s.HTTP2,
		ReadHeaderTimeout: s.ReadHeaderTimeout,
		ReadTimeout:       s.ReadTimeout,
		WriteTimeout:      s.WriteTimeout,
		IdleTimeout:       s.IdleTimeout,
		MaxHeaderBytes:    s.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if s.HTTP2Guard != nil && (s.H2C || s.TLS != nil) {
		if err := s.HTTP2Guard.Install(s.srv); err != nil {
			_ = ln.Close()
			s.srv = nil
			return err
		}
	}
	for _, fn := range s.onShutdown {
		s.srv.RegisterOnShutdown(fn)
	}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		var err error
		if s.srv.TLSConfig != nil {
			err = s.srv.ServeTLS(ln, "", "") // the certificate comes from TLSConfig
		} else {
			err = s.srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.mu.Lock()
			s.serveErr = err
			s.mu.Unlock()
		}
	}()
	return nil
}

// ListenAddr returns the address the server listens on, nil before Open.
func (s *Server) ListenAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// ListenerStats returns the listener's connection counters (zero before
// Open).
func (s *Server) ListenerStats() wire.ListenerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wln == nil {
		return wire.ListenerStats{}
	}
	return s.wln.Stats()
}

// URL returns "http://host:port" of the listener ("https://…" with TLS),
// "" before Open.
func (s *Server) URL() string {
	a := s.ListenAddr()
	if a == nil {
		return ""
	}
	if s.TLS != nil {
		return "https://" + a.String()
	}
	return "http://" + a.String()
}

// Done is closed when the server has stopped serving (after Close, or
// when serving failed; Close then reports why).
func (s *Server) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return s.done
}

// RegisterOnShutdown arranges for fn to run (in its own goroutine) when
// Close begins, so that long-lived streams, which never become idle, can be
// ended and let the drain finish. Call it before Open.
func (s *Server) RegisterOnShutdown(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onShutdown = append(s.onShutdown, fn)
}

// Close stops accepting connections and waits for in-flight requests to
// finish until ctx is done; then it closes the remaining connections
// (streams included) and returns ctx's error. It also returns an error that
// made serving fail. Closing a server that was never opened, or twice, is a
// no-op.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		// Shutdown does not interrupt hijacked or streaming requests past
		// the deadline; Close does.
		_ = srv.Close()
	}
	<-done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serveErr != nil {
		return fmt.Errorf("serve: %w", s.serveErr)
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// Shutdown is Close, under net/http's name.
func (s *Server) Shutdown(ctx context.Context) error { return s.Close(ctx) }
