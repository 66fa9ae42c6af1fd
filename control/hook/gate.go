package hook

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/varplane/varplane/control"
)

// GateRequest is the body a check is posted as a rollout's gate
// (docs/rollouts.md): the check's name and the rollout's step.
type GateRequest struct {
	Check string `json:"check"`
	control.GateInput
}

// Gate asks the webhook about a rollout's step, as a control.Gate: it
// posts a GateRequest and reads the answer. Two answers are understood:
//   - a check result (Answer): no issue passes, each issue fails the gate
//     and is its evidence;
//   - a Prometheus query result ({"status":"success","data":{"result":[...]}},
//     as /api/v1/query answers, which takes a POST): an empty result
//     passes (no alert firing), each series fails it and is named in the
//     evidence. Point the check at a query such as
//     /api/v1/query?query=ALERTS{alertstate="firing"}.
//
// A call that brings neither (a failed call, another status, another
// body) is an error: the gate stays pending.
func (c *Check) Gate(ctx context.Context, in control.GateInput) (bool, []string, error) {
	body, err := c.post(ctx, GateRequest{Check: c.name, GateInput: in})
	if err != nil {
		return false, nil, err
	}
	if len(body) > MaxAnswerBytes {
		return false, nil, c.unavailable(fmt.Sprintf("answer is over %d bytes", MaxAnswerBytes), nil)
	}
	if pass, ev, ok := prometheusVerdict(body); ok {
		return pass, ev, nil
	}
	ans, err := ParseAnswer(body)
	if err != nil {
		return false, nil, c.unavailable("answer is not a check result nor a Prometheus query result ("+err.Error()+")", nil)
	}
	var ev []string
	for _, is := range ans.Issues {
		msg := is.Message
		if is.Path != "" {
			msg = is.Path + ": " + msg
		}
		ev = append(ev, fmt.Sprintf("check %s: %s", c.name, msg))
	}
	return len(ev) == 0, ev, nil
}

// prometheusVerdict reads a Prometheus query answer: ok false when body
// is not one.
func prometheusVerdict(body []byte) (pass bool, evidence []string, ok bool) {
	var ans struct {
		Status string `json:"status"`
		Data   *struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &ans) != nil || ans.Status != "success" || ans.Data == nil || ans.Data.ResultType == "" {
		return false, nil, false
	}
	for i, r := range ans.Data.Result {
		if i == control.MaxEvidence {
			break
		}
		name := r.Metric["alertname"]
		if name == "" {
			name = r.Metric["__name__"]
		}
		evidence = append(evidence, fmt.Sprintf("firing: %s %v", name, r.Metric))
	}
	return len(ans.Data.Result) == 0, evidence, true
}
