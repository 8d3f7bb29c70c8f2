package notify

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SMTP security modes.
const (
	// SecuritySTARTTLS connects in plain text and upgrades with STARTTLS before anything
	// else; a server that does not offer it is refused, never used in the clear.
	SecuritySTARTTLS = "starttls"
	// SecurityTLS connects with TLS from the start (SMTPS, port 465).
	SecurityTLS = "tls"
	// SecurityNone never encrypts: a relay on the gateway's own host or network.
	SecurityNone = "none"
)

// DefaultSMTPTimeout bounds one email's delivery, connection to QUIT, when SMTPConfig
// sets none.
const DefaultSMTPTimeout = 30 * time.Second

// MaxRecipients is the most addresses an email destination has.
const MaxRecipients = 10

// SMTPConfig is the operator's SMTP server, through which email destinations send.
type SMTPConfig struct {
	// Host is the server's name, which its TLS certificate must hold. Required.
	Host string
	// Port defaults by Security: 587 for starttls, 465 for tls, 25 for none.
	Port int
	// Security is SecuritySTARTTLS (the default), SecurityTLS or SecurityNone.
	Security string
	// Username and Password authenticate (PLAIN, or LOGIN where the server offers only
	// that); no authentication when Username is empty. They are sent over TLS only, or to
	// a server on the loopback interface.
	Username, Password string
	// From is the sender, an address with an optional name ("Gateway
	// <noreply@example.com>"). Required.
	From string
	// LocalName is the name the gateway gives in EHLO. Default: localhost.
	LocalName string
	// Timeout bounds one delivery. Default: DefaultSMTPTimeout.
	Timeout time.Duration
	// TLS is the TLS configuration (its ServerName is set to Host when empty). Default:
	// the system's roots, for Host.
	TLS *tls.Config
}

// Email sends each notification as a multipart/alternative message (plain text and HTML)
// through the operator's SMTP server, to the 1 to MaxRecipients addresses of its target
// ({"to": ["a@example.com", ...]}).
//
// The server is the operator's configuration, not an address a user gave, so it is
// dialled directly rather than through the SSRF-guarded client, which would refuse a
// relay on the gateway's own network, where mail relays usually are.
type Email struct {
	cfg  SMTPConfig
	from *mail.Address
}

// Retryable: an SMTP 4xx reply is a transient refusal (mailbox busy, greylisting), worth
// trying again; a 5xx is permanent.
func (*Email) Retryable(status int) bool { return status >= 400 && status < 500 }

var _ RetryPolicy = (*Email)(nil)

// NewEmail checks cfg and returns the email kind.
func NewEmail(cfg SMTPConfig) (*Email, error) {
	cfg.Host = strings.TrimSpace(cfg.Host)
	if cfg.Host == "" {
		return nil, errors.New("host is required")
	}
	if cfg.Security == "" {
		cfg.Security = SecuritySTARTTLS
	}
	defaultPort := map[string]int{SecuritySTARTTLS: 587, SecurityTLS: 465, SecurityNone: 25}[cfg.Security]
	if defaultPort == 0 {
		return nil, fmt.Errorf("security %q: want %s, %s or %s", cfg.Security, SecuritySTARTTLS, SecurityTLS, SecurityNone)
	}
	if cfg.Port == 0 {
		cfg.Port = defaultPort
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("port %d is not a TCP port", cfg.Port)
	}
	if cfg.Username == "" && cfg.Password != "" {
		return nil, errors.New("a password needs a username")
	}
	if cfg.Username != "" && cfg.Security == SecurityNone && !isLoopbackHost(cfg.Host) {
		// net/smtp would refuse at the first email; say it when the configuration loads.
		return nil, errors.New("username and password are sent only over TLS: set security to starttls or tls, or use a relay on the loopback interface")
	}
	from, err := mail.ParseAddress(cfg.From)
	if err != nil {
		return nil, errors.New("from is required: an address with an optional name (Gateway <noreply@example.com>)")
	}
	if cfg.LocalName == "" {
		cfg.LocalName = "localhost"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultSMTPTimeout
	}
	if cfg.TLS == nil {
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	} else {
		cfg.TLS = cfg.TLS.Clone()
	}
	if cfg.TLS.ServerName == "" {
		cfg.TLS.ServerName = cfg.Host
	}
	return &Email{cfg: cfg, from: from}, nil
}

// isLoopbackHost tells whether host is the loopback interface, where net/smtp lets
// credentials go in the clear.
func isLoopbackHost(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}

type emailTarget struct {
	To []string `json:"to"`
}

// Check validates {"to": [...]}: 1 to MaxRecipients addresses, each alone (a name is
// dropped), with a domain name; duplicates are dropped. The preview masks each local part
// but its first character ("a***@example.com"), and shows the first address only.
func (k *Email) Check(target json.RawMessage) ([]byte, string, error) {
	return checkEmailTarget(target)
}

