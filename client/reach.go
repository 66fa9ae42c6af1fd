package client

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// The servers a client reaches, and what it says when they go away.
//
// A client holds a list of servers (New's URL, then Options.Servers) and
// talks to one at a time. When the one in use cannot be reached (the
// connection fails, or it answers 502, 503 or 504), the next request goes
// to the next in the list, round and round, so a fleet behind several
// replicas keeps reading while one is down. The client logs a warning once
// when it loses its server and an info line when it reaches one again, and
// calls Options.OnConnection on each change.

// parseServer checks one server URL and puts the base path under it.
func parseServer(serverURL, base string) (*url.URL, error) {
	u, err := url.Parse(serverURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("must be an absolute http(s) URL")
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/" + strings.Trim(base, "/")
	u.Path = strings.TrimRight(u.Path, "/")
	return u, nil
}

// server returns the server in use (its URL with the base path).
func (c *Client) server() *url.URL {
	return c.bases[int(c.cur.Load())%len(c.bases)]
}

// failedOn records that the server of host could not answer: when it is the
// one in use and there are others, the next one is used from now on.
func (c *Client) failedOn(u *url.URL, err error) {
	if len(c.bases) < 2 {
		return
	}
	cur := c.cur.Load()
	if c.bases[int(cur)%len(c.bases)].Host != u.Host {
		return // another request moved on already
	}
	if c.cur.CompareAndSwap(cur, cur+1) {
		next := c.bases[int(cur+1)%len(c.bases)]
		c.log.Warn("varplane server cannot be reached; trying the next", "server", u.Host, "next", next.Host, "err", err)
	}
}

// unreachable reports whether err (from wire.Do) says the server could not
// answer at all, so another one should be tried: a transport failure, or a
// 502, 503 or 504 answer.
func unreachable(err error) bool {
	if err == nil {
		return false
	}
	var ve *varplane.Error
	if !errors.As(err, &ve) {
		return true // no answer: dial, TLS, reset, timeout
	}
	switch wire.Status(ve.Code) {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// reached records the outcome of a talk with the server: ok when it
// answered (a stream established, a read answered), or the error that
// left it unreachable. The first loss is logged as a warning (while the
// values held keep being served), the return as info with how long it was
// away; Options.OnConnection hears both.
func (c *Client) reached(ok bool, err error) {
	c.smu.Lock()
	was := c.reachable
	changed := was != ok || !c.heard
	c.heard = true
	c.reachable = ok
	since := c.downSince
	if !ok && changed {
		c.downSince = time.Now()
	}
	c.smu.Unlock()
	if !changed {
		return
	}
	if ok {
		if was || since.IsZero() {
			c.log.Info("varplane server reached", "server", c.server().Host)
		} else {
			c.log.Info("varplane server reached again; following it", "server", c.server().Host, "away", time.Since(since).Round(time.Millisecond))
		}
	} else {
		c.log.Warn("varplane server unreachable; serving the values held until it answers", "server", c.server().Host, "err", err)
	}
	if fn := c.opts.OnConnection; fn != nil {
		fn(ok, err)
	}
}
