package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The OpenFeature tests with the providers others wrote (docs/openfeature.md):
// the published Node.js SDK and OFREP provider, pinned in
// testdata/ofrep-node, installed with npm ci into a temporary folder.

// ofrepTokens: a reader of agentic.* and an admin.
const ofrepTokens = "reader-token kinds=read prefixes=agentic.\nadmin-token\n"

// npmInstall installs testdata/ofrep-node's locked packages into a new
// temporary folder and returns it. It skips the test when npm is missing or
// cannot reach its registry, unless VARPLANE_REQUIRE_SERVICES is set: then
// that fails it.
func npmInstall(t *testing.T) string {
	t.Helper()
	unavailable := func(why string, out []byte) {
		t.Helper()
		if os.Getenv("VARPLANE_REQUIRE_SERVICES") != "" {
			t.Fatalf("%s and VARPLANE_REQUIRE_SERVICES is set:\n%s", why, out)
		}
		t.Skipf("OpenFeature Node.js tests skipped: %s (set VARPLANE_REQUIRE_SERVICES to make this a failure)", why)
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(tool+" is not installed", nil)
		}
	}
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "matrix.js"} {
		data, err := os.ReadFile(filepath.Join("testdata", "ofrep-node", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "npm", "ping").CombinedOutput(); err != nil {
		unavailable("npm cannot reach its registry", out)
	}
	ci := exec.CommandContext(ctx, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	ci.Dir = dir
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	return dir
}

// ofrepServer starts the server binary with the tokens above and publishes
// the flags' document; it returns the server and the revision published.
func ofrepServer(t *testing.T) (*server, string) {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(ofrepTokens), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--tokens", tokens)
	rev := ofrepPublish(t, s, 0, `{"enabled":true,"name":"vinci","ratio":0.25,"big":9007199254740991,"limits":{"rps":5}}`)
	ofrepPublish(t, s, 0, `{"on":true}`, "other.scope")
	return s, rev
}

func ofrepPublish(t *testing.T, s *server, expected int, doc string, scope ...string) string {
	t.Helper()
	sc := "agentic.lanes.vinci"
	if len(scope) > 0 {
		sc = scope[0]
	}
	a := call(t, "POST", s.Base+"/admin/publish", `{"scope":"`+sc+`","document":`+doc+`,"expectedGeneration":`+strconv.Itoa(expected)+`}`,
		"Authorization", "Bearer admin-token")
	return str(t, expect(t, a, http.StatusOK, ""), "revision")
}

// detail is what the Node script prints of one evaluation.
type detail struct {
	Value        json.RawMessage `json:"value"`
	Variant      string          `json:"variant"`
	Reason       string          `json:"reason"`
	ErrorCode    string          `json:"errorCode"`
	FlagMetadata map[string]any  `json:"flagMetadata"`
}

// TestOFREPNodeProviders: @openfeature/server-sdk with
// @openfeature/ofrep-provider against the server binary evaluates boolean,
// string, number and object flags, sees a change after a publish, and gets
// the protocol's errors.
func TestOFREPNodeProviders(t *testing.T) {
	t.Parallel() // its own servers, store and files: it waits mostly on them
	dir := npmInstall(t)
	s, rev1 := ofrepServer(t)

	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	node := exec.CommandContext(ctx, "node", "matrix.js")
	node.Dir = dir
	node.Env = append(os.Environ(), "VARPLANE_OFREP_URL="+s.Base, "VARPLANE_TOKEN=reader-token")
	var stderr strings.Builder
	node.Stderr = &stderr
	stdin, err := node.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := node.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	lines.Buffer(nil, 1<<20)
	raw := func(name string) map[string]json.RawMessage {
		t.Helper()
		if !lines.Scan() {
			_ = node.Wait()
			t.Fatalf("node ended before %s: %v\n%s\nserver:\n%s", name, lines.Err(), stderr.String(), s.logs())
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil || string(m["phase"]) != `"`+name+`"` {
			t.Fatalf("node printed %s, want phase %s", lines.Text(), name)
		}
		t.Logf("%s: %s", name, lines.Text())
		return m
	}
	phase := func(name string) map[string]detail {
		t.Helper()
		m := raw(name)
		out := map[string]detail{}
		for k, v := range m {
			if k == "phase" {
				continue
			}
			var d detail
			if err := json.Unmarshal(v, &d); err != nil {
				t.Fatal(err)
			}
			out[k] = d
		}
		return out
	}
	check := func(what string, d detail, value, code string) {
		t.Helper()
		if string(d.Value) != value || d.ErrorCode != code {
			t.Errorf("%s: value %s code %q, want %s %q", what, d.Value, d.ErrorCode, value, code)
		}
	}

	before := phase("before")
	check("boolean", before["bool"], "true", "")
	check("string", before["string"], `"vinci"`, "")
	check("number", before["number"], "0.25", "")
	check("number 2^53-1", before["big"], "9007199254740991", "")
	check("object", before["object"], `{"rps":5}`, "")
	if b := before["bool"]; b.Reason != "STATIC" || b.Variant != rev1 || b.FlagMetadata["revision"] != rev1 || b.FlagMetadata["generation"] != float64(1) {
		t.Errorf("boolean's detail: %+v", b)
	}
	var whole map[string]any
	if err := json.Unmarshal(before["whole"].Value, &whole); err != nil || whole["name"] != "vinci" {
		t.Errorf("whole document: %s", before["whole"].Value)
	}

	// The bulk evaluations of @openfeature/ofrep-core's client: the named
	// flags in order (a failure as an item) with an ETag, 304 for it while
	// nothing changed, and every readable scope (not other.scope).
	bulks := raw("bulk")
	first, unchanged, readable := decodeBulk(t, bulks["first"]), decodeBulk(t, bulks["unchanged"]), decodeBulk(t, bulks["readable"])
	if first.Status != 200 || first.ETag == "" || len(first.Flags) != 3 || first.Flags[0].Key != "agentic.lanes.vinci#/enabled" ||
		string(first.Flags[0].Value) != "true" || string(first.Flags[1].Value) != `"vinci"` || first.Flags[2].ErrorCode != "FLAG_NOT_FOUND" {
		t.Errorf("bulk: %+v", first)
	}
	if unchanged.Status != 304 {
		t.Errorf("bulk with the ETag, nothing changed: %+v", unchanged)
	}
	if readable.Status != 200 || len(readable.Flags) != 1 || readable.Flags[0].Key != "agentic.lanes.vinci" {
		t.Errorf("bulk of every readable scope: %+v", readable)
	}

	rev2 := ofrepPublish(t, s, 1, `{"enabled":false,"name":"da vinci","ratio":0.5,"big":1,"limits":{"rps":7}}`)
	if _, err := io.WriteString(stdin, "published\n"); err != nil {
		t.Fatal(err)
	}
	after := phase("after")
	check("boolean after", after["bool"], "false", "")
	check("string after", after["string"], `"da vinci"`, "")
	check("number after", after["number"], "0.5", "")
	check("object after", after["object"], `{"rps":7}`, "")
	if b := after["bool"]; b.Variant != rev2 || b.FlagMetadata["generation"] != float64(2) {
		t.Errorf("boolean's detail after: %+v", b)
	}

	if changed := decodeBulk(t, raw("bulk-after")["changed"]); changed.Status != 200 || changed.ETag == first.ETag ||
		len(changed.Flags) != 3 || string(changed.Flags[0].Value) != "false" {
		t.Errorf("bulk with the old ETag after a publish: %+v", changed)
	}

	errs := phase("errors")
	check("no such member", errs["notFound"], "true", "FLAG_NOT_FOUND")
	check("no such scope", errs["noScope"], `"dflt"`, "FLAG_NOT_FOUND")
	check("malformed key", errs["malformed"], `"dflt"`, "FLAG_NOT_FOUND")
	check("type mismatch", errs["typeMismatch"], "true", "TYPE_MISMATCH")
	check("number as a string", errs["numberAsString"], `"dflt"`, "TYPE_MISMATCH")
	check("scope of another prefix", errs["forbidden"], "true", "GENERAL")
	check("no token", errs["anonymous"], "true", "GENERAL")
	check("forged token", errs["forged"], "true", "GENERAL")
	_ = stdin.Close()
	if err := node.Wait(); err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	// The refusals were the server's: 403 for the other prefix and the
	// forged token, 401 without one.
	for _, want := range []string{`status=401`, `status=403`} {
		if !strings.Contains(s.logs(), want) {
			t.Errorf("the server logged no %s answer", want)
		}
	}
}

// bulkResult is what the Node script prints of a bulk evaluation.
type bulkResult struct {
	Status int    `json:"status"`
	ETag   string `json:"etag"`
	Flags  []struct {
		Key       string          `json:"key"`
		Value     json.RawMessage `json:"value"`
		ErrorCode string          `json:"errorCode"`
	} `json:"flags"`
}

func decodeBulk(t *testing.T, raw json.RawMessage) bulkResult {
	t.Helper()
	var b bulkResult
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatalf("bulk result %s: %v", raw, err)
	}
	return b
}

var jsBlockRE = regexp.MustCompile("(?s)```js\n(.*?)\n```")

// docBlock returns the only block of lang's pattern in docs/openfeature.md.
func docBlock(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "openfeature.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := re.FindAllStringSubmatch(string(data), -1)
	if len(m) != 1 {
		t.Fatalf("docs/openfeature.md has %d such blocks, want 1", len(m))
	}
	return m[0][1]
}

// TestOpenFeatureDocExamples runs the Go and Node.js examples of
// docs/openfeature.md against the server binary: both print the flags'
// values.
func TestOpenFeatureDocExamples(t *testing.T) {
	t.Parallel() // its own servers, store and files: it waits mostly on them
	dir := npmInstall(t)
	s, _ := ofrepServer(t)
	const want = "enabled: true, rps: 5"

	js := filepath.Join(dir, "evaluate.js")
	if err := os.WriteFile(js, []byte(docBlock(t, jsBlockRE)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	node := exec.CommandContext(ctx, "node", "evaluate.js")
	node.Dir = dir
	node.Env = append(os.Environ(), "VARPLANE_OFREP_URL="+s.Base, "VARPLANE_TOKEN=reader-token")
	if out, err := node.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != want {
		t.Errorf("the Node.js example: %v\n%s", err, out)
	}

	main := filepath.Join(t.TempDir(), "main.go")
	if err := os.WriteFile(main, []byte(docBlock(t, goBlockRE)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := exec.CommandContext(ctx, "go", "run", main)
	run.Env = append(os.Environ(), "VARPLANE_SERVER="+s.URL, "VARPLANE_TOKEN=reader-token")
	var runErr strings.Builder
	run.Stderr = &runErr
	if out, err := run.Output(); err != nil || strings.TrimSpace(string(out)) != want {
		t.Errorf("the Go example: %v\n%s\n%s", err, out, runErr.String())
	}
}
