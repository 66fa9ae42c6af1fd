package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/rollout"
)

// The routes of rollouts (docs/rollouts.md), under {base}/control:
//
//	POST /changes/{id}:rollout                 {strategy, gates?, note?} → 201 the rollout (mutate)
//	GET  /rollouts?scope=                      the rollouts in progress the caller may audit
//	GET  /rollouts/{id}                        one rollout, in progress or ended (audit)
//	POST /rollouts/{id}:pause|:resume|:abort   {note?} (mutate, and the policy's roles)
//	GET  /documents/{scope}/rollout            the scope's rollout in progress (audit); 404 none
//	GET  /documents/{scope}/wait?generation=&min=&timeout=
//	                                           how far a generation reached the live instances,
//	                                           held up to timeout (at most a minute) (audit)
func (h *Handler) rolloutRoutes(prefix string) {
	h.handleErr("GET "+prefix+"/documents/{scope}/wait", quiet, h.handleWait)
	h.handleErr("GET "+prefix+"/rollouts", loud, h.handleRollouts)
	h.handleErr("GET "+prefix+"/rollouts/{id}", loud, h.handleRollout)
	h.handleErr("POST "+prefix+"/rollouts/{id}", loud, h.handleRolloutControl)
	h.handleErr("GET "+prefix+"/documents/{scope}/rollout", loud, h.handleScopeRollout)
}

// rolloutBody is the body of POST /changes/{id}:rollout. The strategy is
// an object (rollout.Strategy) or its text ("linear:4:5m").
type rolloutBody struct {
	Strategy json.RawMessage `json:"strategy"`
	Gates    *control.Gates  `json:"gates"`
	Note     *string         `json:"note"`
}

// startRollout serves POST {base}/control/changes/{id}:rollout, as by
// (mutate on the change's scope, authorized by the caller).
func (h *Handler) startRollout(w http.ResponseWriter, r *http.Request, by varplane.Identity, changeID string) error {
	var b rolloutBody
	if err := h.readBodyMax(w, r, &b, 64<<10); err != nil {
		return err
	}
	strategy, err := parseStrategy(b.Strategy, h.limits)
	if err != nil {
		return err
	}
	req := control.StartRolloutRequest{Strategy: strategy, Note: wire.Optional(b.Note)}
	if b.Gates != nil {
		req.Gates = *b.Gates
	}
	ro, err := h.ctl.StartRollout(r.Context(), by, changeID, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, ro)
	return nil
}

// parseStrategy reads a strategy given as an object or as text, with the
// strict decoder of every body for the object (unknown or differently
// cased members are refused).
func parseStrategy(raw json.RawMessage, lim varplane.Limits) (rollout.Strategy, error) {
	if wire.IsNull(raw) {
		return rollout.Strategy{}, wire.BadRequest("strategy is required: linear:N:BAKE, exponential:FIRST%%:BAKE, labels:SEL;SEL:BAKE, or {kind, steps}")
	}
	var s rollout.Strategy
	if len(raw) > 0 && raw[0] == '"' {
		var text string // a JSON string: nothing for the strict decoder to check
		if err := json.Unmarshal(raw, &text); err != nil {
			return s, wire.BadRequest("strategy: %s", err.Error())
		}
		s, err := rollout.ParseStrategy(text)
		if err != nil {
			return s, wire.BadRequest("%s", err.Error())
		}
		return s, nil
	}
	if err := wire.DecodeStrict(raw, &s, lim); err != nil {
		return s, err
	}
	if err := s.Validate(); err != nil {
		return s, wire.BadRequest("strategy: %s", err.Error())
	}
	return s, nil
}

// handleRollouts serves GET {base}/control/rollouts?scope=.
func (h *Handler) handleRollouts(w http.ResponseWriter, r *http.Request) error {
	if _, err := h.identify(r); err != nil {
		return err
	}
	q, err := wire.SingleParams(r.URL.RawQuery, "scope")
	if err != nil {
		return err
	}
	scope, err := h.auditedScopeParam(r, q)
	if err != nil {
		return err
	}
	list, err := h.ctl.Rollouts(r.Context(), scope)
	if err != nil {
		return err
	}
	out := list[:0]
	for _, ro := range list {
		ok, err := h.mayAudit(r, ro.Scope, false)
		if err != nil {
			return err
		}
		if ok {
			out = append(out, ro)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"rollouts": out})
	return nil
}

