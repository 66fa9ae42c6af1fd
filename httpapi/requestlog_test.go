package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/varplane/varplane/httpapi"
)

// levels records the level of each request log line by route and status.
type levels struct {
	mu    sync.Mutex
	lines []logLine
}

type logLine struct {
	level  slog.Level
	route  string
	status int64
}

func (l *levels) Enabled(context.Context, slog.Level) bool { return true }
func (l *levels) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *levels) WithGroup(string) slog.Handler            { return l }
func (l *levels) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "http request" {
		return nil
	}
	line := logLine{level: r.Level}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "route":
			line.route = a.Value.String()
		case "status":
			line.status = a.Value.Int64()
		}
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	return nil
}

func (l *levels) last(t *testing.T) logLine {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 {
		t.Fatal("no request was logged")
	}
	return l.lines[len(l.lines)-1]
}

// TestRequestLogLevels: successful reads are logged at Debug; successful
// writes, refusals and the admin reads of the audit log at Info (as
// docs/api.md says: a publish leaves a line in the server's log).
func TestRequestLogLevels(t *testing.T) {
	rec := &levels{}
	p := newPlane(t, httpapi.Options{Logger: slog.New(rec)})
	tests := []struct {
		name, method, target, body string
		status                     int
		level                      slog.Level
	}{
		{"publish", http.MethodPost, "/vars/admin/publish", `{"scope":"a.b","expectedGeneration":0,"document":{"k":1}}`, http.StatusOK, slog.LevelInfo},
		{"publish conflict", http.MethodPost, "/vars/admin/publish", `{"scope":"a.b","expectedGeneration":0,"document":{"k":2}}`, http.StatusConflict, slog.LevelInfo},
		{"invalid document", http.MethodPost, "/vars/admin/revisions", `{"scope":"a.b","document":{"n":9007199254740993}}`, http.StatusUnprocessableEntity, slog.LevelInfo},
		{"create", http.MethodPost, "/vars/admin/revisions", `{"scope":"a.b","document":{"k":3}}`, http.StatusCreated, slog.LevelInfo},
		{"read", http.MethodGet, "/vars?key=a.b", "", http.StatusOK, slog.LevelDebug},
		{"history", http.MethodGet, "/vars/admin/history?scope=a.b", "", http.StatusOK, slog.LevelInfo},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var header []string
			if tt.body != "" {
				header = []string{"Content-Type", "application/json"}
			}
			if got := p.do(tt.method, tt.target, tt.body, header...); got.Code != tt.status {
				t.Fatalf("%s %s: %d %s, want %d", tt.method, tt.target, got.Code, got.Body, tt.status)
			}
			if line := rec.last(t); line.level != tt.level || line.status != int64(tt.status) {
				t.Fatalf("logged %+v, want level %v with status %d", line, tt.level, tt.status)
			}
		})
	}
}
