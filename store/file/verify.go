package file

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/logstate"
)

// VerifyReport is what VerifyLog found in a log file.
type VerifyReport struct {
	// Path is the log's path.
	Path string
	// Events counts the events read up to the end of the log, or up to the
	// first problem.
	Events int
	// Scopes counts the scopes those events wrote.
	Scopes int
	// Heads is each scope's chain head after those events, and ChainDigest
	// their varplane.ChainDigest: compare them with what was anchored
	// outside the log (the API's chain head, an export) to tell a log that
	// lost its last events from a sound one.
	Heads       map[varplane.Scope]varplane.ChainHead
	ChainDigest string
	// Documents counts the documents checked against their revision
	// digests; Reclaimed the revision-created events whose document
	// retention reclaimed (nothing to check).
	Documents, Reclaimed int
	// Tail counts the bytes after the last whole line: a write in progress
	// when the server runs, or a tail a crash tore, which Open would cut.
	Tail int64
	// Problem is the first broken or missing link or other damage (nil: the
	// log verifies).
	Problem *VerifyProblem
}

// VerifyProblem is the first thing VerifyLog found wrong in a log.
type VerifyProblem struct {
	// Line and Offset locate the line (from 1; its byte offset).
	Line   int
	Offset int64
	// Scope and Seq name the chain and the link it expected there, when
	// the problem is a broken or missing link (Seq 0 otherwise).
	Scope varplane.Scope
	Seq   uint64
	// Err says what is wrong; errors.As finds a *varplane.ChainError in it
	// for a link.
	Err error
}

func (p *VerifyProblem) Error() string {
	return fmt.Sprintf("line %d (byte offset %d): %v", p.Line, p.Offset, p.Err)
}

func (p *VerifyProblem) Unwrap() error { return p.Err }

// VerifyLog checks the log file at path end to end, offline: a server may
// have it open (VerifyLog takes no lock, and reads up to the end the file
// has when it starts), and the file is opened read-only and never changed.
// It checks that every line decodes, that every event is the next link of
// its scope's chain (the rule varplane.VerifyChain checks) and follows from
// the events before it (generations, revisions, idempotency keys), that
// every cascade entry of a subtree deactivation is one its parent lists
// for a descendant active then (varplane.CheckCascade), and that every
// document it holds is the one its revision digests (canonical.Digest).
// It reports the first problem in VerifyReport.Problem; the error is for
// what kept it from reading the file (a log of a format before 3, which
// Open converts first, is one). Memory grows with the log's events, as
// Open's does; no line longer than the store writes is held.
func VerifyLog(ctx context.Context, path string) (*VerifyReport, error) {
	legacy, err := isLegacy(path)
	if err != nil {
		return nil, err
	}
	if legacy {
		return nil, fmt.Errorf("file store: %s is a log of a format before 3, whose events carry no links: open it with the store once to convert it", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("file store: open %s: %w", path, err)
	}
	defer f.Close()
	s := &Store{path: path, log: slog.New(slog.DiscardHandler), st: logstate.New(), f: f}
	if s.bodies, err = openBodies(path); err != nil {
		return nil, err
	}
	defer s.bodies.retire()
	rep := &VerifyReport{Path: path}
	torn, err := s.replay(ctx, s.st.Bulk(), 0, 0)
	var le *LineError
	switch {
	case errors.As(err, &le):
		rep.Problem = &VerifyProblem{Line: le.Line, Offset: le.Offset, Err: le.Err}
		var ce *varplane.ChainError
		if errors.As(le.Err, &ce) {
			rep.Problem.Scope, rep.Problem.Seq = ce.Scope, ce.Seq
		}
		// What came before it is reported: fold it again, up to it.
		if err := s.verifyPrefix(ctx, le.Offset, rep); err != nil {
			return nil, err
		}
		return rep, nil
	case err != nil:
		return nil, err
	}
	if torn != nil {
		fi, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("file store: stat %s: %w", path, err)
		}
		rep.Tail = fi.Size() - s.off
	}
	s.report(rep)
	if rep.Problem == nil {
		rep.Problem, err = s.verifyCascades(ctx)
		if err != nil {
			return nil, err
		}
	}
	if rep.Problem == nil {
		rep.Problem, err = s.verifyDocuments(ctx, rep)
		if err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// verifyPrefix folds the log up to end (the start of a damaged line) to
// report what precedes it.
func (s *Store) verifyPrefix(ctx context.Context, end int64, rep *VerifyReport) error {
	s.st, s.end = logstate.New(), end
	if _, err := s.replay(ctx, s.st.Bulk(), 0, 0); err != nil {
		return fmt.Errorf("file store: %s: read the lines before byte offset %d: %w", s.path, end, err)
	}
	s.report(rep)
	return nil
}

// report fills rep's counts and chain heads from the fold.
func (s *Store) report(rep *VerifyReport) {
	rep.Events = int(s.lines)
	rep.Heads = map[varplane.Scope]varplane.ChainHead{}
	for _, sc := range s.st.Scopes() {
		rep.Heads[sc] = s.st.State(sc).Chain
	}
	rep.Scopes, rep.ChainDigest = len(rep.Heads), varplane.ChainDigest(rep.Heads)
}

// verifyCascades checks every scope's history with varplane.VerifyChain,
// and every cascade entry against its parent's event.
func (s *Store) verifyCascades(ctx context.Context) (*VerifyProblem, error) {
	for _, sc := range s.st.Scopes() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hist := s.st.History(sc)
		if _, err := varplane.VerifyChain(sc, hist); err != nil {
			return &VerifyProblem{Scope: sc, Err: err}, nil
		}
		for i := range hist {
			e := &hist[i]
			parent, ok := strings.CutPrefix(e.Reason, "cascade:")
			if e.Seq != 0 || !ok {
				continue
			}
			found := false
			for _, pe := range s.st.History(varplane.Scope(parent)) {
				if pe.Seq != 0 && varplane.CheckCascade(e, &pe) {
					found = true
					break
				}
			}
			if !found {
				return &VerifyProblem{Scope: sc, Err: fmt.Errorf("the cascade entry of scope %q at generation %d is listed by no event of %q", sc, e.Generation, parent)}, nil
			}
		}
	}
	return nil, nil
}

// verifyDocuments reads the log again and checks each document against
// its revision digest.
func (s *Store) verifyDocuments(ctx context.Context, rep *VerifyReport) (*VerifyProblem, error) {
	lr := newLineReader(io.NewSectionReader(s.f, 0, s.off), 0, 0)
	var ev varplane.Event
	for {
		l, err := lr.next()
		if err != nil {
			return nil, fmt.Errorf("file store: read %s: %w", s.path, err)
		}
		if l.eof {
			return nil, nil
		}
		if l.lineNo%1024 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !isCreatedLine(l.b) {
			continue
		}
		at, n, err := eventjson.DecodeEventLazy(l.b[:len(l.b)-1], &ev, nil)
		if err != nil {
			return &VerifyProblem{Line: l.lineNo, Offset: l.off, Err: err}, nil
		}
		if n == 0 {
			rep.Reclaimed++
			continue
		}
		rep.Documents++
		if got, err := canonical.Digest(l.b[at : at+n]); err != nil || got != string(ev.Revision) {
			if err == nil {
				err = fmt.Errorf("the document of scope %q digests to %s, not its revision %s", ev.Scope, got, ev.Revision)
			}
			return &VerifyProblem{Line: l.lineNo, Offset: l.off, Scope: ev.Scope, Err: err}, nil
		}
	}
}
