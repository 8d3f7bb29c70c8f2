package notify_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/modelgateway/caddy-modelgateway/notify"
)

// smtpFake is a real SMTP server (go-smtp) that records what it is sent.
type smtpFake struct {
	host string
	port int
	// mechanisms are the AUTH mechanisms offered; none turns AUTH off.
	mechanisms []string
	// refuseRcpt is refused at RCPT TO with 550.
	refuseRcpt string

	mu       sync.Mutex
	messages []smtpMessage
}

// smtpMessage is one session's record.
type smtpMessage struct {
	mechanism, username, password string
	tls                           bool
	from                          string
	to                            []string
	data                          []byte
}

const (
	smtpUser     = "mailer"
	smtpPassword = "s3cret-pw"
)

// testCert returns a self-signed certificate for 127.0.0.1 and localhost, and a pool
// that trusts it.
func testCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test smtp"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// startSMTP starts f on a loopback port: with STARTTLS offered when starttls, with TLS
// from the start when implicitTLS.
func startSMTP(t *testing.T, f *smtpFake, cert *tls.Certificate, starttls, implicitTLS bool) {
	t.Helper()
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return &smtpSession{fake: f, conn: c}, nil
	}))
	srv.Domain = "localhost"
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	var l net.Listener
	var err error
	if implicitTLS {
		l, err = tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*cert}})
	} else {
		l, err = net.Listen("tcp", "127.0.0.1:0")
		if starttls {
			srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}}
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	f.host = "127.0.0.1"
	f.port = l.Addr().(*net.TCPAddr).Port
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// only returns the one message the fake received.
func (f *smtpFake) only(t *testing.T) smtpMessage {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.messages) != 1 {
		t.Fatalf("the SMTP server received %d messages, want 1", len(f.messages))
	}
	return f.messages[0]
}

func (f *smtpFake) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.messages)
}

type smtpSession struct {
	fake *smtpFake
	conn *smtp.Conn
	msg  smtpMessage
}

func (s *smtpSession) AuthMechanisms() []string { return s.fake.mechanisms }

func (s *smtpSession) Auth(mech string) (sasl.Server, error) {
	check := func(user, pass string) error {
		s.msg.mechanism, s.msg.username, s.msg.password = mech, user, pass
		if user != smtpUser || pass != smtpPassword {
			return smtp.ErrAuthFailed
		}
		return nil
	}
	switch mech {
	case sasl.Plain:
		return sasl.NewPlainServer(func(identity, user, pass string) error { return check(user, pass) }), nil
	case sasl.Login:
		return &loginServer{check: check}, nil
	}
	return nil, smtp.ErrAuthUnsupported
}

func (s *smtpSession) Mail(from string, _ *smtp.MailOptions) error {
	if len(s.fake.mechanisms) > 0 && s.msg.username == "" {
		return smtp.ErrAuthRequired
	}
	_, s.msg.tls = s.conn.TLSConnectionState()
	s.msg.from = from
	return nil
}

func (s *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	if to == s.fake.refuseRcpt {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "<" + to + ">: Recipient address rejected: User unknown"}
	}
	s.msg.to = append(s.msg.to, to)
	return nil
}

func (s *smtpSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.msg.data = data
	s.fake.mu.Lock()
	s.fake.messages = append(s.fake.messages, s.msg)
	s.fake.mu.Unlock()
	return nil
}

func (s *smtpSession) Reset()        {}
func (s *smtpSession) Logout() error { return nil }

// loginServer is the server side of the LOGIN mechanism, which go-sasl does not have.
type loginServer struct {
	check    func(user, pass string) error
	step     int
	username string
}

func (l *loginServer) Next(response []byte) ([]byte, bool, error) {
	l.step++
	switch l.step {
	case 1:
		return []byte("Username:"), false, nil
	case 2:
		l.username = string(response)
		return []byte("Password:"), false, nil
	}
	return nil, true, l.check(l.username, string(response))
}

// emailNotification has a subject that needs encoding and text that would be markup.
func emailNotification() notify.Notification {
	n := sample()
	n.Title = "Solde bas — 4,20 € <b>now</b>"
	n.Text = "First line <script>alert(1)</script>\nSecond & last line"
	return n
}

