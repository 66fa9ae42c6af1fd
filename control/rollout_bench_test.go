package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/instance"
	"github.com/varplane/varplane/rollout"
	"github.com/varplane/varplane/store/memory"
)

// BenchmarkRolloutStep measures the time from a rollout's step start (the
// rollouts record written by StartRollout) to every selected instance
// serving the new revision, at 1,000 embedded instances on one memory
// store, half of them selected. Each iteration starts a rollout of a new
// change and, untimed, aborts it.
func BenchmarkRolloutStep(b *testing.B) {
	const instances = 1000
	s := memory.New()
	b.Cleanup(func() { _ = s.Close() })
	guard := control.NewGuard()
	eng := varplane.NewEngine(s, varplane.Options{Owners: guard.Owners()})
	b.Cleanup(eng.Close)
	svc := control.New(eng, guard, control.Options{Instances: control.StoreInstances(eng)})
	ctx := context.Background()
	scope := varplane.Scope("app.flags")
	if _, err := eng.Publish(ctx, varplane.PublishRequest{Scope: scope, Document: json.RawMessage(`{"v":0}`), Actor: "seed"}); err != nil {
		b.Fatal(err)
	}
	fleet := make([]*instance.Cache[flags], instances)
	for i := range fleet {
		c, err := instance.New(ctx, s, instance.Options[flags]{Root: scope, Decode: decodeFlags, InstanceID: fmt.Sprintf("i%04d", i)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		fleet[i] = c
	}
	alice, bob := varplane.Identity{ID: "alice"}, varplane.Identity{ID: "bob"}
	strategy, _ := rollout.Linear(2, time.Hour)
	b.ResetTimer()
	for n := range b.N {
		b.StopTimer()
		doc := fmt.Sprintf(`{"v":%d}`, n+1)
		c, err := svc.Propose(ctx, alice, control.ProposeRequest{Scope: scope, Base: 1, Document: json.RawMessage(doc)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := svc.Approve(ctx, bob, c.ID, ""); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		ro, err := svc.StartRollout(ctx, alice, c.ID, control.StartRolloutRequest{Strategy: strategy})
		if err != nil {
			b.Fatal(err)
		}
		var selected []*instance.Cache[flags]
		for i, inst := range fleet {
			if rollout.Selected(fmt.Sprintf("i%04d", i), ro.ID, ro.Share) {
				selected = append(selected, inst)
			}
		}
		deadline := time.Now().Add(time.Minute)
		for _, inst := range selected {
			for {
				d, err := inst.Get(ctx, scope)
				if err == nil && d.Value["v"] == float64(n+1) {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("an instance did not serve the step within a minute")
				}
				time.Sleep(50 * time.Microsecond)
			}
		}
		b.StopTimer()
		if _, err := svc.AbortRollout(ctx, alice, ro.ID, ""); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(len(selected)), "selected")
		b.StartTimer()
	}
}
