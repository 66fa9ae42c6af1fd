package wire

import (
	"reflect"
	"strings"
	"testing"

	"github.com/varplane/varplane"
)

// TestTargets covers the batch and watch forms, the everything form (all=1)
// and its refusals: an empty prefix is never read as everything.
func TestTargets(t *testing.T) {
	tests := []struct {
		name     string
		query    string
		prefixes bool
		want     []Target
		msg      string // substring of the bad-request message; "" for success
	}{
		{"key and group", "key=a.b&group=g", false, []Target{{Scope: "a.b"}, {Scope: "g"}}, ""},
		{"prefix", "prefix=a&key=a.b", true, []Target{{Scope: "a", Subtree: true}, {Scope: "a.b"}}, ""},
		{"prefix ignored by batch", "prefix=a&key=a.b", false, []Target{{Scope: "a.b"}}, ""},
		{"all", "all=1", true, []Target{Everything}, ""},
		{"all with since", "all=1&since=a.b@3", true, []Target{Everything}, ""},
		{"all ignored by batch", "all=1", false, nil, "at least one key or group"},
		{"all with a key", "all=1&key=a.b", true, nil, "without key"},
		{"all twice", "all=1&all=1", true, nil, "all=1"},
		{"all=true", "all=true", true, nil, "all=1"},
		{"empty prefix", "prefix=", true, nil, "all=1"},
		{"nothing, watch", "", true, nil, "prefix parameter is required (or all=1"},
		{"nothing, batch", "", false, nil, "at least one key or group"},
		{"key without dot", "key=a", false, nil, "must contain a dot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Targets(tt.query, tt.prefixes)
			if tt.msg != "" {
				if varplane.ErrorCode(err) != varplane.CodeBadRequest || !strings.Contains(varplane.ErrorMessage(err), tt.msg) {
					t.Fatalf("Targets(%q) = %v, %v; want bad-request containing %q", tt.query, got, err, tt.msg)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Targets(%q) = %v, %v; want %v", tt.query, got, err, tt.want)
			}
		})
	}
	if !Everything.IsEverything() || (Target{Scope: "a", Subtree: true}).IsEverything() {
		t.Fatal("IsEverything")
	}
}
