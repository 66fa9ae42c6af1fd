package httpapi

import (
	"net/http"
	"sort"
	"strconv"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// handleScopes serves GET {base}/admin/scopes?prefix=&after=&limit=: the
// scopes that have appeared in the log, sorted, at most limit (default
// varplane.DefaultScopesLimit, at most varplane.MaxScopesLimit) a page,
// each strictly after after=, and with prefix= the prefix itself and the
// scopes below it (as a watch prefix).
//
// Authorization filters per scope: each scope is listed only when the
// request may audit it (kind audit, as its status) or read it (kind read),
// so a token narrowed to some prefixes lists exactly the scopes it could
// inspect or read one by one, and no route tells it of the others. A scope
// the request may read but not audit is listed with what a read of it
// tells (active, generation, revision), without its last change (who made
// it is the audit log's). The request is first authenticated (kind
// identify, no scope): a missing token is refused 401 and an unknown one 403,
// never answered an empty page; an authorizer that fails fails the request
// closed.
func (h *Handler) handleScopes(w http.ResponseWriter, r *http.Request) {
	res, err := h.listScopes(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (h *Handler) listScopes(r *http.Request) (*varplane.ScopePage, error) {
	params, err := wire.SingleParams(r.URL.RawQuery, "prefix", "after", "limit", "internal")
	if err != nil {
		return nil, err
	}
	var prefix, after varplane.Scope
	if raw := params["prefix"]; raw != "" {
		if prefix, err = wire.ScopeField("prefix", raw); err != nil {
			return nil, err
		}
	}
	if raw := params["after"]; raw != "" {
		if after, err = wire.ScopeField("after", raw); err != nil {
			return nil, err
		}
	}
	limit := varplane.DefaultScopesLimit
	if raw, ok := params["limit"]; ok {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > varplane.MaxScopesLimit {
			return nil, wire.BadRequest("limit must be an integer from 1 to %d", varplane.MaxScopesLimit)
		}
		limit = n
	}
	// The project's own records (Scope.Internal) are listed when asked for,
	// or when the prefix is one of them.
	internal := prefix != "" && prefix.Internal()
	switch params["internal"] {
	case "", "false":
	case "true":
		internal = true
	default:
		return nil, wire.BadRequest("internal must be true or false")
	}
	// Authenticate first (kind identify), so that a missing or unknown token
	// is refused rather than answered an empty page.
	if _, err := h.authorize(r, varplane.KindIdentify, "", false); err != nil {
		return nil, err
	}
	ctx := r.Context()
	st := h.engine.Store()
	all, err := st.Scopes(ctx)
	if err != nil {
		return nil, err
	}
	// Scopes is sorted; start past after without a scan.
	i := 0
	if after != "" {
		i = sort.Search(len(all), func(i int) bool { return all[i] > after })
	} else if prefix != "" {
		i = sort.Search(len(all), func(i int) bool { return all[i] >= prefix })
	}
	res := &varplane.ScopePage{Items: []varplane.ScopeSummary{}}
	for ; i < len(all); i++ {
		sc := all[i]
		if !internal && sc.Internal() {
			continue
		}
		if prefix != "" && sc != prefix && !sc.IsDescendantOf(prefix) {
			if sc > prefix && !hasPrefixText(sc, prefix) {
				break // sorted: no later scope lies under prefix
			}
			continue
		}
		listed, audit, err := h.mayList(r, sc)
		if err != nil {
			return nil, err
		}
		if !listed {
			continue
		}
		if len(res.Items) == limit {
			res.Next = res.Items[len(res.Items)-1].Scope
			break
		}
		item, err := h.summarize(r, st, sc, audit)
		if err != nil {
			return nil, err
		}
		res.Items = append(res.Items, item)
	}
	return res, nil
}

// hasPrefixText reports whether s starts with p as text: scopes under p sort
// among those, so the first scope past p that does not is past them all.
func hasPrefixText(s, p varplane.Scope) bool {
	return len(s) >= len(p) && s[:len(p)] == p
}

// mayList reports whether the request may see sc in a listing (it may
// audit or read it) and whether it may audit it. An error other than
// forbidden (an authorizer that fails) fails the listing.
func (h *Handler) mayList(r *http.Request, sc varplane.Scope) (listed, audit bool, err error) {
	for _, kind := range [...]varplane.Kind{varplane.KindAudit, varplane.KindRead} {
		_, err := h.authorize(r, kind, sc, false)
		if err == nil {
			return true, kind == varplane.KindAudit, nil
		}
		if varplane.ErrorCode(err) != varplane.CodeForbidden {
			return false, false, err
		}
	}
	return false, false, nil
}

// summarize reads one scope's item: its state and, when audit, its last
// change from the head or, for a scope without one, from its history as of
// that state.
func (h *Handler) summarize(r *http.Request, st varplane.Store, sc varplane.Scope, audit bool) (varplane.ScopeSummary, error) {
	ctx := r.Context()
	s, err := st.State(ctx, sc)
	if err != nil {
		return varplane.ScopeSummary{}, err
	}
	item := varplane.ScopeSummary{Scope: sc, Generation: s.Generation}
	if hd := s.Head; hd != nil {
		item.Active, item.Revision = true, hd.Revision
		if !audit {
			return item, nil
		}
		item.LastChange = &varplane.ScopeLastChange{Kind: varplane.EventActivated, Generation: hd.Generation, Timestamp: hd.EffectiveAt, Actor: hd.Actor}
		return item, nil
	}
	if s.Generation == 0 || !audit {
		return item, nil
	}
	// The events without their documents: the last change is metadata.
	events, err := st.EventHistory(ctx, sc)
	if err != nil {
		return varplane.ScopeSummary{}, err
	}
	// The history is read after the state: a commit in between (the scope
	// published again) must not lend the item a last change its state
	// does not hold.
	for j := len(events) - 1; j >= 0; j-- {
		if ev := events[j]; (ev.Kind == varplane.EventDeactivated || ev.Kind == varplane.EventActivated) && ev.Generation <= s.Generation {
			item.LastChange = &varplane.ScopeLastChange{Kind: ev.Kind, Generation: ev.Generation, Timestamp: ev.Timestamp.UTC(), Actor: ev.Actor}
			break
		}
	}
	return item, nil
}
