package replica

import (
	"bytes"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/jsontext"
)

// CheckOpen returns varplane.ErrClosed once closed is set.
func CheckOpen(closed *atomic.Bool) error {
	if closed.Load() {
		return varplane.ErrClosed
	}
	return nil
}

// CheckWritable returns varplane.ErrClosed once closed is set, and
// readOnly (the store's store-unsupported error) on a read-only store.
func CheckWritable(closed *atomic.Bool, isReadOnly bool, readOnly error) error {
	if err := CheckOpen(closed); err != nil {
		return err
	}
	if isReadOnly {
		return readOnly
	}
	return nil
}

// CheckScope returns the parse error of an invalid scope.
func CheckScope(scope varplane.Scope) error {
	if !scope.Valid() {
		_, err := varplane.ParseScope(string(scope))
		return err
	}
	return nil
}

// ReadOnlyError is the error every mutation of a read-only store answers.
func ReadOnlyError(store, what string) *varplane.Error {
	return &varplane.Error{
		Code:    varplane.CodeStoreUnsupported,
		Message: "this " + store + " store is read-only (" + what + "): mutations go through the control plane",
	}
}

// cascadeTail is the part of a descendant's deactivated event after its
// generations.
type cascadeTail struct {
	Actor      string    `json:"actor,omitempty"`
	OnBehalfOf string    `json:"onBehalfOf,omitempty"`
	Reason     string    `json:"reason"`
	Timestamp  time.Time `json:"timestamp"`
	// Unauthenticated follows the parent's mark (after the timestamp, in
	// varplane.Event's order).
	Unauthenticated bool `json:"unauthenticated,omitempty"`
}

// Deactivation checks the event of a subtree deactivation (its kind, and
// its generation: expected+1, filled in when zero) and encodes it for a
// server-side commit that writes every descendant's event itself. head is
// the event's JSON without its cascade and without its closing brace (the
// server adds the cascade); tail is what every descendant's event ends
// with after its own generations, ",\"actor\":…,\"reason\":\"cascade:<scope>\",\"timestamp\":…",
// without braces. check, when set, vets the event without its cascade.
func Deactivation(ev *varplane.Event, expected varplane.Generation, check func(*varplane.Event) error) (head, tail []byte, err error) {
	if ev.Kind != varplane.EventDeactivated {
		return nil, nil, varplane.Errorf(varplane.CodeBadRequest, "a subtree deactivation commits a %q event, not %q", varplane.EventDeactivated, ev.Kind)
	}
	if ev.Generation == 0 {
		ev.Generation = expected + 1
	}
	if ev.Generation != expected+1 {
		return nil, nil, varplane.Errorf(varplane.CodeBadRequest, "deactivation generation %d is not expected generation %d + 1", ev.Generation, expected)
	}
	base := *ev
	base.Cascade = nil
	if check != nil {
		if err := check(&base); err != nil {
			return nil, nil, err
		}
	}
	head, err = jsontext.Marshal(&base)
	if err != nil {
		return nil, nil, varplane.Errorf(varplane.CodeBadRequest, "event cannot be encoded: %v", err)
	}
	head = bytes.TrimSuffix(head, []byte("}"))
	tail, err = jsontext.Marshal(cascadeTail{Actor: ev.Actor, OnBehalfOf: ev.OnBehalfOf, Reason: varplane.CascadeReason(ev.Scope), Timestamp: ev.Timestamp, Unauthenticated: ev.Unauthenticated})
	if err != nil {
		return nil, nil, varplane.Errorf(varplane.CodeBadRequest, "event cannot be encoded: %v", err)
	}
	tail[0] = ','
	return head, tail[:len(tail)-1], nil
}
