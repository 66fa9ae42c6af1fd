package httpapi

import (
	"strings"
	"sync"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
)

func TestDefaultAuthorizerWarnsOnce(t *testing.T) {
	var buf strings.Builder
	oldOut := warnOut
	warnOut, warnAllowAll = &buf, sync.Once{}
	t.Cleanup(func() { warnOut = oldOut })

	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	e := varplane.NewEngine(st, varplane.Options{})
	t.Cleanup(e.Close)
	for range 3 {
		h := NewHandler(e, Options{})
		h.Close()
		if h.auth == nil {
			t.Fatal("no authorizer")
		}
	}
	if got := strings.Count(buf.String(), "WARNING"); got != 1 {
		t.Errorf("warnings = %d (%q), want exactly 1", got, buf.String())
	}
	buf.Reset()
	h := NewHandler(e, Options{Authorizer: varplane.AllowAll})
	h.Close()
	if buf.Len() != 0 {
		t.Errorf("explicit varplane.AllowAll warned: %q", buf.String())
	}
}
