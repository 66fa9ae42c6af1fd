package client_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
	"github.com/varplane/varplane/rpc/gen/varplane/v1/varplanev1connect"
)

const benchSubscribers = 1000

// latencies records when each subscriber received each generation, without
// locks: subscriber i writes only row i.
type latencies struct {
	start    []time.Time   // by generation
	recv     [][]time.Time // [subscriber][generation]
	received []atomic.Int32
	done     []chan struct{} // closed when every subscriber has the generation
}

func newLatencies(n int) *latencies {
	l := &latencies{start: make([]time.Time, n+1), recv: make([][]time.Time, benchSubscribers), received: make([]atomic.Int32, n+1), done: make([]chan struct{}, n+1)}
	for i := range l.recv {
		l.recv[i] = make([]time.Time, n+1)
	}
	for i := range l.done {
		l.done[i] = make(chan struct{})
	}
	return l
}

func (l *latencies) got(sub int, gen uint64, at time.Time) {
	if gen == 0 || gen >= uint64(len(l.start)) || !l.recv[sub][gen].IsZero() {
		return
	}
	l.recv[sub][gen] = at
	if l.received[gen].Add(1) == benchSubscribers {
		close(l.done[gen])
	}
}

func (l *latencies) report(b *testing.B) {
	var all []time.Duration
	for _, row := range l.recv {
		for g, at := range row {
			if !at.IsZero() {
				all = append(all, at.Sub(l.start[g]))
			}
		}
	}
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(all[len(all)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(len(all))/float64(b.N), "deliveries/op")
}

// commitAndWait commits generation g of the bench scope and waits until
// every subscriber has it, so that iterations do not overlap.
func commitAndWait(b *testing.B, p *plane, lat *latencies, revs []varplane.Revision, g int) {
	lat.start[g] = time.Now()
	if _, err := p.engine.Activate(context.Background(), varplane.ActivateRequest{Scope: "bench.x", Revision: revs[g%2], ExpectedGeneration: varplane.Generation(g - 1)}); err != nil {
		b.Fatal(err)
	}
	select {
	case <-lat.done[g]:
	case <-time.After(10 * time.Second):
		b.Fatalf("generation %d reached %d of %d subscribers", g, lat.received[g].Load(), benchSubscribers)
	}
}

func benchRevisions(b *testing.B, p *plane) []varplane.Revision {
	var revs []varplane.Revision
	for _, doc := range []string{`{"n":1,"flag":true}`, `{"n":2,"flag":false}`} {
		r, err := p.engine.CreateRevision(context.Background(), varplane.CreateRevisionRequest{Scope: "bench.x", Document: json.RawMessage(doc)})
		if err != nil {
			b.Fatal(err)
		}
		revs = append(revs, r.Revision)
	}
	return revs
}

// The commit → delivery benchmarks run the server and 1,000 subscribers in
// one process on the same cores, so the subscribers' own cost is part of
// every figure. Each benchmark therefore has two client treatments:
//
//   - raw: the cheapest client that still speaks the protocol: SSE over a
//     plain TCP connection whose reader only finds the event id in the bytes
//     it read; gRPC over hand-framed HTTP/2 with one reader goroutine per
//     connection that only walks the frames and envelopes to the
//     generation. The receipt time is taken right after the read returns.
//     This is the figure of the server.
//   - proc: the raw subscribers in a child process (this test binary run
//     again), as a separate consumer process would be and as the etcd
//     comparison measures etcd: the kernel schedules the subscribers next
//     to the server instead of the Go scheduler running them only after
//     the server's goroutines. Receipt times are wall-clock times read
//     back from the child; cpu-ms/op is then the server process alone.
//   - the stock client (net/http for SSE, connect-go over net/http's HTTP/2
//     transport for gRPC, one goroutine per stream, full decoding): what
//     an application built on those clients sees on the same cores.

// BenchmarkCommitToDeliverySSE: one commit (engine.Activate) to 1,000 SSE
// connections; each op waits for all of them.
func BenchmarkCommitToDeliverySSE(b *testing.B) {
	b.Run("proc", func(b *testing.B) { benchProc(b, "sse") })
	b.Run("floor", benchFloor)
	b.Run("raw", func(b *testing.B) { benchSSE(b, rawSSESubscriber) })
	b.Run("nethttp", func(b *testing.B) { benchSSE(b, netHTTPSSESubscriber) })
}

// sseSubscriber opens subscriber sub's stream and reports every bench.x
// generation it reads to lat until the stream ends.
type sseSubscriber func(b *testing.B, ctx context.Context, p *plane, lat *latencies, sub int)

func benchSSE(b *testing.B, open sseSubscriber) {
	p := startPlane(b, planeOptions{})
	revs := benchRevisions(b, p)
	lat := newLatencies(b.N)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < benchSubscribers; i++ {
		open(b, ctx, p, lat, i)
	}
	for p.hub.Stats().Subscribers < benchSubscribers {
		time.Sleep(time.Millisecond)
	}
	cpu0 := processCPU()
	b.ResetTimer()
	for g := 1; g <= b.N; g++ {
		commitAndWait(b, p, lat, revs, g)
	}
	b.StopTimer()
	// CPU time of the whole process (server and subscribers) per commit:
	// steadier than the latencies on a machine shared with other work.
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
	lat.report(b)
}

var sseIDPrefix = []byte("\nid: bench.x@")

// scanSSEIDs reports every complete "id: bench.x@<gen>" line in data and
// returns the tail that may hold an incomplete one.
func scanSSEIDs(data []byte, report func(uint64)) []byte {
	for {
		i := bytes.Index(data, sseIDPrefix)
		if i < 0 {
			if len(data) > len(sseIDPrefix) {
				data = data[len(data)-len(sseIDPrefix):]
			}
			return data
		}
		rest := data[i+len(sseIDPrefix):]
		var g uint64
		j := 0
		for ; j < len(rest) && rest[j] >= '0' && rest[j] <= '9'; j++ {
			g = g*10 + uint64(rest[j]-'0')
		}
		if j == len(rest) { // the line continues in the next read
			return data[i:]
		}
		report(g)
		data = rest[j:]
	}
}

// rawSSESubscriber reads the stream from a plain TCP connection; the chunked
// transfer encoding is not undone, since an event is never split by it in
// a way that matters here: the server writes each event whole in one chunk.
func rawSSESubscriber(b *testing.B, ctx context.Context, p *plane, lat *latencies, sub int) {
	if err := openRawSSE(ctx, p.addr, lat, sub); err != nil {
		b.Fatal(err)
	}
}

func openRawSSE(ctx context.Context, addr string, lat *latencies, sub int) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { conn.Close() })
	if _, err := io.WriteString(conn, "GET /vars/watch?key=bench.x HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
		return err
	}
	go func() {
		defer conn.Close()
		buf := make([]byte, 16<<10)
		var carry []byte
		headerDone := false
		for {
			n, err := conn.Read(buf)
			at := time.Now()
			data := buf[:n]
			if len(carry) > 0 {
				carry = append(carry, data...)
				data = carry
			}
			if !headerDone {
				i := bytes.Index(data, []byte("\r\n\r\n"))
				if i < 0 {
					carry = append(carry[:0], data...)
					if err != nil {
						return
					}
					continue
				}
				headerDone, data = true, data[i+4:]
			}
			tail := scanSSEIDs(data, func(g uint64) { lat.got(sub, g, at) })
			carry = append(carry[:0], tail...)
			if err != nil {
				return
			}
		}
	}()
	return nil
}

