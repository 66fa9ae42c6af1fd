// Package rollout is the pure part of progressive delivery
// (docs/rollouts.md): a rollout's strategy (its steps, each a share of the
// fleet or a label selector, with a bake time) and the stable selection
// every reader of a rollout shares — the embedded instance (by its
// instance id, or by an entity key per request), the read replicas, the
// control plane's gates and any other endpoint that answers for a
// targeting key (OpenFeature's OFREP) call Selected, so one key gets one
// answer everywhere.
//
// It imports nothing of varplane: it is a leaf, so every layer may use it.
package rollout

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Full is the share of a step that selects everyone: shares are counted
// in basis points (1/100 of a percent), 0 to Full.
const Full = 10000

// Bounds of a strategy.
const (
	// MaxSteps bounds the steps of one strategy.
	MaxSteps = 32
	// MaxBake bounds one step's bake time.
	MaxBake = 7 * 24 * time.Hour
	// MaxSelectorLabels bounds the labels one selector names.
	MaxSelectorLabels = 16
	// MaxLabelBytes bounds a label's key or value.
	MaxLabelBytes = 256
)

// Bucket returns the stable bucket (0 to Full-1) of key in rollout id:
// the first eight bytes of SHA-256 over id, a zero byte and key, modulo
// Full. It depends on nothing but its arguments, so every process agrees;
// the rollout id salts it, so a key's bucket in one rollout tells nothing
// of its bucket in another.
func Bucket(key, id string) int {
	h := sha256.New()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return int(binary.BigEndian.Uint64(h.Sum(sum[:0])[:8]) % Full)
}

// Selected reports whether key (an instance id, or an entity key such as
// a user id for a per-request read) is selected by rollout id at share
// basis points: its Bucket is below share. It is monotone in share: a key
// selected at one share is selected at every larger one, so a rollout that
// grows never takes the new revision back from anyone. A share of Full or
// more selects every key, 0 or less none.
func Selected(key, id string, share int) bool {
	if share >= Full {
		return true
	}
	if share <= 0 {
		return false
	}
	return Bucket(key, id) < share
}

// Selector is a set of labels an instance must all carry (key=value) to be
// selected by a label step.
type Selector map[string]string

// Matches reports whether labels carry every label of s. An empty
// selector matches nothing (a step that selects everyone says so with a
// share of Full).
func (s Selector) Matches(labels map[string]string) bool {
	if len(s) == 0 {
		return false
	}
	for k, v := range s {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// String writes s as "k=v,k=v" in key order.
func (s Selector) String() string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + s[k]
	}
	return strings.Join(parts, ",")
}

// ParseSelector reads "k=v,k=v".
func ParseSelector(text string) (Selector, error) {
	s := Selector{}
	for _, part := range strings.Split(text, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("selector %q: want key=value[,key=value]", text)
		}
		if _, dup := s[k]; dup {
			return nil, fmt.Errorf("selector %q: label %q is named twice", text, k)
		}
		s[k] = v
	}
	return s, s.validate()
}

func (s Selector) validate() error {
	if len(s) > MaxSelectorLabels {
		return fmt.Errorf("a selector names at most %d labels", MaxSelectorLabels)
	}
	for k, v := range s {
		if k == "" || v == "" || len(k) > MaxLabelBytes || len(v) > MaxLabelBytes {
			return fmt.Errorf("selector label %q=%q: want a key and a value of 1 to %d bytes", k, v, MaxLabelBytes)
		}
	}
	return nil
}

// Step is one step of a strategy: from its start, the instances (and
// entity keys) Selected at Share, and the instances whose labels match
// Selector or any earlier step's, serve the new revision; the step lasts
// Bake, during which the gates are evaluated.
type Step struct {
	Share    int      `json:"share"`
	Selector Selector `json:"selector,omitempty"`
	Bake     Duration `json:"bake"`
}

