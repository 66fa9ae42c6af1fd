package access

import (
	"crypto/rand"
	"encoding/base64"

	"github.com/varplane/varplane/canonical"
)

// TokenPrefix starts every token this package issues, so that a token is
// recognisable in a secret scanner and never mistaken for an id.
const TokenPrefix = "vpt_"

// NewToken returns a new bearer token: TokenPrefix and 256 random bits,
// base64url. It is shown once; only its Digest is stored.
func NewToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// Digest returns what the access document stores for token: "sha256:" and
// the 64 lowercase hex digits of its SHA-256 (canonical.DigestCanonical of
// its bytes: the one digest form). A token holds 256 random bits,
// so a fast hash is enough: there is nothing to guess.
func Digest(token string) string { return canonical.DigestCanonical([]byte(token)) }