// netHTTPSSESubscriber reads the stream with net/http's client.
func netHTTPSSESubscriber(b *testing.B, ctx context.Context, p *plane, lat *latencies, sub int) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url()+"/vars/watch?key=bench.x", nil)
	resp, err := sseBenchClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		defer resp.Body.Close()
		buf := make([]byte, 16<<10)
		var pending []byte
		for {
			n, err := resp.Body.Read(buf)
			at := time.Now()
			pending = append(pending, buf[:n]...)
			for {
				i := bytes.IndexByte(pending, '\n')
				if i < 0 {
					break
				}
				line := pending[:i]
				pending = pending[i+1:]
				if id, ok := bytes.CutPrefix(line, []byte("id: bench.x@")); ok {
					g, _ := strconv.ParseUint(string(id), 10, 64)
					lat.got(sub, g, at)
				}
			}
			if err != nil {
				return
			}
		}
	}()
}

var sseBenchClient = sseHTTPClient()

const benchRPCConns = 10

// BenchmarkCommitToDeliveryGRPC: one commit to 1,000 gRPC streams carried
// by 10 HTTP/2 connections.
func BenchmarkCommitToDeliveryGRPC(b *testing.B) {
	b.Run("proc", func(b *testing.B) { benchProc(b, "grpc") })
	b.Run("watch-proc", func(b *testing.B) { benchProc(b, "watch") })
	b.Run("watch-shared-proc", func(b *testing.B) { benchProc(b, "watch-shared") })
	b.Run("raw", func(b *testing.B) { benchGRPC(b, rawGRPCSubscribers) })
	b.Run("connect", func(b *testing.B) { benchGRPC(b, connectGRPCSubscribers) })
}

