package client

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/varplane/varplane"
)

func newTestClient(t *testing.T, opts Options) *Client {
	t.Helper()
	c, err := New("http://127.0.0.1:1", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

func mustRegister(t *testing.T, c *Client, scopes ...varplane.Scope) {
	t.Helper()
	if err := c.Register(scopes...); err != nil {
		t.Fatal(err)
	}
}

func valueOf(t *testing.T, c *Client, sc varplane.Scope) string {
	t.Helper()
	v, ok := c.Value(sc)
	if !ok {
		return "<none>"
	}
	return v.Tier.String() + ":" + string(v.Raw)
}

func TestNewerGenerationOnly(t *testing.T) {
	c := newTestClient(t, Options{Static: map[varplane.Scope]json.RawMessage{"a.x": json.RawMessage(`"static"`)}})
	mustRegister(t, c, "a.x")
	steps := []struct {
		name  string
		apply func()
		want  string
	}{
		{"static before any head", func() {}, `static:"static"`},
		{"gen 3", func() { c.applyHead("a.x", 3, "r3", "", json.RawMessage(`3`)) }, "runtime:3"},
		{"reordered gen 2", func() { c.applyHead("a.x", 2, "r2", "", json.RawMessage(`2`)) }, "runtime:3"},
		{"duplicate gen 3", func() { c.applyHead("a.x", 3, "r3", "", json.RawMessage(`3`)) }, "runtime:3"},
		// A read replica's rollout revision at gen 3, then the head's
		// next publish at gen 3 with another revision (docs/rollouts.md).
		{"gen 3, another revision", func() { c.applyHead("a.x", 3, "r3b", "", json.RawMessage(`33`)) }, "runtime:33"},
		{"gen 3 without a revision", func() { c.applyHead("a.x", 3, "", "", json.RawMessage(`34`)) }, "runtime:33"},
		{"stale no-head gen 3", func() { c.applyNoHead("a.x", 3, false) }, "runtime:33"},
		{"no-head gen 4 falls back", func() { c.applyNoHead("a.x", 4, false) }, `static:"static"`},
		{"late head gen 4", func() { c.applyHead("a.x", 4, "r4", "", json.RawMessage(`4`)) }, `static:"static"`},
		{"gen 5", func() { c.applyHead("a.x", 5, "r5", "", json.RawMessage(`5`)) }, "runtime:5"},
		{"unregistered scope ignored", func() { c.applyHead("b.y", 9, "r9", "", json.RawMessage(`9`)) }, "runtime:5"},
	}
	for _, st := range steps {
		st.apply()
		if got := valueOf(t, c, "a.x"); got != st.want {
			t.Errorf("%s: value = %s, want %s", st.name, got, st.want)
		}
	}
	if v, _ := c.Value("a.x"); v.Generation != 5 || v.Revision != "r5" {
		t.Errorf("generation, revision = %d, %s; want 5, r5", v.Generation, v.Revision)
	}
	if _, ok := c.Value("b.y"); ok {
		t.Error("unregistered scope has a value")
	}
}

func TestTiers(t *testing.T) {
	c := newTestClient(t, Options{
		Static:   map[varplane.Scope]json.RawMessage{"s.static": json.RawMessage(`"s"`), "s.both": json.RawMessage(`"s"`)},
		Defaults: map[varplane.Scope]json.RawMessage{"s.def": json.RawMessage(`"d"`), "s.both": json.RawMessage(`"d"`)},
	})
	mustRegister(t, c, "s.static", "s.def", "s.both", "s.none")
	for sc, want := range map[varplane.Scope]string{
		"s.static": `static:"s"`, "s.def": `default:"d"`, "s.both": `static:"s"`, "s.none": "<none>",
	} {
		if got := valueOf(t, c, sc); got != want {
			t.Errorf("%s = %s, want %s", sc, got, want)
		}
	}
	c.applyHead("s.def", 1, "r", "", json.RawMessage(`"runtime"`))
	if got, want := valueOf(t, c, "s.def"), `runtime:"runtime"`; got != want {
		t.Errorf("s.def = %s, want %s", got, want)
	}
	if _, err := Get[string](c, "s.none"); !errors.Is(err, ErrNoValue) || !errors.Is(err, varplane.ErrNoHead) {
		t.Errorf("Get of a scope without value = %v, want ErrNoValue (no-head)", err)
	}
}

func TestInvalidValueKeepsPrevious(t *testing.T) {
	validate := func(_ varplane.Scope, v json.RawMessage) error {
		if !strings.HasPrefix(string(v), `{"foo":"`) {
			return errors.New("foo must be a string")
		}
		return nil
	}
	c := newTestClient(t, Options{Validate: validate})
	mustRegister(t, c, "a.x")
	c.applyHead("a.x", 1, "r1", "", json.RawMessage(`{"foo":"one"}`))
	c.applyHead("a.x", 2, "r2", "", json.RawMessage(`{"foo":{"nested":true}}`))
	if got, want := valueOf(t, c, "a.x"), `runtime:{"foo":"one"}`; got != want {
		t.Errorf("after an invalid value: %s, want %s", got, want)
	}
	c.applyHead("a.x", 3, "r3", "", json.RawMessage(`{"foo":"three"}`))
	if got, want := valueOf(t, c, "a.x"), `runtime:{"foo":"three"}`; got != want {
		t.Errorf("after the next valid value: %s, want %s", got, want)
	}
}

func TestOverride(t *testing.T) {
	env := map[string]string{
		"VARPLANE_OVERRIDE_DUMMIES_DUMMY": `{"foo":"local"}`,
		"VARPLANE_OVERRIDE_BAD_ONE":       `{"foo":1}`,
	}
	validate := func(_ varplane.Scope, v json.RawMessage) error {
		var m map[string]any
		if err := json.Unmarshal(v, &m); err != nil {
			return err
		}
		if _, ok := m["foo"].(string); !ok {
			return errors.New("foo must be a string")
		}
		return nil
	}
	c := newTestClient(t, Options{
		Getenv:   func(k string) string { return env[k] },
		Validate: validate,
		Defaults: map[varplane.Scope]json.RawMessage{"dummies.dummy": json.RawMessage(`{"foo":"bye","bar":{"baz":"quux"}}`)},
	})
	mustRegister(t, c, "dummies.dummy")
	type conf struct {
		Foo string `json:"foo"`
		Bar struct {
			Baz string `json:"baz"`
		} `json:"bar"`
	}
	got, err := Get[conf](c, "dummies.dummy")
	if err != nil {
		t.Fatal(err)
	}
	if got.Foo != "local" || got.Bar.Baz != "quux" {
		t.Errorf("override = %+v, want foo local with the default bar.baz quux", got)
	}
	if v, _ := c.Value("dummies.dummy"); v.Tier != TierOverride {
		t.Errorf("tier = %s, want override", v.Tier)
	}
	// The server is bypassed: a pushed head changes nothing and the scope is
	// not followed.
	c.applyHead("dummies.dummy", 7, "r", "", json.RawMessage(`{"foo":"served"}`))
	if got, _ := Get[conf](c, "dummies.dummy"); got.Foo != "local" {
		t.Errorf("after a push: foo = %q, want local", got.Foo)
	}
	if keys, groups, _ := c.held(); len(keys)+len(groups) != 0 {
		t.Errorf("followed = %v %v, want nothing", keys, groups)
	}
	if err := c.Register("bad.one"); err == nil {
		t.Error("an override that fails its schema was accepted")
	}
}

func TestOverrideEnv(t *testing.T) {
	tests := map[varplane.Scope]string{
		"agentic.lanes.vinci": "VARPLANE_OVERRIDE_AGENTIC_LANES_VINCI",
		"tenant:acme":         "VARPLANE_OVERRIDE_TENANT_ACME",
		"dummies.dummy@3f2a":  "VARPLANE_OVERRIDE_DUMMIES_DUMMY_3F2A",
		"g":                   "VARPLANE_OVERRIDE_G",
	}
	for sc, want := range tests {
		if got := OverrideEnv(sc); got != want {
			t.Errorf("OverrideEnv(%q) = %q, want %q", sc, got, want)
		}
	}
}

func TestGetDecodesAndCaches(t *testing.T) {
	c := newTestClient(t, Options{})
	mustRegister(t, c, "a.x", "g")
	c.applyHead("a.x", 1, "r", "", json.RawMessage(`{"n":1}`))
	type T struct{ N int }
	for i := 0; i < 2; i++ {
		got, err := Get[T](c, "a.x")
		if err != nil || got.N != 1 {
			t.Fatalf("Get = %+v, %v", got, err)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { _, _ = Get[T](c, "a.x") }); allocs != 0 {
		t.Errorf("cached Get allocates %v times", allocs)
	}
	if _, err := Get[[]int](c, "a.x"); err == nil {
		t.Error("decoding an object into []int succeeded")
	}
	c.applyHead("a.x", 2, "r", "", json.RawMessage(`{"n":2}`))
	if got, _ := Get[T](c, "a.x"); got.N != 2 {
		t.Errorf("after update N = %d, want 2", got.N)
	}
}

func TestOnChange(t *testing.T) {
	c := newTestClient(t, Options{Defaults: map[varplane.Scope]json.RawMessage{"a.x": json.RawMessage(`0`)}})
	mustRegister(t, c, "a.x")
	var got []string
	cancel := c.OnChange(func(sc varplane.Scope, old, nv Value) {
		got = append(got, string(sc)+":"+string(old.Raw)+"->"+string(nv.Raw)+"("+nv.Tier.String()+")")
	})
	c.applyHead("a.x", 1, "r", "", json.RawMessage(`1`))
	c.applyHead("a.x", 1, "r", "", json.RawMessage(`1`)) // duplicate: no callback
	c.applyNoHead("a.x", 2, false)
	cancel()
	c.applyHead("a.x", 3, "r", "", json.RawMessage(`3`))
	want := []string{"a.x:0->1(runtime)", "a.x:1->0(default)"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("callbacks = %v, want %v", got, want)
	}
}

func TestReadEvents(t *testing.T) {
	c := newTestClient(t, Options{})
	mustRegister(t, c, "a.x", "g")
	stream := strings.Join([]string{
		"retry: 1000",
		"",
		": heartbeat",
		"",
		"event: head",
		"id: a.x@2",
		`data: {"scope":"a.x","generation":2,"revision":"sha256:ab","effectiveAt":"2026-01-01T00:00:00Z","values":{"a.x":{"on":true}}}`,
		"",
		"event: head",
		"id: g@1",
		`data: {"scope":"g","generation":1,"revision":"sha256:cd","effectiveAt":"2026-01-01T00:00:00Z","values":{"g.y":1}}`,
		"",
		"event: no-head",
		`data: {"scope":"a.x","generation":3}`,
		"",
		"",
	}, "\n")
	lines := 0
	err := c.readEvents(strings.NewReader(stream), func() { lines++ })
	if err == nil {
		t.Error("end of stream was not reported")
	}
	if got, want := valueOf(t, c, "g"), `runtime:{"g.y":1}`; got != want {
		t.Errorf("g = %s, want %s", got, want)
	}
	if got, want := valueOf(t, c, "a.x"), "<none>"; got != want {
		t.Errorf("a.x = %s, want %s", got, want)
	}
	if v, _ := c.Value("a.x"); v.Generation != 3 {
		t.Errorf("a.x generation = %d, want 3", v.Generation)
	}
	if lines == 0 {
		t.Error("liveness callback never ran")
	}
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "localhost:8790", "ftp://x", "http://"} {
		if _, err := New(u, Options{}); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
}
