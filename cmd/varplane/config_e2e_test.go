package main

// End-to-end tests of component configuration through the real binary:
// `varplane config deploy`, `varplane config conceal`, and `varplane serve
// --components` serving the values service next to the var API.

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const dummyManifest = `name: dummy
namespace: dummies
configuration:
  schema:
    type: object
    properties:
      foo: {type: string}
      bar: {type: string}
    required: [foo]
  defaults:
    foo: hello
`

const otherManifest = `{"name": "other", "configuration": {"schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}}`

const dummyAnnotation = `configuration:
  dummies.dummy:
    foo: qux
    foo@staging: quux
    bar: $BAZ_VALUE
`

// writeFiles writes name → content under dir, creating directories.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// deployFixture writes the manifests and the annotation, runs `varplane
// config deploy --environment staging`, checks its declaration and returns
// the path of the deployment file and the epoch of dummies.dummy.
func deployFixture(t *testing.T) (deployment, epoch string) {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"components/dummy/manifest.toa.yaml": dummyManifest,
		"components/other/manifest.json":     otherManifest,
		"components/README.yaml":             "not: a manifest of configuration\n",
		"context.toa.yaml":                   dummyAnnotation,
	})
	r := runCLI(t, nil, "", "config", "deploy",
		"--manifests", filepath.Join(dir, "components"),
		"--annotation", filepath.Join(dir, "context.toa.yaml"),
		"--environment", "staging")
	if r.code != ExitOK {
		t.Fatalf("config deploy: exit %d\n%s", r.code, r.stderr)
	}
	var dep struct {
		Environment string `json:"environment"`
		Components  map[string]struct {
			Epoch    string          `json:"epoch"`
			Schema   json.RawMessage `json:"schema"`
			Defaults map[string]any  `json:"defaults"`
		} `json:"components"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &dep); err != nil {
		t.Fatalf("config deploy printed no JSON: %v\n%s", err, r.stdout)
	}
	if dep.Environment != "staging" || len(dep.Components) != 2 {
		t.Fatalf("deployment = %s", r.stdout)
	}
	d := dep.Components["dummies.dummy"]
	if len(d.Epoch) != 64 || d.Defaults["foo"] != "quux" || d.Defaults["bar"] != "$BAZ_VALUE" {
		t.Fatalf("dummies.dummy = %+v, want the staging value quux and the reference $BAZ_VALUE", d)
	}
	if o := dep.Components["default.other"]; o.Epoch == "" || o.Defaults != nil {
		t.Fatalf("default.other = %+v, want an epoch and no defaults", o)
	}
	deployment = filepath.Join(dir, "deployment.json")
	if err := os.WriteFile(deployment, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	return deployment, d.Epoch
}

// send is one request with an explicit Content-Type (call always sends
// JSON); header pairs follow as name, value.
func send(t *testing.T, method, target, contentType, body string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: data}
}

func TestConfigDeployErrors(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"components/dummy/manifest.yaml": dummyManifest,
		"unknown.yaml":                   "configuration:\n  dummies.nope: {foo: x}\n",
		"misfit.yaml":                    "configuration:\n  dummies.dummy:\n    foo: ok\n    foo@staging: 1\n",
		"broken/manifest.yaml":           "name: broken\nconfiguration:\n  schema: {type: object}\n  extra: 1\n",
	})
	manifests := filepath.Join(dir, "components")
	tests := []struct {
		name string
		args []string
		code int
		want []string // in stderr
	}{
		{"unknown component", []string{"--manifests", manifests, "--annotation", filepath.Join(dir, "unknown.yaml")}, ExitRefused, []string{"unknown.yaml", "/configuration/dummies.nope"}},
		{"tagged value misfits", []string{"--manifests", manifests, "--annotation", filepath.Join(dir, "misfit.yaml"), "--environment", "staging"}, ExitRefused, []string{"misfit.yaml", "/configuration/dummies.dummy/foo"}},
		{"invalid manifest", []string{"--manifests", filepath.Join(dir, "broken")}, ExitRefused, []string{"manifest.yaml", "/configuration"}},
		{"bad environment", []string{"--manifests", manifests, "--environment", "no spaces"}, ExitRefused, []string{"environment"}},
		{"no manifests flag", nil, ExitUsage, []string{"--manifests"}},
		{"missing annotation", []string{"--manifests", manifests, "--annotation", filepath.Join(dir, "absent.yaml")}, ExitUsage, []string{"--annotation", "absent.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, nil, "", append([]string{"config", "deploy"}, tt.args...)...)
			if r.code != tt.code {
				t.Fatalf("exit %d, want %d\nstderr: %s", r.code, tt.code, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout = %q, want nothing on failure", r.stdout)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q does not name %q", r.stderr, w)
				}
			}
		})
	}
	// The misfitting value is a staging one: without the environment the
	// tag is dropped and the deployment is fine.
	if r := runCLI(t, nil, "", "config", "deploy", "--manifests", manifests, "--annotation", filepath.Join(dir, "misfit.yaml")); r.code != ExitOK {
		t.Fatalf("deploy without environment: exit %d\n%s", r.code, r.stderr)
	}
}

func TestConfigConceal(t *testing.T) {
	deployment, _ := deployFixture(t)
	dir := t.TempDir()
	envFile, k8s := filepath.Join(dir, "configuration.env"), filepath.Join(dir, "secret.yaml")

	// The deployment references $BAZ_VALUE: leaving it out is refused and
	// writes nothing.
	r := runCLI(t, nil, "", "config", "conceal", "--components", deployment, "--env-file", envFile, "OTHER=x")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "BAZ_VALUE") {
		t.Fatalf("conceal without BAZ_VALUE: %+v", r)
	}
	if _, err := os.Stat(envFile); !os.IsNotExist(err) {
		t.Fatalf("a refused conceal wrote %s (%v)", envFile, err)
	}

	// Flags may follow the assignments, as the docs write it.
	r = runCLI(t, nil, "", "config", "conceal", "BAZ_VALUE=s3cr3t", "--components", deployment, "--namespace", "shop", "--env-file", envFile, "--kubernetes", k8s)
	if r.code != ExitOK {
		t.Fatalf("conceal: %+v", r)
	}
	if strings.Contains(r.stdout+r.stderr, "s3cr3t") {
		t.Fatalf("conceal printed the secret: %+v", r)
	}
	env, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(env), "VARPLANE_CONFIGURATION__BAZ_VALUE=s3cr3t\n"; got != want {
		t.Fatalf("env file = %q, want %q", got, want)
	}
	secretYAML, err := os.ReadFile(k8s)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"kind: Secret", "name: configuration", "namespace: shop", "VARPLANE_CONFIGURATION__BAZ_VALUE: czNjcjN0"} {
		if !strings.Contains(string(secretYAML), w) {
			t.Errorf("kubernetes manifest lacks %q:\n%s", w, secretYAML)
		}
	}
	for _, p := range []string{envFile, k8s} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", p, st.Mode().Perm(), err)
		}
	}

	// Without an output flag the env file goes to stdout.
	r = runCLI(t, nil, "", "config", "conceal", "B=2", "A=1")
	if r.code != ExitOK || r.stdout != "VARPLANE_CONFIGURATION__A=1\nVARPLANE_CONFIGURATION__B=2\n" {
		t.Fatalf("conceal to stdout: %+v", r)
	}
	for _, args := range [][]string{{}, {"lower=1"}, {"NOVALUE"}, {"A=1", "A=2"}} {
		if r := runCLI(t, nil, "", append([]string{"config", "conceal"}, args...)...); r.code != ExitUsage {
			t.Errorf("conceal %q: exit %d, want %d\n%s", args, r.code, ExitUsage, r.stderr)
		}
	}
}

// TestServeComponents drives the values service of `serve --components`
// with no token file (everyone is anonymous with every role), and checks
// that a restart on the same file store keeps serving what was created.
func TestServeComponents(t *testing.T) {
	deployment, epoch := deployFixture(t)
	logPath := filepath.Join(t.TempDir(), "var-log.jsonl")
	// --ui=false: the service's own page at /.configuration (with the
	// console on it redirects; TestServeConfigurationPage).
	s := startServer(t, "--store", "file:"+logPath, "--components", deployment, "--ui=false")
	values := s.URL + "/configuration/values/"

	// Before any create the deployed defaults are served, references kept.
	m := expect(t, call(t, "GET", values+"dummies.dummy/", nil), 200, "")
	if m["epoch"] != epoch || m["schema"] == nil {
		t.Fatalf("get defaults = %v", m)
	}
	if got, _ := json.Marshal(m["configuration"]); string(got) != `{"bar":"$BAZ_VALUE","foo":"quux"}` {
		t.Fatalf("defaults = %s", got)
	}
	expect(t, call(t, "GET", values+"default.other/", nil), 404, "")

	created := expect(t, send(t, "POST", values+"dummies.dummy/", "application/yaml", "configuration:\n  foo: live\n  bar: $BAZ_VALUE\n"), 201, "")
	if created["epoch"] != epoch || str(t, created, "id") == "" {
		t.Fatalf("create = %v", created)
	}
	m = expect(t, call(t, "GET", values+"dummies.dummy/", nil), 200, "")
	if got, _ := json.Marshal(m["configuration"]); string(got) != `{"bar":"$BAZ_VALUE","foo":"live"}` {
		t.Fatalf("configuration after create = %s", got)
	}
	// YAML answers when asked for.
	if a := call(t, "GET", values+"dummies.dummy/", nil, "Accept", "application/yaml"); a.status != 200 || !strings.Contains(string(a.body), "foo: live") {
		t.Fatalf("YAML get = %d %s", a.status, a.body)
	}

	bad := expect(t, send(t, "POST", values+"dummies.dummy/", "application/yaml", "configuration:\n  bar: 7\n"), 422, "invalid-configuration")
	if issues, _ := bad["issues"].([]any); len(issues) != 2 {
		t.Fatalf("issues = %v, want the type of bar and the missing foo", bad["issues"])
	}
	expect(t, call(t, "POST", values+"dummies.nope/", map[string]any{"configuration": map[string]any{}}), 422, "unknown-component")
	expect(t, send(t, "POST", values+"dummies.dummy/", "text/plain", "foo"), 415, "")

	fetched := call(t, "POST", s.URL+"/configuration/values:fetch", []map[string]string{{"component": "dummies.dummy", "epoch": epoch}})
	var pairs []map[string]any
	if fetched.status != 200 || json.Unmarshal(fetched.body, &pairs) != nil || len(pairs) != 1 || num(t, pairs[0], "created") != 1 {
		t.Fatalf("fetch = %d %s", fetched.status, fetched.body)
	}

	page := call(t, "GET", s.URL+"/.configuration", nil)
	if page.status != 200 || !strings.HasPrefix(page.header.Get("Content-Type"), "text/html") {
		t.Fatalf("page = %d %s", page.status, page.header.Get("Content-Type"))
	}
	for _, w := range []string{"dummies.dummy", "default.other", epoch, "live"} {
		if !strings.Contains(string(page.body), w) {
			t.Errorf("the page does not show %q", w)
		}
	}

	// The create is an ordinary scope of the var API, with its history.
	scope := "dummies.dummy@" + epoch
	st := expect(t, call(t, "GET", s.Base+"/admin/status?scope="+q(scope), nil), 200, "")
	if st["active"] != true || num(t, st, "generation") != 1 {
		t.Fatalf("status of %s = %v", scope, st)
	}
	// The var API keeps every other path.
	expect(t, call(t, "GET", s.Base+"?key=nothing.here", nil), 404, "no-head")

	s.stop()
	s2 := startServer(t, "--store", "file:"+logPath, "--components", deployment)
	m = expect(t, call(t, "GET", s2.URL+"/configuration/values/dummies.dummy/", nil), 200, "")
	if got, _ := json.Marshal(m["configuration"]); string(got) != `{"bar":"$BAZ_VALUE","foo":"live"}` {
		t.Fatalf("configuration after restart = %s", got)
	}
	again := expect(t, send(t, "POST", s2.URL+"/configuration/values/dummies.dummy/", "application/json", `{"configuration":{"foo":"second"}}`), 201, "")
	if again["id"] == created["id"] {
		t.Fatalf("the create after the restart reused id %v", again["id"])
	}
	fetched = call(t, "POST", s2.URL+"/configuration/values:fetch", []map[string]string{{"component": "dummies.dummy", "epoch": epoch}})
	if err := json.Unmarshal(fetched.body, &pairs); err != nil || len(pairs) != 1 || num(t, pairs[0], "created") != 2 {
		t.Fatalf("fetch after restart = %d %s, want created 2", fetched.status, fetched.body)
	}
}

// TestServeComponentsTokens checks identities and roles from serve's
// --tokens, the created event's originator on the watch stream, and that an
// open watch stream does not hold the shutdown.
func TestServeComponentsTokens(t *testing.T) {
	deployment, _ := deployFixture(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeFiles(t, filepath.Dir(tokens), map[string]string{"tokens": "# operators\nops-token id=ops roles=system:configuration\napp-token id=app roles=system:configuration:get kinds=read prefixes=dummies.\nlegacy-token\nreader-token kinds=read prefixes=agentic.\n"})
	s := startServer(t, "--store", "memory:", "--components", deployment, "--tokens", tokens, "--ui=false")
	target := s.URL + "/configuration/values/dummies.dummy/"
	body := `{"configuration":{"foo":"x"}}`
	auth := func(tok string) []string { return []string{"Authorization", "Token " + tok} }

	tests := []struct {
		name, method, url, body string
		header                  []string
		status                  int
		code                    string
	}{
		{"get without token", "GET", target, "", nil, 401, "unauthorized"},
		{"get with an unknown token", "GET", target, "", auth("nope"), 403, "forbidden"},
		{"get with a Bearer token", "GET", target, "", []string{"Authorization", "Bearer app-token"}, 200, ""},
		{"get with the get role", "GET", target, "", auth("app-token"), 200, ""},
		{"create with the get role only", "POST", target, body, auth("app-token"), 403, "forbidden"},
		{"page without token", "GET", s.URL + "/.configuration", "", nil, 401, "unauthorized"},
		{"page as Basic password", "GET", s.URL + "/.configuration", "", []string{"Authorization", "Basic " + basic("app-token")}, 200, ""},
		{"page with a mistyped Basic password", "GET", s.URL + "/.configuration", "", []string{"Authorization", "Basic " + basic("app-tokem")}, 401, "unauthorized"},
		{"API with a Basic password", "GET", target, "", []string{"Authorization", "Basic " + basic("app-token")}, 401, "unauthorized"},
		{"fetch without token", "POST", s.URL + "/configuration/values:fetch", "[]", nil, 401, "unauthorized"},
		{"get with a token narrowed on the var API, no roles", "GET", target, "", auth("reader-token"), 403, "forbidden"},
		{"var API mutation by a read-only grant", "POST", s.Base + "/admin/revisions", `{"scope":"dummies.x","document":{}}`, []string{"Authorization", "Bearer app-token"}, 403, "forbidden"},
		{"var API audit by a read-only grant", "GET", s.Base + "/admin/status?scope=dummies.x", "", []string{"Authorization", "Bearer app-token"}, 403, "forbidden"},
		{"var API read under the grant's prefix", "GET", s.Base + "?key=dummies.x", "", []string{"Authorization", "Bearer app-token"}, 404, "no-head"},
		{"create with a parent role", "POST", target, body, auth("ops-token"), 201, ""},
		{"create with a plain token (system)", "POST", target, body, []string{"Authorization", "Bearer legacy-token"}, 201, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ct := ""
			if tt.body != "" {
				ct = "application/json"
			}
			a := send(t, tt.method, tt.url, ct, tt.body, tt.header...)
			if a.status != tt.status {
				t.Fatalf("status = %d, want %d; body %s", a.status, tt.status, a.body)
			}
			if tt.code != "" {
				if m := a.json(t); m["code"] != tt.code {
					t.Fatalf("code = %v, want %s", m["code"], tt.code)
				}
			}
		})
	}

	// The watch stream carries the creator's id as the originator.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+"/configuration/values:watch", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Token app-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("watch = %d", resp.StatusCode)
	}
	events := bufio.NewScanner(resp.Body)
	next := func(kind string) string {
		t.Helper()
		var event string
		for events.Scan() {
			line := events.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == kind:
				return strings.TrimPrefix(line, "data: ")
			}
		}
		t.Fatalf("the watch stream ended before a %s event: %v", kind, events.Err())
		return ""
	}
	next("ready")
	expect(t, send(t, "POST", target, "application/json", `{"configuration":{"foo":"watched"}}`, auth("ops-token")...), 201, "")
	var ev map[string]any
	if err := json.Unmarshal([]byte(next("created")), &ev); err != nil {
		t.Fatal(err)
	}
	if ev["originator"] != "ops" || ev["component"] != "dummies.dummy" || num(t, ev, "created") != 3 {
		t.Fatalf("created event = %v", ev)
	}

	// The stream is still open: the server must end it rather than wait
	// for it until the drain deadline, which fails the shutdown (stop
	// reports the non-zero exit).
	s.stop()
}

func basic(password string) string {
	return base64.StdEncoding.EncodeToString([]byte("x:" + password))
}
