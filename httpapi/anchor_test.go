package httpapi_test

import (
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/httpapi"
)

// TestChainAnchor: GET {base}/admin/chain answers the digest of every
// scope's chain head (the value ChainDigest gives for the heads the
// statuses report), needs audit on the whole tree, and takes no
// parameters; a commit moves it.
func TestChainAnchor(t *testing.T) {
	grants, err := access.ParseTokens(strings.NewReader("all-secret id=auditor kinds=read,audit,mutate\nsome-secret id=partial kinds=audit prefixes=a\n"))
	if err != nil {
		t.Fatal(err)
	}
	auth, err := access.Scoped(grants)
	if err != nil {
		t.Fatal(err)
	}
	p := newPlane(t, httpapi.Options{Authorizer: auth})
	all := []string{"Authorization", "Bearer all-secret"}
	post := append([]string{"Content-Type", "application/json"}, all...)
	for i, scope := range []string{"a.x", "b.z", "a.y"} {
		if rec := p.do("POST", "/vars/admin/publish", jsonf(`{"scope":%q,"document":{"n":%d},"expectedGeneration":0}`, scope, i), post...); rec.Code != 200 {
			t.Fatalf("publish %s: %d %s", scope, rec.Code, rec.Body)
		}
	}
	heads := map[varplane.Scope]varplane.ChainHead{}
	for _, scope := range []varplane.Scope{"a.x", "a.y", "b.z"} {
		var st varplane.Status
		mustJSON(t, p.do("GET", "/vars/admin/status?scope="+string(scope), "", all...).Body.Bytes(), &st)
		if st.Chain.Seq != 2 || len(st.Chain.Hash) != 64 {
			t.Fatalf("status of %s: chain %+v, want seq 2 and a hash", scope, st.Chain)
		}
		heads[scope] = st.Chain
	}
	anchor := func() httpapi.ChainAnchor {
		rec := p.do("GET", "/vars/admin/chain", "", all...)
		if rec.Code != 200 {
			t.Fatalf("chain: %d %s", rec.Code, rec.Body)
		}
		var a httpapi.ChainAnchor
		mustJSON(t, rec.Body.Bytes(), &a)
		return a
	}
	a := anchor()
	if a.Digest != varplane.ChainDigest(heads) || a.Scopes != 3 || a.Events != 6 || a.At.IsZero() {
		t.Fatalf("anchor %+v, want digest %s over 3 scopes and 6 events", a, varplane.ChainDigest(heads))
	}
	if rec := p.do("GET", "/vars/admin/chain", "", "Authorization", "Bearer some-secret"); rec.Code != 403 {
		t.Errorf("a token limited to a prefix: %d %s, want 403", rec.Code, rec.Body)
	}
	if rec := p.do("GET", "/vars/admin/chain?scope=a.x", "", all...); rec.Code != 400 {
		t.Errorf("a parameter: %d %s, want 400", rec.Code, rec.Body)
	}
	if rec := p.do("POST", "/vars/admin/publish", `{"scope":"b.z","document":{"n":9},"expectedGeneration":1}`, post...); rec.Code != 200 {
		t.Fatalf("publish: %d %s", rec.Code, rec.Body)
	}
	if b := anchor(); b.Digest == a.Digest || b.Events != 8 {
		t.Errorf("after a commit the anchor is %+v, it was %+v", b, a)
	}
}
