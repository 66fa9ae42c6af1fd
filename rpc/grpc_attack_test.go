package rpc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/metadata"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/rpc"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
)

// These are the attacks of issue 12 against the gRPC listener, frame by
// frame where a stock client would refuse to send them.

// needsToken refuses every request without a bearer token.
var needsToken = varplane.AuthorizerFunc(func(_ context.Context, a varplane.Access) (varplane.Identity, error) {
	if a.Token == "" {
		return varplane.Identity{}, varplane.Errorf(varplane.CodeUnauthorized, "a bearer token is required")
	}
	return varplane.Anonymous, nil
})

// rawH2 is one h2c connection spoken frame by frame.
type rawH2 struct {
	nc   net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	henc *hpack.Encoder
}

func dialRaw(t *testing.T, addr string) *rawH2 {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	c := &rawH2{nc: nc, fr: http2.NewFramer(nc, nc)}
	c.henc = hpack.NewEncoder(&c.hbuf)
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c
}

// headers opens stream id as a gRPC call of path without ending it.
func (c *rawH2) headers(id uint32, path string) error {
	c.hbuf.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", "127.0.0.1"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = c.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true})
}

// drain reads the server's frames until the connection ends, and reports
// how it ended. (It never writes: the framer's writes are the test's.)
func (c *rawH2) drain() <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			f, err := c.fr.ReadFrame()
			if err != nil {
				done <- err
				return
			}
			if f, ok := f.(*http2.GoAwayFrame); ok {
				done <- errors.New("goaway " + f.ErrCode.String())
				return
			}
		}
	}()
	return done
}

// One connection opens 1,000 streams, each announcing a 1 MiB request and
// sending 16 KiB of it, with no token: the server buffers at most a window
// per stream, refuses the oversized requests from their length prefix and
// the streams past its limit, and its memory stays bounded.
func TestGRPCStreamsWithLargeBodiesAndNoToken(t *testing.T) {
	_, hub, srv := rpc.StartTestServer(t, push.Options{}, needsToken, nil)
	addr := strings.TrimPrefix(srv.URL(), "http://")
	body := make([]byte, 16<<10)
	body[0] = 0
	binary.BigEndian.PutUint32(body[1:5], 1<<20)
	heap, rssGrowth := memoryDuring(t, func() {
		c := dialRaw(t, addr)
		ended := c.drain()
		for i := range 1000 {
			id := uint32(2*i + 1)
			if err := c.headers(id, "/varplane.v1.PushService/Subscribe"); err != nil {
				break
			}
			if err := c.fr.WriteData(id, false, body); err != nil {
				break
			}
		}
		select {
		case <-ended:
		case <-time.After(time.Second):
		}
	})
	// Generous (the race detector multiplies memory): the server this
	// replaced grew by 1.79 GB here.
	t.Logf("heap growth %d KiB, RSS growth %d KiB", heap>>10, rssGrowth>>10)
	if heap > memoryBound || rssGrowth > 4*memoryBound {
		t.Errorf("memory grew by heap %d MiB, RSS %d MiB; want under %d and %d MiB", heap>>20, rssGrowth>>20, memoryBound>>20, 4*memoryBound>>20)
	}
	if n := hub.Stats().Subscribers; n != 0 {
		t.Errorf("subscribers = %d, want 0", n)
	}
	// The server still serves.
	s, err := dial(t, srv).Subscribe(metadataToken(t, "ok"), &v1.SubscribeRequest{Keys: []string{"a.b"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatalf("a good request after the attack: %v", err)
	}
}

// WINDOW_UPDATE frames on idle streams are a connection error: the flood
// ends with the connection (GOAWAY PROTOCOL_ERROR) at its first frame.
func TestGRPCWindowUpdateFloodIsCut(t *testing.T) {
	_, _, srv := rpc.StartTestServer(t, push.Options{}, nil, nil)
	c := dialRaw(t, strings.TrimPrefix(srv.URL(), "http://"))
	ended := c.drain()
	start := time.Now()
	for i := uint32(0); i < 100000; i++ {
		if err := c.fr.WriteWindowUpdate(2*i+101, 1); err != nil {
			break
		}
	}
	select {
	case err := <-ended:
		if !strings.Contains(err.Error(), "PROTOCOL_ERROR") && !errors.Is(err, io.EOF) && !isReset(err) {
			t.Errorf("connection ended with %v, want GOAWAY PROTOCOL_ERROR", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the flood went on for %v without the connection ending", time.Since(start))
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// A stream opened and left without its request (half-open) does not hold
// the connection past the request timeout: the stream is ended.
func TestGRPCHalfOpenStreamEnds(t *testing.T) {
	_, _, srv := rpc.StartTestServer(t, push.Options{}, nil, func(s *rpc.Server) { s.GRPC.RequestTimeout = 200 * time.Millisecond })
	c := dialRaw(t, strings.TrimPrefix(srv.URL(), "http://"))
	if err := c.headers(1, "/varplane.v1.PushService/Subscribe"); err != nil {
		t.Fatal(err)
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("no end of the half-open stream: %v", err)
		}
		if h, ok := f.(*http2.HeadersFrame); ok && h.StreamID == 1 && h.StreamEnded() {
			break // the trailers: grpc-status DEADLINE_EXCEEDED
		}
		if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == 1 {
			break
		}
	}
	if n := srv.GRPCServer().Stats().Streams; n != 0 {
		t.Errorf("streams open = %d, want 0", n)
	}
}

// The HTTP/1.1 side of the listener refuses a 300 MB body without
// reading it whole: the Connect handler's body limit answers first.
func TestHTTP1LargeBodyRefused(t *testing.T) {
	_, _, srv := rpc.StartTestServer(t, push.Options{}, nil, nil)
	const size = 300 << 20
	var sent atomic.Int64
	body := readerFunc(func(p []byte) (int, error) {
		if sent.Load() >= size {
			return 0, io.EOF
		}
		n := min(int64(len(p)), size-sent.Load())
		clear(p[:n])
		sent.Add(n)
		return int(n), nil
	})
	req, err := http.NewRequest("POST", srv.URL()+"/varplane.v1.PushService/Subscribe", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/connect+proto")
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK && resp.Header.Get("Grpc-Status") == "" && !strings.Contains(resp.Header.Get("Content-Type"), "connect") {
			t.Errorf("status %d", resp.StatusCode)
		}
	}
	if sent.Load() >= size {
		t.Errorf("the client sent all %d MB: the server read the body whole", size>>20)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func metadataToken(t *testing.T, token string) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return withToken(ctx, token)
}

func withToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}
