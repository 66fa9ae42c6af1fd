package ui

import (
	"net/http"
	"net/url"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/rollout"
)

// The console's rollouts (docs/rollouts.md): the list of rollouts in
// progress, and one rollout's page — its steps with the share each serves,
// each gate's state and evidence, its events, and a person's controls
// (pause, resume, abort) — refreshed live while it runs. Every read and
// write goes through the control API with the session's token, so its
// authorization is the API's own.

type rolloutsView struct {
	Rollouts []rolloutRow
	Poll     int64
}

// rolloutRow is one rollout of the list.
type rolloutRow struct {
	control.Rollout
	StepN int    // the step in force, from 1
	Pct   string // the share it serves, as a percentage
}

// handleRollouts lists the rollouts in progress the token may audit
// (GET {base}/control/rollouts).
func (h *Handler) handleRollouts(w http.ResponseWriter, r *http.Request, q *request) {
	var out struct {
		Rollouts []control.Rollout `json:"rollouts"`
	}
	if err := q.api.Call(r.Context(), http.MethodGet, "/control/rollouts", nil, nil, &out); err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	v := &rolloutsView{Poll: h.opts.PollInterval.Milliseconds()}
	for _, ro := range out.Rollouts {
		v.Rollouts = append(v.Rollouts, rolloutRow{Rollout: ro, StepN: ro.Step + 1, Pct: rollout.Percent(ro.Share)})
	}
	h.render(w, r, q.s, http.StatusOK, "rollouts", "Rollouts", v)
}

// rolloutStep is one step of a rollout as the page shows it.
type rolloutStep struct {
	N        int
	What     string
	Bake     string
	Current  bool
	Done     bool
	Selector rollout.Selector
}

type rolloutView struct {
	R        control.Rollout
	Steps    []rolloutStep
	Share    string
	CanWrite bool
	// Poll refreshes the page's live regions while the rollout runs
	// (milliseconds; 0 once it ended): its steps and gates are not on the
	// watch stream of a user scope.
	Poll int64
}

// handleRollout shows one rollout (GET {base}/control/rollouts/{id}).
func (h *Handler) handleRollout(w http.ResponseWriter, r *http.Request, q *request) {
	id := r.URL.Query().Get("id")
	var v rolloutView
	if err := q.api.Call(r.Context(), http.MethodGet, "/control/rollouts/"+url.PathEscape(id), nil, nil, &v.R); err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	for i, st := range v.R.Strategy.Steps {
		what := rollout.Percent(st.Share) + " of the instances"
		if len(st.Selector) > 0 {
			what = "instances with " + st.Selector.String()
		}
		v.Steps = append(v.Steps, rolloutStep{N: i + 1, What: what, Bake: st.Bake.String(),
			Current: v.R.Serves() && i == v.R.Step, Done: i < v.R.Step || v.R.State == varplane.RolloutCompleted})
	}
	v.Share = rollout.Percent(v.R.Share)
	v.CanWrite = v.R.Serves() && h.may(r.Context(), q.s, varplane.KindMutate, v.R.Scope)
	if v.R.Serves() {
		v.Poll = h.opts.PollInterval.Milliseconds()
	}
	h.render(w, r, q.s, http.StatusOK, "rollout", "Rollout "+id, &v)
}

// handleRolloutControl pauses, resumes or aborts a rollout.
func (h *Handler) handleRolloutControl(w http.ResponseWriter, r *http.Request, q *request) {
	id, action := r.PostForm.Get("id"), r.PostForm.Get("action")
	back := h.prefix + "/rollout?id=" + url.QueryEscape(id)
	switch action {
	case "pause", "resume", "abort":
	default:
		h.redirect(w, r, q.s, back, &flash{Message: "Unknown action."})
		return
	}
	body := map[string]any{}
	if n := r.PostForm.Get("note"); n != "" {
		body["note"] = n
	}
	var ro control.Rollout
	if err := q.api.Call(r.Context(), http.MethodPost, "/control/rollouts/"+url.PathEscape(id)+":"+action, nil, body, &ro); err != nil {
		h.redirect(w, r, q.s, back, h.pageFlash(err))
		return
	}
	h.redirect(w, r, q.s, back, &flash{OK: true, Message: "Rollout " + id + " is " + ro.State + "."})
}
