package access_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
)

// tokenMark is in every token of these tests: an error that contains it
// leaked a token. It has capitals and digits, so no error may quote it as
// an attribute name or a kind either.
const tokenMark = "Zq9Tok"

// TestParseTokensRefusals checks each refusal of the tokens file: the line
// it names and the reason, and that no error quotes a token.
func TestParseTokensRefusals(t *testing.T) {
	const head = "# tokens\n\nZq9Tok-ci\n" // lines 1-3 are fine
	for _, tt := range []struct {
		name string
		in   string
		line int
		want string // in the reason
	}{
		{"unknown attribute", head + "Zq9Tok-a kind=read\n", 4, `unknown attribute "kind"`},
		{"unknown attribute that may be a secret", head + "Zq9Tok-a Zq9Tok-b=x\n", 4, "word 2: unknown attribute"},
		{"attribute twice", head + "Zq9Tok-a kinds=read kinds=audit\n", 4, `attribute "kinds" given twice`},
		{"attribute without value", head + "Zq9Tok-a prefixes=\n", 4, `attribute "prefixes" has no value`},
		{"empty list item", head + "Zq9Tok-a kinds=read,,audit\n", 4, `attribute "kinds": item 2 is empty`},
		{"unknown kind", head + "Zq9Tok-a kinds=read,write\n", 4, `unknown kind "write"`},
		{"kind that may be a secret", head + "Zq9Tok-a kinds=Zq9Tok-b\n", 4, "kinds: item 1 is not a kind"},
		{"malformed prefix", head + "Zq9Tok-a prefixes=app.,a..b\n", 4, "prefixes: item 2 is not a scope"},
		{"a bare dot as prefix", head + "Zq9Tok-a prefixes=.\n", 4, "prefixes: item 1 is not a scope"},
		{"stray word", head + "Zq9Tok-a Zq9Tok-b\n", 4, "word 2 is not name=value"},
		{"stray word after attributes", head + "Zq9Tok-a kinds=read Zq9Tok-b\n", 4, "word 3 is not name=value"},
		{"attribute first", head + "kinds=read Zq9Tok-a\n", 4, "the token must come first"},
		{"token with '='", head + "Zq9Tok=a\n", 4, "may not contain '='"},
		{"duplicate token", head + "Zq9Tok-a\n# again\nZq9Tok-ci kinds=read\n", 6, "the token of line 3 is given again"},
		{"line too long", head + "Zq9Tok-a id=" + strings.Repeat("x", 70<<10) + "\n", 4, "longer than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := access.ParseTokens(strings.NewReader(tt.in))
			var te *access.TokenFileError
			if !errors.As(err, &te) {
				t.Fatalf("error %v (%T), want a *TokenFileError", err, err)
			}
			if te.Line != tt.line || !strings.Contains(te.Reason, tt.want) {
				t.Errorf("line %d, reason %q; want line %d and %q", te.Line, te.Reason, tt.line, tt.want)
			}
			if prefix := "tokens file line "; !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("error %q does not start with %q", err, prefix)
			}
			if strings.Contains(err.Error(), tokenMark) {
				t.Errorf("error %q quotes a token", err)
			}
		})
	}
}

// TestParseTokensAccepts checks the forms that are allowed, comments and
// lists included.
func TestParseTokensAccepts(t *testing.T) {
	in := "  # indented comment\n" +
		"a1 kinds=read,audit,mutate prefixes=*,app.,billing,x.y. # trailing\n" +
		"a2 id=ops roles=system:configuration # kinds=bogus is a comment\n" +
		"a3\t\tid=x\r\n"
	grants, err := access.ParseTokens(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(grants) != 3 {
		t.Fatalf("grants = %+v", grants)
	}
	if g := grants[0]; len(g.Kinds) != 3 || strings.Join(g.Prefixes, " ") != "* app. billing x.y." {
		t.Errorf("grant 1 = %+v", g)
	}
	if g := grants[1]; g.ID != "ops" || len(g.Roles) != 1 || g.Kinds != nil {
		t.Errorf("grant 2 = %+v", g)
	}
	if g := grants[2]; g.Token != "a3" || g.ID != "x" {
		t.Errorf("grant 3 = %+v", g)
	}
}

// TestLoadTokenFileNamesPathAndLine: the file's errors name the file and
// the line, and never the token.
func TestLoadTokenFileNamesPathAndLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("Zq9Tok-a\n\n# c\n\n\n\nZq9Tok-b kind=read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := access.LoadTokenFile(path)
	want := "tokens file " + path + ` line 7: unknown attribute "kind"`
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), tokenMark) {
		t.Fatalf("error %v, want %q…", err, want)
	}
}

