package main

import (
	"flag"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// storeKind is what serve checks about one kind of --store before anything
// is opened: the URL schemes that select it, whether its URL is checked
// here, and the prefix of the serve flags that only it reads. A store with
// settings reads and checks its own URL (the Redis and PostgreSQL stores
// refuse a parameter they would ignore by name); a file: or memory: URL
// takes no parameter at all, which is checked here, so that a typo
// (?fsync=0) never silently starts on a default or names a file.
type storeKind struct {
	name    string
	schemes []string
	// ownURL is set for a store that checks its own URL when it opens.
	ownURL bool
	// flagPrefix starts the serve flags only this store reads ("redis-").
	flagPrefix string
}

// storeKinds lists every store serve can open.
var storeKinds = []storeKind{
	{name: "file", schemes: []string{"file"}},
	{name: "memory", schemes: []string{"memory"}},
	{name: "redis", schemes: []string{"redis", "rediss"}, ownURL: true, flagPrefix: "redis-"},
	{name: "postgres", schemes: []string{"postgres", "postgresql"}, ownURL: true},
}

// checkStore refuses, before anything is opened, a --store URL whose query
// holds a parameter its store does not read, and a store flag (given on the
// command line or through its environment variable) of another store than
// the one spec names. The errors name the parameters and flags, and never
// show the URL's credentials.
func checkStore(fs *flag.FlagSet, getenv func(string) string, spec string) error {
	scheme, _, _ := strings.Cut(spec, ":")
	scheme = strings.ToLower(scheme)
	kind := findStoreKind(scheme)
	if kind != nil && !kind.ownURL {
		if err := checkNoParams(kind, scheme, spec); err != nil {
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

// checkNoParams refuses a query on a URL of a store that takes none
// (file:PATH, memory:): a '?' would otherwise end up in the file's name.
func checkNoParams(kind *storeKind, scheme, spec string) error {
	label := strconv.Quote(scheme + ":")
	_, raw, ok := strings.Cut(spec, "?")
	if !ok {
		return nil
	}
	if raw == "" {
		return usagef("--store %s takes no query parameters ('?' may not appear in a path)", label)
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return usagef("--store %s: malformed query (want name=value pairs joined by '&')", label)
	}
	var unknown []string
	for name := range q {
		unknown = append(unknown, strconv.Quote(name))
	}
	sort.Strings(unknown)
	return usagef("--store %s: unknown query parameter(s) %s for the %s store (it takes none)", label, strings.Join(unknown, ", "), kind.name)
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
