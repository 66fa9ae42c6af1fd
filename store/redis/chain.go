package redis

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
)

// The chain. Lua in Redis has no SHA-256, so each event's link is computed
// here, from the scope's chain head as this replica last saw it, and the
// script compares that head with the one the head hash holds (field k,
// "<seq> <hash>", absent before the scope's first chained event) before it
// writes anything, in the same atomic step as every other check: a
// compare-and-set. A script that finds another head (another replica, or
// another goroutine of this one, committed to the scope in between) writes
// nothing and answers {'CHAIN', k}; the commit is linked again from that
// head and retried, up to maxChainTries times. The first guess is the
// installed snapshot's head, which an own commit keeps current, so a scope
// written by one replica at a time costs no retry.

// maxChainTries bounds the tries of one commit whose chain head keeps
// moving (each failed try means another commit to the scope succeeded).
// Past chainBackoffAfter lost tries, each retry first waits a random time
// up to chainBackoff doubled per further loss (at most 64 times): writers
// that keep winning give way, so that one that keeps losing on a busy
// machine is not starved into a 503 (at most 74 ms of waits in all).
const (
	maxChainTries     = 32
	chainBackoffAfter = 4
	chainBackoff      = 50 * time.Microsecond
)

// chainWait is the random wait before retry try (0-based) of a commit.
func chainWait(try int) time.Duration {
	if try < chainBackoffAfter {
		return 0
	}
	return rand.N(chainBackoff << min(try-chainBackoffAfter, 6))
}

// chainArg is a chain head as the head hash's field k holds it.
func chainArg(h varplane.ChainHead) string {
	if h.Seq == 0 {
		return ""
	}
	return strconv.FormatUint(h.Seq, 10) + " " + h.Hash
}

// parseChain reads a head hash's field k ("" or absent: no chain yet).
func parseChain(k string) (varplane.ChainHead, error) {
	if k == "" {
		return varplane.ChainHead{}, nil
	}
	seq, hash, ok := strings.Cut(k, " ")
	n, err := strconv.ParseUint(seq, 10, 64)
	if !ok || err != nil || n == 0 || hash == "" {
		return varplane.ChainHead{}, fmt.Errorf("chain head %q is not \"<seq> <hash>\"", k)
	}
	return varplane.ChainHead{Seq: n, Hash: hash}, nil
}

// chainGuess is the chain head of scope as this replica holds it.
func (s *Store) chainGuess(scope varplane.Scope) varplane.ChainHead {
	if e := s.entry(scope); e != nil {
		return e.Snap.Load().state.Chain
	}
	return varplane.ChainHead{}
}

// linked returns the JSON of ev linked as the event after head (ev itself
// is left as it is), and the new head.
func linked(ev *varplane.Event, head varplane.ChainHead) ([]byte, varplane.ChainHead) {
	cp := *ev
	next := head.Next(&cp)
	return eventjson.Event(&cp), next
}

// chained runs one commit script: run is given the chain head to link from
// (and the rest of the script's last CHAIN reply, nil at first) and sends
// the script. While the script answers CHAIN, run is called again with the
// head it reported. It returns the last reply.
func (s *Store) chained(scope varplane.Scope, run func(head varplane.ChainHead, hint []rueidis.RedisMessage) (string, []rueidis.RedisMessage, error)) (string, []rueidis.RedisMessage, error) {
	head := s.chainGuess(scope)
	var hint []rueidis.RedisMessage
	for try := range maxChainTries {
		if d := chainWait(try); d > 0 {
			time.Sleep(d)
		}
		st, rest, err := run(head, hint)
		if err != nil || st != "CHAIN" {
			return st, rest, err
		}
		s.stats.chainRetries.Add(1)
		if len(rest) == 0 {
			return "", nil, fmt.Errorf("a CHAIN reply without the chain head")
		}
		k, _, err := optString(rest[0])
		if err != nil {
			return "", nil, err
		}
		if head, err = parseChain(k); err != nil {
			return "", nil, s.decodeFailure("chain head", scope, err)
		}
		hint = rest[1:]
	}
	return "", nil, varplane.Unavailable(fmt.Errorf("redis store: the chain head of %q moved under %d tries in a row (other commits to the scope won each time); nothing was written", scope, maxChainTries))
}

// scriptFailure maps an error of chained: one the store made itself (a
// chain head that cannot be read, one that kept moving) as it is, a
// failure to run the script as commitFailure (unavailable when the script
// certainly did not run, outcome-unknown when it may have).
func (s *Store) scriptFailure(scope varplane.Scope, err error) error {
	var ve *varplane.Error
	if errors.As(err, &ve) {
		s.stats.commitErrors.Add(1)
		return err
	}
	return s.commitFailure(scope, err)
}

// cascadeGuess is the cascade a subtree deactivation of scope would choose
// as far as this replica knows: its installed active descendants, in
// bytewise order, each at its next generation. The script checks it.
func (s *Store) cascadeGuess(scope varplane.Scope) []varplane.CascadeEntry {
	var out []varplane.CascadeEntry
	for _, sc := range s.installedScopes() {
		if !sc.IsDescendantOf(scope) {
			continue
		}
		if e := s.entry(sc); e != nil {
			if st := e.Snap.Load().state; st.Head != nil {
				out = append(out, varplane.CascadeEntry{Scope: sc, Generation: st.Generation + 1})
			}
		}
	}
	return out
}

// cascadeArg is a cascade as the deactivation script compares it:
// "<scope> <generation>" pairs, separated by spaces (a scope holds none).
func cascadeArg(c []varplane.CascadeEntry) string {
	var b strings.Builder
	for i, e := range c {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(string(e.Scope))
		b.WriteByte(' ')
		b.WriteString(strconv.FormatUint(uint64(e.Generation), 10))
	}
	return b.String()
}

// parseCascade reads a cascade the deactivation script reported.
func parseCascade(s string) ([]varplane.CascadeEntry, error) {
	f := strings.Fields(s)
	if len(f)%2 != 0 {
		return nil, fmt.Errorf("cascade %q is not <scope> <generation> pairs", s)
	}
	out := make([]varplane.CascadeEntry, 0, len(f)/2)
	for i := 0; i < len(f); i += 2 {
		g, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil || g == 0 {
			return nil, fmt.Errorf("cascade %q is not <scope> <generation> pairs", s)
		}
		out = append(out, varplane.CascadeEntry{Scope: varplane.Scope(f[i]), Generation: varplane.Generation(g)})
	}
	return out, nil
}

// linkSuffix ends an event's JSON with its link, as eventjson writes it
// (seq and hash are its last members).
func linkSuffix(l varplane.ChainHead) string {
	return `,"seq":` + strconv.FormatUint(l.Seq, 10) + `,"hash":"` + l.Hash + `"}`
}
