package wire

import (
	"net/http"
	"strings"
)

// Bearer returns the token of an "Authorization: Bearer <token>" header, or
// of "Authorization: Token <token>", the form seed 001's values service
// documents (schemes case-insensitive); "" when there is none or it is
// another scheme. It is the one parser of credentials for HTTP, Connect and
// gRPC metadata alike (pass the header's first value).
func Bearer(authorization string) string {
	for _, scheme := range [...]string{"bearer ", "token "} {
		if len(authorization) > len(scheme) && strings.EqualFold(authorization[:len(scheme)], scheme) {
			return strings.TrimSpace(authorization[len(scheme):])
		}
	}
	return ""
}

// RequestBearer is Bearer of r's Authorization header.
func RequestBearer(r *http.Request) string {
	// Direct map access: the server has canonicalised header names.
	if vs := r.Header["Authorization"]; len(vs) > 0 {
		return Bearer(vs[0])
	}
	return ""
}

// BasicPassword returns the password of r's "Authorization: Basic" header,
// or "" when there is none. It is how a browser carries a token to a page
// (it asks for a user name and a password, and the token is the password);
// the user name is ignored, so it can never select an identity.
func BasicPassword(r *http.Request) string {
	if _, pass, ok := r.BasicAuth(); ok {
		return pass
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
