package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/varplane/varplane/httpapi"
)

// benchFlagDoc is a lane's document of about 1 KiB with ten members, each
// a flag.
func benchFlagDoc(i int) string {
	return fmt.Sprintf(`{"f0":true,"f1":"model-%d","f2":0.25,"f3":120000,"f4":{"tokens":120000,"usd":12.5},"f5":["a","b","c"],"f6":false,"f7":"%s","f8":%d,"f9":{"region":"eu-west-1","tier":"gold"}}`,
		i, strings.Repeat("x", 800), i)
}

// BenchmarkOFREPBulk: a bulk evaluation of 100 flags through the full
// handler, against the cached read ceiling (BenchmarkCachedRead: one
// scope's precomputed body): pointers (10 flags in each of 10 scopes),
// whole documents (100 scopes), and the 304 of an unchanged set; then the
// ceiling itself, 100 cached reads one by one. flags/op and ns/flag let
// the per-flag cost be set against a read's.
//
//	go test -run '^$' -bench OFREPBulk -benchmem -count 6 ./httpapi
func BenchmarkOFREPBulk(b *testing.B) {
	p := newPlane(b, httpapi.Options{})
	var pointers, scopes []string
	for s := 0; s < 100; s++ {
		sc := fmt.Sprintf("bench.lane%03d", s)
		p.publish(sc, benchFlagDoc(s))
		scopes = append(scopes, `"`+sc+`"`)
		if s < 10 {
			for f := 0; f < 10; f++ {
				pointers = append(pointers, fmt.Sprintf(`"%s#/f%d"`, sc, f))
			}
		}
	}
	body := func(keys []string) string {
		return `{"context":{"targetingKey":"user-1","flags":[` + strings.Join(keys, ",") + `]}}`
	}
	run := func(b *testing.B, h http.Handler, body, inm string, want int) {
		req := httptest.NewRequest("POST", "/vars/ofrep/v1/evaluate/flags", nil)
		req.Header.Set("Content-Type", "application/json")
		if inm != "" {
			req.Header.Set("If-None-Match", inm)
		}
		w := &discardWriter{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			w.reset()
			req.Body = io.NopCloser(strings.NewReader(body))
			req.ContentLength = int64(len(body))
			h.ServeHTTP(w, req)
		}
		if w.status != want && !(w.status == 0 && want == 200) {
			b.Fatalf("status %d, want %d", w.status, want)
		}
		b.ReportMetric(100, "flags/op")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/flag")
	}
	b.Run("pointers/direct", func(b *testing.B) { run(b, p.h, body(pointers), "", 200) })
	b.Run("documents/direct", func(b *testing.B) { run(b, p.h, body(scopes), "", 200) })
	etag := p.do("POST", "/vars/ofrep/v1/evaluate/flags", body(pointers)).Header().Get("ETag")
	b.Run("pointers/304/direct", func(b *testing.B) { run(b, p.h, body(pointers), etag, http.StatusNotModified) })
	b.Run("ceiling/100-cached-reads/direct", func(b *testing.B) {
		reqs := make([]*http.Request, 100)
		for i := range reqs {
			reqs[i] = httptest.NewRequest("GET", fmt.Sprintf("/vars?key=bench.lane%03d", i), nil)
		}
		w := &discardWriter{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			for _, r := range reqs {
				w.reset()
				p.h.ServeHTTP(w, r)
			}
		}
		b.ReportMetric(100, "flags/op")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/flag")
	})
	b.Run("pointers/loopback", func(b *testing.B) {
		srv := httptest.NewServer(p.h)
		defer srv.Close()
		client := srv.Client()
		bb := body(pointers)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := client.Post(srv.URL+"/vars/ofrep/v1/evaluate/flags", "application/json", strings.NewReader(bb))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	})
}
