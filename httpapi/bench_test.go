package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
)

// discardWriter is a reusable ResponseWriter, so that the benchmarks measure
// the handlers rather than a recorder's buffers.
type discardWriter struct {
	h      http.Header
	status int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(code int)        { d.status = code }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) reset() {
	clear(d.h)
	d.status = 0
}

// plainHandler is the baseline: the same bytes and ETag from a plain
// net/http handler, with no routing, authorization, metrics or logs.
func plainHandler(head *varplane.Head) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		hdr.Set("Etag", head.ETag())
		if inm := r.Header.Get("If-None-Match"); inm != "" && inm == head.ETag() {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		hdr.Set("Content-Type", "application/json")
		_, _ = w.Write(head.ReadBody())
	})
}

// benchSetup returns a plane serving one key with a realistic document,
// and that key's head.
func benchSetup(b *testing.B) (*httpapi.Handler, *varplane.Head) {
	b.Helper()
	p := newPlane(b, httpapi.Options{})
	rev := p.create("agentic.lanes.vinci", `{"enabled":true,"model_target_ref":"secret.ops.model","budgets":{"tokens":120000,"usd":12.5},"tags":["a","b","c"]}`)
	p.activate("agentic.lanes.vinci", rev, 0)
	head, err := p.engine.Head(context.Background(), "agentic.lanes.vinci")
	if err != nil {
		b.Fatal(err)
	}
	return p.h, head
}

// BenchmarkCachedRead compares a 200 read through the full handler
// (routing, authorization, metrics, request log at a disabled level) with a
// plain handler writing the same bytes and ETag, both called directly and
// over loopback HTTP.
func BenchmarkCachedRead(b *testing.B) {
	h, head := benchSetup(b)
	b.Run("varplane/direct", func(b *testing.B) { runDirect(b, h, "") })
	b.Run("plain/direct", func(b *testing.B) { runDirect(b, plainHandler(head), "") })
	b.Run("varplane/loopback", func(b *testing.B) { runLoopback(b, h, "") })
	b.Run("plain/loopback", func(b *testing.B) { runLoopback(b, plainHandler(head), "") })
}

// BenchmarkNotModified is BenchmarkCachedRead for a conditional read that
// answers 304.
func BenchmarkNotModified(b *testing.B) {
	h, head := benchSetup(b)
	b.Run("varplane/direct", func(b *testing.B) { runDirect(b, h, head.ETag()) })
	b.Run("plain/direct", func(b *testing.B) { runDirect(b, plainHandler(head), head.ETag()) })
	b.Run("varplane/loopback", func(b *testing.B) { runLoopback(b, h, head.ETag()) })
	b.Run("plain/loopback", func(b *testing.B) { runLoopback(b, plainHandler(head), head.ETag()) })
}

func runDirect(b *testing.B, h http.Handler, inm string) {
	req := httptest.NewRequest("GET", "/vars?key=agentic.lanes.vinci", nil)
	if inm != "" {
		req.Header.Set("If-None-Match", inm)
	}
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		w.reset()
		h.ServeHTTP(w, req)
	}
	want := http.StatusOK
	if inm != "" {
		want = http.StatusNotModified
	}
	if w.status != want && !(w.status == 0 && want == http.StatusOK) {
		b.Fatalf("status = %d, want %d", w.status, want)
	}
}

func runLoopback(b *testing.B, h http.Handler, inm string) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()
	req, _ := http.NewRequest("GET", srv.URL+"/vars?key=agentic.lanes.vinci", nil)
	if inm != "" {
		req.Header.Set("If-None-Match", inm)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	})
}

// BenchmarkDecodeCreateRevision is the strict decoding of a create request
// with a 1 KiB document, the largest body on the commit path.
func BenchmarkDecodeCreateRevision(b *testing.B) {
	doc := `{"name":"` + strings.Repeat("x", 1000) + `","n":[1,2,3],"on":true}`
	body := []byte(`{"scope":"bench.decode","document":` + doc + `,"actor":"bench","reason":"measure"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := httpapi.DecodeCreateRevision(body, varplane.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
