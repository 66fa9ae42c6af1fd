package control

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/varplane/varplane"
)

// The side of the control plane through which a consumer that does not
// reach the store of record (the Go SDK, over HTTP: httpapi's instance
// routes) takes part in canary windows, as an instance cache does through
// the store (docs/control.md, "Instances over HTTP"): it files its status
// and its reports, and reads the open windows and their candidates. The
// transport authenticates the caller, checks that it is an instance
// identity (varplane.InstanceRole) filing under its own id, bounds the
// body, and sets the Identity of what it files; the service holds each
// identity to varplane.MaxInstanceNames names held at a time and
// varplane.MaxStoredNames statuses stored. What the body says is
// otherwise stored as is (a report naming another instance or window than
// where it was filed is doubtful: Evaluate keeps the window open).

// beatStores finds what the store of record writes statuses and reports
// with, through wrappers (varplane.StoreAs); ErrNoHeartbeats on a store
// that keeps neither.
func (svc *Service) beatStores() (varplane.StatusWriter, varplane.ReportWriter, error) {
	hs, ok1 := varplane.StoreAs[varplane.StatusWriter](svc.store)
	rs, ok2 := varplane.StoreAs[varplane.ReportWriter](svc.store)
	if !ok1 || !ok2 {
		return nil, nil, ErrNoHeartbeats
	}
	return hs, rs, nil
}

// CheckHeartbeats returns ErrNoHeartbeats when the store of record keeps
// no statuses and reports (no instance can take part in canary windows),
// and nil otherwise: a transport asks before it reads a body to file.
func (svc *Service) CheckHeartbeats() error {
	_, _, err := svc.beatStores()
	return err
}

// FileStatus writes st as the status of instance id, with WrittenAt set to
// the service's clock (freshness is judged by one clock: a consumer whose
// clock is off would otherwise count as no instance, or as one long gone),
// and lists id among the instances once every varplane.ListInterval. It
// answers ErrNoHeartbeats on a store that keeps none, and limit-exceeded
// for a status listing more than varplane.MaxStatusDocuments documents or
// when st.Identity holds varplane.MaxInstanceNames other names. A new name
// first deletes the identity's oldest statuses that hold no name when the
// store would keep more than varplane.MaxStoredNames of them. The caller
// authorized st.Identity as an instance identity, id as one of its names,
// and every scope st lists.
func (svc *Service) FileStatus(ctx context.Context, id string, st varplane.InstanceStatus) error {
	hs, _, err := svc.beatStores()
	if err != nil {
		return err
	}
	if len(st.Documents) > varplane.MaxStatusDocuments {
		return varplane.Errorf(varplane.CodeLimitExceeded, "a status lists at most %d documents", varplane.MaxStatusDocuments)
	}
	if st.Documents == nil {
		st.Documents = []varplane.InstanceDocument{}
	}
	now := svc.now()
	if err := svc.claim(ctx, st.Identity, id, now, now.Add(statusHold)); err != nil {
		return err
	}
	st.WrittenAt = now
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if svc.listed.due(id, now) {
		if err := hs.ListInstance(ctx, id, now); err != nil {
			svc.listed.forget(id)
			return err
		}
	}
	return hs.WriteStatus(ctx, id, b)
}

// claim holds name id for identity until until. A name this process does
// not hold yet is counted against the statuses in the store of record
// too (claimStored), so that servers sharing a store hold an identity to
// one bound.
func (svc *Service) claim(ctx context.Context, identity, id string, now, until time.Time) error {
	if identity != "" && svc.listed.check(identity, id, now) == nil && !svc.listed.holds(identity, id, now) {
		if err := svc.claimStored(ctx, identity, id, now); err != nil {
			return err
		}
	}
	return svc.listed.claim(identity, id, now, until)
}

