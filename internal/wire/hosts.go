package wire

import (
	"net"
	"net/http"
	"strings"

	"github.com/varplane/varplane"
)

// HostPolicy decides which Host header values a listener answers, against DNS
// rebinding: a web page on an attacker's name that resolves to this machine
// must not reach the server. By default it answers loopback names
// (localhost and *.localhost, which never resolve elsewhere), loopback
// addresses, the address it listens on, and, when that address is a
// wildcard (0.0.0.0, ::), every address of the machine's interfaces. Other
// names must be listed; "*" answers every host.
type HostPolicy struct {
	any   bool
	names map[string]bool
	ips   map[string]bool
}

// NewHostPolicy builds the policy of a listener on listen with the extra
// allowed host names or addresses (a leading "." or "*." allows a domain's
// subdomains: ".example.com").
func NewHostPolicy(listen net.Addr, allowed []string) *HostPolicy {
	p := &HostPolicy{names: map[string]bool{"localhost": true}, ips: map[string]bool{}}
	for _, h := range allowed {
		h = strings.ToLower(strings.TrimSpace(h))
		switch {
		case h == "*":
			p.any = true
		case h == "":
		case net.ParseIP(strings.Trim(h, "[]")) != nil:
			p.ips[net.ParseIP(strings.Trim(h, "[]")).String()] = true
		default:
			p.names[strings.TrimPrefix(h, "*")] = true
		}
	}
	if ta, ok := listen.(*net.TCPAddr); ok {
		if ta.IP == nil || ta.IP.IsUnspecified() {
			if addrs, err := net.InterfaceAddrs(); err == nil {
				for _, a := range addrs {
					if n, ok := a.(*net.IPNet); ok {
						p.ips[n.IP.String()] = true
					}
				}
			}
		} else {
			p.ips[ta.IP.String()] = true
		}
	}
	return p
}

// Allows reports whether a request for host (a Host header, with or without
// a port) is answered.
func (p *HostPolicy) Allows(host string) bool {
	if p.any {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback() || p.ips[ip.String()]
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" {
		return false
	}
	if p.names[host] || strings.HasSuffix(host, ".localhost") {
		return true
	}
	for i := 0; i < len(host); i++ {
		if host[i] == '.' && p.names[host[i:]] {
			return true // a ".domain" entry allows its subdomains
		}
	}
	return false
}

// Guard answers 421 Misdirected Request (code forbidden) to a request whose
// Host the policy does not allow, and passes the others to next.
func (p *HostPolicy) Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.Allows(r.Host) {
			w.Header().Set("Connection", "close")
			// The host is not echoed: it is whatever the page chose.
			body := BodyOf(&varplane.Error{Code: varplane.CodeForbidden,
				Message: "this server does not answer for that host name",
				Hint:    "list it with --allowed-hosts (or serve it behind a proxy that sets an allowed Host)"})
			WriteJSON(w, http.StatusMisdirectedRequest, body)
			return
		}
		next.ServeHTTP(w, r)
	})
}
