package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/modelgateway/caddy-modelgateway/delivery"
)

// Slack posts to a Slack incoming webhook ({"url": "https://hooks.slack.com/services/..."})
// a Block Kit message: a header, a section with the text and the fields, and a context
// line with the event and its time, over a plain "text" that notifications and clients
// without blocks show.
//
// Any https URL the client admits is taken, not only Slack's own host: Mattermost,
// Rocket.Chat and Zulip take Slack's incoming-webhook payload too, and the SSRF guard,
// not the host name, is what keeps a target from reaching inside. A URL on
// hooks.slack.com must be an incoming webhook's (/services/...).
type Slack struct {
	client *delivery.Client
}

// NewSlack returns the Slack kind; client checks targets' URLs as it calls them (nil: the
// default guard).
func NewSlack(client *delivery.Client) *Slack { return &Slack{client: guardOr(client)} }

// Check validates {"url": ...}.
func (k *Slack) Check(target json.RawMessage) ([]byte, string, error) {
	return checkURLTarget(k.client, target, slackShape)
}

// slackShape refuses a URL on Slack's webhook host that is not an incoming webhook's: a
// workflow trigger (/workflows/...) takes workflow variables, not blocks.
func slackShape(u *url.URL) string {
	if !strings.EqualFold(u.Hostname(), "hooks.slack.com") {
		return ""
	}
	if rest, ok := strings.CutPrefix(u.Path, "/services/"); !ok || strings.Count(strings.Trim(rest, "/"), "/") != 2 {
		return "a Slack incoming webhook URL is https://hooks.slack.com/services/T…/B…/…"
	}
	return ""
}

// Send posts the message.
func (k *Slack) Send(ctx context.Context, env Env, target []byte, n Notification) (int, error) {
	u, err := readURLTarget(target)
	if err != nil {
		return 0, err
	}
	return postJSON(ctx, env, u, nil, slackMessage(n))
}

// Block Kit's limits (api.slack.com/reference/block-kit/blocks): past them Slack refuses
// the whole message with invalid_blocks.
const (
	slackHeaderMax        = 150
	slackSectionTextMax   = 3000
	slackFieldsPerSection = 10
	slackFieldTextMax     = 2000
)

type slackPayload struct {
	Text   string       `json:"text"`
	Blocks []slackBlock `json:"blocks"`
}

type slackBlock struct {
	Type     string      `json:"type"`
	Text     *slackText  `json:"text,omitempty"`
	Fields   []slackText `json:"fields,omitempty"`
	Elements []slackText `json:"elements,omitempty"`
}

type slackText struct {
	Type  string `json:"type"`
	Text  string `json:"text"`
	Emoji bool   `json:"emoji,omitempty"`
}

// slackMessage renders n as Block Kit.
func slackMessage(n Notification) slackPayload {
	title := titleOf(n)
	blocks := []slackBlock{{Type: "header", Text: &slackText{Type: "plain_text", Text: cut(title, slackHeaderMax), Emoji: true}}}
	fields := make([]slackText, 0, len(n.Fields))
	for _, f := range n.Fields {
		fields = append(fields, slackText{Type: "mrkdwn", Text: cut("*"+slackEscape(f.Label)+"*\n"+slackEscape(orDash(f.Value)), slackFieldTextMax)})
	}
	// A section holds ten fields at most: more go to the sections after it.
	first := slackBlock{Type: "section"}
	if n.Text != "" {
		first.Text = &slackText{Type: "mrkdwn", Text: cut(slackEscape(n.Text), slackSectionTextMax)}
	}
	for first.Text != nil || len(fields) > 0 {
		sec := first
		first = slackBlock{Type: "section"}
		k := min(len(fields), slackFieldsPerSection)
		sec.Fields, fields = fields[:k], fields[k:]
		blocks = append(blocks, sec)
	}
	at := occurredAt(n)
	// <!date^…> shows the time in each reader's own time zone; the text after | is for
	// clients that cannot.
	context := fmt.Sprintf("%s · <!date^%d^{date_short_pretty} at {time}|%s>", slackEscape(eventLabel(n.Event)), at.Unix(), at.Format("2006-01-02 15:04 UTC"))
	if n.URL != "" {
		context += " · <" + slackEscape(n.URL) + "|Open>"
	}
	blocks = append(blocks, slackBlock{Type: "context", Elements: []slackText{{Type: "mrkdwn", Text: context}}})
	fallback := title
	if n.Text != "" {
		fallback += ": " + n.Text
	}
	return slackPayload{Text: slackEscape(fallback), Blocks: blocks}
}

// slackEscape escapes the three characters Slack's mrkdwn reads as markup, so that a
// name in a notification (a key's, a model's) cannot make a link or a mention.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

var _ Kind = (*Slack)(nil)
