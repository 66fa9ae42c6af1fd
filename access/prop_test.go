package access_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/store/memory"
)

// TestPropLiveTokensOnly: after any sequence of creates, revokes and forced
// bootstraps, exactly the tokens of the principals still held are accepted,
// each as its own id, and List names exactly those principals.
func TestPropLiveTokensOnly(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		s := memory.New()
		e := varplane.NewEngine(s, varplane.Options{Owners: []varplane.Owner{access.Owner}})
		defer e.Close()
		svc := access.NewService(e)
		az := access.NewAuthorizer(s)
		live := map[string]string{} // id → token
		var dead []string
		ids := rapid.SampledFrom([]string{"a", "b", "c", "ops"})
		for i, n := 0, rapid.IntRange(1, 20).Draw(rt, "ops"); i < n; i++ {
			id := ids.Draw(rt, "id")
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0:
				c, err := svc.Create(ctx, id, access.Binding{}, access.Root("t"), "")
				if _, held := live[id]; held != (err != nil) {
					rt.Fatalf("create %s: held %v, err %v", id, held, err)
				}
				if err == nil {
					live[id] = c.Token
				}
			case 1:
				_, err := svc.Revoke(ctx, id, access.Root("t"), "")
				if _, held := live[id]; held != (err == nil) {
					rt.Fatalf("revoke %s: held %v, err %v", id, held, err)
				}
				if err == nil {
					dead = append(dead, live[id])
					delete(live, id)
				}
			case 2:
				c, err := svc.Bootstrap(ctx, id, "t", true)
				if err != nil {
					rt.Fatal(err)
				}
				if old, held := live[id]; held {
					dead = append(dead, old)
				}
				live[id] = c.Token
			}
		}
		for id, tok := range live {
			got, err := authorize(az, varplane.KindIdentify, "", tok)
			if err != nil || got.ID != id {
				rt.Fatalf("live %s: %+v %v", id, got, err)
			}
		}
		for _, tok := range dead {
			if _, err := authorize(az, varplane.KindIdentify, "", tok); varplane.ErrorCode(err) != varplane.CodeForbidden {
				rt.Fatalf("a revoked or replaced token: %v", err)
			}
		}
		list, err := svc.List(ctx)
		if err != nil || len(list) != len(live) {
			rt.Fatalf("List = %v %v, want %d", list, err, len(live))
		}
	})
}

// FuzzParseDocument: the access document's decoder never panics, and what
// it accepts encodes to a document it accepts again, with the same
// principals.
func FuzzParseDocument(f *testing.F) {
	d := `"sha256:` + fmt.Sprintf("%064x", 1) + `"`
	f.Add([]byte(`{"principals":{}}`))
	f.Add([]byte(`{"principals":{"a":{"tokenDigest":` + d + `,"kinds":["read"],"prefixes":["x."],"roles":["admin"],"createdAt":"2026-01-01T00:00:00Z"}}}`))
	f.Add([]byte(`{"principals":{"a b":{}}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		doc, err := access.ParseDocument(b)
		if err != nil {
			if varplane.ErrorCode(err) != varplane.CodeBadRequest {
				t.Fatalf("code %q for %v", varplane.ErrorCode(err), err)
			}
			return
		}
		again, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		doc2, err := access.ParseDocument(again)
		if err != nil || len(doc2.Principals) != len(doc.Principals) {
			t.Fatalf("re-encoded %s: %v", again, err)
		}
	})
}
