package main

import (
	"flag"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/varplane/varplane/store/redis"
)

// redisFlags are serve's --redis-* flags, the former names of the Redis
// store's URL parameters (apply), and the flags of a read replica. They
// apply to a redis:// store only; checkStore refuses them with any other
// store.
type redisFlags struct {
	evict      string
	revalidate time.Duration
	readOnly   bool
	replica    replicaFlags
}

// register adds the --redis-* flags to fs.
func (f *redisFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.evict, "redis-eviction-check", redis.EvictionCheckFail, "with a redis:// store: fail (refuse to start unless maxmemory-policy is noeviction) or warn (log it, for managed Redis that hides INFO/CONFIG)")
	fs.DurationVar(&f.revalidate, "revalidate-interval", redis.DefaultRevalidateInterval, "with a redis:// store: how often every installed head (and, with --root, every document the replica holds) is confirmed with Redis, which bounds how long a lost invalidation goes unnoticed (10ms to 5m)")
	fs.DurationVar(&f.revalidate, "redis-revalidate-interval", redis.DefaultRevalidateInterval, "the former name of --revalidate-interval")
	fs.BoolVar(&f.readOnly, "read-only", false, "with a redis:// store: a data-plane read replica that serves reads and the live stream and refuses every mutation (400 store-unsupported)")
	fs.BoolVar(&f.readOnly, "redis-read-only", false, "the former name of --read-only")
	f.replica.register(fs)
}

// check refuses values the store would refuse or silently change, so a typo
// is a usage error before anything is opened. An interval above the
// store's maximum is refused rather than clamped: the operator asked for a
// staleness bound the server would not keep.
func (f *redisFlags) check() error {
	if f.evict != redis.EvictionCheckFail && f.evict != redis.EvictionCheckWarn {
		return usagef("--redis-eviction-check %q: want fail or warn", f.evict)
	}
	if f.revalidate < redis.MinRevalidateInterval || f.revalidate > redis.MaxRevalidateInterval {
		return usagef("--revalidate-interval %v: want %v to %v", f.revalidate, redis.MinRevalidateInterval, redis.MaxRevalidateInterval)
	}
	return nil
}

// apply writes the --redis-* flags given on the command line into spec as
// the URL parameters they are the former names of (eviction_check, revalidate_interval, read_only), so that the
// store reads its settings from its URL alone. A flag whose parameter the
// URL also sets is a usage error, whatever the values.
func (f *redisFlags) apply(fs *flag.FlagSet, spec string) (string, error) {
	scheme, _, _ := strings.Cut(spec, ":")
	if s := strings.ToLower(scheme); s != "redis" && s != "rediss" {
		return spec, nil
	}
	u, err := url.Parse(spec)
	if err != nil {
		return spec, nil // the store names what is wrong with it
	}
	q := u.Query()
	set := map[string]string{}
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "redis-eviction-check":
			set["eviction_check"] = f.evict
		case "revalidate-interval", "redis-revalidate-interval":
			set["revalidate_interval"] = f.revalidate.String()
		case "read-only", "redis-read-only":
			set["read_only"] = strconv.FormatBool(f.readOnly)
		}
	})
	for param, value := range set {
		if q.Has(param) {
			return "", usagef("--store sets %s and so does a flag: give it once (the flag is the URL parameter's former name)", param)
		}
		q.Set(param, value)
	}
	if len(set) == 0 {
		return spec, nil
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}
