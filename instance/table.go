package instance

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/varplane/varplane"
)

// tableShards is the number of copy-on-write shards of a table.
const tableShards = 256

// table maps scopes to entries for the read path: a lookup is a hash, an
// atomic load and a map read, with no lock and no allocation (a sync.Map
// boxes its keys and costs about twice as much). Writers hold Cache.mu and
// replace one shard, so an install copies 1/256 of the table.
type table[T any] struct {
	seed   maphash.Seed
	shards [tableShards]atomic.Pointer[map[varplane.Scope]*entry[T]]
}

func newTable[T any]() *table[T] {
	t := &table[T]{seed: maphash.MakeSeed()}
	for i := range t.shards {
		m := map[varplane.Scope]*entry[T]{}
		t.shards[i].Store(&m)
	}
	return t
}

func (t *table[T]) shard(scope varplane.Scope) *atomic.Pointer[map[varplane.Scope]*entry[T]] {
	return &t.shards[maphash.String(t.seed, string(scope))%tableShards]
}

// Load returns scope's entry.
func (t *table[T]) Load(scope varplane.Scope) (*entry[T], bool) {
	e, ok := (*t.shard(scope).Load())[scope]
	return e, ok
}

// Store sets scope's entry; the caller holds Cache.mu.
func (t *table[T]) Store(scope varplane.Scope, e *entry[T]) {
	p := t.shard(scope)
	old := *p.Load()
	m := make(map[varplane.Scope]*entry[T], len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[scope] = e
	p.Store(&m)
}

// Delete removes scope; the caller holds Cache.mu.
func (t *table[T]) Delete(scope varplane.Scope) {
	p := t.shard(scope)
	old := *p.Load()
	if _, ok := old[scope]; !ok {
		return
	}
	m := make(map[varplane.Scope]*entry[T], len(old))
	for k, v := range old {
		if k != scope {
			m[k] = v
		}
	}
	p.Store(&m)
}

// Range calls fn for every entry until it returns false.
func (t *table[T]) Range(fn func(varplane.Scope, *entry[T]) bool) {
	for i := range t.shards {
		for k, v := range *t.shards[i].Load() {
			if !fn(k, v) {
				return
			}
		}
	}
}
