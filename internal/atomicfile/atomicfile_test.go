package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWritePrivate: the file holds the new bytes, mode 0600, and no
// temporary file is left behind; a write into a missing directory fails
// and leaves the old file.
func TestWritePrivate(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	for _, data := range []string{"one", "two"} {
		if err := WritePrivate(p, []byte(data)); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil || string(b) != data {
			t.Fatalf("read %q, %v; want %q", b, err, data)
		}
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("%d entries in the directory, want only the file", len(ents))
	}
	if err := WritePrivate(filepath.Join(dir, "missing", "f"), []byte("x")); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
}

// TestWriteFuncFails: a write that fails leaves the old file and no
// temporary file.
func TestWriteFuncFails(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := WritePrivate(p, []byte("old")); err != nil {
		t.Fatal(err)
	}
	err := WriteFunc(p, func(w io.Writer) error {
		if _, err := w.Write([]byte("half")); err != nil {
			return err
		}
		return errors.New("disk full")
	})
	if err == nil {
		t.Fatal("a failed write succeeded")
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("file holds %q after a failed write", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("%d entries in the directory, want only the file", len(ents))
	}
}
