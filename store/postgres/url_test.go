package postgres

import (
	"strings"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	const base = "postgres://vp:s3cret-pass@db.internal:6543/cfg"
	tests := []struct {
		name    string
		url     string
		wantErr string // substring; "" means accepted
		jit     string // the session's jit setting when accepted; "" means the default, off
		check   func(t *testing.T, schema string, maxConns int32, opts Options)
	}{
		{name: "defaults", url: base, check: func(t *testing.T, schema string, maxConns int32, opts Options) {
			if schema != DefaultSchema || maxConns != DefaultMaxConns || opts.ReadOnly {
				t.Errorf("schema %q maxConns %d readOnly %v", schema, maxConns, opts.ReadOnly)
			}
		}},
		{name: "own and pool parameters", url: base + "?schema=cp_1&command_timeout=2s&revalidate_interval=1m&read_only=true&pool_max_conns=7&pool_min_conns=1&pool_max_conn_lifetime=1h&connect_timeout=3&sslmode=disable&application_name=x&statement_timeout=4000",
			check: func(t *testing.T, schema string, maxConns int32, opts Options) {
				if schema != "cp_1" || maxConns != 7 || !opts.ReadOnly || opts.CommandTimeout != 2*time.Second || opts.RevalidateInterval != time.Minute {
					t.Errorf("schema %q maxConns %d opts %+v", schema, maxConns, opts)
				}
			}},
		{name: "postgresql scheme", url: "postgresql://localhost/db"},
		{name: "jit handed back to the server", url: base + "?jit=on", jit: "on"},
		{name: "unknown parameter", url: base + "?pool_max_con=10&colour=blue", wantErr: "unknown URL parameter(s) colour, pool_max_con"},
		{name: "search_path", url: base + "?search_path=x", wantErr: "use schema=NAME"},
		{name: "bad schema", url: base + "?schema=Bad-Name", wantErr: "schema \"Bad-Name\""},
		{name: "long schema", url: base + "?schema=" + strings.Repeat("a", 41), wantErr: "schema"},
		{name: "bad duration", url: base + "?command_timeout=soon", wantErr: "command_timeout"},
		{name: "negative duration", url: base + "?revalidate_interval=-1s", wantErr: "revalidate_interval"},
		{name: "bad bool", url: base + "?read_only=maybe", wantErr: "read_only"},
		{name: "bad listen", url: base + "?listen=sometimes", wantErr: "listen"},
		{name: "no listen", url: base + "?listen=false", check: func(t *testing.T, _ string, _ int32, opts Options) {
			if !opts.noListen {
				t.Error("listen=false did not turn listening off")
			}
		}},
		{name: "bad pool size", url: base + "?pool_max_conns=0", wantErr: "pool_max_conns"},
		{name: "wrong scheme", url: "mysql://localhost/db", wantErr: "not postgres://"},
		{name: "unparsable", url: "postgres://vp:s3cret-pass@[::1/db", wantErr: "bad URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, opts, schema, addr, err := parseURL(tc.url, Options{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("the error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(addr, "s3cret") {
				t.Errorf("addr %q shows the password", addr)
			}
			if got := cfg.ConnConfig.RuntimeParams["search_path"]; got != schema {
				t.Errorf("search_path = %q, want %q", got, schema)
			}
			wantJIT := tc.jit
			if wantJIT == "" {
				wantJIT = "off"
			}
			if got := cfg.ConnConfig.RuntimeParams["jit"]; got != wantJIT {
				t.Errorf("jit = %q, want %q", got, wantJIT)
			}
			if tc.check != nil {
				tc.check(t, schema, cfg.MaxConns, opts)
			}
		})
	}
}

func TestOptionsValidated(t *testing.T) {
	for _, o := range []Options{
		{RevalidateInterval: time.Millisecond},
		{RevalidateInterval: time.Hour},
		{CommandTimeout: -time.Second},
	} {
		if _, err := o.normalise(); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
}
