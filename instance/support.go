package instance

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/internal/atomicfile"
)

// Clock is the cache's time source, so tests can drive time.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
	NewTicker(d time.Duration) Ticker
}

// Ticker is the part of time.Ticker the cache uses.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (systemClock) NewTicker(d time.Duration) Ticker       { return sysTicker{time.NewTicker(d)} }

type sysTicker struct{ t *time.Ticker }

func (t sysTicker) C() <-chan time.Time { return t.t.C }
func (t sysTicker) Stop()               { t.t.Stop() }

// counters are the cache's monotonic counters and gauges.
type counters struct {
	coldLoads, localLoads, coldTimeouts, readErrors atomic.Uint64
	localRefused                                    atomic.Uint64
	installs, evictions, absentHits, decodeErrors   atomic.Uint64
	invalidations, dropped, passes, confirms        atomic.Uint64
	changed, confirmErrors, disappeared             atomic.Uint64
	regressions, abandoned, slowDecodes             atomic.Uint64
	heartbeats, heartbeatErrors                     atomic.Uint64
	maxLag, lastPassNanos                           atomic.Int64
	lagHist                                         [len(LagBuckets) + 1]atomic.Uint64
}

// Stats is a copy of the cache's counters and gauges for a metrics
// exporter. No figure is per scope, so their number is fixed.
type Stats struct {
	Ready                                       bool
	Installed                                   int // documents held (absent scopes not counted)
	ColdLoads, LocalLoads, ColdTimeouts         uint64
	LocalRefused                                uint64 // local copies ignored (too large, edited, unreadable)
	ReadErrors, Installs, Evictions, AbsentHits uint64
	DecodeErrors, Invalidations, Dropped        uint64
	Passes, Confirms, Changed, ConfirmErrors    uint64
	Disappeared, Regressions, Abandoned         uint64
	SlowDecodes, Heartbeats, HeartbeatErrors    uint64
	// MaxLag is the oldest lag at the last pass; LagHistogram counts the
	// documents per LagBuckets bound at the last pass (the last slot is
	// past the largest bound).
	MaxLag           time.Duration
	LagHistogram     [len(LagBuckets) + 1]uint64
	LastPassDuration time.Duration
}

// Stats returns the current figures.
func (c *Cache[T]) Stats() Stats {
	s := &c.stats
	st := Stats{
		Ready: c.ready.Load(), ColdLoads: s.coldLoads.Load(), LocalLoads: s.localLoads.Load(), LocalRefused: s.localRefused.Load(), ColdTimeouts: s.coldTimeouts.Load(),
		ReadErrors: s.readErrors.Load(), Installs: s.installs.Load(), Evictions: s.evictions.Load(), AbsentHits: s.absentHits.Load(),
		DecodeErrors: s.decodeErrors.Load(), Invalidations: s.invalidations.Load(), Dropped: s.dropped.Load(),
		Passes: s.passes.Load(), Confirms: s.confirms.Load(), Changed: s.changed.Load(), ConfirmErrors: s.confirmErrors.Load(),
		Disappeared: s.disappeared.Load(), Regressions: s.regressions.Load(), Abandoned: s.abandoned.Load(),
		SlowDecodes: s.slowDecodes.Load(), Heartbeats: s.heartbeats.Load(), HeartbeatErrors: s.heartbeatErrors.Load(),
		MaxLag: time.Duration(s.maxLag.Load()), LastPassDuration: time.Duration(s.lastPassNanos.Load()),
	}
	for i := range st.LagHistogram {
		st.LagHistogram[i] = s.lagHist[i].Load()
	}
	c.entries.Range(func(varplane.Scope, *entry[T]) bool { st.Installed++; return true })
	return st
}

// WithHead counts the installed documents that serve a head, from memory:
// a read replica's varplane_scopes_with_head, which must not list the
// store (that would load every scope and push out what was read last).
func (c *Cache[T]) WithHead() int {
	n := 0
	c.entries.Range(func(_ varplane.Scope, e *entry[T]) bool {
		if d := e.doc.Load(); d.Head != nil && d.err == nil {
			n++
		}
		return true
	})
	return n
}

