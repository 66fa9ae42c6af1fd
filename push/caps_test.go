package push_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/push/pushtest"
)

// subscribeAs subscribes for owner and returns the subscription or the error.
func subscribeAs(h *push.Hub, owner string) (*push.Subscription, error) {
	return h.SubscribeWith(context.Background(), push.Filter{Keys: []varplane.Scope{"a.x"}}, nil, push.SubscribeOptions{Owner: owner})
}

func TestPerTokenCap(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{MaxSubscribers: 10, MaxSubscribersPerToken: 2})
	a, b := push.TokenKey("token-a"), push.TokenKey("token-b")
	var held []*push.Subscription
	for range 2 {
		s, err := subscribeAs(h, a)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}
	_, err := subscribeAs(h, a)
	if !errors.Is(err, push.ErrTooManySubscribers) {
		t.Fatalf("third subscription of one token = %v, want too-many-subscribers", err)
	}
	var verr *varplane.Error
	if !errors.As(err, &verr) || verr.Limit != push.LimitSubscribersPerToken || wire.Status(verr.Code) != http.StatusServiceUnavailable {
		t.Errorf("refusal = %#v, want limit %q and 503", verr, push.LimitSubscribersPerToken)
	}
	// Another token still subscribes, and so does a request without one.
	if s, err := subscribeAs(h, b); err != nil {
		t.Fatalf("another token refused: %v", err)
	} else {
		s.Close()
	}
	if s, err := subscribeAs(h, ""); err != nil {
		t.Fatalf("a request without a token refused: %v", err)
	} else {
		s.Close()
	}
	// A released subscription frees its token's slot.
	held[0].Close()
	s, err := subscribeAs(h, a)
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	s.Close()
	st := h.Stats()
	if st.RefusedPerToken != 1 || st.RefusedFull != 0 {
		t.Errorf("RefusedPerToken, RefusedFull = %d, %d; want 1, 0", st.RefusedPerToken, st.RefusedFull)
	}
	// The global cap still applies, and is counted apart.
	g := newHub(t, e, push.Options{MaxSubscribers: 1, MaxSubscribersPerToken: -1})
	if _, err := subscribeAs(g, a); err != nil {
		t.Fatal(err)
	}
	_, err = subscribeAs(g, b)
	if !errors.As(err, &verr) || verr.Limit != push.LimitSubscribers {
		t.Errorf("full hub = %v, want limit %q", err, push.LimitSubscribers)
	}
	if st := g.Stats(); st.RefusedFull != 1 {
		t.Errorf("RefusedFull = %d, want 1", st.RefusedFull)
	}
}

func TestPerTokenCapDefault(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{MaxSubscribers: 30})
	for i := range 3 { // 30/DefaultTokenShare
		if _, err := subscribeAs(h, "k"); err != nil {
			t.Fatalf("subscription %d: %v", i+1, err)
		}
	}
	if _, err := subscribeAs(h, "k"); !errors.Is(err, push.ErrTooManySubscribers) {
		t.Fatalf("past the default share = %v, want too-many-subscribers", err)
	}
}

func TestTokenKey(t *testing.T) {
	if push.TokenKey("") != "" {
		t.Error(`TokenKey("") is not ""`)
	}
	k := push.TokenKey("s3cret-token")
	if k == "" || k == "s3cret-token" || k != push.TokenKey("s3cret-token") || k == push.TokenKey("s3cret-tokem") {
		t.Errorf("TokenKey = %q: want a stable key distinct per token and unlike it", k)
	}
}

