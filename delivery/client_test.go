package delivery

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// forbidden are addresses of every class the client refuses, literal or as a name's
// answer.
var forbidden = []string{
	"127.0.0.1", "127.1.2.3", "::1", // loopback
	"10.1.2.3", "172.16.0.1", "192.168.1.1", "fc00::1", "fd00:ec2::254", // private, ULA
	"169.254.169.254", "fe80::1", // link-local (cloud metadata)
	"224.0.0.1", "239.1.1.1", "ff02::1", "ff05::2", // multicast
	"0.0.0.0", "::", // unspecified
	"100.64.0.1", "100.127.255.254", // CGNAT
	"0.1.2.3", "192.0.0.8", "198.18.0.1", "240.0.0.1", "255.255.255.255", // reserved
	"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::ffff:7f00:1", "::ffff:a9fe:a9fe", // IPv4-mapped
	"::127.0.0.1", "::8.8.8.8", "::ffff:0:7f00:1", "::ffff:0:808:808", // IPv4-compatible, IPv4-translated
	"64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::1", "2002:7f00:1::1", // NAT64, 6to4
	"10.255.255.255", "172.31.255.254", "192.168.255.255", "fdff:ffff::1", // edges of private
	"169.254.0.1", "fe80::a9fe:a9fe", "ff0e::1", "100.100.100.200", // link-local, global multicast, CGNAT metadata (Alibaba)
}

// forbiddenLiterals are URLs whose host is a forbidden address written as only a URL can
// write it: other IPv4 notations, a trailing dot, an IPv6 zone.
var forbiddenLiterals = []string{
	"https://2130706433/", "https://0x7f000001/", "https://0X7F000001/", "https://0177.0.0.1/", "https://017700000001/",
	"https://127.1/", "https://0x7f.1/", "https://127.0.0.1./", "https://2852039166/", "https://0xa9fea9fe/",
	"https://[::ffff:127.0.0.1]/", "https://[::ffff:7f00:1]/", "https://[fe80::1%25eth0]/", "https://[0:0:0:0:0:ffff:a9fe:a9fe]/",
	"https://134744072/", // 8.8.8.8 written otherwise: refused all the same, as it reads differently elsewhere
}

var public = []string{"8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "64:ff9b::808:808", "::ffff:8.8.4.4"}

func TestForbiddenClass(t *testing.T) {
	for _, s := range forbidden {
		if ForbiddenClass(netip.MustParseAddr(s)) == "" {
			t.Errorf("%s is allowed", s)
		}
	}
	for _, s := range public {
		if class := ForbiddenClass(netip.MustParseAddr(s)); class != "" {
			t.Errorf("%s is refused as %s", s, class)
		}
	}
}

func TestCheckURL(t *testing.T) {
	c := NewClient(ClientOptions{})
	for _, s := range forbidden {
		host := s
		if strings.Contains(s, ":") {
			host = "[" + s + "]"
		}
		if _, err := c.CheckURL("https://" + host + "/hook"); !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("https://%s: %v, want ErrForbiddenAddress", host, err)
		}
	}
	for _, u := range forbiddenLiterals {
		if _, err := c.CheckURL(u); !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("%s: %v, want ErrForbiddenAddress", u, err)
		}
	}
	for _, u := range []string{"https://8.8.8.8/", "https://[2606:4700:4700::1111]/", "https://1e100.net/", "https://host-0x1.example.com/", "https://a.0x/"} {
		_, err := c.CheckURL(u)
		if u == "https://a.0x/" {
			if !errors.Is(err, ErrForbiddenAddress) {
				t.Errorf("%s: %v, want ErrForbiddenAddress (its last label is the number 0x)", u, err)
			}
		} else if err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	for _, u := range []string{"http://example.com/", "ftp://example.com/", "//example.com/", "https://user:pw@example.com/", "https:///x"} {
		if _, err := c.CheckURL(u); err == nil {
			t.Errorf("%s accepted", u)
		}
	}
	if _, err := c.CheckURL("https://example.com/hook"); err != nil {
		t.Errorf("https://example.com/hook: %v", err)
	}
	if _, err := NewClient(ClientOptions{AllowHTTP: true}).CheckURL("http://example.com/"); err != nil {
		t.Errorf("http with AllowHTTP: %v", err)
	}
}

// receiver is a test receiver on loopback that counts the requests it is sent.
func receiver(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// fakeDNS serves A and AAAA answers from names (a name without a trailing dot to an
// address) on a loopback UDP port, and returns a resolver that asks it only.
func fakeDNS(t *testing.T, names map[string]string) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var msg dnsmessage.Message
			if err := msg.Unpack(buf[:n]); err != nil || len(msg.Questions) != 1 {
				continue
			}
			q := msg.Questions[0]
			msg.Header.Response, msg.Header.Authoritative = true, true
			addr, ok := names[strings.TrimSuffix(q.Name.String(), ".")]
			if !ok {
				msg.Header.RCode = dnsmessage.RCodeNameError
			} else if ip := netip.MustParseAddr(addr); ip.Is4() && q.Type == dnsmessage.TypeA {
				msg.Answers = []dnsmessage.Resource{{
					Header: dnsmessage.ResourceHeader{Name: q.Name, Type: q.Type, Class: q.Class, TTL: 0},
					Body:   &dnsmessage.AResource{A: ip.As4()},
				}}
			} else if ip.Is6() && q.Type == dnsmessage.TypeAAAA {
				msg.Answers = []dnsmessage.Resource{{
					Header: dnsmessage.ResourceHeader{Name: q.Name, Type: q.Type, Class: q.Class, TTL: 0},
					Body:   &dnsmessage.AAAAResource{AAAA: ip.As16()},
				}}
			}
			out, err := msg.Pack()
			if err != nil {
				continue
			}
			_, _ = pc.WriteTo(out, from)
		}
	}()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", pc.LocalAddr().String())
	}}
}

