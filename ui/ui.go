package ui

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/internal/wire"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure the console.
type Options struct {
	// API is the server's handler that answers the var API under Base, the
	// control API under Base+"/control" and the values service (the
	// httpapi.Handler the console is mounted on). Every read and write of
	// the console is a request to it.
	API http.Handler
	// Base is the var API's base path ("/vars"; "" or "/" for the root).
	Base string
	// Prefix is where the console is mounted; "/ui" when empty.
	Prefix string
	// Authorizer is the API's authorizer: the console asks it who a token
	// is at sign-in and whether to show a write control. It decides no
	// request: the API does.
	Authorizer varplane.Authorizer
	// Limits bound a document typed into a form (its YAML is converted
	// under them). Default varplane.DefaultLimits().
	Limits varplane.Limits
	// Logger receives the console's own failures; never a token.
	Logger *slog.Logger
	// MaxSessions bounds the session table (default DefaultMaxSessions)
	// and MaxSessionsPerIdentity the sessions of one identity (default
	// DefaultMaxSessionsPerIdentity): an identity at its cap that signs in
	// again ends its own oldest session, never another identity's, and a
	// sign-in to a table full of other identities' sessions is refused
	// (503 too-many-subscribers, limit max-sessions). SessionTTL is a
	// session's lifetime from sign-in (default DefaultSessionTTL); a session whose token
	// the authorizer no longer accepts ends at its next request.
	MaxSessions            int
	MaxSessionsPerIdentity int
	SessionTTL             time.Duration
	// PollInterval is how often an open change's page refreshes its
	// state, canary reports and transitions, which the watch stream does
	// not carry (default 5s).
	PollInterval time.Duration
}

// Handler is the console. It is safe for concurrent use.
type Handler struct {
	opts     Options
	prefix   string
	sessions *sessions
	pages    map[string]*template.Template
	mux      *http.ServeMux
}

// cookieName is the session cookie; signinCookie carries the CSRF token
// of the sign-in form (there is no session yet to hold it).
const (
	cookieName   = "varplane_session"
	signinCookie = "varplane_signin"
)

// The defaults of Options' session bounds: sixteen browsers of one
// identity, so that it takes 64 identities to fill the default table, and
// a working day's sign-in.
const (
	DefaultMaxSessions            = 1024
	DefaultMaxSessionsPerIdentity = 16
	DefaultSessionTTL             = 8 * time.Hour
)

