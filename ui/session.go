package ui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
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

// LimitSessions and LimitSessionsPerIdentity name the caps of the session
// table in the Limit of a refused sign-in.
const (
	LimitSessions            = "max-sessions"
	LimitSessionsPerIdentity = "max-sessions-per-identity"
)

// sessions is the bounded table of sessions: at most max in all and at
// most perIdentity per identity. An identity at its cap that signs in
// again ends its own oldest session; a sign-in that finds the table full
// of other identities' sessions is refused (too-many-subscribers, limit
// max-sessions), so that no identity's sign-ins ever end another's
// session, and memory stays bounded whatever the number of sign-ins.
type sessions struct {
	mu          sync.Mutex
	m           map[string]*session
	byWho       map[string]int // live sessions per identity
	max         int
	perIdentity int
	ttl         time.Duration
	now         func() time.Time
}

func newSessions(max, perIdentity int, ttl time.Duration) *sessions {
	return &sessions{m: map[string]*session{}, byWho: map[string]int{}, max: max, perIdentity: perIdentity, ttl: ttl, now: time.Now}
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

// create stores a new session for token, whose identity is who, and
// returns it. At the identity's cap it ends who's own oldest session; with
// the table full of other identities' sessions it refuses with a
// too-many-subscribers error whose Limit is LimitSessions.
func (s *sessions) create(token, who string) (*session, error) {
	ss := &session{id: randomID(), token: token, who: who, csrf: randomID()}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	ss.expires = now.Add(s.ttl)
	for _, o := range s.m {
		if !now.Before(o.expires) {
			s.drop(o)
		}
	}
	for s.byWho[who] >= s.perIdentity {
		var oldest *session
		for _, o := range s.m {
			if o.who == who && (oldest == nil || o.expires.Before(oldest.expires)) {
				oldest = o
			}
		}
		s.drop(oldest)
	}
	if len(s.m) >= s.max {
		return nil, &varplane.Error{Code: varplane.CodeTooManyRequests, Limit: LimitSessions,
			Message: fmt.Sprintf("the console already holds its maximum of %d sessions; try again when one ends", s.max)}
	}
	s.m[ss.id] = ss
	s.byWho[who]++
	return ss, nil
}

// drop removes o from the table; s.mu is held.
func (s *sessions) drop(o *session) {
	if s.m[o.id] != o {
		return
	}
	delete(s.m, o.id)
	if n := s.byWho[o.who] - 1; n > 0 {
		s.byWho[o.who] = n
	} else {
		delete(s.byWho, o.who)
	}
}

// sweep asks check about every session's token, outside the lock, and
// ends those it denies (a revoked or expired token): it frees the slots a
// full table holds for tokens nobody may use any more.
func (s *sessions) sweep(ctx context.Context, check func(ctx context.Context, token string) bool) {
	s.mu.Lock()
	all := make([]*session, 0, len(s.m))
	for _, o := range s.m {
		all = append(all, o)
	}
	s.mu.Unlock()
	for _, o := range all {
		if !check(ctx, o.token) {
			s.mu.Lock()
			s.drop(o)
			s.mu.Unlock()
		}
	}
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
		s.drop(ss)
		return nil
	}
	return ss
}

// remove ends the session id names.
func (s *sessions) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.m[id]; ss != nil {
		s.drop(ss)
	}
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
