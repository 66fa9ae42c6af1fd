package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/memory"
)

// TestSeedRouteTable walks every row of the route table in order, through
// the real handler, checking status, body fields and error codes.
func TestSeedRouteTable(t *testing.T) {
	p := newPlaneOn(t, replayStore{memory.New()}, httpapi.Options{})
	vars := map[string]string{}
	expand := func(s string) string {
		for k, v := range vars {
			s = strings.ReplaceAll(s, k, v)
		}
		return s
	}
	type obj = map[string]any
	steps := []struct {
		name, method, target, body string
		status                     int
		code                       varplane.Code
		want                       obj // top-level fields that must be equal (JSON-decoded)
		save                       map[string]string
		check                      func(t *testing.T, body obj)
	}{
		{name: "read before anything", method: "GET", target: "/vars?key=a.b", status: 404, code: "no-head"},
		{name: "create", method: "POST", target: "/vars/admin/revisions", body: `{"scope":"a.b","document":{"x":1},"actor":"ops","reason":"first"}`,
			status: 201, want: obj{"scope": "a.b", "generation": 0.0, "created": true}, save: map[string]string{"$R1": "revision"}},
		{name: "create again is 200", method: "POST", target: "/vars/admin/revisions", body: `{"scope":"a.b","document":{ "x" : 1 }}`,
			status: 200, want: obj{"scope": "a.b", "revision": "$R1", "created": false}},
		{name: "create invalid group shape", method: "POST", target: "/vars/admin/revisions", body: `{"scope":"grp","document":{"x":1}}`,
			status: 422, code: "revision-invalid", check: func(t *testing.T, b obj) {
				issues, _ := b["issues"].([]any)
				if len(issues) != 1 || issues[0].(obj)["code"] != varplane.IssueGroupShape {
					t.Errorf("issues = %v, want one %s", b["issues"], varplane.IssueGroupShape)
				}
			}},
		{name: "create unknown schema", method: "POST", target: "/vars/admin/revisions", body: `{"scope":"a.c","document":{},"schemaId":"nope/v1"}`,
			status: 422, code: "revision-invalid", check: func(t *testing.T, b obj) {
				if !strings.Contains(jsonString(b["issues"]), varplane.IssueUnknownSchema) {
					t.Errorf("issues = %v, want %s", b["issues"], varplane.IssueUnknownSchema)
				}
			}},
		{name: "validate ok", method: "POST", target: "/vars/admin/validate", body: `{"document":{"x":1}}`,
			status: 200, want: obj{"valid": true, "issues": []any{}}},
		{name: "validate group shape", method: "POST", target: "/vars/admin/validate", body: `{"document":{"x":1},"scope":"grp"}`,
			status: 200, want: obj{"valid": false}},
		{name: "activate", method: "POST", target: "/vars/admin/activate", body: `{"scope":"a.b","revision":"$R1","expectedGeneration":0}`,
			status: 200, want: obj{"scope": "a.b", "generation": 1.0, "revision": "$R1", "effectiveAt": "2026-07-20T12:00:05Z"}},
		{name: "activate stale generation", method: "POST", target: "/vars/admin/activate", body: `{"scope":"a.b","revision":"$R1","expectedGeneration":0}`,
			status: 409, code: "revision-conflict", want: obj{"expectedGeneration": 0.0, "currentGeneration": 1.0}},
		{name: "activate unknown revision", method: "POST", target: "/vars/admin/activate", body: `{"scope":"a.b","revision":"sha256:` + strings.Repeat("0", 64) + `","expectedGeneration":1}`,
			status: 404, code: "not-found"},
		{name: "read key", method: "GET", target: "/vars?key=a.b", status: 200,
			want: obj{"generation": 1.0, "revision": "$R1", "effectiveAt": "2026-07-20T12:00:05Z", "values": obj{"a.b": obj{"x": 1.0}}}},
		{name: "read group without head", method: "GET", target: "/vars?group=a", status: 404, code: "no-head"},
		{name: "create group", method: "POST", target: "/vars/admin/revisions", body: `{"scope":"grp","document":{"grp.k":true},"schemaId":""}`,
			status: 201, save: map[string]string{"$RG": "revision"}},
		{name: "activate group", method: "POST", target: "/vars/admin/activate", body: `{"scope":"grp","revision":"$RG","expectedGeneration":0}`, status: 200},
		{name: "read group passes the document through", method: "GET", target: "/vars?group=grp", status: 200,
			want: obj{"generation": 1.0, "values": obj{"grp.k": true}}},
		{name: "create second", method: "POST", target: "/vars/admin/revisions", body: `{"scope":"a.b","document":{"x":2}}`,
			status: 201, save: map[string]string{"$R2": "revision"}},
		{name: "activate second", method: "POST", target: "/vars/admin/activate", body: `{"scope":"a.b","revision":"$R2","expectedGeneration":1}`,
			status: 200, want: obj{"generation": 2.0, "revision": "$R2"}},
		{name: "rollback to previous", method: "POST", target: "/vars/admin/rollback", body: `{"scope":"a.b","expectedGeneration":2}`,
			status: 200, want: obj{"scope": "a.b", "generation": 3.0, "revision": "$R1"}},
		{name: "rollback toRevision", method: "POST", target: "/vars/admin/rollback", body: `{"scope":"a.b","expectedGeneration":3,"toRevision":"$R2"}`,
			status: 200, want: obj{"generation": 4.0, "revision": "$R2"}},
		{name: "rollback toGeneration", method: "POST", target: "/vars/admin/rollback", body: `{"scope":"a.b","expectedGeneration":4,"toGeneration":1}`,
			status: 200, want: obj{"generation": 5.0, "revision": "$R1"}},
		{name: "rollback to missing generation", method: "POST", target: "/vars/admin/rollback", body: `{"scope":"a.b","expectedGeneration":5,"toGeneration":99}`,
			status: 404, code: "not-found"},
		{name: "rollback to missing revision", method: "POST", target: "/vars/admin/rollback", body: `{"scope":"a.b","expectedGeneration":5,"toRevision":"sha256:` + strings.Repeat("1", 64) + `"}`,
			status: 404, code: "not-found"},
		{name: "rollback stale", method: "POST", target: "/vars/admin/rollback", body: `{"scope":"a.b","expectedGeneration":1}`,
			status: 409, code: "revision-conflict", want: obj{"expectedGeneration": 1.0, "currentGeneration": 5.0}},
		{name: "status", method: "GET", target: "/vars/admin/status?scope=a.b", status: 200,
			want: obj{"scope": "a.b", "active": true, "generation": 5.0, "revision": "$R1", "source": "memory"}},
		{name: "status of group with a rejection", method: "GET", target: "/vars/admin/status?scope=grp", status: 200,
			check: func(t *testing.T, b obj) {
				lr, _ := b["lastRejected"].(obj)
				if lr["kind"] != "rejected" {
					t.Errorf("lastRejected = %v, want a rejected event", b["lastRejected"])
				}
			}},
		{name: "status without scope", method: "GET", target: "/vars/admin/status", status: 400, code: "bad-request"},
		{name: "status with a bad scope", method: "GET", target: "/vars/admin/status?scope=a..b", status: 400, code: "bad-request"},
		{name: "history", method: "GET", target: "/vars/admin/history?scope=a.b", status: 200,
			check: func(t *testing.T, b obj) {
				if b["scope"] != "a.b" {
					t.Errorf("scope = %v", b["scope"])
				}
				var kinds []string
				for _, e := range b["events"].([]any) {
					kinds = append(kinds, e.(obj)["kind"].(string))
				}
				want := "revision-created activated revision-created activated activated activated activated"
				if got := strings.Join(kinds, " "); got != want {
					t.Errorf("kinds = %s, want %s", got, want)
				}
			}},
		{name: "history of an unknown scope is empty", method: "GET", target: "/vars/admin/history?scope=zz", status: 200,
			want: obj{"scope": "zz", "events": []any{}}},
		{name: "history with a bad scope", method: "GET", target: "/vars/admin/history?scope=", status: 400, code: "bad-request"},
		{name: "replay", method: "GET", target: "/vars/admin/replay?scope=a.b&toGeneration=5", status: 200,
			want: obj{"scope": "a.b", "active": true, "generation": 5.0, "revision": "$R1", "document": obj{"x": 1.0}}},
		{name: "replay beyond", method: "GET", target: "/vars/admin/replay?scope=a.b&toGeneration=6", status: 404, code: "not-found"},
		{name: "replay needs toGeneration", method: "GET", target: "/vars/admin/replay?scope=a.b", status: 400, code: "bad-request"},
		{name: "replay needs scope", method: "GET", target: "/vars/admin/replay?toGeneration=1", status: 400, code: "bad-request"},
		{name: "replay rejects a negative generation", method: "GET", target: "/vars/admin/replay?scope=a.b&toGeneration=-1", status: 400, code: "bad-request"},
		{name: "deactivate parent cascades", method: "POST", target: "/vars/admin/deactivate", body: `{"scope":"a","expectedGeneration":0,"reason":"off"}`,
			status: 200, want: obj{"scope": "a", "generation": 1.0, "active": false, "cascade": []any{obj{"scope": "a.b", "generation": 6.0}}}},
		{name: "read after deactivation", method: "GET", target: "/vars?key=a.b", status: 404, code: "no-head"},
		{name: "deactivate stale", method: "POST", target: "/vars/admin/deactivate", body: `{"scope":"a","expectedGeneration":0}`,
			status: 409, code: "revision-conflict", want: obj{"expectedGeneration": 0.0, "currentGeneration": 1.0}},
	}
	for _, st := range steps {
		ok := t.Run(st.name, func(t *testing.T) {
			rec := p.do(st.method, expand(st.target), expand(st.body))
			if rec.Code != st.status {
				t.Fatalf("status = %d, want %d; body %s", rec.Code, st.status, rec.Body)
			}
			var body obj
			mustJSON(t, rec.Body.Bytes(), &body)
			if st.code != "" {
				wantError(t, rec, st.status, st.code)
			} else if _, has := body["code"]; has {
				t.Errorf("success body has an error code: %s", rec.Body)
			}
			for k, want := range st.want {
				if s, ok := want.(string); ok {
					want = expand(s)
				}
				if got := jsonString(body[k]); got != jsonString(want) {
					t.Errorf("%s = %s, want %s", k, got, jsonString(want))
				}
			}
			for name, field := range st.save {
				s, _ := body[field].(string)
				if s == "" {
					t.Fatalf("no %s in %s", field, rec.Body)
				}
				vars[name] = s
			}
			if st.check != nil {
				st.check(t, body)
			}
		})
		if !ok {
			return // later steps depend on this one
		}
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestReplayOnMemoryStoreIsUnsupported(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	wantError(t, p.do("GET", "/vars/admin/replay?scope=a.b&toGeneration=0", ""), 400, varplane.CodeStoreUnsupported)
}

func TestReadScopeValidation(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	p.activate("a.b", p.create("a.b", `1`), 0)
	tests := []struct {
		query  string
		status int
	}{
		{"key=a.b", 200},
		{"key=a.b&unrelated=1", 200},
		{"key=a%2Eb", 200},
		{"", 400},
		{"key=", 400},
		{"group=", 400},
		{"key=a", 400},     // a key needs a dot
		{"group=a.b", 400}, // a group has none
		{"key=a.b&key=a.b", 400},
		{"key=a.b&group=a", 400},
		{"group=a&group=b", 400},
		{"key=a..b", 400},
		{"key=.a", 400},
		{"key=a.b.", 400},
		{"key=a%20.b", 400},
		{"key=a.%0Ab", 400},
		{"key=a.%FF", 400}, // not UTF-8
		{"key=%ZZ", 400},
		{"key=" + strings.Repeat("a.", 200) + "b", 400},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			rec := p.do("GET", "/vars?"+tt.query, "")
			if tt.status != 200 {
				b := wantError(t, rec, tt.status, varplane.CodeBadRequest)
				if strings.Contains(b.Error, "%") {
					t.Errorf("error echoes the query: %q", b.Error)
				}
				return
			}
			if rec.Code != 200 {
				t.Fatalf("status = %d, want 200: %s", rec.Code, rec.Body)
			}
		})
	}
}

