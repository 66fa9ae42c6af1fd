package main

import (
	"context"
	"flag"
	"net/http"

	"github.com/varplane/varplane/ui"
)

func init() {
	serveExtensions = append(serveExtensions, func() serveExtension { return &uiExtension{} })
}

// consolePath is where serve mounts the console.
const consolePath = "/ui"

// uiExtension is serve's operator console under /ui (on unless
// --ui=false): pages over the server's own API, called in process with
// the signed-in token, so the console authorizes exactly as the API does.
type uiExtension struct {
	enabled bool
}

// RegisterFlags adds --ui.
func (e *uiExtension) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&e.enabled, "ui", true, "serve the operator console at /ui/ (sign in with an API token)")
}

// Start mounts the console on the HTTP API. Its API is the HTTP API
// itself, the var API and the control API included.
func (e *uiExtension) Start(ctx context.Context, rt *serveRuntime) (func(context.Context) error, error) {
	if !e.enabled {
		return nil, nil
	}
	rt.mounts = append(rt.mounts, func(api http.Handler) (string, http.Handler) {
		return consolePath + "/", ui.New(ui.Options{API: api, Base: rt.Base, Prefix: consolePath, Authorizer: rt.Authorizer, Limits: rt.Engine.Limits(), Logger: rt.Logger})
	}, func(http.Handler) (string, http.Handler) {
		return consolePath, http.RedirectHandler(consolePath+"/", http.StatusMovedPermanently)
	})
	rt.Logger.Info("operator console served", "path", consolePath+"/")
	return nil, nil
}