func TestEmailThroughSTARTTLSWithPlainAuth(t *testing.T) {
	cert, roots := testCert(t)
	f := &smtpFake{mechanisms: []string{sasl.Plain, sasl.Login}}
	startSMTP(t, f, &cert, true, false)
	kind, err := notify.NewEmail(notify.SMTPConfig{
		Host: f.host, Port: f.port, Username: smtpUser, Password: smtpPassword,
		From: "Model Gateway <noreply@gateway.example.com>", TLS: &tls.Config{RootCAs: roots},
	})
	if err != nil {
		t.Fatal(err)
	}
	target := checked(t, kind, `{"to": ["ann@example.com", "bob@example.org"]}`)
	n := emailNotification()
	status, err := kind.Send(context.Background(), notify.Env{}, target, n)
	if err != nil || status != 250 {
		t.Fatalf("Send = %d, %v", status, err)
	}
	got := f.only(t)
	if got.mechanism != sasl.Plain || got.username != smtpUser || got.password != smtpPassword {
		t.Errorf("AUTH = %s %s/%s, want PLAIN with the configured credentials", got.mechanism, got.username, got.password)
	}
	if !got.tls {
		t.Error("the message was sent before STARTTLS")
	}
	if got.from != "noreply@gateway.example.com" || strings.Join(got.to, ",") != "ann@example.com,bob@example.org" {
		t.Errorf("envelope = from %q to %q", got.from, got.to)
	}
	assertMessage(t, got.data, n)
}

// assertMessage reads data as a mail client would and checks its headers and both parts.
func assertMessage(t *testing.T, data []byte, n notify.Notification) {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("the message does not parse: %v\n%s", err, data)
	}
	var dec mime.WordDecoder
	subject, err := dec.DecodeHeader(msg.Header.Get("Subject"))
	if err != nil || subject != n.Title {
		t.Errorf("Subject = %q (%v), want %q", subject, err, n.Title)
	}
	from, err := msg.Header.AddressList("From")
	if err != nil || len(from) != 1 || from[0].Name != "Model Gateway" || from[0].Address != "noreply@gateway.example.com" {
		t.Errorf("From = %v (%v)", from, err)
	}
	to, err := msg.Header.AddressList("To")
	if err != nil || len(to) != 2 || to[0].Address != "ann@example.com" || to[1].Address != "bob@example.org" {
		t.Errorf("To = %v (%v)", to, err)
	}
	if date, err := msg.Header.Date(); err != nil || !date.Equal(n.OccurredAt) {
		t.Errorf("Date = %v (%v)", date, err)
	}
	if id := msg.Header.Get("Message-ID"); !strings.HasPrefix(id, "<"+n.ID+"@") {
		t.Errorf("Message-ID = %q, want the notification's id", id)
	}
	if msg.Header.Get("Auto-Submitted") != "auto-generated" {
		t.Errorf("Auto-Submitted = %q", msg.Header.Get("Auto-Submitted"))
	}
	mediaType, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mediaType != "multipart/alternative" {
		t.Fatalf("Content-Type = %q (%v)", msg.Header.Get("Content-Type"), err)
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	var parts []string
	var bodies []string
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(p) // quoted-printable decoded by the reader
		if err != nil {
			t.Fatal(err)
		}
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		parts = append(parts, ct)
		bodies = append(bodies, string(b))
	}
	if strings.Join(parts, ",") != "text/plain,text/html" {
		t.Fatalf("parts = %v, want text/plain then text/html", parts)
	}
	text, html := bodies[0], bodies[1]
	for _, want := range []string{n.Title, "First line <script>alert(1)</script>", "Balance: 4.20 USD", "Threshold: 5.00 USD", n.URL, "ws_123"} {
		if !strings.Contains(text, want) {
			t.Errorf("the text part lacks %q:\n%s", want, text)
		}
	}
	for _, want := range []string{"Solde bas — 4,20 € &lt;b&gt;now&lt;/b&gt;", "First line &lt;script&gt;alert(1)&lt;/script&gt;", "Second &amp; last line",
		"<td", "4.20 USD", `href="https://gateway.example.com/credits"`} {
		if !strings.Contains(html, want) {
			t.Errorf("the HTML part lacks %q:\n%s", want, html)
		}
	}
	if strings.Contains(html, "<script>") || strings.Contains(html, "<b>now") {
		t.Errorf("the HTML part lets the notification's text through as markup:\n%s", html)
	}
	for line := range strings.SplitSeq(string(data), "\r\n") {
		if len(line) > 998 {
			t.Errorf("a line of %d octets, past SMTP's limit", len(line))
		}
	}
}

