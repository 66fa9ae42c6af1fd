package main

// End-to-end checks of what serve refuses at start, through the binary.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeRefusesTokensFile: each error of the tokens file stops serve
// with exit 2 and a message naming the file and the line, never a token.
func TestServeRefusesTokensFile(t *testing.T) {
	const tok = "Tk7SECRETtok" // in every token below
	for _, tt := range []struct {
		name, file string
		want       string
	}{
		{"unknown attribute", "# ops\n" + tok + "-a\n\n" + tok + "-b kind=read\n", `line 4: unknown attribute "kind"`},
		{"unknown kind", tok + "-a kinds=read,write\n", `line 1: unknown kind "write"`},
		{"duplicate token", tok + "-a\n" + tok + "-b\n" + tok + "-a kinds=read\n", "line 3: the token of line 1 is given again"},
		{"malformed line", tok + "-a\n" + tok + "-b " + tok + "-c\n", "line 2: word 2 is not name=value"},
		{"attribute first", "kinds=read " + tok + "-a\n", "line 1: the token must come first"},
		{"malformed prefix", tok + "-a prefixes=a..b\n", "line 1: prefixes: item 1 is not a scope"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tokens")
			if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, how := range []struct {
				env  []string
				args []string
			}{
				{nil, []string{"--tokens", path}},
				{[]string{"VARPLANE_TOKENS_FILE=" + path}, nil},
			} {
				r := runCLI(t, how.env, "", append([]string{"serve", "--store", "memory:", "--addr", "127.0.0.1:0"}, how.args...)...)
				want := "tokens file " + path + " " + tt.want
				if r.code != ExitUsage || !strings.Contains(r.stderr, want) {
					t.Errorf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, ExitUsage, want)
				}
				if strings.Contains(r.stdout+r.stderr, tok) {
					t.Errorf("output shows a token: %s", r.stderr)
				}
			}
		})
	}
}

// TestServeLogHidesStorePassword: the listening line shows the store URL
// with its password replaced.
func TestServeLogHidesStorePassword(t *testing.T) {
	redisURL := startRedis(t)
	const pw = "Pw7SECRETpw"
	// The private server's default user takes any password.
	withPW := strings.Replace(redisURL, "redis://", "redis://default:"+pw+"@", 1)
	s := startServer(t, "--store", withPW)
	s.stop()
	logs := s.logs()
	if strings.Contains(logs, pw) {
		t.Fatalf("the log shows the store password:\n%s", logs)
	}
	if !strings.Contains(logs, `store="redis://default:xxxxx@`) {
		t.Fatalf("the listening line does not show the redacted store URL:\n%s", logs)
	}
}

// TestClientHidesCredentials: a token the transport could not send and a
// --server URL with a password are usage errors that show neither.
func TestClientHidesCredentials(t *testing.T) {
	const secret = "Cr3dSECRET"
	for _, tt := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"token with a line break", []string{"VARPLANE_SERVER=http://127.0.0.1:1", "VARPLANE_TOKEN=a\n" + secret}, nil, "--token (env VARPLANE_TOKEN) holds a control character"},
		{"token flag with a tab", nil, []string{"--server", "http://127.0.0.1:1", "--token", secret + "\t"}, "holds a control character"},
		{"server with a password", nil, []string{"--server", "ftp://u:" + secret + "@127.0.0.1:1"}, `not "ftp://u:xxxxx@127.0.0.1:1"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, tt.env, "", append([]string{"status", "--scope", "a.b"}, tt.args...)...)
			if r.code != ExitUsage || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, ExitUsage, tt.want)
			}
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("output shows the secret: %s", r.stderr)
			}
		})
	}
}
