package httpapi

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/jsontext"
)

// TestPublishAnswerIsWriteJSONs: the hand-encoded answer of a publish is
// byte for byte what wire.WriteJSON writes for it (jsontext.Marshal and a
// newline), for any scope text, generation, time and zone.
func TestPublishAnswerIsWriteJSONs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		zone := time.FixedZone("z", rapid.IntRange(-14*3600, 14*3600).Draw(t, "offset"))
		at := time.Unix(rapid.Int64Range(-62135596800, 253402300799).Draw(t, "sec"), rapid.Int64Range(0, 999_999_999).Draw(t, "nsec"))
		if rapid.Bool().Draw(t, "utc") {
			at = at.UTC()
		} else {
			at = at.In(zone)
		}
		res := varplane.PublishResult{
			ActivationResult: varplane.ActivationResult{
				Scope:       varplane.Scope(rapid.String().Draw(t, "scope")),
				Generation:  varplane.Generation(rapid.Uint64().Draw(t, "generation")),
				Revision:    varplane.Revision(rapid.String().Draw(t, "revision")),
				EffectiveAt: at,
			},
			Created: rapid.Bool().Draw(t, "created"),
		}
		got, ok := appendPublishResult(nil, res)
		want, err := jsontext.Marshal(res)
		if !ok || err != nil {
			if ok != (err == nil) {
				t.Fatalf("hand encoding ok=%v, Marshal error %v", ok, err)
			}
			return
		}
		if string(got) != string(want)+"\n" {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
}
