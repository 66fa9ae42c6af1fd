package push

import (
	"strconv"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/internal/wire"
)

// The Server-Sent Events form of a subscription (docs/push.md), which
// httpapi's watch route writes: the frames of updates, the event ids and
// the resume positions they give back. The frame of a commit is built
// once and shared by every stream that sends it (Update.Shared).

// ParseHeld parses resume positions of the form <scope>@<generation>. The
// separator is the last '@', since a scope may itself contain '@'.
func ParseHeld(values []string) (map[varplane.Scope]varplane.Generation, error) {
	held := make(map[varplane.Scope]varplane.Generation, len(values))
	for _, v := range values {
		if err := AddHeld(held, v); err != nil {
			return nil, err
		}
	}
	return held, nil
}

// AddHeld adds one resume position to held, keeping the newest per scope.
func AddHeld(held map[varplane.Scope]varplane.Generation, v string) error {
	if v == "" {
		return nil
	}
	i := strings.LastIndexByte(v, '@')
	if i <= 0 {
		return wire.BadRequest("resume position must be <scope>@<generation>")
	}
	sc, err := wire.ScopeField("since", v[:i])
	if err != nil {
		return err
	}
	g, err := wire.GenerationText("since", v[i+1:])
	if err != nil {
		return err
	}
	if cur, ok := held[sc]; !ok || g > cur {
		held[sc] = g
	}
	return nil
}

// EventID returns the SSE event id of a scope's state: <scope>@<generation>.
func EventID(scope varplane.Scope, gen varplane.Generation) string {
	return string(scope) + "@" + strconv.FormatUint(uint64(gen), 10)
}

// FilterOf returns the filter of a watch request's targets: keys and groups
// match exactly, Subtree targets are prefixes.
func FilterOf(targets []wire.Target) Filter {
	var f Filter
	for _, t := range targets {
		switch {
		case t.Subtree:
			f.Prefixes = append(f.Prefixes, t.Scope)
		case t.Scope.IsGroup():
			f.Groups = append(f.Groups, t.Scope)
		default:
			f.Keys = append(f.Keys, t.Scope)
		}
	}
	return f
}

// CloseFrame is the event that ends a stream: {"reason": Reason(err)}.
func CloseFrame(err error) []byte {
	data := append([]byte(`{"reason":`), jsontext.AppendString(nil, Reason(err))...)
	return wire.AppendEvent(nil, "close", "", append(data, '}'))
}

// SSEFrame returns the event for u, computed once per commit and shared.
func (u *Update) SSEFrame() []byte {
	return u.Shared(SlotSSE, func(u *Update) any { return buildSSEFrame(u) }).([]byte)
}

// buildSSEFrame writes the event of u: "head" with the scope spliced into
// the head's read body as its first member, or "no-head" with the scope and
// generation. The data is written in place (one allocation for the frame).
func buildSSEFrame(u *Update) []byte {
	id := EventID(u.Scope, u.Generation)
	var body []byte
	event := "no-head"
	if u.Head != nil {
		body, event = u.Head.ReadBody(), "head"
	}
	// "event: " event "\n" "id: " id "\n" "data: " data "\n\n", data being
	// at most the body, the scope escaped and 40 bytes of ours.
	size := len("event: \nid: \ndata: \n\n") + len(event) + len(id) + len(body) + 2*len(u.Scope) + 40
	return wire.AppendEventWith(make([]byte, 0, size), event, id, func(b []byte) []byte {
		b = append(b, `{"scope":`...)
		b = jsontext.AppendString(b, string(u.Scope))
		switch {
		case u.Head == nil:
			b = append(b, `,"generation":`...)
			b = strconv.AppendUint(b, uint64(u.Generation), 10)
			return append(b, '}')
		case len(body) > 2: // body is a JSON object: splice "scope" in as its first member
			b = append(b, ',')
			return append(b, body[1:]...)
		}
		return append(b, '}')
	})
}