// handleRollout serves GET {base}/control/rollouts/{id}.
func (h *Handler) handleRollout(w http.ResponseWriter, r *http.Request) error {
	ro, err := h.ctl.GetRollout(r.Context(), r.PathValue("id"))
	if err == nil {
		_, err = h.authorize(r, varplane.KindAudit, ro.Scope, false)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ro)
	return nil
}

// handleScopeRollout serves GET {base}/control/documents/{scope}/rollout.
func (h *Handler) handleScopeRollout(w http.ResponseWriter, r *http.Request) error {
	scope, err := h.auditPathScope(r)
	if err != nil {
		return err
	}
	list, err := h.ctl.Rollouts(r.Context(), scope)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		return varplane.Errorf(varplane.CodeNotFound, "scope %q has no rollout in progress", scope)
	}
	writeJSON(w, http.StatusOK, list[0])
	return nil
}

// handleRolloutControl serves POST {base}/control/rollouts/{id}:{op}: a
// person's pause, resume or abort, authorized as mutate on the rollout's
// scope (the service asks the policy's roles too).
func (h *Handler) handleRolloutControl(w http.ResponseWriter, r *http.Request) error {
	idop := r.PathValue("id")
	i := strings.LastIndexByte(idop, ':')
	if i < 0 {
		return varplane.Errorf(varplane.CodeMethodNotAllowed, "POST a control: /rollouts/{id}:pause, :resume or :abort")
	}
	id, op := idop[:i], idop[i+1:]
	ctx := r.Context()
	ro, err := h.ctl.GetRollout(ctx, id)
	if err != nil {
		return err
	}
	by, err := h.authorize(r, varplane.KindMutate, ro.Scope, false)
	if err != nil {
		return err
	}
	var b struct {
		Note *string `json:"note"`
	}
	if r.ContentLength != 0 || r.Header.Get("Content-Type") != "" {
		if err := h.readBodyMax(w, r, &b, 16<<10); err != nil {
			return err
		}
	}
	note := wire.Optional(b.Note)
	switch op {
	case "pause":
		ro, err = h.ctl.PauseRollout(ctx, by, id, note)
	case "resume":
		ro, err = h.ctl.ResumeRollout(ctx, by, id, note)
	case "abort":
		ro, err = h.ctl.AbortRollout(ctx, by, id, note)
	default:
		err = varplane.Errorf(varplane.CodeNotFound, "no rollout control %q (pause, resume, abort)", op)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ro)
	return nil
}

// handleWait serves GET {base}/control/documents/{scope}/wait: the
// progress of generation (required) toward min percent (100 when absent)
// of the live instances, held up to timeout (a Go duration, at most
// control.MaxWait; absent: answered at once). It answers 200 with the
// progress whether or not it is met; the caller decides.
func (h *Handler) handleWait(w http.ResponseWriter, r *http.Request) error {
	scope, err := h.auditPathScope(r)
	if err != nil {
		return err
	}
	q, err := wire.SingleParams(r.URL.RawQuery, "generation", "min", "timeout")
	if err != nil {
		return err
	}
	req := control.WaitRequest{Scope: scope, Min: 100}
	if req.Generation, err = wire.GenerationText("generation", q["generation"]); err != nil {
		return err
	}
	if s, ok := q["min"]; ok {
		if req.Min, err = strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64); err != nil {
			return wire.BadRequest("min must be a share such as 95 or 95%%")
		}
	}
	if s, ok := q["timeout"]; ok {
		if req.For, err = time.ParseDuration(s); err != nil {
			return wire.BadRequest("timeout must be a Go duration such as 30s")
		}
	}
	p, err := h.ctl.Wait(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}
