package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strconv"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/ui"
)

// pagePath is the values service's own page. With the console on it is
// a redirect to the console's Components page, which has its features
// with sessions, CSRF tokens and post/redirect/get; with --ui=false the
// service's page is served there, as the values service always publishes
// one.
const pagePath = "/.configuration"

func init() {
	serveExtensions = append(serveExtensions, func() serveExtension { return &componentsExtension{} })
}

// componentsExtension is `serve --components FILE`: the values service of a
// deployment declaration (what `varplane config deploy` prints) over serve's
// engine, so that creates are revisions and activations of ordinary scopes
// and reach history, rollback, the audit log and the push streams.
type componentsExtension struct {
	file string
	// fs is serve's FlagSet, kept to read --max-body-bytes after parsing:
	// it is serve's flag, and reading it here keeps one flag and one
	// meaning for both APIs.
	fs *flag.FlagSet
}

// Owners reserves the configuration scopes ("<component>@<epoch>") to the
// values service when it is served: the var admin API then answers
// scope-owned for them, so that nothing the schema forbids is ever stored
// around the service. serve asks after parsing flags, before it builds the
// engine.
func (e *componentsExtension) Owners() []varplane.Owner {
	if e.file == "" {
		return nil
	}
	return []varplane.Owner{config.Owner}
}

// RegisterFlags adds --components and keeps fs to read serve's own flags.
func (e *componentsExtension) RegisterFlags(fs *flag.FlagSet) {
	e.fs = fs
	fs.StringVar(&e.file, "components", "", "deployment declaration (JSON, from `varplane config deploy`); serves the component configuration values service at /configuration/values/ and its page at /.configuration (with the console on, a redirect to /ui/components)")
}

// Start loads the deployment and mounts the values service on rt.Mux; it
// does nothing without --components. An invalid deployment is a usage error
// (exit 2), reported before serve listens.
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
	rt.Values = svc
	page := ui.ComponentsRedirect(consolePath)
	if e.flagValue("ui") == "false" {
		page = ui.ValuesPage(svc, ui.ValuesPageOptions{Authorizer: rt.Authorizer, Limits: e.limits(rt), Logger: rt.Logger})
	}
	rt.mounts = append(rt.mounts, func(http.Handler) (string, http.Handler) { return pagePath, page })
	rt.Logger.Info("component configuration served", "file", e.file, "components", len(dep.Components), "environment", dep.Environment, "path", "/configuration/values/")
	return nil, nil
}

// limits are the engine's limits with serve's --max-body-bytes.
func (e *componentsExtension) limits(rt *serveRuntime) varplane.Limits {
	lim := rt.Engine.Limits()
	if n, err := strconv.ParseInt(e.flagValue("max-body-bytes"), 10, 64); err == nil && n > 0 {
		lim.MaxBodyBytes = n
	}
	return lim
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