// grpcSubscribers opens benchSubscribers Subscribe streams over
// benchRPCConns connections, reporting every bench.x generation to lat.
type grpcSubscribers func(b *testing.B, ctx context.Context, p *plane, lat *latencies)

func benchGRPC(b *testing.B, open grpcSubscribers) {
	p := startPlane(b, planeOptions{})
	revs := benchRevisions(b, p)
	lat := newLatencies(b.N)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open(b, ctx, p, lat)
	for p.hub.Stats().Subscribers < benchSubscribers {
		time.Sleep(time.Millisecond)
	}
	cpu0 := processCPU()
	b.ResetTimer()
	for g := 1; g <= b.N; g++ {
		commitAndWait(b, p, lat, revs, g)
	}
	b.StopTimer()
	// CPU time of the whole process (server and subscribers) per commit:
	// steadier than the latencies on a machine shared with other work.
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
	lat.report(b)
}

func connectGRPCSubscribers(b *testing.B, ctx context.Context, p *plane, lat *latencies) {
	clients := make([]varplanev1connect.PushServiceClient, benchRPCConns)
	for i := range clients {
		clients[i] = varplanev1connect.NewPushServiceClient(h2cClient(), p.rpc.URL(), connect.WithGRPC())
	}
	for i := 0; i < benchSubscribers; i++ {
		stream, err := clients[i%len(clients)].Subscribe(ctx, connect.NewRequest(&v1.SubscribeRequest{Keys: []string{"bench.x"}}))
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			defer stream.Close()
			sub := i
			for stream.Receive() {
				at := time.Now()
				for _, h := range stream.Msg().GetHeads() {
					lat.got(sub, h.GetGeneration(), at)
				}
			}
		}()
	}
}

// HTTP/2 frame types and flags the raw gRPC client uses (RFC 9113).
const (
	h2Data         = 0x0
	h2Headers      = 0x1
	h2Settings     = 0x4
	h2Ping         = 0x6
	h2GoAway       = 0x7
	h2WindowUpdate = 0x8
	h2FlagEnd      = 0x1 // END_STREAM on DATA/HEADERS, ACK on SETTINGS/PING
	h2FlagHeaders  = 0x4 // END_HEADERS
	h2FlagPadded   = 0x8
)

func h2Frame(dst []byte, typ, flags byte, stream uint32, payload []byte) []byte {
	n := len(payload)
	dst = append(dst, byte(n>>16), byte(n>>8), byte(n), typ, flags)
	dst = binary.BigEndian.AppendUint32(dst, stream&0x7fffffff)
	return append(dst, payload...)
}

