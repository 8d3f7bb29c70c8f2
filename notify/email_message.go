package notify

import (
	"bytes"
	"fmt"
	"html/template"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"net/textproto"
	"strings"
	"time"
)

// emailHTML is the HTML part. html/template escapes every value, so that a name in a
// notification is shown, never read as markup; the styles are inline, as mail clients
// drop style sheets.
var emailHTML = template.Must(template.New("email").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title></head>
<body style="margin:0;padding:24px;background:#f4f4f5;font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;color:#18181b">
<table role="presentation" width="100%" cellpadding="0" cellspacing="0" style="max-width:600px;margin:0 auto;background:#ffffff;border-radius:8px;border-top:4px solid {{.Color}}">
<tr><td style="padding:24px">
<p style="margin:0 0 4px;font-size:12px;color:#71717a;text-transform:uppercase;letter-spacing:.05em">{{.Event}}</p>
<h1 style="margin:0 0 16px;font-size:20px">{{.Title}}</h1>
{{range .Paragraphs}}<p style="margin:0 0 12px;font-size:15px;line-height:1.5">{{.}}</p>
{{end}}{{if .Fields}}<table role="presentation" cellpadding="0" cellspacing="0" style="margin:8px 0 16px;font-size:14px;border-collapse:collapse">
{{range .Fields}}<tr><td style="padding:4px 16px 4px 0;color:#71717a;vertical-align:top">{{.Label}}</td><td style="padding:4px 0">{{.Value}}</td></tr>
{{end}}</table>
{{end}}{{if .URL}}<p style="margin:16px 0"><a href="{{.URL}}" style="display:inline-block;padding:8px 16px;background:#18181b;color:#ffffff;text-decoration:none;border-radius:6px">Open</a></p>
{{end}}<p style="margin:16px 0 0;font-size:12px;color:#71717a">{{.When}} · workspace {{.WorkspaceID}}</p>
</td></tr></table>
</body></html>
`))

// Border colours of the HTML part, by severity.
var emailColors = map[severity]string{
	severityInfo:    "#3b82f6",
	severityWarning: "#f59e0b",
	severityError:   "#ef4444",
}

// emailView is what the HTML template shows.
type emailView struct {
	Event, Title, Color, When, WorkspaceID string
	Paragraphs                             []string
	Fields                                 []Field
	// URL goes in an href: html/template replaces one that is not http(s) (a
	// javascript: link) with #ZgotmplZ.
	URL string
}

// composeEmail returns the whole message, headers and both parts, CRLF line ends.
func composeEmail(from *mail.Address, to []string, n Notification) ([]byte, error) {
	title := titleOf(n)
	at := occurredAt(n)
	when := at.Format("2006-01-02 15:04 UTC")

	var msg bytes.Buffer
	mw := multipart.NewWriter(&msg)
	rcpts := make([]string, len(to))
	for i, addr := range to {
		rcpts[i] = (&mail.Address{Address: addr}).String()
	}
	headers := [][2]string{
		{"From", from.String()},
		{"To", strings.Join(rcpts, ", ")},
		// Q-encoding also keeps a CR or LF of the title out of the header block.
		{"Subject", mime.QEncoding.Encode("utf-8", title)},
		{"Date", at.Format(time.RFC1123Z)},
		{"Message-ID", "<" + n.ID + "@" + domainOf(from.Address) + ">"},
		{"MIME-Version", "1.0"},
		{"Content-Type", "multipart/alternative; boundary=" + mw.Boundary()},
		// RFC 3834: an automatic message, to which vacation responders do not answer.
		{"Auto-Submitted", "auto-generated"},
		{"X-Notification-Event", n.Event},
	}
	for _, h := range headers {
		if h[0] == "Message-ID" && n.ID == "" {
			continue
		}
		fmt.Fprintf(&msg, "%s: %s\r\n", h[0], headerValue(h[1]))
	}
	msg.WriteString("\r\n")

	var text strings.Builder
	text.WriteString(title + "\n\n")
	if n.Text != "" {
		text.WriteString(n.Text + "\n\n")
	}
	for _, f := range n.Fields {
		text.WriteString(f.Label + ": " + f.Value + "\n")
	}
	if len(n.Fields) > 0 {
		text.WriteString("\n")
	}
	if n.URL != "" {
		text.WriteString(n.URL + "\n\n")
	}
	text.WriteString("-- \n" + eventLabel(n.Event) + " · " + when + " · workspace " + n.WorkspaceID + "\n")
	if err := writeQPPart(mw, "text/plain; charset=utf-8", crlf(text.String())); err != nil {
		return nil, err
	}

	view := emailView{
		Event: eventLabel(n.Event), Title: title, Color: emailColors[eventSeverity(n.Event)], When: when,
		WorkspaceID: n.WorkspaceID, Fields: n.Fields, URL: n.URL,
	}
	for p := range strings.SplitSeq(n.Text, "\n") {
		if strings.TrimSpace(p) != "" {
			view.Paragraphs = append(view.Paragraphs, p)
		}
	}
	var html bytes.Buffer
	if err := emailHTML.Execute(&html, view); err != nil {
		return nil, fmt.Errorf("rendering the email: %w", err)
	}
	if err := writeQPPart(mw, "text/html; charset=utf-8", crlf(html.String())); err != nil {
		return nil, err
	}
	if err := mw.Close(); err != nil {
		return nil, fmt.Errorf("composing the email: %w", err)
	}
	return msg.Bytes(), nil
}

// writeQPPart writes one quoted-printable part: lines stay under SMTP's 998 octets however
// long a paragraph is, and 8-bit text passes servers that do not offer 8BITMIME.
func writeQPPart(mw *multipart.Writer, contentType, body string) error {
	part, err := mw.CreatePart(textproto.MIMEHeader{
		"Content-Type":              {contentType},
		"Content-Transfer-Encoding": {"quoted-printable"},
	})
	if err != nil {
		return fmt.Errorf("composing the email: %w", err)
	}
	qp := quotedprintable.NewWriter(part)
	if _, err := qp.Write([]byte(body)); err != nil {
		return fmt.Errorf("composing the email: %w", err)
	}
	if err := qp.Close(); err != nil {
		return fmt.Errorf("composing the email: %w", err)
	}
	return nil
}

// crlf gives s the CRLF line ends of a message.
func crlf(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\n", "\r\n")
}

// headerValue drops any CR or LF from a header value: none of ours should carry one, and
// one that did would start a header of its own.
func headerValue(v string) string {
	return strings.NewReplacer("\r", "", "\n", "").Replace(v)
}

// domainOf is the domain of an address, for the Message-ID's right side.
func domainOf(addr string) string {
	if at := strings.LastIndexByte(addr, '@'); at >= 0 {
		return addr[at+1:]
	}
	return "localhost"
}
