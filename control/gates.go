package control

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/varplane/varplane"
)

// Gate is an external check a rollout asks during each step's bake (a
// webhook the operator names, control/hook; a Prometheus alert query):
// pass false fails the gate and rolls the rollout back, with evidence; an
// error means the check brought no verdict, and the gate stays pending
// (the step does not move on).
type Gate interface {
	Name() string
	Gate(ctx context.Context, in GateInput) (pass bool, evidence []string, err error)
}

// GateInput is what a gate is asked about: the rollout, its scope, the
// new revision, and the step in force.
type GateInput struct {
	Rollout  string              `json:"rollout"`
	Change   string              `json:"change"`
	Scope    varplane.Scope      `json:"scope"`
	Revision varplane.Revision   `json:"revision"`
	Base     varplane.Generation `json:"base"`
	Step     int                 `json:"step"`
	Steps    int                 `json:"steps"`
	Share    int                 `json:"share"`
}

// The gates every rollout has, by name; each external check is its own
// gate, named "check:" and the check's name.
const (
	GateRejections = "rejections"
	GateLag        = "lag"
)

// evaluateGates decides r's gates at now:
//   - rejections: instances whose report of the rollout (a canary report
//     filed under the rollout's id) carries a decode failure, more than
//     Gates.MaxRejections of them fail it (each instance counts once; a
//     report filed over HTTP counts only as the canary evidence rules
//     say, judge);
//   - lag: the selected instances with a fresh status that holds the
//     scope and does not yet serve the revision; pending while the step is
//     younger than Gates.MaxLag, failed past it. A status filed over HTTP
//     (a Go SDK consumer, which serves no rollout) is not counted;
//   - check:NAME: each external check, failed when it answers fail,
//     pending when it brings no verdict.
func (svc *Service) evaluateGates(ctx context.Context, r Rollout, now time.Time, statuses []InstanceStatus) []GateState {
	out := []GateState{svc.rejectionGate(ctx, r, now), lagGate(r, now, statuses)}
	for _, name := range r.Gates.Checks {
		g := GateState{Gate: "check:" + name, State: GatePending, At: now}
		chk, ok := svc.opts.Gates[name]
		if !ok {
			g.Evidence = []string{fmt.Sprintf("no check %q runs on this control plane", name)}
			out = append(out, g)
			continue
		}
		pass, ev, err := chk.Gate(ctx, GateInput{Rollout: r.ID, Change: r.Change, Scope: r.Scope, Revision: r.Revision, Base: r.Base,
			Step: r.Step + 1, Steps: r.Steps, Share: r.Share})
		switch {
		case err != nil:
			g.Evidence = []string{varplane.ErrorMessage(err)}
		case pass:
			g.State = GatePass
		default:
			g.State = GateFail
			g.Evidence = ev
			if len(g.Evidence) == 0 {
				g.Evidence = []string{"the check answered fail"}
			}
		}
		g.Evidence = capEvidence(g.Evidence)
		out = append(out, g)
	}
	return out
}

func capEvidence(ev []string) []string {
	if len(ev) > MaxEvidence {
		ev = append(slices.Clip(ev[:MaxEvidence-1]), fmt.Sprintf("and %d more", len(ev)-MaxEvidence+1))
	}
	for i, e := range ev {
		if len(e) > 512 {
			ev[i] = e[:512] + "…"
		}
	}
	return ev
}

// rejectionGate judges the reports filed under the rollout's id.
func (svc *Service) rejectionGate(ctx context.Context, r Rollout, now time.Time) GateState {
	g := GateState{Gate: GateRejections, State: GatePass, At: now}
	if svc.opts.Instances == nil {
		return g
	}
	reports, err := svc.opts.Instances.Reports(ctx, r.ID)
	if err != nil {
		g.State, g.Evidence = GatePending, []string{"the reports could not be read: " + varplane.ErrorMessage(err)}
		return g
	}
	seen := map[string]bool{}
	for _, rep := range judge(&Change{}, reports) {
		if rep.Discount != "" || rep.Window != r.ID || (rep.FiledAs != "" && rep.FiledAs != rep.Instance) || seen[rep.Instance] {
			continue
		}
		if rep.CandidateError == "" && rep.Errors <= 0 {
			continue
		}
		seen[rep.Instance] = true
		g.Evidence = append(g.Evidence, fmt.Sprintf("instance %q: %s", rep.Instance, rep.CandidateError))
	}
	slices.Sort(g.Evidence)
	if len(seen) > r.Gates.MaxRejections {
		g.State = GateFail
		g.Evidence = append([]string{fmt.Sprintf("%d instances rejected the revision (at most %d may)", len(seen), r.Gates.MaxRejections)}, g.Evidence...)
	}
	g.Evidence = capEvidence(g.Evidence)
	return g
}

// lagGate judges the selected instances' statuses.
func lagGate(r Rollout, now time.Time, statuses []InstanceStatus) GateState {
	g := GateState{Gate: GateLag, State: GatePass, At: now}
	t := r.Target()
	var lagging []string
	for _, s := range statuses {
		if now.Sub(s.At) > StatusFresh || s.Identity != "" {
			continue // stale, or an SDK consumer: it serves no rollout
		}
		if _, holds := s.Installed[r.Scope]; !holds {
			continue
		}
		if !t.Instance(s.Instance, s.Labels) {
			continue
		}
		if s.Serving[r.Scope] == r.Revision || s.Installed[r.Scope] > r.Base {
			continue
		}
		lagging = append(lagging, s.Instance)
	}
	if len(lagging) == 0 {
		return g
	}
	age := now.Sub(r.StepStartedAt)
	g.State = GatePending
	if age > r.Gates.maxLag() {
		g.State = GateFail
	}
	// The evidence names no age: it changes only when the instances do,
	// so a pending gate is not written again at every pass.
	ev := []string{fmt.Sprintf("%d selected instances do not serve revision %s (each has %v from the step's start)", len(lagging), r.Revision, r.Gates.maxLag())}
	for _, id := range lagging {
		ev = append(ev, fmt.Sprintf("instance %q", id))
	}
	g.Evidence = capEvidence(ev)
	return g
}