// hpackLiteral encodes a header field as a literal without indexing with a
// literal name, no Huffman coding: valid HPACK that needs no table.
func hpackLiteral(dst []byte, name, value string) []byte {
	dst = append(dst, 0x00)
	dst = hpackString(dst, name)
	return hpackString(dst, value)
}

func hpackString(dst []byte, s string) []byte {
	n := len(s)
	if n < 127 {
		dst = append(dst, byte(n))
	} else {
		dst = append(dst, 127)
		for n -= 127; n >= 128; n >>= 7 {
			dst = append(dst, byte(n&0x7f|0x80))
		}
		dst = append(dst, byte(n))
	}
	return append(dst, s...)
}

// rawGRPCSubscribers speaks just enough HTTP/2 to open the streams and read
// their DATA frames: huge flow-control windows (so no WINDOW_UPDATE is ever
// needed during a run), SETTINGS and PING acknowledged, one reader goroutine
// per connection.
func rawGRPCSubscribers(b *testing.B, ctx context.Context, p *plane, lat *latencies) {
	if err := openRawGRPC(ctx, strings.TrimPrefix(p.rpc.URL(), "http://"), lat); err != nil {
		b.Fatal(err)
	}
}

func openRawGRPC(ctx context.Context, addr string, lat *latencies) error {
	req, err := proto.Marshal(&v1.SubscribeRequest{Keys: []string{"bench.x"}})
	if err != nil {
		return err
	}
	msg := append([]byte{0, byte(len(req) >> 24), byte(len(req) >> 16), byte(len(req) >> 8), byte(len(req))}, req...)
	perConn := benchSubscribers / benchRPCConns
	for c := 0; c < benchRPCConns; c++ {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		context.AfterFunc(ctx, func() { conn.Close() })
		out := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
		// SETTINGS_INITIAL_WINDOW_SIZE (0x4) = 2^31-1; connection window the same.
		out = h2Frame(out, h2Settings, 0, 0, []byte{0, 4, 0x7f, 0xff, 0xff, 0xff})
		out = h2Frame(out, h2WindowUpdate, 0, 0, binary.BigEndian.AppendUint32(nil, 1<<31-1-65535))
		for i := 0; i < perConn; i++ {
			id := uint32(2*i + 1)
			var hb []byte
			hb = hpackLiteral(hb, ":method", "POST")
			hb = hpackLiteral(hb, ":scheme", "http")
			hb = hpackLiteral(hb, ":path", "/"+varplanev1connect.PushServiceName+"/Subscribe")
			hb = hpackLiteral(hb, ":authority", addr)
			hb = hpackLiteral(hb, "content-type", "application/grpc")
			hb = hpackLiteral(hb, "te", "trailers")
			out = h2Frame(out, h2Headers, h2FlagHeaders, id, hb)
			out = h2Frame(out, h2Data, h2FlagEnd, id, msg)
		}
		if _, err := conn.Write(out); err != nil {
			return err
		}
		go readRawGRPC(conn, c*perConn, lat)
	}
	return nil
}

