package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A server out of file descriptors keeps its port: Accept's EMFILE is
// logged and retried after a pause, and once descriptors are free again the
// server answers. (The old RPC listener's accept loop ended for good.)
func TestServeSurvivesEMFILE(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit (util-linux) is needed to lower the server's descriptor limit")
	}
	s := startServe(t, "--addr", "127.0.0.1:0", "--store", "memory:")
	pid := s.cmd.Process.Pid
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("no /proc to count the server's descriptors: %v", err)
	}
	limit := len(fds) + 8
	if out, err := exec.Command("prlimit", "--pid", strconv.Itoa(pid), fmt.Sprintf("--nofile=%d:%d", limit, limit)).CombinedOutput(); err != nil {
		t.Skipf("prlimit: %v: %s", err, out)
	}
	addr := strings.TrimPrefix(s.URL, "http://")
	var conns []net.Conn
	for range 40 {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.logs(), "accept failed") {
		if time.Now().After(deadline) {
			t.Fatalf("no accept error logged with %d connections over a limit of %d descriptors:\n%s", len(conns), limit, s.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	// Descriptors are free again: the server answers.
	deadline = time.Now().Add(15 * time.Second)
	for {
		resp, err := (&http.Client{Timeout: time.Second}).Get(s.URL + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server does not answer after EMFILE: %v\n%s", err, s.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(s.logs(), "out_of_descriptors=true") {
		t.Errorf("the accept error does not say it ran out of descriptors:\n%s", s.logs())
	}
}
