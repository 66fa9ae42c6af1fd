package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// AdminOptions configure an Admin. The zero value is usable.
type AdminOptions struct {
	// Base is the API base path on the server; "/vars" when empty ("/" for
	// a var API mounted at the root).
	Base string
	// Token is sent as "Authorization: Bearer <Token>" when set.
	Token string
	// HTTPClient carries every request; when nil, the project's client
	// (bounded dial, handshake and header waits) with Timeout.
	HTTPClient *http.Client
	// Timeout bounds each request when HTTPClient is nil. Default
	// wire.RequestTimeout (60s).
	Timeout time.Duration
	// MaxResponseBytes bounds a success answer the client reads. Default
	// 64 MiB (a history with its documents can be large).
	MaxResponseBytes int64
}

// Admin is a client of one server's admin and audit routes (POST
// {base}/admin/revisions, validate, activate, publish, deactivate, rollback;
// GET {base}/admin/status, history, replay, scopes) and of its data-plane
// read (GET {base}). Every method returns the engine's result type and, for
// an error answer, the full *varplane.Error the server sent (through the
// wire layer: code, message, expected and current generation, issues,
// limit, hint), so errors.Is(err, varplane.ErrConflict) works across the
// wire. A transport failure is returned wrapped, matching
// errors.As(err, **url.Error). An Admin is safe for concurrent use.
type Admin struct {
	root    string // scheme://host[:port][path]{base}, no trailing slash
	token   string
	http    *http.Client
	maxBody int64
}

// NewAdmin returns an Admin of the server at serverURL ("http://host:8790").
// It returns an error for a URL that is not absolute http(s), for a base
// that is not a path, and for a token holding a control character.
func NewAdmin(serverURL string, opts AdminOptions) (*Admin, error) {
	u, err := url.Parse(serverURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: server URL must be an absolute http(s) URL")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: server URL must not carry a query or fragment")
	}
	if opts.Base == "" {
		opts.Base = "/vars"
	}
	if strings.ContainsAny(opts.Base, "?#") {
		return nil, fmt.Errorf("client: base %q must be a path", opts.Base)
	}
	if strings.ContainsFunc(opts.Token, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return nil, errors.New("client: token holds a control character or a line break")
	}
	base := strings.Trim(opts.Base, "/")
	root := strings.TrimRight(u.Scheme+"://"+u.Host+u.EscapedPath(), "/")
	if base != "" {
		root += "/" + base
	}
	a := &Admin{root: root, token: opts.Token, http: opts.HTTPClient, maxBody: opts.MaxResponseBytes}
	if a.http == nil {
		a.http = wire.NewHTTPClient(nil, opts.Timeout)
	}
	if a.maxBody <= 0 {
		a.maxBody = 64 << 20
	}
	return a, nil
}

// URL returns the absolute URL of path under the base (path "" is the base
// itself, "/watch" the stream), for callers that open a stream themselves.
func (a *Admin) URL(path string) string { return a.root + path }

// Token returns the bearer token the Admin sends ("" for none).
func (a *Admin) Token() string { return a.token }

// mutationBody is the JSON body of the mutation routes; unset fields are
// omitted, as the server tells a missing field from a zero one.
type mutationBody struct {
	Scope              varplane.Scope       `json:"scope,omitempty"`
	Revision           varplane.Revision    `json:"revision,omitempty"`
	Document           json.RawMessage      `json:"document,omitempty"`
	ExpectedGeneration *varplane.Generation `json:"expectedGeneration,omitempty"`
	ToRevision         varplane.Revision    `json:"toRevision,omitempty"`
	ToGeneration       *varplane.Generation `json:"toGeneration,omitempty"`
	SchemaID           string               `json:"schemaId,omitempty"`
	SchemaVersion      string               `json:"schemaVersion,omitempty"`
	Actor              string               `json:"actor,omitempty"`
	Reason             string               `json:"reason,omitempty"`
	IdempotencyKey     string               `json:"idempotencyKey,omitempty"`
	Force              bool                 `json:"force,omitempty"`
}

