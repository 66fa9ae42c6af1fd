package migrate

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/internal/eventjson"
)

// TestHistoryLineBounded: a history.jsonl line longer than an event can be
// is refused, naming its line, after reading no more than the bound of it.
func TestHistoryLineBounded(t *testing.T) {
	const limit = 1 << 20
	p := filepath.Join(t.TempDir(), HistoryFile)
	ev := varplane.Event{Kind: varplane.EventRejected, Scope: "a", RejectionReason: "x"}
	first := string(eventjson.Event(&ev)) + "\n"
	huge := `{"kind":"rejected","scope":"a","rejectionReason":"` + strings.Repeat("x", 16*limit) + "\"}\n"
	if err := os.WriteFile(p, []byte(first+huge), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = indexHistory(f, limit)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "line 2: longer than") {
		t.Fatalf("indexHistory = %v, want line 2 refused as too long", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4*limit {
		t.Errorf("allocated %d bytes reading a %d-byte line with a %d-byte bound", grew, len(huge), limit)
	}
}

// FuzzVerifyExport: whatever history.jsonl holds, VerifyExport never
// panics, and it accepts it only as the history the report describes.
func FuzzVerifyExport(f *testing.F) {
	doc := []byte(`{"a":1}`)
	rev := varplane.Revision(canonical.DigestCanonical(doc))
	var head varplane.ChainHead
	var lines []byte
	for _, ev := range []varplane.Event{
		{Kind: varplane.EventRevisionCreated, Scope: "r", Revision: rev, Document: doc},
		{Kind: varplane.EventActivated, Scope: "r", Revision: rev, Generation: 1, PreviousGeneration: varplane.GenerationPtr(0)},
	} {
		head = head.Next(&ev)
		lines = append(append(lines, eventjson.Event(&ev)...), '\n')
	}
	f.Add(lines)
	f.Add(lines[:len(lines)-1])
	f.Add([]byte("\n\n"))
	f.Add([]byte(`{"kind":"rejected","scope":"r","seq":1,"hash":"00"}` + "\n"))
	heads := map[varplane.Scope]varplane.ChainHead{"r": head}
	f.Fuzz(func(t *testing.T, history []byte) {
		dir := t.TempDir()
		rootFile := append(append([]byte(nil), doc...), '\n')
		man := Manifest{Files: map[string]string{RootFile: fileDigest(rootFile)}, Chain: &ExportChain{
			StoreReport: varplane.StoreReport{Scopes: 1, Events: 2, Heads: heads, Digest: varplane.ChainDigest(heads)},
			Root:        "r", History: fileDigest(lines),
		}}
		report, err := json.Marshal(&man)
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string][]byte{ReportFile: report, RootFile: rootFile, HistoryFile: history} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		rep, err := VerifyExport(context.Background(), dir)
		if err == nil && (string(history) != string(lines) || rep.Digest != man.Chain.Digest) {
			t.Fatalf("verified %q as %+v", history, rep)
		}
		if err != nil && string(history) == string(lines) {
			t.Fatalf("the export as written does not verify: %v", err)
		}
	})
}
