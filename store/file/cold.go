package file

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/logstate"
)

// cold is what a store opened from a checkpoint reads of the log before the
// checkpoint's offset after Open returns, on a goroutine of its own: every
// scope's history before it (the fold holds the events after it) and the
// idempotency records of its events. History and Replay wait for it, as do
// Idempotency and every commit that carries an idempotency key: none is
// checked against a map that misses the keys before the checkpoint.
type cold struct {
	end   int64 // the checkpoint's offset
	ready chan struct{}
	err   error
	mu    sync.RWMutex // guards hist against a compaction's reclaim
	hist  map[varplane.Scope][]varplane.Event

	cancel context.CancelFunc
	done   chan struct{}
}

// startCold starts reading the log before end.
func (s *Store) startCold(end int64) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &cold{end: end, ready: make(chan struct{}), hist: map[varplane.Scope][]varplane.Event{}, cancel: cancel, done: make(chan struct{})}
	s.cold = c
	go func() {
		defer close(c.done)
		idem, err := s.readCold(ctx, c)
		if err == nil {
			// Installed between two batches: a keyed commit is checked
			// against the whole map or not yet queued (waitCold).
			err = s.runOnCommitter(ctx, func() error {
				s.st.AddIdempotency(idem)
				return nil
			})
		}
		if err != nil {
			c.err = err
			if ctx.Err() == nil {
				s.log.Error("file store: the log before its checkpoint cannot be read; History, Replay, Idempotency and keyed commits fail", "path", s.path, "err", err)
			}
		}
		close(c.ready)
	}()
}

// stopCold stops the reader, if any, and waits for it.
func (s *Store) stopCold() {
	if c := s.cold; c != nil {
		c.cancel()
		<-c.done
	}
}

// readCold reads the events before c.end into c.hist, the cascade entries
// a subtree deactivation puts in its descendants' histories included, and
// returns their idempotency records.
func (s *Store) readCold(ctx context.Context, c *cold) ([]*varplane.IdempotencyRecord, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return nil, fmt.Errorf("file store: open %s: %w", s.path, err)
	}
	defer f.Close()
	lr := newLineReader(io.NewSectionReader(f, 0, c.end), 0, 0)
	in := eventjson.NewInterner()
	gen := map[varplane.Scope]varplane.Generation{}
	var idem []*varplane.IdempotencyRecord
	for {
		l, err := lr.next()
		if err != nil {
			return nil, fmt.Errorf("file store: read %s: %w", s.path, err)
		}
		if l.eof {
			return idem, nil
		}
		if l.lineNo%4096 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ev varplane.Event
		_, n, derr := eventjson.DecodeEventLazy(l.b[:max(len(l.b)-1, 0)], &ev, in)
		if derr == nil && (!l.complete || l.long) {
			derr = errors.New("the line is not whole")
		}
		if derr != nil {
			return nil, &LineError{Path: s.path, Line: l.lineNo, Offset: l.off, Err: derr}
		}
		if ev.Kind == varplane.EventRevisionCreated && (n > 0 || !bytes.HasSuffix(l.b, reclaimedEnd)) {
			ev.Document = logstate.OnDisk // read from the log on use
		}
		if ev.Kind == varplane.EventActivated || ev.Kind == varplane.EventDeactivated {
			gen[ev.Scope] = ev.Generation
		}
		c.hist[ev.Scope] = append(c.hist[ev.Scope], ev)
		for _, e := range ev.Cascade {
			c.hist[e.Scope] = append(c.hist[e.Scope], logstate.CascadeEntry(&ev, e))
			gen[e.Scope] = e.Generation
		}
		if ev.IdempotencyKey != "" {
			idem = append(idem, logstate.IdempotencyRecord(&ev, gen[ev.Scope]))
		}
	}
}

// waitCold waits until the log before the checkpoint is read (at once when
// the store was not opened from one).
func (s *Store) waitCold(ctx context.Context) error {
	c := s.cold
	if c == nil {
		return nil
	}
	select {
	case <-c.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	if c.err != nil {
		return &varplane.Error{Code: varplane.CodeInternal, Message: "the log's history cannot be read", Err: c.err}
	}
	return nil
}

// reclaim drops the documents of revs from the history before the
// checkpoint of scope, as logstate.State.Reclaim does in the fold's.
// Readers share the slices, so the scope's gets a copy.
func (c *cold) reclaim(scope varplane.Scope, revs []varplane.Revision) {
	if c == nil || len(revs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.hist[scope]
	if len(h) == 0 {
		return
	}
	h = slices.Clone(h)
	for i := range h {
		if h[i].Kind == varplane.EventRevisionCreated && slices.Contains(revs, h[i].Revision) {
			h[i].Document = nil
		}
	}
	c.hist[scope] = h
}

// fullHistoryMeta returns every event of scope: the history before the
// checkpoint, once read, then the fold's; documents kept on disk are left
// marked logstate.OnDisk.
func (s *Store) fullHistoryMeta(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	if s.IsShut() {
		return nil, varplane.ErrClosed
	}
	own := s.st.History(scope)
	c := s.cold
	if c == nil {
		return own, nil
	}
	if err := s.waitCold(ctx); err != nil {
		return nil, err
	}
	c.mu.RLock()
	before := c.hist[scope]
	c.mu.RUnlock()
	switch {
	case len(before) == 0:
		return own, nil
	case len(own) == 0:
		return before[:len(before):len(before)], nil
	}
	return append(append(make([]varplane.Event, 0, len(before)+len(own)), before...), own...), nil
}
