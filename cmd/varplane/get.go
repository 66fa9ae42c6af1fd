package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// GetCommand reads what a scope serves: GET {base}?key= or ?group=.
type GetCommand struct {
	m *Main
}

// Run parses args and prints the scope's values. A scope without a head is a
// no-head *varplane.Error (exit 1); an unchanged head with --if-none-match is a
// success that prints "not modified".
func (c *GetCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("get", "(--key SCOPE | --group GROUP) [--if-none-match REVISION] [flags]", `
Read the values a scope serves, as consumers do (the data plane). A key (it
contains a dot) is served as {"<key>": document}; a group (one segment) passes
its document through. The ETag is the revision: with --if-none-match set to the
revision you hold, an unchanged head answers "not modified" with no body.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	key := fs.String("key", "", "key scope to read, e.g. agentic.lanes.vinci")
	group := fs.String("group", "", "group scope to read, e.g. agentic")
	ifNoneMatch := fs.String("if-none-match", "", "revision (ETag) you hold; an unchanged head answers not modified")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if (*key == "") == (*group == "") {
		return usagef("give exactly one of --key and --group")
	}
	cl, err := cf.client(c.m.Stdout)
	if err != nil {
		return err
	}
	q := url.Values{"key": {*key}}
	if *group != "" {
		q = url.Values{"group": {*group}}
	}
	var hdr http.Header
	if *ifNoneMatch != "" {
		hdr = http.Header{"If-None-Match": {*ifNoneMatch}}
	}
	resp, err := cl.do(ctx, http.MethodGet, "", q, nil, hdr)
	if err != nil {
		return err
	}
	if resp.status == http.StatusNotModified {
		if cf.json() {
			return nil
		}
		_, err := fmt.Fprintf(c.m.Stdout, "not modified (still %s)\n", strings.Trim(resp.header.Get("ETag"), `"`))
		return err
	}
	return emit(c.m.Stdout, cf.json(), resp.body, func() error {
		var out struct {
			Generation  uint64          `json:"generation"`
			Revision    string          `json:"revision"`
			SchemaID    string          `json:"schemaId"`
			EffectiveAt time.Time       `json:"effectiveAt"`
			Values      json.RawMessage `json:"values"`
		}
		if err := decodeAnswer(resp.body, &out); err != nil {
			return err
		}
		scope := *key + *group
		fmt.Fprintf(c.m.Stdout, "%s generation %d revision %s (effective %s)\n", scope, out.Generation, out.Revision, shortTime(out.EffectiveAt))
		return printJSON(c.m.Stdout, out.Values)
	})
}
