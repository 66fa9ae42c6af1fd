package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestReadOnlyNeedsRedis: --read-only (and its former name, and --root)
// on a store without a read-only mode is refused at start with a usage
// error naming the store, never ignored (which would serve it read-write).
func TestReadOnlyNeedsRedis(t *testing.T) {
	file := "file:" + filepath.Join(t.TempDir(), "log.jsonl")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", file, "--read-only"}, "--read-only needs a redis:// store; the file store"},
		{[]string{"--store", file, "--redis-read-only"}, "--redis-read-only: for a redis store only"},
		{[]string{"--store", "memory:", "--read-only"}, "the memory store has no read-only mode"},
		{[]string{"--store", file, "--root", "app"}, "--root makes a read replica of a redis:// store; the file store"},
	} {
		r := runCLI(t, nil, "", append([]string{"serve", "--addr", "127.0.0.1:0", "--rpc-addr", "127.0.0.1:0"}, tc.args...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want exit %d naming %q", tc.args, r.code, r.stderr, ExitUsage, tc.want)
		}
	}
}