// claim is the actor a request claims: the server records its own
// authenticated identity as actor and this claim as onBehalfOf. Owner is
// refused: the HTTP var API writes no owned scope (they belong to the
// subsystem that owns them).
func claim(actor, onBehalfOf, owner string) (string, error) {
	if owner != "" {
		return "", varplane.Errorf(varplane.CodeBadRequest, "the var API takes no owner; owned scopes are written by their owner")
	}
	if actor == "" {
		actor = onBehalfOf
	}
	return actor, nil
}

// dryRunQuery is the query of a write whose request asks for a dry run
// (the DryRun field of varplane's requests): ?dryRun=true, which the server
// answers with every check of the write and no commit (the result's DryRun
// set), or with the refusal the write would meet.
func dryRunQuery(dry bool) url.Values {
	if !dry {
		return nil
	}
	return url.Values{"dryRun": {"true"}}
}

// CreateRevision stores req.Document as a revision of req.Scope: POST
// {base}/admin/revisions. req.Actor (or OnBehalfOf) is sent as the claimed
// actor; req.Owner must be empty.
func (a *Admin) CreateRevision(ctx context.Context, req varplane.CreateRevisionRequest) (varplane.CreateRevisionResult, error) {
	var out varplane.CreateRevisionResult
	actor, err := claim(req.Actor, req.OnBehalfOf, req.Owner)
	if err != nil {
		return out, err
	}
	body := mutationBody{Scope: req.Scope, Document: req.Document, SchemaID: req.SchemaID, SchemaVersion: req.SchemaVersion,
		Actor: actor, Reason: req.Reason, IdempotencyKey: req.IdempotencyKey}
	return out, a.call(ctx, http.MethodPost, "/admin/revisions", nil, body, &out)
}

// Validate checks a document without storing it: POST {base}/admin/validate.
// An invalid document is a success with Valid false and its issues.
func (a *Admin) Validate(ctx context.Context, req varplane.ValidateRequest) (varplane.ValidateResult, error) {
	var out varplane.ValidateResult
	body := mutationBody{Scope: req.Scope, Document: req.Document, SchemaID: req.SchemaID}
	return out, a.call(ctx, http.MethodPost, "/admin/validate", nil, body, &out)
}

// Activate makes a stored revision the head: POST {base}/admin/activate.
func (a *Admin) Activate(ctx context.Context, req varplane.ActivateRequest) (varplane.ActivationResult, error) {
	var out varplane.ActivationResult
	actor, err := claim(req.Actor, req.OnBehalfOf, req.Owner)
	if err != nil {
		return out, err
	}
	body := mutationBody{Scope: req.Scope, Revision: req.Revision, ExpectedGeneration: &req.ExpectedGeneration,
		Actor: actor, Reason: req.Reason, IdempotencyKey: req.IdempotencyKey}
	return out, a.call(ctx, http.MethodPost, "/admin/activate", dryRunQuery(req.DryRun), body, &out)
}

// Publish stores a document and makes it the head in one commit: POST
// {base}/admin/publish.
func (a *Admin) Publish(ctx context.Context, req varplane.PublishRequest) (varplane.PublishResult, error) {
	var out varplane.PublishResult
	actor, err := claim(req.Actor, req.OnBehalfOf, req.Owner)
	if err != nil {
		return out, err
	}
	body := mutationBody{Scope: req.Scope, Document: req.Document, ExpectedGeneration: &req.ExpectedGeneration,
		SchemaID: req.SchemaID, SchemaVersion: req.SchemaVersion, Actor: actor, Reason: req.Reason, IdempotencyKey: req.IdempotencyKey}
	return out, a.call(ctx, http.MethodPost, "/admin/publish", dryRunQuery(req.DryRun), body, &out)
}

// Deactivate clears a scope's head and its active descendants: POST
// {base}/admin/deactivate.
func (a *Admin) Deactivate(ctx context.Context, req varplane.DeactivateRequest) (varplane.DeactivationResult, error) {
	var out varplane.DeactivationResult
	actor, err := claim(req.Actor, req.OnBehalfOf, req.Owner)
	if err != nil {
		return out, err
	}
	body := mutationBody{Scope: req.Scope, ExpectedGeneration: &req.ExpectedGeneration,
		Actor: actor, Reason: req.Reason, IdempotencyKey: req.IdempotencyKey, Force: req.Force}
	return out, a.call(ctx, http.MethodPost, "/admin/deactivate", dryRunQuery(req.DryRun), body, &out)
}

