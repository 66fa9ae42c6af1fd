package wire

import "time"

// Server limits: every listener of the project (the main port, the RPC
// listener's HTTP/1.1 path) reads a request's headers, and the whole
// request, within these, keeps an idle connection this long, and refuses
// larger request headers (the request line with its query string
// included: net/http answers 431). Long-lived streams lift the read and
// write deadlines themselves once their request is read (StreamDeadline).
const (
	ServerReadHeaderTimeout = 5 * time.Second
	ServerReadTimeout       = 30 * time.Second
	ServerWriteTimeout      = 30 * time.Second
	ServerIdleTimeout       = 120 * time.Second
	ServerMaxHeaderBytes    = 64 << 10
)
