package delivery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// MaxPreview is the most bytes of a receiver's answer kept for the delivery's record.
const MaxPreview = 1024

// drainLimit is the most of an answer read past the preview, so that the connection can be
// reused; a receiver that answers more gets its connection closed instead.
const drainLimit = 64 << 10

// Default timeouts. The standard asks receivers to answer within 15 to 30 s; a sender waits
// the lower bound, so that a slow receiver holds a sender as little as the standard lets it.
const (
	DefaultTimeout     = 15 * time.Second
	DefaultDialTimeout = 5 * time.Second
)

// ErrForbiddenAddress is the error of a call to an address the gateway must not reach on
// a user's behalf (loopback, private, link-local...), matched with errors.Is.
var ErrForbiddenAddress = errors.New("address not allowed")

// ErrSchemeNotAllowed refuses a URL that is not https (or http when allowed).
var ErrSchemeNotAllowed = errors.New("url scheme not allowed")

// ClientOptions configure NewClient. The zero value is the safe default: https only, no
// forbidden address, the default timeouts.
type ClientOptions struct {
	// AllowHTTP lets plain-http URLs through (local development and tests).
	AllowHTTP bool
	// Allow lists networks that are reached even though they are forbidden otherwise: an
	// operator's own receivers on an internal network.
	Allow []netip.Prefix
	// Timeout bounds a whole call, answer included; DefaultTimeout when zero.
	Timeout time.Duration
	// DialTimeout bounds the connection; DefaultDialTimeout when zero.
	DialTimeout time.Duration
	// Resolver resolves host names; net.DefaultResolver when nil.
	Resolver *net.Resolver
}

// Client calls users' URLs (webhook receivers): every address it connects to is checked
// as dialled, after name resolution, so that a name which resolves to a forbidden address,
// now or on a later lookup (DNS rebinding), is refused all the same. It follows no
// redirect, and goes through no proxy (a proxy would make the checked address the proxy's).
type Client struct {
	// HTTP is the client underneath, for callers that build their own requests; it keeps
	// every guard but the scheme check, which CheckURL and Post make.
	HTTP      *http.Client
	allowHTTP bool
	allow     []netip.Prefix
}

// NewClient returns a client with options o.
func NewClient(o ClientOptions) *Client {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	c := &Client{allowHTTP: o.AllowHTTP, allow: o.Allow}
	dialer := &net.Dialer{
		Timeout:  o.DialTimeout,
		Resolver: o.Resolver,
		Control: func(network, address string, _ syscall.RawConn) error {
			return c.checkDialled(address)
		},
	}
	transport := &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    o.DialTimeout,
		ResponseHeaderTimeout:  o.Timeout,
		MaxResponseHeaderBytes: 64 << 10,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
	}
	c.HTTP = &http.Client{
		Transport: transport,
		Timeout:   o.Timeout,
		// A receiver's 3xx is its answer (a failure to the sender), never a way to make the
		// gateway call elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c
}

// checkDialled checks the address a connection is about to be made to, "ip:port".
func (c *Client) checkDialled(address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dialling %q: %w", address, ErrForbiddenAddress)
	}
	return c.CheckAddr(ap.Addr())
}

// CheckAddr returns ErrForbiddenAddress (wrapped, naming the class) for an address the
// client refuses: loopback, private (RFC 1918, IPv6 ULA), link-local (cloud metadata
// services live there), multicast, unspecified, CGNAT, other reserved ranges, and any of
// those written as IPv4-mapped or NAT64 IPv6; unless a network of Allow holds it.
func (c *Client) CheckAddr(ip netip.Addr) error {
	for _, p := range c.allow {
		if p.Contains(ip) || p.Contains(ip.Unmap()) {
			return nil
		}
	}
	if class := ForbiddenClass(ip); class != "" {
		return fmt.Errorf("%s address %s: %w", class, ip, ErrForbiddenAddress)
	}
	return nil
}

