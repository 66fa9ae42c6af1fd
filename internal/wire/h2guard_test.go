package wire_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/internal/wire/wiretest"
)

// guardedServer serves handler over HTTP/1.1 and h2c (and TLS when cfg is
// set) behind guard, on a Listener with lopts; it returns the address.
func guardedServer(t *testing.T, guard *wire.HTTP2Guard, lopts wire.ListenerOptions, cfg *tls.Config, handler http.Handler) (string, *wire.Listener) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := wire.NewListener(raw, lopts)
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	protos.SetHTTP2(cfg != nil)
	srv := &http.Server{Handler: handler, Protocols: &protos, TLSConfig: cfg, ReadHeaderTimeout: 5 * time.Second,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 7}}
	if err := guard.Install(srv); err != nil {
		t.Fatal(err)
	}
	go func() {
		if cfg != nil {
			_ = srv.ServeTLS(ln, "", "")
			return
		}
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() { _ = srv.Close() })
	return raw.Addr().String(), ln
}

// h2conn is a raw HTTP/2 client connection.
type h2conn struct {
	fr   *http2.Framer
	conn net.Conn
}

func dialH2(t *testing.T, conn net.Conn) *h2conn {
	t.Helper()
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	c := &h2conn{fr: http2.NewFramer(conn, conn), conn: conn}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c
}

// get opens stream id as GET path and ends it.
func (c *h2conn) get(t *testing.T, id uint32, path string) {
	t.Helper()
	var buf []byte
	w := &sliceWriter{&buf}
	enc := hpack.NewEncoder(w)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":path", path}, {":authority", "127.0.0.1"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf, EndHeaders: true, EndStream: true}); err != nil {
		t.Fatal(err)
	}
}

type sliceWriter struct{ b *[]byte }

func (w *sliceWriter) Write(p []byte) (int, error) { *w.b = append(*w.b, p...); return len(p), nil }

// until reads frames until one satisfies stop, failing after d.
func (c *h2conn) until(t *testing.T, d time.Duration, stop func(http2.Frame) bool) http2.Frame {
	t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(d))
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading frames: %v", err)
		}
		if stop(f) {
			return f
		}
	}
}

// closedWithin reports whether the server closes the connection within d.
func (c *h2conn) closedWithin(d time.Duration) bool {
	_ = c.conn.SetReadDeadline(time.Now().Add(d))
	for {
		if _, err := c.fr.ReadFrame(); err != nil {
			ne, ok := err.(net.Error)
			return !ok || !ne.Timeout()
		}
	}
}

func isGoAway(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })

