package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTokensFileReload: serve reloads --tokens when the file changes and on
// SIGHUP, logs the reload, refuses a removed token from then on, and keeps
// the tokens in force when the new file does not load (logged at ERROR,
// never naming a token).
func TestTokensFileReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	write := func(content string) {
		t.Helper()
		// Through a rename, as editors and configuration managers do.
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("old-token-1 id=first\n")
	s := startServer(t, "--store", "memory:", "--tokens", path)
	read := func(token string) int {
		return call(t, "GET", s.Base+"?key="+q("a.b"), nil, "Authorization", "Bearer "+token).status
	}
	if st := read("old-token-1"); st != 404 { // allowed: no head yet
		t.Fatalf("the first token: %d", st)
	}
	if st := read("new-token-2"); st != 403 {
		t.Fatalf("a token not in the file: %d", st)
	}

	// A change of the file is picked up within the poll interval.
	write("new-token-2 id=second\n")
	eventually(t, 10*time.Second, "the file's change reloaded", func() (bool, string) {
		return read("new-token-2") == 404 && read("old-token-1") == 403, s.logs()
	})
	// The line is logged just after the new tokens are in force.
	eventually(t, 5*time.Second, "the reload logged", func() (bool, string) {
		return strings.Contains(s.logs(), "bearer tokens reloaded"), s.logs()
	})

	// A file that does not load keeps the tokens in force.
	write("bad-token kinds=frobnicate\n")
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the failed reload logged", func() (bool, string) {
		return strings.Contains(s.logs(), "tokens file not reloaded"), s.logs()
	})
	if st := read("new-token-2"); st != 404 {
		t.Fatalf("after a failed reload the token in force: %d", st)
	}
	if strings.Contains(s.logs(), "bad-token") || strings.Contains(s.logs(), "new-token-2") {
		t.Fatal("the log names a token")
	}

	// SIGHUP reloads a good file at once, and the server keeps running.
	write("third-token-3 id=third\n")
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the SIGHUP reload", func() (bool, string) {
		return read("third-token-3") == 404 && read("new-token-2") == 403, s.logs()
	})
}
