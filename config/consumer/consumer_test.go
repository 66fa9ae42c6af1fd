package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/config/secret"
)

// fakeSource serves values[component] (null when absent) with created 7,
// recording every call.
type fakeSource struct {
	mu       sync.Mutex
	values   map[string]string
	created  uint64
	calls    [][]config.Pair
	onFetch  func()
	failures int // calls to fail before answering
}

func (f *fakeSource) Fetch(_ context.Context, pairs []config.Pair) ([]config.Fetched, error) {
	if f.onFetch != nil {
		f.onFetch()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, append([]config.Pair(nil), pairs...))
	if f.failures > 0 {
		f.failures--
		return nil, errors.New("unreachable")
	}
	out := make([]config.Fetched, 0, len(pairs))
	for _, p := range pairs {
		v, ok := f.values[p.Component]
		r := config.Fetched{Component: p.Component, Epoch: p.Epoch, Configuration: json.RawMessage("null")}
		if ok {
			r.Configuration, r.Created = json.RawMessage(v), f.created
		}
		out = append(out, r)
	}
	return out, nil
}

func (f *fakeSource) set(component, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.values == nil {
		f.values = map[string]string{}
	}
	f.values[component] = value
}

func (f *fakeSource) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// fakeSubscriber hands events to the client when the test says so.
type fakeSubscriber struct {
	mu         sync.Mutex
	onCreated  func(config.CreatedEvent)
	subscribed bool
}

func (f *fakeSubscriber) Subscribe(_ context.Context, on func(config.CreatedEvent), _ func()) (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onCreated, f.subscribed = on, true
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.subscribed = false
	}, nil
}

func (f *fakeSubscriber) isSubscribed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.subscribed
}

func (f *fakeSubscriber) send(ev config.CreatedEvent) {
	f.mu.Lock()
	on := f.onCreated
	f.mu.Unlock()
	on(ev)
}

func quietLogger(buf *bytes.Buffer) *slog.Logger {
	if buf == nil {
		buf = &bytes.Buffer{}
	}
	return slog.New(slog.NewJSONHandler(&lockedWriter{w: buf}, nil))
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func newClient(t *testing.T, src Source, sub Subscriber, log *slog.Logger) *Client {
	t.Helper()
	if log == nil {
		log = quietLogger(nil)
	}
	c := NewClient(src, sub, ClientOptions{Base: time.Millisecond, Max: 2 * time.Millisecond, Window: 5 * time.Millisecond, Logger: log})
	t.Cleanup(c.Close)
	return c
}

const manifestYAML = `
name: dummy
namespace: dummies
configuration:
  schema:
    type: object
    properties:
      foo: {type: string, default: from-schema}
      bar:
        type: object
        properties:
          baz: {type: string}
      list: {type: array}
      key: {type: string}
      n: {type: number}
  defaults:
    bar: {baz: quux}
    list: [1, 2]
`

func manifest(t *testing.T) *config.Manifest {
	t.Helper()
	m, err := config.ParseManifest("manifest.yaml", []byte(manifestYAML))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestClientBatchesOneTick(t *testing.T) {
	src := &fakeSource{created: 7}
	src.set("a.one", `{"foo":1}`)
	src.set("a.two", `{"foo":2}`)
	c := newClient(t, src, nil, nil)
	type result struct {
		u   Update
		err error
	}
	reqs := []config.Pair{{Component: "a.one", Epoch: "e1"}, {Component: "a.two", Epoch: "e2"}, {Component: "a.one", Epoch: "e1"}}
	results := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, p := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u, err := c.Fetch(context.Background(), p.Component, p.Epoch)
			results[i] = result{u, err}
		}()
	}
	wg.Wait()
	for i, want := range []string{`{"foo":1}`, `{"foo":2}`, `{"foo":1}`} {
		if results[i].err != nil || string(results[i].u.Configuration) != want || results[i].u.Created != 7 {
			t.Errorf("fetch %d = %+v", i, results[i])
		}
	}
	if got := src.callCount(); got != 1 {
		t.Fatalf("source calls = %d, want 1", got)
	}
	if got := len(src.calls[0]); got != 2 {
		t.Errorf("pairs in the call = %v, want the two distinct pairs", src.calls[0])
	}
}

