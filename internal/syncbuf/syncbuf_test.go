package syncbuf_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/varplane/varplane/internal/syncbuf"
)

// TestConcurrentWriteAndRead writes from several goroutines while reading
// (run with -race) and checks that nothing written is lost or torn.
func TestConcurrentWriteAndRead(t *testing.T) {
	var b syncbuf.Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if n, err := b.Write([]byte("line\n")); n != 5 || err != nil {
					t.Errorf("Write = %d, %v", n, err)
				}
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("line\n", 400) {
		t.Fatalf("buffer holds %d bytes, want 2000 of whole lines", len(got))
	}
}
