package rollout_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/varplane/varplane/rollout"
)

// TestSelectedMonotone: a key selected at one share is selected at every
// larger one (a growing rollout never takes the revision back), and the
// answer depends on the key and the rollout only.
func TestSelectedMonotone(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		key := rapid.String().Draw(t, "key")
		id := rapid.String().Draw(t, "id")
		a := rapid.IntRange(-10, rollout.Full+10).Draw(t, "a")
		b := rapid.IntRange(a, rollout.Full+10).Draw(t, "b")
		if rollout.Selected(key, id, a) && !rollout.Selected(key, id, b) {
			t.Fatalf("selected at %d but not at %d", a, b)
		}
		if rollout.Bucket(key, id) != rollout.Bucket(key+"", id+"") {
			t.Fatal("not stable")
		}
		if !rollout.Selected(key, id, rollout.Full) || rollout.Selected(key, id, 0) {
			t.Fatal("Full selects everyone, 0 no one")
		}
	})
}

// TestSelectedShare: over many keys the share selected is close to the
// share asked for, and two rollouts select differently (the id salts).
func TestSelectedShare(t *testing.T) {
	const n = 20000
	for _, share := range []int{100, 1000, 2500, 5000, 9000} {
		got, both := 0, 0
		for i := range n {
			k := fmt.Sprintf("instance-%d", i)
			a := rollout.Selected(k, "ro-a", share)
			if a {
				got++
			}
			if a && rollout.Selected(k, "ro-b", share) {
				both++
			}
		}
		want := n * share / rollout.Full
		if d := got - want; d < -want/10-50 || d > want/10+50 {
			t.Errorf("share %d selected %d of %d, want about %d", share, got, n, want)
		}
		if share <= 2500 && both > want*share/rollout.Full*2+50 {
			t.Errorf("share %d: two rollouts agree on %d keys, more than chance", share, both)
		}
	}
}

func TestStrategies(t *testing.T) {
	cases := []struct {
		text   string
		shares []int
		err    bool
	}{
		{"linear:4:5m", []int{2500, 5000, 7500, 10000}, false},
		{"exponential:10%:1m", []int{1000, 2000, 4000, 8000, 10000}, false},
		{"labels:zone=a;tier=web,zone=b:10m", []int{0, 0, 10000}, false},
		{"linear:0:5m", nil, true},
		{"linear:40:5m", nil, true},
		{"linear:4:forever", nil, true},
		{"exponential:0%:1m", nil, true},
		{"labels:zone:1m", nil, true},
		{"canary:1:1m", nil, true},
		{"linear:4:9000h", nil, true},
	}
	for _, c := range cases {
		s, err := rollout.ParseStrategy(c.text)
		if (err != nil) != c.err {
			t.Errorf("%s: err %v", c.text, err)
			continue
		}
		if err != nil {
			continue
		}
		var shares []int
		for _, st := range s.Steps {
			shares = append(shares, st.Share)
		}
		if fmt.Sprint(shares) != fmt.Sprint(c.shares) {
			t.Errorf("%s: shares %v, want %v", c.text, shares, c.shares)
		}
	}
	bad := rollout.Strategy{Kind: rollout.KindLinear, Steps: []rollout.Step{{Share: 5000}, {Share: 2500}, {Share: rollout.Full}}}
	if bad.Validate() == nil {
		t.Error("a shrinking share validated")
	}
	last := rollout.Strategy{Kind: rollout.KindLinear, Steps: []rollout.Step{{Share: 5000, Bake: rollout.Duration(time.Minute)}}}
	if last.Validate() == nil {
		t.Error("a strategy that never reaches everyone validated")
	}
}

// TestTargetLabels: a label step selects the instances whose labels match
// it or an earlier step's, and every key read on them.
func TestTargetLabels(t *testing.T) {
	s, err := rollout.ParseStrategy("labels:zone=a;tier=web:1m")
	if err != nil {
		t.Fatal(err)
	}
	t0, t1 := s.Target("ro-x", 0), s.Target("ro-x", 1)
	a, web, other := map[string]string{"zone": "a"}, map[string]string{"tier": "web"}, map[string]string{"zone": "b"}
	if !t0.Instance("i", a) || t0.Instance("i", web) || !t1.Instance("i", a) || !t1.Instance("i", web) || t1.Instance("i", other) {
		t.Fatal("label steps select wrongly")
	}
	if !t1.Key("any-user", web) || t1.Key("any-user", other) {
		t.Fatal("keys read on a selected host are selected")
	}
	if !s.Target("ro-x", 2).Instance("i", other) {
		t.Fatal("the last step selects everyone")
	}
}

// FuzzParseStrategy: the parser never panics, and what it accepts
// validates.
func FuzzParseStrategy(f *testing.F) {
	for _, s := range []string{"linear:4:5m", "exponential:1%:2m", "labels:zone=a;tier=web:10m", "x", "labels::", "exponential:%:1m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := rollout.ParseStrategy(text)
		if err == nil {
			if err := s.Validate(); err != nil {
				t.Fatalf("%q parsed to an invalid strategy: %v", text, err)
			}
		}
	})
}