func TestClientRetriesUntilServedAndLogsEveryFifth(t *testing.T) {
	var logs bytes.Buffer
	src := &fakeSource{created: 3, failures: 2}
	src.onFetch = func() {
		if src.callCount() == 11 { // served on the twelfth call
			src.set("a.one", `{"ok":true}`)
		}
	}
	c := newClient(t, src, nil, quietLogger(&logs))
	u, err := c.Fetch(context.Background(), "a.one", "e1")
	if err != nil || string(u.Configuration) != `{"ok":true}` {
		t.Fatalf("Fetch = %+v, %v", u, err)
	}
	if got := src.callCount(); got != 12 {
		t.Errorf("calls = %d, want 12", got)
	}
	var attempts []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Msg     string `json:"msg"`
			Attempt int    `json:"attempt"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && strings.Contains(rec.Msg, "not served") {
			attempts = append(attempts, fmt.Sprint(rec.Attempt))
		}
	}
	if got := strings.Join(attempts, ","); got != "1,6,11" {
		t.Errorf("logged attempts = %s, want 1,6,11", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Fetch(ctx, "a.none", "e1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Fetch of nothing = %v, want the context's error", err)
	}
}

func TestOpenServedWholeAndFollows(t *testing.T) {
	m := manifest(t)
	src := &fakeSource{created: 5}
	src.set("dummies.dummy", `{"foo":"served"}`)
	sub := &fakeSubscriber{}
	src.onFetch = func() {
		if !sub.isSubscribed() {
			t.Error("fetched before subscribing")
		}
	}
	var logs bytes.Buffer
	c := newClient(t, src, sub, quietLogger(&logs))
	updates := make(chan any, 10)
	conf, err := Open(context.Background(), c, m, Options{LookupEnv: env(nil), Logger: quietLogger(&logs), OnUpdate: func(v any) { updates <- v }})
	if err != nil {
		t.Fatal(err)
	}
	defer conf.Close()
	if got := string(mustJSON(t, conf.Value())); got != `{"foo":"served"}` {
		t.Errorf("value = %s: neither manifest defaults nor schema defaults may be filled", got)
	}
	if src.calls[0][0].Epoch != m.Epoch {
		t.Errorf("fetched epoch %s, want %s", src.calls[0][0].Epoch, m.Epoch)
	}
	send := func(conf string, created uint64) {
		sub.send(config.CreatedEvent{Component: "dummies.dummy", Epoch: m.Epoch, Configuration: json.RawMessage(conf), Created: created})
	}
	wait := func(want string) {
		t.Helper()
		select {
		case v := <-updates:
			if got := string(mustJSON(t, v)); got != want {
				t.Errorf("update = %s, want %s", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no update to %s", want)
		}
	}
	send(`{"foo":"updated"}`, 6)
	wait(`{"foo":"updated"}`)
	send(`{"foo":"stale"}`, 6)
	send(`{"foo":"older"}`, 4)
	send(`{"foo":{"nested":true}}`, 7) // does not fit: kept the previous
	send(`{"foo":"other-epoch"}`, 99)  // wrong epoch below: not ours
	sub.send(config.CreatedEvent{Component: "dummies.dummy", Epoch: strings.Repeat("0", 64), Configuration: json.RawMessage(`{"foo":"x"}`), Created: 100})
	sub.send(config.CreatedEvent{Component: "dummies.other", Epoch: m.Epoch, Configuration: json.RawMessage(`{"foo":"x"}`), Created: 100})
	send(`{"foo":"latest"}`, 8)
	// 99 for our pair was newer and fits: it is taken; 8 then is older.
	wait(`{"foo":"other-epoch"}`)
	time.Sleep(20 * time.Millisecond)
	if got, _ := conf.Get("foo"); got != "other-epoch" || conf.Created() != 99 {
		t.Errorf("held = %v at %d", got, conf.Created())
	}
	if !strings.Contains(logs.String(), "rejected") {
		t.Error("the non-fitting value was not logged")
	}
}

func TestOpenNewerOnlyFromTheStart(t *testing.T) {
	m := manifest(t)
	src := &fakeSource{created: 4}
	src.set("dummies.dummy", `{"foo":"fetched"}`)
	sub := &fakeSubscriber{}
	// An object created while the fetch is in flight arrives first.
	src.onFetch = func() {
		sub.send(config.CreatedEvent{Component: "dummies.dummy", Epoch: m.Epoch, Configuration: json.RawMessage(`{"foo":"pushed"}`), Created: 5})
		time.Sleep(20 * time.Millisecond)
	}
	c := newClient(t, src, sub, nil)
	conf, err := Open(context.Background(), c, m, Options{LookupEnv: env(nil), Logger: quietLogger(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer conf.Close()
	if got, _ := conf.Get("foo"); got != "pushed" || conf.Created() != 5 {
		t.Errorf("held %v at %d, want the pushed object at 5", got, conf.Created())
	}
}

func TestOpenFirstValueRules(t *testing.T) {
	tests := []struct {
		name    string
		served  string
		vars    map[string]string
		wantErr string
		check   func(t *testing.T, c *Configuration)
	}{
		{name: "no coercion", served: `{"n":"1"}`, wantErr: "/n document.type"},
		{name: "not fitting", served: `{"foo":1}`, wantErr: "does not fit its schema"},
		{name: "missing secret", served: `{"key":"$API_KEY"}`, wantErr: "VARPLANE_CONFIGURATION__API_KEY"},
		{name: "secret where a number goes", served: `{"n":"$N"}`, vars: map[string]string{"VARPLANE_CONFIGURATION__N": "7"},
			check: func(t *testing.T, c *Configuration) {
				if n, _ := c.Get("n"); fmt.Sprint(n) != secret.Redacted {
					t.Errorf("n = %#v, want a Secret", n)
				} else if n.(secret.Secret).Unwrap() != "7" {
					t.Errorf("n unwraps to %q", n.(secret.Secret).Unwrap())
				}
			}},
		{name: "secret whose value does not fit", served: `{"n":"$N"}`, vars: map[string]string{"VARPLANE_CONFIGURATION__N": "s3cr3t"}, wantErr: "secret $N"},
		{name: "the reference system's secret variable", served: `{"key":"$API_KEY"}`, vars: map[string]string{"TOA_CONFIGURATION__API_KEY": "k3y"},
			check: func(t *testing.T, c *Configuration) {
				if k, _ := c.Get("key"); k.(secret.Secret).Unwrap() != "k3y" {
					t.Errorf("key = %#v", k)
				}
			}},
		{name: "secret substituted", served: `{"key":"$API_KEY","foo":"$plain"}`, vars: map[string]string{"VARPLANE_CONFIGURATION__API_KEY": "k3y"},
			check: func(t *testing.T, c *Configuration) {
				k, _ := c.Get("key")
				s, ok := k.(secret.Secret)
				if !ok || s.Unwrap() != "k3y" {
					t.Errorf("key = %#v", k)
				}
				if f, _ := c.Get("foo"); f != "$plain" {
					t.Errorf("foo = %#v, want a plain string", f)
				}
				if strings.Contains(fmt.Sprint(c.Value()), "k3y") || strings.Contains(string(mustJSON(t, c.Value())), "k3y") {
					t.Error("the secret leaks through printing")
				}
				if string(c.Raw()) != `{"key":"$API_KEY","foo":"$plain"}` {
					t.Errorf("raw = %s", c.Raw())
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &fakeSource{created: 1}
			src.set("dummies.dummy", tt.served)
			c := newClient(t, src, &fakeSubscriber{}, nil)
			conf, err := Open(context.Background(), c, manifest(t), Options{LookupEnv: env(tt.vars), Logger: quietLogger(nil)})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "s3cr3t") {
					t.Fatalf("err = %v, want %q (and no secret value)", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conf.Close()
			tt.check(t, conf)
		})
	}
}

func TestLocalOverride(t *testing.T) {
	m := manifest(t)
	const variable = "VARPLANE_CONFIGURATION_DUMMIES_DUMMY"
	if got := OverrideVariable("dummies.dummy"); got != variable {
		t.Fatalf("OverrideVariable = %s", got)
	}
	if got := OverrideVariable("my-ns.my-comp"); got != "VARPLANE_CONFIGURATION_MY_NS_MY_COMP" {
		t.Errorf("OverrideVariable with dashes = %s", got)
	}
	tests := []struct {
		name    string
		value   string
		vars    map[string]string
		want    string
		wantErr string
	}{
		{name: "defaults fill missing keys", value: `{"foo":"local"}`, want: `{"bar":{"baz":"quux"},"foo":"local","list":[1,2]}`},
		{name: "empty is the defaults", value: "", want: `{"bar":{"baz":"quux"},"list":[1,2]}`},
		{name: "nested keys filled", value: `{"bar":{"other":1}}`, want: `{"bar":{"baz":"quux","other":1},"list":[1,2]}`},
		{name: "given values win", value: `{"bar":{"baz":"mine"}}`, want: `{"bar":{"baz":"mine"},"list":[1,2]}`},
		{name: "arrays as given", value: `{"list":[9]}`, want: `{"bar":{"baz":"quux"},"list":[9]}`},
		{name: "object over scalar clash", value: `{"bar":"flat"}`, wantErr: "/bar"},
		{name: "root clash", value: `[1]`, wantErr: "the root"},
		{name: "schema applied", value: `{"foo":3}`, wantErr: "does not fit"},
		{name: "not JSON", value: `{foo`, wantErr: "is not JSON"},
		{name: "secrets substituted", value: `{"key":"$K"}`, vars: map[string]string{"VARPLANE_CONFIGURATION__K": "v"}, want: `{"bar":{"baz":"quux"},"key":"<REDACTED>","list":[1,2]}`},
		{name: "missing secret", value: `{"key":"$K"}`, wantErr: "VARPLANE_CONFIGURATION__K"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{variable: tt.value}
			for k, v := range tt.vars {
				vars[k] = v
			}
			conf, err := Open(context.Background(), nil, m, Options{LookupEnv: env(vars), Logger: quietLogger(nil)})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(mustJSON(t, conf.Value())); got != tt.want || !conf.Local() {
				t.Errorf("value = %s, want %s", got, tt.want)
			}
		})
	}
	// The reference system's name for the variable is read too.
	conf, err := Open(context.Background(), nil, m, Options{LookupEnv: env(map[string]string{"TOA_CONFIGURATION_DUMMIES_DUMMY": `{"foo":"toa"}`}), Logger: quietLogger(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := conf.Get("foo"); f != "toa" || !conf.Local() {
		t.Errorf("foo = %v from TOA_CONFIGURATION_DUMMIES_DUMMY", f)
	}
	// Ours wins when both are set.
	conf, err = Open(context.Background(), nil, m, Options{LookupEnv: env(map[string]string{variable: `{"foo":"ours"}`, "TOA_CONFIGURATION_DUMMIES_DUMMY": `{"foo":"toa"}`}), Logger: quietLogger(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := conf.Get("foo"); f != "ours" {
		t.Errorf("foo = %v with both variables set", f)
	}
	// Without the variable and without a client there is nothing to use.
	if _, err := Open(context.Background(), nil, m, Options{LookupEnv: env(nil)}); err == nil {
		t.Error("Open without client or override succeeded")
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(buf.Bytes())
}

// TestVaultTakesSecretVariables: the vault moves every secret variable
// (both prefixes) out of the environment on first use, leaves the others,
// and answers the secrets from memory afterwards.
func TestVaultTakesSecretVariables(t *testing.T) {
	environ := map[string]string{
		"VARPLANE_CONFIGURATION__API_KEY":      "k3y",
		"TOA_CONFIGURATION__OLD":               "o1d",
		"VARPLANE_CONFIGURATION_DUMMIES_DUMMY": `{"foo":1}`, // an override, not a secret
		"HOME":                                 "/home/x",
		"VARPLANE_CONFIGURATION__bad-name":     "kept",
	}
	v := &vault{
		environ: func() []string {
			var out []string
			for k, x := range environ {
				out = append(out, k+"="+x)
			}
			return out
		},
		unset: func(k string) error { delete(environ, k); return nil },
	}
	if val, ok := v.lookup("VARPLANE_CONFIGURATION__API_KEY"); !ok || val != "k3y" {
		t.Fatalf("lookup = %q %v", val, ok)
	}
	if val, ok := v.lookup("TOA_CONFIGURATION__OLD"); !ok || val != "o1d" {
		t.Fatalf("lookup TOA_ = %q %v", val, ok)
	}
	for _, k := range []string{"VARPLANE_CONFIGURATION__API_KEY", "TOA_CONFIGURATION__OLD"} {
		if _, still := environ[k]; still {
			t.Errorf("%s is still in the environment", k)
		}
	}
	for _, k := range []string{"VARPLANE_CONFIGURATION_DUMMIES_DUMMY", "HOME", "VARPLANE_CONFIGURATION__bad-name"} {
		if _, still := environ[k]; !still {
			t.Errorf("%s was taken from the environment", k)
		}
	}
	// A variable set after the first use is not read: the vault was filled once.
	environ["VARPLANE_CONFIGURATION__LATE"] = "l"
	if _, ok := v.lookup("VARPLANE_CONFIGURATION__LATE"); ok {
		t.Error("the vault read the environment again")
	}
}

// TestOpenUnsetsSecretVariables: opened on the process environment, a
// configuration substitutes its secret and the variable is gone from the
// environment afterwards.
func TestOpenUnsetsSecretVariables(t *testing.T) {
	t.Setenv("VARPLANE_CONFIGURATION_DUMMIES_DUMMY", `{"key":"$VAULT_TEST"}`)
	t.Setenv("VARPLANE_CONFIGURATION__VAULT_TEST", "v4lue")
	processVault = &vault{environ: os.Environ, unset: os.Unsetenv}
	conf, err := Open(context.Background(), nil, manifest(t), Options{Logger: quietLogger(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := conf.Get("key"); k.(secret.Secret).Unwrap() != "v4lue" {
		t.Fatalf("key = %#v", k)
	}
	if v, ok := os.LookupEnv("VARPLANE_CONFIGURATION__VAULT_TEST"); ok {
		t.Fatalf("the secret variable is still set (%d bytes)", len(v))
	}
}
