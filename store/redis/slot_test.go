package redis

import (
	"strings"
	"testing"

	"github.com/varplane/varplane"
)

// crc16 is the CRC16-XMODEM (polynomial 0x1021, initial 0) that Redis
// Cluster hashes keys with.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slot is the Redis Cluster slot of key, hash tags included: the part
// between the first '{' and the first '}' after it, when not empty.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16([]byte(key)) % 16384
}

func TestCRC16MatchesRedisCluster(t *testing.T) {
	// Vectors from the Redis Cluster specification and CLUSTER KEYSLOT.
	tests := []struct {
		in   string
		want uint16
	}{
		{"123456789", 0x31C3},
	}
	for _, tc := range tests {
		if got := crc16([]byte(tc.in)); got != tc.want {
			t.Errorf("crc16(%q) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
	slots := []struct {
		key  string
		want uint16
	}{
		{"foo", 12182},
		{"{user1000}.following", slot("user1000")},
		{"foo{}{bar}", slot("foo{}{bar}")}, // empty tag: the whole key
	}
	for _, tc := range slots {
		if got := slot(tc.key); got != tc.want {
			t.Errorf("slot(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
}

// TestScriptKeysShareOneSlot checks, for scopes whose names contain braces,
// colons and non-ASCII text, that every key each script touches (declared
// ones and the descendant keys the deactivation script builds) lies in the
// slot of the scope's root.
func TestScriptKeysShareOneSlot(t *testing.T) {
	s := &Store{keys: keys{prefix: "varplane"}}
	scopes := []varplane.Scope{
		"agentic", "agentic.lanes.vinci", "a{b}.c", "}{.x{y}", "{x}", "x:y.z:w",
		"グループ.日本.ключ", "tenant:acme.app:1", "{}.a",
	}
	for _, sc := range scopes {
		t.Run(string(sc), func(t *testing.T) {
			ev := &varplane.Event{Scope: sc, IdempotencyKey: "k{1}"}
			rev := varplane.Revision("sha256:" + strings.Repeat("ab", 32))
			scripts := map[string][]string{
				"create":     append(s.commonKeys(ev), s.keys.revision(sc, rev), s.keys.floor(sc)),
				"activate":   append(s.commonKeys(ev), s.keys.revision(sc, rev), s.keys.floor(sc)),
				"publish":    append(s.commonKeys(ev), s.keys.revision(sc, rev), s.keys.floor(sc)),
				"reject":     append(s.commonKeys(ev), s.keys.floor(sc)),
				"confirm":    {s.keys.head(sc), s.keys.floor(sc)},
				"deactivate": append(s.commonKeys(ev), s.keys.floor(sc), s.keys.headBase(sc)+string(sc)+".d{}", s.keys.historyBase(sc)+string(sc)+".d.e", s.keys.floorBase(sc)+string(sc)+".d{x}"),
			}
			want := slot(s.keys.head(varplane.Scope(sc.Root())))
			for name, ks := range scripts {
				for _, k := range ks {
					if got := slot(k); got != want {
						t.Errorf("%s: key %q is in slot %d, want %d (the root's)", name, k, got, want)
					}
				}
			}
			// The tag must be the root's, and only the root's: two roots
			// differing only in a brace never share the tag.
			if tag := s.keys.tag(sc); strings.ContainsAny(tag[1:len(tag)-1], "{}") {
				t.Errorf("tag %q contains a brace", tag)
			}
		})
	}
	if s.keys.tag("a{") == s.keys.tag("a}") {
		t.Error("distinct roots share a tag")
	}
}
