// Package hook runs a check of the control workflow outside the server:
// a webhook the operator names (`serve --check NAME=URL`). The server posts
// each candidate to it, and the webhook answers the issues it finds and the
// heads it read to judge (the scope, generation and revision of each), so
// that after a publish the server compares those heads with the current ones
// and records heads-moved or review-needed on the change (docs/control.md).
//
// It is a client (layer 4): it imports net/http to call, never to serve.
package hook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/internal/wire"
)

// Bounds of one call.
const (
	// DefaultTimeout bounds a call when Options.Timeout is zero.
	DefaultTimeout = 10 * time.Second
	// MaxAnswerBytes bounds the answer's body: a larger one fails the check.
	MaxAnswerBytes = 1 << 20
	// MaxIssues and MaxReads bound the lists an answer may hold.
	MaxIssues = 1000
	MaxReads  = 1000
)

// Options configure a hook. The zero value is usable.
type Options struct {
	// Timeout bounds one call, connection included: DefaultTimeout when
	// zero.
	Timeout time.Duration
	// Token, when set, is sent as a bearer token so the webhook can tell
	// the server from anyone else.
	Token string
	// Client replaces the HTTP client (tests); its own timeout applies.
	Client *http.Client
	// Logger receives a WARN line for each call that brought no result
	// (slog.Default when nil).
	Logger *slog.Logger
}

// Request is the body the server posts to the webhook.
type Request struct {
	Check    string              `json:"check"`
	Scope    varplane.Scope      `json:"scope"`
	Base     varplane.Generation `json:"base"`
	Document json.RawMessage     `json:"document"`
	SchemaID string              `json:"schemaId,omitempty"`
}

// Answer is what the webhook answers with 200: the issues it found (none:
// the check passed) and the heads it read to judge.
type Answer struct {
	Issues []varplane.Issue   `json:"issues"`
	Reads  []control.HeadRead `json:"reads"`
}

// Check is a control.Check that calls a webhook.
type Check struct {
	name   string
	target string
	token  string
	http   *http.Client
	log    *slog.Logger
}

// New returns the check NAME that posts to target, an absolute http or
// https URL. The URL is never logged or shown with its user information or
// query (they may hold a secret).
func New(name, target string, opts Options) (*Check, error) {
	if name == "" || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r > '~' || r == '=' }) {
		return nil, fmt.Errorf("check name %q: want printable ASCII without spaces or '='", name)
	}
	if name == control.SchemaCheck {
		return nil, fmt.Errorf("check name %q is the schema validation's own", name)
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("check %s: want an absolute http or https URL", name)
	}
	hc := opts.Client
	if hc == nil {
		timeout := opts.Timeout
		if timeout <= 0 {
			timeout = DefaultTimeout
		}
		hc = wire.NewHTTPClient(nil, timeout)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Check{name: name, target: u.String(), token: opts.Token, http: hc, log: log}, nil
}

// Name returns the check's name.
func (c *Check) Name() string { return c.name }

// Where names the webhook for logs: scheme, host and path only.
func (c *Check) Where() string {
	u, _ := url.Parse(c.target)
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// unavailable is the error of a call that brought no check result (a
// failed call, another status, or a body that is not an Answer): code
// check-unavailable, so the proposal fails with nothing written, and after
// a publish the comparison escalates to review-needed (check-failed).
// The message names the check, never its URL; the log line (WARN) names
// its host and path, and the cause.
func (c *Check) unavailable(reason string, cause error) error {
	c.log.Warn("control: a check webhook brought no result", "check", c.name, "url", c.Where(), "reason", reason, "err", cause)
	return varplane.Errorf(varplane.CodeCheckUnavailable, "check %s: the webhook %s; try again when it answers", c.name, reason)
}

// Check posts the candidate and records the heads the answer declares.
func (c *Check) Check(ctx context.Context, in *control.CheckInput) ([]varplane.Issue, error) {
	body, err := c.post(ctx, Request{
		Check: c.name, Scope: in.Scope, Base: in.Base, Document: in.Document, SchemaID: in.SchemaID,
	})
	if err != nil {
		return nil, err
	}
	ans, err := ParseAnswer(body)
	if err != nil {
		return nil, c.unavailable("answer is not a check result ("+err.Error()+")", nil)
	}
	for _, r := range ans.Reads {
		in.Record(r)
	}
	return ans.Issues, nil
}

// post posts v to the webhook and returns the body of its 200 answer (at
// most MaxAnswerBytes+1: the parser refuses a longer one); any other outcome is check-unavailable
// (unavailable).
func (c *Check) post(ctx context.Context, v any) ([]byte, error) {
	req, err := wire.NewRequest(ctx, http.MethodPost, c.target, c.token, v)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// The transport's error names the URL in full: give the host only.
		reason := "could not be called"
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			reason = "did not answer in time"
		}
		return nil, c.unavailable(reason, unwrapURL(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxAnswerBytes))
		return nil, c.unavailable(fmt.Sprintf("answered %d, not 200", resp.StatusCode), nil)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	if err != nil {
		return nil, c.unavailable("answer could not be read", err)
	}
	return body, nil
}

// ParseAnswer decodes a webhook's answer strictly (unknown or repeated
// members, and values past the stored-document limits, are refused) and
// checks every declared read.
func ParseAnswer(body []byte) (*Answer, error) {
	if len(body) > MaxAnswerBytes {
		return nil, fmt.Errorf("the answer is over %d bytes", MaxAnswerBytes)
	}
	var ans Answer
	if err := wire.DecodeStored(body, &ans); err != nil {
		return nil, fmt.Errorf("the answer is not a check result: %v", err)
	}
	if len(ans.Issues) > MaxIssues || len(ans.Reads) > MaxReads {
		return nil, fmt.Errorf("the answer holds more than %d issues or %d reads", MaxIssues, MaxReads)
	}
	for i, r := range ans.Reads {
		if !r.Scope.Valid() {
			return nil, fmt.Errorf("reads[%d]: scope %q is not a scope", i, r.Scope)
		}
		if r.Revision != "" {
			if _, err := varplane.ParseRevision(string(r.Revision)); err != nil {
				return nil, fmt.Errorf("reads[%d]: %v", i, err)
			}
		}
		if r.Revision != "" && r.Generation == 0 {
			return nil, fmt.Errorf("reads[%d]: a head (a revision) at generation 0", i)
		}
	}
	for i, is := range ans.Issues {
		if is.Message == "" {
			return nil, fmt.Errorf("issues[%d]: no message", i)
		}
	}
	return &ans, nil
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// unwrapURL drops the *url.Error wrapper, whose text holds the full URL.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
