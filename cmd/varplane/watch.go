package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/backoff"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/internal/wire"
)

// Bounds of the watch stream: reconnects wait by backoff.Duration between these.
const (
	watchMinBackoff = 250 * time.Millisecond
	watchMaxBackoff = 15 * time.Second
)

// maxSSEEventBytes bounds one event watch reads: as large as the largest
// body a server may be configured to take, since an event carries a
// document. A variable so that tests can lower it.
var maxSSEEventBytes = varplane.MaxBodyCeiling

// WatchCommand follows commits as Server-Sent Events: GET {base}/watch.
type WatchCommand struct {
	m *Main
}

// Run parses args and prints every event until ctx ends (exit 0). A dropped
// stream is resumed with backoff, sending the last event id; an answer the
// server refuses (4xx) ends the watch with that error.
func (c *WatchCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("watch", "[SCOPE…] [--key K]… [--group G]… [--prefix P]… [flags]", `
Follow commits as they happen. Each activation (rollbacks included) prints a
"head" line with the new generation, revision and values; each deactivation a
"no-head" line. When the stream drops, watch reconnects with backoff and
resumes after the last event it printed (Last-Event-ID). Stop it with Ctrl-C.

Each SCOPE argument is a key (it has a dot) or a group; --key, --group and
--prefix (a scope and everything below it) may be repeated. With no scope at
all, watch follows every scope (all=1), which the server allows only to a
token that may read every scope.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	var keys, groups, prefixes listFlag
	fs.Var(&keys, "key", "key scope to follow (repeatable)")
	fs.Var(&groups, "group", "group scope to follow (repeatable)")
	fs.Var(&prefixes, "prefix", "follow every scope under this prefix (repeatable)")
	lastID := fs.String("last-event-id", "", "resume after this event id")
	idle := fs.Duration("idle-timeout", time.Minute, "reconnect when nothing (not even a heartbeat) arrives for this long")
	pos, err := parseArgs(fs, args, wire.MaxBatchScopes)
	if err != nil {
		return err
	}
	if *idle <= 0 {
		return usagef("--idle-timeout must be positive")
	}
	q := url.Values{}
	add := func(field, value string) error {
		if field == "prefix" {
			if p, ok := strings.CutSuffix(value, "."); ok && p != "" && !strings.HasSuffix(p, ".") {
				// A tokens-file prefix is written so; a watch prefix is a scope.
				return usagef("--prefix %s: a watch prefix is a scope, without the trailing dot: --prefix %s follows %s and every scope below it; "+
					"a token narrowed to %s may not read %s itself: follow the scopes below it by name (--prefix %s.NAME, or keys)", value, p, p, value, p, p)
			}
			if _, err := wire.ScopeField(field, value); err != nil {
				return &usageError{err: errors.New(varplane.ErrorMessage(err))}
			}
		} else if _, err := wire.CheckKind(field, value); err != nil {
			return &usageError{err: errors.New(varplane.ErrorMessage(err))}
		}
		q.Add(field, value)
		return nil
	}
	for _, p := range pos {
		field := "group"
		if varplane.Scope(p).IsKey() {
			field = "key"
		}
		if err := add(field, p); err != nil {
			return err
		}
	}
	for _, list := range []struct {
		field  string
		values []string
	}{{"key", keys}, {"group", groups}, {"prefix", prefixes}} {
		for _, v := range list.values {
			if err := add(list.field, v); err != nil {
				return err
			}
		}
	}
	if len(q) == 0 {
		q.Set("all", "1")
	}
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	// The stream has no overall deadline; --timeout bounds how long the
	// server may take to answer the request.
	hc := wire.NewHTTPClient(nil, -1)
	tr := hc.Transport.(*http.Transport)
	tr.ResponseHeaderTimeout = cf.timeout
	defer tr.CloseIdleConnections()

	w := &watcher{url: a.URL("/watch"), token: a.Token(), http: hc, out: c.m.Stdout, errOut: c.m.Stderr, asJSON: cf.json(), query: q, lastID: *lastID, idle: *idle, held: map[string]string{}}
	attempt := 0
	for {
		got, err := w.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		// A refusal below 500 (forbidden, bad scope…) will not change by
		// retrying; nor will an answer that is no event stream.
		var se *varplane.Error
		if (errors.As(err, &se) && wire.Status(se.Code) < 500) || errors.Is(err, wire.ErrNotEventStream) {
			if se != nil && se.Code == varplane.CodeForbidden && q.Get("all") == "1" && se.Hint == "" {
				// Watching everything needs read on every scope; a token
				// narrowed to prefixes may watch each of them.
				cp := *se
				cp.Hint = "watching every scope needs read on all of them; a token narrowed to prefixes watches what they cover by name: " + prefixHint
				return &cp
			}
			if se != nil && se.Code == varplane.CodeForbidden && q.Has("prefix") && se.Hint == "" {
				cp := *se
				cp.Hint = "--prefix PREFIX follows PREFIX and every scope below it, so the token needs read on all of them; " + prefixHint
				return &cp
			}
			return err
		}
		if got {
			attempt = 0
		}
		if err == nil {
			err = errors.New("stream ended")
		}
		wait := backoff.Duration(attempt, watchMinBackoff, watchMaxBackoff)
		attempt++
		fmt.Fprintf(c.m.Stderr, "watch: %v; reconnecting in %v\n", err, wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// prefixHint says which prefixes a token narrowed by prefixes may watch.
const prefixHint = "a grant of PREFIX covers varplane watch --prefix PREFIX; a grant of PREFIX. (the scopes below PREFIX, not PREFIX itself) covers a scope below it: --prefix PREFIX.NAME, or its keys (repeatable)"

// watcher holds the state of one watch across reconnections.
type watcher struct {
	url    string // {base}/watch
	token  string
	http   *http.Client
	out    io.Writer
	errOut io.Writer
	asJSON bool
	query  url.Values
	lastID string
	idle   time.Duration
	// held maps each scope to the id (<scope>@<generation>) of the last
	// event printed for it; a reconnection resumes every scope from there,
	// not only the one of the very last event.
	held map[string]string
}

// stream follows one connection until it ends. got reports whether any event
// or heartbeat arrived, so the caller can reset its backoff.
func (w *watcher) stream(ctx context.Context) (got bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hdr := http.Header{}
	if w.lastID != "" {
		hdr.Set("Last-Event-ID", w.lastID)
	}
	q := url.Values{}
	for k, v := range w.query {
		q[k] = v
	}
	for _, id := range w.held {
		q.Add("since", id)
	}
	req, err := wire.NewRequest(ctx, http.MethodGet, w.url+"?"+q.Encode(), w.token, nil)
	if err != nil {
		return false, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	wire.SetStreamHeaders(req)
	resp, err := w.http.Do(req)
	if err != nil {
		return false, &unreachableError{err: err}
	}
	defer resp.Body.Close()
	if err := wire.CheckStream(resp); err != nil {
		return false, err
	}
	idle := time.AfterFunc(w.idle, func() { cancel(fmt.Errorf("nothing received for %v", w.idle)) })
	defer idle.Stop()

	r := wire.NewSSEReader(resp.Body, maxSSEEventBytes)
	for {
		ev, err := r.Next()
		if err != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				return got, cause
			}
			if errors.Is(err, wire.ErrEventTooLarge) {
				return got, fmt.Errorf("an event larger than %d bytes", maxSSEEventBytes)
			}
			return got, err
		}
		idle.Reset(w.idle)
		got = true
		if ev.Name == "" && ev.Data == "" {
			continue // a heartbeat or a retry field
		}
		if ev.ID != "" {
			w.lastID = ev.ID
			if i := strings.LastIndexByte(ev.ID, '@'); i > 0 {
				w.held[ev.ID[:i]] = ev.ID
			}
		}
		if err := w.print(ev); err != nil {
			return got, err
		}
	}
}

// print writes one event: a readable line, or with -o json one JSON object a
// line ({"event","id","data"}).
func (w *watcher) print(ev wire.Event) error {
	name := ev.Name
	if name == "" {
		name = "message"
	}
	data := []byte(ev.Data)
	if name == "close" { // the server ends the stream; the caller reconnects
		_, err := fmt.Fprintf(w.errOut, "watch: server closed the stream: %s\n", data)
		return err
	}
	if w.asJSON {
		out := struct {
			Event string          `json:"event"`
			ID    string          `json:"id,omitempty"`
			Data  json.RawMessage `json:"data"`
		}{Event: name, ID: ev.ID}
		if json.Valid(data) {
			var buf bytes.Buffer
			if json.Compact(&buf, data) == nil {
				out.Data = buf.Bytes()
			}
		}
		if out.Data == nil {
			out.Data = jsontext.AppendString(nil, string(data))
		}
		b, err := jsontext.Marshal(out)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w.out, "%s\n", b)
		return err
	}
	var d struct {
		Scope      string          `json:"scope"`
		Generation uint64          `json:"generation"`
		Revision   string          `json:"revision"`
		Values     json.RawMessage `json:"values"`
	}
	if json.Unmarshal(data, &d) != nil || d.Scope == "" {
		_, err := fmt.Fprintf(w.out, "%s %s\n", name, data)
		return err
	}
	switch name {
	case "head":
		var vals bytes.Buffer
		if json.Compact(&vals, d.Values) != nil {
			vals.Reset()
			vals.Write(d.Values)
		}
		_, err := fmt.Fprintf(w.out, "head %s generation %d revision %s values %s\n", d.Scope, d.Generation, d.Revision, vals.Bytes())
		return err
	case "no-head":
		_, err := fmt.Fprintf(w.out, "no-head %s generation %d\n", d.Scope, d.Generation)
		return err
	}
	_, err := fmt.Fprintf(w.out, "%s %s\n", name, data)
	return err
}
