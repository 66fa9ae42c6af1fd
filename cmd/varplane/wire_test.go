package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/syncbuf"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/store/memory"
)

// inProcess runs one command against server in this process.
func inProcess(server, stdin string, args ...string) (code int, stdout, stderr string) {
	var out, errb syncbuf.Buffer
	m := &Main{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string {
			if k == "VARPLANE_SERVER" {
				return server
			}
			return ""
		}}
	code = m.Run(context.Background(), args)
	return code, out.String(), errb.String()
}

// TestServerErrorsCrossTheWire: the commands get the real server's refusals
// as the *varplane.Error it sent, details included, print them as the CLI
// always has, and exit 1; a proxy's page is store-unavailable without its
// text.
func TestServerErrorsCrossTheWire(t *testing.T) {
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{})
	api := httpapi.NewHandler(e, httpapi.Options{Authorizer: varplane.AllowAll, DisableOps: true, Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(api)
	t.Cleanup(func() { srv.Close(); api.Close(); e.Close(); _ = st.Close() })

	code, out, errOut := inProcess(srv.URL, `{"n": 1}`, "create", "--scope", "a.b")
	if code != ExitOK {
		t.Fatalf("create: exit %d\n%s%s", code, out, errOut)
	}
	rev := strings.Fields(out)[3]
	m := &Main{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}

	t.Run("conflict", func(t *testing.T) {
		err := (&ActivateCommand{m: m}).Run(context.Background(), []string{"--server", srv.URL, "--scope", "a.b", "--revision", rev, "--expected-generation", "4"})
		var ve *varplane.Error
		if !errors.As(err, &ve) || !errors.Is(err, varplane.ErrConflict) {
			t.Fatalf("err = %v, want a revision conflict", err)
		}
		if ve.Expected == nil || *ve.Expected != 4 || ve.Current == nil || *ve.Current != 0 {
			t.Fatalf("expected/current = %v/%v, want 4/0", ve.Expected, ve.Current)
		}
		code, _, errOut := inProcess(srv.URL, "", "activate", "--scope", "a.b", "--revision", rev, "--expected-generation", "4")
		want := "error: revision-conflict: " + ve.Message + "\n  currentGeneration: 0\n  expectedGeneration: 4\n  scope: \"a.b\"\n"
		if code != ExitRefused || errOut != want {
			t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and:\n%s", code, errOut, want)
		}
	})
	t.Run("invalid document", func(t *testing.T) {
		err := (&CreateCommand{m: &Main{Stdin: strings.NewReader(`{"other.x": 1}`), Stdout: io.Discard, Stderr: io.Discard, Getenv: m.Getenv}}).
			Run(context.Background(), []string{"--server", srv.URL, "--scope", "agentic"})
		var ve *varplane.Error
		if !errors.As(err, &ve) || !errors.Is(err, varplane.ErrInvalid) || len(ve.Issues) == 0 || ve.Issues[0].Code != "var.group-scope-shape" {
			t.Fatalf("err = %v (%+v), want revision-invalid with its issues", err, ve)
		}
		code, _, errOut := inProcess(srv.URL, `{"other.x": 1}`, "create", "--scope", "agentic")
		if code != ExitRefused || !strings.Contains(errOut, "  issues:\n    var.group-scope-shape at ") {
			t.Fatalf("exit %d, stderr:\n%s", code, errOut)
		}
	})
	t.Run("proxy 502", func(t *testing.T) {
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html>upstream db-7.internal refused</html>")
		}))
		defer proxy.Close()
		code, out, errOut := inProcess(proxy.URL, "", "status", "--scope", "a.b")
		if code != ExitRefused || !strings.HasPrefix(errOut, "error: store-unavailable: ") {
			t.Fatalf("exit %d, stderr %q; want exit 1 and store-unavailable", code, errOut)
		}
		if strings.Contains(errOut+out, "db-7") || strings.Contains(errOut+out, "html") {
			t.Fatalf("the proxy's text reached the output: %q %q", out, errOut)
		}
		// With -o json the error is one JSON object on stderr.
		code, out, errOut = inProcess(proxy.URL, "", "status", "--scope", "a.b", "-o", "json")
		var body struct{ Code, Error string }
		if code != ExitRefused || json.Unmarshal([]byte(errOut), &body) != nil || body.Code != "store-unavailable" {
			t.Fatalf("-o json: exit %d, stderr %q; want exit 1 and one store-unavailable object", code, errOut)
		}
		if strings.Contains(errOut+out, "db-7") || strings.Contains(errOut+out, "html") {
			t.Fatalf("the proxy's text reached the output: %q %q", out, errOut)
		}
	})
}

// TestWatchSurvivesOverLargeEvent: an event over the bound ends that
// connection with a message; watch reconnects and prints what follows.
func TestWatchSurvivesOverLargeEvent(t *testing.T) {
	defer func(n int) { maxSSEEventBytes = n }(maxSSEEventBytes)
	maxSSEEventBytes = 1024
	var conns atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		var b []byte
		if conns.Add(1) == 1 {
			b = wire.AppendEvent(nil, "head", "a.b@1", []byte(`{"scope":"a.b","generation":1,"values":{"a.b":"`+strings.Repeat("x", 4096)+`"}}`))
		} else {
			if got := r.URL.Query()["since"]; len(got) != 0 {
				t.Errorf("since = %v after an event that was never printed", got)
			}
			b = wire.AppendComment(nil, "heartbeat")
			b = wire.AppendEvent(b, "head", "a.b@2", []byte(`{"scope":"a.b","generation":2,"revision":"sha256:ab","values":{"a.b":{"n":2}}}`))
		}
		_, _ = w.Write(b)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	var out, errb syncbuf.Buffer
	m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- m.Run(ctx, []string{"watch", "--server", srv.URL, "--key", "a.b"}) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "generation 2") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != ExitOK {
		t.Errorf("watch exit %d", code)
	}
	if want := `head a.b generation 2 revision sha256:ab values {"a.b":{"n":2}}` + "\n"; out.String() != want {
		t.Fatalf("stdout = %q, want %q", out.String(), want)
	}
	if !strings.Contains(errb.String(), fmt.Sprintf("an event larger than %d bytes; reconnecting", 1024)) {
		t.Fatalf("stderr = %q, want the over-large event reported", errb.String())
	}
}