func checkEmailTarget(target json.RawMessage) ([]byte, string, error) {
	var t emailTarget
	if err := decodeTarget(target, &t); err != nil {
		return nil, "", err
	}
	if len(t.To) == 0 {
		return nil, "", &TargetError{Field: "to", Message: "is required: a list of 1 to " + strconv.Itoa(MaxRecipients) + " email addresses"}
	}
	if len(t.To) > MaxRecipients {
		return nil, "", &TargetError{Field: "to", Message: fmt.Sprintf("has %d addresses; at most %d", len(t.To), MaxRecipients)}
	}
	var out []string
	for i, raw := range t.To {
		addr, msg := checkAddress(raw)
		if msg != "" {
			return nil, "", &TargetError{Field: "to[" + strconv.Itoa(i) + "]", Message: msg}
		}
		if !slices.Contains(out, addr) {
			out = append(out, addr)
		}
	}
	normalized, err := json.Marshal(emailTarget{To: out})
	if err != nil {
		return nil, "", fmt.Errorf("encoding the target: %w", err)
	}
	preview := maskAddress(out[0])
	if len(out) > 1 {
		preview += fmt.Sprintf(" and %d more", len(out)-1)
	}
	return normalized, preview, nil
}

// checkAddress parses one recipient and returns its address with the domain in lower
// case, or what is wrong with it (without quoting it).
func checkAddress(raw string) (string, string) {
	a, err := mail.ParseAddress(strings.TrimSpace(raw))
	if err != nil {
		return "", "is not an email address"
	}
	at := strings.LastIndexByte(a.Address, '@')
	local, domain := a.Address[:at], strings.ToLower(a.Address[at+1:])
	// A domain literal ([192.0.2.1]) or a bare host name (root@localhost) would have the
	// operator's server deliver somewhere no workspace should send to.
	if strings.HasPrefix(domain, "[") || !strings.Contains(strings.Trim(domain, "."), ".") {
		return "", "must have a domain name (name@example.com)"
	}
	// A local part that needs quoting ("john doe"@...) is legal, but net/mail hands it
	// back unquoted, which is no address to give in RCPT TO.
	if strings.ContainsFunc(local, func(r rune) bool { return r <= ' ' || strings.ContainsRune(`"\(),:;<>@[]`, r) }) {
		return "", "must be a plain address (no quoted local part)"
	}
	if len(a.Address) > 254 {
		return "", "is longer than 254 characters"
	}
	return local + "@" + domain, ""
}

// maskAddress keeps the first character of the local part and the domain.
func maskAddress(addr string) string {
	at := strings.LastIndexByte(addr, '@')
	if at <= 0 {
		return "***"
	}
	first := []rune(addr[:at])[0]
	return string(first) + "***" + addr[at:]
}

// Send delivers the message and answers the server's reply to its end of data (250).
func (k *Email) Send(ctx context.Context, _ Env, target []byte, n Notification) (int, error) {
	var t emailTarget
	if err := json.Unmarshal(target, &t); err != nil || len(t.To) == 0 {
		return 0, errors.New("the stored target does not read as {\"to\": [...]}")
	}
	msg, err := composeEmail(k.from, t.To, n)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	conn, err := k.dial(ctx)
	if err != nil {
		return 0, k.interrupted(ctx, fmt.Errorf("connecting to the SMTP server %s: %w", k.cfg.Host, err))
	}
	// net/smtp takes no context: the deadline bounds every read and write, and a cancel
	// moves it to now, which fails the call in progress at once.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	c, err := smtp.NewClient(conn, k.cfg.Host)
	if err != nil {
		_ = conn.Close()
		return 0, k.interrupted(ctx, k.replyError("greeting", err, t.To))
	}
	defer func() { _ = c.Close() }()
	if err := k.deliver(c, t.To, msg); err != nil {
		return 0, k.interrupted(ctx, err)
	}
	// The message is accepted once DATA's end is answered 250; QUIT failing after it
	// changes nothing.
	_ = c.Quit()
	return 250, nil
}

// interrupted returns err, or the context's error when the context ended the dialogue:
// the moved deadline shows as an i/o timeout, which would hide whether the caller gave up
// or the delivery's time ran out.
func (k *Email) interrupted(ctx context.Context, err error) error {
	var se *SendError
	if errors.As(err, &se) {
		return err
	}
	ctxErr := ctx.Err()
	if dl, ok := ctx.Deadline(); ctxErr == nil && ok && !time.Now().Before(dl) {
		// The connection's deadline is the context's: a read may time out an instant
		// before the context's own timer marks it done.
		ctxErr = context.DeadlineExceeded
	}
	if ctxErr == nil {
		return err
	}
	return fmt.Errorf("sending the email through %s: %w", k.cfg.Host, ctxErr)
}

