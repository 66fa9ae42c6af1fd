package consumer_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/config/consumer"
	"github.com/varplane/varplane/config/secret"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/syncbuf"
	"github.com/varplane/varplane/store/file"
)

const (
	dummyManifest = `name: dummy
namespace: dummies
configuration:
  schema:
    type: object
    properties:
      foo: {type: string}
      bar: {type: string}
      n: {type: number}
    additionalProperties: false
  defaults:
    foo: bar
    n: 1
`
	otherManifest = `{"name": "other", "namespace": "alpha",
 "configuration": {"schema": {"type": "object", "properties": {"limit": {"type": "integer"}}},
                   "defaults": {"limit": 10}}}`
	contextFile = `configuration:
  resources: null
  dummies.dummy:
    foo: qux
    foo@staging: quux
    foo@production: never
    bar: $BAZ_VALUE
    n: 1
`
	tokens = `ops-token id=ops roles=system:configuration
app-token id=app roles=system:configuration:get
`
)

// world is one running values service over a file store.
type world struct {
	store   *file.Store
	engine  *varplane.Engine
	service *config.Service
	server  *httptest.Server
	fetches atomic.Int64
}

func start(t *testing.T, storePath, deploymentFile, tokenFile string) *world {
	t.Helper()
	ctx := context.Background()
	dep, err := config.LoadDeployment(deploymentFile)
	if err != nil {
		t.Fatal(err)
	}
	grants, err := access.LoadTokenFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	authz, err := access.Scoped(grants)
	if err != nil {
		t.Fatal(err)
	}
	st, err := file.Open(ctx, storePath, file.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{store: st, engine: varplane.NewEngine(st, varplane.Options{})}
	if w.service, err = config.NewService(w.engine, dep); err != nil {
		t.Fatal(err)
	}
	h := httpapi.NewHandler(w.engine, httpapi.Options{Authorizer: authz, Values: w.service, Logger: slog.New(slog.DiscardHandler),
		Stream: httpapi.StreamOptions{Heartbeat: 50 * time.Millisecond}})
	w.server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ":fetch") {
			w.fetches.Add(1)
		}
		h.ServeHTTP(rw, r)
	}))
	return w
}

func (w *world) stop(t *testing.T) {
	t.Helper()
	w.server.CloseClientConnections()
	w.server.Close()
	w.engine.Close()
	if err := w.store.Close(); err != nil {
		t.Fatal(err)
	}
}

func (w *world) post(t *testing.T, component, contentType, body, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", w.server.URL+"/configuration/values/"+component+"/", strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", "Token "+token)
	resp, err := w.server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// tap remembers the client's event callback so the test can deliver a
// duplicate or crossed event, as a network can.
type tap struct {
	consumer.Subscriber
	mu sync.Mutex
	on func(config.CreatedEvent)
}

func (t *tap) Subscribe(ctx context.Context, on func(config.CreatedEvent), resync func()) (func(), error) {
	t.mu.Lock()
	t.on = on
	t.mu.Unlock()
	return t.Subscriber.Subscribe(ctx, on, resync)
}

func (t *tap) deliver(ev config.CreatedEvent) {
	t.mu.Lock()
	on := t.on
	t.mu.Unlock()
	on(ev)
}

