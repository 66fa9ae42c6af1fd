package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// secretPW is the password of the store URLs below: no output may show it.
const secretPW = "S3cretPW-9x"

// runServe runs `varplane serve args…` in-process with env as the whole
// environment. Every case of the callers is refused before anything is
// opened; the deadline only ends a serve that wrongly started.
func runServe(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	code = m.Run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0", "--rpc-addr", "127.0.0.1:0"}, args...))
	return code, out.String(), errb.String()
}

// TestServeRefusesStoreConfig: a query parameter the store does not read,
// and a flag of another store, are usage errors (exit 2) at start that name
// them, open nothing, and never show the URL's password.
func TestServeRefusesStoreConfig(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log.jsonl")
	rd := "redis://varplane:" + secretPW + "@127.0.0.1:1/0" // nothing listens on port 1
	rds := "rediss://varplane:" + secretPW + "@127.0.0.1:1/0"
	for _, tt := range []struct {
		name string
		env  map[string]string
		args []string
		want []string // each in stderr
	}{
		// Unknown query parameters, per store kind.
		{"file: parameter", nil, []string{"--store", "file:" + log + "?fsync=0"}, []string{`unknown query parameter(s) "fsync" for the file store (it takes none)`}},
		{"file:// parameter", nil, []string{"--store", "file://" + log + "?a=1&b=2"}, []string{`"a", "b" for the file store`}},
		{"file: bare '?'", nil, []string{"--store", "file:" + log + "?"}, []string{`"file:" takes no query parameters`}},
		{"memory: parameter", nil, []string{"--store", "memory:?prefix=x"}, []string{`unknown query parameter(s) "prefix" for the memory store`}},
		{"redis typo", nil, []string{"--store", rd + "?prefx=zz"}, []string{`"redis://…": unknown URL parameter(s) "prefx" (it takes addr, client_name, command_timeout, db,`}},
		{"rediss typo", nil, []string{"--store", rds + "?prefix=a&dbb=1"}, []string{`unknown URL parameter(s) "dbb" (it takes`}},
		{"skip_verify without TLS", nil, []string{"--store", rd + "?skip_verify=true"}, []string{`"skip_verify"`, "skip_verify needs rediss://"}},
		{"a parameter the store overrides", nil, []string{"--store", rd + "?client_cache=1&max_retries=3"}, []string{`"client_cache", "max_retries"`}},
		{"a flag and its URL parameter", nil, []string{"--store", rd + "?read_only=true", "--read-only"}, []string{"--store sets read_only and so does a flag"}},
		{"prefix twice", nil, []string{"--store", rd + "?prefix=a&prefix=b"}, []string{`URL parameter(s) "prefix" given more than once`}},
		{"malformed query", nil, []string{"--store", rd + "?prefix=%zz"}, []string{"malformed query"}},
		{"malformed URL", nil, []string{"--store", "redis://varplane:" + secretPW + "@127.0.0.1:1/%zz"}, []string{`"redis://…": bad URL`}},
		{"fragment", nil, []string{"--store", rd + "#prefix=a"}, []string{`"redis://…": a '#' fragment is not read`}},
		{"value the store refuses", nil, []string{"--store", rd + "?db=x"}, []string{"invalid database number"}},
		{"typo through the environment", map[string]string{"VARPLANE_STORE": rd + "?prefx=zz"}, nil, []string{`"prefx"`}},
		{"unknown scheme with a password", nil, []string{"--store", "redis+tls://varplane:" + secretPW + "@h:1"}, []string{"want file:PATH, memory:, redis://HOST:PORT or postgres://", "varplane:xxxxx@h:1"}},

		// Flags of one store given with another.
		{"redis flag with memory:", nil, []string{"--store", "memory:", "--redis-read-only"}, []string{"--redis-read-only: for a redis store only, and --store is memory:"}},
		{"redis flags with file:", nil, []string{"--store", "file:" + log, "--redis-eviction-check", "warn", "--redis-revalidate-interval=1s"}, []string{"--redis-eviction-check, --redis-revalidate-interval: for a redis store only", "--store is file:" + log}},
		{"redis flag set to its default", nil, []string{"--store", "memory:", "--redis-read-only=false"}, []string{"--redis-read-only: for a redis store only"}},
		{"redis flag with the store from the environment", map[string]string{"VARPLANE_STORE": "memory:"}, []string{"--redis-eviction-check", "fail"}, []string{"--redis-eviction-check: for a redis store only"}},
		{"redis flag with the default store", nil, []string{"--redis-read-only"}, []string{"--redis-read-only: for a redis store only, and --store is file:./.varplane/var-log.jsonl"}},
		{"redis flag with postgres://", nil, []string{"--store", "postgres://u:" + secretPW + "@h/db", "--redis-read-only"}, []string{"--redis-read-only: for a redis store only, and --store is postgres://u:xxxxx@h/db"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runServe(t, tt.env, tt.args...)
			if code != ExitUsage {
				t.Fatalf("exit %d, want %d\nstderr: %s", code, ExitUsage, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
			if strings.Contains(stdout+stderr, secretPW) {
				t.Errorf("output shows the password:\n%s%s", stdout, stderr)
			}
			if _, err := os.Stat(log); !os.IsNotExist(err) {
				t.Errorf("a refused serve created %s (%v)", log, err)
			}
		})
	}
}

// TestCheckStoreAccepts: every parameter a store reads, and its own flags,
// pass the check.
func TestCheckStoreAccepts(t *testing.T) {
	for _, tt := range []struct {
		spec  string
		flags []string
		env   map[string]string
	}{
		{"file:./x.jsonl", nil, nil},
		{"file://./x.jsonl", nil, nil},
		{"memory:", nil, nil},
		{"redis://h:1/0", []string{"--redis-read-only", "--redis-eviction-check", "warn", "--redis-revalidate-interval", "1s"}, nil},
		{"redis://u:p@h:1/0?prefix=a&db=2&addr=h2:1&addr=h3:1&dial_timeout=1s&write_timeout=1s&protocol=2&client_name=x&master_set=m", nil, nil},
		{"REDIS://h:1?prefix=a", nil, nil},
		{"rediss://h:1?skip_verify=true&prefix=a", []string{"--redis-read-only"}, nil},
		// A variable that does not set a store flag is not a flag.
		{"memory:", nil, map[string]string{"VARPLANE_REDIS_READ_ONLY": "true"}},
		{"postgres://h/db", nil, nil}, // the PostgreSQL store checks its own URL
	} {
		t.Run(tt.spec, func(t *testing.T) {
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			var rf redisFlags
			rf.register(fs)
			if err := fs.Parse(tt.flags); err != nil {
				t.Fatal(err)
			}
			if err := checkStore(fs, func(k string) string { return tt.env[k] }, tt.spec); err != nil {
				t.Errorf("checkStore: %v", err)
			}
		})
	}
}

// TestFlagGiven: a flag is given on the command line, or through the
// VARPLANE_ variable its usage names; an empty variable is not given.
func TestFlagGiven(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.String("store", "memory:", "store URL (env VARPLANE_STORE)")
	fs.Bool("quiet", false, "no env")
	fs.String("other", "", "x (env VARPLANE_OTHER)")
	if err := fs.Parse([]string{"--quiet=false"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"VARPLANE_STORE": "file:x", "VARPLANE_OTHER": ""}
	getenv := func(k string) string { return env[k] }
	for name, want := range map[string]bool{"store": true, "quiet": true, "other": false, "missing": false} {
		if got := flagGiven(fs, getenv, name); got != want {
			t.Errorf("flagGiven(%s) = %v, want %v", name, got, want)
		}
	}
}

// TestRedactURL: passwords in user information and password-like query
// parameters are hidden; everything else is kept.
func TestRedactURL(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"redis://u:" + secretPW + "@h:6379/0?prefix=a", "redis://u:xxxxx@h:6379/0?prefix=a"},
		{"rediss://:" + secretPW + "@h:6379", "rediss://:xxxxx@h:6379"},
		{"redis://u@h:6379", "redis://u@h:6379"},
		{"redis://h:6379/0?prefix=a&b=c", "redis://h:6379/0?prefix=a&b=c"},
		{"postgres://u:" + secretPW + "@h/db?sslmode=disable", "postgres://u:xxxxx@h/db?sslmode=disable"},
		{"postgres://u@h/db?password=" + secretPW + "&sslmode=disable", "postgres://u@h/db?password=xxxxx&sslmode=disable"},
		{"postgresql://h/db?sslpassword=" + secretPW, "postgresql://h/db?sslpassword=xxxxx"},
		{"http://u:" + secretPW + "@h:1/", "http://u:xxxxx@h:1/"},
		{"redis:u:" + secretPW + "@h", "redis:xxxxx@h"},
		{"redis://u:" + secretPW + "@h/%zz", "redis:…(a malformed URL)"},
		{"redis://u:" + secretPW + "@h/?a=%zz", "redis://u:xxxxx@h/?…"},
		{"%zz:" + secretPW, "(a malformed URL)"},
		{"file:./dir@x/log?.jsonl", "file:./dir@x/log?.jsonl"},
		{"memory:", "memory:"},
		{"", ""},
	} {
		if got := redactURL(tt.in); got != tt.want {
			t.Errorf("redactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