// Forbidden ranges that the netip predicates do not name.
var (
	cgnat     = netip.MustParsePrefix("100.64.0.0/10")
	thisNet   = netip.MustParsePrefix("0.0.0.0/8")
	ietfProto = netip.MustParsePrefix("192.0.0.0/24")
	benchmark = netip.MustParsePrefix("198.18.0.0/15")
	reserved4 = netip.MustParsePrefix("240.0.0.0/4") // includes 255.255.255.255
	// IPv4-compatible (::a.b.c.d, deprecated) and IPv4-translated (::ffff:0:a.b.c.d) forms:
	// a host with an automatic tunnel or a translator reaches the address they carry.
	v4Compat  = netip.MustParsePrefix("::/96")
	v4Transl  = netip.MustParsePrefix("::ffff:0:0:0/96")
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	nat64Loc  = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// ForbiddenClass names the class of a forbidden address, or returns "" for one the gateway
// may call.
func ForbiddenClass(ip netip.Addr) string {
	ip = ip.WithZone("")
	if ip.Is4In6() {
		ip = ip.Unmap()
	}
	// IPv6 forms that carry an IPv4 address reach it: judge the address they carry.
	if ip.Is6() {
		b := ip.As16()
		switch {
		case nat64.Contains(ip):
			return ForbiddenClass(netip.AddrFrom4([4]byte(b[12:16])))
		case nat64Loc.Contains(ip):
			// RFC 6052 local-use prefix: whatever it embeds, it is a translator the
			// operator runs, so inside their network.
			return "nat64 local"
		case sixToFour.Contains(ip):
			return ForbiddenClass(netip.AddrFrom4([4]byte(b[2:6])))
		case (v4Compat.Contains(ip) || v4Transl.Contains(ip)) && !ip.IsUnspecified() && !ip.IsLoopback():
			return "ipv4-compatible"
		}
	}
	switch {
	case !ip.IsValid():
		return "invalid"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	case cgnat.Contains(ip):
		return "cgnat"
	case thisNet.Contains(ip), ietfProto.Contains(ip), benchmark.Contains(ip), reserved4.Contains(ip):
		return "reserved"
	}
	return ""
}

// CheckURL checks a URL before it is stored or called: absolute, https (or http when
// allowed), no user information, and a host that is not a forbidden address literal. A
// host name is checked when dialled, for what it resolves to then.
func (c *Client) CheckURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("url does not parse: %w", err)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && c.allowHTTP:
	default:
		return nil, fmt.Errorf("%q: %w (https only)", u.Scheme, ErrSchemeNotAllowed)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, errors.New("url has no host")
	}
	if u.User != nil {
		return nil, errors.New("url must not carry credentials")
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
		if err := c.CheckAddr(ip); err != nil {
			return nil, err
		}
	} else if numericHost(u.Hostname()) {
		return nil, fmt.Errorf("host %q is an IPv4 address in a form other than a.b.c.d: %w", u.Hostname(), ErrForbiddenAddress)
	}
	return u, nil
}

// numericHost tells whether other URL parsers (browsers, curl, the WHATWG URL standard)
// read host as an IPv4 address: its last label is a number, decimal or 0x hex. Such a host
// that is not a plain a.b.c.d (2130706433, 0x7f000001, 0177.0.0.1, 127.1, 127.0.0.1.) is
// refused: what the gateway would make of it is not what a reader of the URL sees.
func numericHost(host string) bool {
	host = strings.TrimSuffix(host, ".")
	last := host[strings.LastIndexByte(host, '.')+1:]
	digits := "0123456789"
	if hex, ok := strings.CutPrefix(strings.ToLower(last), "0x"); ok {
		last, digits = hex, "0123456789abcdef"
		if last == "" {
			return true
		}
	}
	return last != "" && strings.Trim(last, digits) == ""
}

// Response is what a receiver answered, as a delivery records it.
type Response struct {
	// StatusCode is the receiver's HTTP status.
	StatusCode int
	// Preview is the start of its body, at most MaxPreview bytes.
	Preview []byte
	// Header is the answer's header (a sender reads Retry-After from it).
	Header http.Header
}

// Post sends body to rawURL with header h (the signed headers and the content type) and
// returns what the receiver answered, whatever its status: telling success from failure
// is the sender's. An error means no answer came (refused address or scheme, network,
// timeout).
func (c *Client) Post(ctx context.Context, rawURL string, h http.Header, body []byte) (Response, error) {
	u, err := c.CheckURL(rawURL)
	if err != nil {
		return Response{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return Response{}, fmt.Errorf("building request: %w", err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	preview, err := io.ReadAll(io.LimitReader(resp.Body, MaxPreview))
	if err != nil {
		return Response{StatusCode: resp.StatusCode, Header: resp.Header}, fmt.Errorf("reading answer: %w", err)
	}
	// Read a little more so the connection can be reused; what is past it is not wanted.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	return Response{StatusCode: resp.StatusCode, Preview: preview, Header: resp.Header}, nil
}
