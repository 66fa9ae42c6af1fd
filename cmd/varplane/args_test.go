package main

import (
	"errors"
	"flag"
	"io"
	"reflect"
	"testing"
)

// TestParseArgs: flags and positional arguments in any order, "--" ends the
// flags, too many positional arguments is a usage error.
func TestParseArgs(t *testing.T) {
	tests := []struct {
		args    []string
		max     int
		pos     []string
		scope   string
		verbose bool
		usage   bool
	}{
		{[]string{"a.b"}, 1, []string{"a.b"}, "", false, false},
		{[]string{"a.b", "--scope", "x", "-v"}, 1, []string{"a.b"}, "x", true, false},
		{[]string{"-v", "a.b", "c", "--scope=x"}, 2, []string{"a.b", "c"}, "x", true, false},
		{[]string{"--", "-v"}, 1, []string{"-v"}, "", false, false},
		{[]string{"a", "--", "b", "--scope", "y"}, 4, []string{"a", "b", "--scope", "y"}, "", false, false},
		{[]string{}, 0, nil, "", false, false},
		{[]string{"a", "b"}, 1, nil, "", false, true},
		{[]string{"--bogus"}, 1, nil, "", false, true},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		scope := fs.String("scope", "", "")
		verbose := fs.Bool("v", false, "")
		pos, err := parseArgs(fs, tt.args, tt.max)
		var ue *usageError
		if tt.usage {
			if !errors.As(err, &ue) {
				t.Errorf("parseArgs(%q) = %q, %v; want a usage error", tt.args, pos, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(pos, tt.pos) || *scope != tt.scope || *verbose != tt.verbose {
			t.Errorf("parseArgs(%q) = %q, %v (scope %q, v %v); want %q (scope %q, v %v)", tt.args, pos, err, *scope, *verbose, tt.pos, tt.scope, tt.verbose)
		}
	}
	var s string
	if err := scopeArg([]string{"a.b"}, &s); err != nil || s != "a.b" {
		t.Fatalf("scopeArg = %q, %v", s, err)
	}
	s = "other"
	if err := scopeArg([]string{"a.b"}, &s); err == nil {
		t.Fatal("a scope given twice, differently, is accepted")
	}
	s = "a.b"
	if err := scopeArg([]string{"a.b"}, &s); err != nil {
		t.Fatalf("the same scope twice: %v", err)
	}
}
