package push_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
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
