package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/store/memory"
)

var quiet = slog.New(slog.DiscardHandler)

// plane is a handler over a fresh memory store with a deterministic clock.
type plane struct {
	t      testing.TB
	store  varplane.Store
	engine *varplane.Engine
	h      *httpapi.Handler
}

func newEngineOn(t testing.TB, st varplane.Store) *varplane.Engine {
	t.Helper()
	clock := time.Date(2026, 7, 20, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	e := varplane.NewEngine(st, varplane.Options{
		Logger: quiet,
		Now: func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			clock = clock.Add(time.Second)
			return clock
		},
	})
	t.Cleanup(e.Close)
	return e
}

func newPlane(t testing.TB, opts httpapi.Options) *plane {
	t.Helper()
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	return newPlaneOn(t, st, opts)
}

func newPlaneOn(t testing.TB, st varplane.Store, opts httpapi.Options) *plane {
	t.Helper()
	e := newEngineOn(t, st)
	if opts.Authorizer == nil {
		opts.Authorizer = varplane.AllowAll
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	h := httpapi.NewHandler(e, opts)
	t.Cleanup(h.Close)
	return &plane{t: t, store: st, engine: e, h: h}
}

// do sends one request through the handler. Header pairs follow the body.
func (p *plane) do(method, target, body string, header ...string) *httptest.ResponseRecorder {
	p.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, r)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	p.h.ServeHTTP(rec, req)
	return rec
}

// watch runs a watch request for d (its context then ends, as a client
// that hangs up) and returns what it answered: the status and the frames
// written meanwhile.
func (p *plane) watch(target string, d time.Duration, header ...string) *httptest.ResponseRecorder {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, "GET", target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	p.h.ServeHTTP(rec, req)
	return rec
}

// newPlaneHub is newPlane with a push hub over its engine serving the
// watch route.
func newPlaneHub(t testing.TB, opts httpapi.Options) (*plane, *push.Hub) {
	t.Helper()
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	e := newEngineOn(t, st)
	hub := push.New(e, push.Options{Logger: quiet})
	t.Cleanup(hub.Close)
	opts.Hub = hub
	if opts.Authorizer == nil {
		opts.Authorizer = varplane.AllowAll
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	h := httpapi.NewHandler(e, opts)
	t.Cleanup(h.Close)
	return &plane{t: t, store: st, engine: e, h: h}, hub
}

// create stores doc in scope and returns its revision.
func (p *plane) create(scope, doc string) varplane.Revision {
	p.t.Helper()
	rec := p.do("POST", "/vars/admin/revisions", `{"scope":"`+scope+`","document":`+doc+`}`)
	if rec.Code != http.StatusCreated && rec.Code != http.StatusOK {
		p.t.Fatalf("create %s: status %d: %s", scope, rec.Code, rec.Body)
	}
	var res varplane.CreateRevisionResult
	mustJSON(p.t, rec.Body.Bytes(), &res)
	return res.Revision
}

func (p *plane) activate(scope string, rev varplane.Revision, expected int) {
	p.t.Helper()
	rec := p.do("POST", "/vars/admin/activate", jsonf(`{"scope":%q,"revision":%q,"expectedGeneration":%d}`, scope, rev, expected))
	if rec.Code != http.StatusOK {
		p.t.Fatalf("activate %s: status %d: %s", scope, rec.Code, rec.Body)
	}
}

func mustJSON(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// errBody decodes an error answer.
func errBody(t *testing.T, rec *httptest.ResponseRecorder) httpapi.ErrorBody {
	t.Helper()
	var b httpapi.ErrorBody
	mustJSON(t, rec.Body.Bytes(), &b)
	return b
}

func wantError(t *testing.T, rec *httptest.ResponseRecorder, status int, code varplane.Code) httpapi.ErrorBody {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status = %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	b := errBody(t, rec)
	if b.Code != code {
		t.Fatalf("code = %q, want %q; body %s", b.Code, code, rec.Body)
	}
	if b.Error == "" {
		t.Errorf("error message is empty: %s", rec.Body)
	}
	return b
}

// failingStore answers every call with err, to exercise internal and
// unavailable mappings.
type failingStore struct {
	*memory.Store
	err error
}

func (f *failingStore) State(context.Context, varplane.Scope) (*varplane.ScopeState, error) {
	return nil, f.err
}

func (f *failingStore) States(context.Context, []varplane.Scope) ([]*varplane.ScopeState, error) {
	return nil, f.err
}

// replayStore adds a Replay that answers from the current state, enough to
// drive the replay route through HTTP.
type replayStore struct{ *memory.Store }

func (r replayStore) Replay(ctx context.Context, scope varplane.Scope, gen varplane.Generation) (*varplane.ScopeState, error) {
	st, err := r.State(ctx, scope)
	if err != nil {
		return nil, err
	}
	if gen > st.Generation {
		return nil, varplane.ErrNotFound
	}
	return st, nil
}

func jsonf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