// dial connects to the server, with TLS from the start for SecurityTLS.
func (k *Email) dial(ctx context.Context) (net.Conn, error) {
	addr := net.JoinHostPort(k.cfg.Host, strconv.Itoa(k.cfg.Port))
	if k.cfg.Security == SecurityTLS {
		d := &tls.Dialer{Config: k.cfg.TLS}
		return d.DialContext(ctx, "tcp", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// deliver runs the SMTP dialogue after the greeting.
func (k *Email) deliver(c *smtp.Client, to []string, msg []byte) error {
	if err := c.Hello(k.cfg.LocalName); err != nil {
		return k.replyError("EHLO", err, to)
	}
	if k.cfg.Security == SecuritySTARTTLS {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return errors.New("the SMTP server does not offer STARTTLS; the message was not sent in the clear")
		}
		if err := c.StartTLS(k.cfg.TLS); err != nil {
			return k.replyError("STARTTLS", err, to)
		}
	}
	if k.cfg.Username != "" {
		ok, mechanisms := c.Extension("AUTH")
		if !ok {
			return errors.New("the SMTP server offers no authentication, but a username is configured")
		}
		if err := c.Auth(k.auth(mechanisms)); err != nil {
			return k.replyError("authentication", err, to)
		}
	}
	if err := c.Mail(k.from.Address); err != nil {
		return k.replyError("sender", err, to)
	}
	for _, rcpt := range to {
		if err := c.Rcpt(rcpt); err != nil {
			return k.replyError("recipient", err, to)
		}
	}
	w, err := c.Data()
	if err != nil {
		return k.replyError("DATA", err, to)
	}
	if _, err := w.Write(msg); err != nil {
		_ = w.Close()
		return k.replyError("message", err, to)
	}
	if err := w.Close(); err != nil {
		return k.replyError("message", err, to)
	}
	return nil
}

// auth picks PLAIN, or LOGIN for a server that offers LOGIN and not PLAIN (Microsoft 365
// among them).
func (k *Email) auth(mechanisms string) smtp.Auth {
	offered := strings.Fields(strings.ToUpper(mechanisms))
	if !slices.Contains(offered, "PLAIN") && slices.Contains(offered, "LOGIN") {
		return &loginAuth{username: k.cfg.Username, password: k.cfg.Password, host: k.cfg.Host}
	}
	return smtp.PlainAuth("", k.cfg.Username, k.cfg.Password, k.cfg.Host)
}

// replyError turns a server's refusal into a *SendError with its reply code, and any
// other failure into an error naming the step. A server's reply often quotes the
// recipient it refuses: the target's addresses are masked in what it said.
func (k *Email) replyError(step string, err error, to []string) error {
	var tpErr *textproto.Error
	if errors.As(err, &tpErr) {
		said := tpErr.Msg
		for _, addr := range to {
			said = replaceFold(said, addr, maskAddress(addr))
		}
		return &SendError{Status: tpErr.Code, Message: cut(step+" refused: "+strings.Join(strings.Fields(said), " "), maxAnswerPreview)}
	}
	return fmt.Errorf("SMTP %s: %w", step, err)
}

// replaceFold replaces every occurrence of old in s, in any case, with new.
func replaceFold(s, old, new string) string {
	if old == "" {
		return s
	}
	lower, lowerOld := strings.ToLower(s), strings.ToLower(old)
	if len(lower) != len(s) {
		// A case change altered lengths (rare Unicode); mask nothing rather than garble.
		return strings.ReplaceAll(s, old, new)
	}
	var b strings.Builder
	for {
		i := strings.Index(lower, lowerOld)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		b.WriteString(new)
		s, lower = s[i+len(old):], lower[i+len(old):]
	}
}

// loginAuth is the LOGIN mechanism, which net/smtp lacks: the server asks for the username
// and then the password, each sent alone. Like net/smtp's PlainAuth, it sends them only
// over TLS or to the loopback interface, and only to the configured host.
type loginAuth struct {
	username, password, host string
}

func (a *loginAuth) Start(server *smtp.ServerInfo) (string, []byte, error) {
	if !server.TLS && !isLoopbackHost(server.Name) {
		return "", nil, errors.New("unencrypted connection")
	}
	if server.Name != a.host {
		return "", nil, errors.New("wrong host name")
	}
	return "LOGIN", nil, nil
}

func (a *loginAuth) Next(fromServer []byte, more bool) ([]byte, error) {
	if !more {
		return nil, nil
	}
	switch strings.ToLower(strings.TrimSpace(string(fromServer))) {
	case "username:", "user name", "username":
		return []byte(a.username), nil
	case "password:", "password":
		return []byte(a.password), nil
	}
	return nil, errors.New("unexpected LOGIN challenge from the SMTP server")
}

var _ Kind = (*Email)(nil)