func TestETagAndNotModified(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	rev := p.create("a.b", `{"x":1}`)
	p.activate("a.b", rev, 0)
	first := p.do("GET", "/vars?key=a.b", "")
	if got, want := first.Header().Get("ETag"), `"`+string(rev)+`"`; got != want {
		t.Fatalf("ETag = %q, want %q", got, want)
	}
	if got := first.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
	other := `"sha256:` + strings.Repeat("a", 64) + `"`
	tests := []struct {
		name   string
		inm    []string
		status int
	}{
		{"quoted", []string{`"` + string(rev) + `"`}, 304},
		{"bare", []string{string(rev)}, 304},
		{"weak", []string{`W/"` + string(rev) + `"`}, 304},
		{"list", []string{other + `, "` + string(rev) + `"`}, 304},
		{"list without spaces", []string{other + `,` + string(rev)}, 304},
		{"second header line", []string{other, `"` + string(rev) + `"`}, 304},
		{"star", []string{"*"}, 304},
		{"other revision", []string{other}, 200},
		{"empty", []string{""}, 200},
		{"prefix only", []string{`"` + string(rev)[:20] + `"`}, 200},
		{"unbalanced quote", []string{`"` + string(rev)}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			for _, v := range tt.inm {
				hdr = append(hdr, "If-None-Match", v)
			}
			rec := p.do("GET", "/vars?key=a.b", "", hdr...)
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d", rec.Code, tt.status)
			}
			if got, want := rec.Header().Get("ETag"), `"`+string(rev)+`"`; got != want {
				t.Errorf("ETag = %q, want %q", got, want)
			}
			if tt.status == 304 && rec.Body.Len() != 0 {
				t.Errorf("304 has a body: %q", rec.Body)
			}
			if tt.status == 200 && rec.Body.String() != first.Body.String() {
				t.Errorf("body = %s, want %s", rec.Body, first.Body)
			}
		})
	}
	t.Run("star without a head is 404", func(t *testing.T) {
		wantError(t, p.do("GET", "/vars?key=x.y", "", "If-None-Match", "*"), 404, varplane.CodeNoHead)
	})
	t.Run("new head changes the ETag", func(t *testing.T) {
		rev2 := p.create("a.b", `{"x":2}`)
		p.activate("a.b", rev2, 1)
		rec := p.do("GET", "/vars?key=a.b", "", "If-None-Match", `"`+string(rev)+`"`)
		if rec.Code != 200 || rec.Header().Get("ETag") != `"`+string(rev2)+`"` {
			t.Fatalf("status %d ETag %q, want 200 and the new revision", rec.Code, rec.Header().Get("ETag"))
		}
	})
}

