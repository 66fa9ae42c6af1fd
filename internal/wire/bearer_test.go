package wire

import (
	"net/http/httptest"
	"testing"
)

func TestBearerSchemes(t *testing.T) {
	for in, want := range map[string]string{
		"Token abc": "abc", "token  abc ": "abc", "TOKEN x": "x", "Token": "", "Token ": "", "Tokens abc": "", "Basic dG9rZW4=": "",
	} {
		if got := Bearer(in); got != want {
			t.Errorf("Bearer(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBasicPassword(t *testing.T) {
	tests := []struct {
		name   string
		header string
		want   string
	}{
		{"user and password", "Basic dXNlcjpzM2NyM3Q=", "s3cr3t"}, // user:s3cr3t
		{"password with a colon", "Basic dXNlcjphOmI=", "a:b"},    // user:a:b
		{"empty user", "Basic OnRvaw==", "tok"},                   // :tok
		{"no colon is no credential", "Basic dG9rZW4=", ""},       // token
		{"not base64", "Basic %%%", ""},
		{"bearer is not basic", "Bearer tok", ""},
		{"none", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			if got := BasicPassword(r); got != tt.want {
				t.Errorf("BasicPassword(%q) = %q, want %q", tt.header, got, tt.want)
			}
			if tt.header != "" && tt.want != "" && RequestBearer(r) != "" {
				t.Errorf("RequestBearer read a Basic credential")
			}
		})
	}
}
