package rpc_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/rpc"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
)

// BenchmarkFanOut measures one commit delivered to every subscriber of a
// key, with stock grpc-go subscribers in this process on 10 connections:
// Subscribe (one stream per subscriber) against Watch (one stream per
// connection carrying all its watches), the watches answered one response
// each (Watch, what a client without share_responses gets) or one response
// per commit per stream naming every watch (WatchShared). Metrics: p50/p99
// of commit → delivery, and the process's CPU (server and subscribers
// together) per delivery.
func BenchmarkFanOut(b *testing.B) {
	for _, tc := range []struct {
		name         string
		watch, share bool
		n            int
	}{
		{"Subscribe/1000", false, false, 1000},
		{"Watch/1000", true, false, 1000}, {"WatchShared/1000", true, true, 1000},
		{"Watch/10000", true, false, 10000}, {"WatchShared/10000", true, true, 10000},
	} {
		b.Run(tc.name, func(b *testing.B) { benchFanOut(b, tc.watch, tc.share, tc.n) })
	}
}

func benchFanOut(b *testing.B, watch, share bool, n int) {
	e, _, srv := rpc.StartTestServer(b, push.Options{MaxSubscribers: 2 * n, MaxSubscribersPerToken: -1, MaxSubscribersPerConn: -1, MaxSubscribersPerAddr: -1}, nil, func(s *rpc.Server) { s.GRPC.MaxWatches = n })
	const conns = 10
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var lat []time.Duration
	var start time.Time
	got := make(chan struct{}, n)
	deliver := func(gen uint64, times int) {
		if gen < 2 {
			return
		}
		d := time.Since(start)
		mu.Lock()
		for range times {
			lat = append(lat, d)
		}
		mu.Unlock()
		for range times {
			got <- struct{}{}
		}
	}
	rpc.ActivateForTest(b, e, "bench.k", `{"n":0}`)
	ready := make(chan struct{}, n)
	for c := range conns {
		client := dialB(b, srv)
		if !watch {
			for range n / conns {
				s, err := client.Subscribe(ctx, &v1.SubscribeRequest{Keys: []string{"bench.k"}})
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					for first := true; ; first = false {
						m, err := s.Recv()
						if err != nil {
							return
						}
						if first {
							ready <- struct{}{}
							continue
						}
						if h := m.GetHeads(); len(h) > 0 {
							deliver(h[0].GetGeneration(), 1)
						}
					}
				}()
			}
			continue
		}
		w, err := client.Watch(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for i := range n / conns {
			id := int64(c*n + i + 1)
			if err := w.Send(&v1.WatchRequest{Request: &v1.WatchRequest_Create{Create: &v1.WatchCreateRequest{WatchId: id, Keys: []string{"bench.k"}, ShareResponses: share}}}); err != nil {
				b.Fatal(err)
			}
		}
		go func() {
			for {
				m, err := w.Recv()
				if err != nil {
					return
				}
				if bt := m.GetBatch(); bt != nil {
					if bt.GetSnapshot() {
						ready <- struct{}{}
					} else if h := bt.GetHeads(); len(h) > 0 {
						deliver(h[0].GetGeneration(), max(1, len(m.GetWatchIds())))
					}
				}
			}
		}()
	}
	for range n {
		<-ready
	}
	var cpu time.Duration
	b.ResetTimer()
	for i := range b.N {
		before := cpuTime()
		start = time.Now()
		rpc.ActivateForTest(b, e, "bench.k", `{"n":`+strconv.Itoa(i+1)+`}`)
		for range n {
			<-got
		}
		cpu += cpuTime() - before
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "cpu-µs/delivery")
}

func dialB(b *testing.B, srv *rpc.Server) v1.PushServiceClient {
	b.Helper()
	cc, err := grpc.NewClient(srv.URL()[len("http://"):], grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cc.Close() })
	return v1.NewPushServiceClient(cc)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }
