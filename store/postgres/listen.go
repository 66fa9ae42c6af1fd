package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/backoff"
	"github.com/varplane/varplane/internal/replica"
)

// listenLoop keeps one connection of its own (outside the pool) listening
// on the schema's channel. It pings that connection when nothing arrived
// for a while, so a server that stopped answering is noticed and the
// connection replaced; every LISTEN after the first asks for a revalidation
// pass, which catches what was committed while it was down.
func (s *Store) listenLoop() {
	defer s.wg.Done()
	first := true
	retry := backoff.Retry{Min: reconnectMin, Max: reconnectMax}
	idle := min(s.opts.RevalidateInterval, 5*time.Second)
	for s.ctx.Err() == nil {
		conn, err := s.listenConn()
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			s.log.Warn("postgres store: cannot listen for invalidations; installed heads are served and revalidated until it is back", "err", err)
			if !retry.Wait(s.ctx) {
				return
			}
			continue
		}
		retry.Reset()
		s.stats.listens.Add(1)
		if first {
			first = false
			close(s.listening)
		} else {
			s.log.Info("postgres store: listening for invalidations again; revalidating", "channel", s.channel)
			s.askPass()
		}
		err = s.receive(conn, idle)
		cctx, cancel := s.cmdCtxBackground()
		_ = conn.Close(cctx)
		cancel()
		if s.ctx.Err() != nil {
			return
		}
		s.log.Warn("postgres store: invalidation connection lost; reconnecting", "err", err)
	}
}

// listenConn opens the listening connection.
func (s *Store) listenConn() (*pgx.Conn, error) {
	ctx, cancel := s.cmdCtx(s.ctx)
	defer cancel()
	cfg := s.poolCfg.ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] += "-listen"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	return conn, nil
}

// receive hands every notification to the notification loop until the
// connection fails or the store closes.
func (s *Store) receive(conn *pgx.Conn, idle time.Duration) error {
	for {
		wctx, cancel := context.WithTimeout(s.ctx, idle)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err == nil {
			s.stats.notifications.Add(1)
			if !s.follow.Offer(n.Payload) {
				s.stats.notDrop.Add(1)
			}
			continue
		}
		if s.ctx.Err() != nil {
			return err
		}
		if !errors.Is(err, context.DeadlineExceeded) || conn.IsClosed() {
			return err
		}
		// Nothing for a while: make sure the server still answers.
		pctx, pcancel := s.cmdCtx(s.ctx)
		_, err = conn.Exec(pctx, "SELECT 1")
		pcancel()
		if err != nil {
			return err
		}
	}
}

// askPass requests a revalidation pass without blocking.
func (s *Store) askPass() { s.follow.AskPass() }

// addPending remembers scopes whose notification could not be read, so
// that the next pass reads them even if they are not installed, and asks
// for that pass.
func (s *Store) addPending(scopes ...varplane.Scope) { s.follow.AddPending(scopes...) }

// notificationLoop handles notifications one at a time, in the order the
// server delivered them (commit order).
func (s *Store) notificationLoop() {
	defer s.wg.Done()
	s.follow.Serve(s.ctx, s.handleNotification)
}

// handleNotification reads every scope a payload names whose installed
// head is not already at the announced version (an own commit's echo is
// skipped), installs them and delivers the commit: an activation that
// directly follows the installed head from the log, anything else from the
// heads rows (followActivations).
func (s *Store) handleNotification(payload string) {
	each := false
	if kind, rest, ok := strings.Cut(payload, "\n"); ok && strings.HasSuffix(kind, eachSuffix) {
		// independent commits (mergePayloads): one read, one commit each
		payload, each = strings.TrimSuffix(kind, eachSuffix)+"\n"+rest, true
	}
	inv, ok := replica.ParseInvalidation(payload)
	versions := make([]int64, len(inv.Lines))
	lines := make(map[varplane.Scope]announced, len(inv.Lines))
	for i, l := range inv.Lines {
		v, err := strconv.ParseInt(l.Version, 10, 64)
		versions[i], ok = v, ok && err == nil
		g, _ := strconv.ParseUint(l.Generation, 10, 64)
		lines[l.Scope] = announced{version: v, gen: varplane.Generation(g)}
	}
	if !ok {
		s.log.Warn("postgres store: malformed notification ignored; revalidation will catch up")
		s.askPass()
		return
	}
	read := func(ctx context.Context, kind varplane.EventKind, scopes ...varplane.Scope) error {
		return s.followActivations(ctx, kind, each, lines, scopes)
	}
	current := func(i int, l replica.Line) bool {
		if !s.entries.Follows(l.Scope) {
			return true // a scope nobody here holds: nothing to install
		}
		return s.entries.ConfirmIf(l.Scope, func(sn *snapshot) bool { return sn.version >= versions[i] })
	}
	stale, err := s.follow.Handle(s.ctx, inv, current, read)
	s.stats.notificationReads.Add(uint64(len(stale)))
	if err != nil {
		s.log.Warn("postgres store: reading a notified head failed; the next revalidation pass retries", "scope", string(stale[0]), "err", err)
	}
}

// revalidateLoop runs one pass per interval (or sooner when asked), never
// two at once.
func (s *Store) revalidateLoop() {
	defer s.wg.Done()
	s.follow.RevalidateLoop(s.ctx, s.opts.RevalidateInterval, s.revalidatePass)
}

// passChunk bounds the scopes one revalidation statement probes.
const passChunk = 1000

// revalidatePass re-reads the pending scopes, then confirms every installed
// head in statements of passChunk probes each: the server answers only the
// heads whose version differs, which are installed (and delivered).
func (s *Store) revalidatePass() {
	start := time.Now()
	s.stats.passes.Add(1)
	s.follow.RetryPending(func(sc varplane.Scope) error { return s.refresh(s.ctx, sc) })
	scopes := s.installedScopes()
	for i := 0; i < len(scopes) && s.ctx.Err() == nil; i += passChunk {
		s.confirm(scopes[i:min(i+passChunk, len(scopes))])
	}
	s.stats.lastPassNanos.Store(int64(time.Since(start)))
	s.logLags()
}

// confirm revalidates one chunk of installed scopes.
func (s *Store) confirm(scopes []varplane.Scope) {
	probes := make([]probe, 0, len(scopes))
	seqs := make(map[varplane.Scope]uint64, len(scopes))
	for _, sc := range scopes {
		e := s.entry(sc)
		if e == nil {
			continue
		}
		seqs[sc] = e.Seq.Load()
		cur := e.Snap.Load()
		p := probe{scope: sc, version: cur.version, gen: cur.state.Generation}
		if cur.rec != nil {
			p.rev, p.hint = cur.rec.Revision, cur.rec
		}
		probes = append(probes, p)
	}
	if len(probes) == 0 {
		return
	}
	got, bad, err := s.fetchHeads(s.ctx, probes)
	if err != nil {
		s.stats.confirmErr.Add(1)
		if s.ctx.Err() == nil {
			s.log.Debug("postgres store: revalidation failed; installed heads are served as they are", "err", err)
		}
		return
	}
	now := time.Now().UnixNano()
	for _, p := range probes {
		if bad[p.scope] != nil {
			continue // logged; the installed head is served as it was
		}
		snap, changed := got[p.scope]
		if !changed {
			s.stats.confirms.Add(1)
			if e := s.entry(p.scope); e != nil {
				e.Confirmed.Store(now)
			}
			continue
		}
		s.stats.confirmChanged.Add(1)
		reqs := []installReq{{scope: p.scope, snap: snap, seq: seqs[p.scope]}}
		s.fillGaps(s.ctx, reqs)
		s.installAndDeliver(reqs)
	}
}

// logLags logs installed heads the database has not confirmed for longer
// than LagWarn (ERROR past LagEscalate), at most once a minute per scope.
func (s *Store) logLags() {
	s.entries.LogLags(s.opts.LagWarn, s.opts.LagEscalate, func(scope varplane.Scope, _ *snapshot, lag time.Duration, escalated bool) {
		attrs := []any{"scope", scope, "lag", lag.Round(time.Millisecond)}
		if escalated {
			s.log.Error("postgres store: installed head is stale: not confirmed by the database", attrs...)
		} else {
			s.log.Warn("postgres store: installed head has not been confirmed by the database", attrs...)
		}
	})
}
