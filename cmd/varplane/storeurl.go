package main

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// storeKind is what serve checks about one kind of --store before anything
// is opened: the URL schemes that select it, the query parameters its URL
// accepts, and the prefix of the serve flags that only it reads. A
// parameter or a flag the store would ignore is refused, so that a typo
// (?prefx=…) never silently starts on a default.
type storeKind struct {
	name    string
	schemes []string
	// params returns the query parameters a URL of scheme accepts; nil
	// accepts none.
	params func(scheme string) []string
	// flagPrefix starts the serve flags only this store reads ("redis-").
	flagPrefix string
}

// storeKinds lists every store serve can open.
//
// The PostgreSQL store adds its entry here: schemes postgres and
// postgresql, the query parameters its URL accepts, and "postgres-" when it
// has flags of its own. Until then its URL is not checked here (openStore
// decides), but the flags of every other store are still refused with it.
var storeKinds = []storeKind{
	{name: "file", schemes: []string{"file"}},
	{name: "memory", schemes: []string{"memory"}},
	{name: "redis", schemes: []string{"redis", "rediss"}, params: redisURLParams, flagPrefix: "redis-"},
}

// redisURLParams are the query parameters of a redis:// URL: the store's
// prefix and those of rueidis.ParseURL that the store keeps (it sets
// client_cache and max_retries itself, so they are refused as ignored).
// skip_verify only means something with TLS.
func redisURLParams(scheme string) []string {
	p := []string{"addr", "client_name", "db", "dial_timeout", "master_set", "prefix", "protocol", "write_timeout"}
	if scheme == "rediss" {
		p = append(p, "skip_verify")
	}
	return p
}

// repeatableParams may be given more than once (each addr adds a node).
var repeatableParams = map[string]bool{"addr": true}

// checkStore refuses, before anything is opened, a --store URL whose query
// holds a parameter its store does not read, and a store flag (given on the
// command line or through its environment variable) of another store than
// the one spec names. The errors name the parameters and flags, and never
// show the URL's credentials.
func checkStore(fs *flag.FlagSet, getenv func(string) string, spec string) error {
	scheme, _, _ := strings.Cut(spec, ":")
	scheme = strings.ToLower(scheme)
	kind := findStoreKind(scheme)
	if kind != nil {
		if err := checkStoreParams(kind, scheme, spec); err != nil {
			return err
		}
	}
	for _, k := range storeKinds {
		if k.flagPrefix == "" || k.name == kindName(kind) {
			continue
		}
		var foreign []string
		fs.VisitAll(func(f *flag.Flag) {
			if strings.HasPrefix(f.Name, k.flagPrefix) && flagGiven(fs, getenv, f.Name) {
				foreign = append(foreign, "--"+f.Name)
			}
		})
		if len(foreign) > 0 {
			return usagef("%s: for a %s store only, and --store is %s", strings.Join(foreign, ", "), k.name, redactURL(spec))
		}
	}
	return nil
}

func kindName(k *storeKind) string {
	if k == nil {
		return ""
	}
	return k.name
}

func findStoreKind(scheme string) *storeKind {
	for i := range storeKinds {
		for _, s := range storeKinds[i].schemes {
			if s == scheme {
				return &storeKinds[i]
			}
		}
	}
	return nil
}

// checkStoreParams refuses the query parameters of spec that kind does not
// accept, and one given twice.
func checkStoreParams(kind *storeKind, scheme, spec string) error {
	label := strconv.Quote(scheme + ":")
	if kind.params != nil {
		label = strconv.Quote(scheme + "://…")
	}
	var raw string
	if kind.params == nil {
		// file:PATH and memory: take no query; a '?' would otherwise end up
		// in the file's name.
		var ok bool
		if _, raw, ok = strings.Cut(spec, "?"); !ok {
			return nil
		}
		if raw == "" {
			return usagef("--store %s takes no query parameters ('?' may not appear in a path)", label)
		}
	} else {
		u, err := url.Parse(spec)
		if err != nil {
			// url.Parse echoes the URL, password included: keep the reason.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return usagef("--store %s: bad URL: %v", label, err)
		}
		if u.Fragment != "" || strings.HasSuffix(spec, "#") {
			return usagef("--store %s: a '#' fragment is not read (parameters go after '?')", label)
		}
		raw = u.RawQuery
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return usagef("--store %s: malformed query (want name=value pairs joined by '&')", label)
	}
	accepted := map[string]bool{}
	var acceptedList []string
	if kind.params != nil {
		acceptedList = kind.params(scheme)
		for _, p := range acceptedList {
			accepted[p] = true
		}
	}
	var unknown, twice []string
	for name, vs := range q {
		switch {
		case !accepted[name]:
			unknown = append(unknown, fmt.Sprintf("%q", name))
		case len(vs) > 1 && !repeatableParams[name]:
			twice = append(twice, fmt.Sprintf("%q", name))
		}
	}
	sort.Strings(unknown)
	sort.Strings(twice)
	want := "it takes none"
	if len(acceptedList) > 0 {
		want = "it takes " + strings.Join(acceptedList, ", ")
	}
	if scheme == "redis" && q.Has("skip_verify") {
		want += "; skip_verify needs rediss://"
	}
	switch {
	case len(unknown) > 0:
		return usagef("--store %s: unknown query parameter(s) %s for the %s store (%s)", label, strings.Join(unknown, ", "), kind.name, want)
	case len(twice) > 0:
		return usagef("--store %s: query parameter(s) %s given more than once", label, strings.Join(twice, ", "))
	}
	return nil
}

// flagGiven reports whether flag name of fs was set on the command line or
// through its environment variable: the VARPLANE_… variable its usage
// names as "(env VARPLANE_…)", the one place serve documents it.
func flagGiven(fs *flag.FlagSet, getenv func(string) string, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	if given {
		return true
	}
	if f := fs.Lookup(name); f != nil {
		if m := flagEnvRE.FindStringSubmatch(f.Usage); m != nil && getenv(m[1]) != "" {
			return true
		}
	}
	return false
}

var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

var flagEnvRE = regexp.MustCompile(`\(env (VARPLANE_[A-Z0-9_]+)\)`)

// redactURL returns s fit for a log line or an error: the password of a
// URL's user information and the value of a password-like query parameter
// are replaced by "xxxxx" (a string that does not parse as a URL keeps only
// its scheme). A file: or memory: store is returned as it is: a path holds
// no credentials, and need not parse as a URL. Every URL the command prints
// goes through it.
func redactURL(s string) string {
	if scheme, _, _ := strings.Cut(s, ":"); strings.EqualFold(scheme, "file") || strings.EqualFold(scheme, "memory") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		if scheme, _, ok := strings.Cut(s, ":"); ok && schemeRE.MatchString(scheme) {
			return scheme + ":…(a malformed URL)"
		}
		return "(a malformed URL)"
	}
	changed := false
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
		changed = true
	}
	if at := strings.LastIndex(u.Opaque, "@"); at >= 0 {
		u.Opaque = "xxxxx" + u.Opaque[at:]
		changed = true
	}
	if u.RawQuery != "" {
		if q, err := url.ParseQuery(u.RawQuery); err != nil {
			u.RawQuery = "…"
			changed = true
		} else {
			for name := range q {
				if secretParam(name) {
					q.Set(name, "xxxxx")
					changed = true
				}
			}
			if changed {
				u.RawQuery = q.Encode()
			}
		}
	}
	if !changed {
		return s
	}
	return u.String()
}

// secretParam reports whether a query parameter may carry a credential
// (postgres:// takes ?password=…, sslpassword=…).
func secretParam(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"password", "passwd", "secret", "token"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}
