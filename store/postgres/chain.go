package postgres

import (
	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
)

// The chain (migration 0007): the commit functions link every event they
// append from the scope's chain head, which the heads row holds, under that
// row's lock. The Go side hands them each event's JSON without a link and
// its content (varplane.AppendChainContent), the bytes the hash covers; the
// database computes the hash with its own sha256 (about a microsecond a
// link, measured on this project's machine: 200,000 hashes of 470 bytes in
// 0.28 s against 0.07 s for building the same bytes) and appends seq and
// hash to the body.

// unlinked returns ev without the links a caller may have put on it (the
// store links, not the caller): ev itself when it carries none.
func unlinked(ev *varplane.Event) *varplane.Event {
	if ev.Seq == 0 && ev.Hash == "" {
		return ev
	}
	cp := *ev
	cp.Seq, cp.Hash = 0, ""
	return &cp
}

// unclosed is an event's JSON without its closing brace, as the commit
// functions take it (varplane_linked closes it after the link).
func unclosed(js []byte) string { return string(js[:len(js)-1]) }

// content returns the bytes ev's chain hash covers.
func content(ev *varplane.Event) []byte {
	return varplane.AppendChainContent(make([]byte, 0, 384+len(ev.Actor)+len(ev.Reason)+len(ev.RejectionReason)), ev)
}

// splitContent returns the content of ev, a deactivation without its
// cascade, split where the cascade member goes: RFC 8785 sorts members by
// name, and "actor" is the one member before "cascade". pre is the opening
// brace alone when the event has no actor; varplane_deactivate joins the
// parts around the cascade it chooses.
func splitContent(ev *varplane.Event) (pre, post []byte) {
	c := content(ev)
	n := 1 // after "{"
	if ev.Actor != "" {
		n = len(`{"actor":`) + len(canonical.AppendString(nil, ev.Actor))
	}
	return c[:n], c[n:]
}

// link is the chain link a commit function returned.
func link(seq *int64, hash *string) varplane.ChainHead {
	if seq == nil || hash == nil {
		return varplane.ChainHead{}
	}
	return varplane.ChainHead{Seq: uint64(*seq), Hash: *hash}
}