// New returns the console for opts.
func New(opts Options) *Handler {
	if opts.Prefix == "" {
		opts.Prefix = "/ui"
	}
	opts.Prefix = "/" + strings.Trim(opts.Prefix, "/")
	opts.Base = strings.TrimRight(opts.Base, "/")
	if opts.Authorizer == nil {
		opts.Authorizer = varplane.AllowAll
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.MaxSessionsPerIdentity <= 0 {
		opts.MaxSessionsPerIdentity = DefaultMaxSessionsPerIdentity
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = DefaultSessionTTL
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 5 * time.Second
	}
	opts.Limits = opts.Limits.WithDefaults()
	h := &Handler{opts: opts, prefix: opts.Prefix, sessions: newSessions(opts.MaxSessions, opts.MaxSessionsPerIdentity, opts.SessionTTL)}
	h.pages = parsePages(h)
	static, _ := fs.Sub(staticFS, "static")
	m := http.NewServeMux()
	p := h.prefix
	m.Handle("GET "+p+"/static/", http.StripPrefix(p+"/static/", staticFiles(http.FileServerFS(static))))
	m.HandleFunc("GET "+p+"/signin", h.handleSigninForm)
	m.HandleFunc("POST "+p+"/signin", h.handleSignin)
	m.HandleFunc("POST "+p+"/signout", h.authed(h.handleSignout))
	m.HandleFunc("GET "+p+"/{$}", h.authed(h.handleScopes))
	m.HandleFunc("GET "+p+"/scope", h.authed(h.handleScope))
	m.HandleFunc("POST "+p+"/publish", h.authed(h.handlePublish))
	m.HandleFunc("GET "+p+"/rollback", h.authed(h.handleRollbackConfirm))
	m.HandleFunc("POST "+p+"/rollback", h.authed(h.handleRollback))
	m.HandleFunc("GET "+p+"/deactivate", h.authed(h.handleDeactivateConfirm))
	m.HandleFunc("POST "+p+"/deactivate", h.authed(h.handleDeactivate))
	m.HandleFunc("GET "+p+"/changes", h.authed(h.handleChanges))
	m.HandleFunc("GET "+p+"/change", h.authed(h.handleChange))
	m.HandleFunc("POST "+p+"/change", h.authed(h.handleTransition))
	m.HandleFunc("GET "+p+"/policies", h.authed(h.handlePolicies))
	m.HandleFunc("POST "+p+"/policies", h.authed(h.handlePolicyWrite))
	m.HandleFunc("GET "+p+"/schemas", h.authed(h.handleSchemas))
	m.HandleFunc("POST "+p+"/schemas", h.authed(h.handleSchemaWrite))
	m.HandleFunc("GET "+p+"/fleet", h.authed(h.handleFleet))
	m.HandleFunc("GET "+p+"/rollouts", h.authed(h.handleRollouts))
	m.HandleFunc("GET "+p+"/rollout", h.authed(h.handleRollout))
	m.HandleFunc("POST "+p+"/rollout", h.authed(h.handleRolloutControl))
	m.HandleFunc("GET "+p+"/components", h.authed(h.handleComponents))
	m.HandleFunc("POST "+p+"/components", h.authed(h.handleCreateComponent))
	m.HandleFunc("GET "+p+"/live", h.authed(h.handleLive))
	m.HandleFunc(p+"/", h.handleNotFound)
	h.mux = m
	return h
}

// ServeHTTP serves the console. Every answer carries the strict policy:
// scripts and styles only from the console's own files, no frames, forms
// only to itself. Cross-origin writes are refused before anything else
// (the CSRF token is the second lock).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("X-Frame-Options", "DENY")
	crossOrigin.Handler(h.mux).ServeHTTP(w, r)
}

var crossOrigin = func() *http.CrossOriginProtection {
	c := http.NewCrossOriginProtection()
	c.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "This form was sent from another site and was refused.", http.StatusForbidden)
	}))
	return c
}()