// readRawGRPC reads one connection's frames and reports each head's
// generation for the subscriber its stream belongs to.
func readRawGRPC(conn net.Conn, firstSub int, lat *latencies) {
	defer conn.Close()
	var mu sync.Mutex // serializes the acknowledgements this goroutine writes
	write := func(frame []byte) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = conn.Write(frame)
	}
	streams := map[uint32][]byte{} // stream id → bytes of an incomplete envelope
	buf := make([]byte, 64<<10)
	var data, pendingBuf []byte
	for {
		n, err := conn.Read(buf)
		at := time.Now()
		data = append(data, buf[:n]...)
		for len(data) >= 9 {
			size := int(data[0])<<16 | int(data[1])<<8 | int(data[2])
			if len(data) < 9+size {
				break
			}
			typ, flags := data[3], data[4]
			id := binary.BigEndian.Uint32(data[5:9]) & 0x7fffffff
			payload := data[9 : 9+size]
			switch typ {
			case h2Settings:
				if flags&h2FlagEnd == 0 {
					write(h2Frame(nil, h2Settings, h2FlagEnd, 0, nil))
				}
			case h2Ping:
				if flags&h2FlagEnd == 0 {
					write(h2Frame(nil, h2Ping, h2FlagEnd, 0, payload))
				}
			case h2GoAway:
				return
			case h2Data:
				if flags&h2FlagPadded != 0 && len(payload) > 0 {
					pad := int(payload[0])
					payload = payload[1 : len(payload)-pad]
				}
				sub := firstSub + int(id-1)/2
				env := payload
				if held := streams[id]; len(held) > 0 {
					env = append(held, payload...)
				}
				for len(env) >= 5 {
					m := int(binary.BigEndian.Uint32(env[1:5]))
					if len(env) < 5+m {
						break
					}
					rawHeadGenerations(env[5:5+m], func(g uint64) { lat.got(sub, g, at) })
					env = env[5+m:]
				}
				if len(env) > 0 || len(streams[id]) > 0 {
					streams[id] = append(streams[id][:0:0], env...)
				}
			}
			data = data[9+size:]
		}
		// Keep the incomplete frame at the front of the buffer's storage.
		data = append(pendingBuf[:0], data...)
		pendingBuf = data
		if err != nil {
			return
		}
	}
}

// rawHeadGenerations walks a SnapshotBatch's heads (field 1) to their
// generation (field 2) without decoding anything else.
func rawHeadGenerations(batch []byte, report func(uint64)) {
	for len(batch) > 0 {
		num, typ, n := protowire.ConsumeTag(batch)
		if n < 0 {
			return
		}
		batch = batch[n:]
		if num != 1 || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, batch)
			if n < 0 {
				return
			}
			batch = batch[n:]
			continue
		}
		head, n := protowire.ConsumeBytes(batch)
		if n < 0 {
			return
		}
		batch = batch[n:]
		for len(head) > 0 {
			hn, ht, k := protowire.ConsumeTag(head)
			if k < 0 {
				break
			}
			head = head[k:]
			if hn == 2 && ht == protowire.VarintType {
				g, _ := protowire.ConsumeVarint(head)
				report(g)
				break
			}
			k = protowire.ConsumeFieldValue(hn, ht, head)
			if k < 0 {
				break
			}
			head = head[k:]
		}
	}
}

