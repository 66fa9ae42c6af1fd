package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/varplane/varplane"
)

// BootstrapReason is the reason of the revision Bootstrap writes.
const BootstrapReason = "bootstrap"

// maxAttempts bounds the retries of a write that lost a race to another one.
const maxAttempts = 8

// Service writes and reads the access document through an engine: every
// change is one publish of a new revision of Scope, guarded by the
// generation it read, in the name of OwnerName.
type Service struct {
	engine *varplane.Engine
	now    func() time.Time
}

// NewService returns a Service over engine.
func NewService(engine *varplane.Engine) *Service {
	return &Service{engine: engine, now: time.Now}
}

// Binding is what a principal may do (see Principal).
type Binding struct {
	Kinds    []varplane.Kind `json:"kinds,omitempty"`
	Prefixes []string        `json:"prefixes,omitempty"`
	Roles    []string        `json:"roles,omitempty"`
}

// Info describes a principal without its digest, as List answers it.
type Info struct {
	ID string `json:"id"`
	Binding
	CreatedAt time.Time `json:"createdAt"`
	CreatedBy string    `json:"createdBy,omitempty"`
}

// Created answers Create and Bootstrap: the principal and its token, which
// is never stored nor shown again.
type Created struct {
	Info
	Token      string              `json:"token"`
	Generation varplane.Generation `json:"generation"`
	Revision   varplane.Revision   `json:"revision"`
}

// Create adds principal id with binding b and a new token, recorded as
// written by by.ID. An id already held is bad-request (revoke it first); an
// invalid id or binding is bad-request; a binding wider than by holds
// (Creator.MayGive) is forbidden.
func (s *Service) Create(ctx context.Context, id string, b Binding, by Creator, reason string) (Created, error) {
	if err := checkID(id); err != nil {
		return Created{}, err
	}
	if err := checkBinding(b.Kinds, b.Prefixes, b.Roles); err != nil {
		return Created{}, err
	}
	if err := by.MayGive(b); err != nil {
		return Created{}, err
	}
	actor := by.ID
	if reason == "" {
		reason = "create " + id
	}
	return s.issue(ctx, id, b, actor, reason, func(d *Document) error {
		if _, ok := d.Principals[id]; ok {
			return varplane.Errorf(varplane.CodeBadRequest, "principal %q exists; revoke it first", id)
		}
		return nil
	})
}

// Bootstrap binds admin as the first administrator: every kind on every
// scope and every role ("*"), with a new token, in a revision whose reason
// is BootstrapReason. It is refused (bad-request) when a principal already
// holds AdminRole, unless force is set: force is the recovery when every
// administrator's token is lost, and replaces a principal named admin.
func (s *Service) Bootstrap(ctx context.Context, admin, actor string, force bool) (Created, error) {
	if err := checkID(admin); err != nil {
		return Created{}, err
	}
	b := Binding{Prefixes: []string{"*"}, Roles: []string{"*"}}
	return s.issue(ctx, admin, b, actor, BootstrapReason, func(d *Document) error {
		if d.HasAdmin() && !force {
			return varplane.Errorf(varplane.CodeBadRequest, "an administrator exists; bootstrap again only with --force, to recover when every administrator is lost")
		}
		if _, ok := d.Principals[admin]; ok && !force {
			return varplane.Errorf(varplane.CodeBadRequest, "principal %q exists; bootstrap it only with --force", admin)
		}
		return nil
	})
}

// issue adds (or, after check allows it, replaces) principal id with a new
// token.
func (s *Service) issue(ctx context.Context, id string, b Binding, actor, reason string, check func(*Document) error) (Created, error) {
	token := NewToken()
	p := Principal{TokenDigest: Digest(token), Kinds: b.Kinds, Prefixes: b.Prefixes, Roles: b.Roles, CreatedAt: s.now().UTC(), CreatedBy: actor}
	res, err := s.update(ctx, actor, reason, func(d *Document) error {
		if err := check(d); err != nil {
			return err
		}
		d.Principals[id] = p
		return nil
	})
	if err != nil {
		return Created{}, err
	}
	return Created{Info: info(id, p), Token: token, Generation: res.Generation, Revision: res.Revision}, nil
}

// Revoke removes principal id: its token is refused from the revision on.
// An unknown id is not-found; a principal wider than by could give
// (Creator.MayGive) is forbidden: by revokes only what it could create.
// The history keeps the earlier revisions (by digest, never by token).
func (s *Service) Revoke(ctx context.Context, id string, by Creator, reason string) (varplane.ActivationResult, error) {
	if reason == "" {
		reason = "revoke " + id
	}
	return s.update(ctx, by.ID, reason, func(d *Document) error {
		p, ok := d.Principals[id]
		if !ok {
			return varplane.Errorf(varplane.CodeNotFound, "no principal %q", id)
		}
		if err := by.MayGive(Binding{Kinds: p.Kinds, Prefixes: p.Prefixes, Roles: p.Roles}); err != nil {
			return err
		}
		delete(d.Principals, id)
		return nil
	})
}

// List returns every principal, sorted by id, without digests.
func (s *Service) List(ctx context.Context) ([]Info, error) {
	d, _, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(d.Principals))
	for _, id := range d.ids() {
		out = append(out, info(id, d.Principals[id]))
	}
	return out, nil
}

func info(id string, p Principal) Info {
	return Info{ID: id, Binding: Binding{Kinds: p.Kinds, Prefixes: p.Prefixes, Roles: p.Roles}, CreatedAt: p.CreatedAt, CreatedBy: p.CreatedBy}
}

// read returns the current document (empty when the scope has no head) and
// the generation to publish against.
func (s *Service) read(ctx context.Context) (*Document, varplane.Generation, error) {
	st, err := s.engine.Store().State(ctx, Scope)
	if err != nil {
		return nil, 0, fmt.Errorf("read the access scope: %w", err)
	}
	if st.Head == nil {
		return &Document{Principals: map[string]Principal{}}, st.Generation, nil
	}
	d, err := ParseDocument(st.Head.Document)
	if err != nil {
		return nil, 0, fmt.Errorf("the access document at %s is unreadable: %w", st.Head.Revision, err)
	}
	return d, st.Generation, nil
}

// update applies change to the current document and publishes the result
// against the generation it read, again from a fresh read when another
// write won the race.
func (s *Service) update(ctx context.Context, actor, reason string, change func(*Document) error) (varplane.ActivationResult, error) {
	for attempt := 1; ; attempt++ {
		d, gen, err := s.read(ctx)
		if err != nil {
			return varplane.ActivationResult{}, err
		}
		if err := change(d); err != nil {
			return varplane.ActivationResult{}, err
		}
		doc, err := json.Marshal(d)
		if err != nil {
			return varplane.ActivationResult{}, fmt.Errorf("encode the access document: %w", err)
		}
		res, err := s.engine.Publish(ctx, varplane.PublishRequest{
			Scope: Scope, Document: doc, ExpectedGeneration: gen,
			Actor: actor, Owner: OwnerName, Reason: reason,
		})
		if errors.Is(err, varplane.ErrConflict) && attempt < maxAttempts {
			continue
		}
		if err != nil {
			return varplane.ActivationResult{}, fmt.Errorf("publish the access document: %w", err)
		}
		return res.ActivationResult, nil
	}
}
