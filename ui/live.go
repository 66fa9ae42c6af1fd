package ui

import (
	"context"
	"net/url"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// liveEverything is the watch query of the scopes page's live stream: every
// scope (all=1) for a token that may read them all; for a token narrowed to
// some prefixes (a read-only session on its own scopes), which all=1 would
// refuse, the roots of the scopes it may list, each as a prefix (at most
// wire.MaxBatchScopes of them). It reports false when there is none.
func (h *Handler) liveEverything(ctx context.Context, q *request) (string, bool) {
	if _, err := varplane.Authorize(ctx, h.opts.Authorizer, varplane.Access{Kind: varplane.KindRead, Scope: wire.Everything.Scope, Subtree: true, Token: q.s.token}); err == nil {
		return "all=1", true
	}
	all, err := q.api.AllScopes(ctx, "")
	if err != nil {
		return "", false
	}
	v := url.Values{}
	seen := map[varplane.Scope]bool{}
	for _, it := range all {
		// The root when the token may read its whole subtree, else the
		// scope itself.
		p := it.Scope.Root()
		if _, err := varplane.Authorize(ctx, h.opts.Authorizer, varplane.Access{Kind: varplane.KindRead, Scope: p, Subtree: true, Token: q.s.token}); err != nil {
			p = it.Scope
			if _, err := varplane.Authorize(ctx, h.opts.Authorizer, varplane.Access{Kind: varplane.KindRead, Scope: p, Subtree: true, Token: q.s.token}); err != nil {
				continue
			}
		}
		if seen[p] || len(seen) == wire.MaxBatchScopes {
			continue
		}
		seen[p] = true
		v.Add("prefix", string(p))
	}
	return v.Encode(), len(seen) > 0
}