func TestUnknownRouteAndMethod(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	tests := []struct {
		method, target string
		status         int
		allow          string
	}{
		{"GET", "/vars/nope", 404, ""},
		{"GET", "/other", 404, ""},
		{"GET", "/vars/admin", 404, ""},
		{"POST", "/vars?key=a.b", 405, "GET, HEAD"},
		{"GET", "/vars/admin/activate", 405, "POST"},
		{"DELETE", "/vars/admin/status?scope=a", 405, "GET, HEAD"},
		{"PUT", "/vars/admin/revisions", 405, "POST"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			rec := p.do(tt.method, tt.target, "")
			code := varplane.CodeNotFound
			if tt.status == 405 {
				code = httpapi.CodeMethodNotAllowed
			}
			wantError(t, rec, tt.status, code)
			if got := rec.Header().Get("Allow"); got != tt.allow {
				t.Errorf("Allow = %q, want %q", got, tt.allow)
			}
		})
	}
}

func TestReadWithTrailingSlash(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	p.activate("a.b", p.create("a.b", `1`), 0)
	if rec := p.do("GET", "/vars/?key=a.b", ""); rec.Code != 200 {
		t.Fatalf("status = %d, want 200: %s", rec.Code, rec.Body)
	}
}

func TestInternalErrorsAreNotEchoed(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		status int
		code   varplane.Code
	}{
		{"plain error", errString("disk on fire at /secret/path"), 500, varplane.CodeInternal},
		{"unavailable", varplane.Unavailable(errString("dial tcp: refused secret")), 503, varplane.CodeStoreUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlaneOn(t, &failingStore{Store: memory.New(), err: tt.err}, httpapi.Options{})
			for _, target := range []string{"/vars?key=a.b", "/vars/admin/status?scope=a.b", "/vars/batch?key=a.b"} {
				rec := p.do("GET", target, "")
				b := wantError(t, rec, tt.status, tt.code)
				if strings.Contains(rec.Body.String(), "secret") {
					t.Errorf("%s: body leaks the cause: %s", target, rec.Body)
				}
				if tt.code == varplane.CodeInternal && b.Error != "internal error" {
					t.Errorf("%s: error = %q, want internal error", target, b.Error)
				}
			}
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestStatusCodeMapping(t *testing.T) {
	tests := []struct {
		code varplane.Code
		want int
	}{
		{varplane.CodeBadRequest, 400},
		{varplane.CodeNoHead, 404},
		{varplane.CodeNotFound, 404},
		{varplane.CodeRevisionInvalid, 422},
		{varplane.CodeRevisionConflict, 409},
		{varplane.CodePayloadTooLarge, 413},
		{varplane.CodeStoreUnsupported, 400},
		{varplane.CodeStoreUnavailable, 503},
		{varplane.CodeForbidden, 403},
		{varplane.CodeUnauthorized, 401},
		{varplane.CodeIdempotencyReused, 422},
		{varplane.CodeTooManyRequests, 503},
		{varplane.CodeInternal, 500},
		{httpapi.CodeMethodNotAllowed, 405},
		{"something-new", 500},
	}
	for _, tt := range tests {
		if got := httpapi.StatusCode(tt.code); got != tt.want {
			t.Errorf("StatusCode(%s) = %d, want %d", tt.code, got, tt.want)
		}
	}
}

func TestIdempotencyThroughHTTP(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	rev := p.create("a.b", `{"x":1}`)
	body := jsonf(`{"scope":"a.b","revision":%q,"expectedGeneration":0,"idempotencyKey":"k-1"}`, rev)
	first := p.do("POST", "/vars/admin/activate", body)
	if first.Code != 200 {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	again := p.do("POST", "/vars/admin/activate", body)
	if again.Code != 200 || again.Body.String() != first.Body.String() {
		t.Fatalf("replay = %d %s, want 200 %s", again.Code, again.Body, first.Body)
	}
	var hist httpapi.HistoryResponse
	mustJSON(t, p.do("GET", "/vars/admin/history?scope=a.b", "").Body.Bytes(), &hist)
	activations := 0
	for _, e := range hist.Events {
		if e.Kind == varplane.EventActivated {
			activations++
		}
	}
	if activations != 1 {
		t.Errorf("activated events = %d, want 1", activations)
	}
	reused := p.do("POST", "/vars/admin/deactivate", `{"scope":"a.b","expectedGeneration":1,"idempotencyKey":"k-1"}`)
	wantError(t, reused, 422, varplane.CodeIdempotencyReused)

	create := `{"scope":"c.d","document":{"y":1},"idempotencyKey":"k-2"}`
	c1, c2 := p.do("POST", "/vars/admin/revisions", create), p.do("POST", "/vars/admin/revisions", create)
	if c1.Code != 201 || c2.Code != c1.Code || c2.Body.String() != c1.Body.String() {
		t.Errorf("create replay = %d %s, first %d %s", c2.Code, c2.Body, c1.Code, c1.Body)
	}
}
