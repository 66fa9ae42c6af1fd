package instance

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
)

// overtakingStore answers the first State of scope as it was, after a
// commit (made by during) has overtaken the read: the store delivered the
// commit while the cache's cold load still held the older answer.
type overtakingStore struct {
	*memory.Store
	scope  varplane.Scope
	once   sync.Once
	during func()
}

func (s *overtakingStore) State(ctx context.Context, scope varplane.Scope) (*varplane.ScopeState, error) {
	st, err := s.Store.State(ctx, scope)
	if scope == s.scope {
		s.once.Do(s.during)
	}
	return st, err
}

// TestColdLoadOvertaken: a commit delivered while a cold load of its scope
// is reading the store is not lost: the load reads again once it has
// installed, so the cache serves the commit without waiting for a
// revalidation pass (five minutes apart here, on a clock that does not move).
func TestColdLoadOvertaken(t *testing.T) {
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	publish(t, mem, "app.a", `{"n":1}`)
	st := &overtakingStore{Store: mem, scope: "app.a"}
	var c *Cache[value]
	st.during = func() {
		publish(t, mem, "app.a", `{"n":2}`)
		// Until the cache has taken the commit in (or given it time to).
		deadline := time.Now().Add(500 * time.Millisecond)
		for time.Now().Before(deadline) {
			c.mu.Lock()
			l := c.loads["app.a"]
			taken := l != nil && l.again
			c.mu.Unlock()
			if taken {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	c, _ = newCache(t, st, newFakeClock(), func(o *Options[value]) { o.RevalidateInterval = MaxRevalidateInterval })
	ctx := context.Background()
	if _, err := c.Get(ctx, "app.a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the overtaking commit served", func() bool {
		d, err := c.Get(ctx, "app.a")
		return err == nil && d.Value.N == 2
	})
}