func TestEmailThroughTLSWithLoginAuth(t *testing.T) {
	cert, roots := testCert(t)
	// A server that offers LOGIN alone, as Microsoft 365 does.
	f := &smtpFake{mechanisms: []string{sasl.Login}}
	startSMTP(t, f, &cert, false, true)
	kind, err := notify.NewEmail(notify.SMTPConfig{
		Host: f.host, Port: f.port, Security: notify.SecurityTLS, Username: smtpUser, Password: smtpPassword,
		From: "noreply@gateway.example.com", TLS: &tls.Config{RootCAs: roots},
	})
	if err != nil {
		t.Fatal(err)
	}
	status, err := kind.Send(context.Background(), notify.Env{}, checked(t, kind, `{"to": ["ann@example.com"]}`), emailNotification())
	if err != nil || status != 250 {
		t.Fatalf("Send = %d, %v", status, err)
	}
	got := f.only(t)
	if got.mechanism != sasl.Login || got.username != smtpUser || got.password != smtpPassword || !got.tls {
		t.Errorf("session = %s %s/%s tls=%v, want LOGIN over TLS", got.mechanism, got.username, got.password, got.tls)
	}
}

func TestEmailWithoutSecurityToALocalRelay(t *testing.T) {
	f := &smtpFake{}
	startSMTP(t, f, nil, false, false)
	kind, err := notify.NewEmail(notify.SMTPConfig{Host: f.host, Port: f.port, Security: notify.SecurityNone, From: "noreply@gateway.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	status, err := kind.Send(context.Background(), notify.Env{}, checked(t, kind, `{"to": ["ann@example.com"]}`), emailNotification())
	if err != nil || status != 250 {
		t.Fatalf("Send = %d, %v", status, err)
	}
	if got := f.only(t); got.tls || got.mechanism != "" {
		t.Errorf("session = %+v, want plain text and no AUTH", got)
	}
}

func TestEmailRefusesToSendInTheClearWhenSTARTTLSIsMissing(t *testing.T) {
	f := &smtpFake{mechanisms: []string{sasl.Plain}}
	startSMTP(t, f, nil, false, false)
	kind, err := notify.NewEmail(notify.SMTPConfig{Host: f.host, Port: f.port, Username: smtpUser, Password: smtpPassword, From: "noreply@gateway.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = kind.Send(context.Background(), notify.Env{}, checked(t, kind, `{"to": ["ann@example.com"]}`), emailNotification())
	if err == nil || !strings.Contains(err.Error(), "STARTTLS") {
		t.Fatalf("Send = %v, want a refusal naming STARTTLS", err)
	}
	if f.count() != 0 {
		t.Error("a message was delivered without TLS")
	}
}

func TestEmailServerRefusals(t *testing.T) {
	cert, roots := testCert(t)
	f := &smtpFake{mechanisms: []string{sasl.Plain}, refuseRcpt: "gone@example.org"}
	startSMTP(t, f, &cert, true, false)
	config := notify.SMTPConfig{Host: f.host, Port: f.port, Username: smtpUser, Password: smtpPassword,
		From: "noreply@gateway.example.com", TLS: &tls.Config{RootCAs: roots}}
	kind, err := notify.NewEmail(config)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kind.Send(context.Background(), notify.Env{}, checked(t, kind, `{"to": ["ann@example.com", "gone@example.org"]}`), emailNotification())
	var se *notify.SendError
	if !errors.As(err, &se) || se.Status != 550 {
		t.Fatalf("Send = %v, want a *SendError 550", err)
	}
	if strings.Contains(se.Message, "gone@example.org") || !strings.Contains(se.Message, "g***@example.org") {
		t.Errorf("message %q: want the refused address masked", se.Message)
	}

	config.Password = "wrong"
	wrong, err := notify.NewEmail(config)
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.Send(context.Background(), notify.Env{}, checked(t, wrong, `{"to": ["ann@example.com"]}`), emailNotification())
	if !errors.As(err, &se) || se.Status != 535 {
		t.Fatalf("Send with a wrong password = %v, want a *SendError 535", err)
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Errorf("the error quotes the password: %v", err)
	}
	if f.count() != 0 {
		t.Errorf("%d messages delivered, want none", f.count())
	}
}

func TestEmailUntrustedCertificate(t *testing.T) {
	cert, _ := testCert(t)
	f := &smtpFake{}
	startSMTP(t, f, &cert, true, false)
	kind, err := notify.NewEmail(notify.SMTPConfig{Host: f.host, Port: f.port, From: "noreply@gateway.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = kind.Send(context.Background(), notify.Env{}, checked(t, kind, `{"to": ["ann@example.com"]}`), emailNotification())
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("Send = %v, want the certificate refused", err)
	}
	if f.count() != 0 {
		t.Error("a message was delivered to an untrusted server")
	}
}

// silentSMTP listens on a loopback port, accepts connections and never greets; each
// connection is handed over on the channel.
func silentSMTP(t *testing.T) (int, <-chan net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- c
		}
	}()
	return l.Addr().(*net.TCPAddr).Port, accepted
}

func TestEmailCancelled(t *testing.T) {
	// Only the cancel ends the wait: the timeout is an hour.
	port, accepted := silentSMTP(t)
	kind, err := notify.NewEmail(notify.SMTPConfig{Host: "127.0.0.1", Port: port, Security: notify.SecurityNone,
		From: "noreply@gateway.example.com", Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	target := checked(t, kind, `{"to": ["ann@example.com"]}`)
	done := make(chan error, 1)
	go func() {
		_, err := kind.Send(ctx, notify.Env{}, target, emailNotification())
		done <- err
	}()
	conn := <-accepted
	defer func() { _ = conn.Close() }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Send = %v, want context.Canceled", err)
	}
}

func TestEmailTimeout(t *testing.T) {
	port, accepted := silentSMTP(t)
	kind, err := notify.NewEmail(notify.SMTPConfig{Host: "127.0.0.1", Port: port, Security: notify.SecurityNone,
		From: "noreply@gateway.example.com", Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = kind.Send(context.Background(), notify.Env{}, checked(t, kind, `{"to": ["ann@example.com"]}`), emailNotification())
	if conn := <-accepted; conn != nil {
		_ = conn.Close()
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send to a server that never answers = %v, want context.DeadlineExceeded", err)
	}
}

func TestNewEmailRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  notify.SMTPConfig
		says string
	}{
		{"no host", notify.SMTPConfig{From: "a@example.com"}, "host"},
		{"no from", notify.SMTPConfig{Host: "smtp.example.com"}, "from"},
		{"bad from", notify.SMTPConfig{Host: "smtp.example.com", From: "not an address"}, "from"},
		{"bad security", notify.SMTPConfig{Host: "smtp.example.com", From: "a@example.com", Security: "ssl"}, "security"},
		{"bad port", notify.SMTPConfig{Host: "smtp.example.com", From: "a@example.com", Port: 70000}, "port"},
		{"password alone", notify.SMTPConfig{Host: "smtp.example.com", From: "a@example.com", Password: "pw"}, "username"},
		{"credentials in the clear", notify.SMTPConfig{Host: "smtp.example.com", From: "a@example.com", Security: "none", Username: "u", Password: "pw"}, "TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := notify.NewEmail(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("NewEmail = %v, want an error about %s", err, tc.says)
			}
			if err != nil && strings.Contains(err.Error(), "pw") {
				t.Errorf("the error quotes the password: %v", err)
			}
		})
	}
	if _, err := notify.NewEmail(notify.SMTPConfig{Host: "127.0.0.1", Port: 2525, Security: "none", Username: "u", Password: "pw", From: "a@example.com"}); err != nil {
		t.Errorf("credentials to a loopback relay: %v", err)
	}
}