func staticFiles(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// request is one signed-in request: its session and its API client.
type request struct {
	s   *session
	api *client.Admin
}

type authedFunc func(w http.ResponseWriter, r *http.Request, q *request)

// authed runs f for a signed-in browser: a request without a live session
// is sent to the sign-in page (GET) or refused (POST); a POST whose CSRF
// token is not the session's is refused, whatever it carries. The
// session's token is authenticated again on every request, so a session
// whose token was revoked (or has expired) ends at once.
func (h *Handler) authed(f authedFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var s *session
		if c, err := r.Cookie(cookieName); err == nil {
			s = h.sessions.get(c.Value)
		}
		if s != nil && !h.accepted(r.Context(), s.token) {
			h.sessions.remove(s.id)
			s = nil
		}
		if s == nil {
			if r.Method == http.MethodGet && r.URL.Path != h.prefix+"/live" {
				http.Redirect(w, r, h.prefix+"/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			h.renderError(w, r, nil, varplane.Errorf(varplane.CodeUnauthorized, "sign in first"))
			return
		}
		if r.Method == http.MethodPost {
			if err := readForm(w, r, h.opts.Limits.MaxBodyBytes*2+64<<10); err != nil {
				h.renderError(w, r, s, err)
				return
			}
			if !sameSecret(r.PostForm.Get("csrf"), s.csrf) {
				h.renderError(w, r, s, varplane.Errorf(varplane.CodeForbidden, "the form's security token is missing or stale"))
				return
			}
		}
		api, err := client.NewAdmin("http://varplane.console", client.AdminOptions{
			Base: h.apiBase(), Token: s.token, HTTPClient: &http.Client{Transport: inProcess{h.opts.API}},
		})
		if err != nil {
			h.renderError(w, r, s, err)
			return
		}
		f(w, r, &request{s: s, api: api})
	}
}

func (h *Handler) apiBase() string {
	if h.opts.Base == "" {
		return "/"
	}
	return h.opts.Base
}

// may reports whether the session's token may do kind on scope, asking
// the API's authorizer exactly as the API will when the form is sent. It
// only decides what the page shows.
func (h *Handler) may(ctx context.Context, s *session, kind varplane.Kind, scope varplane.Scope) bool {
	_, err := varplane.Authorize(ctx, h.opts.Authorizer, varplane.Access{Kind: kind, Scope: scope, Token: s.token})
	return err == nil
}

// page is what every template gets.
type page struct {
	Title  string
	Prefix string
	Who    string
	CSRF   string
	Flash  *flash
	Nav    string
	Data   any
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, s *session, status int, name, title string, data any) {
	p := page{Title: title, Prefix: h.prefix, Nav: name, Data: data}
	if s != nil {
		p.Who, p.CSRF = s.who, s.csrf
		// A live refresh (the script's fetch of the same page) leaves the
		// flash to the page the browser loads next.
		if r.Header.Get("X-Varplane-Live") == "" {
			p.Flash = h.sessions.takeFlash(s)
		}
	}
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		h.opts.Logger.Error("ui: render", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// renderError shows err in words with its HTTP status.
func (h *Handler) renderError(w http.ResponseWriter, r *http.Request, s *session, err error) {
	code := varplane.ErrorCode(err)
	if code == varplane.CodeInternal {
		h.opts.Logger.Error("ui: request failed", "path", r.URL.Path, "err", err)
	}
	h.render(w, r, s, wire.Status(code), "error", "Error", errorView{Code: string(code), Sentence: Sentence(err)})
}

type errorView struct {
	Code     string
	Sentence string
}

// redirect ends a write: the result goes into the session's flash and the
// browser is sent to target with 303 (post/redirect/get), so a reload
// never sends the form again.
func (h *Handler) redirect(w http.ResponseWriter, r *http.Request, s *session, target string, f *flash) {
	if f != nil {
		h.sessions.setFlash(s, f)
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

func (h *Handler) failFlash(err error) *flash {
	f := &flash{Message: Sentence(err)}
	var ve *varplane.Error
	if errors.As(err, &ve) {
		f.Issues = ve.Issues
		switch ve.Code {
		case varplane.CodeRevisionInvalid, varplane.CodeLimitExceeded, varplane.CodePayloadTooLarge, varplane.CodeBadRequest:
			f.Field = "document"
		case varplane.CodeRevisionConflict:
			f.Field = "expected"
		}
	}
	if varplane.ErrorCode(err) == varplane.CodeInternal {
		h.opts.Logger.Error("ui: write failed", "err", err)
	}
	return f
}

// pageFlash is failFlash for a form without fields of its own (rollback,
// deactivate, a change's actions): the message goes at the top of the
// page it leads to.
func (h *Handler) pageFlash(err error) *flash {
	f := h.failFlash(err)
	f.Field = ""
	return f
}

func (h *Handler) handleNotFound(w http.ResponseWriter, r *http.Request) {
	var s *session
	if c, err := r.Cookie(cookieName); err == nil {
		s = h.sessions.get(c.Value)
	}
	h.renderError(w, r, s, varplane.Errorf(varplane.CodeNotFound, "there is no page at %s", r.URL.Path))
}

// readForm reads a posted form through the wire layer's bounded body read
// (413 beyond limit, the rest of an over-limit body drained so the browser
// sees the answer) and parses it into r.PostForm.
func readForm(w http.ResponseWriter, r *http.Request, limit int64) error {
	body, err := wire.ReadBody(w, r, limit)
	if err != nil {
		return err
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return wire.BadRequest("the form could not be read")
	}
	r.PostForm, r.Form = form, form
	return nil
}