// The kinds of strategy.
const (
	KindLinear      = "linear"
	KindExponential = "exponential"
	KindLabels      = "labels"
)

// Strategy is a rollout's steps, in order. The last step selects everyone
// (Share Full): the scope's head moves to the new generation once it has
// baked.
type Strategy struct {
	Kind  string `json:"kind"`
	Steps []Step `json:"steps"`
}

// Linear returns n steps of equal growth (100/n percent each), each baking
// bake.
func Linear(n int, bake time.Duration) (Strategy, error) {
	if n < 1 || n > MaxSteps {
		return Strategy{}, fmt.Errorf("a linear strategy has 1 to %d steps", MaxSteps)
	}
	s := Strategy{Kind: KindLinear}
	for i := 1; i <= n; i++ {
		s.Steps = append(s.Steps, Step{Share: Full * i / n, Bake: Duration(bake)})
	}
	return s, s.Validate()
}

// Exponential returns steps that start at first basis points and double
// until everyone, each baking bake.
func Exponential(first int, bake time.Duration) (Strategy, error) {
	if first <= 0 || first > Full {
		return Strategy{}, fmt.Errorf("an exponential strategy starts at a share of 1 to %d basis points", Full)
	}
	s := Strategy{Kind: KindExponential}
	for share := first; ; share *= 2 {
		if share >= Full {
			s.Steps = append(s.Steps, Step{Share: Full, Bake: Duration(bake)})
			break
		}
		s.Steps = append(s.Steps, Step{Share: share, Bake: Duration(bake)})
	}
	return s, s.Validate()
}

// Labels returns one step per selector, then a last step for everyone,
// each baking bake.
func Labels(selectors []Selector, bake time.Duration) (Strategy, error) {
	s := Strategy{Kind: KindLabels}
	for _, sel := range selectors {
		s.Steps = append(s.Steps, Step{Selector: sel, Bake: Duration(bake)})
	}
	s.Steps = append(s.Steps, Step{Share: Full, Bake: Duration(bake)})
	return s, s.Validate()
}

// Validate checks a strategy: a known kind, 1 to MaxSteps steps, shares
// that never shrink, selectors only in a labels strategy, bakes of 0 to
// MaxBake, and a last step of Share Full.
func (s Strategy) Validate() error {
	switch s.Kind {
	case KindLinear, KindExponential, KindLabels:
	default:
		return fmt.Errorf("strategy kind %q: want linear, exponential or labels", s.Kind)
	}
	if len(s.Steps) < 1 || len(s.Steps) > MaxSteps {
		return fmt.Errorf("a strategy has 1 to %d steps", MaxSteps)
	}
	prev := 0
	for i, st := range s.Steps {
		if st.Share < 0 || st.Share > Full || st.Share < prev {
			return fmt.Errorf("step %d: share %d: want %d to %d basis points, never below the step before", i+1, st.Share, prev, Full)
		}
		prev = st.Share
		if st.Bake < 0 || time.Duration(st.Bake) > MaxBake {
			return fmt.Errorf("step %d: bake %v: want 0 to %v", i+1, time.Duration(st.Bake), MaxBake)
		}
		if len(st.Selector) > 0 && s.Kind != KindLabels {
			return fmt.Errorf("step %d: a selector belongs to a labels strategy", i+1)
		}
		if err := st.Selector.validate(); err != nil {
			return fmt.Errorf("step %d: %v", i+1, err)
		}
		if s.Kind == KindLabels && i < len(s.Steps)-1 && len(st.Selector) == 0 {
			return fmt.Errorf("step %d: a labels step names a selector", i+1)
		}
	}
	if s.Steps[len(s.Steps)-1].Share != Full {
		return fmt.Errorf("the last step selects everyone (share %d)", Full)
	}
	return nil
}

