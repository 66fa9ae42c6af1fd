package ui

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"sync"
	"time"

	"github.com/varplane/varplane"
)

// session is one signed-in browser. The token stays here, in memory: the
// browser holds only the session's random id (in an HttpOnly cookie) and
// its CSRF token (in each form).
type session struct {
	id      string
	token   string
	who     string // the identity the authorizer gave at sign-in, for the header
	csrf    string
	expires time.Time
	flash   *flash
}

// flash is what a write left for the page the browser is redirected to
// (post/redirect/get): a sentence, the issues on the field they concern,
// and what the operator typed, so that a refused form is shown again.
type flash struct {
	OK      bool
	Message string
	Field   string // the form field the message concerns ("document", "expected")
	Issues  []varplane.Issue
	Draft   string
	Reason  string
	Target  string      // the component a message concerns (the components page)
	Policy  *policyForm // the policy form as typed, after a refusal
}

// sessions is the bounded table of sessions. When it is full, signing in
// evicts the session closest to its expiry, so memory stays bounded
// whatever the number of sign-ins.
type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	max int
	ttl time.Duration
	now func() time.Time
}

func newSessions(max int, ttl time.Duration) *sessions {
	return &sessions{m: map[string]*session{}, max: max, ttl: ttl, now: time.Now}
}

// randomID returns 32 random bytes in hex.
func randomID() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on the platforms Go supports.
		panic("ui: crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// create stores a new session for token and returns it.
func (s *sessions) create(token, who string) *session {
	ss := &session{id: randomID(), token: token, who: who, csrf: randomID()}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	ss.expires = now.Add(s.ttl)
	for id, o := range s.m {
		if !now.Before(o.expires) {
			delete(s.m, id)
		}
	}
	for len(s.m) >= s.max {
		var oldest *session
		for _, o := range s.m {
			if oldest == nil || o.expires.Before(oldest.expires) {
				oldest = o
			}
		}
		delete(s.m, oldest.id)
	}
	s.m[ss.id] = ss
	return ss
}

// get returns the live session id names, or nil.
func (s *sessions) get(id string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[id]
	if ss == nil {
		return nil
	}
	if !s.now().Before(ss.expires) {
		delete(s.m, id)
		return nil
	}
	return ss
}

// remove ends the session id names.
func (s *sessions) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// setFlash leaves f for the session's next page.
func (s *sessions) setFlash(ss *session, f *flash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss.flash = f
}

// takeFlash returns and clears the session's flash.
func (s *sessions) takeFlash(ss *session) *flash {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := ss.flash
	ss.flash = nil
	return f
}

// len returns the number of sessions held.
func (s *sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// sameSecret compares two secrets in constant time; an empty one never
// matches.
func sameSecret(a, b string) bool {
	return a != "" && b != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