// claimStored counts name id, new to this process, against identity's
// statuses in the store of record: those whose id is identity or starts
// with identity and ':'. It answers limit-exceeded when
// varplane.MaxInstanceNames of them hold their name at now (were written
// less than statusHold ago, by this clock, as FileStatus sets it). Else,
// when the store would keep more than varplane.MaxStoredNames of them
// with id's, it deletes the oldest that the identity filed (its Identity)
// and that hold no name, here or by their age, so that a stopped name's
// status, which the store keeps an hour, does not let one identity fill
// the store: deletion protection and the fleet view forget them first.
func (svc *Service) claimStored(ctx context.Context, identity, id string, now time.Time) error {
	hs, ok := varplane.StoreAs[varplane.StatusReader](svc.store)
	if !ok {
		return nil
	}
	raw, err := hs.InstanceStatuses(ctx)
	if err != nil {
		return err
	}
	type stored struct {
		id      string
		written time.Time
	}
	var free []stored // the identity's statuses that hold no name
	kept, held := 0, 0
	for other, b := range raw {
		if other == id || (other != identity && !strings.HasPrefix(other, identity+":")) {
			continue
		}
		kept++
		var st struct {
			WrittenAt time.Time `json:"writtenAt"`
			Identity  string    `json:"identity"`
		}
		if json.Unmarshal(b, &st) != nil {
			continue
		}
		if now.Before(st.WrittenAt.Add(statusHold)) {
			held++
		} else if st.Identity == identity && !svc.listed.holds(identity, other, now) {
			free = append(free, stored{other, st.WrittenAt})
		}
	}
	if held >= varplane.MaxInstanceNames {
		return nameLimit(identity)
	}
	over := kept + 1 - varplane.MaxStoredNames
	hd, ok := varplane.StoreAs[varplane.StatusDeleter](svc.store)
	if over <= 0 || !ok {
		return nil
	}
	slices.SortFunc(free, func(a, b stored) int {
		return cmp.Or(a.written.Compare(b.written), strings.Compare(a.id, b.id))
	})
	for _, s := range free[:min(over, len(free))] {
		if err := hd.DeleteStatus(ctx, s.id); err != nil {
			return err
		}
	}
	return nil
}

// CheckName answers limit-exceeded, as FileStatus and FileReport would,
// when identity holds varplane.MaxInstanceNames names other than id now,
// without holding id: a transport asks before it reads a body to file, so
// that a name past the bound costs no body.
func (svc *Service) CheckName(identity, id string) error {
	return svc.listed.check(identity, id, svc.now())
}

// StagedWindows returns the open canary windows, as staged for the
// instances (varplane.StagedScope).
func (svc *Service) StagedWindows(ctx context.Context) ([]varplane.StagedWindow, error) {
	var st varplane.StagedWindows
	if _, _, err := readRecord(ctx, svc.store, varplane.StagedScope, &st); err != nil {
		return nil, err
	}
	return st.Windows, nil
}

// StagedWindow returns the open window id; not-found once it closed (or
// when it never opened).
func (svc *Service) StagedWindow(ctx context.Context, id string) (varplane.StagedWindow, error) {
	list, err := svc.StagedWindows(ctx)
	if err != nil {
		return varplane.StagedWindow{}, err
	}
	for _, sw := range list {
		if sw.Window == id {
			return sw, nil
		}
	}
	return varplane.StagedWindow{}, varplane.Errorf(varplane.CodeNotFound, "no open canary window %q", id)
}

// Candidate returns the staged window sw with its candidate document. The
// caller authorized reading sw's scope.
func (svc *Service) Candidate(ctx context.Context, sw varplane.StagedWindow) (*varplane.CanaryCandidate, error) {
	rec, err := svc.store.Revision(ctx, sw.Scope, sw.Revision)
	if err != nil {
		return nil, err
	}
	return &varplane.CanaryCandidate{StagedWindow: sw, Document: rec.Document}, nil
}

