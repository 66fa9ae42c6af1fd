package rpc_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGeneratedCodeIsCurrent fails when a .proto file changed without
// `make proto`: the target records the hashes of the files it generated
// rpc/gen from in rpc/gen/proto.sha256 (sha256sum's format), and buf is too
// slow to build in CI to regenerate and compare.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	recorded, err := os.ReadFile(filepath.Join("gen", "proto.sha256"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	root := filepath.Join("..", "proto")
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".proto") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		lines = append(lines, hex.EncodeToString(sum[:])+"  ./"+filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(lines, func(a, b string) int { return strings.Compare(a[66:], b[66:]) })
	if got, want := strings.Join(lines, "\n")+"\n", string(recorded); got != want {
		t.Fatalf("proto/ differs from what rpc/gen was generated from: run make proto\nnow:\n%srecorded:\n%s", got, want)
	}
}
