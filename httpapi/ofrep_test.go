package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/httpapi"
)

// ofrepResult is OFREP's evaluation success or failure, as a provider reads
// it.
type ofrepResult struct {
	Key          string          `json:"key"`
	Value        json.RawMessage `json:"value"`
	Reason       string          `json:"reason"`
	Variant      string          `json:"variant"`
	Metadata     map[string]any  `json:"metadata"`
	ErrorCode    string          `json:"errorCode"`
	ErrorDetails string          `json:"errorDetails"`
}

const ofrepDoc = `{"enabled":true,"name":"vinci","ratio":0.25,"limit":9007199254740991,"lanes":{"a/b":1,"m~n":2},"list":[10,20],"nothing":null}`

func (p *plane) publish(scope, doc string) varplane.Revision {
	p.t.Helper()
	st, err := p.engine.Status(context.Background(), varplane.Scope(scope))
	if err != nil {
		p.t.Fatal(err)
	}
	rev := p.create(scope, doc)
	p.activate(scope, rev, int(st.Generation))
	return rev
}

func (p *plane) ofrep(key, body string, header ...string) (*ofrepResult, int) {
	p.t.Helper()
	rec := p.do("POST", "/vars/ofrep/v1/evaluate/flags/"+key, body, append([]string{"Content-Type", "application/json; charset=utf-8"}, header...)...)
	var res ofrepResult
	if rec.Code != http.StatusNotModified {
		mustJSON(p.t, rec.Body.Bytes(), &res)
	}
	return &res, rec.Code
}

// A flag key names a scope and a JSON Pointer into its head: the value
// there comes back typed as JSON types it, with the revision as variant,
// generation and revision as metadata and reason STATIC; the protocol's
// errors come with its codes and statuses.
func TestOFREPEvaluateFlag(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	rev := p.publish("agentic.lanes.vinci", ofrepDoc)
	ctx := `{"context":{"targetingKey":"user-1","plan":"pro"}}`
	tests := []struct {
		key, value string
	}{
		{"agentic.lanes.vinci%23/enabled", `true`},
		{"agentic.lanes.vinci%23%2Fname", `"vinci"`},
		{"agentic.lanes.vinci%23/ratio", `0.25`},
		{"agentic.lanes.vinci%23/limit", `9007199254740991`},
		{"agentic.lanes.vinci%23/lanes/a~1b", `1`},
		{"agentic.lanes.vinci%23/lanes/m~0n", `2`},
		{"agentic.lanes.vinci%23/list/1", `20`},
		{"agentic.lanes.vinci%23/nothing", `null`},
		{"agentic.lanes.vinci%23/lanes", `{"a/b":1,"m~n":2}`},
		{"agentic.lanes.vinci", ofrepDoc},
		{"agentic.lanes.vinci%23", ofrepDoc},
	}
	for _, tt := range tests {
		res, status := p.ofrep(tt.key, ctx)
		if status != 200 || string(res.Value) != tt.value {
			t.Errorf("%s: %d %s, want %s", tt.key, status, res.Value, tt.value)
			continue
		}
		if res.Reason != "STATIC" || res.Variant != string(rev) || res.Metadata["revision"] != string(rev) ||
			res.Metadata["generation"] != float64(1) || res.Metadata["scope"] != "agentic.lanes.vinci" {
			t.Errorf("%s: %+v", tt.key, res)
		}
		if !strings.HasPrefix(tt.key, res.Key[:len("agentic.lanes.vinci")]) || strings.Contains(res.Key, "%") {
			t.Errorf("%s: key %q", tt.key, res.Key)
		}
	}
	// A publish is seen by the next evaluation.
	rev2 := p.publish("agentic.lanes.vinci", `{"enabled":false}`)
	if res, _ := p.ofrep("agentic.lanes.vinci%23/enabled", ctx); string(res.Value) != "false" || res.Variant != string(rev2) {
		t.Errorf("after a publish: %+v", res)
	}

	failures := []struct {
		name, key, body string
		status          int
		code            string
	}{
		{"no such scope", "nowhere.at.all", ctx, 404, "FLAG_NOT_FOUND"},
		{"no such member", "agentic.lanes.vinci%23/missing", ctx, 404, "FLAG_NOT_FOUND"},
		{"index past the end", "agentic.lanes.vinci%23/enabled/0", ctx, 404, "FLAG_NOT_FOUND"},
		{"bad escape", "agentic.lanes.vinci%23/a~2", ctx, 404, "FLAG_NOT_FOUND"},
		{"pointer without slash", "agentic.lanes.vinci%23enabled", ctx, 404, "FLAG_NOT_FOUND"},
		{"empty key", "", ctx, 404, "FLAG_NOT_FOUND"},
		{"not JSON", "agentic.lanes.vinci", `{"context":`, 400, "INVALID_CONTEXT"},
		{"context not an object", "agentic.lanes.vinci", `{"context":[1]}`, 400, "INVALID_CONTEXT"},
		{"targetingKey not a string", "agentic.lanes.vinci", `{"context":{"targetingKey":7}}`, 400, "INVALID_CONTEXT"},
		{"body an array", "agentic.lanes.vinci", `[]`, 400, "INVALID_CONTEXT"},
		{"no body", "agentic.lanes.vinci", ``, 400, "INVALID_CONTEXT"},
	}
	for _, tt := range failures {
		res, status := p.ofrep(tt.key, tt.body)
		if status != tt.status || res.ErrorCode != tt.code || res.Value != nil {
			t.Errorf("%s: %d %+v, want %d %s", tt.name, status, res, tt.status, tt.code)
		}
	}
	// Context without a targeting key, or no context: served (no rollout
	// needs one).
	for _, body := range []string{`{}`, `{"context":{}}`, `{"context":null}`} {
		if res, status := p.ofrep("agentic.lanes.vinci%23/enabled", body); status != 200 || string(res.Value) != "false" {
			t.Errorf("%s: %d %+v", body, status, res)
		}
	}
}

