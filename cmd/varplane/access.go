package main

import (
	"context"
	"flag"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
)

func init() {
	serveExtensions = append(serveExtensions, func() serveExtension { return &accessExtension{} })
}

// accessExtension is `serve --access-control`: access control held in the
// store (package access). The principals live in the reserved scope
// varplane.access, which every replica reads as it reads any document;
// serve authorizes every entrance by the tokens file first and the store
// second (access.Combine), and serves {base}/access/tokens.
type accessExtension struct {
	enabled bool
}

// authorizing is an extension that decides how serve authorizes: serve
// hands it the engine and the authorizer --tokens built (nil without
// --tokens) before it builds anything that authorizes, and uses the one it
// returns at every entrance.
type authorizing interface {
	Authorizer(engine *varplane.Engine, file varplane.Authorizer) varplane.Authorizer
}

var _ authorizing = (*accessExtension)(nil)

// RegisterFlags adds --access-control.
func (e *accessExtension) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&e.enabled, "access-control", false, "authorize by the principals held in the store (varplane token, varplane migrate bootstrap) as well as --tokens: a token is looked up in the tokens file first, then in the store; serves {base}/access/tokens")
}

// Owners reserves the access scope to the access subsystem whether or not
// access control is on, so that nothing but this subsystem (and the
// migration tool) ever writes the principals a server may later trust.
func (e *accessExtension) Owners() []varplane.Owner { return []varplane.Owner{access.Owner} }

// Authorizer returns file unchanged without --access-control, and the
// combination of file and the store's principals with it.
func (e *accessExtension) Authorizer(engine *varplane.Engine, file varplane.Authorizer) varplane.Authorizer {
	if !e.enabled {
		return file
	}
	scoped, _ := file.(*access.ScopedAuthorizer)
	return access.Combine(scoped, access.NewAuthorizer(engine.Store()))
}

// Start mounts the access API under {base}/access/ with --access-control.
func (e *accessExtension) Start(ctx context.Context, rt *serveRuntime) (func(context.Context) error, error) {
	if !e.enabled {
		return nil, nil
	}
	svc := access.NewService(rt.Engine)
	rt.Access = svc
	n := 0
	if list, err := svc.List(ctx); err == nil {
		n = len(list)
	}
	rt.Logger.Info("access control in the store", "scope", string(access.Scope), "principals", n, "path", rt.Base+"/access/tokens")
	if n == 0 {
		rt.Logger.Warn("access control: the store holds no principal yet; name the first administrator with `varplane migrate bootstrap`")
	}
	return nil, nil
}