// Environment of the subscriber child process of benchProc.
const (
	envBenchMode = "VARPLANE_BENCH_SUBSCRIBER" // "sse", "grpc", "watch" or "watch-shared"
	envBenchAddr = "VARPLANE_BENCH_ADDR"
	envBenchN    = "VARPLANE_BENCH_N"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envBenchMode); mode != "" {
		if err := runBenchSubscribers(mode, os.Getenv(envBenchAddr), os.Getenv(envBenchN)); err != nil {
			fmt.Fprintln(os.Stderr, "bench subscribers:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runBenchSubscribers is the child of benchProc: it opens the raw
// subscribers, writes "<gen>\n" to stdout when all of them have gen, and
// when stdin closes writes every receipt time (Unix ns, subscriber-major,
// generations 0..n) and returns.
func runBenchSubscribers(mode, addr, nArg string) error {
	n, err := strconv.Atoi(nArg)
	if err != nil {
		return err
	}
	lat := newLatencies(n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	switch mode {
	case "sse":
		for i := 0; i < benchSubscribers; i++ {
			if err := openRawSSE(ctx, addr, lat, i); err != nil {
				return err
			}
		}
	case "grpc":
		if err := openRawGRPC(ctx, addr, lat); err != nil {
			return err
		}
	case "watch", "watch-shared":
		if err := openGRPCWatches(ctx, addr, lat, mode == "watch-shared"); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	go func() {
		for g := 1; g <= n; g++ {
			<-lat.done[g]
			fmt.Fprintf(os.Stdout, "%d\n", g)
		}
	}()
	_, _ = io.Copy(io.Discard, os.Stdin)
	out := make([]byte, 0, benchSubscribers*(n+1)*8)
	for _, row := range lat.recv {
		for _, at := range row {
			var ns int64
			if !at.IsZero() {
				ns = at.UnixNano()
			}
			out = binary.LittleEndian.AppendUint64(out, uint64(ns))
		}
	}
	_, err = os.Stdout.Write(out)
	return err
}

// openGRPCWatches opens the subscribers as watches of bench.x with stock
// grpc-go: one Watch stream on each of benchRPCConns connections, a
// hundred watches each (subscriber i is watch i+1 on connection
// i%benchRPCConns). With share they ask for shared responses
// (share_responses), so a commit is one response per stream naming them.
func openGRPCWatches(ctx context.Context, addr string, lat *latencies, share bool) error {
	for c := range benchRPCConns {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		w, err := v1.NewPushServiceClient(cc).Watch(ctx)
		if err != nil {
			return err
		}
		for i := c; i < benchSubscribers; i += benchRPCConns {
			req := &v1.WatchCreateRequest{WatchId: int64(i + 1), Keys: []string{"bench.x"}, ShareResponses: share}
			if err := w.Send(&v1.WatchRequest{Request: &v1.WatchRequest_Create{Create: req}}); err != nil {
				return err
			}
		}
		go func() {
			defer cc.Close()
			for {
				m, err := w.Recv()
				if err != nil {
					return
				}
				h := m.GetBatch().GetHeads()
				if len(h) == 0 || m.GetBatch().GetSnapshot() {
					continue
				}
				now := time.Now()
				ids := m.GetWatchIds()
				if len(ids) == 0 {
					ids = []int64{m.GetWatchId()}
				}
				for _, id := range ids {
					if sub := int(id) - 1; sub >= 0 && sub < benchSubscribers {
						lat.got(sub, h[0].GetGeneration(), now)
					}
				}
			}
		}()
	}
	return nil
}

// benchProc runs the subscribers of mode in a child process.
func benchProc(b *testing.B, mode string) {
	p := startPlane(b, planeOptions{})
	revs := benchRevisions(b, p)
	addr := p.addr
	if mode != "sse" {
		addr = strings.TrimPrefix(p.rpc.URL(), "http://")
	}
	runProc(b, mode, addr, func() int64 { return p.hub.Stats().Subscribers }, func(g int) {
		if _, err := p.engine.Activate(context.Background(), varplane.ActivateRequest{Scope: "bench.x", Revision: revs[g%2], ExpectedGeneration: varplane.Generation(g - 1)}); err != nil {
			b.Fatal(err)
		}
	})
}

// benchFloor is the SSE measurement without varplane: the same child
// process of raw SSE subscribers, served by a bare TCP server that answers
// each request with a status line and then writes an event of the same size
// as the real one to all 1,000 connections from GOMAXPROCS goroutines (the
// writer count that measured fastest). No HTTP server, hub, store or
// commit: what is left is the kernel's loopback TCP path and the readers,
// the floor that one TCP connection per subscriber costs on this machine.
func benchFloor(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ln.Close() })
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				br := bufio.NewReader(c)
				for { // the request head ends with an empty line
					line, err := br.ReadString('\n')
					if err != nil {
						_ = c.Close()
						return
					}
					if line == "\r\n" {
						break
					}
				}
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"); err != nil {
					_ = c.Close()
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}()
		}
	}()
	b.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	// The event the real server sends for bench.x, chunk framing included.
	const body = `{"scope":"bench.x","revision":"sha256:0000000000000000000000000000000000000000000000000000000000000000","generation":%d,"effectiveAt":"2026-12-01T00:00:00.000000000Z","values":{"bench.x":{"n":1,"flag":true}}}`
	writers := runtime.GOMAXPROCS(0)
	runProc(b, "sse", ln.Addr().String(), func() int64 {
		mu.Lock()
		defer mu.Unlock()
		return int64(len(conns))
	}, func(g int) {
		ev := fmt.Sprintf("event: head\nid: bench.x@%d\ndata: "+body+"\n\n", g, g)
		frame := []byte(fmt.Sprintf("%x\r\n%s\r\n", len(ev), ev))
		mu.Lock()
		all := conns
		mu.Unlock()
		var wg sync.WaitGroup
		per := (len(all) + writers - 1) / writers
		for lo := 0; lo < len(all); lo += per {
			wg.Add(1)
			go func(part []net.Conn) {
				defer wg.Done()
				for _, c := range part {
					if _, err := c.Write(frame); err != nil {
						b.Error(err)
						return
					}
				}
			}(all[lo:min(lo+per, len(all))])
		}
		wg.Wait()
	})
}

