package push_test

import (
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/push"
)

func TestParseHeld(t *testing.T) {
	got, err := push.ParseHeld([]string{"a.b@3", "x@y.z@7", "a.b@2"})
	if err != nil {
		t.Fatal(err)
	}
	if got["a.b"] != 3 || got["x@y.z"] != 7 || len(got) != 2 {
		t.Errorf("ParseHeld = %v", got)
	}
	for _, bad := range []string{"nogen", "@3", "a.b@", "a.b@-1", "a..b@1"} {
		if _, err := push.ParseHeld([]string{bad}); varplane.ErrorCode(err) != varplane.CodeBadRequest {
			t.Errorf("ParseHeld(%q) = %v, want bad-request", bad, err)
		}
	}
	if got, want := push.EventID("x@y.z", 7), "x@y.z@7"; got != want {
		t.Errorf("EventID = %q, want %q", got, want)
	}
}
