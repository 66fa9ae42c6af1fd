package memory_test

import (
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/storetest"
)

var harness = storetest.Harness{
	Open: func(testing.TB) varplane.Store { return memory.New() },
}

func TestConformance(t *testing.T) {
	storetest.Run(t, harness)
}

func TestNotReplayer(t *testing.T) {
	if _, ok := any(memory.New()).(varplane.Replayer); ok {
		t.Error("the memory store implements Replayer; it keeps no log, replay must be store-unsupported")
	}
}

func BenchmarkHeadRead(b *testing.B)       { storetest.BenchmarkHeadRead(b, harness) }
func BenchmarkCreateActivate(b *testing.B) { storetest.BenchmarkCreateActivate(b, harness) }
func BenchmarkActivateP1(b *testing.B)     { storetest.BenchmarkActivate(b, harness, 1) }
func BenchmarkActivateP64(b *testing.B)    { storetest.BenchmarkActivate(b, harness, 64) }
