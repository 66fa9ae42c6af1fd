package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"net/http"
	"strconv"

	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/httpapi"
)

// The routes of the values service, mounted at the server root next to the
// var API (which stays under --base): the paths every consumer and the
// config/consumer package expect, whatever the base.
var componentRoutes = []string{
	"/configuration/values/",      // list, get and create (a subtree)
	"/configuration/values:fetch", // fetch
	"/configuration/values:watch", // created events
	"/.configuration",             // the page
}

func init() {
	serveExtensions = append(serveExtensions, func() serveExtension { return &componentsExtension{} })
}

// componentsExtension is `serve --components FILE`: the values service of a
// deployment declaration (what `varplane config deploy` prints) over serve's
// engine, so that creates are revisions and activations of ordinary scopes
// and reach history, rollback, the audit log and the push streams.
type componentsExtension struct {
	file string
	// fs is serve's FlagSet, kept to read --tokens and --max-body-bytes
	// after parsing: they are serve's flags, and reading them here keeps
	// one flag and one meaning for both APIs.
	fs *flag.FlagSet
}

// RegisterFlags adds --components and keeps fs to read serve's own flags.
func (e *componentsExtension) RegisterFlags(fs *flag.FlagSet) {
	e.fs = fs
	fs.StringVar(&e.file, "components", "", "deployment declaration (JSON, from `varplane config deploy`); serves the component configuration values service at /configuration/values/ and its page at /.configuration")
}

// Start loads the deployment and mounts the values service on rt.Mux; it
// does nothing without --components. An invalid deployment or token file
// is a usage error (exit 2), reported before serve listens.
func (e *componentsExtension) Start(ctx context.Context, rt *serveRuntime) (func(context.Context) error, error) {
	if e.file == "" {
		return nil, nil
	}
	dep, err := config.LoadDeployment(e.file)
	if err != nil {
		return nil, &usageError{err: fmt.Errorf("--components: %w", err)}
	}
	svc, err := config.NewService(rt.Engine, dep)
	if err != nil {
		return nil, fmt.Errorf("--components %s: %w", e.file, err)
	}
	identity, err := e.identity()
	if err != nil {
		return nil, err
	}
	maxBody, err := e.maxBodyBytes()
	if err != nil {
		return nil, err
	}
	h := config.Handler(svc, config.HandlerOptions{Identity: identity, MaxBodyBytes: maxBody, Logger: rt.Logger})
	for _, p := range componentRoutes {
		route := h
		if p == "/configuration/values:watch" {
			route = endOnShutdown(ctx, h)
		}
		rt.Mux.Handle(p, route)
	}
	rt.Logger.Info("component configuration served", "file", e.file, "components", len(dep.Components), "environment", dep.Environment, "path", "/configuration/values/")
	return nil, nil
}

// identity resolves callers of the values service from serve's --tokens,
// the one file both APIs read: id= names the caller (recorded as the
// originator), roles= its roles here. Without --tokens every caller is
// anonymous with every role, as the var API then allows everything.
func (e *componentsExtension) identity() (config.IdentityResolver, error) {
	path := e.flagValue("tokens")
	if path == "" {
		return config.AllowAll(), nil
	}
	// The var API's parser, not config.LoadTokens: the file is the var
	// API's, and its kinds= and prefixes= must keep working (config's line
	// parser refuses them) so that one file can narrow a token on both.
	grants, err := httpapi.LoadTokenFile(path)
	if err != nil {
		return nil, &usageError{err: fmt.Errorf("--tokens: %w", err)}
	}
	return config.StaticTokens(tokenEntries(grants)), nil
}

// tokenEntries maps the var API's grants to identities of the values
// service. A token without id= is known by a digest of it, so that records
// never show it. A token without roles= holds every role ("system") when it
// is a bare token, which may do everything on the var API too; when kinds=
// or prefixes= narrow it there, it holds none here: a token narrowed on one
// API is never wider on the other.
func tokenEntries(grants []httpapi.Grant) []config.TokenEntry {
	out := make([]config.TokenEntry, 0, len(grants))
	for _, g := range grants {
		e := config.TokenEntry{Token: g.Token, ID: g.ID, Roles: g.Roles}
		if e.ID == "" {
			sum := sha256.Sum256([]byte(g.Token))
			e.ID = "token:" + hex.EncodeToString(sum[:4])
		}
		if e.Roles == nil && len(g.Kinds) == 0 && len(g.Prefixes) == 0 {
			e.Roles = []string{"system"}
		}
		out = append(out, e)
	}
	return out
}

func (e *componentsExtension) maxBodyBytes() (int64, error) {
	s := e.flagValue("max-body-bytes")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, usagef("--max-body-bytes %q: %v", s, err)
	}
	return n, nil
}

func (e *componentsExtension) flagValue(name string) string {
	if e.fs == nil {
		return ""
	}
	f := e.fs.Lookup(name)
	if f == nil {
		return ""
	}
	return f.Value.String()
}

// endOnShutdown ends h's requests when ctx (serve's: cancelled by SIGINT or
// SIGTERM) ends. The HTTP server's drain waits for requests in flight, and a
// created-events stream never finishes by itself, so without this a single
// watcher would hold the shutdown until its deadline.
func endOnShutdown(ctx context.Context, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		h.ServeHTTP(w, r.WithContext(rctx))
	})
}