// Lag returns the time since the store last confirmed each installed
// document.
func (c *Cache[T]) Lag() map[varplane.Scope]time.Duration {
	now := c.clock.Now().UnixNano()
	out := map[varplane.Scope]time.Duration{}
	c.entries.Range(func(k varplane.Scope, v *entry[T]) bool {
		out[k] = time.Duration(now - v.confirmed.Load())
		return true
	})
	return out
}

// localCopy is the on-disk copy of installed documents: one file per scope,
// written atomically (atomicfile: temporary file, fsync, rename). It serves cold loads
// only, and never says a scope is absent. What it reads back is checked
// before it is served (read): a file is only as trustworthy as the disk.
type localCopy struct {
	dir    string
	limits varplane.Limits
}

// localEnvelope is the room a local file may take beyond its document: the
// metadata members (a revision digest, a schema id and version, an actor,
// two times), each bounded well below it.
const localEnvelope = 64 << 10

// localFile is the stored form of one local copy.
type localFile struct {
	Generation  varplane.Generation `json:"generation"`
	Revision    varplane.Revision   `json:"revision"`
	SchemaID    string              `json:"schemaId,omitempty"`
	Version     string              `json:"schemaVersion,omitempty"`
	Actor       string              `json:"actor,omitempty"`
	EffectiveAt time.Time           `json:"effectiveAt"`
	Document    json.RawMessage     `json:"document"`
	ConfirmedAt time.Time           `json:"confirmedAt"`
}

type localRead struct {
	gen  varplane.Generation
	head *varplane.Head
}

func newLocalCopy(dir string, limits varplane.Limits) (*localCopy, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("instance: cache directory: %w", err)
	}
	return &localCopy{dir: dir, limits: limits.WithDefaults()}, nil
}

func (l *localCopy) path(scope varplane.Scope) string {
	return filepath.Join(l.dir, base64.RawURLEncoding.EncodeToString([]byte(scope))+".json")
}

// errNoLocal is read's answer for a scope without a local copy: not a
// fault, nothing to log.
var errNoLocal = errors.New("no local copy")

// read returns the local copy of scope and when the store last confirmed
// it. A copy is served only if its file is within the document limits
// (checked on the open file before a byte is read, and the read is bounded
// too, so a file that grows meanwhile costs no more), its document is JSON
// within the limits, and its body's digest is the revision it claims
// (revisions are content-addressed): an edited or corrupted copy must not
// be served under the genuine revision's ETag. Any other answer than
// errNoLocal says why the copy is refused.
func (l *localCopy) read(scope varplane.Scope) (localRead, time.Time, error) {
	max := l.limits.MaxBodyBytes + localEnvelope
	check := func(fi fs.FileInfo) error {
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("the path is not a regular file (%v)", fi.Mode().Type())
		}
		if fi.Size() > max {
			return fmt.Errorf("the file is %d bytes, more than a document within the limits takes (%d)", fi.Size(), max)
		}
		return nil
	}
	// Lstat first: opening a FIFO or a device would block or read forever.
	fi, err := os.Lstat(l.path(scope))
	if errors.Is(err, fs.ErrNotExist) {
		return localRead{}, time.Time{}, errNoLocal
	}
	if err == nil {
		err = check(fi)
	}
	if err != nil {
		return localRead{}, time.Time{}, err
	}
	f, err := os.Open(l.path(scope))
	if err != nil {
		return localRead{}, time.Time{}, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err == nil {
		err = check(fi) // the file the path names now
	}
	if err != nil {
		return localRead{}, time.Time{}, err
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return localRead{}, time.Time{}, err
	}
	if int64(len(b)) > max {
		return localRead{}, time.Time{}, fmt.Errorf("the file grew past %d bytes while it was read", max)
	}
	var lf localFile
	if err := json.Unmarshal(b, &lf); err != nil {
		return localRead{}, time.Time{}, fmt.Errorf("the file is not a local copy: %w", err)
	}
	if len(lf.Document) == 0 {
		return localRead{}, time.Time{}, errors.New("the file holds no document")
	}
	if err := l.limits.CheckJSON(lf.Document, 0); err != nil {
		return localRead{}, time.Time{}, fmt.Errorf("the document is beyond the limits: %w", err)
	}
	if d, err := canonical.Digest(lf.Document); err != nil || varplane.Revision(d) != lf.Revision {
		return localRead{}, time.Time{}, fmt.Errorf("the document's digest is not its revision %s", lf.Revision)
	}
	ev := &varplane.Event{Kind: varplane.EventActivated, Scope: scope, Generation: lf.Generation, Revision: lf.Revision, Timestamp: lf.EffectiveAt, Actor: lf.Actor}
	rec := &varplane.RevisionRecord{Scope: scope, Revision: lf.Revision, Document: lf.Document, SchemaID: lf.SchemaID, SchemaVersion: lf.Version, Actor: lf.Actor}
	return localRead{gen: lf.Generation, head: varplane.NewHead(ev, rec)}, lf.ConfirmedAt, nil
}

