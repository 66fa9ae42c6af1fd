package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

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

// BenchmarkCommitToDeliverySSE: one commit (engine.Activate) to 1,000 SSE
// connections; each op waits for all of them.
func BenchmarkCommitToDeliverySSE(b *testing.B) {
	p := startPlane(b, planeOptions{})
	revs := benchRevisions(b, p)
	lat := newLatencies(b.N)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hc := sseHTTPClient()
	for i := 0; i < benchSubscribers; i++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url()+"/vars/watch?key=bench.x", nil)
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			defer resp.Body.Close()
			sub := i
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
	for p.hub.Stats().Subscribers < benchSubscribers {
		time.Sleep(time.Millisecond)
	}
	b.ResetTimer()
	for g := 1; g <= b.N; g++ {
		commitAndWait(b, p, lat, revs, g)
	}
	b.StopTimer()
	lat.report(b)
}

// BenchmarkCommitToDeliveryGRPC: one commit to 1,000 gRPC streams carried
// by 10 HTTP/2 connections.
func BenchmarkCommitToDeliveryGRPC(b *testing.B) {
	p := startPlane(b, planeOptions{})
	revs := benchRevisions(b, p)
	lat := newLatencies(b.N)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clients := make([]varplanev1connect.PushServiceClient, 10)
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
	for p.hub.Stats().Subscribers < benchSubscribers {
		time.Sleep(time.Millisecond)
	}
	b.ResetTimer()
	for g := 1; g <= b.N; g++ {
		commitAndWait(b, p, lat, revs, g)
	}
	b.StopTimer()
	lat.report(b)
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
