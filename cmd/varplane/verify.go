package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/migrate"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/postgres"
	"github.com/varplane/varplane/store/redis"
)

// VerifyCommand checks the audit log's chain end to end: a file store's
// log, a store's history, or an export, offline.
type VerifyCommand struct {
	m *Main
}

// verifyResult is what verify prints: the same shape for a log, a store and
// an export (-o json).
type verifyResult struct {
	Target string `json:"target"` // log, store or export
	Name   string `json:"name"`   // the path, or the store's kind
	Sound  bool   `json:"sound"`
	// Problem is the first broken or missing link, or other damage.
	Problem   string                                `json:"problem,omitempty"`
	Scopes    int                                   `json:"scopes"`
	Events    int                                   `json:"events"`
	Unchained int                                   `json:"unchained,omitempty"`
	Documents int                                   `json:"documents"`
	Reclaimed int                                   `json:"reclaimed,omitempty"`
	Digest    string                                `json:"digest,omitempty"`
	Heads     map[varplane.Scope]varplane.ChainHead `json:"heads,omitempty"`
}

// Run parses args and verifies what they name.
func (c *VerifyCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("verify", "PATH | --store URL [-o json]", `
Check the tamper-evident audit log end to end and name the first broken or
missing link. PATH is a file store's log (the server may be running: the
file is only read) or a directory written by "varplane migrate export";
--store reads a store's history through the store (Redis and PostgreSQL
are opened read-only, nothing is written; file:PATH is the log itself).

Every event of a scope must be the next link of the scope's chain, every
cascade entry must be listed by its parent's deactivation, and every kept
document must be the one its revision digests. The report ends with the
chain digest of every scope's head: compare it, or the heads (-o json),
with what was anchored outside (GET {base}/admin/chain, a scope's status)
to tell a log that lost its last events from a sound one.

Exit status: 0 sound, 1 broken or damaged, 2 usage, 3 store unreachable.`)
	storeURL := fs.String("store", "", "verify a store's history: file:PATH, redis://… or postgres://…")
	output := fs.String("o", "text", "output: text or json")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	if err := checkOutput(*output); err != nil {
		return err
	}
	var res *verifyResult
	switch {
	case *storeURL != "" && len(pos) > 0:
		return usagef("give a PATH or --store, not both")
	case *storeURL != "":
		res, err = c.verifyStore(ctx, *storeURL)
	case len(pos) == 1:
		res, err = verifyPath(ctx, pos[0])
	default:
		return usagef("verify needs a PATH (a log file or an export directory) or --store URL")
	}
	if err != nil {
		return err
	}
	if *output == "json" {
		if err := writeJSON(c.m.Stdout, res); err != nil {
			return err
		}
	} else {
		printVerify(c.m.Stdout, res)
	}
	if !res.Sound {
		return &refusedError{}
	}
	return nil
}

// verifyPath verifies a log file, or an export directory.
func verifyPath(ctx context.Context, path string) (*verifyResult, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, usagef("%v", err)
	}
	if fi.IsDir() {
		rep, err := migrate.VerifyExport(ctx, path)
		return storeResult("export", path, rep, err)
	}
	return verifyLog(ctx, path)
}

// verifyLog verifies a file store's log with file.VerifyLog.
func verifyLog(ctx context.Context, path string) (*verifyResult, error) {
	rep, err := file.VerifyLog(ctx, path)
	if err != nil {
		return nil, err
	}
	res := &verifyResult{Target: "log", Name: path, Sound: rep.Problem == nil, Scopes: rep.Scopes, Events: rep.Events,
		Documents: rep.Documents, Reclaimed: rep.Reclaimed, Digest: rep.ChainDigest, Heads: rep.Heads}
	if rep.Problem != nil {
		res.Problem = rep.Problem.Error()
	}
	return res, nil
}

// verifyStore opens the store url names without writing to it and verifies
// its history (varplane.VerifyStore); a file store's log is verified as a
// file, since a running server holds its lock.
func (c *VerifyCommand) verifyStore(ctx context.Context, url string) (*verifyResult, error) {
	scheme, rest, _ := strings.Cut(url, ":")
	log := slog.New(slog.NewTextHandler(c.m.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	var st varplane.Store
	var err error
	switch strings.ToLower(scheme) {
	case "file":
		path := strings.TrimPrefix(rest, "//")
		if path == "" {
			return nil, usagef("--store file:PATH needs a path")
		}
		return verifyLog(ctx, path)
	case "redis", "rediss":
		st, err = redis.Open(octx, url, redis.Options{Logger: log, ReadOnly: true})
	case "postgres", "postgresql":
		st, err = postgres.Open(octx, url, postgres.Options{Logger: log, ReadOnly: true})
	case "memory":
		return nil, usagef("--store memory: holds nothing outside a running server")
	default:
		return nil, usagef("--store %q: want file:PATH, redis://HOST:PORT or postgres://HOST/DATABASE", redactURL(url))
	}
	switch {
	case varplane.ErrorCode(err) == varplane.CodeBadRequest:
		return nil, usagef("--store: %s", varplane.ErrorMessage(err))
	case err != nil:
		return nil, &unreachableError{err: err}
	}
	defer st.Close()
	rep, err := varplane.VerifyStore(ctx, st)
	return storeResult("store", st.Name(), rep, err)
}

// storeResult turns VerifyStore's answer (or VerifyExport's) into a
// result: a broken link is a result that is not sound; a store that could
// not be read is an error.
func storeResult(target, name string, rep *varplane.StoreReport, err error) (*verifyResult, error) {
	var ce *varplane.ChainError
	if err != nil && !errors.As(err, &ce) {
		if target == "store" && varplane.ErrorCode(err) == varplane.CodeStoreUnavailable {
			return nil, &unreachableError{err: err}
		}
		return nil, err
	}
	res := &verifyResult{Target: target, Name: name, Sound: err == nil}
	if err != nil {
		res.Problem = err.Error()
	}
	if rep != nil {
		res.Scopes, res.Events, res.Unchained, res.Documents, res.Reclaimed = rep.Scopes, rep.Events, rep.Unchained, rep.Revisions, rep.Reclaimed
		res.Digest, res.Heads = rep.Digest, rep.Heads
	}
	return res, nil
}

// printVerify writes the result for people: one line for the verdict, one
// for the digest.
func printVerify(w io.Writer, r *verifyResult) {
	verdict := "sound"
	if !r.Sound {
		verdict = "BROKEN"
	}
	fmt.Fprintf(w, "%s: %s %s: %d scopes, %d events", verdict, r.Target, r.Name, r.Scopes, r.Events)
	if r.Unchained > 0 {
		fmt.Fprintf(w, " (%d written before chains began, not covered)", r.Unchained)
	}
	fmt.Fprintf(w, ", %d documents checked", r.Documents)
	if r.Reclaimed > 0 {
		fmt.Fprintf(w, ", %d reclaimed", r.Reclaimed)
	}
	fmt.Fprintln(w)
	if r.Problem != "" {
		fmt.Fprintf(w, "first problem: %s\n", r.Problem)
		return
	}
	if r.Digest != "" {
		fmt.Fprintf(w, "chain digest: %s\n", r.Digest)
	}
}