// runProc starts the subscriber child process on addr, waits until
// connected reports all of them, then times commit(g) for each generation
// until the child has acknowledged it, and reports the latencies the child
// recorded.
func runProc(b *testing.B, mode, addr string, connected func() int64, commit func(g int)) {
	lat := newLatencies(b.N)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envBenchMode+"="+mode, envBenchAddr+"="+addr, envBenchN+"="+strconv.Itoa(b.N))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	finished := false
	b.Cleanup(func() {
		if !finished {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for connected() < benchSubscribers {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d subscribers connected", connected(), benchSubscribers)
		}
		time.Sleep(time.Millisecond)
	}
	r := bufio.NewReader(stdout)
	acks := make(chan int, 1)
	go func() {
		defer close(acks)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			g, _ := strconv.Atoi(strings.TrimSpace(line))
			acks <- g
			if g == b.N {
				return
			}
		}
	}()
	cpu0 := processCPU()
	b.ResetTimer()
	for g := 1; g <= b.N; g++ {
		lat.start[g] = time.Now()
		commit(g)
		select {
		case got, ok := <-acks:
			if !ok || got != g {
				b.Fatalf("subscriber process acknowledged %d (open %v), want %d", got, ok, g)
			}
		case <-time.After(10 * time.Second):
			b.Fatalf("generation %d did not reach every subscriber", g)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(b.N), "server-cpu-ms/op")
	_ = stdin.Close()
	raw, err := io.ReadAll(r)
	if err != nil || len(raw) != benchSubscribers*(b.N+1)*8 {
		b.Fatalf("read receipt times: %d bytes, %v", len(raw), err)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatal(err)
	}
	finished = true
	for sub := range lat.recv {
		for g := range lat.recv[sub] {
			if ns := int64(binary.LittleEndian.Uint64(raw[(sub*(b.N+1)+g)*8:])); ns != 0 {
				lat.recv[sub][g] = time.Unix(0, ns)
			}
		}
	}
	lat.report(b)
}

// processCPU returns the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchClient(b *testing.B) *client.Client {
	p := startPlane(b, planeOptions{})
	p.activateDirect("read.x", `{"n":1,"name":"x"}`)
	c, err := client.New(p.url(), client.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Register("read.x"); err != nil {
		b.Fatal(err)
	}
	c.Start()
	b.Cleanup(c.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Fetch(ctx, "read.x"); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkValue is the SDK's hot read of a raw value.
func BenchmarkValue(b *testing.B) {
	c := benchClient(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := c.Value("read.x"); !ok {
			b.Fatal("no value")
		}
	}
}

// BenchmarkGet is the SDK's hot typed read (decoded once, then cached).
func BenchmarkGet(b *testing.B) {
	c := benchClient(b)
	type doc struct {
		N    int    `json:"n"`
		Name string `json:"name"`
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := client.Get[doc](c, "read.x"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetParallel reads from every P at once: no lock, no contention.
func BenchmarkGetParallel(b *testing.B) {
	c := benchClient(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := client.Get[numDoc](c, "read.x"); err != nil {
				panic(fmt.Sprint(err))
			}
		}
	})
}
