package file_test

import (
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

// TestCollector: the store's collector reports its fdatasyncs and the
// events they made durable, its log's size and the documents it holds.
func TestCollector(t *testing.T) {
	s := mustOpen(t, filepath.Join(t.TempDir(), "log.jsonl"), file.Options{})
	for i := range 3 {
		ev := storetest.CreatedEvent("m.k", storetest.Doc(i))
		if err := s.Append(t.Context(), ev, 0); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collector())
	st := s.Stats()
	n, _ := s.LogSize()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		got[mf.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	for name, want := range map[string]float64{
		"varplane_store_fsyncs_total":         float64(st.Fsyncs),
		"varplane_store_fsynced_events_total": 3,
		"varplane_file_log_bytes":             float64(n),
		"varplane_file_bodies_resident":       3,
	} {
		if got[name] != want || want == 0 {
			t.Errorf("%s = %v, want %v (not 0)", name, got[name], want)
		}
	}
}
