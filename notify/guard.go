package notify

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// Guard keeps webhooks from becoming a server-side request forgery: outside
// dev mode an endpoint must be https, and a target resolving to a loopback,
// link-local, private, unspecified, multicast or shared (CGNAT) address is
// refused unless Allow names it. The check is made on the addresses the
// name resolves to at dial time (DialContext), not only on the URL, so a
// name that later resolves elsewhere (DNS rebinding) is still caught.
type Guard struct {
	// DevMode accepts http:// and loopback targets (flow dev).
	DevMode bool
	// Allow lists the internal targets accepted: CIDR prefixes or
	// addresses (10.0.0.0/8, 192.168.1.5) and host names (alerts.internal,
	// whose resolved addresses are then not checked).
	Allow []string
}

// ParseAllow reads FLOW_NOTIFY_ALLOW_TARGETS: comma-separated CIDR
// prefixes, addresses or host names.
func ParseAllow(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		if strings.Contains(f, "/") {
			if _, err := netip.ParsePrefix(f); err != nil {
				return nil, fmt.Errorf("%q is not a CIDR prefix: %v", f, err)
			}
		} else if strings.ContainsAny(f, " :@") && net.ParseIP(f) == nil {
			return nil, fmt.Errorf("%q is neither an address, a prefix nor a host name", f)
		}
		out = append(out, f)
	}
	return out, nil
}

var sharedSpace = netip.MustParsePrefix("100.64.0.0/10")

// internal reports whether a is an address no public webhook has.
func internal(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsPrivate() ||
		a.IsUnspecified() || a.IsMulticast() || a.IsInterfaceLocalMulticast() || sharedSpace.Contains(a)
}

// allowedHost reports whether host (a name) is on the allow-list.
func (g Guard) allowedHost(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, a := range g.Allow {
		if a == host {
			return true
		}
	}
	return false
}

// allowedAddr reports whether a, an internal address, may be dialled.
func (g Guard) allowedAddr(a netip.Addr) bool {
	a = a.Unmap()
	if g.DevMode && a.IsLoopback() {
		return true
	}
	for _, s := range g.Allow {
		if p, err := netip.ParsePrefix(s); err == nil && p.Contains(a) {
			return true
		}
		if b, err := netip.ParseAddr(s); err == nil && b.Unmap() == a {
			return true
		}
	}
	return false
}

// CheckURL validates a subscription's URL as create does: absolute
// http(s) with a host and no user information; https outside dev mode;
// a literal internal address only when allowed. Its error is a
// *FieldError on field.
func (g Guard) CheckURL(field, raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || raw == "" {
		return nil, invalid(field, "not a URL: %q", raw)
	}
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, invalid(field, "want an https:// URL, not %q", raw)
	case u.Scheme == "http" && !g.DevMode:
		return nil, invalid(field, "must be https (http:// is accepted only in dev mode)")
	case u.Host == "" || u.Hostname() == "":
		return nil, invalid(field, "has no host: %q", raw)
	case u.User != nil:
		return nil, invalid(field, "must not carry user information (it would be stored in clear); authenticate the receiver by the signature")
	case u.Fragment != "":
		return nil, invalid(field, "must not have a fragment")
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil && internal(a) && !g.allowedAddr(a) {
		return nil, invalid(field, "%s is an internal address (loopback, link-local or private): name it in FLOW_NOTIFY_ALLOW_TARGETS to allow it", a)
	}
	return u, nil
}

// DialContext dials addr after resolving it and refusing internal
// addresses the guard does not allow (ErrRefused).
func (g Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	if g.allowedHost(host) {
		return d.DialContext(ctx, network, addr)
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for _, ip := range ips {
		if internal(ip) && !g.allowedAddr(ip) {
			lastErr = fmt.Errorf("%w: %s resolves to %s, an internal address (name it in FLOW_NOTIFY_ALLOW_TARGETS to allow it)", ErrRefused, host, ip)
			continue
		}
		c, err := d.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("%s resolves to no address", host)
	}
	return nil, lastErr
}