// write stores d's head atomically; a failure is only logged by the caller.
func (l *localCopy) write(scope varplane.Scope, h *varplane.Head, gen varplane.Generation, at time.Time) error {
	b, err := json.Marshal(localFile{Generation: gen, Revision: h.Revision, SchemaID: h.SchemaID, Version: h.SchemaVersion,
		Actor: h.Actor, EffectiveAt: h.EffectiveAt, Document: h.Document, ConfirmedAt: at.UTC()})
	if err != nil {
		return err
	}
	return atomicfile.WritePrivate(l.path(scope), b)
}

// writeLocal keeps the local copy of a usable document from the store.
func (c *Cache[T]) writeLocal(scope varplane.Scope, d *Doc[T], at time.Time) {
	if c.local == nil || d.err != nil || d.Head == nil || d.Local {
		return
	}
	if err := c.local.write(scope, d.Head, d.Generation, at); err != nil {
		c.log.Warn("instance: the local copy could not be written", "scope", string(scope), "err", err)
	}
}

// status builds the current status value.
func (c *Cache[T]) status() varplane.InstanceStatus {
	now := c.clock.Now()
	st := varplane.InstanceStatus{Instance: c.opts.InstanceID, WrittenAt: now.UTC(), Ready: c.ready.Load(), Root: c.opts.Root, Documents: []varplane.InstanceDocument{}, Labels: c.opts.Labels}
	for _, sc := range c.installed() {
		v, ok := c.entries.Load(sc)
		if !ok {
			continue
		}
		e := v
		d := e.doc.Load()
		sd := varplane.InstanceDocument{Scope: sc, Generation: d.Generation, Failed: d.err != nil,
			LagSeconds: time.Duration(now.UnixNano() - e.confirmed.Load()).Seconds()}
		if d.Head != nil {
			sd.Revision = d.Head.Revision
		}
		if s := c.serving(d); s != d {
			sd.Rollout, sd.Serving = c.rollouts.Load().byScope[sc].r.ID, s.Head.Revision
		}
		st.Documents = append(st.Documents, sd)
	}
	return st
}

// heartbeatLoop writes the status every varplane.HeartbeatInterval and lists the
// instance at start and every varplane.ListInterval.
func (c *Cache[T]) heartbeatLoop(hs varplane.StatusWriter, beat Ticker) {
	defer c.wg.Done()
	defer beat.Stop()
	var listed time.Time
	for {
		now := c.clock.Now()
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.StoreReadTimeout)
		if listed.IsZero() || now.Sub(listed) >= varplane.ListInterval {
			if err := hs.ListInstance(ctx, c.opts.InstanceID, now); err != nil {
				c.log.Warn("instance: listing this instance failed; it lists itself again at the next heartbeat", "err", err)
			} else {
				listed = now
			}
		}
		c.beat(ctx, hs)
		cancel()
		select {
		case <-c.ctx.Done():
			return
		case <-beat.C():
		}
	}
}
