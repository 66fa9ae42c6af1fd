package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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
	return serveChild(addr, h)
}

// startCeiling runs the ceiling as a child process of this binary serving
// body with etag; it returns its address.
func startCeiling(ctx context.Context, cfg *config, body []byte, etag, ctype string) (*proc, string, error) {
	bodyFile := filepath.Join(cfg.tmp, "ceiling-body")
	if err := os.WriteFile(bodyFile, body, 0o644); err != nil {
		return nil, "", fmt.Errorf("ceiling: %w", err)
	}
	return startChild(ctx, cfg, "ceiling", bodyFile, etag, ctype)
}

// startChild runs this binary as the child process "bench NAME ADDR
// ARGS…" on a free loopback port, its log in the run's temporary
// directory, and waits until it accepts connections; it returns its
// address.
func startChild(ctx context.Context, cfg *config, name string, args ...string) (*proc, string, error) {
	return startChildAs(ctx, cfg, name, name, args...)
}

// startChildAs is startChild for a child whose label (its process name and
// output file in the run's temporary directory) differs from its command,
// so that two children of one command can run side by side.
func startChildAs(ctx context.Context, cfg *config, label, name string, args ...string) (*proc, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", label, err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", mustFreePort())
	p, err := startProc(label, filepath.Join(cfg.tmp, label+".log"), self, append([]string{name, addr}, args...)...)
	if err != nil {
		return nil, "", err
	}
	if err := waitTCP(ctx, p, addr, 10*time.Second); err != nil {
		p.stop()
		return nil, "", err
	}
	return p, addr, nil
}

// durableCeilingMain is the child process "bench durable-ceiling ADDR
// LOGFILE [prealloc]": a plain net/http handler that appends each POST body
// to LOGFILE and fdatasyncs it before it answers a fixed 180-byte JSON
// object, one request at a time. It is the floor of a durable commit over
// HTTP on this machine (a request, one write, one fdatasync, an answer, in
// a Go server of its own process) with none of varplane's work: what
// raw-fdatasync lacks to be reachable by any server a client talks to. With
// prealloc it writes into space allocated and zeroed ahead (zeroedFile), as
// the file store's log does, so that it is the floor of that way of writing.
func durableCeilingMain(args []string) int {
	if len(args) != 2 && (len(args) != 3 || args[2] != "prealloc") {
		fmt.Fprintln(os.Stderr, "usage: bench durable-ceiling ADDR LOGFILE [prealloc]")
		return 2
	}
	dl, err := openDurableLog(args[1], len(args) == 3)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer dl.close()
	answer := []byte(durableAnswer)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := dl.append(body); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header()["Content-Type"] = []string{"application/json"}
		w.Write(answer)
	})
	return serveChild(args[0], h)
}

// durableAnswer is the body the durable floors answer every commit with.
const durableAnswer = `{"scope":"bench.ceiling","generation":1,"revision":"sha256:0000000000000000000000000000000000000000000000000000000000000000","effectiveAt":"2026-01-01T00:00:00.000000001Z","created":true}` + "\n"

// durableLog is the log of the durable floors (the net/http one and the
// hand-written one write through the same code, so that they differ by
// their HTTP servers alone): each append writes a body after the last one
// and fdatasyncs it before it returns, one at a time.
type durableLog struct {
	mu  sync.Mutex
	f   *os.File
	zf  *zeroedFile // nil: the file grows by appends
	off int64
}

// openDurableLog creates (or truncates) the log at path; with prealloc it
// writes into space allocated and zeroed ahead (zeroedFile), as the file
// store's log does.
func openDurableLog(path string, prealloc bool) (*durableLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	dl := &durableLog{f: f}
	if prealloc {
		dl.zf = &zeroedFile{f: f}
		if err := dl.zf.ensure(0); err != nil {
			f.Close()
			return nil, err
		}
	}
	return dl, nil
}

// append makes body durable after the bodies before it.
func (dl *durableLog) append(body []byte) error {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.zf != nil {
		if err := dl.zf.ensure(dl.off + int64(len(body))); err != nil {
			return err
		}
	}
	if _, err := dl.f.WriteAt(body, dl.off); err != nil {
		return err
	}
	if err := unix.Fdatasync(int(dl.f.Fd())); err != nil {
		return err
	}
	dl.off += int64(len(body))
	return nil
}

func (dl *durableLog) close() { dl.f.Close() }

// serveChild serves h on addr until SIGTERM or an interrupt.
func serveChild(addr string, h http.Handler) int {
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

// startDurableCeiling runs the durable ceiling as a child process of this
// binary, its log in the run's temporary directory (the disk of the other
// commit sides), writing into zeroed space with prealloc; it returns its
// address.
func startDurableCeiling(ctx context.Context, cfg *config, prealloc bool) (*proc, string, error) {
	if prealloc {
		return startChildAs(ctx, cfg, "durable-ceiling-prealloc", "durable-ceiling", filepath.Join(cfg.tmp, "durable-ceiling-prealloc.jsonl"), "prealloc")
	}
	return startChild(ctx, cfg, "durable-ceiling", filepath.Join(cfg.tmp, "durable-ceiling.jsonl"))
}

// zeroedFile is a log file written into space allocated ahead (fallocate)
// and then written with zeros, as the file store's log is (its zeroer), so
// that a record's fdatasync neither grows the file nor converts unwritten
// blocks. ensure zeroes 64 MiB at first, then 16 MiB at a time, each with
// an fdatasync, outside any timed write when the first 64 MiB suffice.
type zeroedFile struct {
	f    *os.File
	size int64
}

// ensure makes the space up to end allocated and zeroed.
func (z *zeroedFile) ensure(end int64) error {
	for end > z.size || z.size == 0 {
		n := int64(16 << 20)
		if z.size == 0 {
			n = 64 << 20
		}
		if err := unix.Fallocate(int(z.f.Fd()), 0, z.size, n); err != nil {
			return err
		}
		if _, err := z.f.WriteAt(make([]byte, n), z.size); err != nil {
			return err
		}
		if err := unix.Fdatasync(int(z.f.Fd())); err != nil {
			return err
		}
		z.size += n
	}
	return nil
}
