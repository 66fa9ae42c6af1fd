package redis

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// The URL of a Redis store carries all its settings, as a PostgreSQL URL
// does (docs/redis.md): redis://[user:password@]host:port/db?name=value&…
// (rediss:// for TLS). Its parameters are the store's own and those of
// rueidis.ParseURL that the store keeps; anything else is refused by name,
// so that a typo (?prefx=…) never silently starts on a default.

// storeParams are the store's own URL parameters: each sets the Options
// field of the same meaning (a parameter given wins over the Options
// passed to Open; read_only can only make the store read-only).
var storeParams = []string{"prefix", "eviction_check", "revalidate_interval", "command_timeout", "read_only"}

// clientParams are the parameters of rueidis.ParseURL the store keeps: it
// sets client_cache and max_retries itself, so they are refused as
// ignored. skip_verify only means something with TLS (rediss://).
var clientParams = []string{"addr", "client_name", "db", "dial_timeout", "master_set", "protocol", "write_timeout"}

// repeatableParams may be given more than once (each addr adds a node).
var repeatableParams = map[string]bool{"addr": true}

// URLParams returns the query parameters a URL of scheme ("redis" or
// "rediss") accepts, sorted.
func URLParams(scheme string) []string {
	p := slices.Concat(storeParams, clientParams)
	if scheme == "rediss" {
		p = append(p, "skip_verify")
	}
	slices.Sort(p)
	return p
}

// parseOptions splits the store's own parameters off rawURL, applies them
// to opts, checks that no other parameter is one rueidis would ignore, and
// hands the rest to rueidis. addr is the host list, safe to log. Its errors
// never quote the URL (it may hold a password).
func parseOptions(rawURL string, opts Options) (prefix string, copt rueidis.ClientOption, addr string, _ Options, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse echoes the URL, password included: keep only the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", copt, "", opts, fmt.Errorf("redis store: bad URL: %v", err)
	}
	if u.Fragment != "" || strings.HasSuffix(rawURL, "#") {
		return "", copt, "", opts, errors.New("redis store: a '#' fragment is not read (parameters go after '?')")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", copt, "", opts, errors.New("redis store: malformed query (want name=value pairs joined by '&')")
	}
	if err := checkParams(u.Scheme, q); err != nil {
		return "", copt, "", opts, err
	}
	prefix = DefaultPrefix
	if q.Has("prefix") {
		// "varplane:" and "varplane" name the same keys: every key adds
		// its own ':' after the prefix.
		prefix = strings.TrimSuffix(q.Get("prefix"), ":")
	}
	if !validPrefix(prefix) {
		return "", copt, "", opts, fmt.Errorf("redis store: prefix %q must be non-empty without '{', '}' or whitespace", prefix)
	}
	if q.Has("eviction_check") {
		opts.EvictionCheck = q.Get("eviction_check")
		if opts.EvictionCheck != EvictionCheckFail && opts.EvictionCheck != EvictionCheckWarn {
			return "", copt, "", opts, fmt.Errorf("redis store: eviction_check=%q: want fail or warn", opts.EvictionCheck)
		}
	}
	for _, p := range []struct {
		name string
		dst  *time.Duration
	}{{"revalidate_interval", &opts.RevalidateInterval}, {"command_timeout", &opts.CommandTimeout}} {
		if !q.Has(p.name) {
			continue
		}
		d, err := time.ParseDuration(q.Get(p.name))
		if err != nil || d <= 0 {
			return "", copt, "", opts, fmt.Errorf("redis store: %s=%q is not a positive duration such as 10s", p.name, q.Get(p.name))
		}
		*p.dst = d
	}
	if q.Has("revalidate_interval") && (opts.RevalidateInterval < MinRevalidateInterval || opts.RevalidateInterval > MaxRevalidateInterval) {
		// Refused rather than clamped: the URL asked for a staleness bound
		// the store would not keep.
		return "", copt, "", opts, fmt.Errorf("redis store: revalidate_interval=%v: want %v to %v", opts.RevalidateInterval, MinRevalidateInterval, MaxRevalidateInterval)
	}
	if q.Has("read_only") {
		b, err := strconv.ParseBool(q.Get("read_only"))
		if err != nil {
			return "", copt, "", opts, fmt.Errorf("redis store: read_only=%q is not true or false", q.Get("read_only"))
		}
		opts.ReadOnly = opts.ReadOnly || b
	}
	for _, k := range storeParams {
		q.Del(k)
	}
	u.RawQuery = q.Encode()
	copt, err = rueidis.ParseURL(u.String())
	if err != nil {
		return "", copt, "", opts, fmt.Errorf("redis store: bad URL: %v", err)
	}
	return prefix, copt, u.Host, opts, nil
}

// checkParams refuses the parameters of q that a URL of scheme does not
// accept, and one given twice, naming them.
func checkParams(scheme string, q url.Values) error {
	accepted := URLParams(scheme)
	var unknown, twice []string
	for name, vs := range q {
		switch {
		case !slices.Contains(accepted, name):
			unknown = append(unknown, strconv.Quote(name))
		case len(vs) > 1 && !repeatableParams[name]:
			twice = append(twice, strconv.Quote(name))
		}
	}
	slices.Sort(unknown)
	slices.Sort(twice)
	switch {
	case len(unknown) > 0:
		want := "it takes " + strings.Join(accepted, ", ")
		if scheme == "redis" && q.Has("skip_verify") {
			want += "; skip_verify needs rediss://"
		}
		return fmt.Errorf("redis store: unknown URL parameter(s) %s (%s)", strings.Join(unknown, ", "), want)
	case len(twice) > 0:
		return fmt.Errorf("redis store: URL parameter(s) %s given more than once", strings.Join(twice, ", "))
	}
	return nil
}
