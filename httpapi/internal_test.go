package httpapi

import (
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
)

func TestDefaultAuthorizerWarnsOnce(t *testing.T) {
	var buf strings.Builder
	warnAllowAll = sync.Once{}
	log := slog.New(slog.NewJSONHandler(&buf, nil))

	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	e := varplane.NewEngine(st, varplane.Options{})
	t.Cleanup(e.Close)
	for range 3 {
		h := NewHandler(e, Options{Logger: log})
		h.Close()
		if h.auth == nil {
			t.Fatal("no authorizer")
		}
	}
	// One warning, through the handler's logger (so in its format).
	if got := strings.Count(buf.String(), `"level":"WARN"`); got != 1 || strings.Count(buf.String(), "\n") != 1 {
		t.Errorf("warnings = %d (%q), want exactly 1 line, logged", got, buf.String())
	}
	buf.Reset()
	h := NewHandler(e, Options{Authorizer: varplane.AllowAll, Logger: log})
	h.Close()
	if buf.Len() != 0 {
		t.Errorf("explicit varplane.AllowAll warned: %q", buf.String())
	}
}
