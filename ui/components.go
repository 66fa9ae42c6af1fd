package ui

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/internal/wire"
)

// valuesPath is where serve mounts the values service (at the server
// root, whatever the var API's base).
const valuesPath = "/configuration/values/"

// listedComponent is one item of GET /configuration/values/.
type listedComponent struct {
	Component     string          `json:"component"`
	Epoch         string          `json:"epoch"`
	Schema        json.RawMessage `json:"schema"`
	Configuration json.RawMessage `json:"configuration"`
}

type componentView struct {
	listedComponent
	Values, SchemaText string
}

type componentsView struct {
	Served     bool
	Components []componentView
	CanCreate  bool
}

// rootAPI is a client of the routes at the server root (the values
// service), with the session's token.
func (h *Handler) rootAPI(s *session) (*client.Admin, error) {
	return client.NewAdmin("http://varplane.console", client.AdminOptions{
		Base: "/", Token: s.token, HTTPClient: &http.Client{Transport: inProcess{h.opts.API}},
	})
}

// handleComponents shows the component configurations of the values
// service (serve --components): epoch, values and schema, and a create
// form for an identity with the service's create role. It replaces the
// service's own page at /.configuration (which redirects here when the
// console is on), adding sessions, CSRF tokens and post/redirect/get.
func (h *Handler) handleComponents(w http.ResponseWriter, r *http.Request, q *request) {
	api, err := h.rootAPI(q.s)
	if err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	var list []listedComponent
	v := componentsView{Served: true}
	switch err := api.Call(r.Context(), http.MethodGet, valuesPath, nil, nil, &list); {
	case varplane.ErrorCode(err) == varplane.CodeNotFound:
		v.Served = false
	case err != nil:
		h.renderError(w, r, q.s, err)
		return
	}
	for _, l := range list {
		v.Components = append(v.Components, componentView{listedComponent: l, Values: pretty(l.Configuration), SchemaText: pretty(l.Schema)})
	}
	if id, err := varplane.Authorize(r.Context(), h.opts.Authorizer, varplane.Access{Kind: varplane.KindIdentify, Token: q.s.token}); err == nil {
		v.CanCreate = id.Has(config.RoleCreate)
	}
	h.render(w, r, q.s, http.StatusOK, "components", "Components", &v)
}

// handleCreateComponent creates a configuration object for a component
// from the form's JSON or YAML.
func (h *Handler) handleCreateComponent(w http.ResponseWriter, r *http.Request, q *request) {
	component, text := r.PostForm.Get("component"), r.PostForm.Get("configuration")
	back := h.prefix + "/components#c-" + url.QueryEscape(component)
	keep := func(f *flash) *flash { f.Draft, f.Target = text, component; return f }
	doc, err := wire.YAMLToJSON([]byte(text), h.opts.Limits)
	if err != nil {
		f := keep(h.failFlash(err))
		f.Field, f.Message = "configuration", "The configuration does not decode as JSON or YAML: "+varplane.ErrorMessage(err)+"."
		h.redirect(w, r, q.s, back, f)
		return
	}
	api, err := h.rootAPI(q.s)
	if err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	var out struct {
		ID    string `json:"id"`
		Epoch string `json:"epoch"`
	}
	body := map[string]json.RawMessage{"configuration": doc}
	if err := api.Call(r.Context(), http.MethodPost, valuesPath+url.PathEscape(component)+"/", nil, body, &out); err != nil {
		f := keep(h.failFlash(err))
		if f.Field == "document" || varplane.ErrorCode(err) == varplane.CodeInvalidConfiguration {
			f.Field = "configuration"
		}
		h.redirect(w, r, q.s, back, f)
		return
	}
	h.redirect(w, r, q.s, back, &flash{OK: true, Target: component, Message: "Created " + out.ID + " for " + component + " (epoch " + out.Epoch + ")."})
}

// ComponentsRedirect answers every request with a 303 to the console's
// Components page under prefix ("/ui"): what serve mounts at the values
// service's old page, /.configuration, when the console is on. Nothing is
// created by a POST there; the browser signs in and lands on the page
// (the sign-in keeps where it was going).
func ComponentsRedirect(prefix string) http.Handler {
	return http.RedirectHandler("/"+strings.Trim(prefix, "/")+"/components", http.StatusSeeOther)
}