// Rollback re-activates an earlier revision as a new generation: POST
// {base}/admin/rollback.
func (a *Admin) Rollback(ctx context.Context, req varplane.RollbackRequest) (varplane.ActivationResult, error) {
	var out varplane.ActivationResult
	actor, err := claim(req.Actor, req.OnBehalfOf, req.Owner)
	if err != nil {
		return out, err
	}
	body := mutationBody{Scope: req.Scope, ExpectedGeneration: &req.ExpectedGeneration, ToRevision: req.ToRevision,
		ToGeneration: req.ToGeneration, Actor: actor, Reason: req.Reason, IdempotencyKey: req.IdempotencyKey}
	return out, a.call(ctx, http.MethodPost, "/admin/rollback", dryRunQuery(req.DryRun), body, &out)
}

// Status returns where scope stands: GET {base}/admin/status.
func (a *Admin) Status(ctx context.Context, scope varplane.Scope) (varplane.Status, error) {
	var out varplane.Status
	return out, a.call(ctx, http.MethodGet, "/admin/status", url.Values{"scope": {string(scope)}}, nil, &out)
}

// History returns the audit log of scope, oldest first: GET
// {base}/admin/history.
func (a *Admin) History(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	var out struct {
		Events []varplane.Event `json:"events"`
	}
	err := a.call(ctx, http.MethodGet, "/admin/history", url.Values{"scope": {string(scope)}}, nil, &out)
	return out.Events, err
}

// Replay returns scope as it was right after generation gen: GET
// {base}/admin/replay. A store without a log answers store-unsupported.
func (a *Admin) Replay(ctx context.Context, scope varplane.Scope, gen varplane.Generation) (varplane.ScopeHead, error) {
	var out varplane.ScopeHead
	q := url.Values{"scope": {string(scope)}, "toGeneration": {strconv.FormatUint(uint64(gen), 10)}}
	return out, a.call(ctx, http.MethodGet, "/admin/replay", q, nil, &out)
}

// ScopesQuery selects a page of GET {base}/admin/scopes: Prefix (the scope
// and those below it; "" for all), After (the Next of the previous page)
// and Limit (0 for the server's default).
type ScopesQuery struct {
	Prefix varplane.Scope
	After  varplane.Scope
	Limit  int
	// Internal lists the project's own records too (varplane.Scope.Internal:
	// change requests, policies, principals), which are left out unless
	// Prefix is one of them.
	Internal bool
}

