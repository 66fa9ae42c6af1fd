package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/redis"
	"github.com/varplane/varplane/store/redis/redistest"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/httpapi"
)

// accessServer serves the access API and the var API over one engine, as serve
// does, with a tokens file holding one bare token ("file-admin"); logs go
// to the returned buffer.
func accessServer(t *testing.T, s varplane.Store) (*httptest.Server, *access.Service, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := varplane.NewEngine(s, varplane.Options{Owners: []varplane.Owner{access.Owner}, Logger: log})
	t.Cleanup(e.Close)
	file, err := access.StaticTokens([]string{"file-admin"})
	if err != nil {
		t.Fatal(err)
	}
	az := access.Combine(file, access.NewAuthorizer(s))
	svc := access.NewService(e)
	api := httpapi.NewHandler(e, httpapi.Options{Base: "/vars", Authorizer: az, Logger: log, Access: svc})
	t.Cleanup(api.Close)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return srv, svc, &logs
}

func accessCall(t *testing.T, srv *httptest.Server, method, path, token string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, srv.URL+path, r)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// accessStores open the stores the access routes are tried on: the
// principals are a document, read back through each store's own path.
var accessStores = []struct {
	name string
	open func(t *testing.T) varplane.Store
}{
	{"memory", func(t *testing.T) varplane.Store {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	}},
	{"file", func(t *testing.T) varplane.Store {
		s, err := file.Open(context.Background(), filepath.Join(t.TempDir(), "log.jsonl"), file.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}},
	{"redis", func(t *testing.T) varplane.Store {
		s, err := redis.Open(context.Background(), redistest.PrefixURL(t, "httpapi-access"), redis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}},
}

func TestAccessRoutes(t *testing.T) {
	for _, o := range accessStores {
		t.Run(o.name, func(t *testing.T) {
			srv, _, logs := accessServer(t, o.open(t))
			var tokens []string

			// The file's admin creates an administrator in the store, which
			// creates a reader; the reader may read, not administer.
			st, body := accessCall(t, srv, "POST", "/vars/access/tokens", "file-admin", map[string]any{"id": "ops", "roles": []string{"admin"}, "prefixes": []string{"ops.", "app."}})
			if st != 201 {
				t.Fatalf("create ops: %d %s", st, body)
			}
			var ops access.Created
			_ = json.Unmarshal(body, &ops)
			tokens = append(tokens, ops.Token)
			st, body = accessCall(t, srv, "POST", "/vars/access/tokens", ops.Token, map[string]any{"id": "reader", "kinds": []string{"read"}, "prefixes": []string{"app."}})
			if st != 201 {
				t.Fatalf("create reader by ops: %d %s", st, body)
			}
			var reader access.Created
			_ = json.Unmarshal(body, &reader)
			tokens = append(tokens, reader.Token)
			if reader.CreatedBy != "ops" {
				t.Errorf("createdBy %q, want ops", reader.CreatedBy)
			}

			for _, tc := range []struct {
				method, path, token string
				body                any
				status              int
			}{
				{"GET", "/vars/access/tokens", "", nil, 401},
				{"GET", "/vars/access/tokens", "nope", nil, 403},
				{"GET", "/vars/access/tokens", reader.Token, nil, 403},
				{"POST", "/vars/access/tokens", reader.Token, map[string]any{"id": "x"}, 403},
				{"DELETE", "/vars/access/tokens/ops", reader.Token, nil, 403},
				{"POST", "/vars/access/tokens", ops.Token, map[string]any{"id": "x", "token": "chosen"}, 400},
				{"POST", "/vars/access/tokens", ops.Token, map[string]any{"id": "reader", "prefixes": []string{"app."}}, 400},
				{"DELETE", "/vars/access/tokens/nobody", ops.Token, nil, 404},
				{"GET", "/vars/access/other", ops.Token, nil, 404},
				{"PUT", "/vars/access/tokens", ops.Token, nil, 405},
				{"GET", "/vars/access/tokens/reader", ops.Token, nil, 405},
				{"DELETE", "/vars/access/tokens/a/b", ops.Token, nil, 404},
			} {
				st, body := accessCall(t, srv, tc.method, tc.path, tc.token, tc.body)
				if st != tc.status {
					t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, st, body, tc.status)
				}
			}

			st, body = accessCall(t, srv, "GET", "/vars/access/tokens", ops.Token, nil)
			if st != 200 || !strings.Contains(string(body), `"id":"reader"`) || strings.Contains(string(body), "sha256:") {
				t.Fatalf("list: %d %s", st, body)
			}
			if st, _ := accessCall(t, srv, "GET", "/vars?key=app.x", reader.Token, nil); st != 404 {
				t.Fatalf("reader reads app.x: %d, want 404 (no head, but allowed)", st)
			}
			if st, body := accessCall(t, srv, "DELETE", "/vars/access/tokens/reader", ops.Token, nil); st != 200 {
				t.Fatalf("revoke: %d %s", st, body)
			}
			if st, _ := accessCall(t, srv, "GET", "/vars?key=app.x", reader.Token, nil); st != 403 {
				t.Fatalf("revoked reader: %d, want 403", st)
			}

			// The history, read through the var API, names ids and never a token.
			st, body = accessCall(t, srv, "GET", "/vars/admin/history?scope="+string(access.Scope), "file-admin", nil)
			if st != 200 || !strings.Contains(string(body), `"actor":"ops"`) {
				t.Fatalf("history: %d %s", st, body)
			}
			for _, tok := range tokens {
				if strings.Contains(string(body), tok) {
					t.Fatal("the history holds a token")
				}
				if strings.Contains(logs.String(), tok) {
					t.Fatalf("a log line holds a token:\n%s", logs.String())
				}
			}
		})
	}
}

// TestScopeOwned: the var admin API cannot write the access scope, nor
// clear it by deactivating its parent.
func TestAccessScopeOwned(t *testing.T) {
	s := accessStores[0].open(t)
	srv, svc, _ := accessServer(t, s)
	if _, err := svc.Bootstrap(context.Background(), "admin", "t", false); err != nil {
		t.Fatal(err)
	}
	before, _ := s.State(context.Background(), access.Scope)
	doc := json.RawMessage(`{"principals":{}}`)
	for _, tc := range []struct {
		path string
		body any
	}{
		{"/vars/admin/publish", map[string]any{"scope": access.Scope, "document": doc, "expectedGeneration": before.Generation}},
		{"/vars/admin/revisions", map[string]any{"scope": access.Scope, "document": doc}},
		{"/vars/admin/deactivate", map[string]any{"scope": access.Scope, "expectedGeneration": before.Generation}},
		{"/vars/admin/deactivate", map[string]any{"scope": access.Scope.Root(), "expectedGeneration": 0}},
		{"/vars/admin/rollback", map[string]any{"scope": access.Scope, "expectedGeneration": before.Generation}},
	} {
		st, body := accessCall(t, srv, "POST", tc.path, "file-admin", tc.body)
		if st != 403 || !strings.Contains(string(body), `"scope-owned"`) {
			t.Errorf("%s: %d %s, want 403 scope-owned", tc.path, st, body)
		}
	}
	after, _ := s.State(context.Background(), access.Scope)
	if after.Generation != before.Generation || after.Head.Revision != before.Head.Revision {
		t.Fatal("the access scope moved")
	}
}
