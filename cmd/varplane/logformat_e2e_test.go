package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeLogFormatJSON: with --log-format json every line serve writes is
// one JSON object (the warning of a server without --tokens included, which
// points at --tokens), and a successful publish leaves a line at INFO.
func TestServeLogFormatJSON(t *testing.T) {
	cmd := exec.Command(binary, "serve", "--log-format", "json", "--store", "memory:", "--addr", "127.0.0.1:0", "--rpc-addr", "127.0.0.1:0")
	cmd.Dir = t.TempDir()
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 256)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var all []string
	url := ""
	deadline := time.After(15 * time.Second)
	for url == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("serve exited before listening:\n%s", strings.Join(all, "\n"))
			}
			all = append(all, line)
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "varplane listening" {
				url, _ = rec["url"].(string)
			}
		case <-deadline:
			t.Fatalf("serve did not log its URL:\n%s", strings.Join(all, "\n"))
		}
	}
	resp, err := http.Post(url+"/vars/admin/publish", "application/json",
		strings.NewReader(`{"scope":"a.b","document":{"on":true},"expectedGeneration":0}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("publish: %d", resp.StatusCode)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	for line := range lines {
		all = append(all, line)
	}
	_ = cmd.Wait()

	warned, published := false, false
	for _, line := range all {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("a line is not JSON: %q", line)
			continue
		}
		msg, _ := rec["msg"].(string)
		if rec["level"] == "WARN" && strings.Contains(msg, "--tokens") {
			warned = true
		}
		if msg == "http request" && rec["route"] == "POST /vars/admin/publish" && rec["level"] == "INFO" && rec["status"] == float64(200) {
			published = true
		}
	}
	if !warned {
		t.Errorf("no JSON warning pointing at --tokens:\n%s", strings.Join(all, "\n"))
	}
	if !published {
		t.Errorf("the publish left no INFO line:\n%s", strings.Join(all, "\n"))
	}
}