// The routes are the read authorization of the scope with the same
// tokens: no token 401, an unknown one 403, a token of another prefix 403
// (before anything tells whether the flag exists), a reader 200.
func TestOFREPAuthorization(t *testing.T) {
	auth, err := access.Scoped([]access.Grant{
		{Token: "reader", Kinds: []varplane.Kind{varplane.KindRead}, Prefixes: []string{"app."}},
		{Token: "admin"},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := newPlane(t, httpapi.Options{Authorizer: auth})
	put := func(scope, doc string) {
		rec := p.do("POST", "/vars/admin/publish", jsonf(`{"scope":%q,"document":%s,"expectedGeneration":0}`, scope, doc), "Authorization", "Bearer admin")
		if rec.Code != 200 && rec.Code != 201 {
			t.Fatalf("publish %s: %d %s", scope, rec.Code, rec.Body)
		}
	}
	put("app.one", `{"on":true}`)
	put("other.two", `{"on":true}`)
	tests := []struct {
		name, key, token string
		status           int
	}{
		{"no token", "app.one%23/on", "", 401},
		{"forged token", "app.one%23/on", "Bearer forged", 403},
		{"token in lower case", "app.one%23/on", "bearer forged", 403},
		{"other prefix", "other.two%23/on", "Bearer reader", 403},
		{"other prefix, no such scope", "other.none%23/on", "Bearer reader", 403},
		{"malformed key, forged token", "%23/on", "Bearer forged", 403},
		{"reader", "app.one%23/on", "Bearer reader", 200},
	}
	for _, tt := range tests {
		var hdr []string
		if tt.token != "" {
			hdr = []string{"Authorization", tt.token}
		}
		res, status := p.ofrep(tt.key, `{"context":{}}`, hdr...)
		if status != tt.status {
			t.Errorf("%s: %d %+v, want %d", tt.name, status, res, tt.status)
		}
	}
	// Bulk: the reader's list holds app.one only; a forged token is refused.
	rec := p.do("POST", "/vars/ofrep/v1/evaluate/flags", `{"context":{}}`, "Authorization", "Bearer reader")
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"key":"app.one"`) || strings.Contains(rec.Body.String(), "other") {
		t.Errorf("bulk as reader: %d %s", rec.Code, rec.Body)
	}
	rec = p.do("POST", "/vars/ofrep/v1/evaluate/flags", `{"context":{"flags":["app.one#/on","other.two#/on"]}}`, "Authorization", "Bearer reader")
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `{"key":"other.two#/on","errorCode":"GENERAL"`) {
		t.Errorf("bulk of a forbidden flag: %d %s", rec.Code, rec.Body)
	}
	for _, tok := range []string{"", "Bearer forged"} {
		rec := p.do("POST", "/vars/ofrep/v1/evaluate/flags", `{"context":{}}`, "Authorization", tok)
		if rec.Code != 401 && rec.Code != 403 || !strings.Contains(rec.Body.String(), `"errorCode"`) {
			t.Errorf("bulk with %q: %d %s", tok, rec.Code, rec.Body)
		}
	}
}

type bulkAnswer struct {
	Flags []ofrepResult `json:"flags"`
}

// Bulk evaluation answers the named flags in order (failures as items) or
// every readable scope's document, with an ETag that changes with a
// publish and a 304 for an If-None-Match that names it.
func TestOFREPBulk(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	p.publish("app.a", `{"on":true,"n":3}`)
	p.publish("app.b", `"text"`)
	p.create("app.nohead", `{}`)
	bulk := func(body string, header ...string) (bulkAnswer, *struct {
		code int
		etag string
	}) {
		rec := p.do("POST", "/vars/ofrep/v1/evaluate/flags", body, append([]string{"Content-Type", "application/json"}, header...)...)
		var a bulkAnswer
		if rec.Code == 200 {
			mustJSON(t, rec.Body.Bytes(), &a)
		}
		return a, &struct {
			code int
			etag string
		}{rec.Code, rec.Header().Get("ETag")}
	}
	all, st := bulk(`{"context":{"targetingKey":"u"}}`)
	if st.code != 200 || len(all.Flags) != 2 || all.Flags[0].Key != "app.a" || string(all.Flags[1].Value) != `"text"` || st.etag == "" {
		t.Fatalf("all: %d %+v", st.code, all)
	}
	named, st2 := bulk(`{"context":{"flags":["app.a#/n","app.a#/on","app.b","app.nohead","app.a#/x","#bad"]}}`)
	want := []string{"3", "true", `"text"`, "FLAG_NOT_FOUND", "FLAG_NOT_FOUND", "FLAG_NOT_FOUND"}
	if st2.code != 200 || len(named.Flags) != len(want) {
		t.Fatalf("named: %d %+v", st2.code, named)
	}
	for i, w := range want {
		got := string(named.Flags[i].Value)
		if named.Flags[i].ErrorCode != "" {
			got = named.Flags[i].ErrorCode
		}
		if got != w {
			t.Errorf("flag %d (%s) = %s, want %s", i, named.Flags[i].Key, got, w)
		}
	}
	if st2.etag == st.etag {
		t.Error("two sets of flags share an ETag")
	}
	// 304 while nothing changed, whatever the If-None-Match's form.
	for _, inm := range []string{st.etag, "W/" + st.etag, `"x", ` + st.etag} {
		if _, again := bulk(`{"context":{}}`, "If-None-Match", inm); again.code != http.StatusNotModified || again.etag != st.etag {
			t.Errorf("If-None-Match %s: %d %s", inm, again.code, again.etag)
		}
	}
	p.publish("app.b", `"changed"`)
	after, st3 := bulk(`{"context":{}}`, "If-None-Match", st.etag)
	if st3.code != 200 || st3.etag == st.etag || string(after.Flags[1].Value) != `"changed"` {
		t.Errorf("after a publish: %d %s %+v", st3.code, st3.etag, after)
	}
}

// More readable scopes than a bulk answers, or more named flags, is
// limit-exceeded; so are values past MaxOFREPBulkBytes. Nothing is
// written but the failure.
func TestOFREPBulkBounds(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	for i := 0; i <= 256; i++ {
		p.publish(jsonf("many.s%03d", i), `{"v":1}`)
	}
	rec := p.do("POST", "/vars/ofrep/v1/evaluate/flags", `{"context":{}}`)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), `"errorCode":"INVALID_CONTEXT"`) || strings.Contains(rec.Body.String(), `"flags"`) {
		t.Errorf("257 readable scopes: %d %s", rec.Code, rec.Body)
	}
	keys := make([]string, 257)
	for i := range keys {
		keys[i] = `"many.s000"`
	}
	rec = p.do("POST", "/vars/ofrep/v1/evaluate/flags", `{"context":{"flags":[`+strings.Join(keys, ",")+`]}}`)
	if rec.Code != 400 {
		t.Errorf("257 named flags: %d %s", rec.Code, rec.Body)
	}
	// 12 documents of 800 KiB: past the answer's bound.
	chunk := strings.Repeat("x", 200<<10)
	big := `{"a":"` + chunk + `","b":"` + chunk + `","c":"` + chunk + `","d":"` + chunk + `"}`
	var named []string
	for i := 0; i < 12; i++ {
		sc := jsonf("big.d%02d", i)
		p.publish(sc, big)
		named = append(named, `"`+sc+`"`)
	}
	rec = p.do("POST", "/vars/ofrep/v1/evaluate/flags", `{"context":{"flags":[`+strings.Join(named, ",")+`]}}`)
	if rec.Code != 400 || rec.Body.Len() > 4096 {
		t.Errorf("12 documents of 800 KiB: %d, %d bytes", rec.Code, rec.Body.Len())
	}
}

// fakeRollouts puts scopes under "r." under a rollout that needs a
// targeting key; the key "b" is in the rollout's split.
type fakeRollouts struct{ calls int }

func (f *fakeRollouts) PickerOf(*varplane.Head) func(context.Context, *varplane.Head, string) (*varplane.Head, bool, error) {
	return f.pick
}

func (f *fakeRollouts) pick(_ context.Context, head *varplane.Head, key string) (*varplane.Head, bool, error) {
	f.calls++
	if !strings.HasPrefix(string(head.Scope), "r.") {
		return head, false, nil
	}
	if key == "" {
		return nil, false, &varplane.Error{Code: varplane.CodeTargetingKeyMissing, Message: "a rollout runs on the scope: the context needs a targetingKey"}
	}
	return head, key == "b", nil
}

// A rollout plugs in through Options.Rollouts: TARGETING_KEY_MISSING only
// for a scope whose rollout needs one, SPLIT when the rollout chose.
func TestOFREPRollouts(t *testing.T) {
	ro := &fakeRollouts{}
	p := newPlane(t, httpapi.Options{Rollouts: ro})
	p.publish("r.x", `{"on":true}`)
	p.publish("p.plain", `{"on":true}`)
	if res, st := p.ofrep("r.x%23/on", `{"context":{}}`); st != 400 || res.ErrorCode != "TARGETING_KEY_MISSING" {
		t.Errorf("no key: %d %+v", st, res)
	}
	if res, st := p.ofrep("p.plain%23/on", `{"context":{}}`); st != 200 || res.Reason != "STATIC" {
		t.Errorf("no rollout, no key: %d %+v", st, res)
	}
	if res, st := p.ofrep("r.x%23/on", `{"context":{"targetingKey":"b"}}`); st != 200 || res.Reason != "SPLIT" {
		t.Errorf("key b: %d %+v", st, res)
	}
	if res, st := p.ofrep("r.x%23/on", `{"context":{"targetingKey":"a"}}`); st != 200 || res.Reason != "STATIC" {
		t.Errorf("key a: %d %+v", st, res)
	}
	rec := p.do("POST", "/vars/ofrep/v1/evaluate/flags", `{"context":{"flags":["r.x#/on","p.plain#/on"]}}`)
	if !strings.Contains(rec.Body.String(), `{"key":"r.x#/on","errorCode":"TARGETING_KEY_MISSING"`) || !strings.Contains(rec.Body.String(), `"key":"p.plain#/on","value":true`) {
		t.Errorf("bulk without a key: %d %s", rec.Code, rec.Body)
	}
	if ro.calls == 0 {
		t.Error("Rollouts was never asked")
	}
}

// A key's pointer may hold empty, "." and ".." tokens, written with '/' as
// they are or percent-encoded: the path is taken as it came, never cleaned
// (the mux answered a redirect to another key). A page of another site is
// refused as for every POST.
func TestOFREPKeyPaths(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	p.publish("app.one", `{"":{"":1},"a":{"..":2,".":3}}`)
	for key, want := range map[string]string{
		"app.one%23%2F%2F": "1", "app.one%23//": "1",
		"app.one%23/a/..": "2", "app.one%23%2Fa%2F..": "2",
		"app.one%23/a/.": "3", "app.one%23%2Fa%2F.": "3",
	} {
		if res, st := p.ofrep(key, `{}`); st != 200 || string(res.Value) != want {
			t.Errorf("%s: %d %+v, want %s", key, st, res, want)
		}
	}
	if _, st := p.ofrep("app.one", `{}`, "Sec-Fetch-Site", "cross-site"); st != 403 {
		t.Errorf("a page of another site: %d", st)
	}
	if rec := p.do("GET", "/vars/ofrep/v1/evaluate/flags/app.one", ""); rec.Code != 405 {
		t.Errorf("GET: %d", rec.Code)
	}
}
