package main

import (
	"bytes"
	"testing"

	"github.com/varplane/varplane/canonical"
)

func TestMakeDocIsCanonicalAndSized(t *testing.T) {
	for _, tc := range []struct {
		size int
		tag  string
		n    int
	}{{1024, "bench.read", 0}, {1024, "bench.c64.w63", 123456}, {4096, "x", -1}} {
		doc := makeDoc(tc.size, tc.tag, tc.n)
		if got, want := len(doc), tc.size; got != want {
			t.Errorf("makeDoc(%d, %q, %d): len %d, want %d", tc.size, tc.tag, tc.n, got, want)
		}
		c, err := canonical.Transform(doc)
		if err != nil {
			t.Fatalf("makeDoc output is not valid JSON: %v", err)
		}
		if !bytes.Equal(c, doc) {
			t.Errorf("makeDoc output is not canonical:\n got %s\nwant %s", doc, c)
		}
	}
	if bytes.Equal(makeDoc(1024, "a", 1), makeDoc(1024, "a", 2)) {
		t.Error("documents for different n are equal")
	}
}

func TestParseBench(t *testing.T) {
	out := `goos: linux
BenchmarkValue-2         	 1000000	        52.3 ns/op	       0 B/op	       0 allocs/op
BenchmarkGet-2           	  500000	       210 ns/op	      48 B/op	       2 allocs/op
PASS
ok  	github.com/varplane/varplane/client	1.2s
`
	got := parseBench(out)
	want := []SDKBench{
		{Name: "BenchmarkValue-2", Iterations: 1000000, NsPerOp: 52.3},
		{Name: "BenchmarkGet-2", Iterations: 500000, NsPerOp: 210, BytesPerOp: 48, AllocsPerOp: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("parseBench: got %d results %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("parseBench[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestCommandOf: the command a report records leaves out the flags that
// name files of the machine, in both of flag's spellings, and keeps the rest.
func TestCommandOf(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "cd bench && go run ."},
		{[]string{"-profile"}, "cd bench && go run . -profile"},
		{[]string{"-only", "commit", "-json", "/x/r.json", "-md=/x/r.md"}, "cd bench && go run . -only commit"},
		{[]string{"--repo", "/x", "-rounds", "5", "--json=/x/a"}, "cd bench && go run . -rounds 5"},
	} {
		if got := commandOf(tc.args); got != tc.want {
			t.Errorf("commandOf(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}
