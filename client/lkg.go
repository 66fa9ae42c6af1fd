package client

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/atomicfile"
)

// The last-known-good copy (Options.LastKnownGood): one file per scope,
// holding the last runtime head the client installed. It is read once, when
// a scope is registered, and served with TierStale until the server answers
// for the scope (a head replaces it, a no-head removes it and its file).
// Writes are atomic (a temporary file, fsync, rename), so a crash leaves the
// previous copy or the new one.

// lkgFile is the stored form of one copy.
type lkgFile struct {
	Scope      varplane.Scope      `json:"scope"`
	Generation varplane.Generation `json:"generation"`
	Revision   varplane.Revision   `json:"revision"`
	Document   json.RawMessage     `json:"document"`
	SavedAt    time.Time           `json:"savedAt"`
}

func (c *Client) lkgPath(sc varplane.Scope) string {
	return filepath.Join(c.opts.LastKnownGood, base64.RawURLEncoding.EncodeToString([]byte(sc))+".json")
}

// lkgLoad fills s's stale tier from its copy, if there is a readable one
// that still passes Validate. Caller holds wmu.
func (c *Client) lkgLoad(s *slot) {
	if c.opts.LastKnownGood == "" {
		return
	}
	b, err := os.ReadFile(c.lkgPath(s.scope))
	if err != nil {
		if !os.IsNotExist(err) {
			c.log.Warn("varplane last-known-good copy cannot be read; ignoring it", "scope", string(s.scope), "err", err)
		}
		return
	}
	var f lkgFile
	if err := json.Unmarshal(b, &f); err != nil || f.Scope != s.scope || !json.Valid(f.Document) {
		c.log.Warn("varplane last-known-good copy is not usable; ignoring it", "scope", string(s.scope))
		return
	}
	if c.opts.Validate != nil {
		if err := c.opts.Validate(s.scope, f.Document); err != nil {
			c.log.Warn("varplane last-known-good copy does not fit its schema; ignoring it", "scope", string(s.scope), "err", err)
			return
		}
	}
	s.stale, s.staleGen, s.staleRev = f.Document, f.Generation, f.Revision
}

// lkgSave writes the copy of a head the server served. A failure is logged:
// the value in memory is unaffected.
func (c *Client) lkgSave(sc varplane.Scope, gen varplane.Generation, rev varplane.Revision, doc json.RawMessage) {
	if c.opts.LastKnownGood == "" {
		return
	}
	err := func() error {
		if err := os.MkdirAll(c.opts.LastKnownGood, 0o700); err != nil {
			return err
		}
		b, err := json.Marshal(lkgFile{Scope: sc, Generation: gen, Revision: rev, Document: doc, SavedAt: time.Now().UTC()})
		if err != nil {
			return err
		}
		return atomicfile.WritePrivate(c.lkgPath(sc), b)
	}()
	if err != nil {
		c.log.Warn("varplane last-known-good copy cannot be written", "scope", string(sc), "err", err)
	}
}

// lkgDrop removes the copy of a scope the server says has no head.
func (c *Client) lkgDrop(sc varplane.Scope) {
	if c.opts.LastKnownGood == "" {
		return
	}
	if err := os.Remove(c.lkgPath(sc)); err != nil && !os.IsNotExist(err) {
		c.log.Warn("varplane last-known-good copy cannot be removed", "scope", string(sc), "err", err)
	}
}
