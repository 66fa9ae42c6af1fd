package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// ceilingMain is the child process "bench ceiling ADDR BODYFILE ETAG
// CONTENT-TYPE": a plain net/http handler that answers every GET with the
// bytes of BODYFILE and the ETag, or 304 when If-None-Match matches. It is
// the most a Go HTTP server can do for the same response on this machine,
// run as its own process like the varplane server.
func ceilingMain(args []string) int {
	if len(args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: bench ceiling ADDR BODYFILE ETAG CONTENT-TYPE")
		return 2
	}
	addr, bodyFile, etag, ctype := args[0], args[1], args[2], args[3]
	body, err := os.ReadFile(bodyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	clen := fmt.Sprint(len(body))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd["Etag"] = []string{etag}
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		hd["Content-Type"] = []string{ctype}
		hd["Content-Length"] = []string{clen}
		w.Write(body)
	})
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	if err := srv.Serve(l); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startCeiling runs the ceiling as a child process of this binary serving
// body with etag; it returns its address.
func startCeiling(ctx context.Context, cfg *config, body []byte, etag, ctype string) (*proc, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", fmt.Errorf("ceiling: %w", err)
	}
	bodyFile := filepath.Join(cfg.tmp, "ceiling-body")
	if err := os.WriteFile(bodyFile, body, 0o644); err != nil {
		return nil, "", fmt.Errorf("ceiling: %w", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", mustFreePort())
	p, err := startProc("ceiling", filepath.Join(cfg.tmp, "ceiling.log"), self, "ceiling", addr, bodyFile, etag, ctype)
	if err != nil {
		return nil, "", err
	}
	if err := waitTCP(ctx, p, addr, 10*time.Second); err != nil {
		p.stop()
		return nil, "", err
	}
	return p, addr, nil
}