// FileReport writes rep as instance id's cumulative report of the open
// window sw (each write replaces the previous one). It answers
// ErrNoHeartbeats on a store that keeps no reports, and limit-exceeded when
// rep.Identity holds varplane.MaxInstanceNames other names (a name that
// reported holds its place until sw closes). The caller authorized
// rep.Identity as an instance identity and id as one of its names, set
// rep.MayRead, and authorized reading sw's scope when rep counts anything.
func (svc *Service) FileReport(ctx context.Context, sw varplane.StagedWindow, id string, rep varplane.CanaryReport) error {
	_, rs, err := svc.beatStores()
	if err != nil {
		return err
	}
	now := svc.now()
	if err := svc.claim(ctx, rep.Identity, id, now, later(now.Add(statusHold), sw.ClosesAt)); err != nil {
		return err
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	return rs.WriteCanaryReport(ctx, sw.Window, id, b)
}

// listedInstances remembers when the service last listed each instance that
// files over HTTP, so that a heartbeat lists it once every
// varplane.ListInterval as an instance cache does (on Redis a listing is a
// script over the whole list). It is bounded: past maxListed entries it is
// cleared, which only lists instances again.
//
// It also holds the names each instance identity files under (claim), so
// that one identity files under at most varplane.MaxInstanceNames names at
// a time (and so at most that many reports per window; the store keeps at
// most varplane.MaxStoredNames of its statuses, Service.claimStored). The table is this process's; a name new
// to it is also counted against the store's statuses (Service.claim), so
// that servers sharing a store keep one bound, give or take the names
// claimed at the same moment on different servers.
type listedInstances struct {
	mu    sync.Mutex
	at    map[string]time.Time
	names map[string]map[string]time.Time // identity → name → held until
}

const maxListed = 1 << 16

// statusHold is how long a status holds its name: two minutes after its
// last write (four heartbeats). It is not the stores' lifetime of a status
// (varplane.StatusLifetime, an hour): a name an instance stopped filing
// under is free again long before its status expires.
const statusHold = 2 * time.Minute

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// holds reports whether identity holds name at now.
func (l *listedInstances) holds(identity, name string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.names[identity][name]
	return ok && now.Before(t)
}

// check answers what claim would at now, holding nothing.
func (l *listedInstances) check(identity, name string, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	held := 0
	for n, t := range l.names[identity] {
		if n == name && now.Before(t) {
			return nil
		}
		if now.Before(t) {
			held++
		}
	}
	if held >= varplane.MaxInstanceNames {
		return nameLimit(identity)
	}
	return nil
}

func nameLimit(identity string) error {
	return varplane.Errorf(varplane.CodeLimitExceeded, "identity %q files under at most %d instance names at a time; a name is free again two minutes after its last status, once the windows it reported on closed", identity, varplane.MaxInstanceNames)
}

// claim holds name for identity until until (or keeps a later hold), and
// answers limit-exceeded when identity already holds
// varplane.MaxInstanceNames other names at now, or when maxListed
// identities hold names. It refuses an empty identity (forbidden): only an
// authenticated instance identity files over HTTP.
func (l *listedInstances) claim(identity, name string, now, until time.Time) error {
	if identity == "" {
		return varplane.Errorf(varplane.CodeForbidden, "statuses and reports are filed by an instance identity only")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.names == nil {
		l.names = map[string]map[string]time.Time{}
	}
	held := l.names[identity]
	maps.DeleteFunc(held, func(_ string, t time.Time) bool { return !now.Before(t) })
	if t, ok := held[name]; ok {
		held[name] = later(t, until)
		return nil
	}
	if len(held) >= varplane.MaxInstanceNames {
		return nameLimit(identity)
	}
	if held == nil {
		if len(l.names) >= maxListed {
			maps.DeleteFunc(l.names, func(_ string, m map[string]time.Time) bool {
				maps.DeleteFunc(m, func(_ string, t time.Time) bool { return !now.Before(t) })
				return len(m) == 0
			})
			if len(l.names) >= maxListed {
				return varplane.Errorf(varplane.CodeLimitExceeded, "%d instance identities are filing; no other may", maxListed)
			}
		}
		held = map[string]time.Time{}
		l.names[identity] = held
	}
	held[name] = until
	return nil
}

// due reports whether id is due for a listing, and records it as listed
// at now.
func (l *listedInstances) due(id string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.at[id]; ok && now.Sub(t) < varplane.ListInterval && !now.Before(t) {
		return false
	}
	if l.at == nil || len(l.at) >= maxListed {
		l.at = map[string]time.Time{}
	}
	l.at[id] = now
	return true
}

// forget makes the next heartbeat of id list it again.
func (l *listedInstances) forget(id string) {
	l.mu.Lock()
	delete(l.at, id)
	l.mu.Unlock()
}
