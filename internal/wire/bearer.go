package wire

import (
	"net/http"
	"strings"
)

// Bearer returns the token of an "Authorization: Bearer <token>" header
// (scheme case-insensitive), or "" when there is none or it is another
// scheme. It is the one parser of credentials for HTTP, Connect and gRPC
// metadata alike (pass the header's first value).
func Bearer(authorization string) string {
	const scheme = "bearer "
	if len(authorization) <= len(scheme) || !strings.EqualFold(authorization[:len(scheme)], scheme) {
		return ""
	}
	return strings.TrimSpace(authorization[len(scheme):])
}

// RequestBearer is Bearer of r's Authorization header.
func RequestBearer(r *http.Request) string {
	// Direct map access: the server has canonicalised header names.
	if vs := r.Header["Authorization"]; len(vs) > 0 {
		return Bearer(vs[0])
	}
	return ""
}

// SetBearer sets the Authorization header of a request a client sends; an
// empty token sets nothing.
func SetBearer(h http.Header, token string) {
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
}