// Scopes returns one page of the scopes the token may audit: GET
// {base}/admin/scopes.
func (a *Admin) Scopes(ctx context.Context, q ScopesQuery) (varplane.ScopePage, error) {
	var out varplane.ScopePage
	v := url.Values{}
	if q.Prefix != "" {
		v.Set("prefix", string(q.Prefix))
	}
	if q.After != "" {
		v.Set("after", string(q.After))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Internal {
		v.Set("internal", "true")
	}
	return out, a.call(ctx, http.MethodGet, "/admin/scopes", v, nil, &out)
}

// AllScopes follows the pages of Scopes to the end and returns every item.
func (a *Admin) AllScopes(ctx context.Context, prefix varplane.Scope) ([]varplane.ScopeSummary, error) {
	return a.AllScopesOf(ctx, ScopesQuery{Prefix: prefix})
}

// AllScopesOf returns every scope q asks for (q.After and q.Limit aside),
// page after page.
func (a *Admin) AllScopesOf(ctx context.Context, q ScopesQuery) ([]varplane.ScopeSummary, error) {
	var all []varplane.ScopeSummary
	q.After, q.Limit = "", 0
	for {
		page, err := a.Scopes(ctx, q)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.Next == "" || page.Next <= q.After {
			return all, nil
		}
		q.After = page.Next
	}
}

// ReadResult is a data-plane read: the head's generation, revision, schema,
// time and values ({"<key>": document} for a key, the document for a
// group). NotModified is set, and nothing else but Revision, when the head
// is still the If-None-Match revision.
type ReadResult struct {
	Generation  varplane.Generation `json:"generation"`
	Revision    varplane.Revision   `json:"revision"`
	SchemaID    string              `json:"schemaId,omitempty"`
	EffectiveAt time.Time           `json:"effectiveAt"`
	Values      json.RawMessage     `json:"values"`
	NotModified bool                `json:"-"`
}

// Read reads what scope serves, as consumers do: GET {base}?key= (a key)
// or ?group= (a group). With ifNoneMatch naming the head's revision the
// answer is NotModified. A scope without a head is a no-head error.
func (a *Admin) Read(ctx context.Context, scope varplane.Scope, ifNoneMatch varplane.Revision) (ReadResult, error) {
	var out ReadResult
	param := "key"
	if scope.IsGroup() {
		param = "group"
	}
	req, err := a.request(ctx, http.MethodGet, "", url.Values{param: {string(scope)}}, nil)
	if err != nil {
		return out, err
	}
	if ifNoneMatch != "" {
		req.Header.Set("If-None-Match", `"`+string(ifNoneMatch)+`"`)
	}
	resp, err := a.send(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified {
		out.NotModified = true
		out.Revision = varplane.Revision(strings.Trim(resp.Header.Get("ETag"), `"`))
		return out, nil
	}
	return out, a.decode(resp, &out)
}

// Document returns the document of a read: for a key its member of Values,
// for a group Values itself.
func (r ReadResult) Document(scope varplane.Scope) (json.RawMessage, error) {
	return decodeValues(scope, r.Values)
}

// request builds a request for path under the base (wire.NewRequest).
func (a *Admin) request(ctx context.Context, method, path string, q url.Values, body any) (*http.Request, error) {
	target := a.root + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	return wire.NewRequest(ctx, method, target, a.token, body)
}

// send sends req through wire.Do: an error answer is the *varplane.Error it
// carries; a transport failure is wrapped with the route. A write (any
// method but GET and HEAD) whose request was written whole and whose answer
// never came may have committed: it is outcome-unknown
// (varplane.ErrOutcomeUnknown), as the server's own answer for a commit
// whose store went silent is, never a plain transport failure, which a
// caller would take for "nothing happened".
func (a *Admin) send(req *http.Request) (*http.Response, error) {
	var written atomic.Bool
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			WroteRequest: func(i httptrace.WroteRequestInfo) { written.Store(i.Err == nil) },
		}))
	}
	resp, err := wire.Do(a.http, req)
	if err != nil {
		var ve *varplane.Error
		if errors.As(err, &ve) {
			return nil, err
		}
		err = fmt.Errorf("client: %s %s: %w", req.Method, req.URL.Path, err)
		if written.Load() {
			e := varplane.OutcomeUnknown(err)
			e.Message = "the request reached the server and its answer was lost, so the write may or may not have happened: re-read, or repeat it with the same idempotency key"
			return nil, e
		}
		return nil, err
	}
	return resp, nil
}

// decode reads a success answer (at most maxBody) into out. A 204 No
// Content answer (a delete) has no body to decode, and out may be nil.
func (a *Admin) decode(resp *http.Response, out any) error {
	if resp.StatusCode == http.StatusNoContent {
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, a.maxBody+1))
	if err != nil {
		return fmt.Errorf("client: read the answer of %s: %w", resp.Request.URL.Path, err)
	}
	if int64(len(data)) > a.maxBody {
		return fmt.Errorf("client: the answer of %s is larger than %d bytes", resp.Request.URL.Path, a.maxBody)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("client: decode the answer of %s: %w", resp.Request.URL.Path, err)
	}
	return nil
}

// Call sends one request to path under the base (a route of a serve
// extension that has no method of its own, such as access control's
// /access/tokens) with body encoded as JSON (nil for none), and decodes the
// success answer into out. Errors are those of every method: the server's
// *varplane.Error, or a transport failure.
func (a *Admin) Call(ctx context.Context, method, path string, q url.Values, body, out any) error {
	return a.call(ctx, method, path, q, body, out)
}

