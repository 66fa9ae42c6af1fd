package wiretest

import (
	"net"
	"testing"
	"time"
)

// Listen listens on addr ("127.0.0.1:0" for a fresh port), retrying for a
// second: a server a test stopped and starts again on its old address
// finds the old socket lingering for a moment.
func Listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal(err)
	return nil
}
