package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane/internal/syncbuf"
)

// readmeBlock returns the first ```go block after heading in the README.
func readmeBlock(t *testing.T, heading string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, heading)
	if i < 0 {
		t.Fatalf("README has no %q", heading)
	}
	text = text[i:]
	start := strings.Index(text, "```go\n")
	if start < 0 {
		t.Fatalf("no go block after %q", heading)
	}
	text = text[start+len("```go\n"):]
	end := strings.Index(text, "\n```")
	if end < 0 {
		t.Fatal("the go block is not closed")
	}
	return text[:end+1]
}

// TestReadmeEmbedding builds the README's embedding example as it is written
// (only its listen address changed, to a free port) in this module, runs it,
// and checks that its own route, a publish and the live stream all answer:
// the example wires the watch route, and a commit reaches it.
func TestReadmeEmbedding(t *testing.T) {
	src := readmeBlock(t, "## Embedding varplane in your own Go server")
	const addr = `"127.0.0.1:8080"`
	if strings.Count(src, addr) != 1 {
		t.Fatalf("the example should listen on %s exactly once:\n%s", addr, src)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(strings.Replace(src, addr, `"`+free+`"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "embedded")
	// Files named on the command line build as a package of the module the
	// go command runs in: this one, so the example's imports are ours.
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(dir, "main.go")).CombinedOutput(); err != nil {
		t.Fatalf("the README's example does not build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Dir = dir
	var logs syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	root := "http://" + free
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(root + "/hello")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the example did not answer /hello: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	base := root + "/cnos/vars"
	expect(t, call(t, "POST", base+"/admin/publish", map[string]any{"scope": "demo.key", "document": map[string]int{"n": 1}, "expectedGeneration": 0}), 200, "")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/watch?key=demo.key", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("watch: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") && strings.Contains(line, `"generation":1`) && strings.Contains(line, `"demo.key":{"n":1}`) {
			return
		}
	}
	t.Fatalf("the stream ended without the head: %v\n%s", sc.Err(), logs.String())
}