// Target is what a reader needs of a running rollout's current step to
// decide whether it serves the new revision: the rollout id (the hash's
// salt), the share, and the selectors of this step and the steps before.
type Target struct {
	ID        string     `json:"rollout"`
	Share     int        `json:"share"`
	Selectors []Selector `json:"selectors,omitempty"`
}

// Target returns the target of step i (0-based) of rollout id.
func (s Strategy) Target(id string, i int) Target {
	t := Target{ID: id}
	for j := 0; j <= i && j < len(s.Steps); j++ {
		t.Share = s.Steps[j].Share
		if len(s.Steps[j].Selector) > 0 {
			t.Selectors = append(t.Selectors, s.Steps[j].Selector)
		}
	}
	return t
}

// Instance reports whether the instance id, carrying labels, is selected:
// Selected by the share, or matched by one of the selectors.
func (t Target) Instance(id string, labels map[string]string) bool {
	if Selected(id, t.ID, t.Share) {
		return true
	}
	for _, s := range t.Selectors {
		if s.Matches(labels) {
			return true
		}
	}
	return false
}

// Key reports whether an entity key read on an instance carrying labels
// is selected: by the share for the key, or because the instance itself
// is matched by a selector (a label step selects hosts, so every key read
// on them).
func (t Target) Key(key string, labels map[string]string) bool {
	if Selected(key, t.ID, t.Share) {
		return true
	}
	for _, s := range t.Selectors {
		if s.Matches(labels) {
			return true
		}
	}
	return false
}

// Duration is a time.Duration written in JSON as Go's duration text
// ("90s", "5m").
type Duration time.Duration

// MarshalJSON writes d as text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads text ("5m"); a number is refused.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is text such as \"5m\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ParseStrategy reads a strategy as the CLI writes it: "linear:N:BAKE",
// "exponential:FIRST%:BAKE" or "labels:SEL;SEL:BAKE" (each SEL k=v,k=v),
// for example "linear:4:5m", "exponential:1%:2m", "labels:zone=a;tier=web:10m".
func ParseStrategy(text string) (Strategy, error) {
	kind, rest, _ := strings.Cut(text, ":")
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return Strategy{}, fmt.Errorf("strategy %q: want linear:N:BAKE, exponential:FIRST%%:BAKE or labels:SEL;SEL:BAKE", text)
	}
	arg, bakeText := rest[:i], rest[i+1:]
	bake, err := time.ParseDuration(bakeText)
	if err != nil {
		return Strategy{}, fmt.Errorf("strategy %q: bake: %v", text, err)
	}
	switch kind {
	case KindLinear:
		var n int
		if _, err := fmt.Sscanf(arg, "%d", &n); err != nil || fmt.Sprint(n) != arg {
			return Strategy{}, fmt.Errorf("strategy %q: want a step count", text)
		}
		return Linear(n, bake)
	case KindExponential:
		pct, ok := strings.CutSuffix(arg, "%")
		var f float64
		if _, err := fmt.Sscanf(pct, "%g", &f); !ok || err != nil || f <= 0 || f > 100 {
			return Strategy{}, fmt.Errorf("strategy %q: want a first share such as 1%%", text)
		}
		return Exponential(int(f*100+0.5), bake)
	case KindLabels:
		var sels []Selector
		for _, p := range strings.Split(arg, ";") {
			sel, err := ParseSelector(p)
			if err != nil {
				return Strategy{}, err
			}
			sels = append(sels, sel)
		}
		return Labels(sels, bake)
	}
	return Strategy{}, fmt.Errorf("strategy %q: kind %q: want linear, exponential or labels", text, kind)
}

// Percent writes a share in basis points as a percentage ("25%", "0.50%").
func Percent(share int) string {
	if share%100 == 0 {
		return fmt.Sprintf("%d%%", share/100)
	}
	return fmt.Sprintf("%.2f%%", float64(share)/100)
}

// String writes d as Go's duration text ("5m0s").
func (d Duration) String() string { return time.Duration(d).String() }
