package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// BenchmarkDurableCommit drives create + activate through the real handler
// over loopback HTTP on the file store (fdatasync before every answer), with
// b.SetParallelism writers on distinct scopes: the server side of bench/'s
// commit scenario, in one process so that it can be profiled.
func BenchmarkDurableCommit(b *testing.B) {
	for _, par := range []int{1, 64} {
		b.Run(fmt.Sprintf("writers=%d", par), func(b *testing.B) {
			srv, _ := durableServer(b)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
			doc := `{"enabled":true,"note":"` + strings.Repeat("x", 980) + `"}`
			var next atomic.Int64
			post := func(path string, body any) map[string]any {
				data, _ := json.Marshal(body)
				resp, err := client.Post(srv.URL+"/vars/admin/"+path, "application/json", bytes.NewReader(data))
				if err != nil {
					b.Error(err)
					return nil
				}
				defer resp.Body.Close()
				var out map[string]any
				raw, _ := io.ReadAll(resp.Body)
				if resp.StatusCode >= 300 {
					b.Errorf("%s: %d %s", path, resp.StatusCode, raw)
					return nil
				}
				_ = json.Unmarshal(raw, &out)
				return out
			}
			b.SetParallelism(par)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					scope := fmt.Sprintf("bench.commit.s%d", next.Add(1))
					c := post("revisions", map[string]any{"scope": scope, "document": json.RawMessage(doc)})
					if c == nil {
						return
					}
					post("activate", map[string]any{"scope": scope, "revision": c["revision"], "expectedGeneration": 0})
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
		})
	}
}