// call sends one request and decodes its success answer into out.
func (a *Admin) call(ctx context.Context, method, path string, q url.Values, body, out any) error {
	req, err := a.request(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	resp, err := a.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return a.decode(resp, out)
}

// MinRevisionPrefix is the fewest hex digits ResolveRevision takes.
const MinRevisionPrefix = 4

// ResolveRevision returns the revision of scope that prefix names: a whole
// revision ("sha256:" and 64 hex digits) as is, or a unique prefix of its
// hex digits (with or without "sha256:", at least MinRevisionPrefix digits),
// looked up in the scope's history as git does. A prefix no stored revision
// has is not-found; one several have is bad-request listing them.
func (a *Admin) ResolveRevision(ctx context.Context, scope varplane.Scope, prefix string) (varplane.Revision, error) {
	if rev, err := varplane.ParseRevision(prefix); err == nil {
		return rev, nil
	}
	hex, err := ParseRevisionPrefix(prefix)
	if err != nil {
		return "", err
	}
	events, err := a.History(ctx, scope)
	if err != nil {
		return "", err
	}
	return MatchRevision(events, hex)
}

// ParseRevisionPrefix returns the hex digits of a revision or revision
// prefix ("sha256:" optional), or a bad-request error when s is not one:
// fewer than MinRevisionPrefix or more than 64 digits, or not lowercase hex.
func ParseRevisionPrefix(s string) (string, error) {
	hex := strings.TrimPrefix(s, "sha256:")
	if len(hex) < MinRevisionPrefix || len(hex) > 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", varplane.Errorf(varplane.CodeBadRequest,
			"revision %q must be sha256: and 64 lowercase hex digits, or a prefix of at least %d of them", s, MinRevisionPrefix)
	}
	return hex, nil
}

// MatchRevision returns the one revision among the events' revisions whose
// hex digits start with hex: not-found when none does, bad-request naming
// the candidates when several do.
func MatchRevision(events []varplane.Event, hex string) (varplane.Revision, error) {
	var found []varplane.Revision
	for _, ev := range events {
		if ev.Revision == "" || !strings.HasPrefix(strings.TrimPrefix(string(ev.Revision), "sha256:"), hex) {
			continue
		}
		dup := false
		for _, f := range found {
			dup = dup || f == ev.Revision
		}
		if !dup {
			found = append(found, ev.Revision)
		}
	}
	switch len(found) {
	case 0:
		return "", varplane.Errorf(varplane.CodeNotFound, "no revision of this scope starts with %s", hex)
	case 1:
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, f := range found {
		names[i] = string(f)
	}
	return "", varplane.Errorf(varplane.CodeBadRequest, "revision prefix %s is ambiguous: %s", hex, strings.Join(names, ", "))
}

// CanaryWindow is a change's canary window as the control API records it:
// State is open, passed or blocked, Reason why it is still open or what
// blocked it.
type CanaryWindow struct {
	ID           string    `json:"id"`
	State        string    `json:"state"`
	Reason       string    `json:"reason,omitempty"`
	OpenedAt     time.Time `json:"openedAt"`
	ClosesAt     time.Time `json:"closesAt"`
	MinInstances int       `json:"minInstances"`
}

// CanaryReport is one instance's report on a window, as the control API
// answers it: the instance it names and the id it was filed under, its
// counts, the candidate's error, and whether the control plane doubts it
// (Doubt says why; a doubtful report keeps the window open).
type CanaryReport = varplane.CanaryReportEntry

// ChangeReports is the answer of ChangeReports: the window, its reports
// (sorted by the id they were filed under) and the instances with a fresh
// status that have not reported.
type ChangeReports struct {
	Change     string         `json:"change"`
	Window     CanaryWindow   `json:"window"`
	Reports    []CanaryReport `json:"reports"`
	Unreported []string       `json:"unreported"`
}

// ChangeReports returns the canary reports of change id: GET
// {base}/control/changes/{id}/reports. A change that opened no window is
// not-found; a control plane no instance reports to answers
// store-unsupported.
func (a *Admin) ChangeReports(ctx context.Context, id string) (ChangeReports, error) {
	var out ChangeReports
	err := a.call(ctx, http.MethodGet, "/control/changes/"+url.PathEscape(id)+"/reports", nil, nil, &out)
	return out, err
}
