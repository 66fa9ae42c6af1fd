package access

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
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
// the 64 lowercase hex digits of its SHA-256. A token holds 256 random bits,
// so a fast hash is enough: there is nothing to guess.
func Digest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func validDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	for _, c := range []byte(h) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