// The per-address and per-connection caps refuse with their own Limit,
// count each key apart, and give a slot back when a subscription ends.
func TestPerAddrAndPerConnCaps(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{MaxSubscribers: 100, MaxSubscribersPerAddr: 3, MaxSubscribersPerConn: 2})
	sub := func(addr, conn string) (*push.Subscription, error) {
		s, err := h.SubscribeWith(context.Background(), push.Filter{Keys: []varplane.Scope{"a.x"}}, nil, push.SubscribeOptions{Addr: addr, Conn: conn})
		if err == nil {
			t.Cleanup(s.Close)
		}
		return s, err
	}
	limitOf := func(err error) string {
		var verr *varplane.Error
		if !errors.As(err, &verr) || !errors.Is(err, push.ErrTooManySubscribers) || wire.Status(verr.Code) != http.StatusServiceUnavailable {
			t.Fatalf("refusal = %v, want 503 too-many-subscribers", err)
		}
		return verr.Limit
	}
	first, err := sub("192.0.2.1", "192.0.2.1:1000")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub("192.0.2.1", "192.0.2.1:1000"); err != nil {
		t.Fatal(err)
	}
	_, err = sub("192.0.2.1", "192.0.2.1:1000")
	if got := limitOf(err); got != push.LimitSubscribersPerConn {
		t.Errorf("third on one connection: limit %q, want %q", got, push.LimitSubscribersPerConn)
	}
	if _, err := sub("192.0.2.1", "192.0.2.1:1001"); err != nil {
		t.Fatalf("another connection of the address: %v", err)
	}
	_, err = sub("192.0.2.1", "192.0.2.1:1002")
	if got := limitOf(err); got != push.LimitSubscribersPerAddr {
		t.Errorf("fourth of one address: limit %q, want %q", got, push.LimitSubscribersPerAddr)
	}
	if _, err := sub("192.0.2.2", "192.0.2.2:1000"); err != nil {
		t.Fatalf("another address: %v", err)
	}
	first.Close()
	if _, err := sub("192.0.2.1", "192.0.2.1:1002"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if st := h.Stats(); st.RefusedPerConn != 1 || st.RefusedPerAddr != 1 || st.RefusedFull != 0 {
		t.Errorf("stats %+v, want one refusal per connection and one per address", st)
	}
}

// A subscription whose recheck is denied ends with ErrRevoked (its error
// carrying the denial's code) when a commit to a RecheckOn scope arrives,
// and at the periodic pass; another token's subscription, and one whose
// recheck fails for another reason, stay open.
func TestRecheckEndsRevokedSubscriptions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  push.Options
		after func(t *testing.T, e *varplane.Engine)
	}{
		{"on a commit to the access scope", push.Options{RecheckInterval: -1, RecheckOn: func(s varplane.Scope) bool { return s == "acl.doc" }},
			func(t *testing.T, e *varplane.Engine) { activate(t, e, "acl.doc", `{"v":2}`) }},
		{"periodically", push.Options{RecheckInterval: 20 * time.Millisecond}, func(*testing.T, *varplane.Engine) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t)
			h := newHub(t, e, tc.opts)
			tokens := pushtest.NewTokens("alice", "bob", "carol")
			var storeDown atomic.Bool
			sub := func(token string) *push.Subscription {
				s, err := h.SubscribeWith(context.Background(), push.Filter{Keys: []varplane.Scope{"a.x"}}, nil, push.SubscribeOptions{
					Owner: push.TokenKey(token),
					Recheck: func(context.Context) error {
						if token == "carol" && storeDown.Load() {
							return errors.New("the access scope cannot be read")
						}
						_, err := tokens.Authorize(context.Background(), varplane.Access{Kind: varplane.KindRead, Scope: "a.x", Token: token})
						return err
					}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				return s
			}
			alice, bob, carol := sub("alice"), sub("bob"), sub("carol")
			tokens.Revoke("alice")
			storeDown.Store(true)
			tc.after(t, e)
			select {
			case <-alice.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the revoked token's subscription is still open")
			}
			if err := alice.Err(); !errors.Is(err, push.ErrRevoked) || varplane.ErrorCode(err) != varplane.CodeForbidden || push.Reason(err) != "revoked" {
				t.Errorf("Err = %v (code %s, reason %s), want ErrRevoked with forbidden", err, varplane.ErrorCode(err), push.Reason(err))
			}
			time.Sleep(50 * time.Millisecond) // a pass more, where the periodic one runs
			if bob.Err() != nil || carol.Err() != nil {
				t.Errorf("bob: %v, carol: %v; want both open", bob.Err(), carol.Err())
			}
			if st := h.Stats(); st.Revoked != 1 || st.Subscribers != 2 {
				t.Errorf("Revoked %d, Subscribers %d; want 1, 2", st.Revoked, st.Subscribers)
			}
		})
	}
}
