package redis

import (
	"strings"
	"testing"
	"time"
)

// TestURLParameters: the store reads its settings from its URL, refuses a
// parameter it would ignore by name (and never quotes the password), and
// a parameter of its own wins over the Options given to Open.
func TestURLParameters(t *testing.T) {
	base := "redis://user:s3cret@127.0.0.1:6379/0"
	_, _, _, o, err := parseOptions(base+"?prefix=app&eviction_check=warn&revalidate_interval=2s&command_timeout=3s&read_only=true",
		Options{EvictionCheck: EvictionCheckFail, RevalidateInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if o.EvictionCheck != EvictionCheckWarn || o.RevalidateInterval != 2*time.Second || o.CommandTimeout != 3*time.Second || !o.ReadOnly {
		t.Errorf("options = %+v", o)
	}
	if _, _, _, o, _ := parseOptions(base+"?read_only=false", Options{ReadOnly: true}); !o.ReadOnly {
		t.Error("read_only=false made a read-only store writable")
	}
	for _, tc := range []struct{ query, want string }{
		{"?prefx=app", `unknown URL parameter(s) "prefx"`},
		{"?client_cache=1&zz=1", `"client_cache", "zz"`},
		{"?skip_verify=true", "skip_verify needs rediss://"},
		{"?prefix=a&prefix=b", `"prefix" given more than once`},
		{"?eviction_check=never", `eviction_check="never": want fail or warn`},
		{"?revalidate_interval=1ms", "revalidate_interval=1ms: want 10ms to 5m0s"},
		{"?revalidate_interval=10m", "revalidate_interval=10m0s: want 10ms to 5m0s"},
		{"?command_timeout=soon", `command_timeout="soon" is not a positive duration`},
		{"?read_only=maybe", `read_only="maybe" is not true or false`},
		{"?a=%zz", "malformed query"},
		{"#frag", "fragment"},
	} {
		_, _, _, _, err := parseOptions(base+tc.query, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: %v, want an error holding %q and no password", tc.query, err, tc.want)
		}
	}
	if _, _, _, _, err := parseOptions("rediss://127.0.0.1:6379/0?skip_verify=true&addr=127.0.0.1:6380&addr=127.0.0.1:6381", Options{}); err != nil {
		t.Errorf("skip_verify with rediss and repeated addr: %v", err)
	}
}
