// Package atomicfile writes a file whole or not at all, for the local
// copies that must survive a crash as the previous version or the new one
// (the instance cache's --cache-dir, the SDK's last-known-good copy, the
// file store's checkpoint).
package atomicfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WritePrivate writes data to path with mode 0600: a temporary file in the
// same directory is written, synced and renamed over path, and the
// directory is synced, so a reader (or a crash) sees the old file or the
// new one, never a part of it.
func WritePrivate(path string, data []byte) error {
	return WriteFunc(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFunc is WritePrivate for a file too large to hold in memory: write
// streams its bytes (buffered) into the temporary file. When write fails
// the temporary file is removed and path is left as it was.
func WriteFunc(path string, write func(w io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err = write(w); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// The rename is durable once the directory is: sync it, where the
	// platform lets a directory be opened and synced.
	if d, derr := os.Open(filepath.Dir(path)); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
