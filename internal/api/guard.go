package api

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// GuardOptions describe the TCP listener that Guard protects.
type GuardOptions struct {
	// Addr is the address the listener is bound to (its real port, not 0).
	Addr netip.AddrPort
	// Token, when not empty, must be sent by every request as
	// "Authorization: Bearer TOKEN".
	Token string
}

// Guard wraps the read-only views for the TCP listener. A web page the
// operator visits can send requests to a loopback address, and a page
// whose name is rebound to 127.0.0.1 can read the answers; so Guard
//
//   - answers 403 to a Host header other than the listener's address or
//     localhost (with or without the port), which is what a rebound name
//     sends;
//   - answers 405 to every method but GET and HEAD: changes go through the
//     unix socket only;
//   - answers 401 without the bearer token, when there is one, in the
//     Authorization header or as the access_token query parameter (RFC
//     6750 §2.3: a browser's event stream cannot send headers, so the map
//     page passes on the token of its own address);
//   - sends no CORS headers, so browsers keep other origins' pages from
//     reading the answers.
func Guard(h http.Handler, o GuardOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(r.Host, o.Addr) {
			replyError(w, http.StatusForbidden, fmt.Sprintf("Host %q is not this API's address (%s) or localhost", r.Host, o.Addr))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			replyError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s is not allowed here: this address serves read-only views; changes go through the agent's unix socket (the detour CLI, as root or a member of group %s)", r.Method, SocketGroup))
			return
		}
		if o.Token != "" && !tokenMatches(r.Header.Get("Authorization"), o.Token) && !queryTokenMatches(r, o.Token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="detour"`)
			replyError(w, http.StatusUnauthorized, "missing or wrong bearer token (Authorization: Bearer, from the agent's api_token_file)")
			return
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether a Host header names the listener: localhost,
// or the listener's IP address (any IP address when it listens on a
// wildcard address, since a rebound name is never an IP literal), with the
// listener's port or none.
func hostAllowed(host string, addr netip.AddrPort) bool {
	name, port := host, ""
	if h, p, err := net.SplitHostPort(host); err == nil {
		name, port = h, p
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		name = host[1 : len(host)-1]
	}
	if port != "" && port != strconv.Itoa(int(addr.Port())) {
		return false
	}
	if strings.EqualFold(name, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(name)
	if err != nil || ip.Zone() != "" {
		return false
	}
	if addr.Addr().IsUnspecified() {
		return true
	}
	return ip.Unmap() == addr.Addr().Unmap()
}

// tokenMatches compares an Authorization header with the token in
// constant time.
// queryTokenMatches reports whether the request carries the token as its
// access_token query parameter.
func queryTokenMatches(r *http.Request, token string) bool {
	q := r.URL.Query().Get("access_token")
	return q != "" && subtle.ConstantTimeCompare([]byte(q), []byte(token)) == 1
}

func tokenMatches(header, token string) bool {
	const prefix = "Bearer "
	if len(header) < len(prefix) || !strings.EqualFold(header[:len(prefix)], prefix) {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(header[len(prefix):])), []byte(token)) == 1
}
