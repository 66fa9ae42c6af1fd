package config

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/varplane/varplane"
)

// fuzzSeeds are bodies for both decoders: valid and invalid JSON and YAML,
// the policy's refusals, and bodies past the limits.
var fuzzSeeds = []string{
	`{"configuration":{"n":1}}`,
	`{"configuration":{"n":"x"}}`,
	`{"configuration":null}`,
	`{"configuration":{"n":1},"configuration":{"n":2}}`,
	`{"configuration":{"n":1,"n":2}}`,
	`[{"component":"alpha.bare"},{"component":"dummies.dummy","epoch":""}]`,
	`{"pairs":[{"component":"alpha.bare","epoch":"` + strings.Repeat("0", 64) + `"}]}`,
	`[{"component":""}]`,
	`[1,"x",null]`,
	"configuration:\n  n: 2\n",
	"configuration:\n  mode: 0644\n",
	"configuration: {n: 010}\n",
	"configuration: &a {n: 1}\nb: *a\n",
	"configuration:\n  <<: {n: 1}\n",
	"- component: dummies.dummy\n- {component: alpha.bare, epoch: ''}\n",
	"configuration: {n: .inf}\n",
	"configuration: !!binary aGVsbG8=\n",
	"a: 1\n---\nb: 2\n",
	strings.Repeat("[", 70) + strings.Repeat("]", 70),
	`{"configuration":{"k":"` + strings.Repeat("x", 300) + `"}}`,
	"\xff\xfe",
	"",
}

// fuzzHandler is a values service under small limits, so that the fuzzer
// reaches them.
func fuzzHandler(f *testing.F) (*Service, http.Handler) {
	svc, _ := newService(f)
	return svc, Handler(svc, HandlerOptions{Logger: quietLog(), Limits: varplane.Limits{MaxBodyBytes: 8192, MaxDepth: 16, MaxStringBytes: 256, MaxMembers: 64}})
}

func fuzzContentType(yaml bool) string {
	if yaml {
		return "application/yaml"
	}
	return "application/json"
}

// FuzzValuesCreate posts arbitrary bodies to create through the real
// handler: never a 500, every refusal the one error body with its status,
// and a refused body stores nothing.
func FuzzValuesCreate(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	svc, h := fuzzHandler(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, body []byte, yaml bool) {
		before, _, err := svc.Get(ctx, "alpha.bare", "")
		if err != nil {
			t.Fatal(err)
		}
		rec := serve(h, "POST", "/configuration/values/alpha.bare/", fuzzContentType(yaml), body)
		after, ok, err := svc.Get(ctx, "alpha.bare", "")
		if err != nil {
			t.Fatal(err)
		}
		switch rec.Code {
		case http.StatusCreated:
			var res struct{ ID, Epoch string }
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || !ok || after.ID != res.ID || after.Created != before.Created+1 {
				t.Fatalf("201 %s, but served %+v", rec.Body, after)
			}
			// What is stored fits the schema (an integer n).
			if issues, err := svc.Deployment().Components["alpha.bare"].Validate(after.Configuration); err != nil || len(issues) > 0 {
				t.Fatalf("stored %s that does not fit: %v %v", after.Configuration, issues, err)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
			checkErrorShape(t, rec, "")
			if after.Created != before.Created || after.ID != before.ID {
				t.Fatalf("a refused body (%d %s) changed what is served", rec.Code, rec.Body)
			}
		default:
			t.Fatalf("answer %d %s", rec.Code, rec.Body)
		}
	})
}

// FuzzValuesFetch posts arbitrary bodies to fetch through the real handler:
// never a 500, an answer of one entry per pair, or the one error body.
func FuzzValuesFetch(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	_, h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body []byte, yaml bool) {
		rec := serve(h, "POST", "/configuration/values:fetch", fuzzContentType(yaml), body)
		switch rec.Code {
		case http.StatusOK:
			var got []Fetched
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("200 %s: %v", rec.Body, err)
			}
			for _, g := range got {
				if g.Component == "" || len(g.Configuration) == 0 {
					t.Fatalf("entry %+v", g)
				}
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			checkErrorShape(t, rec, "")
		default:
			t.Fatalf("answer %d %s", rec.Code, rec.Body)
		}
	})
}
