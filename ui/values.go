package ui

import (
	"bytes"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/internal/wire"
)

// pageTemplate is the values page (ValuesPage).
var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Configuration · varplane</title>
<style>
body{font-family:system-ui,sans-serif;margin:2rem;max-width:70rem;color:#1b1f24}
h1{font-size:1.4rem}
section{border:1px solid #d0d7de;border-radius:6px;padding:1rem;margin:1rem 0}
h2{font-size:1.1rem;margin:0 0 .5rem}
code,pre,textarea{font-family:ui-monospace,monospace;font-size:.85rem}
pre{background:#f6f8fa;padding:.5rem;overflow:auto}
textarea{width:100%;min-height:8rem}
.source{display:inline-block;padding:0 .4rem;border-radius:4px;background:#ddf4ff}
.none{background:#fff8c5}
.issues{color:#cf222e}
.ok{color:#1a7f37}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;margin:0 0 .5rem}
dt{font-weight:600}
</style>
</head>
<body>
<h1>Configuration</h1>
{{if .Message}}<p class="{{if .Issues}}issues{{else}}ok{{end}}" id="message">{{.Message}}</p>{{end}}
{{if .Issues}}<ul class="issues" id="issues">{{range .Issues}}<li><code>{{if .Path}}{{.Path}}{{else}}(configuration){{end}}</code> {{.Code}}: {{.Message}}</li>{{end}}</ul>{{end}}
{{if not .Listed}}<p>This identity may not read configurations.</p>{{end}}
{{range .Components}}
<section id="{{.Component}}">
<h2>{{.Component}}</h2>
<dl>
<dt>epoch</dt><dd><code>{{.Epoch}}</code></dd>
<dt>source</dt><dd>{{if .Source}}<span class="source">{{.Source}}</span>{{if .Created}} #{{.Created}}{{end}}{{else}}<span class="source none">none</span>{{end}}</dd>
</dl>
<pre>{{.Values}}</pre>
<details><summary>schema</summary><pre>{{.Schema}}</pre></details>
<form method="post" action="/.configuration">
<input type="hidden" name="component" value="{{.Component}}">
<label>New configuration (JSON or YAML)<br>
<textarea name="configuration" spellcheck="false">{{.Draft}}</textarea></label><br>
<button type="submit">Create</button>
</form>
</section>
{{else}}{{if .Listed}}<p>No component declares configuration.</p>{{end}}{{end}}
</body>
</html>
`))

type pageComponent struct {
	Component string
	Epoch     string
	Source    string
	Created   uint64
	Values    string
	Schema    string
	Draft     string
}

type pageData struct {
	Listed     bool
	Components []pageComponent
	Message    string
	Issues     []varplane.Issue
}

// ValuesPageOptions configure ValuesPage.
type ValuesPageOptions struct {
	// Authorizer tells who a caller is (kind identify, with the bearer
	// token or the password of HTTP Basic authentication); the page then
	// checks config.RoleGet to show and config.RoleCreate to create.
	// varplane.AllowAll when nil.
	Authorizer varplane.Authorizer
	// Limits bound a posted form and the configuration in it (the
	// service's engine's when zero).
	Limits varplane.Limits
	// Logger receives internal errors; slog.Default when nil.
	Logger *slog.Logger
}

// ValuesPage is the values service's own page (seed 001's
// /.configuration): server-rendered with no script and no external asset,
// so that it works under a strict Content-Security-Policy and offline.
// serve mounts it when the console is off; with the console on,
// /.configuration is ComponentsRedirect, the Components page having the
// same features with sessions and CSRF tokens.
//
// GET shows the configured components with their epoch, source and values,
// and a form per component; POST creates what the form holds and shows the
// schema's issues. Reading needs config.RoleGet, the form
// config.RoleCreate. A browser carries its token as the password of HTTP
// Basic authentication: a request without a token, or with one the
// authorizer does not accept, is 401 with an invitation to authenticate, so
// that the browser asks (again). A post from another origin is refused
// (http.CrossOriginProtection).
func ValuesPage(svc *config.Service, opts ValuesPageOptions) http.Handler {
	p := &valuesPage{svc: svc, authz: opts.Authorizer, lim: opts.Limits, log: opts.Logger}
	if p.authz == nil {
		p.authz = varplane.AllowAll
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.lim == (varplane.Limits{}) {
		p.lim = svc.Engine().Limits()
	}
	p.lim = p.lim.WithDefaults()
	return http.NewCrossOriginProtection().Handler(p)
}

type valuesPage struct {
	svc   *config.Service
	authz varplane.Authorizer
	lim   varplane.Limits
	log   *slog.Logger
}

func (p *valuesPage) fail(w http.ResponseWriter, r *http.Request, err error) {
	wire.WriteError(w, r, p.log, err)
}

// needRole is forbidden unless id holds role.
func needRole(id varplane.Identity, role string) error {
	if !id.Has(role) {
		return varplane.Errorf(varplane.CodeForbidden, "the role %s is required", role)
	}
	return nil
}

func (p *valuesPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, HEAD, POST")
		p.fail(w, r, varplane.Errorf(varplane.CodeMethodNotAllowed, "method %s is not allowed on this route", r.Method))
		return
	}
	token := wire.RequestBearer(r)
	if token == "" {
		token = wire.BasicPassword(r)
	}
	id, err := varplane.Authorize(r.Context(), p.authz, varplane.Access{Kind: varplane.KindIdentify, Token: token})
	if err != nil {
		p.failAuth(w, r, err)
		return
	}
	data := pageData{}
	drafts := map[string]string{}
	status := http.StatusOK
	if r.Method == http.MethodPost {
		if err := needRole(id, config.RoleCreate); err != nil {
			p.fail(w, r, err)
			return
		}
		if err := wire.CheckContentType(r, "application/x-www-form-urlencoded"); err != nil {
			p.fail(w, r, err)
			return
		}
		body, err := wire.ReadBody(w, r, p.lim.MaxBodyBytes)
		if err != nil {
			p.fail(w, r, err)
			return
		}
		form, err := url.ParseQuery(string(body))
		if err != nil {
			p.fail(w, r, wire.BadRequest("the form could not be read"))
			return
		}
		component, text := form.Get("component"), form.Get("configuration")
		drafts[component] = text
		status, data.Message, data.Issues = p.create(r, component, text, id)
	}
	if err := needRole(id, config.RoleGet); err == nil {
		list, err := p.svc.List(r.Context())
		if err != nil {
			p.fail(w, r, err)
			return
		}
		data.Listed = true
		for _, l := range list {
			pc := pageComponent{Component: l.Component, Epoch: l.Epoch, Source: l.Source, Created: l.Created, Values: pretty(l.Configuration), Schema: pretty(l.Schema)}
			pc.Draft = pc.Values
			if d, ok := drafts[l.Component]; ok {
				pc.Draft = d
			}
			data.Components = append(data.Components, pc)
		}
	} else if r.Method != http.MethodPost {
		p.fail(w, r, err)
		return
	}
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, data); err != nil {
		p.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// failAuth answers a failure to identify the page's caller: 401 with an
// invitation to authenticate, also for a token the authorizer refuses (403
// elsewhere), so that a browser asks for the password again rather than
// holding on to a mistyped one. A failing authorizer stays 500.
func (p *valuesPage) failAuth(w http.ResponseWriter, r *http.Request, err error) {
	if c := varplane.ErrorCode(err); c == varplane.CodeForbidden || c == varplane.CodeUnauthorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="varplane configuration", charset="UTF-8"`)
		err = varplane.Errorf(varplane.CodeUnauthorized, "authentication required")
	}
	p.fail(w, r, err)
}

// create creates what the form holds and says how it went. The text is
// read as YAML (which reads JSON too) by the one converter, within the
// limits.
func (p *valuesPage) create(r *http.Request, component, text string, id varplane.Identity) (int, string, []varplane.Issue) {
	doc, err := config.ToJSON([]byte(text), true, p.lim, 0)
	if err != nil {
		msg := varplane.ErrorMessage(err)
		return wire.Status(varplane.ErrorCode(err)), "The configuration does not decode: " + msg, []varplane.Issue{{Code: varplane.IssueSyntax, Message: msg}}
	}
	res, err := p.svc.Create(r.Context(), config.CreateRequest{Component: component, Configuration: doc, Originator: id.ID})
	if err != nil {
		var ve *varplane.Error
		if errors.As(err, &ve) && ve.Code != varplane.CodeInternal && wire.Status(ve.Code) < 500 {
			issues := ve.Issues
			if len(issues) == 0 {
				issues = []varplane.Issue{{Code: string(ve.Code), Message: varplane.ErrorMessage(ve)}}
			}
			return wire.Status(ve.Code), component + ": " + varplane.ErrorMessage(ve), issues
		}
		p.log.Error("create configuration from the page", "component", component, "err", err)
		return http.StatusInternalServerError, "The configuration could not be created (internal error).", []varplane.Issue{{Code: string(varplane.CodeInternal), Message: "internal error"}}
	}
	return http.StatusCreated, "Created " + res.ID + " for " + component + " (created " + strconv.FormatUint(res.Created, 10) + ").", nil
}