var lineRE = regexp.MustCompile(`^tokens file line [1-9][0-9]*: `)

// FuzzParseTokens: whatever the file holds, ParseTokens does not panic, an
// error names a line, and no error contains a token. The harness puts
// tokenMark at the start of each line's first word (the token, on every
// line that has one), so that a leak is visible whatever the fuzzer writes.
func FuzzParseTokens(f *testing.F) {
	for _, s := range []string{
		"",
		"ci\n",
		"# c\nr kinds=read prefixes=agentic.,billing\n",
		"a id=x roles=r1,r2 kinds=audit\n",
		"a kind=read\n",
		"a b\n",
		"a kinds=\n",
		"a\na\n",
		"=a\n",
		"a prefixes=a..b,*\n",
		"a kinds=read,,audit # x\n",
		"a\r\nb\tkinds=mutate\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		lines := strings.Split(in, "\n")
		for i, l := range lines {
			trimmed := strings.TrimLeft(l, " \t\v\f\r")
			if trimmed != "" && !strings.HasPrefix(trimmed, "#") {
				lines[i] = l[:len(l)-len(trimmed)] + tokenMark + trimmed
			}
		}
		grants, err := access.ParseTokens(strings.NewReader(strings.Join(lines, "\n")))
		if err != nil {
			if !lineRE.MatchString(err.Error()) {
				t.Fatalf("error %q names no line", err)
			}
			if strings.Contains(err.Error(), tokenMark) {
				t.Fatalf("error %q contains a token", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, g := range grants {
			if !strings.HasPrefix(g.Token, tokenMark) || seen[g.Token] {
				t.Fatalf("grant %+v: a token that is not a line's first word, or twice", g)
			}
			seen[g.Token] = true
		}
		if _, err := access.Scoped(grants); err != nil {
			t.Fatalf("ParseTokens accepted grants that Scoped refuses: %v", err)
		}
	})
}

func TestScopedAuthorizer(t *testing.T) {
	auth, err := access.Scoped([]access.Grant{
		{Token: "reader", Kinds: []varplane.Kind{varplane.KindRead}},
		{Token: "agentic-ops", Kinds: []varplane.Kind{varplane.KindRead, varplane.KindMutate}, Prefixes: []string{"agentic.", "billing"}},
		{Token: "auditor", Kinds: []varplane.Kind{varplane.KindAudit}, Prefixes: []string{"*"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		token string
		kind  varplane.Kind
		scope varplane.Scope
		want  varplane.Code // "" = allowed
	}{
		{"reader", varplane.KindRead, "anything.at.all", ""},
		{"reader", varplane.KindMutate, "a.b", varplane.CodeForbidden},
		{"reader", varplane.KindAudit, "a.b", varplane.CodeForbidden},
		{"agentic-ops", varplane.KindMutate, "agentic.lanes.vinci", ""},
		{"agentic-ops", varplane.KindMutate, "agentic", varplane.CodeForbidden}, // "agentic." covers below only
		{"agentic-ops", varplane.KindMutate, "agenticx.y", varplane.CodeForbidden},
		{"agentic-ops", varplane.KindRead, "billing", ""},
		{"agentic-ops", varplane.KindRead, "billing.eu", ""},
		{"agentic-ops", varplane.KindRead, "billingx", varplane.CodeForbidden},
		{"agentic-ops", varplane.KindMutate, "", varplane.CodeForbidden}, // scope-less validate
		{"agentic-ops", varplane.KindAudit, "agentic.x", varplane.CodeForbidden},
		{"auditor", varplane.KindAudit, "z", ""},
		{"auditor", varplane.KindRead, "z", varplane.CodeForbidden},
		{"", varplane.KindRead, "z", varplane.CodeUnauthorized},
		{"nobody", varplane.KindRead, "z", varplane.CodeForbidden},
	}
	for _, tt := range tests {
		_, err := auth.Authorize(context.Background(), varplane.Access{Kind: tt.kind, Scope: tt.scope, Token: tt.token})
		if got := code(err); got != tt.want {
			t.Errorf("%s %s %q: code %q, want %q (%v)", tt.token, tt.kind, tt.scope, got, tt.want, err)
		}
	}
	if _, err := access.Scoped([]access.Grant{{Token: "x", Kinds: []varplane.Kind{"write"}}}); err == nil {
		t.Error("Scoped accepted an unknown kind")
	}
	// A refusal names the right and where it was asked for.
	for _, tt := range []struct {
		req  varplane.Access
		want string
	}{
		{varplane.Access{Kind: varplane.KindMutate, Scope: "a.b", Token: "reader"}, `the token does not allow mutate on "a.b"`},
		{varplane.Access{Kind: varplane.KindMutate, Scope: "agentic", Subtree: true, Token: "agentic-ops"}, `the token does not allow mutate on "agentic" and every scope below it`},
		{varplane.Access{Kind: varplane.KindAudit, Token: "agentic-ops"}, `the token does not allow audit on every scope`},
	} {
		if _, err := auth.Authorize(context.Background(), tt.req); varplane.ErrorMessage(err) != tt.want {
			t.Errorf("%+v: %q, want %q", tt.req, varplane.ErrorMessage(err), tt.want)
		}
	}
}

func TestParseTokens(t *testing.T) {
	in := `# tokens for the staging plane

ci-token
reader-token kinds=read prefixes=agentic.,billing   # trailing comment
alice-token id=alice roles=system:configuration:get,system:configuration:list kinds=read,audit
`
	grants, err := access.ParseTokens(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(grants) != 3 {
		t.Fatalf("grants = %+v, want 3", grants)
	}
	if g := grants[0]; g.Token != "ci-token" || g.Kinds != nil || g.Prefixes != nil {
		t.Errorf("grant 0 = %+v", g)
	}
	if g := grants[1]; g.Token != "reader-token" || jsonString(g.Kinds) != `["read"]` || jsonString(g.Prefixes) != `["agentic.","billing"]` {
		t.Errorf("grant 1 = %+v", g)
	}
	if g := grants[2]; g.ID != "alice" || jsonString(g.Roles) != `["system:configuration:get","system:configuration:list"]` || len(g.Kinds) != 2 {
		t.Errorf("grant 2 = %+v", g)
	}

	bad := []struct{ name, in string }{
		{"unknown attribute", "zq9 kind=read\n"},
		{"attribute twice", "zq9 kinds=read kinds=audit\n"},
		{"unknown kind", "zq9 kinds=write\n"},
		{"stray word", "zq9 other-secret\n"},
		{"empty value", "zq9 kinds=\n"},
		{"duplicate token", "zq9\nzq9\n"},
		{"attribute first", "kinds=read\n"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := access.ParseTokens(strings.NewReader(tt.in))
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), "zq9") || strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q echoes a token", err)
			}
		})
	}
}

func TestLoadTokenFile(t *testing.T) {
	path := t.TempDir() + "/tokens"
	if err := os.WriteFile(path, []byte("# comment\n\nalpha\nbeta kinds=read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	grants, err := access.LoadTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := access.Scoped(grants)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Authorize(context.Background(), varplane.Access{Kind: varplane.KindMutate, Scope: "a", Token: "alpha"}); err != nil {
		t.Errorf("alpha mutate: %v", err)
	}
	if _, err := auth.Authorize(context.Background(), varplane.Access{Kind: varplane.KindMutate, Scope: "a", Token: "beta"}); code(err) != varplane.CodeForbidden {
		t.Errorf("beta mutate: %v, want forbidden", err)
	}
	if _, err := access.LoadTokenFile(path + ".missing"); err == nil {
		t.Error("missing file loaded")
	}
}

// code is err's code, or "" for no error.
func code(err error) varplane.Code {
	if err == nil {
		return ""
	}
	return varplane.ErrorCode(err)
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
