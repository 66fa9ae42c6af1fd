package config

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
)

// testDeployment is the deployment of testdata/manifests: dummies.dummy
// with defaults (a secret among them), alpha.bare without any.
func testDeployment(t testing.TB) *Deployment {
	t.Helper()
	ms, err := LoadManifests("testdata/manifests")
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDeployment(ms, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func newService(t testing.TB, owners ...varplane.Owner) (*Service, *varplane.Engine) {
	t.Helper()
	store := memory.New()
	eng := varplane.NewEngine(store, varplane.Options{Owners: owners})
	t.Cleanup(func() { eng.Close(); _ = store.Close() })
	svc, err := NewService(eng, testDeployment(t))
	if err != nil {
		t.Fatal(err)
	}
	return svc, eng
}

func TestScopeForm(t *testing.T) {
	epoch := "2a73909699a3acdecac991460876b4ba60db4b5d38b32cfb1fec3d38f71af06d"
	long := "n" + fmt.Sprintf("%062d", 0) + ".m" + fmt.Sprintf("%062d", 0)
	for _, comp := range []string{"dummies.dummy", "default.resources", long} {
		s := Scope(comp, epoch)
		if _, err := varplane.ParseScope(string(s)); err != nil {
			t.Errorf("Scope(%s) = %s is not a valid scope: %v", comp, s, err)
		}
		if len(s) > varplane.MaxScopeBytes {
			t.Errorf("Scope(%s) is %d bytes", comp, len(s))
		}
		c, e, ok := ParseScope(s)
		if !ok || c != comp || e != epoch {
			t.Errorf("ParseScope(%s) = %s %s %v", s, c, e, ok)
		}
	}
	for _, s := range []varplane.Scope{"agentic.lanes.vinci", "a.b@short", "nodot@" + varplane.Scope(epoch)} {
		if _, _, ok := ParseScope(s); ok {
			t.Errorf("ParseScope(%s) accepted", s)
		}
	}
}

func mustCreate(t *testing.T, svc *Service, component, conf, originator string) Created {
	t.Helper()
	res, err := svc.Create(context.Background(), CreateRequest{Component: component, Configuration: json.RawMessage(conf), Originator: originator})
	if err != nil {
		t.Fatalf("Create(%s, %s): %v", component, conf, err)
	}
	return res
}

func TestServiceGetDefaultsAndCreated(t *testing.T) {
	svc, _ := newService(t)
	ctx := context.Background()
	dep := svc.Deployment()
	dummyEpoch := dep.Components["dummies.dummy"].Epoch

	v, ok, err := svc.Get(ctx, "dummies.dummy", "")
	if err != nil || !ok {
		t.Fatalf("Get defaults: %v %v", ok, err)
	}
	if v.Source != SourceDefaults || v.Created != 0 || string(v.Configuration) != `{"bar":1,"foo":"bar","key":"$API_KEY"}` || v.Epoch != dummyEpoch || v.Schema == nil {
		t.Errorf("defaults = %+v", v)
	}
	if _, ok, _ := svc.Get(ctx, "alpha.bare", ""); ok {
		t.Error("a component without defaults or objects served something")
	}
	if _, ok, _ := svc.Get(ctx, "nobody.here", ""); ok {
		t.Error("an undeclared component served something")
	}

	first := mustCreate(t, svc, "dummies.dummy", `{"foo":"quux","bar":2,"key":"$API_KEY"}`, "alice")
	second := mustCreate(t, svc, "dummies.dummy", `{"foo":"quux","bar":2,"key":"$API_KEY"}`, "bob")
	if first.Created != 1 || second.Created != 2 {
		t.Errorf("created = %d, %d; want 1, 2", first.Created, second.Created)
	}
	if first.ID == second.ID {
		t.Error("two creates of the same content share an id")
	}
	if first.Epoch != dummyEpoch {
		t.Errorf("epoch = %s", first.Epoch)
	}
	v, ok, err = svc.Get(ctx, "dummies.dummy", "")
	if err != nil || !ok || v.Source != SourceCreated || v.Created != 2 || v.Originator != "bob" || v.ID != second.ID {
		t.Errorf("after creates: %+v %v %v", v, ok, err)
	}
	// The reference is stored as a reference.
	if string(v.Configuration) != `{"foo":"quux","bar":2,"key":"$API_KEY"}` {
		t.Errorf("stored = %s", v.Configuration)
	}
	if _, _, err := svc.Get(ctx, "dummies.dummy", "nothex"); varplane.ErrorCode(err) != varplane.CodeBadRequest {
		t.Errorf("bad epoch: %v", err)
	}
}

func TestServiceCreateErrors(t *testing.T) {
	svc, _ := newService(t)
	tests := []struct {
		name      string
		component string
		conf      string
		wantCode  varplane.Code
		wantPath  string
		wantIssue string
	}{
		{"unknown component", "dummies.nope", `{}`, CodeUnknownComponent, "", ""},
		{"wrong type", "dummies.dummy", `{"foo":1}`, CodeInvalidConfiguration, "/foo", "document.type"},
		{"missing required", "alpha.bare", `{}`, CodeInvalidConfiguration, "/n", "document.required"},
		{"secret where a number goes, and a wrong type beside it", "dummies.dummy", `{"bar":"$BAR","foo":1}`, CodeInvalidConfiguration, "/foo", "document.type"},
		{"number beyond 2^53", "alpha.bare", `{"n":9007199254740993}`, CodeInvalidConfiguration, "/n", varplane.IssueNumberPrecision},
		{"not JSON", "alpha.bare", `{`, CodeInvalidConfiguration, "", varplane.IssueSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := svc.Create(context.Background(), CreateRequest{Component: tt.component, Configuration: json.RawMessage(tt.conf), Originator: "x"})
			if got := varplane.ErrorCode(err); got != tt.wantCode {
				t.Fatalf("code = %s, want %s (%v)", got, tt.wantCode, err)
			}
			if tt.wantCode == CodeUnknownComponent && !errors.Is(err, ErrUnknownComponent) {
				t.Error("errors.Is(ErrUnknownComponent) is false")
			}
			if tt.wantIssue == "" {
				return
			}
			var ve *varplane.Error
			errors.As(err, &ve)
			if len(ve.Issues) == 0 || ve.Issues[0].Path != tt.wantPath || ve.Issues[0].Code != tt.wantIssue {
				t.Errorf("issues = %+v, want %s at %q", ve.Issues, tt.wantIssue, tt.wantPath)
			}
		})
	}
	// Nothing was stored.
	if v, ok, _ := svc.Get(context.Background(), "alpha.bare", ""); ok {
		t.Errorf("an invalid create was stored: %+v", v)
	}
}

func TestServiceEpochs(t *testing.T) {
	svc, eng := newService(t)
	ctx := context.Background()
	oldEpoch := svc.Deployment().Components["dummies.dummy"].Epoch
	mustCreate(t, svc, "dummies.dummy", `{"foo":"old"}`, "a")

	// A new deployment changes the schema: a new epoch over the same store.
	m, err := ParseManifest("m.yaml", []byte("name: dummy\nnamespace: dummies\nconfiguration:\n  schema: {type: object, properties: {foo: {type: string}, baz: {type: boolean}}}\n  defaults: {foo: new}\n"))
	if err != nil {
		t.Fatal(err)
	}
	dep, err := NewDeployment([]*Manifest{m}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	next, err := NewService(eng, dep)
	if err != nil {
		t.Fatal(err)
	}
	if m.Epoch == oldEpoch {
		t.Fatal("schema change kept the epoch")
	}
	tests := []struct {
		name       string
		epoch      string
		wantOK     bool
		wantConf   string
		wantSchema bool
		wantSource string
	}{
		{"old epoch keeps its latest object, without schema", oldEpoch, true, `{"foo":"old"}`, false, SourceCreated},
		{"deployed epoch falls back to defaults", m.Epoch, true, `{"foo":"new"}`, true, SourceDefaults},
		{"deployed epoch when omitted", "", true, `{"foo":"new"}`, true, SourceDefaults},
		{"unknown epoch has none", "0000000000000000000000000000000000000000000000000000000000000000", false, "", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, ok, err := next.Get(ctx, "dummies.dummy", tt.epoch)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.wantOK || string(v.Configuration) != tt.wantConf || (v.Schema != nil) != tt.wantSchema || v.Source != tt.wantSource {
				t.Errorf("Get = %+v %v", v, ok)
			}
		})
	}
	// Creates go to the deployed epoch; the old epoch's object stays.
	res := mustCreate(t, next, "dummies.dummy", `{"baz":true}`, "b")
	if res.Epoch != m.Epoch || res.Created != 1 {
		t.Errorf("create in the new epoch = %+v", res)
	}
	got, err := next.Fetch(ctx, []Pair{{"dummies.dummy", oldEpoch}, {"dummies.dummy", m.Epoch}, {"alpha.bare", oldEpoch}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Fetched{
		{"dummies.dummy", oldEpoch, json.RawMessage(`{"foo":"old"}`), 1},
		{"dummies.dummy", m.Epoch, json.RawMessage(`{"baz":true}`), 1},
		{"alpha.bare", oldEpoch, json.RawMessage(`null`), 0},
	}
	for i := range want {
		if got[i].Component != want[i].Component || got[i].Epoch != want[i].Epoch || string(got[i].Configuration) != string(want[i].Configuration) || got[i].Created != want[i].Created {
			t.Errorf("fetch[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestServiceList(t *testing.T) {
	svc, _ := newService(t)
	ctx := context.Background()
	list, err := svc.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Component != "alpha.bare" || list[1].Component != "dummies.dummy" {
		t.Fatalf("list = %+v", list)
	}
	if string(list[0].Configuration) != "{}" || list[0].Source != "" || list[0].Schema == nil {
		t.Errorf("nothing lists {}: %+v", list[0])
	}
	if list[1].Source != SourceDefaults {
		t.Errorf("defaults: %+v", list[1])
	}
	mustCreate(t, svc, "alpha.bare", `{"n":3}`, "a")
	list, _ = svc.List(ctx)
	if string(list[0].Configuration) != `{"n":3}` || list[0].Source != SourceCreated || list[0].Created != 1 {
		t.Errorf("after create: %+v", list[0])
	}
}

func TestServiceCreatedEvent(t *testing.T) {
	svc, eng := newService(t)
	var mu sync.Mutex
	var got []CreatedEvent
	unsub := svc.OnCreated(func(ev CreatedEvent) { mu.Lock(); got = append(got, ev); mu.Unlock() })
	defer unsub()
	res := mustCreate(t, svc, "alpha.bare", `{"n":7}`, "carol")
	mu.Lock()
	if len(got) != 1 {
		t.Fatalf("events = %+v", got)
	}
	ev := got[0]
	mu.Unlock()
	want := CreatedEvent{Component: "alpha.bare", Epoch: res.Epoch, Configuration: json.RawMessage(`{"n":7}`), Originator: "carol", ID: res.ID, Created: 1}
	if ev.Component != want.Component || ev.Epoch != want.Epoch || string(ev.Configuration) != string(want.Configuration) || ev.Originator != want.Originator || ev.ID != want.ID || ev.Created != want.Created {
		t.Errorf("event = %+v, want %+v", ev, want)
	}
	// History and rollback come from the core: the scope has both creates,
	// and a rollback is one more created event at the next generation.
	mustCreate(t, svc, "alpha.bare", `{"n":8}`, "carol")
	scope := Scope("alpha.bare", res.Epoch)
	hist, err := eng.History(context.Background(), scope)
	if err != nil || len(hist) != 4 {
		t.Fatalf("history = %d events, %v", len(hist), err)
	}
	if _, err := eng.Rollback(context.Background(), varplane.RollbackRequest{Scope: scope, ExpectedGeneration: 2, Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	v, _, _ := svc.Get(context.Background(), "alpha.bare", "")
	if string(v.Configuration) != `{"n":7}` || v.Created != 3 {
		t.Errorf("after rollback = %+v", v)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || got[2].Created != 3 || got[2].Originator != "ops" {
		t.Errorf("rollback event = %+v", got)
	}
}

func TestServiceConcurrentCreates(t *testing.T) {
	svc, _ := newService(t)
	const n = 8
	var wg sync.WaitGroup
	created := make([]uint64, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := svc.Create(context.Background(), CreateRequest{Component: "alpha.bare", Configuration: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i%3)), Originator: "x"})
			created[i], errs[i] = res.Created, err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	sort.Slice(created, func(i, j int) bool { return created[i] < created[j] })
	for i, c := range created {
		if c != uint64(i+1) {
			t.Fatalf("created = %v, want 1..%d each once", created, n)
		}
	}
}

// TestOwnedScopes: with config.Owner given to the engine, only the values
// service writes configuration scopes; every other writer is refused
// scope-owned and nothing is stored, and other scopes stay writable.
func TestOwnedScopes(t *testing.T) {
	ctx := context.Background()
	svc, eng := newService(t, Owner)
	epoch := svc.Deployment().Components["alpha.bare"].Epoch
	scope := Scope("alpha.bare", epoch)
	isOwned := func(err error) bool {
		var ve *varplane.Error
		return errors.As(err, &ve) && ve.Code == varplane.CodeScopeOwned
	}
	// The schema requires an integer n; around the service, a string.
	if _, err := eng.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: scope, Document: json.RawMessage(`{"n":"x"}`), Actor: "mallory"}); !isOwned(err) {
		t.Fatalf("CreateRevision around the service = %v, want scope-owned", err)
	}
	if _, err := eng.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: scope, Document: json.RawMessage(`{"n":"x"}`), Actor: "mallory", Owner: "someone else"}); !isOwned(err) {
		t.Fatalf("CreateRevision as another owner = %v, want scope-owned", err)
	}
	rev := varplane.Revision("sha256:" + strings.Repeat("0", 64))
	if _, err := eng.Activate(ctx, varplane.ActivateRequest{Scope: scope, Revision: rev, Actor: "mallory"}); !isOwned(err) {
		t.Fatalf("Activate = %v, want scope-owned", err)
	}
	res := mustCreate(t, svc, "alpha.bare", `{"n":1}`, "ops")
	if _, err := eng.Deactivate(ctx, varplane.DeactivateRequest{Scope: scope, ExpectedGeneration: varplane.Generation(res.Created), Actor: "mallory"}); !isOwned(err) {
		t.Fatalf("Deactivate = %v, want scope-owned", err)
	}
	if _, err := eng.Rollback(ctx, varplane.RollbackRequest{Scope: scope, ExpectedGeneration: varplane.Generation(res.Created), Actor: "mallory"}); !isOwned(err) {
		t.Fatalf("Rollback = %v, want scope-owned", err)
	}
	// The service's own writes pass, and its schema still applies.
	if _, err := svc.Create(ctx, CreateRequest{Component: "alpha.bare", Configuration: json.RawMessage(`{"n":"x"}`), Originator: "ops"}); varplane.ErrorCode(err) != CodeInvalidConfiguration {
		t.Fatalf("invalid create = %v", err)
	}
	v, ok, err := svc.Get(ctx, "alpha.bare", "")
	if err != nil || !ok || string(v.Configuration) != `{"n":1}` || v.Created != res.Created || v.Originator != "ops" {
		t.Fatalf("after the refused writes: %+v %v %v", v, ok, err)
	}
	// Only configuration scopes are owned.
	for s, want := range map[varplane.Scope]bool{
		scope:                            true,
		Scope("x.y", epoch):              true,
		"alpha.bare":                     false,
		"alpha.bare@short":               false,
		"alpha@" + varplane.Scope(epoch): false,
	} {
		if got := Owner.Owns(s); got != want {
			t.Errorf("Owner.Owns(%s) = %v, want %v", s, got, want)
		}
	}
	if _, err := eng.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: "alpha.bare", Document: json.RawMessage(`{}`), Actor: "x"}); err != nil {
		t.Fatalf("a scope of no owner: %v", err)
	}
}