func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, data string) string {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dummyFile := write("components/dummy/manifest.toa.yaml", dummyManifest)
	write("components/other/manifest.json", otherManifest)
	contextPath := write("context.toa.yaml", contextFile)
	tokenFile := write("tokens", tokens)

	// varplane config deploy --manifests components --annotation context.toa.yaml --environment staging
	decl, err := config.Deploy(filepath.Join(dir, "components"), contextPath, "staging")
	if err != nil {
		t.Fatal(err)
	}
	deploymentFile := write("deployment.json", string(decl))
	storePath := filepath.Join(dir, "data", "varplane.log")

	w := start(t, storePath, deploymentFile, tokenFile)

	dummy, err := config.LoadManifest(dummyFile)
	if err != nil {
		t.Fatal(err)
	}
	other, err := config.ParseManifest("manifest.json", []byte(otherManifest))
	if err != nil {
		t.Fatal(err)
	}
	env := func(k string) (string, bool) {
		if k == secret.EnvName("BAZ_VALUE") {
			return "s3cr3t", true
		}
		return "", false
	}

	// One client for the process, shared by both components.
	logs := &syncbuf.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	remote := &consumer.HTTP{BaseURL: w.server.URL, Token: "app-token", Client: w.server.Client(), Logger: logger, ReconnectBase: 10 * time.Millisecond}
	feed := &tap{Subscriber: remote}
	client := consumer.NewClient(remote, feed, consumer.ClientOptions{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond, Window: 50 * time.Millisecond, Logger: logger})
	defer client.Close()
	// Both components connect the shared subscription first, so their
	// fetches fall in one tick.
	if err := client.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}

	updates := make(chan any, 16)
	var dummyConf, otherConf *consumer.Configuration
	var dummyErr, otherErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		dummyConf, dummyErr = consumer.Open(context.Background(), client, dummy, consumer.Options{LookupEnv: env, Logger: logger, OnUpdate: func(v any) { updates <- v }})
	}()
	go func() {
		defer wg.Done()
		otherConf, otherErr = consumer.Open(context.Background(), client, other, consumer.Options{LookupEnv: env, Logger: logger})
	}()
	wg.Wait()
	if dummyErr != nil || otherErr != nil {
		t.Fatal(dummyErr, otherErr)
	}
	defer dummyConf.Close()
	defer otherConf.Close()
	if got := w.fetches.Load(); got != 1 {
		t.Errorf("fetch calls for two components = %d, want 1", got)
	}

	// The deployed defaults for staging: the tagged key, the secret
	// substituted, created 0.
	if foo, _ := dummyConf.Get("foo"); foo != "quux" {
		t.Errorf("foo = %v, want the staging value", foo)
	}
	bar, _ := dummyConf.Get("bar")
	if s, ok := bar.(secret.Secret); !ok || s.Unwrap() != "s3cr3t" {
		t.Errorf("bar = %#v, want the substituted Secret", bar)
	}
	if dummyConf.Created() != 0 || !strings.Contains(string(dummyConf.Raw()), `"$BAZ_VALUE"`) {
		t.Errorf("raw = %s at %d", dummyConf.Raw(), dummyConf.Created())
	}
	if limit, _ := otherConf.Get("limit"); limit != json.Number("10") {
		t.Errorf("limit = %v", limit)
	}

	waitFor := func(want string) {
		t.Helper()
		select {
		case v := <-updates:
			if got, _ := v.(map[string]any)["foo"]; got != want {
				t.Fatalf("update foo = %v, want %s", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no update with foo=%s", want)
		}
	}

	// A create through HTTP, in YAML, by the operator.
	status, body := w.post(t, "dummies.dummy", "application/yaml", "configuration:\n  foo: live\n  bar: $BAZ_VALUE\n  n: 2\n", "ops-token")
	if status != http.StatusCreated {
		t.Fatalf("create = %d %s", status, body)
	}
	var created struct{ ID, Epoch string }
	if err := json.Unmarshal(body, &created); err != nil || created.Epoch != dummy.Epoch || created.ID == "" {
		t.Fatalf("create answer = %s", body)
	}
	waitFor("live")
	if dummyConf.Created() != 1 {
		t.Errorf("created = %d, want 1", dummyConf.Created())
	}
	if status, _ := w.post(t, "dummies.dummy", "application/json", `{"configuration":{"foo":1}}`, "ops-token"); status != http.StatusUnprocessableEntity {
		t.Errorf("invalid create = %d", status)
	}
	if status, _ := w.post(t, "dummies.dummy", "application/json", `{"configuration":{"foo":"x"}}`, "app-token"); status != http.StatusForbidden {
		t.Errorf("create without the role = %d", status)
	}

	// A stale delivery (a duplicate of created 1 with other content, as a
	// crossed stream could bring) is ignored.
	feed.deliver(config.CreatedEvent{Component: "dummies.dummy", Epoch: dummy.Epoch, Configuration: json.RawMessage(`{"foo":"stale"}`), Created: 1})
	// A value that does not fit the component's schema, written around the
	// values service through the core API, is logged and the previous kept.
	scope := config.Scope("dummies.dummy", dummy.Epoch)
	rev, err := w.engine.CreateRevision(context.Background(), varplane.CreateRevisionRequest{Scope: scope, Document: json.RawMessage(`{"foo":5}`), Actor: "intruder"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.engine.Activate(context.Background(), varplane.ActivateRequest{Scope: scope, Revision: rev.Revision, ExpectedGeneration: 1, Actor: "intruder"}); err != nil {
		t.Fatal(err)
	}
	// The next valid create is taken.
	if status, body := w.post(t, "dummies.dummy", "application/json", `{"configuration":{"foo":"final","n":3}}`, "ops-token"); status != http.StatusCreated {
		t.Fatalf("create = %d %s", status, body)
	}
	waitFor("final")
	if dummyConf.Created() != 3 {
		t.Errorf("created = %d, want 3", dummyConf.Created())
	}
	if !strings.Contains(logs.String(), "configuration value rejected") {
		t.Error("the non-fitting value was not logged")
	}
	// The other component was not touched.
	if limit, _ := otherConf.Get("limit"); limit != json.Number("10") || otherConf.Created() != 0 {
		t.Errorf("other = %v at %d", limit, otherConf.Created())
	}

	// Restart: close everything, reopen the same log.
	dummyConf.Close()
	otherConf.Close()
	client.Close()
	w.stop(t)
	w = start(t, storePath, deploymentFile, tokenFile)
	defer w.stop(t)

	req, _ := http.NewRequest("GET", w.server.URL+"/configuration/values/dummies.dummy/", nil)
	req.Header.Set("Authorization", "Token app-token")
	resp, err := w.server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(data), `"configuration":{"foo":"final","n":3}`) {
		t.Errorf("after restart get = %d %s", resp.StatusCode, data)
	}
	v, ok, err := w.service.Get(context.Background(), "dummies.dummy", "")
	if err != nil || !ok || v.Created != 3 || v.Originator != "ops" {
		t.Errorf("after restart = %+v %v %v", v, ok, err)
	}
	hist, err := w.engine.History(context.Background(), scope)
	if err != nil || len(hist) < 6 {
		t.Errorf("history after restart = %d events, %v", len(hist), err)
	}

	remote = &consumer.HTTP{BaseURL: w.server.URL, Token: "app-token", Client: w.server.Client(), Logger: logger}
	client = consumer.NewClient(remote, remote, consumer.ClientOptions{Logger: logger})
	defer client.Close()
	again, err := consumer.Open(context.Background(), client, dummy, consumer.Options{LookupEnv: env, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if foo, _ := again.Get("foo"); foo != "final" || again.Created() != 3 {
		t.Errorf("restarted consumer holds %v at %d", foo, again.Created())
	}
	// created keeps increasing across the restart.
	status, body = w.post(t, "dummies.dummy", "application/json", `{"configuration":{"foo":"after"}}`, "ops-token")
	if status != http.StatusCreated {
		t.Fatalf("create after restart = %d %s", status, body)
	}
	if v, _, _ := w.service.Get(context.Background(), "dummies.dummy", ""); v.Created != 4 {
		t.Errorf("created after restart = %d, want 4", v.Created)
	}
	deadline := time.Now().Add(10 * time.Second)
	for again.Created() != 4 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if foo, _ := again.Get("foo"); foo != "after" {
		t.Errorf("restarted consumer did not follow: %v", foo)
	}
}
