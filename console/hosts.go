package console

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// AnyHost, as an entry of Options.AllowedHosts, turns the host check off:
// the console answers every Host. Use it only when what is in front of the
// console already answers for chosen names only (a reverse proxy routing by
// name, a server of your own that checks Host).
const AnyHost = "*"

// hostPolicy decides which Host headers the console answers (see
// Options.AllowedHosts).
type hostPolicy struct {
	any   bool
	names map[string]bool // lower-case host, or host:port
}

func newHostPolicy(allowed []string) (hostPolicy, error) {
	p := hostPolicy{names: make(map[string]bool)}
	for _, a := range allowed {
		a = strings.ToLower(strings.TrimSpace(a))
		switch {
		case a == AnyHost:
			p.any = true
			continue
		case a == "" || strings.ContainsAny(a, "/ \t\r\n@?#*"):
			return hostPolicy{}, fmt.Errorf("console: AllowedHosts entry %q: give a host name or IP, optionally with :port (for example ops.example.com or ops.example.com:8443), or %q for any", a, AnyHost)
		}
		if n, port := splitHost(a); port != "" {
			n = strings.TrimSuffix(n, ".")
			p.names[joinHost(n, port)] = true
		} else {
			p.names[strings.TrimSuffix(n, ".")] = true
		}
	}
	return p, nil
}

// allowed reports whether the console answers a request carrying host (the
// Host header, host[:port]) that arrived on a connection whose local
// address is local (nil when unknown).
//
// Answered: a loopback name or address (localhost, 127.0.0.0/8, ::1; any
// port) or the unspecified address (0.0.0.0, ::: what a listener on every
// interface prints), the address the connection was accepted on (the listen address:
// an IP literal and the port), and the configured names. Refused: every
// other name, in particular one an attacker's DNS points at this machine
// (DNS rebinding), which a browser sends as the Host of its requests.
func (p hostPolicy) allowed(host string, local net.Addr) bool {
	if p.any {
		return true
	}
	host = strings.ToLower(host)
	name, port := splitHost(host)
	name = strings.TrimSuffix(name, ".") // the root's dot: ops.example.com. is ops.example.com
	if name == "" {
		return false
	}
	if name == "localhost" {
		return true
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		// The unspecified address (0.0.0.0, ::) names this machine as
		// loopback does: a browser sends it only when opened on this
		// machine at the address a listener on every interface prints.
		if ip.Unmap().IsLoopback() || ip.IsUnspecified() {
			return true
		}
		if ta, ok := local.(*net.TCPAddr); ok {
			lip, ok := netip.AddrFromSlice(ta.IP)
			if ok && lip.Unmap() == ip.Unmap() && (port == "" && ta.Port == 80 || port == fmt.Sprint(ta.Port)) {
				return true
			}
		}
	}
	if p.names[name] {
		return true
	}
	return port != "" && p.names[joinHost(name, port)]
}

// splitHost splits a Host header into its host (brackets of an IPv6
// literal removed) and port ("" when absent).
func splitHost(h string) (name, port string) {
	if n, p, err := net.SplitHostPort(h); err == nil {
		return n, p
	}
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), ""
}

func joinHost(name, port string) string {
	if strings.Contains(name, ":") {
		return "[" + name + "]:" + port
	}
	return name + ":" + port
}

// misdirected answers a request for a host the console does not serve.
func misdirected(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusMisdirectedRequest)
	fmt.Fprintf(w, "421 Misdirected Request: this Sentinel console does not answer for host %q.\n"+
		"Open it as localhost or 127.0.0.1 on the port it listens on, or, if this name is yours, allow it with "+
		"the --allowed-host flag of sentinel serve (console.Options.AllowedHosts when you mount the handler).\n", r.Host)
}