// A client that floods PINGs is sent GOAWAY ENHANCE_YOUR_CALM with
// "too_many_pings" (after the strikes grpc-go allows) and closed; one that
// pings no faster than the minimum, or pings while it is sent data, is not.
func TestHTTP2GuardPingPolicy(t *testing.T) {
	guard := wire.NewHTTP2Guard(wire.HTTP2GuardOptions{PingMinTime: 100 * time.Millisecond})
	addr, _ := guardedServer(t, guard, wire.ListenerOptions{}, nil, okHandler)

	t.Run("flood", func(t *testing.T) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c := dialH2(t, nc)
		c.get(t, 1, "/")
		for i := range 10 {
			if err := c.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		ga := c.until(t, 5*time.Second, isGoAway).(*http2.GoAwayFrame)
		if ga.ErrCode != http2.ErrCodeEnhanceYourCalm || string(ga.DebugData()) != "too_many_pings" || ga.LastStreamID != 1 {
			t.Fatalf("GOAWAY %v %q last %d, want ENHANCE_YOUR_CALM too_many_pings last 1", ga.ErrCode, ga.DebugData(), ga.LastStreamID)
		}
		if !c.closedWithin(5 * time.Second) {
			t.Fatal("the connection stayed open after GOAWAY ENHANCE_YOUR_CALM")
		}
		if n := guard.Stats().TooManyPings; n != 1 {
			t.Fatalf("TooManyPings = %d, want 1", n)
		}
	})
	t.Run("within the policy", func(t *testing.T) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c := dialH2(t, nc)
		// Pings at the allowed pace, then pings each after a response
		// (its HEADERS and DATA clear the strikes).
		for i := range 4 {
			if err := c.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
			c.until(t, 5*time.Second, func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() })
			time.Sleep(150 * time.Millisecond)
		}
		for i := range 6 {
			id := uint32(2*i + 1)
			c.get(t, id, "/")
			c.until(t, 5*time.Second, func(f http2.Frame) bool {
				return f.Header().StreamID == id && f.Header().Flags.Has(http2.FlagDataEndStream)
			})
			if err := c.fr.WritePing(false, [8]byte{9, byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.fr.WritePing(false, [8]byte{7}); err != nil {
			t.Fatal(err)
		}
		f := c.until(t, 5*time.Second, func(f http2.Frame) bool {
			p, ok := f.(*http2.PingFrame)
			return isGoAway(f) || ok && p.IsAck() && p.Data == [8]byte{7}
		})
		if isGoAway(f) {
			t.Fatalf("GOAWAY %v to a client within the policy", f)
		}
		if n := guard.Stats().TooManyPings; n != 1 {
			t.Fatalf("TooManyPings = %d, want the flood's 1 only", n)
		}
	})
}

// At its maximum age an HTTP/2 connection is sent GOAWAY NO_ERROR with the
// last stream id 2³¹−1 while its open stream is still served to the end;
// the listener closes it after the grace.
func TestHTTP2GuardMaxConnAge(t *testing.T) {
	release := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		_, _ = io.WriteString(w, "late")
	})
	const age, grace = 300 * time.Millisecond, 700 * time.Millisecond
	guard := wire.NewHTTP2Guard(wire.HTTP2GuardOptions{MaxConnAge: age})
	addr, ln := guardedServer(t, guard, wire.ListenerOptions{MaxConnAge: age, MaxConnAgeGrace: grace}, nil, slow)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c := dialH2(t, nc)
	// The HTTP/2 settings are still the server's own.
	st := c.until(t, 5*time.Second, func(f http2.Frame) bool { _, ok := f.(*http2.SettingsFrame); return ok }).(*http2.SettingsFrame)
	if v, ok := st.Value(http2.SettingMaxConcurrentStreams); !ok || v != 7 {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (%v), want the server's 7", v, ok)
	}
	c.get(t, 1, "/")
	ga := c.until(t, 5*time.Second, isGoAway).(*http2.GoAwayFrame)
	if ga.ErrCode != http2.ErrCodeNo || ga.LastStreamID != 1<<31-1 {
		t.Fatalf("GOAWAY %v last %d, want NO_ERROR last 2^31-1", ga.ErrCode, ga.LastStreamID)
	}
	if took := time.Since(start); took < age*9/10 {
		t.Fatalf("GOAWAY after %v, before the age %v", took, age)
	}
	close(release)
	c.until(t, 5*time.Second, func(f http2.Frame) bool { d, ok := f.(*http2.DataFrame); return ok && string(d.Data()) == "late" })
	if !c.closedWithin(5 * time.Second) {
		t.Fatal("the aged connection was not closed")
	}
	if took := time.Since(start); took < age+grace*9/10 {
		t.Fatalf("closed after %v, before the grace ended (%v)", took, age+grace)
	}
	if g, l := guard.Stats().AgedGoAways, ln.Stats().Expired; g != 1 || l != 1 {
		t.Fatalf("AgedGoAways = %d, Expired = %d; want 1 and 1", g, l)
	}
}

// Over TLS the guard keeps the connection's TLS state (r.TLS) and holds
// the same ping policy.
func TestHTTP2GuardOverTLS(t *testing.T) {
	ca := wiretest.NewCA(t, "ca")
	certFile, keyFile := ca.Issue(t, t.TempDir(), "server")
	cfg, err := wire.ServerTLS(certFile, keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	guard := wire.NewHTTP2Guard(wire.HTTP2GuardOptions{PingMinTime: time.Hour})
	sawTLS := make(chan bool, 1)
	addr, _ := guardedServer(t, guard, wire.ListenerOptions{}, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawTLS <- r.TLS != nil && r.ProtoMajor == 2
		_, _ = io.WriteString(w, "ok")
	}))
	ccfg, err := wire.ClientTLS(ca.File, "", "")
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: ccfg, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.ProtoMajor != 2 || !<-sawTLS {
		t.Fatalf("HTTP/%d, TLS state seen %v; want HTTP/2 with r.TLS", resp.ProtoMajor, false)
	}

	ccfg = ccfg.Clone()
	ccfg.NextProtos = []string{"h2"}
	tc, err := tls.Dial("tcp", addr, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	c := dialH2(t, tc)
	for i := range 10 {
		if err := c.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	ga := c.until(t, 5*time.Second, isGoAway).(*http2.GoAwayFrame)
	if ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("GOAWAY %v over TLS, want ENHANCE_YOUR_CALM", ga.ErrCode)
	}
}