// TestDeactivateAsksInATerminal: a cascade over more than one scope asks
// when stdin is a terminal; anything but yes changes nothing; --yes skips
// the question; a single scope is never asked about.
func TestDeactivateAsksInATerminal(t *testing.T) {
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{})
	api := httpapi.NewHandler(e, httpapi.Options{Authorizer: varplane.AllowAll, DisableOps: true, Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(api)
	t.Cleanup(func() { srv.Close(); api.Close(); e.Close(); _ = st.Close() })
	run := func(stdin string, args ...string) (int, string, string) {
		var out, errb syncbuf.Buffer
		m := &Main{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, terminal: func(any) bool { return true },
			Getenv: func(k string) string {
				if k == "VARPLANE_SERVER" {
					return srv.URL
				}
				return ""
			}}
		return m.Run(context.Background(), args), out.String(), errb.String()
	}
	for _, sc := range []string{"g", "g.a"} {
		doc := `{"g.x": 1}`
		if sc == "g.a" {
			doc = `1`
		}
		if code, out, errOut := run(doc, "set", sc, "--expected-generation", "0"); code != 0 {
			t.Fatalf("set %s: %d %s %s", sc, code, out, errOut)
		}
	}
	code, out, errOut := run("n\n", "deactivate", "g", "--expected-generation", "1")
	if code != ExitRefused || !strings.Contains(errOut, "clears 2 active scopes") || !strings.Contains(errOut, "not confirmed; nothing changed") || out != "" {
		t.Fatalf("declined: exit %d stdout %q stderr %q", code, out, errOut)
	}
	if code, out, _ := run("", "status", "g.a"); code != 0 || !strings.Contains(out, "state:       active") {
		t.Fatalf("a declined deactivation changed g.a: %s", out)
	}
	if code, out, errOut := run("", "deactivate", "g.a", "--expected-generation", "1", "--dry-run"); code != 0 || strings.Contains(errOut, "proceed?") || !strings.Contains(out, "would deactivate g.a") {
		t.Fatalf("dry run asked: %d %q %q", code, out, errOut)
	}
	code, out, errOut = run("yes\n", "deactivate", "g", "--expected-generation", "1")
	if code != 0 || !strings.Contains(errOut, "proceed? [y/N]") || !strings.Contains(out, "also deactivated g.a generation 2") {
		t.Fatalf("confirmed: exit %d stdout %q stderr %q", code, out, errOut)
	}
	if code, out, _ := run("", "set", "g.a", "--expected-generation", "2"); code == 0 {
		t.Fatalf("set without a document succeeded: %s", out)
	}
	if code, _, errOut := run(`2`, "set", "g.a", "--expected-generation", "2"); code != 0 {
		t.Fatalf("set g.a: %s", errOut)
	}
	if code, _, errOut := run("", "deactivate", "g", "--expected-generation", "2", "--yes"); code != 0 || strings.Contains(errOut, "proceed?") {
		t.Fatalf("--yes asked: %d %q", code, errOut)
	}
}

// TestDeactivateRefusedBeforeTheQuestion: in a terminal, the question is
// preceded by the server's dry run; a refusal there is the write's own
// refusal (the user asked for no dry run), and nothing changes.
func TestDeactivateRefusedBeforeTheQuestion(t *testing.T) {
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{})
	noMutate := varplane.AuthorizerFunc(func(_ context.Context, a varplane.Access) (varplane.Identity, error) {
		if a.Kind == varplane.KindMutate && a.Scope == "app.locked" {
			return varplane.Identity{}, varplane.ErrForbidden
		}
		return varplane.Anonymous, nil
	})
	api := httpapi.NewHandler(e, httpapi.Options{Authorizer: noMutate, DisableOps: true, Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(api)
	t.Cleanup(func() { srv.Close(); api.Close(); e.Close(); _ = st.Close() })
	if _, err := e.Publish(context.Background(), varplane.PublishRequest{Scope: "app.locked", Document: json.RawMessage(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	var out, errb syncbuf.Buffer
	m := &Main{Stdin: strings.NewReader("y\n"), Stdout: &out, Stderr: &errb, terminal: func(any) bool { return true },
		Getenv: func(k string) string {
			if k == "VARPLANE_SERVER" {
				return srv.URL
			}
			return ""
		}}
	code := m.Run(context.Background(), []string{"deactivate", "app.locked", "--expected-generation", "1"})
	if code == 0 || strings.Contains(errb.String(), "dry run") || !strings.Contains(errb.String(), "forbidden") {
		t.Fatalf("exit %d stdout %q stderr %q: want the write's refusal, not a dry run's", code, out.String(), errb.String())
	}
	if s, _ := st.State(context.Background(), "app.locked"); s.Head == nil {
		t.Error("the refused deactivation changed the scope")
	}
}
