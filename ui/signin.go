package ui

import (
	"context"
	"net/http"
	"strings"

	"github.com/varplane/varplane"
)

type signinView struct {
	CSRF  string
	Next  string
	Error string
}

func (h *Handler) cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: h.prefix, MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
}

// handleSigninForm shows the sign-in form with a fresh CSRF token, which
// also goes into a short-lived cookie: the POST must carry both (there is
// no session yet to hold it).
func (h *Handler) handleSigninForm(w http.ResponseWriter, r *http.Request) {
	token := randomID()
	http.SetCookie(w, h.cookie(r, signinCookie, token, 600))
	h.render(w, r, nil, http.StatusOK, "signin", "Sign in", signinView{CSRF: token, Next: h.next(r.URL.Query().Get("next"))})
}

// handleSignin checks the token with the API's authorizer (kind identify:
// who is it?) and starts a session. The token is kept in the session
// only; a refused one is not echoed.
func (h *Handler) handleSignin(w http.ResponseWriter, r *http.Request) {
	if err := readForm(w, r, 64<<10); err != nil {
		h.renderError(w, r, nil, err)
		return
	}
	next := h.next(r.PostForm.Get("next"))
	c, err := r.Cookie(signinCookie)
	if err != nil || !sameSecret(c.Value, r.PostForm.Get("csrf")) {
		h.renderError(w, r, nil, varplane.Errorf(varplane.CodeForbidden, "the form's security token is missing or stale"))
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	id, err := varplane.Authorize(r.Context(), h.opts.Authorizer, varplane.Access{Kind: varplane.KindIdentify, Token: token})
	if err != nil {
		fresh := randomID()
		http.SetCookie(w, h.cookie(r, signinCookie, fresh, 600))
		status := http.StatusUnauthorized
		msg := "That token was not accepted. Check it and try again."
		if varplane.ErrorCode(err) == varplane.CodeInternal {
			h.opts.Logger.Error("ui: sign-in: the authorizer failed", "err", err)
			status, msg = http.StatusInternalServerError, Sentence(err)
		}
		h.render(w, r, nil, status, "signin", "Sign in", signinView{CSRF: fresh, Next: next, Error: msg})
		return
	}
	s, err := h.sessions.create(token, id.ID)
	if err != nil {
		// Full of other identities' sessions: free those whose token is no
		// longer accepted, then try once more.
		h.sessions.sweep(r.Context(), h.accepted)
		s, err = h.sessions.create(token, id.ID)
	}
	if err != nil {
		h.renderError(w, r, nil, err)
		return
	}
	http.SetCookie(w, h.cookie(r, signinCookie, "", -1))
	http.SetCookie(w, h.cookie(r, cookieName, s.id, int(h.opts.SessionTTL.Seconds())))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// accepted reports whether the authorizer still accepts token (kind
// identify). Only a denial (forbidden, unauthorized) is false: an
// authorizer that fails keeps the session, as the API's own answer
// will tell the browser.
func (h *Handler) accepted(ctx context.Context, token string) bool {
	_, err := varplane.Authorize(ctx, h.opts.Authorizer, varplane.Access{Kind: varplane.KindIdentify, Token: token})
	switch varplane.ErrorCode(err) {
	case varplane.CodeForbidden, varplane.CodeUnauthorized:
		return false
	}
	return true
}

func (h *Handler) handleSignout(w http.ResponseWriter, r *http.Request, q *request) {
	h.sessions.remove(q.s.id)
	http.SetCookie(w, h.cookie(r, cookieName, "", -1))
	http.Redirect(w, r, h.prefix+"/signin", http.StatusSeeOther)
}

// next keeps a redirect target inside the console (never another host).
func (h *Handler) next(s string) string {
	if strings.HasPrefix(s, h.prefix+"/") && !strings.HasPrefix(s, "//") && !strings.ContainsAny(s, "\\\r\n") {
		return s
	}
	return h.prefix + "/"
}
