package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Bounds of the watch stream.
const (
	watchMinBackoff  = 250 * time.Millisecond
	watchMaxBackoff  = 15 * time.Second
	maxSSEEventBytes = 64 << 20
)

// WatchCommand follows commits as Server-Sent Events: GET {base}/watch.
type WatchCommand struct {
	m *Main
}

// Run parses args and prints every event until ctx ends (exit 0). A dropped
// stream is resumed with backoff, sending the last event id; an answer the
// server refuses (4xx) ends the watch with that error.
func (c *WatchCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("watch", "[--key SCOPE]… [--group GROUP]… [--prefix P]… [flags]", `
Follow commits as they happen. Each activation (rollbacks included) prints a
"head" line with the new generation, revision and values; each deactivation a
"no-head" line. When the stream drops, watch reconnects with backoff and
resumes after the last event it printed (Last-Event-ID). Stop it with Ctrl-C.
--key, --group and --prefix may be repeated.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	var keys, groups, prefixes listFlag
	fs.Var(&keys, "key", "key scope to follow (repeatable)")
	fs.Var(&groups, "group", "group scope to follow (repeatable)")
	fs.Var(&prefixes, "prefix", "follow every scope under this prefix (repeatable)")
	lastID := fs.String("last-event-id", "", "resume after this event id")
	idle := fs.Duration("idle-timeout", time.Minute, "reconnect when nothing (not even a heartbeat) arrives for this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *idle <= 0 {
		return usagef("--idle-timeout must be positive")
	}
	cl, err := cf.client(c.m.Stdout)
	if err != nil {
		return err
	}
	// The stream has no overall deadline; --timeout bounds how long the
	// server may take to answer the request.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = cf.timeout
	cl.http = &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()

	q := url.Values{}
	for _, k := range keys {
		q.Add("key", k)
	}
	for _, g := range groups {
		q.Add("group", g)
	}
	for _, p := range prefixes {
		q.Add("prefix", p)
	}
	w := &watcher{c: cl, out: c.m.Stdout, errOut: c.m.Stderr, asJSON: cf.json(), query: q, lastID: *lastID, idle: *idle, held: map[string]string{}}
	backoff := watchMinBackoff
	for {
		got, err := w.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var se *ServerError
		if errors.As(err, &se) && se.Status < 500 && se.Status != http.StatusTooManyRequests {
			return err
		}
		if got {
			backoff = watchMinBackoff
		}
		if err == nil {
			err = errors.New("stream ended")
		}
		// Full jitter keeps a fleet of watchers from reconnecting in step.
		wait := backoff/2 + rand.N(backoff/2+1)
		fmt.Fprintf(c.m.Stderr, "watch: %v; reconnecting in %v\n", err, wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(backoff*2, watchMaxBackoff)
	}
}

// watcher holds the state of one watch across reconnections.
type watcher struct {
	c      *apiClient
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
	hdr := http.Header{"Accept": {"text/event-stream"}, "Cache-Control": {"no-cache"}}
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
	req, err := w.c.newRequest(ctx, http.MethodGet, "/watch", q, nil, hdr)
	if err != nil {
		return false, err
	}
	resp, err := w.c.http.Do(req)
	if err != nil {
		return false, &unreachableError{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode >= 400 {
			return false, newServerError(resp.StatusCode, data)
		}
		return false, fmt.Errorf("unexpected answer %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return false, &ServerError{Status: resp.StatusCode, Code: "not-an-event-stream", Message: "the server answered " + ct}
	}
	idle := time.AfterFunc(w.idle, func() { cancel(fmt.Errorf("nothing received for %v", w.idle)) })
	defer idle.Stop()

	r := bufio.NewReaderSize(resp.Body, 64<<10)
	var ev sseEvent
	for {
		line, err := readLine(r)
		if err != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				return got, cause
			}
			return got, err
		}
		idle.Reset(w.idle)
		got = true
		if len(line) == 0 {
			if ev.dispatchable() {
				if ev.id != "" {
					w.lastID = ev.id
					if i := strings.LastIndexByte(ev.id, '@'); i > 0 {
						w.held[ev.id[:i]] = ev.id
					}
				}
				if err := w.print(ev); err != nil {
					return got, err
				}
			}
			ev = sseEvent{}
			continue
		}
		if err := ev.field(line); err != nil {
			return got, err
		}
	}
}

// readLine reads one line of an event stream (LF, CRLF or CR-LF endings are
// all LF-terminated in practice), bounded by maxSSEEventBytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxSSEEventBytes {
			return nil, fmt.Errorf("event stream line longer than %d bytes", maxSSEEventBytes)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return bytes.TrimRight(line, "\r\n"), nil
	}
}

// sseEvent is one event being assembled from its fields.
type sseEvent struct {
	name   string
	id     string
	data   bytes.Buffer
	hasDat bool
}

func (e *sseEvent) dispatchable() bool { return e.hasDat }

// field applies one "name: value" line; comments (":…") are heartbeats.
func (e *sseEvent) field(line []byte) error {
	if line[0] == ':' {
		return nil
	}
	name, value, _ := bytes.Cut(line, []byte(":"))
	value = bytes.TrimPrefix(value, []byte(" "))
	switch string(name) {
	case "event":
		e.name = string(value)
	case "data":
		if e.hasDat {
			e.data.WriteByte('\n')
		}
		e.data.Write(value)
		e.hasDat = true
		if e.data.Len() > maxSSEEventBytes {
			return fmt.Errorf("event larger than %d bytes", maxSSEEventBytes)
		}
	case "id":
		if !bytes.ContainsRune(value, 0) {
			e.id = string(value)
		}
	}
	return nil
}

// print writes one event: a readable line, or with -o json one JSON object a
// line ({"event","id","data"}).
func (w *watcher) print(ev sseEvent) error {
	name := ev.name
	if name == "" {
		name = "message"
	}
	data := ev.data.Bytes()
	if name == "close" { // the server ends the stream; the caller reconnects
		_, err := fmt.Fprintf(w.errOut, "watch: server closed the stream: %s\n", data)
		return err
	}
	if w.asJSON {
		out := struct {
			Event string          `json:"event"`
			ID    string          `json:"id,omitempty"`
			Data  json.RawMessage `json:"data"`
		}{Event: name, ID: ev.id}
		if json.Valid(data) {
			var buf bytes.Buffer
			if json.Compact(&buf, data) == nil {
				out.Data = buf.Bytes()
			}
		}
		if out.Data == nil {
			q, _ := json.Marshal(string(data))
			out.Data = q
		}
		b, err := json.Marshal(out)
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