func TestPostRefusesNamesResolvingToForbiddenAddresses(t *testing.T) {
	srv, hits := receiver(t, func(w http.ResponseWriter, _ *http.Request) {})
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	names := map[string]string{}
	for i, s := range forbidden {
		names["host"+strconv.Itoa(i)+".hooks.test"] = s
	}
	resolver := fakeDNS(t, names)
	c := NewClient(ClientOptions{AllowHTTP: true, Resolver: resolver, DialTimeout: time.Second})
	ctx := context.Background()
	for name, addr := range names {
		_, err := c.Post(ctx, "http://"+name+":"+strconv.Itoa(port)+"/hook", nil, []byte("{}"))
		if !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("%s (%s): %v, want ErrForbiddenAddress", name, addr, err)
		}
	}
	// localhost comes from the hosts file, not DNS: the same check refuses it.
	if _, err := c.Post(ctx, srv.URL+"/", nil, nil); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("%s: %v, want ErrForbiddenAddress", srv.URL, err)
	}
	if _, err := NewClient(ClientOptions{AllowHTTP: true}).Post(ctx, "http://localhost:"+strconv.Itoa(port)+"/", nil, nil); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("localhost: %v, want ErrForbiddenAddress", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the receiver on loopback was reached %d times", n)
	}

	// The same name reaches the receiver once its network is allowed: the refusals above
	// are the guard's, not a resolver that fails.
	allowed := NewClient(ClientOptions{AllowHTTP: true, Resolver: resolver, Allow: loopback})
	var loopName string
	for name, addr := range names {
		if addr == "127.0.0.1" {
			loopName = name
		}
	}
	resp, err := allowed.Post(ctx, "http://"+loopName+":"+strconv.Itoa(port)+"/hook", nil, []byte("{}"))
	if err != nil || resp.StatusCode != http.StatusOK || hits.Load() != 1 {
		t.Fatalf("allowed loopback: status %d, err %v, hits %d", resp.StatusCode, err, hits.Load())
	}
}

func TestPostFollowsNoRedirect(t *testing.T) {
	target, targetHits := receiver(t, func(w http.ResponseWriter, _ *http.Request) {})
	srv, _ := receiver(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/elsewhere", http.StatusTemporaryRedirect)
	})
	c := NewClient(ClientOptions{AllowHTTP: true, Allow: loopback})
	resp, err := c.Post(context.Background(), srv.URL+"/hook", nil, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTemporaryRedirect {
		t.Errorf("status %d, want the receiver's 307", resp.StatusCode)
	}
	if n := targetHits.Load(); n != 0 {
		t.Errorf("the redirect was followed (%d requests to its target)", n)
	}
}

func TestPostRefusesHTTPByDefault(t *testing.T) {
	srv, hits := receiver(t, func(w http.ResponseWriter, _ *http.Request) {})
	c := NewClient(ClientOptions{Allow: loopback})
	if _, err := c.Post(context.Background(), srv.URL+"/hook", nil, []byte("{}")); !errors.Is(err, ErrSchemeNotAllowed) {
		t.Fatalf("http: %v, want ErrSchemeNotAllowed", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the receiver was reached %d times", n)
	}
}

func TestPostKeepsAPreviewAndSendsHeaders(t *testing.T) {
	long := strings.Repeat("é", MaxPreview) // two bytes each: twice the preview
	var gotSig, gotBody string
	srv, _ := receiver(t, func(w http.ResponseWriter, r *http.Request) {
		gotSig = r.Header.Get(HeaderSignature)
		b := make([]byte, 64)
		n, _ := r.Body.Read(b)
		gotBody = string(b[:n])
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(long))
	})
	c := NewClient(ClientOptions{AllowHTTP: true, Allow: loopback})
	h := http.Header{HeaderSignature: {"v1,abc"}, "Content-Type": {"application/json"}}
	resp, err := c.Post(context.Background(), srv.URL+"/hook", h, []byte(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", resp.StatusCode)
	}
	if len(resp.Preview) != MaxPreview || string(resp.Preview) != long[:MaxPreview] {
		t.Errorf("preview of %d bytes, want the first %d", len(resp.Preview), MaxPreview)
	}
	if gotSig != "v1,abc" || gotBody != `{"a":1}` {
		t.Errorf("receiver got signature %q body %q", gotSig, gotBody)
	}
}

func TestPostTimesOut(t *testing.T) {
	release := make(chan struct{})
	srv, _ := receiver(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	c := NewClient(ClientOptions{AllowHTTP: true, Allow: loopback, Timeout: 200 * time.Millisecond})
	start := time.Now()
	_, err := c.Post(context.Background(), srv.URL+"/hook", nil, []byte("{}"))
	if err == nil {
		t.Fatal("a receiver that never answers did not time out")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timed out after %v, want about 200ms", d)
	}
}
